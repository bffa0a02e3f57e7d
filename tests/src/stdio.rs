//! A session driven over a stdio line transport, for the end-to-end tests of `modelctx-stdio`
//! (the facades bring the real drivers): a server loop ([`serve`]) that the test server binary
//! runs over its stdin and stdout, and a client ([`Client`]) that runs a child process.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Instant;

use modelctx_session::{
    ClientConfig, ClientSession, Event, IncomingRequest, RequestError, ServerSession, Transmit,
};
use modelctx_stdio::{ChildTransport, LineReader, LineWriter, Shutdown, is_closed};
use modelctx_types::{ErrorObject, JsonObject, RequestId};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// What a request handler returns.
pub type Reply = Result<Value, ErrorObject>;

/// A request handler: runs as its own task, so a slow one delays no other request.
pub type Handler = std::sync::Arc<
    dyn Fn(IncomingRequest) -> Pin<Box<dyn Future<Output = Reply> + Send>> + Send + Sync,
>;

/// How a [`serve`] loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Stdin ended and every request in flight was answered and flushed.
    InputClosed,
    /// Stdout was closed by the client.
    OutputClosed,
}

/// Sleeps until `deadline`; forever without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Writes what the session transmits into the writer's buffer.
fn feed_transmits<W: AsyncWrite + Unpin>(
    writer: &mut LineWriter<W>,
    mut next: impl FnMut() -> Option<Transmit>,
) -> io::Result<()> {
    while let Some(transmit) = next() {
        match transmit {
            Transmit::Message { message, .. } => writer.feed(&message)?,
            Transmit::Batch(messages) => writer.feed(&messages)?,
            // Over stdio, the modern cancellation is the notification.
            Transmit::Cancel { notification, .. } => writer.feed(&notification)?,
            _ => {}
        }
    }
    Ok(())
}

/// Runs `session` over `reader`/`writer` until stdin ends (after answering everything in
/// flight) or stdout closes. Handlers run as tasks; a cancelled request's task is aborted.
pub async fn serve<R, W>(
    mut session: ServerSession,
    mut reader: LineReader<R>,
    mut writer: LineWriter<W>,
    handler: Handler,
) -> io::Result<Ended>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(RequestId, Reply)>();
    let mut tasks: HashMap<RequestId, JoinHandle<()>> = HashMap::new();
    let mut input_open = true;
    loop {
        let deadline = session.poll_timeout().map(tokio::time::Instant::from_std);
        tokio::select! {
            line = reader.next_line(), if input_open => match line {
                Ok(Some(first)) => {
                    // Everything this read brought, then one flush for all the answers.
                    let now = Instant::now();
                    let mut next = Some(first);
                    while let Some(item) = next {
                        match item {
                            Ok(line) => session.handle_bytes(now, line.as_bytes()),
                            Err(error) => {
                                feed_transmits(&mut writer, || session.poll_transmit())?;
                                writer.feed(&error.to_error_response())?;
                            }
                        }
                        next = reader.next_buffered();
                    }
                }
                Ok(None) | Err(_) => input_open = false,
            },
            Some((id, reply)) = done_rx.recv() => {
                tasks.remove(&id);
                let raw = reply.and_then(|value| {
                    RawValue::from_string(value.to_string())
                        .map_err(|e| ErrorObject::new(modelctx_types::ErrorCode::INTERNAL_ERROR, e.to_string()))
                });
                // A request cancelled or closed meanwhile is no longer in flight: nothing to do.
                let _ = match raw {
                    Ok(raw) => session.respond(&id, raw),
                    Err(error) => session.respond_error(&id, error),
                };
            }
            () = until(deadline) => session.handle_timeout(Instant::now()),
        }
        while let Some(event) = session.poll_event() {
            match event {
                Event::Request(request) => {
                    let id = request.id.clone();
                    let done = done_tx.clone();
                    let work = handler(request);
                    let task_id = id.clone();
                    tasks.insert(
                        id,
                        tokio::spawn(async move {
                            let reply = work.await;
                            let _ = done.send((task_id, reply));
                        }),
                    );
                }
                Event::Cancelled { id, .. } => {
                    if let Some(task) = tasks.remove(&id) {
                        task.abort();
                    }
                }
                _ => {}
            }
        }
        feed_transmits(&mut writer, || session.poll_transmit())?;
        if let Err(error) = writer.flush().await {
            for (_, task) in tasks.drain() {
                task.abort();
            }
            session.transport_closed("stdout closed");
            return if is_closed(&error) {
                Ok(Ended::OutputClosed)
            } else {
                Err(error)
            };
        }
        if !input_open && tasks.is_empty() {
            session.transport_closed("stdin closed");
            return Ok(Ended::InputClosed);
        }
    }
}

/// A command for the client's driver task.
enum Command {
    Request {
        method: String,
        params: Option<JsonObject>,
        reply: oneshot::Sender<Result<Value, RequestError>>,
    },
    Shutdown(oneshot::Sender<io::Result<Shutdown>>),
}

/// A client session over a child process, driven by a task of its own.
pub struct Client {
    commands: mpsc::UnboundedSender<Command>,
    events: mpsc::UnboundedReceiver<Event>,
    driver: JoinHandle<()>,
}

