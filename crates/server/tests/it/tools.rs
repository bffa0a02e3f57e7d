//! Tools in every protocol version, over the in-memory transport.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use modelctx_server::{Context, Json, NoArgs, Server, Settings, Tool, ToolOutput};
use modelctx_session::{Event, ProtocolVersion, RequestOptions};
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    /// The text to say back.
    text: String,
}

async fn echo(args: Echo) -> String {
    args.text
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Sum {
    total: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Numbers {
    numbers: Vec<i64>,
}

async fn add(args: Numbers) -> Json<Sum> {
    Json(Sum {
        total: args.numbers.iter().sum(),
    })
}

async fn count(args: Numbers) -> Json<usize> {
    Json(args.numbers.len())
}

async fn fail(_: NoArgs) -> Result<String, String> {
    Err("the disk is full; try a smaller file".into())
}

async fn boom(_: NoArgs) -> String {
    panic!("a bug in the handler")
}

async fn steps(context: Context, _: NoArgs) -> String {
    for i in 1..=3 {
        context
            .progress(f64::from(i), Some(3.0), None)
            .await
            .unwrap();
    }
    assert!(context.progress(1.0, None, None).await.is_err() || !context.wants_progress());
    format!("progress wanted: {}", context.wants_progress())
}

fn server() -> Server {
    Server::builder("tools", "1.0.0")
        .tool(
            Tool::new("echo", echo)
                .description("Says the text back")
                .title("Echo"),
        )
        .tool(Tool::new("add", add))
        .tool(Tool::new("count", count))
        .tool(Tool::new("fail", fail))
        .tool(Tool::new("boom", boom))
        .tool(Tool::new("steps", steps))
        .build()
}

#[tokio::test]
async fn tools_are_listed_and_called_in_every_version() {
    let server = server();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        assert_eq!(client.version().as_str(), name);
        let version = client.version();

        let listed = client.request("tools/list", json!({})).await.unwrap();
        let tools = listed["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["add", "boom", "count", "echo", "fail", "steps"],
            "sorted by name"
        );
        let echo = &tools[3];
        assert_eq!(echo["inputSchema"]["type"], "object");
        assert_eq!(echo["inputSchema"]["properties"]["text"]["type"], "string");
        assert!(
            echo["inputSchema"].get("$schema").is_none(),
            "no $schema unless asked"
        );
        assert_eq!(
            echo["title"].is_string(),
            version >= ProtocolVersion::V2025_06_18
        );
        let add = &tools[0];
        assert_eq!(
            add.get("outputSchema").is_some(),
            version >= ProtocolVersion::V2025_06_18,
            "{name}"
        );

        let result = client.call("echo", json!({"text": "hi"})).await;
        assert_eq!(text(&result), "hi");
        assert!(result.get("isError").is_none());

        // Structured output: an object everywhere it exists, a non-object wrapped where only
        // objects are allowed.
        let result = client.call("add", json!({"numbers": [1, 2, 3]})).await;
        assert_eq!(text(&result), r#"{"total":6}"#);
        let result_count = client.call("count", json!({"numbers": [1, 2, 3]})).await;
        match version {
            v if v < ProtocolVersion::V2025_06_18 => {
                assert!(result.get("structuredContent").is_none());
            }
            ProtocolVersion::V2026_07_28 => {
                assert_eq!(result["structuredContent"], json!({"total": 6}));
                assert_eq!(result_count["structuredContent"], json!(3));
            }
            _ => {
                assert_eq!(result["structuredContent"], json!({"total": 6}));
                assert_eq!(result_count["structuredContent"], json!({"result": 3}));
            }
        }

        // A tool's own failure is a result the model can read; an unknown tool is -32602.
        let result = client.call("fail", json!({})).await;
        assert_eq!(result["isError"], true);
        assert!(text(&result).contains("disk is full"));
        let result = client.call("echo", json!({"text": 5})).await;
        assert_eq!(result["isError"], true, "{result}");
        assert!(text(&result).contains("invalid arguments"), "{result}");
        let answer = client
            .request("tools/call", json!({"name": "nope", "arguments": {}}))
            .await;
        assert_eq!(code(&answer), -32602);

        // A panicking handler: -32603 for that call, and the connection lives on.
        let answer = client
            .request("tools/call", json!({"name": "boom", "arguments": {}}))
            .await;
        assert_eq!(code(&answer), -32603);
        let result = client.call("echo", json!({"text": "still here"})).await;
        assert_eq!(text(&result), "still here");
    }
}

#[tokio::test]
async fn progress_goes_out_only_when_the_client_asked_for_it() {
    let server = server();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let result = client.call("steps", json!({})).await;
        assert_eq!(text(&result), "progress wanted: false", "{name}");
        let id = client
            .start_with(
                "tools/call",
                json!({"name": "steps", "arguments": {}}),
                RequestOptions::default().with_progress(),
            )
            .await;
        let result = client.answer(&id).await.unwrap();
        assert_eq!(text(&result), "progress wanted: true");
        let progress: Vec<f64> = client
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Progress { progress, .. } => Some(*progress),
                _ => None,
            })
            .collect();
        assert_eq!(progress, [1.0, 2.0, 3.0], "{name}");
    }
}

