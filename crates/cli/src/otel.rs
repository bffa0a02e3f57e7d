//! `--otlp URL` and `--metrics ADDR`: the telemetry of whatever mcx runs.
//!
//! With `--otlp URL`, the request spans of modelctx-server and modelctx-client (feature `otel`:
//! `tracing` spans made OpenTelemetry spans by `tracing-opentelemetry`) and a span around each
//! client command go to an OTLP/HTTP collector (protobuf): traces to `URL/v1/traces`, metrics to
//! `URL/v1/metrics` (every 60 s, and at the end). The endpoint is the flag's alone:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is not read, so that an environment set for other programs
//! does not make every mcx command export; the exporter's other variables
//! (`OTEL_EXPORTER_OTLP_HEADERS`, `..._TIMEOUT`) apply. The service is named `mcx` for a client
//! command, `mcx-demo` for `serve demo`, `mcx-proxy` for `proxy`. Whatever was recorded is
//! flushed before mcx exits: [`Telemetry`] shuts the providers down when dropped (every return of
//! `main`), and [`flush`] does it on the paths that end the process at once.
//!
//! With `--metrics ADDR` (`serve demo`, `proxy`), the same meter provider has a reader that
//! `metrics.rs` serves at `http://ADDR/metrics`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{
    Aggregation, Instrument, InstrumentKind, SdkMeterProvider, Stream,
};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

use crate::metrics::Scrape;

/// The `tracing` target of mcx's own span around a client command.
pub(crate) const TARGET: &str = "mcx";

/// The bucket boundaries of the operation duration histograms (seconds), as the OpenTelemetry
/// semantic conventions for MCP give them.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// What to start.
pub(crate) struct Options<'a> {
    /// `--otlp URL`.
    pub(crate) otlp: Option<&'a str>,
    /// `--metrics ADDR`.
    pub(crate) metrics: Option<&'a str>,
    /// `service.name`.
    pub(crate) service: &'static str,
}

/// The telemetry started: shut down (what was recorded exported) when dropped.
pub(crate) struct Telemetry(());

impl Drop for Telemetry {
    fn drop(&mut self) {
        flush();
    }
}

/// The providers to shut down at the end.
static PROVIDERS: Mutex<Option<(Option<SdkTracerProvider>, SdkMeterProvider)>> = Mutex::new(None);

