//! Who the client is at an authorization server, in the spec's selection order (MCP 2025-11-25
//! on, "Client Registration"): a client pre-registered for that server, else a client ID
//! metadata document (CIMD) when the server says it takes them, else dynamic client
//! registration (RFC 7591), else a typed error.

use std::fmt;

use serde_json::{Map, Value, json};

use super::asmeta::AuthServer;
use super::error::remote_text;
use super::jwt::SigningKey;
use super::{ClientRecord, Error, OAuth, StoreKey, Stored};
use crate::fetch::{FetchRequest, is_loopback};

/// How the client authenticates at the token endpoint (RFC 7591 section 2,
/// `token_endpoint_auth_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenAuthMethod {
    /// `none`: a public client, `client_id` in the body.
    None,
    /// `client_secret_basic`: HTTP Basic with the id and secret, each form-encoded first
    /// (RFC 6749 section 2.3.1).
    ClientSecretBasic,
    /// `client_secret_post`: `client_id` and `client_secret` in the body.
    ClientSecretPost,
    /// `private_key_jwt`: a JWT signed with the client's key (RFC 7523 section 2.2).
    PrivateKeyJwt,
}

impl TokenAuthMethod {
    /// The name in metadata and registrations.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenAuthMethod::None => "none",
            TokenAuthMethod::ClientSecretBasic => "client_secret_basic",
            TokenAuthMethod::ClientSecretPost => "client_secret_post",
            TokenAuthMethod::PrivateKeyJwt => "private_key_jwt",
        }
    }

    fn parse(name: &str) -> Option<TokenAuthMethod> {
        [
            TokenAuthMethod::None,
            TokenAuthMethod::ClientSecretBasic,
            TokenAuthMethod::ClientSecretPost,
            TokenAuthMethod::PrivateKeyJwt,
        ]
        .into_iter()
        .find(|m| m.as_str() == name)
    }
}

/// A client registered with an authorization server beforehand (its id, and its secret or
/// key): used at that server in preference to any other identity.
///
/// [`Registered::new`] names the server's issuer; [`Registered::unbound`] does not (the
/// application does not know it): such a client is bound to the first authorization server it
/// is used with and never shown to another. `Debug` shows no secret or key.
#[derive(Clone)]
pub struct Registered {
    pub(crate) issuer: Option<String>,
    pub(crate) client_id: String,
    pub(crate) secret: Option<String>,
    pub(crate) key: Option<SigningKey>,
    pub(crate) method: Option<TokenAuthMethod>,
}

impl fmt::Debug for Registered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registered")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("key", &self.key)
            .field("method", &self.method)
            .finish()
    }
}

impl Registered {
    /// The client `client_id` of the authorization server `issuer` (its metadata's `issuer`,
    /// compared byte for byte). Without a secret or key it is a public client (`none`).
    pub fn new(issuer: impl Into<String>, client_id: impl Into<String>) -> Registered {
        Registered {
            issuer: Some(issuer.into()),
            ..Registered::unbound(client_id)
        }
    }

    /// The client `client_id` of an authorization server not named: it is bound to the first
    /// one it is used with, and another server never sees it.
    pub fn unbound(client_id: impl Into<String>) -> Registered {
        Registered {
            issuer: None,
            client_id: client_id.into(),
            secret: None,
            key: None,
            method: None,
        }
    }

    /// Its secret: `client_secret_basic`, or `client_secret_post` when the server lists only
    /// that.
    pub fn secret(mut self, secret: impl Into<String>) -> Registered {
        self.secret = Some(secret.into());
        self
    }

    /// Its private key: `private_key_jwt`, with assertions signed by `key`.
    pub fn private_key(mut self, key: SigningKey) -> Registered {
        self.key = Some(key);
        self
    }

    /// Forces its token endpoint authentication method (default: `private_key_jwt` with a
    /// key, else `client_secret_basic` or `client_secret_post` with a secret, else `none`).
    /// Checked when the client is built: a secret method needs the secret, `private_key_jwt`
    /// the key.
    pub fn method(mut self, method: TokenAuthMethod) -> Registered {
        self.method = Some(method);
        self
    }

