//! One HTTP exchange: the request every part of the client sends goes through [`send`], which
//! adds the configured headers and the [`Authorizer`](super::Authorizer)'s credentials, waits
//! for the response head within the configured times, and sends the request again when the
//! authorizer cures a refusal (at most [`MAX_SENDS`] sends). Shared by the Streamable HTTP
//! exchanges (`request.rs`), the closing `DELETE` (`mod.rs`) and the 2024-11-05 fallback
//! (`old_sse.rs`).

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming as Body;
use tokio::time::Instant;

use super::auth::{AuthFailure, AuthFailureKind, MAX_SENDS, Outgoing, Reply, Retry, is_refusal};
use super::{Shared, TransportError};

/// What one exchange sends: the same head (but for the credentials) and the same body for each
/// of its sends.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    method: Method,
    uri: Uri,
    /// The transport's own headers, added after the configured ones and the credentials.
    headers: HeaderMap,
    /// A header that could not be made (reported when the exchange is sent).
    invalid: Option<String>,
    body: Bytes,
    /// The time each send gets for its response head.
    limit: Option<Duration>,
    interactive: bool,
}

impl Spec {
    /// A request without a body, each send's response head within
    /// [`ClientConfig::response_timeout`](super::ClientConfig::response_timeout), for which the
    /// authorizer may involve the user.
    pub(crate) fn new(shared: &Shared, method: Method, uri: &Uri) -> Spec {
        Spec {
            method,
            uri: uri.clone(),
            headers: HeaderMap::new(),
            invalid: None,
            body: Bytes::new(),
            limit: shared.config.response_timeout,
            interactive: true,
        }
    }

    /// Adds a header of the transport's own (a name or value that cannot be one fails the
    /// exchange with [`TransportError::Malformed`] when it is sent).
    pub(crate) fn header<K, V>(mut self, name: K, value: V) -> Spec
    where
        K: TryInto<HeaderName>,
        K::Error: std::fmt::Display,
        V: TryInto<HeaderValue>,
        V::Error: std::fmt::Display,
    {
        match (name.try_into(), value.try_into()) {
            (Ok(name), Ok(value)) => {
                self.headers.append(name, value);
            }
            (Err(e), _) => self.invalid = Some(e.to_string()),
            (_, Err(e)) => self.invalid = Some(e.to_string()),
        }
        self
    }

    /// The body, sent again as it is on every send.
    pub(crate) fn body(mut self, body: Bytes) -> Spec {
        self.body = body;
        self
    }

    /// The time each send gets for its response head (`None`: no limit).
    pub(crate) fn limit(mut self, limit: Option<Duration>) -> Spec {
        self.limit = limit;
        self
    }

    /// Whether the authorizer may involve the user ([`Outgoing::interactive`]).
    pub(crate) fn interactive(mut self, interactive: bool) -> Spec {
        self.interactive = interactive;
        self
    }

    /// The request of one send, with `credentials` (which replace the configured headers of
    /// their names, marked sensitive).
    fn request(
        &self,
        shared: &Shared,
        credentials: Option<HeaderMap>,
    ) -> Result<http::Request<Full<Bytes>>, TransportError> {
        if let Some(why) = &self.invalid {
            return Err(TransportError::Malformed(why.clone()));
        }
        let mut headers = shared.config.headers.clone();
        if let Some(credentials) = credentials {
            for name in credentials.keys() {
                headers.remove(name);
            }
            let mut name = None;
            for (next, mut value) in credentials {
                if next.is_some() {
                    name = next;
                }
                let Some(name) = name.clone() else { continue };
                value.set_sensitive(true);
                headers.append(name, value);
            }
        }
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        let mut request = http::Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = headers;
        Ok(request)
    }
}

/// A time budget shared by the sends of one exchange and what its caller does around them (the
/// one-way POST's reposts and its wait for a `Retry-After`, the 2024-11-05 transport's wait for
/// its `endpoint` event). The authorizer's waits do not count: they push the deadline back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    deadline: Instant,
    limit: Duration,
}

impl Budget {
    /// `limit` from now.
    pub(crate) fn new(limit: Duration) -> Budget {
        Budget {
            deadline: Instant::now() + limit,
            limit,
        }
    }

    /// When it runs out.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The error of a budget that ran out.
    pub(crate) fn timeout(&self) -> TransportError {
        TransportError::Timeout(self.limit)
    }

    fn extend(&mut self, by: Duration) {
        self.deadline += by;
    }
}

/// Sends the exchange `spec` and waits for its response head: each send within its limit (and
/// `budget`), with the authorizer's credentials when there is one, sent again while the
/// authorizer cures the server's refusals, at most [`MAX_SENDS`] times. Without an authorizer,
/// one send whose response goes up as it is.
pub(crate) async fn send(
    shared: &Shared,
    spec: &Spec,
    mut budget: Option<&mut Budget>,
) -> Result<Response<Body>, TransportError> {
    let Some(auth) = shared.config.auth.as_deref() else {
        let request = spec.request(shared, None)?;
        return head(shared, request, spec.limit, budget.as_deref()).await;
    };
    let mut earlier: Vec<u64> = Vec::new();
    loop {
        let outgoing = Outgoing::new(&spec.method, &spec.uri, spec.interactive, &earlier);
        let credentials = ask(budget.as_deref_mut(), auth.credentials(&outgoing)).await?;
        let request = spec.request(shared, Some(credentials.headers))?;
        let response = head(shared, request, spec.limit, budget.as_deref()).await?;
        let reply = Reply::new(credentials.ticket, response.status(), response.headers());
        auth.observed(&outgoing, &reply);
        if !is_refusal(reply.status, reply.headers) {
            return Ok(response);
        }
        if earlier.len() + 1 >= MAX_SENDS {
            return Err(TransportError::Auth(AuthFailure::new(
                AuthFailureKind::Rejected,
                format!(
                    "the server refused the credentials of {MAX_SENDS} sends of {} {} in a row                      (last: HTTP {})",
                    spec.method, spec.uri, reply.status
                ),
            )));
        }
        let ticket = reply.ticket;
        match ask(budget.as_deref_mut(), auth.refused(&outgoing, &reply)).await? {
            Retry::GiveUp => return Ok(response),
            Retry::Send => {}
        }
        drain(response).await;
        earlier.push(ticket);
    }
}

