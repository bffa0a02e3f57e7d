//! The server's check of a 2026-07-28 request's headers against its body (`-32020`).

use std::borrow::Cow;

use http::{HeaderMap, HeaderValue, StatusCode};
use modelctx_types::ErrorCode;
use serde_json::Value;
use serde_json::value::RawValue;

use super::build::argument_text;
use super::decimal::number_matches;
use super::names::{
    MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, META_PROTOCOL_VERSION_FIELD, argument_in,
    meta_protocol_version, name_source,
};
use super::schema::{ParamHeader, json_kind};
use super::value::{ValueDecodeError, decode_bytes, escape, field_text, trim_ows};

/// Why the headers of a request do not match its body: HTTP `400 Bad Request` with JSON-RPC error
/// `-32020` (`HeaderMismatch`).
///
/// The message is written for the client's developer; a JSON-RPC error message can be
/// `format!("Header mismatch: {error}")`. Every value in it is escaped (no raw CR or LF) and cut
/// when long.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderMismatch {
    /// A header the request requires is absent.
    #[error(
        "the {header} header is missing; it must repeat {field} '{body_value}' from the request body"
    )]
    Missing {
        /// The header.
        header: String,
        /// The body field it mirrors.
        field: String,
        /// The body value, escaped.
        body_value: String,
    },
    /// A header appears more than once.
    #[error("the {header} header appears more than once; send it exactly once")]
    Repeated {
        /// The header.
        header: String,
    },
    /// A header value has bytes HTTP does not allow, or a broken `=?base64?…?=` form.
    #[error("the {header} header value is malformed: {reason}")]
    Malformed {
        /// The header.
        header: String,
        /// What is wrong (already part of the message).
        reason: ValueDecodeError,
    },
    /// A header value, decoded, differs from the body.
    #[error(
        "{header} header value '{header_value}' does not match body value '{body_value}' of {field}"
    )]
    Differs {
        /// The header.
        header: String,
        /// The body field it mirrors.
        field: String,
        /// The header value after decoding, escaped.
        header_value: String,
        /// The body value, escaped.
        body_value: String,
    },
    /// A header is present but the body has no value (or `null`) for it.
    #[error(
        "the {header} header is present but the request body has no value at {field}; send it only when the body carries a non-null value"
    )]
    NotInBody {
        /// The header.
        header: String,
        /// The body field it mirrors.
        field: String,
    },
    /// A mirrored argument is an array or an object, which no header can carry.
    #[error(
        "{field} is {found} in the request body, but the tool mirrors it into the {header} header, which carries only a string, integer or boolean"
    )]
    NotMirrorable {
        /// The header.
        header: String,
        /// The argument.
        field: String,
        /// Its JSON type: `"an array"` or `"an object"`.
        found: &'static str,
    },
}

impl HeaderMismatch {
    /// The JSON-RPC error code: `-32020`.
    pub const fn code(&self) -> ErrorCode {
        ErrorCode::HEADER_MISMATCH
    }

    /// The HTTP status: `400 Bad Request`.
    pub const fn status(&self) -> StatusCode {
        StatusCode::BAD_REQUEST
    }
}

/// The one value of `name`, `None` when absent; `Repeated` when sent more than once.
fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
    label: &str,
) -> Result<Option<&'a HeaderValue>, HeaderMismatch> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(HeaderMismatch::Repeated {
            header: label.to_owned(),
        });
    }
    Ok(first)
}

/// The value without surrounding whitespace, with its bytes checked; no base64 decoding.
fn plain_text<'a>(raw: &'a HeaderValue, label: &str) -> Result<&'a str, HeaderMismatch> {
    field_text(raw.as_bytes())
        .map(|text| text.trim_matches([' ', '\t']))
        .map_err(|reason| HeaderMismatch::Malformed {
            header: label.to_owned(),
            reason,
        })
}

/// The value without surrounding whitespace, decoded from `=?base64?…?=` when in that form.
fn decoded_text<'a>(raw: &'a HeaderValue, label: &str) -> Result<Cow<'a, str>, HeaderMismatch> {
    let malformed = |reason| HeaderMismatch::Malformed {
        header: label.to_owned(),
        reason,
    };
    field_text(raw.as_bytes()).map_err(malformed)?;
    decode_bytes(trim_ows(raw.as_bytes())).map_err(malformed)
}

/// Checks a header that must repeat a body string exactly (no base64 form).
fn check_plain(
    headers: &HeaderMap,
    header: &'static str,
    field: &str,
    body_value: &str,
) -> Result<(), HeaderMismatch> {
    let Some(raw) = single_header(headers, header, header)? else {
        return Err(HeaderMismatch::Missing {
            header: header.to_owned(),
            field: field.to_owned(),
            body_value: escape(body_value),
        });
    };
    let text = plain_text(raw, header)?;
    if text == body_value {
        Ok(())
    } else {
        Err(HeaderMismatch::Differs {
            header: header.to_owned(),
            field: field.to_owned(),
            header_value: escape(text),
            body_value: escape(body_value),
        })
    }
}

