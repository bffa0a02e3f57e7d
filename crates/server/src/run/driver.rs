//! The connection driver: one task that owns a [`Conn`] for as long as its connection lives
//! (stdio, in-memory channels, a legacy HTTP session), feeds it the transport's input, the
//! handlers' commands, the server's changes and the session's timers, and writes what it has to
//! send on an [`Output`].
//!
//! The driver is the only owner of its `ServerSession`: handlers talk to it through a bounded
//! command channel, so a slow handler never holds anything another request needs. A modern HTTP
//! request gets no driver unless its handler waits (see `crate::http`).

use std::future::Future;
use std::time::Instant;

use modelctx_session::Transmit;
use modelctx_types::{Incoming, Message};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::command::Command;
use super::output::Output;
use super::runner::{Conn, Origin};
use crate::registry::Change;

/// What the transport hands the driver.
#[derive(Debug)]
pub(crate) enum Input {
    /// A message or batch.
    Incoming(Incoming),
    /// The log level a later POST of a legacy session set (`logging/setLevel`), for its
    /// requests that wait.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    LogLevel(Option<modelctx_session::LogLevel>),
    /// The HTTP client of the POST that carried this request of a legacy session went away
    /// (`LegacyHandler::abandoned`): it is cancelled as the client's cancellation would.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Abandoned(modelctx_types::RequestId),
    /// Bytes that are not JSON-RPC.
    #[cfg_attr(not(feature = "stdio"), allow(dead_code))]
    Unreadable(Vec<u8>),
    /// A message to write as it is: the transport's own answer to a line it could not read
    /// (too long, not UTF-8).
    #[cfg_attr(not(feature = "stdio"), allow(dead_code))]
    Reply(Message),
}

/// Where a driver's input comes from. `next` must be cancel-safe: the driver waits on it next
/// to its other sources and drops it when one of them is ready first.
pub(crate) trait Source: Send {
    /// The next input; `None` once the input has ended.
    fn next(&mut self) -> impl Future<Output = Option<Input>> + Send;

    /// Whether more input is ready at once, with no I/O: the driver then reads it before it
    /// writes what it has buffered (one write for many answers under load).
    fn has_ready(&mut self) -> bool;
}

/// Input handed over by another task (in-memory channels; later POSTs of a legacy HTTP session
/// for its requests that wait).
impl Source for mpsc::Receiver<Input> {
    fn next(&mut self) -> impl Future<Output = Option<Input>> + Send {
        self.recv()
    }

    fn has_ready(&mut self) -> bool {
        !self.is_empty()
    }
}

/// No input at all: the rest of one modern request, whose message was handled already.
#[cfg(feature = "http")]
pub(crate) struct NoInput;

#[cfg(feature = "http")]
impl Source for NoInput {
    fn next(&mut self) -> impl Future<Output = Option<Input>> + Send {
        std::future::ready(None)
    }

    fn has_ready(&mut self) -> bool {
        false
    }
}

/// How long a driver runs.
pub(crate) enum Lifetime {
    /// Until the input ends or `ended` fires (stdio, in-memory, a legacy HTTP session); then the
    /// session closes and every handler still running is cancelled.
    Connection { ended: CancellationToken },
    /// Until its one request is answered (a modern HTTP request whose handler waits): the end
    /// of the input closes nothing, and `cancelled` (the request's id and its response stream's
    /// token) cancels it.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Request {
        cancelled: Option<(modelctx_types::RequestId, CancellationToken)>,
    },
    /// Until the requests it runs are answered (those of one POST on a legacy HTTP session
    /// whose handlers wait), reading the input meanwhile: the client's answers to questions
    /// asked for them and their cancellations, which come in later POSTs. `ended` (the end
    /// of the session) cancels them.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Requests { ended: CancellationToken },
}

/// Runs `future` on a task of its own, on the runtime's workers, until it ends; aborted if the
/// future this returns is dropped, and its panic goes on as this future's.
#[cfg(feature = "stdio")]
pub(crate) async fn run_on_task<F>(future: F)
where
    F: Future<Output = ()> + Send + 'static,
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

