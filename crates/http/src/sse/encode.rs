//! Server-sent events, written: the framing of one event, and the response body that streams them.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::server::counters::OpenStream;

/// One event: `id:` when given, the data in `data:` lines (a JSON message has no line breaks,
/// but any are split correctly), and the blank line that ends it.
pub(crate) fn event(id: Option<&str>, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 32);
    if let Some(id) = id {
        out.put_slice(b"id: ");
        out.put_slice(id.as_bytes());
        out.put_u8(b'\n');
    }
    if data.is_empty() {
        out.put_slice(b"data:\n");
    }
    for line in data.split(|&b| b == b'\n').filter(|_| !data.is_empty()) {
        out.put_slice(b"data: ");
        out.put_slice(line.strip_suffix(b"\r").unwrap_or(line));
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
    out.freeze()
}

/// The priming event of a 2025-11-25 stream: its first event id with empty data, and the delay
/// the client waits before reconnecting.
pub(crate) fn priming(id: &str, retry: Duration) -> Bytes {
    let mut out = BytesMut::new();
    out.put_slice(b"id: ");
    out.put_slice(id.as_bytes());
    out.put_slice(format!("\nretry: {}\ndata:\n\n", retry.as_millis()).as_bytes());
    out.freeze()
}

/// A comment line, sent on idle streams so that proxies keep them open.
pub(crate) const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// The response body of a stream: frames from a bounded channel, keep-alive comments while it is
/// idle, and an end when the channel closes or the server shuts down. Dropping it (the client
/// went away) fires `dropped`. Counted in the endpoint's open streams while it lives
/// ([`counted`](Self::counted)).
pub(crate) struct StreamBody {
    rx: mpsc::Receiver<Bytes>,
    keep_alive: Option<tokio::time::Interval>,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    dropped: Option<CancellationToken>,
    first: Option<Bytes>,
    _open: Option<OpenStream>,
}

impl StreamBody {
    pub(crate) fn new(
        first: Option<Bytes>,
        rx: mpsc::Receiver<Bytes>,
        keep_alive: Option<Duration>,
        shutdown: CancellationToken,
        dropped: Option<CancellationToken>,
    ) -> Self {
        let keep_alive = keep_alive.map(|every| {
            let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval
        });
        StreamBody {
            rx,
            keep_alive,
            shutdown: Box::pin(shutdown.cancelled_owned()),
            dropped,
            first,
            _open: None,
        }
    }

    /// The body, counted as one open stream (`open`) until it is dropped.
    pub(crate) fn counted(mut self, open: OpenStream) -> Self {
        self._open = Some(open);
        self
    }
}

impl Body for StreamBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(bytes)) => {
                if let Some(interval) = self.keep_alive.as_mut() {
                    interval.reset();
                }
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            Poll::Ready(None) => {
                // Ended by the server, not dropped by the client.
                self.dropped = None;
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        if self.shutdown.as_mut().poll(cx).is_ready() {
            self.dropped = None;
            return Poll::Ready(None);
        }
        if let Some(interval) = self.keep_alive.as_mut()
            && interval.poll_tick(cx).is_ready()
        {
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(KEEP_ALIVE)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        false
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        if let Some(dropped) = self.dropped.take() {
            dropped.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_framed() {
        assert_eq!(
            &event(Some("3-1"), br#"{"a":1}"#)[..],
            b"id: 3-1\ndata: {\"a\":1}\n\n"
        );
        assert_eq!(&event(None, b"x\ny")[..], b"data: x\ndata: y\n\n");
        assert_eq!(&event(Some("1-0"), b"")[..], b"id: 1-0\ndata:\n\n");
        assert_eq!(
            &priming("1-0", Duration::from_millis(1500))[..],
            b"id: 1-0\nretry: 1500\ndata:\n\n"
        );
    }
}
