//! The authorization server's metadata as the client reads it: found at the RFC 8414
//! path-inserted URL, then the OpenID Connect path-inserted one, then the OpenID Connect appended
//! one; its `issuer` equal to the expected one byte for byte; every endpoint https (or http on
//! loopback); and the defaults of a 2025-03-26 server that publishes none.

use serde::Deserialize;
use serde_json::Value;

use super::Error;
use super::error::remote_text;
use crate::as_metadata::{Unusable, fetch_document, metadata_urls};
use crate::fetch::{Fetch, check_url};

/// What the client knows of an authorization server: from its metadata document, or the
/// 2025-03-26 defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthServer {
    /// The issuer identifier (the document's `issuer`, equal to the one it was fetched for).
    pub issuer: String,
    /// Where the document was found; `None`: the server publishes none and the 2025-03-26
    /// defaults are used.
    pub metadata_url: Option<String>,
    /// `authorization_endpoint`.
    pub authorization_endpoint: Option<String>,
    /// `token_endpoint`.
    pub token_endpoint: Option<String>,
    /// `registration_endpoint` (RFC 7591).
    pub registration_endpoint: Option<String>,
    /// `revocation_endpoint` (RFC 7009).
    pub revocation_endpoint: Option<String>,
    /// `scopes_supported`.
    pub scopes_supported: Option<Vec<String>>,
    /// `response_types_supported`.
    pub response_types_supported: Option<Vec<String>>,
    /// `grant_types_supported` (absent: `authorization_code` and `implicit`, RFC 8414).
    pub grant_types_supported: Option<Vec<String>>,
    /// `token_endpoint_auth_methods_supported` (absent: `client_secret_basic`, RFC 8414).
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// `code_challenge_methods_supported` (absent: PKCE is not supported, RFC 8414 section 2).
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// `authorization_response_iss_parameter_supported` (RFC 9207; absent: false).
    pub iss_parameter_supported: bool,
    /// `client_id_metadata_document_supported` (MCP 2025-11-25 on; absent: false).
    pub client_id_metadata_document_supported: bool,
    /// `dpop_signing_alg_values_supported` (RFC 9449 section 5.1).
    pub dpop_signing_alg_values_supported: Option<Vec<String>>,
}

/// The members read (others are ignored; a member of the wrong type makes the document
/// unusable).
#[derive(Deserialize)]
struct Document {
    issuer: String,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    registration_endpoint: Option<String>,
    revocation_endpoint: Option<String>,
    scopes_supported: Option<Vec<String>>,
    response_types_supported: Option<Vec<String>>,
    grant_types_supported: Option<Vec<String>>,
    token_endpoint_auth_methods_supported: Option<Vec<String>>,
    code_challenge_methods_supported: Option<Vec<String>>,
    authorization_response_iss_parameter_supported: Option<bool>,
    client_id_metadata_document_supported: Option<bool>,
    dpop_signing_alg_values_supported: Option<Vec<String>>,
}

impl AuthServer {
    /// The defaults of MCP 2025-03-26 for a server whose authorization base URL `origin`
    /// publishes no metadata: `/authorize`, `/token` and `/register` on it, PKCE with `S256`
    /// (the only case where PKCE support is assumed), no `iss` in responses.
    pub(crate) fn legacy_defaults(origin: &str) -> AuthServer {
        AuthServer {
            issuer: origin.to_owned(),
            metadata_url: None,
            authorization_endpoint: Some(format!("{origin}/authorize")),
            token_endpoint: Some(format!("{origin}/token")),
            registration_endpoint: Some(format!("{origin}/register")),
            revocation_endpoint: None,
            scopes_supported: None,
            response_types_supported: Some(vec!["code".to_owned()]),
            grant_types_supported: None,
            token_endpoint_auth_methods_supported: None,
            code_challenge_methods_supported: Some(vec!["S256".to_owned()]),
            iss_parameter_supported: false,
            client_id_metadata_document_supported: false,
            dpop_signing_alg_values_supported: None,
        }
    }

    /// Whether the server takes PKCE with `S256` (its metadata lists it in
    /// `code_challenge_methods_supported`).
    pub fn supports_pkce_s256(&self) -> bool {
        self.code_challenge_methods_supported
            .as_ref()
            .is_some_and(|methods| methods.iter().any(|m| m == "S256"))
    }

