//! One exchange each: a POST and what comes back, legacy resumption, modern re-issue, the
//! standalone stream.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming as Body;
use modelctx_types::{ErrorResponse, Incoming, Message, RequestId, decode};
use serde_json::Value;
use serde_json::value::RawValue;

use super::exchange::{Budget, Spec, describe, send as send_exchange};
use super::{
    Inbound, Registration, SendError, SendOptions, Shared, StandaloneStream, TaskGuard,
    TransportError,
};
use crate::headers::{
    LAST_EVENT_ID, MCP_PROTOCOL_VERSION, MCP_SESSION_ID, ParamHeader, escape,
    meta_protocol_version, request_headers,
};
use crate::sse::SseDecoder;

/// At most this much of an error body is read, and this much of it shown.
const ERROR_BODY_LIMIT: usize = 64 << 10;
const ERROR_BODY_SHOWN: usize = 200;

/// What one POST carries.
struct Exchange {
    messages: Vec<Message>,
    batch: bool,
    /// The method of a single message.
    method: Option<String>,
    /// The params of a single request, parsed for the headers.
    params: Option<Value>,
    modern: bool,
    reissue: bool,
    /// It starts a legacy session ([`SendOptions::starts_session`]).
    starts_session: bool,
    /// It is a listen request ([`SendOptions::listen`]).
    listen: bool,
    /// It completes the legacy handshake ([`SendOptions::opens_standalone`]).
    opens_standalone: bool,
    /// The `x-mcp-header` parameters the caller gave ([`SendOptions::param_headers`]).
    param_headers: Option<Arc<[ParamHeader]>>,
    /// The legacy session epoch it belongs to.
    epoch: u64,
}

/// Sends `messages` (one, or a batch) on a new task.
pub(crate) fn send(
    shared: &Arc<Shared>,
    messages: Vec<Message>,
    batch: bool,
    options: SendOptions,
) -> Result<(), SendError> {
    if !batch && messages.len() != 1 {
        return Err(SendError::Invalid("send one message at a time"));
    }
    let (method, params) = match (&messages[..], batch) {
        ([Message::Request(r)], false) => (Some(r.method.clone()), parse(r.params.as_deref())),
        ([Message::Notification(n)], false) => (Some(n.method.clone()), parse(n.params.as_deref())),
        _ => (None, None),
    };
    let modern = meta_protocol_version(params.as_ref()).is_some();
    if let Some(method) = &method {
        // Refuse now what no header can carry, rather than fail later.
        request_headers(method, params.as_ref(), None)?;
    }
    let requests: Vec<RequestId> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Request(r) => Some(r.id.clone()),
            _ => None,
        })
        .collect();
    let (epoch, old) = {
        let state = shared.state();
        (state.epoch, state.old_endpoint.clone())
    };
    let reissue = options.reissue;
    let exchange = Exchange {
        messages,
        batch,
        method,
        params,
        modern,
        reissue,
        starts_session: options.starts_session,
        listen: options.listen,
        opens_standalone: options.opens_standalone,
        param_headers: options.param_headers,
        epoch,
    };
    let registration = Registration {
        requests: requests.clone(),
        legacy: !modern,
    };
    if let Some(endpoint) = old {
        return shared.spawn(registration, move |guard| {
            super::old_sse::post(guard, endpoint, exchange.messages, exchange.batch)
        });
    }
    if requests.is_empty() {
        let opens_standalone =
            !exchange.modern && exchange.opens_standalone && shared.config.standalone_stream;
        let session = opens_standalone.then(|| shared.state().session_id.clone());
        if let Some(session) = &session {
            // Known at once, so that a client asking right after the handshake waits for it.
            shared.set_standalone(session, StandaloneStream::Opening);
        }
        let sent = shared.spawn(registration, move |guard| one_way(guard, exchange));
        if let (Err(_), Some(session)) = (&sent, &session) {
            shared.set_standalone(session, StandaloneStream::Unavailable);
        }
        sent
    } else {
        shared.spawn(registration, move |guard| run(guard, exchange, requests))
    }
}

fn parse(params: Option<&RawValue>) -> Option<Value> {
    params.and_then(|p| serde_json::from_str(p.get()).ok())
}

