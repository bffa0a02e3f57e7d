//! How both halves talk to authorization servers: metadata, keys and introspection for the
//! resource server; discovery, registration and tokens for the client.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, USER_AGENT};
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A boxed future, as [`Fetch`] and [`TokenVerifier`](crate::TokenVerifier) return.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// An HTTP client for the authorization server's endpoints. The default is [`HttpFetch`], a
/// hyper client (HTTPS with feature `rustls`); tests and applications with their own client
/// replace it.
///
/// The resource server uses [`get`](Fetch::get) and [`post_form`](Fetch::post_form); the client
/// half uses [`send`](Fetch::send), whose provided implementation maps the requests those two can
/// make onto them, so an implementor of only those two keeps working for the resource server.
pub trait Fetch: Send + Sync + fmt::Debug + 'static {
    /// `GET url` with `Accept: application/json`.
    fn get<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<FetchResponse, FetchError>>;

    /// `POST url` with an `application/x-www-form-urlencoded` body made of `form`, and HTTP
    /// Basic authentication when `basic` (client id, secret) is given.
    fn post_form<'a>(
        &'a self,
        url: &'a str,
        form: &'a [(&'a str, &'a str)],
        basic: Option<(&'a str, &'a str)>,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>>;

    /// Any request: a method, extra headers (`DPoP`, say), an empty, form or JSON body, and HTTP
    /// Basic authentication. `Accept: application/json` is sent unless `request.headers` names
    /// another `Accept`.
    ///
    /// Provided: a `GET` without body, extra headers or Basic authentication goes to
    /// [`get`](Fetch::get), a form `POST` without extra headers to [`post_form`](Fetch::post_form);
    /// anything else is [`FetchError::Unsupported`]. [`HttpFetch`] implements every request.
    fn send<'a>(
        &'a self,
        request: FetchRequest<'a>,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        Box::pin(async move {
            let unsupported = |why| FetchError::Unsupported {
                url: request.url.to_owned(),
                why,
            };
            if !request.headers.is_empty() {
                return Err(unsupported("extra request headers"));
            }
            match (&request.method, &request.body) {
                (&Method::GET, FetchBody::Empty) if request.basic.is_none() => {
                    self.get(request.url).await
                }
                (&Method::GET, _) => Err(unsupported("a GET with a body or credentials")),
                (&Method::POST, FetchBody::Form(form)) => {
                    self.post_form(request.url, form, request.basic).await
                }
                _ => Err(unsupported("a request other than GET or a form POST")),
            }
        })
    }
}

/// A shared client is a client: `Arc<MyFetch>` can be given to
/// `Auth::fetcher` while the caller keeps a handle on it.
impl<T: Fetch + ?Sized> Fetch for Arc<T> {
    fn get<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        (**self).get(url)
    }

    fn post_form<'a>(
        &'a self,
        url: &'a str,
        form: &'a [(&'a str, &'a str)],
        basic: Option<(&'a str, &'a str)>,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        (**self).post_form(url, form, basic)
    }

    fn send<'a>(
        &'a self,
        request: FetchRequest<'a>,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        (**self).send(request)
    }
}

/// One request for [`Fetch::send`]: built with [`get`](FetchRequest::get),
/// [`post_form`](FetchRequest::post_form) or [`post_json`](FetchRequest::post_json), then
/// [`header`](FetchRequest::header) and [`basic`](FetchRequest::basic).
///
/// Its `Debug` shows no secret: header names without values, form field names without values,
/// the size of a JSON body, the Basic client id without the secret.
#[derive(Clone)]
#[non_exhaustive]
pub struct FetchRequest<'a> {
    /// The method.
    pub method: Method,
    /// The absolute URL.
    pub url: &'a str,
    /// Headers added to the client's own (`Accept`, `User-Agent`, `Content-Type` of the body);
    /// one named here replaces the client's.
    pub headers: HeaderMap,
    /// The body.
    pub body: FetchBody<'a>,
    /// HTTP Basic authentication (client id, secret), encoded per RFC 6749 section 2.3.1.
    pub basic: Option<(&'a str, &'a str)>,
}

