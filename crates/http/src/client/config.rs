//! What a client transport may do: limits, timeouts, reconnection.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;

/// The settings of an [`HttpTransport`](super::HttpTransport).
///
/// Its `Debug` shows the names of the headers but not the values of credentials
/// (`Authorization`, `Proxy-Authorization`, `Cookie`, and any value marked sensitive).
#[derive(Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Headers sent on every request (say a fixed `Authorization`, when no
    /// [`auth`](Self::auth) is set). `Mcp-*`, `Accept` and `Content-Type` are the transport's
    /// own and override these; the credentials of [`auth`](Self::auth) replace those of their
    /// names. The values of `Authorization`, `Proxy-Authorization` and `Cookie` are marked
    /// sensitive when sent (HTTP/2 compression does not index them) and are never shown by
    /// `Debug`.
    pub headers: HeaderMap,
    /// Gives the credentials of every request and decides what a refusal (401, or 403 with
    /// `insufficient_scope`) leads to (default none: requests carry [`headers`](Self::headers)
    /// only, and a 401 fails its request with
    /// [`TransportError::Status`](super::TransportError::Status)). With one set, `headers` must
    /// not hold an `Authorization` of its own ([`HttpTransport::new`](super::HttpTransport::new)
    /// refuses two sources of credentials). `Debug` shows only whether it is set.
    pub auth: Option<Arc<dyn super::Authorizer>>,
    /// The largest JSON response body read, in bytes (default 16 MiB); a larger one fails its
    /// request.
    pub max_body: usize,
    /// The largest SSE event read, in bytes (default 16 MiB); a larger one fails its stream.
    pub max_event: usize,
    /// How many requests, notifications and streams may be under way at once (default 1024);
    /// [`send`](super::HttpTransport::send) refuses more.
    pub max_in_flight: usize,
    /// Time to open a TCP connection (default 10 s).
    pub connect_timeout: Duration,
    /// Time from sending a request to the response head (default none: a JSON response to a
    /// long tool call only comes when the call ends; the session's request timeouts bound it).
    pub response_timeout: Option<Duration>,
    /// Time given to an exchange that awaits a status only (default 30 s, whatever
    /// `response_timeout` is): the POST of a notification or of a response to the server's
    /// request (and every POST of the 2024-11-05 transport) until its response head, the
    /// Streamable HTTP ones' posting again included (after a connection error, twice at most;
    /// after a 503 whose `Retry-After` ends in time, once), and the reading of any error body;
    /// the time the authorizer ([`auth`](Self::auth)) takes to answer does not count. One that
    /// takes longer is given up ([`Inbound::Undelivered`](super::Inbound::Undelivered) with
    /// [`TransportError::Timeout`](super::TransportError::Timeout); an error body is left
    /// unread), freeing its place under `max_in_flight`.
    pub one_way_timeout: Duration,
    /// How long an idle pooled connection is kept for reuse (default 4 s). Keep it below the
    /// server's idle keep-alive timeout (modelctx closes an idle HTTP/1 connection after its
    /// `header_timeout`, 10 s by default; Node after 5 s): a request written on a connection the
    /// server is closing at that moment is lost (the client retries only requests not yet
    /// written, and a tool call without `idempotentHint` is not sent again).
    pub pool_idle_timeout: Duration,
    /// Time given to the `DELETE` that ends a legacy session on close (default 5 s).
    pub delete_timeout: Duration,
    /// Reconnecting broken SSE streams.
    pub reconnect: Reconnect,
    /// How many times a modern request whose response stream broke is sent again with a new id
    /// (default 2), when it was sent with
    /// [`SendOptions::reissue`](super::SendOptions::reissue)`(true)`; nothing is sent again
    /// otherwise.
    pub max_reissues: u32,
    /// Open the legacy standalone GET stream once the session is initialized (default true).
    pub standalone_stream: bool,
    /// Fall back to the 2024-11-05 HTTP+SSE transport when `initialize` gets 400, 404 or 405
    /// (default true).
    pub old_sse_fallback: bool,
    /// The TLS settings for `https` URLs (feature `rustls`); default: the webpki root
    /// certificates.
    #[cfg(feature = "rustls")]
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

/// The headers whose values are credentials.
const CREDENTIALS: [http::HeaderName; 3] = [
    http::header::AUTHORIZATION,
    http::header::PROXY_AUTHORIZATION,
    http::header::COOKIE,
];

