//! Middleware at the MCP level: requests reach their handlers through a
//! [`tower::Service`] of [`McpRequest`]s, so `tower` layers (`timeout`,
//! `limit::ConcurrencyLimit`, `limit::RateLimit`, `load_shed`, `filter`, or an application's
//! own) wrap every request of a server ([`ServerBuilder::layer`]) or the calls of one tool
//! ([`Tool::layer`]).
//!
//! ```
//! use std::time::Duration;
//!
//! use modelctx_server::middleware::{McpError, McpRequest};
//! use modelctx_server::{NoArgs, Server, Tool};
//!
//! async fn slow(_: NoArgs) -> &'static str {
//!     "done"
//! }
//!
//! let server = Server::builder("s", "1.0.0")
//!     // Every request: callers without a principal are refused, with the error chosen here.
//!     .layer(tower::filter::FilterLayer::new(|request: McpRequest| {
//!         match request.principal() {
//!             Some(_) => Ok(request),
//!             None => Err(McpError::refused("sign in first")),
//!         }
//!     }))
//!     // One tool: at most 4 calls at once (the others wait), each given 30 s.
//!     .tool(
//!         Tool::new("slow", slow)
//!             .layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(30)))
//!             .layer(tower::limit::ConcurrencyLimitLayer::new(4)),
//!     )
//!     .build();
//! # drop(server);
//! ```
//!
//! # Where the chain sits
//!
//! A request is checked by the session (its era's rules), by the scopes of the transport's
//! guard, and routed to its handler first; the chain then runs around that handler: the
//! server's layers, then (for `tools/call`) the tool's, then the handler. Every era and every
//! transport (stdio, Streamable HTTP legacy and modern, channels, in memory) goes through the
//! same chain. What the session answers by itself does not reach it: `initialize`, `ping`,
//! `logging/setLevel`, `server/discover`, `subscriptions/listen` and the requests it refuses (the
//! checks of a request's `_meta`, a method its version does not have); nor do the connection's
//! legacy `resources/subscribe` and `resources/unsubscribe`. The session (`modelctx-session`,
//! which knows no chain) answers the first ones as it reads them, and changes its state as it
//! answers some (a session initialized, a log level set), as the connection does for a
//! subscription: a layer that refused one would answer an error for a change already made. A tool run as a task goes through the chain once,
//! when the task is created: the chain's response is the created task, and the task's own
//! requests (`tasks/get`, `tasks/result`, ...) go through the server's layers as requests of
//! their own.
//!
//! With no layer set, the request goes straight to its handler, as if there were no chain: no
//! boxing, no allocation, no lock.
//!
//! # Errors of layers
//!
//! No layer can break the protocol: what a layer's error becomes on the wire is decided here.
//!
//! * [`McpError`] (anywhere in the error's `source()` chain): the JSON-RPC error it holds.
//! * `tower::timeout::error::Elapsed`: for `tools/call`, the tool's failed result
//!   (`isError: true`, "the tool timed out"), which the model reads; for other methods the
//!   internal error `-32603` "the request timed out". The handler is cancelled either way: its
//!   future is dropped, and its [`Context::cancelled`](crate::Context::cancelled) fires.
//! * `tower::load_shed::error::Overloaded`: the server's busy error (`-32000`,
//!   `data.reason: "rate_limited"`), as its own limits send.
//! * Anything else: the internal error `-32603` "the request failed in a middleware layer"
//!   (the cause is logged, not sent).
//!
//! The handler is cancelled whenever the chain answers with an error.
//!
//! # Sharing
//!
//! The chain is built once (at [`ServerBuilder::build`], and for a tool when it is
//! registered) and shared by every request: a `ConcurrencyLimit` or a `RateLimit` counts all
//! of them. Requests take their turn to ask the chain whether it is ready (in order of
//! arrival), so services that are not `Clone`, such as `RateLimit`, work as they are.
//!
//! [`ServerBuilder::layer`]: crate::ServerBuilder::layer
//! [`ServerBuilder::build`]: crate::ServerBuilder::build
//! [`Tool::layer`]: crate::Tool::layer

