//! [`RedisEventStore`]: the SSE events of legacy sessions in Redis Streams, shared by every
//! instance, and followed live across instances.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use modelctx_http::event_store::{
    BoxFuture, EventId, EventStore, EventStoreError, Follow, ReplayError, StoreSizes, StreamId,
};
use modelctx_types::RequestId;
use redis::{Script, Value};
use tokio::sync::mpsc;

use crate::bus::{PubSub, Sink};
use crate::conn::{Shared, millis};
use crate::error::Error;

/// The shared part of the scripts that append (`append`, `fail_orphan`).
macro_rules! with_append_fn {
    ($file:literal) => {
        concat!(include_str!("scripts/append_fn.lua"), include_str!($file))
    };
}

const APPEND: &str = with_append_fn!("scripts/append.lua");
const FAIL_ORPHAN: &str = with_append_fn!("scripts/fail_orphan.lua");
const OPEN: &str = include_str!("scripts/open.lua");
const FINISH: &str = include_str!("scripts/finish.lua");
const REPLAY: &str = include_str!("scripts/replay.lua");
const REMOVE_STREAM: &str = include_str!("scripts/remove_stream.lua");
const REMOVE_SESSION: &str = include_str!("scripts/remove_session.lua");
const SIZES: &str = include_str!("scripts/sizes.lua");

/// How often a follower reads the stream again (and checks its owner's lease), whatever the
/// channel brought: the safety net for messages lost on pub/sub.
pub const FOLLOW_POLL: Duration = Duration::from_secs(1);

/// How many reads in a row may fail before a follower gives up (its channel closes; the client
/// resumes again from the last id it got).
const FOLLOW_FAILURES: u32 = 5;

/// How many live events wait for the GET that follows a stream.
const FOLLOW_QUEUE: usize = 256;

/// The error a follower appends for each request still pending on a stream whose instance
/// stopped (`-32603`, JSON-RPC's internal error).
const ORPHAN_MESSAGE: &str = "the instance running this request stopped";

#[derive(Debug)]
struct Scripts {
    append: Script,
    fail_orphan: Script,
    open: Script,
    finish: Script,
    replay: Script,
    remove_stream: Script,
    remove_session: Script,
    sizes: Script,
}

/// An [`EventStore`] on Redis ([`Fleet::event_store`](crate::Fleet::event_store)): a client
/// that resumes an SSE stream with `Last-Event-ID` on any instance gets exactly the events it
/// missed, and, for a stream another instance still writes, the rest live.
///
/// Each SSE stream `S` of session `SID` is a Redis Stream `PREFIX:{s:SID}:ev:S` whose entry ids
/// are the event's sequence number (`SEQ-0`, from the session's counter `PREFIX:{s:SID}:seq`),
/// bounded to [`max_events`](Self::max_events) entries (`XADD MAXLEN =`, default 1024) and
/// expiring [`max_age`](Self::max_age) after its last append (default 5 minutes). The table
/// `PREFIX:{s:SID}:meta` records each stream's owner, pending requests, last and last trimmed
/// sequence numbers, whether it is finished, and the session's standalone stream; it and the
/// counter expire after the session idle time. Every change is one Lua script (`EVALSHA`, and
/// `EVAL` when Redis lost it), so it is atomic; each append also publishes the event on the
/// session's channel `PREFIX:{s:SID}:ch`.
///
/// Stream ids are numbered from `instance << 32` ([`stream_base`](EventStore::stream_base)).
/// [`follow`](EventStore::follow) subscribes to the session's channel, reads the stored events,
/// then forwards the live ones, each once, in order: an event whose predecessor on its stream
/// was not the last one forwarded (a message lost on pub/sub) makes it read the stream again,
/// and so does a poll every [`FOLLOW_POLL`]. While the stream is not finished, each poll checks
/// its owner's lease: when the owner is gone, the follower completes the stream with an error
/// for each request still pending on it (once, whoever does it), so the client gets an error
/// instead of silence.
///
/// Unlike [`MemoryEventStore`](modelctx_http::event_store::MemoryEventStore), which evicts each
/// event at its age, a stream here keeps its events until `MAXLEN` trims them or until
/// `max_age` after its last append. Every call fails within the fleet's
/// [`op_timeout`](crate::FleetConfig::op_timeout) when Redis is lost
/// ([`EventStoreErrorKind::Unavailable`](modelctx_http::event_store::EventStoreErrorKind)).
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct RedisEventStore {
    shared: Arc<Shared>,
    pubsub: Arc<PubSub>,
    scripts: Arc<Scripts>,
    instance: u16,
    max_events: usize,
    max_age: Duration,
    idle: Duration,
}

