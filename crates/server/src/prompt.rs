//! Prompts with arguments, and completions of prompt arguments and template variables.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use modelctx_session::ProtocolVersion;
use modelctx_types::{ErrorCode, ErrorObject, JsonObject, model};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::complete::{Completer, completer};
use crate::context::Context;
use crate::handler::{BoxFuture, MissingState, Runner};
use crate::tool::Content;
use crate::wire::cursor::page;
use crate::wire::invalid_params;
use crate::wire::write;

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptMessage {
    role: model::Role,
    content: Content,
}

impl PromptMessage {
    /// A message from the user.
    pub fn user(content: impl Into<Content>) -> Self {
        PromptMessage {
            role: model::Role::User,
            content: content.into(),
        }
    }

    /// A message from the assistant.
    pub fn assistant(content: impl Into<Content>) -> Self {
        PromptMessage {
            role: model::Role::Assistant,
            content: content.into(),
        }
    }
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Content::text(text)
    }
}

impl From<String> for Content {
    fn from(text: String) -> Self {
        Content::text(text)
    }
}

/// What a prompt handler may return: messages, one text (a user message), or a `Result` of
/// these whose error becomes a JSON-RPC error (-32603; -32021 on modern requests for
/// [`InputError::NotSupported`], the client lacking a capability the prompt needs).
///
/// [`InputError::NotSupported`]: crate::InputError::NotSupported
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the result of a prompt",
    label = "`{Self}` is not a prompt result",
    note = "a prompt returns `Vec<PromptMessage>`, `PromptMessage`, `String`, or a `Result` of one of these whose error implements `Display`"
)]
pub trait IntoPromptResult: Send + 'static {
    /// The messages, or the error to answer with.
    fn into_messages(self) -> Result<Vec<PromptMessage>, ErrorObject>;
}

impl IntoPromptResult for Vec<PromptMessage> {
    fn into_messages(self) -> Result<Vec<PromptMessage>, ErrorObject> {
        Ok(self)
    }
}

impl IntoPromptResult for PromptMessage {
    fn into_messages(self) -> Result<Vec<PromptMessage>, ErrorObject> {
        Ok(vec![self])
    }
}

impl IntoPromptResult for String {
    fn into_messages(self) -> Result<Vec<PromptMessage>, ErrorObject> {
        Ok(vec![PromptMessage::user(self)])
    }
}

impl<T: IntoPromptResult, E: std::fmt::Display + Send + 'static> IntoPromptResult for Result<T, E> {
    fn into_messages(self) -> Result<Vec<PromptMessage>, ErrorObject> {
        match self {
            Ok(value) => value.into_messages(),
            Err(e) => match (&e as &dyn std::any::Any).downcast_ref() {
                Some(crate::InputError::NotSupported(capability)) => {
                    Err(crate::input::missing_capability(capability))
                }
                _ => Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, e.to_string())),
            },
        }
    }
}

/// An async function that renders a prompt: `async fn(Args) -> R`,
/// `async fn(Context, Args) -> R`, `async fn(State<S>, Args) -> R` or
/// `async fn(Context, State<S>, Args) -> R`, where `Args` deserializes from the prompt's
/// arguments (an object of strings), `S` is state given with
/// [`ServerBuilder::state`](crate::ServerBuilder::state), and `R: IntoPromptResult`.
///
/// Every function of these shapes is a `PromptHandler`, whatever `R` is: [`Prompt::new`] and
/// [`Prompt::with_arguments`] require `R: IntoPromptResult`, so that a handler returning
/// something else is named in the compiler's error with the types a prompt may return.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a prompt handler",
    label = "not a prompt handler",
    note = "a prompt handler is an async fn, or a closure returning a future (a plain `fn` is not one), of one of these shapes: `async fn(Args) -> R`, `async fn(Context, Args) -> R`, `async fn(State<S>, Args) -> R` or `async fn(Context, State<S>, Args) -> R`, where `Args: serde::Deserialize` (its fields are the prompt's string arguments), `S: Clone + Send + Sync + 'static` and `R: IntoPromptResult`; it must be `Clone + Send + Sync + 'static` and its future `Send`"
)]
pub trait PromptHandler<M>: Clone + Send + Sync + 'static {
    /// The arguments.
    type Args: DeserializeOwned + Send + 'static;
    /// What the handler's future resolves to (a prompt needs it to be [`IntoPromptResult`]).
    type Output;
    /// Renders the prompt.
    ///
    /// # Errors
    ///
    /// [`MissingState`] when the handler takes state of a type the server was not given.
    fn call(
        &self,
        context: Context,
        args: Self::Args,
    ) -> Result<BoxFuture<Self::Output>, MissingState>;

    /// The type of the state the handler takes, if it takes any: checked when the server is
    /// built (default: none).
    fn state_type() -> Option<(TypeId, &'static str)> {
        None
    }
}

