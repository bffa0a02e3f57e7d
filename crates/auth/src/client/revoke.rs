//! Logging out: the tokens revoked at the authorization server (RFC 7009) as far as it lets the
//! client, then forgotten, in memory and in the [`TokenStore`](super::TokenStore).
//!
//! For each resource's tokens: the refresh token first (revoking it ends the grant at most
//! servers, so a stolen copy of it is dead), then the access token, each a form `POST` of
//! `token` and `token_type_hint` to the authorization server's `revocation_endpoint` with the
//! client's authentication there (the one of its token requests: `none`, `client_secret_basic`,
//! `client_secret_post`, `private_key_jwt`), bounded by [`REVOCATION_TIMEOUT`]. Revocation is
//! best effort: whatever the server answers (or does not), the tokens are forgotten afterwards,
//! and [`Logout`] says for each token what happened.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::asmeta::AuthServer;
use super::error::remote_text;
use super::prm::ServerUrl;
use super::registration::ClientIdentity;
use super::token::authenticate;
use super::{Error, OAuth, StoreKey, Stored};
use crate::fetch::{FetchError, FetchRequest};

/// The bound on one revocation request: 5 s (less when the client's
/// [`Fetch`](crate::fetch::Fetch) gives an exchange less).
pub const REVOCATION_TIMEOUT: Duration = Duration::from_secs(5);

/// What [`OAuth::logout`] and [`OAuth::logout_of`] did: one entry per set of tokens forgotten
/// (an authorization server and a resource).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Logout {
    /// The tokens forgotten, by issuer then resource.
    pub tokens: Vec<LoggedOut>,
}

impl Logout {
    /// Whether the authorization server confirmed the revocation of at least one token.
    pub fn revoked_any(&self) -> bool {
        self.tokens.iter().any(LoggedOut::revoked_any)
    }
}

/// The tokens of one resource, forgotten, and what their authorization server said to their
/// revocation.
#[derive(Debug)]
#[non_exhaustive]
pub struct LoggedOut {
    /// The authorization server that issued them.
    pub issuer: String,
    /// The resource (RFC 8707) they were for.
    pub resource: String,
    /// The refresh token's revocation (asked first).
    pub refresh_token: Revocation,
    /// The access token's revocation.
    pub access_token: Revocation,
}

impl LoggedOut {
    /// Whether the authorization server confirmed the revocation of either token.
    pub fn revoked_any(&self) -> bool {
        self.refresh_token.is_revoked() || self.access_token.is_revoked()
    }
}

/// What happened to one token at logout. It is forgotten in every case.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Revocation {
    /// The revocation endpoint answered 200: the token is revoked (RFC 7009 section 2.2; a
    /// server answers so for a token it did not know as well).
    Revoked,
    /// There was no such token (no refresh token was issued): nothing to revoke.
    NoToken,
    /// The authorization server has no `revocation_endpoint` in its metadata (or publishes no
    /// metadata): nothing was revoked, the token stays valid there until it expires.
    NotOffered,
    /// Revocation was tried and failed: the endpoint refused ([`Error::RevocationRefused`]),
    /// did not answer within [`REVOCATION_TIMEOUT`] or could not be reached
    /// ([`Error::Unreachable`]), the authorization server's metadata could not be read, or the
    /// client has no identity there to authenticate with ([`Error::NoClientIdentity`]). The
    /// token may still be valid there.
    Failed(Arc<Error>),
}

impl Revocation {
    /// Whether the token is revoked.
    pub fn is_revoked(&self) -> bool {
        matches!(self, Revocation::Revoked)
    }
}

impl fmt::Display for Revocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Revocation::Revoked => f.write_str("revoked"),
            Revocation::NoToken => f.write_str("none issued"),
            Revocation::NotOffered => {
                f.write_str("not revoked (the authorization server offers no revocation)")
            }
            Revocation::Failed(error) => write!(f, "not revoked: {error}"),
        }
    }
}

/// The tokens of one resource to revoke.
pub(crate) struct Held {
    pub(crate) access_token: String,
    pub(crate) refresh_token: Option<String>,
}

impl OAuth {
    /// Logs out of every resource: the tokens the client holds (in memory and in its
    /// [`store`](super::OAuthBuilder::store)) are revoked at their authorization servers as far
    /// as they offer it (RFC 7009: the refresh token, then the access token; at most
    /// [`REVOCATION_TIMEOUT`] each), then forgotten. The client's registrations stay (a new
    /// login does not register again). The next request to a protected server starts a new
    /// authorization.
    ///
    /// A revocation that fails does not stop the logout (see [`Revocation`]); only a store
    /// that cannot be read or changed does ([`Error::Store`]).
    pub async fn logout(&self) -> Result<Logout, Error> {
        self.logout_where(None).await
    }

    /// [`logout`](OAuth::logout) for the MCP server at `url` only: the tokens whose resource
    /// covers `url` (the resource is the URL or a parent of it on the same origin).
    pub async fn logout_of(&self, url: &str) -> Result<Logout, Error> {
        let server = ServerUrl::parse(url)?;
        self.logout_where(Some(&server)).await
    }

