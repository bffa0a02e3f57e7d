//! `modelctx-redis`'s task store on a real `redis-server` (the fleet harness's, with AOF): the
//! `TaskStore` contract (`modelctx_server::tasks::conformance`) with Redis's memory back to its
//! start after; the keys (one hash tag, a task's expiry from its creation); tasks shared by two
//! instances, the bound shared with them, updates made at once by both never lost; the tasks of
//! a gone instance settled `failed` (lease states set by hand); and calls while Redis is dead.
//!
//! Without `redis-server`, each test says why and passes, unless `MODELCTX_REQUIRE_FLEET` is set
//! (`cargo xtask ci` sets it): then it fails.

use std::error::Error as _;
use std::time::{Duration, Instant, SystemTime};

use modelctx_redis::{Fleet, FleetConfig, RedisTaskStore};
use modelctx_server::tasks::conformance::{self, Limits};
use modelctx_server::tasks::{
    ORPHANED, TaskRecord, TaskStatus, TaskStore, TaskStoreError, TaskStoreErrorKind, TaskUpdate,
};
use modelctx_tests::fleet::{Redis, RespValue};
use modelctx_tests::http::within;
use serde_json::json;

async fn connect(redis: &Redis, config: FleetConfig) -> Fleet {
    within("connect", Fleet::connect(&redis.url(), config))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

fn record(id: &str, principal: Option<&str>) -> TaskRecord {
    TaskRecord::new(
        id,
        principal.map(str::to_owned),
        "tools/call",
        "2026-07-28",
        SystemTime::now(),
    )
}

async fn pttl(redis: &Redis, key: &str) -> i64 {
    redis.command(&["PTTL", key]).await.integer()
}

/// Every key under `pattern`.
async fn keys(redis: &Redis, pattern: &str) -> Vec<String> {
    match redis.command(&["KEYS", pattern]).await {
        RespValue::Array(items) => {
            let mut keys: Vec<String> = items.iter().filter_map(RespValue::text).collect();
            keys.sort();
            keys
        }
        other => panic!("KEYS {pattern}: {other:?}"),
    }
}

/// The crate's error behind a task store error.
fn cause(error: &TaskStoreError) -> &modelctx_redis::Error {
    error
        .source()
        .and_then(|e| e.downcast_ref::<modelctx_redis::Error>())
        .unwrap_or_else(|| panic!("not a modelctx-redis error: {error:?}"))
}

/// The store meets the `TaskStore` contract (bounds checked with creates at once, expiry in
/// real time); after it, Redis holds only the fleet's own keys, and its memory is back to what it
/// was before a second run (the first one loads the scripts).
#[tokio::test]
async fn the_redis_task_store_meets_the_conformance_checks_and_leaves_nothing() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fleet = connect(&redis, FleetConfig::new()).await;
    let store = fleet.task_store().max_tasks(12).max_per_principal(4);
    let limits = Limits::new(12, 4, Duration::from_millis(600));
    let run = || {
        within(
            "conformance",
            conformance::all(&store, "redis", limits, SystemTime::now, tokio::time::sleep),
        )
    };
    run().await;
    assert_eq!(
        redis.dbsize().await,
        2,
        "only the instance counter and this instance's lease are left: {:?}",
        keys(&redis, "*").await
    );
    let before = redis.used_memory().await;
    run().await;
    assert_eq!(redis.dbsize().await, 2, "{:?}", keys(&redis, "*").await);
    let after = redis.used_memory().await;
    assert!(
        after <= before + 16 * 1024,
        "redis used {before} bytes before the run and {after} after"
    );
    fleet.shutdown().await.unwrap();
}

