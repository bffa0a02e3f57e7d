//! Task status notifications, both eras, from the modelctx server to the modelctx client and
//! to raw HTTP clients:
//!
//! * 2025-11-25: `notifications/tasks/status` reaches the connection (in-memory) or legacy HTTP
//!   session (its standalone stream) that made the task, at each change of its status, in
//!   order; another session hears nothing. The client's `TaskHandle::wait` is woken by them
//!   (its polls are set 10 s apart, so only a notification ends the wait in time).
//! * 2026-07-28: a `subscriptions/listen` stream naming the task (`taskIds`, the extension
//!   declared on the listen request; -32021 without) hears `notifications/tasks` with the task
//!   as `tasks/get` gives it, in order, tagged with its subscription id; another principal's
//!   stream naming the same id hears nothing. The client's wait asks for it on its listen
//!   stream and is woken by it.
//!
//! The server's tables are empty after.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use modelctx_client::{
    Client, ClientBuilder, Elicitation, Elicited, Era, EraChoice, Notifications,
    ServerNotification, TaskInfo, TaskOptions, model,
};
use modelctx_server::tasks::{MemoryTaskStore, TaskSupport};
use modelctx_server::{HttpConfig, Server, Settings, Tool};
use modelctx_tests::client::{connect_in_memory, serve_http};
use modelctx_tests::http::{RawResponse, modern_headers, post, within};
use modelctx_types::consts::{SubscriptionsListen, TasksUpdate, ToolsCall};
use serde_json::{Value, json};

use crate::tasks_server::{EXT, TwoCallers, ask, object, work};

/// A server of the `ask` (a question, then a greeting) and `work` (a wait) tools as tasks,
/// guarded by [`TwoCallers`] when `guarded`.
fn server(store: Arc<MemoryTaskStore>, guarded: bool) -> Server {
    let mut settings = Settings::default();
    settings.tasks.ttl = Some(Duration::from_secs(2));
    settings.tasks.poll_interval = Duration::from_millis(50);
    let wait = object(json!({"type": "object", "properties": {"ms": {"type": "integer"}}}));
    let empty = object(json!({"type": "object"}));
    let builder = Server::builder("tasks-notify", "1.0.0")
        .tool(Tool::with_input_schema("work", wait, work).task_support(TaskSupport::Optional))
        .tool(Tool::with_input_schema("ask", empty, ask).task_support(TaskSupport::Optional))
        .task_store_shared(store)
        .settings(settings);
    if guarded {
        builder.auth(TwoCallers).build()
    } else {
        builder.build()
    }
}

/// A client answering elicitations with the name "Ada".
fn builder(era: EraChoice) -> ClientBuilder {
    Client::builder("tasks-notify-client", "1.0.0")
        .era(era)
        .on_elicitation(|elicitation| async move {
            match elicitation {
                Elicitation::Form { .. } => Ok(Elicited::accept(object(json!({"name": "Ada"})))),
                other => Err(modelctx_client::InputError::new(format!(
                    "unexpected {other:?}"
                ))),
            }
        })
}

fn text(result: &model::CallToolResult) -> String {
    match result.content.first() {
        Some(model::ContentBlock::TextContent(t)) => t.text.clone(),
        other => panic!("not a text block: {other:?}"),
    }
}

/// Waits until the store holds nothing and no handler runs as a task.
async fn empty_after(server: &Server, store: &MemoryTaskStore) {
    within("the tables to empty", async {
        while !store.is_empty() || server.load().tasks > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The task statuses `notifications` has heard so far (waiting `quiet` for each next one).
async fn heard(notifications: &mut Notifications, quiet: Duration) -> Vec<TaskInfo> {
    let mut tasks = Vec::new();
    while let Ok(Ok(n)) = tokio::time::timeout(quiet, notifications.recv()).await {
        if let ServerNotification::TaskStatus(task) = n {
            tasks.push(task);
        }
    }
    tasks
}

/// Polls 10 s apart: a wait that ends sooner was woken by a notification.
fn slow_polls() -> TaskOptions {
    TaskOptions::new().poll_bounds(Duration::from_secs(10), Duration::from_secs(10))
}

/// 2025-11-25 over `connect`: the client that made a task hears each change of its status in
/// order, and its wait is woken by them; the other client hears nothing.
async fn legacy(server: &Server, store: &MemoryTaskStore, a: Client, b: Client) {
    assert_eq!(a.era(), Some(Era::Legacy));
    let mut heard_a = a.notifications();
    let mut heard_b = b.notifications();
    let handle = a
        .call_tool_as_task("ask", json!({}), slow_polls())
        .await
        .unwrap();
    let id = handle.id().expect("a task").to_owned();
    let result = tokio::time::timeout(Duration::from_secs(5), handle.wait())
        .await
        .expect("woken by the notifications, not the 10 s polls")
        .unwrap();
    assert_eq!(text(&result), "Hello, Ada!");
    let tasks = within(
        "notifications",
        heard(&mut heard_a, Duration::from_millis(300)),
    )
    .await;
    assert!(tasks.iter().all(|t| t.task_id == id), "{tasks:?}");
    let statuses: Vec<&str> = tasks
        .iter()
        .map(|t| modelctx_client::task::status_str(t.status))
        .collect();
    assert_eq!(statuses, ["input_required", "working", "completed"]);
    assert_eq!(
        handle.last_status().map(|t| t.status),
        Some(model::TaskStatus::Completed)
    );
    let foreign = heard(&mut heard_b, Duration::from_millis(300)).await;
    assert!(foreign.is_empty(), "another session heard {foreign:?}");
    a.close().await;
    b.close().await;
    empty_after(server, store).await;
}

#[tokio::test]
async fn legacy_status_reaches_the_connection_that_made_the_task_in_order() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(store.clone(), false);
    let a = connect_in_memory(&server, builder(EraChoice::Legacy)).await;
    let b = connect_in_memory(&server, builder(EraChoice::Legacy)).await;
    Box::pin(legacy(&server, &store, a, b)).await;
}

#[tokio::test]
async fn legacy_status_reaches_the_http_session_that_made_the_task_in_order() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(store.clone(), false);
    let (_running, url) = serve_http(&server, HttpConfig::default()).await;
    let connect = || async {
        let client = within("connect", builder(EraChoice::Legacy).connect_http(&url))
            .await
            .unwrap();
        // The standalone stream, which carries the notifications, is open.
        within("listening", client.listening()).await.unwrap();
        client
    };
    let a = connect().await;
    let b = connect().await;
    Box::pin(legacy(&server, &store, a, b)).await;
}

/// 2026-07-28 over HTTP: the client's wait asks for the task on its listen stream, is woken by
/// `notifications/tasks`, and the application hears the task's states, the last completed.
#[tokio::test]
async fn the_clients_wait_is_woken_by_the_listen_stream() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(store.clone(), false);
    let (_running, url) = serve_http(&server, HttpConfig::default()).await;
    let client = within("connect", builder(EraChoice::Modern).connect_http(&url))
        .await
        .unwrap();
    assert_eq!(client.era(), Some(Era::Modern));
    let mut notifications = client.notifications();
    let handle = client
        .call_tool_as_task("work", json!({"ms": 800}), slow_polls())
        .await
        .unwrap();
    let id = handle.id().expect("a task").to_owned();
    let result = tokio::time::timeout(Duration::from_secs(5), handle.wait())
        .await
        .expect("woken by notifications/tasks, not the 10 s polls")
        .unwrap();
    assert!(text(&result).starts_with("waited 800ms"), "{result:?}");
    let tasks = heard(&mut notifications, Duration::from_millis(300)).await;
    assert!(tasks.iter().all(|t| t.task_id == id), "{tasks:?}");
    assert_eq!(
        tasks.last().map(|t| t.status),
        Some(model::TaskStatus::Completed),
        "{tasks:?}"
    );
    client.close().await;
    empty_after(&server, &store).await;
}

