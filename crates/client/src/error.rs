//! What can go wrong: connecting, and each call.

use std::sync::Arc;
use std::time::Duration;

use modelctx_session::{CloseReason, RequestError, SessionError};
use modelctx_types::ErrorObject;

/// Why a call did not give a result.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server answered with a JSON-RPC error.
    #[error("the server answered with an error: {0}")]
    Remote(ErrorObject),
    /// No answer came in time; the request was cancelled on the wire.
    #[error("no response within {0:?}; the request was cancelled")]
    Timeout(Duration),
    /// The server ended the request itself.
    #[error("the server cancelled the request{}", .0.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    CancelledByServer(Option<String>),
    /// The connection ended before an answer came (or had ended before the call): why its
    /// session closed. A server process that exited, or a connection that broke, is
    /// [`CloseReason::Transport`] with the transport's description (the exit status of a
    /// process).
    #[error("the connection is closed: {0}")]
    Closed(CloseReason),
    /// The transport lost the request (a broken stream that could not be resumed, an HTTP status
    /// without an MCP answer, a server that reads nothing); the connection lives on.
    #[error("the transport lost the request: {0}")]
    Transport(TransportError),
    /// The call is not available, and nothing was sent: the method does not exist in the
    /// protocol version spoken ([`SessionError::MethodNotInVersion`]), the server did not
    /// declare the capability it needs ([`SessionError::NotDeclared`]), or the connection is
    /// being established again ([`SessionError::NotReady`]).
    #[error("not available: {0}")]
    NotAvailable(SessionError),
    /// The server does not send updates of this resource: its acknowledgement of the modern
    /// `subscriptions/listen` stream left the URI out.
    #[error("the server does not offer updates of {uri}")]
    UpdatesNotOffered {
        /// The resource.
        uri: String,
    },
    /// Too many calls are in flight.
    #[error("too many requests in flight (limit {0})")]
    TooManyInFlight(usize),
    /// The server's result does not match the schema of the method's result (or is otherwise
    /// unusable, such as a cursor that repeats).
    #[error("invalid result for `{method}`: {reason}")]
    InvalidResult {
        /// The method called.
        method: String,
        /// What is wrong.
        reason: String,
    },
    /// A tool's `structuredContent` does not match the output schema the server listed for it.
    #[error("the structured content of tool `{tool}` does not match its output schema: {reason}")]
    StructuredContent {
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// The server asked for input more times than allowed (modern multi round-trip requests).
    #[error("the server asked for input {0} times without finishing; gave up")]
    TooManyRounds(u32),
    /// The server asked for input that this client cannot give (no handler, or the handler
    /// failed), in the modern era where the only answer is to stop.
    #[error("the input the server asked for (`{method}`) could not be given: {reason}")]
    Input {
        /// The kind of input (`elicitation/create`, `sampling/createMessage`, `roots/list`).
        method: String,
        /// Why.
        reason: String,
    },
    /// The arguments could not be encoded as JSON.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// Authorization failed for the call: the HTTP transport's authorizer
    /// ([`ClientBuilder::auth`](crate::ClientBuilder::auth), or
    /// [`HttpConfig::auth`](crate::HttpConfig::auth)) could not give credentials, or could not
    /// cure the server's refusal of them. Nothing was delivered to the server; the connection
    /// lives on.
    #[cfg(feature = "http")]
    #[error("authorization failed: {0}")]
    Auth(modelctx_http::client::AuthFailure),
    /// A layer of [`ClientBuilder::layer`](crate::ClientBuilder::layer) failed the call with
    /// this error (a `tower` timeout's `Elapsed`, a load shed's `Overloaded`, an application's
    /// own; see [`middleware`](crate::middleware)). A call under way was cancelled on the wire.
    #[error("a middleware layer failed the call: {0}")]
    Middleware(Arc<dyn std::error::Error + Send + Sync>),
}

