//! `mcx`, the modelctx command-line tool: `mcx demo` walks through every MCP feature in both
//! eras against the built-in demo server (over stdio and HTTP: the first walk in full, the others
//! one line each unless `--all`; `--wire` adds the JSON-RPC messages); `mcx serve demo` serves that server on its own; and
//! `discover`, `ping`, `tools`, `resources`, `prompts`, `complete`, `skills` and `tasks` talk to any MCP server,
//! run as a child process (`--stdio "<command line>"`, with a filtered environment unless
//! `--env KEY=VALUE` or `--inherit-env` say otherwise) or reached over Streamable HTTP (`--url
//! URL`; `https` trusts the webpki roots and the CAs of `--cacert PATH`). `tools list` shows
//! each tool's arguments, `tools show NAME` the whole tool, and `tools call` takes `--arg k=v`
//! beside `--args JSON`; `tools call --task` runs the call as a task (`tasks.rs`: its status on
//! stderr while it runs, Ctrl-C cancels it with `tasks/cancel`), and `tasks get|cancel ID` look
//! at or cancel one. A tool that only runs as a task (`execution.taskSupport` `"required"`) is
//! marked in `tools list` and refused by `tools call` without `--task`.
//! The client commands answer the server's own requests (`answer.rs`): elicitation as a form
//! asked on the terminal (declined off one), roots from `--root DIR`, sampling from
//! `--sampling-reply TEXT` (refused without); `--era` skips the probe.
//!
//! `mcx --config FILE` (or the file named by `MCX_CONFIG`) talks to every server of an
//! `mcpServers` config at once through a `modelctx-host` host (`servers.rs`): `mcx servers` shows
//! each one's state (exit status 3 when one did not connect), `tools list|show` shows every
//! server's tools as `server__tool`, and `tools call server__tool` calls one on its server (the
//! named tool is the user's consent, whatever its annotations).
//!
//! `mcx proxy --stdio "<command line>" --listen 127.0.0.1:8080` serves a stdio MCP server over
//! Streamable HTTP, both eras on one endpoint (`/mcp`), with the HTTP transport of
//! `modelctx-http` (sessions, SSE, resumption, Origin checks). Each legacy (`initialize`) session
//! gets a child process of its own, with the server's requests (sampling, elicitation, roots)
//! bridged to the client; sessions are bounded (`--max-sessions`, 503 beyond), so are their
//! children (`--max-children`, 16, and `--spawn-rate`, 2 per second after a burst of 8: beyond,
//! `initialize` is answered with an error), and they end, with their child, on DELETE, after
//! `--idle-timeout` seconds, or when the child exits. Modern (2026-07-28) requests share one
//! child: each gets a proxy-assigned id (and progress token) on its stdin, a closed HTTP stream
//! becomes `notifications/cancelled`, listen notifications reach their listen stream by
//! subscription id, and a child that keeps exiting is restarted with a growing delay.
//! The children's environment is filtered as for `--stdio` (`--env`, `--inherit-env`).
//! `--verbose` says what it does on stderr.
//!
//! Against a server that asks for OAuth 2.1 authorization, `mcx --url URL login` signs in
//! (the authorization URL on stderr, a browser when one is likely, the redirect on a loopback
//! port) and keeps the tokens in mcx's store, which every client command with `--url` then uses
//! and refreshes (logging in by itself only when stderr is a terminal); `mcx logout` revokes
//! and forgets them (`login.rs`). `--bearer`, `--bearer-file` and `MCX_BEARER` bypass all of it.
//!
//! Over HTTP, `mcx serve demo --http` and `mcx proxy` are OAuth 2.1 resource servers with
//! `--auth-issuer URL` (JWT access tokens of that authorization server, for the resource
//! `http://ADDR/mcp` or `--auth-audience`), and take one static secret with `--auth-token-file`
//! (`modelctx-auth`, see `auth.rs`). It does not issue tokens, and protects nothing over stdio
//! (those flags are refused there).
//!
//! `mcx serve demo --state-key KID:BASE64URL` (repeatable, or `MCX_STATE_KEYS`) gives the key ring
//! that seals the `requestState` of modern round trips (`state_keys.rs`), so that instances
//! behind one load balancer accept each other's retries; without it each process has a random
//! key of its own.
//!
//! `mcx serve demo --http ADDR --redis URL` runs the demo as one instance of a fleet on Redis
//! (`fleet.rs`, `docs/deploy.md`): legacy sessions, their SSE events and the bus between instances
//! live in Redis, so a plain load balancer may send any request to any instance. It needs a key
//! ring (`--state-key` or `MCX_STATE_KEYS`: a usage error without), exits with 3 when Redis cannot
//! be reached at start, and gives its instance number back when stopped gracefully. It does not
//! make the instances' registries equal: every instance serves the same demo.
//!
//! `mcx --otlp URL` (any command) exports its traces and metrics to an OTLP/HTTP collector, sent
//! before mcx exits (`otel.rs`); `mcx serve demo --metrics ADDR` and `mcx proxy --metrics ADDR`
//! serve the metrics in the Prometheus text format at `http://ADDR/metrics` (`metrics.rs`).

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

