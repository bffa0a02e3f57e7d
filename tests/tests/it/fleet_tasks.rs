//! Tasks of a fleet whose instance dies: three `mcx serve demo --http --redis` processes sharing
//! one Redis behind nginx round-robin. A task whose handler runs on an instance killed with
//! `SIGKILL` does not stay `working` until its time to live: once the instance's lease runs out
//! (15 s, `FleetConfig`'s default, which `mcx` uses), the first instance that reads the task
//! settles it `failed` ("the instance running this task stopped"), for both eras, and a
//! 2025-11-25 `tasks/result` waiting on another instance is answered with that error.
//!
//! The tasks are started straight on a chosen instance (round-robin alone does not say which
//! instance gets which request); the client's reads go through nginx.
//!
//! Without `redis-server`, `nginx` or a built `mcx`, the test says why and passes, unless
//! `MODELCTX_REQUIRE_FLEET` is set (`cargo xtask ci` sets it): then it fails.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use modelctx_server::tasks::{EXTENSION_ID, ORPHANED};
use modelctx_tests::fleet::{Fleet, REDIS_URL, Redis, RespValue};
use modelctx_tests::http::{
    RawResponse, modern_call, modern_headers, modern_meta, open_session, post, post_headers,
    raw_request,
};
use modelctx_types::{ProtocolVersion, consts};
use serde_json::{Value, json};

/// The key ring every instance is given (`--redis` needs one): id `t1`, bytes 0 to 31.
const SHARED_KEY: &str = "t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

/// The arguments of every instance: the fleet's Redis, the shared key ring.
const FLEET_ARGS: &[&str] = &["--redis", REDIS_URL, "--state-key", SHARED_KEY];

/// How long a dead instance keeps its number: `FleetConfig`'s default lease, which `mcx` uses.
const LEASE: Duration = Duration::from_secs(15);

/// What the test allows beyond the lease for a read to find the task settled (a poll every
/// 250 ms; the lease was refreshed up to 5 s before the kill, so it runs out within the lease).
const BOUND: Duration = Duration::from_secs(8);

/// The time to live the 2025-11-25 task asks: longer than the lease and the bound after its
/// start, short enough for the test to see it expire.
const LEGACY_TTL_MS: u64 = 30_000;

/// The version of the legacy session: the one with 2025-11-25 tasks.
fn version() -> &'static str {
    ProtocolVersion::V2025_11_25.as_str()
}

/// The JSON-RPC response to request `id` in `response`: its JSON body, or the message of that id
/// on its SSE stream (notifications and requests before it skipped); within `wait`.
async fn answer(mut response: RawResponse, id: i64, wait: Duration) -> Value {
    let status = response.status;
    let sse = response
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if status != 200 {
        let body = response.body().await;
        panic!("request {id}: {status} {}", String::from_utf8_lossy(&body));
    }
    let read = async move {
        if !sse {
            return response.json().await;
        }
        loop {
            let Some((_, value)) = response.next_message().await else {
                panic!("the SSE stream ended without the response to {id}");
            };
            if value.get("id") == Some(&json!(id)) && value.get("method").is_none() {
                return value;
            }
        }
    };
    tokio::time::timeout(wait, read)
        .await
        .unwrap_or_else(|_| panic!("no response to request {id} within {wait:?}"))
}

/// A 2025-11-25 request `method` of session `session` to `addr`, and its response.
async fn legacy(addr: SocketAddr, session: &str, id: i64, method: &str, params: Value) -> Value {
    let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let response = post(
        addr,
        &post_headers(Some(session), Some(version())),
        &message,
    )
    .await;
    answer(response, id, Duration::from_secs(20)).await
}

/// The `_meta` of a modern request that declares the tasks extension.
fn tasks_meta() -> Value {
    let mut meta = modern_meta();
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"extensions": {EXTENSION_ID: {}}});
    meta
}

/// A modern request `method` on task `task_id` to `addr`, declaring the tasks extension (its
/// `Mcp-Name` is the task id), and its response.
async fn modern(addr: SocketAddr, id: i64, method: &str, task_id: &str) -> Value {
    let params = json!({"taskId": task_id, "_meta": tasks_meta()});
    let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let response = post(addr, &modern_headers(method, Some(task_id)), &message).await;
    answer(response, id, Duration::from_secs(20)).await
}

/// The task keys in Redis.
async fn task_keys(redis: &Redis) -> Vec<String> {
    let RespValue::Array(keys) = redis.command(&["KEYS", "mcx:{tasks}:*"]).await else {
        panic!("KEYS is an array");
    };
    let mut keys: Vec<String> = keys.iter().filter_map(RespValue::text).collect();
    keys.sort();
    keys
}

/// The error every read reports for a task of the dead instance.
fn orphaned_error() -> Value {
    json!({"code": -32603, "message": ORPHANED})
}

