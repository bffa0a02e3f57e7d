//! Resources: static ones by URI, templated ones matched against RFC 6570 templates,
//! subscriptions to their changes.

use std::any::TypeId;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use modelctx_session::{Era, ProtocolVersion};
use modelctx_types::{ErrorCode, ErrorObject, JsonObject, model};
use serde_json::{Value, json};

use crate::complete::Completer;
use crate::context::Context;
use crate::handler::{BoxFuture, MissingState, Runner};
use crate::uri_template::{TemplateError, UriTemplate, VarValue};
use crate::wire::cursor::page;
use crate::wire::invalid_params;
use crate::wire::write;

/// The contents of a resource: text or binary, with its URI and MIME type (the model's
/// `TextResourceContents` or `BlobResourceContents`, written in the client's version).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceContents(pub(crate) model::EmbeddedResourceResource);

impl ResourceContents {
    /// Text contents of `uri` (no MIME type).
    pub fn text(uri: impl Into<String>, text: impl Into<String>) -> Self {
        ResourceContents(model::EmbeddedResourceResource::TextResourceContents(
            model::TextResourceContents {
                meta: None,
                mime_type: None,
                text: text.into(),
                uri: uri.into(),
            },
        ))
    }

    /// Binary contents of `uri`, base64-encoded on the wire (no MIME type).
    pub fn blob(uri: impl Into<String>, bytes: &[u8]) -> Self {
        ResourceContents(model::EmbeddedResourceResource::BlobResourceContents(
            model::BlobResourceContents {
                meta: None,
                blob: base64(bytes),
                mime_type: None,
                uri: uri.into(),
            },
        ))
    }

    /// The MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        let mime_type = Some(mime_type.into());
        match &mut self.0 {
            model::EmbeddedResourceResource::TextResourceContents(text) => {
                text.mime_type = mime_type;
            }
            model::EmbeddedResourceResource::BlobResourceContents(blob) => {
                blob.mime_type = mime_type;
            }
            // A kind of contents a later model adds: built from the model, it has its type.
            _ => {}
        }
        self
    }
}

impl From<model::EmbeddedResourceResource> for ResourceContents {
    fn from(contents: model::EmbeddedResourceResource) -> Self {
        ResourceContents(contents)
    }
}

impl From<ResourceContents> for model::EmbeddedResourceResource {
    fn from(contents: ResourceContents) -> Self {
        contents.0
    }
}

/// Why a resource cannot be read.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ResourceError {
    /// There is no such resource (-32002 for legacy clients, -32602 for modern ones).
    #[error("resource not found: {0}")]
    NotFound(String),
    /// Reading failed (-32603 with this text).
    #[error("{0}")]
    Failed(String),
    /// The read is answered with this JSON-RPC error, as it is: for a front passing on another
    /// server's error (a gateway); a resource's own failures are better told with
    /// [`ResourceError::Failed`]. A -32021 (a 2026-07-28 error) reaches a legacy client as
    /// -32603 with its message, as a prompt's does.
    #[error("{}", .0.message)]
    Protocol(ErrorObject),
}

/// Equal when of the same kind and text; two [`ResourceError::Protocol`] when of the same code,
/// message and `data` text (`ErrorObject` has no `PartialEq`).
impl PartialEq for ResourceError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ResourceError::NotFound(a), ResourceError::NotFound(b))
            | (ResourceError::Failed(a), ResourceError::Failed(b)) => a == b,
            (ResourceError::Protocol(a), ResourceError::Protocol(b)) => {
                a.code == b.code
                    && a.message == b.message
                    && a.data.as_ref().map(|d| d.get()) == b.data.as_ref().map(|d| d.get())
            }
            _ => false,
        }
    }
}

/// What a resource handler may return.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the result of a resource read",
    label = "`{Self}` is not a resource read's result",
    note = "a resource handler returns `ResourceContents`, `Vec<ResourceContents>`, or a `Result` of one of these whose error is `ResourceError`"
)]
pub trait IntoContents: Send + 'static {
    /// The contents, or why there are none.
    fn into_contents(self) -> Result<Vec<ResourceContents>, ResourceError>;
}

