//! The store of SSE events for legacy (`initialize`-based) HTTP sessions.
//!
//! A legacy HTTP session may have several SSE streams open at once: one per POSTed request
//! that the server answers with `text/event-stream`, plus the streams opened by GET. Every event
//! the server writes on such a stream is first appended here and carries the [`EventId`] the
//! store hands back. When the connection drops, the stream does not end: the handler runs on
//! (a dropped connection is not a cancellation) and its output keeps going into the store. The
//! client comes back with a GET and a `Last-Event-ID` header, and the server asks
//! [`EventStore::replay_after`] (or [`EventStore::follow`], for a stream this process does not
//! hold) for exactly the events of *that* stream that follow the id, never another stream's,
//! and never with a silent gap.
//!
//! # Ids
//!
//! The server picks the [`StreamId`] (unique within its session, numbered from
//! [`EventStore::stream_base`], so that server instances sharing one store never pick the same
//! one); the store assigns the sequence number ([`MemoryEventStore`]: one counter per session,
//! so that ids say nothing of other sessions' traffic). An [`EventId`] is written
//! `"{stream}-{seq}"` in decimal, which is visible ASCII and names the originating stream, as
//! the specification asks. Parsing accepts only what [`Display`](fmt::Display) writes, so an id
//! from the wire is either one we could have issued or an error.
//!
//! # Exactness
//!
//! [`EventStore::replay_after`] either returns every event of the stream after the given id, in
//! order, or an error: [`ReplayError::Unknown`] when the session, the stream or the id is not
//! one the store knows, [`ReplayError::Gone`] when events after the id were evicted, and
//! [`ReplayError::Unavailable`] or [`ReplayError::Failed`] when the store could not answer. The
//! caller refuses the resumption in every case rather than resume with a hole in the stream.
//!
//! # Errors
//!
//! Every method can fail with an [`EventStoreError`], whose [`kind`](EventStoreError::kind)
//! tells a store that cannot be reached or did not answer in time
//! ([`EventStoreErrorKind::Unavailable`]: the transport answers 503, the client retries) from
//! any other failure ([`EventStoreErrorKind::Failed`]). [`MemoryEventStore`] never fails.
//!
//! # The in-memory store
//!
//! [`MemoryEventStore`] is the bounded default, for one process. See [`MemoryEventStoreConfig`]
//! for its retention rules; every table it keeps has a bound, and
//! [`EventStore::remove_session`] frees everything a session holds.
//!
//! # Checking a store
//!
//! With feature `testing`, the module `conformance` holds the contract of [`EventStore`] as async
//! functions that take any store (they panic on a breach, like assertions): every
//! implementation runs them in its tests.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::future::{Future, ready};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use modelctx_types::RequestId;
use tokio::sync::mpsc;

#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod conformance;

/// A boxed, sendable future, the return type of every [`EventStore`] method (and the crate's
/// one alias for it: `McpService`'s `tower::Service::Future` is one too).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The time source of a [`MemoryEventStore`] (injectable so that tests control time).
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// One SSE stream within an HTTP session, chosen by the server.
///
/// Written in decimal. The server must never reuse a stream id within a session: the store
/// treats everything appended under one id as one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u64);

impl StreamId {
    /// The stream id with this number.
    pub const fn new(id: u64) -> Self {
        Self(id)
    }

    /// The number of this stream id.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for StreamId {
    type Err = ParseIdError;

    /// Accepts only the canonical decimal form that [`Display`](fmt::Display) writes: ASCII
    /// digits, no sign, no leading zero (except `"0"` itself), no overflow.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_canonical_u64(s).map(Self).ok_or(ParseIdError(()))
    }
}

/// The id of one SSE event: the stream it belongs to and its sequence number.
///
/// Written `"{stream}-{seq}"`, e.g. `"3-17"`. Sequence numbers are assigned by the store and
/// increase along each stream; an id is never issued twice within a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId {
    /// The stream the event was sent on.
    pub stream: StreamId,
    /// The event's sequence number.
    pub seq: u64,
}

impl EventId {
    /// The id of event `seq` of `stream`.
    pub const fn new(stream: StreamId, seq: u64) -> Self {
        Self { stream, seq }
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.stream.0, self.seq)
    }
}

impl FromStr for EventId {
    type Err = ParseIdError;

    /// Accepts only what [`Display`](fmt::Display) writes: two canonical decimal numbers (no
    /// sign, no leading zero, no overflow) joined by one `-`. Never panics.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (stream, seq) = s.split_once('-').ok_or(ParseIdError(()))?;
        let stream = parse_canonical_u64(stream).ok_or(ParseIdError(()))?;
        let seq = parse_canonical_u64(seq).ok_or(ParseIdError(()))?;
        Ok(Self::new(StreamId(stream), seq))
    }
}

/// A string that is not an id this module writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a valid event or stream id")]
pub struct ParseIdError(());

/// The longest decimal form of a `u64` (`18446744073709551615`).
const MAX_U64_DIGITS: usize = 20;

/// Parses the canonical decimal form of a `u64`, rejecting everything else.
fn parse_canonical_u64(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    match bytes {
        [] => None,
        [b'0'] => Some(0),
        [b'0', ..] => None,
        _ if bytes.len() > MAX_U64_DIGITS => None,
        _ if bytes.iter().all(u8::is_ascii_digit) => s.parse().ok(),
        _ => None,
    }
}

/// What kind of failure an [`EventStoreError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventStoreErrorKind {
    /// The store could not be reached, or did not answer in time (a store over the network
    /// puts a timeout on every call). It may answer again later: the transport answers 503
    /// with `Retry-After`, and the client tries again.
    Unavailable,
    /// Any other failure (the store answered with an error or with something it could not
    /// read).
    Failed,
}

impl fmt::Display for EventStoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unavailable => "unavailable",
            Self::Failed => "failed",
        })
    }
}

/// An [`EventStore`] operation that did not complete: its [kind](EventStoreErrorKind) and its
/// cause, kept (see [`std::error::Error::source`]).
///
/// An operation that fails did not happen, as far as the caller can tell: an `append` that
/// fails issued no id the caller may send (the event may still be stored, under an id nobody
/// learns). The `Display` text is for logs; it is not stable.
#[derive(Debug, thiserror::Error)]
#[error("the event store {kind}: {source}")]
#[non_exhaustive]
pub struct EventStoreError {
    kind: EventStoreErrorKind,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl EventStoreError {
    /// The store could not be reached or did not answer in time
    /// ([`EventStoreErrorKind::Unavailable`]), because of `source`.
    pub fn unavailable(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::new(EventStoreErrorKind::Unavailable, source)
    }

    /// The store failed otherwise ([`EventStoreErrorKind::Failed`]), because of `source`.
    pub fn failed(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::new(EventStoreErrorKind::Failed, source)
    }

    /// An error of `kind` caused by `source`.
    pub fn new(
        kind: EventStoreErrorKind,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self {
            kind,
            source: source.into(),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> EventStoreErrorKind {
        self.kind
    }

    /// Whether the store was unreachable or too slow ([`EventStoreErrorKind::Unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        self.kind == EventStoreErrorKind::Unavailable
    }
}

/// Why [`EventStore::replay_after`] or [`EventStore::follow`] cannot resume a stream exactly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The session or the stream is not known to the store, or the id was never issued on that
    /// stream (for instance a sequence number beyond the last one issued).
    #[error("unknown session, stream or event id")]
    Unknown,
    /// Events that followed the id were evicted, so the stream can no longer be resumed
    /// without a gap.
    #[error("events after this id are no longer stored")]
    Gone,
    /// The store could not be reached or did not answer in time (an error of kind
    /// [`EventStoreErrorKind::Unavailable`]): whether the stream can be resumed is not known
    /// now, and may be once the store answers again.
    #[error("cannot tell now: {0}")]
    Unavailable(#[source] EventStoreError),
    /// The store failed otherwise (an error of any other kind).
    #[error("cannot tell: {0}")]
    Failed(#[source] EventStoreError),
}

impl From<EventStoreError> for ReplayError {
    /// [`ReplayError::Unavailable`] for an error of kind [`EventStoreErrorKind::Unavailable`],
    /// [`ReplayError::Failed`] for any other.
    fn from(error: EventStoreError) -> Self {
        if error.is_unavailable() {
            Self::Unavailable(error)
        } else {
            Self::Failed(error)
        }
    }
}

/// What [`EventStore::follow`] found: the stored events after the id, whether the stream is
/// complete, and (from a store shared by several processes) the events still to come.
#[derive(Debug)]
#[non_exhaustive]
pub struct Follow {
    /// Every stored event of the stream after the id, in order (what
    /// [`EventStore::replay_after`] returns).
    pub events: Vec<(EventId, Bytes)>,
    /// The stream was finished ([`EventStore::finish_stream`]) before these events were read:
    /// they are its last, and nothing more will come.
    pub done: bool,
    /// The stream's later events, when the store carries them live (a store shared by
    /// several server instances, for a stream another instance writes): each event appended
    /// after `events`, in order, exactly once, with no gap and none of `events` again. The
    /// channel closes after the stream's last event once it is finished, or earlier when the
    /// store stops following it (the client resumes again from the last id it got). `None`
    /// when `done`, and from a store that does not carry live events ([`MemoryEventStore`]):
    /// the server, which holds every stream of its sessions, takes the stream over itself.
    pub rest: Option<mpsc::Receiver<(EventId, Bytes)>>,
}

impl Follow {
    /// The stored `events` after the id, the stream finished (`done`) or not, with no live
    /// channel.
    pub fn new(events: Vec<(EventId, Bytes)>, done: bool) -> Self {
        Self {
            events,
            done,
            rest: None,
        }
    }

    /// With `rest`, the channel of the events still to come (see [`Follow::rest`]).
    pub fn with_rest(mut self, rest: mpsc::Receiver<(EventId, Bytes)>) -> Self {
        self.rest = Some(rest);
        self
    }
}

/// How much a store holds, for metrics and for tests that check it returns to empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreSizes {
    /// Sessions the store knows: those with a stream entry or a standalone stream, and (in
    /// [`MemoryEventStore`]) those it keeps the sequence counter of until
    /// [`EventStore::remove_session`].
    pub sessions: usize,
    /// Stream entries, including streams opened with no event yet and streams whose events
    /// were all evicted but which are still remembered so that a resumption gets
    /// [`ReplayError::Gone`].
    pub streams: usize,
    /// Stored events.
    pub events: usize,
    /// Bytes of stored event data.
    pub bytes: usize,
}

impl StoreSizes {
    /// Whether the store holds nothing at all.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Where the SSE events of legacy HTTP sessions are kept for resumption.
///
/// Pluggable: the server holds an `Arc<dyn EventStore>` ([`MemoryEventStore`] by default).
/// Every method but [`stream_base`](Self::stream_base) returns a boxed future so that an
/// implementation may do I/O (a store shared by several server instances, such as Redis); an
/// implementation must not hold a lock across an await point.
///
/// # The life of a stream
///
/// The server numbers a session's streams from [`stream_base`](Self::stream_base). When a
/// stream turns to SSE it calls [`open_stream`](Self::open_stream), then
/// [`append`](Self::append) for each event (the first may be an empty priming event), and
/// [`finish_stream`](Self::finish_stream) once its last response is appended. The standalone
/// (GET) stream of a session is recorded with [`set_standalone`](Self::set_standalone). A GET
/// with `Last-Event-ID` reads [`replay_after`](Self::replay_after) or
/// [`follow`](Self::follow). When the session ends, [`remove_session`](Self::remove_session)
/// forgets all of it.
///
/// # What an implementation must guarantee
///
/// * **Ids.** Sequence numbers strictly increase along each stream, and an [`EventId`] is
///   never issued twice within a session (until the session is removed).
/// * **Exactly once.** A replay after an id returns every stored event of that stream after
///   it, in order, each once, and nothing of another stream or session; if it cannot (the id
///   is not one it issued, or a later event was evicted) it fails with [`ReplayError::Unknown`]
///   or [`ReplayError::Gone`], never with a shorter list. [`Follow::rest`] continues a
///   replay with no gap and no repeat.
/// * **Bounds.** Everything it keeps is bounded (events per session or stream, bytes, age),
///   and [`remove_session`](Self::remove_session) frees everything a session holds: the
///   events, the streams, what `open_stream`, `finish_stream` and `set_standalone` recorded.
/// * **Errors.** A failed call returns an [`EventStoreError`]:
///   [`EventStoreErrorKind::Unavailable`] when the store cannot be reached or did not answer
///   in time (every call of a networked store has a timeout, so none waits forever),
///   [`EventStoreErrorKind::Failed`] otherwise.
///
/// `conformance` (feature `testing`) checks these guarantees against any implementation.
pub trait EventStore: Send + Sync + 'static {
    /// Where this server instance starts numbering the streams of each session: its stream
    /// ids are `stream_base() + n`. A store used by one process returns 0
    /// ([`MemoryEventStore`]); a store shared by several server instances gives each one a
    /// base of its own with room for 2^32 streams per session (instance `N`: `N << 32`), so
    /// that two instances never open the same stream of a session, and the stream id tells
    /// which instance opened it. Constant for the life of the store.
    fn stream_base(&self) -> u64;

    /// Records that `stream` of `session` opened, with `pending`, the requests whose responses
    /// will complete it (empty for a standalone stream). The server calls it when the stream
    /// turns to SSE, before its first [`append`](Self::append). A store shared by instances
    /// keeps `pending` so that, should the instance writing the stream stop, the stream can be
    /// completed with an error for each; a store of one process may ignore it (its streams
    /// end with it). Opening a stream the store knows already changes nothing.
    fn open_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
        pending: &'a [RequestId],
    ) -> BoxFuture<'a, Result<(), EventStoreError>>;

    /// Stores `data`, the payload of one event on `stream` of `session`, and returns the id to
    /// send with it. The store assigns the sequence number: it increases along the stream, and
    /// the id is unique within the session. A store may open a stream it does not know
    /// ([`MemoryEventStore`] does).
    fn append<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
        data: Bytes,
    ) -> BoxFuture<'a, Result<EventId, EventStoreError>>;

