//! `docs/benchmarks.md`: the targets, one table per workload, and B1.

use std::fmt::Write as _;

use serde_json::Value;

use super::runner::machine;
use super::stats::{medians, num, verdicts};
use super::*;

/// The whole page. `fleet_skipped`: why the fleet rows were not measured, when they were not.
pub(super) fn report(
    results: &[Vec<Vec<Value>>],
    build: Option<(Value, bool)>,
    secs: f64,
    fleet_skipped: Option<&str>,
) -> String {
    let m = medians(results);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Benchmarks\n\n\
         Written by `cargo xtask bench` (issue 10); do not edit by hand. Every server exposes the \
         same `echo` tool (`{{\"text\": string}}` in, the text back as one text block; the text is \
         16 bytes), and one load generator of ours (`bench/src/bin/load.rs`) drives them all, so \
         the servers' own cost is what differs. Each throughput cell is the median (by \
         throughput) of {ROUNDS} rounds of {SECS} s after {WARMUP} s of warm-up; the rounds run \
         every workload against every implementation in turn (interleaved). The server's CPU \
         time per call (utime+stime of the server process over the measured window) is the \
         steadiest figure on a noisy machine; throughput and latency include the load \
         generator, which shares the cores. Peak RSS is the server's VmHWM, which \
         also counts the pages of its binary and libraries that it ran (see Profiles); anon is \
         its private memory (RssAnon) at the end of the window. Ratio: throughput \
         against modelctx's; % of limit: throughput against the limit's of the same table.\n"
    );
    let _ = writeln!(out, "- **Machine**: {}", machine());
    let _ = writeln!(
        out,
        "- **Command**: `cargo xtask bench` (from the repository root; it ran {secs:.0} s; \
         `{B1_ENV}=1 cargo xtask bench` also runs B1, a few minutes more)"
    );
    let _ = writeln!(
        out,
        "- **Servers**: `bench/src/bin/`, `bench/lean/` and `bench/ts/echo.mjs`: modelctx as the \
         README shows it (default features: stdio, http, schemars and validation; the tool's \
         input schema derived by schemars), the first row of each table and the one the targets \
         are about; modelctx (lean), the same server with default features off (`stdio`, `http`; \
         the input schema given by hand), built on its own so that cargo does not unify the \
         features of the two; rmcp 3.11 with default features off (`server`, `transport-io`, \
         `transport-streamable-http-server`; a hand-written `ServerHandler`, served with hyper \
         HTTP/1.1), the TypeScript SDK `@modelcontextprotocol/sdk` 1.32.2 on Node 22 (`McpServer` \
         with a zod schema; `bench/ts/package-lock.json`), and the limits; in H3 and H4 also \
         modelctx with its Redis stores, one instance and two behind nginx (see the note under \
         those tables; they need `redis-server` and `nginx`). Every Rust server runs on tokio's \
         multi-threaded runtime; every TCP connection has `TCP_NODELAY`.\n"
    );

    let build_record = build.as_ref().map(|(record, _)| record);
    let _ = writeln!(
        out,
        "## Targets\n\nMeasured, not asserted: each against this run's figures.\n"
    );
    let _ = writeln!(out, "| target | measured | holds |");
    let _ = writeln!(out, "|---|---:|:---:|");
    let verdicts = verdicts(&m, build_record);
    for v in &verdicts {
        let holds = match v.holds {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        let _ = writeln!(out, "| {} | {} | {holds} |", v.target, v.measured);
    }
    // Each bound once, after every missed target it explains.
    let mut bounds: Vec<(&str, Vec<&str>)> = Vec::new();
    for v in verdicts.iter().filter(|v| v.holds == Some(false)) {
        match bounds.iter_mut().find(|(bound, _)| *bound == v.bound) {
            Some((_, targets)) => targets.push(v.target),
            None => bounds.push((v.bound, vec![v.target])),
        }
    }
    if !bounds.is_empty() {
        let _ = writeln!(out, "\nWhat bounds the targets that do not hold:\n");
        for (bound, targets) in &bounds {
            let _ = writeln!(out, "- **{}**: {}", targets.join("; "), bound_text(bound));
        }
    }
    let _ = writeln!(out);

    for (workload, figures) in WORKLOADS.iter().zip(&m) {
        let _ = writeln!(out, "## {}: {}\n", workload.name, workload.what);
        match workload.kind {
            Kind::Throughput => {
                throughput_table(&mut out, workload, figures);
                if workload
                    .implementations
                    .iter()
                    .any(Implementation::needs_fleet)
                {
                    match fleet_skipped {
                        Some(why) => {
                            let _ = writeln!(
                                out,
                                "\n**The Redis stores rows were not measured in this run**: {why}."
                            );
                        }
                        None => {
                            let _ = writeln!(
                                out,
                                "\n{FLEET_NOTE} {}",
                                fleet_ratios(workload.implementations, figures)
                            );
                        }
                    }
                }
            }
            Kind::IdleSessions => {
                let _ = writeln!(
                    out,
                    "| implementation | RSS before MiB | RSS with 1000 idle sessions MiB | per idle session KiB |"
                );
                let _ = writeln!(out, "|---|---:|---:|---:|");
                for (i, f) in workload.implementations.iter().zip(figures) {
                    let _ = writeln!(
                        out,
                        "| {} | {:.1} | {:.1} | {:.1} |",
                        i.name,
                        num(f, "rss_before_kib") / 1024.0,
                        num(f, "rss_after_kib") / 1024.0,
                        num(f, "bytes_per_session") / 1024.0
                    );
                }
            }
            Kind::Churn => {
                let _ = writeln!(
                    out,
                    "| implementation | RSS before MiB | RSS after 10 000 sessions MiB | growth MiB |"
                );
                let _ = writeln!(out, "|---|---:|---:|---:|");
                for (i, f) in workload.implementations.iter().zip(figures) {
                    let (before, after) = (num(f, "rss_before_kib"), num(f, "rss_after_kib"));
                    let _ = writeln!(
                        out,
                        "| {} | {:.1} | {:.1} | {:.1} |",
                        i.name,
                        before / 1024.0,
                        after / 1024.0,
                        (after - before) / 1024.0
                    );
                }
            }
            Kind::Cold => {
                let _ = writeln!(
                    out,
                    "| implementation | median ms ({COLD_RUNS} starts, median round) | slowest ms |"
                );
                let _ = writeln!(out, "|---|---:|---:|");
                for (i, f) in workload.implementations.iter().zip(figures) {
                    let _ = writeln!(
                        out,
                        "| {} | {:.1} | {:.1} |",
                        i.name,
                        num(f, "median_us") / 1000.0,
                        num(f, "max_us") / 1000.0
                    );
                }
            }
        }
        let _ = writeln!(out);
    }

    let _ = writeln!(
        out,
        "## B1: clean release build of a minimal stdio server (the echo tool)\n"
    );
    match &build {
        Some((record, fresh)) => {
            let when = record["date"].as_str().unwrap_or("?");
            let _ = writeln!(
                out,
                "Each server is its own crate with its own lockfile under `bench/minimal/`, built \
                 with `cargo build --release --locked` in a fresh target folder, one after the \
                 other; crates compiled counts cargo's `Compiling` lines, crates in the tree the \
                 distinct packages of `cargo tree -e normal,build` (the server itself included). \
                 {} on {}.\n",
                if *fresh {
                    format!("Measured in this run ({when})")
                } else {
                    format!(
                        "Not re-measured in this run: the last `{B1_ENV}=1 cargo xtask bench`, \
                         {when}"
                    )
                },
                record["machine"].as_str().unwrap_or("?")
            );
            let _ = writeln!(
                out,
                "| implementation | features | clean build s | crates compiled | crates in the tree |"
            );
            let _ = writeln!(out, "|---|---|---:|---:|---:|");
            for s in record["servers"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "| {} (`bench/minimal/{}`) | {} | {:.1} | {:.0} | {:.0} |",
                    s["name"].as_str().unwrap_or("?"),
                    s["folder"].as_str().unwrap_or("?"),
                    s["features"].as_str().unwrap_or("?"),
                    num(s, "secs"),
                    num(s, "compiled"),
                    num(s, "crates")
                );
            }
        }
        None => {
            let _ = writeln!(out, "Not measured yet: run `{B1_ENV}=1 cargo xtask bench`.");
        }
    }
    // Hand-written: where the time and the memory go, and how to profile again.
    let profiles = verbatim_section(include_str!("bounds.md"), PROFILES)
        .unwrap_or_else(|| format!("(no section `{PROFILES}` in xtask/src/bench/bounds.md)"));
    let _ = writeln!(out, "\n## Profiles\n\n{profiles}");
    out
}

