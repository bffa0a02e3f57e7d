//! The `tower::Service`: every request checked, classified and dispatched.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Body;
use modelctx_types::{DecodeError, Era, ErrorCode, Incoming, Message, RequestId};
use tokio::time::Instant;

use super::app::{LegacySession, McpApp, PeerAddr, Principal, RequestContext};
use super::config::{ConfigError, ServerConfig};
use super::counters::Counters;
use super::endpoint::{Missing, Shared, TableSizes};
use super::guard::{self, Metadata};
use super::legacy::{Decision, NotResumed, Refused, Session};
use super::modern;
use super::respond::{self, REFUSED, ResponseBody, sse_headers};
use crate::event_store::{BoxFuture, EventId};
use crate::headers::{LAST_EVENT_ID, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::security::{self, AllowList};
use crate::sse::StreamBody;

/// The deprecated HTTP+SSE transport's paths, when a request's path is one of them.
#[cfg(feature = "legacy-sse")]
type OldSse<'a> = Option<&'a super::OldSsePaths>;
/// Without feature `legacy-sse`, never any.
#[cfg(not(feature = "legacy-sse"))]
type OldSse<'a> = Option<&'a ()>;

/// The MCP endpoint as a `tower::Service` (cheap to clone: clones share everything).
#[derive(Clone)]
pub struct McpService {
    pub(super) shared: Arc<Shared>,
    app: Arc<dyn McpApp>,
    last_sweep: Arc<Mutex<Instant>>,
    in_flight: Arc<AtomicUsize>,
}

/// One request counted in [`McpService`]'s in-flight total, until dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// Counts one more request, unless `max` are already in flight.
    fn enter(count: &Arc<AtomicUsize>, max: usize) -> Option<InFlight> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| InFlight(count.clone()))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for McpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpService")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl McpService {
    /// The service for `app`. Fails when the configuration serves no version.
    pub fn new(config: ServerConfig, app: Arc<dyn McpApp>) -> Result<Self, ConfigError> {
        config.check(None)?;
        Ok(McpService {
            shared: Arc::new(Shared::new(
                config,
                app.shares_sessions(),
                app.counters().unwrap_or_default(),
            )),
            app,
            last_sweep: Arc::new(Mutex::new(Instant::now())),
            in_flight: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.shared.config
    }

    /// What the endpoint holds now: its legacy sessions and open SSE streams (the application's
    /// counters, [`McpApp::counters`], when it gave some: then shared with its other
    /// endpoints).
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// The sizes of the session table and the event store.
    pub async fn table_sizes(&self) -> TableSizes {
        TableSizes {
            in_flight: self.in_flight.load(Ordering::Acquire),
            ..self.shared.sizes().await
        }
    }

    /// Ends the legacy sessions idle for longer than the configured timeout (the server does it
    /// on its own every minute while requests come; [`serve`](super::serve) also on a timer).
    /// An adopted session ([`McpApp::adopt_session`]), or any session when the application
    /// shares them ([`McpApp::shares_sessions`]), idle here is only forgotten
    /// ([`Closed::Forgotten`](super::Closed::Forgotten)): it may be busy elsewhere.
    pub async fn end_idle_sessions(&self) {
        *self.last_sweep.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.shared.sweep().await;
    }

    /// Ends every session and stream (graceful shutdown); new requests still get answers. Adopted
    /// sessions, and every session when the application shares them
    /// ([`McpApp::shares_sessions`]), are only forgotten
    /// ([`Closed::Forgotten`](super::Closed::Forgotten)): other instances go on serving them.
    pub async fn close_all(&self) {
        self.shared.shutdown.cancel();
        self.shared.end_all().await;
    }

    async fn maybe_sweep(&self) {
        let due = {
            let mut last = self.last_sweep.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() >= Duration::from_secs(60) {
                *last = Instant::now();
                true
            } else {
                false
            }
        };
        if due {
            self.shared.sweep().await;
        }
    }

    /// Answers one HTTP request.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let (mut parts, body) = request.into_parts();
        let config = &self.shared.config;
        // The guard's metadata is public: served before the endpoint's path check (at its own
        // paths), to any origin, with no credentials.
        if let Some(guard) = &config.guard
            && let Some(metadata) = guard.metadata()
            && metadata.paths.iter().any(|path| path == parts.uri.path())
        {
            return self.metadata(&parts, metadata);
        }
        #[cfg(feature = "legacy-sse")]
        let old_sse = config.old_sse.as_ref().filter(|paths| {
            let path = parts.uri.path();
            path == paths.sse || path == paths.messages
        });
        #[cfg(not(feature = "legacy-sse"))]
        let old_sse: OldSse<'_> = None;
        if old_sse.is_none()
            && let Some(path) = &config.path
            && parts.uri.path() != path
        {
            return respond::empty(StatusCode::NOT_FOUND);
        }
        if let Err(forbidden) =
            security::check(&parts, &config.allowed_hosts, &config.allowed_origins)
                .and_then(|()| security::check_peer(peer_of(&parts), &config.allowed_hosts))
        {
            return forbidden_response(&forbidden);
        }
        let Some(_in_flight) = InFlight::enter(&self.in_flight, config.max_requests_in_flight)
        else {
            return respond::unavailable(
                None,
                format!(
                    "too many requests in flight (at most {}); try again later",
                    config.max_requests_in_flight
                ),
                "1",
            );
        };
        let Some(guard) = &config.guard else {
            self.maybe_sweep().await;
            return self.route(parts, body, old_sse).await;
        };
        // Authenticated from the head alone, while counted in flight (a guard may wait for its
        // keys): refused, nothing else happens. The guard sees the URI the client sent (a DPoP
        // proof names it), not the one a router stripped (axum's `nest_service`).
        #[cfg(feature = "axum")]
        let routed = original_uri(&mut parts);
        let authenticated = guard.authenticate(&parts).await;
        #[cfg(feature = "axum")]
        if let Some(routed) = routed {
            parts.uri = routed;
        }
        let grant = match authenticated {
            Ok(grant) => Arc::new(grant),
            Err(challenge) => return guard::refusal(challenge),
        };
        guard::admit(&mut parts, &grant, guard);
        self.maybe_sweep().await;
        let mut response = self.route(parts, body, old_sse).await;
        guard.on_success(&grant, response.headers_mut());
        response
    }

    /// Answers at a protected resource metadata path: the `Host` is checked as at the endpoint
    /// (the `Origin` is not: the document is for any origin to read).
    fn metadata(
        &self,
        parts: &http::request::Parts,
        metadata: &Metadata,
    ) -> Response<ResponseBody> {
        let hosts = &self.shared.config.allowed_hosts;
        if let Err(forbidden) = security::check(parts, hosts, &AllowList::Any)
            .and_then(|()| security::check_peer(peer_of(parts), hosts))
        {
            return forbidden_response(&forbidden);
        }
        guard::metadata_response(&parts.method, metadata)
    }

    /// Dispatches a request that passed the checks (and the guard, when one is set: its grant
    /// is in the request's extensions) by path and method. `old_sse`: the deprecated HTTP+SSE
    /// transport's paths, when the request's path is one of them (as `handle` matched it).
    async fn route<B>(
        &self,
        parts: http::request::Parts,
        body: B,
        old_sse: OldSse<'_>,
    ) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let config = &self.shared.config;
        #[cfg(not(feature = "legacy-sse"))]
        let _ = old_sse;
        #[cfg(feature = "legacy-sse")]
        if let Some(paths) = old_sse {
            let path = parts.uri.path();
            return match parts.method {
                Method::GET if path == paths.sse => {
                    super::old_sse::open(&self.shared, &self.app, &parts, paths).await
                }
                Method::POST if path == paths.messages => {
                    match self.read_body(&parts, body).await {
                        Ok(bytes) => {
                            super::old_sse::post(&self.shared, &self.app, Arc::new(parts), bytes)
                                .await
                        }
                        Err(refused) => *refused,
                    }
                }
                _ if path == paths.sse => respond::not_allowed("GET"),
                _ => respond::not_allowed("POST"),
            };
        }
        match parts.method {
            Method::POST => self.post(parts, body).await,
            Method::GET if config.serves_legacy() => self.get(parts).await,
            Method::DELETE if config.serves_legacy() => self.delete(parts).await,
            _ if config.serves_legacy() => respond::not_allowed("GET, POST, DELETE"),
            _ => respond::not_allowed("POST"),
        }
    }

    async fn post<B>(&self, parts: http::request::Parts, body: B) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let config = &self.shared.config;
        if is_json(&parts.headers)
            && !accepts(&parts.headers, &["application/json", "text/event-stream"])
        {
            return respond::error_code(
                StatusCode::NOT_ACCEPTABLE,
                None,
                ErrorCode::INVALID_REQUEST,
                "Accept must list application/json and text/event-stream",
            );
        }
        let bytes = match self.read_body(&parts, body).await {
            Ok(bytes) => bytes,
            Err(refused) => return *refused,
        };
        let incoming = match modelctx_types::decode(&bytes) {
            Ok(incoming) => incoming,
            Err(error) => return decode_error(&error),
        };
        // Scopes before anything of the message is processed (no part of a batch either).
        if let Some(refused) = guard::check_scopes(config, &parts, self.app.as_ref(), &incoming) {
            return refused;
        }
        let parts = Arc::new(parts);
        let header_version = header_str(&parts.headers, MCP_PROTOCOL_VERSION);
        let modern = match &incoming {
            Incoming::Single(message) => {
                header_version.is_some_and(|v| config.serves(v, Era::Modern))
                    || modern::meta_version(message).is_some()
            }
            _ => false,
        };
        match incoming {
            Incoming::Single(message) if modern && config.serves_modern() => {
                modern::handle(&self.shared, &self.app, parts, message).await
            }
            // Which message opens a session is the protocol's rule: the session's to say.
            Incoming::Single(message) if modelctx_types::opens_session(&message) => {
                self.initialize(parts, message).await
            }
            incoming => self.legacy_post(parts, incoming).await,
        }
    }

    /// The body of a POST: JSON (415 otherwise), within the size limit (413 otherwise).
    async fn read_body<B>(
        &self,
        parts: &http::request::Parts,
        body: B,
    ) -> Result<Bytes, Box<Response<ResponseBody>>>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let config = &self.shared.config;
        if !is_json(&parts.headers) {
            return Err(Box::new(respond::error_code(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                None,
                ErrorCode::INVALID_REQUEST,
                "Content-Type must be application/json",
            )));
        }
        let too_large = || {
            Box::new(respond::error_code(
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                ErrorCode::INVALID_REQUEST,
                format!("request body exceeds {} bytes", config.max_body),
            ))
        };
        if parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|len| len > config.max_body as u64)
        {
            return Err(too_large());
        }
        let read = Limited::new(body, config.max_body).collect();
        let Ok(read) = tokio::time::timeout(config.body_timeout, read).await else {
            return Err(Box::new(respond::error_code(
                StatusCode::REQUEST_TIMEOUT,
                None,
                ErrorCode::INVALID_REQUEST,
                format!(
                    "the request body did not arrive within {} ms",
                    config.body_timeout.as_millis()
                ),
            )));
        };
        match read {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
            Err(_) => Err(Box::new(respond::error_code(
                StatusCode::BAD_REQUEST,
                None,
                ErrorCode::PARSE_ERROR,
                "the request body could not be read",
            ))),
        }
    }

    async fn initialize(
        &self,
        parts: Arc<http::request::Parts>,
        message: Message,
    ) -> Response<ResponseBody> {
        let config = &self.shared.config;
        let Message::Request(request) = &message else {
            return respond::empty(StatusCode::BAD_REQUEST);
        };
        let id = request.id.clone();
        if !config.serves_legacy() {
            // No legacy session opens here: the application's session for a request on its own
            // refuses it (-32022, naming the versions served). It is no modern request, so no
            // header rules apply.
            return modern::dispatch(&self.shared, &self.app, parts, message).await;
        }
        if let Some(refused) = self.check_legacy_version(&parts, Some(&id)) {
            return refused;
        }
        let principal = parts.extensions.get::<Principal>().cloned();
        let peer = peer_of(&parts).map(|p| p.ip());
        let Some(session) = self.shared.open(principal, peer).await else {
            return too_many_sessions(Some(id));
        };
        let handler = self.app.open_session(LegacySession {
            inner: session.clone(),
        });
        let _ = session.handler.set(handler.clone());
        let decision = match session
            .register(std::slice::from_ref(&id), true, false)
            .await
        {
            Ok(rx) => rx,
            Err(_) => return respond::empty(StatusCode::SERVICE_UNAVAILABLE),
        };
        handler.input(Incoming::Single(message), RequestContext { parts });
        let mut response = self.answer(&session, decision).await;
        let opened = response.status() == StatusCode::OK && !session.is_ended().await;
        if opened && let Ok(value) = HeaderValue::from_str(&session.id) {
            response.headers_mut().insert(MCP_SESSION_ID, value);
        }
        response
    }

    /// The answer to a registered POST: JSON or SSE, as the application's output decides.
    async fn answer(
        &self,
        session: &Arc<Session>,
        decision: tokio::sync::oneshot::Receiver<Decision>,
    ) -> Response<ResponseBody> {
        // Finding 3: should the client go away before the answer (this future dropped), its
        // requests are let go at once rather than pin the session.
        let mut abandoned = Abandoned(Some(session.clone()));
        let decision = decision.await;
        abandoned.0 = None;
        match decision {
            Ok(Decision::Json(body)) => respond::json(StatusCode::OK, body),
            Ok(Decision::Sse { first, rx }) => self.sse(session, first, rx),
            Ok(Decision::Unavailable(id)) => respond::unavailable(
                id,
                "the server cannot serve this request now; try again later",
                "1",
            ),
            Err(_) => {
                respond::error_code(StatusCode::NOT_FOUND, None, REFUSED, "the session ended")
            }
        }
    }

    fn sse(
        &self,
        session: &Arc<Session>,
        first: Bytes,
        rx: tokio::sync::mpsc::Receiver<Bytes>,
    ) -> Response<ResponseBody> {
        let body = StreamBody::new(
            (!first.is_empty()).then_some(first),
            rx,
            self.shared.config.keep_alive,
            session.ended.clone(),
            None,
        )
        .counted(self.shared.counters.stream());
        let mut response = Response::new(body.boxed_unsync());
        sse_headers(&mut response);
        response
    }

    /// 400 when `MCP-Protocol-Version` names a version the server does not serve (absent:
    /// 2025-03-26 is assumed).
    fn check_legacy_version(
        &self,
        parts: &http::request::Parts,
        id: Option<&RequestId>,
    ) -> Option<Response<ResponseBody>> {
        let version = header_str(&parts.headers, MCP_PROTOCOL_VERSION)?;
        let config = &self.shared.config;
        if config.serves(version, Era::Legacy) {
            return None;
        }
        Some(respond::error_code(
            StatusCode::BAD_REQUEST,
            id.cloned(),
            ErrorCode::INVALID_REQUEST,
            format!(
                "unsupported MCP-Protocol-Version; supported: {}",
                config.served(Era::Legacy).join(", ")
            ),
        ))
    }

    /// The session a request names (adopted from the application when this endpoint does not
    /// hold it), or the response refusing it.
    async fn session_of(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Arc<Session>, Box<Response<ResponseBody>>> {
        let Some(id) = header_str(&parts.headers, MCP_SESSION_ID) else {
            return Err(Box::new(respond::error_code(
                StatusCode::BAD_REQUEST,
                None,
                REFUSED,
                "Bad Request: Mcp-Session-Id header is required (send initialize first)",
            )));
        };
        let principal = parts.extensions.get::<Principal>();
        let peer = peer_of(parts).map(|p| p.ip());
        let found = self
            .shared
            .find_or_adopt(&self.app, id, principal, peer)
            .await
            // A session of the deprecated HTTP+SSE transport is not one of these paths'
            // sessions (finding 19): its answers go on its own stream, so a POST here would
            // never complete.
            .and_then(|session| {
                if session.is_old_transport() {
                    Err(Missing::NotFound)
                } else {
                    Ok(session)
                }
            });
        found.map_err(|missing| {
            Box::new(match missing {
                Missing::NotFound => {
                    respond::error_code(StatusCode::NOT_FOUND, None, REFUSED, "Session not found")
                }
                Missing::Unavailable => respond::unavailable(
                    None,
                    "the session cannot be reached now; try again later",
                    "1",
                ),
                Missing::Full => too_many_sessions(None),
            })
        })
    }

    async fn legacy_post(
        &self,
        parts: Arc<http::request::Parts>,
        incoming: Incoming,
    ) -> Response<ResponseBody> {
        if !self.shared.config.serves_legacy() {
            // Neither modern (no version in header or `_meta`) nor `initialize`: on a server
            // that serves only 2026-07-28, the version header is simply missing.
            let id = match &incoming {
                Incoming::Single(Message::Request(r)) => Some(r.id.clone()),
                _ => None,
            };
            return respond::error_code(
                StatusCode::BAD_REQUEST,
                id,
                ErrorCode::HEADER_MISMATCH,
                format!(
                    "missing MCP-Protocol-Version header and params._meta version; this server serves {}",
                    self.shared.config.served(Era::Modern).join(", ")
                ),
            );
        }
        let session = match self.session_of(&parts).await {
            Ok(session) => session,
            Err(refused) => return *refused,
        };
        if let Some(refused) = self.check_legacy_version(&parts, None) {
            return refused;
        }
        // The requests the POST waits for; whether it is a batch; whether it waits anyway (a
        // batch with invalid members gets their errors as its reply).
        let (requests, batch, awaits_reply) = match &incoming {
            Incoming::Single(Message::Request(r)) => (vec![r.id.clone()], false, true),
            Incoming::Single(_) => (Vec::new(), false, false),
            Incoming::Batch(elements) => {
                // The batch rules are the session's (with the version it negotiated); asked
                // here because a batch of notifications is answered (202) before the session
                // reads it.
                if let Err(refused) = modelctx_types::check_batch(session.version().await, elements)
                {
                    return respond::error(
                        StatusCode::BAD_REQUEST,
                        None,
                        refused.to_error_object(),
                    );
                }
                let ids: Vec<RequestId> = elements
                    .iter()
                    .filter_map(|element| match element {
                        Ok(Message::Request(r)) => Some(r.id.clone()),
                        _ => None,
                    })
                    .collect();
                let awaits_reply = !ids.is_empty() || elements.iter().any(Result::is_err);
                (ids, true, awaits_reply)
            }
            _ => (Vec::new(), false, false),
        };
        let Some(handler) = session.handler.get() else {
            return respond::empty(StatusCode::NOT_FOUND);
        };
        let context = RequestContext { parts };
        if !awaits_reply {
            // 202 once the application took in what the message changes (shared state
            // saved): the client's next request may land on another instance.
            handler.accept(incoming, context).await;
            return respond::empty(StatusCode::ACCEPTED);
        }
        let decision = match session.register(&requests, false, batch).await {
            Ok(rx) => rx,
            Err(Refused::Ended) => {
                return respond::error_code(
                    StatusCode::NOT_FOUND,
                    None,
                    REFUSED,
                    "Session not found",
                );
            }
            Err(Refused::DuplicateId(id)) => {
                return respond::error_code(
                    StatusCode::OK,
                    Some(id),
                    ErrorCode::INVALID_REQUEST,
                    "a request with this id is already in flight on this session",
                );
            }
        };
        handler.input(incoming, context);
        self.answer(&session, decision).await
    }

    async fn get(&self, parts: http::request::Parts) -> Response<ResponseBody> {
        if !accepts(&parts.headers, &["text/event-stream"]) {
            return respond::error_code(
                StatusCode::NOT_ACCEPTABLE,
                None,
                ErrorCode::INVALID_REQUEST,
                "Accept must list text/event-stream",
            );
        }
        let session = match self.session_of(&parts).await {
            Ok(session) => session,
            Err(refused) => return *refused,
        };
        if let Some(refused) = self.check_legacy_version(&parts, None) {
            return refused;
        }
        if let Some(last) = header_str(&parts.headers, LAST_EVENT_ID) {
            let Ok(last) = last.parse::<EventId>() else {
                return respond::error_code(
                    StatusCode::BAD_REQUEST,
                    None,
                    ErrorCode::INVALID_REQUEST,
                    "Last-Event-ID is not an event id of this server",
                );
            };
            return match session.resume(&last).await {
                Ok((first, rx)) => self.sse(&session, first, rx),
                Err(NotResumed::Refused(why)) => respond::error_code(
                    StatusCode::BAD_REQUEST,
                    None,
                    ErrorCode::INVALID_REQUEST,
                    why,
                ),
                Err(NotResumed::Unavailable(why)) => respond::unavailable(None, why, "1"),
                Err(NotResumed::Failed(why)) => respond::error_code(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    None,
                    ErrorCode::INTERNAL_ERROR,
                    why,
                ),
            };
        }
        match session.open_standalone().await {
            Some((first, rx)) => self.sse(&session, first, rx),
            None => respond::error_code(
                StatusCode::CONFLICT,
                None,
                ErrorCode::INVALID_REQUEST,
                "a standalone stream is already open on this session",
            ),
        }
    }

    async fn delete(&self, parts: http::request::Parts) -> Response<ResponseBody> {
        if !self.shared.config.allow_delete {
            return respond::not_allowed("GET, POST");
        }
        let session = match self.session_of(&parts).await {
            Ok(session) => session,
            Err(refused) => return *refused,
        };
        if let Some(refused) = self.check_legacy_version(&parts, None) {
            return refused;
        }
        session.end().await;
        respond::empty(StatusCode::OK)
    }
}

