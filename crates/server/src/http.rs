//! Serving a [`Server`] over Streamable HTTP with `modelctx-http` (feature `http`): both eras on
//! one endpoint.

use std::net::SocketAddr;
use std::sync::Arc;

use modelctx_http::headers::ParamHeader;
use modelctx_http::server::{
    ConfigError, LegacyHandler, LegacySession, McpApp, McpService, ModernRequest, RequestContext,
    RunningServer, ServerConfig,
};
use modelctx_types::{ErrorCode, ErrorObject, ErrorResponse, Incoming, Message};
use tokio::sync::mpsc;

use crate::driver::{self, Input, Lifetime, Origin, Output};
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
        let shared = self.shared.clone();
        let output = Output::Legacy(session.clone());
        let ended = tokio_util::sync::CancellationToken::new();
        let lifetime = Lifetime::Connection {
            ended: ended.clone(),
        };
        tokio::spawn(driver::run(shared, rx, output, Origin::default(), lifetime));
        Arc::new(Session { tx, session, ended })
    }

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
                tokio::spawn(async move {
                    let _ = reply
                        .send(ErrorResponse::new(Some(r.id), error).into())
                        .await;
                });
            }
            return;
        };
        let cancelled = match &message {
            Message::Request(r) => Some((r.id.clone(), reply.cancelled().clone())),
            _ => None,
        };
        let (tx, rx) = mpsc::channel(1);
        let origin = Origin {
            http: Some(context),
        };
        let _ = tx.try_send(Input::Incoming(Incoming::Single(message), None));
        drop(tx);
        let shared = self.shared.clone();
        let lifetime = Lifetime::Request { cancelled };
        tokio::spawn(async move {
            driver::run(shared, rx, Output::Modern(reply), origin, lifetime).await;
            drop(place);
        });
    }

    fn tool_param_headers(&self, tool: &str) -> Option<Vec<ParamHeader>> {
        let registry = self.shared.registry();
        registry.tools.get(tool)?.param_headers.clone()
    }
}

/// The input of one legacy session.
struct Session {
    tx: mpsc::Sender<Input>,
    session: LegacySession,
    ended: tokio_util::sync::CancellationToken,
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
