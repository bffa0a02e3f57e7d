//! The client side of a connection: the era probe, the legacy handshake, requests of both eras.

use std::time::Instant;

use modelctx_types::{
    ErrorCode, ErrorObject, ErrorResponse, Incoming, JsonObject, Message, Notification, Request,
    RequestId,
};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::caps::{self, declared};
use crate::config::{ClientConfig, EraChoice, RequestOptions};
use crate::core::{Core, InFlight, Role, TableSizes};
use crate::event::{
    CloseReason, Event, IncomingRequest, PeerInfo, RequestError, SessionError, Transmit,
};
use crate::meta;
use crate::version::{self, Direction, Era, ProtocolVersion};

/// What the probe found: cache it per server and pass it back as [`EraChoice`] next time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EraDecision {
    /// The server speaks this modern version.
    Modern(ProtocolVersion),
    /// The server is initialize-based.
    Legacy,
}

/// The client lifecycle, named for what each state expects next.
#[derive(Debug)]
enum State {
    /// [`ClientSession::connect`] has not been called.
    ExpectConnect,
    /// Waiting for the answer to `server/discover`.
    ExpectDiscover {
        id: RequestId,
        version: ProtocolVersion,
        retried: bool,
    },
    /// Waiting for the answer to `initialize`.
    ExpectInitializeResult { id: RequestId },
    /// The protocol is settled.
    Operating(PeerInfo),
    /// Closed.
    Closed,
}

#[derive(Deserialize)]
struct DiscoverResult {
    #[serde(rename = "supportedVersions")]
    supported_versions: Vec<String>,
    capabilities: JsonObject,
    instructions: Option<String>,
    #[serde(rename = "_meta")]
    meta: Option<JsonObject>,
}

#[derive(Deserialize)]
struct InitializeResult {
    #[serde(rename = "protocolVersion")]
    protocol_version: String,
    capabilities: JsonObject,
    #[serde(rename = "serverInfo")]
    server_info: Value,
    instructions: Option<String>,
}

#[derive(Deserialize)]
struct UnsupportedData {
    supported: Vec<String>,
}

/// The protocol state machine of one client connection.
///
/// Call [`connect`](Self::connect) first: it sends the probe (`server/discover`) or `initialize`.
/// [`Event::Ready`] says the protocol is settled; requests sent before it fail with
/// [`SessionError::NotReady`]. The call order is that of [`ServerSession`](crate::ServerSession):
/// after every input or command, drain [`poll_transmit`](Self::poll_transmit) and
/// [`poll_event`](Self::poll_event), then arm a timer for [`poll_timeout`](Self::poll_timeout).
#[derive(Debug)]
pub struct ClientSession {
    core: Core,
    config: ClientConfig,
    state: State,
    decision: Option<EraDecision>,
}

impl ClientSession {
    /// A new session; nothing is sent until [`connect`](Self::connect).
    pub fn new(config: ClientConfig) -> Self {
        ClientSession {
            core: Core::new(config.limits.clone()),
            config,
            state: State::ExpectConnect,
            decision: None,
        }
    }

    // -- getters --------------------------------------------------------------------------------

    /// The version spoken, once settled.
    pub fn version(&self) -> Option<ProtocolVersion> {
        self.peer().map(|p| p.version)
    }

    /// The server, once the protocol is settled.
    pub fn peer(&self) -> Option<&PeerInfo> {
        match &self.state {
            State::Operating(peer) => Some(peer),
            _ => None,
        }
    }

    /// What the probe decided (or the handshake found), to cache per server.
    pub fn era_decision(&self) -> Option<EraDecision> {
        self.decision
    }

    /// Whether the session is closed.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// The size of every internal table.
    pub fn table_sizes(&self) -> TableSizes {
        self.core.sizes()
    }

