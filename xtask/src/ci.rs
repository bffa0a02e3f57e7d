//! `cargo xtask ci`: every check CI runs, each step timed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use xtask::schema::{self, Error};

use crate::node;

/// The fuzz targets are a workspace of their own (`fuzz/`), checked in a target folder of their own.
/// cargo-fuzz builds them with nightly flags, hence `RUSTC_BOOTSTRAP`.
const FUZZ_ENV: &[(&str, &str)] = &[
    ("RUSTC_BOOTSTRAP", "1"),
    ("CARGO_TARGET_DIR", "target/fuzz-check"),
];

/// The benchmarks are a workspace of their own (`bench/`, with rmcp among its dependencies),
/// checked in a target folder of their own.
const BENCH_ENV: &[(&str, &str)] = &[("CARGO_TARGET_DIR", "target/bench-check")];

/// The fleet tests' `mcx` binary (read by `modelctx_tests::fleet`).
const MCX_ENV: &str = "MODELCTX_MCX";

/// Set to `1`, makes a fleet test (`modelctx_tests::fleet`) fail, rather than be skipped, when
/// `redis-server`, `nginx` or `mcx` is missing. `.ci/run` installs the first two.
pub(crate) const REQUIRE_FLEET_ENV: &str = "MODELCTX_REQUIRE_FLEET";

/// Crates that are (or drive) an async runtime or do I/O: none may be a normal or build dependency
/// of `modelctx-session`, which is sans-IO.
const RUNTIME_CRATES: &[&str] = &[
    "tokio",
    "hyper",
    "mio",
    "async-std",
    "smol",
    "async-io",
    "futures-executor",
    "tokio-util",
    "hyper-util",
    "actix-rt",
    "glommio",
];

/// What a CI step runs.
enum Run<'a> {
    /// `cargo <args>`; the exit status decides.
    Cargo(&'a [&'a str]),
    /// `cargo <args>` with its standard output captured; the exit status and then the function,
    /// given that output, decide.
    Judged(&'a [&'a str], fn(&str) -> Result<(), String>),
    /// A function of the xtask itself, given the project root, described by the string.
    Xtask(&'a str, fn(&Path) -> Result<(), String>),
}

/// One CI step: a name, what it runs, extra environment.
type Step<'a> = (&'a str, Run<'a>, &'a [(&'a str, &'a str)]);

