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
//! # Handlers
//!
//! * **Tools**: `async fn(Args) -> R` or `async fn(Context, Args) -> R`. `Args` is any
//!   `Deserialize` type (its JSON Schema, derived with `schemars`, is the tool's input schema;
//!   [`Tool::with_input_schema`] takes one by hand); arguments are validated against the schema
//!   first, and a mismatch is a failed call (`isError`) the model can read. `R` is text,
//!   [`Content`], a [`ToolOutput`], [`Json<T>`] (structured output, with the output schema
//!   derived from `T` and each result validated against it), or a `Result` of these whose
//!   error is shown to the model. Unknown tools are `-32602`.
//! * **Resources** ([`Resource`], [`ResourceTemplate`] with RFC 6570 templates matched in
//!   linear time), **prompts** ([`Prompt`], arguments from the type) and **completions**
//!   (`complete` on a prompt or template).
//! * Everything can be added and removed while the server runs; connected clients are told
//!   (`list_changed`), and [`Server::notify_resource_updated`] reaches subscribers of both eras.
//! * A panicking handler answers its request with `-32603`; the connection lives on. Requests
//!   run concurrently, each on its own task; [`Limits`] bound the requests handlers answer.
//!
//! # Input from the client, and the rule it puts on handlers
//!
//! [`Context::elicit`], [`Context::sample`] and [`Context::list_roots`] work in both eras with
//! the same code. A legacy client gets a request on the stream of the call. A modern client
//! (2026-07-28) cannot be sent requests: the call is answered `input_required` with the
//! question and a signed `requestState`, and when the client retries with the answer, **the
//! handler runs again from the start**, getting the answers to its questions, asked in the same
//! order, at once. So before its last question a handler may run more than once: ask first and
//! act after, or make what comes before a question idempotent.
//!
//! Questions asked at once (joined futures) go to a modern client in one round, each under a
//! key of `inputRequests` the handler may choose ([`Context::keyed`]); an answer that is not
//! one to its question (an `ElicitResult`, a `CreateMessageResult`, a `ListRootsResult`) fails
//! the request with -32602. A client that did not declare a capability a question needs gets
//! no question but [`InputError::NotSupported`]; returned by a tool or prompt, it answers a
//! modern request with the protocol's `MissingRequiredClientCapability` error (-32021).
//!
//! # Transports
//!
//! [`Server::serve_stdio`], [`Server::http_service`] and [`Server::serve_http`] (both eras on
//! one endpoint, feature `http`), [`Server::in_memory`] for tests, and
//! [`Server::serve_channels`] for any transport that yields and accepts messages.
//!
//! # Guides and examples
//!
//! `docs/guide-server.md` in the repository walks through every feature, `docs/versions.md`
//! says what each protocol version has, and `docs/from-rmcp.md` maps rmcp's API onto this one.
//! The examples: `examples/stdio_server.rs` (tools, a resource and a prompt on stdio) and
//! `examples/axum_server.rs` (the MCP endpoint in an axum application); `cargo run -p
//! modelctx-server --example stdio_server`.
//!
//! # Optional features
//!
//! * `stdio` (default): [`Server::serve_stdio`].
//! * `http` (default): the Streamable HTTP endpoint of `modelctx-http`.
//! * `schemars` (default): schemas derived from Rust types ([`Tool::new`], [`Prompt::new`]).
//! * `validation` (default): arguments and structured results validated against their schemas,
//!   compiled once into a bounded cache; no `$ref` is ever fetched; size and depth limited
//!   (`modelctx_types::schema`, through its `validation` feature).
//!
//! # What it does not do
//!
//! It holds no protocol rules (those are `modelctx-session`'s) and no wire rules (those are the
//! transports'): it routes requests to handlers, runs each where its request is served (a
//! handler that waits goes on on a task of its own), and writes what they return for the
//! client's protocol version. It keeps no task per request: a modern HTTP request that does not
//! wait is answered on its HTTP connection's task. It keeps no task and no channel per legacy
//! HTTP session: between requests a session is a [`SessionState`] in the server's
//! [`SessionStore`] (an [`InMemoryStore`] by default, set with
//! [`ServerBuilder::session_store`]); what a request leaves in flight (a question to the client,
//! a handler that waits) lives only as long as that request, in this process: a store shared by
//! several processes carries the sessions, not the requests under way (a client's answer must
//! reach the process that asked). It does not authenticate (an HTTP layer in front does) and does
//! not implement the tasks extension yet.

