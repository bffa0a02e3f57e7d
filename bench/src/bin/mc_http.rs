//! modelctx over Streamable HTTP (both eras on `/mcp`), tool `echo`.

use modelctx_http::server::ServerConfig;

fn main() -> std::io::Result<()> {
    let server = modelctx_bench::modelctx_server();
    modelctx_bench::runtime().block_on(async {
        // `serve` sets TCP_NODELAY on every accepted connection.
        let running = server
            .serve_http(modelctx_bench::loopback(), ServerConfig::default())
            .await?;
        modelctx_bench::announce(running.local_addr());
        std::future::pending::<()>().await;
        Ok(())
    })
}
