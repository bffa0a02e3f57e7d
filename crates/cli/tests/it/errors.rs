//! How `mcx` fails: exit statuses by kind, timeouts that cover connecting, messages that say
//! what failed, a server's stray stdout lines reported, errors as JSON under `--json`.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cli::{MCX, TempDir, demo_stdio, mcx, serve_demo_with, serve_http, stderr, stdout};

/// The exit status.
fn status(output: &Output) -> i32 {
    output.status.code().expect("exited")
}

/// A shell script in `dir` run as a stdio server (`sh PATH`).
fn script(dir: &TempDir, name: &str, body: &str) -> String {
    let path = dir.0.join(name);
    std::fs::write(&path, body).expect("script written");
    format!("sh {}", path.display())
}

/// A legacy stdio server with one tool, `fail`, whose result is an error (`isError: true`);
/// anything else but `initialize` is answered with -32601.
fn failing_tool_server(dir: &TempDir) -> String {
    script(
        dir,
        "failing.sh",
        r#"while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  [ -z "$id" ] && continue
  case "$line" in
    *'"method":"initialize"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"failing","version":"1"}}}\n' "$id" ;;
    *'"method":"tools/call"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"the disk is full"}],"isError":true}}\n' "$id" ;;
    *)
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}\n' "$id" ;;
  esac
done
"#,
    )
}

/// A stdio server that reads every line and answers none (its stdout stays open).
const SILENT: &str = "while IFS= read -r line; do :; done\n";

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

#[test]
fn each_kind_of_failure_has_its_exit_status() {
    let dir = TempDir::new("exit-codes");
    let demo = demo_stdio();
    // 0: done.
    let out = mcx(&["--stdio", &demo, "ping"]);
    assert_eq!(status(&out), 0, "{}", stderr(&out));
    // 2: usage (mcx's own checks, and clap's).
    for args in [
        &["--stdio", &demo, "tools", "call", "echo", "--args", "{"][..],
        &["tools", "list"],
        &[
            "--url",
            "http://127.0.0.1:9/mcp",
            "--header",
            "no colon",
            "ping",
        ],
        &["tools", "frobnicate"],
    ] {
        let out = mcx(args);
        assert_eq!(status(&out), 2, "{args:?}: {}", stderr(&out));
    }
    // 3: the server cannot be started or reached.
    let refused = format!("http://127.0.0.1:{}/mcp", closed_port());
    for args in [
        &["--stdio", "/nonexistent/server", "tools", "list"][..],
        &["--url", &refused, "tools", "list"],
    ] {
        let out = mcx(args);
        assert_eq!(status(&out), 3, "{args:?}: {}", stderr(&out));
    }
    // 4: the server answered with a JSON-RPC error (an unknown tool: -32602); a tool it does
    // not list is its answer too, whether it is called or shown.
    let out = mcx(&["--stdio", &demo, "tools", "call", "nope"]);
    assert_eq!(status(&out), 4, "{}", stderr(&out));
    assert!(stderr(&out).contains("unknown tool"), "{}", stderr(&out));
    let out = mcx(&["--stdio", &demo, "tools", "show", "nope"]);
    assert_eq!(status(&out), 4, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "mcx: no tool `nope` on this server (`mcx tools list` lists them)\n"
    );
    // 5: the tool ran and failed.
    let out = mcx(&[
        "--stdio",
        &failing_tool_server(&dir),
        "tools",
        "call",
        "fail",
    ]);
    assert_eq!(status(&out), 5, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "mcx: tool `fail` failed: the disk is full\n",
        "{out:?}"
    );
    assert!(stdout(&out).is_empty());
}

/// Runs `mcx args` and checks that it ended, with status 3, well before the 60 s it took
/// before `--timeout` covered connecting; its stderr.
fn ends_in_time(args: &[&str]) -> String {
    let start = Instant::now();
    let out = mcx(args);
    let took = start.elapsed();
    assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
    assert!(
        took >= Duration::from_millis(1900),
        "{args:?} took {took:?}"
    );
    assert_eq!(status(&out), 3, "{args:?}: {}", stderr(&out));
    stderr(&out)
}

