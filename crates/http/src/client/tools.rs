//! The tools a modern server listed, for the `Mcp-Param-{Name}` headers of later calls.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::headers::{ParamHeader, SchemaHeaderError, param_headers};

/// A tool left out of a `tools/list` result, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dropped {
    pub(crate) tool: String,
    pub(crate) reason: SchemaHeaderError,
}

/// The `x-mcp-header` parameters of each tool listed, bounded.
#[derive(Debug, Default)]
pub(crate) struct ToolHeaders {
    tools: HashMap<String, Arc<[ParamHeader]>>,
}

impl ToolHeaders {
    pub(crate) fn get(&self, tool: &str) -> Option<Arc<[ParamHeader]>> {
        self.tools.get(tool).cloned()
    }

    pub(crate) fn len(&self) -> usize {
        self.tools.len()
    }

    /// Remembers a tool's parameters; a new tool past `max` is not remembered (its calls go
    /// without `Mcp-Param-*` headers until a -32020 makes the client list again).
    fn insert(&mut self, name: &str, params: Vec<ParamHeader>, max: usize) {
        if let Some(entry) = self.tools.get_mut(name) {
            *entry = params.into();
        } else if self.tools.len() < max {
            self.tools.insert(name.to_owned(), params.into());
        }
    }
}

/// Reads a `tools/list` result: remembers the parameters of every valid tool and returns the
/// result without the tools whose `x-mcp-header` annotations break a rule (the spec requires a
/// client on Streamable HTTP to drop them), the dropped ones listed. `None` when the result
/// does not have the shape of a `tools/list` result: it is passed on as it is, for the session
/// to judge.
pub(crate) fn filter_list(
    result: &RawValue,
    cache: &mut ToolHeaders,
    max: usize,
) -> Option<(Box<RawValue>, Vec<Dropped>)> {
    let mut value: Value = serde_json::from_str(result.get()).ok()?;
    let tools = value.get_mut("tools")?.as_array_mut()?;
    let mut dropped = Vec::new();
    tools.retain(|tool| {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            return true; // not a tool: the session's typed decoding will say so
        };
        let Some(schema) = tool.get("inputSchema").and_then(Value::as_object) else {
            return true;
        };
        match param_headers(schema) {
            Ok(params) => {
                cache.insert(name, params, max);
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
    if dropped.is_empty() {
        return Some((result.to_owned(), dropped));
    }
    let raw = serde_json::value::to_raw_value(&value).ok()?;
    Some((raw, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, properties: Value) -> Value {
        json!({"name": name, "inputSchema": {"type": "object", "properties": properties}})
    }

    fn run(tools: Vec<Value>) -> (Vec<String>, Vec<(String, String)>, ToolHeaders) {
        let raw = serde_json::value::to_raw_value(&json!({"tools": tools, "ttlMs": 0})).unwrap();
        let mut cache = ToolHeaders::default();
        let (kept, dropped) = filter_list(&raw, &mut cache, 100).unwrap();
        let kept: Value = serde_json::from_str(kept.get()).unwrap();
        assert_eq!(kept["ttlMs"], 0, "the rest of the result is kept");
        let names = kept["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        let dropped = dropped
            .into_iter()
            .map(|d| (d.tool, d.reason.to_string()))
            .collect();
        (names, dropped, cache)
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
        let (kept, dropped, cache) = run(tools);
        for (name, _, valid) in &rows {
            assert_eq!(kept.contains(&name.to_string()), *valid, "{name}");
            assert_eq!(
                dropped.iter().any(|(n, _)| n == name),
                !*valid,
                "{name} is named among the dropped"
            );
            assert_eq!(cache.get(name).is_some(), *valid, "{name} in the cache");
        }
        assert!(dropped.iter().all(|(_, reason)| !reason.is_empty()));
        let region = cache.get("string").unwrap();
        assert_eq!(region[0].name(), "Region");
        assert_eq!(cache.get("plain").unwrap().len(), 0);
    }

    #[test]
    fn the_cache_is_bounded_and_updated_in_place() {
        let raw =
            |tools: Vec<Value>| serde_json::value::to_raw_value(&json!({"tools": tools})).unwrap();
        let mut cache = ToolHeaders::default();
        let many: Vec<Value> = (0..5).map(|i| tool(&format!("t{i}"), json!({}))).collect();
        filter_list(&raw(many), &mut cache, 3).unwrap();
        assert_eq!(cache.len(), 3);
        let changed = tool("t0", json!({"a": {"type": "string", "x-mcp-header": "A"}}));
        filter_list(&raw(vec![changed]), &mut cache, 3).unwrap();
        assert_eq!(cache.get("t0").unwrap().len(), 1);
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn a_result_of_another_shape_is_left_alone() {
        let raw = serde_json::value::to_raw_value(&json!({"nothing": 1})).unwrap();
        assert!(filter_list(&raw, &mut ToolHeaders::default(), 10).is_none());
    }
}