impl<B> tower_service::Service<Request<B>> for McpService
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move { Ok(service.handle(request).await) })
    }
}

/// Puts back the URI the client sent, which axum's router recorded (`OriginalUri`) before a
/// `nest_service` stripped its prefix; returns the URI it replaced (`None`: nothing to restore).
#[cfg(feature = "axum")]
fn original_uri(parts: &mut http::request::Parts) -> Option<http::Uri> {
    let axum::extract::OriginalUri(original) = parts.extensions.get()?;
    (*original != parts.uri).then(|| std::mem::replace(&mut parts.uri, original.clone()))
}

/// The peer's address: the [`PeerAddr`] that [`serve`](super::serve) (or the application) put in
/// the request, or, with feature `axum`, axum's `ConnectInfo<SocketAddr>`.
pub(crate) fn peer_of(parts: &http::request::Parts) -> Option<SocketAddr> {
    if let Some(PeerAddr(peer)) = parts.extensions.get::<PeerAddr>() {
        return Some(*peer);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(peer)) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*peer);
    }
    None
}

/// Armed while a POST waits for its answer: dropped armed (the client went away), it has the
/// session let go of the POSTs nobody waits for.
struct Abandoned(Option<Arc<Session>>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let Some(session) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { session.reap_abandoned().await });
        }
    }
}

