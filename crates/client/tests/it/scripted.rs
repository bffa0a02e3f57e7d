//! The client against scripted fake servers: each test plays the server step by step over
//! `connect_channels`, reading what the client sends and writing the JSON-RPC it composes.

use crate::common;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use common::{
    Era, Fake, MODERN, PROTOCOL_VERSION_KEY, SUBSCRIPTION_ID_KEY, builder, cacheable, complete,
    connect, full_capabilities, id_json, input_required, params, sampled, text, text_result,
};
use modelctx_client::{
    CallOptions, Elicitation, Elicited, Error, InputError, ProtocolVersion, RecvError,
    ServerNotification, SessionError, model,
};
use modelctx_types::{Message, Request, RequestId};
use serde_json::{Value, json};

/// A legacy client pinned to 2025-11-25 (no probe).
fn legacy() -> modelctx_client::ClientBuilder {
    builder().protocol_version(ProtocolVersion::V2025_11_25)
}

fn object(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().unwrap()
}

/// Fails unless `result` is an invalid result of `method`.
fn assert_invalid<T: std::fmt::Debug>(result: &Result<T, Error>, method: &str, context: &str) {
    assert!(
        matches!(result, Err(Error::InvalidResult { method: m, .. }) if m == method),
        "{context}: {result:?}"
    );
}

/// How long the tests that check the client sends nothing more wait, on a paused clock (so at
/// once in real time): longer than any timer of the client's.
const NO_MORE: Duration = Duration::from_secs(600);

// -- 1. structuredContent -------------------------------------------------------------------------

