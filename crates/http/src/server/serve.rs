//! Running the service on its own: a TCP listener, hyper's HTTP/1 and HTTP/2, graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::app::{McpApp, PeerAddr};
use super::config::{ConfigError, ServerConfig};
use super::service::McpService;

/// A server started by [`serve`].
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    service: McpService,
    stop: CancellationToken,
    /// How long connections get to finish at shutdown, in milliseconds.
    grace: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl RunningServer {
    /// The address it listens on (with the port chosen when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The service, to inspect its tables.
    pub fn service(&self) -> &McpService {
        &self.service
    }

    /// Stops accepting connections, ends every stream and session, lets in-flight requests
    /// finish (for up to `grace`), and returns when the server is down.
    pub async fn shutdown(self, grace: Duration) {
        self.grace.store(
            u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
        self.stop.cancel();
        self.service.close_all().await;
        let _ = tokio::time::timeout(grace + Duration::from_secs(1), self.task).await;
    }
}

/// Serves `app` on `addr` (say `127.0.0.1:0`), with `TCP_NODELAY` on every connection.
/// Fails when the address cannot be bound, or when `config` cannot serve it (a non-loopback
/// address with the default allow-lists).
pub async fn serve(
    addr: SocketAddr,
    config: ServerConfig,
    app: Arc<dyn McpApp>,
) -> Result<RunningServer, std::io::Error> {
    config
        .check(Some(addr))
        .map_err(|e: ConfigError| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let idle = config.session_idle_timeout;
    let service = McpService::new(config, app)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    let grace = Arc::new(AtomicU64::new(10_000));
    let task = tokio::spawn(accept_loop(
        listener,
        service.clone(),
        stop.clone(),
        grace.clone(),
        idle,
    ));
    Ok(RunningServer {
        addr,
        service,
        stop,
        grace,
        task,
    })
}

async fn accept_loop(
    listener: TcpListener,
    service: McpService,
    stop: CancellationToken,
    grace: Arc<AtomicU64>,
    idle: Duration,
) {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    let mut sweep =
        tokio::time::interval(idle.clamp(Duration::from_secs(1), Duration::from_secs(60)));
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            _ = sweep.tick() => {
                service.end_idle_sessions().await;
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let hyper_service =
            hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(PeerAddr(peer));
                let service = service.clone();
                async move { Ok::<_, std::convert::Infallible>(service.handle(request).await) }
            });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), hyper_service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    drop(listener);
    let grace = Duration::from_millis(grace.load(Ordering::SeqCst));
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
}
