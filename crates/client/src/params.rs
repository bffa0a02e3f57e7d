//! The `x-mcp-header` rules of the tools a modern server lists over Streamable HTTP: the
//! tools that break one are left out of the client's view, and the others' parameters are
//! remembered for the `Mcp-Param-{Name}` headers of their calls (handed to the transport with
//! each call, see [`SendOptions::param_headers`]).
//!
//! [`SendOptions::param_headers`]: modelctx_http::client::SendOptions::param_headers

use std::sync::Arc;

use modelctx_http::headers::{ParamHeader, SchemaHeaderError, param_headers};
use serde_json::Value;
use serde_json::value::RawValue;

/// The `x-mcp-header` parameters of listed tools, by tool name.
pub(crate) type ToolHeaders = Vec<(String, Arc<[ParamHeader]>)>;

/// A tool left out of a `tools/list` result, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dropped {
    pub(crate) tool: String,
    pub(crate) reason: SchemaHeaderError,
}

/// A `tools/list` result read for its `x-mcp-header` rules.
#[derive(Debug)]
pub(crate) struct Filtered {
    /// The result without the tools that break a rule (the result as it came when none does).
    pub(crate) result: Box<RawValue>,
    /// The `x-mcp-header` parameters of each valid tool that has some.
    pub(crate) headers: ToolHeaders,
    /// The tools left out.
    pub(crate) dropped: Vec<Dropped>,
}

/// Reads a `tools/list` result: the parameters of every valid tool, and the result without the
/// tools whose `x-mcp-header` annotations break a rule (the specification requires a client on
/// Streamable HTTP to drop them). `None` when the result does not have the shape of a
/// `tools/list` result: it is left as it is, for the typed decoding to judge.
pub(crate) fn filter_list(result: &RawValue) -> Option<Filtered> {
    let mut value: Value = serde_json::from_str(result.get()).ok()?;
    let tools = value.get_mut("tools")?.as_array_mut()?;
    let mut dropped = Vec::new();
    let mut headers = Vec::new();
    tools.retain(|tool| {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            return true; // not a tool: the typed decoding will say so
        };
        let Some(schema) = tool.get("inputSchema").and_then(Value::as_object) else {
            return true;
        };
        match param_headers(schema) {
            Ok(params) => {
                if !params.is_empty() {
                    headers.push((name.to_owned(), params.into()));
                }
                true
            }
            Err(reason) => {
                dropped.push(Dropped {
                    tool: name.to_owned(),
                    reason,
                });
                false
            }
        }
    });
    let result = if dropped.is_empty() {
        result.to_owned()
    } else {
        serde_json::value::to_raw_value(&value).ok()?
    };
    Some(Filtered {
        result,
        headers,
        dropped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, properties: Value) -> Value {
        json!({"name": name, "inputSchema": {"type": "object", "properties": properties}})
    }

    type Run = (
        Vec<String>,
        Vec<(String, String)>,
        Vec<(String, Arc<[ParamHeader]>)>,
    );

    fn run(tools: Vec<Value>) -> Run {
        let raw = serde_json::value::to_raw_value(&json!({"tools": tools, "ttlMs": 0})).unwrap();
        let filtered = filter_list(&raw).unwrap();
        let kept: Value = serde_json::from_str(filtered.result.get()).unwrap();
        assert_eq!(kept["ttlMs"], 0, "the rest of the result is kept");
        let names = kept["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        let dropped = filtered
            .dropped
            .into_iter()
            .map(|d| (d.tool, d.reason.to_string()))
            .collect();
        (names, dropped, filtered.headers)
    }

    /// The constraint table: each row a property schema, and whether the tool survives.
    #[test]
    fn tools_breaking_an_x_mcp_header_rule_are_dropped_and_named() {
        let rows: Vec<(&str, Value, bool)> = vec![
            ("plain", json!({"a": {"type": "string"}}), true),
            (
                "string",
                json!({"a": {"type": "string", "x-mcp-header": "Region"}}),
                true,
            ),
            (
                "integer",
                json!({"a": {"type": "integer", "x-mcp-header": "N"}}),
                true,
            ),
            (
                "boolean",
                json!({"a": {"type": "boolean", "x-mcp-header": "Flag"}}),
                true,
            ),
            (
                "nested",
                json!({"o": {"type": "object", "properties": {
                "a": {"type": "string", "x-mcp-header": "Deep"}}}}),
                true,
            ),
            (
                "number",
                json!({"a": {"type": "number", "x-mcp-header": "N"}}),
                false,
            ),
            (
                "object",
                json!({"a": {"type": "object", "x-mcp-header": "O"}}),
                false,
            ),
            ("untyped", json!({"a": {"x-mcp-header": "U"}}), false),
            (
                "type-list",
                json!({"a": {"type": ["string", "null"], "x-mcp-header": "T"}}),
                false,
            ),
            (
                "empty",
                json!({"a": {"type": "string", "x-mcp-header": ""}}),
                false,
            ),
            (
                "space",
                json!({"a": {"type": "string", "x-mcp-header": "My Header"}}),
                false,
            ),
            (
                "colon",
                json!({"a": {"type": "string", "x-mcp-header": "a:b"}}),
                false,
            ),
            (
                "not-a-string",
                json!({"a": {"type": "string", "x-mcp-header": 7}}),
                false,
            ),
            (
                "duplicate",
                json!({
                "a": {"type": "string", "x-mcp-header": "Region"},
                "b": {"type": "string", "x-mcp-header": "rEGION"}}),
                false,
            ),
            (
                "items",
                json!({"a": {"type": "array", "items": {
                "type": "string", "x-mcp-header": "I"}}}),
                false,
            ),
            (
                "anyOf",
                json!({"a": {"anyOf": [{"type": "string", "x-mcp-header": "A"}]}}),
                false,
            ),
        ];
        let tools = rows.iter().map(|(n, p, _)| tool(n, p.clone())).collect();
        let (kept, dropped, headers) = run(tools);
        for (name, _, valid) in &rows {
            assert_eq!(kept.contains(&name.to_string()), *valid, "{name}");
            assert_eq!(
                dropped.iter().any(|(n, _)| n == name),
                !*valid,
                "{name} is named among the dropped"
            );
        }
        assert!(dropped.iter().all(|(_, reason)| !reason.is_empty()));
        let known: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(known, ["string", "integer", "boolean", "nested"]);
        assert_eq!(headers[0].1[0].name(), "Region");
        assert_eq!(headers[3].1[0].path(), ["o", "a"]);
    }

    #[test]
    fn a_valid_listing_is_passed_on_as_it_came() {
        let text = r#"{"tools": [{"name": "t", "inputSchema": {"type": "object"}}],  "x": 1}"#;
        let raw = RawValue::from_string(text.into()).unwrap();
        let filtered = filter_list(&raw).unwrap();
        assert_eq!(filtered.result.get(), text);
        assert!(filtered.headers.is_empty() && filtered.dropped.is_empty());
    }

    #[test]
    fn a_result_of_another_shape_is_left_alone() {
        let raw = serde_json::value::to_raw_value(&json!({"nothing": 1})).unwrap();
        assert!(filter_list(&raw).is_none());
    }
}
