//! Tools: a definition and an async function with typed arguments.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use modelctx_types::{ErrorObject, JsonObject, ProtocolVersion};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::context::Context;
use crate::handler::BoxFuture;
use crate::handler::markers::{ArgsOnly, WithContext};

/// One content block of a result (text, image, audio, a resource link or an embedded
/// resource), as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Content(pub(crate) Value);

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Content(json!({"type": "text", "text": text.into()}))
    }

    /// An image block: base64 `data` of type `mime_type`.
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Content(json!({"type": "image", "data": data.into(), "mimeType": mime_type.into()}))
    }

    /// An audio block (2025-03-26 and later; older clients get a text note instead).
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Content(json!({"type": "audio", "data": data.into(), "mimeType": mime_type.into()}))
    }

    /// A link to a resource (2025-06-18 and later; older clients get its URI as text).
    pub fn resource_link(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Content(json!({"type": "resource_link", "uri": uri.into(), "name": name.into()}))
    }

    /// An embedded text resource.
    pub fn embedded_text(uri: impl Into<String>, text: impl Into<String>) -> Self {
        Content(json!({"type": "resource", "resource": {"uri": uri.into(), "text": text.into()}}))
    }

    /// Any block, as JSON (it must have the shape of a `ContentBlock`).
    pub fn from_json(block: Value) -> Self {
        Content(block)
    }

    /// The block as JSON.
    pub fn as_json(&self) -> &Value {
        &self.0
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
    /// The client capability the call failed for lack of ([`InputError::NotSupported`]
    /// returned by the handler): modern requests get the -32021 error instead of the result.
    ///
    /// [`InputError::NotSupported`]: crate::InputError::NotSupported
    pub(crate) missing_capability: Option<String>,
}

impl ToolOutput {
    /// A result of these blocks.
    pub fn new(content: Vec<Content>) -> Self {
        ToolOutput {
            content,
            structured: None,
            is_error: false,
            missing_capability: None,
        }
    }

    /// A failed call: the text tells the model what went wrong (a tool execution error, not a
    /// protocol error).
    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            content: vec![Content::text(text)],
            structured: None,
            is_error: true,
            missing_capability: None,
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
            missing_capability: None,
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
    label = "returned here",
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

/// An async function that can handle a tool call: `async fn(A) -> R` or
/// `async fn(Context, A) -> R`, where `A` is the arguments (a `Deserialize` type, an object)
/// and `R` implements [`IntoToolOutput`]. `M` only tells the two shapes apart.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tool handler",
    label = "not a tool handler",
    note = "a tool handler is an async fn (or closure) of one of these shapes: `async fn(Args) -> R` or `async fn(Context, Args) -> R`, where `Args: serde::Deserialize` (use `NoArgs` for none) and `R: IntoToolOutput`; it must be `Clone + Send + Sync + 'static` and its future `Send`"
)]
pub trait ToolHandler<M>: Clone + Send + Sync + 'static {
    /// The arguments.
    type Args: DeserializeOwned + Send + 'static;
    /// The result.
    type Output: IntoToolOutput;
    /// Runs the tool.
    fn call(&self, context: Context, args: Self::Args) -> BoxFuture<Self::Output>;
}

impl<F, Fut, A, R> ToolHandler<(ArgsOnly, A)> for F
where
    F: Fn(A) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    A: DeserializeOwned + Send + 'static,
    R: IntoToolOutput,
{
    type Args = A;
    type Output = R;
    fn call(&self, _context: Context, args: A) -> BoxFuture<R> {
        Box::pin((self)(args))
    }
}

impl<F, Fut, A, R> ToolHandler<(WithContext, A)> for F
where
    F: Fn(Context, A) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    A: DeserializeOwned + Send + 'static,
    R: IntoToolOutput,
{
    type Args = A;
    type Output = R;
    fn call(&self, context: Context, args: A) -> BoxFuture<R> {
        Box::pin((self)(context, args))
    }
}

