//! The client facade against the server facade: every client feature, in both eras, over
//! in-memory channels, stdio (a child process) and Streamable HTTP.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelctx_client::{
    CallOptions, Client, ClientBuilder, CloseReason, CompletionRef, Elicitation, Elicited, Era,
    Error, LogLevel, ProtocolVersion, ServerCommand, ServerNotification, SessionError, model,
};
use modelctx_tests::client::{
    call_text, completions, connect_in_memory, expect_notification, sampled, serve_http,
};
use modelctx_tests::facade::client_server;
use modelctx_tests::http::within;
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Transport {
    Memory,
    Stdio,
    Http,
}

/// How the client finds the era.
#[derive(Debug, Clone, Copy)]
enum Pin {
    /// The probe (finds the modern era: the server speaks both).
    Probe,
    /// A legacy version, no probe.
    Legacy(ProtocolVersion),
}

impl Pin {
    /// The newest legacy version.
    const LEGACY: Pin = Pin::Legacy(ProtocolVersion::V2025_11_25);
    /// Each era, for the tests that run in both.
    const BOTH: [Pin; 2] = [Pin::Probe, Pin::LEGACY];
}

/// A client with every input handler, as a host would build it.
fn builder(pin: Pin) -> ClientBuilder {
    let builder = Client::builder("client-tests", "1.0.0")
        .on_elicitation(|elicitation| async move {
            match elicitation {
                Elicitation::Form { message, .. } if message == "Who?" => {
                    // The user filled one field and left the others empty.
                    let content = json!({"answer": "me", "name": ""});
                    Ok(Elicited::accept(content.as_object().cloned().unwrap()))
                }
                Elicitation::Form { .. } => Ok(Elicited::accept(
                    json!({"answer": "yes"}).as_object().cloned().unwrap(),
                )),
                _ => Ok(Elicited::decline()),
            }
        })
        .apply_elicitation_defaults()
        .on_sampling(|params| async move {
            let asked = match params.messages.first().map(|m| &m.content) {
                Some(model::CreateMessageResultContent::TextContent(t)) => t.text.clone(),
                other => format!("{other:?}"),
            };
            Ok(sampled(json!({
                "role": "assistant",
                "content": {"type": "text", "text": format!("{asked}!")},
                "model": "test-model",
            })))
        })
        .roots(vec![model::Root {
            meta: None,
            name: Some("src".into()),
            uri: "file:///src".into(),
        }]);
    match pin {
        Pin::Probe => builder,
        Pin::Legacy(version) => builder.protocol_version(version),
    }
}

/// The facade's server for these tests as a child process over stdio.
fn stdio_server() -> ServerCommand {
    ServerCommand::new(env!("CARGO_BIN_EXE_facade-stdio-server")).arg("--client-tests")
}

/// A running server for `transport`, and the client connected to it.
struct Setup {
    client: Client,
    _http: Option<modelctx_http::server::RunningServer>,
    in_process: bool,
}

async fn connect(transport: Transport, builder: ClientBuilder) -> Setup {
    match transport {
        Transport::Memory => {
            let client = connect_in_memory(&client_server(), builder).await;
            Setup {
                client,
                _http: None,
                in_process: true,
            }
        }
        Transport::Stdio => {
            let client = within("connect", builder.connect_stdio(stdio_server()))
                .await
                .expect("connected");
            Setup {
                client,
                _http: None,
                in_process: false,
            }
        }
        Transport::Http => {
            let (running, url) = serve_http(&client_server(), Default::default()).await;
            let client = within("connect", builder.connect_http(&url))
                .await
                .expect("connected");
            Setup {
                client,
                _http: Some(running),
                in_process: true,
            }
        }
    }
}

