//! `mcx host --config FILE --stdio`: the demo server over stdio and a second demo over HTTP,
//! served as one MCP server, driven by a modelctx client over the gateway's stdio.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modelctx_client::{CallOptions, Client, ClientBuilder, JsonObject, ServerCommand, model};
use serde_json::json;

use crate::cli::{HttpServer, MCX, TempDir, serve_http};

/// A config of the demo over stdio (`local`) and `remote` over HTTP, and policy files, in `dir`.
struct Setup {
    dir: TempDir,
    config: String,
    _remote: HttpServer,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let remote = serve_http();
        let dir = TempDir::new(name);
        let config = dir.0.join("servers.json");
        let text = json!({
            "mcpServers": {
                "local": {"command": MCX, "args": ["serve", "demo", "--stdio"]},
                "remote": {"type": "http", "url": remote.url},
            }
        });
        std::fs::write(&config, text.to_string()).expect("config written");
        Setup {
            config: config.to_string_lossy().into_owned(),
            dir,
            _remote: remote,
        }
    }

    /// A policy file `name` with `text`; its path.
    fn policy(&self, name: &str, text: &str) -> String {
        let path = self.dir.0.join(name);
        std::fs::write(&path, text).expect("policy written");
        path.to_string_lossy().into_owned()
    }

    /// A client of `mcx host --config .. --stdio` with `extra` arguments.
    async fn connect(&self, extra: &[&str]) -> Client {
        let command = ServerCommand::new(MCX)
            .args(["host", "--config", &self.config, "--stdio"])
            .args(extra);
        client()
            .connect_stdio(command)
            .await
            .expect("the gateway answers")
    }
}

/// A client that answers sampling with a canned reply.
fn client() -> ClientBuilder {
    Client::builder("host-test", "1.0.0")
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
        .request_timeout(Some(Duration::from_secs(30)))
}

/// The pids of the processes whose command line contains `marker`.
fn pids_with(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .filter(|pid| alive(*pid))
        .collect()
}

/// The children of `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // pid (comm) state ppid ...: the comm may hold spaces, so read after its `)`.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|ppid| ppid.parse::<u32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            != Some("Z")
    })
}

async fn wait_gone(pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while pids.iter().any(|pid| alive(*pid)) {
        assert!(Instant::now() < deadline, "still running: {pids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_serves_both_servers_with_progress_sampling_and_stops_its_children() {
    let setup = Setup::new("host-gateway");
    let allow = setup.policy(
        "allow.json",
        r#"{"destructive": "allow", "sampling": "allow"}"#,
    );
    let client = setup.connect(&["--policy", &allow]).await;

    // The aggregate, namespaced.
    let tools = client.list_all_tools().await.expect("tools");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for name in [
        "local__echo",
        "local__countdown",
        "remote__echo",
        "remote__haiku",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let echo = tools
        .iter()
        .find(|t| t.name == "local__echo")
        .expect("echo");
    assert_eq!(echo.description.as_deref(), Some("Says the text back"));

    // A call routed to each server.
    let local = client
        .call_tool("local__echo", json!({"text": "over stdio"}))
        .await
        .expect("local echo");
    assert_eq!(local.text(), "over stdio");
    let remote = client
        .call_tool("remote__add", json!({"a": 2, "b": 3}))
        .await
        .expect("remote add");
    assert_eq!(remote.structured_content, Some(json!({"sum": 5.0})));

    // Progress of the server arrives through the gateway.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let options = CallOptions::new().on_progress(move |p| {
        sink.lock()
            .unwrap()
            .push(p.message.clone().unwrap_or_default());
    });
    let done = client
        .call_tool_with(
            "remote__countdown",
            json!({"steps": 3, "delay_ms": 20}),
            options,
        )
        .await
        .expect("countdown");
    assert_eq!(done.text(), "liftoff after 3 steps");
    assert_eq!(
        *seen.lock().unwrap(),
        ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
    );

    // A server's sampling request during a call is answered by the gateway's client.
    let haiku = client
        .call_tool("local__haiku", json!({"topic": "gateways"}))
        .await
        .expect("haiku");
    assert_eq!(haiku.text(), "canned-model wrote: a canned haiku");

    // Its children end with it: stdin closed, the gateway stops every server it started.
    let gateway = pids_with(&setup.config);
    assert_eq!(gateway.len(), 1, "one gateway process: {gateway:?}");
    let children = children_of(gateway[0]);
    assert!(!children.is_empty(), "the stdio server runs as a child");
    client.close().await;
    wait_gone(&gateway).await;
    wait_gone(&children).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consent_comes_from_the_policy_file() {
    let setup = Setup::new("host-policy");

    // Without a policy, the default rules refuse a tool that may be destructive (the demo's
    // tools are not annotated), and say how to allow it.
    let client = setup.connect(&[]).await;
    let refused = client
        .call_tool("local__echo", json!({"text": "hi"}))
        .await
        .expect("a result");
    assert_eq!(refused.is_error, Some(true));
    assert!(refused.text().contains("--policy"), "{}", refused.text());
    client.close().await;

    // A policy that refuses it.
    let deny = setup.policy(
        "deny.json",
        r#"{"destructive": "allow", "servers": {"local": {"deny": ["echo"]}}}"#,
    );
    let client = setup.connect(&["--policy", &deny]).await;
    let refused = client
        .call_tool("local__echo", json!({"text": "hi"}))
        .await
        .expect("a result");
    assert_eq!(refused.is_error, Some(true), "{}", refused.text());
    assert!(refused.text().contains("refused"), "{}", refused.text());
    client.close().await;

    // And one that allows it.
    let allow = setup.policy(
        "allow-echo.json",
        r#"{"servers": {"local": {"allow": ["echo"]}}}"#,
    );
    let client = setup.connect(&["--policy", &allow]).await;
    let allowed = client
        .call_tool("local__echo", json!({"text": "hi"}))
        .await
        .expect("a result");
    assert_eq!(allowed.is_error, None, "{}", allowed.text());
    assert_eq!(allowed.text(), "hi");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_collision_keeps_the_names_of_a_single_server() {
    let dir = TempDir::new("host-single");
    let config = dir.0.join("one.json");
    let text =
        json!({"mcpServers": {"demo": {"command": MCX, "args": ["serve", "demo", "--stdio"]}}});
    std::fs::write(&config, text.to_string()).expect("config written");
    let config = config.to_string_lossy().into_owned();
    let command = ServerCommand::new(MCX).args([
        "host",
        "--config",
        &config,
        "--stdio",
        "--namespace",
        "on-collision",
    ]);
    let client = client().connect_stdio(command).await.expect("connects");
    let tools = client.list_all_tools().await.expect("tools");
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    assert!(!tools.iter().any(|t| t.name.contains("__")), "{tools:?}");
    client.close().await;
}
