//! Builds `bench/`, runs every workload against every implementation, measures B1, and writes
//! `docs/benchmarks.md`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use super::*;

/// One workload and the implementations a run measures in it.
type Plan<'a> = Vec<(&'a Workload, Vec<Implementation>)>;

/// Builds the bench workspace's binaries (`bins`: the ones named; empty: all) in release mode.
fn build_bench(root: &Path, bins: &[&str]) -> Result<(), String> {
    eprintln!("==> bench: building bench/ (release)");
    let mut command = Command::new(env!("CARGO"));
    command.args([
        "build",
        "--release",
        "--locked",
        "--manifest-path",
        "bench/Cargo.toml",
    ]);
    for bin in bins {
        command.args(["--bin", bin]);
    }
    let status = command
        .env("CARGO_TARGET_DIR", TARGET_DIR)
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("building bench/ failed".into());
    }
    Ok(())
}

/// Builds the package of `manifest` on its own (release, `--locked`), into the bench's target
/// folder: in one command with the root package, cargo would unify the features.
fn build_alone(root: &Path, manifest: &str, what: &str) -> Result<(), String> {
    eprintln!("==> bench: building {what} (release)");
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "--manifest-path",
            manifest,
        ])
        .env("CARGO_TARGET_DIR", TARGET_DIR)
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building {what} failed"));
    }
    Ok(())
}

/// The `otel` build (`bench/otel/`, a workspace of its own).
const OTEL_MANIFEST: &str = "bench/otel/Cargo.toml";

