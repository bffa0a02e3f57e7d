//! What handlers are made of: the boxed future the registry stores, the erased work of one
//! request, the markers that tell handler shapes apart, the schemas derived from types, and
//! the scopes an item needs.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use modelctx_types::ErrorObject;

use crate::context::Context;

/// The OAuth scopes an item needs (`Tool::scopes` and the like), kept once when it is defined and handed out as a clone of the
/// `Arc` (`None`: none beyond authentication).
pub(crate) type Scopes = Option<Arc<[String]>>;

/// `scopes` as kept: in order, each once, empty ones dropped; none at all is `None`.
pub(crate) fn scopes<I>(scopes: I) -> Scopes
where
    I: IntoIterator,
    I::Item: Into<String>,
{
    let mut kept: Vec<String> = Vec::new();
    for scope in scopes {
        let scope = scope.into();
        if !scope.is_empty() && !kept.contains(&scope) {
            kept.push(scope);
        }
    }
    (!kept.is_empty()).then(|| Arc::from(kept))
}

/// A boxed future, as the registry stores handlers.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The work of a request that runs on its own task, given its context.
pub(crate) type Runner = Box<
    dyn FnOnce(Context) -> BoxFuture<Result<Box<serde_json::value::RawValue>, ErrorObject>>
        + Send
        + 'static,
>;

/// State the application gave the server ([`ServerBuilder::state`]), as a handler argument:
/// `async fn(State<S>, Args)` or `async fn(Context, State<S>, Args)`. Each call gets a clone
/// of the value (put what is shared in an `Arc`, a pool, a channel), as with axum's `State`.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// use modelctx_server::{NoArgs, Server, State, Tool};
///
/// #[derive(Clone, Default)]
/// struct App {
///     hits: Arc<AtomicU64>,
/// }
///
/// async fn hit(State(app): State<App>, _: NoArgs) -> String {
///     (app.hits.fetch_add(1, Ordering::Relaxed) + 1).to_string()
/// }
///
/// let server = Server::builder("counter", "1.0.0")
///     .state(App::default())
///     .tool(Tool::new("hit", hit))
///     .try_build()
///     .expect("the state the tools take is there");
/// # drop(server);
/// ```
///
/// [`ServerBuilder::state`]: crate::ServerBuilder::state
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State<S>(pub S);

impl<S> std::ops::Deref for State<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.0
    }
}

impl<S> std::ops::DerefMut for State<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.0
    }
}

/// A handler asked for state of a type the server was not given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the server has no state of type {type_name} (give it with ServerBuilder::state)")]
#[non_exhaustive]
pub struct MissingState {
    /// The type asked for.
    pub type_name: &'static str,
}

/// The state of a server, one value per type.
#[derive(Default)]
pub(crate) struct States(HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl std::fmt::Debug for States {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("States")
            .field("types", &self.0.len())
            .finish()
    }
}

impl States {
    /// Keeps `state`, replacing any earlier one of its type.
    pub(crate) fn insert<S: Clone + Send + Sync + 'static>(&mut self, state: S) {
        self.0.insert(TypeId::of::<S>(), Box::new(state));
    }

    /// A clone of the state of type `S`.
    pub(crate) fn get<S: Clone + 'static>(&self) -> Result<S, MissingState> {
        self.0
            .get(&TypeId::of::<S>())
            .and_then(|state| state.downcast_ref::<S>())
            .cloned()
            .ok_or(MissingState {
                type_name: std::any::type_name::<S>(),
            })
    }

    /// Whether there is state of the type `id`.
    pub(crate) fn has(&self, id: TypeId) -> bool {
        self.0.contains_key(&id)
    }
}

