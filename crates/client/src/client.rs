//! The handle applications call: typed requests for every server feature of every version.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use modelctx_session::{Era, LogLevel, PeerInfo, ProtocolVersion, RequestOptions};
use modelctx_types::consts::{
    CompletionComplete, LoggingSetLevel, PromptsGet, PromptsList, ResourcesList, ResourcesRead,
    ResourcesSubscribe, ResourcesTemplatesList, ResourcesUnsubscribe, ServerDiscover, ToolsCall,
    ToolsList,
};
#[cfg(feature = "http")]
use modelctx_types::{ErrorCode, ErrorObject};
use modelctx_types::{JsonObject, meta_keys, model};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::Instrument;

use crate::driver::{Answer, Call, Command, Shared};
use crate::error::Error;
use crate::input::Ask;
use crate::link::Hints;
use crate::notify::{Notifications, Progress, ProgressFn};
use crate::output::OutputSchema;
#[cfg(feature = "http")]
use crate::params::ToolHeaders;
use crate::wire;

/// The result of `method` as its model type (the `ServerResult` variant named), or
/// [`Error::InvalidResult`].
macro_rules! typed {
    ($client:expr, $method:expr, $answer:expr, $variant:ident) => {
        match $client.decode($method, &$answer)? {
            model::ServerResult::$variant(r) => r,
            _ => return Err(Error::invalid($method, "a result of another method")),
        }
    };
}

/// The methods a modern server may answer with `input_required`.
const MRTR_METHODS: &[&str] = &[ToolsCall::VALUE, PromptsGet::VALUE, ResourcesRead::VALUE];
/// `list_all_*` follows at most this many pages.
const MAX_PAGES: usize = 10_000;
/// `list_all_*` reads at most this much JSON in all (the results of its pages as received).
const MAX_LIST_BYTES: usize = 64 << 20;
/// `list_all_*` refuses a longer cursor.
const MAX_CURSOR_BYTES: usize = 8 << 10;

/// A connection to one MCP server. Cheap to clone; every clone drives the same connection, which
/// closes when [`close`](Self::close) is called or the last clone is dropped.
///
/// Every call has a timeout (60 s unless configured) and is cancelled on the wire, as its era
/// defines it, when it times out or when its future is dropped.
///
/// ```no_run
/// use modelctx_client::{Client, ServerCommand};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::builder("my-host", "1.0.0")
///     .connect_stdio(ServerCommand::new("my-mcp-server"))
///     .await?;
/// for tool in client.list_all_tools().await? {
///     println!("{}: {}", tool.name, tool.description.unwrap_or_default());
/// }
/// let resource = client.read_resource("file:///README.md").await?;
/// let prompt = client.get_prompt("review", &[("code", "fn main() {}")]).await?;
/// # let _ = (resource, prompt);
/// client.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) shared: Arc<Shared>,
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) dropped: mpsc::UnboundedSender<u64>,
    pub(crate) defaults: Defaults,
    pub(crate) next_token: AtomicU64,
    /// [`ClientBuilder::layer`](crate::ClientBuilder::layer)'s chain; `None`: no layer.
    pub(crate) layers: Option<crate::middleware::Chain>,
}

/// Defaults for every call.
pub(crate) struct Defaults {
    pub(crate) timeout: Option<Duration>,
    pub(crate) progress_reset: Option<Duration>,
    pub(crate) max_rounds: u32,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("peer", &self.inner.shared.peer())
            .finish_non_exhaustive()
    }
}

/// Options of one call.
#[derive(Clone, Default)]
pub struct CallOptions {
    timeout: Option<Option<Duration>>,
    progress: Option<ProgressFn>,
    reset_on_progress: Option<Duration>,
    reissue: Option<bool>,
    capabilities: Option<JsonObject>,
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("timeout", &self.timeout)
            .field("progress", &self.progress.is_some())
            .field("reset_on_progress", &self.reset_on_progress)
            .field("reissue", &self.reissue)
            .field("capabilities", &self.capabilities)
            .finish()
    }
}

impl CallOptions {
    /// The client's defaults.
    pub fn new() -> Self {
        CallOptions::default()
    }

    /// Fail (and cancel) the call after `timeout`; `None` waits forever.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Ask for progress and pass each notification to `callback` (called on the connection's
    /// task: keep it short).
    pub fn on_progress(mut self, callback: impl Fn(Progress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(callback));
        self
    }

    /// Restart the timeout whenever progress arrives, but never wait longer than `max_total`.
    pub fn reset_timeout_on_progress(mut self, max_total: Duration) -> Self {
        self.reset_on_progress = Some(max_total);
        self
    }

    /// Whether the request may be sent again (with a new id) when its response stream breaks
    /// before the answer; only modern servers over HTTP lose requests that way.
    ///
    /// Default: a `tools/call` is sent again only when the server listed the tool with
    /// `annotations.idempotentHint: true` (the client remembers the tools it listed); any other
    /// request is. `reissue(true)` allows it for a tool that is not marked idempotent (at most
    /// `max_reissues` times, a setting of the HTTP transport), `reissue(false)` forbids it. A
    /// call that is not sent again fails with [`Error::Transport`].
    pub fn reissue(mut self, reissue: bool) -> Self {
        self.reissue = Some(reissue);
        self
    }

    /// In the modern era (2026-07-28), the request declares these client capabilities, narrowed
    /// to those the client itself declares (its handlers could not answer more), instead of
    /// the client's own: a server asks this request only for what both have. For a front (a
    /// gateway) asking on behalf of a client of its own, whose capabilities these are.
    /// Capabilities the call adds for itself (the tasks extension of
    /// [`Client::call_tool_as_task`](crate::Client::call_tool_as_task)) are kept. A legacy
    /// server's session has one set of capabilities: there this option changes nothing.
    pub fn client_capabilities(mut self, capabilities: JsonObject) -> Self {
        self.capabilities = Some(capabilities);
        self
    }
}

