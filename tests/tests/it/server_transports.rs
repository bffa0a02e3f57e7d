//! The server facade's main paths over real transports: a child process on stdio, and
//! Streamable HTTP in both eras with the modelctx HTTP client.

use std::time::Duration;

use modelctx_client::model::EmbeddedResourceResource;
use modelctx_http::client::ClientConfig as HttpClientConfig;
use modelctx_session::{EraChoice, Event, ProtocolVersion, RequestOptions};
use modelctx_stdio::{ChildTransport, ServerCommand};
use modelctx_tests::http::within;
use modelctx_tests::http_client::{Driver, legacy_config, text_of};
use serde_json::json;

const STDIO_SERVER: &str = env!("CARGO_BIN_EXE_facade-stdio-server");

fn caps() -> modelctx_types::JsonObject {
    json!({"elicitation": {}}).as_object().cloned().unwrap()
}

/// Both facades, as they ship: the server's stdio transport in a child process, the client's
/// line transport on the child's pipes (the test keeps the process, to see how it exits).
#[tokio::test]
async fn the_facade_serves_a_child_process_on_stdio_in_both_eras() {
    for era in [EraChoice::Probe, EraChoice::Legacy] {
        let ChildTransport {
            reader,
            writer,
            mut process,
            ..
        } = ServerCommand::new(STDIO_SERVER).spawn().unwrap();
        let client = within(
            "connect",
            modelctx_client::Client::builder("stdio-test", "1")
                .era(era)
                .connect_lines(reader, writer),
        )
        .await
        .unwrap();
        let expected = match era {
            EraChoice::Legacy => modelctx_client::Era::Legacy,
            _ => modelctx_client::Era::Modern,
        };
        assert_eq!(client.era(), Some(expected));
        let result = within(
            "echo",
            client.call_tool("echo", json!({"text": "over stdio"})),
        )
        .await
        .unwrap();
        assert_eq!(result.text(), "over stdio");
        let listed = within("prompts", client.list_prompts(None)).await.unwrap();
        assert_eq!(listed.prompts[0].name, "greet");
        let result = within("whoami", client.call_tool("whoami", json!({})))
            .await
            .unwrap();
        assert_eq!(result.text(), "nobody", "no HTTP request over stdio");
        let read = within("read", client.read_resource("file:///readme.md"))
            .await
            .unwrap();
        assert!(
            matches!(&read.contents[..], [EmbeddedResourceResource::TextResourceContents(c)] if c.text == "# facade"),
            "{read:?}"
        );
        // Closing the client closes the server's stdin: the server ends on its own, cleanly.
        within("close", client.close()).await;
        let status = within("the server exits", process.wait()).await.unwrap();
        assert!(status.success(), "{status}");
    }
}

