//! Tools: a definition and an async function with typed arguments.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

#[cfg(feature = "validation")]
use modelctx_types::schema::{SchemaError, Validator};
use modelctx_types::{ErrorObject, JsonObject, ProtocolVersion, model};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
#[cfg(test)]
use serde_json::json;
use serde_json::value::RawValue;

use crate::context::Context;
use crate::handler::{BoxFuture, MissingState};

/// One content block of a result (text, image, audio, a resource link or an embedded
/// resource): the model's [`ContentBlock`](model::ContentBlock), written for each client's
/// protocol version (blocks a version lacks become text that says what they were).
#[derive(Debug, Clone, PartialEq)]
pub struct Content(pub(crate) model::ContentBlock);

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Content(crate::wire::write::text(text.into()))
    }

    /// An image block: base64 `data` of type `mime_type`.
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Content(model::ContentBlock::ImageContent(model::ImageContent {
            meta: None,
            annotations: None,
            data: data.into(),
            mime_type: mime_type.into(),
        }))
    }

    /// An audio block (2025-03-26 and later; older clients get a text note instead).
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Content(model::ContentBlock::AudioContent(model::AudioContent {
            meta: None,
            annotations: None,
            data: data.into(),
            mime_type: mime_type.into(),
        }))
    }

    /// A link to a resource (2025-06-18 and later; older clients get its URI as text).
    pub fn resource_link(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Content(model::ContentBlock::ResourceLink(model::ResourceLink {
            meta: None,
            annotations: None,
            description: None,
            icons: None,
            mime_type: None,
            name: name.into(),
            size: None,
            title: None,
            uri: uri.into(),
        }))
    }

    /// An embedded text resource.
    pub fn embedded_text(uri: impl Into<String>, text: impl Into<String>) -> Self {
        Content(model::ContentBlock::EmbeddedResource(
            model::EmbeddedResource {
                meta: None,
                annotations: None,
                resource: model::EmbeddedResourceResource::TextResourceContents(
                    model::TextResourceContents {
                        meta: None,
                        mime_type: None,
                        text: text.into(),
                        uri: uri.into(),
                    },
                ),
            },
        ))
    }

    /// A block from its JSON, as the newest protocol version (2026-07-28) defines a
    /// `ContentBlock`: the escape hatch for JSON at hand. Prefer the constructors, or a
    /// [`model::ContentBlock`] (`Content::from`), which the compiler checks.
    ///
    /// # Errors
    ///
    /// The JSON is not a content block.
    pub fn from_json(block: Value) -> Result<Self, serde_json::Error> {
        let block: modelctx_types::v2026_07_28::ContentBlock = serde_json::from_value(block)?;
        Ok(Content(block.into()))
    }

    /// The block.
    pub fn block(&self) -> &model::ContentBlock {
        &self.0
    }
}

impl From<model::ContentBlock> for Content {
    fn from(block: model::ContentBlock) -> Self {
        Content(block)
    }
}

impl From<Content> for model::ContentBlock {
    fn from(content: Content) -> Self {
        content.0
    }
}

/// What a tool call produced, before it is written for the client's protocol version.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ToolOutput {
    /// The content blocks.
    pub content: Vec<Content>,
    /// The structured result (`structuredContent`), checked against the output schema.
    pub structured: Option<Value>,
    /// Whether the call failed (`isError`): the text tells the model what went wrong.
    pub is_error: bool,
    /// The result's `_meta`, written as given (default: none).
    pub meta: Option<JsonObject>,
    /// The client capability the call failed for lack of ([`InputError::NotSupported`]
    /// returned by the handler): modern requests get the -32021 error instead of the result.
    ///
    /// [`InputError::NotSupported`]: crate::InputError::NotSupported
    pub(crate) missing_capability: Option<String>,
    /// The JSON-RPC error the call is answered with instead of a result
    /// ([`ToolOutput::protocol_error`]).
    pub(crate) protocol_error: Option<ProtocolError>,
}

/// The JSON-RPC error of a [`ToolOutput`], equal to another of the same code, message and
/// `data` text (`ErrorObject` has no `PartialEq`).
#[derive(Debug, Clone)]
pub(crate) struct ProtocolError(pub(crate) ErrorObject);

impl PartialEq for ProtocolError {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&self.0, &other.0);
        a.code == b.code
            && a.message == b.message
            && a.data.as_ref().map(|d| d.get()) == b.data.as_ref().map(|d| d.get())
    }
}

impl ToolOutput {
    /// A result of these blocks.
    pub fn new(content: Vec<Content>) -> Self {
        ToolOutput {
            content,
            structured: None,
            is_error: false,
            meta: None,
            missing_capability: None,
            protocol_error: None,
        }
    }