impl RedisEventStore {
    pub(crate) fn new(shared: Arc<Shared>, pubsub: Arc<PubSub>, instance: u16) -> Self {
        RedisEventStore {
            idle: shared.config.session_idle,
            shared,
            pubsub,
            scripts: Arc::new(Scripts {
                append: Script::new(APPEND),
                fail_orphan: Script::new(FAIL_ORPHAN),
                open: Script::new(OPEN),
                finish: Script::new(FINISH),
                replay: Script::new(REPLAY),
                remove_stream: Script::new(REMOVE_STREAM),
                remove_session: Script::new(REMOVE_SESSION),
                sizes: Script::new(SIZES),
            }),
            instance,
            max_events: 1024,
            max_age: Duration::from_secs(5 * 60),
        }
    }

    /// The same store, keeping at most `n` events of each stream (at least 1; default 1024).
    pub fn max_events(mut self, n: usize) -> Self {
        self.max_events = n.max(1);
        self
    }

    /// The same store, keeping a stream's events until `age` after its last append (at least
    /// 1 ms; default 5 minutes).
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = age.max(Duration::from_millis(1));
        self
    }

    async fn open(
        &self,
        session: &str,
        stream: StreamId,
        pending: &[RequestId],
    ) -> Result<(), Error> {
        let pending = serde_json::to_string(pending).map_err(|source| Error::Corrupt {
            op: "open stream",
            source,
        })?;
        let mut call = self.scripts.open.prepare_invoke();
        call.key(self.shared.keys.meta(session))
            .arg(stream.get())
            .arg(self.instance)
            .arg(pending)
            .arg(millis(self.idle));
        self.shared
            .eval::<i64>("open stream", &call)
            .await
            .map(drop)
    }

    async fn append_event(
        &self,
        session: &str,
        stream: StreamId,
        data: &[u8],
    ) -> Result<u64, Error> {
        let keys = &self.shared.keys;
        let mut call = self.scripts.append.prepare_invoke();
        call.key(keys.seq(session))
            .key(keys.events(session, stream.get()))
            .key(keys.meta(session))
            .key(keys.channel(session))
            .arg(stream.get())
            .arg(data)
            .arg(self.max_events)
            .arg(millis(self.max_age))
            .arg(millis(self.idle));
        self.shared.eval("append", &call).await
    }

    async fn finish(&self, session: &str, stream: StreamId) -> Result<(), Error> {
        let keys = &self.shared.keys;
        let mut call = self.scripts.finish.prepare_invoke();
        call.key(keys.meta(session))
            .key(keys.channel(session))
            .arg(stream.get());
        self.shared
            .eval::<i64>("finish stream", &call)
            .await
            .map(drop)
    }

    async fn read(&self, session: &str, after: &EventId) -> Result<Read, ReplayError> {
        let keys = &self.shared.keys;
        let mut call = self.scripts.replay.prepare_invoke();
        call.key(keys.meta(session))
            .key(keys.events(session, after.stream.get()))
            .arg(after.stream.get())
            .arg(after.seq);
        let reply: Vec<Value> = self
            .shared
            .eval("replay", &call)
            .await
            .map_err(replay_error)?;
        parse_read(after.stream, reply)
    }

    /// Completes `stream` with an error for each request pending on it, if it is still not
    /// finished and still `owner`'s. Returns whether this call did it.
    async fn fail_orphan(
        &self,
        session: &str,
        stream: StreamId,
        owner: u16,
    ) -> Result<bool, Error> {
        let keys = &self.shared.keys;
        let pending: Option<String> = self
            .shared
            .query(
                "HGET",
                redis::cmd("HGET")
                    .arg(keys.meta(session))
                    .arg(format!("p:{}", stream.get())),
            )
            .await?;
        let pending: Vec<RequestId> = match pending {
            Some(text) => serde_json::from_str(&text).map_err(|source| Error::Corrupt {
                op: "fail orphan",
                source,
            })?,
            None => Vec::new(),
        };
        let mut call = self.scripts.fail_orphan.prepare_invoke();
        call.key(keys.seq(session))
            .key(keys.events(session, stream.get()))
            .key(keys.meta(session))
            .key(keys.channel(session))
            .arg(stream.get())
            .arg(owner)
            .arg(self.max_events)
            .arg(millis(self.max_age))
            .arg(millis(self.idle));
        for id in &pending {
            call.arg(orphan_error(id));
        }
        let done: i64 = self.shared.eval("fail orphan", &call).await?;
        if done >= 0 {
            tracing::warn!(
                session,
                stream = stream.get(),
                owner,
                failed = done,
                "the instance writing an SSE stream is gone: its pending requests were failed"
            );
        }
        Ok(done >= 0)
    }

    /// Whether instance `owner` holds its lease.
    async fn alive(&self, owner: u16) -> Result<bool, Error> {
        let n: i64 = self
            .shared
            .query(
                "EXISTS",
                redis::cmd("EXISTS").arg(self.shared.keys.instance(owner)),
            )
            .await?;
        Ok(n == 1)
    }

    async fn start_follow(&self, session: &str, after: &EventId) -> Result<Follow, ReplayError> {
        // Subscribed first, read second: nothing appended between the two is missed.
        let (tx, live) = mpsc::channel(FOLLOW_QUEUE);
        let (listener, subscribed) = self
            .pubsub
            .listen(self.shared.keys.channel(session), Sink::Raw(tx))
            .await;
        if let Err(error) = subscribed {
            // The poll reads the stream anyway; the keeper subscribes once Redis answers.
            tracing::debug!(%error, session, "following a stream without its channel for now");
        }
        let read = self.read(session, after).await?;
        let done = read.finished;
        let last = read.events.last().map_or(after.seq, |(id, _)| id.seq);
        let follow = Follow::new(read.events, done);
        if done {
            return Ok(follow);
        }
        let (rest_tx, rest) = mpsc::channel(FOLLOW_QUEUE);
        let follower = Follower {
            store: self.clone(),
            session: session.to_owned(),
            stream: after.stream,
            last,
            owner: read.owner,
            out: rest_tx,
            live,
            _listener: listener,
        };
        tokio::spawn(follower.run());
        Ok(follow.with_rest(rest))
    }

    async fn sizes_now(&self) -> Result<StoreSizes, Error> {
        let pattern = self.shared.keys.meta_pattern();
        let mut sizes = StoreSizes::default();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = self
                .shared
                .query(
                    "SCAN",
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(1000),
                )
                .await?;
            for meta in keys {
                let Some(base) = meta.strip_suffix("meta") else {
                    continue;
                };
                let mut call = self.scripts.sizes.prepare_invoke();
                call.key(&meta).arg(format!("{base}ev:"));
                let (streams, events, bytes): (usize, usize, usize) =
                    self.shared.eval("sizes", &call).await?;
                sizes.sessions += 1;
                sizes.streams += streams;
                sizes.events += events;
                sizes.bytes += bytes;
            }
            if next == 0 {
                return Ok(sizes);
            }
            cursor = next;
        }
    }
}

