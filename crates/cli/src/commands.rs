//! The client commands: connect to the server the user named, run one command, print the
//! result as a table or JSON; a failure is told as `exit.rs` says (its kind, its exit status).

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use modelctx_client::auth::Authorizer;
use modelctx_client::{
    CallOptions, Client, ClientBuilder, CompletionRef, ConnectError, Era, HttpConfig, JsonObject,
    LogLevel, ServerCommand, ServerNotification, Unreadable,
};
use modelctx_types::consts::{ToolsCall, ToolsList};
use serde_json::{Value, json};

use crate::exit::{Failed, Kind};
use crate::output::{content, field, first_line, print_json, resource_contents, table};
use crate::{ClientCommand, PromptsCommand, ResourcesCommand, Target, ToolsCommand, words};

/// The exit status after Ctrl-C (128 + SIGINT).
const INTERRUPTED: u8 = 130;

/// Connects, runs `command` (both cancelled by Ctrl-C), closes. A failure is printed on stderr,
/// or as a JSON error on stdout with `json`; the exit status says its kind (`exit.rs`).
pub(crate) async fn run(target: Target, command: ClientCommand, json: bool) -> ExitCode {
    let connected = tokio::select! {
        connected = connect(&target) => connected,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("mcx: interrupted while connecting");
            return ExitCode::from(INTERRUPTED);
        }
    };
    let client = match connected {
        Ok(client) => client,
        Err(failed) => return failed.report(json),
    };
    // A call run as a task handles Ctrl-C itself: it cancels the task before mcx exits.
    let as_task = matches!(
        &command,
        ClientCommand::Tools(ToolsCommand::Call { task: true, .. })
    );
    let outcome = if as_task {
        execute(&client, command, json).await
    } else {
        tokio::select! {
            outcome = execute(&client, command, json) => outcome,
            // The call's future is dropped here, which cancels it on the wire.
            _ = tokio::signal::ctrl_c() => Err(Failure::Interrupted),
        }
    };
    // A question may still be on the terminal, its answer no longer awaited: its line is ended
    // and the lines held back meanwhile printed before anything else is said.
    crate::progress::release();
    if let (Err(Failure::Interrupted), false) = (&outcome, as_task) {
        eprintln!("mcx: interrupted; the call was cancelled");
    }
    let timed_out = matches!(&outcome, Err(Failure::Failed(f)) if f.kind == Kind::Timeout);
    if !timed_out {
        client.close().await;
    }
    // After a timeout the server is not waited for (a graceful close gives a child seconds to
    // exit after its stdin closes, then SIGTERM): the client is dropped with the runtime when
    // `main` returns, which kills a child at once, as after a connect timeout.
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Message(message)) => Failed::usage(message).report(json),
        Err(Failure::Failed(failed)) => failed.report(json),
        Err(Failure::Interrupted) => ExitCode::from(INTERRUPTED),
    }
}

/// Why a command failed.
enum Failure {
    /// The request cannot be carried out as given (a usage error, exit status 2).
    Message(String),
    /// Any failure, of its kind.
    Failed(Failed),
    /// Ctrl-C.
    Interrupted,
}

impl From<modelctx_client::Error> for Failure {
    fn from(e: modelctx_client::Error) -> Self {
        // A login needed after connecting (a refresh token refused, a step-up) off a terminal.
        if let Some(message) = e.oauth_error().and_then(crate::login::login_needed) {
            return Failure::Failed(Failed::new(Kind::Connection, message));
        }
        Failure::Failed(Failed::call(&e))
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Message(message)
    }
}