#[tokio::test]
async fn lists_are_paginated_with_stable_cursors() {
    async fn noop(_: NoArgs) -> &'static str {
        ""
    }
    let mut settings = Settings::default();
    settings.page_size = 2;
    let mut builder = Server::builder("pages", "1").settings(settings);
    for name in ["a", "b", "c", "d", "e"] {
        builder = builder.tool(Tool::new(name, noop));
    }
    let server = builder.build();
    for (_, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = client.request("tools/list", params).await.unwrap();
            let tools = page["tools"].as_array().unwrap();
            assert!(tools.len() <= 2);
            names.extend(tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        assert_eq!(names, ["a", "b", "c", "d", "e"]);
        let answer = client
            .request("tools/list", json!({"cursor": "not-ours"}))
            .await;
        assert_eq!(code(&answer), -32602);
    }

    // A cursor stays valid when items before it go away.
    let mut client = Client::connect(&server, eras().remove(4).1).await;
    let first = client.request("tools/list", json!({})).await.unwrap();
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    assert!(server.remove_tool("a"));
    let second = client
        .request("tools/list", json!({"cursor": cursor}))
        .await
        .unwrap();
    assert_eq!(second["tools"][0]["name"], "c");
}

#[tokio::test]
async fn tools_added_or_removed_at_run_time_announce_the_change() {
    let server = server();
    let mut legacy = Client::connect(&server, eras().remove(4).1).await;
    // A round trip: the server has seen `notifications/initialized` (sent before it), so the
    // session is initialized and hears of changes.
    legacy.request("tools/list", json!({})).await.unwrap();
    assert!(server.add_tool(Tool::new("late", echo)).is_ok());
    legacy
        .until("list_changed", |events| {
            events.iter().any(|e| matches!(e, Event::Notification(n) if n.method == "notifications/tools/list_changed"))
        })
        .await;
    let result = legacy.call("late", json!({"text": "new"})).await;
    assert_eq!(text(&result), "new");
    assert!(server.remove_tool("late"));
    legacy.events.clear();
    legacy
        .until("list_changed again", |events| {
            events.iter().any(|e| matches!(e, Event::Notification(n) if n.method == "notifications/tools/list_changed"))
        })
        .await;
    assert!(!server.remove_tool("late"));

    // Modern clients hear of it on a listen stream that asked for it.
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    modern
        .start(
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        )
        .await;
    modern
        .until("acknowledged", |events| {
            events.iter().any(|e| matches!(e, Event::Notification(n) if n.method == "notifications/subscriptions/acknowledged"))
        })
        .await;
    server.add_tool(Tool::new("later", echo)).unwrap();
    modern
        .until("list_changed on the listen stream", |events| {
            events.iter().any(|e| matches!(e, Event::Notification(n) if n.method == "notifications/tools/list_changed"))
        })
        .await;
}

