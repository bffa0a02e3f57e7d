//! The lean modelctx echo server: default features off, the tool's input schema given by hand.
//! The runtime and the `LISTENING <port>` line are the root package's (`../src/common.rs`), so
//! both builds run the same way.

#[path = "../../src/common.rs"]
mod common;
pub use common::{announce, loopback, runtime};

/// The arguments of `echo`.
#[derive(serde::Deserialize)]
struct Echo {
    text: String,
}

async fn echo(args: Echo) -> String {
    args.text
}

/// The modelctx server of the benchmarks in its lean build: the tool `echo` alone, its input
/// schema `{"text": string}` written by hand.
pub fn modelctx_server() -> modelctx_server::Server {
    let schema = match serde_json::json!({
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }) {
        serde_json::Value::Object(map) => map,
        _ => unreachable!(),
    };
    modelctx_server::Server::builder("modelctx-bench", "0.0.0")
        .tool(
            modelctx_server::Tool::with_input_schema("echo", schema, echo)
                .description("Says the text back"),
        )
        .build()
}
