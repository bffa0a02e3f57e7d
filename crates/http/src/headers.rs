//! The request headers of the 2026-07-28 Streamable HTTP transport, checked in one place for both
//! sides.
//!
//! A modern POST mirrors parts of its JSON-RPC body into HTTP headers so that load balancers and
//! gateways can route without parsing the body:
//!
//! | header | body source | sent for |
//! |---|---|---|
//! | `MCP-Protocol-Version` | `params._meta["io.modelcontextprotocol/protocolVersion"]` | every request |
//! | `Mcp-Method` | `method` | every request |
//! | `Mcp-Name` | `params.name` / `params.uri` / `params.taskId` | `tools/call`, `prompts/get` / `resources/read` / `tasks/get`, `tasks/update`, `tasks/cancel` (tasks extension) |
//! | `Mcp-Param-{Name}` | the argument a tool's `inputSchema` marks with `x-mcp-header: "{Name}"` | `tools/call`, when the argument is present and not `null` |
//!
//! `Mcp-Name` and `Mcp-Param-{Name}` values that are not plain header-safe ASCII travel as
//! `=?base64?{standard, padded base64 of the UTF-8}?=` ([`encode_value`], [`decode_value`]).
//!
//! The same rules serve both ends:
//! * the client checks each tool's schema with [`param_headers`] when it lists tools (a tool whose
//!   annotations break a rule is dropped, with a warning naming the tool and the
//!   [`SchemaHeaderError`]), then builds the headers of each request with [`request_headers`];
//! * the server checks an incoming request with [`check_request`] (or, without parsing the whole
//!   params, [`RequestFields`] and [`check_request_fields`]). A failure is a
//!   [`HeaderMismatch`]: HTTP `400 Bad Request` with JSON-RPC error `-32020`.
//!
//! Nothing here does I/O or depends on the `server` feature.

use std::borrow::Cow;
use std::fmt::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use modelctx_types::ErrorCode;
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};

/// `MCP-Protocol-Version`: the protocol version of the request, on every POST.
pub const MCP_PROTOCOL_VERSION: &str = "MCP-Protocol-Version";
/// `Mcp-Session-Id`: the HTTP session id of the legacy (2025-03-26 to 2025-11-25) transport. The
/// 2026-07-28 transport has no sessions: a modern-only server ignores it and never sends one.
pub const MCP_SESSION_ID: &str = "Mcp-Session-Id";
/// `Mcp-Method`: mirrors the JSON-RPC `method` of every request.
pub const MCP_METHOD: &str = "Mcp-Method";
/// `Mcp-Name`: mirrors `params.name`, `params.uri` or `params.taskId`, depending on the method.
pub const MCP_NAME: &str = "Mcp-Name";
/// `Mcp-Param-`: the prefix of the headers that mirror tool arguments marked with `x-mcp-header`.
pub const MCP_PARAM_PREFIX: &str = "Mcp-Param-";
/// `Last-Event-ID`: SSE resumption in the legacy transport. The 2026-07-28 transport has no
/// resumable streams, and a modern-only server ignores the header.
pub const LAST_EVENT_ID: &str = "Last-Event-ID";
/// `x-mcp-header`: the `inputSchema` keyword that names the `Mcp-Param-{Name}` header of a
/// property.
pub const X_MCP_HEADER: &str = "x-mcp-header";

const SENTINEL_PREFIX: &str = "=?base64?";
const SENTINEL_SUFFIX: &str = "?=";
use modelctx_types::meta_keys::PROTOCOL_VERSION as META_PROTOCOL_VERSION;
const META_PROTOCOL_VERSION_FIELD: &str =
    "params._meta[\"io.modelcontextprotocol/protocolVersion\"]";
/// Escaped text in error messages is cut after this many characters.
const MAX_SHOWN_CHARS: usize = 120;

// ---------------------------------------------------------------------------------------------
// Value encoding
// ---------------------------------------------------------------------------------------------

/// The header form of `value` for `Mcp-Name` and `Mcp-Param-{Name}`.
///
/// The value goes as is when it is plain header-safe: only printable ASCII (`0x20..=0x7E`), no
/// leading or trailing space, and not itself of the sentinel shape (starting with `=?base64?` and
/// ending with `?=`). Anything else (non-ASCII, a control character including tab, CR and LF,
/// leading or trailing whitespace, or a literal that looks like the sentinel) goes as
/// `=?base64?{base64}?=`, using the standard alphabet with `=` padding over the UTF-8 bytes. The
/// empty string goes as an empty value.
///
/// ```
/// use modelctx_http::headers::encode_value;
/// assert_eq!(encode_value("us-west1"), "us-west1");
/// assert_eq!(encode_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
/// assert_eq!(encode_value("=?base64?literal?="), "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=");
/// ```
pub fn encode_value(value: &str) -> String {
    if is_plain_safe(value) && !looks_like_sentinel(value) {
        value.to_owned()
    } else {
        format!("{SENTINEL_PREFIX}{}{SENTINEL_SUFFIX}", BASE64.encode(value))
    }
}

/// The text a `Mcp-Name` or `Mcp-Param-{Name}` header value carries.
///
/// A value of the form `=?base64?…?=` (markers exactly so, lowercase) is decoded: the payload must
/// be canonical standard base64 (padding included) of UTF-8 text. Any other value is the text
/// itself; `=?BASE64?…?=` or a value missing one of the markers is such a literal. Either way every
/// byte must be one HTTP allows in a field value: printable ASCII, space or tab.
///
/// The value is taken as received: trim optional whitespace around it first, as an HTTP parser
/// does ([`check_request`] does).
pub fn decode_value(value: &str) -> Result<String, ValueDecodeError> {
    decode_bytes(value.as_bytes())
}

