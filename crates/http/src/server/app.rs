//! What the transport asks of the application (the server facade), and the handles it gives it.

use std::net::SocketAddr;
use std::sync::Arc;

use modelctx_types::{ErrorResponse, Incoming, Message, ProtocolVersion, RequestId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::legacy::Session;
use crate::event_store::BoxFuture;
use crate::headers::ParamHeader;

/// The application behind the endpoint: the server facade implements it.
///
/// Calls are made from the connection's task and must not block: hand the input to the task
/// that drives the protocol session and return.
pub trait McpApp: Send + Sync + 'static {
    /// A POST carried `initialize`: a legacy session opens. Returns the handler of its input
    /// (the first input is that `initialize` request, through [`LegacyHandler::input`]).
    fn open_session(&self, session: LegacySession) -> Arc<dyn LegacyHandler>;

    /// A POST, GET or DELETE named legacy session `id`, which this endpoint does not hold: the
    /// application may hold its state elsewhere (a store shared by several instances of the
    /// server) and adopt it here. `principal` is the request's ([`Principal`]).
    ///
    /// `Ok(Some(adopted))`: the session is bound to [`Adopted::principal`] (the request's
    /// principal must be that one, as for a session opened here: otherwise 404 and nothing
    /// else happens). The transport makes it with its handshake done and [`Adopted::version`]
    /// as its negotiated version, asks [`open_session`](Self::open_session) for its handler
    /// ([`LegacySession::is_adopted`] says it was adopted), puts it in its table, counted
    /// against [`ServerConfig::max_sessions`](super::ServerConfig::max_sessions) and the other
    /// caps like any other (when no room can be made: 503, and the handler is told
    /// [`Closed::Forgotten`]), and serves the request as if the session had been opened here.
    /// `Ok(None)`: no such session (404). `Err`: the state cannot be read now (503 with
    /// `Retry-After: 1`, before any response head; the cause is logged).
    ///
    /// Asked only for ids of the shape this transport gives out, and once at a time per id
    /// (concurrent requests for the same id wait for the first one's answer). Default: `Ok(None)`
    /// (one process: a session it does not hold does not exist).
    fn adopt_session<'a>(
        &'a self,
        id: &'a str,
        principal: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<Option<Adopted>, Unavailable>> {
        let _ = (id, principal);
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Whether this application shares its legacy sessions with other instances of the server
    /// (a session store and message bus that several processes use). Then this endpoint's idle
    /// sweep, eviction to make room and shutdown only forget a session, any session
    /// ([`Closed::Forgotten`]), not only an adopted one: being idle here says nothing of the
    /// other instances, and the shared state's expiry is the store's own (its TTL, refreshed by
    /// use). DELETE, [`LegacySession::close`] and the handshake timeout still end it
    /// ([`Closed::Ended`]). And a message for a standalone stream this endpoint holds is stored
    /// on it even while no connection reads it (rather than queued for the next GET here), so
    /// that a client resuming the stream on another instance gets it. Asked once, when the
    /// [`McpService`](super::McpService) is made.
    /// Default: `false` (one process: a session idle here is idle).
    fn shares_sessions(&self) -> bool {
        false
    }

    /// The counters the endpoint counts its legacy sessions and open SSE streams into, to read
    /// them from the application (a server's load and its gauges). Asked once, when the
    /// [`McpService`](super::McpService) is made; several endpoints given the same counters
    /// count together. Default: `None` (the endpoint counts into counters of its own,
    /// [`McpService::counters`](super::McpService::counters)).
    fn counters(&self) -> Option<super::Counters> {
        None
    }

    /// A modern (2026-07-28) request or notification whose headers agree with its body
    /// (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`). Its `_meta` and version
    /// are not checked: that is the protocol session's to do (answer a refused request with
    /// [`ModernReply::refuse`]). Answer through [`ModernRequest::reply`].
    fn modern(&self, request: ModernRequest);

    /// The `x-mcp-header` parameters of a tool's input schema, for the `Mcp-Param-*` checks of
    /// modern `tools/call` requests. `None` for an unknown tool (the call then goes through, and
    /// the application answers it). Asked on every modern `tools/call`: hand out a value kept
    /// since the tool was registered (an `Arc` clone), not one built per call. Default: `None`.
    fn tool_param_headers(&self, tool: &str) -> Option<Arc<[ParamHeader]>> {
        let _ = tool;
        None
    }

    /// The scopes a request needs beyond authentication: `method` is the JSON-RPC method,
    /// `params` its params as they came (unparsed), so the application reads what the request
    /// names (a tool, a prompt, a resource URI) exactly as it reads it when it answers: the
    /// transport does not guess which member matters. Asked only when a
    /// [`Guard`](super::Guard) is set, for every JSON-RPC request before it reaches the
    /// application; the guard refuses a caller without them (403). Hand out a value kept since
    /// registration. Default: `None` (none).
    fn required_scopes(
        &self,
        method: &str,
        params: Option<&serde_json::value::RawValue>,
    ) -> Option<Arc<[String]>> {
        let _ = (method, params);
        None
    }
}

/// The input of one legacy session.
pub trait LegacyHandler: Send + Sync + 'static {
    /// A message (or, on 2025-03-26 sessions, a batch) from the client. Requests are answered
    /// through [`LegacySession::send`] with the request's id as `related`.
    fn input(&self, input: Incoming, context: RequestContext);

    /// A POST that carries no request (notifications, the client's answers to the server's
    /// requests): the transport answers it 202 once the returned future is done. An
    /// application whose sessions are shared by several instances finishes here what the
    /// message changes (the stored state after `notifications/initialized`, an answer or a
    /// cancellation sent on to the instance it is for), so that the client's next request,
    /// which it may send as soon as it has the 202 and which may land on any instance, sees it.
    ///
    /// The default hands the message to [`input`](Self::input) and is done at once. The
    /// future is dropped when the POST's client goes away first: what it stands for must go on
    /// regardless (on a task of its own).
    fn accept(&self, input: Incoming, context: RequestContext) -> BoxFuture<'static, ()> {
        self.input(input, context);
        Box::pin(std::future::ready(()))
    }

    /// The HTTP client of the POST that carried request `id` went away before any answer: the
    /// transport has let go of the request (nothing more is written for it, and it no longer
    /// keeps the session alive). Stop its handler as a client's cancellation would; write
    /// nothing to the client (it is not there to read it). The transport makes up no message
    /// for this: the application's protocol session decides what it means.
    ///
    /// Required: a handler left running here would outlive the request nobody waits for. Not
    /// called for `initialize` (its session ends instead: see [`closed`](Self::closed)).
    fn abandoned(&self, id: RequestId);

    /// The transport let go of the session: drop what this handler holds for it (its requests
    /// under way stop). Nothing sent after this is delivered. `reason` says whether the session
    /// itself ended ([`Closed::Ended`]: drop its shared state too) or only this endpoint forgot
    /// an adopted session ([`Closed::Forgotten`]: its shared state stays for the others).
    fn closed(&self, reason: Closed);
}