/// The section of `bounds.md` the report ends with, kept as written (lists, tables and command
/// blocks), unlike the bounds, whose lines are joined into one paragraph.
const PROFILES: &str = "PROFILES";

fn throughput_table(out: &mut String, workload: &Workload, figures: &[Value]) {
    let _ = writeln!(
        out,
        "| implementation | calls/s | p50 µs | p99 µs | peak RSS MiB | of it anon MiB | server CPU µs/call | ratio to modelctx | % of limit |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let base = figures.first().map_or(0.0, |f| num(f, "calls_per_s"));
    let limit = workload
        .implementations
        .iter()
        .zip(figures)
        .find(|(i, _)| i.limit)
        .map_or(0.0, |(_, f)| num(f, "calls_per_s"));
    for (i, f) in workload.implementations.iter().zip(figures) {
        if f.is_null() {
            // Not measured in this run (skipped): said under the table.
            continue;
        }
        let calls = num(f, "calls_per_s");
        let ratio = if base > 0.0 { calls / base } else { 0.0 };
        let of_limit = if limit > 0.0 {
            format!("{:.0}%", calls / limit * 100.0)
        } else {
            "—".into()
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} | {} | {:.1} | {ratio:.2} | {of_limit} |",
            i.name,
            calls,
            num(f, "p50_us"),
            num(f, "p99_us"),
            num(f, "peak_rss_kib") / 1024.0,
            anon_mib(f),
            num(f, "cpu_us_per_call")
        );
    }
}

