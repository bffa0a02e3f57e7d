//! The server's canonical URI (RFC 8707 section 2, MCP's "canonical server URI"): what tokens
//! must name as their audience, and where the protected resource metadata lives (RFC 9728 3.1).
//!
//! [`Parts`] (splitting a URI, the origin, loopback hosts) and [`WELL_KNOWN`] serve both
//! halves; [`Resource`] and [`same_resource`] are the resource server's.

#[cfg(feature = "server")]
use crate::ConfigError;

/// The well-known suffix of RFC 9728 section 3.
pub(crate) const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The canonical server URI, parsed once.
#[cfg(feature = "server")]
///
/// Canonical form: an absolute `http` or `https` URI without a fragment or user information;
/// scheme and host lower-cased; the scheme's default port dropped; one trailing `/` of the path
/// dropped (`https://h/` is `https://h`, `https://h/mcp/` is `https://h/mcp`); path and query
/// otherwise kept as written (no percent-encoding normalisation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resource {
    /// The canonical form.
    uri: String,
    /// `scheme://authority` (a prefix of `uri`).
    origin_len: usize,
    /// Where the path ends and the query (if any, with its `?`) begins.
    path_end: usize,
}

/// A URI's components, as far as either half needs them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parts<'a> {
    /// The scheme, lower-cased.
    pub(crate) scheme: String,
    /// The host, lower-cased (`[::1]` keeps its brackets).
    pub(crate) host: String,
    /// The port, if given and not the scheme's default.
    pub(crate) port: Option<u16>,
    /// The path (possibly empty).
    pub(crate) path: &'a str,
    /// The query without its `?`, if any.
    pub(crate) query: Option<&'a str>,
}

impl<'a> Parts<'a> {
    /// Splits an absolute `http` or `https` URI. Refuses anything else, a fragment, user
    /// information, an empty host, a bad port, and whitespace or control characters.
    pub(crate) fn split(uri: &'a str) -> Result<Parts<'a>, &'static str> {
        if uri
            .chars()
            .any(|c| c.is_ascii_whitespace() || c.is_control())
        {
            return Err("contains whitespace or control characters");
        }
        if uri.contains('#') {
            return Err("has a fragment");
        }
        let (scheme, rest) = uri.split_once("://").ok_or("is not an absolute URI")?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => 443,
            "http" => 80,
            _ => return Err("is not http or https"),
        };
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        if authority.contains('@') {
            return Err("has user information");
        }
        let (host, port) = match authority.rfind(':') {
            // A colon inside `[...]` belongs to an IPv6 address.
            Some(colon) if !authority[colon..].contains(']') => {
                (&authority[..colon], &authority[colon + 1..])
            }
            _ => (authority, ""),
        };
        if host.is_empty() {
            return Err("has no host");
        }
        let port = if port.is_empty() {
            None
        } else if !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err("has an invalid port");
        } else {
            match port.parse::<u16>() {
                Ok(p) if p == default_port => None,
                Ok(p) => Some(p),
                Err(_) => return Err("has an invalid port"),
            }
        };
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (tail, None),
        };
        Ok(Parts {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
            path,
            query,
        })
    }

    /// Whether the host is a loopback host ([`is_loopback`](crate::fetch::is_loopback)).
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn is_loopback(&self) -> bool {
        crate::fetch::is_loopback(&self.host)
    }

    /// `scheme://host[:port]`, scheme and host lower-cased and a default port dropped: two URIs
    /// with the same origin (RFC 6454) have equal `origin()`s.
    #[cfg_attr(not(feature = "client"), allow(dead_code))]
    pub(crate) fn origin(&self) -> String {
        match self.port {
            Some(port) => format!("{}://{}:{port}", self.scheme, self.host),
            None => format!("{}://{}", self.scheme, self.host),
        }
    }
}

#[cfg(feature = "server")]
impl Resource {
    /// Parses and canonicalises the server's URI.
    pub(crate) fn parse(uri: &str) -> Result<Resource, ConfigError> {
        let parts = Parts::split(uri).map_err(|why| ConfigError::Resource {
            uri: uri.to_owned(),
            why,
        })?;
        let mut canonical = format!("{}://{}", parts.scheme, parts.host);
        if let Some(port) = parts.port {
            canonical.push(':');
            canonical.push_str(&port.to_string());
        }
        let origin_len = canonical.len();
        canonical.push_str(parts.path.strip_suffix('/').unwrap_or(parts.path));
        let path_end = canonical.len();
        if let Some(query) = parts.query {
            canonical.push('?');
            canonical.push_str(query);
        }
        Ok(Resource {
            uri: canonical,
            origin_len,
            path_end,
        })
    }

