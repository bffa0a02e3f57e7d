//! Observability of the requests a client makes: one `tracing` span per call, named and
//! attributed after the OpenTelemetry semantic conventions for MCP, and (feature `otel`) its
//! W3C trace context put in the request's `params._meta` for the server to continue, and the
//! operation metrics.
//!
//! The spans are made at the info level under the target [`TARGET`]; with no subscriber that
//! wants them, `tracing`'s callsite filter answers before anything of the call is read (the
//! fields are recorded only on a span that is enabled).
//!
//! Attributes of a call's span (`otel.kind` "client"):
//!
//! | field | value |
//! |---|---|
//! | `otel.name` | `"{method} {target}"`, the target being `params.name` of `tools/call` and `prompts/get`; the method alone otherwise |
//! | `mcp.method.name` | the method |
//! | `mcp.protocol.version` | the version the answer came in |
//! | `gen_ai.operation.name` | `"execute_tool"` for `tools/call` |
//! | `gen_ai.tool.name`, `gen_ai.prompt.name` | the target of `tools/call`, `prompts/get` |
//! | `error.type` | the JSON-RPC error code as text; `"tool_error"` for a tool result with `isError`; `"timeout"`, `"closed"`, `"transport"` or `"client_error"` for a call that failed here |
//! | `rpc.response.status_code` | the JSON-RPC error code as text |
//! | `otel.status_code` | `"ERROR"` with `error.type` |
//! | `network.transport` | `"tcp"` over HTTP, `"pipe"` otherwise |
//!
//! One call is one span, its multi round-trip rounds (modern era) included: every round carries
//! the same trace context. A request the server makes of the client (elicitation, sampling,
//! roots) is answered in a span of its own (`otel.kind` "server"), whose parent is the trace
//! context the server put in its `_meta` (feature `otel`).

use modelctx_session::IncomingRequest;
use modelctx_types::JsonObject;
use modelctx_types::consts::{PromptsGet, ToolsCall};
use serde::Deserialize;
use serde_json::Value;
use tracing::Span;
use tracing::field::Empty;

use crate::driver::{Answer, Shared};
use crate::error::Error;

/// The `tracing` target of the spans of this module.
pub const TARGET: &str = "modelctx_client::request";

/// The span of one call, and (feature `otel`) what its metrics need.
pub(crate) struct Observed {
    span: Span,
    /// Whether the call is a `tools/call` (whose result may be a failed tool's).
    tool_call: bool,
    #[cfg(feature = "otel")]
    timing: otel::Timing,
}

impl Observed {
    /// The span of a call of `method` with `params` (disabled when no subscriber wants it), with
    /// every attribute known before the answer given at its creation (one call into the
    /// subscriber, not one per attribute; evaluated only for a span that is enabled).
    pub(crate) fn start(shared: &Shared, method: &str, params: &JsonObject) -> Observed {
        let target = target_of(method, params);
        let span = tracing::info_span!(
            target: TARGET,
            "mcp.client.request",
            otel.name = &*span_name(method, target),
            otel.kind = "client",
            otel.status_code = Empty,
            mcp.method.name = method,
            mcp.protocol.version = Empty,
            gen_ai.operation.name = (method == ToolsCall::VALUE).then_some("execute_tool"),
            gen_ai.tool.name = target.filter(|_| method == ToolsCall::VALUE),
            gen_ai.prompt.name = target.filter(|_| method == PromptsGet::VALUE),
            "error.type" = Empty,
            rpc.response.status_code = Empty,
            network.transport = transport(shared),
        );
        Observed {
            tool_call: method == ToolsCall::VALUE,
            #[cfg(feature = "otel")]
            timing: otel::Timing::start(&shared.metrics, method, target),
            span,
        }
    }

    /// The call's span (the call runs in it).
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Puts the call's trace context in `params._meta` (feature `otel`; nothing otherwise).
    pub(crate) fn inject(&self, params: &mut JsonObject) {
        #[cfg(feature = "otel")]
        if !self.span.is_disabled() {
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            otel::inject(&self.span.context(), params);
        }
        #[cfg(not(feature = "otel"))]
        let _ = params;
    }

    /// Records how the call ended, and ends its measure.
    pub(crate) fn finish(self, answer: &Result<Answer, Error>) {
        #[cfg(not(feature = "otel"))]
        if self.span.is_disabled() {
            return;
        }
        let error = error_type(answer, self.tool_call);
        if !self.span.is_disabled() {
            if let Ok(answer) = answer {
                self.span
                    .record("mcp.protocol.version", answer.version.as_str());
            }
            if let Some(error) = &error {
                self.span.record("error.type", error.as_str());
                self.span.record("otel.status_code", "ERROR");
                if let Err(Error::Remote(e)) = answer {
                    self.span
                        .record("rpc.response.status_code", e.code.0.to_string().as_str());
                }
            }
        }
        #[cfg(feature = "otel")]
        self.timing
            .finish(answer.as_ref().ok().map(|a| a.version), error.as_deref());
    }
}

