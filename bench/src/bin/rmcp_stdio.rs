//! rmcp 3.11 over stdio, tool `echo`: `rmcp_stdio pipes` uses `stdio_pipes()`, anything else
//! (or nothing) the README's `stdio()`.

use modelctx_bench::rmcp_echo::Echo;
use rmcp::ServiceExt;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pipes = std::env::args().nth(1).is_some_and(|a| a == "pipes");
    modelctx_bench::runtime().block_on(async {
        let running = if pipes {
            Echo::default()
                .serve(rmcp::transport::io::stdio_pipes())
                .await?
        } else {
            Echo::default().serve(rmcp::transport::stdio()).await?
        };
        running.waiting().await?;
        Ok(())
    })
}
