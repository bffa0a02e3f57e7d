//! The task that owns one connection: the session, the transport, the requests in flight, the
//! listen stream of the modern era, the answers to a legacy server's requests, and restarts.
//!
//! Callers talk to it through a bounded command queue; a dropped call sends its token on an
//! unbounded queue whose length is bounded by the calls in flight (one token each).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use modelctx_session::{
    ClientConfig as SessionConfig, ClientSession, CloseReason, EraChoice, EraDecision, Event,
    PeerInfo, ProtocolVersion, RequestError, RequestOptions, SessionError, Transmit,
};
use modelctx_types::consts::{
    Initialize, LoggingSetLevel, NotificationsSubscriptionsAcknowledged, PromptsList,
    ResourcesList, ResourcesRead, ResourcesTemplatesList, ServerDiscover, SubscriptionsListen,
    ToolsList,
};
use modelctx_types::{
    ErrorCode, ErrorObject, JsonObject, Message, Notification, RequestId, meta_keys,
};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::cache::{ResultCache, Scope};
use crate::error::{ConnectError, Error, TransportError};
use crate::input::Handlers;
use crate::link::{Hints, Link, LinkEvent};
use crate::notify::{NotificationFn, Progress, ProgressFn, ServerNotification, Unreadable};

/// How many calls may wait while a connection is re-established.
const MAX_WAITING: usize = 1024;
/// The first wait before a listen stream that ended is opened again; doubled up to a minute.
const LISTEN_RETRY: Duration = Duration::from_millis(500);
const LISTEN_RETRY_MAX: Duration = Duration::from_secs(60);

/// Now, read from tokio's clock and handed over as the `std::time::Instant` the session takes:
/// every deadline of the driver and the session (timeouts, the listen stream's retry,
/// re-connection) and the result cache's expiry (`ttlMs`) follows the runtime's clock, which a
/// test can pause and advance.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// When a connection that ended is re-established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reconnect {
    /// Re-establish at most this many times in a row (a connection that stayed up for
    /// `stable_after` resets the count). 0 never does.
    pub max_attempts: u32,
    /// The wait before the first attempt, doubled with each further one.
    pub delay: Duration,
    /// How long a connection must have lasted for the count to start over.
    pub stable_after: Duration,
}

impl Reconnect {
    /// Never re-establish.
    pub const NEVER: Reconnect = Reconnect {
        max_attempts: 0,
        delay: Duration::from_millis(100),
        stable_after: Duration::from_secs(60),
    };

    /// Re-establish up to `max_attempts` times in a row, first after 100 ms.
    pub fn up_to(max_attempts: u32) -> Self {
        Reconnect {
            max_attempts,
            ..Reconnect::NEVER
        }
    }
}

/// A call on its way to the driver.
pub(crate) struct Call {
    pub(crate) token: u64,
    pub(crate) method: String,
    pub(crate) params: JsonObject,
    pub(crate) options: RequestOptions,
    pub(crate) progress: Option<ProgressFn>,
    /// How the transport may carry it (modern HTTP: sent again when its response stream
    /// breaks, `Mcp-Param-*` headers).
    pub(crate) hints: Hints,
    pub(crate) reply: oneshot::Sender<Result<Answer, Error>>,
}

/// A handler's answer to the server's request: its id, its generation (the session's
/// `IncomingRequest::generation`) and the result or error to send.
type ServerAnswer = (RequestId, u64, Result<Value, ErrorObject>);

/// A result, with the version it is written in.
pub(crate) struct Answer {
    pub(crate) version: ProtocolVersion,
    pub(crate) result: Box<RawValue>,
}

pub(crate) enum Command {
    Call(Call),
    /// Subscribe (or unsubscribe) a resource on the listen stream (modern).
    Subscribe {
        uri: String,
        on: bool,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    /// Open the listen stream for list changes (modern), if not open; answer once it is
    /// acknowledged.
    Listen(Option<oneshot::Sender<Result<(), Error>>>),
    /// Ask (or stop asking) for the status of a task on the listen stream (modern, the tasks
    /// extension's `taskIds`), while a handle waits on it.
    WatchTask {
        task_id: String,
        on: bool,
    },
    RootsChanged(oneshot::Sender<Result<(), Error>>),
    Sizes(oneshot::Sender<TableSizes>),
    Close(oneshot::Sender<()>),
}

/// The size of every table of a connection, to see that each returns to its starting size
/// when the work ends (see [`Client::table_sizes`](crate::Client::table_sizes)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableSizes {
    /// Calls waiting for their answer.
    pub calls: usize,
    /// Calls waiting for the connection to be re-established.
    pub waiting: usize,
    /// Answers to a legacy server's requests being prepared.
    pub inputs: usize,
    /// Calls whose timeouts are paused while a handler answers a request of the server's.
    pub paused_calls: usize,
    /// Subscription changes waiting for the server's acknowledgement.
    pub subscription_waiters: usize,
    /// Open (or retiring) listen streams.
    pub listen_streams: usize,
    /// Tasks the client keeps for the server (2025-11-25 task-augmented sampling and
    /// elicitation), running or finished and not expired.
    pub tasks: usize,
    /// The session's own tables.
    pub session: modelctx_session::TableSizes,
}