use std::borrow::Cow;
use std::cell::OnceCell;
use std::fmt;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use modelctx_types::consts::{PromptsGet, ResourcesRead, ToolsCall};
use modelctx_types::{Era, ErrorCode, ErrorObject, JsonObject, ProtocolVersion, RequestId};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tower::util::BoxService;
pub use tower_layer::Layer;
pub use tower_service::Service;

use crate::handler::BoxFuture;

/// The error type of the chain: any error a layer returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a handler answers: the result as JSON text, or the JSON-RPC error.
type Answer = Result<Box<RawValue>, ErrorObject>;

/// The transport a request came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// Streamable HTTP (either era), or the 2024-11-05 HTTP+SSE transport.
    Http,
    /// A stream of messages: stdio, a line-framed byte stream, channels, an in-memory pair.
    Stream,
}

/// One MCP request on its way to its handler, as the layers see it.
///
/// The request was routed already: its handler is chosen, and changing what a layer sees here
/// does not change what the handler gets. A layer passes the request on, or answers it itself
/// (with an [`McpResponse`] or an error).
pub struct McpRequest {
    id: RequestId,
    /// The method: the name of a method the server knows is not copied.
    method: Cow<'static, str>,
    /// What the request names, read from the params when first asked ([`McpRequest::target`]).
    target: OnceCell<Option<String>>,
    principal: Option<String>,
    /// `params._meta`, read from the params when first asked ([`McpRequest::meta`]).
    meta: OnceCell<Option<JsonObject>>,
    version: ProtocolVersion,
    transport: Transport,
    params: Option<Box<RawValue>>,
    /// The handler's work, taken by the end of the chain.
    work: Option<Work>,
    /// The tool's own chain, which the end of the server's chain goes through.
    tool: Option<Chain>,
}

impl fmt::Debug for McpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpRequest")
            .field("id", &self.id)
            .field("method", &self.method)
            .field("target", &self.target())
            .field("principal", &self.principal)
            .field("version", &self.version)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

/// `params.name` or `params.uri` of a request, when it is text; anything else is ignored.
#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    name: Option<Value>,
    #[serde(default)]
    uri: Option<Value>,
}

/// `params._meta` of a request, whatever it is; anything else is ignored.
#[derive(Deserialize)]
struct Meta {
    #[serde(default, rename = "_meta")]
    meta: Option<Value>,
}

impl McpRequest {
    /// The request `id` of `method` with `params`, routed to `work`. Nothing of the params is
    /// read here: the target and `_meta` are read when a layer first asks for them, so a chain
    /// whose layers do not look at them does not pay for it.
    pub(crate) fn new(
        id: RequestId,
        method: &str,
        params: Option<Box<RawValue>>,
        version: ProtocolVersion,
        principal: Option<String>,
        transport: Transport,
    ) -> McpRequest {
        McpRequest {
            id,
            method: match crate::wire::known_method(method) {
                Some(known) => Cow::Borrowed(known),
                None => Cow::Owned(method.to_owned()),
            },
            target: OnceCell::new(),
            principal,
            meta: OnceCell::new(),
            version,
            transport,
            params,
            work: None,
            tool: None,
        }
    }

    /// The JSON-RPC id.
    pub fn id(&self) -> &RequestId {
        &self.id
    }

    /// The method (`tools/call`, `resources/read`, ...).
    pub fn method(&self) -> &str {
        &self.method
    }

    /// What the request names: the tool of `tools/call`, the prompt of `prompts/get`, the URI
    /// of `resources/read`; `None` for other methods.
    pub fn target(&self) -> Option<&str> {
        self.target
            .get_or_init(|| {
                let key = match &*self.method {
                    ToolsCall::VALUE | PromptsGet::VALUE => true,
                    ResourcesRead::VALUE => false,
                    _ => return None,
                };
                let named = serde_json::from_str::<Named>(self.params.as_deref()?.get()).ok()?;
                match if key { named.name } else { named.uri } {
                    Some(Value::String(target)) => Some(target),
                    _ => None,
                }
            })
            .as_deref()
    }

