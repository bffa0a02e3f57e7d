//! Resources: static ones by URI, templated ones matched against RFC 6570 templates,
//! subscriptions to their changes.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use modelctx_session::{Era, ProtocolVersion};
use modelctx_types::{ErrorCode, ErrorObject, JsonObject};
use serde_json::{Value, json};

use crate::context::Context;
use crate::prompt::Completer;
use crate::server::{Route, Shared, invalid_params, page};
use crate::tool::BoxFuture;
use crate::uri_template::{TemplateError, UriTemplate, VarValue};

/// The contents of a resource: text or binary, with its URI and MIME type.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceContents(pub(crate) Value);

impl ResourceContents {
    /// Text contents of `uri`.
    pub fn text(uri: impl Into<String>, text: impl Into<String>) -> Self {
        ResourceContents(json!({"uri": uri.into(), "text": text.into()}))
    }

    /// Binary contents of `uri`.
    pub fn blob(uri: impl Into<String>, bytes: &[u8]) -> Self {
        ResourceContents(json!({"uri": uri.into(), "blob": base64(bytes)}))
    }

    /// The MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.0["mimeType"] = Value::from(mime_type.into());
        self
    }
}

/// Why a resource cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ResourceError {
    /// There is no such resource (-32002 for legacy clients, -32602 for modern ones).
    #[error("resource not found: {0}")]
    NotFound(String),
    /// Reading failed.
    #[error("{0}")]
    Failed(String),
}

/// What a resource handler may return.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the result of a resource read",
    note = "a resource handler returns `ResourceContents`, `Vec<ResourceContents>`, or a `Result` of one of these with `ResourceError` (or any `Display` error)"
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

type ErasedRead = Arc<
    dyn Fn(Context, ReadRequest) -> BoxFuture<Result<Vec<ResourceContents>, ResourceError>>
        + Send
        + Sync,
>;

fn erase<F, Fut, R>(handler: F) -> ErasedRead
where
    F: Fn(Context, ReadRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoContents,
{
    let handler = Arc::new(handler);
    Arc::new(move |context, request| {
        let handler = handler.clone();
        Box::pin(async move { handler(context, request).await.into_contents() })
    })
}

/// How long and for whom a client may cache a result (2026-07-28 `ttlMs` and `cacheScope`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheHint {
    /// How long, in milliseconds.
    pub ttl_ms: u64,
    /// `"private"` (this user) or `"public"`.
    pub scope: &'static str,
}

/// A resource at a fixed URI.
#[derive(Clone)]
pub struct Resource {
    pub(crate) uri: String,
    pub(crate) definition: JsonObject,
    read: ErasedRead,
    pub(crate) cache: Option<CacheHint>,
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource")
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

impl Resource {
    /// A resource named `name` at `uri`, read by `handler` (`async fn(Context, ReadRequest)`).
    ///
    /// ```
    /// use modelctx_server::{Context, ReadRequest, Resource, ResourceContents};
    ///
    /// async fn logo(_: Context, request: ReadRequest) -> ResourceContents {
    ///     ResourceContents::blob(request.uri, b"\x89PNG...").mime_type("image/png")
    /// }
    ///
    /// let resource = Resource::new("assets://logo.png", "logo", logo)
    ///     .description("The project's logo")
    ///     .mime_type("image/png");
    /// # let _ = resource;
    /// ```
    pub fn new<F, Fut, R>(uri: impl Into<String>, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Context, ReadRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoContents,
    {
        let uri = uri.into();
        let mut definition = JsonObject::new();
        definition.insert("uri".into(), Value::from(uri.as_str()));
        definition.insert("name".into(), Value::from(name.into()));
        Resource {
            uri,
            definition,
            read: erase(handler),
            cache: None,
        }
    }

    /// The description.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.definition
            .insert("description".into(), Value::from(text.into()));
        self
    }

    /// The MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.definition
            .insert("mimeType".into(), Value::from(mime_type.into()));
        self
    }

    /// How long modern clients may cache what is read.
    pub fn cache(mut self, hint: CacheHint) -> Self {
        self.cache = Some(hint);
        self
    }
}

/// Resources whose URIs follow an RFC 6570 template (levels 1 to 4).
#[derive(Clone)]
pub struct ResourceTemplate {
    pub(crate) template: UriTemplate,
    pub(crate) definition: JsonObject,
    read: ErasedRead,
    pub(crate) completers: BTreeMap<String, Completer>,
    pub(crate) cache: Option<CacheHint>,
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
    /// A template named `name`, read by `handler` (`async fn(Context, ReadRequest)`, the
    /// request carrying the variables).
    ///
    /// ```
    /// use modelctx_server::{Context, ReadRequest, ResourceContents, ResourceError, ResourceTemplate};
    ///
    /// async fn file(_: Context, request: ReadRequest) -> Result<ResourceContents, ResourceError> {
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
    pub fn new<F, Fut, R>(
        uri_template: &str,
        name: impl Into<String>,
        handler: F,
    ) -> Result<Self, InvalidTemplate>
    where
        F: Fn(Context, ReadRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoContents,
    {
        let template = UriTemplate::parse(uri_template)?;
        let mut definition = JsonObject::new();
        definition.insert("uriTemplate".into(), Value::from(uri_template));
        definition.insert("name".into(), Value::from(name.into()));
        Ok(ResourceTemplate {
            template,
            definition,
            read: erase(handler),
            completers: BTreeMap::new(),
            cache: None,
        })
    }

    /// The description.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.definition
            .insert("description".into(), Value::from(text.into()));
        self
    }