/// Adds `extra`'s members to `caps`, objects merged one level deep.
fn merge_capabilities(caps: &mut JsonObject, extra: &JsonObject) {
    for (key, value) in extra {
        match (caps.get_mut(key), value) {
            (Some(Value::Object(into)), Value::Object(added)) => {
                for (k, v) in added {
                    into.insert(k.clone(), v.clone());
                }
            }
            (None, value) => {
                caps.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
}

/// What `wanted` and `declared` both declare: the members of `wanted` that `declared` has,
/// objects narrowed member by member (a capability's settings too), other values `wanted`'s.
pub(crate) fn narrow_capabilities(wanted: &JsonObject, declared: &JsonObject) -> JsonObject {
    wanted
        .iter()
        .filter_map(|(key, value)| {
            let narrowed = match (value, declared.get(key)?) {
                (Value::Object(wanted), Value::Object(declared)) => {
                    Value::Object(narrow_capabilities(wanted, declared))
                }
                (value, _) => value.clone(),
            };
            Some((key.clone(), narrowed))
        })
        .collect()
}

/// What a completion is for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompletionRef {
    /// An argument of the prompt of this name.
    Prompt(String),
    /// A variable of the resource template with this URI template.
    Resource(String),
}

/// Cancels a call on the wire when its future is dropped before the answer.
struct CancelOnDrop<'a> {
    token: u64,
    dropped: &'a mpsc::UnboundedSender<u64>,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.dropped.send(self.token);
        }
    }
}

impl Client {
    pub(crate) fn from_inner(inner: Inner) -> Client {
        Client {
            inner: Arc::new(inner),
        }
    }

    // -- what is known of the server --------------------------------------------------------------

    fn peer(&self) -> Option<PeerInfo> {
        self.inner.shared.peer()
    }

