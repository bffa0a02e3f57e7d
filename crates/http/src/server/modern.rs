//! Modern (2026-07-28) requests: stateless, one POST per message, checked before anything runs.

use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use modelctx_types::{ErrorCode, ErrorObject, Message};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::app::{McpApp, ModernReply, ModernRequest, RequestContext};
use super::legacy::Shared;
use super::respond::{self, encode, modern_status, sse_headers};
use super::service::ResponseBody;
use crate::headers::{self, MCP_PROTOCOL_VERSION};
use crate::sse::{self, StreamBody};

/// `_meta` keys of a modern request.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// The protocol version a message's `_meta` names, if any.
pub(crate) fn meta_version(message: &Message) -> Option<String> {
    let params = match message {
        Message::Request(r) => r.params.as_deref(),
        Message::Notification(n) => n.params.as_deref(),
        _ => None,
    }?;
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
        version: Option<Value>,
    }
    let params: Params = serde_json::from_str(params.get()).ok()?;
    match params.meta?.version? {
        Value::String(v) => Some(v),
        other => Some(other.to_string()),
    }
}

/// Handles one modern message.
pub(crate) async fn handle(
    shared: &Arc<Shared>,
    app: &Arc<dyn McpApp>,
    parts: Arc<http::request::Parts>,
    message: Message,
) -> Response<ResponseBody> {
    let config = &shared.config;
    let (id, method, params) = match &message {
        Message::Request(r) => (Some(r.id.clone()), r.method.clone(), r.params.as_deref()),
        Message::Notification(n) => (None, n.method.clone(), n.params.as_deref()),
        _ => {
            return respond::error_code(
                StatusCode::BAD_REQUEST,
                None,
                ErrorCode::INVALID_REQUEST,
                "a 2026-07-28 client never sends responses",
            );
        }
    };
    let params: Option<Value> = params.and_then(|p| serde_json::from_str(p.get()).ok());
    let meta = params.as_ref().and_then(|p| p.get("_meta"));
    let body_version = meta
        .and_then(|m| m.get(META_VERSION))
        .and_then(Value::as_str);
    let header_version = parts
        .headers
        .get(MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok());
    // What the request must carry comes first (-32602), then whether the header agrees with
    // it (-32020), and only then whether its version is served (-32022): a request whose
    // header and body disagree is malformed whatever the versions.
    let Some(body_version) = body_version else {
        return respond::error_code(
            StatusCode::BAD_REQUEST,
            id,
            ErrorCode::INVALID_PARAMS,
            format!(
                "missing params._meta[\"{META_VERSION}\"]: a 2026-07-28 request names its version"
            ),
        );
    };
    if id.is_some() && !meta.is_some_and(|m| m.get(META_CAPABILITIES).is_some_and(Value::is_object))
    {
        return respond::error_code(
            StatusCode::BAD_REQUEST,
            id,
            ErrorCode::INVALID_PARAMS,
            format!(
                "missing params._meta[\"{META_CAPABILITIES}\"]: a 2026-07-28 request declares its client capabilities"
            ),
        );
    }
    match header_version {
        Some(h) if h == body_version => {}
        Some(_) => {
            return respond::error_code(
                StatusCode::BAD_REQUEST,
                id,
                ErrorCode::HEADER_MISMATCH,
                format!(
                    "the MCP-Protocol-Version header does not match params._meta[\"{META_VERSION}\"] ({body_version})"
                ),
            );
        }
        None => {
            return respond::error_code(
                StatusCode::BAD_REQUEST,
                id,
                ErrorCode::HEADER_MISMATCH,
                format!("missing MCP-Protocol-Version header (must be {body_version})"),
            );
        }
    }
    if !config.modern_versions.iter().any(|v| v == body_version) {
        let error = ErrorObject::new(
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
            format!("unsupported protocol version {body_version:?}"),
        )
        .with_data(&serde_json::json!({
            "supported": config.modern_versions,
            "requested": body_version,
        }))
        .unwrap_or_else(|_| {
            ErrorObject::new(
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
                "unsupported protocol version",
            )
        });
        return respond::error(StatusCode::BAD_REQUEST, id, error);
    }
    if id.is_some() {
        let tool_headers = (method == "tools/call")
            .then(|| {
                params
                    .as_ref()
                    .and_then(|p| p.get("name"))
                    .and_then(Value::as_str)
                    .and_then(|name| app.tool_param_headers(name))
            })
            .flatten();
        if let Err(mismatch) = headers::check_request(
            &parts.headers,
            &method,
            params.as_ref(),
            tool_headers.as_deref(),
        ) {
            return respond::error_code(
                StatusCode::BAD_REQUEST,
                id,
                ErrorCode::HEADER_MISMATCH,
                mismatch.to_string(),
            );
        }
    }
    let context = RequestContext { parts };
    let cancelled = CancellationToken::new();
    let Some(id) = id else {
        app.modern(ModernRequest {
            message,
            context,
            reply: ModernReply {
                tx: None,
                cancelled,
            },
        });
        return respond::empty(StatusCode::ACCEPTED);
    };
    let (tx, mut rx) = mpsc::channel::<Message>(config.stream_buffer.max(1));
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
    let Some(first) = next_on_stream(&mut rx).await else {
        drop(guard.disarm());
        return respond::error_code(
            StatusCode::INTERNAL_SERVER_ERROR,
            Some(id),
            ErrorCode::INTERNAL_ERROR,
            "the server ended the request without a response",
        );
    };
    let complete = answers(&first, &id);
    if complete && !config.sse_responses {
        drop(guard.disarm());
        return respond::json(modern_status(&first), encode(&first));
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
                    m = next_on_stream(&mut rx) => m,
                    () = stop.cancelled() => None,
                };
                let Some(message) = message else { break };
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
        Some(sse::event(None, &encode(&first))),
        frames_rx,
        config.keep_alive,
        shared.shutdown.clone(),
        Some(cancelled),
    );
    let mut response = Response::new(body.boxed_unsync());
    sse_headers(&mut response);
    response
}

/// The next message the application sends for the stream; requests are dropped (a 2026-07-28
/// server never sends independent requests on a request's stream: it asks with
/// `input_required` results).
async fn next_on_stream(rx: &mut mpsc::Receiver<Message>) -> Option<Message> {
    loop {
        match rx.recv().await? {
            Message::Request(request) => {
                tracing::warn!(
                    method = %request.method,
                    "dropped a server request on a 2026-07-28 stream"
                );
            }
            message => return Some(message),
        }
    }
}

fn answers(message: &Message, id: &modelctx_types::RequestId) -> bool {
    respond::final_id(message) == Some(id)
}