/// The client of the command-line tool: log messages and resynchronisations go to stderr.
pub(crate) fn builder(target: &Target) -> Result<ClientBuilder, String> {
    let mut builder =
        Client::builder("mcx", env!("CARGO_PKG_VERSION")).on_notification(|n| match n {
            ServerNotification::Log(log) => {
                let logger = log
                    .logger
                    .as_deref()
                    .map(|l| format!(" {l}"))
                    .unwrap_or_default();
                let data = match &log.data {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                crate::progress::eprint_line(&format!("[{}{logger}] {data}", log.level.as_str()));
            }
            ServerNotification::Resynced => {
                crate::progress::eprint_line("mcx: reconnected to the server");
            }
            ServerNotification::Unreadable(unreadable) => {
                crate::progress::eprint_line(&unreadable_note(unreadable));
            }
            _ => {}
        });
    if let Some(seconds) = target.timeout {
        // The same bound for connecting (each step of the handshake, and all of it) as for
        // each call; 0: calls wait forever, connecting keeps the client's defaults.
        let timeout = (seconds > 0).then(|| Duration::from_secs(seconds));
        builder = builder.request_timeout(timeout);
        if let Some(timeout) = timeout {
            builder = builder
                .handshake_timeout(timeout)
                .connect_timeout(Some(timeout));
        }
    }
    if let Some(level) = &target.log_level {
        let level = LogLevel::parse(level).ok_or_else(|| {
            format!("unknown log level `{level}` (debug, info, notice, warning, error, critical, alert, emergency)")
        })?;
        builder = builder.log_level(level);
    }
    // The era, and the answers to the server's requests (elicitation, roots, sampling).
    crate::answer::install(builder, target)
}

/// What mcx says of something the server sent that is not JSON-RPC (a stdio server's stray
/// line on stdout): its start, always escaped (it is no message, so nothing in it is meant for
/// the terminal).
fn unreadable_note(unreadable: &Unreadable) -> String {
    if unreadable.excerpt.is_empty() {
        return format!(
            "mcx: the server sent something that is not JSON-RPC: {}",
            unreadable.reason
        );
    }
    format!(
        "mcx: the server wrote a line that is not JSON-RPC: {}{}",
        crate::output::escape(&unreadable.excerpt),
        if unreadable.truncated { "..." } else { "" }
    )
}

async fn connect(target: &Target) -> Result<Client, Failed> {
    let builder = builder(target).map_err(Failed::usage)?;
    if let Some(line) = &target.stdio {
        let words = words::split(line).map_err(|e| Failed::usage(format!("--stdio: {e}")))?;
        let Some((program, args)) = words.split_first() else {
            return Err(Failed::usage("--stdio: an empty command line"));
        };
        let command = ServerCommand::new(program)
            .args(args)
            // The server's own messages are the user's to see.
            .stderr(modelctx_stdio::Stderr::Inherit);
        let command = target.child_env.apply(command).map_err(Failed::usage)?;
        return builder.connect_stdio(command).await.map_err(|e| match &e {
            ConnectError::Spawn(io) => Failed::spawn(program, io),
            _ => Failed::connect(&format!("`{line}`"), &e),
        });
    }
    if let Some(url) = &target.url {
        let bearer = bearer(target).map_err(Failed::usage)?;
        let config = http_config(&target.headers, bearer.as_deref()).map_err(Failed::usage)?;
        let config =
            crate::reach::with_tls(config, target.cacert.as_deref()).map_err(Failed::usage)?;
        // A token given (--bearer*, MCX_BEARER, an Authorization header) is sent as it is;
        // otherwise the OAuth client with mcx's store (`login.rs`).
        let builder = if config.headers.contains_key(http::header::AUTHORIZATION) {
            builder
        } else {
            match crate::login::for_command(target, url).await? {
                Some(oauth) => builder.auth(Arc::new(oauth) as Arc<dyn Authorizer>),
                None => builder,
            }
        };
        return match builder.connect_http_with(url, config).await {
            Ok(client) => Ok(client),
            Err(e) => Err(match crate::login::connect_failed(url, &e).await {
                Some(failed) => failed,
                None => {
                    let mut failed = Failed::connect(url, &e);
                    failed.message = crate::reach::hint(failed.message, &e, target);
                    failed
                }
            }),
        };
    }
    Err(Failed::usage(
        "no server: give --stdio \"<command line>\" or --url URL before the command",
    ))
}

/// The environment variable a bearer token is taken from.
pub(crate) const BEARER_VARIABLE: &str = "MCX_BEARER";

/// The bearer token: `--bearer`, else the contents of `--bearer-file` (without its trailing
/// newline), else `MCX_BEARER` when set; none when all are absent.
pub(crate) fn bearer(target: &Target) -> Result<Option<String>, String> {
    if let Some(token) = &target.bearer {
        return Ok(Some(token.clone()));
    }
    if let Some(path) = &target.bearer_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--bearer-file {}: {e}", path.display()))?;
        let token = text.strip_suffix('\n').unwrap_or(&text);
        let token = token.strip_suffix('\r').unwrap_or(token);
        if token.is_empty() {
            return Err(format!(
                "--bearer-file {}: the file is empty",
                path.display()
            ));
        }
        return Ok(Some(token.to_owned()));
    }
    match std::env::var(BEARER_VARIABLE) {
        Ok(token) if !token.is_empty() => Ok(Some(token)),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{BEARER_VARIABLE}: not UTF-8")),
    }
}

