//! The edge where what handlers produce becomes JSON-RPC: results written for the client's
//! version, list cursors, the text of schema violations, and the errors every route words the
//! same way.

pub(crate) mod cursor;
#[cfg(feature = "validation")]
pub(crate) mod schema;
pub(crate) mod write;

use modelctx_types::{ErrorCode, ErrorObject};

/// An invalid-params error (-32602).
pub(crate) fn invalid_params(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::INVALID_PARAMS, message)
}

/// An internal error (-32603).
pub(crate) fn internal(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, message)
}

/// `value` written as JSON text; an internal error (-32603) when it cannot be (a map with keys
/// that are not strings).
pub(crate) fn raw<T: serde::Serialize + ?Sized>(
    value: &T,
) -> Result<Box<serde_json::value::RawValue>, ErrorObject> {
    serde_json::value::to_raw_value(value)
        .map_err(|e| internal(format!("unserializable result: {e}")))
}

/// Whether `error` is one a client of an older era than 2026-07-28 (`modern` false) has no
/// code for: -32021, a client capability the request needs.
pub(crate) fn unknown_to_era(error: &ErrorObject, modern: bool) -> bool {
    !modern && error.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
}

/// `error` as a handler's protocol error reaches a client: as it is, but one its era has no
/// code for ([`unknown_to_era`]) as -32603 with its message (a tool's is a failed call
/// instead, see `tool::call`).
pub(crate) fn for_era(error: ErrorObject, modern: bool) -> ErrorObject {
    if unknown_to_era(&error, modern) {
        internal(error.message)
    } else {
        error
    }
}

/// `method` as a `'static` name, when it is one of the methods a server answers that carry
/// work (those a middleware chain and the metrics see most): a copy of it is then no copy.
pub(crate) fn known_method(method: &str) -> Option<&'static str> {
    use modelctx_types::consts::*;
    const KNOWN: &[&str] = &[
        ToolsCall::VALUE,
        ToolsList::VALUE,
        PromptsGet::VALUE,
        PromptsList::VALUE,
        ResourcesRead::VALUE,
        ResourcesList::VALUE,
        ResourcesTemplatesList::VALUE,
        CompletionComplete::VALUE,
    ];
    KNOWN.iter().find(|known| **known == method).copied()
}
