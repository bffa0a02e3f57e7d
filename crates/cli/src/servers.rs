//! `--config FILE` (or `MCX_CONFIG`): many servers at once, from the `mcpServers` JSON config
//! that Claude Desktop, Claude Code, Cursor and VS Code (`servers`) read, behind one
//! `modelctx-host` [`Host`].
//!
//! * `mcx servers` connects to every server of the config (concurrently, each within
//!   `--timeout`, default 30 s) and prints each one's name, state, transport, protocol version,
//!   server name and version, tool count and last error; it exits with 0 when every server that
//!   is not `disabled` connected, else with 3 (connection), after printing the list (with
//!   `--json` too: the list is the output either way, `{"servers": [...]}`).
//! * `mcx tools list` lists the tools of every server that connected, each under its host name
//!   (`server__tool`) with its server; a server that did not connect is named on stderr and the
//!   others are listed (exit status 0).
//! * `mcx tools show server__tool` shows one; `mcx tools call server__tool` calls it on its
//!   server, with progress shown as for one server.
//!
//! Consent: the user who names a tool on the command line asks for that call, so the host's
//! policy here allows that one tool, whatever its annotations (destructive ones included), and
//! refuses any other call (none is made). Sampling is answered as for one server
//! (`--sampling-reply TEXT`, refused without), elicitation on the terminal, roots from `--root`.
//!
//! What it does not do: choose the era (`--era`), set the servers' log level (`--log-level`),
//! or run a call as a task (`--task`); those need one server (`--stdio` or `--url`). The other
//! client commands (`resources`, `prompts`, ...) need one server too. `mcx host` serves the
//! aggregate as one MCP server.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use modelctx_host::policy::{BoxFuture, Decision, Policy, ToolCall};
use modelctx_host::{
    Host, HostConfig, HostError, HostTool, ServerConfig, ServerState, ServerStatus, TransportConfig,
};
use serde_json::{Value, json};

use crate::exit::{Failed, Kind};
use crate::output::{first_line, print_json, table};
use crate::{ClientCommand, Target, ToolsCommand};

/// The environment variable that names the config file when `--config` is not given.
pub(crate) const CONFIG_ENV: &str = "MCX_CONFIG";

/// The exit status after Ctrl-C (128 + SIGINT).
const INTERRUPTED: u8 = 130;

/// A model value as JSON, written as protocol 2026-07-28 writes it when `modern`, else as
/// 2025-11-25 does (the era the server spoke: the fields it could send).
macro_rules! written {
    ($ty:ident, $value:expr, $modern:expr) => {{
        let value = $value;
        let json = if $modern {
            modelctx_types::v2026_07_28::$ty::try_from(value)
                .ok()
                .and_then(|w| serde_json::to_value(w).ok())
        } else {
            modelctx_types::v2025_11_25::$ty::try_from(value)
                .ok()
                .and_then(|w| serde_json::to_value(w).ok())
        };
        json.unwrap_or(Value::Null)
    }};
}

/// Whether `server` speaks the modern era (2026-07-28), as far as the host knows.
fn modern(host: &Host, server: &str) -> bool {
    host.servers().iter().any(|s| {
        s.name == server
            && s.protocol_version.as_ref().map(|v| v.era()) == Some(modelctx_types::Era::Modern)
    })
}

/// A listed tool as JSON.
fn tool_value(host: &Host, tool: &HostTool) -> Value {
    written!(Tool, tool.tool.clone(), modern(host, &tool.server))
}

/// The config file of the command line: `--config`, else the file `MCX_CONFIG` names when
/// neither `--stdio` nor `--url` is given (an explicit server wins over the variable's default;
/// `--config` with either is refused by clap); `None`: one server, or none.
pub(crate) fn config_path(target: &Target) -> Option<PathBuf> {
    config_path_with(target, std::env::var_os(CONFIG_ENV))
}