/// Whether the value of header `name` must never be shown or indexed.
pub(crate) fn is_credential(name: &http::HeaderName, value: &http::HeaderValue) -> bool {
    value.is_sensitive() || CREDENTIALS.contains(name)
}

/// `headers` with the values of credentials marked sensitive.
pub(crate) fn mark_credentials(headers: &mut HeaderMap) {
    for (name, value) in headers.iter_mut() {
        if CREDENTIALS.contains(name) {
            value.set_sensitive(true);
        }
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Headers<'a>(&'a HeaderMap);
        impl fmt::Debug for Headers<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(self.0.iter().map(|(name, value)| {
                        let shown: &dyn fmt::Debug = if is_credential(name, value) {
                            &"<redacted>"
                        } else {
                            value
                        };
                        (name, shown)
                    }))
                    .finish()
            }
        }
        let mut debug = f.debug_struct("ClientConfig");
        debug
            .field("headers", &Headers(&self.headers))
            .field("auth", &self.auth.as_ref().map(|_| "set"))
            .field("max_body", &self.max_body)
            .field("max_event", &self.max_event)
            .field("max_in_flight", &self.max_in_flight)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("one_way_timeout", &self.one_way_timeout)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("delete_timeout", &self.delete_timeout)
            .field("reconnect", &self.reconnect)
            .field("max_reissues", &self.max_reissues)
            .field("standalone_stream", &self.standalone_stream)
            .field("old_sse_fallback", &self.old_sse_fallback);
        #[cfg(feature = "rustls")]
        debug.field("tls", &self.tls.as_ref().map(|_| "custom"));
        debug.finish()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            headers: HeaderMap::new(),
            auth: None,
            max_body: 16 << 20,
            max_event: 16 << 20,
            max_in_flight: 1024,
            connect_timeout: Duration::from_secs(10),
            response_timeout: None,
            one_way_timeout: Duration::from_secs(30),
            pool_idle_timeout: Duration::from_secs(4),
            delete_timeout: Duration::from_secs(5),
            reconnect: Reconnect::default(),
            max_reissues: 2,
            standalone_stream: true,
            old_sse_fallback: true,
            #[cfg(feature = "rustls")]
            tls: None,
        }
    }
}

/// Builder methods: the configuration is `#[non_exhaustive]`, so outside this crate it is made
/// from [`ClientConfig::default()`] and changed field by field, each method setting the field
/// of its name (its documentation, above, gives the default):
///
/// ```
/// use std::time::Duration;
///
/// use modelctx_http::client::{ClientConfig, Reconnect};
///
/// let config = ClientConfig::default()
///     .connect_timeout(Duration::from_secs(3))
///     .response_timeout(Some(Duration::from_secs(120)))
///     .reconnect(Reconnect::default().max_attempts(10));
/// assert_eq!(config.reconnect.max_attempts, 10);
/// ```
impl ClientConfig {
    /// Sets [`headers`](Self::headers).
    #[must_use]
    pub fn headers(mut self, headers: HeaderMap) -> Self {
        self.headers = headers;
        self
    }

    /// Sets [`auth`](Self::auth).
    #[must_use]
    pub fn auth(mut self, authorizer: Arc<dyn super::Authorizer>) -> Self {
        self.auth = Some(authorizer);
        self
    }

    /// Sets [`max_body`](Self::max_body), in bytes.
    #[must_use]
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Sets [`max_event`](Self::max_event), in bytes.
    #[must_use]
    pub fn max_event(mut self, bytes: usize) -> Self {
        self.max_event = bytes;
        self
    }

