//! Request ids and progress tokens: the "string or integer" wire values, and the probe that reads
//! an `id` without failing so that the envelope can report a bad one in its own words.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

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
pub(super) enum IdProbe {
    Number(i64),
    String(String),
    Invalid(IdProblem),
}

/// Why a value is not a valid id.
pub(super) enum IdProblem {
    Null,
    OutOfRange(u64),
    NotAnInteger(f64),
    WrongType(&'static str),
}

impl IdProblem {
    pub(super) fn describe(&self, what: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::testing::*;
    use crate::jsonrpc::*;

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
}
