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
//! * **Tools**: `async fn(Args) -> R` or `async fn(Context, Args) -> R`, and with state given
//!   to [`ServerBuilder::state`], `async fn(State<S>, Args) -> R` or
//!   `async fn(Context, State<S>, Args) -> R` ([`State`]). `Args` is any
//!   `Deserialize` type (its JSON Schema, derived with `schemars`, is the tool's input schema;
//!   [`Tool::with_input_schema`] takes one by hand); arguments are validated against the schema
//!   first, and a mismatch is a failed call (`isError`) the model can read. `R` is text,
//!   [`Content`], a [`ToolOutput`], [`Json<T>`] (structured output, with the output schema
//!   derived from `T` and each result validated against it), or a `Result` of these whose
//!   error is shown to the model. Unknown tools are `-32602`.
//! * **Resources** ([`Resource`], [`ResourceTemplate`] with RFC 6570 templates matched in
//!   linear time), **prompts** ([`Prompt`], arguments from the type, which must all be
//!   strings) and **completions** (`complete` on a prompt or template). Their handlers take the
//!   same four shapes as tools, with a [`ReadRequest`] or the prompt's arguments
//!   ([`ResourceHandler`], [`PromptHandler`]).
//! * A handler of a wrong shape (not async, arguments in the wrong order) or returning a type
//!   its item cannot send is a compile error that says which shapes and return types are
//!   accepted.
//! * What cannot be checked by the compiler is checked when an item is registered: a tool
//!   whose schema cannot be used, a prompt whose arguments are not all strings, a handler
//!   taking state the server was not given. [`ServerBuilder::build`] panics on it (a mistake
//!   fixed in the code); [`ServerBuilder::try_build`] and [`Server::add_tool`] (and the other
//!   `add_*`) return the [`RegisterError`], for servers made from data read at run time.
//! * **Skills** (the `io.modelcontextprotocol/skills` extension): [`ServerBuilder::skills_dir`]
//!   serves a directory of Agent Skills (read once into memory, digests and sizes published,
//!   `skills/list`, `skills/get`, `resources/directory/read`), [`ServerBuilder::skill_files`] a
//!   tree given in memory, [`ServerBuilder::skill`] a skill whose content is generated
//!   ([`DynamicSkill`]), [`ServerBuilder::skills_source`] skills asked of a [`SkillsSource`]
//!   each time a client asks (a gateway's servers').
//! * **Tasks** (the `io.modelcontextprotocol/tasks` extension of 2026-07-28):
//!   [`Tool::task_support`] lets a tool run as a task the client polls, feeds input to and
//!   cancels, with the same handler code; [`ServerBuilder::task_store`] sets where tasks are
//!   kept ([`tasks`] says how).
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
//! # Authorization (Streamable HTTP)
//!
//! [`ServerBuilder::auth`] takes a [`Guard`] (for OAuth 2.1, the one `modelctx-auth` builds):
//! every request to the endpoint is authenticated (401 without a valid token), and a request
//! for a tool, prompt, resource or template given [`Tool::scopes`] (and the like) that the token
//! lacks (a call, a read, a subscription, a `completion/complete` of a scoped prompt or
//! template) is refused 403 before it is read. The server checks the scopes again with the guard
//! that admitted the request before the handler runs (a JSON-RPC error -32000 whose
//! `data.reason` is `"insufficient_scope"`); a listen stream hears of a scoped resource's
//! changes only when the token has its scopes; handlers read the caller with
//! [`Context::auth`]. Stdio is unaffected. `docs/guide-auth.md` walks through it.
//!
//! # Transports
//!
//! [`Server::serve_stdio`], [`Server::http_service`] and [`Server::serve_http`] (both eras on
//! one endpoint, feature `http`), [`Server::in_memory`] for tests, and
//! [`Server::serve_channels`] for any transport that yields and accepts messages.
//!
//! Over HTTP, [`Server::serve_http`] takes any address tokio resolves (`"127.0.0.1:8080"`,
//! `"localhost:8080"`) and an [`HttpConfig`] (made with `HttpConfig::default()` and its builder
//! methods), and returns a [`RunningServer`] serving on tasks of its own: await it to serve until
//! a [`ShutdownHandle`] stops it, or run it until a signal with
//! [`RunningServer::with_graceful_shutdown`]; [`Server::serve_http_until`] binds and serves until
//! a future completes, [`shutdown_signal()`] being Ctrl-C or SIGTERM:
//!
//! ```no_run
//! use modelctx_server::{HttpConfig, Server, shutdown_signal};
//!
//! # async fn run(server: Server) -> std::io::Result<()> {
//! let config = HttpConfig::default().max_sessions(100);
//! server.serve_http_until("127.0.0.1:8080", config, shutdown_signal()).await
//! # }
//! ```
//!
//! # Guides and examples
//!
//! `docs/guide-server.md` in the repository walks through every feature, `docs/versions.md`
//! says what each protocol version has, and `docs/from-rmcp.md` maps rmcp's API onto this one.
//! The examples: `examples/stdio_server.rs` (tools, a resource and a prompt on stdio),
//! `examples/http_server.rs` (Streamable HTTP until Ctrl-C) and `examples/axum_server.rs` (the
//! MCP endpoint in an axum application); `cargo run -p modelctx-server --example stdio_server`.
//!
//! # Optional features
//!
//! * `stdio` (default): [`Server::serve_stdio`].
//! * `http` (default): the Streamable HTTP endpoint of `modelctx-http`.
//! * `schemars` (default): schemas derived from Rust types ([`Tool::new`], [`Prompt::new`]).
//! * `validation` (default): arguments and structured results validated against their schemas,
//!   compiled once into a bounded cache; no `$ref` is ever fetched; size and depth limited
//!   (`modelctx_types::schema`, through its `validation` feature).
//! * `otel`: the request spans ([`observe`]) as OpenTelemetry spans through
//!   `tracing-opentelemetry`, their parent the W3C trace context of `params._meta`, and the
//!   operation metrics and load gauges on the global meter provider (the OpenTelemetry API only:
//!   the application installs the SDK and exporter of its choice).
//!
//! # What it does not do
//!
//! It routes requests to handlers, runs each where its request is served (a handler that
//! waits goes on on a task of its own; a request that does not wait is answered on the task that
//! read it), and writes what they return for the client's protocol version: tool, prompt and resource-read results, resource contents,
//! and resource, template and prompt definitions are built as `model` values and converted into
//! that version's generated types (`wire::write`), content being downgraded in one place
//! (`wire::write::content_block`); the questions handlers ask (sampling, elicitation, roots)
//! and their answers are model values too, raw JSON only through the `*_json` variants; results
//! are written from those types straight to JSON text. Tool definitions are assembled as JSON
//! around their schemas (their annotations and icons written through the generated types), once
//! per tool and version, by the first `tools/list` in that version. Tools are registered once,
//! with their schemas compiled and their `Mcp-Param-*` rules derived; a call reads its params
//! once. It holds no wire rules (those are the transports'). It only configures the list cache
//! hint of modern results (`Settings::list_cache`); the session writes it. Some protocol rules
//! still live here rather than in `modelctx-session`: legacy subscriptions (in the runtime,
//! `run/`) and the resource-not-found code per era
//! (`resource.rs`). It does not authenticate by itself: over HTTP the transport asks the
//! [`Guard`] given to [`ServerBuilder::auth`] (`modelctx-auth` builds one for OAuth 2.1; this
//! crate does not depend on it), and the server answers which scopes a request needs and checks
//! them again before a handler runs; over stdio nothing is authenticated (the MCP
//! authorization rules are for HTTP). Of tasks ([`tasks`]) it serves the 2026-07-28 extension
//! for `tools/call` only, sends no `notifications/tasks` (clients poll), and runs a task's
//! handler in the process that created it (a shared [`tasks::TaskStore`] carries the task's
//! state to the others, not its answers or cancellation). It serves
//! skills as they were when the server was built (no watching of the directory, no reload), and
//! does not follow symbolic links in a skills directory.
//! Its [`middleware`] chain wraps handlers, not the session: what the session answers itself
//! (`initialize`, `ping`, a refusal by its era's rules) and the legacy `resources/subscribe`
//! and `resources/unsubscribe` do not go through the layers, and a layer sees a request once it
//! is routed (editing it does not change what the handler gets). It exports no traces or
//! metrics by itself (feature `otel` records on the global providers) and counts no legacy
//! sessions, SSE streams or stored events for the metrics (the transport does not report them
//! yet).
//!
//! It keeps no task and no channel per legacy HTTP session: between requests a session is a
//! [`SessionState`] in the server's [`SessionStore`] (an [`InMemoryStore`] by default, set
//! with [`ServerBuilder::session_store`]); what a request leaves in flight (a question to the
//! client, a handler that waits) lives only as long as that request, in the process that runs
//! it: a store shared by several processes carries the sessions, and the bus carries what
//! belongs to the requests under way.
//!
//! Between the instances of a fleet, a [`bus::Bus`] given to [`ServerBuilder::bus`] carries
//! the server's changes (each instance's legacy sessions and listen streams hear those made on
//! any instance) and the messages of legacy sessions that belong to a request running
//! elsewhere: over HTTP, a session opened on one instance is adopted from the shared store by
//! any other; the client's answer to a question goes to the instance that asked (its id carries
//! the instance number), cancellations, `notifications/initialized` and log levels to all, and
//! the end of a session (DELETE) ends it everywhere. A store that cannot be reached gives 503.
//! Each change is written once per session (by the instance holding its standalone GET, else
//! by the one that opened it). Each instance keeps its own registry, and its own cap on
//! waiting requests.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The modules in the order they import each other: each uses only those below it (the
// runtime, `run`/`context`/`input`, and the handlers' `Context` aside).
#[cfg(feature = "http")]
mod http;
mod transport;

