//! `Server::http_service` mounted in axum: the router owns the path, so the endpoint answers
//! wherever it is mounted (`nest_service` strips the prefix before the service sees the path).

use std::net::SocketAddr;

use modelctx_server::{HttpConfig, NoArgs, Server, Tool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// POSTs a modern `tools/call` of `echo` to `path` and returns the whole HTTP response.
async fn call(addr: SocketAddr, path: &str) -> String {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: echo\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn a_service_nested_in_axum_answers_under_its_prefix() {
    let server = Server::builder("s", "1")
        .tool(Tool::new("echo", |_: NoArgs| std::future::ready("said")))
        .build();
    let mcp = server.http_service(HttpConfig::default()).unwrap();
    let app = axum::Router::new()
        .nest_service("/mcp", mcp.clone())
        .route_service("/other", mcp);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    for path in ["/mcp", "/other"] {
        let response = call(addr, path).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{path}: {response}");
        assert!(response.contains("said"), "{path}: {response}");
    }
}
