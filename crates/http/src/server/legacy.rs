//! Legacy (initialize-based) sessions: the session table, the streams of each session, event ids,
//! resumption, the standalone stream.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use modelctx_types::{Message, RequestId};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::app::{LegacyHandler, Principal};
use super::config::ServerConfig;
use super::respond::{encode, final_id};
use crate::event_store::{EventId, StreamId};
use crate::sse;

/// What the server shares with every session.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    pub(crate) sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Fired at shutdown: every stream ends.
    pub(crate) shutdown: CancellationToken,
}

impl Shared {
    pub(crate) fn new(config: ServerConfig) -> Self {
        Shared {
            config,
            sessions: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session bound to `principal`, or `None` when the table is full.
    pub(crate) fn open(self: &Arc<Self>, principal: Option<Principal>) -> Option<Arc<Session>> {
        let mut sessions = self.sessions();
        if sessions.len() >= self.config.max_sessions {
            return None;
        }
        let id = loop {
            let id = new_session_id()?;
            if !sessions.contains_key(&id) {
                break id;
            }
        };
        let session = Arc::new(Session {
            id: id.clone(),
            principal,
            handler: HandlerSlot::default(),
            state: tokio::sync::Mutex::new(State::default()),
            last_seen: Mutex::new(Instant::now()),
            ended: self.shutdown.child_token(),
            shared: Arc::downgrade(self),
            old_transport: AtomicBool::new(false),
        });
        sessions.insert(id, session.clone());
        Some(session)
    }

    /// The session `id`, if open and bound to the same principal.
    pub(crate) fn find(&self, id: &str, principal: Option<&Principal>) -> Option<Arc<Session>> {
        let session = self.sessions().get(id).cloned()?;
        (session.principal.as_ref() == principal).then(|| {
            session.touch();
            session
        })
    }

    /// Ends the sessions idle for longer than the timeout.
    pub(crate) async fn sweep(&self) {
        let timeout = self.config.session_idle_timeout;
        let candidates: Vec<Arc<Session>> = self
            .sessions()
            .values()
            .filter(|s| s.idle_for() >= timeout)
            .cloned()
            .collect();
        for session in candidates {
            if !session.has_live_stream().await && session.idle_for() >= timeout {
                session.end().await;
            }
        }
    }

    /// Ends every session (shutdown).
    pub(crate) async fn end_all(&self) {
        let all: Vec<Arc<Session>> = self.sessions().values().cloned().collect();
        for session in all {
            session.end().await;
        }
    }

    /// Sizes of the tables, for tests.
    pub(crate) async fn sizes(&self) -> (usize, usize, usize, usize) {
        let all: Vec<Arc<Session>> = self.sessions().values().cloned().collect();
        let (mut streams, mut requests, mut queued) = (0, 0, 0);
        for session in &all {
            let state = session.state.lock().await;
            streams += state.streams.len();
            requests += state.requests.len();
            queued += state.queue.len();
        }
        (all.len(), streams, requests, queued)
    }
}

/// A session id as logs may show it: 8 hex digits of a hash of the id, never the id itself
/// (a session id is a bearer capability when no authentication layer binds it to a principal).
/// The hash is stable across runs, so log lines of one session can be correlated.
pub(crate) fn redact(id: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    id.hash(&mut hasher);
    format!("{:08x}", hasher.finish() >> 32)
}

/// 128 bits from the operating system's CSPRNG, as 32 lowercase hex digits.
fn new_session_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
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

#[derive(Default)]
struct State {
    /// The negotiated version, once `initialize` was answered.
    version: Option<String>,
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
    ended: bool,
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
    /// Fired when the session ends (or the server shuts down): its streams end.
    pub(crate) ended: CancellationToken,
    shared: std::sync::Weak<Shared>,
    /// A session of the deprecated HTTP+SSE transport (set once, before its id is given out).
    old_transport: AtomicBool,
}

/// Why a POST could not be registered.
pub(crate) enum Refused {
    /// The session has ended.
    Ended,
    /// A request id is already in flight on this session.
    DuplicateId(RequestId),
}

impl Session {
    fn touch(&self) {
        *self.last_seen.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> std::time::Duration {
        self.last_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    async fn has_live_stream(&self) -> bool {
        let state = self.state.lock().await;
        state
            .streams
            .values()
            .any(|s| s.decide.is_some() || s.live.as_ref().is_some_and(|l| !l.is_closed()))
    }

    /// The negotiated version, once known.
    pub(crate) async fn version(&self) -> Option<String> {
        self.state.lock().await.version.clone()
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
        let mut seen = HashSet::new();
        for id in requests {
            if state.requests.contains_key(id) || !seen.insert(id) {
                return Err(Refused::DuplicateId(id.clone()));
            }
        }
        let stream = StreamId(state.next_stream);
        state.next_stream += 1;
        let (tx, rx) = oneshot::channel();
        for id in requests {
            state.requests.insert(id.clone(), stream);
        }
        state.streams.insert(
            stream,
            Stream {
                pending: requests.iter().cloned().collect(),
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
        let mut state = self.state.lock().await;
        if state.ended {
            return;
        }
        if state.old_sse.is_some() {
            return self.to_old_sse(&mut state, &[message]).await;
        }
        self.route(&mut state, message, related).await;
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
    async fn to_old_sse(&self, state: &mut State, messages: &[Message]) {
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
            self.end_locked(state).await;
        }
    }

    /// Routes a batch reply to the POST of the batch it answers: the stream of its members'
    /// requests, or, for a batch of only invalid members (whose errors name no request), the
    /// oldest batch POST still waiting with no request of its own (the application answers
    /// batches in the order they came).
    pub(crate) async fn send_batch(&self, messages: Vec<Message>) {
        let mut state = self.state.lock().await;
        if state.ended {
            return;
        }
        if state.old_sse.is_some() {
            return self.to_old_sse(&mut state, &messages).await;
        }
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
                self.emit(&mut stream, stream_id, message).await;
            }
        }
        if stream.sse && !stream.pending.is_empty() {
            state.streams.insert(stream_id, stream);
        } else {
            // Answered: the connection ends; SSE events stay in the store for resumption.
            for id in stream.pending.drain() {
                state.requests.remove(&id);
            }
        }
    }

    async fn route(&self, state: &mut State, message: Message, related: Option<RequestId>) {
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
            return self.to_standalone(state, message).await;
        };
        let Some(mut stream) = state.streams.remove(&stream_id) else {
            return;
        };
        let completes = answers.as_ref().is_some_and(|id| stream.pending.remove(id));
        if completes && let Some(id) = &answers {
            state.requests.remove(id);
        }
        if stream.initialize && completes {
            self.initialize_answered(state, &message);
        }
        let done = completes && stream.pending.is_empty();
        if !stream.sse {
            if completes && !stream.batch && self.sse_responses() {
                // Configured to answer with SSE: the stream opens for the response alone.
            } else if completes {
                stream.collected.push(message);
                if done {
                    let ok = !matches!(stream.collected.first(), Some(Message::Error(_)));
                    let body = if stream.batch {
                        Bytes::from(modelctx_types::encode_batch(&stream.collected))
                    } else {
                        stream.collected.first().map(encode).unwrap_or_default()
                    };
                    if let Some(decide) = stream.decide.take() {
                        let _ = decide.send(Decision::Json(body));
                    }
                    if stream.initialize && !ok {
                        self.end_locked(state).await;
                    }
                } else {
                    state.streams.insert(stream_id, stream);
                }
                return;
            }
            // Something before the response: the answer is a stream.
            let collected = std::mem::take(&mut stream.collected);
            let first = self.open_sse(state, &mut stream, stream_id).await;
            let (tx, rx) = mpsc::channel(self.buffer());
            stream.live = Some(tx);
            if let Some(decide) = stream.decide.take() {
                let _ = decide.send(Decision::Sse { first, rx });
            }
            for earlier in collected {
                self.emit(&mut stream, stream_id, &earlier).await;
            }
        }
        self.emit(&mut stream, stream_id, &message).await;
        if done {
            // The stream is complete: its connection ends; its events stay for resumption.
            stream.live = None;
        } else {
            state.streams.insert(stream_id, stream);
        }
    }

    /// Records the version `initialize` settled on.
    fn initialize_answered(&self, state: &mut State, message: &Message) {
        if let Message::Response(response) = message {
            #[derive(serde::Deserialize)]
            struct Result {
                #[serde(rename = "protocolVersion")]
                version: String,
            }
            if let Ok(result) = serde_json::from_str::<Result>(response.result.get()) {
                state.version = Some(result.version);
            }
        }
    }

    fn sse_responses(&self) -> bool {
        self.config().is_some_and(|s| s.config.sse_responses)
    }

    fn buffer(&self) -> usize {
        self.config().map_or(256, |s| s.config.stream_buffer).max(1)
    }

    /// Starts SSE on `stream`: its priming event on 2025-11-25 sessions (none before).
    async fn open_sse(&self, state: &State, stream: &mut Stream, stream_id: StreamId) -> Bytes {
        stream.sse = true;
        let primes = state.version.as_deref().is_none_or(|v| v >= "2025-11-25");
        if !primes {
            return Bytes::new();
        }
        let Some(shared) = self.config() else {
            return Bytes::new();
        };
        let id = shared
            .config
            .event_store
            .append(&self.id, stream_id, Bytes::new())
            .await;
        sse::priming(&id.to_string(), shared.config.sse_retry)
    }

    /// Stores `message` as the next event of `stream` and writes it to its connection, if any.
    /// A connection that is gone or too far behind is let go: the client resumes from the store.
    async fn emit(&self, stream: &mut Stream, stream_id: StreamId, message: &Message) {
        let data = encode(message);
        let Some(shared) = self.config() else {
            return;
        };
        let id = shared
            .config
            .event_store
            .append(&self.id, stream_id, data.clone())
            .await;
        if let Some(live) = &stream.live
            && live
                .try_send(sse::event(Some(&id.to_string()), &data))
                .is_err()
        {
            stream.live = None;
        }
    }

    async fn to_standalone(&self, state: &mut State, message: Message) {
        if let Some(stream_id) = state.standalone
            && let Some(mut stream) = state.streams.remove(&stream_id)
        {
            if stream.live.as_ref().is_some_and(|l| !l.is_closed()) {
                self.emit(&mut stream, stream_id, &message).await;
                state.streams.insert(stream_id, stream);
                return;
            }
            state.streams.insert(stream_id, stream);
        }
        let limit = self.config().map_or(256, |s| s.config.standalone_queue);
        if state.queue.len() >= limit {
            state.queue.pop_front();
            tracing::warn!(
                session = %redact(&self.id),
                "standalone queue full ({limit}): dropped its oldest message"
            );
        }
        if limit > 0 {
            state.queue.push_back(encode(&message));
        }
    }

    /// Opens a standalone stream (GET without `Last-Event-ID`): `None` when one is open already.
    pub(crate) async fn open_standalone(&self) -> Option<(Bytes, mpsc::Receiver<Bytes>)> {
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
            state.streams.remove(&old);
        }
        let stream_id = StreamId(state.next_stream);
        state.next_stream += 1;
        let mut stream = Stream::default();
        let first = self.open_sse(&state, &mut stream, stream_id).await;
        let (tx, rx) = mpsc::channel(self.buffer());
        stream.live = Some(tx);
        state.standalone = Some(stream_id);
        self.flush_queue(&mut state, &mut stream, stream_id).await;
        state.streams.insert(stream_id, stream);
        Some((first, rx))
    }

    async fn flush_queue(&self, state: &mut State, stream: &mut Stream, stream_id: StreamId) {
        let Some(shared) = self.config() else {
            return;
        };
        while let Some(data) = state.queue.pop_front() {
            let id = shared
                .config
                .event_store
                .append(&self.id, stream_id, data.clone())
                .await;
            // As in `emit`: a connection that cannot take the event is let go, and the client
            // resumes from the store (a silent gap otherwise).
            if let Some(live) = &stream.live
                && live
                    .try_send(sse::event(Some(&id.to_string()), &data))
                    .is_err()
            {
                stream.live = None;
            }
        }
    }

    /// Resumes a stream after `last` (GET with `Last-Event-ID`): the stored events after it, then
    /// the live stream when it is still going. `Err` with a reason when it cannot be resumed
    /// exactly.
    pub(crate) async fn resume(
        &self,
        last: &EventId,
    ) -> Result<(Bytes, mpsc::Receiver<Bytes>), String> {
        let mut state = self.state.lock().await;
        if state.ended {
            return Err("the session has ended".into());
        }
        let shared = self.config().ok_or("the server is shutting down")?;
        let events = shared
            .config
            .event_store
            .replay_after(&self.id, last)
            .await
            .map_err(|e| format!("cannot resume after event {last}: {e}"))?;
        let mut first = bytes::BytesMut::new();
        for (id, data) in &events {
            if !data.is_empty() {
                first.extend_from_slice(&sse::event(Some(&id.to_string()), data));
            }
        }
        let (tx, rx) = mpsc::channel(self.buffer());
        let stream_id = last.stream;
        if let Some(mut stream) = state.streams.remove(&stream_id) {
            // Still going: this connection takes over (a stream is read by one connection).
            stream.live = Some(tx);
            if state.standalone == Some(stream_id) {
                self.flush_queue(&mut state, &mut stream, stream_id).await;
            }
            state.streams.insert(stream_id, stream);
        }
        // Otherwise the stream is complete: `tx` is dropped and the body ends after the replay.
        Ok((first.freeze(), rx))
    }

    /// The client cancelled `request` (`notifications/cancelled`): the server will not answer it,
    /// so it is no longer in flight. Its stream ends when nothing else is pending on it: an SSE
    /// connection closes (its events stay in the store), a POST still waiting gets the answers
    /// gathered for its batch, or an event stream with nothing in it.
    pub(crate) async fn forget(&self, request: &RequestId) {
        let mut state = self.state.lock().await;
        let Some(stream_id) = state.requests.remove(request) else {
            return;
        };
        let Some(mut stream) = state.streams.remove(&stream_id) else {
            return;
        };
        stream.pending.remove(request);
        if !stream.pending.is_empty() {
            state.streams.insert(stream_id, stream);
            return;
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
        // Dropping the stream drops its connection's sender: the body ends.
    }

    /// Closes the connection of request `request`'s stream (2025-11-25 sessions only). A POST
    /// not answered yet becomes a stream of its priming event alone, which the client resumes
    /// from.
    pub(crate) async fn close_stream(&self, request: &RequestId) -> bool {
        let mut state = self.state.lock().await;
        if state.version.as_deref().is_some_and(|v| v < "2025-11-25") {
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
            let first = self.open_sse(&state, &mut stream, stream_id).await;
            let (_, rx) = mpsc::channel(1);
            let _ = decide.send(Decision::Sse { first, rx });
            for earlier in collected {
                self.emit(&mut stream, stream_id, &earlier).await;
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
        let mut state = self.state.lock().await;
        self.end_locked(&mut state).await;
    }

    async fn end_locked(&self, state: &mut State) {
        if state.ended {
            return;
        }
        state.ended = true;
        state.streams.clear();
        state.requests.clear();
        state.queue.clear();
        state.standalone = None;
        state.old_sse = None;
        self.ended.cancel();
        if let Some(shared) = self.config() {
            shared.sessions().remove(&self.id);
            shared.config.event_store.remove_session(&self.id).await;
        }
        // Taken, not borrowed: the handler holds this session (a cycle that kept every ended
        // session and its handler alive).
        if let Some(handler) = self.handler.take() {
            handler.closed();
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
    /// every other input, and the sessions it opened.
    #[derive(Default)]
    struct App {
        dropped: Arc<AtomicUsize>,
        inputs: Arc<std::sync::Mutex<Vec<Message>>>,
        sessions: Arc<std::sync::Mutex<Vec<LegacySession>>>,
    }

    struct Handler {
        session: LegacySession,
        dropped: Arc<AtomicUsize>,
        inputs: Arc<std::sync::Mutex<Vec<Message>>>,
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

        fn closed(&self) {}
    }

    impl McpApp for App {
        fn open_session(&self, session: LegacySession) -> Arc<dyn LegacyHandler> {
            self.sessions.lock().unwrap().push(session.clone());
            Arc::new(Handler {
                session,
                dropped: self.dropped.clone(),
                inputs: self.inputs.clone(),
            })
        }

        fn modern(&self, _request: ModernRequest) {}
    }

    fn initialize() -> http::Request<String> {
        http::Request::post("/mcp")
            .header("host", "127.0.0.1")
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
            .body(body.to_owned())
            .unwrap()
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
}
