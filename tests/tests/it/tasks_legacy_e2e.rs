//! The experimental tasks of 2025-11-25 end to end with modelctx on both sides: the client's
//! `call_tool_as_task` and `TaskHandle` (a legacy session) against the server's tasks, over
//! Streamable HTTP and over stdio (a line-framed pipe): a task created (`params.task`), polled
//! (`tasks/get`), its result taken (`tasks/result`, which waits until the task is done), fed
//! input the legacy way (the task's elicitation asked on the stream of `tasks/result`, answered
//! by the client, the task `input_required` then `working` again), cancelled (`tasks/cancel`,
//! after which `tasks/result` answers -32602), expired (past its ttl `tasks/get` finds nothing),
//! and listed page by page (`tasks/list` with a cursor). The other direction: the server's
//! task-augmented sampling and elicitation answered as tasks of the client's (`receive_tasks`),
//! which the client forgets after their ttl. The server's store and runner and the client's
//! table of tasks are empty after.
//!
//! A waiting `tasks/result` wakes on its task's changes: while the task waits (here on a gate
//! the test holds) it does not read the store again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelctx_client::{
    CallOptions, Client, ClientBuilder, Elicitation, Elicited, Era, EraChoice, TaskError,
    TaskOptions, TaskReceiving, model, task,
};
use modelctx_server::tasks::{
    MemoryTaskStore, TaskPage, TaskRecord, TaskStore, TaskStoreFuture, TaskSupport, TaskUpdate,
    Updated,
};
use modelctx_server::{Context, HttpConfig, InputError, NoArgs, Server, Settings, Tool};
use modelctx_stdio::{LineCodec, LineReader, LineWriter};
use modelctx_tests::client::{sampled, serve_http, text};
use modelctx_tests::http::within;
use modelctx_types::consts::{TasksList, TasksResult};
use serde_json::{Value, json};

use crate::tasks_server::{ask, empty_after, hello, object, work};

/// The server's tasks live this long unless the client asks for less.
const TTL: Duration = Duration::from_secs(8);
/// The time to live the client asks for.
const SHORT: Duration = Duration::from_millis(500);
/// The time to live the server asks of the client's tasks (and the longest the client gives).
const CLIENT_TTL: Duration = Duration::from_millis(1500);

/// A [`MemoryTaskStore`] that counts the reads of each task (`get`).
#[derive(Debug, Default)]
struct Counting {
    inner: Arc<MemoryTaskStore>,
    reads: Mutex<std::collections::HashMap<String, usize>>,
}

impl Counting {
    fn reads(&self, task_id: &str) -> usize {
        self.reads
            .lock()
            .unwrap()
            .get(task_id)
            .copied()
            .unwrap_or(0)
    }
}

impl TaskStore for Counting {
    fn create<'a>(&'a self, record: &'a TaskRecord) -> TaskStoreFuture<'a, ()> {
        self.inner.create(record)
    }

    fn get<'a>(
        &'a self,
        task_id: &'a str,
        principal: Option<&'a str>,
    ) -> TaskStoreFuture<'a, Option<TaskRecord>> {
        *self
            .reads
            .lock()
            .unwrap()
            .entry(task_id.to_owned())
            .or_default() += 1;
        self.inner.get(task_id, principal)
    }

    fn update<'a>(
        &'a self,
        task_id: &'a str,
        principal: Option<&'a str>,
        update: &'a TaskUpdate,
    ) -> TaskStoreFuture<'a, Option<Updated>> {
        self.inner.update(task_id, principal, update)
    }

    fn list<'a>(
        &'a self,
        principal: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> TaskStoreFuture<'a, TaskPage> {
        self.inner.list(principal, cursor, limit)
    }

    fn remove<'a>(&'a self, task_id: &'a str) -> TaskStoreFuture<'a, ()> {
        self.inner.remove(task_id)
    }

    fn purge_expired(&self) -> TaskStoreFuture<'_, usize> {
        self.inner.purge_expired()
    }

    fn count(&self) -> TaskStoreFuture<'_, usize> {
        self.inner.count()
    }
}

/// What a test holds of its server.
struct Fixture {
    server: Server,
    store: Arc<Counting>,
    /// Each permit lets one `gated` call finish.
    gate: Arc<tokio::sync::Semaphore>,
}

