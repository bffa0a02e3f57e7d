//! Serving a [`Server`] over Streamable HTTP with `modelctx-http` (feature `http`): both eras on
//! one endpoint.

use std::net::SocketAddr;
use std::sync::Arc;

use modelctx_http::headers::ParamHeader;
use modelctx_http::server::{
    ConfigError, LegacyHandler, LegacySession, McpApp, McpService, ModernReply, ModernRequest,
    RequestContext, RunningServer, ServerConfig,
};
use modelctx_session::Transmit;
use modelctx_types::{ErrorCode, ErrorObject, ErrorResponse, Incoming, Message, RequestId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::run::driver::{self, NoInput};
use crate::run::{Conn, Input, Lifetime, Origin, Output};
use crate::server::Server;

/// Messages of one legacy session waiting for its driver.
const SESSION_QUEUE: usize = 256;

impl Server {
    /// The server as a `tower::Service` for hyper or axum, serving both eras on one endpoint.
    ///
    /// The service answers on `config.path` (`/mcp` by default; `None` for any path) and
    /// applies `config`'s security defaults (loopback `Host` and `Origin` only, and with them
    /// loopback peers only; bounded bodies, body deadline, requests in flight and sessions).
    /// The peer's address comes from the request's `PeerAddr` extension or, with feature
    /// `axum`, axum's `ConnectInfo<SocketAddr>`: with the loopback lists, a request whose peer
    /// is unknown gets 403. Mounted in axum (`crates/server/examples/axum_server.rs` is a whole
    /// program):
    ///
    /// ```no_run
    /// use std::net::SocketAddr;
    ///
    /// use modelctx_http::server::ServerConfig;
    /// use modelctx_server::Server;
    ///
    /// # async fn run(server: Server) -> Result<(), Box<dyn std::error::Error>> {
    /// let mcp = server.http_service(ServerConfig::default())?;
    /// let app = axum::Router::new().route_service("/mcp", mcp);
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    /// axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// The endpoint serves the server's versions (`ServerBuilder::versions`): they replace
    /// `config.versions`.
    pub fn http_service(&self, config: ServerConfig) -> Result<McpService, ConfigError> {
        McpService::new(self.with_versions(config), Arc::new(self.clone()))
    }

    /// Serves the server on `addr` (say `127.0.0.1:8080`) with the HTTP transport's security
    /// defaults; see `modelctx_http::server::serve`.
    pub async fn serve_http(
        &self,
        addr: SocketAddr,
        config: ServerConfig,
    ) -> std::io::Result<RunningServer> {
        modelctx_http::server::serve(addr, self.with_versions(config), Arc::new(self.clone())).await
    }

    /// `config` serving the versions of the server's protocol sessions: one list for both.
    fn with_versions(&self, mut config: ServerConfig) -> ServerConfig {
        config.versions = self.shared.config.versions.clone();
        config
    }
}

impl McpApp for Server {
    fn open_session(&self, session: LegacySession) -> Arc<dyn LegacyHandler> {
        let (tx, rx) = mpsc::channel(SESSION_QUEUE);
        let conn = Conn::new(self.shared.clone());
        let changes = Some(self.shared.changes.subscribe());
        let output = session.clone();
        let ended = CancellationToken::new();
        let lifetime = Lifetime::Connection {
            ended: ended.clone(),
        };
        let origin = Origin::default();
        tokio::spawn(driver::run(conn, rx, output, origin, lifetime, changes));
        Arc::new(Session { tx, session, ended })
    }

    /// A modern request is served by a request runner on the caller's task (the HTTP
    /// connection's): its session shares the server's configuration, and a handler that
    /// finishes without waiting is answered before this returns, with no task, no input channel
    /// and no subscription to the server's changes. Only a request that waits (a handler that
    /// awaits, a `subscriptions/listen` stream) goes on on a task of its own, driven until it
    /// is answered.
    fn modern(&self, request: ModernRequest) {
        let ModernRequest {
            message,
            context,
            reply,
            ..
        } = request;
        // At most `Settings::max_modern_requests` at once (finding 25): beyond, a request is
        // refused at once, and a notification dropped.
        let Ok(place) = self.shared.modern_requests.clone().try_acquire_owned() else {
            if let Message::Request(r) = message {
                let error = crate::limits::busy(
                    format!(
                        "at most {} requests of protocol 2026-07-28 at once",
                        self.shared.settings.max_modern_requests
                    ),
                    None,
                );
                let message = ErrorResponse::new(Some(r.id), error).into();
                let related = None;
                send_all(reply, vec![Transmit::Message { message, related }], None);
            }
            return;
        };
        let cancelled = match &message {
            Message::Request(r) => Some((r.id.clone(), reply.cancelled().clone())),
            _ => None,
        };
        // A listen stream hears of every change made from its start on.
        let listens = matches!(
            &message,
            Message::Request(r) if r.method == modelctx_types::consts::SubscriptionsListen::VALUE
        );
        let changes = listens.then(|| self.shared.changes.subscribe());
        let origin = Origin {
            http: Some(context),
        };
        let mut conn = Conn::for_request(self.shared.clone());
        conn.session
            .handle_message(std::time::Instant::now(), message);
        let said = run_inline(&mut conn, &origin);
        if conn.is_idle() {
            drop(conn);
            send_all(reply, said, Some(place));
            return;
        }
        let lifetime = Lifetime::Request { cancelled };
        tokio::spawn(async move {
            let mut output = reply;
            for transmit in said {
                if !output.write(transmit).await {
                    conn.session.transport_closed("the transport is gone");
                }
            }
            driver::run(conn, NoInput, output, origin, lifetime, changes).await;
            drop(place);
        });
    }

    fn tool_param_headers(&self, tool: &str) -> Option<Vec<ParamHeader>> {
        let registry = self.shared.registry();
        registry.tools.get(tool)?.param_headers.clone()
    }
}

/// Runs what a modern request's session and handler do without waiting: routes the request,
/// polls its handler once, applies what the handler queued, and returns the messages to send
/// in order (a refusal of the protocol rules is the only one, and first).
fn run_inline(conn: &mut Conn, origin: &Origin) -> Vec<Transmit> {
    let mut said = Vec::new();
    loop {
        let mut busy = false;
        while let Some(transmit) = conn.next_transmit() {
            busy = true;
            // A server sends no batches or cancellations of its own on a modern request.
            if let Transmit::Message { .. } | Transmit::Refusal(_) = transmit {
                said.push(transmit);
            }
        }
        busy |= conn.handle_events(origin);
        while let Some(command) = conn.try_command() {
            busy = true;
            conn.apply(command);
        }
        if !busy {
            return said;
        }
    }
}

/// Sends messages on a modern request's stream: at once while it has room (the response of a
/// handler that did not wait goes out on the caller's task), else on a task of its own. The
/// request's `place` is given back once all are sent.
fn send_all(
    mut reply: ModernReply,
    transmits: Vec<Transmit>,
    place: Option<tokio::sync::OwnedSemaphorePermit>,
) {
    let mut send = Box::pin(async move {
        for transmit in transmits {
            // False: the client is gone (or, for a notification, there is no stream).
            if !reply.write(transmit).await {
                break;
            }
        }
        drop(place);
    });
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if send.as_mut().poll(&mut cx).is_pending() {
        // The stream is full: the rest waits on a task, whose first poll registers its waker
        // (the no-op one of this poll is never kept).
        tokio::spawn(send);
    }
}

/// A legacy session's output: each message on the stream of its request.
impl Output for LegacySession {
    async fn write(&mut self, transmit: Transmit) -> bool {
        match transmit {
            Transmit::Message { message, related } => self.send(message, related).await,
            Transmit::Batch(messages) => self.send_batch(messages).await,
            // A legacy session cancels with a plain message, never with `Cancel`.
            _ => {}
        }
        true
    }

    async fn close_stream(&mut self, id: &RequestId) -> bool {
        LegacySession::close_stream(self, id).await
    }

    async fn negotiated(&mut self, version: modelctx_session::ProtocolVersion) {
        self.set_version(version).await;
    }
}

/// A modern request's output: its own response stream.
impl Output for ModernReply {
    async fn write(&mut self, transmit: Transmit) -> bool {
        match transmit {
            Transmit::Message { message, .. } => self.send(message).await.is_ok(),
            Transmit::Refusal(error) => self.refuse(error).await.is_ok(),
            // A server sends no batches or cancellations of its own requests on these.
            _ => true,
        }
    }
}

/// The input of one legacy session.
struct Session {
    tx: mpsc::Sender<Input>,
    session: LegacySession,
    ended: CancellationToken,
}

impl LegacyHandler for Session {
    fn input(&self, input: Incoming, context: RequestContext) {
        let origin = Origin {
            http: Some(context),
        };
        let refused = match self.tx.try_send(Input::Incoming(input, Some(origin))) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(Input::Incoming(input, _))) => input,
            Err(_) => return, // the session's driver has ended
        };
        // Too much queued: requests get an error rather than wait without bound.
        let ids: Vec<_> = match refused {
            Incoming::Single(Message::Request(r)) => vec![r.id],
            Incoming::Batch(items) => items
                .into_iter()
                .filter_map(|m| match m {
                    Ok(Message::Request(r)) => Some(r.id),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let session = self.session.clone();
        tokio::spawn(async move {
            for id in ids {
                let error = ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!(
                        "the server is busy: {SESSION_QUEUE} messages are waiting in this session"
                    ),
                );
                let message = ErrorResponse::new(Some(id.clone()), error).into();
                session.send(message, Some(id)).await;
            }
        });
    }

    fn closed(&self) {
        self.ended.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::http::{Request, StatusCode};
    use modelctx_http::server::PeerAddr;
    use serde_json::{Value, json};

    use super::*;
    use crate::{NoArgs, Tool};

    /// A 2026-07-28 `tools/call` of `name`, from this machine.
    fn modern_call(name: &str) -> Request<String> {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}});
        let mut request = Request::post("/mcp")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", name)
            .body(body.to_string())
            .unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
        request
    }

    async fn answer(service: &McpService, request: Request<String>) -> Value {
        let response = service.handle(request).await;
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::Body::new(response.into_body());
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    /// A modern request whose handler does not wait is answered on the task that handles the
    /// HTTP request (the connection's): no driver task, no hand-off.
    #[tokio::test(flavor = "current_thread")]
    async fn a_modern_call_that_does_not_wait_runs_on_the_connections_task() {
        let ran_on = Arc::new(Mutex::new(None));
        let record = ran_on.clone();
        let here = move |_: NoArgs| {
            *record.lock().unwrap() = tokio::task::try_id();
            std::future::ready("here")
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("here", here))
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        // The HTTP connection's task.
        let (task, reply) = tokio::spawn(async move {
            let reply = answer(&service, modern_call("here")).await;
            (tokio::task::id(), reply)
        })
        .await
        .unwrap();
        assert_eq!(reply["id"], 7, "{reply}");
        assert_eq!(reply["result"]["content"][0]["text"], "here", "{reply}");
        assert_eq!(
            reply["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "s",
            "{reply}"
        );
        let ran_on = *ran_on.lock().unwrap();
        assert_eq!(ran_on, Some(task));
        assert_eq!(server.load().connections, 0);
        assert_eq!(server.load().handlers, 0);
    }

    /// A modern request whose handler waits goes on on a task of its own and is answered
    /// when the handler finishes; its progress comes first, on the same stream.
    #[tokio::test(flavor = "current_thread")]
    async fn a_modern_call_that_waits_is_answered_from_its_task() {
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let gate = Arc::new(tokio::sync::Mutex::new(Some(gate)));
        let wait = move |_: NoArgs| {
            let gate = gate.clone();
            async move {
                if let Some(gate) = gate.lock().await.take() {
                    let _ = gate.await;
                }
                "waited"
            }
        };
        let server = Server::builder("s", "1")
            .tool(Tool::new("wait", wait))
            .build();
        let service = server.http_service(ServerConfig::default()).unwrap();
        let call = tokio::spawn({
            let service = service.clone();
            async move { answer(&service, modern_call("wait")).await }
        });
        while server.load().handlers == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(server.load().connections, 1);
        open.send(()).unwrap();
        let reply = call.await.unwrap();
        assert_eq!(reply["result"]["content"][0]["text"], "waited", "{reply}");
        while server.load().connections > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(server.load().handlers, 0);
    }
}
