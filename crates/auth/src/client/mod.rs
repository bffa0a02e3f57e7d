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
//! - [`OAuth::authorize`] runs the authorization code flow for a [`Discovery`]: the client's
//!   identity at the authorization server in the spec's order (a [`Registered`] client for that
//!   issuer, or an unbound one, then bound to the first issuer it is used with and never shown to
//!   another; the [`client_metadata_url`](OAuthBuilder::client_metadata_url) when the server
//!   advertises `client_id_metadata_document_supported`; dynamic registration (RFC 7591) with
//!   `application_type` and without `scope`, its answer's method obeyed, kept per issuer; else
//!   [`Error::NoClientIdentity`]); a PKCE `S256` verifier and a `state`; the authorization URL
//!   with `resource`, shown by the application's [`AuthorizationHandler`] (the library never
//!   opens a browser), which returns the [`Redirect`] or [`Declined`]; the redirect checked in
//!   this order: `state`, RFC 9207 `iss` (byte for byte, required when advertised, compared
//!   whenever present; a mismatching response's `error` is not shown), `error`, `code`; then the
//!   code exchange. The whole flow is bounded by
//!   [`flow_timeout`](OAuthBuilder::flow_timeout) (default 10 minutes).
//! - The token endpoint: `none`, `client_secret_basic` (RFC 6749 section 2.3.1 encoding),
//!   `client_secret_post` and `private_key_jwt` (a [`SigningKey`]: PKCS#8 P-256, P-384 or
//!   Ed25519; RSA refused), `resource` on every request; answers checked ([`Tokens`]: a printable
//!   token of at most 16 KiB, `Bearer` or `DPoP`); [`OAuth::refresh`].
//! - DPoP (RFC 9449): a [`DpopKey`] ([`OAuthBuilder::dpop`]; generated, or read from PKCS#8 PEM)
//!   proves possession on every token request (the code exchange, refresh and the grants below),
//!   with the token endpoint's latest nonce ([`DpopNonces`], per origin) and one retry on a
//!   400 `use_dpop_nonce`; an authorization server whose `dpop_signing_alg_values_supported`
//!   lacks ES256 is [`Error::DpopUnsupported`] unless [`DpopPolicy::Prefer`].
//!   [`OAuth::dpop_proof`] makes the proofs of requests to a resource server.
//! - The grants without a user, each one token request whose refusal is returned at once
//!   (never retried, never followed by another grant), with a pre-registered client only:
//!   [`OAuth::client_credentials`], [`OAuth::jwt_bearer`] (an [`AssertionSource`]) and
//!   [`OAuth::enterprise`] (an [`IdJag`]: an RFC 8693 token exchange at the identity provider
//!   for an ID-JAG, then the JWT bearer grant at the authorization server); run by
//!   [`OAuth::grant_token`]. Their discovery requires a token endpoint and the grant in
//!   `grant_types_supported` when it is listed, not PKCE.
//!
//! - `OAuth` is modelctx-http's [`Authorizer`](modelctx_http::client::Authorizer)
//!   (`ClientConfig::auth(Arc::new(oauth))`): `Authorization: Bearer` on every request, the
//!   token refreshed first when it expires within 30 s (or a tenth of its lifetime); a 401
//!   without a token runs discovery and the flow with the [`handler`](OAuthBuilder::handler); a
//!   401 to a token re-reads the protected resource metadata (a new authorization server: the
//!   resource's tokens are dropped and the client registers there anew), then refreshes once,
//!   runs the flow once after `invalid_grant`, and gives [`Error::Rejected`] when a fresh token is
//!   refused; a 403 `insufficient_scope` steps up with the union of the scopes, at most
//!   [`max_step_ups`](OAuthBuilder::max_step_ups) times per request and never for scopes already
//!   asked for; a `DPoP` `use_dpop_nonce` 401 keeps the nonce ([`OAuth::dpop_nonce`]) and sends
//!   again once (with a new proof); a 401 of another scheme is not its business. Concurrent refusals of one token
//!   run one flow. Requests that may not involve the user (the closing `DELETE`) only refresh
//!   ([`Error::InteractionRequired`]). [`OAuth::authorize_now`] authorizes before any request.
//!   Tokens and dynamic registrations go to the [`store`](OAuthBuilder::store) (a
//!   [`MemoryStore`] by default): a later client on the same store sends a stored token covering
//!   its URL at once and registers no second time; tokens are removed from it when the server
//!   moves to another authorization server; an `invalid_grant` first looks there for tokens
//!   another process got.
//!
//! - With a grant without a user configured ([`OAuth::client_credentials`],
//!   [`OAuth::jwt_bearer`], [`OAuth::enterprise`]) the authorizer runs that grant instead of the
//!   authorization code flow, for every request (the closing `DELETE` included), and runs it
//!   again when the token nears its expiry or is refused (once per request; a refusal of the
//!   grant itself fails the request, never retried). With a [`DpopKey`], a token the
//!   authorization server bound to it (`token_type` `DPoP`) is presented as
//!   `Authorization: DPoP <token>` with a fresh proof in `DPoP` on every send (`ath`, and the
//!   server's latest nonce); a `Bearer` token stays `Bearer`.
//!
//! - [`OAuth::logout`] (every resource) and [`OAuth::logout_of`] (one server's): the refresh
//!   token then the access token revoked at the authorization server's `revocation_endpoint`
//!   (RFC 7009, the client's token endpoint authentication, at most [`REVOCATION_TIMEOUT`]
//!   each, best effort), then forgotten in memory and in the store whatever it answered; a
//!   [`Logout`] says per token what happened ([`Revocation`]). DPoP-bound tokens are kept with
//!   the key they are bound to ([`TokenRecord::dpop_key`]), so a restarted client proves them
//!   (and refreshes them) with that key, whatever its own key now is.
//!
//! What it does not do yet: two concurrent flows for two resources of one authorization
//! server may both register a client.
//! DPoP proofs are ES256 only; a SAML subject token is passed as given.
//! Redirect URIs must be https or http on a loopback host (checked by
//! [`build`](OAuthBuilder::build)). Every request to a server goes through the [`Fetch`] of
//! [`OAuthBuilder::fetch`]: https (or http to loopback), 5 s per exchange, 256 KiB bodies, no
//! redirects followed. `Debug` output never shows a secret, key, token, code or verifier.