/// What the replay script read.
#[derive(Debug)]
struct Read {
    events: Vec<(EventId, Bytes)>,
    finished: bool,
    /// The instance that opened the stream, when recorded.
    owner: Option<u16>,
}

fn parse_read(stream: StreamId, reply: Vec<Value>) -> Result<Read, ReplayError> {
    let bad = |what: &str| {
        ReplayError::from(event_error(Error::Corrupt {
            op: "replay",
            source: <serde_json::Error as serde::de::Error>::custom(format!(
                "the replay script's reply: {what}"
            )),
        }))
    };
    let mut items = reply.into_iter();
    match items.next() {
        Some(Value::Int(0)) => {}
        Some(Value::Int(1)) => return Err(ReplayError::Unknown),
        Some(Value::Int(2)) => return Err(ReplayError::Gone),
        other => return Err(bad(&format!("status {other:?}"))),
    }
    let finished = matches!(items.next(), Some(Value::Int(1)));
    let owner = match items.next() {
        Some(Value::Int(n)) => u16::try_from(n).ok(),
        other => return Err(bad(&format!("owner {other:?}"))),
    };
    let mut events = Vec::new();
    while let Some(seq) = items.next() {
        let (Value::Int(seq), Some(Value::BulkString(data))) = (seq, items.next()) else {
            return Err(bad("an event"));
        };
        let seq = u64::try_from(seq).map_err(|_| bad("a negative sequence number"))?;
        events.push((EventId::new(stream, seq), Bytes::from(data)));
    }
    Ok(Read {
        events,
        finished,
        owner,
    })
}

