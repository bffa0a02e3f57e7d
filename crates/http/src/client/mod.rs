//! The Streamable HTTP client transport, for both eras (feature `client`).
//!
//! An [`HttpTransport`] carries JSON-RPC messages between a client session and one MCP endpoint
//! URL. It knows the HTTP rules of the protocol and no protocol state: the session (in
//! `modelctx-session`) decides what is sent; the transport decides how.
//!
//! * **Every message is a POST** with `Accept: application/json, text/event-stream`, and the
//!   standard headers: `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, and on modern requests
//!   `Mcp-Param-{Name}` for the arguments named by the `x-mcp-header` parameters the caller
//!   gives with [`SendOptions::param_headers`] (the client facade, which lists the tools, knows
//!   them; the transport lists nothing itself).
//! * **Notifications and responses of ours** (one-way POSTs, answered with a status only): one
//!   that fails before any response head came (a connection error, say a pooled keep-alive
//!   connection the server closed as the POST was written) or is answered 502 or 504 (a load
//!   balancer whose instance died under it) is posted again, twice at most, and
//!   one refused with 503 and a `Retry-After` in seconds once more after that wait, all within
//!   [`ClientConfig::one_way_timeout`]; then it is reported ([`Inbound::Undelivered`], which
//!   names the server's request an undelivered response answered). A second copy is harmless
//!   (a server ignores an answer to a question no longer waiting). Requests are never posted
//!   again this way (see [`SendOptions::reissue`]).
//! * **Legacy requests** (no `io.modelcontextprotocol/protocolVersion` in `_meta`): the session id
//!   from the response to the request sent with [`SendOptions::starts_session`] (the
//!   `initialize`) is sent on every later request, with the negotiated version
//!   the client facade tells [`set_version`](HttpTransport::set_version); a 404 to a request that
//!   carried it means the session ended ([`Inbound::SessionEnded`]); a broken SSE response is
//!   resumed with `GET` and `Last-Event-ID` (see [`Reconnect`]); the standalone GET stream is
//!   opened once the server accepted the notification sent with
//!   [`SendOptions::opens_standalone`] (`notifications/initialized`; where it stands:
//!   [`standalone_stream`](HttpTransport::standalone_stream)); `DELETE` on
//!   [`close`](HttpTransport::close).
//!   When the `initialize` gets 400, 404 or 405 the transport falls back to the 2024-11-05 HTTP+SSE
//!   transport (a GET for the `endpoint` event, then POSTs there). A server's request that
//!   comes on the response stream of requests of ours is preceded by [`Inbound::AskedDuring`],
//!   which names them (the client facade pauses their timeouts while it answers).
//! * **Modern requests** (2026-07-28, recognised by their `_meta`): no session; a response stream
//!   that breaks loses the request, which is sent again with a new id when the caller allows it
//!   ([`SendOptions::reissue`]`(true)`, bounded; the client facade allows it for every request
//!   but a `tools/call` of a tool not marked idempotent); a broken listen stream (a request sent
//!   with [`SendOptions::listen`]) is re-opened and [`Inbound::ListenReopened`] says notifications may have been lost;
//!   [`cancel`](HttpTransport::cancel) closes the request's stream, which is how the era
//!   cancels.
//!
//! # What it does not do
//!
//! It reads no method names (the layer above says what it must know of a message with
//! [`SendOptions`]; `headers.rs` writes the `Mcp-Method`/`Mcp-Name` headers; a listen stream's
//! first message, its acknowledgement, is known by its place, not its name, and does not count as
//! a sign of life), keeps no protocol state, never answers anything itself and sends
//! no request of its own
//! (it does not list tools, filter `tools/list` results or retry after a -32020: the client
//! facade does, see `modelctx-client`): what comes back is handed up
//! as [`Inbound`] items for the session (`handle_incoming`, `request_failed`,
//! `transport_closed`). It does not probe for the era (the session does, and hears through
//! [`Inbound::RequestFailed`] when the probe got no MCP answer), does not re-initialize after a
//! session ended (the layer above starts a new session), and decides nothing of authorization:
//! an [`Authorizer`] does (see below), or a fixed `Authorization` in [`ClientConfig::headers`].
//!
//! # Authorization
//!
//! With [`ClientConfig::auth`] set, every request the transport sends (each POST of both eras,
//! the one-way POSTs, the resumption and standalone GETs, the closing `DELETE`, the 2024-11-05
//! transport's GET and POSTs) goes through one loop: the [`Authorizer`] gives the credentials
//! headers of each send ([`Authorizer::credentials`]), sees the head of each response
//! ([`Authorizer::observed`]), and is asked about each refusal, a 401 or a 403 whose
//! `WWW-Authenticate` says `error="insufficient_scope"` ([`Authorizer::refused`]): the same
//! request, the same body, is sent again with new credentials, or the failure goes up as
//! [`TransportError::Auth`]. One exchange is at most [`MAX_SENDS`] sends whatever the authorizer
//! says. The transport keeps no authorization state (each send's ticket, shown back in
//! [`Outgoing::earlier`], tells the authorizer what it tried) and knows no OAuth: `modelctx-auth`
//! implements the trait. Credentials go in headers only, never in a URL, and the transport
//! follows no redirect (a 3xx is an error status), so they never reach another origin; the
//! 2024-11-05 transport posts only to an endpoint of the server's own origin. Without an
//! authorizer a 401 fails its request with [`TransportError::Status`], as it always did.
//!
//! # Bounds
//!
//! Response bodies and SSE events have size limits, every request, notification and stream
//! under way is one entry in a bounded table that is emptied on every exit path, and what
//! comes back waits in a bounded queue: a caller that stops reading [`recv`](HttpTransport::recv)
//! stops the reading of responses.

