//! What every benchmark server shares, the lean build (`lean/`) included: the runtime, the
//! address, and the `LISTENING <port>` line.

use std::net::SocketAddr;

/// The tokio runtime of every server: multi-threaded (what `#[tokio::main]` gives), or
/// current-thread with `BENCH_RT=current`.
pub fn runtime() -> tokio::runtime::Runtime {
    let current = std::env::var("BENCH_RT").is_ok_and(|v| v == "current");
    let mut builder = if current {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    builder.enable_all().build().expect("a tokio runtime")
}

/// The address every HTTP server binds: loopback, a port the system picks.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Tells the load generator where to connect (the only line an HTTP server prints on stdout).
pub fn announce(addr: SocketAddr) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "LISTENING {}", addr.port());
    let _ = out.flush();
}
