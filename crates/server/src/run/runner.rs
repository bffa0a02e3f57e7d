//! The request runner: one protocol session, the requests it has under way and the questions
//! asked for them, with no I/O of its own.
//!
//! [`Conn`] routes each request the session hands over to its handler and polls the handler
//! once where it stands; a handler that finishes without waiting (most do) is answered at once,
//! one that waits goes on on a task of its own and answers through the command channel. What
//! the session has to send is taken with [`Conn::next_transmit`]: the connection driver
//! (`run::driver`) writes it for stdio, in-memory channels and legacy HTTP sessions, and a
//! modern HTTP request writes it on its own stream (`http`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use modelctx_session::{
    Event, IncomingRequest, ListKind, RequestError, RequestOptions, ServerSession, Transmit,
};
use modelctx_types::consts::{ResourcesSubscribe, ResourcesUnsubscribe};
use modelctx_types::{ErrorObject, Message, RequestId};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::command::{Command, CommandQueue, Commands, commands};
use crate::context::{Context, Inner};
use crate::handler::BoxFuture;
use crate::input::{InputError, NoAnswer};
use crate::registry::{Change, Shared};
use crate::route::{Route, route};

/// The places in the command channel between a connection's handlers and its runner (stdio,
/// in-memory: every handler of the connection shares it).
const CONNECTION_COMMANDS: usize = 256;

/// The places in the command channel of a runner that lives for one modern request or one
/// legacy POST: its few handlers' progress and logs. A handler that sends more waits for room
/// (the runner applies them as they come); nothing is dropped.
#[cfg(feature = "http")]
const REQUEST_COMMANDS: usize = 16;

/// How the connection came, for handlers' contexts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origin {
    #[cfg(feature = "http")]
    pub(crate) http: Option<modelctx_http::server::RequestContext>,
}

impl Origin {
    /// The authenticated principal of the HTTP request, if any.
    pub(crate) fn principal(&self) -> Option<&str> {
        #[cfg(feature = "http")]
        {
            self.http
                .as_ref()
                .and_then(|h| h.principal())
                .map(|p| p.0.as_str())
        }
        #[cfg(not(feature = "http"))]
        {
            None
        }
    }
}

/// A request being handled.
struct Running {
    cancelled: CancellationToken,
    modern: bool,
    /// Which start of a request with this id it is.
    generation: u64,
}

/// A question of ours to the client (legacy), for a request being handled.
struct Asking {
    /// The request it was asked for: it goes on that request's stream.
    for_request: RequestId,
    /// The generation of the request it was asked for.
    generation: u64,
    reply: tokio::sync::oneshot::Sender<Result<Value, InputError>>,
}

/// What the runner keeps of the work under way; emptied when the connection ends.
#[derive(Default)]
struct Book {
    running: HashMap<RequestId, Running>,
    questions: HashMap<RequestId, Asking>,
    /// Legacy `resources/subscribe`.
    subscriptions: crate::resource::Subscriptions,
}

impl Book {
    /// The request in flight under `id`, when it is the start `generation`.
    fn running(&self, id: &RequestId, generation: u64) -> Option<&Running> {
        self.running.get(id).filter(|r| r.generation == generation)
    }

    fn end(&mut self) {
        for (_, request) in self.running.drain() {
            request.cancelled.cancel();
        }
        for (_, question) in self.questions.drain() {
            let _ = question
                .reply
                .send(Err(InputError::NoAnswer(NoAnswer::ConnectionEnded)));
        }
    }
}

/// One session and the requests it runs: a connection's (stdio, in-memory, a legacy HTTP
/// session) or a single modern HTTP request's. Counted in [`Load::connections`](crate::Load)
/// while it lives; every handler still running is cancelled when it is dropped.
pub(crate) struct Conn {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: ServerSession,
    book: Book,
    /// What the handlers send through: the channel is made on the first command (most requests
    /// send none) and goes with the runner.
    commands_tx: Commands,
    commands: CommandQueue,
    /// Requests the peer cancelled ([`Event::Cancelled`], either era), for the output to let
    /// go of ([`Conn::take_released`]).
    released: Vec<RequestId>,
    /// The session's listen streams that name tasks (`taskIds`), registered with the server's
    /// tasks while the connection lives.
    task_listener: Option<crate::tasks::runner::TaskListener>,
}

