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

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser::{self, SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The only `jsonrpc` version there is.
const JSONRPC_VERSION: &str = "2.0";

// ---------------------------------------------------------------------------------------------
// Request ids and progress tokens
// ---------------------------------------------------------------------------------------------

/// Defines a "string or integer" wire type. Request ids and progress tokens share the shape and the
/// decoding rules (see [`IdProbe`]) but are distinct types.
macro_rules! string_or_integer {
    ($(#[$attr:meta])* $name:ident, $what:literal) => {
        $(#[$attr])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            /// A JSON integer (within the `i64` range).
            Number(i64),
            /// A JSON string.
            String(String),
        }

        impl fmt::Display for $name {
            /// Shows the value as on the wire: a number bare, a string quoted, so `1` and `"1"` differ.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $name::Number(n) => fmt::Display::fmt(n, f),
                    $name::String(s) => fmt::Debug::fmt(s, f),
                }
            }
        }

        impl From<i64> for $name {
            fn from(n: i64) -> Self {
                $name::Number(n)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name::String(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name::String(s.to_owned())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    $name::Number(n) => serializer.serialize_i64(*n),
                    $name::String(s) => serializer.serialize_str(s),
                }
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                match IdProbe::deserialize(deserializer)? {
                    IdProbe::Number(n) => Ok($name::Number(n)),
                    IdProbe::String(s) => Ok($name::String(s)),
                    IdProbe::Invalid(problem) => {
                        Err(de::Error::custom(problem.describe($what)))
                    }
                }
            }
        }
    };
}

string_or_integer! {
    /// The `id` of a request: a JSON string or integer, never `null`.
    ///
    /// Integers must fit in an `i64`; numbers written with a fraction or an exponent (`1.5`, `1.0`,
    /// `1e3`) are refused rather than rounded, so an id always serializes back as it was received.
    RequestId, "request id"
}

string_or_integer! {
    /// A progress token (`_meta.progressToken`): a JSON string or integer, never `null`.
    ///
    /// It has the wire shape and decoding rules of [`RequestId`] but is a different value: a token
    /// names a progress stream, not a request.
    ProgressToken, "progress token"
}

/// A string-or-integer value read without failing, so that the envelope can report a bad `id` in
/// its own words and still classify the rest of the message.
enum IdProbe {
    Number(i64),
    String(String),
    Invalid(IdProblem),
}

/// Why a value is not a valid id.
enum IdProblem {
    Null,
    OutOfRange(u64),
    NotAnInteger(f64),
    WrongType(&'static str),
}

impl IdProblem {
    fn describe(&self, what: &str) -> String {
        match self {
            IdProblem::Null => format!("{what} must not be null"),
            IdProblem::OutOfRange(n) => format!("{what} {n} is outside the i64 range"),
            IdProblem::NotAnInteger(x) => format!(
                "{what} must be a string or an integer without fraction or exponent \
                 within the i64 range, found the number {x:?}"
            ),
            IdProblem::WrongType(kind) => {
                format!("{what} must be a string or an integer, found {kind}")
            }
        }
    }
}

impl<'de> Deserialize<'de> for IdProbe {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(IdProbeVisitor)
    }
}

struct IdProbeVisitor;

