//! The race behind the flaky conformance scenario `sse-retry` (2026-11-27): the conformance
//! client (`tests/src/bin/conformance-client.rs`) against a scripted copy of the suite's mock,
//! with the ordering that the suite leaves to chance made explicit; and the HTTP transport when
//! a server answers a request on a stream other than the request's own.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modelctx_http::client::{ClientConfig, HttpTransport, Inbound};
use modelctx_tests::http::within;
use modelctx_tests::http_client::{
    Driver, Reply, ScriptServer, Seen, initialize_result, legacy_config, text_of, text_result,
};
use modelctx_types::{Incoming, Message, Notification, Request, RequestId};
use serde_json::{Value, json};
use tokio::sync::watch;

const CLIENT: &str = env!("CARGO_BIN_EXE_conformance-client");

/// The `retry` of the `sse-retry` mock, in ms.
const RETRY_MS: u64 = 500;
/// How long the mock holds a GET that came before the tool call, for a client that waits for
/// its standalone stream before calling: the outcome does not depend on it, only how long a
/// correct client takes here.
const HOLD: Duration = Duration::from_secs(2);

/// What the `sse-retry` mock knows, as in the suite (`@modelcontextprotocol/conformance`
/// 0.2.0-alpha.12, class `sse-retry`).
#[derive(Default)]
struct SseRetry {
    /// The counter of the event ids it sends (`event-N`).
    events: u32,
    /// The id of the tool call whose stream it closed without the result.
    pending: Option<Value>,
    /// The id of the priming event on the tool call's stream.
    call_priming: Option<String>,
    /// When it closed the tool call's stream.
    closed_at: Option<Instant>,
}