impl IntoContents for ResourceContents {
    fn into_contents(self) -> Result<Vec<ResourceContents>, ResourceError> {
        Ok(vec![self])
    }
}

impl IntoContents for Vec<ResourceContents> {
    fn into_contents(self) -> Result<Vec<ResourceContents>, ResourceError> {
        Ok(self)
    }
}

impl<T: IntoContents> IntoContents for Result<T, ResourceError> {
    fn into_contents(self) -> Result<Vec<ResourceContents>, ResourceError> {
        self.and_then(IntoContents::into_contents)
    }
}

/// The request a resource handler answers: the URI read and, for a template, its variables.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReadRequest {
    /// The URI read.
    pub uri: String,
    /// The template's variables, as matched (pct-decoded).
    pub(crate) variables: BTreeMap<String, VarValue>,
}

impl ReadRequest {
    /// The names of the variables the URI gave.
    pub fn var_names(&self) -> impl Iterator<Item = &str> {
        self.variables.keys().map(String::as_str)
    }

    /// A variable's values as a list (an exploded or comma-separated variable; one item for a
    /// plain value).
    pub fn var_list(&self, name: &str) -> Option<Vec<String>> {
        Some(match self.variables.get(name)? {
            VarValue::String(s) => vec![s.clone()],
            VarValue::List(items) => items.clone(),
            VarValue::Map(pairs) => pairs
                .iter()
                .flat_map(|(k, v)| [k.clone(), v.clone()])
                .collect(),
        })
    }

    /// A variable's value as one string (lists joined with `,`).
    pub fn var(&self, name: &str) -> Option<String> {
        match self.variables.get(name)? {
            VarValue::String(s) => Some(s.clone()),
            VarValue::List(items) => Some(items.join(",")),
            VarValue::Map(pairs) => Some(
                pairs
                    .iter()
                    .map(|(k, v)| format!("{k},{v}"))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        }
    }
}

/// An async function that reads a resource: `async fn(ReadRequest) -> R`,
/// `async fn(Context, ReadRequest) -> R`, `async fn(State<S>, ReadRequest) -> R` or
/// `async fn(Context, State<S>, ReadRequest) -> R`, where `S` is state given with
/// [`ServerBuilder::state`](crate::ServerBuilder::state) and `R: IntoContents`; the shapes of
/// [`ToolHandler`](crate::ToolHandler) and [`PromptHandler`](crate::PromptHandler), with the
/// [`ReadRequest`] for arguments. A closure returning a future is a handler too; its
/// arguments need their types written (`|request: ReadRequest| async move { .. }`). `M` only
/// tells the shapes apart.
///
/// Every function of these shapes is a `ResourceHandler`, whatever `R` is: [`Resource::new`]
/// and [`ResourceTemplate::new`] require `R: IntoContents`, so that a handler returning
/// something else is named in the compiler's error with the types a read may return.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a resource handler",
    label = "not a resource handler",
    note = "a resource handler is an async fn, or a closure returning a future (a plain `fn` is not one), of one of these shapes: `async fn(ReadRequest) -> R`, `async fn(Context, ReadRequest) -> R`, `async fn(State<S>, ReadRequest) -> R` or `async fn(Context, State<S>, ReadRequest) -> R`, where `S: Clone + Send + Sync + 'static` and `R: IntoContents`; it must be `Send + Sync + 'static` and its future `Send`"
)]
pub trait ResourceHandler<M>: Send + Sync + 'static {
    /// What the handler's future resolves to (a read needs it to be [`IntoContents`]).
    type Output;
    /// Reads the resource.
    ///
    /// # Errors
    ///
    /// [`MissingState`] when the handler takes state of a type the server was not given.
    fn call(
        &self,
        context: Context,
        request: ReadRequest,
    ) -> Result<BoxFuture<Self::Output>, MissingState>;

    /// The type of the state the handler takes, if it takes any: checked when the server is
    /// built (default: none).
    fn state_type() -> Option<(TypeId, &'static str)> {
        None
    }
}

