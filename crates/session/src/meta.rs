//! Reading the few members of params and results the session needs, without decoding the rest.

use std::borrow::Cow;

use modelctx_types::{ErrorCode, ErrorObject, JsonObject, ProgressToken};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::event::{LogLevel, RequestMeta};
use crate::version::ProtocolVersion;

pub use modelctx_types::meta_keys::RELATED_REQUEST_ID;
pub(crate) use modelctx_types::meta_keys::{
    CLIENT_CAPABILITIES, CLIENT_INFO, LOG_LEVEL, PROTOCOL_VERSION, SERVER_INFO, SUBSCRIPTION_ID,
};

/// The `_meta` members of a request's params the session reads.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct MetaProbe {
    #[serde(rename = "progressToken")]
    pub(crate) progress_token: Option<ProgressToken>,
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    pub(crate) protocol_version: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities")]
    pub(crate) client_capabilities: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/clientInfo")]
    pub(crate) client_info: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/logLevel")]
    pub(crate) log_level: Option<Value>,
}

#[derive(Deserialize)]
struct ParamsProbe {
    #[serde(rename = "_meta")]
    meta: Option<MetaProbe>,
}

/// Reads `params._meta`; an error object (-32602) when params are not an object or `_meta` is
/// malformed (a progress token that is not a string or integer, say).
pub(crate) fn probe(params: Option<&RawValue>) -> Result<MetaProbe, ErrorObject> {
    let Some(params) = params else {
        return Ok(MetaProbe::default());
    };
    if !params.get().trim_start().starts_with('{') {
        return Err(invalid_params("params must be a JSON object"));
    }
    serde_json::from_str::<ParamsProbe>(params.get())
        .map(|p| p.meta.unwrap_or_default())
        .map_err(|e| invalid_params(format!("invalid `_meta`: {e}")))
}

pub(crate) fn invalid_params(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::INVALID_PARAMS, message)
}

/// How a request's `_meta` places it.
pub(crate) enum Classified {
    /// No modern version in `_meta`: legacy rules apply.
    Legacy,
    /// A supported modern version with valid `_meta`.
    Modern(ProtocolVersion, RequestMeta),
}

/// Classifies a request by `_meta` and validates the modern members (2026-07-28 base rules):
/// an unsupported version gets -32022 with `supported` and `requested`; missing or malformed
/// client capabilities get -32602.
pub(crate) fn classify(
    probe: &MetaProbe,
    supported: &[ProtocolVersion],
) -> Result<Classified, ErrorObject> {
    let Some(version) = &probe.protocol_version else {
        return Ok(Classified::Legacy);
    };
    let Some(text) = version.as_str() else {
        return Err(invalid_params(format!(
            "`_meta.{PROTOCOL_VERSION}` must be a string"
        )));
    };
    let version = match ProtocolVersion::parse(text) {
        Some(v) if v.era() == crate::Era::Legacy => return Ok(Classified::Legacy),
        Some(v) if supported.contains(&v) => v,
        _ => return Err(unsupported_modern_version(text, supported)),
    };
    let client_capabilities = match &probe.client_capabilities {
        Some(Value::Object(caps)) => caps.clone(),
        Some(_) => {
            return Err(invalid_params(format!(
                "`_meta.{CLIENT_CAPABILITIES}` must be an object"
            )));
        }
        None => {
            return Err(invalid_params(format!(
                "`_meta.{CLIENT_CAPABILITIES}` is required on every {version} request"
            )));
        }
    };
    let log_level = match &probe.log_level {
        None => None,
        Some(level) => Some(level.as_str().and_then(LogLevel::parse).ok_or_else(|| {
            invalid_params(format!("`_meta.{LOG_LEVEL}` is not a log level: {level}"))
        })?),
    };
    Ok(Classified::Modern(
        version,
        RequestMeta {
            client_capabilities,
            client_info: probe.client_info.clone(),
            log_level,
        },
    ))
}

/// Classifies a request that came as a modern one on its own (a Streamable HTTP request the
/// transport routed by its `MCP-Protocol-Version` header or `_meta`): its `_meta` must name a
/// version (-32602 otherwise), a modern one that is served (-32022 otherwise, also for a legacy
/// version), with the members [`classify`] requires.
pub(crate) fn classify_modern(
    probe: &MetaProbe,
    supported: &[ProtocolVersion],
) -> Result<(ProtocolVersion, RequestMeta), ErrorObject> {
    let Some(version) = &probe.protocol_version else {
        return Err(invalid_params(format!(
            "missing params._meta[\"{PROTOCOL_VERSION}\"]: a 2026-07-28 request names its version"
        )));
    };
    match classify(probe, supported)? {
        Classified::Modern(version, meta) => Ok((version, meta)),
        // A legacy version in `_meta`: not one this request can be served in.
        Classified::Legacy => Err(unsupported_modern_version(
            version.as_str().unwrap_or_default(),
            supported,
        )),
    }
}