/// The server: `work`, `ask` and `hello` (the fixtures of `tasks_server`), `gated` (asks for a
/// name, then waits for a permit of the gate), and `delegate` (has the client run a sampling
/// and an elicitation as tasks, then checks that the client forgot both after their ttl); two
/// tasks a page of `tasks/list`.
fn fixture() -> Fixture {
    let store = Arc::new(Counting::default());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut settings = Settings::default();
    settings.tasks.ttl = Some(TTL);
    settings.tasks.poll_interval = Duration::from_millis(20);
    settings.page_size = 2;
    let ms = object(json!({"type": "object", "properties": {"ms": {"type": "integer"}}}));
    let empty = object(json!({"type": "object"}));
    let gated = {
        let gate = gate.clone();
        move |context: Context, _: NoArgs| {
            let gate = gate.clone();
            async move {
                let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
                let answer = context.keyed("name").elicit("Your name?", schema).await?;
                let name = answer.content.unwrap_or_default()["name"].clone();
                gate.acquire().await.expect("the gate stays open").forget();
                Ok::<_, InputError>(format!("Hello, {}!", name.as_str().unwrap_or("?")))
            }
        }
    };
    let delegate = |context: Context, _: NoArgs| async move {
        let request = modelctx_server::sampling_request("a haiku", 50);
        let mut sampling = match context
            .create_message_as_task(request, Some(CLIENT_TTL))
            .await
        {
            Ok(task) => task,
            Err(e) => return format!("sampling not as a task: {e}"),
        };
        let sampled = match sampling.wait().await {
            Ok(answer) => answer.model,
            Err(e) => return format!("sampling failed: {e}"),
        };
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let mut elicit = match context
            .elicit_as_task("Your name?", schema, Some(CLIENT_TTL))
            .await
        {
            Ok(task) => task,
            Err(e) => return format!("elicitation not as a task: {e}"),
        };
        let elicited = match elicit.wait().await {
            Ok(answer) => answer.content.unwrap_or_default()["name"].clone(),
            Err(e) => return format!("elicitation failed: {e}"),
        };
        // Past their time to live the client forgets both: `tasks/get` finds neither.
        tokio::time::sleep(CLIENT_TTL + Duration::from_millis(300)).await;
        let gone = [
            sampling.status().await.is_err(),
            elicit.status().await.is_err(),
        ];
        format!("{sampled} {elicited} forgotten: {gone:?}")
    };
    let server = Server::builder("tasks-legacy-e2e", "1.0.0")
        .tool(Tool::with_input_schema("work", ms, work).task_support(TaskSupport::Optional))
        .tool(
            Tool::with_input_schema("ask", empty.clone(), ask).task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::with_input_schema("gated", empty.clone(), gated)
                .task_support(TaskSupport::Required),
        )
        .tool(Tool::with_input_schema("delegate", empty.clone(), delegate))
        .tool(Tool::with_input_schema("hello", empty, hello))
        .task_store_shared(store.clone())
        .settings(settings)
        .build();
    Fixture {
        server,
        store,
        gate,
    }
}

/// A 2025-11-25 client that answers elicitations with "Ada" (counting them) and samplings with
/// the model "model-x", and runs the server's task-augmented requests as tasks of its own,
/// kept at most [`CLIENT_TTL`] and polled every 20 ms.
fn builder(asked: Arc<AtomicUsize>) -> ClientBuilder {
    let mut receiving = TaskReceiving::new().ttl(CLIENT_TTL, CLIENT_TTL);
    receiving.poll_interval = Duration::from_millis(20);
    Client::builder("tasks-legacy-e2e", "1.0.0")
        .era(EraChoice::Legacy)
        .on_elicitation(move |elicitation| {
            asked.fetch_add(1, Ordering::SeqCst);
            async move {
                match elicitation {
                    Elicitation::Form { .. } => {
                        Ok(Elicited::accept(object(json!({"name": "Ada"}))))
                    }
                    other => Err(modelctx_client::InputError::new(format!(
                        "unexpected {other:?}"
                    ))),
                }
            }
        })
        .on_sampling(|_| async {
            Ok(sampled(json!({
                "role": "assistant", "model": "model-x",
                "content": {"type": "text", "text": "An old silent pond"},
            })))
        })
        .receive_tasks(receiving)
}

fn options() -> TaskOptions {
    TaskOptions::new().poll_bounds(Duration::from_millis(10), Duration::from_millis(50))
}

