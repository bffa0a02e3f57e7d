//! Values encoded by the generated types validate against their version's `schema.json`, with the
//! project's corrections (`schema/corrections.toml`) applied: the same table the generator reads.
//!
//! The values come from the official 2026-07-28 examples, the spec pages' examples of the older
//! versions (`tests/fixtures/<version>/<Type>/*.json`) and values built in code below.

use std::path::PathBuf;

use modelctx_tests::{VERSIONS, fixtures, roundtrip};
use modelctx_types::{v2025_11_25, v2026_07_28};
use serde_json::{Value, json};

fn root() -> PathBuf {
    xtask::schema::project_root()
}

fn schema_dir() -> PathBuf {
    xtask::schema::schema_dir(None)
}

/// The envelope shapes the generator leaves to the hand-written JSON-RPC module: those fixtures
/// go through [`modelctx_types::decode`] and [`modelctx_types::encode`].
fn envelope_roundtrip(value: &Value) -> Result<Value, String> {
    let bytes = serde_json::to_vec(value).unwrap();
    match modelctx_types::decode(&bytes).map_err(|e| e.to_string())? {
        modelctx_types::Incoming::Single(message) => {
            serde_json::from_slice(&modelctx_types::encode(&message)).map_err(|e| e.to_string())
        }
        other => Err(format!("not a single message: {other:?}")),
    }
}

/// Spec-page examples that show a member the version's schema does not define. The generated
/// type (a closed object) drops it on the way back; the test checks that nothing else changes and
/// that each entry is still needed. `(version, folder/file, JSON pointer of the member, why)`.
const STRAY_MEMBERS: &[(&str, &str, &str, &str)] = &[
    (
        "2025-06-18",
        "BlobResourceContents/example-png-with-title.json",
        "/name",
        CONTENTS_NAME,
    ),
    (
        "2025-06-18",
        "BlobResourceContents/example-png-with-title.json",
        "/title",
        CONTENTS_TITLE,
    ),
    (
        "2025-06-18",
        "EmbeddedResource/main-rs-with-annotations.json",
        "/resource/annotations",
        CONTENTS_ANNOTATIONS,
    ),
    (
        "2025-06-18",
        "EmbeddedResource/main-rs-with-annotations.json",
        "/resource/title",
        CONTENTS_TITLE,
    ),
    (
        "2025-06-18",
        "EmbeddedResource/prompt-embedded-resource-with-title.json",
        "/resource/name",
        CONTENTS_NAME,
    ),
    (
        "2025-06-18",
        "EmbeddedResource/prompt-embedded-resource-with-title.json",
        "/resource/title",
        CONTENTS_TITLE,
    ),
    (
        "2025-06-18",
        "ReadResourceResult/main-rs-contents-with-title.json",
        "/contents/0/name",
        CONTENTS_NAME,
    ),
    (
        "2025-06-18",
        "ReadResourceResult/main-rs-contents-with-title.json",
        "/contents/0/title",
        CONTENTS_TITLE,
    ),
    (
        "2025-06-18",
        "TextResourceContents/example-txt-with-title.json",
        "/name",
        CONTENTS_NAME,
    ),
    (
        "2025-06-18",
        "TextResourceContents/example-txt-with-title.json",
        "/title",
        CONTENTS_TITLE,
    ),
    (
        "2025-11-25",
        "EmbeddedResource/main-rs-with-annotations.json",
        "/resource/annotations",
        CONTENTS_ANNOTATIONS,
    ),
    (
        "2025-11-25",
        "StringSchema/email-with-pattern-and-default.json",
        "/pattern",
        "the elicitation page shows `pattern`, but the 2025-11-25 StringSchema defines only type, title, description, minLength, maxLength, format and default",
    ),
    (
        "2026-07-28",
        "ListRootsRequest/list-roots-request.json",
        "/id",
        "in 2026-07-28 `roots/list` travels inside an `input_required` result, so ListRootsRequest has no `id`",
    ),
];
const CONTENTS_NAME: &str = "the resources page shows `name` on resource contents; ResourceContents defines uri, mimeType and _meta (name belongs to Resource)";
const CONTENTS_TITLE: &str = "the resources page shows `title` on resource contents; ResourceContents defines uri, mimeType and _meta (title belongs to Resource)";
const CONTENTS_ANNOTATIONS: &str = "the page shows `annotations` on resource contents; ResourceContents has none (annotations belong to the EmbeddedResource block)";