crate::handler::handler_shapes!(ResourceHandler, ReadRequest);

type ErasedRead = Arc<
    dyn Fn(Context, ReadRequest) -> BoxFuture<Result<Vec<ResourceContents>, ReadFailure>>
        + Send
        + Sync,
>;

/// Why a read failed: the handler's error, or the handler could not run (it takes state the
/// server does not have: the server's fault, -32603).
enum ReadFailure {
    Handler(ResourceError),
    MissingState(MissingState),
}

fn erase<H, M>(handler: H) -> ErasedRead
where
    H: ResourceHandler<M>,
    H::Output: IntoContents,
{
    let handler = Arc::new(handler);
    Arc::new(move |context, request| {
        let reading = handler.call(context, request);
        Box::pin(async move {
            match reading {
                Ok(reading) => reading.await.into_contents().map_err(ReadFailure::Handler),
                Err(missing) => Err(ReadFailure::MissingState(missing)),
            }
        })
    })
}

/// The cache hint of results (its home is the session, which writes it).
pub use modelctx_session::{CacheHint, CacheScope};

/// A resource at a fixed URI.
#[derive(Clone)]
pub struct Resource {
    pub(crate) uri: String,
    pub(crate) definition: model::Resource,
    read: ErasedRead,
    /// The type of the state the handler takes, if any.
    pub(crate) state: Option<(TypeId, &'static str)>,
    pub(crate) cache: Option<CacheHint>,
    /// The scopes reading or subscribing needs ([`Resource::scopes`]); `None`: none.
    pub(crate) scopes: crate::handler::Scopes,
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource")
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

impl Resource {
    /// A resource named `name` at `uri`, read by `handler`: `async fn(ReadRequest)`, or with a
    /// [`Context`] first, or [`State`](crate::State) (see [`ResourceHandler`]).
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use modelctx_server::{Context, ReadRequest, Resource, ResourceContents};
    ///
    /// async fn logo(request: ReadRequest) -> ResourceContents {
    ///     ResourceContents::blob(request.uri, b"\x89PNG...").mime_type("image/png")
    /// }
    ///
    /// let resource = Resource::new("assets://logo.png", "logo", logo)
    ///     .description("The project's logo")
    ///     .mime_type("image/png");
    ///
    /// // With the request's context (its cancellation, the client's version, ...).
    /// async fn about(context: Context, request: ReadRequest) -> ResourceContents {
    ///     let version = context.protocol_version();
    ///     ResourceContents::text(request.uri, format!("read in {}", version.as_str()))
    /// }
    /// let about = Resource::new("assets://about", "about", about);
    ///
    /// // A closure capturing what it reads.
    /// let motd = Arc::new(String::from("Welcome"));
    /// let motd = Resource::new("assets://motd", "motd", move |request: ReadRequest| {
    ///     let motd = motd.clone();
    ///     async move { ResourceContents::text(request.uri, motd.as_str()) }
    /// });
    /// # let _ = (resource, about, motd);
    /// ```
    pub fn new<H, M>(uri: impl Into<String>, name: impl Into<String>, handler: H) -> Self
    where
        H: ResourceHandler<M>,
        H::Output: IntoContents,
    {
        let uri = uri.into();
        let definition = model::Resource {
            meta: None,
            annotations: None,
            description: None,
            icons: None,
            mime_type: None,
            name: name.into(),
            size: None,
            title: None,
            uri: uri.clone(),
        };
        Resource {
            uri,
            definition,
            read: erase(handler),
            state: H::state_type(),
            cache: None,
            scopes: None,
        }
    }

    /// The description.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.definition.description = Some(text.into());
        self
    }

    /// The MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.definition.mime_type = Some(mime_type.into());
        self
    }

    /// How long modern clients may cache what is read.
    pub fn cache(mut self, hint: CacheHint) -> Self {
        self.cache = Some(hint);
        self
    }

    /// The OAuth scopes `resources/read` and `resources/subscribe` of its URI need (default:
    /// none beyond authentication); see [`Tool::scopes`](crate::Tool::scopes).
    pub fn scopes<I>(mut self, scopes: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.scopes = crate::handler::scopes(scopes);
        self
    }
}