/// Polls task `id` until its status is `status`.
async fn until(client: &Client, id: &str, status: model::TaskStatus) -> task::TaskStatus {
    within(task::status_str(status), async {
        loop {
            let info = client.task(id).status().await.unwrap();
            if info.status == status {
                return info.status;
            }
            assert!(
                !info.is_terminal(),
                "settled {:?} while waiting for {status:?}",
                info.status
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// The whole life of legacy tasks over one connection of `client`.
async fn lifecycle(client: &Client, fixture: &Fixture, asked: &AtomicUsize) {
    assert_eq!(client.era(), Some(Era::Legacy));
    let tasks = client
        .server_capabilities_json()
        .and_then(|c| c.get("tasks").cloned())
        .expect("the server declares its tasks");
    assert!(tasks["requests"]["tools"]["call"].is_object(), "{tasks}");

    // Created (`params.task`), polled (`tasks/get`) to its end, its result (`tasks/result`).
    let seen = Arc::new(Mutex::new(Vec::new()));
    let polled = options().on_status({
        let seen = seen.clone();
        move |t| seen.lock().unwrap().push(t.status)
    });
    let handle = within(
        "create",
        client.call_tool_as_task("work", json!({"ms": 200}), polled),
    )
    .await
    .unwrap();
    let id = handle.id().expect("a task").to_owned();
    let mut created = vec![id.clone()];
    let first = handle.last_status().expect("the created task");
    assert_eq!(first.ttl, Some(TTL), "the server's ttl when none is asked");
    assert_eq!(first.poll_interval, Some(Duration::from_millis(20)));
    let result = within("its result", handle.wait()).await.unwrap();
    assert_eq!(text(&result), format!("waited 200ms in task {id}"));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.first(), Some(&task::TaskStatus::Working), "{seen:?}");
    assert_eq!(seen.last(), Some(&task::TaskStatus::Completed), "{seen:?}");

    // `tasks/result` at once: it waits until the task is done.
    let handle = client
        .call_tool_as_task("work", json!({"ms": 300}), options())
        .await
        .unwrap();
    let id = handle.id().unwrap().to_owned();
    created.push(id.clone());
    let result = within("tasks/result", handle.result()).await.unwrap();
    assert_eq!(text(&result), format!("waited 300ms in task {id}"));
    assert_eq!(
        handle.status().await.unwrap().status,
        task::TaskStatus::Completed
    );

    // Fed input, the legacy way: `input_required` until `tasks/result` carries the question to
    // the client, `working` again once answered (the handler then waits on the gate), completed
    // with the answer once the gate opens. Meanwhile the waiting `tasks/result` reads the task
    // only when it changes: not while it waits on the gate.
    let before = asked.load(Ordering::SeqCst);
    let handle = client
        .call_tool_as_task("gated", json!({}), options())
        .await
        .unwrap();
    let id = handle.id().unwrap().to_owned();
    created.push(id.clone());
    until(client, &id, model::TaskStatus::InputRequired).await;
    assert_eq!(
        asked.load(Ordering::SeqCst),
        before,
        "not asked before tasks/result"
    );
    let waiting = tokio::spawn({
        let handle = handle.clone();
        async move { handle.result().await }
    });
    until(client, &id, model::TaskStatus::Working).await;
    assert_eq!(asked.load(Ordering::SeqCst), before + 1, "asked once");
    let reads = fixture.store.reads(&id);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = fixture.store.reads(&id) - reads;
    assert!(
        idle <= 1,
        "a waiting tasks/result read its unchanged task {idle} times"
    );
    fixture.gate.add_permits(1);
    let result = within("the greeting", waiting).await.unwrap().unwrap();
    assert_eq!(text(&result), "Hello, Ada!");
    assert_eq!(asked.load(Ordering::SeqCst), before + 1);

    // The same flow without a gate: `wait` sees `input_required` and answers through
    // `tasks/result`.
    let handle = client
        .call_tool_as_task("ask", json!({}), options())
        .await
        .unwrap();
    created.push(handle.id().unwrap().to_owned());
    let result = within("ask", handle.wait()).await.unwrap();
    assert_eq!(text(&result), "Hello, Ada!");
    assert_eq!(asked.load(Ordering::SeqCst), before + 2);

    // Cancelled while it runs: cancelled for good, and `tasks/result` says so with -32602 (the
    // request has no result: it was cancelled), not an internal error.
    let handle = client
        .call_tool_as_task("work", json!({"ms": 60000}), options())
        .await
        .unwrap();
    let id = handle.id().unwrap().to_owned();
    created.push(id.clone());
    within("cancel", handle.cancel()).await.unwrap();
    let outcome = within("the cancelled task", handle.wait()).await;
    assert!(
        matches!(&outcome, Err(TaskError::Cancelled { task_id, .. }) if *task_id == id),
        "{outcome:?}"
    );
    let mut params = modelctx_types::JsonObject::new();
    params.insert("taskId".into(), Value::from(id.as_str()));
    let raw = within(
        "tasks/result of a cancelled task",
        client.request(TasksResult::VALUE, params, CallOptions::new()),
    )
    .await;
    match raw {
        Err(modelctx_client::Error::Remote(error)) => {
            assert_eq!(error.code.0, -32602, "{}", error.message);
            assert!(error.message.contains("cancelled"), "{}", error.message);
        }
        other => panic!("tasks/result of a cancelled task: {other:?}"),
    }
    let again = client.task(&id).result().await;
    assert!(
        matches!(&again, Err(TaskError::Cancelled { .. })),
        "{again:?}"
    );
    // Final: cancelling again changes nothing.
    client.task(&id).cancel().await.unwrap();
    assert_eq!(
        client.task(&id).status().await.unwrap().status,
        task::TaskStatus::Cancelled
    );

    // Listed page by page (two a page): every task of this client, each once.
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut params = modelctx_types::JsonObject::new();
        if let Some(cursor) = &cursor {
            params.insert("cursor".into(), Value::from(cursor.as_str()));
        }
        let page = within(
            "tasks/list",
            client.request(TasksList::VALUE, params, CallOptions::new()),
        )
        .await
        .unwrap();
        pages += 1;
        let tasks = page["tasks"].as_array().expect("tasks");
        assert!(tasks.len() <= 2, "{page}");
        listed.extend(
            tasks
                .iter()
                .map(|t| t["taskId"].as_str().unwrap().to_owned()),
        );
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert!(pages >= 3, "{pages} pages");
    let mut unique = listed.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), listed.len(), "listed twice: {listed:?}");
    created.sort();
    assert_eq!(unique, created, "the tasks listed are those created");

    // Expired: the client asks for a short ttl; past it `tasks/get` finds nothing.
    let handle = client
        .call_tool_as_task("work", json!({"ms": 10}), options().ttl(SHORT))
        .await
        .unwrap();
    assert_eq!(handle.last_status().unwrap().ttl, Some(SHORT));
    within("the result", handle.wait()).await.unwrap();
    tokio::time::sleep(SHORT + Duration::from_millis(200)).await;
    let expired = handle.status().await;
    assert!(
        matches!(&expired, Err(TaskError::Expired { .. })),
        "{expired:?}"
    );

    // A tool that does not run as a task: answered at once.
    let handle = client
        .call_tool_as_task("hello", json!({}), options())
        .await
        .unwrap();
    assert_eq!(handle.id(), None);
    assert_eq!(text(&handle.wait().await.unwrap()), "hello");

    // The other direction: the server's sampling and elicitation run as tasks of the client's,
    // which forgets them after their ttl.
    let delegated = within("delegate", client.call_tool("delegate", json!({})))
        .await
        .unwrap();
    assert_eq!(text(&delegated), "model-x \"Ada\" forgotten: [true, true]");
    assert_eq!(asked.load(Ordering::SeqCst), before + 3);

    // Every table empty: the server's store and runner, the client's tasks.
    empty_after(&fixture.server, &fixture.store.inner).await;
    let sizes = client.table_sizes().await.expect("the client runs");
    assert_eq!(sizes.tasks, 0, "{sizes:?}");
}

#[tokio::test]
async fn legacy_tasks_over_http_created_polled_fed_cancelled_expired_listed_and_freed() {
    let fixture = fixture();
    let (_running, url) = serve_http(&fixture.server, HttpConfig::default()).await;
    let asked = Arc::new(AtomicUsize::new(0));
    let client = within("connect", builder(asked.clone()).connect_http(&url))
        .await
        .unwrap();
    Box::pin(lifecycle(&client, &fixture, &asked)).await;
    client.close().await;
}

#[tokio::test]
async fn legacy_tasks_over_stdio_created_polled_fed_cancelled_expired_listed_and_freed() {
    let fixture = fixture();
    let (client_side, server_side) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_side);
    let server = fixture.server.clone();
    let serving = tokio::spawn(async move {
        server
            .serve_lines(
                LineReader::new(server_read, LineCodec::new()),
                LineWriter::new(server_write),
            )
            .await
    });
    let (client_read, client_write) = tokio::io::split(client_side);
    let asked = Arc::new(AtomicUsize::new(0));
    let client = within(
        "connect",
        builder(asked.clone()).connect_lines(
            LineReader::new(client_read, LineCodec::new()),
            LineWriter::new(client_write),
        ),
    )
    .await
    .unwrap();
    Box::pin(lifecycle(&client, &fixture, &asked)).await;
    client.close().await;
    within("the server to end", serving).await.unwrap().unwrap();
}
