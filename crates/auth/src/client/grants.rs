//! The grants without a user, from MCP's extensions, and the client's DPoP settings:
//! - client credentials (`io.modelcontextprotocol/oauth-client-credentials`, OAuth 2.1
//!   section 4.2): [`OAuth::client_credentials`];
//! - JWT bearer for workload identity (`io.modelcontextprotocol/auth/wif`, RFC 7523 section
//!   2.1): [`OAuth::jwt_bearer`] with an [`AssertionSource`];
//! - enterprise-managed authorization (`io.modelcontextprotocol/enterprise-managed-authorization`):
//!   [`OAuth::enterprise`] with an [`IdJag`]: an RFC 8693 token exchange at the enterprise's
//!   identity provider for an identity assertion JWT authorization grant (ID-JAG), then that
//!   grant at the authorization server (RFC 7523);
//! - DPoP (`io.modelcontextprotocol/auth/dpop`, RFC 9449): [`OAuthBuilder::dpop`].
//!
//! Each grant is one token request (plus the DPoP nonce retry): a refusal is
//! [`Error::TokenRefused`] at once, never retried and never followed by another grant.

use std::error::Error as StdError;
use std::fmt;
use std::io::Read as _;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::asmeta::AuthServer;
use super::dpop::{DPOP_ALGORITHM, DpopKey, DpopNonces, DpopPolicy};
use super::error::remote_text;
use super::registration::{ClientIdentity, Registered, Source, TokenAuthMethod};
use super::token::{self, DpopHook, Grant, TOKEN_LIMIT, Tokens};
use super::{Discovery, Error, OAuth, OAuthBuilder};
use crate::fetch::{BoxFuture, FetchRequest, check_url};

/// `grant_type` of the client credentials grant.
const CLIENT_CREDENTIALS: &str = "client_credentials";
/// `grant_type` of the JWT bearer grant (RFC 7523 section 2.1).
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// `grant_type` of the token exchange (RFC 8693 section 2.1).
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The token type of an identity assertion JWT authorization grant.
const ID_JAG: &str = "urn:ietf:params:oauth:token-type:id-jag";
/// The token type of an OpenID Connect ID token (RFC 8693 section 3).
pub const ID_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";
/// The token type of a SAML 2.0 assertion (RFC 8693 section 3).
pub const SAML2_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:saml2";
/// The largest assertion file read: 64 KiB.
const ASSERTION_FILE_LIMIT: u64 = 64 * 1024;

/// The error of an [`AssertionSource`] or a [`SubjectToken`].
pub type SourceError = Box<dyn StdError + Send + Sync>;

/// Where the JWT bearer grant's assertion comes from (a workload's identity token).
///
/// Asked before every token request, so a source may rotate its token.
/// `<dyn AssertionSource>::file(path)` re-reads a file each time (a projected service account
/// token, say); `<dyn AssertionSource>::fixed(jwt)` is one JWT.
pub trait AssertionSource: Send + Sync + fmt::Debug + 'static {
    /// The assertion (a JWT) for the authorization server `audience` (its issuer).
    fn assertion<'a>(&'a self, audience: &'a str) -> BoxFuture<'a, Result<String, SourceError>>;
}

impl dyn AssertionSource {
    /// The content of the file at `path`, read again for every token request, whitespace
    /// trimmed; an empty file or one over 64 KiB is an error.
    pub fn file(path: impl Into<PathBuf>) -> Arc<dyn AssertionSource> {
        Arc::new(AssertionFile { path: path.into() })
    }

    /// Always `jwt`. `Debug` does not show it.
    pub fn fixed(jwt: impl Into<String>) -> Arc<dyn AssertionSource> {
        Arc::new(FixedAssertion(jwt.into()))
    }
}

#[derive(Debug)]
struct AssertionFile {
    path: PathBuf,
}

