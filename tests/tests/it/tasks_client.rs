//! Tasks end to end: modelctx-client's `call_tool_as_task` and `TaskHandle` against the modelctx
//! server's tasks (2026-07-28, the `io.modelcontextprotocol/tasks` extension), over in-memory
//! channels and Streamable HTTP: a task created, polled, fed input, cancelled, expired; unknown
//! ids; a tool the server runs at once; the server's tables empty after.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelctx_client::{
    Client, ClientBuilder, Elicitation, Elicited, Era, Error, TaskError, TaskOptions, model, task,
};
use modelctx_server::tasks::{MemoryTaskStore, TaskSupport};
use modelctx_server::{Context, HttpConfig, InputError, NoArgs, Server, Settings, Tool};
use modelctx_tests::client::{connect_in_memory, serve_http};
use modelctx_tests::http::within;
use modelctx_types::JsonObject;
use serde_json::{Value, json};

fn object(value: Value) -> JsonObject {
    value.as_object().cloned().expect("an object")
}

/// `work` arguments.
#[derive(serde::Deserialize)]
struct Work {
    /// How many steps of 50 ms.
    steps: u32,
}

/// Works `steps` steps, its progress each step (the task's status message), until cancelled.
async fn work(context: Context, args: Work) -> String {
    for step in 1..=args.steps {
        let message = format!("step {step} of {}", args.steps);
        let _ = context
            .progress(f64::from(step), Some(f64::from(args.steps)), Some(&message))
            .await;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
            () = context.cancelled().cancelled() => return format!("stopped at step {step}"),
        }
    }
    format!("worked {} steps", args.steps)
}

/// Asks for a name, then greets.
async fn ask(context: Context, _: NoArgs) -> Result<String, InputError> {
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

async fn hello(_: NoArgs) -> &'static str {
    "hello"
}

fn server(store: Arc<MemoryTaskStore>, ttl: Duration) -> Server {
    let mut settings = Settings::default();
    settings.tasks.ttl = Some(ttl);
    settings.tasks.poll_interval = Duration::from_millis(50);
    let steps = object(
        json!({"type": "object", "properties": {"steps": {"type": "integer"}},
        "required": ["steps"]}),
    );
    let empty = object(json!({"type": "object"}));
    Server::builder("tasks", "1.0.0")
        .tool(
            Tool::with_input_schema("work", steps.clone(), work)
                .task_support(TaskSupport::Optional),
        )
        .tool(Tool::with_input_schema("only_task", steps, work).task_support(TaskSupport::Required))
        .tool(
            Tool::with_input_schema("ask", empty.clone(), ask).task_support(TaskSupport::Optional),
        )
        .tool(Tool::with_input_schema("hello", empty, hello))
        .task_store_shared(store)
        .settings(settings)
        .build()
}