    /// The authenticated principal (HTTP with a guard), if any.
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// The request's `params._meta`, when it is an object (both eras: a trace context, a
    /// progress token, the 2026-07-28 version and client fields).
    pub fn meta(&self) -> Option<&JsonObject> {
        self.meta
            .get_or_init(|| {
                let meta = serde_json::from_str::<Meta>(self.params.as_deref()?.get()).ok()?;
                match meta.meta {
                    Some(Value::Object(meta)) => Some(meta),
                    _ => None,
                }
            })
            .as_ref()
    }

    /// The protocol version the request is answered in.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.version
    }

    /// The era of that version.
    pub fn era(&self) -> Era {
        self.version.era()
    }

    /// The transport the request came on.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The params as they came, unparsed.
    pub fn params(&self) -> Option<&RawValue> {
        self.params.as_deref()
    }
}

/// The answer to an [`McpRequest`]: the result as JSON text, or a JSON-RPC error.
#[derive(Debug)]
pub struct McpResponse {
    answer: Answer,
}

impl McpResponse {
    /// A result: `result` is written as it is.
    pub fn result(result: Box<RawValue>) -> McpResponse {
        McpResponse { answer: Ok(result) }
    }

    /// A JSON-RPC error.
    pub fn error(error: ErrorObject) -> McpResponse {
        McpResponse { answer: Err(error) }
    }

    /// The result, unless the answer is an error.
    pub fn result_json(&self) -> Option<&RawValue> {
        self.answer.as_deref().ok()
    }

    /// The JSON-RPC error, if the answer is one.
    pub fn error_object(&self) -> Option<&ErrorObject> {
        self.answer.as_ref().err()
    }

    /// Whether the answer is a tool's failed result (`isError: true`; read from the result's
    /// text each time it is asked).
    pub fn is_tool_error(&self) -> bool {
        #[derive(Deserialize)]
        struct Flag {
            #[serde(default, rename = "isError")]
            is_error: bool,
        }
        self.result_json()
            .and_then(|r| serde_json::from_str::<Flag>(r.get()).ok())
            .is_some_and(|f| f.is_error)
    }

    /// The answer.
    pub fn into_answer(self) -> Result<Box<RawValue>, ErrorObject> {
        self.answer
    }
}

/// An error a layer returns to answer a request with a JSON-RPC error of its choosing.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", error.message)]
pub struct McpError {
    error: ErrorObject,
}

impl McpError {
    /// The error answered with `error`.
    pub fn new(error: ErrorObject) -> McpError {
        McpError { error }
    }

    /// The server's refusal (`-32000`, `data.reason: "refused"`) with `message`.
    pub fn refused(message: impl Into<String>) -> McpError {
        let message = message.into();
        let error = ErrorObject::new(crate::limits::REFUSED, message.clone())
            .with_data(&serde_json::json!({"reason": "refused"}))
            .unwrap_or_else(|_| ErrorObject::new(crate::limits::REFUSED, message));
        McpError { error }
    }

    /// The JSON-RPC error.
    pub fn error(&self) -> &ErrorObject {
        &self.error
    }
}

impl From<ErrorObject> for McpError {
    fn from(error: ErrorObject) -> McpError {
        McpError { error }
    }
}

/// The handler's work, run by the end of the chain.
enum Work {
    /// Routing answered already.
    Now(Answer),
    /// The handler, not yet started.
    Run(BoxFuture<Answer>),
}

/// A service of the chain, type-erased (its error made a [`BoxError`]).
type Erased = BoxService<McpRequest, McpResponse, BoxError>;

/// The handlers as a service: what the first layer wraps, and the layers added before a layer
/// as it sees them. It runs the handler a request was routed to (through the tool's own
/// layers first, for a server's chain).
pub struct Handlers {
    inner: Option<Erased>,
}

impl fmt::Debug for Handlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handlers")
            .field("layered", &self.inner.is_some())
            .finish()
    }
}

impl Service<McpRequest> for Handlers {
    type Response = McpResponse;
    type Error = BoxError;
    type Future = HandlersFuture;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), BoxError>> {
        match &mut self.inner {
            Some(inner) => inner.poll_ready(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, request: McpRequest) -> Self::Future {
        match &mut self.inner {
            Some(inner) => HandlersFuture(Step::Boxed(inner.call(request))),
            None => end(request),
        }
    }
}

/// The future of a [`Handlers`] call: the layers added before, or the handler itself (which
/// is polled in place, not boxed once more).
#[must_use = "futures do nothing unless polled"]
pub struct HandlersFuture(Step);

impl fmt::Debug for HandlersFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HandlersFuture")
    }
}

