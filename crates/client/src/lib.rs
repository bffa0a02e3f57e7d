//! The MCP client facade: connect to a server over stdio, Streamable HTTP or any transport, in
//! either protocol era, and call every server feature with typed results.
//!
//! ```no_run
//! use modelctx_client::{Client, ServerCommand};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let server = ServerCommand::new("my-mcp-server");
//!     let client = Client::builder("my-host", "1.0.0").connect_stdio(server).await?;
//!     let tools = client.list_all_tools().await?;
//!     let result = client.call_tool(&tools[0].name, serde_json::json!({})).await?;
//!     println!("{}", result.text());
//!     client.close().await;
//!     Ok(())
//! }
//! ```
//!
//! # What it does
//!
//! * **Connecting**: [`ClientBuilder::connect_stdio`] runs the server as a child process,
//!   [`connect_http`](ClientBuilder::connect_http) talks to a Streamable HTTP endpoint (falling back
//!   to the 2024-11-05 HTTP+SSE transport), [`connect_channels`](ClientBuilder::connect_channels)
//!   and [`connect_lines`](ClientBuilder::connect_lines) take any transport. The era is found by
//!   the session's probe (`server/discover`, then `initialize`) unless pinned with
//!   [`era`](ClientBuilder::era) or [`protocol_version`](ClientBuilder::protocol_version).
//! * **Typed calls** for tools, resources (with subscriptions), prompts, completion, `ping`
//!   (legacy), `server/discover` (modern) and the log level, with `list_all_*` helpers that follow
//!   cursors. Results are decoded with the schema of the version spoken into the version-neutral
//!   [`model`]; a malformed result is [`Error::InvalidResult`].
//! * **Notifications** as a stream ([`Client::notifications`]) or callbacks
//!   ([`ClientBuilder::on_notification`]); progress per call ([`CallOptions::on_progress`]). In the
//!   modern era the client opens `subscriptions/listen` itself and re-opens it when it ends.
//! * **Input for the server**: sampling, elicitation (form and URL modes) and roots handlers serve
//!   a legacy server's requests and a modern server's `input_required` results alike; the modern
//!   multi round-trip loop (retry with a new id, `inputResponses`, `requestState` echoed verbatim)
//!   runs inside each call, for a bounded number of rounds.
//! * **No silent repeats**: a modern `tools/call` whose HTTP response stream breaks is sent
//!   again only for a tool the server listed with `idempotentHint: true`, or when
//!   [`CallOptions::reissue`] allows it; otherwise it fails with [`Error::Transport`].
//! * **Connecting fails with its cause** ([`ConnectError`]): connecting as a whole is bounded
//!   ([`ClientBuilder::connect_timeout`], 60 s by default) and a timeout names the step that got
//!   no answer; a connection that could not be made, or an endpoint that answered 404, is the
//!   transport's own error ([`ConnectError::Unreachable`]).
//! * **Input that is not JSON-RPC** (a stdio server's banner on stdout) is dropped and reported
//!   to the application ([`ServerNotification::Unreadable`]); the connection goes on.
//! * **Timeouts and cancellation**: every call times out (60 s by default, optionally reset by
//!   progress up to a maximum) and is cancelled on the wire as its era defines it (legacy:
//!   `notifications/cancelled`; modern over HTTP: the response stream is closed); dropping a
//!   call's future cancels it the same way. The time an input handler spends answering the
//!   server does not count: it pauses the timeouts of the calls in flight (see
//!   [`ClientBuilder::request_timeout`]).
//! * **Checks on what servers send**: `structuredContent` is validated against the output schema
//!   the server listed for the tool (feature `validation`: a bounded cache of compiled schemas,
//!   no network or file `$ref`, size and depth limits, patterns matched in linear time, large
//!   results checked on a blocking thread); on modern HTTP connections tools with
//!   invalid `x-mcp-header` declarations are left out of `tools/list` (with a warning).
//! * **Standard headers** on modern HTTP connections: a call to a listed tool carries its
//!   `x-mcp-header` arguments as `Mcp-Param-{Name}` headers (the client hands the transport the
//!   tool's rules); a -32020 answer makes the client list the tools again and retry the call
//!   once.
//! * **A wire tap**: [`ClientBuilder::on_wire`] shows every JSON-RPC message sent and received,
//!   as one line of JSON each (what `mcx demo --wire` prints).
//! * **Authorization** (feature `auth`): [`ClientBuilder::auth`] takes any
//!   [`Authorizer`](auth::Authorizer), which gives the credentials of every HTTP request and
//!   decides what to do when the server refuses them (401, 403 `insufficient_scope`). When it
//!   gives up, a call fails with [`Error::Auth`]; the era probe or `initialize` failing so closes
//!   the connection ([`ConnectError::Auth`], [`CloseReason::Unauthorized`]) without falling back
//!   from the probe to `initialize`. [`auth`] re-exports the seam and the OAuth 2.1 client of
//!   modelctx-auth (`OAuth`: discovery, registration, the authorization code flow, refresh,
//!   step-up).
//! * **Skills** (the `io.modelcontextprotocol/skills` extension): [`Client::list_skills`] and
//!   [`Client::get_skill`] fetch entries only; [`Client::load_skill`] and
//!   [`Client::read_skill_file`] read a file when asked and verify it against the entry (listed,
//!   size, `sha256:` digest, `SKILL.md` frontmatter), a mismatch being a [`SkillError`].
//! * **Tasks** (2025-11-25 experimental tasks, and the 2026-07-28 `io.modelcontextprotocol/tasks`
//!   extension): [`Client::call_tool_as_task`] returns a [`TaskHandle`] that polls the task at
//!   the server's interval (bounded), answers its input requests with the same handlers as any
//!   call (2026-07-28: `tasks/update`; 2025-11-25: during `tasks/result`), cancels it and gives
//!   its result, with typed errors ([`TaskError`]); [`ClientBuilder::receive_tasks`] runs a
//!   2025-11-25 server's task-augmented sampling and elicitation requests as tasks of the
//!   client's, in a bounded table whose tasks are freed after their time to live.
//! * **Optional**: a [`ResultCache`] honouring `ttlMs` and `cacheScope`; a [`Reconnect`] policy
//!   that restarts a stdio server that exited and re-initializes an HTTP session the server
//!   ended.
//!
//! # Guides and examples
//!
//! `docs/guide-client.md` in the repository walks through connecting, calling, notifications
//! and the input handlers; `examples/client.rs` runs a server (the server crate's
//! `stdio_server` example by default) and lists and calls its tools: `cargo run -p
//! modelctx-client --example client [-- COMMAND ARGS...]`.
//!
//! # What it does not do
//!
//! It does not authorize by itself: without an authorizer ([`ClientBuilder::auth`]) 401 and 403
//! are plain transport errors, and an authorizer applies to HTTP connections only (stdio
//! servers are authorized by their environment); the OAuth client it re-exports never opens a
//! browser (`modelctx_auth::client` says what it does). For tasks it keeps no durable
//! record of task ids (a host that must resume polling after a restart keeps them and uses
//! [`Client::task`]), listens for no `notifications/tasks` (it polls), and runs no task for a
//! 2026-07-28 server (that era has none in that direction). It does not replay calls lost when
//! a connection ends (they fail with
//! [`Error::Closed`]), and does not decide for the user: sampling and elicitation handlers are
//! the application's, and a missing handler means the capability is not declared. For skills it
//! keeps no registry, no approvals and no cache of skill files: a host holds the entries it
//! loaded and decides what to load; digests prove consistency with the entry, not safety.
//! Its [`middleware`] chain wraps the requests its calls send, not the handshake, the modern
//! listen stream or its answers to the server's requests.
//!
//! # Features
//!
//! * `stdio` (default): [`ClientBuilder::connect_stdio`] and [`ClientBuilder::connect_lines`].
//! * `http` (default): [`ClientBuilder::connect_http`]; `rustls` adds HTTPS.
//! * `validation` (default): `structuredContent` checked against output schemas.
//! * `auth`: [`ClientBuilder::auth`] and the [`auth`] module (pulls in modelctx-auth's client
//!   half; with `rustls`, HTTPS to authorization servers too).
//! * `otel`: the call spans ([`observe`]) as OpenTelemetry spans through `tracing-opentelemetry`,
//!   their W3C trace context put in `params._meta`, the server's requests answered under theirs,
//!   and `mcp.client.operation.duration` on the global meter provider.
#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs name `ClientBuilder::auth` and the `auth` module, which exist with feature `auth`.
#![cfg_attr(not(feature = "auth"), allow(rustdoc::broken_intra_doc_links))]