mod auth;
#[cfg(test)]
mod auth_tests;
mod config;
mod exchange;
mod old_sse;
mod request;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use modelctx_types::{DecodeError, Incoming, Message, ProtocolVersion, RequestId};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

pub use auth::{
    AuthFailure, AuthFailureKind, Authorizer, BoxFuture, Credentials, MAX_SENDS, Outgoing, Reply,
    Retry,
};
pub use config::{ClientConfig, Reconnect};

use crate::headers::{ParamHeader, RequestHeaderError};
use crate::sse::SseError;

/// Something the transport hands up.
#[derive(Debug)]
#[non_exhaustive]
pub enum Inbound {
    /// A message from the server (a response, a notification, a request of the server's), or a
    /// batch from a 2025-03-26 server: for the session's `handle_incoming`.
    Message(Incoming),
    /// A message from the server that is not JSON-RPC; nothing can answer it.
    Unreadable(DecodeError),
    /// Request `id` got no MCP answer and will get none: for the session's `request_failed`
    /// (which also turns a failed probe into the fallback to `initialize`).
    RequestFailed {
        /// The request.
        id: RequestId,
        /// What came back instead.
        error: TransportError,
    },
    /// The server ended the legacy HTTP session: a request that carried its id got 404. The
    /// transport has forgotten the session id and dropped every legacy request in flight: fail
    /// them (the session's `transport_closed`) and start a new session, which sends a new
    /// `initialize`. Nothing is replayed.
    SessionEnded,
    /// The server offers no standalone GET stream (405, or 400 or 404 to a GET without a session
    /// id): server-initiated messages only come on the streams of requests.
    NoStandaloneStream,
    /// The standalone GET stream of the legacy session is open: what the server sends outside
    /// of any request (list changes, its own requests) reaches the client from now on.
    StandaloneOpened,
    /// Reconnecting a broken legacy stream was given up after `attempts`. `request` is the
    /// request whose response stream it was (which also gets [`Inbound::RequestFailed`]);
    /// `None` for the standalone stream.
    GaveUp {
        /// The request whose stream it was.
        request: Option<RequestId>,
        /// Reconnects tried.
        attempts: u32,
        /// The last failure.
        error: TransportError,
    },
    /// The `subscriptions/listen` stream of request `id` broke and was opened again, as request
    /// `wire`: notifications sent meanwhile may have been lost, so refresh what they would have
    /// said. The server's acknowledgement and notifications on the new stream name `wire` as
    /// their `subscriptionId` (the transport hands them up as they came, and renames only the
    /// answer to the request).
    ListenReopened {
        /// The listen request, as the session knows it.
        id: RequestId,
        /// The id the stream was opened again with.
        wire: RequestId,
    },
    /// `initialize` got `status`; the transport now speaks the 2024-11-05 HTTP+SSE transport.
    FellBack {
        /// The status of the Streamable HTTP `initialize`.
        status: StatusCode,
    },
    /// A notification or a response of ours could not be delivered (a POST that failed before
    /// any response head, or got 502 or 504, was posted again first, twice at most, within
    /// [`ClientConfig::one_way_timeout`]).
    Undelivered {
        /// Which message (its method, or the id it answered).
        what: String,
        /// The server's request it answered, when it was a response (or an error response with
        /// an id): that request waits for an answer that will not come.
        answer: Option<RequestId>,
        /// Why.
        error: TransportError,
    },
    /// The connection to the server ended for good (the HTTP+SSE stream of the 2024-11-05
    /// transport closed): for the session's `transport_closed`.
    Closed(TransportError),
    /// The server's request `request` came on the response stream of our requests `during`
    /// (those of them not answered yet): it belongs to them, as a legacy server sends a request
    /// on the stream of the request it handles. Handed up just before the
    /// [`Inbound::Message`] that carries it. A request on the standalone GET stream, or on the
    /// 2024-11-05 transport's one stream, belongs to no request in particular: no such event.
    AskedDuring {
        /// The server's request.
        request: RequestId,
        /// Our requests whose stream carried it (as the session knows them).
        during: Vec<RequestId>,
    },
}