crate::handler::handler_shapes!(PromptHandler);

type ErasedPrompt =
    Arc<dyn Fn(Context, Value) -> BoxFuture<Result<Vec<PromptMessage>, ErrorObject>> + Send + Sync>;

/// A prompt: its name, arguments and handler.
#[derive(Clone)]
pub struct Prompt {
    pub(crate) name: String,
    /// The definition `prompts/list` gives: name, arguments, description and title.
    pub(crate) definition: model::Prompt,
    handler: ErasedPrompt,
    pub(crate) completers: BTreeMap<String, Completer>,
    /// The type of the state the handler takes, if any.
    pub(crate) state: Option<(TypeId, &'static str)>,
    /// The scopes a `prompts/get` needs ([`Prompt::scopes`]); `None`: none.
    pub(crate) scopes: crate::handler::Scopes,
    /// An argument of the type [`Prompt::new`] was given that is never a string, and what it
    /// is instead: the prompt cannot be served.
    pub(crate) non_string: Option<NonString>,
}

/// An argument of a prompt's arguments type that can never be a string (its text is that of
/// `RegisterError::PromptArgument` after the prompt's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("argument {argument} is {found}, but prompt arguments are strings")]
pub(crate) struct NonString {
    /// The argument's name.
    pub(crate) argument: String,
    /// What its schema says it is instead (`of type integer`, `of type boolean or null`, ...).
    pub(crate) found: String,
}

impl std::fmt::Debug for Prompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompt")
            .field("name", &self.name)
            .field("arguments", &self.definition.arguments)
            .finish_non_exhaustive()
    }
}

