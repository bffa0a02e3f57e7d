//! Running the service on its own: a TCP listener, hyper's HTTP/1 and HTTP/2, connection limits
//! and timeouts, graceful shutdown.
//!
//! Every connection runs on its own task under a watchdog: a connection that sends no request
//! within `header_timeout` of being accepted, or has no request under way for
//! `idle_connection_timeout`, is closed; at most `max_connections` are open at once (beyond, a
//! connection is accepted and closed at once). The idle-session sweep runs on a task of its own,
//! so a slow [`EventStore`](crate::event_store::EventStore) never delays `accept`.

use std::future::{Future, IntoFuture};
use std::io;
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
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::app::{McpApp, PeerAddr};
use super::config::{ConfigError, ServerConfig};
use super::respond::ResponseBody;
use super::service::McpService;

/// A server started by [`serve`] or [`serve_on`]: it runs on tasks of its own until it is shut
/// down.
///
/// * Await it (it is [`IntoFuture`]) to wait until it stops: when a [`ShutdownHandle`] (from
///   [`handle`](Self::handle), cloned anywhere) shuts it down, the future resolves with
///   `Ok(())`; when accepting fails in a way that cannot pass (the listening socket itself is
///   broken: `EBADF`, `EINVAL`, `ENOTSOCK`, `EOPNOTSUPP`), it shuts down as gracefully as
///   [`shutdown`](Self::shutdown) with [`ServerConfig::shutdown_grace`] and resolves with that
///   error. Other accept errors (out of file descriptors, a connection reset before it was
///   accepted) are passing: the server waits and accepts again.
/// * [`with_graceful_shutdown`](Self::with_graceful_shutdown) runs it until a future completes
///   (say [`shutdown_signal`]), then shuts it down gracefully.
/// * [`shutdown`](Self::shutdown) stops it now.
///
/// Dropping a `RunningServer` (or the future awaiting it) does not stop the server: it runs on
/// until a [`ShutdownHandle`] stops it, or the runtime ends.
///
/// ```no_run
/// # async fn run(app: std::sync::Arc<dyn modelctx_http::server::McpApp>) -> std::io::Result<()> {
/// use modelctx_http::server::{ServerConfig, serve, shutdown_signal};
///
/// let running = serve("localhost:8080", ServerConfig::default(), app).await?;
/// println!("serving http://{}/mcp", running.local_addr());
/// // Until Ctrl-C or SIGTERM; in-flight requests get `shutdown_grace` (10 s) to finish.
/// running.with_graceful_shutdown(shutdown_signal()).await
/// # }
/// ```
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    service: McpService,
    handle: ShutdownHandle,
    /// The grace period of [`with_graceful_shutdown`](Self::with_graceful_shutdown).
    shutdown_grace: Duration,
    connections: Arc<Connections>,
    task: JoinHandle<io::Result<()>>,
}

/// Stops a [`RunningServer`] from anywhere: cloned freely, kept by tasks that decide when the
/// server ends (an admin endpoint, a supervisor).
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    stop: CancellationToken,
    /// How long connections get to finish at shutdown, in milliseconds.
    grace: Arc<AtomicU64>,
    /// Cancelled when the server is down.
    stopped: CancellationToken,
}

impl ShutdownHandle {
    /// Stops accepting connections, ends every stream and session, lets in-flight requests
    /// finish (for up to `grace`; then their connections are closed), and returns when the
    /// server is down (or at most a second after `grace`). The server's future (an awaited
    /// [`RunningServer`]) resolves with `Ok(())`. Calling it again, or on a server that has
    /// stopped, only waits.
    pub async fn shutdown(&self, grace: Duration) {
        self.begin(grace);
        let _ =
            tokio::time::timeout(grace + Duration::from_secs(1), self.stopped.cancelled()).await;
    }

    /// Whether the server has stopped.
    pub fn is_stopped(&self) -> bool {
        self.stopped.is_cancelled()
    }

    /// Starts the shutdown, with `grace` for in-flight requests.
    fn begin(&self, grace: Duration) {
        if !self.stop.is_cancelled() {
            self.grace.store(
                u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                Ordering::SeqCst,
            );
        }
        self.stop.cancel();
    }
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

