//! `mcx demo`: the demo server over stdio (a child process: this executable's `serve demo
//! --stdio`) and over Streamable HTTP (in this process, on 127.0.0.1:0); a client in each era
//! for each; every feature walked through, with a readable transcript on stdout.
//!
//! Four walks: stdio and HTTP, each in the era the probe finds (modern with this server) and
//! pinned to the legacy era (2025-11-25). The first is printed in full; each of the others runs
//! all the same and is printed as one line, saying how many steps passed and whether any of
//! them printed differently from the first walk, unless `--all` asks for every walk in full. A
//! step that fails is printed in full, whichever walk it is in, and the demo ends with a failure.
//!
//! The order of the lines is the same from one run to the next: each step's output is buffered
//! and printed when the step ends, in a fixed order: what the step did; with `--wire`, the
//! JSON-RPC messages sent (`>`) and received (`<`), in the order the connection handled them;
//! what the server sent during the step (its requests, then progress, then log messages, then
//! notifications, each kind in the order it came); then the step's result. A step that expects
//! a notification (`unlock` and its `tools/list_changed`) waits for it, and connecting waits
//! for the notification stream to be open, so that nothing of one step arrives in another. Only
//! the URL of the HTTP server (its port) differs between runs; with `--wire`, so may the order
//! of messages that came on different HTTP streams at once (the list change and the answer to
//! `unlock`).

use std::collections::HashMap;
use std::future::Future;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use modelctx_client::{
    CallOptions, Client, ClientBuilder, CompletionRef, Direction, Elicitation, Elicited,
    JsonObject, LogLevel, ProtocolVersion, ServerCommand, ServerNotification, model,
};
use serde_json::{Value, json};

use crate::output::format_table;

/// How long to wait for the list-changed notification.
const NOTIFICATION_WAIT: Duration = Duration::from_secs(10);

/// What `mcx demo` was asked.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    /// Every walk in full (default: the first only).
    pub(crate) all: bool,
    /// The JSON-RPC messages of the walks shown.
    pub(crate) wire: bool,
}

#[derive(Clone, Copy)]
enum Transport {
    Stdio,
    Http,
}

#[derive(Clone, Copy)]
enum EraPick {
    /// Found by the probe (`server/discover`): the modern era with this server.
    Probe,
    /// Pinned to 2025-11-25 (`initialize`).
    Legacy,
}

/// The four walks, in the order they run.
const WALKS: [(Transport, EraPick); 4] = [
    (Transport::Stdio, EraPick::Probe),
    (Transport::Stdio, EraPick::Legacy),
    (Transport::Http, EraPick::Probe),
    (Transport::Http, EraPick::Legacy),
];

/// The heading of a walk.
fn title(transport: Transport, era: EraPick) -> String {
    let transport = match transport {
        Transport::Stdio => "stdio",
        Transport::Http => "Streamable HTTP",
    };
    let era = match era {
        EraPick::Probe => "era found by the probe",
        EraPick::Legacy => "legacy era, pinned to 2025-11-25",
    };
    format!("== {transport} ({era}) ==")
}

pub(crate) async fn run(options: Options) -> ExitCode {
    say!("mcx demo: the demo server over stdio and Streamable HTTP, a client in each era");
    // The steps of the first walk, as printed, to compare the others with.
    let mut first: Option<Vec<Vec<String>>> = None;
    // Whether the last line printed is a walk's summary (they follow one another).
    let mut summaries = false;
    for (i, (transport, era)) in WALKS.into_iter().enumerate() {
        let full = i == 0 || options.all;
        let transcript = Transcript::new(title(transport, era), full, options.wire);
        if full || !summaries {
            say!();
        }
        if full {
            say!("{}", transcript.title());
        }
        if let Err(e) = session(transport, era, &transcript).await {
            return crate::fail(format_args!("the demo failed: {e}"));
        }
        let steps = transcript.steps();
        match &first {
            None => first = Some(steps),
            Some(first) if !full => {
                say!("{}", summary(&transcript, &steps, first));
                summaries = true;
            }
            Some(_) => {}
        }
    }
    say!();
    say!("demo finished: every feature worked over stdio and HTTP, in both eras");
    ExitCode::SUCCESS
}

