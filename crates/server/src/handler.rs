//! What handlers are made of: the boxed future the registry stores, the erased work of one
//! request, the markers that tell handler shapes apart, and the schemas derived from types.

use std::future::Future;
use std::pin::Pin;

use modelctx_types::ErrorObject;
use serde_json::Value;

use crate::context::Context;

/// A boxed future, as the registry stores handlers.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The work of a request that runs on its own task, given its context.
pub(crate) type Runner =
    Box<dyn FnOnce(Context) -> BoxFuture<Result<Value, ErrorObject>> + Send + 'static>;

/// The markers that tell the handler shapes apart (`async fn(Args)` and
/// `async fn(Context, Args)`). They are in a private module: nothing outside this crate can
/// name them, so no one else can implement the handler traits for a shape of their own, and
/// the shapes may grow without breaking anyone (like axum's `T` of `Handler<T, S>`).
pub(crate) mod markers {
    /// The marker of `async fn(Args) -> R`.
    #[derive(Debug)]
    #[non_exhaustive]
    pub struct ArgsOnly;

    /// The marker of `async fn(Context, Args) -> R`.
    #[derive(Debug)]
    #[non_exhaustive]
    pub struct WithContext;
}

/// The JSON Schema of `T`, as a tool schema: without `$schema` (some clients reject it), and
/// without the formats schemars invents for Rust's number types (`uint32`, `double`, ...),
/// which JSON Schema does not define and validators warn about; the ranges stay as `minimum`
/// and `maximum`.
#[cfg(feature = "schemars")]
pub(crate) fn schema_of<T: schemars::JsonSchema>() -> modelctx_types::JsonObject {
    let schema = schemars::schema_for!(T);
    let mut value = serde_json::to_value(schema).unwrap_or_default();
    drop_unknown_formats(&mut value);
    let mut object = match value {
        serde_json::Value::Object(object) => object,
        _ => modelctx_types::JsonObject::new(),
    };
    object.remove("$schema");
    object
}

/// The formats JSON Schema 2020-12 defines.
#[cfg(feature = "schemars")]
const FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Removes `format` keywords with values JSON Schema does not define, from every subschema
/// (never from a map of names to subschemas, where `format` would be a property's name).
#[cfg(feature = "schemars")]
fn drop_unknown_formats(schema: &mut serde_json::Value) {
    use serde_json::Value;
    // (value, whether it is a schema rather than a map of names to schemas)
    let mut stack: Vec<(&mut Value, bool)> = vec![(schema, true)];
    while let Some((value, is_schema)) = stack.pop() {
        match value {
            Value::Object(object) => {
                if is_schema
                    && object
                        .get("format")
                        .and_then(Value::as_str)
                        .is_some_and(|f| !FORMATS.contains(&f))
                {
                    object.remove("format");
                }
                for (key, child) in object.iter_mut() {
                    let child_is_schema = !(is_schema
                        && matches!(
                            key.as_str(),
                            "properties"
                                | "$defs"
                                | "definitions"
                                | "patternProperties"
                                | "dependentSchemas"
                        ));
                    let data = is_schema
                        && matches!(key.as_str(), "const" | "enum" | "default" | "examples");
                    if !data {
                        stack.push((child, child_is_schema));
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    stack.push((item, true));
                }
            }
            _ => {}
        }
    }
}

#[cfg(all(test, feature = "schemars"))]
mod tests {
    #[test]
    fn derived_schemas_lose_invented_formats_and_keep_properties_named_format() {
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Args {
            count: u32,
            ratio: f64,
            format: String,
            when: Option<String>,
            nested: Vec<Inner>,
        }
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Inner {
            size: i64,
        }
        let schema = serde_json::Value::Object(super::schema_of::<Args>());
        let text = schema.to_string();
        assert!(
            !text.contains("uint32") && !text.contains("int64") && !text.contains("double"),
            "{text}"
        );
        assert!(schema["properties"]["format"].is_object(), "{text}");
        assert_eq!(schema["properties"]["count"]["minimum"], 0);
        assert!(schema.get("$schema").is_none());
    }
}