/// Resources whose URIs follow an RFC 6570 template (levels 1 to 4).
#[derive(Clone)]
pub struct ResourceTemplate {
    pub(crate) template: UriTemplate,
    pub(crate) definition: model::ResourceTemplate,
    read: ErasedRead,
    /// The type of the state the handler takes, if any.
    pub(crate) state: Option<(TypeId, &'static str)>,
    pub(crate) completers: BTreeMap<String, Completer>,
    pub(crate) cache: Option<CacheHint>,
    /// The scopes reading or subscribing needs ([`ResourceTemplate::scopes`]); `None`: none.
    pub(crate) scopes: crate::handler::Scopes,
}

impl std::fmt::Debug for ResourceTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceTemplate")
            .field("template", &self.template.as_str())
            .finish_non_exhaustive()
    }
}

/// Why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct InvalidTemplate(#[from] TemplateError);

impl ResourceTemplate {
    /// A template named `name`, read by `handler` (`async fn(ReadRequest)`, or with a
    /// [`Context`] first, or [`State`](crate::State): see [`ResourceHandler`]), the request
    /// carrying the variables.
    ///
    /// ```
    /// use modelctx_server::{ReadRequest, ResourceContents, ResourceError, ResourceTemplate};
    ///
    /// async fn file(request: ReadRequest) -> Result<ResourceContents, ResourceError> {
    ///     // `{+path}` (reserved expansion) may hold slashes.
    ///     let path = request.var("path").unwrap_or_default();
    ///     if path.contains("..") {
    ///         return Err(ResourceError::NotFound(request.uri));
    ///     }
    ///     Ok(ResourceContents::text(request.uri, format!("the contents of {path}")))
    /// }
    ///
    /// let template = ResourceTemplate::new("file:///{+path}", "file", file)
    ///     .expect("a valid RFC 6570 template")
    ///     .description("A file under the root")
    ///     .complete("path", |partial: String, _| async move {
    ///         vec![format!("{partial}README.md")]
    ///     });
    /// assert!(ResourceTemplate::new("file:///{path", "broken", file).is_err());
    /// # let _ = template;
    /// ```
    pub fn new<H, M>(
        uri_template: &str,
        name: impl Into<String>,
        handler: H,
    ) -> Result<Self, InvalidTemplate>
    where
        H: ResourceHandler<M>,
        H::Output: IntoContents,
    {
        let template = UriTemplate::parse(uri_template)?;
        let definition = model::ResourceTemplate {
            meta: None,
            annotations: None,
            description: None,
            icons: None,
            mime_type: None,
            name: name.into(),
            title: None,
            uri_template: uri_template.to_owned(),
        };
        Ok(ResourceTemplate {
            template,
            definition,
            read: erase(handler),
            state: H::state_type(),
            completers: BTreeMap::new(),
            cache: None,
            scopes: None,
        })
    }

    /// The description.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.definition.description = Some(text.into());
        self
    }

    /// The MIME type of its resources.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.definition.mime_type = Some(mime_type.into());
        self
    }

    /// Completes variable `variable`: `complete(partial, other_variables)` gives candidates.
    pub fn complete<F, Fut>(mut self, variable: impl Into<String>, complete: F) -> Self
    where
        F: Fn(String, JsonObject) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<String>> + Send + 'static,
    {
        self.completers
            .insert(variable.into(), crate::complete::completer(complete));
        self
    }

    /// How long modern clients may cache what is read.
    pub fn cache(mut self, hint: CacheHint) -> Self {
        self.cache = Some(hint);
        self
    }

    /// The OAuth scopes `resources/read` and `resources/subscribe` of a URI it matches need
    /// (default: none beyond authentication); see [`Tool::scopes`](crate::Tool::scopes). A
    /// resource registered at the exact URI decides instead, as it does for reading.
    pub fn scopes<I>(mut self, scopes: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.scopes = crate::handler::scopes(scopes);
        self
    }
}

