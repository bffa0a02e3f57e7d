//! modelctx over Streamable HTTP (both eras on `/mcp`), tool `echo`.

use modelctx_http::server::ServerConfig;
use modelctx_server::{Server, Tool};

#[derive(serde::Deserialize)]
struct Echo {
    text: String,
}

async fn echo(args: Echo) -> String {
    args.text
}

fn main() -> std::io::Result<()> {
    let server = Server::builder("modelctx-bench", "0.0.0")
        .tool(
            Tool::with_input_schema("echo", modelctx_bench::echo_schema(), echo)
                .description("Says the text back"),
        )
        .build();
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
