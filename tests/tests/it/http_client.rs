//! The HTTP client transport against the modelctx HTTP server, against scripted servers that
//! misbehave, and over TLS.

use std::time::Duration;

use modelctx_http::client::ClientConfig;
use modelctx_http::server::ServerConfig;
use modelctx_session::{EraDecision, RequestError};
use modelctx_tests::http::{post, start, within};
use modelctx_tests::http_client::*;
use serde_json::{Value, json};

fn url(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}/mcp")
}

#[tokio::test]
async fn a_client_probes_our_server_finds_the_modern_era_and_calls_tools_with_param_headers() {
    let (server, app) = start(ServerConfig::default()).await;
    let mut client = Driver::new(
        &url(server.local_addr()),
        Driver::session_config(),
        ClientConfig::default(),
    );
    let peer = within("connect", client.connect()).await.unwrap();
    assert_eq!(peer.version.as_str(), "2026-07-28");
    assert_eq!(
        client.session.era_decision(),
        Some(EraDecision::Modern(peer.version))
    );
    assert_eq!(
        client.transport.session_id(),
        None,
        "no session in the modern era"
    );

    let listed = within("tools/list", client.request("tools/list", json!({})))
        .await
        .unwrap();
    assert!(listed["tools"].as_array().unwrap().len() >= 6);
    // The driver (like the client facade) reads the tools' header rules from the listing and
    // hands them to the transport with each call.
    let region = client.param_headers["region"].clone();
    assert_eq!(region[0].name(), "Region");

    // The server checks Mcp-Param-Region against the argument: a non-ASCII value goes encoded.
    for value in ["us-west1", "zürich", " padded ", "=?base64?x?="] {
        let result = client
            .call_tool("region", json!({"region": value}))
            .await
            .unwrap();
        assert_eq!(text_of(&result), value);
    }
    let result = client
        .call_tool("echo", json!({"text": "hi"}))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "hi");

    // Progress comes on the request's SSE stream.
    let params = json!({"name": "progress", "arguments": {"count": 3}});
    let options = modelctx_session::RequestOptions::default().with_progress();
    let id = client.start_with("tools/call", params, options);
    let result = within("progress", client.answer(&id)).await.unwrap();
    assert_eq!(text_of(&result), "3 steps");
    let steps = client
        .events
        .iter()
        .filter(|e| matches!(e, modelctx_session::Event::Progress { .. }))
        .count();
    assert_eq!(steps, 3);

    // Cancelling closes the stream, and the server takes that as the cancellation.
    let id = client.start("tools/call", json!({"name": "slow", "arguments": {}}));
    eventually("the slow call started", || {
        app.gates
            .slow_started
            .load(std::sync::atomic::Ordering::SeqCst)
            == 1
    })
    .await;
    client
        .session
        .cancel(std::time::Instant::now(), &id, Some("changed my mind"))
        .unwrap();
    client.step_until_idle().await;
    within("the server sees the cancellation", async {
        while app.cancelled.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    assert_eq!(client.transport.table_sizes().tasks, 0);
    assert_eq!(client.transport.table_sizes().requests, 0);
    assert_eq!(client.session.table_sizes().outgoing, 0);
    client.transport.close().await;
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_legacy_client_keeps_its_session_id_and_deletes_the_session_on_close() {
    let (server, app) = start(ServerConfig::default()).await;
    let mut client = Driver::new(
        &url(server.local_addr()),
        legacy_config(),
        ClientConfig::default(),
    );
    let peer = within("connect", client.connect()).await.unwrap();
    assert_eq!(peer.version.as_str(), "2025-11-25");
    let session = client.transport.session_id().expect("a session id");

    let result = client
        .call_tool("echo", json!({"text": "legacy"}))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "legacy");

    // A server request on the call's stream gets the client's answer.
    let result = client.call_tool("ask", json!({})).await.unwrap();
    assert!(text_of(&result).contains("yes"), "{result}");

    // The server closes the call's stream mid-way; the client resumes it with Last-Event-ID.
    let result = client.call_tool("reconnect", json!({})).await.unwrap();
    assert_eq!(text_of(&result), "reconnected");

    // The standalone stream was opened: a server notification sent after the call's stream
    // ended reaches the client on it.
    let result = client.call_tool("announce_later", json!({})).await.unwrap();
    assert_eq!(text_of(&result), "later");
    let announced = |events: &[modelctx_session::Event]| {
        events.iter().any(|e| {
            matches!(e, modelctx_session::Event::Notification(n) if n.method == "notifications/tools/list_changed")
        })
    };
    while !announced(&client.events) {
        within("the notification on the standalone stream", client.step()).await;
    }

    assert_eq!(server.service().table_sizes().await.sessions, 1);
    assert_eq!(client.transport.table_sizes().requests, 0);
    client.transport.close().await;
    within("the session ends", async {
        while server.service().table_sizes().await.sessions != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(*app.open.lock().unwrap(), 0);
    // The DELETE ended it: its id is unknown now.
    let list = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"});
    let after = post(
        server.local_addr(),
        &modelctx_tests::http::post_headers(Some(&session), Some("2025-11-25")),
        &list,
    )
    .await;
    assert_eq!(after.status, 404);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn the_client_resumes_a_broken_stream_after_exactly_the_servers_retry() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        if legacy_basics(&seen, &mut reply, Some("s1")).await {
            return;
        }
        match (seen.method.as_str(), seen.rpc_method()) {
            ("POST", Some("tools/call")) => {
                reply.sse_head(&[]).await;
                reply.raw(b"id: e1\nretry: 500\ndata:\n\n").await;
            }
            ("GET", _) if seen.header("last-event-id") == Some("e1") => {
                reply.sse_head(&[]).await;
                // initialize was request 1; the call is request 2.
                reply
                    .raw(sse_message(Some("e2"), &text_result(&json!(2), "resumed")).as_bytes())
                    .await;
            }
            _ => reply.full(405, &[], "").await,
        }
    })
    .await;
    let mut client = Driver::new(&server.url(), legacy_config(), ClientConfig::default());
    within("connect", client.connect()).await.unwrap();
    let id = client.start("tools/call", json!({"name": "x", "arguments": {}}));
    assert_eq!(id.to_string(), "2");
    let result = within("answer", client.answer(&id)).await.unwrap();
    assert_eq!(text_of(&result), "resumed");
    let seen = server.seen();
    let post = seen
        .iter()
        .find(|s| s.rpc_method() == Some("tools/call"))
        .unwrap();
    let get = seen
        .iter()
        .find(|s| s.header("last-event-id").is_some())
        .unwrap();
    let waited = get.at - post.at;
    assert!(
        (Duration::from_millis(450)..=Duration::from_millis(700)).contains(&waited),
        "reconnected after {waited:?}"
    );
    assert_eq!(get.header("mcp-session-id"), Some("s1"));
    assert_eq!(get.header("mcp-protocol-version"), Some("2025-11-25"));
}

#[tokio::test]
async fn a_server_that_closes_streams_cleanly_forever_makes_the_client_give_up() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        if legacy_basics(&seen, &mut reply, Some("s1")).await {
            return;
        }
        match (seen.method.as_str(), seen.rpc_method()) {
            ("POST", Some("tools/call")) => {
                reply.sse_head(&[]).await;
                reply.raw(b"id: e1\nretry: 20\ndata:\n\n").await;
            }
            ("GET", _) if seen.header("last-event-id").is_some() => {
                // A clean, empty stream: a priming event and the end.
                reply.sse_head(&[]).await;
                reply.raw(b"id: e2\nretry: 20\ndata:\n\n").await;
            }
            _ => reply.full(405, &[], "").await,
        }
    })
    .await;
    let mut client = Driver::new(&server.url(), legacy_config(), ClientConfig::default());
    within("connect", client.connect()).await.unwrap();
    let id = client.start("tools/call", json!({"name": "x", "arguments": {}}));
    let answer = within("give up", client.answer(&id)).await;
    assert!(
        matches!(answer, Err(RequestError::Transport(_))),
        "{answer:?}"
    );
    let gets = server
        .seen()
        .iter()
        .filter(|s| s.header("last-event-id").is_some())
        .count();
    assert_eq!(gets, 5, "the default policy tries 5 times");
    assert!(
        client
            .notes
            .iter()
            .any(|n| n.starts_with("GaveUp") && n.contains("attempts: 5")),
        "{:?}",
        client.notes
    );
    eventually("the transport's tasks end", || {
        client.transport.table_sizes().tasks == 0
    })
    .await;
}