pub(crate) fn run(root: &Path) -> Result<(), String> {
    let started = Instant::now();
    build_bench(root, &[])?;
    // The lean build on its own: in one command with the root package, cargo would unify the
    // features and build it with the default ones.
    build_alone(
        root,
        "bench/lean/Cargo.toml",
        "bench/lean (default features off)",
    )?;
    build_alone(root, OTEL_MANIFEST, "bench/otel (feature `otel`)")?;
    eprintln!("==> bench: Node 22 and bench/ts (the TypeScript SDK)");
    crate::node::ensure(root)?;
    crate::node::ensure_packages(root, "bench/ts")?;
    let node = crate::node::binary(root);
    let skipped = fleet_missing();
    if let Some(why) = &skipped {
        eprintln!("==> bench: the fleet rows (modelctx with the Redis stores) are skipped: {why}");
    }
    let plan: Plan<'_> = WORKLOADS
        .iter()
        .map(|w| (w, w.implementations.to_vec()))
        .collect();
    let results = measure(root, &plan, Some(&node), Order::Same(ROUNDS), |i| {
        skipped.is_some() && i.needs_fleet()
    })?;
    let build = if std::env::var(B1_ENV).is_ok_and(|v| v == "1") {
        let record = measure_build(root)?;
        let path = root.join(B1_RECORD);
        let text = serde_json::to_string_pretty(&record).map_err(|e| e.to_string())? + "\n";
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Some((record, true))
    } else {
        std::fs::read_to_string(root.join(B1_RECORD))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .map(|record| (record, false))
    };
    let report = report::report(
        &results,
        build,
        started.elapsed().as_secs_f64(),
        skipped.as_deref(),
    );
    let path = root.join("docs/benchmarks.md");
    std::fs::write(&path, report).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("==> bench: the observability rows");
    observability(root, "cargo xtask bench")?;
    eprintln!(
        "==> bench: wrote docs/benchmarks.md in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `cargo xtask bench --observability`: only the observability rows ([`observability_plan`]),
/// written as their own section into the existing `docs/benchmarks.md`.
pub(crate) fn run_observability(root: &Path) -> Result<(), String> {
    let started = Instant::now();
    build_bench(root, &["load", "mc_stdio", "mc_http"])?;
    build_alone(root, OTEL_MANIFEST, "bench/otel (feature `otel`)")?;
    observability(root, "cargo xtask bench --observability")?;
    eprintln!(
        "==> bench: wrote the observability section of docs/benchmarks.md in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Measures the observability rows (built already) side by side, and puts their section into
/// `docs/benchmarks.md`; `command` is what ran them.
fn observability(root: &Path, command: &str) -> Result<(), String> {
    let started = Instant::now();
    let plan = observability_plan();
    let load_before = load_average();
    let results = measure(
        root,
        &plan,
        None,
        Order::Rotated(OBSERVABILITY_ROUNDS),
        |_| false,
    )?;
    let load_after = load_average();
    let section = report::observability_section(
        &plan,
        &results,
        command,
        &report::PartialRun {
            date: utc_now(),
            secs: started.elapsed().as_secs_f64(),
            load: (load_before, load_after),
        },
    );
    let path = root.join("docs/benchmarks.md");
    let doc = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let doc = report::put_section(&doc, OBSERVABILITY_SECTION, &section, "M1");
    std::fs::write(&path, doc).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `cargo xtask bench --fleet`: only the workloads with fleet rows, against modelctx in memory
/// and the limit of the same run ([`FLEET_RUN`]), written as their own section into the existing
/// `docs/benchmarks.md`. Without `redis-server` or `nginx` it says why and writes nothing.
pub(crate) fn run_fleet(root: &Path) -> Result<(), String> {
    let started = Instant::now();
    if let Some(why) = fleet_missing() {
        eprintln!(
            "==> bench: the fleet rows are skipped: {why}; docs/benchmarks.md is left as it is"
        );
        return Ok(());
    }
    build_bench(root, &["load", "mc_http", "mc_fleet", "raw_http"])?;
    let plan: Plan<'_> = WORKLOADS
        .iter()
        .filter(|w| w.implementations.iter().any(Implementation::needs_fleet))
        .map(|w| {
            let implementations = FLEET_RUN
                .iter()
                .copied()
                .filter(|i| w.implementations.iter().any(|j| j.name == i.name))
                .collect();
            (w, implementations)
        })
        .collect();
    let load_before = load_average();
    let results = measure(root, &plan, None, Order::Same(ROUNDS), |_| false)?;
    let load_after = load_average();
    let medians: Vec<Vec<Value>> = plan
        .iter()
        .zip(&results)
        .map(|((w, _), runs)| runs.iter().map(|r| stats::median(w.kind, r)).collect())
        .collect();
    let section = report::fleet_section(
        &plan,
        &medians,
        &report::PartialRun {
            date: utc_now(),
            secs: started.elapsed().as_secs_f64(),
            load: (load_before, load_after),
        },
    );
    let path = root.join("docs/benchmarks.md");
    let doc = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let doc = report::put_section(&doc, FLEET_SECTION, &section, "M1");
    std::fs::write(&path, doc).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!(
        "==> bench: wrote the fleet section of docs/benchmarks.md in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The one-minute load average (`/proc/loadavg`), 0 when it cannot be read.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Now, as `2026-11-28 04:30 UTC`.
fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// How many rounds [`measure`] runs, and in which order a round runs the implementations of a
/// workload.
#[derive(Debug, Clone, Copy)]
enum Order {
    /// The plan's order every round.
    Same(usize),
    /// Round `r` starts at the plan's implementation `r` (modulo their count) and goes round:
    /// each implementation runs first, last and in between as often, so whatever drifts along
    /// a round (the machine's other load, its clock) weighs on each alike.
    Rotated(usize),
}

impl Order {
    fn rounds(self) -> usize {
        match self {
            Order::Same(rounds) | Order::Rotated(rounds) => rounds,
        }
    }

    /// The implementations' indices in the order round `round` (from 0) runs them.
    fn of(self, round: usize, count: usize) -> impl Iterator<Item = usize> {
        let start = match self {
            Order::Same(_) => 0,
            Order::Rotated(_) => round % count.max(1),
        };
        (0..count).map(move |i| (start + i) % count)
    }
}

/// Runs every cell of `plan` (but those `skip` names) `order.rounds()` times, interleaved: one
/// entry per round, `[workload][implementation][round]`; a skipped cell has none.
fn measure(
    root: &Path,
    plan: &[(&Workload, Vec<Implementation>)],
    node: Option<&Path>,
    order: Order,
    skip: impl Fn(&Implementation) -> bool,
) -> Result<Vec<Vec<Vec<Value>>>, String> {
    let bin = root.join(TARGET_DIR).join("release");
    let load = bin.join("load");
    let mut results: Vec<Vec<Vec<Value>>> = plan
        .iter()
        .map(|(_, implementations)| vec![Vec::new(); implementations.len()])
        .collect();
    let rounds = order.rounds();
    for round in 1..=rounds {
        for (w, (workload, implementations)) in plan.iter().enumerate() {
            for i in order.of(round - 1, implementations.len()) {
                let implementation = &implementations[i];
                if skip(implementation) {
                    continue;
                }
                let mut command = Command::new(&load);
                command.args(workload.load);
                if workload.kind == Kind::Throughput {
                    command.args(["--secs", SECS, "--warmup", WARMUP]);
                }
                command.arg("--");
                match implementation.program {
                    Program::Bin(args) => command.arg(bin.join(args[0])).args(&args[1..]),
                    Program::Node(args) => command
                        .arg(node.ok_or("this run has no Node")?)
                        .arg(root.join("bench/ts/echo.mjs"))
                        .args(args),
                };
                let output = command
                    .output()
                    .map_err(|e| format!("cannot run {}: {e}", load.display()))?;
                let stdout = String::from_utf8_lossy(&output.stdout);
                if !output.status.success() {
                    return Err(format!(
                        "{} against {} failed: {stdout}{}",
                        workload.name,
                        implementation.name,
                        String::from_utf8_lossy(&output.stderr)
                    ));
                }
                let figures: Value = serde_json::from_str(stdout.trim())
                    .map_err(|e| format!("the load generator printed {stdout:?}: {e}"))?;
                eprintln!(
                    "round {round}/{rounds} {:<6} {:<38} {}",
                    workload.name,
                    implementation.name,
                    stats::summary(workload.kind, &figures)
                );
                results[w][i].push(figures);
            }
        }
    }
    Ok(results)
}

/// B1: each minimal server built clean in release mode in a fresh target folder, one after the
/// other; the time, the crates compiled and the crates in its tree.
fn measure_build(root: &Path) -> Result<Value, String> {
    let mut servers = Vec::new();
    for (name, folder, features) in MINIMAL {
        let manifest = root.join("bench/minimal").join(folder).join("Cargo.toml");
        let target: PathBuf = root.join(TARGET_DIR).join("b1").join(folder);
        let _ = std::fs::remove_dir_all(&target);
        eprintln!("==> bench: B1: clean release build of bench/minimal/{folder}");
        let started = Instant::now();
        let output = Command::new(env!("CARGO"))
            .args(["build", "--release", "--locked", "--manifest-path"])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("RUSTFLAGS")
            .current_dir(root)
            .output()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        let secs = started.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            return Err(format!("building {folder} failed: {stderr}"));
        }
        let compiled = stderr
            .lines()
            .filter(|l| l.trim_start().starts_with("Compiling "))
            .count();
        let tree = Command::new(env!("CARGO"))
            .args([
                "tree",
                "--locked",
                "--prefix",
                "none",
                "-e",
                "normal,build",
                "--manifest-path",
            ])
            .arg(&manifest)
            .current_dir(root)
            .output()
            .map_err(|e| format!("cannot run cargo tree: {e}"))?;
        let mut crates: Vec<String> = String::from_utf8_lossy(&tree.stdout)
            .lines()
            .map(|l| l.replace(" (*)", "").replace(" (proc-macro)", ""))
            .filter(|l| !l.trim().is_empty())
            .collect();
        crates.sort();
        crates.dedup();
        let _ = std::fs::remove_dir_all(&target);
        eprintln!(
            "B1 {name}: {secs:.1} s, {compiled} crates compiled, {} in its tree",
            crates.len()
        );
        servers.push(serde_json::json!({
            "name": name,
            "folder": folder,
            "features": features,
            "secs": secs,
            "compiled": compiled,
            "crates": crates.len(),
        }));
    }
    let date = utc_now();
    Ok(serde_json::json!({"date": date, "machine": machine(), "servers": servers}))
}

pub(super) fn machine() -> String {
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

#[cfg(test)]
mod tests {
    use super::Order;

    /// Rotated rounds start one implementation further each round; every implementation runs
    /// once a round, and first in as many rounds as any other.
    #[test]
    fn rotated_rounds_start_one_further_each_round() {
        let order = Order::Rotated(4);
        let rounds: Vec<Vec<usize>> = (0..order.rounds())
            .map(|r| order.of(r, 3).collect())
            .collect();
        assert_eq!(
            rounds,
            [vec![0, 1, 2], vec![1, 2, 0], vec![2, 0, 1], vec![0, 1, 2]]
        );
        let same = Order::Same(2);
        assert!((0..same.rounds()).all(|r| same.of(r, 3).eq([0, 1, 2])));
        assert_eq!(Order::Rotated(1).of(0, 0).count(), 0);
    }
}
