//! Which methods exist in which version: the table generated from each version's schema
//! ([`modelctx_types::methods`]) and, written out here, the rules of extensions (the 2026-07-28
//! tasks extension) and the method groups of 2026-07-28 results. The versions themselves
//! ([`ProtocolVersion`], [`Era`]) are vocabulary and live in `modelctx-types`.

pub use modelctx_types::{Era, ProtocolVersion};

use modelctx_types::consts::{
    NotificationsTasks, PromptsGet, PromptsList, ResourcesList, ResourcesRead,
    ResourcesTemplatesList, ServerDiscover, TasksCancel, TasksGet, TasksUpdate, ToolsCall,
    ToolsList,
};
use modelctx_types::methods;

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
/// 2026-07-28 input requests embedded in results are not requests). The table is generated from
/// each version's schema; extension methods are not in it (see [`is_tasks_extension_request`]).
pub(crate) fn request_exists(version: V, method: &str, direction: Direction) -> bool {
    let table = methods::of(version);
    let sent = match direction {
        Direction::ToServer => table.client_requests,
        Direction::ToClient => table.server_requests,
    };
    sent.contains(&method)
}

/// Whether `method` is a notification the sender may send in `version`: the generated table of
/// the version and, from 2026-07-28 on, the tasks extension's `notifications/tasks` from the
/// server (an extension rule, kept here by hand; it does not check that the extension was
/// declared).
pub(crate) fn notification_exists(version: V, method: &str, direction: Direction) -> bool {
    let table = methods::of(version);
    match direction {
        Direction::ToServer => table.client_notifications.contains(&method),
        Direction::ToClient => {
            table.server_notifications.contains(&method)
                || (version >= V::V2026_07_28 && method == NotificationsTasks::VALUE)
        }
    }
}

/// The requests of the `io.modelcontextprotocol/tasks` extension (2026-07-28 and later), which
/// exist only when the server declared the extension.
pub(crate) fn is_tasks_extension_request(version: V, method: &str) -> bool {
    version >= V::V2026_07_28
        && [TasksGet::VALUE, TasksUpdate::VALUE, TasksCancel::VALUE].contains(&method)
}

/// The requests of the `io.modelcontextprotocol/skills` extension (`skills/list`, `skills/get`,
/// `resources/directory/read`), which exist only when the server declared the extension
/// ([`caps::request_gate`](crate::caps::request_gate) checks it). The extension's page names
/// 2026-07-28 as its base revision, but its requests are plain JSON-RPC and the reference SDK
/// and the conformance suite use it in legacy sessions too: it is allowed in every version.
pub(crate) fn is_skills_extension_request(method: &str) -> bool {
    modelctx_types::skills::is_extension_method(method)
}

/// The six methods whose 2026-07-28 results are cacheable and must carry `ttlMs` and
/// `cacheScope`, and the skills extension's `skills/list` and `skills/get`.
pub(crate) fn is_cacheable(method: &str) -> bool {
    [
        modelctx_types::skills::SKILLS_LIST,
        modelctx_types::skills::SKILLS_GET,
        ServerDiscover::VALUE,
        ToolsList::VALUE,
        PromptsList::VALUE,
        ResourcesList::VALUE,
        ResourcesTemplatesList::VALUE,
        ResourcesRead::VALUE,
    ]
    .contains(&method)
}

/// The four list methods (of the cacheable six) whose results take
/// [`ServerConfig::list_cache`](crate::ServerConfig::list_cache).
pub(crate) fn is_list(method: &str) -> bool {
    [
        ToolsList::VALUE,
        PromptsList::VALUE,
        ResourcesList::VALUE,
        ResourcesTemplatesList::VALUE,
    ]
    .contains(&method)
}

/// The methods that may answer with an `input_required` result (2026-07-28).
pub(crate) fn allows_input_required(method: &str) -> bool {
    [ToolsCall::VALUE, PromptsGet::VALUE, ResourcesRead::VALUE].contains(&method)
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

    #[test]
    fn extension_methods_are_rules_of_their_own() {
        use Direction::*;
        // Not in any version's table...
        assert!(!request_exists(V::V2026_07_28, "tasks/update", ToServer));
        assert!(
            !modelctx_types::methods::of(V::V2026_07_28)
                .server_notifications
                .contains(&"notifications/tasks")
        );
        // ...but allowed by the extension rules, from 2026-07-28 on only.
        assert!(is_tasks_extension_request(V::V2026_07_28, "tasks/update"));
        assert!(is_tasks_extension_request(V::V2026_07_28, "tasks/get"));
        assert!(!is_tasks_extension_request(V::V2026_07_28, "tasks/list"));
        assert!(!is_tasks_extension_request(V::V2025_11_25, "tasks/update"));
        assert!(notification_exists(
            V::V2026_07_28,
            "notifications/tasks",
            ToClient
        ));
        assert!(!notification_exists(
            V::V2026_07_28,
            "notifications/tasks",
            ToServer
        ));
        assert!(!notification_exists(
            V::V2025_11_25,
            "notifications/tasks",
            ToClient
        ));
        // The skills extension's requests, in every version (the server must declare it).
        for method in ["skills/list", "skills/get", "resources/directory/read"] {
            assert!(!request_exists(V::V2026_07_28, method, ToServer));
            assert!(is_skills_extension_request(method));
        }
        assert!(!is_skills_extension_request("skills/delete"));
        // 2025-11-25's tasks are part of the version itself.
        assert!(request_exists(V::V2025_11_25, "tasks/list", ToClient));
    }

    #[test]
    fn method_groups_of_modern_results() {
        assert!(is_cacheable("server/discover"));
        assert!(is_cacheable("resources/templates/list"));
        assert!(is_cacheable("skills/list") && is_cacheable("skills/get"));
        assert!(!is_cacheable("resources/directory/read"));
        assert!(!is_cacheable("tools/call"));
        assert!(allows_input_required("prompts/get"));
        assert!(!allows_input_required("tools/list"));
    }
}