    /// Records that `stream` of `session` is complete: its last event is stored, and nothing
    /// more will be appended. The server calls it after the stream's last response. A stream
    /// the store does not know (never opened, or forgotten) is left alone.
    fn finish_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
    ) -> BoxFuture<'a, Result<(), EventStoreError>>;

    /// Every stored event of `after.stream` whose sequence number is greater than `after.seq`,
    /// in order. [`ReplayError::Unknown`] when the session, the stream or the id is unknown;
    /// [`ReplayError::Gone`] when events after `after` were evicted;
    /// [`ReplayError::Unavailable`] or [`ReplayError::Failed`] when the store could not
    /// answer. An empty vector means the client has seen everything the stream produced so
    /// far.
    fn replay_after<'a>(
        &'a self,
        session: &'a str,
        after: &'a EventId,
    ) -> BoxFuture<'a, Result<Vec<(EventId, Bytes)>, ReplayError>>;

    /// What [`replay_after`](Self::replay_after) returns, whether the stream is finished, and
    /// (from a store that carries live events) a channel of the events still to come: see
    /// [`Follow`]. The server calls it for a GET with `Last-Event-ID` naming a stream it does
    /// not hold itself (another instance opened it). Fails as `replay_after` does.
    fn follow<'a>(
        &'a self,
        session: &'a str,
        after: &'a EventId,
    ) -> BoxFuture<'a, Result<Follow, ReplayError>>;

    /// Records `stream` as the standalone (GET) stream of `session`, or, with `None`, that
    /// none is open. The server calls it when a GET opens the standalone stream and when that
    /// stream closes, so that an instance with a message for the standalone stream learns who
    /// holds it.
    fn set_standalone<'a>(
        &'a self,
        session: &'a str,
        stream: Option<StreamId>,
    ) -> BoxFuture<'a, Result<(), EventStoreError>>;

    /// The standalone stream of `session` last recorded by
    /// [`set_standalone`](Self::set_standalone), if any (`None` once the session is removed).
    fn standalone<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, Result<Option<StreamId>, EventStoreError>>;

    /// Forgets `stream` of `session` and all its events.
    fn remove_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
    ) -> BoxFuture<'a, Result<(), EventStoreError>>;

    /// Forgets `session`: all its streams, all their events, what was recorded of them and its
    /// standalone stream. The server calls it when the session ends (DELETE, idle or handshake
    /// timeout, eviction, shutdown).
    fn remove_session<'a>(&'a self, session: &'a str)
    -> BoxFuture<'a, Result<(), EventStoreError>>;

    /// How much the store holds now.
    fn sizes(&self) -> BoxFuture<'_, Result<StoreSizes, EventStoreError>>;

    /// The events the store holds now, across sessions and streams, when it can tell at once:
    /// read from a metrics callback (a gauge), so it must not block, wait for I/O or hold a lock
    /// for long. [`MemoryEventStore`] counts its events (after evicting those past their age);
    /// a store kept elsewhere (shared by several instances) answers from what it has at hand or
    /// `None`. Default: `None` (not known; a gauge reports nothing).
    fn events_held(&self) -> Option<usize> {
        None
    }
}

/// The retention rules of a [`MemoryEventStore`].
///
/// Eviction always drops a session's oldest events first: for the per-session limits, the
/// session's own; for the global one, those of the session holding the most bytes (the one
/// most over its fair share of `max_total_bytes`), so that one busy session cannot evict the
/// others' events while it holds more than they do; and everything older than `max_age`.
/// Sizes count event data only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEventStoreConfig {
    /// Most events kept per session (default 1024). Also bounds how many streams with no
    /// stored event a session remembers: those whose events were all evicted (so that
    /// resuming them reports [`ReplayError::Gone`] rather than [`ReplayError::Unknown`]) and
    /// those opened ([`EventStore::open_stream`]) with no event yet; the oldest are forgotten
    /// first.
    pub max_events_per_session: usize,
    /// Most bytes of event data kept per session (default 4 MiB).
    pub max_bytes_per_session: usize,
    /// Most bytes of event data kept across all sessions (default 64 MiB).
    pub max_total_bytes: usize,
    /// How long an event is kept (default 5 minutes); an event whose age reaches `max_age` is
    /// evicted. A stream whose events were all evicted is remembered for `max_age` more, and
    /// so is a stream opened with no event, from when it opened.
    pub max_age: Duration,
}

impl Default for MemoryEventStoreConfig {
    fn default() -> Self {
        Self {
            max_events_per_session: 1024,
            max_bytes_per_session: 4 * 1024 * 1024,
            max_total_bytes: 64 * 1024 * 1024,
            max_age: Duration::from_secs(5 * 60),
        }
    }
}

/// The bounded in-memory [`EventStore`], the default.
///
/// All work happens under one `std::sync::Mutex` when a method is called (the returned future
/// is already complete); ages are checked lazily on every call using the store's clock.
/// Sequence numbers come from one counter per session, so that ids reveal nothing of other
/// sessions' traffic. The store keeps that counter (a few bytes) until
/// [`EventStore::remove_session`], even after all the session's events were evicted, so an id
/// is never issued twice within a session; the server calls `remove_session` when a session
/// ends.
pub struct MemoryEventStore {
    inner: Mutex<Inner>,
    clock: Clock,
}

