//! The W3C trace context a request carries in `params._meta`: `traceparent` and `tracestate`,
//! the keys the OpenTelemetry semantic conventions for MCP (and the Python SDK) use, in both
//! directions. Read and written as plain data: no OpenTelemetry types here; the facades
//! (`modelctx-server`, `modelctx-client`, feature `otel`) convert a [`TraceContext`] to and from
//! theirs.
//!
//! A carrier that is missing or malformed is no trace context ([`TraceContext::from_meta`] gives
//! `None`), never an error: a request is answered the same with or without one.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::JsonObject;

/// The `_meta` key of the W3C trace parent (`00-<trace id>-<span id>-<flags>`).
pub const TRACEPARENT: &str = "traceparent";
/// The `_meta` key of the W3C trace state (vendor `key=value` pairs).
pub const TRACESTATE: &str = "tracestate";

/// The W3C trace flag of a sampled trace.
const SAMPLED: u8 = 0x01;

/// A W3C trace context: the remote span a request continues, as its carrier names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceContext {
    /// The trace id (16 bytes, never all zero).
    pub trace_id: [u8; 16],
    /// The id of the span the request continues (8 bytes, never all zero).
    pub span_id: [u8; 8],
    /// Whether the trace is sampled (the one trace flag W3C defines).
    pub sampled: bool,
    /// The `tracestate` text as it came, when it is text; not checked here (the facades parse
    /// it, and drop a malformed one without dropping the parent). `None`: no trace state.
    pub trace_state: Option<String>,
}

impl TraceContext {
    /// The context of span `span_id` in trace `trace_id`, with no trace state. `None` when
    /// either id is all zero (the W3C invalid ids).
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], sampled: bool) -> Option<TraceContext> {
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            sampled,
            trace_state: None,
        })
    }

    /// This context with `state` as its `tracestate` (an empty one is none).
    pub fn with_trace_state(mut self, state: impl Into<String>) -> TraceContext {
        let state = state.into();
        self.trace_state = (!state.is_empty()).then_some(state);
        self
    }

    /// The trace context `meta` (a request's `params._meta`) carries: its `traceparent` and, when
    /// it is text, its `tracestate`. `None` when there is no `traceparent` or it is malformed: not
    /// text, not four dash-separated lowercase hex fields of 2, 32, 16 and 2 digits, version
    /// `ff`, more fields than version `00` has (a later version may add some, which are read
    /// past), or an all-zero id. Surrounding whitespace is ignored.
    pub fn from_meta(meta: &JsonObject) -> Option<TraceContext> {
        TraceContext::from_header(
            meta.get(TRACEPARENT)?.as_str()?,
            meta.get(TRACESTATE).and_then(Value::as_str),
        )
    }

    /// The trace context of `meta`, a request's `params._meta` as raw JSON: what
    /// [`TraceContext::from_meta`] reads from the object, read without building it (only the
    /// two members are looked at, borrowed unless they have escapes). `None` as well when `meta`
    /// is not an object, or has one of the two members twice.
    pub fn from_raw_meta(meta: &RawValue) -> Option<TraceContext> {
        #[derive(Deserialize)]
        struct Carrier<'a> {
            #[serde(borrow, default)]
            traceparent: Option<&'a RawValue>,
            #[serde(borrow, default)]
            tracestate: Option<&'a RawValue>,
        }
        let text = |raw: &RawValue| serde_json::from_str::<Cow<'_, str>>(raw.get()).ok();
        let carrier = serde_json::from_str::<Carrier<'_>>(meta.get()).ok()?;
        let traceparent = text(carrier.traceparent?)?;
        let tracestate = carrier.tracestate.and_then(text);
        TraceContext::from_header(&traceparent, tracestate.as_deref())
    }

    /// The trace context of a `traceparent` text and, when there is one, a `tracestate` text:
    /// what [`TraceContext::from_meta`] reads from `_meta`, by the same rules, for a caller that
    /// took the two members out itself (without building the `_meta` object).
    pub fn from_header(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let version = hex::<1>(version)?;
        if version == [0xff] || (version == [0x00] && parts.next().is_some()) {
            return None;
        }
        let context =
            TraceContext::new(hex(trace)?, hex(span)?, hex::<1>(flags)?[0] & SAMPLED != 0)?;
        Some(match tracestate {
            Some(state) => context.with_trace_state(state),
            None => context,
        })
    }

    /// The `traceparent` text of this context (version `00`).
    pub fn traceparent(&self) -> String {
        let mut text = String::with_capacity(55);
        text.push_str("00-");
        push_hex(&mut text, &self.trace_id);
        text.push('-');
        push_hex(&mut text, &self.span_id);
        text.push('-');
        push_hex(&mut text, &[if self.sampled { SAMPLED } else { 0 }]);
        text
    }

    /// Puts this context in `params._meta`: its `traceparent`, and its `tracestate` when it has
    /// one (replacing those members; `_meta` made when missing). Nothing is written when
    /// `params._meta` is there and is not an object.
    pub fn inject(&self, params: &mut JsonObject) {
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(JsonObject::new()));
        let Value::Object(meta) = meta else {
            return;
        };
        meta.insert(TRACEPARENT.into(), Value::String(self.traceparent()));
        if let Some(state) = &self.trace_state {
            meta.insert(TRACESTATE.into(), Value::String(state.clone()));
        }
    }
}