impl Conn {
    pub(crate) fn new(shared: Arc<Shared>) -> Conn {
        // The configuration is shared, not copied: a modern request's session costs no deep
        // clone of the capabilities and serverInfo.
        let session = ServerSession::new(shared.config.clone());
        Conn::with_session(shared, session, CONNECTION_COMMANDS)
    }

    /// The connection of one modern HTTP request, checked by its session's rules (`_meta`, the
    /// version served) and refused with a [`Transmit::Refusal`] when they fail.
    #[cfg(feature = "http")]
    pub(crate) fn for_request(shared: Arc<Shared>) -> Conn {
        let session = ServerSession::for_request(shared.config.clone());
        Conn::with_session(shared, session, REQUEST_COMMANDS)
    }

    /// A runner for `session`, resumed from a legacy session's stored state, with the
    /// resources that session subscribed to.
    #[cfg(feature = "http")]
    pub(crate) fn resumed<'a>(
        shared: Arc<Shared>,
        session: ServerSession,
        subscriptions: impl IntoIterator<Item = &'a String>,
    ) -> Conn {
        let mut conn = Conn::with_session(shared, session, REQUEST_COMMANDS);
        for uri in subscriptions {
            // The state was saved from a runner that allowed it: within the bound.
            let _ = conn.book.subscriptions.subscribe(uri);
        }
        conn
    }

    /// The resources the session subscribed to (legacy `resources/subscribe`).
    #[cfg(feature = "http")]
    pub(crate) fn subscriptions(&self) -> std::collections::BTreeSet<String> {
        self.book.subscriptions.uris().map(str::to_owned).collect()
    }

    fn with_session(shared: Arc<Shared>, session: ServerSession, bound: usize) -> Conn {
        shared.load.connections.fetch_add(1, Ordering::SeqCst);
        let (commands_tx, commands) = commands(bound);
        Conn {
            shared,
            session,
            book: Book::default(),
            commands_tx,
            commands,
            released: Vec::new(),
            task_listener: None,
        }
    }

    /// The next thing the session has to send; a question goes on the stream of the request it
    /// was asked for.
    pub(crate) fn next_transmit(&mut self) -> Option<Transmit> {
        match self.session.poll_transmit()? {
            Transmit::Message {
                message: Message::Request(request),
                related: None,
            } => {
                let related = self
                    .book
                    .questions
                    .get(&request.id)
                    .map(|q| q.for_request.clone());
                Some(Transmit::Message {
                    message: Message::Request(request),
                    related,
                })
            }
            other => Some(other),
        }
    }

    /// Handles every event the session has (starting the requests among them); returns whether
    /// there was one.
    pub(crate) fn handle_events(&mut self, origin: &Origin) -> bool {
        let mut any = false;
        while let Some(event) = self.session.poll_event() {
            any = true;
            self.on_event(event, origin);
        }
        // (A listen stream is taken by the session with no event.)
        self.listen_to_tasks(origin);
        any
    }

    /// Keeps the connection's registration for task status (its listen streams' `taskIds`) up
    /// to date: made with the first stream that names a task, for the connection's principal.
    fn listen_to_tasks(&mut self, origin: &Origin) {
        let mut ids = self.session.listened_task_ids().peekable();
        if ids.peek().is_none() && self.task_listener.is_none() {
            return;
        }
        let listener = self.task_listener.get_or_insert_with(|| {
            self.shared
                .tasks
                .listen(origin.principal(), self.commands_tx.clone())
        });
        listener.set(ids);
    }

    /// The requests the peer cancelled since last asked: the output lets go of them
    /// (`Output::release`).
    pub(crate) fn take_released(&mut self) -> Vec<RequestId> {
        std::mem::take(&mut self.released)
    }

    /// The next command of a handler that did not answer at once.
    pub(crate) async fn next_command(&mut self) -> Option<Command> {
        self.commands.recv().await
    }

    /// A command queued already, if any.
    #[cfg(feature = "http")]
    pub(crate) fn try_command(&mut self) -> Option<Command> {
        self.commands.try_recv()
    }

    /// Applies a handler's command (all but [`Command::CloseStream`], which needs the output:
    /// see [`Conn::close_stream_allowed`]).
    pub(crate) fn apply(&mut self, command: Command) {
        apply(&mut self.session, command, &mut self.book);
    }

    /// Whether request `id` (start `generation`) is a legacy request still running, whose
    /// stream may be closed for the client to resume.
    pub(crate) fn close_stream_allowed(&self, id: &RequestId, generation: u64) -> bool {
        self.book.running(id, generation).is_some_and(|r| !r.modern)
    }

    /// Whether nothing is under way: no request the session waits to answer and no handler.
    pub(crate) fn is_idle(&self) -> bool {
        self.session.table_sizes().incoming == 0 && self.book.running.is_empty()
    }

    /// A change to what the server offers, for the session's listeners.
    pub(crate) fn on_change(
        &mut self,
        change: Result<Change, broadcast::error::RecvError>,
        origin: &Origin,
    ) {
        match change {
            Ok(Change::List(kind)) => {
                let _ = self.session.notify_list_changed(kind);
            }
            Ok(Change::Updated(uri)) => {
                // A legacy subscription was allowed when it was made; the URIs of listen
                // streams are checked here (the hook, and the scopes against the grant).
                let legacy = self.book.subscriptions.contains(&uri);
                if legacy || crate::registry::may_subscribe(&self.shared, &uri, origin) {
                    let _ = self.session.notify_resource_updated(&uri, legacy);
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
                    let _ = self.session.notify_list_changed(kind);
                }
            }
            Err(broadcast::error::RecvError::Closed) => {}
        }
    }

    /// The connection is over: every handler still running is cancelled and every question
    /// still open fails.
    pub(crate) fn end(&mut self) {
        self.book.end();
    }

    fn on_event(&mut self, event: Event, origin: &Origin) {
        let book = &mut self.book;
        match event {
            Event::Request(request) => start(
                &self.shared,
                &mut self.session,
                request,
                book,
                &self.commands_tx,
                origin,
            ),
            Event::Response { id, result, .. } => {
                if let Some(question) = book.questions.remove(&id) {
                    let answer = serde_json::from_str(result.get())
                        .map_err(|e| InputError::NoAnswer(NoAnswer::Unreadable(Arc::new(e))));
                    let _ = question.reply.send(answer);
                }
            }
            Event::Failed { id, error, .. } => {
                if let Some(question) = book.questions.remove(&id) {
                    let error = match error {
                        RequestError::Remote(e) => InputError::Refused(e),
                        other => InputError::NoAnswer(NoAnswer::Failed(other)),
                    };
                    let _ = question.reply.send(Err(error));
                }
            }
            // Either era, however the peer cancelled (its notification, its stream closed, its
            // POST abandoned): the handler stops, and the output lets go of the request.
            Event::Cancelled { id, .. } => {
                if let Some(request) = book.running.remove(&id) {
                    request.cancelled.cancel();
                }
                self.released.push(id);
            }
            Event::Closed(_) => book.end(),
            _ => {}
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.book.end();
        self.shared.load.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

fn apply(session: &mut ServerSession, command: Command, book: &mut Book) {
    match command {
        Command::Respond {
            id,
            generation,
            answer,
        } => {
            // Only this start's entry: a newer request with the same id keeps its own (one
            // lookup: the entry is taken, and put back when it is a newer start's).
            if let Some(running) = book.running.remove(&id)
                && running.generation != generation
            {
                book.running.insert(id.clone(), running);
            }
            // Questions still open for it are not wanted any more.
            let open: Vec<RequestId> = book
                .questions
                .iter()
                .filter(|(_, q)| q.for_request == id && q.generation == generation)
                .map(|(ask, _)| ask.clone())
                .collect();
            for ask in open {
                book.questions.remove(&ask);
                let _ = session.cancel(Instant::now(), &ask, Some("the request was answered"));
            }
            let sent = match answer {
                Ok(result) => session.respond_to(&id, generation, result),
                Err(error) => session.respond_error_to(&id, generation, error),
            };
            if let Err(e) = sent {
                // Cancelled meanwhile, or refused by the protocol rules: say so in the logs.
                tracing::debug!(%id, error = %e, "a handler's answer was not sent");
            }
        }
        Command::Ask {
            id,
            generation,
            method,
            params,
            reply,
        } => {
            if book.running(&id, generation).is_none() {
                let _ = reply.send(Err(InputError::NoAnswer(NoAnswer::RequestEnded)));
                return;
            }
            match session.send_request(
                Instant::now(),
                &method,
                Some(params),
                RequestOptions::default(),
            ) {
                Ok(ask) => {
                    book.questions.insert(
                        ask,
                        Asking {
                            for_request: id,
                            generation,
                            reply,
                        },
                    );
                }
                Err(
                    modelctx_session::SessionError::MethodNotInVersion { .. }
                    | modelctx_session::SessionError::NotDeclared { .. },
                ) => {
                    let capability = crate::input::capability_of(&method);
                    let _ = reply.send(Err(InputError::NotSupported(capability.to_owned())));
                }
                Err(e) => {
                    let _ = reply.send(Err(InputError::NoAnswer(NoAnswer::NotSent(e))));
                }
            }
        }
        Command::Progress {
            id,
            generation,
            progress,
            total,
            message,
        } => {
            if book.running(&id, generation).is_none() {
                return; // the request is over (a newer one may have its id)
            }
            let _ = session.notify_progress(&id, progress, total, message.as_deref());
        }
        Command::CloseStream { reply, .. } => {
            let _ = reply.send(false);
        }
        Command::TaskStatus {
            legacy: true,
            params,
        } => {
            let method = modelctx_types::consts::NotificationsTasksStatus::VALUE;
            if let Err(e) = session.notify(method, Some(params)) {
                tracing::debug!(method, error = %e, "a notification was not sent");
            }
        }
        Command::TaskStatus {
            legacy: false,
            params,
        } => {
            session.notify_task(params);
        }
        Command::Log {
            id,
            generation,
            level,
            logger,
            data,
        } => {
            let Some(running) = book.running(&id, generation) else {
                return; // the request is over (a newer one may have its id)
            };
            // Nothing is logged to a legacy client that set no level (modern requests without a
            // level in `_meta` are filtered by the session).
            let legacy = !running.modern;
            if legacy && session.log_level().is_none() {
                return;
            }
            let _ = session.log_for(&id, level, logger.as_deref(), data);
        }
    }
}

/// Legacy `resources/subscribe` and `resources/unsubscribe`, which belong to the connection:
/// URIs of at most `Settings::max_uri_len` bytes, subscriptions as the `on_subscribe` hook
/// allows.
fn subscription(
    shared: &Shared,
    request: &IncomingRequest,
    book: &mut Book,
    origin: &Origin,
) -> Option<Result<Value, ErrorObject>> {
    let subscribe = match request.method.as_str() {
        ResourcesSubscribe::VALUE => true,
        ResourcesUnsubscribe::VALUE => false,
        _ => return None,
    };
    let uri = request
        .params
        .as_deref()
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_owned));
    let Some(uri) = uri else {
        return Some(Err(crate::wire::invalid_params("a uri is needed")));
    };
    if let Err(error) = crate::registry::check_uri_len(shared, "the uri", &uri) {
        return Some(Err(error));
    }
    if subscribe && !crate::registry::may_subscribe(shared, &uri, origin) {
        return Some(Err(crate::wire::invalid_params(format!(
            "subscribing to {uri} is not allowed"
        ))));
    }
    if subscribe {
        if let Err(e) = book.subscriptions.subscribe(&uri) {
            return Some(Err(e));
        }
    } else {
        book.subscriptions.unsubscribe(&uri);
    }
    Some(Ok(serde_json::json!({})))
}

