//! End to end over real child processes: `modelctx-stdio` carrying `modelctx-session` both ways,
//! with a test server (`src/bin/stdio-test-server.rs`) that misbehaves on request.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelctx_session::{ClientConfig, CloseReason, EraChoice, ProtocolVersion, RequestError};
use modelctx_stdio::child::MAX_STDERR_LINE;
use modelctx_stdio::{ChildTransport, ServerCommand, Stderr, StoppedBy};
use modelctx_tests::stdio::Client;
use serde_json::{Value, json};

const SERVER: &str = env!("CARGO_BIN_EXE_stdio-test-server");

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
}

fn command(args: &[&str], stderr: &Captured) -> ServerCommand {
    ServerCommand::new(SERVER)
        .args(args)
        .stderr(stderr.sink())
        .shutdown_waits(Duration::from_millis(300), Duration::from_millis(300))
}

/// Fails the test instead of hanging it.
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within 30 s"))
}

fn legacy() -> ClientConfig {
    let mut config = ClientConfig::new("stdio-test-client", "1.0.0", Default::default());
    config.era = EraChoice::Legacy;
    config.versions = vec![ProtocolVersion::V2025_11_25];
    config
}

fn modern() -> ClientConfig {
    ClientConfig::new("stdio-test-client", "1.0.0", Default::default())
}

fn call(name: &str, arguments: Value) -> Option<Value> {
    Some(json!({"name": name, "arguments": arguments}))
}

