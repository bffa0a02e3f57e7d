//! The client facade against the TypeScript SDK's reference server,
//! `@modelcontextprotocol/server-everything` (`tests/ts`; SDK 1.x, legacy protocol up to
//! 2025-11-25), over stdio and Streamable HTTP: every feature it offers a client that answers
//! sampling, elicitation (form and URL) and roots.
//!
//! `cargo xtask ci` installs Node 22 and the packages and sets `MODELCTX_NODE` and
//! `MODELCTX_REQUIRE_NODE=1`; run by hand without them, these tests say they are skipped.
//!
//! What the server does that matters here (see `target/everything-notes.md`): five tools are
//! registered only after `notifications/initialized`, each with a `tools/list_changed` (lost over
//! HTTP, where no GET stream is open yet); it asks `roots/list` by itself 350 ms after
//! `initialized`; resource updates and log messages come only after the toggle tools start a 5 s
//! timer, which keeps the stdio process alive until it is toggled off or killed.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modelctx_client::{
    CallOptions, Client, ClientBuilder, CompletionRef, Elicitation, Elicited, Era, Error,
    JsonObject, LogLevel, ProtocolVersion, RecvError, ServerCommand, ServerNotification, model,
};
use modelctx_tests::client::{completions, expect_notification, sampled};
use modelctx_tests::http::within;
use modelctx_tests::node::{self, ts_dir};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

/// The root the client gives the server.
const ROOT_URI: &str = "file:///tmp/everything-root";
const ROOT_NAME: &str = "everything root";

/// The tools the server registers only after `initialized`, for the capabilities declared.
const CONDITIONAL_TOOLS: &[&str] = &[
    "get-roots-list",
    "trigger-sampling-request",
    "trigger-elicitation-request",
    "trigger-url-elicitation",
    "simulate-research-query",
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Transport {
    Stdio,
    Http,
}

/// The server's entry point, in `tests/ts`.
const ENTRY: &str = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";

/// The Node binary, once it and the server are there (else the test is skipped, unless
/// `MODELCTX_REQUIRE_NODE` is set).
fn node() -> Option<String> {
    let node = node::node()?;
    let entry = ts_dir().join(ENTRY);
    if !entry.is_file() {
        return node::skipped(format!("{} is missing", entry.display()));
    }
    Some(node)
}

/// What the client's handlers and callback saw.
#[derive(Default)]
struct Seen {
    sampling: Mutex<Vec<model::CreateMessageRequestParams>>,
    elicitations: Mutex<Vec<Elicitation>>,
    roots_asked: AtomicUsize,
    tools_changed: AtomicUsize,
}

/// A client with every input handler, as a host would build it.
fn builder(seen: &Arc<Seen>) -> ClientBuilder {
    let (sampler, elicited, rooted, changed) =
        (seen.clone(), seen.clone(), seen.clone(), seen.clone());
    Client::builder("client-everything-tests", "1.0.0")
        .on_sampling(move |params| {
            sampler.sampling.lock().unwrap().push(params);
            async move {
                Ok(sampled(json!({
                    "role": "assistant",
                    "content": {"type": "text", "text": "Four, said the model."},
                    "model": "rust-test-model",
                    "stopReason": "endTurn",
                })))
            }
        })
        .on_elicitation(move |elicitation| {
            elicited
                .elicitations
                .lock()
                .unwrap()
                .push(elicitation.clone());
            async move {
                Ok(match elicitation {
                    Elicitation::Form { schema, .. } => Elicited::accept(fill_form(&schema)),
                    Elicitation::Url { .. } => Elicited::accepted(),
                    _ => Elicited::decline(),
                })
            }
        })
        .url_elicitation()
        .on_roots(move || {
            rooted.roots_asked.fetch_add(1, Ordering::SeqCst);
            async {
                Ok(vec![model::Root {
                    meta: None,
                    name: Some(ROOT_NAME.into()),
                    uri: ROOT_URI.into(),
                }])
            }
        })
        .on_notification(move |n| {
            if *n == ServerNotification::ToolsListChanged {
                changed.tools_changed.fetch_add(1, Ordering::SeqCst);
            }
        })
}

/// A value for every field of a form elicitation's schema, each valid for its field (not its
/// default: the last choice of an enumeration, the middle of a range).
fn fill_form(schema: &JsonObject) -> JsonObject {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return JsonObject::new();
    };
    properties
        .iter()
        .filter_map(|(name, property)| Some((name.clone(), value_for(name, property)?)))
        .collect()
}