    async fn logout_where(&self, url: Option<&ServerUrl>) -> Result<Logout, Error> {
        let covered = |resource: &str| url.is_none_or(|server| server.is_covered_by(resource));
        // The tokens in memory, forgotten first so that no request sends them meanwhile.
        let mut held: BTreeMap<(String, String), Held> = BTreeMap::new();
        for tokens in self.forget_tokens(&covered).await {
            held.insert(
                (tokens.issuer, tokens.resource),
                Held {
                    access_token: tokens.access_token,
                    refresh_token: tokens.refresh_token,
                },
            );
        }
        // Then those of the store (of an earlier run, or of another client sharing it).
        let store = &self.inner.store;
        let stored: Vec<StoreKey> = store
            .list()
            .await
            .map_err(|source| Error::Store { source })?
            .into_iter()
            .filter(|key| matches!(key, StoreKey::Tokens { resource, .. } if covered(resource.as_str())))
            .collect();
        for key in &stored {
            let StoreKey::Tokens { issuer, resource } = key else {
                continue;
            };
            let pair = (issuer.clone(), resource.clone());
            if held.contains_key(&pair) {
                continue;
            }
            if let Some(Stored::Tokens(record)) = store
                .load(key)
                .await
                .map_err(|source| Error::Store { source })?
            {
                held.insert(
                    pair,
                    Held {
                        access_token: record.access_token,
                        refresh_token: record.refresh_token,
                    },
                );
            }
        }
        let mut logout = Logout::default();
        for ((issuer, resource), tokens) in held {
            let (refresh_token, access_token) = self.revoke(&issuer, &tokens).await;
            tracing::debug!(%issuer, %resource, refresh = %refresh_token, access = %access_token,
                "logged out");
            logout.tokens.push(LoggedOut {
                issuer,
                resource,
                refresh_token,
                access_token,
            });
        }
        for key in &stored {
            store
                .remove(key)
                .await
                .map_err(|source| Error::Store { source })?;
        }
        Ok(logout)
    }

    /// Revokes `tokens` of `issuer`: (refresh token, access token).
    async fn revoke(&self, issuer: &str, tokens: &Held) -> (Revocation, Revocation) {
        // An outcome for both tokens (the refresh token's is `NoToken` when there is none).
        let both = |outcome: Revocation| {
            let refresh = match tokens.refresh_token {
                Some(_) => outcome.clone(),
                None => Revocation::NoToken,
            };
            (refresh, outcome)
        };
        let server = match self.auth_server(issuer).await {
            Ok(server) => server,
            // A 2025-03-26 server without metadata: no revocation endpoint to know of.
            Err(Error::NoMetadata { .. }) => return both(Revocation::NotOffered),
            Err(error) => return both(Revocation::Failed(Arc::new(error))),
        };
        let Some(endpoint) = server.revocation_endpoint.clone() else {
            return both(Revocation::NotOffered);
        };
        let client = match self.known_identity(&server).await {
            Ok(Some(client)) => client,
            Ok(None) => {
                return both(Revocation::Failed(Arc::new(Error::NoClientIdentity {
                    issuer: issuer.to_owned(),
                    hint: "the client's registration there is not known (not in the store), \
                           and another client cannot revoke its tokens"
                        .into(),
                })));
            }
            Err(error) => return both(Revocation::Failed(Arc::new(error))),
        };
        let refresh = match &tokens.refresh_token {
            Some(token) => {
                self.revoke_one(&server, &endpoint, &client, token, "refresh_token")
                    .await
            }
            None => Revocation::NoToken,
        };
        let access = self
            .revoke_one(
                &server,
                &endpoint,
                &client,
                &tokens.access_token,
                "access_token",
            )
            .await;
        (refresh, access)
    }

    /// One revocation request (RFC 7009 section 2.1).
    async fn revoke_one(
        &self,
        server: &AuthServer,
        endpoint: &str,
        client: &ClientIdentity,
        token: &str,
        hint: &'static str,
    ) -> Revocation {
        let failed = |error: Error| Revocation::Failed(Arc::new(error));
        let mut params = vec![
            ("token", token.to_owned()),
            ("token_type_hint", hint.into()),
        ];
        let basic = match authenticate(&mut params, client, &server.issuer) {
            Ok(basic) => basic,
            Err(error) => return failed(error),
        };
        let form: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut request = FetchRequest::post_form(endpoint, &form);
        if let Some((id, secret)) = basic {
            request = request.basic(id, secret);
        }
        let unreachable = |source| {
            failed(Error::Unreachable {
                url: endpoint.to_owned(),
                source,
            })
        };
        let sent = tokio::time::timeout(REVOCATION_TIMEOUT, self.inner.fetch.send(request));
        match sent.await {
            Err(_) => unreachable(FetchError::Io {
                url: endpoint.to_owned(),
                source: format!("no answer within {} s", REVOCATION_TIMEOUT.as_secs()).into(),
            }),
            Ok(Err(source)) => unreachable(source),
            Ok(Ok(response)) if response.status.as_u16() == 200 => Revocation::Revoked,
            Ok(Ok(response)) => {
                let document = response.json::<Map<String, Value>>().ok();
                let text = |name: &str| {
                    document
                        .as_ref()
                        .and_then(|d| d.get(name))
                        .and_then(Value::as_str)
                        .map(remote_text)
                };
                failed(Error::RevocationRefused {
                    endpoint: endpoint.to_owned(),
                    status: response.status.as_u16(),
                    error: text("error"),
                    description: text("error_description"),
                })
            }
        }
    }
}