    /// A failed call: the text tells the model what went wrong (a tool execution error, not a
    /// protocol error).
    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            content: vec![Content::text(text)],
            structured: None,
            is_error: true,
            meta: None,
            missing_capability: None,
            protocol_error: None,
        }
    }

    /// A structured result, with its serialized JSON as the text block (for clients that do not
    /// read `structuredContent`).
    pub fn structured(value: Value) -> Self {
        let text = value.to_string();
        ToolOutput {
            content: vec![Content::text(text)],
            structured: Some(value),
            is_error: false,
            meta: None,
            missing_capability: None,
            protocol_error: None,
        }
    }

    /// A call answered with the JSON-RPC error `error` instead of a result, in every protocol
    /// era: a protocol error, not a failed call the model reads ([`ToolOutput::error`] is that);
    /// but a -32021 (missing client capability, of the 2026-07-28 era) reaches a client of an
    /// older era as a failed call with the error's message, as a capability the server finds
    /// missing itself does.
    /// A call that runs as a task ends `failed` with it. For a front passing on another
    /// server's protocol error (a gateway); a tool's own failures are better told with
    /// [`ToolOutput::error`]. The content is the error's message (for logs), never sent.
    pub fn protocol_error(error: ErrorObject) -> Self {
        ToolOutput {
            content: vec![Content::text(error.message.clone())],
            structured: None,
            is_error: true,
            meta: None,
            missing_capability: None,
            protocol_error: Some(ProtocolError(error)),
        }
    }
}

/// A result as a server sent it (a gateway passing on another server's answer): its content,
/// `structuredContent`, `isError` and `_meta`, unchanged; members no version defines (`extra`)
/// are not kept.
impl From<model::CallToolResult> for ToolOutput {
    fn from(result: model::CallToolResult) -> Self {
        ToolOutput {
            content: result.content.into_iter().map(Content).collect(),
            structured: result.structured_content,
            is_error: result.is_error == Some(true),
            meta: result.meta,
            missing_capability: None,
            protocol_error: None,
        }
    }
}

/// What a tool handler may return.
///
/// Text (`String`, `&'static str`), content ([`Content`], `Vec<Content>`), a whole
/// [`ToolOutput`], a structured result ([`Json`]), or a `Result` of any of these whose error is
/// shown to the model as a failed call. The error [`InputError::NotSupported`] (the client
/// lacks a capability the tool needs) is the exception on modern requests, which the protocol
/// answers with its `MissingRequiredClientCapability` error (-32021).
///
/// [`InputError::NotSupported`]: crate::InputError::NotSupported
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the result of a tool",
    label = "`{Self}` is not a tool result",
    note = "a tool returns `String`, `&'static str`, `Content`, `Vec<Content>`, `ToolOutput`, `Json<T>` (T: Serialize), or a `Result` of one of these whose error implements `Display`"
)]
pub trait IntoToolOutput: Send + 'static {
    /// The result.
    fn into_output(self) -> ToolOutput;

    /// The output schema that results of this type follow, if any (from [`Json`]).
    fn output_schema() -> Option<JsonObject> {
        None
    }
}

impl IntoToolOutput for ToolOutput {
    fn into_output(self) -> ToolOutput {
        self
    }
}

impl IntoToolOutput for String {
    fn into_output(self) -> ToolOutput {
        ToolOutput::new(vec![Content::text(self)])
    }
}

impl IntoToolOutput for &'static str {
    fn into_output(self) -> ToolOutput {
        ToolOutput::new(vec![Content::text(self)])
    }
}

impl IntoToolOutput for Content {
    fn into_output(self) -> ToolOutput {
        ToolOutput::new(vec![self])
    }
}

impl IntoToolOutput for Vec<Content> {
    fn into_output(self) -> ToolOutput {
        ToolOutput::new(self)
    }
}

impl<T: IntoToolOutput, E: std::fmt::Display + Send + 'static> IntoToolOutput for Result<T, E> {
    fn into_output(self) -> ToolOutput {
        match self {
            Ok(output) => output.into_output(),
            Err(error) => {
                let mut output = ToolOutput::error(error.to_string());
                if let Some(crate::InputError::NotSupported(capability)) =
                    (&error as &dyn std::any::Any).downcast_ref()
                {
                    output.missing_capability = Some(capability.clone());
                }
                output
            }
        }
    }

    fn output_schema() -> Option<JsonObject> {
        T::output_schema()
    }
}