/// Under every table with the fleet rows.
const FLEET_NOTE: &str = "The two `Redis stores` rows are the same server (`bench/src/bin/mc_fleet.rs`) \
     with the stores of `modelctx-redis`: legacy sessions in a `RedisSessionStore`, SSE events in a \
     `RedisEventStore`, changes and client messages on a `RedisBus`, on a `redis-server` (no \
     persistence) that the server starts; one instance, then two instances behind nginx \
     round-robin (keep-alive connections to the instances, no sticky sessions). Their CPU time \
     and memory are summed over the server's process tree: Redis and nginx count. **On 2 cores \
     this measures the stores' cost, not scaling**: the instances, Redis, nginx and the load \
     generator share the same two cores, so a second instance cannot add throughput here. A \
     modern (2026-07-28) request touches no store, so its Redis rows differ from the in-memory \
     one only by what Redis and the bus cost while idle (and by nginx for two instances).";

/// The fleet rows of one table against modelctx in memory (its first row) of the same table, as
/// ratios: throughput and server CPU per call.
fn fleet_ratios(implementations: &[Implementation], figures: &[Value]) -> String {
    let find = |name: &str| {
        implementations
            .iter()
            .zip(figures)
            .find(|(i, f)| i.name == name && !f.is_null())
            .map(|(_, f)| f)
    };
    let Some(base) = find(MODELCTX_HTTP.name) else {
        return String::new();
    };
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let rows: Vec<String> = implementations
        .iter()
        .filter(|i| i.needs_fleet())
        .filter_map(|i| {
            let f = find(i.name)?;
            Some(format!(
                "{} {:.2}x the throughput and {:.1}x the server CPU per call",
                i.name,
                ratio(num(f, "calls_per_s"), num(base, "calls_per_s")),
                ratio(num(f, "cpu_us_per_call"), num(base, "cpu_us_per_call"))
            ))
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "In this run, against {} in memory: {}.",
        MODELCTX_HTTP.name,
        rows.join("; ")
    )
}

/// When and how a run of some rows only (`cargo xtask bench --fleet`, the observability rows)
/// ran.
pub(super) struct PartialRun {
    /// When it ended (`2026-11-28 04:30 UTC`).
    pub(super) date: String,
    /// How long it ran.
    pub(super) secs: f64,
    /// The one-minute load average before and after.
    pub(super) load: (f64, f64),
}

/// The section `cargo xtask bench --fleet` writes: every workload of `plan` with the medians of
/// its implementations, one table, ratios against modelctx in memory of the same run.
pub(super) fn fleet_section(
    plan: &[(&Workload, Vec<Implementation>)],
    medians: &[Vec<Value>],
    run: &PartialRun,
) -> String {
    let mut out = String::new();
    let names: Vec<&str> = plan.iter().map(|(w, _)| w.name).collect();
    let _ = writeln!(
        out,
        "## {FLEET_SECTION} (`cargo xtask bench --fleet`)\n\n\
         Written by `cargo xtask bench --fleet` on {} (it ran {:.0} s), apart from the full run \
         the rest of this page comes from: {} again, against modelctx in memory, its two fleet \
         rows and the limit only, with the same load generator and settings ({ROUNDS} rounds of \
         {SECS} s after {WARMUP} s of warm-up, interleaved; the median round by throughput). \
         **The machine was loaded**: {}, one-minute load average {:.1} before the run and {:.1} \
         after (other engineers' builds and tests share its cores), so read the ratios, which \
         are of one run, not the absolute figures against the tables above.\n",
        run.date,
        run.secs,
        names.join(", "),
        machine(),
        run.load.0,
        run.load.1
    );
    let _ = writeln!(
        out,
        "| workload | implementation | calls/s | ratio to in memory | server CPU µs/call | CPU ratio to in memory | p50 µs | p99 µs | peak RSS MiB | of it anon MiB |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    for ((workload, implementations), figures) in plan.iter().zip(medians) {
        let base = implementations
            .iter()
            .zip(figures)
            .find(|(i, _)| i.name == MODELCTX_HTTP.name)
            .map(|(_, f)| f.clone())
            .unwrap_or(Value::Null);
        for (i, f) in implementations.iter().zip(figures) {
            if f.is_null() {
                continue;
            }
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {:.2} | {:.1} | {:.2} | {:.0} | {:.0} | {:.1} | {} |",
                workload.name,
                i.name,
                num(f, "calls_per_s"),
                ratio(num(f, "calls_per_s"), num(&base, "calls_per_s")),
                num(f, "cpu_us_per_call"),
                ratio(num(f, "cpu_us_per_call"), num(&base, "cpu_us_per_call")),
                num(f, "p50_us"),
                num(f, "p99_us"),
                num(f, "peak_rss_kib") / 1024.0,
                anon_mib(f)
            );
        }
    }
    let _ = writeln!(out, "\n{FLEET_NOTE}");
    out
}

