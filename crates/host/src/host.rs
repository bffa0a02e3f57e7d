//! The host: one client per configured server, kept up, behind one object.
//!
//! OWNER: the host-core work package (connections, status, reconnect, shutdown, routing,
//! `changes`). [`Shared`] is what the handlers (`handlers.rs`) read; add fields as needed.
//!
//! Each enabled server has a *supervisor*, a task of its own that connects its client, lists
//! what the server declares into the [`Catalog`], follows its notifications and health, and when
//! the connection fails or ends takes its items out of the aggregate and tries again after a
//! backoff, until [`Host::shutdown`]. The clients' own `Reconnect` is disabled
//! ([`Reconnect::NEVER`]): a single level re-establishes connections, so that a server that is
//! away is seen as away (its items leave the aggregate, calls fail at once with
//! [`HostError::NotConnected`]) instead of calls waiting on a client that reconnects silently,
//! and its lists are fetched again whenever it comes back.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use modelctx_client::{
    CallOptions, Client, CompletionRef, ConnectError, Elicitation, Elicited, Era, Error,
    InputError, LogLevel, Reconnect, RecvError, ServerCommand, ServerNotification, TaskError,
    TaskHandle, TaskOptions, model,
};
use modelctx_types::JsonObject;
use tokio::sync::{Notify, broadcast, oneshot, watch};
use tokio::task::JoinSet;

use crate::catalog::{
    Catalog, Collision, HostPrompt, HostResource, HostTemplate, HostTool, Namespace,
};
use crate::config::{HostConfig, ServerConfig, TransportConfig};
use crate::policy::{Decision, DefaultPolicy, Policy, ToolCall};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The application's model: answers every server's `sampling/createMessage` (after the
/// [`Policy`]); its first argument is the asking server's config name.
pub(crate) type Sampler = Arc<
    dyn Fn(
            String,
            model::CreateMessageRequestParams,
        ) -> BoxFuture<Result<model::CreateMessageResult, InputError>>
        + Send
        + Sync,
>;

/// The application's elicitation handler (after the [`Policy`]); its first argument is the
/// asking server's config name.
pub(crate) type Elicitor =
    Arc<dyn Fn(String, Elicitation) -> BoxFuture<Result<Elicited, InputError>> + Send + Sync>;

/// The application's roots handler: answers a server's `roots/list` instead of the host's
/// tables; its arguments are the asking server's config name and the roots the tables hold for
/// it (`None` when they hold none).
pub(crate) type RootsRouter = Arc<
    dyn Fn(String, Option<Vec<model::Root>>) -> BoxFuture<Result<Vec<model::Root>, InputError>>
        + Send
        + Sync,
>;

/// What every connection of the host shares: settings, handlers, the policy.
pub(crate) struct Shared {
    pub(crate) client_name: String,
    pub(crate) client_version: String,
    pub(crate) policy: Arc<dyn Policy>,
    pub(crate) sampler: Option<Sampler>,
    pub(crate) elicitor: Option<Elicitor>,
    /// Roots every server sees, unless it has its own in `roots_per_server`. Read each time a
    /// server asks (`handlers.rs`): a change here is seen by the next `roots/list`.
    pub(crate) roots: std::sync::RwLock<Option<Vec<model::Root>>>,
    pub(crate) roots_per_server:
        std::sync::RwLock<std::collections::BTreeMap<String, Vec<model::Root>>>,
    /// Answers `roots/list` when set (the tables' roots are its fallback argument).
    pub(crate) roots_router: Option<RootsRouter>,
    pub(crate) connect_timeout: Duration,
    /// The OAuth client of every HTTP server without an `Authorization` header.
    pub(crate) oauth: Option<modelctx_client::auth::OAuth>,
}

/// The capacity of [`Host::changes`]: a receiver that falls this far behind misses events
/// (it is told how many, and lists again).
const EVENT_QUEUE: usize = 256;

/// How long [`Host::shutdown`] waits for the supervisors to close their clients before it
/// aborts them (each client's close is itself bounded: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL).
const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);

/// The longest a health probe may wait for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The variables a stdio server inherits from the host's environment (besides those of its
/// entry's `env`): the set the MCP SDKs' stdio clients pass on, which servers started with
/// `npx` or `uvx` need.
#[cfg(unix)]
const INHERITED_ENV: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];
#[cfg(not(unix))]
const INHERITED_ENV: &[&str] = &[
    "APPDATA",
    "HOMEDRIVE",
    "HOMEPATH",
    "LOCALAPPDATA",
    "PATH",
    "PROCESSOR_ARCHITECTURE",
    "PROGRAMFILES",
    "SYSTEMDRIVE",
    "SYSTEMROOT",
    "TEMP",
    "USERNAME",
    "USERPROFILE",
];

/// Builds a [`Host`].
#[must_use]
pub struct HostBuilder {
    config: HostConfig,
    namespace: Namespace,
    shared: Shared,
    backoff: (Duration, Duration),
    health_check: Option<Duration>,
}

impl std::fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuilder")
            .field("config", &self.config)
            .field("namespace", &self.namespace)
            .field("backoff", &self.backoff)
            .field("health_check", &self.health_check)
            .finish_non_exhaustive()
    }
}