/// The HTTP settings with the user's headers.
pub(crate) fn http_config(headers: &[String], bearer: Option<&str>) -> Result<HttpConfig, String> {
    use http::{HeaderName, HeaderValue};
    let mut config = HttpConfig::default();
    for header in headers {
        let (name, value) = header
            .split_once(':')
            .ok_or_else(|| format!("--header `{header}`: expected `Name: value`"))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|e| format!("--header `{header}`: {e}"))?;
        let value =
            HeaderValue::from_str(value.trim()).map_err(|e| format!("--header `{header}`: {e}"))?;
        config.headers.append(name, value);
    }
    if let Some(token) = bearer {
        // The error names neither the token nor the header value.
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| "the bearer token has characters a header cannot carry".to_owned())?;
        value.set_sensitive(true);
        config.headers.insert(http::header::AUTHORIZATION, value);
    }
    Ok(config)
}

/// Every page of a list method, merged.
async fn list_all(client: &Client, method: &str, key: &str) -> Result<Vec<Value>, Failure> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let mut params = JsonObject::new();
        if let Some(cursor) = cursor.take() {
            params.insert("cursor".into(), Value::String(cursor));
        }
        let page = client.request(method, params, CallOptions::new()).await?;
        if let Some(page_items) = page[key].as_array() {
            items.extend(page_items.iter().cloned());
        }
        match page["nextCursor"].as_str() {
            Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
            _ => return Ok(items),
        }
    }
    Err(Failure::Failed(Failed::new(
        Kind::Protocol,
        format!("{method}: more than 1000 pages; gave up"),
    )))
}

/// `key=value` pairs.
fn pairs(items: &[String], option: &str) -> Result<Vec<(String, String)>, Failure> {
    items
        .iter()
        .map(|item| {
            item.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| Failure::Message(format!("{option} `{item}`: expected key=value")))
        })
        .collect()
}