#[test]
fn timeout_covers_connecting_to_a_silent_stdio_server() {
    let dir = TempDir::new("silent-stdio");
    let silent = script(&dir, "silent.sh", SILENT);
    let err = ends_in_time(&["--timeout", "2", "--stdio", &silent, "tools", "list"]);
    assert_eq!(
        err,
        format!(
            "mcx: cannot connect to `{silent}`: no answer from the server within 2 s \
             (server/discover)\n"
        )
    );
}

#[test]
fn timeout_covers_connecting_to_a_silent_http_server() {
    // Connections are accepted (by the system: the backlog) and never answered.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    let err = ends_in_time(&["--timeout", "2", "--url", &url, "ping"]);
    assert!(
        err.starts_with(&format!(
            "mcx: cannot connect to {url}: no answer from the server within 2 s ("
        )),
        "{err}"
    );
    drop(listener);
}

#[test]
fn a_wrong_path_is_reported_as_a_404_not_as_a_failed_fallback() {
    let server = serve_http();
    let wrong = server.url.replace("/mcp", "/wrong");
    let out = mcx(&["--url", &wrong, "tools", "list"]);
    assert_eq!(status(&out), 3, "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(
        err,
        format!(
            "mcx: cannot connect to {wrong}: the endpoint answered HTTP 404 Not Found: nothing \
             serves MCP at this URL (is the path right?)\n"
        )
    );
    assert!(!err.contains("SSE") && !err.contains("fallback"), "{err}");
}

#[test]
fn a_refused_connection_says_so_without_a_handshake() {
    let url = format!("http://127.0.0.1:{}/mcp", closed_port());
    let out = mcx(&["--url", &url, "tools", "list"]);
    assert_eq!(
        stderr(&out),
        format!("mcx: cannot connect to {url}: connection refused\n")
    );
    // A command that cannot start: what failed, once, no handshake either.
    let out = mcx(&["--stdio", "/nonexistent/server --flag", "tools", "list"]);
    assert_eq!(status(&out), 3);
    assert_eq!(
        stderr(&out),
        "mcx: cannot start `/nonexistent/server`: No such file or directory\n"
    );
    let out = mcx(&["--stdio", "nonexistent-cmd-xyz", "tools", "list", "--json"]);
    assert_eq!(
        json_error(&out),
        json!({"error": {
            "kind": "connection",
            "message": "cannot start `nonexistent-cmd-xyz`: No such file or directory",
        }})
    );
}

#[test]
fn lines_a_server_writes_that_are_not_json_rpc_are_reported_and_the_command_succeeds() {
    let dir = TempDir::new("stray-lines");
    // A banner, then a long line with an escape sequence, then the demo server.
    let noisy = script(
        &dir,
        "noisy.sh",
        &format!(
            "echo 'Demo server v1 starting...'\nprintf '\\033[31m%0300d\\n' 0\nexec {MCX} serve demo --stdio\n"
        ),
    );
    let out = mcx(&[
        "--stdio",
        &noisy,
        "tools",
        "call",
        "echo",
        "--args",
        r#"{"text": "hi"}"#,
    ]);
    assert_eq!(status(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "hi\n");
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines[0], "mcx: the server wrote a line that is not JSON-RPC: Demo server v1 starting...",
        "{err}"
    );
    // The first 200 characters, escaped (the ESC of the 5-character `\x1b[31m` counts as one).
    assert_eq!(
        lines[1],
        format!(
            "mcx: the server wrote a line that is not JSON-RPC: \\x1b[31m{}...",
            "0".repeat(195)
        ),
        "{err}"
    );
    assert!(!err.contains('\u{1b}'), "a raw ESC: {err:?}");
}