/// A handler with its types erased: takes the arguments as JSON.
pub(crate) type ErasedTool =
    Arc<dyn Fn(Context, Value) -> BoxFuture<Result<ToolOutput, String>> + Send + Sync>;

fn erase<H, M>(handler: H) -> ErasedTool
where
    H: ToolHandler<M>,
{
    Arc::new(move |context, args| {
        let handler = handler.clone();
        Box::pin(async move {
            let args: H::Args =
                serde_json::from_value(args).map_err(|e| format!("invalid arguments: {e}"))?;
            Ok(handler.call(context, args).await.into_output())
        })
    })
}

/// `tools/list`: one page of the tools, written for `version`.
pub(crate) fn list(
    tools: &BTreeMap<String, Tool>,
    version: ProtocolVersion,
    params: &JsonObject,
    page_size: usize,
) -> Result<Value, ErrorObject> {
    let (tools, next) = crate::wire::cursor::page(tools, params, page_size)?;
    let tools: Vec<Value> = tools
        .into_iter()
        .map(|t| crate::wire::write::tool(t, version))
        .collect();
    let mut result = json!({ "tools": tools });
    if let Some(next) = next {
        result["nextCursor"] = Value::from(next);
    }
    Ok(result)
}

/// The most violations shown to the model for one call.
#[cfg(feature = "validation")]
const MAX_VIOLATIONS: usize = 8;

/// Runs a tool call: arguments checked, the handler run, its result checked and written for
/// `version`.
pub(crate) async fn call(
    tool: Tool,
    arguments: Value,
    context: Context,
    #[cfg(feature = "validation")] schemas: &modelctx_types::schema::SchemaCache,
) -> Result<Value, ErrorObject> {
    let version = context.protocol_version();
    let modern = context.inner.modern;
    if !arguments.is_object() {
        return Ok(crate::wire::write::tool_output(
            &ToolOutput::error("invalid arguments: the arguments must be a JSON object"),
            version,
        ));
    }
    #[cfg(feature = "validation")]
    {
        let validator = schemas.validator(&tool.input_schema).map_err(|e| {
            crate::wire::internal(format!(
                "the input schema of tool {} is not usable: {e}",
                tool.name
            ))
        })?;
        let violations = validator.validate(&arguments, MAX_VIOLATIONS);
        if !violations.is_empty() {
            // A tool execution error: the model can read it and try again.
            let text = crate::wire::schema::describe(&violations);
            return Ok(crate::wire::write::tool_output(
                &ToolOutput::error(text),
                version,
            ));
        }
    }
    let output = match (tool.handler)(context, arguments).await {
        Ok(output) => output,
        Err(text) => ToolOutput::error(text),
    };
    if let (true, Some(capability)) = (modern, &output.missing_capability) {
        return Err(crate::input::missing_capability(capability));
    }
    #[cfg(feature = "validation")]
    if let (Some(schema), Some(structured), false) =
        (&tool.output_schema, &output.structured, output.is_error)
    {
        let validator = schemas.validator(schema).map_err(|e| {
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
    Ok(crate::wire::write::tool_output(&output, version))
}

/// A tool: its definition (name, schemas, description, ...) and its handler.
#[derive(Clone)]
pub struct Tool {
    pub(crate) name: String,
    pub(crate) definition: JsonObject,
    pub(crate) input_schema: JsonObject,
    pub(crate) output_schema: Option<JsonObject>,
    pub(crate) handler: ErasedTool,
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
    ///     .annotations(serde_json::json!({"readOnlyHint": true, "openWorldHint": true}));
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
    {
        let name = name.into();
        Tool {
            definition: JsonObject::new(),
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
    /// `title`), as JSON.
    pub fn annotations(self, annotations: Value) -> Self {
        self.set("annotations", annotations)
    }

    /// Icons (2025-11-25 and later), as JSON `Icon` objects.
    pub fn icons(self, icons: Vec<Value>) -> Self {
        self.set("icons", Value::from(icons))
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

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
}