fn value_for(name: &str, property: &Value) -> Option<Value> {
    let last_const = |options: &Value| {
        options
            .as_array()
            .and_then(|o| o.last())
            .map(|o| o["const"].clone())
    };
    if let Some(last) = property["enum"].as_array().and_then(|e| e.last()) {
        return Some(last.clone());
    }
    if let Some(last) = last_const(&property["oneOf"]) {
        return Some(last);
    }
    Some(match property["type"].as_str()? {
        "string" => Value::from(match property["format"].as_str() {
            Some("email") => "ada@example.com",
            Some("uri") => "https://example.com/ada",
            Some("date") => "1815-12-10",
            Some("date-time") => "1815-12-10T08:00:00Z",
            _ if name == "name" => "Ada Lovelace",
            _ => "It was a bright cold day in April.",
        }),
        "boolean" => Value::Bool(true),
        "integer" => {
            let min = property["minimum"].as_i64().unwrap_or(0);
            let max = property["maximum"].as_i64().unwrap_or(min + 10);
            Value::from(min + (max - min) / 2)
        }
        "number" => {
            let min = property["minimum"].as_f64().unwrap_or(0.0);
            let max = property["maximum"].as_f64().unwrap_or(min + 10.0);
            Value::from(min + (max - min) / 4.0 + 0.5)
        }
        "array" => {
            let items = &property["items"];
            let choice = match items["enum"].as_array().and_then(|e| e.last()) {
                Some(last) => last.clone(),
                None => last_const(&items["anyOf"])?,
            };
            json!([choice])
        }
        _ => return None,
    })
}

/// The server over Streamable HTTP: killed when dropped.
struct HttpServer {
    url: String,
    /// What it printed on stdout: a line per request, the session's start and end.
    log: Arc<Mutex<Vec<String>>>,
    _child: Child,
}

impl HttpServer {
    /// Waits until the server has printed a line that contains `wanted`.
    async fn printed(&self, wanted: &str) -> String {
        within(wanted, async {
            loop {
                if let Some(line) = self.log.lock().unwrap().iter().find(|l| l.contains(wanted)) {
                    return line.clone();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }
}

/// Starts the server on a free port. It cannot report the port it bound (`PORT=0` prints "port
/// 0"), and it prints its ready line even when the bind fails: so a port is chosen here, and the
/// server counts as started once it is alive and the port answers; a lost race for the port is
/// retried with another.
async fn start_http(node: &str) -> HttpServer {
    for _ in 0..3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut child = node::command(node, ENTRY)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node starts");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped");
        let lines = log.clone();
        tokio::spawn(async move {
            let mut stdout = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = stdout.next_line().await {
                lines.lock().unwrap().push(line);
            }
        });
        // The ready line is on stderr; keep draining it (shown with a failing test's output).
        let stderr = child.stderr.take().expect("piped");
        let (ready, is_ready) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut ready = Some(ready);
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("server-everything (http): {line}");
                if line.contains("listening on port")
                    && let Some(ready) = ready.take()
                {
                    let _ = ready.send(());
                }
            }
        });
        let started = within("the HTTP server starts", async {
            tokio::select! {
                _ = is_ready => {}
                status = child.wait() => {
                    eprintln!("the HTTP server exited at once: {status:?}");
                    return false;
                }
            }
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    eprintln!("the HTTP server exited: {status}; trying another port");
                    return false;
                }
                if tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
                {
                    // A failed bind prints the ready line, then exits: give it the moment.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    return matches!(child.try_wait(), Ok(None));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        if started {
            return HttpServer {
                url: format!("http://127.0.0.1:{port}/mcp"),
                log,
                _child: child,
            };
        }
    }
    panic!("the HTTP server did not start on any of three ports");
}

