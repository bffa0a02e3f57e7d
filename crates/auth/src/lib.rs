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
//!
//! ```
//! use modelctx_auth::Auth;
//!
//! let auth = Auth::resource("https://mcp.example.com/mcp")
//!     .issuer("https://id.example.com")
//!     .scopes_supported(["mcp"])
//!     .build()?;
//! assert_eq!(auth.well_known_paths()[0], "/.well-known/oauth-protected-resource/mcp");
//! # Ok::<(), modelctx_auth::ConfigError>(())
//! ```
//!
//! [`Auth::build`] checks the configuration and returns the [`AuthGuard`]; other schemes
//! (API keys, one static secret) plug in as a [`TokenVerifier`] such as [`StaticToken`].
//!
//! More it does not do: accept tokens in a query string or a form body (only the
//! `Authorization` header, `bearer_methods_supported: ["header"]`); accept tokens signed with a
//! shared secret (HMAC) or unsigned; normalise a resource URI beyond lower-casing scheme and
//! host, dropping a default port and one trailing slash (no percent-encoding or dot-segment
//! normalisation); say in a refusal which check a token failed (only the OAuth error code).

mod claims;
mod clock;
mod discovery;
mod dpop;
mod error;
mod fetch;
mod guard;
mod introspect;
mod jwks;
mod jwt;
mod nonce;

// The public API and the response side.
mod canonical;
mod challenge;
mod config;
mod metadata;
mod verifier;

pub use clock::{Clock, SystemClock};
pub use error::AuthError;
pub use fetch::{Fetch, FetchError, FetchResponse, HttpFetch};

pub use config::{Auth, ConfigError, Dpop, Issuer};
pub use guard::AuthGuard;
pub use jsonwebtoken::Algorithm;
pub use verifier::{StaticToken, TokenVerifier};
