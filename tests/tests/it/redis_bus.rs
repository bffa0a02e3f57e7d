//! `modelctx-redis`'s bus on a real `redis-server` (the fleet harness's, with AOF): two fleets
//! (two instances) exchange broadcasts and messages for one instance; a Redis killed and
//! started again on the same port: publishing fails quickly while it is down, and messages flow
//! again within a few seconds of its return, with no new `Fleet`.
//!
//! Without `redis-server`, each test says why and passes, unless `MODELCTX_REQUIRE_FLEET` is set
//! (`cargo xtask ci` sets it): then it fails.

use std::time::{Duration, Instant};

use modelctx_redis::{Fleet, FleetConfig};
use modelctx_server::bus::{Bus, BusErrorKind, BusMessage};
use modelctx_server::{Change, ListKind};
use modelctx_tests::fleet::{Redis, RespValue};
use modelctx_tests::http::within;
use modelctx_types::consts::NotificationsCancelled;
use modelctx_types::{Message, Notification};
use serde_json::json;
use tokio::sync::mpsc;

async fn connect(redis: &Redis, config: FleetConfig) -> Fleet {
    within("connect", Fleet::connect(&redis.url(), config))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

fn change(from: u16, kind: ListKind) -> BusMessage {
    BusMessage::Change {
        from,
        change: Change::List(kind),
    }
}

fn cancel(from: u16, session: &str) -> BusMessage {
    let note: Message = Notification::new(
        NotificationsCancelled::VALUE,
        json!({"requestId": 7}).as_object().unwrap(),
    )
    .unwrap()
    .into();
    BusMessage::Forward {
        from,
        session: session.into(),
        message: note,
    }
}

/// The next message, within 5 s.
async fn next(rx: &mut mpsc::Receiver<BusMessage>) -> BusMessage {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a bus message within 5 s")
        .expect("the bus is open")
}

/// Nothing more arrives within 300 ms.
async fn quiet(rx: &mut mpsc::Receiver<BusMessage>) {
    if let Ok(message) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        panic!("nothing more was expected: {message:?}");
    }
}

async fn channels(redis: &Redis) -> Vec<String> {
    let RespValue::Array(items) = redis.command(&["PUBSUB", "CHANNELS", "mcx:*"]).await else {
        panic!("PUBSUB CHANNELS is an array");
    };
    let mut names: Vec<String> = items.iter().filter_map(RespValue::text).collect();
    names.sort();
    names
}

/// A broadcast reaches every instance (its sender too: the server drops its own), a message
/// for one instance reaches it alone, a message for an instance nobody runs is no error; one
/// reader per bus; what cannot be read is dropped and counted, and what follows still arrives.
#[tokio::test]
async fn two_fleets_exchange_broadcasts_and_messages_for_one_instance() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let a = connect(&redis, FleetConfig::new()).await;
    let b = connect(&redis, FleetConfig::new()).await;
    let (bus_a, bus_b) = (a.bus(), b.bus());
    assert_eq!(bus_a.instance(), a.instance());
    assert_eq!(bus_b.instance(), b.instance());
    assert!(channels(&redis).await.is_empty(), "nothing read yet");
    let mut rx_a = within("subscribe", bus_a.subscribe()).await.unwrap();
    let mut rx_b = within("subscribe", bus_b.subscribe()).await.unwrap();
    let again = within("subscribe", a.bus().subscribe()).await.unwrap_err();
    assert_eq!(again.kind(), BusErrorKind::Failed, "one reader: {again}");
    let mut expected = vec![
        "mcx:bus".to_owned(),
        format!("mcx:inbox:{}", a.instance()),
        format!("mcx:inbox:{}", b.instance()),
    ];
    expected.sort();
    assert_eq!(channels(&redis).await, expected);

    within(
        "broadcast",
        bus_a.broadcast(change(a.instance(), ListKind::Tools)),
    )
    .await
    .unwrap();
    for rx in [&mut rx_a, &mut rx_b] {
        let got = next(rx).await;
        assert!(
            matches!(got, BusMessage::Change { from, change: Change::List(ListKind::Tools) }
                if from == a.instance()),
            "{got:?}"
        );
    }

    within(
        "to_instance",
        bus_b.to_instance(a.instance(), cancel(b.instance(), "s1")),
    )
    .await
    .unwrap();
    match next(&mut rx_a).await {
        BusMessage::Forward {
            from,
            session,
            message: Message::Notification(n),
        } => {
            assert_eq!(from, b.instance());
            assert_eq!(session, "s1");
            assert_eq!(n.method, NotificationsCancelled::VALUE);
            let params: serde_json::Value =
                serde_json::from_str(n.params.as_ref().expect("params").get()).unwrap();
            assert_eq!(params["requestId"], 7);
        }
        other => panic!("{other:?}"),
    }
    quiet(&mut rx_b).await;
    within(
        "to_instance",
        bus_a.to_instance(4000, cancel(a.instance(), "s1")),
    )
    .await
    .unwrap();

    // Not a bus message of this format: dropped and counted on both; then the next arrives.
    let before = (bus_a.dropped(), bus_b.dropped());
    redis
        .command(&["PUBLISH", "mcx:bus", r#"{"v":2,"from":1,"gossip":{}}"#])
        .await;
    bus_b
        .broadcast(BusMessage::Ended {
            from: b.instance(),
            session: "s2".into(),
        })
        .await
        .unwrap();
    for rx in [&mut rx_a, &mut rx_b] {
        assert!(matches!(next(rx).await, BusMessage::Ended { session, .. } if session == "s2"));
    }
    assert_eq!(
        (bus_a.dropped(), bus_b.dropped()),
        (before.0 + 1, before.1 + 1)
    );
    quiet(&mut rx_a).await;

    // A bus dropped with its fleet stops reading: its channels are unsubscribed.
    drop(rx_b);
    drop(bus_b);
    drop(b);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        channels(&redis).await,
        ["mcx:bus".to_owned(), format!("mcx:inbox:{}", a.instance())]
    );
    a.shutdown().await.unwrap();
}

