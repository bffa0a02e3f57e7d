//! What the session hands out: messages to send, events for the layer above, and errors.

use std::fmt;
use std::time::Duration;

use modelctx_types::{
    ErrorObject, ErrorResponse, JsonObject, Message, Notification, ProgressToken, RequestId,
};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::version::{Era, ProtocolVersion};

/// A message (or batch) for the transport to write.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Transmit {
    /// One message.
    Message {
        /// The message.
        message: Message,
        /// The peer's request this message belongs to: the response to it, its progress, its log
        /// messages, or the notifications of a `subscriptions/listen` stream. `None` for messages
        /// of the connection as a whole. An HTTP transport writes the message on that request's
        /// response stream.
        related: Option<RequestId>,
    },
    /// A batch reply (sessions at 2025-03-26 only): write it as one JSON array.
    Batch(Vec<Message>),
    /// The answer to a request the protocol rules refused before the layer above saw it: params
    /// or `_meta` malformed or missing (-32602), a version not served (-32022), a method that
    /// does not exist or is not offered (-32601), ... For a refused notification, the error
    /// names no id (nothing is written on stdio; over HTTP the POST gets it). Only a session made with
    /// [`ServerSession::for_request`](crate::ServerSession::for_request) emits it (other
    /// sessions write refusals as [`Transmit::Message`]). Write it as a message; a Streamable HTTP
    /// transport answers it with an HTTP error status (404 for -32601, 400 otherwise).
    Refusal(ErrorResponse),
    /// Cancel our request `request_id` (either era; the session forgets it and ignores its late
    /// answer). The transport decides how, by `era`:
    ///
    /// * [`Era::Legacy`]: write `notification` (`notifications/cancelled`) on any transport;
    ///   over Streamable HTTP the client also stops reading the request's response stream.
    /// * [`Era::Modern`]: over HTTP, close the request's response stream (nothing is written);
    ///   over stdio, write `notification`.
    Cancel {
        /// The request to cancel.
        request_id: RequestId,
        /// The `notifications/cancelled` to write where the era or transport needs one.
        notification: Notification,
        /// The era of the request cancelled.
        era: Era,
    },
}

/// A log level, ordered from the least to the most severe (RFC 5424, as MCP uses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LogLevel {
    /// `debug`
    Debug,
    /// `info`
    Info,
    /// `notice`
    Notice,
    /// `warning`
    Warning,
    /// `error`
    Error,
    /// `critical`
    Critical,
    /// `alert`
    Alert,
    /// `emergency`
    Emergency,
}

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: &'static [LogLevel] = &[
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// The level as on the wire (`"warning"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// The level a wire string names.
    pub fn parse(s: &str) -> Option<LogLevel> {
        LogLevel::ALL.iter().copied().find(|l| l.as_str() == s)
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a modern (2026-07-28) request carries in `_meta`, validated.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RequestMeta {
    /// `io.modelcontextprotocol/clientCapabilities`: the client's capabilities for this request.
    pub client_capabilities: JsonObject,
    /// `io.modelcontextprotocol/clientInfo`, as sent (self-reported; for display only).
    pub client_info: Option<Value>,
    /// `io.modelcontextprotocol/logLevel`: with no level, no log messages may be sent for the
    /// request.
    pub log_level: Option<LogLevel>,
}

/// A request from the peer that the layer above must answer with `respond` or `respond_error`
/// (unless an [`Event::Cancelled`] for it comes first).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct IncomingRequest {
    /// Its id.
    pub id: RequestId,
    /// Its method.
    pub method: String,
    /// Its params, unparsed.
    pub params: Option<Box<RawValue>>,
    /// The protocol version it is to be answered in.
    pub version: ProtocolVersion,
    /// `_meta.progressToken`, when the peer asked for progress.
    pub progress_token: Option<ProgressToken>,
    /// For a modern request, its validated `_meta`; `None` on legacy sessions (the peer's
    /// capabilities are then the session's [`PeerInfo::capabilities`]).
    pub meta: Option<RequestMeta>,
    /// Which start of a request this is: a number no other request of the session gets, even
    /// one that reuses this id after this one was cancelled. Answer with
    /// [`ServerSession::respond_to`] and [`ServerSession::respond_error_to`] to have a stale
    /// answer refused.
    ///
    /// [`ServerSession::respond_to`]: crate::ServerSession::respond_to
    /// [`ServerSession::respond_error_to`]: crate::ServerSession::respond_error_to
    pub generation: u64,
}

impl IncomingRequest {
    /// The era the request belongs to.
    pub fn era(&self) -> Era {
        if self.meta.is_some() {
            Era::Modern
        } else {
            Era::Legacy
        }
    }
}