impl fmt::Debug for MemoryEventStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryEventStore")
            .field("config", &self.lock().config)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryEventStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryEventStore {
    /// A store with the default retention rules and the system clock.
    pub fn new() -> Self {
        Self::with_config(MemoryEventStoreConfig::default())
    }

    /// A store with these retention rules and the system clock.
    pub fn with_config(config: MemoryEventStoreConfig) -> Self {
        Self {
            inner: Mutex::new(Inner::new(config)),
            clock: Arc::new(Instant::now),
        }
    }

    /// Replaces the clock used to age events (for deterministic tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The retention rules of this store.
    pub fn config(&self) -> MemoryEventStoreConfig {
        self.lock().config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing under this lock panics; should a poisoned lock ever be seen, the tables are
        // still consistent between operations, so carry on with them.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The clock is read before locking so that a panicking clock cannot poison the lock.
    fn now(&self) -> Instant {
        (self.clock)()
    }

    fn append_now(&self, session: &str, stream: StreamId, data: Bytes) -> EventId {
        let now = self.now();
        self.lock().append(now, session, stream, data)
    }

    fn open_now(&self, session: &str, stream: StreamId) {
        let now = self.now();
        self.lock().open(now, session, stream);
    }

    fn finish_now(&self, session: &str, stream: StreamId) {
        let now = self.now();
        self.lock().finish(now, session, stream);
    }

    fn replay_now(&self, session: &str, after: &EventId) -> Result<Vec<(EventId, Bytes)>, Miss> {
        let now = self.now();
        self.lock().replay_after(now, session, after)
    }

    fn follow_now(&self, session: &str, after: &EventId) -> Result<Follow, Miss> {
        let now = self.now();
        let mut inner = self.lock();
        let events = inner.replay_after(now, session, after)?;
        Ok(Follow::new(events, inner.finished(session, after.stream)))
    }

    fn set_standalone_now(&self, session: &str, stream: Option<StreamId>) {
        let now = self.now();
        self.lock().set_standalone(now, session, stream);
    }

    fn standalone_now(&self, session: &str) -> Option<StreamId> {
        self.lock()
            .sessions
            .get(session)
            .and_then(|entry| entry.standalone)
    }

    fn remove_stream_now(&self, session: &str, stream: StreamId) {
        let now = self.now();
        self.lock().remove_stream(now, session, stream);
    }

    fn remove_session_now(&self, session: &str) {
        let now = self.now();
        self.lock().remove_session(now, session);
    }

    fn sizes_now(&self) -> StoreSizes {
        let now = self.now();
        self.lock().sizes(now)
    }
}

/// The calls of [`MemoryEventStore`] complete under its lock: each returns a future that is
/// already done, and none fails.
impl EventStore for MemoryEventStore {
    /// 0: one process numbers its streams from 0.
    fn stream_base(&self) -> u64 {
        0
    }

    /// Remembers the stream as one with no event yet (under the same bound and age as a
    /// stream whose events were all evicted), so that it counts in [`StoreSizes::streams`]
    /// and can be finished before its first event. `pending` is not kept: this store's
    /// streams end with the process that writes them.
    fn open_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
        _pending: &'a [RequestId],
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        self.open_now(session, stream);
        Box::pin(ready(Ok(())))
    }

    fn append<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
        data: Bytes,
    ) -> BoxFuture<'a, Result<EventId, EventStoreError>> {
        Box::pin(ready(Ok(self.append_now(session, stream, data))))
    }

    fn finish_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        self.finish_now(session, stream);
        Box::pin(ready(Ok(())))
    }

    fn replay_after<'a>(
        &'a self,
        session: &'a str,
        after: &'a EventId,
    ) -> BoxFuture<'a, Result<Vec<(EventId, Bytes)>, ReplayError>> {
        Box::pin(ready(self.replay_now(session, after).map_err(Into::into)))
    }

    /// [`Follow::rest`] is always `None`: the server of this process holds the stream itself.
    fn follow<'a>(
        &'a self,
        session: &'a str,
        after: &'a EventId,
    ) -> BoxFuture<'a, Result<Follow, ReplayError>> {
        Box::pin(ready(self.follow_now(session, after).map_err(Into::into)))
    }

    fn set_standalone<'a>(
        &'a self,
        session: &'a str,
        stream: Option<StreamId>,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        self.set_standalone_now(session, stream);
        Box::pin(ready(Ok(())))
    }

    fn standalone<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, Result<Option<StreamId>, EventStoreError>> {
        Box::pin(ready(Ok(self.standalone_now(session))))
    }

    fn remove_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        self.remove_stream_now(session, stream);
        Box::pin(ready(Ok(())))
    }

    fn remove_session<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        self.remove_session_now(session);
        Box::pin(ready(Ok(())))
    }

    fn sizes(&self) -> BoxFuture<'_, Result<StoreSizes, EventStoreError>> {
        Box::pin(ready(Ok(self.sizes_now())))
    }

    /// [`StoreSizes::events`], now: under the store's lock, after evicting the events past
    /// their age.
    fn events_held(&self) -> Option<usize> {
        Some(self.sizes_now().events)
    }
}

/// Why the tables of a [`MemoryEventStore`] cannot replay: the two [`ReplayError`]s it gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Miss {
    Unknown,
    Gone,
}

impl From<Miss> for ReplayError {
    fn from(miss: Miss) -> Self {
        match miss {
            Miss::Unknown => Self::Unknown,
            Miss::Gone => Self::Gone,
        }
    }
}

/// Where an entry of the global age/size order lives.
#[derive(Debug)]
struct Loc {
    /// When the event was appended (for a remembered empty stream: when it became empty).
    at: Instant,
    session: Arc<str>,
    stream: StreamId,
    /// The event's sequence number in its session (unused for a remembered empty stream).
    seq: u64,
}

/// The tables of a [`MemoryEventStore`].
///
/// Invariants between operations:
/// - `events` holds exactly the stored events of all sessions, keyed by their append order
///   across the store (never shown to clients); `bytes` is the sum of their sizes.
/// - `tombs` holds exactly the remembered streams without events, keyed by the order they
///   became empty.
/// - every stream entry has events or is remembered in `tombs`, never both. A session entry
///   stays, even without streams, until `remove_session`: it holds the session's sequence
///   counter, so that an id is never issued twice within a session.
#[derive(Debug)]
struct Inner {
    config: MemoryEventStoreConfig,
    sessions: HashMap<Arc<str>, SessionEntry>,
    events: BTreeMap<u64, Loc>,
    tombs: BTreeMap<u64, Loc>,
    bytes: usize,
    /// The last key issued in `events` (the append order across the store).
    last_order: u64,
    /// The last key issued in `tombs`.
    last_tomb: u64,
}

#[derive(Debug)]
struct SessionEntry {
    key: Arc<str>,
    streams: HashMap<StreamId, StreamEntry>,
    /// The last sequence number issued in this session (finding 26: one counter per session,
    /// so that ids reveal nothing of other sessions' traffic).
    last_seq: u64,
    /// The session's stored events in append order: sequence number to stream and key in the
    /// store-wide order.
    events: BTreeMap<u64, (StreamId, u64)>,
    /// The session's remembered empty streams, oldest first.
    tombs: BTreeMap<u64, StreamId>,
    bytes: usize,
    /// The standalone stream last recorded ([`EventStore::set_standalone`]).
    standalone: Option<StreamId>,
}

#[derive(Debug)]
struct StreamEntry {
    /// The first sequence number issued on this stream entry.
    first_seq: u64,
    /// The last sequence number issued on this stream entry.
    last_seq: u64,
    /// The highest evicted sequence number of this stream (0 if none). Eviction takes the
    /// oldest first, so every event of the stream up to here is gone and every one after it
    /// is still in `events`.
    evicted_upto: u64,
    /// The stored events, in order of sequence number.
    events: VecDeque<(u64, Bytes)>,
    /// The key in the `tombs` tables while the stream has no stored events.
    tomb: Option<u64>,
    /// The stream is complete ([`EventStore::finish_stream`]).
    finished: bool,
}

impl Inner {
    fn new(config: MemoryEventStoreConfig) -> Self {
        Self {
            config,
            sessions: HashMap::new(),
            events: BTreeMap::new(),
            tombs: BTreeMap::new(),
            bytes: 0,
            last_order: 0,
            last_tomb: 0,
        }
    }

    fn append(&mut self, now: Instant, session: &str, stream: StreamId, data: Bytes) -> EventId {
        self.expire(now);
        // 2^64 events will not be reached, and saturating keeps this free of overflow panics
        // regardless.
        self.last_order = self.last_order.saturating_add(1);
        let order = self.last_order;
        let len = data.len();

        let entry = Self::session_entry(&mut self.sessions, session);
        let key = Arc::clone(&entry.key);
        entry.last_seq = entry.last_seq.saturating_add(1);
        let seq = entry.last_seq;
        let st = entry.streams.entry(stream).or_insert_with(|| StreamEntry {
            first_seq: seq,
            last_seq: seq,
            evicted_upto: 0,
            events: VecDeque::new(),
            tomb: None,
            finished: false,
        });
        if let Some(tomb) = st.tomb.take() {
            entry.tombs.remove(&tomb);
            self.tombs.remove(&tomb);
        }
        st.events.push_back((seq, data));
        st.last_seq = seq;
        entry.events.insert(seq, (stream, order));
        entry.bytes = entry.bytes.saturating_add(len);
        self.events.insert(
            order,
            Loc {
                at: now,
                session: key,
                stream,
                seq,
            },
        );
        self.bytes = self.bytes.saturating_add(len);

        // The session's own limits: drop its oldest events.
        while let Some(entry) = self.sessions.get(session) {
            if entry.events.len() <= self.config.max_events_per_session
                && entry.bytes <= self.config.max_bytes_per_session
            {
                break;
            }
            let Some((&oldest, &(oldest_stream, _))) = entry.events.first_key_value() else {
                break;
            };
            if !self.evict(session, oldest_stream, oldest, now) {
                break;
            }
        }
        // The global limit (finding 16): drop the oldest event of the session most over its
        // fair share (the budget divided among the sessions holding events), i.e. the one
        // holding the most bytes; ties go to the session whose oldest event is the oldest.
        // A session within its share loses nothing while another holds more.
        while self.bytes > self.config.max_total_bytes {
            let Some((owner, owner_stream, oldest)) = self.largest_session_oldest() else {
                break;
            };
            if !self.evict(&owner, owner_stream, oldest, now) {
                break;
            }
        }
        EventId::new(stream, seq)
    }