/// `otel.name`: `"{method} {target}"`, or the method alone.
fn span_name<'a>(method: &'a str, target: Option<&str>) -> std::borrow::Cow<'a, str> {
    match target {
        Some(target) => std::borrow::Cow::Owned(format!("{method} {target}")),
        None => std::borrow::Cow::Borrowed(method),
    }
}

/// `"tcp"` over HTTP, `"pipe"` otherwise.
fn transport(shared: &Shared) -> &'static str {
    #[cfg(feature = "http")]
    if shared.over_http {
        return "tcp";
    }
    let _ = shared;
    "pipe"
}

/// The name a call is about: `params.name` of `tools/call` and `prompts/get`.
fn target_of<'a>(method: &str, params: &'a JsonObject) -> Option<&'a str> {
    if method != ToolsCall::VALUE && method != PromptsGet::VALUE {
        return None;
    }
    params.get("name").and_then(Value::as_str)
}

/// The `error.type` of a call's end, if it failed (`"tool_error"` for a tool's result,
/// `tool_call`, with `isError: true`).
fn error_type(answer: &Result<Answer, Error>, tool_call: bool) -> Option<String> {
    #[derive(Deserialize)]
    struct Flag {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    match answer {
        // Only a tool's result has `isError`: the results of other methods are not read.
        Ok(_) if !tool_call => None,
        Ok(answer) => serde_json::from_str::<Flag>(answer.result.get())
            .ok()
            .filter(|f| f.is_error)
            .map(|_| "tool_error".to_owned()),
        Err(Error::Remote(e)) => Some(e.code.0.to_string()),
        Err(Error::Timeout(_)) => Some("timeout".to_owned()),
        Err(Error::Closed(_)) => Some("closed".to_owned()),
        Err(Error::Transport(_)) => Some("transport".to_owned()),
        Err(_) => Some("client_error".to_owned()),
    }
}

/// The span in which the client answers a request of the server (elicitation, sampling,
/// roots), its parent the trace context of the request's `_meta` (feature `otel`; a missing or
/// malformed carrier is ignored).
pub(crate) fn answer_span(request: &IncomingRequest) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "mcp.client.answer",
        otel.name = request.method.as_str(),
        otel.kind = "server",
        mcp.method.name = request.method.as_str(),
        mcp.protocol.version = request.version.as_str(),
        jsonrpc.request.id = tracing::field::display(&request.id),
    );
    if span.is_disabled() {
        return span;
    }
    #[cfg(feature = "otel")]
    if let Some(parent) = request
        .params
        .as_deref()
        .and_then(|raw| serde_json::from_str::<MetaOnly<'_>>(raw.get()).ok())
        .and_then(|p| p.meta)
        .and_then(modelctx_types::trace_context::TraceContext::from_raw_meta)
        .map(|carried| otel::context_of(&carried))
    {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let _ = span.set_parent(parent);
    }
    span
}

/// `params._meta`, unread (its trace context is read from it without building it).
#[cfg(feature = "otel")]
#[derive(Deserialize)]
struct MetaOnly<'a> {
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<&'a serde_json::value::RawValue>,
}

#[cfg(feature = "otel")]
pub(crate) use otel::Metrics;

#[cfg(feature = "otel")]
mod otel {
    //! The OpenTelemetry side: the W3C trace context of `_meta` (`traceparent`, `tracestate`,
    //! the keys the Python SDK uses), and the operation metrics.

    use std::time::Instant;