/// A raw modern request of `caller` (`Bearer caller`), with the extension declared or not.
async fn raw(
    addr: SocketAddr,
    caller: &str,
    extension: bool,
    id: i64,
    method: &str,
    mut params: Value,
) -> RawResponse {
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
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    post(addr, &headers, &body).await
}

/// The answer of a raw request (JSON, or the first message with an id on its stream).
async fn answer(mut response: RawResponse) -> Value {
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
    panic!("the stream ended without an answer")
}

/// The next message on a listen stream.
async fn next(stream: &mut RawResponse) -> Value {
    within("a notification", stream.next_message())
        .await
        .expect("the stream goes on")
        .1
}

/// 2026-07-28 with raw requests: the listen stream of the task's principal that names it hears
/// each state in order (the result inlined at the end), tagged with its subscription id;
/// another principal's stream naming the same id hears nothing; naming tasks without the
/// extension is refused.
#[tokio::test]
async fn modern_status_reaches_the_principals_listen_streams_that_name_the_task() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(store.clone(), true);
    let (running, _url) = serve_http(&server, HttpConfig::default()).await;
    let addr = running.local_addr();

    let created = answer(
        raw(
            addr,
            "alice",
            true,
            1,
            ToolsCall::VALUE,
            json!({"name": "ask", "arguments": {}}),
        )
        .await,
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();

    let refused = answer(
        raw(
            addr,
            "alice",
            false,
            2,
            SubscriptionsListen::VALUE,
            json!({"notifications": {"taskIds": [id]}}),
        )
        .await,
    )
    .await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");

    let filter = json!({"notifications": {"taskIds": [id]}});
    let mut alice = raw(
        addr,
        "alice",
        true,
        3,
        SubscriptionsListen::VALUE,
        filter.clone(),
    )
    .await;
    let mut bob = raw(addr, "bob", true, 4, SubscriptionsListen::VALUE, filter).await;
    for (stream, sub) in [(&mut alice, 3), (&mut bob, 4)] {
        let ack = next(stream).await;
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
        assert_eq!(
            ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            sub
        );
    }

    // The task waits on its question; the answer moves it on to its end.
    let updated = answer(
        raw(
            addr,
            "alice",
            true,
            5,
            TasksUpdate::VALUE,
            json!({"taskId": id, "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}}}),
        )
        .await,
    )
    .await;
    assert!(updated.get("result").is_some(), "{updated}");
    let mut statuses = Vec::new();
    loop {
        let note = next(&mut alice).await;
        assert_eq!(note["method"], "notifications/tasks", "{note}");
        assert_eq!(note["params"]["taskId"], id.as_str());
        assert_eq!(
            note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            3
        );
        let status = note["params"]["status"].as_str().unwrap().to_owned();
        statuses.push(status.clone());
        if status == "completed" {
            assert_eq!(
                note["params"]["result"]["content"][0]["text"], "Hello, Ada!",
                "{note}"
            );
            break;
        }
    }
    assert_eq!(statuses, ["working", "completed"]);
    let foreign = tokio::time::timeout(Duration::from_millis(300), bob.next_message()).await;
    assert!(
        !matches!(&foreign, Ok(Some((_, m))) if m["method"] == "notifications/tasks"),
        "another principal heard {foreign:?}"
    );
    drop(alice);
    drop(bob);
    empty_after(&server, &store).await;
}
