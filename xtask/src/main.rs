//! `cargo xtask`: the project's automation. All commands and flags are declared here.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

mod api;
mod bench;
mod ci;
mod conformance;
mod features;
mod method_names;
mod node;
mod release;
mod soak;
mod workspace;

use xtask::{codegen, schema};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  api [--bless] [--toolchain nightly|stable]
      the public API of every library crate (workspace members with a library target, but
      modelctx-tests and xtask), from rustdoc JSON with all features (nightly when rustup has it,
      else stable with RUSTC_BOOTSTRAP=1), rendered to sorted lines and compared with the committed
      api/<crate>.txt: prints the removed (-) and added (+) lines and fails on any difference;
      --bless rewrites api/ instead (and removes the files of crates that are gone)
  release-check [--baseline REV]
      the release checklist: cargo-semver-checks (installed into target/tools if missing) of every
      library crate against the latest v* tag (or REV), the API snapshots fresh, cargo package,
      CHANGELOG.md has an [Unreleased] section, every crate's version is the workspace's; with
      no v* tag yet it says so and runs the rest
  codegen [--check] [--schema-dir DIR]
      generate crates/types/src/generated from the pinned upstream schema files
      (read from DIR, else $MCP_SCHEMA_DIR, else ../shared/mcp-schema);
      --check fails if the committed code is stale
  bench
      builds bench/ (its own workspace: modelctx as the README builds it and lean (bench/lean,
      built on its own), rmcp 3.11, the TypeScript SDK (bench/ts, on
      the Node 22 of `node`) and the raw limits behind one echo tool, modelctx with its Redis
      stores (bench/src/bin/mc_fleet.rs: one instance, and two behind nginx; needs
      redis-server and nginx), modelctx with a pass-through layer and built with `otel`
      (bench/otel, built on its own), and the load generator) in release mode into
      bench/target, runs every workload against every implementation,
      interleaved over 3 rounds, and writes docs/benchmarks.md; MODELCTX_BENCH_BUILD=1 also
      runs B1 (clean builds of bench/minimal/*, a few minutes more). Without redis-server or
      nginx the fleet rows are skipped, and the page says so
  bench --fleet
      only the workloads with fleet rows (H3-16, H3, H4-16, H4) against modelctx in memory, its
      Redis stores rows and bare hyper, written as their own section into docs/benchmarks.md
      (the rest of the page is left as it is); without redis-server or nginx it says so and
      writes nothing
  bench --observability
      only the observability rows (issue 27): modelctx as the README builds it, the same
      server with one pass-through middleware layer, and built with the `otel` feature
      (bench/otel, a workspace of its own) with an OpenTelemetry pipeline that exports nothing
      and with none, in S2, H1, H3-16 and H4-16, side by side; written as their own section
      into docs/benchmarks.md with the cost of each against the plain server and the issue's
      5% targets (a full `bench` measures and writes them too, after the rest); about 5 minutes
      of measuring after the builds
  ci [--step NAME]
      everything CI checks (or only the step NAME, as the step list names it): fmt, no async runtime under modelctx-session, clippy -D warnings,
      Node 22 (see `node`), tests (run with MODELCTX_NODE and MODELCTX_REQUIRE_NODE=1), a
      90-second soak (see `soak`), the failover soak (`soak --fleet`, 60 s), the official
      conformance suite (see `conformance`),
      feature checks, the fuzz targets compile, the bench workspaces compile (bench/ and
      bench/otel), codegen --check, cargo package of every library crate (verified; --allow-dirty only off CI
      with uncommitted changes), rustdoc -D warnings, the API snapshots (see `api`)
  conformance
      the official MCP conformance suite (tests/conformance, pinned) on Node 22: the server suite
      against tests' conformance-server and the client suite driving conformance-client, each
      with --suite all, once with --spec-version 2025-11-25 and once with 2026-07-28; results and
      target/conformance/summary.md; fails on a result tests/conformance/expected-failures.yml
      does not list (or lists but passes). The client's 33 auth/* scenarios run on both legs
      (those --suite all leaves out, by name); target/conformance/auth.md tabulates them
  conformance --client-auth
      only the client's 33 auth/* scenarios, by name, on both legs, and auth.md
  soak [--minutes N | --seconds N] [--clients N] [--seed N]
      the soak and fault suite (tests/src/bin/soak): the demo server over HTTP (a child
      process) under load from clients of both eras (default 16) for 2 minutes by default
      while faults are injected (streams cut mid-call and resumed, slow readers, slowloris
      and idle sockets, garbage requests, client restarts, initialize floods); prints the
      figures and writes them to <target>/soak/report.md; fails on a duplicate, a failed
      call of a load client, a fault outcome that reveals a defect, or a server table that
      does not return to its start
  soak --fleet [--seconds N] [--clients N] [--seed N]
      the failover soak: redis-server, 3 `mcx serve demo --http --redis` instances (the mcx
      of the ci build, given in MODELCTX_MCX) and nginx round-robin in front of them; clients
      of both eras (default 12) through nginx for 60 s by default while instances are killed
      (kill -9) and restarted on a seeded schedule; prints calls made and lost, events
      replayed, duplicates and Redis memory before and after, writes them to
      <target>/soak/fleet-report.md; fails when a call fails that was not in flight on a
      killed instance, a call hangs, an event arrives twice, or Redis does not return to its
      start once the sessions have ended
  node
      the Node 22 that the tests run the TypeScript SDK servers (tests/ts) with: installs it from
      the npm registry into target/tools/node22 if missing, runs `npm ci` in tests/ts if its
      node_modules is missing or stale, and prints the environment for `cargo test`:
      MODELCTX_NODE=<the binary> and MODELCTX_REQUIRE_NODE=1
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("codegen") => codegen_cmd(&args[1..]),
        Some("ci") if args.len() == 1 => ci::run(None),
        Some("ci") if args.len() == 3 && args[1] == "--step" => ci::run(Some(args[2].as_str())),
        Some("api") => api::run(&schema::project_root(), &args[1..]).map_err(Into::into),
        Some("release-check") => {
            release::run(&schema::project_root(), &args[1..]).map_err(Into::into)
        }
        Some("bench") if args.len() == 1 => bench::run(&schema::project_root()).map_err(Into::into),
        Some("bench") if args.len() == 2 && args[1] == "--fleet" => {
            bench::run_fleet(&schema::project_root()).map_err(Into::into)
        }
        Some("bench") if args.len() == 2 && args[1] == "--observability" => {
            bench::run_observability(&schema::project_root()).map_err(Into::into)
        }
        Some("node") if args.len() == 1 => node_cmd(),
        Some("soak") => soak::run(&schema::project_root(), &args[1..]).map_err(Into::into),
        Some("conformance") if args.len() == 1 => {
            conformance::run(&schema::project_root()).map_err(Into::into)
        }
        Some("conformance") if args.len() == 2 && args[1] == "--client-auth" => {
            conformance::auth::run_only(&schema::project_root()).map_err(Into::into)
        }
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => Err(format!("unknown or missing command\n\n{USAGE}").into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn node_cmd() -> Result<(), schema::Error> {
    let root = schema::project_root();
    let started = Instant::now();
    node::ensure(&root)?;
    eprintln!("node: ready in {:.1}s", started.elapsed().as_secs_f64());
    println!("{}={}", node::NODE_ENV, node::binary(&root).display());
    println!("{}=1", node::REQUIRE_ENV);
    Ok(())
}

fn codegen_cmd(args: &[String]) -> Result<(), schema::Error> {
    let mut check = false;
    let mut dir = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--check" => check = true,
            "--schema-dir" => {
                let value = it.next().ok_or("--schema-dir needs a directory")?;
                dir = Some(PathBuf::from(value));
            }
            other => return Err(format!("codegen: unknown argument {other}\n\n{USAGE}").into()),
        }
    }
    codegen::run(&schema::project_root(), &schema::schema_dir(dir), check)
}