    use modelctx_types::JsonObject;
    use modelctx_types::consts::ToolsCall;
    use modelctx_types::trace_context::TraceContext;
    use opentelemetry::KeyValue;
    use opentelemetry::metrics::Histogram;
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };

    use modelctx_session::ProtocolVersion;

    /// The instruments of a client, made from the global meter provider when it connects.
    #[derive(Clone)]
    pub(crate) struct Metrics {
        duration: Histogram<f64>,
    }

    impl std::fmt::Debug for Metrics {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Metrics").finish_non_exhaustive()
        }
    }

    impl Metrics {
        /// The instruments, from the global meter provider (`opentelemetry::global`) as it is
        /// now: set the provider before connecting.
        pub(crate) fn new() -> Metrics {
            let meter = opentelemetry::global::meter("modelctx-client");
            Metrics {
                duration: meter
                    .f64_histogram("mcp.client.operation.duration")
                    .with_unit("s")
                    .with_description("The duration of the MCP requests the client made")
                    .build(),
            }
        }
    }

    /// The measure of one call under way.
    pub(super) struct Timing {
        start: Instant,
        metrics: Metrics,
        attributes: Vec<KeyValue>,
    }

    impl Timing {
        pub(super) fn start(metrics: &Metrics, method: &str, target: Option<&str>) -> Timing {
            let mut attributes = vec![KeyValue::new("mcp.method.name", method.to_owned())];
            if let Some(target) = target {
                let key = if method == ToolsCall::VALUE {
                    "gen_ai.tool.name"
                } else {
                    "gen_ai.prompt.name"
                };
                attributes.push(KeyValue::new(key, target.to_owned()));
            }
            Timing {
                start: Instant::now(),
                metrics: metrics.clone(),
                attributes,
            }
        }

        pub(super) fn finish(mut self, version: Option<ProtocolVersion>, error: Option<&str>) {
            if let Some(version) = version {
                self.attributes.push(KeyValue::new(
                    "mcp.protocol.version",
                    version.as_str().to_owned(),
                ));
            }
            if let Some(error) = error {
                self.attributes
                    .push(KeyValue::new("error.type", error.to_owned()));
            }
            let seconds = self.start.elapsed().as_secs_f64();
            self.metrics.duration.record(seconds, &self.attributes);
        }
    }

    /// The remote parent `meta` names (`traceparent`, and `tracestate` when it is valid; read by
    /// [`TraceContext::from_meta`]); `None` for a carrier that is missing or malformed, which is
    /// ignored (never an error).
    #[cfg(test)]
    pub(crate) fn extract(meta: &JsonObject) -> Option<opentelemetry::Context> {
        TraceContext::from_meta(meta).map(|carried| context_of(&carried))
    }

    /// The remote parent a carried trace context names (a malformed trace state loses the
    /// state, not the parent).
    pub(crate) fn context_of(carried: &TraceContext) -> opentelemetry::Context {
        let flags = if carried.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        // A malformed trace state loses the state, not the parent.
        let state = carried
            .trace_state
            .as_deref()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        let parent = SpanContext::new(
            TraceId::from_bytes(carried.trace_id),
            SpanId::from_bytes(carried.span_id),
            flags,
            true,
            state,
        );
        opentelemetry::Context::new().with_remote_span_context(parent)
    }

    /// Puts the span context of `context` in `params._meta` (`traceparent`, and `tracestate`
    /// when not empty; written by [`TraceContext::inject`]); nothing for an invalid one, or when
    /// `_meta` is there and not an object.
    pub(crate) fn inject(context: &opentelemetry::Context, params: &mut JsonObject) {
        let span = context.span();
        let span = span.span_context();
        let Some(carried) = TraceContext::new(
            span.trace_id().to_bytes(),
            span.span_id().to_bytes(),
            span.is_sampled(),
        ) else {
            return;
        };
        carried
            .with_trace_state(span.trace_state().header())
            .inject(params);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use modelctx_server::{NoArgs, Server, Tool, ToolOutput};
    use serde_json::json;
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    use crate::{Client, ProtocolVersion};

    /// A span seen: its name, and its fields as text.
    type SpanSeen = (&'static str, BTreeMap<String, String>);

    /// `subscriber` as this thread's default, with [`Undecided`] as the global one.
    ///
    /// tracing caches each callsite's interest (and the max level) for every thread, computed
    /// from the dispatchers registered at that moment: a callsite first reached on a thread with
    /// no capture while another test thread sets its capture can stay cached `never`, and that
    /// test sees no span. With a global subscriber that answers `sometimes` for every callsite,
    /// no interest is ever cached `never`; the rebuild after `set_default` recomputes any
    /// cached before.
    pub(crate) fn scoped<S>(subscriber: S) -> tracing::subscriber::DefaultGuard
    where
        S: Subscriber + Send + Sync + 'static,
    {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let _ = tracing::subscriber::set_global_default(Undecided);
        });
        let guard = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        guard
    }

    /// Wants nothing, yet leaves every callsite's interest open ([`scoped`]).
    struct Undecided;

    impl Subscriber for Undecided {
        fn register_callsite(
            &self,
            _: &'static Metadata<'static>,
        ) -> tracing::subscriber::Interest {
            tracing::subscriber::Interest::sometimes()
        }

        fn enabled(&self, _: &Metadata<'_>) -> bool {
            false
        }

        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }

        fn record(&self, _: &Id, _: &Record<'_>) {}

        fn record_follows_from(&self, _: &Id, _: &Id) {}

        fn event(&self, _: &Event<'_>) {}

        fn enter(&self, _: &Id) {}

        fn exit(&self, _: &Id) {}
    }

    /// The spans of [`super::TARGET`].
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<SpanSeen>>>);

    struct Fields<'a>(&'a mut BTreeMap<String, String>);

    impl Visit for Fields<'_> {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.insert(field.name().to_owned(), format!("{value:?}"));
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.target() == super::TARGET
        }
        fn new_span(&self, attributes: &Attributes<'_>) -> Id {
            let mut spans = self.0.lock().unwrap();
            let mut fields = BTreeMap::new();
            attributes.record(&mut Fields(&mut fields));
            spans.push((attributes.metadata().name(), fields));
            Id::from_u64(spans.len() as u64)
        }
        fn record(&self, span: &Id, values: &Record<'_>) {
            let mut spans = self.0.lock().unwrap();
            values.record(&mut Fields(&mut spans[span.into_u64() as usize - 1].1));
        }
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {}
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    async fn hello(_: NoArgs) -> &'static str {
        "hello"
    }

    async fn broken(_: NoArgs) -> ToolOutput {
        ToolOutput::error("it broke")
    }

    fn field<'a>(fields: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
        fields.get(name).map(String::as_str)
    }

    async fn calls_have_client_spans(version: Option<ProtocolVersion>) {
        let capture = Capture::default();
        let _default = scoped(capture.clone());
        let server = Server::builder("s", "1.0.0")
            .tool(Tool::with_input_schema(
                "hello",
                crate::JsonObject::new(),
                hello,
            ))
            .tool(Tool::with_input_schema(
                "broken",
                crate::JsonObject::new(),
                broken,
            ))
            .build();
        let memory = server.in_memory();
        let mut builder = Client::builder("c", "1.0.0");
        if let Some(version) = version {
            builder = builder.protocol_version(version);
        }
        let client = builder
            .connect_channels(memory.to_server, memory.from_server)
            .await
            .expect("connected");
        let expected = client.protocol_version().expect("a version");
        client.call_tool("hello", json!({})).await.expect("called");
        let failed = client.call_tool("broken", json!({})).await.expect("called");
        assert_eq!(failed.is_error, Some(true));
        assert!(client.call_tool("nope", json!({})).await.is_err());
        client.close().await;
        let spans: Vec<_> = capture
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(name, f)| {
                *name == "mcp.client.request" && field(f, "mcp.method.name") == Some("tools/call")
            })
            .map(|(_, f)| f.clone())
            .collect();
        assert_eq!(spans.len(), 3, "{spans:?}");
        let ok = &spans[0];
        assert_eq!(field(ok, "otel.name"), Some("tools/call hello"));
        assert_eq!(field(ok, "otel.kind"), Some("client"));
        assert_eq!(field(ok, "mcp.protocol.version"), Some(expected.as_str()));
        assert_eq!(field(ok, "gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(field(ok, "gen_ai.tool.name"), Some("hello"));
        assert_eq!(field(ok, "network.transport"), Some("pipe"));
        assert_eq!(field(ok, "error.type"), None);
        assert_eq!(field(&spans[1], "error.type"), Some("tool_error"));
        assert_eq!(field(&spans[1], "otel.status_code"), Some("ERROR"));
        assert_eq!(field(&spans[2], "otel.name"), Some("tools/call nope"));
        assert_eq!(field(&spans[2], "error.type"), Some("-32602"));
        assert_eq!(field(&spans[2], "rpc.response.status_code"), Some("-32602"));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn calls_have_client_spans_modern() {
        calls_have_client_spans(None).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn calls_have_client_spans_legacy() {
        calls_have_client_spans(Some(ProtocolVersion::V2025_11_25)).await;
    }

    #[cfg(feature = "otel")]
    #[test]
    fn the_codec_reads_what_it_writes_and_ignores_malformed_carriers() {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        let span = "00f067aa0ba902b7";
        let context = opentelemetry::Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from_hex(trace).unwrap(),
            SpanId::from_hex(span).unwrap(),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ));
        let mut params = crate::JsonObject::new();
        super::otel::inject(&context, &mut params);
        assert_eq!(
            params["_meta"],
            json!({"traceparent": format!("00-{trace}-{span}-01")})
        );
        let read = super::otel::extract(params["_meta"].as_object().unwrap()).unwrap();
        assert_eq!(read.span().span_context().trace_id().to_string(), trace);
        // What a malformed carrier is: `modelctx_types::trace_context` (tested there); it
        // is no parent here.
        for bad in [
            json!({"traceparent": "00-xyz"}),
            json!({"traceparent": null}),
        ] {
            assert!(
                super::otel::extract(bad.as_object().unwrap()).is_none(),
                "{bad}"
            );
        }
    }
}