/// Checks the headers of a 2026-07-28 request against its body, as a server must before acting on
/// it.
///
/// * `MCP-Protocol-Version` must be present and equal `params._meta`'s
///   `io.modelcontextprotocol/protocolVersion` when the body carries one. (A body without it is
///   malformed, `-32602`; a version the server does not serve is `-32022`: both are the caller's
///   to answer.)
/// * `Mcp-Method` must be present and equal `method`, case included.
/// * For `tools/call`, `prompts/get`, `resources/read` and the tasks extension's `tasks/get`,
///   `tasks/update`, `tasks/cancel`: `Mcp-Name` must be present and, decoded, equal `params.name`,
///   `params.uri` or `params.taskId` when the body has that string, and absent when it does not.
/// * For each of `param_headers` (pass the called tool's, from [`param_headers`](super::param_headers), for
///   `tools/call`): when the argument is present and not `null`, `Mcp-Param-{Name}` must be
///   present and match it after decoding; when it is absent or `null`, the header must be absent.
///   Matching follows the argument's JSON type: strings exactly, booleans as `true`/`false`
///   exactly, numbers numerically (`042`, `42.0` and `4.2e1` all match `42`). Checking the
///   argument against the declared type is the tool's input validation, not a header rule.
///   `Mcp-Param-*` headers the tool does not declare are ignored.
///
/// Header names match ignoring case; values are case-sensitive. Whitespace around a value is
/// ignored, as HTTP prescribes. A header sent twice, a byte outside printable ASCII, space and tab,
/// or a broken `=?base64?…?=` form is malformed.
///
/// The spec defines these rules for requests only; notifications carry no required headers.
pub fn check_request(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Value>,
    param_headers: Option<&[ParamHeader]>,
) -> Result<(), HeaderMismatch> {
    let name = name_source(method)
        .and_then(|(key, _)| params.and_then(|p| p.get(key)).and_then(Value::as_str));
    check_fields(
        headers,
        method,
        meta_protocol_version(params),
        name,
        params.and_then(|p| p.get("arguments")),
        param_headers,
    )
}

/// The members of a request's `params` that the header rules read, taken from the raw params
/// in one pass without building the rest: the `_meta` protocol version, `name`, `uri`, `taskId`,
/// and the `arguments`, left unparsed until a tool's `Mcp-Param-*` rules need them.
///
/// Params that are not a JSON object, and members of the wrong type, read as absent: whether such
/// params are valid is not a header rule (the protocol session answers them).
#[derive(Debug, Default)]
pub struct RequestFields<'a> {
    version: Option<Cow<'a, str>>,
    name: Option<Cow<'a, str>>,
    uri: Option<Cow<'a, str>>,
    task_id: Option<Cow<'a, str>>,
    arguments: Option<&'a RawValue>,
}

