//! Builds `bench/`, runs every workload against every implementation, measures B1, and writes
//! `docs/benchmarks.md`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use super::*;

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
    // The lean build on its own: in one command with the root package, cargo would unify the
    // features and build it with the default ones.
    eprintln!("==> bench: building bench/lean (release, default features off)");
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "--manifest-path",
            "bench/lean/Cargo.toml",
        ])
        .env("CARGO_TARGET_DIR", TARGET_DIR)
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("building bench/lean failed".into());
    }
    eprintln!("==> bench: Node 22 and bench/ts (the TypeScript SDK)");
    crate::node::ensure(root)?;
    crate::node::ensure_packages(root, "bench/ts")?;
    let node = crate::node::binary(root);
    let bin = root.join(TARGET_DIR).join("release");
    let load = bin.join("load");
    // results[workload][implementation] = one entry per round
    let mut results: Vec<Vec<Vec<Value>>> = WORKLOADS
        .iter()
        .map(|w| vec![Vec::new(); w.implementations.len()])
        .collect();
    for round in 1..=ROUNDS {
        for (w, workload) in WORKLOADS.iter().enumerate() {
            for (i, implementation) in workload.implementations.iter().enumerate() {
                let mut command = Command::new(&load);
                command.args(workload.load);
                if workload.kind == Kind::Throughput {
                    command.args(["--secs", SECS, "--warmup", WARMUP]);
                }
                command.arg("--");
                match implementation.program {
                    Program::Bin(args) => command.arg(bin.join(args[0])).args(&args[1..]),
                    Program::Node(args) => command
                        .arg(&node)
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
                    "round {round}/{ROUNDS} {:<6} {:<38} {}",
                    workload.name,
                    implementation.name,
                    stats::summary(workload.kind, &figures)
                );
                results[w][i].push(figures);
            }
        }
    }
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
    let report = report::report(&results, build, started.elapsed().as_secs_f64());
    let path = root.join("docs/benchmarks.md");
    std::fs::write(&path, report).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!(
        "==> bench: wrote docs/benchmarks.md in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
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
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
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