async fn execute(client: &Client, command: ClientCommand, json: bool) -> Result<(), Failure> {
    match command {
        ClientCommand::Skills(c) => crate::skills::run(client, c, json)
            .await
            .map_err(Failure::Failed)?,
        ClientCommand::Tasks(c) => crate::tasks::run(client, c, json)
            .await
            .map_err(Failure::Failed)?,
        ClientCommand::Discover => {
            let info = json!({
                "protocolVersion": client.protocol_version().map(|v| v.to_string()),
                "serverInfo": client.server_info_json(),
                "capabilities": client.server_capabilities_json(),
                "instructions": client.instructions(),
            });
            if json {
                print_json(&info);
            } else {
                let server = client.server_info_json().unwrap_or(Value::Null);
                let capabilities: Vec<String> = client
                    .server_capabilities_json()
                    .map(|c| c.keys().cloned().collect())
                    .unwrap_or_default();
                let rows = [
                    vec![
                        "server".into(),
                        format!("{} {}", field(&server, "name"), field(&server, "version")),
                    ],
                    vec![
                        "protocol".into(),
                        info["protocolVersion"].as_str().unwrap_or("?").to_owned(),
                    ],
                    vec!["capabilities".into(), capabilities.join(", ")],
                    vec![
                        "instructions".into(),
                        client.instructions().unwrap_or_default(),
                    ],
                ];
                table(&["", ""], &rows);
            }
        }
        ClientCommand::Ping => {
            let start = std::time::Instant::now();
            let how = if client.era() == Some(Era::Modern) {
                client.discover().await?;
                "server/discover"
            } else {
                client.ping().await?;
                "ping"
            };
            let ms = start.elapsed().as_secs_f64() * 1000.0;
            if json {
                print_json(&json!({"ok": true, "method": how, "ms": ms}));
            } else {
                say!("ok: {how} answered in {ms:.1} ms");
            }
        }
        ClientCommand::Tools(ToolsCommand::List) => tools_list(client, json).await?,
        ClientCommand::Tools(ToolsCommand::Show { name }) => {
            tools_show(client, &name, json).await?
        }
        ClientCommand::Tools(ToolsCommand::Call {
            name,
            args,
            arg,
            task,
            ttl,
        }) => {
            let task = task.then_some(ttl);
            tools_call(client, &name, args.as_deref(), &arg, task, json).await?;
        }
        ClientCommand::Resources(ResourcesCommand::List) => {
            let resources = list_all(client, "resources/list", "resources").await?;
            if json {
                print_json(&json!({ "resources": resources }));
            } else {
                let rows: Vec<Vec<String>> = resources
                    .iter()
                    .map(|r| {
                        vec![
                            field(r, "uri"),
                            field(r, "name"),
                            field(r, "mimeType"),
                            first_line(&r["description"]),
                        ]
                    })
                    .collect();
                table(&["URI", "NAME", "TYPE", "DESCRIPTION"], &rows);
            }
        }
        ClientCommand::Resources(ResourcesCommand::Templates) => {
            let templates =
                list_all(client, "resources/templates/list", "resourceTemplates").await?;
            if json {
                print_json(&json!({ "resourceTemplates": templates }));
            } else {
                let rows: Vec<Vec<String>> = templates
                    .iter()
                    .map(|r| {
                        vec![
                            field(r, "uriTemplate"),
                            field(r, "name"),
                            field(r, "mimeType"),
                            first_line(&r["description"]),
                        ]
                    })
                    .collect();
                table(&["URI TEMPLATE", "NAME", "TYPE", "DESCRIPTION"], &rows);
            }
        }
        ClientCommand::Resources(ResourcesCommand::Read { uri }) => {
            let mut params = JsonObject::new();
            params.insert("uri".into(), Value::String(uri));
            let result = client
                .request("resources/read", params, CallOptions::new())
                .await?;
            if json {
                print_json(&result);
            } else {
                for contents in result["contents"].as_array().into_iter().flatten() {
                    say!("{}", resource_contents(contents));
                }
            }
        }
        ClientCommand::Prompts(PromptsCommand::List) => {
            let prompts = list_all(client, "prompts/list", "prompts").await?;
            if json {
                print_json(&json!({ "prompts": prompts }));
            } else {
                let rows: Vec<Vec<String>> = prompts
                    .iter()
                    .map(|p| {
                        let args: Vec<String> = p["arguments"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|a| {
                                let name = field(a, "name");
                                if a["required"] == true {
                                    name
                                } else {
                                    format!("[{name}]")
                                }
                            })
                            .collect();
                        vec![
                            field(p, "name"),
                            args.join(" "),
                            first_line(&p["description"]),
                        ]
                    })
                    .collect();
                table(&["NAME", "ARGUMENTS", "DESCRIPTION"], &rows);
            }
        }
        ClientCommand::Prompts(PromptsCommand::Get { name, args }) => {
            let args = pairs(&args, "--arg")?;
            let mut params = JsonObject::new();
            params.insert("name".into(), Value::String(name));
            if !args.is_empty() {
                let args: JsonObject = args
                    .into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect();
                params.insert("arguments".into(), Value::Object(args));
            }
            let result = client
                .request("prompts/get", params, CallOptions::new())
                .await?;
            if json {
                print_json(&result);
            } else {
                if let Some(description) = result["description"].as_str() {
                    say!("# {description}");
                }
                for message in result["messages"].as_array().into_iter().flatten() {
                    say!(
                        "{}: {}",
                        field(message, "role"),
                        content(&message["content"])
                    );
                }
            }
        }
        ClientCommand::Complete(args) => {
            let reference = match (args.reference.prompt, args.reference.resource) {
                (Some(prompt), _) => CompletionRef::Prompt(prompt),
                (None, Some(template)) => CompletionRef::Resource(template),
                (None, None) => return Err(Failure::Message("give --prompt or --resource".into())),
            };
            let context: HashMap<String, String> =
                pairs(&args.context, "--context")?.into_iter().collect();
            let completion = client
                .complete(&reference, &args.argument, &args.value, &context)
                .await?;
            if json {
                print_json(&json!({
                    "values": completion.values,
                    "total": completion.total,
                    "hasMore": completion.has_more,
                }));
            } else {
                for value in &completion.values {
                    say!("{value}");
                }
                if completion.has_more == Some(true) {
                    let total = completion
                        .total
                        .map(|t| format!(" of {t}"))
                        .unwrap_or_default();
                    eprintln!("({} shown{total}; there are more)", completion.values.len());
                }
            }
        }
    }
    Ok(())
}

