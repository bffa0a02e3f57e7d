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
    let client = within("connect", client(true).connect_http(&url(&front)))
        .await
        .expect("connects");
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
        let client = within("connect", client(legacy).connect_http(&url(&front)))
            .await
            .expect("connects");
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
        let client = within("connect", keyed_client(legacy).connect_http(&url(&front)))
            .await
            .expect("connects");
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
        let client = within("connect", keyed_client(legacy).connect_http(&url(&front)))
            .await
            .expect("connects");
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
    let client = within("connect", client.connect_http(&url(&front)))
        .await
        .expect("connects");
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
        let client = within("connect", client.connect_http(&url(&front)))
            .await
            .expect("connects");
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
    let client = within("connect", client.connect_http(&url(&front)))
        .await
        .expect("connects");
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