impl<'a> RequestFields<'a> {
    /// Reads the fields of `params` (a request's raw params, if any).
    pub fn parse(params: Option<&'a RawValue>) -> RequestFields<'a> {
        #[derive(serde::Deserialize)]
        struct Members<'a> {
            #[serde(rename = "_meta", borrow)]
            meta: Option<&'a RawValue>,
            #[serde(borrow)]
            name: Option<&'a RawValue>,
            #[serde(borrow)]
            uri: Option<&'a RawValue>,
            #[serde(rename = "taskId", borrow)]
            task_id: Option<&'a RawValue>,
            #[serde(borrow)]
            arguments: Option<&'a RawValue>,
        }
        #[derive(serde::Deserialize)]
        struct Meta<'a> {
            #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow)]
            version: Option<&'a RawValue>,
        }
        /// A string member, borrowed from the params unless it has escapes (serde reads a
        /// `Cow<str>` as an owned `String` always).
        fn text(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
            let raw = raw?.get();
            if !raw.starts_with('"') {
                return None;
            }
            match serde_json::from_str::<&str>(raw) {
                Ok(text) => Some(Cow::Borrowed(text)),
                Err(_) => serde_json::from_str::<String>(raw).ok().map(Cow::Owned),
            }
        }
        let Some(members) = params.and_then(|p| serde_json::from_str::<Members<'a>>(p.get()).ok())
        else {
            return RequestFields::default();
        };
        let version = members
            .meta
            .and_then(|m| serde_json::from_str::<Meta<'a>>(m.get()).ok())
            .and_then(|m| text(m.version));
        RequestFields {
            version,
            name: text(members.name),
            uri: text(members.uri),
            task_id: text(members.task_id),
            arguments: members.arguments,
        }
    }

    /// `params._meta["io.modelcontextprotocol/protocolVersion"]`, when a string.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// `params.name`, when a string (the tool of a `tools/call`).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The tool a `tools/call` names (`params.name`); `None` for other methods.
    pub fn tool(&self, method: &str) -> Option<&str> {
        (method == modelctx_types::consts::ToolsCall::VALUE)
            .then_some(self.name.as_deref())
            .flatten()
    }

    /// The body string `Mcp-Name` mirrors for `method`, if the method has one.
    fn name_for(&self, method: &str) -> Option<&str> {
        match name_source(method)?.0 {
            "name" => self.name.as_deref(),
            "uri" => self.uri.as_deref(),
            _ => self.task_id.as_deref(),
        }
    }
}

/// [`check_request`] on the fields read by [`RequestFields::parse`]: the same rules, without a
/// parse of the whole params. The arguments are parsed only when `param_headers` names some.
pub fn check_request_fields(
    headers: &HeaderMap,
    method: &str,
    fields: &RequestFields<'_>,
    param_headers: Option<&[ParamHeader]>,
) -> Result<(), HeaderMismatch> {
    let arguments: Option<Value> = param_headers
        .filter(|p| !p.is_empty())
        .and(fields.arguments)
        .and_then(|raw| serde_json::from_str(raw.get()).ok());
    check_fields(
        headers,
        method,
        fields.version(),
        fields.name_for(method),
        arguments.as_ref(),
        param_headers,
    )
}

/// Only the version rule of [`check_request`], for a notification: when its body names a
/// version, `MCP-Protocol-Version` must be present and equal it.
pub fn check_version(
    headers: &HeaderMap,
    body_version: Option<&str>,
) -> Result<(), HeaderMismatch> {
    match body_version {
        Some(version) => check_plain(
            headers,
            MCP_PROTOCOL_VERSION,
            META_PROTOCOL_VERSION_FIELD,
            version,
        ),
        None => Ok(()),
    }
}

fn check_fields(
    headers: &HeaderMap,
    method: &str,
    version: Option<&str>,
    name: Option<&str>,
    arguments: Option<&Value>,
    param_headers: Option<&[ParamHeader]>,
) -> Result<(), HeaderMismatch> {
    check_version(headers, version)?;
    check_plain(headers, MCP_METHOD, "method", method)?;

    if let Some((_, field)) = name_source(method) {
        let body = name;
        let header = single_header(headers, MCP_NAME, MCP_NAME)?;
        match (header, body) {
            (None, None) => {}
            (None, Some(body)) => {
                return Err(HeaderMismatch::Missing {
                    header: MCP_NAME.to_owned(),
                    field: field.to_owned(),
                    body_value: escape(body),
                });
            }
            (Some(_), None) => {
                return Err(HeaderMismatch::NotInBody {
                    header: MCP_NAME.to_owned(),
                    field: field.to_owned(),
                });
            }
            (Some(raw), Some(body)) => {
                let text = decoded_text(raw, MCP_NAME)?;
                if text != body {
                    return Err(HeaderMismatch::Differs {
                        header: MCP_NAME.to_owned(),
                        field: field.to_owned(),
                        header_value: escape(&text),
                        body_value: escape(body),
                    });
                }
            }
        }
    }

    for param in param_headers.unwrap_or_default() {
        check_param(headers, arguments, param)?;
    }
    Ok(())
}

fn check_param(
    headers: &HeaderMap,
    arguments: Option<&Value>,
    param: &ParamHeader,
) -> Result<(), HeaderMismatch> {
    let label = param.display_header();
    let header = single_header(headers, param.header_name().as_str(), &label)?;
    let body = argument_in(arguments, param.path());
    let (raw, body) = match (header, body) {
        (None, None) => return Ok(()),
        (Some(_), None) => {
            return Err(HeaderMismatch::NotInBody {
                header: label,
                field: param.body_field(),
            });
        }
        (header, Some(body)) => {
            if let Value::Array(_) | Value::Object(_) = body {
                return Err(HeaderMismatch::NotMirrorable {
                    header: label,
                    field: param.body_field(),
                    found: json_kind(body),
                });
            }
            let Some(raw) = header else {
                return Err(HeaderMismatch::Missing {
                    header: label,
                    field: param.body_field(),
                    body_value: escape(&argument_text(body).unwrap_or_default()),
                });
            };
            (raw, body)
        }
    };
    let text = decoded_text(raw, &label)?;
    let matches = match body {
        Value::String(s) => text == *s,
        Value::Bool(b) => text == if *b { "true" } else { "false" },
        Value::Number(n) => number_matches(&text, n),
        // Null is absent; arrays and objects were rejected above.
        _ => false,
    };
    if matches {
        Ok(())
    } else {
        Err(HeaderMismatch::Differs {
            header: label,
            field: param.body_field(),
            header_value: escape(&text),
            body_value: escape(&argument_text(body).unwrap_or_default()),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::headers::request_headers;
    use crate::headers::test_util::{call, headers_of, to_map, tool_headers};

    // --- check_request ---------------------------------------------------------------------

    #[test]
    fn accepts_what_request_headers_builds() {
        let tool = tool_headers();
        let cases = [
            (
                "tools/call",
                call(json!({"region": "us-west1", "priority": 42, "verbose": true})),
            ),
            (
                "tools/call",
                call(
                    json!({"region": "line1\nline2", "greeting": "=?base64?x?=", "options": {"tenant": "ü"}}),
                ),
            ),
            ("tools/call", call(json!({"region": null}))),
            ("tools/call", call(json!({}))),
            ("tools/call", json!({"name": "héllo wörld"})),
            ("resources/read", json!({"uri": "file:///a b"})),
            ("tasks/get", json!({"taskId": "t"})),
            (
                "tools/list",
                json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
            ),
        ];
        for (method, params) in cases {
            let headers = to_map(request_headers(method, Some(&params), Some(&tool)).unwrap());
            assert_eq!(
                check_request(&headers, method, Some(&params), Some(&tool)),
                Ok(()),
                "{params}"
            );
        }
    }

    #[test]
    fn requires_mcp_method() {
        let headers = HeaderMap::new();
        assert_eq!(
            check_request(&headers, "tools/list", None, None),
            Err(HeaderMismatch::Missing {
                header: "Mcp-Method".into(),
                field: "method".into(),
                body_value: "tools/list".into()
            })
        );
    }

    #[test]
    fn method_must_match_case_included() {
        for sent in ["prompts/list", "TOOLS/LIST", "tools/list/"] {
            let headers = headers_of(&[("Mcp-Method", sent)]);
            assert_eq!(
                check_request(&headers, "tools/list", None, None),
                Err(HeaderMismatch::Differs {
                    header: "Mcp-Method".into(),
                    field: "method".into(),
                    header_value: sent.into(),
                    body_value: "tools/list".into()
                })
            );
        }
    }

    #[test]
    fn header_names_ignore_case_and_values_ignore_surrounding_whitespace() {
        for name in ["mcp-method", "MCP-METHOD", "Mcp-Method"] {
            let headers = headers_of(&[(name, "tools/list")]);
            assert_eq!(check_request(&headers, "tools/list", None, None), Ok(()));
        }
        let headers = headers_of(&[
            ("Mcp-Method", "  tools/call\t"),
            ("Mcp-Name", "  get_weather  "),
        ]);
        let params = json!({"name": "get_weather"});
        assert_eq!(
            check_request(&headers, "tools/call", Some(&params), None),
            Ok(())
        );
    }

    #[test]
    fn requires_a_matching_mcp_name() {
        let params = json!({"name": "bar"});
        let missing = headers_of(&[("Mcp-Method", "tools/call")]);
        assert_eq!(
            check_request(&missing, "tools/call", Some(&params), None),
            Err(HeaderMismatch::Missing {
                header: "Mcp-Name".into(),
                field: "params.name".into(),
                body_value: "bar".into()
            })
        );
        let wrong = headers_of(&[("Mcp-Method", "tools/call"), ("Mcp-Name", "foo")]);
        let err = check_request(&wrong, "tools/call", Some(&params), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Mcp-Name header value 'foo' does not match body value 'bar' of params.name"
        );
        assert_eq!(err.code(), ErrorCode(-32020));
        assert_eq!(err.status(), StatusCode::BAD_REQUEST);

        let params = json!({"uri": "file:///x"});
        let wrong = headers_of(&[("Mcp-Method", "resources/read"), ("Mcp-Name", "file:///y")]);
        assert!(matches!(
            check_request(&wrong, "resources/read", Some(&params), None),
            Err(HeaderMismatch::Differs { field, .. }) if field == "params.uri"
        ));
        let params = json!({"taskId": "t1"});
        let missing = headers_of(&[("Mcp-Method", "tasks/cancel")]);
        assert!(matches!(
            check_request(&missing, "tasks/cancel", Some(&params), None),
            Err(HeaderMismatch::Missing { field, .. }) if field == "params.taskId"
        ));
    }

    #[test]
    fn decodes_mcp_name() {
        let params = json!({"name": "Hello, 世界"});
        let headers = headers_of(&[
            ("Mcp-Method", "prompts/get"),
            ("Mcp-Name", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        ]);
        assert_eq!(
            check_request(&headers, "prompts/get", Some(&params), None),
            Ok(())
        );
        let headers = headers_of(&[
            ("Mcp-Method", "prompts/get"),
            ("Mcp-Name", "=?base64?SGVsbG8?="),
        ]);
        assert!(matches!(
            check_request(&headers, "prompts/get", Some(&params), None),
            Err(HeaderMismatch::Malformed {
                reason: ValueDecodeError::InvalidBase64 { .. },
                ..
            })
        ));
    }

    #[test]
    fn mcp_name_without_a_body_name_is_a_mismatch() {
        let headers = headers_of(&[("Mcp-Method", "tools/call"), ("Mcp-Name", "x")]);
        assert_eq!(
            check_request(&headers, "tools/call", Some(&json!({})), None),
            Err(HeaderMismatch::NotInBody {
                header: "Mcp-Name".into(),
                field: "params.name".into()
            })
        );
        // No name anywhere is left to the method's own validation.
        let headers = headers_of(&[("Mcp-Method", "tools/call")]);
        assert_eq!(
            check_request(&headers, "tools/call", Some(&json!({})), None),
            Ok(())
        );
        // Mcp-Name on a method that has no name is not checked.
        let headers = headers_of(&[("Mcp-Method", "tools/list"), ("Mcp-Name", "x")]);
        assert_eq!(check_request(&headers, "tools/list", None, None), Ok(()));
    }

    #[test]
    fn repeated_headers_are_malformed() {
        let headers = headers_of(&[("Mcp-Method", "tools/list"), ("mcp-method", "tools/list")]);
        assert_eq!(
            check_request(&headers, "tools/list", None, None),
            Err(HeaderMismatch::Repeated {
                header: "Mcp-Method".into()
            })
        );
        let tool = tool_headers();
        let params = call(json!({"region": "a"}));
        let mut headers =
            to_map(request_headers("tools/call", Some(&params), Some(&tool)).unwrap());
        headers.append("mcp-param-region", HeaderValue::from_static("a"));
        assert_eq!(
            check_request(&headers, "tools/call", Some(&params), Some(&tool)),
            Err(HeaderMismatch::Repeated {
                header: "Mcp-Param-Region".into()
            })
        );
    }

    #[test]
    fn non_ascii_bytes_are_malformed() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "mcp-method",
            HeaderValue::from_bytes(b"tools/list\xe9").unwrap(),
        );
        assert_eq!(
            check_request(&headers, "tools/list", None, None),
            Err(HeaderMismatch::Malformed {
                header: "Mcp-Method".into(),
                reason: ValueDecodeError::InvalidByte {
                    position: 10,
                    byte: 0xe9
                }
            })
        );
        let tool = tool_headers();
        let params = call(json!({"region": "é"}));
        let mut headers =
            to_map(request_headers("tools/call", Some(&params), Some(&tool)).unwrap());
        headers.insert(
            "mcp-param-region",
            HeaderValue::from_bytes("é".as_bytes()).unwrap(),
        );
        assert!(matches!(
            check_request(&headers, "tools/call", Some(&params), Some(&tool)),
            Err(HeaderMismatch::Malformed { header, reason: ValueDecodeError::InvalidByte { .. } })
                if header == "Mcp-Param-Region"
        ));
    }

    #[test]
    fn checks_the_protocol_version_header() {
        let params = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}});
        let missing = headers_of(&[("Mcp-Method", "tools/list")]);
        assert!(matches!(
            check_request(&missing, "tools/list", Some(&params), None),
            Err(HeaderMismatch::Missing { header, .. }) if header == "MCP-Protocol-Version"
        ));
        let wrong = headers_of(&[
            ("Mcp-Method", "tools/list"),
            ("mcp-protocol-version", "2025-11-25"),
        ]);
        let err = check_request(&wrong, "tools/list", Some(&params), None).unwrap_err();
        assert_eq!(
            err,
            HeaderMismatch::Differs {
                header: "MCP-Protocol-Version".into(),
                field: META_PROTOCOL_VERSION_FIELD.into(),
                header_value: "2025-11-25".into(),
                body_value: "2026-07-28".into()
            }
        );
        // A body without the version leaves the header to the caller.
        assert_eq!(
            check_request(&missing, "tools/list", Some(&json!({})), None),
            Ok(())
        );
    }

