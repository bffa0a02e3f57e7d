//! modelctx in its lean build (default features off) over Streamable HTTP (both eras on `/mcp`),
//! tool `echo`: JSON responses, or with `mc_http_lean sse` an SSE stream for every response.

use modelctx_http::server::ServerConfig;

fn main() -> std::io::Result<()> {
    let server = modelctx_bench_lean::modelctx_server();
    let mut config = ServerConfig::default();
    config.sse_responses = std::env::args().nth(1).is_some_and(|a| a == "sse");
    modelctx_bench_lean::runtime().block_on(async {
        // `serve` sets TCP_NODELAY on every accepted connection.
        let running = server
            .serve_http(modelctx_bench_lean::loopback(), config)
            .await?;
        modelctx_bench_lean::announce(running.local_addr());
        std::future::pending::<()>().await;
        Ok(())
    })
}