/// A scripted copy of the suite's `sse-retry` mock: every GET gets a priming event (an id,
/// `retry: 500`, empty data) and, when a tool call is pending, its result; `tools/call` is
/// answered with a stream that carries only a priming event and is closed 50 ms later. The mock
/// treats any GET as the resumption of the pending call, so a standalone GET that reaches it
/// after the call takes the result, and the client never resumes with `Last-Event-ID`.
///
/// `hold_early_gets` makes that ordering certain: a GET without `Last-Event-ID` that comes
/// before the call waits for it (at most [`HOLD`]).
async fn sse_retry_mock(hold_early_gets: bool) -> (ScriptServer, Arc<Mutex<SseRetry>>) {
    let state = Arc::new(Mutex::new(SseRetry::default()));
    let (called, _) = watch::channel(false);
    let called = Arc::new(called);
    let mock = state.clone();
    let server = ScriptServer::start(move |seen: Seen, mut reply: Reply| {
        let state = mock.clone();
        let called = called.clone();
        async move {
            let session = [("mcp-session-id", "session-1")];
            match (seen.method.as_str(), seen.rpc_method()) {
                ("POST", Some("initialize")) => {
                    reply
                        .json(200, &session, &initialize_result(&seen.body["id"]))
                        .await;
                }
                ("POST", Some("tools/list")) => {
                    let tools = json!({"jsonrpc": "2.0", "id": seen.body["id"], "result": {
                        "tools": [{
                            "name": "test_reconnection",
                            "description": "closes the stream of its call",
                            "inputSchema": {"type": "object", "properties": {}, "required": []},
                        }],
                    }});
                    reply.json(200, &session, &tools).await;
                }
                ("POST", Some("tools/call")) => {
                    let priming = {
                        let mut state = state.lock().unwrap();
                        state.pending = Some(seen.body["id"].clone());
                        state.events += 1;
                        let id = format!("event-{}", state.events);
                        state.call_priming = Some(id.clone());
                        id
                    };
                    called.send_replace(true);
                    reply.sse_head(&session).await;
                    reply
                        .raw(format!("id: {priming}\nretry: {RETRY_MS}\ndata: \n\n").as_bytes())
                        .await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    state.lock().unwrap().closed_at = Some(Instant::now());
                    drop(reply);
                }
                ("POST", _) if seen.body.get("id").is_none() => reply.full(202, &[], "").await,
                ("POST", _) => {
                    let empty = json!({"jsonrpc": "2.0", "id": seen.body["id"], "result": {}});
                    reply.json(200, &session, &empty).await;
                }
                ("GET", _) => {
                    if hold_early_gets && seen.header("last-event-id").is_none() {
                        let mut called = called.subscribe();
                        let _ = tokio::time::timeout(HOLD, called.wait_for(|c| *c)).await;
                    }
                    let events = {
                        let mut state = state.lock().unwrap();
                        state.events += 1;
                        let mut events =
                            format!("id: event-{}\nretry: {RETRY_MS}\ndata: \n\n", state.events);
                        if let Some(id) = state.pending.take() {
                            state.events += 1;
                            let result =
                                text_result(&id, "Reconnection test completed successfully");
                            events.push_str(&format!(
                                "event: message\nid: event-{}\ndata: {result}\n\n",
                                state.events
                            ));
                        }
                        events
                    };
                    reply.sse_head(&session).await;
                    reply.raw(events.as_bytes()).await;
                    // The mock never ends a GET stream: the client's exit closes it.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                _ => reply.full(405, &[], "").await,
            }
        }
    })
    .await;
    (server, state)
}

/// Runs the conformance client on `scenario` against `url`, as the suite does; its exit status
/// and stderr.
async fn run_client(scenario: &str, url: &str) -> (std::process::ExitStatus, String) {
    let child = tokio::process::Command::new(CLIENT)
        .arg(url)
        .env("MCP_CONFORMANCE_SCENARIO", scenario)
        .env("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the conformance client starts");
    let output = within(scenario, child.wait_with_output())
        .await
        .expect("the conformance client runs");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The suite's checks of `sse-retry`: the client resumes the call's stream with GET and
/// `Last-Event-ID` naming the call's priming event (`ClientSendsLastEventId`), and its last GET
/// comes at least `retry` minus the suite's 50 ms tolerance after the stream closed
/// (`ClientRespectsRetryField`).
fn assert_sse_retry_checks(server: &ScriptServer, state: &Mutex<SseRetry>) {
    let seen = server.seen();
    let gets: Vec<&Seen> = seen.iter().filter(|s| s.method == "GET").collect();
    let state = state.lock().unwrap();
    let priming = state
        .call_priming
        .clone()
        .expect("the client called the tool");
    let ids: Vec<Option<&str>> = gets.iter().map(|g| g.header("last-event-id")).collect();
    assert!(
        ids.contains(&Some(priming.as_str())),
        "ClientSendsLastEventId: no GET carried Last-Event-ID: {priming} (GETs: {ids:?}); the \
         tool result went out on a GET that was no resumption"
    );
    let closed = state.closed_at.expect("the mock closed the call's stream");
    let last = gets.last().expect("a GET").at;
    let waited = last.saturating_duration_since(closed);
    assert!(
        waited >= Duration::from_millis(RETRY_MS - 50),
        "ClientRespectsRetryField: the last GET came {waited:?} after the close"
    );
}

/// The flaky `sse-retry` run of 2026-11-27 (`ClientSendsLastEventId` warned): the standalone
/// GET reached the mock after `tools/call`, took the tool result, and the client finished
/// without ever resuming. The mock here holds such a GET until the call comes, which loses that
/// race every time; the client must wait for its standalone stream before it calls.
#[tokio::test]
async fn sse_retry_the_standalone_get_never_takes_the_result_of_the_call_from_the_resumption() {
    let (server, state) = sse_retry_mock(true).await;
    let url = format!("http://{}", server.addr);
    let (status, stderr) = run_client("sse-retry", &url).await;
    assert!(status.success(), "{status}: {stderr}");
    assert_sse_retry_checks(&server, &state);
}

/// The same mock without the hold: the ordinary run.
#[tokio::test]
async fn sse_retry_passes_the_suites_checks() {
    let (server, state) = sse_retry_mock(false).await;
    let url = format!("http://{}", server.addr);
    let (status, stderr) = run_client("sse-retry", &url).await;
    assert!(status.success(), "{status}: {stderr}");
    assert_sse_retry_checks(&server, &state);
}

/// A server that answers a call on the standalone GET stream (as the mock does for a GET that
/// comes while the call is pending) after the call's own stream closed with a priming event: the
/// answer ends the call's exchange, whose resumption with `Last-Event-ID` was waiting for the
/// server's `retry` (10 s here, so the answer certainly comes first). Before, that exchange
/// stayed in the transport's tables and resumed the stream of an answered request.
#[tokio::test]
async fn an_answer_on_the_standalone_stream_ends_the_resumption_of_its_request() {
    let (called, _) = watch::channel(false);
    let called = Arc::new(called);
    let server = ScriptServer::start(move |seen: Seen, mut reply: Reply| {
        let called = called.clone();
        async move {
            let session = [("mcp-session-id", "s1")];
            match (seen.method.as_str(), seen.rpc_method()) {
                ("POST", Some("initialize")) => {
                    reply
                        .json(200, &session, &initialize_result(&seen.body["id"]))
                        .await;
                }
                ("POST", Some("tools/call")) => {
                    reply.sse_head(&[]).await;
                    reply.raw(b"id: e1\nretry: 10000\ndata:\n\n").await;
                    drop(reply);
                    called.send_replace(true);
                }
                ("POST", _) => reply.full(202, &[], "").await,
                ("GET", _) if seen.header("last-event-id").is_none() => {
                    reply.sse_head(&[]).await;
                    reply.raw(b"id: g1\ndata:\n\n").await;
                    // The call's stream has closed when the answer goes out here.
                    let _ = called.subscribe().wait_for(|c| *c).await;
                    let answer = text_result(&json!(2), "on the standalone stream");
                    reply
                        .raw(format!("id: g2\ndata: {answer}\n\n").as_bytes())
                        .await;
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                _ => reply.full(405, &[], "").await,
            }
        }
    })
    .await;
    let mut client = Driver::new(&server.url(), legacy_config(), ClientConfig::default());
    within("connect", client.connect()).await.unwrap();
    let id = client.start("tools/call", json!({"name": "x", "arguments": {}}));
    assert_eq!(id.to_string(), "2");
    let result = within("answer", client.answer(&id)).await.unwrap();
    assert_eq!(text_of(&result), "on the standalone stream");
    // Only the standalone stream is left: the call's exchange ended with the answer.
    let sizes = client.transport.table_sizes();
    assert_eq!((sizes.tasks, sizes.requests), (1, 0), "{sizes:?}");
    assert!(
        server
            .seen()
            .iter()
            .all(|s| s.header("last-event-id").is_none()),
        "an answered request's stream was resumed"
    );
}

/// A 2025-03-26 batch of two calls: the first is answered on the batch's stream, which then
/// closes with a priming event and `retry` (`retry_ms`); the second is answered on the standalone
/// stream when `answer` is set. The batch's stream closes when `close` is set.
struct BatchServer {
    server: ScriptServer,
    answer: Arc<watch::Sender<bool>>,
    close: Arc<watch::Sender<bool>>,
}

async fn batch_server(retry_ms: u64) -> BatchServer {
    let answer = Arc::new(watch::channel(false).0);
    let close = Arc::new(watch::channel(false).0);
    let (answer_rx, close_rx) = (answer.clone(), close.clone());
    let server = ScriptServer::start(move |seen: Seen, mut reply: Reply| {
        let (answer, close) = (answer_rx.clone(), close_rx.clone());
        async move {
            let session = [("mcp-session-id", "s1")];
            if seen.rpc_method() == Some("initialize") {
                let mut init = initialize_result(&seen.body["id"]);
                init["result"]["protocolVersion"] = json!("2025-03-26");
                reply.json(200, &session, &init).await;
                return;
            }
            match seen.method.as_str() {
                "POST" if seen.body.is_array() => {
                    reply.sse_head(&[]).await;
                    let first = text_result(&json!(2), "on the batch's stream");
                    let events = format!("data: {first}\n\nid: e1\nretry: {retry_ms}\ndata:\n\n");
                    reply.raw(events.as_bytes()).await;
                    let _ = close.subscribe().wait_for(|c| *c).await;
                }
                "POST" => reply.full(202, &[], "").await,
                "GET" if seen.header("last-event-id").is_none() => {
                    reply.sse_head(&[]).await;
                    reply.raw(b"id: g1\ndata:\n\n").await;
                    let _ = answer.subscribe().wait_for(|a| *a).await;
                    let second = text_result(&json!(3), "on the standalone stream");
                    reply
                        .raw(format!("id: g2\ndata: {second}\n\n").as_bytes())
                        .await;
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                _ => reply.full(405, &[], "").await,
            }
        }
    })
    .await;
    BatchServer {
        server,
        answer,
        close,
    }
}

/// A legacy transport on `url` with its session initialized and its standalone stream open.
async fn initialized_transport(url: &str) -> HttpTransport {
    let mut transport = HttpTransport::new(url, ClientConfig::default()).unwrap();
    let init = json!({
        "protocolVersion": "2025-03-26",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    });
    let options = modelctx_http::client::SendOptions::default().starts_session();
    transport
        .send_with(request(1, "initialize", init), options)
        .unwrap();
    loop {
        match within("initialize", transport.recv()).await {
            Some(Inbound::Message(Incoming::Single(Message::Response(_)))) => {
                let initialized = Notification::new("notifications/initialized", &json!({}));
                let options = modelctx_http::client::SendOptions::default().opens_standalone();
                transport
                    .send_with(Message::Notification(initialized.unwrap()), options)
                    .unwrap();
            }
            Some(Inbound::StandaloneOpened) => return transport,
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn request(id: i64, method: &str, params: Value) -> Message {
    Message::Request(Request::new(RequestId::Number(id), method, &params).unwrap())
}

/// Waits for the answers to `ids`, in any order.
async fn answers(transport: &mut HttpTransport, ids: &[i64]) {
    let mut waiting: Vec<RequestId> = ids.iter().map(|id| RequestId::Number(*id)).collect();
    while !waiting.is_empty() {
        match within("the answers", transport.recv()).await {
            Some(Inbound::Message(Incoming::Single(Message::Response(r)))) => {
                waiting.retain(|id| *id != r.id);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The batch's exchange ends (only the standalone stream is left), and no GET resumed the
/// batch's stream.
async fn assert_batch_ended_unresumed(transport: &HttpTransport, server: &ScriptServer) {
    within("the batch's exchange ends", async {
        while transport.table_sizes().tasks != 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(transport.table_sizes().requests, 0);
    assert!(
        server
            .seen()
            .iter()
            .all(|s| s.header("last-event-id").is_none()),
        "the stream of an answered batch was resumed"
    );
}

/// A batch whose second request is answered on the standalone stream before the batch's stream
/// closes: nothing is left to resume (the server's `retry` of 60 s is never waited).
#[tokio::test]
async fn a_batch_answered_on_two_streams_is_not_resumed() {
    let batch = batch_server(60_000).await;
    let mut transport = initialized_transport(&batch.server.url()).await;
    let call = |id| request(id, "tools/call", json!({"name": "x", "arguments": {}}));
    transport.send_batch(vec![call(2), call(3)]).unwrap();
    batch.answer.send_replace(true);
    answers(&mut transport, &[2, 3]).await;
    batch.close.send_replace(true);
    assert_batch_ended_unresumed(&transport, &batch.server).await;
}

/// The same when the second answer comes while the batch's exchange waits the server's `retry`
/// (3 s, ample for the answer to arrive) to resume: it ends when the wait is over, without
/// resuming.
#[tokio::test]
async fn a_batch_answered_while_it_waits_to_resume_is_not_resumed() {
    let batch = batch_server(3_000).await;
    let mut transport = initialized_transport(&batch.server.url()).await;
    let call = |id| request(id, "tools/call", json!({"name": "x", "arguments": {}}));
    transport.send_batch(vec![call(2), call(3)]).unwrap();
    batch.close.send_replace(true);
    answers(&mut transport, &[2]).await;
    batch.answer.send_replace(true);
    answers(&mut transport, &[3]).await;
    assert_batch_ended_unresumed(&transport, &batch.server).await;
}
