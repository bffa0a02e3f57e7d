//! The Model Context Protocol state machine, without I/O: everything the protocol requires of a
//! connection, decided in one place, for every protocol version of both eras.
//!
//! This crate is deterministic. It does no networking, never reads the clock (every input takes
//! `now`), never spawns, and depends on no async runtime. Transports move bytes in and out;
//! facades call handlers; the session decides what is allowed, what is answered and what is sent.
//!
//! # Shape
//!
//! One type per role, [`ServerSession`] and [`ClientSession`], because the two sides share the
//! bookkeeping (ids, pending requests, progress, timeouts, cancellation, batches: a private core)
//! but not their lifecycles: a server answers `initialize` and validates modern `_meta`, a client
//! probes for the era and drives the handshake. Each has the same four groups of methods:
//!
//! | group    | methods                                                                  |
//! |----------|--------------------------------------------------------------------------|
//! | inputs   | `handle_bytes`, `handle_incoming`, `handle_message`, `handle_timeout`    |
//! | commands | `send_request`, `respond`, `respond_error`, `cancel`, `notify_*`, `close` |
//! | outputs  | `poll_transmit`, `poll_event`, `poll_timeout`                            |
//! | getters  | `version`, `peer`, `table_sizes`, ...                                    |
//!
//! # Call order
//!
//! After every input and every command, drain [`poll_transmit`](ServerSession::poll_transmit)
//! (write each [`Transmit`]) and [`poll_event`](ServerSession::poll_event) (act on each
//! [`Event`]) until both return `None`, then (re)arm one timer for
//! [`poll_timeout`](ServerSession::poll_timeout) and call `handle_timeout(now)` when it fires.
//! `handle_timeout` may be called early or spuriously; it does only what is due.
//!
//! # Example
//!
//! A server session answering `initialize` and handing a `tools/call` up, on a clock the caller
//! owns:
//!
//! ```
//! use std::time::Instant;
//! use modelctx_session::{Event, ServerConfig, ServerSession, Transmit};
//!
//! let caps = serde_json::json!({"tools": {}}).as_object().cloned().unwrap();
//! let mut server = ServerSession::new(ServerConfig::new("demo", "1.0.0", caps));
//! let now = Instant::now();
//! server.handle_bytes(now, br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{
//!     "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#);
//! while let Some(Transmit::Message { message, .. }) = server.poll_transmit() {
//!     // write `message` to the transport; here it is the InitializeResult
//!     assert_eq!(message.id().unwrap().to_string(), "1");
//! }
//! server.handle_bytes(now, br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}"#);
//! while let Some(event) = server.poll_event() {
//!     if let Event::Request(request) = event {
//!         let result = serde_json::value::to_raw_value(&serde_json::json!({"content": []})).unwrap();
//!         server.respond(&request.id, result).unwrap();
//!     }
//! }
//! assert!(server.poll_transmit().is_some()); // the tools/call result
//! ```
//!
//! # The two eras
//!
//! * **Legacy** (2024-11-05 to 2025-11-25): `initialize` negotiates a version and capabilities
//!   for the life of the connection. The server answers the client's version when it serves it,
//!   else its newest initialize-based version; requests are served before
//!   `notifications/initialized` (separate HTTP POSTs may overtake each other), but the server's
//!   own requests other than `ping` wait for it.
//! * **Modern** (2026-07-28): each request carries its version and client capabilities in
//!   `_meta`. A [`ServerSession`] serves both on one connection: `initialize` selects legacy
//!   semantics, a request whose `_meta` names a modern version selects modern semantics. A
//!   modern request that comes on its own (a Streamable HTTP POST) gets a session of its own,
//!   [`ServerSession::for_request`]: its `_meta` must name a served modern version, and what the
//!   protocol rules refuse comes out as [`Transmit::Refusal`], which an HTTP transport answers
//!   with an HTTP error status. The session owns these rules; transports check only that their
//!   headers agree with the body.
//! * A [`ClientSession`] finds the era by probing with `server/discover` and falls back to
//!   `initialize` on anything but a usable answer (see [`EraChoice`]).
//!
//! # Cancellation
//!
//! Cancellation is abstract, in both directions and both eras. Our request cancelled comes out
//! as [`Transmit::Cancel`] with the request's era: the transport writes its
//! `notifications/cancelled` (legacy, and modern over stdio) or closes the request's stream
//! (modern over HTTP). A request that timed out is cancelled the same way and fails locally with
//! [`RequestError::Timeout`], never a wire error. The peer's request cancelled (its
//! `notifications/cancelled`, or [`ServerSession::stream_closed`] when the transport lost its
//! stream or its POST) comes out as [`Event::Cancelled`], in both eras: the layer above stops the
//! handler and tells a transport that waits for the answer to let it go.
//!
//! # Batches
//!
//! [`check_batch`] (re-exported from modelctx-types, where it is written) is the one statement of the batch rules (2025-03-26 only, never with
//! `initialize`): a session refuses a batch it reads by it, and a transport that must answer a
//! batch before the session reads it asks it first. [`opens_session`] says which message opens
//! a legacy session, for a transport that keeps sessions of its own.
//!
//! # Bounds
//!
//! Every table is bounded ([`Limits`]) and returns to empty when its work ends;
//! [`ServerSession::table_sizes`] shows them. Ids of requests no longer in flight are not
//! remembered (except cancelled ones, for a grace period, so their late answers are ignored
//! quietly): a request that reuses the id of one *in flight* is refused with -32600, but an id
//! reused after its request ended is accepted, since remembering every id would make a table that
//! never shrinks.
//!
//! # What this crate does not do
//!
//! It does no I/O (it is handed decoded messages, or the bytes of an unreadable line to answer,
//! and hands back what to send), does not frame messages, speak HTTP, call handlers, decode typed
//! params or results (that is the facades' job, with `modelctx-types`), validate tool arguments
//! against schemas, or store anything across connections: a legacy session resumed from stored
//! state ([`ServerSession::resume`]) is given what it negotiated by the layer above, which keeps
//! it; caching a client's era decision or sharing `requestState` keys across processes is for
//! the layer above too (see [`state`]).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod caps;
mod client;
mod config;
mod core;
mod event;
mod meta;
mod server;
mod version;

pub use caps::client_can_answer;
pub use client::{ClientSession, EraDecision};
pub use config::{
    CacheHint, CacheScope, ClientConfig, EraChoice, Limits, RequestOptions, ServerConfig,
};
pub use core::{TableSizes, cancelled_request};
pub use event::{
    CloseReason, Event, IncomingRequest, LogLevel, PeerInfo, RequestError, RequestMeta,
    SessionError, Transmit,
};
pub use meta::{RELATED_REQUEST_ID, check_modern_meta, missing_capability_error};
pub use modelctx_types::{BatchRefused, check_batch, opens_session};
pub use server::{ListKind, Resume, ServerSession};
pub use version::{Era, ProtocolVersion};

pub mod state;

/// The examples of this crate's `README.md`, compiled (and run) as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
