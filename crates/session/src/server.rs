//! The server side of a connection: both eras.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use modelctx_types::{
    ErrorCode, ErrorObject, ErrorResponse, Incoming, JsonObject, Message, Notification, Request,
    RequestId, Response,
};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use modelctx_types::consts;

use crate::caps::{self, declared};
use crate::config::{CacheHint, RequestOptions, ServerConfig};
use crate::core::{Core, InFlight, Role, TableSizes};
use crate::event::{
    CloseReason, Event, IncomingRequest, LogLevel, PeerInfo, RequestError, RequestMeta,
    SessionError, Transmit,
};
use crate::meta::{self, Classified};
use crate::version::{self, Direction, Era, ProtocolVersion};

/// The most URIs one `subscriptions/listen` filter may name.
const MAX_SUBSCRIBED_URIS: usize = 1024;

/// The key of the tasks extension in `capabilities.extensions`.
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// What the server knows of its legacy client.
#[derive(Debug, Clone)]
struct Client {
    version: ProtocolVersion,
    capabilities: JsonObject,
    info: Value,
}

/// The legacy lifecycle, named for what each state expects next.
#[derive(Debug)]
enum State {
    /// No `initialize` yet: only `ping` and modern requests are served.
    ExpectInitialize,
    /// `initialize` answered; client requests are served, our requests other than ping wait.
    ExpectInitialized(Client),
    /// Initialized.
    Operating(Client),
    /// Closed: nothing is handled.
    Closed,
}

/// A list whose changes a server announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListKind {
    /// `notifications/tools/list_changed`
    Tools,
    /// `notifications/prompts/list_changed`
    Prompts,
    /// `notifications/resources/list_changed`
    Resources,
}

impl ListKind {
    fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
            ListKind::Resources => "notifications/resources/list_changed",
        }
    }
}

/// An open `subscriptions/listen` stream: what it honours.
#[derive(Debug, Default)]
struct Subscription {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: BTreeSet<String>,
    /// The tasks whose status the stream hears of (`notifications/tasks`, the
    /// `io.modelcontextprotocol/tasks` extension).
    task_ids: BTreeSet<String>,
}

impl Subscription {
    fn wants(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => self.tools,
            ListKind::Prompts => self.prompts,
            ListKind::Resources => self.resources,
        }
    }
}

#[derive(Deserialize)]
struct InitializeParams {
    #[serde(rename = "protocolVersion")]
    protocol_version: String,
    capabilities: JsonObject,
    #[serde(rename = "clientInfo")]
    client_info: Value,
}

/// What a legacy session negotiated, for [`ServerSession::resume`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Resume {
    /// The version `initialize` negotiated (a legacy one).
    pub version: ProtocolVersion,
    /// The client's declared capabilities.
    pub capabilities: JsonObject,
    /// The client's `clientInfo`.
    pub info: Value,
    /// Whether `notifications/initialized` arrived. Default: false.
    pub initialized: bool,
    /// The level `logging/setLevel` set. Default: none.
    pub log_level: Option<LogLevel>,
    /// The ids (and progress tokens) of the requests the session sends start after this one.
    /// Default: 0 (the first is 1). Sessions resumed side by side for one client take
    /// ranges of their own, so that the client's answers can be told apart.
    pub ids_after: i64,
}

impl Resume {
    /// What `initialize` negotiated: `version`, and the client's `capabilities` and `info`;
    /// not initialized yet, no log level, ids from 1.
    pub fn new(version: ProtocolVersion, capabilities: JsonObject, info: Value) -> Resume {
        Resume {
            version,
            capabilities,
            info,
            initialized: false,
            log_level: None,
            ids_after: 0,
        }
    }
}

/// The protocol state machine of one server connection: a stdio server, one legacy HTTP session,
/// or a modern request handled on its own.
///
/// # Call order
///
/// * **Getters** ([`version`](Self::version), [`peer`](Self::peer), [`table_sizes`](Self::table_sizes), ...)
///   may be called at any time.
/// * **Inputs**: [`handle_bytes`](Self::handle_bytes), [`handle_incoming`](Self::handle_incoming) or
///   [`handle_message`](Self::handle_message) for what the peer sent, and
///   [`handle_timeout`](Self::handle_timeout) when the instant from
///   [`poll_timeout`](Self::poll_timeout) has passed (calling it early is harmless).
/// * **Commands**: [`respond`](Self::respond), [`respond_error`](Self::respond_error),
///   [`send_request`](Self::send_request), [`notify_progress`](Self::notify_progress),
///   [`log`](Self::log), [`notify_list_changed`](Self::notify_list_changed), [`cancel`](Self::cancel),
///   [`close`](Self::close), ...
/// * **Outputs**: after every input or command, drain [`poll_transmit`](Self::poll_transmit) (write
///   each message) and [`poll_event`](Self::poll_event) (act on each event) until they return `None`,
///   then arm a timer for [`poll_timeout`](Self::poll_timeout).
///
/// Nothing happens between calls: the session never reads a clock and never blocks.
#[derive(Debug)]
pub struct ServerSession {
    core: Core,
    config: Arc<ServerConfig>,
    state: State,
    log_level: Option<LogLevel>,
    subscriptions: BTreeMap<RequestId, Subscription>,
    /// Our requests waiting for `notifications/initialized`.
    queued: VecDeque<Request>,
    /// Made with [`for_request`](Self::for_request): one modern request on its own.
    for_request: bool,
}

