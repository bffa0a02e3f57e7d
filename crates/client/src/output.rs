//! What the client remembers of the tools a server listed (output schemas, idempotence), and
//! `structuredContent` checked against the output schema the server listed for the tool.

use std::collections::HashMap;
use std::sync::Arc;

use modelctx_types::JsonObject;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::driver::Shared;

/// Tools remembered from `tools/list` (the newest listing wins).
pub(crate) const MAX_TOOLS: usize = 10_000;
/// The largest output schema stored, in bytes of its JSON as received: the limit of the schemas
/// compiled (`SchemaLimits::max_bytes`, 256 KiB by default).
pub(crate) const MAX_SCHEMA_BYTES: usize = 256 << 10;
/// The output schemas stored, in bytes of their JSON, all tools together.
pub(crate) const MAX_SCHEMAS_BYTES: usize = 16 << 20;
/// `structuredContent` larger than this (bytes of the result's JSON) is validated on a blocking
/// thread rather than on the caller's async worker.
#[cfg(feature = "validation")]
pub(crate) const BLOCKING_ABOVE: usize = 64 << 10;

/// What is known of one listed tool.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListedTool {
    /// Its output schema, if it has one.
    pub(crate) output: Option<OutputSchema>,
    /// `annotations.idempotentHint: true`: a call may be sent again when its stream breaks.
    pub(crate) idempotent: bool,
    /// The `x-mcp-header` parameters of its `inputSchema`, listed by a modern server over
    /// Streamable HTTP: its calls carry them as `Mcp-Param-{Name}` headers.
    #[cfg(feature = "http")]
    pub(crate) headers: Option<Arc<[modelctx_http::headers::ParamHeader]>>,
    /// Whether it may be called as a task (2025-11-25 `execution.taskSupport` other than
    /// `forbidden`), when the listing said.
    pub(crate) task_support: Option<bool>,
}

/// An output schema as stored.
#[derive(Debug, Clone)]
pub(crate) enum OutputSchema {
    /// The schema, and its size in bytes.
    Schema(Arc<JsonObject>, usize),
    /// Not stored: it is larger than [`MAX_SCHEMA_BYTES`], or the stored schemas reached
    /// [`MAX_SCHEMAS_BYTES`]. Results of the tool cannot be checked, so calls fail.
    NotStored(Arc<str>),
}

/// The tools of the server's latest listing, bounded in count and in bytes.
#[derive(Debug, Default)]
pub(crate) struct ListedTools {
    tools: HashMap<String, ListedTool>,
    /// The bytes of the stored schemas.
    bytes: usize,
}

impl ListedTools {
    /// What is known of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&ListedTool> {
        self.tools.get(name)
    }

    /// How many tools are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tools.len()
    }

    /// The bytes of the stored schemas.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Forgets everything (the list changed).
    pub(crate) fn clear(&mut self) {
        self.tools.clear();
        self.bytes = 0;
    }

    fn remove(&mut self, name: &str) {
        if let Some(old) = self.tools.remove(name) {
            self.bytes -= schema_bytes(&old);
        }
    }

    /// Records tool `name` as listed, with its output schema (raw JSON) and idempotence.
    pub(crate) fn record(&mut self, name: String, output: Option<&RawValue>, idempotent: bool) {
        self.remove(&name);
        if output.is_none() && !idempotent {
            return;
        }
        if self.tools.len() >= MAX_TOOLS {
            tracing::warn!(
                tool = %name,
                "more than {MAX_TOOLS} tools listed: the output schema and idempotence of this one are not remembered"
            );
            return;
        }
        let output = output.map(|raw| self.stored(&name, raw));
        if let Some(OutputSchema::Schema(_, size)) = &output {
            self.bytes += size;
        }
        self.tools.insert(
            name,
            ListedTool {
                output,
                idempotent,
                #[cfg(feature = "http")]
                headers: None,
                task_support: None,
            },
        );
    }

    /// Records whether tool `name` may be called as a task (after [`record`](Self::record)).
    pub(crate) fn record_task_support(&mut self, name: &str, tasks: bool) {
        if let Some(tool) = self.tools.get_mut(name) {
            tool.task_support = Some(tasks);
        } else if self.tools.len() < MAX_TOOLS {
            let tool = ListedTool {
                task_support: Some(tasks),
                ..ListedTool::default()
            };
            self.tools.insert(name.to_owned(), tool);
        }
    }

    /// Records the `x-mcp-header` parameters of tool `name` (after [`record`](Self::record)).
    #[cfg(feature = "http")]
    pub(crate) fn record_headers(
        &mut self,
        name: &str,
        headers: Arc<[modelctx_http::headers::ParamHeader]>,
    ) {
        if let Some(tool) = self.tools.get_mut(name) {
            tool.headers = Some(headers);
        } else if self.tools.len() < MAX_TOOLS {
            let tool = ListedTool {
                headers: Some(headers),
                ..ListedTool::default()
            };
            self.tools.insert(name.to_owned(), tool);
        } else {
            tracing::warn!(
                tool = %name,
                "more than {MAX_TOOLS} tools listed: the x-mcp-header parameters of this one are not remembered"
            );
        }
    }

    fn stored(&self, name: &str, raw: &RawValue) -> OutputSchema {
        let size = raw.get().len();
        let refused = if size > MAX_SCHEMA_BYTES {
            format!("the output schema is larger than {MAX_SCHEMA_BYTES} bytes")
        } else if self.bytes + size > MAX_SCHEMAS_BYTES {
            format!(
                "the output schemas of the server's tools take more than {MAX_SCHEMAS_BYTES} bytes"
            )
        } else {
            match serde_json::from_str::<JsonObject>(raw.get()) {
                Ok(schema) => return OutputSchema::Schema(Arc::new(schema), size),
                Err(e) => format!("the output schema is not a JSON object: {e}"),
            }
        };
        tracing::warn!(tool = %name, reason = %refused, "output schema not stored: calls to the tool will fail");
        OutputSchema::NotStored(refused.into())
    }
}

