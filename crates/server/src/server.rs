//! The server: what it offers (a registry that may change while it runs) and how each request
//! is answered.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use modelctx_session::{IncomingRequest, ListKind, ProtocolVersion, ServerConfig};
use modelctx_types::{ErrorCode, ErrorObject, JsonObject};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::context::Context;
use crate::prompt::Prompt;
use crate::resource::{Resource, ResourceTemplate};
use crate::tool::{BoxFuture, Tool, ToolOutput};
use crate::write;

/// A change that live connections announce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    List(ListKind),
    Updated(Arc<str>),
}

/// Settings of a [`Server`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// Items per page of `tools/list` and the other lists (default 100).
    pub page_size: usize,
    /// Limits on the requests handlers answer (default: none, counting every request a handler
    /// answers: [`Limits::HANDLER_METHODS`](crate::Limits::HANDLER_METHODS)).
    pub limits: crate::limits::Limits,
    /// How long modern clients may cache list results (`ttlMs`, `cacheScope`; default: not at
    /// all, `ttlMs: 0`, `"private"`).
    pub list_cache: Option<crate::resource::CacheHint>,
    /// The longest resource URI accepted, in bytes (default 8192, 8 KiB): a longer `uri` of
    /// `resources/read`, `resources/subscribe` or `resources/unsubscribe`, `ref.uri` of
    /// `completion/complete`, or URI in a listen stream's `resourceSubscriptions` is refused
    /// with -32602.
    pub max_uri_len: usize,
    /// The most 2026-07-28 requests the HTTP app (`http_service`, `serve_http`) handles at once,
    /// over all clients, open `subscriptions/listen` streams included (default 1024): each has a
    /// task of its own until it is answered. A request beyond is answered at once with the
    /// JSON-RPC error -32000 (`data.reason` `"rate_limited"`), as [`Limits`](crate::Limits)
    /// refuse; a notification beyond is dropped.
    pub max_modern_requests: usize,
    /// How tool schemas are compiled and bounded (default: [`SchemaLimits::default`]: at most
    /// 256 KiB and 64 levels, 256 compiled schemas kept, `pattern`s matched in linear time, so
    /// a schema whose pattern needs backreferences or look-around is refused by
    /// [`Server::add_tool`], and a builder's tool with one logs an error at `build` and answers
    /// its calls with -32603). A server whose own schemas need such patterns sets
    /// `patterns: PatternEngine::Backtracking { .. }`: matching a client's argument can then
    /// cost up to the backtracking limit per string.
    ///
    /// [`SchemaLimits::default`]: modelctx_types::schema::SchemaLimits::default
    #[cfg(feature = "validation")]
    pub schema_limits: modelctx_types::schema::SchemaLimits,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            page_size: 100,
            limits: crate::limits::Limits::default(),
            list_cache: None,
            max_uri_len: 8 * 1024,
            max_modern_requests: 1024,
            #[cfg(feature = "validation")]
            schema_limits: modelctx_types::schema::SchemaLimits::default(),
        }
    }
}

/// Builds a [`Server`].
#[derive(Debug)]
pub struct ServerBuilder {
    name: String,
    version: String,
    instructions: Option<String>,
    settings: Settings,
    tools: BTreeMap<String, Tool>,
    prompts: BTreeMap<String, Prompt>,
    resources: BTreeMap<String, Resource>,
    templates: BTreeMap<String, ResourceTemplate>,
    declare_tools: bool,
    declare_prompts: bool,
    declare_resources: bool,
    state_key: Option<modelctx_session::state::StateKey>,
    subscribe_hook: Option<crate::resource::SubscribeHook>,
    session_store: Option<Arc<dyn crate::run::SessionStore>>,
}

