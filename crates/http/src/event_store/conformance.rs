//! The contract of [`EventStore`] as checks that any implementation runs in its tests
//! (feature `testing`).
//!
//! Each function drives a store through one part of the contract and panics, like `assert!`,
//! at the first breach, with a message naming it. Each works on the one session it is given
//! (so that checks of one store may run side by side when their sessions differ), numbers its
//! streams from [`EventStore::stream_base`], and removes its session before it returns. Store
//! errors are breaches too: the store under test must be reachable.
//!
//! [`all`] runs every check. A store passes when, in its tests, it gets through:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use modelctx_http::event_store::MemoryEventStore;
//! use modelctx_http::event_store::conformance::{self, Limits};
//!
//! # async fn check() {
//! let store = MemoryEventStore::new();
//! // It keeps 1024 events of a stream, each for 5 minutes.
//! let limits = Limits::new(1024, Duration::from_secs(300));
//! // A store on real time is aged by sleeping (the in-memory store's own tests move a test
//! // clock instead, which takes no time).
//! conformance::all(&store, "conformance", limits, tokio::time::sleep).await;
//! # }
//! ```
//!
//! This module is behind a feature, not `#[doc(hidden)]`: it panics by design, so it has no
//! place in a server's build, and as a documented part of the crate it says what an
//! implementation must do in a form that can be run.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use modelctx_types::RequestId;

use super::{EventId, EventStore, Follow, ReplayError, StoreSizes, StreamId};

/// What the checks need to know of the store under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// The most events the store keeps of one stream, in a session with no other stream
    /// (for [`MemoryEventStore`](super::MemoryEventStore): `max_events_per_session`); at
    /// least [`MIN_KEPT`].
    pub kept_per_stream: usize,
    /// How long the store keeps an event (for
    /// [`MemoryEventStore`](super::MemoryEventStore): `max_age`).
    pub max_age: Duration,
}

impl Limits {
    /// A store that keeps `kept_per_stream` events of a stream, each for `max_age`.
    pub fn new(kept_per_stream: usize, max_age: Duration) -> Self {
        Self {
            kept_per_stream,
            max_age,
        }
    }
}

/// The fewest events a store under test may keep of a session (see [`Limits`]): no check
/// but [`gone_after_trimming`] has more stored at once.
pub const MIN_KEPT: usize = 8;

/// How long [`follow_reports_done`] waits for an event on [`Follow::rest`].
const LIVE_WAIT: Duration = Duration::from_secs(5);

/// Runs every check of this module, each on a session of its own, `"{prefix}-{check}"`, one
/// after the other, and checks that the store's sizes are what they were before. Nothing
/// else may use the store meanwhile (see [`remove_session_frees_everything`]). `advance` must
/// move the store's clock on by at least the duration it is given.
pub async fn all<F, Fut>(store: &dyn EventStore, prefix: &str, limits: Limits, advance: F)
where
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = ()>,
{
    assert!(
        limits.kept_per_stream >= MIN_KEPT,
        "conformance: the checks need a store that keeps at least {MIN_KEPT} events"
    );
    let before = sizes(store).await;
    ids_increase_per_stream(store, &format!("{prefix}-ids")).await;
    replay_is_exact(store, &format!("{prefix}-replay")).await;
    unknown_ids(store, &format!("{prefix}-unknown")).await;
    gone_after_trimming(store, &format!("{prefix}-trim"), limits.kept_per_stream).await;
    gone_after_expiry(store, &format!("{prefix}-expiry"), limits.max_age, advance).await;
    follow_reports_done(store, &format!("{prefix}-follow")).await;
    standalone_set_get_clear(store, &format!("{prefix}-standalone")).await;
    remove_session_frees_everything(store, &format!("{prefix}-remove")).await;
    assert_eq!(
        sizes(store).await,
        before,
        "conformance: the store did not return to its sizes before the checks"
    );
}

/// Sequence numbers strictly increase along each stream, an id names the stream it was
/// appended to, and no id is issued twice in a session, whatever the interleaving of its
/// streams.
pub async fn ids_increase_per_stream(store: &dyn EventStore, session: &str) {
    let streams = open(store, session, 3).await;
    let mut last: Vec<Option<EventId>> = vec![None; streams.len()];
    let mut seen = HashSet::new();
    for i in 0..30usize {
        let k = (i * 7 + i / 4) % streams.len();
        let id = append(store, session, streams[k], payload(i)).await;
        assert_eq!(
            id.stream, streams[k],
            "conformance: append on {} returned {id}",
            streams[k]
        );
        if let Some(prev) = last[k] {
            assert!(
                id.seq > prev.seq,
                "conformance: {id} after {prev}: sequence numbers must increase along a stream"
            );
        }
        assert!(seen.insert(id), "conformance: {id} issued twice");
        last[k] = Some(id);
    }
    remove(store, session).await;
}

