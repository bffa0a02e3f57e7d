//! Helpers for the tests of the client facade (`modelctx-client`): a tool's text, completions,
//! the notifications a test waits for, a sampling answer, and the facade's server in memory or
//! over HTTP.

use std::collections::HashMap;

use modelctx_client::{
    Client, ClientBuilder, CompletionRef, Notifications, RecvError, ServerNotification, model,
};
use modelctx_http::server::{RunningServer, ServerConfig};
use modelctx_server::Server;
use serde_json::Value;

use crate::http::within;

/// The text of the first content block of a tool's result.
///
/// # Panics
///
/// When that block is not text.
pub fn text(result: &model::CallToolResult) -> String {
    match result.content.first() {
        Some(model::ContentBlock::TextContent(t)) => t.text.clone(),
        other => panic!("not a text block: {other:?}"),
    }
}

/// Calls tool `name` with `arguments`: the text of the first content block of its result.
///
/// # Panics
///
/// When the call fails, or the block is not text.
pub async fn call_text(client: &Client, name: &str, arguments: Value) -> String {
    let result = client
        .call_tool(name, arguments)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    text(&result)
}

/// The values the server completes argument `name` of `reference` to from `value`, without
/// context.
///
/// # Panics
///
/// When the completion fails.
pub async fn completions(
    client: &Client,
    reference: &CompletionRef,
    name: &str,
    value: &str,
) -> Vec<String> {
    let completion = client
        .complete(reference, name, value, &HashMap::new())
        .await
        .unwrap_or_else(|e| panic!("completing {name}: {e}"));
    completion.values
}

/// Waits (see [`within`]) for a notification that `wanted` accepts, skipping the others and
/// any the receiver missed.
///
/// # Panics
///
/// When the notifications end or none comes in time.
pub async fn expect_notification(
    notifications: &mut Notifications,
    what: &str,
    wanted: impl Fn(&ServerNotification) -> bool,
) -> ServerNotification {
    within(what, async {
        loop {
            match notifications.recv().await {
                Ok(n) if wanted(&n) => return n,
                Ok(_) | Err(RecvError::Missed(_)) => {}
                Err(e) => panic!("{what}: {e}"),
            }
        }
    })
    .await
}

/// Serves `server` over Streamable HTTP on a free local port, in this process: the running
/// server (it stops when dropped) and its MCP URL.
///
/// # Panics
///
/// When the port cannot be bound.
pub async fn serve_http(server: &Server, config: ServerConfig) -> (RunningServer, String) {
    let running = server
        .serve_http("127.0.0.1:0", config)
        .await
        .expect("a local port");
    let url = format!("http://{}/mcp", running.local_addr());
    (running, url)
}

/// The client `builder` makes, connected to `server` over in-memory channels.
///
/// # Panics
///
/// When the handshake fails or takes too long.
pub async fn connect_in_memory(server: &Server, builder: ClientBuilder) -> Client {
    let memory = server.in_memory();
    within(
        "connect",
        builder.connect_channels(memory.to_server, memory.from_server),
    )
    .await
    .expect("connected")
}

/// A sampling handler's answer, from its 2025-11-25 JSON.
///
/// # Panics
///
/// When the JSON is not a `CreateMessageResult`.
pub fn sampled(answer: Value) -> model::CreateMessageResult {
    serde_json::from_value::<modelctx_types::v2025_11_25::CreateMessageResult>(answer)
        .expect("a CreateMessageResult")
        .into()
}