#[tokio::test]
async fn a_404_for_a_known_session_ends_it_fails_what_was_in_flight_and_a_new_initialize_follows() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        match (seen.method.as_str(), seen.rpc_method()) {
            ("POST", Some("initialize")) => {
                let id = if seen.header("mcp-session-id").is_some() {
                    "bad"
                } else {
                    "s2"
                };
                reply
                    .json(
                        200,
                        &[("mcp-session-id", id)],
                        &initialize_result(&seen.body["id"]),
                    )
                    .await;
            }
            ("POST", Some("tools/call")) if seen.body["params"]["name"] == "hang" => {
                reply.sse_head(&[]).await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            ("POST", Some("tools/call")) => reply.full(404, &[], "session gone").await,
            ("POST", _) => reply.full(202, &[], "").await,
            _ => reply.full(405, &[], "").await,
        }
    })
    .await;
    let mut client = Driver::new(&server.url(), legacy_config(), ClientConfig::default());
    within("connect", client.connect()).await.unwrap();
    let hanging = client.start("tools/call", json!({"name": "hang", "arguments": {}}));
    eventually("the hanging call reached the server", || {
        server
            .seen()
            .iter()
            .any(|s| s.rpc_method() == Some("tools/call") && s.body["params"]["name"] == "hang")
    })
    .await;
    let ended = client.start("tools/call", json!({"name": "x", "arguments": {}}));
    let answer = within("404", client.answer(&ended)).await;
    assert!(
        matches!(&answer, Err(RequestError::Closed(why)) if why.to_string().contains("ended the HTTP session")),
        "{answer:?}"
    );
    let answer = within("in flight", client.answer(&hanging)).await;
    assert!(matches!(answer, Err(RequestError::Closed(_))), "{answer:?}");
    assert_eq!(client.transport.session_id(), None);
    assert_eq!(
        client
            .notes
            .iter()
            .filter(|n| *n == "session ended")
            .count(),
        1
    );
    eventually("the hanging stream is dropped", || {
        client.transport.table_sizes().tasks == 0
    })
    .await;

    within("re-initialize", client.reconnect(legacy_config()))
        .await
        .unwrap();
    assert_eq!(client.transport.session_id().as_deref(), Some("s2"));
    let inits: Vec<_> = server
        .seen()
        .into_iter()
        .filter(|s| s.rpc_method() == Some("initialize"))
        .collect();
    assert_eq!(inits.len(), 2);
    assert_eq!(
        inits[1].header("mcp-session-id"),
        None,
        "a new session starts clean"
    );
    let replayed = server
        .seen()
        .iter()
        .filter(|s| s.body["params"]["name"] == "x")
        .count();
    assert_eq!(replayed, 1, "nothing is replayed");
}

#[tokio::test]
async fn a_legacy_server_answering_everything_with_an_empty_object_gets_initialize() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        if legacy_basics(&seen, &mut reply, None).await {
            return;
        }
        match (seen.method.as_str(), seen.rpc_method()) {
            ("POST", Some(_)) if seen.body.get("id").is_some() => {
                let id = seen.body["id"].clone();
                reply
                    .json(200, &[], &json!({"jsonrpc": "2.0", "id": id, "result": {}}))
                    .await;
            }
            _ => reply.full(405, &[], "").await,
        }
    })
    .await;
    let mut client = Driver::new(
        &server.url(),
        Driver::session_config(),
        ClientConfig::default(),
    );
    let peer = within("connect", client.connect()).await.unwrap();
    assert_eq!(peer.version.as_str(), "2025-11-25");
    assert_eq!(client.session.era_decision(), Some(EraDecision::Legacy));
    let methods: Vec<String> = server
        .seen()
        .iter()
        .filter_map(|s| s.rpc_method().map(str::to_owned))
        .collect();
    assert_eq!(methods[..2], ["server/discover", "initialize"]);
    within(
        "no standalone stream",
        client.until(|n| n.iter().any(|n| n == "NoStandaloneStream")),
    )
    .await;
}

