//! Random requests against the HTTP service (no socket): whatever the method, path, headers and
//! body, the service answers with a sensible status and, for errors, a JSON-RPC error body; it
//! never panics or hangs; and once every session is closed its tables are empty.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use modelctx_http::server::{McpService, ServerConfig};
use modelctx_tests::http::TestApp;
use proptest::prelude::*;
use serde_json::{Value, json};

fn bodies() -> impl Strategy<Value = Vec<u8>> {
    let messages = prop_oneof![
        3 => Just(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "p", "version": "1"}}})
        ),
        1 => Just(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
        1 => Just(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}}})),
        1 => Just(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
        1 => Just(json!({"jsonrpc": "2.0", "id": 3, "result": {}})),
        1 => Just(
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}})
        ),
        1 => Just(
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": 7}}})
        ),
        1 => Just(json!([{"jsonrpc": "2.0", "id": 6, "method": "ping"}])),
        1 => Just(json!([])),
        1 => Just(json!(null)),
    ]
    .prop_map(|v: Value| v.to_string().into_bytes());
    prop_oneof![
        4 => messages,
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

fn header() -> impl Strategy<Value = (&'static str, String)> {
    let names = prop::sample::select(vec![
        "content-type",
        "accept",
        "mcp-protocol-version",
        "mcp-session-id",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "origin",
        "host",
        "content-length",
    ]);
    let values = prop::sample::select(vec![
        "application/json".to_owned(),
        "text/event-stream".to_owned(),
        "application/json, text/event-stream".to_owned(),
        "2025-11-25".to_owned(),
        "2026-07-28".to_owned(),
        "2099-01-01".to_owned(),
        "0-0".to_owned(),
        "18446744073709551615-1".to_owned(),
        "localhost".to_owned(),
        "http://evil.example.com".to_owned(),
        "tools/list".to_owned(),
        "=?base64?!!!?=".to_owned(),
        String::new(),
        "5".to_owned(),
    ]);
    (names, values)
}

/// A request: method, path, headers, body.
type Raw = (String, String, Vec<(&'static str, String)>, Vec<u8>);

fn request() -> impl Strategy<Value = Raw> {
    (
        prop::sample::select(vec![
            "POST", "POST", "POST", "POST", "POST", "POST", "GET", "DELETE", "PUT", "OPTIONS",
        ]),
        prop::sample::select(vec![
            "/mcp", "/mcp", "/mcp", "/mcp", "/mcp", "/mcp", "/", "/mcp/x",
        ]),
        prop_oneof![
            3 => Just(Vec::new()),
            1 => prop::collection::vec(header(), 1..3),
        ],
        prop::bool::weighted(0.8),
        bodies(),
    )
        .prop_map(|(m, p, mut h, defaults, b)| {
            if defaults {
                // Mostly well-formed, so that sessions open and requests get past the checks.
                h.insert(0, ("content-type", "application/json".to_owned()));
                h.insert(
                    1,
                    ("accept", "application/json, text/event-stream".to_owned()),
                );
            }
            (m.to_owned(), p.to_owned(), h, b)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_requests_get_sensible_answers(requests in prop::collection::vec(request(), 4..24)) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut config = ServerConfig::default();
            config.max_body = 256;
            let service = McpService::new(config, Arc::new(TestApp::default())).unwrap();
            let mut session: Option<String> = None;
            for (method, path, headers, body) in requests {
                let mut builder = http::Request::builder()
                    .method(method.as_str())
                    .uri(path.as_str())
                    .extension(modelctx_tests::http::LOOPBACK_PEER);
                let mut has_host = false;
                for (name, value) in &headers {
                    has_host |= *name == "host";
                    builder = builder.header(*name, value.as_str());
                }
                if !has_host {
                    builder = builder.header("host", "localhost");
                }
                if let Some(id) = &session {
                    builder = builder.header("mcp-session-id", id.as_str());
                }
                let Ok(request) = builder.body(Full::new(bytes::Bytes::from(body))) else {
                    continue;
                };
                let response = tokio::time::timeout(Duration::from_secs(10), service.handle(request))
                    .await
                    .expect("an answer in time");
                let status = response.status().as_u16();
                assert!(
                    [200, 202, 400, 403, 404, 405, 406, 409, 413, 415, 503].contains(&status),
                    "status {status}"
                );
                if let Some(id) = response.headers().get("mcp-session-id") {
                    session = Some(id.to_str().unwrap().to_owned());
                }
                let is_json = response
                    .headers()
                    .get("content-type")
                    .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
                let is_sse = response
                    .headers()
                    .get("content-type")
                    .is_some_and(|v| v.as_bytes() == b"text/event-stream");
                if is_sse {
                    // Streams stay open: read what is there, then let go.
                    drop(response);
                    continue;
                }
                let body = tokio::time::timeout(Duration::from_secs(10), response.into_body().collect())
                    .await
                    .expect("a body in time")
                    .unwrap()
                    .to_bytes();
                if status >= 400 && status != 404 || (status == 404 && !body.is_empty()) {
                    assert!(is_json, "an error has a JSON body");
                    let value: Value = serde_json::from_slice(&body).expect("JSON");
                    assert!(value["error"]["code"].is_i64(), "{value}");
                }
            }
            service.close_all().await;
            assert!(service.table_sizes().await.is_empty());
            assert!(service.config().event_store.sizes().await.unwrap().is_empty());
        });
    }
}