/// The line of a walk not shown: how many steps passed, and which of them printed differently
/// from the walk shown first (connecting aside: it names the transport and version).
fn summary(transcript: &Transcript, steps: &[Vec<String>], first: &[Vec<String>]) -> String {
    let differ: Vec<String> = steps
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(i, lines)| first.get(*i) != Some(*lines))
        .map(|(_, lines)| lines.first().map_or("", |l| l.trim()).to_owned())
        .collect();
    let protocol = transcript.protocol().unwrap_or_else(|| "?".to_owned());
    let passed = format!(
        "{} protocol {protocol}: {} steps, all passed",
        transcript.title(),
        steps.len()
    );
    if differ.is_empty() {
        format!("{passed} as above (--all to see them)")
    } else {
        format!(
            "{passed}; {} printed differently from the walk above: {} (--all to see them)",
            differ.len(),
            differ.join("; ")
        )
    }
}

/// What the server sent during a step, in the order the step prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// A request of the server's (elicitation, sampling) and its answer.
    Input,
    Progress,
    Log,
    Notification,
}

/// What a step prints after its buffered lines: the first line says what it did (and often
/// its result), the rest follow what the server sent.
struct Shown {
    head: String,
    rest: Vec<String>,
}

impl Shown {
    fn line(head: impl std::fmt::Display) -> Self {
        Shown {
            head: head.to_string(),
            rest: Vec::new(),
        }
    }

    fn then(mut self, line: impl std::fmt::Display) -> Self {
        self.rest.push(line.to_string());
        self
    }
}

/// What came during the step under way.
#[derive(Default)]
struct Buffer {
    /// The messages, `> json` and `< json` (with `--wire` only).
    wire: Vec<String>,
    server: Vec<(Kind, String)>,
}

struct State {
    title: String,
    /// Each step is printed as it ends.
    full: bool,
    wire: bool,
    buffer: Buffer,
    /// The lines of each step that ended (without the messages).
    steps: Vec<Vec<String>>,
    /// The version the connection speaks.
    protocol: Option<String>,
}

/// One walk's transcript: the callbacks of the client record into it what the server sends,
/// the walk's steps print it in a fixed order.
#[derive(Clone)]
struct Transcript {
    state: Arc<Mutex<State>>,
    /// Told each time something is recorded (a step may wait for it).
    arrived: Arc<tokio::sync::Notify>,
}

