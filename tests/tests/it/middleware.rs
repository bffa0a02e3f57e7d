//! Middleware at the MCP level (`modelctx_server::middleware`, `modelctx_client::middleware`):
//! `tower` layers that exist, unchanged, around a server's requests, one tool's calls and a
//! client's outgoing requests, in both eras, over in-memory channels, a line-framed stream
//! (stdio's framing) and Streamable HTTP: a timeout ends a slow tool with a clear failed result
//! and cancels its handler; a concurrency limit holds under a flood (callers wait, or are shed
//! with the server's busy error); a rate limit on one tool leaves the others alone; a layer
//! refuses a principal with the error it chose; a client layer's `_meta` reaches the server's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, header};
use modelctx_client::{Client, ClientBuilder, EraChoice};
use modelctx_http::server::RunningServer;
use modelctx_server::middleware::{McpError, McpRequest};
use modelctx_server::{Context, HttpConfig, NoArgs, Server, State, Tool};
use modelctx_stdio::{LineCodec, LineReader, LineWriter};
use modelctx_tests::client::{connect_in_memory, serve_http, text};
use modelctx_tests::http::within;
use modelctx_types::consts::ToolsCall;
use serde_json::{Value, json};
use tower::ServiceBuilder;

use super::tasks_server::TwoCallers;

/// How the client reaches the server.
#[derive(Debug, Clone, Copy)]
enum Via {
    Memory,
    /// A line-framed byte stream: stdio's framing, in process.
    Lines,
    Http,
}

const ERAS: [EraChoice; 2] = [EraChoice::Legacy, EraChoice::Modern];

/// A connection to `server` over `via`, in `era`; the HTTP server it runs on, if any.
async fn connect(
    server: &Server,
    via: Via,
    era: EraChoice,
    builder: ClientBuilder,
) -> (Client, Option<RunningServer>) {
    let builder = builder.era(era);
    match via {
        Via::Memory => (connect_in_memory(server, builder).await, None),
        Via::Lines => {
            let (client_side, server_side) = tokio::io::duplex(1 << 16);
            let (server_read, server_write) = tokio::io::split(server_side);
            let served = server.clone();
            tokio::spawn(async move {
                served
                    .serve_lines(
                        LineReader::new(server_read, LineCodec::new()),
                        LineWriter::new(server_write),
                    )
                    .await
            });
            let (client_read, client_write) = tokio::io::split(client_side);
            let client = within(
                "connect",
                builder.connect_lines(
                    LineReader::new(client_read, LineCodec::new()),
                    LineWriter::new(client_write),
                ),
            )
            .await
            .expect("connected");
            (client, None)
        }
        Via::Http => {
            let (running, url) = serve_http(server, HttpConfig::default()).await;
            let client = within("connect", builder.connect_http(&url))
                .await
                .expect("connected");
            (client, Some(running))
        }
    }
}

/// What the tools of these tests count.
#[derive(Clone, Default)]
struct Probe {
    /// Handlers that saw their cancellation fire.
    cancelled: Arc<AtomicUsize>,
    /// Handlers running now, and the most ever at once.
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    /// Calls that ran.
    calls: Arc<AtomicUsize>,
}

/// Waits 30 s, unless cancelled: what it saw is counted.
async fn slow(context: Context, State(probe): State<Probe>, _: NoArgs) -> &'static str {
    let token = context.cancelled().clone();
    tokio::spawn(async move {
        token.cancelled().await;
        probe.cancelled.fetch_add(1, Ordering::SeqCst);
    });
    tokio::time::sleep(Duration::from_secs(30)).await;
    "finished"
}

/// Runs for 30 ms, counting how many run at once.
async fn busy(State(probe): State<Probe>, _: NoArgs) -> &'static str {
    let now = probe.running.fetch_add(1, Ordering::SeqCst) + 1;
    probe.most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(30)).await;
    probe.running.fetch_sub(1, Ordering::SeqCst);
    probe.calls.fetch_add(1, Ordering::SeqCst);
    "done"
}

async fn hello(_: NoArgs) -> &'static str {
    "hello"
}

