//! OpenTelemetry across a modelctx client and server (feature `otel`): the client's trace
//! context rides in `params._meta` and the server's spans continue it (both eras), the server's
//! questions (sampling) nest under the call that raised them and the client answers them under
//! their context; the operation metrics count the calls made. The Python SDK's side of the same
//! checks: `otel_python`.

use std::collections::HashMap;
use std::sync::OnceLock;

use modelctx_client::{Client, ProtocolVersion};
use modelctx_tests::client::connect_in_memory;
use modelctx_tests::facade::client_server;
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanId, SpanKind, TraceId, TracerProvider as _};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// The spans of one test, exported in memory: the thread's subscriber is the
/// `tracing-opentelemetry` layer over an SDK tracer (the runtime is the thread's, so the
/// client's and the server's tasks report to it).
struct Traces {
    provider: SdkTracerProvider,
    exporter: InMemorySpanExporter,
    _default: tracing::subscriber::DefaultGuard,
}

impl Traces {
    fn start() -> Traces {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("otel-tests"));
        let subscriber = tracing_subscriber::registry().with(layer);
        let default = modelctx_tests::traces::scoped(subscriber);
        Traces {
            provider,
            exporter,
            _default: default,
        }
    }

    fn spans(&self) -> Vec<SpanData> {
        let _ = self.provider.force_flush();
        self.exporter.get_finished_spans().expect("the spans")
    }
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// The one span named `name` of `kind`.
fn one<'a>(spans: &'a [SpanData], name: &str, kind: SpanKind) -> &'a SpanData {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s.name == name && s.span_kind == kind)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {kind:?} span {name}: {:?}",
        spans
            .iter()
            .map(|s| (&s.name, &s.span_kind))
            .collect::<Vec<_>>()
    );
    found[0]
}

fn sample_builder(version: Option<ProtocolVersion>) -> modelctx_client::ClientBuilder {
    let builder = Client::builder("otel-tests", "1.0.0").on_sampling(|params| async move {
        let asked = match params.messages.first().map(|m| &m.content) {
            Some(modelctx_client::model::CreateMessageResultContent::TextContent(t)) => {
                t.text.clone()
            }
            other => format!("{other:?}"),
        };
        Ok(modelctx_tests::client::sampled(json!({
            "role": "assistant",
            "content": {"type": "text", "text": format!("{asked}!")},
            "model": "test-model",
        })))
    });
    match version {
        Some(version) => builder.protocol_version(version),
        None => builder,
    }
}

/// A host span around a tool call: the client's span, the server's, the server's question and
/// the client's answer to it are one trace, each the child of the one before.
async fn a_client_trace_continues_in_the_server(version: Option<ProtocolVersion>) {
    let traces = Traces::start();
    let server = client_server();
    let client = connect_in_memory(&server, sample_builder(version)).await;
    let host = tracing::info_span!("host");
    let host_context = {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        host.context()
    };
    let result = client
        .call_tool("sample", json!({"text": "traced"}))
        .instrument(host.clone())
        .await
        .expect("the call");
    assert_eq!(result.is_error, None, "{result:?}");
    client.close().await;
    drop(host);
    let spans = traces.spans();
    let trace: TraceId = {
        use opentelemetry::trace::TraceContextExt;
        host_context.span().span_context().trace_id()
    };
    let host = spans.iter().find(|s| s.name == "host").expect("the host");
    let called = one(&spans, "tools/call sample", SpanKind::Client);
    assert_eq!(called.span_context.trace_id(), trace);
    assert_eq!(called.parent_span_id, host.span_context.span_id());
    assert_eq!(
        attribute(called, "gen_ai.tool.name").as_deref(),
        Some("sample")
    );
    // The server's spans of the call (a modern call takes two rounds: the question's and the
    // answer's), each the child of the client's, remote.
    let served: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "tools/call sample" && s.span_kind == SpanKind::Server)
        .collect();
    assert!(!served.is_empty());
    for span in &served {
        assert_eq!(span.span_context.trace_id(), trace);
        assert_eq!(span.parent_span_id, called.span_context.span_id());
        assert!(span.parent_span_is_remote, "{span:?}");
        assert_eq!(
            attribute(span, "gen_ai.operation.name").as_deref(),
            Some("execute_tool")
        );
    }
    // The server's questions (a modern call asks in each round, answered from the second
    // round's `inputResponses`), each the child of a server span of the call.
    let questions: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "sampling/createMessage" && s.span_kind == SpanKind::Client)
        .collect();
    assert_eq!(questions.len(), served.len());
    for asked in &questions {
        assert_eq!(asked.span_context.trace_id(), trace);
        assert!(
            served
                .iter()
                .any(|s| s.span_context.span_id() == asked.parent_span_id),
            "the question nests under a server span of the call"
        );
    }
    if version.is_some() {
        let asked = questions[0];
        // Legacy: the question is a request of its own, answered under its context.
        let answered = one(&spans, "sampling/createMessage", SpanKind::Server);
        assert_eq!(answered.span_context.trace_id(), trace);
        assert_eq!(answered.parent_span_id, asked.span_context.span_id());
        assert!(answered.parent_span_is_remote);
    }
    assert_ne!(called.span_context.span_id(), SpanId::INVALID);
}

