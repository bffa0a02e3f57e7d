//! The `x-mcp-header` annotations of a tool's `inputSchema`, and the rules they must follow.

use std::fmt::Write as _;

use http::HeaderName;
use serde_json::{Map, Value};

use super::names::{MCP_PARAM_PREFIX, X_MCP_HEADER};
use super::value::escape;

/// The JSON type of a property marked with `x-mcp-header`: the only three the spec allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParamKind {
    /// `"type": "integer"`: mirrored as a decimal; values must stay within ±(2^53 − 1).
    Integer,
    /// `"type": "string"`: mirrored through [`encode_value`](super::encode_value).
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
    pub(super) fn display_header(&self) -> String {
        format!("{MCP_PARAM_PREFIX}{}", self.name)
    }

    /// `params.arguments.a.b`, with `["…"]` for names that are not plain identifiers.
    pub(super) fn body_field(&self) -> String {
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

pub(super) fn json_kind(value: &Value) -> &'static str {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::headers::test_util::schema;

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
}