impl ServerBuilder {
    /// Decides which resources a connection may hear of changes to (default: any resource,
    /// for every connection). `check` gets the URI and the connection's principal; when it
    /// says no, a legacy `resources/subscribe` is refused with -32602, and no
    /// `notifications/resources/updated` for that URI reaches the connection (a modern listen
    /// stream's `resourceSubscriptions` are acknowledged, but the refused URIs' updates are
    /// not sent on them). `check` runs on the connection's task: keep it quick.
    ///
    /// ```
    /// use modelctx_server::{Server, Subscribe};
    ///
    /// let server = Server::builder("files", "1.0.0")
    ///     .declare_resources()
    ///     .on_subscribe(|s: &Subscribe<'_>| {
    ///         s.uri.starts_with("file:///public/") || s.principal == Some("admin")
    ///     })
    ///     .build();
    /// # drop(server);
    /// ```
    pub fn on_subscribe<F>(mut self, check: F) -> Self
    where
        F: Fn(&crate::resource::Subscribe<'_>) -> bool + Send + Sync + 'static,
    {
        self.subscribe_hook = Some(crate::resource::SubscribeHook(Arc::new(check)));
        self
    }

    /// Where the states of legacy HTTP sessions live (default: an
    /// [`InMemoryStore`](crate::InMemoryStore) of this process). Used with feature `http`.
    pub fn session_store(mut self, store: Arc<dyn crate::run::SessionStore>) -> Self {
        self.session_store = Some(store);
        self
    }

    /// Instructions for the client's model (`instructions`).
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// Settings.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Adds a tool (a later tool of the same name replaces an earlier one).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.declare_tools = true;
        self.tools.insert(tool.name.clone(), tool);
        self
    }

    /// Adds a prompt (a later prompt of the same name replaces an earlier one).
    pub fn prompt(mut self, prompt: Prompt) -> Self {
        self.declare_prompts = true;
        self.prompts.insert(prompt.name.clone(), prompt);
        self
    }

    /// Adds a resource (a later one at the same URI replaces an earlier one).
    pub fn resource(mut self, resource: Resource) -> Self {
        self.declare_resources = true;
        self.resources.insert(resource.uri.clone(), resource);
        self
    }

    /// Adds a resource template (a later one with the same template replaces an earlier one).
    pub fn resource_template(mut self, template: ResourceTemplate) -> Self {
        self.declare_resources = true;
        self.templates
            .insert(template.template.as_str().to_owned(), template);
        self
    }

    /// Declares the resources capability even without resources yet.
    pub fn declare_resources(mut self) -> Self {
        self.declare_resources = true;
        self
    }

    /// Declares the prompts capability even without prompts yet.
    pub fn declare_prompts(mut self) -> Self {
        self.declare_prompts = true;
        self
    }

    /// The key that seals the `requestState` of modern round trips (default: a random key of
    /// this process). Servers behind a load balancer share one, so that any of them accepts
    /// the retry of a round trip another began.
    pub fn state_key(mut self, key: modelctx_session::state::StateKey) -> Self {
        self.state_key = Some(key);
        self
    }

    /// Declares the tools capability even without tools yet (they may be added while the server
    /// runs).
    pub fn declare_tools(mut self) -> Self {
        self.declare_tools = true;
        self
    }

    /// The server.
    pub fn build(self) -> Server {
        let mut capabilities = JsonObject::new();
        capabilities.insert("logging".into(), json!({}));
        if self.declare_tools {
            capabilities.insert("tools".into(), json!({"listChanged": true}));
        }
        if self.declare_prompts {
            capabilities.insert("prompts".into(), json!({"listChanged": true}));
        }
        if self.declare_resources {
            capabilities.insert(
                "resources".into(),
                json!({"subscribe": true, "listChanged": true}),
            );
        }
        if self.prompts.values().any(|p| !p.completers.is_empty())
            || self.templates.values().any(|t| !t.completers.is_empty())
        {
            capabilities.insert("completions".into(), json!({}));
        }
        let mut config = ServerConfig::new(&self.name, &self.version, capabilities);
        config.instructions = self.instructions;
        config.limits.max_uri_len = self.settings.max_uri_len;
        let (changes, _) = broadcast::channel(64);
        let key = self.state_key.unwrap_or_else(random_key);
        #[cfg(feature = "validation")]
        let schemas = modelctx_types::schema::SchemaCache::new(self.settings.schema_limits);
        // A tool given to the builder with a schema that cannot be used (`add_tool` refuses
        // those) answers its calls with -32603; say so once, when the server is built.
        #[cfg(feature = "validation")]
        for tool in self.tools.values() {
            for schema in std::iter::once(&tool.input_schema).chain(tool.output_schema.as_ref()) {
                if let Err(e) = schemas.validator(schema) {
                    tracing::error!(
                        "tool {}: its schema is not usable, so its calls will fail: {e}",
                        tool.name
                    );
                }
            }
        }
        Server {
            shared: Arc::new(Shared {
                sealer: Arc::new(modelctx_session::state::StateSealer::new(key)),
                limiter: Arc::new(crate::limits::Limiter::new(self.settings.limits)),
                modern_requests: Arc::new(tokio::sync::Semaphore::new(
                    self.settings.max_modern_requests,
                )),
                subscribe_hook: self.subscribe_hook,
                #[cfg(feature = "http")]
                legacy: crate::http::Legacy::new(
                    self.session_store
                        .unwrap_or_else(|| Arc::new(crate::run::InMemoryStore::new())),
                ),
                load: LoadCounters::default(),
                #[cfg(feature = "validation")]
                schemas,
                config: Arc::new(config),
                settings: self.settings,
                registry: RwLock::new(Registry {
                    tools: self.tools,
                    prompts: self.prompts,
                    resources: self.resources,
                    templates: self.templates,
                }),
                changes,
            }),
        }
    }
}