    fn modern_versions(&self) -> impl Iterator<Item = ProtocolVersion> + '_ {
        self.config
            .versions
            .iter()
            .copied()
            .filter(|v| v.era() == Era::Modern)
    }

    fn latest_legacy(&self) -> Option<ProtocolVersion> {
        self.config
            .versions
            .iter()
            .copied()
            .filter(|v| v.era() == Era::Legacy)
            .max()
    }

    // -- outputs --------------------------------------------------------------------------------

    /// The next message to write.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.core.poll_transmit()
    }

    /// The next event for the layer above.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.core.poll_event()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    // -- the handshake --------------------------------------------------------------------------

    /// Starts the protocol: the probe, or `initialize` when the era is known to be legacy.
    pub fn connect(&mut self, now: Instant) -> Result<(), SessionError> {
        if !matches!(self.state, State::ExpectConnect) {
            return Err(SessionError::Invalid("connect was already called".into()));
        }
        match (self.config.era, self.modern_versions().max()) {
            (EraChoice::Probe | EraChoice::Modern, Some(version)) => {
                self.probe(now, version, false)
            }
            (EraChoice::Modern, None) => {
                self.fail(CloseReason::ProbeFailed(
                    "no modern version is configured".into(),
                ));
                Ok(())
            }
            _ => self.initialize(now),
        }
    }

    fn modern_meta(&self, version: ProtocolVersion) -> JsonObject {
        let mut meta = JsonObject::new();
        meta.insert(meta::PROTOCOL_VERSION.into(), Value::from(version.as_str()));
        meta.insert(
            meta::CLIENT_CAPABILITIES.into(),
            Value::Object(self.config.capabilities.clone()),
        );
        meta.insert(meta::CLIENT_INFO.into(), self.config.client_info.clone());
        meta
    }

    fn probe(
        &mut self,
        now: Instant,
        version: ProtocolVersion,
        retried: bool,
    ) -> Result<(), SessionError> {
        let options = RequestOptions::default().with_timeout(Some(self.config.handshake_timeout));
        let meta = self.modern_meta(version);
        let request = self.core.start_request(
            now,
            "server/discover",
            None,
            Some(meta),
            options,
            Era::Modern,
        )?;
        self.state = State::ExpectDiscover {
            id: request.id.clone(),
            version,
            retried,
        };
        self.core.send_request(request);
        Ok(())
    }

    fn initialize(&mut self, now: Instant) -> Result<(), SessionError> {
        let Some(version) = self.latest_legacy() else {
            self.fail(CloseReason::ProbeFailed(
                "the server is not modern and no legacy version is configured".into(),
            ));
            return Ok(());
        };
        let params = serde_json::json!({
            "protocolVersion": version.as_str(),
            "capabilities": self.config.capabilities,
            "clientInfo": self.config.client_info,
        });
        let Value::Object(params) = params else {
            unreachable!("an object")
        };
        let options = RequestOptions::default().with_timeout(Some(self.config.handshake_timeout));
        let request =
            self.core
                .start_request(now, "initialize", Some(params), None, options, Era::Legacy)?;
        self.state = State::ExpectInitializeResult {
            id: request.id.clone(),
        };
        self.core.send_request(request);
        Ok(())
    }

    /// The transport reports that the probe got no MCP answer (HTTP 404 or 405, a non-JSON body,
    /// a closed stream): fall back to `initialize`.
    pub fn probe_failed(&mut self, now: Instant) -> Result<(), SessionError> {
        let State::ExpectDiscover { id, .. } = &self.state else {
            return Err(SessionError::Invalid("no probe is in flight".into()));
        };
        let id = id.clone();
        self.core.take_answer(&id);
        self.fall_back(now, "the transport reported no MCP answer")
    }

    fn fall_back(&mut self, now: Instant, why: &str) -> Result<(), SessionError> {
        if self.config.era == EraChoice::Modern {
            self.fail(CloseReason::ProbeFailed(why.into()));
            return Ok(());
        }
        self.initialize(now)
    }

    fn on_discover_answer(
        &mut self,
        now: Instant,
        version: ProtocolVersion,
        retried: bool,
        answer: Result<Box<RawValue>, ErrorObject>,
    ) {
        let outcome: Result<(), String> = match answer {
            Ok(result) => match serde_json::from_str::<DiscoverResult>(result.get()) {
                Ok(discover) => {
                    let theirs: Vec<ProtocolVersion> = discover
                        .supported_versions
                        .iter()
                        .filter_map(|v| ProtocolVersion::parse(v))
                        .collect();
                    let shared = self.modern_versions().filter(|v| theirs.contains(v)).max();
                    match shared {
                        Some(shared) => {
                            let info = discover.meta.and_then(|mut m| m.remove(meta::SERVER_INFO));
                            return self.settle(PeerInfo {
                                version: shared,
                                capabilities: Some(discover.capabilities),
                                info,
                                instructions: discover.instructions,
                            });
                        }
                        None => {
                            Err("server/discover names no modern version this client speaks"
                                .to_owned())
                        }
                    }
                }
                Err(e) => Err(format!("invalid server/discover result: {e}")),
            },
            Err(error) if error.code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => {
                let theirs: Vec<ProtocolVersion> = error
                    .data_as::<UnsupportedData>()
                    .ok()
                    .flatten()
                    .map(|d| {
                        d.supported
                            .iter()
                            .filter_map(|v| ProtocolVersion::parse(v))
                            .collect()
                    })
                    .unwrap_or_default();
                match self.modern_versions().filter(|v| theirs.contains(v)).max() {
                    Some(shared) if !retried => {
                        let _ = self.probe(now, shared, true);
                        return;
                    }
                    _ => Err(format!(
                        "the server supports no modern version of ours: {error}"
                    )),
                }
            }
            Err(error)
                if error.code == ErrorCode::HEADER_MISMATCH
                    || error.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY =>
            {
                // A modern server that refused this particular request: modern, capabilities unknown.
                return self.settle(PeerInfo {
                    version,
                    capabilities: None,
                    info: None,
                    instructions: None,
                });
            }
            Err(error) => Err(format!("server/discover failed: {error}")),
        };
        if let Err(why) = outcome {
            let _ = self.fall_back(now, &why);
        }
    }

    fn on_initialize_answer(&mut self, answer: Result<Box<RawValue>, ErrorObject>) {
        let result = match answer {
            Ok(result) => result,
            Err(error) => return self.fail(CloseReason::InitializeFailed(error)),
        };
        let result: InitializeResult = match serde_json::from_str(result.get()) {
            Ok(r) => r,
            Err(e) => return self.fail(CloseReason::InvalidInitializeResult(e.to_string())),
        };
        let version = match ProtocolVersion::parse(&result.protocol_version) {
            Some(v) if v.era() == Era::Legacy && self.config.versions.contains(&v) => v,
            _ => {
                return self.fail(CloseReason::UnsupportedVersion {
                    offered: result.protocol_version,
                });
            }
        };
        self.core.transmit(
            Notification::new("notifications/initialized", &()).expect("no params"),
            None,
        );
        self.settle(PeerInfo {
            version,
            capabilities: Some(result.capabilities),
            info: Some(result.server_info),
            instructions: result.instructions,
        });
    }

    fn settle(&mut self, peer: PeerInfo) {
        self.decision = Some(match peer.version.era() {
            Era::Modern => EraDecision::Modern(peer.version),
            Era::Legacy => EraDecision::Legacy,
        });
        self.core.event(Event::Ready(peer.clone()));
        self.state = State::Operating(peer);
    }

    fn fail(&mut self, reason: CloseReason) {
        self.core.close(&reason);
        self.state = State::Closed;
        self.core.event(Event::Closed(reason));
    }

    // -- inputs ---------------------------------------------------------------------------------

    /// Handles bytes the transport read (one JSON text), like
    /// [`ServerSession::handle_bytes`](crate::ServerSession::handle_bytes).
    pub fn handle_bytes(&mut self, now: Instant, bytes: &[u8]) {
        self.read_bytes(now, bytes);
    }

    /// Handles one decoded input: a message, or a batch (2025-03-26 sessions only).
    pub fn handle_incoming(&mut self, now: Instant, incoming: Incoming) {
        self.read_incoming(now, incoming);
    }

    /// Handles one message from the server.
    pub fn handle_message(&mut self, now: Instant, message: Message) {
        self.dispatch(now, message, None);
    }

    fn dispatch(&mut self, now: Instant, message: Message, batch: Option<u64>) {
        if self.is_closed() {
            return;
        }
        match message {
            Message::Request(request) => self.on_request(request, batch),
            Message::Notification(notification) => self.on_notification(now, notification),
            Message::Response(response) => self.on_answer(now, response.id, Ok(response.result)),
            Message::Error(error) => match error.id {
                Some(id) => self.on_answer(now, id, Err(error.error)),
                None => self.core.event(Event::PeerError(error.error)),
            },
            _ => {}
        }
    }

    fn on_answer(
        &mut self,
        now: Instant,
        id: RequestId,
        answer: Result<Box<RawValue>, ErrorObject>,
    ) {
        let Some(method) = self.core.take_answer(&id) else {
            return; // late answer to a cancelled request, or to none: ignored
        };
        match &self.state {
            State::ExpectDiscover {
                id: probe,
                version,
                retried,
            } if *probe == id => {
                let (version, retried) = (*version, *retried);
                return self.on_discover_answer(now, version, retried, answer);
            }
            State::ExpectInitializeResult { id: init } if *init == id => {
                return self.on_initialize_answer(answer);
            }
            _ => {}
        }
        self.core.event(match answer {
            Ok(result) => Event::Response { id, method, result },
            Err(error) => Event::Failed {
                id,
                method,
                error: RequestError::Remote(error),
            },
        });
    }

    fn on_request(&mut self, request: Request, batch: Option<u64>) {
        let Request { id, method, params } = request;
        let version = match &self.state {
            State::Operating(peer) if peer.version.era() == Era::Modern => {
                return self.core.reply_error(
                    Some(id),
                    batch,
                    ErrorObject::new(
                        ErrorCode::METHOD_NOT_FOUND,
                        format!("servers send no requests in protocol {}", peer.version),
                    ),
                );
            }
            State::Operating(peer) => peer.version,
            _ if method == "ping" => {
                return self.core.reply_result(id, batch, &serde_json::json!({}));
            }
            _ => {
                return self.core.reply_error(
                    Some(id),
                    batch,
                    ErrorObject::new(
                        ErrorCode::INVALID_REQUEST,
                        format!("`{method}` before the handshake completed"),
                    ),
                );
            }
        };
        if method == "ping" {
            return self.core.reply_result(id, batch, &serde_json::json!({}));
        }
        if !version::request_exists(version, &method, Direction::ToClient) {
            return self.core.reply_error(
                Some(id),
                batch,
                ErrorObject::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("method `{method}` does not exist in protocol {version}"),
                ),
            );
        }
        let probe = match meta::probe(params.as_deref()) {
            Ok(p) => p,
            Err(error) => return self.core.reply_error(Some(id), batch, error),
        };
        let object: Option<JsonObject> = params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok());
        if let Err(path) = caps::request_allowed(
            version,
            &method,
            Direction::ToClient,
            object.as_ref(),
            &self.config.capabilities,
        ) {
            return self.core.reply_error(
                Some(id),
                batch,
                ErrorObject::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "`{method}` is not available: this client does not declare `{}`",
                        path.join(".")
                    ),
                ),
            );
        }
        if let Err(error) = self.core.check_incoming(&id, probe.progress_token.as_ref()) {
            return self.core.reply_error(Some(id), batch, error);
        }
        let generation = self.core.add_incoming(
            id.clone(),
            InFlight::new(&method, probe.progress_token.clone(), batch),
        );
        if let Some(batch) = batch {
            self.core.batch_expect(batch);
        }
        self.core.event(Event::Request(IncomingRequest {
            id,
            method,
            params,
            version,
            progress_token: probe.progress_token,
            meta: None,
            generation,
        }));
    }

    fn on_notification(&mut self, now: Instant, notification: Notification) {
        match notification.method.as_str() {
            "notifications/progress" => self
                .core
                .handle_progress(now, notification.params.as_deref()),
            "notifications/cancelled" => {
                if self.version().is_some_and(|v| v.era() == Era::Modern) {
                    // A modern server ends a listen stream of ours this way.
                    #[derive(Deserialize)]
                    struct Cancelled {
                        #[serde(rename = "requestId")]
                        request_id: RequestId,
                        reason: Option<String>,
                    }
                    let Some(Ok(p)) = notification
                        .params
                        .as_deref()
                        .map(|p| serde_json::from_str::<Cancelled>(p.get()))
                    else {
                        return;
                    };
                    if let Some(method) = self.core.take_answer(&p.request_id) {
                        self.core.event(Event::Failed {
                            id: p.request_id,
                            method,
                            error: RequestError::CancelledByPeer(p.reason),
                        });
                    }
                } else {
                    self.core.peer_cancelled(notification.params.as_deref());
                }
            }
            method => {
                let known = match self.version() {
                    Some(v) => version::notification_exists(v, method, Direction::ToClient),
                    None => ProtocolVersion::ALL
                        .iter()
                        .any(|v| version::notification_exists(*v, method, Direction::ToClient)),
                };
                // The tasks extension's status notification (on a listen stream whose filter
                // asked for it), in no version's list.
                let extension = method == "notifications/tasks"
                    && self.version().is_some_and(|v| v.era() == Era::Modern);
                if known || extension {
                    self.core.event(Event::Notification(notification));
                }
            }
        }
    }

    /// Checks for expired requests (the probe and `initialize` included) and old cancellations.
    /// Safe to call at any time.
    pub fn handle_timeout(&mut self, now: Instant) {
        let expired = self.core.handle_timeout(now);
        let mut report = Vec::new();
        for (id, method, waited) in expired {
            match &self.state {
                State::ExpectDiscover { id: probe, .. } if *probe == id => {
                    let _ = self.fall_back(now, "server/discover timed out");
                }
                State::ExpectInitializeResult { id: init } if *init == id => {
                    self.fail(CloseReason::InitializeTimeout(waited));
                }
                _ => report.push((id, method, waited)),
            }
        }
        self.core.report_timeouts(report);
    }

    // -- commands -------------------------------------------------------------------------------

    /// Sends a request with the configured default options.
    pub fn send_request(
        &mut self,
        now: Instant,
        method: &str,
        params: Option<JsonObject>,
    ) -> Result<RequestId, SessionError> {
        let options = self.config.request_options;
        self.send_request_with(now, method, params, options)
    }

    /// Sends a request. It must exist in the version spoken and the server must have declared what
    /// it needs. In the modern era `_meta` gets the protocol version, the client capabilities and
    /// the client info (members already in `params._meta` are kept unless they collide). The
    /// capabilities are the configured ones plus, for this request only, those the caller put in
    /// `params._meta["io.modelcontextprotocol/clientCapabilities"]` (an object: its members are
    /// added, objects merged one level deep, the configured members kept), such as an extension
    /// declared on one request (the tasks extension is declared per request); with
    /// [`RequestOptions::only_request_capabilities`], those of `params._meta` alone.
    /// `subscriptions/listen` never times out.
    pub fn send_request_with(
        &mut self,
        now: Instant,
        method: &str,
        params: Option<JsonObject>,
        mut options: RequestOptions,
    ) -> Result<RequestId, SessionError> {
        let peer = match &self.state {
            State::Operating(peer) => peer,
            State::Closed => return Err(SessionError::Closed),
            _ => return Err(SessionError::NotReady),
        };
        let version = peer.version;
        if method == "initialize" {
            return Err(SessionError::Invalid(
                "the session sends initialize itself".into(),
            ));
        }
        let exists = version::request_exists(version, method, Direction::ToServer)
            || (version::is_tasks_extension_request(version, method)
                && peer
                    .capabilities
                    .as_ref()
                    .is_none_or(|c| declared(c, &["extensions", caps::TASKS_EXTENSION])))
            || version::is_skills_extension_request(method);
        if !exists {
            return Err(SessionError::MethodNotInVersion {
                method: method.into(),
                version,
            });
        }
        if let (Some(caps), Some(path)) = (
            &peer.capabilities,
            caps::request_gate(version, method, Direction::ToServer),
        ) && !declared(caps, path)
        {
            return Err(SessionError::NotDeclared {
                method: method.into(),
                capability: path.join("."),
            });
        }
        let era = version.era();
        let meta = (era == Era::Modern).then(|| {
            let mut meta = self.modern_meta(version);
            if options.only_request_capabilities {
                let own = params
                    .as_ref()
                    .and_then(|p| p.get("_meta"))
                    .and_then(|m| m.get(meta::CLIENT_CAPABILITIES))
                    .filter(|caps| caps.is_object())
                    .cloned()
                    .unwrap_or_else(|| Value::Object(JsonObject::new()));
                meta.insert(meta::CLIENT_CAPABILITIES.into(), own);
            } else {
                add_request_capabilities(&mut meta, params.as_ref());
            }
            meta
        });
        if method == "subscriptions/listen" {
            options.timeout = None;
        }
        let request = self
            .core
            .start_request(now, method, params, meta, options, era)?;
        let id = request.id.clone();
        self.core.send_request(request);
        Ok(id)
    }

    /// Cancels a request we sent (its late answer is ignored): a [`Transmit::Cancel`] of the
    /// request's era, which the transport writes as `notifications/cancelled` or maps to closing
    /// the request's stream. `initialize` is never cancelled.
    pub fn cancel(
        &mut self,
        now: Instant,
        id: &RequestId,
        reason: Option<&str>,
    ) -> Result<(), SessionError> {
        if matches!(&self.state, State::ExpectInitializeResult { id: init } if init == id) {
            return Err(SessionError::Invalid(
                "initialize is never cancelled".into(),
            ));
        }
        self.core
            .cancel_outgoing(now, id, reason)
            .map(drop)
            .ok_or_else(|| SessionError::NotInFlight(id.clone()))
    }

    /// Pauses the timeout of our request `id` from `now`: it cannot time out until
    /// [`resume_timeout`](Self::resume_timeout), and the time in between does not count against
    /// it (nor against the bound on the total wait that progress may extend it to). For the
    /// time the layer above spends answering a request of the server's that the call raised (a
    /// form the user fills in). Returns false, and changes nothing, when `id` is not in flight,
    /// has no timeout or is paused already.
    pub fn pause_timeout(&mut self, now: Instant, id: &RequestId) -> bool {
        self.core.pause_timeout(now, id)
    }

    /// Lets the paused timeout of our request `id` run again from `now`: its deadline moves on
    /// by the time it was paused. Returns false when it was not paused (or is not in flight).
    pub fn resume_timeout(&mut self, now: Instant, id: &RequestId) -> bool {
        self.core.resume_timeout(now, id)
    }

    /// Answers the server's request `id` (legacy: sampling, elicitation, roots).
    ///
    /// This answers whichever request is in flight under `id`; a layer whose handlers can
    /// outlive their request's cancellation answers with [`respond_to`](Self::respond_to), so
    /// that a late answer never goes to a newer request that reused the id.
    pub fn respond(&mut self, id: &RequestId, result: Box<RawValue>) -> Result<(), SessionError> {
        self.respond_generation(id, None, result)
    }

    /// Answers the start of the server's request `id` whose [`IncomingRequest::generation`] is
    /// `generation`, as [`respond`](Self::respond) does; `Err(NotInFlight)`, and nothing sent,
    /// when that request is no longer in flight, even if a newer request reused its id (audit
    /// finding 12).
    ///
    /// [`IncomingRequest::generation`]: crate::IncomingRequest::generation
    pub fn respond_to(
        &mut self,
        id: &RequestId,
        generation: u64,
        result: Box<RawValue>,
    ) -> Result<(), SessionError> {
        self.respond_generation(id, Some(generation), result)
    }

    fn respond_generation(
        &mut self,
        id: &RequestId,
        generation: Option<u64>,
        result: Box<RawValue>,
    ) -> Result<(), SessionError> {
        if !result.get().trim_start().starts_with('{') {
            return Err(SessionError::Invalid(
                "a result must be a JSON object".into(),
            ));
        }
        self.core
            .finish_incoming(id, generation, |_| {
                Ok(modelctx_types::Response {
                    id: id.clone(),
                    result,
                }
                .into())
            })
            .map(drop)
    }

    /// Answers the server's request `id` with an error.
    pub fn respond_error(
        &mut self,
        id: &RequestId,
        error: ErrorObject,
    ) -> Result<(), SessionError> {
        self.respond_error_generation(id, None, error)
    }

    /// Answers the start of the server's request `id` whose [`IncomingRequest::generation`] is
    /// `generation` with an error, as [`respond_error`](Self::respond_error) does; a stale
    /// answer is refused as in [`respond_to`](Self::respond_to).
    ///
    /// [`IncomingRequest::generation`]: crate::IncomingRequest::generation
    pub fn respond_error_to(
        &mut self,
        id: &RequestId,
        generation: u64,
        error: ErrorObject,
    ) -> Result<(), SessionError> {
        self.respond_error_generation(id, Some(generation), error)
    }

    fn respond_error_generation(
        &mut self,
        id: &RequestId,
        generation: Option<u64>,
        error: ErrorObject,
    ) -> Result<(), SessionError> {
        if !error.code.is_sendable() {
            return Err(SessionError::Invalid(format!(
                "error code {} is never sent",
                error.code.0
            )));
        }
        self.core
            .finish_incoming(id, generation, |_| {
                Ok(ErrorResponse::new(Some(id.clone()), error).into())
            })
            .map(drop)
    }

    /// Sends progress on the server's request `id` (legacy), which must have asked for it.
    pub fn notify_progress(
        &mut self,
        id: &RequestId,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), SessionError> {
        self.core.send_progress(id, progress, total, message)
    }

    /// Sends `notifications/roots/list_changed` (legacy; needs `roots.listChanged` declared).
    pub fn notify_roots_changed(&mut self) -> Result<(), SessionError> {
        let version = self.version().ok_or(SessionError::NotReady)?;
        let method = "notifications/roots/list_changed";
        if !version::notification_exists(version, method, Direction::ToServer) {
            return Err(SessionError::MethodNotInVersion {
                method: method.into(),
                version,
            });
        }
        if !declared(&self.config.capabilities, &["roots", "listChanged"]) {
            return Err(SessionError::NotDeclared {
                method: method.into(),
                capability: "roots.listChanged".into(),
            });
        }
        self.core
            .transmit(Notification::new(method, &()).expect("no params"), None);
        Ok(())
    }

    /// The transport reports that request `id` got no MCP answer and never will (an HTTP status
    /// without a JSON-RPC error for it, a body that is not JSON-RPC, a stream that broke and could
    /// not be resumed or re-issued). `why` says what came back.
    ///
    /// For the probe this is the fallback signal ([`probe_failed`](Self::probe_failed)); for
    /// `initialize` it closes the session with [`CloseReason::Transport`]; any other request
    /// fails with [`RequestError::Transport`]. A request no longer in flight (answered, cancelled,
    /// timed out) is ignored, so a transport may report late.
    pub fn request_failed(&mut self, now: Instant, id: &RequestId, why: impl Into<String>) {
        let why = why.into();
        match &self.state {
            State::ExpectDiscover { id: probe, .. } if probe == id => {
                self.core.take_answer(id);
                let _ = self.fall_back(now, &format!("the probe got no MCP answer: {why}"));
            }
            State::ExpectInitializeResult { id: init } if init == id => {
                self.core.take_answer(id);
                self.fail(CloseReason::Transport(format!("initialize failed: {why}")));
            }
            _ => {
                if let Some(method) = self.core.take_answer(id) {
                    self.core.event(Event::Failed {
                        id: id.clone(),
                        method,
                        error: RequestError::Transport(why),
                    });
                }
            }
        }
    }

    /// The transport could not get request `id` credentials the server accepts (an HTTP
    /// client's authorizer gave up); `why` says what it said.
    ///
    /// For the probe or `initialize` this closes the session with
    /// [`CloseReason::Unauthorized`]: unlike [`request_failed`](Self::request_failed), the probe
    /// does not fall back to `initialize` (which would only ask for authorization again). Any
    /// other request fails with [`RequestError::Transport`] and the session lives on. A request
    /// no longer in flight is ignored.
    pub fn request_unauthorized(&mut self, id: &RequestId, why: impl Into<String>) {
        let why = why.into();
        match &self.state {
            State::ExpectDiscover { id: first, .. }
            | State::ExpectInitializeResult { id: first }
                if first == id =>
            {
                self.core.take_answer(id);
                self.fail(CloseReason::Unauthorized(why));
            }
            _ => {
                if let Some(method) = self.core.take_answer(id) {
                    self.core.event(Event::Failed {
                        id: id.clone(),
                        method,
                        error: RequestError::Transport(why),
                    });
                }
            }
        }
    }

    /// Closes the session: every request we sent fails with [`RequestError::Closed`].
    pub fn close(&mut self) {
        if !self.is_closed() {
            self.fail(CloseReason::Local);
        }
    }

    /// The transport ended (the server process exited, the connection closed): closes the
    /// session at once, every request we sent failing with
    /// [`RequestError::Closed`]`(`[`CloseReason::Transport`]`(why))`.
    pub fn transport_closed(&mut self, why: impl Into<String>) {
        if !self.is_closed() {
            self.fail(CloseReason::Transport(why.into()));
        }
    }
}