/// The ids a response stream is still waiting for: on the wire, and as the session knows them.
struct Pending {
    /// The exchange reading the stream (its key in the transport's table).
    key: u64,
    ids: Vec<(RequestId, RequestId)>,
    /// It reads the response to a POST of one message, which ends once answered (a batch's
    /// stream and a standalone stream are read to their end).
    answers: bool,
    /// A message was handed up since the last [`Pending::take_progress`].
    progress: bool,
    /// The next message is a listen stream's first, its acknowledgement: no sign that the
    /// stream lives (set when each stream of a listen request opens).
    acknowledgement_next: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Forgets the requests answered on other streams (see [`Shared::answered_elsewhere`]);
    /// true when none is left.
    fn answered_elsewhere(&mut self, shared: &Shared) -> bool {
        let state = shared.state();
        self.ids
            .retain(|(_, original)| state.by_request.get(original) == Some(&self.key));
        self.ids.is_empty()
    }

    fn take_progress(&mut self) -> bool {
        std::mem::take(&mut self.progress)
    }

    /// Rewrites a message from the server for the session and notes the answers.
    fn on_message(&mut self, shared: &Shared, message: Message) -> Message {
        match message {
            Message::Response(mut response) => {
                if let Some(at) = self.ids.iter().position(|(wire, _)| *wire == response.id) {
                    let (_, original) = self.ids.swap_remove(at);
                    response.id = original;
                } else {
                    shared.answered_elsewhere(&response.id, self.key);
                }
                Message::Response(response)
            }
            Message::Error(mut error) => {
                let at = match &error.id {
                    Some(id) => self.ids.iter().position(|(wire, _)| wire == id),
                    None => None,
                };
                if let Some(at) = at {
                    error.id = Some(self.ids.swap_remove(at).1);
                } else if let Some(id) = &error.id {
                    shared.answered_elsewhere(id, self.key);
                }
                Message::Error(error)
            }
            other => other,
        }
    }

    fn fail_all(&mut self, error: &TransportError) -> Vec<Inbound> {
        self.ids
            .drain(..)
            .map(|(_, id)| Inbound::RequestFailed {
                id,
                error: error.clone(),
            })
            .collect()
    }
}

/// How reading a response ended.
enum End {
    /// Every answer came.
    Answered,
    /// The stream ended or broke first.
    Broke(TransportError),
    /// It cannot go on (an oversized event, not UTF-8, not JSON-RPC).
    Fatal(TransportError),
    /// Nobody listens any more.
    Gone,
}

