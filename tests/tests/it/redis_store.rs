//! `modelctx-redis` on a real `redis-server` (the fleet harness's, with AOF): the session store's
//! round trip, idle time and removal; instance numbers and their lease; and calls made while
//! Redis is dead or paused, which fail within the operation timeout and work again once it is
//! back, with no new `Fleet`.
//!
//! Without `redis-server`, each test says why and passes, unless `MODELCTX_REQUIRE_FLEET` is set
//! (`cargo xtask ci` sets it): then it fails.

use std::error::Error as _;
use std::time::{Duration, Instant, SystemTime};

use modelctx_redis::{Fleet, FleetConfig};
use modelctx_server::{SessionState, SessionStore, StoreError};
use modelctx_tests::fleet::{Redis, RespValue};
use modelctx_tests::http::within;

/// A state with something in every part a store must keep.
fn state(principal: &str) -> SessionState {
    let mut state = SessionState::opened(Some(principal.into()), SystemTime::now());
    state.subscriptions.insert("file:///notes.txt".into());
    state.initialized = true;
    state
}

async fn connect(redis: &Redis, config: FleetConfig) -> Fleet {
    within("connect", Fleet::connect(&redis.url(), config))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

async fn exists(redis: &Redis, key: &str) -> bool {
    redis.command(&["EXISTS", key]).await.integer() == 1
}

async fn pttl(redis: &Redis, key: &str) -> i64 {
    redis.command(&["PTTL", key]).await.integer()
}

/// The crate's error behind a store error.
fn cause(error: &StoreError) -> &modelctx_redis::Error {
    error
        .source()
        .and_then(|e| e.downcast_ref::<modelctx_redis::Error>())
        .unwrap_or_else(|| panic!("not a modelctx-redis error: {error:?}"))
}

/// Saved, loaded back equal, and removed with every key of the session: its state, its event
/// counter, its stream table and the event streams the table names, while another session's
/// keys stay. Removing what is not there is not an error.
#[tokio::test]
async fn a_session_state_round_trips_and_remove_unlinks_every_key_of_the_session() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fleet = connect(&redis, FleetConfig::new()).await;
    let store = fleet.session_store();

    assert_eq!(store.load("s1").await.unwrap(), None, "never saved");
    let saved = state("alice");
    store.save("s1", &saved).await.unwrap();
    assert_eq!(store.load("s1").await.unwrap().as_ref(), Some(&saved));
    let text = redis
        .command(&["GET", "mcx:{s:s1}:state"])
        .await
        .text()
        .expect("the state key");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["principal"], "alice", "{json}");
    let ttl = pttl(&redis, "mcx:{s:s1}:state").await;
    assert!(ttl > 29 * 60 * 1000 && ttl <= 30 * 60 * 1000, "{ttl}");

    // A later save replaces it.
    let mut changed = saved.clone();
    changed.subscriptions.insert("file:///other.txt".into());
    store.save("s1", &changed).await.unwrap();
    assert_eq!(store.load("s1").await.unwrap(), Some(changed));

    // What the event store keeps for the session (streams 7 and 9), and another session.
    for command in [
        &["SET", "mcx:{s:s1}:seq", "4"][..],
        &[
            "HSET",
            "mcx:{s:s1}:meta",
            "o:7",
            "3",
            "p:7",
            "[1]",
            "f:9",
            "1",
            "sa",
            "3:9",
        ],
        &["XADD", "mcx:{s:s1}:ev:7", "1-0", "d", "one"],
        &["XADD", "mcx:{s:s1}:ev:9", "2-0", "d", "two"],
        &["XADD", "mcx:{s:s1}:ev:8", "3-0", "d", "not named in meta"],
    ] {
        assert!(
            !matches!(redis.command(command).await, RespValue::Error(_)),
            "{command:?}"
        );
    }
    store.save("s2", &state("bob")).await.unwrap();

    store.remove("s1").await.unwrap();
    for key in [
        "mcx:{s:s1}:state",
        "mcx:{s:s1}:seq",
        "mcx:{s:s1}:meta",
        "mcx:{s:s1}:ev:7",
        "mcx:{s:s1}:ev:9",
    ] {
        assert!(!exists(&redis, key).await, "{key} is left");
    }
    assert!(
        exists(&redis, "mcx:{s:s1}:ev:8").await,
        "only the streams meta names are removed"
    );
    assert_eq!(store.load("s1").await.unwrap(), None);
    assert_eq!(
        store.load("s2").await.unwrap(),
        Some(state_of("bob", &store, "s2").await)
    );
    // Again, and a session that never was: nothing to do.
    store.remove("s1").await.unwrap();
    store.remove("never").await.unwrap();
    fleet.shutdown().await.unwrap();
}