impl Role for ClientSession {
    fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    fn closed(&self) -> bool {
        self.is_closed()
    }

    fn batch_version(&self) -> Option<ProtocolVersion> {
        self.version()
    }

    fn answers_unreadable(&self) -> bool {
        false
    }

    fn dispatch(&mut self, now: Instant, message: Message, batch: Option<u64>) {
        ClientSession::dispatch(self, now, message, batch);
    }
}

/// Adds to the client capabilities of modern `meta` those the caller declared for this request
/// in `params._meta[clientCapabilities]`: members the configuration lacks are added, and the
/// members of an object both have (such as `extensions`) are merged, the configured ones kept.
fn add_request_capabilities(meta: &mut JsonObject, params: Option<&JsonObject>) {
    let Some(Value::Object(extra)) = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(meta::CLIENT_CAPABILITIES))
    else {
        return;
    };
    let Some(Value::Object(caps)) = meta.get_mut(meta::CLIENT_CAPABILITIES) else {
        return;
    };
    for (key, value) in extra {
        match (caps.get_mut(key), value) {
            (None, value) => {
                caps.insert(key.clone(), value.clone());
            }
            (Some(Value::Object(configured)), Value::Object(added)) => {
                for (k, v) in added {
                    configured.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            _ => {}
        }
    }
}