fn schema_bytes(tool: &ListedTool) -> usize {
    match &tool.output {
        Some(OutputSchema::Schema(_, size)) => *size,
        _ => 0,
    }
}

/// Checks `content` against `schema`, compiled once into the connection's bounded cache (no
/// network or file `$ref`, size and depth limits, linear-time patterns: the schema comes from the
/// server). Stops at the first violation. `size` is the size of the result's JSON: a large one is
/// checked on a blocking thread.
#[cfg(feature = "validation")]
pub(crate) async fn check(
    shared: &Arc<Shared>,
    schema: &Arc<JsonObject>,
    content: &Value,
    size: usize,
) -> Result<(), String> {
    if size <= BLOCKING_ABOVE {
        return check_now(shared, schema, content);
    }
    let (shared, schema, content) = (shared.clone(), schema.clone(), content.clone());
    tokio::task::spawn_blocking(move || check_now(&shared, &schema, &content))
        .await
        .unwrap_or_else(|e| Err(format!("the validation task failed: {e}")))
}

#[cfg(feature = "validation")]
fn check_now(shared: &Shared, schema: &JsonObject, content: &Value) -> Result<(), String> {
    let validator = shared
        .schemas
        .validator(schema)
        .map_err(|e| format!("the output schema is unusable: {e}"))?;
    match validator.validate(content, 1).first() {
        None => Ok(()),
        Some(violation) => Err(violation.to_string()),
    }
}

/// Without the `validation` feature nothing is checked.
#[cfg(not(feature = "validation"))]
pub(crate) async fn check(
    _: &Arc<Shared>,
    _: &Arc<JsonObject>,
    _: &Value,
    _: usize,
) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn finding_9_an_output_schema_larger_than_the_limit_is_not_stored() {
        let mut tools = ListedTools::default();
        let big = format!(
            r#"{{"type":"object","description":"{}"}}"#,
            "x".repeat(MAX_SCHEMA_BYTES)
        );
        tools.record("big".into(), Some(&raw(&big)), false);
        assert!(matches!(
            tools.get("big").unwrap().output,
            Some(OutputSchema::NotStored(ref why)) if why.contains("larger than")
        ));
        assert_eq!(tools.bytes(), 0, "nothing of it is kept");
        let small = r#"{"type":"object"}"#;
        tools.record("small".into(), Some(&raw(small)), true);
        assert!(matches!(
            tools.get("small").unwrap().output,
            Some(OutputSchema::Schema(_, 17))
        ));
        assert!(tools.get("small").unwrap().idempotent);
        assert_eq!(tools.bytes(), 17);
        // Listed again without a schema, not idempotent: forgotten, bytes returned.
        tools.record("small".into(), None, false);
        assert!(tools.get("small").is_none());
        assert_eq!(tools.bytes(), 0);
    }

    #[test]
    fn finding_9_the_stored_output_schemas_are_bounded_in_bytes_together() {
        let mut tools = ListedTools::default();
        let schema = format!(
            r#"{{"type":"object","description":"{}"}}"#,
            "x".repeat(MAX_SCHEMA_BYTES - 100)
        );
        let fit = MAX_SCHEMAS_BYTES / schema.len();
        for i in 0..fit + 5 {
            tools.record(format!("t{i}"), Some(&raw(&schema)), false);
            assert!(tools.bytes() <= MAX_SCHEMAS_BYTES);
        }
        assert!(matches!(
            tools.get(&format!("t{}", fit + 1)).unwrap().output,
            Some(OutputSchema::NotStored(_))
        ));
        assert_eq!(tools.len(), fit + 5);
        tools.clear();
        assert_eq!((tools.len(), tools.bytes()), (0, 0));
    }

    #[test]
    fn the_count_of_tools_remembered_is_bounded() {
        let mut tools = ListedTools::default();
        for i in 0..MAX_TOOLS + 10 {
            tools.record(format!("t{i}"), None, true);
        }
        assert_eq!(tools.len(), MAX_TOOLS);
        // A tool remembered is still updated when the table is full.
        tools.record("t0".into(), None, false);
        assert!(tools.get("t0").is_none());
    }
}
