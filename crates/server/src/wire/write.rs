//! Writing what handlers produce for the protocol version of the client: the edge where one
//! model becomes each version's wire shape.

use modelctx_session::ProtocolVersion;
use modelctx_types::model::{self, ContentBlock, ConvertError};
use modelctx_types::{
    ErrorObject, JsonObject, ResultType, v2024_11_05, v2025_03_26, v2025_06_18, v2025_11_25,
    v2026_07_28,
};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::internal;
use crate::resource::{CacheHint, CacheScope};
use crate::tool::{Tool, ToolOutput};

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
pub(crate) fn tool(tool: &Tool, version: V) -> Result<Value, ErrorObject> {
    let mut out = JsonObject::new();
    out.insert("name".into(), Value::from(tool.name.as_str()));
    for (key, value) in &tool.definition {
        if key != "title" || version >= V::V2025_06_18 {
            out.insert(key.clone(), value.clone());
        }
    }
    if let Some(annotations) = &tool.annotations {
        let annotations = annotations.clone();
        let written = match version {
            V::V2024_11_05 => None,
            V::V2025_03_26 => Some(encode(v2025_03_26::ToolAnnotations::try_from(annotations))),
            V::V2025_06_18 => Some(encode(v2025_06_18::ToolAnnotations::try_from(annotations))),
            V::V2025_11_25 => Some(encode(v2025_11_25::ToolAnnotations::try_from(annotations))),
            _ => Some(encode(v2026_07_28::ToolAnnotations::try_from(annotations))),
        };
        if let Some(written) = written {
            out.insert("annotations".into(), written?);
        }
    }
    if let Some(icons) = &tool.icons
        && version >= V::V2025_11_25
    {
        let icons = icons
            .iter()
            .map(|icon| match version {
                V::V2025_11_25 => encode(v2025_11_25::Icon::try_from(icon.clone())),
                _ => encode(v2026_07_28::Icon::try_from(icon.clone())),
            })
            .collect::<Result<Vec<Value>, ErrorObject>>()?;
        out.insert("icons".into(), Value::from(icons));
    }
    // The experimental tasks of 2025-11-25: whether the tool runs as a task.
    if version == V::V2025_11_25 && tool.task_support != crate::tasks::TaskSupport::Forbidden {
        out.insert(
            "execution".into(),
            json!({"taskSupport": tool.task_support.as_str()}),
        );
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
    Ok(Value::Object(out))
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

/// Writes a model value as the wire type `version` has for it: the generated types check the
/// shape, and drop what the version does not define.
/// With `text`, the value is written straight to JSON text (a result: no tree of it is built).
macro_rules! encode_in {
    ($version:expr, $value:expr, $ty:ident) => {
        encode_in!($version, $value, $ty, encode)
    };
    ($version:expr, $value:expr, $ty:ident, text) => {
        encode_in!($version, $value, $ty, encode_text)
    };
    ($version:expr, $value:expr, $ty:ident, $encode:ident) => {
        match $version {
            V::V2024_11_05 => $encode(v2024_11_05::$ty::try_from($value)),
            V::V2025_03_26 => $encode(v2025_03_26::$ty::try_from($value)),
            V::V2025_06_18 => $encode(v2025_06_18::$ty::try_from($value)),
            V::V2025_11_25 => $encode(v2025_11_25::$ty::try_from($value)),
            _ => $encode(v2026_07_28::$ty::try_from($value)),
        }
    };
}

/// The JSON of a wire value, or an internal error (-32603) saying why the value has no form in
/// the version.
fn encode<T: serde::Serialize>(wire: Result<T, ConvertError>) -> Result<Value, ErrorObject> {
    let wire = wire.map_err(|e| internal(format!("the result cannot be written: {e}")))?;
    serde_json::to_value(wire).map_err(|e| internal(format!("the result cannot be written: {e}")))
}

/// The JSON text of a wire value, or an internal error (-32603) saying why the value has no
/// form in the version.
fn encode_text<T: serde::Serialize>(
    wire: Result<T, ConvertError>,
) -> Result<Box<RawValue>, ErrorObject> {
    let wire = wire.map_err(|e| internal(format!("the result cannot be written: {e}")))?;
    serde_json::value::to_raw_value(&wire)
        .map_err(|e| internal(format!("the result cannot be written: {e}")))
}

/// A resource definition for `resources/list` in `version`.
pub(crate) fn resource(resource: &model::Resource, version: V) -> Result<Value, ErrorObject> {
    encode_in!(version, resource.clone(), Resource)
}

/// A resource template definition for `resources/templates/list` in `version`.
pub(crate) fn resource_template(
    template: &model::ResourceTemplate,
    version: V,
) -> Result<Value, ErrorObject> {
    encode_in!(version, template.clone(), ResourceTemplate)
}

/// A prompt definition for `prompts/list` in `version`.
pub(crate) fn prompt(prompt: model::Prompt, version: V) -> Result<Value, ErrorObject> {
    encode_in!(version, prompt, Prompt)
}

/// A `resources/read` result in `version`; the cache hint goes only where the version has it
/// (`ttlMs`, `cacheScope`: 2026-07-28).
pub(crate) fn read_result(
    contents: Vec<model::EmbeddedResourceResource>,
    cache: Option<CacheHint>,
    version: V,
) -> Result<Box<RawValue>, ErrorObject> {
    let result = model::ReadResourceResult {
        meta: None,
        cache_scope: cache.map(|hint| match hint.scope {
            CacheScope::Public => model::CacheableResultCacheScope::Public,
            // (`CacheScope` is the session's, non-exhaustive: a scope added later is not
            // shared until written here.)
            _ => model::CacheableResultCacheScope::Private,
        }),
        contents,
        result_type: Some(ResultType::Complete),
        ttl_ms: cache.map(|hint| i64::try_from(hint.ttl_ms).unwrap_or(i64::MAX)),
        extra: JsonObject::new(),
    };
    encode_in!(version, result, ReadResourceResult, text)
}

/// A `sampling/createMessage` request's params as `version` writes them (fields it does not
/// define are dropped), or why it cannot.
pub(crate) fn sampling_request(
    params: model::CreateMessageRequestParams,
    version: V,
) -> Result<JsonObject, ConvertError> {
    encode_in!(version, params, CreateMessageRequestParams, object)
}

/// The JSON object of a wire value that is one.
fn object<T: serde::Serialize>(wire: Result<T, ConvertError>) -> Result<JsonObject, ConvertError> {
    match serde_json::to_value(wire?) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ConvertError::Json {
            version: "any",
            what: "request params",
            reason: format!("written as {other}, not an object"),
        }),
        Err(e) => Err(ConvertError::Json {
            version: "any",
            what: "request params",
            reason: e.to_string(),
        }),
    }
}