    /// The MIME type of its resources.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.definition
            .insert("mimeType".into(), Value::from(mime_type.into()));
        self
    }

    /// Completes variable `variable`: `complete(partial, other_variables)` gives candidates.
    pub fn complete<F, Fut>(mut self, variable: impl Into<String>, complete: F) -> Self
    where
        F: Fn(String, JsonObject) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<String>> + Send + 'static,
    {
        self.completers
            .insert(variable.into(), crate::prompt::completer(complete));
        self
    }

    /// How long modern clients may cache what is read.
    pub fn cache(mut self, hint: CacheHint) -> Self {
        self.cache = Some(hint);
        self
    }
}

/// `resources/list`.
pub(crate) fn list(shared: &Shared, params: &JsonObject) -> Result<Value, ErrorObject> {
    let registry = shared.registry();
    let (items, next) = page(&registry.resources, params, shared.settings.page_size)?;
    let items: Vec<Value> = items
        .into_iter()
        .map(|r| Value::Object(r.definition.clone()))
        .collect();
    let mut result = json!({ "resources": items });
    if let Some(next) = next {
        result["nextCursor"] = Value::from(next);
    }
    Ok(result)
}

/// `resources/templates/list`.
pub(crate) fn list_templates(shared: &Shared, params: &JsonObject) -> Result<Value, ErrorObject> {
    let registry = shared.registry();
    let (items, next) = page(&registry.templates, params, shared.settings.page_size)?;
    let items: Vec<Value> = items
        .into_iter()
        .map(|t| Value::Object(t.definition.clone()))
        .collect();
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

/// `resources/read`.
pub(crate) fn read(shared: &Shared, params: &JsonObject, version: ProtocolVersion) -> Route {
    let Some(uri) = params.get("uri").and_then(Value::as_str) else {
        return Route::Now(Err(invalid_params("resources/read needs a uri")));
    };
    if let Err(error) = check_uri_len(shared, "the uri", uri) {
        return Route::Now(Err(error));
    }
    let registry = shared.registry();
    let found = if let Some(resource) = registry.resources.get(uri) {
        Some((
            resource.read.clone(),
            BTreeMap::new(),
            resource.cache.clone(),
        ))
    } else {
        registry.templates.values().find_map(|t| {
            t.template
                .matches(uri)
                .map(|variables| (t.read.clone(), variables, t.cache.clone()))
        })
    };
    drop(registry);
    let Some((read, variables, cache)) = found else {
        return Route::Now(Err(not_found(uri, version)));
    };
    let request = ReadRequest {
        uri: uri.to_owned(),
        variables,
    };
    Route::Run(Box::new(move |context| {
        Box::pin(async move {
            let version = context.protocol_version();
            let uri = request.uri.clone();
            match read(context, request).await {
                Ok(contents) => {
                    let contents: Vec<Value> = contents.into_iter().map(|c| c.0).collect();
                    let mut result = json!({ "contents": contents });
                    if let Some(hint) = cache
                        && version.era() == Era::Modern
                    {
                        result["ttlMs"] = Value::from(hint.ttl_ms);
                        result["cacheScope"] = Value::from(hint.scope);
                    }
                    Ok(result)
                }
                Err(ResourceError::NotFound(_)) => Err(not_found(&uri, version)),
                Err(ResourceError::Failed(why)) => {
                    Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, why))
                }
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

/// Refuses a URI longer than [`Settings::max_uri_len`](crate::Settings::max_uri_len) with
/// -32602 (`what` names where it came from).
pub(crate) fn check_uri_len(shared: &Shared, what: &str, uri: &str) -> Result<(), ErrorObject> {
    let max = shared.settings.max_uri_len;
    if uri.len() > max {
        return Err(invalid_params(format!(
            "{what} is {} bytes long; at most {max}",
            uri.len()
        )));
    }
    Ok(())
}

/// Whether a connection of `principal` may hear of changes to `uri`: the
/// [`ServerBuilder::on_subscribe`](crate::ServerBuilder::on_subscribe) hook's say, yes without
/// one.
pub(crate) fn may_subscribe(shared: &Shared, uri: &str, principal: Option<&str>) -> bool {
    shared
        .subscribe_hook
        .as_ref()
        .is_none_or(|hook| (hook.0)(&Subscribe { uri, principal }))
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