/// `tools/list` gives the definitions written when each tool was registered: a tool added,
/// registered again under its name with another description, or removed shows at once, in
/// every version.
#[tokio::test]
async fn tools_list_follows_add_replace_and_remove() {
    let server = server();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let described = |listed: &Value| -> Option<String> {
            listed["tools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == "late")
                .map(|t| t["description"].as_str().unwrap_or_default().to_owned())
        };
        let listed = client.request("tools/list", json!({})).await.unwrap();
        assert_eq!(described(&listed), None, "{name}");
        server
            .add_tool(Tool::new("late", echo).description("first"))
            .unwrap();
        let listed = client.request("tools/list", json!({})).await.unwrap();
        assert_eq!(described(&listed).as_deref(), Some("first"), "{name}");
        server
            .add_tool(Tool::new("late", echo).description("second"))
            .unwrap();
        let listed = client.request("tools/list", json!({})).await.unwrap();
        assert_eq!(described(&listed).as_deref(), Some("second"), "{name}");
        assert!(server.remove_tool("late"));
        let listed = client.request("tools/list", json!({})).await.unwrap();
        assert_eq!(described(&listed), None, "{name}");
    }
}

#[tokio::test]
async fn a_slow_tool_never_delays_the_others() {
    let released = Arc::new(tokio::sync::Notify::new());
    let answered = Arc::new(AtomicUsize::new(0));
    let gate = released.clone();
    let slow = move |_: NoArgs| {
        let gate = gate.clone();
        async move {
            gate.notified().await;
            "slow done"
        }
    };
    let server = Server::builder("concurrency", "1")
        .tool(Tool::new("slow", slow))
        .tool(Tool::new("echo", echo))
        .build();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let slow_id = client
            .start("tools/call", json!({"name": "slow", "arguments": {}}))
            .await;
        answered.store(0, Ordering::SeqCst);
        for i in 0..100 {
            let result = client.call("echo", json!({"text": format!("{i}")})).await;
            assert_eq!(text(&result), format!("{i}"));
            answered.fetch_add(1, Ordering::SeqCst);
        }
        assert_eq!(answered.load(Ordering::SeqCst), 100);
        // Only now is the slow call let go.
        released.notify_one();
        let result = client.answer(&slow_id).await.unwrap();
        assert_eq!(text(&result), "slow done", "{name}");
    }
}

#[tokio::test]
async fn a_cancelled_call_fires_the_handlers_token() {
    let cancelled = Arc::new(AtomicUsize::new(0));
    let seen = cancelled.clone();
    let wait = move |context: Context, _: NoArgs| {
        let seen = seen.clone();
        async move {
            context.cancelled().cancelled().await;
            seen.fetch_add(1, Ordering::SeqCst);
            ToolOutput::error("cancelled")
        }
    };
    let server = Server::builder("cancel", "1")
        .tool(Tool::new("wait", wait))
        .build();
    for (count, (_, config)) in eras().into_iter().enumerate() {
        let mut client = Client::connect(&server, config).await;
        let id = client
            .start("tools/call", json!({"name": "wait", "arguments": {}}))
            .await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        client
            .session
            .cancel(std::time::Instant::now(), &id, Some("changed my mind"))
            .unwrap();
        within("the handler sees it", async {
            while cancelled.load(Ordering::SeqCst) <= count {
                client.step().await;
            }
        })
        .await;
    }
}

#[tokio::test]
async fn arguments_and_structured_results_are_checked_against_their_schemas() {
    async fn any(args: Value) -> Json<Value> {
        Json(args)
    }
    let limited: modelctx_types::JsonObject = serde_json::from_value(json!({
        "type": "object",
        "properties": {"n": {"type": "integer", "maximum": 3}},
        "required": ["n"],
    }))
    .unwrap();
    let strict_output: modelctx_types::JsonObject = serde_json::from_value(json!({
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": false,
    }))
    .unwrap();
    let server = Server::builder("schemas", "1")
        .tool(Tool::with_input_schema("limited", limited.clone(), any).output_schema(strict_output))
        .build();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let ok = client.call("limited", json!({"n": 2})).await;
        assert!(ok.get("isError").is_none(), "{name}: {ok}");
        let too_big = client.call("limited", json!({"n": 5})).await;
        assert_eq!(too_big["isError"], true);
        assert!(
            text(&too_big).contains("/n") && text(&too_big).contains("maximum"),
            "{too_big}"
        );
        let missing = client.call("limited", json!({})).await;
        assert_eq!(missing["isError"], true);
        // The handler echoes its arguments: an extra member breaks the output schema.
        let extra = client
            .request(
                "tools/call",
                json!({"name": "limited", "arguments": {"n": 1, "x": 1}}),
            )
            .await;
        assert_eq!(code(&extra), -32603, "{name}");
    }
}

