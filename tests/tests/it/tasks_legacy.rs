//! The experimental tasks of protocol 2025-11-25 on the server facade, both directions, end to
//! end over Streamable HTTP with a raw client: a task created, polled, its result taken,
//! cancelled, expired, listed with a cursor, fed input through `tasks/result`; another session
//! sees none of it; the store is empty after. And the server asking the client to run a
//! sampling request as a task.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use modelctx_server::tasks::{MemoryTaskStore, TaskStore, TaskSupport};
use modelctx_server::{Context, InputError, NoArgs, Server, Settings, Tool};
use modelctx_tests::http::{RawResponse, post, post_headers, raw_request, within};
use serde_json::{Value, json};
use tokio::sync::Notify;

const V: &str = "2025-11-25";

/// A raw 2025-11-25 client of one session.
struct Raw {
    addr: SocketAddr,
    sid: String,
}

impl Raw {
    /// Opens a session declaring `capabilities`.
    async fn open(addr: SocketAddr, version: &str, capabilities: Value) -> (Raw, Value) {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "1"}}});
        let response = post(addr, &post_headers(None, None), &init).await;
        assert_eq!(response.status, 200);
        let sid = response.header("mcp-session-id").unwrap().to_owned();
        let init = response.json().await;
        let raw = Raw { addr, sid };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(raw.send(&initialized).await.status, 202);
        (raw, init["result"].clone())
    }

    async fn send(&self, body: &Value) -> RawResponse {
        post(self.addr, &post_headers(Some(&self.sid), Some(V)), body).await
    }

    /// Sends request `id` and reads its answer (the whole message), through SSE or JSON.
    async fn request(&self, id: i64, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self.send(&body).await;
        answer_of(response, id).await
    }

    /// The `result` of request `id`, failing on an error.
    async fn result(&self, id: i64, method: &str, params: Value) -> Value {
        let answer = self.request(id, method, params).await;
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    /// The error code of request `id`, failing on a result.
    async fn error(&self, id: i64, method: &str, params: Value) -> i64 {
        let answer = self.request(id, method, params).await;
        answer["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("{method}: an error expected, got {answer}"))
    }

    /// Answers the server's request `id` with `result`.
    async fn answer(&self, id: &Value, result: Value) {
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
        assert_eq!(self.send(&body).await.status, 202);
    }

    async fn get(&self, id: i64, task_id: &str) -> Value {
        self.result(id, "tasks/get", json!({"taskId": task_id}))
            .await
    }
}

/// The answer to request `id` on `response` (a JSON body or an event stream).
async fn answer_of(mut response: RawResponse, id: i64) -> Value {
    let sse = response
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if !sse {
        return response.json().await;
    }
    loop {
        let (_, message) = within("an answer", response.next_message())
            .await
            .expect("the stream ended before the answer");
        if message["id"] == id && message.get("method").is_none() {
            return message;
        }
    }
}

fn call_as_task(name: &str, arguments: Value, ttl: Option<u64>) -> Value {
    let task = match ttl {
        Some(ttl) => json!({"ttl": ttl}),
        None => json!({}),
    };
    json!({"name": name, "arguments": arguments, "task": task})
}

/// Polls `tasks/get` until the task's status is `status`.
async fn until(raw: &Raw, task_id: &str, status: &str) -> Value {
    within(status, async {
        let mut id = 1000;
        loop {
            id += 1;
            let task = raw.get(id, task_id).await;
            if task["status"] == status {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// What the test server's tools wait on and tell.
#[derive(Default)]
struct Gate {
    open: Notify,
    started: AtomicBool,
    cancelled: AtomicBool,
}

/// Tells the gate that the handler holding it stopped before the gate opened.
struct Stopped(Option<Arc<Gate>>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(gate) = &self.0 {
            gate.cancelled.store(true, Ordering::SeqCst);
        }
    }
}

fn server(gate: Arc<Gate>, store: Arc<MemoryTaskStore>, settings: Settings) -> Server {
    let waits = {
        let gate = gate.clone();
        move |context: Context, _: NoArgs| {
            let gate = gate.clone();
            async move {
                // A cancelled task's handler is stopped where it waits (dropped), or sees
                // its context cancelled: either way the gate hears of it.
                let mut stopped = Stopped(Some(gate.clone()));
                gate.started.store(true, Ordering::SeqCst);
                tokio::select! {
                    () = gate.open.notified() => {
                        stopped.0 = None;
                        "opened".to_owned()
                    }
                    () = context.cancelled().cancelled() => "cancelled".to_owned(),
                }
            }
        }
    };
    let asks = |context: Context, _: NoArgs| async move {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let answer = context.elicit("Your name?", schema).await?;
        let name = answer.content.unwrap_or_default()["name"].clone();
        Ok::<_, InputError>(format!("hello {}", name.as_str().unwrap_or("?")))
    };
    let samples_as_task = |context: Context, _: NoArgs| async move {
        let request = modelctx_server::sampling_request("a haiku", 50);
        let mut task = match context.create_message_as_task(request, None).await {
            Ok(task) => task,
            Err(e) => return format!("not as a task: {e}"),
        };
        match task.wait().await {
            Ok(answer) => format!("{} answered task {}", answer.model, task.id()),
            Err(e) => format!("failed: {e}"),
        }
    };
    let now = |_: NoArgs| async { "now" };
    Server::builder("tasks", "1")
        .settings(settings)
        .task_store_shared(store as Arc<dyn TaskStore>)
        .tool(Tool::new("waits", waits).task_support(TaskSupport::Optional))
        .tool(Tool::new("asks", asks).task_support(TaskSupport::Required))
        .tool(Tool::new("now", now))
        .tool(Tool::new("samples_as_task", samples_as_task))
        .build()
}

async fn serve(server: &Server) -> modelctx_server::RunningServer {
    server
        .serve_http("127.0.0.1:0", modelctx_server::HttpConfig::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_capability_and_the_tools_task_support_are_declared_in_2025_11_25_only() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(Arc::default(), store, Settings::default());
    let running = serve(&server).await;
    let addr = running.local_addr();
    let (raw, init) = Raw::open(addr, V, json!({})).await;
    let tasks = &init["capabilities"]["tasks"];
    assert!(tasks["list"].is_object(), "{init}");
    assert!(tasks["cancel"].is_object(), "{init}");
    assert!(tasks["requests"]["tools"]["call"].is_object(), "{init}");
    let tools = raw.result(1, "tools/list", json!({})).await;
    let support = |name: &str| {
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["execution"]["taskSupport"].clone())
            .unwrap()
    };
    assert_eq!(support("waits"), "optional");
    assert_eq!(support("asks"), "required");
    assert!(
        matches!(support("now"), Value::Null) || support("now") == "forbidden",
        "{tools}"
    );
    // 2025-06-18 has no tasks: no capability, and its tasks/* requests do not exist.
    let (old, init) = Raw::open(addr, "2025-06-18", json!({})).await;
    assert!(init["capabilities"].get("tasks").is_none(), "{init}");
    let answer = old.request(2, "tasks/list", json!({})).await;
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_created_polled_listed_and_its_result_taken_then_it_expires() {
    let gate = Arc::new(Gate::default());
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(gate.clone(), store.clone(), Settings::default());
    let running = serve(&server).await;
    let (raw, _) = Raw::open(running.local_addr(), V, json!({})).await;
    let created = raw
        .result(
            1,
            "tools/call",
            call_as_task("waits", json!({}), Some(1_500)),
        )
        .await;
    let task = &created["task"];
    let task_id = task["taskId"].as_str().unwrap().to_owned();
    assert_eq!(task["status"], "working", "{created}");
    assert_eq!(task["ttl"], 1_500, "{created}");
    assert!(
        task["createdAt"].as_str().unwrap().ends_with('Z'),
        "{created}"
    );
    assert!(task["lastUpdatedAt"].is_string(), "{created}");
    assert!(
        created.get("content").is_none(),
        "not the tool's result: {created}"
    );
    assert_eq!(raw.get(2, &task_id).await["status"], "working");
    let listed = raw.result(3, "tasks/list", json!({})).await;
    assert_eq!(listed["tasks"][0]["taskId"], task_id.as_str(), "{listed}");
    // The session's standalone stream, where the status notifications go.
    let get_headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", raw.sid.as_str()),
        ("MCP-Protocol-Version", V),
    ];
    let mut standalone = within(
        "the standalone stream",
        raw_request(raw.addr, "GET", "/mcp", &get_headers, b""),
    )
    .await;
    assert_eq!(standalone.status, 200);
    // tasks/result waits for the end.
    let waiting = {
        let raw = Raw {
            addr: raw.addr,
            sid: raw.sid.clone(),
        };
        let task_id = task_id.clone();
        tokio::spawn(async move {
            raw.request(4, "tasks/result", json!({"taskId": task_id}))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "tasks/result blocks until the task ends"
    );
    gate.open.notify_one();
    let answer = within("tasks/result", waiting).await.unwrap();
    let result = &answer["result"];
    assert_eq!(result["content"][0]["text"], "opened", "{answer}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str(),
        "{answer}"
    );
    // The change of status was told while tasks/result waited.
    let (_, status) = within("a status notification", standalone.next_message())
        .await
        .unwrap();
    assert_eq!(status["method"], "notifications/tasks/status", "{status}");
    assert_eq!(status["params"]["taskId"], task_id.as_str(), "{status}");
    assert_eq!(status["params"]["status"], "completed", "{status}");
    let done = raw.get(5, &task_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    // Taken again: the same result.
    let again = raw
        .result(6, "tasks/result", json!({"taskId": task_id}))
        .await;
    assert_eq!(again["content"][0]["text"], "opened");
    // Expired after its ttl: gone, and the store is empty again.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert_eq!(
        raw.error(7, "tasks/get", json!({"taskId": task_id})).await,
        -32602
    );
    store.purge();
    assert!(store.is_empty(), "{store:?}");
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_tool_needs_a_task_and_a_forbidden_one_refuses_it() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(Arc::default(), store.clone(), Settings::default());
    let running = serve(&server).await;
    let (raw, _) = Raw::open(running.local_addr(), V, json!({"elicitation": {}})).await;
    let plain = json!({"name": "asks", "arguments": {}});
    assert_eq!(raw.error(1, "tools/call", plain).await, -32601);
    let as_task = call_as_task("now", json!({}), None);
    assert_eq!(raw.error(2, "tools/call", as_task).await, -32601);
    // An optional tool may be called either way.
    let plain = raw
        .result(3, "tools/call", json!({"name": "now", "arguments": {}}))
        .await;
    assert_eq!(plain["content"][0]["text"], "now");
    assert!(store.is_empty());
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_task_stops_its_handler_and_stays_cancelled() {
    let gate = Arc::new(Gate::default());
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(gate.clone(), store.clone(), Settings::default());
    let running = serve(&server).await;
    let (raw, _) = Raw::open(running.local_addr(), V, json!({})).await;
    let created = raw
        .result(
            1,
            "tools/call",
            call_as_task("waits", json!({}), Some(60_000)),
        )
        .await;
    let task_id = created["task"]["taskId"].as_str().unwrap().to_owned();
    within("the handler runs", async {
        while !gate.started.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let cancelled = raw
        .result(2, "tasks/cancel", json!({"taskId": task_id}))
        .await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["taskId"], task_id.as_str());
    within("the handler is cancelled", async {
        while !gate.cancelled.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // It stays cancelled, even though its handler answered.
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(raw.get(3, &task_id).await["status"], "cancelled");
    // Cancelling a finished task is -32602; its result is an error.
    assert_eq!(
        raw.error(4, "tasks/cancel", json!({"taskId": task_id}))
            .await,
        -32602
    );
    let result = raw
        .request(5, "tasks/result", json!({"taskId": task_id}))
        .await;
    assert!(result.get("error").is_some(), "{result}");
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_listed_a_page_at_a_time_and_only_to_their_session() {
    let gate = Arc::new(Gate::default());
    let store = Arc::new(MemoryTaskStore::new());
    let mut settings = Settings::default();
    settings.page_size = 2;
    let server = server(gate.clone(), store.clone(), settings);
    let running = serve(&server).await;
    let addr = running.local_addr();
    let (raw, _) = Raw::open(addr, V, json!({})).await;
    let mut ids = Vec::new();
    for id in 1..=3 {
        let created = raw
            .result(
                id,
                "tools/call",
                call_as_task("waits", json!({}), Some(60_000)),
            )
            .await;
        ids.push(created["task"]["taskId"].as_str().unwrap().to_owned());
    }
    let first = raw.result(10, "tasks/list", json!({})).await;
    assert_eq!(first["tasks"].as_array().unwrap().len(), 2, "{first}");
    let cursor = first["nextCursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let second = raw
        .result(11, "tasks/list", json!({"cursor": cursor}))
        .await;
    assert_eq!(second["tasks"].as_array().unwrap().len(), 1, "{second}");
    assert!(second.get("nextCursor").is_none(), "{second}");
    let mut listed: Vec<String> = first["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["tasks"].as_array().unwrap())
        .map(|t| t["taskId"].as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    ids.sort();
    assert_eq!(listed, ids);
    assert_eq!(
        raw.error(12, "tasks/list", json!({"cursor": "made-up"}))
            .await,
        -32602
    );
    // Another session sees none of them: not found, as an unknown id.
    let (other, _) = Raw::open(addr, V, json!({})).await;
    let theirs = other.result(20, "tasks/list", json!({})).await;
    assert_eq!(theirs["tasks"], json!([]), "{theirs}");
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let code = other.error(21, method, json!({"taskId": ids[0]})).await;
        assert_eq!(code, -32602, "{method}");
        let code = other
            .error(22, method, json!({"taskId": "no-such-task"}))
            .await;
        assert_eq!(code, -32602, "{method}");
    }
    // Still running for their own session.
    assert_eq!(raw.get(30, &ids[0]).await["status"], "working");
    for id in &ids {
        raw.result(31, "tasks/cancel", json!({"taskId": id})).await;
    }
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_needing_input_is_input_required_and_asks_through_tasks_result() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(Arc::default(), store.clone(), Settings::default());
    let running = serve(&server).await;
    let (raw, _) = Raw::open(running.local_addr(), V, json!({"elicitation": {}})).await;
    let created = raw
        .result(
            1,
            "tools/call",
            call_as_task("asks", json!({}), Some(60_000)),
        )
        .await;
    let task_id = created["task"]["taskId"].as_str().unwrap().to_owned();
    until(&raw, &task_id, "input_required").await;
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/result",
        "params": {"taskId": task_id}});
    let mut stream = raw.send(&body).await;
    let (_, question) = within("the question", stream.next_message()).await.unwrap();
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str(),
        "{question}"
    );
    raw.answer(
        &question["id"],
        json!({"action": "accept", "content": {"name": "ada"}}),
    )
    .await;
    let answer = answer_of(stream, 2).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "hello ada",
        "{answer}"
    );
    assert_eq!(raw.get(3, &task_id).await["status"], "completed");
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_has_the_client_run_sampling_as_a_task() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(Arc::default(), store, Settings::default());
    let running = serve(&server).await;
    let addr = running.local_addr();
    let caps = json!({"sampling": {}, "tasks": {"cancel": {}, "requests": {"sampling": {"createMessage": {}}}}});
    let (raw, _) = Raw::open(addr, V, caps).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "samples_as_task", "arguments": {}}});
    let mut stream = raw.send(&body).await;
    let (_, create) = within("sampling", stream.next_message()).await.unwrap();
    assert_eq!(create["method"], "sampling/createMessage", "{create}");
    assert!(create["params"]["task"].is_object(), "{create}");
    let task = |status: &str| {
        json!({"taskId": "c-1", "status": status, "createdAt": "2025-11-25T10:30:00Z",
            "lastUpdatedAt": "2025-11-25T10:30:00Z", "ttl": null, "pollInterval": 10})
    };
    raw.answer(&create["id"], json!({"task": task("working")}))
        .await;
    let (_, poll) = within("tasks/get", stream.next_message()).await.unwrap();
    assert_eq!(poll["method"], "tasks/get", "{poll}");
    assert_eq!(poll["params"]["taskId"], "c-1");
    raw.answer(&poll["id"], task("completed")).await;
    let (_, take) = within("tasks/result", stream.next_message()).await.unwrap();
    assert_eq!(take["method"], "tasks/result", "{take}");
    raw.answer(
        &take["id"],
        json!({"role": "assistant", "content": {"type": "text", "text": "leaves fall"},
            "model": "m-1", "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "c-1"}}}),
    )
    .await;
    let answer = answer_of(stream, 1).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "m-1 answered task c-1",
        "{answer}"
    );
    // A client that did not declare task-augmented sampling is not asked.
    let (plain, _) = Raw::open(addr, V, json!({"sampling": {}})).await;
    let answer = plain
        .result(
            2,
            "tools/call",
            json!({"name": "samples_as_task", "arguments": {}}),
        )
        .await;
    let text = answer["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("not as a task"), "{text}");
    assert!(
        text.contains("tasks.requests.sampling.createMessage"),
        "{text}"
    );
    running.shutdown(Duration::from_secs(1)).await;
}
