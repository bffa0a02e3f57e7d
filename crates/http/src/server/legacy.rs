//! Legacy (initialize-based) sessions: the session table, the streams of each session, event ids,
//! resumption, the standalone stream.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use modelctx_types::{Message, ProtocolVersion, RequestId};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::app::{Closed, LegacyHandler, Principal};
use super::endpoint::{Shared, TableSizes};
use super::respond::{encode, final_id};
use crate::event_store::{EventId, ReplayError, StreamId};
use crate::sse;

/// A session id as logs may show it: 8 hex digits of a hash of the id, never the id itself
/// (a session id is a bearer capability when no authentication layer binds it to a principal).
/// The hash is stable across runs, so log lines of one session can be correlated.
pub(crate) fn redact(id: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    id.hash(&mut hasher);
    format!("{:08x}", hasher.finish() >> 32)
}

/// Gives memory back once a table is mostly empty (all of it once it is empty).
pub(super) fn shrink<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    let len = map.len();
    if len == 0 {
        map.shrink_to_fit();
    } else if map.capacity() > 64 && map.capacity() / 4 > len {
        map.shrink_to(len.saturating_mul(2));
    }
}

/// How a waiting POST is answered.
pub(crate) enum Decision {
    /// One JSON body (a response, or a batch of them).
    Json(Bytes),
    /// An SSE stream: its first frames, then the channel.
    Sse {
        first: Bytes,
        rx: mpsc::Receiver<Bytes>,
    },
    /// 503 with `Retry-After` ([`Session::unavailable`]); the id of the POST's one request.
    Unavailable(Option<RequestId>),
}

/// One stream of a session: a POST's (its requests' answers and related messages) or the
/// standalone one (a GET's).
#[derive(Default)]
struct Stream {
    /// Requests whose responses are still to come; the last one ends the stream.
    pending: HashSet<RequestId>,
    /// The waiting POST, while it has not been answered (JSON or SSE not yet chosen).
    decide: Option<oneshot::Sender<Decision>>,
    /// Responses gathered while undecided (a batch), sent as one JSON array at the end.
    collected: Vec<Message>,
    /// SSE chosen: events are stored and have ids.
    sse: bool,
    /// The connection reading the stream, when there is one.
    live: Option<mpsc::Sender<Bytes>>,
    /// The stream answers `initialize`.
    initialize: bool,
    /// The stream answers a batch.
    batch: bool,
}

impl State {
    /// A POST still waiting for its answer with its client there, an open SSE connection (one
    /// following a stream of another instance included), or the stream of an HTTP+SSE session.
    fn has_live_stream(&self) -> bool {
        self.streams.values().any(|s| {
            s.decide.as_ref().is_some_and(|d| !d.is_closed())
                || s.live.as_ref().is_some_and(|l| !l.is_closed())
        }) || self.old_sse.as_ref().is_some_and(|s| !s.is_closed())
            || self
                .following
                .iter()
                .any(|l| l.upgrade().is_some_and(|l| !l.is_closed()))
    }

    /// Whether the session's standalone stream is one this endpoint opened and still has.
    fn holds_standalone(&self) -> bool {
        !self.ended
            && self
                .standalone
                .is_some_and(|id| self.streams.contains_key(&id))
    }
}

#[derive(Default)]
struct State {
    /// The negotiated version, as the application reported it ([`Session::set_version`]).
    version: Option<ProtocolVersion>,
    /// The id of the next stream this endpoint opens in the session: numbered from the event
    /// store's `stream_base` (so that instances sharing a store never open the same one).
    next_stream: u64,
    /// The stream each request in flight belongs to.
    requests: HashMap<RequestId, StreamId>,
    streams: HashMap<StreamId, Stream>,
    /// The standalone stream, when one is (or was last) open.
    standalone: Option<StreamId>,
    /// Messages for the standalone stream while none is open.
    queue: VecDeque<Bytes>,
    /// A session of the deprecated HTTP+SSE transport (2024-11-05): everything goes on its one
    /// stream, as `message` events.
    old_sse: Option<mpsc::Sender<Bytes>>,
    /// The connections of GETs that follow a stream this endpoint does not hold (its events
    /// come from the event store, `Follow::rest`): they keep the session from the idle sweep.
    /// Weak: the task forwarding the events holds the connection's sender, and the body ends
    /// when it lets go.
    following: Vec<mpsc::WeakSender<Bytes>>,
    ended: bool,
    /// Store I/O (and what depends on its outcome) in the order it was decided, performed
    /// outside this lock by `Session::drain`.
    outbox: VecDeque<Effect>,
}

/// Store I/O of a session, decided under its state lock and performed after it in order.
enum Effect {
    /// Record `stream` as opened with `pending` (`EventStore::open_stream`), store its priming
    /// event (when `prime`), then hand its first bytes to `reply`.
    Open {
        stream: StreamId,
        pending: Vec<RequestId>,
        prime: bool,
        reply: OpenReply,
    },
    /// Store `data` as the next event of `stream`, then write it to the stream's connection.
    Append { stream: StreamId, data: Bytes },
    /// A message for `stream`, the standalone stream this endpoint holds, of a session it
    /// shares with other instances: appended as [`Effect::Append`] is, unless the event
    /// store's record names another stream by now (a GET on another instance took the stream
    /// over): then this endpoint lets go of its stream and queues `data` as a non-holder does.
    AppendStandalone { stream: StreamId, data: Bytes },
    /// Replay the stream of `last` after it to `reply`; `live` then takes the stream over (a
    /// stream of this endpoint), or follows what the store carries of it (another's).
    Replay {
        last: EventId,
        live: mpsc::Sender<Bytes>,
        reply: oneshot::Sender<Result<Bytes, NotResumed>>,
    },
    /// The stream is complete: its connection ends (after the events before this), and the
    /// store is told (`EventStore::finish_stream`).
    Finish(StreamId),
    /// Record the session's standalone stream (`Some`), or clear the record when it names
    /// this stream (`Clear`).
    Standalone(StandaloneRecord),
    /// The session ended: its events leave the store.
    RemoveSession,
}

/// A change of the event store's record of the standalone stream.
enum StandaloneRecord {
    /// A GET opened this stream here.
    Set(StreamId),
    /// This stream, opened here, ended: the record goes, unless it names another stream by
    /// now (another instance's GET).
    Clear(StreamId),
}

/// Why a GET with `Last-Event-ID` cannot resume its stream.
#[derive(Debug)]
pub(crate) enum NotResumed {
    /// The session ended, or the id is unknown or its events are gone (`ReplayError::Unknown`,
    /// `Gone`): 400 with the reason.
    Refused(String),
    /// The event store cannot be reached now (`ReplayError::Unavailable`): 503 with
    /// `Retry-After`.
    Unavailable(String),
    /// The event store failed (`ReplayError::Failed`): 500.
    Failed(String),
}

/// Who gets the first bytes of a stream that opens.
enum OpenReply {
    Nobody,
    /// The waiting POST, and the channel of the stream's later events.
    Decide(oneshot::Sender<Decision>, mpsc::Receiver<Bytes>),
    /// A GET opening the standalone stream.
    First(oneshot::Sender<Bytes>),
}

/// A session's handler: set once, taken when the session ends.
#[derive(Default)]
pub(crate) struct HandlerSlot(Mutex<Option<Arc<dyn LegacyHandler>>>);

impl HandlerSlot {
    /// Sets the handler, unless one was set already (then hands it back).
    pub(crate) fn set(
        &self,
        handler: Arc<dyn LegacyHandler>,
    ) -> Result<(), Arc<dyn LegacyHandler>> {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return Err(handler);
        }
        *slot = Some(handler);
        Ok(())
    }

    /// The handler, while the session lasts.
    pub(crate) fn get(&self) -> Option<Arc<dyn LegacyHandler>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn take(&self) -> Option<Arc<dyn LegacyHandler>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// A legacy session.
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) principal: Option<Principal>,
    pub(crate) handler: HandlerSlot,
    state: tokio::sync::Mutex<State>,
    last_seen: Mutex<Instant>,
    /// The IP address of the peer that opened it, when known (for `max_sessions_per_peer`).
    pub(super) peer: Option<IpAddr>,
    /// When it opened.
    created: Instant,
    /// No request came after `initialize` yet (see `handshake_timeout`).
    handshaking: AtomicBool,
    /// Fired when the session ends (or the server shuts down): its streams end.
    pub(crate) ended: CancellationToken,
    shared: std::sync::Weak<Shared>,
    /// A session of the deprecated HTTP+SSE transport (set once, before its id is given out).
    old_transport: AtomicBool,
    /// Held while the outbox is drained: one drainer at a time keeps the store I/O in order.
    io: tokio::sync::Mutex<()>,
    /// This session, for the task that drains its outbox.
    me: std::sync::Weak<Session>,
    /// Adopted from state the application keeps elsewhere (`McpApp::adopt_session`).
    pub(crate) adopted: bool,
}

/// A drain of a session's outbox, polled on its caller's task. Dropped before it completed (its
/// caller went away), it finishes on a task of its own: an effect is never left half done.
/// Outside a runtime (the runtime is shutting down) there is no task to finish it on, and it is
/// dropped, as a spawned drain would be.
struct Finish(Option<Pin<Box<dyn Future<Output = ()> + Send>>>);

impl Future for Finish {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(drain) = self.0.as_mut() {
            std::task::ready!(drain.as_mut().poll(cx));
            self.0 = None;
        }
        Poll::Ready(())
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        if let Some(drain) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(drain);
        }
    }
}

/// Where an adopted session's streams start: `base + 2^31 + r`, `r` random below 2^30, so
/// that each adoption of a session by this endpoint numbers its streams afresh (an earlier
/// adoption's streams may still be in the store) and leaves at least 2^30 ids before the next
/// instance's base (`base + 2^32`). Without randomness from the system: `base + 2^31`.
fn first_adopted_stream(base: u64) -> u64 {
    let mut bytes = [0u8; 4];
    let r = match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from(u32::from_le_bytes(bytes) >> 2),
        Err(_) => 0,
    };
    base.saturating_add((1 << 31) + r)
}

/// The stored events of a replay as the first bytes of the resumed body (the empty priming
/// events left out).
fn replayed(events: &[(EventId, Bytes)]) -> Bytes {
    let mut first = bytes::BytesMut::new();
    for (id, data) in events {
        if !data.is_empty() {
            first.extend_from_slice(&sse::event(Some(&id.to_string()), data));
        }
    }
    first.freeze()
}

/// Why the store could not resume session `session`'s stream after `last`, as the GET's
/// answer says it (a store failure is logged).
fn not_resumed(session: &str, last: &EventId, error: ReplayError) -> NotResumed {
    let why = format!("cannot resume after event {last}: {error}");
    match error {
        ReplayError::Unavailable(_) => {
            tracing::warn!(session = %redact(session), error = %why, "replay: the event store is unavailable");
            NotResumed::Unavailable(why)
        }
        ReplayError::Failed(_) => {
            tracing::error!(session = %redact(session), error = %why, "replay: the event store failed");
            NotResumed::Failed(why)
        }
        _ => NotResumed::Refused(why),
    }
}

/// Why a POST could not be registered.
pub(crate) enum Refused {
    /// The session has ended.
    Ended,
    /// A request id is already in flight on this session.
    DuplicateId(RequestId),
}

impl Session {
    /// A session of `shared`'s table (the caller inserts it), in its handshake; or, `adopted`
    /// at a version, with its handshake done and that version negotiated.
    ///
    /// Its streams are numbered from the event store's `stream_base`: a session opened here
    /// from the base itself; an adopted one from a random point in the upper half of the base's
    /// 2^32 ids ([`first_adopted_stream`]), since this endpoint may have held the session
    /// before (and forgotten it), and a stream id must never be used twice in a session.
    pub(super) fn new(
        id: String,
        principal: Option<Principal>,
        peer: Option<IpAddr>,
        shared: &Arc<Shared>,
        adopted: Option<ProtocolVersion>,
    ) -> Arc<Session> {
        let now = Instant::now();
        Arc::new_cyclic(|me| Session {
            id,
            principal,
            peer,
            handler: HandlerSlot::default(),
            state: tokio::sync::Mutex::new(State {
                version: adopted,
                next_stream: match adopted {
                    None => shared.config.event_store.stream_base(),
                    Some(_) => first_adopted_stream(shared.config.event_store.stream_base()),
                },
                ..State::default()
            }),
            last_seen: Mutex::new(now),
            created: now,
            handshaking: AtomicBool::new(adopted.is_none()),
            ended: shared.shutdown.child_token(),
            shared: Arc::downgrade(shared),
            old_transport: AtomicBool::new(false),
            io: tokio::sync::Mutex::new(()),
            me: me.clone(),
            adopted: adopted.is_some(),
        })
    }

    /// Adds this session's streams, requests in flight and queued messages to `sizes`.
    pub(super) async fn add_sizes(&self, sizes: &mut TableSizes) {
        let state = self.state.lock().await;
        sizes.streams += state.streams.len();
        sizes.requests += state.requests.len();
        sizes.queued += state.queue.len();
    }

