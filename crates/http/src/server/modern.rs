//! Modern (2026-07-28) requests: stateless, one POST per message, checked before anything runs.

use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use modelctx_types::{ErrorCode, ErrorObject, ErrorResponse, Message, RequestId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::app::{McpApp, ModernReply, ModernRequest, RequestContext, Sent};
use super::endpoint::Shared;
use super::respond::{self, ResponseBody, encode, modern_status, sse_headers};
use crate::headers::{self, RequestFields};
use crate::sse::{self, StreamBody};

/// The protocol version a message's `_meta` names, if any (for routing: a POST whose body names
/// a version takes this path).
pub(crate) fn meta_version(message: &Message) -> Option<String> {
    let params = match message {
        Message::Request(r) => r.params.as_deref(),
        Message::Notification(n) => n.params.as_deref(),
        _ => None,
    };
    RequestFields::parse(params).version().map(str::to_owned)
}

/// Handles one modern message.
///
/// The transport checks the wire only: that the headers agree with the body (`MCP-Protocol-Version`,
/// `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`: -32020, by [`headers`]). What `_meta` must carry
/// (-32602) and which versions are served (-32022) are the protocol session's rules: the
/// application answers them, with [`ModernReply::refuse`], which the transport turns into an HTTP
/// error status.
pub(crate) async fn handle(
    shared: &Arc<Shared>,
    app: &Arc<dyn McpApp>,
    parts: Arc<http::request::Parts>,
    message: Message,
) -> Response<ResponseBody> {
    let (id, method, params) = match &message {
        Message::Request(r) => (Some(r.id.clone()), r.method.as_str(), r.params.as_deref()),
        Message::Notification(n) => (None, n.method.as_str(), n.params.as_deref()),
        _ => {
            return respond::error_code(
                StatusCode::BAD_REQUEST,
                None,
                ErrorCode::INVALID_REQUEST,
                "a 2026-07-28 client never sends responses",
            );
        }
    };
    let fields = RequestFields::parse(params);
    let agreed = match &id {
        Some(_) => {
            let tool_headers = fields
                .tool(method)
                .and_then(|tool| app.tool_param_headers(tool));
            headers::check_request_fields(&parts.headers, method, &fields, tool_headers.as_deref())
        }
        None => headers::check_version(&parts.headers, fields.version()),
    };
    if let Err(mismatch) = agreed {
        return respond::error_code(
            StatusCode::BAD_REQUEST,
            id,
            ErrorCode::HEADER_MISMATCH,
            mismatch.to_string(),
        );
    }
    drop(fields);
    dispatch(shared, app, parts, message).await
}

/// Hands a request or notification to the application as a modern one, without header checks,
/// and answers from what it sends: `handle` once the headers agree, and the service for a
/// legacy `initialize` on an endpoint that serves no legacy version (the application's session
/// refuses it).
pub(crate) async fn dispatch(
    shared: &Arc<Shared>,
    app: &Arc<dyn McpApp>,
    parts: Arc<http::request::Parts>,
    message: Message,
) -> Response<ResponseBody> {
    let config = &shared.config;
    let id = match &message {
        Message::Request(r) => Some(r.id.clone()),
        _ => None,
    };
    let context = RequestContext { parts };
    let cancelled = CancellationToken::new();
    let Some(id) = id else {
        // A notification is accepted (202) unless the application refuses it (its version or
        // `_meta`), which it does before letting go of the reply.
        let (tx, mut rx) = mpsc::channel::<Sent>(1);
        app.modern(ModernRequest {
            message,
            context,
            reply: ModernReply {
                tx: Some(tx),
                cancelled,
            },
        });
        while let Some(sent) = rx.recv().await {
            if sent.refusal {
                return respond::json(modern_status(&sent), encode(&sent.message));
            }
        }
        return respond::empty(StatusCode::ACCEPTED);
    };
    let (tx, mut rx) = mpsc::channel::<Sent>(config.stream_buffer.max(1));
    // Dropped before the answer (the client went away): the request is cancelled.
    let guard = cancelled.clone().drop_guard();
    app.modern(ModernRequest {
        message,
        context,
        reply: ModernReply {
            tx: Some(tx),
            cancelled: cancelled.clone(),
        },
    });
    let Some(first) = next_on_stream(&mut rx, &id).await else {
        drop(guard.disarm());
        return respond::error_code(
            StatusCode::INTERNAL_SERVER_ERROR,
            Some(id),
            ErrorCode::INTERNAL_ERROR,
            "the server ended the request without a response",
        );
    };
    let complete = answers(&first.message, &id);
    if complete && (first.refusal || !config.sse_responses) {
        // A refusal is an HTTP error: always a JSON body with its status.
        drop(guard.disarm());
        return respond::json(modern_status(&first), encode(&first.message));
    }
    // Something before the response (or SSE configured): a stream, with no event ids (no
    // resumption in this era).
    drop(guard.disarm());
    let (frames, frames_rx) = mpsc::channel::<Bytes>(config.stream_buffer.max(1));
    let stop = cancelled.clone();
    if complete {
        // The stream ends after its first event.
        drop(frames);
    } else {
        tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    m = next_on_stream(&mut rx, &id) => m,
                    () = stop.cancelled() => None,
                };
                let Some(Sent { message, .. }) = message else {
                    break;
                };
                let last = answers(&message, &id);
                if frames
                    .send(sse::event(None, &encode(&message)))
                    .await
                    .is_err()
                {
                    break;
                }
                if last {
                    break;
                }
            }
        });
    }
    let body = StreamBody::new(
        Some(sse::event(None, &encode(&first.message))),
        frames_rx,
        config.keep_alive,
        shared.shutdown.clone(),
        Some(cancelled),
    )
    .counted(shared.counters.stream());
    let mut response = Response::new(body.boxed_unsync());
    sse_headers(&mut response);
    response
}

/// The next message the application sends for request `id`'s stream. A 2026-07-28 server
/// never sends independent requests on a request's stream (it asks with `input_required`
/// results): a request here is the application's bug. It is not written; it is logged as an
/// error, and the request is answered with an internal error (-32603) in its place, which ends
/// the stream.
async fn next_on_stream(rx: &mut mpsc::Receiver<Sent>, id: &RequestId) -> Option<Sent> {
    let sent = rx.recv().await?;
    let Message::Request(request) = &sent.message else {
        return Some(sent);
    };
    tracing::error!(
        method = %request.method,
        "the application sent a request on a 2026-07-28 request's stream; the request fails"
    );
    let error = ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        format!(
            "the server sent a request (`{}`) on this request's stream, which 2026-07-28 forbids",
            request.method
        ),
    );
    Some(Sent {
        message: ErrorResponse::new(Some(id.clone()), error).into(),
        refusal: false,
    })
}

fn answers(message: &Message, id: &RequestId) -> bool {
    respond::final_id(message) == Some(id)
}