/// Waits until `check` holds (at most 10 s).
async fn until(what: &str, check: impl Fn() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_timeout_ends_a_slow_tool_with_a_clear_error_and_cancels_it_on_every_transport() {
    for via in [Via::Memory, Via::Lines, Via::Http] {
        for era in ERAS {
            let probe = Probe::default();
            let server = Server::builder("s", "1")
                .state(probe.clone())
                .tool(
                    Tool::new("slow", slow).layer(tower::timeout::TimeoutLayer::new(
                        Duration::from_millis(100),
                    )),
                )
                .tool(Tool::new("hello", hello))
                .build();
            let (client, running) = connect(&server, via, era, Client::builder("c", "1")).await;
            let started = Instant::now();
            let result = within("the slow call", client.call_tool("slow", json!({})))
                .await
                .unwrap_or_else(|e| panic!("{via:?} {era:?}: {e}"));
            assert_eq!(result.is_error, Some(true), "{via:?} {era:?}");
            assert_eq!(text(&result), "the tool timed out", "{via:?} {era:?}");
            assert!(started.elapsed() < Duration::from_secs(10));
            // The handler's cancellation fired, and it is not counted as running any more.
            until("the handler saw its cancellation", || {
                probe.cancelled.load(Ordering::SeqCst) == 1
            })
            .await;
            until("no handler runs", || server.load().handlers == 0).await;
            // The connection goes on.
            let hello = within("hello", client.call_tool("hello", json!({})))
                .await
                .unwrap();
            assert_eq!(text(&hello), "hello");
            client.close().await;
            if let Some(running) = running {
                running.shutdown(Duration::from_secs(1)).await;
            }
        }
    }
}

#[tokio::test]
async fn a_server_timeout_on_another_method_is_an_internal_error() {
    /// A layer that makes everything but `tools/call` wait longer than the timeout.
    #[derive(Clone)]
    struct Stall<S>(S);
    impl<S> tower::Service<McpRequest> for Stall<S>
    where
        S: tower::Service<McpRequest> + Send + 'static,
        S::Future: Send + 'static,
    {
        type Response = S::Response;
        type Error = S::Error;
        type Future = std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>,
        >;
        fn poll_ready(
            &mut self,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), S::Error>> {
            self.0.poll_ready(cx)
        }
        fn call(&mut self, request: McpRequest) -> Self::Future {
            let stall = request.method() != ToolsCall::VALUE;
            let future = self.0.call(request);
            Box::pin(async move {
                if stall {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                future.await
            })
        }
    }
    let server = Server::builder("s", "1")
        .tool(Tool::new("hello", hello))
        .layer(tower::layer::layer_fn(Stall))
        .layer(tower::timeout::TimeoutLayer::new(Duration::from_millis(
            100,
        )))
        .build();
    for era in ERAS {
        let (client, _) = connect(&server, Via::Memory, era, Client::builder("c", "1")).await;
        let error = within("tools/list", client.list_tools(None))
            .await
            .expect_err("timed out");
        match error {
            modelctx_client::Error::Remote(e) => {
                assert_eq!(e.code, modelctx_types::ErrorCode::INTERNAL_ERROR, "{era:?}");
                assert_eq!(e.message, "the request timed out");
            }
            other => panic!("{era:?}: {other:?}"),
        }
        let hello = within("hello", client.call_tool("hello", json!({})))
            .await
            .unwrap();
        assert_eq!(text(&hello), "hello");
        client.close().await;
    }
}

#[tokio::test]
async fn a_concurrency_limit_holds_under_a_flood_the_rest_waiting() {
    for via in [Via::Memory, Via::Http] {
        for era in ERAS {
            let probe = Probe::default();
            let server = Server::builder("s", "1")
                .state(probe.clone())
                .tool(Tool::new("busy", busy).layer(tower::limit::ConcurrencyLimitLayer::new(3)))
                .build();
            let (client, running) = connect(&server, via, era, Client::builder("c", "1")).await;
            let calls: Vec<_> = (0..24)
                .map(|_| {
                    let client = client.clone();
                    tokio::spawn(async move { client.call_tool("busy", json!({})).await })
                })
                .collect();
            for call in calls {
                let result = within("a busy call", call).await.unwrap().unwrap();
                assert_eq!(text(&result), "done");
            }
            assert_eq!(probe.calls.load(Ordering::SeqCst), 24);
            let most = probe.most.load(Ordering::SeqCst);
            assert!(most <= 3, "{via:?} {era:?}: {most} at once");
            assert_eq!(most, 3, "{via:?} {era:?}: the limit was reached");
            client.close().await;
            if let Some(running) = running {
                running.shutdown(Duration::from_secs(1)).await;
            }
        }
    }
}

#[tokio::test]
async fn a_load_shed_concurrency_limit_refuses_the_rest_with_the_busy_error() {
    for era in ERAS {
        let probe = Probe::default();
        let server = Server::builder("s", "1")
            .state(probe.clone())
            .tool(Tool::new("busy", busy))
            .layer(ServiceBuilder::new().load_shed().concurrency_limit(2))
            .build();
        let (client, _) = connect(&server, Via::Memory, era, Client::builder("c", "1")).await;
        let calls: Vec<_> = (0..12)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move { client.call_tool("busy", json!({})).await })
            })
            .collect();
        let (mut done, mut shed) = (0, 0);
        for call in calls {
            match within("a busy call", call).await.unwrap() {
                Ok(result) => {
                    assert_eq!(text(&result), "done");
                    done += 1;
                }
                Err(modelctx_client::Error::Remote(e)) => {
                    assert_eq!(e.code, modelctx_types::ErrorCode(-32000), "{e:?}");
                    assert!(e.message.contains("overloaded"), "{}", e.message);
                    let data: Value = serde_json::from_str(e.data.unwrap().get()).unwrap();
                    assert_eq!(data["reason"], "rate_limited");
                    shed += 1;
                }
                Err(other) => panic!("{era:?}: {other:?}"),
            }
        }
        assert!(shed > 0, "{era:?}: some calls were shed");
        assert_eq!(done + shed, 12);
        assert_eq!(probe.calls.load(Ordering::SeqCst), done);
        assert!(probe.most.load(Ordering::SeqCst) <= 2);
        client.close().await;
    }
}

