//! `mcx demo`: the demo server over stdio (a child process: this executable's `serve demo
//! --stdio`) and over Streamable HTTP (in this process, on 127.0.0.1:0); a client in each era
//! for each; every feature walked through, with a readable transcript on stdout.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use modelctx_client::{
    CallOptions, Client, ClientBuilder, CompletionRef, Elicitation, Elicited, JsonObject, LogLevel,
    ProtocolVersion, ServerCommand, ServerNotification, model,
};
use serde_json::{Value, json};

use crate::output::format_table;

/// How long to wait for the list-changed notification.
const NOTIFICATION_WAIT: Duration = Duration::from_secs(10);

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

pub(crate) async fn run() -> ExitCode {
    say!("mcx demo: the demo server over stdio and Streamable HTTP, a client in each era");
    let runs = [
        (Transport::Stdio, EraPick::Probe),
        (Transport::Stdio, EraPick::Legacy),
        (Transport::Http, EraPick::Probe),
        (Transport::Http, EraPick::Legacy),
    ];
    for (transport, era) in runs {
        if let Err(e) = session(transport, era).await {
            return crate::fail(e);
        }
    }
    say!();
    say!("demo finished: every feature worked over stdio and HTTP, in both eras");
    ExitCode::SUCCESS
}

/// Prints a step of the transcript.
fn step(text: impl std::fmt::Display) {
    say!("  {text}");
}

/// Prints what came from the server during a step.
fn from_server(text: impl std::fmt::Display) {
    say!("    <- {text}");
}

/// The demo client: a scripted user answers elicitations, a canned model answers sampling,
/// notifications are printed.
fn client_builder(era: EraPick) -> ClientBuilder {
    let builder = Client::builder("mcx-demo-client", env!("CARGO_PKG_VERSION"))
        .on_elicitation(|elicitation| async move {
            match elicitation {
                Elicitation::Form { message, .. } => {
                    from_server(format_args!(
                        "elicitation: {message:?}; the scripted user accepts: confirm=true, note=\"scripted\""
                    ));
                    let mut content = JsonObject::new();
                    content.insert("confirm".into(), Value::Bool(true));
                    content.insert("note".into(), Value::from("scripted"));
                    Ok(Elicited::accept(content))
                }
                other => {
                    from_server(format_args!("elicitation {other:?}: declined"));
                    Ok(Elicited::decline())
                }
            }
        })
        .on_sampling(|params| async move {
            let prompt = match params.messages.first().map(|m| &m.content) {
                Some(model::CreateMessageResultContent::TextContent(t)) => t.text.clone(),
                _ => "?".to_owned(),
            };
            from_server(format_args!(
                "sampling: the server asks the model {prompt:?} (maxTokens {}); the canned model replies",
                params.max_tokens
            ));
            Ok(model::CreateMessageResult {
                meta: None,
                content: model::CreateMessageResultContent::TextContent(model::TextContent {
                    meta: None,
                    annotations: None,
                    text: "Tokens drift like leaves / one request, one answer / the stream carries all"
                        .into(),
                }),
                model: "canned-model-1".into(),
                role: model::Role::Assistant,
                stop_reason: Some("endTurn".into()),
                extra: JsonObject::new(),
            })
        })
        .on_notification(|notification| match notification {
            ServerNotification::Log(log) => from_server(format_args!(
                "log [{} {}] {}",
                log.level.as_str(),
                log.logger.as_deref().unwrap_or("-"),
                log.data
            )),
            ServerNotification::ToolsListChanged => {
                from_server("notification: tools/list_changed")
            }
            _ => {}
        })
        .request_timeout(Some(Duration::from_secs(30)));
    match era {
        EraPick::Probe => builder,
        EraPick::Legacy => builder.protocol_version(ProtocolVersion::V2025_11_25),
    }
}