/// The JSON-RPC error response for request `id` of a stream whose instance stopped.
fn orphan_error(id: &RequestId) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32603, "message": ORPHAN_MESSAGE},
    }))
    .unwrap_or_default()
}

/// A Redis failure while reading a stream.
fn replay_error(error: Error) -> ReplayError {
    ReplayError::from(event_error(error))
}

/// A Redis failure as the event store reports it.
pub(crate) fn event_error(error: Error) -> EventStoreError {
    if error.is_unavailable() {
        EventStoreError::unavailable(error)
    } else {
        EventStoreError::failed(error)
    }
}

/// A message of a session's channel.
#[derive(Debug, PartialEq, Eq)]
enum Live<'a> {
    /// Event `seq` of stream `stream`, whose previous event on that stream was `prev` (0 for
    /// none).
    Event {
        stream: u64,
        prev: u64,
        seq: u64,
        data: &'a [u8],
    },
    /// Stream `stream` is finished.
    Finished { stream: u64 },
}

/// Reads a message the scripts publish: `S PREV SEQ\n<data>` or `fin S`.
fn parse_live(message: &[u8]) -> Option<Live<'_>> {
    if let Some(rest) = message.strip_prefix(b"fin ") {
        let stream = std::str::from_utf8(rest).ok()?.parse().ok()?;
        return Some(Live::Finished { stream });
    }
    let end = message.iter().position(|b| *b == b'\n')?;
    let head = std::str::from_utf8(&message[..end]).ok()?;
    let mut parts = head.split(' ').map(str::parse::<u64>);
    let (Some(Ok(stream)), Some(Ok(prev)), Some(Ok(seq)), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some(Live::Event {
        stream,
        prev,
        seq,
        data: &message[end + 1..],
    })
}

/// Forwards a stream's later events to a GET on this instance (see [`RedisEventStore`]).
struct Follower {
    store: RedisEventStore,
    session: String,
    stream: StreamId,
    /// The sequence number of the last event given (or of the client's `Last-Event-ID`).
    last: u64,
    owner: Option<u16>,
    out: mpsc::Sender<(EventId, Bytes)>,
    live: mpsc::Receiver<Vec<u8>>,
    /// The subscription to the session's channel, for as long as this runs.
    _listener: crate::bus::Listener,
}

/// What a follower does next.
enum Step {
    Go,
    /// Read the stream again (a message lost, a poll, the stream finished).
    Read,
    Stop,
}