/// A POST of a request (or a batch with requests) and everything that follows it.
async fn run(guard: TaskGuard, mut exchange: Exchange, requests: Vec<RequestId>) {
    let shared = guard.shared().clone();
    let mut pending = Pending {
        key: guard.key(),
        ids: requests.iter().map(|id| (id.clone(), id.clone())).collect(),
        answers: exchange.method.is_some(),
        progress: false,
        acknowledgement_next: false,
    };
    let listen = exchange.listen;
    let mut reissued = 0u32;
    let mut listen_attempts = 0u32;
    let mut reopened = false;

    loop {
        pending.acknowledgement_next = listen;
        let session = if exchange.modern {
            None
        } else {
            let state = shared.state();
            if state.epoch != exchange.epoch {
                return; // its session ended; the session layer failed it
            }
            Some((state.session_id.clone(), state.version_header()))
        };
        let sent_session = session.as_ref().and_then(|(id, _)| id.clone());
        let response = match post(&shared, &exchange, session, None).await {
            Ok(r) => r,
            Err(error) => return finish(&shared, &mut pending, error).await,
        };
        let status = response.status();

        if let Some(sent) = &sent_session
            && status == StatusCode::NOT_FOUND
        {
            return session_ended(&guard, sent).await;
        }
        if !status.is_success() {
            if exchange.starts_session
                && matches!(status.as_u16(), 400 | 404 | 405)
                && shared.config.old_sse_fallback
            {
                let request = exchange.messages.pop();
                return super::old_sse::fall_back(guard, status, request).await;
            }
            let body = read_error_body(&shared, response).await;
            if let Some(mut error) = json_rpc_error(&body)
                && pending.ids.len() == 1
            {
                error.id = Some(pending.ids.remove(0).1);
                if !shared
                    .deliver(Inbound::Message(Incoming::Single(Message::Error(error))))
                    .await
                {
                    return;
                }
            }
            let failure = TransportError::Status {
                status,
                body: shown(&body),
            };
            return finish(&shared, &mut pending, failure).await;
        }

        if exchange.starts_session {
            shared.state().session_id = response.headers().get(MCP_SESSION_ID).cloned();
        }
        if reopened {
            reopened = false;
            if let Some((wire, original)) = pending.ids.first() {
                let (id, wire) = (original.clone(), wire.clone());
                if !shared.deliver(Inbound::ListenReopened { id, wire }).await {
                    return;
                }
            }
        }

        let mut decoder = SseDecoder::new(shared.config.max_event);
        let end = match content_type(&response) {
            Kind::Json => read_json(&shared, response, &mut pending).await,
            Kind::Sse => read_sse(&shared, response.into_body(), &mut decoder, &mut pending).await,
            Kind::Other(kind) => End::Fatal(if status == StatusCode::ACCEPTED || kind.is_empty() {
                TransportError::Malformed(format!("HTTP {status} without a body for a request"))
            } else {
                TransportError::ContentType(kind)
            }),
        };
        let error = match end {
            End::Answered | End::Gone => return,
            End::Fatal(error) => return finish(&shared, &mut pending, error).await,
            End::Broke(error) => error,
        };
        if !exchange.modern {
            let last = decoder.last_event_id().map(str::to_owned);
            let retry = decoder.retry();
            return follow(guard, Some(pending), last, retry, sent_session, error).await;
        }
        if listen {
            listen_attempts = if pending.take_progress() {
                1
            } else {
                listen_attempts + 1
            };
            let policy = shared.config.reconnect;
            if listen_attempts > policy.max_attempts {
                let request = pending.ids.first().map(|(_, id)| id.clone());
                let attempts = listen_attempts - 1;
                if !shared
                    .deliver(Inbound::GaveUp {
                        request,
                        attempts,
                        error: error.clone(),
                    })
                    .await
                {
                    return;
                }
                return finish(&shared, &mut pending, error).await;
            }
            tokio::time::sleep(policy.delay(listen_attempts, None)).await;
            renumber(&mut pending, &mut exchange, "listen");
            reopened = true;
            continue;
        }
        if !exchange.reissue {
            let error = TransportError::NotReissued(Box::new(error));
            return finish(&shared, &mut pending, error).await;
        }
        if reissued < shared.config.max_reissues {
            reissued += 1;
            renumber(&mut pending, &mut exchange, "reissue");
            continue;
        }
        return finish(
            &shared,
            &mut pending,
            TransportError::StreamEnded { reissued },
        )
        .await;
    }
}

/// Gives the single request of `exchange` a new wire id (a modern retry must not reuse one).
fn renumber(pending: &mut Pending, exchange: &mut Exchange, why: &str) {
    let Some(Message::Request(request)) = exchange.messages.first_mut() else {
        return;
    };
    let Some((wire, original)) = pending.ids.first_mut() else {
        return;
    };
    let next = match &*wire {
        RequestId::String(s) if s.starts_with(&format!("{original}~")) => {
            let n: u64 = s
                .rsplit('-')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            format!("{original}~{why}-{}", n + 1)
        }
        _ => format!("{original}~{why}-1"),
    };
    *wire = RequestId::String(next);
    request.id = wire.clone();
}

/// Fails every request still waiting.
async fn finish(shared: &Shared, pending: &mut Pending, error: TransportError) {
    for inbound in pending.fail_all(&error) {
        if !shared.deliver(inbound).await {
            return;
        }
    }
}

async fn session_ended(guard: &TaskGuard, sent: &HeaderValue) {
    let shared = guard.shared();
    if shared.end_session(sent, guard.key()) {
        shared.deliver(Inbound::SessionEnded).await;
    }
}

