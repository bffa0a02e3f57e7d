//! Decoding: [`decode`] and the serde visitors that capture the envelope members of a message
//! without failing on anything that is valid JSON, then classify them.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::error::{ErrorCode, ErrorObject};
use super::id::{IdProbe, IdProblem, RequestId};
use super::message::{ErrorResponse, Message, Notification, Request, Response};
use super::{JSONRPC_VERSION, json_kind};

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let members = deserializer.deserialize_map(MembersVisitor)?;
        classify(members).map_err(|err| match err {
            DecodeError::InvalidRequest { reason, .. } => de::Error::custom(reason),
            other => de::Error::custom(other),
        })
    }
}

/// `Deserialize` for one kind of message: decodes a [`Message`] and checks its kind.
macro_rules! deserialize_via_message {
    ($ty:ident, $variant:ident, $what:literal) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                match Message::deserialize(deserializer)? {
                    Message::$variant(m) => Ok(m),
                    other => Err(de::Error::custom(format_args!(
                        "expected {}, found {}",
                        $what,
                        other.kind()
                    ))),
                }
            }
        }
    };
}

deserialize_via_message!(Request, Request, "a request");
deserialize_via_message!(Notification, Notification, "a notification");
deserialize_via_message!(Response, Response, "a response");
deserialize_via_message!(ErrorResponse, Error, "an error response");

/// A decoded input: one message or a batch.
#[derive(Debug)]
#[non_exhaustive]
pub enum Incoming {
    /// A single message (a JSON object).
    Single(Message),
    /// A batch (a non-empty JSON array, protocol 2025-03-26): each element decoded on its own, so
    /// one invalid element does not spoil the others. Elements are never [`DecodeError::Parse`].
    Batch(Vec<Result<Message, DecodeError>>),
}

/// Why an input is not a JSON-RPC message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input is not JSON at all ([`ErrorCode::PARSE_ERROR`]).
    #[error("message is not valid JSON: {0}")]
    Parse(serde_json::Error),
    /// The input is JSON but not a valid JSON-RPC message ([`ErrorCode::INVALID_REQUEST`]).
    #[error("invalid JSON-RPC message: {reason}")]
    InvalidRequest {
        /// The message's id, when it could be read, so that the error reply can name it.
        id: Option<RequestId>,
        /// What is wrong.
        reason: InvalidReason,
    },
    /// The input is an empty JSON array ([`ErrorCode::INVALID_REQUEST`]).
    #[error("invalid JSON-RPC message: empty batch")]
    EmptyBatch,
}