    /// Whether the authorization code flow can run against this server: an authorization and a
    /// token endpoint, the `code` response type (when the metadata lists any), and PKCE with
    /// `S256` ([`Error::PkceUnsupported`] otherwise: OAuth 2.1 and MCP require it, and a server
    /// that does not say it supports it is not trusted to).
    pub fn check_authorization_code(&self) -> Result<(), Error> {
        let missing = |why: &str| Error::Metadata {
            url: self
                .metadata_url
                .clone()
                .unwrap_or_else(|| self.issuer.clone()),
            why: why.to_owned(),
        };
        if self.authorization_endpoint.is_none() {
            return Err(missing("no authorization_endpoint"));
        }
        if self.token_endpoint.is_none() {
            return Err(missing("no token_endpoint"));
        }
        if let Some(types) = &self.response_types_supported
            && !types.iter().any(|t| t == "code")
        {
            return Err(missing("response type code not supported"));
        }
        if !self.supports_pkce_s256() {
            return Err(Error::PkceUnsupported {
                issuer: self.issuer.clone(),
            });
        }
        Ok(())
    }

    /// Builds from a document whose `issuer` was checked, refusing endpoints that are not https
    /// (or http on loopback).
    fn from_document(url: &str, document: Document) -> Result<AuthServer, Error> {
        let endpoints = [
            &document.authorization_endpoint,
            &document.token_endpoint,
            &document.registration_endpoint,
            &document.revocation_endpoint,
        ];
        for endpoint in endpoints.into_iter().flatten() {
            check_url(endpoint).map_err(|e| Error::InsecureEndpoint {
                url: remote_text(endpoint),
                why: e.to_string(),
            })?;
        }
        Ok(AuthServer {
            issuer: document.issuer,
            metadata_url: Some(url.to_owned()),
            authorization_endpoint: document.authorization_endpoint,
            token_endpoint: document.token_endpoint,
            registration_endpoint: document.registration_endpoint,
            revocation_endpoint: document.revocation_endpoint,
            scopes_supported: document.scopes_supported,
            response_types_supported: document.response_types_supported,
            grant_types_supported: document.grant_types_supported,
            token_endpoint_auth_methods_supported: document.token_endpoint_auth_methods_supported,
            code_challenge_methods_supported: document.code_challenge_methods_supported,
            iss_parameter_supported: document
                .authorization_response_iss_parameter_supported
                .unwrap_or(false),
            client_id_metadata_document_supported: document
                .client_id_metadata_document_supported
                .unwrap_or(false),
            dpop_signing_alg_values_supported: document.dpop_signing_alg_values_supported,
        })
    }
}

/// Fetches the metadata of `issuer` from [`metadata_urls`] in order:
/// - a `4xx` (`404`, say) or a document naming another issuer: the next URL (a document of
///   another issuer is never used, not even its endpoints);
/// - another status (a redirect is not followed), a body that is not a JSON object, no
///   `issuer`: remembered, the next URL;
/// - a failed fetch (network, 5 s, 256 KiB): [`Error::Unreachable`] at once;
/// - the first document of `issuer`: the answer, or its error (a member of the wrong type, an
///   endpoint that is not https).
///
/// When no URL gave one: [`Error::IssuerMismatch`] if a document named another issuer, else
/// the first error remembered, else [`Error::NoMetadata`] (every URL answered `4xx`: the only
/// case where the 2025-03-26 defaults may stand in).
pub(crate) async fn discover(fetch: &dyn Fetch, issuer: &str) -> Result<AuthServer, Error> {
    let insecure = |why: String| Error::InsecureEndpoint {
        url: remote_text(issuer),
        why,
    };
    check_url(issuer).map_err(|e| insecure(e.to_string()))?;
    let urls = metadata_urls(issuer).map_err(|why| insecure(why.to_owned()))?;
    let mut mismatch = None;
    let mut other = None;
    let mut tried = Vec::new();
    for url in urls {
        let document = match fetch_document(fetch, &url, issuer).await {
            Ok(document) => document,
            Err(Unusable::Fetch(source)) => return Err(Error::Unreachable { url, source }),
            Err(Unusable::Status(status)) if status.is_client_error() => {
                tried.push((url, format!("status {status}")));
                continue;
            }
            Err(Unusable::OtherIssuer(found)) => {
                tracing::debug!(%url, "authorization server metadata of another issuer");
                tried.push((url.clone(), "another issuer".to_owned()));
                mismatch.get_or_insert(Error::IssuerMismatch {
                    expected: issuer.to_owned(),
                    found: remote_text(&found),
                    url,
                });
                continue;
            }
            Err(why) => {
                tried.push((url.clone(), why.to_string()));
                other.get_or_insert(Error::Metadata {
                    url,
                    why: remote_text(&why.to_string()),
                });
                continue;
            }
        };
        let document: Document =
            serde_json::from_value(Value::Object(document)).map_err(|e| Error::Metadata {
                url: url.clone(),
                why: remote_text(&format!("malformed: {e}")),
            })?;
        return AuthServer::from_document(&url, document);
    }
    Err(mismatch.or(other).unwrap_or(Error::NoMetadata {
        issuer: issuer.to_owned(),
        tried,
    }))
}