/// The POST of an exchange (sent again, the same, while the authorizer cures refusals).
/// `budget`: the one-way POST's time budget.
async fn post(
    shared: &Shared,
    exchange: &Exchange,
    session: Option<(Option<HeaderValue>, Option<HeaderValue>)>,
    budget: Option<&mut Budget>,
) -> Result<Response<Body>, TransportError> {
    let body = if exchange.batch {
        serde_json::to_vec(&exchange.messages)
    } else {
        serde_json::to_vec(&exchange.messages[0])
    }
    .map_err(|e| TransportError::Malformed(e.to_string()))?;
    let mut spec = Spec::new(shared, Method::POST, &shared.url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json, text/event-stream");
    if let Some(method) = &exchange.method {
        // `Mcp-Param-*` headers are a modern rule; the caller names their sources.
        let params = exchange
            .param_headers
            .as_deref()
            .filter(|_| exchange.modern);
        let headers = request_headers(method, exchange.params.as_ref(), params)
            .map_err(|e| TransportError::Malformed(e.to_string()))?;
        for (name, value) in headers {
            spec = spec.header(name, value);
        }
    }
    if let Some((id, version)) = session {
        if let Some(id) = id {
            spec = spec.header(MCP_SESSION_ID, id);
        }
        if let Some(version) = version {
            spec = spec.header(MCP_PROTOCOL_VERSION, version);
        }
    }
    send_exchange(shared, &spec.body(Bytes::from(body)), budget).await
}

enum Kind {
    Json,
    Sse,
    Other(String),
}

fn content_type(response: &Response<Body>) -> Kind {
    let value = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = value.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Kind::Json
    } else if essence.eq_ignore_ascii_case("text/event-stream") {
        Kind::Sse
    } else {
        Kind::Other(escape(value))
    }
}

/// The start of an error body, read within [`ClientConfig::one_way_timeout`] (empty when it does
/// not come in time): a server that sends an error head and no body cannot hold the exchange.
///
/// [`ClientConfig::one_way_timeout`]: super::ClientConfig::one_way_timeout
async fn read_error_body(shared: &Shared, response: Response<Body>) -> Bytes {
    let read = Limited::new(response.into_body(), ERROR_BODY_LIMIT).collect();
    match tokio::time::timeout(shared.config.one_way_timeout, read).await {
        Ok(Ok(body)) => body.to_bytes(),
        _ => Bytes::new(),
    }
}

fn shown(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_SHOWN)]);
    escape(text.trim())
}

/// The JSON-RPC error in the body of an error status, if that is what it is.
fn json_rpc_error(body: &[u8]) -> Option<ErrorResponse> {
    match decode(body) {
        Ok(Incoming::Single(Message::Error(error))) => Some(error),
        _ => None,
    }
}

/// A JSON response body: one message or a batch.
async fn read_json(shared: &Shared, response: Response<Body>, pending: &mut Pending) -> End {
    let limit = shared.config.max_body;
    let body = match Limited::new(response.into_body(), limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return End::Fatal(TransportError::TooLarge { limit });
        }
        Err(e) => return End::Broke(TransportError::Connection(describe(&*e))),
    };
    match decode(&body) {
        Ok(incoming) => {
            if !hand_up(shared, pending, incoming).await {
                return End::Gone;
            }
            if pending.is_empty() {
                End::Answered
            } else {
                End::Fatal(TransportError::Malformed(
                    "the JSON response does not answer the request".into(),
                ))
            }
        }
        Err(e) => End::Fatal(TransportError::Malformed(e.to_string())),
    }
}