fn text_of(result: &Value) -> &str {
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
    for config in [legacy(), modern()] {
        let stderr = Captured::default();
        let child = command(&[], &stderr).spawn().unwrap();
        let client = within("connect", Client::connect(config, child))
            .await
            .unwrap();
        let tools = within("list", client.request("tools/list", None))
            .await
            .unwrap();
        assert_eq!(tools["tools"].as_array().map(Vec::len), Some(5));
        let echoed = within(
            "echo",
            client.request(
                "tools/call",
                call("echo", json!({"text": "h\u{e9}llo\nworld"})),
            ),
        )
        .await
        .unwrap();
        assert_eq!(text_of(&echoed), "h\u{e9}llo\nworld");
        let report = within("shutdown", client.shutdown()).await.unwrap();
        assert_eq!(report.by, StoppedBy::Exit);
        assert!(report.status.success(), "{report:?}");
        assert!(
            stderr.contains("ended: Ok(InputClosed)"),
            "{:?}",
            stderr.lines()
        );
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
    let child = command(&[], &stderr).spawn().unwrap();
    ten_megabytes_against(child).await;
    // The same rule of the shipped transport under the server facade.
    let facade = ServerCommand::new(env!("CARGO_BIN_EXE_facade-stdio-server"))
        .shutdown_waits(Duration::from_secs(2), Duration::from_millis(300));
    ten_megabytes_against(facade.spawn().unwrap()).await;

    // The other way: the client reads a 10 MB answer as an over-long line, drops it, and goes on.
    let child = command(&[], &Captured::default()).spawn().unwrap();
    let mut config = legacy();
    config.request_options.timeout = Some(Duration::from_secs(2));
    let client = within("connect", Client::connect(config, child))
        .await
        .unwrap();
    let big = within(
        "big",
        client.request("tools/call", call("big", json!({"bytes": 10 << 20}))),
    )
    .await;
    assert!(matches!(big, Err(RequestError::Timeout(_))), "{big:?}");
    let echoed = within(
        "echo",
        client.request("tools/call", call("echo", json!({"text": "after"}))),
    )
    .await
    .unwrap();
    assert_eq!(text_of(&echoed), "after");
    within("shutdown", client.shutdown()).await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_gets_error_responses_and_the_session_goes_on() {
    let stderr = Captured::default();
    garbage_against(command(&["--max-line", "4096"], &stderr), &stderr).await;
}

/// The garbage and line-length rules of the shipped stdio transport, under the server facade
/// (`Server::serve_lines` over `stdio_with_codec`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_gets_error_responses_from_the_facade_server_and_the_session_goes_on() {
    let stderr = Captured::default();
    let facade = ServerCommand::new(env!("CARGO_BIN_EXE_facade-stdio-server"))
        .args(["--max-line", "4096"])
        .stderr(stderr.sink())
        .shutdown_waits(Duration::from_secs(2), Duration::from_millis(300));
    garbage_against(facade, &stderr).await;
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
    let child = command(&[], &Captured::default()).spawn().unwrap();
    let client = Arc::new(
        within("connect", Client::connect(legacy(), child))
            .await
            .unwrap(),
    );
    let slow: Vec<_> = (0..3)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .request("tools/call", call("slow", json!({"ms": 60_000})))
                    .await
            })
        })
        .collect();
    // Let the slow calls reach the server before it dies.
    within(
        "echo",
        client.request("tools/call", call("echo", json!({"text": "x"}))),
    )
    .await
    .unwrap();
    let exit = within(
        "exit",
        client.request("tools/call", call("exit", json!({"code": 3}))),
    )
    .await;
    let mut outcomes = vec![exit];
    for task in slow {
        outcomes.push(within("slow", task).await.unwrap());
    }
    for outcome in &outcomes {
        match outcome {
            Err(RequestError::Closed(CloseReason::Transport(why))) => {
                assert!(why.contains("exit status: 3"), "{why}")
            }
            other => panic!("expected a transport close, got {other:?}"),
        }
    }
    // The message says what happened.
    let message = outcomes[0].as_ref().unwrap_err().to_string();
    assert!(message.contains("stdio-test-server"), "{message}");
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
        let mut child = command(args, &stderr).spawn().unwrap();
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
    let child = ServerCommand::new(SERVER)
        .args(["--stderr-flood", "20"])
        .stderr(Stderr::Callback(Arc::new(move |line: &str| {
            let mut seen = seen.lock().unwrap();
            seen.0 += 1;
            seen.1 = seen.1.max(line.len());
            seen.2 |= line == "flood done";
        })))
        .spawn()
        .unwrap();
    let client = within("connect", Client::connect(legacy(), child))
        .await
        .unwrap();
    for i in 0..200 {
        let text = format!("call {i}");
        let echoed = within(
            "echo",
            client.request("tools/call", call("echo", json!({"text": text}))),
        )
        .await
        .unwrap();
        assert_eq!(text_of(&echoed), text);
    }
    // Wait for the whole flood to be read.
    within("flood", async {
        while !count.lock().unwrap().2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    within("shutdown", client.shutdown()).await.unwrap();
    let (lines, longest, done) = *count.lock().unwrap();
    assert!(done);
    assert!(lines > 1000, "{lines}");
    assert_eq!(longest, MAX_STDERR_LINE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_eof_ends_the_server_after_in_flight_responses_are_flushed() {
    let stderr = Captured::default();
    let mut child = command(&[], &stderr).spawn().unwrap();
    raw_initialized(&mut child).await;
    for id in 1..=3 {
        child
            .writer
            .feed(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "slow", "arguments": {"ms": 200 * id}}}))
            .unwrap();
    }
    child.writer.flush().await.unwrap();
    let ChildTransport {
        mut reader,
        writer,
        mut process,
        ..
    } = child;
    drop(writer);
    let mut ids = Vec::new();
    while let Some(line) = within("a line", reader.next_line()).await.unwrap() {
        let reply: Value = serde_json::from_str(line.unwrap().as_str()).unwrap();
        assert_eq!(text_of(&reply["result"]), "slept", "{reply}");
        ids.push(reply["id"].as_i64().unwrap());
    }
    assert_eq!(ids, [1, 2, 3]);
    let status = within("exit", process.wait()).await.unwrap();
    assert!(status.success());
    assert!(
        stderr.contains("ended: Ok(InputClosed)"),
        "{:?}",
        stderr.lines()
    );
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
    let status = within("exit", process.wait()).await.unwrap();
    assert!(status.success(), "{status:?}");
    // Give the stderr reader a moment to pass the last line on.
    within("stderr", async {
        while !stderr.contains("ended:") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        stderr.contains("ended: Ok(OutputClosed)"),
        "{:?}",
        stderr.lines()
    );
    assert!(!stderr.contains("panicked"), "{:?}", stderr.lines());
}

/// The client facade says how its server process stopped once the connection is closed: on
/// its own after stdin closed (the facade's stdio server), or by SIGTERM (a server that keeps
/// running after stdin closes), with its exit status.
#[tokio::test]
async fn the_client_facade_reports_how_the_server_process_stopped() {
    use modelctx_client::{Client, StoppedBy};
    const FACADE_SERVER: &str = env!("CARGO_BIN_EXE_facade-stdio-server");

    let facade = ServerCommand::new(FACADE_SERVER)
        .shutdown_waits(Duration::from_secs(5), Duration::from_secs(5));
    let client = within(
        "connect",
        Client::builder("t", "1")
            .protocol_version(ProtocolVersion::V2025_11_25)
            .connect_stdio(facade),
    )
    .await
    .unwrap();
    within("ping", client.ping()).await.unwrap();
    assert_eq!(client.server_exit(), None, "still running");
    within("close", client.close()).await;
    let exit = client.server_exit().expect("reaped");
    assert_eq!(exit.by, StoppedBy::Exit);
    assert!(exit.status.success(), "{:?}", exit.status);

    let stderr = Captured::default();
    let stubborn = command(&["--ignore-stdin-close"], &stderr);
    let client = within(
        "connect",
        Client::builder("t", "1")
            .protocol_version(ProtocolVersion::V2025_11_25)
            .connect_stdio(stubborn),
    )
    .await
    .unwrap();
    within("ping", client.ping()).await.unwrap();
    within("close", client.close()).await;
    let exit = client.server_exit().expect("reaped");
    assert_eq!(exit.by, StoppedBy::Terminate);
    assert!(!exit.status.success(), "{:?}", exit.status);
}
