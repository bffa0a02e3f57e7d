//! Running the service on its own: a TCP listener, hyper's HTTP/1 and HTTP/2, connection limits
//! and timeouts, graceful shutdown.
//!
//! Every connection runs on its own task under a watchdog: a connection that sends no request
//! within `header_timeout` of being accepted, or has no request under way for
//! `idle_connection_timeout`, is closed; at most `max_connections` are open at once (beyond, a
//! connection is accepted and closed at once). The idle-session sweep runs on a task of its own,
//! so a slow [`EventStore`](crate::event_store::EventStore) never delays `accept`.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::app::{McpApp, PeerAddr};
use super::config::{ConfigError, ServerConfig};
use super::respond::ResponseBody;
use super::service::McpService;

/// A server started by [`serve`].
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    service: McpService,
    stop: CancellationToken,
    /// How long connections get to finish at shutdown, in milliseconds.
    grace: Arc<AtomicU64>,
    connections: Arc<Connections>,
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

    /// The connections open now (at most [`ServerConfig::max_connections`]).
    pub fn open_connections(&self) -> usize {
        self.connections.open.load(Ordering::Acquire)
    }

    /// Stops accepting connections, ends every stream and session, lets in-flight requests
    /// finish (for up to `grace`; then their connections are closed), and returns when the
    /// server is down.
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

/// Serves `app` on `addr` (say `127.0.0.1:0`), with `TCP_NODELAY` on every connection and the
/// connection limits and timeouts of `config` (`max_connections`, `header_timeout`,
/// `idle_connection_timeout`, HTTP/2 keep-alive pings). Fails when the address cannot be
/// bound, or when `config` cannot serve it (a non-loopback address with the default
/// allow-lists, a zero limit).
pub async fn serve(
    addr: SocketAddr,
    config: ServerConfig,
    app: Arc<dyn McpApp>,
) -> Result<RunningServer, std::io::Error> {
    config
        .check(Some(addr))
        .map_err(|e: ConfigError| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = TcpListener::bind(addr).await?;
    serve_on(listener, config, app).await
}

/// Serves `app` on a listener already bound, as [`serve`] does: for an application that must
/// know its address before the server is built (an OAuth resource server names its own URI, port
/// included), or that is given its socket (systemd socket activation). Fails when `config`
/// cannot serve the listener's address.
pub async fn serve_on(
    listener: TcpListener,
    config: ServerConfig,
    app: Arc<dyn McpApp>,
) -> Result<RunningServer, std::io::Error> {
    let addr = listener.local_addr()?;
    config
        .check(Some(addr))
        .map_err(|e: ConfigError| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let service = McpService::new(config, app)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let stop = CancellationToken::new();
    let grace = Arc::new(AtomicU64::new(10_000));
    let connections = Arc::new(Connections::default());
    let sweep = tokio::spawn(sweep_loop(service.clone(), stop.clone()));
    let task = tokio::spawn(accept_loop(
        listener,
        service.clone(),
        stop.clone(),
        grace.clone(),
        connections.clone(),
        sweep,
    ));
    Ok(RunningServer {
        addr,
        service,
        stop,
        grace,
        connections,
        task,
    })
}

/// Ends idle legacy sessions on a timer, on its own task: however long a sweep takes (a slow
/// event store), connections are still accepted. Ends at shutdown, after the sweep under way.
async fn sweep_loop(service: McpService, stop: CancellationToken) {
    let idle = service.config().session_idle_timeout;
    let mut sweep =
        tokio::time::interval(idle.clamp(Duration::from_secs(1), Duration::from_secs(60)));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = sweep.tick() => {}
        }
        service.end_idle_sessions().await;
    }
}

/// The open connections: their number, and a signal when one closes.
#[derive(Debug, Default)]
struct Connections {
    open: AtomicUsize,
    closed: Notify,
}

/// One open connection, counted until dropped.
struct Open(Arc<Connections>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.closed.notify_one();
    }
}

