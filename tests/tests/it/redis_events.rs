//! `modelctx-redis`'s event store on a real `redis-server` (the fleet harness's, with AOF): the
//! `EventStore` contract (`conformance`), a stream written by one instance and followed from
//! another (stored events, then live ones, each once), a stream whose instance died (its
//! pending requests failed, once, whoever follows), and calls while Redis is dead.
//!
//! Without `redis-server`, each test says why and passes, unless `MODELCTX_REQUIRE_FLEET` is set
//! (`cargo xtask ci` sets it): then it fails.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use modelctx_http::event_store::conformance::{self, Limits};
use modelctx_http::event_store::{EventId, EventStore, Follow, ReplayError, StreamId};
use modelctx_redis::{Fleet, FleetConfig, RedisEventStore};
use modelctx_tests::fleet::Redis;
use modelctx_tests::http::within;
use modelctx_types::RequestId;
use serde_json::Value;

async fn connect(redis: &Redis, config: FleetConfig) -> Fleet {
    within("connect", Fleet::connect(&redis.url(), config))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

fn event(n: usize) -> Bytes {
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"n":{n}}}}}"#
    ))
}

async fn append(store: &RedisEventStore, session: &str, stream: StreamId, n: usize) -> EventId {
    within("append", store.append(session, stream, event(n)))
        .await
        .unwrap_or_else(|e| panic!("append: {e}"))
}

/// The next live event, within 5 s; `None` when the channel closed.
async fn next(follow: &mut Follow) -> Option<(EventId, Bytes)> {
    let rest = follow.rest.as_mut().expect("a live channel");
    tokio::time::timeout(Duration::from_secs(5), rest.recv())
        .await
        .expect("a live event or the end within 5 s")
}

/// The store meets the `EventStore` contract: ids, exact replays, unknown ids, trimming
/// (`MAXLEN`), expiry (`max_age`, in real time), `follow`, the standalone stream, and
/// `remove_session` leaving the store's sizes as they were. Another instance's store of the
/// same fleet numbers its streams from another base.
#[tokio::test]
async fn the_redis_event_store_meets_the_conformance_checks() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fleet = connect(&redis, FleetConfig::new()).await;
    let store = fleet
        .event_store()
        .max_events(16)
        .max_age(Duration::from_millis(800));
    assert_eq!(store.stream_base(), u64::from(fleet.instance()) << 32);
    let limits = Limits::new(16, Duration::from_millis(800));
    within(
        "conformance",
        conformance::all(&store, "redis", limits, tokio::time::sleep),
    )
    .await;
    assert_eq!(
        redis.dbsize().await,
        2,
        "only the instance counter and this instance's lease are left"
    );

    let other = connect(&redis, FleetConfig::new()).await;
    assert_ne!(other.event_store().stream_base(), store.stream_base());
    other.shutdown().await.unwrap();
    fleet.shutdown().await.unwrap();
}

/// The keys are the documented ones: a stream bounded by `MAXLEN` with entry ids `SEQ-0`,
/// expiring after `max_age`; the table and the counter expiring after the idle time.
#[tokio::test]
async fn the_keys_are_bounded_and_expire() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fleet = connect(
        &redis,
        FleetConfig::new().session_idle(Duration::from_secs(600)),
    )
    .await;
    let store = fleet
        .event_store()
        .max_events(4)
        .max_age(Duration::from_secs(60));
    let s = StreamId(store.stream_base() + 1);
    within("open", store.open_stream("k", s, &[RequestId::from(3)]))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(append(&store, "k", s, n).await);
    }
    let key = format!("mcx:{{s:k}}:ev:{}", s.get());
    assert_eq!(redis.command(&["XLEN", &key]).await.integer(), 4, "MAXLEN");
    let ttl = redis.command(&["PTTL", &key]).await.integer();
    assert!(ttl > 55_000 && ttl <= 60_000, "{ttl}");
    for key in ["mcx:{s:k}:meta", "mcx:{s:k}:seq"] {
        let ttl = redis.command(&["PTTL", key]).await.integer();
        assert!(ttl > 590_000 && ttl <= 600_000, "{key}: {ttl}");
    }
    let owner = redis
        .command(&["HGET", "mcx:{s:k}:meta", &format!("o:{}", s.get())])
        .await
        .text();
    assert_eq!(owner, Some(fleet.instance().to_string()));
    assert!(matches!(
        store.replay_after("k", &ids[0]).await,
        Err(ReplayError::Gone)
    ));
    let got = store.replay_after("k", &ids[1]).await.unwrap();
    assert_eq!(got.len(), 4, "after the last trimmed one, every kept event");
    let sizes = store.sizes().await.unwrap();
    assert_eq!((sizes.sessions, sizes.streams, sizes.events), (1, 1, 4));
    assert_eq!(
        sizes.bytes,
        (2..6).map(|n| event(n).len()).sum::<usize>(),
        "the bytes of the kept events"
    );
    store.remove_session("k").await.unwrap();
    assert_eq!(redis.dbsize().await, 2);
    fleet.shutdown().await.unwrap();
}