/// Waits for one of the authorizer's answers, whose wait does not count against `budget`.
async fn ask<T>(
    budget: Option<&mut Budget>,
    answer: impl Future<Output = Result<T, AuthFailure>>,
) -> Result<T, TransportError> {
    let started = Instant::now();
    let answer = answer.await;
    if let Some(budget) = budget {
        budget.extend(started.elapsed());
    }
    answer.map_err(TransportError::Auth)
}

/// Reads what is left of a refused response, briefly and boundedly, so that its connection can
/// serve the next send.
async fn drain(response: Response<Body>) {
    const WAIT: Duration = Duration::from_millis(200);
    const MAX: usize = 64 << 10;
    let body = http_body_util::Limited::new(response.into_body(), MAX).collect();
    let _ = tokio::time::timeout(WAIT, body).await;
}

/// Sends one request and waits for the response head within `limit` and `budget`.
async fn head(
    shared: &Shared,
    request: http::Request<Full<Bytes>>,
    limit: Option<Duration>,
    budget: Option<&Budget>,
) -> Result<Response<Body>, TransportError> {
    let call = shared.http.request(request);
    let own = limit.map(Budget::new);
    let first = match (own, budget.copied()) {
        (Some(a), Some(b)) => Some(if a.deadline <= b.deadline { a } else { b }),
        (a, b) => a.or(b),
    };
    let result = match first {
        Some(bound) => match tokio::time::timeout_at(bound.deadline, call).await {
            Ok(r) => r,
            Err(_) => return Err(bound.timeout()),
        },
        None => call.await,
    };
    result.map_err(|e| {
        TransportError::Connection(if e.is_connect() {
            connect_failure(&e)
        } else {
            describe(&e)
        })
    })
}

/// Why a connection could not be made, as the system said it ("connection refused", "failed
/// to lookup address information: ...", a certificate the TLS library refused), without the
/// layers of the HTTP client around it; every layer when no I/O error is found among them.
pub(crate) fn connect_failure(error: &(dyn std::error::Error + 'static)) -> String {
    let mut layer = Some(error);
    while let Some(e) = layer {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.get_ref() {
                // An error of the system: its kind says it ("connection refused").
                None => io.kind().to_string(),
                // The resolver's or the TLS library's own words.
                Some(inner) => inner.to_string(),
            };
        }
        layer = e.source();
    }
    describe(error)
}

/// An error and its sources, on one line.
pub(crate) fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::{Spec, connect_failure};
    use crate::client::{ClientConfig, HttpTransport};
    use http::header::{ACCEPT, AUTHORIZATION};
    use http::{HeaderMap, HeaderValue, Method};

    #[tokio::test]
    async fn credentials_are_sensitive_and_replace_configured_headers_of_their_names() {
        let mut configured = HeaderMap::new();
        configured.insert("x-api-key", HeaderValue::from_static("configured"));
        configured.insert("x-tenant", HeaderValue::from_static("acme"));
        let config = ClientConfig::default().headers(configured);
        let transport = HttpTransport::new("http://127.0.0.1:1/mcp", config).unwrap();
        let shared = &transport.shared;
        let spec = Spec::new(shared, Method::GET, &shared.url).header(ACCEPT, "text/event-stream");
        let mut credentials = HeaderMap::new();
        credentials.insert(AUTHORIZATION, HeaderValue::from_static("DPoP t"));
        credentials.append("x-api-key", HeaderValue::from_static("one"));
        credentials.append("x-api-key", HeaderValue::from_static("two"));
        let request = spec.request(shared, Some(credentials)).unwrap();
        let headers = request.headers();
        assert!(headers[AUTHORIZATION].is_sensitive());
        let keys: Vec<_> = headers.get_all("x-api-key").iter().collect();
        assert_eq!(keys, ["one", "two"]);
        assert!(keys.iter().all(|v| v.is_sensitive()));
        assert_eq!(headers["x-tenant"], "acme");
        assert_eq!(headers[ACCEPT], "text/event-stream");
        assert_eq!(request.uri(), &shared.url);

        // A header that cannot be one fails the exchange when it is sent.
        let bad = Spec::new(shared, Method::GET, &shared.url).header("bad header", "x");
        assert!(matches!(
            bad.request(shared, None),
            Err(crate::client::TransportError::Malformed(_))
        ));
    }

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("tcp connect error")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn a_connect_failure_is_said_in_the_system_s_words() {
        let refused = Outer(Middle(std::io::Error::from_raw_os_error(111)));
        if cfg!(target_os = "linux") {
            assert_eq!(connect_failure(&refused), "connection refused");
        }
        let dns = Outer(Middle(std::io::Error::other(
            "failed to lookup address information: Name or service not known",
        )));
        assert_eq!(
            connect_failure(&dns),
            "failed to lookup address information: Name or service not known"
        );
        // No I/O error anywhere: every layer.
        #[derive(Debug, thiserror::Error)]
        #[error("plain")]
        struct Plain;
        assert_eq!(connect_failure(&Plain), "plain");
    }
}