/// `println!` for what the user asked to see: a reader that went away (`mcx tools list | head -1`)
/// ends the program quietly, as command-line tools do, instead of a panic on the closed pipe.
macro_rules! say {
    () => {
        $crate::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}

mod answer;
mod auth;
mod commands;
mod demo;
mod exit;
mod fleet;
mod host;
mod login;
mod metrics;
mod otel;
mod output;
mod progress;
mod proxy;
mod reach;
mod servers;
mod skills;
mod state_keys;
mod tasks;
mod tools;
mod walkthrough;
mod words;

/// mcx: talk to MCP servers, or see every feature of MCP at work with `mcx demo`.
#[derive(Parser, Debug)]
#[command(name = "mcx", version, about, max_term_width = 100, after_help = exit::HELP)]
struct Cli {
    #[command(flatten)]
    target: Target,
    /// Export the traces and metrics of this command, or of the server it runs, to the
    /// OpenTelemetry collector at this OTLP/HTTP base URL, such as http://localhost:4318
    /// (protobuf: traces to URL/v1/traces, metrics to URL/v1/metrics). Everything recorded is
    /// sent before mcx exits. Only this flag turns it on: OTEL_EXPORTER_OTLP_ENDPOINT is not
    /// read.
    #[arg(long, global = true, value_name = "URL")]
    otlp: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// `--json`, only on the commands that print what the server answered.
#[derive(Args, Debug, Default, Clone, Copy)]
pub(crate) struct JsonOutput {
    /// Print results as JSON (for scripts) instead of tables, and a failure as
    /// {"error": {"kind", "message", "code"}} on stdout instead of a message on stderr.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

/// Which server the client commands talk to (given before the command).
#[derive(Args, Debug, Default, Clone)]
pub(crate) struct Target {
    /// Run this command line as an MCP server over stdio (split like a shell, without
    /// expansions). The server's environment is filtered: it gets only a few of mcx's variables
    /// (HOME, PATH, USER, SHELL, TERM, LANG, TMPDIR and the like); add some with --env, or pass
    /// them all with --inherit-env.
    #[arg(long, value_name = "COMMAND", conflicts_with = "url")]
    pub(crate) stdio: Option<String>,
    /// Talk to the Streamable HTTP endpoint at this URL (http or https).
    #[arg(long, value_name = "URL", conflicts_with_all = ["env", "inherit_env"])]
    pub(crate) url: Option<String>,
    /// Talk to every server of this `mcpServers` JSON config file at once (the format of Claude
    /// Desktop, Claude Code's .mcp.json, Cursor, VS Code's `servers`; `${VAR}` expanded): for
    /// `servers`, `tools list`, `tools show` and `tools call SERVER__TOOL`. Default: the file
    /// named by the MCX_CONFIG environment variable, unless --stdio or --url is given.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["stdio", "url", "era", "log_level"]
    )]
    pub(crate) config: Option<std::path::PathBuf>,
    /// An HTTP header for every request, `Name: value` (repeatable; with --url).
    #[arg(long = "header", value_name = "NAME: VALUE", requires = "url")]
    pub(crate) headers: Vec<String>,
    /// A bearer token, sent as `Authorization: Bearer TOKEN` (with --url). Visible to other
    /// users in the process list: prefer --bearer-file or the MCX_BEARER environment variable.
    #[arg(
        long,
        value_name = "TOKEN",
        requires = "url",
        conflicts_with = "bearer_file"
    )]
    pub(crate) bearer: Option<String>,
    /// Read the bearer token from this file (its trailing newline removed; with --url). Without
    /// --bearer or --bearer-file, the token is taken from the MCX_BEARER environment variable
    /// when it is set.
    #[arg(long, value_name = "PATH", requires = "url")]
    pub(crate) bearer_file: Option<std::path::PathBuf>,
    /// Seconds to wait for connecting (the handshake included) and for each answer (default
    /// 60; 0: answers are waited for forever, connecting keeps its default, 60). The time you
    /// spend answering the server's questions (an elicitation form) is not counted.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) timeout: Option<u64>,
    /// Ask the server for log messages at this level and above (debug, info, notice, warning,
    /// error, critical, alert, emergency); they are printed to stderr.
    #[arg(long, value_name = "LEVEL")]
    pub(crate) log_level: Option<String>,
    /// Trust the certificate authorities in this PEM file (one or more certificates), besides
    /// the usual public ones (the webpki roots), for an https URL (with --url).
    #[arg(long, value_name = "PATH", requires = "url", conflicts_with = "stdio")]
    pub(crate) cacert: Option<std::path::PathBuf>,
    // The environment of a --stdio server.
    #[command(flatten)]
    pub(crate) child_env: reach::ChildEnv,
    /// A directory the server may work in, declared as a root: `roots/list` is answered with
    /// its canonical path as a `file://` URI, named after it (repeatable). Without it, mcx
    /// declares no roots.
    #[arg(long = "root", value_name = "DIR")]
    pub(crate) roots: Vec<std::path::PathBuf>,
    /// The answer to every sampling request of the server (model `mcx`, stop reason
    /// `endTurn`). Without it, sampling requests are refused: mcx has no model.
    #[arg(long, value_name = "TEXT")]
    pub(crate) sampling_reply: Option<String>,
    /// Speak this era without probing: `legacy` (initialize, 2024-11-05 to 2025-11-25) or
    /// `modern` (2026-07-28). Default: probe with server/discover and fall back to initialize.
    #[arg(long, value_enum, value_name = "ERA")]
    pub(crate) era: Option<EraArg>,
    // OAuth 2.1 with --url: the client's identity, the redirect listener, logging in.
    #[command(flatten)]
    pub(crate) oauth: login::OAuthArgs,
}