    /// Sets [`max_in_flight`](Self::max_in_flight).
    #[must_use]
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.max_in_flight = max;
        self
    }

    /// Sets [`connect_timeout`](Self::connect_timeout).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`response_timeout`](Self::response_timeout) (`None`: none).
    #[must_use]
    pub fn response_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets [`one_way_timeout`](Self::one_way_timeout).
    #[must_use]
    pub fn one_way_timeout(mut self, timeout: Duration) -> Self {
        self.one_way_timeout = timeout;
        self
    }

    /// Sets [`pool_idle_timeout`](Self::pool_idle_timeout).
    #[must_use]
    pub fn pool_idle_timeout(mut self, timeout: Duration) -> Self {
        self.pool_idle_timeout = timeout;
        self
    }

    /// Sets [`delete_timeout`](Self::delete_timeout).
    #[must_use]
    pub fn delete_timeout(mut self, timeout: Duration) -> Self {
        self.delete_timeout = timeout;
        self
    }

    /// Sets [`reconnect`](Self::reconnect).
    #[must_use]
    pub fn reconnect(mut self, reconnect: Reconnect) -> Self {
        self.reconnect = reconnect;
        self
    }

    /// Sets [`max_reissues`](Self::max_reissues).
    #[must_use]
    pub fn max_reissues(mut self, max: u32) -> Self {
        self.max_reissues = max;
        self
    }

    /// Sets [`standalone_stream`](Self::standalone_stream).
    #[must_use]
    pub fn standalone_stream(mut self, open: bool) -> Self {
        self.standalone_stream = open;
        self
    }

    /// Sets [`old_sse_fallback`](Self::old_sse_fallback).
    #[must_use]
    pub fn old_sse_fallback(mut self, fall_back: bool) -> Self {
        self.old_sse_fallback = fall_back;
        self
    }

    /// Sets [`tls`](Self::tls) (`None`: the webpki root certificates).
    #[cfg(feature = "rustls")]
    #[must_use]
    pub fn tls(mut self, tls: Option<std::sync::Arc<rustls::ClientConfig>>) -> Self {
        self.tls = tls;
        self
    }
}

/// How broken SSE streams are reconnected (legacy resumption with `Last-Event-ID`, the legacy
/// standalone stream, modern `subscriptions/listen` streams).
///
/// The first reconnect waits exactly the server's `retry` (or `initial_delay` when it sent
/// none); each further one doubles that, capped at `max_delay`, and waits a random time
/// between half of it and all of it. A stream that ends, cleanly or not, without delivering a
/// message counts as a failed attempt, so a server that closes streams forever cannot make the
/// client loop; after `max_attempts` the transport gives up and says so.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Reconnect {
    /// The delay before the first reconnect when the server sent no `retry` (default 1 s).
    pub initial_delay: Duration,
    /// The cap of the backoff (default 30 s).
    pub max_delay: Duration,
    /// Attempts in a row without a message before giving up (default 5).
    pub max_attempts: u32,
}

impl Default for Reconnect {
    fn default() -> Self {
        Reconnect {
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            max_attempts: 5,
        }
    }
}

/// Builder methods, as [`ClientConfig`]'s.
impl Reconnect {
    /// Sets [`initial_delay`](Self::initial_delay).
    #[must_use]
    pub fn initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// Sets [`max_delay`](Self::max_delay).
    #[must_use]
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Sets [`max_attempts`](Self::max_attempts).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }
}

impl Reconnect {
    /// The wait before reconnect number `attempt` (from 1), given the server's `retry`.
    pub(crate) fn delay(&self, attempt: u32, retry: Option<Duration>) -> Duration {
        let base = retry.unwrap_or(self.initial_delay);
        if attempt <= 1 {
            return base;
        }
        let factor = 1u32.checked_shl(attempt - 1).unwrap_or(u32::MAX);
        let full = base.saturating_mul(factor).min(self.max_delay.max(base));
        let half = full / 2;
        half + half.mul_f64(unit_random())
    }
}

