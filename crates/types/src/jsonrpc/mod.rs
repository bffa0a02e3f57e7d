//! The JSON-RPC 2.0 envelope as MCP uses it.
//!
//! The envelope is parsed once: [`decode`] classifies a message by the members it has and keeps
//! `params`, `result` and `error.data` as unparsed [`RawValue`]s until the code that knows their type
//! reads them ([`Request::params_as`], [`Response::result_as`], [`ErrorObject::data_as`], or the
//! generated per-version decoders).
//!
//! Classification is by member presence, never by trying shapes in turn:
//!
//! | members                      | message                     |
//! |------------------------------|-----------------------------|
//! | `method` and `id`            | [`Request`]                 |
//! | `method`, no `id`            | [`Notification`]            |
//! | `result` (and an `id`)       | [`Response`]                |
//! | `error` (`id` optional)      | [`ErrorResponse`]           |
//!
//! Every message must carry `"jsonrpc": "2.0"`. Members this module does not know are ignored.
//!
//! A JSON array is a batch (protocol 2025-03-26 only). This module decodes batches for every input;
//! whether a batch is acceptable for the negotiated protocol version is for the session to decide.
//!
//! The parts: `id` (request ids and progress tokens), `error` (error codes and objects), `message`
//! (the four kinds of message and how they are written) and `decode` (the serde visitors that
//! capture the members of an input and classify them).

use serde_json::value::RawValue;

mod decode;
mod error;
mod id;
mod message;

pub use decode::{DecodeError, Incoming, InvalidReason, decode, decode_str};
pub use error::{ErrorCode, ErrorObject};
pub use id::{ProgressToken, RequestId};
pub use message::{ErrorResponse, Message, Notification, Request, Response, encode, encode_batch};

/// The only `jsonrpc` version there is.
const JSONRPC_VERSION: &str = "2.0";

/// The kind of JSON value a raw value holds, for error messages.
fn json_kind(raw: &RawValue) -> &'static str {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// Helpers of the tests of every part of the envelope.
#[cfg(test)]
mod testing {
    use serde_json::Value;

    use super::*;

    pub(super) fn single(text: &str) -> Message {
        match decode_str(text) {
            Ok(Incoming::Single(message)) => message,
            other => panic!("expected a single message from {text}, got {other:?}"),
        }
    }

    pub(super) fn invalid(text: &str) -> (Option<RequestId>, InvalidReason) {
        match decode_str(text) {
            Err(DecodeError::InvalidRequest { id, reason }) => (id, reason),
            other => panic!("expected an invalid request from {text}, got {other:?}"),
        }
    }

    pub(super) fn as_value(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }
}
