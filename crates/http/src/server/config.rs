//! The server's settings, with secure defaults.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::event_store::{EventStore, MemoryEventStore};
use crate::security::{AllowList, is_loopback};

/// Legacy (initialize-based) versions served by default.
pub(crate) const LEGACY_VERSIONS: &[&str] =
    &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// Modern versions served by default.
pub(crate) const MODERN_VERSIONS: &[&str] = &["2026-07-28"];

/// How the server behaves. Every default is the safe one; `docs/security.md` lists them.
#[derive(Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The MCP endpoint's path (default `/mcp`); other paths get 404. `None`: any path (for an
    /// application that routes to the service itself).
    pub path: Option<String>,
    /// Accepted `Host` values (default: loopback names on any port). A server bound to a
    /// non-loopback address refuses to start with the default: name the hosts.
    pub allowed_hosts: AllowList,
    /// Accepted `Origin` hosts, when the header is present (default: loopback names).
    pub allowed_origins: AllowList,
    /// The largest request body, in bytes (default 4 MiB); larger ones get 413.
    pub max_body: usize,
    /// The most legacy sessions open at once (default 1024). When the table is full, the least
    /// recently used idle session (no open stream, no request in flight) is ended to make room;
    /// with none idle, `initialize` gets 503 with `Retry-After`.
    pub max_sessions: usize,
    /// A legacy session with no request and no open stream for this long is ended (default
    /// 30 minutes).
    pub session_idle_timeout: Duration,
    /// The legacy versions accepted in `MCP-Protocol-Version` (default: all four). Empty: a
    /// modern-only server, which answers GET and DELETE with 405.
    pub legacy_versions: Vec<String>,
    /// The modern versions served (default: 2026-07-28). Empty: a legacy-only server.
    pub modern_versions: Vec<String>,
    /// Whether a client may end its legacy session with DELETE (default true; else 405).
    pub allow_delete: bool,
    /// The `retry` (reconnection delay) sent in the priming event of 2025-11-25 streams
    /// (default 1 s).
    pub sse_retry: Duration,
    /// How often an idle SSE stream gets a keep-alive comment (default 15 s; `None`: never).
    pub keep_alive: Option<Duration>,
    /// Answer every POST of a single request with an SSE stream, even when the response is all
    /// there is to send (default false: such a POST gets `application/json`; SSE only once
    /// something comes before the response). A batch is still answered as JSON when nothing
    /// precedes its responses.
    pub sse_responses: bool,
    /// Messages waiting to be written on one live stream (default 256); a client that falls
    /// further behind is disconnected, and resumes from the event store.
    pub stream_buffer: usize,
    /// Messages held for the standalone stream while none is open (default 256); beyond, the
    /// oldest is dropped (and a warning logged).
    pub standalone_queue: usize,
    /// Where legacy SSE events wait for resumption (default: a bounded [`MemoryEventStore`]).
    pub event_store: Arc<dyn EventStore>,
    /// Also serve the deprecated HTTP+SSE transport of 2024-11-05 on these paths (default:
    /// not served).
    #[cfg(feature = "legacy-sse")]
    pub old_sse: Option<super::OldSsePaths>,
    /// A legacy session still in its handshake (no request after `initialize`: only
    /// notifications, responses or GET streams) is ended once it is this old, open streams or
    /// not (default 60 s). It is checked when idle sessions are swept.
    pub handshake_timeout: Duration,
    /// The most legacy sessions one [`Principal`](super::Principal) may hold (default `None`:
    /// no cap of its own). At the cap, that principal's least recently used idle session is
    /// ended to make room; with none idle, `initialize` gets 503.
    pub max_sessions_per_principal: Option<usize>,
    /// The most legacy sessions one peer IP address may hold, from the
    /// [`PeerAddr`](super::PeerAddr) extension (default `None`: no cap of its own). At the cap,
    /// that address's least recently used idle session is ended to make room; with none idle,
    /// `initialize` gets 503.
    pub max_sessions_per_peer: Option<usize>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("path", &self.path)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("max_body", &self.max_body)
            .field("max_sessions", &self.max_sessions)
            .field("session_idle_timeout", &self.session_idle_timeout)
            .field("legacy_versions", &self.legacy_versions)
            .field("modern_versions", &self.modern_versions)
            .field("allow_delete", &self.allow_delete)
            .field("sse_responses", &self.sse_responses)
            .field("handshake_timeout", &self.handshake_timeout)
            .field(
                "max_sessions_per_principal",
                &self.max_sessions_per_principal,
            )
            .field("max_sessions_per_peer", &self.max_sessions_per_peer)
            .finish_non_exhaustive()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            path: Some("/mcp".into()),
            allowed_hosts: AllowList::Loopback,
            allowed_origins: AllowList::Loopback,
            max_body: 4 * 1024 * 1024,
            max_sessions: 1024,
            session_idle_timeout: Duration::from_secs(30 * 60),
            legacy_versions: LEGACY_VERSIONS.iter().map(|v| (*v).to_owned()).collect(),
            modern_versions: MODERN_VERSIONS.iter().map(|v| (*v).to_owned()).collect(),
            allow_delete: true,
            sse_retry: Duration::from_secs(1),
            keep_alive: Some(Duration::from_secs(15)),
            sse_responses: false,
            stream_buffer: 256,
            standalone_queue: 256,
            event_store: Arc::new(MemoryEventStore::default()),
            #[cfg(feature = "legacy-sse")]
            old_sse: None,
            handshake_timeout: Duration::from_secs(60),
            max_sessions_per_principal: None,
            max_sessions_per_peer: None,
        }
    }
}