/// Why the transport let go of a legacy session ([`LegacyHandler::closed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Closed {
    /// The session ended: DELETE, [`LegacySession::close`], its handshake timed out, its
    /// `initialize` failed or went unanswered, a deprecated HTTP+SSE stream failed; and, for a
    /// session opened by this endpoint (not adopted) of an application that does not share its
    /// sessions ([`McpApp::shares_sessions`]), the idle timeout, eviction to make room and
    /// shutdown. Its id is unknown from now on everywhere.
    Ended,
    /// This endpoint forgot an adopted session ([`McpApp::adopt_session`]), or any session of an
    /// application that shares them ([`McpApp::shares_sessions`]), without ending it: the idle
    /// sweep (idle here, which says nothing of the other instances), eviction to make room, or
    /// shutdown. Its events stay in the event store (its streams written here are marked
    /// finished, and its standalone stream is no longer recorded as held here), and the
    /// application keeps its shared state: a later request may adopt it again, here or
    /// elsewhere.
    Forgotten,
}

/// A legacy session the application holds the state of elsewhere, as it hands it to the
/// transport ([`McpApp::adopt_session`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Adopted {
    /// The protocol version the session's `initialize` settled on.
    pub version: ProtocolVersion,
    /// The principal the session is bound to, as recorded when it opened (`None`: opened with
    /// no principal).
    pub principal: Option<Principal>,
}

impl Adopted {
    /// A session at `version` bound to `principal`.
    pub fn new(version: ProtocolVersion, principal: Option<Principal>) -> Self {
        Adopted { version, principal }
    }
}

