//! MCP over Streamable HTTP, on hyper.
//!
//! # What it does
//!
//! * `server` (feature `server`, on by default): one MCP endpoint that serves both eras.
//!   Every POST is classified first: a 2026-07-28 request (by `MCP-Protocol-Version` or its
//!   `_meta` version) takes the stateless path, where the transport checks that the headers
//!   agree with the body (-32020) and turns the application's refusals into HTTP errors;
//!   `initialize` opens a legacy session; the rest
//!   follows the legacy session rules (`Mcp-Session-Id`, per-request JSON or SSE, event ids,
//!   resumption with `Last-Event-ID` from a bounded [`event_store`], the standalone GET stream,
//!   DELETE). Status codes are decided before the response head: an answer is JSON when the
//!   response comes first, SSE when something comes before it. Security is on by default:
//!   `Host` and `Origin` allow-lists (loopback names for a loopback bind; a public bind must name
//!   its hosts or the server refuses to start), a 4 MiB body limit, a cap on sessions and an
//!   idle timeout, sessions bound to the authenticated principal. `server::serve` runs it on
//!   its own (any address tokio resolves) until it is stopped: its `RunningServer` is a future
//!   that resolves when the server is down, stopped by a `ShutdownHandle` or, with
//!   `with_graceful_shutdown`, by a signal (`shutdown_signal()`: Ctrl-C or SIGTERM). It counts
//!   what it holds for an application's gauges (`server::Counters`: legacy sessions held, SSE
//!   streams open, as atomics updated where they open and close); the event store tells its
//!   own size (`EventStore::events_held`).
//! * `client` (feature `client`; HTTPS with feature `rustls`): the transport of a client
//!   session, for both eras: session ids and resumption for legacy servers, re-issue of broken
//!   modern requests, reopened listen streams, the `Mcp-*` headers, and the fallback to the
//!   2024-11-05 HTTP+SSE transport.
//! * [`headers`]: the standard `Mcp-*` request headers of 2026-07-28 and the `x-mcp-header`
//!   rules, one checker for the server's validation and the client's requests.
//! * [`event_store`] (feature `server`): where legacy SSE events wait for resumption;
//!   pluggable. `EventStore` is async and fallible (an error says whether the store was
//!   unavailable or failed) and has what a store shared by several server instances needs:
//!   stream ids from a per-instance `stream_base`, the streams' open and finished marks,
//!   `follow` for a stream another instance writes, and the standalone stream's record. The
//!   bounded `MemoryEventStore` serves one process. With feature `testing`,
//!   `event_store::conformance` is the trait's contract as checks any implementation runs.
//!
//! # What it does not do
//!
//! It decides no protocol rule: which request may come when, what answers it, what a modern
//! request's `_meta` must carry, which versions are served, capabilities, timeouts. The application
//! behind the endpoint (the server facade, through `server::McpApp`) runs the protocol session of
//! each legacy HTTP session and of each modern request, and hands the transport its output with the
//! request it belongs to (and the refusals of modern requests, and the version a legacy session
//! negotiated); the transport picks the stream and the HTTP status. It matches no method name
//! outside [`headers`]: which message opens a legacy session and whether a batch may come are
//! asked of the protocol's rule functions in modelctx-types (`opens_session`, `check_batch`,
//! with the version the application reported, the same ones the session applies). It reads no cancellation: the
//! application says which request it will not answer (`server::LegacySession::release`), and
//! the transport says which request lost its client (`server::LegacyHandler::abandoned`) and
//! makes up no message for it. It shares no session state across processes: a session another
//! instance opened is served here only when the application holds its state and adopts it
//! (`server::McpApp::adopt_session`); the transport keeps its own table, caps and idle sweep, and
//! tells the application whether a session ended or was only forgotten here (`server::Closed`;
//! an application that shares its sessions, `server::McpApp::shares_sessions`, has every session
//! only forgotten by the sweep, eviction and shutdown). Requests and messages under way cross no
//! process through the transport: a stream another instance writes is read from the event store
//! (`EventStore::follow`), and what carries messages between instances is the application's.
//! It authenticates nothing itself: a `server::Guard`
//! (`ServerConfig::guard`; `modelctx-auth` implements OAuth 2.1) decides who a request comes
//! from and which scopes it holds, and the transport only places those decisions (the metadata
//! at its well-known paths, authentication before a body is read, scopes before a message runs,
//! credentials removed from what handlers see); without one, an authentication layer in front
//! puts a `server::Principal` in the request's extensions. The HTTP client ([`client`], feature `client`) is a transport too: the
//! client session decides, it carries; a `client::Authorizer` (`ClientConfig::auth`) gives the
//! credentials of each request it sends and decides whether a refusal is sent again.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "server")]
pub mod event_store;
pub mod headers;
#[cfg(feature = "server")]
pub mod security;
#[cfg(feature = "server")]
pub mod server;
#[cfg(any(feature = "client", feature = "server"))]
mod sse;

/// The examples of this crate's `README.md`, compiled (and run) as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
