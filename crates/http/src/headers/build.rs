//! The headers a client sends with a 2026-07-28 request.

use http::{HeaderName, HeaderValue};
use serde_json::{Number, Value};

use super::decimal::integral_f64;
use super::names::{
    MCP_METHOD, MCP_PROTOCOL_VERSION, META_PROTOCOL_VERSION_FIELD, argument, meta_protocol_version,
    name_source,
};
use super::schema::{ParamHeader, json_kind};
use super::value::{encode_value, escape, is_plain_safe};

/// The text of a primitive argument: strings as they are, booleans as `true`/`false`, integers
/// (also integral floats such as `42.0`) in decimal, other numbers as JSON writes them. `Err`
/// carries the JSON type of an array or object, which no header can carry.
pub(super) fn argument_text(value: &Value) -> Result<String, &'static str> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(number_text(n)),
        other => Err(json_kind(other)),
    }
}

fn number_text(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    match integral_f64(n) {
        Some(i) => i.to_string(),
        None => n.to_string(),
    }
}

fn plain_header_value(text: &str) -> Option<HeaderValue> {
    if is_plain_safe(text) {
        HeaderValue::from_str(text).ok()
    } else {
        None
    }
}

fn encoded_header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(&encode_value(text)).expect("encode_value yields printable ASCII only")
}

/// Why [`request_headers`] cannot build the headers of a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestHeaderError {
    /// A value that goes into a header unencoded (the method or the protocol version) has
    /// characters a header cannot carry, or leading or trailing spaces.
    #[error(
        "{field} '{value}' cannot be sent in the {header} header: only printable ASCII without leading or trailing spaces is allowed"
    )]
    NotHeaderSafe {
        /// The header.
        header: &'static str,
        /// The body field, such as `method`.
        field: &'static str,
        /// The value, escaped.
        value: String,
    },
    /// An argument the tool mirrors into a header is an array or an object.
    #[error(
        "{field} is {found}, but the tool mirrors it into the {header} header, which carries only a string, integer or boolean"
    )]
    NotMirrorable {
        /// The header, such as `Mcp-Param-Region`.
        header: String,
        /// The argument, such as `params.arguments.region`.
        field: String,
        /// Its JSON type: `"an array"` or `"an object"`.
        found: &'static str,
    },
}