#[tokio::test]
async fn a_rate_limit_on_one_tool_leaves_the_others_alone() {
    for era in ERAS {
        let probe = Probe::default();
        let server = Server::builder("s", "1")
            .state(probe.clone())
            .tool(
                Tool::new("limited", busy)
                    .layer(tower::limit::RateLimitLayer::new(2, Duration::from_secs(2))),
            )
            .tool(Tool::new("hello", hello))
            .build();
        let (client, _) = connect(&server, Via::Memory, era, Client::builder("c", "1")).await;
        let started = Instant::now();
        for _ in 0..2 {
            within("a limited call", client.call_tool("limited", json!({})))
                .await
                .unwrap();
        }
        // The third waits for the next window...
        let third = {
            let client = client.clone();
            tokio::spawn(async move { client.call_tool("limited", json!({})).await })
        };
        // ... while the other tool answers at once, again and again.
        for _ in 0..10 {
            let hello = within("hello", client.call_tool("hello", json!({})))
                .await
                .unwrap();
            assert_eq!(text(&hello), "hello");
        }
        assert!(!third.is_finished(), "{era:?}: the third call waits");
        assert_eq!(probe.calls.load(Ordering::SeqCst), 2);
        within("the third call", third).await.unwrap().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(1900), "{era:?}");
        assert_eq!(probe.calls.load(Ordering::SeqCst), 3);
        client.close().await;
    }
}