/// The `--json` error on stdout, with nothing on stderr.
fn json_error(output: &Output) -> Value {
    assert!(stderr(output).is_empty(), "stderr: {}", stderr(output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}

#[test]
fn under_json_a_failure_is_one_json_error_on_stdout() {
    let dir = TempDir::new("json-errors");
    let demo = demo_stdio();
    let out = mcx(&["--stdio", &demo, "tools", "call", "nope", "--json"]);
    assert_eq!(status(&out), 4);
    let error = json_error(&out);
    assert_eq!(error["error"]["kind"], "protocol");
    assert_eq!(error["error"]["code"], -32602);
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown tool")),
        "{error}"
    );
    assert_eq!(error.as_object().map(|o| o.len()), Some(1), "{error}");

    let url = format!("http://127.0.0.1:{}/mcp", closed_port());
    let out = mcx(&["--url", &url, "tools", "list", "--json"]);
    assert_eq!(status(&out), 3);
    assert_eq!(
        json_error(&out),
        json!({"error": {
            "kind": "connection",
            "message": format!("cannot connect to {url}: connection refused"),
        }})
    );

    let out = mcx(&["tools", "list", "--json"]);
    assert_eq!(status(&out), 2);
    assert_eq!(json_error(&out)["error"]["kind"], "usage");

    let out = mcx(&[
        "--stdio",
        &failing_tool_server(&dir),
        "tools",
        "call",
        "fail",
        "--json",
    ]);
    assert_eq!(status(&out), 5);
    let error = json_error(&out);
    assert_eq!(error["error"]["kind"], "tool");
    assert_eq!(
        error["error"]["message"],
        "tool `fail` failed: the disk is full"
    );
    assert_eq!(error["error"]["result"]["isError"], true);

    let silent = script(&dir, "silent.sh", SILENT);
    let out = mcx(&["--timeout", "1", "--stdio", &silent, "ping", "--json"]);
    assert_eq!(status(&out), 3);
    assert_eq!(json_error(&out)["error"]["kind"], "timeout");
}

#[test]
fn json_is_refused_by_the_commands_that_ignore_it() {
    for args in [
        &["demo", "--json"][..],
        &["serve", "demo", "--json"],
        &["proxy", "--stdio", "x", "--listen", "127.0.0.1:0", "--json"],
    ] {
        let out = mcx(args);
        assert_eq!(status(&out), 2, "{args:?}");
        assert!(
            stderr(&out).contains("unexpected argument '--json'"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(stdout(&out).is_empty());
    }
}

#[test]
fn the_help_lists_the_exit_statuses() {
    let out = mcx(&["--help"]);
    let help = stdout(&out);
    for line in [
        "Exit status:",
        "2    usage",
        "3    connection",
        "4    protocol",
        "5    tool",
        "130  interrupted",
    ] {
        assert!(help.contains(line), "{line} missing from {help}");
    }
}

#[test]
fn under_json_clap_usage_errors_are_json_too_and_help_is_not() {
    // A client command with --json: clap's refusal is the JSON usage error, alone on stdout.
    for (args, message) in [
        (
            &["--url", "http://127.0.0.1:9/mcp", "tools", "--json", "call"][..],
            "the following required arguments were not provided: <NAME>",
        ),
        (
            &["--stdio", "x", "ping", "--json", "--bogus"],
            "unexpected argument '--bogus' found",
        ),
        (
            &["--timeout", "soon", "tools", "list", "--json"],
            "invalid value 'soon' for '--timeout <SECONDS>': invalid digit found in string",
        ),
    ] {
        let out = mcx(args);
        assert_eq!(status(&out), 2, "{args:?}");
        assert_eq!(
            json_error(&out),
            json!({"error": {"kind": "usage", "message": message}}),
            "{args:?}"
        );
    }
    // Without --json, or where --json is not an option: clap's text on stderr.
    for args in [
        &["--url", "http://127.0.0.1:9/mcp", "tools", "call"][..],
        &["--json", "tools", "list"],
    ] {
        let out = mcx(args);
        assert_eq!(status(&out), 2, "{args:?}");
        assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
        assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));
    }
    // Help and version are printed as usual, even with --json.
    let out = mcx(&["tools", "list", "--json", "--help"]);
    assert_eq!(status(&out), 0);
    assert!(
        stdout(&out).starts_with("List the tools"),
        "{}",
        stdout(&out)
    );
    let out = mcx(&["--version"]);
    assert_eq!(status(&out), 0);
    assert!(stdout(&out).starts_with("mcx "), "{}", stdout(&out));
}

/// Whether process `pid` has ended (gone, or a zombie left for its new parent to reap).
fn ended(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

#[test]
fn a_call_timeout_ends_on_time_and_stops_the_server_at_once() {
    let dir = TempDir::new("call-timeout");
    // Answers `initialize`, then sleeps: it reads no more and ignores the end of its stdin,
    // so a graceful close would wait for it, then SIGTERM it (seconds).
    let mute = script(
        &dir,
        "mute.sh",
        r#"IFS= read -r line
id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"mute","version":"1"}}}\n' "$id"
echo $$ > "$(dirname "$0")/pid"
exec sleep 60
"#,
    );
    let start = Instant::now();
    let out = mcx(&[
        "--timeout",
        "2",
        "--era",
        "legacy",
        "--stdio",
        &mute,
        "tools",
        "list",
    ]);
    let took = start.elapsed();
    assert_eq!(status(&out), 3, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "mcx: no response within 2 s; the request was cancelled\n"
    );
    assert!(took >= Duration::from_millis(1900), "took {took:?}");
    // It took 5.8 s when the server was closed gracefully after the timeout.
    assert!(took < Duration::from_millis(3500), "took {took:?}");
    let pid = std::fs::read_to_string(dir.0.join("pid")).expect("the server's pid");
    let pid = pid.trim();
    let deadline = Instant::now() + Duration::from_secs(1);
    while !ended(pid) {
        assert!(Instant::now() < deadline, "the server {pid} still runs");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `command` (a shell command line) under `script(1)`, which gives it a terminal whose
/// input stays open and empty (no answer is typed, and no Ctrl-D either) until it ends, within
/// 30 s. Its exit status and what the terminal showed.
fn on_a_silent_terminal(command: &str) -> (i32, String) {
    let (status, screen) = crate::cli::typing_on_a_terminal(command, "", Duration::from_secs(30));
    (status.code().expect("script exited"), screen)
}

#[test]
fn a_call_that_fails_while_a_question_is_on_the_terminal_is_reported() {
    let dir = TempDir::new("question-left");
    // Asks a question on `tools/call`, then, a second later, logs a line and gives up on the
    // call: mcx is still waiting for the user's answer.
    let impatient = script(
        &dir,
        "impatient.sh",
        r#"while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  [ -z "$id" ] && continue
  case "$line" in
    *'"method":"initialize"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"impatient","version":"1"}}}\n' "$id" ;;
    *'"method":"tools/call"'*)
      printf '{"jsonrpc":"2.0","id":900,"method":"elicitation/create","params":{"message":"Really deploy?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}}}\n'
      sleep 1
      printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"warning","data":"nobody answers"}}\n'
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"gave up waiting"}}\n' "$id" ;;
    *'"method"'*)
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}\n' "$id" ;;
  esac