#[tokio::test]
async fn tool_calls_over_a_limit_are_refused_with_a_defined_error() {
    let released = Arc::new(tokio::sync::Notify::new());
    let gate = released.clone();
    let hold = move |_: NoArgs| {
        let gate = gate.clone();
        async move {
            gate.notified().await;
            "done"
        }
    };
    let mut settings = Settings::default();
    settings.limits.concurrent = Some(2);
    let server = Server::builder("limits", "1")
        .settings(settings)
        .tool(Tool::new("hold", hold))
        .build();
    let mut client = Client::connect(&server, eras().remove(0).1).await;
    let first = client
        .start("tools/call", json!({"name": "hold", "arguments": {}}))
        .await;
    let second = client
        .start("tools/call", json!({"name": "hold", "arguments": {}}))
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let third = client
        .request("tools/call", json!({"name": "hold", "arguments": {}}))
        .await;
    assert_eq!(code(&third), -32000);
    match &third {
        Err(modelctx_session::RequestError::Remote(e)) => {
            let data: Value = e.data_as().unwrap().unwrap();
            assert_eq!(data["reason"], "rate_limited");
        }
        other => panic!("{other:?}"),
    }
    released.notify_waiters();
    client.answer(&first).await.unwrap();
    client.answer(&second).await.unwrap();
    // Places are given back when calls end.
    let id = client
        .start("tools/call", json!({"name": "hold", "arguments": {}}))
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    released.notify_waiters();
    let result = client.answer(&id).await.unwrap();
    assert_eq!(text(&result), "done");
}

