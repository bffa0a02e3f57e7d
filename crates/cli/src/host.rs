//! `mcx host --config FILE (--stdio | --http ADDR) [--policy FILE]`: the servers of an
//! `mcpServers` config file served as one MCP server (`modelctx_host::gateway`).
//!
//! Every server of the file is started (or reached) by a `modelctx_host::Host`; their tools,
//! prompts, resources and templates are served together, tools and prompts under namespaced
//! names (`--namespace`). Nobody is there to approve a call: consent is answered by the policy
//! file (`--policy`), and without one by the default rules, which refuse a tool that may be
//! destructive with an error that says to pass a policy. Sampling and elicitation a server asks
//! for during a call are asked of the gateway's own client. On stdin's end (`--stdio`), Ctrl-C
//! or SIGTERM, the gateway stops serving and stops every server it started.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use modelctx_host::gateway::Gateway;
use modelctx_host::policy::{BoxFuture, Decision, Policy, ToolCall};
use modelctx_host::{Host, HostConfig, Namespace, ServerState};

use crate::fail;

/// `mcx host`'s arguments.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("serve").required(true).args(["stdio", "http"])))]
pub(crate) struct HostArgs {
    /// The config file: a JSON object whose `mcpServers` (or `servers`) lists the servers, as
    /// Claude Desktop, Claude Code, Cursor and VS Code read it: `command`, `args`, `env`, `cwd`
    /// for a server run over stdio; `url` (`type` "http") and `headers` for one reached over
    /// Streamable HTTP; `${VAR}` and `${VAR:-default}` expanded. Default: mcx's own --config
    /// (`mcx --config FILE host ...`), else the file named by MCX_CONFIG.
    #[arg(long = "config", value_name = "FILE")]
    pub(crate) config_file: Option<PathBuf>,
    /// Serve the gateway on stdin and stdout.
    #[arg(long, conflicts_with = "http")]
    pub(crate) stdio: bool,
    /// Serve the gateway over Streamable HTTP (both eras) on this address, HOST:PORT (port 0:
    /// any free port); its URL is printed to stderr.
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<String>,
    /// The policy file that answers consent: which tools of which server may be called, what is
    /// done with destructive tools not listed, whether sampling and elicitation go through
    /// (see docs/guide-host.md). Without it, a tool the server does not mark read-only or
    /// non-destructive is refused, with an error saying to pass a policy.
    #[arg(long, value_name = "FILE")]
    pub(crate) policy: Option<PathBuf>,
    /// How tools and prompts are named: `prefixed` (`server__tool`, every one) or
    /// `on-collision` (names kept as each server gives them, prefixed only where two servers
    /// give the same one: a gateway of a single server shows that server's names).
    #[arg(long, value_enum, value_name = "MODE", default_value = "prefixed")]
    pub(crate) namespace: NamespaceArg,
}

/// `--namespace`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NamespaceArg {
    /// Every tool and prompt `server__name`.
    Prefixed,
    /// Names kept unless two servers give the same one.
    OnCollision,
}

/// What the refusal of the default rules adds: how to allow the call.
const PASS_A_POLICY: &str = "mcx host answers consent from a policy file: pass --policy FILE \
                             allowing this tool to call it";

/// The default rules, their refusals saying how to allow the call: a call that needs a person's
/// approval is refused, as nobody is there to give it.
struct DefaultRules;

impl Policy for DefaultRules {
    fn ask<'a>(&'a self, _call: &'a ToolCall<'a>, reason: String) -> BoxFuture<'a, Decision> {
        Box::pin(std::future::ready(Decision::Deny {
            reason: format!("{reason}; {PASS_A_POLICY}"),
        }))
    }
}

/// Runs `mcx host`.
///
/// `global_config` is mcx's own `--config` (or `MCX_CONFIG`), used when `mcx host` has none.
pub(crate) async fn run(args: HostArgs, global_config: Option<PathBuf>) -> ExitCode {
    let Some(path) = args.config_file.clone().or(global_config) else {
        return fail(format_args!(
            "mcx host needs a config file: --config FILE (or the MCX_CONFIG environment variable)"
        ));
    };
    let config = match HostConfig::load(&path) {
        Ok(config) => config,
        Err(e) => return fail(format_args!("{}: {e}", path.display())),
    };
    let namespace = match args.namespace {
        NamespaceArg::Prefixed => Namespace::prefixed(),
        NamespaceArg::OnCollision => Namespace::on_collision(),
    };
    let builder = Host::builder(config)
        .client_info("mcx host", env!("CARGO_PKG_VERSION"))
        .namespace(namespace);
    let builder = match &args.policy {
        Some(path) => match modelctx_host::policy::PolicyFile::load(path) {
            Ok(policy) => builder.policy(policy),
            Err(e) => return fail(format_args!("{}: {e}", path.display())),
        },
        None => builder.policy(DefaultRules),
    };
    // Bound before any server starts: an address that cannot be served starts nothing.
    let listener = match &args.http {
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(e) => return fail(format_args!("binding {addr}: {e}")),
        },
        None => None,
    };
    let gateway = Gateway::builder("mcx host", env!("CARGO_PKG_VERSION"))
        .instructions("The tools, prompts and resources of several MCP servers, served together.");
    let host = gateway.route_input(builder).start().await;
    for status in host.servers() {
        if let ServerState::Reconnecting { error, .. } = &status.state {
            eprintln!(
                "mcx host: server {:?} is not connected ({error}); retrying in the background",
                status.name
            );
        }
    }
    let gateway = gateway.build(host.clone());
    let served = match listener {
        Some(listener) => serve_http(&gateway, listener).await,
        None => serve_stdio(&gateway).await,
    };
    drop(gateway);
    host.shutdown().await;
    served
}

