//! The driver of one connection: a protocol session, the transport's input and output, and the
//! handlers it runs, each on its own task.
//!
//! A stdio connection, a legacy HTTP session and a modern HTTP request each get one driver.
//! The driver is the only owner of its `ServerSession`: handlers talk to it through a bounded
//! command channel, so a slow handler never holds anything another request needs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::input::{InputError, NoAnswer};
use std::time::Instant;

use modelctx_session::{
    Event, IncomingRequest, ListKind, LogLevel, RequestError, RequestOptions, ServerSession,
    Transmit,
};
use modelctx_types::{ErrorCode, ErrorObject, Incoming, Message, RequestId};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::context::{Context, Inner};
use crate::registry::{Change, Shared};
use crate::route::{Route, route};

/// What the transport hands the driver.
#[derive(Debug)]
pub(crate) enum Input {
    /// A message or batch, and the HTTP request it came in (legacy HTTP sessions).
    Incoming(Incoming, Option<Origin>),
    /// Bytes that are not JSON-RPC.
    #[cfg_attr(not(feature = "stdio"), allow(dead_code))]
    Unreadable(Vec<u8>),
    /// A message to write as it is: the transport's own answer to a line it could not read
    /// (too long, not UTF-8).
    #[cfg(feature = "stdio")]
    Reply(Message),
}

/// A line-framed byte stream the driver writes itself (stdio): messages are encoded into its
/// buffer as they come and written when the driver has nothing else to do, so a call crosses no
/// writer task (and the driver writes many messages with one system call under load).
#[cfg(feature = "stdio")]
pub(crate) trait Sink: Send {
    /// Encodes one frame at the end of the buffer (no I/O).
    fn feed(&mut self, frame: &Frame) -> std::io::Result<()>;
    /// How many bytes are encoded and not yet written.
    fn buffered(&self) -> usize;
    /// Writes what is buffered.
    fn flush(&mut self)
    -> std::pin::Pin<Box<dyn Future<Output = std::io::Result<()>> + Send + '_>>;
    /// Writes what is buffered and shuts the stream down.
    fn shutdown(
        &mut self,
    ) -> std::pin::Pin<Box<dyn Future<Output = std::io::Result<()>> + Send + '_>>;
}

/// One message, or a batch reply, for a transport that frames them itself.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Frame {
    /// One message.
    Single(Message),
    /// The reply to a batch (2025-03-26 sessions): one JSON array.
    Batch(Vec<Message>),
}

/// What a client's transport reads: so that a client can take the server's output channel
/// (`modelctx-client`'s `connect_channels`).
impl From<Frame> for Incoming {
    fn from(frame: Frame) -> Incoming {
        match frame {
            Frame::Single(message) => Incoming::Single(message),
            Frame::Batch(messages) => Incoming::Batch(messages.into_iter().map(Ok).collect()),
        }
    }
}

/// Where the driver's output goes.
pub(crate) enum Output {
    /// A transport that frames messages itself (stdio, in-memory, custom).
    Channel(mpsc::Sender<Frame>),
    /// A legacy HTTP session: each message on the stream of its request.
    #[cfg(feature = "http")]
    Legacy(modelctx_http::server::LegacySession),
    /// A modern HTTP request: its own response stream.
    #[cfg(feature = "http")]
    Modern(modelctx_http::server::ModernReply),
    /// A line-framed byte stream the driver writes itself.
    #[cfg(feature = "stdio")]
    Lines(Box<dyn Sink>),
}