/// [`config_path`] with `MCX_CONFIG`'s value given.
fn config_path_with(target: &Target, variable: Option<OsString>) -> Option<PathBuf> {
    if let Some(path) = &target.config {
        return Some(path.clone());
    }
    if target.stdio.is_some() || target.url.is_some() {
        return None;
    }
    variable.filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Why a client command does not run across the servers of a config.
pub(crate) fn unsupported(command: &ClientCommand) -> Option<&'static str> {
    match command {
        ClientCommand::Tools(ToolsCommand::Call { task: true, .. }) => Some(
            "--task runs on one server: give --stdio or --url instead of --config (or MCX_CONFIG)",
        ),
        ClientCommand::Tools(_) => None,
        _ => Some(
            "with --config (or MCX_CONFIG), mcx runs `servers` and `tools list|show|call` across \
             the servers; for this command give one server with --stdio or --url",
        ),
    }
}

/// `mcx servers`: needs a config.
pub(crate) async fn servers(target: &Target, json: bool) -> ExitCode {
    let Some(path) = config_path(target) else {
        return Failed::usage(format!(
            "`servers` needs a config file: give --config FILE (or set {CONFIG_ENV})"
        ))
        .report(json);
    };
    run(&path, target, None, json).await
}

/// Runs `command` (`None`: `servers`) across the servers of the config at `path`.
pub(crate) async fn run(
    path: &Path,
    target: &Target,
    command: Option<ClientCommand>,
    json: bool,
) -> ExitCode {
    if let Some(why) = command.as_ref().and_then(unsupported) {
        return Failed::usage(why).report(json);
    }
    let config = match HostConfig::load(path) {
        Ok(config) => config,
        Err(errors) => {
            let problems: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
            return Failed::usage(format!(
                "--config {}: {}",
                path.display(),
                problems.join("; ")
            ))
            .report(json);
        }
    };
    let called = match &command {
        Some(ClientCommand::Tools(ToolsCommand::Call { name, .. })) => Some(name.clone()),
        _ => None,
    };
    let builder = match builder(config.clone(), target, called) {
        Ok(builder) => builder,
        Err(message) => return Failed::usage(message).report(json),
    };
    let host = tokio::select! {
        host = builder.start() => host,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("mcx: interrupted while connecting");
            return ExitCode::from(INTERRUPTED);
        }
    };
    let outcome = tokio::select! {
        outcome = execute(&host, &config, target, command, json) => outcome,
        // The call's future is dropped here, which cancels it on its server.
        _ = tokio::signal::ctrl_c() => Err(None),
    };
    crate::progress::release();
    host.shutdown().await;
    match outcome {
        Ok(status) => status,
        Err(Some(failed)) => failed.report(json),
        Err(None) => {
            eprintln!("mcx: interrupted; the call was cancelled");
            ExitCode::from(INTERRUPTED)
        }
    }
}

/// The host of the config, answering the servers' requests as mcx does for one server.
fn builder(
    config: HostConfig,
    target: &Target,
    called: Option<String>,
) -> Result<modelctx_host::HostBuilder, String> {
    let reply = target.sampling_reply.clone();
    let mut builder = Host::builder(config)
        .client_info("mcx", env!("CARGO_PKG_VERSION"))
        .policy(CommandLine { called })
        .on_sampling(move |server, params| {
            crate::progress::eprint_line(&format!("mcx: server {server:?} asks for a sample"));
            let answer = crate::answer::sample(reply.as_deref(), &params);
            async move { answer }
        })
        .on_elicitation(|server, elicitation| {
            crate::progress::eprint_line(&format!("mcx: server {server:?} asks for input"));
            crate::answer::elicit(elicitation)
        });
    if !target.roots.is_empty() {
        builder = builder.roots(crate::answer::roots(&target.roots)?);
    }
    if let Some(seconds) = target.timeout.filter(|s| *s > 0) {
        builder = builder.connect_timeout(Duration::from_secs(seconds));
    }
    Ok(builder)
}

/// The consent of the command line: the tool the user named is called; nothing else is.
#[derive(Debug)]
struct CommandLine {
    /// The host name of the tool of `tools call`.
    called: Option<String>,
}

impl Policy for CommandLine {
    fn approve_tool_call<'a>(&'a self, call: &'a ToolCall<'a>) -> BoxFuture<'a, Decision> {
        Box::pin(std::future::ready(consent(
            self.called.as_deref(),
            call.exposed_name,
        )))
    }
}

