//! Tasks end to end in a fleet: two in-process servers (instances A and B), each serving
//! Streamable HTTP on its own port, sharing one `RedisTaskStore` (and a Redis bus) on a real
//! `redis-server`, with raw 2026-07-28 requests (the `io.modelcontextprotocol/tasks`
//! extension). A task created through A is polled through B, its question seen and answered
//! through B (the answer carried to A's handler over the Redis bus), cancelled through B (A's
//! handler stopped the same way), and expired: gone from Redis by itself, the store's count 0
//! and no handler left running after. Hostile
//! callers: another principal's task ids and unknown ids through either instance (not found,
//! alike, nothing changed), and a task flood beyond the fleet's bound spread over both instances
//! (a clear error, both instances serving on).
//!
//! An answer (`tasks/update`) or a cancel (`tasks/cancel`) that lands on an instance other than
//! the one running the handler is recorded in the store, then broadcast on the bus
//! (`BusMessage::Task`): the instance running the handler hands it the answers, or stops it.
//!
//! The 2025-11-25 wire (`params.task`, `tasks/result`, `tasks/list`) is not on this branch;
//! these tests run the 2026-07-28 one.
//!
//! Without `redis-server`, each test says why and passes, unless `MODELCTX_REQUIRE_FLEET` is set
//! (`cargo xtask ci` sets it): then it fails.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use modelctx_redis::{Fleet, FleetConfig, RedisTaskStore};
use modelctx_server::tasks::{TaskStore, TaskSupport};
use modelctx_server::{HttpConfig, RunningServer, Server, Settings, Tool};
use modelctx_tests::fleet::{Redis, RespValue};
use modelctx_tests::http::{modern_headers, post, within};
use modelctx_types::consts::{TasksCancel, TasksGet, TasksUpdate, ToolsCall};
use serde_json::{Value, json};

use crate::tasks_server::{EXT, TwoCallers, ask, hello, object, work};

/// One instance: its fleet membership, its server, its HTTP endpoint.
struct Instance {
    fleet: Fleet,
    server: Server,
    running: RunningServer,
}

impl Instance {
    fn addr(&self) -> SocketAddr {
        self.running.local_addr()
    }

    async fn stop(self) {
        self.running.shutdown(Duration::from_secs(1)).await;
        self.fleet.shutdown().await.unwrap();
    }
}

/// An instance on `redis` whose tasks live `ttl`, in a store of the bounds `bounds` (in all,
/// per principal).
async fn instance(
    redis: &Redis,
    ttl: Duration,
    bounds: (usize, usize),
) -> (Instance, RedisTaskStore) {
    let fleet = within("connect", Fleet::connect(&redis.url(), FleetConfig::new()))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let store = fleet
        .task_store()
        .max_tasks(bounds.0)
        .max_per_principal(bounds.1);
    let mut settings = Settings::default();
    settings.tasks.ttl = Some(ttl);
    settings.tasks.poll_interval = Duration::from_millis(50);
    let schema = object(json!({"type": "object", "properties": {"ms": {"type": "integer"}}}));
    let empty = object(json!({"type": "object"}));
    let server = Server::builder("tasks", "1.0.0")
        .tool(Tool::with_input_schema("work", schema, work).task_support(TaskSupport::Optional))
        .tool(
            Tool::with_input_schema("ask", empty.clone(), ask).task_support(TaskSupport::Optional),
        )
        .tool(Tool::with_input_schema("hello", empty, hello))
        .task_store(store.clone())
        .bus(Arc::new(fleet.bus()))
        .settings(settings)
        .auth(TwoCallers)
        .build();
    let running = server
        .serve_http("127.0.0.1:0", HttpConfig::default())
        .await
        .unwrap();
    (
        Instance {
            fleet,
            server,
            running,
        },
        store,
    )
}

/// One modern request of `caller` (the extension declared); its JSON-RPC response.
async fn request(addr: SocketAddr, caller: &str, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "extensions": {EXT: {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    });
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let bearer = format!("Bearer {caller}");
    let mut headers = modern_headers(method, name.as_deref());
    headers.push(("Authorization", &bearer));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut response = post(addr, &headers, &body).await;
    let sse = response
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if !sse {
        return response.json().await;
    }
    while let Some((_, message)) = within("an event", response.next_message()).await {
        if message.get("id").is_some() {
            return message;
        }
    }
    panic!("{method}: the stream ended without an answer")
}

async fn result(addr: SocketAddr, caller: &str, method: &str, params: Value) -> Value {
    let answer = request(addr, caller, method, params).await;
    assert!(answer.get("error").is_none(), "{method}: {answer}");
    answer["result"].clone()
}

