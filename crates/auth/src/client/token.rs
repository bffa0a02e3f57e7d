//! The token endpoint: requests (authorization code, refresh) with the client's
//! authentication and the RFC 8707 `resource`, and the validation of its answers (RFC 6749
//! section 5).

use std::fmt;
use std::time::{Duration, SystemTime};

use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::asmeta::AuthServer;
use super::dpop::{DpopKey, DpopNonces};
use super::error::remote_text;
use super::jwt::client_assertion;
use super::registration::{ClientIdentity, TokenAuthMethod};
use super::{Discovery, Error, OAuth};
use crate::fetch::{Fetch, FetchRequest};

/// The longest access token accepted: 16 KiB.
pub(crate) const TOKEN_LIMIT: usize = 16 * 1024;

/// `client_assertion_type` of `private_key_jwt` (RFC 7523 section 2.2).
const JWT_BEARER_ASSERTION: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How an access token is presented (the token response's `token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenType {
    /// `Authorization: Bearer` (RFC 6750).
    Bearer,
    /// `Authorization: DPoP` with a proof (RFC 9449).
    Dpop,
}

/// Tokens from a token endpoint, with what they are for. `Debug` shows no token.
#[derive(Clone)]
#[non_exhaustive]
pub struct Tokens {
    /// The access token (printable ASCII, at most 16 KiB).
    pub access_token: String,
    /// How to present it.
    pub token_type: TokenType,
    /// When it expires (`expires_in` after it was received); `None`: the server did not say.
    pub expires_at: Option<SystemTime>,
    /// The refresh token, when the server issued one.
    pub refresh_token: Option<String>,
    /// The scopes granted: the response's `scope`, else those asked for.
    pub scopes: Vec<String>,
    /// The authorization server that issued them (its issuer): they are never sent to another.
    pub issuer: String,
    /// The resource (RFC 8707) they were asked for.
    pub resource: String,
    /// The DPoP key a `DPoP` token (and its refresh token) is bound to: the one whose proof
    /// went with the token request. It proves every use of them, also when the client now has
    /// another key (tokens from the store, of an earlier run).
    pub(crate) dpop_key: Option<DpopKey>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens")
            .field("access_token", &"<redacted>")
            .field("token_type", &self.token_type)
            .field("expires_at", &self.expires_at)
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("scopes", &self.scopes)
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("dpop_key", &self.dpop_key.as_ref().map(DpopKey::thumbprint))
            .finish()
    }
}

/// One token request: the grant's parameters, sent with the client's authentication and
/// `resource`.
pub(crate) struct Grant<'a> {
    pub(crate) params: Vec<(&'static str, String)>,
    /// The scopes asked for (the `scope` of the authorization, or of this request).
    pub(crate) scopes: &'a [String],
    pub(crate) resource: &'a str,
}

/// What a token request asked for, to complete its answer.
pub(crate) struct Asked<'a> {
    pub(crate) scopes: &'a [String],
    pub(crate) resource: &'a str,
    pub(crate) issuer: &'a str,
}

/// A DPoP key and the nonces it proves with, for the token requests of a client that has one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DpopHook<'a> {
    pub(crate) key: &'a DpopKey,
    pub(crate) nonces: &'a DpopNonces,
}

