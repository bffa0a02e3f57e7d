//! `mcx proxy`: a stdio MCP server served over Streamable HTTP, both eras on one endpoint.
//!
//! The HTTP rules (sessions, SSE, event ids, resumption, Origin and Host checks, the session
//! bound and idle timeout) are `modelctx-http`'s: the proxy is the [`McpApp`] behind its
//! service, and forwards to child processes.
//!
//! * Legacy (`initialize`) sessions get a child each, started when the session opens and
//!   stopped when it ends (DELETE, idle timeout, shutdown); a child that exits ends its session.
//!   Ids need no rewriting (one client per child). Over stdio a message names no request it
//!   belongs to, so the proxy relates it: progress by its token, list changes and resource
//!   updates to the standalone stream, anything else (log messages, the server's own requests)
//!   to the newest request in flight, else the standalone stream.
//!   The child must see `initialize`, the first message of its session, so starting it lazily
//!   buys nothing: what bounds the processes a flood of `initialize` POSTs starts is a cap on
//!   live children (`--max-children`, 16, well below `--max-sessions`, 64) and a token bucket
//!   (8 at once, then `--spawn-rate`, 2 per second). Beyond either, `initialize` is answered
//!   with a JSON-RPC error saying why (and when to try again), which ends the session.
//! * Modern (2026-07-28) requests share one child, started with the proxy and again after it
//!   exits; a child that ran less than 10 s is restarted only after a delay (100 ms, doubled at
//!   each such exit in a row, at most 30 s), and requests fail at once meanwhile. Each request
//!   gets a proxy-assigned id (and progress token) on the child's stdin, mapped back on the way
//!   out; a closed HTTP stream becomes `notifications/cancelled` (`--verbose` says "cancelled"
//!   for a request still waiting for its answer, "ended" for a listen stream, which clients
//!   end that way); listen notifications go to
//!   their listen request's stream by subscription id (the listen request's id).
//!
//! Isolation on the shared child: the clients of modern requests share one server process, so
//! they share whatever state it keeps (that is the server's to separate, as over HTTP); the
//! proxy only makes sure that each message of the child reaches the client it is about. Answers
//! and progress go by the proxy-assigned id and token. A log message goes to the request its
//! `_meta` names under `dev.modelctx/relatedRequestId` (modelctx servers tag them); an untagged
//! one goes to the one request in flight that asked for logs, when exactly one did, and is
//! dropped otherwise (counted, with `--verbose`): never to a client it cannot be shown to be
//! about. Server-to-client requests are refused (a 2026-07-28 server asks with
//! `input_required` results).
//!
//! What a relay reads of the protocol itself, and why: the proxy is no party to either session
//! (the client and the child are; it runs no `modelctx-session` session, which would answer
//! and refuse in their place), yet it relates the child's messages to the client requests
//! they belong to. So it reads a few things, with the generated method constants and `_meta`
//! keys: the version in the child's `initialize` result (the facade's part: it tells
//! `LegacySession::set_version`); a client's `notifications/cancelled` (the request no longer
//! waits for an answer: `LegacySession::release`; passed on unchanged; an abandoned POST's
//! request is cancelled on the child the same way); progress tokens, `subscriptionId`s and the
//! related-request id of log messages (to route); list changes and resource updates (to the
//! standalone stream). Modern `_meta` is checked by the session's `check_modern_meta`.
//!
//! Memory: the queue to a child's stdin holds at most 16 MiB (and 1024 lines); its writer takes
//! at most about 64 KiB before it flushes. A request that does not fit is answered with an
//! error; a modern notification is passed on only while less than 8 MiB is queued, and dropped
//! (counted) beyond.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use modelctx_http::headers::{ParamHeader, param_headers};
use modelctx_http::server::{
    LegacyHandler, LegacySession, McpApp, ModernReply, ModernRequest, RequestContext, ServerConfig,
};
use modelctx_stdio::{LineReader, ServerCommand, Stderr};
use modelctx_types::consts::{
    NotificationsCancelled, NotificationsMessage, NotificationsProgress,
    NotificationsResourcesUpdated, NotificationsToolsListChanged, SubscriptionsListen, ToolsList,
};
use modelctx_types::meta_keys::{
    CLIENT_CAPABILITIES, CLIENT_INFO, LOG_LEVEL, PROGRESS_TOKEN, PROTOCOL_VERSION,
    RELATED_REQUEST_ID, SUBSCRIPTION_ID,
};
use modelctx_types::{
    ErrorCode, ErrorObject, ErrorResponse, Incoming, Message, Notification, Request, RequestId,
};
use serde_json::{Value, json};
use tokio::process::ChildStdout;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Lines waiting for a child's stdin.
const CHILD_QUEUE: usize = 1024;
/// Bytes of messages waiting for a child's stdin (queued, or taken by its writer and not yet
/// written): 16 MiB. A message beyond is refused.
const CHILD_QUEUE_BYTES: usize = 16 * 1024 * 1024;
/// A modern notification is queued only while the queue holds less than this: the rest is
/// kept for requests, which get an error when refused (a notification cannot).
const NOTIFICATION_QUEUE_BYTES: usize = CHILD_QUEUE_BYTES / 2;
/// The most bytes the writer takes from the queue before it flushes them to the child.
const WRITE_CHUNK: usize = 64 * 1024;
/// Legacy children started at once before the rate applies (the token bucket's size).
const SPAWN_BURST: f64 = 8.0;
/// The shared child's first restart delay after it exited early; doubled at each early exit.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// The longest restart delay.
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A shared child that ran this long before it exited is restarted at once.
const BACKOFF_RESET: Duration = Duration::from_secs(10);
/// Messages waiting for one modern request's HTTP stream.
const STREAM_QUEUE: usize = 256;
/// Requests in flight on one legacy session.
const SESSION_REQUESTS: usize = 1024;
/// The most tools whose headers the proxy keeps.
const MAX_TOOLS: usize = 10_000;
/// The modern version the proxy speaks to its shared child.
const MODERN: &str = "2026-07-28";

static VERBOSE: AtomicBool = AtomicBool::new(false);

/// A line on stderr about what the proxy does, with `--verbose`.
fn note(text: std::fmt::Arguments<'_>) {
    if VERBOSE.load(Ordering::Relaxed) {
        warn(text);
    }
}

