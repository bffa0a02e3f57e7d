//! DNS-rebinding protection: the `Host` and `Origin` allow-lists.

use std::net::{IpAddr, SocketAddr};

/// Which hosts (the `Host` header) or origins (the host of the `Origin` header) are accepted.
/// Ports are never compared: a name on the list is accepted on any port.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllowList {
    /// `localhost`, `127.0.0.1` and `[::1]`: the default, right for a loopback bind.
    Loopback,
    /// These host names or addresses (compared without case; IPv6 in brackets or not).
    Hosts(Vec<String>),
    /// Anything: for a server behind a proxy that checks these itself. Never the default.
    Any,
}

impl AllowList {
    /// Whether `host` (a host name or address, without port) is on the list.
    pub fn allows(&self, host: &str) -> bool {
        let host = normalize(host);
        match self {
            AllowList::Any => true,
            AllowList::Loopback => matches!(host.as_str(), "localhost" | "127.0.0.1" | "::1"),
            AllowList::Hosts(hosts) => hosts.iter().any(|h| normalize(h) == host),
        }
    }
}

fn normalize(host: &str) -> String {
    host.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// Whether `addr` is a loopback address.
pub(crate) fn is_loopback(addr: &SocketAddr) -> bool {
    match addr.ip() {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The host of a `Host` header value (`name`, `name:port`, `[v6]:port`), if well formed.
pub(crate) fn host_of_authority(value: &str) -> Option<&str> {
    let value = value.trim();
    if value.is_empty() || value.contains(['/', '@', ' ', '?', '#']) {
        return None;
    }
    if let Some(rest) = value.strip_prefix('[') {
        let end = rest.find(']')?;
        let after = &rest[end + 1..];
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return Some(&value[..end + 2]);
    }
    match value.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => is_port(port).then_some(host),
        Some(_) => None,
        None => Some(value),
    }
}

/// The host of an `Origin` header value (`scheme://host[:port]`), if well formed. `null` and
/// anything else are `None`.
pub(crate) fn host_of_origin(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    host_of_authority(rest.strip_suffix('/').unwrap_or(rest))
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}

/// Why a request was refused by the Host/Origin checks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Forbidden {
    /// No `Host` header (and no authority in the URI).
    #[error("missing Host header")]
    MissingHost,
    /// The `Host` is not on the allow-list.
    #[error("Host not allowed (DNS rebinding protection)")]
    Host,
    /// The `Origin` is not on the allow-list, or malformed.
    #[error("Origin not allowed (DNS rebinding protection)")]
    Origin,
    /// The host allow-list is [`AllowList::Loopback`] and the peer is not on loopback.
    #[error(
        "the peer is not on loopback and allowed_hosts is the loopback list: name the allowed hosts (allowed_hosts and allowed_origins) to serve other machines"
    )]
    PeerNotLoopback,
    /// The host allow-list is [`AllowList::Loopback`] and the peer's address is unknown.
    #[error(
        "the peer's address is unknown and allowed_hosts is the loopback list: give the service the peer address (a PeerAddr request extension, or axum's ConnectInfo<SocketAddr> via into_make_service_with_connect_info with feature axum of modelctx-http), or name the allowed hosts"
    )]
    UnknownPeer,
}

/// With the loopback host list, the peer must be on loopback too: `Host: localhost` is easy to
/// send from anywhere, so the Host check alone stops DNS rebinding, not remote clients. `peer`
/// is the peer's address when known; an unknown peer fails closed.
pub(crate) fn check_peer(peer: Option<SocketAddr>, hosts: &AllowList) -> Result<(), Forbidden> {
    if *hosts != AllowList::Loopback {
        return Ok(());
    }
    match peer {
        Some(peer) if is_loopback(&peer) => Ok(()),
        Some(_) => Err(Forbidden::PeerNotLoopback),
        None => Err(Forbidden::UnknownPeer),
    }
}

