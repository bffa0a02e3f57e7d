//! What can go wrong: connecting, and each call.

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
    /// The connection ended before an answer came (or had ended before the call); holds why.
    #[error("the connection is closed: {0}")]
    Closed(String),
    /// The transport lost the request (a broken stream that could not be resumed, an HTTP status
    /// without an MCP answer); the connection lives on.
    #[error("the transport lost the request: {0}")]
    Transport(String),
    /// The call is not available: the method does not exist in the protocol version spoken, or
    /// the server did not declare the capability it needs. Nothing was sent.
    #[error("not available: {0}")]
    NotAvailable(String),
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
}

impl Error {
    pub(crate) fn from_request(error: RequestError) -> Error {
        match error {
            RequestError::Remote(e) => Error::Remote(e),
            RequestError::Timeout(d) => Error::Timeout(d),
            RequestError::CancelledByPeer(why) => Error::CancelledByServer(why),
            RequestError::Closed(reason) => Error::Closed(reason.to_string()),
            RequestError::Transport(why) => Error::Transport(why),
            other => Error::Transport(other.to_string()),
        }
    }

    pub(crate) fn from_session(error: SessionError) -> Error {
        match error {
            SessionError::Closed => Error::Closed("the session is closed".into()),
            SessionError::TooManyInFlight { limit } => Error::TooManyInFlight(limit),
            other => Error::NotAvailable(other.to_string()),
        }
    }

    pub(crate) fn invalid(method: &str, reason: impl ToString) -> Error {
        Error::InvalidResult {
            method: method.to_owned(),
            reason: reason.to_string(),
        }
    }
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
}