impl AssertionSource for AssertionFile {
    fn assertion<'a>(&'a self, _audience: &'a str) -> BoxFuture<'a, Result<String, SourceError>> {
        Box::pin(async move {
            let path = self.path.clone();
            let read = tokio::task::spawn_blocking(move || {
                let mut text = String::new();
                std::fs::File::open(&path)?
                    .take(ASSERTION_FILE_LIMIT + 1)
                    .read_to_string(&mut text)?;
                Ok::<_, std::io::Error>(text)
            })
            .await
            .map_err(|e| -> SourceError { Box::new(e) })?;
            let text = read
                .map_err(|e| -> SourceError { format!("{}: {e}", self.path.display()).into() })?;
            if text.len() as u64 > ASSERTION_FILE_LIMIT {
                return Err(format!("{} is over 64 KiB", self.path.display()).into());
            }
            let token = text.trim();
            if token.is_empty() {
                return Err(format!("{} is empty", self.path.display()).into());
            }
            Ok(token.to_owned())
        })
    }
}

struct FixedAssertion(String);

impl fmt::Debug for FixedAssertion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FixedAssertion(<redacted>)")
    }
}

impl AssertionSource for FixedAssertion {
    fn assertion<'a>(&'a self, _audience: &'a str) -> BoxFuture<'a, Result<String, SourceError>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }
}

/// A subject token for the token exchange at the identity provider: the token and its type
/// (an RFC 8693 token type URN). `Debug` does not show the token.
#[derive(Clone)]
#[non_exhaustive]
pub struct Subject {
    /// The token.
    pub token: String,
    /// Its type: [`ID_TOKEN_TYPE`], [`SAML2_TOKEN_TYPE`], ...
    pub token_type: String,
}

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subject")
            .field("token", &"<redacted>")
            .field("token_type", &self.token_type)
            .finish()
    }
}

/// Where the user's identity comes from for enterprise-managed authorization: an ID token
/// (or SAML assertion) the application got when the user signed in at the identity provider.
/// Asked before every token exchange. `<dyn SubjectToken>::id_token(jwt)` is one ID token.
pub trait SubjectToken: Send + Sync + fmt::Debug + 'static {
    /// The subject token and its type.
    fn subject(&self) -> BoxFuture<'_, Result<Subject, SourceError>>;
}

impl dyn SubjectToken {
    /// Always the ID token `jwt` ([`ID_TOKEN_TYPE`]).
    pub fn id_token(jwt: impl Into<String>) -> Arc<dyn SubjectToken> {
        <dyn SubjectToken>::fixed(jwt, ID_TOKEN_TYPE)
    }

    /// Always `token`, of the RFC 8693 type `token_type`.
    pub fn fixed(token: impl Into<String>, token_type: impl Into<String>) -> Arc<dyn SubjectToken> {
        Arc::new(FixedSubject(Subject {
            token: token.into(),
            token_type: token_type.into(),
        }))
    }
}

#[derive(Debug)]
struct FixedSubject(Subject);

impl SubjectToken for FixedSubject {
    fn subject(&self) -> BoxFuture<'_, Result<Subject, SourceError>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }
}

/// Enterprise-managed authorization: the identity provider's token endpoint, the client's
/// registration there, and the user's subject token. The client at the authorization server
/// is given with [`OAuthBuilder::client`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct IdJag {
    /// The identity provider's token endpoint (https, or http on loopback).
    pub idp_token_endpoint: String,
    /// The client as the identity provider knows it: public (`client_id` in the body), with a
    /// secret (`client_secret_basic`, or its forced method) or a key (`private_key_jwt`, whose
    /// audience is its issuer when [`Registered::new`] names one, else the token endpoint).
    pub idp_client: Registered,
    /// The user's identity.
    pub subject: Arc<dyn SubjectToken>,
}

impl IdJag {
    /// The settings of an enterprise-managed authorization.
    pub fn new(
        idp_token_endpoint: impl Into<String>,
        idp_client: Registered,
        subject: Arc<dyn SubjectToken>,
    ) -> IdJag {
        IdJag {
            idp_token_endpoint: idp_token_endpoint.into(),
            idp_client,
            subject,
        }
    }
}

/// How an [`OAuth`] client gets its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GrantKind {
    /// The authorization code flow, with a user ([`OAuth::authorize`]).
    AuthorizationCode,
    /// Client credentials ([`OAuth::client_credentials_token`]).
    ClientCredentials,
    /// A JWT bearer assertion ([`OAuth::jwt_bearer_token`]).
    JwtBearer,
    /// Enterprise-managed authorization ([`OAuth::enterprise_token`]).
    Enterprise,
}

