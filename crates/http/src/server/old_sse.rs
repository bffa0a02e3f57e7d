//! The deprecated HTTP+SSE transport of protocol 2024-11-05 (feature `legacy-sse`, off by
//! default): a GET opens the session's one SSE stream, whose first event (`endpoint`) names the
//! URL to POST messages to; every message of the server, responses included, is a `message`
//! event on that stream; the session ends when the stream closes.

use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use modelctx_types::ErrorCode;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::app::{LegacySession, McpApp, Principal, RequestContext};
use super::endpoint::Shared;
use super::guard;
use super::respond::{self, ResponseBody, sse_headers};
use crate::sse::StreamBody;

/// Where the deprecated transport is served.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OldSsePaths {
    /// The GET that opens a session's stream (default `/sse`).
    pub sse: String,
    /// Where messages are POSTed, with `?sessionId=` (default `/messages`).
    pub messages: String,
}

impl Default for OldSsePaths {
    fn default() -> Self {
        OldSsePaths {
            sse: "/sse".into(),
            messages: "/messages".into(),
        }
    }
}

/// GET on the SSE path: opens a session and its stream.
pub(crate) async fn open(
    shared: &Arc<Shared>,
    app: &Arc<dyn McpApp>,
    parts: &http::request::Parts,
    paths: &OldSsePaths,
) -> Response<ResponseBody> {
    let principal = parts.extensions.get::<Principal>().cloned();
    let peer = super::service::peer_of(parts).map(|p| p.ip());
    let Some(session) = shared.open(principal, peer).await else {
        return respond::error_code(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            ErrorCode(-32000),
            "too many sessions; try again later",
        );
    };
    let (tx, rx) = mpsc::channel(shared.config.stream_buffer.max(1));
    session.use_old_sse(tx).await;
    let handler = app.open_session(LegacySession {
        inner: session.clone(),
    });
    let _ = session.handler.set(handler);
    let endpoint = format!(
        "event: endpoint\ndata: {}?sessionId={}\n\n",
        paths.messages, session.id
    );
    // The stream closing (the client went away) ends the session.
    let closed = CancellationToken::new();
    let watcher = closed.clone();
    let ending = session.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = watcher.cancelled() => ending.end().await,
            () = ending.ended.cancelled() => {}
        }
    });
    let body = StreamBody::new(
        Some(Bytes::from(endpoint)),
        rx,
        shared.config.keep_alive,
        session.ended.clone(),
        Some(closed),
    )
    .counted(shared.counters.stream());
    let mut response = Response::new(body.boxed_unsync());
    sse_headers(&mut response);
    response
}

/// POST on the messages path: the message goes to the session; the answer comes on its stream.
/// With a guard, a message with a request that needs a scope the grant lacks is refused (the
/// guard's challenge) before the session sees any of it.
pub(crate) async fn post(
    shared: &Arc<Shared>,
    app: &Arc<dyn McpApp>,
    parts: Arc<http::request::Parts>,
    body: Bytes,
) -> Response<ResponseBody> {
    let id = parts
        .uri
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("sessionId="));
    let Some(id) = id else {
        return respond::error_code(
            StatusCode::BAD_REQUEST,
            None,
            ErrorCode::INVALID_REQUEST,
            "missing sessionId",
        );
    };
    let principal = parts.extensions.get::<Principal>();
    let Some(session) = shared.find(id, principal) else {
        return respond::error_code(
            StatusCode::NOT_FOUND,
            None,
            ErrorCode(-32000),
            "Session not found",
        );
    };
    let incoming = match modelctx_types::decode(&body) {
        Ok(incoming) => incoming,
        Err(error) => {
            let reply = error.to_error_response();
            return respond::error(StatusCode::BAD_REQUEST, reply.id, reply.error);
        }
    };
    if let Some(refused) = guard::check_scopes(&shared.config, &parts, app.as_ref(), &incoming) {
        return refused;
    }
    let Some(handler) = session.handler.get() else {
        return respond::empty(StatusCode::NOT_FOUND);
    };
    handler.input(incoming, RequestContext { parts });
    respond::empty(StatusCode::ACCEPTED)
}
