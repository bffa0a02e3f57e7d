//! `--metrics ADDR`: the metrics of `mcx serve demo` and `mcx proxy` served at
//! `http://ADDR/metrics` in the Prometheus text exposition format (version 0.0.4), collected from
//! the OpenTelemetry SDK at each scrape.
//!
//! Names follow the OpenTelemetry to Prometheus rules: every character other than a letter, a
//! digit, `_` or `:` becomes `_` (`mcp.server.operation.duration` is
//! `mcp_server_operation_duration`), the unit is added as a suffix (`s` as `_seconds`, `ms` as
//! `_milliseconds`, `By` as `_bytes`; a unit in braces, an annotation such as `{session}`, adds
//! nothing), a monotonic sum gets `_total`. Attribute keys become label names by the same
//! character rule (`gen_ai.tool.name` is `gen_ai_tool_name`). A histogram is `_bucket` (cumulative,
//! with `le`), `_sum` and `_count`; a gauge and a non-monotonic sum are gauges. No `target_info`
//! and no `otel_scope_*` labels are written.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The reader a scrape collects from: registered with the meter provider (a clone), read by the
/// endpoint.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scrape(Arc<ManualReader>);

impl MetricReader for Scrape {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline);
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

impl Scrape {
    /// Every metric now, in the Prometheus text format.
    pub(crate) fn render(&self) -> String {
        let mut collected = ResourceMetrics::default();
        if let Err(e) = self.0.collect(&mut collected) {
            return format!("# the metrics could not be collected: {e}\n");
        }
        render(&collected)
    }
}

/// Serves `scrape` at `GET /metrics` on `listener` until the process ends: one request per
/// connection (`Connection: close`), any other path 404, any other method 405.
pub(crate) fn serve(listener: tokio::net::TcpListener, scrape: Scrape) {
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let scrape = scrape.clone();
            tokio::spawn(async move {
                let _ =
                    tokio::time::timeout(Duration::from_secs(10), answer(socket, &scrape)).await;
            });
        }
    });
}

/// Reads one request head (at most 8 KiB) and answers it.
async fn answer(mut socket: tokio::net::TcpStream, scrape: &Scrape) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await?;
        if n == 0 || head.len() + n > 8 * 1024 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            scrape.render(),
        ),
        (_, "/metrics") => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "GET /metrics\n".to_owned(),
        ),
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "the metrics are at /metrics\n".to_owned(),
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
         connection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        response.push_str("allow: GET, HEAD\r\n");
    }
    response.push_str("\r\n");
    if method != "HEAD" {
        response.push_str(&body);
    }
    socket.write_all(response.as_bytes()).await?;
    socket.shutdown().await
}

/// The gauges of what an HTTP endpoint of mcx's own (the proxy's) holds, as the server's are
/// (`mcp.server.sessions.active`, `mcp.server.streams.open`, `mcp.server.event_store.events`,
/// attribute `mcp.server.name`), on the global meter provider.
pub(crate) fn transport_gauges(
    name: &'static str,
    counters: modelctx_http::server::Counters,
    events: Arc<dyn modelctx_http::event_store::EventStore>,
) {
    let meter = opentelemetry::global::meter("mcx");
    let attributes = [KeyValue::new("mcp.server.name", name)];
    let sessions = counters.clone();
    meter
        .u64_observable_gauge("mcp.server.sessions.active")
        .with_unit("{session}")
        .with_description("Legacy HTTP sessions held (the 2026-07-28 era has none)")
        .with_callback({
            let attributes = attributes.clone();
            move |observer| observer.observe(sessions.sessions() as u64, &attributes)
        })
        .build();
    meter
        .u64_observable_gauge("mcp.server.streams.open")
        .with_unit("{stream}")
        .with_description("SSE streams open")
        .with_callback({
            let attributes = attributes.clone();
            move |observer| observer.observe(counters.streams() as u64, &attributes)
        })
        .build();
    meter
        .u64_observable_gauge("mcp.server.event_store.events")
        .with_unit("{event}")
        .with_description("Events the event store holds for resumption")
        .with_callback(move |observer| {
            if let Some(held) = events.events_held() {
                observer.observe(held as u64, &attributes);
            }
        })
        .build();
}

/// One metric family: its help, type and lines, by its Prometheus name.
#[derive(Default)]
struct Family {
    help: String,
    kind: &'static str,
    lines: Vec<String>,
}

