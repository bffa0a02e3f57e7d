//! Configuration: limits, timeouts, what each side declares.

use std::time::Duration;

use modelctx_types::JsonObject;
use serde_json::Value;

use crate::version::ProtocolVersion;

/// Bounds on every table the session keeps. A full table refuses new work with a clear error;
/// it never grows.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Limits {
    /// Requests we sent that await an answer (including server requests waiting for
    /// `notifications/initialized`). Default 1024.
    pub max_outgoing: usize,
    /// Requests from the peer being handled (including open listen streams). Default 1024.
    pub max_incoming: usize,
    /// Requests we cancelled whose late answers are still ignored quietly. Default 1024; the
    /// oldest is forgotten first.
    pub max_cancelled: usize,
    /// Open `subscriptions/listen` streams. Default 64.
    pub max_subscriptions: usize,
    /// How long a cancelled request's late answer is ignored quietly. Default 60 s.
    pub cancelled_grace: Duration,
    /// The longest resource URI a listen stream's `resourceSubscriptions` may name, in bytes;
    /// a longer one is refused with -32602. Default 8192 (8 KiB).
    pub max_uri_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_outgoing: 1024,
            max_incoming: 1024,
            max_cancelled: 1024,
            max_subscriptions: 64,
            cancelled_grace: Duration::from_secs(60),
            max_uri_len: 8 * 1024,
        }
    }
}

/// How one request we send is timed and tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestOptions {
    /// Fail the request (and cancel it on the wire) when no answer came after this long;
    /// `None` waits forever.
    pub timeout: Option<Duration>,
    /// Ask for progress: a `progressToken` is added to `_meta`.
    pub progress: bool,
    /// Restart the timeout whenever progress arrives...
    pub reset_timeout_on_progress: bool,
    /// ...but never wait longer than this in all.
    pub max_total_timeout: Option<Duration>,
    /// In the modern era, the request declares exactly the client capabilities in its
    /// `params._meta["io.modelcontextprotocol/clientCapabilities"]` (none when absent), not the
    /// configured ones: a front asking on behalf of a client of its own declares that
    /// client's. Legacy requests have no capabilities of their own (the session's apply).
    pub only_request_capabilities: bool,
}

impl Default for RequestOptions {
    /// 60 s timeout, no progress.
    fn default() -> Self {
        RequestOptions {
            timeout: Some(Duration::from_secs(60)),
            progress: false,
            reset_timeout_on_progress: false,
            max_total_timeout: None,
            only_request_capabilities: false,
        }
    }
}

impl RequestOptions {
    /// Sets the timeout.
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Asks for progress notifications.
    pub fn with_progress(mut self) -> Self {
        self.progress = true;
        self
    }

    /// Declares only the request's own capabilities
    /// ([`only_request_capabilities`](Self::only_request_capabilities)).
    pub fn with_only_request_capabilities(mut self) -> Self {
        self.only_request_capabilities = true;
        self
    }

    /// Asks for progress, restarting the timeout on each notification, up to `max_total`.
    pub fn with_progress_reset(mut self, max_total: Duration) -> Self {
        self.progress = true;
        self.reset_timeout_on_progress = true;
        self.max_total_timeout = Some(max_total);
        self
    }
}

/// How long and for whom a client may cache a result (2026-07-28 `ttlMs` and `cacheScope`).
///
/// ```
/// use modelctx_session::{CacheHint, CacheScope};
///
/// let hint = CacheHint::public(60_000);
/// assert_eq!((hint.ttl_ms, hint.scope), (60_000, CacheScope::Public));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheHint {
    /// How long, in milliseconds.
    pub ttl_ms: u64,
    /// Who may share a cached result.
    pub scope: CacheScope,
}

impl CacheHint {
    /// A hint of `ttl_ms` milliseconds for `scope`.
    pub fn new(ttl_ms: u64, scope: CacheScope) -> Self {
        CacheHint { ttl_ms, scope }
    }