/// Runs every step, or only the one named `only`; stops at the first failure.
pub(crate) fn run(only: Option<&str>) -> Result<(), Error> {
    use Run::{Cargo, Judged, Xtask};
    let root = schema::project_root();
    // The tests run the TypeScript SDK's servers (`tests/ts/`) on the Node 22 of the `node 22`
    // step, and fail rather than skip without it.
    let node_binary = node::binary(&root);
    let node_binary = node_binary
        .to_str()
        .ok_or_else(|| format!("the project path is not UTF-8: {}", node_binary.display()))?;
    // The fleet tests start `mcx serve demo` processes behind nginx, with Redis: the binary of
    // the "build" step, and no skipping.
    let mcx = mcx_binary(&root);
    let mcx = mcx
        .to_str()
        .ok_or_else(|| format!("the project path is not UTF-8: {}", mcx.display()))?;
    let test_env = [
        (node::NODE_ENV, node_binary),
        (node::REQUIRE_ENV, "1"),
        (MCX_ENV, mcx),
        (REQUIRE_FLEET_ENV, "1"),
    ];
    let steps: &[Step<'_>] = &[
        ("fmt", Cargo(&["fmt", "--all", "--", "--check"]), &[]),
        // The session is sans-IO: no async runtime among its dependencies, on any target, with
        // any feature.
        (
            "session has no runtime",
            Judged(
                &[
                    "tree",
                    "-p",
                    "modelctx-session",
                    "-e",
                    "normal,build",
                    "--target",
                    "all",
                    "--all-features",
                    "--prefix",
                    "none",
                    "--format",
                    "{p}",
                ],
                check_no_runtime,
            ),
            &[],
        ),
        // The transport matches no MCP method name outside its `headers/` module: the protocol
        // rules it needs are asked of modelctx-types (see "Who owns which rule").
        (
            "http reads no method names",
            Xtask(
                "no method name matched in crates/http/src outside headers/ and tests",
                crate::method_names::check,
            ),
            &[],
        ),
        (
            "clippy",
            Cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ]),
            &[],
        ),
        (
            "node 22",
            Xtask(
                "Node 22 into target/tools/node22, npm ci in tests/ts",
                node::ensure,
            ),
            &[],
        ),
        // Everything "test" runs, built first (the same command, so "test" finds it fresh):
        // `mcx` among it, as the CLI's integration tests need it, and the fleet tests run it
        // from outside cargo.
        (
            "build",
            Cargo(&["test", "--workspace", "--all-features", "--no-run"]),
            &test_env,
        ),
        (
            "mcx",
            Xtask("the fleet tests' mcx is built (MODELCTX_MCX)", ensure_mcx),
            &[],
        ),
        (
            "test",
            Cargo(&["test", "--workspace", "--all-features"]),
            &test_env,
        ),
        // The soak and fault suite, short: 90 s of load, then the tables must return to their
        // start.
        (
            "soak",
            Xtask(
                "the soak and fault suite, 90 s of load (cargo xtask soak --seconds 90)",
                crate::soak::ci,
            ),
            &[],
        ),
        // The failover soak: Redis, three `mcx` instances behind nginx, instances killed and
        // restarted under load (60 s of load, about 80 s in all); `MODELCTX_MCX` and
        // `MODELCTX_REQUIRE_FLEET=1` as for the fleet tests, so it fails without its binaries.
        (
            "soak-fleet",
            Xtask(
                "the failover soak, 60 s of load on a fleet of 3 (cargo xtask soak --fleet)",
                crate::soak::ci_fleet,
            ),
            &[],
        ),
        // The official suite against the conformance server and client, on both spec legs.
        (
            "conformance",
            Xtask(
                "the official MCP conformance suite, server and client, specs 2025-11-25 and 2026-07-28",
                crate::conformance::run,
            ),
            &[],
        ),
        // Every library crate with --no-default-features, then with each feature alone: the
        // features must not depend on each other. The list comes from `cargo metadata`.
        (
            "features",
            Xtask(
                "cargo check -p <crate> --no-default-features [--features <one>] of every library crate (target/features, -D warnings)",
                crate::features::check,
            ),
            &[],
        ),
        // One version of each core dependency (and of our crates) in the library crates' graph.
        (
            "duplicates",
            Xtask(
                "cargo tree -d of the library crates: no core dependency in two versions",
                crate::features::check_duplicates,
            ),
            &[],
        ),
        // The fuzz targets (`fuzz/`, run with `cargo fuzz`) keep compiling against the session;
        // `--locked`: with the versions of the committed `fuzz/Cargo.lock`.
        (
            "fuzz: compiles",
            Cargo(&["check", "--manifest-path", "fuzz/Cargo.toml", "--locked"]),
            FUZZ_ENV,
        ),
        // The benchmarks (`bench/`, run with `cargo xtask bench`) keep compiling against the
        // facades; `--locked`: with the versions of the committed lockfiles.
        (
            "bench: compiles",
            Xtask(
                "cargo check --locked of bench/ (--workspace) and of bench/otel (target/bench-check)",
                bench_compiles,
            ),
            &[],
        ),
        (
            "codegen --check",
            Cargo(&["xtask", "codegen", "--check"]),
            &[],
        ),
        // Every library crate packages as crates.io would get it and builds from that package
        // alone (its README inside the crate, no `include_str!` from outside it). xtask and
        // modelctx-tests are `publish = false` and named, as `--workspace` does not skip them.
        (
            "package",
            Xtask(
                "cargo package --workspace --exclude xtask --exclude modelctx-tests --locked",
                package,
            ),
            &[],
        ),
        (
            "rustdoc",
            Cargo(&["doc", "--workspace", "--no-deps", "--all-features"]),
            &[("RUSTDOCFLAGS", "-D warnings")],
        ),
        // Every public API change shows in review: the committed api/<crate>.txt must match
        // the tree (`cargo xtask api --bless` updates them).
        (
            "api",
            Xtask(
                "public API snapshots of the library crates match api/ (cargo xtask api)",
                crate::api::check,
            ),
            &[],
        ),
    ];
    let steps: Vec<&Step<'_>> = steps
        .iter()
        .filter(|(name, _, _)| only.is_none_or(|only| only == *name))
        .collect();
    if steps.is_empty() {
        return Err(format!("ci: no step named {:?}", only.unwrap_or_default()).into());
    }
    let started = Instant::now();
    let mut times = Vec::new();
    for (name, run, env) in steps {
        let t = Instant::now();
        // `Err(None)`: the step failed and said why itself (cargo's own output).
        let verdict: Result<(), Option<String>> = match run {
            Xtask(what, task) => {
                eprintln!("\n==> ci: {name}: {what}");
                task(&root).map_err(Some)
            }
            Cargo(args) => {
                eprintln!("\n==> ci: {name}: cargo {}", args.join(" "));
                let status = cargo(args, env, &root)
                    .status()
                    .map_err(|e| format!("cannot run cargo: {e}"))?;
                if status.success() { Ok(()) } else { Err(None) }
            }
            Judged(args, judge) => {
                eprintln!("\n==> ci: {name}: cargo {}", args.join(" "));
                let output = cargo(args, env, &root)
                    .stderr(Stdio::inherit())
                    .output()
                    .map_err(|e| format!("cannot run cargo: {e}"))?;
                if output.status.success() {
                    judge(&String::from_utf8_lossy(&output.stdout)).map_err(Some)
                } else {
                    Err(None)
                }
            }
        };
        let secs = t.elapsed().as_secs_f64();
        times.push((*name, secs));
        eprintln!(
            "==> ci: {name}: {} in {secs:.1}s",
            if verdict.is_ok() { "ok" } else { "FAILED" }
        );
        if let Err(why) = verdict {
            print_times(&times);
            return Err(match why {
                Some(why) => format!("ci step `{name}` failed: {why}"),
                None => format!("ci step `{name}` failed"),
            }
            .into());
        }
    }
    print_times(&times);
    eprintln!(
        "==> ci: all steps passed in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The "package" step: `cargo package` of every library crate, each verified by building it from
/// its `.crate` file.
///
/// cargo refuses to package files with uncommitted changes. On CI (the `CI` variable set) the
/// checkout is clean and the refusal stands: a dirty tree there is a bug. Locally, when `git
/// status` shows changes, `--allow-dirty` is passed (and said) so that `cargo xtask ci` checks
/// work in progress; the `.crate` files then hold the uncommitted sources.
pub(crate) fn package(root: &Path) -> Result<(), String> {
    let mut args = vec![
        "package",
        "--workspace",
        "--exclude",
        "xtask",
        "--exclude",
        "modelctx-tests",
        "--locked",
    ];
    if std::env::var_os("CI").is_none() && worktree_is_dirty(root)? {
        eprintln!("uncommitted changes and no CI variable: packaging with --allow-dirty");
        args.push("--allow-dirty");
    }
    // The verifying build is one of its own (every dependency compiled again, in its own
    // target folder) that nothing runs or debugs: without debug info it takes ~15% less.
    let status = cargo(&args, &[("CARGO_PROFILE_DEV_DEBUG", "0")], root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err("cargo package failed (see its output above)".into())
    }
}

/// Whether `git status` shows uncommitted changes (untracked files included) under `root`.
fn worktree_is_dirty(root: &Path) -> Result<bool, String> {
    let output = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !output.status.success() {
        return Err(format!("git status failed: {}", output.status));
    }
    Ok(!output.stdout.is_empty())
}

/// `cargo <args>` in `root` with the extra environment `env`.
fn cargo(args: &[&str], env: &[(&str, &str)], root: &Path) -> Command {
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(args).envs(env.iter().copied()).current_dir(root);
    cargo
}

/// The "bench: compiles" step: `cargo check --locked` of the bench workspace (the root package
/// and `lean/`), then of `bench/otel`, a workspace of its own (its own lockfile; the `otel`
/// feature of modelctx-server, which the other rows must not get), in one target folder.
fn bench_compiles(root: &Path) -> Result<(), String> {
    for manifest in ["bench/Cargo.toml", "bench/otel/Cargo.toml"] {
        let status = cargo(
            &[
                "check",
                "--manifest-path",
                manifest,
                "--locked",
                "--workspace",
            ],
            BENCH_ENV,
            root,
        )
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() {
            return Err(format!("cargo check of {manifest} failed"));
        }
    }
    Ok(())
}

/// Where cargo puts the debug `mcx`: in `CARGO_TARGET_DIR` (relative to the project root) when
/// it is set, else in `target/`.
pub(crate) fn mcx_binary(root: &Path) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), |dir| root.join(dir));
    target
        .join("debug")
        .join(format!("mcx{}", std::env::consts::EXE_SUFFIX))
}