    /// A handle that stops the server from elsewhere ([`ShutdownHandle::shutdown`]), while this
    /// is awaited.
    pub fn handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// Stops accepting connections, ends every stream and session, lets in-flight requests
    /// finish (for up to `grace`; then their connections are closed), and returns when the
    /// server is down (or at most a second after `grace`).
    pub async fn shutdown(self, grace: Duration) {
        self.handle.begin(grace);
        let _ = tokio::time::timeout(grace + Duration::from_secs(1), self.task).await;
    }

    /// Runs the server until `signal` completes (say [`shutdown_signal`]: Ctrl-C or SIGTERM),
    /// then shuts it down gracefully: no new connection is accepted, streams and sessions end,
    /// in-flight requests get [`ServerConfig::shutdown_grace`] (default 10 s) to finish. As
    /// axum's and hyper's `with_graceful_shutdown`. Resolves with `Ok(())` once the server is
    /// down (or a second after the grace period), also when a [`ShutdownHandle`] stopped it
    /// first; with the error when accepting failed for good (see [`RunningServer`]).
    pub async fn with_graceful_shutdown<F>(self, signal: F) -> io::Result<()>
    where
        F: Future<Output = ()>,
    {
        let handle = self.handle.clone();
        let grace = self.shutdown_grace;
        let serving = self.into_future();
        tokio::pin!(serving, signal);
        tokio::select! {
            result = &mut serving => return result,
            () = &mut signal => {}
        }
        tracing::debug!("shutdown signal: stopping the server");
        handle.begin(grace);
        match tokio::time::timeout(grace + Duration::from_secs(1), serving).await {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!("the server did not stop within its shutdown grace period");
                Ok(())
            }
        }
    }
}

impl IntoFuture for RunningServer {
    type Output = io::Result<()>;
    type IntoFuture = Serving;

    /// Waits until the server stops (see [`RunningServer`]).
    fn into_future(self) -> Serving {
        Serving { task: self.task }
    }
}

/// A [`RunningServer`] awaited: resolves when the server stops, with `Ok(())` after a shutdown
/// and with the error when accepting failed for good. Dropping it does not stop the server.
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Serving {
    task: JoinHandle<io::Result<()>>,
}

impl Future for Serving {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.task).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(result)) => Poll::Ready(result),
            // The accept loop panicked (or its runtime is shutting down).
            Poll::Ready(Err(e)) => Poll::Ready(Err(io::Error::other(e))),
        }
    }
}

/// Completes when the process is asked to stop: Ctrl-C (SIGINT) or, on unix, SIGTERM (what
/// `kill`, systemd and container runtimes send). For
/// [`RunningServer::with_graceful_shutdown`]. Its handlers are installed when it is first
/// polled, and stay for the life of the process (the default action, ending the process, no
/// longer applies to those signals). A handler that cannot be installed is logged, and that
/// signal is not waited for.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => tracing::debug!("SIGINT"),
            Err(e) => {
                tracing::warn!("cannot listen for Ctrl-C: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
                tracing::debug!("SIGTERM");
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

/// Serves `app` on `addr`, with `TCP_NODELAY` on every connection and the connection limits
/// and timeouts of `config` (`max_connections`, `header_timeout`, `idle_connection_timeout`,
/// HTTP/2 keep-alive pings).
///
/// `addr` is anything [`tokio::net::ToSocketAddrs`] takes: a [`SocketAddr`], `"127.0.0.1:0"`,
/// `"localhost:8080"`, `("localhost", 8080)`. A name is resolved first, and `config` is checked
/// against **every** address it resolves to (a non-loopback one needs explicit allow-lists)
/// before any is bound; then the server listens on **one** address: the first that can be
/// bound, in the resolver's order (as [`TcpListener::bind`] does), whose port
/// [`RunningServer::local_addr`] tells. So `"localhost:8080"` serves on `[::1]:8080` or
/// `127.0.0.1:8080`, not both.
///
/// Fails when the name does not resolve, when no address can be bound (the last bind error),
/// or when `config` cannot serve an address (a non-loopback address with the default
/// allow-lists, a zero limit: an [`InvalidInput`](io::ErrorKind::InvalidInput) error carrying
/// the [`ConfigError`]).
pub async fn serve(
    addr: impl ToSocketAddrs,
    config: ServerConfig,
    app: Arc<dyn McpApp>,
) -> Result<RunningServer, io::Error> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr).await?.collect();
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address resolved to nothing",
        ));
    }
    for addr in &addrs {
        config.check(Some(*addr)).map_err(invalid)?;
    }
    let mut failed = None;
    for addr in addrs {
        match TcpListener::bind(addr).await {
            Ok(listener) => return serve_on(listener, config, app).await,
            Err(e) => failed = Some(e),
        }
    }
    Err(failed.expect("at least one address was tried"))
}