    /// A hint of `ttl_ms` milliseconds for this user only ([`CacheScope::Private`]).
    pub fn private(ttl_ms: u64) -> Self {
        CacheHint::new(ttl_ms, CacheScope::Private)
    }

    /// A hint of `ttl_ms` milliseconds that any user may share ([`CacheScope::Public`]).
    pub fn public(ttl_ms: u64) -> Self {
        CacheHint::new(ttl_ms, CacheScope::Public)
    }
}

/// Who may share a cached result (`cacheScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CacheScope {
    /// Only the user (the authorization context) that got it: `"private"`.
    Private,
    /// Anyone: `"public"`.
    Public,
}

impl CacheScope {
    /// The wire string: `"private"` or `"public"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheScope::Private => "private",
            CacheScope::Public => "public",
        }
    }
}

/// What a server session declares and accepts.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The versions served, any of both eras (default: all).
    pub versions: Vec<ProtocolVersion>,
    /// The server's capabilities, as sent in `initialize` and `server/discover` results.
    pub capabilities: JsonObject,
    /// `serverInfo`: an `Implementation` object (`name`, `version`, ...).
    pub server_info: Value,
    /// `instructions`, when given.
    pub instructions: Option<String>,
    /// How `server/discover` results may be cached: `ttlMs` (default 0).
    pub discover_ttl: Duration,
    /// How modern clients may cache the complete results of `tools/list`, `prompts/list`,
    /// `resources/list` and `resources/templates/list`: written as `ttlMs` and `cacheScope`
    /// into each such result that does not carry its own. Default `None`: `ttlMs: 0` and
    /// `"private"`, as every cacheable result without a hint of its own.
    pub list_cache: Option<CacheHint>,
    /// Table bounds.
    pub limits: Limits,
}

impl ServerConfig {
    /// A server with these capabilities and `serverInfo` `{name, version}`, serving every version.
    pub fn new(name: &str, version: &str, capabilities: JsonObject) -> Self {
        ServerConfig {
            versions: ProtocolVersion::ALL.to_vec(),
            capabilities,
            server_info: serde_json::json!({"name": name, "version": version}),
            instructions: None,
            discover_ttl: Duration::ZERO,
            list_cache: None,
            limits: Limits::default(),
        }
    }
}

/// How a client finds the era of its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EraChoice {
    /// Probe with `server/discover` and fall back to `initialize` (the default).
    Probe,
    /// Skip the probe: `initialize` (a decision cached from an earlier probe, or a pin).
    Legacy,
    /// Skip the probe and speak this modern version (`server/discover` is still sent, to learn the
    /// server's capabilities, but its failure ends the session rather than falling back).
    Modern,
}

/// What a client session declares and accepts.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// The versions spoken (default: all). Legacy `initialize` offers the newest legacy one.
    pub versions: Vec<ProtocolVersion>,
    /// The client's capabilities.
    pub capabilities: JsonObject,
    /// `clientInfo`: an `Implementation` object.
    pub client_info: Value,
    /// How to find the server's era.
    pub era: EraChoice,
    /// Timeout of the probe and of `initialize` (default 30 s).
    pub handshake_timeout: Duration,
    /// Defaults for requests sent without options.
    pub request_options: RequestOptions,
    /// Table bounds.
    pub limits: Limits,
}

impl ClientConfig {
    /// A client with these capabilities and `clientInfo` `{name, version}`, speaking every version.
    pub fn new(name: &str, version: &str, capabilities: JsonObject) -> Self {
        ClientConfig {
            versions: ProtocolVersion::ALL.to_vec(),
            capabilities,
            client_info: serde_json::json!({"name": name, "version": version}),
            era: EraChoice::Probe,
            handshake_timeout: Duration::from_secs(30),
            request_options: RequestOptions::default(),
            limits: Limits::default(),
        }
    }
}
