//! Middleware at the MCP level: the client's outgoing requests go through a
//! [`tower::Service`] of [`McpRequest`]s, so `tower` layers (`timeout`,
//! `limit::ConcurrencyLimit`, `limit::RateLimit`, `load_shed`, `filter`, or an application's
//! own) wrap every request ([`ClientBuilder::layer`]). A layer sees the method and the params
//! and may edit the params and their `_meta` (where a trace context is injected, for one).
//!
//! ```
//! use modelctx_client::Client;
//! use modelctx_client::middleware::McpRequest;
//!
//! // Every request says which host sent it, in `_meta`.
//! let builder = Client::builder("host", "1.0.0").layer(tower::util::MapRequestLayer::new(
//!     |mut request: McpRequest| {
//!         request.meta_mut().insert("example.com/host".into(), "host-a".into());
//!         request
//!     },
//! ));
//! # drop(builder);
//! ```
//!
//! # Where the chain sits
//!
//! Every request a [`Client`](crate::Client) call sends goes through the chain, once per
//! message sent: each round of a modern multi round-trip request is a request of its own.
//! The client's `_meta` members (the log level asked for) are in the params the chain sees;
//! what the session adds when it writes the message (the 2026-07-28 protocol version and
//! client fields, a progress token) is added after the chain, and a member of those names set
//! by a layer is replaced. The handshake (`initialize`, `server/discover`), the modern listen
//! stream and the answers to the server's own requests do not go through the chain. With no
//! layer set, a request goes straight to the connection: no boxing, no allocation, no lock.
//!
//! # Errors of layers
//!
//! A layer that fails a call with a [`crate::Error`] (anywhere in its `source()` chain) fails
//! it with that error, as it is; any other error is [`Error::Middleware`](crate::Error) with
//! the layer's error as its cause (a `tower::timeout::error::Elapsed`, a
//! `tower::load_shed::error::Overloaded`, ...). A call the chain stops while it is under way
//! (a timeout) is cancelled on the wire, as a call whose future is dropped is.
//!
//! The chain is built once, when the client connects, and shared by all its calls: requests
//! take their turn to ask it whether it is ready, in order of arrival, so services that are
//! not `Clone`, such as `RateLimit`, work as they are.
//!
//! [`ClientBuilder::layer`]: crate::ClientBuilder::layer

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use modelctx_session::{Era, ProtocolVersion};
use modelctx_types::JsonObject;
use serde_json::Value;
use serde_json::value::RawValue;
use tower::ServiceExt as _;
use tower::util::BoxService;
pub use tower_layer::Layer;
pub use tower_service::Service;

use crate::Error;
use crate::driver::Answer;

/// The error type of the chain: any error a layer returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What sends a request on the connection, at the end of the chain.
pub(crate) type SendFn = Box<dyn FnOnce(JsonObject) -> BoxFuture<Result<Answer, Error>> + Send>;

/// One outgoing request, as the layers see it.
pub struct McpRequest {
    method: String,
    params: JsonObject,
    version: Option<ProtocolVersion>,
    send: Option<SendFn>,
}

impl fmt::Debug for McpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpRequest")
            .field("method", &self.method)
            .field("params", &self.params)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl McpRequest {
    pub(crate) fn new(
        method: &str,
        params: JsonObject,
        version: Option<ProtocolVersion>,
        send: SendFn,
    ) -> McpRequest {
        McpRequest {
            method: method.to_owned(),
            params,
            version,
            send: Some(send),
        }
    }

    /// The method (`tools/call`, `resources/read`, ...).
    pub fn method(&self) -> &str {
        &self.method
    }

    /// What the request names: the tool of `tools/call`, the prompt of `prompts/get`, the URI
    /// of `resources/read`; `None` for other methods.
    pub fn target(&self) -> Option<&str> {
        let key = match self.method.as_str() {
            "tools/call" | "prompts/get" => "name",
            "resources/read" => "uri",
            _ => return None,
        };
        self.params.get(key).and_then(Value::as_str)
    }

    /// The params to send.
    pub fn params(&self) -> &JsonObject {
        &self.params
    }

    /// The params to send, to edit.
    pub fn params_mut(&mut self) -> &mut JsonObject {
        &mut self.params
    }

    /// The params' `_meta`, when there is one.
    pub fn meta(&self) -> Option<&JsonObject> {
        self.params.get("_meta").and_then(Value::as_object)
    }

    /// The params' `_meta`, to edit: made (an empty object) when there is none, or when it is
    /// not an object.
    pub fn meta_mut(&mut self) -> &mut JsonObject {
        let meta = self
            .params
            .entry("_meta")
            .or_insert_with(|| Value::Object(JsonObject::new()));
        if !meta.is_object() {
            *meta = Value::Object(JsonObject::new());
        }
        match meta {
            Value::Object(meta) => meta,
            _ => unreachable!("made an object above"),
        }
    }

    /// The protocol version of the connection when the request was made (`None` before the
    /// handshake ended).
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.version
    }

    /// The era of that version.
    pub fn era(&self) -> Option<Era> {
        self.version.map(ProtocolVersion::era)
    }
}

/// The server's result to an [`McpRequest`], as JSON text in the version it was written in.
pub struct McpResponse {
    answer: Answer,
}

impl fmt::Debug for McpResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpResponse")
            .field("version", &self.answer.version)
            .field("result", &self.answer.result)
            .finish()
    }
}