/// A configuration that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A non-loopback bind with the loopback allow-lists: browsers could reach it under any
    /// name. Set `allowed_hosts` and `allowed_origins`.
    #[error(
        "binding {0} (not loopback) needs explicit allowed_hosts and allowed_origins (DNS rebinding protection)"
    )]
    PublicBindNeedsAllowLists(SocketAddr),
    /// Neither era is served.
    #[error("no protocol version to serve: legacy_versions and modern_versions are both empty")]
    NoVersions,
}

impl ServerConfig {
    /// Checks that the configuration can serve on `addr`.
    pub fn check(&self, addr: Option<SocketAddr>) -> Result<(), ConfigError> {
        if self.legacy_versions.is_empty() && self.modern_versions.is_empty() {
            return Err(ConfigError::NoVersions);
        }
        if let Some(addr) = addr
            && !is_loopback(&addr)
            && (self.allowed_hosts == AllowList::Loopback
                || self.allowed_origins == AllowList::Loopback)
        {
            return Err(ConfigError::PublicBindNeedsAllowLists(addr));
        }
        Ok(())
    }

    pub(crate) fn serves_legacy(&self) -> bool {
        !self.legacy_versions.is_empty()
    }

    pub(crate) fn serves_modern(&self) -> bool {
        !self.modern_versions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_bind_needs_explicit_lists() {
        let config = ServerConfig::default();
        assert_eq!(config.check(Some("127.0.0.1:0".parse().unwrap())), Ok(()));
        let public = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(
            config.check(Some(public)),
            Err(ConfigError::PublicBindNeedsAllowLists(public))
        );
        let named = ServerConfig {
            allowed_hosts: AllowList::Hosts(vec!["mcp.example.com".into()]),
            allowed_origins: AllowList::Hosts(vec!["app.example.com".into()]),
            ..ServerConfig::default()
        };
        assert_eq!(named.check(Some(public)), Ok(()));
        let mut none = ServerConfig::default();
        none.legacy_versions.clear();
        none.modern_versions.clear();
        assert_eq!(none.check(None), Err(ConfigError::NoVersions));
    }
}
