//! Observability of the requests a server answers: one `tracing` span per request, named and
//! attributed after the OpenTelemetry semantic conventions for MCP, and (feature `otel`) the
//! trace context of the request's `params._meta` as its parent and the operation metrics.
//!
//! The span is made at the info level under the target [`TARGET`]; with no subscriber that
//! wants it, `tracing`'s callsite filter answers before anything of the request is read (the
//! fields are recorded only on a span that is enabled), so the cost is one cached interest
//! check per request.
//!
//! Attributes of the server span (`otel.kind` "server"):
//!
//! | field | value |
//! |---|---|
//! | `otel.name` | `"{method} {target}"`, the target being `params.name` of `tools/call` and `prompts/get`; the method alone otherwise |
//! | `mcp.method.name` | the method |
//! | `mcp.protocol.version` | the version the request is answered in |
//! | `jsonrpc.request.id` | the request's id, as text |
//! | `gen_ai.operation.name` | `"execute_tool"` for `tools/call` |
//! | `gen_ai.tool.name`, `gen_ai.prompt.name` | the target of `tools/call`, `prompts/get` |
//! | `error.type` | the JSON-RPC error code as text; `"tool_error"` for a tool result with `isError` |
//! | `rpc.response.status_code` | the JSON-RPC error code as text |
//! | `otel.status_code` | `"ERROR"` with `error.type` |
//! | `mcp.session.id` | a digest of the legacy HTTP session id ([`session_digest`]), never the id |
//! | `network.transport` | `"tcp"` over HTTP, `"pipe"` otherwise (stdio, in-process streams) |
//! | `server.address` | the HTTP request's `Host` |
//!
//! A server-to-client request a handler makes (elicitation, sampling, roots) gets a span of its
//! own (`otel.kind` "client", named after the method) nested under the request's, its trace
//! context (feature `otel`) in the question's `_meta` on legacy sessions; progress a
//! handler reports is an event in the request's span.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::future::Future;

use modelctx_session::IncomingRequest;
use modelctx_types::consts::{PromptsGet, ToolsCall};
#[cfg(feature = "otel")]
use modelctx_types::trace_context::TraceContext;
use modelctx_types::{ErrorObject, JsonObject};
use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::Span;
use tracing::field::Empty;
use tracing::instrument::Instrument;

use crate::registry::Shared;
use crate::run::runner::Origin;

/// The `tracing` target of the spans and events of this module.
pub const TARGET: &str = "modelctx_server::request";

/// The span of one request, and (feature `otel`) what its metrics need.
pub(crate) struct Observed {
    span: Span,
    /// Whether the request is a `tools/call` (whose result may be a failed tool's).
    tool_call: bool,
    /// The measure of the request, when the meter provider records it.
    #[cfg(feature = "otel")]
    timing: Option<otel::Timing>,
}

impl Observed {
    /// The span of `request` (disabled when no subscriber wants it), with every attribute known
    /// before the request is answered given at its creation (one call into the subscriber, not
    /// one per attribute).
    pub(crate) fn start(shared: &Shared, request: &IncomingRequest, origin: &Origin) -> Observed {
        // The params are read at most once, and only when the span (or the metrics) want what
        // they name: the field values below are evaluated only for a span that is enabled.
        let peeked = OnceCell::new();
        let peek = || peeked.get_or_init(|| Peeked::of(request));
        let method = request.method.as_str();
        let span = tracing::info_span!(
            target: TARGET,
            "mcp.server.request",
            otel.name = &*span_name(method, peek().target.as_deref()),
            otel.kind = "server",
            otel.status_code = Empty,
            mcp.method.name = method,
            mcp.protocol.version = request.version.as_str(),
            jsonrpc.request.id = tracing::field::display(&request.id),
            gen_ai.operation.name = (method == ToolsCall::VALUE).then_some("execute_tool"),
            gen_ai.tool.name = peek().target_of(method, ToolsCall::VALUE),
            gen_ai.prompt.name = peek().target_of(method, PromptsGet::VALUE),
            "error.type" = Empty,
            rpc.response.status_code = Empty,
            mcp.session.id = session_of(origin).as_deref(),
            network.transport = transport_of(origin),
            server.address = host_of(origin),
        );
        #[cfg(not(feature = "otel"))]
        let _ = shared;
        #[cfg(feature = "otel")]
        if !span.is_disabled()
            && let Some(parent) = peek().parent.as_ref().map(otel::extract)
        {
            otel::set_parent(&span, parent);
        }
        Observed {
            tool_call: method == ToolsCall::VALUE,
            #[cfg(feature = "otel")]
            timing: shared
                .metrics
                .start(request, || peek().target.as_deref().map(str::to_owned)),
            span,
        }
    }