/// Makes sure the `mcx` of [`mcx_binary`] exists: the "build" step built it for the CLI's
/// integration tests; should it not have, it is built here.
pub(crate) fn ensure_mcx(root: &Path) -> Result<(), String> {
    let mcx = mcx_binary(root);
    if !mcx.is_file() {
        eprintln!("{} is missing: building it", mcx.display());
        let status = cargo(&["build", "-p", "modelctx-cli", "--bin", "mcx"], &[], root)
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() {
            return Err("building mcx failed".into());
        }
    }
    if mcx.is_file() {
        Ok(())
    } else {
        Err(format!("no mcx at {} after building it", mcx.display()))
    }
}

fn print_times(times: &[(&str, f64)]) {
    eprintln!("\n==> ci: step times");
    for (name, secs) in times {
        eprintln!("    {name:<24} {secs:>8.1}s");
    }
}

/// Judges `cargo tree -p modelctx-session --prefix none --format {p}`: fails naming every async
/// runtime crate in the tree.
fn check_no_runtime(tree: &str) -> Result<(), String> {
    if !tree
        .lines()
        .any(|line| crate_name(line) == Some("modelctx-session"))
    {
        return Err(format!(
            "`cargo tree` did not list modelctx-session, so nothing was checked:\n{tree}"
        ));
    }
    let found = runtime_crates(tree);
    if found.is_empty() {
        return Ok(());
    }
    Err(format!(
        "modelctx-session must not depend on an async runtime, but its dependency tree has {} \
         (see `cargo tree -p modelctx-session -i <crate>` for the path)",
        found.join(", ")
    ))
}