/// The standalone GET stream of a legacy session, as far as the transport knows (see
/// [`HttpTransport::standalone_stream`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StandaloneStream {
    /// None is expected: no legacy session is initialized, the transport speaks the modern era
    /// or the 2024-11-05 transport, or [`ClientConfig::standalone_stream`] is off.
    #[default]
    NotExpected,
    /// `notifications/initialized` was sent; the stream is not open yet.
    Opening,
    /// Open ([`Inbound::StandaloneOpened`]); it stays so while a broken stream is reconnected.
    Open,
    /// The server offers none ([`Inbound::NoStandaloneStream`]), `notifications/initialized` was
    /// not accepted, or reconnecting the stream was given up ([`Inbound::GaveUp`]).
    Unavailable,
}

/// Why an HTTP exchange did not give an MCP answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The connection failed or broke.
    #[error("connection failed: {0}")]
    Connection(String),
    /// The server answered with a status that carries no JSON-RPC answer.
    #[error("HTTP {status}{}", if .body.is_empty() { String::new() } else { format!(": {}", .body) })]
    Status {
        /// The status.
        status: StatusCode,
        /// The start of the body, escaped.
        body: String,
    },
    /// The response is neither JSON nor an event stream.
    #[error("unexpected response content type {0:?}")]
    ContentType(String),
    /// A body or an event exceeds its limit.
    #[error("the response exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The body is not what the protocol says (not JSON-RPC, not UTF-8, no answer in it).
    #[error("malformed response: {0}")]
    Malformed(String),
    /// The response stream ended or broke before the answer.
    #[error("the response stream ended before the answer{}", if *.reissued > 0 { format!(" ({} times; the request was sent again with a new id each time)", .reissued + 1) } else { String::new() })]
    StreamEnded {
        /// How many times the request was sent again.
        reissued: u32,
    },
    /// The response stream of a modern request broke before the answer, and the request was not
    /// sent again: it was sent without re-issue ([`SendOptions::reissue`], default no; the
    /// client facade says no for a `tools/call` whose tool may have run already). Holds how the
    /// stream ended.
    #[error(
        "the response stream broke before the answer ({0}); the request was not sent again, since it may have taken effect (a tools/call is sent again only when the tool is idempotent or the caller allows it)"
    )]
    NotReissued(Box<TransportError>),
    /// The legacy HTTP session ended (404 for a known session id).
    #[error("the server ended the HTTP session")]
    SessionEnded,
    /// No response head came in time.
    #[error("no response within {0:?}")]
    Timeout(Duration),
    /// The 2024-11-05 transport's `endpoint` event is missing or unusable.
    #[error("HTTP+SSE endpoint: {0}")]
    Endpoint(String),
    /// The transport was closed.
    #[error("the transport is closed")]
    Closed,
    /// Authorization failed: the [`Authorizer`] could not give credentials, could not cure the
    /// server's refusal, or the server refused [`MAX_SENDS`] sends of one exchange in a row.
    /// (Without an authorizer a 401 is a [`TransportError::Status`].)
    #[error("authorization failed: {0}")]
    Auth(AuthFailure),
}