/// Every feature, on one connection.
async fn every_feature(transport: Transport, pin: Pin) {
    let setup = connect(transport, builder(pin)).await;
    let client = &setup.client;
    let modern = matches!(pin, Pin::Probe);
    assert_eq!(
        client.era(),
        Some(if modern { Era::Modern } else { Era::Legacy }),
        "{transport:?} {pin:?}"
    );
    if let Pin::Legacy(version) = pin {
        assert_eq!(client.protocol_version(), Some(version));
    }
    assert_eq!(client.server_info().unwrap().name, "facade");
    assert_eq!(client.instructions().as_deref(), Some("A server for tests"));
    let mut notifications = client.notifications();

    // Tools, following cursors (two a page).
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for name in ["echo", "steps", "add", "sample", "touch"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let first = client.list_tools(None).await.unwrap();
    assert_eq!(first.tools.len(), 2);
    assert!(first.next_cursor.is_some());

    assert_eq!(call_text(client, "echo", json!({"text": "hi"})).await, "hi");

    // Structured output, checked against the listed output schema.
    let sum = client
        .call_tool("add", json!({"a": 2, "b": 3.5}))
        .await
        .unwrap();
    assert_eq!(sum.structured_content, Some(json!({"sum": 5.5})));

    // A tool error is a result, not an error.
    let wrong = client.call_tool("add", json!({"a": "x"})).await;
    match wrong {
        Ok(result) => assert_eq!(result.is_error, Some(true)),
        Err(Error::Remote(e)) => assert_eq!(e.code, modelctx_client::ErrorCode::INVALID_PARAMS),
        Err(e) => panic!("{e}"),
    }

    // Progress per call; log messages at the level asked for.
    client.set_log_level(LogLevel::Info).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let progress = seen.clone();
    let options =
        CallOptions::new().on_progress(move |p| progress.lock().unwrap().push(p.progress));
    let steps = client
        .call_tool_with("steps", json!({"count": 3}), options)
        .await
        .unwrap();
    assert_eq!(steps.structured_content, Some(json!({"steps": 3})));
    assert_eq!(*seen.lock().unwrap(), vec![1.0, 2.0, 3.0]);
    let log = expect_notification(&mut notifications, "a log message", |n| {
        matches!(n, ServerNotification::Log(_))
    })
    .await;
    let ServerNotification::Log(log) = log else {
        unreachable!()
    };
    assert_eq!(log.level, LogLevel::Info);
    assert_eq!(log.logger.as_deref(), Some("steps"));

    // Input for the server: elicitation (with the schema's defaults applied), sampling, roots.
    assert_eq!(call_text(client, "ask", json!({})).await, "answered yes");
    let form = call_text(client, "form", json!({})).await;
    let defaults = client.protocol_version() >= Some(ProtocolVersion::V2025_11_25);
    let expected = if defaults {
        r#""accept" {"age":36,"answer":"me","name":"Ada"}"#
    } else {
        // Schema defaults exist from 2025-11-25 on; the server sends none before.
        r#""accept" {"answer":"me","name":""}"#
    };
    assert_eq!(form, expected);
    let sampled = call_text(client, "sample", json!({"text": "ping"})).await;
    assert_eq!(sampled, "test-model said ping!");
    assert_eq!(call_text(client, "roots", json!({})).await, "file:///src");

    // Resources: lists, a read, a template, completion.
    let resources = client.list_all_resources().await.unwrap();
    assert_eq!(resources.len(), 3);
    let read = client.read_resource("file:///readme.md").await.unwrap();
    assert_eq!(read.contents.len(), 1);
    let templates = client.list_all_resource_templates().await.unwrap();
    assert_eq!(templates[0].uri_template, "file:///notes/{name}");
    let note = client.read_resource("file:///notes/alpha").await.unwrap();
    match &note.contents[0] {
        model::EmbeddedResourceResource::TextResourceContents(t) => {
            assert_eq!(t.text, "note alpha")
        }
        other => panic!("{other:?}"),
    }
    let template = CompletionRef::Resource("file:///notes/{name}".into());
    assert_eq!(
        completions(client, &template, "name", "al").await,
        ["alpha"]
    );
    let missing = client.read_resource("file:///nothing").await.unwrap_err();
    assert!(matches!(missing, Error::Remote(_)), "{missing}");

    // Prompts.
    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(prompts[0].name, "greet");
    let greeting = client
        .get_prompt("greet", &[("name", "Ada")])
        .await
        .unwrap();
    assert_eq!(greeting.messages.len(), 1);
    let greet = CompletionRef::Prompt("greet".into());
    let names = completions(client, &greet, "name", "A").await;
    assert_eq!(names, ["Ada", "Alan"]);

    // List changes and resource updates, the same API in both eras.
    client
        .subscribe_resource("file:///readme.md")
        .await
        .unwrap();
    client.call_tool("touch", json!({})).await.unwrap();
    expect_notification(&mut notifications, "tools/list_changed", |n| {
        *n == ServerNotification::ToolsListChanged
    })
    .await;
    expect_notification(
        &mut notifications,
        "resources/updated",
        |n| matches!(n, ServerNotification::ResourceUpdated { uri } if uri == "file:///readme.md"),
    )
    .await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name.starts_with("extra-")));
    client
        .unsubscribe_resource("file:///readme.md")
        .await
        .unwrap();

    // Era-specific methods.
    if modern {
        let discovered = client.discover().await.unwrap();
        assert!(
            discovered
                .supported_versions
                .contains(&"2026-07-28".to_owned())
        );
        assert!(matches!(
            client.ping().await,
            Err(Error::NotAvailable(SessionError::MethodNotInVersion { .. }))
        ));
    } else {
        client.ping().await.unwrap();
        assert!(matches!(
            client.discover().await,
            Err(Error::NotAvailable(SessionError::MethodNotInVersion { .. }))
        ));
    }

    // Timeouts and dropped calls cancel on the wire: the handler sees it.
    let before = modelctx_tests::facade::CANCELLED.load(Ordering::SeqCst);
    let options = CallOptions::new().timeout(Some(Duration::from_millis(200)));
    let timed_out = within("timeout", client.call_tool_with("wait", json!({}), options)).await;
    assert!(matches!(timed_out, Err(Error::Timeout(_))), "{timed_out:?}");
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        client.call_tool("wait", json!({})),
    )
    .await;
    assert!(dropped.is_err());
    if setup.in_process {
        within("the handlers see both cancellations", async {
            while modelctx_tests::facade::CANCELLED.load(Ordering::SeqCst) < before + 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }
    // The connection is still good.
    let echoed = call_text(client, "echo", json!({"text": "after"})).await;
    assert_eq!(echoed, "after");

    within("close", client.close()).await;
    assert!(client.is_closed());
    let after = client.call_tool("echo", json!({"text": "x"})).await;
    assert!(matches!(after, Err(Error::Closed(_))), "{after:?}");
    assert!(matches!(
        notifications.recv().await,
        Err(modelctx_client::RecvError::Closed)
    ));
}

/// A test of [`every_feature`] per transport and pin.
/// In memory on a paused clock (nothing but the runtime's own tasks: the timeouts cost no real
/// time), over a child process or sockets on the wall clock.
macro_rules! every_feature {
    ($($name:ident: $transport:ident, $pin:expr, $($paused:ident)?;)*) => {$(
        #[tokio::test$((start_paused = $paused))?]
        async fn $name() {
            every_feature(Transport::$transport, $pin).await;
        }
    )*};
}

every_feature! {
    every_feature_in_memory_modern: Memory, Pin::Probe, true;
    every_feature_in_memory_legacy: Memory, Pin::LEGACY, true;
    every_feature_in_memory_2025_06_18: Memory, Pin::Legacy(ProtocolVersion::V2025_06_18), true;
    every_feature_over_stdio_modern: Stdio, Pin::Probe,;
    every_feature_over_stdio_legacy: Stdio, Pin::LEGACY,;
    every_feature_over_http_modern: Http, Pin::Probe,;
    every_feature_over_http_legacy: Http, Pin::LEGACY,;
}

/// The oldest version: no elicitation, no structured output, no titles.
#[tokio::test]
async fn the_oldest_version_works_in_memory() {
    let setup = connect(
        Transport::Memory,
        builder(Pin::Legacy(ProtocolVersion::V2024_11_05)),
    )
    .await;
    let client = &setup.client;
    assert_eq!(
        client.protocol_version(),
        Some(ProtocolVersion::V2024_11_05)
    );
    assert_eq!(
        call_text(client, "echo", json!({"text": "old"})).await,
        "old"
    );
    let sampled = call_text(client, "sample", json!({"text": "x"})).await;
    assert_eq!(sampled, "test-model said x!");
    // No elicitation before 2025-06-18: the tool reports it cannot ask.
    let asked = client.call_tool("ask", json!({})).await.unwrap();
    assert_eq!(asked.is_error, Some(true));
    let sum = client
        .call_tool("add", json!({"a": 1, "b": 1}))
        .await
        .unwrap();
    assert_eq!(sum.structured_content, None);
    client.close().await;
}

/// Counts `elicitation/create` asks, to see a cached result come without a call.
#[tokio::test]
async fn cached_lists_honour_ttl_and_list_changes() {
    let server = client_server();
    let cache = modelctx_client::ResultCache::new(64);
    let client = connect_in_memory(&server, builder(Pin::Probe).cache(cache.clone())).await;
    let first = client.list_tools(None).await.unwrap();
    assert_eq!(first.ttl_ms, Some(60_000));
    assert!(!cache.is_empty(), "a modern list with ttlMs is kept");
    // The server's list changes, but no notification is listened for: the cached page stays.
    server
        .add_tool(modelctx_server::Tool::new(
            "aaa",
            |_: modelctx_server::NoArgs| async { "" },
        ))
        .unwrap();
    let again = client.list_tools(None).await.unwrap();
    assert_eq!(again.tools, first.tools, "served from the cache");
    // Listening, the change notification drops the cached pages.
    let mut notifications = client.notifications();
    client.listening().await.unwrap();
    server.remove_tool("aaa");
    expect_notification(&mut notifications, "tools/list_changed", |n| {
        *n == ServerNotification::ToolsListChanged
    })
    .await;
    let fresh = client.list_tools(None).await.unwrap();
    assert!(fresh.tools.iter().all(|t| t.name != "aaa"));
    client.close().await;

    // A legacy server sends no ttlMs: nothing is cached.
    let cache = modelctx_client::ResultCache::new(64);
    let legacy = builder(Pin::LEGACY).cache(cache.clone());
    let client = connect_in_memory(&server, legacy).await;
    client.list_tools(None).await.unwrap();
    assert!(cache.is_empty());
    client.close().await;
}

/// A stdio server that exits is restarted when the policy allows; the call in flight fails, the
/// next ones go to the new process, and the application hears that it may have missed
/// notifications.
#[tokio::test]
async fn a_crashed_stdio_server_is_restarted() {
    for pin in Pin::BOTH {
        let resynced = Arc::new(AtomicUsize::new(0));
        let counter = resynced.clone();
        let client = builder(pin)
            .reconnect(modelctx_client::Reconnect::up_to(2))
            .on_notification(move |n| {
                if *n == ServerNotification::Resynced {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            })
            .connect_stdio(stdio_server())
            .await
            .unwrap();
        let mut notifications = client.notifications();
        client.listening().await.unwrap();
        let crashed = within("crash", client.call_tool("crash", json!({}))).await;
        match crashed {
            Err(Error::Closed(CloseReason::Transport(exit))) => {
                assert!(exit.contains("exit status: 3"), "{exit}")
            }
            other => panic!("{other:?}"),
        }
        let echoed = within(
            "echo after the restart",
            call_text(&client, "echo", json!({"text": "again"})),
        )
        .await;
        assert_eq!(echoed, "again");
        assert!(resynced.load(Ordering::SeqCst) >= 1);
        // List changes reach the application again: in the modern era the listen stream was
        // opened anew on the new process.
        within("a list change after the restart", async {
            loop {
                client.call_tool("touch", json!({})).await.unwrap();
                let heard = tokio::time::timeout(Duration::from_millis(300), async {
                    loop {
                        if let Ok(ServerNotification::ToolsListChanged) = notifications.recv().await
                        {
                            return;
                        }
                    }
                })
                .await;
                if heard.is_ok() {
                    return;
                }
            }
        })
        .await;
        // Without restarts left, the client ends for good.
        let _ = within("crash", client.call_tool("crash", json!({}))).await;
        let _ = within("crash", client.call_tool("crash", json!({}))).await;
        let last = within("after", client.call_tool("echo", json!({"text": "x"}))).await;
        assert!(matches!(last, Err(Error::Closed(_))), "{last:?}");
        assert!(client.is_closed());
    }
}

/// Without a policy, a server that exits ends the client, with the exit in the error.
#[tokio::test]
async fn a_crashed_stdio_server_ends_the_client_by_default() {
    let client = builder(Pin::Probe)
        .connect_stdio(stdio_server())
        .await
        .unwrap();
    let crashed = within("crash", client.call_tool("crash", json!({}))).await;
    assert!(matches!(crashed, Err(Error::Closed(_))), "{crashed:?}");
    let after = client.call_tool("echo", json!({"text": "x"})).await;
    match after {
        Err(Error::Closed(CloseReason::Transport(exit))) => {
            assert!(exit.contains("exit status: 3"), "{exit}")
        }
        other => panic!("{other:?}"),
    }
}

/// A policy of no restarts holds however long the server ran; a connection that stayed up long
/// enough gives a policy with restarts its count back.
#[tokio::test]
async fn the_restart_count_starts_over_only_after_a_stable_connection() {
    let mut never = modelctx_client::Reconnect::NEVER;
    never.stable_after = Duration::from_millis(50);
    let client = builder(Pin::Probe)
        .reconnect(never)
        .connect_stdio(stdio_server())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = within("crash", client.call_tool("crash", json!({}))).await;
    let after = within("after", client.call_tool("echo", json!({"text": "x"}))).await;
    assert!(matches!(after, Err(Error::Closed(_))), "{after:?}");
    assert!(client.is_closed());

    // One restart allowed, and a connection is stable after 300 ms: each crash after that long
    // is restarted.
    let mut once = modelctx_client::Reconnect::up_to(1);
    once.stable_after = Duration::from_millis(300);
    let client = builder(Pin::Probe)
        .reconnect(once)
        .connect_stdio(stdio_server())
        .await
        .unwrap();
    for round in 0..2 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let _ = within("crash", client.call_tool("crash", json!({}))).await;
        let echoed = within(
            "echo after a restart",
            call_text(&client, "echo", json!({"text": "again"})),
        )
        .await;
        assert_eq!(echoed, "again", "round {round}");
    }
    // A crash soon after a restart finds the count used up: the client ends.
    let _ = within("crash", client.call_tool("crash", json!({}))).await;
    let last = within("after", client.call_tool("echo", json!({"text": "x"}))).await;
    assert!(matches!(last, Err(Error::Closed(_))), "{last:?}");
}

/// Declining an elicitation reaches the handler as a decline, in both eras.
#[tokio::test]
async fn declined_elicitation_reaches_the_tool() {
    for pin in Pin::BOTH {
        let decliner = Client::builder("decliner", "1.0.0")
            .on_elicitation(|_| async { Ok(Elicited::decline()) })
            .protocol_version(match pin {
                Pin::Probe => ProtocolVersion::V2026_07_28,
                Pin::Legacy(v) => v,
            });
        let client = connect_in_memory(&client_server(), decliner).await;
        let form = call_text(&client, "form", json!({})).await;
        assert_eq!(form, r#""decline" null"#, "{pin:?}");
        client.close().await;
    }
}

/// A client without handlers declares nothing, and the server's tools that need input say so:
/// a failed call (legacy), the MissingRequiredClientCapability error (modern).
#[tokio::test]
async fn a_client_without_handlers_declares_nothing() {
    for era in Pin::BOTH {
        let mut builder = Client::builder("plain", "1.0.0");
        if let Pin::Legacy(v) = era {
            builder = builder.protocol_version(v);
        }
        let client = connect_in_memory(&client_server(), builder).await;
        for (tool, capability) in [
            ("ask", "elicitation"),
            ("sample", "sampling"),
            ("roots", "roots"),
        ] {
            match (era, client.call_tool(tool, json!({"text": "x"})).await) {
                (Pin::Legacy(_), Ok(result)) => {
                    assert_eq!(result.is_error, Some(true), "{tool} {era:?}");
                }
                (Pin::Probe, Err(Error::Remote(e))) => {
                    assert_eq!(e.code.0, -32021, "{tool}");
                    let data: Value = serde_json::from_str(e.data.unwrap().get()).unwrap();
                    assert_eq!(
                        data["requiredCapabilities"],
                        json!({ capability: {} }),
                        "{tool}"
                    );
                }
                (_, other) => panic!("{tool} {era:?}: {other:?}"),
            }
        }
        let _: Value = client
            .request("tools/list", Default::default(), CallOptions::new())
            .await
            .unwrap();
        client.close().await;
    }
}

/// Many calls at once: none waits on another, none is lost, and the tables empty afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_complete() {
    for pin in Pin::BOTH {
        let setup = connect(Transport::Memory, builder(pin)).await;
        let client = setup.client.clone();
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..600 {
            let client = client.clone();
            calls.spawn(async move {
                let echoed = call_text(&client, "echo", json!({"text": i.to_string()})).await;
                assert_eq!(echoed, i.to_string());
            });
        }
        within("600 calls", async {
            while let Some(done) = calls.join_next().await {
                done.unwrap();
            }
        })
        .await;
        let sizes = client.table_sizes().await.unwrap();
        assert_eq!((sizes.calls, sizes.session.outgoing), (0, 0), "{sizes:?}");
        client.close().await;
    }
}