    /// Whether its credentials allow its forced method.
    pub(crate) fn check(&self) -> Result<(), Error> {
        let missing = |why| Error::InvalidSetting {
            setting: "client",
            value: self.client_id.clone(),
            why,
        };
        match self.method {
            Some(TokenAuthMethod::ClientSecretBasic | TokenAuthMethod::ClientSecretPost)
                if self.secret.is_none() =>
            {
                Err(missing("has a secret method and no secret"))
            }
            Some(TokenAuthMethod::PrivateKeyJwt) if self.key.is_none() => {
                Err(missing("has private_key_jwt and no key"))
            }
            _ => Ok(()),
        }
    }
}

/// `application_type` of a dynamic registration (OpenID Connect Dynamic Client Registration
/// section 2; MCP 2026-07-28 asks for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApplicationType {
    /// `native`: a desktop or command-line app, redirected to loopback.
    Native,
    /// `web`: redirected to an https site.
    Web,
}

impl ApplicationType {
    fn as_str(self) -> &'static str {
        match self {
            ApplicationType::Native => "native",
            ApplicationType::Web => "web",
        }
    }
}

/// Where a client identity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    PreRegistered,
    MetadataDocument,
    Dynamic,
}

/// The client as one authorization server knows it. `Debug` shows no secret or key.
#[derive(Clone)]
pub(crate) struct ClientIdentity {
    pub(crate) client_id: String,
    pub(crate) secret: Option<String>,
    pub(crate) key: Option<SigningKey>,
    pub(crate) method: TokenAuthMethod,
    pub(crate) source: Source,
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("client_id", &self.client_id)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("key", &self.key)
            .field("method", &self.method)
            .field("source", &self.source)
            .finish()
    }
}

/// Whether the server's `token_endpoint_auth_methods_supported` allows `method`; an absent
/// list means `client_secret_basic` (RFC 8414 section 2).
fn allows(server: &AuthServer, method: TokenAuthMethod) -> bool {
    match &server.token_endpoint_auth_methods_supported {
        Some(list) => list.iter().any(|m| m == method.as_str()),
        None => method == TokenAuthMethod::ClientSecretBasic,
    }
}

/// The identity of a pre-registered client at `server`: its forced method, else the one its
/// credentials allow (key → `private_key_jwt`; secret → `client_secret_basic`, else
/// `client_secret_post` when only that is listed; nothing → `none`), which the server must list.
fn pre_registered(client: &Registered, server: &AuthServer) -> Result<ClientIdentity, Error> {
    let method = match (client.method, &client.key, &client.secret) {
        (Some(method), _, _) => method,
        (None, Some(_), _) => TokenAuthMethod::PrivateKeyJwt,
        (None, None, Some(_))
            if !allows(server, TokenAuthMethod::ClientSecretBasic)
                && allows(server, TokenAuthMethod::ClientSecretPost) =>
        {
            TokenAuthMethod::ClientSecretPost
        }
        (None, None, Some(_)) => TokenAuthMethod::ClientSecretBasic,
        (None, None, None) => TokenAuthMethod::None,
    };
    // A server that lists no methods is trusted to take the pre-registered client's own.
    if server.token_endpoint_auth_methods_supported.is_some() && !allows(server, method) {
        return Err(Error::NoAuthMethod {
            issuer: server.issuer.clone(),
            client_id: client.client_id.clone(),
            method: method.as_str(),
            supported: server
                .token_endpoint_auth_methods_supported
                .clone()
                .unwrap_or_default(),
        });
    }
    Ok(ClientIdentity {
        client_id: client.client_id.clone(),
        secret: client.secret.clone(),
        key: client.key.clone(),
        method,
        source: Source::PreRegistered,
    })
}