enum Step {
    /// The layers added before, or the tool's chain.
    Boxed(BoxFuture<Result<McpResponse, BoxError>>),
    /// The handler.
    Run(BoxFuture<Answer>),
    /// The answer routing gave, or why there is none; taken when polled.
    Ready(Option<Result<McpResponse, BoxError>>),
}

impl Future for HandlersFuture {
    type Output = Result<McpResponse, BoxError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        // Every step is `Unpin` (boxed, or a value): the future moves freely.
        match &mut self.0 {
            Step::Boxed(future) => future.as_mut().poll(cx),
            Step::Run(handler) => handler
                .as_mut()
                .poll(cx)
                .map(|answer| Ok(McpResponse { answer })),
            Step::Ready(ready) => Poll::Ready(ready.take().unwrap_or_else(|| {
                Err(McpError::new(crate::wire::internal("polled after its answer")).into())
            })),
        }
    }
}

/// The end of a chain: the tool's chain when there is one still to go through, else the
/// handler.
fn end(mut request: McpRequest) -> HandlersFuture {
    if let Some(tool) = request.tool.take() {
        return HandlersFuture(Step::Boxed(Box::pin(
            async move { tool.call(request).await },
        )));
    }
    HandlersFuture(match request.work.take() {
        Some(Work::Now(answer)) => Step::Ready(Some(Ok(McpResponse { answer }))),
        Some(Work::Run(handler)) => Step::Run(handler),
        // A request is given its work once, and the end takes it once.
        None => Step::Ready(Some(Err(McpError::new(crate::wire::internal(
            "the request has no handler",
        ))
        .into()))),
    })
}

/// The layers added to a builder, applied when the chain is built.
#[derive(Clone, Default)]
pub(crate) struct Stack(Vec<Arc<dyn Fn(Handlers) -> Handlers + Send + Sync>>);

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
        L: Layer<Handlers> + Send + Sync + 'static,
        L::Service: Service<McpRequest, Response = McpResponse> + Send + 'static,
        <L::Service as Service<McpRequest>>::Error: Into<BoxError>,
        <L::Service as Service<McpRequest>>::Future: Send + 'static,
    {
        self.0.push(Arc::new(move |inner| Handlers {
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
        let handlers = self
            .0
            .iter()
            .fold(Handlers { inner: None }, |inner, layer| layer(inner));
        Some(Chain(Arc::new(tokio::sync::Mutex::new(handlers))))
    }
}

/// A built chain, shared by every request it serves.
#[derive(Clone)]
pub(crate) struct Chain(Arc<tokio::sync::Mutex<Handlers>>);

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Chain")
    }
}

impl Chain {
    /// `request` through the chain: its turn to find the chain ready (in order of arrival, so
    /// that one waker is enough for any service), then the call, outside the turn.
    async fn call(&self, request: McpRequest) -> Result<McpResponse, BoxError> {
        let response = {
            // No request waiting (the usual case): the turn is taken at once, without queueing
            // (a request that waits for its turn makes `try_lock` fail for those after it).
            let mut service = match self.0.try_lock() {
                Ok(service) => service,
                Err(_) => self.0.lock().await,
            };
            std::future::poll_fn(|cx| Service::poll_ready(&mut *service, cx)).await?;
            Service::call(&mut *service, request)
        };
        response.await
    }
}

/// The chains one request goes through: the server's and its tool's.
pub(crate) struct Layers {
    server: Option<Chain>,
    tool: Option<Chain>,
}

impl Layers {
    /// The chains of a request, or `None` when it has none (and goes straight to its handler).
    pub(crate) fn of(server: &Option<Chain>, tool: Option<Chain>) -> Option<Layers> {
        if server.is_none() && tool.is_none() {
            return None;
        }
        Some(Layers {
            server: server.clone(),
            tool,
        })
    }