impl HostBuilder {
    /// The host's name and version, as its clients tell each server.
    pub fn client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.shared.client_name = name.into();
        self.shared.client_version = version.into();
        self
    }

    /// How tools and prompts are named (default: `server__name`).
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = namespace;
        self
    }

    /// What the application approves (default: [`DefaultPolicy`]).
    pub fn policy(mut self, policy: impl Policy) -> Self {
        self.shared.policy = Arc::new(policy);
        self
    }

    /// The application's model, for every server's sampling requests (declares `sampling`).
    pub fn on_sampling<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(String, model::CreateMessageRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<model::CreateMessageResult, InputError>> + Send + 'static,
    {
        self.shared.sampler = Some(Arc::new(move |server, params| {
            Box::pin(handler(server, params))
        }));
        self
    }

    /// The application's elicitation handler, for every server (declares `elicitation`).
    pub fn on_elicitation<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(String, Elicitation) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Elicited, InputError>> + Send + 'static,
    {
        self.shared.elicitor = Some(Arc::new(move |server, e| Box::pin(handler(server, e))));
        self
    }

    /// Roots every server sees (declares `roots`).
    pub fn roots(mut self, roots: Vec<model::Root>) -> Self {
        *self
            .shared
            .roots
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(roots);
        self
    }

    /// Roots the server `server` sees instead of the shared ones.
    pub fn server_roots(mut self, server: impl Into<String>, roots: Vec<model::Root>) -> Self {
        self.shared
            .roots_per_server
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(server.into(), roots);
        self
    }

    /// The application's roots handler, for every server (declares `roots`; default: none,
    /// the servers get the roots of [`HostBuilder::roots`] and [`HostBuilder::server_roots`]).
    /// It answers each server's `roots/list`, called with the asking server's config name and
    /// the roots those tables hold for it now (`None` when they hold none): a handler that has
    /// nothing better answers with them. An error is the client's refusal (as for sampling).
    pub fn on_roots<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(String, Option<Vec<model::Root>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<model::Root>, InputError>> + Send + 'static,
    {
        self.shared.roots_router = Some(Arc::new(move |server, roots| {
            Box::pin(handler(server, roots))
        }));
        self
    }

    /// How long a server's connection may take when its entry does not say (default: 30 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.shared.connect_timeout = timeout;
        self
    }

    /// Authorizes the HTTP servers with `oauth` (default: none): every HTTP server whose entry
    /// sets no `Authorization` header gets it as its client's authorizer, and its tokens are
    /// kept in `oauth`'s token store under the server's URL (per authorization server and
    /// resource). `mcx login` builds its client so: a
    /// [`FileStore`](modelctx_client::auth::FileStore) for the tokens, and a
    /// [`LoopbackRedirect`](modelctx_client::auth::LoopbackRedirect)'s redirect URI and handler
    /// for the user's sign-in; without a handler, a server with no stored token fails to
    /// connect.
    pub fn oauth(mut self, oauth: modelctx_client::auth::OAuth) -> Self {
        self.shared.oauth = Some(oauth);
        self
    }

    /// What the connections of the host would share (for the handlers' tests, which build
    /// clients without starting a host).
    #[cfg(test)]
    pub(crate) fn into_shared(self) -> Shared {
        self.shared
    }

    /// The waits between the attempts to connect a server that failed or went away: `first`
    /// after the first failure, doubled after each further one up to `max` (default: 250 ms
    /// doubling to 30 s). Attempts go on until [`Host::shutdown`].
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        let first = first.max(Duration::from_millis(1));
        self.backoff = (first, max.max(first));
        self
    }

    /// How often a connected server is probed (`ping` in the legacy era, `server/discover` in
    /// the modern one, each given at most 10 s): a probe the transport fails, or that gets no
    /// answer, ends the connection and the host reconnects (default: every 30 s; `None`: no
    /// periodic probe). A routed call that the transport fails probes its server at once
    /// either way.
    ///
    /// A stdio server that exits is seen at once without it; a modern Streamable HTTP server has
    /// no connection to lose between requests, so the probe is what sees it gone.
    pub fn health_check(mut self, every: Option<Duration>) -> Self {
        self.health_check = every.map(|d| d.max(Duration::from_millis(1)));
        self
    }

    /// Connects every enabled server concurrently and returns once each one is connected (its
    /// lists fetched) or has failed its first attempt (the failed ones go on being retried in
    /// the background). A server's attempt (connecting, then listing what it declares) is
    /// bounded by its entry's `timeout`, else the [`connect_timeout`](Self::connect_timeout).
    /// Must be called within a Tokio runtime: the host's tasks run on it.
    ///
    /// A stdio server is started with its entry's `args`, `cwd` and `env`, over the variables
    /// the MCP SDKs' stdio clients pass on from the host's environment (Unix: `HOME`,
    /// `LOGNAME`, `PATH`, `SHELL`, `TERM`, `USER`; Windows: `APPDATA`, `HOMEDRIVE`, `HOMEPATH`,
    /// `LOCALAPPDATA`, `PATH`, `PROCESSOR_ARCHITECTURE`, `PROGRAMFILES`, `SYSTEMDRIVE`,
    /// `SYSTEMROOT`, `TEMP`, `USERNAME`, `USERPROFILE`); each line it writes on stderr is a
    /// `tracing` event at INFO level, target `modelctx_host::stderr`, with the entry's name in
    /// the `server` field. An HTTP server is sent its entry's `headers` with every request.
    pub async fn start(self) -> Host {
        let order: Vec<String> = self.config.servers.iter().map(|s| s.name.clone()).collect();
        let (events, _) = broadcast::channel(EVENT_QUEUE);
        let slots = self
            .config
            .servers
            .into_iter()
            .map(|config| {
                let state = if config.disabled {
                    ServerState::Disabled
                } else {
                    ServerState::Connecting
                };
                Slot {
                    config,
                    live: Mutex::new(Live {
                        state,
                        client: None,
                        protocol_version: None,
                        server_info: None,
                        subscriptions: BTreeSet::new(),
                        absent: Absent::default(),
                    }),
                    check: Notify::new(),
                }
            })
            .collect();
        let core = Arc::new(Core {
            shared: Arc::new(self.shared),
            slots,
            catalog: Mutex::new(Catalog::new(self.namespace, order)),
            events,
            shut_down: AtomicBool::new(false),
            log_level: Mutex::new(None),
            collisions: Mutex::new(Vec::new()),
            backoff: self.backoff,
            health_check: self.health_check,
        });
        let (stop, stopped) = watch::channel(false);
        let mut supervisors = JoinSet::new();
        let mut firsts = Vec::new();
        for index in 0..core.slots.len() {
            if core.slots[index].config.disabled {
                continue;
            }
            let (first, connected) = oneshot::channel();
            firsts.push(connected);
            supervisors.spawn(supervise(core.clone(), index, stopped.clone(), first));
        }
        for connected in firsts {
            // An error: the supervisor ended (the host is being dropped); nothing to wait for.
            let _ = connected.await;
        }
        Host {
            inner: Arc::new(HostInner {
                core,
                stop,
                supervisors: Mutex::new(supervisors),
            }),
        }
    }
}

/// Many MCP servers behind one object. Cheap to clone (every clone is the same host).
///
/// ```no_run
/// use modelctx_host::client::CallOptions;
/// use modelctx_host::{Host, HostConfig, HostEvent, ServerConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let mut config = HostConfig::default();
/// config.servers.push(ServerConfig::stdio("time", "uvx", vec!["mcp-server-time".into()]));
/// config.servers.push(ServerConfig::http("docs", "http://127.0.0.1:8080/mcp"));
/// let host = Host::builder(config).start().await;
/// for status in host.servers() {
///     println!("{}: {:?}", status.name, status.state);
/// }
/// let mut changes = host.changes();
/// for tool in host.tools() {
///     println!("{} (tool {} of {})", tool.name, tool.tool.name, tool.server);
/// }
/// let arguments = serde_json::json!({"timezone": "UTC"});
/// let arguments = arguments.as_object().cloned().unwrap_or_default();
/// let now = host
///     .call_tool("time__get_current_time", arguments, CallOptions::new())
///     .await?;
/// println!("{now:?}");
/// if let Ok(HostEvent::ToolsChanged) = changes.try_recv() {
///     println!("{} tools now", host.tools().len());
/// }
/// host.shutdown().await; // every child stopped
/// # Ok(()) }
/// ```
///
/// Dropping the last clone without [`shutdown`](Self::shutdown) stops every supervisor task at
/// once (aborted): each connection's client is then dropped, and a client whose last handle
/// is gone closes its connection on its own task (a child process has its stdin closed, then
/// SIGTERM, then SIGKILL), unless the application still holds a handle from
/// [`client`](Self::client). No task of the host remains; the runtime must run on for the
/// children to be stopped gracefully (a runtime shut down kills them: the client's processes
/// are killed on drop).
#[derive(Clone)]
pub struct Host {
    inner: Arc<HostInner>,
}