/// The application cannot say now whether it holds a session, or cannot serve its request (its
/// store is unreachable): the client gets 503 with `Retry-After: 1`. The cause is logged, not
/// sent.
#[derive(Debug, thiserror::Error)]
#[error("the session's state is unavailable: {source}")]
pub struct Unavailable {
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl Unavailable {
    /// Unavailable because of `cause`.
    pub fn new(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Unavailable {
            source: cause.into(),
        }
    }
}

/// The authenticated principal of a request, as an authentication layer in front of the service
/// puts it in the request's extensions. A legacy session is bound to the principal that opened
/// it: the same session id under another principal is unknown (404).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub String);

/// The peer's address, as [`serve`](super::serve) puts it in the request's extensions. An
/// application that serves the [`McpService`](super::McpService) itself inserts it (or, with
/// feature `axum`, uses axum's `into_make_service_with_connect_info::<SocketAddr>()`): with the
/// loopback allow-lists, a request whose peer is unknown or not on loopback gets 403.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The HTTP request a message came in, for handlers: headers, URI, extensions (an
/// authentication layer's principal), the peer's address.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub(crate) parts: Arc<http::request::Parts>,
}

impl RequestContext {
    /// The request's method, URI, headers and extensions.
    pub fn parts(&self) -> &http::request::Parts {
        &self.parts
    }

    /// The request's headers.
    pub fn headers(&self) -> &http::HeaderMap {
        &self.parts.headers
    }

    /// The peer's address, when the server knows it: the [`PeerAddr`] extension, or (feature
    /// `axum`) axum's `ConnectInfo<SocketAddr>`.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        super::service::peer_of(&self.parts)
    }

    /// The authenticated principal, when an authentication layer supplied one.
    pub fn principal(&self) -> Option<&Principal> {
        self.parts.extensions.get::<Principal>()
    }

    /// What the [`Guard`](super::Guard) found out about the caller, when one is set: subject,
    /// client, scopes, claims. The request's credentials themselves are not kept.
    pub fn grant(&self) -> Option<&super::Grant> {
        self.parts
            .extensions
            .get::<Arc<super::Grant>>()
            .map(|grant| &**grant)
    }

    /// The [`Guard`](super::Guard) that admitted the request ([`ServerConfig::guard`](
    /// super::ServerConfig::guard)), for the application's own scope checks: the one that gave
    /// [`grant`](Self::grant), so its scope hierarchy applies. `None` without a guard (a grant
    /// a layer in front put in the extensions comes with none).
    pub fn guard(&self) -> Option<&dyn super::Guard> {
        self.parts
            .extensions
            .get::<Arc<dyn super::Guard>>()
            .map(|guard| &**guard)
    }
}

/// A legacy session, as the application sees it: where its output goes.
#[derive(Clone)]
pub struct LegacySession {
    pub(crate) inner: Arc<Session>,
}

impl std::fmt::Debug for LegacySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacySession")
            .field("id", &super::legacy::redact(&self.inner.id))
            .finish_non_exhaustive()
    }
}

impl LegacySession {
    /// The session id (`Mcp-Session-Id`).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The principal the session is bound to, if any.
    pub fn principal(&self) -> Option<&Principal> {
        self.inner.principal.as_ref()
    }

    /// Whether the session was adopted ([`McpApp::adopt_session`]) rather than opened by an
    /// `initialize` this endpoint received.
    pub fn is_adopted(&self) -> bool {
        self.inner.adopted
    }

    /// Sends a message. `related` names the client's request it belongs to (its response, its
    /// progress and log messages, requests made while handling it): it goes on that request's
    /// stream, else on the standalone stream. A stream whose connection dropped keeps its
    /// messages in the event store for resumption.
    pub async fn send(&self, message: Message, related: Option<RequestId>) {
        self.inner.send(message, related).await;
    }

    /// Tells the transport the protocol version the session's `initialize` settled on, as the
    /// protocol session decided it. Call it once the handshake is done and before the
    /// `initialize` response is sent (the server facade does it when its session has answered
    /// `initialize`). The transport makes its wire decisions by it: batches only at 2025-03-26,
    /// priming events and streams closed for resumption from 2025-11-25 on. Until told, it
    /// follows the rules of 2025-11-25 and refuses batches.
    pub async fn set_version(&self, version: ProtocolVersion) {
        self.inner.set_version(version).await;
    }

    /// The application will not answer request `request`: the client cancelled it (call it
    /// when the protocol session reads the client's `notifications/cancelled`). Its stream
    /// stops waiting for it: a POST waiting for nothing else ends (with the answers gathered
    /// for its batch, if any), an SSE stream with nothing else pending closes. The transport
    /// reads no cancellation itself: until told, the POST waits for the answer. Does nothing for
    /// a request not in flight.
    pub async fn release(&self, request: &RequestId) {
        self.inner.release(request).await;
    }

