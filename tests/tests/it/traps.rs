//! The typing traps of the upstream schemas (`shared/spec/NOTES.md` section 2c), one test each,
//! against the generated types.

use modelctx_types::{
    ResultDecodeError, ResultType, ext_tasks, v2025_06_18, v2025_11_25, v2026_07_28,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Value, json};

fn raw(value: Value) -> Box<RawValue> {
    to_raw_value(&value).unwrap()
}

/// Decodes `value` as `T`, checks it encodes back to the same JSON, and returns it.
fn same<T: DeserializeOwned + Serialize>(value: Value) -> T {
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{value}: {e}"));
    assert_eq!(serde_json::to_value(&typed).unwrap(), value);
    typed
}

#[test]
fn results_are_decoded_by_method_then_result_type_never_by_shape() {
    use v2026_07_28::ServerResult;
    // Every complete CallToolResult also validates as InputRequiredResult: only the method and
    // the value of `resultType` decide.
    let complete = raw(json!({"content": [], "resultType": "complete"}));
    assert!(matches!(
        ServerResult::decode("tools/call", &complete),
        Ok(ServerResult::CallTool(_))
    ));
    let absent = raw(json!({"content": []}));
    assert!(
        matches!(
            ServerResult::decode("tools/call", &absent),
            Ok(ServerResult::CallTool(_))
        ),
        "an absent resultType means complete"
    );
    let input = raw(json!({"resultType": "input_required", "requestState": "s"}));
    assert!(matches!(
        ServerResult::decode("tools/call", &input),
        Ok(ServerResult::InputRequired(_))
    ));
    let unknown = raw(json!({"content": [], "resultType": "mystery"}));
    assert!(matches!(
        ServerResult::decode("tools/call", &unknown),
        Err(ResultDecodeError::UnexpectedResultType {
            result_type: ResultType::Other(_),
            ..
        })
    ));
    // The same bytes are a different result for a different method.
    let tools =
        raw(json!({"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "public"}));
    assert!(matches!(
        ServerResult::decode("tools/list", &tools),
        Ok(ServerResult::ListTools(_))
    ));
    assert!(
        ServerResult::decode("tools/call", &tools).is_err(),
        "a tools/list result is no tools/call result"
    );
    assert!(matches!(
        ServerResult::decode("no/such", &tools),
        Err(ResultDecodeError::UnknownMethod(_))
    ));
    // Legacy versions have no resultType: the method alone decides.
    let legacy = raw(json!({"content": [{"type": "text", "text": "hi"}]}));
    assert!(matches!(
        v2025_06_18::ServerResult::decode("tools/call", &legacy),
        Ok(v2025_06_18::ServerResult::CallTool(_))
    ));
}

#[test]
fn requests_and_notifications_dispatch_on_method_with_typed_params() {
    let req = v2025_11_25::ClientRequest::from_parts(
        "resources/read",
        Some(&raw(json!({"uri": "file:///a"}))),
    )
    .unwrap();
    let v2025_11_25::ClientRequest::ReadResource(params) = &req else {
        panic!("{req:?}")
    };
    assert_eq!(params.uri, "file:///a");
    assert_eq!(req.method(), "resources/read");
    assert!(
        v2025_11_25::ClientRequest::from_parts("resources/read", None).is_err(),
        "params are required"
    );
    assert!(
        v2025_11_25::ClientRequest::from_parts("ping", None).is_ok(),
        "ping's params are optional"
    );
    assert!(v2025_11_25::ClientRequest::from_parts("nope", None).is_err());
    // Encoded back as method + params.
    assert_eq!(
        serde_json::to_value(&req).unwrap(),
        json!({"method": "resources/read", "params": {"uri": "file:///a"}})
    );
    let note: v2025_11_25::ServerNotification =
        same(json!({"method": "notifications/tools/list_changed"}));
    assert_eq!(note.method(), "notifications/tools/list_changed");
}

#[test]
fn content_blocks_dispatch_on_type_and_refuse_unknown_types() {
    let block: v2026_07_28::ContentBlock =
        same(json!({"type": "audio", "data": "AA==", "mimeType": "audio/wav"}));
    assert!(matches!(block, v2026_07_28::ContentBlock::AudioContent(_)));
    let err =
        serde_json::from_value::<v2026_07_28::ContentBlock>(json!({"type": "video", "data": ""}))
            .unwrap_err();
    assert!(err.to_string().contains("video"), "{err}");
}

#[test]
fn untagged_one_of_shapes_are_told_apart_by_their_keys() {
    let text: v2026_07_28::EmbeddedResource =
        same(json!({"type": "resource", "resource": {"uri": "a:b", "text": "hi"}}));
    assert!(matches!(
        text.resource,
        v2026_07_28::EmbeddedResourceResource::TextResourceContents(_)
    ));
    let blob: v2026_07_28::EmbeddedResource =
        same(json!({"type": "resource", "resource": {"uri": "a:b", "blob": "AA=="}}));
    assert!(matches!(
        blob.resource,
        v2026_07_28::EmbeddedResourceResource::BlobResourceContents(_)
    ));
    // One block or an array of blocks.
    let one: v2026_07_28::SamplingMessage =
        same(json!({"role": "user", "content": {"type": "text", "text": "a"}}));
    assert!(matches!(
        one.content,
        v2026_07_28::CreateMessageResultContent::TextContent(_)
    ));
    let many: v2026_07_28::SamplingMessage = same(
        json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
    );
    assert!(
        matches!(many.content, v2026_07_28::CreateMessageResultContent::Many(ref v) if v.len() == 2)
    );
}

#[test]
fn elicitation_schemas_are_told_apart_by_key_presence() {
    use v2025_11_25::PrimitiveSchemaDefinition as P;
    let cases = [
        (json!({"type": "string"}), "StringSchema"),
        (
            json!({"type": "string", "enum": ["a", "b"]}),
            "UntitledSingleSelectEnumSchema",
        ),
        (
            json!({"type": "string", "enum": ["a"], "enumNames": ["A"]}),
            "LegacyTitledEnumSchema",
        ),
        (
            json!({"type": "string", "oneOf": [{"const": "a", "title": "A"}]}),
            "TitledSingleSelectEnumSchema",
        ),
        (
            json!({"type": "array", "items": {"type": "string", "enum": ["a"]}}),
            "UntitledMultiSelectEnumSchema",
        ),
        (
            json!({"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}]}}),
            "TitledMultiSelectEnumSchema",
        ),
        (json!({"type": "number", "minimum": 0.5}), "NumberSchema"),
        (json!({"type": "integer"}), "NumberSchema"),
        (json!({"type": "boolean"}), "BooleanSchema"),
    ];
    for (value, expected) in cases {
        let schema: P = same(value.clone());
        let got = match schema {
            P::StringSchema(_) => "StringSchema",
            P::UntitledSingleSelectEnumSchema(_) => "UntitledSingleSelectEnumSchema",
            P::LegacyTitledEnumSchema(_) => "LegacyTitledEnumSchema",
            P::TitledSingleSelectEnumSchema(_) => "TitledSingleSelectEnumSchema",
            P::UntitledMultiSelectEnumSchema(_) => "UntitledMultiSelectEnumSchema",
            P::TitledMultiSelectEnumSchema(_) => "TitledMultiSelectEnumSchema",
            P::NumberSchema(_) => "NumberSchema",
            P::BooleanSchema(_) => "BooleanSchema",
        };
        assert_eq!(got, expected, "{value}");
    }
}

#[test]
fn elicitation_mode_defaults_to_form() {
    use v2025_11_25::ElicitRequestParams as E;
    let form: E =
        same(json!({"message": "m", "requestedSchema": {"type": "object", "properties": {}}}));
    assert!(
        matches!(form, E::ElicitRequestFormParams(_)),
        "absent mode is form"
    );
    let explicit: E = same(
        json!({"mode": "form", "message": "m", "requestedSchema": {"type": "object", "properties": {}}}),
    );
    assert!(matches!(explicit, E::ElicitRequestFormParams(_)));
    let url: E =
        same(json!({"mode": "url", "message": "m", "url": "https://x", "elicitationId": "e"}));
    assert!(matches!(url, E::ElicitRequestURLParams(_)));
}

#[test]
fn unknown_members_survive_on_meta_results_capabilities_and_tool_schemas() {
    let params: v2026_07_28::CallToolRequestParams = same(json!({
        "name": "t",
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"vendor": {"x": 1}},
            "traceparent": "00-abc-def-01",
            "example.com/key": [1, 2]
        }
    }));
    assert_eq!(
        params.meta.protocol_version, "2026-07-28",
        "`/` keys are typed fields"
    );
    assert_eq!(params.meta.extra["traceparent"], "00-abc-def-01");
    let result: v2025_06_18::CallToolResult = same(json!({"content": [], "vendorField": {"a": 1}}));
    assert_eq!(result.extra["vendorField"], json!({"a": 1}));
    let tool: v2025_11_25::Tool = same(json!({
        "name": "t",
        "inputSchema": {"type": "object", "$schema": "https://json-schema.org/draft/2020-12/schema",
                        "additionalProperties": false, "$defs": {"a": {"type": "string"}}}
    }));
    assert_eq!(tool.input_schema.extra["additionalProperties"], false);
}

#[test]
fn optional_means_absent_while_required_nullable_and_any_json_keep_null() {
    // Optional: absent, never `null`.
    let implementation: v2025_11_25::Implementation = same(json!({"name": "n", "version": "1"}));
    assert_eq!(implementation.title, None);
    // Required and nullable: an explicit null.
    let task: ext_tasks::CreateTaskResult = same(json!({
        "resultType": "task", "taskId": "t", "status": "working",
        "createdAt": "2026-07-28T00:00:00Z", "lastUpdatedAt": "2026-07-28T00:00:00Z", "ttlMs": null
    }));
    assert_eq!(serde_json::to_value(&task).unwrap()["ttlMs"], Value::Null);
    // Any JSON, required: `data: null` is a value.
    let log: v2025_11_25::LoggingMessageNotificationParams =
        same(json!({"level": "info", "data": null}));
    assert_eq!(log.data, Value::Null);
    // Any JSON, optional: absent and null stay apart.
    let with_null: v2026_07_28::CallToolResult =
        same(json!({"content": [], "structuredContent": null, "resultType": "complete"}));
    let absent: v2026_07_28::CallToolResult =
        same(json!({"content": [], "resultType": "complete"}));
    assert_ne!(with_null, absent);
}

#[test]
fn numbers_the_typescript_calls_number_accept_fractions() {
    let answer: v2026_07_28::ElicitResult =
        same(json!({"action": "accept", "content": {"ratio": 3.5}}));
    assert!(answer.content.is_some());
    let caps: v2026_07_28::ClientCapabilities =
        same(json!({"experimental": {"x": {"f": 0.5, "n": null}}}));
    assert!(caps.experimental.is_some());
    let prefs: v2025_11_25::ModelPreferences = same(json!({"speedPriority": 0.25}));
    assert!(prefs.speed_priority.is_some());
}

#[test]
fn rust_keywords_and_special_names_are_renamed() {
    let params: v2025_11_25::CompleteRequestParams = same(json!({
        "ref": {"type": "ref/prompt", "name": "p"},
        "argument": {"name": "a", "value": "v"}
    }));
    let _ = &params.r#ref;
    let text: v2026_07_28::TextContent =
        same(json!({"type": "text", "text": "x", "_meta": {"k": 1}}));
    assert!(text.meta.is_some());
}

#[test]
fn modern_results_default_result_type_when_reading() {
    let result: v2026_07_28::CallToolResult =
        serde_json::from_value(json!({"content": []})).unwrap();
    assert_eq!(result.result_type, ResultType::Complete);
}

#[test]
fn input_responses_are_decoded_by_the_method_of_their_input_request() {
    use v2026_07_28::InputResponse;
    let roots = raw(json!({"roots": [{"uri": "file:///a"}]}));
    assert!(matches!(
        InputResponse::decode("roots/list", &roots),
        Ok(InputResponse::ListRootsResult(_))
    ));
    // The answer to an elicitation cannot be read as a list of roots, whatever keys it has.
    let answer = raw(json!({"action": "decline"}));
    assert!(matches!(
        InputResponse::decode("elicitation/create", &answer),
        Ok(InputResponse::ElicitResult(_))
    ));
    assert!(matches!(
        InputResponse::decode("roots/list", &answer),
        Err(ResultDecodeError::Invalid { .. })
    ));
    assert!(matches!(
        InputResponse::decode("tools/call", &answer),
        Err(ResultDecodeError::UnknownMethod(_))
    ));
}
