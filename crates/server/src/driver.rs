//! The driver of one connection: a protocol session, the transport's input and output, and the
//! handlers it runs, each on its own task.
//!
//! A stdio connection, a legacy HTTP session and a modern HTTP request each get one driver.
//! The driver is the only owner of its `ServerSession`: handlers talk to it through a bounded
//! command channel, so a slow handler never holds anything another request needs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use modelctx_session::{Event, LogLevel, ServerSession, Transmit};
use modelctx_types::{ErrorCode, ErrorObject, Incoming, Message, RequestId};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::context::{Context, Inner};
use crate::server::{Change, Route, Shared, route};

/// What the transport hands the driver.
#[derive(Debug)]
pub(crate) enum Input {
    /// A message or batch, and the HTTP request it came in (legacy HTTP sessions).
    Incoming(Incoming, Option<Origin>),
    /// Bytes that are not JSON-RPC.
    Unreadable(Vec<u8>),
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
}

impl Output {
    /// Writes one transmit; false when the transport is gone.
    async fn write(&self, transmit: Transmit) -> bool {
        match (self, transmit) {
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
            // A server sends no batches or cancellations of its own requests on these.
            #[allow(unreachable_patterns)]
            _ => true,
        }
    }
}

/// What handlers ask of the driver.
#[derive(Debug)]
pub(crate) enum Command {
    /// A handler finished.
    Respond {
        id: RequestId,
        answer: Result<Value, ErrorObject>,
    },
    /// Progress on a request.
    Progress {
        id: RequestId,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// A log message about a request.
    Log {
        id: RequestId,
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
}

/// Runs one connection until its input ends and nothing is left to answer.
///
/// `until_idle`: a modern HTTP request's driver, which ends once its request is answered rather
/// than closing the session when the input ends.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut input: mpsc::Receiver<Input>,
    output: Output,
    mut origin: Origin,
    until_idle: bool,
    cancelled: Option<(RequestId, CancellationToken)>,
    ended: CancellationToken,
) {
    let mut session = ServerSession::new(shared.config.clone());
    let (commands_tx, mut commands) = mpsc::channel::<Command>(256);
    let mut changes = shared.changes.subscribe();
    let running: Arc<Mutex<HashMap<RequestId, Running>>> = Arc::default();
    let mut input_open = true;
    let stream_cancel = cancelled
        .as_ref()
        .map(|(_, t)| t.clone())
        .unwrap_or_default();
    let mut stream_open = cancelled.is_some();

    loop {
        // Everything the session has to say, then what it asks of us.
        loop {
            let mut busy = false;
            while let Some(transmit) = session.poll_transmit() {
                busy = true;
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
                    &running,
                    &commands_tx,
                    &origin,
                );
            }
            if !busy {
                break;
            }
        }
        if session.is_closed() {
            break;
        }
        if !input_open
            && until_idle
            && session.table_sizes().incoming == 0
            && lock(&running).is_empty()
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
                        }
                        session.handle_incoming(now, incoming);
                    }
                    Some(Input::Unreadable(bytes)) => session.handle_bytes(now, &bytes),
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
            Some(command) = commands.recv() => apply(&mut session, command, &running),
            change = changes.recv() => match change {
                Ok(Change::List(kind)) => { let _ = session.notify_list_changed(kind); }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    for kind in [modelctx_session::ListKind::Tools, modelctx_session::ListKind::Prompts, modelctx_session::ListKind::Resources] {
                        let _ = session.notify_list_changed(kind);
                    }
                }
                Err(broadcast::error::RecvError::Closed) => {}
            },
            () = timer => session.handle_timeout(Instant::now()),
        }
    }
    // The connection is over: every handler still running is cancelled.
    for (_, request) in lock(&running).drain() {
        request.cancelled.cancel();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn apply(
    session: &mut ServerSession,
    command: Command,
    running: &Mutex<HashMap<RequestId, Running>>,
) {
    match command {
        Command::Respond { id, answer } => {
            lock(running).remove(&id);
            let sent = match answer {
                Ok(result) => match serde_json::value::to_raw_value(&result) {
                    Ok(raw) => session.respond(&id, raw),
                    Err(e) => {
                        session.respond_error(&id, internal(format!("unserializable result: {e}")))
                    }
                },
                Err(error) => session.respond_error(&id, error),
            };
            if let Err(e) = sent {
                // Cancelled meanwhile, or refused by the protocol rules: say so in the logs.
                tracing::debug!(%id, error = %e, "a handler's answer was not sent");
            }
        }
        Command::Progress {
            id,
            progress,
            total,
            message,
        } => {
            let _ = session.notify_progress(&id, progress, total, message.as_deref());
        }
        Command::Log {
            id,
            level,
            logger,
            data,
        } => {
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
    running: &Arc<Mutex<HashMap<RequestId, Running>>>,
    commands: &mpsc::Sender<Command>,
    origin: &Origin,
) {
    match event {
        Event::Request(request) => {
            let route = route(shared, &request);
            match route {
                Route::Now(answer) => apply(
                    session,
                    Command::Respond {
                        id: request.id.clone(),
                        answer,
                    },
                    running,
                ),
                Route::Run(runner) => {
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
                            method: request.method.clone(),
                            version: request.version,
                            client_info,
                            client_capabilities,
                            progress_token: request.progress_token.clone(),
                            last_progress: Mutex::new(None),
                            cancelled: cancelled.clone(),
                            commands: commands.clone(),
                            #[cfg(feature = "http")]
                            http: origin.http.clone(),
                        }),
                    };
                    let _ = origin;
                    lock(running).insert(request.id.clone(), Running { cancelled });
                    let id = request.id;
                    let commands = commands.clone();
                    let handler = tokio::spawn(runner(context));
                    tokio::spawn(async move {
                        let answer = match handler.await {
                            Ok(answer) => answer,
                            Err(e) if e.is_panic() => Err(internal(
                                "the tool failed unexpectedly (its handler panicked)",
                            )),
                            Err(_) => Err(internal("the tool's task was stopped")),
                        };
                        let _ = commands.send(Command::Respond { id, answer }).await;
                    });
                }
            }
        }
        Event::Cancelled { id, .. } => {
            if let Some(request) = lock(running).remove(&id) {
                request.cancelled.cancel();
            }
        }
        Event::Closed(_) => {
            for (_, request) in lock(running).drain() {
                request.cancelled.cancel();
            }
        }
        _ => {}
    }
}
