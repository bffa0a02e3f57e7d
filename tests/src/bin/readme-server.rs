//! The README's server ("A first server"), as a program: below this header, the text
//! is exactly the README's block (`readme_server_is_the_readmes_block` in `src/lib.rs` checks
//! it), and `tests/it/readme.rs` runs it over HTTP, stops it with SIGTERM and runs it on stdio.

use modelctx_server::{HttpConfig, Server, Tool, shutdown_signal};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: f64,
    b: f64,
}

async fn add(args: Add) -> String {
    (args.a + args.b).to_string()
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let server = Server::builder("adder", "1.0.0")
        .tool(Tool::new("add", add).description("Adds two numbers"))
        .build();
    match std::env::args().nth(1).as_deref() {
        // One client, on stdin and stdout.
        Some("--stdio") => server.serve_stdio().await,
        // Streamable HTTP at http://ADDR/mcp, until Ctrl-C or SIGTERM.
        addr => {
            let addr = addr.unwrap_or("127.0.0.1:8080");
            server
                .serve_http_until(addr, HttpConfig::default(), shutdown_signal())
                .await
        }
    }
}