mod context;
mod input;
mod limits;
mod run;

mod server;

mod route;
// (It uses `limits`' busy error too.)
pub mod middleware;

pub mod bus;
pub mod observe;
mod registry;
#[cfg(feature = "http")]
mod scopes;

mod prompt;
mod resource;
mod tool;

mod complete;
mod handler;
mod settings;
mod skills;
pub mod tasks;
mod uri_template;
mod wire;

pub use context::{Context, InputHold, ProgressError, Question, sampling_request};
pub use handler::{MissingState, State};
pub use input::{InputError, NoAnswer};
pub use limits::Limits;
/// The OAuth 2.1 resource server (feature `auth`): `Auth::resource(..).issuer(..).build()?`
/// gives the guard for [`ServerBuilder::auth`].
#[cfg(feature = "auth")]
pub use modelctx_auth as auth;
/// Where legacy SSE events wait for resumption ([`HttpConfig::event_store`]):
/// `modelctx_http::event_store`.
#[cfg(feature = "http")]
#[doc(inline)]
pub use modelctx_http::event_store;
/// The `Host` and `Origin` allow-lists of [`HttpConfig`] (`modelctx_http::security`).
#[cfg(feature = "http")]
#[doc(inline)]
pub use modelctx_http::security::AllowList;
/// The HTTP transport's configuration (`modelctx_http::server::ServerConfig`), for
/// [`Server::http_service`] and [`Server::serve_http`]: security defaults, limits, timeouts.
/// Made with `HttpConfig::default()` and its builder methods
/// (`HttpConfig::default().path(Some("/api/mcp")).max_sessions(100)`).
#[cfg(feature = "http")]
#[doc(inline)]
pub use modelctx_http::server::ServerConfig as HttpConfig;
/// The authentication seam of the HTTP transport (`modelctx_http::server`): a [`Guard`] for
/// [`ServerBuilder::auth`], the [`Grant`] handlers read with [`Context::auth`].
#[cfg(feature = "http")]
#[doc(inline)]
pub use modelctx_http::server::{Challenge, Grant, Guard, Metadata, Principal};
/// Serving over HTTP (`modelctx_http::server`): the server [`Server::serve_http`] starts, how
/// it stops, the service [`Server::http_service`] gives, the peer address it reads, and why a
/// configuration is refused.
#[cfg(feature = "http")]
#[doc(inline)]
pub use modelctx_http::server::{
    ConfigError, McpService, PeerAddr, RequestContext, ResponseBody, RunningServer, Serving,
    ShutdownHandle, TableSizes, shutdown_signal,
};
#[doc(inline)]
pub use modelctx_session::state::{KeyError, StateKey, StateSealer};
#[doc(inline)]
pub use modelctx_session::{Era, ListKind, LogLevel, ProtocolVersion};
/// The version-neutral model of MCP (`modelctx_types::model`): the typed values the API takes
/// and gives (content blocks, tool annotations, icons, ...).
#[doc(inline)]
pub use modelctx_types::model;
/// The JSON-RPC values handlers and transports meet (`modelctx_types`): the error a handler
/// returns ([`ErrorObject`], [`ErrorCode`]), JSON objects (schemas, `_meta`), request ids and
/// progress tokens, and the messages of [`Server::serve_channels`] and [`InMemory`].
#[doc(inline)]
pub use modelctx_types::{
    ErrorCode, ErrorObject, Incoming, JsonObject, Message, ProgressToken, RequestId,
};
pub use prompt::{IntoPromptResult, Prompt, PromptHandler, PromptMessage};
pub use registry::Change;
pub use resource::{
    CacheHint, CacheScope, IntoContents, InvalidTemplate, ReadRequest, Resource, ResourceContents,
    ResourceError, ResourceHandler, ResourceTemplate, Subscribe,
};
pub use run::{
    Frame, InMemoryStore, SessionState, SessionStore, StoreError, StoreErrorKind, StoreFuture,
};
pub use server::{Load, RegisterError, Server, ServerBuilder};
pub use settings::Settings;
pub use skills::{DynamicSkill, SkillsError, SkillsFuture, SkillsLimits, SkillsSource};
pub use tool::{Content, IntoToolOutput, Json, NoArgs, Tool, ToolHandler, ToolOutput};
pub use transport::InMemory;

/// The examples of this crate's `README.md`, compiled (and run) as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "http", feature = "stdio", feature = "schemars"))]
pub struct ReadmeDoctests;