/// `--era`: which era to speak without probing.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EraArg {
    /// `initialize`, the newest legacy version both know.
    Legacy,
    /// 2026-07-28.
    Modern,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start the demo server over stdio and HTTP, connect a client in each era, and walk
    /// through every feature, printing a transcript: the first walk in full, the other three as
    /// one line each (a step that fails is printed in full).
    Demo(DemoArgs),
    /// Serve a built-in server.
    #[command(subcommand)]
    Serve(Serve),
    /// Show the server's name, protocol version, capabilities and instructions.
    Discover(JsonOutput),
    /// Check that the server answers (`ping`; `server/discover` in the modern era).
    Ping(JsonOutput),
    /// List or call tools.
    Tools(Tools),
    /// List or read resources, or list resource templates.
    Resources(Resources),
    /// List or get prompts.
    Prompts(Prompts),
    /// Ask for completions of a prompt argument or a resource template variable.
    Complete(CompleteArgs),
    /// List the server's skills, show one, or pull them into a directory, verified.
    Skills(Skills),
    /// Look at or cancel a task of the server's (from `tools call --task`).
    Tasks(TasksArgs),
    /// With --config (or MCX_CONFIG): connect to every server of the config and show each one's
    /// state, transport, protocol version, server, tool count and last error. Exit status 0
    /// when every server that is not disabled connected, else 3; the list is printed either
    /// way (as {"servers": [...]} with --json).
    Servers(JsonOutput),
    /// Serve a stdio MCP server over Streamable HTTP, both eras: a child per legacy session, one
    /// shared child for modern requests.
    Proxy(ProxyArgs),
    /// Serve the servers of a config file (--config) as one MCP server, over stdio (--stdio) or
    /// Streamable HTTP (--http ADDR): their tools, prompts and resources together, tools and
    /// prompts namespaced (--namespace), consent answered from a policy file (--policy).
    Host(host::HostArgs),
    /// Sign in to the server of --url with OAuth 2.1: print the authorization URL (and open a
    /// browser when one is likely), wait for the redirect on a loopback port, keep the tokens
    /// in mcx's store (MCX_CONFIG_DIR, else the user's config directory, mcx/auth).
    Login(login::LoginArgs),
    /// Revoke the tokens kept for the server of --url at its authorization server (where it
    /// offers revocation) and forget them (with --all: every token, and the client registrations).
    Logout(login::LogoutArgs),
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Print every walk in full, not only the first.
    #[arg(long)]
    all: bool,
    /// Print the JSON-RPC messages of the walks shown: `>` sent, `<` received, one line of
    /// JSON each, in the order the client handled them.
    #[arg(long)]
    wire: bool,
}

#[derive(Args, Debug)]
struct ProxyArgs {
    /// The server's command line (split like a shell, without expansions). The children's
    /// environment is filtered: they get only a few of mcx's variables (HOME, PATH, USER, SHELL,
    /// TERM, LANG, TMPDIR and the like); add some with --env, or pass them all with
    /// --inherit-env.
    #[arg(long, value_name = "COMMAND")]
    stdio: String,
    /// The address to serve on, HOST:PORT, such as 127.0.0.1:8080 or localhost:8080 (a name is
    /// resolved and the first of its addresses that can be bound is used; port 0: any free
    /// port); the URL is printed to stderr.
    #[arg(long, value_name = "ADDR")]
    listen: String,
    /// The most legacy sessions (each with its own child) at once; beyond, `initialize` gets 503.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_sessions: usize,
    /// End a legacy session (and stop its child) after this many seconds without a request or
    /// an open stream.
    #[arg(long, value_name = "SECONDS", default_value_t = 1800)]
    idle_timeout: u64,
    /// The most modern requests in flight on the shared child at once.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_requests: usize,
    /// The most legacy sessions' children running at once; beyond, `initialize` is answered
    /// with an error (and the session ends).
    #[arg(long, value_name = "N", default_value_t = 16)]
    max_children: usize,
    /// Legacy sessions' children started per second, after a burst of 8; beyond, `initialize`
    /// is answered with an error saying when to try again.
    #[arg(long, value_name = "PER_SECOND", default_value_t = 2.0)]
    spawn_rate: f64,
    /// Say on stderr what the proxy does: children started and stopped, requests forwarded,
    /// cancelled and answered.
    #[arg(long, short)]
    verbose: bool,
    /// Serve the proxy's metrics (its sessions, streams and stored events) in the Prometheus
    /// text format at http://ADDR/metrics (HOST:PORT; port 0: any free port, printed to stderr).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    #[command(flatten)]
    auth: auth::AuthArgs,
    // The children's environment.
    #[command(flatten)]
    child_env: reach::ChildEnv,
}

#[derive(Subcommand, Debug)]
enum Serve {
    /// The demo server: tools with progress, logging, elicitation and sampling; resources, a
    /// template, prompts with completions. With --auth-issuer or --auth-token-file, its
    /// `unlock` needs the scope demo:admin; `whoami` says who called.
    Demo(ServeDemo),
}