mod builder;
mod cache;
mod channels;
mod client;
mod driver;
mod error;
mod input;
mod link;
pub mod middleware;
mod notify;
pub mod observe;
mod output;
#[cfg(feature = "http")]
mod params;
mod skills;
#[cfg(feature = "stdio")]
mod stdio;
mod tasks;
mod wire;

pub use builder::ClientBuilder;
pub use cache::ResultCache;
pub use client::{CallOptions, Client, CompletionRef};
pub use driver::{Reconnect, TableSizes};
pub use error::{ConnectError, Error, TransportError};
pub use input::{
    ElicitAction, Elicitation, Elicited, InputError, InputRound, input_key, input_round,
};
pub use link::Direction;
/// The Skills extension's names and wire shapes (`modelctx_types::skills`): [`Skill`](skill_types::Skill)
/// entries, their files, the results of its requests.
#[doc(inline)]
pub use modelctx_types::skills as skill_types;
pub use notify::{LogMessage, Notifications, Progress, RecvError, ServerNotification, Unreadable};
pub use skills::{SkillError, SkillFile};
pub use tasks::{TaskError, TaskHandle, TaskInfo, TaskOptions, TaskReceiving};
/// The tasks' vocabulary: the extension's id, the related-task `_meta` key, statuses.
pub mod task {
    pub use crate::tasks::{EXTENSION_ID, RELATED_TASK, is_terminal, status_str};
    pub use modelctx_types::model::TaskStatus;
}