/// What the clients of [`Host`] share; dropped with the last one.
struct HostInner {
    core: Arc<Core>,
    /// `true`: every supervisor stops (closes its client, state Stopped).
    stop: watch::Sender<bool>,
    /// The supervisor of every enabled server (aborted when dropped).
    supervisors: Mutex<JoinSet<()>>,
}

/// What the supervisors share with the host's handles.
struct Core {
    shared: Arc<Shared>,
    /// One per configured server, in config order.
    slots: Vec<Slot>,
    catalog: Mutex<Catalog>,
    events: broadcast::Sender<HostEvent>,
    /// [`Host::shutdown`] has begun: calls fail with [`HostError::ShutDown`].
    shut_down: AtomicBool,
    /// The log level set with [`Host::set_log_level`], given to every later connection.
    log_level: Mutex<Option<LogLevel>>,
    /// The collisions of the aggregate already logged.
    collisions: Mutex<Vec<Collision>>,
    /// The first wait and the longest between two attempts.
    backoff: (Duration, Duration),
    health_check: Option<Duration>,
}

/// One configured server.
struct Slot {
    config: ServerConfig,
    live: Mutex<Live>,
    /// A routed call saw the transport fail: probe the server now.
    check: Notify,
}

/// Where one server is now.
struct Live {
    state: ServerState,
    /// Its client, while Ready.
    client: Option<Client>,
    protocol_version: Option<modelctx_client::ProtocolVersion>,
    server_info: Option<model::Implementation>,
    /// The resources the application subscribed to on it (subscribed again after a reconnect).
    subscriptions: BTreeSet<String>,
    /// While it is not connected: the names its tools and prompts were shown under and its
    /// resources' URIs when it went away, so that a call to one of them is
    /// [`HostError::NotConnected`] rather than unknown (at most its last lists; emptied when
    /// it is back).
    absent: Absent,
}

/// What a server that went away had in the aggregate.
#[derive(Default)]
struct Absent {
    tools: BTreeSet<String>,
    prompts: BTreeSet<String>,
    resources: BTreeSet<String>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("servers", &self.servers())
            .finish_non_exhaustive()
    }
}

impl Host {
    /// A builder of a host of the servers of `config`.
    pub fn builder(config: HostConfig) -> HostBuilder {
        HostBuilder {
            config,
            namespace: Namespace::default(),
            shared: Shared {
                client_name: "modelctx-host".into(),
                client_version: env!("CARGO_PKG_VERSION").into(),
                policy: Arc::new(DefaultPolicy),
                sampler: None,
                elicitor: None,
                roots: Default::default(),
                roots_per_server: Default::default(),
                roots_router: None,
                connect_timeout: Duration::from_secs(30),
                oauth: None,
            },
            backoff: (Duration::from_millis(250), Duration::from_secs(30)),
            health_check: Some(Duration::from_secs(30)),
        }
    }

    fn core(&self) -> &Core {
        &self.inner.core
    }

    /// The status of every configured server, in config order.
    pub fn servers(&self) -> Vec<ServerStatus> {
        self.core()
            .slots
            .iter()
            .map(|slot| {
                let live = lock(&slot.live);
                ServerStatus {
                    name: slot.config.name.clone(),
                    state: live.state.clone(),
                    protocol_version: live.protocol_version,
                    server_info: live.server_info.clone(),
                }
            })
            .collect()
    }

    /// The client of `server` while it is connected (for what the host does not aggregate).
    /// A handle kept after the server's connection ended stays closed (the host connects a new
    /// client); one kept after the host is dropped keeps that connection open.
    pub fn client(&self, server: &str) -> Option<Client> {
        let slot = self.core().slot(server)?;
        let live = lock(&slot.live);
        live.client.clone()
    }

    /// Every tool of every connected server, namespaced.
    pub fn tools(&self) -> Vec<HostTool> {
        lock(&self.core().catalog).tools()
    }

    /// Every resource of every connected server.
    pub fn resources(&self) -> Vec<HostResource> {
        lock(&self.core().catalog).resources()
    }

    /// Every resource template of every connected server.
    pub fn resource_templates(&self) -> Vec<HostTemplate> {
        lock(&self.core().catalog).templates()
    }

    /// Every prompt of every connected server, namespaced.
    pub fn prompts(&self) -> Vec<HostPrompt> {
        lock(&self.core().catalog).prompts()
    }

    /// What the aggregate renamed or left out (names that two entries would show under, names
    /// too long, a URI two servers list), as the catalog decided; each is also logged (a
    /// `tracing` warning) when it first appears.
    pub fn collisions(&self) -> Vec<Collision> {
        lock(&self.core().catalog).collisions()
    }