/// What the session knows of the peer once the protocol is settled.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PeerInfo {
    /// The protocol version spoken.
    pub version: ProtocolVersion,
    /// The peer's declared capabilities; `None` when unknown (a modern server whose
    /// `server/discover` result was not seen), in which case nothing is gated on them.
    pub capabilities: Option<JsonObject>,
    /// The peer's `clientInfo` or `serverInfo`, as sent.
    pub info: Option<Value>,
    /// The server's `instructions`, when it gave some.
    pub instructions: Option<String>,
}

/// Why a request we sent did not get a result.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The peer answered with an error.
    #[error("the peer answered with an error: {0}")]
    Remote(ErrorObject),
    /// No answer came in time; the request was cancelled on the wire. A local error, never a wire
    /// error.
    #[error("no response within {0:?}; the request was cancelled")]
    Timeout(Duration),
    /// The peer ended the request itself (a modern server ending a listen stream with
    /// `notifications/cancelled`, or a legacy peer cancelling).
    #[error("the peer cancelled the request{}", .0.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    CancelledByPeer(Option<String>),
    /// The session closed before an answer came; holds why.
    #[error("the session closed before the response came: {0}")]
    Closed(CloseReason),
    /// The transport could not deliver the request or its answer (see
    /// `ClientSession::request_failed`); holds what it saw. The session lives on.
    #[error("the transport lost the request: {0}")]
    Transport(String),
}

/// Why the session closed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CloseReason {
    /// [`close`](crate::ServerSession::close) was called.
    #[error("closed locally")]
    Local,
    /// The server answered `initialize` with a version this client does not support.
    #[error("the server chose protocol version {offered:?}, which this client does not support")]
    UnsupportedVersion {
        /// The version the server answered with.
        offered: String,
    },
    /// The server answered `initialize` with an error.
    #[error("the server refused initialize: {0}")]
    InitializeFailed(ErrorObject),
    /// The server's `initialize` result is not valid.
    #[error("the server's initialize result is invalid: {0}")]
    InvalidInitializeResult(String),
    /// The probe failed and the client was pinned to the modern era, or speaks no legacy version to
    /// fall back to.
    #[error("the server is not usable in the era required: {0}")]
    ProbeFailed(String),
    /// `initialize` got no answer in time.
    #[error("the server did not answer initialize within {0:?}")]
    InitializeTimeout(Duration),
    /// The transport ended (the peer process exited, the pipe or connection closed); holds the
    /// transport's description. See `transport_closed`.
    #[error("the connection ended: {0}")]
    Transport(String),
    /// Authorization failed for the era probe or `initialize`: the transport could not get
    /// credentials the server accepts (an HTTP client's authorizer gave up); holds what it said.
    /// The probe does not fall back to `initialize`, which would only ask for authorization
    /// again. See `ClientSession::request_unauthorized`.
    #[error("authorization failed: {0}")]
    Unauthorized(String),
}

/// Something the layer above must act on.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// The protocol is settled. On a server: `initialize` was answered (requests may follow
    /// before `notifications/initialized`). On a client: the handshake or the probe succeeded.
    Ready(PeerInfo),
    /// The peer sent a request for the layer above.
    Request(IncomingRequest),
    /// The peer sent a notification the session does not consume itself (list changes, log
    /// messages, resource updates, subscription acknowledgements, roots changes, ...).
    Notification(Notification),
    /// A result for a request we sent.
    Response {
        /// Our request's id.
        id: RequestId,
        /// Our request's method, to decode the result with.
        method: String,
        /// The result, unparsed.
        result: Box<RawValue>,
    },
    /// A request we sent failed.
    Failed {
        /// Our request's id.
        id: RequestId,
        /// Our request's method.
        method: String,
        /// Why.
        error: RequestError,
    },
    /// The peer reported progress on a request we sent.
    Progress {
        /// Our request's id.
        id: RequestId,
        /// The progress so far (increases with every notification).
        progress: f64,
        /// The total, when known.
        total: Option<f64>,
        /// A message, when given.
        message: Option<String>,
    },
    /// The peer cancelled a request it sent: stop working on it and do not answer (an answer
    /// given anyway is dropped).
    Cancelled {
        /// The peer's request id.
        id: RequestId,
        /// The reason, when given.
        reason: Option<String>,
    },
    /// The peer sent an error response that names no request (it could not read something we
    /// sent).
    PeerError(ErrorObject),
    /// The peer sent something that is not a JSON-RPC message (or a batch where none is
    /// allowed). Clients only: a server answers it with this error instead. Nothing was sent; the
    /// layer above may log it, and the session goes on.
    Unreadable(ErrorObject),
    /// The session is closed: every request we sent has failed with [`RequestError::Closed`].
    Closed(CloseReason),
}