/// The section of the observability rows: every workload of `plan` with the medians of its
/// rows, one table, ratios against the plain server (the first row of each workload) of the
/// same run, and the issue's targets; `command` is what measured them.
pub(super) fn observability_section(
    plan: &[(&Workload, Vec<Implementation>)],
    results: &[Vec<Vec<Value>>],
    command: &str,
    run: &PartialRun,
) -> String {
    let mut out = String::new();
    let names: Vec<&str> = plan.iter().map(|(w, _)| w.name).collect();
    let rounds = results
        .iter()
        .flatten()
        .map(Vec::len)
        .max()
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "## {OBSERVABILITY_SECTION} (issue 27)\n\n\
         Written by `{command}` on {} (these rows took {:.0} s; `cargo xtask bench \
         --observability` measures them alone and rewrites only this section): {} against \
         modelctx as the README builds it (no layer, no `otel`: the first row of each workload, \
         the one the ratios are against) and three variants of the same server (`bench/src/echo.rs`), \
         side by side in one run, with the same load generator and settings ({rounds} rounds of \
         {SECS} s after {WARMUP} s of warm-up; each round runs every row of a workload one after \
         the other, starting one row further each round, so that each runs first, last and in \
         between alike). {}, one-minute load average {:.1} before these rows and {:.1} after. \
         **The cost of a row is the median of its {rounds} paired ratios**: in each round, its \
         server CPU time per call against the plain server's of the same round (the steadiest \
         figure, and the pairing takes out what drifts between rounds: on a shared machine the \
         plain server's own CPU per call moves by a third from one round to the next); the \
         range gives the lowest and highest of the {rounds}, how far one round alone can be off. \
         The throughput ratio, paired the same way, includes the load generator, which shares \
         the cores. The figures of the second table are each row's median round by throughput.\n",
        run.date,
        run.secs,
        names.join(", "),
        machine(),
        run.load.0,
        run.load.1
    );
    let _ = writeln!(out, "{OBSERVABILITY_ROWS}\n");
    let _ = writeln!(
        out,
        "| target (issue 27) | cost: server CPU per call | rounds' range | throughput ratio | holds |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|:---:|");
    let costs = observability_costs(plan, results);
    for cost in costs.iter().filter(|c| c.targeted) {
        let holds = if cost.cpu < OBSERVABILITY_TARGET {
            "yes"
        } else {
            "**no**"
        };
        let _ = writeln!(
            out,
            "| {}: {} costs under {:.0}% | {} | {} to {} | {:.2}x | {holds} |",
            cost.workload,
            cost.row,
            OBSERVABILITY_TARGET * 100.0,
            percent(cost.cpu),
            percent(cost.range.0),
            percent(cost.range.1),
            cost.throughput
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| workload | implementation | calls/s | server CPU µs/call | cost per call (paired) | rounds' range | p50 µs | p99 µs | peak RSS MiB | of it anon MiB |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for ((workload, implementations), runs) in plan.iter().zip(results) {
        for (i, cell) in implementations.iter().zip(runs) {
            let f = super::stats::median(workload.kind, cell);
            if f.is_null() {
                continue;
            }
            let cost = costs
                .iter()
                .find(|c| c.workload == workload.name && c.row == i.name);
            let (paired, range) = match cost {
                Some(c) => (
                    percent(c.cpu),
                    format!("{} to {}", percent(c.range.0), percent(c.range.1)),
                ),
                None => ("(the base)".to_owned(), String::new()),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {:.1} | {paired} | {range} | {:.0} | {:.0} | {:.1} | {} |",
                workload.name,
                i.name,
                num(&f, "calls_per_s"),
                num(&f, "cpu_us_per_call"),
                num(&f, "p50_us"),
                num(&f, "p99_us"),
                num(&f, "peak_rss_kib") / 1024.0,
                anon_mib(&f)
            );
        }
    }
    let _ = writeln!(out, "\n{OBSERVABILITY_NO_LAYER}");
    out
}