    /// Calls the tool shown as `name` on its server, once the [`Policy`] approves; progress and
    /// timeout as in `options`; dropping the future cancels the call on the server.
    ///
    /// # Errors
    ///
    /// [`HostError::UnknownTool`], [`HostError::NotConnected`], [`HostError::Denied`] (the
    /// policy refused: nothing was sent), [`HostError::Server`], [`HostError::ShutDown`].
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: JsonObject,
        options: CallOptions,
    ) -> Result<model::CallToolResult, HostError> {
        let (slot, client, tool) = self.approved_call(name, &arguments).await?;
        let result = client
            .call_tool_with(&tool.tool.name, arguments, options)
            .await;
        result.map_err(|e| slot.failed(e))
    }

    /// Calls the tool shown as `name` on its server as a task
    /// ([`Client::call_tool_as_task`]), once the [`Policy`] approves, as [`Host::call_tool`]
    /// does: returns when the server has created the task, or answered at once (the handle is
    /// then complete), with a handle to follow, answer (through the host's handlers) and cancel
    /// it. Questions the server asks before the task exists are answered by the host's handlers
    /// during this call. Dropping the handle does not cancel the task
    /// ([`TaskHandle::cancel`] does).
    ///
    /// # Errors
    ///
    /// As [`Host::call_tool`]; [`HostError::Task`] when the server does not run tools as tasks
    /// (nothing was sent) or its answer is no task.
    pub async fn call_tool_as_task(
        &self,
        name: &str,
        arguments: JsonObject,
        options: TaskOptions,
    ) -> Result<TaskHandle, HostError> {
        let (slot, client, tool) = self.approved_call(name, &arguments).await?;
        let handle = client
            .call_tool_as_task(&tool.tool.name, arguments, options)
            .await;
        handle.map_err(|e| match e {
            TaskError::Call(e) => slot.failed(e),
            other => HostError::Task {
                server: tool.server.clone(),
                source: other,
            },
        })
    }

    /// The route of a call of the tool shown as `name` with `arguments`, once the policy
    /// approved it: its server's slot and client, and the tool.
    async fn approved_call(
        &self,
        name: &str,
        arguments: &JsonObject,
    ) -> Result<(&Slot, Client, HostTool), HostError> {
        let core = self.core();
        core.open()?;
        let tool = lock(&core.catalog).route_tool(name).cloned();
        let tool = tool.ok_or_else(|| {
            core.absent(name, |a| &a.tools)
                .unwrap_or_else(|| HostError::UnknownTool(name.to_owned()))
        })?;
        let (slot, client) = core.connected(&tool.server)?;
        let call = ToolCall {
            server: &tool.server,
            tool: &tool.tool,
            exposed_name: &tool.name,
            arguments,
        };
        if let Decision::Deny { reason } = core.shared.policy.approve_tool_call(&call).await {
            return Err(HostError::Denied { reason });
        }
        Ok((slot, client, tool))
    }

    /// Reads `uri` from the server that has it (the one that listed it, else the one with a
    /// template that matches it).
    ///
    /// # Errors
    ///
    /// [`HostError::UnknownResource`], [`HostError::NotConnected`], [`HostError::Server`],
    /// [`HostError::ShutDown`].
    pub async fn read_resource(&self, uri: &str) -> Result<model::ReadResourceResult, HostError> {
        self.read_resource_with(uri, CallOptions::new()).await
    }

    /// [`read_resource`](Self::read_resource) with options (timeout, progress, the client
    /// capabilities the request declares).
    ///
    /// # Errors
    ///
    /// As [`read_resource`](Self::read_resource).
    pub async fn read_resource_with(
        &self,
        uri: &str,
        options: CallOptions,
    ) -> Result<model::ReadResourceResult, HostError> {
        let (slot, client) = self.resource_owner(uri)?;
        let result = client.read_resource_with(uri, options).await;
        result.map_err(|e| slot.failed(e))
    }

    /// Gets the prompt shown as `name` from its server.
    ///
    /// # Errors
    ///
    /// [`HostError::UnknownPrompt`], [`HostError::NotConnected`], [`HostError::Server`],
    /// [`HostError::ShutDown`].
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: std::collections::BTreeMap<String, String>,
    ) -> Result<model::GetPromptResult, HostError> {
        self.get_prompt_with(name, arguments, CallOptions::new())
            .await
    }

    /// [`get_prompt`](Self::get_prompt) with options (timeout, progress, the client
    /// capabilities the request declares).
    ///
    /// # Errors
    ///
    /// As [`get_prompt`](Self::get_prompt).
    pub async fn get_prompt_with(
        &self,
        name: &str,
        arguments: std::collections::BTreeMap<String, String>,
        options: CallOptions,
    ) -> Result<model::GetPromptResult, HostError> {
        let core = self.core();
        core.open()?;
        let prompt = lock(&core.catalog).route_prompt(name).cloned();
        let prompt = prompt.ok_or_else(|| {
            core.absent(name, |a| &a.prompts)
                .unwrap_or_else(|| HostError::UnknownPrompt(name.to_owned()))
        })?;
        let (slot, client) = core.connected(&prompt.server)?;
        let arguments: Vec<(&str, &str)> = arguments
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let result = client
            .get_prompt_with(&prompt.prompt.name, &arguments, options)
            .await;
        result.map_err(|e| slot.failed(e))
    }

    /// Completions for `argument` (its current `value`) of a prompt (by the name the host
    /// shows) or a resource template (by its URI template), asked of the server that owns it;
    /// `context` holds the values of the arguments already chosen.
    ///
    /// # Errors
    ///
    /// [`HostError::UnknownPrompt`] or [`HostError::UnknownResource`] (no server has it),
    /// [`HostError::NotConnected`], [`HostError::Server`], [`HostError::ShutDown`].
    pub async fn complete(
        &self,
        reference: &CompletionRef,
        argument: &str,
        value: &str,
        context: &HashMap<String, String>,
    ) -> Result<model::CompleteResultCompletion, HostError> {
        let core = self.core();
        core.open()?;
        let (server, reference) = {
            let catalog = lock(&core.catalog);
            match reference {
                CompletionRef::Prompt(name) => {
                    let prompt = catalog
                        .route_prompt(name)
                        .ok_or_else(|| HostError::UnknownPrompt(name.clone()))?;
                    (
                        prompt.server.clone(),
                        CompletionRef::Prompt(prompt.prompt.name.clone()),
                    )
                }
                CompletionRef::Resource(template) => {
                    let server = catalog
                        .templates()
                        .into_iter()
                        .find(|t| t.template.uri_template == *template)
                        .map(|t| t.server)
                        .or_else(|| catalog.route_resource(template).map(str::to_owned))
                        .ok_or_else(|| HostError::UnknownResource(template.clone()))?;
                    (server, CompletionRef::Resource(template.clone()))
                }
                _ => return Err(HostError::UnknownResource(format!("{reference:?}"))),
            }
        };
        let (slot, client) = core.connected(&server)?;
        let result = client.complete(&reference, argument, value, context).await;
        result.map_err(|e| slot.failed(e))
    }

    /// Asks the server that has `uri` for its updates ([`HostEvent::ResourceUpdated`]); the
    /// host subscribes again whenever that server reconnects, until
    /// [`unsubscribe_resource`](Self::unsubscribe_resource).
    ///
    /// # Errors
    ///
    /// As [`read_resource`](Self::read_resource); nothing is remembered then.
    pub async fn subscribe_resource(&self, uri: &str) -> Result<(), HostError> {
        let (slot, client) = self.resource_owner(uri)?;
        client
            .subscribe_resource(uri)
            .await
            .map_err(|e| slot.failed(e))?;
        lock(&slot.live).subscriptions.insert(uri.to_owned());
        Ok(())
    }

    /// Stops the updates of `uri` (forgotten by the host even when its server is not
    /// connected now).
    ///
    /// # Errors
    ///
    /// As [`read_resource`](Self::read_resource).
    pub async fn unsubscribe_resource(&self, uri: &str) -> Result<(), HostError> {
        let core = self.core();
        core.open()?;
        let mut forgot = false;
        for slot in &core.slots {
            forgot |= lock(&slot.live).subscriptions.remove(uri);
        }
        let (slot, client) = match self.resource_owner(uri) {
            Ok(owner) => owner,
            // Not listed or not connected now: nothing to tell a server.
            Err(_) if forgot => return Ok(()),
            Err(e) => return Err(e),
        };
        let result = client.unsubscribe_resource(uri).await;
        result.map_err(|e| slot.failed(e))
    }

    /// Sets the level of the log messages every connected server that declares `logging`
    /// sends (and every server that connects later).
    ///
    /// # Errors
    ///
    /// The first server that failed it ([`HostError::Server`]; the others were still told);
    /// [`HostError::ShutDown`].
    pub async fn set_log_level(&self, level: LogLevel) -> Result<(), HostError> {
        let core = self.core();
        core.open()?;
        *lock(&core.log_level) = Some(level);
        let mut calls = JoinSet::new();
        for slot in &core.slots {
            let Some(client) = lock(&slot.live).client.clone() else {
                continue;
            };
            if client
                .server_capabilities_json()
                .is_some_and(|c| !c.contains_key("logging"))
            {
                continue;
            }
            let server = slot.config.name.clone();
            calls.spawn(async move { (server, client.set_log_level(level).await) });
        }
        let mut first = None;
        while let Some(done) = calls.join_next().await {
            if let Ok((server, Err(source))) = done {
                first.get_or_insert(HostError::Server { server, source });
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Replaces the roots every server sees (those without roots of their own,
    /// [`HostBuilder::server_roots`]) and tells each connected one that they changed (legacy:
    /// `notifications/roots/list_changed`; modern servers ask for them each time). A server
    /// that connected while the host had no roots for it did not declare `roots`: it sees them
    /// from its next connection.
    pub async fn set_roots(&self, roots: Vec<model::Root>) {
        let core = self.core();
        *core
            .shared
            .roots
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(roots);
        let own = core
            .shared
            .roots_per_server
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect::<BTreeSet<String>>();
        self.roots_changed(|name| !own.contains(name)).await;
    }

    /// Replaces the roots `server` sees (instead of the shared ones) and tells it, when
    /// connected, that they changed (as [`set_roots`](Self::set_roots)).
    pub async fn set_server_roots(&self, server: &str, roots: Vec<model::Root>) {
        self.core()
            .shared
            .roots_per_server
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(server.to_owned(), roots);
        self.roots_changed(|name| name == server).await;
    }

    /// Tells the connected servers `which` selects that their roots changed.
    async fn roots_changed(&self, which: impl Fn(&str) -> bool) {
        let mut told = JoinSet::new();
        for slot in &self.core().slots {
            if !which(&slot.config.name) {
                continue;
            }
            if let Some(client) = lock(&slot.live).client.clone() {
                let server = slot.config.name.clone();
                told.spawn(async move { (server, client.roots_changed().await) });
            }
        }
        while let Some(done) = told.join_next().await {
            if let Ok((server, Err(error))) = done {
                tracing::warn!(%server, %error, "telling the server its roots changed failed");
            }
        }
    }

    /// What changes from now on: the aggregate's lists, a server's state, updates of
    /// subscribed resources, the servers' log messages. Bounded (256 events): a receiver that falls behind
    /// is told how many it missed.
    pub fn changes(&self) -> broadcast::Receiver<HostEvent> {
        self.core().events.subscribe()
    }

    /// Closes every connection and stops every child process (bounded: stdin closed, then
    /// SIGTERM, then SIGKILL); the host serves nothing afterwards: calls fail with
    /// [`HostError::ShutDown`] and every server that was started is [`ServerState::Stopped`]
    /// (a disabled one stays [`ServerState::Disabled`]). Returns within 10 s: a supervisor
    /// that has not finished by then is aborted (its client, dropped, closes on its own task).
    pub async fn shutdown(&self) {
        let core = self.core();
        core.shut_down.store(true, Ordering::SeqCst);
        self.inner.stop.send_replace(true);
        let mut supervisors = std::mem::take(&mut *lock(&self.inner.supervisors));
        let joined = tokio::time::timeout(SHUTDOWN_BOUND, async {
            while supervisors.join_next().await.is_some() {}
        })
        .await;
        if joined.is_err() {
            tracing::warn!("the host's supervisors did not stop in time: aborted");
            supervisors.abort_all();
            while supervisors.join_next().await.is_some() {}
        }
        // Whatever a supervisor left behind (aborted ones): the same end state.
        for index in 0..core.slots.len() {
            if !core.slots[index].config.disabled {
                core.stopped(index);
            }
        }
    }

    /// The size of the host's tables, to see that each comes back to its size (tests).
    #[doc(hidden)]
    pub fn table_sizes(&self) -> TableSizes {
        let core = self.core();
        let catalog = lock(&core.catalog);
        let (mut clients, mut subscriptions) = (0, 0);
        for slot in &core.slots {
            let live = lock(&slot.live);
            clients += usize::from(live.client.is_some());
            subscriptions += live.subscriptions.len();
        }
        TableSizes {
            tools: catalog.tools().len(),
            prompts: catalog.prompts().len(),
            resources: catalog.resources().len(),
            templates: catalog.templates().len(),
            clients,
            subscriptions,
            supervisors: lock(&self.inner.supervisors).len(),
            event_receivers: core.events.receiver_count(),
        }
    }

    fn resource_owner(&self, uri: &str) -> Result<(&Slot, Client), HostError> {
        let core = self.core();
        core.open()?;
        let (listed, server) = {
            let catalog = lock(&core.catalog);
            let listed = catalog.resources().iter().any(|r| r.resource.uri == uri);
            (listed, catalog.route_resource(uri).map(str::to_owned))
        };
        // A URI that a server away listed is its (rather than a template's of another).
        if !listed && let Some(away) = core.absent(uri, |a| &a.resources) {
            return Err(away);
        }
        let server = server.ok_or_else(|| HostError::UnknownResource(uri.to_owned()))?;
        core.connected(&server)
    }
}

/// The size of a host's tables (see `Host::table_sizes`).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableSizes {
    /// Tools in the aggregate.
    pub tools: usize,
    /// Prompts in the aggregate.
    pub prompts: usize,
    /// Resources in the aggregate.
    pub resources: usize,
    /// Templates in the aggregate.
    pub templates: usize,
    /// Clients of connected servers.
    pub clients: usize,
    /// Resource subscriptions remembered.
    pub subscriptions: usize,
    /// Supervisor tasks.
    pub supervisors: usize,
    /// Receivers of `Host::changes`.
    pub event_receivers: usize,
}

impl Drop for HostInner {
    fn drop(&mut self) {
        // The last handle is gone: the supervisors are aborted when their set drops (below);
        // tell them too, in case one is between polls.
        self.stop.send_replace(true);
    }
}

impl Core {
    fn slot(&self, server: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.config.name == server)
    }

    fn open(&self) -> Result<(), HostError> {
        if self.shut_down.load(Ordering::SeqCst) {
            Err(HostError::ShutDown)
        } else {
            Ok(())
        }
    }

    /// The slot of `server` and its client, while Ready.
    fn connected(&self, server: &str) -> Result<(&Slot, Client), HostError> {
        self.open()?;
        let slot = self.slot(server).ok_or_else(|| HostError::NotConnected {
            server: server.to_owned(),
            state: ServerState::Stopped,
        })?;
        let live = lock(&slot.live);
        match (&live.state, &live.client) {
            (ServerState::Ready, Some(client)) => Ok((slot, client.clone())),
            (ServerState::Stopped, _) => Err(HostError::ShutDown),
            (state, _) => Err(HostError::NotConnected {
                server: server.to_owned(),
                state: state.clone(),
            }),
        }
    }

    /// [`HostError::NotConnected`] for `name` when a server that is away had it (in the
    /// `which` list of what it had).
    fn absent(
        &self,
        name: &str,
        which: impl Fn(&Absent) -> &BTreeSet<String>,
    ) -> Option<HostError> {
        self.slots.iter().find_map(|slot| {
            let live = lock(&slot.live);
            which(&live.absent)
                .contains(name)
                .then(|| match live.state {
                    ServerState::Stopped => HostError::ShutDown,
                    ref state => HostError::NotConnected {
                        server: slot.config.name.clone(),
                        state: state.clone(),
                    },
                })
        })
    }

    /// Logs the collisions of the aggregate not logged before.
    fn log_collisions(&self) {
        let now = lock(&self.catalog).collisions();
        let mut logged = lock(&self.collisions);
        for collision in now.iter().filter(|c| !logged.contains(c)) {
            tracing::warn!(server = %collision.server, "{collision}");
        }
        *logged = now;
    }

    fn publish(&self, event: HostEvent) {
        // No receiver: nobody to tell.
        let _ = self.events.send(event);
    }

    fn set_state(&self, index: usize, state: ServerState) {
        let slot = &self.slots[index];
        {
            let mut live = lock(&slot.live);
            if live.state == state {
                return;
            }
            live.state = state.clone();
        }
        self.publish(HostEvent::Server {
            name: slot.config.name.clone(),
            state,
        });
    }

    /// Takes everything of server `index` out of the aggregate.
    fn withdraw(&self, index: usize) {
        let name = &self.slots[index].config.name;
        let changed = {
            let mut catalog = lock(&self.catalog);
            let absent = Absent {
                tools: names(catalog.tools(), name, |t| (&t.server, &t.name)),
                prompts: names(catalog.prompts(), name, |p| (&p.server, &p.name)),
                resources: names(catalog.resources(), name, |r| (&r.server, &r.resource.uri)),
            };
            if !(absent.tools.is_empty()
                && absent.prompts.is_empty()
                && absent.resources.is_empty())
            {
                lock(&self.slots[index].live).absent = absent;
            }
            catalog.clear(name)
        };
        self.log_collisions();
        if changed.tools {
            self.publish(HostEvent::ToolsChanged);
        }
        if changed.prompts {
            self.publish(HostEvent::PromptsChanged);
        }
        if changed.resources || changed.templates {
            self.publish(HostEvent::ResourcesChanged);
        }
    }

    /// Server `index` is not connected: no client, nothing in the aggregate, `state`.
    fn down(&self, index: usize, state: ServerState) -> Option<Client> {
        let client = {
            let mut live = lock(&self.slots[index].live);
            live.protocol_version = None;
            live.server_info = None;
            live.client.take()
        };
        self.withdraw(index);
        self.set_state(index, state);
        client
    }

    /// Server `index` is stopped for good.
    fn stopped(&self, index: usize) -> Option<Client> {
        self.down(index, ServerState::Stopped)
    }

    fn delay(&self, attempt: u32) -> Duration {
        let (first, max) = self.backoff;
        let doublings = attempt.saturating_sub(1).min(31);
        first.saturating_mul(1 << doublings).min(max)
    }
}

/// The names of `server`'s entries among `entries`.
fn names<T>(
    entries: Vec<T>,
    server: &str,
    key: impl Fn(&T) -> (&String, &String),
) -> BTreeSet<String> {
    entries
        .iter()
        .map(&key)
        .filter(|(owner, _)| *owner == server)
        .map(|(_, name)| name.clone())
        .collect()
}

impl Slot {
    /// `error` of a routed call, as the host reports it; a transport that failed the call has
    /// the server probed now.
    fn failed(&self, error: Error) -> HostError {
        if matches!(error, Error::Transport(_) | Error::Closed(_)) {
            self.check.notify_one();
        }
        HostError::Server {
            server: self.config.name.clone(),
            source: error,
        }
    }
}

/// Resolves once the host stops (told to, or every handle dropped).
async fn stop_signal(stop: &mut watch::Receiver<bool>) {
    // An error: the sender (the host) is gone.
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Keeps server `index` connected until the host stops; `first` is told once its first attempt
/// is over (connected and listed, or failed).
async fn supervise(
    core: Arc<Core>,
    index: usize,
    mut stop: watch::Receiver<bool>,
    first: oneshot::Sender<()>,
) {
    let mut first = Some(first);
    let mut attempt: u32 = 0;
    loop {
        let outcome = tokio::select! {
            biased;
            () = stop_signal(&mut stop) => break,
            outcome = session(&core, index, &mut attempt, &mut first) => outcome,
        };
        attempt = attempt.saturating_add(1);
        let name = &core.slots[index].config.name;
        tracing::warn!(server = %name, attempt, error = %outcome, "server not connected");
        let client = core.down(
            index,
            ServerState::Reconnecting {
                attempt,
                error: outcome,
            },
        );
        if let Some(first) = first.take() {
            let _ = first.send(());
        }
        let closing = async {
            if let Some(client) = client {
                client.close().await;
            }
            tokio::time::sleep(core.delay(attempt)).await;
        };
        tokio::select! {
            biased;
            () = stop_signal(&mut stop) => break,
            () = closing => {}
        }
    }
    if let Some(client) = core.stopped(index) {
        client.close().await;
    }
}

/// One connection of server `index`: connects, lists, serves until the connection fails or
/// ends; returns why. Resets `attempt` and tells `first` once connected.
async fn session(
    core: &Core,
    index: usize,
    attempt: &mut u32,
    first: &mut Option<oneshot::Sender<()>>,
) -> String {
    let slot = &core.slots[index];
    // Connecting, listening and listing are bounded together by the server's timeout (a
    // client dropped on the way closes its connection on its own task).
    let timeout = slot.config.timeout.unwrap_or(core.shared.connect_timeout);
    let setup = async {
        let client = connect(core, &slot.config).await?;
        // Before listing, so that no change is missed in between: the notifications are
        // received from now on, and (modern era) the listen stream is acknowledged before the
        // lists are fetched.
        let notifications = client.notifications();
        if let Err(error) = client.listening().await {
            tracing::warn!(server = %slot.config.name, %error, "list changes may not be heard");
        }
        if let Err(error) = refresh(core, index, &client, Kinds::ALL).await {
            client.close().await;
            return Err(error);
        }
        Ok((client, notifications))
    };
    let (client, mut notifications) = match tokio::time::timeout(timeout, setup).await {
        Ok(Ok(ready)) => ready,
        Ok(Err(error)) => return error,
        Err(_) => return format!("not connected and listed within {timeout:?}"),
    };
    // The application's subscriptions, made again (bounded by the timeout too: a modern server
    // that never acknowledges them does not keep the server from being Ready).
    let subscriptions: Vec<String> = lock(&slot.live).subscriptions.iter().cloned().collect();
    let subscribe = async {
        for uri in subscriptions {
            if let Err(error) = client.subscribe_resource(&uri).await {
                tracing::warn!(server = %slot.config.name, %uri, %error, "subscribing again failed");
            }
        }
    };
    if tokio::time::timeout(timeout, subscribe).await.is_err() {
        tracing::warn!(server = %slot.config.name, "subscribing again took too long: not all made");
    }
    {
        let mut live = lock(&slot.live);
        live.client = Some(client.clone());
        live.protocol_version = client.protocol_version();
        live.server_info = client.server_info();
        live.absent = Absent::default();
    }
    core.set_state(index, ServerState::Ready);
    *attempt = 0;
    if let Some(first) = first.take() {
        let _ = first.send(());
    }
    let mut health = core.health_check.map(|every| {
        let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval
    });
    loop {
        let tick = async {
            match &mut health {
                Some(interval) => drop(interval.tick().await),
                None => std::future::pending().await,
            }
        };
        let probe = tokio::select! {
            notification = notifications.recv() => {
                let kinds = match notification {
                    Ok(ServerNotification::ToolsListChanged) => Kinds::TOOLS,
                    Ok(ServerNotification::PromptsListChanged) => Kinds::PROMPTS,
                    Ok(ServerNotification::ResourcesListChanged) => Kinds::RESOURCES,
                    Ok(ServerNotification::Resynced) | Err(RecvError::Missed(_)) => Kinds::ALL,
                    Ok(ServerNotification::Log(message)) => {
                        core.publish(HostEvent::Log {
                            server: slot.config.name.clone(),
                            message,
                        });
                        continue;
                    }
                    Ok(ServerNotification::ResourceUpdated { uri }) => {
                        core.publish(HostEvent::ResourceUpdated {
                            server: slot.config.name.clone(),
                            uri,
                        });
                        continue;
                    }
                    Ok(_) => continue,
                    Err(_) => return closed_reason(&client),
                };
                match refresh(core, index, &client, kinds).await {
                    Ok(()) => false,
                    // The transport failed a list: the server is lost unless it still answers.
                    Err(error) => {
                        if probe(&client).await.is_err() {
                            return error;
                        }
                        tracing::warn!(server = %slot.config.name, %error, "the lists may be stale");
                        false
                    }
                }
            }
            () = tick => true,
            () = slot.check.notified() => true,
        };
        if probe && let Err(error) = self::probe(&client).await {
            return error;
        }
    }
}

/// Why `client`'s connection ended.
fn closed_reason(client: &Client) -> String {
    match client.server_exit() {
        Some(exit) => format!("the server exited ({}, {:?})", exit.status, exit.by),
        None => "the connection ended".to_owned(),
    }
}

/// Whether the server still answers: `ping` (legacy) or `server/discover` (modern). An error
/// answer is an answer; a transport that fails it, or no answer in time, is not.
async fn probe(client: &Client) -> Result<(), String> {
    let asked = async {
        match client.era() {
            Some(Era::Modern) => client.discover().await.map(drop),
            _ => client.ping().await,
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, asked).await {
        Err(_) => Err(format!(
            "no answer to a health probe within {PROBE_TIMEOUT:?}"
        )),
        Ok(Err(error @ (Error::Closed(_) | Error::Transport(_) | Error::Timeout(_)))) => {
            Err(format!("health probe: {error}"))
        }
        Ok(_) => Ok(()),
    }
}

/// The lists to fetch.
#[derive(Clone, Copy)]
struct Kinds {
    tools: bool,
    prompts: bool,
    resources: bool,
}

impl Kinds {
    const ALL: Kinds = Kinds {
        tools: true,
        prompts: true,
        resources: true,
    };
    const TOOLS: Kinds = Kinds {
        tools: true,
        prompts: false,
        resources: false,
    };
    const PROMPTS: Kinds = Kinds {
        tools: false,
        prompts: true,
        resources: false,
    };
    const RESOURCES: Kinds = Kinds {
        tools: false,
        prompts: false,
        resources: true,
    };
}

/// Lists `kinds` of server `index` again (only what it declares) into the catalog and
/// publishes what changed. A list the server answers with an error keeps what was listed
/// before (with a warning); a connection that fails is an error (the server is lost).
async fn refresh(core: &Core, index: usize, client: &Client, kinds: Kinds) -> Result<(), String> {
    let name = &core.slots[index].config.name;
    let declared = client.server_capabilities_json().unwrap_or_default();
    let has = |key: &str| declared.contains_key(key);
    let lost = |what: &str, error: Error| -> Result<(), String> {
        match error {
            Error::Closed(_) | Error::Transport(_) => Err(format!("listing {what}: {error}")),
            other => {
                tracing::warn!(server = %name, %other, "listing {what} failed; the previous list stays");
                Ok(())
            }
        }
    };
    if kinds.tools && has("tools") {
        match client.list_all_tools().await {
            Ok(tools) => {
                if lock(&core.catalog).set_tools(name, tools) {
                    core.publish(HostEvent::ToolsChanged);
                }
            }
            Err(error) => lost("tools", error)?,
        }
    }
    if kinds.prompts && has("prompts") {
        match client.list_all_prompts().await {
            Ok(prompts) => {
                if lock(&core.catalog).set_prompts(name, prompts) {
                    core.publish(HostEvent::PromptsChanged);
                }
            }
            Err(error) => lost("prompts", error)?,
        }
    }
    if kinds.resources && has("resources") {
        let mut changed = false;
        match client.list_all_resources().await {
            Ok(resources) => changed |= lock(&core.catalog).set_resources(name, resources),
            Err(error) => lost("resources", error)?,
        }
        match client.list_all_resource_templates().await {
            Ok(templates) => changed |= lock(&core.catalog).set_templates(name, templates),
            Err(error) => lost("resource templates", error)?,
        }
        if changed {
            core.publish(HostEvent::ResourcesChanged);
        }
    }
    core.log_collisions();
    Ok(())
}

/// Connects the client of `server` (within its timeout: the builder's `connect_timeout`, set
/// by the handlers); the error as text.
async fn connect(core: &Core, server: &ServerConfig) -> Result<Client, String> {
    let mut builder =
        crate::handlers::client_builder(server, &core.shared).reconnect(Reconnect::NEVER);
    if let Some(level) = *lock(&core.log_level) {
        builder = builder.log_level(level);
    }
    let connecting = async {
        match &server.transport {
            TransportConfig::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut child = ServerCommand::new(command).args(args);
                for key in INHERITED_ENV {
                    child = child.inherit_env(key);
                }
                for (key, value) in env {
                    child = child.env(key, value);
                }
                if let Some(cwd) = cwd {
                    child = child.current_dir(cwd);
                }
                child = child.stderr(stderr_to_tracing(&server.name));
                builder.connect_stdio(child).await
            }
            TransportConfig::Http { url, headers } => {
                let config = http_config(headers)?;
                builder.connect_http_with(url, config).await
            }
        }
    };
    connecting.await.map_err(|error| describe_connect(&error))
}

fn describe_connect(error: &ConnectError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The HTTP transport's settings with the entry's `headers`.
fn http_config(
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<modelctx_client::HttpConfig, ConnectError> {
    let mut map = http::HeaderMap::new();
    for (name, value) in headers {
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| ConnectError::Url(format!("header {name:?}: {e}")))?;
        let value = http::HeaderValue::from_str(value)
            .map_err(|e| ConnectError::Url(format!("the value of header {name}: {e}")))?;
        map.append(name, value);
    }
    Ok(modelctx_client::HttpConfig::default().headers(map))
}

/// A stdio server's stderr: each line a `tracing` event at INFO level, target
/// `modelctx_host::stderr`, with the server's config name in the `server` field.
fn stderr_to_tracing(server: &str) -> modelctx_stdio::Stderr {
    let server = server.to_owned();
    modelctx_stdio::Stderr::Callback(Arc::new(move |line: &str| {
        tracing::info!(target: "modelctx_host::stderr", server = %server, "{line}");
    }))
}

/// The status of one server.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerStatus {
    /// Its config name.
    pub name: String,
    /// Where it is.
    pub state: ServerState,
    /// The protocol version agreed, while connected.
    pub protocol_version: Option<modelctx_client::ProtocolVersion>,
    /// What the server says it is, while connected.
    pub server_info: Option<model::Implementation>,
}

/// Where a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerState {
    /// Its first connection is being made.
    Connecting,
    /// Connected: its tools, resources and prompts are in the aggregate.
    Ready,
    /// Its connection failed or ended; the next attempt is made after a backoff.
    Reconnecting {
        /// Attempts made in a row so far.
        attempt: u32,
        /// Why the last one failed or ended.
        error: String,
    },
    /// `"disabled": true` in the config: never started.
    Disabled,
    /// Stopped by [`Host::shutdown`].
    Stopped,
}

/// Something that changed in the host.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HostEvent {
    /// The aggregate's tools changed: list them again.
    ToolsChanged,
    /// The aggregate's prompts changed.
    PromptsChanged,
    /// The aggregate's resources or templates changed.
    ResourcesChanged,
    /// A resource a server was subscribed for changed.
    ResourceUpdated {
        /// The server.
        server: String,
        /// The resource.
        uri: String,
    },
    /// A server's state changed.
    Server {
        /// Its config name.
        name: String,
        /// Its new state.
        state: ServerState,
    },
    /// A server sent a log message (at the level set with [`Host::set_log_level`], or the
    /// server's own choice before).
    Log {
        /// The server.
        server: String,
        /// The message.
        message: modelctx_client::LogMessage,
    },
}

