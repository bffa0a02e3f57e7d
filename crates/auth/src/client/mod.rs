//! The OAuth 2.1 client half (feature `client`), for MCP clients of protected servers.
//!
//! What it does so far: discovery, as MCP's authorization pages (2025-03-26 to 2026-07-28) and
//! the official conformance suite check it, and the pieces the flows build on:
//! - [`Challenges`] reads every `WWW-Authenticate` challenge of a response (`Bearer` and `DPoP`:
//!   `resource_metadata`, `scope`, `error`, `algs`), robust to quoting, case and garbage;
//! - [`OAuth::discover`] finds the protected resource metadata (RFC 9728) at the challenge's
//!   `resource_metadata`, else the path-inserted well-known URI, else the root one; checks that
//!   its `resource` is the server's URL or a parent of it on the same origin (else
//!   [`Error::ResourceMismatch`], before any authorization server is asked) and keeps it verbatim
//!   for RFC 8707; then the authorization server's metadata (RFC 8414 path-inserted, OpenID
//!   Connect path-inserted, OpenID Connect appended) with its `issuer` compared byte for byte,
//!   endpoints on https (or http to loopback) and PKCE `S256` required; and for a server without
//!   protected resource metadata, the 2025-03-26 rules (the server's origin is the authorization
//!   server; its metadata, else `/authorize`, `/token`, `/register` there);
//! - [`Discovery::scopes`] chooses the scopes (the challenge's, else the resource's
//!   `scopes_supported`, else none; `offline_access` only when the authorization server offers
//!   it) and [`Discovery::step_up`] the union for a 403 `insufficient_scope`;
//! - [`TokenStore`] keeps registrations per issuer and tokens per issuer and resource:
//!   [`MemoryStore`] for the process, [`FileStore`] on disk (one JSON file per issuer, `0600`
//!   in a `0700` directory, written atomically; files open to others refused).
//!
//! What it does not do yet: register a client, run the authorization code flow or another
//! grant, or put tokens on the HTTP client's requests. Every request to a server goes
//! through the [`Fetch`] of [`OAuthBuilder::fetch`]: https (or http to loopback),
//! 5 s per exchange, 256 KiB bodies, no redirects followed.

mod asmeta;
mod challenge;
mod error;
mod prm;
mod scopes;
mod store;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use asmeta::AuthServer;
pub use challenge::{Challenge, Challenges};
pub use error::Error;
pub use prm::ProtectedResource;
pub use store::{
    ClientRecord, FileStore, MAX_FILE_SIZE, MemoryStore, StoreError, StoreKey, Stored, TokenRecord,
    TokenStore,
};

use crate::fetch::{Fetch, HttpFetch};
use prm::ServerUrl;

/// The OAuth 2.1 client of one application: its settings and what it has learnt (the
/// authorization servers' metadata, per issuer). A clone shares both.
#[derive(Clone)]
pub struct OAuth {
    inner: Arc<Inner>,
}

struct Inner {
    fetch: Arc<dyn Fetch>,
    offline_access: bool,
    /// Authorization server metadata by issuer, kept for the life of the client (protected
    /// resource metadata is never kept: a server may move to another authorization server).
    servers: Mutex<HashMap<String, Arc<AuthServer>>>,
}

impl fmt::Debug for OAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuth")
            .field("fetch", &self.inner.fetch)
            .field("offline_access", &self.inner.offline_access)
            .finish_non_exhaustive()
    }
}

/// The settings of an [`OAuth`] client, from [`OAuth::builder`].
#[derive(Debug)]
#[non_exhaustive]
pub struct OAuthBuilder {
    fetch: Option<Arc<dyn Fetch>>,
    as_timeout: Option<Duration>,
    offline_access: bool,
}

impl OAuth {
    /// The settings, with their defaults: the [`HttpFetch`] client (5 s per exchange),
    /// `offline_access` asked for when the authorization server offers it.
    pub fn builder() -> OAuthBuilder {
        OAuthBuilder {
            fetch: None,
            as_timeout: None,
            offline_access: true,
        }
    }