impl Follower {
    async fn run(mut self) {
        let mut poll = tokio::time::interval(FOLLOW_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await;
        let mut failures = 0u32;
        let mut live = true;
        loop {
            let step = tokio::select! {
                () = self.out.closed() => Step::Stop,
                message = self.live.recv(), if live => match message {
                    Some(message) => self.on_live(&message).await,
                    None => {
                        // No more live messages: poll only.
                        live = false;
                        Step::Read
                    }
                },
                _ = poll.tick() => Step::Read,
            };
            match step {
                Step::Go => {}
                Step::Stop => return,
                Step::Read => match self.catch_up().await {
                    Ok(true) => return,
                    Ok(false) => failures = 0,
                    Err(error) => {
                        failures += 1;
                        tracing::debug!(%error, session = self.session, "following a stream");
                        if matches!(error, ReplayError::Unknown | ReplayError::Gone)
                            || failures >= FOLLOW_FAILURES
                        {
                            tracing::warn!(
                                %error,
                                session = self.session,
                                stream = self.stream.get(),
                                "stopped following a stream; the client resumes again"
                            );
                            return;
                        }
                    }
                },
            }
        }
    }

    async fn on_live(&mut self, message: &[u8]) -> Step {
        match parse_live(message) {
            Some(Live::Event {
                stream,
                prev,
                seq,
                data,
            }) if stream == self.stream.get() => {
                if seq <= self.last {
                    // Read already.
                    Step::Go
                } else if prev == self.last {
                    self.last = seq;
                    let event = (EventId::new(self.stream, seq), Bytes::copy_from_slice(data));
                    if self.out.send(event).await.is_err() {
                        Step::Stop
                    } else {
                        Step::Go
                    }
                } else {
                    // Something between was lost (or not read yet): read it all in order.
                    Step::Read
                }
            }
            Some(Live::Finished { stream }) if stream == self.stream.get() => Step::Read,
            Some(_) => Step::Go,
            None => {
                tracing::warn!(
                    session = self.session,
                    "an unreadable message on a session channel"
                );
                Step::Go
            }
        }
    }

    /// Reads what follows the last event given and gives it; true when the stream is complete
    /// (then the channel closes). While it is not, checks the owner's lease and fails the
    /// stream when it is gone.
    async fn catch_up(&mut self) -> Result<bool, ReplayError> {
        let after = EventId::new(self.stream, self.last);
        let read = self.store.read(&self.session, &after).await?;
        if let Some(owner) = read.owner {
            self.owner = Some(owner);
        }
        for event in read.events {
            self.last = event.0.seq;
            if self.out.send(event).await.is_err() {
                return Ok(true);
            }
        }
        if read.finished {
            return Ok(true);
        }
        if let Some(owner) = self.owner
            && !self.store.alive(owner).await.map_err(replay_error)?
            && self
                .store
                .fail_orphan(&self.session, self.stream, owner)
                .await
                .map_err(replay_error)?
        {
            // The errors are read (and the stream found finished) at once.
            return Box::pin(self.catch_up()).await;
        }
        Ok(false)
    }
}

impl EventStore for RedisEventStore {
    /// `instance << 32`.
    fn stream_base(&self) -> u64 {
        u64::from(self.instance) << 32
    }

    fn open_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
        pending: &'a [RequestId],
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        Box::pin(async move {
            self.open(session, stream, pending)
                .await
                .map_err(event_error)
        })
    }