/// What makes a JSON value an invalid JSON-RPC message (see [`DecodeError::InvalidRequest`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidReason {
    /// The message is not a JSON object; holds the kind of JSON value found.
    #[error("a JSON-RPC message must be a JSON object, found {0}")]
    NotAnObject(&'static str),
    /// A member appears twice; holds its name.
    #[error("duplicate member `{0}`")]
    DuplicateMember(&'static str),
    /// There is no `jsonrpc` member.
    #[error("missing `jsonrpc` member (must be \"2.0\")")]
    MissingVersion,
    /// `jsonrpc` is not `"2.0"`; holds the JSON found (or its kind, when long).
    #[error("`jsonrpc` must be \"2.0\", found {0}")]
    WrongVersion(String),
    /// The message has both `result` and `error`.
    #[error("message has both `result` and `error`")]
    BothResultAndError,
    /// The message has `method` and also `result` or `error`; holds the other member's name.
    #[error("message has both `method` and `{0}`")]
    MethodWithReply(&'static str),
    /// `method` is not a string; holds the kind of JSON value found.
    #[error("`method` must be a string, found {0}")]
    MethodNotString(&'static str),
    /// `params` is neither an object nor an array; holds the kind of JSON value found.
    #[error("`params` must be an object or an array, found {0}")]
    InvalidParams(&'static str),
    /// A request has `"id": null`, which MCP forbids.
    #[error("request id must not be null")]
    NullRequestId,
    /// A response with `result` has no `id`.
    #[error("response has no `id`")]
    MissingResponseId,
    /// A response with `result` has `"id": null`.
    #[error("response id must not be null")]
    NullResponseId,
    /// `id` is neither a string nor an integer within the `i64` range; holds the details.
    #[error("{0}")]
    InvalidId(String),
    /// `error` is not a valid error object; holds serde's description.
    #[error("invalid `error` member: {0}")]
    InvalidErrorObject(String),
    /// The message has none of `method`, `result` and `error`.
    #[error("message has none of `method`, `result` or `error`")]
    Unclassifiable,
}

impl DecodeError {
    /// The JSON-RPC error code a receiver answers with.
    pub fn code(&self) -> ErrorCode {
        match self {
            DecodeError::Parse(_) => ErrorCode::PARSE_ERROR,
            DecodeError::InvalidRequest { .. } | DecodeError::EmptyBatch => {
                ErrorCode::INVALID_REQUEST
            }
        }
    }

    /// The id of the offending message, when it could be read.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            DecodeError::InvalidRequest { id, .. } => id.as_ref(),
            DecodeError::Parse(_) | DecodeError::EmptyBatch => None,
        }
    }

    /// The error response a receiver sends back: this error's code and text, and its id when known.
    pub fn to_error_response(&self) -> ErrorResponse {
        ErrorResponse::new(
            self.id().cloned(),
            ErrorObject::new(self.code(), self.to_string()),
        )
    }
}

/// Decodes one input (a message or a batch) from bytes.
///
/// Fails with [`DecodeError::Parse`] when the input is not JSON, [`DecodeError::EmptyBatch`] for
/// `[]`, and [`DecodeError::InvalidRequest`] when a single message is invalid. Invalid batch
/// elements are reported inside [`Incoming::Batch`]. Batches are decoded whatever the protocol
/// version: refusing them (every version but 2025-03-26) is the session's job.
///
/// Input that is not UTF-8 is a parse error, even inside members this module skips (serde_json
/// does not check the UTF-8 of the strings it skips, so the bytes are checked first).
pub fn decode(bytes: &[u8]) -> Result<Incoming, DecodeError> {
    let text = std::str::from_utf8(bytes).map_err(|err| {
        DecodeError::Parse(de::Error::custom(format_args!(
            "invalid UTF-8 at byte {}",
            err.valid_up_to()
        )))
    })?;
    decode_str(text)
}

/// Decodes one input (a message or a batch) from a string, like [`decode`].
pub fn decode_str(text: &str) -> Result<Incoming, DecodeError> {
    serde_json::from_str::<Top>(text)
        .map_err(DecodeError::Parse)
        .and_then(Top::finish)
}

/// The envelope members of one message, captured without judging them. Collecting them never fails,
/// so serde_json only fails on input that is not JSON, which keeps [`DecodeError::Parse`] exact.
#[derive(Default)]
struct Members {
    jsonrpc: Option<Box<RawValue>>,
    id: Option<IdProbe>,
    method: Option<Box<RawValue>>,
    params: Option<Box<RawValue>>,
    result: Option<Box<RawValue>>,
    error: Option<Box<RawValue>>,
    duplicate: Option<&'static str>,
}

/// An envelope member name.
enum Key {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "jsonrpc" => Key::Jsonrpc,
                    "id" => Key::Id,
                    "method" => Key::Method,
                    "params" => Key::Params,
                    "result" => Key::Result,
                    "error" => Key::Error,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// Stores a member, remembering the first duplicate.
fn put<T>(
    slot: &mut Option<T>,
    value: T,
    name: &'static str,
    duplicate: &mut Option<&'static str>,
) {
    if slot.is_some() {
        duplicate.get_or_insert(name);
    } else {
        *slot = Some(value);
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Members;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
        let mut m = Members::default();
        let dup = &mut m.duplicate;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Jsonrpc => put(&mut m.jsonrpc, map.next_value()?, "jsonrpc", dup),
                Key::Id => put(&mut m.id, map.next_value()?, "id", dup),
                Key::Method => put(&mut m.method, map.next_value()?, "method", dup),
                Key::Params => put(&mut m.params, map.next_value()?, "params", dup),
                Key::Result => put(&mut m.result, map.next_value()?, "result", dup),
                Key::Error => put(&mut m.error, map.next_value()?, "error", dup),
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(m)
    }
}

/// serde_json's description of an error without its " at line L column C" suffix (the positions
/// are relative to a member, not to the message, so they would mislead).
fn without_position(err: &serde_json::Error) -> String {
    let text = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    match text.strip_suffix(&suffix) {
        Some(stripped) => stripped.to_owned(),
        None => text,
    }
}

/// Classifies the members of one message.
fn classify(m: Members) -> Result<Message, DecodeError> {
    let Members {
        jsonrpc,
        id,
        method,
        params,
        result,
        error,
        duplicate,
    } = m;
    let (id, id_problem) = match id {
        None => (None, None),
        Some(IdProbe::Number(n)) => (Some(RequestId::Number(n)), None),
        Some(IdProbe::String(s)) => (Some(RequestId::String(s)), None),
        Some(IdProbe::Invalid(problem)) => (None, Some(problem)),
    };
    let invalid = |id: Option<RequestId>, reason| Err(DecodeError::InvalidRequest { id, reason });

    if let Some(name) = duplicate {
        return invalid(id, InvalidReason::DuplicateMember(name));
    }
    match jsonrpc.as_deref() {
        None => return invalid(id, InvalidReason::MissingVersion),
        Some(raw) => {
            if serde_json::from_str::<Cow<'_, str>>(raw.get())
                .ok()
                .as_deref()
                != Some(JSONRPC_VERSION)
            {
                let text = raw.get();
                let found = if text.len() <= 32 && !text.starts_with(['{', '[']) {
                    text.to_owned()
                } else {
                    json_kind(raw).to_owned()
                };
                return invalid(id, InvalidReason::WrongVersion(found));
            }
        }
    }

    if let Some(method) = method {
        if result.is_some() {
            return invalid(id, InvalidReason::MethodWithReply("result"));
        }
        if error.is_some() {
            return invalid(id, InvalidReason::MethodWithReply("error"));
        }
        let Ok(method) = serde_json::from_str::<String>(method.get()) else {
            return invalid(id, InvalidReason::MethodNotString(json_kind(&method)));
        };
        if let Some(params) = &params
            && !params.get().starts_with(['{', '['])
        {
            return invalid(id, InvalidReason::InvalidParams(json_kind(params)));
        }
        return match (id, id_problem) {
            (Some(id), _) => Ok(Message::Request(Request { id, method, params })),
            (None, None) => Ok(Message::Notification(Notification { method, params })),
            (None, Some(IdProblem::Null)) => invalid(None, InvalidReason::NullRequestId),
            (None, Some(problem)) => invalid(
                None,
                InvalidReason::InvalidId(problem.describe("request id")),
            ),
        };
    }

    match (result, error) {
        (Some(_), Some(_)) => invalid(id, InvalidReason::BothResultAndError),
        (Some(result), None) => match (id, id_problem) {
            (Some(id), _) => Ok(Message::Response(Response { id, result })),
            (None, None) => invalid(None, InvalidReason::MissingResponseId),
            (None, Some(IdProblem::Null)) => invalid(None, InvalidReason::NullResponseId),
            (None, Some(problem)) => invalid(
                None,
                InvalidReason::InvalidId(problem.describe("response id")),
            ),
        },
        (None, Some(error)) => {
            if let Some(problem) = id_problem.filter(|p| !matches!(p, IdProblem::Null)) {
                return invalid(
                    None,
                    InvalidReason::InvalidId(problem.describe("response id")),
                );
            }
            match serde_json::from_str::<ErrorObject>(error.get()) {
                Ok(error) => Ok(Message::Error(ErrorResponse { id, error })),
                Err(err) => invalid(
                    id,
                    InvalidReason::InvalidErrorObject(without_position(&err)),
                ),
            }
        }
        (None, None) => invalid(id, InvalidReason::Unclassifiable),
    }
}

/// A whole input, captured without failing on anything that is valid JSON.
enum Top {
    Object(Members),
    Array(Vec<Result<Message, DecodeError>>),
    Other(&'static str),
}

impl Top {
    fn finish(self) -> Result<Incoming, DecodeError> {
        match self {
            Top::Object(members) => classify(members).map(Incoming::Single),
            Top::Array(elements) if elements.is_empty() => Err(DecodeError::EmptyBatch),
            Top::Array(elements) => Ok(Incoming::Batch(elements)),
            Top::Other(kind) => Err(not_an_object(kind)),
        }
    }
}

fn not_an_object(kind: &'static str) -> DecodeError {
    DecodeError::InvalidRequest {
        id: None,
        reason: InvalidReason::NotAnObject(kind),
    }
}

/// The visitor methods for JSON scalars, each giving `self.other(kind)`.
macro_rules! visit_scalars_as_other {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(self.other("a boolean"))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(self.other("a number"))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(self.other("a number"))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(self.other("a number"))
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(self.other("a string"))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(self.other("null"))
        }
    };
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TopVisitor)
    }
}

