//! The client facade over Streamable HTTP: what only HTTP has (standard headers from listed tools,
//! legacy sessions the server ends, connection failures).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modelctx_client::{
    Client, ConnectError, Error, ProtocolVersion, ServerNotification, TransportError,
};
use modelctx_http::client::TransportError as HttpError;
use modelctx_tests::client::{call_text, serve_http};
use modelctx_tests::http::within;
use modelctx_tests::http_client::{ScriptServer, sse_message, text_result};
use serde_json::{Value, json};

fn modern(id: &Value, result: Value) -> Value {
    let mut result = result;
    result["resultType"] = json!("complete");
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// On a modern connection, a listed tool's `x-mcp-header` arguments go in `Mcp-Param-*` headers,
/// and a tool whose declaration breaks the rules is left out of the list.
#[tokio::test]
async fn listed_tools_give_standard_headers_and_broken_ones_are_left_out() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        let id = seen.body["id"].clone();
        match seen.rpc_method() {
            Some("server/discover") => {
                let result = json!({"supportedVersions": ["2026-07-28"],
                    "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "private"});
                reply.json(200, &[], &modern(&id, result)).await;
            }
            Some("tools/list") => {
                let tools = json!([
                    {"name": "region", "inputSchema": {"type": "object", "properties": {
                        "region": {"type": "string", "x-mcp-header": "Region"}}}},
                    {"name": "broken", "inputSchema": {"type": "object", "properties": {
                        "n": {"type": "number", "x-mcp-header": "N"}}}},
                ]);
                let result = json!({"tools": tools, "ttlMs": 0, "cacheScope": "private"});
                reply.json(200, &[], &modern(&id, result)).await;
            }
            Some("tools/call") => {
                let region = seen.header("mcp-param-region").unwrap_or("none").to_owned();
                let mut result = text_result(&id, &format!("region {region}"));
                result["result"]["resultType"] = json!("complete");
                reply.json(200, &[], &result).await;
            }
            _ => reply.full(404, &[], "").await,
        }
    })
    .await;
    let client = within(
        "connect",
        Client::builder("t", "1").connect_http(&server.url()),
    )
    .await
    .unwrap();
    assert_eq!(
        client.protocol_version(),
        Some(ProtocolVersion::V2026_07_28)
    );
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["region"]);
    let called = call_text(&client, "region", json!({"region": "eu"})).await;
    assert_eq!(called, "region eu");
    let call = server
        .seen()
        .into_iter()
        .find(|s| s.rpc_method() == Some("tools/call"))
        .unwrap();
    assert_eq!(call.header("mcp-method"), Some("tools/call"));
    assert_eq!(call.header("mcp-name"), Some("region"));
    client.close().await;
}

/// A -32020 (a `Mcp-Param-*` header missing or wrong) makes the client list the tools again,
/// learn their header rules and retry the call once; a second mismatch is the answer.
#[tokio::test]
async fn a_header_mismatch_makes_the_client_list_the_tools_again_and_retry_once() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        let id = seen.body["id"].clone();
        match seen.rpc_method() {
            Some("server/discover") => {
                let result = json!({"supportedVersions": ["2026-07-28"],
                    "capabilities": {"tools": {"listChanged": true}}, "ttlMs": 0,
                    "cacheScope": "private"});
                reply.json(200, &[], &modern(&id, result)).await;
            }
            Some("tools/list") => {
                let tools = json!([
                    {"name": "region", "inputSchema": {"type": "object", "properties": {
                        "region": {"type": "string", "x-mcp-header": "Region"}}}},
                    {"name": "broken", "inputSchema": {"type": "object", "properties": {
                        "n": {"type": "number", "x-mcp-header": "N"}}}},
                ]);
                let result = json!({"tools": tools, "ttlMs": 0, "cacheScope": "private"});
                reply.json(200, &[], &modern(&id, result)).await;
            }
            Some("tools/call") if seen.header("mcp-param-region") == Some("eu") => {
                let mut result = text_result(&id, "with header");
                result["result"]["resultType"] = json!("complete");
                reply.json(200, &[], &result).await;
            }
            Some("tools/call") => {
                reply
                    .json(
                        400,
                        &[],
                        &json!({"jsonrpc": "2.0", "id": id, "error": {
                    "code": -32020, "message": "Mcp-Param-Region is missing"}}),
                    )
                    .await;
            }
            _ => reply.full(404, &[], "").await,
        }
    })
    .await;
    let client = within(
        "connect",
        Client::builder("t", "1").connect_http(&server.url()),
    )
    .await
    .unwrap();
    // The client has not listed the tools: the first call goes without the header.
    assert_eq!(
        call_text(&client, "region", json!({"region": "eu"})).await,
        "with header"
    );
    let methods: Vec<String> = server
        .seen()
        .iter()
        .filter_map(|s| s.rpc_method().map(str::to_owned))
        .collect();
    assert_eq!(
        methods,
        ["server/discover", "tools/call", "tools/list", "tools/call"]
    );

    // A mismatch after the retry is the server's answer: each call is retried once, no more.
    let answer = within(
        "a call that mismatches",
        client.call_tool("region", json!({"region": "us"})),
    )
    .await;
    assert!(
        matches!(&answer, Err(Error::Remote(e)) if e.code.0 == -32020),
        "{answer:?}"
    );
    let calls = |server: &ScriptServer| {
        server
            .seen()
            .iter()
            .filter(|s| s.rpc_method() == Some("tools/call"))
            .count()
    };
    assert_eq!(calls(&server), 4, "one retry after the listing, no more");
    client.close().await;
}