    /// Records how the request was answered, and ends its measure.
    pub(crate) fn finish(self, answer: &Result<Box<RawValue>, ErrorObject>) {
        #[cfg(not(feature = "otel"))]
        if self.span.is_disabled() {
            return;
        }
        let error = error_type(answer, self.tool_call);
        if let Some(error) = &error
            && !self.span.is_disabled()
        {
            self.span.record("error.type", error.as_str());
            self.span.record("otel.status_code", "ERROR");
            if let Err(e) = answer {
                self.span
                    .record("rpc.response.status_code", e.code.0.to_string().as_str());
            }
        }
        #[cfg(feature = "otel")]
        if let Some(timing) = self.timing {
            timing.finish(error.as_deref());
        }
    }

    /// `handler` run in the request's span, its answer recorded when it ends.
    pub(crate) fn wrap<F>(self, handler: F) -> impl Future<Output = F::Output> + Send + 'static
    where
        F: Future<Output = Result<Box<RawValue>, ErrorObject>> + Send + 'static,
    {
        let span = self.span.clone();
        async move {
            let answer = handler.await;
            self.finish(&answer);
            answer
        }
        .instrument(span)
    }
}

/// `otel.name`: `"{method} {target}"`, or the method alone.
fn span_name<'a>(method: &'a str, target: Option<&str>) -> Cow<'a, str> {
    match target {
        Some(target) => Cow::Owned(format!("{method} {target}")),
        None => Cow::Borrowed(method),
    }
}

/// `network.transport`: `"tcp"` over HTTP, `"pipe"` otherwise.
fn transport_of(origin: &Origin) -> &'static str {
    #[cfg(feature = "http")]
    if origin.http.is_some() {
        return "tcp";
    }
    let _ = origin;
    "pipe"
}

/// `server.address`: the HTTP request's `Host`.
fn host_of(origin: &Origin) -> Option<&str> {
    #[cfg(feature = "http")]
    if let Some(http) = &origin.http {
        return http.headers().get("host").and_then(|h| h.to_str().ok());
    }
    let _ = origin;
    None
}

/// `mcp.session.id`: the digest of the HTTP request's legacy session id.
fn session_of(origin: &Origin) -> Option<String> {
    #[cfg(feature = "http")]
    if let Some(http) = &origin.http {
        return http
            .headers()
            .get("mcp-session-id")
            .and_then(|h| h.to_str().ok())
            .map(session_digest);
    }
    let _ = origin;
    None
}

/// What a request's params name, read in one pass without building anything of them: the
/// target (`params.name` of `tools/call` and `prompts/get`, when it is text) and (feature
/// `otel`) the trace context of `params._meta`.
#[derive(Default)]
struct Peeked<'a> {
    target: Option<Cow<'a, str>>,
    #[cfg(feature = "otel")]
    parent: Option<TraceContext>,
}

impl<'a> Peeked<'a> {
    fn of(request: &'a IncomingRequest) -> Peeked<'a> {
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(borrow, default)]
            name: Option<&'a RawValue>,
            #[cfg(feature = "otel")]
            #[serde(borrow, default, rename = "_meta")]
            meta: Option<&'a RawValue>,
        }
        let method = request.method.as_str();
        #[cfg(not(feature = "otel"))]
        if method != ToolsCall::VALUE && method != PromptsGet::VALUE {
            return Peeked::default();
        }
        let Some(params) = request
            .params
            .as_deref()
            .and_then(|raw| serde_json::from_str::<Params<'_>>(raw.get()).ok())
        else {
            return Peeked::default();
        };
        let target = if method == ToolsCall::VALUE || method == PromptsGet::VALUE {
            params.name.and_then(text)
        } else {
            None
        };
        Peeked {
            target,
            #[cfg(feature = "otel")]
            parent: params.meta.and_then(TraceContext::from_raw_meta),
        }
    }

    /// The target, when the method is `method`.
    fn target_of(&self, method: &str, wanted: &str) -> Option<&str> {
        (method == wanted)
            .then_some(self.target.as_deref())
            .flatten()
    }
}