    /// The entry of `session`, made when there is none.
    fn session_entry<'m>(
        sessions: &'m mut HashMap<Arc<str>, SessionEntry>,
        session: &str,
    ) -> &'m mut SessionEntry {
        let key = match sessions.get_key_value(session) {
            Some((key, _)) => Arc::clone(key),
            None => Arc::from(session),
        };
        sessions
            .entry(Arc::clone(&key))
            .or_insert_with(|| SessionEntry {
                key,
                streams: HashMap::new(),
                last_seq: 0,
                events: BTreeMap::new(),
                tombs: BTreeMap::new(),
                bytes: 0,
                standalone: None,
            })
    }

    /// Remembers `stream` of `session`, unless it is known already, as a stream with no event:
    /// no id of it can be replayed until one is appended, and it is bounded and aged as a
    /// stream whose events were all evicted.
    fn open(&mut self, now: Instant, session: &str, stream: StreamId) {
        self.expire(now);
        let entry = Self::session_entry(&mut self.sessions, session);
        if entry.streams.contains_key(&stream) {
            return;
        }
        let last = entry.last_seq;
        entry.streams.insert(
            stream,
            StreamEntry {
                // Every id issued so far is before this stream: none of them is its.
                first_seq: last.saturating_add(1),
                last_seq: last,
                evicted_upto: last,
                events: VecDeque::new(),
                tomb: None,
                finished: false,
            },
        );
        self.bury(session, stream, now);
    }

    /// Marks `stream` of `session` complete, if it is known.
    fn finish(&mut self, now: Instant, session: &str, stream: StreamId) {
        self.expire(now);
        if let Some(st) = self
            .sessions
            .get_mut(session)
            .and_then(|entry| entry.streams.get_mut(&stream))
        {
            st.finished = true;
        }
    }

    /// Whether `stream` of `session` is known and complete.
    fn finished(&self, session: &str, stream: StreamId) -> bool {
        self.sessions
            .get(session)
            .and_then(|entry| entry.streams.get(&stream))
            .is_some_and(|st| st.finished)
    }

    /// Records the standalone stream of `session` (`None`: there is none; a session the
    /// store does not know gets no entry for that).
    fn set_standalone(&mut self, now: Instant, session: &str, stream: Option<StreamId>) {
        self.expire(now);
        match stream {
            Some(_) => Self::session_entry(&mut self.sessions, session).standalone = stream,
            None => {
                if let Some(entry) = self.sessions.get_mut(session) {
                    entry.standalone = None;
                }
            }
        }
    }

    /// The session holding the most bytes (ties: the oldest first event), with its oldest
    /// event's stream and sequence number.
    fn largest_session_oldest(&self) -> Option<(Arc<str>, StreamId, u64)> {
        self.sessions
            .values()
            .filter_map(|entry| {
                let (&seq, &(stream, order)) = entry.events.first_key_value()?;
                Some((
                    entry.bytes,
                    std::cmp::Reverse(order),
                    &entry.key,
                    stream,
                    seq,
                ))
            })
            .max_by_key(|(bytes, order, ..)| (*bytes, *order))
            .map(|(_, _, key, stream, seq)| (Arc::clone(key), stream, seq))
    }

    fn replay_after(
        &mut self,
        now: Instant,
        session: &str,
        after: &EventId,
    ) -> Result<Vec<(EventId, Bytes)>, Miss> {
        self.expire(now);
        let st = self
            .sessions
            .get(session)
            .and_then(|entry| entry.streams.get(&after.stream))
            .ok_or(Miss::Unknown)?;
        let seq = after.seq;
        if seq < st.first_seq || seq > st.last_seq {
            return Err(Miss::Unknown);
        }
        if seq < st.evicted_upto {
            return Err(Miss::Gone);
        }
        // Past the evicted prefix every issued id is still stored: an id that is not there
        // was never issued on this stream.
        if seq > st.evicted_upto && st.events.binary_search_by_key(&seq, |e| e.0).is_err() {
            return Err(Miss::Unknown);
        }
        let start = st.events.partition_point(|e| e.0 <= seq);
        Ok(st
            .events
            .iter()
            .skip(start)
            .map(|(seq, data)| (EventId::new(after.stream, *seq), data.clone()))
            .collect())
    }

    fn remove_stream(&mut self, now: Instant, session: &str, stream: StreamId) {
        self.expire(now);
        let Some(entry) = self.sessions.get_mut(session) else {
            return;
        };
        if let Some(st) = entry.streams.remove(&stream) {
            for (seq, data) in st.events {
                if let Some((_, order)) = entry.events.remove(&seq) {
                    self.events.remove(&order);
                }
                entry.bytes = entry.bytes.saturating_sub(data.len());
                self.bytes = self.bytes.saturating_sub(data.len());
            }
            if let Some(tomb) = st.tomb {
                entry.tombs.remove(&tomb);
                self.tombs.remove(&tomb);
            }
        }
        shrink_map(&mut entry.streams);
    }

    fn remove_session(&mut self, now: Instant, session: &str) {
        self.expire(now);
        if let Some(entry) = self.sessions.remove(session) {
            for (_, order) in entry.events.values() {
                self.events.remove(order);
            }
            for tomb in entry.tombs.keys() {
                self.tombs.remove(tomb);
            }
            self.bytes = self.bytes.saturating_sub(entry.bytes);
        }
        shrink_map(&mut self.sessions);
    }

    fn sizes(&mut self, now: Instant) -> StoreSizes {
        self.expire(now);
        StoreSizes {
            sessions: self.sessions.len(),
            streams: self.sessions.values().map(|s| s.streams.len()).sum(),
            events: self.events.len(),
            bytes: self.bytes,
        }
    }

    /// Evicts everything whose age has reached `max_age`: events, then remembered streams.
    fn expire(&mut self, now: Instant) {
        let max_age = self.config.max_age;
        while let Some((&order, loc)) = self.events.first_key_value() {
            if now.saturating_duration_since(loc.at) < max_age {
                break;
            }
            let (owner, stream, seq) = (Arc::clone(&loc.session), loc.stream, loc.seq);
            if !self.evict(&owner, stream, seq, now) {
                // Not where the order says (cannot happen): drop the order entry regardless,
                // so that this loop progresses.
                self.events.remove(&order);
            }
        }
        while let Some((&tomb, loc)) = self.tombs.first_key_value() {
            if now.saturating_duration_since(loc.at) < max_age {
                break;
            }
            let (owner, stream) = (Arc::clone(&loc.session), loc.stream);
            self.forget_tomb(&owner, stream, tomb);
        }
    }

    /// Evicts event `seq` of `stream` of `session`, which is the stream's oldest stored event.
    /// A stream left without events is remembered (see [`ReplayError::Gone`]). Whether the
    /// event was found.
    fn evict(&mut self, session: &str, stream: StreamId, seq: u64, now: Instant) -> bool {
        let Some(entry) = self.sessions.get_mut(session) else {
            return false;
        };
        let Some((_, order)) = entry.events.remove(&seq) else {
            return false;
        };
        self.events.remove(&order);
        let Some(st) = entry.streams.get_mut(&stream) else {
            return true;
        };
        let removed = if st.events.front().is_some_and(|e| e.0 == seq) {
            st.events.pop_front()
        } else {
            st.events
                .binary_search_by_key(&seq, |e| e.0)
                .ok()
                .and_then(|i| st.events.remove(i))
        };
        if let Some((_, data)) = removed {
            entry.bytes = entry.bytes.saturating_sub(data.len());
            self.bytes = self.bytes.saturating_sub(data.len());
        }
        st.evicted_upto = st.evicted_upto.max(seq);
        if st.events.is_empty() {
            self.bury(session, stream, now);
        } else {
            shrink_deque(&mut st.events);
        }
        true
    }

    /// Remembers `stream` of `session`, which has no stored event, for `max_age` (see
    /// [`ReplayError::Gone`]), and forgets the session's oldest such streams beyond
    /// `max_events_per_session`.
    fn bury(&mut self, session: &str, stream: StreamId, now: Instant) {
        let cap = self.config.max_events_per_session;
        let Some(entry) = self.sessions.get_mut(session) else {
            return;
        };
        let Some(st) = entry.streams.get_mut(&stream) else {
            return;
        };
        st.events = VecDeque::new();
        self.last_tomb = self.last_tomb.saturating_add(1);
        let tomb = self.last_tomb;
        st.tomb = Some(tomb);
        entry.tombs.insert(tomb, stream);
        self.tombs.insert(
            tomb,
            Loc {
                at: now,
                session: Arc::clone(&entry.key),
                stream,
                seq: 0,
            },
        );
        while entry.tombs.len() > cap {
            let Some((old, old_stream)) = entry.tombs.pop_first() else {
                break;
            };
            self.tombs.remove(&old);
            entry.streams.remove(&old_stream);
        }
        shrink_map(&mut entry.streams);
    }

    /// Forgets the remembered empty `stream` of `session` whose tomb key is `tomb`.
    fn forget_tomb(&mut self, session: &str, stream: StreamId, tomb: u64) {
        self.tombs.remove(&tomb);
        let Some(entry) = self.sessions.get_mut(session) else {
            return;
        };
        entry.tombs.remove(&tomb);
        if entry
            .streams
            .get(&stream)
            .is_some_and(|st| st.tomb == Some(tomb) && st.events.is_empty())
        {
            entry.streams.remove(&stream);
            shrink_map(&mut entry.streams);
        }
    }
}

/// Gives memory back once a map is mostly empty (and all of it once it is empty).
fn shrink_map<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    let len = map.len();
    if len == 0 {
        map.shrink_to_fit();
    } else if map.capacity() > 64 && map.capacity() / 4 > len {
        map.shrink_to(len.saturating_mul(2));
    }
}