/// The transport says where the legacy standalone stream stands: opening from
/// `notifications/initialized` on, then open (with `StandaloneOpened`) or unavailable (405).
#[tokio::test]
async fn the_standalone_stream_is_reported_opening_then_open_or_unavailable() {
    use modelctx_http::client::StandaloneStream;
    for refuse in [false, true] {
        // The stream's GET is answered (its head, or 405) once the test has seen it opening.
        let seen_opening = std::sync::Arc::new(tokio::sync::Notify::new());
        let head_gate = seen_opening.clone();
        let server = ScriptServer::start(move |seen, mut reply| {
            let head_gate = head_gate.clone();
            async move {
                if seen.method == "GET" {
                    head_gate.notified().await;
                }
                if seen.method == "GET" && !refuse {
                    reply.sse_head(&[]).await;
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    return;
                }
                legacy_basics(&seen, &mut reply, Some("s")).await;
            }
        })
        .await;
        let mut client = Driver::new(&server.url(), legacy_config(), ClientConfig::default());
        assert_eq!(
            client.transport.standalone_stream(),
            StandaloneStream::NotExpected
        );
        within("connect", client.connect()).await.unwrap();
        assert_eq!(
            client.transport.standalone_stream(),
            StandaloneStream::Opening
        );
        seen_opening.notify_one();
        let (note, state) = if refuse {
            ("NoStandaloneStream", StandaloneStream::Unavailable)
        } else {
            ("StandaloneOpened", StandaloneStream::Open)
        };
        within(note, client.until(|n| n.iter().any(|n| n == note))).await;
        assert_eq!(client.transport.standalone_stream(), state);
    }
    // Not asked for: none is expected.
    let server = ScriptServer::start(|seen, mut reply| async move {
        legacy_basics(&seen, &mut reply, Some("s")).await;
    })
    .await;
    let mut config = ClientConfig::default();
    config.standalone_stream = false;
    let mut client = Driver::new(&server.url(), legacy_config(), config);
    within("connect", client.connect()).await.unwrap();
    client.step_until_idle().await;
    assert_eq!(
        client.transport.standalone_stream(),
        StandaloneStream::NotExpected
    );
}

#[tokio::test]
async fn an_http_sse_only_server_gets_the_old_transport() {
    let (to_stream, from_posts) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let from_posts = std::sync::Arc::new(tokio::sync::Mutex::new(from_posts));
    let server = ScriptServer::start(move |seen, mut reply| {
        let to_stream = to_stream.clone();
        let from_posts = from_posts.clone();
        async move {
            match (seen.method.as_str(), seen.path.as_str()) {
                ("GET", "/mcp") => {
                    reply.sse_head(&[]).await;
                    reply
                        .raw(b"event: endpoint\ndata: /messages?sessionId=7\n\n")
                        .await;
                    let mut posts = from_posts.lock().await;
                    while let Some(message) = posts.recv().await {
                        reply
                            .raw(format!("event: message\ndata: {message}\n\n").as_bytes())
                            .await;
                    }
                }
                ("POST", "/messages?sessionId=7") => {
                    let id = seen.body["id"].clone();
                    match seen.rpc_method() {
                        Some("initialize") => to_stream.send(initialize_result(&id)).unwrap(),
                        Some("tools/call") => to_stream.send(text_result(&id, "old")).unwrap(),
                        _ => {}
                    }
                    reply.full(202, &[], "Accepted").await;
                }
                _ => reply.full(405, &[], "").await,
            }
        }
    })
    .await;
    let mut client = Driver::new(
        &server.url(),
        Driver::session_config(),
        ClientConfig::default(),
    );
    let peer = within("connect", client.connect()).await.unwrap();
    assert_eq!(peer.version.as_str(), "2025-11-25");
    assert!(
        client.notes.iter().any(|n| n.contains("FellBack")),
        "{:?}",
        client.notes
    );
    let result = client.call_tool("x", json!({})).await.unwrap();
    assert_eq!(text_of(&result), "old");
}

#[tokio::test]
async fn oversized_events_and_bodies_fail_their_request_not_the_client() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        if legacy_basics(&seen, &mut reply, None).await {
            return;
        }
        match (seen.method.as_str(), seen.rpc_method()) {
            ("POST", Some("tools/call")) if seen.body["params"]["name"] == "sse" => {
                reply.sse_head(&[]).await;
                let big = "x".repeat(300 << 10);
                reply.raw(format!("data: {big}").as_bytes()).await;
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            ("POST", Some("tools/call")) if seen.body["params"]["name"] == "json" => {
                let big = "x".repeat(300 << 10);
                reply
                    .json(200, &[], &text_result(&seen.body["id"], &big))
                    .await;
            }
            ("POST", Some("tools/call")) => {
                reply
                    .json(200, &[], &text_result(&seen.body["id"], "small"))
                    .await;
            }
            _ => reply.full(405, &[], "").await,
        }
    })
    .await;
    let mut config = ClientConfig::default();
    config.max_event = 256 << 10;
    config.max_body = 256 << 10;
    let mut client = Driver::new(&server.url(), legacy_config(), config);
    within("connect", client.connect()).await.unwrap();
    for name in ["sse", "json"] {
        let answer = within(name, client.request("tools/call", json!({"name": name}))).await;
        assert!(
            matches!(&answer, Err(RequestError::Transport(why)) if why.contains("limit of 262144 bytes")),
            "{name}: {answer:?}"
        );
    }
    let result = within("small", client.request("tools/call", json!({"name": "ok"})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "small");
}

#[tokio::test]
async fn sse_split_at_every_byte_is_read_whole() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        match (seen.method.as_str(), seen.rpc_method()) {
            ("POST", Some("initialize")) => {
                reply.sse_head(&[]).await;
                let body = format!(
                    ": comment\r\nid: a\r\nretry: 100\r\ndata:\r\n\r\n{}",
                    sse_message(Some("b"), &initialize_result(&seen.body["id"]))
                        .replace('\n', "\r\n")
                );
                for byte in body.as_bytes() {
                    reply.raw(&[*byte]).await;
                    tokio::task::yield_now().await;
                }
            }
            ("POST", _) => reply.full(202, &[], "").await,
            _ => reply.full(405, &[], "").await,
        }
    })
    .await;
    let mut client = Driver::new(&server.url(), legacy_config(), ClientConfig::default());
    let peer = within("connect", client.connect()).await.unwrap();
    assert_eq!(peer.version.as_str(), "2025-11-25");
}