/// A random key for this process's round trips.
fn random_key() -> modelctx_session::state::StateKey {
    let mut secret = [0u8; 32];
    // A guessable key would let clients forge round-trip state: no fallback.
    getrandom::fill(&mut secret).expect("the operating system's random number generator works");
    modelctx_session::state::StateKey::new("local", secret.to_vec())
        .expect("a valid id and a 32-byte secret")
}

/// What the server offers.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(crate) tools: BTreeMap<String, Tool>,
    pub(crate) prompts: BTreeMap<String, Prompt>,
    pub(crate) resources: BTreeMap<String, Resource>,
    pub(crate) templates: BTreeMap<String, ResourceTemplate>,
}

impl Registry {
    /// The completer of variable `variable` of the template `uri_template`.
    pub(crate) fn template_completer(
        &self,
        uri_template: &str,
        variable: &str,
    ) -> Result<Option<crate::prompt::Completer>, ErrorObject> {
        crate::resource::template_completer(&self.templates, uri_template, variable)
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    /// Shared by every session of the server (a session takes no copy of it).
    pub(crate) config: Arc<ServerConfig>,
    /// Compiled tool schemas.
    #[cfg(feature = "validation")]
    pub(crate) schemas: modelctx_types::schema::SchemaCache,
    /// Connections and handlers under way.
    pub(crate) load: LoadCounters,
    /// Counts requests against the limits.
    pub(crate) limiter: Arc<crate::limits::Limiter>,
    /// Places for modern HTTP requests being handled (`Settings::max_modern_requests`).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) modern_requests: Arc<tokio::sync::Semaphore>,
    /// Decides which resources a connection may hear of changes to.
    pub(crate) subscribe_hook: Option<crate::resource::SubscribeHook>,
    /// Seals the `requestState` of modern round trips.
    pub(crate) sealer: Arc<modelctx_session::state::StateSealer>,
    pub(crate) settings: Settings,
    pub(crate) registry: RwLock<Registry>,
    pub(crate) changes: broadcast::Sender<Change>,
    /// Legacy HTTP sessions: their store, and their requests still running.
    #[cfg(feature = "http")]
    pub(crate) legacy: crate::http::Legacy,
}

/// Counters of what is under way.
#[derive(Debug, Default)]
pub(crate) struct LoadCounters {
    pub(crate) connections: std::sync::atomic::AtomicUsize,
    pub(crate) handlers: std::sync::atomic::AtomicUsize,
}

/// One unit of load, counted while it lives.
pub(crate) struct Counted<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Counted<'a> {
    pub(crate) fn new(counter: &'a std::sync::atomic::AtomicUsize) -> Self {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Counted(counter)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What a server has under way: every count returns to zero when the work ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Load {
    /// Connections served (stdio, in-memory), and requests being served on their own
    /// (a legacy HTTP session's POST, a modern HTTP request): an idle legacy session counts none.
    pub connections: usize,
    /// Handlers running.
    pub handlers: usize,
}

/// Why a change to what the server offers was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The server did not declare the capability (declare it when building).
    #[error("the server did not declare the {0} capability")]
    NotDeclared(&'static str),
    /// A tool's input or output schema cannot be used (an unsupported dialect, an external
    /// `$ref`, too large or too deep).
    #[error("unusable schema: {0}")]
    Schema(String),
}

/// An MCP server: what it offers, served on any number of connections at once.
///
/// Cheap to clone (an `Arc`): every clone is the same server, so a handler that captures one
/// can change what the server offers while it runs.
///
/// ```no_run
/// use modelctx_server::{Server, Tool};
///
/// # #[derive(serde::Deserialize, schemars::JsonSchema)]
/// # struct Echo { text: String }
/// # async fn echo(args: Echo) -> String { args.text }
/// # async fn run() -> std::io::Result<()> {
/// let server = Server::builder("echo-server", "1.0.0")
///     .tool(Tool::new("echo", echo))
///     .build();
/// // One connection on stdin/stdout:
/// server.serve_stdio().await?;
/// // Or Streamable HTTP, both eras on one endpoint (feature `http`):
/// let addr = "127.0.0.1:8080".parse().expect("an address");
/// let running = server
///     .serve_http(addr, modelctx_http::server::ServerConfig::default())
///     .await?;
/// # drop(running); Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Server {
    pub(crate) shared: Arc<Shared>,
}

