//! B1: the modelctx stdio server as the README shows it: the `echo` tool, its input schema
//! derived by schemars.

use modelctx_server::{Server, Tool};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    text: String,
}

async fn echo(args: Echo) -> String {
    args.text
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let server = Server::builder("echo", "0.0.0")
        .tool(Tool::new("echo", echo).description("Says the text back"))
        .build();
    server.serve_stdio().await
}