/// Implements a handler trait (`ToolHandler`, `PromptHandler`, `ResourceHandler`) for the four
/// shapes of async function the markers name. One body for every handler trait, so the shapes
/// cannot drift apart.
///
/// `handler_shapes!(Trait)`: the arguments are any type deserialized from JSON (`type Args`),
/// and the handler is `Clone` (tools, prompts). `handler_shapes!(Trait, Type)`: the arguments
/// are always `Type` (resources: a `ReadRequest`).
///
/// The impls put no bound on what the function's future resolves to (`type Output`): the
/// functions taking a handler bound it (`H::Output: IntoToolOutput`, ...). So a function of a
/// right shape returning a wrong type is still a handler, and the compiler's error is the
/// output trait's (`u32` cannot be the result of a tool, and what can) rather than a handler
/// trait refused as a whole. A function of no shape at all (not async, arguments in the wrong
/// order) is refused as a whole, with the handler trait's list of shapes.
macro_rules! handler_shapes {
    ($handler:ident) => {
        $crate::handler::handler_shapes!(
            @shapes $handler, [A], A, [type Args = A;], [Clone +],
            [A: ::serde::de::DeserializeOwned + Send + 'static,]
        );
    };
    ($handler:ident, $args:ty) => {
        $crate::handler::handler_shapes!(@shapes $handler, [], $args, [], [], []);
    };
    (
        @shapes $handler:ident, [$($a:ident)?], $args:ty, [$($assoc:tt)*], [$($extra:tt)*],
        [$($bound:tt)*]
    ) => {
        impl<F, Fut, $($a,)? R> $handler<($crate::handler::markers::ArgsOnly, $args)> for F
        where
            F: Fn($args) -> Fut + $($extra)* Send + Sync + 'static,
            Fut: ::std::future::Future<Output = R> + Send + 'static,
            $($bound)*
        {
            $($assoc)*
            type Output = R;
            fn call(
                &self,
                _context: $crate::context::Context,
                args: $args,
            ) -> Result<$crate::handler::BoxFuture<R>, $crate::handler::MissingState> {
                Ok(Box::pin((self)(args)))
            }
        }

        impl<F, Fut, $($a,)? R> $handler<($crate::handler::markers::WithContext, $args)> for F
        where
            F: Fn($crate::context::Context, $args) -> Fut + $($extra)* Send + Sync + 'static,
            Fut: ::std::future::Future<Output = R> + Send + 'static,
            $($bound)*
        {
            $($assoc)*
            type Output = R;
            fn call(
                &self,
                context: $crate::context::Context,
                args: $args,
            ) -> Result<$crate::handler::BoxFuture<R>, $crate::handler::MissingState> {
                Ok(Box::pin((self)(context, args)))
            }
        }

        impl<F, Fut, S, $($a,)? R> $handler<($crate::handler::markers::WithState, S, $args)> for F
        where
            F: Fn($crate::handler::State<S>, $args) -> Fut + $($extra)* Send + Sync + 'static,
            Fut: ::std::future::Future<Output = R> + Send + 'static,
            S: Clone + Send + Sync + 'static,
            $($bound)*
        {
            $($assoc)*
            type Output = R;
            fn call(
                &self,
                context: $crate::context::Context,
                args: $args,
            ) -> Result<$crate::handler::BoxFuture<R>, $crate::handler::MissingState> {
                let state = context.inner.state.get::<S>()?;
                Ok(Box::pin((self)($crate::handler::State(state), args)))
            }

            fn state_type() -> Option<(::std::any::TypeId, &'static str)> {
                Some((::std::any::TypeId::of::<S>(), ::std::any::type_name::<S>()))
            }
        }

        impl<F, Fut, S, $($a,)? R>
            $handler<($crate::handler::markers::WithContextAndState, S, $args)> for F
        where
            F: Fn($crate::context::Context, $crate::handler::State<S>, $args) -> Fut
                + $($extra)* Send
                + Sync
                + 'static,
            Fut: ::std::future::Future<Output = R> + Send + 'static,
            S: Clone + Send + Sync + 'static,
            $($bound)*
        {
            $($assoc)*
            type Output = R;
            fn call(
                &self,
                context: $crate::context::Context,
                args: $args,
            ) -> Result<$crate::handler::BoxFuture<R>, $crate::handler::MissingState> {
                let state = context.inner.state.get::<S>()?;
                Ok(Box::pin((self)(
                    context,
                    $crate::handler::State(state),
                    args,
                )))
            }

            fn state_type() -> Option<(::std::any::TypeId, &'static str)> {
                Some((::std::any::TypeId::of::<S>(), ::std::any::type_name::<S>()))
            }
        }
    };
}
pub(crate) use handler_shapes;

/// The markers that tell the handler shapes apart (`async fn(Args)`,
/// `async fn(Context, Args)`, and the two with `State<S>`). They are in a private module: nothing outside this crate can
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

    /// The marker of `async fn(State<S>, Args) -> R`.
    #[derive(Debug)]
    #[non_exhaustive]
    pub struct WithState;

    /// The marker of `async fn(Context, State<S>, Args) -> R`.
    #[derive(Debug)]
    #[non_exhaustive]
    pub struct WithContextAndState;
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

#[cfg(test)]
mod scope_tests {
    use super::*;

    #[test]
    fn scopes_are_kept_once_in_order() {
        let kept = scopes(["b", "a", "b", "", "c"]).unwrap();
        assert_eq!(&*kept, ["b", "a", "c"]);
        assert_eq!(scopes(Vec::<String>::new()), None);
        assert_eq!(scopes([""]), None);
    }
}