/// A warning on stderr, always: one write, so that it does not mix with the lines the
/// children write to the same stderr.
fn warn(text: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let line = format!("mcx proxy: {text}\n");
    // The children's messages are quoted in some: escaped on a terminal.
    let line = crate::output::for_stderr(&line);
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// What `mcx proxy` was asked.
#[derive(Debug)]
pub(crate) struct Options {
    /// The server's command line, split.
    pub(crate) command: Vec<String>,
    /// Bound by the caller (the guard's resource URL names its port).
    pub(crate) listen: tokio::net::TcpListener,
    pub(crate) max_sessions: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_requests: usize,
    /// The most legacy children alive at once.
    pub(crate) max_children: usize,
    /// Legacy children started per second (after a burst of [`SPAWN_BURST`]).
    pub(crate) spawn_rate: f64,
    pub(crate) verbose: bool,
    /// Who may call (`--auth-issuer`, `--auth-token-file`): the transport's guard.
    pub(crate) guard: Option<modelctx_server::auth::AuthGuard>,
    /// The children's environment (`--env`, `--inherit-env`).
    pub(crate) child_env: crate::reach::ChildEnv,
    /// Where the endpoint counts its sessions and streams, and its event store (the gauges).
    pub(crate) counters: modelctx_http::server::Counters,
    pub(crate) events: Arc<modelctx_http::event_store::MemoryEventStore>,
}

/// Runs the proxy until Ctrl-C (or SIGTERM).
pub(crate) async fn run(options: Options) -> ExitCode {
    VERBOSE.store(options.verbose, Ordering::Relaxed);
    let Some((program, args)) = options.command.split_first() else {
        return crate::fail("--stdio: an empty command line");
    };
    if options.max_sessions == 0 || options.max_requests == 0 || options.max_children == 0 {
        return crate::fail("--max-sessions, --max-requests and --max-children must be at least 1");
    }
    if !(options.spawn_rate.is_finite() && options.spawn_rate > 0.0) {
        return crate::fail("--spawn-rate must be a number above 0");
    }
    let command = ServerCommand::new(program)
        .args(args)
        // The servers' own messages are the user's to see.
        .stderr(Stderr::Inherit);
    let command = match options.child_env.apply(command) {
        Ok(command) => command,
        Err(e) => return crate::fail(e),
    };
    let modern = Arc::new(Modern {
        command: command.clone(),
        max_requests: options.max_requests,
        state: Mutex::new(ModernState::default()),
        spawning: Mutex::new(()),
        spawns: AtomicU64::new(0),
        tools: Mutex::new(HashMap::new()),
    });
    let proxy_children = Arc::new(AtomicUsize::new(0));
    let proxy = Proxy {
        command: command.clone(),
        legacy_children: proxy_children.clone(),
        max_children: options.max_children,
        spawns: Mutex::new(TokenBucket::new(
            SPAWN_BURST,
            options.spawn_rate,
            Instant::now(),
        )),
        modern: modern.clone(),
        versions: ServerConfig::default().versions,
        counters: options.counters,
    };
    let mut config = ServerConfig::default();
    config.event_store = options.events;
    config.max_sessions = options.max_sessions;
    config.session_idle_timeout = options.idle_timeout;
    config.guard = options
        .guard
        .map(|guard| Arc::new(guard) as Arc<dyn modelctx_http::server::Guard>);
    let addr = options.listen.local_addr();
    let running =
        match modelctx_http::server::serve_on(options.listen, config, Arc::new(proxy)).await {
            Ok(running) => running,
            Err(e) => {
                let addr = addr.map_or_else(|_| "the listener".to_owned(), |a| a.to_string());
                return crate::fail(format_args!("serving HTTP on {addr}: {e}"));
            }
        };
    warn(format_args!(
        "http://{}/mcp -> {} (Ctrl-C to stop)",
        running.local_addr(),
        options.command.join(" ")
    ));
    // The shared child starts now, so that the tools' `Mcp-Param-*` headers are known before the
    // first call; if it cannot, the first modern request says why (and tries again).
    if let Err(e) = Modern::child(&modern) {
        warn(format_args!("{}", e.trim_start_matches("mcx proxy: ")));
    }
    terminated().await;
    running.shutdown(Duration::from_secs(2)).await;
    // The sessions' children are stopping; the shared child is stopped too, and each gets a
    // moment to exit before the runtime ends (and kills what is left).
    if let Some((_, link)) = lock(&modern.state).child.take() {
        link.stop.cancel();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while proxy_children.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    ExitCode::SUCCESS
}

/// Ctrl-C, or SIGTERM on Unix.
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

// -- children ------------------------------------------------------------------------------------

/// The way to a child's stdin. Cancelling `stop` (or dropping every sender) closes its stdin
/// and stops it (close, wait, SIGTERM, wait, SIGKILL); it is always reaped.
#[derive(Clone)]
struct ChildLink {
    tx: mpsc::Sender<Vec<u8>>,
    /// Bytes queued for the child's stdin, or taken by its writer and not yet written: at most
    /// [`CHILD_QUEUE_BYTES`].
    queued: Arc<AtomicUsize>,
    stop: CancellationToken,
    pid: u32,
    started: Instant,
}

impl ChildLink {
    /// Queues a message for the child; false when it is gone or too far behind.
    fn send(&self, message: &Message) -> bool {
        self.send_line(modelctx_types::encode(message), CHILD_QUEUE_BYTES)
    }

    /// Queues a line when the bytes queued stay within `limit` (at most [`CHILD_QUEUE_BYTES`]);
    /// false when it is refused or the child is gone.
    fn send_line(&self, line: Vec<u8>, limit: usize) -> bool {
        let size = line.len() + 1;
        let limit = limit.min(CHILD_QUEUE_BYTES);
        let reserved = self
            .queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |queued| {
                (queued + size <= limit).then_some(queued + size)
            });
        if reserved.is_err() {
            return false;
        }
        if self.tx.try_send(line).is_err() {
            self.queued.fetch_sub(size, Ordering::SeqCst);
            return false;
        }
        true
    }
}

/// The child's stdout, message by message.
struct ChildOutput {
    reader: LineReader<ChildStdout>,
    pid: u32,
}

impl ChildOutput {
    /// The next message (or batch); `None` when its stdout ends. Lines that are not JSON-RPC are
    /// reported on stderr and skipped.
    async fn next(&mut self) -> Option<Incoming> {
        loop {
            match self.reader.next_line().await {
                Ok(Some(Ok(line))) => match modelctx_types::decode(line.as_bytes()) {
                    Ok(incoming) => return Some(incoming),
                    Err(e) => warn(format_args!(
                        "child {}: skipped a line of its stdout: {e}",
                        self.pid
                    )),
                },
                Ok(Some(Err(e))) => warn(format_args!(
                    "child {}: skipped a line of its stdout: {e}",
                    self.pid
                )),
                Ok(None) => return None,
                Err(e) => {
                    warn(format_args!("child {}: reading its stdout: {e}", self.pid));
                    return None;
                }
            }
        }
    }
}

/// Starts a child: its stdin writer runs on a task that also reaps it.
fn spawn_child(command: &ServerCommand, what: String) -> std::io::Result<(ChildLink, ChildOutput)> {
    let child = command.spawn()?;
    let (reader, mut writer, mut process) = (child.reader, child.writer, child.process);
    let pid = process.id().unwrap_or(0);
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(CHILD_QUEUE);
    let queued = Arc::new(AtomicUsize::new(0));
    let written = queued.clone();
    let stop = CancellationToken::new();
    let stopping = stop.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stopping.cancelled() => break,
                _ = process.wait() => break,
                line = rx.recv() => {
                    let Some(line) = line else { break };
                    // At most about WRITE_CHUNK bytes at a time leave the queue (which counts
                    // them until they are written).
                    let mut taken = line.len() + 1;
                    let mut ok = writer.feed_raw(&line).is_ok();
                    drop(line);
                    while taken < WRITE_CHUNK && let Ok(line) = rx.try_recv() {
                        taken += line.len() + 1;
                        ok &= writer.feed_raw(&line).is_ok();
                    }
                    if !ok {
                        warn(format_args!("child {pid}: a message with a line break was not sent"));
                    }
                    let flushed = tokio::select! {
                        r = writer.flush() => r.is_ok(),
                        () = stopping.cancelled() => false,
                    };
                    written.fetch_sub(taken, Ordering::SeqCst);
                    if !flushed {
                        break;
                    }
                }
            }
        }
        drop(rx);
        match process.shutdown(writer).await {
            Ok(end) => note(format_args!(
                "{what}: child {pid} stopped ({}, by {:?})",
                end.status, end.by
            )),
            Err(e) => warn(format_args!("{what}: stopping child {pid}: {e}")),
        }
    });
    let link = ChildLink {
        tx,
        queued,
        stop,
        pid,
        started: Instant::now(),
    };
    Ok((link, ChildOutput { reader, pid }))
}