/// A client that answers elicitations with the name "Ada" and counts them.
fn builder(asked: Arc<Mutex<usize>>) -> ClientBuilder {
    Client::builder("tasks-client", "1.0.0").on_elicitation(move |elicitation| {
        *asked.lock().unwrap() += 1;
        async move {
            match elicitation {
                Elicitation::Form { .. } => Ok(Elicited::accept(object(json!({"name": "Ada"})))),
                other => Err(modelctx_client::InputError::new(format!(
                    "unexpected {other:?}"
                ))),
            }
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

/// The whole life of tasks, over one connection of `client`.
async fn lifecycle(
    client: &Client,
    server: &Server,
    store: &MemoryTaskStore,
    asked: &Mutex<usize>,
) {
    assert_eq!(client.era(), Some(Era::Modern));

    // Created, polled (its progress as its status), completed.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let options = TaskOptions::new()
        .poll_bounds(Duration::from_millis(10), Duration::from_millis(100))
        .on_status({
            let seen = seen.clone();
            move |t| seen.lock().unwrap().push(t.clone())
        });
    let handle = within(
        "the task",
        client.call_tool_as_task("work", json!({"steps": 6}), options),
    )
    .await
    .unwrap();
    let id = handle.id().expect("a task").to_owned();
    let result = within("its result", handle.wait()).await.unwrap();
    assert_eq!(text(&result), "worked 6 steps");
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().all(|t| t.task_id == id), "{seen:?}");
    assert_eq!(seen.last().unwrap().status, task::TaskStatus::Completed);
    assert!(
        seen.iter().any(|t| t
            .status_message
            .as_deref()
            .is_some_and(|m| m.starts_with("step "))),
        "the progress shows as the status: {seen:?}"
    );
    assert_eq!(
        handle.status().await.unwrap().status,
        task::TaskStatus::Completed
    );

    // Fed input: the elicitation answered with tasks/update, once.
    let handle = client
        .call_tool_as_task("ask", json!({}), TaskOptions::new())
        .await
        .unwrap();
    assert!(handle.id().is_some());
    let result = within("the greeting", handle.wait()).await.unwrap();
    assert_eq!(text(&result), "Hello, Ada!");
    assert_eq!(*asked.lock().unwrap(), 1);

    // Cancelled while it runs.
    let handle = client
        .call_tool_as_task("work", json!({"steps": 400}), TaskOptions::new())
        .await
        .unwrap();
    handle.cancel().await.unwrap();
    let outcome = within("the cancelled task", handle.wait()).await;
    assert!(
        matches!(&outcome, Err(TaskError::Cancelled { task_id, .. }) if Some(task_id.as_str()) == handle.id()),
        "{outcome:?}"
    );
    // Cancelling again is no error.
    handle.cancel().await.unwrap();

    // A task-only tool: refused as a plain call, run as a task.
    let refused = client.call_tool("only_task", json!({"steps": 1})).await;
    assert!(
        matches!(&refused, Err(Error::Remote(e)) if e.code.0 == -32021),
        "{refused:?}"
    );
    let handle = client
        .call_tool_as_task("only_task", json!({"steps": 1}), TaskOptions::new())
        .await
        .unwrap();
    assert_eq!(
        text(&within("only_task", handle.wait()).await.unwrap()),
        "worked 1 steps"
    );

    // A tool that never runs as a task: answered at once, a complete handle.
    let handle = client
        .call_tool_as_task("hello", json!({}), TaskOptions::new())
        .await
        .unwrap();
    assert_eq!(handle.id(), None);
    assert_eq!(text(&handle.wait().await.unwrap()), "hello");

    // Unknown ids.
    let unknown = client.task("no-such-task").status().await;
    assert!(
        matches!(&unknown, Err(TaskError::UnknownTask { task_id, .. }) if task_id == "no-such-task"),
        "{unknown:?}"
    );
    let unknown = client.task("no-such-task").cancel().await;
    assert!(
        matches!(&unknown, Err(TaskError::UnknownTask { .. })),
        "{unknown:?}"
    );

    // Expired: past its time to live the server forgets it, and the client says so.
    let handle = client
        .call_tool_as_task("work", json!({"steps": 1}), TaskOptions::new())
        .await
        .unwrap();
    let ttl = handle.last_status().unwrap().ttl.expect("a ttl");
    within("the result", handle.wait()).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    let expired = handle.status().await;
    assert!(
        matches!(&expired, Err(TaskError::Expired { .. })),
        "{expired:?}"
    );

    empty_after(server, store).await;
}

#[tokio::test]
async fn tasks_in_memory_created_polled_fed_cancelled_expired_and_freed() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(store.clone(), Duration::from_millis(800));
    let asked = Arc::new(Mutex::new(0));
    let client = connect_in_memory(&server, builder(asked.clone())).await;
    lifecycle(&client, &server, &store, &asked).await;
    client.close().await;
}

#[tokio::test]
async fn tasks_over_http_created_polled_fed_cancelled_expired_and_freed() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(store.clone(), Duration::from_millis(800));
    let (_running, url) = serve_http(&server, HttpConfig::default()).await;
    let asked = Arc::new(Mutex::new(0));
    let client = within("connect", builder(asked.clone()).connect_http(&url))
        .await
        .unwrap();
    lifecycle(&client, &server, &store, &asked).await;
    client.close().await;
}

#[tokio::test]
async fn a_legacy_session_calls_as_a_task_or_is_refused_before_sending() {
    let store = Arc::new(MemoryTaskStore::new());
    let server = server(store.clone(), Duration::from_secs(60));
    let asked = Arc::new(Mutex::new(0));
    let legacy = builder(asked).era(modelctx_client::EraChoice::Legacy);
    let client = connect_in_memory(&server, legacy).await;
    assert_eq!(client.era(), Some(Era::Legacy));
    if client
        .server_capabilities_json()
        .is_some_and(|c| c.contains_key("tasks"))
    {
        // The server runs 2025-11-25 tasks too: then the call is a task, kept for the ttl the
        // client asks (the tables empty once it has passed).
        let handle = client
            .call_tool_as_task(
                "work",
                json!({"steps": 2}),
                TaskOptions::new().ttl(Duration::from_secs(2)),
            )
            .await
            .unwrap();
        assert!(handle.id().is_some());
        assert_eq!(
            text(&within("work", handle.wait()).await.unwrap()),
            "worked 2 steps"
        );
    } else {
        let refused = client
            .call_tool_as_task("work", json!({"steps": 2}), TaskOptions::new())
            .await;
        assert!(
            matches!(&refused, Err(TaskError::NotSupported(_))),
            "{refused:?}"
        );
    }
    client.close().await;
    empty_after(&server, &store).await;
}
