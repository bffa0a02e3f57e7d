//! The host core against in-process modelctx servers over Streamable HTTP: aggregation,
//! routing, servers that never start, go away and come back, list changes, the policy,
//! cancellation and shutdown. Every wait is on an event with a timeout, never a sleep.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modelctx_host::client::{CallOptions, CompletionRef, LogLevel};
use modelctx_host::model::{
    CallToolResult, ContentBlock, EmbeddedResourceResource, ToolAnnotations,
};
use modelctx_host::{
    Host, HostConfig, HostError, HostEvent, ServerConfig, ServerState, TableSizes, TransportConfig,
};
use modelctx_server::{
    Context, HttpConfig, NoArgs, Prompt, PromptMessage, ProtocolVersion, ReadRequest, Resource,
    ResourceContents, RunningServer, Server, Tool,
};
use tokio::sync::{broadcast, mpsc};

/// The longest any step may take.
const STEP: Duration = Duration::from_secs(15);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no result within {STEP:?}"))
}

/// The first event of `events` that `matches`, within [`STEP`].
async fn event(
    events: &mut broadcast::Receiver<HostEvent>,
    what: &str,
    matches: impl Fn(&HostEvent) -> bool,
) -> HostEvent {
    within(what, async {
        loop {
            match events.recv().await {
                Ok(event) if matches(&event) => return event,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("{what}: the host is gone"),
            }
        }
    })
    .await
}

fn is_state(name: &str, ready: bool) -> impl Fn(&HostEvent) -> bool + '_ {
    move |event| match event {
        HostEvent::Server { name: n, state } if n == name => match state {
            ServerState::Ready => ready,
            ServerState::Reconnecting { .. } => !ready,
            _ => false,
        },
        _ => false,
    }
}

fn read_only() -> ToolAnnotations {
    ToolAnnotations {
        destructive_hint: None,
        idempotent_hint: None,
        open_world_hint: None,
        read_only_hint: Some(true),
        title: None,
    }
}

/// Which protocol era a test server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    /// 2025-11-25 and before (sessions, `initialize`).
    Legacy,
    /// Every version the server supports (2026-07-28 chosen).
    Modern,
}

fn builder(name: &str, era: Era) -> modelctx_server::ServerBuilder {
    let builder = Server::builder(name, "1.0.0");
    match era {
        Era::Legacy => builder.versions([ProtocolVersion::V2025_11_25]),
        Era::Modern => builder,
    }
}

/// A server named `name` whose read-only tool `echo` answers its name.
fn named(name: &str) -> Server {
    named_in(name, Era::Modern)
}

/// [`named`] speaking `era`.
fn named_in(name: &str, era: Era) -> Server {
    let me = name.to_owned();
    let uri = format!("mem://{name}/readme");
    let text = format!("the readme of {name}");
    builder(name, era)
        .tool(
            Tool::new("echo", move |_: NoArgs| {
                let me = me.clone();
                async move { me }
            })
            .annotations(read_only()),
        )
        .resource(Resource::new(uri, "readme", move |request: ReadRequest| {
            let text = text.clone();
            async move { ResourceContents::text(request.uri, text) }
        }))
        .build()
}

async fn serve(server: &Server) -> (RunningServer, SocketAddr) {
    let running = server
        .serve_http("127.0.0.1:0", HttpConfig::default())
        .await
        .expect("a local port");
    let addr = running.local_addr();
    (running, addr)
}

fn url(addr: SocketAddr) -> String {
    format!("http://{addr}/mcp")
}

fn config(servers: Vec<ServerConfig>) -> HostConfig {
    let mut config = HostConfig::default();
    config.servers = servers;
    config
}

