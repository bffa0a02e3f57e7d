//! The server of the official MCP conformance suite: every fixture of its server scenarios
//! (`modelctx_tests::conformance_server`) on Streamable HTTP at 127.0.0.1 (a free port, printed
//! as `LISTENING <port>`; the endpoint is `/mcp`), both protocol eras on one endpoint, until
//! stdin closes.
//!
//! With `--stdio`, the same server on stdin and stdout instead (newline-delimited JSON-RPC), for
//! the conformance leg that reaches it through `mcx proxy`.

use std::io::Write as _;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let server = modelctx_tests::conformance_server::server();
    if std::env::args().skip(1).any(|a| a == "--stdio") {
        return server.serve_stdio().await;
    }
    let config = modelctx_http::server::ServerConfig::default();
    let running = server.serve_http("127.0.0.1:0", config).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "LISTENING {}", running.local_addr().port())?;
    stdout.flush()?;
    let mut sink = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut sink).await;
    running.shutdown(std::time::Duration::from_secs(1)).await;
    Ok(())
}