/// `raw` as text, when it is a JSON string (borrowed unless it has escapes).
fn text(raw: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Cow<'_, str>>(raw.get()).ok()
}

/// The `error.type` of an answer: the error's code, or `"tool_error"` for a tool's result
/// (`tool_call`) with `isError: true`.
fn error_type(answer: &Result<Box<RawValue>, ErrorObject>, tool_call: bool) -> Option<String> {
    #[derive(Deserialize)]
    struct Flag {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    match answer {
        Err(e) => Some(e.code.0.to_string()),
        // Only a tool's result has `isError`: the results of other methods are not read.
        Ok(_) if !tool_call => None,
        // A result with no member `isError` anywhere (a successful tool's, as the server
        // writes it) is told without parsing it; in a string the name's quotes are escaped.
        Ok(raw) if !raw.get().contains("\"isError\"") => None,
        Ok(raw) => serde_json::from_str::<Flag>(raw.get())
            .ok()
            .filter(|f| f.is_error)
            .map(|_| "tool_error".to_owned()),
    }
}

/// What `mcp.session.id` records of a session id: its 64-bit FNV-1a digest in hex, stable
/// across processes and replicas (a session is followed across a fleet) while the id itself,
/// the session's bearer credential on legacy HTTP, never reaches a trace.
pub fn session_digest(id: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The span of a question a handler asks the client (`elicitation/create`,
/// `sampling/createMessage`, `roots/list`), nested under the current span (the request's, when
/// the handler runs in it).
pub(crate) fn question_span(method: &str) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "mcp.server.question",
        otel.name = Empty,
        otel.kind = "client",
        otel.status_code = Empty,
        mcp.method.name = Empty,
        "error.type" = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", method);
        span.record("mcp.method.name", method);
    }
    span
}

/// Records on a question's span that it failed, and why.
pub(crate) fn question_failed(span: &Span, error: &crate::InputError) {
    if span.is_disabled() {
        return;
    }
    let kind = match error {
        crate::InputError::Refused(e) => e.code.0.to_string(),
        other => error_kind(other).to_owned(),
    };
    span.record("error.type", kind.as_str());
    span.record("otel.status_code", "ERROR");
}

fn error_kind(error: &crate::InputError) -> &'static str {
    match error {
        crate::InputError::NotSupported(_) => "not_supported",
        crate::InputError::NotAllowed => "not_allowed",
        crate::InputError::NoAnswer(_) => "no_answer",
        _ => "input_error",
    }
}

/// Progress a handler reported, as an event in the current span (the request's).
pub(crate) fn progress(progress: f64, total: Option<f64>, message: Option<&str>) {
    tracing::info!(
        target: TARGET,
        progress,
        progress.total = total,
        progress.message = message,
        "progress"
    );
}

/// `params` with the current trace context in its `_meta` (feature `otel`; as is otherwise).
pub(crate) fn inject(params: &mut JsonObject, span: &Span) {
    #[cfg(feature = "otel")]
    otel::inject_params(params, span);
    #[cfg(not(feature = "otel"))]
    let _ = (params, span);
}

#[cfg(all(feature = "otel", feature = "http"))]
pub(crate) use otel::transport_gauges;
#[cfg(feature = "otel")]
pub(crate) use otel::{Metrics, gauges};

#[cfg(feature = "otel")]
mod otel {
    //! The OpenTelemetry side: the trace context of `_meta` (W3C `traceparent` and
    //! `tracestate`, the keys the Python SDK uses), and the operation metrics.

    use std::time::Instant;

    use modelctx_session::IncomingRequest;
    use modelctx_types::JsonObject;
    use modelctx_types::consts::{PromptsGet, ToolsCall};
    use opentelemetry::metrics::Histogram;
    use opentelemetry::{KeyValue, StringValue};
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use crate::registry::Shared;