    /// The canonical form.
    pub(crate) fn as_str(&self) -> &str {
        &self.uri
    }

    /// `scheme://authority`.
    fn origin(&self) -> &str {
        &self.uri[..self.origin_len]
    }

    /// The path, without a trailing `/` (empty for the root).
    fn path(&self) -> &str {
        &self.uri[self.origin_len..self.path_end]
    }

    /// The metadata URL (RFC 9728 3.1): the well-known suffix inserted between the authority
    /// and the path, `https://h/.well-known/oauth-protected-resource/mcp` for `https://h/mcp`;
    /// a query stays at the end.
    pub(crate) fn metadata_url(&self) -> String {
        format!(
            "{}{WELL_KNOWN}{}",
            self.origin(),
            &self.uri[self.origin_len..]
        )
    }

    /// The paths the metadata is served at: the path-inserted one (RFC 9728 3.1) and, when the
    /// resource has a path, the root one too (MCP lets clients try either).
    pub(crate) fn well_known_paths(&self) -> Vec<String> {
        let path = self.path();
        if path.is_empty() {
            vec![WELL_KNOWN.to_owned()]
        } else {
            vec![format!("{WELL_KNOWN}{path}"), WELL_KNOWN.to_owned()]
        }
    }

    /// A DPoP proof's expected `htu` for a request to `request_path`: this resource's scheme
    /// and authority (not the request's `Host`, which a proxy may have changed) and the path,
    /// without query or fragment.
    pub(crate) fn htu(&self, request_path: &str) -> String {
        let path = request_path
            .split(['?', '#'])
            .next()
            .unwrap_or(request_path);
        let path = if path.is_empty() { "/" } else { path };
        format!("{}{path}", self.origin())
    }
}