/// The body of a [`FetchRequest`]. Its `Debug` shows form field names and a JSON body's size,
/// never values (codes, tokens and client secrets travel in them).
#[derive(Clone)]
#[non_exhaustive]
pub enum FetchBody<'a> {
    /// No body.
    Empty,
    /// `application/x-www-form-urlencoded`, made of the pairs in order.
    Form(&'a [(&'a str, &'a str)]),
    /// `application/json`, these bytes.
    Json(Bytes),
}

impl fmt::Debug for FetchRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<&str> = self.headers.keys().map(HeaderName::as_str).collect();
        f.debug_struct("FetchRequest")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &headers)
            .field("body", &self.body)
            .field("basic", &self.basic.map(|(id, _)| (id, "<redacted>")))
            .finish()
    }
}

impl fmt::Debug for FetchBody<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchBody::Empty => f.write_str("Empty"),
            FetchBody::Form(form) => f
                .debug_tuple("Form")
                .field(&form.iter().map(|(name, _)| *name).collect::<Vec<_>>())
                .finish(),
            FetchBody::Json(json) => write!(f, "Json({} bytes)", json.len()),
        }
    }
}

impl<'a> FetchRequest<'a> {
    /// `GET url`.
    pub fn get(url: &'a str) -> FetchRequest<'a> {
        FetchRequest {
            method: Method::GET,
            url,
            headers: HeaderMap::new(),
            body: FetchBody::Empty,
            basic: None,
        }
    }

    /// `POST url` with the form `form`.
    pub fn post_form(url: &'a str, form: &'a [(&'a str, &'a str)]) -> FetchRequest<'a> {
        FetchRequest {
            method: Method::POST,
            url,
            headers: HeaderMap::new(),
            body: FetchBody::Form(form),
            basic: None,
        }
    }

    /// `POST url` with `body` serialised as JSON.
    pub fn post_json(url: &'a str, body: &impl serde::Serialize) -> FetchRequest<'a> {
        let bytes = serde_json::to_vec(body).expect("a JSON value serialises");
        FetchRequest {
            method: Method::POST,
            url,
            headers: HeaderMap::new(),
            body: FetchBody::Json(Bytes::from(bytes)),
            basic: None,
        }
    }

    /// Adds the header `name: value` (replacing one of that name).
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> FetchRequest<'a> {
        self.headers.insert(name, value);
        self
    }

    /// HTTP Basic authentication with `client_id` and `client_secret`.
    pub fn basic(mut self, client_id: &'a str, client_secret: &'a str) -> FetchRequest<'a> {
        self.basic = Some((client_id, client_secret));
        self
    }
}

/// A response: status, headers (`Cache-Control` sets how long keys are kept) and body.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FetchResponse {
    /// The status.
    pub status: http::StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body (bounded by the client).
    pub body: Bytes,
}

impl FetchResponse {
    /// A response with `status`, no headers and `body`.
    pub fn new(status: http::StatusCode, body: impl Into<Bytes>) -> FetchResponse {
        FetchResponse {
            status,
            headers: HeaderMap::new(),
            body: body.into(),
        }
    }

    /// The body parsed as JSON into `T` (a JSON object: `serde_json::Map<String, Value>`, or a
    /// typed document).
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The URL is not one the client may fetch (not `https`, except on loopback; malformed).
    #[error("refused URL {url}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        why: &'static str,
    },
    /// Connecting, sending or reading failed, or took too long.
    #[error("fetching {url}: {source}")]
    Io {
        /// The URL.
        url: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The body is larger than the client's bound.
    #[error("response from {url} exceeds {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The bound.
        limit: usize,
    },
    /// The [`Fetch`] cannot make this kind of request (the provided [`Fetch::send`] of a client
    /// that implements only `get` and `post_form`).
    #[error("cannot send {url}: {why}")]
    Unsupported {
        /// The URL.
        url: String,
        /// What the client cannot do.
        why: &'static str,
    },
}

/// The most a response body may hold: 256 KiB.
pub(crate) const BODY_LIMIT: usize = 256 * 1024;
/// The longest a whole exchange (connect, send, read the body) may take: 5 s.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(5);