mod asmeta;
mod challenge;
mod dpop;
mod error;
mod flow;
mod grants;
mod handler;
mod jwt;
mod loopback;
mod pkce;
mod prm;
mod registration;
mod revoke;
mod scopes;
mod session;
mod store;
mod token;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use asmeta::AuthServer;
pub use challenge::{Challenge, Challenges};
pub use dpop::{DpopKey, DpopNonces, DpopPolicy};
pub use error::Error;
pub use grants::{
    AssertionSource, GrantKind, ID_TOKEN_TYPE, IdJag, SAML2_TOKEN_TYPE, SourceError, Subject,
    SubjectToken,
};
pub use handler::{AuthorizationHandler, AuthorizationRequest, Declined, Redirect};
pub use jwt::SigningKey;
pub use loopback::{CALLBACK_PATH, LoopbackHandler, LoopbackRedirect, MAX_HEAD};
pub use prm::ProtectedResource;
pub use registration::{ApplicationType, Registered, TokenAuthMethod};
pub use revoke::{LoggedOut, Logout, REVOCATION_TIMEOUT, Revocation};
pub use session::DEFAULT_MAX_STEP_UPS;
pub use store::{
    ClientRecord, FileStore, MAX_FILE_SIZE, MemoryStore, StoreError, StoreKey, Stored, TokenRecord,
    TokenStore,
};
pub use token::{TokenType, Tokens};

use crate::fetch::{Fetch, HttpFetch};
use prm::ServerUrl;
use registration::ClientIdentity;