/// `tools list`: a table of the tools, their arguments and descriptions (task-only tools
/// marked), or the list as JSON.
async fn tools_list(client: &Client, json: bool) -> Result<(), Failure> {
    let tools = list_all(client, ToolsList::VALUE, "tools").await?;
    if json {
        print_json(&json!({ "tools": tools }));
    } else {
        table(&["NAME", "ARGUMENTS", "DESCRIPTION"], &tools_rows(&tools));
    }
    Ok(())
}

/// The rows of the `tools list` table.
fn tools_rows(tools: &[Value]) -> Vec<Vec<String>> {
    tools
        .iter()
        .map(|t| {
            let description = first_line(&t["description"]);
            let description = if crate::tools::task_only(t) {
                format!("({}) {description}", crate::tools::TASK_ONLY)
            } else {
                description
            };
            vec![
                field(t, "name"),
                crate::tools::signature(t),
                description.trim_end().to_owned(),
            ]
        })
        .collect()
}

/// The listed tool called `name`, if the server lists one.
async fn find_tool(client: &Client, name: &str) -> Result<Option<Value>, Failure> {
    let tools = list_all(client, ToolsList::VALUE, "tools").await?;
    Ok(tools.into_iter().find(|t| t["name"] == name))
}

/// `tools show NAME`: the whole tool, pretty, or as JSON.
async fn tools_show(client: &Client, name: &str, json: bool) -> Result<(), Failure> {
    let Some(tool) = find_tool(client, name).await? else {
        // What the server offers decides, as when `tools call` names a tool it does not have.
        return Err(Failure::Failed(Failed::new(
            Kind::Protocol,
            format!("no tool `{name}` on this server (`mcx tools list` lists them)"),
        )));
    };
    if json {
        print_json(&tool);
    } else {
        for line in crate::tools::describe(&tool) {
            say!("{line}");
        }
    }
    Ok(())
}

