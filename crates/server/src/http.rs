//! Serving a [`Server`] over Streamable HTTP with `modelctx-http` (feature `http`): both eras on
//! one endpoint.
//!
//! A legacy (`initialize`-based) session is plain data between its requests: its
//! [`SessionState`] in the server's [`SessionStore`]. Each POST loads it, resumes a
//! `ServerSession` from it, runs what came with the request runner on the caller's task, saves
//! the state when it changed (`initialize`, `notifications/initialized`, `logging/setLevel`,
//! `resources/subscribe`), and drops the rest. Only requests whose handlers wait go on, on a
//! task of their own until they are answered, entered in a bounded table (by session id and
//! request id, and by the ids of the questions asked for them) so that later POSTs reach them:
//! the client's answers, `notifications/cancelled`, `notifications/initialized`, and the level
//! a `logging/setLevel` set. The server's
//! changes reach open sessions through one task per server, which fans each out to the
//! sessions that should hear it. An idle session costs its stored state, its entry in the
//! transport, and an entry here; no task and no channel.
//!
//! # Fleets
//!
//! Instances of one application sharing a [`SessionStore`], an event store and a
//! [`Bus`] serve each other's legacy sessions:
//!
//! * A request for a session this endpoint does not hold adopts it from the store
//!   ([`McpApp::adopt_session`]). A store that cannot be reached gives 503 with `Retry-After`
//!   (when adopting, loading or saving a state); a session whose state is gone (ended on
//!   another instance, or expired) gets 404.
//! * The ids of the server's own requests carry the instance number (`instance << 40 | n`), so
//!   the client's answer, POSTed to any instance, is sent on to the instance that asked
//!   ([`Bus::to_instance`]). Cancellations,
//!   `notifications/initialized` and a changed log level are broadcast to every instance,
//!   each handing them to the requests it runs for the session (none: nothing happens).
//! * The end of a session (DELETE, its end by the server: [`Closed::Ended`]) removes its state
//!   and events and is broadcast; the other instances end their copies without removing
//!   anything. An adopted copy this endpoint only forgets ([`Closed::Forgotten`]) keeps the
//!   shared state.
//! * Each change reaches each session once: it is written by the instance holding the
//!   session's standalone GET stream (as the event store records it), or, when none does, by
//!   the instance that opened the session (not by an adopted copy).
//! * The instance holding a session's standalone GET stream pushes back its state's expiry
//!   ([`SessionStore::touch`]) every third of the session idle timeout, so that a session
//!   that only listens lives.
//!
//! What it does not do across instances: a change for a session whose opener is gone and
//! whose GET no instance holds is not kept for later; the cap on waiting requests and the
//! duplicate-id check are per instance.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

use modelctx_http::event_store::{BoxFuture, EventStore, StreamId};
use modelctx_http::headers::ParamHeader;
use modelctx_http::server::{
    Adopted, Closed, ConfigError, LegacyHandler, LegacySession, McpApp, McpService, ModernReply,
    ModernRequest, Principal, RequestContext, RunningServer, ServerConfig, Unavailable,
};
use modelctx_session::{LogLevel, Transmit};
use modelctx_types::consts::{LoggingSetLevel, NotificationsCancelled, NotificationsInitialized};
use modelctx_types::{
    ErrorObject, ErrorResponse, Incoming, JsonObject, Message, Notification, RequestId,
};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::bus::{Bus, BusMessage};
use crate::registry::{Change, Shared};
use crate::run::driver::{self, NoInput};
use crate::run::{
    Command, Conn, InMemoryStore, Input, Lifetime, Origin, Output, SessionState, SessionStore,
};
use crate::server::Server;

/// The most requests of legacy sessions whose handlers wait, at once, per server; beyond, a
/// request that would wait is refused (its handler cancelled). The same bound holds for the
/// questions asked for them.
const MAX_WAITING: usize = 4096;

/// Messages for one waiting POST's requests (answers, cancellations) its runner has not read
/// yet; beyond, they are dropped.
const WAITING_QUEUE: usize = 16;

/// How many ids of its own requests each resumed session has (their ids must differ from
/// those of any other request of the session still waiting for an answer).
const ID_RANGE: i64 = 1 << 16;

/// Where the instance number starts in the ids of the server's own requests: an id is
/// `instance << INSTANCE_SHIFT | n` with `n < 2^40`, below 2^52 (exact as a JavaScript number)
/// for every instance up to [`MAX_INSTANCE`](crate::bus::MAX_INSTANCE).
const INSTANCE_SHIFT: u32 = 40;

/// How many ranges of [`ID_RANGE`] ids fit below `2^40` with room for the last range's ids.
const RANGES: i64 = (1 << INSTANCE_SHIFT) / ID_RANGE - 1;

/// The id after which the `n`th resumed session of instance `instance` numbers its own
/// requests: its ids (`ids_after + 1 ..= ids_after + ID_RANGE`) all carry `instance`.
fn ids_after(instance: u16, n: i64) -> i64 {
    (i64::from(instance) << INSTANCE_SHIFT) | (n.rem_euclid(RANGES) * ID_RANGE)
}

/// The instance whose server minted request id `id` ([`ids_after`]); `None` for an id no
/// server mints (a string, a negative number, 2^52 or more).
fn instance_of(id: &RequestId) -> Option<u16> {
    match id {
        RequestId::Number(n) if (0..1 << 52).contains(n) => u16::try_from(n >> INSTANCE_SHIFT).ok(),
        _ => None,
    }
}

/// Whether `stream`, a stream id of `events`, was opened by this instance: stream ids are
/// [`EventStore::stream_base`] plus a number below 2^32.
fn opened_here(events: &dyn EventStore, stream: StreamId) -> bool {
    stream.0 >> 32 == events.stream_base() >> 32
}

/// What a server keeps of its legacy HTTP sessions: their states (in the store), where their
/// output goes, and the requests still running for them.
pub(crate) struct Legacy {
    store: Arc<dyn SessionStore>,
    /// Whether the store was given ([`ServerBuilder::session_store`](crate::ServerBuilder::session_store)),
    /// so possibly shared with other instances.
    store_given: bool,
    /// Open sessions by id: where the server's changes go.
    sessions: Mutex<HashMap<String, Open>>,
    /// Requests still running, and the questions asked for them.
    waiting: Mutex<Waiting>,
    /// How many sessions were resumed: the next one's range of ids ([`ids_after`]).
    next_ids: AtomicI64,
    /// Stops the task that fans the server's changes out to the sessions: it runs while there
    /// are sessions (always locked after `sessions`).
    fan_out: Mutex<Option<CancellationToken>>,
    /// What the endpoint serving the sessions was configured with, as last configured.
    endpoint: Mutex<Option<Endpoint>>,
    /// Where the server's endpoints count their sessions and streams (`McpApp::counters`).
    counters: modelctx_http::server::Counters,
}

/// An open legacy session of this endpoint.
#[derive(Clone)]
struct Open {
    output: LegacySession,
    /// Set when the session ended on another instance ([`BusMessage::Ended`]): its end here
    /// removes nothing shared and is not broadcast again.
    ended_elsewhere: Arc<AtomicBool>,
}

/// What the server needs of its endpoint's configuration.
#[derive(Clone)]
struct Endpoint {
    /// Its event store: which instance holds a session's standalone stream, and the events a
    /// session's end removes.
    events: Arc<dyn EventStore>,
    /// Its session idle timeout: a third of it is how often held sessions are touched.
    idle: Duration,
}

impl fmt::Debug for Legacy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Legacy")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// Where later POSTs reach the requests of one POST still running.
#[derive(Clone)]
struct Waiter {
    tx: mpsc::Sender<Input>,
    ended: CancellationToken,
}

#[derive(Default)]
struct Waiting {
    /// By session id and the client's request id.
    requests: HashMap<(String, RequestId), Waiter>,
    /// By session id and the id of our question.
    questions: HashMap<(String, RequestId), Waiter>,
}

/// The sizes of a server's tables of legacy sessions.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LegacySizes {
    sessions: usize,
    requests: usize,
    questions: usize,
}

impl Legacy {
    /// The legacy sessions of a server whose states live in `store` (`None`: an
    /// [`InMemoryStore`] of its own).
    pub(crate) fn new(store: Option<Arc<dyn SessionStore>>) -> Legacy {
        let store_given = store.is_some();
        Legacy {
            store: store.unwrap_or_else(|| Arc::new(InMemoryStore::new())),
            store_given,
            sessions: Mutex::new(HashMap::new()),
            waiting: Mutex::new(Waiting::default()),
            next_ids: AtomicI64::new(0),
            fan_out: Mutex::new(None),
            endpoint: Mutex::new(None),
            counters: modelctx_http::server::Counters::new(),
        }
    }