impl Transcript {
    fn new(title: String, full: bool, wire: bool) -> Self {
        Transcript {
            state: Arc::new(Mutex::new(State {
                title,
                full,
                wire,
                buffer: Buffer::default(),
                steps: Vec::new(),
                protocol: None,
            })),
            arrived: Arc::new(tokio::sync::Notify::new()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn title(&self) -> String {
        self.state().title.clone()
    }

    fn steps(&self) -> Vec<Vec<String>> {
        self.state().steps.clone()
    }

    fn protocol(&self) -> Option<String> {
        self.state().protocol.clone()
    }

    fn wire(&self) -> bool {
        self.state().wire
    }

    /// Records what the server sent.
    fn server(&self, kind: Kind, text: impl std::fmt::Display) {
        self.state().buffer.server.push((kind, text.to_string()));
        self.arrived.notify_waiters();
    }

    /// Records a message of the connection.
    fn message(&self, direction: Direction, json: &str) {
        let arrow = match direction {
            Direction::Sent => '>',
            _ => '<',
        };
        self.state().buffer.wire.push(format!("{arrow} {json}"));
    }

    /// Waits until what the server sent during the step under way has a line that `wanted`
    /// accepts; false after `wait`.
    async fn wait_for(&self, wait: Duration, wanted: impl Fn(Kind, &str) -> bool) -> bool {
        let found = async {
            loop {
                let arrived = self.arrived.notified();
                tokio::pin!(arrived);
                arrived.as_mut().enable();
                if self
                    .state()
                    .buffer
                    .server
                    .iter()
                    .any(|(k, t)| wanted(*k, t))
                {
                    return;
                }
                arrived.await;
            }
        };
        tokio::time::timeout(wait, found).await.is_ok()
    }

    /// Runs one step and prints it (when the walk is shown, or when it failed). `what` names
    /// the step when it fails.
    async fn step<T>(
        &self,
        what: &str,
        body: impl Future<Output = Result<(Shown, T), String>>,
    ) -> Result<T, String> {
        let outcome = body.await;
        let mut state = self.state();
        let buffer = std::mem::take(&mut state.buffer);
        let (shown, value) = match outcome {
            Ok((shown, value)) => (shown, Ok(value)),
            Err(e) => (
                Shown::line(what).then(format_args!("-> failed: {e}")),
                Err(format!("{what}: {e}")),
            ),
        };
        for line in printed(&state, &shown, &buffer, value.is_err()) {
            say!("{line}");
        }
        let lines = render(&shown, &buffer, false);
        state.steps.push(lines);
        value
    }
}

/// The lines to print for a step that ended: all of them when the walk is shown; for a walk
/// not shown, none unless the step failed, and then the walk's title, how many steps passed,
/// and the step in full.
fn printed(state: &State, shown: &Shown, buffer: &Buffer, failed: bool) -> Vec<String> {
    let mut lines = Vec::new();
    if !state.full {
        if !failed {
            return lines;
        }
        lines.push(state.title.clone());
        if !state.steps.is_empty() {
            lines.push(format!("  ({} steps passed)", state.steps.len()));
        }
    }
    lines.extend(render(shown, buffer, state.wire));
    lines
}

/// The lines of a step: what it did, the messages (with `wire`), what the server sent (by
/// kind, each kind in the order it came), the rest of the step's result.
fn render(shown: &Shown, buffer: &Buffer, wire: bool) -> Vec<String> {
    let mut lines = vec![format!("  {}", shown.head)];
    if wire {
        lines.extend(buffer.wire.iter().map(|m| format!("    {m}")));
    }
    let mut server: Vec<&(Kind, String)> = buffer.server.iter().collect();
    // Stable: each kind keeps the order it came in.
    server.sort_by_key(|(kind, _)| *kind);
    lines.extend(server.iter().map(|(_, text)| format!("    <- {text}")));
    lines.extend(shown.rest.iter().map(|line| format!("  {line}")));
    lines
}

/// The demo client: a scripted user answers elicitations, a canned model answers sampling,
/// notifications (and, with `--wire`, messages) are recorded in the transcript.
fn client_builder(era: EraPick, transcript: &Transcript) -> ClientBuilder {
    let elicited = transcript.clone();
    let sampled = transcript.clone();
    let notified = transcript.clone();
    let rooted = transcript.clone();
    let builder = Client::builder("mcx-demo-client", env!("CARGO_PKG_VERSION"))
        .on_elicitation(move |elicitation| {
            let transcript = elicited.clone();
            async move {
                match elicitation {
                    Elicitation::Form { message, .. } => {
                        transcript.server(Kind::Input, format_args!(
                            "elicitation: {message:?}; the scripted user accepts: confirm=true, note=\"scripted\""
                        ));
                        let mut content = JsonObject::new();
                        content.insert("confirm".into(), Value::Bool(true));
                        content.insert("note".into(), Value::from("scripted"));
                        Ok(Elicited::accept(content))
                    }
                    other => {
                        transcript.server(
                            Kind::Input,
                            format_args!("elicitation {other:?}: declined"),
                        );
                        Ok(Elicited::decline())
                    }
                }
            }
        })
        .on_sampling(move |params| {
            let transcript = sampled.clone();
            async move {
                let prompt = match params.messages.first().map(|m| &m.content) {
                    Some(model::CreateMessageResultContent::TextContent(t)) => t.text.clone(),
                    _ => "?".to_owned(),
                };
                transcript.server(Kind::Input, format_args!(
                    "sampling: the server asks the model {prompt:?} (maxTokens {}); the canned model replies",
                    params.max_tokens
                ));
                Ok(model::CreateMessageResult {
                    meta: None,
                    content: model::CreateMessageResultContent::TextContent(model::TextContent {
                        meta: None,
                        annotations: None,
                        text:
                            "Tokens drift like leaves / one request, one answer / the stream carries all"
                                .into(),
                    }),
                    model: "canned-model-1".into(),
                    role: model::Role::Assistant,
                    stop_reason: Some("endTurn".into()),
                    extra: JsonObject::new(),
                })
            }
        })
        .on_roots(move || {
            let transcript = rooted.clone();
            async move {
                transcript.server(
                    Kind::Input,
                    format_args!("roots: the server asks for the client's roots; the client gives {ROOT}"),
                );
                Ok(vec![model::Root {
                    meta: None,
                    name: Some("project".into()),
                    uri: ROOT.into(),
                }])
            }
        })
        .on_notification(move |notification| match notification {
            ServerNotification::Log(log) => notified.server(
                Kind::Log,
                format_args!(
                    "log [{} {}] {}",
                    log.level.as_str(),
                    log.logger.as_deref().unwrap_or("-"),
                    log.data
                ),
            ),
            ServerNotification::ToolsListChanged => {
                notified.server(Kind::Notification, LIST_CHANGED);
            }
            _ => {}
        })
        .request_timeout(Some(Duration::from_secs(30)));
    let builder = if transcript.wire() {
        let tapped = transcript.clone();
        builder.on_wire(move |direction, json| tapped.message(direction, json))
    } else {
        builder
    };
    match era {
        EraPick::Probe => builder,
        EraPick::Legacy => builder.protocol_version(ProtocolVersion::V2025_11_25),
    }
}

/// The root the walk's client declares.
const ROOT: &str = "file:///home/user/project";

/// How the tools' list change is shown.
const LIST_CHANGED: &str = "notification: tools/list_changed";

/// What connecting printed: where the server is, then the connection.
fn connected(client: &Client, transcript: &Transcript, head: String) -> Shown {
    let server = client.server_info_json().unwrap_or(Value::Null);
    let capabilities: Vec<String> = client
        .server_capabilities_json()
        .map(|c| c.keys().cloned().collect())
        .unwrap_or_default();
    let protocol = client
        .protocol_version()
        .map_or_else(|| "?".to_owned(), |v| v.to_string());
    transcript.state().protocol = Some(protocol.clone());
    Shown::line(head)
        .then(format_args!(
            "connected to {} {}, protocol {protocol} ({:?} era)",
            server["name"].as_str().unwrap_or("?"),
            server["version"].as_str().unwrap_or("?"),
            client.era().map_or(modelctx_client::Era::Legacy, |e| e),
        ))
        .then(format_args!("capabilities: {}", capabilities.join(", ")))
}

/// Connects, then waits until the server's notifications can reach the client (the modern
/// listen stream acknowledged, the legacy standalone stream open), so that its messages are
/// part of connecting.
async fn connect(
    connecting: impl Future<Output = Result<Client, modelctx_client::ConnectError>>,
    transcript: &Transcript,
    head: String,
) -> Result<(Shown, Client), String> {
    let client = connecting.await.map_err(|e| e.to_string())?;
    if let Err(e) = client.listening().await {
        client.close().await;
        return Err(format!("listening: {e}"));
    }
    Ok((connected(&client, transcript, head), client))
}

/// One connection: connect, walk, close.
async fn session(
    transport: Transport,
    era: EraPick,
    transcript: &Transcript,
) -> Result<(), String> {
    match transport {
        Transport::Stdio => {
            let exe =
                std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
            let command = ServerCommand::new(&exe)
                .args(["serve", "demo", "--stdio"])
                .stderr(modelctx_stdio::Stderr::Inherit);
            let head = format!(
                "starting `{} serve demo --stdio` as a child process",
                exe.display()
            );
            let client = transcript
                .step(
                    "connecting over stdio",
                    connect(
                        client_builder(era, transcript).connect_stdio(command),
                        transcript,
                        head,
                    ),
                )
                .await?;
            walk_and_close(client, transcript).await
        }
        Transport::Http => {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            let running = crate::demo::server()
                .serve_http(addr, modelctx_http::server::ServerConfig::default())
                .await
                .map_err(|e| format!("serving HTTP: {e}"))?;
            let url = format!("http://{}/mcp", running.local_addr());
            let head = format!("serving the demo server in this process at {url}");
            let client = transcript
                .step(
                    &format!("connecting to {url}"),
                    connect(
                        client_builder(era, transcript).connect_http(&url),
                        transcript,
                        head,
                    ),
                )
                .await;
            let result = match client {
                Ok(client) => walk_and_close(client, transcript).await,
                Err(e) => Err(e),
            };
            running.shutdown(Duration::from_secs(1)).await;
            result
        }
    }
}

/// Walks, then closes the connection (a step of its own: it sends messages too).
async fn walk_and_close(client: Client, transcript: &Transcript) -> Result<(), String> {
    let walked = walk(&client, transcript).await;
    let closed = transcript
        .step("closing", async {
            client.close().await;
            Ok((Shown::line("closed the connection"), ()))
        })
        .await;
    walked.and(closed)
}

/// The text of a tool result.
fn text_of(result: &model::CallToolResult) -> String {
    result
        .content
        .iter()
        .map(|block| match block {
            model::ContentBlock::TextContent(t) => t.text.clone(),
            other => format!("{other:?}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Calls a tool and checks that it did not fail.
async fn call(
    client: &Client,
    name: &str,
    args: Value,
    options: CallOptions,
) -> Result<model::CallToolResult, String> {
    let result = client
        .call_tool_with(name, args, options)
        .await
        .map_err(|e| format!("tools/call {name}: {e}"))?;
    if result.is_error == Some(true) {
        return Err(format!("tool {name} failed: {}", text_of(&result)));
    }
    Ok(result)
}

/// A table, one line each, indented under its step.
fn table(headers: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    format_table(headers, rows)
        .lines()
        .map(|l| format!("  {l}"))
        .collect()
}

/// `Ok((shown, ()))`: a step that returns nothing.
fn done(shown: Shown) -> Result<(Shown, ()), String> {
    Ok((shown, ()))
}

/// Every feature, one step each.
async fn walk(client: &Client, t: &Transcript) -> Result<(), String> {
    let e = |what: &str| {
        let what = what.to_owned();
        move |e: modelctx_client::Error| format!("{what}: {e}")
    };

    // Tools.
    t.step("tools/list", async {
        let tools = client.list_all_tools().await.map_err(e("tools/list"))?;
        let rows: Vec<Vec<String>> = tools
            .iter()
            .map(|t| vec![t.name.clone(), t.description.clone().unwrap_or_default()])
            .collect();
        let mut shown = Shown::line(format_args!("tools/list: {} tools", tools.len()));
        shown.rest = table(&["NAME", "DESCRIPTION"], &rows);
        done(shown)
    })
    .await?;

    t.step("call echo {text: hello}", async {
        let result = call(client, "echo", json!({"text": "hello"}), CallOptions::new()).await?;
        done(Shown::line(format_args!(
            "call echo {{text: hello}} -> {}",
            text_of(&result)
        )))
    })
    .await?;

    t.step("call add {a: 2, b: 3}", async {
        let result = call(client, "add", json!({"a": 2, "b": 3}), CallOptions::new()).await?;
        done(Shown::line(format_args!(
            "call add {{a: 2, b: 3}} -> structured {}",
            result.structured_content.unwrap_or(Value::Null)
        )))
    })
    .await?;

    t.step("set the log level to notice", async {
        client
            .set_log_level(LogLevel::Notice)
            .await
            .map_err(e("logging level"))?;
        done(Shown::line(
            "log level set to notice (the countdown's debug lines are not sent)",
        ))
    })
    .await?;

    t.step("call countdown {steps: 3}", async {
        let progress = t.clone();
        let options = CallOptions::new().on_progress(move |p| {
            progress.server(
                Kind::Progress,
                format_args!(
                    "progress {}/{} {}",
                    p.progress,
                    p.total.unwrap_or(0.0),
                    p.message.unwrap_or_default()
                ),
            );
        });
        let result = call(
            client,
            "countdown",
            json!({"steps": 3, "delay_ms": 20}),
            options,
        )
        .await?;
        done(
            Shown::line("call countdown {steps: 3}, with progress:")
                .then(format_args!("  -> {}", text_of(&result))),
        )
    })
    .await?;

    t.step("call confirm {action: deploy}", async {
        let result = call(
            client,
            "confirm",
            json!({"action": "deploy"}),
            CallOptions::new(),
        )
        .await?;
        done(
            Shown::line("call confirm {action: deploy} (the server asks the user):")
                .then(format_args!("  -> {}", text_of(&result))),
        )
    })
    .await?;

    t.step("call haiku {topic: protocols}", async {
        let result = call(
            client,
            "haiku",
            json!({"topic": "protocols"}),
            CallOptions::new(),
        )
        .await?;
        done(
            Shown::line("call haiku {topic: protocols} (the server asks the client's model):")
                .then(format_args!("  -> {}", text_of(&result))),
        )
    })
    .await?;

    t.step("call roots", async {
        let result = call(client, "roots", json!({}), CallOptions::new()).await?;
        done(
            Shown::line("call roots (the server asks for the client's roots):")
                .then(format_args!("  -> {}", text_of(&result))),
        )
    })
    .await?;

    // Resources.
    t.step("resources/list", async {
        let resources = client
            .list_all_resources()
            .await
            .map_err(e("resources/list"))?;
        let rows: Vec<Vec<String>> = resources
            .iter()
            .map(|r| {
                vec![
                    r.uri.clone(),
                    r.name.clone(),
                    r.mime_type.clone().unwrap_or_default(),
                ]
            })
            .collect();
        let mut shown = Shown::line(format_args!(
            "resources/list: {} resources",
            resources.len()
        ));
        shown.rest = table(&["URI", "NAME", "TYPE"], &rows);
        done(shown)
    })
    .await?;
    for uri in ["demo://readme", "demo://config"] {
        t.step(&format!("read {uri}"), async {
            let read = client
                .read_resource(uri)
                .await
                .map_err(e("resources/read"))?;
            let text = contents_text(&read);
            done(Shown::line(format_args!(
                "read {uri} -> {}",
                text.lines().next().unwrap_or("")
            )))
        })
        .await?;
    }
    t.step("resources/templates/list", async {
        let templates = client
            .list_all_resource_templates()
            .await
            .map_err(e("resources/templates/list"))?;
        let mut shown = Shown::line(format_args!(
            "resources/templates/list: {} {}",
            templates.len(),
            if templates.len() == 1 {
                "template"
            } else {
                "templates"
            }
        ));
        for template in &templates {
            shown = shown.then(format_args!(
                "  resource template: {} ({})",
                template.uri_template, template.name
            ));
        }
        done(shown)
    })
    .await?;
    t.step("complete demo://notes/{name} name \"\"", async {
        let completion = client
            .complete(
                &CompletionRef::Resource("demo://notes/{name}".into()),
                "name",
                "",
                &HashMap::new(),
            )
            .await
            .map_err(e("completion/complete"))?;
        done(Shown::line(format_args!(
            "complete demo://notes/{{name}} name \"\" -> {}",
            completion.values.join(", ")
        )))
    })
    .await?;
    t.step("read demo://notes/todo", async {
        let read = client
            .read_resource("demo://notes/todo")
            .await
            .map_err(e("resources/read"))?;
        done(Shown::line(format_args!(
            "read demo://notes/todo -> {}",
            contents_text(&read)
        )))
    })
    .await?;

    // Prompts.
    t.step("prompts/list", async {
        let prompts = client.list_all_prompts().await.map_err(e("prompts/list"))?;
        let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
        done(Shown::line(format_args!(
            "prompts/list: {}",
            names.join(", ")
        )))
    })
    .await?;
    t.step("complete greet name \"A\"", async {
        let completion = client
            .complete(
                &CompletionRef::Prompt("greet".into()),
                "name",
                "A",
                &HashMap::new(),
            )
            .await
            .map_err(e("completion/complete"))?;
        done(Shown::line(format_args!(
            "complete greet name \"A\" -> {}",
            completion.values.join(", ")
        )))
    })
    .await?;
    t.step("get greet {name: Ada}", async {
        let prompt = client
            .get_prompt("greet", &[("name", "Ada")])
            .await
            .map_err(e("prompts/get"))?;
        let mut lines = prompt.messages.iter().map(|message| {
            let text = match &message.content {
                model::ContentBlock::TextContent(t) => t.text.clone(),
                other => format!("{other:?}"),
            };
            format!("get greet {{name: Ada}} -> {:?}: {text}", message.role)
        });
        let mut shown = Shown::line(
            lines
                .next()
                .unwrap_or_else(|| "get greet {name: Ada} -> no messages".to_owned()),
        );
        shown.rest.extend(lines);
        done(shown)
    })
    .await?;

    // A list that changes: the step waits for the server's notification.
    t.step("call unlock", async {
        let result = call(client, "unlock", json!({}), CallOptions::new()).await?;
        let told = t
            .wait_for(NOTIFICATION_WAIT, |kind, text| {
                kind == Kind::Notification && text == LIST_CHANGED
            })
            .await;
        if !told {
            return Err(format!(
                "no tools/list_changed notification within {NOTIFICATION_WAIT:?} after unlock"
            ));
        }
        done(
            Shown::line("call unlock (adds a tool; the server tells the client):")
                .then(format_args!("  -> {}", text_of(&result))),
        )
    })
    .await?;
    t.step("tools/list again", async {
        let tools = client.list_all_tools().await.map_err(e("tools/list"))?;
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        done(Shown::line(format_args!(
            "tools/list again: {}",
            names.join(", ")
        )))
    })
    .await?;
    t.step("call secret", async {
        let result = call(client, "secret", json!({}), CallOptions::new()).await?;
        done(Shown::line(format_args!(
            "call secret -> {}",
            text_of(&result)
        )))
    })
    .await?;
    Ok(())
}

/// The text of the first contents of a read.
fn contents_text(read: &model::ReadResourceResult) -> String {
    match read.contents.first() {
        Some(model::EmbeddedResourceResource::TextResourceContents(t)) => t.text.clone(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(server: &[(Kind, &str)], wire: &[&str]) -> Buffer {
        Buffer {
            wire: wire.iter().map(|m| (*m).to_owned()).collect(),
            server: server.iter().map(|(k, t)| (*k, (*t).to_owned())).collect(),
        }
    }

    #[test]
    fn a_step_prints_what_came_in_a_fixed_order_whatever_order_it_came_in() {
        let shown = Shown::line("call countdown").then("  -> liftoff");
        let came = [
            (Kind::Notification, "notification: tools/list_changed"),
            (Kind::Log, "log one"),
            (Kind::Progress, "progress 1"),
            (Kind::Input, "elicitation"),
            (Kind::Progress, "progress 2"),
            (Kind::Log, "log two"),
        ];
        let expected = [
            "  call countdown",
            "    <- elicitation",
            "    <- progress 1",
            "    <- progress 2",
            "    <- log one",
            "    <- log two",
            "    <- notification: tools/list_changed",
            "    -> liftoff",
        ];
        assert_eq!(render(&shown, &buffer(&came, &["> {}"]), false), expected);
        // The same lines however what came is interleaved (each kind in its own order).
        let other = [
            (Kind::Progress, "progress 1"),
            (Kind::Input, "elicitation"),
            (Kind::Log, "log one"),
            (Kind::Progress, "progress 2"),
            (Kind::Notification, "notification: tools/list_changed"),
            (Kind::Log, "log two"),
        ];
        assert_eq!(render(&shown, &buffer(&other, &[]), false), expected);
        // With the messages: right after the step's first line, in the order they went.
        let wired = render(
            &shown,
            &buffer(&came, &["> {\"id\":1}", "< {\"id\":1}"]),
            true,
        );
        assert_eq!(
            wired[..3],
            ["  call countdown", "    > {\"id\":1}", "    < {\"id\":1}"]
        );
        assert_eq!(wired[3..], expected[1..]);
    }

    #[tokio::test]
    async fn a_failed_step_of_a_walk_not_shown_is_printed_in_full_and_fails_the_walk() {
        let transcript = Transcript::new("== a walk ==".into(), false, true);
        for _ in 0..2 {
            let passed = transcript
                .step("ok", async { done(Shown::line("ok")) })
                .await;
            assert_eq!(passed, Ok(()));
        }
        {
            let state = transcript.state();
            let nothing = printed(&state, &Shown::line("ok"), &Buffer::default(), false);
            assert!(nothing.is_empty(), "{nothing:?}");
        }
        transcript.server(Kind::Log, "log [error demo] boom");
        transcript.message(Direction::Sent, "{\"id\":3}");
        let failed = transcript
            .step("call echo", async {
                Err::<(Shown, ()), _>("tools/call echo: the server went away".into())
            })
            .await;
        assert_eq!(
            failed,
            Err("call echo: tools/call echo: the server went away".into())
        );
        let state = transcript.state();
        let step = state.steps.last().expect("the failed step is counted");
        assert_eq!(
            *step,
            [
                "  call echo",
                "    <- log [error demo] boom",
                "  -> failed: tools/call echo: the server went away"
            ]
        );
        // What was printed for it: the walk, the steps that passed, the step with its messages.
        let mut before = State {
            title: state.title.clone(),
            full: false,
            wire: true,
            buffer: Buffer::default(),
            steps: state.steps[..2].to_vec(),
            protocol: None,
        };
        let shown = Shown::line("call echo").then("-> failed: gone");
        let lines = printed(
            &before,
            &shown,
            &buffer(&[(Kind::Log, "log")], &["> {\"id\":3}"]),
            true,
        );
        assert_eq!(
            lines,
            [
                "== a walk ==",
                "  (2 steps passed)",
                "  call echo",
                "    > {\"id\":3}",
                "    <- log",
                "  -> failed: gone"
            ]
        );
        // In a walk shown, the same step without the walk's title (printed before).
        before.full = true;
        let lines = printed(&before, &shown, &Buffer::default(), true);
        assert_eq!(lines, ["  call echo", "  -> failed: gone"]);
    }

    #[tokio::test]
    async fn a_step_waits_for_the_notification_it_expects() {
        let transcript = Transcript::new("== a walk ==".into(), true, false);
        let later = transcript.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            later.server(Kind::Log, "log first");
            later.server(Kind::Notification, LIST_CHANGED);
        });
        let wanted = |kind: Kind, text: &str| kind == Kind::Notification && text == LIST_CHANGED;
        assert!(transcript.wait_for(Duration::from_secs(10), wanted).await);
        // Already there: at once; never there: false after the wait.
        assert!(transcript.wait_for(Duration::ZERO, wanted).await);
        let never = |_: Kind, text: &str| text == "never";
        assert!(!transcript.wait_for(Duration::from_millis(50), never).await);
    }

    #[test]
    fn the_summary_says_which_steps_printed_differently() {
        let transcript = Transcript::new("== stdio (legacy) ==".into(), false, false);
        transcript.state().protocol = Some("2025-11-25".into());
        let step = |line: &str| vec![format!("  {line}")];
        let first = [step("connected, modern"), step("echo"), step("add")];
        // Connecting differs (it names the transport and version): not counted.
        let same = [step("connected, legacy"), step("echo"), step("add")];
        assert_eq!(
            summary(&transcript, &same, &first),
            "== stdio (legacy) == protocol 2025-11-25: 3 steps, all passed as above (--all to see them)"
        );
        let other = [
            step("connected, legacy"),
            step("echo"),
            step("add differently"),
        ];
        assert_eq!(
            summary(&transcript, &other, &first),
            "== stdio (legacy) == protocol 2025-11-25: 3 steps, all passed; 1 printed differently \
             from the walk above: add differently (--all to see them)"
        );
    }
}