impl From<SseError> for TransportError {
    fn from(error: SseError) -> Self {
        match error {
            SseError::TooLarge { limit } => TransportError::TooLarge { limit },
            SseError::InvalidUtf8 => TransportError::Malformed(error.to_string()),
        }
    }
}

/// Why [`HttpTransport::send`] refused a message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The transport is closed.
    #[error("the transport is closed")]
    Closed,
    /// [`ClientConfig::max_in_flight`] exchanges are under way.
    #[error("{limit} HTTP exchanges are already under way")]
    TooMany {
        /// The limit.
        limit: usize,
    },
    /// A standard header cannot carry the message's method or name.
    #[error(transparent)]
    Headers(#[from] RequestHeaderError),
    /// A client sends at most one message or one batch per POST; an empty batch is nothing.
    #[error("{0}")]
    Invalid(&'static str),
}

/// Why [`HttpTransport::new`] refused a URL (or its configuration).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// Not a URI.
    #[error("invalid URL: {0}")]
    Invalid(String),
    /// Neither `http` nor `https` (which needs the feature `rustls`).
    #[error("unsupported URL scheme {0:?}")]
    Scheme(String),
    /// [`ClientConfig::headers`] holds an `Authorization` while [`ClientConfig::auth`] is set:
    /// two sources of credentials.
    #[error(
        "both ClientConfig::headers and ClientConfig::auth give credentials: remove the Authorization header"
    )]
    TwoCredentials,
}

/// How one message is sent.
///
/// A modern request whose response stream breaks before the answer is sent again with a new id
/// (at most [`ClientConfig::max_reissues`] times) only when [`reissue(true)`](Self::reissue)
/// says it is safe to repeat; by default it fails ([`TransportError::NotReissued`]). The
/// transport does not judge requests by their method: the client facade allows it for every
/// request but a `tools/call` of a tool not marked idempotent (a tool may have side effects,
/// and the server may have run it already).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SendOptions {
    /// Whether a broken modern request is sent again (default: no).
    pub(crate) reissue: bool,
    /// The `x-mcp-header` parameters of the tool a modern `tools/call` calls.
    pub(crate) param_headers: Option<Arc<[ParamHeader]>>,
    pub(crate) starts_session: bool,
    pub(crate) listen: bool,
    pub(crate) opens_standalone: bool,
}

impl SendOptions {
    /// Whether a modern request whose response stream breaks is sent again with a new id, at
    /// most [`ClientConfig::max_reissues`] times (default: no, since the transport cannot know
    /// whether a request is safe to repeat; the client facade says yes for every request but a
    /// `tools/call` of a tool not marked idempotent).
    pub fn reissue(mut self, reissue: bool) -> Self {
        self.reissue = reissue;
        self
    }

    /// The request starts a legacy session (it is the `initialize`; default no): the
    /// `Mcp-Session-Id` of its response becomes the session's, and a 400, 404 or 405 to it
    /// falls back to the 2024-11-05 HTTP+SSE transport ([`ClientConfig::old_sse_fallback`]).
    /// The transport reads no method names: the layer above says which request it is.
    pub fn starts_session(mut self) -> Self {
        self.starts_session = true;
        self
    }

    /// The notification completes the legacy handshake (it is `notifications/initialized`;
    /// default no): once the server accepted it, the session's standalone GET stream is opened
    /// ([`ClientConfig::standalone_stream`]).
    pub fn opens_standalone(mut self) -> Self {
        self.opens_standalone = true;
        self
    }

    /// The modern request is a `subscriptions/listen` (default no): its stream, which has no
    /// end, is opened again when it breaks ([`Inbound::ListenReopened`]) rather than re-issued
    /// or failed.
    pub fn listen(mut self) -> Self {
        self.listen = true;
        self
    }

    /// The `x-mcp-header` parameters of the tool a modern `tools/call` calls, as
    /// [`param_headers`](crate::headers::param_headers) reads them from the `inputSchema` the
    /// server listed: each argument they name is sent in an `Mcp-Param-{Name}` header too
    /// (default: none, so no `Mcp-Param-*` header). Ignored on legacy requests, which carry no
    /// such headers. An argument that no header can carry fails the request
    /// ([`TransportError::Malformed`]).
    pub fn param_headers(mut self, params: Arc<[ParamHeader]>) -> Self {
        self.param_headers = Some(params);
        self
    }
}

