//! The request headers of the 2026-07-28 Streamable HTTP transport, checked in one place for both
//! sides.
//!
//! A modern POST mirrors parts of its JSON-RPC body into HTTP headers so that load balancers and
//! gateways can route without parsing the body:
//!
//! | header | body source | sent for |
//! |---|---|---|
//! | `MCP-Protocol-Version` | `params._meta["io.modelcontextprotocol/protocolVersion"]` | every request |
//! | `Mcp-Method` | `method` | every request |
//! | `Mcp-Name` | `params.name` / `params.uri` / `params.taskId` | `tools/call`, `prompts/get` / `resources/read` / `tasks/get`, `tasks/update`, `tasks/cancel` (tasks extension) |
//! | `Mcp-Param-{Name}` | the argument a tool's `inputSchema` marks with `x-mcp-header: "{Name}"` | `tools/call`, when the argument is present and not `null` |
//!
//! `Mcp-Name` and `Mcp-Param-{Name}` values that are not plain header-safe ASCII travel as
//! `=?base64?{standard, padded base64 of the UTF-8}?=` ([`encode_value`], [`decode_value`]).
//!
//! The same rules serve both ends:
//! * the client checks each tool's schema with [`param_headers`] when it lists tools (a tool whose
//!   annotations break a rule is dropped, with a warning naming the tool and the
//!   [`SchemaHeaderError`]), then builds the headers of each request with [`request_headers`];
//! * the server checks an incoming request with [`check_request`] (or, without parsing the whole
//!   params, [`RequestFields`] and [`check_request_fields`]). A failure is a
//!   [`HeaderMismatch`]: HTTP `400 Bad Request` with JSON-RPC error `-32020`.
//!
//! Nothing here does I/O or depends on the `server` feature.
//!
//! # Layout
//!
//! One file per concern, each with its tests: `names.rs` (the header names and the body fields
//! they mirror), `value.rs` (the plain and `=?base64?…?=` value forms, and escaping of a peer's
//! text), `schema.rs` (the `x-mcp-header` rules of a tool's `inputSchema`), `build.rs` (the
//! client's headers of a request), `check.rs` (the server's check of headers against the body)
//! and `decimal.rs` (exact comparison of numbers in headers and bodies).

mod build;
mod check;
mod decimal;
mod names;
mod schema;
mod value;

pub use build::{RequestHeaderError, request_headers};
pub use check::{
    HeaderMismatch, RequestFields, check_request, check_request_fields, check_version,
};
pub use names::{
    LAST_EVENT_ID, MCP_METHOD, MCP_NAME, MCP_PARAM_PREFIX, MCP_PROTOCOL_VERSION, MCP_SESSION_ID,
    X_MCP_HEADER,
};
pub use schema::{ParamHeader, ParamKind, SchemaHeaderError, param_headers};
pub use value::{ValueDecodeError, decode_value, encode_value};

// For the client, which reads the `_meta` version and escapes what it shows of a peer's text.
#[cfg(feature = "client")]
pub(crate) use names::meta_protocol_version;
#[cfg(feature = "client")]
pub(crate) use value::escape;

/// Helpers of the tests of every part.
#[cfg(test)]
mod test_util {
    use http::{HeaderMap, HeaderName, HeaderValue};
    use serde_json::{Map, Value, json};

    use super::{ParamHeader, param_headers};

    pub(super) fn schema(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    pub(super) fn headers_of(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    pub(super) fn to_map(pairs: Vec<(HeaderName, HeaderValue)>) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name, value);
        }
        map
    }

    pub(super) fn as_strings(pairs: &[(HeaderName, HeaderValue)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    pub(super) fn tool_headers() -> Vec<ParamHeader> {
        param_headers(&schema(json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "priority": {"type": "integer", "x-mcp-header": "Priority"},
                "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
                "method_val": {"type": "string", "x-mcp-header": "Method"},
                "greeting": {"type": "string", "x-mcp-header": "Greeting"},
                "options": {"type": "object", "properties": {
                    "tenant": {"type": "string", "x-mcp-header": "Tenant"}
                }},
                "query": {"type": "string"}
            }
        })))
        .unwrap()
    }

    pub(super) fn call(arguments: Value) -> Value {
        json!({
            "name": "execute_sql",
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        })
    }
}
