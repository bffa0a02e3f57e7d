//! The authentication seam: a [`Guard`] decides who a request comes from before the transport
//! reads it, and whether that caller holds the scopes a request needs.
//!
//! The transport knows no token format and does no cryptography: it asks the guard, answers
//! with the guard's [`Challenge`] (an empty body, so no data reaches an unauthenticated
//! caller), and on success puts the [`Grant`] and its [`Principal`] in the request's extensions
//! and removes the credentials (`Authorization`, `DPoP`) from the headers handlers see, so that
//! no handler can pass the caller's token on. `modelctx-auth` implements it for OAuth 2.1
//! (JWT access tokens, introspection, DPoP); an application may implement it for its own scheme.

use std::fmt;
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use super::app::Principal;
use crate::event_store::BoxFuture;

/// Decides who a request comes from, and whether that caller may make it.
///
/// Set it as [`ServerConfig::guard`](super::ServerConfig::guard). The transport calls
/// [`authenticate`](Guard::authenticate) for every request to the MCP endpoint (every POST, GET
/// and DELETE: a session is never proof of identity) after the `Host`/`Origin` and peer checks,
/// counted against `max_in_flight` while it waits; and [`authorize`](Guard::authorize) for
/// every JSON-RPC request whose tool, prompt or resource requires scopes
/// ([`McpApp::required_scopes`](super::McpApp::required_scopes)), before the message reaches the
/// application.
pub trait Guard: Send + Sync + fmt::Debug + 'static {
    /// The protected resource metadata documents (RFC 9728) the transport serves without
    /// authentication, at [`Metadata::paths`]; `None`: none.
    fn metadata(&self) -> Option<&Metadata> {
        None
    }

    /// Authenticates a request from its head (method, URI, headers; the body is not read yet).
    /// `Err`: the request is answered with the challenge and goes no further.
    fn authenticate<'a>(
        &'a self,
        request: &'a http::request::Parts,
    ) -> BoxFuture<'a, Result<Grant, Challenge>>;

    /// Whether `grant` covers every scope in `needed` (which is never empty). `Err`: the request
    /// is answered with the challenge (403 `insufficient_scope`, naming the scopes needed).
    fn authorize(&self, grant: &Grant, needed: &[String]) -> Result<(), Challenge>;

    /// Headers to add to a response to an authenticated request (a fresh `DPoP-Nonce`, say).
    fn on_success(&self, grant: &Grant, headers: &mut HeaderMap) {
        let _ = (grant, headers);
    }
}

/// Protected resource metadata: one JSON document served at the given paths.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Metadata {
    /// The paths it is served at (`/.well-known/oauth-protected-resource/mcp`, say).
    pub paths: Vec<String>,
    /// The JSON document.
    pub body: Bytes,
}

impl Metadata {
    /// A document served at `paths`.
    pub fn new(paths: Vec<String>, body: Bytes) -> Metadata {
        Metadata { paths, body }
    }
}

/// Who a request comes from and what they may do, as the [`Guard`] found it. Handlers read it
/// from the request's extensions (`Arc<Grant>`); it never holds the token itself.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Grant {
    /// The token's issuer (the authorization server), or a name for another scheme.
    pub issuer: String,
    /// The subject: the user, or the client itself for a client-credentials token.
    pub subject: String,
    /// The OAuth client the token was issued to, when known.
    pub client_id: Option<String>,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// All claims of the token (or of the introspection response), for the application.
    pub claims: serde_json::Map<String, serde_json::Value>,
    /// When the token expires, when known.
    pub expires_at: Option<SystemTime>,
    /// The SHA-256 thumbprint of the key a DPoP-bound token is bound to.
    pub jkt: Option<String>,
}

impl Grant {
    /// A grant to `subject` by `issuer`, with no scopes or claims.
    pub fn new(issuer: impl Into<String>, subject: impl Into<String>) -> Grant {
        Grant {
            issuer: issuer.into(),
            subject: subject.into(),
            client_id: None,
            scopes: Vec::new(),
            claims: serde_json::Map::new(),
            expires_at: None,
            jkt: None,
        }
    }

    /// The principal legacy sessions are bound to: issuer and subject (a subject is unique only
    /// within its issuer).
    pub fn principal(&self) -> Principal {
        Principal(format!("{} {}", self.issuer, self.subject))
    }

    /// Whether `scope` was granted (exactly; a [`Guard`] applies scope hierarchies).
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

/// A refusal: the status (401, 403, 400 or 503) and the headers that say why
/// (`WWW-Authenticate`, `DPoP-Nonce`, `Retry-After`). The body is always empty.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Challenge {
    /// The response's status.
    pub status: StatusCode,
    /// The response's headers.
    pub headers: HeaderMap,
}

impl Challenge {
    /// A refusal with `status` and no headers yet.
    pub fn new(status: StatusCode) -> Challenge {
        Challenge {
            status,
            headers: HeaderMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_names_issuer_and_subject() {
        let grant = Grant::new("https://id.example.com", "alice");
        assert_eq!(
            grant.principal(),
            Principal("https://id.example.com alice".into())
        );
        let other = Grant::new("https://other.example.com", "alice");
        assert_ne!(grant.principal(), other.principal());
    }

    #[test]
    fn scopes_are_compared_exactly() {
        let mut grant = Grant::new("i", "s");
        grant.scopes = vec!["files:read".into()];
        assert!(grant.has_scope("files:read"));
        assert!(!grant.has_scope("files"));
        assert!(!grant.has_scope("files:read:all"));
    }
}