async fn accept_loop(
    listener: TcpListener,
    service: McpService,
    stop: CancellationToken,
    grace: Arc<AtomicU64>,
    connections: Arc<Connections>,
    sweep: JoinHandle<()>,
) {
    let config = service.config().clone();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(config.http2_keep_alive_interval)
        .keep_alive_timeout(config.http2_keep_alive_timeout);
    let builder = Arc::new(builder);
    let limits = Limits {
        header: config.header_timeout,
        idle: config.idle_connection_timeout,
    };
    let tracker = TaskTracker::new();
    // Closes the connections still open when the grace period of a shutdown has passed.
    let force = CancellationToken::new();
    let mut failures: u32 = 0;
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    failures = 0;
                    accepted
                }
                Err(e) => {
                    // Out of file descriptors (EMFILE) or another passing error: wait for a
                    // connection to close, or a little, never spinning; warn once per streak.
                    if failures == 0 {
                        tracing::warn!("accept failed: {e}");
                    } else {
                        tracing::debug!("accept failed again: {e}");
                    }
                    let pause = accept_backoff(failures);
                    failures = failures.saturating_add(1);
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(pause) => {}
                        () = connections.closed.notified() => {}
                    }
                    continue;
                }
            },
        };
        let admitted = connections
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < config.max_connections).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            tracing::debug!(
                "{peer}: closed at once, {} connections are open",
                config.max_connections
            );
            drop(stream);
            continue;
        }
        let open = Open(connections.clone());
        let _ = stream.set_nodelay(true);
        let state = Arc::new(ConnState::default());
        let hyper_service = {
            let service = service.clone();
            let state = state.clone();
            hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(PeerAddr(peer));
                let service = service.clone();
                let active = Active::begin(&state);
                async move {
                    let response = service.handle(request).await;
                    Ok::<_, std::convert::Infallible>(response.map(|body| Tracked {
                        body,
                        _active: active,
                    }))
                }
            })
        };
        let builder = builder.clone();
        let stop = stop.clone();
        let force = force.clone();
        tracker.spawn(async move {
            let connection =
                builder.serve_connection_with_upgrades(TokioIo::new(stream), hyper_service);
            tokio::pin!(connection);
            // The watchdog: closes the connection when it sends no first request in time or
            // stays idle too long; shuts it down gracefully at `stop`, drops it at `force`.
            let mut closing = false;
            loop {
                let deadline = if closing {
                    None
                } else {
                    state.deadline(limits)
                };
                let expired = async {
                    match deadline {
                        Some((at, _)) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = connection.as_mut() => break,
                    () = force.cancelled() => break,
                    () = stop.cancelled(), if !closing => {
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    () = state.changed.notified() => {}
                    () = expired => match state.deadline(limits) {
                        // Nothing came since the deadline was taken.
                        Some((at, served)) if at <= Instant::now() => {
                            if !served {
                                tracing::debug!("{peer}: no request within the header timeout");
                                break;
                            }
                            tracing::debug!("{peer}: idle connection closed");
                            connection.as_mut().graceful_shutdown();
                            closing = true;
                        }
                        _ => {}
                    },
                }
            }
            drop(open);
        });
    }
    drop(listener);
    tracker.close();
    let grace = Duration::from_millis(grace.load(Ordering::SeqCst));
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        force.cancel();
        tracker.wait().await;
    }
    let _ = sweep.await;
}

/// How long to wait after `failures` failed accepts in a row (and this one): 50 ms, doubling,
/// at most 1 s.
fn accept_backoff(failures: u32) -> Duration {
    Duration::from_millis(50 << failures.min(5)).min(Duration::from_secs(1))
}

/// The timeouts a connection's watchdog applies.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// From accept to the first request.
    header: Duration,
    /// With no request under way.
    idle: Duration,
}

/// What a connection's watchdog knows of its requests.
#[derive(Debug)]
struct ConnState {
    inner: Mutex<Activity>,
    changed: Notify,
}

#[derive(Debug)]
struct Activity {
    /// Requests under way: being processed, or their response body being written.
    active: usize,
    /// Whether a request ever came.
    served: bool,
    /// When the connection was accepted, or its last request ended.
    since: Instant,
}

impl Default for ConnState {
    fn default() -> Self {
        ConnState {
            inner: Mutex::new(Activity {
                active: 0,
                served: false,
                since: Instant::now(),
            }),
            changed: Notify::new(),
        }
    }
}

impl ConnState {
    fn activity(&self) -> std::sync::MutexGuard<'_, Activity> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When the connection is to be closed unless a request comes: `None` while one is under
    /// way. The bool: whether it ever had a request.
    fn deadline(&self, limits: Limits) -> Option<(Instant, bool)> {
        let activity = self.activity();
        if activity.active > 0 {
            return None;
        }
        let wait = if activity.served {
            limits.idle
        } else {
            limits.header
        };
        Some((activity.since + wait, activity.served))
    }
}

/// One request under way on a connection, until its response body is written or dropped.
struct Active(Arc<ConnState>);

impl Active {
    fn begin(state: &Arc<ConnState>) -> Active {
        {
            let mut activity = state.activity();
            activity.active += 1;
            activity.served = true;
        }
        state.changed.notify_one();
        Active(state.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        {
            let mut activity = self.0.activity();
            activity.active -= 1;
            activity.since = Instant::now();
        }
        self.0.changed.notify_one();
    }
}

/// A response body that keeps its request counted as under way until it is done.
struct Tracked {
    body: ResponseBody,
    _active: Active,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(all(test, feature = "client"))]
mod tests {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    use super::*;
    use crate::server::service::tests::Unreached;

    #[test]
    fn accept_errors_back_off_up_to_a_second() {
        let waits: Vec<u64> = (0..8)
            .map(|n| accept_backoff(n).as_millis() as u64)
            .collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
    }

    /// HTTP/2 (prior knowledge) is served with the timer set (pings on), and an idle HTTP/2
    /// connection is shut down after `idle_connection_timeout`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn http2_is_served_and_idle_http2_connections_end() {
        let config = ServerConfig {
            idle_connection_timeout: Duration::from_millis(300),
            http2_keep_alive_interval: Some(Duration::from_millis(100)),
            ..ServerConfig::default()
        };
        let server = serve(([127, 0, 0, 1], 0).into(), config, Arc::new(Unreached))
            .await
            .unwrap();
        let stream = tokio::net::TcpStream::connect(server.local_addr())
            .await
            .unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        let connection = tokio::spawn(connection);
        let request = http::Request::get("http://localhost/elsewhere")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::NOT_FOUND);
        let _ = response.into_body().collect().await;
        let started = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(20), connection)
            .await
            .expect("the idle connection ends")
            .unwrap()
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(200));
        tokio::time::timeout(Duration::from_secs(20), async {
            while server.open_connections() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    }
}