impl ServerSession {
    /// A new session, expecting `initialize` or a modern request.
    ///
    /// Takes a [`ServerConfig`] or an `Arc` of one: sessions of one server share their
    /// configuration (capabilities, serverInfo) instead of copying it, so a session costs no
    /// deep clone of it.
    pub fn new(config: impl Into<Arc<ServerConfig>>) -> Self {
        let config = config.into();
        ServerSession {
            core: Core::new(config.limits.clone()),
            config,
            state: State::ExpectInitialize,
            log_level: None,
            subscriptions: BTreeMap::new(),
            queued: VecDeque::new(),
            for_request: false,
        }
    }

    /// A session for one modern (2026-07-28) request that came on its own, as a Streamable HTTP
    /// request does: the transport routed it by its `MCP-Protocol-Version` header or its `_meta`,
    /// and it is the session's to check.
    ///
    /// It differs from [`new`](Self::new) in two ways:
    /// * a request whose `_meta` names no version is refused with -32602 (not served as legacy
    ///   traffic before `initialize`), one that names a legacy or unknown version with -32022
    ///   (`data.supported`: the modern versions served), and `initialize` is no handshake: it is
    ///   refused with -32022 (which is how an endpoint that serves no legacy version answers it);
    /// * every request the protocol rules refuse before the layer above sees it is a
    ///   [`Transmit::Refusal`], which the transport answers with an HTTP error status.
    pub fn for_request(config: impl Into<Arc<ServerConfig>>) -> Self {
        ServerSession {
            for_request: true,
            ..ServerSession::new(config)
        }
    }

    /// A session that goes on with a legacy session negotiated before (by another
    /// `ServerSession`, maybe in another process): `initialize` is behind it, and it serves the
    /// client's requests at once. Nothing in flight is resumed: a resumed session has no
    /// requests under way in either direction.
    ///
    /// Returns `None` when `resume.version` is not a legacy (`initialize`-based) version.
    pub fn resume(config: impl Into<Arc<ServerConfig>>, resume: Resume) -> Option<Self> {
        if resume.version.era() != Era::Legacy {
            return None;
        }
        let mut session = ServerSession::new(config);
        let client = Client {
            version: resume.version,
            capabilities: resume.capabilities,
            info: resume.info,
        };
        session.state = if resume.initialized {
            State::Operating(client)
        } else {
            State::ExpectInitialized(client)
        };
        session.log_level = resume.log_level;
        session.core.start_ids_after(resume.ids_after);
        Some(session)
    }

    // -- getters --------------------------------------------------------------------------------

    /// The legacy version negotiated by `initialize`, if any.
    pub fn version(&self) -> Option<ProtocolVersion> {
        self.client().map(|c| c.version)
    }

    /// The legacy client, once `initialize` was answered.
    pub fn peer(&self) -> Option<PeerInfo> {
        self.client().map(|c| PeerInfo {
            version: c.version,
            capabilities: Some(c.capabilities.clone()),
            info: Some(c.info.clone()),
            instructions: None,
        })
    }

    /// Whether `notifications/initialized` has arrived.
    pub fn is_initialized(&self) -> bool {
        matches!(self.state, State::Operating(_))
    }

    /// Whether the session is closed.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// The level set by `logging/setLevel` (legacy), if any.
    pub fn log_level(&self) -> Option<LogLevel> {
        self.log_level
    }

    /// Sets the level a `logging/setLevel` set, when another session of the same legacy
    /// session handled it (a session resumed for a request that waits goes on with it).
    pub fn set_log_level(&mut self, level: Option<LogLevel>) {
        self.log_level = level;
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The size of every internal table.
    pub fn table_sizes(&self) -> TableSizes {
        TableSizes {
            subscriptions: self.subscriptions.len(),
            queued: self.queued.len(),
            ..self.core.sizes()
        }
    }

    fn client(&self) -> Option<&Client> {
        match &self.state {
            State::ExpectInitialized(c) | State::Operating(c) => Some(c),
            State::ExpectInitialize | State::Closed => None,
        }
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

    // -- inputs ---------------------------------------------------------------------------------

    /// Handles bytes the transport read (one JSON text). Input that is not JSON gets a -32700
    /// reply, JSON that is not a JSON-RPC message a -32600 reply; the session lives on.
    pub fn handle_bytes(&mut self, now: Instant, bytes: &[u8]) {
        self.read_bytes(now, bytes);
    }

    /// Handles one decoded input: a message, or a batch (answered as a batch on sessions at
    /// 2025-03-26, refused with one -32600 error otherwise).
    pub fn handle_incoming(&mut self, now: Instant, incoming: Incoming) {
        self.read_incoming(now, incoming);
    }

    /// Handles one message from the client.
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
            Message::Response(response) => {
                // A late answer to a cancelled request, or to none, is ignored.
                if let Some(method) = self.core.take_answer(&response.id) {
                    self.core.event(Event::Response {
                        id: response.id,
                        method,
                        result: response.result,
                    });
                }
            }
            Message::Error(error) => match error.id {
                Some(id) => {
                    if let Some(method) = self.core.take_answer(&id) {
                        self.core.event(Event::Failed {
                            id,
                            method,
                            error: RequestError::Remote(error.error),
                        });
                    }
                }
                None => self.core.event(Event::PeerError(error.error)),
            },
            _ => {}
        }
    }