/// The standard headers of a 2026-07-28 request, for the client to send with its POST.
///
/// * `MCP-Protocol-Version`, when `params._meta` carries `io.modelcontextprotocol/protocolVersion`;
/// * `Mcp-Method`, always;
/// * `Mcp-Name` for `tools/call` and `prompts/get` (`params.name`), `resources/read`
///   (`params.uri`) and the tasks extension's `tasks/get`, `tasks/update` and `tasks/cancel`
///   (`params.taskId`), encoded with [`encode_value`];
/// * `Mcp-Param-{Name}` for each of `param_headers` (the called tool's, from [`param_headers`](super::param_headers))
///   whose argument is present in `params.arguments` and not `null`: strings through
///   [`encode_value`], integers in decimal, booleans as `true`/`false`.
///
/// Arguments are rendered by their JSON type, not the declared one, so the header always repeats
/// the body: a wrong-typed argument reaches the tool, whose input validation can then tell the
/// model what to fix. An array or object argument cannot be mirrored and is an error.
pub fn request_headers(
    method: &str,
    params: Option<&Value>,
    param_headers: Option<&[ParamHeader]>,
) -> Result<Vec<(HeaderName, HeaderValue)>, RequestHeaderError> {
    let mut headers = Vec::new();
    if let Some(version) = meta_protocol_version(params) {
        let value =
            plain_header_value(version).ok_or_else(|| RequestHeaderError::NotHeaderSafe {
                header: MCP_PROTOCOL_VERSION,
                field: META_PROTOCOL_VERSION_FIELD,
                value: escape(version),
            })?;
        headers.push((HeaderName::from_static("mcp-protocol-version"), value));
    }
    let value = plain_header_value(method).ok_or_else(|| RequestHeaderError::NotHeaderSafe {
        header: MCP_METHOD,
        field: "method",
        value: escape(method),
    })?;
    headers.push((HeaderName::from_static("mcp-method"), value));
    if let Some((key, _)) = name_source(method)
        && let Some(name) = params.and_then(|p| p.get(key)).and_then(Value::as_str)
    {
        headers.push((
            HeaderName::from_static("mcp-name"),
            encoded_header_value(name),
        ));
    }
    for param in param_headers.unwrap_or_default() {
        let Some(value) = argument(params, param.path()) else {
            continue;
        };
        let text = argument_text(value).map_err(|found| RequestHeaderError::NotMirrorable {
            header: param.display_header(),
            field: param.body_field(),
            found,
        })?;
        headers.push((param.header_name().clone(), encoded_header_value(&text)));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::headers::test_util::{as_strings, call, tool_headers};

    // --- request_headers -------------------------------------------------------------------

    #[test]
    fn builds_the_headers_of_a_tool_call() {
        let tool = tool_headers();
        let params = call(json!({
            "region": "us-west1",
            "priority": 42,
            "verbose": false,
            "method_val": "test-method",
            "greeting": "Hello, 世界",
            "options": {"tenant": " padded "},
            "query": "SELECT * FROM users"
        }));
        let headers = request_headers("tools/call", Some(&params), Some(&tool)).unwrap();
        let mut got = as_strings(&headers);
        got.sort();
        let mut want: Vec<(String, String)> = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "execute_sql"),
            ("mcp-param-region", "us-west1"),
            ("mcp-param-priority", "42"),
            ("mcp-param-verbose", "false"),
            ("mcp-param-method", "test-method"),
            ("mcp-param-greeting", "=?base64?SGVsbG8sIOS4lueVjA==?="),
            ("mcp-param-tenant", "=?base64?IHBhZGRlZCA=?="),
        ]
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
        want.sort();
        assert_eq!(got, want);
        // Mcp-Method comes before the params, and the x-mcp-header "Method" did not replace it.
        assert_eq!(headers[1].0.as_str(), "mcp-method");
        assert_eq!(headers[1].1, "tools/call");
    }

    #[test]
    fn omits_null_and_absent_arguments() {
        let tool = tool_headers();
        let params =
            call(json!({"region": "us-east1", "priority": 1, "verbose": null, "options": {}}));
        let headers = request_headers("tools/call", Some(&params), Some(&tool)).unwrap();
        let mut names: Vec<_> = headers.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "mcp-method",
                "mcp-name",
                "mcp-param-priority",
                "mcp-param-region",
                "mcp-protocol-version"
            ]
        );
        // No arguments at all, or a non-object on the way: nothing mirrored.
        for params in [
            json!({"name": "t"}),
            json!({"name": "t", "arguments": {"options": "x"}}),
        ] {
            let headers = request_headers("tools/call", Some(&params), Some(&tool)).unwrap();
            assert_eq!(headers.len(), 2, "{params}");
        }
    }

    #[test]
    fn renders_numbers_and_booleans() {
        let tool = tool_headers();
        for (value, text) in [
            (json!(-7), "-7"),
            (json!(0), "0"),
            (json!(42.0), "42"),
            (json!(9_007_199_254_740_991_i64), "9007199254740991"),
            (json!(u64::MAX), "18446744073709551615"),
            (json!(2.5), "2.5"),
            (json!(true), "true"),
        ] {
            let params = json!({"name": "t", "arguments": {"priority": value}});
            let headers = request_headers("tools/call", Some(&params), Some(&tool)).unwrap();
            assert_eq!(headers[2].1, text, "{value}");
        }
    }

    #[test]
    fn mirrors_arguments_by_their_json_type() {
        // A string for an integer parameter goes as the string; the tool's validation answers.
        let tool = tool_headers();
        let params = json!({"name": "t", "arguments": {"priority": "high", "region": 5}});
        let headers =
            as_strings(&request_headers("tools/call", Some(&params), Some(&tool)).unwrap());
        assert!(headers.contains(&("mcp-param-priority".into(), "high".into())));
        assert!(headers.contains(&("mcp-param-region".into(), "5".into())));
    }

    #[test]
    fn refuses_arrays_and_objects() {
        let tool = tool_headers();
        let params = json!({"name": "t", "arguments": {"region": ["a"]}});
        let err = request_headers("tools/call", Some(&params), Some(&tool)).unwrap_err();
        assert_eq!(
            err,
            RequestHeaderError::NotMirrorable {
                header: "Mcp-Param-Region".into(),
                field: "params.arguments.region".into(),
                found: "an array"
            }
        );
        let params = json!({"name": "t", "arguments": {"options": {"tenant": {"id": 1}}}});
        let err = request_headers("tools/call", Some(&params), Some(&tool)).unwrap_err();
        assert!(
            err.to_string()
                .contains("params.arguments.options.tenant is an object"),
            "{err}"
        );
    }

    #[test]
    fn names_the_target_of_each_method() {
        let cases = [
            (
                "tools/call",
                json!({"name": "get_weather"}),
                Some("get_weather"),
            ),
            ("prompts/get", json!({"name": "greet"}), Some("greet")),
            (
                "resources/read",
                json!({"uri": "file:///projects/myapp/config.json"}),
                Some("file:///projects/myapp/config.json"),
            ),
            ("tasks/get", json!({"taskId": "786512e2"}), Some("786512e2")),
            (
                "tasks/update",
                json!({"taskId": "t1", "inputResponses": {}}),
                Some("t1"),
            ),
            ("tasks/cancel", json!({"taskId": "t2"}), Some("t2")),
            (
                "resources/read",
                json!({"uri": "file:///données.txt"}),
                Some("=?base64?ZmlsZTovLy9kb25uw6llcy50eHQ=?="),
            ),
            ("tools/list", json!({"name": "ignored"}), None),
            ("server/discover", json!({}), None),
            ("subscriptions/listen", json!({}), None),
            ("tools/call", json!({"name": 5}), None),
        ];
        for (method, params, name) in cases {
            let headers = as_strings(&request_headers(method, Some(&params), None).unwrap());
            assert_eq!(headers[0], ("mcp-method".to_owned(), method.to_owned()));
            let got = headers
                .iter()
                .find(|(n, _)| n == "mcp-name")
                .map(|(_, v)| v.as_str());
            assert_eq!(got, name, "{method} {params}");
        }
        let headers = request_headers("tools/list", None, None).unwrap();
        assert_eq!(
            as_strings(&headers),
            [("mcp-method".to_owned(), "tools/list".to_owned())]
        );
    }

    #[test]
    fn refuses_a_method_or_version_headers_cannot_carry() {
        for method in ["tools/ca\nll", "méthode", " padded"] {
            assert!(matches!(
                request_headers(method, None, None),
                Err(RequestHeaderError::NotHeaderSafe {
                    header: MCP_METHOD,
                    ..
                })
            ));
        }
        let err = request_headers("tools/call", None, None).map(|_| ());
        assert_eq!(err, Ok(()));
        let params = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026\r\n"}});
        let err = request_headers("tools/list", Some(&params), None).unwrap_err();
        assert!(matches!(
            err,
            RequestHeaderError::NotHeaderSafe {
                header: MCP_PROTOCOL_VERSION,
                ..
            }
        ));
        assert!(!err.to_string().contains(['\r', '\n']));
    }
}