#[derive(Args, Debug)]
struct ServeDemo {
    /// Serve on stdin and stdout (the default).
    #[arg(long, conflicts_with = "http")]
    stdio: bool,
    /// Serve Streamable HTTP (both eras) on this address, HOST:PORT, such as 127.0.0.1:8080 or
    /// localhost:8080 (a name is resolved and the first of its addresses that can be bound is
    /// used; port 0: any free port); the URL is printed to stderr.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    // Over HTTP, who may call.
    #[command(flatten)]
    auth: auth::AuthArgs,
    /// A key that seals the `requestState` of modern (2026-07-28) round trips, KID:BASE64URL: a
    /// key id (A-Z, a-z, 0-9, `_`, `-`), a colon, a random secret of at least 32 bytes in
    /// base64url (such as `head -c 32 /dev/urandom | basenc --base64url`). Repeatable: the first
    /// seals and opens, the others (keys rotated out) only open. Give every instance behind one
    /// load balancer the same keys, so that a round trip begun on one is retried on any other
    /// (with synchronized clocks: a state expires after 10 minutes). Default: the variable
    /// MCX_STATE_KEYS (the same entries, separated by commas), else a random key of this
    /// process. Prefer the variable: a command line is visible to every user of the machine
    /// (`ps`), with the secret in it.
    #[arg(long = "state-key", value_name = "KID:BASE64URL")]
    state_key: Vec<String>,
    /// Run as one instance of a fleet sharing this Redis (6.2 or newer),
    /// `redis://[USER:PASSWORD@]HOST:PORT[/DB]`: legacy sessions live there, so any instance
    /// behind a plain (not sticky) load balancer serves any session's requests. Needs --http,
    /// and --state-key or MCX_STATE_KEYS (the same keys on every instance). The instance takes a
    /// number leased in Redis and gives it back when stopped (Ctrl-C, SIGTERM). When Redis cannot
    /// be reached at start, mcx exits with status 3. See docs/deploy.md.
    #[arg(long, value_name = "URL", requires = "http", conflicts_with = "stdio")]
    redis: Option<String>,
    /// Serve the server's metrics in the Prometheus text format at http://ADDR/metrics
    /// (HOST:PORT; port 0: any free port, printed to stderr): the duration histograms of the
    /// requests by method and tool (their counts, errors by error_type), the handlers,
    /// connections and tasks under way, and over HTTP the sessions, streams and stored events.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

/// `tools` and its `--json`.
#[derive(Args, Debug)]
struct Tools {
    #[command(subcommand)]
    command: ToolsCommand,
    #[command(flatten)]
    output: JsonOutput,
}

/// `resources` and its `--json`.
#[derive(Args, Debug)]
struct Resources {
    #[command(subcommand)]
    command: ResourcesCommand,
    #[command(flatten)]
    output: JsonOutput,
}

/// `skills` and its `--json`.
#[derive(Args, Debug)]
struct Skills {
    #[command(subcommand)]
    command: skills::SkillsCommand,
    #[command(flatten)]
    output: JsonOutput,
}

/// `tasks` and its `--json`.
#[derive(Args, Debug)]
struct TasksArgs {
    #[command(subcommand)]
    command: tasks::TasksCommand,
    #[command(flatten)]
    output: JsonOutput,
}

/// `prompts` and its `--json`.
#[derive(Args, Debug)]
struct Prompts {
    #[command(subcommand)]
    command: PromptsCommand,
    #[command(flatten)]
    output: JsonOutput,
}

#[derive(Subcommand, Debug)]
pub(crate) enum ToolsCommand {
    /// List the tools with their arguments (`?`: optional) and the first line of their
    /// descriptions.
    List,
    /// Call a tool.
    ///
    /// With --config (or MCX_CONFIG), NAME is the tool's name across the servers, as `tools list`
    /// shows it (SERVER__TOOL), and the call goes to its server. Naming the tool is your consent:
    /// mcx calls it whatever its annotations say (a destructive tool too), and nothing else.
    Call {
        /// The tool's name (with --config: SERVER__TOOL).
        name: String,
        /// Its arguments, a JSON object.
        #[arg(long, value_name = "JSON")]
        args: Option<String>,
        /// One argument, `key=value` (repeatable; merged into --args, over an argument of the
        /// same name there). The value is taken as JSON when it is a JSON number, true, false,
        /// null, an object or an array, and as a string otherwise; it stays a string when the
        /// tool's input schema gives the argument the type string (`--arg code=42` then sends
        /// "42"). A value in JSON quotes is a string with its quotes: use --args for that.
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        arg: Vec<String>,
        /// Run the call as a task: the server answers with a task that mcx polls (at the
        /// interval the server suggests), showing its status on stderr, until it ends; input
        /// it asks for is answered as for any call. Ctrl-C cancels the task (tasks/cancel)
        /// and exits with status 130. A 2026-07-28 server may still answer at once. Needs a
        /// server with tasks (2025-11-25 `tasks.requests.tools.call`, or the 2026-07-28
        /// extension io.modelcontextprotocol/tasks).
        #[arg(long)]
        task: bool,
        /// With --task: how long a 2025-11-25 server should keep the task after it is
        /// created, in seconds (the server may choose otherwise; 2026-07-28 servers choose).
        #[arg(long, value_name = "SECONDS", requires = "task")]
        ttl: Option<u64>,
    },
    /// Show a tool in full: its description, input and output schemas, annotations and task
    /// support (the tool object as JSON with --json).
    Show {
        /// The tool's name.
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ResourcesCommand {
    /// List the resources.
    List,
    /// Read a resource.
    Read {
        /// Its URI.
        uri: String,
    },
    /// List the resource templates.
    Templates,
}

#[derive(Subcommand, Debug)]
pub(crate) enum PromptsCommand {
    /// List the prompts.
    List,
    /// Get a prompt.
    Get {
        /// The prompt's name.
        name: String,
        /// An argument, `key=value` (repeatable).
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
    },
}

#[derive(Args, Debug)]
pub(crate) struct CompleteArgs {
    #[command(flatten)]
    pub(crate) reference: CompleteRef,
    /// The argument (prompt) or variable (template) to complete.
    pub(crate) argument: String,
    /// What has been typed so far.
    #[arg(default_value = "")]
    pub(crate) value: String,
    /// Values of arguments already chosen, `key=value` (repeatable).
    #[arg(long = "context", value_name = "KEY=VALUE")]
    pub(crate) context: Vec<String>,
    #[command(flatten)]
    pub(crate) output: JsonOutput,
}

#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub(crate) struct CompleteRef {
    /// Complete an argument of this prompt.
    #[arg(long, value_name = "NAME")]
    pub(crate) prompt: Option<String>,
    /// Complete a variable of the resource template with this URI template.
    #[arg(long, value_name = "TEMPLATE")]
    pub(crate) resource: Option<String>,
}

/// What a client command is.
#[derive(Debug)]
pub(crate) enum ClientCommand {
    Discover,
    Ping,
    Tools(ToolsCommand),
    Resources(ResourcesCommand),
    Prompts(PromptsCommand),
    Complete(CompleteArgs),
    Skills(skills::SkillsCommand),
    Tasks(tasks::TasksCommand),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(refused) => return usage(&refused, &std::env::args_os().skip(1).collect::<Vec<_>>()),
    };
    // `--otlp`, `--metrics`: started before any server is built or client connects, shut down
    // (what was recorded sent) when dropped, on every return below.
    let _telemetry = match otel::start(&telemetry(&cli)) {
        Ok(telemetry) => telemetry,
        Err(e) => return exit::Failed::usage(e).report(false),
    };
    let (command, output) = match cli.command {
        Command::Demo(demo) => {
            return walkthrough::run(walkthrough::Options {
                all: demo.all,
                wire: demo.wire,
            })
            .await;
        }
        Command::Serve(Serve::Demo(serve)) => return serve_demo(serve).await,
        Command::Discover(output) => (ClientCommand::Discover, output),
        Command::Ping(output) => (ClientCommand::Ping, output),
        Command::Tools(c) => (ClientCommand::Tools(c.command), c.output),
        Command::Resources(c) => (ClientCommand::Resources(c.command), c.output),
        Command::Prompts(c) => (ClientCommand::Prompts(c.command), c.output),
        Command::Skills(c) => (ClientCommand::Skills(c.command), c.output),
        Command::Tasks(c) => (ClientCommand::Tasks(c.command), c.output),
        Command::Complete(c) => {
            let output = c.output;
            (ClientCommand::Complete(c), output)
        }
        Command::Proxy(args) => return proxy(args).await,
        Command::Servers(output) => return servers::servers(&cli.target, output.json).await,
        Command::Host(args) => return host::run(args, servers::config_path(&cli.target)).await,
        Command::Login(args) => {
            return match login::with_url(&cli.target, args.url.as_ref()) {
                Ok(target) => login::login(&target).await,
                Err(failed) => failed.report(false),
            };
        }
        Command::Logout(args) => {
            return match login::with_url(&cli.target, args.url.as_ref()) {
                Ok(target) => login::logout(&target, &args).await,
                Err(failed) => failed.report(false),
            };
        }
    };
    let span = otel::command_span(&command);
    // --config (or MCX_CONFIG): every server of the config behind one host.
    if let Some(path) = servers::config_path(&cli.target) {
        let run = servers::run(&path, &cli.target, Some(command), output.json);
        return tracing::Instrument::instrument(run, span).await;
    }
    tracing::Instrument::instrument(commands::run(cli.target, command, output.json), span).await
}

/// What `--otlp` and `--metrics` ask of the command line.
fn telemetry(cli: &Cli) -> otel::Options<'_> {
    let (service, metrics) = match &cli.command {
        Command::Serve(Serve::Demo(serve)) => ("mcx-demo", serve.metrics.as_deref()),
        Command::Proxy(args) => ("mcx-proxy", args.metrics.as_deref()),
        _ => ("mcx", None),
    };
    otel::Options {
        otlp: cli.otlp.as_deref(),
        metrics,
        service,
    }
}

