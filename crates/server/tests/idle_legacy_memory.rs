//! What an idle legacy HTTP session costs in memory: how much this process's resident set grows
//! per session when N sessions are opened (`initialize`, `notifications/initialized`) and left
//! idle (the transport's session entry, the facade's stored state and its entry in the fan-out
//! table, and what the allocator keeps of the garbage of serving them). Its own test binary, so
//! that nothing else runs meanwhile; skipped where /proc is missing.

#![cfg(feature = "http")]

use std::net::SocketAddr;

use axum::body::HttpBody as _;
use axum::http::{Request, StatusCode};
use modelctx_http::server::{McpService, PeerAddr, ServerConfig};
use modelctx_server::{NoArgs, Server, Tool};
use serde_json::json;

/// This process's resident set size in bytes (`VmRSS`), if /proc tells.
fn rss() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn post(sid: Option<&str>, body: serde_json::Value) -> Request<String> {
    let mut request = Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(sid) = sid {
        request = request.header("mcp-session-id", sid);
    }
    let mut request = request.body(body.to_string()).unwrap();
    request
        .extensions_mut()
        .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
    request
}

/// Opens one session and reads its answers to the end.
async fn open(service: &McpService) {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"roots": {}},
        "clientInfo": {"name": "a-client", "version": "1.0.0"}}});
    let response = service.handle(post(None, initialize)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let sid = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let mut body = axum::body::Body::new(response.into_body());
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        frame.unwrap();
    }
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = service.handle(post(Some(&sid), initialized)).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}

/// The transport's short-lived tasks (writing out what was sent) finish first.
async fn rss_after_settling() -> Option<i64> {
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    rss()
}

/// An idle legacy session keeps little memory: a guard against sessions growing tasks or
/// channels again (15.3 KiB each when every session had a driver task and two channels; about
/// 3.8 KiB as plain stored state). The bound is twice the 4 KiB goal so that allocator and page
/// noise cannot fail it; `cargo xtask bench` (M1) measures the goal itself.
#[tokio::test(flavor = "current_thread")]
async fn an_idle_legacy_session_keeps_little_memory() {
    let server = Server::builder("s", "1")
        .tool(Tool::new("echo", |_: NoArgs| std::future::ready("echo")))
        .build();
    let service = server.http_service(ServerConfig::default()).unwrap();
    // Warm up: the tables' first allocations, the fan-out task, the runtime's.
    for _ in 0..50 {
        open(&service).await;
    }
    let Some(before) = rss_after_settling().await else {
        eprintln!("skipped: no /proc/self/status");
        return;
    };
    const N: i64 = 1000;
    for _ in 0..N {
        open(&service).await;
    }
    let after = rss_after_settling().await.unwrap();
    let per_session = (after - before) / N;
    eprintln!("an idle legacy session keeps {per_session} bytes");
    assert!(per_session <= 8192, "{per_session} bytes per idle session");
    assert_eq!(server.load().connections, 0);
}
