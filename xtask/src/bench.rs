//! `cargo xtask bench`: builds `bench/` in release mode, runs every workload against every
//! implementation with the one load generator (`bench/src/bin/load.rs`), interleaved over
//! several rounds, and writes `docs/benchmarks.md`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Rounds over every cell; a cell reports its median round (by throughput).
const ROUNDS: usize = 3;
/// Measured seconds per run, after `WARMUP` seconds of the same load.
const SECS: &str = "2";
const WARMUP: &str = "0.3";
/// Concurrent HTTP clients in the concurrent workloads.
const CLIENTS: &str = "16";

/// The target folder of the bench build: the bench workspace's own (as `cd bench && cargo build`).
const TARGET_DIR: &str = "bench/target";

/// A workload: name, what it is, the load generator's arguments.
struct Workload {
    name: &'static str,
    what: &'static str,
    load: &'static [&'static str],
    implementations: &'static [Implementation],
}

/// An implementation: its name in the table, the server binary and its arguments.
type Implementation = (&'static str, &'static [&'static str]);

const MODELCTX_STDIO: Implementation = ("modelctx", &["mc_stdio"]);
const RMCP_STDIO: Implementation = ("rmcp 3.9 `stdio()`", &["rmcp_stdio"]);
const RMCP_PIPES: Implementation = ("rmcp 3.9 `stdio_pipes()`", &["rmcp_stdio", "pipes"]);
const RAW_STDIO: Implementation = ("limit: raw serde_json line echo", &["raw_stdio"]);
const MODELCTX_HTTP: Implementation = ("modelctx", &["mc_http"]);
const RMCP_SESSION: Implementation = ("rmcp 3.9 (sessions, SSE)", &["rmcp_http", "session"]);
const RMCP_STATELESS: Implementation = ("rmcp 3.9 (stateless, JSON)", &["rmcp_http", "stateless"]);
const RAW_HTTP: Implementation = ("limit: bare hyper", &["raw_http"]);

const STDIO: &[Implementation] = &[MODELCTX_STDIO, RMCP_STDIO, RMCP_PIPES, RAW_STDIO];
const HTTP: &[Implementation] = &[MODELCTX_HTTP, RMCP_SESSION, RMCP_STATELESS, RAW_HTTP];
const HTTP_MODERN: &[Implementation] = &[MODELCTX_HTTP, RMCP_STATELESS, RAW_HTTP];

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "S1",
        what: "stdio, sequential round trips (legacy handshake, then `tools/call`)",
        load: &["stdio-seq"],
        implementations: STDIO,
    },
    Workload {
        name: "S2",
        what: "stdio, pipelined, 64 requests in flight",
        load: &["stdio-pipe", "--inflight", "64"],
        implementations: STDIO,
    },
    Workload {
        name: "H1",
        what: "Streamable HTTP, one legacy session, sequential (JSON where the server answers JSON)",
        load: &["http", "--clients", "1"],
        implementations: HTTP,
    },
    Workload {
        name: "H3-16",
        what: "Streamable HTTP, 16 concurrent legacy sessions, one connection each",
        load: &["http", "--clients", CLIENTS],
        implementations: HTTP,
    },
    Workload {
        name: "H4-16",
        what: "Streamable HTTP, 16 concurrent modern (2026-07-28, stateless) clients",
        load: &["http", "--clients", CLIENTS, "--modern"],
        implementations: HTTP_MODERN,
    },
];

/// One run's figures, as the load generator prints them.
#[derive(Clone, Copy, Default)]
struct Figures {
    calls_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_us_per_call: f64,
    peak_rss_kib: f64,
}