async fn state_of(principal: &str, store: &impl SessionStore, id: &str) -> SessionState {
    let state = store.load(id).await.unwrap().expect("kept");
    assert_eq!(state.principal.as_deref(), Some(principal));
    state
}

/// `load` starts the idle time again (`GETEX PX`); a state nobody loads or saves within it is
/// gone; another prefix is another fleet.
#[tokio::test]
async fn load_refreshes_the_idle_time_and_an_unused_state_expires() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fleet = connect(
        &redis,
        FleetConfig::new().session_idle(Duration::from_secs(60)),
    )
    .await;
    let store = fleet.session_store();
    store.save("s", &state("alice")).await.unwrap();
    let key = "mcx:{s:s}:state";
    assert!(pttl(&redis, key).await > 55_000);
    redis.command(&["PEXPIRE", key, "2000"]).await;
    assert!(pttl(&redis, key).await <= 2000);
    assert!(store.load("s").await.unwrap().is_some());
    assert!(
        pttl(&redis, key).await > 55_000,
        "load refreshed the idle time"
    );

    let short = fleet.session_store().idle(Duration::from_millis(300));
    short.save("brief", &state("bob")).await.unwrap();
    assert!(short.load("brief").await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(short.load("brief").await.unwrap(), None, "expired");
    assert!(!exists(&redis, "mcx:{s:brief}:state").await);

    let other = connect(&redis, FleetConfig::new().prefix("app")).await;
    assert_eq!(other.session_store().load("s").await.unwrap(), None);
    other
        .session_store()
        .save("s", &state("carol"))
        .await
        .unwrap();
    assert!(exists(&redis, "app:{s:s}:state").await);
    assert_eq!(
        store.load("s").await.unwrap().unwrap().principal.as_deref(),
        Some("alice")
    );
    other.shutdown().await.unwrap();
    fleet.shutdown().await.unwrap();
}

/// Two fleets on one Redis get different numbers, each leased as `host:pid`; a number a live
/// instance holds is skipped (the counter moves on until `SET NX` wins). The pub/sub
/// connection is RESP3.
#[tokio::test]
async fn two_fleets_get_different_instance_numbers_and_a_leased_one_is_skipped() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    // The next candidate is 3, which another process holds.
    redis.command(&["SET", "mcx:instances", "2"]).await;
    redis
        .command(&["SET", "mcx:inst:3", "elsewhere:1", "PX", "60000"])
        .await;
    let a = connect(&redis, FleetConfig::new()).await;
    let b = connect(&redis, FleetConfig::new()).await;
    assert_eq!(a.instance(), 4, "3 is leased");
    assert_eq!(b.instance(), 5);
    assert!(a.holder().ends_with(&format!(":{}", std::process::id())));
    for fleet in [&a, &b] {
        let key = format!("mcx:inst:{}", fleet.instance());
        assert_eq!(
            redis.command(&["GET", &key]).await.text().as_deref(),
            Some(fleet.holder())
        );
        let ttl = pttl(&redis, &key).await;
        assert!(ttl > 10_000 && ttl <= 15_000, "{key}: {ttl}");
        assert!(fleet.lease_held());
    }
    assert_eq!(
        redis
            .command(&["GET", "mcx:inst:3"])
            .await
            .text()
            .as_deref(),
        Some("elsewhere:1"),
        "another's lease is left alone"
    );
    let clients = redis
        .command(&["CLIENT", "LIST"])
        .await
        .text()
        .unwrap_or_default();
    assert!(
        clients.lines().filter(|l| l.contains("resp=3")).count() >= 2,
        "each fleet's pub/sub connection is RESP3:\n{clients}"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The lease is refreshed while the instance runs, is back within a refresh after Redis
/// restarts (with its AOF, and with no data at all), and is gone at shutdown.
#[tokio::test]
async fn the_lease_is_kept_across_redis_restarts_and_deleted_at_shutdown() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    let config = FleetConfig::new().lease(Duration::from_secs(3), Duration::from_millis(500));
    let fleet = connect(&redis, config).await;
    let key = format!("mcx:inst:{}", fleet.instance());
    assert!(exists(&redis, &key).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        pttl(&redis, &key).await > 2000,
        "refreshed, not running out"
    );

    redis.kill().await;
    redis.restart().await;
    wait_for_lease(&redis, &key, fleet.holder()).await;

    redis.restart_empty().await;
    assert!(!exists(&redis, &key).await, "no data after this restart");
    wait_for_lease(&redis, &key, fleet.holder()).await;
    assert!(fleet.lease_held());

    within("shutdown", fleet.shutdown()).await.unwrap();
    assert!(!exists(&redis, &key).await, "deleted at shutdown");
}

