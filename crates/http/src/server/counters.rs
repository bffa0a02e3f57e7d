//! What an endpoint has open, counted as it opens and closes: for the gauges of an application.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The legacy sessions and SSE streams an endpoint holds now, counted by the transport where they
/// open and close (atomics: read without a lock or an await, as a metrics callback needs), and
/// back to zero once they have all ended. Clones share the counts: give the same counters to
/// several endpoints ([`McpApp::counters`](super::McpApp::counters)) to count them together.
///
/// The size of the event store is its own to tell:
/// [`EventStore::events_held`](crate::event_store::EventStore::events_held).
#[derive(Debug, Clone, Default)]
pub struct Counters(Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    sessions: AtomicUsize,
    streams: AtomicUsize,
}

impl Counters {
    /// Counters at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Legacy HTTP sessions held in the endpoint's table: opened by `initialize` or adopted
    /// ([`McpApp::adopt_session`](super::McpApp::adopt_session)), those of the deprecated
    /// HTTP+SSE transport included, until they end or are forgotten here. A 2026-07-28 request
    /// opens none: that era has no sessions.
    pub fn sessions(&self) -> usize {
        self.0.sessions.load(Ordering::Acquire)
    }

    /// SSE streams open, of both eras: legacy POST response streams, standalone GET streams
    /// and the streams GET resumes, streams of the deprecated HTTP+SSE transport, and
    /// 2026-07-28 request streams (a `subscriptions/listen` stream among them). A stream counts
    /// from when its response is made until its body is dropped: it ended, the server shut
    /// down, or the client went away (its connection closed).
    pub fn streams(&self) -> usize {
        self.0.streams.load(Ordering::Acquire)
    }

    /// Whether `self` and `other` share their counts.
    pub fn same(&self, other: &Counters) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// One more session held (placed in a table, under its lock).
    pub(crate) fn session_opened(&self) {
        self.0.sessions.fetch_add(1, Ordering::AcqRel);
    }

    /// One session fewer (taken out of its table, under its lock).
    pub(crate) fn session_closed(&self) {
        self.0.sessions.fetch_sub(1, Ordering::AcqRel);
    }

    /// One more stream open, until the guard is dropped.
    pub(crate) fn stream(&self) -> OpenStream {
        self.0.streams.fetch_add(1, Ordering::AcqRel);
        OpenStream(self.clone())
    }
}

/// One open stream, counted in [`Counters::streams`] while it lives (held by the stream's body).
#[derive(Debug)]
pub(crate) struct OpenStream(Counters);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.0.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_across_clones_and_a_stream_counts_while_its_guard_lives() {
        let counters = Counters::new();
        let shared = counters.clone();
        assert!(counters.same(&shared));
        assert!(!counters.same(&Counters::new()));
        let one = counters.stream();
        let two = shared.stream();
        assert_eq!(counters.streams(), 2);
        drop(one);
        assert_eq!(shared.streams(), 1);
        drop(two);
        assert_eq!(counters.streams(), 0);
        counters.session_opened();
        shared.session_opened();
        assert_eq!(counters.sessions(), 2);
        counters.session_closed();
        assert_eq!(shared.sessions(), 1);
    }
}