/// Checks the `_meta` of a modern (2026-07-28) request or notification that came on its own, by
/// the rules [`ServerSession::for_request`](crate::ServerSession::for_request) applies first:
/// `_meta` names a version (-32602 otherwise), a modern one in `served` (-32022 otherwise, with
/// `data.supported` naming the modern versions served), and declares client capabilities
/// (-32602 otherwise). For an application that passes modern requests on without a session of
/// its own (a proxy), so that they are refused as a server's session would refuse them.
pub fn check_modern_meta(
    params: Option<&RawValue>,
    served: &[ProtocolVersion],
) -> Result<(), ErrorObject> {
    classify_modern(&probe(params)?, served).map(|_| ())
}

/// The -32022 error of a legacy `initialize` that came as a request on its own (which opens no
/// session): `data` names the modern versions served and the `protocolVersion` asked for.
pub(crate) fn initialize_on_its_own(
    params: Option<&RawValue>,
    supported: &[ProtocolVersion],
) -> ErrorObject {
    #[derive(Deserialize)]
    struct Asked {
        #[serde(rename = "protocolVersion")]
        version: Option<Value>,
    }
    let requested = params
        .and_then(|p| serde_json::from_str::<Asked>(p.get()).ok())
        .and_then(|a| a.version)
        .unwrap_or_default();
    let modern: Vec<&str> = supported
        .iter()
        .filter(|v| v.era() == crate::Era::Modern)
        .map(|v| v.as_str())
        .collect();
    let message = if supported.iter().all(|v| v.era() == crate::Era::Modern) {
        "this server serves only protocol 2026-07-28, which has no initialize"
    } else {
        "initialize opens no session on a 2026-07-28 request, which names its version in _meta"
    };
    ErrorObject::new(ErrorCode::UNSUPPORTED_PROTOCOL_VERSION, message)
        .with_data(&serde_json::json!({ "supported": modern, "requested": requested }))
        .expect("JSON serializes")
}

/// The -32022 error of a modern request: `data` names the modern versions served (the ones the
/// request could name instead) and the one requested.
fn unsupported_modern_version(requested: &str, supported: &[ProtocolVersion]) -> ErrorObject {
    let modern: Vec<ProtocolVersion> = supported
        .iter()
        .copied()
        .filter(|v| v.era() == crate::Era::Modern)
        .collect();
    unsupported_version(requested, &modern)
}

/// The -32022 error: `data` names the versions served and the one requested.
pub(crate) fn unsupported_version(requested: &str, supported: &[ProtocolVersion]) -> ErrorObject {
    let supported: Vec<&str> = supported.iter().map(|v| v.as_str()).collect();
    ErrorObject::new(
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
        format!(
            "unsupported protocol version {requested:?}; supported: {}",
            supported.join(", ")
        ),
    )
    .with_data(&serde_json::json!({ "supported": supported, "requested": requested }))
    .expect("JSON serializes")
}

/// The -32021 error a request gets when handling it needs client capabilities the request did not
/// declare; `required` is `requiredCapabilities` (a `ClientCapabilities` object).
pub fn missing_capability_error(required: &JsonObject) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        "the request needs client capabilities it did not declare",
    )
    .with_data(&serde_json::json!({ "requiredCapabilities": required }))
    .expect("JSON serializes")
}

/// A result object read as its members, each value kept as its text: what the session reads
/// of a modern answer, and what it writes the answer from (the members it adds in front, then
/// the result's own), with no tree of the result built.
#[derive(Debug)]
pub(crate) struct ResultMembers<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> ResultMembers<'a> {
    /// Reads `result`, which must be an object.
    pub(crate) fn read(result: &'a RawValue) -> Result<Self, serde_json::Error> {
        serde_json::from_str(result.get())
    }

    /// The value of member `key`; `None` when it is absent or `null`. A member the session reads
    /// that is given twice is refused (its reading would be ambiguous).
    pub(crate) fn get(&self, key: &str) -> Result<Option<&'a RawValue>, String> {
        let mut found = self.members.iter().filter(|(k, _)| k == key);
        let first = found.next().map(|(_, v)| *v);
        if found.next().is_some() {
            return Err(format!("duplicate field `{key}`"));
        }
        Ok(first.filter(|v| v.get() != "null"))
    }

    /// Member `key`, read as `T` (absent or `null`: `None`).
    pub(crate) fn parse<T: Deserialize<'a>>(&self, key: &str) -> Result<Option<T>, String> {
        match self.get(key)? {
            None => Ok(None),
            Some(raw) => serde_json::from_str(raw.get())
                .map(Some)
                .map_err(|e| format!("`{key}`: {e}")),
        }
    }

    /// Replaces the value of member `key` (which is there).
    pub(crate) fn replace(&mut self, key: &str, value: &'a RawValue) {
        for (k, v) in &mut self.members {
            if k == key {
                *v = value;
            }
        }
    }

    /// The result with `added` in front of its own members (an own member that is `null` and
    /// named in `added` is left out, so that no member is written twice).
    pub(crate) fn write(&self, added: &[(&str, Added<'_>)]) -> Box<RawValue> {
        serde_json::value::to_raw_value(&Written {
            added,
            members: &self.members,
        })
        .expect("JSON text and plain values serialize")
    }
}

/// A member the session adds to a modern result.
#[derive(Debug)]
pub(crate) enum Added<'a> {
    /// A string.
    Str(&'a str),
    /// A number.
    U64(u64),
    /// `{"io.modelcontextprotocol/serverInfo": ...}`, for `_meta`.
    ServerInfo(&'a Value),
}

impl serde::Serialize for Added<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Added::Str(s) => serializer.serialize_str(s),
            Added::U64(n) => serializer.serialize_u64(*n),
            Added::ServerInfo(info) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry(SERVER_INFO, info)?;
                map.end()
            }
        }
    }
}