/// Redis killed: a publish fails as unavailable within the operation timeout; a bus that
/// starts reading meanwhile is given its receiver. Redis started again on the same port: within
/// a few seconds every bus is subscribed again (the one that started reading while Redis was
/// down too), and broadcasts and messages for one instance flow again, with no new `Fleet`.
#[tokio::test]
async fn after_a_redis_restart_messages_flow_again_within_seconds() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    let op_timeout = Duration::from_millis(800);
    let config = || FleetConfig::new().op_timeout(op_timeout);
    let a = connect(&redis, config()).await;
    let b = connect(&redis, config()).await;
    let c = connect(&redis, config()).await;
    let mut rx_a = a.bus().subscribe().await.unwrap();
    let mut rx_b = b.bus().subscribe().await.unwrap();
    a.bus()
        .broadcast(change(a.instance(), ListKind::Prompts))
        .await
        .unwrap();
    next(&mut rx_b).await;
    next(&mut rx_a).await;

    redis.kill().await;
    for _ in 0..3 {
        let started = Instant::now();
        let error = within(
            "broadcast with redis dead",
            a.bus().broadcast(change(a.instance(), ListKind::Tools)),
        )
        .await
        .expect_err("redis is dead");
        assert!(
            started.elapsed() <= op_timeout + Duration::from_millis(700),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(error.kind(), BusErrorKind::Unavailable, "{error}");
        let error = within(
            "to_instance with redis dead",
            b.bus().to_instance(a.instance(), cancel(b.instance(), "s")),
        )
        .await
        .expect_err("redis is dead");
        assert_eq!(error.kind(), BusErrorKind::Unavailable, "{error}");
    }
    let mut rx_c = within("subscribe with redis dead", c.bus().subscribe())
        .await
        .expect("the receiver, subscribed once redis is back");
    // Down for longer than the connections' own retries.
    tokio::time::sleep(Duration::from_secs(3)).await;

    redis.restart().await;
    let restarted = Instant::now();
    // Each round: a broadcast from A and a message from C for B, until both arrive.
    let mut round = 0u32;
    let (mut heard_b, mut heard_c, mut heard_inbox) = (false, false, false);
    while !(heard_b && heard_c && heard_inbox) {
        assert!(
            restarted.elapsed() < Duration::from_secs(8),
            "8 s after the restart: B heard a broadcast: {heard_b}, C: {heard_c}, B its inbox: \
             {heard_inbox}"
        );
        round += 1;
        let _ = a
            .bus()
            .broadcast(BusMessage::Ended {
                from: a.instance(),
                session: format!("round-{round}"),
            })
            .await;
        let _ = c
            .bus()
            .to_instance(
                b.instance(),
                cancel(c.instance(), &format!("round-{round}")),
            )
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        while let Ok(message) = rx_b.try_recv() {
            match message {
                BusMessage::Ended { .. } => heard_b = true,
                BusMessage::Forward { .. } => heard_inbox = true,
                other => panic!("{other:?}"),
            }
        }
        while let Ok(message) = rx_c.try_recv() {
            assert!(matches!(message, BusMessage::Ended { .. }), "{message:?}");
            heard_c = true;
        }
        while rx_a.try_recv().is_ok() {}
    }
    // B published nothing since the restart: its first publish works (the failed reconnect
    // of the outage is not reported again).
    b.bus()
        .broadcast(change(b.instance(), ListKind::Resources))
        .await
        .expect("B's first publish after the restart");
    assert!(
        matches!(next(&mut rx_a).await, BusMessage::Change { from, .. } if from == b.instance())
    );
    let mut expected = vec![
        "mcx:bus".to_owned(),
        format!("mcx:inbox:{}", a.instance()),
        format!("mcx:inbox:{}", b.instance()),
        format!("mcx:inbox:{}", c.instance()),
    ];
    expected.sort();
    assert_eq!(channels(&redis).await, expected);
    for fleet in [a, b, c] {
        fleet.shutdown().await.unwrap();
    }
}
