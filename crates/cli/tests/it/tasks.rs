//! `mcx tools call --task`, `mcx tasks get|cancel`: against a scripted 2025-11-25 server with
//! tasks (a shell script), run as a user would.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::cli::{MCX, TempDir, demo_stdio, mcx, serve_http, stderr, stdout};

/// A stdio MCP server (a shell script) speaking 2025-11-25 with tasks: `slow` runs as task `T1`,
/// working for two polls (`step N of 3`) and then completed; `forever` runs as task `T2`, which
/// works until cancelled; other task ids are unknown. Every line it reads goes to the file
/// `received` beside the script.
fn task_server(dir: &TempDir) -> String {
    let script = dir.0.join("tasks.sh");
    std::fs::write(
        &script,
        r#"received="$(dirname "$0")/received"
polls=0
task() {
  printf '{"taskId":"%s","status":"%s"%s,"createdAt":"2025-11-28T10:00:00Z","lastUpdatedAt":"2025-11-28T10:00:01Z","ttl":60000,"pollInterval":100}' "$1" "$2" "$3"
}
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$received"
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  [ -z "$id" ] && continue
  case "$line" in
    *'"method":"initialize"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}},"serverInfo":{"name":"tasks","version":"1"}}}\n' "$id" ;;
    *'"method":"tools/list"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"slow","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}},{"name":"forever","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}}]}}\n' "$id" ;;
    *'"method":"tools/call"'*'"name":"forever"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"task":%s}}\n' "$id" "$(task T2 working)" ;;
    *'"method":"tools/call"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"task":%s}}\n' "$id" "$(task T1 working)" ;;
    *'"method":"tasks/get"'*'"taskId":"T1"'*)
      polls=$((polls + 1))
      if [ "$polls" -lt 3 ]; then
        printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$(task T1 working ",\"statusMessage\":\"step $polls of 3\"")"
      else
        printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$(task T1 completed)"
      fi ;;
    *'"method":"tasks/get"'*'"taskId":"T2"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$(task T2 working ',"statusMessage":"still going"')" ;;
    *'"method":"tasks/result"'*'"taskId":"T1"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"done after 3 steps"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"T1"}}}}\n' "$id" ;;
    *'"method":"tasks/cancel"'*'"taskId":"T2"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$(task T2 cancelled)" ;;
    *'"method":"tasks/'*)
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"Failed to retrieve task: Task not found"}}\n' "$id" ;;
    *)
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}\n' "$id" ;;
  esac
done
"#,
    )
    .expect("script written");
    format!("sh {}", script.display())
}

/// What the server read, one JSON-RPC message a line.
fn received(dir: &TempDir) -> String {
    std::fs::read_to_string(dir.0.join("received")).unwrap_or_default()
}