/// The sizes of the transport's tables, for tests and monitoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TableSizes {
    /// Exchanges under way (requests, notifications, responses, streams).
    pub tasks: usize,
    /// Requests under way by id.
    pub requests: usize,
}

#[cfg(not(feature = "rustls"))]
type Connector = HttpConnector;
#[cfg(feature = "rustls")]
type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

pub(crate) type HyperClient = Client<Connector, Full<Bytes>>;

/// The state the tasks share.
pub(crate) struct Shared {
    pub(crate) url: Uri,
    pub(crate) config: ClientConfig,
    pub(crate) http: HyperClient,
    pub(crate) tx: mpsc::Sender<Inbound>,
    state: Mutex<State>,
}

#[derive(Default)]
pub(crate) struct State {
    /// The legacy HTTP session id.
    pub(crate) session_id: Option<HeaderValue>,
    /// The legacy protocol version the session negotiated, as told by
    /// [`HttpTransport::set_version`].
    pub(crate) version: Option<ProtocolVersion>,
    /// Bumped when a legacy session ends: older legacy exchanges are gone.
    pub(crate) epoch: u64,
    /// The 2024-11-05 transport's POST endpoint, once fallen back.
    pub(crate) old_endpoint: Option<Uri>,
    tasks: HashMap<u64, Task>,
    by_request: HashMap<RequestId, u64>,
    next_key: u64,
    pub(crate) closed: bool,
    /// The legacy session's standalone GET stream.
    pub(crate) standalone: StandaloneStream,
}

impl State {
    /// The `MCP-Protocol-Version` header of the legacy session's requests, once told.
    pub(crate) fn version_header(&self) -> Option<HeaderValue> {
        self.version.map(|v| HeaderValue::from_static(v.as_str()))
    }
}

struct Task {
    abort: AbortHandle,
    /// Part of the legacy session (ended with it).
    legacy: bool,
}

/// Removes a task's entries when it ends, however it ends.
pub(crate) struct TaskGuard {
    shared: Arc<Shared>,
    key: u64,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        state.tasks.remove(&self.key);
        let key = self.key;
        state.by_request.retain(|_, k| *k != key);
    }
}

/// What a task is for, at registration.
pub(crate) struct Registration {
    pub(crate) requests: Vec<RequestId>,
    pub(crate) legacy: bool,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spawns a task registered in the table (refused past the limit, or once closed).
    pub(crate) fn spawn<F>(
        self: &Arc<Self>,
        registration: Registration,
        task: impl FnOnce(TaskGuard) -> F,
    ) -> Result<(), SendError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut state = self.state();
        if state.closed {
            return Err(SendError::Closed);
        }
        if state.tasks.len() >= self.config.max_in_flight {
            return Err(SendError::TooMany {
                limit: self.config.max_in_flight,
            });
        }
        let key = state.next_key;
        state.next_key += 1;
        let guard = TaskGuard {
            shared: self.clone(),
            key,
        };
        // The lock is held until the entry is in: the task cannot end before it is.
        let handle = tokio::spawn(task(guard));
        state.tasks.insert(
            key,
            Task {
                abort: handle.abort_handle(),
                legacy: registration.legacy,
            },
        );
        for id in registration.requests {
            state.by_request.insert(id, key);
        }
        Ok(())
    }

    /// Records where the standalone stream of the legacy session `session` stands (nothing when
    /// that session has ended meanwhile). True when it changed.
    pub(crate) fn set_standalone(
        &self,
        session: &Option<HeaderValue>,
        standalone: StandaloneStream,
    ) -> bool {
        let mut state = self.state();
        if state.session_id != *session || state.standalone == standalone {
            return false;
        }
        state.standalone = standalone;
        true
    }

    /// The answer to request `id` came on the stream of the exchange `on` instead of its own
    /// (a server that answers on the standalone GET stream, or on another request's stream):
    /// the request's own exchange stops waiting for it and, when nothing else of its own is
    /// pending, ends, so that no resumption of its broken stream goes on for an answered request.
    pub(crate) fn answered_elsewhere(&self, id: &RequestId, on: u64) {
        let mut state = self.state();
        let Some(&key) = state.by_request.get(id) else {
            return;
        };
        if key == on {
            return;
        }
        state.by_request.remove(id);
        if !state.by_request.values().any(|k| *k == key)
            && let Some(task) = state.tasks.remove(&key)
        {
            task.abort.abort();
        }
    }

    /// Hands something up; false when nobody listens any more.
    pub(crate) async fn deliver(&self, inbound: Inbound) -> bool {
        self.tx.send(inbound).await.is_ok()
    }

    /// The legacy session ended (a 404 for `sent`, the session id a request carried): forgets
    /// it and stops every legacy exchange but the caller's. Returns false when another exchange
    /// already reported it.
    pub(crate) fn end_session(&self, sent: &HeaderValue, caller: u64) -> bool {
        let mut state = self.state();
        if state.session_id.as_ref() != Some(sent) {
            return false;
        }
        state.session_id = None;
        state.version = None;
        state.epoch += 1;
        state.standalone = StandaloneStream::NotExpected;
        let ended: Vec<u64> = state
            .tasks
            .iter()
            .filter(|(key, task)| task.legacy && **key != caller)
            .map(|(key, _)| *key)
            .collect();
        for key in ended {
            if let Some(task) = state.tasks.remove(&key) {
                task.abort.abort();
            }
            state.by_request.retain(|_, k| *k != key);
        }
        true
    }
}

