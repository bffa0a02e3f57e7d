//! `mcx --config FILE` (or `MCX_CONFIG`): `servers`, `tools list|show|call` across the servers
//! of an `mcpServers` config: the demo over stdio, the demo over HTTP (its URL expanded from
//! `${DEMO_URL}`), a server that never starts and a disabled one.

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::cli::{HttpServer, MCX, TempDir, mcx, serve_http, stderr, stdout};

/// A config file in a directory of its own, the HTTP demo it names, and the environment that
/// expands it.
struct Fixture {
    dir: TempDir,
    config: String,
    http: HttpServer,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let http = serve_http();
        let dir = TempDir::new(&format!("servers-{name}"));
        let config = dir.0.join("mcp.json");
        // Written by hand: the order of the file is the servers' order.
        let text = format!(
            r#"{{
  "mcpServers": {{
    "demo": {{"command": {mcx}, "args": ["serve", "demo", "--stdio"]}},
    "web": {{"type": "http", "url": "${{DEMO_URL}}"}},
    "broken": {{"command": {broken}}},
    "off": {{"command": {mcx}, "args": ["serve", "demo"], "disabled": true}}
  }}
}}
"#,
            mcx = json!(MCX),
            broken = json!(dir.0.join("no-such-server").display().to_string()),
        );
        std::fs::write(&config, text).expect("written");
        Fixture {
            config: config.display().to_string(),
            dir,
            http,
        }
    }

    /// A config of the two demos only, every one of them up.
    fn healthy(&self) -> String {
        let path = self.dir.0.join("healthy.json");
        let text = json!({
            "mcpServers": {
                "demo": {"command": MCX, "args": ["serve", "demo", "--stdio"]},
                "web": {"url": "${DEMO_URL}"},
            }
        });
        std::fs::write(&path, text.to_string()).expect("written");
        path.display().to_string()
    }

    /// `mcx` with `DEMO_URL` set (and `MCX_CONFIG` unset unless `args` start with it).
    fn mcx(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("mcx runs")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(MCX);
        command
            .args(args)
            .env("DEMO_URL", &self.http.url)
            .env_remove("MCX_CONFIG")
            .stdin(Stdio::null());
        command
    }
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("JSON on stdout ({e}): {}{}", stdout(output), stderr(output)))
}

fn server<'a>(servers: &'a Value, name: &str) -> &'a Value {
    servers["servers"]
        .as_array()
        .expect("a list")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {servers}"))
}