/// A structured tool result: `structuredContent` plus its JSON as text. With the `schemars`
/// feature, the tool's output schema is derived from `T`.
///
/// ```
/// use modelctx_server::{Json, Tool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add {
///     a: f64,
///     b: f64,
/// }
///
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Sum {
///     sum: f64,
/// }
///
/// async fn add(args: Add) -> Json<Sum> {
///     Json(Sum { sum: args.a + args.b })
/// }
///
/// // The output schema is Sum's; every result is checked against it before it is sent.
/// let tool = Tool::new("add", add);
/// # let _ = tool;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

#[cfg(feature = "schemars")]
impl<T: Serialize + schemars::JsonSchema + Send + 'static> IntoToolOutput for Json<T> {
    fn into_output(self) -> ToolOutput {
        structured(&self.0)
    }

    fn output_schema() -> Option<JsonObject> {
        Some(crate::handler::schema_of::<T>())
    }
}

#[cfg(not(feature = "schemars"))]
impl<T: Serialize + Send + 'static> IntoToolOutput for Json<T> {
    fn into_output(self) -> ToolOutput {
        structured(&self.0)
    }
}

fn structured<T: Serialize>(value: &T) -> ToolOutput {
    match serde_json::to_value(value) {
        Ok(value) => ToolOutput::structured(value),
        Err(e) => ToolOutput::error(format!("the tool's result cannot be serialized: {e}")),
    }
}

/// Arguments of a tool that takes none: `{}` (or anything) is accepted.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct NoArgs {}

/// An async function that can handle a tool call: `async fn(A) -> R`,
/// `async fn(Context, A) -> R`, `async fn(State<S>, A) -> R` or
/// `async fn(Context, State<S>, A) -> R`, where `A` is the arguments (a `Deserialize` type, an
/// object), `S` state given with [`ServerBuilder::state`](crate::ServerBuilder::state), and `R`
/// implements [`IntoToolOutput`]. `M` only tells the shapes apart. A closure returning a future
/// is a handler too; its arguments need their types written (`|args: Args| async move { .. }`).
///
/// Every function of these shapes is a `ToolHandler`, whatever `R` is: [`Tool::new`] and
/// [`Tool::with_input_schema`] require `R: IntoToolOutput`, so that a handler returning
/// something else is named in the compiler's error with the types a tool may return.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tool handler",
    label = "not a tool handler",
    note = "a tool handler is an async fn, or a closure returning a future (a plain `fn` is not one), of one of these shapes: `async fn(Args) -> R`, `async fn(Context, Args) -> R`, `async fn(State<S>, Args) -> R` or `async fn(Context, State<S>, Args) -> R`, where `Args: serde::Deserialize` (use `NoArgs` for none), `S: Clone + Send + Sync + 'static` and `R: IntoToolOutput`; it must be `Clone + Send + Sync + 'static` and its future `Send`"
)]
pub trait ToolHandler<M>: Clone + Send + Sync + 'static {
    /// The arguments.
    type Args: DeserializeOwned + Send + 'static;
    /// What the handler's future resolves to (a tool needs it to be [`IntoToolOutput`]).
    type Output;
    /// Runs the tool.
    ///
    /// # Errors
    ///
    /// [`MissingState`] when the handler takes state of a type the server was not given.
    fn call(
        &self,
        context: Context,
        args: Self::Args,
    ) -> Result<BoxFuture<Self::Output>, MissingState>;

    /// The type of the state the handler takes, if it takes any: checked when the tool is
    /// registered (default: none).
    fn state_type() -> Option<(TypeId, &'static str)> {
        None
    }
}

crate::handler::handler_shapes!(ToolHandler);

/// The arguments of one call, as routing found them: the raw text of `arguments` when the params
/// were read straight from the message, or a value when they had to be parsed whole first.
#[derive(Debug)]
pub(crate) enum Arguments {
    /// The text of `arguments`, not parsed yet.
    Raw(Box<RawValue>),
    /// `arguments` parsed (`{}` when the call gave none).
    Parsed(Value),
}

impl Arguments {
    /// Whether the arguments are a JSON object (the text of one, for [`Arguments::Raw`]).
    #[cfg(not(feature = "validation"))]
    fn is_object(&self) -> bool {
        match self {
            Arguments::Raw(raw) => raw.get().trim_start().starts_with('{'),
            Arguments::Parsed(value) => value.is_object(),
        }
    }
}

/// A handler with its types erased: takes the arguments as JSON, decoded into its own type
/// once, from their text when it is at hand. Arguments that do not decode are a failed call
/// the model can read; missing state is the server's fault (-32603).
pub(crate) type ErasedTool =
    Arc<dyn Fn(Context, Arguments) -> BoxFuture<Result<ToolOutput, ErrorObject>> + Send + Sync>;