#[tokio::test]
async fn the_facade_serves_streamable_http_in_both_eras() {
    let server = modelctx_tests::facade::server();
    let running = server
        .serve_http(
            "127.0.0.1:0",
            modelctx_http::server::ServerConfig::default(),
        )
        .await
        .unwrap();
    let url = format!("http://{}/mcp", running.local_addr());

    let mut session = Driver::session_config();
    session.capabilities = caps();
    for config in [session, legacy_config()] {
        let mut transport = HttpClientConfig::default();
        transport
            .headers
            .insert("x-test-user", http::HeaderValue::from_static("ada"));
        let mut client = Driver::new(&url, config, transport);
        let peer = within("connect", client.connect()).await.unwrap();
        let modern = peer.version == ProtocolVersion::V2026_07_28;

        // The handler sees the HTTP request its call came in.
        let result = client.call_tool("whoami", json!({})).await.unwrap();
        assert_eq!(text_of(&result), "ada");

        let result = client
            .call_tool("echo", json!({"text": "over http"}))
            .await
            .unwrap();
        assert_eq!(text_of(&result), "over http");

        // Progress and log messages on the call's stream; structured output.
        if !modern {
            client
                .request("logging/setLevel", json!({"level": "info"}))
                .await
                .unwrap();
        }
        let mut params = json!({"name": "steps", "arguments": {"count": 3}});
        if modern {
            params["_meta"] = json!({"io.modelcontextprotocol/logLevel": "info"});
        }
        let id = client.start_with(
            "tools/call",
            params,
            RequestOptions::default().with_progress(),
        );
        let result = within("steps", client.answer(&id)).await.unwrap();
        assert_eq!(result["structuredContent"], json!({"steps": 3}));
        let progress = client
            .events
            .iter()
            .filter(|e| matches!(e, Event::Progress { .. }))
            .count();
        assert_eq!(progress, 3);
        let logs = client
            .events
            .iter()
            .filter(|e| matches!(e, Event::Notification(n) if n.method == "notifications/message"))
            .count();
        assert_eq!(logs, 3, "modern: {modern}");

        // Input from the client: a request on the call's stream (legacy), a round trip (modern).
        client.answer_server = json!({"action": "accept", "content": {"answer": "42"}});
        if modern {
            let mut params = json!({"name": "ask", "arguments": {}});
            let first = client.request("tools/call", params.clone()).await.unwrap();
            assert_eq!(first["resultType"], "input_required");
            let key = first["inputRequests"]
                .as_object()
                .unwrap()
                .keys()
                .next()
                .unwrap()
                .clone();
            params["inputResponses"] = json!({ key: client.answer_server });
            params["requestState"] = first["requestState"].clone();
            let result = client.request("tools/call", params).await.unwrap();
            assert_eq!(text_of(&result), "answered 42");
        } else {
            let result = client.call_tool("ask", json!({})).await.unwrap();
            assert_eq!(text_of(&result), "answered 42");
        }
        // Cancelling: the handler's token fires (modern: the stream closes; legacy:
        // notifications/cancelled).
        let before = modelctx_tests::facade::CANCELLED.load(std::sync::atomic::Ordering::SeqCst);
        let open = running.service().table_sizes().await.in_flight;
        let id = client.start("tools/call", json!({"name": "wait", "arguments": {}}));
        // Cancelled once the server has it (a cancellation that overtook the call would find
        // nothing to cancel): a legacy request in its session's table, a modern one as an HTTP
        // request in flight.
        within("the server gets the call", async {
            loop {
                let sizes = running.service().table_sizes().await;
                if (modern && sizes.in_flight > open) || (!modern && sizes.requests > 0) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        client
            .session
            .cancel(std::time::Instant::now(), &id, None)
            .unwrap();
        client.step_until_idle().await;
        within("the handler sees the cancellation", async {
            while modelctx_tests::facade::CANCELLED.load(std::sync::atomic::Ordering::SeqCst)
                == before
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;

        assert_eq!(client.transport.table_sizes().requests, 0);
        // The server's transport lets go of the cancelled request too (legacy: it will not be
        // answered, so its stream does not wait for it).
        within("the server forgets the cancelled request", async {
            while running.service().table_sizes().await.requests != 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        client.transport.close().await;
    }
    within("sessions end", async {
        while running.service().table_sizes().await.sessions != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_closes_its_event_stream_and_the_client_resumes_it() {
    use modelctx_server::{Context, NoArgs, Server, Tool};
    use modelctx_tests::http::{
        call, modern_call, modern_headers, open_session, post, post_headers, raw_request,
    };
    async fn poll(context: Context, _: NoArgs) -> String {
        let closed = context.close_sse_stream().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        format!("closed: {closed}")
    }
    let server = Server::builder("poll", "1")
        .tool(Tool::new("poll", poll))
        .build();
    let running = server
        .serve_http(
            "127.0.0.1:0",
            modelctx_http::server::ServerConfig::default(),
        )
        .await
        .unwrap();
    let addr = running.local_addr();
    // 2025-11-25: the call's stream is its priming event, then the connection ends; the result
    // comes on the stream resumed from that event.
    let session = open_session(addr, "2025-11-25").await;
    let headers = post_headers(Some(&session), Some("2025-11-25"));
    let mut response = post(addr, &headers, &call(2, "poll", json!({}))).await;
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    let priming = within("priming", response.next_event()).await.unwrap();
    assert!(
        priming.data.is_empty() && priming.retry.is_some(),
        "{priming:?}"
    );
    assert!(within("close", response.next_event()).await.is_none());
    let resume = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("Last-Event-ID", priming.id.as_deref().unwrap()),
    ];
    let mut resumed = within("get", raw_request(addr, "GET", "/mcp", &resume, b"")).await;
    assert_eq!(resumed.status, 200);
    let (_, result) = within("result", resumed.next_message()).await.unwrap();
    assert_eq!(result["id"], 2);
    assert_eq!(result["result"]["content"][0]["text"], "closed: true");
    // A modern request's stream does not resume: nothing is closed.
    let response = post(
        addr,
        &modern_headers("tools/call", Some("poll")),
        &modern_call(3, "poll", json!({})),
    )
    .await;
    let body = response.json().await;
    assert_eq!(body["result"]["content"][0]["text"], "closed: false");
    running.shutdown(Duration::from_secs(1)).await;
}

/// One list of versions: `ServerBuilder::versions` narrows what the protocol sessions serve and
/// what the HTTP endpoint serves alike (the endpoint's own list, here every version, is replaced).
#[tokio::test]
async fn the_builders_versions_are_the_ones_served_over_http() {
    use modelctx_tests::http::{modern_headers, modern_meta, post, post_headers};
    let server = modelctx_server::Server::builder("modern-only", "1.0.0")
        .versions([ProtocolVersion::V2026_07_28])
        .build();
    let running = server
        .serve_http(
            "127.0.0.1:0",
            modelctx_http::server::ServerConfig::default(),
        )
        .await
        .unwrap();
    let addr = running.local_addr();
    // The session: `server/discover` names the one version.
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": modern_meta()}});
    let response = post(addr, &modern_headers("server/discover", None), &discover).await;
    assert_eq!(response.status, 200);
    let reply = within("discover", response.json()).await;
    assert_eq!(reply["result"]["supportedVersions"], json!(["2026-07-28"]));
    // The endpoint: no legacy session opens.
    let initialize = json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let response = post(addr, &post_headers(None, None), &initialize).await;
    assert_eq!(response.status, 400);
    assert!(response.header("mcp-session-id").is_none());
    let reply = within("initialize", response.json()).await;
    assert_eq!(reply["error"]["code"], -32022, "{reply}");
    assert_eq!(reply["error"]["data"]["supported"], json!(["2026-07-28"]));
    running.shutdown(Duration::from_secs(1)).await;
}
