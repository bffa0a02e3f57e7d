//! The protected resource metadata (RFC 9728) as the client finds it: the URL of the 401's
//! `resource_metadata` first, else the well-known URI with the server's path inserted, else the
//! one at the root (MCP 2025-06-18 on); its `resource` checked against the server's URL before
//! any authorization server is asked; and the 2025-03-26 rules when the server has none.

use serde::Deserialize;
use serde_json::Value;

use super::Error;
use super::error::remote_text;
use crate::canonical::{Parts, WELL_KNOWN};
use crate::fetch::{Fetch, check_url};

/// The MCP server's URL as the application gave it, split once.
#[derive(Debug, Clone)]
pub(crate) struct ServerUrl {
    /// The URL as given, without a fragment.
    url: String,
    /// `scheme://authority` as given (the 2025-03-26 authorization base URL).
    origin_as_given: String,
    /// The origin compared (scheme and host lower-cased, default port dropped).
    origin: String,
    /// The path, without a trailing `/` (empty for the root).
    path: String,
    /// The query, without its `?`.
    query: Option<String>,
}

impl ServerUrl {
    /// Splits `url`: an absolute `http` or `https` URL without user information; a fragment is
    /// dropped.
    pub(crate) fn parse(url: &str) -> Result<ServerUrl, Error> {
        let invalid = |why| Error::InvalidUrl {
            url: url.to_owned(),
            why,
        };
        let without_fragment = url.split('#').next().unwrap_or(url);
        let parts = Parts::split(without_fragment).map_err(invalid)?;
        let (scheme, rest) = without_fragment
            .split_once("://")
            .ok_or(invalid("is not an absolute URI"))?;
        let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
        Ok(ServerUrl {
            url: without_fragment.to_owned(),
            origin_as_given: format!("{scheme}://{authority}"),
            origin: parts.origin(),
            path: parts.path.trim_end_matches('/').to_owned(),
            query: parts.query.map(str::to_owned),
        })
    }

    /// The URL as given, without a fragment.
    pub(crate) fn as_str(&self) -> &str {
        &self.url
    }

    /// `scheme://authority` as given: the authorization server of a server without protected
    /// resource metadata (MCP 2025-03-26, "authorization base URL").
    pub(crate) fn origin_as_given(&self) -> &str {
        &self.origin_as_given
    }

    /// The resource of a server without protected resource metadata: the URL as given, without
    /// a fragment, and without the `/` of an empty path (`https://h/` is `https://h`).
    pub(crate) fn legacy_resource(&self) -> String {
        match self.url.strip_suffix('/') {
            Some(origin) if origin == self.origin_as_given => origin.to_owned(),
            _ => self.url.clone(),
        }
    }

    /// The well-known URLs of its metadata, in the order tried: the path-inserted one (when the
    /// URL has a path), then the root one. A query is dropped.
    fn well_known_urls(&self) -> Vec<String> {
        let mut urls = Vec::with_capacity(2);
        if !self.path.is_empty() {
            urls.push(format!("{}{WELL_KNOWN}{}", self.origin_as_given, self.path));
        }
        urls.push(format!("{}{WELL_KNOWN}", self.origin_as_given));
        urls
    }

    /// Whether `published` (a metadata `resource`) is this URL or a parent of it: the same
    /// origin, and a path that is this one's or a prefix of it ending at a `/` (`/` covers
    /// everything, `/mcp` covers `/mcp` and `/mcp/x`, not `/mcpx`). A `resource` with a query
    /// must have this URL's path and query.
    pub(crate) fn is_covered_by(&self, published: &str) -> bool {
        let Ok(parts) = Parts::split(published) else {
            return false;
        };
        if parts.origin() != self.origin {
            return false;
        }
        let path = parts.path.trim_end_matches('/');
        match parts.query {
            Some(query) => path == self.path && self.query.as_deref() == Some(query),
            None => {
                path.is_empty()
                    || path == self.path
                    || self
                        .path
                        .strip_prefix(path)
                        .is_some_and(|rest| rest.starts_with('/'))
            }
        }
    }
}

/// A protected resource metadata document, checked: its `resource` covers the server's URL
/// and it names at least one authorization server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProtectedResource {
    /// Where it was found.
    pub url: String,
    /// `resource`, exactly as published: the RFC 8707 `resource` of every authorization and
    /// token request.
    pub resource: String,
    /// `authorization_servers`, in order (at least one).
    pub authorization_servers: Vec<String>,
    /// `scopes_supported`, if listed.
    pub scopes_supported: Option<Vec<String>>,
    /// `dpop_signing_alg_values_supported` (RFC 9449 section 5.1), if listed.
    pub dpop_signing_alg_values_supported: Option<Vec<String>>,
}

/// The members read (others are ignored).
#[derive(Deserialize)]
struct Document {
    resource: Option<String>,
    #[serde(default)]
    authorization_servers: Option<Vec<String>>,
    #[serde(default)]
    scopes_supported: Option<Vec<String>>,
    #[serde(default)]
    dpop_signing_alg_values_supported: Option<Vec<String>>,
}

/// Finds the protected resource metadata of `server`: at `challenge_url` (the 401's
/// `resource_metadata`, which may be on another origin) when given, else at the well-known
/// URLs. A `404` or `410` sends the client to the next URL; `Ok(None)` when every URL did
/// (the server has none: the 2025-03-26 rules apply). Any other status, a bad document, a
/// `resource` that does not cover the server ([`Error::ResourceMismatch`]), a URL that is not
/// https (or http on loopback) and a failed fetch end the search with the error.
pub(crate) async fn discover(
    fetch: &dyn Fetch,
    server: &ServerUrl,
    challenge_url: Option<&str>,
) -> Result<Option<ProtectedResource>, Error> {
    let mut urls: Vec<String> = challenge_url.map(str::to_owned).into_iter().collect();
    for url in server.well_known_urls() {
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    for url in urls {
        check_url(&url).map_err(|e| Error::InsecureEndpoint {
            url: url.clone(),
            why: e.to_string(),
        })?;
        let response = fetch.get(&url).await.map_err(|source| Error::Unreachable {
            url: url.clone(),
            source,
        })?;
        match response.status.as_u16() {
            200 => {}
            404 | 410 => {
                tracing::debug!(%url, status = %response.status, "no protected resource metadata");
                continue;
            }
            _ => {
                return Err(Error::Metadata {
                    url,
                    why: format!("status {}", response.status),
                });
            }
        }
        let bad = |why: String| Error::Metadata {
            url: url.clone(),
            why,
        };
        let value: Value = response
            .json()
            .map_err(|e| bad(remote_text(&format!("not JSON: {e}"))))?;
        if !value.is_object() {
            return Err(bad("not a JSON object".into()));
        }
        let document: Document = serde_json::from_value(value)
            .map_err(|e| bad(remote_text(&format!("malformed: {e}"))))?;
        let resource = document
            .resource
            .ok_or_else(|| bad("no resource member".into()))?;
        if !server.is_covered_by(&resource) {
            return Err(Error::ResourceMismatch {
                published: remote_text(&resource),
                url: server.as_str().to_owned(),
            });
        }
        let authorization_servers = document.authorization_servers.unwrap_or_default();
        if authorization_servers.is_empty() {
            return Err(bad("names no authorization server".into()));
        }
        return Ok(Some(ProtectedResource {
            url,
            resource,
            authorization_servers,
            scopes_supported: document.scopes_supported,
            dpop_signing_alg_values_supported: document.dpop_signing_alg_values_supported,
        }));
    }
    Ok(None)
}
