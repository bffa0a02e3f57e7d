//! From the rounds to the figures: the median round of every cell, and the targets checked
//! against them.

use serde_json::Value;

use super::*;

pub(super) fn summary(kind: Kind, f: &Value) -> String {
    match kind {
        Kind::Throughput => format!(
            "{:>9.0} calls/s  p50 {:>7.1} µs  cpu {:>6.1} µs/call",
            num(f, "calls_per_s"),
            num(f, "p50_us"),
            num(f, "cpu_us_per_call")
        ),
        Kind::IdleSessions => format!("{:.0} bytes per session", num(f, "bytes_per_session")),
        Kind::Churn => format!(
            "RSS {:.0} -> {:.0} KiB",
            num(f, "rss_before_kib"),
            num(f, "rss_after_kib")
        ),
        Kind::Cold => format!("median {:.1} ms", num(f, "median_us") / 1000.0),
    }
}

pub(super) fn num(figures: &Value, key: &str) -> f64 {
    figures[key].as_f64().unwrap_or(0.0)
}

/// The round with the median of what the workload is about.
pub(super) fn median(kind: Kind, runs: &[Value]) -> Value {
    let key = |f: &Value| match kind {
        Kind::Throughput => num(f, "calls_per_s"),
        Kind::IdleSessions => num(f, "bytes_per_session"),
        Kind::Churn => num(f, "rss_after_kib") - num(f, "rss_before_kib"),
        Kind::Cold => num(f, "median_us"),
    };
    let mut runs = runs.to_vec();
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    runs.get(runs.len() / 2).cloned().unwrap_or(Value::Null)
}

/// The median figures of every cell: `[workload][implementation]`.
pub(super) type Medians = Vec<Vec<Value>>;

pub(super) fn medians(results: &[Vec<Vec<Value>>]) -> Medians {
    WORKLOADS
        .iter()
        .zip(results)
        .map(|(w, runs)| runs.iter().map(|r| median(w.kind, r)).collect())
        .collect()
}

/// The median figures of `implementation` in workload `name`.
fn cell<'a>(medians: &'a Medians, name: &str, implementation: &str) -> Option<&'a Value> {
    let w = WORKLOADS.iter().position(|w| w.name == name)?;
    let i = WORKLOADS[w]
        .implementations
        .iter()
        .position(|i| i.name == implementation)?;
    medians.get(w)?.get(i)
}

/// One target: what it asks, what was measured, whether it holds, and what bounds it when not
/// (the key of its section in `bounds.md`).
pub(super) struct Verdict {
    pub(super) target: &'static str,
    pub(super) measured: String,
    pub(super) holds: Option<bool>,
    pub(super) bound: &'static str,
}