#[tokio::test]
async fn finding_5_a_broken_modern_stream_is_reissued_with_a_new_id_only_when_allowed() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        let id = seen.body["id"].clone();
        match seen.rpc_method() {
            Some("server/discover") => {
                reply
                    .json(
                        200,
                        &[],
                        &json!({"jsonrpc": "2.0", "id": id, "result": {
                    "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}, "resources": {}},
                    "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}}),
                    )
                    .await;
            }
            Some("tools/call") if id.as_str().is_some_and(|s| s.contains("~reissue-")) => {
                let mut result = text_result(&id, "second try");
                result["result"]["resultType"] = json!("complete");
                reply.sse_head(&[]).await;
                reply.raw(sse_message(None, &result).as_bytes()).await;
            }
            Some("tools/call" | "resources/read") => {
                // The head, then the connection drops: the request is lost.
                reply.sse_head(&[]).await;
            }
            _ => reply.full(404, &[], "").await,
        }
    })
    .await;
    let mut client = Driver::new(
        &server.url(),
        Driver::session_config(),
        ClientConfig::default(),
    );
    within("connect", client.connect()).await.unwrap();
    let calls = |server: &ScriptServer| {
        server
            .seen()
            .iter()
            .filter(|s| s.rpc_method() == Some("tools/call"))
            .count()
    };
    // By default nothing is sent again, whatever its method: the transport cannot know what is
    // safe to repeat (the client facade tells it; see client_http's finding 5).
    let id = client.start("tools/call", json!({"name": "x", "arguments": {}}));
    let answer = within("not reissued by default", client.answer(&id)).await;
    assert!(
        matches!(&answer, Err(RequestError::Transport(why)) if why.contains("was not sent again")),
        "{answer:?}"
    );
    assert_eq!(calls(&server), 1);
    let reads = |server: &ScriptServer| {
        server
            .seen()
            .iter()
            .filter(|s| s.rpc_method() == Some("resources/read"))
            .count()
    };
    let id = client.start("resources/read", json!({"uri": "file:///x"}));
    let answer = within("a read, not reissued by default", client.answer(&id)).await;
    assert!(
        matches!(&answer, Err(RequestError::Transport(why)) if why.contains("was not sent again")),
        "{answer:?}"
    );
    assert_eq!(reads(&server), 1);
    // Allowed, it is sent again, up to max_reissues times.
    let id = client.start_reissued("resources/read", json!({"uri": "file:///x"}));
    let answer = within("a read", client.answer(&id)).await;
    assert!(
        matches!(&answer, Err(RequestError::Transport(why)) if why.contains("3 times")),
        "{answer:?}"
    );
    assert_eq!(reads(&server), 4, "the first try and max_reissues (2) more");
    let id = client.start_reissued("tools/call", json!({"name": "x", "arguments": {}}));
    let result = within("reissued", client.answer(&id)).await.unwrap();
    assert_eq!(text_of(&result), "second try");
    let ids: Vec<Value> = server
        .seen()
        .iter()
        .filter(|s| s.rpc_method() == Some("tools/call"))
        .map(|s| s.body["id"].clone())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_ne!(ids[1], ids[2], "a re-issued request has a new id");

    let id = client.start("tools/call", json!({"name": "x", "arguments": {}}));
    let answer = within("not reissued", client.answer(&id)).await;
    assert!(
        matches!(&answer, Err(RequestError::Transport(why)) if why.contains("ended before the answer")),
        "{answer:?}"
    );
    assert_eq!(calls(&server), 4);
}

fn modern_discover(id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {"listChanged": true}},
        "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}})
}

/// The transport sends the `Mcp-Param-*` headers its caller names, and nothing of its own: a
/// -32020 goes up as the server's answer (the client facade lists the tools again and retries,
/// see `client_http.rs`), and a `tools/list` result goes up as it came.
#[tokio::test]
async fn the_transport_sends_the_param_headers_it_is_given_and_lists_nothing_itself() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        let id = seen.body["id"].clone();
        match seen.rpc_method() {
            Some("server/discover") => reply.json(200, &[], &modern_discover(&id)).await,
            Some("tools/list") => {
                let tools = json!([
                    {"name": "region", "inputSchema": {"type": "object", "properties": {
                        "region": {"type": "string", "x-mcp-header": "Region"}}}},
                    {"name": "broken", "inputSchema": {"type": "object", "properties": {
                        "n": {"type": "number", "x-mcp-header": "N"}}}},
                ]);
                reply.json(200, &[], &json!({"jsonrpc": "2.0", "id": id, "result": {
                    "tools": tools, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}})).await;
            }
            Some("tools/call") if seen.header("mcp-param-region") == Some("eu") => {
                let mut result = text_result(&id, "with header");
                result["result"]["resultType"] = json!("complete");
                reply.json(200, &[], &result).await;
            }
            Some("tools/call") => {
                reply.json(400, &[], &json!({"jsonrpc": "2.0", "id": id, "error": {
                    "code": -32020, "message": "Mcp-Param-Region is missing"}})).await;
            }
            _ => reply.full(404, &[], "").await,
        }
    })
    .await;
    let mut client = Driver::new(
        &server.url(),
        Driver::session_config(),
        ClientConfig::default(),
    );
    within("connect", client.connect()).await.unwrap();
    // Nothing listed, no header rules given: the call goes without the header, and the
    // server's -32020 is the answer.
    let answer = client.call_tool("region", json!({"region": "eu"})).await;
    assert!(
        matches!(&answer, Err(RequestError::Remote(e)) if e.code.0 == -32020),
        "{answer:?}"
    );
    let methods = |server: &ScriptServer| -> Vec<String> {
        server
            .seen()
            .iter()
            .filter_map(|s| s.rpc_method().map(str::to_owned))
            .collect()
    };
    assert_eq!(methods(&server), ["server/discover", "tools/call"]);

    // The listing comes up whole, the tool that breaks a rule included.
    let listed = within("list", client.request("tools/list", json!({})))
        .await
        .unwrap();
    assert_eq!(listed["tools"].as_array().unwrap().len(), 2);
    // With the tool's rules given, the call carries Mcp-Param-Region.
    let result = client
        .call_tool("region", json!({"region": "eu"}))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "with header");
    assert_eq!(
        methods(&server),
        ["server/discover", "tools/call", "tools/list", "tools/call"]
    );
}

/// The acknowledgement that opens listen stream `id`, as an SSE event.
fn listen_ack(id: &Value) -> String {
    let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id},
            "notifications": {"toolsListChanged": true}}});
    sse_message(None, &ack)
}