/// Why a header value could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueDecodeError {
    /// A byte HTTP does not allow in a field value: field values hold printable ASCII
    /// (`0x21..=0x7E`), space and horizontal tab only, so CR, LF, other control characters and
    /// raw non-ASCII bytes are rejected. Text outside that set travels base64-encoded.
    #[error(
        "byte 0x{byte:02x} at position {position} is not allowed in a header value (only printable \
         ASCII, space and tab; other text must be sent as =?base64?...?=)"
    )]
    InvalidByte {
        /// Offset of the byte in the value.
        position: usize,
        /// The byte.
        byte: u8,
    },
    /// The value has the `=?base64?…?=` form but its payload is not canonical standard base64
    /// with padding.
    #[error("the =?base64?...?= payload is not valid padded standard base64: {detail}")]
    InvalidBase64 {
        /// What is wrong with the payload.
        detail: String,
    },
    /// The base64 payload decodes to bytes that are not UTF-8.
    #[error("the =?base64?...?= payload does not decode to UTF-8 text")]
    NotUtf8,
}

fn is_plain_safe(value: &str) -> bool {
    value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
}

fn looks_like_sentinel(value: &str) -> bool {
    value.starts_with(SENTINEL_PREFIX) && value.ends_with(SENTINEL_SUFFIX)
}

/// Whether RFC 9110 allows `byte` in a field value (`field-vchar`, SP, HTAB), leaving out
/// `obs-text`.
fn is_field_byte(byte: u8) -> bool {
    byte == b'\t' || (0x20..=0x7e).contains(&byte)
}

/// Checks that every byte is allowed in a field value and returns the bytes as text.
fn field_text(raw: &[u8]) -> Result<&str, ValueDecodeError> {
    if let Some(position) = raw.iter().position(|&b| !is_field_byte(b)) {
        return Err(ValueDecodeError::InvalidByte {
            position,
            byte: raw[position],
        });
    }
    // Every byte is ASCII, hence this is UTF-8.
    std::str::from_utf8(raw).map_err(|e| ValueDecodeError::InvalidByte {
        position: e.valid_up_to(),
        byte: raw[e.valid_up_to()],
    })
}

fn decode_bytes(raw: &[u8]) -> Result<String, ValueDecodeError> {
    let text = field_text(raw)?;
    if !looks_like_sentinel(text) {
        return Ok(text.to_owned());
    }
    // `=?base64?=` starts and ends with the markers, overlapping: no payload fits between them.
    if text.len() < SENTINEL_PREFIX.len() + SENTINEL_SUFFIX.len() {
        return Err(ValueDecodeError::InvalidBase64 {
            detail: "the markers overlap, leaving no payload".to_owned(),
        });
    }
    let payload = &text[SENTINEL_PREFIX.len()..text.len() - SENTINEL_SUFFIX.len()];
    let bytes = BASE64
        .decode(payload)
        .map_err(|e| ValueDecodeError::InvalidBase64 {
            detail: e.to_string(),
        })?;
    String::from_utf8(bytes).map_err(|_| ValueDecodeError::NotUtf8)
}

/// Trims the optional whitespace (SP, HTAB) an HTTP parser strips around a field value.
fn trim_ows(raw: &[u8]) -> &[u8] {
    let start = raw
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |i| i + 1);
    &raw[start..end]
}

/// Text from a peer, made safe to show: control characters (CR and LF among them) become escapes
/// such as `\n` or `\u{1b}`, and long text is cut with `…`.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_SHOWN_CHARS + 8));
    for (i, c) in text.chars().enumerate() {
        if i == MAX_SHOWN_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// x-mcp-header in a tool's inputSchema
// ---------------------------------------------------------------------------------------------

/// The JSON type of a property marked with `x-mcp-header`: the only three the spec allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParamKind {
    /// `"type": "integer"`: mirrored as a decimal; values must stay within ±(2^53 − 1).
    Integer,
    /// `"type": "string"`: mirrored through [`encode_value`].
    String,
    /// `"type": "boolean"`: mirrored as `true` or `false`.
    Boolean,
}

impl ParamKind {
    /// The JSON Schema type name: `"integer"`, `"string"` or `"boolean"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ParamKind::Integer => "integer",
            ParamKind::String => "string",
            ParamKind::Boolean => "boolean",
        }
    }
}

/// One tool argument mirrored into an `Mcp-Param-{Name}` header, as found by [`param_headers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    name: String,
    header: HeaderName,
    path: Vec<String>,
    kind: ParamKind,
}

impl ParamHeader {
    /// The `x-mcp-header` value as the schema spells it, such as `Region`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The header, `Mcp-Param-{name}` (lowercased, as [`HeaderName`] keeps every name).
    pub fn header_name(&self) -> &HeaderName {
        &self.header
    }

    /// The property names leading from `arguments` to the argument: `["region"]` for
    /// `arguments.region`, `["options", "tenant"]` for `arguments.options.tenant`.
    pub fn path(&self) -> &[String] {
        &self.path
    }

    /// The declared type of the argument.
    pub fn kind(&self) -> ParamKind {
        self.kind
    }

    /// `Mcp-Param-{name}` as the schema spells the name, for messages.
    fn display_header(&self) -> String {
        format!("{MCP_PARAM_PREFIX}{}", self.name)
    }

    /// `params.arguments.a.b`, with `["…"]` for names that are not plain identifiers.
    fn body_field(&self) -> String {
        let mut field = String::from("params.arguments");
        for segment in &self.path {
            let plain = segment
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if plain {
                field.push('.');
                field.push_str(segment);
            } else {
                let quoted = serde_json::to_string(segment).unwrap_or_default();
                let _ = write!(field, "[{quoted}]");
            }
        }
        escape(&field)
    }
}

