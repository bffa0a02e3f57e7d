//! Writing what handlers produce for the protocol version of the client: the edge where one
//! model becomes each version's wire shape.

use modelctx_session::ProtocolVersion;
use modelctx_types::JsonObject;
use serde_json::{Value, json};

use crate::tool::{Content, Tool, ToolOutput};

use ProtocolVersion as V;

/// Whether `version` has structured tool output (`outputSchema`, `structuredContent`).
fn has_structured(version: V) -> bool {
    version >= V::V2025_06_18
}

/// Whether structured output must be a JSON object in `version` (2025-06-18 and 2025-11-25).
fn object_only(version: V) -> bool {
    has_structured(version) && version < V::V2026_07_28
}

/// A tool definition for `tools/list` in `version`.
pub(crate) fn tool(tool: &Tool, version: V) -> Value {
    let mut out = JsonObject::new();
    out.insert("name".into(), Value::from(tool.name.as_str()));
    for (key, value) in &tool.definition {
        let known = match key.as_str() {
            "description" => true,
            "annotations" => version >= V::V2025_03_26,
            "title" => version >= V::V2025_06_18,
            "icons" => version >= V::V2025_11_25,
            _ => true,
        };
        if known {
            out.insert(key.clone(), value.clone());
        }
    }
    out.insert(
        "inputSchema".into(),
        Value::Object(tool.input_schema.clone()),
    );
    if let Some(schema) = &tool.output_schema
        && has_structured(version)
    {
        out.insert(
            "outputSchema".into(),
            Value::Object(output_schema(schema, version)),
        );
    }
    Value::Object(out)
}

/// The output schema as `version` may carry it: an object schema stays; another one is wrapped
/// as the `result` member of an object for 2025-06-18 and 2025-11-25, whose structured output
/// must be an object.
pub(crate) fn output_schema(schema: &JsonObject, version: V) -> JsonObject {
    if !object_only(version) || is_object_schema(schema) {
        return schema.clone();
    }
    let mut inner = schema.clone();
    inner.remove("$schema");
    let mut wrapped = json!({
        "type": "object",
        "properties": {"result": Value::Object(inner)},
        "required": ["result"],
    });
    if let Some(dialect) = schema.get("$schema") {
        wrapped["$schema"] = dialect.clone();
    }
    match wrapped {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn is_object_schema(schema: &JsonObject) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// A `tools/call` result in `version`.
pub(crate) fn tool_output(output: &ToolOutput, version: V) -> Value {
    let content: Vec<Value> = output
        .content
        .iter()
        .map(|block| content_block(block, version))
        .collect();
    let mut result = json!({ "content": content });
    if output.is_error {
        result["isError"] = Value::Bool(true);
    }
    if let Some(structured) = &output.structured
        && has_structured(version)
    {
        result["structuredContent"] = if object_only(version) && !structured.is_object() {
            json!({ "result": structured })
        } else {
            structured.clone()
        };
    }
    result
}

/// A content block in `version`: blocks the version does not know become text that says what
/// they were.
pub(crate) fn content_block(block: &Content, version: V) -> Value {
    let value = block.as_json();
    match value.get("type").and_then(Value::as_str) {
        Some("audio") if version < V::V2025_03_26 => {
            let mime = value
                .get("mimeType")
                .and_then(Value::as_str)
                .unwrap_or("audio");
            json!({"type": "text", "text": format!("[{mime} audio, not shown in this protocol version]")})
        }
        Some("resource_link") if version < V::V2025_06_18 => {
            let uri = value.get("uri").and_then(Value::as_str).unwrap_or_default();
            json!({"type": "text", "text": uri})
        }
        _ => value.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::NoArgs;

    fn output(structured: Value) -> ToolOutput {
        ToolOutput::structured(structured)
    }

    #[test]
    fn structured_output_is_written_per_version() {
        let object = output(json!({"a": 1}));
        let number = output(json!(42));
        for v in [V::V2024_11_05, V::V2025_03_26] {
            assert!(tool_output(&object, v).get("structuredContent").is_none());
            assert_eq!(tool_output(&object, v)["content"][0]["text"], r#"{"a":1}"#);
        }
        for v in [V::V2025_06_18, V::V2025_11_25] {
            assert_eq!(
                tool_output(&object, v)["structuredContent"],
                json!({"a": 1})
            );
            assert_eq!(
                tool_output(&number, v)["structuredContent"],
                json!({"result": 42})
            );
        }
        assert_eq!(
            tool_output(&number, V::V2026_07_28)["structuredContent"],
            json!(42)
        );
        assert_eq!(
            tool_output(&ToolOutput::error("no"), V::V2026_07_28)["isError"],
            true
        );
    }

    #[test]
    fn output_schemas_follow_the_same_wrapping() {
        let integer: JsonObject = serde_json::from_value(json!({"type": "integer"})).unwrap();
        let wrapped = output_schema(&integer, V::V2025_11_25);
        assert_eq!(wrapped["properties"]["result"], json!({"type": "integer"}));
        assert_eq!(wrapped["required"], json!(["result"]));
        assert_eq!(output_schema(&integer, V::V2026_07_28), integer);
        let object: JsonObject = serde_json::from_value(json!({"type": "object"})).unwrap();
        assert_eq!(output_schema(&object, V::V2025_06_18), object);
    }

    #[test]
    fn definitions_carry_only_what_the_version_knows() {
        async fn noop(_: NoArgs) -> &'static str {
            ""
        }
        let t = Tool::with_input_schema("t", JsonObject::new(), noop)
            .title("T")
            .description("d")
            .icons(vec![json!({"src": "https://x/i.png"})])
            .output_schema(JsonObject::new());
        let old = tool(&t, V::V2024_11_05);
        assert!(old.get("title").is_none() && old.get("icons").is_none());
        assert!(old.get("outputSchema").is_none());
        assert_eq!(old["description"], "d");
        let new = tool(&t, V::V2026_07_28);
        assert_eq!(new["title"], "T");
        assert!(new.get("icons").is_some() && new.get("outputSchema").is_some());
    }

    #[test]
    fn blocks_older_versions_lack_become_text() {
        let audio = Content::audio("AAAA", "audio/wav");
        assert_eq!(content_block(&audio, V::V2024_11_05)["type"], "text");
        assert_eq!(content_block(&audio, V::V2025_03_26)["type"], "audio");
        let link = Content::resource_link("file:///a", "a");
        assert_eq!(content_block(&link, V::V2025_03_26)["text"], "file:///a");
        assert_eq!(
            content_block(&link, V::V2025_06_18)["type"],
            "resource_link"
        );
    }
}