/// Starts what `options` asks for (nothing without `--otlp` and `--metrics`): in a Tokio
/// runtime, before any server is built or client connects. An error is the user's (a URL or an
/// address that cannot be used).
pub(crate) fn start(options: &Options<'_>) -> Result<Option<Telemetry>, String> {
    if options.otlp.is_none() && options.metrics.is_none() {
        return Ok(None);
    }
    let resource = Resource::builder()
        .with_service_name(options.service)
        .build();
    let mut meters = SdkMeterProvider::builder()
        .with_resource(resource.clone())
        .with_view(durations);
    let mut tracer = None;
    if let Some(url) = options.otlp {
        let base = otlp_base(url)?;
        let runtime = tokio::runtime::Handle::current();
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{base}/v1/traces"))
            .with_http_client(OnRuntime::new(runtime.clone()))
            .build()
            .map_err(|e| format!("--otlp {url}: {e}"))?;
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{base}/v1/metrics"))
            .with_http_client(OnRuntime::new(runtime))
            .build()
            .map_err(|e| format!("--otlp {url}: {e}"))?;
        meters = meters
            .with_reader(opentelemetry_sdk::metrics::PeriodicReader::builder(metrics).build());
        let provider = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_batch_exporter(spans)
            .build();
        let targets = tracing_subscriber::filter::Targets::new()
            .with_target("modelctx_server::request", tracing::Level::INFO)
            .with_target("modelctx_client::request", tracing::Level::INFO)
            .with_target(TARGET, tracing::Level::INFO);
        // Without the attributes `tracing-opentelemetry` adds of its own by default (the code
        // location, the thread, busy and idle times): a request span's say where it ran in the
        // protocol, not in the source or on which worker thread, and each costs every span.
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("mcx"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(targets);
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .map_err(|e| format!("--otlp: {e}"))?;
        tracer = Some(provider);
    }
    if let Some(addr) = options.metrics {
        let scrape = Scrape::default();
        let listener = std::net::TcpListener::bind(addr)
            .and_then(|listener| {
                listener.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(listener)
            })
            .map_err(|e| format!("--metrics {addr}: {e}"))?;
        let bound = listener
            .local_addr()
            .map_err(|e| format!("--metrics {addr}: {e}"))?;
        eprintln!("mcx: metrics: http://{bound}/metrics");
        crate::metrics::serve(listener, scrape.clone());
        meters = meters.with_reader(scrape);
    }
    let meters = meters.build();
    opentelemetry::global::set_meter_provider(meters.clone());
    *PROVIDERS.lock().unwrap_or_else(|e| e.into_inner()) = Some((tracer, meters));
    Ok(Some(Telemetry(())))
}

/// Exports what was recorded and shuts the providers down (once; nothing when none was
/// started). Blocks the calling thread while the exports run on the runtime's workers.
pub(crate) fn flush() {
    let Some((tracer, meters)) = PROVIDERS.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    let shut = move || {
        if let Some(tracer) = tracer {
            let _ = tracer.shutdown();
        }
        let _ = meters.shutdown();
    };
    // On a worker of the runtime, the others go on driving the exports meanwhile.
    match tokio::runtime::Handle::try_current() {
        Ok(runtime)
            if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                && std::thread::current().name() != Some("main") =>
        {
            tokio::task::block_in_place(shut)
        }
        _ => shut(),
    }
}

/// The base URL of `--otlp`: http or https, without a trailing `/`.
fn otlp_base(url: &str) -> Result<String, String> {
    let parsed: http::Uri = url
        .parse()
        .map_err(|e| format!("--otlp {url}: not a URL: {e}"))?;
    match parsed.scheme_str() {
        Some("http" | "https") if parsed.authority().is_some() => {}
        _ => {
            return Err(format!(
                "--otlp {url}: give the collector's OTLP/HTTP base URL, such as \
                 http://localhost:4318"
            ));
        }
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// The operation duration histograms with the semantic conventions' buckets (the SDK's default
/// ones are for milliseconds).
fn durations(instrument: &Instrument) -> Option<Stream> {
    if instrument.kind() != InstrumentKind::Histogram || instrument.unit() != "s" {
        return None;
    }
    Stream::builder()
        .with_aggregation(Aggregation::ExplicitBucketHistogram {
            boundaries: DURATION_BUCKETS.to_vec(),
            record_min_max: true,
        })
        .build()
        .ok()
}

/// The span around a client command, named after it (`mcx tools call`): the calls it makes are
/// its children, one trace.
pub(crate) fn command_span(command: &crate::ClientCommand) -> tracing::Span {
    use crate::{PromptsCommand, ResourcesCommand, ToolsCommand};
    let name = match command {
        crate::ClientCommand::Discover => "mcx discover",
        crate::ClientCommand::Ping => "mcx ping",
        crate::ClientCommand::Tools(ToolsCommand::List) => "mcx tools list",
        crate::ClientCommand::Tools(ToolsCommand::Call { .. }) => "mcx tools call",
        crate::ClientCommand::Tools(ToolsCommand::Show { .. }) => "mcx tools show",
        crate::ClientCommand::Resources(ResourcesCommand::List) => "mcx resources list",
        crate::ClientCommand::Resources(ResourcesCommand::Read { .. }) => "mcx resources read",
        crate::ClientCommand::Resources(ResourcesCommand::Templates) => "mcx resources templates",
        crate::ClientCommand::Prompts(PromptsCommand::List) => "mcx prompts list",
        crate::ClientCommand::Prompts(PromptsCommand::Get { .. }) => "mcx prompts get",
        crate::ClientCommand::Complete(_) => "mcx complete",
        crate::ClientCommand::Skills(_) => "mcx skills",
        crate::ClientCommand::Tasks(_) => "mcx tasks",
    };
    tracing::info_span!(target: TARGET, "mcx", otel.name = name, otel.kind = "internal")
}

/// opentelemetry-http's hyper client, run on mcx's runtime: the SDK's batch processor and
/// periodic reader export from threads of their own, where the hyper client (which needs a
/// Tokio runtime) cannot run.
#[derive(Debug)]
struct OnRuntime {
    client: opentelemetry_http::hyper::HyperClient,
    runtime: tokio::runtime::Handle,
}

impl OnRuntime {
    fn new(runtime: tokio::runtime::Handle) -> Self {
        OnRuntime {
            client: opentelemetry_http::hyper::HyperClient::with_default_connector(
                Duration::from_secs(10),
                None,
            ),
            runtime,
        }
    }
}

impl HttpClient for OnRuntime {
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: http::Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<http::Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await });
        Box::pin(async move { sent.await.map_err(|e| Box::new(e) as HttpError)? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_otlp_url_is_an_http_base_url() {
        assert_eq!(
            otlp_base("http://localhost:4318/").unwrap(),
            "http://localhost:4318"
        );
        assert_eq!(
            otlp_base("https://otel.example:443/base").unwrap(),
            "https://otel.example:443/base"
        );
        for bad in ["localhost:4318", "grpc://x:4317", "not a url", ""] {
            assert!(otlp_base(bad).is_err(), "{bad}");
        }
    }
}
