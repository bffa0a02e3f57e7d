//! The header names, and the body fields the headers mirror.

use modelctx_types::consts::{
    PromptsGet, ResourcesRead, TasksCancel, TasksGet, TasksUpdate, ToolsCall,
};
use serde_json::Value;

/// `MCP-Protocol-Version`: the protocol version of the request, on every POST.
pub const MCP_PROTOCOL_VERSION: &str = "MCP-Protocol-Version";
/// `Mcp-Session-Id`: the HTTP session id of the legacy (2025-03-26 to 2025-11-25) transport. The
/// 2026-07-28 transport has no sessions: a modern-only server ignores it and never sends one.
pub const MCP_SESSION_ID: &str = "Mcp-Session-Id";
/// `Mcp-Method`: mirrors the JSON-RPC `method` of every request.
pub const MCP_METHOD: &str = "Mcp-Method";
/// `Mcp-Name`: mirrors `params.name`, `params.uri` or `params.taskId`, depending on the method.
pub const MCP_NAME: &str = "Mcp-Name";
/// `Mcp-Param-`: the prefix of the headers that mirror tool arguments marked with `x-mcp-header`.
pub const MCP_PARAM_PREFIX: &str = "Mcp-Param-";
/// `Last-Event-ID`: SSE resumption in the legacy transport. The 2026-07-28 transport has no
/// resumable streams, and a modern-only server ignores the header.
pub const LAST_EVENT_ID: &str = "Last-Event-ID";
/// `x-mcp-header`: the `inputSchema` keyword that names the `Mcp-Param-{Name}` header of a
/// property.
pub const X_MCP_HEADER: &str = "x-mcp-header";
/// The `_meta` key of a request's protocol version.
pub(crate) use modelctx_types::meta_keys::PROTOCOL_VERSION as META_PROTOCOL_VERSION;
/// The body field `MCP-Protocol-Version` mirrors, as error messages name it.
pub(crate) const META_PROTOCOL_VERSION_FIELD: &str =
    "params._meta[\"io.modelcontextprotocol/protocolVersion\"]";

/// The body field `Mcp-Name` mirrors for `method`: the key in `params` and its label.
pub(super) fn name_source(method: &str) -> Option<(&'static str, &'static str)> {
    match method {
        ToolsCall::VALUE | PromptsGet::VALUE => Some(("name", "params.name")),
        ResourcesRead::VALUE => Some(("uri", "params.uri")),
        // The tasks extension (io.modelcontextprotocol/tasks) routes these by task id.
        TasksGet::VALUE | TasksUpdate::VALUE | TasksCancel::VALUE => {
            Some(("taskId", "params.taskId"))
        }
        _ => None,
    }
}

pub(crate) fn meta_protocol_version(params: Option<&Value>) -> Option<&str> {
    params?.get("_meta")?.get(META_PROTOCOL_VERSION)?.as_str()
}

pub(super) fn argument<'a>(params: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    argument_in(params?.get("arguments"), path)
}

/// The argument at `path` inside `arguments`, unless absent or `null`.
pub(super) fn argument_in<'a>(arguments: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    let mut current = arguments?;
    for segment in path {
        current = current.as_object()?.get(segment)?;
    }
    Some(current).filter(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use http::HeaderName;

    use super::*;

    // --- constants ------------------------------------------------------------------------

    #[test]
    fn header_name_constants() {
        assert_eq!(MCP_PROTOCOL_VERSION, "MCP-Protocol-Version");
        assert_eq!(MCP_SESSION_ID, "Mcp-Session-Id");
        assert_eq!(MCP_METHOD, "Mcp-Method");
        assert_eq!(MCP_NAME, "Mcp-Name");
        assert_eq!(MCP_PARAM_PREFIX, "Mcp-Param-");
        assert_eq!(LAST_EVENT_ID, "Last-Event-ID");
        assert_eq!(X_MCP_HEADER, "x-mcp-header");
        for name in [
            MCP_PROTOCOL_VERSION,
            MCP_SESSION_ID,
            MCP_METHOD,
            MCP_NAME,
            LAST_EVENT_ID,
        ] {
            assert!(HeaderName::from_bytes(name.as_bytes()).is_ok(), "{name}");
        }
    }

    #[test]
    fn the_version_field_label_names_the_meta_key() {
        assert_eq!(
            META_PROTOCOL_VERSION_FIELD,
            format!("params._meta[{META_PROTOCOL_VERSION:?}]")
        );
    }

    #[test]
    fn mcp_name_mirrors_the_routing_field_of_its_methods() {
        for method in ["tools/call", "prompts/get"] {
            assert_eq!(name_source(method), Some(("name", "params.name")));
        }
        assert_eq!(name_source("resources/read"), Some(("uri", "params.uri")));
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            assert_eq!(name_source(method), Some(("taskId", "params.taskId")));
        }
        for method in ["tools/list", "tasks/list", "Tools/Call", "initialize", ""] {
            assert_eq!(name_source(method), None, "{method}");
        }
    }
}
