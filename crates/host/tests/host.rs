//! The host core against in-process modelctx servers over Streamable HTTP: aggregation,
//! routing, servers that never start, go away and come back, list changes, the policy,
//! cancellation and shutdown. Every wait is on an event with a timeout, never a sleep.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modelctx_host::client::CallOptions;
use modelctx_host::model::{
    CallToolResult, ContentBlock, EmbeddedResourceResource, ToolAnnotations,
};
use modelctx_host::{
    Host, HostConfig, HostError, HostEvent, ServerConfig, ServerState, TableSizes,
};
use modelctx_server::{
    Context, HttpConfig, NoArgs, ReadRequest, Resource, ResourceContents, RunningServer, Server,
    Tool,
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

/// A server named `name` whose read-only tool `echo` answers its name.
fn named(name: &str) -> Server {
    let me = name.to_owned();
    let uri = format!("mem://{name}/readme");
    let text = format!("the readme of {name}");
    Server::builder(name, "1.0.0")
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
    let alpha = named("alpha");
    let beta = named("beta");
    let (_b, b) = serve(&beta).await;
    let (mut running, addr) = serve(&alpha).await;
    let host = start(vec![
        ServerConfig::http("alpha", url(addr)),
        ServerConfig::http("beta", url(b)),
    ])
    .await;
    let mut events = host.changes();
    let before: TableSizes = host.table_sizes();
    assert_eq!(before.clients, 2);
    assert_eq!(before.supervisors, 2);
    assert_eq!(before.tools, 2);

    for round in 0..3 {
        // The server goes away: its tools leave the aggregate.
        running.shutdown(Duration::ZERO).await;
        event(&mut events, "alpha reconnecting", is_state("alpha", false)).await;
        assert_eq!(tool_names(&host), ["beta__echo"], "round {round}");
        match host
            .call_tool("alpha__echo", Default::default(), CallOptions::new())
            .await
        {
            Err(HostError::UnknownTool(_) | HostError::NotConnected { .. }) => {}
            other => panic!("round {round}: {other:?}"),
        }

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
        // Nothing grows across reconnects.
        assert_eq!(host.table_sizes(), before, "round {round}");
    }
    within("shutdown", host.shutdown()).await;
    running.shutdown(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_change_on_one_server_updates_the_aggregate() {
    let alpha = named("alpha");
    let beta = named("beta");
    let (_a, a) = serve(&alpha).await;
    let (_b, b) = serve(&beta).await;
    let host = start(vec![
        ServerConfig::http("alpha", url(a)),
        ServerConfig::http("beta", url(b)),
    ])
    .await;
    let mut events = host.changes();
    // The server's notification may come before the host's listen stream is acknowledged: wait
    // for the client to be listening, as the host asks for list changes on connect.
    within("listening", host.client("beta").unwrap().listening())
        .await
        .expect("listening");

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
    let host = start(vec![
        ServerConfig::http("alpha", url(a)),
        ServerConfig::http("down", url(down)),
    ])
    .await;
    let client = host.client("alpha").expect("connected");
    let mut events = host.changes();

    let began = tokio::time::Instant::now();
    within("shutdown", host.shutdown()).await;
    assert!(began.elapsed() < Duration::from_secs(11));
    for status in host.servers() {
        assert_eq!(status.state, ServerState::Stopped, "{status:?}");
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