/// clap's refusal of the command line `args` (without the program's name), and its exit
/// status: help and version as clap prints them (status 0); with `--json` on a client command,
/// the usage error as JSON on stdout (status 2, see `exit.rs`); otherwise clap's text on stderr
/// (status 2).
fn usage(refused: &clap::Error, args: &[OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        refused.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) || !json_asked(args)
    {
        refused.exit()
    }
    exit::Failed::usage(usage_message(refused)).report(true)
}

/// What clap says is wrong, in one line: the first paragraph of its message, without `error: `
/// (the usage and the tips that follow are for a terminal).
fn usage_message(refused: &clap::Error) -> String {
    let rendered = refused.render().to_string();
    let first = rendered.split("\n\n").next().unwrap_or_default();
    let message = first
        .strip_prefix("error: ")
        .unwrap_or(first)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if message.is_empty() {
        refused.kind().to_string()
    } else {
        message
    }
}

/// Whether the command line `args` (as given, maybe invalid) has `--json` on a client
/// command: its first word that is neither an option nor an option's value names a command
/// that takes `--json`, and `--json` comes after it (before any `--`).
fn json_asked(args: &[OsString]) -> bool {
    let cli = Cli::command();
    let mut words = args.iter().map(|a| a.to_string_lossy());
    while let Some(word) = words.next() {
        if word == "--" {
            return false;
        }
        if let Some(long) = word.strip_prefix("--") {
            // `--stdio CMD`: its value is not the command.
            if !long.contains('=')
                && cli
                    .get_arguments()
                    .any(|a| a.get_long() == Some(long) && a.get_action().takes_values())
            {
                words.next();
            }
            continue;
        }
        if word.starts_with('-') {
            continue;
        }
        let client = cli
            .find_subcommand(word.as_ref())
            .is_some_and(|c| c.get_arguments().any(|a| a.get_id() == "json"));
        return client && words.take_while(|w| w != "--").any(|w| w == "--json");
    }
    false
}