/// The decision of [`CommandLine`] on a call of the tool shown as `exposed_name`.
fn consent(called: Option<&str>, exposed_name: &str) -> Decision {
    if called == Some(exposed_name) {
        Decision::Allow
    } else {
        Decision::Deny {
            reason: format!(
                "mcx calls only the tool named on its command line, not {exposed_name:?}"
            ),
        }
    }
}

/// A failure (`None`: interrupted).
type Outcome = Result<ExitCode, Option<Failed>>;

async fn execute(
    host: &Host,
    config: &HostConfig,
    target: &Target,
    command: Option<ClientCommand>,
    json: bool,
) -> Outcome {
    match command {
        None => Ok(print_servers(host, config, json)),
        Some(ClientCommand::Tools(ToolsCommand::List)) => {
            warn_unconnected(host);
            let tools = host.tools();
            if json {
                let tools: Vec<Value> = tools.iter().map(|t| tool_json(host, t)).collect();
                print_json(&json!({ "tools": tools }));
            } else {
                let rows: Vec<Vec<String>> = tools
                    .iter()
                    .map(|t| {
                        let tool = tool_value(host, t);
                        vec![
                            t.name.clone(),
                            t.server.clone(),
                            crate::tools::signature(&tool),
                            first_line(&tool["description"]).trim_end().to_owned(),
                        ]
                    })
                    .collect();
                table(&["NAME", "SERVER", "ARGUMENTS", "DESCRIPTION"], &rows);
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(ClientCommand::Tools(ToolsCommand::Show { name })) => {
            let tool = find(host, &name)?;
            if json {
                print_json(&tool_json(host, &tool));
            } else {
                let mut shown = tool_value(host, &tool);
                let own = shown["name"].as_str().unwrap_or_default().to_owned();
                shown["name"] = Value::String(tool.name.clone());
                for line in crate::tools::describe(&shown) {
                    say!("{line}");
                }
                say!("server: {} (its name there: {own})", tool.server);
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(ClientCommand::Tools(ToolsCommand::Call {
            name, args, arg, ..
        })) => {
            let tool = find(host, &name)?;
            let listed = tool_value(host, &tool);
            let arguments =
                match crate::tools::arguments(args.as_deref(), &arg, &listed["inputSchema"]) {
                    Ok(Value::Object(arguments)) => arguments,
                    Ok(_) => unreachable!("tools::arguments gives an object"),
                    Err(message) => return Err(Some(Failed::usage(message))),
                };
            let (mut options, shown) = crate::progress::options();
            if let Some(seconds) = target.timeout {
                options = options.timeout((seconds > 0).then(|| Duration::from_secs(seconds)));
            }
            let result = host.call_tool(&name, arguments, options).await;
            drop(shown);
            let result = result.map_err(|e| Some(host_failure(host, &e)))?;
            let result = written!(CallToolResult, result, modern(host, &tool.server));
            crate::commands::print_result(&name, result, json).map_err(Some)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(_) => Err(Some(Failed::usage(
            "this command runs on one server: give --stdio or --url",
        ))),
    }
}

/// The tool the host shows as `name`; a failure that says which servers are not connected when
/// it is not there.
fn find(host: &Host, name: &str) -> Result<HostTool, Option<Failed>> {
    host.tools()
        .into_iter()
        .find(|t| t.name == name)
        .ok_or_else(|| Some(host_failure(host, &HostError::UnknownTool(name.to_owned()))))
}

/// A host's failure as mcx tells it (its kind gives the exit status).
fn host_failure(host: &Host, error: &HostError) -> Failed {
    match error {
        HostError::UnknownTool(name) => {
            let down: Vec<String> = host
                .servers()
                .iter()
                .filter(|s| !connected_or_disabled(s))
                .map(|s| s.name.clone())
                .collect();
            let also = if down.is_empty() {
                String::new()
            } else {
                format!("; not connected: {}", down.join(", "))
            };
            Failed::new(
                Kind::Protocol,
                format!(
                    "no tool `{name}` on the servers of the config (`mcx tools list` lists them){also}"
                ),
            )
        }
        HostError::NotConnected { server, state } => Failed::new(
            Kind::Connection,
            format!(
                "server {server:?} is not connected ({})",
                state_text(state).0
            ),
        ),
        HostError::Server { server, source } => {
            let mut failed = Failed::call(source);
            failed.message = format!("server {server:?}: {}", failed.message);
            failed
        }
        HostError::Denied { reason } => Failed::new(Kind::Protocol, format!("refused: {reason}")),
        HostError::ShutDown => Failed::new(Kind::Connection, error.to_string()),
        other => Failed::new(Kind::Protocol, other.to_string()),
    }
}

/// Whether a server is connected, or disabled (not expected to be).
fn connected_or_disabled(status: &ServerStatus) -> bool {
    matches!(status.state, ServerState::Ready | ServerState::Disabled)
}

/// Says on stderr which servers are not connected (their tools are missing from the list).
fn warn_unconnected(host: &Host) {
    for status in host.servers() {
        if !connected_or_disabled(&status) {
            let said = match state_text(&status.state) {
                (_, Some(error)) => format!("did not connect: {error}"),
                (state, None) => format!("is {state}"),
            };
            crate::progress::eprint_line(&format!(
                "mcx: server {:?} {said}; its tools are not listed",
                status.name
            ));
        }
    }
}

/// A tool as `--json` shows it: its host name, its server, the tool as the server listed it.
fn tool_json(host: &Host, tool: &HostTool) -> Value {
    json!({
        "name": tool.name,
        "server": tool.server,
        "tool": tool_value(host, tool),
    })
}

/// A state's word, and its last error.
fn state_text(state: &ServerState) -> (&'static str, Option<String>) {
    match state {
        ServerState::Connecting => ("connecting", None),
        ServerState::Ready => ("ready", None),
        ServerState::Reconnecting { error, .. } => ("failed", Some(error.clone())),
        ServerState::Disabled => ("disabled", None),
        ServerState::Stopped => ("stopped", None),
        _ => ("unknown", None),
    }
}

/// How a server is reached, in short: `stdio`/`http` and the command line or URL.
fn transport(server: Option<&ServerConfig>) -> (&'static str, String) {
    match server.map(|s| &s.transport) {
        Some(TransportConfig::Stdio { command, args, .. }) => {
            let mut line = command.clone();
            for arg in args {
                line.push(' ');
                line.push_str(arg);
            }
            ("stdio", line)
        }
        Some(TransportConfig::Http { url, .. }) => ("http", url.clone()),
        _ => ("?", String::new()),
    }
}

/// `mcx servers`: the table (or JSON), and the exit status: 3 when a server that is not
/// disabled did not connect.
fn print_servers(host: &Host, config: &HostConfig, json: bool) -> ExitCode {
    let statuses = host.servers();
    let tools = host.tools();
    let rows: Vec<Value> = statuses
        .iter()
        .map(|status| {
            let (state, error) = state_text(&status.state);
            let attempts = match &status.state {
                ServerState::Reconnecting { attempt, .. } => Some(*attempt),
                _ => None,
            };
            let entry = config.servers.iter().find(|s| s.name == status.name);
            let (kind, reach) = transport(entry);
            let ready = status.state == ServerState::Ready;
            let is_modern = status.protocol_version.as_ref().map(|v| v.era())
                == Some(modelctx_types::Era::Modern);
            let info = status.server_info.clone().map_or(Value::Null, |info| {
                written!(Implementation, info, is_modern)
            });
            let count = tools.iter().filter(|t| t.server == status.name).count();
            json!({
                "name": status.name,
                "state": state,
                "transport": kind,
                "target": reach,
                "protocolVersion": status.protocol_version.as_ref().map(ToString::to_string),
                "serverInfo": info,
                "tools": ready.then_some(count),
                "error": error,
                "attempts": attempts,
            })
        })
        .collect();
    if json {
        print_json(&json!({ "servers": rows }));
    } else {
        let text = |v: &Value| match v {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let table_rows: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let info = &r["serverInfo"];
                let server = if info.is_object() {
                    format!("{} {}", text(&info["name"]), text(&info["version"]))
                } else {
                    String::new()
                };
                vec![
                    text(&r["name"]),
                    text(&r["state"]),
                    text(&r["transport"]),
                    text(&r["protocolVersion"]),
                    server.trim().to_owned(),
                    text(&r["tools"]),
                    text(&r["error"]),
                ]
            })
            .collect();
        table(
            &[
                "NAME",
                "STATE",
                "TRANSPORT",
                "PROTOCOL",
                "SERVER",
                "TOOLS",
                "LAST ERROR",
            ],
            &table_rows,
        );
    }
    let down = statuses
        .iter()
        .filter(|s| !connected_or_disabled(s))
        .count();
    if down == 0 {
        ExitCode::SUCCESS
    } else {
        crate::progress::eprint_line(&format!(
            "mcx: {down} of {} servers not connected",
            statuses.len()
        ));
        ExitCode::from(Kind::Connection.status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(config: Option<&str>, stdio: Option<&str>, url: Option<&str>) -> Target {
        Target {
            config: config.map(PathBuf::from),
            stdio: stdio.map(str::to_owned),
            url: url.map(str::to_owned),
            ..Target::default()
        }
    }

    #[test]
    fn the_config_is_the_option_else_the_variable_without_a_server() {
        let var = || Some(OsString::from("/etc/mcp.json"));
        assert_eq!(
            config_path_with(&target(Some("a.json"), None, None), var()),
            Some(PathBuf::from("a.json"))
        );
        assert_eq!(
            config_path_with(&target(None, None, None), var()),
            Some(PathBuf::from("/etc/mcp.json"))
        );
        assert_eq!(config_path_with(&target(None, None, None), None), None);
        assert_eq!(
            config_path_with(&target(None, None, None), Some(OsString::new())),
            None
        );
        // An explicit server wins over the variable's default.
        assert_eq!(
            config_path_with(&target(None, Some("srv"), None), var()),
            None
        );
        assert_eq!(
            config_path_with(&target(None, None, Some("http://h/mcp")), var()),
            None
        );
    }

    #[test]
    fn only_tools_run_across_servers() {
        assert!(unsupported(&ClientCommand::Tools(ToolsCommand::List)).is_none());
        let call = |task| {
            ClientCommand::Tools(ToolsCommand::Call {
                name: "a__b".into(),
                args: None,
                arg: vec![],
                task,
                ttl: None,
            })
        };
        assert!(unsupported(&call(false)).is_none());
        assert!(unsupported(&call(true)).unwrap().contains("--task"));
        assert!(
            unsupported(&ClientCommand::Ping)
                .unwrap()
                .contains("--stdio or --url")
        );
    }

    #[test]
    fn failed_servers_say_their_error() {
        let state = ServerState::Reconnecting {
            attempt: 2,
            error: "cannot start \"nope\"".into(),
        };
        assert_eq!(
            state_text(&state),
            ("failed", Some("cannot start \"nope\"".into()))
        );
        assert_eq!(state_text(&ServerState::Ready), ("ready", None));
        assert_eq!(state_text(&ServerState::Disabled), ("disabled", None));
    }

    #[test]
    fn a_transport_is_its_command_line_or_url() {
        let stdio = ServerConfig::stdio("a", "mcx", vec!["serve".into(), "demo".into()]);
        assert_eq!(transport(Some(&stdio)), ("stdio", "mcx serve demo".into()));
        let http = ServerConfig::http("b", "http://127.0.0.1:1/mcp");
        assert_eq!(
            transport(Some(&http)),
            ("http", "http://127.0.0.1:1/mcp".into())
        );
    }

    #[test]
    fn the_command_line_consents_to_the_tool_it_names_only() {
        assert_eq!(
            consent(Some("files__delete"), "files__delete"),
            Decision::Allow
        );
        assert!(matches!(
            consent(Some("files__delete"), "files__other"),
            Decision::Deny { .. }
        ));
        assert!(matches!(
            consent(None, "files__delete"),
            Decision::Deny { .. }
        ));
    }
}
