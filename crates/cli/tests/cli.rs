//! The `mcx` binary, run as a user would.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

const MCX: &str = env!("CARGO_BIN_EXE_mcx");

fn mcx(args: &[&str]) -> Output {
    Command::new(MCX)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("mcx runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `--stdio` with the demo server.
fn demo_stdio() -> String {
    format!("{MCX} serve demo --stdio")
}

fn json(output: &Output) -> serde_json::Value {
    assert!(output.status.success(), "{}", stderr(output));
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

#[test]
fn tools_list_json_lists_the_demo_tools() {
    let out = mcx(&["--stdio", &demo_stdio(), "tools", "list", "--json"]);
    let value = json(&out);
    let names: Vec<&str> = value["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in ["echo", "add", "countdown", "confirm", "haiku", "unlock"] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
}

#[test]
fn tools_list_prints_a_table() {
    let out = mcx(&["--stdio", &demo_stdio(), "tools", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("NAME"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("echo ") && l.ends_with("Says the text back")),
        "{text}"
    );
}

#[test]
fn a_call_with_json_output() {
    let out = mcx(&[
        "--stdio",
        &demo_stdio(),
        "tools",
        "call",
        "add",
        "--args",
        r#"{"a": 2, "b": 3}"#,
        "--json",
    ]);
    let value = json(&out);
    assert_eq!(value["structuredContent"]["sum"], 5.0);
}

#[test]
fn a_call_with_progress_and_logs_on_stderr() {
    let out = mcx(&[
        "--stdio",
        &demo_stdio(),
        "--log-level",
        "debug",
        "tools",
        "call",
        "countdown",
        "--args",
        r#"{"steps": 2, "delay_ms": 1}"#,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "liftoff after 2 steps\n");
    let err = stderr(&out);
    assert!(err.contains("progress 2/2 step 2 of 2"), "{err}");
    assert!(err.contains("[notice countdown]"), "{err}");
}

/// On a terminal (`script` gives the command one), progress is a bar redrawn in place, not a
/// line per notification; the log message and the result still come out whole.
#[test]
fn on_a_terminal_progress_is_a_bar() {
    let command = format!(
        "{MCX} --stdio '{}' --log-level info tools call countdown --args '{{\"steps\": 3, \"delay_ms\": 150}}'",
        demo_stdio()
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(screen.contains("[====="), "no bar: {screen:?}");
    assert!(screen.contains("3/3 step 3 of 3"), "{screen:?}");
    assert!(
        !screen.contains("progress 1/3"),
        "lines, not a bar: {screen:?}"
    );
    assert!(screen.contains("[notice countdown]"), "{screen:?}");
    assert!(screen.contains("liftoff after 3 steps"), "{screen:?}");
}

#[test]
fn an_unknown_tool_fails_with_a_message() {
    let out = mcx(&["--stdio", &demo_stdio(), "tools", "call", "nope"]);
    assert!(!out.status.success());
    assert!(stdout(&out).is_empty());
    let err = stderr(&out);
    assert!(
        err.starts_with("mcx: ") && err.contains("unknown tool"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn bad_input_fails_with_a_message() {
    let out = mcx(&[
        "--stdio",
        &demo_stdio(),
        "tools",
        "call",
        "echo",
        "--args",
        "{",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--args: invalid JSON"),
        "{}",
        stderr(&out)
    );
    let out = mcx(&["tools", "list"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no server"), "{}", stderr(&out));
    let out = mcx(&["--stdio", "/nonexistent/server", "tools", "list"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).starts_with("mcx: cannot connect"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn resources_prompts_and_completions_over_stdio() {
    let server = demo_stdio();
    let out = mcx(&["--stdio", &server, "resources", "read", "demo://notes/todo"]);
    assert_eq!(stdout(&out), "write the docs\n", "{}", stderr(&out));
    let out = mcx(&[
        "--stdio", &server, "prompts", "get", "greet", "--arg", "name=Ada",
    ]);
    assert!(
        stdout(&out).contains("user: Say a warm hello to Ada."),
        "{}",
        stderr(&out)
    );
    let out = mcx(&[
        "--stdio", &server, "complete", "--prompt", "greet", "name", "A",
    ]);
    assert_eq!(stdout(&out), "Ada\nAlan\n", "{}", stderr(&out));
    let out = mcx(&[
        "--stdio",
        &server,
        "complete",
        "--resource",
        "demo://notes/{name}",
        "name",
        "g",
    ]);
    assert_eq!(stdout(&out), "groceries\n", "{}", stderr(&out));
}

/// `mcx serve demo --http 127.0.0.1:0`, ended when dropped.
struct HttpServer {
    child: Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_http() -> HttpServer {
    let mut child = Command::new(MCX)
        .args(["serve", "demo", "--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcx serve runs");
    let mut line = String::new();
    BufReader::new(child.stderr.take().expect("stderr"))
        .read_line(&mut line)
        .expect("a line on stderr");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    HttpServer { child, url }
}

#[test]
fn url_commands_against_serve_demo_http() {
    let server = serve_http();
    let url = server.url.as_str();
    let value = json(&mcx(&["--url", url, "tools", "list", "--json"]));
    assert!(
        value["tools"].as_array().is_some_and(|t| t.len() >= 6),
        "{value}"
    );
    let out = mcx(&[
        "--url",
        url,
        "--header",
        "X-Demo: yes",
        "--bearer",
        "token",
        "tools",
        "call",
        "echo",
        "--args",
        r#"{"text": "hi"}"#,
    ]);
    assert_eq!(stdout(&out), "hi\n", "{}", stderr(&out));
    let value = json(&mcx(&["--url", url, "discover", "--json"]));
    assert_eq!(value["serverInfo"]["name"], "mcx-demo");
    assert_eq!(value["protocolVersion"], "2026-07-28");
    let out = mcx(&["--url", url, "resources", "list"]);
    assert!(stdout(&out).contains("demo://readme"), "{}", stderr(&out));
    let out = mcx(&["--url", url, "ping"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = mcx(&["--url", url, "--header", "no colon", "ping"]);
    assert!(
        stderr(&out).contains("expected `Name: value`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn demo_walks_through_every_feature_in_both_eras() {
    let out = mcx(&["demo"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    for section in [
        "== stdio (era found by the probe) ==",
        "== stdio (legacy era, pinned to 2025-11-25) ==",
        "== Streamable HTTP (era found by the probe) ==",
        "== Streamable HTTP (legacy era, pinned to 2025-11-25) ==",
    ] {
        assert!(text.contains(section), "{section} missing:\n{text}");
    }
    for line in [
        "connected to mcx-demo 0.1.0, protocol 2026-07-28 (Modern era)",
        "connected to mcx-demo 0.1.0, protocol 2025-11-25 (Legacy era)",
        "call echo {text: hello} -> hello",
        "call add {a: 2, b: 3} -> structured {\"sum\":5.0}",
        "<- progress 3/3 step 3 of 3",
        "<- log [notice countdown]",
        "<- elicitation: \"Really deploy?\"",
        "-> deploy: done (scripted)",
        "-> canned-model-1 wrote: Tokens drift like leaves",
        "read demo://notes/todo -> write the docs",
        "complete greet name \"A\" -> Ada, Alan",
        "complete demo://notes/{name} name \"\" -> groceries, ideas, todo",
        "get greet {name: Ada} -> User: Say a warm hello to Ada.",
        "<- notification: tools/list_changed",
        "call secret -> the secret is 42",
        "demo finished",
    ] {
        assert_eq!(
            text.matches(line).count(),
            if line.starts_with("connected") {
                2
            } else if line == "demo finished" {
                1
            } else {
                4
            },
            "{line:?} in:\n{text}"
        );
    }
    // The log level (notice) holds back the countdown's debug lines.
    assert!(!text.contains("<- log [debug"), "{text}");
}

#[cfg(unix)]
#[test]
fn ctrl_c_cancels_the_call_and_exits_130() {
    let mut child = Command::new(MCX)
        .args([
            "--stdio",
            &demo_stdio(),
            "tools",
            "call",
            "countdown",
            "--args",
            r#"{"steps": 20, "delay_ms": 500}"#,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcx runs");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("progress on stderr");
    assert!(line.starts_with("progress 1/20"), "{line}");
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let mut rest = String::new();
    while stderr.read_line(&mut rest).expect("stderr") > 0 {}
    let status = child.wait().expect("mcx ends");
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(
        rest.contains("mcx: interrupted; the call was cancelled"),
        "{rest}"
    );
}

/// A reader that stops reading (`mcx demo | head -1`) ends mcx quietly with status 0, not with a
/// panic on the closed pipe.
#[test]
fn a_closed_output_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcx"))
        .arg("demo")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcx starts");
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut first = String::new();
    out.read_line(&mut first).expect("a first line");
    assert!(first.starts_with("mcx demo"), "{first:?}");
    drop(out);
    let output = child.wait_with_output().expect("mcx ends");
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {errors}", output.status);
    assert!(!errors.contains("panicked"), "{errors}");
}