#[tokio::test(flavor = "current_thread")]
async fn a_client_trace_continues_in_the_server_modern() {
    a_client_trace_continues_in_the_server(None).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_client_trace_continues_in_the_server_legacy() {
    a_client_trace_continues_in_the_server(Some(ProtocolVersion::V2025_11_25)).await;
}

/// The meter provider of the process, with its exporter: the instruments are made from it when a
/// server is built or a client connects (the other tests of this binary build theirs too: the
/// counts below are of this test's own tools).
fn metrics() -> &'static (SdkMeterProvider, InMemoryMetricExporter) {
    static METRICS: OnceLock<(SdkMeterProvider, InMemoryMetricExporter)> = OnceLock::new();
    METRICS.get_or_init(|| {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        opentelemetry::global::set_meter_provider(provider.clone());
        (provider, exporter)
    })
}

/// The count of each data point of histogram `name` whose attributes include `with`, by
/// `(method, tool, error)`.
fn counts(name: &str, with: &KeyValue) -> HashMap<(String, String, String), u64> {
    let (provider, exporter) = metrics();
    provider.force_flush().expect("flushed");
    let exported = exporter.get_finished_metrics().expect("the metrics");
    let mut counts = HashMap::new();
    // Cumulative: the last export holds the totals.
    let Some(last) = exported.last() else {
        return counts;
    };
    for scope in last.scope_metrics() {
        for metric in scope.metrics().filter(|m| m.name() == name) {
            assert_eq!(metric.unit(), "s");
            let AggregatedMetrics::F64(MetricData::Histogram(histogram)) = metric.data() else {
                panic!("{name} is a histogram of f64")
            };
            for point in histogram.data_points() {
                let attributes: Vec<&KeyValue> = point.attributes().collect();
                if !attributes.contains(&with) {
                    continue;
                }
                let get = |key: &str| {
                    attributes
                        .iter()
                        .find(|kv| kv.key.as_str() == key)
                        .map(|kv| kv.value.to_string())
                        .unwrap_or_default()
                };
                *counts
                    .entry((
                        get("mcp.method.name"),
                        get("gen_ai.tool.name"),
                        get("error.type"),
                    ))
                    .or_default() += point.count();
            }
        }
    }
    counts
}

#[tokio::test]
async fn the_operation_metrics_count_the_calls_made() {
    metrics();
    let server = modelctx_server::Server::builder("metrics", "1.0.0")
        .tool(modelctx_server::Tool::new(
            "otel-metrics-ok",
            |_: modelctx_server::NoArgs| async { "ok" },
        ))
        .tool(modelctx_server::Tool::new(
            "otel-metrics-failed",
            |_: modelctx_server::NoArgs| async { modelctx_server::ToolOutput::error("failed") },
        ))
        .build();
    for version in [None, Some(ProtocolVersion::V2025_11_25)] {
        let mut builder = Client::builder("metrics", "1.0.0");
        if let Some(version) = version {
            builder = builder.protocol_version(version);
        }
        let client = connect_in_memory(&server, builder).await;
        for _ in 0..3 {
            client
                .call_tool("otel-metrics-ok", json!({}))
                .await
                .unwrap();
        }
        let failed = client
            .call_tool("otel-metrics-failed", json!({}))
            .await
            .unwrap();
        assert_eq!(failed.is_error, Some(true));
        assert!(
            client
                .call_tool("otel-metrics-none", json!({}))
                .await
                .is_err()
        );
        client.close().await;
    }
    let call = "tools/call".to_owned();
    let key = |tool: &str, error: &str| (call.clone(), tool.to_owned(), error.to_owned());
    for (instrument, side) in [
        ("mcp.server.operation.duration", "server"),
        ("mcp.client.operation.duration", "client"),
    ] {
        let ok = counts(
            instrument,
            &KeyValue::new("gen_ai.tool.name", "otel-metrics-ok"),
        );
        assert_eq!(
            ok,
            HashMap::from([(key("otel-metrics-ok", ""), 6)]),
            "{side}"
        );
        let failed = counts(
            instrument,
            &KeyValue::new("gen_ai.tool.name", "otel-metrics-failed"),
        );
        assert_eq!(
            failed,
            HashMap::from([(key("otel-metrics-failed", "tool_error"), 2)]),
            "{side}"
        );
        let unknown = counts(
            instrument,
            &KeyValue::new("gen_ai.tool.name", "otel-metrics-none"),
        );
        assert_eq!(
            unknown,
            HashMap::from([(key("otel-metrics-none", "-32602"), 2)]),
            "{side}"
        );
    }
}