struct Written<'w, 'a> {
    added: &'w [(&'w str, Added<'w>)],
    members: &'w [(Cow<'a, str>, &'a RawValue)],
}

impl serde::Serialize for Written<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.added {
            map.serialize_entry(key, value)?;
        }
        for (key, value) in self.members {
            let replaced = value.get() == "null" && self.added.iter().any(|(k, _)| k == key);
            if !replaced {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ResultMembers<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = ResultMembers<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some((Key(key), value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    members.push((key, value));
                }
                Ok(ResultMembers { members })
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// A member name, borrowed from the text unless it has escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn members_are_written_in_front_of_a_result_s_own() {
        let add = [("resultType", Added::Str("complete"))];
        let write = |text: &str| {
            let result = raw(text);
            let members = ResultMembers::read(&result).unwrap();
            members.write(&add).get().to_owned()
        };
        assert_eq!(write("{}"), r#"{"resultType":"complete"}"#);
        assert_eq!(write(" { } "), r#"{"resultType":"complete"}"#);
        assert_eq!(
            write(r#"{"a": [1, {"b":"\u00e9"}], "k\"q": null}"#),
            r#"{"resultType":"complete","a":[1, {"b":"\u00e9"}],"k\"q":null}"#,
            "own members' text is kept as it is, names escaped again"
        );
        // A `null` the session replaces is not written twice.
        assert_eq!(
            write(r#"{"resultType":null,"x":1}"#),
            r#"{"resultType":"complete","x":1}"#
        );
        let info = serde_json::json!({"name": "s", "version": "1"});
        let result = raw(r#"{"tools":[]}"#);
        let members = ResultMembers::read(&result).unwrap();
        assert_eq!(
            members
                .write(&[
                    ("ttlMs", Added::U64(5)),
                    ("_meta", Added::ServerInfo(&info))
                ])
                .get(),
            r#"{"ttlMs":5,"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}},"tools":[]}"#
        );
    }

    #[test]
    fn members_the_session_reads_are_read_once_and_not_twice() {
        let result = raw(r#"{"ttlMs":null,"cacheScope":"public","x":{"ttlMs":1}}"#);
        let members = ResultMembers::read(&result).unwrap();
        assert!(matches!(members.get("ttlMs"), Ok(None)), "null is absent");
        assert_eq!(
            members.parse::<String>("cacheScope"),
            Ok(Some("public".into()))
        );
        assert!(members.parse::<u64>("cacheScope").is_err());
        let twice = raw(r#"{"ttlMs":1,"ttlMs":2}"#);
        let members = ResultMembers::read(&twice).unwrap();
        assert!(members.get("ttlMs").is_err());
        assert!(ResultMembers::read(&raw("[1]")).is_err());
    }

    #[test]
    fn classification_of_meta() {
        let supported = ProtocolVersion::ALL;
        let p = |s: &str| probe(Some(&raw(s))).unwrap();
        assert!(matches!(
            classify(&p("{}"), supported),
            Ok(Classified::Legacy)
        ));
        assert!(matches!(
            classify(
                &p(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18"}}"#),
                supported
            ),
            Ok(Classified::Legacy)
        ));
        let e = classify(
            &p(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}"#),
            supported,
        )
        .err()
        .unwrap();
        assert_eq!(e.code, ErrorCode::UNSUPPORTED_PROTOCOL_VERSION);
        let data: Value = e.data_as().unwrap().unwrap();
        assert_eq!(data["requested"], "2099-01-01");
        // Only the versions a modern request could name instead.
        assert_eq!(data["supported"], serde_json::json!(["2026-07-28"]));
        let e = classify(
            &p(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#),
            supported,
        )
        .err()
        .unwrap();
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(probe(Some(&raw("[1]"))).is_err());
        assert!(probe(Some(&raw(r#"{"_meta":{"progressToken":1.5}}"#))).is_err());
    }
}
