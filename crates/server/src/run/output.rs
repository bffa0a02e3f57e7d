//! Where a connection's output goes: [`Output`], implemented by each transport for its own
//! writer (the message channels here, the line stream in `transport`, the HTTP streams in
//! `http`).

use std::future::Future;

use modelctx_session::Transmit;
use modelctx_types::{Incoming, Message, RequestId};
use tokio::sync::mpsc;

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

impl Frame {
    /// The frame a transmit is written as: a server's cancellation of its own request is a
    /// notification like any other.
    pub(crate) fn of(transmit: Transmit) -> Option<Frame> {
        match transmit {
            Transmit::Message { message, .. } => Some(Frame::Single(message)),
            Transmit::Batch(messages) => Some(Frame::Batch(messages)),
            Transmit::Cancel { notification, .. } => Some(Frame::Single(notification.into())),
            _ => None,
        }
    }
}

/// The writing end of one connection (or of one modern HTTP request).
///
/// A buffering output (a line stream) encodes in [`write`](Output::write) and writes in
/// [`flush`](Output::flush): the driver flushes when it has nothing else to do, so many answers
/// go out with one system call under load. The defaults suit an output that writes at once.
pub(crate) trait Output: Send {
    /// Writes one transmit; false when the transport is gone.
    fn write(&mut self, transmit: Transmit) -> impl Future<Output = bool> + Send;

    /// Closes the connection of request `id`'s stream when the transport can resume it
    /// (legacy HTTP), telling whether it did. Default: it cannot.
    fn close_stream(&mut self, id: &RequestId) -> impl Future<Output = bool> + Send {
        let _ = id;
        std::future::ready(false)
    }

    /// The session read the peer's cancellation of request `id` (it will not be answered): a
    /// transport that waits for its answer lets it go (legacy HTTP:
    /// `LegacySession::release`). Default: nothing waits.
    fn release(&mut self, id: &RequestId) -> impl Future<Output = ()> + Send {
        let _ = id;
        std::future::ready(())
    }

    /// How many bytes are encoded and not yet written. Default: none (nothing is buffered).
    fn buffered(&self) -> usize {
        0
    }

    /// Writes what is buffered. Default: nothing to do.
    fn flush(&mut self) -> impl Future<Output = std::io::Result<()>> + Send {
        std::future::ready(Ok(()))
    }

    /// Writes what is buffered and ends the output, once the connection is over. Default:
    /// nothing to do (dropping the output ends it).
    fn shutdown(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// A transport that frames messages itself (in-memory, custom): frames on a channel.
impl Output for mpsc::Sender<Frame> {
    async fn write(&mut self, transmit: Transmit) -> bool {
        match Frame::of(transmit) {
            Some(frame) => self.send(frame).await.is_ok(),
            None => true,
        }
    }
}
