//! Hand-written building blocks that the generated wire types use.
//!
//! The generator (`cargo xtask codegen`) maps a few schema shapes onto these types instead of
//! generating them again for every version: fixed (`const`) values, the open `resultType` string,
//! any-JSON fields that must keep an explicit `null`, and the errors of method- and tag-based
//! dispatch.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON object whose keys are not known in advance: `_meta` contents, tool arguments, open
/// capability objects.
pub type JsonObject = serde_json::Map<String, Value>;

/// Declares zero-sized types that stand for one fixed JSON string (a schema `const`).
///
/// Each type serializes as its string and refuses any other string, so a generated struct with a
/// `type: "text"` field cannot be built or decoded with a different tag.
macro_rules! const_strs {
    ($($(#[$attr:meta])* $name:ident = $value:literal,)*) => {
        $(
            $(#[$attr])*
            #[doc = concat!("The fixed JSON string `\"", $value, "\"`.")]
            #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
            pub struct $name;

            impl $name {
                /// The string this type stands for.
                pub const VALUE: &'static str = $value;
            }

            impl ::serde::Serialize for $name {
                fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                    serializer.serialize_str($value)
                }
            }

            impl<'de> ::serde::Deserialize<'de> for $name {
                fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                    $crate::support::expect_str(deserializer, $value).map(|()| $name)
                }
            }
        )*
    };
}
pub(crate) use const_strs;

/// Deserializes a string and checks that it equals `expected`.
pub(crate) fn expect_str<'de, D: Deserializer<'de>>(
    deserializer: D,
    expected: &'static str,
) -> Result<(), D::Error> {
    struct Visitor(&'static str);
    impl de::Visitor<'_> for Visitor {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "the string \"{}\"", self.0)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
            if v == self.0 {
                Ok(())
            } else {
                Err(E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
    }
    deserializer.deserialize_str(Visitor(expected))
}

/// A fixed JSON integer (a schema integer `const`, such as an error code).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IntConst<const N: i64>;

impl<const N: i64> IntConst<N> {
    /// The integer this type stands for.
    pub const VALUE: i64 = N;
}

impl<const N: i64> Serialize for IntConst<N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(N)
    }
}

impl<'de, const N: i64> Deserialize<'de> for IntConst<N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let found = i64::deserialize(deserializer)?;
        if found == N {
            Ok(IntConst)
        } else {
            Err(de::Error::custom(format_args!(
                "expected the integer {N}, found {found}"
            )))
        }
    }
}

/// The value of a result's `resultType` (protocol 2026-07-28 and extensions).
///
/// The schema types it as an open string: `"complete"` and `"input_required"` are defined by the
/// protocol, extensions add others (the tasks extension adds `"task"`). An absent `resultType` means
/// `"complete"`, which is why this type is `Default`. A value this enum does not name is kept in
/// [`ResultType::Other`]; whether it is acceptable is for the reader to decide (the protocol says a
/// client must treat a value it does not recognise as invalid).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResultType {
    /// `"complete"`: the request's final result.
    #[default]
    Complete,
    /// `"input_required"`: the server needs input from the client before it can finish.
    InputRequired,
    /// `"task"`: the tasks extension created a task for the request.
    Task,
    /// Any other value, kept verbatim.
    Other(String),
}

impl ResultType {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            ResultType::Complete => "complete",
            ResultType::InputRequired => "input_required",
            ResultType::Task => "task",
            ResultType::Other(other) => other,
        }
    }

    fn from_wire(s: &str) -> Self {
        match s {
            "complete" => ResultType::Complete,
            "input_required" => ResultType::InputRequired,
            "task" => ResultType::Task,
            other => ResultType::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for ResultType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ResultType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ResultType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Ok(ResultType::from_wire(&s))
    }
}

/// Deserializes an optional any-JSON field so that a present `null` stays `Some(Value::Null)`.
///
/// Used with `#[serde(default)]`: absent gives `None`, `null` gives `Some(Value::Null)`.
pub(crate) fn present<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// Why a method-dispatched message (request or notification) could not be decoded into the enum
/// of one protocol version.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParamsDecodeError {
    /// The method is not defined in this direction by this protocol version (JSON-RPC -32601).
    #[error("method `{0}` is not defined by this protocol version")]
    UnknownMethod(String),
    /// The method requires `params` and none were sent (JSON-RPC -32602).
    #[error("method `{method}` requires params")]
    MissingParams {
        /// The method.
        method: &'static str,
    },
    /// The params do not match the method's schema (JSON-RPC -32602).
    #[error("invalid params for `{method}`: {source}")]
    InvalidParams {
        /// The method.
        method: &'static str,
        /// What serde found wrong.
        source: serde_json::Error,
    },
}

impl ParamsDecodeError {
    /// The JSON-RPC error code a receiver answers with.
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            ParamsDecodeError::UnknownMethod(_) => crate::ErrorCode::METHOD_NOT_FOUND,
            ParamsDecodeError::MissingParams { .. } | ParamsDecodeError::InvalidParams { .. } => {
                crate::ErrorCode::INVALID_PARAMS
            }
        }
    }
}

/// Why a result could not be decoded for the request it answers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResultDecodeError {
    /// The request's method is not defined by this protocol version.
    #[error("method `{0}` is not defined by this protocol version")]
    UnknownMethod(String),
    /// The result's `resultType` is not one this method may return.
    #[error("result type `{result_type}` is not valid for `{method}`")]
    UnexpectedResultType {
        /// The method of the request the result answers.
        method: &'static str,
        /// The `resultType` found.
        result_type: ResultType,
    },
    /// The result does not match the schema of the method's result.
    #[error("invalid result for `{method}`: {source}")]
    Invalid {
        /// The method of the request the result answers.
        method: &'static str,
        /// What serde found wrong.
        source: serde_json::Error,
    },
}