async fn error(addr: SocketAddr, caller: &str, method: &str, params: Value) -> Value {
    let answer = request(addr, caller, method, params).await;
    assert!(answer.get("result").is_none(), "{method}: {answer}");
    answer["error"].clone()
}

/// Starts tool `tool` as a task through `addr`; its id.
async fn start(addr: SocketAddr, caller: &str, tool: &str, arguments: Value) -> String {
    let created = result(
        addr,
        caller,
        ToolsCall::VALUE,
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().unwrap().to_owned()
}

/// Polls task `id` through `addr` until its status is `status`.
async fn until(addr: SocketAddr, caller: &str, id: &str, status: &str) -> Value {
    within(status, async {
        loop {
            let task = result(addr, caller, TasksGet::VALUE, json!({"taskId": id})).await;
            if task["status"] == status {
                return task;
            }
            assert!(
                !["completed", "failed", "cancelled"].contains(&task["status"].as_str().unwrap()),
                "settled {} while waiting for {status}: {task}",
                task["status"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// The task store's keys in Redis.
async fn task_keys(redis: &Redis) -> Vec<String> {
    match redis.command(&["KEYS", "mcx:{tasks}:*"]).await {
        RespValue::Array(items) => items.iter().filter_map(RespValue::text).collect(),
        other => panic!("KEYS: {other:?}"),
    }
}

/// Waits until no handler runs on either instance, the store counts no task, and Redis holds
/// none of its keys.
async fn empty_after(redis: &Redis, instances: [&Instance; 2], store: &RedisTaskStore) {
    within("the tables to empty", async {
        loop {
            let running: usize = instances.iter().map(|i| i.server.load().tasks).sum();
            let count = store.count().await.unwrap();
            if running == 0 && count == 0 && task_keys(redis).await.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// Created through A, polled through B until completed (the result inlined); a question asked on
/// A seen and answered through B, the handler on A going on with the answer; cancelled through
/// B, A's handler stopped and the task final for both; and every task expired after its ttl:
/// not found through either instance, the tables empty.
#[tokio::test]
async fn a_task_created_through_one_instance_is_polled_and_cancelled_through_another() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let ttl = Duration::from_secs(4);
    let (a, store) = instance(&redis, ttl, (100, 50)).await;
    let (b, _) = instance(&redis, ttl, (100, 50)).await;
    assert_ne!(a.fleet.instance(), b.fleet.instance());

    // Created through A, polled through B.
    let id = start(a.addr(), "alice", "work", json!({"ms": 300})).await;
    let seen = result(b.addr(), "alice", TasksGet::VALUE, json!({"taskId": id})).await;
    assert!(
        ["working", "completed"].contains(&seen["status"].as_str().unwrap()),
        "{seen}"
    );
    let done = until(b.addr(), "alice", &id, "completed").await;
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("waited 300ms in task "), "{done}");
    assert_eq!(done["statusMessage"], "half way");

    // A question asked by a handler on A is seen and answered through B.
    let asking = start(a.addr(), "alice", "ask", json!({})).await;
    let waiting = until(b.addr(), "alice", &asking, "input_required").await;
    assert_eq!(
        waiting["inputRequests"]["name"]["params"]["message"],
        "Your name?"
    );
    result(
        b.addr(),
        "alice",
        TasksUpdate::VALUE,
        json!({"taskId": asking,
        "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}}}),
    )
    .await;
    let done = until(b.addr(), "alice", &asking, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Hello, Ada!");

    // Cancelled through B while it runs on A: cancelled for both, A's handler stopped (long
    // before its minute), and what it returns then does not change the task.
    let long = start(a.addr(), "alice", "work", json!({"ms": 60000})).await;
    result(
        b.addr(),
        "alice",
        TasksCancel::VALUE,
        json!({"taskId": long}),
    )
    .await;
    let cancelled = result(a.addr(), "alice", TasksGet::VALUE, json!({"taskId": long})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    within("A's handler to stop", async {
        while a.server.load().tasks > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let still = result(b.addr(), "alice", TasksGet::VALUE, json!({"taskId": long})).await;
    assert_eq!(still["status"], "cancelled", "{still}");
    assert!(still.get("result").is_none(), "{still}");

    // Expired: gone through either instance, from Redis by itself; the tables empty.
    empty_after(&redis, [&a, &b], &store).await;
    for task in [&id, &asking, &long] {
        for addr in [a.addr(), b.addr()] {
            let gone = error(addr, "alice", TasksGet::VALUE, json!({"taskId": task})).await;
            assert_eq!(gone["code"], -32602, "{gone}");
        }
    }
    a.stop().await;
    b.stop().await;
}

/// Another principal's task, through either instance, is answered exactly as an unknown id
/// (-32602, the same message but for the id) by `tasks/get`, `tasks/update` and `tasks/cancel`,
/// and none of them changes it.
#[tokio::test]
async fn another_principals_task_ids_are_unknown_through_every_instance() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let ttl = Duration::from_secs(60);
    let (a, store) = instance(&redis, ttl, (100, 50)).await;
    let (b, _) = instance(&redis, ttl, (100, 50)).await;
    let id = start(a.addr(), "alice", "ask", json!({})).await;
    until(b.addr(), "alice", &id, "input_required").await;
    let unknown = "0123456789abcdef0123456789abcdef";
    let answer = json!({"name": {"action": "accept", "content": {"name": "Mallory"}}});
    for addr in [a.addr(), b.addr()] {
        for (method, params) in [
            (TasksGet::VALUE, json!({})),
            (TasksCancel::VALUE, json!({})),
            (TasksUpdate::VALUE, json!({"inputResponses": answer})),
        ] {
            let mut foreign = params.clone();
            foreign["taskId"] = json!(id);
            let theirs = error(addr, "bob", method, foreign).await;
            let mut never = params;
            never["taskId"] = json!(unknown);
            let none = error(addr, "bob", method, never).await;
            assert_eq!(theirs["code"], -32602, "{method}: {theirs}");
            let masked =
                |e: &Value, id: &str| e["message"].as_str().unwrap_or_default().replace(id, "ID");
            assert_eq!(
                (masked(&theirs, &id), &theirs["data"]),
                (masked(&none, unknown), &none["data"]),
                "{method}: another's task is told apart from an unknown one"
            );
        }
    }
    // Nothing changed: alice's task still waits on her question.
    let task = result(b.addr(), "alice", TasksGet::VALUE, json!({"taskId": id})).await;
    assert_eq!(task["status"], "input_required", "{task}");
    result(a.addr(), "alice", TasksCancel::VALUE, json!({"taskId": id})).await;
    within("the handler to stop", async {
        while a.server.load().tasks > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    store.remove(&id).await.unwrap();
    assert!(task_keys(&redis).await.is_empty());
    a.stop().await;
    b.stop().await;
}

/// The fleet's bound holds across instances: two tasks per principal and three in all, spread
/// over A and B; beyond, a clear error (-32000, `too_many_tasks`, naming the bound) through
/// either, and both instances go on serving; the tables empty after.
#[tokio::test]
async fn a_task_flood_spread_over_two_instances_meets_the_fleets_bound() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let ttl = Duration::from_secs(60);
    let (a, store) = instance(&redis, ttl, (3, 2)).await;
    let (b, _) = instance(&redis, ttl, (3, 2)).await;
    let long = json!({"ms": 60000});
    let mut ids = vec![
        start(a.addr(), "alice", "work", long.clone()).await,
        start(b.addr(), "alice", "work", long.clone()).await,
    ];
    for addr in [a.addr(), b.addr()] {
        let refused = error(
            addr,
            "alice",
            ToolsCall::VALUE,
            json!({"name": "work", "arguments": long}),
        )
        .await;
        assert_eq!(refused["code"], -32000, "{refused}");
        assert_eq!(refused["data"]["reason"], "too_many_tasks", "{refused}");
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .contains("per principal"),
            "{refused}"
        );
    }
    ids.push(start(b.addr(), "bob", "work", long.clone()).await);
    let refused = error(
        a.addr(),
        "bob",
        ToolsCall::VALUE,
        json!({"name": "work", "arguments": long}),
    )
    .await;
    assert_eq!(refused["data"]["reason"], "too_many_tasks", "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("its bound"),
        "{refused}"
    );
    assert_eq!(store.count().await.unwrap(), 3);
    for addr in [a.addr(), b.addr()] {
        let hello = result(
            addr,
            "bob",
            ToolsCall::VALUE,
            json!({"name": "hello", "arguments": {}}),
        )
        .await;
        assert_eq!(hello["content"][0]["text"], "hello");
    }
    // Each cancelled through the instance running it, then forgotten.
    result(
        a.addr(),
        "alice",
        TasksCancel::VALUE,
        json!({"taskId": ids[0]}),
    )
    .await;
    result(
        b.addr(),
        "alice",
        TasksCancel::VALUE,
        json!({"taskId": ids[1]}),
    )
    .await;
    result(
        b.addr(),
        "bob",
        TasksCancel::VALUE,
        json!({"taskId": ids[2]}),
    )
    .await;
    within("the handlers to stop", async {
        while a.server.load().tasks + b.server.load().tasks > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    for id in &ids {
        store.remove(id).await.unwrap();
    }
    empty_after(&redis, [&a, &b], &store).await;
    a.stop().await;
    b.stop().await;
}