fn erase<H, M>(handler: H) -> ErasedTool
where
    H: ToolHandler<M>,
    H::Output: IntoToolOutput,
{
    Arc::new(move |context, args| {
        let handler = handler.clone();
        Box::pin(async move {
            let args: Result<H::Args, _> = match args {
                Arguments::Raw(raw) => serde_json::from_str(raw.get()),
                Arguments::Parsed(value) => serde_json::from_value(value),
            };
            let args = match args {
                Ok(args) => args,
                Err(e) => return Ok(ToolOutput::error(format!("invalid arguments: {e}"))),
            };
            let running = handler
                .call(context, args)
                .map_err(|e| crate::wire::internal(e.to_string()))?;
            Ok(running.await.into_output())
        })
    })
}

/// A tool as the registry holds it: registered once, behind an `Arc`, with its schemas
/// compiled and its `Mcp-Param-*` header rules derived, so that a call clones neither the
/// tool nor does any of that again.
pub(crate) struct Registered {
    pub(crate) tool: Tool,
    /// The compiled input schema, or why it cannot be used.
    #[cfg(feature = "validation")]
    input: Result<Validator, SchemaError>,
    /// The compiled output schema, if the tool has one, or why it cannot be used.
    #[cfg(feature = "validation")]
    output: Option<Result<Validator, SchemaError>>,
    /// The `x-mcp-header` parameters of the input schema (`None` when the schema's
    /// annotations are not usable, and the calls are then not checked against headers).
    /// Shared: the HTTP endpoint's check of each modern call clones the `Arc`.
    #[cfg(feature = "http")]
    pub(crate) param_headers: Option<Arc<[modelctx_http::headers::ParamHeader]>>,
    /// The definition `tools/list` gives in each version (in the order of
    /// [`ProtocolVersion::ALL`]), or why it cannot be written in that version: written once,
    /// by the first list in that version (a server that never serves a version never runs its
    /// writing code, whose pages would count in its memory). A tool changes only by being
    /// registered again, which starts these afresh.
    definitions: Vec<OnceLock<Result<Box<RawValue>, ErrorObject>>>,
    /// The chain of the tool's layers ([`Tool::layer`]), built once for this registration.
    pub(crate) layers: Option<crate::middleware::Chain>,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl Registered {
    /// Registers `tool`: its schemas compiled through `schemas` (bounded by its limits), its
    /// header rules derived.
    pub(crate) fn new(
        tool: Tool,
        #[cfg(feature = "validation")] schemas: &modelctx_types::schema::SchemaCache,
    ) -> Self {
        let definitions = ProtocolVersion::ALL
            .iter()
            .map(|_| OnceLock::new())
            .collect();
        Registered {
            definitions,
            layers: tool.layers.build(),
            #[cfg(feature = "validation")]
            input: schemas.validator(&tool.input_schema),
            #[cfg(feature = "validation")]
            output: tool.output_schema.as_ref().map(|s| schemas.validator(s)),
            #[cfg(feature = "http")]
            param_headers: modelctx_http::headers::param_headers(&tool.input_schema)
                .ok()
                .map(Arc::from),
            tool,
        }
    }

    /// The tool's definition in `version`, written the first time it is asked for.
    pub(crate) fn definition(&self, version: ProtocolVersion) -> Result<&RawValue, ErrorObject> {
        let at = ProtocolVersion::ALL.iter().position(|v| *v == version);
        let Some(slot) = at.and_then(|at| self.definitions.get(at)) else {
            return Err(crate::wire::internal(format!(
                "no tool definition for {}",
                version.as_str()
            )));
        };
        let written = slot.get_or_init(|| {
            crate::wire::write::tool(&self.tool, version).and_then(|d| crate::wire::raw(&d))
        });
        match written {
            Ok(definition) => Ok(definition),
            Err(error) => Err(error.clone()),
        }
    }

    /// Why one of the tool's schemas cannot be used, if one cannot.
    #[cfg(feature = "validation")]
    pub(crate) fn unusable(&self) -> Option<&SchemaError> {
        self.input
            .as_ref()
            .err()
            .or_else(|| self.output.as_ref().and_then(|o| o.as_ref().err()))
    }
}

/// `tools/list`: one page of the tools, written for `version`.
pub(crate) fn list(
    tools: &BTreeMap<String, Arc<Registered>>,
    version: ProtocolVersion,
    params: &JsonObject,
    page_size: usize,
) -> Result<Box<RawValue>, ErrorObject> {
    /// A page of `tools/list`: the definitions' text is copied as it was written.
    #[derive(serde::Serialize)]
    struct Page<'a> {
        tools: Vec<&'a RawValue>,
        #[serde(rename = "nextCursor", skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
    }
    let (tools, next) = crate::wire::cursor::page(tools, params, page_size)?;
    let tools = tools
        .into_iter()
        .map(|t| t.definition(version))
        .collect::<Result<_, _>>()?;
    crate::wire::raw(&Page {
        tools,
        next_cursor: next,
    })
}