impl<'de> Visitor<'de> for IdProbeVisitor {
    type Value = IdProbe;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an integer")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<IdProbe, E> {
        Ok(IdProbe::Number(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<IdProbe, E> {
        Ok(i64::try_from(v).map_or(IdProbe::Invalid(IdProblem::OutOfRange(v)), IdProbe::Number))
    }

    // serde_json reports any number written with a fraction or an exponent, and any integer beyond
    // the u64 range, as an f64.
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<IdProbe, E> {
        Ok(IdProbe::Invalid(IdProblem::NotAnInteger(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<IdProbe, E> {
        Ok(IdProbe::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<IdProbe, E> {
        Ok(IdProbe::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<IdProbe, E> {
        Ok(IdProbe::Invalid(IdProblem::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<IdProbe, E> {
        Ok(IdProbe::Invalid(IdProblem::Null))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<IdProbe, E> {
        Ok(IdProbe::Invalid(IdProblem::WrongType("a boolean")))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IdProbe, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(IdProbe::Invalid(IdProblem::WrongType("an array")))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IdProbe, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(IdProbe::Invalid(IdProblem::WrongType("an object")))
    }
}

// ---------------------------------------------------------------------------------------------
// Error codes and error objects
// ---------------------------------------------------------------------------------------------

/// A JSON-RPC error code.
///
/// The type is open: any integer decodes and serializes back unchanged. The codes the protocol
/// defines are associated constants; [`ErrorCode::name`] names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ErrorCode(pub i64);

/// Declares the named error codes and [`ErrorCode::name`] from one table.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $name:ident = $code:literal,)*) => {
        impl ErrorCode {
            $(
                $(#[doc = $doc])*
                pub const $name: ErrorCode = ErrorCode($code);
            )*

            /// The name of a code in the table above (`"PARSE_ERROR"`), or `None` for any other code.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($code => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    /// `-32700`: the message is not valid JSON.
    PARSE_ERROR = -32700,
    /// `-32600`: the message is JSON but not a valid JSON-RPC message.
    INVALID_REQUEST = -32600,
    /// `-32601`: the method does not exist or is not available.
    METHOD_NOT_FOUND = -32601,
    /// `-32602`: the params are not valid for the method.
    INVALID_PARAMS = -32602,
    /// `-32603`: an internal error of the receiver.
    INTERNAL_ERROR = -32603,
    /// `-32001`: a local timeout code some older peers send: decoded, never sent by modelctx (a
    /// local timeout is a typed local error, not a wire error). See [`ErrorCode::is_sendable`].
    REQUEST_TIMEOUT = -32001,
    /// `-32002`: resource not found, in protocol versions up to 2025-11-25. 2026-07-28 answers a
    /// missing resource with [`ErrorCode::INVALID_PARAMS`] and must not emit this code.
    RESOURCE_NOT_FOUND = -32002,
    /// `-32020`: a transport header does not match the message.
    HEADER_MISMATCH = -32020,
    /// `-32021`: the request needs a client capability the client did not declare.
    MISSING_REQUIRED_CLIENT_CAPABILITY = -32021,
    /// `-32022`: the requested protocol version is not supported.
    UNSUPPORTED_PROTOCOL_VERSION = -32022,
    /// `-32042`: the server needs the client to complete a URL-mode elicitation first (2025-11-25;
    /// its error-code policy says 2026-07-28 must not emit it).
    URL_ELICITATION_REQUIRED = -32042,
}

impl ErrorCode {
    /// Whether modelctx may put this code on the wire: `false` only for
    /// [`ErrorCode::REQUEST_TIMEOUT`], which is decoded from older peers but never sent.
    pub const fn is_sendable(self) -> bool {
        self.0 != Self::REQUEST_TIMEOUT.0
    }
}

impl fmt::Display for ErrorCode {
    /// The code's name when it has one (`METHOD_NOT_FOUND`), else its number (`-31999`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => fmt::Display::fmt(&self.0, f),
        }
    }
}

impl From<i64> for ErrorCode {
    fn from(code: i64) -> Self {
        ErrorCode(code)
    }
}

impl From<ErrorCode> for i64 {
    fn from(code: ErrorCode) -> Self {
        code.0
    }
}

/// The `error` member of an error response.
///
/// `data` keeps the difference between absent (`None`, not written) and a present `null`
/// (`Some` of the raw text `null`, written back as `"data":null`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code.
    pub code: ErrorCode,
    /// A short description of the error.
    pub message: String,
    /// Additional information, unparsed; read it with [`ErrorObject::data_as`].
    #[serde(
        default,
        deserialize_with = "present_raw",
        skip_serializing_if = "Option::is_none"
    )]
    pub data: Option<Box<RawValue>>,
}

/// Deserializes an optional raw member so that a present `null` stays `Some` (used with
/// `#[serde(default)]`, which gives `None` when the member is absent).
fn present_raw<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(deserializer).map(Some)
}

impl ErrorObject {
    /// An error object without `data`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Sets `data` to `data` serialized as JSON (a `()` or `None` gives a present `null`).
    pub fn with_data(
        mut self,
        data: &(impl Serialize + ?Sized),
    ) -> Result<Self, serde_json::Error> {
        self.data = Some(serde_json::value::to_raw_value(data)?);
        Ok(self)
    }

    /// Reads `data` as a `T`; `Ok(None)` when `data` is absent.
    pub fn data_as<T: DeserializeOwned>(&self) -> Result<Option<T>, serde_json::Error> {
        self.data
            .as_deref()
            .map(|raw| serde_json::from_str(raw.get()))
            .transpose()
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ErrorObject {}

// ---------------------------------------------------------------------------------------------
// The four kinds of message
// ---------------------------------------------------------------------------------------------

/// A request: a method call that expects a response with the same `id`.
#[derive(Debug, Clone)]
pub struct Request {
    /// The id the response will carry.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The params, unparsed (a JSON object or array when present); read them with
    /// [`Request::params_as`].
    pub params: Option<Box<RawValue>>,
}

/// A notification: a method call without an `id`, which gets no response.
#[derive(Debug, Clone)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// The params, unparsed (a JSON object or array when present); read them with
    /// [`Notification::params_as`].
    pub params: Option<Box<RawValue>>,
}

/// A successful response to the request with the same `id`.
#[derive(Debug, Clone)]
pub struct Response {
    /// The id of the request this answers.
    pub id: RequestId,
    /// The result, unparsed (any JSON value); read it with [`Response::result_as`].
    pub result: Box<RawValue>,
}

/// An error response.
#[derive(Debug, Clone)]
pub struct ErrorResponse {
    /// The id of the request this answers; `None` when the request's id could not be determined
    /// (decoded from an absent id or `"id": null`, written without an `id` member).
    pub id: Option<RequestId>,
    /// The error.
    pub error: ErrorObject,
}

/// Serializes `params` for a request or notification: `null` (from `()` or `None`) means no params,
/// an object or array is kept, anything else is refused because JSON-RPC params must be structured.
fn params_to_raw(
    params: &(impl Serialize + ?Sized),
) -> Result<Option<Box<RawValue>>, serde_json::Error> {
    let raw = serde_json::value::to_raw_value(params)?;
    match raw.get().as_bytes().first() {
        Some(b'{' | b'[') => Ok(Some(raw)),
        Some(b'n') => Ok(None),
        _ => Err(ser::Error::custom(format_args!(
            "params must serialize to a JSON object or array, not {}",
            json_kind(&raw)
        ))),
    }
}

/// Reads params as a `P`, reading absent params as `{}`.
fn params_as<P: DeserializeOwned>(params: Option<&RawValue>) -> Result<P, serde_json::Error> {
    serde_json::from_str(params.map_or("{}", RawValue::get))
}

impl Request {
    /// A request with `params` serialized as JSON.
    ///
    /// `params` must serialize to an object or an array; `()` or `None` (JSON `null`) gives a
    /// request without params; any other JSON value is an error.
    pub fn new(
        id: impl Into<RequestId>,
        method: impl Into<String>,
        params: &(impl Serialize + ?Sized),
    ) -> Result<Self, serde_json::Error> {
        Ok(Request {
            id: id.into(),
            method: method.into(),
            params: params_to_raw(params)?,
        })
    }

    /// Reads the params as a `P`.
    ///
    /// Absent params are read as an empty object `{}`, so a params type whose members are all
    /// optional decodes from a request without params; a type that cannot be read from `{}` (one
    /// with a required member, or `()`) returns that error.
    pub fn params_as<P: DeserializeOwned>(&self) -> Result<P, serde_json::Error> {
        params_as(self.params.as_deref())
    }
}

impl Notification {
    /// A notification with `params` serialized as JSON, with the rules of [`Request::new`].
    pub fn new(
        method: impl Into<String>,
        params: &(impl Serialize + ?Sized),
    ) -> Result<Self, serde_json::Error> {
        Ok(Notification {
            method: method.into(),
            params: params_to_raw(params)?,
        })
    }

    /// Reads the params as a `P`, reading absent params as `{}` like [`Request::params_as`].
    pub fn params_as<P: DeserializeOwned>(&self) -> Result<P, serde_json::Error> {
        params_as(self.params.as_deref())
    }
}

impl Response {
    /// A response with `result` serialized as JSON.
    pub fn new(
        id: impl Into<RequestId>,
        result: &(impl Serialize + ?Sized),
    ) -> Result<Self, serde_json::Error> {
        Ok(Response {
            id: id.into(),
            result: serde_json::value::to_raw_value(result)?,
        })
    }

    /// Reads the result as an `R`.
    pub fn result_as<R: DeserializeOwned>(&self) -> Result<R, serde_json::Error> {
        serde_json::from_str(self.result.get())
    }
}

impl ErrorResponse {
    /// An error response; `id` is `None` when the request's id could not be determined.
    pub fn new(id: Option<RequestId>, error: ErrorObject) -> Self {
        ErrorResponse { id, error }
    }
}

/// One JSON-RPC message, classified by the members it has: `method` and `id` make a request,
/// `method` alone a notification, `result` a response, `error` an error response.
///
/// `Deserialize` works with serde_json's deserializers only (the payloads are [`RawValue`]s) and
/// fails with the [`InvalidReason`] text; [`decode`] gives typed errors and handles batches.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Message {
    /// A request (`method` and `id`).
    Request(Request),
    /// A notification (`method`, no `id`).
    Notification(Notification),
    /// A successful response (`result`).
    Response(Response),
    /// An error response (`error`).
    Error(ErrorResponse),
}

impl Message {
    /// The message's id: the request's or the response's own; `None` for a notification and for an
    /// error response without an id.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Message::Request(r) => Some(&r.id),
            Message::Response(r) => Some(&r.id),
            Message::Error(e) => e.id.as_ref(),
            Message::Notification(_) => None,
        }
    }

    /// The method of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(r) => Some(&r.method),
            Message::Notification(n) => Some(&n.method),
            Message::Response(_) | Message::Error(_) => None,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Message::Request(_) => "a request",
            Message::Notification(_) => "a notification",
            Message::Response(_) => "a response",
            Message::Error(_) => "an error response",
        }
    }
}

impl From<Request> for Message {
    fn from(r: Request) -> Self {
        Message::Request(r)
    }
}

impl From<Notification> for Message {
    fn from(n: Notification) -> Self {
        Message::Notification(n)
    }
}

impl From<Response> for Message {
    fn from(r: Response) -> Self {
        Message::Response(r)
    }
}

impl From<ErrorResponse> for Message {
    fn from(e: ErrorResponse) -> Self {
        Message::Error(e)
    }
}

// Serialization: `jsonrpc` first, then `id`, then `method`/`params` or `result`/`error`. Absent
// params and an absent error id are left out.

impl Serialize for Request {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3 + usize::from(self.params.is_some())))?;
        map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("method", &self.method)?;
        if let Some(params) = &self.params {
            map.serialize_entry("params", params)?;
        }
        map.end()
    }
}

impl Serialize for Notification {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2 + usize::from(self.params.is_some())))?;
        map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
        map.serialize_entry("method", &self.method)?;
        if let Some(params) = &self.params {
            map.serialize_entry("params", params)?;
        }
        map.end()
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("result", &self.result)?;
        map.end()
    }
}