impl Client {
    /// Starts the driver over `child`, connects and waits until the session is ready.
    pub async fn connect(config: ClientConfig, child: ChildTransport) -> Result<Client, String> {
        let (commands, command_rx) = mpsc::unbounded_channel();
        let (event_tx, mut events) = mpsc::unbounded_channel();
        let driver = tokio::spawn(drive_client(
            ClientSession::new(config),
            child,
            command_rx,
            event_tx,
        ));
        loop {
            match events.recv().await {
                Some(Event::Ready(_)) => break,
                Some(Event::Closed(reason)) => return Err(reason.to_string()),
                Some(_) => {}
                None => return Err("the driver ended".into()),
            }
        }
        Ok(Client {
            commands,
            events,
            driver,
        })
    }

    /// Sends a request and waits for its outcome.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, RequestError> {
        let (reply, rx) = oneshot::channel();
        let params = params.map(|p| match p {
            Value::Object(map) => map,
            other => panic!("params must be an object: {other}"),
        });
        self.commands
            .send(Command::Request {
                method: method.into(),
                params,
                reply,
            })
            .map_err(|_| RequestError::Closed(modelctx_session::CloseReason::Local))?;
        rx.await.unwrap_or(Err(RequestError::Closed(
            modelctx_session::CloseReason::Local,
        )))
    }

    /// The next event the session reported besides responses (notifications, unreadable
    /// input, the close).
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// Stops the child as the spec asks and reports how it ended.
    pub async fn shutdown(self) -> io::Result<Shutdown> {
        let (tx, rx) = oneshot::channel();
        let _ = self.commands.send(Command::Shutdown(tx));
        let report = rx
            .await
            .unwrap_or_else(|_| Err(io::Error::other("the driver ended")));
        let _ = self.driver.await;
        report
    }
}

async fn drive_client(
    mut session: ClientSession,
    child: ChildTransport,
    mut commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::UnboundedSender<Event>,
) {
    let ChildTransport {
        mut reader,
        mut writer,
        mut process,
        ..
    } = child;
    let mut pending: HashMap<RequestId, oneshot::Sender<Result<Value, RequestError>>> =
        HashMap::new();
    let mut shutdown: Option<oneshot::Sender<io::Result<Shutdown>>> = None;
    let _ = session.connect(Instant::now());
    let mut output_open = true;
    // When the process exited while its stdout is still open (a grandchild may hold it): the
    // moment to stop waiting for the rest of its output.
    let mut exit_deadline: Option<tokio::time::Instant> = None;
    loop {
        // What `connect` queued, or what the last input produced.
        let written = feed_transmits(&mut writer, || session.poll_transmit());
        if written.is_ok() && output_open {
            let _ = writer.flush().await;
        }
        let deadline = session.poll_timeout().map(tokio::time::Instant::from_std);
        tokio::select! {
            line = reader.next_line(), if output_open => match line {
                Ok(Some(first)) => {
                    let now = Instant::now();
                    let mut next = Some(first);
                    while let Some(item) = next {
                        match item {
                            Ok(line) => session.handle_bytes(now, line.as_bytes()),
                            // A client logs and drops a bad line.
                            Err(error) => tracing::warn!("dropped a line from the server: {error}"),
                        }
                        next = reader.next_buffered();
                    }
                }
                Ok(None) | Err(_) => {
                    // The child's stdout ended: it is exiting (or has). Fail everything now,
                    // naming its exit status when it comes quickly.
                    output_open = false;
                    let _ = tokio::time::timeout(
                        std::time::Duration::from_millis(500),
                        process.wait(),
                    )
                    .await;
                    session.transport_closed(process.describe_exit());
                }
            },
            _ = process.wait(), if output_open && exit_deadline.is_none() => {
                // It exited; what it wrote before is still read until its stdout ends, for a
                // short while.
                exit_deadline = Some(tokio::time::Instant::now() + std::time::Duration::from_millis(500));
            }
            () = until(exit_deadline), if output_open => {
                output_open = false;
                session.transport_closed(process.describe_exit());
            }
            command = commands.recv(), if shutdown.is_none() => match command {
                Some(Command::Request { method, params, reply }) => {
                    match session.send_request(Instant::now(), &method, params) {
                        Ok(id) => {
                            pending.insert(id, reply);
                        }
                        Err(error) => {
                            let _ = reply.send(Err(RequestError::Closed(
                                modelctx_session::CloseReason::Transport(error.to_string()),
                            )));
                        }
                    }
                }
                Some(Command::Shutdown(reply)) => shutdown = Some(reply),
                None => return,
            },
            () = until(deadline) => session.handle_timeout(Instant::now()),
        }
        while let Some(event) = session.poll_event() {
            match event {
                Event::Response { id, result, .. } => {
                    if let Some(reply) = pending.remove(&id) {
                        let value = serde_json::from_str(result.get()).unwrap_or(Value::Null);
                        let _ = reply.send(Ok(value));
                    }
                }
                Event::Failed { id, error, .. } => {
                    if let Some(reply) = pending.remove(&id) {
                        let _ = reply.send(Err(error));
                    }
                }
                other => {
                    let _ = events.send(other);
                }
            }
        }
        if let Some(reply) = shutdown.take() {
            session.close();
            while session.poll_event().is_some() {}
            drop(reader);
            let report = process.shutdown(writer).await;
            let _ = reply.send(report);
            return;
        }
    }
}
