//! modelctx over Streamable HTTP (both eras on `/mcp`, JSON responses) built with `otel`, tool
//! `echo`, with the OpenTelemetry pipeline of `modelctx_bench_otel::install` (or, with
//! `mc_http_otel off`, none).

use modelctx_http::server::ServerConfig;

fn main() -> std::io::Result<()> {
    let _pipeline = modelctx_bench_otel::install();
    let server = modelctx_bench_otel::modelctx_server();
    modelctx_bench_otel::runtime().block_on(async {
        // `serve` sets TCP_NODELAY on every accepted connection.
        let running = server
            .serve_http(modelctx_bench_otel::loopback(), ServerConfig::default())
            .await?;
        modelctx_bench_otel::announce(running.local_addr());
        std::future::pending::<()>().await;
        Ok(())
    })
}