/// With [`MIN_KEPT`] events stored in two streams, a replay after any id of a stream returns exactly the stream's later events, in order,
/// each once, with their payloads, and nothing of another stream; so does
/// [`EventStore::follow`]; reading does not consume (a second replay is the same).
pub async fn replay_is_exact(store: &dyn EventStore, session: &str) {
    let streams = open(store, session, 2).await;
    let mut history: Vec<Vec<(EventId, Bytes)>> = vec![Vec::new(); streams.len()];
    for i in 0..MIN_KEPT {
        let k = usize::from(i % 3 == 0);
        let data = payload(i);
        let id = append(store, session, streams[k], data.clone()).await;
        history[k].push((id, data));
    }
    for list in &history {
        for (i, (id, _)) in list.iter().enumerate() {
            let want = &list[i + 1..];
            let got = store
                .replay_after(session, id)
                .await
                .unwrap_or_else(|e| panic!("conformance: replay after {id}: {e}"));
            assert_eq!(got, want, "conformance: replay after {id}");
            let again = store
                .replay_after(session, id)
                .await
                .unwrap_or_else(|e| panic!("conformance: second replay after {id}: {e}"));
            assert_eq!(again, want, "conformance: a second replay after {id}");
            let follow = follow(store, session, id).await;
            assert_eq!(follow.events, want, "conformance: follow after {id}");
            assert!(
                !follow.done,
                "conformance: follow after {id}: a stream never finished is not done"
            );
        }
    }
    remove(store, session).await;
}

/// [`ReplayError::Unknown`] for every id the store never issued: another session's, a stream
/// never opened, a sequence number beyond the last, 0, or one issued on another stream of the
/// session; from [`EventStore::follow`] too.
pub async fn unknown_ids(store: &dyn EventStore, session: &str) {
    let streams = open(store, session, 2).await;
    let (a, b) = (streams[0], streams[1]);
    let first = append(store, session, a, payload(1)).await;
    let on_b = append(store, session, b, payload(2)).await;
    let last = append(store, session, a, payload(3)).await;
    let never = format!("{session}-never-opened");
    let unknown = [
        (never.as_str(), last),
        (session, EventId::new(StreamId(b.get() + 1000), last.seq)),
        (session, EventId::new(a, last.seq + 1)),
        (session, EventId::new(a, u64::MAX)),
        (session, EventId::new(a, 0)),
        (session, EventId::new(a, on_b.seq)),
    ];
    for (s, id) in unknown {
        let replay = store.replay_after(s, &id).await;
        assert!(
            matches!(replay, Err(ReplayError::Unknown)),
            "conformance: replay after {id} (never issued in {s}): {replay:?}"
        );
        let follow = store.follow(s, &id).await;
        assert!(
            matches!(follow, Err(ReplayError::Unknown)),
            "conformance: follow after {id} (never issued in {s}): {follow:?}"
        );
    }
    // The ids that were issued still replay.
    let got = store
        .replay_after(session, &first)
        .await
        .unwrap_or_else(|e| panic!("conformance: replay after {first}: {e}"));
    assert_eq!(ids(&got), [last], "conformance: replay after {first}");
    remove(store, session).await;
}

/// Once events of a stream were trimmed (`kept` + 2 events appended to one stream), a replay
/// after the first is [`ReplayError::Gone`], while one after a kept event is still exact.
pub async fn gone_after_trimming(store: &dyn EventStore, session: &str, kept: usize) {
    let a = open(store, session, 1).await[0];
    let mut issued = Vec::with_capacity(kept + 2);
    for i in 0..kept + 2 {
        let data = payload(i);
        issued.push((append(store, session, a, data.clone()).await, data));
    }
    let (first, _) = issued[0];
    let replay = store.replay_after(session, &first).await;
    assert!(
        matches!(replay, Err(ReplayError::Gone)),
        "conformance: replay after {first}, trimmed: {replay:?}"
    );
    let follow = store.follow(session, &first).await;
    assert!(
        matches!(follow, Err(ReplayError::Gone)),
        "conformance: follow after {first}, trimmed: {follow:?}"
    );
    let (before_last, _) = issued[issued.len() - 2];
    let got = store
        .replay_after(session, &before_last)
        .await
        .unwrap_or_else(|e| panic!("conformance: replay after {before_last}: {e}"));
    assert_eq!(
        got,
        issued[issued.len() - 1..],
        "conformance: replay after {before_last}, kept"
    );
    remove(store, session).await;
}

