//! `--otlp URL` and `--metrics ADDR`: a client command's trace continues in `mcx serve demo`'s
//! spans, both exported to a collector (a tiny OTLP/HTTP receiver here); the Prometheus text of
//! `serve demo --metrics` counts the calls made.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message as _;

use crate::cli::{HttpServer, http, mcx, serve_demo_with, stderr};

/// The requests an OTLP/HTTP receiver got: path and body.
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A collector that accepts every POST (HTTP/1.1, kept alive) with 200 and keeps its body;
/// its base URL.
fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let received = Received::default();
    let kept = received.clone();
    std::thread::spawn(move || {
        for socket in listener.incoming().flatten() {
            let kept = kept.clone();
            std::thread::spawn(move || serve_otlp(socket, &kept));
        }
    });
    (url, received)
}

fn serve_otlp(socket: TcpStream, kept: &Received) {
    let mut reader = BufReader::new(socket.try_clone().expect("a clone"));
    let mut writer = socket;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        kept.lock().unwrap().push((path, body));
        let answered = writer.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        );
        if answered.is_err() {
            return;
        }
    }
}

/// A span as exported: its process's `service.name`, name, kind, ids.
#[derive(Debug, Clone)]
struct Exported {
    service: String,
    name: String,
    kind: i32,
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
}

/// Every span of the `/v1/traces` requests received.
fn spans(received: &Received) -> Vec<Exported> {
    let mut spans = Vec::new();
    for (path, body) in received.lock().unwrap().iter() {
        if path != "/v1/traces" {
            continue;
        }
        let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP protobuf");
        for resource in request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map(|value| match value {
                    Value::StringValue(s) => s.clone(),
                    other => format!("{other:?}"),
                })
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    spans.push(Exported {
                        service: service.clone(),
                        name: span.name,
                        kind: span.kind,
                        trace: span.trace_id,
                        id: span.span_id,
                        parent: span.parent_span_id,
                    });
                }
            }
        }
    }
    spans
}