#[cfg(not(feature = "rustls"))]
type Connector = HttpConnector;
#[cfg(feature = "rustls")]
type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// The default [`Fetch`]: a hyper client speaking HTTP/1.1 and HTTP/2, over TLS (rustls with
/// ring and the webpki root certificates) with feature `rustls`; [`HttpFetch::with_tls`] takes
/// another TLS configuration (a private certificate authority).
///
/// It fetches `https://` URLs, and `http://` ones only on a loopback host (`localhost`,
/// `127.0.0.0/8`, `::1`); without feature `rustls` only the latter. It follows no redirects (a
/// `3xx` is returned as it is, and the callers refuse it), reads at most 256 KiB of body
/// ([`FetchError::TooLarge`]) and gives the whole exchange 5 s ([`FetchError::Io`]).
#[derive(Clone)]
pub struct HttpFetch {
    client: Client<Connector, Full<Bytes>>,
    timeout: Duration,
}

impl fmt::Debug for HttpFetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpFetch")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Default for HttpFetch {
    fn default() -> HttpFetch {
        HttpFetch::new()
    }
}

/// The TCP connector: no Nagle, the connect bounded, `https` URLs passed to the TLS layer.
fn http_connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(TIMEOUT));
    http.enforce_http(false);
    http
}

impl HttpFetch {
    /// A client with the bounds above.
    pub fn new() -> HttpFetch {
        #[cfg(feature = "rustls")]
        {
            let roots =
                rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
            HttpFetch::with_tls(Arc::new(tls))
        }
        #[cfg(not(feature = "rustls"))]
        HttpFetch::build(http_connector())
    }

    /// A client with the bounds above whose `https` connections use `tls`: an authorization
    /// server behind a private certificate authority, client certificates (mutual TLS). The
    /// client sets the ALPN protocols itself (`h2`, `http/1.1`): those of `tls` are ignored.
    #[cfg(feature = "rustls")]
    pub fn with_tls(tls: Arc<rustls::ClientConfig>) -> HttpFetch {
        let mut tls = (*tls).clone();
        tls.alpn_protocols.clear();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http_connector());
        HttpFetch::build(connector)
    }

    fn build(connector: Connector) -> HttpFetch {
        HttpFetch {
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout: TIMEOUT,
        }
    }

    /// The same client with another bound on the whole exchange (connect, send, read the
    /// body); the default is 5 s.
    pub fn with_timeout(mut self, timeout: Duration) -> HttpFetch {
        self.timeout = timeout;
        self
    }

    async fn exchange(
        &self,
        url: &str,
        request: Request<Full<Bytes>>,
    ) -> Result<FetchResponse, FetchError> {
        let io = |source: Box<dyn std::error::Error + Send + Sync>| FetchError::Io {
            url: url.to_owned(),
            source,
        };
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| io(Box::new(e)))?;
            let (parts, body) = response.into_parts();
            let too_large = || FetchError::TooLarge {
                url: url.to_owned(),
                limit: BODY_LIMIT,
            };
            if parts
                .headers
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|len| len > BODY_LIMIT as u64)
            {
                return Err(too_large());
            }
            let body = match Limited::new(body, BODY_LIMIT).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
                    return Err(too_large());
                }
                Err(e) => return Err(io(e)),
            };
            Ok(FetchResponse {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(elapsed) => Err(io(Box::new(elapsed))),
        }
    }
}

impl Fetch for HttpFetch {
    fn get<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        self.send(FetchRequest::get(url))
    }

    fn post_form<'a>(
        &'a self,
        url: &'a str,
        form: &'a [(&'a str, &'a str)],
        basic: Option<(&'a str, &'a str)>,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        let mut request = FetchRequest::post_form(url, form);
        request.basic = basic;
        self.send(request)
    }

    fn send<'a>(
        &'a self,
        request: FetchRequest<'a>,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        Box::pin(async move {
            let url = request.url;
            check_url(url)?;
            let mut builder = Request::builder()
                .method(request.method)
                .uri(url)
                .header(ACCEPT, "application/json")
                .header(USER_AGENT, USER_AGENT_VALUE);
            let body = match request.body {
                FetchBody::Empty => Bytes::new(),
                FetchBody::Form(form) => {
                    builder = builder.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
                    Bytes::from(form_encode(form))
                }
                FetchBody::Json(json) => {
                    builder = builder.header(CONTENT_TYPE, "application/json");
                    json
                }
            };
            if let Some((id, secret)) = request.basic {
                builder = builder.header(AUTHORIZATION, basic_auth(id, secret));
            }
            let Some(headers) = builder.headers_mut() else {
                return Err(refused(url, "not a URL"));
            };
            for name in request.headers.keys() {
                headers.remove(name);
            }
            for (name, value) in &request.headers {
                headers.append(name, value.clone());
            }
            let request = builder
                .body(Full::new(body))
                .map_err(|_| refused(url, "not a URL"))?;
            self.exchange(url, request).await
        })
    }
}