struct TopVisitor;

impl TopVisitor {
    fn other(self, kind: &'static str) -> Top {
        Top::Other(kind)
    }
}

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message or batch")
    }

    visit_scalars_as_other!();

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Top, A::Error> {
        MembersVisitor.visit_map(map).map(Top::Object)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        let mut elements = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(BatchElement(element)) = seq.next_element()? {
            elements.push(element);
        }
        Ok(Top::Array(elements))
    }
}

/// One element of a batch, decoded on its own.
struct BatchElement(Result<Message, DecodeError>);

impl<'de> Deserialize<'de> for BatchElement {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(BatchElementVisitor)
            .map(BatchElement)
    }
}

struct BatchElementVisitor;

impl BatchElementVisitor {
    fn other(self, kind: &'static str) -> Result<Message, DecodeError> {
        Err(not_an_object(kind))
    }
}

impl<'de> Visitor<'de> for BatchElementVisitor {
    type Value = Result<Message, DecodeError>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    visit_scalars_as_other!();

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        MembersVisitor.visit_map(map).map(classify)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(self.other("an array"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::jsonrpc::testing::*;
    use crate::jsonrpc::*;

    #[test]
    fn message_with_both_result_and_error_is_rejected() {
        let (id, reason) =
            invalid(r#"{"jsonrpc":"2.0","id":4,"result":{},"error":{"code":1,"message":"x"}}"#);
        assert_eq!(id, Some(RequestId::Number(4)));
        assert_eq!(reason.to_string(), "message has both `result` and `error`");
    }

    #[test]
    fn missing_jsonrpc_is_rejected() {
        let (_, reason) = invalid(r#"{"id":1,"method":"ping"}"#);
        assert_eq!(reason, InvalidReason::MissingVersion);
    }

    #[test]
    fn jsonrpc_other_than_2_0_is_rejected() {
        let (_, reason) = invalid(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#);
        assert_eq!(
            reason.to_string(),
            r#"`jsonrpc` must be "2.0", found "1.0""#
        );
        let (_, reason) = invalid(r#"{"jsonrpc":2.0,"id":1,"method":"ping"}"#);
        assert_eq!(reason.to_string(), r#"`jsonrpc` must be "2.0", found 2.0"#);
        // An escaped but equal string is fine.
        single(r#"{"jsonrpc":"2\u002e0","method":"ping"}"#);
    }

    #[test]
    fn method_with_result_or_error_is_rejected() {
        let (_, reason) = invalid(r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#);
        assert_eq!(reason.to_string(), "message has both `method` and `result`");
        let (_, reason) =
            invalid(r#"{"jsonrpc":"2.0","method":"ping","error":{"code":1,"message":"x"}}"#);
        assert_eq!(reason, InvalidReason::MethodWithReply("error"));
    }

    #[test]
    fn params_that_are_not_structured_are_rejected() {
        for (params, kind) in [(r#""x""#, "a string"), ("3", "a number"), ("null", "null")] {
            let (id, reason) = invalid(&format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{params}}}"#
            ));
            assert_eq!(id, Some(RequestId::Number(1)));
            assert_eq!(reason, InvalidReason::InvalidParams(kind));
        }
        assert!(Request::new(1, "ping", "x").is_err());
        single(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1,2]}"#);
    }

    #[test]
    fn batch_reports_each_element_on_its_own() {
        let text = r#"[
            {"jsonrpc":"2.0","id":1,"method":"ping"},
            {"jsonrpc":"1.0","id":2,"method":"ping"},
            7,
            [1],
            {"jsonrpc":"2.0","method":"notifications/initialized"}
        ]"#;
        let Ok(Incoming::Batch(elements)) = decode(text.as_bytes()) else {
            panic!("not a batch")
        };
        assert_eq!(elements.len(), 5);
        assert!(matches!(elements[0], Ok(Message::Request(_))));
        let Err(err) = &elements[1] else {
            panic!("element 1 should be invalid")
        };
        assert_eq!(err.id(), Some(&RequestId::Number(2)));
        assert_eq!(err.code(), ErrorCode::INVALID_REQUEST);
        assert!(matches!(
            elements[2],
            Err(DecodeError::InvalidRequest {
                reason: InvalidReason::NotAnObject("a number"),
                ..
            })
        ));
        assert!(matches!(
            elements[3],
            Err(DecodeError::InvalidRequest {
                reason: InvalidReason::NotAnObject("an array"),
                ..
            })
        ));
        assert!(matches!(elements[4], Ok(Message::Notification(_))));
    }

    #[test]
    fn empty_batch_is_an_error() {
        let err = decode_str(" [ ] ").unwrap_err();
        assert!(matches!(err, DecodeError::EmptyBatch));
        assert_eq!(err.code(), ErrorCode::INVALID_REQUEST);
    }

    #[test]
    fn input_that_is_not_json_is_a_parse_error() {
        for text in [
            "",
            "{",
            r#"{"jsonrpc":"2.0","method":"x"} trailing"#,
            "\"x\" 1",
            "nul",
        ] {
            let err = decode_str(text).unwrap_err();
            assert!(matches!(err, DecodeError::Parse(_)), "{text:?}: {err:?}");
            assert_eq!(err.code(), ErrorCode::PARSE_ERROR);
            let reply = err.to_error_response();
            assert_eq!(reply.id, None);
            assert_eq!(reply.error.code.0, -32700);
        }
        assert!(matches!(
            decode(b"{\"a\":\"\xff\"}"),
            Err(DecodeError::Parse(_))
        ));
    }

    #[test]
    fn invalid_request_with_readable_id_carries_the_id() {
        let err = decode_str(r#"{"jsonrpc":"2.0","id":"r-9","method":7}"#).unwrap_err();
        assert_eq!(err.id(), Some(&RequestId::from("r-9")));
        assert_eq!(
            err.to_string(),
            "invalid JSON-RPC message: `method` must be a string, found a number"
        );
        let reply = err.to_error_response();
        assert_eq!(
            as_value(&encode(&reply.into())),
            json!({
                "jsonrpc": "2.0",
                "id": "r-9",
                "error": {
                    "code": -32600,
                    "message": "invalid JSON-RPC message: `method` must be a string, found a number"
                }
            })
        );
    }

    #[test]
    fn unknown_members_are_ignored_and_duplicates_rejected() {
        let message = single(r#"{"jsonrpc":"2.0","id":1,"method":"ping","extra":{"a":[1]}}"#);
        assert_eq!(message.method(), Some("ping"));
        let (_, reason) = invalid(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#);
        assert_eq!(reason, InvalidReason::DuplicateMember("id"));
    }

    #[test]
    fn response_without_usable_id_is_rejected() {
        let (_, reason) = invalid(r#"{"jsonrpc":"2.0","result":{}}"#);
        assert_eq!(reason, InvalidReason::MissingResponseId);
        let (_, reason) = invalid(r#"{"jsonrpc":"2.0","id":null,"result":{}}"#);
        assert_eq!(reason, InvalidReason::NullResponseId);
    }

    #[test]
    fn top_level_scalar_is_an_invalid_request() {
        let (id, reason) = invalid(r#""hello""#);
        assert_eq!(id, None);
        assert_eq!(reason, InvalidReason::NotAnObject("a string"));
    }
}