/// The messages of an input, batch members one by one.
fn messages(incoming: Incoming) -> Vec<Message> {
    match incoming {
        Incoming::Single(message) => vec![message],
        Incoming::Batch(items) => items.into_iter().filter_map(Result::ok).collect(),
        _ => Vec::new(),
    }
}

/// The params of a message as JSON, when they are an object.
fn params_of(message: &Message) -> Option<serde_json::Map<String, Value>> {
    let raw = match message {
        Message::Request(r) => r.params.as_deref(),
        Message::Notification(n) => n.params.as_deref(),
        _ => None,
    }?;
    match serde_json::from_str(raw.get()) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

fn raw(value: &impl serde::Serialize) -> Option<Box<serde_json::value::RawValue>> {
    serde_json::value::to_raw_value(value).ok()
}

/// An error response.
fn error(id: RequestId, code: ErrorCode, message: impl Into<String>) -> Message {
    ErrorResponse::new(Some(id), ErrorObject::new(code, message.into())).into()
}

/// The id a response answers.
fn answers(message: &Message) -> Option<&RequestId> {
    match message {
        Message::Response(r) => Some(&r.id),
        Message::Error(e) => e.id.as_ref(),
        _ => None,
    }
}

// -- spawn limits --------------------------------------------------------------------------------

/// A token bucket: `capacity` tokens, refilled at `per_second`.
#[derive(Debug)]
struct TokenBucket {
    tokens: f64,
    capacity: f64,
    per_second: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    fn new(capacity: f64, per_second: f64, now: Instant) -> TokenBucket {
        TokenBucket {
            tokens: capacity,
            capacity,
            per_second,
            last: now,
        }
    }

    /// Takes a token at `now`; when there is none, how long until there is one.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.capacity);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.per_second,
            ))
        }
    }
}

/// The restart delay of the shared child: none at first; after each exit of a child that ran
/// less than [`BACKOFF_RESET`] (or could not start), [`BACKOFF_FIRST`] doubled at each such exit
/// in a row, at most [`BACKOFF_MAX`].
#[derive(Debug, Default)]
struct Backoff {
    /// Early exits in a row.
    failures: u32,
    /// No child is started before this.
    not_before: Option<Instant>,
    /// Why the last start failed, when it did.
    error: Option<String>,
}

impl Backoff {
    /// The delay after `failures` early exits in a row: none after the first (a crash is
    /// restarted at once), then [`BACKOFF_FIRST`], doubled each time, at most [`BACKOFF_MAX`].
    fn delay(failures: u32) -> Duration {
        if failures <= 1 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl(failures - 2).unwrap_or(u32::MAX);
        BACKOFF_FIRST.saturating_mul(factor).min(BACKOFF_MAX)
    }

    /// A child that ran for `ran` exited (or, with `ran` zero, could not start) at `now`.
    fn exited(&mut self, ran: Duration, now: Instant) {
        if ran >= BACKOFF_RESET {
            self.failures = 0;
            self.not_before = None;
            self.error = None;
        } else {
            self.failures = self.failures.saturating_add(1);
            self.not_before = Some(now + Self::delay(self.failures));
        }
    }

    /// How long until a child may start, when not at once.
    fn wait(&self, now: Instant) -> Option<Duration> {
        self.not_before
            .map(|t| t.saturating_duration_since(now))
            .filter(|d| !d.is_zero())
    }
}

/// Milliseconds, rounded up, for messages.
fn millis(wait: Duration) -> u128 {
    wait.as_micros().div_ceil(1000)
}

// -- the application ------------------------------------------------------------------------------

struct Proxy {
    command: ServerCommand,
    /// Legacy children alive (admitted and not yet ended).
    legacy_children: Arc<AtomicUsize>,
    max_children: usize,
    /// The rate of legacy children started.
    spawns: Mutex<TokenBucket>,
    modern: Arc<Modern>,
    /// The versions the endpoint serves (its `ServerConfig::versions`).
    versions: Vec<modelctx_types::ProtocolVersion>,
    /// Where the endpoint counts its sessions and streams (`McpApp::counters`).
    counters: modelctx_http::server::Counters,
}

impl Proxy {
    /// Whether a legacy session may start a child now: fewer than `max_children` alive and a
    /// token in the bucket. Counts it among the live ones when it may.
    fn admit(&self) -> Result<usize, String> {
        let admitted =
            self.legacy_children
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |live| {
                    (live < self.max_children).then_some(live + 1)
                });
        let Ok(before) = admitted else {
            return Err(format!(
                "mcx proxy: {} server processes are running (--max-children); try again later",
                self.max_children
            ));
        };
        if let Err(wait) = lock(&self.spawns).take(Instant::now()) {
            self.legacy_children.fetch_sub(1, Ordering::SeqCst);
            return Err(format!(
                "mcx proxy: server processes are started too fast (--spawn-rate); try again in {} ms",
                millis(wait)
            ));
        }
        Ok(before + 1)
    }
}

impl McpApp for Proxy {
    fn counters(&self) -> Option<modelctx_http::server::Counters> {
        Some(self.counters.clone())
    }

    fn open_session(&self, session: LegacySession) -> Arc<dyn LegacyHandler> {
        let what = format!("legacy session {}", session.id());
        // The child must see `initialize`, the session's first message: starting it later buys
        // nothing, so what bounds the processes a flood of `initialize` starts is this.
        let live = match self.admit() {
            Ok(live) => live,
            Err(reason) => {
                note(format_args!("{what}: refused: {reason}"));
                return Arc::new(Unstarted { session, reason });
            }
        };
        let (link, output) = match spawn_child(&self.command, what.clone()) {
            Ok(started) => started,
            Err(e) => {
                self.legacy_children.fetch_sub(1, Ordering::SeqCst);
                warn(format_args!("{what}: {e}"));
                return Arc::new(Unstarted {
                    session,
                    reason: format!("mcx proxy: cannot start the server: {e}"),
                });
            }
        };
        note(format_args!(
            "{what}: child {} started ({live} legacy children)",
            link.pid
        ));
        let in_flight = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(legacy_output(
            session.clone(),
            output,
            in_flight.clone(),
            link.stop.clone(),
            self.legacy_children.clone(),
            what,
        ));
        Arc::new(LegacyChild {
            link,
            session,
            in_flight,
        })
    }

