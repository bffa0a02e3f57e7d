//! Tasks against scripted servers, both eras: a tool called as a task (created, polled, fed
//! input, cancelled, failed, expired, unknown), and a 2025-11-25 server's task-augmented
//! elicitation run as a task of the client's.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Era, Fake, builder, connect, params, text, text_result};
use modelctx_client::{
    Elicitation, Elicited, ProtocolVersion, TaskError, TaskOptions, TaskReceiving, task,
};
use modelctx_types::Request;
use serde_json::{Value, json};
use tokio::time::Instant;

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A modern server with tools and the tasks extension.
fn modern_caps() -> Value {
    json!({"tools": {}, "extensions": {TASKS: {}}})
}

/// A 2025-11-25 server with tools and tasks.
fn legacy_caps() -> Value {
    json!({"tools": {}, "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}})
}

fn legacy() -> modelctx_client::ClientBuilder {
    builder().protocol_version(ProtocolVersion::V2025_11_25)
}

/// A 2026-07-28 task in `status` (with `extra` members), as `tasks/get` or the call answers it.
fn modern_task(id: &str, status: &str, result_type: &str, extra: Value) -> Value {
    let mut task = json!({
        "resultType": result_type,
        "taskId": id,
        "status": status,
        "createdAt": "2026-11-28T10:00:00Z",
        "lastUpdatedAt": "2026-11-28T10:00:01Z",
        "ttlMs": 60000,
        "pollIntervalMs": 1000,
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        task[k] = v;
    }
    task
}

/// A 2025-11-25 task.
fn legacy_task(id: &str, status: &str, ttl: u64) -> Value {
    json!({
        "taskId": id,
        "status": status,
        "createdAt": "2025-11-28T10:00:00Z",
        "lastUpdatedAt": "2025-11-28T10:00:01Z",
        "ttl": ttl,
        "pollInterval": 500,
    })
}

/// Takes the next `method` request and checks it names task `id` (and, in the modern era,
/// declares the extension: every request of the extension must).
async fn expect_about(fake: &mut Fake, method: &str, id: &str) -> Request {
    let request = fake.expect_request(method).await;
    let params = params(&request);
    assert_eq!(params["taskId"], json!(id), "{method}");
    let meta = &params["_meta"];
    if meta
        .get("io.modelcontextprotocol/protocolVersion")
        .is_some()
    {
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"]["extensions"][TASKS],
            json!({}),
            "{method} declares the extension"
        );
    } else {
        assert!(
            meta.get("io.modelcontextprotocol/clientCapabilities")
                .is_none(),
            "{params}"
        );
    }
    request
}

// -- 2026-07-28 -----------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn modern_task_is_created_polled_at_its_interval_and_completed() {
    let (client, mut fake) = connect(Era::Modern, builder(), modern_caps()).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let options = TaskOptions::new().on_status({
        let seen = seen.clone();
        move |t| seen.lock().unwrap().push(t.status)
    });
    let (handle, call) = fake
        .answer(
            "tools/call",
            modern_task("t1", "working", "task", json!({})),
            client.call_tool_as_task("build", json!({"n": 1}), options),
        )
        .await;
    let caps = &params(&call)["_meta"]["io.modelcontextprotocol/clientCapabilities"];
    assert_eq!(caps["extensions"][TASKS], json!({}), "declared on the call");
    let handle = handle.unwrap();
    assert_eq!(handle.id(), Some("t1"));
    assert_eq!(
        handle.last_status().unwrap().ttl,
        Some(Duration::from_secs(60))
    );

    let serve = async {
        let first = expect_about(&mut fake, "tasks/get", "t1").await;
        let at = Instant::now();
        let working = modern_task(
            "t1",
            "working",
            "complete",
            json!({"statusMessage": "half"}),
        );
        fake.reply(&first.id, working).await;
        let second = expect_about(&mut fake, "tasks/get", "t1").await;
        let waited = at.elapsed();
        let done = modern_task(
            "t1",
            "completed",
            "complete",
            json!({"result": text_result("built")}),
        );
        fake.reply(&second.id, done).await;
        waited
    };
    let (result, waited) = tokio::join!(handle.wait(), serve);
    assert_eq!(text(&result.unwrap()), "built");
    assert!(waited >= Duration::from_secs(1), "polled after {waited:?}");
    assert!(waited < Duration::from_secs(2), "polled after {waited:?}");
    use modelctx_client::task::TaskStatus as S;
    assert_eq!(
        *seen.lock().unwrap(),
        [S::Working, S::Working, S::Completed]
    );
    // Known now: no more requests.
    assert_eq!(text(&handle.result().await.unwrap()), "built");

    // A plain call does not declare the extension.
    let (_, call) = fake
        .answer(
            "tools/call",
            common::complete(text_result("x")),
            client.call_tool("t", ()),
        )
        .await;
    let caps = &params(&call)["_meta"]["io.modelcontextprotocol/clientCapabilities"];
    assert!(caps.get("extensions").is_none(), "{caps}");
}

#[tokio::test]
async fn modern_call_answered_at_once_gives_a_complete_handle() {
    let (client, mut fake) = connect(Era::Modern, builder(), modern_caps()).await;
    let (handle, _) = fake
        .answer(
            "tools/call",
            common::complete(text_result("now")),
            client.call_tool_as_task("quick", (), TaskOptions::new()),
        )
        .await;
    let handle = handle.unwrap();
    assert_eq!(handle.id(), None);
    assert_eq!(text(&handle.wait().await.unwrap()), "now");
    assert!(matches!(
        handle.cancel().await,
        Err(TaskError::Finished { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn modern_input_is_answered_once_with_tasks_update() {
    let asked = Arc::new(Mutex::new(0));
    let elicit = builder().on_elicitation({
        let asked = asked.clone();
        move |e| {
            *asked.lock().unwrap() += 1;
            async move {
                match e {
                    Elicitation::Form { .. } => Ok(Elicited::accept(
                        json!({"name": "Ada"}).as_object().cloned().unwrap(),
                    )),
                    other => panic!("{other:?}"),
                }
            }
        }
    });
    let (client, mut fake) = connect(Era::Modern, elicit, modern_caps()).await;
    let (handle, _) = fake
        .answer(
            "tools/call",
            modern_task("t2", "working", "task", json!({})),
            client.call_tool_as_task("hello", (), TaskOptions::new()),
        )
        .await;
    let handle = handle.unwrap();
    let inputs = json!({"inputRequests": {"name": {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": "Your name?", "requestedSchema": {
            "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    }}});
    let serve = async {
        let get = expect_about(&mut fake, "tasks/get", "t2").await;
        let waiting = modern_task("t2", "input_required", "complete", inputs.clone());
        fake.reply(&get.id, waiting.clone()).await;
        let update = expect_about(&mut fake, "tasks/update", "t2").await;
        assert_eq!(
            params(&update)["inputResponses"],
            json!({"name": {"action": "accept", "content": {"name": "Ada"}}})
        );
        fake.reply(&update.id, json!({"resultType": "complete"}))
            .await;
        // Polled again before the server took the answer in: the same key is not asked again.
        let get = expect_about(&mut fake, "tasks/get", "t2").await;
        fake.reply(&get.id, waiting).await;
        let get = expect_about(&mut fake, "tasks/get", "t2").await;
        let done = json!({"result": text_result("Hello, Ada!")});
        fake.reply(&get.id, modern_task("t2", "completed", "complete", done))
            .await;
    };
    let (result, ()) = tokio::join!(handle.wait(), serve);
    assert_eq!(text(&result.unwrap()), "Hello, Ada!");
    assert_eq!(*asked.lock().unwrap(), 1);
    fake.expect_no_request(Duration::from_secs(600), "an update", "tasks/update")
        .await;
}

#[tokio::test]
async fn modern_cancel_failure_and_cancelled_tasks() {
    let (client, mut fake) = connect(Era::Modern, builder(), modern_caps()).await;
    let (handle, _) = fake
        .answer(
            "tools/call",
            modern_task("t3", "working", "task", json!({})),
            client.call_tool_as_task("slow", (), TaskOptions::new()),
        )
        .await;
    let handle = handle.unwrap();
    let (cancelled, request) = fake
        .answer(
            "tasks/cancel",
            json!({"resultType": "complete"}),
            handle.cancel(),
        )
        .await;
    cancelled.unwrap();
    assert_eq!(params(&request)["taskId"], json!("t3"));
    assert_eq!(
        params(&request)["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]
            [TASKS],
        json!({}),
        "tasks/cancel declares the extension"
    );
    let gone = modern_task(
        "t3",
        "cancelled",
        "complete",
        json!({"statusMessage": "stopped"}),
    );
    let (result, _) = fake.answer("tasks/get", gone, handle.wait()).await;
    assert!(
        matches!(&result, Err(TaskError::Cancelled { task_id, message }) if task_id == "t3" && message.as_deref() == Some("stopped")),
        "{result:?}"
    );

    let failing = client.task("t4");
    let failed = modern_task(
        "t4",
        "failed",
        "complete",
        json!({"error": {"code": -32603, "message": "rate limited"}}),
    );
    let (result, _) = fake.answer("tasks/get", failed, failing.wait()).await;
    assert!(
        matches!(&result, Err(TaskError::Failed { error, .. }) if error.message == "rate limited"),
        "{result:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn unknown_and_expired_tasks_are_told_apart() {
    for era in Era::BOTH {
        let (b, caps) = match era {
            Era::Modern => (builder(), modern_caps()),
            Era::Legacy => (legacy(), legacy_caps()),
        };
        let (client, mut fake) = connect(era, b, caps).await;
        let unknown = client.task("nope");
        let result = fake
            .answer_error(
                "tasks/get",
                -32602,
                "Failed to retrieve task: Task not found",
                unknown.status(),
            )
            .await;
        assert!(
            matches!(&result, Err(TaskError::UnknownTask { task_id, .. }) if task_id == "nope"),
            "{era:?}: {result:?}"
        );
        // A task whose ttl (1 s) has passed by the client's clock: expired.
        let created = match era {
            Era::Modern => {
                let mut t = modern_task("t5", "working", "task", json!({}));
                t["ttlMs"] = json!(1000);
                t
            }
            Era::Legacy => json!({"task": legacy_task("t5", "working", 1000)}),
        };
        let call = async {
            if era == Era::Legacy {
                // Its task support is learnt from the listing.
                let listing = json!({"tools": [{"name": "slow", "inputSchema": {"type": "object"},
                    "execution": {"taskSupport": "optional"}}]});
                fake.list_tools(&client, listing).await;
            }
            fake.answer(
                "tools/call",
                created,
                client.call_tool_as_task("slow", (), TaskOptions::new()),
            )
            .await
        };
        let handle = call.await.0.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let result = fake
            .answer_error(
                "tasks/get",
                -32602,
                "Failed to retrieve task: Task not found",
                handle.status(),
            )
            .await;
        assert!(
            matches!(&result, Err(TaskError::Expired { task_id, .. }) if task_id == "t5"),
            "{era:?}: {result:?}"
        );
    }
}

#[tokio::test]
async fn servers_without_tasks_are_refused_before_anything_is_sent() {
    let (client, mut fake) = connect(Era::Modern, builder(), json!({"tools": {}})).await;
    let result = client.call_tool_as_task("t", (), TaskOptions::new()).await;
    assert!(
        matches!(&result, Err(TaskError::NotSupported(why)) if why.contains(TASKS)),
        "{result:?}"
    );
    let result = client.task("x").status().await;
    assert!(
        matches!(&result, Err(TaskError::NotSupported(_))),
        "{result:?}"
    );
    fake.expect_none(Duration::from_millis(100), "a request", |_| true)
        .await;

    let (client, _fake) = connect(Era::Legacy, legacy(), json!({"tools": {}})).await;
    let result = client.call_tool_as_task("t", (), TaskOptions::new()).await;
    assert!(
        matches!(&result, Err(TaskError::NotSupported(why)) if why.contains("tasks.requests.tools.call")),
        "{result:?}"
    );
}

// -- 2025-11-25 -----------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn legacy_task_is_created_with_its_ttl_polled_and_its_result_fetched() {
    let (client, mut fake) = connect(Era::Legacy, legacy(), legacy_caps()).await;
    let listing = json!({"tools": [{"name": "build", "inputSchema": {"type": "object"},
        "execution": {"taskSupport": "required"}}]});
    fake.list_tools(&client, listing).await;
    let options = TaskOptions::new().ttl(Duration::from_secs(5));
    let (handle, call) = fake
        .answer(
            "tools/call",
            json!({"task": legacy_task("L1", "working", 5000)}),
            client.call_tool_as_task("build", json!({}), options),
        )
        .await;
    assert_eq!(params(&call)["task"], json!({"ttl": 5000}));
    let handle = handle.unwrap();
    assert_eq!(handle.id(), Some("L1"));
    let serve = async {
        let get = expect_about(&mut fake, "tasks/get", "L1").await;
        fake.reply(&get.id, legacy_task("L1", "working", 5000))
            .await;
        let get = expect_about(&mut fake, "tasks/get", "L1").await;
        fake.reply(&get.id, legacy_task("L1", "completed", 5000))
            .await;
        let result = expect_about(&mut fake, "tasks/result", "L1").await;
        let mut done = text_result("built");
        done["_meta"] = json!({"io.modelcontextprotocol/related-task": {"taskId": "L1"}});
        fake.reply(&result.id, done).await;
    };
    let (result, ()) = tokio::join!(handle.wait(), serve);
    assert_eq!(text(&result.unwrap()), "built");
}

#[tokio::test]
async fn legacy_input_comes_as_requests_during_tasks_result() {
    let elicit = legacy().on_elicitation(|_| async {
        Ok(Elicited::accept(
            json!({"name": "Grace"}).as_object().cloned().unwrap(),
        ))
    });
    let (client, mut fake) = connect(Era::Legacy, elicit, legacy_caps()).await;
    let listing = json!({"tools": [{"name": "hello", "inputSchema": {"type": "object"},
        "execution": {"taskSupport": "optional"}}]});
    fake.list_tools(&client, listing).await;
    let (handle, _) = fake
        .answer(
            "tools/call",
            json!({"task": legacy_task("L2", "working", 60000)}),
            client.call_tool_as_task("hello", (), TaskOptions::new()),
        )
        .await;
    let handle = handle.unwrap();
    let serve = async {
        let get = expect_about(&mut fake, "tasks/get", "L2").await;
        fake.reply(&get.id, legacy_task("L2", "input_required", 60000))
            .await;
        let result = expect_about(&mut fake, "tasks/result", "L2").await;
        let answer = fake
            .ask(
                json!("e1"),
                "elicitation/create",
                json!({"message": "Your name?", "requestedSchema": {"type": "object",
                    "properties": {"name": {"type": "string"}}},
                    "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "L2"}}}),
            )
            .await;
        assert_eq!(
            answer.unwrap(),
            json!({"action": "accept", "content": {"name": "Grace"}})
        );
        fake.reply(&result.id, text_result("Hello, Grace!")).await;
    };
    let (result, ()) = tokio::join!(handle.wait(), serve);
    assert_eq!(text(&result.unwrap()), "Hello, Grace!");
}

#[tokio::test]
async fn legacy_tool_without_task_support_is_called_plainly() {
    let (client, mut fake) = connect(Era::Legacy, legacy(), legacy_caps()).await;
    let listing = json!({"tools": [{"name": "quick", "inputSchema": {"type": "object"}}]});
    let serve = async {
        let list = fake.expect_request("tools/list").await;
        fake.reply(&list.id, listing).await;
        let call = fake.expect_request("tools/call").await;
        assert!(params(&call).get("task").is_none(), "{:?}", params(&call));
        fake.reply(&call.id, text_result("done")).await;
    };
    let (handle, ()) = tokio::join!(
        client.call_tool_as_task("quick", (), TaskOptions::new()),
        serve
    );
    let handle = handle.unwrap();
    assert_eq!(handle.id(), None);
    assert_eq!(text(&handle.wait().await.unwrap()), "done");
}

#[tokio::test]
async fn legacy_cancel_and_cancel_of_a_finished_task() {
    let (client, mut fake) = connect(Era::Legacy, legacy(), legacy_caps()).await;
    let running = client.task("L3");
    let (result, _) = fake
        .answer(
            "tasks/cancel",
            legacy_task("L3", "cancelled", 60000),
            running.cancel(),
        )
        .await;
    result.unwrap();
    assert_eq!(
        running.last_status().unwrap().status,
        task::TaskStatus::Cancelled
    );
    let result = running.wait();
    let (result, _) = fake
        .answer("tasks/get", legacy_task("L3", "cancelled", 60000), result)
        .await;
    assert!(
        matches!(result, Err(TaskError::Cancelled { .. })),
        "{result:?}"
    );

    let finished = client.task("L4");
    let serve = async {
        let cancel = expect_about(&mut fake, "tasks/cancel", "L4").await;
        fake.reply_error(
            &cancel.id,
            -32602,
            "Cannot cancel a task in a terminal status",
        )
        .await;
        let get = expect_about(&mut fake, "tasks/get", "L4").await;
        fake.reply(&get.id, legacy_task("L4", "completed", 60000))
            .await;
    };
    let (result, ()) = tokio::join!(finished.cancel(), serve);
    assert!(
        matches!(
            &result,
            Err(TaskError::Finished {
                status: task::TaskStatus::Completed,
                ..
            })
        ),
        "{result:?}"
    );
}

// -- the client as the receiver of a 2025-11-25 server's task-augmented requests ------------------

#[tokio::test(start_paused = true)]
async fn task_augmented_elicitation_runs_as_a_task_and_is_freed_after_its_ttl() {
    let (release, released) = tokio::sync::watch::channel(false);
    let b = legacy()
        .on_elicitation(move |_| {
            let mut released = released.clone();
            async move {
                let _ = released.wait_for(|r| *r).await;
                Ok(Elicited::accept(
                    json!({"ok": true}).as_object().cloned().unwrap(),
                ))
            }
        })
        .receive_tasks(TaskReceiving::new().max_tasks(2));
    let (mut fake, to_server, from_server) = common::pair();
    let connecting = b.connect_channels(to_server, from_server);
    let handshake = async {
        let init = fake.expect_request("initialize").await;
        let caps = params(&init)["capabilities"].clone();
        fake.reply(
            &init.id,
            json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": common::server_info()}),
        )
        .await;
        fake.expect_notification("notifications/initialized").await;
        caps
    };
    let (client, caps) = tokio::join!(connecting, handshake);
    let client = client.unwrap();
    assert_eq!(
        caps["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"elicitation": {"create": {}}}})
    );
    let form = |ttl: u64| {
        json!({"message": "Confirm?", "requestedSchema": {"type": "object",
            "properties": {"ok": {"type": "boolean"}}}, "task": {"ttl": ttl}})
    };
    let created = fake
        .ask(json!(1), "elicitation/create", form(10_000))
        .await
        .unwrap();
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(created["task"]["status"], "working");
    assert_eq!(created["task"]["ttl"], 10_000);
    let got = fake
        .ask(json!(2), "tasks/get", json!({"taskId": id}))
        .await
        .unwrap();
    assert_eq!(got["status"], "working");
    // A second task, then a third beyond the bound of two.
    let second = fake
        .ask(json!(3), "elicitation/create", form(10_000))
        .await
        .unwrap();
    let second_id = second["task"]["taskId"].as_str().unwrap().to_owned();
    let refused = fake
        .ask(json!(4), "elicitation/create", form(10_000))
        .await
        .unwrap_err();
    assert!(
        refused["message"].as_str().unwrap().contains("at most 2"),
        "{refused}"
    );
    // Listed, one per page of... all on one page.
    let listed = fake.ask(json!(5), "tasks/list", json!({})).await.unwrap();
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 2);
    // The second is cancelled; cancelling it again is refused.
    let cancelled = fake
        .ask(json!(6), "tasks/cancel", json!({"taskId": second_id}))
        .await
        .unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    let again = fake
        .ask(json!(7), "tasks/cancel", json!({"taskId": second_id}))
        .await
        .unwrap_err();
    assert_eq!(again["code"], -32602);
    // tasks/result waits for the first to end, then gives the answer with the related task.
    fake.request(json!(8), "tasks/result", json!({"taskId": id}))
        .await;
    fake.expect_none(Duration::from_secs(1), "an early result", |m| {
        matches!(m, modelctx_types::Message::Response(_))
    })
    .await;
    release.send_replace(true);
    let result = fake.expect_response(&json!(8)).await.unwrap();
    assert_eq!(result["action"], "accept");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(id)
    );
    let unknown = fake
        .ask(json!(9), "tasks/get", json!({"taskId": "forged"}))
        .await
        .unwrap_err();
    assert_eq!(unknown["code"], -32602);
    assert_eq!(client.table_sizes().await.unwrap().tasks, 2);
    // After the time to live, both are forgotten.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let gone = fake
        .ask(json!(10), "tasks/get", json!({"taskId": id}))
        .await
        .unwrap_err();
    assert_eq!(gone["code"], -32602);
    assert_eq!(client.table_sizes().await.unwrap().tasks, 0);
}

/// A call that declares the capabilities of a client of its caller's (a gateway's) declares
/// those the client has too, and keeps the tasks extension the call adds for itself; without
/// the option, the client's own are declared.
#[tokio::test(start_paused = true)]
async fn a_call_may_declare_the_capabilities_of_its_caller() {
    let asking = builder()
        .on_elicitation(|_| async { Ok(Elicited::decline()) })
        .on_sampling(|_| async { Err(modelctx_client::InputError::new("no model")) })
        .on_roots(|| async { Ok(Vec::new()) });
    let (client, mut fake) = connect(Era::Modern, asking, modern_caps()).await;
    let caps_of = |call: &Request| {
        params(call)["_meta"]["io.modelcontextprotocol/clientCapabilities"].clone()
    };
    let caller: modelctx_client::JsonObject = serde_json::from_value(json!({
        "sampling": {"tools": {}},
        "elicitation": {"form": {}},
        "experimental": {"x": {}},
    }))
    .unwrap();
    let options = modelctx_client::CallOptions::new().client_capabilities(caller.clone());
    let (_, call) = fake
        .answer(
            "tools/call",
            text_result("ok"),
            client.call_tool_with("echo", json!({}), options),
        )
        .await;
    let caps = &caps_of(&call);
    // `sampling.tools` and `experimental` are the caller's alone; `roots` the client's alone.
    assert_eq!(
        caps,
        &json!({"sampling": {}, "elicitation": {"form": {}}}),
        "{caps}"
    );
    // A task-augmented call adds the extension to them.
    let options = TaskOptions::new()
        .call(modelctx_client::CallOptions::new().client_capabilities(caller.clone()));
    let (_, call) = fake
        .answer(
            "tools/call",
            text_result("done at once"),
            client.call_tool_as_task("echo", json!({}), options),
        )
        .await;
    let caps = &caps_of(&call);
    assert_eq!(
        caps,
        &json!({"sampling": {}, "elicitation": {"form": {}}, "extensions": {TASKS: {}}}),
        "{caps}"
    );
    // Without the option: the client's own.
    let (_, call) = fake
        .answer(
            "tools/call",
            text_result("ok"),
            client.call_tool("echo", json!({})),
        )
        .await;
    let caps = &caps_of(&call);
    assert!(caps.get("roots").is_some(), "{caps}");
    assert!(caps.get("experimental").is_none(), "{caps}");
}