/// Why the transport lost a request.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The Streamable HTTP transport's error: an HTTP status without an MCP answer, a response
    /// stream that broke and was neither resumed nor sent again, no response in time, ...
    #[cfg(feature = "http")]
    #[error(transparent)]
    Http(modelctx_http::client::TransportError),
    /// The Streamable HTTP transport refused to send the request (too many exchanges under way,
    /// a method or name that no header can carry).
    #[cfg(feature = "http")]
    #[error(transparent)]
    Refused(Arc<modelctx_http::client::SendError>),
    /// The server reads nothing of its input: this many messages already wait to be written.
    #[error("the server is not reading: {queued} messages already wait to be written")]
    NotReading {
        /// The messages waiting (the bound of the queue).
        queued: usize,
    },
    /// The connection to the server is closed for writing.
    #[error("the connection is closed")]
    Closed,
    /// The transport failed the request with this description (not one of the causes above).
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// `error` from the session; `lost`: the transport's error when it failed the request.
    pub(crate) fn from_request(error: RequestError, lost: Option<TransportError>) -> Error {
        match error {
            RequestError::Remote(e) => Error::Remote(e),
            RequestError::Timeout(d) => Error::Timeout(d),
            RequestError::CancelledByPeer(why) => Error::CancelledByServer(why),
            RequestError::Closed(reason) => Error::Closed(reason),
            RequestError::Transport(why) => match lost {
                // The authorizer gave up: the call failed for want of authorization.
                #[cfg(feature = "http")]
                Some(TransportError::Http(modelctx_http::client::TransportError::Auth(
                    failure,
                ))) => Error::Auth(failure),
                lost => Error::Transport(lost.unwrap_or(TransportError::Other(why))),
            },
            other => Error::Transport(TransportError::Other(other.to_string())),
        }
    }

    /// `error` from the session; `closed`: why it closed, for [`SessionError::Closed`].
    pub(crate) fn from_session(error: SessionError, closed: impl FnOnce() -> CloseReason) -> Error {
        match error {
            SessionError::Closed => Error::Closed(closed()),
            SessionError::TooManyInFlight { limit } => Error::TooManyInFlight(limit),
            other => Error::NotAvailable(other),
        }
    }

    pub(crate) fn invalid(method: &str, reason: impl ToString) -> Error {
        Error::InvalidResult {
            method: method.to_owned(),
            reason: reason.to_string(),
        }
    }

    /// The OAuth client's own error behind an [`Error::Auth`], when the authorizer is
    /// modelctx-auth's [`OAuth`](crate::auth::OAuth) (the cause of the [`AuthFailure`]).
    ///
    /// [`AuthFailure`]: crate::auth::AuthFailure
    #[cfg(feature = "auth")]
    pub fn oauth_error(&self) -> Option<&modelctx_auth::client::Error> {
        match self {
            Error::Auth(failure) => oauth_cause(failure),
            _ => None,
        }
    }
}

impl ConnectError {
    /// The OAuth client's own error behind a [`ConnectError::Auth`], when the authorizer is
    /// modelctx-auth's [`OAuth`](crate::auth::OAuth).
    #[cfg(feature = "auth")]
    pub fn oauth_error(&self) -> Option<&modelctx_auth::client::Error> {
        match self {
            ConnectError::Auth(failure) => oauth_cause(failure),
            _ => None,
        }
    }
}