impl Serialize for ErrorResponse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2 + usize::from(self.id.is_some())))?;
        map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
        if let Some(id) = &self.id {
            map.serialize_entry("id", id)?;
        }
        map.serialize_entry("error", &self.error)?;
        map.end()
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Message::Request(r) => r.serialize(serializer),
            Message::Notification(n) => n.serialize(serializer),
            Message::Response(r) => r.serialize(serializer),
            Message::Error(e) => e.serialize(serializer),
        }
    }
}

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

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

/// Encodes one message as compact JSON, `"jsonrpc":"2.0"` first.
///
/// The output never contains a newline byte, so it can be framed by newlines (the stdio transport).
/// serde_json's compact output has none (newlines in strings are escaped), and raw payloads kept
/// from a pretty-printed input can only hold newlines as insignificant whitespace, which is
/// removed. The message is not validated: `params` built by hand as, say, a string are written as
/// they are.
pub fn encode(message: &Message) -> Vec<u8> {
    to_single_line(serde_json::to_vec(message))
}

/// Encodes a batch (a JSON array of messages), like [`encode`].
///
/// The receiver refuses an empty batch, so `messages` should not be empty.
pub fn encode_batch(messages: &[Message]) -> Vec<u8> {
    to_single_line(serde_json::to_vec(messages))
}

