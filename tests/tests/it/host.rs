//! `modelctx-host` end to end, from ONE `mcpServers` config file (its commands and URL
//! `${VAR}`-expanded): the demo server over stdio (`mcx serve demo --stdio`, through `sh` so that
//! the test knows its pid), a modelctx server over Streamable HTTP in this process (a tool that
//! samples, a destructive tool refused by the default rules and one allow-listed), the TypeScript
//! SDK's `@modelcontextprotocol/server-everything` over stdio (Node 22, `tests/ts`), and a server
//! whose command does not exist.
//!
//! `cargo xtask ci` builds `mcx`, installs Node 22 and the packages of `tests/ts` (`npm ci`, from
//! the lockfile) and sets `MODELCTX_MCX`, `MODELCTX_NODE` and `MODELCTX_REQUIRE_NODE=1`; run by
//! hand without them, the test says it is skipped.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelctx_client::{CallOptions, JsonObject, model};
use modelctx_host::{Host, HostConfig, HostError, HostEvent, Namespace, Rules, ServerState};
use modelctx_server::{Context, InputError, NoArgs, Server, Tool, sampling_request};
use modelctx_tests::client::{sampled, serve_http};
use modelctx_tests::http::within;
use modelctx_tests::node::{self, ts_dir};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

/// server-everything's entry point, in `tests/ts` (its `bin`, `mcp-server-everything`; the
/// first argument chooses the transport).
const EVERYTHING: &str = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";

/// The config file: the values in `${...}` are expanded from the variables of the test.
const CONFIG: &str = r#"{
  "mcpServers": {
    "demo": {
      "command": "sh",
      "args": ["-c", "echo $$ >> \"$1\"; exec \"$0\" serve demo --stdio", "${MCX}", "${PIDFILE}"]
    },
    "web": {
      "type": "http",
      "url": "${WEB_URL}",
      "headers": {"X-Test": "${HEADER:-from the default}"}
    },
    "everything": {
      "command": "${NODE}",
      "args": ["${TS_DIR}/${EVERYTHING}", "stdio"],
      "cwd": "${TS_DIR}",
      "note": "kept for the application"
    },
    "ghost": {
      "command": "${TS_DIR}/no-such-server",
      "timeout": 5000
    }
  }
}
"#;

/// The names the host's sampler was called with, and the prompts.
#[derive(Default)]
struct Sampled(Mutex<Vec<(String, model::CreateMessageRequestParams)>>);

impl Sampled {
    fn servers(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(s, _)| s.clone())
            .collect()
    }
}

/// The HTTP server: `ask` samples the host's model; `wipe` and `reset` are destructive.
fn web_server() -> Server {
    let destructive = model::ToolAnnotations {
        destructive_hint: Some(true),
        idempotent_hint: None,
        open_world_hint: Some(false),
        read_only_hint: Some(false),
        title: None,
    };
    let harmless = model::ToolAnnotations {
        destructive_hint: Some(false),
        read_only_hint: Some(false),
        ..destructive.clone()
    };
    Server::builder("web-test", "1.0.0")
        .tool(
            Tool::new("ask", |context: Context, _: NoArgs| async move {
                let answer = context
                    .sample(sampling_request("Say something, web", 20))
                    .await?;
                Ok::<_, InputError>(match answer.content {
                    model::CreateMessageResultContent::TextContent(t) => t.text,
                    _ => "?".to_owned(),
                })
            })
            .description("Asks the host's model")
            .annotations(harmless),
        )
        .tool(
            Tool::new("wipe", |_: NoArgs| async { "wiped" })
                .description("Deletes everything")
                .annotations(destructive.clone()),
        )
        .tool(
            Tool::new("reset", |_: NoArgs| async { "reset done" })
                .description("Resets the counters")
                .annotations(destructive),
        )
        .build()
}

/// Waits (20 s at most) until `ready(host)` holds, checking again after each of the host's
/// events.
async fn until(
    host: &Host,
    events: &mut tokio::sync::broadcast::Receiver<HostEvent>,
    what: &str,
    ready: impl Fn(&Host) -> bool,
) {
    within(what, async {
        while !ready(host) {
            match events.recv().await {
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => panic!("{what}: the host's events ended"),
            }
        }
    })
    .await;
}

fn names(host: &Host) -> Vec<String> {
    host.tools().into_iter().map(|t| t.name).collect()
}

fn has_tool(host: &Host, name: &str) -> bool {
    host.tools().iter().any(|t| t.name == name)
}

fn state(host: &Host, server: &str) -> ServerState {
    host.servers()
        .into_iter()
        .find(|s| s.name == server)
        .unwrap_or_else(|| panic!("no server {server}"))
        .state
}

