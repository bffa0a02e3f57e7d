//! Protocol versions, the two eras, and which methods exist in which version.

use std::fmt;

/// A protocol version this crate speaks.
///
/// Ordered by release date, so `a < b` means `a` is older.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ProtocolVersion {
    /// `2024-11-05`, the first release.
    V2024_11_05,
    /// `2025-03-26`: adds batches, audio, tool annotations, completions capability.
    V2025_03_26,
    /// `2025-06-18`: removes batches; adds elicitation and structured tool output.
    V2025_06_18,
    /// `2025-11-25`: the last initialize-based release (tasks, URL elicitation, sampling tools).
    V2025_11_25,
    /// `2026-07-28`: the stateless "modern" protocol.
    V2026_07_28,
}

/// The two eras of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Era {
    /// `initialize`-based sessions: 2025-11-25 and older.
    Legacy,
    /// Stateless requests that carry their version and client capabilities in `_meta`:
    /// 2026-07-28 and newer.
    Modern,
}

impl ProtocolVersion {
    /// Every version, oldest first.
    pub const ALL: &'static [ProtocolVersion] = &[
        ProtocolVersion::V2024_11_05,
        ProtocolVersion::V2025_03_26,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2026_07_28,
    ];

    /// The newest initialize-based version.
    pub const LATEST_LEGACY: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// The newest version.
    pub const LATEST: ProtocolVersion = ProtocolVersion::V2026_07_28;

    /// The version as on the wire (`"2025-11-25"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2024_11_05 => "2024-11-05",
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
        }
    }

    /// The version a wire string names, or `None` for a version this crate does not know.
    pub fn parse(s: &str) -> Option<ProtocolVersion> {
        ProtocolVersion::ALL
            .iter()
            .copied()
            .find(|v| v.as_str() == s)
    }

    /// The era the version belongs to.
    pub const fn era(self) -> Era {
        match self {
            ProtocolVersion::V2026_07_28 => Era::Modern,
            _ => Era::Legacy,
        }
    }

    /// Whether JSON-RPC batches are allowed (2025-03-26 only).
    pub const fn allows_batches(self) -> bool {
        matches!(self, ProtocolVersion::V2025_03_26)
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    fn versions_parse_and_print() {
        for v in ProtocolVersion::ALL {
            assert_eq!(ProtocolVersion::parse(v.as_str()), Some(*v));
        }
        assert_eq!(ProtocolVersion::parse("2025-01-01"), None);
        assert_eq!(ProtocolVersion::LATEST.era(), Era::Modern);
        assert_eq!(ProtocolVersion::LATEST_LEGACY.era(), Era::Legacy);
        assert!(ProtocolVersion::V2024_11_05 < ProtocolVersion::V2026_07_28);
    }

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
