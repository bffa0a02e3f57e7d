//! Tasks on the server, 2026-07-28 (the `io.modelcontextprotocol/tasks` extension) over
//! Streamable HTTP, with raw requests: a task created, polled, fed input, cancelled and expired,
//! the store and the runner empty after; tasks bound to their principal (another one's id is
//! unknown); unknown ids; the extension's gates; a flood beyond the store's bound refused with a
//! clear error while the server goes on serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, StatusCode, header};
use modelctx_http::event_store::BoxFuture;
use modelctx_http::server::{Challenge, Grant, Guard};
use modelctx_server::tasks::{MemoryTaskStore, TaskStore, TaskSupport};
use modelctx_server::{
    Context, HttpConfig, InputError, NoArgs, RunningServer, Server, Settings, Tool, ToolOutput,
};
use modelctx_tests::http::{modern_headers, post, within};
use modelctx_types::JsonObject;
use modelctx_types::consts::{TasksCancel, TasksGet, TasksUpdate, ToolsCall};
use serde_json::{Value, json};

pub(crate) const EXT: &str = "io.modelcontextprotocol/tasks";

/// A guard of two callers, `Bearer alice` and `Bearer bob`.
#[derive(Debug)]
pub(crate) struct TwoCallers;

impl Guard for TwoCallers {
    fn authenticate<'a>(
        &'a self,
        request: &'a http::request::Parts,
    ) -> BoxFuture<'a, Result<Grant, Challenge>> {
        Box::pin(async move {
            let token = request
                .headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            match token {
                Some(who @ ("alice" | "bob")) => Ok(Grant::new("https://as.test", who)),
                _ => Err(Challenge::new(StatusCode::UNAUTHORIZED)),
            }
        })
    }

    fn authorize(&self, _: &Grant, _: &[String]) -> Result<(), Challenge> {
        Ok(())
    }

    fn on_success(&self, _: &Grant, _: &mut HeaderMap) {}
}

pub(crate) fn object(value: Value) -> JsonObject {
    value.as_object().cloned().expect("an object")
}

#[derive(serde::Deserialize)]
pub(crate) struct Wait {
    #[serde(default)]
    ms: u64,
}

/// Waits `ms` (stopping when cancelled), reporting progress on the way.
pub(crate) async fn work(context: Context, args: Wait) -> String {
    let _ = context.progress(1.0, Some(2.0), Some("half way")).await;
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(args.ms)) => {}
        () = context.cancelled().cancelled() => return "stopped".into(),
    }
    format!(
        "waited {}ms in task {}",
        args.ms,
        context.task_id().unwrap_or("none")
    )
}

/// Asks for a name, then greets.
pub(crate) async fn ask(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    let answer = context.keyed("name").elicit("Your name?", schema).await?;
    let name = answer
        .content
        .as_ref()
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Ok(format!("Hello, {name}!"))
}

async fn fail(_: NoArgs) -> ToolOutput {
    ToolOutput::error("it failed")
}

/// Answers with a JSON-RPC error of its own (as a gateway passes on its server's).
async fn broken(_: NoArgs) -> ToolOutput {
    let error = modelctx_server::ErrorObject::new(
        modelctx_server::ErrorCode(-32050),
        "the backend is down",
    );
    ToolOutput::protocol_error(error)
}

pub(crate) async fn hello(_: NoArgs) -> &'static str {
    "hello"
}

fn server(store: Arc<MemoryTaskStore>, ttl: Duration) -> Server {
    let mut settings = Settings::default();
    settings.tasks.ttl = Some(ttl);
    settings.tasks.poll_interval = Duration::from_millis(50);
    let schema = object(json!({"type": "object", "properties": {"ms": {"type": "integer"}}}));
    let empty = object(json!({"type": "object"}));
    Server::builder("tasks", "1.0.0")
        .tool(Tool::with_input_schema("work", schema, work).task_support(TaskSupport::Optional))
        .tool(
            Tool::with_input_schema("ask", empty.clone(), ask).task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::with_input_schema("fail", empty.clone(), fail)
                .task_support(TaskSupport::Required),
        )
        .tool(
            Tool::with_input_schema("broken", empty.clone(), broken)
                .task_support(TaskSupport::Optional),
        )
        .tool(Tool::with_input_schema("hello", empty, hello))
        .task_store_shared(store)
        .settings(settings)
        .auth(TwoCallers)
        .build()
}

/// A boxed future (the test functions' state stays small: debug builds of big `async fn`s
/// overflow the test thread's stack).
type Boxed<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// A [`server`] of `store` and `ttl`, served over HTTP.
struct Served {
    server: Server,
    store: Arc<MemoryTaskStore>,
    running: RunningServer,
    addr: SocketAddr,
}