    /// What the server's endpoints hold now (`Server::load`): legacy sessions, open SSE
    /// streams, and the events of the event store of the endpoint configured last, when it can
    /// tell.
    pub(crate) fn transport_load(&self) -> (usize, usize, Option<usize>) {
        let events = self
            .endpoint()
            .and_then(|endpoint| endpoint.events.events_held());
        (self.counters.sessions(), self.counters.streams(), events)
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Open>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The output of open session `sid` (its standalone stream, for a task's status).
    pub(crate) fn output(&self, sid: &str) -> Option<LegacySession> {
        self.sessions().get(sid).map(|open| open.output.clone())
    }

    fn endpoint(&self) -> Option<Endpoint> {
        self.endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_endpoint(&self, endpoint: Endpoint) {
        *self.endpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(endpoint);
    }

    /// Whether the sessions' states may be shared with other instances: a bus, or a store
    /// given to the server.
    fn shares_sessions(&self, shared: &Shared) -> bool {
        self.store_given || shared.bus.is_some()
    }

    fn fan_out(&self) -> MutexGuard<'_, Option<CancellationToken>> {
        self.fan_out.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn waiting(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn sizes(&self) -> LegacySizes {
        let waiting = self.waiting();
        LegacySizes {
            sessions: self.sessions().len(),
            requests: waiting.requests.len(),
            questions: waiting.questions.len(),
        }
    }

    /// Hands what belongs to requests still running to them: the client's answer to a
    /// question, and (to all of the session's) its cancellations, which their sessions read
    /// (the one running the request cancelled acts on it), and `notifications/initialized`,
    /// which lets the questions they queued go. Returns what is left to serve.
    fn hand_over(&self, sid: &str, incoming: Incoming) -> Option<Incoming> {
        let is_cancel = |message: &Message| matches!(message, Message::Notification(n) if n.method == NotificationsCancelled::VALUE);
        let message = match &incoming {
            Incoming::Single(message) => message,
            Incoming::Batch(items) => {
                // A cancellation in a batch (2025-03-26) may name a request of an earlier POST.
                for cancel in items.iter().flatten().filter(|m| is_cancel(m)) {
                    self.tell_waiting(sid, || Input::Incoming(Incoming::Single(cancel.clone())));
                }
                return Some(incoming);
            }
            _ => return Some(incoming),
        };
        if is_cancel(message) {
            // The request it names, if one still runs, is one of these: a session resumed for
            // it alone would have nothing to cancel.
            self.tell_waiting(sid, || Input::Incoming(Incoming::Single(message.clone())));
            return None;
        }
        let waiting = self.waiting();
        let key = |id: &RequestId| (sid.to_owned(), id.clone());
        let to = match message {
            Message::Response(r) => waiting.questions.get(&key(&r.id)),
            Message::Error(ErrorResponse { id: Some(id), .. }) => waiting.questions.get(&key(id)),
            Message::Notification(n) if n.method == NotificationsInitialized::VALUE => {
                drop(waiting);
                self.tell_waiting(sid, initialized_input);
                return Some(incoming);
            }
            _ => None,
        };
        let Some(to) = to else {
            return Some(incoming);
        };
        if to.tx.try_send(Input::Incoming(incoming)).is_err() {
            tracing::debug!("a message for a running request was dropped: its queue is full");
        }
        None
    }

    /// Hands a message of session `sid`'s client that another instance sent on (its
    /// [`BusMessage::Forward`]) to the requests running here: an answer to one of our
    /// questions, a cancellation, `notifications/initialized`, the level of a
    /// `logging/setLevel`. Nothing happens when none of them waits for it.
    fn heard(&self, sid: &str, message: Message) {
        if let Message::Request(r) = &message {
            if r.method == LoggingSetLevel::VALUE {
                let level = r
                    .params
                    .as_ref()
                    .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
                    .and_then(|p| p.get("level")?.as_str().and_then(LogLevel::parse));
                if let Some(level) = level {
                    self.tell_waiting(sid, || Input::LogLevel(Some(level)));
                }
            }
            return;
        }
        // Left over: no request here waits for it.
        let _ = self.hand_over(sid, Incoming::Single(message));
    }

    /// Gives `input()` to each runner of session `sid`'s requests that wait (once per POST).
    fn tell_waiting(&self, sid: &str, input: impl Fn() -> Input) {
        let waiting = self.waiting();
        let mut told: Vec<&Waiter> = Vec::new();
        for ((of, _), waiter) in &waiting.requests {
            if of == sid && !told.iter().any(|w| w.tx.same_channel(&waiter.tx)) {
                told.push(waiter);
                if waiter.tx.try_send(input()).is_err() {
                    tracing::debug!(
                        "a message for a running request was dropped: its queue is full"
                    );
                }
            }
        }
    }

    /// Enters `ids` (requests of session `sid` still running) for `waiter`; `None` when the
    /// table is full.
    fn enter(
        shared: &Arc<Shared>,
        sid: &str,
        ids: Vec<RequestId>,
        waiter: &Waiter,
    ) -> Option<Entered> {
        let mut waiting = shared.legacy.waiting();
        if waiting.requests.len() + ids.len() > MAX_WAITING {
            return None;
        }
        for id in &ids {
            let key = (sid.to_owned(), id.clone());
            waiting.requests.insert(key, waiter.clone());
        }
        Some(Entered {
            shared: shared.clone(),
            sid: sid.to_owned(),
            requests: ids,
            questions: Vec::new(),
            waiter: waiter.clone(),
        })
    }
}

/// The entries of one waiting POST's requests and questions; removed when dropped (when its
/// requests are answered or cancelled).
struct Entered {
    shared: Arc<Shared>,
    sid: String,
    requests: Vec<RequestId>,
    questions: Vec<RequestId>,
    waiter: Waiter,
}

impl Entered {
    /// A question asked for one of the requests.
    fn asked(&mut self, id: RequestId) {
        let mut waiting = self.shared.legacy.waiting();
        if waiting.questions.len() >= MAX_WAITING {
            tracing::warn!("too many questions wait for an answer: this one's answer is not heard");
            return;
        }
        waiting
            .questions
            .insert((self.sid.clone(), id.clone()), self.waiter.clone());
        self.questions.push(id);
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let mut waiting = self.shared.legacy.waiting();
        let tx = &self.waiter.tx;
        for id in self.requests.drain(..) {
            let key = (self.sid.clone(), id);
            // Only ours: a newer request with the same id keeps its entry.
            if waiting
                .requests
                .get(&key)
                .is_some_and(|w| w.tx.same_channel(tx))
            {
                waiting.requests.remove(&key);
            }
        }
        for id in self.questions.drain(..) {
            waiting.questions.remove(&(self.sid.clone(), id));
        }
    }
}

/// Runs `future` to its end at once when it does not wait, else on a task of its own.
fn now_or_later(future: impl Future<Output = ()> + Send + 'static) {
    let mut future = Box::pin(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if future.as_mut().poll(&mut cx).is_pending() {
        // The rest waits on a task, whose first poll registers its waker (the no-op one of
        // this poll is never kept).
        tokio::spawn(future);
    }
}

impl Server {
    /// The server as a `tower::Service` for hyper or axum, serving both eras on one endpoint.
    ///
    /// The router owns the path: the service answers on whatever path it is mounted at, so
    /// axum's `route_service("/mcp", ..)` and `nest_service("/mcp", ..)` both work
    /// (`config.path` is set to `None`; it is [`serve_http`](Self::serve_http)'s, which routes
    /// by itself). The service applies `config`'s security defaults (loopback `Host` and
    /// `Origin` only, and with them loopback peers only; bounded bodies, body deadline, requests
    /// in flight and sessions). The peer's address comes from the request's `PeerAddr`
    /// extension or, with feature `axum`, axum's `ConnectInfo<SocketAddr>`: with the loopback
    /// lists, a request whose peer is unknown gets 403. Mounted in axum
    /// (`crates/server/examples/axum_server.rs` is a whole program):
    ///
    /// ```no_run
    /// use std::net::SocketAddr;
    ///
    /// use modelctx_server::{HttpConfig, Server};
    ///
    /// # async fn run(server: Server) -> Result<(), Box<dyn std::error::Error>> {
    /// let mcp = server.http_service(HttpConfig::default())?;
    /// let app = axum::Router::new().route_service("/mcp", mcp);
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    /// axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// The endpoint serves the server's versions (`ServerBuilder::versions`): they replace
    /// `config.versions`.
    pub fn http_service(&self, config: ServerConfig) -> Result<McpService, ConfigError> {
        let mut config = self.endpoint_config(config);
        config.path = None;
        McpService::new(config, Arc::new(self.clone()))
    }

    /// Serves the server on `addr` over Streamable HTTP (both eras on one endpoint, at
    /// `config.path`, `/mcp` by default), with the HTTP transport's security defaults, on tasks
    /// of its own. The [`RunningServer`] returned serves until it is stopped: await it to wait
    /// for that (a [`ShutdownHandle`](crate::ShutdownHandle) from
    /// [`RunningServer::handle`] stops it from elsewhere), or run it until a signal with
    /// [`RunningServer::with_graceful_shutdown`] (or [`serve_http_until`](Self::serve_http_until)).
    ///
    /// `addr` is anything [`tokio::net::ToSocketAddrs`] takes: `"127.0.0.1:8080"`,
    /// `"localhost:8080"`, `("localhost", 8080)`, a [`SocketAddr`](std::net::SocketAddr). A name is resolved, and
    /// `config` is checked against every address it resolves to (a non-loopback one needs
    /// explicit allow-lists, [`HttpConfig::allowed_hosts`](crate::HttpConfig::allowed_hosts)
    /// and `allowed_origins`); the server then listens on one of them: the first that can be
    /// bound, in the resolver's order ([`RunningServer::local_addr`] says which).
    ///
    /// ```
    /// use modelctx_server::{HttpConfig, Server};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let server = Server::builder("demo", "1.0").build();
    /// let running = server.serve_http("localhost:0", HttpConfig::default()).await?;
    /// println!("serving http://{}/mcp", running.local_addr());
    /// let stop = running.handle();
    /// # stop.shutdown(std::time::Duration::from_secs(1)).await;
    /// running.await // until `stop.shutdown(grace)` is called, here or on another task
    /// # }
    /// ```
    ///
    /// Fails when the name does not resolve, no address can be bound, or `config` cannot serve
    /// (a [`ConfigError`](crate::ConfigError) carried by an
    /// [`InvalidInput`](std::io::ErrorKind::InvalidInput) error).
    pub async fn serve_http(
        &self,
        addr: impl tokio::net::ToSocketAddrs,
        config: ServerConfig,
    ) -> std::io::Result<RunningServer> {
        let config = self.endpoint_config(config);
        modelctx_http::server::serve(addr, config, Arc::new(self.clone())).await
    }

    /// Serves the server on `addr` as [`serve_http`](Self::serve_http) does until `signal`
    /// completes, then shuts it down gracefully: no new connection, streams and sessions end,
    /// in-flight requests get [`HttpConfig::shutdown_grace`](crate::HttpConfig::shutdown_grace)
    /// (default 10 s) to finish. [`shutdown_signal()`](crate::shutdown_signal) is Ctrl-C or
    /// SIGTERM:
    ///
    /// ```no_run
    /// use modelctx_server::{HttpConfig, Server, shutdown_signal};
    ///
    /// # async fn run(server: Server) -> std::io::Result<()> {
    /// server
    ///     .serve_http_until("127.0.0.1:8080", HttpConfig::default(), shutdown_signal())
    ///     .await
    /// # }
    /// ```
    ///
    /// The same as `serve_http(addr, config).await?.with_graceful_shutdown(signal).await`.
    /// Returns `Ok(())` once the server is down; an error when it could not start, or when
    /// accepting connections failed for good (see [`RunningServer`]).
    pub async fn serve_http_until<F>(
        &self,
        addr: impl tokio::net::ToSocketAddrs,
        config: ServerConfig,
        signal: F,
    ) -> std::io::Result<()>
    where
        F: Future<Output = ()>,
    {
        self.serve_http(addr, config)
            .await?
            .with_graceful_shutdown(signal)
            .await
    }

    /// Serves the server on a listener already bound, as [`serve_http`](Self::serve_http) does:
    /// for a server that must know its address first (an OAuth-protected server names its own
    /// URI, port included, before it is built).
    ///
    /// ```
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use modelctx_server::{HttpConfig, Server};
    ///
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let uri = format!("http://{}/mcp", listener.local_addr()?);
    /// let server = Server::builder("demo", "1.0").instructions(uri).build();
    /// let running = server.serve_http_on(listener, HttpConfig::default()).await?;
    /// running.shutdown(std::time::Duration::from_secs(1)).await;
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn serve_http_on(
        &self,
        listener: tokio::net::TcpListener,
        config: ServerConfig,
    ) -> std::io::Result<RunningServer> {
        let config = self.endpoint_config(config);
        modelctx_http::server::serve_on(listener, config, Arc::new(self.clone())).await
    }

    /// `config` for this server's endpoint: serving the versions of the server's protocol
    /// sessions (one list for both), and guarded by `config`'s guard, else by the server's
    /// ([`ServerBuilder::auth`](crate::ServerBuilder::auth)). The server remembers nothing of
    /// it: its own scope check asks the guard that admitted each request.
    ///
    /// The server keeps the endpoint's event store and session idle timeout (those of the
    /// endpoint configured last), for the rules of fleets: who writes a change for a session,
    /// which sessions to touch, what a session's end removes.
    pub(crate) fn endpoint_config(&self, mut config: ServerConfig) -> ServerConfig {
        config.versions = self.shared.config.versions.clone();
        if config.guard.is_none() {
            config.guard = self.shared.guard.clone();
        }
        self.shared.legacy.set_endpoint(Endpoint {
            events: config.event_store.clone(),
            idle: config.session_idle_timeout,
        });
        self.listen_to_bus();
        config
    }

    /// Has the messages for legacy sessions that come over the bus handed to them (once).
    fn listen_to_bus(&self) {
        if let Some(link) = &self.shared.bus {
            // False when set already: the same hook.
            let _ = link.on_sessions(Box::new(on_bus));
        }
    }
}

/// A message for legacy sessions from another instance: a message of a session's client for
/// the requests running here, or the end of a session (its copy here ends, removing nothing
/// shared).
fn on_bus(shared: &Arc<Shared>, message: BusMessage) {
    let legacy = &shared.legacy;
    match message {
        BusMessage::Forward {
            session, message, ..
        } => legacy.heard(&session, message),
        BusMessage::Ended { session, .. } => {
            let open = legacy.sessions().get(&session).cloned();
            if let Some(open) = open {
                open.ended_elsewhere.store(true, Ordering::SeqCst);
                tokio::spawn(async move { open.output.close().await });
            }
        }
        // The bus task hands changes to the server's own broadcast, and tasks' messages to
        // the tasks.
        BusMessage::Change { .. } | BusMessage::Task { .. } => {}
    }
}

impl McpApp for Server {
    /// Every endpoint of the server counts into the server's counters (`Server::load`).
    fn counters(&self) -> Option<modelctx_http::server::Counters> {
        Some(self.shared.legacy.counters.clone())
    }

    /// A legacy session opened: it gets an entry where the server's changes reach it (and
    /// its state in the store with its first input); no task and no channel.
    ///
    /// An adopted session (one opened on another instance) gets the same.
    fn open_session(&self, session: LegacySession) -> Arc<dyn LegacyHandler> {
        self.listen_to_bus();
        let legacy = &self.shared.legacy;
        let ended_elsewhere = Arc::new(AtomicBool::new(false));
        let mut sessions = legacy.sessions();
        let open = Open {
            output: session.clone(),
            ended_elsewhere: ended_elsewhere.clone(),
        };
        sessions.insert(session.id().to_owned(), open);
        let mut fanning_out = legacy.fan_out();
        if fanning_out.is_none() {
            let stop = CancellationToken::new();
            let changes = self.shared.changes.subscribe();
            tokio::spawn(fan_out(Arc::downgrade(&self.shared), changes, stop.clone()));
            *fanning_out = Some(stop);
        }
        drop(fanning_out);
        drop(sessions);
        Arc::new(Session {
            shared: self.shared.clone(),
            session,
            ended_elsewhere,
        })
    }

    /// The state of session `id` in the server's [`SessionStore`] (kept there by another
    /// instance sharing the store): adopted at the version its `initialize` settled on, bound
    /// to its principal. `Ok(None)` when the store has none, or one whose `initialize` is not
    /// answered yet; a store error is 503 (the transport's [`Unavailable`]).
    fn adopt_session<'a>(
        &'a self,
        id: &'a str,
        _principal: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<Option<Adopted>, Unavailable>> {
        Box::pin(async move {
            match self.shared.legacy.store.load(id).await {
                Ok(Some(state)) => Ok(state
                    .version
                    .map(|version| Adopted::new(version, state.principal.map(Principal)))),
                Ok(None) => Ok(None),
                Err(e) => Err(Unavailable::new(e)),
            }
        })
    }

    /// With a bus, or a session store given to the server, the legacy sessions are shared with
    /// other instances: the transport's idle sweep, eviction and shutdown then only forget them
    /// here, and the shared state ends by DELETE or by the store's own expiry.
    fn shares_sessions(&self) -> bool {
        self.shared.legacy.shares_sessions(&self.shared)
    }

    /// A modern request is served by a request runner on the caller's task (the HTTP
    /// connection's): its session shares the server's configuration, and a handler that
    /// finishes without waiting is answered before this returns, with no task, no input channel
    /// and no subscription to the server's changes. Only a request that waits (a handler that
    /// awaits, a `subscriptions/listen` stream) goes on on a task of its own, driven until it
    /// is answered.
    fn modern(&self, request: ModernRequest) {
        let ModernRequest {
            message,
            context,
            reply,
            ..
        } = request;
        // At most `Settings::max_modern_requests` at once (finding 25): beyond, a request is
        // refused at once, and a notification dropped.
        let Ok(place) = self.shared.modern_requests.clone().try_acquire_owned() else {
            if let Message::Request(r) = message {
                let error = crate::limits::busy(
                    format!(
                        "at most {} requests of protocol 2026-07-28 at once",
                        self.shared.settings.max_modern_requests
                    ),
                    None,
                );
                let message = ErrorResponse::new(Some(r.id), error).into();
                let related = None;
                send_all(reply, vec![Transmit::Message { message, related }], None);
            }
            return;
        };
        let cancelled = match &message {
            Message::Request(r) => Some((r.id.clone(), reply.cancelled().clone())),
            _ => None,
        };
        // A listen stream hears of every change made from its start on.
        let listens = matches!(
            &message,
            Message::Request(r) if r.method == modelctx_types::consts::SubscriptionsListen::VALUE
        );
        let changes = listens.then(|| self.shared.changes.subscribe());
        let origin = Origin {
            http: Some(context),
        };
        let mut conn = Conn::for_request(self.shared.clone());
        conn.session
            .handle_message(std::time::Instant::now(), message);
        // Its messages, and the refusal of the protocol rules if any (the reply's `Output`
        // writes nothing else: a server sends no batches or cancellations on a modern request).
        let said = run_inline(&mut conn, &origin, false).0;
        if conn.is_idle() {
            drop(conn);
            send_all(reply, said, Some(place));
            return;
        }
        let lifetime = Lifetime::Request { cancelled };
        tokio::spawn(async move {
            let mut output = reply;
            for transmit in said {
                if !output.write(transmit).await {
                    conn.session.transport_closed("the transport is gone");
                }
            }
            driver::run(conn, NoInput, output, origin, lifetime, changes).await;
            drop(place);
        });
    }

    /// The tool's header rules, derived once when it was registered: an `Arc` clone.
    fn tool_param_headers(&self, tool: &str) -> Option<Arc<[ParamHeader]>> {
        let registry = self.shared.registry();
        registry.tools.get(tool)?.param_headers.clone()
    }

    /// The scopes given to the tool, prompt, resource or template the request names
    /// ([`Tool::scopes`](crate::Tool::scopes) and the like), read from `params` as routing
    /// reads them (the server's own check reads them the same way): an `Arc` clone of those
    /// kept since it was defined. `tools/call` and `prompts/get` by `name`; `resources/read`
    /// and `resources/subscribe` by `uri`, the resource at it or else the first template
    /// matching it (as a read picks); `completion/complete` by `ref`, the prompt or template
    /// whose completers it runs. `None` for other methods and unknown names.
    fn required_scopes(
        &self,
        method: &str,
        params: Option<&serde_json::value::RawValue>,
    ) -> Option<Arc<[String]>> {
        crate::scopes::required(&self.shared, method, params)
    }
}

/// Runs what a request's session and handler do without waiting: routes the requests,
/// polls their handlers once, applies what the handlers queued, and returns what to send, in
/// order (for a modern request, a refusal of the protocol rules is the only one, and first).
///
/// With `hold_close`, it stops at a handler's [`Command::CloseStream`] and returns it: that
/// needs the output, once what was said before is written (legacy sessions). Else the stream
/// is not closed (a modern request's cannot be).
fn run_inline(
    conn: &mut Conn,
    origin: &Origin,
    hold_close: bool,
) -> (Vec<Transmit>, Option<Command>) {
    let mut said = Vec::new();
    loop {
        let mut busy = false;
        while let Some(transmit) = conn.next_transmit() {
            busy = true;
            said.push(transmit);
        }
        busy |= conn.handle_events(origin);
        while let Some(command) = conn.try_command() {
            busy = true;
            if hold_close && matches!(command, Command::CloseStream { .. }) {
                return (said, Some(command));
            }
            conn.apply(command);
        }
        if !busy {
            return (said, None);
        }
    }
}

/// Sends messages on a modern request's stream: at once while it has room (the response of a
/// handler that did not wait goes out on the caller's task), else on a task of its own. The
/// request's `place` is given back once all are sent.
fn send_all(
    mut reply: ModernReply,
    transmits: Vec<Transmit>,
    place: Option<tokio::sync::OwnedSemaphorePermit>,
) {
    now_or_later(async move {
        for transmit in transmits {
            // False: the client is gone (or, for a notification, there is no stream).
            if !reply.write(transmit).await {
                break;
            }
        }
        drop(place);
    });
}

/// Serves one POST of legacy session `output`: hands what belongs to requests still running
/// to them (with a bus, also to those running on other instances); runs the rest on a session
/// resumed from the stored state, saving the state when it changed; and keeps the runner (on
/// a task) only while requests of it wait.
async fn serve(shared: Arc<Shared>, output: LegacySession, incoming: Incoming, origin: Origin) {
    let legacy = &shared.legacy;
    let sid = output.id().to_owned();
    let bus = shared.bus.as_ref().map(|link| link.bus().clone());
    // What every instance's requests of the session may be waiting for.
    let for_all = if bus.is_some() {
        for_every_instance(&incoming)
    } else {
        Vec::new()
    };
    let handed = legacy.hand_over(&sid, incoming);
    if let Some(bus) = &bus {
        for message in for_all {
            forward(bus, None, &sid, message).await;
        }
    }
    let Some(incoming) = handed else {
        return;
    };
    // The answer to a question another instance asked (nothing here waited for it).
    if let Some(bus) = &bus
        && let Some(to) = asked_by(&incoming).filter(|n| *n != bus.instance())
    {
        if let Incoming::Single(message) = incoming {
            forward(bus, Some(to), &sid, message).await;
        }
        return;
    }
    let requests = request_ids(&incoming);
    let set_level = bus.as_ref().and_then(|_| set_level_of(&incoming));
    let now = SystemTime::now();
    let state = match legacy.store.load(&sid).await {
        Ok(Some(state)) => state,
        Ok(None) if !output.is_adopted() && opens(&incoming) => {
            SessionState::opened(output.principal().map(|p| p.0.clone()), now)
        }
        Ok(None) => {
            // Ended on another instance, or expired: the session ends here too (404).
            tracing::debug!("a legacy session's state is gone: the session ends");
            output.close().await;
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "a legacy session's state could not be loaded: 503");
            unavailable(&output, &requests).await;
            return;
        }
    };
    let instance = bus.as_ref().map_or(0, |bus| bus.instance());
    let ids_after = ids_after(instance, legacy.next_ids.fetch_add(1, Ordering::Relaxed));
    let session = state.resume(shared.config.clone(), ids_after);
    let mut conn = Conn::resumed(shared.clone(), session, &state.subscriptions);
    conn.session.handle_incoming(Instant::now(), incoming);
    let (said, held) = run_inline(&mut conn, &origin, true);
    // Requests this POST cancelled (of its own batch): their streams stop waiting, once what
    // was said before is written.
    let released = conn.take_released();
    let mut saved = state.clone();
    saved.record(&conn.session, now);
    saved.subscriptions = conn.subscriptions();
    // Saved before anything is said: the client's next POST, sent once it heard, finds it.
    if saved.differs_from(&state)
        && let Err(e) = legacy.store.save(&sid, &saved).await
    {
        tracing::error!(error = %e, "a legacy session's state could not be saved: 503");
        // Nothing of it is said (its handlers stop with the runner): the client tries again.
        drop(conn);
        unavailable(&output, &requests).await;
        if state.version.is_none() {
            // An `initialize` whose outcome is not kept: the session ends (the transport ends
            // it too when its 503 was sent).
            output.close().await;
        }
        return;
    }
    // `notifications/initialized`, now saved, to the requests of the session that wait for it
    // here and elsewhere (their questions are held until then). Told after the save, not
    // before: a request entered after this finds it in the store ([`initialized_since`]).
    if saved.initialized && !state.initialized {
        legacy.tell_waiting(&sid, initialized_input);
        if let Some(bus) = &bus {
            forward(bus, None, &sid, initialized_message()).await;
        }
    }
    // The transport learns the version `initialize` settled on before the answer is written
    // (its wire rules depend on it).
    if state.version.is_none()
        && let Some(version) = saved.version
    {
        output.set_version(version).await;
    }
    if saved.log_level != state.log_level {
        legacy.tell_waiting(&sid, || Input::LogLevel(saved.log_level));
        if let (Some(bus), Some(set_level)) = (&bus, set_level) {
            forward(bus, None, &sid, set_level).await;
        }
    }
    if held.is_none() && conn.is_idle() {
        drop(conn);
        write_all(output.clone(), said).await;
        release_all(&output, released).await;
        return;
    }
    let answered = answered_ids(&said);
    let running: Vec<RequestId> = requests
        .into_iter()
        .filter(|id| !answered.contains(id))
        .collect();
    let (tx, rx) = mpsc::channel(WAITING_QUEUE);
    let ended = CancellationToken::new();
    let waiter = Waiter {
        tx,
        ended: ended.clone(),
    };
    let Some(entered) = Legacy::enter(&shared, &sid, running.clone(), &waiter) else {
        // Its handlers are cancelled with the runner.
        drop(conn);
        write_all(output.clone(), said).await;
        release_all(&output, released).await;
        let error = crate::limits::busy(
            format!("at most {MAX_WAITING} requests of legacy sessions may wait at once"),
            None,
        );
        refuse(&output, running, error).await;
        return;
    };
    if !conn.session.is_initialized() && initialized_since(legacy, &sid).await {
        // Its questions wait for the `notifications/initialized` that another POST saved
        // after this one loaded the state, and told before this one was entered.
        let _ = waiter.tx.try_send(initialized_input());
    }
    drop(waiter);
    let mut output = WaitingOutput {
        session: output,
        entered,
    };
    tokio::spawn(async move {
        for transmit in said {
            if !output.write(transmit).await {
                conn.session.transport_closed("the transport is gone");
            }
        }
        for id in released {
            output.release(&id).await;
        }
        if let Some(Command::CloseStream {
            id,
            generation,
            reply,
        }) = held
        {
            let legacy = conn.close_stream_allowed(&id, generation);
            let _ = reply.send(legacy && output.close_stream(&id).await);
        }
        let lifetime = Lifetime::Requests { ended };
        driver::run(conn, rx, output, origin, lifetime, None).await;
    });
}

/// `notifications/initialized`, as a client sends it.
fn initialized_message() -> Message {
    Notification::new(NotificationsInitialized::VALUE, &JsonObject::new())
        .expect("an empty object is valid params")
        .into()
}

/// `notifications/initialized` for a runner.
fn initialized_input() -> Input {
    Input::Incoming(Incoming::Single(initialized_message()))
}

/// Whether session `sid`'s stored state says `notifications/initialized` arrived: asked by a
/// request that waits, loaded uninitialized, once it is entered where that notification is
/// told ([`serve`] tells it only after saving it). A store error counts as no.
async fn initialized_since(legacy: &Legacy, sid: &str) -> bool {
    match legacy.store.load(sid).await {
        Ok(state) => state.is_some_and(|state| state.initialized),
        Err(e) => {
            tracing::warn!(error = %e, "a legacy session's state could not be loaded again");
            false
        }
    }
}

/// Sends `message` of session `sid`'s client over `bus`: to instance `to`, or to every other.
async fn forward(bus: &Arc<dyn Bus>, to: Option<u16>, sid: &str, message: Message) {
    let message = BusMessage::Forward {
        from: bus.instance(),
        session: sid.to_owned(),
        message,
    };
    let sent = match to {
        Some(to) => bus.to_instance(to, message).await,
        None => bus.broadcast(message).await,
    };
    if let Err(error) = sent {
        tracing::warn!(%error, "a message of a legacy session's client was not sent on the bus");
    }
}

/// The messages of `incoming` that requests of the session running on any instance may wait
/// for, sent on at once: its cancellations (in a batch too, as [`Legacy::hand_over`] reads
/// them). `notifications/initialized` goes too, but only once its state is saved
/// ([`serve`]).
fn for_every_instance(incoming: &Incoming) -> Vec<Message> {
    let is_cancel = |m: &Message| matches!(m, Message::Notification(n) if n.method == NotificationsCancelled::VALUE);
    match incoming {
        Incoming::Single(m) if is_cancel(m) => vec![m.clone()],
        Incoming::Batch(items) => items
            .iter()
            .flatten()
            .filter(|m| is_cancel(m))
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

/// The instance that asked the question `incoming` answers, when it is an answer (a response
/// or an error response, alone) with an id a server mints.
fn asked_by(incoming: &Incoming) -> Option<u16> {
    match incoming {
        Incoming::Single(Message::Response(r)) => instance_of(&r.id),
        Incoming::Single(Message::Error(ErrorResponse { id: Some(id), .. })) => instance_of(id),
        _ => None,
    }
}

/// The `logging/setLevel` request of `incoming`, if any (the last of a batch).
fn set_level_of(incoming: &Incoming) -> Option<Message> {
    let is_set_level =
        |m: &&Message| matches!(m, Message::Request(r) if r.method == LoggingSetLevel::VALUE);
    match incoming {
        Incoming::Single(m) => Some(m).filter(is_set_level).cloned(),
        Incoming::Batch(items) => items.iter().flatten().rfind(is_set_level).cloned(),
        _ => None,
    }
}

/// Whether `incoming` opens a session (`initialize`).
fn opens(incoming: &Incoming) -> bool {
    matches!(incoming, Incoming::Single(m) if modelctx_types::opens_session(m))
}

/// Answers the POST of `requests` with 503 (`Retry-After`): the session's state is
/// unreachable now.
async fn unavailable(output: &LegacySession, requests: &[RequestId]) {
    if !requests.is_empty() && !output.unavailable(requests).await {
        tracing::debug!("a request could not be answered 503: its POST is answered or gone");
    }
}

/// Writes `said` on a legacy session.
async fn write_all(mut output: LegacySession, said: Vec<Transmit>) {
    for transmit in said {
        output.write(transmit).await;
    }
}

/// Lets go of requests `ids` of legacy session `output`, which the client cancelled.
async fn release_all(output: &LegacySession, ids: Vec<RequestId>) {
    for id in ids {
        output.release(&id).await;
    }
}

/// Answers requests `ids` with `error`.
async fn refuse(output: &LegacySession, ids: Vec<RequestId>, error: ErrorObject) {
    for id in ids {
        let message = ErrorResponse::new(Some(id.clone()), error.clone()).into();
        output.send(message, Some(id)).await;
    }
}

/// The ids of the requests in `incoming`.
fn request_ids(incoming: &Incoming) -> Vec<RequestId> {
    match incoming {
        Incoming::Single(Message::Request(r)) => vec![r.id.clone()],
        Incoming::Batch(items) => items
            .iter()
            .filter_map(|m| match m {
                Ok(Message::Request(r)) => Some(r.id.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The ids of the requests `said` answers.
fn answered_ids(said: &[Transmit]) -> HashSet<RequestId> {
    // An answer's id: `Message::id` of anything but a request.
    let answer = |m: &Message| match m {
        Message::Request(_) => None,
        answer => answer.id().cloned(),
    };
    let mut ids = HashSet::new();
    for transmit in said {
        match transmit {
            Transmit::Message { message, .. } => ids.extend(answer(message)),
            Transmit::Batch(messages) => ids.extend(messages.iter().filter_map(answer)),
            _ => {}
        }
    }
    ids
}

/// Fans each change to what the server offers out to the legacy sessions that should hear it
/// (list changes to all, `notifications/resources/updated` to subscribers), each on a session
/// resumed from its stored state. One task per server while it has legacy sessions; it ends
/// with the last of them (`stop`), or with the server.
///
/// With a bus, a change is written for a session only by the instance that should
/// ([`writes_changes`]): once per session across the fleet. With sessions that may be shared
/// (a bus or a given store), the task also touches the states of the sessions whose
/// standalone stream is held here, every third of the session idle timeout.
async fn fan_out(
    shared: Weak<Shared>,
    mut changes: broadcast::Receiver<Change>,
    stop: CancellationToken,
) {
    let mut touch = shared.upgrade().and_then(|shared| {
        let every = shared.legacy.endpoint()?.idle / 3;
        let touches = shared.legacy.shares_sessions(&shared) && !every.is_zero();
        touches.then(|| {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick
        })
    });
    loop {
        let touched = async {
            match touch.as_mut() {
                Some(tick) => tick.tick().await,
                None => std::future::pending().await,
            }
        };
        let change = tokio::select! {
            change = changes.recv() => change,
            _ = touched => {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                touch_held(&shared).await;
                continue;
            }
            () = stop.cancelled() => return,
        };
        if matches!(change, Err(broadcast::error::RecvError::Closed)) {
            return;
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let fleet = shared.bus.is_some();
        let endpoint = shared.legacy.endpoint();
        let sessions: Vec<LegacySession> = shared
            .legacy
            .sessions()
            .values()
            .map(|open| open.output.clone())
            .collect();
        for output in sessions {
            if fleet && !writes_changes(endpoint.as_ref(), &output).await {
                continue;
            }
            let state = match shared.legacy.store.load(output.id()).await {
                Ok(Some(state)) => state,
                Ok(None) => continue, // nothing negotiated yet
                Err(e) => {
                    tracing::error!(error = %e, "a legacy session's state could not be loaded");
                    continue;
                }
            };
            let session = state.resume(shared.config.clone(), 0);
            let mut conn = Conn::resumed(shared.clone(), session, &state.subscriptions);
            conn.on_change(change.clone(), &Origin::default());
            let said: Vec<Transmit> = std::iter::from_fn(|| conn.next_transmit()).collect();
            drop(conn);
            if !said.is_empty() {
                // A session whose queue is full waits on its own, not the others.
                now_or_later(write_all(output, said));
            }
        }
    }
}

/// Whether this instance writes the server's changes for `output`, a session of a fleet: the
/// instance holding its standalone stream does, as the event store records it; when none
/// does (or the store cannot say), the instance that opened it does, not one that adopted it.
async fn writes_changes(endpoint: Option<&Endpoint>, output: &LegacySession) -> bool {
    let opener = !output.is_adopted();
    let Some(endpoint) = endpoint else {
        return opener;
    };
    match endpoint.events.standalone(output.id()).await {
        Ok(Some(stream)) => opened_here(&*endpoint.events, stream),
        Ok(None) => opener,
        Err(error) => {
            tracing::warn!(%error, "the holder of a session's standalone stream is unknown");
            opener
        }
    }
}

/// Pushes back the expiry of the stored states of the sessions whose standalone stream this
/// instance holds (as the event store records it): their clients only listen, which no load
/// or save marks.
async fn touch_held(shared: &Arc<Shared>) {
    let Some(endpoint) = shared.legacy.endpoint() else {
        return;
    };
    let ids: Vec<String> = shared.legacy.sessions().keys().cloned().collect();
    let mut held = Vec::new();
    for id in ids {
        match endpoint.events.standalone(&id).await {
            Ok(Some(stream)) if opened_here(&*endpoint.events, stream) => held.push(id),
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "the holder of a session's standalone stream is unknown");
            }
        }
    }
    if held.is_empty() {
        return;
    }
    let ids: Vec<&str> = held.iter().map(String::as_str).collect();
    if let Err(error) = shared.legacy.store.touch(&ids).await {
        tracing::warn!(%error, "the states of held legacy sessions could not be touched");
    }
}

/// The output of a legacy POST's requests that wait: the session's, entering the questions
/// asked for them so that the client's answers (later POSTs) reach them.
struct WaitingOutput {
    session: LegacySession,
    entered: Entered,
}

impl Output for WaitingOutput {
    async fn write(&mut self, transmit: Transmit) -> bool {
        if let Transmit::Message {
            message: Message::Request(r),
            ..
        } = &transmit
        {
            self.entered.asked(r.id.clone());
        }
        self.session.write(transmit).await
    }

    async fn close_stream(&mut self, id: &RequestId) -> bool {
        LegacySession::close_stream(&self.session, id).await
    }

    async fn release(&mut self, id: &RequestId) {
        LegacySession::release(&self.session, id).await;
    }
}

/// A legacy session's output: each message on the stream of its request.
impl Output for LegacySession {
    async fn write(&mut self, transmit: Transmit) -> bool {
        match transmit {
            Transmit::Message { message, related } => self.send(message, related).await,
            Transmit::Batch(messages) => self.send_batch(messages).await,
            // Our request cancelled (a question to the client): its notification, on the
            // standalone stream like the rest of the session's own messages.
            Transmit::Cancel { notification, .. } => self.send(notification.into(), None).await,
            _ => {}
        }
        true
    }

    async fn close_stream(&mut self, id: &RequestId) -> bool {
        LegacySession::close_stream(self, id).await
    }

    async fn release(&mut self, id: &RequestId) {
        LegacySession::release(self, id).await;
    }
}

/// A modern request's output: its own response stream.
impl Output for ModernReply {
    async fn write(&mut self, transmit: Transmit) -> bool {
        match transmit {
            Transmit::Message { message, .. } => self.send(message).await.is_ok(),
            Transmit::Refusal(error) => self.refuse(error).await.is_ok(),
            // A server sends no batches or cancellations of its own requests on these.
            _ => true,
        }
    }
}

/// The input of one legacy session.
struct Session {
    shared: Arc<Shared>,
    session: LegacySession,
    /// Set when the session ended on another instance (shared with its [`Open`] entry).
    ended_elsewhere: Arc<AtomicBool>,
}

impl LegacyHandler for Session {
    fn input(&self, input: Incoming, context: RequestContext) {
        let origin = Origin {
            http: Some(context),
        };
        // In order: with a store that does not wait (the default), served before this returns.
        now_or_later(serve(
            self.shared.clone(),
            self.session.clone(),
            input,
            origin,
        ));
    }

    /// Served as [`input`](Self::input) is, and done once it is served: its state saved, an
    /// answer or a cancellation for another instance's request published on the bus. So the
    /// 202 comes after, and the client's next request, on any instance, finds a session its
    /// `notifications/initialized` marked initialized (else a question of that request would
    /// wait for one that came already). Served to its end even when the POST's client goes.
    fn accept(&self, input: Incoming, context: RequestContext) -> BoxFuture<'static, ()> {
        let origin = Origin {
            http: Some(context),
        };
        let (served, done) = tokio::sync::oneshot::channel();
        let serving = serve(self.shared.clone(), self.session.clone(), input, origin);
        now_or_later(async move {
            serving.await;
            let _ = served.send(());
        });
        Box::pin(async move {
            let _ = done.await;
        })
    }

    /// The request's handler, if it waits, is cancelled as the client's
    /// `notifications/cancelled` would cancel it (its session reads the request's stream as
    /// closed: `Event::Cancelled`); nothing is written.
    fn abandoned(&self, id: RequestId) {
        let legacy = &self.shared.legacy;
        let key = (self.session.id().to_owned(), id);
        let waiting = legacy.waiting();
        if let Some(waiter) = waiting.requests.get(&key)
            && waiter.tx.try_send(Input::Abandoned(key.1.clone())).is_err()
        {
            tracing::debug!("an abandoned request's notice was dropped: its queue is full");
        }
    }

    /// The session's requests running here stop. When the session ended ([`Closed::Ended`])
    /// its state and events are removed and (with a bus) the other instances are told, unless
    /// it ended on another instance (which did both); an adopted copy only forgotten
    /// ([`Closed::Forgotten`]) leaves them.
    fn closed(&self, reason: Closed) {
        let legacy = &self.shared.legacy;
        let sid = self.session.id().to_owned();
        let mut sessions = legacy.sessions();
        // Only this session's entry: a later copy of the same id (adopted again) keeps its own.
        if sessions
            .get(&sid)
            .is_some_and(|open| Arc::ptr_eq(&open.ended_elsewhere, &self.ended_elsewhere))
        {
            sessions.remove(&sid);
        }
        // No session left to hear of changes: the fan-out task ends (the next session starts
        // another), so an idle server keeps no task of it.
        if sessions.is_empty()
            && let Some(stop) = legacy.fan_out().take()
        {
            stop.cancel();
        }
        drop(sessions);
        for ((of, _), waiter) in &legacy.waiting().requests {
            if *of == sid {
                waiter.ended.cancel();
            }
        }
        if reason != Closed::Ended || self.ended_elsewhere.load(Ordering::SeqCst) {
            return;
        }
        let shared = self.shared.clone();
        now_or_later(async move {
            if let Err(e) = shared.legacy.store.remove(&sid).await {
                tracing::error!(error = %e, "a legacy session's state could not be removed");
            }
            if let Some(endpoint) = shared.legacy.endpoint()
                && let Err(error) = endpoint.events.remove_session(&sid).await
            {
                tracing::warn!(%error, "a legacy session's events could not be removed");
            }
            if let Some(link) = &shared.bus {
                let bus = link.bus();
                let ended = BusMessage::Ended {
                    from: bus.instance(),
                    session: sid,
                };
                if let Err(error) = bus.broadcast(ended).await {
                    tracing::warn!(%error, "the end of a legacy session was not sent on the bus");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Mutex;

    use axum::http::{Request, StatusCode};
    use modelctx_http::server::PeerAddr;
    use serde_json::{Value, json};

    use super::*;
    use crate::{NoArgs, Tool};

    /// A 2026-07-28 `tools/call` of `name`, from this machine.
    fn modern_call(name: &str) -> Request<String> {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}});
        let mut request = Request::post("/mcp")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", name)
            .body(body.to_string())
            .unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
        request
    }

    async fn answer(service: &McpService, request: Request<String>) -> Value {
        let response = service.handle(request).await;
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::Body::new(response.into_body());
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    /// A server alone does not share its sessions (its idle sweep ends them); a server given a
    /// session store, or a bus, does (the sweep only forgets them: other instances may serve
    /// them).
    #[tokio::test]
    async fn sessions_are_shared_with_a_given_store_or_a_bus() {
        let alone = Server::builder("s", "1").build();
        assert!(!McpApp::shares_sessions(&alone));
        let with_store = Server::builder("s", "1")
            .session_store(Arc::new(crate::run::InMemoryStore::new()))
            .build();
        assert!(McpApp::shares_sessions(&with_store));
        let hub = crate::bus::MemoryHub::new();
        let with_bus = Server::builder("s", "1")
            .bus(Arc::new(hub.member(1).unwrap()))
            .build();
        assert!(McpApp::shares_sessions(&with_bus));
    }

    /// The ids of the server's own requests carry the instance that minted them (bits 40 and
    /// up), stay below 2^52, and each resumed session's range stays within its instance's;
    /// instance 0 (a server alone) numbers them as before fleets (`n * ID_RANGE`).
    #[test]
    fn own_request_ids_carry_their_instance() {
        for instance in [0, 1, 7, crate::bus::MAX_INSTANCE] {
            for n in [0, 1, 2, RANGES - 1, RANGES, RANGES + 5, i64::MAX] {
                let after = ids_after(instance, n);
                for id in [after + 1, after + ID_RANGE] {
                    assert!(id < 1 << 52, "{instance} {n}: {id}");
                    assert_eq!(instance_of(&RequestId::Number(id)), Some(instance), "{n}");
                }
            }
        }
        assert_eq!(ids_after(0, 0), 0);
        assert_eq!(ids_after(0, 3), 3 * ID_RANGE);
        assert_eq!(ids_after(2, 1), (2 << 40) | ID_RANGE);
        // Ranges of successive sessions do not overlap.
        assert_eq!(ids_after(1, 1) - ids_after(1, 0), ID_RANGE);
        for id in [
            RequestId::Number(-1),
            RequestId::Number(1 << 52),
            RequestId::String("7".into()),
        ] {
            assert_eq!(instance_of(&id), None, "{id:?}");
        }
    }

    /// What a POST carries at once for every instance (with a bus): its cancellations, in a
    /// batch too (not `notifications/initialized`, sent once saved); an answer names the instance that asked; the
    /// `logging/setLevel` request is found to be sent on.
    #[test]
    fn what_goes_over_the_bus_is_read_from_the_post() {
        let decode = |v: Value| modelctx_types::decode(v.to_string().as_bytes()).unwrap();
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 1}});
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
        let set = json!({"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel",
            "params": {"level": "info"}});
        assert_eq!(for_every_instance(&decode(cancel.clone())).len(), 1);
        // Sent on once saved, by `serve`.
        assert!(for_every_instance(&decode(initialized.clone())).is_empty());
        assert!(for_every_instance(&decode(ping.clone())).is_empty());
        let batch = decode(json!([cancel, ping, set.clone(), cancel]));
        assert_eq!(for_every_instance(&batch).len(), 2);
        assert!(set_level_of(&batch).is_some());
        assert!(set_level_of(&decode(set)).is_some());
        assert!(set_level_of(&decode(ping)).is_none());

        let answer = |id: Value| json!({"jsonrpc": "2.0", "id": id, "result": {}});
        assert_eq!(
            asked_by(&decode(answer(json!(ids_after(3, 9) + 1)))),
            Some(3)
        );
        assert_eq!(asked_by(&decode(answer(json!(5)))), Some(0));
        assert_eq!(asked_by(&decode(answer(json!("x")))), None);
        let error = json!({"jsonrpc": "2.0", "id": (1_i64 << 40) + 1,
            "error": {"code": -1, "message": "no"}});
        assert_eq!(asked_by(&decode(error)), Some(1));
    }

    /// A modern request whose handler does not wait is answered on the task that handles the
    /// HTTP request (the connection's): no driver task, no hand-off.
    #[tokio::test(flavor = "current_thread")]
    async fn a_modern_call_that_does_not_wait_runs_on_the_connections_task() {
        let ran_on = Arc::new(Mutex::new(None));
        let record = ran_on.clone();
        let here = move |_: NoArgs| {
            *record.lock().unwrap() = tokio::task::try_id();
            std::future::ready("here")
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("here", here))
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        // The HTTP connection's task.
        let (task, reply) = tokio::spawn(async move {
            let reply = answer(&service, modern_call("here")).await;
            (tokio::task::id(), reply)
        })
        .await
        .unwrap();
        assert_eq!(reply["id"], 7, "{reply}");
        assert_eq!(reply["result"]["content"][0]["text"], "here", "{reply}");
        assert_eq!(
            reply["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "s",
            "{reply}"
        );
        let ran_on = *ran_on.lock().unwrap();
        assert_eq!(ran_on, Some(task));
        assert_eq!(server.load().connections, 0);
        assert_eq!(server.load().handlers, 0);
    }

    /// A modern request whose handler waits goes on on a task of its own and is answered
    /// when the handler finishes; its progress comes first, on the same stream.
    #[tokio::test(flavor = "current_thread")]
    async fn a_modern_call_that_waits_is_answered_from_its_task() {
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let gate = Arc::new(tokio::sync::Mutex::new(Some(gate)));
        let wait = move |_: NoArgs| {
            let gate = gate.clone();
            async move {
                if let Some(gate) = gate.lock().await.take() {
                    let _ = gate.await;
                }
                "waited"
            }
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("wait", wait))
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let call = tokio::spawn({
            let service = service.clone();
            async move { answer(&service, modern_call("wait")).await }
        });
        while server.load().handlers == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(server.load().connections, 1);
        open.send(()).unwrap();
        let reply = call.await.unwrap();
        assert_eq!(reply["result"]["content"][0]["text"], "waited", "{reply}");
        while server.load().connections > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(server.load().handlers, 0);
    }

    // -- legacy sessions ------------------------------------------------------------------------

    /// A POST of legacy session `sid` (none for `initialize`), from this machine.
    fn legacy_post(sid: Option<&str>, body: Value) -> Request<String> {
        let mut request = Request::post("/mcp")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18");
        if let Some(sid) = sid {
            request = request.header("mcp-session-id", sid);
        }
        let mut request = request.body(body.to_string()).unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
        request
    }

    /// The JSON messages of a response body, read as they come (SSE `data:` lines, or one
    /// JSON body).
    struct Messages {
        body: axum::body::Body,
        text: String,
        json: bool,
    }

    impl Messages {
        fn of(response: axum::http::Response<modelctx_http::server::ResponseBody>) -> Messages {
            let json = response
                .headers()
                .get("content-type")
                .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
            Messages {
                body: axum::body::Body::new(response.into_body()),
                text: String::new(),
                json,
            }
        }

        async fn next(&mut self) -> Option<Value> {
            use axum::body::HttpBody as _;
            loop {
                if !self.json
                    && let Some(end) = self.text.find("\n\n")
                {
                    let event: String = self.text.drain(..end + 2).collect();
                    let data: String = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim_start)
                        .collect();
                    if !data.is_empty() {
                        return Some(serde_json::from_str(&data).unwrap());
                    }
                    continue;
                }
                let frame =
                    std::future::poll_fn(|cx| std::pin::Pin::new(&mut self.body).poll_frame(cx))
                        .await;
                match frame {
                    Some(frame) => {
                        if let Ok(data) = frame.unwrap().into_data() {
                            self.text.push_str(std::str::from_utf8(&data).unwrap());
                        }
                    }
                    None if self.json && !self.text.is_empty() => {
                        let text = std::mem::take(&mut self.text);
                        return Some(serde_json::from_str(&text).unwrap());
                    }
                    None => return None,
                }
            }
        }
    }

    /// Opens a legacy session (`initialize`, `notifications/initialized`) declaring `roots`;
    /// returns its id.
    async fn open_legacy(service: &McpService) -> String {
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {"roots": {}},
            "clientInfo": {"name": "c", "version": "1"}}});
        let response = service.handle(legacy_post(None, initialize)).await;
        assert_eq!(response.status(), StatusCode::OK);
        let sid = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let reply = Messages::of(response).next().await.unwrap();
        assert_eq!(reply["result"]["protocolVersion"], "2025-06-18", "{reply}");
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = service.handle(legacy_post(Some(&sid), initialized)).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        sid
    }

    /// Sends request `body` on session `sid`; the stream of its messages.
    async fn legacy_request(service: &McpService, sid: &str, body: Value) -> Messages {
        let response = service.handle(legacy_post(Some(sid), body)).await;
        assert_eq!(response.status(), StatusCode::OK);
        Messages::of(response)
    }

    fn sizes(server: &Server) -> LegacySizes {
        server.shared.legacy.sizes()
    }

    /// `Server::load` counts what its endpoints hold: every endpoint of the server counts into
    /// the server's counters (two here), and the events are those of the endpoint's store.
    #[tokio::test(flavor = "current_thread")]
    async fn the_load_counts_the_sessions_and_streams_of_every_endpoint() {
        let server = Server::builder("s", "1").build();
        assert_eq!(server.load().events, None, "not served over HTTP yet");
        assert!(server.load().is_idle());
        let one = server.http_service(ServerConfig::default()).unwrap();
        let two = server.http_service(ServerConfig::default()).unwrap();
        assert!(one.counters().same(two.counters()));
        let a = open_legacy(&one).await;
        let b = open_legacy(&two).await;
        let load = server.load();
        assert_eq!((load.sessions, load.streams, load.events), (2, 0, Some(0)));
        assert!(!load.is_idle());
        let get = Request::get("/mcp")
            .header("host", "127.0.0.1")
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", &a)
            .extension(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))))
            .body(String::new())
            .unwrap();
        let stream = one.handle(get).await;
        assert_eq!(stream.status(), StatusCode::OK);
        assert_eq!(server.load().streams, 1);
        drop(stream);
        assert_eq!(server.load().streams, 0);
        for (service, sid) in [(&one, &a), (&two, &b)] {
            let delete = Request::delete("/mcp")
                .header("host", "127.0.0.1")
                .header("mcp-protocol-version", "2025-06-18")
                .header("mcp-session-id", sid.as_str())
                .extension(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))))
                .body(String::new())
                .unwrap();
            assert!(service.handle(delete).await.status().is_success());
        }
        let load = server.load();
        assert_eq!((load.sessions, load.streams), (0, 0));
        assert!(load.is_idle());
    }