impl Output {
    /// Writes one transmit; false when the transport is gone.
    async fn write(&mut self, transmit: Transmit) -> bool {
        match (self, transmit) {
            #[cfg(feature = "stdio")]
            (Output::Lines(sink), Transmit::Message { message, .. }) => {
                sink.feed(&Frame::Single(message)).is_ok()
            }
            #[cfg(feature = "stdio")]
            (Output::Lines(sink), Transmit::Batch(messages)) => {
                sink.feed(&Frame::Batch(messages)).is_ok()
            }
            #[cfg(feature = "stdio")]
            (Output::Lines(sink), Transmit::Cancel { notification, .. }) => {
                sink.feed(&Frame::Single(notification.into())).is_ok()
            }
            (Output::Channel(tx), Transmit::Message { message, .. }) => {
                tx.send(Frame::Single(message)).await.is_ok()
            }
            (Output::Channel(tx), Transmit::Batch(messages)) => {
                tx.send(Frame::Batch(messages)).await.is_ok()
            }
            (Output::Channel(tx), Transmit::Cancel { notification, .. }) => {
                tx.send(Frame::Single(notification.into())).await.is_ok()
            }
            #[cfg(feature = "http")]
            (Output::Legacy(session), Transmit::Message { message, related }) => {
                session.send(message, related).await;
                true
            }
            #[cfg(feature = "http")]
            (Output::Legacy(session), Transmit::Batch(messages)) => {
                session.send_batch(messages).await;
                true
            }
            #[cfg(feature = "http")]
            (Output::Modern(reply), Transmit::Message { message, .. }) => {
                reply.send(message).await.is_ok()
            }
            #[cfg(feature = "http")]
            (Output::Modern(reply), Transmit::Refusal(error)) => reply.refuse(error).await.is_ok(),
            // A server sends no batches or cancellations of its own requests on these.
            #[allow(unreachable_patterns)]
            _ => true,
        }
    }

    /// Closes the connection of request `id`'s stream, when the transport can resume it.
    async fn close_stream(&mut self, id: &RequestId) -> bool {
        match self {
            #[cfg(feature = "http")]
            Output::Legacy(session) => session.close_stream(id).await,
            _ => {
                let _ = id;
                false
            }
        }
    }
}

/// What handlers ask of the driver. Each names its request by id and generation (the session's
/// `IncomingRequest::generation`): a cancelled request's handler runs on until it notices, and
/// what it asks after a new request reused its id is for a request that is gone, never for the
/// new one (finding 12).
#[derive(Debug)]
pub(crate) enum Command {
    /// A handler finished.
    Respond {
        id: RequestId,
        generation: u64,
        answer: Result<Value, ErrorObject>,
    },
    /// Progress on a request.
    Progress {
        id: RequestId,
        generation: u64,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// A question for the client (legacy), asked for request `id`.
    Ask {
        id: RequestId,
        generation: u64,
        method: String,
        params: modelctx_types::JsonObject,
        reply: tokio::sync::oneshot::Sender<Result<Value, crate::input::InputError>>,
    },
    /// Close the connection of a request's stream (legacy HTTP), telling whether it was.
    CloseStream {
        id: RequestId,
        generation: u64,
        reply: tokio::sync::oneshot::Sender<bool>,
    },
    /// A log message about a request.
    Log {
        id: RequestId,
        generation: u64,
        level: LogLevel,
        logger: Option<String>,
        data: Value,
    },
}

/// How the connection came, for handlers' contexts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origin {
    #[cfg(feature = "http")]
    pub(crate) http: Option<modelctx_http::server::RequestContext>,
}

/// A request being handled.
struct Running {
    cancelled: CancellationToken,
    modern: bool,
    /// Which start of a request with this id it is.
    generation: u64,
}

/// A question of ours to the client (legacy), for a request being handled.
struct Question {
    /// The request it was asked for: it goes on that request's stream.
    for_request: RequestId,
    /// The generation of the request it was asked for.
    generation: u64,
    reply: tokio::sync::oneshot::Sender<Result<Value, InputError>>,
}

/// What the driver keeps of the work under way; emptied when the connection ends.
#[derive(Default)]
struct Book {
    running: HashMap<RequestId, Running>,
    questions: HashMap<RequestId, Question>,
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

/// How long a driver runs.
pub(crate) enum Lifetime {
    /// Until the input ends or `ended` fires (stdio, in-memory, a legacy HTTP session); then the
    /// session closes and every handler still running is cancelled.
    Connection { ended: CancellationToken },
    /// Until its one request is answered (a modern HTTP request): the end of the input closes
    /// nothing, and `cancelled` (the request and its response stream's token) cancels it.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Request {
        cancelled: Option<(RequestId, CancellationToken)>,
    },
}

/// Runs a connection whose transport frames messages itself until its input ends.
pub(crate) async fn run_channel(
    shared: Arc<Shared>,
    input: mpsc::Receiver<Input>,
    output: mpsc::Sender<Frame>,
) {
    let lifetime = Lifetime::Connection {
        ended: CancellationToken::new(),
    };
    run(
        shared,
        input,
        Output::Channel(output),
        Origin::default(),
        lifetime,
    )
    .await;
}