    fn tool_param_headers(&self, tool: &str) -> Option<Arc<[ParamHeader]>> {
        lock(&self.modern.tools).get(tool).cloned()
    }

    fn modern(&self, request: ModernRequest) {
        let ModernRequest { message, reply, .. } = request;
        // What `_meta` must carry and the versions served are the session's rules: a request
        // they refuse is refused here (an HTTP error), as a server's session would, before it
        // reaches the child.
        let (id, params) = match &message {
            Message::Request(r) => (Some(r.id.clone()), r.params.as_deref()),
            Message::Notification(n) => (None, n.params.as_deref()),
            _ => (None, None),
        };
        if let Err(error) = modelctx_session::check_modern_meta(params, &self.versions) {
            tokio::spawn(async move {
                let _ = reply
                    .refuse(modelctx_types::ErrorResponse::new(id, error))
                    .await;
            });
            return;
        }
        match message {
            Message::Request(request) => Modern::request(&self.modern, request, reply),
            Message::Notification(notification) => self.modern.notification(notification),
            _ => {}
        }
    }
}

// -- legacy -------------------------------------------------------------------------------------------

/// A client request in flight on a legacy session: its id and progress token.
type InFlight = Arc<Mutex<Vec<(RequestId, Option<Value>)>>>;

/// A legacy session whose child did not start (it could not, or too many run): its
/// `initialize` fails, which ends it.
struct Unstarted {
    session: LegacySession,
    /// The error's message.
    reason: String,
}

impl LegacyHandler for Unstarted {
    fn input(&self, input: Incoming, _: RequestContext) {
        let session = self.session.clone();
        let reason = self.reason.clone();
        tokio::spawn(async move {
            for message in messages(input) {
                if let Message::Request(r) = message {
                    let id = r.id.clone();
                    session
                        .send(
                            error(r.id, ErrorCode::INTERNAL_ERROR, reason.clone()),
                            Some(id),
                        )
                        .await;
                }
            }
        });
    }

    fn abandoned(&self, _id: RequestId) {}

    fn closed(&self, _reason: modelctx_http::server::Closed) {}
}

/// A legacy session and its child.
struct LegacyChild {
    link: ChildLink,
    session: LegacySession,
    in_flight: InFlight,
}

impl LegacyChild {
    /// A relay reads `notifications/cancelled` itself: the proxy is no party to the session
    /// (the client and the child are), yet it must know which requests still wait for an
    /// answer, to relate the child's messages to one (`legacy_related`). It passes the
    /// notification on unchanged (the child decides what it means); the requests it names are
    /// no longer in flight, and their POSTs' streams stop waiting for them (the transport reads
    /// no cancellation).
    fn release_cancelled(&self, messages: &[Message]) {
        let cancelled: Vec<RequestId> = messages
            .iter()
            .filter_map(modelctx_session::cancelled_request)
            .collect();
        if cancelled.is_empty() {
            return;
        }
        lock(&self.in_flight).retain(|(i, _)| !cancelled.contains(i));
        let session = self.session.clone();
        tokio::spawn(async move {
            for id in cancelled {
                session.release(&id).await;
            }
        });
    }
}

impl LegacyHandler for LegacyChild {
    fn input(&self, input: Incoming, _: RequestContext) {
        let (line, requests) = match input {
            Incoming::Single(message) => {
                let messages = std::slice::from_ref(&message);
                self.release_cancelled(messages);
                (modelctx_types::encode(&message), legacy_requests(messages))
            }
            Incoming::Batch(items) => {
                let items: Vec<Message> = items.into_iter().filter_map(Result::ok).collect();
                self.release_cancelled(&items);
                (
                    modelctx_types::encode_batch(&items),
                    legacy_requests(&items),
                )
            }
            _ => return,
        };
        let refused = {
            let mut in_flight = lock(&self.in_flight);
            if in_flight.len() + requests.len() > SESSION_REQUESTS {
                Some(format!(
                    "mcx proxy: {SESSION_REQUESTS} requests are in flight on this session"
                ))
            } else if !self.link.send_line(line, CHILD_QUEUE_BYTES) {
                Some("mcx proxy: the server is gone or too far behind".to_owned())
            } else {
                in_flight.extend(requests.iter().cloned());
                None
            }
        };
        if let Some(reason) = refused {
            let session = self.session.clone();
            tokio::spawn(async move {
                for (id, _) in requests {
                    let message = error(id.clone(), ErrorCode::INTERNAL_ERROR, reason.clone());
                    session.send(message, Some(id)).await;
                }
            });
        }
    }

    /// The child is told, as the client's cancellation would tell it: the proxy is the
    /// child's client, and nobody waits for the answer any more.
    fn abandoned(&self, id: RequestId) {
        lock(&self.in_flight).retain(|(i, _)| *i != id);
        let params = json!({"requestId": id, "reason": "the HTTP client went away"});
        if let Ok(cancel) = Notification::new(NotificationsCancelled::VALUE, &params) {
            let line = modelctx_types::encode(&cancel.into());
            let _ = self.link.send_line(line, CHILD_QUEUE_BYTES);
        }
    }

    fn closed(&self, _reason: modelctx_http::server::Closed) {
        note(format_args!(
            "legacy session {}: ended; stopping child {}",
            self.session.id(),
            self.link.pid
        ));
        lock(&self.in_flight).clear();
        self.link.stop.cancel();
    }
}

/// The requests among client messages, with their progress tokens; a client's cancellation of
/// one of its requests is not a request.
fn legacy_requests(messages: &[Message]) -> Vec<(RequestId, Option<Value>)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Request(r) => {
                let token = params_of(m).and_then(|p| p.get("_meta")?.get(PROGRESS_TOKEN).cloned());
                Some((r.id.clone(), token))
            }
            _ => None,
        })
        .collect()
}

/// Reads a legacy child's output to its end and routes it to the session's streams; then ends
/// the session.
async fn legacy_output(
    session: LegacySession,
    mut output: ChildOutput,
    in_flight: InFlight,
    stop: CancellationToken,
    live: Arc<AtomicUsize>,
    what: String,
) {
    // Whether the transport was told the version the child's `initialize` result settled on.
    let mut version_told = false;
    loop {
        let incoming = tokio::select! {
            incoming = output.next() => incoming,
            () = stop.cancelled() => None,
        };
        match incoming {
            None => break,
            Some(Incoming::Single(Message::Response(response)))
                if !version_told && negotiated(&response).is_some() =>
            {
                // The child answered `initialize`: the transport's wire rules (batches, priming
                // events) follow the version it chose, told before the answer is sent.
                if let Some(version) = negotiated(&response) {
                    session.set_version(version).await;
                }
                version_told = true;
                let message = Message::Response(response);
                let related = legacy_related(&in_flight, &message);
                session.send(message, related).await;
            }
            Some(Incoming::Batch(items)) => {
                let messages: Vec<Message> = items.into_iter().filter_map(Result::ok).collect();
                {
                    let mut in_flight = lock(&in_flight);
                    in_flight.retain(|(id, _)| !messages.iter().any(|m| answers(m) == Some(id)));
                }
                session.send_batch(messages).await;
            }
            Some(Incoming::Single(message)) => {
                let related = legacy_related(&in_flight, &message);
                session.send(message, related).await;
            }
            Some(_) => {}
        }
    }
    drop(output);
    if !stop.is_cancelled() {
        note(format_args!(
            "{what}: the child's stdout ended; ending the session"
        ));
    }
    session.close().await;
    stop.cancel();
    let live = live.fetch_sub(1, Ordering::SeqCst) - 1;
    note(format_args!("{what}: closed ({live} legacy children)"));
}