/// Why a tool's `inputSchema` breaks an `x-mcp-header` rule.
///
/// A client on Streamable HTTP must drop such a tool from its `tools/list` view, and should log a
/// warning naming the tool and this reason. Locations are JSON Pointers into the `inputSchema`;
/// names and locations are escaped for display.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaHeaderError {
    /// The `x-mcp-header` value is not a string.
    #[error("x-mcp-header at {location} must be a string, found {found}")]
    NotAString {
        /// Where the annotated schema is.
        location: String,
        /// The JSON type found, such as `"a number"`.
        found: &'static str,
    },
    /// The `x-mcp-header` value is empty.
    #[error("x-mcp-header at {location} is empty; it must name the Mcp-Param-{{Name}} header")]
    Empty {
        /// Where the annotated schema is.
        location: String,
    },
    /// The value contains a control character (CR, LF, tab, …).
    #[error("x-mcp-header '{name}' at {location} contains a control character")]
    ControlCharacter {
        /// Where the annotated schema is.
        location: String,
        /// The value, escaped.
        name: String,
    },
    /// The value is not an HTTP field-name token (`1*tchar`, RFC 9110 section 5.1).
    #[error(
        "x-mcp-header '{name}' at {location} is not an HTTP field-name token (RFC 9110 \
         section 5.1): '{character}' is not a tchar"
    )]
    NotAToken {
        /// Where the annotated schema is.
        location: String,
        /// The value, escaped.
        name: String,
        /// The first character that is not a `tchar`, escaped.
        character: String,
    },
    /// Two annotations name the same header, compared ignoring ASCII case.
    #[error(
        "x-mcp-header '{name}' at {location} duplicates '{first_name}' at {first_location} \
         (header names are compared ignoring case)"
    )]
    Duplicate {
        /// Where the second annotated schema is.
        location: String,
        /// The second value.
        name: String,
        /// Where the first annotated schema is.
        first_location: String,
        /// The first value.
        first_name: String,
    },
    /// The annotated property declares no `type`, so it is not known to be a primitive.
    #[error(
        "x-mcp-header '{name}' at {location} is on a property without a \"type\"; it must be \
         \"integer\", \"string\" or \"boolean\""
    )]
    MissingType {
        /// Where the annotated schema is.
        location: String,
        /// The value.
        name: String,
    },
    /// The annotated property has a type other than `integer`, `string` or `boolean` (`number`,
    /// `object`, `array`, `null`, or a list of types).
    #[error(
        "x-mcp-header '{name}' at {location} is on a property of type {found}; only \"integer\", \
         \"string\" and \"boolean\" are allowed (\"number\" is not)"
    )]
    UnsupportedType {
        /// Where the annotated schema is.
        location: String,
        /// The value.
        name: String,
        /// The `type` found, as JSON, escaped.
        found: String,
    },
    /// The annotation is not reached from the root through `properties` alone: the path passes
    /// through `items`, `anyOf`, `$defs` or another keyword, so no single argument path exists.
    #[error(
        "x-mcp-header at {location} is not statically reachable: the path from the schema root \
         passes through \"{keyword}\", but only a chain of \"properties\" is allowed"
    )]
    NotStaticallyReachable {
        /// Where the annotated schema is.
        location: String,
        /// The first keyword on the path other than `properties`.
        keyword: &'static str,
    },
    /// The annotation is on the schema root, which is the arguments object, not a property.
    #[error("x-mcp-header on the inputSchema root annotates no property")]
    OnRoot,
}