fn to_single_line(encoded: Result<Vec<u8>, serde_json::Error>) -> Vec<u8> {
    // Messages hold only strings, integers and raw JSON, and writing to a Vec cannot fail.
    let mut bytes = encoded.expect("serializing a JSON-RPC message into memory cannot fail");
    // Outside strings a newline or carriage return is whitespace, and JSON forbids them raw inside
    // strings, so dropping them keeps the JSON equal.
    if bytes.iter().any(|&b| b == b'\n' || b == b'\r') {
        bytes.retain(|&b| b != b'\n' && b != b'\r');
    }
    bytes
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn single(text: &str) -> Message {
        match decode_str(text) {
            Ok(Incoming::Single(message)) => message,
            other => panic!("expected a single message from {text}, got {other:?}"),
        }
    }

    fn invalid(text: &str) -> (Option<RequestId>, InvalidReason) {
        match decode_str(text) {
            Err(DecodeError::InvalidRequest { id, reason }) => (id, reason),
            other => panic!("expected an invalid request from {text}, got {other:?}"),
        }
    }

    fn as_value(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn null_request_id_is_rejected() {
        let (id, reason) = invalid(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#);
        assert_eq!(id, None);
        assert_eq!(reason, InvalidReason::NullRequestId);
        assert_eq!(reason.to_string(), "request id must not be null");
        assert!(serde_json::from_str::<RequestId>("null").is_err());
    }

    #[test]
    fn fractional_and_exponent_ids_are_rejected() {
        for id in ["1.5", "1.0", "1e3"] {
            let (_, reason) = invalid(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
            assert!(
                matches!(reason, InvalidReason::InvalidId(_)),
                "{id}: {reason:?}"
            );
            assert!(
                reason.to_string().contains("without fraction or exponent"),
                "{reason}"
            );
            let err = serde_json::from_str::<RequestId>(id).unwrap_err();
            assert!(err.to_string().starts_with("request id must be"), "{err}");
        }
    }

    #[test]
    fn integer_ids_outside_i64_are_rejected() {
        for id in [
            "9223372036854775808",
            "18446744073709551616",
            "-9223372036854775809",
        ] {
            let (_, reason) = invalid(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
            assert!(
                matches!(reason, InvalidReason::InvalidId(_)),
                "{id}: {reason:?}"
            );
            assert!(serde_json::from_str::<RequestId>(id).is_err());
            assert!(serde_json::from_str::<ProgressToken>(id).is_err());
        }
        let err = serde_json::from_str::<RequestId>("9223372036854775808").unwrap_err();
        assert!(err.to_string().contains("outside the i64 range"), "{err}");
    }

    #[test]
    fn string_and_integer_ids_round_trip_verbatim() {
        for text in [
            r#"{"jsonrpc":"2.0","id":"abc-1","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":"1","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":9223372036854775807,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":0,"result":null}"#,
        ] {
            assert_eq!(String::from_utf8(encode(&single(text))).unwrap(), text);
        }
        assert_eq!(RequestId::from("1").to_string(), r#""1""#);
        assert_eq!(RequestId::from(1).to_string(), "1");
        assert_ne!(RequestId::from("1"), RequestId::from(1));
        let token: ProgressToken = serde_json::from_str(r#""tok""#).unwrap();
        assert_eq!(token, ProgressToken::from("tok"));
        assert_eq!(serde_json::to_string(&ProgressToken::from(7)).unwrap(), "7");
    }

    #[test]
    fn error_with_null_id_is_accepted_and_written_without_id() {
        let text = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;
        let Message::Error(error) = single(text) else {
            panic!("not an error response")
        };
        assert_eq!(error.id, None);
        assert_eq!(error.error.code, ErrorCode::PARSE_ERROR);
        assert_eq!(
            encode(&Message::Error(error)),
            br#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}"#
        );
    }

    #[test]
    fn error_without_id_is_accepted() {
        let message = single(r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"bad"}}"#);
        assert!(matches!(
            message,
            Message::Error(ErrorResponse { id: None, .. })
        ));
    }

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
    fn notification_is_a_method_without_id() {
        let message = single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let Message::Notification(n) = message else {
            panic!("not a notification")
        };
        assert_eq!(n.method, "notifications/initialized");
        assert!(n.params.is_none());
    }

    #[test]
    fn unknown_error_codes_round_trip() {
        for code in [-31999, 42] {
            let text =
                format!(r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":{code},"message":"m"}}}}"#);
            let message = single(&text);
            let Message::Error(e) = &message else {
                panic!("not an error response")
            };
            assert_eq!(e.error.code, ErrorCode(code));
            assert_eq!(e.error.code.name(), None);
            assert_eq!(e.error.code.to_string(), code.to_string());
            assert_eq!(encode(&message), text.as_bytes());
        }
        assert_eq!(ErrorCode::METHOD_NOT_FOUND.name(), Some("METHOD_NOT_FOUND"));
        assert_eq!(
            ErrorCode(-32022).to_string(),
            "UNSUPPORTED_PROTOCOL_VERSION"
        );
    }

    #[test]
    fn request_timeout_is_decoded_but_not_sendable() {
        let message = single(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"t"}}"#);
        let Message::Error(e) = message else {
            panic!("not an error response")
        };
        assert_eq!(e.error.code, ErrorCode::REQUEST_TIMEOUT);
        assert!(!e.error.code.is_sendable());
        assert!(ErrorCode::INTERNAL_ERROR.is_sendable());
        assert!(ErrorCode(42).is_sendable());
    }

    #[test]
    fn error_data_null_is_kept_apart_from_absent_data() {
        let with_null = r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m","data":null}}"#;
        let Message::Error(e) = single(with_null) else {
            panic!("not an error response")
        };
        assert_eq!(e.error.data.as_deref().map(RawValue::get), Some("null"));
        assert_eq!(e.error.data_as::<Value>().unwrap(), Some(Value::Null));
        assert_eq!(encode(&Message::Error(e)), with_null.as_bytes());

        let absent = r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#;
        let Message::Error(e) = single(absent) else {
            panic!("not an error response")
        };
        assert!(e.error.data.is_none());
        assert_eq!(e.error.data_as::<Value>().unwrap(), None);
        assert_eq!(encode(&Message::Error(e)), absent.as_bytes());

        let built = ErrorObject::new(ErrorCode::INVALID_PARAMS, "bad")
            .with_data(&())
            .unwrap();
        assert_eq!(
            serde_json::to_string(&built).unwrap(),
            r#"{"code":-32602,"message":"bad","data":null}"#
        );
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
    fn encoded_output_is_one_line_starting_with_jsonrpc() {
        let pretty = "{\n  \"params\": {\n    \"a\": [1,\r\n 2],\n    \"s\": \"x\\ny\"\n  },\n  \"method\": \"m\",\n  \"id\": 1,\n  \"jsonrpc\": \"2.0\"\n}";
        let message = single(pretty);
        let bytes = encode(&message);
        assert!(!bytes.contains(&b'\n') && !bytes.contains(&b'\r'));
        assert!(bytes.starts_with(br#"{"jsonrpc":"2.0""#));
        assert_eq!(as_value(&bytes), as_value(pretty.as_bytes()));
        let batch = encode_batch(&[message, Notification::new("n", &()).unwrap().into()]);
        assert!(!batch.contains(&b'\n'));
        assert!(batch.starts_with(br#"[{"jsonrpc":"2.0""#));
    }

    #[test]
    fn params_as_reads_absent_params_as_an_empty_object() {
        #[derive(Deserialize, Debug, PartialEq, Default)]
        struct Optional {
            cursor: Option<String>,
        }
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Required {
            name: String,
        }
        let Message::Request(request) = single(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        else {
            panic!("not a request")
        };
        assert_eq!(
            request.params_as::<Optional>().unwrap(),
            Optional::default()
        );
        assert!(request.params_as::<Required>().is_err());
        let request = Request::new(2, "tools/list", &json!({"cursor": "c"})).unwrap();
        assert_eq!(
            request.params_as::<Optional>().unwrap().cursor.as_deref(),
            Some("c")
        );
        assert!(Request::new(3, "ping", &()).unwrap().params.is_none());
    }

    #[test]
    fn every_kind_of_message_round_trips_to_the_same_json() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no","data":{"m":"x"}}}"#,
            r#"{"id":4,"result":[1, 2 ],"jsonrpc":"2.0"}"#,
        ] {
            let message = single(text);
            assert_eq!(
                as_value(&encode(&message)),
                as_value(text.as_bytes()),
                "{text}"
            );
            let via_serde: Message = serde_json::from_str(text).unwrap();
            assert_eq!(
                serde_json::to_value(&via_serde).unwrap(),
                as_value(text.as_bytes())
            );
            let via_value: Message = serde_json::from_value(as_value(text.as_bytes())).unwrap();
            assert_eq!(
                serde_json::to_value(&via_value).unwrap(),
                as_value(text.as_bytes())
            );
        }
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
    fn single_kind_deserializers_check_the_kind() {
        let request: Request =
            serde_json::from_str(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#).unwrap();
        assert_eq!(request.method, "m");
        let err = serde_json::from_str::<Response>(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("expected a response, found a request"),
            "{err}"
        );
        let err = serde_json::from_str::<Message>(r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#)
            .unwrap_err();
        assert!(
            err.to_string().contains("request id must not be null"),
            "{err}"
        );
    }

    #[test]
    fn top_level_scalar_is_an_invalid_request() {
        let (id, reason) = invalid(r#""hello""#);
        assert_eq!(id, None);
        assert_eq!(reason, InvalidReason::NotAnObject("a string"));
    }

    #[test]
    fn invalid_error_object_is_rejected_without_positions() {
        let (id, reason) =
            invalid(r#"{"jsonrpc":"2.0","id":5,"error":{"code":"x","message":"m"}}"#);
        assert_eq!(id, Some(RequestId::Number(5)));
        let text = reason.to_string();
        assert!(
            text.starts_with("invalid `error` member: invalid type"),
            "{text}"
        );
        assert!(!text.contains("line"), "{text}");
    }
}