/// The version an `initialize` result settled on (`result.protocolVersion`), if the response is
/// one.
fn negotiated(response: &modelctx_types::Response) -> Option<modelctx_types::ProtocolVersion> {
    #[derive(serde::Deserialize)]
    struct Initialized {
        #[serde(rename = "protocolVersion")]
        version: String,
        #[serde(rename = "serverInfo")]
        _server_info: Value,
    }
    let result: Initialized = serde_json::from_str(response.result.get()).ok()?;
    modelctx_types::ProtocolVersion::parse(&result.version)
}

/// The client request a message of a legacy child belongs to (see the module's comment).
fn legacy_related(in_flight: &InFlight, message: &Message) -> Option<RequestId> {
    let mut in_flight = lock(in_flight);
    if let Some(id) = answers(message) {
        in_flight.retain(|(i, _)| i != id);
        return Some(id.clone());
    }
    let newest = || in_flight.last().map(|(id, _)| id.clone());
    match message {
        Message::Notification(n) if n.method == NotificationsProgress::VALUE => {
            let token = params_of(message).and_then(|p| p.get(PROGRESS_TOKEN).cloned());
            in_flight
                .iter()
                .find(|(_, t)| t.is_some() && *t == token)
                .map(|(id, _)| id.clone())
        }
        Message::Notification(n)
            if n.method.ends_with("/list_changed")
                || n.method == NotificationsResourcesUpdated::VALUE =>
        {
            None
        }
        _ => newest(),
    }
}

// -- modern -------------------------------------------------------------------------------------------

/// The shared child of modern requests.
struct Modern {
    command: ServerCommand,
    max_requests: usize,
    state: Mutex<ModernState>,
    /// Held while the shared child is started (outside `state`): one start at a time.
    spawning: Mutex<()>,
    /// Shared children started so far.
    spawns: AtomicU64,
    /// The `Mcp-Param-*` headers of the shared child's tools, by tool name, as its `tools/list`
    /// says (fetched when it starts and when its tool list changes).
    tools: Mutex<HashMap<String, Arc<[ParamHeader]>>>,
}

/// What the proxy asks the shared child for itself.
enum Internal {
    /// A page of its tools (for their `Mcp-Param-*` headers).
    ToolsList,
    /// Its tool list changes.
    Listen,
}

#[derive(Default)]
struct ModernState {
    /// The running child and its generation.
    child: Option<(u64, ChildLink)>,
    generation: u64,
    next_id: i64,
    /// Requests in flight, by the id the child knows them by.
    pending: BTreeMap<i64, Pending>,
    /// The proxy's own requests in flight on the child.
    internal: BTreeMap<i64, Internal>,
    /// The tools' headers gathered from the pages of `tools/list` so far.
    tool_pages: HashMap<String, Arc<[ParamHeader]>>,
    /// When the next child may start.
    backoff: Backoff,
    /// Log messages of the child dropped because no request could be named as theirs.
    dropped_logs: u64,
    /// Client notifications dropped because the child's queue was too full.
    dropped_notifications: u64,
}

/// A modern request in flight.
struct Pending {
    /// The client's id.
    client_id: RequestId,
    /// Its stream's forwarding task.
    tx: mpsc::Sender<Message>,
    /// The client's progress token, replaced by the child-side id.
    token: Option<Value>,
    /// A `subscriptions/listen` request.
    listen: bool,
    /// It set a log level (log messages may belong to it).
    logs: bool,
    generation: u64,
}

impl Modern {
    /// Forwards a request: a child-side id, the stream's task.
    fn request(this: &Arc<Modern>, request: Request, reply: ModernReply) {
        let client_id = request.id.clone();
        let fail = |message: String| {
            let reply = reply.clone();
            let answer = error(client_id.clone(), ErrorCode::INTERNAL_ERROR, message);
            tokio::spawn(async move {
                let _ = reply.send(answer).await;
            });
        };
        let mut params = params_of(&Message::Request(request.clone())).unwrap_or_default();
        let meta = params.get_mut("_meta").and_then(Value::as_object_mut);
        let logs = meta.as_ref().is_some_and(|m| m.contains_key(LOG_LEVEL));
        let busy = || {
            format!(
                "mcx proxy: {} requests are in flight; try again later",
                this.max_requests
            )
        };
        if lock(&this.state).pending.len() >= this.max_requests {
            return fail(busy());
        }
        let (generation, link) = match Self::child(this) {
            Ok(child) => child,
            Err(e) => return fail(e),
        };
        let mut state = lock(&this.state);
        if state.pending.len() >= this.max_requests {
            drop(state);
            return fail(busy());
        }
        if state.child.as_ref().is_none_or(|(g, _)| *g != generation) {
            // It exited since: its requests have failed already, and so does this one.
            drop(state);
            return fail("mcx proxy: the server process ended before answering".into());
        }
        state.next_id += 1;
        let id = state.next_id;
        // The client's token becomes the child-side id: tokens of different clients can't clash.
        let token = meta
            .filter(|m| m.contains_key(PROGRESS_TOKEN))
            .and_then(|m| m.insert(PROGRESS_TOKEN.into(), json!(id)));
        let forwarded = Request {
            id: RequestId::Number(id),
            method: request.method.clone(),
            params: if token.is_some() {
                raw(&params)
            } else {
                request.params
            },
        };
        if !link.send(&forwarded.into()) {
            drop(state);
            return fail("mcx proxy: the server is gone or too far behind".into());
        }
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let listen = request.method == SubscriptionsListen::VALUE;
        state.pending.insert(
            id,
            Pending {
                client_id: client_id.clone(),
                tx,
                token,
                listen,
                logs,
                generation,
            },
        );
        let count = state.pending.len();
        drop(state);
        note(format_args!(
            "modern request {client_id} ({}) is {id} on the shared child ({count} in flight)",
            request.method
        ));
        tokio::spawn(forward(this.clone(), id, rx, reply));
    }

    /// The running child.
    fn running(state: &ModernState) -> Option<(u64, ChildLink)> {
        match &state.child {
            Some((generation, link)) if !link.tx.is_closed() => Some((*generation, link.clone())),
            _ => None,
        }
    }