/// Runs `future` on a task of its own, on the runtime's workers, until it ends; aborted if the
/// future this returns is dropped, and its panic goes on as this future's.
#[cfg(feature = "stdio")]
pub(crate) async fn run_on_task<F>(future: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    /// Aborts the task when dropped: the connection ends with its caller's future.
    struct AbortOnDrop(tokio::task::JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = AbortOnDrop(tokio::spawn(future));
    if let Err(e) = (&mut task.0).await
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Runs one connection for its [`Lifetime`].
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut input: mpsc::Receiver<Input>,
    mut output: Output,
    mut origin: Origin,
    lifetime: Lifetime,
) {
    let (until_idle, cancelled, ended) = match lifetime {
        Lifetime::Connection { ended } => (false, None, ended),
        Lifetime::Request { cancelled } => (true, cancelled, CancellationToken::new()),
    };
    let _connection = crate::registry::Counted::new(&shared.load.connections);
    // A modern HTTP request is checked by its own session's rules (`_meta`, version).
    let mut session = if until_idle {
        ServerSession::for_request(shared.config.clone())
    } else {
        ServerSession::new(shared.config.clone())
    };
    let (commands_tx, mut commands) = mpsc::channel::<Command>(256);
    let mut changes = shared.changes.subscribe();
    let mut book = Book::default();
    let mut input_open = true;
    let stream_cancel = cancelled
        .as_ref()
        .map(|(_, t)| t.clone())
        .unwrap_or_default();
    let mut stream_open = cancelled.is_some();
    // Whether the legacy HTTP transport was told the negotiated version.
    #[cfg(feature = "http")]
    let mut version_told = false;
    // Whether `origin` is the HTTP request of the last input (legacy HTTP sessions).
    let mut origin_from_input = false;
    // Whether the line stream (`Output::Lines`) still takes writes.
    #[cfg(feature = "stdio")]
    let mut writable = true;

    loop {
        // Everything the session has to say, then what it asks of us.
        loop {
            let mut busy = false;
            while let Some(transmit) = session.poll_transmit() {
                busy = true;
                let transmit = match transmit {
                    // A question goes on the stream of the request it was asked for.
                    Transmit::Message {
                        message: Message::Request(request),
                        related: None,
                    } => {
                        let related = book
                            .questions
                            .get(&request.id)
                            .map(|q| q.for_request.clone());
                        Transmit::Message {
                            message: Message::Request(request),
                            related,
                        }
                    }
                    other => other,
                };
                if !output.write(transmit).await {
                    session.transport_closed("the transport is gone");
                }
            }
            while let Some(event) = session.poll_event() {
                busy = true;
                on_event(
                    &shared,
                    &mut session,
                    event,
                    &mut book,
                    &commands_tx,
                    &origin,
                );
            }
            if !busy {
                break;
            }
        }
        // Everything said is encoded: written before waiting for more input, or once much is
        // buffered; while more input is already queued, it is read first (one write for many
        // answers under load).
        #[cfg(feature = "stdio")]
        if let Output::Lines(sink) = &mut output
            && writable
            && sink.buffered() > 0
            && (input.is_empty() || !input_open || sink.buffered() >= 64 * 1024)
            && sink.flush().await.is_err()
        {
            writable = false;
            session.transport_closed("the transport is gone");
            continue;
        }
        if origin_from_input {
            // The HTTP request an input came in served its events (above): let it go. Kept, it
            // pinned the connection's whole read buffer (its header values point into it) for
            // as long as the session stayed idle: ~16 KiB per idle legacy session.
            origin = Origin::default();
            origin_from_input = false;
        }
        if session.is_closed() {
            break;
        }
        if !input_open
            && until_idle
            && session.table_sizes().incoming == 0
            && book.running.is_empty()
        {
            break;
        }
        let deadline = session.poll_timeout();
        let timer = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            item = input.recv(), if input_open => {
                let now = Instant::now();
                match item {
                    Some(Input::Incoming(incoming, from)) => {
                        if let Some(from) = from {
                            origin = from;
                            origin_from_input = true;
                        }
                        session.handle_incoming(now, incoming);
                        // The transport learns the version `initialize` settled on before the
                        // answer is written (its wire rules depend on it).
                        #[cfg(feature = "http")]
                        if let Output::Legacy(legacy) = &output
                            && !version_told
                            && let Some(version) = session.version()
                        {
                            legacy.set_version(version).await;
                            version_told = true;
                        }
                    }
                    Some(Input::Unreadable(bytes)) => session.handle_bytes(now, &bytes),
                    #[cfg(feature = "stdio")]
                    Some(Input::Reply(message)) => {
                        let reply = Transmit::Message { message, related: None };
                        if !output.write(reply).await {
                            session.transport_closed("the transport is gone");
                        }
                    }
                    None => {
                        input_open = false;
                        if !until_idle {
                            session.transport_closed("the client went away");
                        }
                    }
                }
            }
            () = ended.cancelled(), if input_open => {
                input_open = false;
                session.transport_closed("the session ended");
            }
            () = stream_cancel.cancelled(), if stream_open => {
                stream_open = false;
                if let Some((id, _)) = &cancelled {
                    session.stream_closed(id);
                }
            }
            Some(command) = commands.recv() => match command {
                // Everything sent for the request before is written by now (transmits are
                // written before the next command is read).
                Command::CloseStream { id, generation, reply } => {
                    let legacy = book.running(&id, generation).is_some_and(|r| !r.modern);
                    let _ = reply.send(legacy && output.close_stream(&id).await);
                }
                command => apply(&mut session, command, &mut book),
            },
            change = changes.recv() => match change {
                Ok(Change::List(kind)) => { let _ = session.notify_list_changed(kind); }
                Ok(Change::Updated(uri)) => {
                    // A legacy subscription was allowed when it was made; the URIs of listen
                    // streams are checked against the hook here.
                    let legacy = book.subscriptions.contains(&uri);
                    if legacy || crate::registry::may_subscribe(&shared, &uri, principal_of(&origin)) {
                        let _ = session.notify_resource_updated(&uri, legacy);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
                        let _ = session.notify_list_changed(kind);
                    }
                }
                Err(broadcast::error::RecvError::Closed) => {}
            },
            () = timer => session.handle_timeout(Instant::now()),
        }
    }
    // The connection is over: every handler still running is cancelled.
    book.end();
    #[cfg(feature = "stdio")]
    if let Output::Lines(sink) = &mut output {
        let _ = sink.shutdown().await;
    }
}