/// The most violations shown to the model for one call.
#[cfg(feature = "validation")]
const MAX_VIOLATIONS: usize = 8;

/// Runs a tool call: arguments checked, the handler run, its result checked and written for
/// `version`.
pub(crate) async fn call(
    registered: Arc<Registered>,
    arguments: Arguments,
    context: Context,
) -> Result<Box<RawValue>, ErrorObject> {
    use crate::wire::write::tool_output;
    let version = context.protocol_version();
    let modern = context.inner.modern;
    let tool = &registered.tool;
    // Validation reads a value: the arguments are parsed into one here, and the handler's type
    // is then decoded from their text (from the value only when there is no text: params that
    // had to be parsed whole). Without validation the handler decodes its type from the text
    // straight away.
    #[cfg(feature = "validation")]
    let arguments = {
        let (value, raw) = match arguments {
            Arguments::Raw(raw) => (
                serde_json::from_str::<Value>(raw.get())
                    .map_err(|e| crate::wire::invalid_params(format!("invalid params: {e}")))?,
                Some(raw),
            ),
            Arguments::Parsed(value) => (value, None),
        };
        if !value.is_object() {
            return tool_output(&not_an_object(), version);
        }
        let validator = registered.input.as_ref().map_err(|e| {
            crate::wire::internal(format!(
                "the input schema of tool {} is not usable: {e}",
                tool.name
            ))
        })?;
        let violations = validator.validate(&value, MAX_VIOLATIONS);
        if !violations.is_empty() {
            // A tool execution error: the model can read it and try again.
            let text = crate::wire::schema::describe(&violations);
            return tool_output(&ToolOutput::error(text), version);
        }
        // The handler's type is decoded from the text when there is one (borrowing from it),
        // not from the value: cheaper than taking the value's tree apart.
        match raw {
            Some(raw) => Arguments::Raw(raw),
            None => Arguments::Parsed(value),
        }
    };
    #[cfg(not(feature = "validation"))]
    if !arguments.is_object() {
        return tool_output(&not_an_object(), version);
    }
    let mut output = (tool.handler)(context, arguments).await?;
    if let Some(ProtocolError(error)) = output.protocol_error.take() {
        // An error the client's era has no code for (-32021): it is told of a capability it
        // lacks as the server tells it of its own (below), by a failed call with the message.
        if crate::wire::unknown_to_era(&error, modern) {
            return tool_output(&output, version);
        }
        return Err(error);
    }
    if let (true, Some(capability)) = (modern, &output.missing_capability) {
        return Err(crate::input::missing_capability(capability));
    }
    #[cfg(feature = "validation")]
    if let (Some(validator), Some(structured), false) =
        (&registered.output, &output.structured, output.is_error)
    {
        let validator = validator.as_ref().map_err(|e| {
            crate::wire::internal(format!(
                "the output schema of tool {} is not usable: {e}",
                tool.name
            ))
        })?;
        let violations = validator.validate(structured, MAX_VIOLATIONS);
        if !violations.is_empty() {
            let text = crate::wire::schema::describe(&violations);
            return Err(crate::wire::internal(format!(
                "the result of tool {} does not match its output schema: {}",
                tool.name,
                text.trim_start_matches("invalid arguments")
                    .trim_start_matches(": ")
            )));
        }
    }
    tool_output(&output, version)
}

/// The failed call of arguments that are not an object.
fn not_an_object() -> ToolOutput {
    ToolOutput::error("invalid arguments: the arguments must be a JSON object")
}