    /// The running child, started when there is none, unless the last ones exited early and
    /// the restart delay ([`Backoff`]) has not passed: then the error says when to try again.
    /// The process is started outside the state's lock.
    fn child(this: &Arc<Modern>) -> Result<(u64, ChildLink), String> {
        if let Some(running) = Self::running(&lock(&this.state)) {
            return Ok(running);
        }
        let _spawning = lock(&this.spawning);
        {
            let state = lock(&this.state);
            if let Some(running) = Self::running(&state) {
                return Ok(running);
            }
            if let Some(wait) = state.backoff.wait(Instant::now()) {
                let wait = millis(wait);
                return Err(match &state.backoff.error {
                    Some(e) => {
                        format!(
                            "mcx proxy: cannot start the server: {e}; trying again in {wait} ms"
                        )
                    }
                    None => format!(
                        "mcx proxy: the server process exited {} times in a row; it is started \
                         again in {wait} ms",
                        state.backoff.failures
                    ),
                });
            }
        }
        let spawns = this.spawns.fetch_add(1, Ordering::SeqCst) + 1;
        let spawned = spawn_child(&this.command, "the shared modern child".into());
        let mut state = lock(&this.state);
        let (link, output) = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                state.backoff.exited(Duration::ZERO, Instant::now());
                state.backoff.error = Some(e.to_string());
                return Err(format!("mcx proxy: cannot start the server: {e}"));
            }
        };
        state.backoff.error = None;
        state.generation += 1;
        let generation = state.generation;
        note(format_args!(
            "shared modern child {} started ({spawns} started so far)",
            link.pid
        ));
        state.child = Some((generation, link.clone()));
        tokio::spawn(modern_output(this.clone(), generation, output));
        let listen = json!({"notifications": {"toolsListChanged": true}});
        Self::ask(
            &mut state,
            SubscriptionsListen::VALUE,
            listen,
            Internal::Listen,
        );
        Self::ask(&mut state, ToolsList::VALUE, json!({}), Internal::ToolsList);
        Ok((generation, link))
    }

    /// Sends a request of the proxy's own to the running child.
    fn ask(state: &mut ModernState, method: &str, mut params: Value, kind: Internal) {
        let Some((_, link)) = &state.child else {
            return;
        };
        if let Some(params) = params.as_object_mut() {
            params.insert(
                "_meta".into(),
                json!({
                    PROTOCOL_VERSION: MODERN,
                    CLIENT_CAPABILITIES: {},
                    CLIENT_INFO: {"name": "mcx-proxy", "version": env!("CARGO_PKG_VERSION")},
                }),
            );
        }
        state.next_id += 1;
        let id = state.next_id;
        let Ok(request) = Request::new(id, method, &params) else {
            return;
        };
        if link.send(&request.into()) {
            state.internal.insert(id, kind);
        }
    }

    /// An answer to one of the proxy's own requests.
    fn internal_answer(&self, state: &mut ModernState, kind: Internal, message: &Message) {
        let (Internal::ToolsList, Message::Response(response)) = (kind, message) else {
            return;
        };
        #[derive(serde::Deserialize)]
        struct Page {
            #[serde(default)]
            tools: Vec<Value>,
            #[serde(rename = "nextCursor")]
            next_cursor: Option<String>,
        }
        let Ok(page) = serde_json::from_str::<Page>(response.result.get()) else {
            return warn(format_args!(
                "the shared child's tools/list answer is not a list"
            ));
        };
        for tool in &page.tools {
            let (Some(name), Some(schema)) = (
                tool.get("name").and_then(Value::as_str),
                tool.get("inputSchema").and_then(Value::as_object),
            ) else {
                continue;
            };
            if let Ok(headers) = param_headers(schema)
                && state.tool_pages.len() < MAX_TOOLS
            {
                state.tool_pages.insert(name.to_owned(), headers.into());
            }
        }
        match page.next_cursor {
            Some(cursor) => {
                Self::ask(
                    state,
                    ToolsList::VALUE,
                    json!({"cursor": cursor}),
                    Internal::ToolsList,
                );
            }
            None => {
                let tools = std::mem::take(&mut state.tool_pages);
                note(format_args!("the shared child has {} tools", tools.len()));
                *lock(&self.tools) = tools;
            }
        }
    }

    /// A client notification: passed on to a running child (`notifications/cancelled` over HTTP
    /// is a closed stream, not a message), while its queue holds less than
    /// [`NOTIFICATION_QUEUE_BYTES`]; dropped otherwise (it was accepted with 202 already).
    fn notification(&self, notification: Notification) {
        if notification.method == NotificationsCancelled::VALUE {
            return;
        }
        let mut state = lock(&self.state);
        let Some((_, link)) = &state.child else {
            return;
        };
        let method = notification.method.clone();
        let line = modelctx_types::encode(&notification.into());
        if !link.send_line(line, NOTIFICATION_QUEUE_BYTES) {
            state.dropped_notifications += 1;
            note(format_args!(
                "dropped a client's {method}: the server is too far behind ({} dropped)",
                state.dropped_notifications
            ));
        }
    }

    /// The client closed request `id`'s stream: the child is told, and the request forgotten.
    /// For a request waiting for its answer that is a cancellation; for a `subscriptions/listen`
    /// request it is how the client ends its subscription (every client that stops listening,
    /// a one-shot command that exits, does it), which `--verbose` says as such.
    fn cancel(&self, id: i64, reason: &str) {
        let mut state = lock(&self.state);
        let Some(pending) = state.pending.remove(&id) else {
            return;
        };
        if let Some((generation, link)) = &state.child
            && *generation == pending.generation
        {
            let params = json!({
                "requestId": id,
                "reason": reason,
                "_meta": {PROTOCOL_VERSION: MODERN},
            });
            if let Ok(cancel) = Notification::new(NotificationsCancelled::VALUE, &params) {
                link.send(&cancel.into());
            }
        }
        if pending.listen {
            note(format_args!(
                "modern listen stream {} ({id}) ended: the client closed it; told the child ({} in flight)",
                pending.client_id,
                state.pending.len()
            ));
        } else {
            note(format_args!(
                "modern request {} ({id}) cancelled: {reason}; told the child ({} in flight)",
                pending.client_id,
                state.pending.len()
            ));
        }
    }

    /// Routes one message of the shared child.
    fn child_message(&self, message: Message) {
        let mut state = lock(&self.state);
        let child_id = |id: Option<&RequestId>| match id {
            Some(RequestId::Number(n)) => Some(*n),
            _ => None,
        };
        // The proxy's own requests.
        let internal = match &message {
            Message::Response(r) => child_id(Some(&r.id)),
            Message::Error(e) => child_id(e.id.as_ref()),
            _ => None,
        };
        if let Some(kind) = internal.and_then(|id| state.internal.remove(&id)) {
            return self.internal_answer(&mut state, kind, &message);
        }
        if let Message::Notification(n) = &message
            && let Some(id) =
                params_of(&message).and_then(|p| p.get("_meta")?.get(SUBSCRIPTION_ID)?.as_i64())
            && state.internal.contains_key(&id)
        {
            if n.method == NotificationsToolsListChanged::VALUE {
                state.tool_pages.clear();
                Self::ask(&mut state, ToolsList::VALUE, json!({}), Internal::ToolsList);
            }
            return;
        }
        match message {
            Message::Request(request) => {
                // A 2026-07-28 server asks with input_required results, never requests.
                let answer = error(
                    request.id,
                    ErrorCode::METHOD_NOT_FOUND,
                    "mcx proxy: no client to ask: a 2026-07-28 request asks with input_required results",
                );
                if let Some((_, link)) = &state.child {
                    link.send(&answer);
                }
            }
            Message::Response(mut response) => {
                let Some(pending) =
                    child_id(Some(&response.id)).and_then(|id| state.pending.remove(&id))
                else {
                    return note(format_args!(
                        "dropped the child's answer to request {}, no longer waited for: {}",
                        response.id,
                        response.result.get()
                    ));
                };
                if pending.listen
                    && let Ok(Value::Object(mut result)) =
                        serde_json::from_str::<Value>(response.result.get())
                    && let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut)
                    && meta.contains_key(SUBSCRIPTION_ID)
                {
                    meta.insert(SUBSCRIPTION_ID.into(), json!(pending.client_id));
                    if let Some(rewritten) = raw(&result) {
                        response.result = rewritten;
                    }
                }
                response.id = pending.client_id.clone();
                let count = state.pending.len();
                drop(state);
                deliver(&pending.tx, response.into());
                note(format_args!(
                    "answered a modern request ({count} in flight)"
                ));
            }
            Message::Error(mut response) => {
                let Some(pending) =
                    child_id(response.id.as_ref()).and_then(|id| state.pending.remove(&id))
                else {
                    return note(format_args!(
                        "dropped the child's error for request {:?}, no longer waited for: {}",
                        response.id, response.error.message
                    ));
                };
                response.id = Some(pending.client_id.clone());
                let count = state.pending.len();
                drop(state);
                deliver(&pending.tx, response.into());
                note(format_args!(
                    "answered a modern request ({count} in flight)"
                ));
            }
            Message::Notification(mut notification) => {
                let message = Message::Notification(notification.clone());
                let Some(mut params) = params_of(&message) else {
                    return note(format_args!(
                        "dropped a {} of the child for no request",
                        notification.method
                    ));
                };
                let subscription = params
                    .get("_meta")
                    .and_then(|m| m.get(SUBSCRIPTION_ID))
                    .and_then(Value::as_i64);
                let target = if let Some(id) = subscription {
                    state.pending.get(&id).map(|p| {
                        if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
                            meta.insert(SUBSCRIPTION_ID.into(), json!(p.client_id));
                        }
                        id
                    })
                } else if notification.method == NotificationsProgress::VALUE {
                    let id = params.get(PROGRESS_TOKEN).and_then(Value::as_i64);
                    id.and_then(|id| {
                        let pending = state.pending.get(&id)?;
                        params.insert(PROGRESS_TOKEN.into(), pending.token.clone()?);
                        Some(id)
                    })
                } else if notification.method == NotificationsCancelled::VALUE {
                    // The server ends a request (a listen stream): its stream ends.
                    if let Some(id) = params.get("requestId").and_then(Value::as_i64)
                        && state.pending.remove(&id).is_some()
                    {
                        note(format_args!("the child ended request {id}"));
                    }
                    return;
                } else if notification.method == NotificationsMessage::VALUE {
                    let target = log_target(&state.pending, &mut params);
                    if target.is_none() {
                        state.dropped_logs += 1;
                        return note(format_args!(
                            "dropped a log message of the child that names no request in flight \
                             that asked for logs ({} dropped)",
                            state.dropped_logs
                        ));
                    }
                    target
                } else {
                    None
                };
                let Some(pending) = target.and_then(|id| state.pending.get(&id)) else {
                    return note(format_args!(
                        "dropped a {} of the child for no request in flight",
                        notification.method
                    ));
                };
                notification.params = raw(&params);
                deliver(&pending.tx, notification.into());
            }
            _ => {}
        }
    }

    /// The child of `generation` ended: its requests fail, and the next request starts another
    /// (after the restart delay when it ran only briefly).
    fn child_exited(&self, generation: u64) {
        let mut state = lock(&self.state);
        if state.child.as_ref().is_some_and(|(g, _)| *g == generation) {
            if let Some((_, link)) = state.child.take() {
                link.stop.cancel();
                state.backoff.exited(link.started.elapsed(), Instant::now());
                if let Some(wait) = state.backoff.wait(Instant::now()) {
                    note(format_args!(
                        "the shared modern child exited after {} ms; started again in {} ms at the earliest",
                        link.started.elapsed().as_millis(),
                        millis(wait)
                    ));
                }
            }
            state.internal.clear();
            state.tool_pages.clear();
        }
        let ended: Vec<i64> = state
            .pending
            .iter()
            .filter(|(_, p)| p.generation == generation)
            .map(|(id, _)| *id)
            .collect();
        for id in &ended {
            if let Some(pending) = state.pending.remove(id) {
                let answer = error(
                    pending.client_id,
                    ErrorCode::INTERNAL_ERROR,
                    "mcx proxy: the server process ended before answering",
                );
                deliver(&pending.tx, answer);
            }
        }
        note(format_args!(
            "the shared modern child's stdout ended; {} requests failed ({} in flight)",
            ended.len(),
            state.pending.len()
        ));
    }
}