/// The grant configured, when it is not the authorization code.
#[derive(Debug, Clone)]
pub(crate) enum ExtensionGrant {
    ClientCredentials,
    JwtBearer(Arc<dyn AssertionSource>),
    Enterprise(IdJag),
}

/// The client's extension settings: its grant, its DPoP key, and the DPoP nonces seen.
#[derive(Debug, Default)]
pub(crate) struct Extensions {
    pub(crate) grant: Option<ExtensionGrant>,
    pub(crate) dpop: Option<DpopKey>,
    pub(crate) policy: DpopPolicy,
    pub(crate) nonces: DpopNonces,
}

impl Extensions {
    /// The settings' checks at [`OAuthBuilder::build`].
    pub(crate) fn check(&self) -> Result<(), Error> {
        if let Some(ExtensionGrant::Enterprise(id_jag)) = &self.grant {
            check_url(&id_jag.idp_token_endpoint).map_err(|_| Error::InvalidSetting {
                setting: "idp_token_endpoint",
                value: id_jag.idp_token_endpoint.clone(),
                why: "is not https (or http on loopback)",
            })?;
            id_jag.idp_client.check()?;
        }
        Ok(())
    }
}

impl OAuth {
    /// A client that gets its tokens with the client credentials grant as `client` (its secret
    /// or key: `client_secret_basic`/`client_secret_post` or `private_key_jwt`), no user
    /// involved: `grant_type=client_credentials`, `scope` when scopes are chosen, `resource`.
    /// `offline_access` is off (no refresh token is expected: the grant runs again).
    pub fn client_credentials(client: Registered) -> OAuthBuilder {
        let mut builder = OAuth::builder().offline_access(false).client(client);
        builder.extensions.grant = Some(ExtensionGrant::ClientCredentials);
        builder
    }

    /// A client that gets its tokens with the JWT bearer grant (RFC 7523 section 2.1) as the
    /// public client `client_id`: `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`,
    /// `assertion` from `source` (asked every time), `scope` when scopes are chosen,
    /// `resource`, `client_id`. `offline_access` is off.
    pub fn jwt_bearer(
        client_id: impl Into<String>,
        source: Arc<dyn AssertionSource>,
    ) -> OAuthBuilder {
        let mut builder = OAuth::builder()
            .offline_access(false)
            .client(Registered::unbound(client_id));
        builder.extensions.grant = Some(ExtensionGrant::JwtBearer(source));
        builder
    }

    /// A client that gets its tokens with enterprise-managed authorization: a token exchange
    /// at the identity provider, then the JWT bearer grant at the authorization server as the
    /// client given with [`OAuthBuilder::client`]. `offline_access` is off.
    pub fn enterprise(id_jag: IdJag) -> OAuthBuilder {
        let mut builder = OAuth::builder().offline_access(false);
        builder.extensions.grant = Some(ExtensionGrant::Enterprise(id_jag));
        builder
    }

    /// How this client gets its tokens.
    pub fn grant_kind(&self) -> GrantKind {
        match &self.inner.extensions.grant {
            None => GrantKind::AuthorizationCode,
            Some(ExtensionGrant::ClientCredentials) => GrantKind::ClientCredentials,
            Some(ExtensionGrant::JwtBearer(_)) => GrantKind::JwtBearer,
            Some(ExtensionGrant::Enterprise(_)) => GrantKind::Enterprise,
        }
    }

    /// The client's DPoP key, if it has one.
    pub fn dpop_key(&self) -> Option<&DpopKey> {
        self.inner.extensions.dpop.as_ref()
    }

    /// The latest `DPoP-Nonce` of each origin this client has seen (token endpoints; resource
    /// servers once their responses are recorded here).
    pub fn dpop_nonces(&self) -> &DpopNonces {
        &self.inner.extensions.nonces
    }

    /// A DPoP proof for a request to a resource server (`method`, `url`, with `access_token`),
    /// carrying the latest nonce of `url`'s origin; `None` when the client has no DPoP key.
    pub fn dpop_proof(
        &self,
        method: &str,
        url: &str,
        access_token: &str,
    ) -> Result<Option<String>, Error> {
        let Some(key) = &self.inner.extensions.dpop else {
            return Ok(None);
        };
        let nonce = self.inner.extensions.nonces.get(url);
        key.proof(method, url, Some(access_token), nonce.as_deref())
            .map(Some)
    }