#[tokio::test]
async fn a_broken_listen_stream_is_reopened_and_the_application_told() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        let id = seen.body["id"].clone();
        match seen.rpc_method() {
            Some("server/discover") => reply.json(200, &[], &modern_discover(&id)).await,
            Some("subscriptions/listen") => {
                reply.sse_head(&[]).await;
                reply.raw(listen_ack(&id).as_bytes()).await;
                if id.as_str().is_some_and(|s| s.contains("~listen-")) {
                    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id}}});
                    reply.raw(sse_message(None, &changed).as_bytes()).await;
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                // The first stream just ends.
            }
            _ => reply.full(404, &[], "").await,
        }
    })
    .await;
    let mut transport = ClientConfig::default();
    transport.reconnect.initial_delay = Duration::from_millis(10);
    let mut client = Driver::new(&server.url(), Driver::session_config(), transport);
    within("connect", client.connect()).await.unwrap();
    let listen = client.start(
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    within(
        "reopened",
        client.until(|n| n.iter().any(|n| n.starts_with("ListenReopened"))),
    )
    .await;
    assert!(
        client
            .notes
            .iter()
            .any(|n| n.contains(&format!("{listen:?}"))),
        "{:?}",
        client.notes
    );
    while !client.events.iter().any(|e| {
        matches!(e, modelctx_session::Event::Notification(n) if n.method == "notifications/tools/list_changed")
    }) {
        within("notification", client.step()).await;
    }
    let notification = client.events.iter().find_map(|e| match e {
        modelctx_session::Event::Notification(n)
            if n.method == "notifications/tools/list_changed" =>
        {
            Some(n)
        }
        _ => None,
    });
    let params: Value =
        serde_json::from_str(notification.unwrap().params.as_ref().unwrap().get()).unwrap();
    // The notification comes as the server sent it, naming the new stream's id, which
    // `ListenReopened` gave the layer above.
    let wire = format!("{listen}~listen-1");
    assert_eq!(
        params["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!(wire)
    );
    assert!(
        client
            .notes
            .iter()
            .any(|n| n.starts_with("ListenReopened") && n.contains(&wire)),
        "{:?}",
        client.notes
    );
}

#[tokio::test]
async fn legacy_requests_carry_the_standard_headers() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        if legacy_basics(&seen, &mut reply, Some("s1")).await {
            return;
        }
        match (seen.method.as_str(), seen.rpc_method()) {
            ("POST", Some("tools/call")) => {
                reply
                    .json(200, &[], &text_result(&seen.body["id"], "ok"))
                    .await
            }
            ("DELETE", _) => reply.full(200, &[], "").await,
            _ => reply.full(405, &[], "").await,
        }
    })
    .await;
    let mut client = Driver::new(&server.url(), legacy_config(), ClientConfig::default());
    within("connect", client.connect()).await.unwrap();
    client.call_tool("zürich", json!({})).await.unwrap();
    client.step_until_idle().await;
    let Driver { transport, .. } = client;
    transport.close().await;
    let seen = server.seen();
    let find = |m: &str| {
        seen.iter()
            .find(|s| s.rpc_method() == Some(m) || s.method == m)
            .unwrap()
    };
    let init = find("initialize");
    assert_eq!(
        init.header("accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(init.header("mcp-method"), Some("initialize"));
    assert_eq!(init.header("mcp-session-id"), None);
    assert_eq!(init.header("mcp-protocol-version"), None);
    let call = find("tools/call");
    assert_eq!(call.header("mcp-method"), Some("tools/call"));
    assert_eq!(call.header("mcp-name"), Some("=?base64?esO8cmljaA==?="));
    assert_eq!(call.header("mcp-session-id"), Some("s1"));
    assert_eq!(call.header("mcp-protocol-version"), Some("2025-11-25"));
    let initialized = find("notifications/initialized");
    assert_eq!(initialized.header("mcp-session-id"), Some("s1"));
    let get = find("GET");
    assert_eq!(get.header("accept"), Some("text/event-stream"));
    assert_eq!(get.header("mcp-session-id"), Some("s1"));
    let delete = find("DELETE");
    assert_eq!(delete.header("mcp-session-id"), Some("s1"));
}

/// A TLS front for `backend`, with a self-signed certificate for `localhost`; the certificate
/// to trust.
async fn tls_front(
    backend: std::net::SocketAddr,
) -> (
    std::net::SocketAddr,
    rustls::pki_types::CertificateDer<'static>,
) {
    use std::sync::Arc;
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let der = cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![der.clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (addr, _) = front(backend, Some(acceptor)).await;
    (addr, der)
}

#[tokio::test]
async fn https_with_a_certificate_the_caller_trusts() {
    let (server, _app) = start(ServerConfig::default()).await;
    let (front, cert) = tls_front(server.local_addr()).await;
    let url = format!("https://localhost:{}/mcp", front.port());

    // Trusted by the caller: both eras work.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut config = ClientConfig::default();
    config.tls = Some(std::sync::Arc::new(tls));
    for session in [Driver::session_config(), legacy_config()] {
        let mut client = Driver::new(&url, session, config.clone());
        within("connect", client.connect()).await.unwrap();
        let result = client
            .call_tool("echo", json!({"text": "tls"}))
            .await
            .unwrap();
        assert_eq!(text_of(&result), "tls");
        client.transport.close().await;
    }

    // With the default roots the self-signed certificate is refused, and the session says why.
    let mut client = Driver::new(&url, Driver::session_config(), ClientConfig::default());
    let refused = within("connect", client.connect()).await.unwrap_err();
    assert!(
        refused.contains("certificate") || refused.contains("Certificate"),
        "{refused}"
    );
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_listen_stream_that_is_acknowledged_and_closed_forever_is_given_up() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        let id = seen.body["id"].clone();
        match seen.rpc_method() {
            Some("server/discover") => reply.json(200, &[], &modern_discover(&id)).await,
            Some("subscriptions/listen") => {
                reply.sse_head(&[]).await;
                reply.raw(listen_ack(&id).as_bytes()).await;
            }
            _ => reply.full(404, &[], "").await,
        }
    })
    .await;
    let mut transport = ClientConfig::default();
    transport.reconnect.initial_delay = Duration::from_millis(5);
    transport.reconnect.max_delay = Duration::from_millis(40);
    let mut client = Driver::new(&server.url(), Driver::session_config(), transport);
    within("connect", client.connect()).await.unwrap();
    let listen = client.start(
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let answer = within("give up", client.answer(&listen)).await;
    assert!(
        matches!(answer, Err(RequestError::Transport(_))),
        "{answer:?}"
    );
    let opened = server
        .seen()
        .iter()
        .filter(|s| s.rpc_method() == Some("subscriptions/listen"))
        .count();
    assert_eq!(opened, 6, "the first stream and 5 reopenings");
    assert!(
        client.notes.iter().any(|n| n.starts_with("GaveUp")),
        "{:?}",
        client.notes
    );
    eventually("the transport's tasks end", || {
        client.transport.table_sizes().tasks == 0
    })
    .await;
}

#[tokio::test]
async fn sequential_requests_reuse_one_connection_in_json_and_sse_modes() {
    let (server, _app) = start(ServerConfig::default()).await;
    let (front, connections) = front(server.local_addr(), None).await;
    for session in [Driver::session_config(), legacy_config()] {
        connections.store(0, std::sync::atomic::Ordering::SeqCst);
        let mut client = Driver::new(&url(front), session, ClientConfig::default());
        within("connect", client.connect()).await.unwrap();
        for i in 0..10 {
            let echo = json!({"name": "echo", "arguments": {"text": format!("{i}")}});
            within("json", client.request("tools/call", echo))
                .await
                .unwrap();
            // Progress makes the answer an event stream.
            let progress = json!({"name": "progress", "arguments": {"count": 1},
                "_meta": {"progressToken": i}});
            within("sse", client.request("tools/call", progress))
                .await
                .unwrap();
        }
        let made = connections.load(std::sync::atomic::Ordering::SeqCst);
        // One for requests; a legacy client also holds its standalone stream open.
        assert!(made <= 2, "{made} connections for 20 sequential requests");
        client.transport.close().await;
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// A keep-alive HTTP/1.1 server whose every POST is answered with a chunked SSE stream: the
/// answer, then, 30 ms later, the end of the stream. Counts connections, and the streams it
/// ended.
async fn late_end_server() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counter = count.clone();
    let ends = ended.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let ends = ends.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One request: its head and its content-length body.
                    let (head_end, length) = loop {
                        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..at]).to_ascii_lowercase();
                            let length = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            break (at + 4, length);
                        }
                        match tcp.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    while buf.len() < head_end + length {
                        match tcp.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body: Value = serde_json::from_slice(&buf[head_end..head_end + length])
                        .unwrap_or(Value::Null);
                    buf.drain(..head_end + length);
                    let answer = if body["method"] == "initialize" {
                        initialize_result(&body["id"])
                    } else if body.get("id").is_some() {
                        text_result(&body["id"], "late")
                    } else {
                        let _ = tcp
                            .write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                            .await;
                        continue;
                    };
                    let event = sse_message(None, &answer);
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                    let first = format!("{head}{:x}\r\n{event}\r\n", event.len());
                    let _ = tcp.write_all(first.as_bytes()).await;
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    if tcp.write_all(b"0\r\n\r\n").await.is_err() {
                        return;
                    }
                    ends.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
    });
    (addr, count, ended)
}