    fn on_request(&mut self, request: Request, batch: Option<u64>) {
        let Request { id, method, params } = request;
        let refusal = self.for_request && batch.is_none();
        let reply_error = |core: &mut Core, error: ErrorObject| {
            if refusal {
                core.refuse(Some(id.clone()), error);
            } else {
                core.reply_error(Some(id.clone()), batch, error);
            }
        };
        // An `initialize` whose `_meta` names a modern version is a 2026-07-28 request, where
        // the method does not exist (-32601 below), not a handshake.
        let names_modern = || {
            meta::probe(params.as_deref()).is_ok_and(|probe| {
                probe
                    .protocol_version
                    .as_ref()
                    .and_then(Value::as_str)
                    .is_some_and(|v| {
                        ProtocolVersion::parse(v).is_none_or(|v| v.era() == Era::Modern)
                    })
            })
        };
        // Never in a batch: `check_batch` refused the batch before its members were read.
        if method == consts::Initialize::VALUE && !self.for_request && !names_modern() {
            return self.on_initialize(id, params.as_deref());
        }
        if method == consts::Initialize::VALUE && self.for_request && !names_modern() {
            let error = meta::initialize_on_its_own(params.as_deref(), &self.config.versions);
            return reply_error(&mut self.core, error);
        }
        let probe = match meta::probe(params.as_deref()) {
            Ok(probe) => probe,
            Err(error) => return reply_error(&mut self.core, error),
        };
        let classified = if self.for_request {
            meta::classify_modern(&probe, &self.config.versions)
                .map(|(version, meta)| Classified::Modern(version, meta))
        } else {
            meta::classify(&probe, &self.config.versions)
        };
        let classified = match classified {
            Ok(c) => c,
            Err(error) => return reply_error(&mut self.core, error),
        };
        if let Err(error) = self.core.check_incoming(&id, probe.progress_token.as_ref()) {
            return reply_error(&mut self.core, error);
        }
        let (version, request_meta) = match classified {
            Classified::Modern(version, request_meta) => (version, Some(request_meta)),
            Classified::Legacy => match &self.state {
                State::ExpectInitialize if method == "ping" => {
                    return self.core.reply_result(id, batch, &serde_json::json!({}));
                }
                State::ExpectInitialize => {
                    return reply_error(
                        &mut self.core,
                        ErrorObject::new(
                            ErrorCode::INVALID_REQUEST,
                            format!(
                                "`{method}` before initialize: send `initialize` first (or a request with \
                                 `_meta.{}` of a modern version)",
                                meta::PROTOCOL_VERSION
                            ),
                        ),
                    );
                }
                State::ExpectInitialized(c) | State::Operating(c) => (c.version, None),
                State::Closed => return,
            },
        };
        let exists = version::request_exists(version, &method, Direction::ToServer)
            || version::is_tasks_extension_request(version, &method)
            || version::is_skills_extension_request(&method);
        if !exists {
            return reply_error(
                &mut self.core,
                ErrorObject::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("method `{method}` does not exist in protocol {version}"),
                ),
            );
        }
        if let Some(path) = caps::request_gate(version, &method, Direction::ToServer)
            && !declared(&self.config.capabilities, path)
        {
            return reply_error(
                &mut self.core,
                ErrorObject::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "`{method}` is not available: this server does not declare `{}`",
                        path.join(".")
                    ),
                ),
            );
        }
        match method.as_str() {
            "ping" => return self.core.reply_result(id, batch, &serde_json::json!({})),
            "logging/setLevel" => return self.on_set_level(id, batch, params.as_deref()),
            "server/discover" => return self.core.reply_result(id, batch, &self.discover_result()),
            "subscriptions/listen" => {
                let request_meta = request_meta.expect("listen exists only in the modern era");
                return self.on_listen(id, batch, params.as_deref(), request_meta);
            }
            _ => {}
        }
        let mut entry = InFlight::new(&method, probe.progress_token.clone(), batch);
        entry.meta = request_meta.clone();
        let generation = self.core.add_incoming(id.clone(), entry);
        if let Some(batch) = batch {
            self.core.batch_expect(batch);
        }
        self.core.event(Event::Request(IncomingRequest {
            id,
            method,
            params,
            version,
            progress_token: probe.progress_token,
            meta: request_meta,
            generation,
        }));
    }

    fn on_initialize(&mut self, id: RequestId, params: Option<&RawValue>) {
        if !matches!(self.state, State::ExpectInitialize) {
            return self.core.reply_error(
                Some(id),
                None,
                ErrorObject::new(
                    ErrorCode::INVALID_REQUEST,
                    "the session is already initialized",
                ),
            );
        }
        let params: InitializeParams =
            match serde_json::from_str(params.map_or("{}", RawValue::get)) {
                Ok(p) => p,
                Err(e) => {
                    return self.core.reply_error(
                        Some(id),
                        None,
                        meta::invalid_params(format!("invalid initialize params: {e}")),
                    );
                }
            };
        let legacy: Vec<ProtocolVersion> = self
            .config
            .versions
            .iter()
            .copied()
            .filter(|v| v.era() == Era::Legacy)
            .collect();
        let version = match ProtocolVersion::parse(&params.protocol_version) {
            Some(v) if legacy.contains(&v) => v,
            _ => match legacy.iter().max() {
                Some(latest) => *latest,
                None => {
                    return self.core.reply_error(
                        Some(id),
                        None,
                        meta::unsupported_version(&params.protocol_version, &self.config.versions),
                    );
                }
            },
        };
        let mut result = serde_json::json!({
            "protocolVersion": version.as_str(),
            "capabilities": caps::for_version(&self.config.capabilities, version),
            "serverInfo": self.config.server_info,
        });
        if let Some(instructions) = &self.config.instructions {
            result["instructions"] = Value::from(instructions.as_str());
        }
        self.core.reply_result(id, None, &result);
        let client = Client {
            version,
            capabilities: params.capabilities,
            info: params.client_info,
        };
        self.core.event(Event::Ready(PeerInfo {
            version,
            capabilities: Some(client.capabilities.clone()),
            info: Some(client.info.clone()),
            instructions: None,
        }));
        self.state = State::ExpectInitialized(client);
    }

    fn on_set_level(&mut self, id: RequestId, batch: Option<u64>, params: Option<&RawValue>) {
        #[derive(Deserialize)]
        struct SetLevel {
            level: String,
        }
        let level = serde_json::from_str::<SetLevel>(params.map_or("{}", RawValue::get))
            .ok()
            .and_then(|p| LogLevel::parse(&p.level));
        match level {
            Some(level) => {
                self.log_level = Some(level);
                self.core.reply_result(id, batch, &serde_json::json!({}));
            }
            None => self.core.reply_error(
                Some(id),
                batch,
                meta::invalid_params("logging/setLevel needs `level`, one of the eight log levels"),
            ),
        }
    }

    fn discover_result(&self) -> Value {
        let versions: Vec<&str> = self.config.versions.iter().map(|v| v.as_str()).collect();
        let mut result = serde_json::json!({
            "resultType": "complete",
            "supportedVersions": versions,
            "capabilities": caps::for_version(&self.config.capabilities, ProtocolVersion::V2026_07_28),
            "ttlMs": u64::try_from(self.config.discover_ttl.as_millis()).unwrap_or(u64::MAX),
            "cacheScope": "public",
            "_meta": { meta::SERVER_INFO: self.config.server_info },
        });
        if let Some(instructions) = &self.config.instructions {
            result["instructions"] = Value::from(instructions.as_str());
        }
        result
    }

    fn on_listen(
        &mut self,
        id: RequestId,
        batch: Option<u64>,
        params: Option<&RawValue>,
        request_meta: RequestMeta,
    ) {
        #[derive(Deserialize)]
        struct Listen {
            notifications: JsonObject,
        }
        let filter = match serde_json::from_str::<Listen>(params.map_or("{}", RawValue::get)) {
            Ok(p) => p.notifications,
            Err(e) => {
                return self.core.reply_error(
                    Some(id),
                    batch,
                    meta::invalid_params(format!("invalid listen params: {e}")),
                );
            }
        };
        if self.subscriptions.len() >= self.config.limits.max_subscriptions {
            return self.core.reply_error(
                Some(id),
                batch,
                ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!(
                        "too many open subscriptions (limit {})",
                        self.config.limits.max_subscriptions
                    ),
                ),
            );
        }
        let caps = &self.config.capabilities;
        let flag = |key: &str| filter.get(key).and_then(Value::as_bool) == Some(true);
        let mut subscription = Subscription {
            tools: flag("toolsListChanged") && declared(caps, &["tools", "listChanged"]),
            prompts: flag("promptsListChanged") && declared(caps, &["prompts", "listChanged"]),
            resources: flag("resourcesListChanged")
                && declared(caps, &["resources", "listChanged"]),
            uris: BTreeSet::new(),
            task_ids: BTreeSet::new(),
        };
        let mut honoured = JsonObject::new();
        for (key, on) in [
            ("toolsListChanged", subscription.tools),
            ("promptsListChanged", subscription.prompts),
            ("resourcesListChanged", subscription.resources),
        ] {
            if on {
                honoured.insert(key.into(), Value::Bool(true));
            }
        }
        if let Some(uris) = filter.get("resourceSubscriptions")
            && declared(caps, &["resources", "subscribe"])
        {
            let Some(uris) = uris.as_array().filter(|u| u.iter().all(Value::is_string)) else {
                return self.core.reply_error(
                    Some(id),
                    batch,
                    meta::invalid_params("`resourceSubscriptions` must be an array of URI strings"),
                );
            };
            if uris.len() > MAX_SUBSCRIBED_URIS {
                return self.core.reply_error(
                    Some(id),
                    batch,
                    meta::invalid_params(format!(
                        "at most {MAX_SUBSCRIBED_URIS} URIs per subscription"
                    )),
                );
            }
            let max = self.config.limits.max_uri_len;
            if let Some(long) = uris
                .iter()
                .filter_map(Value::as_str)
                .find(|u| u.len() > max)
            {
                return self.core.reply_error(
                    Some(id),
                    batch,
                    meta::invalid_params(format!(
                        "a URI in `resourceSubscriptions` is {} bytes long; at most {max}",
                        long.len()
                    )),
                );
            }
            subscription.uris = uris
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            honoured.insert("resourceSubscriptions".into(), Value::from(uris.clone()));
        }
        // The tasks extension's filter: the client must declare the extension on this request
        // (-32021 otherwise); a server without the extension does not know the key.
        if let Some(ids) = filter.get("taskIds")
            && declared(caps, &["extensions", TASKS_EXTENSION])
        {
            if !declared(
                &request_meta.client_capabilities,
                &["extensions", TASKS_EXTENSION],
            ) {
                let mut required = JsonObject::new();
                required.insert(
                    "extensions".into(),
                    serde_json::json!({ TASKS_EXTENSION: {} }),
                );
                return self.core.reply_error(
                    Some(id),
                    batch,
                    meta::missing_capability_error(&required),
                );
            }
            let Some(ids) = ids.as_array().filter(|i| i.iter().all(Value::is_string)) else {
                return self.core.reply_error(
                    Some(id),
                    batch,
                    meta::invalid_params("`taskIds` must be an array of task id strings"),
                );
            };
            if ids.len() > MAX_SUBSCRIBED_URIS {
                return self.core.reply_error(
                    Some(id),
                    batch,
                    meta::invalid_params(format!(
                        "at most {MAX_SUBSCRIBED_URIS} task ids per subscription"
                    )),
                );
            }
            subscription.task_ids = ids
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            honoured.insert("taskIds".into(), Value::from(ids.clone()));
        }
        let mut entry = InFlight::new("subscriptions/listen", None, batch);
        entry.meta = Some(request_meta);
        entry.listen = true;
        self.core.add_incoming(id.clone(), entry);
        if let Some(batch) = batch {
            self.core.batch_expect(batch);
        }
        self.subscriptions.insert(id.clone(), subscription);
        let ack = Notification::new(
            "notifications/subscriptions/acknowledged",
            &serde_json::json!({ "notifications": honoured, "_meta": { meta::SUBSCRIPTION_ID: id } }),
        )
        .expect("an object");
        self.core.transmit(ack, Some(id));
    }

    fn on_notification(&mut self, now: Instant, notification: Notification) {
        if self.for_request {
            // A modern notification on its own must name a served version like a request; it has
            // no id to answer, so the refusal names none.
            let checked = meta::probe(notification.params.as_deref())
                .and_then(|probe| meta::classify_modern(&probe, &self.config.versions));
            if let Err(error) = checked {
                return self.core.refuse(None, error);
            }
        }
        match notification.method.as_str() {
            "notifications/initialized" => {
                // Only the first one, after `initialize`, moves the session on; a repeated or
                // early one changes nothing.
                if !matches!(self.state, State::ExpectInitialized(_)) {
                    return;
                }
                if let State::ExpectInitialized(client) =
                    std::mem::replace(&mut self.state, State::Closed)
                {
                    self.state = State::Operating(client);
                    while let Some(request) = self.queued.pop_front() {
                        self.core.send_request(request);
                    }
                }
            }
            "notifications/cancelled" => {
                if let Some((id, entry)) = self.core.peer_cancelled(notification.params.as_deref())
                    && entry.listen
                {
                    self.subscriptions.remove(&id);
                }
            }
            "notifications/progress" => self
                .core
                .handle_progress(now, notification.params.as_deref()),
            method => {
                let known = self
                    .version()
                    .is_some_and(|v| version::notification_exists(v, method, Direction::ToServer));
                if known {
                    self.core.event(Event::Notification(notification));
                }
                // Unknown notifications are ignored, as JSON-RPC asks.
            }
        }
    }

    /// Checks for expired requests and old cancellations. Safe to call at any time.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Requests still waiting for `notifications/initialized` were never sent: they expire
        // without a cancellation on the wire.
        let core = &mut self.core;
        self.queued.retain(|r| {
            let due = core.is_due(&r.id, now);
            if due {
                core.expire_unsent(&r.id, now);
            }
            !due
        });
        let expired = self.core.handle_timeout(now);
        self.core.report_timeouts(expired);
    }

    // -- commands -------------------------------------------------------------------------------

    /// Answers the peer's request `id` with `result` (a JSON object). For modern requests the
    /// 2026-07-28 result rules are applied: `resultType` is added when absent (`complete`);
    /// complete results of the six cacheable methods get `ttlMs` and `cacheScope` when absent
    /// (those of the four list methods [`ServerConfig::list_cache`], the others `ttlMs: 0` and
    /// `"private"`); an `input_required` result is allowed only on `tools/call`, `prompts/get` and
    /// `resources/read`, must carry `inputRequests` or `requestState`, and may only ask for input
    /// the request's client capabilities declare.
    ///
    /// This answers whichever request is in flight under `id`; a layer whose handlers can
    /// outlive their request's cancellation answers with [`respond_to`](Self::respond_to), so
    /// that a late answer never goes to a newer request that reused the id.
    pub fn respond(&mut self, id: &RequestId, result: Box<RawValue>) -> Result<(), SessionError> {
        self.respond_generation(id, None, result)
    }

    /// Answers the start of the peer's request `id` whose [`IncomingRequest::generation`] is
    /// `generation`, as [`respond`](Self::respond) does; `Err(NotInFlight)`, and nothing sent,
    /// when that request is no longer in flight, even if a newer request reused its id. A layer
    /// whose handlers may finish after their request was cancelled answers through this (or
    /// [`respond_error_to`](Self::respond_error_to)), so that a cancelled request's late answer
    /// never becomes the answer to the next request with the same id.
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
        if self.is_closed() {
            return Err(SessionError::Closed);
        }
        if !result.get().trim_start().starts_with('{') {
            return Err(SessionError::Invalid(
                "a result must be a JSON object".into(),
            ));
        }
        if self.subscriptions.contains_key(id) {
            return Err(SessionError::Invalid(
                "a listen stream is ended with end_subscription, not respond".into(),
            ));
        }
        let config = &self.config;
        self.core
            .finish_incoming(id, generation, |entry| {
                let result = match &entry.meta {
                    Some(request_meta) => {
                        modern_result(&entry.method, request_meta, config, result)?
                    }
                    None => result,
                };
                Ok(Response {
                    id: id.clone(),
                    result,
                }
                .into())
            })
            .map(drop)
    }

    /// Answers the peer's request `id` with an error.
    pub fn respond_error(
        &mut self,
        id: &RequestId,
        error: ErrorObject,
    ) -> Result<(), SessionError> {
        self.respond_error_generation(id, None, error)
    }

    /// Answers the start of the peer's request `id` whose [`IncomingRequest::generation`] is
    /// `generation` with an error, as [`respond_error`](Self::respond_error) does; a stale
    /// answer is refused as in [`respond_to`](Self::respond_to).
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
        if self.is_closed() {
            return Err(SessionError::Closed);
        }
        if !error.code.is_sendable() {
            return Err(SessionError::Invalid(format!(
                "error code {} is never sent",
                error.code.0
            )));
        }
        self.core.finish_incoming(id, generation, |entry| {
            if entry.meta.is_some()
                && matches!(
                    error.code,
                    ErrorCode::RESOURCE_NOT_FOUND | ErrorCode::URL_ELICITATION_REQUIRED
                )
            {
                return Err(SessionError::Invalid(format!(
                    "protocol 2026-07-28 must not emit error code {}",
                    error.code.0
                )));
            }
            Ok(ErrorResponse::new(Some(id.clone()), error).into())
        })?;
        // Only an answer that was accepted ends a listen stream: a refused one changes nothing.
        self.subscriptions.remove(id);
        Ok(())
    }

    /// Sends a request to the legacy client (`sampling/createMessage`, `elicitation/create`,
    /// `roots/list`, `ping`, ...). Only what the client declared may be sent; requests other than
    /// `ping` wait until `notifications/initialized` has arrived. Modern clients cannot be sent
    /// requests (use an `input_required` result).
    pub fn send_request(
        &mut self,
        now: Instant,
        method: &str,
        params: Option<JsonObject>,
        options: RequestOptions,
    ) -> Result<RequestId, SessionError> {
        let client = match &self.state {
            State::Closed => return Err(SessionError::Closed),
            State::ExpectInitialize => return Err(SessionError::NotReady),
            State::ExpectInitialized(c) | State::Operating(c) => c,
        };
        let version = client.version;
        if !version::request_exists(version, method, Direction::ToClient) {
            return Err(SessionError::MethodNotInVersion {
                method: method.into(),
                version,
            });
        }
        if let Err(path) = caps::request_allowed(
            version,
            method,
            Direction::ToClient,
            params.as_ref(),
            &client.capabilities,
        ) {
            return Err(SessionError::NotDeclared {
                method: method.into(),
                capability: path.join("."),
            });
        }
        let wait = matches!(self.state, State::ExpectInitialized(_)) && method != "ping";
        let request = self
            .core
            .start_request(now, method, params, None, options, Era::Legacy)?;
        let id = request.id.clone();
        if wait {
            self.queued.push_back(request);
        } else {
            self.core.send_request(request);
        }
        Ok(id)
    }

    /// Cancels a request we sent: a [`Transmit::Cancel`] goes out (of the legacy era: the
    /// transport writes its `notifications/cancelled`), its late answer is ignored.
    pub fn cancel(
        &mut self,
        now: Instant,
        id: &RequestId,
        reason: Option<&str>,
    ) -> Result<(), SessionError> {
        if let Some(pos) = self.queued.iter().position(|r| &r.id == id) {
            // Never sent: forget it without telling the client.
            self.queued.remove(pos);
            self.core.take_answer(id);
            return Ok(());
        }
        self.core
            .cancel_outgoing(now, id, reason)
            .map(drop)
            .ok_or_else(|| SessionError::NotInFlight(id.clone()))
    }

    /// Sends progress on the peer's request `id`, which must have asked for it; progress must
    /// increase, and nothing is sent once the request is answered.
    pub fn notify_progress(
        &mut self,
        id: &RequestId,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), SessionError> {
        self.core.send_progress(id, progress, total, message)
    }

    /// Sends a log message to the legacy client (`notifications/message`), when `logging` is
    /// declared and `level` reaches the level the client set. `Ok(false)`: filtered out.
    pub fn log(
        &mut self,
        level: LogLevel,
        logger: Option<&str>,
        data: Value,
    ) -> Result<bool, SessionError> {
        if self.client().is_none() {
            return Err(if self.is_closed() {
                SessionError::Closed
            } else {
                SessionError::NotReady
            });
        }
        self.check_own("notifications/message")?;
        if self.log_level.is_some_and(|min| level < min) {
            return Ok(false);
        }
        self.core
            .transmit(log_message(level, logger, data, None), None);
        Ok(true)
    }

    /// Sends a log message about the peer's request `id`, on its stream. Modern requests get log
    /// messages only when their `_meta` set a level and `level` reaches it, tagged with the
    /// request's id in `_meta` under [`RELATED_REQUEST_ID`](crate::RELATED_REQUEST_ID); legacy
    /// ones follow [`log`](Self::log). `Ok(false)`: filtered out.
    pub fn log_for(
        &mut self,
        id: &RequestId,
        level: LogLevel,
        logger: Option<&str>,
        data: Value,
    ) -> Result<bool, SessionError> {
        let entry = self
            .core
            .incoming
            .get(id)
            .ok_or_else(|| SessionError::NotInFlight(id.clone()))?;
        let tagged = entry.meta.is_some();
        let min = if tagged {
            match entry.log_level() {
                Some(min) => Some(min),
                None => return Ok(false),
            }
        } else {
            self.log_level
        };
        self.check_own("notifications/message")?;
        if min.is_some_and(|min| level < min) {
            return Ok(false);
        }
        let related = tagged.then_some(id);
        let message = log_message(level, logger, data, related);
        self.core.transmit(message, Some(id.clone()));
        Ok(true)
    }

    /// Announces that a list changed: to the legacy client (once initialized) and to every listen
    /// stream that asked for it. Needs `listChanged` declared for that list. Returns how many
    /// notifications went out.
    pub fn notify_list_changed(&mut self, kind: ListKind) -> Result<usize, SessionError> {
        let method = kind.method();
        self.check_own(method)?;
        let mut sent = 0;
        if self.is_initialized() {
            self.core
                .transmit(Notification::new(method, &()).expect("no params"), None);
            sent += 1;
        }
        let ids: Vec<RequestId> = self
            .subscriptions
            .iter()
            .filter(|(_, s)| s.wants(kind))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            self.send_tagged(method, JsonObject::new(), id);
            sent += 1;
        }
        Ok(sent)
    }

    /// Announces that a resource changed: to the legacy client (which the layer above knows to
    /// have subscribed to `uri`) when `to_legacy_client`, and to every listen stream whose filter
    /// names `uri`. Needs `resources.subscribe` declared. Returns how many notifications went out.
    pub fn notify_resource_updated(
        &mut self,
        uri: &str,
        to_legacy_client: bool,
    ) -> Result<usize, SessionError> {
        let method = "notifications/resources/updated";
        self.check_own(method)?;
        let mut sent = 0;
        if to_legacy_client && self.is_initialized() {
            let n =
                Notification::new(method, &serde_json::json!({ "uri": uri })).expect("an object");
            self.core.transmit(n, None);
            sent += 1;
        }
        let ids: Vec<RequestId> = self
            .subscriptions
            .iter()
            .filter(|(_, s)| s.uris.contains(uri))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let mut params = JsonObject::new();
            params.insert("uri".into(), Value::from(uri));
            self.send_tagged(method, params, id);
            sent += 1;
        }
        Ok(sent)
    }

    /// Sends `notifications/tasks` (the `io.modelcontextprotocol/tasks` extension) with `task`
    /// (the task's `DetailedTask`, whose `taskId` it is about) to every listen stream whose
    /// filter names the task (`taskIds`). Returns how many notifications went out. Which
    /// tasks a stream may hear of (its principal's own) is the caller's to decide.
    pub fn notify_task(&mut self, task: JsonObject) -> usize {
        let Some(task_id) = task.get("taskId").and_then(Value::as_str) else {
            return 0;
        };
        let ids: Vec<RequestId> = self
            .subscriptions
            .iter()
            .filter(|(_, s)| s.task_ids.contains(task_id))
            .map(|(id, _)| id.clone())
            .collect();
        let sent = ids.len();
        for id in ids {
            self.send_tagged("notifications/tasks", task.clone(), id);
        }
        sent
    }

    /// The ids of the tasks the open listen streams asked to hear of (`taskIds`).
    pub fn listened_task_ids(&self) -> impl Iterator<Item = &str> + Clone {
        self.subscriptions
            .values()
            .flat_map(|s| s.task_ids.iter().map(String::as_str))
    }

    /// Sends any other notification to the legacy client (for example
    /// `notifications/elicitation/complete`), checked against the version and the capabilities.
    pub fn notify(&mut self, method: &str, params: Option<JsonObject>) -> Result<(), SessionError> {
        let client = self.client().ok_or(if self.is_closed() {
            SessionError::Closed
        } else {
            SessionError::NotReady
        })?;
        let version = client.version;
        if !version::notification_exists(version, method, Direction::ToClient) {
            return Err(SessionError::MethodNotInVersion {
                method: method.into(),
                version,
            });
        }
        if method == "notifications/elicitation/complete"
            && !declared(&client.capabilities, &["elicitation", "url"])
        {
            return Err(SessionError::NotDeclared {
                method: method.into(),
                capability: "elicitation.url".into(),
            });
        }
        self.check_own(method)?;
        let n =
            Notification::new(method, &params).map_err(|e| SessionError::Invalid(e.to_string()))?;
        self.core.transmit(n, None);
        Ok(())
    }

    /// Ends the listen stream `id` gracefully with its final result.
    pub fn end_subscription(&mut self, id: &RequestId) -> Result<(), SessionError> {
        if self.subscriptions.remove(id).is_none() {
            return Err(SessionError::NotInFlight(id.clone()));
        }
        let result =
            serde_json::json!({ "resultType": "complete", "_meta": { meta::SUBSCRIPTION_ID: id } });
        self.core
            .finish_incoming(id, None, |_| {
                Ok(Response::new(id.clone(), &result)
                    .expect("an object")
                    .into())
            })
            .map(drop)
    }

    /// The transport closed the response stream of the peer's request `id` (a modern HTTP
    /// request or listen stream), or the client of the HTTP POST that carried it went away
    /// before its answer (a legacy request; the transport tells the application with
    /// `LegacyHandler::abandoned`): the request is cancelled, as if the peer had sent
    /// `notifications/cancelled` ([`Event::Cancelled`]). Returns whether it was in flight.
    pub fn stream_closed(&mut self, id: &RequestId) -> bool {
        self.subscriptions.remove(id);
        let present = self.core.remove_incoming(id).is_some();
        if present {
            self.core.event(Event::Cancelled {
                id: id.clone(),
                reason: Some("the stream closed".into()),
            });
        }
        present
    }

    /// Closes the session: every request we sent fails with [`RequestError::Closed`], every
    /// table is emptied, and [`Event::Closed`] follows.
    pub fn close(&mut self) {
        self.end(CloseReason::Local);
    }

    /// The transport ended (stdin closed, the connection dropped): closes the session like
    /// [`close`](Self::close), every request we sent failing with
    /// [`RequestError::Closed`]`(`[`CloseReason::Transport`]`(why))`.
    pub fn transport_closed(&mut self, why: impl Into<String>) {
        self.end(CloseReason::Transport(why.into()));
    }

    fn end(&mut self, reason: CloseReason) {
        if self.is_closed() {
            return;
        }
        self.core.close(&reason);
        self.queued.clear();
        self.subscriptions.clear();
        self.state = State::Closed;
        self.core.event(Event::Closed(reason));
    }

    fn check_own(&self, method: &str) -> Result<(), SessionError> {
        match caps::notification_gate(method) {
            Some(path) if !declared(&self.config.capabilities, path) => {
                Err(SessionError::NotDeclared {
                    method: method.into(),
                    capability: path.join("."),
                })
            }
            _ => Ok(()),
        }
    }

    fn send_tagged(&mut self, method: &str, mut params: JsonObject, id: RequestId) {
        let mut tag = JsonObject::new();
        tag.insert(
            meta::SUBSCRIPTION_ID.into(),
            serde_json::to_value(&id).expect("an id serializes"),
        );
        params.insert("_meta".into(), Value::Object(tag));
        let n = Notification::new(method, &params).expect("an object");
        self.core.transmit(n, Some(id));
    }
}