/// Gives memory back once a queue is mostly empty.
fn shrink_deque<T>(queue: &mut VecDeque<T>) {
    let len = queue.len();
    if queue.capacity() > 16 && queue.capacity() / 4 > len {
        queue.shrink_to(len.saturating_mul(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A clock the test moves by hand, in milliseconds from an arbitrary start.
    fn manual_clock() -> (Clock, Arc<AtomicU64>) {
        let millis = Arc::new(AtomicU64::new(0));
        let base = Instant::now();
        let handle = Arc::clone(&millis);
        let clock: Clock =
            Arc::new(move || base + Duration::from_millis(handle.load(Ordering::SeqCst)));
        (clock, millis)
    }

    fn store(config: MemoryEventStoreConfig) -> (MemoryEventStore, Arc<AtomicU64>) {
        let (clock, millis) = manual_clock();
        (
            MemoryEventStore::with_config(config).with_clock(clock),
            millis,
        )
    }

    fn big() -> MemoryEventStoreConfig {
        MemoryEventStoreConfig {
            max_events_per_session: 1 << 20,
            max_bytes_per_session: 1 << 30,
            max_total_bytes: 1 << 30,
            max_age: Duration::from_secs(3600),
        }
    }

    fn data(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn payloads(v: &[(EventId, Bytes)]) -> Vec<String> {
        v.iter()
            .map(|(_, d)| String::from_utf8_lossy(d).into_owned())
            .collect()
    }

    /// Checks every invariant of the tables.
    fn check(s: &MemoryEventStore) {
        let inner = s.lock();
        let mut events = 0;
        let mut bytes = 0;
        let mut tombs = 0;
        for (key, entry) in &inner.sessions {
            assert_eq!(key, &entry.key);
            assert!(
                entry
                    .streams
                    .values()
                    .all(|st| st.last_seq <= entry.last_seq),
                "an id beyond the session's counter"
            );
            assert!(entry.events.len() <= inner.config.max_events_per_session);
            assert!(entry.bytes <= inner.config.max_bytes_per_session);
            assert!(entry.tombs.len() <= inner.config.max_events_per_session);
            let mut session_bytes = 0;
            let mut session_events = 0;
            for (id, st) in &entry.streams {
                // A stream opened with no event yet starts after the last id issued.
                assert!(st.first_seq <= st.last_seq.saturating_add(1));
                match st.tomb {
                    Some(t) => {
                        assert!(st.events.is_empty());
                        assert_eq!(entry.tombs.get(&t), Some(id));
                        let loc = &inner.tombs[&t];
                        assert_eq!((&*loc.session, loc.stream), (&**key, *id));
                        assert_eq!(st.evicted_upto, st.last_seq);
                    }
                    None => assert!(!st.events.is_empty()),
                }
                let mut prev = st.evicted_upto;
                for (seq, d) in &st.events {
                    assert!(*seq > prev);
                    prev = *seq;
                    let (stream, order) = entry.events[seq];
                    assert_eq!(stream, *id);
                    let loc = &inner.events[&order];
                    assert_eq!((&*loc.session, loc.stream, loc.seq), (&**key, *id, *seq));
                    session_bytes += d.len();
                    session_events += 1;
                }
                if let Some((last, _)) = st.events.back() {
                    assert_eq!(*last, st.last_seq);
                }
            }
            assert_eq!(session_bytes, entry.bytes);
            assert_eq!(session_events, entry.events.len());
            events += session_events;
            bytes += session_bytes;
            tombs += entry.tombs.len();
        }
        assert_eq!(events, inner.events.len());
        assert_eq!(bytes, inner.bytes);
        assert_eq!(tombs, inner.tombs.len());
        assert!(inner.bytes <= inner.config.max_total_bytes);
    }

    /// A small deterministic generator for the fuzz-like loops.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn event_store_ids_round_trip() {
        let values = [0, 1, 9, 10, 99, 100, 12345, u64::MAX - 1, u64::MAX];
        for stream in values {
            for seq in values {
                let id = EventId::new(StreamId(stream), seq);
                let text = id.to_string();
                assert!(text.bytes().all(|b| (0x21..=0x7e).contains(&b)));
                assert_eq!(text.parse::<EventId>(), Ok(id), "{text}");
            }
            let sid = StreamId::new(stream);
            assert_eq!(sid.to_string().parse::<StreamId>(), Ok(sid));
            assert_eq!(sid.get(), stream);
        }
        assert_eq!(EventId::new(StreamId(3), 17).to_string(), "3-17");
    }

    #[test]
    fn event_store_ids_reject_garbage() {
        for bad in [
            "",
            "-",
            "1",
            "1-",
            "-1",
            "--",
            "1--1",
            "1-1-1",
            "01-1",
            "1-01",
            "00-0",
            "0-00",
            "+1-1",
            "1-+1",
            "-1-1",
            " 1-1",
            "1-1 ",
            "1 -1",
            "1_1",
            "1:1",
            "a-b",
            "0x1-1",
            "1e3-1",
            "\u{0661}-1",
            "1-\u{ff11}",
            "18446744073709551616-1",
            "1-18446744073709551616",
            "99999999999999999999-1",
            "1-000000000000000000001",
            "1-1\0",
            "1-1\n",
        ] {
            assert!(bad.parse::<EventId>().is_err(), "{bad:?} accepted");
        }
        for bad in ["", "01", "+1", "-1", " 1", "18446744073709551616", "1-1"] {
            assert!(bad.parse::<StreamId>().is_err(), "{bad:?} accepted");
        }
        let long = "1".repeat(100_000);
        assert!(long.parse::<StreamId>().is_err());
        assert!(format!("{long}-1").parse::<EventId>().is_err());
    }

    #[test]
    fn event_store_ids_fuzz() {
        let alphabet: Vec<char> = "0123456789-+ 0-0-9\u{0}\u{e9}x\u{0663}".chars().collect();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut accepted = 0;
        for _ in 0..50_000 {
            let len = rng.below(24);
            let text: String = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                .collect();
            // Whatever is accepted is exactly what Display writes.
            if let Ok(id) = text.parse::<EventId>() {
                assert_eq!(id.to_string(), text);
                accepted += 1;
            }
            if let Ok(id) = text.parse::<StreamId>() {
                assert_eq!(id.to_string(), text);
            }
            // Arbitrary bytes, made into a string lossily, never panic either.
            let raw: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let lossy = String::from_utf8_lossy(&raw);
            if let Ok(id) = lossy.parse::<EventId>() {
                assert_eq!(id.to_string(), lossy);
            }
        }
        assert!(accepted > 0, "the generator never produced a valid id");
        for _ in 0..10_000 {
            let id = EventId::new(StreamId(rng.next() >> rng.below(64)), rng.next() >> 3);
            assert_eq!(id.to_string().parse::<EventId>(), Ok(id));
        }
    }

    #[test]
    fn event_store_replay_is_exact_per_stream() {
        let (s, _) = store(big());
        let (a, b, c) = (StreamId(1), StreamId(2), StreamId(3));
        let mut issued: HashMap<StreamId, Vec<(EventId, Bytes)>> = HashMap::new();
        let mut all = HashSet::new();
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for i in 0..30 {
            let stream = [a, b, c][rng.below(3) as usize];
            let payload = data(&format!("{stream}:{i}"));
            let id = s.append_now("sess", stream, payload.clone());
            assert_eq!(id.stream, stream);
            assert!(all.insert(id), "id issued twice");
            let list = issued.entry(stream).or_default();
            if let Some((prev, _)) = list.last() {
                assert!(id.seq > prev.seq, "seq must increase along a stream");
            }
            list.push((id, payload));
        }
        // Another session with the same stream ids never leaks into this one.
        s.append_now("other", a, data("other"));
        for list in issued.values() {
            for (i, (id, _)) in list.iter().enumerate() {
                let got = s.replay_now("sess", id).unwrap();
                assert_eq!(got, list[i + 1..].to_vec());
                assert!(got.iter().all(|(g, _)| g.stream == id.stream));
                assert_eq!(s.replay_now("other", id), Err(Miss::Unknown));
            }
        }
        // The id of one stream's event, presented as another stream's, is unknown.
        let (b_first, _) = issued[&b][0];
        assert_eq!(
            s.replay_now("sess", &EventId::new(a, b_first.seq)),
            Err(Miss::Unknown)
        );
        check(&s);
    }

    #[test]
    fn event_store_replay_edges() {
        let (s, _) = store(big());
        let a = StreamId(7);
        let first = s.append_now("s", a, data("one"));
        let last = s.append_now("s", a, data("two"));
        assert_eq!(s.replay_now("s", &last), Ok(vec![]));
        assert_eq!(payloads(&s.replay_now("s", &first).unwrap()), ["two"]);
        let unknown = [
            ("nope", last),
            ("s", EventId::new(StreamId(8), last.seq)),
            ("s", EventId::new(a, last.seq + 1)),
            ("s", EventId::new(a, u64::MAX)),
            ("s", EventId::new(a, 0)),
            ("s", EventId::new(a, first.seq - 1)),
        ];
        for (session, id) in unknown {
            assert_eq!(s.replay_now(session, &id), Err(Miss::Unknown), "{id}");
        }
        // A seq between two of this stream's events that belongs to another stream.
        let s2 = StreamId(9);
        let between = s.append_now("s", s2, data("x"));
        let after = s.append_now("s", a, data("three"));
        assert_eq!(
            s.replay_now("s", &EventId::new(a, between.seq)),
            Err(Miss::Unknown)
        );
        assert_eq!(s.replay_now("s", &after), Ok(vec![]));
        assert_eq!(payloads(&s.replay_now("s", &last).unwrap()), ["three"]);
        check(&s);
    }

    #[test]
    fn event_store_evicts_by_count() {
        let (s, _) = store(MemoryEventStoreConfig {
            max_events_per_session: 4,
            ..big()
        });
        let (a, b) = (StreamId(1), StreamId(2));
        let a1 = s.append_now("s", a, data("a1"));
        let a2 = s.append_now("s", a, data("a2"));
        let b1 = s.append_now("s", b, data("b1"));
        let a3 = s.append_now("s", a, data("a3"));
        s.append_now("other", a, data("o1"));
        assert_eq!(s.sizes_now().events, 5);
        // The fifth event of the session evicts a1: a client that saw a1 loses nothing.
        let a4 = s.append_now("s", a, data("a4"));
        assert_eq!(
            payloads(&s.replay_now("s", &a1).unwrap()),
            ["a2", "a3", "a4"]
        );
        // The next evicts a2: resuming after a1 is no longer exact.
        let b2 = s.append_now("s", b, data("b2"));
        assert_eq!(s.replay_now("s", &a1), Err(Miss::Gone));
        assert_eq!(payloads(&s.replay_now("s", &a2).unwrap()), ["a3", "a4"]);
        assert_eq!(payloads(&s.replay_now("s", &b1).unwrap()), ["b2"]);
        assert_eq!(s.replay_now("s", &a4), Ok(vec![]));
        assert_eq!(s.replay_now("s", &b2), Ok(vec![]));
        // The other session is untouched by this session's limit.
        assert_eq!(s.sizes_now().events, 5);
        let _ = a3;
        check(&s);
    }

    #[test]
    fn event_store_stream_evicted_entirely_reports_gone() {
        let (s, _) = store(MemoryEventStoreConfig {
            max_events_per_session: 2,
            ..big()
        });
        let (a, b) = (StreamId(1), StreamId(2));
        let b1 = s.append_now("s", b, data("b1"));
        let b2 = s.append_now("s", b, data("b2"));
        s.append_now("s", a, data("a1"));
        s.append_now("s", a, data("a2"));
        // b has no events left, but is remembered.
        assert_eq!(s.replay_now("s", &b1), Err(Miss::Gone));
        assert_eq!(s.replay_now("s", &b2), Ok(vec![]));
        assert_eq!(s.sizes_now().streams, 2);
        // More output on b after it was emptied: the old ids still cannot resume exactly.
        let b3 = s.append_now("s", b, data("b3"));
        assert_eq!(s.replay_now("s", &b1), Err(Miss::Gone));
        assert_eq!(payloads(&s.replay_now("s", &b2).unwrap()), ["b3"]);
        assert_eq!(s.replay_now("s", &b3), Ok(vec![]));
        check(&s);
    }

    #[test]
    fn event_store_remembered_streams_are_bounded() {
        let (s, _) = store(MemoryEventStoreConfig {
            max_events_per_session: 3,
            ..big()
        });
        for i in 0..100 {
            s.append_now("s", StreamId(i), data("x"));
            check(&s);
        }
        let sizes = s.sizes_now();
        assert_eq!(sizes.events, 3);
        assert!(sizes.streams <= 6, "{sizes:?}");
        // The oldest streams are forgotten entirely.
        assert_eq!(
            s.replay_now("s", &EventId::new(StreamId(0), 1)),
            Err(Miss::Unknown)
        );
        s.remove_session_now("s");
        assert!(s.sizes_now().is_empty());
    }

    #[test]
    fn event_store_evicts_by_session_bytes() {
        let (s, _) = store(MemoryEventStoreConfig {
            max_bytes_per_session: 10,
            ..big()
        });
        let (a, b) = (StreamId(1), StreamId(2));
        let a1 = s.append_now("s", a, data("aaaa"));
        let b1 = s.append_now("s", b, data("bbbb"));
        let a2 = s.append_now("s", a, data("cc"));
        s.append_now("t", a, data("tttttttt"));
        assert_eq!(s.sizes_now().bytes, 18);
        // 4 + 4 + 2 + 3 > 10: a1 goes.
        let a3 = s.append_now("s", a, data("ddd"));
        assert_eq!(s.sizes_now().bytes, 17);
        assert_eq!(payloads(&s.replay_now("s", &a1).unwrap()), ["cc", "ddd"]);
        // 4 + 2 + 3 + 4 > 10: b1 goes, then 2 + 3 + 4 fits.
        s.append_now("s", b, data("eeee"));
        assert_eq!(
            s.replay_now("s", &b1),
            Ok(vec![(EventId::new(b, 5), data("eeee"))])
        );
        assert_eq!(s.sizes_now().bytes, 17);
        // One event bigger than the whole allowance evicts everything, itself included.
        let huge = s.append_now("s", a, data("0123456789x"));
        assert_eq!(s.replay_now("s", &a3), Err(Miss::Gone));
        assert_eq!(s.replay_now("s", &a2), Err(Miss::Gone));
        assert_eq!(s.replay_now("s", &huge), Ok(vec![]));
        assert_eq!(s.sizes_now().bytes, 8);
        check(&s);
    }

    #[test]
    fn event_store_evicts_by_global_bytes() {
        let (s, _) = store(MemoryEventStoreConfig {
            max_total_bytes: 12,
            ..big()
        });
        let a = StreamId(1);
        let x1 = s.append_now("x", a, data("x1x1"));
        let y1 = s.append_now("y", a, data("y1y1"));
        let x2 = s.append_now("x", a, data("x2x2"));
        assert_eq!(s.sizes_now().bytes, 12);
        // x and y hold 8 bytes each: the tie goes to the oldest event (x1).
        let y2 = s.append_now("y", a, data("y2y2"));
        assert_eq!(s.sizes_now().bytes, 12);
        assert_eq!(payloads(&s.replay_now("x", &x1).unwrap()), ["x2x2"]);
        assert_eq!(payloads(&s.replay_now("y", &y1).unwrap()), ["y2y2"]);
        // x grows past y: x pays for it, y keeps everything.
        s.append_now("x", a, data("x3x3"));
        s.append_now("x", a, data("x4x4"));
        assert_eq!(s.replay_now("x", &x1), Err(Miss::Gone));
        assert_eq!(payloads(&s.replay_now("y", &y1).unwrap()), ["y2y2"]);
        assert_eq!(s.replay_now("y", &y2), Ok(vec![]));
        let _ = x2;
        check(&s);
    }

    /// Finding 16, the audit's case scaled down: many sessions stream up to their own limit
    /// while a quiet one holds a few events; the global budget is hit, and the quiet session
    /// still resumes exactly (before, the globally oldest event went, whoever owned it).
    #[test]
    fn finding_16_global_eviction_takes_from_the_session_most_over_its_share() {
        let (s, _) = store(MemoryEventStoreConfig {
            max_bytes_per_session: 4096,
            max_total_bytes: 64 * 1024,
            ..big()
        });
        let quiet = s.append_now("quiet", StreamId(0), data("q1"));
        let quiet2 = s.append_now("quiet", StreamId(0), data("q2"));
        let chunk = Bytes::from(vec![b'x'; 64]);
        for round in 0..64 {
            for i in 0..17 {
                s.append_now(&format!("busy-{i}"), StreamId(round % 3), chunk.clone());
            }
        }
        assert!(s.sizes_now().bytes <= 64 * 1024);
        assert_eq!(payloads(&s.replay_now("quiet", &quiet).unwrap()), ["q2"]);
        assert_eq!(s.replay_now("quiet", &quiet2), Ok(vec![]));
        check(&s);
        // One session alone over the whole budget evicts only its own events.
        let (s, _) = store(MemoryEventStoreConfig {
            max_total_bytes: 1024,
            ..big()
        });
        let mut firsts = Vec::new();
        for i in 0..8 {
            firsts.push(s.append_now(&format!("small-{i}"), StreamId(0), data("s1")));
            s.append_now(&format!("small-{i}"), StreamId(0), data("s2"));
        }
        for _ in 0..1000 {
            s.append_now("flood", StreamId(5), chunk.clone());
        }
        for (i, first) in firsts.iter().enumerate() {
            let got = s.replay_now(&format!("small-{i}"), first).unwrap();
            assert_eq!(payloads(&got), ["s2"]);
        }
        check(&s);
    }

    /// Finding 26: sequence numbers are per session: another session's traffic between two of
    /// a session's events does not show in their ids.
    #[test]
    fn finding_26_event_ids_do_not_reveal_other_sessions_volume() {
        let (s, _) = store(big());
        let first = s.append_now("mine", StreamId(0), data("one"));
        for i in 0..500 {
            s.append_now("other", StreamId(i % 4), data("traffic"));
        }
        let second = s.append_now("mine", StreamId(0), data("two"));
        let third = s.append_now("mine", StreamId(1), data("three"));
        assert_eq!((first.seq, second.seq, third.seq), (1, 2, 3));
        assert_eq!(payloads(&s.replay_now("mine", &first).unwrap()), ["two"]);
        check(&s);
    }

    #[test]
    fn event_store_evicts_by_age() {
        let (s, millis) = store(MemoryEventStoreConfig {
            max_age: Duration::from_secs(300),
            ..big()
        });
        let set = |secs: u64| millis.store(secs * 1000, Ordering::SeqCst);
        let a = StreamId(1);
        let e1 = s.append_now("s", a, data("e1"));
        set(120);
        let e2 = s.append_now("s", a, data("e2"));
        set(240);
        let e3 = s.append_now("s", a, data("e3"));
        set(299);
        assert_eq!(s.sizes_now().events, 3);
        set(300);
        // e1 is 300 s old and gone; after e1 is still exact.
        assert_eq!(s.sizes_now().events, 2);
        assert_eq!(payloads(&s.replay_now("s", &e1).unwrap()), ["e2", "e3"]);
        set(420);
        assert_eq!(s.replay_now("s", &e1), Err(Miss::Gone));
        assert_eq!(payloads(&s.replay_now("s", &e2).unwrap()), ["e3"]);
        set(540);
        // The stream is empty but remembered for another max_age.
        assert_eq!(s.replay_now("s", &e2), Err(Miss::Gone));
        assert_eq!(s.replay_now("s", &e3), Ok(vec![]));
        assert_eq!(
            s.sizes_now(),
            StoreSizes {
                sessions: 1,
                streams: 1,
                events: 0,
                bytes: 0
            }
        );
        set(840);
        assert_eq!(s.replay_now("s", &e3), Err(Miss::Unknown));
        // Only the session's sequence counter is left, until the session is removed.
        assert_eq!(
            s.sizes_now(),
            StoreSizes {
                sessions: 1,
                ..StoreSizes::default()
            }
        );
        let next = s.append_now("s", a, data("e4"));
        assert!(next.seq > e3.seq, "an id issued twice");
        s.remove_session_now("s");
        assert!(s.sizes_now().is_empty());
        assert_eq!(s.lock().sessions.capacity(), 0);
    }

    #[test]
    fn event_store_remove_stream_and_session() {
        let (s, _) = store(big());
        let (a, b) = (StreamId(1), StreamId(2));
        for i in 0..10 {
            s.append_now("s", a, data(&format!("a{i}")));
            s.append_now("s", b, data(&format!("b{i}")));
            s.append_now("t", a, data(&format!("t{i}")));
        }
        let t_sizes = StoreSizes {
            sessions: 1,
            streams: 1,
            events: 10,
            bytes: 20,
        };
        s.remove_stream_now("s", a);
        check(&s);
        assert_eq!(s.sizes_now().events, 20);
        assert_eq!(s.replay_now("s", &EventId::new(a, 1)), Err(Miss::Unknown));
        s.remove_stream_now("s", b);
        check(&s);
        // "s" keeps its sequence counter until it is removed: a stream of it that comes back
        // gets new ids.
        assert_eq!(
            s.sizes_now(),
            StoreSizes {
                sessions: 2,
                ..t_sizes
            }
        );
        let back = s.append_now("s", a, data("back"));
        assert_eq!(back.seq, 21);
        s.remove_stream_now("s", a);
        s.remove_session_now("s");
        assert_eq!(s.sizes_now(), t_sizes);
        // Removing what is not there is harmless.
        s.remove_stream_now("s", b);
        s.remove_stream_now("nope", a);
        s.remove_session_now("nope");
        assert_eq!(s.sizes_now(), t_sizes);
        s.remove_session_now("t");
        assert!(s.sizes_now().is_empty());
        check(&s);
        // A session that comes back after its removal (the server never reuses a session id)
        // starts afresh; the old ids are unknown.
        let again = s.append_now("t", a, data("again"));
        assert_eq!(again.seq, 1);
        assert_eq!(s.replay_now("t", &EventId::new(a, 3)), Err(Miss::Unknown));
        s.remove_session_now("t");
        assert!(s.sizes_now().is_empty());
    }

    #[test]
    fn event_store_thousand_sessions_leave_nothing() {
        let (s, _) = store(MemoryEventStoreConfig::default());
        for i in 0..1000 {
            let session = format!("session-{i}");
            for j in 0..5 {
                s.append_now(&session, StreamId(j % 2), data("payload"));
            }
        }
        assert_eq!(
            s.sizes_now(),
            StoreSizes {
                sessions: 1000,
                streams: 2000,
                events: 5000,
                bytes: 35_000
            }
        );
        check(&s);
        for i in 0..1000 {
            s.remove_session_now(&format!("session-{i}"));
        }
        assert!(s.sizes_now().is_empty());
        let inner = s.lock();
        assert!(inner.events.is_empty() && inner.tombs.is_empty());
        assert_eq!(inner.sessions.capacity(), 0);
    }

    /// Random operations under tight limits: every successful replay is exactly the stream's
    /// history after the id, and the tables stay consistent.
    #[test]
    fn event_store_random_operations_stay_exact() {
        let (s, millis) = store(MemoryEventStoreConfig {
            max_events_per_session: 6,
            max_bytes_per_session: 40,
            max_total_bytes: 90,
            max_age: Duration::from_millis(500),
        });
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let sessions = ["s0", "s1", "s2", "s3"];
        let mut history: HashMap<(&str, StreamId), Vec<(EventId, Bytes)>> = HashMap::new();
        let mut seen = HashSet::new();
        let (mut ok, mut gone, mut unknown, mut served) = (0, 0, 0, 0);
        for step in 0..20_000u64 {
            let session = sessions[rng.below(4) as usize];
            let stream = StreamId(rng.below(4));
            match rng.below(100) {
                0..=3 => s.open_now(session, stream),
                4..=5 => s.finish_now(session, stream),
                6..=49 => {
                    let len = rng.below(12) as usize;
                    let payload = Bytes::from(format!("{step:0>len$}").into_bytes());
                    let id = s.append_now(session, stream, payload.clone());
                    assert_eq!(id.stream, stream);
                    assert!(seen.insert((session, id)), "id issued twice");
                    history
                        .entry((session, stream))
                        .or_default()
                        .push((id, payload));
                }
                50..=84 => {
                    let list = history.get(&(session, stream));
                    let after = match (list, rng.below(4)) {
                        (Some(list), 0..=2) if !list.is_empty() => {
                            list[rng.below(list.len() as u64) as usize].0
                        }
                        _ => EventId::new(stream, rng.below(step + 2)),
                    };
                    match s.replay_now(session, &after) {
                        Ok(got) => {
                            ok += 1;
                            served += got.len();
                            let want: Vec<_> = list
                                .map(|l| l.iter().filter(|(id, _)| id.seq > after.seq).cloned())
                                .into_iter()
                                .flatten()
                                .collect();
                            assert_eq!(got, want, "replay after {after} in {session}");
                        }
                        Err(Miss::Gone) => gone += 1,
                        Err(Miss::Unknown) => unknown += 1,
                    }
                }
                85..=94 => {
                    millis.fetch_add(rng.below(60), Ordering::SeqCst);
                }
                95..=97 => {
                    s.remove_stream_now(session, stream);
                    history.remove(&(session, stream));
                }
                _ => {
                    s.remove_session_now(session);
                    history.retain(|(owner, _), _| *owner != session);
                    // A removed session is gone: a new one of that name starts afresh.
                    seen.retain(|(owner, _)| *owner != session);
                }
            }
            if step % 64 == 0 {
                check(&s);
            }
        }
        check(&s);
        assert!(
            ok > 100 && gone > 100 && unknown > 100 && served > 500,
            "{ok} {gone} {unknown} {served}"
        );
        for session in sessions {
            s.remove_session_now(session);
        }
        assert!(s.sizes_now().is_empty());
    }

    #[tokio::test]
    async fn event_store_works_as_a_trait_object() {
        let (clock, millis) = manual_clock();
        let store: Arc<dyn EventStore> = Arc::new(MemoryEventStore::new().with_clock(clock));
        let session = String::from("abc");
        let a = StreamId(1);
        let prime = store.append(&session, a, Bytes::new()).await.unwrap();
        let e1 = store
            .append(&session, a, data("{\"jsonrpc\":\"2.0\"}"))
            .await
            .unwrap();
        let header = prime.to_string();
        let last: EventId = header.parse().unwrap();
        let got = store.replay_after(&session, &last).await.unwrap();
        assert_eq!(got, vec![(e1, data("{\"jsonrpc\":\"2.0\"}"))]);
        assert_eq!(store.sizes().await.unwrap().events, 2);
        millis.store(10 * 60 * 1000, Ordering::SeqCst);
        assert_eq!(store.replay_after(&session, &e1).await.unwrap(), vec![]);
        store.remove_stream(&session, a).await.unwrap();
        store.remove_session(&session).await.unwrap();
        assert!(store.sizes().await.unwrap().is_empty());
        let handle = tokio::spawn({
            let store = Arc::clone(&store);
            async move { store.append("s", StreamId(0), Bytes::new()).await }
        });
        assert_eq!(handle.await.unwrap().unwrap().stream, StreamId(0));
        assert_eq!(
            MemoryEventStore::default().config(),
            MemoryEventStoreConfig::default()
        );
        assert!(format!("{:?}", MemoryEventStore::new()).contains("MemoryEventStore"));
    }

    /// The contract every store must meet, on the in-memory store: tight limits, and the
    /// defaults.
    #[tokio::test]
    async fn event_store_memory_meets_the_conformance_checks() {
        for config in [
            MemoryEventStoreConfig {
                max_events_per_session: 8,
                max_age: Duration::from_secs(300),
                ..big()
            },
            MemoryEventStoreConfig::default(),
        ] {
            let (s, millis) = store(config);
            let limits = conformance::Limits::new(config.max_events_per_session, config.max_age);
            let advance = |by: Duration| {
                millis.fetch_add(u64::try_from(by.as_millis()).unwrap(), Ordering::SeqCst);
                ready(())
            };
            conformance::all(&s, "memory", limits, advance).await;
            check(&s);
            assert!(s.sizes_now().is_empty());
            assert_eq!(s.lock().sessions.capacity(), 0);
        }
    }

    /// The checks do catch a breach: a store whose replay leaves out the last event, one that
    /// never reports a finished stream, and one that keeps a removed session's standalone
    /// stream each fail them.
    #[tokio::test]
    async fn event_store_conformance_checks_catch_breaches() {
        for breach in [
            Breach::ShortReplay,
            Breach::NeverDone,
            Breach::KeepsStandalone,
        ] {
            let store = Broken {
                inner: MemoryEventStore::new(),
                breach,
            };
            let run = async move {
                conformance::replay_is_exact(&store, "b-replay").await;
                conformance::follow_reports_done(&store, "b-follow").await;
                conformance::standalone_set_get_clear(&store, "b-standalone").await;
            };
            let message = catch(run).await.expect_err("a breach passed the checks");
            assert!(message.contains("conformance"), "{breach:?}: {message}");
        }
    }

    /// The panic of a future, as its message (the checks panic on a breach).
    async fn catch(run: impl Future<Output = ()> + Send + 'static) -> Result<(), String> {
        tokio::spawn(run).await.map_err(|e| {
            let panic = e.into_panic();
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default()
        })
    }

    #[derive(Debug, Clone, Copy)]
    enum Breach {
        ShortReplay,
        NeverDone,
        KeepsStandalone,
    }

    /// A store that breaks one rule of the contract.
    struct Broken {
        inner: MemoryEventStore,
        breach: Breach,
    }

    impl EventStore for Broken {
        fn stream_base(&self) -> u64 {
            self.inner.stream_base()
        }

        fn open_stream<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
            pending: &'a [RequestId],
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            self.inner.open_stream(session, stream, pending)
        }

        fn append<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
            data: Bytes,
        ) -> BoxFuture<'a, Result<EventId, EventStoreError>> {
            self.inner.append(session, stream, data)
        }

        fn finish_stream<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            match self.breach {
                Breach::NeverDone => Box::pin(ready(Ok(()))),
                _ => self.inner.finish_stream(session, stream),
            }
        }

        fn replay_after<'a>(
            &'a self,
            session: &'a str,
            after: &'a EventId,
        ) -> BoxFuture<'a, Result<Vec<(EventId, Bytes)>, ReplayError>> {
            let mut got = self.inner.replay_now(session, after).map_err(Into::into);
            if let (Breach::ShortReplay, Ok(events)) = (self.breach, &mut got) {
                events.pop();
            }
            Box::pin(ready(got))
        }

        fn follow<'a>(
            &'a self,
            session: &'a str,
            after: &'a EventId,
        ) -> BoxFuture<'a, Result<Follow, ReplayError>> {
            self.inner.follow(session, after)
        }

        fn set_standalone<'a>(
            &'a self,
            session: &'a str,
            stream: Option<StreamId>,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            self.inner.set_standalone(session, stream)
        }

        fn standalone<'a>(
            &'a self,
            session: &'a str,
        ) -> BoxFuture<'a, Result<Option<StreamId>, EventStoreError>> {
            self.inner.standalone(session)
        }

        fn remove_stream<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            self.inner.remove_stream(session, stream)
        }

        fn remove_session<'a>(
            &'a self,
            session: &'a str,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            let standalone = self.inner.standalone_now(session);
            self.inner.remove_session_now(session);
            if let (Breach::KeepsStandalone, Some(_)) = (self.breach, standalone) {
                self.inner.set_standalone_now(session, standalone);
            }
            Box::pin(ready(Ok(())))
        }

        fn sizes(&self) -> BoxFuture<'_, Result<StoreSizes, EventStoreError>> {
            self.inner.sizes()
        }
    }

    /// The events held, as a gauge reads them: across sessions and streams, less those past
    /// their age, and none once the sessions are removed; a store that cannot tell says so.
    #[test]
    fn event_store_events_held() {
        let (s, millis) = store(MemoryEventStoreConfig {
            max_age: Duration::from_secs(10),
            ..big()
        });
        assert_eq!(s.events_held(), Some(0));
        s.append_now("a", StreamId(1), data("a1"));
        s.append_now("a", StreamId(2), data("a2"));
        millis.store(6_000, Ordering::SeqCst);
        s.append_now("b", StreamId(1), data("b1"));
        assert_eq!(s.events_held(), Some(3));
        // Session a's events are 10 s old: evicted as the gauge reads.
        millis.store(10_000, Ordering::SeqCst);
        assert_eq!(s.events_held(), Some(1));
        s.remove_session_now("b");
        assert_eq!(s.events_held(), Some(0));

        // A store that does not override it (a test double of its own) cannot tell.
        let unknown = Broken {
            inner: MemoryEventStore::new(),
            breach: Breach::NeverDone,
        };
        unknown.inner.append_now("a", StreamId(1), data("a1"));
        assert_eq!(unknown.events_held(), None);
    }

    /// An opened stream with no event: counted, no id of it replays, finished before its
    /// first event, bounded like emptied streams, and forgotten `max_age` after it opened.
    #[test]
    fn event_store_opened_streams() {
        let (s, millis) = store(MemoryEventStoreConfig {
            max_events_per_session: 3,
            max_age: Duration::from_secs(300),
            ..big()
        });
        let (a, b) = (StreamId(1), StreamId(2));
        let before = s.append_now("s", b, data("b1"));
        s.open_now("s", a);
        check(&s);
        assert_eq!(
            s.sizes_now(),
            StoreSizes {
                sessions: 1,
                streams: 2,
                events: 1,
                bytes: 2
            }
        );
        for seq in [0, before.seq, before.seq + 1, u64::MAX] {
            assert_eq!(s.replay_now("s", &EventId::new(a, seq)), Err(Miss::Unknown));
        }
        // Opening it again changes nothing; the first event makes it an ordinary stream.
        s.open_now("s", a);
        let a1 = s.append_now("s", a, data("a1"));
        let a2 = s.append_now("s", a, data("a2"));
        assert_eq!(payloads(&s.replay_now("s", &a1).unwrap()), ["a2"]);
        assert_eq!(
            s.replay_now("s", &EventId::new(a, before.seq)),
            Err(Miss::Unknown)
        );
        s.open_now("s", a);
        assert_eq!(payloads(&s.replay_now("s", &a1).unwrap()), ["a2"]);
        // Finished before its first event, then written: the mark stays.
        let c = StreamId(3);
        s.open_now("s", c);
        s.finish_now("s", c);
        let c1 = s.append_now("s", c, data("c1"));
        let follow = s.follow_now("s", &c1).unwrap();
        assert!(follow.done && follow.events.is_empty() && follow.rest.is_none());
        check(&s);
        // Empty streams are bounded: the oldest go first.
        for i in 10..110 {
            s.open_now("s", StreamId(i));
            check(&s);
        }
        assert!(s.sizes_now().streams <= 3 + 3, "{:?}", s.sizes_now());
        assert_eq!(s.replay_now("s", &a2), Ok(vec![]));
        // One that never gets an event is forgotten once max_age has passed.
        s.remove_session_now("s");
        s.open_now("s", a);
        millis.store(299_000, Ordering::SeqCst);
        assert_eq!(s.sizes_now().streams, 1);
        millis.store(300_000, Ordering::SeqCst);
        assert_eq!(s.sizes_now().streams, 0);
        s.remove_session_now("s");
        assert!(s.sizes_now().is_empty());
        // Finishing or following what is not there is harmless.
        s.finish_now("nope", a);
        assert_eq!(s.follow_now("nope", &a1).unwrap_err(), Miss::Unknown);
        assert!(s.sizes_now().is_empty());
    }

    /// `follow` is `replay_after` plus the finished mark, which survives the stream's events
    /// being evicted; it never carries live events.
    #[test]
    fn event_store_follow_reports_done() {
        let (s, millis) = store(MemoryEventStoreConfig {
            max_age: Duration::from_secs(300),
            ..big()
        });
        let a = StreamId(4);
        s.open_now("s", a);
        let a1 = s.append_now("s", a, data("a1"));
        let a2 = s.append_now("s", a, data("a2"));
        let open = s.follow_now("s", &a1).unwrap();
        assert_eq!(payloads(&open.events), ["a2"]);
        assert!(!open.done && open.rest.is_none());
        s.finish_now("s", a);
        let done = s.follow_now("s", &a1).unwrap();
        assert_eq!(payloads(&done.events), ["a2"]);
        assert!(done.done && done.rest.is_none());
        // Every event aged out: the stream is remembered, finished, for max_age more.
        millis.store(300_000, Ordering::SeqCst);
        assert_eq!(s.follow_now("s", &a1).unwrap_err(), Miss::Gone);
        let last = s.follow_now("s", &a2).unwrap();
        assert!(last.done && last.events.is_empty());
        millis.store(600_000, Ordering::SeqCst);
        assert_eq!(s.follow_now("s", &a2).unwrap_err(), Miss::Unknown);
        s.remove_session_now("s");
        assert!(s.sizes_now().is_empty());
    }

    /// The standalone stream: one per session, replaced, cleared, and freed with the session
    /// (clearing it for a session the store does not know makes no entry).
    #[test]
    fn event_store_standalone_is_freed_with_the_session() {
        let (s, _) = store(big());
        s.set_standalone_now("s", None);
        assert!(s.sizes_now().is_empty());
        s.set_standalone_now("s", Some(StreamId(3)));
        assert_eq!(s.standalone_now("s"), Some(StreamId(3)));
        assert_eq!(
            s.sizes_now(),
            StoreSizes {
                sessions: 1,
                ..StoreSizes::default()
            }
        );
        s.set_standalone_now("s", Some(StreamId(5)));
        assert_eq!(s.standalone_now("s"), Some(StreamId(5)));
        assert_eq!(s.standalone_now("t"), None);
        s.set_standalone_now("s", None);
        assert_eq!(s.standalone_now("s"), None);
        s.set_standalone_now("s", Some(StreamId(6)));
        // Removing the stream leaves the record (who holds the GET is the server's to say).
        s.remove_stream_now("s", StreamId(6));
        assert_eq!(s.standalone_now("s"), Some(StreamId(6)));
        s.remove_session_now("s");
        assert_eq!(s.standalone_now("s"), None);
        assert!(s.sizes_now().is_empty());
        assert_eq!(s.lock().sessions.capacity(), 0);
        check(&s);
    }

    #[test]
    fn event_store_errors_keep_their_kind_and_cause() {
        use std::error::Error as _;
        let cause = std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in 1 s");
        let down = EventStoreError::unavailable(cause);
        assert_eq!(down.kind(), EventStoreErrorKind::Unavailable);
        assert!(down.is_unavailable());
        assert_eq!(
            down.to_string(),
            "the event store unavailable: no answer in 1 s"
        );
        let source = down.source().expect("the cause is kept");
        let io = source.downcast_ref::<std::io::Error>().unwrap();
        assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
        let replay = ReplayError::from(down);
        assert!(matches!(&replay, ReplayError::Unavailable(e) if e.is_unavailable()));
        assert!(replay.source().unwrap().source().is_some());

        let bad = EventStoreError::failed("WRONGTYPE");
        assert_eq!(bad.kind(), EventStoreErrorKind::Failed);
        assert!(!bad.is_unavailable());
        assert_eq!(bad.to_string(), "the event store failed: WRONGTYPE");
        assert!(matches!(ReplayError::from(bad), ReplayError::Failed(_)));
        let made = EventStoreError::new(EventStoreErrorKind::Unavailable, "refused");
        assert!(made.is_unavailable());
        assert!(matches!(
            ReplayError::from(made),
            ReplayError::Unavailable(_)
        ));
        assert!(matches!(ReplayError::from(Miss::Gone), ReplayError::Gone));
        assert!(matches!(
            ReplayError::from(Miss::Unknown),
            ReplayError::Unknown
        ));
    }
}