#[tokio::test]
async fn structured_content_is_checked_against_the_listed_output_schema() {
    // A socket nobody should ever connect to: the URL of an external `$ref`.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let remote = format!("http://{}/schema.json", listener.local_addr().unwrap());

    let (client, mut fake) = connect(Era::Legacy, legacy(), full_capabilities()).await;
    let listing = json!({"tools": [
        {
            "name": "weather",
            "inputSchema": {"type": "object"},
            "outputSchema": {
                "type": "object",
                "properties": {"temp": {"type": "number"}},
                "required": ["temp"],
            },
        },
        {
            "name": "remote",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object", "properties": {"x": {"$ref": remote}}},
        },
        {
            "name": "elsewhere",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object", "$ref": "https://example.com/schemas/out.json"},
        },
        {"name": "plain", "inputSchema": {"type": "object"}},
    ]});
    assert_eq!(fake.list_tools(&client, listing).await.tools.len(), 4);

    let call = |name: &'static str| client.call_tool(name, json!({"city": "Paris"}));

    // Violating the schema.
    let wrong = json!({"content": [], "structuredContent": {"temp": "hot"}});
    let (result, _) = fake.answer("tools/call", wrong, call("weather")).await;
    assert!(
        matches!(&result, Err(Error::StructuredContent { tool, .. }) if tool == "weather"),
        "{result:?}"
    );

    // Missing while the tool has an output schema.
    let (result, _) = fake
        .answer("tools/call", text_result("22 degrees"), call("weather"))
        .await;
    assert!(
        matches!(&result, Err(Error::StructuredContent { reason, .. }) if reason.contains("no structuredContent")),
        "{result:?}"
    );

    // A tool error needs no structured content.
    let failed = json!({"content": [{"type": "text", "text": "no such city"}], "isError": true});
    let (result, _) = fake.answer("tools/call", failed, call("weather")).await;
    assert_eq!(result.unwrap().is_error, Some(true));

    // A valid one.
    let valid = json!({"content": [], "structuredContent": {"temp": 21.5}});
    let (result, _) = fake.answer("tools/call", valid, call("weather")).await;
    assert_eq!(
        result.unwrap().structured_content,
        Some(json!({"temp": 21.5}))
    );

    // A tool without an output schema is not checked.
    let (result, _) = fake
        .answer("tools/call", text_result("ok"), call("plain"))
        .await;
    assert_eq!(text(&result.unwrap()), "ok");

    // Schemas with external references are refused, never fetched.
    for tool in ["remote", "elsewhere"] {
        let content = json!({"content": [], "structuredContent": {"x": 1}});
        let (result, _) = fake.answer("tools/call", content, call(tool)).await;
        assert!(
            matches!(&result, Err(Error::StructuredContent { tool: t, reason }) if t == tool && reason.contains("unusable")),
            "{tool}: {result:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the external schema was fetched"
    );
}

/// Findings 8 and 9: output schemas a hostile server chooses. A pattern that needs backtracking
/// is refused (the call fails, nothing is matched); patterns are matched in linear time, on large
/// results off the caller's worker; a schema over 256 KiB is not stored and calls fail.
#[tokio::test]
async fn finding_8_and_9_hostile_output_schemas_have_documented_outcomes() {
    let (client, mut fake) = connect(Era::Legacy, legacy(), full_capabilities()).await;
    let strings = |pattern: &str| {
        json!({"type": "object", "properties": {"v": {"type": "array", "items": {
            "type": "string", "pattern": pattern}}}})
    };
    let huge = json!({"type": "object", "description": "x".repeat(300 << 10)});
    let listing = json!({"tools": [
        {"name": "backref", "inputSchema": {"type": "object"},
            "outputSchema": strings("^(a|aa)+\\1$")},
        {"name": "nested", "inputSchema": {"type": "object"}, "outputSchema": strings("^(a+)+$")},
        {"name": "huge", "inputSchema": {"type": "object"}, "outputSchema": huge},
    ]});
    assert_eq!(fake.list_tools(&client, listing).await.tools.len(), 3);

    // Over 64 KiB of almost-matching strings: checked on a blocking thread.
    let almost: Vec<String> = (0..5000).map(|_| format!("{}!", "a".repeat(24))).collect();
    let content = json!({"content": [], "structuredContent": {"v": almost}});
    for (tool, expected) in [
        ("backref", "needs backreferences or look-around"),
        ("nested", "does not match"),
        ("huge", "larger than 262144 bytes"),
    ] {
        let (result, _) = fake
            .answer("tools/call", content.clone(), client.call_tool(tool, ()))
            .await;
        assert!(
            matches!(&result, Err(Error::StructuredContent { reason, .. }) if reason.contains(expected)),
            "{tool}: {result:?}"
        );
    }
    let fine: Vec<String> = (0..5000).map(|_| "a".repeat(25)).collect();
    let content = json!({"content": [], "structuredContent": {"v": fine}});
    let (result, _) = fake
        .answer("tools/call", content, client.call_tool("nested", ()))
        .await;
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test]
async fn a_new_listing_replaces_the_output_schemas() {
    let (client, mut fake) = connect(Era::Modern, builder(), full_capabilities()).await;
    let with_schema = cacheable(json!({"tools": [{
        "name": "t",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object", "required": ["n"]},
    }]}));
    fake.list_tools(&client, with_schema).await;
    let result = fake.call(&client, "t", complete(text_result("x"))).await;
    assert!(
        matches!(result, Err(Error::StructuredContent { .. })),
        "{result:?}"
    );
    // Listed again without an output schema: nothing to check any more.
    let without = cacheable(json!({"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}));
    fake.list_tools(&client, without).await;
    fake.check_call(&client, Era::Modern, "x").await;
}

// -- 2. malformed results -------------------------------------------------------------------------

#[tokio::test]
async fn malformed_results_are_invalid_and_the_connection_lives_on() {
    for era in Era::BOTH {
        let (client, mut fake) = connect(era, builder(), full_capabilities()).await;
        for junk in [
            era.complete(json!({"isError": false})),
            era.complete(json!({"content": "not a list"})),
            era.complete(json!({"content": [{"type": "no-such-block"}]})),
            json!([1, 2]),
            json!(42),
            json!("text"),
            json!(null),
        ] {
            let result = fake.call(&client, "t", junk.clone()).await;
            assert_invalid(&result, "tools/call", &format!("{era:?} {junk}"));
        }
        let tools = era.complete(json!({"tools": 5}));
        let (result, _) = fake
            .answer("tools/list", tools, client.list_tools(None))
            .await;
        assert_invalid(&result, "tools/list", &format!("{era:?}"));
        let contents = era.complete(json!({"contents": [{"text": "no uri"}]}));
        let (result, _) = fake
            .answer(
                "resources/read",
                contents,
                client.read_resource("file:///a"),
            )
            .await;
        assert_invalid(&result, "resources/read", &format!("{era:?}"));
        // Still working.
        fake.check_call(&client, era, "fine").await;
        assert!(!client.is_closed());
    }
}

// -- 3. modern multi round-trip requests -----------------------------------------------------------

fn elicit_request(message: &str) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    })
}

fn eliciting_client() -> modelctx_client::ClientBuilder {
    builder().on_elicitation(|elicitation| async move {
        match elicitation {
            Elicitation::Form { message, .. } => Ok(Elicited::accept(object(
                json!({"name": format!("answer to {message}")}),
            ))),
            _ => Err(InputError::new("only forms")),
        }
    })
}

#[tokio::test]
async fn input_required_is_answered_and_retried_with_a_new_id() {
    let (client, mut fake) = connect(Era::Modern, eliciting_client(), full_capabilities()).await;
    let rounds = [
        input_required(
            Some(json!({"e1": elicit_request("Who?")})),
            "opaque+/=state",
        ),
        // A second round: another question and another state.
        input_required(
            Some(json!({"e2": elicit_request("When?")})),
            " round-2 \u{e9}\"\n\t",
        ),
        // A last round with state only: no input responses are sent.
        input_required(None, "s3"),
        complete(text_result("booked")),
    ];
    let call = client.call_tool("book", json!({"seats": 2}));
    let (result, tries) = fake.answer_each("tools/call", rounds, call).await;
    assert_eq!(text(&result.unwrap()), "booked");
    let [first, second, third, fourth] = &tries[..] else {
        panic!("{tries:?}")
    };
    assert_eq!(params(first)["name"], json!("book"));

    assert_ne!(second.id, first.id, "a retry has a new id");
    let p = params(second);
    assert_eq!(p["name"], json!("book"));
    assert_eq!(p["arguments"], json!({"seats": 2}));
    assert_eq!(
        p["inputResponses"],
        json!({"e1": {"action": "accept", "content": {"name": "answer to Who?"}}})
    );
    assert_eq!(p["requestState"], json!("opaque+/=state"));
    assert_eq!(p["_meta"][PROTOCOL_VERSION_KEY], json!(MODERN));

    assert!(third.id != first.id && third.id != second.id);
    let p = params(third);
    assert_eq!(
        p["inputResponses"],
        json!({"e2": {"action": "accept", "content": {"name": "answer to When?"}}}),
        "only this round's answers"
    );
    assert_eq!(p["requestState"], json!(" round-2 \u{e9}\"\n\t"));
    assert_eq!(p["_meta"][PROTOCOL_VERSION_KEY], json!(MODERN));

    let p = params(fourth);
    assert!(p.get("inputResponses").is_none(), "{p}");
    assert_eq!(p["requestState"], json!("s3"));
}

#[tokio::test(start_paused = true)]
async fn a_server_that_always_asks_gets_too_many_rounds() {
    let (client, mut fake) = connect(
        Era::Modern,
        eliciting_client().max_input_rounds(2),
        full_capabilities(),
    )
    .await;
    let rounds = (0..3).map(|round| {
        let asks = json!({"e": elicit_request("again?")});
        input_required(Some(asks), &format!("state-{round}"))
    });
    let (result, _) = fake
        .answer_each("tools/call", rounds, client.call_tool("loop", ()))
        .await;
    assert!(matches!(result, Err(Error::TooManyRounds(2))), "{result:?}");
    fake.expect_no_request(NO_MORE, "a fourth try", "tools/call")
        .await;
    // prompts/get and resources/read run the same loop.
    let rounds = std::iter::repeat_n(input_required(None, "again"), 3);
    let (result, _) = fake
        .answer_each("prompts/get", rounds, client.get_prompt("p", &[]))
        .await;
    assert!(matches!(result, Err(Error::TooManyRounds(2))), "{result:?}");
}

#[tokio::test(start_paused = true)]
async fn input_the_client_cannot_give_fails_the_call() {
    // No elicitation handler.
    let (client, mut fake) = connect(Era::Modern, builder(), full_capabilities()).await;
    let asks = input_required(Some(json!({"e1": elicit_request("Who?")})), "s");
    let result = fake.call(&client, "t", asks.clone()).await;
    assert!(
        matches!(&result, Err(Error::Input { method, .. }) if method == "elicitation/create"),
        "{result:?}"
    );
    fake.expect_no_request(NO_MORE, "a retry", "tools/call")
        .await;

    // A handler that refuses.
    let refusing = builder().on_elicitation(|_| async { Err(InputError::new("the user is away")) });
    let (client, mut fake) = connect(Era::Modern, refusing, full_capabilities()).await;
    let result = fake.call(&client, "t", asks).await;
    assert!(
        matches!(&result, Err(Error::Input { reason, .. }) if reason.contains("away")),
        "{result:?}"
    );
}

// -- 4. cancellation on the wire ------------------------------------------------------------------

async fn cancellation_on_the_wire(era: Era) {
    let (client, mut fake) = connect(era, builder(), full_capabilities()).await;

    // A timeout.
    let options = CallOptions::new().timeout(Some(Duration::from_millis(50)));
    let started = Instant::now();
    let (result, request) = tokio::join!(
        common::returns("slow", client.call_tool_with("slow", (), options)),
        fake.expect_request("tools/call")
    );
    assert!(matches!(result, Err(Error::Timeout(_))), "{result:?}");
    assert!(started.elapsed() >= Duration::from_millis(50));
    let cancelled = fake.expect_cancelled(&request.id).await;
    assert_eq!(cancelled["requestId"], id_json(&request.id));

    // A late answer is ignored and later calls still work.
    fake.reply(&request.id, complete(text_result("late"))).await;
    fake.check_call(&client, era, "second").await;

    // A dropped call future.
    let (elapsed, dropped) = tokio::join!(
        tokio::time::timeout(Duration::from_millis(50), client.call_tool("slow", ())),
        fake.expect_request("tools/call")
    );
    assert!(elapsed.is_err(), "the call was not answered");
    fake.expect_cancelled(&dropped.id).await;
    fake.reply(&dropped.id, complete(text_result("late"))).await;
    fake.check_call(&client, era, "third").await;

    // Nothing is left behind.
    let sizes = client.table_sizes().await.unwrap();
    assert_eq!(sizes.calls, 0, "{sizes:?}");
}

#[tokio::test(start_paused = true)]
async fn legacy_calls_are_cancelled_on_timeout_and_drop() {
    cancellation_on_the_wire(Era::Legacy).await;
}

#[tokio::test(start_paused = true)]
async fn modern_calls_over_channels_are_cancelled_by_notification() {
    cancellation_on_the_wire(Era::Modern).await;
}

// -- 5. pagination --------------------------------------------------------------------------------

fn tool(name: &str) -> Value {
    json!({"name": name, "inputSchema": {"type": "object"}})
}

#[tokio::test]
async fn list_all_tools_follows_cursors() {
    let (client, mut fake) = connect(Era::Modern, builder(), full_capabilities()).await;
    let pages = [
        cacheable(json!({"tools": [tool("a"), tool("b")], "nextCursor": "c1"})),
        cacheable(json!({"tools": [tool("c")], "nextCursor": "c2"})),
        cacheable(json!({"tools": [tool("d")]})),
    ];
    let (tools, requests) = fake
        .answer_each("tools/list", pages, client.list_all_tools())
        .await;
    let names: Vec<String> = tools.unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    let cursors: Vec<Option<Value>> = requests
        .iter()
        .map(|r| params(r).get("cursor").cloned())
        .collect();
    assert_eq!(cursors, [None, Some(json!("c1")), Some(json!("c2"))]);
}

#[tokio::test(start_paused = true)]
async fn a_repeated_cursor_ends_the_listing() {
    for era in Era::BOTH {
        let (client, mut fake) = connect(era, builder(), full_capabilities()).await;
        let pages = ["x", "y", "x"]
            .map(|cursor| era.cacheable(json!({"tools": [tool(cursor)], "nextCursor": cursor})));
        let (tools, _) = fake
            .answer_each("tools/list", pages, client.list_all_tools())
            .await;
        assert!(
            matches!(&tools, Err(Error::InvalidResult { reason, .. }) if reason.contains("repeats")),
            "{era:?}: {tools:?}"
        );
        fake.expect_no_request(NO_MORE, "another page", "tools/list")
            .await;
    }
}

// -- 6. progress ----------------------------------------------------------------------------------

/// `future`'s output, and how long it took.
async fn timed<T>(future: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let output = future.await;
    (output, started.elapsed())
}

/// Sends `steps` progress notifications for `request`, one every 60 ms (with `total` if given).
async fn report_progress(fake: &mut Fake, request: &Request, steps: u32, total: Option<u32>) {
    let token = params(request)["_meta"]["progressToken"].clone();
    assert!(!token.is_null(), "progress was asked for");
    for step in 1..=steps {
        tokio::time::sleep(Duration::from_millis(60)).await;
        let mut progress = json!({"progressToken": token, "progress": step});
        if let Some(total) = total {
            progress["total"] = json!(total);
        }
        fake.notify("notifications/progress", progress).await;
    }
}

#[tokio::test(start_paused = true)]
async fn progress_restarts_the_timeout_up_to_the_maximum() {
    let (client, mut fake) = connect(Era::Legacy, legacy(), full_capabilities()).await;
    let seen = Arc::new(AtomicUsize::new(0));
    let options = || {
        let seen = seen.clone();
        CallOptions::new()
            .timeout(Some(Duration::from_millis(100)))
            .on_progress(move |_| {
                seen.fetch_add(1, Ordering::SeqCst);
            })
            .reset_timeout_on_progress(Duration::from_millis(300))
    };

    // Progress every 60 ms keeps a call with a 100 ms timeout alive for 200 ms.
    let call = timed(client.call_tool_with("long", (), options()));
    let serve = async |fake: &mut Fake, request: Request| {
        report_progress(fake, &request, 3, Some(4)).await;
        fake.reply(&request.id, text_result("done")).await;
    };
    let ((result, elapsed), ()) = fake.serve("tools/call", call, serve).await;
    assert_eq!(text(&result.unwrap()), "done");
    assert!(elapsed > Duration::from_millis(150), "{elapsed:?}");
    assert_eq!(seen.load(Ordering::SeqCst), 3);

    // ... but not beyond the maximum.
    seen.store(0, Ordering::SeqCst);
    let call = timed(client.call_tool_with("endless", (), options()));
    let serve = async |fake: &mut Fake, request: Request| {
        report_progress(fake, &request, 8, None).await;
        request
    };
    let ((result, elapsed), request) = fake.serve("tools/call", call, serve).await;
    assert!(matches!(result, Err(Error::Timeout(_))), "{result:?}");
    assert!(
        elapsed >= Duration::from_millis(290) && elapsed < Duration::from_millis(450),
        "{elapsed:?}"
    );
    assert!(seen.load(Ordering::SeqCst) >= 3);
    fake.expect_cancelled(&request.id).await;
}

// -- 7. a legacy server's requests ----------------------------------------------------------------

/// The params of a `sampling/createMessage` that asks about `text`.
fn sampling(text: &str) -> Value {
    json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": 10,
    })
}