fn invalid(e: ConfigError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// Serves `app` on a listener already bound, as [`serve`] does: for an application that must
/// know its address before the server is built (an OAuth resource server names its own URI, port
/// included), or that is given its socket (systemd socket activation). Fails when `config`
/// cannot serve the listener's address.
pub async fn serve_on(
    listener: TcpListener,
    config: ServerConfig,
    app: Arc<dyn McpApp>,
) -> Result<RunningServer, io::Error> {
    let addr = listener.local_addr()?;
    config.check(Some(addr)).map_err(invalid)?;
    let shutdown_grace = config.shutdown_grace;
    let service = McpService::new(config, app).map_err(invalid)?;
    let handle = ShutdownHandle {
        stop: CancellationToken::new(),
        grace: Arc::new(AtomicU64::new(
            u64::try_from(shutdown_grace.as_millis()).unwrap_or(u64::MAX),
        )),
        stopped: CancellationToken::new(),
    };
    let connections = Arc::new(Connections::default());
    let sweep = tokio::spawn(sweep_loop(service.clone(), handle.stop.clone()));
    let task = tokio::spawn(accept_loop(
        listener,
        service.clone(),
        handle.clone(),
        connections.clone(),
        sweep,
    ));
    Ok(RunningServer {
        addr,
        service,
        handle,
        shutdown_grace,
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
    handle: ShutdownHandle,
    connections: Arc<Connections>,
    sweep: JoinHandle<()>,
) -> io::Result<()> {
    // Tells the handles the server is down, however this ends.
    let _stopped = handle.stopped.clone().drop_guard();
    let stop = handle.stop.clone();
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
    let mut fatal = None;
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    failures = 0;
                    accepted
                }
                Err(e) if is_fatal(&e) => {
                    tracing::error!("accept failed, the server stops: {e}");
                    fatal = Some(e);
                    break;
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
    // After a fatal error too, the connections end gracefully and the sweep stops.
    stop.cancel();
    service.close_all().await;
    tracker.close();
    let grace = Duration::from_millis(handle.grace.load(Ordering::SeqCst));
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        force.cancel();
        tracker.wait().await;
    }
    let _ = sweep.await;
    fatal.map_or(Ok(()), Err)
}

/// Whether an accept error says the listening socket itself is unusable (closed, not
/// listening, not a socket), so that accepting again cannot succeed.
fn is_fatal(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        use rustix::io::Errno;
        let fatal = [Errno::BADF, Errno::INVAL, Errno::NOTSOCK, Errno::OPNOTSUPP];
        e.raw_os_error()
            .is_some_and(|code| fatal.iter().any(|f| f.raw_os_error() == code))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
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

/// Running until stopped: awaiting, handles, signals, addresses.
#[cfg(test)]
mod serving {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::server::service::tests::Unreached;

    /// The status line of a `GET /elsewhere` (404 from the transport) sent to `addr`.
    async fn status_of_get(addr: SocketAddr) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /elsewhere HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response.lines().next().unwrap_or_default().to_owned()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_awaited_server_ends_when_a_handle_shuts_it_down() {
        let server = serve("127.0.0.1:0", ServerConfig::default(), Arc::new(Unreached))
            .await
            .unwrap();
        let addr = server.local_addr();
        let handle = server.handle();
        let elsewhere = handle.clone();
        let mut serving = tokio::spawn(server.into_future());
        // It serves, and the future waits, until the handle is used.
        assert_eq!(status_of_get(addr).await, "HTTP/1.1 404 Not Found");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut serving)
                .await
                .is_err(),
            "the server stops only when told"
        );
        assert!(!handle.is_stopped());
        tokio::spawn(async move { elsewhere.shutdown(Duration::from_secs(1)).await })
            .await
            .unwrap();
        assert!(handle.is_stopped());
        let ended = tokio::time::timeout(Duration::from_secs(5), serving)
            .await
            .expect("the awaited server resolves after the shutdown")
            .unwrap();
        assert!(ended.is_ok(), "{ended:?}");
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
        // Shutting down a stopped server only waits.
        handle.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_graceful_shutdown_ends_when_the_signal_completes() {
        let server = serve("127.0.0.1:0", ServerConfig::default(), Arc::new(Unreached))
            .await
            .unwrap();
        let addr = server.local_addr();
        let handle = server.handle();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.with_graceful_shutdown(async {
            let _ = rx.await;
        }));
        assert_eq!(status_of_get(addr).await, "HTTP/1.1 404 Not Found");
        assert!(!handle.is_stopped());
        tx.send(()).unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(5), serving)
            .await
            .expect("the server stops at the signal")
            .unwrap();
        assert!(ended.is_ok(), "{ended:?}");
        assert!(handle.is_stopped());
    }

    /// A name is resolved, checked and bound: `localhost` serves on a loopback address.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_name_is_resolved_and_served() {
        let server = serve("localhost:0", ServerConfig::default(), Arc::new(Unreached))
            .await
            .unwrap();
        let addr = server.local_addr();
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_ne!(addr.port(), 0);
        assert_eq!(status_of_get(addr).await, "HTTP/1.1 404 Not Found");
        server.shutdown(Duration::from_secs(1)).await;
        // `(host, port)` works too; a resolved address that is not loopback is refused with
        // the default lists, before anything is bound.
        let refused = serve(("0.0.0.0", 0), ServerConfig::default(), Arc::new(Unreached))
            .await
            .unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidInput);
        let cause = refused
            .get_ref()
            .and_then(|e| e.downcast_ref::<ConfigError>());
        assert!(
            matches!(cause, Some(ConfigError::PublicBindNeedsAllowLists(_))),
            "{refused:?}"
        );
    }

    /// The listening socket shut down under the server: accepting fails for good (EINVAL on
    /// Linux), the server stops, and its future resolves with the error.
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fatal_accept_error_ends_the_awaited_server_with_it() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let socket = rustix::io::dup(&listener).unwrap();
        let server = serve_on(listener, ServerConfig::default(), Arc::new(Unreached))
            .await
            .unwrap();
        let handle = server.handle();
        let serving = tokio::spawn(server.into_future());
        tokio::time::sleep(Duration::from_millis(50)).await;
        rustix::net::shutdown(&socket, rustix::net::Shutdown::Both).unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(15), serving)
            .await
            .expect("the server stops")
            .unwrap();
        let error = ended.unwrap_err();
        assert!(is_fatal(&error), "{error:?}");
        assert!(handle.is_stopped());
    }

    #[test]
    fn passing_accept_errors_are_not_fatal() {
        for kind in [
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::Interrupted,
            io::ErrorKind::WouldBlock,
        ] {
            assert!(!is_fatal(&io::Error::from(kind)), "{kind:?}");
        }
        #[cfg(unix)]
        {
            use rustix::io::Errno;
            for passing in [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM] {
                let e = io::Error::from_raw_os_error(passing.raw_os_error());
                assert!(!is_fatal(&e), "{e}");
            }
            let e = io::Error::from_raw_os_error(Errno::BADF.raw_os_error());
            assert!(is_fatal(&e), "{e}");
        }
    }

    /// SIGTERM completes `shutdown_signal()` (whose handler, installed at its first poll, keeps
    /// the signal from ending this test process).
    #[cfg(unix)]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sigterm_completes_the_shutdown_signal() {
        let signal = shutdown_signal();
        tokio::pin!(signal);
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut signal)
                .await
                .is_err()
        );
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::TERM)
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), signal)
            .await
            .expect("SIGTERM ends the wait");
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
        let server = serve("127.0.0.1:0", config, Arc::new(Unreached))
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