/// `resources/list` in `version`.
pub(crate) fn list(
    resources: &BTreeMap<String, Resource>,
    version: ProtocolVersion,
    params: &JsonObject,
    page_size: usize,
) -> Result<Value, ErrorObject> {
    let (items, next) = page(resources, params, page_size)?;
    let items = items
        .into_iter()
        .map(|r| write::resource(&r.definition, version))
        .collect::<Result<Vec<Value>, ErrorObject>>()?;
    let mut result = json!({ "resources": items });
    if let Some(next) = next {
        result["nextCursor"] = Value::from(next);
    }
    Ok(result)
}

/// `resources/templates/list` in `version`.
pub(crate) fn list_templates(
    templates: &BTreeMap<String, ResourceTemplate>,
    version: ProtocolVersion,
    params: &JsonObject,
    page_size: usize,
) -> Result<Value, ErrorObject> {
    let (items, next) = page(templates, params, page_size)?;
    let items = items
        .into_iter()
        .map(|t| write::resource_template(&t.definition, version))
        .collect::<Result<Vec<Value>, ErrorObject>>()?;
    let mut result = json!({ "resourceTemplates": items });
    if let Some(next) = next {
        result["nextCursor"] = Value::from(next);
    }
    Ok(result)
}

/// The not-found error of `version`: -32002 before 2026-07-28, -32602 after.
pub(crate) fn not_found(uri: &str, version: ProtocolVersion) -> ErrorObject {
    let code = if version.era() == Era::Modern {
        ErrorCode::INVALID_PARAMS
    } else {
        ErrorCode::RESOURCE_NOT_FOUND
    };
    ErrorObject::new(code, format!("resource not found: {uri}"))
        .with_data(&json!({ "uri": uri }))
        .unwrap_or_else(|_| ErrorObject::new(code, format!("resource not found: {uri}")))
}

/// What a URI names: the resource at it, or else the first template matching it, with the
/// values of the template's variables.
pub(crate) enum Found<'a> {
    Resource(&'a Resource),
    Template(&'a ResourceTemplate, BTreeMap<String, VarValue>),
}

impl Found<'_> {
    /// The scopes reading or subscribing to what was found needs.
    #[cfg(feature = "http")]
    pub(crate) fn scopes(&self) -> &crate::handler::Scopes {
        match self {
            Found::Resource(resource) => &resource.scopes,
            Found::Template(template, _) => &template.scopes,
        }
    }
}

/// What `uri` names, as a read finds it: the resource at `uri`, else the first template (in
/// the order of their texts) matching it; `Ok(None)`: nothing. A URI longer than
/// `max_uri_len` is refused with -32602 before any template is tried.
pub(crate) fn find<'a>(
    resources: &'a BTreeMap<String, Resource>,
    templates: &'a BTreeMap<String, ResourceTemplate>,
    uri: &str,
    max_uri_len: usize,
) -> Result<Option<Found<'a>>, ErrorObject> {
    check_uri_len(max_uri_len, "the uri", uri)?;
    if let Some(resource) = resources.get(uri) {
        return Ok(Some(Found::Resource(resource)));
    }
    Ok(templates.values().find_map(|t| {
        t.template
            .matches(uri)
            .map(|variables| Found::Template(t, variables))
    }))
}

