//! Which methods exist in which version. The versions themselves ([`ProtocolVersion`], [`Era`])
//! are vocabulary and live in `modelctx-types`.

pub use modelctx_types::{Era, ProtocolVersion};

/// Who sends a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Client to server.
    ToServer,
    /// Server to client.
    ToClient,
}

use ProtocolVersion as V;

/// Whether `method` is a request the sender may send in `version` (JSON-RPC requests only: the
/// 2026-07-28 input requests embedded in results are not requests).
pub(crate) fn request_exists(version: V, method: &str, direction: Direction) -> bool {
    let legacy = version <= V::V2025_11_25;
    let modern = version >= V::V2026_07_28;
    match direction {
        Direction::ToServer => match method {
            "initialize"
            | "ping"
            | "logging/setLevel"
            | "resources/subscribe"
            | "resources/unsubscribe" => legacy,
            "server/discover" | "subscriptions/listen" => modern,
            "resources/list"
            | "resources/templates/list"
            | "resources/read"
            | "prompts/list"
            | "prompts/get"
            | "tools/list"
            | "tools/call"
            | "completion/complete" => true,
            "tasks/get" | "tasks/cancel" | "tasks/result" | "tasks/list" => {
                version == V::V2025_11_25
            }
            _ => false,
        },
        Direction::ToClient => match method {
            "ping" | "sampling/createMessage" | "roots/list" => legacy,
            "elicitation/create" => legacy && version >= V::V2025_06_18,
            "tasks/get" | "tasks/cancel" | "tasks/result" | "tasks/list" => {
                version == V::V2025_11_25
            }
            _ => false,
        },
    }
}

/// Whether `method` is a notification the sender may send in `version`.
pub(crate) fn notification_exists(version: V, method: &str, direction: Direction) -> bool {
    let legacy = version <= V::V2025_11_25;
    let modern = version >= V::V2026_07_28;
    match direction {
        Direction::ToServer => match method {
            "notifications/initialized" | "notifications/roots/list_changed" => legacy,
            "notifications/cancelled" => true,
            "notifications/progress" => legacy,
            "notifications/tasks/status" => version == V::V2025_11_25,
            _ => false,
        },
        Direction::ToClient => match method {
            "notifications/cancelled"
            | "notifications/progress"
            | "notifications/message"
            | "notifications/resources/list_changed"
            | "notifications/resources/updated"
            | "notifications/prompts/list_changed"
            | "notifications/tools/list_changed" => true,
            "notifications/elicitation/complete" | "notifications/tasks/status" => {
                version == V::V2025_11_25
            }
            "notifications/subscriptions/acknowledged" | "notifications/tasks" => modern,
            _ => false,
        },
    }
}

/// The requests of the `io.modelcontextprotocol/tasks` extension (2026-07-28 and later), which
/// exist only when the server declared the extension.
pub(crate) fn is_tasks_extension_request(version: V, method: &str) -> bool {
    version >= V::V2026_07_28 && matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel")
}

/// The six methods whose 2026-07-28 results are cacheable and must carry `ttlMs` and
/// `cacheScope`.
pub(crate) fn is_cacheable(method: &str) -> bool {
    matches!(
        method,
        "server/discover"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    )
}

/// The methods that may answer with an `input_required` result (2026-07-28).
pub(crate) fn allows_input_required(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_tables_follow_the_spec() {
        use Direction::*;
        // 15, 15, 16, 20 and 10 request methods (both directions, counted once).
        let all = [
            "initialize",
            "ping",
            "server/discover",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "resources/subscribe",
            "resources/unsubscribe",
            "subscriptions/listen",
            "prompts/list",
            "prompts/get",
            "tools/list",
            "tools/call",
            "logging/setLevel",
            "completion/complete",
            "sampling/createMessage",
            "roots/list",
            "elicitation/create",
            "tasks/get",
            "tasks/result",
            "tasks/list",
            "tasks/cancel",
        ];
        let counts: Vec<usize> = ProtocolVersion::ALL
            .iter()
            .map(|v| {
                all.iter()
                    .filter(|m| request_exists(*v, m, ToServer) || request_exists(*v, m, ToClient))
                    .count()
            })
            .collect();
        assert_eq!(counts, [15, 15, 16, 20, 10]);
        assert!(!request_exists(V::V2026_07_28, "ping", ToServer));
        assert!(!request_exists(
            V::V2025_03_26,
            "elicitation/create",
            ToClient
        ));
        assert!(!request_exists(
            V::V2026_07_28,
            "sampling/createMessage",
            ToClient
        ));
        assert!(notification_exists(
            V::V2026_07_28,
            "notifications/cancelled",
            ToServer
        ));
        assert!(!notification_exists(
            V::V2026_07_28,
            "notifications/initialized",
            ToServer
        ));
        assert!(!notification_exists(
            V::V2025_06_18,
            "notifications/elicitation/complete",
            ToClient
        ));
    }
}