/// What the rows of the observability section are.
const OBSERVABILITY_ROWS: &str = "- **one pass-through layer**: the server with \
     `ServerBuilder::layer(PassThrough)`, a layer that wraps the service it is given in one of \
     its own and passes every request and readiness on as they are (not \
     `tower::layer::util::Identity`, which gives back the service it is given, so there would \
     be nothing to go through). What it costs is the chain's own work per request: the request \
     as the layers see it (`McpRequest`: the id and method copied, the params moved in; the \
     target and `_meta` are read from the params only when a layer asks for them, which this \
     one does not), the chain's turn (a lock, taken at once when no request waits for it) and \
     readiness, the type-erased services (the layer's, and the handlers at its end) with the \
     boxed futures of their calls, the handler's future boxed to be carried through the chain, \
     and the answer mapped back. Each further layer adds its own service, type-erased, and the \
     boxed future of its call.\n\
     - **`otel`, pipeline without export**: the same server built with the `otel` feature of \
     modelctx-server (`bench/otel/`, a workspace of its own so that cargo does not unify its \
     features with the other rows'), with the pipeline a user of the feature installs as \
     `docs/guide-operations.md` and `mcx --otlp` do, and nothing leaving the process: a \
     `tracing-opentelemetry` layer (without its code location, thread and busy/idle attributes) \
     on a `tracing-subscriber` registry (the global subscriber) over an SDK tracer provider \
     with no span processor, so every request span is enabled, sampled and recorded with its \
     attributes, then dropped (a no-op exporter would be handed it first); and as the global \
     meter provider an SDK provider with a `ManualReader` that nobody collects, so \
     `mcp.server.operation.duration` aggregates every request's duration (the load gauges, \
     observed only when a reader collects, are never called) and nothing is exported. An \
     exporter's own cost (batching, encoding, the network) is not in it. Where it goes (`perf` \
     on S2): nearly all of it is the OpenTelemetry SDK span every request gets through \
     `tracing-opentelemetry`: the `tracing` span in the registry's slab, its creation \
     (`on_new_span`: the span builder and its attributes, which modelctx gives at creation in \
     one call), entering and leaving it (once a request, while the handler runs: the SDK span \
     is started and its OpenTelemetry context attached and detached), its end (the SDK span \
     built and dropped), the clock read at each of these, then the duration histogram's record \
     (the SDK's lookup of the attribute set). What modelctx adds of its own is a few per cent: \
     the target and the `traceparent` read from the params once, without building `_meta`, \
     and the histogram's attributes on the stack. The 5% target cannot be met while every \
     request is recorded as an SDK span through `tracing-opentelemetry`: that span alone costs \
     more than 5% of a call the server answers in a few microseconds.\n\
     - **`otel`, nothing installed**: the same binary with no subscriber and the global no-op \
     meter provider: what the feature costs compiled in but not used.";

/// How the chain costs nothing without a layer, under the observability section.
const OBSERVABILITY_NO_LAYER: &str = "**The chain with no layer is the plain row itself.** No \
     layer is the default, and a server without one has no chain: `Stack::build` \
     (`crates/server/src/middleware.rs`) gives `None` when no layer was added, and in \
     `crates/server/src/run/runner.rs` (`start`) `Layers::of` gives `None` for a request with \
     neither a server chain nor a tool chain, which then goes straight to its handler, as \
     before the middleware landed: no `McpRequest`, no boxed service, no lock, no extra future \
     (the unit test `middleware::tests::no_layer_is_no_chain` holds the first two). What the \
     server had before the chain existed cannot be built in this bench (it is an older commit \
     of the same crates), so the chain's cost is measured where it exists, with one layer: the \
     pass-through row.";

/// The cost of one observability row against the plain server of its workload.
struct Cost {
    workload: &'static str,
    row: &'static str,
    /// Whether the issue's target is about it.
    targeted: bool,
    /// Server CPU per call against the plain server's of the same round, minus one: the median
    /// over the rounds.
    cpu: f64,
    /// The lowest and highest of those, minus one.
    range: (f64, f64),
    /// Throughput against the plain server's of the same round: the median over the rounds.
    throughput: f64,
}