#[tokio::test]
async fn a_layer_refuses_a_principal_with_the_error_it_chose() {
    let server = Server::builder("s", "1")
        .auth(TwoCallers)
        .tool(Tool::new("hello", hello))
        .layer(tower::filter::FilterLayer::new(|request: McpRequest| {
            // The principal is the grant's issuer and subject.
            match (request.principal(), request.method(), request.target()) {
                (Some("https://as.test bob"), ToolsCall::VALUE, Some(tool)) => {
                    Err(McpError::refused(format!("bob may not call {tool}")))
                }
                _ => Ok(request),
            }
        }))
        .build();
    let (running, url) = serve_http(&server, HttpConfig::default()).await;
    for era in ERAS {
        let as_caller = |who: &str| {
            let mut headers = HeaderMap::new();
            let bearer = HeaderValue::from_str(&format!("Bearer {who}")).unwrap();
            headers.insert(header::AUTHORIZATION, bearer);
            modelctx_client::HttpConfig::default().headers(headers)
        };
        let alice = within(
            "alice connects",
            Client::builder("c", "1")
                .era(era)
                .connect_http_with(&url, as_caller("alice")),
        )
        .await
        .unwrap();
        let bob = within(
            "bob connects",
            Client::builder("c", "1")
                .era(era)
                .connect_http_with(&url, as_caller("bob")),
        )
        .await
        .unwrap();
        let hello = within("alice", alice.call_tool("hello", json!({})))
            .await
            .unwrap();
        assert_eq!(text(&hello), "hello");
        match within("bob", bob.call_tool("hello", json!({}))).await {
            Err(modelctx_client::Error::Remote(e)) => {
                assert_eq!(e.code, modelctx_types::ErrorCode(-32000), "{era:?}");
                assert_eq!(e.message, "bob may not call hello");
            }
            other => panic!("{era:?}: {other:?}"),
        }
        // Bob's other requests pass.
        within("bob lists", bob.list_tools(None)).await.unwrap();
        alice.close().await;
        bob.close().await;
    }
    running.shutdown(Duration::from_secs(1)).await;
}

/// The methods a server's layer saw, each with its `_meta.traceparent`.
type Seen = Arc<Mutex<Vec<(String, Option<Value>)>>>;

#[tokio::test]
async fn a_client_layers_meta_is_what_the_servers_layer_sees() {
    for via in [Via::Memory, Via::Lines, Via::Http] {
        for era in ERAS {
            let seen: Seen = Arc::default();
            let record = seen.clone();
            let server = Server::builder("s", "1")
                .tool(Tool::new("hello", hello))
                .layer(tower::util::MapRequestLayer::new(
                    move |request: McpRequest| {
                        let trace = request.meta().and_then(|m| m.get("traceparent")).cloned();
                        record
                            .lock()
                            .unwrap()
                            .push((request.method().to_owned(), trace));
                        request
                    },
                ))
                .build();
            let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let builder = Client::builder("c", "1").layer(tower::util::MapRequestLayer::new(
                move |mut request: modelctx_client::middleware::McpRequest| {
                    if request.method() == ToolsCall::VALUE {
                        request
                            .meta_mut()
                            .insert("traceparent".into(), traceparent.into());
                    }
                    request
                },
            ));
            let (client, running) = connect(&server, via, era, builder).await;
            let hello = within("hello", client.call_tool("hello", json!({})))
                .await
                .unwrap();
            assert_eq!(text(&hello), "hello");
            let seen = seen.lock().unwrap().clone();
            let call = seen
                .iter()
                .find(|(method, _)| method == ToolsCall::VALUE)
                .unwrap_or_else(|| panic!("{via:?} {era:?}: {seen:?}"));
            assert_eq!(call.1, Some(Value::from(traceparent)), "{via:?} {era:?}");
            client.close().await;
            if let Some(running) = running {
                running.shutdown(Duration::from_secs(1)).await;
            }
        }
    }
}

#[tokio::test]
async fn a_client_timeout_layer_fails_the_call_and_cancels_it_on_the_wire() {
    for era in ERAS {
        let probe = Probe::default();
        let server = Server::builder("s", "1")
            .state(probe.clone())
            .tool(Tool::new("slow", slow))
            .build();
        let builder = Client::builder("c", "1").layer(tower::timeout::TimeoutLayer::new(
            Duration::from_millis(100),
        ));
        let (client, _) = connect(&server, Via::Memory, era, builder).await;
        match within("slow", client.call_tool("slow", json!({}))).await {
            Err(modelctx_client::Error::Middleware(cause)) => {
                assert!(cause.is::<tower::timeout::error::Elapsed>(), "{cause}");
            }
            other => panic!("{era:?}: {other:?}"),
        }
        // The server heard the cancellation: its handler's token fired.
        until("the server cancelled the handler", || {
            probe.cancelled.load(Ordering::SeqCst) == 1
        })
        .await;
        client.close().await;
    }
}
