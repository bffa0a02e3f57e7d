//! The MCP server facade: tools as plain async functions with typed arguments, served in both
//! protocol eras over stdio, Streamable HTTP, an in-memory pair, or any transport that yields
//! and accepts messages.
//!
//! ```no_run
//! use modelctx_server::{Server, Tool};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Echo {
//!     /// What to say back.
//!     text: String,
//! }
//!
//! async fn echo(args: Echo) -> String {
//!     args.text
//! }
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> std::io::Result<()> {
//!     let server = Server::builder("echo-server", "1.0.0")
//!         .tool(Tool::new("echo", echo).description("Says the text back"))
//!         .build();
//!     server.serve_stdio().await
//! }
//! ```
//!
//! # What it does not do
//!
//! It holds no protocol rules (those are `modelctx-session`'s) and no wire rules (those are the
//! transports'): it routes requests to handlers, runs each on its own task, and writes what
//! they return for the client's protocol version.

mod context;
mod cursor;
mod driver;
#[cfg(feature = "http")]
mod http;
mod input;
mod limits;
mod prompt;
mod resource;
#[cfg(feature = "validation")]
mod schema;
mod server;
mod tool;
mod transport;
mod uri_template;
mod write;

pub use context::{Context, ProgressError};
pub use driver::Frame;
pub use input::InputError;
pub use limits::Limits;
pub use modelctx_session::{LogLevel, ProtocolVersion};
pub use prompt::{IntoPromptResult, Prompt, PromptHandler, PromptMessage};
pub use resource::{
    CacheHint, IntoContents, InvalidTemplate, ReadRequest, Resource, ResourceContents,
    ResourceError, ResourceTemplate,
};
pub use server::{RegisterError, Server, ServerBuilder, Settings};
pub use tool::{
    ArgsOnly, Content, IntoToolOutput, Json, NoArgs, Tool, ToolHandler, ToolOutput, WithContext,
};
pub use transport::InMemory;

/// The JSON Schema of `T`, as a tool schema: without `$schema` (some clients reject it).
#[cfg(feature = "schemars")]
pub(crate) fn schema_of<T: schemars::JsonSchema>() -> modelctx_types::JsonObject {
    let schema = schemars::schema_for!(T);
    let mut object = match serde_json::to_value(schema) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => modelctx_types::JsonObject::new(),
    };
    object.remove("$schema");
    object
}