/// Once its events are older than `max_age`, a replay after the first event of a stream is
/// [`ReplayError::Gone`] (not a shorter list). `advance` moves the store's clock on by at
/// least what it is given.
pub async fn gone_after_expiry<F, Fut>(
    store: &dyn EventStore,
    session: &str,
    max_age: Duration,
    advance: F,
) where
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = ()>,
{
    let a = open(store, session, 1).await[0];
    let first = append(store, session, a, payload(1)).await;
    append(store, session, a, payload(2)).await;
    advance(max_age + max_age / 4).await;
    let replay = store.replay_after(session, &first).await;
    assert!(
        matches!(replay, Err(ReplayError::Gone)),
        "conformance: replay after {first}, expired: {replay:?}"
    );
    let follow = store.follow(session, &first).await;
    assert!(
        matches!(follow, Err(ReplayError::Gone)),
        "conformance: follow after {first}, expired: {follow:?}"
    );
    remove(store, session).await;
}

/// [`EventStore::follow`] of a stream is not done until the stream is finished, and done
/// (with no live channel) after; its live channel, when the store gives one, carries each
/// later event once and closes when the stream is finished. Finishing a stream the store
/// does not know changes nothing.
pub async fn follow_reports_done(store: &dyn EventStore, session: &str) {
    let base = store.stream_base();
    let a = StreamId(base + 1);
    let pending = [RequestId::from(1)];
    call("open_stream", store.open_stream(session, a, &pending).await);
    let first = append(store, session, a, payload(1)).await;
    let mut early = follow(store, session, &first).await;
    assert!(
        early.events.is_empty() && !early.done,
        "conformance: follow after the last event of an open stream: {early:?}"
    );
    let data = payload(2);
    let second = append(store, session, a, data.clone()).await;
    if let Some(rest) = early.rest.as_mut() {
        let got = tokio::time::timeout(LIVE_WAIT, rest.recv()).await;
        assert!(
            matches!(&got, Ok(Some((id, d))) if *id == second && *d == data),
            "conformance: the live channel after {first} gave {got:?}, not {second}"
        );
    }
    let open = follow(store, session, &first).await;
    assert!(
        ids(&open.events) == [second] && !open.done,
        "conformance: follow after {first} of an open stream: {open:?}"
    );
    drop(open);
    call("finish_stream", store.finish_stream(session, a).await);
    if let Some(rest) = early.rest.as_mut() {
        let got = tokio::time::timeout(LIVE_WAIT, rest.recv()).await;
        assert!(
            matches!(got, Ok(None)),
            "conformance: the live channel must close once the stream is finished: {got:?}"
        );
    }
    for (after, want) in [(first, vec![second]), (second, vec![])] {
        let done = follow(store, session, &after).await;
        assert!(
            ids(&done.events) == want && done.done && done.rest.is_none(),
            "conformance: follow after {after} of a finished stream: {done:?}"
        );
    }
    // Replay is unchanged by finishing.
    let got = store
        .replay_after(session, &first)
        .await
        .unwrap_or_else(|e| panic!("conformance: replay after {first}: {e}"));
    assert_eq!(
        ids(&got),
        [second],
        "conformance: replay of a finished stream"
    );
    call(
        "finish_stream of an unknown stream",
        store.finish_stream(session, StreamId(base + 99)).await,
    );
    let unknown = store
        .follow(session, &EventId::new(StreamId(base + 99), second.seq))
        .await;
    assert!(
        matches!(unknown, Err(ReplayError::Unknown)),
        "conformance: finishing an unknown stream made it known: {unknown:?}"
    );
    remove(store, session).await;
}