/// How a schema was reached from the `inputSchema` root.
#[derive(Clone)]
enum Reach {
    /// Through `properties` only: the argument path so far.
    Static(Vec<String>),
    /// Through this other keyword (the first one on the path).
    Through(&'static str),
}

/// Keywords whose value is one subschema (`items` may also be a list).
const SINGLE_SCHEMA_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Keywords whose value is a list of subschemas.
const LIST_SCHEMA_KEYWORDS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas (besides `properties`).
const MAP_SCHEMA_KEYWORDS: &[&str] = &[
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

fn static_keyword(table: &[&'static str], key: &str) -> Option<&'static str> {
    table.iter().copied().find(|k| *k == key)
}

/// Appends a JSON Pointer token (`~` → `~0`, `/` → `~1`).
fn pointer_push(pointer: &str, token: &str) -> String {
    format!("{pointer}/{}", token.replace('~', "~0").replace('/', "~1"))
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// The `x-mcp-header` annotations of a tool's `inputSchema`, checked against every rule of the
/// spec.
///
/// Each annotation must:
/// * be a non-empty string without control characters that is an HTTP field-name token
///   (`1*tchar`, RFC 9110 section 5.1);
/// * be unique among the schema's annotations, ignoring ASCII case;
/// * sit on a property whose `type` is exactly `"integer"`, `"string"` or `"boolean"` (not
///   `"number"`, and not a list of types);
/// * be statically reachable: reached from the root through a chain of `properties` keys only,
///   never through `items`, `prefixItems`, `anyOf`, `oneOf`, `allOf`, `not`, `if`/`then`/`else`,
///   `$defs`, `additionalProperties` or any other subschema keyword (a `$ref` target lives under
///   `$defs`, so it is not reachable either).
///
/// Data keywords (`const`, `enum`, `default`, `examples`) and unknown keywords are not schemas and
/// are not searched. The walk uses no recursion, so a deep schema cannot exhaust the stack.
///
/// Integer values must also stay within ±(2^53 − 1); that is a rule on values, not on the schema.
pub fn param_headers(
    input_schema: &Map<String, Value>,
) -> Result<Vec<ParamHeader>, SchemaHeaderError> {
    let mut found: Vec<(ParamHeader, String)> = Vec::new();
    let mut stack: Vec<(&Map<String, Value>, String, Reach)> =
        vec![(input_schema, String::new(), Reach::Static(Vec::new()))];

    while let Some((schema, pointer, reach)) = stack.pop() {
        if let Some(annotation) = schema.get(X_MCP_HEADER) {
            let path = match &reach {
                Reach::Through(keyword) => {
                    return Err(SchemaHeaderError::NotStaticallyReachable {
                        location: escape(&pointer),
                        keyword,
                    });
                }
                Reach::Static(path) if path.is_empty() => return Err(SchemaHeaderError::OnRoot),
                Reach::Static(path) => path.clone(),
            };
            let param = check_annotation(schema, annotation, &pointer, path)?;
            if let Some((first, first_pointer)) = found
                .iter()
                .find(|(p, _)| p.name.eq_ignore_ascii_case(&param.name))
            {
                return Err(SchemaHeaderError::Duplicate {
                    location: escape(&pointer),
                    name: param.name.clone(),
                    first_location: escape(first_pointer),
                    first_name: first.name.clone(),
                });
            }
            found.push((param, pointer.clone()));
        }

        let mut children: Vec<(&Map<String, Value>, String, Reach)> = Vec::new();
        for (key, value) in schema {
            if key == "properties" {
                let Value::Object(properties) = value else {
                    continue;
                };
                let base = pointer_push(&pointer, key);
                for (name, sub) in properties {
                    let Value::Object(sub) = sub else { continue };
                    let child_reach = match &reach {
                        Reach::Static(path) => {
                            let mut path = path.clone();
                            path.push(name.clone());
                            Reach::Static(path)
                        }
                        through @ Reach::Through(_) => through.clone(),
                    };
                    children.push((sub, pointer_push(&base, name), child_reach));
                }
                continue;
            }
            let child_reach = |keyword: &'static str| match &reach {
                Reach::Static(_) => Reach::Through(keyword),
                through @ Reach::Through(_) => through.clone(),
            };
            match value {
                Value::Object(sub) => {
                    if let Some(keyword) = static_keyword(SINGLE_SCHEMA_KEYWORDS, key) {
                        children.push((sub, pointer_push(&pointer, key), child_reach(keyword)));
                    } else if let Some(keyword) = static_keyword(MAP_SCHEMA_KEYWORDS, key) {
                        let base = pointer_push(&pointer, key);
                        for (name, entry) in sub {
                            if let Value::Object(entry) = entry {
                                children.push((
                                    entry,
                                    pointer_push(&base, name),
                                    child_reach(keyword),
                                ));
                            }
                        }
                    }
                }
                Value::Array(list) => {
                    if let Some(keyword) = static_keyword(LIST_SCHEMA_KEYWORDS, key) {
                        let base = pointer_push(&pointer, key);
                        for (index, entry) in list.iter().enumerate() {
                            if let Value::Object(entry) = entry {
                                children.push((
                                    entry,
                                    pointer_push(&base, &index.to_string()),
                                    child_reach(keyword),
                                ));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        // Reversed, so the stack visits children in document order.
        stack.extend(children.into_iter().rev());
    }

    Ok(found.into_iter().map(|(param, _)| param).collect())
}

fn check_annotation(
    schema: &Map<String, Value>,
    annotation: &Value,
    pointer: &str,
    path: Vec<String>,
) -> Result<ParamHeader, SchemaHeaderError> {
    let location = || escape(pointer);
    let Value::String(name) = annotation else {
        return Err(SchemaHeaderError::NotAString {
            location: location(),
            found: json_kind(annotation),
        });
    };
    if name.is_empty() {
        return Err(SchemaHeaderError::Empty {
            location: location(),
        });
    }
    if name.chars().any(char::is_control) {
        return Err(SchemaHeaderError::ControlCharacter {
            location: location(),
            name: escape(name),
        });
    }
    if let Some(bad) = name.chars().find(|&c| !is_tchar(c)) {
        return Err(SchemaHeaderError::NotAToken {
            location: location(),
            name: escape(name),
            character: escape(&bad.to_string()),
        });
    }
    let kind = match schema.get("type") {
        None => {
            return Err(SchemaHeaderError::MissingType {
                location: location(),
                name: name.clone(),
            });
        }
        Some(Value::String(t)) if t == "integer" => ParamKind::Integer,
        Some(Value::String(t)) if t == "string" => ParamKind::String,
        Some(Value::String(t)) if t == "boolean" => ParamKind::Boolean,
        Some(other) => {
            return Err(SchemaHeaderError::UnsupportedType {
                location: location(),
                name: name.clone(),
                found: escape(&other.to_string()),
            });
        }
    };
    // A token is a valid header name, and so is the prefix before it.
    let header =
        HeaderName::from_bytes(format!("{MCP_PARAM_PREFIX}{name}").as_bytes()).map_err(|_| {
            SchemaHeaderError::NotAToken {
                location: location(),
                name: escape(name),
                character: String::new(),
            }
        })?;
    Ok(ParamHeader {
        name: name.clone(),
        header,
        path,
        kind,
    })
}

// ---------------------------------------------------------------------------------------------
// Building and checking the headers of a request
// ---------------------------------------------------------------------------------------------

/// The body field `Mcp-Name` mirrors for `method`: the key in `params` and its label.
fn name_source(method: &str) -> Option<(&'static str, &'static str)> {
    match method {
        "tools/call" | "prompts/get" => Some(("name", "params.name")),
        "resources/read" => Some(("uri", "params.uri")),
        // The tasks extension (io.modelcontextprotocol/tasks) routes these by task id.
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some(("taskId", "params.taskId")),
        _ => None,
    }
}

pub(crate) fn meta_protocol_version(params: Option<&Value>) -> Option<&str> {
    params?.get("_meta")?.get(META_PROTOCOL_VERSION)?.as_str()
}

fn argument<'a>(params: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    argument_in(params?.get("arguments"), path)
}

/// The argument at `path` inside `arguments`, unless absent or `null`.
fn argument_in<'a>(arguments: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    let mut current = arguments?;
    for segment in path {
        current = current.as_object()?.get(segment)?;
    }
    Some(current).filter(|v| !v.is_null())
}

/// The text of a primitive argument: strings as they are, booleans as `true`/`false`, integers
/// (also integral floats such as `42.0`) in decimal, other numbers as JSON writes them. `Err`
/// carries the JSON type of an array or object, which no header can carry.
fn argument_text(value: &Value) -> Result<String, &'static str> {
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

/// A float that holds an integer small enough for `i64`, as that integer.
fn integral_f64(n: &Number) -> Option<i64> {
    // 2^63: every integral f64 below it in magnitude converts exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    let f = n.as_f64()?;
    (f.is_finite() && f.fract() == 0.0 && f.abs() < LIMIT).then_some(f as i64)
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
/// * `Mcp-Param-{Name}` for each of `param_headers` (the called tool's, from [`param_headers`])
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
        let Some(value) = argument(params, &param.path) else {
            continue;
        };
        let text = argument_text(value).map_err(|found| RequestHeaderError::NotMirrorable {
            header: param.display_header(),
            field: param.body_field(),
            found,
        })?;
        headers.push((param.header.clone(), encoded_header_value(&text)));
    }
    Ok(headers)
}

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
fn decoded_text(raw: &HeaderValue, label: &str) -> Result<String, HeaderMismatch> {
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
/// * For each of `param_headers` (pass the called tool's, from [`param_headers`], for
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
        fn text(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
            serde_json::from_str::<Cow<'_, str>>(raw?.get()).ok()
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
    let header = single_header(headers, param.header.as_str(), &label)?;
    let body = argument_in(arguments, &param.path);
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

// ---------------------------------------------------------------------------------------------
// Numeric comparison
// ---------------------------------------------------------------------------------------------

/// An exact decimal: `(-1)^negative × digits × 10^exponent`, with `digits` free of leading and
/// trailing zeros, and zero written as `(false, "", 0)`. Equal numbers are equal values.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

impl Decimal {
    /// Parses `[+-]digits[.digits][(e|E)[+-]digits]`; `None` for anything else.
    fn parse(text: &str) -> Option<Decimal> {
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        let (int_part, frac_part) = match mantissa.split_once('.') {
            Some((int_part, frac_part)) => (int_part, frac_part),
            None => (mantissa, ""),
        };
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(int_part) || (mantissa.contains('.') && !all_digits(frac_part)) {
            return None;
        }
        let exponent: i64 = match exponent {
            None => 0,
            Some(e) => {
                let magnitude = e.strip_prefix(['+', '-']).unwrap_or(e);
                // Nine significant digits keep the arithmetic below far from overflow.
                let significant = magnitude.trim_start_matches('0');
                if !all_digits(magnitude) || significant.len() > 9 {
                    return None;
                }
                e.parse().ok()?
            }
        };
        let frac_len = i64::try_from(frac_part.len()).ok()?;
        Some(Decimal::normalize(
            negative,
            format!("{int_part}{frac_part}"),
            exponent - frac_len,
        ))
    }

    fn normalize(negative: bool, digits: String, exponent: i64) -> Decimal {
        let digits = digits.trim_start_matches('0');
        let trimmed = digits.trim_end_matches('0');
        if trimmed.is_empty() {
            return Decimal {
                negative: false,
                digits: String::new(),
                exponent: 0,
            };
        }
        let zeros = i64::try_from(digits.len() - trimmed.len()).unwrap_or(i64::MAX);
        Decimal {
            negative,
            digits: trimmed.to_owned(),
            exponent: exponent.saturating_add(zeros),
        }
    }

    fn from_integer(value: i128) -> Decimal {
        Decimal::normalize(value < 0, value.unsigned_abs().to_string(), 0)
    }
}

/// Whether header text names the same number as the body: exactly for integers (`042` and `42.0`
/// match `42`), by `f64` value for fractions.
fn number_matches(text: &str, body: &Number) -> bool {
    let Some(header) = Decimal::parse(text) else {
        return false;
    };
    let integer = body
        .as_i64()
        .map(i128::from)
        .or_else(|| body.as_u64().map(i128::from))
        .or_else(|| integral_f64(body).map(i128::from));
    match integer {
        Some(integer) => header == Decimal::from_integer(integer),
        None => body
            .as_f64()
            .is_some_and(|f| text.parse::<f64>().is_ok_and(|h| h == f)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn headers_of(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn to_map(pairs: Vec<(HeaderName, HeaderValue)>) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name, value);
        }
        map
    }

    fn as_strings(pairs: &[(HeaderName, HeaderValue)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    // --- constants ------------------------------------------------------------------------

    #[test]
    fn header_name_constants() {
        assert_eq!(MCP_PROTOCOL_VERSION, "MCP-Protocol-Version");
        assert_eq!(MCP_SESSION_ID, "Mcp-Session-Id");
        assert_eq!(MCP_METHOD, "Mcp-Method");
        assert_eq!(MCP_NAME, "Mcp-Name");
        assert_eq!(MCP_PARAM_PREFIX, "Mcp-Param-");
        assert_eq!(LAST_EVENT_ID, "Last-Event-ID");
        assert_eq!(X_MCP_HEADER, "x-mcp-header");
        for name in [
            MCP_PROTOCOL_VERSION,
            MCP_SESSION_ID,
            MCP_METHOD,
            MCP_NAME,
            LAST_EVENT_ID,
        ] {
            assert!(HeaderName::from_bytes(name.as_bytes()).is_ok(), "{name}");
        }
    }

    // --- encode_value / decode_value ------------------------------------------------------

    #[test]
    fn encode_matches_the_spec_examples() {
        assert_eq!(encode_value("us-west1"), "us-west1");
        assert_eq!(
            encode_value("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(encode_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encode_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            encode_value("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
    }

    #[test]
    fn encode_keeps_plain_values_plain() {
        for plain in [
            "",
            "us west 1",
            "file:///projects/myapp/config.json",
            "a!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~z",
            "=?base64?",
            "=?base64?abc",
            "abc?=",
            "=?BASE64?SGk=?=",
        ] {
            assert_eq!(encode_value(plain), plain, "{plain:?}");
        }
    }

    #[test]
    fn encode_wraps_unsafe_values() {
        for unsafe_value in [
            " leading",
            "trailing ",
            "\tindented",
            "in\tside",
            "cr\rlf\n",
            "line1\r\nline2",
            "nul\0",
            "del\u{7f}",
            "é",
            "😀",
            "=?base64?=",
            "=?base64??=",
            "=?base64?SGk=?=",
        ] {
            let encoded = encode_value(unsafe_value);
            assert!(
                encoded.starts_with("=?base64?") && encoded.ends_with("?="),
                "{unsafe_value:?}"
            );
            assert!(HeaderValue::from_str(&encoded).is_ok());
            assert_eq!(decode_value(&encoded).unwrap(), unsafe_value);
        }
    }

    #[test]
    fn round_trips() {
        for value in [
            "",
            "plain",
            "Hello, 世界",
            "  both  ",
            " ",
            "\u{0}\u{1}\u{1f}\u{7f}\u{80}\u{9f}",
            "tab\there",
            "a\r\nb",
            "=?base64?literal?=",
            "=?base64??=",
            "emoji 🦀 crab",
            "ünïcödé",
        ] {
            let encoded = encode_value(value);
            assert!(
                encoded.bytes().all(|b| (0x20..=0x7e).contains(&b)),
                "{encoded}"
            );
            assert_eq!(decode_value(&encoded).unwrap(), value, "{value:?}");
        }
    }

    #[test]
    fn decode_takes_literals_as_they_are() {
        assert_eq!(decode_value("us-west1").unwrap(), "us-west1");
        assert_eq!(decode_value("in\tside").unwrap(), "in\tside");
        // Missing suffix, missing prefix, uppercase markers: literals.
        assert_eq!(
            decode_value("=?base64?SGVsbG8=").unwrap(),
            "=?base64?SGVsbG8="
        );
        assert_eq!(decode_value("SGVsbG8=?=").unwrap(), "SGVsbG8=?=");
        assert_eq!(
            decode_value("=?BASE64?SGVsbG8=?=").unwrap(),
            "=?BASE64?SGVsbG8=?="
        );
        assert_eq!(decode_value("").unwrap(), "");
    }

    #[test]
    fn decode_reads_the_base64_form() {
        assert_eq!(decode_value("=?base64?SGVsbG8=?=").unwrap(), "Hello");
        assert_eq!(decode_value("=?base64??=").unwrap(), "");
        assert_eq!(
            decode_value("=?base64?SGVsbG8sIOS4lueVjA==?=").unwrap(),
            "Hello, 世界"
        );
    }

    #[test]
    fn decode_rejects_bad_base64() {
        for bad in [
            "=?base64?SGVsbG8?=",     // padding missing
            "=?base64?SGVs!!!bG8=?=", // not in the alphabet
            "=?base64?SGVsbG8==?=",   // too much padding
            "=?base64?_-8=?=",        // URL-safe alphabet
            "=?base64?SGVsbG9=?=",    // non-zero trailing bits
            "=?base64?SGVs bG8=?=",   // inner space
            "=?base64?=",             // markers overlap
        ] {
            assert!(
                matches!(
                    decode_value(bad),
                    Err(ValueDecodeError::InvalidBase64 { .. })
                ),
                "{bad}: {:?}",
                decode_value(bad)
            );
        }
    }

    #[test]
    fn decode_rejects_non_utf8_payloads() {
        assert_eq!(
            decode_value("=?base64?/w==?="),
            Err(ValueDecodeError::NotUtf8)
        );
        assert_eq!(
            decode_value("=?base64?wyg=?="),
            Err(ValueDecodeError::NotUtf8)
        );
    }

    #[test]
    fn decode_rejects_bytes_http_does_not_allow() {
        assert_eq!(
            decode_value("a\rb"),
            Err(ValueDecodeError::InvalidByte {
                position: 1,
                byte: b'\r'
            })
        );
        assert_eq!(
            decode_value("ab\n"),
            Err(ValueDecodeError::InvalidByte {
                position: 2,
                byte: b'\n'
            })
        );
        assert_eq!(
            decode_value("\0"),
            Err(ValueDecodeError::InvalidByte {
                position: 0,
                byte: 0
            })
        );
        assert_eq!(
            decode_value("x\u{7f}"),
            Err(ValueDecodeError::InvalidByte {
                position: 1,
                byte: 0x7f
            })
        );
        assert_eq!(
            decode_value("é"),
            Err(ValueDecodeError::InvalidByte {
                position: 0,
                byte: 0xc3
            })
        );
        // Also inside the base64 form.
        assert!(matches!(
            decode_value("=?base64?SGVs\nbG8=?="),
            Err(ValueDecodeError::InvalidByte { position: 13, .. })
        ));
    }

    #[test]
    fn escape_hides_control_characters_and_cuts() {
        assert_eq!(escape("a\r\nb\tc\u{1b}"), "a\\r\\nb\\tc\\u{1b}");
        assert_eq!(escape("\u{2028}"), "\\u{2028}");
        assert_eq!(escape("世界"), "世界");
        let long = "x".repeat(500);
        let shown = escape(&long);
        assert_eq!(shown.chars().count(), MAX_SHOWN_CHARS + 1);
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn trim_ows_strips_spaces_and_tabs_only() {
        assert_eq!(trim_ows(b"  a b \t"), b"a b");
        assert_eq!(trim_ows(b" \t "), b"");
        assert_eq!(trim_ows(b""), b"");
        assert_eq!(trim_ows(b"x"), b"x");
    }

    // --- param_headers ---------------------------------------------------------------------

    #[test]
    fn finds_the_spec_example() {
        let found = param_headers(&schema(json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "description": "The region", "x-mcp-header": "Region"},
                "query": {"type": "string"}
            },
            "required": ["region", "query"]
        })))
        .unwrap();
        assert_eq!(found.len(), 1);
        let region = &found[0];
        assert_eq!(region.name(), "Region");
        assert_eq!(region.header_name().as_str(), "mcp-param-region");
        assert_eq!(region.path(), ["region".to_owned()]);
        assert_eq!(region.kind(), ParamKind::String);
    }

    #[test]
    fn finds_all_three_kinds_and_nested_properties() {
        let found = param_headers(&schema(json!({
            "type": "object",
            "properties": {
                "priority": {"type": "integer", "x-mcp-header": "Priority"},
                "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
                "options": {
                    "type": "object",
                    "properties": {
                        "tenant": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string", "x-mcp-header": "Tenant-Id"}
                            }
                        }
                    }
                },
                "x-mcp-header": {"type": "string", "description": "a property with that name"}
            }
        })))
        .unwrap();
        let summary: Vec<_> = found
            .iter()
            .map(|p| (p.name().to_owned(), p.path().join("."), p.kind().as_str()))
            .collect();
        assert_eq!(summary.len(), 3);
        assert!(summary.contains(&("Priority".into(), "priority".into(), "integer")));
        assert!(summary.contains(&("Verbose".into(), "verbose".into(), "boolean")));
        assert!(summary.contains(&("Tenant-Id".into(), "options.tenant.id".into(), "string")));
    }

    #[test]
    fn accepts_every_tchar() {
        let name = "Az09!#$%&'*+-.^_`|~";
        let found = param_headers(&schema(json!({
            "type": "object",
            "properties": {"a": {"type": "string", "x-mcp-header": name}}
        })))
        .unwrap();
        assert_eq!(found[0].name(), name);
        assert_eq!(
            found[0].header_name().as_str(),
            "mcp-param-az09!#$%&'*+-.^_`|~"
        );
    }

    #[test]
    fn no_annotations_no_headers() {
        assert!(
            param_headers(&schema(json!({"type": "object"})))
                .unwrap()
                .is_empty()
        );
        assert!(
            param_headers(&schema(json!({
                "type": "object",
                "properties": {"a": true, "b": {"type": "string"}},
                "default": {"x-mcp-header": "NotASchema"},
                "examples": [{"x-mcp-header": "NotASchema"}],
                "const": {"x-mcp-header": "NotASchema"},
                "enum": [{"x-mcp-header": "NotASchema"}],
                "x-vendor": {"x-mcp-header": "UnknownKeyword"}
            })))
            .unwrap()
            .is_empty()
        );
    }

    fn single_property(property: Value) -> Result<Vec<ParamHeader>, SchemaHeaderError> {
        param_headers(&schema(
            json!({"type": "object", "properties": {"value": property}}),
        ))
    }

    #[test]
    fn rejects_an_empty_name() {
        assert_eq!(
            single_property(json!({"type": "string", "x-mcp-header": ""})),
            Err(SchemaHeaderError::Empty {
                location: "/properties/value".into()
            })
        );
    }

    #[test]
    fn rejects_a_name_that_is_not_a_string() {
        for (annotation, found) in [
            (json!(5), "a number"),
            (json!(null), "null"),
            (json!(true), "a boolean"),
            (json!(["A"]), "an array"),
            (json!({"A": 1}), "an object"),
        ] {
            assert_eq!(
                single_property(json!({"type": "string", "x-mcp-header": annotation})),
                Err(SchemaHeaderError::NotAString {
                    location: "/properties/value".into(),
                    found
                })
            );
        }
    }

    #[test]
    fn rejects_control_characters() {
        for name in ["Region\t1", "Region\r", "Re\ngion", "\u{7f}", "A\u{85}"] {
            let err = single_property(json!({"type": "string", "x-mcp-header": name})).unwrap_err();
            assert!(
                matches!(err, SchemaHeaderError::ControlCharacter { .. }),
                "{name:?}: {err}"
            );
            let message = err.to_string();
            assert!(!message.contains(['\r', '\n', '\t']), "{message}");
        }
    }

    #[test]
    fn rejects_names_that_are_not_tokens() {
        for (name, bad) in [
            ("My Region", " "),
            ("Region:Primary", ":"),
            ("Région", "é"),
            ("a\"b", "\""),
            ("a(b)", "("),
            ("a/b", "/"),
            ("a@b", "@"),
            ("a,b", ","),
            ("a{b}", "{"),
        ] {
            assert_eq!(
                single_property(json!({"type": "string", "x-mcp-header": name})),
                Err(SchemaHeaderError::NotAToken {
                    location: "/properties/value".into(),
                    name: name.into(),
                    character: bad.into(),
                }),
                "{name}"
            );
        }
    }

    #[test]
    fn rejects_duplicates_in_any_case() {
        for (first, second) in [("Region", "Region"), ("MyField", "myfield"), ("a", "A")] {
            let err = param_headers(&schema(json!({
                "type": "object",
                "properties": {
                    "field1": {"type": "string", "x-mcp-header": first},
                    "nested": {"type": "object", "properties": {
                        "field2": {"type": "string", "x-mcp-header": second}
                    }}
                }
            })))
            .unwrap_err();
            assert_eq!(
                err,
                SchemaHeaderError::Duplicate {
                    location: "/properties/nested/properties/field2".into(),
                    name: second.into(),
                    first_location: "/properties/field1".into(),
                    first_name: first.into(),
                }
            );
        }
    }

    #[test]
    fn rejects_types_other_than_integer_string_boolean() {
        for ty in [
            json!("number"),
            json!("object"),
            json!("array"),
            json!("null"),
            json!(["string", "null"]),
            json!(["integer"]),
            json!(7),
        ] {
            let err =
                single_property(json!({"type": ty.clone(), "x-mcp-header": "V"})).unwrap_err();
            assert_eq!(
                err,
                SchemaHeaderError::UnsupportedType {
                    location: "/properties/value".into(),
                    name: "V".into(),
                    found: ty.to_string(),
                }
            );
        }
        let number = single_property(json!({"type": "number", "x-mcp-header": "V"})).unwrap_err();
        assert!(number.to_string().contains("\"number\" is not"), "{number}");
    }

    #[test]
    fn rejects_a_property_without_type() {
        assert_eq!(
            single_property(json!({"x-mcp-header": "V", "$ref": "#/$defs/V"})),
            Err(SchemaHeaderError::MissingType {
                location: "/properties/value".into(),
                name: "V".into()
            })
        );
    }

    #[test]
    fn rejects_an_annotation_on_the_root() {
        assert_eq!(
            param_headers(&schema(json!({"type": "string", "x-mcp-header": "Root"}))),
            Err(SchemaHeaderError::OnRoot)
        );
    }

    #[test]
    fn rejects_annotations_not_reached_through_properties() {
        let leaf = json!({"type": "string", "x-mcp-header": "Deep"});
        let cases = [
            (json!({"items": leaf}), "/properties/p/items", "items"),
            (json!({"items": [leaf]}), "/properties/p/items/0", "items"),
            (
                json!({"prefixItems": [leaf]}),
                "/properties/p/prefixItems/0",
                "prefixItems",
            ),
            (
                json!({"contains": leaf}),
                "/properties/p/contains",
                "contains",
            ),
            (
                json!({"anyOf": [{"type": "null"}, leaf]}),
                "/properties/p/anyOf/1",
                "anyOf",
            ),
            (json!({"oneOf": [leaf]}), "/properties/p/oneOf/0", "oneOf"),
            (json!({"allOf": [leaf]}), "/properties/p/allOf/0", "allOf"),
            (json!({"not": leaf}), "/properties/p/not", "not"),
            (json!({"if": leaf}), "/properties/p/if", "if"),
            (json!({"then": leaf}), "/properties/p/then", "then"),
            (json!({"else": leaf}), "/properties/p/else", "else"),
            (
                json!({"$defs": {"d": leaf}}),
                "/properties/p/$defs/d",
                "$defs",
            ),
            (
                json!({"definitions": {"d": leaf}}),
                "/properties/p/definitions/d",
                "definitions",
            ),
            (
                json!({"additionalProperties": leaf}),
                "/properties/p/additionalProperties",
                "additionalProperties",
            ),
            (
                json!({"patternProperties": {"^a": leaf}}),
                "/properties/p/patternProperties/^a",
                "patternProperties",
            ),
            (
                json!({"dependentSchemas": {"a": leaf}}),
                "/properties/p/dependentSchemas/a",
                "dependentSchemas",
            ),
            (
                json!({"unevaluatedProperties": leaf}),
                "/properties/p/unevaluatedProperties",
                "unevaluatedProperties",
            ),
            (
                json!({"propertyNames": leaf}),
                "/properties/p/propertyNames",
                "propertyNames",
            ),
            // A properties chain below another keyword is still not static.
            (
                json!({"anyOf": [{"type": "object", "properties": {"q": leaf}}]}),
                "/properties/p/anyOf/0/properties/q",
                "anyOf",
            ),
        ];
        for (property, location, keyword) in cases {
            assert_eq!(
                param_headers(&schema(
                    json!({"type": "object", "properties": {"p": property}})
                )),
                Err(SchemaHeaderError::NotStaticallyReachable {
                    location: location.into(),
                    keyword
                }),
                "{location}"
            );
        }
        // At the root too.
        assert_eq!(
            param_headers(&schema(json!({"type": "object", "$defs": {"R": leaf}}))),
            Err(SchemaHeaderError::NotStaticallyReachable {
                location: "/$defs/R".into(),
                keyword: "$defs"
            })
        );
    }

    #[test]
    fn pointers_escape_tilde_and_slash() {
        let err = param_headers(&schema(json!({
            "type": "object",
            "properties": {"a/b~c": {"type": "number", "x-mcp-header": "X"}}
        })))
        .unwrap_err();
        assert!(
            matches!(&err, SchemaHeaderError::UnsupportedType { location, .. } if location == "/properties/a~1b~0c"),
            "{err:?}"
        );
    }

    #[test]
    fn schema_errors_name_the_reason() {
        let messages = [
            single_property(json!({"type": "string", "x-mcp-header": ""})),
            single_property(json!({"type": "string", "x-mcp-header": "A B"})),
            single_property(json!({"type": "number", "x-mcp-header": "A"})),
            single_property(
                json!({"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}),
            ),
        ]
        .map(|r| r.unwrap_err().to_string());
        assert!(messages[0].contains("empty"), "{}", messages[0]);
        assert!(messages[1].contains("token"), "{}", messages[1]);
        assert!(messages[2].contains("type \"number\""), "{}", messages[2]);
        assert!(messages[3].contains("\"items\""), "{}", messages[3]);
    }

    #[test]
    fn deep_schemas_do_not_overflow_the_stack() {
        const DEPTH: usize = 5_000;
        let mut leaf = json!({"type": "string", "x-mcp-header": "Deep"});
        for _ in 0..DEPTH {
            let mut properties = Map::new();
            properties.insert("n".to_owned(), leaf);
            let mut object = Map::new();
            object.insert("type".to_owned(), json!("object"));
            object.insert("properties".to_owned(), Value::Object(properties));
            leaf = Value::Object(object);
        }
        let found = param_headers(leaf.as_object().unwrap()).unwrap();
        assert_eq!(found[0].path().len(), DEPTH);
        // Dropping a Value recurses; leak this one so the test checks the walk alone.
        std::mem::forget(leaf);
    }

    // --- request_headers -------------------------------------------------------------------

    fn tool_headers() -> Vec<ParamHeader> {
        param_headers(&schema(json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "priority": {"type": "integer", "x-mcp-header": "Priority"},
                "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
                "method_val": {"type": "string", "x-mcp-header": "Method"},
                "greeting": {"type": "string", "x-mcp-header": "Greeting"},
                "options": {"type": "object", "properties": {
                    "tenant": {"type": "string", "x-mcp-header": "Tenant"}
                }},
                "query": {"type": "string"}
            }
        })))
        .unwrap()
    }

    fn call(arguments: Value) -> Value {
        json!({
            "name": "execute_sql",
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        })
    }

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

    #[test]
    fn body_field_labels() {
        let found = param_headers(&schema(json!({
            "type": "object",
            "properties": {"a b": {"type": "object", "properties": {"c\nd": {"type": "string", "x-mcp-header": "X"}}}}
        })))
        .unwrap();
        assert_eq!(
            found[0].body_field(),
            "params.arguments[\"a b\"][\"c\\nd\"]"
        );
    }

    #[test]
    fn decimal_parsing() {
        let d = |s| Decimal::parse(s);
        assert_eq!(d("42"), Some(Decimal::from_integer(42)));
        assert_eq!(d("-0.0"), Some(Decimal::from_integer(0)));
        assert_eq!(d("1.50"), d("15e-1"));
        assert_eq!(d("-1200"), d("-1.2e3"));
        for bad in [
            "", "-", "+", "1.", ".1", "1e", "1e+", "e5", "1..2", "1e5.0", "١٢", "1_000",
        ] {
            assert_eq!(d(bad), None, "{bad}");
        }
    }
}