/// Runs a connection on a line-framed byte stream the driver writes itself until its input
/// ends.
#[cfg(feature = "stdio")]
pub(crate) async fn run_lines(
    shared: Arc<Shared>,
    input: mpsc::Receiver<Input>,
    sink: Box<dyn Sink>,
) {
    let lifetime = Lifetime::Connection {
        ended: CancellationToken::new(),
    };
    run(
        shared,
        input,
        Output::Lines(sink),
        Origin::default(),
        lifetime,
    )
    .await;
}

fn apply(session: &mut ServerSession, command: Command, book: &mut Book) {
    match command {
        Command::Respond {
            id,
            generation,
            answer,
        } => {
            // Only this start's entry: a newer request with the same id keeps its own.
            if book.running(&id, generation).is_some() {
                book.running.remove(&id);
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
                Ok(result) => match serde_json::value::to_raw_value(&result) {
                    Ok(raw) => session.respond_to(&id, generation, raw),
                    Err(e) => session.respond_error_to(
                        &id,
                        generation,
                        internal(format!("unserializable result: {e}")),
                    ),
                },
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
                        Question {
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

fn internal(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, message)
}

fn on_event(
    shared: &Arc<Shared>,
    session: &mut ServerSession,
    event: Event,
    book: &mut Book,
    commands: &mpsc::Sender<Command>,
    origin: &Origin,
) {
    match event {
        Event::Request(request) => start(shared, session, request, book, commands, origin),
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
        Event::Cancelled { id, .. } => {
            if let Some(request) = book.running.remove(&id) {
                request.cancelled.cancel();
            }
        }
        Event::Closed(_) => book.end(),
        _ => {}
    }
}

/// The authenticated principal of the HTTP request the connection's input came in, if any.
fn principal_of(origin: &Origin) -> Option<&str> {
    #[cfg(feature = "http")]
    {
        origin
            .http
            .as_ref()
            .and_then(|h| h.principal())
            .map(|p| p.0.as_str())
    }
    #[cfg(not(feature = "http"))]
    {
        let _ = origin;
        None
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
        "resources/subscribe" => true,
        "resources/unsubscribe" => false,
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
    if subscribe && !crate::registry::may_subscribe(shared, &uri, principal_of(origin)) {
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
    request: IncomingRequest,
    book: &mut Book,
    commands: &mpsc::Sender<Command>,
    origin: &Origin,
) {
    let generation = request.generation;
    if let Some(answer) = subscription(shared, &request, book, origin) {
        let id = request.id.clone();
        let respond = Command::Respond {
            id,
            generation,
            answer,
        };
        return apply(session, respond, book);
    }
    let modern = request.meta.is_some();
    let mut runner = match route(shared, &request) {
        Route::Now(answer) => {
            let id = request.id.clone();
            let list = request.method.ends_with("/list");
            let answer = answer.map(|mut result| {
                if let (true, true, Some(hint)) = (modern, list, &shared.settings.list_cache) {
                    result["ttlMs"] = Value::from(hint.ttl_ms);
                    result["cacheScope"] = Value::from(hint.scope.as_str());
                }
                with_server_info(shared, result, modern)
            });
            let respond = Command::Respond {
                id,
                generation,
                answer,
            };
            return apply(session, respond, book);
        }
        Route::Run(runner) => runner,
    };
    let principal = principal_of(origin).map(str::to_owned);
    // Every handler-backed request the limits name is counted (finding 25), not only tool calls.
    let permit = if shared.settings.limits.covers(&request.method) {
        match shared.limiter.admit(principal.as_deref()) {
            Ok(permit) => Some(permit),
            Err(error) => {
                return refuse(session, book, &request, error);
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
                return refuse(session, book, &request, error);
            }
        }
    }
    let cancelled = CancellationToken::new();
    let (client_info, client_capabilities) = match &request.meta {
        Some(meta) => (
            meta.client_info.clone(),
            Some(meta.client_capabilities.clone()),
        ),
        None => {
            let peer = session.peer();
            (
                peer.as_ref().and_then(|p| p.info.clone()),
                peer.and_then(|p| p.capabilities),
            )
        }
    };
    let context = Context {
        inner: Arc::new(Inner {
            id: request.id.clone(),
            generation,
            method: request.method.clone(),
            version: request.version,
            client_info,
            client_capabilities,
            progress_token: request.progress_token.clone(),
            last_progress: Mutex::new(None),
            cancelled: cancelled.clone(),
            commands: commands.clone(),
            mrtr,
            modern,
            #[cfg(feature = "http")]
            http: origin.http.clone(),
            state: shared.state.clone(),
        }),
    };
    book.running.insert(
        request.id.clone(),
        Running {
            cancelled,
            modern,
            generation,
        },
    );
    let id = request.id;
    let counted = shared.clone();
    let mut handler = Box::pin(async move {
        let _running = crate::registry::Counted::new(&counted.load.handlers);
        runner(context).await
    });
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
        Ok(std::task::Poll::Ready(answer)) => {
            Some(answer.map(|result| with_server_info(shared, result, modern)))
        }
        Err(_) => Some(Err(internal(
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
        if commands.capacity() == commands.max_capacity() {
            apply(session, respond, book);
        } else {
            // The handler queued messages (progress, logs) before its answer: the answer goes
            // after them, through the same queue.
            let commands = commands.clone();
            if let Err(mpsc::error::TrySendError::Full(respond)) = commands.try_send(respond) {
                tokio::spawn(async move { commands.send(respond).await });
            }
        }
        return;
    }
    let commands = commands.clone();
    let shared = shared.clone();
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
            Some(answer) => answer.map(|result| with_server_info(&shared, result, modern)),
            None => Err(internal("the handler failed unexpectedly (it panicked)")),
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
) {
    let id = request.id.clone();
    apply(
        session,
        Command::Respond {
            id,
            generation: request.generation,
            answer: Err(error),
        },
        book,
    );
}

/// A modern result carries the server's `Implementation` in `_meta`.
fn with_server_info(shared: &Shared, mut result: Value, modern: bool) -> Value {
    if modern && let Value::Object(object) = &mut result {
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(meta) = meta {
            meta.entry("io.modelcontextprotocol/serverInfo")
                .or_insert_with(|| shared.config.server_info.clone());
        }
    }
    result
}
