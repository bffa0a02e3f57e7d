//! Validation glue of tool calls: the violations of tool arguments as one text for the model.
//!
//! The validation itself (the bounded cache of compiled schemas, the size, depth and `$ref`
//! rules) is [`modelctx_types::schema`], shared with the client.

use modelctx_types::schema::Violation;

/// Formats violations as one text for an `isError` tool result, e.g. "invalid arguments: /count:
/// 5 is greater than the maximum of 3; /name: required property missing". A violation of the
/// arguments object itself (path `""`) is given without a path.
pub(crate) fn describe(violations: &[Violation]) -> String {
    let mut text = String::from("invalid arguments");
    for (i, violation) in violations.iter().enumerate() {
        text.push_str(if i == 0 { ": " } else { "; " });
        text.push_str(&violation.to_string());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use modelctx_types::schema::{SchemaCache, SchemaLimits};
    use serde_json::{Value, json};

    /// The violations of `value` against `schema`, sorted by path.
    fn violations(schema: Value, value: Value) -> Vec<Violation> {
        let cache = SchemaCache::new(SchemaLimits::default());
        let validator = cache.validator(schema.as_object().unwrap()).unwrap();
        let mut violations = validator.validate(&value, 10);
        violations.sort_by(|a, b| a.path.cmp(&b.path));
        violations
    }

    #[test]
    fn describe_joins_the_violations_for_a_tool_error() {
        let schema = json!({
            "type": "object",
            "properties": {"count": {"maximum": 3}},
            "required": ["name"]
        });
        assert_eq!(
            describe(&violations(schema.clone(), json!({"count": 5}))),
            "invalid arguments: /count: 5 is greater than the maximum of 3; \
             /name: required property missing"
        );
        assert_eq!(
            describe(&violations(schema, json!([]))),
            r#"invalid arguments: [] is not of type "object""#
        );
        assert_eq!(describe(&[]), "invalid arguments");
    }
}