/// The refusal to call a tool that only runs as a task: a protocol failure (status 4), as the
/// server's refusal of a call without a task would be.
fn task_only(name: &str) -> Failure {
    Failure::Failed(Failed::new(
        Kind::Protocol,
        crate::tools::task_only_refusal(name),
    ))
}

/// `tools call NAME`: the arguments from `--args` and `--arg` (typed by the tool's input
/// schema, listed first when there are `--arg`s), the call with progress, its content printed.
/// A tool that can only run as a task is refused with a message saying so: before the call
/// when the tool was listed, else when the call fails (or answers with something other than a
/// tool result). With `task` (`Some(ttl)`), the call runs as a task (`tasks.rs`).
async fn tools_call(
    client: &Client,
    name: &str,
    args: Option<&str>,
    arg: &[String],
    task: Option<Option<u64>>,
    json: bool,
) -> Result<(), Failure> {
    let listed = if arg.is_empty() {
        None
    } else {
        find_tool(client, name).await?
    };
    if task.is_none() && listed.as_ref().is_some_and(crate::tools::task_only) {
        return Err(task_only(name));
    }
    let schema = listed.as_ref().map_or(&Value::Null, |t| &t["inputSchema"]);
    let arguments = crate::tools::arguments(args, arg, schema)?;
    if let Some(ttl) = task {
        let result = crate::tasks::call(client, name, arguments, ttl)
            .await
            .map_err(|failure| match failure {
                crate::tasks::TaskFailure::Failed(failed) => Failure::Failed(failed),
                crate::tasks::TaskFailure::Interrupted => Failure::Interrupted,
            })?;
        return print_tool_result(name, result, json);
    }
    let mut params = JsonObject::new();
    params.insert("name".into(), Value::String(name.to_owned()));
    params.insert("arguments".into(), arguments);
    let (options, shown) = crate::progress::options();
    let result = client.request(ToolsCall::VALUE, params, options).await;
    drop(shown);
    // A task-only tool called without a task: the server's error (or a task instead of a
    // result) would not say what is wrong.
    let refused = match &result {
        Err(modelctx_client::Error::Remote(_) | modelctx_client::Error::InvalidResult { .. }) => {
            true
        }
        Ok(result) => !result["content"].is_array(),
        Err(_) => false,
    };
    if refused
        && listed.is_none()
        && find_tool(client, name)
            .await
            .is_ok_and(|tool| tool.as_ref().is_some_and(crate::tools::task_only))
    {
        return Err(task_only(name));
    }
    print_tool_result(name, result?, json)
}

/// [`print_tool_result`] for the calls of `servers.rs` (across the servers of a config).
pub(crate) fn print_result(name: &str, result: Value, json: bool) -> Result<(), Failed> {
    print_tool_result(name, result, json).map_err(|failure| match failure {
        Failure::Failed(failed) => failed,
        Failure::Message(message) => Failed::usage(message),
        Failure::Interrupted => Failed::new(Kind::Connection, "interrupted"),
    })
}

/// Prints a tool's result: its content (or structured content) as text, or the whole result as
/// JSON; a tool error (`isError`) is a failure of its own kind.
fn print_tool_result(name: &str, result: Value, json: bool) -> Result<(), Failure> {
    let blocks = result["content"].as_array().cloned().unwrap_or_default();
    let text: Vec<String> = blocks.iter().map(content).collect();
    if result["isError"] == true {
        // Its text on stderr, or the whole result in the JSON error.
        let mut failed = Failed::new(
            Kind::Tool,
            format!("tool `{name}` failed: {}", text.join(" ")),
        );
        failed.result = Some(result);
        return Err(Failure::Failed(failed));
    }
    if json {
        print_json(&result);
    } else if blocks.is_empty() {
        print_json(&result["structuredContent"]);
    } else {
        for line in text {
            say!("{line}");
        }
    }
    Ok(())
}
