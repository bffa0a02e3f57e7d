//! `mcx proxy` in front of `mcx serve demo --stdio`, driven over HTTP by modelctx clients in
//! both eras. The proxy runs with `--verbose`: its stderr says which children start and stop and
//! how many requests are in flight, which the tests read.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modelctx_client::{
    CallOptions, Client, ClientBuilder, Elicitation, Elicited, JsonObject, LogLevel,
    ProtocolVersion, ServerNotification, model,
};
use serde_json::{Value, json};

const MCX: &str = env!("CARGO_BIN_EXE_mcx");

/// A running proxy and what it has said on stderr.
struct Proxy {
    child: Child,
    url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    fn start(extra: &[&str]) -> Proxy {
        Proxy::start_with(&format!("{MCX} serve demo --stdio"), extra)
    }

    /// A proxy for the server run by `server` (a command line).
    fn start_with(server: &str, extra: &[&str]) -> Proxy {
        let mut child = Command::new(MCX)
            .args(["proxy", "--stdio", server, "--listen", "127.0.0.1:0", "-v"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mcx proxy starts");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        // The URL line comes first, after what a guard says about itself (`--auth-*`).
        let mut before = Vec::new();
        let url = loop {
            let mut line = String::new();
            stderr.read_line(&mut line).expect("the proxy's stderr");
            assert!(!line.is_empty(), "no URL in {before:?}");
            if let Some(url) = line
                .strip_prefix("mcx proxy: ")
                .and_then(|rest| rest.split_whitespace().next())
                .filter(|url| url.starts_with("http://"))
            {
                break url.to_owned();
            }
            before.push(line);
        };
        let log = Arc::new(Mutex::new(before));
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { break };
                lines.lock().unwrap().push(line);
            }
        });
        Proxy { child, url, log }
    }

    fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits (up to 10 s) for a stderr line that `matches`; returns it.
    async fn wait_for(&self, what: &str, matches: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(line) = self.lines().into_iter().find(|l| matches(l)) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no line {what} in the proxy's stderr:\n{}",
                self.lines().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Proxy {
    /// Waits (up to 10 s) until the last count of modern requests in flight is 0.
    async fn wait_until_empty(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lines = self.lines();
            let last = lines.iter().rev().find(|l| l.contains(" in flight)"));
            if last.is_some_and(|l| l.ends_with("(0 in flight)")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "modern requests are left in flight:\n{}",
                lines.join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client that accepts elicitations (confirm=true, note="via proxy") and answers sampling
/// with a canned reply.
fn client(legacy: bool) -> ClientBuilder {
    let builder = Client::builder("proxy-test", "1.0.0")
        .on_elicitation(|elicitation| async move {
            match elicitation {
                Elicitation::Form { .. } => {
                    let mut content = JsonObject::new();
                    content.insert("confirm".into(), Value::Bool(true));
                    content.insert("note".into(), Value::from("via proxy"));
                    Ok(Elicited::accept(content))
                }
                _ => Ok(Elicited::decline()),
            }
        })
        .on_sampling(|_| async move {
            Ok(model::CreateMessageResult {
                meta: None,
                content: model::CreateMessageResultContent::TextContent(model::TextContent {
                    meta: None,
                    annotations: None,
                    text: "a canned haiku".into(),
                }),
                model: "canned-model".into(),
                role: model::Role::Assistant,
                stop_reason: Some("endTurn".into()),
                extra: JsonObject::new(),
            })
        })
        .request_timeout(Some(Duration::from_secs(20)));
    if legacy {
        builder.protocol_version(ProtocolVersion::V2025_11_25)
    } else {
        builder
    }
}

/// A countdown of `steps` with progress; the progress messages seen.
async fn countdown(client: &Client, steps: u32) -> (String, Vec<String>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let options = CallOptions::new().on_progress(move |p| {
        sink.lock()
            .unwrap()
            .push(p.message.clone().unwrap_or_default());
    });
    let result = client
        .call_tool_with(
            "countdown",
            json!({"steps": steps, "delay_ms": 20}),
            options,
        )
        .await
        .expect("countdown");
    let seen = seen.lock().unwrap().clone();
    (result.text(), seen)
}

/// The pid in a `child <pid> started` line.
fn pid_in(line: &str) -> u32 {
    line.split("child ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"))
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.split_whitespace().nth(2) == Some("Z"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_session_gets_its_own_child_with_progress_elicitation_and_sampling() {
    let proxy = Proxy::start(&[]);
    let client = client(true)
        .connect_http(&proxy.url)
        .await
        .expect("connects");
    assert_eq!(
        client.protocol_version(),
        Some(ProtocolVersion::V2025_11_25)
    );
    let started = proxy
        .wait_for("of a legacy child started", |l| {
            l.contains("legacy session") && l.contains("started")
        })
        .await;
    let pid = pid_in(&started);
    assert!(alive(pid), "the session's child {pid} runs");

    let (done, progress) = countdown(&client, 3).await;
    assert_eq!(done, "liftoff after 3 steps");
    assert_eq!(progress, ["step 1 of 3", "step 2 of 3", "step 3 of 3"]);

    // The child's requests reach the client, and its answers reach the child.
    let confirmed = client
        .call_tool("confirm", json!({"action": "deploy"}))
        .await
        .expect("confirm");
    assert_eq!(confirmed.text(), "deploy: done (via proxy)");
    let haiku = client
        .call_tool("haiku", json!({"topic": "pipes"}))
        .await
        .expect("haiku");
    assert_eq!(haiku.text(), "canned-model wrote: a canned haiku");

    // The session ends with DELETE: its child is stopped and reaped.
    client.close().await;
    proxy
        .wait_for(&format!("of child {pid} stopped"), |l| {
            l.contains(&format!("child {pid} stopped"))
        })
        .await;
    assert!(!alive(pid), "child {pid} still runs after DELETE");
    proxy
        .wait_for("with no legacy child left", |l| {
            l.contains("closed (0 legacy children)")
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_clients_share_one_child_with_progress_input_required_and_listen() {
    let proxy = Proxy::start(&[]);
    let watcher = client(false)
        .connect_http(&proxy.url)
        .await
        .expect("connects");
    let caller = client(false)
        .connect_http(&proxy.url)
        .await
        .expect("connects");
    assert_eq!(
        caller.protocol_version(),
        Some(ProtocolVersion::V2026_07_28)
    );

    // Two listen streams (one per client, with the same request ids on each side), told
    // apart by subscription id, each told of list changes that one client causes.
    let mut notifications = watcher.notifications();
    let mut caller_notifications = caller.notifications();
    watcher
        .listening()
        .await
        .expect("the listen stream is acknowledged");
    caller
        .listening()
        .await
        .expect("the listen stream is acknowledged");

    // Both clients' requests at once, each with its progress (both clients use the same
    // progress tokens and ids: the proxy keeps them apart).
    let ((a, a_progress), (b, b_progress)) =
        tokio::join!(countdown(&watcher, 4), countdown(&caller, 2));
    assert_eq!(a, "liftoff after 4 steps");
    assert_eq!(a_progress.len(), 4, "{a_progress:?}");
    assert_eq!(b, "liftoff after 2 steps");
    assert_eq!(b_progress, ["step 1 of 2", "step 2 of 2"]);

    // An input_required round trip (the handler runs again with the answer).
    let confirmed = caller
        .call_tool("confirm", json!({"action": "ship"}))
        .await
        .expect("confirm");
    assert_eq!(confirmed.text(), "ship: done (via proxy)");

    caller.call_tool("unlock", json!({})).await.expect("unlock");
    for notifications in [&mut notifications, &mut caller_notifications] {
        let changed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match notifications.recv().await {
                    Ok(ServerNotification::ToolsListChanged) => return true,
                    Ok(_) => continue,
                    Err(_) => return false,
                }
            }
        })
        .await;
        assert_eq!(
            changed,
            Ok(true),
            "no tools/list_changed on a listen stream"
        );
    }

    let started = proxy
        .lines()
        .iter()
        .filter(|l| l.contains("shared modern child") && l.contains(" started ("))
        .count();
    assert_eq!(
        started,
        1,
        "one shared child:\n{}",
        proxy.lines().join("\n")
    );

    // Closing the watcher closes its listen stream: the table empties.
    watcher.close().await;
    caller.close().await;
    proxy.wait_until_empty().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_call_dropped_midway_is_cancelled_on_the_child() {
    let proxy = Proxy::start(&[]);
    let client = client(false)
        .connect_http(&proxy.url)
        .await
        .expect("connects");
    let (first, mut progressed) = tokio::sync::mpsc::channel(16);
    let options = CallOptions::new().on_progress(move |_| {
        let _ = first.try_send(());
    });
    // 20 steps of 100 ms: dropped after the first step.
    let call = client.call_tool_with("countdown", json!({"steps": 20, "delay_ms": 100}), options);
    tokio::select! {
        result = call => panic!("the countdown ended early: {result:?}"),
        _ = progressed.recv() => {}
    }
    let cancelled = proxy
        .wait_for("of the cancellation", |l| {
            l.contains("cancelled: the HTTP stream closed")
        })
        .await;
    assert!(
        cancelled.ends_with("told the child (0 in flight)"),
        "{cancelled}"
    );
    // Had the child not been told, it would count down to the end (2 s) and answer.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let lines = proxy.lines();
    assert!(
        !lines.iter().any(|l| l.contains("liftoff")),
        "the child finished the cancelled countdown:\n{}",
        lines.join("\n")
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sessions_are_bounded_and_end_when_idle() {
    let proxy = Proxy::start(&["--max-sessions", "2", "--idle-timeout", "2"]);
    let one = client(true).connect_http(&proxy.url).await.expect("first");
    let two = client(true).connect_http(&proxy.url).await.expect("second");
    // A full table makes room by ending an idle session; sessions with their standalone GET
    // stream open are not idle, so the third is refused.
    one.listening()
        .await
        .expect("the first session's stream opens");
    two.listening()
        .await
        .expect("the second session's stream opens");
    let Err(refused) = client(true).connect_http(&proxy.url).await else {
        panic!("a third session is accepted");
    };
    let error = refused.to_string();
    assert!(error.contains("too many sessions"), "{error}");
    let live = proxy
        .lines()
        .iter()
        .filter(|l| l.contains("legacy session") && l.contains("started"))
        .count();
    assert_eq!(live, 2, "the refused session started no child");

    // DELETE frees a place.
    one.close().await;
    proxy
        .wait_for("of a closed session", |l| {
            l.contains("closed (1 legacy children)")
        })
        .await;
    drop(two);

    // A session with no request and no open stream for 2 s ends, and its child with it.
    let session = raw_initialize(&proxy.url);
    let started = proxy
        .wait_for("of the raw session's child", |l| {
            l.contains(&session) && l.contains("started")
        })
        .await;
    let pid = pid_in(&started);
    proxy
        .wait_for("of the idle session's end", |l| {
            l.contains(&session) && l.contains("closed (")
        })
        .await;
    proxy
        .wait_for(&format!("of child {pid} stopped"), |l| {
            l.contains(&format!("child {pid} stopped"))
        })
        .await;
    assert!(!alive(pid), "the idle session's child {pid} still runs");
    assert_eq!(raw_post(&proxy.url, Some(&session), PING).0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_child_that_exits_ends_its_session() {
    // The server reads two lines (initialize, notifications/initialized), then its stdin ends
    // and it exits.
    let proxy = Proxy::start_with(
        &format!(
            "sh -c 'for i in 1 2; do read -r line; printf \"%s\\n\" \"$line\"; done | {MCX} serve demo --stdio'"
        ),
        &[],
    );
    let session = raw_initialize(&proxy.url);
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(raw_post(&proxy.url, Some(&session), initialized).0, 202);
    proxy
        .wait_for("of the session's end", |l| {
            l.contains(&session) && l.contains("the child's stdout ended")
        })
        .await;
    proxy
        .wait_for("of the closed session", |l| {
            l.contains(&session) && l.contains("closed (0 legacy children)")
        })
        .await;
    let (status, response) = raw_post(&proxy.url, Some(&session), PING);
    assert_eq!(status, 404, "{response}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_child_is_started_again_after_it_exits_and_its_stderr_passes_through() {
    // Each child says hello on stderr, reads three lines (the proxy's own listen and
    // tools/list, then one request), and exits when its stdin ends.
    let proxy = Proxy::start_with(
        &format!(
            "sh -c 'echo hello from the child >&2; for i in 1 2 3; do read -r line; printf \"%s\\n\" \"$line\"; done | {MCX} serve demo --stdio'"
        ),
        &[],
    );
    let first = client(false)
        .connect_http(&proxy.url)
        .await
        .expect("connects");
    assert_eq!(first.protocol_version(), Some(ProtocolVersion::V2026_07_28));
    proxy
        .wait_for("of the child's exit", |l| {
            l.contains("the shared modern child's stdout ended")
        })
        .await;
    let second = client(false)
        .connect_http(&proxy.url)
        .await
        .expect("connects to a new child");
    assert_eq!(
        second.protocol_version(),
        Some(ProtocolVersion::V2026_07_28)
    );
    let lines = proxy.lines();
    let started = lines
        .iter()
        .filter(|l| l.contains("shared modern child") && l.contains(" started ("))
        .count();
    // (" started (" and not "started": the backoff's "exited after ..; started again in .." line
    // is not a start, and may or may not be printed yet.)
    assert_eq!(started, 2, "{}", lines.join("\n"));
    let hellos = lines
        .iter()
        .filter(|l| *l == "hello from the child")
        .count();
    assert_eq!(hellos, 2, "{}", lines.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_messages_reach_the_request_they_belong_to_in_both_eras() {
    let proxy = Proxy::start(&[]);
    for legacy in [true, false] {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let client = client(legacy)
            .log_level(LogLevel::Debug)
            .on_notification(move |n| {
                if let ServerNotification::Log(log) = n {
                    sink.lock().unwrap().push(log.data.clone());
                }
            })
            .connect_http(&proxy.url)
            .await
            .expect("connects");
        let (done, _) = countdown(&client, 2).await;
        assert_eq!(done, "liftoff after 2 steps");
        // Log messages travel on the call's stream, ahead of its answer.
        let logs = logs.lock().unwrap().clone();
        assert_eq!(
            logs,
            [json!({"step": 1, "of": 2}), json!({"step": 2, "of": 2})],
            "legacy: {legacy}"
        );
        client.close().await;
    }
}

const PING: &str = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;

/// POSTs `body` (with a session id) on a fresh connection: the status and the whole response.
fn raw_post(url: &str, session: Option<&str>, body: &str) -> (u16, String) {
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-11-25\r\n"))
        .unwrap_or_default();
    raw_post_with(url, &session, body, Duration::from_secs(10))
}

/// POSTs `body` with `headers` (lines ending in CRLF); waits at most `wait` for the response
/// (status 0 when none came).
fn raw_post_with(url: &str, headers: &str, body: &str, wait: Duration) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .expect("an http URL");
    let mut stream = std::net::TcpStream::connect(addr).expect("connects");
    stream.set_read_timeout(Some(wait)).unwrap();
    let session = headers;
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{session}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, response)
}

/// Opens a legacy session with a bare `initialize` (no standalone stream): its id.
fn raw_initialize(url: &str) -> String {
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (status, response) = raw_post(url, None, initialize);
    assert_eq!(status, 200, "{response}");
    response
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id in {response}"))
}

#[test]
fn bad_arguments_fail_with_a_message() {
    let out = Command::new(MCX)
        .args(["proxy", "--stdio", "\"unclosed", "--listen", "127.0.0.1:0"])
        .output()
        .expect("mcx runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--stdio"), "{stderr}");

    let out = Command::new(MCX)
        .args(["proxy", "--stdio", "x", "--listen", "nowhere"])
        .output()
        .expect("mcx runs");
    assert!(!out.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_fails_the_handshake() {
    let mut proxy_cmd = Command::new(MCX)
        .args([
            "proxy",
            "--stdio",
            "/nonexistent/mcp-server",
            "--listen",
            "127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcx proxy starts");
    let mut stderr = BufReader::new(proxy_cmd.stderr.take().expect("stderr"));
    let mut first = String::new();
    stderr.read_line(&mut first).expect("the first line");
    let url = first
        .strip_prefix("mcx proxy: ")
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a URL")
        .to_owned();
    std::thread::spawn(move || for _ in stderr.lines() {});
    for legacy in [true, false] {
        let Err(error) = client(legacy).connect_http(&url).await else {
            panic!("connected to no server");
        };
        let error = error.to_string();
        assert!(error.contains("cannot start the server"), "{error}");
    }
    let _ = proxy_cmd.kill();
    let _ = proxy_cmd.wait();
}

/// A modern (2026-07-28) `tools/call` POST of tool `name` with `arguments`, waiting at most
/// `wait` for the response.
fn raw_modern_call(url: &str, name: &str, arguments: Value, wait: Duration) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        },
    }});
    let headers = format!(
        "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {name}\r\n"
    );
    raw_post_with(url, &headers, &body.to_string(), wait)
}

/// Finding 2: a flood of `initialize` POSTs starts at most `--max-children` processes; the
/// others are answered with an error at once, and their sessions end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_2_initialize_floods_start_at_most_max_children_processes() {
    let proxy = Proxy::start(&["--max-children", "2"]);
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let mut opened = 0;
    let mut refused = 0;
    for _ in 0..6 {
        let (status, response) = raw_post(&proxy.url, None, initialize);
        assert_eq!(status, 200, "{response}");
        if response.to_ascii_lowercase().contains("mcp-session-id") {
            opened += 1;
        } else {
            assert!(response.contains("--max-children"), "{response}");
            refused += 1;
        }
    }
    assert_eq!((opened, refused), (2, 4));
    let started = proxy
        .lines()
        .iter()
        .filter(|l| l.starts_with("mcx proxy: legacy session") && l.contains(" started ("))
        .count();
    assert_eq!(started, 2, "{}", proxy.lines().join("\n"));
}

/// Finding 24: a shared child that exits at once is not started again for every request:
/// requests fail fast while the restart waits, and the restarts space out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_24_a_crashing_shared_child_is_restarted_with_backoff() {
    let proxy = Proxy::start_with("false", &[]);
    let requests = 40;
    let mut fast_failures = 0;
    let start = Instant::now();
    for _ in 0..requests {
        let (status, response) =
            raw_modern_call(&proxy.url, "echo", json!({}), Duration::from_secs(10));
        assert_eq!(status, 200, "{response}");
        assert!(response.contains("\"error\""), "{response}");
        if response.contains("started again in") {
            fast_failures += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let the proxy's stderr catch up before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let elapsed = start.elapsed();
    let spawns = proxy
        .lines()
        .iter()
        .filter(|l| l.contains("shared modern child") && l.contains(" started ("))
        .count();
    // Delays 0, 0, 100, 200, 400, 800, 1600 ms...: in the time the requests took, a handful
    // of starts, not one per request.
    let bound = 5 + (elapsed.as_millis() / 100).max(1).ilog2() as usize;
    assert!(
        spawns >= 2 && spawns <= bound && spawns < requests / 3,
        "{spawns} starts for {requests} requests in {elapsed:?}:\n{}",
        proxy.lines().join("\n")
    );
    assert!(fast_failures > requests / 2, "{fast_failures}");
}

/// Finding 10: a shared child that does not read: large requests are refused once 16 MiB wait
/// for its stdin, instead of piling up in the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_10_a_child_that_does_not_read_gets_no_more_than_the_queue_holds() {
    let proxy = Proxy::start_with("sleep 1000", &[]);
    let text = "x".repeat(1024 * 1024);
    let posts: Vec<_> = (0..20)
        .map(|_| {
            let url = proxy.url.clone();
            let text = text.clone();
            std::thread::spawn(move || {
                raw_modern_call(&url, "echo", json!({"text": text}), Duration::from_secs(6))
            })
        })
        .collect();
    let mut refused = 0;
    for post in posts {
        let (_, response) = post.join().expect("the POST ran");
        if response.contains("too far behind") {
            refused += 1;
        }
    }
    // 16 MiB hold at most 15 of these 1 MiB lines next to the proxy's own requests.
    assert!(refused >= 5, "{refused} refused");
}

/// Finding 4 (the audit's reproduction): two modern clients ask for logs of their calls at
/// the same time; each gets the log messages of its own call, none of the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_4_log_messages_of_one_client_never_reach_another() {
    let proxy = Proxy::start(&[]);
    let connect = |sink: Arc<Mutex<Vec<Value>>>| {
        client(false)
            .log_level(LogLevel::Debug)
            .on_notification(move |n| {
                if let ServerNotification::Log(log) = n {
                    sink.lock().unwrap().push(log.data.clone());
                }
            })
            .connect_http(&proxy.url)
    };
    let (logs_a, logs_b) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    );
    let a = connect(logs_a.clone()).await.expect("A connects");
    let b = connect(logs_b.clone()).await.expect("B connects");
    let call_a = a.call_tool("countdown", json!({"steps": 8, "delay_ms": 100}));
    let call_b = async {
        // B starts once A's call is under way.
        let deadline = Instant::now() + Duration::from_secs(10);
        while logs_a.lock().unwrap().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        b.call_tool("countdown", json!({"steps": 3, "delay_ms": 100}))
            .await
    };
    let (done_a, done_b) = tokio::join!(call_a, call_b);
    assert_eq!(done_a.expect("A's call").text(), "liftoff after 8 steps");
    assert_eq!(done_b.expect("B's call").text(), "liftoff after 3 steps");
    let expected = |of: u32| -> Vec<Value> {
        (1..=of)
            .map(|step| json!({"step": step, "of": of}))
            .collect()
    };
    assert_eq!(*logs_a.lock().unwrap(), expected(8));
    assert_eq!(*logs_b.lock().unwrap(), expected(3));
    a.close().await;
    b.close().await;
}

/// Finding 10, legacy sessions: a child that answers `initialize` and then reads nothing more
/// gets no more than its queue holds; the rest is refused with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_10_a_legacy_child_that_stops_reading_gets_no_more_than_the_queue_holds() {
    let answer = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"stuck","version":"1"}}}"#;
    let proxy = Proxy::start_with(
        &format!("sh -c 'read -r line; echo '\"'\"'{answer}'\"'\"'; exec sleep 1000'"),
        &[],
    );
    let session = raw_initialize(&proxy.url);
    let text = "x".repeat(1024 * 1024);
    let posts: Vec<_> = (0..20)
        .map(|i| {
            let url = proxy.url.clone();
            let headers =
                format!("Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n");
            let body = json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": text}}})
            .to_string();
            std::thread::spawn(move || raw_post_with(&url, &headers, &body, Duration::from_secs(6)))
        })
        .collect();
    let mut refused = 0;
    for post in posts {
        let (_, response) = post.join().expect("the POST ran");
        if response.contains("too far behind") {
            refused += 1;
        }
    }
    assert!(refused >= 5, "{refused} refused");
}

/// The session's `_meta` rules hold through the proxy: a modern request whose `_meta` names no
/// version, or lacks client capabilities, gets 400 and -32602; one naming a version not served
/// gets 400 and -32022; a notification naming one gets 400 too. None reaches the child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_requests_are_refused_by_the_sessions_meta_rules() {
    let proxy = Proxy::start(&[]);
    let headers = "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: server/discover\r\n";
    let wait = Duration::from_secs(10);
    let cases = [
        (json!({}), -32602),
        (
            json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}),
            -32602,
        ),
        (
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
            -32602,
        ),
    ];
    for (params, code) in cases {
        let body =
            json!({"jsonrpc": "2.0", "id": 4, "method": "server/discover", "params": params});
        let (status, response) = raw_post_with(&proxy.url, headers, &body.to_string(), wait);
        assert_eq!(status, 400, "{params}: {response}");
        assert!(
            response.contains(&format!(r#""code":{code}"#)),
            "{response}"
        );
        assert!(response.contains(r#""id":4"#), "{response}");
    }
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2099-01-01",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let headers_2099 = "MCP-Protocol-Version: 2099-01-01\r\nMcp-Method: server/discover\r\n";
    let (status, response) = raw_post_with(&proxy.url, headers_2099, &body.to_string(), wait);
    assert_eq!(status, 400, "{response}");
    assert!(response.contains(r#""code":-32022"#), "{response}");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}});
    let (status, response) = raw_post_with(&proxy.url, headers_2099, &note.to_string(), wait);
    assert_eq!(status, 400, "{response}");
    // A good one is served.
    let body = json!({"jsonrpc": "2.0", "id": 6, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let (status, response) = raw_post_with(&proxy.url, headers, &body.to_string(), wait);
    assert_eq!(status, 200, "{response}");
    assert!(response.contains("supportedVersions"), "{response}");
}

/// `--auth-token-file` protects the proxy's HTTP side, in both eras; the secret is not passed to
/// the child (whose `whoami`, over stdio, sees no one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_with_a_token_file_needs_the_secret() {
    let file = std::env::temp_dir().join(format!("mcx-proxy-token-{}", std::process::id()));
    std::fs::write(&file, "proxy-secret\n").expect("written");
    let proxy = Proxy::start(&["--auth-token-file", file.to_str().expect("UTF-8")]);
    let _ = std::fs::remove_file(&file);
    assert!(
        proxy
            .lines()
            .iter()
            .any(|l| l.contains("requests need the secret in")),
        "{:?}",
        proxy.lines()
    );
    let wait = Duration::from_secs(20);
    let echo = json!({"text": "through"});
    let (status, response) = raw_modern_call(&proxy.url, "echo", echo.clone(), wait);
    assert_eq!(status, 401, "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{response}"
    );
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (status, response) = raw_post(&proxy.url, None, initialize);
    assert_eq!(status, 401, "{response}");
    assert!(
        !proxy
            .lines()
            .iter()
            .any(|l| l.contains("legacy session") && l.contains("started")),
        "a child started for a refused request: {:?}",
        proxy.lines()
    );

    let secret = "Authorization: Bearer proxy-secret\r\n";
    let (status, response) = raw_post_with(&proxy.url, secret, initialize, wait);
    assert_eq!(status, 200, "{response}");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "echo", "arguments": echo,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        },
    }});
    let headers = format!(
        "{secret}MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n"
    );
    let (status, response) = raw_post_with(&proxy.url, &headers, &body.to_string(), wait);
    assert_eq!(status, 200, "{response}");
    assert!(response.contains("through"), "{response}");
    let body = body.to_string().replace("\"echo\"", "\"whoami\"");
    let headers = headers.replace("Mcp-Name: echo", "Mcp-Name: whoami");
    let (status, response) = raw_post_with(&proxy.url, &headers, &body, wait);
    assert_eq!(status, 200, "{response}");
    assert!(response.contains("no one is authenticated"), "{response}");
}

/// `-v` says a one-shot command's listen stream ended when the command exits (how every
/// client that stops listening ends it), and keeps "cancelled" for a call whose client went away.
#[tokio::test]
async fn the_proxy_logs_a_one_shot_commands_end_as_an_end_and_a_real_cancel_as_one() {
    let proxy = Proxy::start(&[]);
    for command in [&["tools", "list"][..], &["ping"][..]] {
        let mut args = vec!["--url", proxy.url.as_str()];
        args.extend_from_slice(command);
        let out = crate::cli::mcx(&args);
        assert!(
            out.status.success(),
            "{command:?}: {}",
            crate::cli::stderr(&out)
        );
    }
    // Each command listened for notifications, and closed its listen stream when it ended.
    let ends = |proxy: &Proxy| {
        proxy
            .lines()
            .iter()
            .filter(|l| l.contains("listen stream") && l.contains("ended: the client closed it"))
            .count()
    };
    proxy
        .wait_for("of the second listen stream's end", |_| ends(&proxy) >= 2)
        .await;
    let lines = proxy.lines();
    assert!(
        !lines.iter().any(|l| l.contains("cancelled")),
        "a normal end logged as a cancellation:\n{}",
        lines.join("\n")
    );

    // A call whose client goes away before the answer: cancelled, and said so.
    let mut call = Command::new(MCX)
        .args([
            "--url",
            &proxy.url,
            "tools",
            "call",
            "countdown",
            "--args",
            r#"{"steps": 20, "delay_ms": 300}"#,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcx runs");
    let mut progress = BufReader::new(call.stderr.take().expect("stderr"));
    let mut line = String::new();
    progress.read_line(&mut line).expect("progress on stderr");
    assert!(line.starts_with("progress 1/20"), "{line}");
    call.kill().expect("the client is killed");
    call.wait().expect("the client ends");
    let cancelled = proxy
        .wait_for("of the cancellation", |l| {
            l.contains("cancelled: the HTTP stream closed")
        })
        .await;
    assert!(
        cancelled.starts_with("mcx proxy: modern request "),
        "{cancelled}"
    );
}