    /// Sends a batch reply (2025-03-26 sessions) on the stream of the batch it answers.
    pub async fn send_batch(&self, messages: Vec<Message>) {
        self.inner.send_batch(messages).await;
    }

    /// Closes the SSE connection of the stream of request `request` without ending the stream
    /// (2025-11-25 sessions, whose clients reconnect after the priming event's `retry` delay and
    /// resume with `Last-Event-ID`). A request not answered at all yet gets an SSE response of
    /// its priming event alone. Returns whether a connection was closed.
    pub async fn close_stream(&self, request: &RequestId) -> bool {
        self.inner.close_stream(request).await
    }

    /// Answers the POSTs that carried `requests` with 503 and `Retry-After: 1` (a JSON-RPC
    /// error naming the request when the POST carried one request alone): the application
    /// cannot serve them now (its shared state is unreachable). Only a POST whose response has
    /// not started is answered so (all the requests of its batch leave with it); a request not
    /// in flight, or whose SSE stream has started, is left alone: answer it with an error
    /// response through [`send`](Self::send). Returns whether every one of `requests` was
    /// answered with 503. A session whose `initialize` is answered so ends (its client never
    /// learnt its id).
    pub async fn unavailable(&self, requests: &[RequestId]) -> bool {
        self.inner.unavailable(requests).await
    }

    /// Whether this endpoint holds the session's standalone (GET) stream: a GET here opened
    /// it (or resumed it from another instance, taking it over), and no later GET and no end
    /// of the session replaced it (its connection may have dropped: the stream lasts until
    /// then, and a resumption anywhere takes it over). The event store's record
    /// ([`EventStore::standalone`](crate::event_store::EventStore::standalone)) names it for
    /// the other instances, and is the truth across them: an endpoint whose stream was taken
    /// over elsewhere still answers `true` here until it next writes to the stream, when it
    /// reads the record and lets go. An instance with a message for every session (a list
    /// change) writes it where the record says the stream is held, so that it is written once.
    pub async fn holds_standalone(&self) -> bool {
        self.inner.holds_standalone().await
    }

    /// Ends the session: its streams close and its id is unknown from now on (404).
    pub async fn close(&self) {
        self.inner.end().await;
    }
}

/// A modern request (or notification) for the application.
#[derive(Debug)]
#[non_exhaustive]
pub struct ModernRequest {
    /// The message.
    pub message: Message,
    /// The HTTP request it came in.
    pub context: RequestContext,
    /// Where its answer goes. For a notification, only a refusal
    /// ([`ModernReply::refuse`], an error without id): the POST gets 202 once the reply is
    /// dropped without one.
    pub reply: ModernReply,
}

/// The stream of one modern request: messages related to it (progress, log messages, listen
/// notifications) and then its response, which ends it.
#[derive(Debug, Clone)]
pub struct ModernReply {
    pub(crate) tx: Option<mpsc::Sender<Sent>>,
    pub(crate) cancelled: CancellationToken,
}

/// A message for a modern request's stream, and whether it refuses the request.
#[derive(Debug)]
pub(crate) struct Sent {
    pub(crate) message: Message,
    pub(crate) refusal: bool,
}

/// The client closed the stream (which cancels the request), or the response was already sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the response stream is closed")]
pub struct StreamClosed;

impl ModernReply {
    /// Sends a message on the request's stream; the response (a result or error with the
    /// request's id) ends it. Waits while the client is slow to read.
    ///
    /// An error response sent here gets HTTP status 200, except for the codes that are HTTP
    /// errors whoever answers them: -32020, -32021 and -32022 (400), -32601 (404).
    pub async fn send(&self, message: Message) -> Result<(), StreamClosed> {
        self.put(message, false).await
    }

    /// Answers the request with the error response the protocol rules refused it with before
    /// it ran (params or `_meta` malformed, -32602; a version not served, -32022; a method that
    /// does not exist, -32601): the HTTP response is that JSON body with an error status, 404
    /// for -32601 and 400 for every other code. Send it first and alone.
    pub async fn refuse(&self, error: ErrorResponse) -> Result<(), StreamClosed> {
        self.put(error.into(), true).await
    }

    async fn put(&self, message: Message, refusal: bool) -> Result<(), StreamClosed> {
        match &self.tx {
            Some(tx) => tx
                .send(Sent { message, refusal })
                .await
                .map_err(|_| StreamClosed),
            None => Err(StreamClosed),
        }
    }

    /// Fires when the client closes the stream before the response: on Streamable HTTP that
    /// cancels the request.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.cancelled
    }
}
