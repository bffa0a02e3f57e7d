//! A small MCP server on stdio: two tools (one with structured output, one reporting
//! progress), a resource and a prompt.
//!
//! ```sh
//! # Any MCP client can run it; with mcx:
//! cargo run -p modelctx-cli -- --stdio "cargo run -q -p modelctx-server --example stdio_server" tools list
//! # Or the client example, which runs this server when given no other:
//! cargo run -p modelctx-client --example client
//! ```
//!
//! It serves both protocol eras: a client that sends `initialize` gets the legacy protocol it
//! asks for, one that sends `server/discover` (2026-07-28) the modern one.

use std::time::Duration;

use modelctx_server::{
    Context, Json, Prompt, PromptMessage, ReadRequest, Resource, ResourceContents, Server, Tool,
};

/// `add`'s arguments: the doc comments become the descriptions in the input schema.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    /// One number.
    a: f64,
    /// The other.
    b: f64,
}

/// `add`'s result: `Json` makes it `structuredContent`, with an output schema derived from it.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Sum {
    /// a + b.
    sum: f64,
}

async fn add(args: Add) -> Json<Sum> {
    Json(Sum {
        sum: args.a + args.b,
    })
}

/// `count_words`'s arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct CountWords {
    /// The text to count the words of.
    text: String,
}

/// A tool that takes the request's `Context` to report progress while it works; it stops when
/// the client cancels the call.
async fn count_words(context: Context, args: CountWords) -> Result<String, String> {
    let words: Vec<&str> = args.text.split_whitespace().collect();
    let total = words.len() as f64;
    for (i, _) in words.iter().enumerate() {
        if context.is_cancelled() {
            return Err("cancelled".into());
        }
        // Sent only when the client asked for progress; values must increase.
        let _ = context.progress(i as f64 + 1.0, Some(total), None).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(format!("{} words", words.len()))
}

/// `summarize`'s arguments: a prompt's arguments are strings.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Summarize {
    /// The text to summarize.
    text: String,
    /// How long the summary may be, in words (optional).
    words: Option<String>,
}

async fn summarize(args: Summarize) -> Vec<PromptMessage> {
    let limit = args.words.unwrap_or_else(|| "50".into());
    vec![PromptMessage::user(format!(
        "Summarize this text in at most {limit} words:\n\n{}",
        args.text
    ))]
}

async fn about(_: Context, request: ReadRequest) -> ResourceContents {
    ResourceContents::text(request.uri, "An example server of modelctx.").mime_type("text/plain")
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let server = Server::builder("stdio-example", env!("CARGO_PKG_VERSION"))
        .instructions("Adds numbers and counts words.")
        .tool(Tool::new("add", add).description("Adds two numbers"))
        .tool(
            Tool::new("count_words", count_words)
                .description("Counts the words of a text, reporting progress"),
        )
        .resource(
            Resource::new("example://about", "about", about)
                .description("What this server is")
                .mime_type("text/plain"),
        )
        .prompt(Prompt::new("summarize", summarize).description("Asks for a summary"))
        .build();
    // stdout carries the protocol: anything else goes to stderr.
    eprintln!("stdio-example: serving MCP on stdin/stdout");
    server.serve_stdio().await
}
