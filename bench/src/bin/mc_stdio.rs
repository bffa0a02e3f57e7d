//! modelctx over stdio (default features off: `stdio` only in the minimal build), tool `echo`.

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
    modelctx_bench::runtime().block_on(server.serve_stdio())
}