/// One connection: connect, walk, close.
async fn session(transport: Transport, era: EraPick) -> Result<(), String> {
    let era_name = match era {
        EraPick::Probe => "era found by the probe",
        EraPick::Legacy => "legacy era, pinned to 2025-11-25",
    };
    say!();
    match transport {
        Transport::Stdio => {
            let exe =
                std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
            say!("== stdio ({era_name}) ==");
            step(format_args!(
                "starting `{} serve demo --stdio` as a child process",
                exe.display()
            ));
            let command = ServerCommand::new(&exe)
                .args(["serve", "demo", "--stdio"])
                .stderr(modelctx_stdio::Stderr::Inherit);
            let client = client_builder(era)
                .connect_stdio(command)
                .await
                .map_err(|e| format!("connecting over stdio: {e}"))?;
            let result = walk(&client).await;
            client.close().await;
            result
        }
        Transport::Http => {
            say!("== Streamable HTTP ({era_name}) ==");
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            let running = crate::demo::server()
                .serve_http(addr, modelctx_http::server::ServerConfig::default())
                .await
                .map_err(|e| format!("serving HTTP: {e}"))?;
            let url = format!("http://{}/mcp", running.local_addr());
            step(format_args!(
                "serving the demo server in this process at {url}"
            ));
            let client = client_builder(era)
                .connect_http(&url)
                .await
                .map_err(|e| format!("connecting to {url}: {e}"));
            let result = match client {
                Ok(client) => {
                    let result = walk(&client).await;
                    client.close().await;
                    result
                }
                Err(e) => Err(e),
            };
            running.shutdown(Duration::from_secs(1)).await;
            result
        }
    }
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

fn indent(table: &str) -> String {
    table
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect::<String>()
}

/// Every feature, one step each.
async fn walk(client: &Client) -> Result<(), String> {
    let e = |what: &str| {
        let what = what.to_owned();
        move |e: modelctx_client::Error| format!("{what}: {e}")
    };
    let server = client.server_info_json().unwrap_or(Value::Null);
    let capabilities: Vec<String> = client
        .server_capabilities_json()
        .map(|c| c.keys().cloned().collect())
        .unwrap_or_default();
    step(format_args!(
        "connected to {} {}, protocol {} ({:?} era)",
        server["name"].as_str().unwrap_or("?"),
        server["version"].as_str().unwrap_or("?"),
        client
            .protocol_version()
            .map_or_else(|| "?".to_owned(), |v| v.to_string()),
        client.era().map_or(modelctx_client::Era::Legacy, |e| e),
    ));
    step(format_args!("capabilities: {}", capabilities.join(", ")));

    // Tools.
    let tools = client.list_all_tools().await.map_err(e("tools/list"))?;
    let rows: Vec<Vec<String>> = tools
        .iter()
        .map(|t| vec![t.name.clone(), t.description.clone().unwrap_or_default()])
        .collect();
    step(format_args!("tools/list: {} tools", tools.len()));
    print!("{}", indent(&format_table(&["NAME", "DESCRIPTION"], &rows)));

    let result = call(client, "echo", json!({"text": "hello"}), CallOptions::new()).await?;
    step(format_args!(
        "call echo {{text: hello}} -> {}",
        text_of(&result)
    ));

    let result = call(client, "add", json!({"a": 2, "b": 3}), CallOptions::new()).await?;
    step(format_args!(
        "call add {{a: 2, b: 3}} -> structured {}",
        result.structured_content.unwrap_or(Value::Null)
    ));

    client
        .set_log_level(LogLevel::Notice)
        .await
        .map_err(e("logging level"))?;
    step("log level set to notice (the countdown's debug lines are not sent)");
    step("call countdown {steps: 3}, with progress:");
    let options = CallOptions::new().on_progress(|p| {
        from_server(format_args!(
            "progress {}/{} {}",
            p.progress,
            p.total.unwrap_or(0.0),
            p.message.unwrap_or_default()
        ));
    });
    let result = call(
        client,
        "countdown",
        json!({"steps": 3, "delay_ms": 20}),
        options,
    )
    .await?;
    step(format_args!("  -> {}", text_of(&result)));

    step("call confirm {action: deploy} (the server asks the user):");
    let result = call(
        client,
        "confirm",
        json!({"action": "deploy"}),
        CallOptions::new(),
    )
    .await?;
    step(format_args!("  -> {}", text_of(&result)));

    step("call haiku {topic: protocols} (the server asks the client's model):");
    let result = call(
        client,
        "haiku",
        json!({"topic": "protocols"}),
        CallOptions::new(),
    )
    .await?;
    step(format_args!("  -> {}", text_of(&result)));

    // Resources.
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
    step(format_args!(
        "resources/list: {} resources",
        resources.len()
    ));
    print!("{}", indent(&format_table(&["URI", "NAME", "TYPE"], &rows)));
    for uri in ["demo://readme", "demo://config"] {
        let read = client
            .read_resource(uri)
            .await
            .map_err(e("resources/read"))?;
        let text = contents_text(&read);
        step(format_args!(
            "read {uri} -> {}",
            text.lines().next().unwrap_or("")
        ));
    }
    let templates = client
        .list_all_resource_templates()
        .await
        .map_err(e("resources/templates/list"))?;
    for t in &templates {
        step(format_args!(
            "resource template: {} ({})",
            t.uri_template, t.name
        ));
    }
    let completion = client
        .complete(
            &CompletionRef::Resource("demo://notes/{name}".into()),
            "name",
            "",
            &HashMap::new(),
        )
        .await
        .map_err(e("completion/complete"))?;
    step(format_args!(
        "complete demo://notes/{{name}} name \"\" -> {}",
        completion.values.join(", ")
    ));
    let read = client
        .read_resource("demo://notes/todo")
        .await
        .map_err(e("resources/read"))?;
    step(format_args!(
        "read demo://notes/todo -> {}",
        contents_text(&read)
    ));

    // Prompts.
    let prompts = client.list_all_prompts().await.map_err(e("prompts/list"))?;
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    step(format_args!("prompts/list: {}", names.join(", ")));
    let completion = client
        .complete(
            &CompletionRef::Prompt("greet".into()),
            "name",
            "A",
            &HashMap::new(),
        )
        .await
        .map_err(e("completion/complete"))?;
    step(format_args!(
        "complete greet name \"A\" -> {}",
        completion.values.join(", ")
    ));
    let prompt = client
        .get_prompt("greet", &[("name", "Ada")])
        .await
        .map_err(e("prompts/get"))?;
    for message in &prompt.messages {
        let text = match &message.content {
            model::ContentBlock::TextContent(t) => t.text.clone(),
            other => format!("{other:?}"),
        };
        step(format_args!(
            "get greet {{name: Ada}} -> {:?}: {text}",
            message.role
        ));
    }

    // A list that changes.
    let mut notifications = client.notifications();
    client.listening().await.map_err(e("listening"))?;
    step("call unlock (adds a tool; the server tells the client):");
    let result = call(client, "unlock", json!({}), CallOptions::new()).await?;
    step(format_args!("  -> {}", text_of(&result)));
    let changed = tokio::time::timeout(NOTIFICATION_WAIT, async {
        loop {
            match notifications.recv().await {
                Ok(ServerNotification::ToolsListChanged) => return true,
                Ok(_) => {}
                Err(modelctx_client::RecvError::Missed(_)) => {}
                Err(_) => return false,
            }
        }
    })
    .await
    .unwrap_or(false);
    if !changed {
        return Err("no tools/list_changed notification after unlock".into());
    }
    let tools = client.list_all_tools().await.map_err(e("tools/list"))?;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    step(format_args!("tools/list again: {}", names.join(", ")));
    let result = call(client, "secret", json!({}), CallOptions::new()).await?;
    step(format_args!("call secret -> {}", text_of(&result)));
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