/// Fails unless the client refused the server's request with -32601 (method not found).
fn assert_method_not_found(answer: Result<Value, Value>) {
    let error = answer.unwrap_err();
    assert_eq!(error["code"], json!(-32601), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_legacy_server_s_requests_are_answered_by_the_handlers() {
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let builder = legacy()
        .on_sampling(move |params| {
            let started = started_tx.clone();
            async move {
                let asked = match params.messages.first().map(|m| &m.content) {
                    Some(model::CreateMessageResultContent::TextContent(t)) => t.text.clone(),
                    other => format!("{other:?}"),
                };
                if asked == "slow" {
                    let _ = started.send(());
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(sampled(json!({
                    "role": "assistant",
                    "content": {"type": "text", "text": format!("{asked}!")},
                    "model": "test-model",
                    "stopReason": "endTurn",
                })))
            }
        })
        .roots(vec![model::Root {
            meta: None,
            name: Some("src".into()),
            uri: "file:///src".into(),
        }]);
    let (client, mut fake) = connect(Era::Legacy, builder, full_capabilities()).await;
    assert_eq!(
        client.protocol_version(),
        Some(ProtocolVersion::V2025_11_25)
    );

    assert_eq!(
        fake.ask(json!("s1"), "sampling/createMessage", sampling("hi"))
            .await,
        Ok(json!({
            "role": "assistant",
            "content": {"type": "text", "text": "hi!"},
            "model": "test-model",
            "stopReason": "endTurn",
        }))
    );

    assert_eq!(
        fake.ask(json!(7), "roots/list", json!({})).await,
        Ok(json!({"roots": [{"uri": "file:///src", "name": "src"}]}))
    );

    // No elicitation handler, so no elicitation capability: refused.
    let elicit =
        json!({"message": "Who?", "requestedSchema": {"type": "object", "properties": {}}});
    let refused = fake.ask(json!("e1"), "elicitation/create", elicit).await;
    assert_method_not_found(refused);
    // A method no version has.
    let refused = fake.ask(json!("u1"), "no/such/method", json!({})).await;
    assert_method_not_found(refused);
    // Invalid params.
    let invalid = json!({"messages": 3});
    let error = fake
        .ask(json!("bad"), "sampling/createMessage", invalid)
        .await
        .unwrap_err();
    assert!(error["code"].is_i64(), "{error}");

    // A request the server cancels gets no answer.
    fake.request(json!("s2"), "sampling/createMessage", sampling("slow"))
        .await;
    tokio::time::timeout(common::WAIT, started.recv())
        .await
        .unwrap()
        .unwrap();
    fake.notify(
        "notifications/cancelled",
        json!({"requestId": "s2", "reason": "no longer needed"}),
    )
    .await;
    fake.expect_none(NO_MORE, "an answer to s2", |m| match m {
        Message::Response(r) => r.id == RequestId::from("s2"),
        Message::Error(e) => e.id == Some(RequestId::from("s2")),
        _ => false,
    })
    .await;
    // The client still answers.
    assert_eq!(fake.ask(json!("p"), "ping", json!({})).await, Ok(json!({})));
    assert_eq!(client.table_sizes().await.unwrap().inputs, 0);
}

/// Finding 12, the client's side: the server cancels its request 7 while the client's handler
/// is busy and sends a new request 7. The first handler finishes late (it blocks its thread, so
/// the cancellation cannot stop it): its answer is dropped, and the second request 7 gets the
/// second handler's answer, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_12_a_cancelled_handler_never_answers_a_reused_request_id() {
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (release_first, first_gate) = std::sync::mpsc::channel::<()>();
    let first_gate = Arc::new(std::sync::Mutex::new(first_gate));
    let second_gate = Arc::new(tokio::sync::Notify::new());
    let gate = second_gate.clone();
    let builder = legacy().on_elicitation(move |elicitation| {
        let started = started_tx.clone();
        let first_gate = first_gate.clone();
        let second_gate = gate.clone();
        async move {
            let Elicitation::Form { message, .. } = elicitation else {
                return Err(InputError::new("only forms"));
            };
            let _ = started.send(message.clone());
            if message == "first" {
                // Work that never awaits: aborting the task cannot stop it.
                tokio::task::block_in_place(|| {
                    let _ = first_gate.lock().unwrap().recv();
                });
            } else {
                second_gate.notified().await;
            }
            Ok(Elicited::accept(object(
                json!({"name": format!("answer to {message}")}),
            )))
        }
    });
    let (client, mut fake) = connect(Era::Legacy, builder, full_capabilities()).await;
    let elicit = |message: &str| {
        json!({
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        })
    };
    let next_start = async |started: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        tokio::time::timeout(common::WAIT, started.recv())
            .await
            .expect("a handler started")
            .unwrap()
    };
    let answer_to_7 = |m: &Message| match m {
        Message::Response(r) => id_json(&r.id) == json!(7),
        Message::Error(e) => e.id.as_ref().is_some_and(|i| id_json(i) == json!(7)),
        _ => false,
    };

    fake.request(json!(7), "elicitation/create", elicit("first"))
        .await;
    assert_eq!(next_start(&mut started).await, "first");
    fake.notify("notifications/cancelled", json!({"requestId": 7}))
        .await;
    fake.request(json!(7), "elicitation/create", elicit("second"))
        .await;
    assert_eq!(next_start(&mut started).await, "second");

    // The first handler answers late: that answer is for a request that is gone.
    release_first.send(()).unwrap();
    fake.expect_none(
        Duration::from_millis(500),
        "the cancelled handler's answer to request 7",
        answer_to_7,
    )
    .await;

    second_gate.notify_one();
    assert_eq!(
        fake.expect_response(&json!(7)).await,
        Ok(json!({"action": "accept", "content": {"name": "answer to second"}}))
    );
    fake.expect_none(
        Duration::from_millis(300),
        "a second answer to request 7",
        answer_to_7,
    )
    .await;
    assert_eq!(client.table_sizes().await.unwrap().inputs, 0);
}

#[tokio::test]
async fn a_modern_server_s_requests_are_refused() {
    let (client, mut fake) = connect(Era::Modern, eliciting_client(), full_capabilities()).await;
    assert_method_not_found(fake.ask(json!(1), "roots/list", json!({})).await);
    assert!(!client.is_closed());
}

// -- 8. the modern listen stream ------------------------------------------------------------------

async fn recv(notifications: &mut modelctx_client::Notifications) -> ServerNotification {
    tokio::time::timeout(common::WAIT, notifications.recv())
        .await
        .expect("a notification in time")
        .expect("a notification")
}

#[tokio::test(start_paused = true)]
async fn the_listen_stream_is_opened_acknowledged_and_reopened() {
    let capabilities = json!({
        "tools": {"listChanged": true},
        "prompts": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": false},
    });
    let (client, mut fake) = connect(Era::Modern, builder(), capabilities).await;
    let mut notifications = client.notifications();

    // The stream asks for what the server declared, and `listening` returns on the ack.
    let (listening, first) = tokio::join!(client.listening(), fake.acknowledge_listen());
    listening.unwrap();
    let p = params(&first);
    assert_eq!(
        p["notifications"],
        json!({"toolsListChanged": true, "promptsListChanged": true})
    );
    assert_eq!(p["_meta"][PROTOCOL_VERSION_KEY], json!(MODERN));
    let first = first.id;

    // Notifications of the stream reach the application.
    fake.notify_stream(&first, "notifications/tools/list_changed", json!({}))
        .await;
    assert_eq!(
        recv(&mut notifications).await,
        ServerNotification::ToolsListChanged
    );

    // The server ends the stream with a result: a new one is opened after a short delay.
    fake.reply(
        &first,
        json!({"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: first}}),
    )
    .await;
    let ended = Instant::now();
    let second = fake.expect_request("subscriptions/listen").await;
    assert!(ended.elapsed() >= Duration::from_millis(200), "not at once");
    assert_ne!(second.id, first);
    fake.acknowledge_asked(&second).await;
    assert_eq!(recv(&mut notifications).await, ServerNotification::Resynced);

    // ... or with notifications/cancelled.
    fake.notify(
        "notifications/cancelled",
        json!({"requestId": second.id, "reason": "restarting"}),
    )
    .await;
    let third = fake.acknowledge_listen().await;
    assert!(third.id != first && third.id != second.id);
    assert_eq!(recv(&mut notifications).await, ServerNotification::Resynced);
    fake.notify_stream(&third.id, "notifications/prompts/list_changed", json!({}))
        .await;
    assert_eq!(
        recv(&mut notifications).await,
        ServerNotification::PromptsListChanged
    );

    // A resource subscription replaces the stream with one that carries the URI.
    let (subscribed, fourth) = tokio::join!(
        client.subscribe_resource("file:///a"),
        fake.acknowledge_listen()
    );
    subscribed.unwrap();
    assert_eq!(
        params(&fourth)["notifications"],
        json!({
            "toolsListChanged": true,
            "promptsListChanged": true,
            "resourceSubscriptions": ["file:///a"],
        })
    );
    // The replaced stream is closed.
    fake.expect_cancelled(&third.id).await;
    let updated = json!({"uri": "file:///a"});
    fake.notify_stream(&fourth.id, "notifications/resources/updated", updated)
        .await;
    assert_eq!(
        recv(&mut notifications).await,
        ServerNotification::ResourceUpdated {
            uri: "file:///a".into()
        }
    );

    // A URI the server leaves out of its acknowledgement is not available.
    let serve = async |fake: &mut Fake, listen: Request| {
        let wanted = params(&listen)["notifications"].clone();
        assert_eq!(
            wanted["resourceSubscriptions"],
            json!(["file:///a", "file:///b"])
        );
        let agreed = json!({
            "toolsListChanged": true,
            "promptsListChanged": true,
            "resourceSubscriptions": ["file:///a"],
        });
        fake.acknowledge(&listen.id, agreed).await;
    };
    let subscribe = client.subscribe_resource("file:///b");
    let (refused, ()) = fake.serve("subscriptions/listen", subscribe, serve).await;
    assert!(
        matches!(&refused, Err(Error::UpdatesNotOffered { uri }) if uri == "file:///b"),
        "{refused:?}"
    );
    fake.expect_cancelled(&fourth.id).await;
    let sizes = client.table_sizes().await.unwrap();
    assert_eq!(sizes.listen_streams, 1, "{sizes:?}");
    assert_eq!(sizes.subscription_waiters, 0, "{sizes:?}");
}

#[tokio::test]
async fn notifications_of_other_streams_are_not_delivered_during_a_replacement() {
    let (client, mut fake) = connect(Era::Modern, builder(), full_capabilities()).await;
    let mut notifications = client.notifications();
    let (listening, first) = tokio::join!(client.listening(), fake.acknowledge_listen());
    listening.unwrap();
    let first = first.id;
    // An unacknowledged stream's notification is dropped (the server must ack first).
    let serve = async |fake: &mut Fake, listen: Request| {
        let new = &listen.id;
        fake.notify_stream(new, "notifications/tools/list_changed", json!({}))
            .await;
        fake.notify_stream(&first, "notifications/resources/list_changed", json!({}))
            .await;
        fake.acknowledge_asked(&listen).await;
        fake.notify_stream(&first, "notifications/prompts/list_changed", json!({}))
            .await;
        fake.notify_stream(new, "notifications/tools/list_changed", json!({}))
            .await;
    };
    let subscribe = client.subscribe_resource("file:///x");
    let (subscribed, ()) = fake.serve("subscriptions/listen", subscribe, serve).await;
    subscribed.unwrap();
    // The old stream's notification before the ack comes; after it, only the new stream's.
    assert_eq!(
        recv(&mut notifications).await,
        ServerNotification::ResourcesListChanged
    );
    assert_eq!(
        recv(&mut notifications).await,
        ServerNotification::ToolsListChanged
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_listen_stream_is_not_asked_for_again() {
    let (client, mut fake) = connect(Era::Modern, builder(), full_capabilities()).await;
    let _notifications = client.notifications();
    let listening = fake
        .answer_error(
            "subscriptions/listen",
            -32601,
            "no listening here",
            client.listening(),
        )
        .await;
    assert!(
        matches!(&listening, Err(Error::Remote(e)) if e.code.0 == -32601),
        "{listening:?}"
    );
    // Subscriptions ride on the stream: not available, and nothing is asked again.
    let subscribed = client.subscribe_resource("file:///a").await;
    assert!(
        matches!(&subscribed, Err(Error::UpdatesNotOffered { uri }) if uri == "file:///a"),
        "{subscribed:?}"
    );
    fake.expect_no_request(NO_MORE, "another listen", "subscriptions/listen")
        .await;
}

#[tokio::test]
async fn a_modern_server_may_cancel_a_call() {
    let (client, mut fake) = connect(Era::Modern, builder(), full_capabilities()).await;
    let cancel = async |fake: &mut Fake, request: Request| {
        let cancelled = json!({"requestId": request.id, "reason": "shutting down"});
        fake.notify("notifications/cancelled", cancelled).await;
    };
    let (result, ()) = fake
        .serve("tools/call", client.call_tool("t", ()), cancel)
        .await;
    assert!(
        matches!(&result, Err(Error::CancelledByServer(Some(why))) if why == "shutting down"),
        "{result:?}"
    );
    fake.check_call(&client, Era::Modern, "ok").await;
}

#[tokio::test(start_paused = true)]
async fn a_server_that_never_acknowledges_does_not_hold_the_caller() {
    let timeout = Duration::from_millis(100);
    let (client, mut fake) = connect(
        Era::Modern,
        builder().request_timeout(Some(timeout)),
        full_capabilities(),
    )
    .await;
    for _ in 0..3 {
        let started = Instant::now();
        let result = tokio::time::timeout(common::WAIT, client.subscribe_resource("file:///a"))
            .await
            .expect("subscribe_resource returned");
        assert!(matches!(result, Err(Error::Timeout(_))), "{result:?}");
        assert!(started.elapsed() >= timeout);
    }
    let result = tokio::time::timeout(common::WAIT, client.listening())
        .await
        .expect("listening returned");
    assert!(matches!(result, Err(Error::Timeout(_))), "{result:?}");
    // The callers that gave up are forgotten.
    let sizes = client.table_sizes().await.unwrap();
    assert!(sizes.subscription_waiters <= 1, "{sizes:?}");
    // The stream still asks for the URI: once acknowledged, subscribing is immediate.
    // (`listening` replaced the stream with one that also asks for list changes.)
    let mut listen = fake.expect_request("subscriptions/listen").await;
    while let Some(Message::Request(newer)) = fake
        .find(
            Duration::from_millis(50),
            |m| matches!(m, Message::Request(r) if r.method == "subscriptions/listen"),
        )
        .await
    {
        listen = newer;
    }
    let wanted = params(&listen)["notifications"].clone();
    assert_eq!(wanted["resourceSubscriptions"], json!(["file:///a"]));
    assert_eq!(wanted["toolsListChanged"], json!(true));
    fake.acknowledge(&listen.id, wanted).await;
    client.listening().await.unwrap();
    client.subscribe_resource("file:///a").await.unwrap();
    assert_eq!(client.table_sizes().await.unwrap().subscription_waiters, 0);
}

// -- 9. the end of the connection ------------------------------------------------------------------

#[tokio::test]
async fn the_server_closing_fails_calls_and_ends_notifications() {
    for era in Era::BOTH {
        let (client, mut fake) = connect(era, builder(), full_capabilities()).await;
        let mut notifications = client.notifications();
        let close = async |fake: &mut Fake, _| fake.close();
        let (result, ()) = fake
            .serve("tools/call", client.call_tool("t", ()), close)
            .await;
        assert!(
            matches!(result, Err(Error::Closed(_))),
            "{era:?}: {result:?}"
        );
        let later = client.call_tool("t", ()).await;
        assert!(matches!(later, Err(Error::Closed(_))), "{era:?}: {later:?}");
        let later = client.list_all_tools().await;
        assert!(matches!(later, Err(Error::Closed(_))), "{era:?}: {later:?}");
        let next = tokio::time::timeout(common::WAIT, async {
            loop {
                match notifications.recv().await {
                    Ok(_) => continue,
                    other => return other,
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(next, Err(RecvError::Closed));
        assert!(client.is_closed());
        assert_eq!(client.protocol_version(), None);
        // A receiver made after the end ends at once.
        assert_eq!(client.notifications().recv().await, Err(RecvError::Closed));
        client.close().await;
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_closes_the_transport() {
    let (client, mut fake) = connect(Era::Legacy, legacy(), full_capabilities()).await;
    let clone = client.clone();
    drop(client);
    fake.expect_none(NO_MORE, "anything", |_| true).await;
    drop(clone);
    // The client's side of the transport closes.
    fake.expect_end().await;
}

#[tokio::test]
async fn a_client_that_closes_fails_its_calls() {
    let (client, mut fake) = connect(Era::Legacy, legacy(), full_capabilities()).await;
    let other = client.clone();
    let close = async |_: &mut Fake, _| other.close().await;
    let (result, ()) = fake
        .serve("tools/call", client.call_tool("t", ()), close)
        .await;
    assert!(matches!(result, Err(Error::Closed(_))), "{result:?}");
    assert!(client.is_closed());
    assert!(matches!(client.ping().await, Err(Error::Closed(_))));
}

// -- a few more corners of the handshake and the eras ---------------------------------------------

#[tokio::test]
async fn the_probe_falls_back_to_initialize() {
    for (era, found) in [
        (Era::Legacy, modelctx_client::Era::Legacy),
        (Era::Modern, modelctx_client::Era::Modern),
    ] {
        let (client, _fake) = connect(era, builder(), full_capabilities()).await;
        assert_eq!(client.era(), Some(found));
        assert_eq!(
            client.server_info_json(),
            Some(json!({"name": "scripted", "version": "0.0.1"}))
        );
        let info = client.server_info().expect("a typed serverInfo");
        assert_eq!(
            (info.name.as_str(), info.version.as_str()),
            ("scripted", "0.0.1")
        );
    }
}

#[tokio::test(start_paused = true)]
async fn undeclared_features_are_not_available_and_nothing_is_sent() {
    for era in Era::BOTH {
        let (client, mut fake) = connect(era, builder(), json!({"tools": {}})).await;
        let result = client.list_prompts(None).await;
        assert!(
            matches!(&result, Err(Error::NotAvailable(SessionError::NotDeclared { capability, .. }))
                if capability == "prompts"),
            "{result:?}"
        );
        let result = client.read_resource("file:///a").await;
        assert!(
            matches!(&result, Err(Error::NotAvailable(SessionError::NotDeclared { capability, .. }))
                if capability == "resources"),
            "{result:?}"
        );
        fake.expect_none(NO_MORE, "a request", |m| matches!(m, Message::Request(_)))
            .await;
    }
}

#[tokio::test]
async fn a_json_rpc_error_is_remote_and_the_connection_lives_on() {
    let (client, mut fake) = connect(Era::Modern, builder(), full_capabilities()).await;
    let result = fake
        .answer_error(
            "tools/call",
            -32602,
            "unknown tool",
            client.call_tool("t", ()),
        )
        .await;
    assert!(
        matches!(&result, Err(Error::Remote(e)) if e.code.0 == -32602 && e.message == "unknown tool"),
        "{result:?}"
    );
    fake.check_call(&client, Era::Modern, "ok").await;
}

#[tokio::test]
async fn answers_to_unknown_ids_are_ignored() {
    let (client, mut fake) = connect(Era::Legacy, legacy(), full_capabilities()).await;
    let serve = async |fake: &mut Fake, request: Request| {
        // Answers nobody asked for, then the real one.
        fake.reply(&RequestId::Number(9999), text_result("stray"))
            .await;
        fake.reply(&RequestId::from("x"), text_result("stray"))
            .await;
        fake.reply_error(&RequestId::Number(777), -32000, "stray")
            .await;
        fake.send(json!({"id": null, "error": {"code": -32700, "message": "parse error"}}))
            .await;
        fake.reply(&request.id, text_result("real")).await;
    };
    let (result, ()) = fake
        .serve("tools/call", client.call_tool("t", ()), serve)
        .await;
    assert_eq!(text(&result.unwrap()), "real");
}

// -- the result cache -----------------------------------------------------------------------------

/// A cached result is served until its `ttlMs` has passed on the runtime's clock (paused here:
/// only `advance` moves it), then asked for again.
#[tokio::test(start_paused = true)]
async fn a_cached_result_expires_after_its_ttl_on_the_runtime_clock() {
    let cache = modelctx_client::ResultCache::new(64);
    let (client, mut fake) = connect(
        Era::Modern,
        builder().cache(cache.clone()),
        full_capabilities(),
    )
    .await;
    let page = |name: &str| {
        json!({"tools": [tool(name)], "resultType": "complete", "ttlMs": 1000,
            "cacheScope": "public"})
    };
    let names = |listed: Result<model::ListToolsResult, Error>| -> Vec<String> {
        listed.unwrap().tools.into_iter().map(|t| t.name).collect()
    };
    let (first, _) = fake
        .answer("tools/list", page("a"), client.list_tools(None))
        .await;
    assert_eq!(names(first), ["a"]);
    assert!(!cache.is_empty());

    // Within its ttlMs: from the cache, at once (a request would get no answer from the fake,
    // and the call would fail when its timeout passes on the paused clock).
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(names(client.list_tools(None).await), ["a"]);

    // Past it: asked again.
    tokio::time::advance(Duration::from_millis(2)).await;
    let (fresh, _) = fake
        .answer("tools/list", page("b"), client.list_tools(None))
        .await;
    assert_eq!(names(fresh), ["b"]);
}