/// The ids of this process's children that run the server over stdio (Linux: read from
/// `/proc`; elsewhere unknown).
fn stdio_server_processes() -> Option<Vec<u32>> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // `pid (comm) state ppid ...`: the comm may hold spaces, so split after its `)`.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if ppid != Some(me.as_str()) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.contains(&&b"stdio"[..])
            && args
                .iter()
                .any(|a| a.ends_with(b"server-everything/dist/index.js"))
        {
            found.push(pid);
        }
    }
    Some(found)
}

fn texts(result: &model::CallToolResult) -> Vec<String> {
    result
        .content
        .iter()
        .map(|block| match block {
            model::ContentBlock::TextContent(t) => t.text.clone(),
            other => panic!("not a text block: {other:?}"),
        })
        .collect()
}

fn text(result: &model::CallToolResult) -> String {
    assert_ne!(result.is_error, Some(true), "{result:?}");
    texts(result).concat()
}

/// Checks a content block's annotations: its priority and audience.
fn assert_annotations(
    annotations: Option<&model::Annotations>,
    priority: f64,
    audience: &[model::Role],
) {
    let annotations = annotations.expect("annotations");
    assert_eq!(
        annotations.priority.as_ref().and_then(|p| p.as_f64()),
        Some(priority)
    );
    assert_eq!(annotations.audience.as_deref(), Some(audience));
}

fn prompt_text(result: &model::GetPromptResult) -> &str {
    match &result.messages[0].content {
        model::ContentBlock::TextContent(t) => &t.text,
        other => panic!("not a text message: {other:?}"),
    }
}