/// The cost of every measured row but the first (the plain server) of every workload, from the
/// rounds where both ran; a row is targeted when its workload is and it is the layer or the
/// `otel` pipeline.
fn observability_costs(
    plan: &[(&Workload, Vec<Implementation>)],
    results: &[Vec<Vec<Value>>],
) -> Vec<Cost> {
    let mut out = Vec::new();
    for ((workload, implementations), runs) in plan.iter().zip(results) {
        let Some(base) = runs.first() else {
            continue;
        };
        for (i, cell) in implementations.iter().zip(runs).skip(1) {
            let paired = |key: &str| {
                let mut ratios: Vec<f64> = cell
                    .iter()
                    .zip(base)
                    .map(|(f, b)| ratio(num(f, key), num(b, key)))
                    .filter(|r| *r > 0.0)
                    .collect();
                ratios.sort_by(f64::total_cmp);
                ratios
            };
            let cpu = paired("cpu_us_per_call");
            let throughput = paired("calls_per_s");
            let (Some(low), Some(high)) = (cpu.first(), cpu.last()) else {
                continue;
            };
            let targeted = OBSERVABILITY_TARGETED.contains(&workload.name)
                && [
                    MODELCTX_STDIO_LAYERED.name,
                    MODELCTX_STDIO_OTEL.name,
                    MODELCTX_HTTP_LAYERED.name,
                    MODELCTX_HTTP_OTEL.name,
                ]
                .contains(&i.name);
            out.push(Cost {
                workload: workload.name,
                row: i.name,
                targeted,
                cpu: middle(&cpu) - 1.0,
                range: (low - 1.0, high - 1.0),
                throughput: middle(&throughput),
            });
        }
    }
    out
}