/// A tool: its definition (name, schemas, description, ...) and its handler.
#[derive(Clone)]
pub struct Tool {
    pub(crate) name: String,
    pub(crate) definition: JsonObject,
    pub(crate) annotations: Option<model::ToolAnnotations>,
    pub(crate) icons: Option<Vec<model::Icon>>,
    /// The type of the state the handler takes, if any.
    pub(crate) state: Option<(TypeId, &'static str)>,
    pub(crate) input_schema: JsonObject,
    pub(crate) output_schema: Option<JsonObject>,
    pub(crate) handler: ErasedTool,
    /// The scopes a call needs ([`Tool::scopes`]); `None`: none.
    pub(crate) scopes: crate::handler::Scopes,
    /// Whether the tool runs as a task ([`Tool::task_support`]).
    pub(crate) task_support: crate::tasks::TaskSupport,
    /// Whether the handler becomes a task only when it calls `Context::detach`.
    pub(crate) task_on_detach: bool,
    /// [`Tool::layer`]'s layers.
    pub(crate) layers: crate::middleware::Stack,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("definition", &self.definition)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// A tool whose input schema is derived from its arguments' type (and, for a [`Json`]
    /// result, its output schema from the result's type).
    ///
    /// The handler is `async fn(Args) -> R` or `async fn(Context, Args) -> R` (see
    /// [`ToolHandler`] and [`IntoToolOutput`]); a closure returning a future works as well.
    ///
    /// A handler runs on its connection's driver until it first waits (one that never waits is
    /// answered there, without a task of its own), then on its own task: it must not block, or
    /// the other requests of its connection wait too. Run blocking or long computing work with
    /// `tokio::task::spawn_blocking`.
    ///
    /// ```
    /// use modelctx_server::Tool;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Weather {
    ///     /// The city (its doc comment is the description in the input schema).
    ///     city: String,
    ///     /// Celsius unless false (optional, as an `Option`).
    ///     celsius: Option<bool>,
    /// }
    ///
    /// async fn weather(args: Weather) -> Result<String, String> {
    ///     match args.city.as_str() {
    ///         "Paris" => Ok(format!("sunny, {}", if args.celsius == Some(false) { "68F" } else { "20C" })),
    ///         // A failed call (`isError`): the model reads the text.
    ///         other => Err(format!("no weather for {other}")),
    ///     }
    /// }
    ///
    /// let tool = Tool::new("weather", weather)
    ///     .title("Weather")
    ///     .description("The weather in a city")
    ///     .annotations(modelctx_server::model::ToolAnnotations {
    ///         destructive_hint: None,
    ///         idempotent_hint: None,
    ///         open_world_hint: Some(true),
    ///         read_only_hint: Some(true),
    ///         title: None,
    ///     });
    ///
    /// // State is captured by a closure.
    /// let greeting = std::sync::Arc::new(String::from("hello"));
    /// let greet = Tool::new("greet", move |_: modelctx_server::NoArgs| {
    ///     let greeting = greeting.clone();
    ///     async move { greeting.to_string() }
    /// });
    /// # let _ = (tool, greet);
    /// ```
    #[cfg(feature = "schemars")]
    pub fn new<H, M>(name: impl Into<String>, handler: H) -> Self
    where
        H: ToolHandler<M>,
        H::Args: schemars::JsonSchema,
        H::Output: IntoToolOutput,
    {
        let schema = crate::handler::schema_of::<H::Args>();
        Tool::with_input_schema(name, schema, handler)
    }

    /// A tool with an input schema given by hand (a JSON Schema object of `"type": "object"`).
    ///
    /// ```
    /// use modelctx_server::Tool;
    ///
    /// let schema = serde_json::json!({
    ///     "type": "object",
    ///     "properties": {"text": {"type": "string"}},
    ///     "required": ["text"],
    /// });
    /// let schema = schema.as_object().cloned().expect("an object");
    /// let tool = Tool::with_input_schema("echo", schema, |args: serde_json::Value| async move {
    ///     args["text"].as_str().unwrap_or_default().to_owned()
    /// });
    /// # let _ = tool;
    /// ```
    pub fn with_input_schema<H, M>(
        name: impl Into<String>,
        input_schema: JsonObject,
        handler: H,
    ) -> Self
    where
        H: ToolHandler<M>,
        H::Output: IntoToolOutput,
    {
        let name = name.into();
        Tool {
            scopes: None,
            task_support: crate::tasks::TaskSupport::Forbidden,
            task_on_detach: false,
            layers: crate::middleware::Stack::default(),
            definition: JsonObject::new(),
            annotations: None,
            icons: None,
            state: H::state_type(),
            input_schema,
            output_schema: <H::Output as IntoToolOutput>::output_schema(),
            handler: erase(handler),
            name,
        }
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.definition.insert(key.into(), value);
        self
    }

    /// The description, for the model.
    pub fn description(self, text: impl Into<String>) -> Self {
        self.set("description", Value::from(text.into()))
    }

    /// The title, for people (2025-06-18 and later).
    pub fn title(self, text: impl Into<String>) -> Self {
        self.set("title", Value::from(text.into()))
    }

    /// The annotations (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`,
    /// `title`; 2025-03-26 and later, each version given what it defines).
    pub fn annotations(mut self, annotations: model::ToolAnnotations) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// Icons (2025-11-25 and later).
    pub fn icons(mut self, icons: Vec<model::Icon>) -> Self {
        self.icons = Some(icons);
        self
    }

    /// Replaces the output schema (a JSON Schema; an object schema for clients before
    /// 2026-07-28).
    pub fn output_schema(mut self, schema: JsonObject) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Writes `"$schema"` (JSON Schema 2020-12) into the input and output schemas. Derived
    /// schemas leave it out by default: some clients reject a schema that names its dialect,
    /// and 2020-12 is what MCP assumes without one.
    pub fn schema_dialect(mut self) -> Self {
        const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";
        self.input_schema
            .entry("$schema")
            .or_insert_with(|| Value::from(DIALECT));
        if let Some(output) = &mut self.output_schema {
            output
                .entry("$schema")
                .or_insert_with(|| Value::from(DIALECT));
        }
        self
    }

    /// The OAuth scopes a call needs (default: none beyond authentication). They apply over
    /// Streamable HTTP with a guard ([`ServerBuilder::auth`](crate::ServerBuilder::auth)):
    /// the transport answers a caller whose token lacks one 403 (`insufficient_scope`), and
    /// the server checks again before the handler runs. Over stdio they do not apply (nobody
    /// is authenticated there).
    ///
    /// ```
    /// use modelctx_server::{NoArgs, Tool};
    ///
    /// async fn rm(_: NoArgs) -> &'static str {
    ///     "removed"
    /// }
    ///
    /// let tool = Tool::new("rm", rm).scopes(["files:write"]);
    /// # let _ = tool;
    /// ```
    pub fn scopes<I>(mut self, scopes: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.scopes = crate::handler::scopes(scopes);
        self
    }

    /// Whether the tool runs as a task (default [`TaskSupport::Forbidden`]): see
    /// [`tasks`](crate::tasks). With [`TaskSupport::Optional`] or [`TaskSupport::Required`],
    /// a 2026-07-28 client that declares the tasks extension gets a task
    /// (`CreateTaskResult`) and polls it, while the same handler runs with its questions,
    /// progress and cancellation going through the task; a client without the extension calls
    /// an optional tool as any other, and is refused a required one (-32021).
    ///
    /// ```
    /// use modelctx_server::tasks::TaskSupport;
    /// use modelctx_server::{Context, Tool};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Render {
    ///     frames: u32,
    /// }
    ///
    /// async fn render(context: Context, args: Render) -> String {
    ///     for frame in 1..=args.frames {
    ///         if context.is_cancelled() {
    ///             return "cancelled".into();
    ///         }
    ///         // As a task: the task's statusMessage ("3/10").
    ///         let _ = context.progress(f64::from(frame), Some(f64::from(args.frames)), None).await;
    ///     }
    ///     format!("{} frames rendered", args.frames)
    /// }
    ///
    /// let tool = Tool::new("render", render).task_support(TaskSupport::Optional);
    /// # let _ = tool;
    /// ```
    ///
    /// [`TaskSupport::Forbidden`]: crate::tasks::TaskSupport::Forbidden
    /// [`TaskSupport::Optional`]: crate::tasks::TaskSupport::Optional
    /// [`TaskSupport::Required`]: crate::tasks::TaskSupport::Required
    pub fn task_support(mut self, support: crate::tasks::TaskSupport) -> Self {
        self.task_support = support;
        self
    }

    /// For a tool of [`task_support`](Self::task_support) `Optional` or `Required`: called by
    /// a client that supports tasks, the handler runs as a plain call first, asking its
    /// questions by round trips (`input_required`, the handler run again from the start with
    /// the answers), and becomes a task when it calls [`Context::detach`]: the call is then
    /// answered with the task, and the rest of the handler runs as it. A handler that returns
    /// without detaching answers the call as a plain one.
    ///
    /// [`Context::detach`]: crate::Context::detach
    pub fn task_on_detach(mut self) -> Self {
        self.task_on_detach = true;
        self
    }

    /// Adds a `tower` layer around the calls of this tool (`tools/call` naming it), inside the
    /// server's layers ([`ServerBuilder::layer`]); see [`middleware`](crate::middleware). Each
    /// call wraps the layers added before it. The chain is built when the tool is registered,
    /// and shared by all its calls from then on: a `RateLimitLayer` here limits this tool
    /// alone. A tool called as a task goes through it once, when the task is created.
    /// Default: no layer.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use modelctx_server::{NoArgs, Tool};
    ///
    /// async fn search(_: NoArgs) -> &'static str {
    ///     "results"
    /// }
    ///
    /// // Ten calls a second; the others wait their turn.
    /// let tool = Tool::new("search", search)
    ///     .layer(tower::limit::RateLimitLayer::new(10, Duration::from_secs(1)));
    /// # drop(tool);
    /// ```
    ///
    /// [`ServerBuilder::layer`]: crate::ServerBuilder::layer
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: crate::middleware::Layer<crate::middleware::Handlers> + Send + Sync + 'static,
        L::Service: crate::middleware::Service<
                crate::middleware::McpRequest,
                Response = crate::middleware::McpResponse,
            > + Send
            + 'static,
        <L::Service as crate::middleware::Service<crate::middleware::McpRequest>>::Error:
            Into<crate::middleware::BoxError>,
        <L::Service as crate::middleware::Service<crate::middleware::McpRequest>>::Future:
            Send + 'static,
    {
        self.layers.push(layer);
        self
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn noop(_: Value) -> &'static str {
        ""
    }

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(object) => object,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn tools_list_pages_are_the_definitions_written_once_per_version() {
        #[cfg(feature = "validation")]
        let cache = modelctx_types::schema::SchemaCache::new(Default::default());
        let mut output = JsonObject::new();
        output.insert("type".into(), json!("integer"));
        let tools: BTreeMap<String, Arc<Registered>> = ["a", "b", "c"]
            .into_iter()
            .map(|name| {
                let tool = Tool::with_input_schema(name, JsonObject::new(), noop)
                    .title("T")
                    .description("d")
                    .annotations(model::ToolAnnotations {
                        destructive_hint: None,
                        idempotent_hint: None,
                        open_world_hint: None,
                        read_only_hint: Some(true),
                        title: None,
                    })
                    .output_schema(output.clone());
                let registered = Registered::new(
                    tool,
                    #[cfg(feature = "validation")]
                    &cache,
                );
                (name.to_owned(), Arc::new(registered))
            })
            .collect();
        for &version in ProtocolVersion::ALL {
            // What every page was before: each definition written for the version per list.
            let expected: Vec<Value> = tools
                .values()
                .map(|t| crate::wire::write::tool(&t.tool, version).unwrap())
                .collect();
            let first = list(&tools, version, &JsonObject::new(), 2).unwrap();
            let first: Value = serde_json::from_str(first.get()).unwrap();
            assert_eq!(first["tools"], json!(expected[..2]), "{version:?}");
            let mut params = JsonObject::new();
            params.insert("cursor".into(), first["nextCursor"].clone());
            let second = list(&tools, version, &params, 2).unwrap();
            let second: Value = serde_json::from_str(second.get()).unwrap();
            assert_eq!(second, json!({"tools": expected[2..]}), "{version:?}");
            // Written by the first list, then only copied.
            let a = &tools["a"];
            let first = a.definition(version).unwrap();
            assert!(std::ptr::eq(first, a.definition(version).unwrap()));
        }
    }

    #[test]
    fn content_is_the_models_block_and_its_json_is_checked() {
        assert!(Content::from_json(json!({"type": "video", "data": ""})).is_err());
        assert!(Content::from_json(json!({"type": "text"})).is_err());
        let text = Content::from_json(json!({"type": "text", "text": "hi"})).unwrap();
        assert_eq!(text, Content::text("hi"));
        assert!(matches!(text.block(), model::ContentBlock::TextContent(t) if t.text == "hi"));
        let link = Content::resource_link("file:///a", "a");
        assert_eq!(Content::from(model::ContentBlock::from(link.clone())), link);
    }

    #[cfg(feature = "http")]
    #[test]
    fn registered_tools_hold_their_header_rules() {
        let schema = object(json!({
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
        }));
        let registered = Registered::new(
            Tool::with_input_schema("t", schema, noop),
            #[cfg(feature = "validation")]
            &modelctx_types::schema::SchemaCache::new(Default::default()),
        );
        let headers = registered.param_headers.expect("usable header rules");
        assert_eq!(
            headers.iter().map(|h| h.name()).collect::<Vec<_>>(),
            ["Region"]
        );
    }

    #[cfg(feature = "validation")]
    #[test]
    fn registered_tools_hold_their_compiled_schemas_or_why_not() {
        use modelctx_types::schema::{SchemaCache, SchemaError, SchemaLimits};
        // A cache that keeps nothing: what a call validates with is what registration compiled.
        let mut limits = SchemaLimits::default();
        limits.cache_entries = 0;
        let cache = SchemaCache::new(limits);
        let schema = object(json!({"type": "object", "required": ["a"]}));
        let registered = Registered::new(Tool::with_input_schema("t", schema, noop), &cache);
        assert!(registered.unusable().is_none());
        let input = registered.input.as_ref().expect("compiled");
        assert_eq!(input.validate(&json!({}), 8).len(), 1);
        assert!(input.validate(&json!({"a": 1}), 8).is_empty());

        let remote = object(json!({"$ref": "https://example.com/a.json"}));
        let output = object(json!({"type": "object"}));
        let broken = Registered::new(
            Tool::with_input_schema("r", output, noop).output_schema(remote),
            &cache,
        );
        assert!(matches!(
            broken.unusable(),
            Some(SchemaError::ExternalRef(uri)) if uri.contains("example.com")
        ));
        assert!(broken.input.is_ok());
    }
}
