//! An MCP client: runs a server as a child process, lists its tools and calls them.
//!
//! ```sh
//! # Runs the stdio_server example of modelctx-server (through cargo) and calls its tools:
//! cargo run -p modelctx-client --example client
//! # Any stdio server: lists its tools and calls those that need no arguments:
//! cargo run -p modelctx-client --example client -- npx -y @modelcontextprotocol/server-everything
//! ```

use std::time::Duration;

use modelctx_client::{CallOptions, Client, ServerCommand, model};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let example = args.is_empty();
    let command = match args.split_first() {
        Some((program, rest)) => ServerCommand::new(program).args(rest),
        // The server example, built and run by cargo (the `CARGO` cargo set for this run). The
        // child gets a short list of our environment variables only: pass on what cargo needs.
        None => ServerCommand::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "run",
                "-q",
                "-p",
                "modelctx-server",
                "--example",
                "stdio_server",
            ])
            .inherit_env("CARGO_HOME")
            .inherit_env("RUSTUP_HOME")
            .inherit_env("RUSTUP_TOOLCHAIN")
            .inherit_env("CARGO_TARGET_DIR"),
    };

    let client = Client::builder("client-example", env!("CARGO_PKG_VERSION"))
        // Time for cargo to build the server example on a first run.
        .handshake_timeout(Duration::from_secs(300))
        .connect_stdio(command)
        .await?;
    println!(
        "connected: {} ({:?})",
        client
            .server_info()
            .map(|info| info.name)
            .unwrap_or_default(),
        client.protocol_version()
    );

    let tools = client.list_all_tools().await?;
    for tool in &tools {
        println!(
            "tool {}: {}",
            tool.name,
            tool.description.as_deref().unwrap_or("")
        );
    }

    if example {
        // `add` returns structured output, checked against the output schema it was listed with.
        let sum = client.call_tool("add", json!({"a": 2, "b": 3})).await?;
        println!("add(2, 3) = {}", sum.structured_content.unwrap_or_default());
        // `count_words` reports progress when asked.
        let options = CallOptions::new()
            .on_progress(|p| println!("  progress {}/{}", p.progress, p.total.unwrap_or_default()));
        let counted = client
            .call_tool_with("count_words", json!({"text": "one two three"}), options)
            .await?;
        println!("count_words: {}", counted.text());
        let prompt = client
            .get_prompt("summarize", &[("text", "A long text.")])
            .await?;
        println!("summarize: {} message(s)", prompt.messages.len());
    } else {
        for tool in tools.iter().filter(|t| needs_no_arguments(t)) {
            let result = client.call_tool(&tool.name, json!({})).await?;
            println!("{}: {}", tool.name, result.text());
        }
    }

    client.close().await;
    Ok(())
}

/// Whether the tool's input schema requires no property. (`required` is a field of the model
/// for the versions whose schema names it; in 2026-07-28 an input schema is any JSON Schema
/// object, and what it holds is kept in `extra`.)
fn needs_no_arguments(tool: &model::Tool) -> bool {
    let schema = &tool.input_schema;
    let listed = schema.required.as_ref().is_some_and(|r| !r.is_empty());
    let extra = schema
        .extra
        .get("required")
        .and_then(|r| r.as_array())
        .is_some_and(|r| !r.is_empty());
    !listed && !extra
}