/// A header as text, when present and visible ASCII.
fn header_str<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

fn is_json(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// Whether `Accept` (absent: anything) lists every one of `types` (or a wildcard covering it).
/// Media ranges compare without regard to ASCII case; their parameters (`;q=..`) are ignored.
/// Allocation-free: it runs on every POST and GET.
fn accepts(headers: &http::HeaderMap, types: &[&str]) -> bool {
    let ranges = || {
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|r| r.split(';').next().unwrap_or(r).trim())
    };
    if !headers
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok())
    {
        return true;
    }
    types.iter().all(|wanted| {
        let main = wanted.split('/').next().unwrap_or_default();
        ranges().any(|r| {
            r.eq_ignore_ascii_case(wanted)
                || r == "*/*"
                || r.strip_suffix("/*")
                    .is_some_and(|m| m.eq_ignore_ascii_case(main))
        })
    })
}

/// 503 for a session the table has no room for (`Retry-After: 5`).
fn too_many_sessions(id: Option<RequestId>) -> Response<ResponseBody> {
    respond::unavailable(id, "too many sessions; try again later", "5")
}

/// 403 for a request the `Host`/`Origin` or peer checks refused.
fn forbidden_response(forbidden: &security::Forbidden) -> Response<ResponseBody> {
    respond::error_code(StatusCode::FORBIDDEN, None, REFUSED, forbidden.to_string())
}