/// The cause of `failure`, when it is the OAuth client's error.
#[cfg(feature = "auth")]
fn oauth_cause(
    failure: &modelctx_http::client::AuthFailure,
) -> Option<&modelctx_auth::client::Error> {
    std::error::Error::source(failure)?.downcast_ref()
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The server process could not be started.
    #[error("could not start the server: {0}")]
    Spawn(#[source] std::io::Error),
    /// The URL is not usable.
    #[error("invalid URL: {0}")]
    Url(String),
    /// The handshake (or the era probe) failed; holds why the session closed.
    #[error("the handshake failed: {0}")]
    Handshake(CloseReason),
    /// The transport ended before the handshake completed.
    #[error("the connection ended during the handshake: {0}")]
    Transport(String),
    /// No MCP answer could come: the transport failed the last request of the handshake without
    /// one. Over HTTP: the connection could not be made (refused, unknown host, TLS), or the
    /// endpoint answered with an HTTP status that carries no answer (404 when nothing serves MCP
    /// at the URL: a wrong path). Holds the transport's error.
    #[error("{}", unreachable(.0))]
    Unreachable(TransportError),
    /// Connecting took longer than the connect timeout
    /// ([`ClientBuilder::connect_timeout`](crate::ClientBuilder::connect_timeout)), or
    /// `initialize` got no answer within the handshake timeout.
    #[error("no answer from the server within {} ({step})", seconds(*.waited))]
    #[non_exhaustive]
    Timeout {
        /// How long the client waited.
        waited: Duration,
        /// The request that got no answer: `server/discover` (the era probe) or `initialize`.
        step: &'static str,
    },
    /// Authorization failed while connecting: the authorizer could not get the era probe or
    /// `initialize` credentials the server accepts (the probe does not then fall back to
    /// `initialize`, which would ask again), and the connection is closed. Also: an authorizer
    /// was given for a transport other than HTTP ([`AuthFailureKind::Misconfigured`]: MCP
    /// leaves the authorization of stdio servers to their environment), or twice.
    ///
    /// [`AuthFailureKind::Misconfigured`]: modelctx_http::client::AuthFailureKind::Misconfigured
    #[cfg(feature = "http")]
    #[error("authorization failed: {0}")]
    Auth(modelctx_http::client::AuthFailure),
}

/// How [`ConnectError::Unreachable`] reads: what failed, without the layers it went through.
fn unreachable(error: &TransportError) -> String {
    #[cfg(feature = "http")]
    {
        use modelctx_http::client::TransportError as Http;
        match error {
            TransportError::Http(Http::Connection(why)) => return why.clone(),
            TransportError::Http(Http::Status { status, .. }) if status.as_u16() == 404 => {
                return format!(
                    "the endpoint answered HTTP {status}: nothing serves MCP at this URL (is the \
                     path right?)"
                );
            }
            TransportError::Http(Http::Status { status, body }) => {
                let body = if body.is_empty() {
                    String::new()
                } else {
                    format!(": {body}")
                };
                return format!("the endpoint answered HTTP {status}{body}");
            }
            _ => {}
        }
    }
    error.to_string()
}

/// `waited` in seconds, as people write them: `2 s`, `0.5 s`.
fn seconds(waited: Duration) -> String {
    format!("{} s", waited.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_errors_say_what_failed() {
        let timeout = ConnectError::Timeout {
            waited: Duration::from_secs(2),
            step: "initialize",
        };
        assert_eq!(
            timeout.to_string(),
            "no answer from the server within 2 s (initialize)"
        );
        let half = ConnectError::Timeout {
            waited: Duration::from_millis(500),
            step: "server/discover",
        };
        assert_eq!(
            half.to_string(),
            "no answer from the server within 0.5 s (server/discover)"
        );
        let closed = ConnectError::Unreachable(TransportError::Closed);
        assert_eq!(closed.to_string(), "the connection is closed");
    }

    #[cfg(feature = "http")]
    #[test]
    fn an_unreachable_endpoint_is_told_by_what_came_back() {
        use modelctx_http::client::TransportError as Http;
        let refused = ConnectError::Unreachable(TransportError::Http(Http::Connection(
            "connection refused".into(),
        )));
        assert_eq!(refused.to_string(), "connection refused");
        let status = |code: u16, body: &str| {
            ConnectError::Unreachable(TransportError::Http(Http::Status {
                status: code.try_into().unwrap(),
                body: body.into(),
            }))
            .to_string()
        };
        assert_eq!(
            status(404, ""),
            "the endpoint answered HTTP 404 Not Found: nothing serves MCP at this URL (is the \
             path right?)"
        );
        assert_eq!(
            status(401, "login first"),
            "the endpoint answered HTTP 401 Unauthorized: login first"
        );
    }

    #[cfg(feature = "http")]
    #[test]
    fn a_request_the_authorizer_gave_up_on_fails_with_its_failure() {
        use modelctx_http::client::{AuthFailure, AuthFailureKind, TransportError as Http};
        let failure = AuthFailure::new(AuthFailureKind::Rejected, "the token was refused");
        let lost = TransportError::Http(Http::Auth(failure.clone()));
        let error = Error::from_request(RequestError::Transport("text".into()), Some(lost));
        assert!(
            matches!(&error, Error::Auth(f) if *f == failure),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "authorization failed: the token was refused"
        );
        // Another HTTP error stays the transport's.
        let lost = TransportError::Http(Http::Connection("refused".into()));
        let error = Error::from_request(RequestError::Transport("text".into()), Some(lost));
        assert!(matches!(error, Error::Transport(TransportError::Http(_))));
        assert_eq!(
            ConnectError::Auth(failure).to_string(),
            "authorization failed: the token was refused"
        );
    }

    #[cfg(feature = "auth")]
    #[test]
    fn the_oauth_client_s_error_is_found_behind_a_failure() {
        use modelctx_http::client::{AuthFailure, AuthFailureKind};
        let cause = modelctx_auth::client::Error::PkceUnsupported {
            issuer: "https://as.example.com".into(),
        };
        let failure = AuthFailure::from_error(AuthFailureKind::Issuer, cause);
        let error = Error::Auth(failure.clone());
        assert!(matches!(
            error.oauth_error(),
            Some(modelctx_auth::client::Error::PkceUnsupported { issuer }) if issuer == "https://as.example.com"
        ));
        assert!(ConnectError::Auth(failure).oauth_error().is_some());
        let plain = AuthFailure::new(AuthFailureKind::Declined, "no");
        assert!(Error::Auth(plain.clone()).oauth_error().is_none());
        assert!(ConnectError::Auth(plain).oauth_error().is_none());
        assert!(Error::TooManyInFlight(1).oauth_error().is_none());
    }

    #[test]
    fn a_lost_request_keeps_the_transport_s_own_error() {
        let lost = TransportError::NotReading { queued: 7 };
        let error = Error::from_request(RequestError::Transport("text".into()), Some(lost));
        assert!(matches!(
            error,
            Error::Transport(TransportError::NotReading { queued: 7 })
        ));
        // Without it, what the session was told.
        let error = Error::from_request(RequestError::Transport("text".into()), None);
        assert!(matches!(error, Error::Transport(TransportError::Other(t)) if t == "text"));
    }

    #[test]
    fn a_closed_session_gives_its_reason_and_session_errors_stay_typed() {
        let reason = CloseReason::Transport("exit status: 3".into());
        let error = Error::from_request(RequestError::Closed(reason.clone()), None);
        assert!(
            matches!(error, Error::Closed(CloseReason::Transport(ref why)) if why == "exit status: 3")
        );
        let error = Error::from_session(SessionError::Closed, || reason.clone());
        assert!(matches!(error, Error::Closed(CloseReason::Transport(_))));
        let error = Error::from_session(SessionError::NotReady, || unreachable!());
        assert!(matches!(error, Error::NotAvailable(SessionError::NotReady)));
        let error = Error::from_session(
            SessionError::TooManyInFlight { limit: 3 },
            || unreachable!(),
        );
        assert!(matches!(error, Error::TooManyInFlight(3)));
    }
}