/// Prints `mcx: message` on stderr (escaped on a terminal: errors quote the server); the exit
/// status of `demo`, `serve` and `proxy` for a failure (1; the client commands' are in
/// `exit.rs`).
pub(crate) fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("mcx: {}", output::for_stderr(&message.to_string()));
    ExitCode::FAILURE
}

async fn proxy(args: ProxyArgs) -> ExitCode {
    let command = match words::split(&args.stdio) {
        Ok(words) => words,
        Err(e) => return fail(format_args!("--stdio: {e}")),
    };
    let (listen, guard) = match guarded(&args.auth, &args.listen, &[]).await {
        Ok(guarded) => guarded,
        Err(e) => return fail(e),
    };
    // The endpoint's counts and event store, for the gauges of `--metrics` and `--otlp`.
    let counters = modelctx_http::server::Counters::new();
    let events = std::sync::Arc::new(modelctx_http::event_store::MemoryEventStore::new());
    metrics::transport_gauges("mcx-proxy", counters.clone(), events.clone());
    proxy::run(proxy::Options {
        counters,
        events,
        command,
        listen,
        max_sessions: args.max_sessions,
        idle_timeout: std::time::Duration::from_secs(args.idle_timeout.max(1)),
        max_requests: args.max_requests,
        max_children: args.max_children,
        spawn_rate: args.spawn_rate,
        verbose: args.verbose,
        guard,
        child_env: args.child_env,
    })
    .await
}

/// The listener to serve on (bound first: with port 0 the resource URL names the port chosen)
/// and the guard `auth` asks for, its issuer's metadata fetched; says on stderr what it accepts.
async fn guarded(
    auth: &auth::AuthArgs,
    addr: &str,
    scopes: &[&str],
) -> Result<
    (
        tokio::net::TcpListener,
        Option<modelctx_server::auth::AuthGuard>,
    ),
    String,
> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("binding {addr}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("binding {addr}: {e}"))?;
    let guard = auth::guard(auth, addr, scopes)?;
    if let Some(guard) = &guard {
        auth::prefetch(guard, auth).await;
        eprintln!("mcx: {}", auth::describe(guard, auth));
    }
    Ok((listener, guard))
}

async fn serve_demo(serve: ServeDemo) -> ExitCode {
    let env = std::env::var(state_keys::ENV).ok();
    let ring = match state_keys::ring(&serve.state_key, env.as_deref()) {
        Ok(ring) => ring,
        Err(e) => return exit::Failed::usage(e).report(false),
    };
    let with_ring = |builder: modelctx_server::ServerBuilder| match ring.clone() {
        Some(ring) => builder.state_sealer(ring),
        None => builder,
    };
    if serve.redis.is_some() && ring.is_none() {
        return exit::Failed::usage(REDIS_NEEDS_KEYS).report(false);
    }
    let Some(addr) = serve.http.as_deref() else {
        if serve.auth.any() {
            return fail(stdio_refusal(&serve.auth));
        }
        let server = with_ring(demo::builder()).build();
        demo::add_unlock(&server);
        return match server.serve_stdio().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(format_args!("serving stdio: {e}")),
        };
    };
    // Joined before anything listens: an instance that cannot reach Redis serves nothing.
    let fleet = match serve.redis.as_deref() {
        Some(url) => match fleet::join(url).await {
            Ok(fleet) => Some(fleet),
            Err(failed) => return failed.report(false),
        },
        None => None,
    };
    let (listener, guard) = match guarded(&serve.auth, addr, &[demo::ADMIN]).await {
        Ok(guarded) => guarded,
        Err(e) => {
            fleet::leave(fleet).await;
            return fail(e);
        }
    };
    let builder = with_ring(demo::builder());
    let builder = match &fleet {
        Some(fleet) => fleet::share(builder, fleet),
        None => builder,
    };
    let server = match guard {
        Some(guard) => builder.auth(guard).build(),
        None => builder.build(),
    };
    demo::add_unlock(&server);
    // In-flight requests get 2 s to finish at Ctrl-C or SIGTERM.
    let grace = std::time::Duration::from_secs(2);
    let config = modelctx_server::HttpConfig::default().shutdown_grace(grace);
    let config = match &fleet {
        Some(fleet) => fleet::share_events(config, fleet),
        None => config,
    };
    let running = match server.serve_http_on(listener, config).await {
        Ok(running) => running,
        Err(e) => {
            fleet::leave(fleet).await;
            return fail(format_args!("serving HTTP on {addr}: {e}"));
        }
    };
    // Listened for before the URL is printed (polled once: that installs the handlers), so
    // that a SIGTERM sent as soon as the URL is seen stops the server gracefully instead of
    // killing it.
    let mut signal = std::pin::pin!(modelctx_server::shutdown_signal());
    let signalled = tokio::select! {
        biased;
        () = &mut signal => true,
        () = std::future::ready(()) => false,
    };
    eprintln!(
        "mcx demo server: http://{}/mcp (Ctrl-C to stop)",
        running.local_addr()
    );
    let stop = async move {
        if !signalled {
            signal.await;
        }
    };
    let served = running.with_graceful_shutdown(stop).await;
    // The instance number is given back once the requests under way have ended.
    fleet::leave(fleet).await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format_args!("serving HTTP on {addr}: {e}")),
    }
}