fn decode_error(error: &DecodeError) -> Response<ResponseBody> {
    let reply = error.to_error_response();
    respond::error(StatusCode::BAD_REQUEST, reply.id, reply.error)
}

#[cfg(test)]
pub(super) mod tests {
    use std::pin::Pin;

    use super::*;
    use crate::security::AllowList;
    use crate::server::{Grant, Guard, LegacyHandler, ModernRequest};

    fn accept(values: &[&str]) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        for v in values {
            headers.append(header::ACCEPT, v.parse().unwrap());
        }
        headers
    }

    const BOTH: &[&str] = &["application/json", "text/event-stream"];

    #[test]
    fn accepts_without_an_accept_header_takes_anything() {
        assert!(accepts(&accept(&[]), BOTH));
        assert!(accepts(&accept(&[]), &["text/event-stream"]));
    }

    #[test]
    fn accepts_wants_every_type_listed() {
        assert!(accepts(
            &accept(&["application/json, text/event-stream"]),
            BOTH
        ));
        assert!(accepts(
            &accept(&["text/event-stream,application/json"]),
            BOTH
        ));
        assert!(!accepts(&accept(&["application/json"]), BOTH));
        assert!(!accepts(&accept(&["text/event-stream"]), BOTH));
        assert!(accepts(
            &accept(&["text/event-stream"]),
            &["text/event-stream"]
        ));
        assert!(!accepts(&accept(&["text/html"]), &["text/event-stream"]));
        assert!(!accepts(
            &accept(&["text/event-streams"]),
            &["text/event-stream"]
        ));
        assert!(!accepts(&accept(&["text/event"]), &["text/event-stream"]));
        assert!(!accepts(&accept(&[""]), &["text/event-stream"]));
    }

    #[test]
    fn accepts_ignores_case_parameters_and_spaces() {
        assert!(accepts(
            &accept(&["Application/JSON;q=0.9 ,  TEXT/Event-Stream ; q=1"]),
            BOTH
        ));
        assert!(accepts(
            &accept(&["text/event-stream;charset=utf-8"]),
            &["text/event-stream"]
        ));
        assert!(!accepts(
            &accept(&["text/plain;x=text/event-stream"]),
            &["text/event-stream"]
        ));
    }

    #[test]
    fn accepts_wildcards() {
        assert!(accepts(&accept(&["*/*"]), BOTH));
        assert!(accepts(&accept(&["application/*, text/*"]), BOTH));
        assert!(accepts(
            &accept(&["APPLICATION/*;q=0.5, text/event-stream"]),
            BOTH
        ));
        assert!(!accepts(&accept(&["application/*"]), BOTH));
        assert!(!accepts(&accept(&["image/*"]), &["text/event-stream"]));
        assert!(!accepts(&accept(&["*/json"]), &["application/json"]));
        assert!(!accepts(
            &accept(&["text/event-stream/*"]),
            &["text/event-stream"]
        ));
    }

    #[test]
    fn accepts_reads_every_accept_header() {
        assert!(accepts(
            &accept(&["application/json", "text/event-stream"]),
            BOTH
        ));
        assert!(accepts(
            &accept(&["text/event-stream", "application/json;q=0.1"]),
            BOTH
        ));
        assert!(!accepts(&accept(&["application/json", "text/html"]), BOTH));
        // A value that is not visible ASCII is skipped; the others still count.
        let mut headers = accept(&["application/json, text/event-stream"]);
        headers.append(
            header::ACCEPT,
            http::HeaderValue::from_bytes(b"text/\xffhtml").unwrap(),
        );
        assert!(accepts(&headers, BOTH));
        let mut only = http::HeaderMap::new();
        only.append(
            header::ACCEPT,
            http::HeaderValue::from_bytes(b"text/\xffhtml").unwrap(),
        );
        assert!(
            accepts(&only, BOTH),
            "no readable value is no Accept header"
        );
    }

    /// An application that is never reached: every request here (and in `serve`'s tests) is
    /// refused or answered by the transport before it.
    pub(in crate::server) struct Unreached;

    impl LegacyHandler for Unreached {
        fn input(&self, _input: Incoming, _context: RequestContext) {}
        fn abandoned(&self, _id: RequestId) {}
        fn closed(&self, _reason: crate::server::Closed) {}
    }

    impl McpApp for Unreached {
        fn open_session(&self, _session: LegacySession) -> Arc<dyn LegacyHandler> {
            Arc::new(Unreached)
        }
        fn modern(&self, _request: ModernRequest) {}
    }

    fn service(config: ServerConfig) -> McpService {
        McpService::new(config, Arc::new(Unreached)).unwrap()
    }

    /// A body that never arrives.
    struct Stalled;

    impl Body for Stalled {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
            Poll::Pending
        }
    }

    /// A legacy `tools/list` without a session (400 once past the checks), from `peer`.
    fn list(host: &str, peer: Option<&str>) -> Request<String> {
        let mut request = Request::post("/mcp")
            .header("host", host)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_owned())
            .unwrap();
        if let Some(peer) = peer {
            request
                .extensions_mut()
                .insert(PeerAddr(peer.parse().unwrap()));
        }
        request
    }

    fn stalled_post() -> Request<Stalled> {
        Request::post("/mcp")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .extension(PeerAddr("127.0.0.1:5000".parse().unwrap()))
            .body(Stalled)
            .unwrap()
    }

    async fn message(response: Response<ResponseBody>) -> String {
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(value["error"]["code"].is_i64(), "{value}");
        value["error"]["message"].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn finding_6_a_remote_peer_gets_403_under_the_loopback_lists() {
        let service = service(ServerConfig::default());
        let response = service
            .handle(list("localhost", Some("192.0.2.7:40000")))
            .await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert!(message(response).await.contains("not on loopback"));
    }

    #[tokio::test]
    async fn finding_6_an_unknown_peer_gets_403_that_says_how_to_fix_it() {
        let service = service(ServerConfig::default());
        let response = service.handle(list("localhost", None)).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let message = message(response).await;
        assert!(message.contains("PeerAddr"), "{message}");
        assert!(
            message.contains("into_make_service_with_connect_info"),
            "{message}"
        );
        assert!(message.contains("name the allowed hosts"), "{message}");
    }

    #[tokio::test]
    async fn finding_6_a_loopback_peer_is_served() {
        let service = service(ServerConfig::default());
        for peer in ["127.0.0.1:40000", "[::1]:40000", "[::ffff:127.0.0.1]:40000"] {
            let response = service.handle(list("localhost", Some(peer))).await;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{peer}");
        }
    }

    #[tokio::test]
    async fn finding_6_named_allow_lists_accept_remote_and_unknown_peers() {
        let config = ServerConfig {
            allowed_hosts: AllowList::Hosts(vec!["mcp.example.com".into()]),
            allowed_origins: AllowList::Hosts(vec!["app.example.com".into()]),
            ..ServerConfig::default()
        };
        let service = service(config);
        for peer in [Some("192.0.2.7:40000"), None] {
            let response = service.handle(list("mcp.example.com", peer)).await;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{peer:?}");
        }
    }

    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn finding_6_axum_connect_info_gives_the_peer() {
        let service = service(ServerConfig::default());
        for (peer, status) in [
            ("127.0.0.1:40000", StatusCode::BAD_REQUEST),
            ("192.0.2.7:40000", StatusCode::FORBIDDEN),
        ] {
            let mut request = list("localhost", None);
            let peer: SocketAddr = peer.parse().unwrap();
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            assert_eq!(service.handle(request).await.status(), status, "{peer}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn finding_1_a_body_that_does_not_arrive_in_time_gets_408() {
        let config = ServerConfig {
            body_timeout: Duration::from_secs(5),
            ..ServerConfig::default()
        };
        let service = service(config);
        let started = tokio::time::Instant::now();
        let response =
            tokio::time::timeout(Duration::from_secs(60), service.handle(stalled_post()))
                .await
                .expect("an answer, not a wait for the body");
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(
            message(response)
                .await
                .contains("did not arrive within 5000 ms")
        );
        assert_eq!(service.table_sizes().await.in_flight, 0);
    }

    /// A guard that knows one token, `Bearer good` (subject `alice`), and serves metadata at
    /// two paths; with `gate`, authentication waits until it is notified.
    #[derive(Debug, Default)]
    struct TokenGuard {
        metadata: Option<Metadata>,
        gate: Option<Arc<tokio::sync::Notify>>,
        asked: AtomicUsize,
    }

    const METADATA: &[u8] = br#"{"resource":"http://localhost/mcp"}"#;

    fn token_guard() -> TokenGuard {
        TokenGuard {
            metadata: Some(Metadata::new(
                vec![
                    "/.well-known/oauth-protected-resource/mcp".into(),
                    "/.well-known/oauth-protected-resource".into(),
                ],
                Bytes::from_static(METADATA),
            )),
            ..TokenGuard::default()
        }
    }

    impl Guard for TokenGuard {
        fn metadata(&self) -> Option<&Metadata> {
            self.metadata.as_ref()
        }

        fn authenticate<'a>(
            &'a self,
            request: &'a http::request::Parts,
        ) -> BoxFuture<'a, Result<Grant, crate::server::Challenge>> {
            Box::pin(async move {
                self.asked.fetch_add(1, Ordering::SeqCst);
                if let Some(gate) = &self.gate {
                    gate.notified().await;
                }
                if request.headers.get(header::AUTHORIZATION)
                    == Some(&HeaderValue::from_static("Bearer good"))
                {
                    return Ok(Grant::new("test", "alice"));
                }
                let mut challenge = crate::server::Challenge::new(StatusCode::UNAUTHORIZED);
                challenge.headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(r#"Bearer resource_metadata="m""#),
                );
                Err(challenge)
            })
        }

        fn authorize(
            &self,
            _grant: &Grant,
            _needed: &[String],
        ) -> Result<(), crate::server::Challenge> {
            Ok(())
        }
    }

    fn guarded(guard: TokenGuard, config: ServerConfig) -> (McpService, Arc<TokenGuard>) {
        let guard = Arc::new(guard);
        let config = ServerConfig {
            guard: Some(guard.clone()),
            ..config
        };
        (service(config), guard)
    }

    fn get(path: &str, host: &str) -> Request<String> {
        Request::get(path)
            .header("host", host)
            .extension(PeerAddr("127.0.0.1:5000".parse().unwrap()))
            .body(String::new())
            .unwrap()
    }

    #[tokio::test]
    async fn the_metadata_is_served_before_the_path_check_without_credentials() {
        let (service, guard) = guarded(token_guard(), ServerConfig::default());
        for path in [
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource",
        ] {
            let mut request = get(path, "localhost:8080");
            // Any origin may read it.
            request.headers_mut().insert(
                header::ORIGIN,
                HeaderValue::from_static("https://evil.example"),
            );
            let response = service.handle(request).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            assert_eq!(response.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], METADATA);
        }
        assert_eq!(guard.asked.load(Ordering::SeqCst), 0, "no authentication");
        // Other paths are still the endpoint's: 404.
        let other = service
            .handle(get(
                "/.well-known/oauth-protected-resource/other",
                "localhost",
            ))
            .await;
        assert_eq!(other.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn the_metadata_path_checks_the_host_and_the_peer() {
        let (service, _) = guarded(token_guard(), ServerConfig::default());
        let path = "/.well-known/oauth-protected-resource";
        let foreign = service.handle(get(path, "evil.example")).await;
        assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
        assert!(message(foreign).await.contains("Host not allowed"));
        let mut remote = get(path, "localhost");
        remote
            .extensions_mut()
            .insert(PeerAddr("192.0.2.7:4000".parse().unwrap()));
        assert_eq!(service.handle(remote).await.status(), StatusCode::FORBIDDEN);
    }

    #[tokio::test]
    async fn without_a_guard_or_its_metadata_the_well_known_paths_are_not_served() {
        let path = "/.well-known/oauth-protected-resource";
        let plain = service(ServerConfig::default());
        assert_eq!(
            plain.handle(get(path, "localhost")).await.status(),
            StatusCode::NOT_FOUND
        );
        let (no_metadata, _) = guarded(TokenGuard::default(), ServerConfig::default());
        assert_eq!(
            no_metadata.handle(get(path, "localhost")).await.status(),
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_request_is_answered_with_the_challenge_before_its_body_is_read() {
        let (service, guard) = guarded(token_guard(), ServerConfig::default());
        let response = tokio::time::timeout(Duration::from_secs(1), service.handle(stalled_post()))
            .await
            .expect("refused at once, not a wait for the body");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers()[header::WWW_AUTHENTICATE],
            r#"Bearer resource_metadata="m""#
        );
        assert!(response.headers().get(header::CONTENT_TYPE).is_none());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(body.is_empty());
        assert_eq!(guard.asked.load(Ordering::SeqCst), 1);
        assert_eq!(service.table_sizes().await.in_flight, 0);
    }

    #[tokio::test]
    async fn the_guard_is_asked_after_the_host_checks() {
        let (service, guard) = guarded(token_guard(), ServerConfig::default());
        let response = service
            .handle(list("evil.example", Some("127.0.0.1:1")))
            .await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let response = service.handle(list("localhost", Some("192.0.2.7:1"))).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert_eq!(guard.asked.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_guard_that_waits_counts_against_the_requests_in_flight() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let (service, guard) = guarded(
            TokenGuard {
                gate: Some(gate.clone()),
                ..token_guard()
            },
            ServerConfig {
                max_requests_in_flight: 1,
                ..ServerConfig::default()
            },
        );
        let mut first = list("localhost", Some("127.0.0.1:1"));
        first.headers_mut().insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer good"),
        );
        let first = tokio::spawn({
            let service = service.clone();
            async move { service.handle(first).await }
        });
        while guard.asked.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(service.table_sizes().await.in_flight, 1);
        let refused = service.handle(list("localhost", Some("127.0.0.1:2"))).await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            guard.asked.load(Ordering::SeqCst),
            1,
            "refused before the guard"
        );
        gate.notify_one();
        // Authenticated: on to the endpoint (a legacy request without a session: 400).
        let answered = first.await.unwrap();
        assert_eq!(answered.status(), StatusCode::BAD_REQUEST);
        assert_eq!(service.table_sizes().await.in_flight, 0);
    }

    #[tokio::test]
    async fn finding_1_requests_in_flight_are_capped_on_the_service_path() {
        let config = ServerConfig {
            max_requests_in_flight: 1,
            ..ServerConfig::default()
        };
        let service = service(config);
        let first = tokio::spawn({
            let service = service.clone();
            async move { service.handle(stalled_post()).await }
        });
        while service.table_sizes().await.in_flight == 0 {
            tokio::task::yield_now().await;
        }
        let mut tower = service.clone();
        let refused = tokio::time::timeout(
            Duration::from_secs(10),
            tower_service::Service::call(&mut tower, stalled_post()),
        )
        .await
        .expect("refused at once, not a wait for the body")
        .unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        assert!(message(refused).await.contains("at most 1"));
        first.abort();
        let _ = first.await;
        assert_eq!(service.table_sizes().await.in_flight, 0);
        let response = service.handle(list("localhost", Some("127.0.0.1:1"))).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
}

/// Adoption (`McpApp::adopt_session`), `Closed::{Ended, Forgotten}` and the 503 paths, with an
/// application whose "store" says of each session id: held (at a version, for a principal),
/// unknown, or unreachable.
#[cfg(test)]
mod adoption_tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use http_body_util::BodyExt;
    use modelctx_types::ProtocolVersion;

    use super::*;
    use crate::server::{
        Adopted, Closed, LegacyHandler, LegacySession, ModernRequest, Unavailable,
    };

    /// What the application's shared state says of a session id.
    #[derive(Clone)]
    enum Stored {
        Held(Adopted),
        Down,
    }

    #[derive(Default)]
    struct Records {
        /// Absent: unknown.
        stored: Mutex<HashMap<String, Stored>>,
        /// The principal of each `adopt_session` call.
        asked: Mutex<Vec<Option<Principal>>>,
        sessions: Mutex<Vec<LegacySession>>,
        inputs: Mutex<Vec<Message>>,
        closed: Mutex<Vec<(String, Closed)>>,
        /// Answer `initialize` with 503 (`LegacySession::unavailable`).
        refuse_initialize: std::sync::atomic::AtomicBool,
    }

    /// The application; `adopt_session` waits while `open` is false.
    struct Fleet {
        records: Arc<Records>,
        open: tokio::sync::watch::Sender<bool>,
    }

    impl Fleet {
        fn new() -> Arc<Fleet> {
            Arc::new(Fleet {
                records: Arc::default(),
                open: tokio::sync::watch::Sender::new(true),
            })
        }

        fn store(&self, id: &str, stored: Stored) {
            self.records
                .stored
                .lock()
                .unwrap()
                .insert(id.to_owned(), stored);
        }

        fn asked(&self) -> usize {
            self.records.asked.lock().unwrap().len()
        }

        fn closed(&self) -> Vec<(String, Closed)> {
            self.records.closed.lock().unwrap().clone()
        }

        fn opened(&self) -> Vec<LegacySession> {
            self.records.sessions.lock().unwrap().clone()
        }
    }

    struct Handler {
        session: LegacySession,
        records: Arc<Records>,
    }

    impl LegacyHandler for Handler {
        /// `initialize` is answered (or refused with 503), `ping` answered, `unavailable`
        /// refused with 503; anything else recorded and left waiting.
        fn input(&self, input: Incoming, _context: RequestContext) {
            let Incoming::Single(message) = input else {
                return;
            };
            self.records.inputs.lock().unwrap().push(message.clone());
            let Message::Request(request) = message else {
                return;
            };
            let session = self.session.clone();
            let id = request.id.clone();
            let result = match request.method.as_str() {
                "initialize" if self.records.refuse_initialize.load(Ordering::SeqCst) => {
                    tokio::spawn(async move { session.unavailable(&[id]).await });
                    return;
                }
                "initialize" => {
                    r#"{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"t","version":"0"}}"#
                }
                "ping" => "{}",
                "unavailable" => {
                    tokio::spawn(async move { session.unavailable(&[id]).await });
                    return;
                }
                _ => return,
            };
            let text = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#,
                serde_json::to_string(&request.id).unwrap()
            );
            let Ok(Incoming::Single(response)) = modelctx_types::decode(text.as_bytes()) else {
                panic!("not a response: {text}");
            };
            tokio::spawn(async move { session.send(response, Some(id)).await });
        }

        fn abandoned(&self, _id: RequestId) {}

        /// Ended: the shared state goes (as a shared store's would); forgotten: it stays.
        fn closed(&self, reason: Closed) {
            let id = self.session.id().to_owned();
            if reason == Closed::Ended {
                self.records.stored.lock().unwrap().remove(&id);
            }
            self.records.closed.lock().unwrap().push((id, reason));
        }
    }

    impl McpApp for Fleet {
        fn open_session(&self, session: LegacySession) -> Arc<dyn LegacyHandler> {
            self.records.sessions.lock().unwrap().push(session.clone());
            Arc::new(Handler {
                session,
                records: self.records.clone(),
            })
        }

        fn modern(&self, _request: ModernRequest) {}

        fn adopt_session<'a>(
            &'a self,
            id: &'a str,
            principal: Option<&'a Principal>,
        ) -> BoxFuture<'a, Result<Option<Adopted>, Unavailable>> {
            Box::pin(async move {
                self.records.asked.lock().unwrap().push(principal.cloned());
                let _ = self.open.subscribe().wait_for(|open| *open).await;
                match self.records.stored.lock().unwrap().get(id).cloned() {
                    Some(Stored::Held(adopted)) => Ok(Some(adopted)),
                    Some(Stored::Down) => Err(Unavailable::new("the store is unreachable")),
                    None => Ok(None),
                }
            })
        }
    }

    /// A session id of this transport's shape that this endpoint never gave out.
    const ELSEWHERE: &str = "0123456789abcdef0123456789abcdef";
    const OTHER: &str = "fedcba9876543210fedcba9876543210";

    fn held(principal: Option<&str>) -> Stored {
        Stored::Held(Adopted::new(
            ProtocolVersion::V2025_11_25,
            principal.map(|p| Principal(p.to_owned())),
        ))
    }

    fn service(app: &Arc<Fleet>, config: ServerConfig) -> McpService {
        let config = ServerConfig {
            keep_alive: None,
            ..config
        };
        McpService::new(config, app.clone()).unwrap()
    }

    /// A request of `method` on session `session` (2025-11-25), as `principal`.
    fn on(method: &str, session: &str, body: &str, principal: Option<&str>) -> Request<String> {
        let mut request = Request::builder()
            .method(method)
            .uri("/mcp")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25")
            .extension(PeerAddr("127.0.0.1:50000".parse().unwrap()))
            .body(body.to_owned())
            .unwrap();
        if let Some(principal) = principal {
            request
                .extensions_mut()
                .insert(Principal(principal.to_owned()));
        }
        request
    }

    fn call(id: i64, method: &str) -> String {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}"}}"#)
    }

    const NOTE: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

    fn initialize() -> Request<String> {
        let mut request = on(
            "POST",
            "",
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
            None,
        );
        request.headers_mut().remove(MCP_SESSION_ID);
        request
    }

    async fn within<F: std::future::Future>(future: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(10), future)
            .await
            .expect("timed out")
    }

    async fn json(response: Response<ResponseBody>) -> serde_json::Value {
        let body = within(response.into_body().collect())
            .await
            .unwrap()
            .to_bytes();
        serde_json::from_slice(&body).unwrap()
    }

    /// A 503 for a session: `Retry-After`, and a JSON-RPC error (-32000) naming `id`.
    async fn is_unavailable(response: Response<ResponseBody>, retry: &str, id: serde_json::Value) {
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], retry);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = json(response).await;
        assert_eq!(body["jsonrpc"], "2.0", "{body}");
        assert_eq!(body["error"]["code"], -32000, "{body}");
        assert_eq!(body["id"], id, "{body}");
    }

    /// A POST for a session this endpoint does not hold is served once the application adopts
    /// it: the session is in the table with its handshake done (the handshake timeout does not
    /// end it), its version and the adopted mark; later requests find it without asking again.
    #[tokio::test]
    async fn a_session_the_application_adopts_is_served() {
        let app = Fleet::new();
        app.store(ELSEWHERE, held(None));
        let service = service(
            &app,
            ServerConfig {
                handshake_timeout: Duration::ZERO,
                ..ServerConfig::default()
            },
        );
        let response = within(service.handle(on("POST", ELSEWHERE, &call(1, "ping"), None))).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(json(response).await["id"], 1);
        assert_eq!(app.asked(), 1);
        let opened = app.opened();
        assert_eq!(opened.len(), 1);
        assert_eq!(opened[0].id(), ELSEWHERE);
        assert!(opened[0].is_adopted());
        assert_eq!(
            opened[0].inner.version().await,
            Some(ProtocolVersion::V2025_11_25)
        );
        let sizes = service.table_sizes().await;
        assert_eq!((sizes.sessions, sizes.adopted), (1, 1));
        // Its handshake is done: the sweep does not end it for that.
        service.end_idle_sessions().await;
        let note = within(service.handle(on("POST", ELSEWHERE, NOTE, None))).await;
        assert_eq!(note.status(), StatusCode::ACCEPTED);
        let again = within(service.handle(on("POST", ELSEWHERE, &call(2, "ping"), None))).await;
        assert_eq!(json(again).await["id"], 2);
        assert_eq!(app.asked(), 1, "held here now: not asked again");
        assert!(app.closed().is_empty());
        // A session opened here is not adopted.
        let local = within(service.handle(initialize())).await;
        assert_eq!(local.status(), StatusCode::OK);
        assert!(!app.opened()[1].is_adopted());
        let sizes = service.table_sizes().await;
        assert_eq!((sizes.sessions, sizes.adopted), (2, 1));
        service.close_all().await;
        assert!(service.table_sizes().await.is_empty());
    }

    /// `Ok(None)`: 404 as for any unknown session, on POST, GET and DELETE; `Err`: 503 with
    /// `Retry-After: 1` and a JSON-RPC error; an id of another shape is not even asked about.
    #[tokio::test]
    async fn an_unknown_session_is_404_and_an_unreachable_one_503() {
        let app = Fleet::new();
        let service = service(&app, ServerConfig::default());
        for (method, body) in [
            ("POST", call(1, "ping")),
            ("GET", String::new()),
            ("DELETE", String::new()),
        ] {
            let response = within(service.handle(on(method, ELSEWHERE, &body, None))).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method}");
            assert_eq!(
                json(response).await["error"]["message"],
                "Session not found"
            );
        }
        assert_eq!(app.asked(), 3);
        app.store(ELSEWHERE, Stored::Down);
        for (method, body) in [
            ("POST", call(1, "ping")),
            ("GET", String::new()),
            ("DELETE", String::new()),
        ] {
            let response = within(service.handle(on(method, ELSEWHERE, &body, None))).await;
            is_unavailable(response, "1", serde_json::Value::Null).await;
        }
        assert_eq!(app.asked(), 6);
        let junk =
            within(service.handle(on("POST", "not-one-of-ours", &call(1, "ping"), None))).await;
        assert_eq!(junk.status(), StatusCode::NOT_FOUND);
        assert_eq!(app.asked(), 6, "not asked");
        assert!(app.opened().is_empty());
        assert!(service.table_sizes().await.is_empty());
    }

    /// An adopted session is bound to the principal the application recorded, by the same
    /// rule as a session opened here: another principal (or none) gets 404 and nothing is
    /// adopted; the application is told the request's principal.
    #[tokio::test]
    async fn an_adopted_session_keeps_its_principal() {
        let app = Fleet::new();
        app.store(ELSEWHERE, held(Some("alice")));
        let service = service(&app, ServerConfig::default());
        for principal in [Some("bob"), None] {
            let response =
                within(service.handle(on("POST", ELSEWHERE, &call(1, "ping"), principal))).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{principal:?}");
        }
        assert!(app.opened().is_empty());
        assert!(service.table_sizes().await.is_empty());
        let alice =
            within(service.handle(on("POST", ELSEWHERE, &call(1, "ping"), Some("alice")))).await;
        assert_eq!(alice.status(), StatusCode::OK);
        assert_eq!(
            app.opened()[0].principal(),
            Some(&Principal("alice".into()))
        );
        // Held here now: bob is refused by the table itself, without asking.
        let bob =
            within(service.handle(on("POST", ELSEWHERE, &call(2, "ping"), Some("bob")))).await;
        assert_eq!(bob.status(), StatusCode::NOT_FOUND);
        let asked = app.records.asked.lock().unwrap().clone();
        assert_eq!(
            asked,
            [
                Some(Principal("bob".into())),
                None,
                Some(Principal("alice".into()))
            ]
        );
        service.close_all().await;
        assert!(service.table_sizes().await.is_empty());
    }

    /// The idle sweep only forgets an adopted session (`Closed::Forgotten`: its events and
    /// shared state stay, and the next request adopts it again); DELETE ends it
    /// (`Closed::Ended`: its events leave the store). A session opened here ends when idle.
    #[tokio::test]
    async fn the_sweep_forgets_an_adopted_session_and_delete_ends_it() {
        let app = Fleet::new();
        app.store(ELSEWHERE, held(None));
        let service = service(
            &app,
            ServerConfig {
                session_idle_timeout: Duration::ZERO,
                ..ServerConfig::default()
            },
        );
        let events = service.config().event_store.clone();
        // Adopted by a GET: its standalone stream's priming event goes in the store.
        let stream = within(service.handle(on("GET", ELSEWHERE, "", None))).await;
        assert_eq!(stream.status(), StatusCode::OK);
        let mut body = stream.into_body();
        let first = within(body.frame()).await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(first.data_ref().unwrap()).contains("id: "));
        drop(body);
        let local = within(service.handle(initialize())).await;
        let local = local.headers()[MCP_SESSION_ID].to_str().unwrap().to_owned();
        assert_eq!(service.table_sizes().await.adopted, 1);

        service.end_idle_sessions().await;
        let mut closed = app.closed();
        closed.sort_by(|a, b| a.0.cmp(&b.0));
        let mut expected = vec![
            (ELSEWHERE.to_owned(), Closed::Forgotten),
            (local, Closed::Ended),
        ];
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(closed, expected);
        assert!(service.table_sizes().await.is_empty());
        assert!(
            !events.sizes().await.unwrap().is_empty(),
            "the forgotten one's events stay"
        );

        // The next request adopts it again; DELETE ends it, events and all.
        let ping = within(service.handle(on("POST", ELSEWHERE, &call(1, "ping"), None))).await;
        assert_eq!(ping.status(), StatusCode::OK);
        assert_eq!(app.asked(), 2);
        let delete = within(service.handle(on("DELETE", ELSEWHERE, "", None))).await;
        assert_eq!(delete.status(), StatusCode::OK);
        assert_eq!(
            app.closed().last(),
            Some(&(ELSEWHERE.to_owned(), Closed::Ended))
        );
        assert!(service.table_sizes().await.is_empty());
        assert!(
            events.sizes().await.unwrap().is_empty(),
            "ended: its events are gone"
        );
        let gone = within(service.handle(on("POST", ELSEWHERE, &call(2, "ping"), None))).await;
        assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    }

    /// Adopted sessions count against `max_sessions`: a busy one refuses a new session and
    /// another adoption (503, whose handler is told it was forgotten); once idle, it is the one
    /// evicted to make room, and eviction only forgets it.
    #[tokio::test]
    async fn adopted_sessions_count_against_max_sessions() {
        let app = Fleet::new();
        app.store(ELSEWHERE, held(None));
        app.store(OTHER, held(None));
        let service = service(
            &app,
            ServerConfig {
                max_sessions: 1,
                ..ServerConfig::default()
            },
        );
        let busy = tokio::spawn({
            let service = service.clone();
            let request = on("POST", ELSEWHERE, &call(1, "tools/call"), None);
            async move { service.handle(request).await }
        });
        within(async {
            while app.records.inputs.lock().unwrap().is_empty() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        let refused = within(service.handle(initialize())).await;
        is_unavailable(refused, "5", 0.into()).await;
        let other = within(service.handle(on("POST", OTHER, &call(2, "ping"), None))).await;
        is_unavailable(other, "5", serde_json::Value::Null).await;
        assert_eq!(app.closed(), [(OTHER.to_owned(), Closed::Forgotten)]);
        let sizes = service.table_sizes().await;
        assert_eq!((sizes.sessions, sizes.adopted, sizes.requests), (1, 1, 1));
        // Its client goes away: idle, it is let go to make room, and only forgotten.
        busy.abort();
        let _ = busy.await;
        let opened = within(service.handle(initialize())).await;
        assert_eq!(opened.status(), StatusCode::OK);
        assert_eq!(
            app.closed(),
            [
                (OTHER.to_owned(), Closed::Forgotten),
                (ELSEWHERE.to_owned(), Closed::Forgotten)
            ]
        );
        let sizes = service.table_sizes().await;
        assert_eq!((sizes.sessions, sizes.adopted), (1, 0));
        service.close_all().await;
        assert!(service.table_sizes().await.is_empty());
        assert!(
            app.records.stored.lock().unwrap().len() == 2,
            "forgotten, not ended: the shared state stays"
        );
    }

    /// Shutdown ends the sessions opened here and forgets the adopted ones.
    #[tokio::test]
    async fn shutdown_forgets_adopted_sessions() {
        let app = Fleet::new();
        app.store(ELSEWHERE, held(None));
        let service = service(&app, ServerConfig::default());
        let ping = within(service.handle(on("POST", ELSEWHERE, &call(1, "ping"), None))).await;
        assert_eq!(ping.status(), StatusCode::OK);
        let local = within(service.handle(initialize())).await;
        let local = local.headers()[MCP_SESSION_ID].to_str().unwrap().to_owned();
        service.close_all().await;
        let mut closed = app.closed();
        closed.sort_by(|a, b| a.0.cmp(&b.0));
        let mut expected = vec![
            (ELSEWHERE.to_owned(), Closed::Forgotten),
            (local, Closed::Ended),
        ];
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(closed, expected);
        assert!(service.table_sizes().await.is_empty());
    }

    /// `LegacySession::unavailable`: the application answers a registered POST with 503 and
    /// `Retry-After: 1` (naming its request); the request leaves the table. An `initialize`
    /// answered so gets no session id, and its session ends.
    #[tokio::test]
    async fn the_application_answers_a_registered_post_with_503() {
        let app = Fleet::new();
        app.store(ELSEWHERE, held(None));
        let service = service(&app, ServerConfig::default());
        let refused =
            within(service.handle(on("POST", ELSEWHERE, &call(7, "unavailable"), None))).await;
        is_unavailable(refused, "1", 7.into()).await;
        let sizes = service.table_sizes().await;
        assert_eq!((sizes.sessions, sizes.streams, sizes.requests), (1, 0, 0));
        // Nothing in flight: nothing to answer.
        assert!(!app.opened()[0].unavailable(&[RequestId::from(8)]).await);
        // The session goes on.
        let ping = within(service.handle(on("POST", ELSEWHERE, &call(8, "ping"), None))).await;
        assert_eq!(json(ping).await["id"], 8);

        app.records.refuse_initialize.store(true, Ordering::SeqCst);
        let refused = within(service.handle(initialize())).await;
        assert!(refused.headers().get(MCP_SESSION_ID).is_none());
        is_unavailable(refused, "1", 0.into()).await;
        let opened = app.opened();
        let initialized = opened.last().unwrap().id().to_owned();
        assert_eq!(app.closed(), [(initialized, Closed::Ended)]);
        let sizes = service.table_sizes().await;
        assert_eq!((sizes.sessions, sizes.adopted), (1, 1));
        service.close_all().await;
        assert!(service.table_sizes().await.is_empty());
    }

    /// Concurrent requests for one session the endpoint does not hold share one adoption: the
    /// application is asked once, opens one handler, and every request gets its outcome
    /// (served, or 503 when the state was unreachable).
    #[tokio::test]
    async fn concurrent_requests_share_one_adoption() {
        for (stored, status) in [
            (held(None), StatusCode::OK),
            (Stored::Down, StatusCode::SERVICE_UNAVAILABLE),
        ] {
            let app = Fleet::new();
            app.store(ELSEWHERE, stored);
            let service = service(&app, ServerConfig::default());
            app.open.send_replace(false);
            let posts: Vec<_> = (1..=3)
                .map(|n| {
                    let service = service.clone();
                    let request = on("POST", ELSEWHERE, &call(n, "ping"), None);
                    tokio::spawn(async move { service.handle(request).await })
                })
                .collect();
            within(async {
                while app.asked() == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(app.asked(), 1, "the others wait");
            app.open.send_replace(true);
            for post in posts {
                assert_eq!(within(post).await.unwrap().status(), status);
            }
            assert_eq!(app.asked(), 1);
            assert_eq!(app.opened().len(), usize::from(status == StatusCode::OK));
            service.close_all().await;
            assert!(service.table_sizes().await.is_empty());
        }
    }
}