    pub(super) fn touch(&self) {
        *self.last_seen.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub(super) fn last_seen(&self) -> Instant {
        *self.last_seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn idle_for(&self) -> Duration {
        self.last_seen().elapsed()
    }

    /// Still in its handshake (no request after `initialize`) and older than `timeout`.
    pub(super) fn handshake_expired(&self, timeout: Duration) -> bool {
        self.handshaking.load(Ordering::SeqCst) && self.created.elapsed() >= timeout
    }

    pub(super) async fn has_live_stream(&self) -> bool {
        self.state.lock().await.has_live_stream()
    }

    /// Whether the session may be ended to make room for another: nothing in flight and no
    /// open stream, or still in its handshake after `handshake_timeout`. A session busy right
    /// now (its state locked) is not.
    pub(super) fn evictable(&self, handshake_timeout: Duration) -> bool {
        if self.handshake_expired(handshake_timeout) {
            return true;
        }
        self.state.try_lock().is_ok_and(|state| {
            state.ended || (state.requests.is_empty() && !state.has_live_stream())
        })
    }

    /// Finding 3: lets go of the POSTs whose HTTP client went away before any answer (the
    /// receiver of their decision is gone): their requests leave the table and the handler is
    /// told of each ([`LegacyHandler::abandoned`]), so that the application stops it as if the
    /// client had cancelled it. A session whose `initialize` POST was abandoned ends (its client
    /// never learnt its id).
    pub(crate) async fn reap_abandoned(&self) {
        let mut abandoned = Vec::new();
        let mut end = false;
        {
            let mut state = self.state.lock().await;
            if state.ended {
                return;
            }
            let gone: Vec<StreamId> = state
                .streams
                .iter()
                .filter(|(_, s)| s.decide.as_ref().is_some_and(|d| d.is_closed()))
                .map(|(id, _)| *id)
                .collect();
            for stream_id in gone {
                let Some(stream) = state.streams.remove(&stream_id) else {
                    continue;
                };
                end |= stream.initialize;
                for request in stream.pending {
                    state.requests.remove(&request);
                    abandoned.push(request);
                }
            }
            shrink(&mut state.streams);
            shrink(&mut state.requests);
        }
        if end {
            return self.end().await;
        }
        let Some(handler) = self.handler.get() else {
            return;
        };
        for request in abandoned {
            handler.abandoned(request);
        }
    }

    /// Whether this endpoint holds the session's standalone stream: a GET here opened it, or
    /// took it over from another instance (its connection may have dropped since: the stream
    /// lasts, and a resumption here takes it over), and neither a later GET nor the session's
    /// end replaced it. The event store's record (`EventStore::standalone`) names it too, for
    /// the other instances; when a GET on another instance took the stream over, this
    /// endpoint learns it from the record when it next writes to the stream, and lets go.
    pub(crate) async fn holds_standalone(&self) -> bool {
        self.state.lock().await.holds_standalone()
    }

    /// The negotiated version, once the application reported it.
    pub(crate) async fn version(&self) -> Option<ProtocolVersion> {
        self.state.lock().await.version
    }

    /// Records the version the session's `initialize` settled on, as the application's protocol
    /// session reports it.
    pub(crate) async fn set_version(&self, version: ProtocolVersion) {
        self.state.lock().await.version = Some(version);
    }

    fn config(&self) -> Option<Arc<Shared>> {
        self.shared.upgrade()
    }

    /// Registers a POST carrying `requests` (ids, in order); the returned receiver gets its
    /// answer.
    pub(crate) async fn register(
        &self,
        requests: &[RequestId],
        initialize: bool,
        batch: bool,
    ) -> Result<oneshot::Receiver<Decision>, Refused> {
        let mut state = self.state.lock().await;
        if state.ended {
            return Err(Refused::Ended);
        }
        if !initialize && !requests.is_empty() {
            // A request after `initialize`: the handshake is over.
            self.handshaking.store(false, Ordering::SeqCst);
        }
        // The stream's own set of pending ids finds the repeats within the POST: no second set.
        let mut pending = HashSet::with_capacity(requests.len());
        for id in requests {
            if state.requests.contains_key(id) || !pending.insert(id.clone()) {
                return Err(Refused::DuplicateId(id.clone()));
            }
        }
        let stream = StreamId(state.next_stream);
        state.next_stream += 1;
        let (tx, rx) = oneshot::channel();
        state.requests.reserve(requests.len());
        for id in requests {
            state.requests.insert(id.clone(), stream);
        }
        state.streams.insert(
            stream,
            Stream {
                pending,
                decide: Some(tx),
                initialize,
                batch,
                ..Stream::default()
            },
        );
        Ok(rx)
    }

    /// Routes one message of the application.
    pub(crate) async fn send(&self, message: Message, related: Option<RequestId>) {
        {
            let mut state = self.state.lock().await;
            if state.ended {
                return;
            }
            if state.old_sse.is_some() {
                self.to_old_sse(&mut state, &[message]);
            } else {
                self.route(&mut state, message, related);
            }
        }
        self.drain().await;
    }

    /// Makes this a session of the deprecated HTTP+SSE transport, writing to `stream`.
    #[cfg(feature = "legacy-sse")]
    pub(crate) async fn use_old_sse(&self, stream: mpsc::Sender<Bytes>) {
        self.old_transport.store(true, Ordering::SeqCst);
        self.state.lock().await.old_sse = Some(stream);
    }

    /// Whether this is a session of the deprecated HTTP+SSE transport, which the Streamable
    /// HTTP paths must not serve (its answers go on its one stream, so a Streamable POST would
    /// wait forever).
    pub(crate) fn is_old_transport(&self) -> bool {
        self.old_transport.load(Ordering::SeqCst)
    }

    /// Writes messages on the one stream of an HTTP+SSE session; a reader too far behind (or
    /// gone) ends the session, as that transport cannot resume.
    fn to_old_sse(&self, state: &mut State, messages: &[Message]) {
        let Some(stream) = &state.old_sse else {
            return;
        };
        let mut failed = false;
        for message in messages {
            let mut frame = bytes::BytesMut::from(&b"event: message\n"[..]);
            frame.extend_from_slice(&sse::event(None, &encode(message)));
            if stream.try_send(frame.freeze()).is_err() {
                failed = true;
                break;
            }
        }
        if failed {
            self.end_locked(state, Closed::Ended);
        }
    }

    /// Routes a batch reply to the POST of the batch it answers: the stream of its members'
    /// requests, or, for a batch of only invalid members (whose errors name no request), the
    /// oldest batch POST still waiting with no request of its own (the application answers
    /// batches in the order they came).
    pub(crate) async fn send_batch(&self, messages: Vec<Message>) {
        {
            let mut state = self.state.lock().await;
            if state.ended {
                return;
            }
            if state.old_sse.is_some() {
                self.to_old_sse(&mut state, &messages);
            } else {
                self.route_batch(&mut state, messages);
            }
        }
        self.drain().await;
    }

    fn route_batch(&self, state: &mut State, messages: Vec<Message>) {
        let by_member = messages
            .iter()
            .filter_map(final_id)
            .find_map(|id| state.requests.get(id).copied());
        let stream_id = by_member.or_else(|| {
            state
                .streams
                .iter()
                .filter(|(_, s)| s.batch && s.pending.is_empty() && s.decide.is_some())
                .map(|(id, _)| *id)
                .min()
        });
        let Some((stream_id, mut stream)) =
            stream_id.and_then(|id| Some((id, state.streams.remove(&id)?)))
        else {
            tracing::debug!(session = %redact(&self.id), "dropped a batch reply to no batch in flight");
            return;
        };
        for message in &messages {
            if let Some(id) = final_id(message)
                && stream.pending.remove(id)
            {
                state.requests.remove(id);
            }
        }
        if !stream.sse {
            // Nothing was sent yet: the whole reply at once, as one JSON array.
            if let Some(decide) = stream.decide.take() {
                let body = Bytes::from(modelctx_types::encode_batch(&messages));
                let _ = decide.send(Decision::Json(body));
            }
        } else {
            for message in &messages {
                self.emit(state, stream_id, message);
            }
        }
        if !stream.sse || stream.pending.is_empty() {
            // Answered: the connection ends (once its events are written); SSE events stay in
            // the store for resumption.
            for id in stream.pending.drain() {
                state.requests.remove(&id);
            }
            if !stream.sse {
                return;
            }
            state.outbox.push_back(Effect::Finish(stream_id));
        }
        state.streams.insert(stream_id, stream);
    }

    fn route(&self, state: &mut State, message: Message, related: Option<RequestId>) {
        let answers = final_id(&message).cloned();
        let stream_id = related
            .as_ref()
            .or(answers.as_ref())
            .and_then(|id| state.requests.get(id).copied());
        let Some(stream_id) = stream_id else {
            if answers.is_some() {
                // A response for no request in flight here (the standalone stream never carries
                // responses): nothing reads it.
                tracing::debug!(session = %redact(&self.id), "dropped a response to no request in flight");
                return;
            }
            return self.to_standalone(state, message);
        };
        let Some(mut stream) = state.streams.remove(&stream_id) else {
            return;
        };
        let completes = answers.as_ref().is_some_and(|id| stream.pending.remove(id));
        if completes && let Some(id) = &answers {
            state.requests.remove(id);
        }
        let done = completes && stream.pending.is_empty();
        if !stream.sse {
            if completes && !stream.batch && self.sse_responses() {
                // Configured to answer with SSE: the stream opens for the response alone.
            } else if done && !stream.batch {
                // The one response of a single request: its body, with nothing gathered.
                if let Some(decide) = stream.decide.take() {
                    let _ = decide.send(Decision::Json(encode(&message)));
                }
                if stream.initialize && matches!(message, Message::Error(_)) {
                    self.end_locked(state, Closed::Ended);
                }
                return;
            } else if completes {
                // A batch (a single request's stream completes when it is done, above; an
                // `initialize` is never in a batch): its responses gathered into one array.
                stream.collected.push(message);
                if done {
                    let body = Bytes::from(modelctx_types::encode_batch(&stream.collected));
                    if let Some(decide) = stream.decide.take() {
                        let _ = decide.send(Decision::Json(body));
                    }
                } else {
                    state.streams.insert(stream_id, stream);
                }
                return;
            }
            // Something before the response: the answer is a stream.
            let collected = std::mem::take(&mut stream.collected);
            let (tx, rx) = mpsc::channel(self.buffer());
            let reply = match stream.decide.take() {
                Some(decide) => OpenReply::Decide(decide, rx),
                None => OpenReply::Nobody,
            };
            self.open_sse(state, &mut stream, stream_id, reply);
            stream.live = Some(tx);
            for earlier in collected {
                self.emit(state, stream_id, &earlier);
            }
        }
        self.emit(state, stream_id, &message);
        if done {
            // The stream is complete: its connection ends once its events are written; they
            // stay in the store for resumption.
            state.outbox.push_back(Effect::Finish(stream_id));
        }
        state.streams.insert(stream_id, stream);
    }

    fn sse_responses(&self) -> bool {
        self.config().is_some_and(|s| s.config.sse_responses)
    }

    fn buffer(&self) -> usize {
        self.config().map_or(256, |s| s.config.stream_buffer).max(1)
    }

    /// Starts SSE on `stream`: the store records it with its pending requests, then its priming
    /// event on 2025-11-25 sessions (none before; a session whose version the application has
    /// not reported yet follows 2025-11-25), which `reply` gets (with the stream's first bytes)
    /// once stored.
    fn open_sse(
        &self,
        state: &mut State,
        stream: &mut Stream,
        stream_id: StreamId,
        reply: OpenReply,
    ) {
        stream.sse = true;
        let prime = state
            .version
            .is_none_or(|v| v >= ProtocolVersion::V2025_11_25);
        let mut pending: Vec<RequestId> = stream.pending.iter().cloned().collect();
        pending.sort_unstable();
        state.outbox.push_back(Effect::Open {
            stream: stream_id,
            pending,
            prime,
            reply,
        });
    }

    /// Has `message` stored as the next event of `stream` and written to its connection, if
    /// any, when the outbox is drained. A connection that is gone or too far behind is let go:
    /// the client resumes from the store.
    fn emit(&self, state: &mut State, stream_id: StreamId, message: &Message) {
        state.outbox.push_back(Effect::Append {
            stream: stream_id,
            data: encode(message),
        });
    }

    /// A message for the standalone stream: written to it while a connection reads it; else
    /// queued for the next GET here. When the application shares its sessions, a standalone
    /// stream this endpoint holds gets it stored even with no connection (the client may
    /// resume the stream on another instance, which takes it over from the store), unless
    /// the store's record says another instance took it over ([`Effect::AppendStandalone`]).
    fn to_standalone(&self, state: &mut State, message: Message) {
        if let Some(stream_id) = state.standalone
            && let Some(stream) = state.streams.get(&stream_id)
        {
            if self.config().is_some_and(|s| s.shares_sessions()) {
                // Held until another instance's GET takes it over: the record says.
                state.outbox.push_back(Effect::AppendStandalone {
                    stream: stream_id,
                    data: encode(&message),
                });
                return;
            }
            if stream.live.as_ref().is_some_and(|l| !l.is_closed()) {
                return self.emit(state, stream_id, &message);
            }
        }
        self.enqueue(state, encode(&message));
    }

    /// Queues `data` for the next standalone stream opened here, the oldest dropped beyond
    /// `standalone_queue`.
    fn enqueue(&self, state: &mut State, data: Bytes) {
        let limit = self.config().map_or(256, |s| s.config.standalone_queue);
        if state.queue.len() >= limit {
            state.queue.pop_front();
            tracing::warn!(
                session = %redact(&self.id),
                "standalone queue full ({limit}): dropped its oldest message"
            );
        }
        if limit > 0 {
            state.queue.push_back(data);
        }
    }

    /// Opens a standalone stream (GET without `Last-Event-ID`): `None` when one is open already.
    pub(crate) async fn open_standalone(&self) -> Option<(Bytes, mpsc::Receiver<Bytes>)> {
        let (reply, first) = oneshot::channel();
        let rx = {
            let mut state = self.state.lock().await;
            if state.ended {
                return None;
            }
            if let Some(old) = state.standalone {
                if state
                    .streams
                    .get(&old)
                    .and_then(|s| s.live.as_ref())
                    .is_some_and(|l| !l.is_closed())
                {
                    return None;
                }
                // Replaced: nothing more is written to it (a follower elsewhere ends).
                if state.streams.remove(&old).is_some() {
                    state.outbox.push_back(Effect::Finish(old));
                }
            }
            let stream_id = StreamId(state.next_stream);
            state.next_stream += 1;
            let mut stream = Stream::default();
            self.open_sse(&mut state, &mut stream, stream_id, OpenReply::First(reply));
            let (tx, rx) = mpsc::channel(self.buffer());
            stream.live = Some(tx);
            state.standalone = Some(stream_id);
            state.streams.insert(stream_id, stream);
            state
                .outbox
                .push_back(Effect::Standalone(StandaloneRecord::Set(stream_id)));
            // Queued messages follow the priming event, in order.
            while let Some(data) = state.queue.pop_front() {
                state.outbox.push_back(Effect::Append {
                    stream: stream_id,
                    data,
                });
            }
            rx
        };
        self.drain().await;
        let first = first.await.ok()?;
        Some((first, rx))
    }

    /// Resumes a stream after `last` (GET with `Last-Event-ID`): the stored events after it, then
    /// the live stream when it is still going. `Err` when it cannot be resumed exactly, or the
    /// store cannot say now.
    ///
    /// Exactly once (finding 17): the replay is an effect of the session's outbox, performed in
    /// order with its appends and never under the session's lock. Every event appended before
    /// the replay is in it; the connection takes over the stream right after the replay, before
    /// the next append, so every later event goes to it.
    ///
    /// A stream this endpoint does not hold (another instance opened it, or it is complete) is
    /// read with `EventStore::follow`: its stored events, then, when the store carries them
    /// (a store shared by instances), its later events as they are appended elsewhere, each
    /// once, until the stream is finished. Unless it is the session's standalone stream as
    /// the store records it: then this endpoint takes it over ([`Session::take_over`]), since
    /// the holder of the standalone stream is the endpoint serving the client's newest GET.
    pub(crate) async fn resume(
        &self,
        last: &EventId,
    ) -> Result<(Bytes, mpsc::Receiver<Bytes>), NotResumed> {
        let (reply, result) = oneshot::channel();
        let (tx, rx) = mpsc::channel(self.buffer());
        let ended = || NotResumed::Refused("the session has ended".into());
        {
            let mut state = self.state.lock().await;
            if state.ended {
                return Err(ended());
            }
            state.outbox.push_back(Effect::Replay {
                last: *last,
                live: tx,
                reply,
            });
        }
        self.drain().await;
        let first = result.await.map_err(|_| ended())??;
        Ok((first, rx))
    }

    /// Performs the outbox's effects in order, store I/O included, without holding the
    /// session's state lock across any of it (finding 17): other operations of the session go
    /// on meanwhile. Runs on the caller's task (a plain send with a store that does not wait
    /// completes inline, with no task spawned); a caller that goes away mid-way hands the
    /// unfinished drain to a task of its own ([`Finish`]), so that it cannot leave an effect
    /// taken from the outbox but not performed (an event stored but not written, a stream
    /// never opened).
    async fn drain(&self) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        Finish(Some(Box::pin(async move { me.drain_now().await }))).await;
    }

    async fn drain_now(&self) {
        let Some(shared) = self.config() else {
            self.state.lock().await.outbox.clear();
            return;
        };
        let _io = self.io.lock().await;
        loop {
            let effect = {
                let mut state = self.state.lock().await;
                match state.outbox.pop_front() {
                    Some(effect) => effect,
                    None => {
                        if state.outbox.capacity() > 64 {
                            state.outbox.shrink_to_fit();
                        }
                        return;
                    }
                }
            };
            self.perform(&shared, effect).await;
        }
    }

    /// Performs one effect: the store I/O with no lock held, then its outcome under the state
    /// lock (no await there).
    async fn perform(&self, shared: &Shared, effect: Effect) {
        let store = &shared.config.event_store;
        match effect {
            Effect::Open {
                stream,
                pending,
                prime,
                reply,
            } => {
                if let Err(e) = store.open_stream(&self.id, stream, &pending).await {
                    // The stream goes on; only a shared store's stand-in for a stopped
                    // instance (an error for each pending request) misses it.
                    tracing::warn!(session = %redact(&self.id), %stream, error = %e, "stream not recorded as opened");
                }
                let first = if prime {
                    match store.append(&self.id, stream, Bytes::new()).await {
                        Ok(id) => sse::priming(&id.to_string(), shared.config.sse_retry),
                        Err(e) => {
                            // No id to resume from: the stream opens without it.
                            shared.event_unstored();
                            tracing::warn!(session = %redact(&self.id), %stream, error = %e, "priming event not stored: sent without it");
                            Bytes::new()
                        }
                    }
                } else {
                    Bytes::new()
                };
                match reply {
                    OpenReply::Nobody => {}
                    OpenReply::Decide(decide, rx) => {
                        let _ = decide.send(Decision::Sse { first, rx });
                    }
                    OpenReply::First(reply) => {
                        let _ = reply.send(first);
                    }
                }
            }
            Effect::Append { stream, data } => self.append(shared, stream, data).await,
            Effect::AppendStandalone { stream, data } => {
                match store.standalone(&self.id).await {
                    Ok(Some(held)) if held != stream => {
                        // Taken over by a GET elsewhere, which finished this stream: nothing
                        // reads it any more.
                        let mut state = self.state.lock().await;
                        let state = &mut *state;
                        if state.standalone == Some(stream) {
                            state.standalone = None;
                            state.streams.remove(&stream);
                            shrink(&mut state.streams);
                            tracing::debug!(session = %redact(&self.id), %stream, %held, "standalone stream taken over elsewhere: let go of it");
                        }
                        if state.ended {
                            return;
                        }
                        if state.standalone == Some(held) && state.streams.contains_key(&held) {
                            // Replaced here meanwhile (a later GET on this endpoint): the
                            // message goes on the stream held now.
                            state
                                .outbox
                                .push_front(Effect::AppendStandalone { stream: held, data });
                        } else {
                            self.enqueue(state, data);
                        }
                    }
                    // Still ours (or the store cannot say now: written as before).
                    _ => self.append(shared, stream, data).await,
                }
            }
            Effect::Replay { last, live, reply } => {
                let local = self.state.lock().await.streams.contains_key(&last.stream);
                if !local {
                    return match store.standalone(&self.id).await {
                        Ok(Some(held)) if held == last.stream => {
                            self.take_over(shared, last, live, reply).await
                        }
                        Ok(_) => self.follow(shared, last, live, reply).await,
                        Err(e) => {
                            let _ = reply.send(Err(not_resumed(&self.id, &last, e.into())));
                        }
                    };
                }
                self.replay_local(store, last, live, reply).await;
            }
            Effect::Finish(stream) => {
                {
                    let mut state = self.state.lock().await;
                    if state
                        .streams
                        .get(&stream)
                        .is_some_and(|s| s.pending.is_empty())
                    {
                        state.streams.remove(&stream);
                        shrink(&mut state.streams);
                    }
                }
                if let Err(e) = store.finish_stream(&self.id, stream).await {
                    // A follower elsewhere ends at the store's next word on it instead.
                    tracing::warn!(session = %redact(&self.id), %stream, error = %e, "stream not recorded as finished");
                }
            }
            Effect::Standalone(record) => {
                let result = match record {
                    StandaloneRecord::Set(stream) => {
                        store.set_standalone(&self.id, Some(stream)).await
                    }
                    StandaloneRecord::Clear(stream) => match store.standalone(&self.id).await {
                        Ok(Some(held)) if held == stream => {
                            store.set_standalone(&self.id, None).await
                        }
                        Ok(_) => Ok(()),
                        Err(e) => Err(e),
                    },
                };
                if let Err(e) = result {
                    tracing::warn!(session = %redact(&self.id), error = %e, "standalone stream not recorded");
                }
            }
            Effect::RemoveSession => {
                if let Err(e) = store.remove_session(&self.id).await {
                    // They go with the store's own bounds (age, count) instead.
                    tracing::warn!(session = %redact(&self.id), error = %e, "events not removed");
                }
            }
        }
    }

    /// Stores `data` as the next event of `stream`, then writes it to the stream's connection,
    /// if any.
    async fn append(&self, shared: &Shared, stream: StreamId, data: Bytes) {
        let store = &shared.config.event_store;
        let stored = store.append(&self.id, stream, data.clone()).await;
        let mut state = self.state.lock().await;
        let entry = state.streams.get_mut(&stream);
        let reading = entry
            .as_ref()
            .and_then(|s| s.live.as_ref())
            .is_some_and(|l| !l.is_closed());
        let id = match stored {
            Ok(id) => Some(id.to_string()),
            Err(e) => {
                // Written live without an id (the client cannot resume to it); with
                // no connection reading the stream, it is lost.
                shared.event_unstored();
                tracing::warn!(
                    session = %redact(&self.id),
                    %stream,
                    live = reading,
                    error = %e,
                    "event not stored: written live without an id"
                );
                None
            }
        };
        if let Some(entry) = entry
            && let Some(live) = &entry.live
            && live.try_send(sse::event(id.as_deref(), &data)).is_err()
        {
            // Gone or too far behind: let go; the client resumes from the store.
            entry.live = None;
        }
    }

    /// Resumes `last.stream`, a stream of this endpoint: its stored events after `last` to
    /// `reply`, then `live` takes the stream over while it is still going.
    async fn replay_local(
        &self,
        store: &Arc<dyn crate::event_store::EventStore>,
        last: EventId,
        live: mpsc::Sender<Bytes>,
        reply: oneshot::Sender<Result<Bytes, NotResumed>>,
    ) {
        let events = match store.replay_after(&self.id, &last).await {
            Ok(events) => events,
            Err(e) => {
                let _ = reply.send(Err(not_resumed(&self.id, &last, e)));
                return;
            }
        };
        let first = replayed(&events);
        let mut state = self.state.lock().await;
        let state = &mut *state;
        if !state.ended
            && let Some(stream) = state.streams.get_mut(&last.stream)
        {
            // Still going: this connection takes over (a stream is read by one
            // connection), and the queued messages of a standalone stream follow.
            stream.live = Some(live);
            if state.standalone == Some(last.stream) {
                while let Some(data) = state.queue.pop_back() {
                    state.outbox.push_front(Effect::Append {
                        stream: last.stream,
                        data,
                    });
                }
            }
        }
        // Otherwise the stream is complete: `live` is dropped and the body ends after
        // the replay.
        let _ = reply.send(Ok(first));
    }

    /// Takes over the session's standalone stream from another instance: a GET with
    /// `Last-Event-ID` of `last.stream`, which this endpoint does not hold and which the event
    /// store's record names as the session's standalone stream. The endpoint serving the
    /// client's newest GET holds the standalone stream, whether the instance that held it is
    /// dead (`kill -9`: its lease would tell only after it runs out, and meanwhile no instance
    /// would write the session's changes) or alive with its client gone.
    ///
    /// In order: the stored events of `last.stream` after `last`; a new stream of this
    /// endpoint becomes the session's standalone stream, read by `live`, and the record names
    /// it (from then on the fleet writes the session's changes here); what the old stream got
    /// meanwhile is read once more; the old stream is finished (its followers end); the new
    /// stream opens with its priming event. The reply is the replayed events then that priming
    /// event, so the client's next `Last-Event-ID` names the new stream. The old holder, if
    /// alive, lets go of its stream the next time it would write to it
    /// ([`Effect::AppendStandalone`]).
    async fn take_over(
        &self,
        shared: &Shared,
        last: EventId,
        live: mpsc::Sender<Bytes>,
        reply: oneshot::Sender<Result<Bytes, NotResumed>>,
    ) {
        let store = &shared.config.event_store;
        let mut events = match store.replay_after(&self.id, &last).await {
            Ok(events) => events,
            Err(e) => {
                let _ = reply.send(Err(not_resumed(&self.id, &last, e)));
                return;
            }
        };
        let (stream, prime) = {
            let mut state = self.state.lock().await;
            let state = &mut *state;
            if state.ended {
                let _ = reply.send(Err(NotResumed::Refused("the session has ended".into())));
                return;
            }
            // A standalone stream this endpoint held before is replaced: the record names
            // another one now.
            if let Some(old) = state.standalone.take()
                && state.streams.remove(&old).is_some()
            {
                state.outbox.push_back(Effect::Finish(old));
            }
            let stream = StreamId(state.next_stream);
            state.next_stream += 1;
            state.streams.insert(
                stream,
                Stream {
                    sse: true,
                    live: Some(live),
                    ..Stream::default()
                },
            );
            state.standalone = Some(stream);
            // Messages queued here follow the priming event, before any sent from now on.
            while let Some(data) = state.queue.pop_back() {
                state.outbox.push_front(Effect::Append { stream, data });
            }
            let prime = state
                .version
                .is_none_or(|v| v >= ProtocolVersion::V2025_11_25);
            (stream, prime)
        };
        if let Err(e) = store.set_standalone(&self.id, Some(stream)).await {
            tracing::warn!(session = %redact(&self.id), error = %e, "standalone stream not recorded");
        }
        // An event the old holder appended between the replay and the record.
        let seen = events.last().map_or(last, |(id, _)| *id);
        match store.replay_after(&self.id, &seen).await {
            Ok(more) => events.extend(more),
            Err(e) => {
                tracing::warn!(session = %redact(&self.id), error = %e, "standalone stream taken over without a second read");
            }
        }
        if let Err(e) = store.finish_stream(&self.id, last.stream).await {
            tracing::warn!(session = %redact(&self.id), stream = %last.stream, error = %e, "stream not recorded as finished");
        }
        if let Err(e) = store.open_stream(&self.id, stream, &[]).await {
            tracing::warn!(session = %redact(&self.id), %stream, error = %e, "stream not recorded as opened");
        }
        let mut first = bytes::BytesMut::from(&replayed(&events)[..]);
        if prime {
            match store.append(&self.id, stream, Bytes::new()).await {
                Ok(id) => {
                    first.extend_from_slice(&sse::priming(&id.to_string(), shared.config.sse_retry))
                }
                Err(e) => {
                    shared.event_unstored();
                    tracing::warn!(session = %redact(&self.id), %stream, error = %e, "priming event not stored: sent without it");
                }
            }
        }
        tracing::debug!(session = %redact(&self.id), from = %last.stream, to = %stream, "took the standalone stream over");
        let _ = reply.send(Ok(first.freeze()));
    }

    /// Resumes a stream this endpoint does not hold (`EventStore::follow`): its stored events
    /// after `last` to `reply`; then, when the store carries the stream's later events
    /// (`Follow::rest`), a task writes each to `live`, once (an id at or before the last one
    /// written is skipped), until the store closes the channel (the stream is finished), the
    /// client goes away or the session ends. Without them, the body ends after the replay.
    async fn follow(
        &self,
        shared: &Shared,
        last: EventId,
        live: mpsc::Sender<Bytes>,
        reply: oneshot::Sender<Result<Bytes, NotResumed>>,
    ) {
        let follow = match shared.config.event_store.follow(&self.id, &last).await {
            Ok(follow) => follow,
            Err(e) => {
                let _ = reply.send(Err(not_resumed(&self.id, &last, e)));
                return;
            }
        };
        let first = replayed(&follow.events);
        let mut seen = follow.events.last().map_or(last, |(id, _)| *id);
        if let (false, Some(mut rest)) = (follow.done, follow.rest) {
            let mut state = self.state.lock().await;
            if !state.ended {
                state
                    .following
                    .retain(|l| l.upgrade().is_some_and(|l| !l.is_closed()));
                state.following.push(live.downgrade());
                let ended = self.ended.clone();
                tokio::spawn(async move {
                    loop {
                        let event = tokio::select! {
                            event = rest.recv() => event,
                            () = live.closed() => break,
                            () = ended.cancelled() => break,
                        };
                        let Some((id, data)) = event else {
                            break;
                        };
                        if id.stream != seen.stream || id.seq <= seen.seq {
                            continue;
                        }
                        seen = id;
                        if data.is_empty() {
                            continue;
                        }
                        let event = sse::event(Some(&id.to_string()), &data);
                        tokio::select! {
                            sent = live.send(event) => if sent.is_err() { break },
                            () = ended.cancelled() => break,
                        }
                    }
                });
            }
        }
        let _ = reply.send(Ok(first));
    }

    /// The application will not answer `request` (its client cancelled it): it is no longer in
    /// flight. Its stream ends when nothing else is pending on it: an SSE connection closes (its
    /// events stay in the store), a POST still waiting gets the answers gathered for its batch,
    /// or an event stream with nothing in it.
    pub(crate) async fn release(&self, request: &RequestId) {
        if self.release_locked(request).await {
            self.drain().await;
        }
    }

    /// [`release`](Self::release) under the state lock; whether an SSE stream completed (its
    /// `Finish` is in the outbox).
    async fn release_locked(&self, request: &RequestId) -> bool {
        let mut state = self.state.lock().await;
        let Some(stream_id) = state.requests.remove(request) else {
            return false;
        };
        let Some(mut stream) = state.streams.remove(&stream_id) else {
            return false;
        };
        stream.pending.remove(request);
        if !stream.pending.is_empty() {
            state.streams.insert(stream_id, stream);
            return false;
        }
        if let Some(decide) = stream.decide.take() {
            let decision = if stream.collected.is_empty() {
                let (_, rx) = mpsc::channel(1);
                Decision::Sse {
                    first: Bytes::new(),
                    rx,
                }
            } else {
                Decision::Json(Bytes::from(modelctx_types::encode_batch(&stream.collected)))
            };
            let _ = decide.send(decision);
        }
        // Dropping the stream drops its connection's sender: the body ends. An event stream
        // is complete: the store is told, after the events before.
        if stream.sse {
            state.outbox.push_back(Effect::Finish(stream_id));
        }
        stream.sse
    }

    /// Closes the connection of request `request`'s stream (2025-11-25 sessions only). A POST
    /// not answered yet becomes a stream of its priming event alone, which the client resumes
    /// from.
    pub(crate) async fn close_stream(&self, request: &RequestId) -> bool {
        let closed = self.close_stream_locked(request).await;
        self.drain().await;
        closed
    }

    async fn close_stream_locked(&self, request: &RequestId) -> bool {
        let mut state = self.state.lock().await;
        if state
            .version
            .is_some_and(|v| v < ProtocolVersion::V2025_11_25)
        {
            return false;
        }
        let Some(stream_id) = state.requests.get(request).copied() else {
            return false;
        };
        let Some(mut stream) = state.streams.remove(&stream_id) else {
            return false;
        };
        let closed = if stream.sse {
            stream.live.take().is_some()
        } else if let Some(decide) = stream.decide.take() {
            // Nothing sent yet: SSE with the priming event (its id to resume from), and the
            // connection ends there.
            let collected = std::mem::take(&mut stream.collected);
            let (_, rx) = mpsc::channel(1);
            self.open_sse(
                &mut state,
                &mut stream,
                stream_id,
                OpenReply::Decide(decide, rx),
            );
            for earlier in collected {
                self.emit(&mut state, stream_id, &earlier);
            }
            true
        } else {
            false
        };
        state.streams.insert(stream_id, stream);
        closed
    }

    /// Ends the session.
    pub(crate) async fn end(&self) {
        self.end_as(Closed::Ended).await;
    }

    /// Lets go of the session, for `reason` (the table decides which: `Shared::let_go`).
    pub(crate) async fn end_as(&self, reason: Closed) {
        self.end_locked(&mut *self.state.lock().await, reason);
        self.drain().await;
    }

    /// Answers the undecided POSTs of `requests` with 503 (`LegacySession::unavailable`).
    pub(crate) async fn unavailable(&self, requests: &[RequestId]) -> bool {
        let mut all = true;
        {
            let mut state = self.state.lock().await;
            let state = &mut *state;
            let mut answered = HashSet::new();
            for id in requests {
                if answered.contains(id) {
                    continue;
                }
                let Some(stream_id) = state.requests.get(id).copied() else {
                    all = false;
                    continue;
                };
                if !state
                    .streams
                    .get(&stream_id)
                    .is_some_and(|s| !s.sse && s.decide.is_some())
                {
                    all = false;
                    continue;
                }
                let Some(mut stream) = state.streams.remove(&stream_id) else {
                    continue;
                };
                let single = (!stream.batch && stream.pending.len() == 1).then(|| id.clone());
                for pending in stream.pending.drain() {
                    state.requests.remove(&pending);
                    answered.insert(pending);
                }
                if let Some(decide) = stream.decide.take() {
                    let _ = decide.send(Decision::Unavailable(single));
                }
                if stream.initialize {
                    self.end_locked(state, Closed::Ended);
                    break;
                }
            }
            shrink(&mut state.streams);
            shrink(&mut state.requests);
        }
        self.drain().await;
        all
    }

    /// Lets go of the session; with [`Closed::Ended`] its events leave the store when the outbox
    /// is next drained (after the effects before it), with [`Closed::Forgotten`] they stay.
    fn end_locked(&self, state: &mut State, reason: Closed) {
        if state.ended {
            return;
        }
        state.ended = true;
        if reason == Closed::Forgotten {
            // Its events stay in the store, for whichever instance serves the session next:
            // this endpoint's streams are complete (nothing more is written to them), and its
            // standalone stream is no longer held here.
            let mut open: Vec<StreamId> = state
                .streams
                .iter()
                .filter(|(_, s)| s.sse)
                .map(|(id, _)| *id)
                .collect();
            open.sort_unstable();
            let standalone = state.standalone.filter(|id| state.streams.contains_key(id));
            for stream in open {
                state.outbox.push_back(Effect::Finish(stream));
            }
            if let Some(stream) = standalone {
                state
                    .outbox
                    .push_back(Effect::Standalone(StandaloneRecord::Clear(stream)));
            }
        }
        state.following.clear();
        state.streams.clear();
        state.requests.clear();
        state.queue.clear();
        state.standalone = None;
        state.old_sse = None;
        self.ended.cancel();
        if let Some(shared) = self.config() {
            shared.remove(self);
        }
        if reason == Closed::Ended {
            state.outbox.push_back(Effect::RemoveSession);
        }
        // Taken, not borrowed: the handler holds this session (a cycle that kept every ended
        // session and its handler alive).
        if let Some(handler) = self.handler.take() {
            handler.closed(reason);
        }
    }

    /// Whether the session has ended.
    pub(crate) async fn is_ended(&self) -> bool {
        self.state.lock().await.ended
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use modelctx_types::{Incoming, Message};

    use super::super::{
        LegacyHandler, LegacySession, McpApp, McpService, ModernRequest, RequestContext,
        ServerConfig,
    };

    /// An application whose handler holds its session, as a real server's does. It answers
    /// `initialize` at once and nothing else (every other request waits forever); it records
    /// every other input, the requests it was told were abandoned, the sessions it opened and
    /// why each was let go. With `adopts`, it adopts any session id at that version (its state
    /// "kept elsewhere"); with `shares`, it shares its sessions (`McpApp::shares_sessions`).
    #[derive(Default)]
    struct App {
        dropped: Arc<AtomicUsize>,
        inputs: Arc<std::sync::Mutex<Vec<Message>>>,
        abandoned: Arc<std::sync::Mutex<Vec<modelctx_types::RequestId>>>,
        sessions: Arc<std::sync::Mutex<Vec<LegacySession>>>,
        closed: Arc<std::sync::Mutex<Vec<(String, super::super::Closed)>>>,
        adopts: Option<modelctx_types::ProtocolVersion>,
        shares: bool,
        counters: Option<super::super::Counters>,
    }

    struct Handler {
        session: LegacySession,
        dropped: Arc<AtomicUsize>,
        inputs: Arc<std::sync::Mutex<Vec<Message>>>,
        abandoned: Arc<std::sync::Mutex<Vec<modelctx_types::RequestId>>>,
        closed: Arc<std::sync::Mutex<Vec<(String, super::super::Closed)>>>,
    }

    impl Drop for Handler {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl LegacyHandler for Handler {
        fn input(&self, input: Incoming, _context: RequestContext) {
            let request = match input {
                Incoming::Single(Message::Request(request)) if request.method == "initialize" => {
                    request
                }
                Incoming::Single(other) => return self.inputs.lock().unwrap().push(other),
                _ => return,
            };
            let id = serde_json::to_string(&request.id).unwrap();
            let text = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2025-11-25","capabilities":{{}},"serverInfo":{{"name":"t","version":"0"}}}}}}"#
            );
            let Ok(Incoming::Single(response)) = modelctx_types::decode(text.as_bytes()) else {
                panic!("not a response: {text}");
            };
            let session = self.session.clone();
            tokio::spawn(async move { session.send(response, Some(request.id)).await });
        }

        fn abandoned(&self, request: modelctx_types::RequestId) {
            self.abandoned.lock().unwrap().push(request);
        }

        fn closed(&self, reason: super::super::Closed) {
            let id = self.session.id().to_owned();
            self.closed.lock().unwrap().push((id, reason));
        }
    }

    impl McpApp for App {
        fn open_session(&self, session: LegacySession) -> Arc<dyn LegacyHandler> {
            self.sessions.lock().unwrap().push(session.clone());
            Arc::new(Handler {
                session,
                dropped: self.dropped.clone(),
                inputs: self.inputs.clone(),
                abandoned: self.abandoned.clone(),
                closed: self.closed.clone(),
            })
        }

        fn adopt_session<'a>(
            &'a self,
            _id: &'a str,
            _principal: Option<&'a super::super::Principal>,
        ) -> BoxFuture<'a, Result<Option<super::super::Adopted>, super::super::Unavailable>>
        {
            let adopted = self
                .adopts
                .map(|version| super::super::Adopted::new(version, None));
            Box::pin(std::future::ready(Ok(adopted)))
        }

        fn shares_sessions(&self) -> bool {
            self.shares
        }

        fn counters(&self) -> Option<super::super::Counters> {
            self.counters.clone()
        }

        fn modern(&self, _request: ModernRequest) {}
    }

    /// The peer of a request from this machine (the service checks it with the loopback lists).
    const LOOPBACK_PEER: crate::server::PeerAddr = crate::server::PeerAddr(
        std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 50_000),
    );