/// Rewrites and hands up what came; false when nobody listens.
async fn hand_up(shared: &Shared, pending: &mut Pending, incoming: Incoming) -> bool {
    let incoming = match incoming {
        Incoming::Single(message) => Incoming::Single(pending.on_message(shared, message)),
        Incoming::Batch(items) => Incoming::Batch(
            items
                .into_iter()
                .map(|item| item.map(|m| pending.on_message(shared, m)))
                .collect(),
        ),
        other => other,
    };
    // The server's requests on the stream of ours belong to them.
    if !pending.ids.is_empty() {
        let during: Vec<RequestId> = pending.ids.iter().map(|(_, id)| id.clone()).collect();
        let asked: Vec<RequestId> = match &incoming {
            Incoming::Single(Message::Request(r)) => vec![r.id.clone()],
            Incoming::Batch(items) => items
                .iter()
                .filter_map(|item| match item {
                    Ok(Message::Request(r)) => Some(r.id.clone()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        for request in asked {
            let during = during.clone();
            if !shared
                .deliver(Inbound::AskedDuring { request, during })
                .await
            {
                return false;
            }
        }
    }
    // A listen stream's first message, on every stream, is its acknowledgement: it is no sign
    // that the stream lives, so a server that acknowledges and closes forever still makes the
    // client give up. (Which message it is is the session's business; the position is enough.)
    if std::mem::take(&mut pending.acknowledgement_next)
        && matches!(&incoming, Incoming::Single(Message::Notification(_)))
    {
        return shared.deliver(Inbound::Message(incoming)).await;
    }
    pending.progress = true;
    shared.deliver(Inbound::Message(incoming)).await
}

/// Reads an event stream until every answer came or it ends.
async fn read_sse(
    shared: &Shared,
    mut body: Body,
    decoder: &mut SseDecoder,
    pending: &mut Pending,
) -> End {
    let mut events = Vec::new();
    loop {
        let frame = match body.frame().await {
            None => return End::Broke(TransportError::StreamEnded { reissued: 0 }),
            Some(Err(e)) => return End::Broke(TransportError::Connection(describe(&e))),
            Some(Ok(frame)) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if let Err(e) = decoder.feed(&data, &mut events) {
            return End::Fatal(e.into());
        }
        for event in events.drain(..) {
            let delivered = match event.message() {
                None => continue, // a priming event, or one of no concern to MCP
                Some(Ok(incoming)) => hand_up(shared, pending, incoming).await,
                Some(Err(error)) => shared.deliver(Inbound::Unreadable(error)).await,
            };
            if !delivered {
                return End::Gone;
            }
        }
        if pending.is_empty() && pending.answers {
            drain(body).await;
            return End::Answered;
        }
    }
}

/// Reads the end of a stream whose answer came, briefly: a server ends the stream right after
/// the answer, and a stream read to its end gives its connection back to the pool.
async fn drain(mut body: Body) {
    const WAIT: Duration = Duration::from_millis(50);
    const MAX: usize = 64 << 10;
    let mut read = 0;
    while read <= MAX {
        match tokio::time::timeout(WAIT, body.frame()).await {
            Ok(Some(Ok(frame))) => read += frame.data_ref().map_or(0, |d| d.len()),
            _ => return,
        }
    }
}

/// A notification or a response of ours: a POST that wants 202.
async fn one_way(guard: TaskGuard, exchange: Exchange) {
    let shared = guard.shared().clone();
    let what = match (&exchange.method, exchange.messages.first()) {
        (Some(method), _) => method.clone(),
        (None, Some(Message::Response(r))) => format!("the response to {}", r.id),
        (None, Some(Message::Error(e))) => match &e.id {
            Some(id) => format!("the error response to {id}"),
            None => "an error response".into(),
        },
        _ => "a batch".into(),
    };
    let session = if exchange.modern {
        None
    } else {
        let state = shared.state();
        if state.epoch != exchange.epoch {
            return;
        }
        Some((state.session_id.clone(), state.version_header()))
    };
    let sent_session = session.as_ref().and_then(|(id, _)| id.clone());
    let opens_standalone =
        !exchange.modern && exchange.opens_standalone && shared.config.standalone_stream;
    // Nothing but a status is awaited: bounded even when requests wait for their answers
    // without a deadline, so that an unanswered POST frees its place in the table (the
    // authorizer's waits aside: they push the deadline back).
    let mut budget = Budget::new(shared.config.one_way_timeout);
    let posted = post_one_way(&shared, &exchange, session, &mut budget).await;
    let error = match posted {
        Ok(response) if response.status().is_success() => {
            if opens_standalone {
                let session = sent_session.clone();
                let spawned = shared.spawn(
                    Registration {
                        requests: Vec::new(),
                        legacy: true,
                    },
                    move |guard| follow(guard, None, None, None, session, TransportError::Closed),
                );
                if spawned.is_err() {
                    shared.set_standalone(&sent_session, StandaloneStream::Unavailable);
                }
            }
            return;
        }
        Ok(response) => {
            if let Some(sent) = &sent_session
                && response.status() == StatusCode::NOT_FOUND
            {
                return session_ended(&guard, sent).await;
            }
            let status = response.status();
            let body = read_error_body(&shared, response).await;
            TransportError::Status {
                status,
                body: shown(&body),
            }
        }
        Err(error) => error,
    };
    if opens_standalone {
        shared.set_standalone(&sent_session, StandaloneStream::Unavailable);
    }
    let answer = match &exchange.messages[..] {
        [Message::Response(r)] if !exchange.batch => Some(r.id.clone()),
        [Message::Error(e)] if !exchange.batch => e.id.clone(),
        _ => None,
    };
    shared
        .deliver(Inbound::Undelivered {
            what,
            answer,
            error,
        })
        .await;
}

/// How many times a one-way POST whose request failed before any response head came is posted
/// again.
const ONE_WAY_REPOSTS: u32 = 2;

/// The POST of a notification or a response of ours, posted again while it fails before any
/// response head or is answered 502 or 504 by a gateway (at most [`ONE_WAY_REPOSTS`] times in
/// all), and once more after a 503 whose `Retry-After` (in seconds) ends within `budget`. Every
/// send and wait is bounded by `budget` (the authorizer's waits aside: they push it back).
///
/// The case this is for: the pooled keep-alive connection the POST was written on is closed by
/// the server at that moment (`serve`'s `header_timeout` closes an idle HTTP/1 connection, the
/// client keeps one for `pool_idle_timeout`). hyper-util retries only a request never written,
/// so such a POST fails ("connection closed before message completed"), and the dead connection
/// has left the pool: the next attempt opens a new one. And its twin behind a load balancer: the
/// instance the POST reached dies before answering, and the balancer answers 502 (504 when it
/// stopped waiting); posted again, it reaches a live instance. Without it an answer to a
/// server's question (an elicitation, a sampling request) is lost, and the request that asked
/// waits for it for good (`cargo xtask soak --fleet` found it).
///
/// Posting again is safe even when the server did read the first copy. A response: the server
/// session takes an answer only for a question still waiting and ignores a second one
/// (`crates/session/src/server.rs:336`), and the HTTP server answers it 202 whatever the session
/// makes of it (`crates/http/src/server/service.rs:584`). A notification: those a client sends
/// say a state (`initialized`, of which a repeated one changes nothing,
/// `crates/session/src/server.rs:708`; `cancelled`; `roots/list_changed`). Requests never come
/// here: whether a call may be sent again is [`SendOptions::reissue`](super::SendOptions)'s.
/// Each posting again is a new exchange: the authorizer gives fresh credentials for it.
async fn post_one_way(
    shared: &Shared,
    exchange: &Exchange,
    session: Option<(Option<HeaderValue>, Option<HeaderValue>)>,
    budget: &mut Budget,
) -> Result<Response<Body>, TransportError> {
    let mut reposts = 0;
    let mut waited = false;
    loop {
        match post(shared, exchange, session.clone(), Some(budget)).await {
            Err(TransportError::Connection(why)) if reposts < ONE_WAY_REPOSTS => {
                reposts += 1;
                tracing::debug!(
                    "a one-way POST failed before any response ({why}); posting it again"
                );
            }
            Ok(response)
                if matches!(
                    response.status(),
                    StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT
                ) && reposts < ONE_WAY_REPOSTS =>
            {
                reposts += 1;
                tracing::debug!(
                    status = %response.status(),
                    "a gateway could not deliver a one-way POST; posting it again"
                );
                drop(response);
            }
            Ok(response) if response.status() == StatusCode::SERVICE_UNAVAILABLE && !waited => {
                let Some(wait) = retry_after(&response) else {
                    return Ok(response);
                };
                if tokio::time::Instant::now() + wait >= budget.deadline() {
                    return Ok(response);
                }
                waited = true;
                drop(response);
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
}

/// The wait a `Retry-After` in seconds asks for (its HTTP-date form is not read).
fn retry_after(response: &Response<Body>) -> Option<Duration> {
    let value = response.headers().get(http::header::RETRY_AFTER)?;
    let seconds: u64 = value.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds))
}

/// A legacy stream read with GET: the resumption of a request's broken response stream (with
/// `pending`, from `last` with the server's `retry`), or the standalone stream (`pending` is
/// `None`; it starts with a GET without `Last-Event-ID`).
async fn follow(
    guard: TaskGuard,
    pending: Option<Pending>,
    mut last: Option<String>,
    mut retry: Option<Duration>,
    session: Option<HeaderValue>,
    mut error: TransportError,
) {
    let shared = guard.shared().clone();
    let standalone = pending.is_none();
    let mut pending = pending.unwrap_or(Pending {
        key: guard.key(),
        ids: Vec::new(),
        answers: false,
        progress: false,
        acknowledgement_next: false,
    });
    let policy = shared.config.reconnect;
    // The standalone stream's first GET is not a reconnect.
    let mut attempts: u32 = 0;
    let mut first = standalone;
    loop {
        if !first {
            attempts += 1;
            if !standalone && pending.answered_elsewhere(&shared) {
                return; // every request of the stream was answered on another one
            }
            if !standalone && last.is_none() {
                // Nothing to resume from: the server sent no event id before the stream broke.
                return finish(&shared, &mut pending, error).await;
            }
            if attempts > policy.max_attempts {
                if standalone {
                    shared.set_standalone(&session, StandaloneStream::Unavailable);
                }
                let request = pending.ids.first().map(|(_, id)| id.clone());
                let gave_up = Inbound::GaveUp {
                    request,
                    attempts: attempts - 1,
                    error: error.clone(),
                };
                if shared.deliver(gave_up).await {
                    finish(&shared, &mut pending, error).await;
                }
                return;
            }
            tokio::time::sleep(policy.delay(attempts, retry)).await;
            if !standalone && pending.answered_elsewhere(&shared) {
                return; // answered meanwhile
            }
        }
        first = false;
        let version = {
            let state = shared.state();
            if state.session_id != session {
                return; // the session ended meanwhile
            }
            state.version_header()
        };
        let mut spec =
            Spec::new(&shared, Method::GET, &shared.url).header(ACCEPT, "text/event-stream");
        if let Some(id) = &session {
            spec = spec.header(MCP_SESSION_ID, id);
        }
        if let Some(version) = version {
            spec = spec.header(MCP_PROTOCOL_VERSION, version);
        }
        if let Some(text) = last.clone() {
            match HeaderValue::from_str(&text) {
                Ok(value) => spec = spec.header(LAST_EVENT_ID, value),
                // Without it the GET would open the standalone stream instead.
                Err(_) if !standalone => {
                    let error = TransportError::Malformed(format!(
                        "the event id {:?} cannot be sent back in Last-Event-ID",
                        escape(&text)
                    ));
                    return finish(&shared, &mut pending, error).await;
                }
                Err(_) => last = None,
            }
        }
        let response = match send_exchange(&shared, &spec, None).await {
            Ok(r) => r,
            // Authorization failed: trying again later would fail the same way.
            Err(e @ (TransportError::Auth(_) | TransportError::Malformed(_))) => {
                if standalone {
                    shared.set_standalone(&session, StandaloneStream::Unavailable);
                }
                let request = pending.ids.first().map(|(_, id)| id.clone());
                let gave_up = Inbound::GaveUp {
                    request,
                    attempts,
                    error: e.clone(),
                };
                if shared.deliver(gave_up).await {
                    finish(&shared, &mut pending, e).await;
                }
                return;
            }
            Err(e) => {
                error = e;
                continue;
            }
        };
        let status = response.status();
        if let Some(sent) = &session
            && status == StatusCode::NOT_FOUND
        {
            return session_ended(&guard, sent).await;
        }
        if standalone
            && (status == StatusCode::METHOD_NOT_ALLOWED
                || (session.is_none() && matches!(status.as_u16(), 400 | 404)))
        {
            shared.set_standalone(&session, StandaloneStream::Unavailable);
            shared.deliver(Inbound::NoStandaloneStream).await;
            return;
        }
        if !status.is_success() || !matches!(content_type(&response), Kind::Sse) {
            let body = read_error_body(&shared, response).await;
            error = TransportError::Status {
                status,
                body: shown(&body),
            };
            if !standalone {
                // The server will not resume this stream.
                let request = pending.ids.first().map(|(_, id)| id.clone());
                let gave_up = Inbound::GaveUp {
                    request,
                    attempts,
                    error: error.clone(),
                };
                if shared.deliver(gave_up).await {
                    finish(&shared, &mut pending, error).await;
                }
                return;
            }
            continue;
        }
        if standalone && shared.set_standalone(&session, StandaloneStream::Open) {
            shared.deliver(Inbound::StandaloneOpened).await;
        }
        let mut decoder = SseDecoder::new(shared.config.max_event);
        let end = read_sse(&shared, response.into_body(), &mut decoder, &mut pending).await;
        if let Some(id) = decoder.last_event_id() {
            last = Some(id.to_owned());
        }
        if let Some(r) = decoder.retry() {
            retry = Some(r);
        }
        if pending.take_progress() {
            attempts = 0;
        }
        match end {
            End::Answered | End::Gone => return,
            End::Fatal(e) => {
                if standalone {
                    shared.set_standalone(&session, StandaloneStream::Unavailable);
                    shared
                        .deliver(Inbound::GaveUp {
                            request: None,
                            attempts,
                            error: e,
                        })
                        .await;
                    return;
                }
                return finish(&shared, &mut pending, e).await;
            }
            End::Broke(e) => error = e,
        }
    }
}
