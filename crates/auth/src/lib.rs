//! OAuth 2.1 for MCP: a resource server, the [`Guard`](modelctx_http::server::Guard) for
//! modelctx-http's Streamable HTTP server (feature `server`, default), and the beginnings of the
//! client half (feature `client`, below).
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
//! - checks DPoP proofs (RFC 9449) and sender-constrained tokens, with optional nonces; a
//!   proof's `jti` is remembered for its window, at most 100 000 of them and 10 000 per key.
//!
//! An issuer's metadata is fetched once, on the first request that needs it (or
//! [`AuthGuard::prefetch`]), on its own task; after a failure requests get 503 for 30 s before
//! it is tried again. The default client trusts the web's root certificates;
//! [`HttpFetch::with_tls`] takes a private certificate authority.
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
//!
//! The client half (feature `client`, module `client`), so far: the `WWW-Authenticate`
//! challenge parser (`client::Challenges`), discovery (`client::OAuth::discover`: the protected
//! resource metadata from the challenge or the well-known URIs, its `resource` checked against
//! the server's URL; the authorization server's metadata with an exact `issuer`, https
//! endpoints and PKCE `S256`; the 2025-03-26 fallbacks), scope choice, the client's identity
//! per authorization server (pre-registered, client ID metadata document, dynamic
//! registration), the token endpoint (`none`, `client_secret_basic`, `client_secret_post`,
//! `private_key_jwt`; refresh) and the authorization code flow (`client::OAuth::authorize`:
//! PKCE `S256`, `state`, RFC 9207 `iss`, an application's `client::AuthorizationHandler`), DPoP
//! proofs (`client::DpopKey`) on token requests with the nonce retry, and the grants without a
//! user (client credentials, JWT bearer, enterprise-managed authorization with an ID-JAG). It
//! does not yet keep tokens or authorize modelctx-http's client requests.
//! Both halves reach authorization servers through the same [`Fetch`]; its
//! [`send`](Fetch::send) makes any request (method, headers such as `DPoP`, form or JSON body).
#![cfg_attr(docsrs, feature(doc_cfg))]
// The crate docs name the resource server's types, which only exist with feature `server`.
#![cfg_attr(not(feature = "server"), allow(rustdoc::broken_intra_doc_links))]

// Shared by the resource server and the client.
#[cfg(any(feature = "server", feature = "client"))]
mod as_metadata;
#[cfg(any(feature = "server", feature = "client"))]
mod canonical;
mod clock;
mod error;
mod fetch;

// The client (feature `client`).
#[cfg(feature = "client")]
#[cfg_attr(docsrs, doc(cfg(feature = "client")))]
pub mod client;

// The resource server (feature `server`).
#[cfg(feature = "server")]
mod claims;
#[cfg(feature = "server")]
mod discovery;
#[cfg(feature = "server")]
mod dpop;
#[cfg(feature = "server")]
mod guard;
#[cfg(feature = "server")]
mod introspect;
#[cfg(feature = "server")]
mod jwks;
#[cfg(feature = "server")]
mod jwt;
#[cfg(feature = "server")]
mod nonce;

// The resource server's public API and its answers.
#[cfg(feature = "server")]
mod challenge;
#[cfg(feature = "server")]
mod config;
#[cfg(feature = "server")]
mod metadata;
#[cfg(feature = "server")]
mod verifier;

pub use clock::{Clock, SystemClock};
pub use error::AuthError;
pub use fetch::{BoxFuture, Fetch, FetchBody, FetchError, FetchRequest, FetchResponse, HttpFetch};

#[cfg(feature = "server")]
pub use config::{Auth, ConfigError, Dpop, Issuer};
#[cfg(feature = "server")]
pub use guard::AuthGuard;
pub use jsonwebtoken::Algorithm;
#[cfg(feature = "server")]
pub use verifier::{StaticToken, TokenVerifier};

/// The examples of this crate's `README.md`, compiled (and run) as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "server"))]
pub struct ReadmeDoctests;