/// A stream written on instance A and followed from instance B: B gets the stored events after
/// the client's id, then each later one live, exactly once and in order, with events of the
/// session's other streams left out; the channel closes once A finishes the stream. A follow
/// of a finished stream is done with no channel.
#[tokio::test]
async fn a_stream_written_on_one_instance_is_followed_live_from_another_exactly_once() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let a = connect(&redis, FleetConfig::new()).await;
    let b = connect(&redis, FleetConfig::new()).await;
    let (on_a, on_b) = (a.event_store(), b.event_store());
    let s = StreamId(on_a.stream_base() + 1);
    let other = StreamId(on_a.stream_base() + 2);
    on_a.open_stream("f", s, &[RequestId::from(1)])
        .await
        .unwrap();
    on_a.open_stream("f", other, &[]).await.unwrap();
    let first = append(&on_a, "f", s, 0).await;
    let mut sent = vec![first];
    for n in 1..4 {
        sent.push(append(&on_a, "f", s, n).await);
    }

    let mut follow = within("follow", on_b.follow("f", &first)).await.unwrap();
    assert!(!follow.done);
    let mut got: Vec<EventId> = follow.events.iter().map(|(id, _)| *id).collect();
    assert_eq!(got, sent[1..]);
    // Live: interleaved with another stream's events, which are not this stream's.
    let writer = {
        let on_a = on_a.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for n in 4..40 {
                ids.push(append(&on_a, "f", s, n).await);
                append(&on_a, "f", other, 1000 + n).await;
            }
            on_a.finish_stream("f", s).await.unwrap();
            ids
        })
    };
    while let Some((id, data)) = next(&mut follow).await {
        assert_eq!(id.stream, s);
        let n: Value = serde_json::from_slice(&data).unwrap();
        assert!(n["params"]["n"].as_u64().unwrap() < 1000, "{n}");
        got.push(id);
    }
    let live = writer.await.unwrap();
    sent.extend(live);
    assert_eq!(got, sent[1..], "every event once, in order");
    let unique: HashSet<_> = got.iter().collect();
    assert_eq!(unique.len(), got.len());

    let done = on_b.follow("f", &first).await.unwrap();
    assert!(done.done && done.rest.is_none());
    assert_eq!(done.events.len(), sent.len() - 1);
    // The client's last id of the finished stream: nothing more, done.
    let last = on_b.follow("f", sent.last().unwrap()).await.unwrap();
    assert!(last.events.is_empty() && last.done);
    on_a.remove_session("f").await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The instance writing a stream dies (its lease is gone): each of two followers gets, within
/// a few seconds, one error response for each request still pending on the stream (appended
/// once, by whichever follower got there first), and then its channel closes. A stream whose
/// owner lives is not touched.
#[tokio::test]
async fn a_stream_whose_instance_died_ends_with_an_error_for_each_pending_request() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let a = connect(&redis, FleetConfig::new()).await;
    let b = connect(&redis, FleetConfig::new()).await;
    let c = connect(&redis, FleetConfig::new()).await;
    let on_a = a.event_store();
    let s = StreamId(on_a.stream_base() + 7);
    let pending = [RequestId::from(5), RequestId::from("call-6")];
    on_a.open_stream("o", s, &pending).await.unwrap();
    let first = append(&on_a, "o", s, 0).await;
    append(&on_a, "o", s, 1).await;

    let mut followers = Vec::new();
    for fleet in [&b, &c] {
        followers.push(fleet.event_store().follow("o", &first).await.unwrap());
    }
    // A lives: nothing happens for two polls.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    for follow in &mut followers {
        assert_eq!(follow.events.len(), 1);
        assert!(follow.rest.as_mut().unwrap().try_recv().is_err());
    }

    // A dies: no shutdown, its lease deleted (as when it runs out).
    let lease = format!("mcx:inst:{}", a.instance());
    drop(on_a);
    drop(a);
    redis.command(&["DEL", &lease]).await;
    let died = Instant::now();
    for follow in &mut followers {
        let mut errors = Vec::new();
        while let Some((_, data)) = next(follow).await {
            let message: Value = serde_json::from_slice(&data).unwrap();
            assert_eq!(message["error"]["code"], -32603, "{message}");
            errors.push(message["id"].clone());
        }
        assert_eq!(errors, [serde_json::json!(5), serde_json::json!("call-6")]);
    }
    assert!(
        died.elapsed() < Duration::from_secs(5),
        "{:?}",
        died.elapsed()
    );
    let stored = b.event_store().replay_after("o", &first).await.unwrap();
    assert_eq!(stored.len(), 3, "the errors were appended once: {stored:?}");
    let done = c.event_store().follow("o", &first).await.unwrap();
    assert!(done.done);
    b.event_store().remove_session("o").await.unwrap();
    b.shutdown().await.unwrap();
    c.shutdown().await.unwrap();
}