/// A `notifications/message`; `related` names the request it is about in `_meta`.
fn log_message(
    level: LogLevel,
    logger: Option<&str>,
    data: Value,
    related: Option<&RequestId>,
) -> Notification {
    let mut params = serde_json::json!({ "level": level.as_str(), "data": data });
    if let Some(logger) = logger {
        params["logger"] = Value::from(logger);
    }
    if let Some(id) = related {
        params["_meta"] = serde_json::json!({ meta::RELATED_REQUEST_ID: id });
    }
    Notification::new("notifications/message", &params).expect("an object")
}

/// Applies the 2026-07-28 result rules to a modern answer (see [`ServerSession::respond`]).
///
/// The result is read once, for the few members the rules look at (borrowed from its text, the
/// rest skipped), and the missing members are spliced in front of its text: no tree of the
/// result is built, and `serverInfo` is written straight from the configuration.
fn modern_result(
    method: &str,
    request_meta: &RequestMeta,
    config: &ServerConfig,
    result: Box<RawValue>,
) -> Result<Box<RawValue>, SessionError> {
    let invalid = |e: String| SessionError::Invalid(format!("invalid result: {e}"));
    let mut members = meta::ResultMembers::read(&result).map_err(|e| invalid(e.to_string()))?;
    let mut add: Vec<(&str, meta::Added<'_>)> = Vec::new();
    let result_type = match members.get("resultType").map_err(invalid)? {
        None => {
            add.push(("resultType", meta::Added::Str("complete")));
            Cow::Borrowed("complete")
        }
        Some(raw) => match serde_json::from_str::<Cow<'_, str>>(raw.get()) {
            Ok(t) => t,
            Err(_) => {
                return Err(SessionError::Invalid(
                    "`resultType` must be a string".into(),
                ));
            }
        },
    };
    match &*result_type {
        "complete" if version::is_cacheable(method) => {
            // The list methods take the configured hint; every other cacheable result without
            // its own may not be cached (`server/discover` writes its own).
            let hint = config
                .list_cache
                .filter(|_| version::is_list(method))
                .unwrap_or(CacheHint::private(0));
            if members.get("ttlMs").map_err(invalid)?.is_none() {
                add.push(("ttlMs", meta::Added::U64(hint.ttl_ms)));
            }
            if members.get("cacheScope").map_err(invalid)?.is_none() {
                add.push(("cacheScope", meta::Added::Str(hint.scope.as_str())));
            }
        }
        "input_required" => {
            if !version::allows_input_required(method) {
                return Err(SessionError::InputRequiredNotAllowed(method.into()));
            }
            let input_requests: Option<JsonObject> =
                members.parse("inputRequests").map_err(invalid)?;
            let request_state = members.get("requestState").map_err(invalid)?;
            if input_requests.is_none() && request_state.is_none() {
                return Err(SessionError::Invalid(
                    "an input_required result needs `inputRequests` or `requestState`".into(),
                ));
            }
            let mut required = JsonObject::new();
            for request in input_requests.iter().flat_map(|r| r.values()) {
                let method = request
                    .get("method")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let params = request.get("params").and_then(Value::as_object);
                let gate = match method {
                    "elicitation/create" | "sampling/createMessage" | "roots/list" => {
                        caps::request_allowed(
                            ProtocolVersion::V2025_11_25,
                            method,
                            Direction::ToClient,
                            params,
                            &request_meta.client_capabilities,
                        )
                    }
                    other => {
                        return Err(SessionError::Invalid(format!(
                            "`{other}` is not an input request"
                        )));
                    }
                };
                if let Err(path) = gate {
                    merge(&mut required, caps::path_object(path));
                }
            }
            if !required.is_empty() {
                return Err(SessionError::MissingClientCapability {
                    required: Value::Object(required),
                });
            }
        }
        _ => {}
    }
    // Every modern result names the server in `_meta` (a `serverInfo` the handler put there is
    // kept).
    let own_meta;
    match members.get("_meta").map_err(invalid)? {
        None => add.push(("_meta", meta::Added::ServerInfo(&config.server_info))),
        Some(raw) => {
            let Ok(Value::Object(mut m)) = serde_json::from_str::<Value>(raw.get()) else {
                return Err(invalid("`_meta` must be an object".into()));
            };
            if !m.contains_key(meta::SERVER_INFO) {
                // The handler's own `_meta` (rare): only that member is rewritten.
                m.insert(meta::SERVER_INFO.into(), config.server_info.clone());
                own_meta =
                    serde_json::value::to_raw_value(&m).map_err(|e| invalid(e.to_string()))?;
                members.replace("_meta", &own_meta);
            }
        }
    }
    Ok(members.write(&add))
}

fn merge(into: &mut JsonObject, from: JsonObject) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(Value::Object(a)), Value::Object(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

impl Role for ServerSession {
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
        true
    }

    fn dispatch(&mut self, now: Instant, message: Message, batch: Option<u64>) {
        ServerSession::dispatch(self, now, message, batch);
    }
}
