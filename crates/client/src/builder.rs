//! Configuring and opening a connection.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelctx_session::{ClientConfig as SessionConfig, EraChoice, LogLevel, ProtocolVersion};
use modelctx_types::{Incoming, JsonObject, model};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::cache::{ResultCache, Scope};
use crate::client::{Client, Defaults, Inner};
use crate::driver::{Driver, Reconnect, Remake, Shared};
use crate::error::ConnectError;
use crate::input::{Elicitation, Elicited, Handlers, InputError};
use crate::link::{Channels, Link};
use crate::notify::{NotificationFn, ServerNotification};

/// Numbers the connections of this process, for cache contexts and in-memory server keys.
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// Builds a [`Client`]: who the client is, what it can answer, how it waits; then one of the
/// `connect_*` methods opens the connection (finding the server's era) and returns once the
/// protocol is settled.
#[must_use]
pub struct ClientBuilder {
    name: String,
    version: String,
    capabilities: JsonObject,
    handlers: Handlers,
    era: EraChoice,
    versions: Option<Vec<ProtocolVersion>>,
    defaults: Defaults,
    handshake_timeout: Duration,
    /// `None`: twice the handshake timeout.
    connect_timeout: Option<Option<Duration>>,
    cache: Option<ResultCache>,
    cache_context: Option<String>,
    callbacks: Vec<NotificationFn>,
    reconnect: Option<Reconnect>,
    log_level: Option<LogLevel>,
    notification_queue: usize,
    write_timeout: Duration,
    wire: Option<crate::link::WireFn>,
    /// Runs a 2025-11-25 server's task-augmented requests as tasks ([`receive_tasks`](Self::receive_tasks)).
    tasks: Option<crate::tasks::TaskReceiving>,
    /// Gives the credentials of every HTTP request ([`auth`](Self::auth)).
    #[cfg(feature = "auth")]
    auth: Option<Arc<dyn modelctx_http::client::Authorizer>>,
    /// [`layer`](Self::layer)'s layers.
    layers: crate::middleware::Stack,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("name", &self.name)
            .field("handlers", &self.handlers)
            .field("era", &self.era)
            .field("auth", &self.authorizer_set())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client whose `clientInfo` is `{name, version}`.
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// use modelctx_client::{Client, Era, ServerCommand};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // A server run as a child process; `connect_http` reaches one over the network, and
    /// // `connect_channels` one in the same process.
    /// let client = Client::builder("my-host", "1.0.0")
    ///     .request_timeout(Some(Duration::from_secs(10)))
    ///     .connect_stdio(ServerCommand::new("my-mcp-server"))
    ///     .await?;
    /// // The probe found the server's era (`server/discover` for a modern one).
    /// if client.era() == Some(Era::Modern) {
    ///     println!("a 2026-07-28 server");
    /// }
    /// let tools = client.list_all_tools().await?;
    /// println!("{} tools", tools.len());
    /// client.close().await;
    /// # Ok(()) }
    /// ```
    pub fn builder(name: &str, version: &str) -> ClientBuilder {
        ClientBuilder {
            name: name.into(),
            version: version.into(),
            capabilities: JsonObject::new(),
            handlers: Handlers::default(),
            era: EraChoice::Probe,
            versions: None,
            defaults: Defaults {
                timeout: Some(Duration::from_secs(60)),
                progress_reset: None,
                max_rounds: 8,
            },
            handshake_timeout: Duration::from_secs(30),
            connect_timeout: None,
            cache: None,
            cache_context: None,
            callbacks: Vec::new(),
            reconnect: None,
            log_level: None,
            notification_queue: 256,
            write_timeout: crate::link::WRITE_TIMEOUT,
            wire: None,
            tasks: None,
            #[cfg(feature = "auth")]
            auth: None,
            layers: crate::middleware::Stack::default(),
        }
    }
}