/// Sends `grant` to `server`'s token endpoint as `client` and reads the answer:
/// - the body: the grant's parameters, `resource`, and the client's authentication
///   ([`authenticate`]);
/// - 200 with a JSON object: [`read_tokens`]; any other status: [`Error::TokenRefused`] with
///   the answer's `error` and `error_description` (cut and escaped).
///
/// With `dpop`, a DPoP proof (RFC 9449 section 5) goes in a `DPoP` header:
/// `htm` `POST`, `htu` the token endpoint, the latest nonce of its origin. Every response's
/// `DPoP-Nonce` is kept for that origin. A 400 `use_dpop_nonce` with a `DPoP-Nonce` is retried
/// once, with a fresh proof carrying that nonce (and a fresh client assertion); a second one is
/// [`Error::TokenRefused`]. Nothing else is ever retried.
pub(crate) async fn request_with(
    fetch: &dyn Fetch,
    server: &AuthServer,
    client: &ClientIdentity,
    grant: Grant<'_>,
    dpop: Option<DpopHook<'_>>,
) -> Result<Tokens, Error> {
    let endpoint = server
        .token_endpoint
        .as_deref()
        .ok_or_else(|| Error::Metadata {
            url: server
                .metadata_url
                .clone()
                .unwrap_or_else(|| server.issuer.clone()),
            why: "no token_endpoint".into(),
        })?;
    let Grant {
        mut params,
        scopes,
        resource,
    } = grant;
    params.push(("resource", resource.to_owned()));
    let mut nonce_retried = false;
    let (response, document) = loop {
        let mut params = params.clone();
        let basic = authenticate(&mut params, client, &server.issuer)?;
        let form: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut request = FetchRequest::post_form(endpoint, &form);
        if let Some((id, secret)) = basic {
            request = request.basic(id, secret);
        }
        if let Some(dpop) = dpop {
            let proof =
                dpop.key
                    .proof("POST", endpoint, None, dpop.nonces.get(endpoint).as_deref())?;
            request = request.header(DPOP, proof_header(&proof)?);
        }
        let response = fetch
            .send(request)
            .await
            .map_err(|source| Error::Unreachable {
                url: endpoint.to_owned(),
                source,
            })?;
        let fresh_nonce = match dpop {
            Some(dpop) => dpop.nonces.update(endpoint, &response.headers),
            None => false,
        };
        let document = response.json::<Map<String, Value>>().ok();
        let asks_nonce = response.status.as_u16() == 400
            && document
                .as_ref()
                .and_then(|d| d.get("error"))
                .and_then(Value::as_str)
                == Some("use_dpop_nonce");
        if asks_nonce && fresh_nonce && !nonce_retried {
            tracing::debug!(%endpoint, "the token endpoint asks for a DPoP nonce: one retry");
            nonce_retried = true;
            continue;
        }
        break (response, document);
    };
    if response.status.as_u16() != 200 {
        return Err(refusal(
            endpoint,
            response.status.as_u16(),
            document.as_ref(),
        ));
    }
    let document = document.ok_or_else(|| Error::InvalidTokenResponse {
        endpoint: endpoint.to_owned(),
        why: "not a JSON object".into(),
    })?;
    let asked = Asked {
        scopes,
        resource,
        issuer: &server.issuer,
    };
    let mut tokens = read_tokens(endpoint, &document, &asked, SystemTime::now())?;
    if tokens.token_type == TokenType::Dpop {
        tokens.dpop_key = dpop.map(|dpop| dpop.key.clone());
    }
    Ok(tokens)
}

/// The `DPoP` header.
const DPOP: HeaderName = HeaderName::from_static("dpop");

/// A proof as a header value (a JWS: always a valid one).
fn proof_header(proof: &str) -> Result<HeaderValue, Error> {
    HeaderValue::from_str(proof).map_err(|_| Error::UnsupportedKey {
        why: "the DPoP proof is not a header value".into(),
    })
}

/// Adds `client`'s authentication at a token endpoint whose server is `audience` (the `aud` of
/// a client assertion) to `params`: `none` → `client_id`; `client_secret_basic` → nothing, the
/// returned (id, secret) go in an `Authorization: Basic` header; `client_secret_post` →
/// `client_id` and `client_secret`; `private_key_jwt` → `client_id`, `client_assertion_type`
/// and a fresh `client_assertion`.
pub(crate) fn authenticate<'c>(
    params: &mut Vec<(&'static str, String)>,
    client: &'c ClientIdentity,
    audience: &str,
) -> Result<Option<(&'c str, &'c str)>, Error> {
    let secret = client.secret.as_deref().unwrap_or_default();
    match client.method {
        TokenAuthMethod::None => params.push(("client_id", client.client_id.clone())),
        TokenAuthMethod::ClientSecretBasic => return Ok(Some((&client.client_id, secret))),
        TokenAuthMethod::ClientSecretPost => {
            params.push(("client_id", client.client_id.clone()));
            params.push(("client_secret", secret.to_owned()));
        }
        TokenAuthMethod::PrivateKeyJwt => {
            let key = client.key.as_ref().ok_or_else(|| Error::InvalidSetting {
                setting: "client",
                value: client.client_id.clone(),
                why: "has private_key_jwt and no key",
            })?;
            let assertion = client_assertion(key, &client.client_id, audience, SystemTime::now())?;
            params.push(("client_id", client.client_id.clone()));
            params.push(("client_assertion_type", JWT_BEARER_ASSERTION.to_owned()));
            params.push(("client_assertion", assertion));
        }
    }
    Ok(None)
}

/// [`Error::TokenRefused`] for an answer other than 200 of `endpoint`, with its `error` and
/// `error_description` when it has them (cut and escaped).
pub(crate) fn refusal(endpoint: &str, status: u16, document: Option<&Map<String, Value>>) -> Error {
    let text = |name: &str| {
        document
            .and_then(|d| d.get(name))
            .and_then(Value::as_str)
            .map(remote_text)
    };
    Error::TokenRefused {
        endpoint: endpoint.to_owned(),
        status,
        error: text("error"),
        description: text("error_description"),
    }
}

