//! The gateway (feature `gateway`): a host of in-process modelctx servers over Streamable HTTP,
//! served as one MCP server, driven by a modelctx client in both eras. Every wait is on an event
//! with a timeout, never a sleep.
#![cfg(feature = "gateway")]

use std::future::Future;
use std::time::Duration;

use modelctx_client::{
    Client, CompletionRef, Elicitation, Elicited, JsonObject, LogLevel, ProtocolVersion,
    ServerNotification,
};
use modelctx_host::gateway::Gateway;
use modelctx_host::model::ToolAnnotations;
use modelctx_host::{Host, HostConfig, ServerConfig};
use modelctx_server::{
    Context, HttpConfig, NoArgs, Prompt, PromptMessage, ReadRequest, Resource, ResourceContents,
    RunningServer, Server, Tool,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const STEP: Duration = Duration::from_secs(15);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no result within {STEP:?}"))
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

async fn serve(server: &Server) -> RunningServer {
    server
        .serve_http("127.0.0.1:0", HttpConfig::default())
        .await
        .expect("a local port")
}

fn url(running: &RunningServer) -> String {
    format!("http://{}/mcp", running.local_addr())
}

/// A backend: a tool that logs, one that waits for its cancellation (telling `cancelled`), one
/// that asks the user, a prompt with completions, and a resource.
fn backend(cancelled: mpsc::Sender<()>) -> Server {
    let chatty = |context: Context, _: NoArgs| async move {
        context
            .log(LogLevel::Warning, Some("chat"), json!("careful"))
            .await;
        "said"
    };
    let slow = move |context: Context, _: NoArgs| {
        let cancelled = cancelled.clone();
        async move {
            context.cancelled().cancelled().await;
            let _ = cancelled.send(()).await;
            "never seen"
        }
    };
    let ask = |context: Context, _: NoArgs| async move {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        match context.elicit("Your name?", schema).await {
            Ok(answer) => format!("hello {}", answer.content.unwrap_or_default()["name"]),
            Err(e) => format!("no answer: {e}"),
        }
    };
    let greet = Prompt::with_arguments(
        "greet",
        vec![("who".into(), None, true)],
        |args: Value| async move {
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
    Server::builder("backend", "1.0.0")
        .tool(Tool::new("chatty", chatty).annotations(read_only()))
        .tool(Tool::new("slow", slow).annotations(read_only()))
        .tool(Tool::new("ask", ask).annotations(read_only()))
        .prompt(greet)
        .resource(Resource::new(
            "mem://b/news",
            "news",
            |request: ReadRequest| async move { ResourceContents::text(request.uri, "none yet") },
        ))
        .build()
}

/// A gateway of `servers` served over HTTP; the host, the gateway and its URL.
async fn gateway(servers: Vec<ServerConfig>) -> (Host, Gateway, RunningServer) {
    gateway_with(servers, |host| host).await
}

/// [`gateway`] with its host's builder given to `shape` first.
async fn gateway_with(
    servers: Vec<ServerConfig>,
    shape: impl FnOnce(modelctx_host::HostBuilder) -> modelctx_host::HostBuilder,
) -> (Host, Gateway, RunningServer) {
    let mut config = HostConfig::default();
    config.servers = servers;
    let gateway = Gateway::builder("gateway", "1.0.0");
    let host = shape(Host::builder(config).connect_timeout(Duration::from_secs(5)));
    let host = within("start", gateway.route_input(host).start()).await;
    let gateway = gateway.build(host.clone());
    let running = serve(gateway.server()).await;
    (host, gateway, running)
}

/// A model's text answer.
fn sampled(text: String) -> modelctx_host::model::CreateMessageResult {
    use modelctx_host::model;
    model::CreateMessageResult {
        meta: None,
        content: model::CreateMessageResultContent::TextContent(model::TextContent {
            meta: None,
            annotations: None,
            text,
        }),
        model: "test-model".into(),
        role: model::Role::Assistant,
        stop_reason: None,
        extra: JsonObject::new(),
    }
}

/// `builder`'s client connected to the gateway served as `front`.
async fn connect(builder: modelctx_client::ClientBuilder, front: &RunningServer) -> Client {
    within("connect", builder.connect_http(&url(front)))
        .await
        .expect("connects")
}

fn client(legacy: bool) -> modelctx_client::ClientBuilder {
    let builder = Client::builder("gateway-test", "1.0.0")
        .on_elicitation(|elicitation| async move {
            match elicitation {
                Elicitation::Form { .. } => {
                    let mut content = JsonObject::new();
                    content.insert("name".into(), Value::from("Ada"));
                    Ok(Elicited::accept(content))
                }
                _ => Ok(Elicited::decline()),
            }
        })
        .request_timeout(Some(STEP));
    if legacy {
        builder.protocol_version(ProtocolVersion::V2025_11_25)
    } else {
        builder
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_list_change_reaches_the_gateways_clients() {
    let (tx, _rx) = mpsc::channel(1);
    let back = backend(tx);
    let running = serve(&back).await;
    let (host, _gateway, front) = gateway(vec![ServerConfig::http("b", url(&running))]).await;
    let client = connect(client(true), &front).await;
    let mut notes = client.notifications();
    within("listening", client.listening())
        .await
        .expect("listening");
    let tools = client.list_all_tools().await.expect("tools");
    assert!(tools.iter().any(|t| t.name == "b__chatty"), "{tools:?}");

    back.add_tool(Tool::new("fresh", |_: NoArgs| async { "new" }).annotations(read_only()))
        .expect("added");
    within("tools list_changed", async {
        loop {
            if let Ok(ServerNotification::ToolsListChanged) = notes.recv().await {
                return;
            }
        }
    })
    .await;
    let fresh = within("the new tool", async {
        loop {
            let tools = client.list_all_tools().await.expect("tools");
            if tools.iter().any(|t| t.name == "b__fresh") {
                return client.call_tool("b__fresh", json!({})).await;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("called");
    assert_eq!(fresh.text(), "new");

    back.remove_tool("fresh");
    within("the tool gone", async {
        loop {
            let tools = client.list_all_tools().await.expect("tools");
            if !tools.iter().any(|t| t.name == "b__fresh") {
                return;
            }
            let _ = notes.recv().await;
        }
    })
    .await;
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_logs_elicitation_completion_and_updates_pass_through() {
    for legacy in [true, false] {
        let (tx, mut cancelled) = mpsc::channel(1);
        let back = backend(tx);
        let running = serve(&back).await;
        let (host, _gateway, front) = gateway(vec![ServerConfig::http("b", url(&running))]).await;
        let client = connect(client(legacy), &front).await;
        let mut notes = client.notifications();

        // A log message of the server during a call reaches the client that made it.
        client.set_log_level(LogLevel::Info).await.expect("level");
        let said = client
            .call_tool("b__chatty", json!({}))
            .await
            .expect("chatty");
        assert_eq!(said.text(), "said");
        let logged = within("the log message", async {
            loop {
                if let Ok(ServerNotification::Log(message)) = notes.recv().await {
                    return message;
                }
            }
        })
        .await;
        assert_eq!(logged.data, json!("careful"), "legacy: {legacy}");
        assert_eq!(logged.level, LogLevel::Warning);

        // The server's elicitation during a call is asked of the gateway's client.
        let asked = client.call_tool("b__ask", json!({})).await.expect("ask");
        assert_eq!(asked.text(), "hello \"Ada\"", "legacy: {legacy}");

        // Completions come from the server that owns the prompt.
        let completion = client
            .complete(
                &CompletionRef::Prompt("b__greet".into()),
                "who",
                "a",
                &Default::default(),
            )
            .await
            .expect("completion");
        assert_eq!(completion.values, ["ada", "alan"]);

        // A call the client drops is cancelled on the server.
        let call = client.call_tool("b__slow", json!({}));
        let _ = tokio::time::timeout(Duration::from_millis(300), call).await;
        within("the server's cancellation", cancelled.recv())
            .await
            .expect("the slow tool saw its cancellation");

        // A subscription reaches the server; its update reaches the client.
        if legacy {
            client
                .subscribe_resource("mem://b/news")
                .await
                .expect("subscribed");
            within("the host's subscription", async {
                loop {
                    back.notify_resource_updated("mem://b/news");
                    let update = tokio::time::timeout(Duration::from_millis(200), async {
                        loop {
                            if let Ok(ServerNotification::ResourceUpdated { uri }) =
                                notes.recv().await
                            {
                                return uri;
                            }
                        }
                    })
                    .await;
                    if let Ok(uri) = update {
                        assert_eq!(uri, "mem://b/news");
                        return;
                    }
                }
            })
            .await;
        }
        client.close().await;
        host.shutdown().await;
    }
}

/// A backend whose tools ask under keys of their own: `roots` lists the roots, `named` asks
/// for a name under `user_name` and for a greeting under `greeting`.
fn asking_backend() -> Server {
    let roots = |context: Context, _: NoArgs| async move {
        match context.keyed("client_roots").list_roots().await {
            Ok(listed) => {
                let uris: Vec<_> = listed.roots.iter().map(|r| r.uri.clone()).collect();
                uris.join(",")
            }
            Err(e) => format!("no roots: {e}"),
        }
    };
    let named = |context: Context, _: NoArgs| async move {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let name = match context
            .keyed("user_name")
            .elicit("Your name?", schema)
            .await
        {
            Ok(answer) => answer.content.unwrap_or_default()["name"].clone(),
            Err(e) => return format!("no name: {e}"),
        };
        let params = modelctx_server::sampling_request("A greeting", 50);
        match context.keyed("greeting").sample(params).await {
            Ok(answer) => match answer.content {
                modelctx_host::model::CreateMessageResultContent::TextContent(text) => {
                    format!("{name} {}", text.text)
                }
                other => format!("{other:?}"),
            },
            Err(e) => format!("no greeting: {e}"),
        }
    };
    Server::builder("asking", "1.0.0")
        .tool(Tool::new("roots", roots).annotations(read_only()))
        .tool(Tool::new("named", named).annotations(read_only()))
        .build()
}

/// A root with this URI.
fn root(uri: &str) -> modelctx_host::model::Root {
    modelctx_host::model::Root {
        meta: None,
        name: None,
        uri: uri.into(),
    }
}

/// A client of the gateway that answers each question with the key it was asked under
/// (`-` without one), and lists `file:///client` as its roots.
fn keyed_client(legacy: bool) -> modelctx_client::ClientBuilder {
    let key = || modelctx_client::input_key().unwrap_or_else(|| "-".into());
    let builder = Client::builder("gateway-test", "1.0.0")
        .on_elicitation(move |_| {
            let mut content = JsonObject::new();
            content.insert("name".into(), Value::from(key()));
            std::future::ready(Ok(Elicited::accept(content)))
        })
        .on_sampling(move |_| std::future::ready(Ok(sampled(key()))))
        .on_roots(|| std::future::ready(Ok(vec![root("file:///client")])))
        .request_timeout(Some(STEP));
    if legacy {
        builder.protocol_version(ProtocolVersion::V2025_11_25)
    } else {
        builder
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_roots_request_is_answered_with_the_calling_clients_roots() {
    let back = asking_backend();
    let running = serve(&back).await;
    let servers = vec![ServerConfig::http("b", url(&running))];
    // The host has roots of its own: the client's are answered instead during its call.
    let (host, _gateway, front) =
        gateway_with(servers, |host| host.roots(vec![root("file:///host")])).await;
    for legacy in [true, false] {
        let client = connect(keyed_client(legacy), &front).await;
        let listed = client
            .call_tool("b__roots", json!({}))
            .await
            .expect("roots");
        assert_eq!(listed.text(), "file:///client", "legacy: {legacy}");
    }
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_questions_keep_their_keys_through_the_gateway() {
    let back = asking_backend();
    let running = serve(&back).await;
    let (host, _gateway, front) = gateway(vec![ServerConfig::http("b", url(&running))]).await;
    // A modern client sees the backend's keys; a legacy one gets requests, which have none.
    for (legacy, expected) in [(false, "\"user_name\" greeting"), (true, "\"-\" -")] {
        let client = connect(keyed_client(legacy), &front).await;
        let named = client
            .call_tool("b__named", json!({}))
            .await
            .expect("named");
        assert_eq!(named.text(), expected, "legacy: {legacy}");
    }
    host.shutdown().await;
}

/// A policy that takes its time over sampling requests (a person reading the prompt): the
/// backend's sampling question reaches the gateway well after its other questions of the round.
struct SlowSampling;

impl modelctx_host::Policy for SlowSampling {
    fn approve_tool_call<'a>(
        &'a self,
        _: &'a modelctx_host::policy::ToolCall<'a>,
    ) -> modelctx_host::policy::BoxFuture<'a, modelctx_host::Decision> {
        Box::pin(std::future::ready(modelctx_host::Decision::Allow))
    }

    fn approve_sampling<'a>(
        &'a self,
        _: &'a mut modelctx_host::policy::SamplingRequest,
    ) -> modelctx_host::policy::BoxFuture<'a, modelctx_host::Decision> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            modelctx_host::Decision::Allow
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_questions_reaches_the_gateways_client_as_one_round() {
    // The backend asks three questions at once (a round of three `inputRequests`).
    let at_once = |context: Context, _: NoArgs| async move {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let (name, greeting, roots) = tokio::join!(
            context.keyed("user_name").elicit("Your name?", schema),
            context
                .keyed("greeting")
                .sample(modelctx_server::sampling_request("A greeting", 50)),
            context.keyed("client_roots").list_roots(),
        );
        match (name, greeting, roots) {
            (Ok(name), Ok(_), Ok(roots)) => format!(
                "{} {}",
                name.content.unwrap_or_default()["name"],
                roots.roots.len()
            ),
            other => format!("{other:?}"),
        }
    };
    let back = Server::builder("asking", "1.0.0")
        .tool(Tool::new("at_once", at_once).annotations(read_only()))
        .build();
    let running = serve(&back).await;
    let servers = vec![ServerConfig::http("b", url(&running))];
    let (host, _gateway, front) = gateway_with(servers, |host| host.policy(SlowSampling)).await;
    // The gateway's modern client notes the round of each question it answers.
    let rounds = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let noted = rounds.clone();
    let note = move || {
        let round = modelctx_client::input_round().expect("a modern round");
        noted.lock().unwrap().push((round.id(), round.len()));
    };
    let (on_elicit, on_sample, on_roots) = (note.clone(), note.clone(), note);
    let client = Client::builder("gateway-test", "1.0.0")
        .on_elicitation(move |_| {
            on_elicit();
            let mut content = JsonObject::new();
            content.insert("name".into(), Value::from("Ada"));
            std::future::ready(Ok(Elicited::accept(content)))
        })
        .on_sampling(move |_| {
            on_sample();
            std::future::ready(Ok(sampled("hello".into())))
        })
        .on_roots(move || {
            on_roots();
            std::future::ready(Ok(vec![root("file:///client")]))
        })
        .request_timeout(Some(STEP));
    let client = connect(client, &front).await;
    let answer = within("call", client.call_tool("b__at_once", json!({})))
        .await
        .expect("at_once");
    assert_eq!(answer.text(), "\"Ada\" 1");
    // One round of three, not the quick questions first and the slow one after.
    let rounds = rounds.lock().unwrap().clone();
    assert_eq!(rounds.len(), 3, "{rounds:?}");
    assert!(
        rounds
            .iter()
            .all(|&(id, len)| id == rounds[0].0 && len == 3),
        "{rounds:?}"
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_server_sees_the_capabilities_of_the_gateways_client_calling() {
    // The backend says which client capabilities its request declared.
    let caps = |context: Context, _: NoArgs| async move {
        let mut names: Vec<String> = context
            .client_capabilities()
            .map(|caps| caps.keys().cloned().collect())
            .unwrap_or_default();
        names.sort();
        names.join(",")
    };
    // And one that needs sampling.
    let sample = |context: Context, _: NoArgs| async move {
        let asked = context
            .sample(modelctx_server::sampling_request("Hi", 10))
            .await;
        asked.map(|_| "sampled")
    };
    let back = Server::builder("caps", "1.0.0")
        .tool(Tool::new("caps", caps).annotations(read_only()))
        .tool(Tool::new("sample", sample).annotations(read_only()))
        .build();
    let running = serve(&back).await;
    // The host declares sampling, elicitation and roots (the gateway routes all three).
    let (host, _gateway, front) = gateway(vec![ServerConfig::http("b", url(&running))]).await;
    for legacy in [false, true] {
        // A client that can only sample.
        let client = Client::builder("gateway-test", "1.0.0")
            .on_sampling(|_| async { Err(modelctx_client::InputError::new("no model")) })
            .request_timeout(Some(STEP));
        let client = if legacy {
            client.protocol_version(ProtocolVersion::V2025_11_25)
        } else {
            client
        };
        let client = connect(client, &front).await;
        let seen = within("call", client.call_tool("b__caps", json!({})))
            .await
            .expect("caps");
        assert_eq!(seen.text(), "sampling", "legacy: {legacy}");
    }
    // A modern client without sampling: the server refuses the call with -32021 (it saw that
    // client's capabilities), and so does the gateway.
    let client = Client::builder("gateway-test", "1.0.0")
        .on_roots(|| async { Ok(Vec::new()) })
        .request_timeout(Some(STEP));
    let client = connect(client, &front).await;
    let refused = within("call", client.call_tool("b__sample", json!({}))).await;
    match refused {
        Err(modelctx_client::Error::Remote(error)) => {
            assert_eq!(error.code.0, -32021, "{error:?}");
            let data: Value = error.data_as().unwrap().unwrap();
            assert_eq!(data["requiredCapabilities"], json!({"sampling": {}}));
        }
        other => panic!("{other:?}"),
    }
    host.shutdown().await;
}

/// The -32021 a backend answers with: a capability whose name has dots (an extension's), and a
/// message of the server's own.
fn needs_extension() -> modelctx_server::ErrorObject {
    modelctx_server::ErrorObject::new(
        modelctx_server::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        "this needs the io.example/ext extension",
    )
    .with_data(&json!({"requiredCapabilities": {"extensions": {"io.example/ext": {}}}}))
    .unwrap()
}

/// A prompt's answer of [`needs_extension`].
struct Refused;

impl modelctx_server::IntoPromptResult for Refused {
    fn into_messages(self) -> Result<Vec<PromptMessage>, modelctx_server::ErrorObject> {
        Err(needs_extension())
    }
}

/// `what`'s answer is the backend's -32021 of [`needs_extension`], as it came.
fn assert_passed_on<T: std::fmt::Debug>(what: &str, answer: Result<T, modelctx_client::Error>) {
    match answer {
        Err(modelctx_client::Error::Remote(error)) => {
            assert_eq!(error.code.0, -32021, "{what}: {error:?}");
            assert_eq!(error.message, needs_extension().message, "{what}");
            let data: Value = error.data_as().unwrap().unwrap();
            assert_eq!(
                data,
                json!({"requiredCapabilities": {"extensions": {"io.example/ext": {}}}}),
                "{what}"
            );
        }
        other => panic!("{what}: expected -32021, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_minus_32021_reaches_the_gateways_client_as_it_came() {
    let back = Server::builder("ext", "1.0.0")
        .tool(
            Tool::new("needs", |_: NoArgs| async {
                modelctx_server::ToolOutput::protocol_error(needs_extension())
            })
            .annotations(read_only()),
        )
        .prompt(Prompt::new("needs", |_: NoArgs| async { Refused }))
        .resource(Resource::new(
            "mem://needs",
            "needs",
            |_: ReadRequest| async {
                Err::<ResourceContents, _>(modelctx_server::ResourceError::Protocol(
                    needs_extension(),
                ))
            },
        ))
        .build();
    let running = serve(&back).await;
    let (host, _gateway, front) = gateway(vec![ServerConfig::http("b", url(&running))]).await;
    let client = connect(client(false), &front).await;
    let called = within("call", client.call_tool("b__needs", json!({}))).await;
    assert_passed_on("the call", called);
    let got = within("get", client.get_prompt("b__needs", &[])).await;
    assert_passed_on("the prompt", got);
    let read = within("read", client.read_resource("mem://needs")).await;
    assert_passed_on("the read", read);
    host.shutdown().await;
}

/// A backend whose tools run as tasks (the tasks extension, 2026-07-28): `build` only as a task,
/// `confirm` asks the user as a task, `hold` waits until it is stopped (telling `cancelled`),
/// `broken` fails with a JSON-RPC error of its own, `quick` answers at once, and `named` asks
/// a name by a round trip of the call before it becomes a task.
fn tasks_backend(cancelled: mpsc::Sender<()>) -> Server {
    use modelctx_server::tasks::TaskSupport;
    let build = |context: Context, _: NoArgs| async move {
        let _ = context.progress(1.0, Some(2.0), Some("building")).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        "built"
    };
    let confirm = |context: Context, _: NoArgs| async move {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        match context.keyed("confirm").elicit("Sure?", schema).await {
            Ok(answer) => format!("confirmed {}", answer.content.unwrap_or_default()["name"]),
            Err(e) => format!("no answer: {e}"),
        }
    };
    // A task's handler is dropped where it waits when its task is cancelled: that is when it
    // tells.
    struct Told(mpsc::Sender<()>);
    impl Drop for Told {
        fn drop(&mut self) {
            let _ = self.0.try_send(());
        }
    }
    let hold = move |context: Context, _: NoArgs| {
        let told = Told(cancelled.clone());
        async move {
            let _told = told;
            context.cancelled().cancelled().await;
            "never seen"
        }
    };
    let broken = |_: NoArgs| async {
        modelctx_server::ToolOutput::protocol_error(modelctx_server::ErrorObject::new(
            modelctx_server::ErrorCode(-32050),
            "the backend broke",
        ))
    };
    let named = |context: Context, _: NoArgs| async move {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let answer = match context
            .keyed("user_name")
            .elicit("Your name?", schema)
            .await
        {
            Ok(answer) => answer,
            Err(e) => return format!("no name: {e}"),
        };
        if let Err(e) = context.detach().await {
            return format!("no task: {e}");
        }
        format!(
            "hello {} in task {}",
            answer.content.unwrap_or_default()["name"],
            context.task_id().is_some()
        )
    };
    let mut settings = modelctx_server::Settings::default();
    settings.tasks.poll_interval = Duration::from_millis(20);
    Server::builder("tasks", "1.0.0")
        .tool(
            Tool::new("build", build)
                .annotations(read_only())
                .task_support(TaskSupport::Required),
        )
        .tool(
            Tool::new("confirm", confirm)
                .annotations(read_only())
                .task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::new("hold", hold)
                .annotations(read_only())
                .task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::new("broken", broken)
                .annotations(read_only())
                .task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::new("quick", |_: NoArgs| async { "quick" })
                .annotations(read_only())
                .task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::new("named", named)
                .annotations(read_only())
                .task_support(TaskSupport::Required)
                .task_on_detach(),
        )
        .settings(settings)
        .build()
}

/// Polls fast: the tests wait on events, not on a server's suggested interval.
fn fast() -> modelctx_client::TaskOptions {
    modelctx_client::TaskOptions::new()
        .poll_bounds(Duration::from_millis(10), Duration::from_millis(100))
}

/// Waits until neither server runs a handler as a task.
async fn no_task_left(servers: &[&Server]) {
    within("no task left running", async {
        while servers.iter().any(|s| s.load().tasks > 0) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// A gateway over [`tasks_backend`] (its server `b`), served over HTTP.
struct TaskGateway {
    /// The backend.
    back: Server,
    /// The backend served (kept for the test's length).
    _running: RunningServer,
    host: Host,
    gateway: Gateway,
    /// The gateway served.
    front: RunningServer,
    /// Told when the backend's `hold` is stopped.
    cancelled: mpsc::Receiver<()>,
}

async fn task_gateway() -> TaskGateway {
    let (tx, cancelled) = mpsc::channel(1);
    let back = tasks_backend(tx);
    let running = serve(&back).await;
    let (host, gateway, front) = gateway(vec![ServerConfig::http("b", url(&running))]).await;
    TaskGateway {
        back,
        _running: running,
        host,
        gateway,
        front,
        cancelled,
    }
}

/// `client` running `tool` (no arguments) as a task: its handle.
async fn start_task(client: &Client, tool: &str) -> modelctx_client::TaskHandle {
    within(tool, client.call_tool_as_task(tool, json!({}), fast()))
        .await
        .expect("a task")
}

/// Waits until `back` runs a handler as a task.
async fn a_task_running(back: &Server) {
    within("the server's task running", async {
        while back.load().tasks == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_task_is_the_gateways_task_from_result_to_cancellation() {
    let mut t = task_gateway().await;
    let keys = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = keys.clone();
    let client = Client::builder("gateway-test", "1.0.0")
        .on_elicitation(move |_| {
            seen.lock()
                .unwrap()
                .push(modelctx_client::input_key().unwrap_or_default());
            let mut content = JsonObject::new();
            content.insert("name".into(), Value::from("Ada"));
            std::future::ready(Ok(Elicited::accept(content)))
        })
        .request_timeout(Some(STEP));
    let client = connect(client, &t.front).await;

    // A tool its server runs only as a task: the gateway's call is a task too, and completes
    // with the server's result.
    let task = start_task(&client, "b__build").await;
    assert!(task.id().is_some(), "the gateway made a task");
    let built = within("build's end", task.wait()).await.expect("built");
    assert_eq!(built.text(), "built");

    // The server's task asks: the question reaches the gateway's client under the server's
    // key, the answer goes back.
    let task = start_task(&client, "b__confirm").await;
    assert!(task.id().is_some());
    let confirmed = within("confirm's end", task.wait())
        .await
        .expect("confirmed");
    assert_eq!(confirmed.text(), "confirmed \"Ada\"");
    assert_eq!(*keys.lock().unwrap(), ["confirm"]);

    // A question before the server's task exists is a round trip of the gateway's call, which
    // becomes a task when the server's does.
    let task = start_task(&client, "b__named").await;
    assert!(task.id().is_some(), "made a task after the round trip");
    let named = within("named's end", task.wait()).await.expect("named");
    assert_eq!(named.text(), "hello \"Ada\" in task true");
    assert_eq!(*keys.lock().unwrap(), ["confirm", "user_name"]);

    // A server's task that fails fails the gateway's, with the server's error.
    let task = start_task(&client, "b__broken").await;
    match within("broken's end", task.wait()).await {
        Err(modelctx_client::TaskError::Failed { error, .. }) => {
            assert_eq!(error.code.0, -32050, "{error:?}");
            assert_eq!(error.message, "the backend broke");
        }
        other => panic!("expected a failed task, got {other:?}"),
    }

    // Cancelling the gateway's task cancels the server's.
    let task = start_task(&client, "b__hold").await;
    a_task_running(&t.back).await;
    within("cancel", task.cancel()).await.expect("cancelled");
    within("the server's cancellation", t.cancelled.recv())
        .await
        .expect("the server's task was stopped");
    let status = within("status", task.status()).await.expect("status");
    assert_eq!(status.status, modelctx_host::model::TaskStatus::Cancelled);
    no_task_left(&[&t.back, t.gateway.server()]).await;
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_extension_gets_plain_calls_and_minus_32021_for_a_task_only_tool() {
    let t = task_gateway().await;
    let client = connect(client(false), &t.front).await;
    // A plain call (no extension declared) of a tool that runs as a task when it can.
    let quick = client
        .call_tool("b__quick", json!({}))
        .await
        .expect("quick");
    assert_eq!(quick.text(), "quick");
    assert_eq!(quick.is_error, None);
    // One that runs only as a task is refused as its server refuses it: -32021 naming the
    // extension.
    match client.call_tool("b__build", json!({})).await {
        Err(modelctx_client::Error::Remote(error)) => {
            assert_eq!(error.code.0, -32021, "{error:?}");
            let data: Value = error.data_as().unwrap().unwrap();
            assert_eq!(
                data["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
                json!({}),
                "{data}"
            );
        }
        other => panic!("expected -32021, got {other:?}"),
    }
    no_task_left(&[&t.back, t.gateway.server()]).await;
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_11_25_task_augmented_call_runs_the_servers_task() {
    let t = task_gateway().await;
    let client = connect(client(true), &t.front).await;
    let tools = client.list_all_tools().await.expect("tools");
    let build = tools.iter().find(|t| t.name == "b__build").expect("listed");
    assert!(
        build
            .execution
            .as_ref()
            .and_then(|e| e.task_support)
            .is_some(),
        "{build:?}"
    );
    let task = start_task(&client, "b__build").await;
    assert!(task.id().is_some());
    let built = within("build's end", task.result()).await.expect("built");
    assert_eq!(built.text(), "built");
    // The server's question, asked during the legacy task, is answered by the legacy client.
    let task = start_task(&client, "b__confirm").await;
    let confirmed = within("confirm's end", task.result())
        .await
        .expect("confirmed");
    assert_eq!(confirmed.text(), "confirmed \"Ada\"");
    no_task_left(&[&t.back, t.gateway.server()]).await;
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_gateway_cancels_the_servers_tasks_it_follows() {
    let mut t = task_gateway().await;
    let client = connect(client(false), &t.front).await;
    let task = start_task(&client, "b__hold").await;
    assert!(task.id().is_some());
    a_task_running(&t.back).await;
    let server = t.gateway.server().clone();
    drop(t.gateway);
    within("the server's task stopped", t.cancelled.recv())
        .await
        .expect("the server's task was stopped");
    // The gateway's task ends too, saying why.
    let ended = within("the gateway task's end", task.wait())
        .await
        .expect("a result");
    assert_eq!(ended.text(), "the gateway has stopped");
    assert_eq!(ended.is_error, Some(true));
    no_task_left(&[&t.back, &server]).await;
    t.host.shutdown().await;
}

/// A backend serving the skill `greet` (a tree in memory, with a script), described as
/// `description`, and, when `reports`, the skill `reports/daily` built in code.
fn skills_backend(description: &str, reports: bool) -> Server {
    let skill_md = format!("---\nname: greet\ndescription: {description}\n---\nSay hello.\n");
    let mut builder = Server::builder("skills", "1.0.0").skill_files([
        ("greet/SKILL.md", skill_md.into_bytes()),
        ("greet/scripts/run.sh", b"echo hello\n".to_vec()),
    ]);
    if reports {
        builder = builder.skill(
            modelctx_server::DynamicSkill::new("reports/daily", "Today's report")
                .body(|| async { "Read data/today.csv.\n".to_owned() })
                .file("data/today.csv", || async { "region,total\n".to_owned() }),
        );
    }
    builder.build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skills_of_the_servers_are_listed_got_and_read_through_the_gateway() {
    let first = skills_backend("Greets the user", false);
    let second = skills_backend("Greets the user twice", true);
    let (a, b) = (serve(&first).await, serve(&second).await);
    let servers = vec![
        ServerConfig::http("a", url(&a)),
        ServerConfig::http("b", url(&b)),
    ];
    let (host, _gateway, front) = gateway(servers).await;
    for legacy in [true, false] {
        let client = connect(client(legacy), &front).await;
        let skills = within("list", client.list_skills()).await.expect("listed");
        let uris: Vec<&str> = skills.iter().map(|s| s.uri.as_str()).collect();
        assert_eq!(
            uris,
            ["skill://greet/SKILL.md", "skill://reports/daily/SKILL.md"]
        );
        // The first server in config order keeps a URI both serve.
        assert_eq!(skills[0].description(), Some("Greets the user"));

        let greet = within("get", client.get_skill("skill://greet/SKILL.md"))
            .await
            .expect("got");
        assert_eq!(greet, skills[0]);
        let loaded = within("load", client.load_skill(&greet))
            .await
            .expect("loaded");
        assert!(loaded.verified);
        assert!(loaded.text().expect("text").ends_with("Say hello.\n"));
        let script = within(
            "a file",
            client.read_skill_file(&greet, "skill://greet/scripts/run.sh"),
        )
        .await
        .expect("read");
        assert_eq!(script.text(), Some("echo hello\n"));

        // The second server's skill, built in code: got from it, read from it.
        let daily = within("get", client.get_skill("skill://reports/daily/SKILL.md"))
            .await
            .expect("got");
        assert_eq!(daily.description(), Some("Today's report"));
        let loaded = within("load", client.load_skill(&daily))
            .await
            .expect("loaded");
        assert!(
            loaded
                .text()
                .expect("text")
                .ends_with("Read data/today.csv.\n")
        );

        // Directories, from the server that serves them.
        let children = within("a directory", client.read_directory("skill://greet", None))
            .await
            .expect("read");
        let names: Vec<&str> = children
            .resources
            .iter()
            .filter_map(|c| c.get("uri").and_then(Value::as_str))
            .collect();
        assert_eq!(
            names,
            ["skill://greet/SKILL.md", "skill://greet/scripts"],
            "{children:?}"
        );
        let children = within(
            "b directory",
            client.read_directory("skill://reports", None),
        )
        .await
        .expect("read");
        assert_eq!(
            children.resources[0]["uri"],
            json!("skill://reports/daily"),
            "{children:?}"
        );

        // What no server has is refused as a server would.
        let missing = within("missing", client.get_skill("skill://nope/SKILL.md")).await;
        assert!(
            matches!(&missing, Err(modelctx_client::Error::Remote(e)) if e.code == modelctx_types::ErrorCode::INVALID_PARAMS),
            "{missing:?}"
        );
        let missing = within("missing dir", client.read_directory("skill://nope", None)).await;
        assert!(
            matches!(&missing, Err(modelctx_client::Error::Remote(e)) if e.code == modelctx_types::ErrorCode::INVALID_PARAMS),
            "{missing:?}"
        );
    }
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_of_servers_without_skills_does_not_declare_the_extension() {
    let (tx, _rx) = mpsc::channel(1);
    let back = backend(tx);
    let running = serve(&back).await;
    let (host, _gateway, front) = gateway(vec![ServerConfig::http("b", url(&running))]).await;
    let client = connect(client(false), &front).await;
    let listed = within("list", client.list_skills()).await;
    assert!(
        matches!(listed, Err(modelctx_client::Error::NotAvailable(_))),
        "{listed:?}"
    );
    host.shutdown().await;
}