pub use modelctx_session::{CloseReason, Era, EraChoice, LogLevel, ProtocolVersion, SessionError};
pub use modelctx_types::model;
pub use modelctx_types::{ErrorCode, ErrorObject, JsonObject};

#[cfg(feature = "http")]
pub use modelctx_http::client::ClientConfig as HttpConfig;

/// The Streamable HTTP transport's error, held by [`TransportError::Http`] and
/// [`ConnectError::Unreachable`].
#[cfg(feature = "http")]
pub use modelctx_http::client::TransportError as HttpTransportError;
#[cfg(feature = "stdio")]
pub use modelctx_stdio::ServerCommand;
#[cfg(feature = "stdio")]
pub use modelctx_stdio::StoppedBy;
#[cfg(feature = "stdio")]
pub use stdio::ServerExit;

#[cfg(feature = "auth")]
#[cfg_attr(docsrs, doc(cfg(feature = "auth")))]
pub mod auth {
    //! Authorization of the HTTP transport's requests (feature `auth`).
    //!
    //! The seam of modelctx-http: an [`Authorizer`] gives the credentials of each request and
    //! decides, when the server refuses them, whether to send it again; [`AuthFailure`] is why
    //! it gave up ([`Error::Auth`](crate::Error::Auth),
    //! [`ConnectError::Auth`](crate::ConnectError::Auth)). And the OAuth 2.1 client of
    //! modelctx-auth: [`OAuth`] (an [`Authorizer`]: discovery, client identity, the
    //! authorization code flow through the application's [`AuthorizationHandler`], refresh and
    //! step-up, DPoP-bound tokens, or a grant without a user instead of the code flow), the
    //! challenge parser, its errors ([`OAuthError`]), the token stores ([`TokenStore`],
    //! [`MemoryStore`], [`FileStore`]), DPoP keys and the no-user grants; [`LoopbackRedirect`],
    //! the redirect listener of desktop and command-line applications.

    pub use modelctx_auth::client::{
        ApplicationType, AssertionSource, AuthServer, AuthorizationHandler, AuthorizationRequest,
        CALLBACK_PATH, Challenge, Challenges, ClientRecord, Declined, Discovery, DpopKey,
        DpopPolicy, Error as OAuthError, FileStore, IdJag, LoggedOut, Logout, LoopbackHandler,
        LoopbackRedirect, MemoryStore, OAuth, OAuthBuilder, ProtectedResource, REVOCATION_TIMEOUT,
        Redirect, Registered, Revocation, SigningKey, StoreError, StoreKey, Stored, SubjectToken,
        TokenAuthMethod, TokenRecord, TokenStore, TokenType, Tokens,
    };
    pub use modelctx_auth::{Fetch, FetchError, HttpFetch};
    pub use modelctx_http::client::{
        AuthFailure, AuthFailureKind, Authorizer, BoxFuture, Credentials, MAX_SENDS, Outgoing,
        Reply, Retry,
    };
}

/// The examples of this crate's `README.md`, compiled (and run) as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "stdio"))]
pub struct ReadmeDoctests;
