//! An MCP server mounted in an axum application: the Streamable HTTP endpoint at `/mcp`, next
//! to the application's own routes.
//!
//! ```sh
//! cargo run -p modelctx-server --example axum_server            # on 127.0.0.1:8080
//! cargo run -p modelctx-server --example axum_server 127.0.0.1:3000
//! # Then, from another shell:
//! cargo run -p modelctx-cli -- --url http://127.0.0.1:8080/mcp tools list
//! curl http://127.0.0.1:8080/health
//! ```
//!
//! The endpoint serves both eras: legacy clients open a session with `initialize`, modern
//! (2026-07-28) clients send stateless requests. Its security defaults hold here as with
//! `serve_http`: only loopback `Host` and `Origin` values are accepted (see `docs/security.md`
//! to serve other names), bodies are limited and must arrive within 30 s, requests in flight
//! and sessions are capped, sessions expire. With the loopback lists, the peer must be on
//! loopback too: the application hands the service the peer's address through axum's
//! `ConnectInfo` (`into_make_service_with_connect_info`, and feature `axum` of modelctx-server
//! or modelctx-http), otherwise every request gets 403. Connection limits and timeouts (header
//! read, idle connections, how many connections) are the application's to set with axum or
//! hyper; `serve_http` sets them itself.

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use axum::serve::ListenerExt;
use modelctx_server::{HttpConfig, Server, Tool};

/// `echo`'s arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    /// The text to say back.
    text: String,
}

async fn echo(args: Echo) -> String {
    args.text
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into());

    let server = Server::builder("axum-example", env!("CARGO_PKG_VERSION"))
        .tool(Tool::new("echo", echo).description("Says the text back"))
        .build();
    // A `tower::Service`; the router owns the path (`nest_service` works too).
    let mcp = server.http_service(HttpConfig::default())?;

    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route_service("/mcp", mcp);

    // TCP_NODELAY: without it, small SSE writes wait on delayed ACKs (tens of milliseconds).
    let listener = tokio::net::TcpListener::bind(&addr).await?.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    eprintln!("MCP endpoint on http://{addr}/mcp, health check on http://{addr}/health");
    // The peer's address in every request (`ConnectInfo`): the endpoint serves only loopback
    // peers with its default allow-lists, and refuses requests whose peer it does not know.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
