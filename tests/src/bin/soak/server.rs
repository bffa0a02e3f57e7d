//! `soak --server`: the demo server of `mcx serve demo --http` (its very source, `demo.rs` of
//! the cli crate) in a process of its own, so that its RSS is its own. It prints
//! `listening <addr>` on stdout, then answers each `stats` line on stdin with one line of JSON
//! ([`ServerStats`]: RSS, every internal table, open sockets, runtime tasks); at `quit` or the
//! end of stdin it shuts down.

use std::sync::Arc;
use std::time::Duration;

use modelctx_http::event_store::{EventStore, MemoryEventStore, MemoryEventStoreConfig};
use modelctx_http::server::{RunningServer, ServerConfig};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::figures::ServerStats;

/// A legacy session left idle this long is ended (the default is 30 minutes): abandoned
/// sessions (initialize floods, clients dropped mid-call) are reclaimed within the soak.
pub(crate) const SESSION_IDLE: Duration = Duration::from_secs(4);
/// A legacy session that sent no request after `initialize` is ended this long after it opened
/// (default 60 s): the `initialize` floods' sessions.
pub(crate) const HANDSHAKE: Duration = Duration::from_secs(2);
/// How long a connection gets to send a request head (default 10 s): slowloris and idle sockets.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// The most connections open at once (default: half the file limit): above the 200 fault
/// sockets plus the clients, below the process's file limit.
pub(crate) const MAX_CONNECTIONS: usize = 512;
/// How long an SSE event is kept for resumption (default 5 minutes).
pub(crate) const EVENT_AGE: Duration = Duration::from_secs(20);

/// The server's settings for the soak: the defaults, with timeouts short enough that the
/// tables can return to their start within the soak's settling time, and slowloris and idle
/// sockets are closed by the server within the time an injector holds them (6 s).
/// `max_sessions_per_peer` stays unset: every soak peer is 127.0.0.1, so a cap would refuse the
/// load clients along with the floods (which the full table's eviction of idle sessions absorbs).
pub(crate) fn soak_server_config(store: Arc<MemoryEventStore>) -> ServerConfig {
    let mut config = ServerConfig::default();
    config.session_idle_timeout = SESSION_IDLE;
    config.handshake_timeout = HANDSHAKE;
    config.header_timeout = HEADER_TIMEOUT;
    config.max_connections = MAX_CONNECTIONS;
    config.keep_alive = Some(Duration::from_secs(2));
    config.event_store = store;
    config
}

/// The event store of the soak: the default limits, events kept for [`EVENT_AGE`].
fn soak_event_store() -> Arc<MemoryEventStore> {
    let config = MemoryEventStoreConfig {
        max_age: EVENT_AGE,
        ..MemoryEventStoreConfig::default()
    };
    Arc::new(MemoryEventStore::with_config(config))
}

/// Runs the server mode; the process's exit status.
pub(crate) fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("soak server: no runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve() -> Result<(), String> {
    let store = soak_event_store();
    let server = crate::demo::server();
    let running = server
        .serve_http("127.0.0.1:0", soak_server_config(store.clone()))
        .await
        .map_err(|e| format!("serving on 127.0.0.1: {e}"))?;
    let mut stdout = tokio::io::stdout();
    let say = |line: String| format!("{line}\n");
    stdout
        .write_all(say(format!("listening {}", running.local_addr())).as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    stdout.flush().await.map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        let line = lines.next_line().await.map_err(|e| e.to_string())?;
        match line.as_deref().map(str::trim) {
            Some("stats") => {
                let stats = stats(&running, &store).await;
                let json = serde_json::to_string(&stats).map_err(|e| e.to_string())?;
                stdout
                    .write_all(say(json).as_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
                stdout.flush().await.map_err(|e| e.to_string())?;
            }
            Some("quit") | None => break,
            Some(other) => eprintln!("soak server: unknown command {other:?}"),
        }
    }
    running.shutdown(Duration::from_secs(2)).await;
    Ok(())
}

async fn stats(running: &RunningServer, store: &MemoryEventStore) -> ServerStats {
    let tables = running.service().table_sizes().await;
    let stored = store
        .sizes()
        .await
        .expect("the in-memory event store never fails");
    let (rss_kib, peak_rss_kib) = memory();
    let count = |n: usize| n as u64;
    ServerStats {
        rss_kib,
        peak_rss_kib,
        sessions: count(tables.sessions),
        streams: count(tables.streams),
        requests: count(tables.requests),
        queued: count(tables.queued),
        store_sessions: count(stored.sessions),
        store_streams: count(stored.streams),
        store_events: count(stored.events),
        store_bytes: count(stored.bytes),
        sockets: sockets(),
        tasks: count(
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
        ),
        connections: count(running.open_connections()),
        in_flight: count(tables.in_flight),
    }
}

/// `VmRSS` and `VmHWM` of this process, KiB (zeros where /proc is missing).
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The open sockets of this process (its file descriptors that are sockets).
fn sockets() -> u64 {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    fds.filter_map(Result::ok)
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        })
        .count() as u64
}