impl TaskGuard {
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

/// A client's connection to one MCP endpoint over HTTP; see the [module docs](self).
///
/// Create it inside a tokio runtime. Dropping it stops every exchange (without the `DELETE`
/// that [`close`](Self::close) sends).
pub struct HttpTransport {
    shared: Arc<Shared>,
    inbound: mpsc::Receiver<Inbound>,
}

impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTransport")
            .field("url", &self.shared.url)
            .field("sizes", &self.table_sizes())
            .finish_non_exhaustive()
    }
}

/// The queue of what comes back.
const INBOUND_QUEUE: usize = 256;

impl HttpTransport {
    /// A transport to the endpoint `url` (`http://`, or `https://` with the feature `rustls`).
    /// Nothing is sent until the first [`send`](Self::send).
    pub fn new(url: &str, mut config: ClientConfig) -> Result<Self, UrlError> {
        config::mark_credentials(&mut config.headers);
        if config.auth.is_some() && config.headers.contains_key(http::header::AUTHORIZATION) {
            return Err(UrlError::TwoCredentials);
        }
        let url: Uri = url.parse().map_err(|e| UrlError::Invalid(format!("{e}")))?;
        let scheme = url.scheme_str().unwrap_or_default().to_ascii_lowercase();
        match scheme.as_str() {
            "http" => {}
            #[cfg(feature = "rustls")]
            "https" => {}
            _ => return Err(UrlError::Scheme(scheme)),
        }
        if url.authority().is_none() {
            return Err(UrlError::Invalid("the URL names no host".into()));
        }
        let http = build_client(&config);
        let (tx, inbound) = mpsc::channel(INBOUND_QUEUE);
        Ok(HttpTransport {
            shared: Arc::new(Shared {
                url,
                config,
                http,
                tx,
                state: Mutex::new(State::default()),
            }),
            inbound,
        })
    }

    /// Sends one message: a request, a notification, or a response to a request of the server's.
    pub fn send(&self, message: Message) -> Result<(), SendError> {
        self.send_with(message, SendOptions::default())
    }

    /// Sends one message with options.
    pub fn send_with(&self, message: Message, options: SendOptions) -> Result<(), SendError> {
        request::send(&self.shared, vec![message], false, options)
    }

    /// Tells the transport the protocol version the legacy session settled on, as the protocol
    /// session decided it (`None`: no session, or not settled yet). The transport does not read
    /// it from the `initialize` result itself: the client facade tells it once its session has
    /// handled that result, before `notifications/initialized` is sent, and tells it `None`
    /// before a new session's `initialize`. From then on every legacy request, resumption GET,
    /// standalone GET and the closing `DELETE` carry it in `MCP-Protocol-Version`; until told,
    /// they carry no such header. Forgotten with the session id when the server ends the
    /// session ([`Inbound::SessionEnded`]). Modern requests are not concerned: their version
    /// is in their own `_meta`.
    pub fn set_version(&self, version: Option<ProtocolVersion>) {
        self.shared.state().version = version;
    }