/// The lines of a `cargo tree --prefix none --format {p}` listing whose crate is in
/// [`RUNTIME_CRATES`], each once.
fn runtime_crates(tree: &str) -> Vec<&str> {
    let mut found: Vec<&str> = Vec::new();
    for line in tree.lines() {
        let line = line.trim().trim_end_matches(" (*)");
        if crate_name(line).is_some_and(|name| RUNTIME_CRATES.contains(&name))
            && !found.contains(&line)
        {
            found.push(line);
        }
    }
    found
}

/// The crate name of a `cargo tree --format {p}` line (`tokio v1.40.0 (*)`): its first word.
fn crate_name(line: &str) -> Option<&str> {
    line.split_whitespace().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_crates_are_matched_by_exact_name() {
        let tree = "\
modelctx-session v0.1.0 (/work/main/crates/session)
serde v1.0.228
tokio v1.40.0
tokio-stream-like-name v0.1.0
my-tokio v1.0.0
hyper-util v0.1.10 (*)
tokio v1.40.0 (*)
";
        assert_eq!(
            runtime_crates(tree),
            ["tokio v1.40.0", "hyper-util v0.1.10"]
        );
        assert_eq!(crate_name("serde v1"), Some("serde"));
        assert_eq!(crate_name(""), None);
        assert!(runtime_crates("serde v1\ntokio-stream-like-name v1\nmio-ish v0.8\n").is_empty());
    }

    #[test]
    fn the_verdict_names_the_offending_crate() {
        let clean = "modelctx-session v0.1.0 (/x)\nserde v1.0.228\nthiserror v2.0.0\n";
        assert_eq!(check_no_runtime(clean), Ok(()));
        let error = check_no_runtime("modelctx-session v0.1.0 (/x)\nmio v1.0.2\n").unwrap_err();
        assert!(error.contains("mio v1.0.2"), "{error}");
        // An empty listing checks nothing: it fails rather than passing silently.
        assert!(check_no_runtime("").is_err());
    }
}