/// The request a log message of the shared child goes to (by its child-side id), taking the
/// tag out of `params`: the request its `_meta` names (a modelctx server tags them), when that
/// request asked for logs; for an untagged one, the one request in flight that asked for logs,
/// if exactly one did. Otherwise none: a log message is never given to a client it cannot be
/// shown to be about.
fn log_target(
    pending: &BTreeMap<i64, Pending>,
    params: &mut serde_json::Map<String, Value>,
) -> Option<i64> {
    let tag = params
        .get_mut("_meta")
        .and_then(Value::as_object_mut)
        .and_then(|meta| meta.remove(RELATED_REQUEST_ID));
    if params
        .get("_meta")
        .and_then(Value::as_object)
        .is_some_and(serde_json::Map::is_empty)
    {
        params.remove("_meta");
    }
    let asked = |p: &Pending| p.logs && !p.listen;
    if let Some(tag) = tag {
        let id = tag.as_i64()?;
        return pending.get(&id).filter(|p| asked(p)).map(|_| id);
    }
    let mut asking = pending.iter().filter(|(_, p)| asked(p)).map(|(id, _)| *id);
    match (asking.next(), asking.next()) {
        (Some(id), None) => Some(id),
        _ => None,
    }
}

/// Hands a message to a stream's task; a final answer is never dropped.
fn deliver(tx: &mpsc::Sender<Message>, message: Message) {
    match tx.try_send(message) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(message)) => {
            if answers(&message).is_some() {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _ = tx.send(message).await;
                });
            } else {
                warn(format_args!(
                    "dropped a notification for a client too far behind"
                ));
            }
        }
        Err(mpsc::error::TrySendError::Closed(_)) => {}
    }
}