/// The median of sorted `values` (the mean of the two middle ones for an even count), 0 for
/// none.
fn middle(values: &[f64]) -> f64 {
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// `a / b`, 0 when `b` is not positive.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// A relative cost as a signed percentage (`+3.2%`, `-0.4%`).
fn percent(cost: f64) -> String {
    format!("{:+.1}%", cost * 100.0)
}

/// `doc` with its section `## HEADING...` (the first whose heading starts with `heading`)
/// replaced by `section`; without one, `section` goes before the section whose heading starts
/// with `before`, or at the end.
pub(super) fn put_section(doc: &str, heading: &str, section: &str, before: &str) -> String {
    let section = section.trim_end();
    let starts = |prefix: &str| {
        let mut at = 0;
        for line in doc.split_inclusive('\n') {
            if line
                .strip_prefix("## ")
                .is_some_and(|title| title.starts_with(prefix))
            {
                return Some(at);
            }
            at += line.len();
        }
        None
    };
    let next_heading = |from: usize| {
        doc[from..]
            .match_indices("\n## ")
            .next()
            .map_or(doc.len(), |(i, _)| from + i + 1)
    };
    match starts(heading) {
        Some(start) => {
            let end = next_heading(start + 3);
            format!("{}{section}\n\n{}", &doc[..start], &doc[end..])
        }
        None => match starts(before) {
            Some(at) => format!("{}{section}\n\n{}", &doc[..at], &doc[at..]),
            None => format!("{}\n\n{section}\n", doc.trim_end()),
        },
    }
}

/// The server's anonymous RSS at the end of the window in MiB, or `—` for figures of a load
/// generator that did not report it (a server that reports none has at least its stack).
fn anon_mib(figures: &Value) -> String {
    match figures["anon_rss_kib"].as_f64() {
        Some(kib) if kib > 0.0 => format!("{:.1}", kib / 1024.0),
        _ => "—".into(),
    }
}

/// What bounds a target, by its key: the section `## key` of `bounds.md`, its lines joined.
fn bound_text(key: &str) -> String {
    section(include_str!("bounds.md"), key)
        .unwrap_or_else(|| format!("(no section `{key}` in xtask/src/bench/bounds.md)"))
}

/// The text of the section `## key` of a template, its lines joined by spaces.
fn section(template: &str, key: &str) -> Option<String> {
    let body = section_body(template, key)?;
    Some(body.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The text of the section `## key` of a template as written, its line breaks kept (blank lines
/// around it trimmed).
fn verbatim_section(template: &str, key: &str) -> Option<String> {
    section_body(template, key).map(|body| body.trim().to_owned())
}

/// What follows the heading `## key` up to the next `## ` heading.
fn section_body<'a>(template: &'a str, key: &str) -> Option<&'a str> {
    template.split("\n## ").skip(1).find_map(|s| {
        let (heading, body) = s.split_once('\n')?;
        (heading.trim() == key).then_some(body)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bound_a_target_names_has_a_section() {
        let verdicts = verdicts(&Vec::new(), None);
        assert!(!verdicts.is_empty());
        for v in &verdicts {
            let text = section(include_str!("bounds.md"), v.bound);
            assert!(
                text.as_ref().is_some_and(|t| !t.is_empty()),
                "no section {} in bounds.md",
                v.bound
            );
        }
    }

    #[test]
    fn the_anonymous_rss_is_shown_when_reported() {
        assert_eq!(anon_mib(&serde_json::json!({"anon_rss_kib": 1536})), "1.5");
        assert_eq!(anon_mib(&serde_json::json!({"peak_rss_kib": 9000})), "—");
        assert_eq!(anon_mib(&serde_json::json!({"anon_rss_kib": 0})), "—");
    }

    #[test]
    fn the_profiles_section_is_kept_as_written() {
        let template = "## A\n\none\n\n## PROFILES\n\n- a list\n\n```sh\nperf record\n```\n\n### Sub\n\ntext\n\n## B\n\nx\n";
        assert_eq!(
            verbatim_section(template, PROFILES).as_deref(),
            Some("- a list\n\n```sh\nperf record\n```\n\n### Sub\n\ntext")
        );
        let text = verbatim_section(include_str!("bounds.md"), PROFILES);
        assert!(
            text.as_ref().is_some_and(|t| t.contains("```")),
            "bounds.md has no {PROFILES} section with the commands"
        );
    }

    #[test]
    fn the_fleet_section_replaces_its_own_or_goes_before_m1() {
        let doc = "# B\n\n## H4: x\n\nt\n\n## M1: y\n\nm\n";
        let once = put_section(
            doc,
            FLEET_SECTION,
            "## H3/H4 with the Redis stores (new)\n\nA\n",
            "M1",
        );
        assert_eq!(
            once,
            "# B\n\n## H4: x\n\nt\n\n## H3/H4 with the Redis stores (new)\n\nA\n\n## M1: y\n\nm\n"
        );
        let twice = put_section(
            &once,
            FLEET_SECTION,
            "## H3/H4 with the Redis stores (newer)\n\nB\n",
            "M1",
        );
        assert_eq!(
            twice,
            "# B\n\n## H4: x\n\nt\n\n## H3/H4 with the Redis stores (newer)\n\nB\n\n## M1: y\n\nm\n"
        );
        assert_eq!(
            put_section(
                "# B\n\n## A\n\na\n",
                FLEET_SECTION,
                "## H3/H4 with the Redis stores\n\nC\n",
                "M1"
            ),
            "# B\n\n## A\n\na\n\n## H3/H4 with the Redis stores\n\nC\n"
        );
        // The last section of a page is replaced to the end.
        assert_eq!(
            put_section(
                "# B\n\n## H3/H4 with the Redis stores\n\nold\n",
                FLEET_SECTION,
                "## H3/H4 with the Redis stores\n\nD\n",
                "M1"
            ),
            "# B\n\n## H3/H4 with the Redis stores\n\nD\n\n"
        );
    }

    /// A run without redis-server or nginx leaves the fleet cells empty: their rows are left
    /// out of the tables, and each table with fleet rows says why; with them, the note gives
    /// the ratios against modelctx in memory of the same table.
    #[test]
    fn skipped_fleet_rows_are_left_out_with_the_reason_and_measured_ones_get_ratios() {
        let figures = |calls: f64, cpu: f64| serde_json::json!({"calls_per_s": calls, "cpu_us_per_call": cpu});
        let results: Vec<Vec<Vec<Value>>> = WORKLOADS
            .iter()
            .map(|w| {
                w.implementations
                    .iter()
                    .map(|i| {
                        if i.needs_fleet() {
                            Vec::new()
                        } else {
                            vec![figures(1000.0, 20.0)]
                        }
                    })
                    .collect()
            })
            .collect();
        let page = report(&results, None, 1.0, Some("redis-server not found"));
        assert!(
            !page.contains(MODELCTX_REDIS.name),
            "a skipped row is shown"
        );
        assert_eq!(
            page.matches(
                "**The Redis stores rows were not measured in this run**: redis-server not found."
            )
            .count(),
            4,
            "under H3-16, H3, H4-16 and H4"
        );
        let h3 = WORKLOADS.iter().find(|w| w.name == "H3").unwrap();
        let measured: Vec<Value> = h3
            .implementations
            .iter()
            .map(|i| match i.name {
                n if n == MODELCTX_REDIS.name => figures(800.0, 30.0),
                n if n == MODELCTX_NGINX.name => figures(400.0, 60.0),
                _ => figures(1000.0, 20.0),
            })
            .collect();
        let text = fleet_ratios(h3.implementations, &measured);
        assert!(
            text.contains(&format!(
                "{} 0.80x the throughput and 1.5x the server CPU per call",
                MODELCTX_REDIS.name
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "{} 0.40x the throughput and 3.0x",
                MODELCTX_NGINX.name
            )),
            "{text}"
        );
    }

    /// The observability section: each row against the plain server of its workload round by
    /// round (the median of the paired ratios, with their range), the targets only for the
    /// layer and the `otel` pipeline on S2 and H4-16, held when the cost is under 5%.
    #[test]
    fn the_observability_section_costs_each_row_against_the_plain_server() {
        let plan = observability_plan();
        let figures = |calls: f64, cpu: f64| serde_json::json!({"calls_per_s": calls, "cpu_us_per_call": cpu});
        let rounds = |cpus: [f64; 3], calls: f64| cpus.map(|cpu| figures(calls, cpu)).to_vec();
        let results: Vec<Vec<Vec<Value>>> = plan
            .iter()
            .map(|(w, rows)| {
                rows.iter()
                    .map(|i| match (w.name, i.name) {
                        // The plain server's CPU per call moves between rounds.
                        (_, n) if n == MODELCTX_STDIO.name || n == MODELCTX_HTTP.name => {
                            rounds([10.0, 20.0, 10.0], 1000.0)
                        }
                        // +2% in every round: +2%, though its median round (20.4) is twice
                        // the plain server's median round (10).
                        ("S2", n) if n == MODELCTX_STDIO_LAYERED.name => {
                            rounds([10.2, 20.4, 10.2], 990.0)
                        }
                        // +20%, +100%, +30%: the median +30%, the range +20% to +100%.
                        ("S2", n) if n == MODELCTX_STDIO_OTEL.name => {
                            rounds([12.0, 40.0, 13.0], 800.0)
                        }
                        ("H4-16", n) if n == MODELCTX_HTTP_OTEL_OFF.name => Vec::new(),
                        _ => rounds([10.0, 20.0, 10.0], 1000.0),
                    })
                    .collect()
            })
            .collect();
        let run = PartialRun {
            date: "2026-11-28 08:00 UTC".into(),
            secs: 100.0,
            load: (1.0, 2.0),
        };
        let text =
            observability_section(&plan, &results, "cargo xtask bench --observability", &run);
        assert!(
            text.starts_with(&format!("## {OBSERVABILITY_SECTION}")),
            "{text}"
        );
        assert!(text.contains("(3 rounds of"), "{text}");
        assert!(
            text.contains(&format!(
                "| S2: {} costs under 5% | +2.0% | +2.0% to +2.0% | 0.99x | yes |",
                MODELCTX_STDIO_LAYERED.name
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "| S2: {} costs under 5% | +30.0% | +20.0% to +100.0% | 0.80x | **no** |",
                MODELCTX_STDIO_OTEL.name
            )),
            "{text}"
        );
        // Targets: the layer and the pipeline, on S2 and H4-16; not the feature left unused,
        // nor H1 and H3-16.
        assert_eq!(text.matches("costs under 5%").count(), 4, "{text}");
        assert!(!text.contains(&format!("{} costs under", MODELCTX_STDIO_OTEL_OFF.name)));
        assert!(!text.contains("| H1: "));
        // A row not measured is left out; the plain server is the base; a row's figures are
        // its median round by throughput.
        assert!(!text.contains(&format!("| H4-16 | {} |", MODELCTX_HTTP_OTEL_OFF.name)));
        assert!(
            text.contains(&format!(
                "| S2 | {} | 1000 | 20.0 | (the base) |",
                MODELCTX_STDIO.name
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "| S2 | {} | 800 | 40.0 | +30.0% | +20.0% to +100.0% |",
                MODELCTX_STDIO_OTEL.name
            )),
            "{text}"
        );
        // It goes before M1 the first time, and replaces itself after.
        let doc = "# B\n\n## H4: x\n\nt\n\n## M1: y\n\nm\n";
        let once = put_section(doc, OBSERVABILITY_SECTION, &text, "M1");
        let twice = put_section(&once, OBSERVABILITY_SECTION, &text, "M1");
        assert_eq!(once, twice);
        assert!(once.find("## Observability").unwrap() < once.find("## M1").unwrap());
    }

    #[test]
    fn a_section_is_its_lines_joined_up_to_the_next_heading() {
        let template = "<!-- note -->\n\n## A\n\none\ntwo\n\n## B\n\nthree\n";
        assert_eq!(section(template, "A").as_deref(), Some("one two"));
        assert_eq!(section(template, "B").as_deref(), Some("three"));
        assert_eq!(section(template, "C"), None);
    }
}
