//! The `otel` build of the modelctx echo server: the same server as the root package's
//! `modelctx` rows (`../src/echo.rs`), with the `otel` feature of modelctx-server, and the
//! OpenTelemetry pipeline a user installs, with nothing leaving the process. The runtime and the
//! `LISTENING <port>` line are the root package's (`../src/common.rs`).

#[path = "../../src/common.rs"]
mod common;
pub use common::{announce, loopback, runtime};

#[path = "../../src/echo.rs"]
#[allow(dead_code)] // Its pass-through layer is for the root package's `layered` rows.
mod echo;
pub use echo::modelctx_server;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::{ManualReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;

/// What [`install`] set up, kept alive while the server runs.
pub struct Pipeline {
    _tracer: SdkTracerProvider,
    _meter: SdkMeterProvider,
}

/// Installs the OpenTelemetry pipeline, unless the first argument is `off` (the `otel` build
/// with no subscriber and the global no-op meter provider: what the feature costs compiled in
/// but not used).
///
/// Traces: a `tracing-opentelemetry` layer (as the guide installs it) on a `tracing-subscriber`
/// registry, the process's global subscriber, over an SDK tracer provider with no span
/// processor: every request span is enabled, sampled (the default sampler, parent-based always-on) and recorded with its
/// attributes, then dropped when it ends. Metrics: the global meter provider is an SDK provider
/// with a `ManualReader` that is never collected: every instrument aggregates what it is given,
/// nothing is exported. Set before the server is built (it makes its instruments then).
pub fn install() -> Option<Pipeline> {
    if std::env::args().nth(1).is_some_and(|a| a == "off") {
        return None;
    }
    let tracer = SdkTracerProvider::builder().build();
    // As `docs/guide-operations.md` and `mcx --otlp` install it: without the code location,
    // thread and busy/idle attributes the layer adds by default.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer.tracer("modelctx-bench"))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false);
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .expect("the first global subscriber");
    let meter = SdkMeterProvider::builder()
        .with_reader(ManualReader::builder().build())
        .build();
    opentelemetry::global::set_meter_provider(meter.clone());
    Some(Pipeline {
        _tracer: tracer,
        _meter: meter,
    })
}