/// Writes a modern request's messages on its HTTP stream; a closed stream cancels it.
async fn forward(
    modern: Arc<Modern>,
    id: i64,
    mut rx: mpsc::Receiver<Message>,
    reply: ModernReply,
) {
    let cancelled = reply.cancelled().clone();
    loop {
        tokio::select! {
            biased;
            message = rx.recv() => {
                let Some(message) = message else {
                    // Forgotten without an answer (ended by the server): the stream ends.
                    return;
                };
                let last = answers(&message).is_some();
                if reply.send(message).await.is_err() {
                    return modern.cancel(id, "the HTTP stream closed");
                }
                if last {
                    return;
                }
            }
            () = cancelled.cancelled() => return modern.cancel(id, "the HTTP stream closed"),
        }
    }
}

/// Reads the shared child's output to its end.
async fn modern_output(modern: Arc<Modern>, generation: u64, mut output: ChildOutput) {
    while let Some(incoming) = output.next().await {
        for message in messages(incoming) {
            modern.child_message(message);
        }
    }
    modern.child_exited(generation);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finding_2_spawns_follow_a_token_bucket() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(SPAWN_BURST, 2.0, start);
        for _ in 0..8 {
            assert!(bucket.take(start).is_ok());
        }
        // Empty: the next token comes in half a second (2 per second).
        let wait = bucket.take(start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert!(bucket.take(start + Duration::from_millis(250)).is_err());
        assert!(bucket.take(start + Duration::from_millis(500)).is_ok());
        assert!(bucket.take(start + Duration::from_millis(500)).is_err());
        // Refilled to its size, not beyond, after a long pause.
        let later = start + Duration::from_secs(3600);
        for _ in 0..8 {
            assert!(bucket.take(later).is_ok());
        }
        assert!(bucket.take(later).is_err());
    }

    #[test]
    fn finding_24_restarts_back_off_exponentially_up_to_a_cap() {
        let delays: Vec<u128> = (0..8).map(|n| Backoff::delay(n).as_millis()).collect();
        assert_eq!(delays, [0, 0, 100, 200, 400, 800, 1600, 3200]);
        assert_eq!(Backoff::delay(12), BACKOFF_MAX);
        assert_eq!(Backoff::delay(u32::MAX), BACKOFF_MAX);
        let now = Instant::now();
        let mut backoff = Backoff::default();
        assert_eq!(backoff.wait(now), None);
        backoff.exited(Duration::from_millis(5), now);
        assert_eq!(
            backoff.wait(now),
            None,
            "a first crash is restarted at once"
        );
        backoff.exited(Duration::from_millis(5), now);
        assert_eq!(backoff.wait(now), Some(Duration::from_millis(100)));
        assert_eq!(backoff.wait(now + Duration::from_millis(100)), None);
        backoff.exited(Duration::ZERO, now);
        assert_eq!(backoff.wait(now), Some(Duration::from_millis(200)));
        // A child that ran long enough starts the count again.
        backoff.exited(BACKOFF_RESET, now);
        assert_eq!(backoff.wait(now), None);
        assert_eq!(backoff.failures, 0);
    }

    fn pending(logs: bool, listen: bool) -> Pending {
        Pending {
            client_id: RequestId::Number(7),
            tx: mpsc::channel(1).0,
            token: None,
            listen,
            logs,
            generation: 1,
        }
    }

    fn log_params(tag: Option<i64>) -> serde_json::Map<String, Value> {
        let mut params = json!({"level": "info", "data": "x"});
        if let Some(id) = tag {
            params["_meta"] = json!({RELATED_REQUEST_ID: id});
        }
        match params {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn finding_4_log_messages_go_only_to_the_request_they_are_about() {
        let mut table = BTreeMap::new();
        table.insert(1, pending(true, false));
        table.insert(2, pending(true, false));
        table.insert(3, pending(false, false));
        table.insert(4, pending(true, true));
        // Tagged: to that request, the tag taken out.
        let mut params = log_params(Some(1));
        assert_eq!(log_target(&table, &mut params), Some(1));
        assert!(!params.contains_key("_meta"), "{params:?}");
        assert_eq!(log_target(&table, &mut log_params(Some(2))), Some(2));
        // Tagged with a request that did not ask for logs, a listen stream, or none in flight.
        assert_eq!(log_target(&table, &mut log_params(Some(3))), None);
        assert_eq!(log_target(&table, &mut log_params(Some(4))), None);
        assert_eq!(log_target(&table, &mut log_params(Some(99))), None);
        // Untagged, two requests asked for logs: nobody gets it.
        assert_eq!(log_target(&table, &mut log_params(None)), None);
        // Untagged, exactly one asked: that one.
        table.remove(&2);
        assert_eq!(log_target(&table, &mut log_params(None)), Some(1));
        table.remove(&1);
        assert_eq!(log_target(&table, &mut log_params(None)), None);
    }

    /// Finding 10: a child that does not read its stdin: the queue stops at 16 MiB, counting
    /// what its writer took, and notifications stop at half of it.
    #[cfg(unix)]
    #[tokio::test]
    async fn finding_10_the_queue_to_a_child_is_bounded_in_bytes() {
        let command = ServerCommand::new("sleep")
            .arg("1000")
            .stderr(Stderr::Discard)
            .shutdown_waits(Duration::from_millis(100), Duration::from_millis(100));
        let (link, _output) = spawn_child(&command, "test".into()).expect("sleep starts");
        let line = vec![b'x'; 1024 * 1024 - 1];
        let mut accepted = 0;
        for _ in 0..40 {
            if link.send_line(line.clone(), CHILD_QUEUE_BYTES) {
                accepted += 1;
            }
            assert!(link.queued.load(Ordering::SeqCst) <= CHILD_QUEUE_BYTES);
            tokio::task::yield_now().await;
        }
        assert_eq!(accepted, 16, "16 MiB of 1 MiB lines");
        assert_eq!(link.queued.load(Ordering::SeqCst), CHILD_QUEUE_BYTES);
        // Nothing more fits: not a small request, and not a notification.
        assert!(!link.send(&Notification::new("x/y", &json!({})).unwrap().into()));
        assert!(!link.send_line(b"{}".to_vec(), NOTIFICATION_QUEUE_BYTES));
        link.stop.cancel();
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_queue_count_returns_to_zero_once_written() {
        let command = ServerCommand::new("cat")
            .stderr(Stderr::Discard)
            .shutdown_waits(Duration::from_millis(100), Duration::from_millis(100));
        let (link, mut output) = spawn_child(&command, "test".into()).expect("cat starts");
        let message: Message = Notification::new("x/y", &json!({"p": "q".repeat(100_000)}))
            .unwrap()
            .into();
        for _ in 0..20 {
            assert!(link.send(&message));
        }
        for _ in 0..20 {
            assert!(output.next().await.is_some());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while link.queued.load(Ordering::SeqCst) != 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(link.queued.load(Ordering::SeqCst), 0);
        link.stop.cancel();
    }
}