/// A modern listen stream that breaks is opened again by the transport under a new id; the
/// client takes the server's acknowledgement and notifications naming that id as its stream's,
/// and tells the application it may have missed notifications.
#[tokio::test]
async fn notifications_on_a_listen_stream_opened_again_reach_the_application() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        let id = seen.body["id"].clone();
        match seen.rpc_method() {
            Some("server/discover") => {
                let result = json!({"supportedVersions": ["2026-07-28"],
                    "capabilities": {"tools": {"listChanged": true}}, "ttlMs": 0,
                    "cacheScope": "private"});
                reply.json(200, &[], &modern(&id, result)).await;
            }
            Some("subscriptions/listen") => {
                reply.sse_head(&[]).await;
                let meta = json!({"io.modelcontextprotocol/subscriptionId": id});
                let ack = json!({"jsonrpc": "2.0",
                    "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": meta, "notifications": {"toolsListChanged": true}}});
                reply.raw(sse_message(None, &ack).as_bytes()).await;
                if id.as_str().is_some_and(|s| s.contains("~listen-")) {
                    let changed = json!({"jsonrpc": "2.0",
                        "method": "notifications/tools/list_changed", "params": {"_meta": meta}});
                    reply.raw(sse_message(None, &changed).as_bytes()).await;
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                // The first stream ends after its acknowledgement.
            }
            _ => reply.full(404, &[], "").await,
        }
    })
    .await;
    let mut transport = modelctx_client::HttpConfig::default();
    transport.reconnect.initial_delay = Duration::from_millis(10);
    let client = within(
        "connect",
        Client::builder("t", "1").connect_http_with(&server.url(), transport),
    )
    .await
    .unwrap();
    let mut notifications = client.notifications();
    let mut resynced = false;
    within("the list change on the stream opened again", async {
        loop {
            match notifications.recv().await.unwrap() {
                ServerNotification::Resynced => resynced = true,
                ServerNotification::ToolsListChanged => return,
                _ => {}
            }
        }
    })
    .await;
    assert!(
        resynced,
        "the application is told the stream was opened again"
    );
    client.close().await;
}