/// Every feature the server offers, on one connection.
async fn everything(transport: Transport) {
    let Some(node) = node() else {
        return;
    };
    let begun = Instant::now();
    let seen = Arc::new(Seen::default());
    let mut http = None;
    let client = match transport {
        Transport::Stdio => {
            let command = ServerCommand::new(&node)
                .arg(ts_dir().join(ENTRY))
                .arg("stdio")
                .current_dir(ts_dir());
            within("connect", builder(&seen).connect_stdio(command))
                .await
                .expect("connected over stdio")
        }
        Transport::Http => {
            let server = start_http(&node).await;
            let client = within("connect", builder(&seen).connect_http(&server.url))
                .await
                .expect("connected over HTTP");
            http = Some(server);
            client
        }
    };
    let connected = begun.elapsed();

    // -- connect: a legacy server, at the newest legacy version ---------------------------------
    assert_eq!(client.era(), Some(Era::Legacy));
    assert_eq!(
        client.protocol_version(),
        Some(ProtocolVersion::V2025_11_25)
    );
    let info = client.server_info().expect("serverInfo");
    assert_eq!(info.name, "mcp-servers/everything", "{info:?}");
    let instructions = client.instructions().expect("instructions");
    assert!(instructions.contains("Everything Server"), "{instructions}");
    let capabilities = client.server_capabilities().expect("capabilities");
    assert_eq!(
        capabilities.resources.as_ref().and_then(|r| r.subscribe),
        Some(true)
    );
    assert!(capabilities.tools.is_some() && capabilities.prompts.is_some());
    assert!(capabilities.logging.is_some() && capabilities.completions.is_some());
    let raw = client
        .server_capabilities_json()
        .expect("capabilities as sent");
    for feature in ["tools", "prompts", "logging", "completions"] {
        assert!(raw.contains_key(feature), "{feature}");
    }
    let mut notifications = client.notifications();
    let session = match &http {
        Some(server) => {
            let line = server.printed("Session initialized with ID: ").await;
            let id = line.rsplit(' ').next().unwrap().to_owned();
            // The client opens the standalone GET stream of the session.
            server
                .printed(&format!("Establishing new SSE stream for session {id}"))
                .await;
            Some(id)
        }
        None => None,
    };

    // -- tools ----------------------------------------------------------------------------------
    // Five tools come after `initialized`; this also lists the output schemas the structured
    // results are checked against.
    let tools = within("the conditional tools are listed", async {
        loop {
            let tools = client.list_all_tools().await.unwrap();
            if CONDITIONAL_TOOLS
                .iter()
                .all(|name| tools.iter().any(|t| t.name == *name))
            {
                return tools;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools.len(), 17, "{names:?}");
    for name in ["echo", "get-sum", "toggle-simulated-logging", "get-env"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let weather = tools
        .iter()
        .find(|t| t.name == "get-structured-content")
        .unwrap();
    let output = weather.output_schema.as_ref().expect("an output schema");
    assert_eq!(
        output.required.as_deref(),
        Some(&["temperature".into(), "conditions".into(), "humidity".into()][..])
    );
    if transport == Transport::Stdio {
        // One `tools/list_changed` per conditional tool. (Over HTTP they are sent before the
        // client's GET stream exists, and the server drops them.)
        within("five tools/list_changed", async {
            while seen.tools_changed.load(Ordering::SeqCst) < CONDITIONAL_TOOLS.len() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    let echoed = client
        .call_tool("echo", json!({"message": "hello from rust"}))
        .await
        .unwrap();
    assert_eq!(text(&echoed), "Echo: hello from rust");
    let sum = client
        .call_tool("get-sum", json!({"a": 2, "b": 3.5}))
        .await
        .unwrap();
    assert_eq!(text(&sum), "The sum of 2 and 3.5 is 5.5.");

    // A bad call is a result with isError, not a JSON-RPC error.
    let unknown = client.call_tool("nope", json!({})).await.unwrap();
    assert_eq!(unknown.is_error, Some(true));
    assert!(texts(&unknown).concat().contains("Tool nope not found"));

    // Structured content, valid for the listed output schema (the client checks it).
    let chicago = client
        .call_tool("get-structured-content", json!({"location": "Chicago"}))
        .await
        .unwrap();
    let expected = json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82});
    assert_eq!(chicago.structured_content.as_ref(), Some(&expected));
    let as_text: Value = serde_json::from_str(&text(&chicago)).unwrap();
    assert_eq!(as_text, expected);

    // Annotated content blocks.
    let annotated = client
        .call_tool(
            "get-annotated-message",
            json!({"messageType": "error", "includeImage": true}),
        )
        .await
        .unwrap();
    assert_eq!(annotated.content.len(), 2, "{annotated:?}");
    let model::ContentBlock::TextContent(message) = &annotated.content[0] else {
        panic!("{annotated:?}");
    };
    assert_eq!(message.text, "Error: Operation failed");
    let everyone = [model::Role::User, model::Role::Assistant];
    assert_annotations(message.annotations.as_ref(), 1.0, &everyone);
    let model::ContentBlock::ImageContent(image) = &annotated.content[1] else {
        panic!("{annotated:?}");
    };
    assert_eq!(image.mime_type, "image/png");
    assert!(!image.data.is_empty());
    assert_annotations(image.annotations.as_ref(), 0.5, &[model::Role::User]);

    // Images, resource links and embedded resources.
    let image = client.call_tool("get-tiny-image", json!({})).await.unwrap();
    assert!(
        image.content.iter().any(
            |b| matches!(b, model::ContentBlock::ImageContent(i) if i.mime_type == "image/png")
        ),
        "{image:?}"
    );
    let links = client
        .call_tool("get-resource-links", json!({"count": 2}))
        .await
        .unwrap();
    let linked: Vec<&str> = links
        .content
        .iter()
        .filter_map(|b| match b {
            model::ContentBlock::ResourceLink(l) => Some(l.uri.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        linked,
        [
            "demo://resource/dynamic/blob/1",
            "demo://resource/dynamic/text/2"
        ]
    );
    let embedded = client
        .call_tool(
            "get-resource-reference",
            json!({"resourceType": "Text", "resourceId": 4}),
        )
        .await
        .unwrap();
    assert!(
        embedded.content.iter().any(|b| matches!(b,
            model::ContentBlock::EmbeddedResource(e) if matches!(&e.resource,
                model::EmbeddedResourceResource::TextResourceContents(t)
                    if t.uri == "demo://resource/dynamic/text/4"))),
        "{embedded:?}"
    );

    // A tool that runs only as a task (which this client does not do): an error result.
    let research = client
        .call_tool("simulate-research-query", json!({"topic": "rust"}))
        .await
        .unwrap();
    assert_eq!(research.is_error, Some(true));
    assert!(
        texts(&research)[0].contains("requires task augmentation"),
        "{research:?}"
    );

    // A call that times out is cancelled; what the server still sends for it (its progress)
    // is dropped, and the connection goes on.
    let late = Arc::new(AtomicUsize::new(0));
    let counter = late.clone();
    let options = CallOptions::new()
        .timeout(Some(Duration::from_millis(150)))
        .on_progress(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
    let timed_out = client
        .call_tool_with(
            "trigger-long-running-operation",
            json!({"duration": 0.6, "steps": 2}),
            options,
        )
        .await;
    assert!(matches!(timed_out, Err(Error::Timeout(_))), "{timed_out:?}");
    // The operation ends on the server 0.6 s after it began.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(late.load(Ordering::SeqCst), 0, "progress after the timeout");
    let echoed = client
        .call_tool("echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert_eq!(text(&echoed), "Echo: still here");
    let sizes = client.table_sizes().await.expect("open");
    assert_eq!((sizes.calls, sizes.session.outgoing), (0, 0), "{sizes:?}");

    // Progress: one notification a step, every one delivered before the result.
    let progress = Arc::new(Mutex::new(Vec::new()));
    let record = progress.clone();
    let options =
        CallOptions::new().on_progress(move |p| record.lock().unwrap().push((p.progress, p.total)));
    let long = within(
        "the long-running operation",
        client.call_tool_with(
            "trigger-long-running-operation",
            json!({"duration": 1, "steps": 3}),
            options,
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        text(&long),
        "Long running operation completed. Duration: 1 seconds, Steps: 3."
    );
    assert_eq!(
        *progress.lock().unwrap(),
        vec![(1.0, Some(3.0)), (2.0, Some(3.0)), (3.0, Some(3.0))]
    );

    // Sampling: the server's request reaches the handler, its answer comes back in the text.
    let sampled = within(
        "sampling",
        client.call_tool(
            "trigger-sampling-request",
            json!({"prompt": "What is 2+2?", "maxTokens": 42}),
        ),
    )
    .await
    .unwrap();
    let sampled = text(&sampled);
    let json_part = sampled
        .strip_prefix("LLM sampling result: \n")
        .unwrap_or_else(|| panic!("{sampled}"));
    let answer: Value = serde_json::from_str(json_part).unwrap();
    assert_eq!(answer["model"], "rust-test-model", "{answer}");
    assert_eq!(answer["role"], "assistant");
    assert_eq!(answer["content"]["text"], "Four, said the model.");
    {
        let asked = seen.sampling.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].max_tokens, 42);
        assert_eq!(
            asked[0].system_prompt.as_deref(),
            Some("You are a helpful test server.")
        );
        match &asked[0].messages[0].content {
            model::CreateMessageResultContent::TextContent(t) => assert_eq!(
                t.text,
                "Resource trigger-sampling-request context: What is 2+2?"
            ),
            other => panic!("{other:?}"),
        }
    }

    // Form elicitation: the handler reads the schema and fills every field validly.
    let form = within(
        "form elicitation",
        client.call_tool("trigger-elicitation-request", json!({})),
    )
    .await
    .unwrap();
    let schema = match seen.elicitations.lock().unwrap().as_slice() {
        [Elicitation::Form { message, schema }] => {
            assert_eq!(message, "Please provide inputs for the following fields:");
            schema.clone()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(schema["required"], json!(["name"]));
    assert_eq!(schema["properties"]["email"]["format"], "email");
    let given = fill_form(&schema);
    assert_eq!(given.len(), 13, "every field is filled: {given:?}");
    let parts = texts(&form);
    assert_eq!(parts[0], "✅ User provided the requested information!");
    for line in [
        "- Name: Ada Lovelace",
        "- Agreed to terms: true",
        "- Email: ada@example.com",
        "- Homepage: https://example.com/ada",
        "- Birthdate: 1815-12-10",
        "- Favorite Integer: 50",
        "- Favorite Number: 250.5",
    ] {
        assert!(parts[1].contains(line), "{line} in {:?}", parts[1]);
    }
    let raw: Value = serde_json::from_str(parts[2].trim_start_matches("\nRaw result: ")).unwrap();
    assert_eq!(raw["action"], "accept");
    assert_eq!(raw["content"], Value::Object(given));
    assert_eq!(
        raw["content"]["titledMultipleSelectEnum"],
        json!(["fish-3"])
    );

    // URL elicitation: the request path reaches the handler in URL mode.
    let url = "https://example.com/consent?step=1";
    let consented = within(
        "URL elicitation",
        client.call_tool(
            "trigger-url-elicitation",
            json!({"url": url, "elicitationId": "rust-1", "message": "Open it"}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        texts(&consented)[0],
        format!("✅ User completed the URL elicitation flow.\nElicitation ID: rust-1\nURL: {url}")
    );
    assert_eq!(
        seen.elicitations.lock().unwrap().last(),
        Some(&Elicitation::Url {
            message: "Open it".into(),
            url: url.into(),
            elicitation_id: Some("rust-1".into()),
        })
    );
    // Its error path: -32042 (URL elicitation required) with the prerequisite in `data`; the
    // retry with the same arguments goes through.
    let arguments = json!({"url": url, "errorPath": true});
    let required = client
        .call_tool("trigger-url-elicitation", arguments.clone())
        .await;
    let Err(Error::Remote(error)) = required else {
        panic!("{required:?}");
    };
    assert_eq!(error.code.0, -32042, "{error}");
    let data: Value = error.data_as().unwrap().expect("data");
    assert_eq!(
        data["elicitations"][0]["url"], "https://modelcontextprotocol.io",
        "{data}"
    );
    let retried = within(
        "the retried URL elicitation",
        client.call_tool("trigger-url-elicitation", arguments),
    )
    .await
    .unwrap();
    assert!(texts(&retried)[0].starts_with("✅"), "{retried:?}");
    assert_eq!(seen.elicitations.lock().unwrap().len(), 3);

    // Roots: asked by the server on its own after `initialized`, and by the tool.
    let roots = within("roots", client.call_tool("get-roots-list", json!({})))
        .await
        .unwrap();
    let roots = text(&roots);
    assert!(roots.contains("Current MCP Roots (1 total)"), "{roots}");
    assert!(
        roots.contains(&format!("1. {ROOT_NAME}\n   URI: {ROOT_URI}")),
        "{roots}"
    );
    let asked = seen.roots_asked.load(Ordering::SeqCst);
    assert!(asked >= 1);
    // The client says its roots changed: the server asks again.
    client.roots_changed().await.unwrap();
    within("roots/list again", async {
        while seen.roots_asked.load(Ordering::SeqCst) == asked {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // -- prompts --------------------------------------------------------------------------------
    let prompts = client.list_all_prompts().await.unwrap();
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "simple-prompt",
            "args-prompt",
            "completable-prompt",
            "resource-prompt"
        ]
    );
    let args = &prompts[1].arguments.as_ref().expect("arguments");
    assert_eq!(args[0].name, "city");
    assert_eq!(args[0].required, Some(true));
    let simple = client.get_prompt("simple-prompt", &[]).await.unwrap();
    assert_eq!(simple.messages.len(), 1);
    assert_eq!(simple.messages[0].role, model::Role::User);
    assert!(!prompt_text(&simple).is_empty());
    let weather = client
        .get_prompt("args-prompt", &[("city", "Paris"), ("state", "Texas")])
        .await
        .unwrap();
    assert_eq!(prompt_text(&weather), "What's weather in Paris, Texas?");
    let missing = client.get_prompt("args-prompt", &[]).await;
    match missing {
        Err(Error::Remote(e)) => assert_eq!(e.code, modelctx_client::ErrorCode::INVALID_PARAMS),
        other => panic!("{other:?}"),
    }
    let with_resource = client
        .get_prompt(
            "resource-prompt",
            &[("resourceType", "Text"), ("resourceId", "2")],
        )
        .await
        .unwrap();
    assert_eq!(with_resource.messages.len(), 2);
    assert!(
        matches!(&with_resource.messages[1].content,
            model::ContentBlock::EmbeddedResource(e) if matches!(&e.resource,
                model::EmbeddedResourceResource::TextResourceContents(t)
                    if t.uri == "demo://resource/dynamic/text/2")),
        "{with_resource:?}"
    );
    let team = CompletionRef::Prompt("completable-prompt".into());
    let departments = client
        .complete(&team, "department", "S", &HashMap::new())
        .await
        .unwrap();
    assert_eq!(departments.values, ["Sales", "Support"]);
    assert_eq!(departments.total, Some(2));
    let context = HashMap::from([("department".to_owned(), "Sales".to_owned())]);
    let people = client.complete(&team, "name", "", &context).await.unwrap();
    assert_eq!(people.values, ["David", "Eve", "Frank"]);
    let nobody = completions(&client, &team, "name", "").await;
    assert!(nobody.is_empty(), "{nobody:?}");

    // -- resources ------------------------------------------------------------------------------
    let resources = client.list_all_resources().await.unwrap();
    assert_eq!(resources.len(), 7, "{resources:?}");
    for resource in &resources {
        assert!(
            resource.uri.starts_with("demo://resource/static/document/")
                && resource.uri.ends_with(".md"),
            "{}",
            resource.uri
        );
        assert_eq!(resource.mime_type.as_deref(), Some("text/markdown"));
    }
    let document = "demo://resource/static/document/instructions.md";
    assert!(resources.iter().any(|r| r.uri == document));
    let read = client.read_resource(document).await.unwrap();
    match read.contents.as_slice() {
        [model::EmbeddedResourceResource::TextResourceContents(t)] => {
            assert_eq!(t.uri, document);
            assert!(t.text.contains("Everything Server"));
        }
        other => panic!("{other:?}"),
    }
    let templates = client.list_all_resource_templates().await.unwrap();
    let mut uri_templates: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    uri_templates.sort_unstable();
    let text_template = "demo://resource/dynamic/text/{resourceId}";
    assert_eq!(
        uri_templates,
        ["demo://resource/dynamic/blob/{resourceId}", text_template]
    );
    let dynamic = client
        .read_resource("demo://resource/dynamic/text/7")
        .await
        .unwrap();
    match dynamic.contents.as_slice() {
        [model::EmbeddedResourceResource::TextResourceContents(t)] => {
            assert!(
                t.text
                    .starts_with("Resource 7: This is a plaintext resource created at"),
                "{}",
                t.text
            );
        }
        other => panic!("{other:?}"),
    }
    let blob = client
        .read_resource("demo://resource/dynamic/blob/2")
        .await
        .unwrap();
    assert!(
        matches!(
            blob.contents.as_slice(),
            [model::EmbeddedResourceResource::BlobResourceContents(b)] if !b.blob.is_empty()
        ),
        "{blob:?}"
    );
    let unknown = client.read_resource("demo://nope").await;
    assert!(matches!(unknown, Err(Error::Remote(_))), "{unknown:?}");
    let template = CompletionRef::Resource(text_template.into());
    let ids = completions(&client, &template, "resourceId", "3").await;
    assert_eq!(ids, ["3"]);

    // A resource the server adds (from a `data:` URI, not the network): the list change
    // reaches the client, and the new resource is listed and read.
    let added = client
        .call_tool(
            "gzip-file-as-resource",
            json!({"name": "rust.txt.gz", "data": "data:text/plain;base64,aGVsbG8=",
                   "outputType": "resourceLink"}),
        )
        .await
        .unwrap();
    let session_uri = "demo://resource/session/rust.txt.gz";
    assert!(
        added
            .content
            .iter()
            .any(|b| matches!(b, model::ContentBlock::ResourceLink(l) if l.uri == session_uri)),
        "{added:?}"
    );
    expect_notification(&mut notifications, "resources/list_changed", |n| {
        *n == ServerNotification::ResourcesListChanged
    })
    .await;
    let resources = client.list_all_resources().await.unwrap();
    assert_eq!(resources.len(), 8);
    let gzipped = client.read_resource(session_uri).await.unwrap();
    assert!(
        matches!(
            gzipped.contents.as_slice(),
            [model::EmbeddedResourceResource::BlobResourceContents(b)] if !b.blob.is_empty()
        ),
        "{gzipped:?}"
    );

    // Subscriptions: updates come once the toggle starts the server's timer (at once, then
    // every 5 s).
    let subscribed = "demo://resource/dynamic/text/1";
    client.subscribe_resource(subscribed).await.unwrap();
    let toggled = client
        .call_tool("toggle-subscriber-updates", json!({}))
        .await
        .unwrap();
    assert!(text(&toggled).starts_with("Started"), "{toggled:?}");
    expect_notification(
        &mut notifications,
        "resources/updated",
        |n| matches!(n, ServerNotification::ResourceUpdated { uri } if uri == subscribed),
    )
    .await;
    let toggled = client
        .call_tool("toggle-subscriber-updates", json!({}))
        .await
        .unwrap();
    assert!(text(&toggled).starts_with("Stopped"), "{toggled:?}");
    client.unsubscribe_resource(subscribed).await.unwrap();

    // -- logging --------------------------------------------------------------------------------
    client.set_log_level(LogLevel::Debug).await.unwrap();
    let toggled = client
        .call_tool("toggle-simulated-logging", json!({}))
        .await
        .unwrap();
    assert!(!texts(&toggled).is_empty());
    let log = expect_notification(&mut notifications, "a simulated log message", |n| {
        matches!(n, ServerNotification::Log(log)
            if log.data.as_str().is_some_and(|d| d.contains("level message") || d.contains("level-message")))
    })
    .await;
    let ServerNotification::Log(log) = log else {
        unreachable!()
    };
    assert_eq!(log.logger, None);
    let toggled = client
        .call_tool("toggle-simulated-logging", json!({}))
        .await
        .unwrap();
    assert!(!texts(&toggled).is_empty());

    // -- the rest -------------------------------------------------------------------------------
    client.ping().await.unwrap();
    assert!(matches!(
        client.discover().await,
        Err(Error::NotAvailable(_))
    ));

    let server_processes = stdio_server_processes();
    if let (Transport::Stdio, Some(running)) = (transport, &server_processes) {
        assert_eq!(running.len(), 1, "one server process: {running:?}");
    }
    let closing = Instant::now();
    within("close", client.close()).await;
    let closed = closing.elapsed();
    assert!(client.is_closed());
    if let (Some(server), Some(id)) = (&http, &session) {
        // The session was ended with DELETE, and it was the only one.
        server
            .printed(&format!(
                "Received session termination request for session {id}"
            ))
            .await;
        server
            .printed(&format!("Transport closed for session {id}"))
            .await;
        let log = server.log.lock().unwrap();
        let sessions = log
            .iter()
            .filter(|l| l.starts_with("Session initialized"))
            .count();
        assert_eq!(sessions, 1, "{log:#?}");
    }
    if let (Transport::Stdio, Some(running)) = (transport, &server_processes) {
        // Gone, and reaped: not even a zombie is left.
        for pid in running {
            let left = std::path::Path::new(&format!("/proc/{pid}")).exists();
            assert!(!left, "the server process {pid} is still there after close");
        }
    }
    let after = client
        .call_tool("echo", json!({"message": "after close"}))
        .await;
    assert!(matches!(after, Err(Error::Closed(_))), "{after:?}");
    // The notifications end (after any that were queued).
    while !matches!(
        within("the notifications end", notifications.recv()).await,
        Err(RecvError::Closed)
    ) {}
    eprintln!(
        "{transport:?}: connected in {connected:?}, closed in {closed:?}, {:?} in all; \
         {} tools/list_changed heard, roots asked {} times",
        begun.elapsed(),
        seen.tools_changed.load(Ordering::SeqCst),
        seen.roots_asked.load(Ordering::SeqCst),
    );
}

#[tokio::test]
async fn everything_over_stdio() {
    everything(Transport::Stdio).await;
}

#[tokio::test]
async fn everything_over_streamable_http() {
    everything(Transport::Http).await;
}
