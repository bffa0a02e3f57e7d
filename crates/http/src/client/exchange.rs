//! One HTTP exchange's head: the request builder with the configured headers, and the wait for
//! the response head within the configured times. Shared by the Streamable HTTP exchanges
//! (`request.rs`) and the 2024-11-05 fallback (`old_sse.rs`).

use bytes::Bytes;
use http::{Method, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming as Body;

use super::{Shared, TransportError};

/// A request builder with the configured headers.
pub(crate) fn builder(shared: &Shared, method: Method, uri: &Uri) -> http::request::Builder {
    let mut builder = http::Request::builder().method(method).uri(uri.clone());
    if let Some(headers) = builder.headers_mut() {
        headers.extend(shared.config.headers.clone());
    }
    builder
}

/// Sends a request and waits for the response head, within the configured time.
pub(crate) async fn exchange_head(
    shared: &Shared,
    request: http::Request<Full<Bytes>>,
) -> Result<Response<Body>, TransportError> {
    let call = shared.http.request(request);
    let result = match shared.config.response_timeout {
        Some(limit) => match tokio::time::timeout(limit, call).await {
            Ok(r) => r,
            Err(_) => return Err(TransportError::Timeout(limit)),
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

/// [`exchange_head`] for an exchange that awaits a status only, within
/// [`ClientConfig::one_way_timeout`](super::ClientConfig::one_way_timeout) as well.
pub(crate) async fn exchange_status(
    shared: &Shared,
    request: http::Request<Full<Bytes>>,
) -> Result<Response<Body>, TransportError> {
    let limit = shared.config.one_way_timeout;
    tokio::time::timeout(limit, exchange_head(shared, request))
        .await
        .unwrap_or(Err(TransportError::Timeout(limit)))
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
    use super::connect_failure;

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