const USER_AGENT_VALUE: &str = concat!("modelctx-auth/", env!("CARGO_PKG_VERSION"));

fn refused(url: &str, why: &'static str) -> FetchError {
    FetchError::Url {
        url: url.to_owned(),
        why,
    }
}

/// Whether the client may fetch `url`: an absolute `https://` URL (with feature `rustls`), or
/// an `http://` one whose host is a loopback address (`localhost`, `127.0.0.0/8`, `::1`). URLs
/// with credentials (`user@host`) are refused.
pub(crate) fn check_url(url: &str) -> Result<(), FetchError> {
    let uri: http::Uri = url.parse().map_err(|_| refused(url, "not a URL"))?;
    let authority = uri
        .authority()
        .ok_or_else(|| refused(url, "not an absolute URL"))?;
    if authority.as_str().contains('@') {
        return Err(refused(url, "credentials in the URL"));
    }
    let host = authority.host();
    if host.is_empty() {
        return Err(refused(url, "no host"));
    }
    match uri.scheme_str() {
        #[cfg(feature = "rustls")]
        Some("https") => Ok(()),
        #[cfg(not(feature = "rustls"))]
        Some("https") => Err(refused(url, "https needs feature rustls")),
        Some("http") if is_loopback(host) => Ok(()),
        Some("http") => Err(refused(
            url,
            "plain http is only allowed to a loopback host",
        )),
        _ => Err(refused(url, "not an http(s) URL")),
    }
}

/// Whether `host` (as in a URL: an IPv6 address in brackets) is a loopback host: `localhost`
/// (any case), `127.0.0.0/8` or `::1` in any spelling. The one rule for fetching over plain
/// http and for an `http` issuer or resource.
pub(crate) fn is_loopback(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `application/x-www-form-urlencoded` (the WHATWG URL standard's serializer): ASCII letters,
/// digits and `*-._` as they are, space as `+`, every other byte of the UTF-8 as `%XX`.
pub(crate) fn form_encode(form: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in form.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode_component(name, &mut out);
        out.push('=');
        encode_component(value, &mut out);
    }
    out
}

/// Percent-encodes `s` as one component of an `application/x-www-form-urlencoded` string.
pub(crate) fn encode_component(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => {
                out.push('%');
                out.push(HEX[usize::from(b >> 4)] as char);
                out.push(HEX[usize::from(b & 0xf)] as char);
            }
        }
    }
}

/// Parses an `application/x-www-form-urlencoded` string (a query, a form body) into its pairs,
/// in order (the WHATWG URL standard's parser): `&`-separated, empty pieces skipped, the name
/// ending at the first `=` (a piece without one has an empty value), `+` as a space, `%XX`
/// decoded; a `%` not followed by two hex digits is kept as it is, and bytes that do not form
/// UTF-8 become U+FFFD.
// Its callers are the client's redirect parsing (the authorization code flow).
#[cfg_attr(not(feature = "client"), allow(dead_code))]
pub(crate) fn form_decode(input: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let escaped = match bytes.get(i..i + 3) {
                Some([b'%', hi, lo]) => hex(*hi).zip(hex(*lo)),
                _ => None,
            };
            match (bytes[i], escaped) {
                (_, Some((hi, lo))) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                (b'+', None) => out.push(b' '),
                (b, None) => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    input
        .split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (name, value) = piece.split_once('=').unwrap_or((piece, ""));
            (decode(name), decode(value))
        })
        .collect()
}