/// Decodes `params` for `method`, treating absent params as an absent field.
pub(crate) fn decode_params<T: serde::de::DeserializeOwned>(
    method: &'static str,
    params: Option<&RawValue>,
) -> Result<T, ParamsDecodeError> {
    match params {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|source| ParamsDecodeError::InvalidParams { method, source }),
        None => Err(ParamsDecodeError::MissingParams { method }),
    }
}

/// Decodes optional `params` for `method`.
pub(crate) fn decode_optional_params<T: serde::de::DeserializeOwned>(
    method: &'static str,
    params: Option<&RawValue>,
) -> Result<Option<T>, ParamsDecodeError> {
    match params {
        Some(raw) => serde_json::from_str(raw.get())
            .map(Some)
            .map_err(|source| ParamsDecodeError::InvalidParams { method, source }),
        None => Ok(None),
    }
}

/// Decodes a result for `method`.
pub(crate) fn decode_result<T: serde::de::DeserializeOwned>(
    method: &'static str,
    raw: &RawValue,
) -> Result<T, ResultDecodeError> {
    serde_json::from_str(raw.get()).map_err(|source| ResultDecodeError::Invalid { method, source })
}

/// Reads only the `resultType` of a result (absent means `complete`).
pub(crate) fn peek_result_type(
    method: &'static str,
    raw: &RawValue,
) -> Result<ResultType, ResultDecodeError> {
    #[derive(Deserialize)]
    struct Peek {
        #[serde(default, rename = "resultType")]
        result_type: ResultType,
    }
    let peek: Peek = decode_result(method, raw)?;
    Ok(peek.result_type)
}

/// The `{method, params}` shape that method-dispatched enums are read from when they are not
/// decoded from an envelope (inside another type, or from a `Value`).
#[derive(Deserialize)]
pub(crate) struct OwnedMethodAndParams {
    pub(crate) method: String,
    #[serde(default)]
    pub(crate) params: Option<Value>,
}

impl OwnedMethodAndParams {
    /// The params as raw JSON, for the `from_parts` decoders.
    pub(crate) fn raw_params(&self) -> Result<Option<Box<RawValue>>, serde_json::Error> {
        self.params
            .as_ref()
            .map(serde_json::value::to_raw_value)
            .transpose()
    }
}

/// Serializes `{method, params}` (params left out when `None`).
pub(crate) fn serialize_method_params<S: Serializer, P: Serialize>(
    serializer: S,
    method: &str,
    params: Option<&P>,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = serializer.serialize_map(Some(if params.is_some() { 2 } else { 1 }))?;
    map.serialize_entry("method", method)?;
    if let Some(params) = params {
        map.serialize_entry("params", params)?;
    }
    map.end()
}

/// Reads a union arm out of a buffered JSON value.
pub(crate) fn arm<T: serde::de::DeserializeOwned, E: de::Error>(value: Value) -> Result<T, E> {
    serde_json::from_value(value).map_err(E::custom)
}

/// The string value of `key` in `value`, if `value` is an object with such a string member.
pub(crate) fn str_at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v str> {
    at(value, path).and_then(Value::as_str)
}

/// The member at `path` (object keys) inside `value`.
pub(crate) fn at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter()
        .try_fold(value, |v, key| v.as_object()?.get(*key))
}

#[cfg(test)]
#[allow(unreachable_pub)] // the macro makes its types `pub`, as the generated code needs
mod tests {
    use super::*;

    const_strs! {
        Sample = "sample",
    }

    #[test]
    fn const_str_round_trips_and_rejects_other_strings() {
        assert_eq!(Sample::VALUE, "sample");
        assert_eq!(serde_json::to_string(&Sample).unwrap(), "\"sample\"");
        assert_eq!(
            serde_json::from_str::<Sample>("\"sample\"").unwrap(),
            Sample
        );
        let err = serde_json::from_str::<Sample>("\"other\"").unwrap_err();
        assert!(err.to_string().contains("sample"), "{err}");
    }

    #[test]
    fn int_const_rejects_other_integers() {
        assert_eq!(
            serde_json::to_string(&IntConst::<-32020>).unwrap(),
            "-32020"
        );
        assert!(serde_json::from_str::<IntConst<-32020>>("-32020").is_ok());
        assert!(serde_json::from_str::<IntConst<-32020>>("-32021").is_err());
    }

    #[test]
    fn result_type_keeps_unknown_values_and_defaults_to_complete() {
        assert_eq!(ResultType::default(), ResultType::Complete);
        let other: ResultType = serde_json::from_str("\"later\"").unwrap();
        assert_eq!(other, ResultType::Other("later".into()));
        assert_eq!(serde_json::to_string(&other).unwrap(), "\"later\"");
        let raw = RawValue::from_string("{}".into()).unwrap();
        assert_eq!(peek_result_type("x", &raw).unwrap(), ResultType::Complete);
        let raw = RawValue::from_string(r#"{"resultType":"input_required"}"#.into()).unwrap();
        assert_eq!(
            peek_result_type("x", &raw).unwrap(),
            ResultType::InputRequired
        );
    }

    #[test]
    fn present_keeps_an_explicit_null() {
        #[derive(Deserialize)]
        struct S {
            #[serde(default, deserialize_with = "present")]
            data: Option<Value>,
        }
        let s: S = serde_json::from_str(r#"{"data":null}"#).unwrap();
        assert_eq!(s.data, Some(Value::Null));
        let s: S = serde_json::from_str("{}").unwrap();
        assert_eq!(s.data, None);
    }
}