impl OAuth {
    /// The client's identity at `server`, in the selection order:
    /// 1. a pre-registered client for its issuer, or an unbound one (then bound to it);
    /// 2. the client ID metadata document URL, when the server says
    ///    `client_id_metadata_document_supported` (a public client);
    /// 3. the client registered dynamically at its `registration_endpoint` (once per issuer,
    ///    kept for the life of the client);
    /// 4. else [`Error::NoClientIdentity`].
    pub(crate) async fn identify(&self, server: &AuthServer) -> Result<ClientIdentity, Error> {
        self.identify_or_register(server, true)
            .await
            .map(|found| found.expect("registered when unknown"))
    }

    /// The identity the client already has at `server` (steps 1 to 3 of
    /// [`identify`](OAuth::identify) without a new registration): `None` when it would have to
    /// register. A revocation uses it: a new client could not revoke another's tokens.
    pub(crate) async fn known_identity(
        &self,
        server: &AuthServer,
    ) -> Result<Option<ClientIdentity>, Error> {
        self.identify_or_register(server, false).await
    }

    async fn identify_or_register(
        &self,
        server: &AuthServer,
        register: bool,
    ) -> Result<Option<ClientIdentity>, Error> {
        let bound_elsewhere = {
            let mut registered = self.inner.registered.lock().expect("not poisoned");
            let issuer = &server.issuer;
            let chosen = match registered
                .iter()
                .position(|c| c.issuer.as_ref() == Some(issuer))
            {
                Some(i) => Some(i),
                None => registered.iter().position(|c| c.issuer.is_none()),
            };
            if let Some(i) = chosen {
                let client = &mut registered[i];
                // Bound only once it is usable there.
                let identity = pre_registered(client, server)?;
                if client.issuer.is_none() {
                    tracing::debug!(client_id = %client.client_id, %issuer, "pre-registered client bound");
                    client.issuer = Some(issuer.clone());
                }
                return Ok(Some(identity));
            }
            registered
                .iter()
                .map(|c| {
                    format!(
                        "{} is for {}",
                        c.client_id,
                        c.issuer.as_deref().unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
        };
        // The grants without a user (grants.rs) only use a client registered beforehand.
        if self.inner.extensions.grant.is_some() {
            return Err(Error::NoClientIdentity {
                issuer: server.issuer.clone(),
                hint: format!(
                    "a grant without a user needs a client registered with it beforehand \
                     (pre-registered: {})",
                    bound_elsewhere.join(", ")
                ),
            });
        }
        if let Some(url) = &self.inner.client_metadata_url
            && server.client_id_metadata_document_supported
        {
            return Ok(Some(ClientIdentity {
                client_id: url.clone(),
                secret: None,
                key: None,
                method: TokenAuthMethod::None,
                source: Source::MetadataDocument,
            }));
        }
        if let Some(known) = self
            .inner
            .dynamic
            .lock()
            .expect("not poisoned")
            .get(&server.issuer)
        {
            return Ok(Some(known.clone()));
        }
        if let Some(stored) = self.stored_registration(&server.issuer).await? {
            self.inner
                .dynamic
                .lock()
                .expect("not poisoned")
                .insert(server.issuer.clone(), stored.clone());
            return Ok(Some(stored));
        }
        if !register {
            return Ok(None);
        }
        let Some(endpoint) = &server.registration_endpoint else {
            let mut hint = String::from(
                "it has no registration endpoint; give a pre-registered client (OAuthBuilder::client)",
            );
            if !server.client_id_metadata_document_supported {
                hint.push_str(", it takes no client ID metadata document");
            } else {
                hint.push_str(" or a client ID metadata document URL");
            }
            if !bound_elsewhere.is_empty() {
                hint.push_str(&format!(
                    " (pre-registered: {})",
                    bound_elsewhere.join(", ")
                ));
            }
            return Err(Error::NoClientIdentity {
                issuer: server.issuer.clone(),
                hint,
            });
        };
        let identity = self.register(server, endpoint).await?;
        self.inner
            .dynamic
            .lock()
            .expect("not poisoned")
            .insert(server.issuer.clone(), identity.clone());
        self.store_registration(&server.issuer, &identity).await;
        Ok(Some(identity))
    }

    /// The registration at `issuer` kept in the [`TokenStore`](super::TokenStore) (by an
    /// earlier run), when it is one the client can use.
    async fn stored_registration(&self, issuer: &str) -> Result<Option<ClientIdentity>, Error> {
        let key = StoreKey::client(issuer);
        let record = match self.inner.store.load(&key).await {
            Ok(Some(Stored::Client(record))) => record,
            Ok(_) => return Ok(None),
            Err(source) => return Err(Error::Store { source }),
        };
        let method = match TokenAuthMethod::parse(&record.token_endpoint_auth_method) {
            Some(method) if method != TokenAuthMethod::PrivateKeyJwt => method,
            _ => return Ok(None),
        };
        if method != TokenAuthMethod::None && record.client_secret.is_none() {
            return Ok(None);
        }
        if !record.redirect_uris.is_empty() && record.redirect_uris != self.inner.redirect_uris {
            // Registered with other redirect URIs: register anew.
            return Ok(None);
        }
        Ok(Some(ClientIdentity {
            client_id: record.client_id,
            secret: record.client_secret,
            key: None,
            method,
            source: Source::Dynamic,
        }))
    }

    /// Keeps a dynamic registration in the [`TokenStore`](super::TokenStore); a failure is
    /// logged (the registration works for this process).
    async fn store_registration(&self, issuer: &str, identity: &ClientIdentity) {
        let mut record = ClientRecord::new(identity.client_id.clone(), identity.method.as_str());
        record.client_secret = identity.secret.clone();
        record.redirect_uris = self.inner.redirect_uris.clone();
        record.registered_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs());
        let key = StoreKey::client(issuer);
        if let Err(error) = self.inner.store.save(&key, &Stored::Client(record)).await {
            tracing::warn!(%issuer, %error, "the client's registration could not be stored");
        }
    }

    /// Dynamic client registration (RFC 7591) at `endpoint`: `redirect_uris`, the
    /// authorization code and refresh token grants, the `code` response type,
    /// `application_type`, `client_name` when set, no `scope` (a server may hold a client to
    /// its registered scopes, which would defeat step-up), and the token endpoint
    /// authentication method: `none` when the server lists it (or lists nothing), else
    /// `client_secret_basic`, else `client_secret_post`. The answer's method is obeyed; when
    /// it names none, the one asked for is kept.
    async fn register(&self, server: &AuthServer, endpoint: &str) -> Result<ClientIdentity, Error> {
        let inner = &self.inner;
        if inner.redirect_uris.is_empty() {
            return Err(Error::InvalidSetting {
                setting: "redirect_uri",
                value: String::new(),
                why: "is needed to register a client",
            });
        }
        let asked = match &server.token_endpoint_auth_methods_supported {
            None => TokenAuthMethod::None,
            Some(list) => [
                TokenAuthMethod::None,
                TokenAuthMethod::ClientSecretBasic,
                TokenAuthMethod::ClientSecretPost,
            ]
            .into_iter()
            .find(|m| list.iter().any(|l| l == m.as_str()))
            .ok_or_else(|| Error::NoClientIdentity {
                issuer: server.issuer.clone(),
                hint: format!(
                    "its registration takes only token endpoint authentication methods the client does not implement for registered clients ({})",
                    remote_text(&list.join(" "))
                ),
            })?,
        };
        let application_type = inner.application_type.unwrap_or_else(|| {
            if inner.redirect_uris.iter().all(|uri| is_loopback_uri(uri)) {
                ApplicationType::Native
            } else {
                ApplicationType::Web
            }
        });
        let mut body = json!({
            "redirect_uris": inner.redirect_uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": asked.as_str(),
            "application_type": application_type.as_str(),
        });
        if let Some(name) = &inner.client_name {
            body["client_name"] = Value::from(name.as_str());
        }
        let response = inner
            .fetch
            .send(FetchRequest::post_json(endpoint, &body))
            .await
            .map_err(|source| Error::Unreachable {
                url: endpoint.to_owned(),
                source,
            })?;
        let document = response.json::<Map<String, Value>>().ok();
        let text = |name: &str| {
            document
                .as_ref()
                .and_then(|d| d.get(name))
                .and_then(Value::as_str)
                .map(remote_text)
        };
        if !matches!(response.status.as_u16(), 200 | 201) {
            return Err(Error::RegistrationRefused {
                url: endpoint.to_owned(),
                status: response.status.as_u16(),
                error: text("error"),
                description: text("error_description"),
            });
        }
        let invalid = |why: String| Error::InvalidRegistration {
            url: endpoint.to_owned(),
            why,
        };
        let Some(document) = &document else {
            return Err(invalid("not a JSON object".into()));
        };
        let client_id = match document.get("client_id") {
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            _ => return Err(invalid("no client_id".into())),
        };
        let secret = match document.get("client_secret") {
            Some(Value::String(secret)) if !secret.is_empty() => Some(secret.clone()),
            _ => None,
        };
        let method = match document.get("token_endpoint_auth_method") {
            None | Some(Value::Null) => asked,
            Some(Value::String(name)) => match TokenAuthMethod::parse(name) {
                Some(method) if method != TokenAuthMethod::PrivateKeyJwt => method,
                _ => {
                    return Err(invalid(format!(
                        "the token endpoint authentication method {} is not one the client can use",
                        remote_text(name)
                    )));
                }
            },
            Some(_) => return Err(invalid("token_endpoint_auth_method is not a string".into())),
        };
        if method != TokenAuthMethod::None && secret.is_none() {
            return Err(invalid(format!(
                "{} without a client_secret",
                method.as_str()
            )));
        }
        tracing::debug!(%client_id, issuer = %server.issuer, method = method.as_str(), "client registered");
        Ok(ClientIdentity {
            client_id,
            secret: if method == TokenAuthMethod::None {
                None
            } else {
                secret
            },
            key: None,
            method,
            source: Source::Dynamic,
        })
    }
}

/// Whether `uri` is `http` on a loopback host.
fn is_loopback_uri(uri: &str) -> bool {
    uri.parse::<http::Uri>()
        .is_ok_and(|u| u.scheme_str() == Some("http") && u.host().is_some_and(is_loopback))
}

/// Checks a redirect URI: `https` with a host, or `http` on a loopback host (`127.0.0.1`,
/// `[::1]`, `localhost`; RFC 8252 section 7.3), absolute, without a fragment or user
/// information (RFC 6749 section 3.1.2).
pub(crate) fn check_redirect_uri(uri: &str) -> Result<(), Error> {
    let invalid = |why| Error::InvalidSetting {
        setting: "redirect_uri",
        value: uri.to_owned(),
        why,
    };
    if uri.contains('#') {
        return Err(invalid("has a fragment"));
    }
    let parsed: http::Uri = uri.parse().map_err(|_| invalid("is not a URI"))?;
    let Some(authority) = parsed.authority() else {
        return Err(invalid("is not absolute"));
    };
    if authority.as_str().contains('@') || authority.host().is_empty() {
        return Err(invalid("has user information or no host"));
    }
    match parsed.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback(authority.host()) => Ok(()),
        Some("http") => Err(invalid("is plain http to a host other than loopback")),
        _ => Err(invalid("is neither https nor http on loopback")),
    }
}

/// Checks a client ID metadata document URL: `https` with a path other than `/`, no fragment.
pub(crate) fn check_metadata_url(url: &str) -> Result<(), Error> {
    let invalid = |why| Error::InvalidSetting {
        setting: "client_metadata_url",
        value: url.to_owned(),
        why,
    };
    let parsed: http::Uri = url.parse().map_err(|_| invalid("is not a URL"))?;
    if parsed.scheme_str() != Some("https")
        || parsed.host().is_none_or(str::is_empty)
        || url.contains('#')
    {
        return Err(invalid("is not an https URL without a fragment"));
    }
    if matches!(parsed.path(), "" | "/") {
        return Err(invalid("has no path"));
    }
    Ok(())
}