/// What the client handles share with the driver.
pub(crate) struct Shared {
    pub(crate) peer: Mutex<Option<PeerInfo>>,
    pub(crate) closed: Mutex<Option<CloseReason>>,
    /// How the server process stopped, once the connection to it ended.
    #[cfg(feature = "stdio")]
    pub(crate) server_exit: Mutex<Option<crate::stdio::ServerExit>>,
    pub(crate) notifications: Mutex<Option<broadcast::Sender<ServerNotification>>>,
    pub(crate) callbacks: Vec<NotificationFn>,
    pub(crate) cache: Option<(ResultCache, Scope)>,
    /// Output schemas, idempotence and `x-mcp-header` parameters of the tools listed.
    pub(crate) tool_schemas: Mutex<crate::output::ListedTools>,
    /// Connected over Streamable HTTP, where modern tools carry `Mcp-Param-*` headers.
    #[cfg(feature = "http")]
    pub(crate) over_http: bool,
    pub(crate) handlers: Handlers,
    /// The client capabilities it declares (the session's configuration).
    pub(crate) capabilities: JsonObject,
    /// How long a write to a stdio or in-memory server may wait (for a restarted server).
    #[cfg_attr(not(feature = "stdio"), allow(dead_code))]
    pub(crate) write_timeout: Duration,
    /// The log level asked for: sent again to a legacy server after a reconnect.
    pub(crate) log_level: Mutex<Option<modelctx_session::LogLevel>>,
    /// Compiled output schemas.
    #[cfg(feature = "validation")]
    pub(crate) schemas: modelctx_types::schema::SchemaCache,
    /// Shown every message sent and received ([`ClientBuilder::on_wire`](crate::ClientBuilder::on_wire)).
    pub(crate) wire: Option<crate::link::WireFn>,
    /// The tasks the client runs for a 2025-11-25 server
    /// ([`ClientBuilder::receive_tasks`](crate::ClientBuilder::receive_tasks)).
    pub(crate) tasks: Option<Arc<crate::tasks::Receiver>>,
    /// The task handles the server's status notifications reach.
    pub(crate) task_watchers: crate::tasks::Watchers,
    /// The operation metrics' instruments (`crate::observe`).
    #[cfg(feature = "otel")]
    pub(crate) metrics: crate::observe::Metrics,
}

impl Shared {
    pub(crate) fn peer(&self) -> Option<PeerInfo> {
        self.peer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn closed_reason(&self) -> CloseReason {
        self.closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| CloseReason::Transport("the connection is closed".into()))
    }
}

/// How a transport is made again, for restarts.
pub(crate) enum Remake {
    Never,
    /// Over the same transport (a new legacy HTTP session).
    #[cfg(feature = "http")]
    SameLink,
    #[cfg(feature = "stdio")]
    Spawn(Box<modelctx_stdio::ServerCommand>),
}

/// The list changes and resources a listen stream asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Filter {
    lists: bool,
    uris: BTreeSet<String>,
    task_ids: BTreeSet<String>,
}

/// A subscription change (URI, on) and who waits for it.
type Waiter = (Option<String>, bool, oneshot::Sender<Result<(), Error>>);

#[derive(Default)]
struct Listen {
    /// Somebody listens for list changes.
    lists: bool,
    uris: BTreeSet<String>,
    /// The tasks waited on, by how many wait on each (the extension's `taskIds`).
    task_ids: HashMap<String, usize>,
    /// The open stream and what it asked for.
    open: Option<(RequestId, Filter)>,
    acked: bool,
    /// Streams replaced by `open`, cancelled once it is acknowledged.
    retiring: Vec<RequestId>,
    /// Subscription changes waiting for the acknowledgement of the stream that carries them.
    waiters: Vec<Waiter>,
    retry_at: Option<Instant>,
    retry_delay: Duration,
    /// The stream ended before and was opened again: tell the application on acknowledgement.
    reopened: bool,
    /// The server refused to listen: do not ask again on this connection.
    refused: bool,
    /// The ids a listen stream the HTTP transport opened again goes by (its `subscriptionId`
    /// now), to the id of the listen request: one per stream.
    aliases: HashMap<RequestId, RequestId>,
}

impl Listen {
    /// Drops the waiters whose caller stopped waiting (timed out, or dropped the call), so that
    /// a server that never acknowledges does not grow the table.
    fn forget_gone_waiters(&mut self) {
        self.waiters.retain(|(_, _, waiter)| !waiter.is_closed());
    }
}

struct Pending {
    token: u64,
    reply: oneshot::Sender<Result<Answer, Error>>,
    progress: Option<ProgressFn>,
    hints: Hints,
}

pub(crate) struct Driver {
    session: ClientSession,
    config: SessionConfig,
    link: Option<Link>,
    remake: Remake,
    reconnect: Reconnect,
    attempts: u32,
    /// When the protocol was last settled; taken when that connection ends.
    connected_at: Option<Instant>,
    reconnect_at: Option<Instant>,
    shared: Arc<Shared>,
    commands: mpsc::Receiver<Command>,
    dropped: mpsc::UnboundedReceiver<u64>,
    pending: HashMap<RequestId, Pending>,
    /// What the transport said when it lost a call, until the session fails the call.
    lost: HashMap<RequestId, TransportError>,
    tokens: HashMap<u64, RequestId>,
    waiting: VecDeque<Call>,
    /// Handlers' answers, each naming its request by id and generation (finding 12).
    answers_tx: mpsc::UnboundedSender<ServerAnswer>,
    answers: mpsc::UnboundedReceiver<ServerAnswer>,
    /// The server's requests being answered: the generation of each (which start of a request
    /// with that id it is), its handler's task and the calls whose timeouts it holds.
    inputs: HashMap<RequestId, Input>,
    /// The calls whose timeouts are paused, each with the number of handlers holding it.
    paused: HashMap<RequestId, usize>,
    /// The calls the server's requests in the next message belong to, when the transport knows
    /// (a legacy HTTP request's response stream carried them); by the server's request id.
    asked_next: HashMap<RequestId, Vec<RequestId>>,
    /// The same, for the message being handled: taken by its requests, cleared once the
    /// session's events for it are handled.
    asked_now: HashMap<RequestId, Vec<RequestId>>,
    listen: Listen,
    ready: Option<oneshot::Sender<Result<PeerInfo, ConnectError>>>,
    /// The first connection's handshake, while `ready` waits for it.
    handshake: Handshake,
    /// Why the session last closed.
    last_close: Option<CloseReason>,
    closing: Option<Vec<oneshot::Sender<()>>>,
    done: bool,
}

/// A request of the server's being answered by a handler.
struct Input {
    /// Which start of a request with that id it is (the session's `IncomingRequest::generation`).
    generation: u64,
    task: AbortHandle,
    /// The calls whose timeouts are paused while the handler runs.
    holds: Vec<RequestId>,
}

