//! `structuredContent` checked against the output schema the server listed for the tool.

use modelctx_types::JsonObject;
use serde_json::Value;

use crate::driver::Shared;

/// How many violations are reported.
#[cfg(feature = "validation")]
const MAX_VIOLATIONS: usize = 8;

/// Checks `content` against `schema`, compiled once into the connection's bounded cache (no
/// network or file `$ref`, size and depth limits: the schema comes from the server).
#[cfg(feature = "validation")]
pub(crate) fn check(shared: &Shared, schema: &JsonObject, content: &Value) -> Result<(), String> {
    let validator = shared
        .schemas
        .validator(schema)
        .map_err(|e| format!("the output schema is unusable: {e}"))?;
    let violations = validator.validate(content, MAX_VIOLATIONS);
    if violations.is_empty() {
        return Ok(());
    }
    Err(violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; "))
}

/// Without the `validation` feature nothing is checked.
#[cfg(not(feature = "validation"))]
pub(crate) fn check(_: &Shared, _: &JsonObject, _: &Value) -> Result<(), String> {
    Ok(())
}