    /// Sends a batch (legacy 2025-03-26 sessions only) in one POST.
    pub fn send_batch(&self, messages: Vec<Message>) -> Result<(), SendError> {
        if messages.is_empty() {
            return Err(SendError::Invalid("an empty batch"));
        }
        request::send(&self.shared, messages, true, SendOptions::default())
    }

    /// Closes the response stream of request `id`: nothing more comes for it. Unknown ids are
    /// ignored. In the modern era this is how a request is cancelled (the server takes the
    /// closed stream as the cancellation). A legacy session cancels with a
    /// `notifications/cancelled` message, sent like any other; its request's stream is not
    /// closed by that message (the transport reads no method names): the layer above calls
    /// this too, since the answer is not wanted any more (the client facade does).
    pub fn cancel(&self, id: &RequestId) {
        let mut state = self.shared.state();
        if let Some(key) = state.by_request.remove(id)
            && let Some(task) = state.tasks.remove(&key)
        {
            task.abort.abort();
            state.by_request.retain(|_, k| *k != key);
        }
    }

    /// The next thing that came back; `None` once the transport is closed.
    pub async fn recv(&mut self) -> Option<Inbound> {
        self.inbound.recv().await
    }

    /// The legacy HTTP session id, when there is one.
    pub fn session_id(&self) -> Option<String> {
        let state = self.shared.state();
        state
            .session_id
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// Where the standalone GET stream of the legacy session stands: a client that needs what
    /// the server sends outside of requests (its requests, list changes) waits while it is
    /// [`Opening`](StandaloneStream::Opening); [`Inbound::StandaloneOpened`],
    /// [`Inbound::NoStandaloneStream`], [`Inbound::GaveUp`] or [`Inbound::Undelivered`] (for
    /// `notifications/initialized`) follow when it changes.
    pub fn standalone_stream(&self) -> StandaloneStream {
        self.shared.state().standalone
    }

    /// The size of every internal table (a test hook).
    #[doc(hidden)]
    pub fn table_sizes(&self) -> TableSizes {
        let state = self.shared.state();
        TableSizes {
            tasks: state.tasks.len(),
            requests: state.by_request.len(),
        }
    }

    /// Closes the transport: stops every exchange, and ends the legacy HTTP session with
    /// `DELETE` (a 405 is fine: the server does not let clients end sessions).
    pub async fn close(self) {
        let session = {
            let mut state = self.shared.state();
            state.closed = true;
            for (_, task) in state.tasks.drain() {
                task.abort.abort();
            }
            state.by_request.clear();
            if state.old_endpoint.is_some() {
                None
            } else {
                state
                    .session_id
                    .take()
                    .map(|id| (id, state.version_header()))
            }
        };
        if let Some((id, version)) = session {
            // A refresh of credentials is fine here; asking the user to sign in is not.
            let mut spec = exchange::Spec::new(&self.shared, Method::DELETE, &self.shared.url)
                .header(crate::headers::MCP_SESSION_ID, id)
                .limit(Some(self.shared.config.delete_timeout))
                .interactive(false);
            if let Some(version) = version {
                spec = spec.header(crate::headers::MCP_PROTOCOL_VERSION, version);
            }
            // The whole exchange, the authorizer's part included, within the delete timeout.
            let _ = tokio::time::timeout(
                self.shared.config.delete_timeout,
                exchange::send(&self.shared, &spec, None),
            )
            .await;
        }
    }
}

impl Drop for HttpTransport {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        state.closed = true;
        for (_, task) in state.tasks.drain() {
            task.abort.abort();
        }
        state.by_request.clear();
    }
}

fn build_client(config: &ClientConfig) -> HyperClient {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(config.connect_timeout));
    http.enforce_http(false);
    #[cfg(feature = "rustls")]
    let connector = {
        let tls = config.tls.clone().unwrap_or_else(|| {
            let roots =
                rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth(),
            )
        });
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http)
    };
    #[cfg(not(feature = "rustls"))]
    let connector = http;
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(config.pool_idle_timeout)
        .build(connector)
}