#[tokio::test]
async fn a_stream_that_ends_after_its_answer_is_read_to_its_end_and_its_connection_reused() {
    let (addr, connections, ended) = late_end_server().await;
    let mut config = ClientConfig::default();
    config.standalone_stream = false;
    let mut client = Driver::new(&format!("http://{addr}/mcp"), legacy_config(), config);
    within("connect", client.connect()).await.unwrap();
    // The next request starts once the last stream has ended on the wire and the client has read
    // it to its end.
    let streams_ended = |client: &Driver, streams: usize| {
        ended.load(std::sync::atomic::Ordering::SeqCst) == streams
            && client.transport.table_sizes().tasks == 0
    };
    eventually("the initialize stream ends", || streams_ended(&client, 1)).await;
    let before = connections.load(std::sync::atomic::Ordering::SeqCst);
    for call in 0..5 {
        let result = client.call_tool("x", json!({})).await.unwrap();
        assert_eq!(text_of(&result), "late");
        eventually("the call's stream ends", || {
            streams_ended(&client, 2 + call)
        })
        .await;
    }
    let made = connections.load(std::sync::atomic::Ordering::SeqCst) - before;
    assert!(made <= 1, "{made} new connections for 5 sequential calls");
}

#[tokio::test]
async fn a_response_that_does_not_start_in_time_fails_its_request() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        if legacy_basics(&seen, &mut reply, None).await {
            return;
        }
        // No response head at all for a call.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(reply);
    })
    .await;
    let mut config = ClientConfig::default();
    config.response_timeout = Some(Duration::from_millis(200));
    config.standalone_stream = false;
    let mut client = Driver::new(&server.url(), legacy_config(), config);
    within("connect", client.connect()).await.unwrap();
    let answer = client.call_tool("x", json!({})).await;
    assert!(
        matches!(&answer, Err(RequestError::Transport(why)) if why.contains("no response within 200ms")),
        "{answer:?}"
    );
    assert_eq!(client.transport.table_sizes().tasks, 0);
}