/// Waits until `key` holds `holder` with a fresh lease, at most 5 s.
async fn wait_for_lease(redis: &Redis, key: &str, holder: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let value = redis.command(&["GET", key]).await.text();
        if value.as_deref() == Some(holder) && pttl(redis, key).await > 1000 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key} is {value:?}, not {holder}, 5 s after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Redis killed: every call fails (unavailable) within the operation timeout and a margin,
/// however many are made; restarted (AOF), the same store loads the state again within a few
/// seconds. Redis paused (connected, not answering): a call still fails in time, and works
/// once the pause ends.
#[tokio::test]
async fn a_lost_redis_fails_calls_quickly_and_they_work_again_when_it_is_back() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    let op_timeout = Duration::from_millis(800);
    let margin = Duration::from_millis(700);
    // A reply timeout longer than the pause below: only the operation timeout can cut a call.
    let config = FleetConfig::new()
        .op_timeout(op_timeout)
        .response_timeout(Duration::from_secs(10));
    let fleet = connect(&redis, config).await;
    let store = fleet.session_store();
    let saved = state("alice");
    store.save("s", &saved).await.unwrap();

    redis.kill().await;
    for i in 0..4 {
        let started = Instant::now();
        let error = within("load with redis dead", store.load("s"))
            .await
            .expect_err("redis is dead");
        let took = started.elapsed();
        assert!(took <= op_timeout + margin, "call {i} took {took:?}");
        assert!(cause(&error).is_unavailable(), "{error:?}");
        let started = Instant::now();
        let error = within("save with redis dead", store.save("s", &saved))
            .await
            .expect_err("redis is dead");
        assert!(started.elapsed() <= op_timeout + margin);
        assert!(cause(&error).is_unavailable(), "{error:?}");
    }

    redis.restart().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.load("s").await {
            Ok(loaded) => {
                assert_eq!(loaded, Some(saved.clone()), "the AOF kept it");
                break;
            }
            Err(error) => assert!(
                Instant::now() < deadline,
                "still failing 5 s after the restart: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    store.remove("s").await.unwrap();

    // Connected but not answering: `CLIENT PAUSE` holds every other client's commands.
    assert_eq!(
        redis.command(&["CLIENT", "PAUSE", "3000", "ALL"]).await,
        RespValue::Simple("OK".into())
    );
    let started = Instant::now();
    let error = within("load with redis paused", store.load("s"))
        .await
        .expect_err("redis is paused");
    assert!(
        started.elapsed() <= op_timeout + margin,
        "{:?}",
        started.elapsed()
    );
    assert!(cause(&error).is_unavailable(), "{error:?}");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Err(error) = store.save("s", &saved).await {
        assert!(
            Instant::now() < deadline,
            "still failing after the pause: {error}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(store.load("s").await.unwrap(), Some(saved));
    fleet.shutdown().await.unwrap();
}

/// `touch` starts the idle time of each named session again (its state, and its event store's
/// table and counter) without reading it, leaves a session with no state alone, and does
/// nothing for no ids.
#[tokio::test]
async fn touch_refreshes_the_idle_time_of_every_key_of_the_sessions_named() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fleet = connect(
        &redis,
        FleetConfig::new().session_idle(Duration::from_secs(60)),
    )
    .await;
    let store = fleet.session_store();
    for id in ["t1", "t2", "t3"] {
        store.save(id, &state("alice")).await.unwrap();
    }
    redis
        .command(&["SET", "mcx:{s:t1}:seq", "3", "PX", "1000"])
        .await;
    redis
        .command(&["HSET", "mcx:{s:t1}:meta", "o:1", "0"])
        .await;
    redis.command(&["PEXPIRE", "mcx:{s:t1}:meta", "1000"]).await;
    for id in ["t1", "t2", "t3"] {
        redis
            .command(&["PEXPIRE", &format!("mcx:{{s:{id}}}:state"), "1000"])
            .await;
    }
    store.touch(&[]).await.unwrap();
    store.touch(&["t1", "t2", "never"]).await.unwrap();
    for key in [
        "mcx:{s:t1}:state",
        "mcx:{s:t1}:meta",
        "mcx:{s:t1}:seq",
        "mcx:{s:t2}:state",
    ] {
        assert!(pttl(&redis, key).await > 55_000, "{key} was touched");
    }
    assert!(pttl(&redis, "mcx:{s:t3}:state").await <= 1000, "not named");
    assert!(!exists(&redis, "mcx:{s:never}:state").await, "not made");
    assert!(store.load("t3").await.unwrap().is_some());
    fleet.shutdown().await.unwrap();
}