    /// The protocol version spoken, while connected.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.peer().map(|p| p.version)
    }

    /// The era of the server, while connected.
    pub fn era(&self) -> Option<Era> {
        self.protocol_version().map(ProtocolVersion::era)
    }

    /// The server's `serverInfo` (legacy `initialize`, or modern `server/discover` when it sent
    /// one); `None` when unknown or not an `Implementation` (see
    /// [`server_info_json`](Self::server_info_json)).
    pub fn server_info(&self) -> Option<model::Implementation> {
        let peer = self.peer()?;
        wire::implementation(peer.version, peer.info?)
    }

    /// The server's `serverInfo` as it was sent.
    pub fn server_info_json(&self) -> Option<Value> {
        self.peer().and_then(|p| p.info)
    }

    /// The server's declared capabilities (`None` when unknown, or not valid capabilities: see
    /// [`server_capabilities_json`](Self::server_capabilities_json)).
    pub fn server_capabilities(&self) -> Option<model::ServerCapabilities> {
        let peer = self.peer()?;
        wire::server_capabilities(peer.version, Value::Object(peer.capabilities?))
    }

    /// The server's declared capabilities as they were sent (`None` when unknown).
    pub fn server_capabilities_json(&self) -> Option<JsonObject> {
        self.peer().and_then(|p| p.capabilities)
    }

    /// The server's instructions, when it gave some.
    pub fn instructions(&self) -> Option<String> {
        self.peer().and_then(|p| p.instructions)
    }

    /// Whether the connection has ended for good.
    pub fn is_closed(&self) -> bool {
        self.inner
            .shared
            .closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// The notifications the server sends from now on (list changes, resource updates, log
    /// messages). In the modern era this opens the client's `subscriptions/listen` stream for
    /// list changes, if the server offers any.
    ///
    /// ```no_run
    /// use modelctx_client::ServerNotification;
    ///
    /// # async fn f(client: modelctx_client::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut notifications = client.notifications();
    /// while let Ok(notification) = notifications.recv().await {
    ///     match notification {
    ///         ServerNotification::ToolsListChanged | ServerNotification::Resynced => {
    ///             let tools = client.list_all_tools().await?;
    ///             println!("{} tools now", tools.len());
    ///         }
    ///         ServerNotification::Log(message) => println!("{message:?}"),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn notifications(&self) -> Notifications {
        let rx = match &*self
            .inner
            .shared
            .notifications
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            Some(tx) => tx.subscribe(),
            None => broadcast::channel(1).1,
        };
        if let Err(mpsc::error::TrySendError::Full(command)) =
            self.inner.commands.try_send(Command::Listen(None))
        {
            // The queue is busy: the request to listen waits its turn rather than being lost.
            let commands = self.inner.commands.clone();
            tokio::spawn(async move { commands.send(command).await });
        }
        Notifications { rx }
    }

    /// Returns once the server delivers list changes to [`notifications`](Self::notifications):
    /// in the legacy era at once, but over Streamable HTTP only when the session's standalone
    /// GET stream is open (or the server turned out to offer none), since that stream carries
    /// what the server sends outside of requests (list changes, and its own requests such as
    /// elicitations); in the modern era when the server has acknowledged the client's
    /// `subscriptions/listen` stream (or has none of the list changes to offer). Waits at most
    /// the client's request timeout ([`Error::Timeout`]; the stream stays open).
    pub async fn listening(&self) -> Result<(), Error> {
        let (reply, done) = oneshot::channel();
        self.inner
            .commands
            .send(Command::Listen(Some(reply)))
            .await
            .map_err(|_| self.closed_error())?;
        self.acknowledged(done).await
    }

    /// The driver's answer to a listen or subscription change, waited for at most the request
    /// timeout: a server that never acknowledges its listen stream does not hold the caller.
    async fn acknowledged(&self, done: oneshot::Receiver<Result<(), Error>>) -> Result<(), Error> {
        let answer = match self.inner.defaults.timeout {
            Some(limit) => tokio::time::timeout(limit, done)
                .await
                .map_err(|_| Error::Timeout(limit))?,
            None => done.await,
        };
        answer.unwrap_or_else(|_| Err(self.closed_error()))
    }

    // -- the request machinery ------------------------------------------------------------------

    fn closed_error(&self) -> Error {
        Error::Closed(self.inner.shared.closed_reason())
    }

    /// Sends one request and waits for its answer: through the middleware chain, when the
    /// client has one.
    async fn send_once(
        &self,
        method: &str,
        params: JsonObject,
        options: &CallOptions,
    ) -> Result<Answer, Error> {
        let Some(layers) = &self.inner.layers else {
            return self.send_now(method, params, options).await;
        };
        let client = self.clone();
        let (owned_method, options) = (method.to_owned(), options.clone());
        let send: crate::middleware::SendFn = Box::new(move |params| {
            Box::pin(async move { client.send_now(&owned_method, params, &options).await })
        });
        let request =
            crate::middleware::McpRequest::new(method, params, self.protocol_version(), send);
        layers.call(request).await
    }

    /// Sends one request on the connection and waits for its answer.
    async fn send_now(
        &self,
        method: &str,
        params: JsonObject,
        options: &CallOptions,
    ) -> Result<Answer, Error> {
        let token = self.inner.next_token.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        let defaults = &self.inner.defaults;
        let mut request =
            RequestOptions::default().with_timeout(options.timeout.unwrap_or(defaults.timeout));
        if options.progress.is_some() {
            request = request.with_progress();
        }
        if let Some(max) = options.reset_on_progress.or(defaults.progress_reset)
            && options.progress.is_some()
        {
            request = request.with_progress_reset(max);
        }
        let mut params = params;
        if let Some(wanted) = &options.capabilities {
            // Those of the request: the caller's, narrowed to the client's own, plus what the
            // call declared for itself.
            let mut declared = narrow_capabilities(wanted, &self.inner.shared.capabilities);
            let meta = params
                .entry("_meta")
                .or_insert_with(|| Value::Object(JsonObject::new()));
            if let Value::Object(meta) = meta {
                if let Some(Value::Object(own)) = meta.get(meta_keys::CLIENT_CAPABILITIES) {
                    merge_capabilities(&mut declared, own);
                }
                meta.insert(
                    meta_keys::CLIENT_CAPABILITIES.into(),
                    Value::Object(declared),
                );
            }
            request = request.with_only_request_capabilities();
        }
        let hints = self.hints(method, &params, options);
        let call = Call {
            token,
            method: method.to_owned(),
            params,
            options: request,
            progress: options.progress.clone(),
            hints,
            reply,
        };
        if self.inner.commands.send(Command::Call(call)).await.is_err() {
            return Err(self.closed_error());
        }
        let mut guard = CancelOnDrop {
            token,
            dropped: &self.inner.dropped,
            armed: true,
        };
        let answer = answer.await;
        guard.armed = false;
        answer.unwrap_or_else(|_| Err(self.closed_error()))
    }

    /// How the transport may carry a request: a `tools/call` is sent again when its stream
    /// breaks only if the tool was listed idempotent (or the caller says so), and carries the
    /// `Mcp-Param-*` headers of the tool's listed `x-mcp-header` parameters (modern HTTP).
    fn hints(&self, method: &str, params: &JsonObject, options: &CallOptions) -> Hints {
        if method != ToolsCall::VALUE {
            // `Hints` has more fields only with the `http` feature.
            #[allow(clippy::needless_update)]
            return Hints {
                reissue: options.reissue.unwrap_or(true),
                ..Hints::default()
            };
        }
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let tools = self
            .inner
            .shared
            .tool_schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let tool = tools.get(name);
        Hints {
            reissue: options
                .reissue
                .unwrap_or_else(|| tool.is_some_and(|tool| tool.idempotent)),
            #[cfg(feature = "http")]
            param_headers: tool.and_then(|tool| tool.headers.clone()),
        }
    }

    /// Sends a request and runs the modern multi round-trip loop: an `input_required` answer is
    /// answered with the application's handlers and the request retried with a new id, the
    /// `inputResponses` and the `requestState` echoed verbatim, for a bounded number of rounds.
    pub(crate) async fn call(
        &self,
        method: &str,
        mut params: JsonObject,
        options: &CallOptions,
    ) -> Result<Answer, Error> {
        // The call's span and measure (`crate::observe`); its trace context goes in `_meta`.
        let observed = crate::observe::Observed::start(&self.inner.shared, method, &params);
        observed.inject(&mut params);
        let answer = self
            .call_rounds(method, params, options)
            .instrument(observed.span().clone())
            .await;
        observed.finish(&answer);
        answer
    }

    /// [`Client::call`]'s rounds: one, or those of a modern multi round-trip request.
    async fn call_rounds(
        &self,
        method: &str,
        mut params: JsonObject,
        options: &CallOptions,
    ) -> Result<Answer, Error> {
        let level = *self
            .inner
            .shared
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let (Some(level), Some(Era::Modern)) = (level, self.era()) {
            let meta = params
                .entry("_meta")
                .or_insert_with(|| Value::Object(JsonObject::new()));
            if let Value::Object(meta) = meta {
                meta.insert(meta_keys::LOG_LEVEL.into(), Value::from(level.as_str()));
            }
        }
        let mut rounds = 0;
        loop {
            let answer = self.send_once(method, params.clone(), options).await?;
            if answer.version.era() != Era::Modern
                || !MRTR_METHODS.contains(&method)
                || wire::result_type(&answer.result) != "input_required"
            {
                return Ok(answer);
            }
            rounds += 1;
            if rounds > self.inner.defaults.max_rounds {
                return Err(Error::TooManyRounds(rounds - 1));
            }
            let input =
                wire::input_required(&answer.result).map_err(|e| Error::invalid(method, e))?;
            let responses = self
                .answer_inputs(answer.version, input.input_requests.unwrap_or_default())
                .await?;
            if responses.is_empty() {
                params.remove("inputResponses");
            } else {
                params.insert("inputResponses".into(), Value::Object(responses));
            }
            match input.request_state {
                Some(state) => params.insert("requestState".into(), Value::String(state)),
                None => params.remove("requestState"),
            };
        }
    }

    /// Answers every input request of one round, at once.
    pub(crate) async fn answer_inputs(
        &self,
        version: ProtocolVersion,
        requests: BTreeMap<String, model::InputRequest>,
    ) -> Result<JsonObject, Error> {
        let mut tasks = tokio::task::JoinSet::new();
        let round = crate::input::InputRound::new(requests.keys().cloned().collect());
        for (key, request) in requests {
            let handlers = self.inner.shared.handlers.clone();
            let round = round.clone();
            tasks.spawn(async move {
                let Some(ask) = Ask::from_input(request) else {
                    return (
                        key,
                        "input",
                        Err("an input request of an unknown kind".to_owned()),
                    );
                };
                let method = ask.method();
                let answer =
                    crate::input::with_input(key.clone(), round, handlers.answer(version, ask))
                        .await;
                (key, method, answer)
            });
        }
        let mut responses = JsonObject::new();
        while let Some(done) = tasks.join_next().await {
            let (key, method, answer) = done.map_err(|e| Error::Input {
                method: "input".into(),
                reason: e.to_string(),
            })?;
            let value = answer.map_err(|reason| Error::Input {
                method: method.into(),
                reason,
            })?;
            responses.insert(key, value);
        }
        Ok(responses)
    }

    fn decode(&self, method: &str, answer: &Answer) -> Result<model::ServerResult, Error> {
        wire::result(answer.version, method, &answer.result).map_err(|e| match e {
            // Its text names the method already.
            modelctx_types::ResultDecodeError::Invalid { source, .. } => {
                Error::invalid(method, source)
            }
            other => Error::invalid(method, other),
        })
    }

    /// Calls `method` with `params` (the client's own `_meta` members are added) and returns the
    /// result as JSON: for methods this crate has no typed call for, such as extensions. The
    /// modern multi round-trip loop applies to `tools/call`, `prompts/get` and `resources/read`.
    pub async fn request(
        &self,
        method: &str,
        params: JsonObject,
        options: CallOptions,
    ) -> Result<Value, Error> {
        let answer = self.call(method, params, &options).await?;
        serde_json::from_str(answer.result.get()).map_err(|e| Error::invalid(method, e))
    }

    /// A cacheable call: answered from the cache when it holds a fresh result.
    async fn cached(
        &self,
        method: &'static str,
        params: JsonObject,
        options: &CallOptions,
    ) -> Result<Answer, Error> {
        let Some((cache, scope)) = &self.inner.shared.cache else {
            return self.call(method, params, options).await;
        };
        let key = Value::Object(params.clone()).to_string();
        if let (Some(result), Some(version)) = (
            cache.get(scope, method, &key, crate::driver::now()),
            self.protocol_version(),
        ) {
            let result = serde_json::value::RawValue::from_string(result.get().to_owned())
                .map_err(|e| Error::invalid(method, e))?;
            return Ok(Answer { version, result });
        }
        let answer = self.call(method, params, options).await?;
        cache.put(scope, method, &key, &answer.result, crate::driver::now());
        Ok(answer)
    }

    // -- tools ----------------------------------------------------------------------------------

    /// One page of `tools/list`. Output schemas are remembered, to check `structuredContent`.
    pub async fn list_tools(&self, cursor: Option<&str>) -> Result<model::ListToolsResult, Error> {
        Ok(self.tools_page(cursor).await?.0)
    }

    /// A page of `tools/list` and the size of its JSON.
    async fn tools_page(
        &self,
        cursor: Option<&str>,
    ) -> Result<(model::ListToolsResult, usize), Error> {
        let method = ToolsList::VALUE;
        let answer = self
            .cached(method, page(cursor), &CallOptions::new())
            .await?;
        let size = answer.result.get().len();
        #[cfg(feature = "http")]
        let (answer, headers) = self.header_rules(answer);
        let result = typed!(self, method, answer, ListTools);
        self.remember_tools(&answer);
        #[cfg(feature = "http")]
        self.remember_headers(headers);
        Ok((result, size))
    }

    /// Over Streamable HTTP in the modern era: leaves out of a `tools/list` result the tools
    /// whose `x-mcp-header` annotations break a rule (the specification requires it; a warning
    /// names each tool and why), and remembers the others' parameters for the `Mcp-Param-*`
    /// headers of their calls.
    #[cfg(feature = "http")]
    fn header_rules(&self, answer: Answer) -> (Answer, ToolHeaders) {
        if !self.inner.shared.over_http || answer.version.era() != Era::Modern {
            return (answer, Vec::new());
        }
        let Some(filtered) = crate::params::filter_list(&answer.result) else {
            return (answer, Vec::new());
        };
        for dropped in &filtered.dropped {
            tracing::warn!(
                tool = %dropped.tool,
                reason = %dropped.reason,
                "tool left out of tools/list: its x-mcp-header annotations break the rules"
            );
        }
        let answer = Answer {
            version: answer.version,
            result: filtered.result,
        };
        (answer, filtered.headers)
    }

    /// Remembers the `x-mcp-header` parameters of listed tools (after
    /// [`remember_tools`](Self::remember_tools), which replaces each tool's entry).
    #[cfg(feature = "http")]
    fn remember_headers(&self, headers: ToolHeaders) {
        let mut tools = self
            .inner
            .shared
            .tool_schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (name, headers) in headers {
            tools.record_headers(&name, headers);
        }
    }

    /// Lists the tools again (every page, not from the cache), for their `x-mcp-header`
    /// parameters: after a -32020 the tool's schema may have changed since it was listed.
    #[cfg(feature = "http")]
    async fn relist_tools(&self) -> Result<(), Error> {
        all_pages(ToolsList::VALUE, |cursor| async move {
            let answer = self
                .call(
                    ToolsList::VALUE,
                    page(cursor.as_deref()),
                    &CallOptions::new(),
                )
                .await?;
            let size = answer.result.get().len();
            let (answer, headers) = self.header_rules(answer);
            let page = typed!(self, ToolsList::VALUE, answer, ListTools);
            self.remember_tools(&answer);
            self.remember_headers(headers);
            Ok((page.tools, page.next_cursor, size))
        })
        .await
        .map(drop)
    }

    /// Every tool, following cursors: at most 10 000 pages and 64 MiB of JSON in all; a cursor
    /// longer than 8 KiB, or one that came before, is [`Error::InvalidResult`].
    pub async fn list_all_tools(&self) -> Result<Vec<model::Tool>, Error> {
        all_pages(ToolsList::VALUE, |cursor| async move {
            let (page, size) = self.tools_page(cursor.as_deref()).await?;
            Ok((page.tools, page.next_cursor, size))
        })
        .await
    }

    /// Remembers the output schema and the idempotence of each tool of a `tools/list` page.
    fn remember_tools(&self, answer: &Answer) {
        #[derive(serde::Deserialize)]
        struct Listed<'a> {
            #[serde(borrow)]
            tools: Vec<ListedTool<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct ListedTool<'a> {
            name: String,
            #[serde(rename = "outputSchema", borrow)]
            output_schema: Option<&'a RawValue>,
            annotations: Option<Annotations>,
            execution: Option<Execution>,
        }
        #[derive(serde::Deserialize)]
        struct Annotations {
            #[serde(rename = "idempotentHint")]
            idempotent_hint: Option<bool>,
        }
        #[derive(serde::Deserialize)]
        struct Execution {
            #[serde(rename = "taskSupport")]
            task_support: Option<String>,
        }
        let Ok(listed) = serde_json::from_str::<Listed<'_>>(answer.result.get()) else {
            return;
        };
        let mut tools = self
            .inner
            .shared
            .tool_schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for tool in listed.tools {
            // `null` is no schema.
            let output = tool.output_schema.filter(|raw| raw.get() != "null");
            let idempotent = tool
                .annotations
                .and_then(|a| a.idempotent_hint)
                .unwrap_or(false);
            let tasks = tool
                .execution
                .and_then(|e| e.task_support)
                .map(|support| support != "forbidden");
            let name = tool.name.clone();
            tools.record(tool.name, output, idempotent);
            if let Some(tasks) = tasks {
                tools.record_task_support(&name, tasks);
            }
        }
    }

    /// Calls tool `name` with `arguments` (anything that serializes to a JSON object; `()` for
    /// none).
    ///
    /// A tool that failed is a result with `is_error: Some(true)` (its content says why), not an
    /// `Err`: errors are for calls that got no result.
    ///
    /// ```no_run
    /// use modelctx_client::model::ContentBlock;
    ///
    /// # async fn f(client: modelctx_client::Client) -> Result<(), modelctx_client::Error> {
    /// let result = client.call_tool("add", serde_json::json!({"a": 2, "b": 3})).await?;
    /// if result.is_error == Some(true) {
    ///     eprintln!("the tool failed");
    /// }
    /// for block in &result.content {
    ///     if let ContentBlock::TextContent(text) = block {
    ///         println!("{}", text.text);
    ///     }
    /// }
    /// println!("{:?}", result.structured_content);
    /// # Ok(()) }
    /// ```
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: impl Serialize,
    ) -> Result<model::CallToolResult, Error> {
        self.call_tool_with(name, arguments, CallOptions::new())
            .await
    }

    /// [`call_tool`](Self::call_tool) with options (progress, timeout).
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// use modelctx_client::CallOptions;
    ///
    /// # async fn f(client: modelctx_client::Client) -> Result<(), modelctx_client::Error> {
    /// let options = CallOptions::new()
    ///     .timeout(Some(Duration::from_secs(300)))
    ///     .on_progress(|p| println!("{}/{:?} {}", p.progress, p.total, p.message.unwrap_or_default()));
    /// let result = client.call_tool_with("build", serde_json::json!({}), options).await?;
    /// # let _ = result; Ok(()) }
    /// ```
    ///
    /// When the tool was listed with an output schema, a successful result must carry
    /// `structuredContent` that matches it ([`Error::StructuredContent`] otherwise).
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: impl Serialize,
        options: CallOptions,
    ) -> Result<model::CallToolResult, Error> {
        let params = tool_params(name, arguments)?;
        let answer = self.send_tool_call(params, &options).await?;
        self.tool_result(name, &answer).await
    }

    /// Sends a `tools/call` with `params`; over modern HTTP a -32020 lists the tools again and
    /// sends it once more.
    pub(crate) async fn send_tool_call(
        &self,
        params: JsonObject,
        options: &CallOptions,
    ) -> Result<Answer, Error> {
        let method = ToolsCall::VALUE;
        match self.call(method, params.clone(), options).await {
            #[cfg(feature = "http")]
            Err(Error::Remote(e)) if self.header_mismatch(&e) => {
                // The tool's schema may have changed since it was listed (or it was not
                // listed): list again and retry once; a second mismatch is the answer.
                self.relist_tools().await?;
                self.call(method, params, options).await
            }
            answer => answer,
        }
    }

    /// A `tools/call` result of tool `name`, decoded and its `structuredContent` checked.
    pub(crate) async fn tool_result(
        &self,
        name: &str,
        answer: &Answer,
    ) -> Result<model::CallToolResult, Error> {
        let method = ToolsCall::VALUE;
        let result = match self.decode(method, answer)? {
            model::ServerResult::CallTool(r) => r,
            _ => return Err(Error::invalid(method, "a result of another method")),
        };
        self.check_structured(name, &result, answer.result.get().len())
            .await?;
        Ok(result)
    }

    /// A -32020 (a `Mcp-Param-*` header missing or not matching its argument) from a modern
    /// server over Streamable HTTP.
    #[cfg(feature = "http")]
    fn header_mismatch(&self, error: &ErrorObject) -> bool {
        error.code == ErrorCode::HEADER_MISMATCH
            && self.inner.shared.over_http
            && self.era() == Some(Era::Modern)
    }

    /// Checks the `structuredContent` of a result of `tool` (`size`: bytes of the result's JSON).
    async fn check_structured(
        &self,
        tool: &str,
        result: &model::CallToolResult,
        size: usize,
    ) -> Result<(), Error> {
        if result.is_error == Some(true) {
            return Ok(());
        }
        let schema = self
            .inner
            .shared
            .tool_schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tool)
            .and_then(|t| t.output.clone());
        let schema = match schema {
            None => return Ok(()),
            Some(OutputSchema::Schema(schema, _)) => schema,
            Some(OutputSchema::NotStored(why)) => {
                return Err(Error::StructuredContent {
                    tool: tool.into(),
                    reason: format!(
                        "{why}: the client did not keep it, so it cannot check the result"
                    ),
                });
            }
        };
        let Some(content) = &result.structured_content else {
            return Err(Error::StructuredContent {
                tool: tool.into(),
                reason: "the tool has an output schema but the result has no structuredContent"
                    .into(),
            });
        };
        crate::output::check(&self.inner.shared, &schema, content, size)
            .await
            .map_err(|reason| Error::StructuredContent {
                tool: tool.into(),
                reason,
            })
    }

    // -- resources ------------------------------------------------------------------------------

    /// One page of `resources/list`.
    pub async fn list_resources(
        &self,
        cursor: Option<&str>,
    ) -> Result<model::ListResourcesResult, Error> {
        Ok(self.resources_page(cursor).await?.0)
    }

    async fn resources_page(
        &self,
        cursor: Option<&str>,
    ) -> Result<(model::ListResourcesResult, usize), Error> {
        let method = ResourcesList::VALUE;
        let answer = self
            .cached(method, page(cursor), &CallOptions::new())
            .await?;
        let size = answer.result.get().len();
        Ok((typed!(self, method, answer, ListResources), size))
    }

    /// Every resource, following cursors: at most 10 000 pages and 64 MiB of JSON in all; a cursor
    /// longer than 8 KiB, or one that came before, is [`Error::InvalidResult`].
    pub async fn list_all_resources(&self) -> Result<Vec<model::Resource>, Error> {
        all_pages(ResourcesList::VALUE, |cursor| async move {
            let (page, size) = self.resources_page(cursor.as_deref()).await?;
            Ok((page.resources, page.next_cursor, size))
        })
        .await
    }

    /// One page of `resources/templates/list`.
    pub async fn list_resource_templates(
        &self,
        cursor: Option<&str>,
    ) -> Result<model::ListResourceTemplatesResult, Error> {
        Ok(self.templates_page(cursor).await?.0)
    }

    async fn templates_page(
        &self,
        cursor: Option<&str>,
    ) -> Result<(model::ListResourceTemplatesResult, usize), Error> {
        let method = ResourcesTemplatesList::VALUE;
        let answer = self
            .cached(method, page(cursor), &CallOptions::new())
            .await?;
        let size = answer.result.get().len();
        Ok((typed!(self, method, answer, ListResourceTemplates), size))
    }

    /// Every resource template, following cursors: at most 10 000 pages and 64 MiB of JSON in all; a cursor
    /// longer than 8 KiB, or one that came before, is [`Error::InvalidResult`].
    pub async fn list_all_resource_templates(&self) -> Result<Vec<model::ResourceTemplate>, Error> {
        all_pages(ResourcesTemplatesList::VALUE, |cursor| async move {
            let (page, size) = self.templates_page(cursor.as_deref()).await?;
            Ok((page.resource_templates, page.next_cursor, size))
        })
        .await
    }

    /// Reads the resource `uri`.
    pub async fn read_resource(&self, uri: &str) -> Result<model::ReadResourceResult, Error> {
        self.read_resource_with(uri, CallOptions::new()).await
    }

    /// [`read_resource`](Self::read_resource) with options.
    pub async fn read_resource_with(
        &self,
        uri: &str,
        options: CallOptions,
    ) -> Result<model::ReadResourceResult, Error> {
        let method = ResourcesRead::VALUE;
        let mut params = JsonObject::new();
        params.insert("uri".into(), Value::from(uri));
        let answer = self.cached(method, params, &options).await?;
        Ok(typed!(self, method, answer, ReadResource))
    }

    /// Asks for `notifications/resources/updated` about `uri`: `resources/subscribe` in the
    /// legacy era; in the modern era the URI joins the client's `subscriptions/listen` stream
    /// (returns once the server acknowledged it, or [`Error::Timeout`] after the client's request
    /// timeout, the stream still asking for the URI).
    pub async fn subscribe_resource(&self, uri: &str) -> Result<(), Error> {
        self.subscription(uri, true).await
    }

    /// Stops the updates about `uri`.
    pub async fn unsubscribe_resource(&self, uri: &str) -> Result<(), Error> {
        self.subscription(uri, false).await
    }

    async fn subscription(&self, uri: &str, on: bool) -> Result<(), Error> {
        if self.era() == Some(Era::Modern) {
            let (reply, done) = oneshot::channel();
            let command = Command::Subscribe {
                uri: uri.to_owned(),
                on,
                reply,
            };
            self.inner
                .commands
                .send(command)
                .await
                .map_err(|_| self.closed_error())?;
            return self.acknowledged(done).await;
        }
        let method = if on {
            ResourcesSubscribe::VALUE
        } else {
            ResourcesUnsubscribe::VALUE
        };
        let mut params = JsonObject::new();
        params.insert("uri".into(), Value::from(uri));
        self.call(method, params, &CallOptions::new())
            .await
            .map(drop)
    }

    // -- prompts --------------------------------------------------------------------------------

    /// One page of `prompts/list`.
    pub async fn list_prompts(
        &self,
        cursor: Option<&str>,
    ) -> Result<model::ListPromptsResult, Error> {
        Ok(self.prompts_page(cursor).await?.0)
    }

    async fn prompts_page(
        &self,
        cursor: Option<&str>,
    ) -> Result<(model::ListPromptsResult, usize), Error> {
        let method = PromptsList::VALUE;
        let answer = self
            .cached(method, page(cursor), &CallOptions::new())
            .await?;
        let size = answer.result.get().len();
        Ok((typed!(self, method, answer, ListPrompts), size))
    }

    /// Every prompt, following cursors: at most 10 000 pages and 64 MiB of JSON in all; a cursor
    /// longer than 8 KiB, or one that came before, is [`Error::InvalidResult`].
    pub async fn list_all_prompts(&self) -> Result<Vec<model::Prompt>, Error> {
        all_pages(PromptsList::VALUE, |cursor| async move {
            let (page, size) = self.prompts_page(cursor.as_deref()).await?;
            Ok((page.prompts, page.next_cursor, size))
        })
        .await
    }

    /// Gets prompt `name` with `arguments` (string values).
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: &[(&str, &str)],
    ) -> Result<model::GetPromptResult, Error> {
        self.get_prompt_with(name, arguments, CallOptions::new())
            .await
    }

    /// [`get_prompt`](Self::get_prompt) with options.
    pub async fn get_prompt_with(
        &self,
        name: &str,
        arguments: &[(&str, &str)],
        options: CallOptions,
    ) -> Result<model::GetPromptResult, Error> {
        let method = PromptsGet::VALUE;
        let mut params = JsonObject::new();
        params.insert("name".into(), Value::from(name));
        if !arguments.is_empty() {
            let args: JsonObject = arguments
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
                .collect();
            params.insert("arguments".into(), Value::Object(args));
        }
        let answer = self.call(method, params, &options).await?;
        Ok(typed!(self, method, answer, GetPrompt))
    }

    // -- the rest -------------------------------------------------------------------------------

    /// Completions for argument `name` (its current `value`) of a prompt or resource template;
    /// `context` holds the values of arguments already chosen.
    pub async fn complete(
        &self,
        reference: &CompletionRef,
        name: &str,
        value: &str,
        context: &HashMap<String, String>,
    ) -> Result<model::CompleteResultCompletion, Error> {
        let method = CompletionComplete::VALUE;
        let reference = match reference {
            CompletionRef::Prompt(name) => serde_json::json!({"type": "ref/prompt", "name": name}),
            CompletionRef::Resource(uri) => {
                serde_json::json!({"type": "ref/resource", "uri": uri})
            }
        };
        let mut params = JsonObject::new();
        params.insert("ref".into(), reference);
        params.insert(
            "argument".into(),
            serde_json::json!({"name": name, "value": value}),
        );
        if !context.is_empty() {
            params.insert(
                "context".into(),
                serde_json::json!({ "arguments": context }),
            );
        }
        let answer = self.call(method, params, &CallOptions::new()).await?;
        Ok(typed!(self, method, answer, Complete).completion)
    }

    /// `ping` (legacy; modern servers have none: [`Error::NotAvailable`]).
    pub async fn ping(&self) -> Result<(), Error> {
        self.call("ping", JsonObject::new(), &CallOptions::new())
            .await
            .map(drop)
    }

    /// `server/discover` (modern): the server's versions, capabilities and instructions now.
    pub async fn discover(&self) -> Result<model::DiscoverResult, Error> {
        let method = ServerDiscover::VALUE;
        let answer = self
            .call(method, JsonObject::new(), &CallOptions::new())
            .await?;
        Ok(typed!(self, method, answer, Discover))
    }

    /// Sets the level of the log messages the server sends: `logging/setLevel` in the legacy era;
    /// in the modern era the level goes in the `_meta` of every later request (none is sent
    /// before it is set).
    pub async fn set_log_level(&self, level: LogLevel) -> Result<(), Error> {
        *self
            .inner
            .shared
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(level);
        if self.era() == Some(Era::Modern) {
            return Ok(());
        }
        let mut params = JsonObject::new();
        params.insert("level".into(), Value::from(level.as_str()));
        self.call(LoggingSetLevel::VALUE, params, &CallOptions::new())
            .await
            .map(drop)
    }

    /// Tells a legacy server that the roots changed (`notifications/roots/list_changed`); modern
    /// servers ask for roots each time, so nothing is sent to them.
    pub async fn roots_changed(&self) -> Result<(), Error> {
        let (reply, done) = oneshot::channel();
        self.inner
            .commands
            .send(Command::RootsChanged(reply))
            .await
            .map_err(|_| self.closed_error())?;
        done.await.unwrap_or_else(|_| Err(self.closed_error()))
    }

    /// The size of every table of the connection (`None` once it is closed).
    #[doc(hidden)]
    pub async fn table_sizes(&self) -> Option<crate::TableSizes> {
        let (reply, sizes) = oneshot::channel();
        self.inner.commands.send(Command::Sizes(reply)).await.ok()?;
        sizes.await.ok()
    }

    /// How the server process stopped, for a connection to a child process
    /// ([`ClientBuilder::connect_stdio`](crate::ClientBuilder::connect_stdio) and the like) once
    /// the connection has ended and the process has been reaped: after [`close`](Self::close)
    /// returns, or once [`is_closed`](Self::is_closed) and the child has been stopped. `None`
    /// before, for other transports, and when its exit status could not be read. A process
    /// restarted by a reconnect reports only the last one.
    #[cfg(feature = "stdio")]
    pub fn server_exit(&self) -> Option<crate::ServerExit> {
        *self
            .inner
            .shared
            .server_exit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Closes the connection: calls in flight fail with [`Error::Closed`]; a child process is
    /// shut down (stdin closed, then SIGTERM, then SIGKILL); a legacy HTTP session is ended with
    /// `DELETE`. Returns when that is done.
    pub async fn close(&self) {
        let (done, finished) = oneshot::channel();
        if self.inner.commands.send(Command::Close(done)).await.is_ok() {
            let _ = finished.await;
        }
    }
}