/// The default bound on one authorization flow: 10 minutes (the user is in a browser).
pub const DEFAULT_FLOW_TIMEOUT: Duration = Duration::from_secs(600);

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
    /// Pre-registered clients; an unbound one gets its issuer on first use.
    registered: Mutex<Vec<Registered>>,
    client_metadata_url: Option<String>,
    client_name: Option<String>,
    redirect_uris: Vec<String>,
    application_type: Option<ApplicationType>,
    /// Clients registered dynamically, by issuer.
    dynamic: Mutex<HashMap<String, ClientIdentity>>,
    flow_timeout: Duration,
    /// The extension grant, DPoP key and nonces (`grants.rs`).
    extensions: grants::Extensions,
    // The authorizer's settings and state (session.rs).
    handler: Option<Arc<dyn AuthorizationHandler>>,
    max_step_ups: u32,
    store: Arc<dyn TokenStore>,
    session: session::Session,
}

impl fmt::Debug for OAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuth")
            .field("fetch", &self.inner.fetch)
            .field("offline_access", &self.inner.offline_access)
            .field("registered", &self.inner.registered)
            .field("client_metadata_url", &self.inner.client_metadata_url)
            .field("redirect_uris", &self.inner.redirect_uris)
            .field("flow_timeout", &self.inner.flow_timeout)
            .field("extensions", &self.inner.extensions)
            .field("handler", &self.inner.handler)
            .field("max_step_ups", &self.inner.max_step_ups)
            .field("store", &self.inner.store)
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
    registered: Vec<Registered>,
    client_metadata_url: Option<String>,
    client_name: Option<String>,
    redirect_uris: Vec<String>,
    application_type: Option<ApplicationType>,
    flow_timeout: Duration,
    extensions: grants::Extensions,
    // The authorizer's settings (session.rs).
    handler: Option<Arc<dyn AuthorizationHandler>>,
    max_step_ups: u32,
    store: Option<Arc<dyn TokenStore>>,
}

impl OAuth {
    /// The settings, with their defaults: the [`HttpFetch`] client (5 s per exchange),
    /// `offline_access` asked for when the authorization server offers it, no pre-registered
    /// client, no client ID metadata document, no redirect URI, no `client_name`, the
    /// `application_type` from the redirect URIs, a 10-minute flow timeout.
    pub fn builder() -> OAuthBuilder {
        OAuthBuilder {
            fetch: None,
            as_timeout: None,
            offline_access: true,
            registered: Vec::new(),
            client_metadata_url: None,
            client_name: None,
            redirect_uris: Vec::new(),
            application_type: None,
            flow_timeout: DEFAULT_FLOW_TIMEOUT,
            extensions: grants::Extensions::default(),
            handler: None,
            max_step_ups: DEFAULT_MAX_STEP_UPS,
            store: None,
        }
    }

