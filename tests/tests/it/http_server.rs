//! The Streamable HTTP server on 127.0.0.1, port 0, driven with raw HTTP/1.1 requests: the
//! transport rules of 2025-03-26 to 2026-07-28, security, resumption, bounds.

use std::sync::Arc;
use std::time::Duration;

use modelctx_http::server::ServerConfig;
use modelctx_tests::http::{
    TestApp, call, modern_call, modern_headers, modern_meta, open_session, post, post_headers,
    raw_request, start, within,
};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_mints_a_session_id_and_requests_need_it() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    assert_eq!(session.len(), 32, "128 bits as hex");
    assert!(session.bytes().all(|b| b.is_ascii_hexdigit()));
    // Another session gets another id.
    assert_ne!(open_session(addr, "2025-11-25").await, session);

    // Missing session id: 400. Unknown: 404.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(
        post(addr, &post_headers(None, None), &list).await.status,
        400
    );
    assert_eq!(
        post(addr, &post_headers(Some("nope"), None), &list)
            .await
            .status,
        404
    );
    // With it: a JSON answer (the response came first).
    let response = post(
        addr,
        &post_headers(Some(&session), Some("2025-11-25")),
        &list,
    )
    .await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("application/json"));
    let body = response.json().await;
    assert_eq!(body["result"]["tools"].as_array().map(Vec::len), Some(7));

    // An unsupported MCP-Protocol-Version: 400; absent or any supported one: accepted.
    assert_eq!(
        post(
            addr,
            &post_headers(Some(&session), Some("1999-01-01")),
            &list
        )
        .await
        .status,
        400
    );
    assert_eq!(
        post(
            addr,
            &post_headers(Some(&session), Some("2025-03-26")),
            &list
        )
        .await
        .status,
        200
    );
    assert_eq!(
        post(addr, &post_headers(Some(&session), None), &list)
            .await
            .status,
        200
    );

    // DELETE ends it; then 404.
    let deleted = within(
        "delete",
        raw_request(addr, "DELETE", "/mcp", &[("Mcp-Session-Id", &session)], b""),
    )
    .await;
    assert_eq!(deleted.status, 200);
    assert_eq!(
        post(addr, &post_headers(Some(&session), None), &list)
            .await
            .status,
        404
    );
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_and_responses_get_202() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-06-18").await;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"});
    let response = post(addr, &post_headers(Some(&session), None), &note).await;
    assert_eq!(response.status, 202);
    assert!(response.body().await.is_empty());
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_opens_a_stream_with_event_ids_and_priming_on_2025_11_25() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    for (version, primes) in [
        ("2025-11-25", true),
        ("2025-06-18", false),
        ("2025-03-26", false),
    ] {
        let session = open_session(addr, version).await;
        let mut body = call(5, "progress", json!({"count": 3}));
        body["params"]["_meta"] = json!({"progressToken": "p"});
        let mut response = post(addr, &post_headers(Some(&session), Some(version)), &body).await;
        assert_eq!(response.status, 200, "{version}");
        assert_eq!(response.header("content-type"), Some("text/event-stream"));
        assert_eq!(response.header("x-accel-buffering"), Some("no"));
        let first = within("event", response.next_event()).await.unwrap();
        if primes {
            assert!(first.id.is_some() && first.data.is_empty(), "{first:?}");
            assert_eq!(first.retry, Some(1000));
        } else {
            assert!(!first.data.is_empty(), "{version}: no priming: {first:?}");
        }
        let mut messages = Vec::new();
        if !primes {
            messages.push((
                first.id.clone(),
                serde_json::from_str::<Value>(&first.data).unwrap(),
            ));
        }
        while let Some(message) = within("message", response.next_message()).await {
            messages.push(message);
        }
        let methods: Vec<&str> = messages
            .iter()
            .map(|(_, m)| m["method"].as_str().unwrap_or("result"))
            .collect();
        assert_eq!(
            methods,
            [
                "notifications/progress",
                "notifications/progress",
                "notifications/progress",
                "result"
            ],
            "{version}"
        );
        assert!(
            messages.iter().all(|(id, _)| id.is_some()),
            "every event has an id"
        );
        assert_eq!(messages[3].1["id"], 5);
    }
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumption_replays_exactly_that_streams_events() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let n = 40;
    let mut body = call(7, "progress", json!({"count": n}));
    body["params"]["_meta"] = json!({"progressToken": 1});
    let mut response = post(
        addr,
        &post_headers(Some(&session), Some("2025-11-25")),
        &body,
    )
    .await;
    // Another stream on the same session, whose events must never show up in the resumption.
    let mut other = call(8, "progress", json!({"count": 5}));
    other["params"]["_meta"] = json!({"progressToken": 2});
    let other = post(
        addr,
        &post_headers(Some(&session), Some("2025-11-25")),
        &other,
    )
    .await;
    drop(other);
    let mut seen: Vec<Value> = Vec::new();
    let mut last_id = within("priming", response.next_event())
        .await
        .unwrap()
        .id
        .unwrap();
    // Drop the connection every K events, resume with Last-Event-ID.
    let k = 7;
    loop {
        let mut read = 0;
        let mut ended = true;
        while let Some((id, message)) = within("event", response.next_message()).await {
            last_id = id.unwrap();
            seen.push(message);
            read += 1;
            if read == k {
                ended = false;
                break;
            }
        }
        if ended {
            break;
        }
        drop(response);
        response = within(
            "resume",
            raw_request(
                addr,
                "GET",
                "/mcp",
                &[
                    ("Accept", "text/event-stream"),
                    ("Mcp-Session-Id", &session),
                    ("Last-Event-ID", &last_id),
                ],
                b"",
            ),
        )
        .await;
        assert_eq!(response.status, 200);
    }
    let progress: Vec<f64> = seen
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| {
            assert_eq!(
                m["params"]["progressToken"], 1,
                "another stream's event: {m}"
            );
            m["params"]["progress"].as_f64().unwrap()
        })
        .collect();
    let expected: Vec<f64> = (1..=n).map(|i| i as f64).collect();
    assert_eq!(progress, expected, "every event once, in order");
    assert_eq!(seen.last().unwrap()["id"], 7);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slow_request_never_delays_the_others() {
    let (server, app) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let slow_session = session.clone();
    let slow = tokio::spawn(async move {
        post(
            addr,
            &post_headers(Some(&slow_session), None),
            &call(1, "slow", json!({})),
        )
        .await
        .json()
        .await
    });
    // The fast ones complete while the slow one waits on its gate.
    for i in 2..12 {
        let text = format!("fast {i}");
        let body = post(
            addr,
            &post_headers(Some(&session), None),
            &call(i, "echo", json!({"text": text})),
        )
        .await
        .json()
        .await;
        assert_eq!(body["result"]["content"][0]["text"], text);
    }
    assert!(!slow.is_finished());
    app.gates.slow.notify_one();
    let slow = within("slow", slow).await.unwrap();
    assert_eq!(slow["result"]["content"][0]["text"], "slow done");
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_rebinding_probes_get_403() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let mut headers = post_headers(None, None);
    headers.push(("Host", "evil.example.com"));
    headers.push(("Origin", "http://evil.example.com"));
    let response = post(addr, &headers, &init).await;
    assert_eq!(response.status, 403);
    let body = response.json().await;
    assert!(
        body["error"]["code"].is_i64() && body["id"].is_null(),
        "{body}"
    );

    let host = format!("localhost:{}", addr.port());
    let origin = format!("http://localhost:{}", addr.port());
    let mut headers = post_headers(None, None);
    headers.push(("Host", &host));
    headers.push(("Origin", &origin));
    assert_eq!(post(addr, &headers, &init).await.status, 200);
    let mut headers = post_headers(None, None);
    headers.push(("Origin", "http://evil.example.com"));
    assert_eq!(post(addr, &headers, &init).await.status, 403);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_get_clear_errors() {
    let mut config = ServerConfig::default();
    config.max_body = 1024;
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let big = vec![b' '; 4096];
    type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<u8>, u16);
    let cases: Vec<Case<'_>> = vec![
        (post_headers(None, None), big, 413),
        (post_headers(None, None), Vec::new(), 400),
        (post_headers(None, None), b"{not json".to_vec(), 400),
        (post_headers(None, None), b"[]".to_vec(), 400),
        (
            vec![
                ("Content-Type", "text/plain"),
                ("Accept", "application/json, text/event-stream"),
            ],
            b"{}".to_vec(),
            415,
        ),
        (
            vec![
                ("Content-Type", "application/json"),
                ("Accept", "text/html"),
            ],
            b"{}".to_vec(),
            406,
        ),
    ];
    for (headers, body, status) in cases {
        let response = within("post", raw_request(addr, "POST", "/mcp", &headers, &body)).await;
        assert_eq!(
            response.status,
            status,
            "{:?}",
            String::from_utf8_lossy(&body)
        );
        let reply = response.json().await;
        assert!(reply["error"]["code"].is_i64(), "{reply}");
    }
    // Other paths and methods.
    let response = within("get", raw_request(addr, "GET", "/other", &[], b"")).await;
    assert_eq!(response.status, 404);
    let response = within("put", raw_request(addr, "PUT", "/mcp", &[], b"")).await;
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), Some("GET, POST, DELETE"));
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_only_on_2025_03_26() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "b"}}},
    ]);
    let old = open_session(addr, "2025-03-26").await;
    let response = post(addr, &post_headers(Some(&old), Some("2025-03-26")), &batch).await;
    assert_eq!(response.status, 200);
    let reply = response.json().await;
    let ids: Vec<i64> = reply
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{reply}");
    // A batch of only invalid members waits for, and gets, their errors as one array.
    let invalid = json!([{"jsonrpc": "2.0", "id": 7}, 5]);
    let response = post(
        addr,
        &post_headers(Some(&old), Some("2025-03-26")),
        &invalid,
    )
    .await;
    assert_eq!(response.status, 200);
    let reply = within("errors", response.json()).await;
    let codes: Vec<i64> = reply
        .as_array()
        .unwrap_or_else(|| panic!("an array: {reply}"))
        .iter()
        .map(|m| m["error"]["code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, [-32600, -32600], "{reply}");
    assert_eq!(reply[0]["id"], 7);
    assert!(server.service().table_sizes().await.requests == 0);
    let new = open_session(addr, "2025-06-18").await;
    let response = post(addr, &post_headers(Some(&new), None), &batch).await;
    assert_eq!(response.status, 400);
    assert_eq!(response.json().await["error"]["code"], -32600);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_requests_are_stateless_and_checked_before_they_run() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    // A good one: JSON, with the modern result rules, and a session id header is ignored.
    let mut headers = modern_headers("tools/call", Some("echo"));
    headers.push(("Mcp-Session-Id", "ignored"));
    let response = post(
        addr,
        &headers,
        &modern_call(1, "echo", json!({"text": "hi"})),
    )
    .await;
    assert_eq!(response.status, 200);
    assert!(response.header("mcp-session-id").is_none());
    let body = response.json().await;
    assert_eq!(body["result"]["content"][0]["text"], "hi", "{body}");
    assert_eq!(body["result"]["resultType"], "complete");

    // Header and body disagree: 400 with -32020.
    let response = post(
        addr,
        &modern_headers("tools/call", Some("other")),
        &modern_call(2, "echo", json!({})),
    )
    .await;
    assert_eq!(response.status, 400);
    assert_eq!(response.json().await["error"]["code"], -32020);
    let response = post(
        addr,
        &modern_headers("tools/list", None),
        &modern_call(3, "echo", json!({})),
    )
    .await;
    assert_eq!(response.status, 400);
    // MCP-Protocol-Version must equal the _meta version.
    let mut headers = modern_headers("tools/call", Some("echo"));
    headers[2] = ("MCP-Protocol-Version", "2025-11-25");
    let response = post(addr, &headers, &modern_call(4, "echo", json!({}))).await;
    assert_eq!(response.status, 400);
    assert_eq!(response.json().await["error"]["code"], -32020);
    // Unsupported version: 400 with -32022 and the supported list.
    let mut body = modern_call(5, "echo", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let mut headers = modern_headers("tools/call", Some("echo"));
    headers[2] = ("MCP-Protocol-Version", "2099-01-01");
    let response = post(addr, &headers, &body).await;
    assert_eq!(response.status, 400);
    let reply = response.json().await;
    assert_eq!(reply["error"]["code"], -32022);
    assert_eq!(reply["error"]["data"]["supported"], json!(["2026-07-28"]));
    assert_eq!(reply["error"]["data"]["requested"], "2099-01-01");
    // A header that disagrees with the body is a mismatch even when the body's version is not
    // served: -32020, not -32022.
    let mut body = modern_call(51, "echo", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let response = post(addr, &modern_headers("tools/call", Some("echo")), &body).await;
    assert_eq!(response.status, 400);
    let reply = response.json().await;
    assert_eq!(reply["error"]["code"], -32020, "{reply}");
    assert_eq!(reply["id"], 51);
    // Whether the headers agree with the body is the transport's (wire) rule, checked before
    // the protocol session sees the request and its `_meta`: a request that breaks both gets
    // -32020, not -32602.
    let mut body = modern_call(52, "echo", json!({}));
    body["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let mut headers = modern_headers("tools/call", Some("echo"));
    headers[2] = ("MCP-Protocol-Version", "2025-11-25");
    let response = post(addr, &headers, &body).await;
    assert_eq!(response.status, 400);
    assert_eq!(response.json().await["error"]["code"], -32020);
    // A body that names no version, under a 2026-07-28 header: the session's -32602 (the header
    // has nothing to disagree with).
    let mut body = modern_call(53, "echo", json!({}));
    body["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/protocolVersion");
    let response = post(addr, &modern_headers("tools/call", Some("echo")), &body).await;
    assert_eq!(response.status, 400);
    let reply = response.json().await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert_eq!(reply["id"], 53);
    // Missing client capabilities: 400 with -32602.
    let mut body = modern_call(6, "echo", json!({}));
    body["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let response = post(addr, &modern_headers("tools/call", Some("echo")), &body).await;
    assert_eq!(response.status, 400);
    assert_eq!(response.json().await["error"]["code"], -32602);
    // Unknown method: 404 with -32601.
    let unknown =
        json!({"jsonrpc": "2.0", "id": 7, "method": "no/such", "params": {"_meta": modern_meta()}});
    let response = post(addr, &modern_headers("no/such", None), &unknown).await;
    assert_eq!(response.status, 404);
    assert_eq!(response.json().await["error"]["code"], -32601);
    // So is initialize, which 2026-07-28 removed: no session is opened.
    let initialize = json!({"jsonrpc": "2.0", "id": 8, "method": "initialize",
        "params": {"_meta": modern_meta()}});
    let response = post(addr, &modern_headers("initialize", None), &initialize).await;
    assert_eq!(response.status, 404);
    assert!(response.header("mcp-session-id").is_none());
    let reply = response.json().await;
    assert_eq!(reply["error"]["code"], -32601, "{reply}");
    assert_eq!(reply["id"], 8);
    assert!(
        server.service().table_sizes().await.is_empty(),
        "nothing kept"
    );
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_stream_has_no_event_ids_and_a_modern_only_server_refuses_get() {
    let mut config = ServerConfig::default();
    config
        .versions
        .retain(|v| v.era() == modelctx_types::Era::Modern);
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let mut body = modern_call(1, "progress", json!({"count": 2}));
    body["params"]["_meta"]["progressToken"] = json!("t");
    let mut response = post(addr, &modern_headers("tools/call", Some("progress")), &body).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    let mut count = 0;
    while let Some(event) = within("event", response.next_event()).await {
        assert!(event.id.is_none() && event.retry.is_none(), "{event:?}");
        count += 1;
    }
    assert_eq!(count, 3);
    for method in ["GET", "DELETE"] {
        let response = within("m", raw_request(addr, method, "/mcp", &[], b"")).await;
        assert_eq!(response.status, 405);
        assert_eq!(response.header("allow"), Some("POST"));
    }
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sessions_opened_and_closed_leave_nothing_behind() {
    let (server, app) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    for _ in 0..1000 {
        let session = open_session(addr, "2025-11-25").await;
        let response =
            raw_request(addr, "DELETE", "/mcp", &[("Mcp-Session-Id", &session)], b"").await;
        assert_eq!(response.status, 200);
    }
    assert!(server.service().table_sizes().await.is_empty());
    let store = server.service().config().event_store.sizes().await.unwrap();
    assert!(store.is_empty(), "{store:?}");
    within("app", async {
        while *app.open.lock().unwrap() != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_cap_evicts_idle_sessions_and_gives_503_when_none_is_idle() {
    let mut config = ServerConfig::default();
    config.max_sessions = 2;
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let first = open_session(addr, "2025-11-25").await;
    open_session(addr, "2025-11-25").await;
    // Full of idle sessions: the least recently used one makes room.
    let third = open_session(addr, "2025-11-25").await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let gone = post(addr, &post_headers(Some(&first), Some("2025-11-25")), &list).await;
    assert_eq!(gone.status, 404);
    assert_eq!(server.service().table_sizes().await.sessions, 2);
    // Every session with an open stream: nothing to evict.
    let fourth = open_session(addr, "2025-11-25").await;
    let mut streams = Vec::new();
    for session in [&third, &fourth] {
        let stream = within(
            "get",
            raw_request(
                addr,
                "GET",
                "/mcp",
                &[
                    ("Accept", "text/event-stream"),
                    ("Mcp-Session-Id", session),
                    ("MCP-Protocol-Version", "2025-11-25"),
                ],
                b"",
            ),
        )
        .await;
        assert_eq!(stream.status, 200);
        streams.push(stream);
    }
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}});
    let response = post(addr, &post_headers(None, None), &init).await;
    assert_eq!(response.status, 503);
    assert!(response.header("retry-after").is_some());
    drop(streams);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_requests_go_on_the_stream_of_the_call() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let mut response = post(
        addr,
        &post_headers(Some(&session), None),
        &call(3, "ask", json!({})),
    )
    .await;
    assert_eq!(response.status, 200);
    let (_, ask) = within("ask", response.next_message()).await.unwrap();
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"name": "x"}}});
    let accepted = post(addr, &post_headers(Some(&session), None), &answer).await;
    assert_eq!(accepted.status, 202);
    let (_, result) = within("result", response.next_message()).await.unwrap();
    assert_eq!(result["id"], 3, "{result}");
    assert!(
        result["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("accept")
    );
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_stream_carries_unrelated_messages_and_is_single() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
    ];
    let get = || raw_request(addr, "GET", "/mcp", &headers, b"");
    // Announced while no stream is open: queued.
    let announce = |id| call(id, "announce", json!({}));
    let reply = post(addr, &post_headers(Some(&session), None), &announce(1)).await;
    assert_eq!(
        reply.json().await["result"]["content"][0]["text"],
        "announced"
    );
    let mut stream = within("get", get()).await;
    assert_eq!(stream.status, 200);
    let priming = within("priming", stream.next_event()).await.unwrap();
    assert!(priming.id.is_some() && priming.data.is_empty());
    let (id, queued) = within("queued", stream.next_message()).await.unwrap();
    assert_eq!(queued["method"], "notifications/tools/list_changed");
    assert!(id.is_some());
    assert_eq!(server.service().table_sizes().await.queued, 0);
    // Announced while it is open: on the standalone stream, not on the call's.
    let reply = post(addr, &post_headers(Some(&session), None), &announce(2)).await;
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let (_, live) = within("live", stream.next_message()).await.unwrap();
    assert_eq!(live["method"], "notifications/tools/list_changed");
    assert_eq!(within("second get", get()).await.status, 409);
    drop(stream);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_modern_stream_cancels_its_request() {
    let mut config = ServerConfig::default();
    config.keep_alive = Some(Duration::from_millis(20));
    let (server, app) = start(config).await;
    let addr = server.local_addr();
    let listen = json!({"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": true}, "_meta": modern_meta()}});
    let mut response = post(addr, &modern_headers("subscriptions/listen", None), &listen).await;
    assert_eq!(response.status, 200);
    let (_, ack) = within("ack", response.next_message()).await.unwrap();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    drop(response);
    within("cancelled", async {
        while app.cancelled.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn param_headers_must_mirror_the_arguments() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let body = modern_call(1, "region", json!({"region": "eu-west"}));
    let mut headers = modern_headers("tools/call", Some("region"));
    headers.push(("Mcp-Param-Region", "eu-west"));
    let response = post(addr, &headers, &body).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.json().await["result"]["content"][0]["text"],
        "eu-west"
    );
    // base64 form.
    let mut headers = modern_headers("tools/call", Some("region"));
    headers.push(("Mcp-Param-Region", "=?base64?ZXUtd2VzdA==?="));
    assert_eq!(post(addr, &headers, &body).await.status, 200);
    // Mismatch and missing: 400, -32020.
    let mut headers = modern_headers("tools/call", Some("region"));
    headers.push(("Mcp-Param-Region", "us-east"));
    let response = post(addr, &headers, &body).await;
    assert_eq!(response.status, 400);
    assert_eq!(response.json().await["error"]["code"], -32020);
    let response = post(addr, &modern_headers("tools/call", Some("region")), &body).await;
    assert_eq!(response.status, 400);
    assert_eq!(response.json().await["error"]["code"], -32020);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_injection_is_refused_and_never_echoed() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let mut headers = post_headers(None, None);
    headers.push(("Mcp-Session-Id", "abc\rSet-Cookie: injected=1"));
    let response = post(addr, &headers, &list).await;
    assert_eq!(response.status, 400);
    assert!(response.header("set-cookie").is_none());
    // A well-formed but unknown id is not echoed either.
    let response = post(addr, &post_headers(Some("<script>"), None), &list).await;
    assert_eq!(response.status, 404);
    assert!(
        response
            .headers
            .iter()
            .all(|(_, v)| !v.contains("<script>"))
    );
    let body = String::from_utf8(response.body().await).unwrap();
    assert!(!body.contains("<script>"), "{body}");
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
    ];
    let mut stream = within("get", raw_request(addr, "GET", "/mcp", &headers, b"")).await;
    assert_eq!(stream.status, 200);
    within("priming", stream.next_event()).await.unwrap();
    let sizes = server.service().table_sizes().await;
    assert_eq!(sizes.sessions, 1);
    let service = server.service().clone();
    within("shutdown", server.shutdown(Duration::from_secs(1))).await;
    assert!(within("end of stream", stream.next_event()).await.is_none());
    assert!(service.table_sizes().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_11_25_stream_closed_by_the_server_is_resumed_by_the_client() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let mut body = call(4, "reconnect", json!({}));
    body["params"]["_meta"] = json!({"progressToken": "r"});
    let mut response = post(addr, &post_headers(Some(&session), None), &body).await;
    let priming = within("priming", response.next_event()).await.unwrap();
    assert_eq!(priming.retry, Some(1000));
    let (id, progress) = within("progress", response.next_message()).await.unwrap();
    assert_eq!(progress["method"], "notifications/progress");
    // The server closes the connection before the result.
    assert!(within("close", response.next_message()).await.is_none());
    let headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
        ("Last-Event-ID", id.as_deref().unwrap()),
    ];
    let mut resumed = within("get", raw_request(addr, "GET", "/mcp", &headers, b"")).await;
    assert_eq!(resumed.status, 200);
    let (_, result) = within("result", resumed.next_message()).await.unwrap();
    assert_eq!(result["id"], 4);
    assert_eq!(result["result"]["content"][0]["text"], "reconnected");
    assert!(within("end", resumed.next_message()).await.is_none());

    // Closed before anything was sent on it: the answer is a stream of the priming event alone,
    // resumed from its id.
    let mut response = post(
        addr,
        &post_headers(Some(&session), None),
        &call(5, "reconnect", json!({})),
    )
    .await;
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    let priming = within("priming", response.next_event()).await.unwrap();
    assert_eq!(priming.retry, Some(1000));
    assert!(priming.data.is_empty(), "{priming:?}");
    assert!(within("close", response.next_event()).await.is_none());
    let headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
        ("Last-Event-ID", priming.id.as_deref().unwrap()),
    ];
    let mut resumed = within("get", raw_request(addr, "GET", "/mcp", &headers, b"")).await;
    assert_eq!(resumed.status, 200);
    let (_, result) = within("result", resumed.next_message()).await.unwrap();
    assert_eq!(result["id"], 5);
    assert_eq!(result["result"]["content"][0]["text"], "reconnected");
    assert!(within("end", resumed.next_message()).await.is_none());

    // An id of another session, or garbage: 400.
    let other = open_session(addr, "2025-11-25").await;
    for last in [id.as_deref().unwrap(), "garbage", "1-99999"] {
        let headers = [
            ("Accept", "text/event-stream"),
            ("Mcp-Session-Id", other.as_str()),
            ("Last-Event-ID", last),
        ];
        let response = within("get", raw_request(addr, "GET", "/mcp", &headers, b"")).await;
        assert_eq!(response.status, 400, "{last}");
    }
    server.shutdown(Duration::from_secs(1)).await;
}

mod service {
    //! The endpoint as a `tower::Service`, without a socket: principals and idle sessions.

    use super::*;
    use http_body_util::{BodyExt, Full};
    use modelctx_http::server::{McpService, Principal};

    fn request(
        session: Option<&str>,
        principal: Option<&str>,
        body: &Value,
    ) -> http::Request<Full<bytes::Bytes>> {
        let mut builder = http::Request::post("/mcp")
            .header("host", "localhost")
            .extension(modelctx_tests::http::LOOPBACK_PEER)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(session) = session {
            builder = builder.header("mcp-session-id", session);
        }
        let mut request = builder
            .body(Full::new(bytes::Bytes::from(body.to_string())))
            .unwrap();
        if let Some(principal) = principal {
            request.extensions_mut().insert(Principal(principal.into()));
        }
        request
    }

    fn init() -> Value {
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "x", "version": "1"}}})
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_is_bound_to_its_principal() {
        let service =
            McpService::new(ServerConfig::default(), Arc::new(TestApp::default())).unwrap();
        let response = tower_service::Service::call(
            &mut service.clone(),
            request(None, Some("alice"), &init()),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), 200);
        let session = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = response.into_body().collect().await;
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let as_alice = service
            .handle(request(Some(&session), Some("alice"), &list))
            .await;
        assert_eq!(as_alice.status(), 200);
        let as_bob = service
            .handle(request(Some(&session), Some("bob"), &list))
            .await;
        assert_eq!(as_bob.status(), 404);
        let anonymous = service.handle(request(Some(&session), None, &list)).await;
        assert_eq!(anonymous.status(), 404);
    }

    /// On a paused clock: idleness is measured on the runtime's clock, so no stall of a loaded
    /// machine between the response and the first sweep can make the session idle early.
    #[tokio::test(start_paused = true)]
    async fn idle_sessions_end() {
        let mut config = ServerConfig::default();
        config.session_idle_timeout = Duration::from_millis(50);
        let service = McpService::new(config, Arc::new(TestApp::default())).unwrap();
        let response = service.handle(request(None, None, &init())).await;
        let session = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = response.into_body().collect().await;
        service.end_idle_sessions().await;
        assert_eq!(service.table_sizes().await.sessions, 1, "not idle yet");
        tokio::time::sleep(Duration::from_millis(80)).await;
        service.end_idle_sessions().await;
        assert!(service.table_sizes().await.is_empty());
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        assert_eq!(
            service
                .handle(request(Some(&session), None, &list))
                .await
                .status(),
            404
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deprecated_http_sse_transport_of_2024_11_05() {
    let mut config = ServerConfig::default();
    config.old_sse = Some(Default::default());
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let mut stream = within(
        "get",
        raw_request(addr, "GET", "/sse", &[("Accept", "text/event-stream")], b""),
    )
    .await;
    assert_eq!(stream.status, 200);
    let endpoint = within("endpoint", stream.next_event()).await.unwrap();
    assert_eq!(endpoint.event.as_deref(), Some("endpoint"));
    assert!(
        endpoint.data.starts_with("/messages?sessionId="),
        "{endpoint:?}"
    );
    let send = |body: Value| {
        let path = endpoint.data.clone();
        async move {
            raw_request(
                addr,
                "POST",
                &path,
                &[("Content-Type", "application/json")],
                body.to_string().as_bytes(),
            )
            .await
            .status
        }
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}});
    assert_eq!(within("init", send(init)).await, 202);
    let event = within("init result", stream.next_event()).await.unwrap();
    assert_eq!(event.event.as_deref(), Some("message"));
    let result: Value = serde_json::from_str(&event.data).unwrap();
    assert_eq!(result["result"]["protocolVersion"], "2024-11-05");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(within("initialized", send(initialized)).await, 202);
    assert_eq!(
        within("call", send(call(1, "echo", json!({"text": "old"})))).await,
        202
    );
    let (_, reply) = within("reply", stream.next_message()).await.unwrap();
    assert_eq!(reply["result"]["content"][0]["text"], "old");
    assert_eq!(server.service().table_sizes().await.sessions, 1);
    // Unknown session: 404. Closing the stream ends the session.
    let status = within(
        "unknown",
        raw_request(
            addr,
            "POST",
            "/messages?sessionId=nope",
            &[("Content-Type", "application/json")],
            b"{}",
        ),
    )
    .await
    .status;
    assert_eq!(status, 404);
    drop(stream);
    within("session ends", async {
        while server.service().table_sizes().await.sessions != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_can_be_disabled() {
    let mut config = ServerConfig::default();
    config.allow_delete = false;
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let response = within(
        "delete",
        raw_request(addr, "DELETE", "/mcp", &[("Mcp-Session-Id", &session)], b""),
    )
    .await;
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), Some("GET, POST"));
    assert_eq!(server.service().table_sizes().await.sessions, 1);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_client_that_goes_away_before_any_answer_cancels_its_request() {
    let (server, app) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let body = modern_call(1, "slow", json!({})).to_string();
    let headers = modern_headers("tools/call", Some("slow"));
    let response = raw_request(addr, "POST", "/mcp", &headers, body.as_bytes());
    // The head never comes (the tool waits): give up after a moment, closing the connection.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), response)
            .await
            .is_err()
    );
    within("cancelled", async {
        while app.cancelled.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    server.shutdown(Duration::from_secs(1)).await;
}