impl Prompt {
    /// A prompt whose arguments are the fields of its arguments' type (their doc comments the
    /// descriptions; `Option` fields optional).
    ///
    /// Prompt arguments are strings on the wire, so each field's type must be one a string
    /// deserializes into: `String`, `Option<String>`, an enum of unit variants, a type that
    /// deserializes from any value. A type with a field that is never a string (a number, a
    /// `bool`, a `Vec`, a struct) is found here, from its derived schema, rather than by every
    /// `prompts/get` failing to decode it. As for a tool whose schema cannot be used, the
    /// prompt is then refused when it is registered: [`ServerBuilder::try_build`] and
    /// [`Server::add_prompt`] return [`RegisterError::PromptArgument`], naming the prompt and
    /// the argument, and [`ServerBuilder::build`] panics with its text. [`Prompt::with_arguments`], whose
    /// arguments are given by hand, checks nothing of the kind.
    ///
    /// [`ServerBuilder::try_build`]: crate::ServerBuilder::try_build
    /// [`ServerBuilder::build`]: crate::ServerBuilder::build
    /// [`Server::add_prompt`]: crate::Server::add_prompt
    /// [`RegisterError::PromptArgument`]: crate::RegisterError::PromptArgument
    ///
    /// ```
    /// use modelctx_server::{Prompt, PromptMessage};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Translate {
    ///     /// The text to translate.
    ///     text: String,
    ///     /// The language to translate into (optional).
    ///     to: Option<String>,
    /// }
    ///
    /// async fn translate(args: Translate) -> PromptMessage {
    ///     let to = args.to.unwrap_or_else(|| "French".into());
    ///     PromptMessage::user(format!("Translate into {to}:\n{}", args.text))
    /// }
    ///
    /// let prompt = Prompt::new("translate", translate)
    ///     .description("Translates a text")
    ///     .complete("to", |partial: String, _| async move {
    ///         ["French", "German"].iter().filter(|l| l.starts_with(&partial)).map(|l| l.to_string()).collect()
    ///     });
    /// assert_eq!(prompt.name(), "translate");
    ///
    /// // A count is not a string: this prompt is refused when the server is built.
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Repeat {
    ///     text: String,
    ///     times: u32,
    /// }
    ///
    /// async fn repeat(args: Repeat) -> String {
    ///     args.text.repeat(args.times as usize)
    /// }
    ///
    /// let refused = modelctx_server::Server::builder("s", "1.0.0")
    ///     .prompt(Prompt::new("repeat", repeat))
    ///     .try_build()
    ///     .unwrap_err();
    /// assert_eq!(
    ///     refused.to_string(),
    ///     "prompt repeat: argument times is of type integer, but prompt arguments are strings"
    /// );
    /// ```
    #[cfg(feature = "schemars")]
    pub fn new<H, M>(name: impl Into<String>, handler: H) -> Self
    where
        H: PromptHandler<M>,
        H::Args: schemars::JsonSchema,
        H::Output: IntoPromptResult,
    {
        let schema = crate::handler::schema_of::<H::Args>();
        let non_string = non_string_argument(&schema);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let arguments = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|properties| {
                properties
                    .iter()
                    .map(|(name, property)| {
                        let description = property
                            .get("description")
                            .and_then(Value::as_str)
                            .map(str::to_owned);
                        (name.clone(), description, required.contains(&name.as_str()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut prompt = Prompt::with_arguments(name, arguments, handler);
        prompt.non_string = non_string;
        prompt
    }

    /// A prompt with its arguments given by hand: `(name, description, required)`.
    pub fn with_arguments<H, M>(
        name: impl Into<String>,
        arguments: Vec<(String, Option<String>, bool)>,
        handler: H,
    ) -> Self
    where
        H: PromptHandler<M>,
        H::Output: IntoPromptResult,
    {
        let handler: ErasedPrompt = Arc::new(move |context, args| {
            let handler = handler.clone();
            Box::pin(async move {
                let args: H::Args = serde_json::from_value(args)
                    .map_err(|e| invalid_params(format!("invalid prompt arguments: {e}")))?;
                // Missing state is the server's fault (-32603).
                let rendered = handler
                    .call(context, args)
                    .map_err(|e| ErrorObject::new(ErrorCode::INTERNAL_ERROR, e.to_string()))?;
                rendered.await.into_messages()
            })
        });
        let name = name.into();
        let arguments: Vec<model::PromptArgument> = arguments
            .into_iter()
            .map(|(name, description, required)| model::PromptArgument {
                description,
                name,
                required: Some(required),
                title: None,
            })
            .collect();
        Prompt {
            definition: model::Prompt {
                meta: None,
                arguments: (!arguments.is_empty()).then_some(arguments),
                description: None,
                icons: None,
                name: name.clone(),
                title: None,
            },
            name,
            handler,
            completers: BTreeMap::new(),
            state: H::state_type(),
            scopes: None,
            non_string: None,
        }
    }

    /// The OAuth scopes a `prompts/get` of it needs (default: none beyond authentication);
    /// see [`Tool::scopes`](crate::Tool::scopes).
    pub fn scopes<I>(mut self, scopes: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.scopes = crate::handler::scopes(scopes);
        self
    }

    /// The description.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.definition.description = Some(text.into());
        self
    }

    /// The title, for people (2025-06-18 and later).
    pub fn title(mut self, text: impl Into<String>) -> Self {
        self.definition.title = Some(text.into());
        self
    }

    /// Completes argument `argument`: `complete(partial, other_arguments)` gives candidates
    /// (at most 100 are sent, with the total).
    pub fn complete<F, Fut>(mut self, argument: impl Into<String>, complete: F) -> Self
    where
        F: Fn(String, JsonObject) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<String>> + Send + 'static,
    {
        self.completers.insert(argument.into(), completer(complete));
        self
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// `prompts/list`.
pub(crate) fn list(
    prompts: &BTreeMap<String, Prompt>,
    version: ProtocolVersion,
    params: &JsonObject,
    page_size: usize,
) -> Result<Value, ErrorObject> {
    let (prompts, next) = page(prompts, params, page_size)?;
    let prompts = prompts
        .into_iter()
        .map(|p| write::prompt(p.definition.clone(), version))
        .collect::<Result<Vec<Value>, ErrorObject>>()?;
    let mut result = json!({ "prompts": prompts });
    if let Some(next) = next {
        result["nextCursor"] = Value::from(next);
    }
    Ok(result)
}

/// `prompts/get`.
pub(crate) fn get(
    prompts: &BTreeMap<String, Prompt>,
    params: JsonObject,
) -> Result<Runner, ErrorObject> {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err(invalid_params("prompts/get needs a name"));
    };
    let Some(prompt) = prompts.get(name).cloned() else {
        return Err(invalid_params(format!("unknown prompt: {name}")));
    };
    // A prompt whose arguments can never be strings is not here: registration refuses it
    // (`build` panics, `try_build` and `add_prompt` return `RegisterError::PromptArgument`).
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => JsonObject::new(),
        Some(Value::Object(arguments)) => arguments.clone(),
        Some(_) => return Err(invalid_params("the arguments must be an object")),
    };
    for argument in prompt.definition.arguments.iter().flatten() {
        if argument.required == Some(true) && !arguments.contains_key(&argument.name) {
            return Err(invalid_params(format!(
                "missing required argument: {}",
                argument.name
            )));
        }
    }
    Ok(Box::new(move |context| {
        Box::pin(async move {
            let version = context.protocol_version();
            let modern = context.inner.modern;
            let messages = (prompt.handler)(context, Value::Object(arguments))
                .await
                .map_err(|error| crate::wire::for_era(error, modern))?;
            let description = prompt.definition.description.clone();
            let messages = messages
                .into_iter()
                .map(|m| model::PromptMessage {
                    content: m.content.0,
                    role: m.role,
                })
                .collect();
            write::prompt_result(description, messages, version)
        })
    }))
}

/// The first argument of a prompt's derived arguments schema that can never be a string (prompt
/// arguments are strings on the wire), in the order of the schema's properties; then, for a map
/// type, its values (`additionalProperties`). `None`: every argument may be a string.
#[cfg(feature = "schemars")]
fn non_string_argument(schema: &JsonObject) -> Option<NonString> {
    let properties = schema.get("properties").and_then(Value::as_object);
    let others = schema
        .get("additionalProperties")
        .map(|values| ("(any other argument)", values));
    properties
        .into_iter()
        .flatten()
        .map(|(name, property)| (name.as_str(), property))
        .chain(others)
        .find(|(_, property)| !admits_string(property, schema, 0))
        .map(|(argument, property)| NonString {
            argument: argument.to_owned(),
            found: describe_type(property, schema),
        })
}

/// How deep `$ref`s and combinators are followed; deeper (a recursive type) is taken as
/// admitting a string, so that nothing is refused for want of looking.
#[cfg(feature = "schemars")]
const MAX_DEPTH: usize = 32;

/// The subschema a local `$ref` (`#/$defs/Name`, `#/definitions/Name`) of `root` names.
#[cfg(feature = "schemars")]
fn resolve<'a>(reference: &str, root: &'a JsonObject) -> Option<&'a Value> {
    let (defs, name) = reference
        .strip_prefix("#/$defs/")
        .map(|name| ("$defs", name))
        .or_else(|| {
            reference
                .strip_prefix("#/definitions/")
                .map(|name| ("definitions", name))
        })?;
    root.get(defs)?.get(name)
}

/// Whether some string is valid against `schema` as far as its `$ref`, `type`, `const`,
/// `enum`, `anyOf`, `oneOf` and `allOf` tell (what schemars derives from serde types);
/// anything else is taken as admitting one.
#[cfg(feature = "schemars")]
fn admits_string(schema: &Value, root: &JsonObject, depth: usize) -> bool {
    let object = match schema {
        Value::Object(object) => object,
        Value::Bool(admits) => return *admits,
        _ => return true,
    };
    if depth > MAX_DEPTH {
        return true;
    }
    let referenced = object
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|reference| resolve(reference, root));
    if referenced.is_some_and(|target| !admits_string(target, root, depth + 1)) {
        return false;
    }
    let typed = match object.get("type") {
        Some(Value::String(name)) => name == "string",
        Some(Value::Array(names)) => names.iter().any(|name| name == "string"),
        _ => true,
    };
    let constant = object.get("const").is_none_or(Value::is_string);
    let enumerated = match object.get("enum") {
        Some(Value::Array(values)) => values.iter().any(Value::is_string),
        _ => true,
    };
    let any_of = |key: &str| match object.get(key) {
        Some(Value::Array(branches)) => branches
            .iter()
            .any(|branch| admits_string(branch, root, depth + 1)),
        _ => true,
    };
    let all_of = match object.get("allOf") {
        Some(Value::Array(branches)) => branches
            .iter()
            .all(|branch| admits_string(branch, root, depth + 1)),
        _ => true,
    };
    typed && constant && enumerated && any_of("anyOf") && any_of("oneOf") && all_of
}

/// What a schema that admits no string is, for people: its `type` (`integer`, `integer or
/// null`), through a `$ref`; the types of its `anyOf`/`oneOf` branches; else what it is not.
#[cfg(feature = "schemars")]
fn describe_type(schema: &Value, root: &JsonObject) -> String {
    let mut schema = schema;
    for _ in 0..MAX_DEPTH {
        match schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|reference| resolve(reference, root))
        {
            Some(target) => schema = target,
            None => break,
        }
    }
    let names = |value: &Value| -> Vec<String> {
        match value.get("type") {
            Some(Value::String(name)) => vec![name.clone()],
            Some(Value::Array(names)) => names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        }
    };
    let mut found = names(schema);
    if found.is_empty() {
        for key in ["anyOf", "oneOf"] {
            for branch in schema
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let branch = branch
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|reference| resolve(reference, root))
                    .unwrap_or(branch);
                for name in names(branch) {
                    if !found.contains(&name) {
                        found.push(name);
                    }
                }
            }
        }
    }
    if found.is_empty() {
        "a type that is never a string".to_owned()
    } else {
        format!("of type {}", found.join(" or "))
    }
}