/// HTTP Basic credentials per RFC 6749 section 2.3.1: the client id and secret are each
/// form-urlencoded, then `id:secret` is base64-encoded.
pub(crate) fn basic_auth(client_id: &str, client_secret: &str) -> String {
    let mut pair = String::new();
    encode_component(client_id, &mut pair);
    pair.push(':');
    encode_component(client_secret, &mut pair);
    format!("Basic {}", STANDARD.encode(pair))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http::{Method, Response, StatusCode};
    use hyper::body::Incoming;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// What the test server saw of a request.
    pub(crate) struct Seen {
        pub(crate) method: Method,
        pub(crate) path: String,
        pub(crate) headers: HeaderMap,
        pub(crate) body: Bytes,
    }

    type Handler = dyn Fn(Seen) -> Response<Full<Bytes>> + Send + Sync;

    /// An HTTP/1.1 server on 127.0.0.1:0 answering every request with `handler`.
    pub(crate) async fn serve(handler: Arc<Handler>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let handler = handler.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let handler = handler.clone();
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await?.to_bytes();
                            let seen = Seen {
                                method: parts.method,
                                path: parts.uri.path().to_owned(),
                                headers: parts.headers,
                                body,
                            };
                            Ok::<_, hyper::Error>(handler(seen))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        addr
    }

    /// A server that answers each connection's first request with `raw` bytes and then holds
    /// the connection open.
    async fn serve_raw(raw: Vec<u8>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let raw = raw.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = stream.write_all(&raw).await;
                    tokio::time::sleep(Duration::from_secs(60)).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn get_sends_accept_and_returns_status_headers_and_body() {
        let addr = serve(Arc::new(|seen: Seen| {
            assert_eq!(seen.method, Method::GET);
            assert_eq!(seen.headers[ACCEPT], "application/json");
            Response::builder()
                .header("cache-control", "max-age=60")
                .body(Full::new(Bytes::from(format!(
                    "{{\"path\":\"{}\"}}",
                    seen.path
                ))))
                .unwrap()
        }))
        .await;
        let response = HttpFetch::new()
            .get(&format!("http://{addr}/keys"))
            .await
            .unwrap();
        assert_eq!(response.status, StatusCode::OK);
        assert_eq!(response.headers["cache-control"], "max-age=60");
        assert_eq!(response.body, "{\"path\":\"/keys\"}");
    }

    #[tokio::test]
    async fn form_post_is_percent_encoded_with_basic_auth_per_rfc_6749() {
        let addr = serve(Arc::new(|seen: Seen| {
            assert_eq!(seen.method, Method::POST);
            assert_eq!(
                seen.headers[CONTENT_TYPE],
                "application/x-www-form-urlencoded"
            );
            let auth = seen.headers[AUTHORIZATION].to_str().unwrap().to_owned();
            let body = String::from_utf8(seen.body.to_vec()).unwrap();
            Response::new(Full::new(Bytes::from(format!("{auth}\n{body}"))))
        }))
        .await;
        let response = HttpFetch::new()
            .post_form(
                &format!("http://{addr}/introspect"),
                &[("token", "a b&c=d/é~"), ("token_type_hint", "access_token")],
                Some(("app:1", "s+cret é")),
            )
            .await
            .unwrap();
        let text = String::from_utf8(response.body.to_vec()).unwrap();
        let (auth, body) = text.split_once('\n').unwrap();
        assert_eq!(
            body,
            "token=a+b%26c%3Dd%2F%C3%A9%7E&token_type_hint=access_token"
        );
        let encoded = auth.strip_prefix("Basic ").unwrap();
        let decoded = String::from_utf8(STANDARD.decode(encoded).unwrap()).unwrap();
        assert_eq!(decoded, "app%3A1:s%2Bcret+%C3%A9");
    }

    #[tokio::test]
    async fn bodies_are_bounded_to_256_kib() {
        let addr = serve(Arc::new(|seen: Seen| {
            let len = if seen.path == "/big" {
                BODY_LIMIT + 1
            } else {
                BODY_LIMIT
            };
            Response::new(Full::new(Bytes::from(vec![b'x'; len])))
        }))
        .await;
        let fetch = HttpFetch::new();
        let ok = fetch.get(&format!("http://{addr}/exact")).await.unwrap();
        assert_eq!(ok.body.len(), BODY_LIMIT);
        let big = fetch.get(&format!("http://{addr}/big")).await;
        assert!(
            matches!(big, Err(FetchError::TooLarge { limit, .. }) if limit == BODY_LIMIT),
            "{big:?}"
        );
        // Without a Content-Length: chunks past the bound are refused while reading.
        let mut raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..5 {
            raw.extend_from_slice(format!("{:x}\r\n", 64 * 1024).as_bytes());
            raw.extend(std::iter::repeat_n(b'y', 64 * 1024));
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        let chunked = serve_raw(raw).await;
        let big = fetch.get(&format!("http://{chunked}/")).await;
        assert!(matches!(big, Err(FetchError::TooLarge { .. })), "{big:?}");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                open.push(stream);
            }
        });
        let started = std::time::Instant::now();
        let result = HttpFetch::new()
            .with_timeout(Duration::from_millis(200))
            .get(&format!("http://{addr}/"))
            .await;
        assert!(matches!(result, Err(FetchError::Io { .. })), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        // The bound covers the body too: headers at once, then a body that never ends.
        let stalled =
            serve_raw(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"a\"".to_vec()).await;
        let started = std::time::Instant::now();
        let result = HttpFetch::new()
            .with_timeout(Duration::from_millis(200))
            .get(&format!("http://{stalled}/"))
            .await;
        assert!(matches!(result, Err(FetchError::Io { .. })), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        // The default bound is 5 s over the whole exchange.
        assert_eq!(HttpFetch::new().timeout, Duration::from_secs(5));
    }

    #[tokio::test]
    async fn redirects_are_not_followed() {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let addr = serve(Arc::new(move |seen: Seen| {
            if seen.path == "/elsewhere" {
                counted.fetch_add(1, Ordering::SeqCst);
                return Response::new(Full::new(Bytes::from_static(b"{}")));
            }
            Response::builder()
                .status(StatusCode::FOUND)
                .header("location", "/elsewhere")
                .body(Full::new(Bytes::new()))
                .unwrap()
        }))
        .await;
        let response = HttpFetch::new()
            .get(&format!("http://{addr}/jwks"))
            .await
            .unwrap();
        assert_eq!(response.status, StatusCode::FOUND);
        assert_eq!(hits.load(Ordering::SeqCst), 0);
    }

    /// A one-request-per-connection HTTPS server on 127.0.0.1 with a certificate for
    /// `localhost` from the private CA of `tests/fixtures/tls-ca.pem`; serves `connections`
    /// connections (a failed handshake counts).
    #[cfg(feature = "rustls")]
    fn serve_private_tls(connections: usize) -> u16 {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use std::io::{Read, Write};

        let cert =
            CertificateDer::from_pem_slice(include_bytes!("../tests/fixtures/tls-localhost.pem"))
                .unwrap();
        let key =
            PrivateKeyDer::from_pem_slice(include_bytes!("../tests/fixtures/tls-localhost.key"))
                .unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap(),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(connections) {
                let connection = rustls::ServerConnection::new(config.clone()).unwrap();
                let mut tls = rustls::StreamOwned::new(connection, stream.unwrap());
                let mut request = Vec::new();
                let mut buf = [0; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                if request.is_empty() {
                    continue;
                }
                let _ = tls.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                );
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        port
    }

    #[cfg(feature = "rustls")]
    #[tokio::test]
    async fn with_tls_reaches_a_server_behind_a_private_ca() {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;

        let port = serve_private_tls(2);
        let url = format!("https://localhost:{port}/.well-known/oauth-authorization-server");
        // The default client trusts the web's roots only.
        let refused = HttpFetch::new().get(&url).await.unwrap_err();
        assert!(matches!(refused, FetchError::Io { .. }), "{refused:?}");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(
                CertificateDer::from_pem_slice(include_bytes!("../tests/fixtures/tls-ca.pem"))
                    .unwrap(),
            )
            .unwrap();
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        // ALPN protocols of the caller's are replaced, not a panic.
        tls.alpn_protocols = vec![b"h2".to_vec()];
        let response = HttpFetch::with_tls(Arc::new(tls)).get(&url).await.unwrap();
        assert_eq!(response.status, StatusCode::OK);
        assert_eq!(&response.body[..], b"{}");
    }

    #[tokio::test]
    async fn plain_http_is_refused_unless_the_host_is_loopback() {
        for ok in [
            "http://127.0.0.1:8080/x",
            "http://127.1.2.3/x",
            "http://localhost/x",
            "http://LOCALHOST:1/x",
            "http://[::1]:9/x",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        #[cfg(feature = "rustls")]
        assert!(check_url("https://id.example.com/jwks").is_ok());
        for bad in [
            "http://id.example.com/jwks",
            "http://10.0.0.1/jwks",
            "http://localhost.example.com/",
            "http://[::2]/",
            "ftp://127.0.0.1/",
            "/relative",
            "https://user:pw@id.example.com/",
            "http://user@127.0.0.1/",
        ] {
            assert!(
                matches!(check_url(bad), Err(FetchError::Url { .. })),
                "{bad}"
            );
        }
        // Refused before any connection: the host does not resolve and nothing listens.
        let fetch = HttpFetch::new();
        let get = fetch.get("http://id.example.invalid/jwks").await;
        assert!(matches!(get, Err(FetchError::Url { .. })), "{get:?}");
        let post = fetch
            .post_form("http://id.example.invalid/introspect", &[("a", "b")], None)
            .await;
        assert!(matches!(post, Err(FetchError::Url { .. })), "{post:?}");
    }

    #[tokio::test]
    async fn send_takes_any_method_extra_headers_and_a_json_body() {
        let addr = serve(Arc::new(|seen: Seen| {
            let header = |name: &str| {
                seen.headers
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_owned())
                    .unwrap_or_default()
            };
            let echo = serde_json::json!({
                "method": seen.method.as_str(),
                "accept": header("accept"),
                "content_type": header("content-type"),
                "dpop": header("dpop"),
                "authorization": header("authorization"),
                "body": String::from_utf8(seen.body.to_vec()).unwrap(),
            });
            Response::builder()
                .status(StatusCode::CREATED)
                .header("dpop-nonce", "n1")
                .body(Full::new(Bytes::from(echo.to_string())))
                .unwrap()
        }))
        .await;
        let url = format!("http://{addr}/register");
        let fetch = HttpFetch::new();
        let response = fetch
            .send(
                FetchRequest::post_json(&url, &serde_json::json!({"client_name": "x"}))
                    .header(
                        HeaderName::from_static("dpop"),
                        HeaderValue::from_static("proof"),
                    )
                    .basic("id", "s"),
            )
            .await
            .unwrap();
        assert_eq!(response.status, StatusCode::CREATED);
        assert_eq!(response.headers["dpop-nonce"], "n1");
        let echo: serde_json::Value = response.json().unwrap();
        assert_eq!(echo["method"], "POST");
        assert_eq!(echo["accept"], "application/json");
        assert_eq!(echo["content_type"], "application/json");
        assert_eq!(echo["dpop"], "proof");
        assert_eq!(echo["authorization"], basic_auth("id", "s"));
        assert_eq!(echo["body"], "{\"client_name\":\"x\"}");

        // Another method, no body; a header of the caller's replaces the client's own.
        let mut request = FetchRequest::get(&url)
            .header(ACCEPT, HeaderValue::from_static("application/jwk-set+json"));
        request.method = Method::DELETE;
        let echo: serde_json::Value = fetch.send(request).await.unwrap().json().unwrap();
        assert_eq!(echo["method"], "DELETE");
        assert_eq!(echo["accept"], "application/jwk-set+json");
        assert_eq!(echo["content_type"], "");
        assert_eq!(echo["body"], "");

        // A form POST through `send` is the form POST of `post_form`.
        let form = [("grant_type", "client_credentials"), ("scope", "a b")];
        let echo: serde_json::Value = fetch
            .send(FetchRequest::post_form(&url, &form))
            .await
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(echo["content_type"], "application/x-www-form-urlencoded");
        assert_eq!(echo["body"], "grant_type=client_credentials&scope=a+b");
        assert_eq!(echo["authorization"], "");

        // The URL rules hold for `send` too: refused before any connection.
        let refused = fetch
            .send(FetchRequest::post_json(
                "http://id.example.invalid/register",
                &serde_json::json!({}),
            ))
            .await;
        assert!(
            matches!(refused, Err(FetchError::Url { .. })),
            "{refused:?}"
        );
    }

    /// A client implementing only what the resource server needs (as before `send` existed).
    #[derive(Debug, Default)]
    struct Minimal {
        calls: std::sync::Mutex<Vec<String>>,
    }

    impl Fetch for Minimal {
        fn get<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
            self.calls.lock().unwrap().push(format!("GET {url}"));
            Box::pin(async { Ok(FetchResponse::new(StatusCode::OK, "{}")) })
        }

        fn post_form<'a>(
            &'a self,
            url: &'a str,
            form: &'a [(&'a str, &'a str)],
            basic: Option<(&'a str, &'a str)>,
        ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("POST {url} {} {basic:?}", form_encode(form)));
            Box::pin(async { Ok(FetchResponse::new(StatusCode::OK, "{}")) })
        }
    }

    #[tokio::test]
    async fn the_provided_send_maps_onto_get_and_post_form_and_refuses_the_rest() {
        let fetch = Minimal::default();
        let shared: Arc<dyn Fetch> = Arc::new(Minimal::default());
        fetch.send(FetchRequest::get("https://as/m")).await.unwrap();
        let form = [("a", "b")];
        fetch
            .send(FetchRequest::post_form("https://as/t", &form).basic("id", "s"))
            .await
            .unwrap();
        assert_eq!(
            *fetch.calls.lock().unwrap(),
            [
                "GET https://as/m",
                "POST https://as/t a=b Some((\"id\", \"s\"))"
            ]
        );
        // Through an `Arc` as well.
        shared
            .send(FetchRequest::get("https://as/m"))
            .await
            .unwrap();
        for request in [
            FetchRequest::get("https://as/m").header(
                HeaderName::from_static("dpop"),
                HeaderValue::from_static("p"),
            ),
            FetchRequest::get("https://as/m").basic("id", "s"),
            FetchRequest::post_json("https://as/r", &serde_json::json!({})),
            FetchRequest::post_form("https://as/t", &form).header(
                HeaderName::from_static("dpop"),
                HeaderValue::from_static("p"),
            ),
        ] {
            let result = fetch.send(request).await;
            assert!(
                matches!(result, Err(FetchError::Unsupported { .. })),
                "{result:?}"
            );
        }
        assert_eq!(fetch.calls.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_requests_debug_shows_no_secret() {
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", "rt-SECRET"),
        ];
        let request = FetchRequest::post_form("https://as/token", &form)
            .basic("client", "cs-SECRET")
            .header(
                HeaderName::from_static("dpop"),
                HeaderValue::from_static("proof-SECRET"),
            );
        let shown = format!("{request:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(
            shown.contains("refresh_token") && shown.contains("client") && shown.contains("dpop"),
            "{shown}"
        );
        let json = FetchRequest::post_json("https://as/r", &serde_json::json!({"s": "SECRET"}));
        let shown = format!("{json:?}");
        assert!(
            !shown.contains("SECRET") && shown.contains("Json(14 bytes)"),
            "{shown}"
        );
    }

    #[test]
    fn form_decoding_follows_the_urlencoded_parser() {
        let pairs = |s: &str| form_decode(s);
        assert_eq!(
            pairs("code=a%2Bb+c&state=x&&iss=https%3A%2F%2Fas.example.com%2F"),
            [
                ("code".to_owned(), "a+b c".to_owned()),
                ("state".to_owned(), "x".to_owned()),
                ("iss".to_owned(), "https://as.example.com/".to_owned()),
            ]
        );
        assert_eq!(pairs(""), []);
        assert_eq!(
            pairs("flag&a=1=2&%zz=%4&%C3%A9=%FF"),
            [
                ("flag".to_owned(), String::new()),
                ("a".to_owned(), "1=2".to_owned()),
                ("%zz".to_owned(), "%4".to_owned()),
                ("é".to_owned(), "\u{FFFD}".to_owned()),
            ]
        );
        // What `form_encode` writes, `form_decode` reads back.
        let form = [("a b", "+&=%/é~"), ("", "x")];
        let decoded = form_decode(&form_encode(&form));
        let expected: Vec<_> = form
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(decoded, expected);
    }

    #[test]
    fn form_encoding_follows_the_urlencoded_serializer() {
        assert_eq!(form_encode(&[]), "");
        assert_eq!(
            form_encode(&[("a", "AZaz09*-._"), ("b c", "+&=%")]),
            "a=AZaz09*-._&b+c=%2B%26%3D%25"
        );
    }
}
