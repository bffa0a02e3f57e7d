//! End to end over real child processes: the client facade (`modelctx-client`) and the server
//! facade's stdio server (`src/bin/facade-stdio-server.rs`, which can also misbehave as a
//! process: ignore stdin closing or SIGTERM, flood stderr), and raw lines where a test plays
//! the client or needs a peer that does what no server does (`src/bin/stdio-peer.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelctx_client::{Client, ClientBuilder, CloseReason, Error, ProtocolVersion};
use modelctx_stdio::child::MAX_STDERR_LINE;
use modelctx_stdio::{ChildTransport, ServerCommand, Stderr, StoppedBy};
use serde_json::{Value, json};

/// The server facade over stdio.
const SERVER: &str = env!("CARGO_BIN_EXE_facade-stdio-server");
/// The scripted peer.
const PEER: &str = env!("CARGO_BIN_EXE_stdio-peer");

/// Everything the child wrote to stderr, line by line.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

impl Captured {
    fn sink(&self) -> Stderr {
        let lines = self.0.clone();
        Stderr::Callback(Arc::new(move |line: &str| {
            lines.lock().unwrap().push(line.to_owned())
        }))
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    fn contains(&self, text: &str) -> bool {
        self.lines().iter().any(|l| l.contains(text))
    }

    /// The server's `ended: ...` line, once the stderr reader has passed it on (it may come
    /// after the process has been reaped).
    async fn ended(&self) -> String {
        within("the `ended:` line on stderr", async {
            loop {
                if let Some(line) = self.lines().into_iter().find(|l| l.starts_with("ended:")) {
                    return line;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }
}

/// The facade's stdio server with `args`, its stderr written to `stderr`; shutdown waits 2 s
/// for it to exit after stdin closes, then 300 ms after SIGTERM.
fn command(args: &[&str], stderr: &Captured) -> ServerCommand {
    ServerCommand::new(SERVER)
        .args(args)
        .stderr(stderr.sink())
        .shutdown_waits(Duration::from_secs(2), Duration::from_millis(300))
}

/// Fails the test instead of hanging it.
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within 30 s"))
}

/// A client pinned to 2025-11-25 (no probe).
fn legacy() -> ClientBuilder {
    modern().protocol_version(ProtocolVersion::V2025_11_25)
}

/// A client that probes (the facade's server speaks both eras: the modern one is found).
fn modern() -> ClientBuilder {
    Client::builder("stdio-test-client", "1.0.0")
}

/// The text of a `tools/call` result's first block.
fn text_of(result: &modelctx_client::model::CallToolResult) -> &str {
    match result.content.first() {
        Some(modelctx_client::model::ContentBlock::TextContent(t)) => &t.text,
        other => panic!("not a text block: {other:?}"),
    }
}

/// The text of a raw `tools/call` result's first block.
fn raw_text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// Reads the next line from the child, which must be a JSON message.
async fn next_json(child: &mut ChildTransport) -> Value {
    match within("a line", child.reader.next_line()).await {
        Ok(Some(Ok(line))) => serde_json::from_str(line.as_str()).unwrap(),
        other => panic!("expected a message, got {other:?}"),
    }
}

/// A raw conversation: initialize at 2025-11-25 and initialized.
async fn raw_initialized(child: &mut ChildTransport) {
    child
        .writer
        .send(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            }}),
        )
        .await
        .unwrap();
    let reply = next_json(child).await;
    assert_eq!(reply["result"]["protocolVersion"], "2025-11-25", "{reply}");
    child
        .writer
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_in_each_era_over_a_child_process() {
    for builder in [legacy(), modern()] {
        let stderr = Captured::default();
        let client = within("connect", builder.connect_stdio(command(&[], &stderr)))
            .await
            .unwrap();
        let tools = within("list", client.list_tools(None)).await.unwrap();
        assert_eq!(tools.tools.len(), 5, "{tools:?}");
        let echoed = within(
            "echo",
            client.call_tool("echo", json!({"text": "h\u{e9}llo\nworld"})),
        )
        .await
        .unwrap();
        assert_eq!(text_of(&echoed), "h\u{e9}llo\nworld");
        within("close", client.close()).await;
        let report = client.server_exit().expect("reaped");
        assert_eq!(report.by, StoppedBy::Exit);
        assert!(report.status.success(), "{report:?}");
        assert_eq!(stderr.ended().await, "ended: Ok(())");
        // Pipes are read and written through the reactor, not the blocking pool.
        assert!(
            stderr.contains("direct: stdin true, stdout true"),
            "{:?}",
            stderr.lines()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_megabyte_message_gets_an_error_and_the_session_goes_on() {
    let stderr = Captured::default();
    ten_megabytes_against(command(&[], &stderr).spawn().unwrap()).await;

    // The other way: the client reads a 10 MB answer (from a peer that sends one) as an
    // over-long line, drops it, and goes on.
    let peer = ServerCommand::new(PEER).stderr(Captured::default().sink());
    let client = within(
        "connect",
        legacy()
            .request_timeout(Some(Duration::from_secs(2)))
            .connect_stdio(peer),
    )
    .await
    .unwrap();
    let big = within("big", client.call_tool("big", json!({"bytes": 10 << 20}))).await;
    assert!(matches!(big, Err(Error::Timeout(_))), "{big:?}");
    let echoed = within("echo", client.call_tool("echo", json!({"text": "after"})))
        .await
        .unwrap();
    assert_eq!(text_of(&echoed), "after");
    within("close", client.close()).await;
}

/// A 10 MB line gets a -32600 naming the 4 MiB limit, and the next message its answer.
async fn ten_megabytes_against(mut child: ChildTransport) {
    raw_initialized(&mut child).await;
    let huge = "a".repeat(10 << 20);
    child
        .writer
        .send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": huge}}}))
        .await
        .unwrap();
    child
        .writer
        .send(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .await
        .unwrap();
    let error = next_json(&mut child).await;
    assert_eq!(error["error"]["code"], -32600, "{error}");
    assert_eq!(error["id"], Value::Null);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4194304 bytes"),
        "{error}"
    );
    let pong = next_json(&mut child).await;
    assert_eq!(
        (pong["id"].clone(), pong["result"].clone()),
        (json!(2), json!({}))
    );
    let report = within("shutdown", child.shutdown()).await.unwrap();
    assert_eq!(report.by, StoppedBy::Exit);
}

/// The garbage and line-length rules of the shipped stdio transport, under the server facade
/// (`Server::serve_lines` over `stdio_with_codec`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_gets_error_responses_and_the_session_goes_on() {
    let stderr = Captured::default();
    garbage_against(command(&["--max-line", "4096"], &stderr), &stderr).await;
}

/// `command` writes its stderr to `stderr`.
async fn garbage_against(command: ServerCommand, stderr: &Captured) {
    let mut child = command.spawn().unwrap();
    raw_initialized(&mut child).await;
    // (line, expected code, expected id)
    let garbage: &[(&[u8], i64, Value)] = &[
        (b"\xff\xfe\x00garbage", -32700, Value::Null),
        (b"{not json", -32700, Value::Null),
        (b"[1, 2", -32700, Value::Null),
        (br#"{"jsonrpc":"2.0","id":7}"#, -32600, json!(7)),
        (
            br#"{"jsonrpc":"1.0","id":"s","method":"ping"}"#,
            -32600,
            json!("s"),
        ),
        (br#"{"jsonrpc":"2.0","id":9,"method":5}"#, -32600, json!(9)),
        (b"42", -32600, Value::Null),
        (b"[]", -32600, Value::Null),
        (&[b'{'; 5000], -32600, Value::Null),
        (
            br#"{"jsonrpc":"2.0","id":10,"method":"no/such"}"#,
            -32601,
            json!(10),
        ),
    ];
    for (line, ..) in garbage {
        child.writer.feed_raw(line).unwrap();
    }
    child.writer.feed_raw(b"").unwrap();
    child.writer.feed_raw(b"   \t").unwrap();
    child
        .writer
        .send(&json!({"jsonrpc": "2.0", "id": 11, "method": "ping"}))
        .await
        .unwrap();
    for (line, code, id) in garbage {
        let reply = next_json(&mut child).await;
        assert_eq!(
            reply["error"]["code"],
            *code,
            "{:?}: {reply}",
            String::from_utf8_lossy(line)
        );
        assert_eq!(reply["id"], *id, "{reply}");
    }
    let pong = next_json(&mut child).await;
    assert_eq!(
        (pong["id"].clone(), pong["result"].clone()),
        (json!(11), json!({}))
    );
    let report = within("shutdown", child.shutdown()).await.unwrap();
    assert!(report.status.success());
    assert!(!stderr.contains("panicked"), "{:?}", stderr.lines());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_exits_mid_request_fails_every_pending_request_at_once() {
    let server = command(&["--client-tests"], &Captured::default());
    let client = within("connect", legacy().connect_stdio(server))
        .await
        .unwrap();
    // Calls that wait until they are cancelled.
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call_tool("wait", json!({})).await })
        })
        .collect();
    // Let the waiting calls reach the server before it dies.
    within("echo", client.call_tool("echo", json!({"text": "x"})))
        .await
        .unwrap();
    let exit = within("exit", client.call_tool("crash", json!({}))).await;
    let mut outcomes = vec![exit];
    for task in waiting {
        outcomes.push(within("wait", task).await.unwrap());
    }
    for outcome in &outcomes {
        match outcome {
            Err(Error::Closed(CloseReason::Transport(why))) => {
                assert!(why.contains("exit status: 3"), "{why}")
            }
            other => panic!("expected a transport close, got {other:?}"),
        }
    }
    // The message says what happened.
    let message = outcomes[0].as_ref().unwrap_err().to_string();
    assert!(message.contains("facade-stdio-server"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_escalates_to_sigterm_then_sigkill_and_leaves_no_zombie() {
    for (args, stage) in [
        (&["--ignore-stdin-close"][..], StoppedBy::Terminate),
        (
            &["--ignore-stdin-close", "--ignore-sigterm"][..],
            StoppedBy::Kill,
        ),
    ] {
        let stderr = Captured::default();
        let mut child = command(args, &stderr)
            .shutdown_waits(Duration::from_millis(300), Duration::from_millis(300))
            .spawn()
            .unwrap();
        raw_initialized(&mut child).await;
        let pid = child.process.id().unwrap();
        let report = within("shutdown", child.shutdown()).await.unwrap();
        assert_eq!(report.by, stage, "{args:?}: {report:?}");
        assert!(!report.status.success());
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            let signal = if stage == StoppedBy::Terminate { 15 } else { 9 };
            assert_eq!(report.status.signal(), Some(signal), "{report:?}");
            // Reaped: no zombie left under this pid.
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            assert!(!state.contains(") Z "), "pid {pid} is a zombie: {state}");
        }
        if stage == StoppedBy::Kill {
            assert!(stderr.contains("ignoring SIGTERM"), "{:?}", stderr.lines());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_flooding_stderr_neither_blocks_nor_grows_memory() {
    let count = Arc::new(Mutex::new((0usize, 0usize, false)));
    let seen = count.clone();
    let server = ServerCommand::new(SERVER)
        .args(["--stderr-flood", "20"])
        .stderr(Stderr::Callback(Arc::new(move |line: &str| {
            let mut seen = seen.lock().unwrap();
            seen.0 += 1;
            seen.1 = seen.1.max(line.len());
            seen.2 |= line == "flood done";
        })))
        .shutdown_waits(Duration::from_secs(2), Duration::from_millis(300));
    let client = within("connect", legacy().connect_stdio(server))
        .await
        .unwrap();
    for i in 0..200 {
        let text = format!("call {i}");
        let echoed = within("echo", client.call_tool("echo", json!({"text": text})))
            .await
            .unwrap();
        assert_eq!(text_of(&echoed), text);
    }
    // Wait for the whole flood to be read (polled: the callback runs on the stderr reader).
    within("flood", async {
        while !count.lock().unwrap().2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    within("close", client.close()).await;
    let (lines, longest, done) = *count.lock().unwrap();
    assert!(done);
    assert!(lines > 1000, "{lines}");
    assert_eq!(longest, MAX_STDERR_LINE);
}

/// Closing stdin is how a client shuts a stdio server down: the facade's server ends the
/// connection (the calls still running are cancelled, not answered), writes what it had to
/// say before, and exits 0 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_eof_ends_the_server_at_once_and_cancels_the_calls_still_running() {
    let stderr = Captured::default();
    let mut child = command(&[], &stderr).spawn().unwrap();
    raw_initialized(&mut child).await;
    // Answered before stdin ends, then calls that run until they are cancelled.
    child
        .writer
        .feed(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "first"}}}))
        .unwrap();
    for id in 2..=4 {
        child
            .writer
            .feed(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "wait", "arguments": {}}}))
            .unwrap();
    }
    child.writer.flush().await.unwrap();
    let first = next_json(&mut child).await;
    assert_eq!(first["id"], json!(1), "{first}");
    assert_eq!(raw_text_of(&first["result"]), "first", "{first}");
    let ChildTransport {
        mut reader,
        writer,
        mut process,
        ..
    } = child;
    drop(writer);
    // Nothing more, then the end of stdout: no answer to a call that was cancelled.
    let rest = within("the end of stdout", reader.next_line())
        .await
        .unwrap();
    assert!(rest.is_none(), "{rest:?}");
    let status = within("exit", process.wait()).await.unwrap();
    assert!(status.success());
    assert_eq!(stderr.ended().await, "ended: Ok(())");
    // Each of the three calls still running saw its cancellation (dropped handlers would not
    // have said so), before the server said it ended.
    let lines = stderr.lines();
    let ended = lines.iter().position(|l| l.starts_with("ended:")).unwrap();
    let cancelled = |lines: &[String]| lines.iter().filter(|l| *l == "CANCELLED wait").count();
    assert_eq!(cancelled(&lines[..ended]), 3, "{lines:?}");
    assert_eq!(cancelled(&lines), 3, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_the_server_cleanly() {
    let stderr = Captured::default();
    let child = command(&[], &stderr).spawn().unwrap();
    let ChildTransport {
        reader,
        mut writer,
        mut process,
        ..
    } = child;
    drop(reader);
    writer
        .send(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            }}),
        )
        .await
        .unwrap();
    // It exits while its stdin is still open: closed stdout ended it.
    let status = within("exit", process.wait()).await.unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(stderr.ended().await, "ended: Ok(())");
    assert!(!stderr.contains("panicked"), "{:?}", stderr.lines());
    drop(writer);
}

/// The client facade says how its server process stopped once the connection is closed: on
/// its own after stdin closed (the facade's stdio server), or by SIGTERM (a server that keeps
/// running after stdin closes), with its exit status.
#[tokio::test]
async fn the_client_facade_reports_how_the_server_process_stopped() {
    use modelctx_client::StoppedBy;

    let facade =
        ServerCommand::new(SERVER).shutdown_waits(Duration::from_secs(5), Duration::from_secs(5));
    let client = within("connect", legacy().connect_stdio(facade))
        .await
        .unwrap();
    within("ping", client.ping()).await.unwrap();
    assert_eq!(client.server_exit(), None, "still running");
    within("close", client.close()).await;
    let exit = client.server_exit().expect("reaped");
    assert_eq!(exit.by, StoppedBy::Exit);
    assert!(exit.status.success(), "{:?}", exit.status);

    let stderr = Captured::default();
    let stubborn = command(&["--ignore-stdin-close"], &stderr)
        .shutdown_waits(Duration::from_millis(300), Duration::from_millis(300));
    let client = within("connect", legacy().connect_stdio(stubborn))
        .await
        .unwrap();
    within("ping", client.ping()).await.unwrap();
    within("close", client.close()).await;
    let exit = client.server_exit().expect("reaped");
    assert_eq!(exit.by, StoppedBy::Terminate);
    assert!(!exit.status.success(), "{:?}", exit.status);
}