impl McpResponse {
    /// A result given by a layer, written in `version`.
    pub fn new(version: ProtocolVersion, result: Box<RawValue>) -> McpResponse {
        McpResponse {
            answer: Answer { version, result },
        }
    }

    /// The version the result is written in.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.answer.version
    }

    /// The result.
    pub fn result(&self) -> &RawValue {
        &self.answer.result
    }
}

/// A service of the chain, type-erased (its error made a [`BoxError`]).
type Erased = BoxService<McpRequest, McpResponse, BoxError>;

/// The connection as a service: what the first layer wraps, and the layers added before a
/// layer as it sees them. It sends the request and gives the server's result.
pub struct Connection {
    inner: Option<Erased>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("layered", &self.inner.is_some())
            .finish()
    }
}

impl Service<McpRequest> for Connection {
    type Response = McpResponse;
    type Error = BoxError;
    type Future = BoxFuture<Result<McpResponse, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match &mut self.inner {
            Some(inner) => inner.poll_ready(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, request: McpRequest) -> Self::Future {
        match &mut self.inner {
            Some(inner) => inner.call(request),
            None => Box::pin(send(request)),
        }
    }
}

/// The end of the chain: the request sent.
async fn send(mut request: McpRequest) -> Result<McpResponse, BoxError> {
    let Some(send) = request.send.take() else {
        return Err("the request was sent already".into());
    };
    match send(request.params).await {
        Ok(answer) => Ok(McpResponse { answer }),
        Err(error) => Err(Box::new(error)),
    }
}

/// The layers added to a builder, applied when the chain is built.
#[derive(Clone, Default)]
pub(crate) struct Stack(Vec<Arc<dyn Fn(Connection) -> Connection + Send + Sync>>);

impl fmt::Debug for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stack")
            .field("layers", &self.0.len())
            .finish()
    }
}

impl Stack {
    /// Adds `layer` around the layers added before it.
    pub(crate) fn push<L>(&mut self, layer: L)
    where
        L: Layer<Connection> + Send + Sync + 'static,
        L::Service: Service<McpRequest, Response = McpResponse> + Send + 'static,
        <L::Service as Service<McpRequest>>::Error: Into<BoxError>,
        <L::Service as Service<McpRequest>>::Future: Send + 'static,
    {
        self.0.push(Arc::new(move |inner| Connection {
            inner: Some(BoxService::new(
                layer.layer(inner).map_err(Into::<BoxError>::into),
            )),
        }));
    }

    /// The chain of these layers, or `None` when there are none.
    pub(crate) fn build(&self) -> Option<Chain> {
        if self.0.is_empty() {
            return None;
        }
        let connection = self
            .0
            .iter()
            .fold(Connection { inner: None }, |inner, layer| layer(inner));
        Some(Chain(Arc::new(tokio::sync::Mutex::new(connection))))
    }
}

/// A built chain, shared by every request of a client.
#[derive(Clone)]
pub(crate) struct Chain(Arc<tokio::sync::Mutex<Connection>>);

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Chain")
    }
}

impl Chain {
    /// `request` through the chain: its turn to find the chain ready (in order of arrival, so
    /// that one waker is enough for any service), then the call, outside the turn; a layer's
    /// error as the call's (see the module's docs).
    pub(crate) async fn call(&self, request: McpRequest) -> Result<Answer, Error> {
        let response = async {
            let mut service = self.0.lock().await;
            std::future::poll_fn(|cx| Service::poll_ready(&mut *service, cx)).await?;
            Ok::<_, BoxError>(Service::call(&mut *service, request))
        };
        let outcome = match response.await {
            Ok(response) => response.await,
            Err(error) => Err(error),
        };
        outcome.map(|r| r.answer).map_err(error_of)
    }
}

/// The call's error for a layer's `error`.
fn error_of(error: BoxError) -> Error {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*error);
    while let Some(e) = cause {
        if let Some(error) = e.downcast_ref::<Error>() {
            return error.clone();
        }
        cause = e.source();
    }
    Error::Middleware(Arc::from(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(params: Value) -> McpRequest {
        let Value::Object(params) = params else {
            panic!("not an object")
        };
        McpRequest::new(
            "tools/call",
            params,
            Some(ProtocolVersion::V2025_11_25),
            Box::new(|_| Box::pin(async { Err(Error::TooManyRounds(0)) })),
        )
    }

    #[test]
    fn meta_is_made_when_edited() {
        let mut plain = request(serde_json::json!({"name": "t"}));
        assert_eq!(plain.target(), Some("t"));
        assert!(plain.meta().is_none());
        plain.meta_mut().insert("k".into(), "v".into());
        assert_eq!(plain.params()["_meta"], serde_json::json!({"k": "v"}));
        let mut odd = request(serde_json::json!({"name": "t", "_meta": 3}));
        assert!(odd.meta().is_none());
        odd.meta_mut().insert("k".into(), "v".into());
        assert_eq!(odd.meta().and_then(|m| m.get("k")), Some(&Value::from("v")));
    }

    #[test]
    fn a_client_error_stays_itself_and_others_are_kept_as_the_cause() {
        let own: BoxError = Box::new(Error::TooManyRounds(3));
        assert!(matches!(error_of(own), Error::TooManyRounds(3)));
        let elapsed: BoxError = Box::new(tower::timeout::error::Elapsed::new());
        match error_of(elapsed) {
            Error::Middleware(cause) => assert!(cause.is::<tower::timeout::error::Elapsed>()),
            other => panic!("{other:?}"),
        }
    }
}
