//! How the resource server talks to authorization servers: metadata, keys and introspection.

use std::fmt;

use bytes::Bytes;
use http::HeaderMap;
use modelctx_http::event_store::BoxFuture;

/// An HTTP client for the authorization server's endpoints. The default is a hyper client
/// (HTTPS with feature `rustls`); tests and applications with their own client replace it.
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
}