/// A legacy HTTP session the server ends (here: it expired) is initialized again; the
/// application hears it may have missed notifications, and calls go on.
#[tokio::test]
async fn an_ended_legacy_session_is_initialized_again() {
    let mut config = modelctx_http::server::ServerConfig::default();
    // Long enough that no stall between connecting and the first call ends the session.
    config.session_idle_timeout = Duration::from_secs(1);
    let (running, url) = serve_http(&modelctx_tests::facade::client_server(), config).await;
    let mut transport = modelctx_client::HttpConfig::default();
    // Without a standing GET stream the session is idle between calls.
    transport.standalone_stream = false;
    let resynced = Arc::new(AtomicUsize::new(0));
    let counter = resynced.clone();
    let client = Client::builder("t", "1")
        .protocol_version(ProtocolVersion::V2025_11_25)
        .on_notification(move |n| {
            if *n == ServerNotification::Resynced {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        })
        .connect_http_with(&url, transport)
        .await
        .unwrap();
    assert_eq!(
        call_text(&client, "echo", json!({"text": "one"})).await,
        "one"
    );
    // Waits until the server has ended the idle session (polled, not a fixed time).
    within("the session expires", async {
        while running.service().table_sizes().await.sessions != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // The call that finds the session gone fails; the client starts a new session at once.
    let lost = within(
        "a call after expiry",
        client.call_tool("echo", json!({"text": "two"})),
    )
    .await;
    if let Err(e) = &lost {
        assert!(matches!(e, Error::Closed(_)), "{e}");
    }
    let echoed = within(
        "a call in the new session",
        call_text(&client, "echo", json!({"text": "three"})),
    )
    .await;
    assert_eq!(echoed, "three");
    assert!(
        resynced.load(Ordering::SeqCst) >= 1,
        "Resynced was delivered"
    );
    client.close().await;
}

/// Connection failures are typed and quick.
#[tokio::test]
async fn connection_failures_are_typed() {
    let bad = Client::builder("t", "1")
        .connect_http("ftp://example.com/mcp")
        .await;
    assert!(matches!(bad, Err(ConnectError::Url(_))), "{bad:?}");

    // Nothing listens on the port.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let refused = within(
        "a refused connection",
        Client::builder("t", "1").connect_http(&format!("http://127.0.0.1:{port}/mcp")),
    )
    .await;
    // The transport's own error, said as the system says it: no handshake took place.
    match refused {
        Err(e @ ConnectError::Unreachable(TransportError::Http(HttpError::Connection(_)))) => {
            assert_eq!(e.to_string(), "connection refused");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }

    let missing = Client::builder("t", "1")
        .connect_stdio(modelctx_client::ServerCommand::new(
            "/nonexistent/mcp-server",
        ))
        .await;
    assert!(
        matches!(missing, Err(ConnectError::Spawn(_))),
        "{missing:?}"
    );
}

/// A URL whose path serves nothing: the probe, `initialize` and the GET of the HTTP+SSE
/// fallback all get 404, and the failure says so (the path is wrong), not that the fallback
/// failed.
#[tokio::test]
async fn a_wrong_path_is_reported_as_the_404_it_got() {
    let config = modelctx_http::server::ServerConfig::default();
    let (running, url) = serve_http(&modelctx_tests::facade::client_server(), config).await;
    let wrong = url.replace("/mcp", "/wrong");
    let failed = within("connect", Client::builder("t", "1").connect_http(&wrong)).await;
    match failed {
        Err(
            e @ ConnectError::Unreachable(TransportError::Http(HttpError::Status {
                status, ..
            })),
        ) => {
            assert_eq!(status.as_u16(), 404);
            let message = e.to_string();
            assert!(
                message.starts_with("the endpoint answered HTTP 404 Not Found: nothing serves MCP"),
                "{message}"
            );
            assert!(!message.contains("SSE"), "{message}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    running.shutdown(Duration::from_secs(1)).await;
}

/// A legacy server sends its own requests (here an elicitation) and list changes on the
/// standalone GET stream: `listening()` returns once that stream is open, so a call made after
/// it cannot race the stream, however slowly the server opens it.
#[tokio::test]
async fn listening_waits_for_the_legacy_standalone_stream() {
    let opened = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = opened.clone();
    let server = ScriptServer::start(move |seen, mut reply| {
        let flag = flag.clone();
        async move {
            if seen.method == "GET" {
                tokio::time::sleep(Duration::from_millis(300)).await;
                reply.sse_head(&[]).await;
                flag.store(true, Ordering::SeqCst);
                // The stream stays open until the client goes.
                tokio::time::sleep(Duration::from_secs(30)).await;
                return;
            }
            modelctx_tests::http_client::legacy_basics(&seen, &mut reply, Some("s1")).await;
        }
    })
    .await;
    let client = legacy_client(&server.url()).await;
    within("listening", client.listening()).await.unwrap();
    assert!(
        opened.load(Ordering::SeqCst),
        "listening() returned before the standalone stream was open"
    );
    client.close().await;

    // A server without the stream (405): listening() does not wait for it.
    let server = ScriptServer::start(|seen, mut reply| async move {
        modelctx_tests::http_client::legacy_basics(&seen, &mut reply, Some("s2")).await;
    })
    .await;
    let client = legacy_client(&server.url()).await;
    within("listening without a stream", client.listening())
        .await
        .unwrap();
    client.close().await;
}

/// A client pinned to 2025-11-25, connected to `url`.
async fn legacy_client(url: &str) -> Client {
    within(
        "connect",
        Client::builder("t", "1")
            .protocol_version(ProtocolVersion::V2025_11_25)
            .connect_http(url),
    )
    .await
    .unwrap()
}

/// Finding 5: a modern `tools/call` whose response stream breaks is sent again only for a tool
/// listed as idempotent, or when the caller allows it; otherwise it fails once, clearly.
#[tokio::test]
async fn finding_5_a_broken_tool_call_is_sent_again_only_when_idempotent_or_allowed() {
    let server = ScriptServer::start(|seen, mut reply| async move {
        let id = seen.body["id"].clone();
        match seen.rpc_method() {
            Some("server/discover") => {
                let result = json!({"supportedVersions": ["2026-07-28"],
                    "capabilities": {"tools": {}, "resources": {}}, "ttlMs": 0, "cacheScope": "private"});
                reply.json(200, &[], &modern(&id, result)).await;
            }
            Some("resources/read") if id.as_str().is_some_and(|s| s.contains("~reissue-")) => {
                let contents = json!([{"uri": "file:///x", "text": "read again"}]);
                let result = json!({"contents": contents, "ttlMs": 0, "cacheScope": "private"});
                reply.sse_head(&[]).await;
                let event = modelctx_tests::http_client::sse_message(None, &modern(&id, result));
                reply.raw(event.as_bytes()).await;
            }
            Some("resources/read") => reply.sse_head(&[]).await,
            Some("tools/list") => {
                let schema = json!({"type": "object"});
                let tools = json!([
                    {"name": "charge", "inputSchema": schema,
                        "annotations": {"idempotentHint": false, "destructiveHint": true}},
                    {"name": "lookup", "inputSchema": schema,
                        "annotations": {"idempotentHint": true}},
                    {"name": "plain", "inputSchema": schema},
                ]);
                let result = json!({"tools": tools, "ttlMs": 0, "cacheScope": "private"});
                reply.json(200, &[], &modern(&id, result)).await;
            }
            Some("tools/call") if id.as_str().is_some_and(|s| s.contains("~reissue-")) => {
                let mut result = text_result(&id, "second try");
                result["result"]["resultType"] = json!("complete");
                reply.sse_head(&[]).await;
                reply
                    .raw(modelctx_tests::http_client::sse_message(None, &result).as_bytes())
                    .await;
            }
            Some("tools/call") => {
                // The head, then the connection drops before the answer: the tool may have run.
                reply.sse_head(&[]).await;
            }
            _ => reply.full(404, &[], "").await,
        }
    })
    .await;
    let client = within(
        "connect",
        Client::builder("t", "1").connect_http(&server.url()),
    )
    .await
    .unwrap();
    within("list", client.list_all_tools()).await.unwrap();
    let calls_of = |tool: &str| {
        server
            .seen()
            .iter()
            .filter(|s| s.rpc_method() == Some("tools/call") && s.body["params"]["name"] == tool)
            .count()
    };

    for tool in ["charge", "plain"] {
        let error = within(tool, client.call_tool(tool, json!({})))
            .await
            .unwrap_err();
        assert!(
            matches!(
                &error,
                Error::Transport(TransportError::Http(HttpError::NotReissued(_)))
            ),
            "{error}"
        );
        assert_eq!(calls_of(tool), 1, "{tool} is called once");
    }

    let result = within("lookup", client.call_tool("lookup", json!({})))
        .await
        .unwrap();
    assert_eq!(result.text(), "second try");
    assert_eq!(calls_of("lookup"), 2, "an idempotent tool is called again");

    let options = modelctx_client::CallOptions::new().reissue(true);
    let result = within(
        "plain, allowed",
        client.call_tool_with("plain", json!({}), options),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "second try");
    assert_eq!(calls_of("plain"), 3);

    let options = modelctx_client::CallOptions::new().reissue(false);
    within(
        "lookup, forbidden",
        client.call_tool_with("lookup", json!({}), options),
    )
    .await
    .unwrap_err();
    assert_eq!(calls_of("lookup"), 3);

    // Any other request is sent again: the facade tells the transport so (it decides nothing
    // by method itself).
    let read = within("a read", client.read_resource("file:///x"))
        .await
        .unwrap();
    assert_eq!(read.contents.len(), 1);
    let reads = server
        .seen()
        .iter()
        .filter(|s| s.rpc_method() == Some("resources/read"))
        .count();
    assert_eq!(reads, 2);
    client.close().await;
}

/// The client facade tells the HTTP transport the version its session negotiated: the legacy
/// session's `notifications/initialized` and later requests carry it in `MCP-Protocol-Version`,
/// and the `initialize` of a new session after the server ended the old one carries none.
#[tokio::test]
async fn the_facade_tells_the_transport_the_negotiated_version_for_each_session() {
    let sessions = Arc::new(AtomicUsize::new(0));
    let counter = sessions.clone();
    let server = ScriptServer::start(move |seen, mut reply| {
        let counter = counter.clone();
        async move {
            let id = seen.body["id"].clone();
            match (seen.method.as_str(), seen.rpc_method()) {
                ("POST", Some("initialize")) => {
                    let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    let session = format!("s{n}");
                    let result = json!({"jsonrpc": "2.0", "id": id, "result": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "script", "version": "1"},
                    }});
                    reply
                        .json(200, &[("mcp-session-id", &session)], &result)
                        .await;
                }
                ("POST", _) if seen.body.get("id").is_none() => reply.full(202, &[], "").await,
                ("POST", Some("ping")) if seen.header("mcp-session-id") == Some("s1") => {
                    reply.full(404, &[], "").await;
                }
                ("POST", Some("ping")) => {
                    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {}});
                    reply.json(200, &[], &answer).await;
                }
                ("DELETE", _) => reply.full(200, &[], "").await,
                _ => reply.full(405, &[], "").await,
            }
        }
    })
    .await;
    let client = within(
        "connect",
        Client::builder("t", "1")
            .protocol_version(ProtocolVersion::V2025_06_18)
            .connect_http(&server.url()),
    )
    .await
    .unwrap();
    assert_eq!(
        client.protocol_version(),
        Some(ProtocolVersion::V2025_06_18)
    );
    // Session s1 has ended: the ping that finds out fails, the next one runs in session s2.
    let _ = within("a ping in the ended session", client.ping()).await;
    within("a ping in the new session", async {
        while client.ping().await.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    client.close().await;

    let seen = server.seen();
    let posts = |method: &str| -> Vec<(Option<String>, Option<String>)> {
        seen.iter()
            .filter(|s| s.rpc_method() == Some(method))
            .map(|s| {
                let header = |name| s.header(name).map(str::to_owned);
                (header("mcp-session-id"), header("mcp-protocol-version"))
            })
            .collect()
    };
    let v = Some("2025-06-18".to_owned());
    let (s1, s2) = (Some("s1".to_owned()), Some("s2".to_owned()));
    assert_eq!(posts("initialize"), [(None, None), (None, None)]);
    assert_eq!(
        posts("notifications/initialized"),
        [(s1.clone(), v.clone()), (s2.clone(), v.clone())]
    );
    let pings = posts("ping");
    assert_eq!(pings.first(), Some(&(s1, v.clone())));
    assert_eq!(pings.last(), Some(&(s2, v.clone())));
    let delete = seen.iter().find(|s| s.method == "DELETE").unwrap();
    assert_eq!(delete.header("mcp-protocol-version"), v.as_deref());
}

/// A legacy call the client gives up on is cancelled with `notifications/cancelled`, and its
/// response stream is closed too: the client facade tells the HTTP transport, which reads no
/// method names itself.
#[tokio::test]
async fn a_cancelled_legacy_call_closes_its_response_stream() {
    let closed = Arc::new(AtomicUsize::new(0));
    let seen_closed = closed.clone();
    let server = ScriptServer::start(move |seen, mut reply| {
        let closed = seen_closed.clone();
        async move {
            if modelctx_tests::http_client::legacy_basics(&seen, &mut reply, Some("s1")).await {
                return;
            }
            match seen.rpc_method() {
                Some("tools/call") => {
                    // Never answered: the stream stays open until the client closes it.
                    reply.sse_head(&[]).await;
                    while reply.alive().await {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    closed.fetch_add(1, Ordering::SeqCst);
                }
                _ => reply.full(404, &[], "").await,
            }
        }
    })
    .await;
    let client = legacy_client(&server.url()).await;
    let options = modelctx_client::CallOptions::new().timeout(Some(Duration::from_millis(200)));
    within(
        "a call that times out",
        client.call_tool_with("slow", json!({}), options),
    )
    .await
    .unwrap_err();
    within("the call's stream closed", async {
        while closed.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let cancelled = server
        .seen()
        .into_iter()
        .find(|s| s.rpc_method() == Some("notifications/cancelled"))
        .expect("the server is told");
    let call = server
        .seen()
        .into_iter()
        .find(|s| s.rpc_method() == Some("tools/call"))
        .unwrap();
    assert_eq!(cancelled.body["params"]["requestId"], call.body["id"]);
    client.close().await;
}