/// `collected` in the Prometheus text format: one family per name (the points of metrics of the
/// same name from several scopes together), in name order.
pub(crate) fn render(collected: &ResourceMetrics) -> String {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for scope in collected.scope_metrics() {
        for metric in scope.metrics() {
            add(&mut families, metric);
        }
    }
    let mut out = String::new();
    for (name, family) in families {
        if family.lines.is_empty() {
            continue;
        }
        if !family.help.is_empty() {
            let _ = writeln!(out, "# HELP {name} {}", escape_help(&family.help));
        }
        let _ = writeln!(out, "# TYPE {name} {}", family.kind);
        for line in family.lines {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

fn add(families: &mut BTreeMap<String, Family>, metric: &Metric) {
    let base = metric_name(metric.name(), metric.unit());
    match metric.data() {
        AggregatedMetrics::F64(data) => add_data(families, &base, metric, data, |v| v),
        AggregatedMetrics::U64(data) => add_data(families, &base, metric, data, |v| v as f64),
        AggregatedMetrics::I64(data) => add_data(families, &base, metric, data, |v| v as f64),
    }
}

fn add_data<T>(
    families: &mut BTreeMap<String, Family>,
    base: &str,
    metric: &Metric,
    data: &MetricData<T>,
    value: impl Fn(T) -> f64,
) where
    T: Copy,
{
    let (name, kind) = match data {
        MetricData::Sum(sum) if sum.is_monotonic() => (format!("{base}_total"), "counter"),
        MetricData::Histogram(_) => (base.to_owned(), "histogram"),
        // Not in the text format: left out.
        MetricData::ExponentialHistogram(_) => return,
        MetricData::Gauge(_) | MetricData::Sum(_) => (base.to_owned(), "gauge"),
    };
    let family = families.entry(name.clone()).or_insert_with(|| Family {
        help: metric.description().to_owned(),
        kind,
        lines: Vec::new(),
    });
    match data {
        MetricData::Gauge(gauge) => {
            for point in gauge.data_points() {
                let labels = labels(point.attributes(), None);
                family
                    .lines
                    .push(format!("{name}{labels} {}", number(value(point.value()))));
            }
        }
        MetricData::Sum(sum) => {
            for point in sum.data_points() {
                let labels = labels(point.attributes(), None);
                family
                    .lines
                    .push(format!("{name}{labels} {}", number(value(point.value()))));
            }
        }
        MetricData::Histogram(histogram) => {
            for point in histogram.data_points() {
                let mut cumulative = 0u64;
                let counts: Vec<u64> = point.bucket_counts().collect();
                for (bound, count) in point.bounds().zip(&counts) {
                    cumulative += count;
                    let labels = labels(point.attributes(), Some(&number(bound)));
                    family
                        .lines
                        .push(format!("{name}_bucket{labels} {cumulative}"));
                }
                let labels_inf = labels(point.attributes(), Some("+Inf"));
                family
                    .lines
                    .push(format!("{name}_bucket{labels_inf} {}", point.count()));
                let labels = labels(point.attributes(), None);
                family
                    .lines
                    .push(format!("{name}_sum{labels} {}", number(value(point.sum()))));
                family
                    .lines
                    .push(format!("{name}_count{labels} {}", point.count()));
            }
        }
        MetricData::ExponentialHistogram(_) => {}
    }
}

/// The Prometheus name of an OpenTelemetry metric `name` of `unit`.
pub(crate) fn metric_name(name: &str, unit: &str) -> String {
    let mut out = sanitize(name);
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if let Some(suffix) = unit_suffix(unit)
        && !out.ends_with(&format!("_{suffix}"))
    {
        out.push('_');
        out.push_str(&suffix);
    }
    out
}

/// The suffix of `unit`: the usual UCUM units by their Prometheus names, annotations (`{...}`)
/// and `1` none, any other unit as it is (sanitized).
fn unit_suffix(unit: &str) -> Option<String> {
    let unit = unit.trim();
    if unit.is_empty() || unit == "1" || (unit.starts_with('{') && unit.ends_with('}')) {
        return None;
    }
    let named = match unit {
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "min" => "minutes",
        "h" => "hours",
        "d" => "days",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "%" => "percent",
        other => return Some(sanitize(other)).filter(|s| !s.is_empty()),
    };
    Some(named.to_owned())
}

/// Letters, digits, `_` and `:` kept; any other character `_`, and runs of `_` as one.
fn sanitize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() || c == ':' {
            c
        } else {
            '_'
        };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    out
}

/// `{key="value",...}` of `attributes` (keys sanitized, sorted), with `le` when given; empty for
/// none.
fn labels<'a>(attributes: impl Iterator<Item = &'a KeyValue>, le: Option<&str>) -> String {
    let mut pairs: Vec<(String, String)> = attributes
        .map(|kv| {
            let mut key = sanitize(kv.key.as_str());
            if key.starts_with(|c: char| c.is_ascii_digit()) {
                key.insert(0, '_');
            }
            (key, kv.value.to_string())
        })
        .collect();
    pairs.sort();
    if let Some(le) = le {
        pairs.push(("le".to_owned(), le.to_owned()));
    }
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_value(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// A sample value: integers without a fraction, the infinities and NaN as Prometheus spells them.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{value}")
    }
}

fn escape_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::SdkMeterProvider;

    use super::*;

    #[test]
    fn names_follow_the_opentelemetry_to_prometheus_rules() {
        assert_eq!(
            metric_name("mcp.server.operation.duration", "s"),
            "mcp_server_operation_duration_seconds"
        );
        assert_eq!(
            metric_name("mcp.server.sessions.active", "{session}"),
            "mcp_server_sessions_active"
        );
        assert_eq!(
            metric_name("mcp.server.handlers", ""),
            "mcp_server_handlers"
        );
        assert_eq!(metric_name("http.body.size", "By"), "http_body_size_bytes");
        assert_eq!(metric_name("cpu.ratio", "1"), "cpu_ratio");
        assert_eq!(metric_name("x..y-z", "m/s"), "x_y_z_m_s");
        assert_eq!(metric_name("1st", ""), "_1st");
        assert_eq!(metric_name("latency_seconds", "s"), "latency_seconds");
    }

    #[test]
    fn histograms_gauges_and_counters_are_written_in_the_text_format() {
        let scrape = Scrape::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(scrape.clone())
            .build();
        let meter = provider.meter("test");
        let histogram = meter
            .f64_histogram("mcp.server.operation.duration")
            .with_unit("s")
            .with_description("How long")
            .with_boundaries(vec![0.1, 1.0])
            .build();
        let call = [
            KeyValue::new("mcp.method.name", "tools/call"),
            KeyValue::new("gen_ai.tool.name", "say \"hi\"\n"),
        ];
        histogram.record(0.05, &call);
        histogram.record(0.5, &call);
        histogram.record(3.0, &call);
        let counter = meter.u64_counter("requests").build();
        counter.add(2, &[]);
        let _gauge = meter
            .u64_observable_gauge("mcp.server.streams.open")
            .with_unit("{stream}")
            .with_callback(|observer| observer.observe(4, &[KeyValue::new("mcp.server.name", "d")]))
            .build();
        let text = scrape.render();
        let labels = r#"gen_ai_tool_name="say \"hi\"\n",mcp_method_name="tools/call""#;
        let expected = [
            "# HELP mcp_server_operation_duration_seconds How long".to_owned(),
            "# TYPE mcp_server_operation_duration_seconds histogram".to_owned(),
            format!(r#"mcp_server_operation_duration_seconds_bucket{{{labels},le="0.1"}} 1"#),
            format!(r#"mcp_server_operation_duration_seconds_bucket{{{labels},le="1"}} 2"#),
            format!(r#"mcp_server_operation_duration_seconds_bucket{{{labels},le="+Inf"}} 3"#),
            format!("mcp_server_operation_duration_seconds_sum{{{labels}}} 3.55"),
            format!("mcp_server_operation_duration_seconds_count{{{labels}}} 3"),
            "# TYPE mcp_server_streams_open gauge".to_owned(),
            r#"mcp_server_streams_open{mcp_server_name="d"} 4"#.to_owned(),
            "# TYPE requests_total counter".to_owned(),
            "requests_total 2".to_owned(),
        ];
        assert_eq!(text.lines().collect::<Vec<_>>(), expected, "{text}");
    }

    #[test]
    fn numbers_are_written_as_prometheus_reads_them() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(f64::NAN), "NaN");
    }
}