impl Server {
    /// A builder for a server named `name`, of version `version` (its `serverInfo`).
    ///
    /// ```
    /// use modelctx_server::{NoArgs, Server, Settings, Tool};
    ///
    /// async fn now(_: NoArgs) -> &'static str {
    ///     "noon"
    /// }
    ///
    /// let mut settings = Settings::default();
    /// settings.page_size = 50;
    /// let server = Server::builder("clock", "1.0.0")
    ///     .instructions("Tells the time.")
    ///     .settings(settings)
    ///     .tool(Tool::new("now", now).description("The time of day"))
    ///     .build();
    /// assert_eq!(server.load().connections, 0);
    /// ```
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> ServerBuilder {
        ServerBuilder {
            name: name.into(),
            version: version.into(),
            instructions: None,
            settings: Settings::default(),
            tools: BTreeMap::new(),
            prompts: BTreeMap::new(),
            resources: BTreeMap::new(),
            templates: BTreeMap::new(),
            declare_tools: false,
            declare_prompts: false,
            declare_resources: false,
            state_key: None,
            subscribe_hook: None,
            session_store: None,
        }
    }

    /// What the server has under way.
    pub fn load(&self) -> Load {
        use std::sync::atomic::Ordering::SeqCst;
        Load {
            connections: self.shared.load.connections.load(SeqCst),
            handlers: self.shared.load.handlers.load(SeqCst),
        }
    }

    fn declared(&self, capability: &'static str) -> Result<(), RegisterError> {
        if self.shared.config.capabilities.contains_key(capability) {
            Ok(())
        } else {
            Err(RegisterError::NotDeclared(capability))
        }
    }

    /// Adds (or replaces) a tool while the server runs; connected clients are told the list
    /// changed.
    ///
    /// ```
    /// use modelctx_server::{NoArgs, Server, Tool};
    ///
    /// async fn secret(_: NoArgs) -> &'static str {
    ///     "42"
    /// }
    ///
    /// // Declared when built, so that clients expect tools (and their list to change).
    /// let server = Server::builder("vault", "1.0.0").declare_tools().build();
    /// server.add_tool(Tool::new("secret", secret)).expect("tools are declared");
    /// assert!(server.remove_tool("secret"));
    /// ```
    pub fn add_tool(&self, tool: Tool) -> Result<(), RegisterError> {
        self.declared("tools")?;
        #[cfg(feature = "validation")]
        for schema in std::iter::once(&tool.input_schema).chain(tool.output_schema.as_ref()) {
            self.shared
                .schemas
                .validator(schema)
                .map_err(|e| RegisterError::Schema(e.to_string()))?;
        }
        self.registry_mut().tools.insert(tool.name.clone(), tool);
        let _ = self.shared.changes.send(Change::List(ListKind::Tools));
        Ok(())
    }

    /// Removes a tool; connected clients are told the list changed. Returns whether it existed.
    pub fn remove_tool(&self, name: &str) -> bool {
        let removed = self.registry_mut().tools.remove(name).is_some();
        if removed {
            let _ = self.shared.changes.send(Change::List(ListKind::Tools));
        }
        removed
    }

