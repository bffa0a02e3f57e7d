//! An OAuth 2.1 resource server for MCP: a [`Guard`](modelctx_http::server::Guard) for
//! modelctx-http's Streamable HTTP server.
//!
//! What it does, per MCP's authorization pages (2025-03-26 on):
//! - serves the protected resource metadata (RFC 9728) at the path-inserted well-known URI and
//!   at the root, naming the authorization servers;
//! - answers a request without a valid token with 401 and a `WWW-Authenticate` challenge
//!   (RFC 6750, OAuth 2.1 section 5.3), and one without the scopes it needs with 403
//!   `insufficient_scope`; the body is always empty;
//! - validates JWT access tokens (RFC 9068) against the issuer's keys, found from its metadata
//!   (RFC 8414 or OpenID Connect discovery) and cached with rotation; opaque tokens by
//!   introspection (RFC 7662); the audience must be this server (RFC 8707);
//! - checks DPoP proofs (RFC 9449) and sender-constrained tokens, with optional nonces.
//!
//! What it does not do: issue tokens, run an authorization server, or protect stdio servers
//! (the spec leaves stdio to the environment). It never passes a caller's token on: handlers
//! see a [`Grant`](modelctx_http::server::Grant), not the token.

// The modules are wired together by `guard.rs`; until then some crate-private items are unused.
#![allow(dead_code)]

mod claims;
mod clock;
mod dpop;
mod error;
mod fetch;
mod jwt;
mod nonce;

pub use clock::{Clock, SystemClock};
pub use error::AuthError;
pub use fetch::{Fetch, FetchError, FetchResponse};