/// The keys are the documented ones, all under the hash tag `{tasks}`: the record (version and
/// JSON) expiring its ttl after its creation (none without a ttl), an update keeping that
/// expiry, the indexes; removing the tasks removes every key.
#[tokio::test]
async fn the_keys_share_one_hash_tag_and_a_task_expires_from_its_creation() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fleet = connect(&redis, FleetConfig::new()).await;
    let store = fleet.task_store();
    let timed = record("t1", Some("alice")).ttl_ms(Some(60_000));
    store.create(&timed).await.unwrap();
    store.create(&record("t2", None)).await.unwrap();
    assert_eq!(
        keys(&redis, "mcx:{tasks}:*").await,
        [
            "mcx:{tasks}:exp",
            "mcx:{tasks}:own",
            "mcx:{tasks}:p:-",
            "mcx:{tasks}:p:=alice",
            "mcx:{tasks}:t:t1",
            "mcx:{tasks}:t:t2",
        ]
    );
    let json = redis
        .command(&["HGET", "mcx:{tasks}:t:t1", "r"])
        .await
        .text()
        .expect("the record");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["taskId"], "t1");
    assert_eq!(value["principal"], "alice");
    let ttl = pttl(&redis, "mcx:{tasks}:t:t1").await;
    assert!(ttl > 55_000 && ttl <= 60_000, "{ttl}");
    assert_eq!(pttl(&redis, "mcx:{tasks}:t:t2").await, -1, "no ttl");
    let exp = redis
        .command(&["ZSCORE", "mcx:{tasks}:exp", "t1"])
        .await
        .text()
        .expect("t1 expires");
    assert_eq!(exp, timed.expires_ms().unwrap().to_string());

    // An update keeps the expiry (it runs from the creation) and moves the version on.
    redis
        .command(&["PEXPIRE", "mcx:{tasks}:t:t1", "30000"])
        .await;
    let done = store
        .update("t1", Some("alice"), &TaskUpdate::new().message("half way"))
        .await
        .unwrap()
        .expect("t1");
    assert!(done.applied);
    let ttl = pttl(&redis, "mcx:{tasks}:t:t1").await;
    assert!(
        ttl > 25_000 && ttl <= 30_000,
        "the update moved the expiry: {ttl}"
    );
    assert_eq!(
        redis
            .command(&["HGET", "mcx:{tasks}:t:t1", "v"])
            .await
            .text()
            .as_deref(),
        Some("2")
    );

    // Gone from Redis by itself once expired, with no call of the store; the next count
    // forgets its index entries.
    let brief = record("t3", Some("alice")).ttl_ms(Some(200));
    store.create(&brief).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while redis
        .command(&["EXISTS", "mcx:{tasks}:t:t3"])
        .await
        .integer()
        == 1
    {
        assert!(
            Instant::now() < deadline,
            "t3 still in redis 5 s after its ttl"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(store.count().await.unwrap(), 2);
    assert_eq!(
        redis
            .command(&["HEXISTS", "mcx:{tasks}:own", "t3"])
            .await
            .integer(),
        0
    );

    store.remove("t1").await.unwrap();
    store.remove("t2").await.unwrap();
    assert!(keys(&redis, "mcx:{tasks}:*").await.is_empty());
    assert_eq!(store.count().await.unwrap(), 0);
    fleet.shutdown().await.unwrap();
}

/// Two instances of a fleet share the tasks: one created through A is read, fed and cancelled
/// through B, and A sees what B did; the bound is the fleet's (what A holds counts for B);
/// another fleet prefix is another store.
#[tokio::test]
async fn two_instances_share_the_tasks_and_their_bound() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let a = connect(&redis, FleetConfig::new()).await;
    let b = connect(&redis, FleetConfig::new()).await;
    let on_a = a.task_store().max_per_principal(3);
    let on_b = b.task_store().max_per_principal(3);
    let created = record("shared", Some("alice")).ttl_ms(Some(60_000));
    on_a.create(&created).await.unwrap();
    assert_eq!(
        on_b.get("shared", Some("alice")).await.unwrap(),
        Some(created)
    );
    assert_eq!(on_b.get("shared", Some("bob")).await.unwrap(), None);
    let asked = TaskUpdate::new().ask("q", json!({"method": "elicitation/create"}));
    let r = on_a
        .update("shared", Some("alice"), &asked)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.record.status, TaskStatus::InputRequired);
    let r = on_b
        .update("shared", Some("alice"), &TaskUpdate::new().answer(["q"]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.record.status, r.answered),
        (TaskStatus::Working, vec!["q".to_owned()])
    );
    on_b.update("shared", Some("alice"), &TaskUpdate::cancel())
        .await
        .unwrap();
    let seen = on_a.get("shared", Some("alice")).await.unwrap().unwrap();
    assert_eq!(seen.status, TaskStatus::Cancelled);
    let late = on_a
        .update(
            "shared",
            Some("alice"),
            &TaskUpdate::complete(Default::default()),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(!late.applied, "a task cancelled through B is final on A");

    on_a.create(&record("a2", Some("alice"))).await.unwrap();
    on_b.create(&record("b1", Some("alice"))).await.unwrap();
    let refused = on_b.create(&record("b2", Some("alice"))).await.unwrap_err();
    assert_eq!(refused.kind(), TaskStoreErrorKind::Full, "{refused}");
    assert!(refused.to_string().contains("per principal"), "{refused}");
    let listed: Vec<String> = on_a
        .list(Some("alice"), None, 10)
        .await
        .unwrap()
        .tasks
        .into_iter()
        .map(|r| r.task_id)
        .collect();
    assert_eq!(listed, ["shared", "a2", "b1"]);

    let other = connect(&redis, FleetConfig::new().prefix("app")).await;
    assert_eq!(
        other
            .task_store()
            .get("shared", Some("alice"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(other.task_store().count().await.unwrap(), 0);

    for id in ["shared", "a2", "b1"] {
        on_b.remove(id).await.unwrap();
    }
    assert_eq!(on_a.count().await.unwrap(), 0);
    other.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Updates of one task made at once through two instances are all applied, none lost: each
/// adds a question of its own, and the task waits on every one after.
#[tokio::test]
async fn updates_at_once_through_two_instances_are_never_lost() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let a = connect(&redis, FleetConfig::new()).await;
    let b = connect(&redis, FleetConfig::new()).await;
    let stores: [RedisTaskStore; 2] = [a.task_store(), b.task_store()];
    stores[0].create(&record("busy", None)).await.unwrap();
    let mut runs = Vec::new();
    for (i, store) in stores.iter().enumerate() {
        for k in 0..20 {
            let store = store.clone();
            runs.push(tokio::spawn(async move {
                let ask = TaskUpdate::new().ask(format!("q{i}-{k}"), json!({"n": k}));
                store.update("busy", None, &ask).await
            }));
        }
    }
    for run in runs {
        let outcome = run.await.unwrap().expect("an update").expect("the task");
        assert!(outcome.applied);
    }
    let task = stores[1].get("busy", None).await.unwrap().unwrap();
    assert_eq!(
        task.input_requests.len(),
        40,
        "{:?}",
        task.input_requests.keys()
    );
    assert_eq!(task.status, TaskStatus::InputRequired);
    let version = redis
        .command(&["HGET", "mcx:{tasks}:t:busy", "v"])
        .await
        .text();
    assert_eq!(version.as_deref(), Some("41"), "one version per update");
    stores[0].remove("busy").await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The lease states of the instance a task names, set by hand in Redis: a task not finished
/// (`working` or `input_required`) of an instance whose lease is gone, or held by another
/// process, is settled `failed` with the words of the legacy requests by whichever instance
/// reads it (`get`, `list`, `update`), exactly once when many read it at the same time (one
/// version more, whoever wins); a task of an instance whose lease is its own, a finished task
/// and a task naming no instance are left as they are.
#[tokio::test]
async fn a_task_of_a_gone_instance_is_settled_failed_once_by_whoever_reads_it() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let a = connect(&redis, FleetConfig::new()).await;
    let b = connect(&redis, FleetConfig::new()).await;
    let (on_a, on_b) = (a.task_store(), b.task_store());
    assert_eq!(
        on_a.instance(),
        Some(format!("{}:{}", a.instance(), a.holder()))
    );
    // 4000: no lease; 4001: its own lease (alive); 4002: its number taken by another process.
    redis
        .command(&["SET", "mcx:inst:4001", "ghost:2", "PX", "60000"])
        .await;
    redis
        .command(&["SET", "mcx:inst:4002", "someone-else:9", "PX", "60000"])
        .await;
    let of = |id: &str, instance: &str| {
        record(id, Some("alice"))
            .ttl_ms(Some(60_000))
            .instance(Some(instance.to_owned()))
    };
    let mut waiting = of("waiting", "4000:ghost:1");
    waiting.status = TaskStatus::InputRequired;
    waiting.input_requests.insert(
        "q".into(),
        json!({"method": "elicitation/create", "params": {}}),
    );
    let tasks = [
        waiting,
        of("dead", "4000:ghost:1"),
        of("alive", "4001:ghost:2"),
        of("reused", "4002:ghost:3"),
        of("mine", &on_a.instance().unwrap()),
        of("listed", "4000:ghost:1"),
        of("cancelled", "4000:ghost:1"),
        record("unnamed", Some("alice")).ttl_ms(Some(60_000)),
    ];
    for task in &tasks {
        on_a.create(task).await.unwrap();
    }
    let mut done = of("finished", "4000:ghost:1");
    done.apply(&TaskUpdate::complete(Default::default()), 1);
    on_a.create(&done).await.unwrap();

    // Twenty reads at once through both instances: all see it failed, one settled it.
    let mut reads = Vec::new();
    for i in 0..20 {
        let store = if i % 2 == 0 {
            on_a.clone()
        } else {
            on_b.clone()
        };
        reads.push(tokio::spawn(async move {
            store.get("dead", Some("alice")).await
        }));
    }
    for read in reads {
        let seen = read.await.unwrap().unwrap().expect("the task");
        assert_eq!(seen.status, TaskStatus::Failed, "{seen:?}");
        assert_eq!(seen.status_message.as_deref(), Some(ORPHANED));
        assert_eq!(
            seen.error.map(serde_json::Value::Object),
            Some(json!({"code": -32603, "message": ORPHANED}))
        );
    }
    let version = |id: &'static str| {
        let redis = &redis;
        async move {
            redis
                .command(&["HGET", &format!("mcx:{{tasks}}:t:{id}"), "v"])
                .await
                .text()
        }
    };
    assert_eq!(version("dead").await.as_deref(), Some("2"), "settled once");

    // Input-required too, and its questions are gone with it.
    let waiting = on_b.get("waiting", Some("alice")).await.unwrap().unwrap();
    assert_eq!(waiting.status, TaskStatus::Failed);
    assert!(waiting.input_requests.is_empty());
    // Another principal sees nothing, and settles nothing.
    assert_eq!(on_b.get("reused", Some("bob")).await.unwrap(), None);
    assert_eq!(version("reused").await.as_deref(), Some("1"));
    let reused = on_b.get("reused", Some("alice")).await.unwrap().unwrap();
    assert_eq!(
        reused.status,
        TaskStatus::Failed,
        "the number was taken again"
    );
    for (id, status) in [
        ("alive", TaskStatus::Working),
        ("mine", TaskStatus::Working),
        ("unnamed", TaskStatus::Working),
        ("finished", TaskStatus::Completed),
    ] {
        let seen = on_b.get(id, Some("alice")).await.unwrap().unwrap();
        assert_eq!(seen.status, status, "{id}");
        assert_eq!(version(id).await.as_deref(), Some("1"), "{id} not written");
    }

    // A cancel of an orphaned task: it failed, the cancel is not applied.
    let cancel = on_b
        .update("cancelled", Some("alice"), &TaskUpdate::cancel())
        .await
        .unwrap()
        .unwrap();
    assert!(!cancel.applied);
    assert_eq!(cancel.record.status, TaskStatus::Failed);
    // The owner's own updates are not checked (it is alive as it writes).
    let asked = on_a
        .update(
            "mine",
            Some("alice"),
            &TaskUpdate::new().ask("k", json!({"method": "elicitation/create"})),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(asked.applied);

    // A page settles the orphans it shows (read once more and compared-and-set), no others.
    let page = on_b.list(Some("alice"), None, 20).await.unwrap();
    let statuses: Vec<(String, TaskStatus)> = page
        .tasks
        .iter()
        .map(|r| (r.task_id.clone(), r.status))
        .collect();
    assert!(
        statuses.contains(&("listed".to_owned(), TaskStatus::Failed)),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&("alive".to_owned(), TaskStatus::Working)),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&("mine".to_owned(), TaskStatus::InputRequired)),
        "{statuses:?}"
    );
    assert_eq!(version("listed").await.as_deref(), Some("2"));
    assert_eq!(page.tasks.len(), 9);

    // Once its lease runs out, the living one's task fails at the next read.
    redis.command(&["DEL", "mcx:inst:4001"]).await;
    let alive = on_a.get("alive", Some("alice")).await.unwrap().unwrap();
    assert_eq!(alive.status, TaskStatus::Failed);

    for task in tasks.iter().chain([&done]) {
        on_a.remove(&task.task_id).await.unwrap();
    }
    redis
        .command(&["DEL", "mcx:inst:4001", "mcx:inst:4002"])
        .await;
    assert!(keys(&redis, "mcx:{tasks}:*").await.is_empty());
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Redis killed: every call fails within the operation timeout and a margin, as unavailable
/// (the cause kept); restarted (AOF), the task is there again, with no new `Fleet`.
#[tokio::test]
async fn a_lost_redis_fails_task_calls_quickly_and_they_work_again_when_it_is_back() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    let op_timeout = Duration::from_millis(800);
    let margin = Duration::from_millis(700);
    let fleet = connect(&redis, FleetConfig::new().op_timeout(op_timeout)).await;
    let store = fleet.task_store();
    let kept = record("kept", Some("alice"));
    store.create(&kept).await.unwrap();

    redis.kill().await;
    for i in 0..3 {
        let started = Instant::now();
        let error = within("get with redis dead", store.get("kept", Some("alice")))
            .await
            .expect_err("redis is dead");
        assert!(
            started.elapsed() <= op_timeout + margin,
            "get {i}: {:?}",
            started.elapsed()
        );
        assert_eq!(error.kind(), TaskStoreErrorKind::Unavailable, "{error}");
        assert!(cause(&error).is_unavailable(), "{error:?}");
        let started = Instant::now();
        let error = within("create with redis dead", store.create(&record("new", None)))
            .await
            .expect_err("redis is dead");
        assert!(started.elapsed() <= op_timeout + margin);
        assert_eq!(error.kind(), TaskStoreErrorKind::Unavailable, "{error}");
    }

    redis.restart().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.get("kept", Some("alice")).await {
            Ok(found) => {
                assert_eq!(found, Some(kept), "the AOF kept it");
                break;
            }
            Err(error) => assert!(
                Instant::now() < deadline,
                "still failing 5 s after the restart: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    store.remove("kept").await.unwrap();
    fleet.shutdown().await.unwrap();
}
