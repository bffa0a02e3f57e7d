//! The bottom of the transports: the events a transport hands the driver, and the two
//! directions of a channel transport (in memory, or the tasks of a line-framed stream).

use std::time::Duration;

use modelctx_session::Transmit;
use modelctx_types::{Incoming, Message, RequestId};

use crate::error::TransportError;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The size of the queues between the driver and a transport's tasks.
pub(crate) const QUEUE: usize = 256;
/// The messages that may wait for a channel transport's writer: twice the session's requests in
/// flight (1024 each way), so that a burst of calls and answers never finds it full while the
/// server reads; a server that stops reading fills it only as calls time out (each leaves a
/// cancellation behind and makes room for another call).
pub(crate) const OUT_QUEUE: usize = 2048;
/// How long a write to the server may wait before the connection is taken for dead (default of
/// [`ClientBuilder::write_timeout`](crate::ClientBuilder::write_timeout)).
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a transport hands the driver.
#[derive(Debug)]
pub(crate) enum LinkEvent {
    /// A message (or a 2025-03-26 batch).
    Message(Incoming),
    /// Something that is not JSON-RPC, or a line that could not be read.
    #[cfg_attr(not(any(feature = "http", feature = "stdio")), allow(dead_code))]
    Unreadable(crate::notify::Unreadable),
    /// Request `id` got no MCP answer and will get none.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    RequestFailed {
        id: RequestId,
        error: TransportError,
    },
    /// The server ended the legacy HTTP session.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    SessionEnded,
    /// A listen stream broke and was opened again by the transport.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    ListenReopened { id: RequestId, wire: RequestId },
    /// The server's request `request` came on the response stream of our requests `during`:
    /// it belongs to them (sent just before the message that carries it).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    AskedDuring {
        request: RequestId,
        during: Vec<RequestId>,
    },
    /// Worth a log line, nothing more.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Note(String),
    /// An answer of ours to the server's request was lost: the server waits for it in vain.
    /// Worth a warning.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    AnswerLost(String),
    /// The transport ended; holds why.
    Closed(String),
}

/// The two directions of a channel transport, and the tasks that serve them.
pub(crate) struct Channels {
    /// Bounded ([`OUT_QUEUE`]) and never waited on: the driver must not wait on a writer (which
    /// could wait on the driver reading), so a message that finds it full is not sent (a
    /// request fails at once). A writer that waits longer than the write timeout on a server
    /// that does not read ends the connection.
    pub(crate) out: Option<mpsc::Sender<Incoming>>,
    pub(crate) inbox: mpsc::Receiver<LinkEvent>,
    pub(crate) tasks: Vec<JoinHandle<()>>,
    pub(crate) ended: bool,
}

impl Drop for Channels {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Channels {
    /// The next event; after [`LinkEvent::Closed`], never returns.
    pub(crate) async fn recv(&mut self) -> LinkEvent {
        if self.ended {
            return std::future::pending().await;
        }
        match self.inbox.recv().await {
            Some(LinkEvent::Closed(why)) => {
                self.ended = true;
                LinkEvent::Closed(why)
            }
            Some(event) => event,
            None => {
                self.ended = true;
                LinkEvent::Closed("the server's channel closed".into())
            }
        }
    }

    /// Queues one transmit for the writer, never waiting. An `Err` names the request that could
    /// not be sent, if it was one.
    pub(crate) fn send(
        &mut self,
        transmit: Transmit,
    ) -> Result<(), (Option<RequestId>, TransportError)> {
        let incoming = match transmit {
            Transmit::Message { message, .. } => Incoming::Single(message),
            Transmit::Batch(messages) => Incoming::Batch(messages.into_iter().map(Ok).collect()),
            // Without streams to close, the modern cancellation is the notification.
            Transmit::Cancel { notification, .. } => Incoming::Single(notification.into()),
            _ => return Ok(()),
        };
        let id = match &incoming {
            Incoming::Single(Message::Request(r)) => Some(r.id.clone()),
            _ => None,
        };
        let Some(out) = &self.out else {
            return Err((id, TransportError::Closed));
        };
        out.try_send(incoming).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                (id, TransportError::NotReading { queued: OUT_QUEUE })
            }
            mpsc::error::TrySendError::Closed(_) => (id, TransportError::Closed),
        })
    }

    /// Channels to a peer that takes `out` and yields into `inbox`.
    pub(crate) fn new(out: mpsc::Sender<Incoming>, inbox: mpsc::Receiver<LinkEvent>) -> Self {
        Channels {
            out: Some(out),
            inbox,
            tasks: Vec::new(),
            ended: false,
        }
    }
}

/// Forwards what the driver writes to a peer's bounded input, waiting on it at most
/// `write_timeout` per message; beyond, the connection is taken for dead ([`LinkEvent::Closed`]
/// on `events`).
pub(crate) fn feed(
    to: mpsc::Sender<Incoming>,
    events: mpsc::Sender<LinkEvent>,
    write_timeout: Duration,
) -> (mpsc::Sender<Incoming>, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel(OUT_QUEUE);
    let task = tokio::spawn(async move {
        while let Some(incoming) = rx.recv().await {
            match tokio::time::timeout(write_timeout, to.send(incoming)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    let why = format!(
                        "the server took no message for {write_timeout:?}: the connection is taken for dead"
                    );
                    let _ = events.send(LinkEvent::Closed(why)).await;
                    return;
                }
            }
        }
    });
    (tx, task)
}

/// Forwards what a peer yields on `from` as link events on `events` (for in-memory transports).
pub(crate) fn forward<T>(
    mut from: mpsc::Receiver<T>,
    events: mpsc::Sender<LinkEvent>,
) -> JoinHandle<()>
where
    T: Into<Incoming> + Send + 'static,
{
    tokio::spawn(async move {
        while let Some(item) = from.recv().await {
            if events.send(LinkEvent::Message(item.into())).await.is_err() {
                return;
            }
        }
        let _ = events
            .send(LinkEvent::Closed("the server's channel closed".into()))
            .await;
    })
}