impl ClientBuilder {
    /// Answers the server's `sampling/createMessage` with `handler` (declares `sampling`).
    ///
    /// ```
    /// use modelctx_client::{Client, JsonObject, model};
    ///
    /// let builder = Client::builder("my-host", "1.0.0").on_sampling(|params| async move {
    ///     // Show the request to the user, call the model with `params.messages`, show the answer.
    ///     let _ = params.messages;
    ///     Ok(model::CreateMessageResult {
    ///         meta: None,
    ///         content: model::CreateMessageResultContent::TextContent(model::TextContent {
    ///             meta: None,
    ///             annotations: None,
    ///             text: "An old silent pond".into(),
    ///         }),
    ///         model: "my-model".into(),
    ///         role: model::Role::Assistant,
    ///         stop_reason: Some("endTurn".into()),
    ///         extra: JsonObject::new(),
    ///     })
    /// });
    /// # let _ = builder;
    /// ```
    pub fn on_sampling<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(model::CreateMessageRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<model::CreateMessageResult, InputError>> + Send + 'static,
    {
        self.handlers.sampling = Some(Arc::new(move |params| Box::pin(handler(params))));
        self
    }

    /// Answers the server's `elicitation/create` with `handler` (declares `elicitation` in form
    /// mode; see [`url_elicitation`](Self::url_elicitation)).
    ///
    /// The same handler answers a legacy server's request and a modern server's
    /// `input_required` result (the call is sent again with the answer, inside the call).
    ///
    /// ```
    /// use modelctx_client::{Client, Elicitation, Elicited};
    ///
    /// let builder = Client::builder("my-host", "1.0.0").on_elicitation(|request| async move {
    ///     match request {
    ///         Elicitation::Form { message, schema } => {
    ///             // Show `message` and a form for `schema`; here the user declines.
    ///             let _ = (message, schema);
    ///             Ok(Elicited::decline())
    ///         }
    ///         _ => Ok(Elicited::cancel()),
    ///     }
    /// });
    /// # let _ = builder;
    /// ```
    pub fn on_elicitation<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Elicitation) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Elicited, InputError>> + Send + 'static,
    {
        self.handlers.elicitation = Some(Arc::new(move |e| Box::pin(handler(e))));
        self
    }

    /// Also takes URL-mode elicitations (2025-11-25 and later) to the elicitation handler.
    pub fn url_elicitation(mut self) -> Self {
        self.handlers.url_elicitation = true;
        self
    }

    /// Fills the fields the user left empty in an accepted form elicitation with the defaults
    /// of the requested schema.
    pub fn apply_elicitation_defaults(mut self) -> Self {
        self.handlers.apply_defaults = true;
        self
    }

    /// Answers `roots/list` with these roots (declares `roots`).
    pub fn roots(self, roots: Vec<model::Root>) -> Self {
        let roots = Arc::new(roots);
        self.on_roots(move || {
            let roots = roots.clone();
            async move { Ok(roots.to_vec()) }
        })
    }

    /// Answers `roots/list` with `handler` (declares `roots` with `listChanged`; call
    /// [`Client::roots_changed`] when they change).
    pub fn on_roots<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<model::Root>, InputError>> + Send + 'static,
    {
        self.handlers.roots = Some(Arc::new(move || Box::pin(handler())));
        self
    }

    /// Declares a capability the handlers do not imply (`experimental`, `extensions`, ...);
    /// merged over theirs.
    pub fn capability(mut self, name: &str, value: Value) -> Self {
        self.capabilities.insert(name.into(), value);
        self
    }

    /// How the server's era is found: probe with `server/discover` and fall back to
    /// `initialize` (the default), or skip the probe.
    pub fn era(mut self, era: EraChoice) -> Self {
        self.era = era;
        self
    }

    /// Speaks only `version` (and skips the probe for a legacy one).
    pub fn protocol_version(mut self, version: ProtocolVersion) -> Self {
        self.versions = Some(vec![version]);
        self.era = match version.era() {
            modelctx_session::Era::Legacy => EraChoice::Legacy,
            _ => EraChoice::Modern,
        };
        self
    }