/// A span the Python SDK exported (`tests/py/otel_common.py`).
#[derive(Debug, serde::Deserialize)]
struct PySpan {
    name: String,
    kind: String,
    trace_id: String,
    span_id: String,
    parent_span_id: Option<String>,
    parent_is_remote: bool,
    attributes: HashMap<String, String>,
}

/// The Python SDK's client (`tests/py/otel_client.py`, `mode` "legacy" or "auto") calls `echo`
/// of a modelctx server over HTTP inside its span "host": the server's span is in the host's
/// trace, the child of the Python client's span.
async fn a_python_trace_continues_in_modelctx(mode: &str, version: &str) {
    let Some(python) = modelctx_tests::python::python() else {
        return;
    };
    let traces = Traces::start();
    let (_running, url) =
        modelctx_tests::client::serve_http(&client_server(), Default::default()).await;
    let output = tokio::process::Command::new(python)
        .arg(modelctx_tests::python::script("otel_client.py"))
        .arg(&url)
        .arg(mode)
        .kill_on_drop(true)
        .output();
    let output = modelctx_tests::http::within("the Python client", output)
        .await
        .expect("the Python client ran");
    assert!(
        output.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    #[derive(serde::Deserialize)]
    struct Report {
        protocol_version: String,
        spans: Vec<PySpan>,
    }
    let report: Report = serde_json::from_slice(&output.stdout).expect("the Python report");
    assert_eq!(report.protocol_version, version);
    let host = report
        .spans
        .iter()
        .find(|s| s.name == "host")
        .expect("the host span");
    let called = report
        .spans
        .iter()
        .find(|s| {
            s.kind == "client"
                && s.attributes.get("mcp.method.name").map(String::as_str) == Some("tools/call")
        })
        .expect("the Python client's span of the call");
    assert_eq!(called.trace_id, host.trace_id);
    let spans = traces.spans();
    let served = one(&spans, "tools/call echo", SpanKind::Server);
    assert_eq!(served.span_context.trace_id().to_string(), host.trace_id);
    assert_eq!(served.parent_span_id.to_string(), called.span_id);
    assert!(served.parent_span_is_remote);
    assert_eq!(
        attribute(served, "mcp.protocol.version").as_deref(),
        Some(version)
    );
    assert_eq!(
        attribute(served, "gen_ai.tool.name").as_deref(),
        Some("echo")
    );
    assert_eq!(
        attribute(served, "network.transport").as_deref(),
        Some("tcp")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_python_trace_continues_in_modelctx_legacy() {
    a_python_trace_continues_in_modelctx("legacy", "2025-11-25").await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_python_trace_continues_in_modelctx_modern() {
    a_python_trace_continues_in_modelctx("auto", "2026-07-28").await;
}

/// modelctx's client calls `echo` of the Python SDK's server (`tests/py/otel_server.py`, over
/// stdio) inside a span "host": the Python server's span is in the host's trace, the child of
/// the modelctx client's span.
async fn a_modelctx_trace_continues_in_python(version: Option<ProtocolVersion>) {
    let Some(python) = modelctx_tests::python::python() else {
        return;
    };
    let traces = Traces::start();
    let folder = std::env::temp_dir().join(format!(
        "modelctx-otel-{}-{}",
        std::process::id(),
        version.map_or("modern", |v| v.as_str())
    ));
    std::fs::create_dir_all(&folder).expect("a temporary folder");
    let exported = folder.join("spans.json");
    let _ = std::fs::remove_file(&exported);
    let command = modelctx_client::ServerCommand::new(python)
        .arg(modelctx_tests::python::script("otel_server.py"))
        .arg(&exported);
    let mut builder = Client::builder("otel-tests", "1.0.0");
    if let Some(version) = version {
        builder = builder.protocol_version(version);
    }
    let client = modelctx_tests::http::within("connect", builder.connect_stdio(command))
        .await
        .expect("connected to the Python server");
    let host = tracing::info_span!("host");
    let result = client
        .call_tool("echo", json!({"text": "traced"}))
        .instrument(host.clone())
        .await
        .expect("the call");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let negotiated = client.protocol_version().expect("a version");
    client.close().await;
    drop(host);
    // The server writes its spans when its stdin closes.
    let mut text = None;
    for _ in 0..100 {
        if let Ok(read) = std::fs::read_to_string(&exported)
            && !read.is_empty()
        {
            text = Some(read);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let python_spans: Vec<PySpan> =
        serde_json::from_str(&text.expect("the Python server's spans")).expect("JSON");
    let _ = std::fs::remove_dir_all(&folder);
    let spans = traces.spans();
    let called = one(&spans, "tools/call echo", SpanKind::Client);
    let host = spans.iter().find(|s| s.name == "host").expect("the host");
    assert_eq!(called.parent_span_id, host.span_context.span_id());
    let served = python_spans
        .iter()
        .find(|s| s.kind == "server" && s.name == "tools/call echo")
        .unwrap_or_else(|| panic!("the Python server's span: {python_spans:?}"));
    assert_eq!(served.trace_id, called.span_context.trace_id().to_string());
    assert_eq!(
        served.parent_span_id.as_deref(),
        Some(called.span_context.span_id().to_string().as_str())
    );
    assert!(served.parent_is_remote);
    assert_eq!(
        served
            .attributes
            .get("mcp.protocol.version")
            .map(String::as_str),
        Some(negotiated.as_str())
    );
    if let Some(version) = version {
        assert_eq!(negotiated, version);
    } else {
        assert_eq!(negotiated, ProtocolVersion::V2026_07_28);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_modelctx_trace_continues_in_python_legacy() {
    a_modelctx_trace_continues_in_python(Some(ProtocolVersion::V2025_11_25)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_modelctx_trace_continues_in_python_modern() {
    a_modelctx_trace_continues_in_python(None).await;
}

/// The last value of gauge `name` for the server named `server`.
fn gauge(name: &str, server: &str) -> Option<u64> {
    let (provider, exporter) = metrics();
    provider.force_flush().expect("flushed");
    let exported = exporter.get_finished_metrics().expect("the metrics");
    let with = KeyValue::new("mcp.server.name", server.to_owned());
    let last = exported.last()?;
    for scope in last.scope_metrics() {
        for metric in scope.metrics().filter(|m| m.name() == name) {
            let AggregatedMetrics::U64(MetricData::Gauge(gauge)) = metric.data() else {
                panic!("{name} is a gauge of u64")
            };
            for point in gauge.data_points() {
                if point.attributes().any(|kv| *kv == with) {
                    return Some(point.value());
                }
            }
        }
    }
    None
}

#[tokio::test]
async fn the_gauges_show_the_work_under_way() {
    metrics();
    let release = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let held = release.clone();
    let server = modelctx_server::Server::builder("otel-gauges", "1.0.0")
        .tool(modelctx_server::Tool::new(
            "hold",
            move |_: modelctx_server::NoArgs| {
                let held = held.clone();
                async move {
                    let _ = held.acquire().await;
                    "released"
                }
            },
        ))
        .build();
    let client = connect_in_memory(&server, Client::builder("gauges", "1.0.0")).await;
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool("hold", json!({})).await }
    });
    modelctx_tests::http::within("the handler starts", async {
        while server.load().handlers == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(gauge("mcp.server.handlers", "otel-gauges"), Some(1));
    assert_eq!(gauge("mcp.server.connections", "otel-gauges"), Some(1));
    assert_eq!(gauge("mcp.server.tasks", "otel-gauges"), Some(0));
    release.add_permits(1);
    call.await.expect("the call").expect("answered");
    client.close().await;
    modelctx_tests::http::within("the connection ends", async {
        while server.load().connections != 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(gauge("mcp.server.handlers", "otel-gauges"), Some(0));
    assert_eq!(gauge("mcp.server.connections", "otel-gauges"), Some(0));
}

/// The transport's gauges of a server served over HTTP: up while two legacy sessions and a
/// standalone stream are open, the stream's count back to zero once its client went away, the
/// sessions' and the stored events' once the sessions were deleted; `Server::load` says the
/// same.
#[tokio::test]
async fn the_transport_gauges_follow_sessions_and_streams() {
    use modelctx_tests::http::{open_session, raw_request, within};

    const NAME: &str = "otel-transport-gauges";
    const V: &str = "2025-11-25";
    metrics();
    let server = modelctx_server::Server::builder(NAME, "1.0.0").build();
    // Keep-alive comments every 20 ms: a stream whose client went away is found out at once.
    let config = modelctx_server::HttpConfig::default()
        .keep_alive(Some(std::time::Duration::from_millis(20)));
    let running = server
        .serve_http("127.0.0.1:0", config)
        .await
        .expect("served");
    let addr = running.local_addr();
    let gauges = || {
        (
            gauge("mcp.server.sessions.active", NAME),
            gauge("mcp.server.streams.open", NAME),
            gauge("mcp.server.event_store.events", NAME),
        )
    };

    let a = open_session(addr, V).await;
    let b = open_session(addr, V).await;
    let stream_headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", a.as_str()),
        ("MCP-Protocol-Version", V),
    ];
    let stream = within(
        "GET",
        raw_request(addr, "GET", "/mcp", &stream_headers, b""),
    )
    .await;
    assert_eq!(stream.status, 200);
    let load = server.load();
    assert_eq!((load.sessions, load.streams), (2, 1), "{load:?}");
    // The standalone stream's priming event (2025-11-25) is stored for resumption.
    let events = load.events.expect("the in-memory store tells its size");
    assert!(events >= 1, "{load:?}");
    assert_eq!(gauges(), (Some(2), Some(1), Some(events as u64)));

    // The stream's client goes away: its connection closes.
    drop(stream);
    within("the stream is let go", async {
        while server.load().streams != 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    let (sessions, streams, _) = gauges();
    assert_eq!((sessions, streams), (Some(2), Some(0)));

    for session in [&a, &b] {
        let headers = [
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", V),
        ];
        let deleted = within("DELETE", raw_request(addr, "DELETE", "/mcp", &headers, b"")).await;
        assert!((200..300).contains(&deleted.status), "{}", deleted.status);
    }
    within("the sessions end", async {
        while server.load().sessions != 0 || server.load().events != Some(0) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    let load = server.load();
    assert_eq!((load.sessions, load.streams, load.events), (0, 0, Some(0)));
    assert_eq!(gauges(), (Some(0), Some(0), Some(0)));
    running.shutdown(std::time::Duration::from_secs(1)).await;
}

/// A 2026-07-28 `subscriptions/listen` stream counts as an open stream (and opens no session)
/// until its client goes away.
#[tokio::test]
async fn a_modern_listen_stream_counts_as_an_open_stream() {
    use modelctx_tests::http::{modern_headers, modern_meta, post, within};
    use modelctx_types::consts::{NotificationsSubscriptionsAcknowledged, SubscriptionsListen};

    const NAME: &str = "otel-listen-gauges";
    metrics();
    let server = modelctx_server::Server::builder(NAME, "1.0.0")
        .declare_tools()
        .build();
    let config = modelctx_server::HttpConfig::default()
        .keep_alive(Some(std::time::Duration::from_millis(20)));
    let running = server
        .serve_http("127.0.0.1:0", config)
        .await
        .expect("served");
    let listen = json!({"jsonrpc": "2.0", "id": 1, "method": SubscriptionsListen::VALUE,
        "params": {"notifications": {"toolsListChanged": true}, "_meta": modern_meta()}});
    let mut stream = post(
        running.local_addr(),
        &modern_headers(SubscriptionsListen::VALUE, None),
        &listen,
    )
    .await;
    assert_eq!(stream.status, 200);
    let (_, ack) = within("the listen acknowledged", stream.next_message())
        .await
        .expect("an acknowledgement");
    assert_eq!(ack["method"], NotificationsSubscriptionsAcknowledged::VALUE);
    let load = server.load();
    assert_eq!((load.sessions, load.streams), (0, 1), "{load:?}");
    assert_eq!(gauge("mcp.server.streams.open", NAME), Some(1));
    assert_eq!(gauge("mcp.server.sessions.active", NAME), Some(0));
    drop(stream);
    within("the listen stream is let go", async {
        while server.load().streams != 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(gauge("mcp.server.streams.open", NAME), Some(0));
    running.shutdown(std::time::Duration::from_secs(1)).await;
}