/// Checks a request's `Host` (or URI authority) and, when present, its `Origin`.
pub(crate) fn check(
    parts: &http::request::Parts,
    hosts: &AllowList,
    origins: &AllowList,
) -> Result<(), Forbidden> {
    // `Some(None)`: a Host that is not a well-formed authority.
    let host = match parts.headers.get(http::header::HOST) {
        Some(value) => Some(value.to_str().ok().and_then(host_of_authority)),
        None => parts.uri.authority().map(|a| Some(a.host())),
    };
    if *hosts != AllowList::Any {
        match host {
            None => return Err(Forbidden::MissingHost),
            Some(Some(host)) if hosts.allows(host) => {}
            Some(_) => return Err(Forbidden::Host),
        }
    }
    if let Some(origin) = parts.headers.get(http::header::ORIGIN)
        && *origins != AllowList::Any
    {
        let allowed = origin
            .to_str()
            .ok()
            .and_then(host_of_origin)
            .is_some_and(|host| origins.allows(host));
        if !allowed {
            return Err(Forbidden::Origin);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(host: Option<&str>, origin: Option<&str>) -> http::request::Parts {
        let mut builder = http::Request::post("/mcp");
        if let Some(host) = host {
            builder = builder.header("host", host);
        }
        if let Some(origin) = origin {
            builder = builder.header("origin", origin);
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn loopback_hosts_are_allowed_on_any_port() {
        for host in [
            "localhost",
            "localhost:3000",
            "127.0.0.1:1",
            "[::1]:8080",
            "[::1]",
            "LOCALHOST",
        ] {
            assert_eq!(
                check(
                    &parts(Some(host), None),
                    &AllowList::Loopback,
                    &AllowList::Loopback
                ),
                Ok(()),
                "{host}"
            );
        }
    }

    #[test]
    fn rebinding_probes_are_forbidden() {
        let cases = [
            (Some("evil.example.com"), None, Forbidden::Host),
            (
                Some("evil.example.com:80"),
                Some("http://evil.example.com"),
                Forbidden::Host,
            ),
            (
                Some("localhost:3000"),
                Some("http://evil.example.com"),
                Forbidden::Origin,
            ),
            (Some("localhost:3000"), Some("null"), Forbidden::Origin),
            (
                Some("localhost:3000"),
                Some("file://localhost"),
                Forbidden::Origin,
            ),
            (Some("localhost.evil.com"), None, Forbidden::Host),
            (Some("127.0.0.1.evil.com"), None, Forbidden::Host),
            (Some("localhost@evil.com"), None, Forbidden::Host),
            (Some("localhost:99999999"), None, Forbidden::Host),
            (None, None, Forbidden::MissingHost),
        ];
        for (host, origin, expected) in cases {
            assert_eq!(
                check(
                    &parts(host, origin),
                    &AllowList::Loopback,
                    &AllowList::Loopback
                ),
                Err(expected),
                "{host:?} {origin:?}"
            );
        }
        assert_eq!(
            check(
                &parts(Some("127.0.0.1:5"), Some("http://127.0.0.1:5")),
                &AllowList::Loopback,
                &AllowList::Loopback
            ),
            Ok(())
        );
    }

    #[test]
    fn explicit_lists_and_any() {
        let hosts = AllowList::Hosts(vec!["mcp.example.com".into()]);
        let origins = AllowList::Hosts(vec!["app.example.com".into()]);
        assert_eq!(
            check(
                &parts(Some("MCP.example.com:443"), Some("https://app.example.com")),
                &hosts,
                &origins
            ),
            Ok(())
        );
        assert_eq!(
            check(
                &parts(Some("mcp.example.com"), Some("https://other.example.com")),
                &hosts,
                &origins
            ),
            Err(Forbidden::Origin)
        );
        assert_eq!(
            check(
                &parts(Some("anything"), Some("https://x")),
                &AllowList::Any,
                &AllowList::Any
            ),
            Ok(())
        );
    }

    #[test]
    fn finding_6_the_loopback_list_needs_a_loopback_peer() {
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let local6: SocketAddr = "[::1]:5000".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000".parse().unwrap();
        let remote: SocketAddr = "192.0.2.7:5000".parse().unwrap();
        for peer in [local, local6, mapped] {
            assert_eq!(check_peer(Some(peer), &AllowList::Loopback), Ok(()));
        }
        assert_eq!(
            check_peer(Some(remote), &AllowList::Loopback),
            Err(Forbidden::PeerNotLoopback)
        );
        assert_eq!(
            check_peer(None, &AllowList::Loopback),
            Err(Forbidden::UnknownPeer)
        );
        let named = AllowList::Hosts(vec!["mcp.example.com".into()]);
        assert_eq!(check_peer(Some(remote), &named), Ok(()));
        assert_eq!(check_peer(None, &named), Ok(()));
        assert_eq!(check_peer(None, &AllowList::Any), Ok(()));
    }

    #[test]
    fn loopback_binds_are_recognised() {
        assert!(is_loopback(&"127.0.0.1:0".parse().unwrap()));
        assert!(is_loopback(&"[::1]:0".parse().unwrap()));
        assert!(!is_loopback(&"0.0.0.0:0".parse().unwrap()));
        assert!(!is_loopback(&"192.168.1.2:80".parse().unwrap()));
    }
}
