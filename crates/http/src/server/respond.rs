//! Building responses: JSON bodies, SSE heads, and errors with their status codes.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use modelctx_types::{ErrorCode, ErrorObject, ErrorResponse, Message, RequestId};

use super::app::Sent;

/// The body of every response: a whole JSON body or an SSE stream.
pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// The reference server's code for requests refused at the HTTP level (Host, Origin, sessions,
/// 503s).
pub(crate) const REFUSED: ErrorCode = ErrorCode(-32000);

/// A JSON response.
pub(crate) fn json(status: StatusCode, body: Bytes) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(body).map_err(|e| match e {}).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An empty response.
pub(crate) fn empty(status: StatusCode) -> Response<ResponseBody> {
    let mut response = Response::new(
        Full::new(Bytes::new())
            .map_err(|e| match e {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response
}

/// A JSON-RPC error response with this HTTP status.
pub(crate) fn error(
    status: StatusCode,
    id: Option<RequestId>,
    error: ErrorObject,
) -> Response<ResponseBody> {
    json(status, encode(&ErrorResponse::new(id, error).into()))
}

/// A JSON-RPC error with this code and message.
pub(crate) fn error_code(
    status: StatusCode,
    id: Option<RequestId>,
    code: ErrorCode,
    message: impl Into<String>,
) -> Response<ResponseBody> {
    error(status, id, ErrorObject::new(code, message.into()))
}

/// 503 with `Retry-After: retry_after` (seconds) and a JSON-RPC error (-32000) saying why.
pub(crate) fn unavailable(
    id: Option<RequestId>,
    message: impl Into<String>,
    retry_after: &'static str,
) -> Response<ResponseBody> {
    let mut response = error_code(StatusCode::SERVICE_UNAVAILABLE, id, REFUSED, message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static(retry_after));
    response
}

/// 405 with `Allow`.
pub(crate) fn not_allowed(allow: &'static str) -> Response<ResponseBody> {
    let mut response = error_code(
        StatusCode::METHOD_NOT_ALLOWED,
        None,
        ErrorCode::INVALID_REQUEST,
        format!("method not allowed; allowed: {allow}"),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// The headers of every SSE response.
pub(crate) fn sse_headers(response: &mut Response<ResponseBody>) {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
}

/// A message as compact JSON.
pub(crate) fn encode(message: &Message) -> Bytes {
    Bytes::from(modelctx_types::encode(message))
}

/// The HTTP status of a modern request's JSON answer: the one table of error codes that are
/// HTTP errors too. A refusal (the protocol rules refused the request before it ran) is an HTTP
/// error whatever its code: 404 for -32601, else 400.
pub(crate) fn modern_status(sent: &Sent) -> StatusCode {
    match &sent.message {
        Message::Error(e) if sent.refusal => match e.error.code {
            ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        },
        Message::Error(e) => match e.error.code {
            ErrorCode::HEADER_MISMATCH
            | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => StatusCode::BAD_REQUEST,
            ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::OK,
        },
        _ => StatusCode::OK,
    }
}

/// The request a message answers, if it is a response.
pub(crate) fn final_id(message: &Message) -> Option<&RequestId> {
    match message {
        Message::Response(r) => Some(&r.id),
        Message::Error(e) => e.id.as_ref(),
        _ => None,
    }
}