    /// The DPoP proofs of token requests to `server`: none without a key; with one, proofs when
    /// the server lists ES256 in `dpop_signing_alg_values_supported` or does not publish the
    /// list; a list without ES256 is [`Error::DpopUnsupported`], or no proofs with
    /// [`DpopPolicy::Prefer`].
    pub(crate) fn dpop_for(&self, server: &AuthServer) -> Result<Option<DpopHook<'_>>, Error> {
        let extensions = &self.inner.extensions;
        let Some(key) = &extensions.dpop else {
            return Ok(None);
        };
        if let Some(algs) = &server.dpop_signing_alg_values_supported
            && !algs.iter().any(|alg| alg == DPOP_ALGORITHM)
        {
            return match extensions.policy {
                DpopPolicy::Prefer => {
                    tracing::debug!(issuer = %server.issuer, "no ES256 DPoP there: Bearer tokens");
                    Ok(None)
                }
                _ => Err(Error::DpopUnsupported {
                    issuer: server.issuer.clone(),
                    algs: algs.iter().map(|alg| remote_text(alg)).collect(),
                }),
            };
        }
        Ok(Some(DpopHook {
            key,
            nonces: &extensions.nonces,
        }))
    }

    /// Whether `server` can serve this client's grant: for the authorization code,
    /// [`AuthServer::check_authorization_code`]; for the others, a token endpoint and, when the
    /// server lists `grant_types_supported`, the grant in it ([`Error::GrantUnsupported`]).
    pub(crate) fn check_grant(&self, server: &AuthServer) -> Result<(), Error> {
        let grant = match &self.inner.extensions.grant {
            None => return server.check_authorization_code(),
            Some(ExtensionGrant::ClientCredentials) => CLIENT_CREDENTIALS,
            Some(ExtensionGrant::JwtBearer(_) | ExtensionGrant::Enterprise(_)) => JWT_BEARER,
        };
        let listed = server
            .grant_types_supported
            .as_ref()
            .is_none_or(|grants| grants.iter().any(|g| g == grant));
        if server.token_endpoint.is_none() || !listed {
            return Err(Error::GrantUnsupported {
                issuer: server.issuer.clone(),
                grant,
            });
        }
        Ok(())
    }

    /// Runs the grant this client is configured for, when it is not the authorization code
    /// (for which [`Error::InvalidSetting`]): [`client_credentials_token`],
    /// [`jwt_bearer_token`] or [`enterprise_token`].
    ///
    /// [`client_credentials_token`]: OAuth::client_credentials_token
    /// [`jwt_bearer_token`]: OAuth::jwt_bearer_token
    /// [`enterprise_token`]: OAuth::enterprise_token
    pub async fn grant_token(
        &self,
        discovery: &Discovery,
        scopes: &[String],
    ) -> Result<Tokens, Error> {
        match self.grant_kind() {
            GrantKind::ClientCredentials => self.client_credentials_token(discovery, scopes).await,
            GrantKind::JwtBearer => self.jwt_bearer_token(discovery, scopes).await,
            GrantKind::Enterprise => self.enterprise_token(discovery, scopes).await,
            _ => Err(Error::InvalidSetting {
                setting: "grant",
                value: "authorization_code".into(),
                why: "needs a user: use OAuth::authorize",
            }),
        }
    }

    /// Tokens for `discovery`'s resource with the client credentials grant:
    /// `grant_type=client_credentials`, `scope` (when `scopes` is not empty), `resource`, and
    /// the pre-registered client's authentication ([`Error::NoClientIdentity`] without one for
    /// this server). One request (plus the DPoP nonce retry); a refusal is
    /// [`Error::TokenRefused`].
    pub async fn client_credentials_token(
        &self,
        discovery: &Discovery,
        scopes: &[String],
    ) -> Result<Tokens, Error> {
        let server = self.checked_server(discovery)?;
        let client = self.registered_identity(server).await?;
        let mut params = vec![("grant_type", CLIENT_CREDENTIALS.to_owned())];
        push_scope(&mut params, scopes);
        self.token_request(
            server,
            &client,
            Grant {
                params,
                scopes,
                resource: &discovery.resource,
            },
        )
        .await
    }

    /// Tokens for `discovery`'s resource with the JWT bearer grant (RFC 7523 section 2.1):
    /// `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`, `assertion` from the
    /// [`AssertionSource`] (asked for the server's issuer), `scope` (when `scopes` is not
    /// empty), `resource`, and the client's authentication (`client_id` for a public one). One
    /// request (plus the DPoP nonce retry): a refusal (`invalid_grant`, `invalid_scope`,
    /// `unauthorized_client`, ...) is [`Error::TokenRefused`] at once.
    pub async fn jwt_bearer_token(
        &self,
        discovery: &Discovery,
        scopes: &[String],
    ) -> Result<Tokens, Error> {
        let Some(ExtensionGrant::JwtBearer(source)) = &self.inner.extensions.grant else {
            return Err(Error::InvalidSetting {
                setting: "grant",
                value: String::new(),
                why: "is not the JWT bearer grant (OAuth::jwt_bearer)",
            });
        };
        let server = self.checked_server(discovery)?;
        let client = self.registered_identity(server).await?;
        let assertion =
            source
                .assertion(&server.issuer)
                .await
                .map_err(|source| Error::Assertion {
                    what: "assertion",
                    source,
                })?;
        self.assertion_grant(discovery, server, &client, assertion, scopes)
            .await
    }

    /// Tokens for `discovery`'s resource with enterprise-managed authorization:
    /// 1. at the identity provider (RFC 8693):
    ///    `grant_type=urn:ietf:params:oauth:grant-type:token-exchange`,
    ///    `requested_token_type=urn:ietf:params:oauth:token-type:id-jag`, `audience` the
    ///    authorization server's issuer, `resource`, `scope` (when `scopes` is not empty),
    ///    `subject_token` and `subject_token_type` from the [`SubjectToken`], and the client's
    ///    authentication there; its answer must have `issued_token_type` id-jag and the grant
    ///    in `access_token`;
    /// 2. at the authorization server (RFC 7523): the JWT bearer grant with that `assertion`,
    ///    `scope`, `resource`, as the pre-registered client.
    ///
    /// A refusal at either step is [`Error::TokenRefused`] at once (naming that endpoint).
    pub async fn enterprise_token(
        &self,
        discovery: &Discovery,
        scopes: &[String],
    ) -> Result<Tokens, Error> {
        let Some(ExtensionGrant::Enterprise(id_jag)) = &self.inner.extensions.grant else {
            return Err(Error::InvalidSetting {
                setting: "grant",
                value: String::new(),
                why: "is not enterprise-managed authorization (OAuth::enterprise)",
            });
        };
        let server = self.checked_server(discovery)?;
        let client = self.registered_identity(server).await?;
        let grant = self
            .exchange_for_id_jag(id_jag, server, &discovery.resource, scopes)
            .await?;
        self.assertion_grant(discovery, server, &client, grant, scopes)
            .await
    }

    /// `discovery`'s authorization server, once it is known to serve this client's grant.
    fn checked_server<'d>(&self, discovery: &'d Discovery) -> Result<&'d AuthServer, Error> {
        let server = discovery.auth_server.as_ref();
        self.check_grant(server)?;
        Ok(server)
    }

    /// The pre-registered client for `server` (the grants without a user never register
    /// dynamically nor use a metadata document: [`Error::NoClientIdentity`]).
    async fn registered_identity(&self, server: &AuthServer) -> Result<ClientIdentity, Error> {
        let client = self.identify(server).await?;
        debug_assert_eq!(client.source, Source::PreRegistered);
        Ok(client)
    }

    /// The JWT bearer grant at `server` with `assertion`.
    async fn assertion_grant(
        &self,
        discovery: &Discovery,
        server: &AuthServer,
        client: &ClientIdentity,
        assertion: String,
        scopes: &[String],
    ) -> Result<Tokens, Error> {
        let mut params = vec![
            ("grant_type", JWT_BEARER.to_owned()),
            ("assertion", assertion),
        ];
        push_scope(&mut params, scopes);
        self.token_request(
            server,
            client,
            Grant {
                params,
                scopes,
                resource: &discovery.resource,
            },
        )
        .await
    }

    /// Step 1 of [`enterprise_token`](OAuth::enterprise_token): the ID-JAG from the identity
    /// provider.
    async fn exchange_for_id_jag(
        &self,
        id_jag: &IdJag,
        server: &AuthServer,
        resource: &str,
        scopes: &[String],
    ) -> Result<String, Error> {
        let endpoint = id_jag.idp_token_endpoint.as_str();
        let subject = id_jag
            .subject
            .subject()
            .await
            .map_err(|source| Error::Assertion {
                what: "subject token",
                source,
            })?;
        let idp_client = idp_identity(&id_jag.idp_client);
        let mut params = vec![
            ("grant_type", TOKEN_EXCHANGE.to_owned()),
            ("requested_token_type", ID_JAG.to_owned()),
            ("audience", server.issuer.clone()),
            ("resource", resource.to_owned()),
        ];
        push_scope(&mut params, scopes);
        params.push(("subject_token", subject.token));
        params.push(("subject_token_type", subject.token_type));
        let audience = id_jag.idp_client.issuer.as_deref().unwrap_or(endpoint);
        let basic = token::authenticate(&mut params, &idp_client, audience)?;
        let form: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut request = FetchRequest::post_form(endpoint, &form);
        if let Some((id, secret)) = basic {
            request = request.basic(id, secret);
        }
        let response =
            self.inner
                .fetch
                .send(request)
                .await
                .map_err(|source| Error::Unreachable {
                    url: endpoint.to_owned(),
                    source,
                })?;
        let document = response.json::<Map<String, Value>>().ok();
        if response.status.as_u16() != 200 {
            return Err(token::refusal(
                endpoint,
                response.status.as_u16(),
                document.as_ref(),
            ));
        }
        let invalid = |why: String| Error::InvalidTokenResponse {
            endpoint: endpoint.to_owned(),
            why,
        };
        let document = document.ok_or_else(|| invalid("not a JSON object".into()))?;
        match document.get("issued_token_type").and_then(Value::as_str) {
            Some(ID_JAG) => {}
            Some(other) => {
                return Err(invalid(format!(
                    "issued_token_type {} (not {ID_JAG})",
                    remote_text(other)
                )));
            }
            None => return Err(invalid("no issued_token_type".into())),
        }
        match document.get("access_token").and_then(Value::as_str) {
            Some(grant)
                if !grant.is_empty()
                    && grant.len() <= TOKEN_LIMIT
                    && grant.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Ok(grant.to_owned())
            }
            _ => Err(invalid(
                "no access_token of printable ASCII of at most 16 KiB".into(),
            )),
        }
    }
}