/// `N` bytes from exactly `2 * N` lowercase hex digits.
fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let digit = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        _ => None,
    };
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// Appends `bytes` as lowercase hex digits.
fn push_hex(text: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        text.push(DIGITS[usize::from(byte >> 4)] as char);
        text.push(DIGITS[usize::from(byte & 0x0f)] as char);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    fn object(value: Value) -> JsonObject {
        let Value::Object(object) = value else {
            panic!("an object")
        };
        object
    }

    fn read(meta: Value) -> Option<TraceContext> {
        TraceContext::from_meta(&object(meta))
    }

    #[test]
    fn a_valid_traceparent_is_read_with_its_state() {
        let context = read(json!({
            "traceparent": format!("00-{TRACE}-{SPAN}-01"),
            "tracestate": "vendor=value,other=x",
        }))
        .expect("a context");
        assert_eq!(context.trace_id[..2], [0x4b, 0xf9]);
        assert_eq!(context.trace_id[15], 0x36);
        assert_eq!(
            context.span_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert!(context.sampled);
        assert_eq!(context.trace_state.as_deref(), Some("vendor=value,other=x"));
        assert_eq!(context.traceparent(), format!("00-{TRACE}-{SPAN}-01"));
        // Not sampled; flags other than `sampled` are not kept; whitespace around is ignored.
        let unsampled = read(json!({"traceparent": format!(" 00-{TRACE}-{SPAN}-02 ")})).unwrap();
        assert!(!unsampled.sampled);
        assert_eq!(unsampled.trace_state, None);
        assert_eq!(unsampled.traceparent(), format!("00-{TRACE}-{SPAN}-00"));
        // A later version's extra fields are read past.
        assert!(read(json!({"traceparent": format!("01-{TRACE}-{SPAN}-01-later")})).is_some());
    }

    #[test]
    fn a_malformed_carrier_is_no_context() {
        for bad in [
            json!({}),
            json!({"traceparent": 7}),
            json!({"traceparent": null}),
            json!({"traceparent": ""}),
            json!({"traceparent": "garbage"}),
            json!({"traceparent": "00-xyz"}),
            json!({"traceparent": format!("00-{TRACE}-{SPAN}")}),
            json!({"traceparent": format!("00-{TRACE}-{SPAN}-01-extra")}),
            json!({"traceparent": format!("ff-{TRACE}-{SPAN}-01")}),
            json!({"traceparent": format!("00-{}-{SPAN}-01", TRACE.to_uppercase())}),
            json!({"traceparent": format!("00-{}-{SPAN}-01", "0".repeat(32))}),
            json!({"traceparent": format!("00-{TRACE}-{}-01", "0".repeat(16))}),
            json!({"traceparent": format!("00-{}-{SPAN}-01", &TRACE[1..])}),
            json!({"traceparent": format!("00-{TRACE}-{SPAN}-1")}),
            json!({"traceparent": format!("0g-{TRACE}-{SPAN}-01")}),
            json!({"traceparent": format!("00-{TRACE}-{SPAN}-0x")}),
        ] {
            assert_eq!(read(bad.clone()), None, "{bad}");
        }
        // A trace state that is not text is no state; the parent stays.
        let context = read(json!({
            "traceparent": format!("00-{TRACE}-{SPAN}-01"),
            "tracestate": 3,
        }))
        .expect("a context");
        assert_eq!(context.trace_state, None);
    }

    #[test]
    fn from_header_reads_the_two_texts_by_the_rules_of_from_meta() {
        let parent = format!("00-{TRACE}-{SPAN}-01");
        let context = TraceContext::from_header(&parent, Some("vendor=value")).unwrap();
        assert_eq!(
            Some(context.clone()),
            read(json!({"traceparent": parent, "tracestate": "vendor=value"}))
        );
        assert_eq!(context.trace_state.as_deref(), Some("vendor=value"));
        // An empty state is none; a malformed parent is no context.
        let stateless = TraceContext::from_header(&format!(" {parent} "), Some("")).unwrap();
        assert_eq!(stateless.trace_state, None);
        assert_eq!(TraceContext::from_header("00-xyz", None), None);
    }

    /// What is read from the raw `_meta` is what `from_meta` reads from the object, for
    /// carriers good and bad.
    #[test]
    fn from_raw_meta_reads_what_from_meta_reads() {
        let good = format!("00-{TRACE}-{SPAN}-01");
        for meta in [
            json!({"traceparent": good, "tracestate": "vendor=value"}),
            json!({"traceparent": good, "tracestate": 3, "other": {"deep": [1, "x"]}}),
            json!({"progressToken": 1, "traceparent": format!(" {good} ")}),
            json!({"traceparent": 7}),
            json!({"traceparent": null}),
            json!({"traceparent": "garbage"}),
            json!({}),
        ] {
            let raw = RawValue::from_string(meta.to_string()).unwrap();
            assert_eq!(
                TraceContext::from_raw_meta(&raw),
                read(meta.clone()),
                "{meta}"
            );
        }
        // Escapes are read as JSON reads them; `_meta` that is no object carries nothing.
        let escaped = format!(r#"{{"traceparent":"00-{TRACE}-{SPAN}-\u0030\u0031"}}"#);
        let escaped = RawValue::from_string(escaped).unwrap();
        assert!(TraceContext::from_raw_meta(&escaped).is_some_and(|c| c.sampled));
        for odd in ["[1]", "\"traceparent\"", "null"] {
            let odd = RawValue::from_string(odd.to_owned()).unwrap();
            assert_eq!(TraceContext::from_raw_meta(&odd), None);
        }
    }

    #[test]
    fn inject_writes_what_from_meta_reads() {
        let context = read(json!({"traceparent": format!("00-{TRACE}-{SPAN}-01")}))
            .unwrap()
            .with_trace_state("vendor=value");
        let mut params = object(json!({"name": "t", "_meta": {"progressToken": 1}}));
        context.inject(&mut params);
        assert_eq!(
            params["_meta"],
            json!({
                "progressToken": 1,
                "traceparent": format!("00-{TRACE}-{SPAN}-01"),
                "tracestate": "vendor=value",
            })
        );
        assert_eq!(
            TraceContext::from_meta(params["_meta"].as_object().unwrap()),
            Some(context.clone())
        );
        // `_meta` made when missing; no state, no `tracestate`; an empty state is none.
        let mut bare = object(json!({"name": "t"}));
        context.clone().with_trace_state("").inject(&mut bare);
        assert_eq!(
            bare["_meta"],
            json!({"traceparent": format!("00-{TRACE}-{SPAN}-01")})
        );
        // `_meta` that is not an object: left alone.
        let mut odd = object(json!({"_meta": 3}));
        context.inject(&mut odd);
        assert_eq!(Value::Object(odd), json!({"_meta": 3}));
    }

    #[test]
    fn all_zero_ids_are_no_context() {
        assert!(TraceContext::new([0; 16], [1; 8], true).is_none());
        assert!(TraceContext::new([1; 16], [0; 8], true).is_none());
        let context = TraceContext::new([0xab; 16], [0x01; 8], false).unwrap();
        assert_eq!(
            context.traceparent(),
            format!("00-{}-{}-00", "ab".repeat(16), "01".repeat(8))
        );
    }
}
