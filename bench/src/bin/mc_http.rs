//! modelctx over Streamable HTTP (both eras on `/mcp`), tool `echo`: JSON responses, or with
//! `mc_http sse` an SSE stream for every response (`ServerConfig::sse_responses`); with
//! `mc_http layered`, JSON responses and one pass-through middleware layer around every request
//! (`modelctx_bench::PassThrough`).

use modelctx_http::server::ServerConfig;

fn main() -> std::io::Result<()> {
    let mode = std::env::args().nth(1);
    let layered = mode.as_deref() == Some("layered");
    let server = modelctx_bench::modelctx_server_with(|builder| {
        if layered {
            builder.layer(modelctx_bench::PassThrough)
        } else {
            builder
        }
    });
    let mut config = ServerConfig::default();
    config.sse_responses = mode.as_deref() == Some("sse");
    modelctx_bench::runtime().block_on(async {
        // `serve` sets TCP_NODELAY on every accepted connection.
        let running = server
            .serve_http(modelctx_bench::loopback(), config)
            .await?;
        modelctx_bench::announce(running.local_addr());
        std::future::pending::<()>().await;
        Ok(())
    })
}