pub(super) fn verdicts(m: &Medians, build: Option<&Value>) -> Vec<Verdict> {
    let get = |w: &str, i: &str, key: &str| cell(m, w, i).map_or(0.0, |f| num(f, key));
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let mut out = Vec::new();

    let s2 = ratio(
        get("S2", MODELCTX_STDIO.name, "calls_per_s"),
        get("S2", RAW_STDIO.name, "calls_per_s"),
    );
    out.push(Verdict {
        target: "S2: stdio pipelined ≥ 80% of the raw limit's throughput",
        measured: format!("{:.0}%", s2 * 100.0),
        holds: Some(s2 >= 0.8),
        bound: "S2",
    });
    let s2_cpu = ratio(
        get("S2", MODELCTX_STDIO.name, "cpu_us_per_call"),
        get("S2", RAW_STDIO.name, "cpu_us_per_call"),
    );
    out.push(Verdict {
        target: "S2: server CPU per call ≤ 2x the raw limit's",
        measured: format!("{s2_cpu:.1}x"),
        holds: Some(s2_cpu <= 2.0),
        bound: "S2",
    });
    for (w, era, rmcp) in [
        ("H3-16", "legacy", &[RMCP_SESSION, RMCP_STATELESS][..]),
        ("H4-16", "modern", &[RMCP_STATELESS][..]),
    ] {
        let ours = get(w, MODELCTX_HTTP.name, "calls_per_s");
        let best = rmcp
            .iter()
            .map(|i| get(w, i.name, "calls_per_s"))
            .fold(0.0, f64::max);
        let x = ratio(ours, best);
        out.push(Verdict {
            target: if era == "legacy" {
                "H3-16: HTTP, 16 clients, legacy: ≥ 2x rmcp (its faster mode)"
            } else {
                "H4-16: HTTP, 16 clients, modern: ≥ 2x rmcp"
            },
            measured: format!("{x:.2}x"),
            holds: Some(x >= 2.0),
            bound: "HTTP",
        });
        let of_limit = ratio(ours, get(w, RAW_HTTP.name, "calls_per_s"));
        out.push(Verdict {
            target: if era == "legacy" {
                "H3-16: HTTP, 16 clients, legacy: ≥ 70% of bare hyper"
            } else {
                "H4-16: HTTP, 16 clients, modern: ≥ 70% of bare hyper"
            },
            measured: format!("{:.0}%", of_limit * 100.0),
            holds: Some(of_limit >= 0.7),
            bound: "HTTP",
        });
    }
    for (w, ours, raw, target) in [
        (
            "S1",
            MODELCTX_STDIO,
            RAW_STDIO,
            "S1: stdio sequential p50 within 1.2x of the limit's",
        ),
        (
            "H1",
            MODELCTX_HTTP,
            RAW_HTTP,
            "H1: HTTP sequential p50 within 1.2x of bare hyper's",
        ),
        (
            "H2",
            MODELCTX_SSE,
            RAW_SSE,
            "H2: HTTP sequential (SSE) p50 within 1.2x of bare hyper's",
        ),
    ] {
        let x = ratio(get(w, ours.name, "p50_us"), get(w, raw.name, "p50_us"));
        out.push(Verdict {
            target,
            measured: format!("{x:.2}x"),
            holds: Some(x <= 1.2),
            bound: "SEQUENTIAL",
        });
    }
    let idle = get("M1", MODELCTX_HTTP.name, "bytes_per_session") / 1024.0;
    out.push(Verdict {
        target: "M1: ≤ 4 KiB per idle legacy session",
        measured: format!("{idle:.1} KiB"),
        holds: Some(idle <= 4.0),
        bound: "M1",
    });
    let churn = get("M2", MODELCTX_HTTP.name, "rss_after_kib")
        - get("M2", MODELCTX_HTTP.name, "rss_before_kib");
    out.push(Verdict {
        target: "M2: RSS grows < 1 MiB after 10 000 legacy sessions",
        measured: format!("{:.2} MiB", churn / 1024.0),
        holds: Some(churn < 1024.0),
        bound: "M2",
    });
    // B1, by folder, so that a record of other programs is never compared.
    let program = |folder: &str| {
        build.and_then(|b| {
            b["servers"]
                .as_array()?
                .iter()
                .find(|s| s["folder"] == folder)
                .cloned()
        })
    };
    let (ours, rmcp, floor) = (program(B1_MODELCTX), program(B1_RMCP), program(B1_FLOOR));
    let not_measured = || ("not measured".to_owned(), None);
    let of_rmcp = match (&ours, &rmcp) {
        (Some(ours), Some(rmcp)) => {
            let x = ratio(num(ours, "secs"), num(rmcp, "secs"));
            (format!("{x:.2}x rmcp's"), Some(x <= 1.0))
        }
        _ => not_measured(),
    };
    let of_floor = match (&ours, &floor) {
        (Some(ours), Some(floor)) => {
            let x = ratio(num(ours, "secs"), num(floor, "secs"));
            (format!("{x:.2}x the floor's"), Some(x <= 1.3))
        }
        _ => not_measured(),
    };
    let crates = match &ours {
        Some(ours) => {
            let n = num(ours, "crates");
            (format!("{n:.0}"), Some(n <= 45.0))
        }
        None => not_measured(),
    };
    for (target, (measured, holds), bound) in [
        (
            "B1: the minimal stdio server (default features) builds clean in ≤ rmcp's time",
            of_rmcp,
            "B1_TIME",
        ),
        ("B1: … within 1.3x of the floor", of_floor, "B1_TIME"),
        ("B1: … with ≤ 45 crates", crates, "B1_CRATES"),
    ] {
        out.push(Verdict {
            target,
            measured,
            holds,
            bound,
        });
    }
    out
}