/// Redis killed: each call fails as unavailable within the operation timeout; restarted (AOF),
/// the stored events replay again, and appends go on after them.
#[tokio::test]
async fn a_lost_redis_fails_calls_quickly_and_they_work_again_when_it_is_back() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    let op_timeout = Duration::from_millis(800);
    let fleet = connect(&redis, FleetConfig::new().op_timeout(op_timeout)).await;
    let store = fleet.event_store();
    let s = StreamId(store.stream_base() + 1);
    store.open_stream("r", s, &[]).await.unwrap();
    let first = append(&store, "r", s, 0).await;
    let second = append(&store, "r", s, 1).await;

    redis.kill().await;
    let started = Instant::now();
    let error = within("append with redis dead", store.append("r", s, event(2)))
        .await
        .expect_err("redis is dead");
    assert!(error.is_unavailable(), "{error}");
    let replay = within("replay with redis dead", store.replay_after("r", &first)).await;
    assert!(
        matches!(replay, Err(ReplayError::Unavailable(_))),
        "{replay:?}"
    );
    let follow = within("follow with redis dead", store.follow("r", &first)).await;
    assert!(
        matches!(follow, Err(ReplayError::Unavailable(_))),
        "{follow:?}"
    );
    assert!(
        started.elapsed() <= 3 * op_timeout + Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    redis.restart().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let replayed = loop {
        match store.replay_after("r", &first).await {
            Ok(events) => break events,
            Err(error) => assert!(Instant::now() < deadline, "5 s after the restart: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        replayed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [second]
    );
    let third = append(&store, "r", s, 3).await;
    assert!(third.seq > second.seq);
    store.remove_session("r").await.unwrap();
    fleet.shutdown().await.unwrap();
}

/// Pub/sub is only a fast path: a message repeating an event already given is not given
/// again, and one that does not follow the last event given (as after a lost message) makes
/// the follower read the stream instead of forwarding it, so nothing is given out of order or
/// twice; the real events still arrive, once each. (A message that does follow the last event
/// given is forwarded as it is: only the store's scripts publish on a session's channel.)
#[tokio::test]
async fn a_follower_trusts_the_stream_not_the_channel() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let a = connect(&redis, FleetConfig::new()).await;
    let b = connect(&redis, FleetConfig::new()).await;
    let on_a = a.event_store();
    let s = StreamId(on_a.stream_base() + 1);
    on_a.open_stream("d", s, &[]).await.unwrap();
    let first = append(&on_a, "d", s, 0).await;
    let second = append(&on_a, "d", s, 1).await;
    let mut follow = b.event_store().follow("d", &first).await.unwrap();
    assert_eq!(follow.events.len(), 1);
    // Give the follower's subscription a moment to be in place.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let channel = "mcx:{s:d}:ch";
    let forged = [
        format!("{} {} {}\nrepeated", s.get(), first.seq, second.seq),
        format!("{} 9000 9001\nafter a gap", s.get()),
    ];
    for message in &forged {
        redis.command(&["PUBLISH", channel, message]).await;
    }
    let third = append(&on_a, "d", s, 2).await;
    let (id, data) = next(&mut follow).await.expect("the third event");
    assert_eq!(id, third);
    assert_eq!(data, event(2));
    on_a.finish_stream("d", s).await.unwrap();
    assert!(next(&mut follow).await.is_none(), "closed once finished");
    on_a.remove_session("d").await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
