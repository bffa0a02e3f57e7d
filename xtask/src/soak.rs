//! `cargo xtask soak [--minutes N | --seconds N] [--clients N] [--seed N]`: builds the `soak`
//! binary of modelctx-tests (`tests/src/bin/soak/`) and runs it: the demo server over HTTP
//! under load from clients of both eras while faults are injected. Its figures (a Markdown
//! table, the one `docs/security.md` shows) are printed and also written to
//! `<target>/soak/report.md`. It fails on a duplicate, a failed call of a load client, a fault
//! outcome that reveals a defect, or a server table that does not return to its start.
//!
//! `cargo xtask soak --fleet [--seconds N] [--clients N] [--seed N]`: the failover soak (60 s by
//! default): `redis-server`, three `mcx serve demo --http --redis` processes and `nginx`
//! round-robin in front of them, clients of both eras through nginx, instances killed (`kill
//! -9`) and restarted on a seeded schedule. It builds the soak and `mcx` as the "build" step of
//! `cargo xtask ci` does (`cargo test --workspace --all-features --no-run`, which builds the
//! packages' binaries, so that nothing is compiled again there) and gives `mcx` to the soak in
//! `MODELCTX_MCX`; its figures go to `<target>/soak/fleet-report.md`. It fails when a
//! call fails that was not in flight on a killed instance, a call hangs, an event arrives twice,
//! or Redis does not return to its start once the sessions have ended. Without `redis-server`
//! or `nginx` it says so and passes, unless `MODELCTX_REQUIRE_FLEET` is set (then it fails).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What `cargo xtask ci` runs: 90 s of load (about two minutes with the settling).
const CI_ARGS: &[&str] = &["--seconds", "90"];

/// What the `soak-fleet` step of `cargo xtask ci` runs: the failover soak, 60 s of load (its
/// default).
const CI_FLEET_ARGS: &[&str] = &["--fleet"];

/// The flags `soak` takes, each with a number.
const FLAGS: &[&str] = &["--minutes", "--seconds", "--clients", "--seed"];

/// The flag of the failover soak (no value).
const FLEET: &str = "--fleet";

/// The variable naming the `mcx` binary of the fleet (read by `modelctx_tests::fleet`).
const MCX_ENV: &str = "MODELCTX_MCX";

/// How `cargo xtask soak` builds the binary.
const BUILD: &[&str] = &[
    "build",
    "-p",
    "modelctx-tests",
    "--all-features",
    "--bin",
    "soak",
];

/// How the CI step (and `--fleet`, which needs `mcx` as well) builds it: as the "test" step
/// before it did (cargo builds a package's
/// binaries for its integration tests, with the features of the tests' build), so that nothing
/// is compiled again.
const CI_BUILD: &[&str] = &["test", "--workspace", "--all-features", "--no-run"];

/// The CI step.
pub(crate) fn ci(root: &Path) -> Result<(), String> {
    let args: Vec<String> = CI_ARGS.iter().map(|a| (*a).to_owned()).collect();
    run_with(root, CI_BUILD, &args, &[])
}

/// The CI step `soak-fleet`: the failover soak, after the "build" and "mcx" steps (so the soak
/// and `mcx` are built; `mcx` is built here should it be missing), with `env` (the fleet tests'
/// `MODELCTX_MCX` and `MODELCTX_REQUIRE_FLEET`).
pub(crate) fn ci_fleet(root: &Path) -> Result<(), String> {
    let args: Vec<String> = CI_FLEET_ARGS.iter().map(|a| (*a).to_owned()).collect();
    crate::ci::ensure_mcx(root)?;
    let mcx = crate::ci::mcx_binary(root);
    let env = [
        (MCX_ENV, mcx.into_os_string()),
        (crate::ci::REQUIRE_FLEET_ENV, "1".into()),
    ];
    run_with(root, CI_BUILD, &args, &env)
}

/// Checks the arguments: known flags, each followed by a number, and `--fleet`.
pub(crate) fn check_args(args: &[String]) -> Result<(), String> {
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == FLEET {
            continue;
        }
        if !FLAGS.contains(&flag.as_str()) {
            return Err(format!("soak: unknown argument {flag}"));
        }
        match it.next() {
            Some(value) if value.parse::<u64>().is_ok() => {}
            _ => return Err(format!("soak: {flag} needs a number")),
        }
    }
    Ok(())
}

/// Builds and runs the soak with `args` (with `mcx` too for `--fleet`).
pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    if !is_fleet(args) {
        return run_with(root, BUILD, args, &[]);
    }
    // The `mcx` just built, unless the caller names one.
    let mut env = Vec::new();
    if std::env::var_os(MCX_ENV).is_none() {
        env.push((MCX_ENV, crate::ci::mcx_binary(root).into_os_string()));
    }
    run_with(root, CI_BUILD, args, &env)
}

fn is_fleet(args: &[String]) -> bool {
    args.iter().any(|a| a == FLEET)
}

/// Builds the soak with `cargo <build>`, then runs it with `args` and the extra environment
/// `env`.
fn run_with(
    root: &Path,
    build: &[&str],
    args: &[String],
    env: &[(&str, std::ffi::OsString)],
) -> Result<(), String> {
    check_args(args)?;
    let status = Command::new(env!("CARGO"))
        .args(build)
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("building the soak binary failed".into());
    }
    let target = target_dir(root);
    let binary = target
        .join("debug")
        .join(format!("soak{}", std::env::consts::EXE_SUFFIX));
    let fleet = is_fleet(args);
    let mut child = Command::new(&binary)
        .envs(env.iter().map(|(name, value)| (name, value)))
        .args(args)
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    // The figures go to the terminal and to the report file.
    let mut report = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| format!("reading the soak's output: {e}"))?;
            println!("{line}");
            let _ = std::io::stdout().flush();
            report.push_str(&line);
            report.push('\n');
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the soak: {e}"))?;
    let dir = target.join("soak");
    let file = dir.join(if fleet {
        "fleet-report.md"
    } else {
        "report.md"
    });
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&file, &report))
        .map_err(|e| format!("writing {}: {e}", file.display()))?;
    eprintln!("soak: figures written to {}", file.display());
    if status.success() {
        Ok(())
    } else {
        Err(format!("the soak failed ({status}); see its figures above"))
    }
}

/// Cargo's target folder: `CARGO_TARGET_DIR` when set, else `target/` of the workspace.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_arguments_are_checked_before_anything_is_built() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(check_args(&args("--minutes 2 --seed 7")), Ok(()));
        assert_eq!(check_args(&args("")), Ok(()));
        assert!(check_args(&args("--minutes")).is_err());
        assert!(check_args(&args("--minutes two")).is_err());
        assert!(check_args(&args("--hours 1")).is_err());
        assert_eq!(check_args(&args("--fleet --seconds 30")), Ok(()));
        assert!(check_args(&args("--fleet 3")).is_err());
        assert!(is_fleet(&args("--seconds 30 --fleet")));
        assert!(!is_fleet(&args("--seconds 30")));
        assert!(args_are_valid(CI_ARGS));
        assert!(args_are_valid(CI_FLEET_ARGS));
        assert!(is_fleet(
            &CI_FLEET_ARGS
                .iter()
                .map(|a| (*a).to_owned())
                .collect::<Vec<_>>()
        ));
    }

    fn args_are_valid(args: &[&str]) -> bool {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        check_args(&args).is_ok()
    }
}