mod context;
mod cursor;
#[cfg(feature = "http")]
mod http;
mod input;
mod limits;
mod prompt;
mod resource;
mod run;
#[cfg(feature = "validation")]
mod schema;
mod server;
mod tool;
mod transport;
mod uri_template;
mod write;

pub use context::{Context, ProgressError, Question};
pub use input::InputError;
pub use limits::Limits;
pub use modelctx_session::{LogLevel, ProtocolVersion};
pub use prompt::{IntoPromptResult, Prompt, PromptHandler, PromptMessage};
pub use resource::{
    CacheHint, IntoContents, InvalidTemplate, ReadRequest, Resource, ResourceContents,
    ResourceError, ResourceTemplate, Subscribe,
};
pub use run::{Frame, InMemoryStore, SessionState, SessionStore, StoreError, StoreFuture};
pub use server::{Load, RegisterError, Server, ServerBuilder, Settings};
pub use tool::{
    ArgsOnly, Content, IntoToolOutput, Json, NoArgs, Tool, ToolHandler, ToolOutput, WithContext,
};
pub use transport::InMemory;

/// The code of the README, compiled (and run, unless marked `no_run`) as doctests of this
/// crate, so that it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

/// The code of `docs/guide-server.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide-server.md")]
struct ServerGuideDoctests;

/// The code of `docs/guide-client.md`, compiled and run as doctests here, where a server is at
/// hand (`modelctx-client` is a dev-dependency).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide-client.md")]
struct ClientGuideDoctests;

/// The JSON Schema of `T`, as a tool schema: without `$schema` (some clients reject it), and
/// without the formats schemars invents for Rust's number types (`uint32`, `double`, ...),
/// which JSON Schema does not define and validators warn about; the ranges stay as `minimum`
/// and `maximum`.
#[cfg(feature = "schemars")]
pub(crate) fn schema_of<T: schemars::JsonSchema>() -> modelctx_types::JsonObject {
    let schema = schemars::schema_for!(T);
    let mut value = serde_json::to_value(schema).unwrap_or_default();
    drop_unknown_formats(&mut value);
    let mut object = match value {
        serde_json::Value::Object(object) => object,
        _ => modelctx_types::JsonObject::new(),
    };
    object.remove("$schema");
    object
}

/// The formats JSON Schema 2020-12 defines.
#[cfg(feature = "schemars")]
const FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Removes `format` keywords with values JSON Schema does not define, from every subschema
/// (never from a map of names to subschemas, where `format` would be a property's name).
#[cfg(feature = "schemars")]
fn drop_unknown_formats(schema: &mut serde_json::Value) {
    use serde_json::Value;
    // (value, whether it is a schema rather than a map of names to schemas)
    let mut stack: Vec<(&mut Value, bool)> = vec![(schema, true)];
    while let Some((value, is_schema)) = stack.pop() {
        match value {
            Value::Object(object) => {
                if is_schema
                    && object
                        .get("format")
                        .and_then(Value::as_str)
                        .is_some_and(|f| !FORMATS.contains(&f))
                {
                    object.remove("format");
                }
                for (key, child) in object.iter_mut() {
                    let child_is_schema = !(is_schema
                        && matches!(
                            key.as_str(),
                            "properties"
                                | "$defs"
                                | "definitions"
                                | "patternProperties"
                                | "dependentSchemas"
                        ));
                    let data = is_schema
                        && matches!(key.as_str(), "const" | "enum" | "default" | "examples");
                    if !data {
                        stack.push((child, child_is_schema));
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    stack.push((item, true));
                }
            }
            _ => {}
        }
    }
}

#[cfg(all(test, feature = "schemars"))]
mod tests {
    #[test]
    fn derived_schemas_lose_invented_formats_and_keep_properties_named_format() {
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Args {
            count: u32,
            ratio: f64,
            format: String,
            when: Option<String>,
            nested: Vec<Inner>,
        }
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Inner {
            size: i64,
        }
        let schema = serde_json::Value::Object(super::schema_of::<Args>());
        let text = schema.to_string();
        assert!(
            !text.contains("uint32") && !text.contains("int64") && !text.contains("double"),
            "{text}"
        );
        assert!(schema["properties"]["format"].is_object(), "{text}");
        assert_eq!(schema["properties"]["count"]["minimum"], 0);
        assert!(schema.get("$schema").is_none());
    }
}