/// A token response (RFC 6749 section 5.1), checked: `access_token` a non-empty string of
/// printable ASCII of at most 16 KiB; `token_type` `Bearer` or `DPoP` (any case); `expires_in`
/// a non-negative integer (or a string of digits) when present; `scope` a string when present
/// (absent: the scopes asked for); `refresh_token` kept when present.
pub(crate) fn read_tokens(
    endpoint: &str,
    document: &Map<String, Value>,
    asked: &Asked<'_>,
    now: SystemTime,
) -> Result<Tokens, Error> {
    let invalid = |why: String| Error::InvalidTokenResponse {
        endpoint: endpoint.to_owned(),
        why,
    };
    let access_token = match document.get("access_token") {
        Some(Value::String(token)) if !token.is_empty() => token,
        Some(Value::String(_)) => return Err(invalid("an empty access_token".into())),
        Some(_) => return Err(invalid("access_token is not a string".into())),
        None => return Err(invalid("no access_token".into())),
    };
    if access_token.len() > TOKEN_LIMIT {
        return Err(invalid(format!(
            "an access_token of {} bytes (at most {TOKEN_LIMIT})",
            access_token.len()
        )));
    }
    if !access_token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(
            "an access_token with characters other than printable ASCII".into(),
        ));
    }
    let token_type = match document.get("token_type") {
        Some(Value::String(t)) if t.eq_ignore_ascii_case("bearer") => TokenType::Bearer,
        Some(Value::String(t)) if t.eq_ignore_ascii_case("dpop") => TokenType::Dpop,
        Some(Value::String(t)) => {
            return Err(invalid(format!(
                "the token_type {} (only Bearer and DPoP)",
                remote_text(t)
            )));
        }
        Some(_) => return Err(invalid("token_type is not a string".into())),
        None => return Err(invalid("no token_type".into())),
    };
    let expires_in = match document.get("expires_in") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
        Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        Some(_) => return Err(invalid("expires_in is not a non-negative integer".into())),
    };
    let scopes = match document.get("scope") {
        None | Some(Value::Null) => asked.scopes.to_vec(),
        Some(Value::String(scope)) => scope.split_whitespace().map(str::to_owned).collect(),
        Some(_) => return Err(invalid("scope is not a string".into())),
    };
    let refresh_token = match document.get("refresh_token") {
        None | Some(Value::Null) => None,
        Some(Value::String(token)) if token.is_empty() => None,
        Some(Value::String(token)) => Some(token.clone()),
        Some(_) => return Err(invalid("refresh_token is not a string".into())),
    };
    Ok(Tokens {
        access_token: access_token.clone(),
        token_type,
        expires_at: expires_in.and_then(|s| now.checked_add(Duration::from_secs(s))),
        refresh_token,
        scopes,
        issuer: asked.issuer.to_owned(),
        resource: asked.resource.to_owned(),
        dpop_key: None,
    })
}

impl OAuth {
    /// Uses `tokens`' refresh token at the authorization server of `discovery` (RFC 6749
    /// section 6): `grant_type=refresh_token`, the same `resource`, no `scope` (the same
    /// scopes), the client's authentication at that server. A response without a refresh
    /// token keeps the old one; without `scope`, the old scopes.
    ///
    /// DPoP-bound tokens are refreshed with a proof of the key they are bound to, whatever
    /// the client's key is now.
    ///
    /// Refused without a refresh token, or when `tokens` come from another authorization
    /// server (a refresh token is never shown to another one): [`Error::CannotRefresh`].
    pub async fn refresh(&self, discovery: &Discovery, tokens: &Tokens) -> Result<Tokens, Error> {
        let server = &discovery.auth_server;
        let Some(refresh_token) = &tokens.refresh_token else {
            return Err(Error::CannotRefresh {
                why: "the tokens have no refresh token",
            });
        };
        if tokens.issuer != server.issuer {
            return Err(Error::CannotRefresh {
                why: "the tokens come from another authorization server",
            });
        }
        let client = self.identify(server).await?;
        let grant = Grant {
            params: vec![
                ("grant_type", "refresh_token".to_owned()),
                ("refresh_token", refresh_token.clone()),
            ],
            scopes: &tokens.scopes,
            resource: &tokens.resource,
        };
        // A DPoP-bound refresh token is proven with the key it is bound to.
        let mut fresh = match &tokens.dpop_key {
            Some(key) => {
                let hook = DpopHook {
                    key,
                    nonces: &self.inner.extensions.nonces,
                };
                request_with(
                    self.inner.fetch.as_ref(),
                    server,
                    &client,
                    grant,
                    Some(hook),
                )
                .await?
            }
            None => self.token_request(server, &client, grant).await?,
        };
        if fresh.refresh_token.is_none() {
            fresh.refresh_token = Some(refresh_token.clone());
        }
        Ok(fresh)
    }
}

impl OAuth {
    /// A token request to `server` as `client`, with a DPoP proof when the client has a key
    /// ([`OAuthBuilder::dpop`](super::OAuthBuilder::dpop)) and the server takes ES256 proofs
    /// (or does not say); see [`OAuth::dpop_for`] for a server that lists other algorithms.
    pub(crate) async fn token_request(
        &self,
        server: &AuthServer,
        client: &ClientIdentity,
        grant: Grant<'_>,
    ) -> Result<Tokens, Error> {
        let dpop = self.dpop_for(server)?;
        request_with(self.inner.fetch.as_ref(), server, client, grant, dpop).await
    }
}
