//! Error codes and the `error` member of an error response.

use std::fmt;

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

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

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::jsonrpc::testing::*;
    use crate::jsonrpc::*;

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