    /// The raw-params check gives the answers of the `Value` one, reading the fields once.
    #[test]
    fn fields_read_from_raw_params_check_like_the_value_ones() {
        let tool = tool_headers();
        /// A method, its params and the request's headers.
        type Case = (&'static str, Value, Vec<(&'static str, &'static str)>);
        let cases: Vec<Case> = vec![
            (
                "tools/list",
                json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
                vec![("Mcp-Method", "tools/list")],
            ),
            (
                "tools/list",
                json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
                vec![
                    ("Mcp-Method", "tools/list"),
                    ("MCP-Protocol-Version", "2026-07-28"),
                ],
            ),
            ("tools/list", json!({}), vec![("Mcp-Method", "tools/list")]),
            (
                "tools/list",
                json!({"_meta": "not an object"}),
                vec![("Mcp-Method", "tools/list")],
            ),
            (
                "tools/call",
                json!({"name": "t", "arguments": {}}),
                vec![("Mcp-Method", "tools/call"), ("Mcp-Name", "t")],
            ),
            (
                "tools/call",
                json!({"name": "t"}),
                vec![
                    ("Mcp-Method", "tools/call"),
                    ("Mcp-Name", "=?base64?dA==?="),
                ],
            ),
            (
                "tools/call",
                json!({"name": 5}),
                vec![("Mcp-Method", "tools/call"), ("Mcp-Name", "5")],
            ),
            (
                "tools/call",
                json!({"name": "u"}),
                vec![("Mcp-Method", "tools/call"), ("Mcp-Name", "t")],
            ),
            (
                "resources/read",
                json!({"uri": "file:///a"}),
                vec![("Mcp-Method", "resources/read"), ("Mcp-Name", "file:///a")],
            ),
            (
                "resources/read",
                json!({"uri": "file:///a"}),
                vec![("Mcp-Method", "resources/read")],
            ),
            (
                "tasks/get",
                json!({"taskId": "x\"y"}),
                vec![("Mcp-Method", "tasks/get"), ("Mcp-Name", "x\"y")],
            ),
            (
                "tools/call",
                json!({"name": "t", "arguments": {"region": "eu"}}),
                vec![
                    ("Mcp-Method", "tools/call"),
                    ("Mcp-Name", "t"),
                    ("Mcp-Param-Region", "eu"),
                ],
            ),
            (
                "tools/call",
                json!({"name": "t", "arguments": {"region": "eu"}}),
                vec![("Mcp-Method", "tools/call"), ("Mcp-Name", "t")],
            ),
            (
                "tools/call",
                json!({"name": "t", "arguments": {"region": "eu"}}),
                vec![
                    ("Mcp-Method", "tools/call"),
                    ("Mcp-Name", "t"),
                    ("Mcp-Param-Region", "us"),
                ],
            ),
            (
                "tools/call",
                json!([1, 2]),
                vec![("Mcp-Method", "tools/call"), ("Mcp-Name", "t")],
            ),
        ];
        for (method, params, pairs) in cases {
            let headers = headers_of(&pairs);
            let raw = RawValue::from_string(params.to_string()).unwrap();
            let fields = RequestFields::parse(Some(&raw));
            for rules in [None, Some(&tool[..])] {
                assert_eq!(
                    check_request_fields(&headers, method, &fields, rules),
                    check_request(&headers, method, Some(&params), rules),
                    "{method} {params} {pairs:?}"
                );
            }
        }
        let raw = RawValue::from_string(r#"{"name":"t\u0021","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#.into()).unwrap();
        let fields = RequestFields::parse(Some(&raw));
        assert_eq!(fields.tool("tools/call"), Some("t!"));
        assert_eq!(fields.tool("prompts/get"), None);
        assert_eq!(fields.version(), Some("2026-07-28"));
        assert_eq!(RequestFields::parse(None).version(), None);
    }

    /// The fields are borrowed from the params (no copy per request) unless they carry
    /// escapes; members that are not strings read as absent.
    #[test]
    fn request_fields_borrow_plain_strings() {
        let raw = RawValue::from_string(
            r#"{"name":"get_weather","uri":"a\/b","taskId":7,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#
                .into(),
        )
        .unwrap();
        let fields = RequestFields::parse(Some(&raw));
        assert!(matches!(fields.name, Some(Cow::Borrowed("get_weather"))));
        assert!(matches!(fields.version, Some(Cow::Borrowed("2026-07-28"))));
        assert!(matches!(&fields.uri, Some(Cow::Owned(uri)) if uri == "a/b"));
        assert_eq!(fields.name_for("resources/read"), Some("a/b"));
        assert!(fields.task_id.is_none());
    }

    /// A header value not in the base64 form is compared where it lies; the base64 form is
    /// decoded.
    #[test]
    fn decoded_text_borrows_plain_values() {
        let plain = HeaderValue::from_static("  get_weather ");
        assert!(matches!(
            decoded_text(&plain, MCP_NAME),
            Ok(Cow::Borrowed("get_weather"))
        ));
        let encoded = HeaderValue::from_static("=?base64?aMOpbGxv?=");
        assert!(matches!(
            decoded_text(&encoded, MCP_NAME),
            Ok(Cow::Owned(text)) if text == "héllo"
        ));
    }

    /// Arguments are not read unless a tool's `Mcp-Param-*` rules need them.
    #[test]
    fn arguments_are_read_only_for_param_headers() {
        let raw =
            RawValue::from_string(r#"{"name":"t","arguments":{"region":"eu"}}"#.into()).unwrap();
        let fields = RequestFields::parse(Some(&raw));
        let headers = tool_call_headers(&[("Mcp-Param-Region", "us")]);
        // No rules: the header is not one of the tool's, and the arguments are not consulted.
        assert_eq!(
            check_request_fields(&headers, "tools/call", &fields, None),
            Ok(())
        );
        assert_eq!(
            check_request_fields(&headers, "tools/call", &fields, Some(&[])),
            Ok(())
        );
        assert!(matches!(
            check_request_fields(&headers, "tools/call", &fields, Some(&tool_headers())),
            Err(HeaderMismatch::Differs { .. })
        ));
    }

    /// A notification's headers: only the version must agree with the body.
    #[test]
    fn a_notification_checks_the_version_only() {
        let none = headers_of(&[]);
        assert_eq!(check_version(&none, None), Ok(()));
        assert!(matches!(
            check_version(&none, Some("2026-07-28")),
            Err(HeaderMismatch::Missing { .. })
        ));
        let other = headers_of(&[("MCP-Protocol-Version", "2025-11-25")]);
        assert!(matches!(
            check_version(&other, Some("2026-07-28")),
            Err(HeaderMismatch::Differs { .. })
        ));
        let same = headers_of(&[("MCP-Protocol-Version", "2026-07-28")]);
        assert_eq!(check_version(&same, Some("2026-07-28")), Ok(()));
    }

    fn tool_call_headers(extra: &[(&str, &str)]) -> HeaderMap {
        let mut pairs = vec![("Mcp-Method", "tools/call"), ("Mcp-Name", "t")];
        pairs.extend_from_slice(extra);
        headers_of(&pairs)
    }

    fn check_args(arguments: Value, extra: &[(&str, &str)]) -> Result<(), HeaderMismatch> {
        let tool = tool_headers();
        let params = json!({"name": "t", "arguments": arguments});
        check_request(
            &tool_call_headers(extra),
            "tools/call",
            Some(&params),
            Some(&tool),
        )
    }

    #[test]
    fn param_headers_must_match() {
        assert_eq!(
            check_args(
                json!({"region": "us-west1"}),
                &[("Mcp-Param-Region", "us-west1")]
            ),
            Ok(())
        );
        assert_eq!(
            check_args(
                json!({"region": "us-west1"}),
                &[("Mcp-Param-Region", "us-east1")]
            ),
            Err(HeaderMismatch::Differs {
                header: "Mcp-Param-Region".into(),
                field: "params.arguments.region".into(),
                header_value: "us-east1".into(),
                body_value: "us-west1".into()
            })
        );
        // Values are case-sensitive.
        assert!(
            check_args(
                json!({"region": "us-west1"}),
                &[("Mcp-Param-Region", "US-WEST1")]
            )
            .is_err()
        );
        // Nested path.
        assert_eq!(
            check_args(
                json!({"options": {"tenant": "acme"}}),
                &[("mcp-param-tenant", "acme")]
            ),
            Ok(())
        );
        assert!(matches!(
            check_args(json!({"options": {"tenant": "acme"}}), &[("mcp-param-tenant", "evil")]),
            Err(HeaderMismatch::Differs { field, .. }) if field == "params.arguments.options.tenant"
        ));
    }

    #[test]
    fn a_body_value_needs_its_header() {
        assert_eq!(
            check_args(json!({"region": "test-value"}), &[]),
            Err(HeaderMismatch::Missing {
                header: "Mcp-Param-Region".into(),
                field: "params.arguments.region".into(),
                body_value: "test-value".into()
            })
        );
        assert!(matches!(
            check_args(json!({"priority": 3}), &[]),
            Err(HeaderMismatch::Missing { body_value, .. }) if body_value == "3"
        ));
    }

    #[test]
    fn a_header_needs_its_body_value() {
        for arguments in [
            json!({}),
            json!({"region": null}),
            json!({"options": "not an object"}),
        ] {
            assert_eq!(
                check_args(arguments.clone(), &[("Mcp-Param-Region", "x")]),
                Err(HeaderMismatch::NotInBody {
                    header: "Mcp-Param-Region".into(),
                    field: "params.arguments.region".into()
                }),
                "{arguments}"
            );
            assert_eq!(
                check_args(arguments.clone(), &[("Mcp-Param-Tenant", "y")]),
                Err(HeaderMismatch::NotInBody {
                    header: "Mcp-Param-Tenant".into(),
                    field: "params.arguments.options.tenant".into()
                }),
                "{arguments}"
            );
        }
        // Without `arguments` at all.
        let tool = tool_headers();
        let params = json!({"name": "t"});
        let headers = tool_call_headers(&[("Mcp-Param-Verbose", "true")]);
        assert!(matches!(
            check_request(&headers, "tools/call", Some(&params), Some(&tool)),
            Err(HeaderMismatch::NotInBody { header, .. }) if header == "Mcp-Param-Verbose"
        ));
    }

    #[test]
    fn absent_and_null_arguments_expect_no_header() {
        assert_eq!(check_args(json!({}), &[]), Ok(()));
        assert_eq!(
            check_args(json!({"verbose": null, "query": "SELECT 1"}), &[]),
            Ok(())
        );
    }

    #[test]
    fn undeclared_param_headers_are_ignored() {
        assert_eq!(
            check_args(json!({"query": "q"}), &[("Mcp-Param-Query", "anything")]),
            Ok(())
        );
        let headers = tool_call_headers(&[("Mcp-Param-Region", "x")]);
        let params = json!({"name": "t"});
        assert_eq!(
            check_request(&headers, "tools/call", Some(&params), None),
            Ok(())
        );
        assert_eq!(
            check_request(&headers, "tools/call", Some(&params), Some(&[])),
            Ok(())
        );
    }

    #[test]
    fn integers_compare_numerically() {
        for sent in [
            "42",
            "042",
            "+42",
            "42.0",
            "42.000",
            "4.2e1",
            "4.2E+1",
            "420e-1",
            " 42 ",
            "=?base64?NDI=?=",
        ] {
            assert_eq!(
                check_args(json!({"priority": 42}), &[("Mcp-Param-Priority", sent)]),
                Ok(()),
                "{sent}"
            );
        }
        for sent in [
            "43",
            "42.5",
            "4.21e1",
            "-42",
            "abc",
            "",
            "42abc",
            "0x2a",
            "42.",
            ".42e2",
            "4 2",
            "1e9999999999",
            "NaN",
            "inf",
        ] {
            assert!(
                matches!(
                    check_args(json!({"priority": 42}), &[("Mcp-Param-Priority", sent)]),
                    Err(HeaderMismatch::Differs { .. })
                ),
                "{sent}"
            );
        }
        assert_eq!(
            check_args(json!({"priority": 0}), &[("Mcp-Param-Priority", "-0")]),
            Ok(())
        );
        assert_eq!(
            check_args(json!({"priority": 0}), &[("Mcp-Param-Priority", "0.000e5")]),
            Ok(())
        );
        assert_eq!(
            check_args(json!({"priority": -7}), &[("Mcp-Param-Priority", "-7")]),
            Ok(())
        );
        assert_eq!(
            check_args(json!({"priority": 42.0}), &[("Mcp-Param-Priority", "42")]),
            Ok(())
        );
        assert_eq!(
            check_args(json!({"priority": 1000}), &[("Mcp-Param-Priority", "1e3")]),
            Ok(())
        );
        // Exact at the edge of the safe range, and beyond it, where f64 would blur.
        assert_eq!(
            check_args(
                json!({"priority": 9_007_199_254_740_991_i64}),
                &[("Mcp-Param-Priority", "9007199254740991")]
            ),
            Ok(())
        );
        assert!(
            check_args(
                json!({"priority": 9_007_199_254_740_993_i64}),
                &[("Mcp-Param-Priority", "9007199254740992")]
            )
            .is_err()
        );
        assert!(
            check_args(
                json!({"priority": 9_007_199_254_740_991_i64}),
                &[("Mcp-Param-Priority", "9007199254740991.0000000001")]
            )
            .is_err()
        );
        assert_eq!(
            check_args(
                json!({"priority": u64::MAX}),
                &[("Mcp-Param-Priority", "18446744073709551615")]
            ),
            Ok(())
        );
        // A fraction in the body compares by value.
        assert_eq!(
            check_args(json!({"priority": 2.5}), &[("Mcp-Param-Priority", "2.50")]),
            Ok(())
        );
        assert!(check_args(json!({"priority": 2.5}), &[("Mcp-Param-Priority", "2.6")]).is_err());
    }

    #[test]
    fn booleans_compare_as_lowercase_words() {
        assert_eq!(
            check_args(json!({"verbose": true}), &[("Mcp-Param-Verbose", "true")]),
            Ok(())
        );
        assert_eq!(
            check_args(json!({"verbose": false}), &[("Mcp-Param-Verbose", "false")]),
            Ok(())
        );
        for sent in ["True", "TRUE", "1", "yes", "false"] {
            assert!(
                check_args(json!({"verbose": true}), &[("Mcp-Param-Verbose", sent)]).is_err(),
                "{sent}"
            );
        }
    }

    #[test]
    fn base64_param_values_are_decoded() {
        assert_eq!(
            check_args(
                json!({"region": "Hello"}),
                &[("Mcp-Param-Region", "=?base64?SGVsbG8=?=")]
            ),
            Ok(())
        );
        // Needlessly encoded plain values still match.
        assert_eq!(
            check_args(
                json!({"region": "us-west1"}),
                &[("Mcp-Param-Region", "=?base64?dXMtd2VzdDE=?=")]
            ),
            Ok(())
        );
        // Literal lookalikes are literals.
        assert_eq!(
            check_args(
                json!({"region": "SGVsbG8="}),
                &[("Mcp-Param-Region", "SGVsbG8=")]
            ),
            Ok(())
        );
        assert_eq!(
            check_args(
                json!({"region": "=?base64?SGVsbG8="}),
                &[("Mcp-Param-Region", "=?base64?SGVsbG8=")]
            ),
            Ok(())
        );
        for bad in [
            "=?base64?SGVsbG8?=",
            "=?base64?SGVs!!!bG8=?=",
            "=?base64?/w==?=",
        ] {
            assert!(
                matches!(
                    check_args(json!({"region": "Hello"}), &[("Mcp-Param-Region", bad)]),
                    Err(HeaderMismatch::Malformed { ref header, .. }) if header == "Mcp-Param-Region"
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn messages_never_carry_raw_line_breaks() {
        // The header decodes to "a\r\nc", the body holds "a\nb".
        let err = check_args(
            json!({"region": "a\nb"}),
            &[("Mcp-Param-Region", "=?base64?YQ0KYw==?=")],
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(!message.contains(['\r', '\n']), "{message}");
        assert!(
            message.contains("'a\\r\\nc'") && message.contains("'a\\nb'"),
            "{message}"
        );
        assert!(!format!("{err:?}").contains(['\r', '\n']));

        let err = check_args(json!({"region": "x\r\ny"}), &[]).unwrap_err();
        assert!(!err.to_string().contains(['\r', '\n']));

        let params = json!({"name": "evil\r\nX-Injected: 1"});
        let headers = headers_of(&[("Mcp-Method", "tools/call"), ("Mcp-Name", "other")]);
        let err = check_request(&headers, "tools/call", Some(&params), None).unwrap_err();
        assert!(!err.to_string().contains(['\r', '\n']));
        let err = check_request(&HeaderMap::new(), "evil\r\nmethod", None, None).unwrap_err();
        assert!(!err.to_string().contains(['\r', '\n']));
    }

    #[test]
    fn arrays_and_objects_cannot_be_mirrored() {
        assert_eq!(
            check_args(json!({"region": ["a"]}), &[("Mcp-Param-Region", "a")]),
            Err(HeaderMismatch::NotMirrorable {
                header: "Mcp-Param-Region".into(),
                field: "params.arguments.region".into(),
                found: "an array"
            })
        );
        assert!(matches!(
            check_args(json!({"region": {"a": 1}}), &[]),
            Err(HeaderMismatch::NotMirrorable {
                found: "an object",
                ..
            })
        ));
    }

    #[test]
    fn arguments_are_compared_by_their_json_type() {
        // A string where an integer is declared: the header must still repeat it exactly.
        assert_eq!(
            check_args(
                json!({"priority": "high"}),
                &[("Mcp-Param-Priority", "high")]
            ),
            Ok(())
        );
        assert!(check_args(json!({"priority": "042"}), &[("Mcp-Param-Priority", "42")]).is_err());
        // A number where a string is declared compares numerically.
        assert_eq!(
            check_args(json!({"region": 5}), &[("Mcp-Param-Region", "5.0")]),
            Ok(())
        );
    }
}
