//! A small MCP server on Streamable HTTP, served until Ctrl-C or SIGTERM: both protocol eras on
//! one endpoint, `http://127.0.0.1:8080/mcp` (or the address given as the first argument, such
//! as `localhost:9000`).
//!
//! ```sh
//! cargo run -p modelctx-server --example http_server
//! # In another terminal:
//! cargo run -p modelctx-cli -- --url http://127.0.0.1:8080/mcp tools call add --args '{"a": 1, "b": 2}'
//! ```
//!
//! Ctrl-C stops it gracefully: no new connection is accepted, and requests under way get the
//! configured grace period (here 5 s) to finish.

use std::time::Duration;

use modelctx_server::{HttpConfig, Server, Tool, shutdown_signal};

/// `add`'s arguments: the doc comments become the descriptions in the input schema.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    /// One number.
    a: f64,
    /// The other.
    b: f64,
}

async fn add(args: Add) -> String {
    (args.a + args.b).to_string()
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let server = Server::builder("http-example", "1.0.0")
        .tool(Tool::new("add", add).description("Adds two numbers"))
        .build();
    let config = HttpConfig::default().shutdown_grace(Duration::from_secs(5));
    let running = server.serve_http(addr.as_str(), config).await?;
    eprintln!(
        "serving http://{}/mcp (Ctrl-C to stop)",
        running.local_addr()
    );
    running.with_graceful_shutdown(shutdown_signal()).await?;
    eprintln!("stopped");
    Ok(())
}