/// The client at the identity provider: its forced method, else `private_key_jwt` with a key,
/// `client_secret_basic` with a secret, `none` without either.
fn idp_identity(client: &Registered) -> ClientIdentity {
    let method = match (client.method, &client.key, &client.secret) {
        (Some(method), _, _) => method,
        (None, Some(_), _) => TokenAuthMethod::PrivateKeyJwt,
        (None, None, Some(_)) => TokenAuthMethod::ClientSecretBasic,
        (None, None, None) => TokenAuthMethod::None,
    };
    ClientIdentity {
        client_id: client.client_id.clone(),
        secret: client.secret.clone(),
        key: client.key.clone(),
        method,
        source: Source::PreRegistered,
    }
}

/// `scope`, space-separated, when there are scopes.
fn push_scope(params: &mut Vec<(&'static str, String)>, scopes: &[String]) {
    if !scopes.is_empty() {
        params.push(("scope", scopes.join(" ")));
    }
}

impl OAuthBuilder {
    /// Proves possession of `key` (DPoP, RFC 9449) on every token request (every grant and
    /// refresh): tokens then come bound to it (`token_type` `DPoP`) and are presented with a
    /// fresh proof on every request. An authorization server whose
    /// `dpop_signing_alg_values_supported` does not list ES256 gets
    /// [`Error::DpopUnsupported`], unless [`dpop_policy`](OAuthBuilder::dpop_policy) is
    /// [`DpopPolicy::Prefer`]. Default: no DPoP.
    pub fn dpop(mut self, key: DpopKey) -> OAuthBuilder {
        self.extensions.dpop = Some(key);
        self
    }

    /// What to do with an authorization server that does not take ES256 proofs. Default:
    /// [`DpopPolicy::Required`].
    pub fn dpop_policy(mut self, policy: DpopPolicy) -> OAuthBuilder {
        self.extensions.policy = policy;
        self
    }
}

#[cfg(test)]
mod tests;