async fn start(servers: Vec<ServerConfig>) -> Host {
    let host = Host::builder(config(servers))
        .connect_timeout(Duration::from_secs(5))
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
        .health_check(Some(Duration::from_millis(100)));
    within("start", host.start()).await
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::TextContent(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect()
}

fn tool_names(host: &Host) -> Vec<String> {
    let mut names: Vec<String> = host.tools().into_iter().map(|t| t.name).collect();
    names.sort();
    names
}

fn state_of(host: &Host, name: &str) -> ServerState {
    host.servers()
        .into_iter()
        .find(|s| s.name == name)
        .map(|s| s.state)
        .expect("a configured server")
}

/// An address nobody listens on (a port just bound and let go).
async fn nobody() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    listener.local_addr().expect("its address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_are_aggregated_under_their_names_and_calls_go_to_each() {
    let (alpha, beta) = (named("alpha"), named("beta"));
    let (_a, a) = serve(&alpha).await;
    let (_b, b) = serve(&beta).await;
    let host = start(vec![
        ServerConfig::http("alpha", url(a)),
        ServerConfig::http("beta", url(b)),
    ])
    .await;

    let statuses = host.servers();
    assert_eq!(statuses.len(), 2);
    for status in &statuses {
        assert_eq!(status.state, ServerState::Ready, "{status:?}");
        assert!(status.protocol_version.is_some());
        assert_eq!(
            status.server_info.as_ref().map(|i| i.name.as_str()),
            Some(status.name.as_str())
        );
    }
    assert_eq!(tool_names(&host), ["alpha__echo", "beta__echo"]);
    for tool in host.tools() {
        assert_eq!(tool.tool.name, "echo");
        assert_eq!(format!("{}__echo", tool.server), tool.name);
    }
    for server in ["alpha", "beta"] {
        let name = format!("{server}__echo");
        let result = within(
            "call",
            host.call_tool(&name, Default::default(), CallOptions::new()),
        )
        .await
        .expect("called");
        assert_eq!(text(&result), server);
        // Resources keep their URIs and are read from the server that listed them.
        let uri = format!("mem://{server}/readme");
        let read = within("read", host.read_resource(&uri))
            .await
            .expect("read");
        let texts: Vec<&str> = read
            .contents
            .iter()
            .filter_map(|c| match c {
                EmbeddedResourceResource::TextResourceContents(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, [format!("the readme of {server}")]);
    }
    assert_eq!(host.resources().len(), 2);
    assert!(matches!(
        host.call_tool("gamma__echo", Default::default(), CallOptions::new())
            .await,
        Err(HostError::UnknownTool(name)) if name == "gamma__echo"
    ));
    assert!(matches!(
        host.read_resource("mem://gamma/readme").await,
        Err(HostError::UnknownResource(_))
    ));
    within("shutdown", host.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_never_start_do_not_stop_the_others() {
    let alpha = named("alpha");
    let (_a, a) = serve(&alpha).await;
    let down = nobody().await;
    let mut missing = ServerConfig::stdio(
        "missing",
        "/nonexistent/modelctx-host-test-no-such-server",
        vec![],
    );
    missing.timeout = Some(Duration::from_secs(2));
    let host = start(vec![
        ServerConfig::http("down", url(down)),
        missing,
        ServerConfig::http("alpha", url(a)),
    ])
    .await;

    let names: Vec<String> = host.servers().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["down", "missing", "alpha"], "config order");
    assert_eq!(state_of(&host, "alpha"), ServerState::Ready);
    for name in ["down", "missing"] {
        match state_of(&host, name) {
            ServerState::Reconnecting { attempt, error } => {
                assert!(attempt >= 1);
                assert!(!error.is_empty());
            }
            other => panic!("{name}: {other:?}"),
        }
        assert!(host.client(name).is_none());
    }
    assert_eq!(tool_names(&host), ["alpha__echo"]);
    let result = host
        .call_tool("alpha__echo", Default::default(), CallOptions::new())
        .await
        .expect("the working server answers");
    assert_eq!(text(&result), "alpha");

    // They go on being tried: the attempt count grows.
    let mut events = host.changes();
    event(&mut events, "another attempt", |e| {
        matches!(e, HostEvent::Server { name, state: ServerState::Reconnecting { attempt, .. } }
            if name == "missing" && *attempt >= 2)
    })
    .await;
    within("shutdown", host.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_goes_away_is_reconnecting_then_ready_with_its_tools_back() {
    goes_away_and_comes_back(Era::Modern).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_server_that_goes_away_is_reconnecting_then_ready_with_its_tools_back() {
    goes_away_and_comes_back(Era::Legacy).await;
}

async fn goes_away_and_comes_back(era: Era) {
    let alpha = named_in("alpha", era);
    let beta = named("beta");
    let (_b, b) = serve(&beta).await;
    let (mut running, addr) = serve(&alpha).await;
    let host = start(vec![
        ServerConfig::http("alpha", url(addr)),
        ServerConfig::http("beta", url(b)),
    ])
    .await;
    let mut events = host.changes();
    // A subscription the host makes again whenever the server is back.
    within("subscribe", host.subscribe_resource("mem://alpha/readme"))
        .await
        .expect("subscribed");
    let before: TableSizes = host.table_sizes();
    assert_eq!(before.subscriptions, 1);
    let modern = era == Era::Modern;
    assert_eq!(
        host.servers()[0].protocol_version.map(|v| v.era()),
        Some(if modern {
            modelctx_host::client::Era::Modern
        } else {
            modelctx_host::client::Era::Legacy
        })
    );
    assert_eq!(before.clients, 2);
    assert_eq!(before.supervisors, 2);
    assert_eq!(before.tools, 2);

    for round in 0..3 {
        // The server goes away: its tools leave the aggregate.
        running.shutdown(Duration::ZERO).await;
        event(&mut events, "alpha reconnecting", is_state("alpha", false)).await;
        assert_eq!(tool_names(&host), ["beta__echo"], "round {round}");
        // A call to it is refused as not connected (not as unknown), and so is a read.
        match host
            .call_tool("alpha__echo", Default::default(), CallOptions::new())
            .await
        {
            Err(HostError::NotConnected {
                server,
                state: ServerState::Reconnecting { .. },
            }) => assert_eq!(server, "alpha"),
            other => panic!("round {round}: {other:?}"),
        }
        assert!(matches!(
            host.read_resource("mem://alpha/readme").await,
            Err(HostError::NotConnected { .. })
        ));

        // It comes back on the same port: Ready, and its tools are back.
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("the same port again");
        running = alpha
            .serve_http_on(listener, HttpConfig::default())
            .await
            .expect("served again");
        event(&mut events, "alpha ready", is_state("alpha", true)).await;
        assert_eq!(tool_names(&host), ["alpha__echo", "beta__echo"]);
        let result = within(
            "call",
            host.call_tool("alpha__echo", Default::default(), CallOptions::new()),
        )
        .await
        .expect("called after the reconnect");
        assert_eq!(text(&result), "alpha");
        alpha.notify_resource_updated("mem://alpha/readme");
        event(
            &mut events,
            "the update after the reconnect",
            |e| matches!(e, HostEvent::ResourceUpdated { server, .. } if server == "alpha"),
        )
        .await;
        // Nothing grows across reconnects.
        assert_eq!(host.table_sizes(), before, "round {round}");
    }
    within("shutdown", host.shutdown()).await;
    running.shutdown(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_change_on_one_server_updates_the_aggregate() {
    let alpha = named("alpha");
    let echo = Tool::new("echo", |_: NoArgs| async { "beta" }).annotations(read_only());
    let beta = Server::builder("beta", "1.0.0")
        .tool(echo.clone())
        .declare_prompts()
        .build();
    let (_a, a) = serve(&alpha).await;
    let (_b, b) = serve(&beta).await;
    let host = start(vec![
        ServerConfig::http("alpha", url(a)),
        ServerConfig::http("beta", url(b)),
    ])
    .await;
    // The host listens for list changes before it lists (and before `start` returns).
    let mut events = host.changes();

    // A list change that changes nothing (the same tool again) is no event. The host handles
    // a server's notifications in turn: once the prompts' change that follows is published,
    // the tools were listed again.
    beta.add_tool(echo).expect("tools are declared");
    let prompt = Prompt::with_arguments("hi", vec![], |_: serde_json::Value| async {
        PromptMessage::user("hi")
    });
    beta.add_prompt(prompt).expect("prompts are declared");
    let first = event(&mut events, "a change", |e| {
        matches!(e, HostEvent::ToolsChanged | HostEvent::PromptsChanged)
    })
    .await;
    assert_eq!(first, HostEvent::PromptsChanged, "no tools changed");
    assert_eq!(tool_names(&host), ["alpha__echo", "beta__echo"]);

    // A change is published, and the new tool listed.
    beta.add_tool(Tool::new("added", |_: NoArgs| async { "new" }).annotations(read_only()))
        .expect("tools are declared");
    event(&mut events, "tools changed", |e| {
        *e == HostEvent::ToolsChanged
    })
    .await;
    assert_eq!(
        tool_names(&host),
        ["alpha__echo", "beta__added", "beta__echo"]
    );
    let result = within(
        "call",
        host.call_tool("beta__added", Default::default(), CallOptions::new()),
    )
    .await
    .expect("the new tool is called");
    assert_eq!(text(&result), "new");
    within("shutdown", host.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_policy_refuses_a_destructive_tool_and_nothing_is_sent() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let server = Server::builder("files", "1.0.0")
        .tool(Tool::new("wipe", move |_: NoArgs| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { "wiped" }
        }))
        .tool(Tool::new("look", |_: NoArgs| async { "looked" }).annotations(read_only()))
        .build();
    let (_s, addr) = serve(&server).await;
    let host = start(vec![ServerConfig::http("files", url(addr))]).await;

    match host
        .call_tool("files__wipe", Default::default(), CallOptions::new())
        .await
    {
        Err(HostError::Denied { reason }) => assert!(reason.contains("wipe"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the server never saw the call"
    );
    let result = host
        .call_tool("files__look", Default::default(), CallOptions::new())
        .await
        .expect("a read-only tool is allowed");
    assert_eq!(text(&result), "looked");
    within("shutdown", host.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_is_cancelled_on_the_server() {
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (cancelled_tx, mut cancelled) = mpsc::unbounded_channel();
    let hang = move |context: Context, _: NoArgs| {
        let (started, cancelled) = (started_tx.clone(), cancelled_tx.clone());
        async move {
            let _ = started.send(());
            context.cancelled().cancelled().await;
            let _ = cancelled.send(());
            "cancelled"
        }
    };
    let server = Server::builder("slow", "1.0.0")
        .tool(Tool::new("hang", hang).annotations(read_only()))
        .build();
    let (_s, addr) = serve(&server).await;
    let host = start(vec![ServerConfig::http("slow", url(addr))]).await;

    let progress = Arc::new(AtomicUsize::new(0));
    let seen = progress.clone();
    let options = CallOptions::new().on_progress(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
    });
    let call = host.call_tool("slow__hang", Default::default(), options);
    tokio::select! {
        result = call => panic!("the call ended: {result:?}"),
        _ = within("the tool starts", started.recv()) => {}
    }
    // The call's future is dropped here: the tool sees its cancellation.
    within("the tool is cancelled", cancelled.recv())
        .await
        .expect("told");
    // And the host's tables are as before.
    assert_eq!(host.table_sizes().clients, 1);
    let sizes = within("sizes", host.client("slow").unwrap().table_sizes())
        .await
        .expect("connected");
    assert_eq!(sizes.calls, 0);
    within("shutdown", host.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_and_leaves_every_server_stopped() {
    let alpha = named("alpha");
    let (_a, a) = serve(&alpha).await;
    let down = nobody().await;
    let mut off = ServerConfig::http("off", url(a));
    off.disabled = true;
    let host = start(vec![
        ServerConfig::http("alpha", url(a)),
        ServerConfig::http("down", url(down)),
        off,
    ])
    .await;
    // A disabled server is listed, never started.
    assert_eq!(state_of(&host, "off"), ServerState::Disabled);
    assert!(host.client("off").is_none());
    assert_eq!(tool_names(&host), ["alpha__echo"]);
    let client = host.client("alpha").expect("connected");
    let mut events = host.changes();

    let began = tokio::time::Instant::now();
    within("shutdown", host.shutdown()).await;
    assert!(began.elapsed() < Duration::from_secs(11));
    for status in host.servers() {
        let expected = if status.name == "off" {
            ServerState::Disabled
        } else {
            ServerState::Stopped
        };
        assert_eq!(status.state, expected, "{status:?}");
        assert_eq!(status.protocol_version, None);
    }
    assert!(client.is_closed(), "the client was closed");
    assert!(matches!(
        host.call_tool("alpha__echo", Default::default(), CallOptions::new())
            .await,
        Err(HostError::ShutDown)
    ));
    assert!(matches!(
        host.read_resource("mem://alpha/readme").await,
        Err(HostError::ShutDown)
    ));
    let sizes = host.table_sizes();
    assert_eq!(
        (
            sizes.tools,
            sizes.resources,
            sizes.clients,
            sizes.supervisors
        ),
        (0, 0, 0, 0)
    );
    event(
        &mut events,
        "alpha stopped",
        |e| matches!(e, HostEvent::Server { name, state: ServerState::Stopped } if name == "alpha"),
    )
    .await;
    // A second shutdown is harmless.
    within("shutdown again", host.shutdown()).await;
}

/// The variable that makes [`stdio_child`] serve (the tests start this test binary as a stdio
/// server).
const CHILD: &str = "MODELCTX_HOST_TEST_CHILD";

/// Not a test: the stdio server the tests start as a child process (this binary, running only
/// this function, with [`CHILD`] set). Its tools: `echo` answers `kid`, `quit` answers, then
/// the process exits.
#[tokio::test]
#[ignore = "the stdio server of the tests, started by them as a child process"]
async fn stdio_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let quit = |_: NoArgs| async {
        tokio::spawn(async {
            // Time for the answer to be written first.
            tokio::time::sleep(Duration::from_millis(50)).await;
            std::process::exit(0);
        });
        "bye"
    };
    let server = Server::builder("kid", "1.0.0")
        .tool(Tool::new("echo", |_: NoArgs| async { "kid" }).annotations(read_only()))
        .tool(Tool::new("quit", quit).annotations(read_only()))
        .build();
    server.serve_stdio().await.expect("served");
}

/// The entry of a stdio server run by [`stdio_child`].
fn child_entry(name: &str) -> ServerConfig {
    let exe = std::env::current_exe().expect("the test binary");
    let args = [
        "stdio_child",
        "--exact",
        "--ignored",
        "--test-threads=1",
        "-q",
    ];
    let mut entry = ServerConfig::stdio(
        name,
        exe.to_string_lossy(),
        args.iter().map(|a| (*a).to_owned()).collect(),
    );
    if let TransportConfig::Stdio { env, .. } = &mut entry.transport {
        env.insert(CHILD.into(), "1".into());
    }
    entry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_that_exits_is_restarted_and_stopped_on_shutdown() {
    // No periodic probe: the child's exit alone is seen (its connection closes).
    let host = Host::builder(config(vec![child_entry("kid")]))
        .connect_timeout(Duration::from_secs(10))
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
        .health_check(None);
    let host = within("start", host.start()).await;
    assert_eq!(state_of(&host, "kid"), ServerState::Ready);
    assert_eq!(tool_names(&host), ["kid__echo", "kid__quit"]);
    let mut events = host.changes();
    let before = host.table_sizes();

    let first = host.client("kid").expect("connected");
    let bye = within(
        "quit",
        host.call_tool("kid__quit", Default::default(), CallOptions::new()),
    )
    .await
    .expect("answered");
    assert_eq!(text(&bye), "bye");
    event(&mut events, "kid reconnecting", is_state("kid", false)).await;
    assert!(first.is_closed());
    event(&mut events, "kid ready again", is_state("kid", true)).await;
    assert_eq!(tool_names(&host), ["kid__echo", "kid__quit"]);
    let result = within(
        "echo",
        host.call_tool("kid__echo", Default::default(), CallOptions::new()),
    )
    .await
    .expect("the restarted server answers");
    assert_eq!(text(&result), "kid");
    assert_eq!(host.table_sizes(), before);

    // Shutdown stops the child: it is reaped, its exit known.
    let second = host.client("kid").expect("connected");
    within("shutdown", host.shutdown()).await;
    assert!(second.is_closed());
    assert!(
        second.server_exit().is_some(),
        "the child was stopped and reaped"
    );
    assert_eq!(state_of(&host, "kid"), ServerState::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_host_ends_every_task_of_the_host() {
    let alpha = named("alpha");
    let (_a, a) = serve(&alpha).await;
    let down = nobody().await;
    let host = start(vec![
        ServerConfig::http("alpha", url(a)),
        ServerConfig::http("down", url(down)),
        child_entry("kid"),
    ])
    .await;
    assert_eq!(state_of(&host, "kid"), ServerState::Ready);
    let mut events = host.changes();
    let clone = host.clone();
    drop(host);
    // A clone keeps it up.
    assert_eq!(state_of(&clone, "alpha"), ServerState::Ready);
    drop(clone);
    // The events' sender is dropped with the host's core, which every supervisor holds: the
    // receiver ends once none of them is left.
    within("every task ended", async {
        loop {
            match events.recv().await {
                Err(broadcast::error::RecvError::Closed) => break,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            }
        }
    })
    .await;
}

/// A server with a prompt that completes its argument, a resource whose updates it sends, and
/// a tool that reports progress.
fn rich(era: Era) -> Server {
    let greet = Prompt::with_arguments(
        "greet",
        vec![("who".into(), None, true)],
        |args: serde_json::Value| async move {
            PromptMessage::user(format!("hello {}", args["who"].as_str().unwrap_or("?")))
        },
    )
    .complete("who", |partial: String, _| async move {
        ["ada", "alan", "grace"]
            .iter()
            .filter(|n| n.starts_with(&partial))
            .map(|n| (*n).to_owned())
            .collect()
    });
    let steps = |context: Context, _: NoArgs| async move {
        for step in 1..=3 {
            let _ = context.progress(f64::from(step), Some(3.0), None).await;
        }
        "done"
    };
    let chatty = |context: Context, _: NoArgs| async move {
        context
            .log(
                LogLevel::Warning,
                Some("chat"),
                serde_json::json!("careful"),
            )
            .await;
        "said"
    };
    builder("rich", era)
        .prompt(greet)
        .tool(Tool::new("chatty", chatty).annotations(read_only()))
        .tool(Tool::new("steps", steps).annotations(read_only()))
        .resource(Resource::new(
            "mem://rich/news",
            "news",
            |request: ReadRequest| async move { ResourceContents::text(request.uri, "none yet") },
        ))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_completions_subscriptions_and_progress_go_through_the_owning_server() {
    owning_server_answers(Era::Modern).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_completions_subscriptions_and_progress_of_a_legacy_server() {
    owning_server_answers(Era::Legacy).await;
}

async fn owning_server_answers(era: Era) {
    let alpha = named("alpha");
    let rich = rich(era);
    let (_a, a) = serve(&alpha).await;
    let (_r, r) = serve(&rich).await;
    let host = start(vec![
        ServerConfig::http("alpha", url(a)),
        ServerConfig::http("rich", url(r)),
    ])
    .await;
    let mut events = host.changes();

    // Prompts: listed namespaced, got by that name from their server.
    let prompts: Vec<String> = host.prompts().into_iter().map(|p| p.name).collect();
    assert_eq!(prompts, ["rich__greet"]);
    let arguments = [("who".to_owned(), "you".to_owned())].into_iter().collect();
    let got = within("get", host.get_prompt("rich__greet", arguments))
        .await
        .expect("got");
    let said: Vec<&str> = got
        .messages
        .iter()
        .filter_map(|m| match &m.content {
            ContentBlock::TextContent(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(said, ["hello you"]);
    assert!(matches!(
        host.get_prompt("alpha__greet", Default::default()).await,
        Err(HostError::UnknownPrompt(_))
    ));

    // Completion: routed by the prompt's shown name, asked under its own.
    let completion = within(
        "complete",
        host.complete(
            &CompletionRef::Prompt("rich__greet".into()),
            "who",
            "a",
            &Default::default(),
        ),
    )
    .await
    .expect("completed");
    assert_eq!(completion.values, ["ada", "alan"]);

    // Progress passes through the call's options.
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let options = CallOptions::new().on_progress(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    let result = within(
        "steps",
        host.call_tool("rich__steps", Default::default(), options),
    )
    .await
    .expect("called");
    assert_eq!(text(&result), "done");
    assert_eq!(seen.load(Ordering::SeqCst), 3);

    // A subscription goes to the server that has the resource; its updates come as events.
    within("subscribe", host.subscribe_resource("mem://rich/news"))
        .await
        .expect("subscribed");
    assert_eq!(host.table_sizes().subscriptions, 1);
    rich.notify_resource_updated("mem://rich/news");
    let updated = event(&mut events, "resource updated", |e| {
        matches!(e, HostEvent::ResourceUpdated { .. })
    })
    .await;
    assert_eq!(
        updated,
        HostEvent::ResourceUpdated {
            server: "rich".into(),
            uri: "mem://rich/news".into()
        }
    );
    within("unsubscribe", host.unsubscribe_resource("mem://rich/news"))
        .await
        .expect("unsubscribed");
    assert_eq!(host.table_sizes().subscriptions, 0);

    // The log level goes to every server; their messages come as events.
    within("log level", host.set_log_level(LogLevel::Info))
        .await
        .expect("set");
    let said = within(
        "chatty",
        host.call_tool("rich__chatty", Default::default(), CallOptions::new()),
    )
    .await
    .expect("called");
    assert_eq!(text(&said), "said");
    match event(&mut events, "a log message", |e| {
        matches!(e, HostEvent::Log { .. })
    })
    .await
    {
        HostEvent::Log { server, message } => {
            assert_eq!(server, "rich");
            assert_eq!(message.level, LogLevel::Warning);
            assert_eq!(message.logger.as_deref(), Some("chat"));
        }
        other => panic!("{other:?}"),
    }
    within("shutdown", host.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_changed_by_the_host_are_seen_by_its_servers() {
    let roots = |context: Context, _: NoArgs| async move {
        match context.list_roots().await {
            Ok(list) => list
                .roots
                .iter()
                .map(|r| r.uri.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            Err(e) => format!("no roots: {e}"),
        }
    };
    let server = Server::builder("files", "1.0.0")
        .tool(Tool::new("roots", roots).annotations(read_only()))
        .build();
    let (_s, addr) = serve(&server).await;
    let (_o, other) = serve(&server).await;
    let root = |uri: &str| modelctx_host::model::Root {
        meta: None,
        name: None,
        uri: uri.into(),
    };
    let host = Host::builder(config(vec![
        ServerConfig::http("shared", url(addr)),
        ServerConfig::http("own", url(other)),
    ]))
    .roots(vec![root("file:///a")])
    .server_roots("own", vec![root("file:///mine")])
    .start();
    let host = within("start", host).await;
    let ask = |name: &'static str| {
        let host = host.clone();
        async move {
            let result = within(
                "roots",
                host.call_tool(name, Default::default(), CallOptions::new()),
            )
            .await
            .expect("called");
            text(&result)
        }
    };
    assert_eq!(ask("shared__roots").await, "file:///a");
    assert_eq!(ask("own__roots").await, "file:///mine");
    within("set roots", host.set_roots(vec![root("file:///b")])).await;
    assert_eq!(ask("shared__roots").await, "file:///b");
    assert_eq!(ask("own__roots").await, "file:///mine");
    within(
        "set own roots",
        host.set_server_roots("own", vec![root("file:///c")]),
    )
    .await;
    assert_eq!(ask("own__roots").await, "file:///c");
    within("shutdown", host.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_given_up_after_its_own_timeout() {
    let alpha = named("alpha");
    let (_a, a) = serve(&alpha).await;
    // Connections are accepted (by the kernel) and never answered.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let mut mute = ServerConfig::http("mute", url(silent.local_addr().expect("its address")));
    mute.timeout = Some(Duration::from_millis(300));
    let began = tokio::time::Instant::now();
    // The host's own timeout is long: the entry's applies.
    let host = Host::builder(config(vec![mute, ServerConfig::http("alpha", url(a))]))
        .connect_timeout(Duration::from_secs(60))
        .backoff(Duration::from_secs(60), Duration::from_secs(60))
        .health_check(None)
        .start();
    let host = within("start", host).await;
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(state_of(&host, "alpha"), ServerState::Ready);
    match state_of(&host, "mute") {
        ServerState::Reconnecting { attempt: 1, error } => {
            assert!(error.contains("within"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    within("shutdown", host.shutdown()).await;
    drop(silent);
}