#[test]
fn servers_says_each_state_and_fails_when_one_did_not_connect() {
    let fixture = Fixture::new("status");
    let out = fixture.mcx(&[
        "--config",
        &fixture.config,
        "--timeout",
        "20",
        "servers",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let servers = json_of(&out);
    let names: Vec<&str> = servers["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["demo", "web", "broken", "off"], "config order");

    let demo = server(&servers, "demo");
    assert_eq!(demo["state"], "ready", "{demo}");
    assert_eq!(demo["transport"], "stdio");
    assert_eq!(demo["serverInfo"]["name"], "mcx-demo");
    assert!(demo["protocolVersion"].is_string(), "{demo}");
    assert_eq!(demo["error"], Value::Null);
    let web = server(&servers, "web");
    assert_eq!(web["state"], "ready", "{web}");
    assert_eq!(web["transport"], "http");
    assert_eq!(
        web["target"],
        fixture.http.url.as_str(),
        "${{DEMO_URL}} expanded"
    );
    assert_eq!(web["tools"], demo["tools"], "the same demo");
    assert!(demo["tools"].as_u64().unwrap() >= 7, "{demo}");
    let broken = server(&servers, "broken");
    assert_eq!(broken["state"], "failed", "{broken}");
    assert!(
        broken["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{broken}"
    );
    assert_eq!(broken["tools"], Value::Null);
    assert_eq!(server(&servers, "off")["state"], "disabled");
    assert!(
        stderr(&out).contains("1 of 4 servers not connected"),
        "{}",
        stderr(&out)
    );

    // The table; and a config whose servers all connect exits with 0.
    let out = fixture.mcx(&["--config", &fixture.config, "servers"]);
    assert_eq!(out.status.code(), Some(3));
    let table = stdout(&out);
    for word in [
        "NAME",
        "STATE",
        "TRANSPORT",
        "PROTOCOL",
        "SERVER",
        "TOOLS",
        "LAST ERROR",
        "mcx-demo",
        "failed",
        "disabled",
    ] {
        assert!(table.contains(word), "{word} missing from {table}");
    }
    let healthy = fixture.healthy();
    let out = fixture.mcx(&["--config", &healthy, "servers"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn the_config_comes_from_mcx_config_and_excludes_one_server() {
    let fixture = Fixture::new("env");
    let healthy = fixture.healthy();
    let out = fixture
        .command(&["servers", "--json"])
        .env("MCX_CONFIG", &healthy)
        .output()
        .expect("mcx runs");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server(&json_of(&out), "web")["state"], "ready");

    // An explicit server wins over the variable: `tools list` lists the one server's tools.
    let out = fixture
        .command(&["--url", &fixture.http.url, "tools", "list", "--json"])
        .env("MCX_CONFIG", &healthy)
        .output()
        .expect("mcx runs");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        json_of(&out)["tools"][0]["name"]
            .as_str()
            .is_some_and(|n| !n.contains("__"))
    );

    // Both given: a usage error naming both.
    let out = fixture.mcx(&[
        "--config",
        &healthy,
        "--url",
        &fixture.http.url,
        "tools",
        "list",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--config <FILE>") && err.contains("--url"),
        "{err}"
    );

    // `servers` with no config, and a command that needs one server.
    let out = mcx(&["servers", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        json_of(&out)["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--config FILE") && m.contains("MCX_CONFIG")),
        "{}",
        stdout(&out)
    );
    let out = fixture.mcx(&["--config", &healthy, "resources", "list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--stdio or --url"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_bad_config_is_a_usage_error_naming_the_entry_and_its_line() {
    let dir = TempDir::new("servers-bad");
    let path = dir.0.join("bad.json");
    std::fs::write(
        &path,
        "{\n  \"mcpServers\": {\n    \"good\": {\"command\": \"x\"},\n    \"bad\": {\"args\": []}\n  }\n}\n",
    )
    .unwrap();
    let out = mcx(&["--config", path.to_str().unwrap(), "servers"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("\"bad\""), "{err}");
    assert!(err.contains("line 4"), "{err}");
    assert!(!err.contains("\"good\""), "{err}");
}

#[test]
fn tools_list_across_the_servers() {
    let fixture = Fixture::new("list");
    let out = fixture.mcx(&["--config", &fixture.config, "tools", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let tools = json_of(&out);
    let tools = tools["tools"].as_array().expect("tools");
    for (name, server) in [
        ("demo__echo", "demo"),
        ("web__echo", "web"),
        ("demo__add", "demo"),
    ] {
        let tool = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {tools:?}"));
        assert_eq!(tool["server"], server);
        assert_eq!(tool["tool"]["name"], name.split("__").nth(1).unwrap());
    }
    assert!(
        tools
            .iter()
            .all(|t| t["server"] != "broken" && t["server"] != "off")
    );
    let err = stderr(&out);
    assert!(err.contains("server \"broken\" did not connect: "), "{err}");
    assert!(!err.contains("\"off\""), "{err}");

    let out = fixture.mcx(&["--config", &fixture.config, "tools", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.contains("NAME") && table.contains("SERVER"),
        "{table}"
    );
    let echo = table
        .lines()
        .find(|l| l.starts_with("web__echo"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        echo.contains(" web ") && echo.contains("(text: string)"),
        "{echo}"
    );

    let out = fixture.mcx(&["--config", &fixture.config, "tools", "show", "web__add"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(shown.starts_with("web__add"), "{shown}");
    assert!(
        shown.contains("server: web (its name there: add)"),
        "{shown}"
    );
}

#[test]
fn tools_call_goes_to_its_server_with_the_command_line_consent() {
    let fixture = Fixture::new("call");
    // `echo` has no annotations: a host's default policy takes it as destructive and asks; the
    // user who names it on the command line has asked.
    let out = fixture.mcx(&[
        "--config",
        &fixture.config,
        "tools",
        "call",
        "web__echo",
        "--arg",
        "text=over http",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "over http\n");

    // Progress, as for one server; JSON output.
    let out = fixture.mcx(&[
        "--config",
        &fixture.config,
        "tools",
        "call",
        "demo__countdown",
        "--args",
        r#"{"steps": 2, "delay_ms": 1}"#,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "liftoff after 2 steps\n");
    assert!(
        stderr(&out).contains("progress 2/2 step 2 of 2"),
        "{}",
        stderr(&out)
    );
    let out = fixture.mcx(&[
        "--config",
        &fixture.config,
        "tools",
        "call",
        "demo__add",
        "--args",
        r#"{"a": 2, "b": 3}"#,
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_of(&out)["structuredContent"]["sum"], 5.0);

    // Sampling from the server, answered by --sampling-reply, the asking server named.
    let out = fixture.mcx(&[
        "--config",
        &fixture.config,
        "--sampling-reply",
        "an old pond",
        "tools",
        "call",
        "demo__haiku",
        "--args",
        r#"{"topic": "frogs"}"#,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("an old pond"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("server \"demo\" asks for a sample"),
        "{}",
        stderr(&out)
    );

    // A tool nobody has: a protocol failure naming the server that is down.
    let out = fixture.mcx(&["--config", &fixture.config, "tools", "call", "broken__echo"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("no tool `broken__echo`"), "{err}");
    assert!(err.contains("not connected: broken"), "{err}");
    // --task needs one server.
    let out = fixture.mcx(&[
        "--config",
        &fixture.config,
        "tools",
        "call",
        "demo__countdown",
        "--task",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