/// Why `--redis` needs a shared key ring.
const REDIS_NEEDS_KEYS: &str = "--redis needs --state-key (or MCX_STATE_KEYS), the same keys on \
     every instance: with a random key of each process, a modern round trip retried on another \
     instance is refused";

/// Why the auth flags are refused over stdio.
fn stdio_refusal(auth: &auth::AuthArgs) -> String {
    format!(
        "{} protects HTTP only: add --http ADDR (over stdio the MCP authorization rules do not \
         apply: the client that starts the server is trusted with it)",
        auth.first_flag()
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("mcx").chain(args.iter().copied()))
    }

    fn serve_demo(args: &[&str]) -> ServeDemo {
        let mut all = vec!["serve", "demo"];
        all.extend_from_slice(args);
        match parse(&all).expect("parses").command {
            Command::Serve(Serve::Demo(serve)) => serve,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn serve_demo_takes_the_auth_flags_with_http() {
        let serve = serve_demo(&[
            "--http",
            "127.0.0.1:0",
            "--auth-issuer",
            "http://127.0.0.1:9",
            "--auth-audience",
            "http://localhost:8080/mcp",
            "--auth-token-file",
            "token",
        ]);
        assert_eq!(serve.http.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(
            serve.auth.auth_issuer.as_deref(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(
            serve.auth.auth_audience.as_deref(),
            Some("http://localhost:8080/mcp")
        );
        assert_eq!(
            serve.auth.auth_token_file.as_deref(),
            Some(std::path::Path::new("token"))
        );
    }

    #[test]
    fn serve_demo_takes_state_keys_in_order() {
        let serve = serve_demo(&["--http", "127.0.0.1:0", "--state-key", "k2:x"]);
        assert_eq!(serve.state_key, ["k2:x"]);
        let serve = serve_demo(&["--state-key", "k2:x", "--state-key=k1:y"]);
        assert_eq!(serve.state_key, ["k2:x", "k1:y"]);
        assert!(serve_demo(&[]).state_key.is_empty());
        let help = Cli::command()
            .find_subcommand_mut("serve")
            .and_then(|c| c.find_subcommand_mut("demo"))
            .map(|c| c.render_long_help().to_string())
            .unwrap();
        assert!(help.contains("--state-key <KID:BASE64URL>"), "{help}");
        assert!(help.contains("Prefer the variable"), "{help}");
        assert!(help.contains("MCX_STATE_KEYS"), "{help}");
    }

    #[test]
    fn redis_needs_http() {
        let serve = serve_demo(&["--http", "127.0.0.1:0", "--redis", "redis://127.0.0.1/"]);
        assert_eq!(serve.redis.as_deref(), Some("redis://127.0.0.1/"));
        assert_eq!(serve_demo(&["--http", "127.0.0.1:0"]).redis, None);
        for args in [
            &["serve", "demo", "--redis", "redis://127.0.0.1/"][..],
            &["serve", "demo", "--stdio", "--redis", "redis://127.0.0.1/"],
        ] {
            let refused = parse(args).expect_err(&format!("{args:?} refused"));
            assert!(
                matches!(
                    refused.kind(),
                    clap::error::ErrorKind::MissingRequiredArgument
                        | clap::error::ErrorKind::ArgumentConflict
                ),
                "{args:?}: {refused}"
            );
            assert_eq!(refused.exit_code(), 2, "{args:?}");
        }
        let refused = parse(&["serve", "demo", "--redis", "redis://127.0.0.1/"]).unwrap_err();
        assert!(
            usage_message(&refused).contains("--http <ADDR>"),
            "{refused}"
        );
    }

    #[test]
    fn over_stdio_the_auth_flags_are_refused_by_name() {
        for (args, flag) in [
            (
                &["--auth-issuer", "http://127.0.0.1:9"][..],
                "--auth-issuer",
            ),
            (
                &["--stdio", "--auth-token-file", "token"][..],
                "--auth-token-file",
            ),
        ] {
            let serve = serve_demo(args);
            assert_eq!(serve.http, None);
            let refusal = stdio_refusal(&serve.auth);
            assert!(
                refusal.starts_with(&format!("{flag} protects HTTP only: add --http")),
                "{refusal}"
            );
        }
        assert!(!serve_demo(&["--stdio"]).auth.any());
    }

    #[test]
    fn json_is_taken_by_the_client_commands_only() {
        for args in [
            &["discover", "--json"][..],
            &["ping", "--json"],
            &["tools", "list", "--json"],
            &["tools", "--json", "list"],
            &["tools", "call", "add", "--json", "--args", "{}"],
            &["resources", "read", "demo://readme", "--json"],
            &["prompts", "list", "--json"],
            &["complete", "--prompt", "greet", "name", "--json"],
        ] {
            let cli = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let json = match &cli.command {
                Command::Discover(o) | Command::Ping(o) => o.json,
                Command::Tools(t) => t.output.json,
                Command::Resources(r) => r.output.json,
                Command::Prompts(p) => p.output.json,
                Command::Complete(c) => c.output.json,
                other => panic!("{other:?}"),
            };
            assert!(json, "{args:?}");
        }
        assert!(!matches!(
            parse(&["tools", "list"]).expect("parses").command,
            Command::Tools(Tools {
                output: JsonOutput { json: true },
                ..
            })
        ));
        for args in [
            &["demo", "--json"][..],
            &["--json", "demo"],
            &["serve", "demo", "--json"],
            &[
                "proxy",
                "--stdio",
                "server",
                "--listen",
                "127.0.0.1:0",
                "--json",
            ],
            &["--json", "tools", "list"],
        ] {
            let refused = parse(args).expect_err(&format!("{args:?} refused"));
            assert_eq!(
                refused.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{args:?}"
            );
        }
    }

    fn words(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn json_is_asked_on_client_commands_only() {
        for args in [
            &["--url", "U", "tools", "--json", "call"][..],
            &["--url", "U", "tools", "call", "--json"],
            &["--stdio", "tools", "ping", "--json", "--bogus"],
            &["--timeout=2", "discover", "--json"],
            &["complete", "--json"],
        ] {
            assert!(json_asked(&words(args)), "{args:?}");
        }
        for args in [
            &["--url", "U", "tools", "call", "x"][..],
            &["--json", "tools", "list"],
            &["demo", "--json"],
            &["serve", "demo", "--json"],
            &["proxy", "--stdio", "s", "--json"],
            &["tools", "call", "x", "--", "--json"],
            &[],
        ] {
            assert!(!json_asked(&words(args)), "{args:?}");
        }
    }

    #[test]
    fn a_usage_error_in_json_is_clap_message_in_one_line() {
        let refused = parse(&["--url", "U", "tools", "--json", "call"]).unwrap_err();
        assert_eq!(
            usage_message(&refused),
            "the following required arguments were not provided: <NAME>"
        );
        let refused = parse(&["tools", "list", "--json", "--bogus"]).unwrap_err();
        assert_eq!(
            usage_message(&refused),
            "unexpected argument '--bogus' found"
        );
    }

    #[test]
    fn the_help_documents_the_exit_statuses() {
        let help = Cli::command().render_long_help().to_string();
        for line in [
            "Exit status:",
            "2    usage",
            "3    connection",
            "4    protocol",
            "5    tool",
        ] {
            assert!(help.contains(line), "{line} missing from {help}");
        }
    }

    #[test]
    fn the_proxy_takes_the_auth_flags() {
        let cli = parse(&[
            "proxy",
            "--stdio",
            "server",
            "--listen",
            "127.0.0.1:0",
            "--auth-issuer",
            "https://id.example.com",
            "--auth-token-file",
            "token",
        ])
        .expect("parses");
        let Command::Proxy(proxy) = cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!(
            proxy.auth.auth_issuer.as_deref(),
            Some("https://id.example.com")
        );
        assert!(proxy.auth.auth_token_file.is_some());
        let refused = parse(&[
            "proxy",
            "--stdio",
            "server",
            "--listen",
            "127.0.0.1:0",
            "--auth-audience",
            "https://mcp.example.com/mcp",
        ])
        .unwrap_err();
        assert_eq!(
            refused.kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
    }

    #[test]
    fn host_takes_mcx_s_own_config_too() {
        let cli = parse(&["--config", "mcp.json", "host", "--stdio"]).expect("parses");
        assert_eq!(
            cli.target.config.as_deref(),
            Some(std::path::Path::new("mcp.json"))
        );
        assert!(matches!(cli.command, Command::Host(_)));
    }

    #[test]
    fn config_is_a_target_of_its_own() {
        let cli = parse(&["--config", "mcp.json", "servers", "--json"]).expect("parses");
        assert_eq!(
            cli.target.config.as_deref(),
            Some(std::path::Path::new("mcp.json"))
        );
        assert!(matches!(
            cli.command,
            Command::Servers(JsonOutput { json: true })
        ));
        assert!(json_asked(&words(&[
            "--config", "mcp.json", "servers", "--json"
        ])));
        let cli = parse(&[
            "--config",
            "mcp.json",
            "--timeout",
            "5",
            "--sampling-reply",
            "hi",
            "tools",
            "call",
            "demo__echo",
            "--args",
            "{}",
        ])
        .expect("parses");
        assert!(matches!(
            &cli.command,
            Command::Tools(Tools { command: ToolsCommand::Call { name, .. }, .. }) if name == "demo__echo"
        ));
        assert!(parse(&["servers"]).expect("parses").target.config.is_none());
        for (args, other) in [
            (
                &[
                    "--config",
                    "c.json",
                    "--url",
                    "http://h/mcp",
                    "tools",
                    "list",
                ][..],
                "--url",
            ),
            (
                &["--stdio", "server", "--config", "c.json", "servers"],
                "--stdio",
            ),
            (
                &["--config", "c.json", "--era", "modern", "tools", "list"],
                "--era",
            ),
            (
                &["--config", "c.json", "--log-level", "debug", "servers"],
                "--log-level",
            ),
        ] {
            let refused = parse(args).expect_err(&format!("{args:?} refused"));
            assert_eq!(
                refused.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{args:?}"
            );
            let message = usage_message(&refused);
            assert!(
                message.contains("--config <FILE>") && message.contains(other),
                "{message}"
            );
        }
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("MCX_CONFIG"), "{help}");
        let call_help = Cli::command()
            .find_subcommand_mut("tools")
            .and_then(|c| c.find_subcommand_mut("call"))
            .map(|c| c.render_long_help().to_string())
            .unwrap();
        assert!(
            call_help.contains("Naming the tool is your consent"),
            "{call_help}"
        );
    }
}