/// Writes everything the connection has to say, handling the events between (which may make
/// more to say).
async fn drain<O: Output>(conn: &mut Conn, output: &mut O, origin: &Origin) {
    loop {
        let mut busy = false;
        while let Some(transmit) = conn.next_transmit() {
            busy = true;
            if !output.write(transmit).await {
                conn.session.transport_closed("the transport is gone");
            }
        }
        busy |= conn.handle_events(origin);
        for id in conn.take_released() {
            output.release(&id).await;
        }
        if !busy {
            return;
        }
    }
}

/// Runs `conn` for its [`Lifetime`] on `input` and `output`; `changes` (the server's change
/// broadcast, subscribed to by the caller before the connection's first input) feeds the
/// session's listeners, `None` when the connection has none.
pub(crate) async fn run<I: Source, O: Output>(
    mut conn: Conn,
    mut input: I,
    mut output: O,
    origin: Origin,
    lifetime: Lifetime,
    changes: Option<broadcast::Receiver<Change>>,
) {
    let (until_idle, reads, cancelled, ended) = match lifetime {
        Lifetime::Connection { ended } => (false, true, None, ended),
        Lifetime::Request { cancelled } => (true, false, cancelled, CancellationToken::new()),
        Lifetime::Requests { ended } => (true, true, None, ended),
    };
    let listening = changes.is_some();
    let mut changes = changes;
    let mut input_open = reads;
    let stream_cancel = cancelled
        .as_ref()
        .map(|(_, t)| t.clone())
        .unwrap_or_default();
    let mut stream_open = cancelled.is_some();
    // Whether a buffering output still takes writes.
    let mut writable = true;

    loop {
        // Everything the session has to say, then what it asks of us.
        drain(&mut conn, &mut output, &origin).await;
        // Everything said is encoded: written before waiting for more input, or once much is
        // buffered; while more input is already ready, it is read first (one write for many
        // answers under load).
        if writable
            && output.buffered() > 0
            && (!input_open || !input.has_ready() || output.buffered() >= 64 * 1024)
            && output.flush().await.is_err()
        {
            writable = false;
            conn.session.transport_closed("the transport is gone");
            continue;
        }
        if conn.session.is_closed() {
            break;
        }
        if until_idle && conn.is_idle() {
            break;
        }
        let deadline = conn.session.poll_timeout();
        let timer = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            item = input.next(), if input_open => {
                let now = Instant::now();
                match item {
                    Some(Input::Incoming(incoming)) => conn.session.handle_incoming(now, incoming),
                    Some(Input::LogLevel(level)) => conn.session.set_log_level(level),
                    Some(Input::Abandoned(id)) => {
                        conn.session.stream_closed(&id);
                    }
                    Some(Input::Unreadable(bytes)) => conn.session.handle_bytes(now, &bytes),
                    Some(Input::Reply(message)) => {
                        let reply = Transmit::Message { message, related: None };
                        if !output.write(reply).await {
                            conn.session.transport_closed("the transport is gone");
                        }
                    }
                    None => {
                        input_open = false;
                        conn.session.transport_closed("the client went away");
                    }
                }
            }
            () = ended.cancelled(), if input_open => {
                input_open = false;
                conn.session.transport_closed("the session ended");
            }
            () = stream_cancel.cancelled(), if stream_open => {
                stream_open = false;
                if let Some((id, _)) = &cancelled {
                    conn.session.stream_closed(id);
                }
            }
            Some(command) = conn.next_command() => match command {
                // Everything sent for the request before is written by now (transmits are
                // written before the next command is read).
                Command::CloseStream { id, generation, reply } => {
                    let legacy = conn.close_stream_allowed(&id, generation);
                    let _ = reply.send(legacy && output.close_stream(&id).await);
                }
                command => conn.apply(command),
            },
            change = async {
                match &mut changes {
                    Some(changes) => changes.recv().await,
                    None => std::future::pending().await,
                }
            }, if listening => conn.on_change(change, &origin),
            () = timer => conn.session.handle_timeout(Instant::now()),
        }
    }
    // The connection is over: every handler still running is cancelled.
    conn.end();
    output.shutdown().await;
}