/// Stops `server` with SIGTERM (a graceful stop) and waits for it to end.
fn terminate(mut server: HttpServer) {
    let pid = server.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(killed.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.child.try_wait().expect("waits").is_none() {
        assert!(Instant::now() < deadline, "mcx serve demo did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_client_command_and_the_server_export_one_trace() {
    let (collector, received) = receiver();
    let (server, _) = serve_demo_with(&["--http", "127.0.0.1:0", "--otlp", &collector]);
    for era in ["legacy", "modern"] {
        let out = mcx(&[
            "--otlp",
            &collector,
            "--url",
            &server.url,
            "--era",
            era,
            "tools",
            "call",
            "echo",
            "--arg",
            &format!("text={era}"),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // The client's spans were sent before it exited; the server's at its graceful stop.
    terminate(server);
    let spans = spans(&received);
    let clients: Vec<&Exported> = spans
        .iter()
        .filter(|s| s.service == "mcx" && s.name == "tools/call echo")
        .collect();
    assert_eq!(clients.len(), 2, "{spans:#?}");
    for client in clients {
        assert_eq!(client.kind, SpanKind::Client as i32, "{client:?}");
        // Its parent: mcx's span around the command, in the same trace.
        let command = spans
            .iter()
            .find(|s| s.id == client.parent)
            .unwrap_or_else(|| panic!("the parent of {client:?} in {spans:#?}"));
        assert_eq!(
            (command.service.as_str(), command.name.as_str()),
            ("mcx", "mcx tools call")
        );
        assert_eq!(command.trace, client.trace);
        // The server's span of the same call: the same trace, the client's span its parent.
        let served: Vec<&Exported> = spans
            .iter()
            .filter(|s| s.service == "mcx-demo" && s.parent == client.id)
            .collect();
        assert_eq!(
            served.len(),
            1,
            "the server's span under {client:?}: {spans:#?}"
        );
        let served = served[0];
        assert_eq!(served.name, "tools/call echo");
        assert_eq!(served.kind, SpanKind::Server as i32);
        assert_eq!(served.trace, client.trace);
        assert_eq!(served.trace.len(), 16);
    }
}

#[test]
fn a_bad_otlp_url_is_a_usage_error() {
    let out = mcx(&["--otlp", "localhost:4318", "--stdio", "true", "ping"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--otlp"), "{}", stderr(&out));
}

/// The value of the sample `name{labels}` (labels as written, sorted) in `text`.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let wanted = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&wanted))
        .map(|value| value.parse().expect("a number"))
}

#[test]
fn serve_demo_metrics_count_the_calls_made() {
    let (server, before) = serve_demo_with(&["--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0"]);
    let metrics = before
        .iter()
        .find_map(|line| line.strip_prefix("mcx: metrics: "))
        .unwrap_or_else(|| panic!("no metrics URL in {before:?}"))
        .trim()
        .to_owned();
    let base = metrics.strip_suffix("/metrics").expect("a /metrics URL");
    let calls = [
        ("echo", 3, &["--arg", "text=hi"][..]),
        ("add", 2, &["--args", r#"{"a":1,"b":2}"#][..]),
    ];
    for (tool, times, args) in calls {
        for _ in 0..times {
            let mut all = vec![
                "--url",
                server.url.as_str(),
                "--era",
                "legacy",
                "tools",
                "call",
                tool,
            ];
            all.extend_from_slice(args);
            let out = mcx(&all);
            assert!(out.status.success(), "{}", stderr(&out));
        }
    }
    let failed = mcx(&[
        "--url",
        &server.url,
        "--era",
        "legacy",
        "tools",
        "call",
        "nope",
    ]);
    assert!(!failed.status.success());
    let (status, headers, text) = http(base, "GET", "/metrics", &[], "");
    assert_eq!(status, 200, "{text}");
    let content_type = headers
        .iter()
        .find(|(n, _)| n == "content-type")
        .map(|(_, v)| v.as_str());
    assert_eq!(
        content_type,
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(
        text.contains("# TYPE mcp_server_operation_duration_seconds histogram"),
        "{text}"
    );
    let call = |tool: &str, error: Option<&str>| {
        let error = error
            .map(|e| format!("error_type=\"{e}\","))
            .unwrap_or_default();
        format!(
            "{error}gen_ai_tool_name=\"{tool}\",mcp_method_name=\"tools/call\",mcp_protocol_version=\"2025-11-25\""
        )
    };
    let count = "mcp_server_operation_duration_seconds_count";
    assert_eq!(
        sample(&text, count, &call("echo", None)),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, count, &call("add", None)),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, count, &call("nope", Some("-32602"))),
        Some(1.0),
        "{text}"
    );
    // Every call has its `_bucket`s, the last one (`+Inf`) the count.
    let inf = format!("{},le=\"+Inf\"", call("echo", None));
    assert_eq!(
        sample(&text, "mcp_server_operation_duration_seconds_bucket", &inf),
        Some(3.0),
        "{text}"
    );
    // Each command's session ended with it (DELETE): none held, no stream open.
    for gauge in ["mcp_server_sessions_active", "mcp_server_streams_open"] {
        assert_eq!(
            sample(&text, gauge, "mcp_server_name=\"mcx-demo\""),
            Some(0.0),
            "{text}"
        );
    }
    for gauge in [
        "mcp_server_connections",
        "mcp_server_handlers",
        "mcp_server_tasks",
        "mcp_server_sessions_active",
        "mcp_server_streams_open",
        "mcp_server_event_store_events",
    ] {
        assert!(
            text.contains(&format!("# TYPE {gauge} gauge")),
            "{gauge}: {text}"
        );
        assert!(
            sample(&text, gauge, "mcp_server_name=\"mcx-demo\"").is_some(),
            "{gauge}: {text}"
        );
    }
    // Not the metrics: 404; not a GET: 405.
    assert_eq!(http(base, "GET", "/", &[], "").0, 404);
    assert_eq!(http(base, "POST", "/metrics", &[], "").0, 405);
    drop(server);
}
