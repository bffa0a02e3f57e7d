//! `mcx serve demo --http`: serving until the process is told to stop.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::cli::serve_http;

/// SIGTERM (what `kill`, systemd and container runtimes send) stops the demo server gracefully:
/// it exits with 0, not killed by the signal.
#[cfg(unix)]
#[test]
fn sigterm_ends_serve_demo_http_cleanly() {
    let mut server = serve_http();
    let pid = server.child.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().expect("waits") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "mcx serve demo --http still runs after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}