    /// Discovers how to get a token for the MCP server at `server_url`, given the challenges of
    /// its refusal (empty when there is none yet):
    /// 1. the protected resource metadata, from `challenges`' `resource_metadata`, else the
    ///    well-known URIs; its `resource` must be `server_url` or a parent of it on the same
    ///    origin ([`Error::ResourceMismatch`]);
    /// 2. the first of its `authorization_servers` whose metadata is usable, in order (when none
    ///    is, the first one's error);
    /// 3. with no protected resource metadata at all: the server's origin as the authorization
    ///    server, its metadata or else the 2025-03-26 default endpoints.
    ///
    /// The authorization server must allow the authorization code flow with PKCE `S256`
    /// ([`Error::PkceUnsupported`]). Its metadata is kept per issuer for the life of the client;
    /// the protected resource metadata is fetched every time.
    pub async fn discover(
        &self,
        server_url: &str,
        challenges: &Challenges,
    ) -> Result<Discovery, Error> {
        let server = ServerUrl::parse(server_url)?;
        let fetch = self.inner.fetch.as_ref();
        let Some(protected) = prm::discover(fetch, &server, challenges.resource_metadata()).await?
        else {
            let origin = server.origin_as_given();
            let auth_server = match self.auth_server(origin).await {
                Ok(found) => found,
                Err(Error::NoMetadata { .. }) => {
                    tracing::debug!(%origin, "no metadata: the 2025-03-26 default endpoints");
                    Arc::new(AuthServer::legacy_defaults(origin))
                }
                Err(e) => return Err(e),
            };
            auth_server.check_authorization_code()?;
            return Ok(Discovery {
                resource: server.legacy_resource(),
                protected_resource: None,
                auth_server,
                challenge_scopes: challenges.scopes(),
                offline_access: self.inner.offline_access,
            });
        };
        let mut first_error = None;
        for issuer in &protected.authorization_servers {
            let found = match self.auth_server(issuer).await {
                Ok(found) => found.check_authorization_code().map(|()| found),
                Err(e) => Err(e),
            };
            match found {
                Ok(auth_server) => {
                    return Ok(Discovery {
                        resource: protected.resource.clone(),
                        challenge_scopes: challenges.scopes(),
                        offline_access: self.inner.offline_access,
                        protected_resource: Some(protected),
                        auth_server,
                    });
                }
                Err(e) => {
                    tracing::debug!(%issuer, error = %e, "authorization server not usable");
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.expect("authorization_servers is never empty"))
    }

    /// The metadata of `issuer`: kept, or discovered and kept.
    async fn auth_server(&self, issuer: &str) -> Result<Arc<AuthServer>, Error> {
        if let Some(known) = self.inner.servers.lock().expect("not poisoned").get(issuer) {
            return Ok(known.clone());
        }
        let found = Arc::new(asmeta::discover(self.inner.fetch.as_ref(), issuer).await?);
        self.inner
            .servers
            .lock()
            .expect("not poisoned")
            .insert(issuer.to_owned(), found.clone());
        Ok(found)
    }
}

impl OAuthBuilder {
    /// The HTTP client for every request to the resource's metadata and to authorization
    /// servers. Default: [`HttpFetch`] (https, or http to loopback; 5 s per exchange; 256 KiB
    /// bodies; no redirects). Replaces an [`as_timeout`](OAuthBuilder::as_timeout).
    pub fn fetch(mut self, fetch: Arc<dyn Fetch>) -> OAuthBuilder {
        self.fetch = Some(fetch);
        self.as_timeout = None;
        self
    }

    /// The default [`HttpFetch`] with another bound on each exchange (default 5 s). Replaces a
    /// [`fetch`](OAuthBuilder::fetch).
    pub fn as_timeout(mut self, timeout: Duration) -> OAuthBuilder {
        self.as_timeout = Some(timeout);
        self.fetch = None;
        self
    }

    /// Whether to ask for `offline_access` (a refresh token) when the authorization server lists
    /// it in `scopes_supported` and other scopes are asked for. Default: true.
    pub fn offline_access(mut self, on: bool) -> OAuthBuilder {
        self.offline_access = on;
        self
    }

    /// The client.
    pub fn build(self) -> OAuth {
        let fetch = match (self.fetch, self.as_timeout) {
            (Some(fetch), _) => fetch,
            (None, Some(timeout)) => Arc::new(HttpFetch::new().with_timeout(timeout)),
            (None, None) => Arc::new(HttpFetch::new()),
        };
        OAuth {
            inner: Arc::new(Inner {
                fetch,
                offline_access: self.offline_access,
                servers: Mutex::default(),
            }),
        }
    }
}

/// What [`OAuth::discover`] found: the resource to ask a token for and the authorization
/// server to ask.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Discovery {
    /// The RFC 8707 `resource` of every authorization and token request: the protected resource
    /// metadata's `resource` exactly as published, or (2025-03-26) the server's URL without a
    /// fragment.
    pub resource: String,
    /// The protected resource metadata; `None`: the server has none (2025-03-26 rules).
    pub protected_resource: Option<ProtectedResource>,
    /// The authorization server.
    pub auth_server: Arc<AuthServer>,
    challenge_scopes: Vec<String>,
    offline_access: bool,
}

impl Discovery {
    /// The scopes of the authorization request: the challenge's `scope` when it names any,
    /// else the protected resource metadata's `scopes_supported`, else none (the request then
    /// has no `scope`); plus `offline_access` when the authorization server lists it, the
    /// client asks for it ([`OAuthBuilder::offline_access`]) and another scope was chosen.
    pub fn scopes(&self) -> Vec<String> {
        scopes::choose(
            &self.challenge_scopes,
            self.protected_resource
                .as_ref()
                .and_then(|p| p.scopes_supported.as_deref()),
            self.auth_server.scopes_supported.as_deref(),
            self.offline_access,
        )
    }

    /// The scopes of a step-up after a 403 whose `challenges` say `insufficient_scope`: those
    /// `requested` for the current token plus those the challenge requires. When it requires
    /// nothing new, [`Error::InsufficientScope`]: asking again would not help.
    pub fn step_up(
        &self,
        requested: &[String],
        challenges: &Challenges,
    ) -> Result<Vec<String>, Error> {
        scopes::step_up(requested, &challenges.scopes())
    }
}

#[cfg(test)]
mod tests;
