//! Authorization server metadata, as both halves find it: where it lives (RFC 8414 section 3,
//! OpenID Connect Discovery 1.0 section 4) and the one check every document must pass before
//! anything in it is used, its `issuer` equal to the expected one byte for byte (RFC 8414
//! section 3.3). What each half then reads from the document is its own (`discovery.rs` for the
//! resource server, `client/asmeta.rs` for the client).

use std::fmt;

use serde_json::{Map, Value};

use crate::fetch::{Fetch, FetchError};

/// The metadata URLs for `issuer`, in the order they are tried: the RFC 8414 well-known URI
/// inserted before the issuer's path, the OpenID Connect one inserted the same way, then the
/// OpenID Connect one appended to the issuer (OpenID Connect Discovery 1.0 section 4). A
/// terminating `/` of the issuer's path is removed first (RFC 8414 section 3.1); an issuer
/// without a path has the first two only. Refuses (with the reason) an issuer that is not an
/// absolute URL or has a query or fragment.
pub(crate) fn metadata_urls(issuer: &str) -> Result<Vec<String>, &'static str> {
    let uri: http::Uri = issuer.parse().map_err(|_| "not a URL")?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err("not an absolute URL");
    };
    if uri.query().is_some() || issuer.contains('#') {
        return Err("an issuer has no query or fragment");
    }
    let origin = format!("{scheme}://{authority}");
    let path = uri.path().trim_end_matches('/');
    let mut urls = vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
        format!("{origin}{path}/.well-known/openid-configuration"),
    ];
    urls.dedup();
    Ok(urls)
}

/// Why one metadata URL gave no usable document.
#[derive(Debug)]
pub(crate) enum Unusable {
    /// The request failed (refused URL, network, timeout, body too large).
    Fetch(FetchError),
    /// Another status than `200` (a redirect is not followed).
    Status(http::StatusCode),
    /// The body is not a JSON object.
    NotJson(serde_json::Error),
    /// The document has no string `issuer`.
    NoIssuer,
    /// The document names another issuer (not byte-equal to the one expected).
    OtherIssuer(String),
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unusable::Fetch(e) => write!(f, "{e}"),
            Unusable::Status(status) => write!(f, "status {status}"),
            Unusable::NotJson(e) => write!(f, "not a JSON object: {e}"),
            Unusable::NoIssuer => f.write_str("no issuer member"),
            Unusable::OtherIssuer(found) => write!(f, "names another issuer, {found}"),
        }
    }
}

/// `GET url` and the document there, if it is a JSON object whose `issuer` is `issuer` byte for
/// byte (no normalisation: case, a trailing `/` and a default port all count).
pub(crate) async fn fetch_document(
    fetch: &dyn Fetch,
    url: &str,
    issuer: &str,
) -> Result<Map<String, Value>, Unusable> {
    let response = fetch.get(url).await.map_err(Unusable::Fetch)?;
    if response.status != http::StatusCode::OK {
        return Err(Unusable::Status(response.status));
    }
    let document: Map<String, Value> = response.json().map_err(Unusable::NotJson)?;
    match document.get("issuer") {
        Some(Value::String(found)) if found == issuer => Ok(document),
        Some(Value::String(found)) => Err(Unusable::OtherIssuer(found.clone())),
        _ => Err(Unusable::NoIssuer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_urls_are_path_inserted_then_appended() {
        assert_eq!(
            metadata_urls("https://id.example.com/tenant/a/").unwrap(),
            [
                "https://id.example.com/.well-known/oauth-authorization-server/tenant/a",
                "https://id.example.com/.well-known/openid-configuration/tenant/a",
                "https://id.example.com/tenant/a/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("https://id.example.com").unwrap(),
            [
                "https://id.example.com/.well-known/oauth-authorization-server",
                "https://id.example.com/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("https://id.example.com/").unwrap(),
            metadata_urls("https://id.example.com").unwrap()
        );
        assert_eq!(
            metadata_urls("https://id.example.com/?tenant=a"),
            Err("an issuer has no query or fragment")
        );
        assert_eq!(
            metadata_urls("https://id.example.com/#a"),
            Err("an issuer has no query or fragment")
        );
        assert_eq!(metadata_urls("/tenant"), Err("not an absolute URL"));
        assert_eq!(metadata_urls("https://a b"), Err("not a URL"));
    }
}