pub(crate) fn run(root: &Path) -> Result<(), String> {
    let started = Instant::now();
    eprintln!("==> bench: building bench/ (release)");
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "--manifest-path",
            "bench/Cargo.toml",
        ])
        .env("CARGO_TARGET_DIR", TARGET_DIR)
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("building bench/ failed".into());
    }
    let bin = root.join(TARGET_DIR).join("release");
    let load = bin.join("load");
    // results[workload][implementation] = one entry per round
    let mut results: Vec<Vec<Vec<Figures>>> = WORKLOADS
        .iter()
        .map(|w| vec![Vec::new(); w.implementations.len()])
        .collect();
    for round in 1..=ROUNDS {
        for (w, workload) in WORKLOADS.iter().enumerate() {
            for (i, (name, server)) in workload.implementations.iter().enumerate() {
                let mut command = Command::new(&load);
                command
                    .args(workload.load)
                    .args(["--secs", SECS, "--warmup", WARMUP, "--"])
                    .arg(bin.join(server[0]))
                    .args(&server[1..]);
                let output = command
                    .output()
                    .map_err(|e| format!("cannot run {}: {e}", load.display()))?;
                let stdout = String::from_utf8_lossy(&output.stdout);
                if !output.status.success() {
                    return Err(format!(
                        "{} against {name} failed: {stdout}{}",
                        workload.name,
                        String::from_utf8_lossy(&output.stderr)
                    ));
                }
                let figures = parse(&stdout)?;
                eprintln!(
                    "round {round}/{ROUNDS} {:<6} {:<34} {:>9.0} calls/s  p50 {:>7.1} µs  cpu {:>6.1} µs/call",
                    workload.name,
                    name,
                    figures.calls_per_s,
                    figures.p50_us,
                    figures.cpu_us_per_call
                );
                results[w][i].push(figures);
            }
        }
    }
    let report = report(&results, started.elapsed().as_secs_f64());
    let path = root.join("docs/benchmarks.md");
    std::fs::write(&path, report).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!(
        "==> bench: wrote docs/benchmarks.md in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn parse(line: &str) -> Result<Figures, String> {
    let value: serde_json::Value = serde_json::from_str(line.trim())
        .map_err(|e| format!("the load generator printed {line:?}: {e}"))?;
    let get = |key: &str| {
        value[key]
            .as_f64()
            .ok_or_else(|| format!("no {key} in {line:?}"))
    };
    Ok(Figures {
        calls_per_s: get("calls_per_s")?,
        p50_us: get("p50_us")?,
        p99_us: get("p99_us")?,
        cpu_us_per_call: get("cpu_us_per_call")?,
        peak_rss_kib: get("peak_rss_kib")?,
    })
}

/// The round with the median throughput.
fn median(runs: &[Figures]) -> Figures {
    let mut runs = runs.to_vec();
    runs.sort_by(|a, b| a.calls_per_s.total_cmp(&b.calls_per_s));
    runs.get(runs.len() / 2).copied().unwrap_or_default()
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown", |(_, m)| m.trim())
        .to_owned();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    format!(
        "{cores} cores (nproc), {model}; Linux {}; {rustc}",
        kernel.trim()
    )
}

fn report(results: &[Vec<Vec<Figures>>], secs: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Benchmarks\n\n\
         Written by `cargo xtask bench` (issue 10); do not edit by hand. Every server exposes the \
         same `echo` tool (`{{\"text\": string}}` in, the text back as one text block; the text is \
         16 bytes), and one load generator of ours (`bench/src/bin/load.rs`) drives them all, so \
         the servers' own cost is what differs. Each cell is the median (by throughput) of \
         {ROUNDS} rounds of {SECS} s after {WARMUP} s of warm-up; the rounds run every workload \
         against every implementation in turn (interleaved). The server's CPU time per call \
         (utime+stime of the server process over the measured window) is the steadiest figure \
         on a noisy machine; throughput and latency include the load generator, which shares \
         the cores. Peak RSS is the server's VmHWM. Ratio: throughput against modelctx's.\n"
    );
    let _ = writeln!(out, "- **Machine**: {}", machine());
    let _ = writeln!(
        out,
        "- **Command**: `cargo xtask bench` (from the repository root; it ran {secs:.0} s)"
    );
    let _ = writeln!(
        out,
        "- **Servers**: `bench/src/bin/`: modelctx with default features off (`stdio`, plus \
         `http` for the HTTP server; the tool's input schema given by hand), rmcp 3.9 with \
         default features off (`server`, `transport-io`, `transport-streamable-http-server`; a \
         hand-written `ServerHandler`, served with hyper HTTP/1.1), and the limits. Every server \
         runs on tokio's multi-threaded runtime; every TCP connection has `TCP_NODELAY`.\n"
    );
    for (workload, runs) in WORKLOADS.iter().zip(results) {
        let _ = writeln!(out, "## {}: {}\n", workload.name, workload.what);
        let _ = writeln!(
            out,
            "| implementation | calls/s | p50 µs | p99 µs | peak RSS MiB | server CPU µs/call | ratio to modelctx |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
        let figures: Vec<Figures> = runs.iter().map(|r| median(r)).collect();
        let base = figures.first().map_or(0.0, |f| f.calls_per_s);
        for ((name, _), f) in workload.implementations.iter().zip(&figures) {
            let ratio = if base > 0.0 {
                f.calls_per_s / base
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                "| {name} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {ratio:.2} |",
                f.calls_per_s,
                f.p50_us,
                f.p99_us,
                f.peak_rss_kib / 1024.0,
                f.cpu_us_per_call
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "## Not measured yet\n\n\
         The TypeScript SDK server, H2 (SSE responses on purpose), H3/H4 at 64 clients, memory \
         per idle session (M1), RSS after 10 000 sessions (M2), cold start (C1) and clean build \
         time and crate count (B1) are still to come (issue 10)."
    );
    out
}