/// `resources/read`.
pub(crate) fn read(
    resources: &BTreeMap<String, Resource>,
    templates: &BTreeMap<String, ResourceTemplate>,
    params: &JsonObject,
    version: ProtocolVersion,
    max_uri_len: usize,
) -> Result<Runner, ErrorObject> {
    let Some(uri) = params.get("uri").and_then(Value::as_str) else {
        return Err(invalid_params("resources/read needs a uri"));
    };
    let (read, variables, cache) = match find(resources, templates, uri, max_uri_len)? {
        Some(Found::Resource(resource)) => (resource.read.clone(), BTreeMap::new(), resource.cache),
        Some(Found::Template(template, variables)) => {
            (template.read.clone(), variables, template.cache)
        }
        None => return Err(not_found(uri, version)),
    };
    let request = ReadRequest {
        uri: uri.to_owned(),
        variables,
    };
    Ok(Box::new(move |context| {
        Box::pin(async move {
            let version = context.protocol_version();
            let uri = request.uri.clone();
            match read(context, request).await {
                Ok(contents) => {
                    let contents = contents.into_iter().map(|c| c.0).collect();
                    write::read_result(contents, cache, version)
                }
                Err(ReadFailure::Handler(ResourceError::NotFound(_))) => {
                    Err(not_found(&uri, version))
                }
                Err(ReadFailure::Handler(ResourceError::Failed(why))) => {
                    Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, why))
                }
                Err(ReadFailure::Handler(ResourceError::Protocol(error))) => {
                    Err(crate::wire::for_era(error, version.era() == Era::Modern))
                }
                // Missing state is the server's fault (-32603), as for tools and prompts.
                Err(ReadFailure::MissingState(missing)) => Err(ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    missing.to_string(),
                )),
            }
        })
    }))
}

/// The completer of `variable` of the template whose text is `uri_template`.
pub(crate) fn template_completer(
    templates: &BTreeMap<String, ResourceTemplate>,
    uri_template: &str,
    variable: &str,
) -> Result<Option<Completer>, ErrorObject> {
    let template = templates
        .get(uri_template)
        .ok_or_else(|| invalid_params(format!("unknown resource template: {uri_template}")))?;
    if !template.template.variables().contains(&variable) {
        return Err(invalid_params(format!(
            "the template {uri_template} has no variable {variable}"
        )));
    }
    Ok(template.completers.get(variable).cloned())
}

/// A client's wish to hear of changes to one resource, as [`ServerBuilder::on_subscribe`]
/// sees it.
///
/// [`ServerBuilder::on_subscribe`]: crate::ServerBuilder::on_subscribe
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Subscribe<'a> {
    /// The resource's URI (at most [`Settings::max_uri_len`] bytes).
    ///
    /// [`Settings::max_uri_len`]: crate::Settings::max_uri_len
    pub uri: &'a str,
    /// The authenticated principal of the connection (the HTTP authentication layer's
    /// `Principal`), if any.
    pub principal: Option<&'a str>,
}

/// Decides whether a connection may hear of changes to a resource.
#[derive(Clone)]
pub(crate) struct SubscribeHook(pub(crate) Arc<dyn Fn(&Subscribe<'_>) -> bool + Send + Sync>);

impl std::fmt::Debug for SubscribeHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubscribeHook")
    }
}

/// Refuses a URI longer than `max` bytes
/// ([`Settings::max_uri_len`](crate::Settings::max_uri_len)) with -32602 (`what` names where it
/// came from).
pub(crate) fn check_uri_len(max: usize, what: &str, uri: &str) -> Result<(), ErrorObject> {
    if uri.len() > max {
        return Err(invalid_params(format!(
            "{what} is {} bytes long; at most {max}",
            uri.len()
        )));
    }
    Ok(())
}

/// The legacy subscriptions of one connection, bounded.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    uris: HashMap<String, ()>,
}

/// The most URIs one connection may subscribe to.
pub(crate) const MAX_SUBSCRIPTIONS: usize = 1024;

impl Subscriptions {
    pub(crate) fn subscribe(&mut self, uri: &str) -> Result<(), ErrorObject> {
        if !self.uris.contains_key(uri) && self.uris.len() >= MAX_SUBSCRIPTIONS {
            return Err(invalid_params(format!(
                "at most {MAX_SUBSCRIPTIONS} subscriptions per connection"
            )));
        }
        self.uris.insert(uri.to_owned(), ());
        Ok(())
    }

    pub(crate) fn unsubscribe(&mut self, uri: &str) {
        self.uris.remove(uri);
    }

    pub(crate) fn contains(&self, uri: &str) -> bool {
        self.uris.contains_key(uri)
    }

    /// The URIs subscribed to.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn uris(&self) -> impl Iterator<Item = &str> {
        self.uris.keys().map(String::as_str)
    }
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