fn served(store: MemoryTaskStore, ttl: Duration) -> Boxed<Served> {
    Box::pin(async move {
        let store = Arc::new(store);
        let server = server(store.clone(), ttl);
        let running = server
            .serve_http("127.0.0.1:0", HttpConfig::default())
            .await
            .unwrap();
        let addr = running.local_addr();
        Served {
            server,
            store,
            running,
            addr,
        }
    })
}

/// One modern request of `caller`, with the extension declared or not; its JSON-RPC response.
fn request(
    addr: SocketAddr,
    caller: &'static str,
    extension: bool,
    method: &'static str,
    mut params: Value,
) -> Boxed<Value> {
    Box::pin(async move {
        let capabilities = if extension {
            json!({"elicitation": {}, "extensions": {EXT: {}}})
        } else {
            json!({"elicitation": {}})
        };
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
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
    })
}

/// The result of a request of `caller` declaring the extension (it must not fail).
fn result(
    addr: SocketAddr,
    caller: &'static str,
    method: &'static str,
    params: Value,
) -> Boxed<Value> {
    Box::pin(async move {
        let answer = request(addr, caller, true, method, params).await;
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    })
}

/// The error of a request of `caller` (it must fail).
fn error(
    addr: SocketAddr,
    caller: &'static str,
    extension: bool,
    method: &'static str,
    params: Value,
) -> Boxed<Value> {
    Box::pin(async move {
        let answer = request(addr, caller, extension, method, params).await;
        assert!(answer.get("result").is_none(), "{method}: {answer}");
        answer["error"].clone()
    })
}

/// A new task of `caller` calling `tool` with `arguments`: its id.
fn create(
    addr: SocketAddr,
    caller: &'static str,
    tool: &'static str,
    arguments: Value,
) -> Boxed<String> {
    Box::pin(async move {
        let created = result(
            addr,
            caller,
            ToolsCall::VALUE,
            json!({"name": tool, "arguments": arguments}),
        )
        .await;
        assert_eq!(created["resultType"], "task", "{created}");
        created["taskId"].as_str().expect("a task id").to_owned()
    })
}

/// Polls task `id` until its status is `status`.
fn until(addr: SocketAddr, caller: &'static str, id: &str, status: &'static str) -> Boxed<Value> {
    let id = id.to_owned();
    Box::pin(within(status, async move {
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
    }))
}