    /// An answer routing gave already, through the chains.
    pub(crate) fn now(
        self,
        request: McpRequest,
        answer: Answer,
    ) -> impl Future<Output = Answer> + Send + 'static {
        self.serve(request, Work::Now(answer), None)
    }

    /// A handler through the chains; `cancelled` fires when the chain answers with an error.
    pub(crate) fn run(
        self,
        request: McpRequest,
        handler: BoxFuture<Answer>,
        cancelled: CancellationToken,
    ) -> impl Future<Output = Answer> + Send + 'static {
        self.serve(request, Work::Run(handler), Some(cancelled))
    }

    /// The chains' answer, as a future the caller boxes once with what it wraps around it.
    fn serve(
        self,
        mut request: McpRequest,
        work: Work,
        cancelled: Option<CancellationToken>,
    ) -> impl Future<Output = Answer> + Send + 'static {
        request.work = Some(work);
        async move {
            let tool_call = request.method == ToolsCall::VALUE;
            let version = request.version;
            let outcome = match (self.server, self.tool) {
                (Some(server), tool) => {
                    request.tool = tool;
                    server.call(request).await
                }
                (None, Some(tool)) => tool.call(request).await,
                (None, None) => end(request).await,
            };
            match outcome {
                Ok(response) => response.answer,
                Err(error) => {
                    if let Some(cancelled) = cancelled {
                        cancelled.cancel();
                    }
                    answer_of(&*error, tool_call, version)
                }
            }
        }
    }
}