/// [`EventStore::standalone`] gives what [`EventStore::set_standalone`] recorded last, for
/// that session alone, `None` once cleared and once the session is removed.
pub async fn standalone_set_get_clear(store: &dyn EventStore, session: &str) {
    let base = store.stream_base();
    let other = format!("{session}-other");
    assert_eq!(
        standalone(store, session).await,
        None,
        "conformance: standalone of a new session"
    );
    for stream in [StreamId(base + 1), StreamId(base + 2)] {
        call(
            "set_standalone",
            store.set_standalone(session, Some(stream)).await,
        );
        assert_eq!(
            standalone(store, session).await,
            Some(stream),
            "conformance: standalone after set_standalone({stream})"
        );
        assert_eq!(
            standalone(store, &other).await,
            None,
            "conformance: another session's standalone stream"
        );
    }
    call(
        "set_standalone(None)",
        store.set_standalone(session, None).await,
    );
    assert_eq!(
        standalone(store, session).await,
        None,
        "conformance: standalone after clearing it"
    );
    call(
        "set_standalone",
        store
            .set_standalone(session, Some(StreamId(base + 3)))
            .await,
    );
    remove(store, session).await;
    assert_eq!(
        standalone(store, session).await,
        None,
        "conformance: standalone of a removed session"
    );
}

/// [`EventStore::remove_session`] frees everything the session held: the store's sizes are
/// what they were before the session, and its ids, streams and standalone stream are unknown.
/// Nothing else may use the store while this runs.
pub async fn remove_session_frees_everything(store: &dyn EventStore, session: &str) {
    let before = sizes(store).await;
    let streams = open(store, session, 3).await;
    let mut ids = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        ids.push(append(store, session, *stream, payload(i)).await);
        ids.push(append(store, session, *stream, Bytes::new()).await);
    }
    call(
        "finish_stream",
        store.finish_stream(session, streams[0]).await,
    );
    call(
        "set_standalone",
        store.set_standalone(session, Some(streams[2])).await,
    );
    assert_ne!(
        sizes(store).await,
        before,
        "conformance: sizes do not show a session"
    );
    remove(store, session).await;
    assert_eq!(
        sizes(store).await,
        before,
        "conformance: the store's sizes after remove_session"
    );
    for id in &ids {
        let replay = store.replay_after(session, id).await;
        assert!(
            matches!(replay, Err(ReplayError::Unknown)),
            "conformance: replay after {id} of a removed session: {replay:?}"
        );
        let follow = store.follow(session, id).await;
        assert!(
            matches!(follow, Err(ReplayError::Unknown)),
            "conformance: follow after {id} of a removed session: {follow:?}"
        );
    }
    assert_eq!(
        standalone(store, session).await,
        None,
        "conformance: standalone of a removed session"
    );
    // Removing what is not there is harmless.
    remove(store, session).await;
    assert_eq!(
        sizes(store).await,
        before,
        "conformance: a second remove_session"
    );
}

/// Opens `n` streams of `session`, numbered from the store's base, with no request pending.
async fn open(store: &dyn EventStore, session: &str, n: u64) -> Vec<StreamId> {
    let base = store.stream_base();
    let mut streams = Vec::new();
    for k in 1..=n {
        let stream = StreamId(base + k);
        call("open_stream", store.open_stream(session, stream, &[]).await);
        streams.push(stream);
    }
    streams
}

async fn append(store: &dyn EventStore, session: &str, stream: StreamId, data: Bytes) -> EventId {
    store
        .append(session, stream, data)
        .await
        .unwrap_or_else(|e| panic!("conformance: append on {stream}: {e}"))
}

async fn follow(store: &dyn EventStore, session: &str, after: &EventId) -> Follow {
    store
        .follow(session, after)
        .await
        .unwrap_or_else(|e| panic!("conformance: follow after {after}: {e}"))
}

async fn standalone(store: &dyn EventStore, session: &str) -> Option<StreamId> {
    store
        .standalone(session)
        .await
        .unwrap_or_else(|e| panic!("conformance: standalone: {e}"))
}

async fn remove(store: &dyn EventStore, session: &str) {
    call("remove_session", store.remove_session(session).await);
}

async fn sizes(store: &dyn EventStore) -> StoreSizes {
    store
        .sizes()
        .await
        .unwrap_or_else(|e| panic!("conformance: sizes: {e}"))
}

fn call<T>(what: &str, result: Result<T, super::EventStoreError>) -> T {
    result.unwrap_or_else(|e| panic!("conformance: {what}: {e}"))
}

fn ids(events: &[(EventId, Bytes)]) -> Vec<EventId> {
    events.iter().map(|(id, _)| *id).collect()
}

/// A JSON-RPC-like payload for event `i`.
fn payload(i: usize) -> Bytes {
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","method":"conformance/event","params":{{"n":{i}}}}}"#
    ))
}
