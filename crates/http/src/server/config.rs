//! The server's settings, with secure defaults.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use modelctx_types::{Era, ProtocolVersion};

use crate::event_store::{EventStore, MemoryEventStore};
use crate::security::{AllowList, is_loopback};

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
    /// How long reading a whole request body may take (default 30 s); a slower body gets 408
    /// with a JSON-RPC error. Enforced by the service, so under [`serve`](super::serve) and in
    /// an application that mounts the service alike.
    pub body_timeout: Duration,
    /// The most requests being processed at once across the endpoint (default 256); beyond, a
    /// request gets 503 with `Retry-After` and a JSON-RPC error. A request counts from its
    /// arrival until its response head is sent: an open SSE stream (a GET, or a POST answered
    /// with a stream) no longer counts, as streams are bounded by sessions and connections.
    /// Enforced by the service, so under [`serve`](super::serve) and in an application alike.
    pub max_requests_in_flight: usize,
    /// [`serve`](super::serve) only: how long a client gets to send a whole request head
    /// (default 10 s). It runs from the moment the connection waits for a request: from accept
    /// until the first request arrives (HTTP/1 and HTTP/2 alike, including hyper's wait for
    /// the bytes that tell HTTP/1 from HTTP/2), and, on HTTP/1, again while a kept-alive
    /// connection waits for its next request. The connection is closed when it passes.
    pub header_timeout: Duration,
    /// [`serve`](super::serve) only: a connection with no request under way (no request being
    /// processed and no response, such as an SSE stream, being written) for this long is
    /// closed (default 60 s; HTTP/2 gets a GOAWAY). An idle HTTP/1 connection is also closed
    /// by `header_timeout`, whichever is shorter.
    pub idle_connection_timeout: Duration,
    /// [`serve`](super::serve) only: how often an HTTP/2 connection is pinged (default 30 s;
    /// `None`: never). A peer that does not answer within `http2_keep_alive_timeout` is
    /// disconnected.
    pub http2_keep_alive_interval: Option<Duration>,
    /// [`serve`](super::serve) only: how long an HTTP/2 ping may go unanswered (default 10 s).
    pub http2_keep_alive_timeout: Duration,
    /// [`serve`](super::serve) only: the most connections open at once. Beyond, a connection
    /// is accepted and closed at once (the accept loop never stalls). Default: half the
    /// process's soft limit on open files (`RLIMIT_NOFILE`, read when the configuration is
    /// made), leaving the other half for files, child processes and outgoing sockets, and at
    /// most 65 536; 1024 where there is no such limit (non-unix systems).
    pub max_connections: usize,
    /// The most legacy sessions open at once (default 1024). When the table is full, the least
    /// recently used idle session (no open stream, no request in flight) is ended to make room;
    /// with none idle, `initialize` gets 503 with `Retry-After`.
    pub max_sessions: usize,
    /// A legacy session with no request and no open stream for this long is ended (default
    /// 30 minutes).
    pub session_idle_timeout: Duration,
    /// The protocol versions served, of both eras (default: every version,
    /// [`ProtocolVersion::ALL`]). Its legacy ones are those accepted in `MCP-Protocol-Version`
    /// on a legacy session; none: a modern-only server, which answers GET and DELETE with 405.
    /// Its modern ones take the stateless path; none: a legacy-only server. The protocol
    /// session has the same list (its `ServerConfig::versions`): modelctx-server sets this one
    /// from `ServerBuilder::versions`, so the two cannot disagree.
    pub versions: Vec<ProtocolVersion>,
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
    /// Who may call (default `None`: anyone the other checks let through). With a guard, every
    /// request to the endpoint is authenticated before it is read, and the guard's protected
    /// resource metadata is served at its well-known paths; see [`Guard`](super::Guard).
    pub guard: Option<Arc<dyn super::Guard>>,
    /// [`serve`](super::serve) only: how long in-flight requests get to finish when the
    /// server is stopped by
    /// [`RunningServer::with_graceful_shutdown`](super::RunningServer::with_graceful_shutdown)
    /// or after a fatal accept error (default 10 s); then their connections are closed.
    /// [`RunningServer::shutdown`](super::RunningServer::shutdown) takes its own.
    pub shutdown_grace: Duration,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("path", &self.path)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("max_body", &self.max_body)
            .field("body_timeout", &self.body_timeout)
            .field("max_requests_in_flight", &self.max_requests_in_flight)
            .field("header_timeout", &self.header_timeout)
            .field("idle_connection_timeout", &self.idle_connection_timeout)
            .field("http2_keep_alive_interval", &self.http2_keep_alive_interval)
            .field("http2_keep_alive_timeout", &self.http2_keep_alive_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_sessions", &self.max_sessions)
            .field("session_idle_timeout", &self.session_idle_timeout)
            .field("versions", &self.versions)
            .field("allow_delete", &self.allow_delete)
            .field("sse_responses", &self.sse_responses)
            .field("handshake_timeout", &self.handshake_timeout)
            .field(
                "max_sessions_per_principal",
                &self.max_sessions_per_principal,
            )
            .field("max_sessions_per_peer", &self.max_sessions_per_peer)
            .field("guard", &self.guard)
            .field("shutdown_grace", &self.shutdown_grace)
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
            body_timeout: Duration::from_secs(30),
            max_requests_in_flight: 256,
            header_timeout: Duration::from_secs(10),
            idle_connection_timeout: Duration::from_secs(60),
            http2_keep_alive_interval: Some(Duration::from_secs(30)),
            http2_keep_alive_timeout: Duration::from_secs(10),
            max_connections: default_max_connections(),
            max_sessions: 1024,
            session_idle_timeout: Duration::from_secs(30 * 60),
            versions: ProtocolVersion::ALL.to_vec(),
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
            guard: None,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Builder methods: the configuration is `#[non_exhaustive]`, so outside this crate it is made
/// from [`ServerConfig::default()`] and changed field by field, each method setting the field
/// of its name (its documentation, above, gives the default):
///
/// ```
/// use std::time::Duration;
///
/// use modelctx_http::security::AllowList;
/// use modelctx_http::server::ServerConfig;
///
/// let config = ServerConfig::default()
///     .path(Some("/api/mcp"))
///     .allowed_hosts(AllowList::Hosts(vec!["mcp.example.com".into()]))
///     .allowed_origins(AllowList::Hosts(vec!["app.example.com".into()]))
///     .max_sessions(100)
///     .keep_alive(None)
///     .shutdown_grace(Duration::from_secs(2));
/// assert_eq!(config.path.as_deref(), Some("/api/mcp"));
/// assert_eq!(config.max_sessions, 100);
/// ```
///
/// Nothing is checked until the configuration is served (a zero limit, a public bind with the
/// loopback lists: [`ServerConfig::check`]).
impl ServerConfig {
    /// Sets [`path`](Self::path): `Some("/api/mcp")`, or `None` for any path.
    #[must_use]
    pub fn path(mut self, path: Option<&str>) -> Self {
        self.path = path.map(str::to_owned);
        self
    }

    /// Sets [`allowed_hosts`](Self::allowed_hosts).
    #[must_use]
    pub fn allowed_hosts(mut self, hosts: AllowList) -> Self {
        self.allowed_hosts = hosts;
        self
    }

    /// Sets [`allowed_origins`](Self::allowed_origins).
    #[must_use]
    pub fn allowed_origins(mut self, origins: AllowList) -> Self {
        self.allowed_origins = origins;
        self
    }

    /// Sets [`max_body`](Self::max_body), in bytes.
    #[must_use]
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Sets [`body_timeout`](Self::body_timeout).
    #[must_use]
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Sets [`max_requests_in_flight`](Self::max_requests_in_flight).
    #[must_use]
    pub fn max_requests_in_flight(mut self, max: usize) -> Self {
        self.max_requests_in_flight = max;
        self
    }

    /// Sets [`header_timeout`](Self::header_timeout).
    #[must_use]
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// Sets [`idle_connection_timeout`](Self::idle_connection_timeout).
    #[must_use]
    pub fn idle_connection_timeout(mut self, timeout: Duration) -> Self {
        self.idle_connection_timeout = timeout;
        self
    }

    /// Sets [`http2_keep_alive_interval`](Self::http2_keep_alive_interval) (`None`: no pings).
    #[must_use]
    pub fn http2_keep_alive_interval(mut self, interval: Option<Duration>) -> Self {
        self.http2_keep_alive_interval = interval;
        self
    }

    /// Sets [`http2_keep_alive_timeout`](Self::http2_keep_alive_timeout).
    #[must_use]
    pub fn http2_keep_alive_timeout(mut self, timeout: Duration) -> Self {
        self.http2_keep_alive_timeout = timeout;
        self
    }

    /// Sets [`max_connections`](Self::max_connections).
    #[must_use]
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// Sets [`max_sessions`](Self::max_sessions).
    #[must_use]
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.max_sessions = max;
        self
    }

    /// Sets [`session_idle_timeout`](Self::session_idle_timeout).
    #[must_use]
    pub fn session_idle_timeout(mut self, timeout: Duration) -> Self {
        self.session_idle_timeout = timeout;
        self
    }

    /// Sets [`versions`](Self::versions). (modelctx-server replaces them with the server's
    /// own, `ServerBuilder::versions`.)
    #[must_use]
    pub fn versions(mut self, versions: impl IntoIterator<Item = ProtocolVersion>) -> Self {
        self.versions = versions.into_iter().collect();
        self
    }

    /// Sets [`allow_delete`](Self::allow_delete).
    #[must_use]
    pub fn allow_delete(mut self, allow: bool) -> Self {
        self.allow_delete = allow;
        self
    }

    /// Sets [`sse_retry`](Self::sse_retry).
    #[must_use]
    pub fn sse_retry(mut self, retry: Duration) -> Self {
        self.sse_retry = retry;
        self
    }

    /// Sets [`keep_alive`](Self::keep_alive) (`None`: no keep-alive comments).
    #[must_use]
    pub fn keep_alive(mut self, interval: Option<Duration>) -> Self {
        self.keep_alive = interval;
        self
    }

    /// Sets [`sse_responses`](Self::sse_responses).
    #[must_use]
    pub fn sse_responses(mut self, always: bool) -> Self {
        self.sse_responses = always;
        self
    }

    /// Sets [`stream_buffer`](Self::stream_buffer).
    #[must_use]
    pub fn stream_buffer(mut self, messages: usize) -> Self {
        self.stream_buffer = messages;
        self
    }

    /// Sets [`standalone_queue`](Self::standalone_queue).
    #[must_use]
    pub fn standalone_queue(mut self, messages: usize) -> Self {
        self.standalone_queue = messages;
        self
    }

    /// Sets [`event_store`](Self::event_store).
    #[must_use]
    pub fn event_store(mut self, store: Arc<dyn EventStore>) -> Self {
        self.event_store = store;
        self
    }

    /// Sets [`old_sse`](Self::old_sse) (`None`: the HTTP+SSE transport is not served).
    #[cfg(feature = "legacy-sse")]
    #[must_use]
    pub fn old_sse(mut self, paths: Option<super::OldSsePaths>) -> Self {
        self.old_sse = paths;
        self
    }

    /// Sets [`handshake_timeout`](Self::handshake_timeout).
    #[must_use]
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Sets [`max_sessions_per_principal`](Self::max_sessions_per_principal) (`None`: no cap
    /// of its own).
    #[must_use]
    pub fn max_sessions_per_principal(mut self, max: Option<usize>) -> Self {
        self.max_sessions_per_principal = max;
        self
    }

    /// Sets [`max_sessions_per_peer`](Self::max_sessions_per_peer) (`None`: no cap of its own).
    #[must_use]
    pub fn max_sessions_per_peer(mut self, max: Option<usize>) -> Self {
        self.max_sessions_per_peer = max;
        self
    }

    /// Sets [`guard`](Self::guard) (`None`: no authentication by the endpoint).
    #[must_use]
    pub fn guard(mut self, guard: Option<Arc<dyn super::Guard>>) -> Self {
        self.guard = guard;
        self
    }

    /// Sets [`shutdown_grace`](Self::shutdown_grace).
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
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
    #[error("no protocol version to serve: versions is empty")]
    NoVersions,
    /// A limit or timeout that would refuse every request (zero).
    #[error("{0} must be above zero")]
    Zero(&'static str),
}

/// The most connections [`ServerConfig::max_connections`] defaults to.
const MAX_CONNECTIONS_CEILING: usize = 65_536;

/// The default of [`ServerConfig::max_connections`]: half the soft limit on open files.
fn default_max_connections() -> usize {
    #[cfg(unix)]
    {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        connections_for_fd_limit(limit)
    }
    #[cfg(not(unix))]
    {
        1024
    }
}

/// Half of `soft_limit` open files (`None`: unlimited), at least 1, at most the ceiling.
#[cfg_attr(not(unix), allow(dead_code))]
fn connections_for_fd_limit(soft_limit: Option<u64>) -> usize {
    let half = soft_limit.map_or(u64::MAX, |limit| limit / 2);
    usize::try_from(half)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_CONNECTIONS_CEILING)
}

impl ServerConfig {
    /// Checks that the configuration can serve on `addr`.
    pub fn check(&self, addr: Option<SocketAddr>) -> Result<(), ConfigError> {
        if self.versions.is_empty() {
            return Err(ConfigError::NoVersions);
        }
        let zero = [
            ("max_body", self.max_body == 0),
            ("body_timeout", self.body_timeout.is_zero()),
            ("max_requests_in_flight", self.max_requests_in_flight == 0),
            ("header_timeout", self.header_timeout.is_zero()),
            (
                "idle_connection_timeout",
                self.idle_connection_timeout.is_zero(),
            ),
            (
                "http2_keep_alive_timeout",
                self.http2_keep_alive_timeout.is_zero(),
            ),
            ("max_connections", self.max_connections == 0),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, zero)| *zero) {
            return Err(ConfigError::Zero(name));
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
        self.versions.iter().any(|v| v.era() == Era::Legacy)
    }

    pub(crate) fn serves_modern(&self) -> bool {
        self.versions.iter().any(|v| v.era() == Era::Modern)
    }

    /// Whether `version` (as a header names it) is served, in era `era`.
    pub(crate) fn serves(&self, version: &str, era: Era) -> bool {
        ProtocolVersion::parse(version)
            .is_some_and(|v| v.era() == era && self.versions.contains(&v))
    }

    /// The versions served in era `era`, newest first, as the wire names them.
    pub(crate) fn served(&self, era: Era) -> Vec<&'static str> {
        let mut served: Vec<ProtocolVersion> = self
            .versions
            .iter()
            .copied()
            .filter(|v| v.era() == era)
            .collect();
        served.sort_unstable_by(|a, b| b.cmp(a));
        served.dedup();
        served.into_iter().map(ProtocolVersion::as_str).collect()
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
        none.versions.clear();
        assert_eq!(none.check(None), Err(ConfigError::NoVersions));
    }

    #[test]
    fn zero_limits_are_refused() {
        let config = ServerConfig {
            max_requests_in_flight: 0,
            ..ServerConfig::default()
        };
        assert_eq!(
            config.check(None),
            Err(ConfigError::Zero("max_requests_in_flight"))
        );
        let config = ServerConfig {
            header_timeout: Duration::ZERO,
            ..ServerConfig::default()
        };
        assert_eq!(config.check(None), Err(ConfigError::Zero("header_timeout")));
    }

    #[test]
    fn max_connections_defaults_to_half_the_file_limit() {
        assert_eq!(connections_for_fd_limit(Some(1024)), 512);
        assert_eq!(connections_for_fd_limit(Some(1)), 1);
        assert_eq!(connections_for_fd_limit(Some(0)), 1);
        assert_eq!(
            connections_for_fd_limit(Some(1 << 20)),
            MAX_CONNECTIONS_CEILING
        );
        assert_eq!(connections_for_fd_limit(None), MAX_CONNECTIONS_CEILING);
        let config = ServerConfig::default();
        assert!(config.max_connections >= 1);
        #[cfg(unix)]
        if let Some(soft) = rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
            assert!(config.max_connections as u64 <= soft.max(1));
        }
    }

    /// Each builder method sets its own field, and only it: every field is given a value
    /// other than its default, one method at a time.
    #[test]
    fn each_builder_method_sets_its_field() {
        use crate::server::{Challenge, Grant, Guard};

        #[derive(Debug)]
        struct Nobody;
        impl Guard for Nobody {
            fn authenticate<'a>(
                &'a self,
                _: &'a http::request::Parts,
            ) -> crate::event_store::BoxFuture<'a, Result<Grant, Challenge>> {
                Box::pin(std::future::ready(Err(Challenge::new(
                    http::StatusCode::UNAUTHORIZED,
                ))))
            }
            fn authorize(&self, _: &Grant, _: &[String]) -> Result<(), Challenge> {
                Ok(())
            }
        }

        let secs = Duration::from_secs;
        let hosts = AllowList::Hosts(vec!["mcp.example.com".into()]);
        let origins = AllowList::Hosts(vec!["app.example.com".into()]);
        let store: Arc<dyn EventStore> = Arc::new(MemoryEventStore::default());
        let guard: Arc<dyn crate::server::Guard> = Arc::new(Nobody);
        let default = ServerConfig::default();
        let c = ServerConfig::default()
            .path(None)
            .allowed_hosts(hosts.clone())
            .allowed_origins(origins.clone())
            .max_body(7)
            .body_timeout(secs(7))
            .max_requests_in_flight(8)
            .header_timeout(secs(8))
            .idle_connection_timeout(secs(9))
            .http2_keep_alive_interval(None)
            .http2_keep_alive_timeout(secs(11))
            .max_connections(12)
            .max_sessions(13)
            .session_idle_timeout(secs(14))
            .versions([ProtocolVersion::ALL[0]])
            .allow_delete(false)
            .sse_retry(secs(15))
            .keep_alive(Some(secs(16)))
            .sse_responses(true)
            .stream_buffer(17)
            .standalone_queue(18)
            .event_store(store.clone())
            .handshake_timeout(secs(19))
            .max_sessions_per_principal(Some(20))
            .max_sessions_per_peer(Some(21))
            .guard(Some(guard.clone()))
            .shutdown_grace(secs(22));
        assert_eq!(c.path, None);
        assert_eq!(c.allowed_hosts, hosts);
        assert_eq!(c.allowed_origins, origins);
        assert_eq!(c.max_body, 7);
        assert_eq!(c.body_timeout, secs(7));
        assert_eq!(c.max_requests_in_flight, 8);
        assert_eq!(c.header_timeout, secs(8));
        assert_eq!(c.idle_connection_timeout, secs(9));
        assert_eq!(c.http2_keep_alive_interval, None);
        assert_eq!(c.http2_keep_alive_timeout, secs(11));
        assert_eq!(c.max_connections, 12);
        assert_eq!(c.max_sessions, 13);
        assert_eq!(c.session_idle_timeout, secs(14));
        assert_eq!(c.versions, [ProtocolVersion::ALL[0]]);
        assert!(!c.allow_delete);
        assert_eq!(c.sse_retry, secs(15));
        assert_eq!(c.keep_alive, Some(secs(16)));
        assert!(c.sse_responses);
        assert_eq!(c.stream_buffer, 17);
        assert_eq!(c.standalone_queue, 18);
        assert!(Arc::ptr_eq(&c.event_store, &store));
        assert_eq!(c.handshake_timeout, secs(19));
        assert_eq!(c.max_sessions_per_principal, Some(20));
        assert_eq!(c.max_sessions_per_peer, Some(21));
        assert!(Arc::ptr_eq(c.guard.as_ref().unwrap(), &guard));
        assert_eq!(c.shutdown_grace, secs(22));
        // None of these is a default (so each assertion above sees its method's work).
        assert_ne!(default.path, c.path);
        assert_ne!(default.versions, c.versions);
        assert_ne!(default.keep_alive, c.keep_alive);
        assert_ne!(default.shutdown_grace, c.shutdown_grace);
        assert!(default.guard.is_none());
        assert_eq!(
            ServerConfig::default()
                .path(Some("/api/mcp"))
                .path
                .as_deref(),
            Some("/api/mcp")
        );
        #[cfg(feature = "legacy-sse")]
        {
            let c = ServerConfig::default().old_sse(Some(crate::server::OldSsePaths::default()));
            assert!(c.old_sse.is_some());
        }
    }
}