/// What a layer's `error` becomes on the wire (see the module's docs).
fn answer_of(
    error: &(dyn std::error::Error + 'static),
    tool_call: bool,
    version: ProtocolVersion,
) -> Answer {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(chosen) = e.downcast_ref::<McpError>() {
            return Err(chosen.error.clone());
        }
        if e.is::<tower::timeout::error::Elapsed>() {
            return if tool_call {
                crate::wire::write::tool_output(
                    &crate::ToolOutput::error("the tool timed out"),
                    version,
                )
            } else {
                Err(ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    "the request timed out",
                ))
            };
        }
        if e.is::<tower::load_shed::error::Overloaded>() {
            return Err(crate::limits::busy(
                "the server is overloaded (a middleware layer shed the request)".to_owned(),
                None,
            ));
        }
        cause = e.source();
    }
    tracing::warn!(error = %error, "a middleware layer failed a request");
    Err(ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        "the request failed in a middleware layer",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, params: &str) -> McpRequest {
        McpRequest::new(
            RequestId::from(1),
            method,
            Some(RawValue::from_string(params.to_owned()).unwrap()),
            ProtocolVersion::V2025_11_25,
            Some("alice".to_owned()),
            Transport::Stream,
        )
    }

    #[test]
    fn a_request_shows_its_target_meta_and_principal() {
        let call = request(
            ToolsCall::VALUE,
            r#"{"name":"t","arguments":{},"_meta":{"traceparent":"00-a"}}"#,
        );
        assert_eq!(call.target(), Some("t"));
        assert_eq!(call.principal(), Some("alice"));
        assert_eq!(call.era(), Era::Legacy);
        assert_eq!(
            call.meta().and_then(|m| m.get("traceparent")),
            Some(&Value::from("00-a"))
        );
        let read = request(ResourcesRead::VALUE, r#"{"uri":"file:///a"}"#);
        assert_eq!(read.target(), Some("file:///a"));
        assert!(read.meta().is_none());
        // A name that is not text, or params that are not an object, name nothing.
        assert_eq!(request(PromptsGet::VALUE, r#"{"name":1}"#).target(), None);
        assert_eq!(request(ToolsCall::VALUE, "[1]").target(), None);
    }

    #[test]
    fn layer_errors_become_protocol_answers() {
        let v = ProtocolVersion::V2025_11_25;
        let chosen = McpError::refused("no");
        let boxed: BoxError = Box::new(chosen);
        let answer = answer_of(&*boxed, true, v).unwrap_err();
        assert_eq!(answer.code, crate::limits::REFUSED);
        assert_eq!(answer.message, "no");

        let elapsed: BoxError = Box::new(tower::timeout::error::Elapsed::new());
        let tool = answer_of(&*elapsed, true, v).expect("a tool's failed result");
        let tool: Value = serde_json::from_str(tool.get()).unwrap();
        assert_eq!(tool["isError"], Value::Bool(true));
        assert_eq!(tool["content"][0]["text"], "the tool timed out");
        let other = answer_of(&*elapsed, false, v).unwrap_err();
        assert_eq!(other.code, ErrorCode::INTERNAL_ERROR);

        let shed: BoxError = Box::new(tower::load_shed::error::Overloaded::new());
        let busy = answer_of(&*shed, true, v).unwrap_err();
        assert_eq!(busy.code, crate::limits::REFUSED);
        let data: Value = serde_json::from_str(busy.data.unwrap().get()).unwrap();
        assert_eq!(data["reason"], "rate_limited");

        let unknown: BoxError = "secret detail".into();
        let hidden = answer_of(&*unknown, false, v).unwrap_err();
        assert_eq!(hidden.code, ErrorCode::INTERNAL_ERROR);
        assert!(!hidden.message.contains("secret"));
    }

    #[test]
    fn no_layer_is_no_chain() {
        // What `run::runner` checks before building anything for the chain.
        assert!(Stack::default().build().is_none());
        assert!(Layers::of(&None, None).is_none());
        let mut stack = Stack::default();
        stack.push(tower::timeout::TimeoutLayer::new(
            std::time::Duration::from_secs(1),
        ));
        let chain = stack.build();
        assert!(chain.is_some());
        assert!(Layers::of(&None, chain.clone()).is_some());
        assert!(Layers::of(&chain, None).is_some());
    }

    /// The end of a chain: an answer routing gave, the handler, and a request without work
    /// (an internal error, and again if polled after its answer).
    #[tokio::test]
    async fn the_end_of_a_chain_answers_with_the_request_s_work() {
        let mut handlers = Handlers { inner: None };
        let mut given = request(ToolsCall::VALUE, "{}");
        given.work = Some(Work::Now(Err(ErrorObject::new(
            ErrorCode::INVALID_PARAMS,
            "routed",
        ))));
        let answered = handlers.call(given).await.unwrap().answer;
        assert_eq!(answered.unwrap_err().message, "routed");
        let mut run = request(ToolsCall::VALUE, "{}");
        run.work = Some(Work::Run(Box::pin(async {
            tokio::task::yield_now().await;
            crate::wire::raw(&serde_json::json!({"ran": true}))
        })));
        let ran = handlers.call(run).await.unwrap().answer;
        assert_eq!(ran.unwrap().get(), r#"{"ran":true}"#);
        let mut none = handlers.call(request(ToolsCall::VALUE, "{}"));
        let waker = std::task::Waker::noop();
        let mut cx = TaskContext::from_waker(waker);
        for _ in 0..2 {
            let Poll::Ready(Err(error)) = std::pin::Pin::new(&mut none).poll(&mut cx) else {
                panic!("no work is an error at once");
            };
            assert!(error.downcast_ref::<McpError>().is_some(), "{error}");
        }
    }

    #[tokio::test]
    async fn layers_run_outside_in_the_server_s_before_the_tool_s() {
        use std::sync::Mutex;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mark = |name: &'static str| {
            let order = order.clone();
            tower::util::MapRequestLayer::new(move |request: McpRequest| {
                order.lock().unwrap().push(name);
                request
            })
        };
        let (mut server, mut tool) = (Stack::default(), Stack::default());
        server.push(mark("server inner"));
        server.push(mark("server outer"));
        tool.push(mark("tool"));
        let layers = Layers::of(&server.build(), tool.build()).unwrap();
        let ran = order.clone();
        let handler: BoxFuture<Answer> = Box::pin(async move {
            ran.lock().unwrap().push("handler");
            crate::wire::raw(&serde_json::json!({}))
        });
        let token = CancellationToken::new();
        let answer = layers
            .run(request(ToolsCall::VALUE, "{}"), handler, token.clone())
            .await;
        assert_eq!(answer.unwrap().get(), "{}");
        assert!(!token.is_cancelled());
        assert_eq!(
            *order.lock().unwrap(),
            ["server outer", "server inner", "tool", "handler"]
        );
    }
}
