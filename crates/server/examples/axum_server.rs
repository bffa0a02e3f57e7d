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
//! to serve other names), bodies are limited, sessions are capped and expire.

use axum::Router;
use axum::routing::get;
use axum::serve::ListenerExt;
use modelctx_http::server::ServerConfig;
use modelctx_server::{Server, Tool};

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
    // A `tower::Service`; it answers on its configured path, `/mcp` by default, and axum's
    // `route_service` hands it the request with the path unchanged.
    let mcp = server.http_service(ServerConfig::default())?;

    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route_service("/mcp", mcp);

    // TCP_NODELAY: without it, small SSE writes wait on delayed ACKs (tens of milliseconds).
    let listener = tokio::net::TcpListener::bind(&addr).await?.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    eprintln!("MCP endpoint on http://{addr}/mcp, health check on http://{addr}/health");
    axum::serve(listener, app).await?;
    Ok(())
}