/// Serves on stdin and stdout until stdin ends or a signal comes.
async fn serve_stdio(gateway: &Gateway) -> ExitCode {
    let server = gateway.server().clone();
    tokio::select! {
        served = server.serve_stdio() => match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(format_args!("serving stdio: {e}")),
        },
        () = modelctx_server::shutdown_signal() => ExitCode::SUCCESS,
    }
}

/// Serves Streamable HTTP on `listener` until a signal comes.
async fn serve_http(gateway: &Gateway, listener: tokio::net::TcpListener) -> ExitCode {
    let grace = std::time::Duration::from_secs(2);
    let config = modelctx_server::HttpConfig::default().shutdown_grace(grace);
    let running = match gateway.server().serve_http_on(listener, config).await {
        Ok(running) => running,
        Err(e) => return fail(format_args!("serving HTTP: {e}")),
    };
    // Listened for before the URL is printed (polled once: that installs the handlers), so
    // that a SIGTERM sent as soon as the URL is seen stops the gateway gracefully.
    let mut signal = std::pin::pin!(modelctx_server::shutdown_signal());
    let signalled = tokio::select! {
        biased;
        () = &mut signal => true,
        () = std::future::ready(()) => false,
    };
    eprintln!(
        "mcx host: http://{}/mcp (Ctrl-C to stop)",
        running.local_addr()
    );
    let stop = async move {
        if !signalled {
            signal.await;
        }
    };
    match running.with_graceful_shutdown(stop).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format_args!("serving HTTP: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Command};

    fn host(args: &[&str]) -> Result<HostArgs, clap::Error> {
        let all = ["mcx", "host"].iter().chain(args).copied();
        match Cli::try_parse_from(all)?.command {
            Command::Host(args) => Ok(args),
            other => panic!("not mcx host: {other:?}"),
        }
    }

    #[test]
    fn it_needs_a_config_and_one_way_to_serve() {
        let args = host(&["--config", "mcp.json", "--stdio"]).expect("parses");
        assert_eq!(args.config_file, Some(PathBuf::from("mcp.json")));
        assert!(args.stdio && args.http.is_none() && args.policy.is_none());
        assert_eq!(args.namespace, NamespaceArg::Prefixed);

        let args = host(&[
            "--config",
            "mcp.json",
            "--http",
            "127.0.0.1:0",
            "--policy",
            "p.json",
            "--namespace",
            "on-collision",
        ])
        .expect("parses");
        assert_eq!(args.http.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(args.policy, Some(PathBuf::from("p.json")));
        assert_eq!(args.namespace, NamespaceArg::OnCollision);

        let bare = host(&["--stdio"]).expect("the config may come from mcx --config or MCX_CONFIG");
        assert_eq!(bare.config_file, None);
        assert!(
            host(&["--config", "mcp.json"]).is_err(),
            "neither stdio nor http"
        );
        let both = ["--config", "mcp.json", "--stdio", "--http", "127.0.0.1:0"];
        assert!(host(&both).is_err(), "both");
        let unknown = ["--config", "c", "--stdio", "--namespace", "flat"];
        assert!(host(&unknown).is_err());
    }

    #[tokio::test]
    async fn the_default_rules_refuse_saying_how_to_allow() {
        let tool = modelctx_host::model::Tool {
            meta: None,
            annotations: None,
            description: None,
            icons: None,
            input_schema: modelctx_host::model::ToolInputSchema {
                schema: None,
                r#type: None,
                properties: None,
                required: None,
                extra: Default::default(),
            },
            name: "wipe".into(),
            output_schema: None,
            title: None,
            execution: None,
        };
        let arguments = Default::default();
        let call = ToolCall::new("disk", &tool, "disk__wipe", &arguments);
        let Decision::Deny { reason } = DefaultRules.approve_tool_call(&call).await else {
            panic!("an unannotated tool is allowed");
        };
        assert!(reason.contains("--policy FILE"), "{reason}");
        assert!(reason.contains("wipe"), "{reason}");
    }

    #[tokio::test]
    async fn without_a_config_anywhere_it_says_where_one_comes_from() {
        let args = host(&["--stdio"]).expect("parses");
        let code = run(args, None).await;
        assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::FAILURE));
    }
}
