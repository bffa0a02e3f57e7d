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
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a prompt handler",
    note = "a prompt handler is an async fn of one of these shapes: `async fn(Args) -> R`, `async fn(Context, Args) -> R`, `async fn(State<S>, Args) -> R` or `async fn(Context, State<S>, Args) -> R`, where `Args: serde::Deserialize` (its fields are the prompt's string arguments), `S: Clone + Send + Sync + 'static` and `R: IntoPromptResult`"
)]
pub trait PromptHandler<M>: Clone + Send + Sync + 'static {
    /// The arguments.
    type Args: DeserializeOwned + Send + 'static;
    /// The result.
    type Output: IntoPromptResult;
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

crate::handler::handler_shapes!(PromptHandler, IntoPromptResult);

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
    /// ```
    #[cfg(feature = "schemars")]
    pub fn new<H, M>(name: impl Into<String>, handler: H) -> Self
    where
        H: PromptHandler<M>,
        H::Args: schemars::JsonSchema,
    {
        let schema = crate::handler::schema_of::<H::Args>();
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
        Prompt::with_arguments(name, arguments, handler)
    }

    /// A prompt with its arguments given by hand: `(name, description, required)`.
    pub fn with_arguments<H, M>(
        name: impl Into<String>,
        arguments: Vec<(String, Option<String>, bool)>,
        handler: H,
    ) -> Self
    where
        H: PromptHandler<M>,
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
                .map_err(|error| {
                    // -32021 is a 2026-07-28 error: legacy clients get -32603 with its message.
                    if !modern && error.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY {
                        ErrorObject::new(ErrorCode::INTERNAL_ERROR, error.message)
                    } else {
                        error
                    }
                })?;
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