fn args(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

async fn call(host: &Host, name: &str, arguments: Value) -> Result<String, HostError> {
    let result = within(
        name,
        host.call_tool(name, args(arguments), CallOptions::new()),
    )
    .await?;
    assert_ne!(result.is_error, Some(true), "{name}: {result:?}");
    Ok(result.text())
}

/// What the test needs that it does not build: `mcx`, Node and server-everything.
fn tools() -> Option<(PathBuf, String)> {
    let mcx = modelctx_tests::fleet::mcx()?;
    let node = node::node()?;
    if !ts_dir().join(EVERYTHING).is_file() {
        return node::skipped(format!("{EVERYTHING} is missing in tests/ts"));
    }
    Some((mcx, node))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_config_three_servers_and_one_that_never_starts() {
    let Some((mcx, node)) = tools() else { return };
    let web = web_server();
    let (_running, web_url) = serve_http(&web, Default::default()).await;
    let dir = std::env::temp_dir().join(format!("modelctx-host-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pidfile = dir.join("demo.pids");
    let _ = std::fs::remove_file(&pidfile);
    let path = dir.join("mcp.json");
    std::fs::write(&path, CONFIG).unwrap();

    let variables: BTreeMap<&str, String> = [
        ("MCX", mcx.display().to_string()),
        ("PIDFILE", pidfile.display().to_string()),
        ("WEB_URL", web_url.clone()),
        ("NODE", node.clone()),
        ("TS_DIR", ts_dir().display().to_string()),
        ("EVERYTHING", EVERYTHING.to_owned()),
    ]
    .into_iter()
    .collect();
    let text = std::fs::read_to_string(&path).unwrap();
    let config = HostConfig::from_json_with(&text, |name| variables.get(name).cloned())
        .unwrap_or_else(|e| panic!("{e}"));
    let order: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(order, ["demo", "web", "everything", "ghost"]);
    let everything = &config.servers[2];
    assert_eq!(everything.extra["note"], "kept for the application");
    match &config.servers[1].transport {
        modelctx_host::TransportConfig::Http { url, headers } => {
            assert_eq!(url, &web_url);
            assert_eq!(headers["X-Test"], "from the default");
        }
        other => panic!("{other:?}"),
    }

    let seen = Arc::new(Sampled::default());
    let sampler = seen.clone();
    let host = within(
        "the host starts",
        Host::builder(config.clone())
            .client_info("host-it", "1.0.0")
            .connect_timeout(Duration::from_secs(20))
            // The default rules, and an allow-list per server (the servers' own tool names).
            .policy(
                Rules::new()
                    .allow("demo", ["echo", "haiku"])
                    .allow("web", ["reset"]),
            )
            .on_sampling(move |server, params| {
                sampler.0.lock().unwrap().push((server.clone(), params));
                async move {
                    Ok(sampled(json!({
                        "role": "assistant",
                        "content": {"type": "text", "text": format!("model answers {server}")},
                        "model": "host-it-model",
                        "stopReason": "endTurn",
                    })))
                }
            })
            .start(),
    )
    .await;
    let mut events = host.changes();

    // The one that never starts is reported; the others are up.
    for server in ["demo", "web", "everything"] {
        assert_eq!(state(&host, server), ServerState::Ready, "{server}");
    }
    match state(&host, "ghost") {
        ServerState::Reconnecting { attempt, error } => {
            assert!(attempt >= 1);
            assert!(!error.is_empty());
        }
        other => panic!("ghost: {other:?}"),
    }
    let statuses = host.servers();
    let everything_status = statuses.iter().find(|s| s.name == "everything").unwrap();
    assert!(everything_status.protocol_version.is_some());
    assert!(everything_status.server_info.is_some());

    // The aggregate: names of all three, namespaced; `echo` of demo and of server-everything
    // side by side, each routed to its own server. server-everything registers its sampling
    // tool after `initialized` (a list_changed).
    until(&host, &mut events, "server-everything's late tools", |h| {
        has_tool(h, "everything__trigger-sampling-request")
    })
    .await;
    let listed = names(&host);
    for name in [
        "demo__echo",
        "demo__haiku",
        "web__ask",
        "web__wipe",
        "everything__echo",
        "everything__get-sum",
    ] {
        assert!(listed.iter().any(|n| n == name), "{name} not in {listed:?}");
    }
    assert!(listed.iter().all(|n| !n.starts_with("ghost__")));
    let echo = host
        .tools()
        .into_iter()
        .find(|t| t.name == "everything__echo")
        .unwrap();
    assert_eq!(
        (echo.server.as_str(), echo.tool.name.as_str()),
        ("everything", "echo")
    );
    assert_eq!(
        call(&host, "everything__echo", json!({"message": "hi"}))
            .await
            .unwrap(),
        "Echo: hi"
    );
    assert_eq!(
        call(&host, "demo__echo", json!({"text": "hi"}))
            .await
            .unwrap(),
        "hi"
    );

    // Consent: the default rules refuse a destructive tool (and an unannotated one); the
    // allow-listed destructive one goes through.
    for refused in ["web__wipe", "demo__add"] {
        match host
            .call_tool(refused, args(json!({"a": 1, "b": 2})), CallOptions::new())
            .await
        {
            Err(HostError::Denied { reason }) => assert!(!reason.is_empty()),
            other => panic!("{refused}: {other:?}"),
        }
    }
    assert_eq!(
        call(&host, "web__reset", json!({})).await.unwrap(),
        "reset done"
    );
    assert!(matches!(
        host.call_tool("ghost__echo", JsonObject::new(), CallOptions::new())
            .await,
        Err(HostError::UnknownTool(_))
    ));

    // Sampling from each server that samples, each seen with its name by the host's model.
    assert_eq!(
        call(&host, "web__ask", json!({})).await.unwrap(),
        "model answers web"
    );
    let haiku = call(&host, "demo__haiku", json!({"topic": "hosts"}))
        .await
        .unwrap();
    assert!(haiku.contains("model answers demo"), "{haiku}");
    let everything_sampled = call(
        &host,
        "everything__trigger-sampling-request",
        json!({"prompt": "What is 2+2?", "maxTokens": 10}),
    )
    .await
    .unwrap();
    assert!(
        everything_sampled.contains("model answers everything"),
        "{everything_sampled}"
    );
    assert_eq!(seen.servers(), ["web", "demo", "everything"]);
    let everything_asked = format!("{:?}", seen.0.lock().unwrap()[2].1.messages);
    assert!(
        everything_asked.contains("What is 2+2?"),
        "{everything_asked}"
    );

    // A list_changed on one: the HTTP server adds a tool.
    web.add_tool(Tool::new("late", |_: NoArgs| async { "late" }).description("Added later"))
        .expect("a new tool");
    until(&host, &mut events, "web__late listed", |h| {
        has_tool(h, "web__late")
    })
    .await;

    // A server that exits and comes back: the demo child is killed; the host reconnects and its
    // tools return.
    let first = std::fs::read_to_string(&pidfile).unwrap();
    let pid = first.trim().to_owned();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    within("the demo is seen gone", async {
        loop {
            match events.recv().await {
                Ok(HostEvent::Server {
                    name,
                    state: ServerState::Reconnecting { .. },
                }) if name == "demo" => break,
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => panic!("the host's events ended"),
            }
        }
    })
    .await;
    until(&host, &mut events, "the demo back", |h| {
        state(h, "demo") == ServerState::Ready && has_tool(h, "demo__echo")
    })
    .await;
    let pids = std::fs::read_to_string(&pidfile).unwrap();
    assert_eq!(pids.lines().count(), 2, "a new child: {pids}");
    assert_eq!(
        call(&host, "demo__echo", json!({"text": "again"}))
            .await
            .unwrap(),
        "again"
    );
    assert!(has_tool(&host, "everything__echo") && has_tool(&host, "web__late"));

    within("shutdown", host.shutdown()).await;
    for status in host.servers() {
        assert_eq!(status.state, ServerState::Stopped, "{}", status.name);
    }
    assert!(matches!(
        host.call_tool("demo__echo", JsonObject::new(), CallOptions::new())
            .await,
        Err(HostError::ShutDown)
    ));

    // Collisions: with names kept unless two servers give the same one, both `echo`s are
    // prefixed and a name only one server has is kept.
    let on_collision = within(
        "the second host starts",
        Host::builder(config)
            .namespace(Namespace::on_collision())
            .connect_timeout(Duration::from_secs(20))
            .start(),
    )
    .await;
    let listed = names(&on_collision);
    for name in ["demo__echo", "everything__echo", "wipe", "get-sum", "haiku"] {
        assert!(listed.iter().any(|n| n == name), "{name} not in {listed:?}");
    }
    assert!(listed.iter().all(|n| n != "echo"), "{listed:?}");
    // Routed by the kept name; and this host has the default policy (no `.policy(..)`), which
    // refuses the destructive tool without asking anyone.
    assert_eq!(
        call(&on_collision, "get-sum", json!({"a": 2, "b": 3}))
            .await
            .unwrap(),
        "The sum of 2 and 3 is 5."
    );
    match on_collision
        .call_tool("wipe", JsonObject::new(), CallOptions::new())
        .await
    {
        Err(HostError::Denied { reason }) => assert!(reason.contains("wipe"), "{reason}"),
        other => panic!("wipe: {other:?}"),
    }
    within("shutdown", on_collision.shutdown()).await;
    let _ = std::fs::remove_dir_all(&dir);
}