/// A `tools/call` result in `version`.
pub(crate) fn tool_output(output: &ToolOutput, version: V) -> Result<Box<RawValue>, ErrorObject> {
    let structured_content = match &output.structured {
        Some(structured) if has_structured(version) => {
            Some(if object_only(version) && !structured.is_object() {
                json!({ "result": structured })
            } else {
                structured.clone()
            })
        }
        _ => None,
    };
    let result = model::CallToolResult {
        meta: output.meta.clone(),
        content: output
            .content
            .iter()
            .map(|block| content_block(&block.0, version))
            .collect(),
        is_error: output.is_error.then_some(true),
        result_type: Some(ResultType::Complete),
        structured_content,
        extra: JsonObject::new(),
    };
    encode_in!(version, result, CallToolResult, text)
}

/// A `prompts/get` result in `version`.
pub(crate) fn prompt_result(
    description: Option<String>,
    messages: Vec<model::PromptMessage>,
    version: V,
) -> Result<Box<RawValue>, ErrorObject> {
    let result = model::GetPromptResult {
        meta: None,
        description,
        messages: messages
            .into_iter()
            .map(|message| model::PromptMessage {
                content: content_block(&message.content, version),
                role: message.role,
            })
            .collect(),
        result_type: Some(ResultType::Complete),
        extra: JsonObject::new(),
    };
    encode_in!(version, result, GetPromptResult, text)
}