/// A command the layer above gave is not allowed now (API misuse: a local error, nothing is sent).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The protocol is not settled yet (no handshake or probe has completed).
    #[error("the session is not ready: the handshake has not completed")]
    NotReady,
    /// The session is closed.
    #[error("the session is closed")]
    Closed,
    /// The method does not exist in the protocol version spoken, in this direction.
    #[error("`{method}` does not exist in protocol {version} in this direction")]
    MethodNotInVersion {
        /// The method.
        method: String,
        /// The version spoken.
        version: ProtocolVersion,
    },
    /// The receiver (or, for notifications, we) did not declare the capability this needs.
    #[error("`{method}` needs the capability `{capability}`, which was not declared")]
    NotDeclared {
        /// The method.
        method: String,
        /// The capability, as a dotted path.
        capability: String,
    },
    /// Too many requests are in flight in this direction.
    #[error("too many requests in flight (limit {limit})")]
    TooManyInFlight {
        /// The limit.
        limit: usize,
    },
    /// The session has no such request in flight (answered already, cancelled by the peer, or
    /// never received). Harmless after an [`Event::Cancelled`].
    #[error("no request {0} is in flight")]
    NotInFlight(RequestId),
    /// Progress must increase with every notification.
    #[error("progress must increase: {last} was sent before {next}")]
    ProgressNotIncreasing {
        /// The last value sent.
        last: f64,
        /// The value refused.
        next: f64,
    },
    /// The request did not ask for progress (no `progressToken`).
    #[error("request {0} did not ask for progress")]
    NoProgressToken(RequestId),
    /// Params or a result could not be used (not a JSON object, not serializable, ...).
    #[error("invalid message content: {0}")]
    Invalid(String),
    /// An `input_required` result is allowed only on `tools/call`, `prompts/get` and
    /// `resources/read`.
    #[error("`{0}` cannot answer with input_required")]
    InputRequiredNotAllowed(String),
    /// An `input_required` result asks for input the client did not declare: answer with
    /// [`missing_capability_error`](crate::missing_capability_error) instead.
    #[error("the client did not declare capabilities the input requests need: {required}")]
    MissingClientCapability {
        /// What the input requests need, as `requiredCapabilities`.
        required: Value,
    },
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use crate::{
        ClientConfig, ClientSession, CloseReason, EraChoice, Event, RequestError, Transmit,
    };
    use modelctx_types::consts::{Initialize, ServerDiscover, ToolsList};
    use modelctx_types::{JsonObject, Message};

    fn sent(client: &mut ClientSession) -> Message {
        match client.poll_transmit() {
            Some(Transmit::Message { message, .. }) => message,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// An authorization failure of the probe closes the session: no fallback to `initialize`,
    /// which would only run the authorization again.
    #[test]
    fn an_unauthorized_probe_closes_without_falling_back() {
        let now = Instant::now();
        let mut client = ClientSession::new(ClientConfig::new("c", "1", JsonObject::new()));
        client.connect(now).unwrap();
        let probe = sent(&mut client);
        assert_eq!(probe.method(), Some(ServerDiscover::VALUE));
        client.request_unauthorized(probe.id().unwrap(), "the token was refused");
        assert!(client.poll_transmit().is_none(), "no initialize follows");
        assert!(matches!(
            client.poll_event(),
            Some(Event::Closed(CloseReason::Unauthorized(why))) if why == "the token was refused"
        ));
        assert!(client.is_closed());
        assert_eq!(client.table_sizes().outgoing, 0);
    }

    #[test]
    fn an_unauthorized_initialize_closes_and_another_request_fails_alone() {
        let now = Instant::now();
        let mut config = ClientConfig::new("c", "1", JsonObject::new());
        config.era = EraChoice::Legacy;
        let mut client = ClientSession::new(config);
        client.connect(now).unwrap();
        let init = sent(&mut client);
        assert_eq!(init.method(), Some(Initialize::VALUE));
        client.request_unauthorized(init.id().unwrap(), "declined");
        assert!(matches!(
            client.poll_event(),
            Some(Event::Closed(CloseReason::Unauthorized(why))) if why == "declined"
        ));
        assert_eq!(
            CloseReason::Unauthorized("declined".into()).to_string(),
            "authorization failed: declined"
        );

        // Once the protocol is settled, a request refused fails alone; a late report is ignored.
        let mut client = ClientSession::new(ClientConfig::new("c", "1", JsonObject::new()));
        client.connect(now).unwrap();
        let probe = sent(&mut client);
        let answer = serde_json::json!({"jsonrpc": "2.0", "id": probe.id().unwrap(), "result": {
            "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "s", "version": "1"},
        }});
        client.handle_bytes(now, answer.to_string().as_bytes());
        assert!(matches!(client.poll_event(), Some(Event::Ready(_))));
        let id = client.send_request(now, ToolsList::VALUE, None).unwrap();
        client.request_unauthorized(&id, "refused");
        assert!(matches!(
            client.poll_event(),
            Some(Event::Failed { id: failed, error: RequestError::Transport(why), .. })
                if failed == id && why == "refused"
        ));
        client.request_unauthorized(&id, "again");
        assert!(client.poll_event().is_none());
        assert!(!client.is_closed());
    }
}