#[tokio::test]
async fn modern_results_carry_the_server_info_and_list_cache_hints() {
    let mut settings = Settings::default();
    settings.list_cache = Some(modelctx_server::CacheHint::public(5000));
    let server = Server::builder("hints", "2.0.0")
        .settings(settings)
        .tool(Tool::new("echo", echo))
        .build();
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    let listed = modern.request("tools/list", json!({})).await.unwrap();
    assert_eq!(listed["ttlMs"], 5000);
    assert_eq!(listed["cacheScope"], "public");
    assert_eq!(
        listed["_meta"]["io.modelcontextprotocol/serverInfo"]["version"],
        "2.0.0"
    );
    let called = modern.call("echo", json!({"text": "x"})).await;
    assert_eq!(
        called["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "hints"
    );
    let mut legacy = Client::connect(&server, eras().remove(4).1).await;
    let listed = legacy.request("tools/list", json!({})).await.unwrap();
    assert!(listed.get("ttlMs").is_none() && listed.get("_meta").is_none());
}

#[tokio::test]
async fn log_messages_go_out_only_at_the_level_the_client_asked_for() {
    async fn chatty(context: Context, _: NoArgs) -> &'static str {
        context
            .log(modelctx_server::LogLevel::Debug, None, json!("debug"))
            .await;
        context
            .log(modelctx_server::LogLevel::Warning, None, json!("warning"))
            .await;
        "said"
    }
    let server = Server::builder("logs", "1")
        .tool(Tool::new("chatty", chatty))
        .build();
    let logs = |client: &Client| {
        client
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Notification(n) if n.method == "notifications/message" => {
                    let p: Value = serde_json::from_str(n.params.as_ref().unwrap().get()).unwrap();
                    Some(p["data"].as_str().unwrap().to_owned())
                }
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // Legacy: nothing before logging/setLevel, then what reaches the level.
    let mut legacy = Client::connect(&server, eras().remove(4).1).await;
    legacy.call("chatty", json!({})).await;
    assert!(logs(&legacy).is_empty());
    legacy
        .request("logging/setLevel", json!({"level": "info"}))
        .await
        .unwrap();
    legacy.call("chatty", json!({})).await;
    assert_eq!(logs(&legacy), ["warning"]);
    // Modern: only with a level in the request's _meta.
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    modern.call("chatty", json!({})).await;
    assert!(logs(&modern).is_empty());
    modern
        .request(
            "tools/call",
            json!({"name": "chatty", "arguments": {},
            "_meta": {"io.modelcontextprotocol/logLevel": "debug"}}),
        )
        .await
        .unwrap();
    assert_eq!(logs(&modern), ["debug", "warning"]);
}

#[tokio::test]
async fn schemas_name_their_dialect_only_when_asked_and_unusable_ones_are_refused() {
    let server = Server::builder("dialects", "1")
        .tool(Tool::new("plain", echo))
        .tool(Tool::new("named", echo).schema_dialect())
        .build();
    let mut client = Client::connect(&server, eras().remove(0).1).await;
    let listed = client.request("tools/list", json!({})).await.unwrap();
    assert!(listed["tools"][1]["inputSchema"].get("$schema").is_none());
    assert_eq!(
        listed["tools"][0]["inputSchema"]["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    async fn any(args: Value) -> String {
        args.to_string()
    }
    let future: modelctx_types::JsonObject = serde_json::from_value(json!({
        "$schema": "https://json-schema.org/draft/2099-01/schema", "type": "object"}))
    .unwrap();
    let refused = server.add_tool(Tool::with_input_schema("future", future, any));
    assert!(
        matches!(
            &refused,
            Err(modelctx_server::RegisterError::Schema {
                tool,
                source: modelctx_types::schema::SchemaError::Dialect(dialect),
            }) if tool == "future" && dialect.contains("2099-01")
        ),
        "{refused:?}"
    );
    let remote: modelctx_types::JsonObject = serde_json::from_value(json!({
        "type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}))
    .unwrap();
    assert!(
        server
            .add_tool(Tool::with_input_schema("remote", remote, any))
            .is_err()
    );
}

/// One message from JSON.
fn message(value: Value) -> modelctx_types::Message {
    match modelctx_types::decode(value.to_string().as_bytes()).unwrap() {
        modelctx_types::Incoming::Single(message) => message,
        other => panic!("{other:?}"),
    }
}

/// The frames a raw in-memory connection receives until the response to `id`, which is
/// returned with the responses to other ids that came before it.
async fn until_response(conn: &mut modelctx_server::InMemory, id: i64) -> (Value, Vec<Value>) {
    within("a response", async {
        let mut others = Vec::new();
        loop {
            let frame = match conn.recv().await.expect("the connection is open") {
                modelctx_server::Frame::Single(m) => serde_json::to_value(&m).unwrap(),
                other => panic!("{other:?}"),
            };
            if frame.get("method").is_some() {
                continue;
            }
            if frame["id"] == id {
                return (frame, others);
            }
            others.push(frame);
        }
    })
    .await
}

/// Finding 12, the audit's reproduction on one connection (in memory, legacy): `slow` is
/// cancelled but runs on; a new request reuses id 1; `slow` finishes first. Its answer is
/// dropped, the new request gets its own answer, and a new request with a reused id can still
/// be cancelled. The runtime is single-threaded: when `slow` has returned, its answer is queued
/// for the connection (it is sent in the same poll), so the ping that follows is answered after
/// the stale answer was dealt with.
#[tokio::test]
async fn finding_12_a_cancelled_handler_never_answers_a_request_that_reused_its_id() {
    use tokio::sync::oneshot;
    type Gates = Arc<std::sync::Mutex<Vec<oneshot::Receiver<()>>>>;
    let slow_gates: Gates = Arc::default();
    let wait_gates: Gates = Arc::default();
    let (returned_tx, mut returned) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (cancelled_tx, mut cancelled) = tokio::sync::mpsc::unbounded_channel::<()>();
    let gates = slow_gates.clone();
    // Ignores its cancellation: it answers when its gate opens.
    let slow = move |_: NoArgs| {
        let gate = gates.lock().unwrap().pop().expect("a gate");
        let returned = returned_tx.clone();
        async move {
            let _ = gate.await;
            let _ = returned.send(());
            "stale"
        }
    };
    let gates = wait_gates.clone();
    let wait = move |context: Context, _: NoArgs| {
        let gate = gates.lock().unwrap().pop().expect("a gate");
        let cancelled = cancelled_tx.clone();
        async move {
            tokio::select! {
                () = context.cancelled().cancelled() => {
                    let _ = cancelled.send(());
                    "cancelled"
                }
                _ = gate => "fresh",
            }
        }
    };
    let server = Server::builder("reuse", "1")
        .tool(Tool::new("slow", slow))
        .tool(Tool::new("wait", wait))
        .build();
    let mut conn = server.in_memory();
    let call = |id: i64, name: &str| {
        message(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": {}}}))
    };
    let cancel = |id: i64| {
        message(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id}}),
        )
    };
    let ping = |id: i64| message(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
    conn.send(message(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}}),
    ))
    .await;
    until_response(&mut conn, 0).await;
    conn.send(message(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ))
    .await;

    for round in 0..2 {
        let (open_slow, gate) = oneshot::channel();
        slow_gates.lock().unwrap().push(gate);
        let (open_wait, gate) = oneshot::channel();
        wait_gates.lock().unwrap().push(gate);
        conn.send(call(1, "slow")).await;
        conn.send(cancel(1)).await;
        conn.send(call(1, "wait")).await;
        // Both handlers run (the ping is answered after both started).
        conn.send(ping(2)).await;
        let (_, early) = until_response(&mut conn, 2).await;
        assert!(early.is_empty(), "{early:?}");
        // The cancelled handler finishes while the new id 1 is in flight.
        open_slow.send(()).unwrap();
        within("slow returns", returned.recv()).await.unwrap();
        conn.send(ping(3)).await;
        let (_, before) = until_response(&mut conn, 3).await;
        assert!(before.is_empty(), "the stale answer was sent: {before:?}");
        if round == 0 {
            // The new request gets its own answer.
            open_wait.send(()).unwrap();
            let (answer, _) = until_response(&mut conn, 1).await;
            assert_eq!(text(&answer["result"]), "fresh", "{answer}");
        } else {
            // The new request can still be cancelled, and is then not answered.
            conn.send(cancel(1)).await;
            within("wait is cancelled", cancelled.recv()).await.unwrap();
            conn.send(ping(4)).await;
            let (_, before) = until_response(&mut conn, 4).await;
            assert!(
                before.is_empty(),
                "a cancelled request was answered: {before:?}"
            );
            drop(open_wait);
        }
    }
    drop(conn);
    within("handlers end", async {
        while server.load().handlers > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// Finding 8 (the server side): a tool schema's patterns are matched in linear time by default,
/// so a pattern with look-around is refused; `Settings::schema_limits` lets a server whose own
/// schemas need one match them with the backtracking engine.
#[cfg(feature = "validation")]
#[tokio::test]
async fn look_around_patterns_need_the_backtracking_engine() {
    use modelctx_types::schema::{PatternEngine, SchemaLimits};
    async fn any(args: Value) -> String {
        args.to_string()
    }
    let schema: modelctx_types::JsonObject = serde_json::from_value(json!({
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^(?=[A-Z])[A-Z0-9]+$"}}}))
    .unwrap();
    let linear = Server::builder("t", "1").declare_tools().build();
    let refused = linear.add_tool(Tool::with_input_schema("code", schema.clone(), any));
    assert!(
        matches!(
            &refused,
            Err(modelctx_server::RegisterError::Schema {
                source: modelctx_types::schema::SchemaError::Pattern { .. },
                ..
            })
        ),
        "{refused:?}"
    );

    let mut settings = Settings::default();
    settings.schema_limits = SchemaLimits::default();
    settings.schema_limits.patterns = PatternEngine::Backtracking {
        backtrack_limit: 10_000,
    };
    let backtracking = Server::builder("t", "1")
        .settings(settings)
        .declare_tools()
        .build();
    backtracking
        .add_tool(Tool::with_input_schema("code", schema, any))
        .expect("the backtracking engine compiles look-around");
    let mut client = Client::connect(&backtracking, eras().remove(0).1).await;
    let good = client
        .request(
            "tools/call",
            json!({"name": "code", "arguments": {"code": "A1"}}),
        )
        .await
        .unwrap();
    assert_ne!(good["isError"], true, "{good}");
    let bad = client
        .request(
            "tools/call",
            json!({"name": "code", "arguments": {"code": "1A"}}),
        )
        .await
        .unwrap();
    assert_eq!(bad["isError"], true, "{bad}");
}

/// One message from its text, as a client wrote it (escapes and all).
fn raw_message(text: &str) -> modelctx_types::Message {
    match modelctx_types::decode(text.as_bytes()).unwrap() {
        modelctx_types::Incoming::Single(message) => message,
        other => panic!("{other:?}"),
    }
}

/// `tools/call` params are read once, straight from the message: a name with escapes (which
/// cannot be borrowed from the text), `null` or absent arguments (`{}`), arguments that are not
/// an object (a failed call the model can read), and the general path for params a direct
/// read refuses (a field twice: the last one counts, as for any object).
#[tokio::test]
async fn tool_calls_read_their_params_from_the_message_in_every_form() {
    let server = Server::builder("params", "1")
        .tool(Tool::new("echo", echo))
        .tool(Tool::new("none", |_: NoArgs| async { "nothing" }))
        .build();
    let mut conn = server.in_memory();
    conn.send(message(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}}),
    ))
    .await;
    until_response(&mut conn, 0).await;
    conn.send(message(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ))
    .await;
    let cases: [(&str, Result<&str, &str>); 6] = [
        (
            r#"{"name": "\u0065cho", "arguments": {"text": "escaped \"hi\""}}"#,
            Ok(r#"escaped "hi""#),
        ),
        (r#"{"name": "none", "arguments": null}"#, Ok("nothing")),
        (r#"{"name": "none"}"#, Ok("nothing")),
        (
            r#"{"name": "echo", "arguments": "text"}"#,
            Err("invalid arguments: the arguments must be a JSON object"),
        ),
        (
            r#"{"name": "echo", "arguments": {"text": 1}}"#,
            Err("invalid arguments: /text: 1 is not of type \"string\""),
        ),
        (
            r#"{"name": "none", "name": "echo", "arguments": {"text": "last"}}"#,
            Ok("last"),
        ),
    ];
    for (id, (params, expected)) in (1..).zip(cases) {
        conn.send(raw_message(&format!(
            r#"{{"jsonrpc": "2.0", "id": {id}, "method": "tools/call", "params": {params}}}"#
        )))
        .await;
        let (answer, _) = until_response(&mut conn, id).await;
        let result = &answer["result"];
        let is_error = result["isError"] == true;
        match expected {
            Ok(text) => assert!(
                !is_error && result["content"][0]["text"] == text,
                "{answer}"
            ),
            Err(text) => assert!(is_error && result["content"][0]["text"] == text, "{answer}"),
        }
    }
}

/// A builder's tool with a schema that cannot be used: `try_build` refuses the server, naming
/// the tool and keeping the cause; `build` panics with the same text.
#[cfg(feature = "validation")]
#[test]
fn builder_tools_have_their_schemas_checked_when_registered() {
    use modelctx_types::schema::SchemaError;
    let remote: modelctx_types::JsonObject =
        serde_json::from_value(json!({"type": "object", "$ref": "https://example.com/a.json"}))
            .unwrap();
    let builder = || {
        Server::builder("t", "1")
            .tool(Tool::new("echo", echo))
            .tool(Tool::with_input_schema(
                "remote",
                remote.clone(),
                |_: Value| async { "unreachable" },
            ))
    };
    let refused = builder().try_build();
    assert!(
        matches!(
            &refused,
            Err(modelctx_server::RegisterError::Schema {
                tool,
                source: SchemaError::ExternalRef(_),
            }) if tool == "remote"
        ),
        "{:?}",
        refused.err()
    );
    let built = Server::builder("t", "1")
        .tool(Tool::new("echo", echo))
        .try_build();
    assert!(built.is_ok());

    let error = refused.err().unwrap().to_string();
    let panic = std::panic::catch_unwind(|| builder().build()).unwrap_err();
    assert_eq!(
        panic.downcast_ref::<String>().map(String::as_str),
        Some(format!("{error} (`ServerBuilder::try_build` returns it instead)").as_str())
    );
}

/// Shared state: `ServerBuilder::state` and a `State<S>` argument, in both shapes, one value
/// shared by every call (a clone of it per call); `Context::state` gives the same. A tool that
/// takes state the server was not given is refused by `try_build` and `add_tool`, and `build`
/// panics.
#[tokio::test]
async fn handlers_take_the_state_the_server_was_given() {
    use modelctx_server::{RegisterError, State};

    #[derive(Clone, Default)]
    struct Hits(Arc<AtomicUsize>);
    #[derive(Clone)]
    struct Greeting(&'static str);

    async fn hit(State(hits): State<Hits>, _: NoArgs) -> String {
        (hits.0.fetch_add(1, Ordering::SeqCst) + 1).to_string()
    }
    async fn greet(context: Context, greeting: State<Greeting>, args: Echo) -> String {
        let hits: Hits = context.state().expect("the server has Hits");
        let missing = context.state::<String>();
        assert_eq!(
            missing.err().map(|e| e.type_name),
            Some(std::any::type_name::<String>())
        );
        format!(
            "{} {} ({})",
            greeting.0.0,
            args.text,
            hits.0.load(Ordering::SeqCst)
        )
    }

    let hits = Hits::default();
    let server = Server::builder("state", "1")
        .state(hits.clone())
        .state(Greeting("hello"))
        .tool(Tool::new("hit", hit))
        .tool(Tool::new("greet", greet))
        .try_build()
        .expect("every state the tools take is there");
    for (_, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let before = hits.0.load(Ordering::SeqCst);
        let answer = client.call("hit", json!({})).await;
        assert_eq!(text(&answer), (before + 1).to_string());
        let answer = client.call("greet", json!({"text": "you"})).await;
        assert_eq!(text(&answer), format!("hello you ({})", before + 1));
    }
    assert_eq!(hits.0.load(Ordering::SeqCst), eras().len());

    // Without the state.
    let refused = Server::builder("state", "1")
        .tool(Tool::new("hit", hit))
        .try_build();
    assert!(
        matches!(
            &refused,
            Err(RegisterError::MissingState { tool, type_name })
                if tool == "hit" && type_name.ends_with("Hits")
        ),
        "{:?}",
        refused.err()
    );
    let bare = Server::builder("state", "1").declare_tools().build();
    assert!(matches!(
        bare.add_tool(Tool::new("hit", hit)),
        Err(RegisterError::MissingState { .. })
    ));
    let panic = std::panic::catch_unwind(|| {
        Server::builder("state", "1")
            .tool(Tool::new("hit", hit))
            .build()
    })
    .unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.starts_with("tool hit takes state of type ") && message.contains("Hits"),
        "{message}"
    );
}

/// `Context::client_info` is the model's `Implementation`, in both eras (the session's
/// `clientInfo` for legacy clients, the request's `_meta` for modern ones).
#[tokio::test]
async fn the_client_info_is_typed_in_both_eras() {
    async fn who(context: Context, _: NoArgs) -> String {
        match context.client_info() {
            Some(info) => format!("{} {}", info.name, info.version),
            None => format!("unknown: {:?}", context.client_info_json()),
        }
    }
    let server = Server::builder("who", "1")
        .tool(Tool::new("who", who))
        .build();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let answer = client.call("who", json!({})).await;
        assert_eq!(text(&answer), "test 1", "{name}");
    }
}

/// A tool's protocol error is the call's error in every era; a -32021 reaches a client of an
/// older era as a failed call with its message (that era has no such code).
#[tokio::test]
async fn a_protocol_error_of_a_call_is_the_calls_error_and_minus_32021_only_for_modern_clients() {
    let server = Server::builder("tools", "1")
        .tool(Tool::new("needs", |_: NoArgs| async {
            ToolOutput::protocol_error(missing_extension())
        }))
        .tool(Tool::new("broken", |_: NoArgs| async {
            ToolOutput::protocol_error(modelctx_server::ErrorObject::new(
                modelctx_server::ErrorCode(-32050),
                "the backend broke",
            ))
        }))
        .build();
    for (version, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let modern = client.version().era() == modelctx_session::Era::Modern;
        let needs = client
            .request("tools/call", json!({"name": "needs", "arguments": {}}))
            .await;
        if modern {
            let Err(modelctx_session::RequestError::Remote(e)) = needs else {
                panic!("{version}: expected -32021, got {needs:?}");
            };
            assert_eq!(e.code.0, -32021, "{version}");
            assert_eq!(e.message, "the backend wants its extension", "{version}");
            let data: Value = e.data_as().unwrap().unwrap();
            assert_eq!(
                data,
                json!({"requiredCapabilities": {"extensions": {"io.example/ext": {}}}})
            );
        } else {
            let result = needs.unwrap_or_else(|e| panic!("{version}: {e:?}"));
            assert_eq!(result["isError"], true, "{version}");
            assert_eq!(
                result["content"][0]["text"], "the backend wants its extension",
                "{version}"
            );
        }
        let broken = client
            .request("tools/call", json!({"name": "broken", "arguments": {}}))
            .await;
        let Err(modelctx_session::RequestError::Remote(e)) = broken else {
            panic!("{version}: expected -32050, got {broken:?}");
        };
        assert_eq!(e.code.0, -32050, "{version}");
    }
}