    /// The timeout of every call (default 60 s); `None` waits forever.
    ///
    /// The time the input handlers ([`on_elicitation`](Self::on_elicitation),
    /// [`on_sampling`](Self::on_sampling), [`on_roots`](Self::on_roots)) spend answering the
    /// server does not count: while a handler answers a legacy server's request, the timeout of
    /// the call it belongs to is paused, and runs on from where it stopped once the answer is
    /// sent. Over Streamable HTTP that is the call whose response stream carried the request;
    /// where nothing says (stdio, the standalone GET stream, the 2024-11-05 transport), every
    /// call in flight when the request came is paused (calls started meanwhile are not). In
    /// the modern era the handlers run between
    /// two rounds of a call (`input_required`), each round a request with this timeout. Progress
    /// restarts the timeout only with [`reset_timeout_on_progress`](Self::reset_timeout_on_progress).
    pub fn request_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.defaults.timeout = timeout;
        self
    }

    /// For calls that ask for progress: progress restarts the timeout, up to `max_total`.
    pub fn reset_timeout_on_progress(mut self, max_total: Duration) -> Self {
        self.defaults.progress_reset = Some(max_total);
        self
    }

    /// How many times one call may be answered with `input_required` before the client gives up
    /// (default 8).
    pub fn max_input_rounds(mut self, rounds: u32) -> Self {
        self.defaults.max_rounds = rounds;
        self
    }

    /// The timeout of the probe and of `initialize`, each (default 30 s): a probe that gets no
    /// answer in time falls back to `initialize`; an `initialize` that gets none fails the
    /// connection with [`ConnectError::Timeout`]. See also
    /// [`connect_timeout`](Self::connect_timeout), which bounds them together.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// How long a `connect_*` may take in all (default: twice the
    /// [`handshake_timeout`](Self::handshake_timeout), 60 s): reaching the server (an HTTP
    /// connection, TLS), the era probe, the fallback to `initialize` and to the 2024-11-05
    /// HTTP+SSE transport. Beyond, it fails with [`ConnectError::Timeout`], naming the step
    /// that got no answer, and the connection is closed (a server process stopped). `None`:
    /// only the [`handshake_timeout`](Self::handshake_timeout) of each step applies. Once
    /// connected, it plays no part (restarts included).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// // A server that does not answer is given up after 5 s, and each call after 10 s.
    /// let builder = modelctx_client::Client::builder("my-host", "1.0.0")
    ///     .connect_timeout(Some(Duration::from_secs(5)))
    ///     .request_timeout(Some(Duration::from_secs(10)));
    /// # let _ = builder;
    /// ```
    pub fn connect_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Caches cacheable results in `cache` (see [`ResultCache`]).
    pub fn cache(mut self, cache: ResultCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The authorization context of this client's `private` cache entries: clients sharing a
    /// cache and a context share them (default: each client is its own context).
    pub fn cache_context(mut self, context: &str) -> Self {
        self.cache_context = Some(context.into());
        self
    }

    /// Calls `callback` with every notification (on the connection's task: keep it short). In
    /// the modern era this opens the listen stream for list changes.
    pub fn on_notification(
        mut self,
        callback: impl Fn(&ServerNotification) + Send + Sync + 'static,
    ) -> Self {
        self.callbacks.push(Arc::new(callback));
        self
    }

    /// How many notifications a [`Notifications`](crate::Notifications) receiver may fall
    /// behind before it misses some (default 256).
    pub fn notification_queue(mut self, capacity: usize) -> Self {
        self.notification_queue = capacity.max(1);
        self
    }

    /// When to re-establish a connection that ended: a stdio server that exited is restarted, a
    /// legacy HTTP session the server ended is initialized again; listen streams are re-opened
    /// and [`ServerNotification::Resynced`] is sent. Calls in flight fail; calls made meanwhile
    /// wait. Default: stdio never; HTTP up to 3 times in a row.
    pub fn reconnect(mut self, policy: Reconnect) -> Self {
        self.reconnect = Some(policy);
        self
    }

    /// How long a message to a stdio or in-memory server may wait to be taken (default 30 s):
    /// a server that stops reading its input for longer is taken for dead, and the connection
    /// ends ([`Error::Closed`](crate::Error::Closed) for the calls in flight). Up to 2048
    /// messages wait meanwhile (twice the requests in flight allowed); a call that finds them
    /// all waiting fails at once ([`Error::Transport`](crate::Error::Transport)).
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Adds a `tower` layer around every request the client's calls send (see
    /// [`middleware`](crate::middleware): what the layers see and may edit, what their errors
    /// become). Each call wraps the layers added before it: the last one added sees a request
    /// first. The chain is built when the client connects and shared by all its calls.
    /// Default: no layer, and requests go straight to the connection.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use modelctx_client::Client;
    ///
    /// // At most 8 requests under way; the others wait their turn.
    /// let builder = Client::builder("host", "1.0.0")
    ///     .layer(tower::limit::ConcurrencyLimitLayer::new(8));
    /// # drop(builder);
    /// ```
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: crate::middleware::Layer<crate::middleware::Connection> + Send + Sync + 'static,
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

    /// Shows `tap` every JSON-RPC message of the connection, in the order the connection's task
    /// handles them: each message (or batch) the client writes, once the transport took it, and
    /// each one the transport delivers, before the client acts on it; as one line of JSON, with
    /// its [`Direction`](crate::Direction). The handshake is included; what a transport does on
    /// its own is not (a modern cancellation over HTTP closes the request's stream and writes
    /// nothing; HTTP headers, a request the transport sends again, a line that is not JSON-RPC).
    /// `tap` runs on the connection's task: it must return quickly. Default: none (nothing is
    /// encoded for it).
    ///
    /// ```
    /// use modelctx_client::{Client, Direction};
    ///
    /// let builder = Client::builder("my-host", "1.0.0").on_wire(|direction, json| {
    ///     let arrow = if direction == Direction::Sent { ">" } else { "<" };
    ///     eprintln!("{arrow} {json}");
    /// });
    /// # let _ = builder;
    /// ```
    pub fn on_wire(mut self, tap: impl Fn(crate::Direction, &str) + Send + Sync + 'static) -> Self {
        self.wire = Some(Arc::new(tap));
        self
    }

    /// Authorizes the connection's HTTP requests with `authorizer` (feature `auth`): before each
    /// request the transport sends (every POST, GET and `DELETE`, both eras and the 2024-11-05
    /// fallback) it gives the credentials headers, and when the server refuses them (401, or 403
    /// with `error="insufficient_scope"`) it decides whether to send the request again. Any
    /// [`Authorizer`](crate::auth::Authorizer) will do; [`OAuth`](crate::auth::OAuth) is the
    /// OAuth 2.1 client of modelctx-auth. Default: none (requests carry the
    /// [`HttpConfig::headers`](crate::HttpConfig::headers) only).
    ///
    /// When the authorizer gives up ([`AuthFailure`](crate::auth::AuthFailure)), a call fails
    /// with [`Error::Auth`](crate::Error::Auth) and the connection lives on; while connecting,
    /// the era probe or `initialize` failing so closes the connection, and `connect_http*`
    /// returns [`ConnectError::Auth`] (the probe does not fall back to `initialize`, which
    /// would only ask again). It applies to [`connect_http`](Self::connect_http) and
    /// [`connect_http_with`](Self::connect_http_with) (whose [`HttpConfig::auth`](crate::HttpConfig::auth)
    /// must then be empty); the other `connect_*` refuse it with [`ConnectError::Auth`] of kind
    /// [`Misconfigured`](crate::auth::AuthFailureKind::Misconfigured): MCP leaves the
    /// authorization of a stdio server to its environment.
    ///
    /// The handshake and call timeouts keep running while the authorizer works: an
    /// authorization that needs a person is best done before connecting.
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use modelctx_client::Client;
    /// use modelctx_client::auth::{
    ///     AuthFailure, Authorizer, BoxFuture, Credentials, Outgoing, Reply, Retry,
    /// };
    ///
    /// /// A fixed API key, read from the environment.
    /// #[derive(Debug)]
    /// struct ApiKey;
    ///
    /// impl Authorizer for ApiKey {
    ///     fn credentials<'a>(
    ///         &'a self,
    ///         _: &'a Outgoing<'a>,
    ///     ) -> BoxFuture<'a, Result<Credentials, AuthFailure>> {
    ///         let mut credentials = Credentials::none(0);
    ///         if let Ok(key) = std::env::var("API_KEY")
    ///             && let Ok(value) = format!("Bearer {key}").parse()
    ///         {
    ///             credentials.headers.insert("authorization", value);
    ///         }
    ///         Box::pin(std::future::ready(Ok(credentials)))
    ///     }
    ///
    ///     fn refused<'a>(
    ///         &'a self,
    ///         _: &'a Outgoing<'a>,
    ///         _: &'a Reply<'a>,
    ///     ) -> BoxFuture<'a, Result<Retry, AuthFailure>> {
    ///         // Sending the same key again would not help.
    ///         Box::pin(std::future::ready(Ok(Retry::GiveUp)))
    ///     }
    /// }
    ///
    /// let builder = Client::builder("my-host", "1.0.0")
    ///     .auth(Arc::new(ApiKey) as Arc<dyn Authorizer>);
    /// # let _ = builder;
    /// ```
    #[cfg(feature = "auth")]
    #[cfg_attr(docsrs, doc(cfg(feature = "auth")))]
    pub fn auth(
        mut self,
        authorizer: impl Into<Arc<dyn modelctx_http::client::Authorizer>>,
    ) -> Self {
        self.auth = Some(authorizer.into());
        self
    }

    /// Whether an authorizer was given (for `Debug`, which never shows the authorizer itself).
    fn authorizer_set(&self) -> bool {
        #[cfg(feature = "auth")]
        return self.auth.is_some();
        #[cfg(not(feature = "auth"))]
        false
    }

    /// The error for an authorizer given to a connection that is not over HTTP, where nothing
    /// would use it.
    fn refuse_authorizer(&self, transport: &str) -> Result<(), ConnectError> {
        #[cfg(feature = "auth")]
        if self.auth.is_some() {
            return Err(ConnectError::Auth(modelctx_http::client::AuthFailure::new(
                modelctx_http::client::AuthFailureKind::Misconfigured,
                format!(
                    "an authorizer (ClientBuilder::auth) works over HTTP only, not over {transport}: \
                     MCP leaves the authorization of such servers to their environment"
                ),
            )));
        }
        let _ = transport;
        Ok(())
    }

    /// Runs a 2025-11-25 server's task-augmented `sampling/createMessage` and
    /// `elicitation/create` requests (those with `params.task`) as tasks, with the handlers of
    /// [`on_sampling`](Self::on_sampling) and [`on_elicitation`](Self::on_elicitation):
    /// declares `capabilities.tasks` (`list`, `cancel`, and `requests` for the handlers set) and
    /// answers the server's `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel` from a
    /// table bounded by [`TaskReceiving::max_tasks`](crate::TaskReceiving); a task is forgotten
    /// once its time to live has passed. Off by default: the requests are then answered
    /// directly, as any other.
    pub fn receive_tasks(mut self, tasks: crate::tasks::TaskReceiving) -> Self {
        self.tasks = Some(tasks);
        self
    }

    /// The level of log messages wanted (see [`Client::set_log_level`]); set on connect.
    pub fn log_level(mut self, level: LogLevel) -> Self {
        self.log_level = Some(level);
        self
    }

    /// Connects over a message transport: the server takes messages on `to_server` and yields
    /// them on `from_server` (for instance `Server::in_memory()` of `modelctx-server`).
    pub async fn connect_channels<T>(
        self,
        to_server: mpsc::Sender<Incoming>,
        from_server: mpsc::Receiver<T>,
    ) -> Result<Client, ConnectError>
    where
        T: Into<Incoming> + Send + 'static,
    {
        self.refuse_authorizer("channels")?;
        let (events, inbox) = mpsc::channel(crate::link::QUEUE);
        let reader = crate::link::forward(from_server, events.clone());
        let (out, writer) = crate::link::feed(to_server, events, self.write_timeout);
        let mut channels = Channels::new(out, inbox);
        channels.tasks.extend([reader, writer]);
        let key = format!("memory-{}", CONNECTIONS.fetch_add(1, Ordering::Relaxed));
        self.start(Link::Channels(Box::new(channels)), Remake::Never, key)
            .await
    }

    /// Connects over a line-framed byte stream pair (newline-delimited JSON-RPC).
    #[cfg(feature = "stdio")]
    pub async fn connect_lines<R, W>(
        self,
        reader: modelctx_stdio::LineReader<R>,
        writer: modelctx_stdio::LineWriter<W>,
    ) -> Result<Client, ConnectError>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        self.refuse_authorizer("a line-framed stream")?;
        let (mut channels, writer) = crate::stdio::lines(reader, writer, self.write_timeout);
        channels.tasks.push(tokio::spawn(async move {
            drop(writer.await);
        }));
        let key = format!("lines-{}", CONNECTIONS.fetch_add(1, Ordering::Relaxed));
        self.start(Link::Channels(Box::new(channels)), Remake::Never, key)
            .await
    }

    /// Starts `command` as a child process and connects over its stdin and stdout.
    ///
    /// ```no_run
    /// use modelctx_client::{Client, ServerCommand};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// // The child gets a safelisted environment, plus what is set here.
    /// let command = ServerCommand::new("uvx").arg("mcp-server-time").env("TZ", "UTC");
    /// let client = Client::builder("my-host", "1.0.0").connect_stdio(command).await?;
    /// println!("{:?}", client.server_info());
    /// client.close().await; // closes stdin, then SIGTERM, then SIGKILL
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "stdio")]
    pub async fn connect_stdio(
        self,
        command: modelctx_stdio::ServerCommand,
    ) -> Result<Client, ConnectError> {
        self.refuse_authorizer("stdio")?;
        let link = Link::spawn(&command, self.write_timeout).map_err(ConnectError::Spawn)?;
        let key = crate::stdio::cache_key(&command);
        self.start(link, Remake::Spawn(Box::new(command)), key)
            .await
    }

    /// Connects to the Streamable HTTP endpoint `url` with the default transport settings.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = modelctx_client::Client::builder("my-host", "1.0.0")
    ///     .connect_http("http://127.0.0.1:8080/mcp")
    ///     .await?;
    /// println!("{:?}", client.protocol_version());
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "http")]
    pub async fn connect_http(self, url: &str) -> Result<Client, ConnectError> {
        self.connect_http_with(url, modelctx_http::client::ClientConfig::default())
            .await
    }

    /// Connects to the Streamable HTTP endpoint `url` (headers, limits, timeouts, TLS in
    /// `config`). An authorizer given with [`auth`](Self::auth) goes in `config`, whose own
    /// [`auth`](crate::HttpConfig::auth) must then be empty ([`ConnectError::Auth`]).
    #[cfg(feature = "http")]
    #[cfg_attr(not(feature = "auth"), allow(unused_mut))]
    pub async fn connect_http_with(
        mut self,
        url: &str,
        mut config: modelctx_http::client::ClientConfig,
    ) -> Result<Client, ConnectError> {
        #[cfg(feature = "auth")]
        if let Some(authorizer) = self.auth.take() {
            if config.auth.is_some() {
                return Err(ConnectError::Auth(modelctx_http::client::AuthFailure::new(
                    modelctx_http::client::AuthFailureKind::Misconfigured,
                    "two authorizers: one from ClientBuilder::auth, one in HttpConfig::auth",
                )));
            }
            config.auth = Some(authorizer);
        }
        let transport = modelctx_http::client::HttpTransport::new(url, config)
            .map_err(|e| ConnectError::Url(e.to_string()))?;
        self.start(
            Link::Http(Box::new(transport)),
            Remake::SameLink,
            format!("http:{url}"),
        )
        .await
    }

    async fn start(
        self,
        link: Link,
        remake: Remake,
        server: String,
    ) -> Result<Client, ConnectError> {
        let mut capabilities = self.handlers.capabilities();
        if let Some(tasks) = &self.tasks {
            capabilities.insert("tasks".into(), tasks.capabilities(&self.handlers));
        }
        capabilities.extend(self.capabilities);
        let mut config = SessionConfig::new(&self.name, &self.version, capabilities);
        config.era = self.era;
        if let Some(versions) = self.versions {
            config.versions = versions;
        }
        config.handshake_timeout = self.handshake_timeout;
        let reconnect = self.reconnect.unwrap_or(match remake {
            #[cfg(feature = "http")]
            Remake::SameLink => Reconnect::up_to(3),
            _ => Reconnect::NEVER,
        });
        let context = self
            .cache_context
            .unwrap_or_else(|| format!("client-{}", CONNECTIONS.fetch_add(1, Ordering::Relaxed)));
        let (notifications, _) = broadcast::channel(self.notification_queue);
        let listen = !self.callbacks.is_empty();
        #[cfg(feature = "http")]
        let over_http = matches!(link, Link::Http(_));
        let shared = Arc::new(Shared {
            peer: Mutex::new(None),
            closed: Mutex::new(None),
            #[cfg(feature = "stdio")]
            server_exit: Mutex::new(None),
            notifications: Mutex::new(Some(notifications)),
            callbacks: self.callbacks,
            cache: self.cache.map(|cache| {
                (
                    cache,
                    Scope {
                        server: server.into(),
                        context: context.into(),
                    },
                )
            }),
            tool_schemas: Mutex::new(Default::default()),
            #[cfg(feature = "http")]
            over_http,
            #[cfg(feature = "otel")]
            metrics: crate::observe::Metrics::new(),
            handlers: self.handlers,
            capabilities: config.capabilities.clone(),
            log_level: Mutex::new(None),
            write_timeout: self.write_timeout,
            #[cfg(feature = "validation")]
            schemas: modelctx_types::schema::SchemaCache::new(
                modelctx_types::schema::SchemaLimits::default(),
            ),
            wire: self.wire,
            tasks: self.tasks.map(crate::tasks::Receiver::new),
            task_watchers: crate::tasks::Watchers::default(),
        });
        let (ready, connected) = oneshot::channel();
        let (driver, handles) = Driver::new(
            config,
            link,
            remake,
            reconnect,
            shared.clone(),
            ready,
            self.connect_timeout
                .unwrap_or(Some(self.handshake_timeout.saturating_mul(2))),
        );
        tokio::spawn(driver.run());
        let client = Client::from_inner(Inner {
            shared,
            commands: handles.commands,
            dropped: handles.dropped,
            defaults: self.defaults,
            next_token: AtomicU64::new(0),
            layers: self.layers.build(),
        });
        match connected.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(ConnectError::Transport("the connection task ended".into())),
        }
        if listen {
            drop(client.notifications());
        }
        if let Some(level) = self.log_level {
            let declared = client
                .server_capabilities_json()
                .is_none_or(|c| c.contains_key("logging"));
            if declared && let Err(e) = client.set_log_level(level).await {
                tracing::warn!(error = %e, "setting the log level failed");
            }
        }
        Ok(client)
    }
}