/// A random number in `[0, 1)` for jitter.
fn unit_random() -> f64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finding_22_the_debug_of_a_config_does_not_show_credentials() {
        let mut config = ClientConfig::default();
        let headers = [
            ("authorization", "Bearer s3cret-token"),
            ("proxy-authorization", "Basic s3cret-proxy"),
            ("cookie", "session=s3cret-cookie"),
            ("x-tenant", "acme"),
        ];
        for (name, value) in headers {
            config.headers.insert(
                http::HeaderName::from_static(name),
                http::HeaderValue::from_static(value),
            );
        }
        let mut marked = http::HeaderValue::from_static("s3cret-marked");
        marked.set_sensitive(true);
        config.headers.insert("x-api-key", marked);
        let debug = format!("{config:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(
            debug.contains("authorization") && debug.contains("<redacted>"),
            "{debug}"
        );
        assert!(debug.contains("acme"), "other headers are shown: {debug}");
        assert!(debug.contains("one_way_timeout"), "{debug}");
        assert!(debug.contains("auth: None"), "{debug}");

        // An authorizer is shown as set, never by its own Debug (which may hold tokens).
        use crate::client::{
            AuthFailure, Authorizer, BoxFuture, Credentials, Outgoing, Reply, Retry,
        };
        #[derive(Debug)]
        struct Leaky {
            #[allow(dead_code)]
            token: &'static str,
        }
        impl Authorizer for Leaky {
            fn credentials<'a>(
                &'a self,
                _: &'a Outgoing<'a>,
            ) -> BoxFuture<'a, Result<Credentials, AuthFailure>> {
                Box::pin(async { Ok(Credentials::none(0)) })
            }
            fn refused<'a>(
                &'a self,
                _: &'a Outgoing<'a>,
                _: &'a Reply<'a>,
            ) -> BoxFuture<'a, Result<Retry, AuthFailure>> {
                Box::pin(async { Ok(Retry::GiveUp) })
            }
        }
        let with_auth = ClientConfig::default().auth(Arc::new(Leaky {
            token: "s3cret-in-authorizer",
        }));
        let debug = format!("{with_auth:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains(r#"auth: Some("set")"#), "{debug}");

        mark_credentials(&mut config.headers);
        for name in ["authorization", "proxy-authorization", "cookie"] {
            assert!(config.headers[name].is_sensitive(), "{name}");
        }
        assert!(!config.headers["x-tenant"].is_sensitive());
    }

    #[test]
    fn the_first_reconnect_waits_exactly_retry_and_later_ones_back_off_with_jitter_to_the_cap() {
        let policy = Reconnect::default();
        let retry = Some(Duration::from_millis(500));
        assert_eq!(policy.delay(1, retry), Duration::from_millis(500));
        assert_eq!(policy.delay(1, None), Duration::from_secs(1));
        for _ in 0..100 {
            let second = policy.delay(2, retry);
            assert!((Duration::from_millis(500)..=Duration::from_millis(1000)).contains(&second));
            let fourth = policy.delay(4, retry);
            assert!((Duration::from_millis(2000)..=Duration::from_millis(4000)).contains(&fourth));
            let late = policy.delay(40, retry);
            assert!((Duration::from_secs(15)..=Duration::from_secs(30)).contains(&late));
        }
        // A server asking for more than the cap gets what it asked for first.
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(60))),
            Duration::from_secs(60)
        );
    }

    /// Each builder method sets its own field: every field is given a value other than its
    /// default, one method at a time.
    #[test]
    fn each_builder_method_sets_its_field() {
        let secs = Duration::from_secs;
        let mut headers = HeaderMap::new();
        headers.insert("x-tenant", http::HeaderValue::from_static("acme"));
        let reconnect = Reconnect::default()
            .initial_delay(secs(2))
            .max_delay(secs(3))
            .max_attempts(4);
        assert_eq!(reconnect.initial_delay, secs(2));
        assert_eq!(reconnect.max_delay, secs(3));
        assert_eq!(reconnect.max_attempts, 4);
        let c = ClientConfig::default()
            .headers(headers.clone())
            .max_body(5)
            .max_event(6)
            .max_in_flight(7)
            .connect_timeout(secs(8))
            .response_timeout(Some(secs(9)))
            .one_way_timeout(secs(10))
            .pool_idle_timeout(secs(11))
            .delete_timeout(secs(12))
            .reconnect(reconnect)
            .max_reissues(13)
            .standalone_stream(false)
            .old_sse_fallback(false);
        assert_eq!(c.headers, headers);
        assert_eq!(c.max_body, 5);
        assert_eq!(c.max_event, 6);
        assert_eq!(c.max_in_flight, 7);
        assert_eq!(c.connect_timeout, secs(8));
        assert_eq!(c.response_timeout, Some(secs(9)));
        assert_eq!(c.one_way_timeout, secs(10));
        assert_eq!(c.pool_idle_timeout, secs(11));
        assert_eq!(c.delete_timeout, secs(12));
        assert_eq!(c.reconnect.max_attempts, 4);
        assert_eq!(c.reconnect.initial_delay, secs(2));
        assert_eq!(c.max_reissues, 13);
        assert!(!c.standalone_stream);
        assert!(!c.old_sse_fallback);
        assert_eq!(ClientConfig::default().response_timeout, None);
        assert!(ClientConfig::default().auth.is_none());
        #[cfg(feature = "rustls")]
        {
            let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
            let c = ClientConfig::default().tls(Some(std::sync::Arc::new(tls)));
            assert!(c.tls.is_some());
        }
    }
}