/// Waits until the store holds nothing and no handler runs.
pub(crate) async fn empty_after(server: &Server, store: &MemoryTaskStore) {
    within("the tables to empty", async {
        while !store.is_empty() || server.load().tasks > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Created, polled and completed: a flat CreateTaskResult, durable at once; working (the
/// handler's progress is the status message), then completed with the tool's result inlined.
fn created_and_polled(addr: SocketAddr, store: Arc<MemoryTaskStore>) -> Boxed<String> {
    Box::pin(async move {
        let created = result(
            addr,
            "alice",
            ToolsCall::VALUE,
            json!({"name": "work", "arguments": {"ms": 300}}),
        )
        .await;
        assert_eq!(created["resultType"], "task", "{created}");
        assert!(created.get("task").is_none() && created.get("result").is_none());
        assert_eq!(created["ttlMs"], 3000);
        assert_eq!(created["pollIntervalMs"], 50);
        let id = created["taskId"].as_str().unwrap().to_owned();
        assert_eq!(id.len(), 32, "128 random bits");
        assert_eq!(store.len(), 1);
        let working = result(addr, "alice", TasksGet::VALUE, json!({"taskId": id})).await;
        assert_eq!(working["resultType"], "complete");
        assert_eq!(working["status"], "working");
        let done = until(addr, "alice", &id, "completed").await;
        assert_eq!(
            done["result"]["content"][0]["text"],
            format!("waited 300ms in task {id}")
        );
        assert_eq!(done["statusMessage"], "half way");
        assert!(done["result"].get("resultType").is_none(), "{done}");
        id
    })
}

/// Fed input: input_required with the question, answered by tasks/update, then completed.
fn fed_input(addr: SocketAddr) -> Boxed<String> {
    Box::pin(async move {
        let asking = create(addr, "alice", "ask", json!({})).await;
        let waiting = until(addr, "alice", &asking, "input_required").await;
        assert_eq!(
            waiting["inputRequests"]["name"]["method"],
            "elicitation/create"
        );
        assert_eq!(
            waiting["inputRequests"]["name"]["params"]["message"],
            "Your name?"
        );
        // An answer that is not an ElicitResult is refused, and nothing is taken.
        let wrong = error(
            addr,
            "alice",
            true,
            TasksUpdate::VALUE,
            json!({"taskId": asking, "inputResponses": {"name": 5}}),
        )
        .await;
        assert_eq!(wrong["code"], -32602, "{wrong}");
        // Keys it does not wait on are ignored.
        let ack = result(
            addr,
            "alice",
            TasksUpdate::VALUE,
            json!({"taskId": asking,
            "inputResponses": {"other": {"action": "accept"}}}),
        )
        .await;
        assert_eq!(
            ack,
            json!({"resultType": "complete", "_meta": ack["_meta"]})
        );
        let still = result(addr, "alice", TasksGet::VALUE, json!({"taskId": asking})).await;
        assert_eq!(still["status"], "input_required");
        let ack = result(
            addr,
            "alice",
            TasksUpdate::VALUE,
            json!({"taskId": asking,
            "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}}}),
        )
        .await;
        assert_eq!(ack["resultType"], "complete");
        assert!(ack.get("status").is_none() && ack.get("taskId").is_none());
        let done = until(addr, "alice", &asking, "completed").await;
        assert_eq!(done["result"]["content"][0]["text"], "Hello, Ada!");
        asking
    })
}

/// Cancelled: the handler stops, the task settles cancelled; cancelling again is the same ack.
fn cancelled(addr: SocketAddr) -> Boxed<String> {
    Box::pin(async move {
        let long = create(addr, "alice", "work", json!({"ms": 60000})).await;
        let ack = result(addr, "alice", TasksCancel::VALUE, json!({"taskId": long})).await;
        assert_eq!(ack["resultType"], "complete");
        assert!(ack.get("status").is_none());
        let cancelled = result(addr, "alice", TasksGet::VALUE, json!({"taskId": long})).await;
        assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
        assert!(cancelled.get("result").is_none());
        let again = result(addr, "alice", TasksCancel::VALUE, json!({"taskId": long})).await;
        assert_eq!(again["resultType"], "complete");
        long
    })
}

/// A tool error completes the task with isError (it does not fail it); a settled task does not
/// change: a cancel leaves it completed.
fn tool_error(addr: SocketAddr) -> Boxed<String> {
    Box::pin(async move {
        let failing = create(addr, "alice", "fail", json!({})).await;
        let done = until(addr, "alice", &failing, "completed").await;
        assert_eq!(done["result"]["isError"], true);
        result(
            addr,
            "alice",
            TasksCancel::VALUE,
            json!({"taskId": failing}),
        )
        .await;
        let still = result(addr, "alice", TasksGet::VALUE, json!({"taskId": failing})).await;
        assert_eq!(still["status"], "completed");
        failing
    })
}

#[tokio::test]
async fn a_task_is_created_polled_fed_input_cancelled_and_expired_and_the_tables_empty_after() {
    let Served {
        server,
        store,
        running,
        addr,
    } = served(MemoryTaskStore::new(), Duration::from_millis(3000)).await;
    let ids = [
        created_and_polled(addr, store.clone()).await,
        fed_input(addr).await,
        cancelled(addr).await,
        tool_error(addr).await,
    ];
    // Expired: ttl after its creation every task is gone, for its owner too.
    empty_after(&server, &store).await;
    for task in ids {
        let gone = error(
            addr,
            "alice",
            true,
            TasksGet::VALUE,
            json!({"taskId": task}),
        )
        .await;
        assert_eq!(gone["code"], -32602, "{gone}");
    }
    assert_eq!(within("count", store.count()).await.unwrap(), 0);
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn another_principals_task_and_unknown_ids_are_not_found() {
    let Served { running, addr, .. } =
        served(MemoryTaskStore::new(), Duration::from_secs(60)).await;
    let created = result(
        addr,
        "alice",
        ToolsCall::VALUE,
        json!({"name": "ask", "arguments": {}}),
    )
    .await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    until(addr, "alice", &id, "input_required").await;
    // Bob polls, answers and cancels alice's task: each is told the id is unknown, as for an id
    // that never was, and nothing of the task changes.
    for method in [TasksGet::VALUE, TasksCancel::VALUE, TasksUpdate::VALUE] {
        for task in [id.as_str(), "no-such-task"] {
            let params = json!({"taskId": task,
                "inputResponses": {"name": {"action": "accept", "content": {"name": "Bob"}}}});
            let refused = error(addr, "bob", true, method, params).await;
            assert_eq!(refused["code"], -32602, "{method} {task}: {refused}");
            assert!(!refused.to_string().contains("alice"), "{refused}");
        }
    }
    let task = result(addr, "alice", TasksGet::VALUE, json!({"taskId": id})).await;
    assert_eq!(task["status"], "input_required");
    assert!(task["inputRequests"].get("name").is_some());
    result(addr, "alice", TasksCancel::VALUE, json!({"taskId": id})).await;
    let task = result(addr, "alice", TasksGet::VALUE, json!({"taskId": id})).await;
    assert_eq!(task["status"], "cancelled");
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn the_extension_gates_tasks_and_required_tools() {
    let Served {
        store,
        running,
        addr,
        ..
    } = served(MemoryTaskStore::new(), Duration::from_secs(60)).await;
    // Declared in server/discover.
    let discover = result(addr, "alice", "server/discover", json!({})).await;
    assert_eq!(discover["capabilities"]["extensions"][EXT], json!({}));
    assert!(discover["capabilities"].get("tasks").is_none());
    // Without the extension: tasks/* are -32021, an optional tool is a plain call, a required
    // one -32021 naming the extension, and no task is made.
    for method in [TasksGet::VALUE, TasksUpdate::VALUE, TasksCancel::VALUE] {
        let refused = error(
            addr,
            "alice",
            false,
            method,
            json!({"taskId": "t", "inputResponses": {}}),
        )
        .await;
        assert_eq!(refused["code"], -32021, "{method}: {refused}");
    }
    let plain = request(
        addr,
        "alice",
        false,
        ToolsCall::VALUE,
        json!({"name": "work", "arguments": {"ms": 0}}),
    )
    .await;
    assert_eq!(plain["result"]["resultType"], "complete", "{plain}");
    assert_eq!(
        plain["result"]["content"][0]["text"],
        "waited 0ms in task none"
    );
    let required = error(
        addr,
        "alice",
        false,
        ToolsCall::VALUE,
        json!({"name": "fail", "arguments": {}}),
    )
    .await;
    assert_eq!(required["code"], -32021);
    assert_eq!(
        required["data"]["requiredCapabilities"]["extensions"][EXT],
        json!({})
    );
    // A tool without task support is never a task, and ignores a legacy `task` param.
    let hello = result(
        addr,
        "alice",
        ToolsCall::VALUE,
        json!({"name": "hello", "arguments": {}, "task": {"ttl": 1000}}),
    )
    .await;
    assert_eq!(hello["resultType"], "complete");
    assert!(hello.get("taskId").is_none());
    assert!(store.is_empty());
    running.shutdown(Duration::from_secs(1)).await;
}

/// A tool's protocol error (`ToolOutput::protocol_error`) answers a plain call with that
/// JSON-RPC error (no result), and settles a task `failed` with it inlined.
#[tokio::test]
async fn a_protocol_error_of_a_tool_is_the_calls_error_and_fails_its_task() {
    let Served { running, addr, .. } =
        served(MemoryTaskStore::new(), Duration::from_secs(60)).await;
    let plain = error(
        addr,
        "alice",
        false,
        ToolsCall::VALUE,
        json!({"name": "broken", "arguments": {}}),
    )
    .await;
    assert_eq!(plain["code"], -32050, "{plain}");
    assert_eq!(plain["message"], "the backend is down");
    let task = create(addr, "alice", "broken", json!({})).await;
    let failed = until(addr, "alice", &task, "failed").await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], -32050, "{failed}");
    assert!(failed.get("result").is_none(), "{failed}");
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_task_flood_beyond_the_stores_bound_gets_a_clear_error_and_the_server_serves_on() {
    // Two tasks per principal, three in all.
    let Served {
        server,
        store,
        running,
        addr,
    } = served(MemoryTaskStore::bounded(3, 2), Duration::from_secs(60)).await;
    let call = json!({"name": "work", "arguments": {"ms": 60000}});
    let mut ids = Vec::new();
    for _ in 0..2 {
        let created = result(addr, "alice", ToolsCall::VALUE, call.clone()).await;
        ids.push(created["taskId"].as_str().unwrap().to_owned());
    }
    let refused = error(addr, "alice", true, ToolsCall::VALUE, call.clone()).await;
    assert_eq!(refused["code"], -32000, "{refused}");
    assert_eq!(refused["data"]["reason"], "too_many_tasks");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("per principal"),
        "{refused}"
    );
    // Bob still gets one; then the store is full for everyone.
    let created = result(addr, "bob", ToolsCall::VALUE, call.clone()).await;
    let bobs = created["taskId"].as_str().unwrap().to_owned();
    let refused = error(addr, "bob", true, ToolsCall::VALUE, call.clone()).await;
    assert_eq!(refused["data"]["reason"], "too_many_tasks", "{refused}");
    // The refused calls left nothing running, and the server answers the rest.
    assert_eq!(store.len(), 3);
    let hello = result(
        addr,
        "bob",
        ToolsCall::VALUE,
        json!({"name": "hello", "arguments": {}}),
    )
    .await;
    assert_eq!(hello["content"][0]["text"], "hello");
    for id in &ids {
        result(addr, "alice", TasksCancel::VALUE, json!({"taskId": id})).await;
    }
    result(addr, "bob", TasksCancel::VALUE, json!({"taskId": bobs})).await;
    within("the handlers to stop", async {
        while server.load().tasks > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    for id in ids.iter().chain([&bobs]) {
        store.remove(id).await.unwrap();
    }
    assert!(store.is_empty());
    running.shutdown(Duration::from_secs(1)).await;
}