done
"#,
    );
    let (status, screen) = on_a_silent_terminal(&format!(
        "{MCX} --era legacy --stdio '{impatient}' tools call deploy"
    ));
    assert_eq!(status, 4, "{screen:?}");
    let screen = screen.replace("\r\n", "\n");
    let asked = screen.find("[y/n] > ").expect(&screen);
    // The question's line is ended, then come the line held back and the error.
    let after = &screen[asked + "[y/n] > ".len()..];
    assert_eq!(
        after,
        "\n[warning] nobody answers\nmcx: the server answered with an error: -32000: gave up \
         waiting\n",
        "{screen:?}"
    );
}

#[test]
fn a_401_says_how_to_give_a_token() {
    let dir = TempDir::new("unauthorized");
    let token = dir.0.join("token");
    std::fs::write(&token, "sekrit\n").expect("token written");
    let (server, _) = serve_demo_with(&[
        "--http",
        "127.0.0.1:0",
        "--auth-token-file",
        &token.display().to_string(),
    ]);
    let url = server.url.as_str();
    let unauthorized =
        format!("mcx: cannot connect to {url}: the endpoint answered HTTP 401 Unauthorized");
    let out = Command::new(MCX)
        .args(["--url", url, "tools", "list"])
        .env_remove("MCX_BEARER")
        .stdin(Stdio::null())
        .output()
        .expect("mcx runs");
    assert_eq!(status(&out), 3);
    assert_eq!(
        stderr(&out),
        format!(
            "{unauthorized} (give a token: --bearer-file PATH, --bearer TOKEN or MCX_BEARER)\n"
        )
    );
    let out = mcx(&["--url", url, "--bearer", "wrong", "tools", "list"]);
    assert_eq!(status(&out), 3);
    assert_eq!(
        stderr(&out),
        format!("{unauthorized} (the token given was refused)\n")
    );
    let out = mcx(&[
        "--url",
        url,
        "--bearer-file",
        &token.display().to_string(),
        "ping",
    ]);
    assert_eq!(status(&out), 0, "{}", stderr(&out));
}