    /// [`builder`](OAuth::builder) with `handler` for the authorization code flow: the
    /// settings of an application whose user signs in.
    pub fn authorization_code(handler: Arc<dyn AuthorizationHandler>) -> OAuthBuilder {
        OAuth::builder().handler(handler)
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
    /// The authorization server must allow the client's grant: the authorization code flow
    /// with PKCE `S256` ([`Error::PkceUnsupported`]), or for the grants without a user a token
    /// endpoint and the grant when it lists `grant_types_supported`
    /// ([`Error::GrantUnsupported`]). Its metadata is kept per issuer for the life of the client;
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
            self.check_grant(&auth_server)?;
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
                Ok(found) => self.check_grant(&found).map(|()| found),
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

    /// A client registered beforehand with an authorization server (or, unbound, with the
    /// first one it meets): used there before any other identity. May be given several times
    /// (one per server); the first that matches is used.
    pub fn client(mut self, client: Registered) -> OAuthBuilder {
        self.registered.push(client);
        self
    }

    /// The URL of the client's ID metadata document (CIMD): used as the `client_id` at an
    /// authorization server that says `client_id_metadata_document_supported`, before dynamic
    /// registration. The document is the application's to host. Must be `https` with a path.
    /// Default: none.
    pub fn client_metadata_url(mut self, url: impl Into<String>) -> OAuthBuilder {
        self.client_metadata_url = Some(url.into());
        self
    }

    /// The `client_name` of a dynamic registration. Default: none sent.
    pub fn client_name(mut self, name: impl Into<String>) -> OAuthBuilder {
        self.client_name = Some(name.into());
        self
    }

    /// Adds a redirect URI: `https`, or `http` on a loopback host (`127.0.0.1`, `[::1]`,
    /// `localhost`), without a fragment (checked by [`build`](OAuthBuilder::build)). The first
    /// one is used in authorization requests; all are registered. Default: none (the
    /// authorization code flow then fails with [`Error::InvalidSetting`]).
    pub fn redirect_uri(mut self, uri: impl Into<String>) -> OAuthBuilder {
        self.redirect_uris.push(uri.into());
        self
    }

    /// The `application_type` of a dynamic registration. Default: `native` when every
    /// redirect URI is on loopback, else `web`.
    pub fn application_type(mut self, application_type: ApplicationType) -> OAuthBuilder {
        self.application_type = Some(application_type);
        self
    }

    /// The bound on one authorization flow: registration, the handler and the code exchange.
    /// Default: 10 minutes ([`DEFAULT_FLOW_TIMEOUT`]).
    pub fn flow_timeout(mut self, timeout: Duration) -> OAuthBuilder {
        self.flow_timeout = timeout;
        self
    }

    // The authorizer's settings (session.rs).

    /// The application's part of the authorization code flow when the client authorizes on
    /// its own (as the HTTP client's [`Authorizer`](modelctx_http::client::Authorizer), or in
    /// [`OAuth::authorize_now`]): shows the user the URL, returns the redirect. Default: none
    /// (a server that asks for authorization then fails the request with
    /// [`Error::InvalidSetting`]).
    pub fn handler(mut self, handler: Arc<dyn AuthorizationHandler>) -> OAuthBuilder {
        self.handler = Some(handler);
        self
    }

    /// How many times one request may step up its scopes after a 403 `insufficient_scope`
    /// before it fails with [`Error::InsufficientScope`] (a step-up is never made for scopes
    /// already asked for). Default: 2 ([`DEFAULT_MAX_STEP_UPS`]).
    pub fn max_step_ups(mut self, max: u32) -> OAuthBuilder {
        self.max_step_ups = max;
        self
    }

    /// Where the client keeps its tokens (per issuer and resource) and its dynamic
    /// registrations (per issuer): saved when got, loaded when a request's URL has none in
    /// memory yet. Default: a [`MemoryStore`] of its own (nothing outlives the process).
    pub fn store(mut self, store: Arc<dyn TokenStore>) -> OAuthBuilder {
        self.store = Some(store);
        self
    }

    /// The client, once its settings are checked: redirect URIs (https, or http on loopback),
    /// the client ID metadata document URL (https with a path), pre-registered clients (a
    /// forced method with the credentials it needs); else [`Error::InvalidSetting`].
    pub fn build(self) -> Result<OAuth, Error> {
        for uri in &self.redirect_uris {
            registration::check_redirect_uri(uri)?;
        }
        if let Some(url) = &self.client_metadata_url {
            registration::check_metadata_url(url)?;
        }
        for client in &self.registered {
            client.check()?;
        }
        self.extensions.check()?;
        let fetch = match (self.fetch, self.as_timeout) {
            (Some(fetch), _) => fetch,
            (None, Some(timeout)) => Arc::new(HttpFetch::new().with_timeout(timeout)),
            (None, None) => Arc::new(HttpFetch::new()),
        };
        Ok(OAuth {
            inner: Arc::new(Inner {
                fetch,
                offline_access: self.offline_access,
                servers: Mutex::default(),
                registered: Mutex::new(self.registered),
                client_metadata_url: self.client_metadata_url,
                client_name: self.client_name,
                redirect_uris: self.redirect_uris,
                application_type: self.application_type,
                dynamic: Mutex::default(),
                flow_timeout: self.flow_timeout,
                extensions: self.extensions,
                handler: self.handler,
                max_step_ups: self.max_step_ups,
                store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
                session: session::Session::default(),
            }),
        })
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
