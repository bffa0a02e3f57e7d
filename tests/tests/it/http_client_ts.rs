//! The HTTP client against the TypeScript SDK's servers (`tests/ts`): `@modelcontextprotocol/sdk`
//! 1.x (legacy, sessions) and `@modelcontextprotocol/server` 2.x (both eras).
//!
//! `cargo xtask ci` installs Node 22 and the packages and sets `MODELCTX_NODE` and
//! `MODELCTX_REQUIRE_NODE=1`; run by hand without them, these tests say they are skipped.

use modelctx_http::client::ClientConfig;
use modelctx_session::{EraDecision, Event};
use modelctx_tests::http::within;
use modelctx_tests::http_client::*;
use modelctx_tests::node;
use serde_json::json;
use tokio::io::{BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// A TypeScript server process; it exits when dropped (its stdin closes, and it is killed).
struct TsServer {
    url: String,
    /// Its stdout after the `LISTENING` line: what its slow tool's handler does.
    said: Lines<BufReader<ChildStdout>>,
    _child: Child,
}

impl TsServer {
    /// Waits (at most 20 s) for the server's next stdout line, which must be `expected`
    /// (`HOLDING slow`: its handler holds the call; `CANCELLED slow`: the call was cancelled).
    async fn said(&mut self, expected: &str) {
        let line = within(expected, self.said.next_line())
            .await
            .expect("its stdout")
            .unwrap_or_else(|| panic!("the server's stdout ended before {expected:?}"));
        assert_eq!(line, expected);
    }
}

/// Starts `script` with `args`, or says why it cannot (then the test is skipped, unless
/// `MODELCTX_REQUIRE_NODE` is set).
async fn ts_server(script: &str, args: &[&str]) -> Option<TsServer> {
    let node::Listening { at, lines, child } = node::spawn_listening(script, args).await?;
    Some(TsServer {
        url: format!("http://127.0.0.1:{at}/mcp"),
        said: lines,
        _child: child,
    })
}

async fn echo_and_progress(client: &mut Driver) {
    let result = client
        .call_tool("echo", json!({"text": "from rust"}))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "from rust");

    let progress = json!({"name": "progress", "arguments": {"steps": 3}});
    let options = modelctx_session::RequestOptions::default().with_progress();
    let id = client.start_with("tools/call", progress, options);
    let result = within("progress", client.answer(&id)).await.unwrap();
    assert_eq!(text_of(&result), "done");
    let steps = client
        .events
        .iter()
        .filter(|e| matches!(e, Event::Progress { .. }))
        .count();
    assert_eq!(steps, 3, "{:?}", client.events);

    let listed = within("tools/list", client.request("tools/list", json!({})))
        .await
        .unwrap();
    assert_eq!(listed["tools"].as_array().map(Vec::len), Some(3));
}

#[tokio::test]
async fn the_typescript_sdk_1_server_gets_a_legacy_session() {
    let Some(mut server) = ts_server("http-server-v1.mjs", &[]).await else {
        return;
    };
    // Probing first: the 1.x server knows no server/discover, and the client falls back.
    let mut client = Driver::new(
        &server.url,
        Driver::session_config(),
        ClientConfig::default(),
    );
    let peer = within("connect", client.connect()).await.unwrap();
    assert_eq!(client.session.era_decision(), Some(EraDecision::Legacy));
    assert_eq!(peer.version.as_str(), "2025-11-25");
    assert!(client.transport.session_id().is_some());
    echo_and_progress(&mut client).await;

    // Cancelling a legacy call, once the server's handler holds it: notifications/cancelled
    // stops the handler, and the call's stream is let go.
    let id = client.start(
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 10000}}),
    );
    server.said("HOLDING slow").await;
    client
        .session
        .cancel(std::time::Instant::now(), &id, Some("no longer needed"))
        .unwrap();
    client.step_until_idle().await;
    server.said("CANCELLED slow").await;
    assert_eq!(client.transport.table_sizes().requests, 0);
    client.transport.close().await;
}

#[tokio::test]
async fn the_typescript_sdk_2_server_is_spoken_to_in_both_eras() {
    let Some(mut server) = ts_server("http-server-v2.mjs", &["--legacy=sessions"]).await else {
        return;
    };
    let mut modern = Driver::new(
        &server.url,
        Driver::session_config(),
        ClientConfig::default(),
    );
    let peer = within("connect", modern.connect()).await.unwrap();
    assert_eq!(peer.version.as_str(), "2026-07-28");
    assert_eq!(modern.transport.session_id(), None);
    echo_and_progress(&mut modern).await;

    // A modern cancellation, once the server's handler holds the call, closes the stream: the
    // slow call ends early on the server.
    let id = modern.start(
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 10000}}),
    );
    server.said("HOLDING slow").await;
    modern
        .session
        .cancel(std::time::Instant::now(), &id, None)
        .unwrap();
    modern.step_until_idle().await;
    server.said("CANCELLED slow").await;
    assert_eq!(modern.transport.table_sizes().tasks, 0);

    let mut legacy = Driver::new(&server.url, legacy_config(), ClientConfig::default());
    let peer = within("connect", legacy.connect()).await.unwrap();
    assert_eq!(peer.version.as_str(), "2025-11-25");
    assert!(legacy.transport.session_id().is_some());
    echo_and_progress(&mut legacy).await;
    legacy.transport.close().await;
}

#[tokio::test]
async fn sequential_calls_to_the_typescript_server_reuse_one_connection() {
    let Some(server) = ts_server("http-server-v1.mjs", &[]).await else {
        return;
    };
    let backend: std::net::SocketAddr = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let (front, connections) = front(backend, None).await;
    let mut transport = ClientConfig::default();
    transport.standalone_stream = false;
    let url = format!("http://{front}/mcp");
    let mut client = Driver::new(&url, legacy_config(), transport);
    within("connect", client.connect()).await.unwrap();
    let before = connections.load(std::sync::atomic::Ordering::SeqCst);
    for i in 0..10 {
        let text = format!("{i}");
        let result = client
            .call_tool("echo", json!({"text": text}))
            .await
            .unwrap();
        assert_eq!(text_of(&result), text);
    }
    let made = connections.load(std::sync::atomic::Ordering::SeqCst) - before;
    // The answers come as SSE streams; the pooled connection serves every call.
    assert!(made <= 1, "{made} new connections for 10 sequential calls");
    client.transport.close().await;
}