    /// Adds (or replaces) a prompt while the server runs; connected clients are told.
    pub fn add_prompt(&self, prompt: Prompt) -> Result<(), RegisterError> {
        self.declared("prompts")?;
        self.registry_mut()
            .prompts
            .insert(prompt.name.clone(), prompt);
        let _ = self.shared.changes.send(Change::List(ListKind::Prompts));
        Ok(())
    }

    /// Removes a prompt; connected clients are told. Returns whether it existed.
    pub fn remove_prompt(&self, name: &str) -> bool {
        let removed = self.registry_mut().prompts.remove(name).is_some();
        if removed {
            let _ = self.shared.changes.send(Change::List(ListKind::Prompts));
        }
        removed
    }

    /// Adds (or replaces) a resource while the server runs; connected clients are told.
    pub fn add_resource(&self, resource: Resource) -> Result<(), RegisterError> {
        self.declared("resources")?;
        self.registry_mut()
            .resources
            .insert(resource.uri.clone(), resource);
        let _ = self.shared.changes.send(Change::List(ListKind::Resources));
        Ok(())
    }

    /// Adds (or replaces) a resource template while the server runs; connected clients are told.
    pub fn add_resource_template(&self, template: ResourceTemplate) -> Result<(), RegisterError> {
        self.declared("resources")?;
        self.registry_mut()
            .templates
            .insert(template.template.as_str().to_owned(), template);
        let _ = self.shared.changes.send(Change::List(ListKind::Resources));
        Ok(())
    }

    /// Removes the resource template `uri_template`; connected clients are told. Returns
    /// whether it existed.
    pub fn remove_resource_template(&self, uri_template: &str) -> bool {
        let removed = self.registry_mut().templates.remove(uri_template).is_some();
        if removed {
            let _ = self.shared.changes.send(Change::List(ListKind::Resources));
        }
        removed
    }

    /// Removes the resource at `uri`; connected clients are told. Returns whether it existed.
    pub fn remove_resource(&self, uri: &str) -> bool {
        let removed = self.registry_mut().resources.remove(uri).is_some();
        if removed {
            let _ = self.shared.changes.send(Change::List(ListKind::Resources));
        }
        removed
    }

    /// Tells the clients subscribed to `uri` that it changed: legacy clients that subscribed
    /// with `resources/subscribe`, modern listen streams whose filter names it.
    pub fn notify_resource_updated(&self, uri: &str) {
        let _ = self.shared.changes.send(Change::Updated(Arc::from(uri)));
    }