#[cfg(all(test, feature = "schemars"))]
mod tests {
    use super::*;

    fn non_string(schema: Value) -> Option<(String, String)> {
        let Value::Object(schema) = schema else {
            panic!("not an object")
        };
        non_string_argument(&schema).map(|n| (n.argument, n.found))
    }

    fn found(argument: &str, found: &str) -> Option<(String, String)> {
        Some((argument.to_owned(), found.to_owned()))
    }

    #[test]
    fn arguments_that_admit_a_string_are_kept() {
        let schema = json!({
            "type": "object",
            "properties": {
                "plain": {"type": "string"},
                "optional": {"type": ["string", "null"]},
                "untyped": {},
                "anything": true,
                "named": {"$ref": "#/$defs/Tone"},
                "either": {"anyOf": [{"$ref": "#/$defs/Tone"}, {"type": "null"}]},
                "variants": {"oneOf": [{"const": "a"}, {"const": "b", "type": "string"}]},
                "both": {"allOf": [{"type": "string"}, {"minLength": 1}]},
                "number_or_text": {"type": ["integer", "string"]},
                "some_text": {"enum": [1, "one"]},
                "unresolvable": {"$ref": "https://example.com/s.json"},
                "recursive": {"$ref": "#/$defs/Loop"},
            },
            "$defs": {
                "Tone": {"type": "string", "enum": ["formal", "casual"]},
                "Loop": {"$ref": "#/$defs/Loop"},
            },
        });
        assert_eq!(non_string(schema), None);
    }

    #[test]
    fn the_first_argument_that_is_never_a_string_is_named_with_its_type() {
        let never = [
            (json!({"type": "integer"}), "of type integer"),
            (
                json!({"type": ["boolean", "null"]}),
                "of type boolean or null",
            ),
            (json!({"$ref": "#/$defs/Point"}), "of type object"),
            (
                json!({"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}]}),
                "of type object or null",
            ),
            (json!({"const": 3}), "a type that is never a string"),
            (json!({"enum": [1, 2]}), "a type that is never a string"),
            (json!(false), "a type that is never a string"),
            (
                json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
                "a type that is never a string",
            ),
            (
                json!({"oneOf": [{"type": "integer"}, {"type": "array"}]}),
                "of type integer or array",
            ),
        ];
        for (property, what) in never {
            let schema = json!({
                "type": "object",
                "properties": {"a": {"type": "string"}, "b": property, "c": {"type": "integer"}},
                "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}},
            });
            assert_eq!(non_string(schema), found("b", what), "{what}");
        }
        let map = json!({"type": "object", "additionalProperties": {"type": "number"}});
        assert_eq!(
            non_string(map),
            found("(any other argument)", "of type number")
        );
    }
}