#[cfg(feature = "server")]
/// Whether two resource identifiers name the same resource: equal canonical forms when both
/// parse as [`Resource`]s (so scheme and host case, a default port and one trailing slash do not
/// matter), else equal byte for byte (an audience such as `api://files` or a client id).
pub(crate) fn same_resource(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (Resource::parse(a), Resource::parse(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "server")]
    fn canonical(uri: &str) -> String {
        Resource::parse(uri).unwrap().as_str().to_owned()
    }

    #[cfg(feature = "server")]
    #[test]
    fn canonical_forms() {
        assert_eq!(
            canonical("https://mcp.example.com/mcp"),
            "https://mcp.example.com/mcp"
        );
        assert_eq!(
            canonical("HTTPS://MCP.Example.COM/MCP"),
            "https://mcp.example.com/MCP"
        );
        assert_eq!(
            canonical("https://mcp.example.com/"),
            "https://mcp.example.com"
        );
        assert_eq!(
            canonical("https://mcp.example.com"),
            "https://mcp.example.com"
        );
        assert_eq!(canonical("https://h/mcp/"), "https://h/mcp");
        assert_eq!(canonical("https://h:443/mcp"), "https://h/mcp");
        assert_eq!(canonical("http://h:80/mcp"), "http://h/mcp");
        assert_eq!(canonical("https://h:8443/mcp"), "https://h:8443/mcp");
        assert_eq!(canonical("http://h:443/mcp"), "http://h:443/mcp");
        assert_eq!(canonical("http://[::1]:8080/mcp"), "http://[::1]:8080/mcp");
        assert_eq!(
            canonical("https://h/mcp?tenant=A"),
            "https://h/mcp?tenant=A"
        );
        assert_eq!(
            canonical("https://h/mcp/?tenant=A"),
            "https://h/mcp?tenant=A"
        );
        assert_eq!(canonical("https://h?x"), "https://h?x");
    }

    #[cfg(feature = "server")]
    #[test]
    fn non_canonical_uris_are_refused() {
        for (uri, why) in [
            ("https://h/mcp#frag", "has a fragment"),
            ("/mcp", "is not an absolute URI"),
            ("mcp.example.com/mcp", "is not an absolute URI"),
            ("ftp://h/mcp", "is not http or https"),
            ("urn:example:mcp", "is not an absolute URI"),
            ("https:///mcp", "has no host"),
            ("https://:443/mcp", "has no host"),
            ("https://user:pw@h/mcp", "has user information"),
            ("https://h:http/mcp", "has an invalid port"),
            ("https://h:99999/mcp", "has an invalid port"),
            (
                "https://h/m cp",
                "contains whitespace or control characters",
            ),
            (
                "https://h/mcp\n",
                "contains whitespace or control characters",
            ),
        ] {
            match Resource::parse(uri) {
                Err(ConfigError::Resource { uri: u, why: w }) => {
                    assert_eq!((u.as_str(), w), (uri, why))
                }
                other => panic!("{uri}: {other:?}"),
            }
        }
    }

    #[cfg(feature = "server")]
    #[test]
    fn comparisons() {
        assert!(same_resource("https://h/mcp", "https://h/mcp"));
        assert!(same_resource("HTTPS://H/mcp", "https://h/mcp"));
        assert!(same_resource("https://h/mcp/", "https://h/mcp"));
        assert!(same_resource("https://h:443/mcp", "https://h/mcp"));
        assert!(same_resource("https://h/", "https://h"));
        assert!(same_resource("https://h/mcp?a=1", "https://h/mcp/?a=1"));
        assert!(same_resource("api://files", "api://files"));
        // The path is case-sensitive; other schemes, ports, paths and queries differ.
        assert!(!same_resource("https://h/MCP", "https://h/mcp"));
        assert!(!same_resource("http://h/mcp", "https://h/mcp"));
        assert!(!same_resource("https://h:8443/mcp", "https://h/mcp"));
        assert!(!same_resource("https://h/mcp/x", "https://h/mcp"));
        assert!(!same_resource("https://h/mcp?a=1", "https://h/mcp"));
        assert!(!same_resource("https://h/mcp?a=1", "https://h/mcp?a=2"));
        assert!(!same_resource("https://h/mcp//", "https://h/mcp"));
        assert!(!same_resource("https://other/mcp", "https://h/mcp"));
        // Strings that are not resources compare exactly.
        assert!(!same_resource("API://files", "api://files"));
        assert!(!same_resource("https://h/mcp#x", "https://h/mcp"));
        assert!(!same_resource("client-id", "https://h/mcp"));
    }

    #[cfg(feature = "server")]
    #[test]
    fn well_known_paths_and_metadata_url() {
        let root = Resource::parse("https://h/").unwrap();
        assert_eq!(
            root.well_known_paths(),
            ["/.well-known/oauth-protected-resource"]
        );
        assert_eq!(
            root.metadata_url(),
            "https://h/.well-known/oauth-protected-resource"
        );
        let mcp = Resource::parse("https://h/mcp").unwrap();
        assert_eq!(
            mcp.well_known_paths(),
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(
            mcp.metadata_url(),
            "https://h/.well-known/oauth-protected-resource/mcp"
        );
        let nested = Resource::parse("http://127.0.0.1:8080/a/b/").unwrap();
        assert_eq!(
            nested.well_known_paths(),
            [
                "/.well-known/oauth-protected-resource/a/b",
                "/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(
            nested.metadata_url(),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource/a/b"
        );
        let query = Resource::parse("https://h/mcp?t=1").unwrap();
        assert_eq!(
            query.metadata_url(),
            "https://h/.well-known/oauth-protected-resource/mcp?t=1"
        );
        assert_eq!(
            query.well_known_paths()[0],
            "/.well-known/oauth-protected-resource/mcp"
        );
    }

    #[cfg(feature = "server")]
    #[test]
    fn htu_is_the_resource_origin_and_the_request_path() {
        let r = Resource::parse("HTTPS://H:443/mcp").unwrap();
        assert_eq!(r.htu("/mcp"), "https://h/mcp");
        assert_eq!(r.htu("/mcp?x=1"), "https://h/mcp");
        assert_eq!(r.htu(""), "https://h/");
        let r = Resource::parse("http://127.0.0.1:9/mcp").unwrap();
        assert_eq!(r.htu("/other"), "http://127.0.0.1:9/other");
    }

    #[test]
    fn origins_compare_scheme_host_and_port() {
        let origin = |uri| Parts::split(uri).unwrap().origin();
        assert_eq!(
            origin("HTTPS://MCP.Example.com:443/mcp?x"),
            "https://mcp.example.com"
        );
        assert_eq!(origin("http://127.0.0.1:80"), "http://127.0.0.1");
        assert_eq!(origin("http://[::1]:8080/a"), "http://[::1]:8080");
        assert_ne!(origin("http://h/mcp"), origin("https://h/mcp"));
        assert_ne!(origin("https://h:8443/mcp"), origin("https://h/mcp"));
    }

    #[test]
    fn loopback_hosts() {
        for (uri, loopback) in [
            ("http://localhost:1/x", true),
            ("http://127.0.0.1/x", true),
            ("http://127.9.8.7/x", true),
            ("http://[::1]:8/x", true),
            ("http://[0:0:0:0:0:0:0:1]:8/x", true),
            ("http://[::2]:8/x", false),
            ("http://LOCALHOST/x", true),
            ("http://10.0.0.1/x", false),
            ("http://localhost.example.com/x", false),
            ("http://127.0.0.1.nip.io/x", false),
        ] {
            assert_eq!(Parts::split(uri).unwrap().is_loopback(), loopback, "{uri}");
        }
    }
}