    fn registry_mut(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.shared
            .registry
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl Shared {
    pub(crate) fn registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// The work of a request that runs on its own task, given its context.
pub(crate) type Runner =
    Box<dyn FnOnce(Context) -> BoxFuture<Result<Value, ErrorObject>> + Send + 'static>;

/// How one request is answered.
pub(crate) enum Route {
    /// Answered at once.
    Now(Result<Value, ErrorObject>),
    /// Answered by a handler, on its own task.
    Run(Runner),
}

/// Decides how to answer `request`.
pub(crate) fn route(shared: &Arc<Shared>, request: &IncomingRequest) -> Route {
    // `tools/call`, the hot path: its two fields straight from the raw params, without building
    // the whole object first and converting it (and a modern call's `_meta` with it). Anything
    // unusual (not an object, no name, a field twice) takes the general path below, which words
    // the error as before.
    if request.method == "tools/call"
        && let Some(raw) = request.params.as_deref()
        && raw.get().trim_start().starts_with('{')
        && let Ok(call) = serde_json::from_str::<Call>(raw.get())
    {
        return call_route(shared, call);
    }
    let params: JsonObject = match request.params.as_deref() {
        Some(raw) => match serde_json::from_str(raw.get()) {
            Ok(p) => p,
            Err(e) => return Route::Now(Err(invalid_params(format!("invalid params: {e}")))),
        },
        None => JsonObject::new(),
    };
    let version = request.version;
    match request.method.as_str() {
        "tools/list" => Route::Now(list_tools(shared, version, &params)),
        "tools/call" => match serde_json::from_value(Value::Object(params)) {
            Ok(call) => call_route(shared, call),
            Err(e) => Route::Now(Err(invalid_params(format!("invalid params: {e}")))),
        },
        "resources/list" => Route::Now(crate::resource::list(shared, &params)),
        "resources/templates/list" => Route::Now(crate::resource::list_templates(shared, &params)),
        "resources/read" => crate::resource::read(shared, &params, version),
        "prompts/list" => Route::Now(crate::prompt::list(shared, version, &params)),
        "prompts/get" => crate::prompt::get(shared, params),
        "completion/complete" => crate::prompt::complete(shared, params),
        other => Route::Now(Err(ErrorObject::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {other}"),
        ))),
    }
}

/// The params of `tools/call` that routing reads.
#[derive(Deserialize)]
struct Call {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

fn call_route(shared: &Arc<Shared>, call: Call) -> Route {
    let Some(tool) = shared.registry().tools.get(&call.name).cloned() else {
        return Route::Now(Err(invalid_params(format!("unknown tool: {}", call.name))));
    };
    let arguments = call.arguments.unwrap_or_else(|| json!({}));
    let shared = shared.clone();
    Route::Run(Box::new(move |context| {
        Box::pin(call_tool(shared, tool, arguments, context))
    }))
}

pub(crate) fn invalid_params(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::INVALID_PARAMS, message)
}

/// One page of a list sorted by key: the items after the cursor's key, and the next cursor.
pub(crate) fn page<'a, T>(
    items: &'a BTreeMap<String, T>,
    params: &JsonObject,
    size: usize,
) -> Result<(Vec<&'a T>, Option<String>), ErrorObject> {
    let after = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(cursor)) => Some(
            crate::cursor::decode(cursor)
                .ok_or_else(|| invalid_params(format!("invalid cursor: {cursor:?}")))?,
        ),
        Some(_) => return Err(invalid_params("the cursor must be a string")),
    };
    let range = match &after {
        Some(key) => {
            items.range::<String, _>((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded))
        }
        None => items.range::<String, _>(..),
    };
    let mut page: Vec<(&String, &T)> = range.take(size.max(1) + 1).collect();
    let next = (page.len() > size.max(1)).then(|| {
        page.truncate(size.max(1));
        crate::cursor::encode(page.last().map(|(k, _)| k.as_str()).unwrap_or_default())
    });
    Ok((page.into_iter().map(|(_, v)| v).collect(), next))
}

fn list_tools(
    shared: &Shared,
    version: ProtocolVersion,
    params: &JsonObject,
) -> Result<Value, ErrorObject> {
    let registry = shared.registry();
    let (tools, next) = page(&registry.tools, params, shared.settings.page_size)?;
    let tools: Vec<Value> = tools.into_iter().map(|t| write::tool(t, version)).collect();
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
pub(crate) async fn call_tool(
    shared: Arc<Shared>,
    tool: Tool,
    arguments: Value,
    context: Context,
) -> Result<Value, ErrorObject> {
    let version = context.protocol_version();
    let modern = context.inner.modern;
    if !arguments.is_object() {
        return Ok(write::tool_output(
            &ToolOutput::error("invalid arguments: the arguments must be a JSON object"),
            version,
        ));
    }
    #[cfg(feature = "validation")]
    {
        let validator = shared.schemas.validator(&tool.input_schema).map_err(|e| {
            internal(format!(
                "the input schema of tool {} is not usable: {e}",
                tool.name
            ))
        })?;
        let violations = validator.validate(&arguments, MAX_VIOLATIONS);
        if !violations.is_empty() {
            // A tool execution error: the model can read it and try again.
            let text = crate::schema::describe(&violations);
            return Ok(write::tool_output(&ToolOutput::error(text), version));
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
        let validator = shared.schemas.validator(schema).map_err(|e| {
            internal(format!(
                "the output schema of tool {} is not usable: {e}",
                tool.name
            ))
        })?;
        let violations = validator.validate(structured, MAX_VIOLATIONS);
        if !violations.is_empty() {
            let text = crate::schema::describe(&violations);
            return Err(internal(format!(
                "the result of tool {} does not match its output schema: {}",
                tool.name,
                text.trim_start_matches("invalid arguments")
                    .trim_start_matches(": ")
            )));
        }
    }
    #[cfg(not(feature = "validation"))]
    let _ = shared;
    Ok(write::tool_output(&output, version))
}

#[cfg(feature = "validation")]
fn internal(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, message)
}