/// A content block as `version` can carry it: the one place content is downgraded. Blocks the
/// version does not know become text that says what they were (audio before 2025-03-26, a
/// resource link before 2025-06-18); fields it does not know are dropped when the block is
/// written in its types.
pub(crate) fn content_block(block: &ContentBlock, version: V) -> ContentBlock {
    match block {
        ContentBlock::AudioContent(audio) if version < V::V2025_03_26 => text(format!(
            "[{} audio, not shown in this protocol version]",
            audio.mime_type
        )),
        ContentBlock::ResourceLink(link) if version < V::V2025_06_18 => text(link.uri.clone()),
        other => other.clone(),
    }
}

/// A text block.
pub(crate) fn text(text: String) -> ContentBlock {
    ContentBlock::TextContent(model::TextContent {
        meta: None,
        annotations: None,
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{Content, NoArgs};

    fn tool_output(output: &ToolOutput, version: V) -> Value {
        let text = super::tool_output(output, version).expect("a result every version can carry");
        serde_json::from_str(text.get()).unwrap()
    }

    fn content_block(block: &Content, version: V) -> Value {
        tool_output(&ToolOutput::new(vec![block.clone()]), version)["content"][0].clone()
    }

    fn read_result(
        contents: Vec<model::EmbeddedResourceResource>,
        cache: Option<CacheHint>,
        version: V,
    ) -> Result<Value, ErrorObject> {
        let text = super::read_result(contents, cache, version)?;
        Ok(serde_json::from_str(text.get()).unwrap())
    }

    fn output(structured: Value) -> ToolOutput {
        ToolOutput::structured(structured)
    }

    #[test]
    fn a_result_passed_on_keeps_its_content_structure_error_and_meta() {
        let mut meta = JsonObject::new();
        meta.insert("trace".into(), json!("abc"));
        let result = model::CallToolResult {
            meta: Some(meta),
            content: vec![text("partly done".into())],
            is_error: Some(true),
            result_type: None,
            structured_content: Some(json!({"done": 1})),
            extra: JsonObject::new(),
        };
        let written = tool_output(&ToolOutput::from(result), V::V2025_11_25);
        assert_eq!(written["content"][0]["text"], "partly done");
        assert_eq!(written["structuredContent"], json!({"done": 1}));
        assert_eq!(written["isError"], true);
        assert_eq!(written["_meta"], json!({"trace": "abc"}));
        // A result of the server's own has no `_meta`.
        assert!(
            tool_output(&output(json!(1)), V::V2025_11_25)
                .get("_meta")
                .is_none()
        );
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
            .icons(vec![model::Icon {
                mime_type: None,
                sizes: None,
                src: "https://x/i.png".into(),
                theme: None,
            }])
            .annotations(model::ToolAnnotations {
                destructive_hint: None,
                idempotent_hint: None,
                open_world_hint: Some(false),
                read_only_hint: Some(true),
                title: None,
            })
            .output_schema(JsonObject::new());
        let old = tool(&t, V::V2024_11_05).unwrap();
        assert!(old.get("title").is_none() && old.get("icons").is_none());
        assert!(old.get("outputSchema").is_none());
        assert_eq!(old["description"], "d");
        assert!(old.get("annotations").is_none());
        let middle = tool(&t, V::V2025_03_26).unwrap();
        assert_eq!(
            middle["annotations"],
            json!({"readOnlyHint": true, "openWorldHint": false})
        );
        assert!(middle.get("icons").is_none());
        let new = tool(&t, V::V2026_07_28).unwrap();
        assert_eq!(new["title"], "T");
        assert_eq!(new["icons"], json!([{"src": "https://x/i.png"}]));
        assert!(new.get("outputSchema").is_some());
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

    #[test]
    fn sampling_requests_carry_only_what_the_version_knows() {
        let params = model::CreateMessageRequestParams {
            tools: Some(Vec::new()),
            system_prompt: Some("p".into()),
            ..crate::sampling_request("hi", 5)
        };
        let old = sampling_request(params.clone(), V::V2025_06_18).unwrap();
        assert!(old.get("tools").is_none(), "{old:?}");
        assert_eq!(old["systemPrompt"], "p");
        assert_eq!(
            old["messages"],
            json!([{"role": "user", "content": {"type": "text", "text": "hi"}}])
        );
        assert_eq!(old["maxTokens"], 5);
        let new = sampling_request(params, V::V2025_11_25).unwrap();
        assert_eq!(new["tools"], json!([]));
    }

    #[test]
    fn a_sampling_request_a_version_cannot_express_fails() {
        let mut params = crate::sampling_request("", 5);
        params.messages[0].content =
            model::CreateMessageResultContent::AudioContent(model::AudioContent {
                meta: None,
                annotations: None,
                data: "AAAA".into(),
                mime_type: "audio/wav".into(),
            });
        assert!(sampling_request(params.clone(), V::V2024_11_05).is_err());
        assert!(sampling_request(params, V::V2025_03_26).is_ok());
    }

    #[test]
    fn resource_definitions_carry_only_what_the_version_knows() {
        let resource = model::Resource {
            meta: None,
            annotations: None,
            description: Some("d".into()),
            icons: Some(vec![model::Icon {
                mime_type: None,
                sizes: None,
                src: "https://x/i.png".into(),
                theme: None,
            }]),
            mime_type: Some("text/plain".into()),
            name: "r".into(),
            size: None,
            title: Some("R".into()),
            uri: "file:///r".into(),
        };
        let old = resource_definition(&resource, V::V2025_03_26);
        assert_eq!(
            old,
            json!({"uri": "file:///r", "name": "r", "description": "d", "mimeType": "text/plain"})
        );
        let titled = resource_definition(&resource, V::V2025_06_18);
        assert_eq!(titled["title"], "R");
        assert!(titled.get("icons").is_none());
        let new = resource_definition(&resource, V::V2026_07_28);
        assert_eq!(new["icons"], json!([{"src": "https://x/i.png"}]));
        let template = model::ResourceTemplate {
            meta: None,
            annotations: None,
            description: None,
            icons: None,
            mime_type: None,
            name: "t".into(),
            title: Some("T".into()),
            uri_template: "file:///{name}".into(),
        };
        assert_eq!(
            resource_template(&template, V::V2024_11_05).unwrap(),
            json!({"uriTemplate": "file:///{name}", "name": "t"})
        );
    }

    fn resource_definition(resource: &model::Resource, version: V) -> Value {
        super::resource(resource, version).expect("a definition every version can carry")
    }

    #[test]
    fn prompt_definitions_carry_only_what_the_version_knows() {
        let definition = model::Prompt {
            meta: None,
            arguments: Some(vec![model::PromptArgument {
                description: None,
                name: "a".into(),
                required: Some(false),
                title: None,
            }]),
            description: None,
            icons: None,
            name: "p".into(),
            title: Some("P".into()),
        };
        assert_eq!(
            prompt(definition.clone(), V::V2025_03_26).unwrap(),
            json!({"name": "p", "arguments": [{"name": "a", "required": false}]})
        );
        assert_eq!(prompt(definition, V::V2025_06_18).unwrap()["title"], "P");
    }

    #[test]
    fn read_results_carry_the_cache_hint_only_where_the_version_has_it() {
        let contents = vec![
            crate::ResourceContents::text("file:///a", "A").0,
            crate::ResourceContents::blob("file:///b", b"\x00\x01")
                .mime_type("application/octet-stream")
                .0,
        ];
        let hint = Some(CacheHint::public(60_000));
        let old = read_result(contents.clone(), hint, V::V2025_11_25).unwrap();
        assert_eq!(
            old,
            json!({"contents": [
                {"uri": "file:///a", "text": "A"},
                {"uri": "file:///b", "blob": "AAE=", "mimeType": "application/octet-stream"},
            ]})
        );
        let new = read_result(contents, hint, V::V2026_07_28).unwrap();
        assert_eq!(new["ttlMs"], 60_000);
        assert_eq!(new["cacheScope"], "public");
        assert_eq!(new["resultType"], "complete");
        assert_eq!(new["contents"], old["contents"]);
    }
}