    /// A legacy session's state is plain data in the store, saved when it changes; between
    /// requests a session has no runner, no task and no channel: N idle sessions add no task.
    #[tokio::test(flavor = "current_thread")]
    async fn legacy_sessions_are_stored_state_and_idle_ones_spawn_no_tasks() {
        let store = Arc::new(crate::InMemoryStore::new());
        let server = Server::builder("s", "1")
            .tool(Tool::new("echo", |_: NoArgs| std::future::ready("echo")))
            .session_store(store.clone())
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let first = open_legacy(&service).await;
        let set_level = json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel",
            "params": {"level": "warning"}});
        let reply = legacy_request(&service, &first, set_level)
            .await
            .next()
            .await
            .unwrap();
        assert_eq!(reply["id"], 2, "{reply}");
        let state = store.load(&first).await.unwrap().unwrap();
        assert_eq!(
            state.version,
            Some(modelctx_session::ProtocolVersion::V2025_06_18)
        );
        assert!(state.initialized);
        assert_eq!(state.log_level, Some(modelctx_session::LogLevel::Warning));
        assert_eq!(
            state.client_info,
            Some(json!({"name": "c", "version": "1"}))
        );

        // The first session started the one task that fans changes out to all sessions.
        let alive_tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let tasks = alive_tasks();
        const N: usize = 50;
        for i in 0..N {
            let sid = open_legacy(&service).await;
            let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "echo", "arguments": {}}});
            let reply = legacy_request(&service, &sid, call)
                .await
                .next()
                .await
                .unwrap();
            assert_eq!(
                reply["result"]["content"][0]["text"], "echo",
                "{i}: {reply}"
            );
        }
        // Short-lived tasks of the transport may still be finishing: wait (bounded) until no
        // more tasks are alive than before the sessions opened. A task kept per idle session
        // (N of them) never lets that happen.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive_tasks() > tasks && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let alive = alive_tasks();
        assert!(
            alive <= tasks,
            "{N} idle legacy sessions spawned tasks: {alive} alive, {tasks} before"
        );
        assert_eq!(server.load().connections, 0);
        assert_eq!(store.len(), N + 1);
        let idle = LegacySizes {
            sessions: N + 1,
            requests: 0,
            questions: 0,
        };
        assert_eq!(sizes(&server), idle);
        // What one idle session keeps in the store, serialized.
        let bytes = serde_json::to_vec(&state).unwrap().len();
        assert!(bytes < 512, "{bytes} bytes");
    }

    /// A store whose saves wait, once armed, until the test lets them go; it says when one
    /// waits. With `hold_load` set, the next load reads the state, then waits (`waiting`,
    /// `open`) before giving it.
    #[derive(Debug)]
    struct GatedSaves {
        inner: crate::InMemoryStore,
        armed: std::sync::atomic::AtomicBool,
        waiting: tokio::sync::Notify,
        open: tokio::sync::Semaphore,
    }

    impl GatedSaves {
        fn new() -> Arc<GatedSaves> {
            Arc::new(GatedSaves {
                inner: crate::InMemoryStore::new(),
                armed: AtomicBool::new(false),
                waiting: tokio::sync::Notify::new(),
                open: tokio::sync::Semaphore::new(0),
            })
        }
    }

    /// The next load of a [`HeldLoad`] store: read, then held until let go.
    #[derive(Debug)]
    struct HeldLoad {
        inner: crate::InMemoryStore,
        hold: AtomicBool,
        waiting: tokio::sync::Notify,
        open: tokio::sync::Semaphore,
    }

    impl SessionStore for HeldLoad {
        fn load<'a>(&'a self, id: &'a str) -> crate::run::StoreFuture<'a, Option<SessionState>> {
            Box::pin(async move {
                let state = self.inner.load(id).await;
                if self.hold.swap(false, Ordering::SeqCst) {
                    self.waiting.notify_one();
                    self.open.acquire().await.unwrap().forget();
                }
                state
            })
        }

        fn save<'a>(
            &'a self,
            id: &'a str,
            state: &'a SessionState,
        ) -> crate::run::StoreFuture<'a, ()> {
            self.inner.save(id, state)
        }

        fn remove<'a>(&'a self, id: &'a str) -> crate::run::StoreFuture<'a, ()> {
            self.inner.remove(id)
        }
    }

    impl SessionStore for GatedSaves {
        fn load<'a>(&'a self, id: &'a str) -> crate::run::StoreFuture<'a, Option<SessionState>> {
            self.inner.load(id)
        }

        fn save<'a>(
            &'a self,
            id: &'a str,
            state: &'a SessionState,
        ) -> crate::run::StoreFuture<'a, ()> {
            Box::pin(async move {
                if self.armed.load(Ordering::SeqCst) {
                    self.waiting.notify_one();
                    self.open.acquire().await.unwrap().forget();
                }
                self.inner.save(id, state).await
            })
        }

        fn remove<'a>(&'a self, id: &'a str) -> crate::run::StoreFuture<'a, ()> {
            self.inner.remove(id)
        }
    }

    /// A notification POST is answered 202 only once what it changes is stored: the client's
    /// next request, which may land on another instance at once, must find its session
    /// initialized (else a question of that request waits for a `notifications/initialized`
    /// that came already, and the POST never gets its response head).
    #[tokio::test(flavor = "current_thread")]
    async fn a_notification_is_accepted_once_its_state_is_saved() {
        let store = GatedSaves::new();
        let server = Server::builder("s", "1")
            .session_store(store.clone())
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {"roots": {}},
            "clientInfo": {"name": "c", "version": "1"}}});
        let response = service.handle(legacy_post(None, initialize)).await;
        assert_eq!(response.status(), StatusCode::OK);
        let sid = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(Messages::of(response).next().await.unwrap()["id"], 1);

        store.armed.store(true, Ordering::SeqCst);
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let mut post = Box::pin(service.handle(legacy_post(Some(&sid), initialized)));
        tokio::select! {
            biased;
            () = store.waiting.notified() => {}
            response = &mut post => panic!(
                "answered {} before its state was saved", response.status()
            ),
        }
        assert!(!store.inner.load(&sid).await.unwrap().unwrap().initialized);
        store.open.add_permits(1);
        let response = tokio::time::timeout(std::time::Duration::from_secs(10), post)
            .await
            .expect("answered once saved");
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        assert!(store.inner.load(&sid).await.unwrap().unwrap().initialized);
    }

    /// A server with the `roots` tool (it asks the client `roots/list`) on `store`, and a
    /// legacy session opened on it whose `notifications/initialized` is not sent yet.
    async fn asking_server(store: Arc<dyn SessionStore>) -> (Server, McpService, String) {
        let roots = |context: crate::Context, _: NoArgs| async move {
            let answer = context.list_roots().await.unwrap();
            answer.roots[0].uri.clone()
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("roots", roots))
            .session_store(store)
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {"roots": {}},
            "clientInfo": {"name": "c", "version": "1"}}});
        let response = service.handle(legacy_post(None, initialize)).await;
        let sid = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(Messages::of(response).next().await.unwrap()["id"], 1);
        (server, service, sid)
    }

    /// The `roots` call of session `sid`, on a task: its POST's head comes with its question.
    fn call_roots(service: &McpService, sid: &str) -> tokio::task::JoinHandle<Value> {
        let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "roots", "arguments": {}}});
        let service = service.clone();
        let sid = sid.to_owned();
        tokio::spawn(async move {
            let mut stream = legacy_request(&service, &sid, call).await;
            stream.next().await.unwrap()
        })
    }

    /// A client may send its first request right after `notifications/initialized`, without
    /// waiting for the 202, and the two POSTs may race (on two instances behind a balancer, or
    /// on one). A request that loaded the session uninitialized holds its questions until the
    /// notification: told to it once the notification's state is saved, it asks them.
    #[tokio::test(flavor = "current_thread")]
    async fn a_question_held_for_initialized_goes_once_initialized_is_saved() {
        let store = GatedSaves::new();
        let (server, service, sid) = asking_server(store.clone()).await;
        store.armed.store(true, Ordering::SeqCst);
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let notify = tokio::spawn({
            let service = service.clone();
            let sid = sid.clone();
            async move { service.handle(legacy_post(Some(&sid), initialized)).await }
        });
        store.waiting.notified().await;
        // The call loads the session uninitialized and waits, entered, its question held.
        let asked = call_roots(&service, &sid);
        while sizes(&server).requests == 0 {
            tokio::task::yield_now().await;
        }
        store.open.add_permits(1);
        let ask = tokio::time::timeout(std::time::Duration::from_secs(10), asked)
            .await
            .expect("the question is asked once `initialized` is saved")
            .unwrap();
        assert_eq!(ask["method"], "roots/list", "{ask}");
        assert_eq!(notify.await.unwrap().status(), StatusCode::ACCEPTED);
    }

    /// The other order: the request loaded the session uninitialized, then the notification
    /// was saved and told before the request was entered among those that wait. Entered, it
    /// finds the notification in the store, and asks.
    #[tokio::test(flavor = "current_thread")]
    async fn a_question_held_for_initialized_goes_when_initialized_came_before_it_waited() {
        let store = Arc::new(HeldLoad {
            inner: crate::InMemoryStore::new(),
            hold: AtomicBool::new(false),
            waiting: tokio::sync::Notify::new(),
            open: tokio::sync::Semaphore::new(0),
        });
        let (_server, service, sid) = asking_server(store.clone()).await;
        store.hold.store(true, Ordering::SeqCst);
        let asked = call_roots(&service, &sid);
        store.waiting.notified().await;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = service.handle(legacy_post(Some(&sid), initialized)).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        assert!(store.inner.load(&sid).await.unwrap().unwrap().initialized);
        store.open.add_permits(1);
        let ask = tokio::time::timeout(std::time::Duration::from_secs(10), asked)
            .await
            .expect("the question is asked: `initialized` is in the store")
            .unwrap();
        assert_eq!(ask["method"], "roots/list", "{ask}");
    }

    /// A request whose handler waits lives in the table of requests running: the client's
    /// answer to its question (a later POST) reaches it, a later `notifications/cancelled`
    /// cancels it, and the tables return to their start sizes when it ends.
    #[tokio::test(flavor = "current_thread")]
    async fn a_waiting_legacy_request_hears_later_posts_and_leaves_nothing_behind() {
        let roots = |context: crate::Context, _: NoArgs| async move {
            let answer = context.list_roots().await.unwrap();
            answer.roots[0].uri.clone()
        };
        let (stopped, was_stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = Arc::new(Mutex::new(Some(stopped)));
        let hang = move |context: crate::Context, _: NoArgs| {
            let stopped = stopped.clone();
            async move {
                context.cancelled().cancelled().await;
                if let Some(stopped) = stopped.lock().unwrap().take() {
                    let _ = stopped.send(());
                }
                "stopped"
            }
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("roots", roots))
            .tool(Tool::new("hang", hang))
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let sid = open_legacy(&service).await;
        let start = sizes(&server);

        let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "roots", "arguments": {}}});
        let mut stream = legacy_request(&service, &sid, call).await;
        let ask = stream.next().await.unwrap();
        assert_eq!(ask["method"], "roots/list", "{ask}");
        let grown = LegacySizes {
            requests: 1,
            questions: 1,
            ..start
        };
        assert_eq!(sizes(&server), grown);
        let answer = json!({"jsonrpc": "2.0", "id": ask["id"],
            "result": {"roots": [{"uri": "file:///r"}]}});
        let response = service.handle(legacy_post(Some(&sid), answer)).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let reply = stream.next().await.unwrap();
        assert_eq!(reply["id"], 5, "{reply}");
        assert_eq!(
            reply["result"]["content"][0]["text"], "file:///r",
            "{reply}"
        );
        while sizes(&server) != start || server.load().connections > 0 {
            tokio::task::yield_now().await;
        }

        let call = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
            "params": {"name": "hang", "arguments": {}}});
        // Its POST's response starts with its first message: it waits on a task.
        let post = tokio::spawn({
            let service = service.clone();
            let sid = sid.clone();
            async move { service.handle(legacy_post(Some(&sid), call)).await }
        });
        while server.load().handlers == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(sizes(&server).requests, 1);
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 6}});
        let response = service.handle(legacy_post(Some(&sid), cancel)).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        was_stopped.await.unwrap();
        // Its session read the cancellation, and the facade let the transport know: the POST
        // waits no more, and ends with nothing in it (the handler's answer is not written).
        let post = tokio::time::timeout(std::time::Duration::from_secs(10), post)
            .await
            .expect("the POST waits no more");
        let mut cancelled = Messages::of(post.unwrap());
        assert_eq!(cancelled.next().await, None);
        assert_eq!(service.table_sizes().await.requests, 0);
        while sizes(&server) != start || server.load().connections > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(server.load().handlers, 0);
    }

    /// Our question cancelled on a legacy session (the handler answered without waiting for
    /// the client's answer): the session's `Transmit::Cancel` is written as
    /// `notifications/cancelled`, on the standalone stream like the session's own messages.
    #[tokio::test(flavor = "current_thread")]
    async fn a_cancelled_question_is_written_as_its_notification() {
        let impatient = |context: crate::Context, _: NoArgs| async move {
            let roots = context.list_roots();
            match tokio::time::timeout(std::time::Duration::from_millis(20), roots).await {
                Ok(_) => "answered",
                Err(_) => "gave up",
            }
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("impatient", impatient))
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let sid = open_legacy(&service).await;
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "impatient", "arguments": {}}});
        let mut stream = legacy_request(&service, &sid, call).await;
        let ask = stream.next().await.unwrap();
        assert_eq!(ask["method"], "roots/list", "{ask}");
        let reply = stream.next().await.unwrap();
        assert_eq!(reply["result"]["content"][0]["text"], "gave up", "{reply}");
        let mut get = Request::get("/mcp")
            .header("host", "127.0.0.1")
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", &sid)
            .body(String::new())
            .unwrap();
        get.extensions_mut()
            .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
        let response = service.handle(get).await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut standalone = Messages::of(response);
        let cancel = tokio::time::timeout(std::time::Duration::from_secs(10), standalone.next())
            .await
            .expect("the cancellation is written")
            .unwrap();
        assert_eq!(cancel["method"], "notifications/cancelled", "{cancel}");
        assert_eq!(cancel["params"]["requestId"], ask["id"], "{cancel}");
    }

    /// A POST whose client goes away before its answer (`LegacyHandler::abandoned`): the
    /// request's handler is cancelled as the client's cancellation would cancel it, nothing is
    /// written for it, and the tables return to their start sizes.
    #[tokio::test(flavor = "current_thread")]
    async fn an_abandoned_legacy_post_cancels_its_handler() {
        let (stopped, was_stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = Arc::new(Mutex::new(Some(stopped)));
        let hang = move |context: crate::Context, _: NoArgs| {
            let stopped = stopped.clone();
            async move {
                context.cancelled().cancelled().await;
                if let Some(stopped) = stopped.lock().unwrap().take() {
                    let _ = stopped.send(());
                }
                "stopped"
            }
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("hang", hang))
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let sid = open_legacy(&service).await;
        let start = sizes(&server);
        let call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "hang", "arguments": {}}});
        let post = tokio::spawn({
            let service = service.clone();
            let sid = sid.clone();
            async move { service.handle(legacy_post(Some(&sid), call)).await }
        });
        while server.load().handlers == 0 {
            tokio::task::yield_now().await;
        }
        // The client goes away.
        post.abort();
        let _ = post.await;
        tokio::time::timeout(std::time::Duration::from_secs(10), was_stopped)
            .await
            .expect("the handler is cancelled")
            .unwrap();
        while sizes(&server) != start || server.load().connections > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(server.load().handlers, 0);
        let sizes = service.table_sizes().await;
        assert_eq!((sizes.sessions, sizes.streams, sizes.requests), (1, 0, 0));
        // Nothing was written for it: no event waits for the session's standalone stream.
        assert_eq!(sizes.queued, 0);
    }

    /// A `logging/setLevel` of a later POST reaches the requests of the session that wait, as
    /// when one runner served the whole session.
    #[tokio::test(flavor = "current_thread")]
    async fn a_later_set_level_reaches_a_waiting_legacy_request() {
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let gate = Arc::new(tokio::sync::Mutex::new(Some(gate)));
        let late = move |context: crate::Context, _: NoArgs| {
            let gate = gate.clone();
            async move {
                if let Some(gate) = gate.lock().await.take() {
                    let _ = gate.await;
                }
                let level = modelctx_session::LogLevel::Warning;
                context.log(level, None, json!("late")).await;
                "logged"
            }
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("late", late))
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let sid = open_legacy(&service).await;
        let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "late", "arguments": {}}});
        let post = tokio::spawn({
            let service = service.clone();
            let sid = sid.clone();
            async move { service.handle(legacy_post(Some(&sid), call)).await }
        });
        while server.load().handlers == 0 {
            tokio::task::yield_now().await;
        }
        let set_level = json!({"jsonrpc": "2.0", "id": 5, "method": "logging/setLevel",
            "params": {"level": "info"}});
        let reply = legacy_request(&service, &sid, set_level)
            .await
            .next()
            .await
            .unwrap();
        assert_eq!(reply["id"], 5, "{reply}");
        open.send(()).unwrap();
        let mut stream = Messages::of(post.await.unwrap());
        let log = stream.next().await.unwrap();
        assert_eq!(log["method"], "notifications/message", "{log}");
        assert_eq!(log["params"]["data"], "late", "{log}");
        let reply = stream.next().await.unwrap();
        assert_eq!(reply["id"], 4, "{reply}");
    }

    /// The end of a legacy session (DELETE) cancels its requests that wait, forgets its state
    /// and leaves the tables as they were before it.
    #[tokio::test(flavor = "current_thread")]
    async fn the_end_of_a_legacy_session_cancels_its_waiting_requests_and_forgets_it() {
        let (stopped, was_stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = Arc::new(Mutex::new(Some(stopped)));
        let hang = move |context: crate::Context, _: NoArgs| {
            let stopped = stopped.clone();
            async move {
                context.cancelled().cancelled().await;
                if let Some(stopped) = stopped.lock().unwrap().take() {
                    let _ = stopped.send(());
                }
                "stopped"
            }
        };
        let store = Arc::new(crate::InMemoryStore::new());
        let server = Server::builder("s", "1")
            .tool(Tool::new("hang", hang))
            .session_store(store.clone())
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let start = sizes(&server);
        let sid = open_legacy(&service).await;
        assert_eq!(store.len(), 1);
        let call = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
            "params": {"name": "hang", "arguments": {}}});
        let post = tokio::spawn({
            let service = service.clone();
            let sid = sid.clone();
            async move { service.handle(legacy_post(Some(&sid), call)).await }
        });
        while server.load().handlers == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(sizes(&server).requests, 1);
        let mut delete = Request::delete("/mcp")
            .header("host", "127.0.0.1")
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", &sid)
            .body(String::new())
            .unwrap();
        delete
            .extensions_mut()
            .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
        let response = service.handle(delete).await;
        assert!(response.status().is_success(), "{}", response.status());
        was_stopped.await.unwrap();
        drop(post);
        while sizes(&server) != start || server.load().connections > 0 {
            tokio::task::yield_now().await;
        }
        assert!(store.is_empty());
    }

    /// At most `MAX_WAITING` requests of legacy sessions wait at once: with the table full, the
    /// next request that would wait is refused with the busy error (its handler cancelled, the
    /// table unchanged), and the table empties once the waiting requests end.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_table_of_waiting_requests_refuses_the_next_one() {
        let hang = |context: crate::Context, _: NoArgs| async move {
            context.cancelled().cancelled().await;
            "stopped"
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("hang", hang))
            .build();
        // A waiting request's POST counts as in flight until its first message.
        let mut config = ServerConfig::default();
        config.max_requests_in_flight = MAX_WAITING + 16;
        let service = server.http_service(config).unwrap();
        let start = sizes(&server);
        let sid = open_legacy(&service).await;
        let call = |id: Value| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "hang", "arguments": {}}})
        };
        async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
            tokio::time::timeout(std::time::Duration::from_secs(60), future)
                .await
                .unwrap_or_else(|_| panic!("{what}: not within 60 s"))
        }

        let mut posts = Vec::with_capacity(MAX_WAITING);
        for id in 0..MAX_WAITING {
            posts.push(tokio::spawn({
                let service = service.clone();
                let post = legacy_post(Some(&sid), call(json!(id)));
                async move { service.handle(post).await }
            }));
        }
        let full = async {
            while sizes(&server).requests < MAX_WAITING || server.load().handlers < MAX_WAITING {
                tokio::task::yield_now().await;
            }
        };
        bounded("the table fills", full).await;

        let refused = bounded("the refusal", async {
            legacy_request(&service, &sid, call(json!("over")))
                .await
                .next()
                .await
        })
        .await;
        let limit = format!("at most {MAX_WAITING} requests of legacy sessions may wait at once");
        let error = json!({"code": -32000, "message": format!("the server is busy: {limit}"),
            "data": {"reason": "rate_limited", "limit": limit}});
        assert_eq!(
            refused,
            Some(json!({"jsonrpc": "2.0", "id": "over", "error": error}))
        );
        let settled = async {
            while server.load().handlers > MAX_WAITING {
                tokio::task::yield_now().await;
            }
        };
        bounded("the refused handler ends", settled).await;
        assert_eq!(sizes(&server).requests, MAX_WAITING);
        assert_eq!(sizes(&server).questions, 0);

        // The end of the session cancels the waiting requests: their POSTs end, the tables
        // return to their start sizes.
        let mut delete = Request::delete("/mcp")
            .header("host", "127.0.0.1")
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", &sid)
            .body(String::new())
            .unwrap();
        delete
            .extensions_mut()
            .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
        let response = service.handle(delete).await;
        assert!(response.status().is_success(), "{}", response.status());
        let ended = async {
            for post in posts {
                drop(post.await.unwrap());
            }
            while sizes(&server) != start
                || server.load().handlers > 0
                || server.load().connections > 0
            {
                tokio::task::yield_now().await;
            }
        };
        bounded("the waiting requests end", ended).await;
        assert_eq!(service.table_sizes().await.requests, 0);
    }

    /// The fan-out task runs only while there are legacy sessions: once the last one ends, the
    /// server is back to the tasks it had before its first session.
    #[tokio::test(flavor = "current_thread")]
    async fn the_fan_out_task_ends_with_the_last_legacy_session() {
        let server = Server::builder("s", "1")
            .tool(Tool::new("echo", |_: NoArgs| std::future::ready("echo")))
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        let mut sids = Vec::new();
        for _ in 0..3 {
            sids.push(open_legacy(&service).await);
        }
        for sid in sids {
            let mut delete = Request::delete("/mcp")
                .header("host", "127.0.0.1")
                .header("mcp-protocol-version", "2025-06-18")
                .header("mcp-session-id", &sid)
                .body(String::new())
                .unwrap();
            delete
                .extensions_mut()
                .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
            let response = service.handle(delete).await;
            assert!(response.status().is_success(), "{}", response.status());
        }
        // The transport's short-lived tasks and the fan-out task wind down.
        let settled = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while tasks() > before {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(settled.is_ok(), "{} tasks, {before} before", tasks());
        assert_eq!(server.load().connections, 0);
    }

    /// The server's changes reach every open legacy session with no task of its own: on the
    /// standalone stream, from the one fan-out task.
    #[tokio::test(flavor = "current_thread")]
    async fn list_changes_reach_idle_legacy_sessions() {
        let server = Server::builder("s", "1").declare_tools().build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let sid = open_legacy(&service).await;
        let mut get = Request::get("/mcp")
            .header("host", "127.0.0.1")
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", &sid)
            .body(String::new())
            .unwrap();
        get.extensions_mut()
            .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
        let response = service.handle(get).await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut standalone = Messages::of(response);
        server
            .add_tool(Tool::new("late", |_: NoArgs| std::future::ready("late")))
            .unwrap();
        let note = standalone.next().await.unwrap();
        assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
    }

    /// A guard that lets nobody in (only its identity matters here).
    #[derive(Debug)]
    struct Closed;

    impl modelctx_http::server::Guard for Closed {
        fn authenticate<'a>(
            &'a self,
            _: &'a axum::http::request::Parts,
        ) -> modelctx_http::event_store::BoxFuture<
            'a,
            Result<modelctx_http::server::Grant, modelctx_http::server::Challenge>,
        > {
            let challenge = modelctx_http::server::Challenge::new(StatusCode::UNAUTHORIZED);
            Box::pin(std::future::ready(Err(challenge)))
        }

        fn authorize(
            &self,
            _: &modelctx_http::server::Grant,
            _: &[String],
        ) -> Result<(), modelctx_http::server::Challenge> {
            Err(modelctx_http::server::Challenge::new(StatusCode::FORBIDDEN))
        }
    }

    fn guarded(config: &ServerConfig) -> &Arc<dyn modelctx_http::server::Guard> {
        config.guard.as_ref().expect("a guard")
    }

    #[test]
    fn the_builders_guard_guards_the_endpoint_unless_the_config_names_one() {
        let server = Server::builder("s", "1").auth(Closed).build();
        let kept = server.shared.guard.clone().expect("the server's guard");
        let config = server.endpoint_config(ServerConfig::default());
        assert!(Arc::ptr_eq(guarded(&config), &kept));
        // A guard in the configuration wins: it admits the requests (and the server's own
        // check asks the guard that admitted each one).
        let given: Arc<dyn modelctx_http::server::Guard> = Arc::new(Closed);
        let mut other = ServerConfig::default();
        other.guard = Some(given.clone());
        assert!(Arc::ptr_eq(guarded(&server.endpoint_config(other)), &given));
    }

    #[test]
    fn a_guard_served_with_is_not_remembered() {
        let server = Server::builder("s", "1").build();
        assert!(
            server
                .endpoint_config(ServerConfig::default())
                .guard
                .is_none()
        );
        let mut config = ServerConfig::default();
        config.guard = Some(Arc::new(Closed));
        assert!(server.endpoint_config(config).guard.is_some());
        // Served again without one: unguarded, as configured.
        assert!(server.shared.guard.is_none());
        assert!(
            server
                .endpoint_config(ServerConfig::default())
                .guard
                .is_none()
        );
    }

    /// Sends `request` (the HTTP/1.1 text) on a new connection to `addr` and reads the whole
    /// response (the request says `Connection: close`).
    async fn exchange(addr: SocketAddr, request: String) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    /// The HTTP/1.1 text of [`modern_call`] to `path` on `addr`.
    fn modern_call_text(addr: SocketAddr, path: &str, name: &str) -> String {
        let request = modern_call(name);
        let mut text = format!("POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
        for (header, value) in request.headers() {
            if header != "host" {
                text += &format!("{header}: {}\r\n", value.to_str().unwrap());
            }
        }
        let body = request.into_body();
        text + &format!("content-length: {}\r\n\r\n{body}", body.len())
    }

    /// `serve_http_until`: the server runs until the signal; then a request under way still
    /// gets its answer (graceful), no new connection is accepted, and the future ends `Ok`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_http_until_ends_at_the_signal_after_the_requests_in_flight() {
        let started = Arc::new(tokio::sync::Notify::new());
        let running = started.clone();
        let slow = move |_: NoArgs| {
            let running = running.clone();
            async move {
                running.notify_one();
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                "done"
            }
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("slow", slow))
            .build();
        // Bound first to know the address; `serve_http_until` itself takes a name.
        let addr = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap()
        };
        let (stop, signal) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(async move {
            server
                .serve_http_until(addr, ServerConfig::default(), async {
                    let _ = signal.await;
                })
                .await
        });
        let call = {
            let mut tries = 0;
            loop {
                if tokio::net::TcpStream::connect(addr).await.is_ok() {
                    break;
                }
                tries += 1;
                assert!(tries < 100, "the server never listened");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            tokio::spawn(exchange(addr, modern_call_text(addr, "/mcp", "slow")))
        };
        started.notified().await;
        stop.send(()).unwrap();
        let answer = tokio::time::timeout(std::time::Duration::from_secs(10), call)
            .await
            .expect("the call in flight is answered")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(r#""text":"done""#), "{answer}");
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), serving)
            .await
            .expect("the server stops")
            .unwrap();
        assert!(ended.is_ok(), "{ended:?}");
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    /// A configuration built with the builder methods serves as set: the endpoint at its path.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_config_built_with_its_methods_serves() {
        let hi = |_: NoArgs| std::future::ready("hi");
        let server = Server::builder("s", "1").tool(Tool::new("hi", hi)).build();
        let config = crate::HttpConfig::default()
            .path(Some("/api/mcp"))
            .max_body(64 * 1024)
            .shutdown_grace(std::time::Duration::from_secs(1));
        let running = server.serve_http("localhost:0", config).await.unwrap();
        let addr = running.local_addr();
        let answer = exchange(addr, modern_call_text(addr, "/api/mcp", "hi")).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(r#""text":"hi""#), "{answer}");
        let elsewhere = exchange(addr, modern_call_text(addr, "/mcp", "hi")).await;
        assert!(elsewhere.starts_with("HTTP/1.1 404"), "{elsewhere}");
        let handle = running.handle();
        let serving = tokio::spawn(running.into_future());
        handle.shutdown(std::time::Duration::from_secs(1)).await;
        serving.await.unwrap().unwrap();
    }
}