/// Starts answering a request: at once, or on its own task.
fn start(
    shared: &Arc<Shared>,
    session: &mut ServerSession,
    mut request: IncomingRequest,
    book: &mut Book,
    commands: &Commands,
    origin: &Origin,
) {
    let generation = request.generation;
    // The request's span and measure (`crate::observe`): its handler runs in it (and the chain
    // around it). Routing does not enter it: it makes nothing to nest there, and every enter of
    // a recorded span costs its subscriber (an OpenTelemetry context attached and detached).
    let observed = crate::observe::Observed::start(shared, &request, origin);
    // The scopes again, before anything of the request is done (defense in depth: the
    // transport refused it already, if it asked the same guard).
    #[cfg(feature = "http")]
    if let Err(error) = crate::scopes::check(shared, &request, origin) {
        return refuse(session, book, &request, error, observed);
    }
    if let Some(answer) = subscription(shared, &request, book, origin) {
        let id = request.id.clone();
        let answer = answer.and_then(|v| crate::wire::raw(&v));
        observed.finish(&answer);
        let respond = Command::Respond {
            id,
            generation,
            answer,
        };
        return apply(session, respond, book);
    }
    let modern = request.meta.is_some();
    let mut tool_layers = None;
    let route = route(shared, &request, &mut tool_layers);
    // The middleware chains (`crate::middleware`): none, the usual case, costs nothing more.
    let layers = crate::middleware::Layers::of(&shared.layers, tool_layers);
    let mut runner = match route {
        Route::Now(answer) => {
            if let Some(layers) = layers {
                let handler = layers.now(middleware_request(&mut request, origin), answer);
                // The span ends with what the chain answers.
                let handler: BoxFuture<Answer> = Box::pin(observed.wrap(handler));
                return answer_with(
                    session, book, commands, request.id, generation, handler, None,
                );
            }
            observed.finish(&answer);
            // (The session completes modern list results with `Settings::list_cache`.)
            let id = request.id.clone();
            let respond = Command::Respond {
                id,
                generation,
                answer,
            };
            return apply(session, respond, book);
        }
        Route::Run(runner) => runner,
    };
    let principal = origin.principal().map(str::to_owned);
    // Every handler-backed request the limits name is counted (finding 25), not only tool calls.
    let permit = if shared.settings.limits.covers(&request.method) {
        match shared.limiter.admit(principal.as_deref()) {
            Ok(permit) => Some(permit),
            Err(error) => {
                return refuse(session, book, &request, error, observed);
            }
        }
    } else {
        None
    };
    let mut mrtr = None;
    if modern && crate::input::allows_input(&request.method) {
        match crate::input::prepare(&shared.sealer, &request, principal.as_deref()) {
            Ok(state) => {
                runner = crate::input::wrap(
                    runner,
                    state.clone(),
                    shared.sealer.clone(),
                    &request,
                    principal,
                );
                mrtr = Some(state);
            }
            Err(error) => {
                return refuse(session, book, &request, error, observed);
            }
        }
    }
    let cancelled = CancellationToken::new();
    let layered = layers.map(|layers| {
        let request = middleware_request(&mut request, origin);
        (layers, request, cancelled.clone())
    });
    // What the context needs is moved out of the request, not copied (the request ends here).
    let IncomingRequest {
        id,
        method,
        version,
        progress_token,
        meta,
        ..
    } = request;
    let (client_info, client_capabilities) = match meta {
        Some(meta) => (meta.client_info, Some(meta.client_capabilities)),
        None => match session.peer() {
            Some(peer) => (peer.info, peer.capabilities),
            None => (None, None),
        },
    };
    book.running.insert(
        id.clone(),
        Running {
            cancelled: cancelled.clone(),
            modern,
            generation,
        },
    );
    let context = Context {
        inner: Arc::new(Inner {
            id: id.clone(),
            generation,
            method,
            version,
            client_info,
            client_capabilities,
            progress_token,
            last_progress: Mutex::new(None),
            cancelled,
            commands: commands.clone(),
            mrtr,
            modern,
            #[cfg(feature = "http")]
            http: origin.http.clone(),
            state: shared.state.clone(),
            task: std::sync::OnceLock::new(),
            detach: Mutex::new(None),
        }),
    };
    let counted = shared.clone();
    let running = async move {
        let _running = crate::registry::Counted::new(&counted.load.handlers);
        runner(context).await
    };
    // The span ends with what the handler, or the chain around it, answers.
    let handler: BoxFuture<Answer> = match layered {
        None => Box::pin(observed.wrap(running)),
        Some((layers, request, cancelled)) => {
            Box::pin(observed.wrap(layers.run(request, Box::pin(running), cancelled)))
        }
    };
    answer_with(session, book, commands, id, generation, handler, permit);
}