/// `value` without the stray members listed for this fixture; an error when one is not there.
fn without_strays(version: &str, label: &str, value: &Value) -> Result<Value, String> {
    let mut value = value.clone();
    for (_, _, pointer, why) in STRAY_MEMBERS
        .iter()
        .filter(|(v, l, ..)| *v == version && *l == label)
    {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let removed = value
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .and_then(|o| o.remove(key));
        if removed.is_none() {
            return Err(format!(
                "no longer carries {pointer}; drop its STRAY_MEMBERS entry ({why})"
            ));
        }
    }
    Ok(value)
}

/// A validator for the definition `name` of a (corrected) schema document.
fn validator(schema: &Value, name: &str) -> jsonschema::Validator {
    let (key, draft) = if schema.get("$defs").is_some() {
        ("$defs", jsonschema::Draft::Draft202012)
    } else {
        ("definitions", jsonschema::Draft::Draft7)
    };
    let doc = json!({
        "allOf": [{ "$ref": format!("#/{key}/{name}") }],
        key: schema[key].clone(),
    });
    jsonschema::options()
        .with_draft(draft)
        .build(&doc)
        .unwrap_or_else(|e| panic!("schema for {name}: {e}"))
}

fn errors(schema: &Value, name: &str, value: &Value) -> Vec<String> {
    validator(schema, name)
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn fixtures_of_every_version_round_trip_and_validate_against_the_corrected_schema() {
    let mut failures = Vec::new();
    for version in VERSIONS {
        let schema = xtask::schema::load_corrected(&root(), &schema_dir(), version).unwrap();
        let fixtures = fixtures(version);
        assert!(!fixtures.is_empty(), "{version} has no fixtures");
        for fixture in fixtures {
            let file_label = fixture.label();
            let label = format!("{version} {file_label}");
            let (name, value) = (fixture.type_name, fixture.value);
            let expected = match without_strays(version, &file_label, &value) {
                Ok(expected) => expected,
                Err(e) => {
                    failures.push(format!("{label}: {e}"));
                    continue;
                }
            };
            let encoded = match roundtrip(version, &name, value.clone()) {
                None if name.starts_with("JSONRPC") => match envelope_roundtrip(&value) {
                    Ok(encoded) => encoded,
                    Err(e) => {
                        failures.push(format!("{label}: the envelope refuses it: {e}"));
                        continue;
                    }
                },
                None => {
                    failures.push(format!("{label}: no generated type"));
                    continue;
                }
                Some(Err(e)) => {
                    failures.push(format!("{label}: does not decode: {e}"));
                    continue;
                }
                Some(Ok(encoded)) => encoded,
            };
            if encoded != expected {
                failures.push(format!(
                    "{label}: re-encodes differently\n  in:  {expected}\n  out: {encoded}"
                ));
            }
            if name.starts_with("JSONRPC") && envelope_roundtrip(&value).as_ref() != Ok(&expected) {
                failures.push(format!("{label}: the envelope does not round-trip it"));
            }
            let errs = errors(&schema, &name, &encoded);
            if !errs.is_empty() {
                failures.push(format!(
                    "{label}: invalid against the corrected schema: {}",
                    errs.join("; ")
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn values_built_from_the_generated_types_validate() {
    // 2025-11-25: `Task.ttl` is required and nullable: `None` must be written as an explicit null.
    let task: v2025_11_25::Task = serde_json::from_value(json!({
        "taskId": "t1", "status": "working", "createdAt": "2025-11-25T10:00:00Z",
        "lastUpdatedAt": "2025-11-25T10:00:00Z", "ttl": null
    }))
    .unwrap();
    assert_eq!(task.ttl, None);
    let encoded = serde_json::to_value(&task).unwrap();
    assert_eq!(
        encoded["ttl"],
        Value::Null,
        "required-nullable fields keep an explicit null"
    );
    let schema = xtask::schema::load_corrected(&root(), &schema_dir(), "2025-11-25").unwrap();
    assert_eq!(errors(&schema, "Task", &encoded), Vec::<String>::new());

    // 2026-07-28: fractional priorities and temperatures are numbers in schema.ts.
    let schema = xtask::schema::load_corrected(&root(), &schema_dir(), "2026-07-28").unwrap();
    let annotations: v2026_07_28::Annotations =
        serde_json::from_value(json!({ "priority": 0.25, "audience": ["user"] })).unwrap();
    let encoded = serde_json::to_value(&annotations).unwrap();
    assert_eq!(encoded["priority"], json!(0.25));
    assert_eq!(
        errors(&schema, "Annotations", &encoded),
        Vec::<String>::new()
    );

    // 2026-07-28: `structuredContent` may be any JSON, and an explicit null is kept.
    let result: v2026_07_28::CallToolResult = serde_json::from_value(json!({
        "content": [], "structuredContent": null, "resultType": "complete"
    }))
    .unwrap();
    assert_eq!(
        serde_json::to_value(&result).unwrap()["structuredContent"],
        Value::Null
    );

    // ext-tasks: a created task, and a completed task inlining its result.
    let schema = xtask::schema::load_corrected(&root(), &schema_dir(), "ext-tasks").unwrap();
    for (name, value) in [
        (
            "CreateTaskResult",
            json!({"resultType": "task", "taskId": "t", "status": "working",
                   "createdAt": "2026-07-28T00:00:00Z", "lastUpdatedAt": "2026-07-28T00:00:00Z",
                   "ttlMs": null, "pollIntervalMs": 500}),
        ),
        (
            "GetTaskResult",
            json!({"resultType": "complete", "taskId": "t", "status": "completed",
                   "createdAt": "2026-07-28T00:00:00Z", "lastUpdatedAt": "2026-07-28T00:00:01Z",
                   "ttlMs": 60000, "result": {"content": [], "resultType": "complete"}}),
        ),
        (
            "GetTaskResult",
            json!({"resultType": "complete", "taskId": "t", "status": "failed",
                   "createdAt": "2026-07-28T00:00:00Z", "lastUpdatedAt": "2026-07-28T00:00:01Z",
                   "ttlMs": null, "error": {"code": -32603, "message": "boom"}}),
        ),
    ] {
        let encoded = roundtrip("ext-tasks", name, value.clone())
            .unwrap()
            .unwrap();
        assert_eq!(encoded, value, "{name}");
        assert_eq!(
            errors(&schema, name, &encoded),
            Vec::<String>::new(),
            "{name}"
        );
    }
}

#[test]
fn the_corrections_are_what_make_float_and_null_values_valid() {
    // Without the corrections the upstream JSON rejects a fractional form answer and a null inside
    // JSONValue (schema.ts says `number` and `| null`); with them both are accepted, and the
    // generated types carry them. This keeps the corrections table honest.
    let manifest = xtask::schema::manifest(&root()).unwrap();
    let file = manifest
        .schema
        .iter()
        .find(|f| f.version == "2026-07-28")
        .unwrap();
    let raw = xtask::schema::load_verified(&schema_dir(), file).unwrap();
    let corrected = xtask::schema::load_corrected(&root(), &schema_dir(), "2026-07-28").unwrap();
    let answer =
        json!({ "action": "accept", "content": { "ratio": 0.5 }, "resultType": "complete" });
    assert!(
        !errors(&raw, "ElicitResult", &answer).is_empty(),
        "upstream types the number arm as integer"
    );
    assert!(errors(&corrected, "ElicitResult", &answer).is_empty());
    assert_eq!(
        roundtrip("2026-07-28", "ElicitResult", answer.clone())
            .unwrap()
            .unwrap(),
        answer
    );

    let meta = json!({ "key": null });
    assert!(
        !errors(&raw, "JSONObject", &meta).is_empty(),
        "upstream JSONValue has no null"
    );
    assert!(errors(&corrected, "JSONObject", &meta).is_empty());

    // A cacheable result from an older server omits ttlMs and cacheScope.
    let read = json!({ "contents": [], "resultType": "complete" });
    assert!(!errors(&raw, "ReadResourceResult", &read).is_empty());
    assert!(errors(&corrected, "ReadResourceResult", &read).is_empty());
    assert_eq!(
        roundtrip("2026-07-28", "ReadResourceResult", read.clone())
            .unwrap()
            .unwrap(),
        read
    );
}