/// The params of a `tools/call` of tool `name` with `arguments` (a JSON object, or nothing).
pub(crate) fn tool_params(name: &str, arguments: impl Serialize) -> Result<JsonObject, Error> {
    let mut params = JsonObject::new();
    params.insert("name".into(), Value::from(name));
    match serde_json::to_value(arguments).map_err(|e| Error::InvalidArguments(e.to_string()))? {
        Value::Null => {}
        Value::Object(args) => {
            params.insert("arguments".into(), Value::Object(args));
        }
        other => {
            return Err(Error::InvalidArguments(format!(
                "tool arguments must be a JSON object, not {other}"
            )));
        }
    }
    Ok(params)
}

/// The params of a list request.
fn page(cursor: Option<&str>) -> JsonObject {
    let mut params = JsonObject::new();
    if let Some(cursor) = cursor {
        params.insert("cursor".into(), Value::from(cursor));
    }
    params
}

/// Every item of a paginated list: `page(cursor)` gives one page's items, its next cursor and
/// the size of its JSON. A cursor that came before is refused (a server that would loop
/// forever), and so are a cursor longer than [`MAX_CURSOR_BYTES`], a list of more than
/// [`MAX_PAGES`] pages, and pages of more than [`MAX_LIST_BYTES`] of JSON in all.
pub(crate) async fn all_pages<T, F, Fut>(method: &str, mut page: F) -> Result<Vec<T>, Error>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>, usize), Error>>,
{
    let mut all = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut cursor = None;
    let mut bytes = 0usize;
    for _ in 0..MAX_PAGES {
        let (items, next, size) = page(cursor).await?;
        bytes = bytes.saturating_add(size);
        if bytes > MAX_LIST_BYTES {
            return Err(Error::invalid(
                method,
                format!("the pages take more than {MAX_LIST_BYTES} bytes of JSON in all"),
            ));
        }
        all.extend(items);
        match next {
            Some(c) if c.len() > MAX_CURSOR_BYTES => {
                return Err(Error::invalid(
                    method,
                    format!(
                        "the cursor is {} bytes long, more than {MAX_CURSOR_BYTES}",
                        c.len()
                    ),
                ));
            }
            Some(c) if !seen.insert(c.clone()) => {
                return Err(Error::invalid(method, format!("the cursor {c:?} repeats")));
            }
            Some(c) => cursor = Some(c),
            None => return Ok(all),
        }
    }
    Err(Error::invalid(
        method,
        format!("more than {MAX_PAGES} pages"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list of `pages` pages of `size` bytes each, every one with a new cursor of `cursor`
    /// bytes (the last one without).
    async fn list(pages: usize, size: usize, cursor: usize) -> (Result<Vec<usize>, Error>, usize) {
        let asked = std::cell::Cell::new(0);
        let result = all_pages("tools/list", |_| {
            let n = asked.get();
            asked.set(n + 1);
            async move {
                let next = (n + 1 < pages).then(|| format!("{n:0cursor$}"));
                Ok((vec![n], next, size))
            }
        })
        .await;
        (result, asked.get())
    }

    #[tokio::test]
    async fn finding_9_list_all_stops_beyond_its_byte_budget() {
        let (result, asked) = list(1000, 16 << 20, 10).await;
        assert!(
            matches!(&result, Err(Error::InvalidResult { reason, .. }) if reason.contains("bytes of JSON in all")),
            "{result:?}"
        );
        assert_eq!(asked, 5, "64 MiB is four pages of 16 MiB");
        let (result, _) = list(4, 16 << 20, 10).await;
        assert_eq!(result.unwrap(), [0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn finding_9_list_all_refuses_a_cursor_longer_than_8_kib() {
        let (result, asked) = list(3, 100, MAX_CURSOR_BYTES + 1).await;
        assert!(
            matches!(&result, Err(Error::InvalidResult { reason, .. }) if reason.contains("more than 8192")),
            "{result:?}"
        );
        assert_eq!(asked, 1);
        let (result, _) = list(3, 100, MAX_CURSOR_BYTES).await;
        assert_eq!(result.unwrap(), [0, 1, 2]);
    }
}
