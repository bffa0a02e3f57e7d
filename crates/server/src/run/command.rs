//! What a handler asks of the runner of its request, through its [`Context`](crate::Context).
//!
//! It sits below both the context (which sends commands) and the runner (which applies them),
//! so neither imports the other for it.

use modelctx_session::LogLevel;
use modelctx_types::{ErrorObject, JsonObject, RequestId};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::input::InputError;

/// What handlers ask of the runner. Each names its request by id and generation (the session's
/// `IncomingRequest::generation`): a cancelled request's handler runs on until it notices, and
/// what it asks after a new request reused its id is for a request that is gone, never for the
/// new one (finding 12).
#[derive(Debug)]
pub(crate) enum Command {
    /// A handler finished.
    Respond {
        id: RequestId,
        generation: u64,
        answer: Result<Value, ErrorObject>,
    },
    /// Progress on a request.
    Progress {
        id: RequestId,
        generation: u64,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// A question for the client (legacy), asked for request `id`.
    Ask {
        id: RequestId,
        generation: u64,
        method: String,
        params: JsonObject,
        reply: oneshot::Sender<Result<Value, InputError>>,
    },
    /// Close the connection of a request's stream (legacy HTTP), telling whether it was.
    CloseStream {
        id: RequestId,
        generation: u64,
        reply: oneshot::Sender<bool>,
    },
    /// A log message about a request.
    Log {
        id: RequestId,
        generation: u64,
        level: LogLevel,
        logger: Option<String>,
        data: Value,
    },
}