/// The first handshake, as far as the driver sees it: what `connect_*` reports when it fails.
struct Handshake {
    /// How long connecting may take in all, and when that ends (from the driver's start).
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    /// The last request of the handshake sent (the probe or `initialize`), and its method.
    request: Option<(RequestId, &'static str)>,
    /// Why the transport failed that request without an MCP answer, when it did.
    lost: Option<TransportError>,
}

impl Handshake {
    /// A request the session sends: the handshake's, when it is the probe or `initialize`.
    fn sent(&mut self, message: &Message) {
        let Message::Request(request) = message else {
            return;
        };
        let step = match request.method.as_str() {
            ServerDiscover::VALUE => ServerDiscover::VALUE,
            Initialize::VALUE => Initialize::VALUE,
            _ => return,
        };
        self.request = Some((request.id.clone(), step));
        self.lost = None;
    }

    /// Why connecting failed, the session having closed for `reason`: a timeout, the
    /// transport's own error when it failed the handshake's last request (nothing answered),
    /// else why the session closed.
    fn failure(&mut self, reason: CloseReason) -> ConnectError {
        match reason {
            CloseReason::InitializeTimeout(waited) => ConnectError::Timeout {
                waited,
                step: Initialize::VALUE,
            },
            CloseReason::Transport(_) | CloseReason::ProbeFailed(_) if self.lost.is_some() => {
                ConnectError::Unreachable(self.lost.take().expect("checked"))
            }
            CloseReason::Transport(why) => ConnectError::Transport(why),
            // The authorizer's own failure, with its kind and cause.
            #[cfg(feature = "http")]
            CloseReason::Unauthorized(why) => match self.lost.take() {
                Some(TransportError::Http(modelctx_http::client::TransportError::Auth(
                    failure,
                ))) => ConnectError::Auth(failure),
                _ => ConnectError::Handshake(CloseReason::Unauthorized(why)),
            },
            other => ConnectError::Handshake(other),
        }
    }

