//! The four kinds of message, how they are written, and [`encode`].

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde::ser::{self, SerializeMap, Serializer};
use serde_json::value::RawValue;

use super::error::ErrorObject;
use super::id::RequestId;
use super::{JSONRPC_VERSION, json_kind};

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
/// fails with the [`InvalidReason`](super::InvalidReason) text; [`decode`](super::decode) gives typed errors and handles batches.
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

    pub(super) fn kind(&self) -> &'static str {
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
    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::jsonrpc::testing::*;
    use crate::jsonrpc::*;

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
    fn notification_is_a_method_without_id() {
        let message = single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let Message::Notification(n) = message else {
            panic!("not a notification")
        };
        assert_eq!(n.method, "notifications/initialized");
        assert!(n.params.is_none());
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
}