    use modelctx_types::trace_context::TraceContext;
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };

    /// The remote parent a carried trace context names (a malformed trace state loses the
    /// state, not the parent).
    pub(crate) fn extract(carried: &TraceContext) -> opentelemetry::Context {
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

    /// The instruments of a server, made from the global meter provider when it is built.
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
        /// now: set the provider before building the server.
        pub(crate) fn new() -> Metrics {
            let meter = opentelemetry::global::meter("modelctx-server");
            Metrics {
                duration: meter
                    .f64_histogram("mcp.server.operation.duration")
                    .with_unit("s")
                    .with_description("The duration of the MCP requests the server answered")
                    .build(),
            }
        }
    }

    /// The gauges of what `shared` has under way, observed while it lives: connections,
    /// handlers and tasks (`Server::load`), with the attribute `mcp.server.name` (the
    /// server's `serverInfo.name`) to tell the servers of one process apart.
    pub(crate) fn gauges(shared: &std::sync::Arc<Shared>) {
        use std::sync::atomic::Ordering::SeqCst;
        let meter = opentelemetry::global::meter("modelctx-server");
        let name = shared
            .config
            .server_info
            .get("name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let gauge =
            |instrument: &'static str, description: &'static str, read: fn(&Shared) -> usize| {
                let shared = std::sync::Arc::downgrade(shared);
                let attributes = [KeyValue::new("mcp.server.name", name.clone())];
                meter
                    .u64_observable_gauge(instrument)
                    .with_description(description)
                    .with_callback(move |observer| {
                        if let Some(shared) = shared.upgrade() {
                            observer.observe(read(&shared) as u64, &attributes);
                        }
                    })
                    .build();
            };
        gauge(
            "mcp.server.connections",
            "Connections served (stdio, in-memory) and HTTP requests being served",
            |s| s.load.connections.load(SeqCst),
        );
        gauge("mcp.server.handlers", "Handlers running", |s| {
            s.load.handlers.load(SeqCst)
        });
        gauge(
            "mcp.server.tasks",
            "Handlers running as tasks in this process",
            |s| s.tasks.running(),
        );
    }

    /// The gauges of what the server's HTTP endpoints hold (`Server::load`), with the attribute
    /// `mcp.server.name`: legacy sessions (`mcp.server.sessions.active`), open SSE streams
    /// (`mcp.server.streams.open`) and the events of the event store
    /// (`mcp.server.event_store.events`, observed only when the store can tell). The
    /// OpenTelemetry semantic conventions for MCP name no such instruments (only the operation
    /// and session durations): these names follow theirs.
    #[cfg(feature = "http")]
    pub(crate) fn transport_gauges(shared: &std::sync::Arc<Shared>) {
        let meter = opentelemetry::global::meter("modelctx-server");
        let name = shared
            .config
            .server_info
            .get("name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        type Read = fn(&Shared) -> Option<usize>;
        let gauges: [(&str, &str, &str, Read); 3] = [
            (
                "mcp.server.sessions.active",
                "{session}",
                "Legacy HTTP sessions held (the 2026-07-28 era has none)",
                |s| Some(s.legacy.transport_load().0),
            ),
            (
                "mcp.server.streams.open",
                "{stream}",
                "SSE streams open: POST response streams, standalone GET streams, listen streams",
                |s| Some(s.legacy.transport_load().1),
            ),
            (
                "mcp.server.event_store.events",
                "{event}",
                "Events the event store holds for resumption",
                |s| s.legacy.transport_load().2,
            ),
        ];
        for (instrument, unit, description, read) in gauges {
            let shared = std::sync::Arc::downgrade(shared);
            let attributes = [KeyValue::new("mcp.server.name", name.clone())];
            meter
                .u64_observable_gauge(instrument)
                .with_unit(unit)
                .with_description(description)
                .with_callback(move |observer| {
                    if let Some(value) = shared.upgrade().and_then(|shared| read(&shared)) {
                        observer.observe(value as u64, &attributes);
                    }
                })
                .build();
        }
    }

    impl Metrics {
        /// The measure of `request`, started now; `target` gives what the request names (for
        /// `tools/call` and `prompts/get`).
        pub(super) fn start(
            &self,
            request: &IncomingRequest,
            target: impl FnOnce() -> Option<String>,
        ) -> Option<Timing> {
            let target = match request.method.as_str() {
                ToolsCall::VALUE => target().map(|t| ("gen_ai.tool.name", t)),
                PromptsGet::VALUE => target().map(|t| ("gen_ai.prompt.name", t)),
                _ => None,
            };
            Some(Timing {
                start: Instant::now(),
                metrics: self.clone(),
                method: method_value(&request.method),
                version: request.version.as_str(),
                target,
            })
        }
    }

    /// The method as an attribute value: the names of the methods a server answers are static
    /// (no copy); another method's name is copied.
    fn method_value(method: &str) -> StringValue {
        match crate::wire::known_method(method) {
            Some(known) => StringValue::from(known),
            None => StringValue::from(method.to_owned()),
        }
    }

    /// The measure of one request under way.
    pub(super) struct Timing {
        start: Instant,
        metrics: Metrics,
        method: StringValue,
        version: &'static str,
        /// The attribute of the request's target and its value.
        target: Option<(&'static str, String)>,
    }

    impl Timing {
        /// Records the request's duration, with `error` as its `error.type` (when it failed).
        pub(super) fn finish(self, error: Option<&str>) {
            let seconds = self.start.elapsed().as_secs_f64();
            // The attributes on the stack: 2 to 4 of them, no vector.
            let none = || KeyValue::new("", "");
            let mut attributes = [
                KeyValue::new("mcp.method.name", self.method),
                KeyValue::new("mcp.protocol.version", self.version),
                none(),
                none(),
            ];
            let mut count = 2;
            if let Some((key, target)) = self.target {
                attributes[count] = KeyValue::new(key, target);
                count += 1;
            }
            if let Some(error) = error {
                attributes[count] = KeyValue::new("error.type", error.to_owned());
                count += 1;
            }
            self.metrics.duration.record(seconds, &attributes[..count]);
        }
    }

    /// Makes `parent` (a remote span context read from `_meta`) the parent of `span`.
    pub(super) fn set_parent(span: &Span, parent: opentelemetry::Context) {
        let _ = span.set_parent(parent);
    }

    /// Puts the trace context of `span` in `params._meta`.
    pub(super) fn inject_params(params: &mut JsonObject, span: &Span) {
        let context = span.context();
        inject(&context, params);
    }
}

#[cfg(test)]
pub(crate) mod capture {
    //! A `tracing` subscriber that keeps the spans and events of [`TARGET`] (their fields as
    //! text and their parents), for the tests of the spans.

    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    /// A span as seen.
    #[derive(Debug, Clone)]
    pub(crate) struct SpanSeen {
        pub(crate) id: u64,
        pub(crate) name: &'static str,
        pub(crate) parent: Option<u64>,
        pub(crate) fields: BTreeMap<String, String>,
    }

    /// An event as seen.
    #[derive(Debug, Clone)]
    pub(crate) struct EventSeen {
        pub(crate) span: Option<u64>,
        pub(crate) fields: BTreeMap<String, String>,
    }

    #[derive(Default)]
    struct Book {
        spans: Vec<SpanSeen>,
        events: Vec<EventSeen>,
        stack: Vec<u64>,
    }

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

    /// The subscriber; clones share what it saw.
    #[derive(Clone, Default)]
    pub(crate) struct Capture(Arc<Mutex<Book>>);

    struct Fields<'a>(&'a mut BTreeMap<String, String>);

    impl Visit for Fields<'_> {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.insert(field.name().to_owned(), format!("{value:?}"));
        }
    }

    impl Capture {
        /// The spans seen, in the order they were made.
        pub(crate) fn spans(&self) -> Vec<SpanSeen> {
            self.0.lock().unwrap().spans.clone()
        }

        /// The events seen.
        pub(crate) fn events(&self) -> Vec<EventSeen> {
            self.0.lock().unwrap().events.clone()
        }

        /// The spans named `name`.
        pub(crate) fn named(&self, name: &str) -> Vec<SpanSeen> {
            self.spans()
                .into_iter()
                .filter(|s| s.name == name)
                .collect()
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.target().starts_with(super::TARGET)
        }

        fn new_span(&self, attributes: &Attributes<'_>) -> Id {
            let mut book = self.0.lock().unwrap();
            let id = book.spans.len() as u64 + 1;
            let parent = if attributes.is_root() {
                None
            } else if let Some(parent) = attributes.parent() {
                Some(parent.into_u64())
            } else {
                book.stack.last().copied()
            };
            let mut fields = BTreeMap::new();
            attributes.record(&mut Fields(&mut fields));
            book.spans.push(SpanSeen {
                id,
                name: attributes.metadata().name(),
                parent,
                fields,
            });
            Id::from_u64(id)
        }

        fn record(&self, span: &Id, values: &Record<'_>) {
            let mut book = self.0.lock().unwrap();
            let index = span.into_u64() as usize - 1;
            values.record(&mut Fields(&mut book.spans[index].fields));
        }

        fn record_follows_from(&self, _: &Id, _: &Id) {}

        fn event(&self, event: &Event<'_>) {
            let mut book = self.0.lock().unwrap();
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            let span = event
                .parent()
                .map(Id::into_u64)
                .or_else(|| book.stack.last().copied());
            book.events.push(EventSeen { span, fields });
        }

        fn enter(&self, span: &Id) {
            self.0.lock().unwrap().stack.push(span.into_u64());
        }

        fn exit(&self, span: &Id) {
            let mut book = self.0.lock().unwrap();
            if let Some(at) = book.stack.iter().rposition(|s| *s == span.into_u64()) {
                book.stack.remove(at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use modelctx_types::{Incoming, Message, decode_str, meta_keys};
    use serde_json::{Value, json};

    use super::capture::{Capture, scoped};
    use super::*;
    use crate::{Frame, NoArgs, Prompt, PromptMessage, Server, Tool, ToolOutput};

    async fn hello(_: NoArgs) -> &'static str {
        "hello"
    }

    async fn broken(_: NoArgs) -> ToolOutput {
        ToolOutput::error("it broke")
    }

    async fn steps(context: crate::Context, _: NoArgs) -> &'static str {
        for step in 1..=2 {
            let _ = context
                .progress(f64::from(step), Some(2.0), Some("stepping"))
                .await;
        }
        "done"
    }

    async fn roots(context: crate::Context, _: NoArgs) -> String {
        match context.list_roots().await {
            Ok(_) => "roots".to_owned(),
            Err(e) => e.to_string(),
        }
    }

    async fn greet(_: NoArgs) -> Vec<PromptMessage> {
        vec![PromptMessage::user("hi")]
    }

    fn server() -> Server {
        Server::builder("s", "1.0.0")
            .tool(Tool::new("hello", hello))
            .tool(Tool::new("broken", broken))
            .tool(Tool::new("steps", steps))
            .tool(Tool::new("roots", roots))
            .prompt(Prompt::new("greet", greet))
            .build()
    }

    /// A modern request, answered: its response or error as JSON.
    async fn ask(server: &Server, id: u64, method: &str, mut params: Value) -> Value {
        params["_meta"][meta_keys::PROTOCOL_VERSION] = json!("2026-07-28");
        params["_meta"][meta_keys::CLIENT_CAPABILITIES] = json!({});
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let Ok(Incoming::Single(request)) = decode_str(&request.to_string()) else {
            panic!("one message")
        };
        let mut memory = server.in_memory();
        assert!(memory.send(request).await);
        loop {
            match memory.recv().await {
                Some(Frame::Single(Message::Response(answer))) => {
                    return serde_json::from_str(answer.result.get()).unwrap();
                }
                Some(Frame::Single(Message::Error(error))) => {
                    return serde_json::to_value(&error.error).unwrap();
                }
                Some(_) => continue,
                None => panic!("the connection ended"),
            }
        }
    }

    fn field<'a>(span: &'a capture::SpanSeen, name: &str) -> Option<&'a str> {
        span.fields.get(name).map(String::as_str)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_tool_call_has_a_server_span_with_the_semantic_convention_attributes() {
        let capture = Capture::default();
        let _default = scoped(capture.clone());
        let server = server();
        let answer = ask(&server, 7, ToolsCall::VALUE, json!({"name": "hello"})).await;
        assert_eq!(answer["content"][0]["text"], "hello");
        let spans = capture.named("mcp.server.request");
        assert_eq!(spans.len(), 1, "{spans:?}");
        let span = &spans[0];
        assert_eq!(field(span, "otel.name"), Some("tools/call hello"));
        assert_eq!(field(span, "otel.kind"), Some("server"));
        assert_eq!(field(span, "mcp.method.name"), Some("tools/call"));
        assert_eq!(field(span, "mcp.protocol.version"), Some("2026-07-28"));
        assert_eq!(field(span, "jsonrpc.request.id"), Some("7"));
        assert_eq!(field(span, "gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(field(span, "gen_ai.tool.name"), Some("hello"));
        assert_eq!(field(span, "network.transport"), Some("pipe"));
        assert_eq!(field(span, "error.type"), None);
        assert_eq!(field(span, "otel.status_code"), None);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn errors_and_failed_tools_set_error_type() {
        let capture = Capture::default();
        let _default = scoped(capture.clone());
        let server = server();
        let unknown = ask(&server, 1, ToolsCall::VALUE, json!({"name": "nope"})).await;
        assert_eq!(unknown["code"], -32602);
        let failed = ask(&server, 2, ToolsCall::VALUE, json!({"name": "broken"})).await;
        assert_eq!(failed["isError"], true);
        let missing = ask(&server, 3, PromptsGet::VALUE, json!({"name": "nope"})).await;
        assert_eq!(missing["code"], -32602);
        let spans = capture.named("mcp.server.request");
        assert_eq!(spans.len(), 3, "{spans:?}");
        assert_eq!(field(&spans[0], "error.type"), Some("-32602"));
        assert_eq!(field(&spans[0], "rpc.response.status_code"), Some("-32602"));
        assert_eq!(field(&spans[0], "otel.status_code"), Some("ERROR"));
        assert_eq!(field(&spans[1], "otel.name"), Some("tools/call broken"));
        assert_eq!(field(&spans[1], "error.type"), Some("tool_error"));
        assert_eq!(field(&spans[1], "rpc.response.status_code"), None);
        assert_eq!(field(&spans[1], "otel.status_code"), Some("ERROR"));
        assert_eq!(field(&spans[2], "otel.name"), Some("prompts/get nope"));
        assert_eq!(field(&spans[2], "gen_ai.prompt.name"), Some("nope"));
        assert_eq!(field(&spans[2], "error.type"), Some("-32602"));
    }

    /// `error.type` of a tool's result: only a top-level `isError: true` makes one; the name
    /// elsewhere (in a text, in structured content) does not.
    #[test]
    fn only_a_top_level_is_error_marks_a_failed_tool() {
        let raw = |v: serde_json::Value| Ok(serde_json::value::to_raw_value(&v).unwrap());
        let failed = raw(json!({"content": [], "isError": true}));
        assert_eq!(error_type(&failed, true).as_deref(), Some("tool_error"));
        assert_eq!(error_type(&failed, false), None);
        for fine in [
            json!({"content": [{"type": "text", "text": "{\"isError\": true}"}]}),
            json!({"content": [], "structuredContent": {"isError": true}}),
            json!({"content": [], "isError": false}),
            json!({"content": []}),
        ] {
            assert_eq!(error_type(&raw(fine.clone()), true), None, "{fine}");
        }
        let refused = Err(ErrorObject::new(
            modelctx_types::ErrorCode::INVALID_PARAMS,
            "no",
        ));
        assert_eq!(error_type(&refused, true).as_deref(), Some("-32602"));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_prompt_names_its_span_and_progress_is_an_event_in_the_span() {
        let capture = Capture::default();
        let _default = scoped(capture.clone());
        let server = server();
        let got = ask(&server, 1, PromptsGet::VALUE, json!({"name": "greet"})).await;
        assert!(got["messages"].is_array(), "{got}");
        let done = ask(
            &server,
            2,
            ToolsCall::VALUE,
            json!({"name": "steps", "_meta": {"progressToken": "p"}}),
        )
        .await;
        assert_eq!(done["content"][0]["text"], "done");
        let spans = capture.named("mcp.server.request");
        assert_eq!(field(&spans[0], "otel.name"), Some("prompts/get greet"));
        assert_eq!(field(&spans[0], "gen_ai.prompt.name"), Some("greet"));
        assert_eq!(field(&spans[0], "gen_ai.operation.name"), None);
        let steps = spans[1].id;
        let progress: Vec<_> = capture
            .events()
            .into_iter()
            .filter(|e| e.fields.get("message").map(String::as_str) == Some("progress"))
            .collect();
        assert_eq!(progress.len(), 2, "{:?}", capture.events());
        assert!(
            progress.iter().all(|e| e.span == Some(steps)),
            "{progress:?}"
        );
        assert_eq!(progress[1].fields["progress"], "2.0");
        assert_eq!(progress[1].fields["progress.total"], "2.0");
        assert_eq!(progress[1].fields["progress.message"], "stepping");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_question_has_a_client_span_under_the_request() {
        let capture = Capture::default();
        let _default = scoped(capture.clone());
        let server = server();
        // The client declared no roots: the question fails at once, in its span.
        let _ = ask(&server, 1, ToolsCall::VALUE, json!({"name": "roots"})).await;
        let request = &capture.named("mcp.server.request")[0];
        let questions = capture.named("mcp.server.question");
        assert_eq!(questions.len(), 1, "{questions:?}");
        let question = &questions[0];
        assert_eq!(question.parent, Some(request.id));
        assert_eq!(field(question, "otel.name"), Some("roots/list"));
        assert_eq!(field(question, "otel.kind"), Some("client"));
        assert_eq!(field(question, "mcp.method.name"), Some("roots/list"));
        assert_eq!(field(question, "error.type"), Some("not_supported"));
        assert_eq!(field(question, "otel.status_code"), Some("ERROR"));
    }

    #[test]
    fn a_session_id_is_recorded_as_a_stable_digest() {
        let id = "0b7b3c5e6f1a4d2e9c8b7a6f5e4d3c2b";
        let digest = session_digest(id);
        assert_eq!(digest, session_digest(id));
        assert_eq!(digest.len(), 16);
        assert!(!digest.contains(id) && !id.contains(&digest));
        assert_ne!(digest, session_digest("another"));
        // FNV-1a 64 of the empty string is its offset basis.
        assert_eq!(session_digest(""), "cbf29ce484222325");
    }
}

#[cfg(all(test, feature = "otel"))]
mod otel_tests {
    use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
    use serde_json::{Value, json};

    use super::otel::{extract, inject};
    use modelctx_types::JsonObject;
    use modelctx_types::trace_context::TraceContext;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    fn meta(value: Value) -> JsonObject {
        let Value::Object(meta) = value else {
            panic!("an object")
        };
        meta
    }

    fn parent(meta_value: Value) -> Option<SpanContext> {
        TraceContext::from_meta(&meta(meta_value))
            .map(|carried| extract(&carried).span().span_context().clone())
    }

    #[test]
    fn a_valid_traceparent_is_the_remote_parent() {
        let parent = parent(json!({
            "traceparent": format!("00-{TRACE}-{SPAN}-01"),
            "tracestate": "vendor=value,other=x",
        }))
        .expect("a parent");
        assert_eq!(parent.trace_id().to_string(), TRACE);
        assert_eq!(parent.span_id().to_string(), SPAN);
        assert!(parent.is_remote());
        assert!(parent.is_sampled());
        assert_eq!(parent.trace_state().get("vendor"), Some("value"));
        let unsampled = self::parent(json!({"traceparent": format!("00-{TRACE}-{SPAN}-00")}))
            .expect("a parent");
        assert!(!unsampled.is_sampled());
    }

    /// The carrier's rules are `modelctx_types::trace_context`'s (tested there); what is left
    /// here is the conversion: a malformed carrier is no parent, a bad trace state loses the
    /// state only.
    #[test]
    fn a_malformed_carrier_is_ignored() {
        for bad in [
            json!({}),
            json!({"traceparent": 7}),
            json!({"traceparent": "garbage"}),
            json!({"traceparent": format!("00-{}-{SPAN}-01", "0".repeat(32))}),
        ] {
            assert!(parent(bad.clone()).is_none(), "{bad}");
        }
        let parent = parent(json!({
            "traceparent": format!("00-{TRACE}-{SPAN}-01"),
            "tracestate": "not a state ===",
        }))
        .expect("a parent");
        assert_eq!(parent.trace_state().header(), "");
    }

    #[test]
    fn inject_writes_what_extract_reads() {
        let state = "vendor=value".parse::<TraceState>().unwrap();
        let span = SpanContext::new(
            opentelemetry::trace::TraceId::from_hex(TRACE).unwrap(),
            opentelemetry::trace::SpanId::from_hex(SPAN).unwrap(),
            TraceFlags::SAMPLED,
            false,
            state,
        );
        let context = opentelemetry::Context::new().with_remote_span_context(span);
        let mut params = meta(json!({"name": "t", "_meta": {"progressToken": 1}}));
        inject(&context, &mut params);
        assert_eq!(
            params["_meta"],
            json!({
                "progressToken": 1,
                "traceparent": format!("00-{TRACE}-{SPAN}-01"),
                "tracestate": "vendor=value",
            })
        );
        let read = parent(params["_meta"].clone()).unwrap();
        assert_eq!(read.span_id().to_string(), SPAN);
        // No valid context: nothing written; `_meta` that is not an object: left alone.
        let mut untouched = meta(json!({"name": "t"}));
        inject(&opentelemetry::Context::new(), &mut untouched);
        assert_eq!(Value::Object(untouched), json!({"name": "t"}));
        let mut odd = meta(json!({"_meta": 3}));
        inject(&context, &mut odd);
        assert_eq!(Value::Object(odd), json!({"_meta": 3}));
    }
}
