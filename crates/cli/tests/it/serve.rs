//! `mcx serve demo --http`: serving until the process is told to stop.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::cli::{serve_http, stderr};

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

/// A state key for the `--redis` tests: id `t1`, 32 bytes of secret in base64url.
const STATE_KEY: &str = "t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

/// `mcx serve demo ARGS` run to its end, without `MCX_STATE_KEYS` from the test's environment,
/// and how long it took.
fn serve_demo_status(args: &[&str]) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let output = Command::new(crate::cli::MCX)
        .args(["serve", "demo"])
        .args(args)
        .env_remove("MCX_STATE_KEYS")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("mcx runs");
    (output, started.elapsed())
}

/// `--redis` without `--http` is a usage error (status 2) that names `--http`; over stdio too.
#[test]
fn redis_without_http_is_a_usage_error() {
    for (args, named) in [
        (&["--redis", "redis://127.0.0.1:1/"][..], "--http"),
        (&["--stdio", "--redis", "redis://127.0.0.1:1/"], "--stdio"),
    ] {
        let (out, _) = serve_demo_status(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(named), "{args:?}: {err}");
    }
}

/// `--redis` without a shared key ring is a usage error (status 2), said before Redis is tried
/// (port 1: nothing listens there, which would be status 3): a random key per process breaks
/// the retries that land on another instance.
#[test]
fn redis_without_a_state_key_is_a_usage_error() {
    let (out, _) = serve_demo_status(&["--http", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1/"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("mcx: --redis needs --state-key (or MCX_STATE_KEYS)"),
        "{err}"
    );
    assert!(!err.contains("mcx demo server:"), "{err}");
}

/// A Redis that cannot be reached at start: a clear error and status 3, within the connect's
/// budget, and nothing served. The URL's password is not repeated.
#[test]
fn an_unreachable_redis_exits_with_3() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let url = format!("redis://user:hunter2@127.0.0.1:{port}/");
    let (out, took) = serve_demo_status(&[
        "--http",
        "127.0.0.1:0",
        "--redis",
        &url,
        "--state-key",
        STATE_KEY,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.starts_with("mcx: --redis: redis: cannot connect"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    assert!(!err.contains("mcx demo server:"), "{err}");
    assert!(took < Duration::from_secs(15), "{took:?}");
}

/// With a real Redis (skipped without `redis-server`, unless `MODELCTX_REQUIRE_FLEET`): the
/// instance takes a number leased in Redis (`mcx:inst:N`, holding `host:pid`), keeps its legacy
/// sessions there (the key ring from `MCX_STATE_KEYS`), and deletes its lease at SIGTERM,
/// exiting with 0.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_instance_stores_sessions_in_redis_and_gives_its_number_back_at_sigterm() {
    use std::io::BufRead;

    use modelctx_tests::fleet::{Redis, RespValue};
    use modelctx_types::ProtocolVersion;

    let Some(redis) = Redis::start().await else {
        return;
    };
    let mut child = Command::new(crate::cli::MCX)
        .args([
            "serve",
            "demo",
            "--http",
            "127.0.0.1:0",
            "--redis",
            &redis.url(),
        ])
        .env("MCX_STATE_KEYS", STATE_KEY)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mcx serve runs");
    let stderr = child.stderr.take().expect("stderr");
    let mut server = crate::cli::HttpServer {
        child,
        url: String::new(),
    };
    // Its lines up to the URL (a few lines: read on this thread), then drained.
    let mut lines = std::io::BufReader::new(stderr).lines();
    let mut before = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("stderr");
        let done = line.starts_with("mcx demo server: ");
        before.push(line);
        if done {
            break;
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    let joined = before
        .iter()
        .find_map(|l| l.strip_prefix("mcx: joined the fleet on redis as instance "))
        .unwrap_or_else(|| panic!("no fleet line: {before:?}"));
    let served = before.last().expect("a line");
    server.url = served
        .strip_prefix("mcx demo server: ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no URL: {before:?}"))
        .to_owned();
    let instance: u16 = joined
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{joined}"));
    let pid = server.child.id();
    let lease = format!("mcx:inst:{instance}");
    let holder = redis.command(&["GET", &lease]).await.text();
    assert!(
        holder
            .as_deref()
            .is_some_and(|h| h.ends_with(&format!(":{pid}"))),
        "{lease} = {holder:?}"
    );

    // A legacy session's state is in Redis.
    let addr: std::net::SocketAddr = server
        .url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{}", server.url));
    let version = ProtocolVersion::LATEST_LEGACY.as_str();
    let session = modelctx_tests::http::open_session(addr, version).await;
    let state = redis
        .command(&["GET", &format!("mcx:{{s:{session}}}:state")])
        .await;
    assert!(
        matches!(&state, RespValue::Bulk(json) if json.starts_with(b"{")),
        "{state:?}"
    );

    let sent = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
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
            "still runs after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}");
    assert_eq!(
        redis.command(&["EXISTS", &lease]).await.integer(),
        0,
        "the lease is deleted at a graceful stop"
    );
}