/// Why the host could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// No tool is shown under this name.
    #[error("no tool named {0:?}")]
    UnknownTool(String),
    /// No prompt is shown under this name.
    #[error("no prompt named {0:?}")]
    UnknownPrompt(String),
    /// No server has this resource (or a template that matches it).
    #[error("no server has the resource {0:?}")]
    UnknownResource(String),
    /// The server that owns it is not connected now.
    #[error("server {server:?} is not connected ({state:?})")]
    NotConnected {
        /// The server.
        server: String,
        /// Where it is.
        state: ServerState,
    },
    /// The [`Policy`] refused.
    #[error("refused: {reason}")]
    Denied {
        /// Why.
        reason: String,
    },
    /// The server's answer was an error, or the connection failed.
    #[error("server {server:?}: {source}")]
    Server {
        /// The server.
        server: String,
        /// What the client saw.
        #[source]
        source: modelctx_client::Error,
    },
    /// The host was shut down.
    #[error("the host is shut down")]
    ShutDown,
    /// A call as a task ([`Host::call_tool_as_task`]) failed for a reason of tasks (the
    /// server does not run tools as tasks, its answer is no task); a failed request is
    /// [`HostError::Server`].
    #[error("server {server:?}: {source}")]
    Task {
        /// The server.
        server: String,
        /// What the client saw.
        #[source]
        source: TaskError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(backoff: (Duration, Duration)) -> Core {
        let builder = Host::builder(HostConfig::default()).backoff(backoff.0, backoff.1);
        Core {
            shared: Arc::new(builder.shared),
            slots: Vec::new(),
            catalog: Mutex::new(Catalog::new(Namespace::default(), Vec::new())),
            events: broadcast::channel(1).0,
            shut_down: AtomicBool::new(false),
            log_level: Mutex::new(None),
            collisions: Mutex::new(Vec::new()),
            backoff: builder.backoff,
            health_check: builder.health_check,
        }
    }

    #[test]
    fn the_backoff_doubles_from_its_first_wait_up_to_its_longest() {
        let core = core((Duration::from_millis(250), Duration::from_secs(30)));
        let waits: Vec<u128> = (1..=10).map(|n| core.delay(n).as_millis()).collect();
        assert_eq!(
            waits,
            [250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
        );
        // Never beyond the longest, however many attempts.
        assert_eq!(core.delay(u32::MAX), Duration::from_secs(30));
        // A longest shorter than the first is the first.
        let core = self::core((Duration::from_secs(2), Duration::from_secs(1)));
        assert_eq!(core.delay(1), Duration::from_secs(2));
        assert_eq!(core.delay(5), Duration::from_secs(2));
    }

    #[test]
    fn an_http_entry_s_headers_go_in_the_transport_settings() {
        let headers = [
            ("Authorization".to_owned(), "Bearer t".to_owned()),
            ("X-Team".to_owned(), "core".to_owned()),
        ]
        .into_iter()
        .collect();
        let config = http_config(&headers).expect("valid headers");
        assert_eq!(config.headers["authorization"], "Bearer t");
        assert_eq!(config.headers["x-team"], "core");
        let bad = [("Bad Name".to_owned(), "v".to_owned())]
            .into_iter()
            .collect();
        assert!(http_config(&bad).is_err());
        let bad = [("X-Ok".to_owned(), "line\nbreak".to_owned())]
            .into_iter()
            .collect();
        assert!(http_config(&bad).is_err());
    }

    #[test]
    fn a_connection_error_is_described_with_its_causes_once() {
        let error = ConnectError::Spawn(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no such file",
        ));
        let text = describe_connect(&error);
        assert!(text.contains("could not start the server"), "{text}");
        assert_eq!(text.matches("no such file").count(), 1, "{text}");
    }
}