/// What a handler answers.
type Answer = Result<Box<serde_json::value::RawValue>, ErrorObject>;

/// The request as the middleware layers see it (its params moved into it: nothing after the
/// chain reads them).
fn middleware_request(
    request: &mut IncomingRequest,
    origin: &Origin,
) -> crate::middleware::McpRequest {
    #[cfg(feature = "http")]
    let transport = match origin.http {
        Some(_) => crate::middleware::Transport::Http,
        None => crate::middleware::Transport::Stream,
    };
    #[cfg(not(feature = "http"))]
    let transport = crate::middleware::Transport::Stream;
    crate::middleware::McpRequest::new(
        request.id.clone(),
        &request.method,
        request.params.take(),
        request.version,
        origin.principal().map(str::to_owned),
        transport,
    )
}

/// Answers request `id` (start `generation`) with what `handler` gives: at once when it
/// finishes on its first step, else from a task of its own; `permit` is held until then.
fn answer_with(
    session: &mut ServerSession,
    book: &mut Book,
    commands: &Commands,
    id: RequestId,
    generation: u64,
    mut handler: BoxFuture<Answer>,
    permit: Option<crate::limits::Permit>,
) {
    // The handler's first step runs here: a handler that finishes without waiting (most do)
    // is answered at once, without a task of its own and the two hand-offs between tasks that
    // costs. One that waits goes on on its own task, whose first poll registers its waker (the
    // no-op one of this poll is never kept). Its panic is caught in both places.
    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        handler
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }));
    let done = match first {
        Ok(std::task::Poll::Pending) => None,
        Ok(std::task::Poll::Ready(answer)) => Some(answer),
        Err(_) => Some(Err(crate::wire::internal(
            "the handler failed unexpectedly (it panicked)",
        ))),
    };
    if let Some(answer) = done {
        drop(permit);
        let respond = Command::Respond {
            id,
            generation,
            answer,
        };
        if commands.is_quiet() {
            apply(session, respond, book);
        } else {
            // The handler queued messages (progress, logs) before its answer: the answer goes
            // after them, through the same queue.
            if let Err(mpsc::error::TrySendError::Full(respond)) = commands.try_send(respond) {
                let commands = commands.clone();
                tokio::spawn(async move {
                    let _ = commands.send(respond).await;
                });
            }
        }
        return;
    }
    let commands = commands.clone();
    // One task per request that waits: the handler, its panic caught where it runs.
    tokio::spawn(async move {
        let outcome = std::future::poll_fn(|cx| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                handler.as_mut().poll(cx)
            })) {
                Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
                Ok(std::task::Poll::Ready(answer)) => std::task::Poll::Ready(Some(answer)),
                Err(_) => std::task::Poll::Ready(None),
            }
        })
        .await;
        let answer = match outcome {
            Some(answer) => answer,
            None => Err(crate::wire::internal(
                "the handler failed unexpectedly (it panicked)",
            )),
        };
        drop(permit);
        let respond = Command::Respond {
            id,
            generation,
            answer,
        };
        let _ = commands.send(respond).await;
    });
}

/// Answers `request` with `error` at once.
fn refuse(
    session: &mut ServerSession,
    book: &mut Book,
    request: &IncomingRequest,
    error: ErrorObject,
    observed: crate::observe::Observed,
) {
    let id = request.id.clone();
    let answer = Err(error);
    observed.finish(&answer);
    apply(
        session,
        Command::Respond {
            id,
            generation: request.generation,
            answer,
        },
        book,
    );
}