/// A task of each era started on instance 0 (the demo's `countdown`, 40 s long), a 2025-11-25
/// `tasks/result` for it waiting on instance 1; instance 0 killed with `SIGKILL`. Through
/// nginx, the modern `tasks/get` reports the task `failed` within the lease and a bound, with
/// the error and status message saying its instance stopped; the legacy `tasks/get` and
/// `tasks/list` say the same; the waiting `tasks/result` is answered with the error. Settled
/// once (one version more in Redis). Then the legacy task expires at its time to live and its
/// keys are gone: only the modern task's record and indexes are left (its ttl is the demo's,
/// an hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_of_a_killed_instance_are_settled_failed_and_a_waiting_result_answered() {
    let Some(mut fleet) = Fleet::start(3, FLEET_ARGS).await else {
        return;
    };
    let (x, y, nginx) = (
        fleet.instances[0].addr(),
        fleet.instances[1].addr(),
        fleet.nginx.addr(),
    );
    let countdown = json!({"steps": 20, "delay_ms": 2000});

    // The legacy task, on X.
    let session = open_session(nginx, version()).await;
    let started = Instant::now();
    let created = legacy(
        x,
        &session,
        1,
        consts::ToolsCall::VALUE,
        json!({"name": "countdown", "arguments": countdown, "task": {"ttl": LEGACY_TTL_MS}}),
    )
    .await;
    let legacy_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    assert_eq!(created["result"]["task"]["status"], "working", "{created}");

    // The modern task, on X.
    let mut call = modern_call(2, "countdown", countdown.clone());
    call["params"]["_meta"] = tasks_meta();
    let response = post(
        x,
        &modern_headers(consts::ToolsCall::VALUE, Some("countdown")),
        &call,
    )
    .await;
    let created = answer(response, 2, Duration::from_secs(20)).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let modern_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();

    // Both are the instance's: its record names it, and it is working.
    for id in [&legacy_id, &modern_id] {
        let record = fleet
            .redis
            .command(&["HGET", &format!("mcx:{{tasks}}:t:{id}"), "r"])
            .await
            .text()
            .expect("the record");
        let record: Value = serde_json::from_str(&record).unwrap();
        assert_eq!(record["status"], "working", "{record}");
        assert!(
            record["instance"].as_str().is_some_and(|i| !i.is_empty()),
            "the record names its instance: {record}"
        );
    }

    // A tasks/result waiting on Y (a legacy request answered once the task is finished).
    let waiting = {
        let session = session.clone();
        let legacy_id = legacy_id.clone();
        tokio::spawn(async move {
            let message = json!({"jsonrpc": "2.0", "id": 3, "method": consts::TasksResult::VALUE,
                "params": {"taskId": legacy_id}});
            let response = raw_request(
                y,
                "POST",
                "/mcp",
                &post_headers(Some(&session), Some(version())),
                message.to_string().as_bytes(),
            )
            .await;
            answer(response, 3, LEASE + BOUND + Duration::from_secs(10)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "tasks/result waits for the task");

    fleet.kill9(0).await;
    let killed = Instant::now();

    // The modern client polls through nginx until the task is settled.
    let mut id = 10;
    let settled = loop {
        id += 1;
        let got = modern(nginx, id, consts::TasksGet::VALUE, &modern_id).await;
        let result = &got["result"];
        if result["status"] == "failed" {
            break result.clone();
        }
        assert_eq!(result["status"], "working", "{got}");
        assert!(
            killed.elapsed() < LEASE + BOUND,
            "the task of the killed instance is still working {:?} after the kill",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let took = killed.elapsed();
    eprintln!("the modern task was reported failed {took:?} after the kill");
    assert_eq!(settled["statusMessage"], ORPHANED, "{settled}");
    assert_eq!(settled["error"], orphaned_error(), "{settled}");
    assert!(
        took >= Duration::from_secs(5),
        "failed before the lease ran out: {took:?}"
    );

    // The legacy task: settled by whichever instance read it first (the waiting tasks/result or
    // the client's tasks/get), once.
    let answered = tokio::time::timeout(BOUND, waiting)
        .await
        .expect("tasks/result answered")
        .expect("the waiting request");
    assert_eq!(answered["error"], orphaned_error(), "{answered}");
    let got = legacy(
        nginx,
        &session,
        20,
        consts::TasksGet::VALUE,
        json!({"taskId": legacy_id}),
    )
    .await;
    assert_eq!(got["result"]["status"], "failed", "{got}");
    assert_eq!(got["result"]["statusMessage"], ORPHANED, "{got}");
    let listed = legacy(nginx, &session, 21, consts::TasksList::VALUE, json!({})).await;
    let tasks = listed["result"]["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["taskId"], legacy_id.as_str());
    assert_eq!(tasks[0]["status"], "failed", "{listed}");
    for id in [&legacy_id, &modern_id] {
        let version = fleet
            .redis
            .command(&["HGET", &format!("mcx:{{tasks}}:t:{id}"), "v"])
            .await
            .text();
        // Created (1), its status message set by each step of the countdown before the kill,
        // then settled: the record's status message is the proof it was settled once; no
        // update lands after a terminal status.
        let record = fleet
            .redis
            .command(&["HGET", &format!("mcx:{{tasks}}:t:{id}"), "r"])
            .await
            .text()
            .expect("the record");
        let record: Value = serde_json::from_str(&record).unwrap();
        assert_eq!(
            record["status"], "failed",
            "{id}: {record} (version {version:?})"
        );
        assert_eq!(record["statusMessage"], ORPHANED, "{record}");
    }

    // The legacy task expires at its time to live; the next list forgets its index entries.
    let expires = started + Duration::from_millis(LEGACY_TTL_MS) + Duration::from_secs(1);
    tokio::time::sleep_until(expires.into()).await;
    let listed = legacy(nginx, &session, 22, consts::TasksList::VALUE, json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    assert_eq!(
        task_keys(&fleet.redis).await,
        [
            "mcx:{tasks}:exp".to_owned(),
            "mcx:{tasks}:own".to_owned(),
            "mcx:{tasks}:p:-".to_owned(),
            format!("mcx:{{tasks}}:t:{modern_id}"),
        ],
        "only the modern task is left"
    );
    let own = fleet.redis.command(&["HKEYS", "mcx:{tasks}:own"]).await;
    assert_eq!(
        own,
        RespValue::Array(vec![RespValue::Bulk(modern_id.clone().into_bytes())])
    );
}