    fn initialize() -> http::Request<String> {
        http::Request::post("/mcp")
            .header("host", "127.0.0.1")
            .extension(LOOPBACK_PEER)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(
                r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#
                    .to_owned(),
            )
            .unwrap()
    }

    /// `sse_responses`: a request whose response is all there is gets an event stream too.
    #[tokio::test]
    async fn sse_responses_answer_with_an_event_stream() {
        let dropped = Arc::new(AtomicUsize::new(0));
        for (sse, media_type) in [(false, "application/json"), (true, "text/event-stream")] {
            let config = ServerConfig {
                sse_responses: sse,
                ..ServerConfig::default()
            };
            let app = Arc::new(App {
                dropped: dropped.clone(),
                ..App::default()
            });
            let service = McpService::new(config, app).unwrap();
            let response = service.handle(initialize()).await;
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["content-type"], media_type);
        }
    }

    /// An ended session lets go of its handler (which holds the session: a cycle that kept every
    /// ended session's memory, ~5 KiB each, for the life of the server).
    #[tokio::test]
    async fn an_ended_session_drops_its_handler() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let service = McpService::new(
            ServerConfig::default(),
            Arc::new(App {
                dropped: dropped.clone(),
                ..App::default()
            }),
        )
        .unwrap();
        for round in 1..=3 {
            let response = service.handle(initialize()).await;
            assert_eq!(response.status(), 200);
            let session = response.headers()["mcp-session-id"].clone();
            let delete = http::Request::delete("/mcp")
                .header("host", "127.0.0.1")
                .extension(LOOPBACK_PEER)
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25")
                .body(String::new())
                .unwrap();
            let response = service.handle(delete).await;
            assert!(response.status().is_success(), "{}", response.status());
            assert!(service.table_sizes().await.is_empty());
            assert_eq!(dropped.load(Ordering::SeqCst), round);
        }
    }

    /// The counters of the application (`McpApp::counters`) follow the sessions held and the
    /// streams open, and come back to zero: a POST's stream once read to its end, a standalone
    /// stream its client dropped, one its session's end closed; sessions once deleted.
    #[tokio::test]
    async fn the_counters_follow_sessions_and_streams_back_to_zero() {
        let counters = super::super::Counters::new();
        let app = Arc::new(App {
            counters: Some(counters.clone()),
            ..App::default()
        });
        let config = ServerConfig {
            sse_responses: true,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app).unwrap();
        assert!(service.counters().same(&counters));
        let count = || (counters.sessions(), counters.streams());
        assert_eq!(count(), (0, 0));

        // `initialize` answered on a stream: open while its body is.
        let response = service.handle(initialize()).await;
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let a = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(count(), (1, 1));
        let answered = events(response.into_body()).await;
        assert_eq!(answered.len(), 2, "priming and the answer: {answered:?}");
        assert_eq!(count(), (1, 0));
        let b = open(&service).await;
        assert_eq!(count(), (2, 0));

        // A standalone stream whose client goes away (its body dropped, as hyper drops it when
        // the connection closes).
        let get = service.handle(on_session("GET", &a, "")).await;
        assert_eq!(get.status(), 200);
        assert_eq!(count(), (2, 1));
        drop(get);
        assert_eq!(count(), (2, 0));

        // A standalone stream the session's end closes.
        let get = service.handle(on_session("GET", &b, "")).await;
        assert_eq!(get.status(), 200);
        assert_eq!(count(), (2, 1));
        let deleted = service.handle(on_session("DELETE", &b, "")).await;
        assert!(deleted.status().is_success(), "{}", deleted.status());
        let _ = events(get.into_body()).await;
        assert_eq!(count(), (1, 0));

        let deleted = service.handle(on_session("DELETE", &a, "")).await;
        assert!(deleted.status().is_success(), "{}", deleted.status());
        assert_eq!(count(), (0, 0));
        assert!(service.table_sizes().await.is_empty());
    }

    /// Served on a socket: a standalone stream whose client closes its connection stops
    /// counting once the server finds the connection gone (at the next keep-alive comment),
    /// and the session stays until it ends.
    #[tokio::test]
    async fn a_stream_whose_connection_closes_stops_counting() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let counters = super::super::Counters::new();
        let app = Arc::new(App {
            counters: Some(counters.clone()),
            ..App::default()
        });
        let config = ServerConfig {
            keep_alive: Some(std::time::Duration::from_millis(20)),
            ..ServerConfig::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let running = super::super::serve_on(listener, config, app).await.unwrap();
        let head = |request: String| async move {
            let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
            socket.write_all(request.as_bytes()).await.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                assert_eq!(within(socket.read(&mut byte)).await.unwrap(), 1);
                head.push(byte[0]);
            }
            (
                socket,
                String::from_utf8(head).unwrap().to_ascii_lowercase(),
            )
        };
        let body = initialize().into_body();
        let (_socket, answer) = head(format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ))
        .await;
        let session = answer
            .lines()
            .find_map(|line| line.strip_prefix("mcp-session-id: "))
            .expect("a session id")
            .trim()
            .to_owned();
        assert_eq!(counters.sessions(), 1);
        let (socket, answer) = head(format!(
            "GET /mcp HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\
             mcp-session-id: {session}\r\nmcp-protocol-version: 2025-11-25\r\n\r\n"
        ))
        .await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        assert_eq!(counters.streams(), 1);
        drop(socket);
        within(async {
            while counters.streams() != 0 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await;
        assert_eq!(counters.sessions(), 1);
        running.shutdown(std::time::Duration::from_secs(1)).await;
        assert_eq!((counters.sessions(), counters.streams()), (0, 0));
    }

    /// A request on session `session` (2025-11-25) with `body`.
    fn on_session(method: &str, session: &str, body: &str) -> http::Request<String> {
        http::Request::builder()
            .method(method)
            .uri("/mcp")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25")
            .extension(LOOPBACK_PEER)
            .body(body.to_owned())
            .unwrap()
    }

    /// The negotiated version is the one the application reports ([`LegacySession::set_version`]),
    /// compared as a version: the transport reads nothing from the `initialize` result (which
    /// said 2025-11-25 here).
    #[tokio::test]
    async fn the_version_is_the_one_the_application_reports() {
        let app = Arc::new(App::default());
        let service = McpService::new(ServerConfig::default(), app.clone()).unwrap();
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        assert_eq!(session.inner.version().await, None);
        let _call = hang(&service, &app, &id, None, 5).await;
        let call = modelctx_types::RequestId::from(5);
        session
            .set_version(modelctx_types::ProtocolVersion::V2025_06_18)
            .await;
        assert_eq!(
            session.inner.version().await,
            Some(modelctx_types::ProtocolVersion::V2025_06_18)
        );
        // Before 2025-11-25 a stream is not closed for resumption.
        assert!(!session.close_stream(&call).await);
        session
            .set_version(modelctx_types::ProtocolVersion::V2025_11_25)
            .await;
        assert!(session.close_stream(&call).await);
    }

    /// The batch rules are the session's (`modelctx_types::check_batch`), asked with the
    /// version the application reported: before 2025-03-26 is told (or at another version) a
    /// batch gets 400, even one of notifications; at 2025-03-26 it is accepted, unless it
    /// carries `initialize`.
    #[tokio::test]
    async fn batches_are_judged_by_the_sessions_rules() {
        let app = Arc::new(App::default());
        let service = McpService::new(ServerConfig::default(), app.clone()).unwrap();
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        let post = |body: &str| service.handle(on_session("POST", &id, body));
        let refusal = |response: http::Response<super::super::ResponseBody>| async move {
            assert_eq!(response.status(), 400);
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(value["error"]["code"], -32600, "{value}");
            value["error"]["message"].as_str().unwrap().to_owned()
        };
        let notes = r#"[{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]"#;
        let message = refusal(post(notes).await).await;
        assert!(message.contains("2025-03-26"), "{message}");
        session
            .set_version(modelctx_types::ProtocolVersion::V2025_11_25)
            .await;
        let message = refusal(post(notes).await).await;
        assert!(message.contains("2025-11-25"), "{message}");
        session
            .set_version(modelctx_types::ProtocolVersion::V2025_03_26)
            .await;
        assert_eq!(post(notes).await.status(), 202);
        let initialize = r#"[{"jsonrpc":"2.0","id":9,"method":"initialize","params":{}}]"#;
        let message = refusal(post(initialize).await).await;
        assert!(message.contains("initialize"), "{message}");
    }

    /// An id already in flight on the session, or repeated within one batch, is refused with
    /// an error response naming it; the first request with it is untouched and still answered.
    #[tokio::test]
    async fn a_request_id_in_flight_or_repeated_in_a_batch_is_refused() {
        let app = Arc::new(App::default());
        let service = McpService::new(ServerConfig::default(), app.clone()).unwrap();
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        session
            .set_version(modelctx_types::ProtocolVersion::V2025_03_26)
            .await;
        let refused = |reply: http::Response<super::super::ResponseBody>| async move {
            assert_eq!(reply.status(), 200);
            let body = within(reply.into_body().collect())
                .await
                .unwrap()
                .to_bytes();
            let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(value["error"]["code"], -32600, "{value}");
            assert!(
                value["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("already in flight"),
                "{value}"
            );
            value["id"].clone()
        };
        let batch = r#"[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"ping"}]"#;
        let reply = within(service.handle(on_session("POST", &id, batch))).await;
        assert_eq!(refused(reply).await, 3);
        let first = tokio::spawn({
            let service = service.clone();
            let request = on_session("POST", &id, r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#);
            async move { service.handle(request).await }
        });
        within(async {
            while !app
                .inputs
                .lock()
                .unwrap()
                .iter()
                .any(|m| String::from_utf8_lossy(&super::encode(m)).contains(r#""id":7,"#))
            {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await;
        let again = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#;
        let reply = within(service.handle(on_session("POST", &id, again))).await;
        assert_eq!(refused(reply).await, 7);
        within(session.send(response(7), Some(modelctx_types::RequestId::from(7)))).await;
        let answered = within(first).await.unwrap();
        assert_eq!(answered.headers()["content-type"], "application/json");
        let body = within(answered.into_body().collect())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], &super::encode(&response(7))[..]);
        assert_eq!(within(service.table_sizes()).await.requests, 0);
    }

    /// `LegacySession::release`: a request the application will not answer (its client
    /// cancelled it) no longer keeps its POST waiting: the POST ends, with nothing in it, and
    /// the request leaves the table.
    #[tokio::test]
    async fn a_released_request_no_longer_keeps_its_post_waiting() {
        let app = Arc::new(App::default());
        let config = ServerConfig {
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        let call = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"forever"}}"#;
        let post = tokio::spawn({
            let service = service.clone();
            let request = on_session("POST", &id, call);
            async move { service.handle(request).await }
        });
        within(async {
            while service.table_sizes().await.requests == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await;
        // Another id changes nothing.
        session.release(&modelctx_types::RequestId::from(5)).await;
        assert_eq!(service.table_sizes().await.requests, 1);
        assert!(!post.is_finished());
        session.release(&modelctx_types::RequestId::from(4)).await;
        let response = within(post).await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(events(response.into_body()).await.is_empty());
        let sizes = service.table_sizes().await;
        assert_eq!((sizes.sessions, sizes.streams, sizes.requests), (1, 0, 0));
        // Releasing it again changes nothing; the application was told of no abandoned POST.
        session.release(&modelctx_types::RequestId::from(4)).await;
        assert_eq!(service.table_sizes().await.requests, 0);
        assert!(app.abandoned.lock().unwrap().is_empty());
    }

    /// Opens a session; returns its id.
    async fn open(service: &McpService) -> String {
        let response = service.handle(initialize()).await;
        assert_eq!(response.status(), 200);
        let id = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = response.into_body().collect().await;
        id
    }

    /// The SSE events of a whole body: (id, data) of each.
    async fn events(body: super::super::ResponseBody) -> Vec<(Option<String>, String)> {
        let bytes = within(body.collect()).await.unwrap().to_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        text.split("\n\n")
            .filter(|e| !e.trim().is_empty() && !e.starts_with(':'))
            .map(|e| {
                let mut id = None;
                let mut data = String::new();
                for line in e.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                (id, data)
            })
            .collect()
    }

    /// `future`, which must complete (a hang fails the test rather than stall it).
    async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(std::time::Duration::from_secs(20), future)
            .await
            .expect("timed out")
    }

    fn notification(n: usize) -> Message {
        let text =
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"n":{n}}}}}"#);
        let Ok(Incoming::Single(message)) = modelctx_types::decode(text.as_bytes()) else {
            panic!("not a notification");
        };
        message
    }

    /// Finding 27: logs name a session by a short hash, never by its id.
    #[test]
    fn finding_27_session_ids_are_redacted_in_logs() {
        let id = "0123456789abcdef0123456789abcdef";
        let shown = super::redact(id);
        assert_eq!(shown.len(), 8);
        assert!(shown.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!id.contains(&shown), "{shown} is part of the id");
        assert_eq!(shown, super::redact(id), "stable, so log lines correlate");
        assert_ne!(shown, super::redact("0123456789abcdef0123456789abcdee"));
    }

    /// Finding 18: queued standalone messages that do not fit the fresh stream's buffer are not
    /// dropped silently: the connection is let go after what fits, and the client resumes the
    /// rest from the store, exactly.
    #[tokio::test]
    async fn finding_18_a_flushed_queue_larger_than_the_buffer_resumes_exactly() {
        let app = Arc::new(App::default());
        let config = ServerConfig {
            standalone_queue: 1000,
            stream_buffer: 10,
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        for n in 0..50 {
            session.send(notification(n), None).await;
        }
        let response = service.handle(on_session("GET", &id, "")).await;
        assert_eq!(response.status(), 200);
        let got = events(response.into_body()).await;
        // The priming event, then what fits; then the connection ends.
        let data: Vec<_> = got.iter().filter(|(_, d)| !d.is_empty()).collect();
        assert_eq!(data.len(), 10, "{got:?}");
        let last = data.last().unwrap().0.clone().unwrap();
        let mut resume = on_session("GET", &id, "");
        resume
            .headers_mut()
            .insert("last-event-id", last.parse().unwrap());
        // The stream is still the session's standalone one: the resumption takes it over.
        let response = service.handle(resume).await;
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let text = String::from_utf8(first.to_vec()).unwrap();
        let rest: Vec<_> = text.matches("\"n\":").collect();
        assert_eq!(rest.len(), 40, "{text}");
        for n in 10..50 {
            assert!(text.contains(&format!("\"n\":{n}}}")), "{n} missing");
        }
    }

    /// Finding 19: a Streamable HTTP request naming a session of the deprecated HTTP+SSE
    /// transport is refused (it would wait forever: the answer goes on the old stream).
    #[cfg(feature = "legacy-sse")]
    #[tokio::test]
    async fn finding_19_a_streamable_post_naming_an_old_sse_session_gets_404() {
        let app = Arc::new(App::default());
        let config = ServerConfig {
            old_sse: Some(super::super::OldSsePaths::default()),
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let get = http::Request::get("/sse")
            .header("host", "127.0.0.1")
            .header("accept", "text/event-stream")
            .extension(LOOPBACK_PEER)
            .body(String::new())
            .unwrap();
        let response = service.handle(get).await;
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let text = String::from_utf8(first.to_vec()).unwrap();
        let id = text.split("sessionId=").nth(1).unwrap().trim().to_owned();
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        for method in ["POST", "GET", "DELETE"] {
            let response = within(service.handle(on_session(method, &id, call))).await;
            assert_eq!(response.status(), 404, "{method}");
        }
        assert_eq!(service.table_sizes().await.requests, 0);
        assert_eq!(service.table_sizes().await.sessions, 1);
        drop(body);
    }

    /// `request` with `principal` and `peer` in its extensions, as a layer and `serve` put them.
    fn from<B>(
        mut request: http::Request<B>,
        principal: Option<&str>,
        peer: Option<&str>,
    ) -> http::Request<B> {
        if let Some(principal) = principal {
            request
                .extensions_mut()
                .insert(super::super::Principal(principal.to_owned()));
        }
        if let Some(peer) = peer {
            request
                .extensions_mut()
                .insert(super::super::PeerAddr(peer.parse().unwrap()));
        }
        request
    }

    /// Opens a session as `principal` from `peer`: its id, or the refusal's status.
    async fn open_as(
        service: &McpService,
        principal: Option<&str>,
        peer: Option<&str>,
    ) -> Result<String, http::StatusCode> {
        let response = service.handle(from(initialize(), principal, peer)).await;
        if response.status() != 200 {
            assert!(response.headers().contains_key("retry-after"));
            return Err(response.status());
        }
        let id = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = response.into_body().collect().await;
        // Distinct instants for the least-recently-used order.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        Ok(id)
    }

    /// The status of a notification POSTed on `session` (202 while it lasts, 404 after).
    async fn poke(service: &McpService, session: &str, principal: Option<&str>) -> u16 {
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let request = from(on_session("POST", session, initialized), principal, None);
        let status = service.handle(request).await.status().as_u16();
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        status
    }

    /// Starts a request that the application never answers on `session`, its client waiting;
    /// returns once the application has it. Aborting the task is the client going away.
    async fn hang(
        service: &McpService,
        app: &App,
        session: &str,
        principal: Option<&str>,
        id: u32,
    ) -> tokio::task::JoinHandle<()> {
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"forever"}}}}"#
        );
        let request = from(on_session("POST", session, &call), principal, None);
        let service = service.clone();
        let task = tokio::spawn(async move {
            let _ = service.handle(request).await;
        });
        let wanted = format!(r#""id":{id},"#);
        within(async {
            while !app
                .inputs
                .lock()
                .unwrap()
                .iter()
                .any(|m| String::from_utf8_lossy(&super::encode(m)).contains(&wanted))
            {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await;
        task
    }

    /// Finding 3: a POST whose client went away before its answer no longer pins its session:
    /// the handler is told its request is cancelled, the request leaves the table, and the
    /// session is idle (swept, evictable).
    #[tokio::test]
    async fn finding_3_an_abandoned_post_is_cancelled_and_no_longer_pins_its_session() {
        let app = Arc::new(App::default());
        let config = ServerConfig {
            session_idle_timeout: std::time::Duration::ZERO,
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let id = open(&service).await;
        let task = hang(&service, &app, &id, None, 7).await;
        assert_eq!(service.table_sizes().await.requests, 1);
        // While its client waits, the request keeps the session.
        service.end_idle_sessions().await;
        assert_eq!(service.table_sizes().await.sessions, 1);
        task.abort();
        let _ = task.await;
        within(async {
            while app.abandoned.lock().unwrap().is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await;
        // The handler is told which request lost its client; the transport makes up no
        // `notifications/cancelled` for it (its input is the call alone).
        assert_eq!(
            *app.abandoned.lock().unwrap(),
            [modelctx_types::RequestId::from(7)]
        );
        let inputs = app.inputs.lock().unwrap().clone();
        assert_eq!(inputs.len(), 1, "{inputs:?}");
        assert_eq!(inputs[0].method(), Some("tools/call"));
        let sizes = service.table_sizes().await;
        assert_eq!((sizes.sessions, sizes.streams, sizes.requests), (1, 0, 0));
        service.end_idle_sessions().await;
        assert!(service.table_sizes().await.is_empty());
    }

    /// Finding 3, without the prompt notice: the sweep itself lets go of an abandoned POST.
    #[tokio::test]
    async fn finding_3_the_sweep_lets_go_of_abandoned_posts() {
        let app = Arc::new(App::default());
        let config = ServerConfig {
            session_idle_timeout: std::time::Duration::ZERO,
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let id = open(&service).await;
        let session = service.shared.sessions().get(&id).cloned().unwrap();
        let request = modelctx_types::RequestId::from(9);
        let decision = session
            .register(std::slice::from_ref(&request), false, false)
            .await
            .ok()
            .unwrap();
        service.end_idle_sessions().await;
        assert_eq!(service.table_sizes().await.requests, 1, "its client waits");
        drop(decision);
        service.end_idle_sessions().await;
        assert!(service.table_sizes().await.is_empty());
    }

    /// Finding 2: a full table ends its least recently used idle session for a new one; with
    /// none idle, `initialize` gets 503 and `Retry-After`.
    #[tokio::test]
    async fn finding_2_a_full_table_evicts_the_least_recently_used_idle_session() {
        let app = Arc::new(App::default());
        let config = ServerConfig {
            max_sessions: 2,
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let a = open_as(&service, None, None).await.unwrap();
        let b = open_as(&service, None, None).await.unwrap();
        assert_eq!(poke(&service, &a, None).await, 202);
        let c = open_as(&service, None, None).await.unwrap();
        assert_eq!(
            poke(&service, &b, None).await,
            404,
            "b was the least recently used"
        );
        assert_eq!(poke(&service, &a, None).await, 202);
        assert_eq!(service.table_sizes().await.sessions, 2);
        // Both busy: a request in flight each.
        let on_a = hang(&service, &app, &a, None, 1).await;
        let on_c = hang(&service, &app, &c, None, 2).await;
        assert_eq!(
            open_as(&service, None, None).await,
            Err(http::StatusCode::SERVICE_UNAVAILABLE)
        );
        // A client that goes away frees its session for eviction.
        on_a.abort();
        let _ = on_a.await;
        within(async {
            while service.table_sizes().await.requests != 1 {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await;
        open_as(&service, None, None).await.unwrap();
        assert_eq!(poke(&service, &a, None).await, 404);
        on_c.abort();
        let _ = on_c.await;
        service.close_all().await;
        assert!(service.table_sizes().await.is_empty());
    }

    /// Finding 2: a principal at its cap makes room among its own sessions only, and another
    /// principal is not affected.
    #[tokio::test]
    async fn finding_2_sessions_are_capped_per_principal() {
        let app = Arc::new(App::default());
        let config = ServerConfig {
            max_sessions_per_principal: Some(1),
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let alice = Some("alice");
        let bob = Some("bob");
        let a1 = open_as(&service, alice, None).await.unwrap();
        let b1 = open_as(&service, bob, None).await.unwrap();
        let a2 = open_as(&service, alice, None).await.unwrap();
        assert_eq!(
            poke(&service, &a1, alice).await,
            404,
            "alice's own idle one went"
        );
        assert_eq!(
            poke(&service, &b1, bob).await,
            202,
            "bob's is not alice's to take"
        );
        let busy = hang(&service, &app, &a2, alice, 1).await;
        assert_eq!(
            open_as(&service, alice, None).await,
            Err(http::StatusCode::SERVICE_UNAVAILABLE)
        );
        assert_eq!(poke(&service, &b1, bob).await, 202);
        open_as(&service, bob, None).await.unwrap();
        assert_eq!(service.table_sizes().await.sessions, 2);
        busy.abort();
        let _ = busy.await;
        service.close_all().await;
        assert!(service.table_sizes().await.is_empty());
    }

    /// Finding 2: sessions are capped per peer IP address (any port).
    #[tokio::test]
    async fn finding_2_sessions_are_capped_per_peer_address() {
        let app = Arc::new(App::default());
        let config = ServerConfig {
            max_sessions_per_peer: Some(2),
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let p1 = open_as(&service, None, Some("127.0.0.1:1000"))
            .await
            .unwrap();
        let p2 = open_as(&service, None, Some("127.0.0.1:2000"))
            .await
            .unwrap();
        let q = open_as(&service, None, Some("127.0.0.2:1000"))
            .await
            .unwrap();
        let busy1 = hang(&service, &app, &p2, None, 1).await;
        let p3 = open_as(&service, None, Some("127.0.0.1:3000"))
            .await
            .unwrap();
        assert_eq!(
            poke(&service, &p1, None).await,
            404,
            "the peer's idle one went"
        );
        assert_eq!(poke(&service, &q, None).await, 202, "another peer's stays");
        let busy2 = hang(&service, &app, &p3, None, 2).await;
        assert_eq!(
            open_as(&service, None, Some("127.0.0.1:4000")).await,
            Err(http::StatusCode::SERVICE_UNAVAILABLE)
        );
        open_as(&service, None, Some("127.0.0.3:1000"))
            .await
            .unwrap();
        busy1.abort();
        busy2.abort();
        let _ = (busy1.await, busy2.await);
        service.close_all().await;
        assert!(service.table_sizes().await.is_empty());
    }

    /// Finding 2: a session that sent no request after `initialize` is ended after
    /// `handshake_timeout`, even with a stream open; one that did is not.
    #[tokio::test]
    async fn finding_2_sessions_still_in_their_handshake_expire_fast() {
        let app = Arc::new(App::default());
        let config = ServerConfig {
            handshake_timeout: std::time::Duration::ZERO,
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let idle = open(&service).await;
        assert_eq!(
            poke(&service, &idle, None).await,
            202,
            "a notification is no request"
        );
        let stream = service.handle(on_session("GET", &idle, "")).await;
        assert_eq!(stream.status(), 200);
        let used = open(&service).await;
        let call = hang(&service, &app, &used, None, 1).await;
        call.abort();
        let _ = call.await;
        service.end_idle_sessions().await;
        assert_eq!(poke(&service, &idle, None).await, 404);
        assert_eq!(poke(&service, &used, None).await, 202);
        // The stream of the ended session ends.
        within(stream.into_body().collect()).await.unwrap();
        service.close_all().await;
        assert!(service.table_sizes().await.is_empty());
    }

    /// An event store whose calls wait while its gate is closed (a store doing slow I/O).
    struct GatedStore {
        inner: crate::event_store::MemoryEventStore,
        open: tokio::sync::watch::Sender<bool>,
        waiting: AtomicUsize,
        /// Appends fail (the store is unavailable) while set.
        fail: std::sync::atomic::AtomicBool,
    }

    impl GatedStore {
        fn new() -> Self {
            GatedStore {
                inner: crate::event_store::MemoryEventStore::new(),
                open: tokio::sync::watch::Sender::new(true),
                waiting: AtomicUsize::new(0),
                fail: std::sync::atomic::AtomicBool::new(false),
            }
        }

        fn set(&self, open: bool) {
            self.open.send_replace(open);
        }

        async fn wait(&self) {
            let mut open = self.open.subscribe();
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let _ = open.wait_for(|open| *open).await;
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }

    // EventStore v2 (issue 22 WP1): the gate is on every call that does store I/O.
    use crate::event_store::{
        BoxFuture, EventId, EventStoreError, Follow, ReplayError, StoreSizes, StreamId,
    };
    use bytes::Bytes;
    use modelctx_types::RequestId;

    impl crate::event_store::EventStore for GatedStore {
        fn stream_base(&self) -> u64 {
            self.inner.stream_base()
        }

        fn open_stream<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
            pending: &'a [RequestId],
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            Box::pin(async move {
                self.wait().await;
                self.inner.open_stream(session, stream, pending).await
            })
        }

        fn append<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
            data: Bytes,
        ) -> BoxFuture<'a, Result<EventId, EventStoreError>> {
            Box::pin(async move {
                self.wait().await;
                if self.fail.load(Ordering::SeqCst) {
                    return Err(EventStoreError::unavailable("the store is down"));
                }
                self.inner.append(session, stream, data).await
            })
        }

        fn finish_stream<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            Box::pin(async move {
                self.wait().await;
                self.inner.finish_stream(session, stream).await
            })
        }

        fn replay_after<'a>(
            &'a self,
            session: &'a str,
            after: &'a EventId,
        ) -> BoxFuture<'a, Result<Vec<(EventId, Bytes)>, ReplayError>> {
            Box::pin(async move {
                self.wait().await;
                self.inner.replay_after(session, after).await
            })
        }

        fn follow<'a>(
            &'a self,
            session: &'a str,
            after: &'a EventId,
        ) -> BoxFuture<'a, Result<Follow, ReplayError>> {
            Box::pin(async move {
                self.wait().await;
                self.inner.follow(session, after).await
            })
        }

        fn set_standalone<'a>(
            &'a self,
            session: &'a str,
            stream: Option<StreamId>,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            Box::pin(async move {
                self.wait().await;
                self.inner.set_standalone(session, stream).await
            })
        }

        fn standalone<'a>(
            &'a self,
            session: &'a str,
        ) -> BoxFuture<'a, Result<Option<StreamId>, EventStoreError>> {
            Box::pin(async move {
                self.wait().await;
                self.inner.standalone(session).await
            })
        }

        fn remove_stream<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            Box::pin(async move {
                self.wait().await;
                self.inner.remove_stream(session, stream).await
            })
        }

        fn remove_session<'a>(
            &'a self,
            session: &'a str,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            Box::pin(async move {
                self.wait().await;
                self.inner.remove_session(session).await
            })
        }

        fn sizes(&self) -> BoxFuture<'_, Result<StoreSizes, EventStoreError>> {
            self.inner.sizes()
        }
    }

    fn response(id: i64) -> Message {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
        let Ok(Incoming::Single(message)) = modelctx_types::decode(text.as_bytes()) else {
            panic!("not a response");
        };
        message
    }

    fn progress(n: usize) -> Message {
        let text = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":1,"progress":{n},"n":{n}}}}}"#
        );
        let Ok(Incoming::Single(message)) = modelctx_types::decode(text.as_bytes()) else {
            panic!("not a notification");
        };
        message
    }

    /// A send runs its drain on the caller's task; a caller that goes away while its event is
    /// stuck in the store (its effect taken from the outbox, half performed) loses nothing: the
    /// drain finishes on a task of its own and the event reaches the stream, in order.
    #[tokio::test]
    async fn a_send_whose_caller_goes_away_mid_drain_still_delivers_its_event() {
        let store = Arc::new(GatedStore::new());
        let app = Arc::new(App::default());
        let config = ServerConfig {
            event_store: store.clone(),
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        let rid = modelctx_types::RequestId::from(5);
        let call = on_session(
            "POST",
            &id,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call"}"#,
        );
        let five = tokio::spawn({
            let service = service.clone();
            async move { service.handle(call).await }
        });
        within(async {
            while !app
                .inputs
                .lock()
                .unwrap()
                .iter()
                .any(|m| String::from_utf8_lossy(&super::encode(m)).contains(r#""id":5,"#))
            {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await;
        within(session.send(progress(0), Some(rid.clone()))).await;
        // The store gets stuck on the next event; its sender stops waiting and goes away.
        store.set(false);
        let gone = tokio::time::timeout(
            std::time::Duration::from_millis(20),
            session.send(progress(1), Some(rid.clone())),
        )
        .await;
        assert!(gone.is_err(), "the send completed with the store stuck");
        assert_eq!(store.waiting.load(Ordering::SeqCst), 1);
        store.set(true);
        within(session.send(response(5), Some(rid))).await;
        let got = events(within(five).await.unwrap().into_body()).await;
        let ns: Vec<u64> = got
            .iter()
            .filter_map(|(_, d)| {
                let v: serde_json::Value = serde_json::from_str(d).ok()?;
                v["params"]["n"].as_u64()
            })
            .collect();
        assert_eq!(ns, [0, 1], "{got:?}");
        assert!(got.last().unwrap().1.contains(r#""id":5"#), "{got:?}");
        service.close_all().await;
    }

    /// EventStore v2 (issue 22 WP1): an event the store refuses is still written to the live
    /// connection, without an id (the client cannot resume to it), and a priming event the
    /// store refuses is left out; the stream goes on with ids once the store answers again.
    #[tokio::test]
    async fn a_refused_event_is_still_written_live_without_an_id() {
        let store = Arc::new(GatedStore::new());
        let app = Arc::new(App::default());
        let config = ServerConfig {
            event_store: store.clone(),
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        let rid = modelctx_types::RequestId::from(5);
        let call = on_session(
            "POST",
            &id,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call"}"#,
        );
        let five = tokio::spawn({
            let service = service.clone();
            async move { service.handle(call).await }
        });
        within(async {
            while !app
                .inputs
                .lock()
                .unwrap()
                .iter()
                .any(|m| String::from_utf8_lossy(&super::encode(m)).contains(r#""id":5,"#))
            {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await;
        store.fail.store(true, Ordering::SeqCst);
        within(session.send(progress(0), Some(rid.clone()))).await;
        store.fail.store(false, Ordering::SeqCst);
        within(session.send(progress(1), Some(rid.clone()))).await;
        within(session.send(response(5), Some(rid))).await;
        let got = events(within(five).await.unwrap().into_body()).await;
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0].0, None, "{got:?}");
        assert!(got[0].1.contains(r#""n":0"#), "{got:?}");
        assert!(
            got[1].0.is_some() && got[1].1.contains(r#""n":1"#),
            "{got:?}"
        );
        assert!(
            got[2].0.is_some() && got[2].1.contains(r#""id":5"#),
            "{got:?}"
        );
        // Both refused events, the priming one and n=0, are counted (issue 22 WP3); the count
        // is not a table that must return to empty.
        assert_eq!(service.table_sizes().await.events_unstored, 2);
        service.close_all().await;
        let tables = service.table_sizes().await;
        assert!(
            tables.is_empty() && tables.events_unstored == 2,
            "{tables:?}"
        );
        let sizes = crate::event_store::EventStore::sizes(&store.inner)
            .await
            .unwrap();
        assert_eq!(sizes.events, 0, "{sizes:?}");
    }

    /// Finding 17: the session's lock is not held across the event store's I/O. While the
    /// store is stuck on an event of one request's stream, the session's other operations go
    /// on (its tables are read, the sweep runs, another request is registered and answered);
    /// and a resumption racing with stored-but-stuck events still gets each event exactly once.
    #[tokio::test]
    async fn finding_17_store_io_is_not_awaited_under_the_session_lock() {
        let store = Arc::new(GatedStore::new());
        let app = Arc::new(App::default());
        let config = ServerConfig {
            event_store: store.clone(),
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        let rid = |n: i64| modelctx_types::RequestId::from(n);
        let post = |n: i64| {
            let service = service.clone();
            let call = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call"}}"#);
            let request = on_session("POST", &id, &call);
            tokio::spawn(async move { service.handle(request).await })
        };
        let seen = |wanted: String| {
            let app = app.clone();
            async move {
                while !app
                    .inputs
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|m| String::from_utf8_lossy(&super::encode(m)).contains(&wanted))
                {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        };
        let five = post(5);
        within(seen(r#""id":5,"#.into())).await;
        // The store gets stuck on the first event of request 5's stream (its priming event).
        store.set(false);
        let sending = tokio::spawn({
            let session = session.clone();
            async move { session.send(progress(0), Some(rid(5))).await }
        });
        within(async {
            while store.waiting.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await;
        // Meanwhile: the session's tables, the sweep, another request and its answer.
        assert_eq!(within(service.table_sizes()).await.requests, 1);
        within(service.end_idle_sessions()).await;
        let six = post(6);
        within(seen(r#""id":6,"#.into())).await;
        tokio::spawn({
            let session = session.clone();
            async move { session.send(response(6), Some(rid(6))).await }
        });
        let answered = within(six).await.unwrap();
        assert_eq!(answered.status(), 200);
        assert_eq!(answered.headers()["content-type"], "application/json");
        // The store resumes: request 5's stream opens with its events.
        store.set(true);
        within(sending).await.unwrap();
        let five = within(five).await.unwrap();
        assert_eq!(five.headers()["content-type"], "text/event-stream");
        let mut body = five.into_body();
        let mut text = String::new();
        while !text.contains(r#""n":0"#) {
            let frame = within(body.frame()).await.unwrap().unwrap();
            text.push_str(&String::from_utf8_lossy(&frame.into_data().unwrap()));
        }
        let last = text
            .split("\n\n")
            .find(|e| e.contains(r#""n":0"#))
            .and_then(|e| e.lines().find_map(|l| l.strip_prefix("id: ")))
            .unwrap()
            .to_owned();
        // The client goes away, and resumes while events are stuck in the store, before and
        // after its resumption is asked for.
        drop(body);
        store.set(false);
        let mut sends = Vec::new();
        for n in 1..=3 {
            let session = session.clone();
            sends.push(tokio::spawn(async move {
                session.send(progress(n), Some(rid(5))).await
            }));
        }
        let mut get = on_session("GET", &id, "");
        get.headers_mut()
            .insert("last-event-id", last.parse().unwrap());
        let resumed = tokio::spawn({
            let service = service.clone();
            async move { service.handle(get).await }
        });
        for n in 4..=6 {
            let session = session.clone();
            sends.push(tokio::spawn(async move {
                session.send(progress(n), Some(rid(5))).await
            }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        store.set(true);
        for send in sends {
            within(send).await.unwrap();
        }
        let resumed = within(resumed).await.unwrap();
        assert_eq!(resumed.status(), 200);
        within(session.send(response(5), Some(rid(5)))).await;
        let got = events(resumed.into_body()).await;
        let mut ns: Vec<usize> = got
            .iter()
            .filter_map(|(_, d)| {
                let v: serde_json::Value = serde_json::from_str(d).ok()?;
                v["params"]["n"].as_u64().map(|n| n as usize)
            })
            .collect();
        assert!(got.last().unwrap().1.contains(r#""id":5"#), "{got:?}");
        let ids: Vec<u64> = got
            .iter()
            .map(|(id, _)| {
                id.as_ref()
                    .unwrap()
                    .split('-')
                    .nth(1)
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        ns.sort_unstable();
        assert_eq!(ns, [1, 2, 3, 4, 5, 6], "each event exactly once: {got:?}");
        service.close_all().await;
        assert!(service.table_sizes().await.is_empty());
        assert!(
            crate::event_store::EventStore::sizes(&store.inner)
                .await
                .unwrap()
                .is_empty()
        );
    }

    use crate::event_store::EventStore as _;

    /// The part of a store that two transports share (each with a base of its own), as
    /// server instances share a networked store: a [`MemoryEventStore`] underneath, the calls
    /// the transports made, and the live events of followed streams carried as a shared store
    /// carries them (`Follow::rest`). It is a sloppy carrier on purpose: the last replayed
    /// event comes again first, and every live event twice; the transport must write each once.
    #[derive(Default)]
    struct Hub {
        inner: crate::event_store::MemoryEventStore,
        followers: std::sync::Mutex<Vec<Follower>>,
        calls: std::sync::Mutex<Vec<String>>,
        /// Replays (`replay_after`, `follow`) fail with this kind while set.
        fail: std::sync::Mutex<Option<crate::event_store::EventStoreErrorKind>>,
    }

    impl Hub {
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }

        fn log(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }

        fn failing(&self) -> Result<(), ReplayError> {
            match *self.fail.lock().unwrap() {
                Some(kind) => Err(EventStoreError::new(kind, "the store is down").into()),
                None => Ok(()),
            }
        }
    }

    /// A followed stream (session, stream) and the channel of its live events.
    type Follower = (
        String,
        StreamId,
        tokio::sync::mpsc::Sender<(EventId, Bytes)>,
    );

    /// One transport's handle on a [`Hub`], with its stream base.
    struct FleetStore {
        hub: Arc<Hub>,
        base: u64,
    }

    impl crate::event_store::EventStore for FleetStore {
        fn stream_base(&self) -> u64 {
            self.base
        }

        fn open_stream<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
            pending: &'a [RequestId],
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            let ids: Vec<String> = pending
                .iter()
                .map(|id| serde_json::to_string(id).unwrap())
                .collect();
            self.hub.log(format!("open {stream} [{}]", ids.join(",")));
            self.hub.inner.open_stream(session, stream, pending)
        }

        fn append<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
            data: Bytes,
        ) -> BoxFuture<'a, Result<EventId, EventStoreError>> {
            Box::pin(async move {
                let id = self.hub.inner.append(session, stream, data.clone()).await?;
                for (s, st, tx) in self.hub.followers.lock().unwrap().iter() {
                    if s == session && *st == stream {
                        let _ = tx.try_send((id, data.clone()));
                        let _ = tx.try_send((id, data.clone()));
                    }
                }
                Ok(id)
            })
        }

        fn finish_stream<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            self.hub.log(format!("finish {stream}"));
            // Its followers' channels close after what they carry.
            self.hub
                .followers
                .lock()
                .unwrap()
                .retain(|(s, st, _)| !(s == session && *st == stream));
            self.hub.inner.finish_stream(session, stream)
        }

        fn replay_after<'a>(
            &'a self,
            session: &'a str,
            after: &'a EventId,
        ) -> BoxFuture<'a, Result<Vec<(EventId, Bytes)>, ReplayError>> {
            if let Err(e) = self.hub.failing() {
                return Box::pin(std::future::ready(Err(e)));
            }
            self.hub.inner.replay_after(session, after)
        }

        fn follow<'a>(
            &'a self,
            session: &'a str,
            after: &'a EventId,
        ) -> BoxFuture<'a, Result<Follow, ReplayError>> {
            Box::pin(async move {
                self.hub.failing()?;
                self.hub.log(format!("follow {after}"));
                let follow = self.hub.inner.follow(session, after).await?;
                if follow.done {
                    return Ok(follow);
                }
                let (tx, rx) = tokio::sync::mpsc::channel(64);
                let _ = tx.try_send((*after, Bytes::from_static(b"{}")));
                if let Some(last) = follow.events.last() {
                    let _ = tx.try_send(last.clone());
                }
                self.hub
                    .followers
                    .lock()
                    .unwrap()
                    .push((session.to_owned(), after.stream, tx));
                Ok(follow.with_rest(rx))
            })
        }

        fn set_standalone<'a>(
            &'a self,
            session: &'a str,
            stream: Option<StreamId>,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            let named = stream.map_or_else(|| "None".to_owned(), |s| s.to_string());
            self.hub.log(format!("standalone {named}"));
            self.hub.inner.set_standalone(session, stream)
        }

        fn standalone<'a>(
            &'a self,
            session: &'a str,
        ) -> BoxFuture<'a, Result<Option<StreamId>, EventStoreError>> {
            self.hub.inner.standalone(session)
        }

        fn remove_stream<'a>(
            &'a self,
            session: &'a str,
            stream: StreamId,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            self.hub.inner.remove_stream(session, stream)
        }

        fn remove_session<'a>(
            &'a self,
            session: &'a str,
        ) -> BoxFuture<'a, Result<(), EventStoreError>> {
            self.hub.log("remove".to_owned());
            self.hub.inner.remove_session(session)
        }

        fn sizes(&self) -> BoxFuture<'_, Result<StoreSizes, EventStoreError>> {
            self.hub.inner.sizes()
        }
    }

    /// A transport for `app` on `hub` with stream base `base`.
    fn on_hub(hub: &Arc<Hub>, base: u64, app: &Arc<App>, config: ServerConfig) -> McpService {
        let config = ServerConfig {
            event_store: Arc::new(FleetStore {
                hub: hub.clone(),
                base,
            }),
            keep_alive: None,
            ..config
        };
        McpService::new(config, app.clone()).unwrap()
    }

    /// Waits until `app` has request `id`.
    async fn got_request(app: &App, id: i64) {
        let wanted = format!(r#""id":{id},"#);
        within(async {
            while !app
                .inputs
                .lock()
                .unwrap()
                .iter()
                .any(|m| String::from_utf8_lossy(&super::encode(m)).contains(&wanted))
            {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await;
    }

    /// Starts request `id` on `session` of `service` (the application answers it through
    /// `send`), and returns its response once its first event with `"n":0` came: the
    /// response, and that event's id.
    async fn stream_of(
        service: &McpService,
        app: &App,
        session: &str,
        handle: &LegacySession,
        id: i64,
    ) -> (super::super::ResponseBody, EventId) {
        let call = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call"}}"#);
        let post = tokio::spawn({
            let service = service.clone();
            let request = on_session("POST", session, &call);
            async move { service.handle(request).await }
        });
        got_request(app, id).await;
        within(handle.send(progress(0), Some(RequestId::from(id)))).await;
        let response = within(post).await.unwrap();
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut body = response.into_body();
        let mut text = String::new();
        while !text.contains(r#""n":0"#) {
            let frame = within(body.frame()).await.unwrap().unwrap();
            text.push_str(&String::from_utf8_lossy(&frame.into_data().unwrap()));
        }
        let last = text
            .split("\n\n")
            .find(|e| e.contains(r#""n":0"#))
            .and_then(|e| e.lines().find_map(|l| l.strip_prefix("id: ")))
            .unwrap()
            .parse()
            .unwrap();
        (body, last)
    }

    /// A GET on `session` resuming after `last`.
    fn resume_after(session: &str, last: &EventId) -> http::Request<String> {
        let mut get = on_session("GET", session, "");
        get.headers_mut()
            .insert("last-event-id", last.to_string().parse().unwrap());
        get
    }

    /// Issue 22 WP3: two transports on one shared store, with different stream bases. The
    /// session opened on A is adopted by B for a GET that resumes a stream A writes: B follows
    /// it through the store (`follow`), writes the stored events, then each live one exactly
    /// once (the store's carrier repeats them), and ends when A finishes the stream. Each
    /// transport's stream ids come from its own base, so none is used by both; B's standalone
    /// stream is recorded in the store and held by B alone.
    #[tokio::test]
    async fn a_stream_of_another_instance_is_followed_live_exactly_once_until_it_is_finished() {
        let hub = Arc::new(Hub::default());
        let (base_a, base_b) = (1u64 << 32, 2u64 << 32);
        let app_a = Arc::new(App::default());
        let app_b = Arc::new(App {
            adopts: Some(modelctx_types::ProtocolVersion::V2025_11_25),
            ..App::default()
        });
        let a = on_hub(&hub, base_a, &app_a, ServerConfig::default());
        let b = on_hub(&hub, base_b, &app_b, ServerConfig::default());
        let id = open(&a).await;
        let session = app_a.sessions.lock().unwrap()[0].clone();
        let (body, last) = stream_of(&a, &app_a, &id, &session, 5).await;
        // `initialize` took A's first stream id (answered in JSON), the call the next.
        assert_eq!(last.stream, StreamId(base_a + 1));
        drop(body);
        let rid = RequestId::from(5);
        within(session.send(progress(1), Some(rid.clone()))).await;
        let resumed = within(b.handle(resume_after(&id, &last))).await;
        assert_eq!(resumed.status(), 200);
        assert_eq!(b.table_sizes().await.adopted, 1);
        // The follower keeps B's session from the idle sweep.
        let adopted = app_b.sessions.lock().unwrap()[0].clone();
        assert!(adopted.inner.has_live_stream().await);
        within(session.send(progress(2), Some(rid.clone()))).await;
        within(session.send(response(5), Some(rid))).await;
        let got = events(resumed.into_body()).await;
        let ns: Vec<u64> = got
            .iter()
            .filter_map(|(_, d)| {
                let v: serde_json::Value = serde_json::from_str(d).ok()?;
                v["params"]["n"].as_u64()
            })
            .collect();
        assert_eq!(ns, [1, 2], "each event once: {got:?}");
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[2].1.contains(r#""id":5"#), "{got:?}");
        let ids: Vec<EventId> = got
            .iter()
            .map(|(id, _)| id.as_ref().unwrap().parse().unwrap())
            .collect();
        assert!(ids.iter().all(|id| id.stream == last.stream), "{ids:?}");
        assert!(ids.windows(2).all(|w| w[0].seq < w[1].seq), "{ids:?}");
        assert!(!adopted.inner.has_live_stream().await);
        // B's own streams: from B's base, in the upper half (an adopted session).
        let standalone = within(b.handle(on_session("GET", &id, ""))).await;
        assert_eq!(standalone.status(), 200);
        let held = within(hub.inner.standalone(&id)).await.unwrap().unwrap();
        assert!(
            held.get() >= base_b + (1 << 31) && held.get() < base_b + (1 << 32),
            "{held}"
        );
        assert!(adopted.holds_standalone().await);
        assert!(!session.holds_standalone().await);
        let calls = hub.calls();
        for call in [
            format!("open {} [5]", base_a + 1),
            format!("follow {last}"),
            format!("finish {}", base_a + 1),
            format!("open {held} []"),
            format!("standalone {held}"),
        ] {
            assert!(calls.contains(&call), "{call} not in {calls:?}");
        }
        drop(standalone);
        a.close_all().await;
        b.close_all().await;
        assert!(a.table_sizes().await.is_empty() && b.table_sizes().await.is_empty());
        let sizes = within(hub.inner.sizes()).await.unwrap();
        assert!(sizes.is_empty(), "{sizes:?}");
    }

    /// Issue 22 WP3: with the memory store (no live channel), a stream this endpoint no longer
    /// holds (complete) is resumed as before: its stored events, then the body ends.
    #[tokio::test]
    async fn a_complete_stream_is_replayed_and_the_body_ends() {
        let app = Arc::new(App::default());
        let config = ServerConfig {
            keep_alive: None,
            ..ServerConfig::default()
        };
        let service = McpService::new(config, app.clone()).unwrap();
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        let (body, last) = stream_of(&service, &app, &id, &session, 5).await;
        drop(body);
        let rid = RequestId::from(5);
        within(session.send(progress(1), Some(rid.clone()))).await;
        within(session.send(response(5), Some(rid))).await;
        let resumed = within(service.handle(resume_after(&id, &last))).await;
        assert_eq!(resumed.status(), 200);
        let got = events(resumed.into_body()).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].1.contains(r#""n":1"#) && got[1].1.contains(r#""id":5"#));
        assert!(!session.inner.has_live_stream().await);
    }

    /// Issue 22 WP3: a resumption the store cannot answer now is 503 with `Retry-After` (the
    /// client tries again), one it failed 500; both for a stream held here (`replay_after`) and
    /// one that is not (`follow`). An id the store does not know is 400, as before.
    #[tokio::test]
    async fn a_replay_the_store_cannot_answer_is_503_with_retry_after() {
        use crate::event_store::EventStoreErrorKind;
        let hub = Arc::new(Hub::default());
        let app = Arc::new(App::default());
        let service = on_hub(&hub, 0, &app, ServerConfig::default());
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        let (body, last) = stream_of(&service, &app, &id, &session, 5).await;
        drop(body);
        let check = |held: bool| {
            let service = service.clone();
            let hub = hub.clone();
            let id = id.clone();
            async move {
                for (kind, status) in [
                    (EventStoreErrorKind::Unavailable, 503),
                    (EventStoreErrorKind::Failed, 500),
                ] {
                    *hub.fail.lock().unwrap() = Some(kind);
                    let refused = within(service.handle(resume_after(&id, &last))).await;
                    assert_eq!(refused.status(), status, "held here: {held}");
                    if status == 503 {
                        assert_eq!(refused.headers()["retry-after"], "1");
                    }
                    let body = within(refused.into_body().collect())
                        .await
                        .unwrap()
                        .to_bytes();
                    let text = String::from_utf8_lossy(&body);
                    assert!(text.contains("the store is down"), "{text}");
                }
                *hub.fail.lock().unwrap() = None;
            }
        };
        check(true).await;
        assert!(!hub.calls().iter().any(|c| c.starts_with("follow")));
        within(session.send(response(5), Some(RequestId::from(5)))).await;
        check(false).await;
        let resumed = within(service.handle(resume_after(&id, &last))).await;
        assert_eq!(resumed.status(), 200);
        assert_eq!(events(resumed.into_body()).await.len(), 1);
        let unknown = EventId::new(StreamId(7), 0);
        let refused = within(service.handle(resume_after(&id, &unknown))).await;
        assert_eq!(refused.status(), 400);
        service.close_all().await;
    }

    /// Issue 22 WP3: what the store is told of a session's streams: each opened with its
    /// pending requests, finished when answered or released, the standalone stream recorded
    /// when a GET opens it; and, when the endpoint forgets the session (it shares its
    /// sessions), its streams finished and the standalone record cleared, the events kept.
    #[tokio::test]
    async fn the_store_is_told_of_opened_finished_and_standalone_streams() {
        let hub = Arc::new(Hub::default());
        let app = Arc::new(App {
            shares: true,
            ..App::default()
        });
        let config = ServerConfig {
            session_idle_timeout: std::time::Duration::ZERO,
            ..ServerConfig::default()
        };
        let service = on_hub(&hub, 0, &app, config);
        let id = open(&service).await;
        let session = app.sessions.lock().unwrap()[0].clone();
        // A batch-free call answered on its stream; one released; one left open.
        let (five, _) = stream_of(&service, &app, &id, &session, 5).await;
        within(session.send(response(5), Some(RequestId::from(5)))).await;
        assert!(
            events(five)
                .await
                .iter()
                .any(|(_, d)| d.contains(r#""id":5"#))
        );
        let (six, _) = stream_of(&service, &app, &id, &session, 6).await;
        within(session.release(&RequestId::from(6))).await;
        within(six.collect()).await.unwrap();
        let (seven, _) = stream_of(&service, &app, &id, &session, 7).await;
        let standalone = within(service.handle(on_session("GET", &id, ""))).await;
        assert_eq!(standalone.status(), 200);
        assert!(session.holds_standalone().await);
        assert_eq!(
            hub.calls(),
            [
                "open 1 [5]",
                "finish 1",
                "open 2 [6]",
                "finish 2",
                "open 3 [7]",
                "open 4 []",
                "standalone 4"
            ]
        );
        // A GET after the first one's connection went replaces its stream, which is finished.
        drop(standalone);
        let again = within(service.handle(on_session("GET", &id, ""))).await;
        assert_eq!(again.status(), 200);
        assert_eq!(hub.calls()[7..], ["finish 4", "open 5 []", "standalone 5"]);
        // Its connections go; idle, the session is only forgotten.
        drop((seven, again));
        within(service.end_idle_sessions()).await;
        assert_eq!(
            *app.closed.lock().unwrap(),
            [(id.clone(), super::super::Closed::Forgotten)]
        );
        assert!(!session.holds_standalone().await);
        let calls = hub.calls();
        assert_eq!(
            calls[10..],
            ["finish 3", "finish 5", "standalone None"],
            "{calls:?}"
        );
        assert_eq!(within(hub.inner.standalone(&id)).await.unwrap(), None);
        assert!(
            !within(hub.inner.sizes()).await.unwrap().is_empty(),
            "events kept"
        );
        assert!(service.table_sizes().await.is_empty());
    }

    /// Issue 22 WP3: when the application shares its sessions (`McpApp::shares_sessions`), the
    /// idle sweep, eviction to make room and shutdown only forget a session opened here, its
    /// events kept; DELETE, `LegacySession::close` and the handshake timeout still end one.
    /// Without sharing, the sweep ends it, as before.
    #[tokio::test]
    async fn a_shared_session_is_only_forgotten_by_the_sweep_eviction_and_shutdown() {
        use super::super::Closed::{Ended, Forgotten};
        let hub = Arc::new(Hub::default());
        let closed = |app: &App| app.closed.lock().unwrap().clone();
        let idle = ServerConfig {
            session_idle_timeout: std::time::Duration::ZERO,
            ..ServerConfig::default()
        };
        // The sweep; and, for comparison, the same with no sharing.
        for shares in [true, false] {
            let app = Arc::new(App {
                shares,
                ..App::default()
            });
            let service = on_hub(&hub, 0, &app, idle.clone());
            let id = open(&service).await;
            assert_eq!(poke(&service, &id, None).await, 202);
            let session = app.sessions.lock().unwrap()[0].clone();
            within(session.send(notification(1), None)).await;
            let get = within(service.handle(on_session("GET", &id, ""))).await;
            drop(get);
            within(service.end_idle_sessions()).await;
            let reason = if shares { Forgotten } else { Ended };
            assert_eq!(closed(&app), [(id.clone(), reason)], "shares: {shares}");
            let kept = !within(hub.inner.sizes()).await.unwrap().is_empty();
            assert_eq!(kept, shares, "the events stay only when forgotten");
            assert!(service.table_sizes().await.is_empty());
            within(hub.inner.remove_session(&id)).await.unwrap();
        }
        let app = Arc::new(App {
            shares: true,
            ..App::default()
        });
        // Eviction to make room, then shutdown.
        let full = ServerConfig {
            max_sessions: 1,
            ..ServerConfig::default()
        };
        let service = on_hub(&hub, 0, &app, full);
        let first = open_as(&service, None, None).await.unwrap();
        let second = open_as(&service, None, None).await.unwrap();
        assert_eq!(closed(&app), [(first.clone(), Forgotten)]);
        service.close_all().await;
        assert_eq!(closed(&app)[1..], [(second, Forgotten)]);
        // DELETE and `close` end one.
        let service = on_hub(&hub, 0, &app, ServerConfig::default());
        let deleted = open(&service).await;
        let delete = within(service.handle(on_session("DELETE", &deleted, ""))).await;
        assert_eq!(delete.status(), 200);
        let closing = open(&service).await;
        let handle = app.sessions.lock().unwrap().last().unwrap().clone();
        handle.close().await;
        assert_eq!(closed(&app)[2..], [(deleted, Ended), (closing, Ended)]);
        // The handshake timeout ends one.
        let hasty = ServerConfig {
            handshake_timeout: std::time::Duration::ZERO,
            ..ServerConfig::default()
        };
        let service = on_hub(&hub, 0, &app, hasty);
        let silent = open(&service).await;
        within(service.end_idle_sessions()).await;
        assert_eq!(closed(&app)[4..], [(silent, Ended)]);
        assert!(service.table_sizes().await.is_empty());
    }

    /// Issue 22 WP3: each adoption numbers its streams afresh, above `base + 2^31` and below
    /// the next base, so that a session this endpoint held before (and forgot) never gets a
    /// stream id it used.
    #[test]
    fn adopted_sessions_number_their_streams_afresh_within_the_base() {
        let base = 3u64 << 32;
        let firsts: std::collections::HashSet<u64> =
            (0..64).map(|_| super::first_adopted_stream(base)).collect();
        assert!(firsts.len() > 60, "{firsts:?}");
        for first in firsts {
            assert!(first >= base + (1 << 31), "{first}");
            assert!(first + (1 << 30) <= base + (1 << 32), "{first}");
        }
    }

    /// Issue 22 WP3: when the application shares its sessions, a message for the standalone
    /// stream this endpoint holds is stored on it even after its connection went (not queued
    /// here), so that the client resuming the stream on another instance gets it.
    ///
    /// Issue 22 (the standalone stream after a `kill -9`): the resumption on B takes the
    /// stream over, the holder A being alive: B replays what A stored, then writes the
    /// session's standalone messages on a stream of its own, recorded in the store. A learns
    /// from the record the next time it would write to its old stream, and lets go of it:
    /// nothing is written where nobody reads.
    #[tokio::test]
    async fn a_held_standalone_stream_is_written_to_the_store_when_sessions_are_shared() {
        let hub = Arc::new(Hub::default());
        let app_a = Arc::new(App {
            shares: true,
            ..App::default()
        });
        let app_b = Arc::new(App {
            adopts: Some(modelctx_types::ProtocolVersion::V2025_11_25),
            shares: true,
            ..App::default()
        });
        let a = on_hub(&hub, 1 << 32, &app_a, ServerConfig::default());
        let b = on_hub(&hub, 2 << 32, &app_b, ServerConfig::default());
        let id = open(&a).await;
        let session = app_a.sessions.lock().unwrap()[0].clone();
        let get = within(a.handle(on_session("GET", &id, ""))).await;
        assert_eq!(get.status(), 200);
        let mut body = get.into_body();
        let first = within(body.frame()).await.unwrap().unwrap();
        let text = String::from_utf8(first.into_data().unwrap().to_vec()).unwrap();
        let priming: EventId = text
            .lines()
            .find_map(|l| l.strip_prefix("id: "))
            .unwrap()
            .parse()
            .unwrap();
        drop(body);
        within(session.send(notification(1), None)).await;
        assert!(session.holds_standalone().await);
        assert_eq!(a.table_sizes().await.queued, 0, "stored, not queued");
        let stored = within(hub.inner.replay_after(&id, &priming)).await.unwrap();
        assert_eq!(stored.len(), 1, "{stored:?}");
        // Resumed on B: the stored message, then B's own stream, recorded.
        let resumed = within(b.handle(resume_after(&id, &priming))).await;
        assert_eq!(resumed.status(), 200);
        let adopted = app_b.sessions.lock().unwrap()[0].clone();
        assert!(adopted.holds_standalone().await);
        let held = within(hub.inner.standalone(&id)).await.unwrap().unwrap();
        assert_eq!(held.get() >> 32, 2, "{held}");
        let mut body = resumed.into_body();
        within(adopted.send(notification(2), None)).await;
        let mut text = String::new();
        while !text.contains(r#""n":2"#) {
            let frame = within(body.frame()).await.unwrap().unwrap();
            text.push_str(&String::from_utf8_lossy(&frame.into_data().unwrap()));
        }
        assert_eq!(text.matches(r#""n":1"#).count(), 1, "{text}");
        assert_eq!(text.matches(r#""n":2"#).count(), 1, "{text}");
        assert!(text.contains(&format!("id: {held}-")), "{text}");
        // A, alive, writes no more to its old stream: it lets go and queues the message as a
        // non-holder does.
        within(session.send(notification(3), None)).await;
        assert!(!session.holds_standalone().await);
        assert_eq!(a.table_sizes().await.queued, 1);
        let old = within(hub.inner.replay_after(&id, &priming)).await.unwrap();
        assert_eq!(old.len(), 1, "nothing more on A's stream: {old:?}");
        assert_eq!(within(hub.inner.standalone(&id)).await.unwrap(), Some(held));
        drop(body);
        a.close_all().await;
        b.close_all().await;
    }

    /// Issue 22: the holder of a session's standalone stream dies (`kill -9`: it is never
    /// heard from again). The client's GET with the stream's `Last-Event-ID` lands on B, which
    /// takes the stream over at once: the stored events after the id, each once, then the
    /// priming event of B's own stream, recorded as the session's standalone stream; A's
    /// stream is finished. What the session's standalone stream gets from then on is written
    /// by B, live. When B's connection goes too, a resumption on C (with the id of B's stream)
    /// takes it over from B the same way. Without the takeover, B follows the dead stream and
    /// the record keeps naming it, so no instance would write there again.
    #[tokio::test]
    async fn a_standalone_stream_resumed_on_another_instance_is_taken_over() {
        let hub = Arc::new(Hub::default());
        let adopting = || {
            Arc::new(App {
                adopts: Some(modelctx_types::ProtocolVersion::V2025_11_25),
                shares: true,
                ..App::default()
            })
        };
        let app_a = Arc::new(App {
            shares: true,
            ..App::default()
        });
        let (app_b, app_c) = (adopting(), adopting());
        let a = on_hub(&hub, 1 << 32, &app_a, ServerConfig::default());
        let b = on_hub(&hub, 2 << 32, &app_b, ServerConfig::default());
        let c = on_hub(&hub, 3 << 32, &app_c, ServerConfig::default());
        let id = open(&a).await;
        let session = app_a.sessions.lock().unwrap()[0].clone();
        let get = within(a.handle(on_session("GET", &id, ""))).await;
        let mut body = get.into_body();
        let mut text = String::new();
        while !text.contains("\n\n") {
            let frame = within(body.frame()).await.unwrap().unwrap();
            text.push_str(&String::from_utf8_lossy(&frame.into_data().unwrap()));
        }
        within(session.send(notification(1), None)).await;
        within(session.send(notification(2), None)).await;
        while !text.contains(r#""n":2"#) {
            let frame = within(body.frame()).await.unwrap().unwrap();
            text.push_str(&String::from_utf8_lossy(&frame.into_data().unwrap()));
        }
        // The client saw the first one; then A dies with its connection.
        let seen: EventId = text
            .split("\n\n")
            .find(|e| e.contains(r#""n":1"#))
            .and_then(|e| e.lines().find_map(|l| l.strip_prefix("id: ")))
            .unwrap()
            .parse()
            .unwrap();
        let dead = within(hub.inner.standalone(&id)).await.unwrap().unwrap();
        assert_eq!(seen.stream, dead);
        drop(body);
        let resumed = within(b.handle(resume_after(&id, &seen))).await;
        assert_eq!(resumed.status(), 200);
        let held = within(hub.inner.standalone(&id)).await.unwrap().unwrap();
        assert_eq!(held.get() >> 32, 2, "B holds it: {held}");
        let adopted = app_b.sessions.lock().unwrap()[0].clone();
        assert!(adopted.holds_standalone().await);
        let calls = hub.calls();
        for call in [
            format!("standalone {held}"),
            format!("finish {dead}"),
            format!("open {held} []"),
        ] {
            assert!(calls.contains(&call), "{call} not in {calls:?}");
        }
        assert!(!calls.contains(&format!("follow {seen}")), "{calls:?}");
        // Later messages of the session's standalone stream: written by B, live, once.
        within(adopted.send(notification(3), None)).await;
        let mut body = resumed.into_body();
        let mut text = String::new();
        while !text.contains(r#""n":3"#) {
            let frame = within(body.frame()).await.unwrap().unwrap();
            text.push_str(&String::from_utf8_lossy(&frame.into_data().unwrap()));
        }
        let got: Vec<(EventId, String)> = text
            .split("\n\n")
            .filter_map(|e| {
                let id = e
                    .lines()
                    .find_map(|l| l.strip_prefix("id: "))?
                    .parse()
                    .ok()?;
                let data = e
                    .lines()
                    .find_map(|l| l.strip_prefix("data:"))?
                    .trim()
                    .to_owned();
                Some((id, data))
            })
            .collect();
        let ns: Vec<&str> = got
            .iter()
            .filter(|(_, d)| !d.is_empty())
            .map(|(_, d)| d.as_str())
            .collect();
        assert_eq!(ns.len(), 2, "{text}");
        assert!(
            ns[0].contains(r#""n":2"#) && ns[1].contains(r#""n":3"#),
            "{text}"
        );
        assert_eq!(got[0].0.stream, dead, "the replay first: {text}");
        // The priming event of B's stream comes before B's first message.
        assert!(got[1].1.is_empty() && got[1].0.stream == held, "{text}");
        assert_eq!(got[2].0.stream, held, "{text}");
        // B's connection goes too: C takes the stream over from B, after B's last event seen.
        drop(body);
        let last_b = got[2].0;
        within(adopted.send(notification(4), None)).await;
        let again = within(c.handle(resume_after(&id, &last_b))).await;
        assert_eq!(again.status(), 200);
        let on_c = within(hub.inner.standalone(&id)).await.unwrap().unwrap();
        assert_eq!(on_c.get() >> 32, 3, "C holds it: {on_c}");
        let adopted_c = app_c.sessions.lock().unwrap()[0].clone();
        within(adopted_c.send(notification(5), None)).await;
        let mut body = again.into_body();
        let mut text = String::new();
        while !text.contains(r#""n":5"#) {
            let frame = within(body.frame()).await.unwrap().unwrap();
            text.push_str(&String::from_utf8_lossy(&frame.into_data().unwrap()));
        }
        assert_eq!(text.matches(r#""n":4"#).count(), 1, "{text}");
        assert_eq!(text.matches(r#""n":3"#).count(), 0, "{text}");
        // B let go when it next wrote: the message waits in its queue, not on a dead stream.
        within(adopted.send(notification(6), None)).await;
        assert!(!adopted.holds_standalone().await);
        drop(body);
        for service in [&a, &b, &c] {
            service.close_all().await;
        }
    }
}