#[test]
fn a_call_as_a_task_shows_its_status_and_prints_its_result() {
    let dir = TempDir::new("task-call");
    let server = task_server(&dir);
    let out = mcx(&[
        "--stdio", &server, "tools", "call", "slow", "--task", "--ttl", "30",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(stdout(&out), "done after 3 steps\n");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            "task T1 working",
            "task T1 working: step 1 of 3",
            "task T1 working: step 2 of 3",
            "task T1 completed",
        ],
        "{err}"
    );
    let sent = received(&dir);
    assert!(sent.contains(r#""task":{"ttl":30000}"#), "{sent}");
    assert!(sent.contains(r#""method":"tasks/result""#), "{sent}");

    // Without --task, a task-only tool is refused, pointing at --task.
    let out = mcx(&[
        "--stdio", &server, "tools", "call", "forever", "--arg", "x=1",
    ]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("call it with `mcx tools call forever --task`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn tasks_get_and_cancel() {
    let dir = TempDir::new("task-get");
    let server = task_server(&dir);
    let out = mcx(&["--stdio", &server, "tasks", "get", "T2", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let task: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(task["taskId"], "T2");
    assert_eq!(task["status"], "working");
    assert_eq!(task["statusMessage"], "still going");
    assert_eq!(task["ttlMs"], 60000);
    assert_eq!(task["pollIntervalMs"], 100);

    let out = mcx(&["--stdio", &server, "tasks", "get", "T2"]);
    let text = stdout(&out);
    assert!(
        text.contains("status") && text.contains("still going"),
        "{text}"
    );

    let out = mcx(&["--stdio", &server, "tasks", "cancel", "T2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "cancel requested for task T2\n");

    // An unknown task: a protocol failure (status 4) that says so.
    for command in ["get", "cancel"] {
        let out = mcx(&["--stdio", &server, "tasks", command, "nope", "--json"]);
        assert_eq!(out.status.code(), Some(4), "{command}");
        let error: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(error["error"]["kind"], "protocol", "{command}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("knows no task nope"),
            "{command}: {error}"
        );
    }
}

#[cfg(unix)]
#[test]
fn ctrl_c_cancels_the_task_and_exits_130() {
    let dir = TempDir::new("task-interrupt");
    let server = task_server(&dir);
    let mut child = Command::new(MCX)
        .args(["--stdio", &server, "tools", "call", "forever", "--task"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcx runs");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    for expected in ["task T2 working\n", "task T2 working: still going\n"] {
        line.clear();
        stderr.read_line(&mut line).expect("status on stderr");
        assert_eq!(line, expected);
    }
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
        rest.contains("mcx: interrupted; cancelling task T2"),
        "{rest}"
    );
    assert!(
        rest.contains("mcx: task T2 cancelled (tasks/cancel)"),
        "{rest}"
    );
    let sent = received(&dir);
    assert!(
        sent.contains(r#""method":"tasks/cancel","params":{"taskId":"T2"}"#),
        "{sent}"
    );
}

/// The task id of the first status line `task ID working`.
fn task_id(line: &str) -> String {
    let id = line
        .strip_prefix("task ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no task in {line:?}"));
    id.to_owned()
}

#[test]
fn the_demo_countdown_runs_as_a_task_over_stdio_and_http() {
    let out = mcx(&[
        "--stdio",
        &demo_stdio(),
        "tools",
        "call",
        "countdown",
        "--task",
        "--args",
        r#"{"steps": 3, "delay_ms": 100}"#,
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(stdout(&out), "liftoff after 3 steps\n");
    let lines: Vec<&str> = err.lines().collect();
    let id = task_id(lines[0]);
    assert_eq!(lines[0], format!("task {id} working"), "{err}");
    assert_eq!(
        *lines.last().unwrap(),
        format!("task {id} completed: step 3 of 3"),
        "{err}"
    );

    // Over HTTP the task outlives the command: `tasks get` finds it.
    let server = serve_http();
    let url = server.url.as_str();
    let out = mcx(&[
        "--url",
        url,
        "tools",
        "call",
        "countdown",
        "--task",
        "--args",
        r#"{"steps": 2, "delay_ms": 50}"#,
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["content"][0]["text"], "liftoff after 2 steps");
    let id = task_id(stderr(&out).lines().next().unwrap());
    let out = mcx(&["--url", url, "tasks", "get", &id, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let task: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(task["taskId"], id.as_str());
    assert_eq!(task["status"], "completed");
}

#[cfg(unix)]
#[test]
fn ctrl_c_cancels_a_demo_countdown_task_and_tasks_get_says_so() {
    let server = serve_http();
    let url = server.url.as_str();
    let mut child = Command::new(MCX)
        .args([
            "--url",
            url,
            "tools",
            "call",
            "countdown",
            "--task",
            "--args",
            r#"{"steps": 20, "delay_ms": 2000}"#,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcx runs");
    let mut stderr_lines = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr_lines.read_line(&mut line).expect("status on stderr");
    let id = task_id(&line);
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let mut rest = String::new();
    while stderr_lines.read_line(&mut rest).expect("stderr") > 0 {}
    let status = child.wait().expect("mcx ends");
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(
        rest.contains(&format!("mcx: task {id} cancelled (tasks/cancel)")),
        "{rest}"
    );
    let out = mcx(&["--url", url, "tasks", "get", &id, "--json"]);
    let task: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(task["status"], "cancelled", "{task}");
}