/// Finding 13: a notification POST the server never answers, and an error head whose body never
/// comes, are given up after `one_way_timeout` even without a `response_timeout`: their places in
/// the transport's table are freed.
#[tokio::test]
async fn finding_13_unanswered_notification_posts_and_error_bodies_have_a_deadline() {
    use modelctx_http::client::{HttpTransport, Inbound, TransportError};
    use modelctx_types::{Message, Notification, Request, RequestId};

    let server = ScriptServer::start(|seen, mut reply| async move {
        match seen.rpc_method() {
            // Never answered: no response head.
            Some("notifications/initialized") => std::future::pending::<()>().await,
            // An error head promising a body that never comes.
            Some("ping") => {
                reply
                    .raw(b"HTTP/1.1 500 X\r\ncontent-length: 100\r\n\r\nhalf")
                    .await;
                std::future::pending::<()>().await;
            }
            _ => reply.full(404, &[], "").await,
        }
    })
    .await;
    let mut config = ClientConfig::default();
    config.one_way_timeout = Duration::from_millis(200);
    config.standalone_stream = false;
    assert_eq!(config.response_timeout, None);
    let mut transport = HttpTransport::new(&server.url(), config).unwrap();

    let notification = Notification::new("notifications/initialized", &json!({})).unwrap();
    transport.send(Message::Notification(notification)).unwrap();
    match within("the notification", transport.recv()).await {
        Some(Inbound::Undelivered {
            what,
            answer: None,
            error: TransportError::Timeout(limit),
        }) => {
            assert_eq!(what, "notifications/initialized");
            assert_eq!(limit, Duration::from_millis(200));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(transport.table_sizes().tasks, 0);

    let request = Request::new(RequestId::from(7), "ping", &json!({})).unwrap();
    transport.send(Message::Request(request)).unwrap();
    match within("the request", transport.recv()).await {
        Some(Inbound::RequestFailed {
            id,
            error: TransportError::Status { status, body },
        }) => {
            assert_eq!(id, RequestId::from(7));
            assert_eq!(status.as_u16(), 500);
            assert_eq!(body, "", "the body that did not come is left unread");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(transport.table_sizes().tasks, 0);
}

/// Reads one request (its head and its content-length body) from a raw connection; `None` when
/// the connection ends first. Its JSON body, and its head (lower case).
async fn read_raw_request(
    tcp: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
) -> Option<(String, Value)> {
    use tokio::io::AsyncReadExt;
    let mut chunk = [0u8; 4096];
    let (head_end, length, head) = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..at]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (at + 4, length, head);
        }
        match tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    while buf.len() < head_end + length {
        match tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
    buf.drain(..head_end + length);
    Some((head, body))
}

/// The soak's lost elicitation answer: the server closes a kept-alive connection just as the
/// POST of a response of the client's is written on it (it reads the POST and never answers).
/// The response is posted again on a new connection, and nothing is reported undelivered.
#[tokio::test]
async fn a_response_posted_on_a_kept_alive_connection_the_server_closes_is_posted_again() {
    use modelctx_http::client::{HttpTransport, Inbound};
    use modelctx_types::{Message, Response};
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;

    // What the server read: (connection number, the id of the response POSTed).
    let seen: Arc<Mutex<Vec<(usize, Value)>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = seen.clone();
    tokio::spawn(async move {
        let mut connections = 0;
        while let Ok((mut tcp, _)) = listener.accept().await {
            let number = connections;
            connections += 1;
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut requests = 0;
                while let Some((_, body)) = read_raw_request(&mut tcp, &mut buf).await {
                    log.lock().unwrap().push((number, body["id"].clone()));
                    requests += 1;
                    if number == 0 && requests == 2 {
                        return; // dropped without a reply, as a server closing it for idleness
                    }
                    let accepted = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n";
                    if tcp.write_all(accepted).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let mut config = ClientConfig::default();
    config.standalone_stream = false;
    let mut transport = HttpTransport::new(&url(addr), config).unwrap();

    let response = |id: i64| Message::Response(Response::new(id, &json!({})).unwrap());
    transport.send(response(1)).unwrap();
    eventually("response 1 is read and answered", || {
        seen.lock().unwrap().len() == 1 && transport.table_sizes().tasks == 0
    })
    .await;
    // The 202 had no body: its connection is back in the pool, idle.
    tokio::time::sleep(Duration::from_millis(50)).await;
    transport.send(response(2)).unwrap();
    let again = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if seen
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, id)| *id == 2)
                .count()
                == 2
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let log = seen.lock().unwrap().clone();
    assert!(again.is_ok(), "response 2 was not posted again: {log:?}");
    assert_eq!(
        log,
        vec![(0, json!(1)), (0, json!(2)), (1, json!(2))],
        "response 2 is first written on the kept-alive connection, then on a new one"
    );
    eventually("the POST is done", || transport.table_sizes().tasks == 0).await;
    match tokio::time::timeout(Duration::from_millis(200), transport.recv()).await {
        Err(_) => {}
        Ok(other @ Some(Inbound::Undelivered { .. })) => panic!("reported lost: {other:?}"),
        Ok(other) => panic!("{other:?}"),
    }
}

/// The failover soak's lost elicitation answer: behind a load balancer, the instance a
/// response of the client's reached dies before answering, and the balancer answers 502 (or 504).
/// The response is posted again (the balancer sends it to a live instance), and nothing is
/// reported undelivered; three gateway failures in a row are reported.
#[tokio::test]
async fn a_response_a_gateway_answers_502_or_504_is_posted_again() {
    use modelctx_http::client::{HttpTransport, Inbound, TransportError};
    use modelctx_types::{Message, Response};
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;

    // The id of each response read.
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some((_, body)) = read_raw_request(&mut tcp, &mut buf).await {
                    let id = body["id"].clone();
                    let count = {
                        let mut log = log.lock().unwrap();
                        log.push(id.clone());
                        log.iter().filter(|seen| **seen == id).count()
                    };
                    let reply: &[u8] = match (id.as_i64(), count) {
                        (Some(1), 1) => b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 3\r\n\r\nbad",
                        (Some(2), 1) => {
                            b"HTTP/1.1 504 Gateway Timeout\r\ncontent-length: 0\r\n\r\n"
                        }
                        (Some(3), _) => b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n",
                        _ => b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n",
                    };
                    if tcp.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let mut config = ClientConfig::default();
    config.standalone_stream = false;
    let mut transport = HttpTransport::new(&url(addr), config).unwrap();
    let response = |id: i64| Message::Response(Response::new(id, &json!({})).unwrap());
    let posts = |id: i64| seen.lock().unwrap().iter().filter(|s| **s == id).count();

    for id in [1, 2] {
        transport.send(response(id)).unwrap();
        eventually("posted again and accepted", || {
            posts(id) == 2 && transport.table_sizes().tasks == 0
        })
        .await;
        if let Ok(inbound) =
            tokio::time::timeout(Duration::from_millis(200), transport.recv()).await
        {
            panic!("response {id}: {inbound:?}");
        }
    }

    // Three gateway failures: posted twice more, then reported.
    transport.send(response(3)).unwrap();
    match within("response 3", transport.recv()).await {
        Some(Inbound::Undelivered {
            answer: Some(answered),
            error: TransportError::Status { status, .. },
            ..
        }) => {
            assert_eq!(answered, modelctx_types::RequestId::from(3));
            assert_eq!(status.as_u16(), 502);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(posts(3), 3);
}

/// A notification that gets 503 with `Retry-After` is posted once more after that wait (when it
/// fits in `one_way_timeout`); a second 503, or one without `Retry-After`, is reported.
#[tokio::test]
async fn a_one_way_post_refused_with_503_and_retry_after_is_posted_once_more() {
    use modelctx_http::client::{HttpTransport, Inbound, TransportError};
    use modelctx_types::{Message, Notification};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;
    use tokio::io::AsyncWriteExt;

    // The method of each notification read, and when.
    let seen: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some((_, body)) = read_raw_request(&mut tcp, &mut buf).await {
                    let method = body["method"].as_str().unwrap_or_default().to_owned();
                    let count = {
                        let mut log = log.lock().unwrap();
                        log.push((method.clone(), Instant::now()));
                        log.iter().filter(|(m, _)| *m == method).count()
                    };
                    let reply: &[u8] = match (method.as_str(), count) {
                        ("notifications/a", 1) | ("notifications/b", _) => {
                            b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n"
                        }
                        ("notifications/c", _) => {
                            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"
                        }
                        _ => b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n",
                    };
                    if tcp.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let mut config = ClientConfig::default();
    config.standalone_stream = false;
    config.one_way_timeout = Duration::from_secs(5);
    let mut transport = HttpTransport::new(&url(addr), config).unwrap();
    let notification =
        |method: &str| Message::Notification(Notification::new(method, &json!({})).unwrap());
    let times = |method: &str| -> Vec<Instant> {
        let log = seen.lock().unwrap();
        log.iter()
            .filter(|(m, _)| m == method)
            .map(|(_, at)| *at)
            .collect()
    };

    // Refused once: posted again after the second it asked for, then accepted.
    transport.send(notification("notifications/a")).unwrap();
    eventually("a is posted twice and accepted", || {
        times("notifications/a").len() == 2 && transport.table_sizes().tasks == 0
    })
    .await;
    let a = times("notifications/a");
    assert!(
        a[1] - a[0] >= Duration::from_millis(950),
        "{:?}",
        a[1] - a[0]
    );
    if let Ok(inbound) = tokio::time::timeout(Duration::from_millis(200), transport.recv()).await {
        panic!("{inbound:?}");
    }

    // Refused twice: the second refusal is reported.
    for (method, posts) in [("notifications/b", 2), ("notifications/c", 1)] {
        transport.send(notification(method)).unwrap();
        match within(method, transport.recv()).await {
            Some(Inbound::Undelivered {
                what,
                answer: None,
                error: TransportError::Status { status, .. },
            }) => {
                assert_eq!(what, method);
                assert_eq!(status.as_u16(), 503);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(times(method).len(), posts, "{method}");
    }
}

/// The transport reads no protocol version from the `initialize` result: the legacy session's
/// `MCP-Protocol-Version` header is the version the layer above tells it
/// ([`HttpTransport::set_version`](modelctx_http::client::HttpTransport::set_version)), on
/// requests and on the closing `DELETE`; a new `None` takes it away again.
#[tokio::test]
async fn the_legacy_version_header_is_the_version_the_session_tells_not_the_initialize_result() {
    use modelctx_http::client::{HttpTransport, Inbound};
    use modelctx_types::{Incoming, Message, ProtocolVersion, Request, RequestId};

    let server = ScriptServer::start(|seen, mut reply| async move {
        if legacy_basics(&seen, &mut reply, Some("s1")).await {
            return;
        }
        match (seen.method.as_str(), seen.rpc_method()) {
            ("POST", Some("ping")) => {
                let answer = json!({"jsonrpc": "2.0", "id": seen.body["id"], "result": {}});
                reply.json(200, &[], &answer).await;
            }
            ("DELETE", _) => reply.full(200, &[], "").await,
            _ => reply.full(405, &[], "").await,
        }
    })
    .await;
    let mut config = ClientConfig::default();
    config.standalone_stream = false;
    let mut transport = HttpTransport::new(&server.url(), config).unwrap();
    let ask = async |transport: &mut HttpTransport, id: i64, method: &str| {
        let request = Request::new(RequestId::from(id), method, &json!({})).unwrap();
        let message = Message::Request(request);
        let options = roles(&message, modelctx_http::client::SendOptions::default());
        transport.send_with(message, options).unwrap();
        match within(method, transport.recv()).await {
            Some(Inbound::Message(Incoming::Single(Message::Response(r)))) => {
                assert_eq!(r.id, RequestId::from(id));
            }
            other => panic!("{other:?}"),
        }
    };
    // The result names 2025-11-25; nothing is told yet.
    ask(&mut transport, 1, "initialize").await;
    ask(&mut transport, 2, "ping").await;
    transport.set_version(Some(ProtocolVersion::V2025_06_18));
    ask(&mut transport, 3, "ping").await;
    transport.set_version(None);
    ask(&mut transport, 4, "ping").await;
    transport.set_version(Some(ProtocolVersion::V2025_03_26));
    transport.close().await;

    let seen = server.seen();
    let version_of = |id: i64| {
        let seen = seen.iter().find(|s| s.body["id"] == json!(id)).unwrap();
        assert_eq!(seen.header("mcp-session-id"), (id > 1).then_some("s1"));
        seen.header("mcp-protocol-version").map(str::to_owned)
    };
    assert_eq!(version_of(1), None);
    assert_eq!(version_of(2), None, "not read from the initialize result");
    assert_eq!(version_of(3).as_deref(), Some("2025-06-18"));
    assert_eq!(version_of(4), None);
    let delete = seen.iter().find(|s| s.method == "DELETE").unwrap();
    assert_eq!(delete.header("mcp-protocol-version"), Some("2025-03-26"));
}

/// The transport reads no method names: what starts a legacy session is the request the layer
/// above marks with `SendOptions::starts_session`, not one named `initialize`.
#[tokio::test]
async fn the_session_id_comes_from_the_request_marked_as_starting_the_session() {
    use modelctx_http::client::{HttpTransport, Inbound, SendOptions};
    use modelctx_types::{Incoming, Message, Request, RequestId};

    let server = ScriptServer::start(|seen, mut reply| async move {
        let answer = json!({"jsonrpc": "2.0", "id": seen.body["id"], "result": {}});
        reply.json(200, &[("mcp-session-id", "s9")], &answer).await;
    })
    .await;
    let mut config = ClientConfig::default();
    config.standalone_stream = false;
    let mut transport = HttpTransport::new(&server.url(), config).unwrap();
    for (id, method, options) in [
        (1, "initialize", SendOptions::default()),
        (2, "x/start", SendOptions::default().starts_session()),
    ] {
        let request = Request::new(RequestId::from(id), method, &json!({})).unwrap();
        transport
            .send_with(Message::Request(request), options)
            .unwrap();
        match within(method, transport.recv()).await {
            Some(Inbound::Message(Incoming::Single(Message::Response(_)))) => {}
            other => panic!("{other:?}"),
        }
        let expected = (id == 2).then(|| "s9".to_owned());
        assert_eq!(transport.session_id(), expected, "after {method}");
    }
}

/// A pooled connection idle for longer than `pool_idle_timeout` is not reused: the next POST
/// opens a new connection (so that, with the timeout below the server's idle keep-alive timeout,
/// no request goes out on a connection the server is closing); within it, it is reused.
#[tokio::test]
async fn a_connection_idle_past_the_pool_timeout_is_not_reused() {
    use modelctx_http::client::HttpTransport;
    use modelctx_types::{Message, Notification};
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;

    // The connection number of each POST the server read.
    let seen: Arc<Mutex<Vec<usize>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = seen.clone();
    tokio::spawn(async move {
        let mut connections = 0;
        while let Ok((mut tcp, _)) = listener.accept().await {
            let number = connections;
            connections += 1;
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while read_raw_request(&mut tcp, &mut buf).await.is_some() {
                    log.lock().unwrap().push(number);
                    let accepted = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n";
                    if tcp.write_all(accepted).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let mut config = ClientConfig::default();
    config.standalone_stream = false;
    config.pool_idle_timeout = Duration::from_millis(100);
    let transport = HttpTransport::new(&url(addr), config).unwrap();
    let note =
        || Message::Notification(Notification::new("notifications/progress", &json!({})).unwrap());
    for (n, idle) in [
        (1, Duration::ZERO),
        (2, Duration::ZERO),
        (3, Duration::from_millis(300)),
    ] {
        // The third POST comes after the connection was idle for three times the pool's timeout.
        tokio::time::sleep(idle).await;
        transport.send(note()).unwrap();
        eventually("the POST is read", || seen.lock().unwrap().len() == n).await;
        eventually("the POST is done", || transport.table_sizes().tasks == 0).await;
    }
    assert_eq!(*seen.lock().unwrap(), vec![0, 0, 1]);
}