    /// Why connecting failed at the deadline.
    fn timed_out(&self) -> ConnectError {
        ConnectError::Timeout {
            waited: self.timeout.unwrap_or_default(),
            step: self
                .request
                .as_ref()
                .map_or(ServerDiscover::VALUE, |(_, step)| step),
        }
    }
}

/// The ends of a driver's queues that the client handles keep.
pub(crate) struct Handles {
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) dropped: mpsc::UnboundedSender<u64>,
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        config: SessionConfig,
        link: Link,
        remake: Remake,
        reconnect: Reconnect,
        shared: Arc<Shared>,
        ready: oneshot::Sender<Result<PeerInfo, ConnectError>>,
        connect_timeout: Option<Duration>,
    ) -> (Driver, Handles) {
        let (commands_tx, commands) = mpsc::channel(crate::link::QUEUE);
        let (dropped_tx, dropped) = mpsc::unbounded_channel();
        let (answers_tx, answers) = mpsc::unbounded_channel();
        let driver = Driver {
            session: ClientSession::new(config.clone()),
            config,
            link: Some(link),
            remake,
            reconnect,
            attempts: 0,
            connected_at: None,
            reconnect_at: None,
            shared,
            commands,
            dropped,
            pending: HashMap::new(),
            lost: HashMap::new(),
            tokens: HashMap::new(),
            waiting: VecDeque::new(),
            answers_tx,
            answers,
            inputs: HashMap::new(),
            paused: HashMap::new(),
            asked_next: HashMap::new(),
            asked_now: HashMap::new(),
            listen: Listen {
                retry_delay: LISTEN_RETRY,
                ..Listen::default()
            },
            ready: Some(ready),
            handshake: Handshake {
                timeout: connect_timeout,
                deadline: None,
                request: None,
                lost: None,
            },
            last_close: None,
            closing: None,
            done: false,
        };
        let handles = Handles {
            commands: commands_tx,
            dropped: dropped_tx,
        };
        (driver, handles)
    }

    /// Runs the connection until it is closed (by a handle, by every handle being dropped, or for
    /// good by the transport).
    pub(crate) async fn run(mut self) {
        self.handshake.deadline = self
            .handshake
            .timeout
            .and_then(|timeout| now().checked_add(timeout));
        if let Err(e) = self.session.connect(now()) {
            self.finish(CloseReason::Transport(format!("connect failed: {e}")))
                .await;
            return;
        }
        while !self.done {
            self.pump().await;
            if self.done {
                break;
            }
            let deadline = [
                self.session.poll_timeout(),
                self.listen.retry_at,
                self.reconnect_at,
                self.handshake.deadline.filter(|_| self.ready.is_some()),
            ]
            .into_iter()
            .flatten()
            .min();
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let accepting = self.closing.is_none();
            tokio::select! {
                command = self.commands.recv(), if accepting => match command {
                    Some(command) => self.command(command),
                    None => self.start_closing(None),
                },
                Some(token) = self.dropped.recv() => self.drop_call(token),
                Some((id, generation, answer)) = self.answers.recv() => {
                    self.answer_server(id, generation, answer);
                }
                event = recv(&mut self.link) => self.link_event(event).await,
                () = sleep => self.timers(),
            }
        }
    }

    // -- commands -------------------------------------------------------------------------------

    fn command(&mut self, command: Command) {
        match command {
            Command::Call(call) => {
                if self.session.peer().is_some() && self.reconnect_at.is_none() {
                    self.start_call(call);
                } else if self.waiting.len() >= MAX_WAITING {
                    let _ = call.reply.send(Err(Error::TooManyInFlight(MAX_WAITING)));
                } else {
                    self.waiting.push_back(call);
                }
            }
            Command::Subscribe { uri, on, reply } => self.subscribe(uri, on, reply),
            Command::Listen(reply) => {
                self.listen.lists = true;
                if let Some(reply) = reply {
                    self.listen.forget_gone_waiters();
                    self.listen.waiters.push((None, true, reply));
                }
                self.sync_listen();
            }
            Command::WatchTask { task_id, on } => {
                let count = self.listen.task_ids.entry(task_id.clone()).or_default();
                if on {
                    *count += 1;
                } else {
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        self.listen.task_ids.remove(&task_id);
                    }
                }
                self.sync_listen();
            }
            Command::RootsChanged(reply) => {
                let result = match self.session.version() {
                    Some(v) if v.era() == modelctx_session::Era::Modern => Ok(()),
                    _ => self
                        .session
                        .notify_roots_changed()
                        .map_err(|e| Error::from_session(e, || self.close_reason())),
                };
                let _ = reply.send(result);
            }
            Command::Sizes(reply) => {
                let _ = reply.send(TableSizes {
                    calls: self.pending.len().max(self.tokens.len()),
                    waiting: self.waiting.len(),
                    inputs: self.inputs.len(),
                    paused_calls: self.paused.len(),
                    subscription_waiters: self.listen.waiters.len(),
                    listen_streams: usize::from(self.listen.open.is_some())
                        + self.listen.retiring.len(),
                    tasks: self.shared.tasks.as_ref().map_or(0, |t| t.len()),
                    session: self.session.table_sizes(),
                });
            }
            Command::Close(done) => self.start_closing(Some(done)),
        }
    }

    fn start_call(&mut self, call: Call) {
        let Call {
            token,
            method,
            params,
            options,
            progress,
            hints,
            reply,
        } = call;
        if reply.is_closed() {
            return; // dropped while waiting
        }
        match self
            .session
            .send_request_with(now(), &method, Some(params), options)
        {
            Ok(id) => {
                self.tokens.insert(token, id.clone());
                self.pending.insert(
                    id,
                    Pending {
                        token,
                        reply,
                        progress,
                        hints,
                    },
                );
            }
            Err(e) => {
                let _ = reply.send(Err(Error::from_session(e, || self.close_reason())));
            }
        }
    }

    fn drop_call(&mut self, token: u64) {
        if let Some(id) = self.tokens.remove(&token) {
            self.pending.remove(&id);
            self.paused.remove(&id);
            let _ = self.session.cancel(
                now(),
                &id,
                Some("the caller no longer waits for the result"),
            );
        } else {
            self.waiting.retain(|c| c.token != token);
        }
    }

    fn start_closing(&mut self, done: Option<oneshot::Sender<()>>) {
        let waiters = self.closing.get_or_insert_with(Vec::new);
        waiters.extend(done);
        self.reconnect_at = None;
        self.session.close();
    }

    // -- what the transport brings ----------------------------------------------------------------

    async fn link_event(&mut self, event: LinkEvent) {
        let now = now();
        match event {
            LinkEvent::Message(incoming) => {
                if let Some(tap) = &self.shared.wire
                    && let Some(text) = crate::link::received_text(&incoming)
                {
                    tap(crate::link::Direction::Received, &text);
                }
                self.asked_now = std::mem::take(&mut self.asked_next);
                self.session.handle_incoming(now, incoming);
            }
            LinkEvent::Unreadable(unreadable) => {
                tracing::warn!(why = %unreadable.reason, "the server sent something unreadable");
                self.notify(ServerNotification::Unreadable(unreadable));
            }
            LinkEvent::RequestFailed { id, error } => self.request_failed(now, id, error),
            LinkEvent::SessionEnded => {
                self.session
                    .transport_closed("the server ended the HTTP session");
            }
            LinkEvent::ListenReopened { id, wire } => {
                // The server names the new stream's id in its acknowledgement and notifications.
                if self.is_listen(&id) {
                    let mut aliases = std::mem::take(&mut self.listen.aliases);
                    aliases.retain(|_, v| *v != id && self.is_listen(v));
                    aliases.insert(wire, id);
                    self.listen.aliases = aliases;
                }
                self.notify(ServerNotification::Resynced)
            }
            LinkEvent::AskedDuring { request, during } => {
                self.asked_next.insert(request, during);
            }
            LinkEvent::Note(note) => tracing::debug!(%note, "transport"),
            LinkEvent::AnswerLost(what) => {
                tracing::warn!(%what, "an answer to the server's request was not delivered");
            }
            LinkEvent::Closed(why) => {
                let why = self.describe_close(why).await;
                self.session.transport_closed(why);
            }
        }
        if !self.listen.waiters.is_empty() && !self.modern() {
            // The legacy standalone stream may have opened (or turned out to be absent).
            self.answer_waiters_if_idle();
        }
    }

    async fn describe_close(&mut self, why: String) -> String {
        #[cfg(feature = "stdio")]
        if let Some(link) = &mut self.link
            && let Some(exit) = link.describe_exit().await
        {
            return exit;
        }
        why
    }

    /// A handler answered the start `generation` of the server's request `id`. A cancelled
    /// handler can finish after the server reused its id for a new request: its answer is for
    /// a request that is gone, so it is dropped and the new request's entry is kept (finding 12).
    fn answer_server(
        &mut self,
        id: RequestId,
        generation: u64,
        answer: Result<Value, ErrorObject>,
    ) {
        if self
            .inputs
            .get(&id)
            .is_some_and(|i| i.generation == generation)
            && let Some(input) = self.inputs.remove(&id)
        {
            self.release(input.holds);
        }
        let sent = match answer.and_then(|value| {
            serde_json::value::to_raw_value(&value)
                .map_err(|e| ErrorObject::new(ErrorCode::INTERNAL_ERROR, e.to_string()))
        }) {
            Ok(result) => self.session.respond_to(&id, generation, result),
            Err(error) => self.session.respond_error_to(&id, generation, error),
        };
        // Not in flight any more (cancelled, or the session closed): nothing to answer.
        if let Err(error) = sent {
            tracing::debug!(%error, "an answer to the server's request was dropped");
        }
    }

    /// Pauses the timeouts of the calls a request of the server's belongs to, while a handler
    /// answers it: the time the application (a user filling in a form) takes does not count
    /// against them. `during`: the calls the transport says it belongs to (a legacy HTTP
    /// request's response stream carried it); without (stdio, the standalone GET stream, the
    /// 2024-11-05 transport), which call raised it is not known, so every call in flight is
    /// held. Calls started later are not. Returns the calls held, for
    /// [`release`](Self::release).
    fn hold_calls(&mut self, during: Option<Vec<RequestId>>) -> Vec<RequestId> {
        let now = now();
        let mut held = Vec::new();
        let calls: Vec<RequestId> = match during {
            Some(during) => during
                .into_iter()
                .filter(|id| self.pending.contains_key(id))
                .collect(),
            None => self.pending.keys().cloned().collect(),
        };
        for id in &calls {
            let count = self.paused.entry(id.clone()).or_insert(0);
            if *count == 0 && !self.session.pause_timeout(now, id) {
                // No timeout to pause (none set, or not in flight any more).
                self.paused.remove(id);
                continue;
            }
            *count += 1;
            held.push(id.clone());
        }
        held
    }

    /// A handler that held `calls` is done: the timeouts no other handler holds run again.
    fn release(&mut self, calls: Vec<RequestId>) {
        let now = now();
        for id in calls {
            let Some(count) = self.paused.get_mut(&id) else {
                continue; // finished meanwhile
            };
            *count -= 1;
            if *count == 0 {
                self.paused.remove(&id);
                self.session.resume_timeout(now, &id);
            }
        }
    }

    fn timers(&mut self) {
        let now = now();
        if self.ready.is_some() && self.handshake.deadline.is_some_and(|at| at <= now) {
            // Connecting took too long: the caller is told, and the connection ends.
            if let Some(ready) = self.ready.take() {
                let _ = ready.send(Err(self.handshake.timed_out()));
            }
            self.start_closing(None);
            return;
        }
        self.session.handle_timeout(now);
        if self.listen.retry_at.is_some_and(|at| at <= now) {
            self.listen.retry_at = None;
            self.sync_listen();
        }
        if self.reconnect_at.is_some_and(|at| at <= now) {
            self.reconnect_at = None;
            self.reconnect_now();
        }
    }

    // -- the session's output -------------------------------------------------------------------

    /// Writes what the session transmits and acts on its events until both are drained.
    async fn pump(&mut self) {
        loop {
            let mut busy = false;
            // The transport learns the negotiated version from the session, before the first
            // message sent under it (`notifications/initialized`), never from the wire; a new
            // session has none yet. A closed session's stays, for the `DELETE` that ends it.
            if let Some(link) = &self.link
                && !self.session.is_closed()
            {
                link.set_version(self.session.version());
            }
            while let Some(transmit) = self.session.poll_transmit() {
                busy = true;
                // A call may be sent again by the transport only when its caller allows it.
                let hints = match &transmit {
                    Transmit::Message {
                        message: Message::Request(r),
                        ..
                    } => self
                        .pending
                        .get(&r.id)
                        .map(|p| p.hints.clone())
                        .unwrap_or_default(),
                    _ => Hints::default(),
                };
                if self.ready.is_some()
                    && let Transmit::Message { message, .. } = &transmit
                {
                    self.handshake.sent(message);
                }
                let Some(link) = &mut self.link else { continue };
                if let Err((id, error)) =
                    link.send(transmit, hints, self.shared.wire.as_ref()).await
                {
                    match id {
                        Some(id) => self.request_failed(now(), id, error),
                        None => tracing::debug!(%error, "a message could not be sent"),
                    }
                }
            }
            while let Some(event) = self.session.poll_event() {
                busy = true;
                self.event(event);
            }
            if !busy {
                break;
            }
        }
        // What the last message's requests belonged to is of no use any more (a request the
        // session refused took nothing).
        self.asked_now.clear();
        if self.session.is_closed() && self.reconnect_at.is_none() && !self.done {
            self.closed().await;
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Ready(peer) => self.on_ready(peer),
            Event::Response { id, result, .. } => {
                if self.is_listen(&id) {
                    return self.listen_ended(&id, None);
                }
                self.lost.remove(&id);
                self.paused.remove(&id);
                if let Some(p) = self.pending.remove(&id) {
                    self.tokens.remove(&p.token);
                    let version = self
                        .session
                        .version()
                        .unwrap_or(ProtocolVersion::V2025_11_25);
                    let _ = p.reply.send(Ok(Answer { version, result }));
                }
            }
            Event::Failed { id, error, .. } => {
                if self.is_listen(&id) {
                    return self.listen_ended(&id, Some(error));
                }
                let lost = self.lost.remove(&id);
                self.paused.remove(&id);
                if let Some(p) = self.pending.remove(&id) {
                    self.tokens.remove(&p.token);
                    let _ = p.reply.send(Err(Error::from_request(error, lost)));
                }
            }
            Event::Progress {
                id,
                progress,
                total,
                message,
            } => {
                if let Some(callback) = self.pending.get(&id).and_then(|p| p.progress.clone()) {
                    callback(Progress {
                        progress,
                        total,
                        message,
                    });
                }
            }
            Event::Request(request) => {
                let handlers = self.shared.handlers.clone();
                let answers = self.answers_tx.clone();
                let id = request.id.clone();
                let generation = request.generation;
                // Requests about the client's tasks are answered from its table, and a
                // task-augmented one at once: no call waits on the user for them.
                let about_tasks = self
                    .shared
                    .tasks
                    .as_ref()
                    .and_then(|tasks| tasks.intercept(&handlers, &request));
                let holds_calls = about_tasks.is_none();
                // Answered in a span of its own, under the server's trace context.
                let span = crate::observe::answer_span(&request);
                let task = tokio::spawn(tracing::Instrument::instrument(
                    async move {
                        let answer = match about_tasks {
                            Some(answer) => answer.await,
                            None => {
                                handlers
                                    .answer_request(
                                        request.version,
                                        &request.method,
                                        request.params.as_deref(),
                                    )
                                    .await
                            }
                        };
                        let _ = answers.send((request.id, generation, answer));
                    },
                    span,
                ));
                let during = self.asked_now.remove(&id);
                let holds = if holds_calls {
                    self.hold_calls(during)
                } else {
                    Vec::new()
                };
                let input = Input {
                    generation,
                    task: task.abort_handle(),
                    holds,
                };
                if let Some(old) = self.inputs.insert(id, input) {
                    self.release(old.holds);
                }
            }
            Event::Cancelled { id, .. } => {
                if let Some(input) = self.inputs.remove(&id) {
                    input.task.abort();
                    self.release(input.holds);
                }
            }
            Event::Notification(notification) => self.on_notification(notification),
            Event::PeerError(error) => {
                tracing::warn!(%error, "the server reported an error about a message of ours");
            }
            Event::Unreadable(error) => {
                tracing::warn!(%error, "the server sent something unreadable");
                self.notify(ServerNotification::Unreadable(Unreadable::unseen(
                    error.to_string(),
                )));
            }
            Event::Closed(reason) => {
                tracing::debug!(%reason, "session closed");
                self.last_close = Some(reason);
            }
            _ => {}
        }
    }

    fn on_ready(&mut self, peer: PeerInfo) {
        *self
            .shared
            .peer
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(peer.clone());
        self.connected_at = Some(now());
        let again = self.ready.is_none();
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(Ok(peer));
        }
        if again {
            self.restore_log_level();
            self.notify(ServerNotification::Resynced);
        }
        while let Some(call) = self.waiting.pop_front() {
            self.start_call(call);
        }
        self.sync_listen();
    }

    /// A new legacy session starts at the server's default level: ask for the one set before.
    /// Its answer concerns nobody (no call waits for it) and is dropped.
    fn restore_log_level(&mut self) {
        let level = *self
            .shared
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(level) = level
            && !self.modern()
        {
            let mut params = JsonObject::new();
            params.insert("level".into(), Value::from(level.as_str()));
            if let Err(e) = self
                .session
                .send_request(now(), LoggingSetLevel::VALUE, Some(params))
            {
                tracing::debug!(error = %e, "the log level was not restored");
            }
        }
    }

    /// The session closed: re-establish the connection, or end.
    async fn closed(&mut self) {
        for (_, input) in self.inputs.drain() {
            input.task.abort();
        }
        self.paused.clear();
        self.asked_next.clear();
        self.asked_now.clear();
        self.pending.clear();
        self.lost.clear();
        self.tokens.clear();
        let listen = std::mem::take(&mut self.listen);
        self.listen = Listen {
            lists: listen.lists,
            uris: listen.uris,
            task_ids: listen.task_ids,
            retry_delay: LISTEN_RETRY,
            ..Listen::default()
        };
        let reason = self.close_reason();
        for (_, _, waiter) in listen.waiters {
            let _ = waiter.send(Err(Error::Closed(reason.clone())));
        }
        // A connection that stayed up long enough starts the count of attempts over; one whose
        // handshake never completed does not.
        if let Some(at) = self.connected_at.take()
            && now().saturating_duration_since(at) >= self.reconnect.stable_after
        {
            self.attempts = 0;
        }
        let local = self.closing.is_some();
        if !local && self.ready.is_none() && self.schedule_reconnect() {
            tracing::info!(%reason, attempt = self.attempts, "re-establishing the connection");
            *self
                .shared
                .peer
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = None;
            return;
        }
        if let Some(ready) = self.ready.take() {
            let error = match self.last_close.take() {
                Some(reason) => self.handshake.failure(reason),
                None => ConnectError::Transport("the connection ended".into()),
            };
            let _ = ready.send(Err(error));
        }
        self.finish(reason).await;
    }

    fn may_reconnect(&self) -> bool {
        let remakeable = !matches!(self.remake, Remake::Never);
        let transport_ended = matches!(self.last_close, Some(CloseReason::Transport(_)));
        remakeable && transport_ended && self.attempts < self.reconnect.max_attempts
    }

    /// Plans the next attempt (the delay doubling with each), if the policy allows one.
    fn schedule_reconnect(&mut self) -> bool {
        if !self.may_reconnect() {
            return false;
        }
        let delay = self
            .reconnect
            .delay
            .saturating_mul(1 << self.attempts.min(10));
        self.attempts += 1;
        self.reconnect_at = Some(now() + delay);
        true
    }

    fn reconnect_now(&mut self) {
        #[cfg(feature = "stdio")]
        if let Remake::Spawn(command) = &self.remake {
            match Link::spawn(command, self.shared.write_timeout) {
                Ok(link) => {
                    if let Some(old) = self.link.replace(link) {
                        tokio::spawn(old.shut_down());
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "restarting the server failed");
                    self.last_close = Some(CloseReason::Transport(format!(
                        "restarting the server failed: {e}"
                    )));
                    // Counted as an attempt: the next one waits longer, or the client ends.
                    return self.retry_or_end();
                }
            }
        }
        let mut config = self.config.clone();
        config.era = match self.session.era_decision() {
            Some(EraDecision::Legacy) => EraChoice::Legacy,
            Some(EraDecision::Modern(_)) => EraChoice::Modern,
            _ => config.era,
        };
        self.session = ClientSession::new(config);
        self.last_close = None;
        if let Err(e) = self.session.connect(now()) {
            tracing::warn!(error = %e, "reconnecting failed");
        }
    }

    #[cfg(feature = "stdio")]
    fn retry_or_end(&mut self) {
        if !self.schedule_reconnect() {
            // Let `pump` see a closed session with no reconnect planned.
            self.reconnect_at = None;
        }
    }

    /// Why the session closed (the connection ended, when it did not say).
    fn close_reason(&self) -> CloseReason {
        self.last_close
            .clone()
            .unwrap_or_else(|| CloseReason::Transport("the connection ended".into()))
    }

    /// The transport lost request `id`: the session fails it, and its caller gets `error`.
    fn request_failed(&mut self, now: Instant, id: RequestId, error: TransportError) {
        if self.ready.is_some()
            && matches!(&self.handshake.request, Some((request, _)) if *request == id)
        {
            self.handshake.lost = Some(error.clone());
        }
        if self.pending.contains_key(&id) {
            self.lost.insert(id.clone(), error.clone());
        }
        // The authorizer gave up: the probe or `initialize` closes the session (no fallback
        // from the probe to `initialize`, which would ask for authorization again), and any
        // other request fails alone.
        #[cfg(feature = "http")]
        if let TransportError::Http(modelctx_http::client::TransportError::Auth(failure)) = &error {
            self.session.request_unauthorized(&id, failure.to_string());
            return;
        }
        // Kept until the session's `Failed` event for it (or the session's end).
        self.session.request_failed(now, &id, error.to_string());
    }

    /// The connection is over: fail what waits, tell the handles, stop the transport.
    async fn finish(&mut self, reason: CloseReason) {
        self.done = true;
        *self
            .shared
            .closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(reason.clone());
        *self
            .shared
            .peer
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        for call in self.waiting.drain(..) {
            let _ = call.reply.send(Err(Error::Closed(reason.clone())));
        }
        // Dropping the only sender ends every notification stream.
        self.shared
            .notifications
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(Err(self.handshake.failure(reason.clone())));
        }
        if let Some(link) = self.link.take() {
            let exit = link.shut_down().await;
            #[cfg(feature = "stdio")]
            {
                *self
                    .shared
                    .server_exit
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = exit;
            }
            #[cfg(not(feature = "stdio"))]
            let _ = exit;
        }
        for done in self.closing.take().unwrap_or_default() {
            let _ = done.send(());
        }
    }

    // -- notifications and the listen stream ------------------------------------------------------

    fn notify(&self, notification: ServerNotification) {
        if let Some(tx) = &*self
            .shared
            .notifications
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            let _ = tx.send(notification.clone());
        }
        for callback in &self.shared.callbacks {
            callback(&notification);
        }
    }

    fn on_notification(&mut self, notification: Notification) {
        let subscription = subscription_id(&notification)
            .map(|id| self.listen.aliases.get(&id).cloned().unwrap_or(id));
        if notification.method == NotificationsSubscriptionsAcknowledged::VALUE {
            if let Some(id) = subscription {
                self.listen_acknowledged(&id, &notification);
            }
            return;
        }
        if let Some(id) = &subscription
            && !self.accepts_from(id)
        {
            return; // a stream being replaced, whose successor already carries everything
        }
        // A task's status: to the handles that follow it, and to the application.
        if let Some(task) =
            crate::tasks::status_notification(&notification.method, notification.params.as_deref())
        {
            self.shared.task_watchers.heard(&task);
            return self.notify(ServerNotification::TaskStatus(task));
        }
        let Some(version) = self.session.version() else {
            return;
        };
        let decoded = crate::wire::server_notification(
            version,
            &notification.method,
            notification.params.as_deref(),
        );
        let notification = match decoded {
            Ok(n) => match ServerNotification::from_model(n) {
                Some(n) => n,
                None => return,
            },
            Err(_) => ServerNotification::Other {
                method: notification.method.clone(),
                params: notification
                    .params
                    .as_deref()
                    .and_then(|p| serde_json::from_str(p.get()).ok()),
            },
        };
        self.invalidate(&notification);
        self.notify(notification);
    }

    fn invalidate(&self, notification: &ServerNotification) {
        let Some((cache, scope)) = &self.shared.cache else {
            if matches!(notification, ServerNotification::ToolsListChanged) {
                self.forget_tool_schemas();
            }
            return;
        };
        let server = &scope.server;
        match notification {
            ServerNotification::ToolsListChanged => {
                self.forget_tool_schemas();
                cache.invalidate(server, ToolsList::VALUE, None);
            }
            ServerNotification::PromptsListChanged => {
                cache.invalidate(server, PromptsList::VALUE, None)
            }
            ServerNotification::ResourcesListChanged => {
                cache.invalidate(server, ResourcesList::VALUE, None);
                cache.invalidate(server, ResourcesTemplatesList::VALUE, None);
            }
            ServerNotification::ResourceUpdated { uri } => {
                let needle = Value::from(uri.as_str()).to_string();
                cache.invalidate(server, ResourcesRead::VALUE, Some(&needle));
            }
            ServerNotification::Resynced => {
                for method in crate::cache::CACHEABLE {
                    cache.invalidate(server, method, None);
                }
            }
            _ => {}
        }
    }

    fn forget_tool_schemas(&self) {
        self.shared
            .tool_schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    fn accepts_from(&self, id: &RequestId) -> bool {
        match &self.listen.open {
            Some((open, _)) if open == id => self.listen.acked || self.listen.retiring.is_empty(),
            _ => self.listen.retiring.contains(id) && !self.listen.acked,
        }
    }

    fn is_listen(&self, id: &RequestId) -> bool {
        self.listen
            .open
            .as_ref()
            .is_some_and(|(open, _)| open == id)
            || self.listen.retiring.contains(id)
    }

    fn modern(&self) -> bool {
        self.session
            .version()
            .is_some_and(|v| v.era() == modelctx_session::Era::Modern)
    }

    fn subscribe(&mut self, uri: String, on: bool, reply: oneshot::Sender<Result<(), Error>>) {
        if !self.modern() {
            let error = match self.session.version() {
                Some(version) => SessionError::MethodNotInVersion {
                    method: SubscriptionsListen::VALUE.into(),
                    version,
                },
                None => SessionError::NotReady,
            };
            let _ = reply.send(Err(Error::NotAvailable(error)));
            return;
        }
        if on {
            self.listen.uris.insert(uri.clone());
        } else {
            self.listen.uris.remove(&uri);
        }
        self.listen.forget_gone_waiters();
        self.listen.waiters.push((Some(uri), on, reply));
        self.sync_listen();
    }

    /// What the listen stream should ask for now, given what the server declared.
    fn wanted(&self) -> Filter {
        Filter {
            lists: self.listen.lists,
            uris: self.listen.uris.clone(),
            task_ids: self.listen.task_ids.keys().cloned().collect(),
        }
    }

    /// Opens, replaces or closes the listen stream so that it asks for what is wanted.
    fn sync_listen(&mut self) {
        if !self.modern() || self.listen.refused || self.listen.retry_at.is_some() {
            self.answer_waiters_if_idle();
            return;
        }
        let wanted = self.wanted();
        if self.listen.open.as_ref().map(|(_, f)| f) == Some(&wanted) {
            self.answer_waiters_if_idle();
            return;
        }
        if !wanted.lists && wanted.uris.is_empty() && wanted.task_ids.is_empty() {
            if let Some((id, _)) = self.listen.open.take() {
                let _ = self.session.cancel(now(), &id, None);
            }
            self.answer_waiters_if_idle();
            return;
        }
        let caps = self.session.peer().and_then(|p| p.capabilities.clone());
        let declared = |path: &[&str]| {
            caps.as_ref().is_none_or(|c| {
                let mut at = c.get(path[0]);
                for key in &path[1..] {
                    at = at.and_then(|v| v.get(key));
                }
                at.is_some_and(|v| v.as_bool() != Some(false) && !v.is_null())
            })
        };
        let mut filter = JsonObject::new();
        if wanted.lists {
            for (key, path) in [
                ("toolsListChanged", ["tools", "listChanged"]),
                ("promptsListChanged", ["prompts", "listChanged"]),
                ("resourcesListChanged", ["resources", "listChanged"]),
            ] {
                if declared(&path) {
                    filter.insert(key.into(), Value::Bool(true));
                }
            }
        }
        if !wanted.uris.is_empty() && declared(&["resources", "subscribe"]) {
            filter.insert(
                "resourceSubscriptions".into(),
                Value::Array(
                    wanted
                        .uris
                        .iter()
                        .map(|u| Value::from(u.as_str()))
                        .collect(),
                ),
            );
        }
        let tasks_extension = ["extensions", crate::tasks::EXTENSION_ID];
        let mut params = JsonObject::new();
        if !wanted.task_ids.is_empty() && declared(&tasks_extension) {
            filter.insert(
                "taskIds".into(),
                Value::Array(
                    wanted
                        .task_ids
                        .iter()
                        .map(|id| Value::from(id.as_str()))
                        .collect(),
                ),
            );
            // The extension is declared on the request that asks for its notifications.
            crate::tasks::declare_extension(&mut params);
        }
        if filter.is_empty() {
            // Nothing the server offers: no stream.
            self.answer_waiters_if_idle();
            return;
        }
        params.insert("notifications".into(), Value::Object(filter));
        match self.session.send_request_with(
            now(),
            SubscriptionsListen::VALUE,
            Some(params),
            RequestOptions::default().with_timeout(None),
        ) {
            Ok(id) => {
                if let Some((old, _)) = self.listen.open.replace((id, wanted)) {
                    self.listen.retiring.push(old);
                }
                self.listen.acked = false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "subscriptions/listen could not be sent");
                self.listen.refused = true;
                self.answer_waiters_if_idle();
            }
        }
    }

    fn answer_waiters_if_idle(&mut self) {
        if !self.modern() && self.link.as_ref().is_some_and(Link::standalone_opening) {
            // Legacy over HTTP: the server's notifications come on the standalone stream, which
            // is not open yet.
            return;
        }
        let acked_uris: Option<BTreeSet<String>> = match (&self.listen.open, self.listen.acked) {
            (Some((_, filter)), true) => Some(filter.uris.clone()),
            (None, _) => Some(BTreeSet::new()),
            _ => None,
        };
        let Some(uris) = acked_uris else { return };
        for (uri, on, waiter) in self.listen.waiters.drain(..) {
            let result = if uri.as_ref().is_none_or(|uri| uris.contains(uri) || !on) {
                Ok(())
            } else {
                Err(Error::UpdatesNotOffered {
                    uri: uri.unwrap_or_default(),
                })
            };
            let _ = waiter.send(result);
        }
    }

    fn listen_acknowledged(&mut self, id: &RequestId, notification: &Notification) {
        let Some((open, filter)) = &mut self.listen.open else {
            return;
        };
        if open != id {
            return;
        }
        // What the server agreed to honour.
        let agreed: Value = notification
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .map(|p| p["notifications"].clone())
            .unwrap_or(Value::Null);
        let honoured: BTreeSet<String> = agreed["resourceSubscriptions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|u| u.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        filter.uris.retain(|u| honoured.contains(u));
        self.listen.acked = true;
        self.listen.retry_delay = LISTEN_RETRY;
        for old in std::mem::take(&mut self.listen.retiring) {
            let _ = self.session.cancel(now(), &old, None);
        }
        self.answer_waiters_if_idle();
        // Keep asking for what is wanted; a URI the server refused is not asked for again.
        let refused: Vec<String> = self
            .listen
            .uris
            .iter()
            .filter(|u| !honoured.contains(*u))
            .cloned()
            .collect();
        for uri in refused {
            self.listen.uris.remove(&uri);
        }
        if std::mem::take(&mut self.listen.reopened) {
            self.notify(ServerNotification::Resynced);
        }
    }

    fn listen_ended(&mut self, id: &RequestId, error: Option<RequestError>) {
        if let Some(pos) = self.listen.retiring.iter().position(|r| r == id) {
            self.listen.retiring.swap_remove(pos);
            return;
        }
        self.listen.open = None;
        self.listen.acked = false;
        match error {
            Some(RequestError::Remote(error)) => {
                tracing::warn!(%error, "the server refused subscriptions/listen");
                self.listen.refused = true;
                for (_, _, waiter) in self.listen.waiters.drain(..) {
                    let _ = waiter.send(Err(Error::Remote(error.clone())));
                }
            }
            Some(RequestError::Closed(_)) => {}
            _ => {
                // Ended by the server, or lost: open it again, after a growing wait.
                self.listen.reopened = true;
                self.listen.retry_at = Some(now() + self.listen.retry_delay);
                self.listen.retry_delay = (self.listen.retry_delay * 2).min(LISTEN_RETRY_MAX);
            }
        }
    }
}

async fn recv(link: &mut Option<Link>) -> LinkEvent {
    match link {
        Some(link) => link.recv().await,
        None => std::future::pending().await,
    }
}

fn subscription_id(notification: &Notification) -> Option<RequestId> {
    let params: Value = serde_json::from_str(notification.params.as_deref()?.get()).ok()?;
    serde_json::from_value(params["_meta"][meta_keys::SUBSCRIPTION_ID].clone()).ok()
}