    fn append<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
        data: Bytes,
    ) -> BoxFuture<'a, Result<EventId, EventStoreError>> {
        Box::pin(async move {
            let seq = self
                .append_event(session, stream, &data)
                .await
                .map_err(event_error)?;
            Ok(EventId::new(stream, seq))
        })
    }

    fn finish_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        Box::pin(async move { self.finish(session, stream).await.map_err(event_error) })
    }

    fn replay_after<'a>(
        &'a self,
        session: &'a str,
        after: &'a EventId,
    ) -> BoxFuture<'a, Result<Vec<(EventId, Bytes)>, ReplayError>> {
        Box::pin(async move { Ok(self.read(session, after).await?.events) })
    }

    fn follow<'a>(
        &'a self,
        session: &'a str,
        after: &'a EventId,
    ) -> BoxFuture<'a, Result<Follow, ReplayError>> {
        Box::pin(self.start_follow(session, after))
    }

    fn set_standalone<'a>(
        &'a self,
        session: &'a str,
        stream: Option<StreamId>,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        Box::pin(async move {
            let meta = self.shared.keys.meta(session);
            let result = match stream {
                Some(stream) => {
                    let mut pipe = redis::pipe();
                    pipe.atomic()
                        .cmd("HSET")
                        .arg(&meta)
                        .arg("sa")
                        .arg(stream.get())
                        .ignore()
                        .cmd("PEXPIRE")
                        .arg(&meta)
                        .arg(millis(self.idle))
                        .ignore();
                    self.shared.pipeline::<()>("set standalone", &pipe).await
                }
                None => self
                    .shared
                    .query::<i64>("HDEL", redis::cmd("HDEL").arg(&meta).arg("sa"))
                    .await
                    .map(drop),
            };
            result.map_err(event_error)
        })
    }

    fn standalone<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, Result<Option<StreamId>, EventStoreError>> {
        Box::pin(async move {
            let stream: Option<u64> = self
                .shared
                .query(
                    "HGET",
                    redis::cmd("HGET")
                        .arg(self.shared.keys.meta(session))
                        .arg("sa"),
                )
                .await
                .map_err(event_error)?;
            Ok(stream.map(StreamId))
        })
    }

    fn remove_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        Box::pin(async move {
            let keys = &self.shared.keys;
            let mut call = self.scripts.remove_stream.prepare_invoke();
            call.key(keys.meta(session))
                .key(keys.events(session, stream.get()))
                .arg(stream.get());
            self.shared
                .eval::<i64>("remove stream", &call)
                .await
                .map(drop)
                .map_err(event_error)
        })
    }

    fn remove_session<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        Box::pin(async move {
            let keys = &self.shared.keys;
            let mut call = self.scripts.remove_session.prepare_invoke();
            call.key(keys.seq(session))
                .key(keys.meta(session))
                .arg(keys.events_base(session));
            self.shared
                .eval::<i64>("remove session", &call)
                .await
                .map(drop)
                .map_err(event_error)
        })
    }

    /// Counted over every session of the fleet (`SCAN` of the stream tables, then one script
    /// per session): for metrics and tests, not for a request's path.
    fn sizes(&self) -> BoxFuture<'_, Result<StoreSizes, EventStoreError>> {
        Box::pin(async move { self.sizes_now().await.map_err(event_error) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_messages_are_read_as_the_scripts_write_them() {
        assert_eq!(
            parse_live(b"4294967297 3 9\n{\"a\":1}\nmore"),
            Some(Live::Event {
                stream: 4_294_967_297,
                prev: 3,
                seq: 9,
                data: b"{\"a\":1}\nmore"
            })
        );
        assert_eq!(
            parse_live(b"7 0 1\n"),
            Some(Live::Event {
                stream: 7,
                prev: 0,
                seq: 1,
                data: b""
            })
        );
        assert_eq!(parse_live(b"fin 12"), Some(Live::Finished { stream: 12 }));
        for bad in [
            &b"fin x"[..],
            b"1 2\nx",
            b"1 2 3 4\nx",
            b"1 2 3",
            b"a b c\n",
            b"",
        ] {
            assert_eq!(parse_live(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn replies_of_the_replay_script_are_read_or_refused() {
        let s = StreamId(5);
        let read = parse_read(
            s,
            vec![
                Value::Int(0),
                Value::Int(1),
                Value::Int(3),
                Value::Int(7),
                Value::BulkString(b"x".to_vec()),
                Value::Int(9),
                Value::BulkString(Vec::new()),
            ],
        )
        .unwrap();
        assert!(read.finished);
        assert_eq!(read.owner, Some(3));
        assert_eq!(
            read.events,
            [
                (EventId::new(s, 7), Bytes::from_static(b"x")),
                (EventId::new(s, 9), Bytes::new())
            ]
        );
        let unowned = parse_read(s, vec![Value::Int(0), Value::Int(0), Value::Int(-1)]).unwrap();
        assert_eq!((unowned.finished, unowned.owner), (false, None));
        assert!(matches!(
            parse_read(s, vec![Value::Int(1)]),
            Err(ReplayError::Unknown)
        ));
        assert!(matches!(
            parse_read(s, vec![Value::Int(2)]),
            Err(ReplayError::Gone)
        ));
        for bad in [
            vec![],
            vec![Value::Int(3)],
            vec![Value::Int(0), Value::Int(0)],
            vec![Value::Int(0), Value::Int(0), Value::Int(1), Value::Int(4)],
        ] {
            assert!(
                matches!(parse_read(s, bad.clone()), Err(ReplayError::Failed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn an_orphaned_request_gets_an_internal_error() {
        let text: serde_json::Value =
            serde_json::from_slice(&orphan_error(&RequestId::from(42))).unwrap();
        assert_eq!(
            text,
            serde_json::json!({"jsonrpc": "2.0", "id": 42,
                "error": {"code": -32603, "message": ORPHAN_MESSAGE}})
        );
    }

    #[test]
    fn errors_keep_their_kind_and_cause() {
        let down = event_error(Error::Timeout {
            op: "append",
            after: Duration::from_secs(1),
        });
        assert!(down.is_unavailable());
        assert!(
            std::error::Error::source(&down)
                .and_then(|e| e.downcast_ref::<Error>())
                .is_some()
        );
        assert!(matches!(
            replay_error(Error::Timeout {
                op: "replay",
                after: Duration::from_secs(1)
            }),
            ReplayError::Unavailable(_)
        ));
    }
}
