//! `cargo xtask bench`: builds `bench/` in release mode, runs every workload against every
//! implementation with the one load generator (`bench/src/bin/load.rs`), interleaved over
//! several rounds, and writes `docs/benchmarks.md`.
//!
//! B1 (the clean build of a minimal stdio server) takes minutes, so it runs only with
//! `MODELCTX_BENCH_BUILD=1`; its last result is kept in `bench/minimal/b1.json` and reported
//! with its date otherwise.
//!
//! The fleet rows (modelctx with the Redis stores, `mc_fleet`) need `redis-server` and `nginx`:
//! without them a run skips those rows, says so on stderr and under their tables, and measures
//! the rest. `cargo xtask bench --fleet` measures only the workloads with fleet rows, against
//! modelctx in memory and the limit of the same run, and writes them as a section of their own
//! into the existing `docs/benchmarks.md` (the rest of the page stays as the last full run
//! wrote it).
//!
//! The observability rows (issue 27) are the same modelctx server with one pass-through
//! middleware layer (`mc_stdio layered`, `mc_http layered`), and built with the `otel` feature
//! (`bench/otel/`, a workspace of its own) with its OpenTelemetry pipeline installed and with
//! none, against the plain server, in S2, H1, H3-16 and H4-16. A full run measures them after
//! the rest and writes their section; `cargo xtask bench --observability` measures only them
//! and writes only that section into the existing page.

mod report;
mod runner;
mod stats;

pub(crate) use runner::{run, run_fleet, run_observability};

/// Rounds over every cell; a cell reports its median round.
const ROUNDS: usize = 3;
/// Rounds of the observability rows: their costs are a few per cent, as small as the noise of
/// one round, so each is the median of this many rounds' paired ratios (see `report`).
const OBSERVABILITY_ROUNDS: usize = 9;
/// Measured seconds per run, after `WARMUP` seconds of the same load.
const SECS: &str = "1.5";
const WARMUP: &str = "0.3";
/// Sessions held open by M1, and opened and ended by M2.
const IDLE_SESSIONS: &str = "1000";
const CHURNED_SESSIONS: &str = "10000";
/// Server starts per round in C1.
const COLD_RUNS: &str = "5";

/// The target folder of the bench build: the bench workspace's own (as `cd bench && cargo build`).
const TARGET_DIR: &str = "bench/target";
/// Where B1's last result is kept.
const B1_RECORD: &str = "bench/minimal/b1.json";
/// The environment variable that makes the run include B1.
const B1_ENV: &str = "MODELCTX_BENCH_BUILD";

/// How a server is started.
#[derive(Clone, Copy)]
enum Program {
    /// A binary of `bench/`, with its arguments.
    Bin(&'static [&'static str]),
    /// `node bench/ts/echo.mjs`, with these arguments.
    Node(&'static [&'static str]),
}

/// An implementation: its name in the tables and how to start it.
#[derive(Clone, Copy)]
struct Implementation {
    name: &'static str,
    program: Program,
    /// A limit (not an MCP implementation): what the others are measured against.
    limit: bool,
}

impl Implementation {
    /// Whether it needs `redis-server` and `nginx` (the fleet rows, `mc_fleet`).
    fn needs_fleet(&self) -> bool {
        matches!(self.program, Program::Bin(args) if args.first() == Some(&"mc_fleet"))
    }
}

/// The implementations `cargo xtask bench --fleet` runs in each workload with fleet rows: modelctx
/// in memory (the ratios are against it), the fleet rows, and the limit.
const FLEET_RUN: &[Implementation] = &[MODELCTX_HTTP, MODELCTX_REDIS, MODELCTX_NGINX, RAW_HTTP];

/// The heading (its start) of the section `cargo xtask bench --fleet` writes.
const FLEET_SECTION: &str = "H3/H4 with the Redis stores";

/// The heading (its start) of the section of the observability rows.
const OBSERVABILITY_SECTION: &str = "Observability: the middleware chain and `otel`";

/// The workloads of the observability rows (the targets are on S2 and H4-16), each
/// against [`OBSERVABILITY_STDIO`] or [`OBSERVABILITY_HTTP`] by its transport.
const OBSERVABILITY_WORKLOADS: &[&str] = &["S2", "H1", "H3-16", "H4-16"];

/// The workloads whose observability rows are held to the target.
const OBSERVABILITY_TARGETED: &[&str] = &["S2", "H4-16"];

/// The target: each row's cost (server CPU per call) under 5% of the plain server's.
const OBSERVABILITY_TARGET: f64 = 0.05;

/// The observability rows of a stdio workload: the plain server first (the ratios are against
/// it), then one pass-through layer, then the `otel` build with its pipeline and without one.
const OBSERVABILITY_STDIO: &[Implementation] = &[
    MODELCTX_STDIO,
    MODELCTX_STDIO_LAYERED,
    MODELCTX_STDIO_OTEL,
    MODELCTX_STDIO_OTEL_OFF,
];
/// The same for an HTTP workload (JSON responses).
const OBSERVABILITY_HTTP: &[Implementation] = &[
    MODELCTX_HTTP,
    MODELCTX_HTTP_LAYERED,
    MODELCTX_HTTP_OTEL,
    MODELCTX_HTTP_OTEL_OFF,
];

/// The plan of the observability rows: each workload of [`OBSERVABILITY_WORKLOADS`] with the
/// rows of its transport.
fn observability_plan() -> Vec<(&'static Workload, Vec<Implementation>)> {
    WORKLOADS
        .iter()
        .filter(|w| OBSERVABILITY_WORKLOADS.contains(&w.name))
        .map(|w| {
            let stdio = w
                .implementations
                .iter()
                .any(|i| i.name == MODELCTX_STDIO.name);
            let rows = if stdio {
                OBSERVABILITY_STDIO
            } else {
                OBSERVABILITY_HTTP
            };
            (w, rows.to_vec())
        })
        .collect()
}

/// The programs the fleet rows need, and where they are looked for besides the `PATH` (as
/// `mc_fleet` looks for them: Debian puts nginx in `/usr/sbin`).
const FLEET_PROGRAMS: &[&str] = &["redis-server", "nginx"];
const FLEET_DIRS: &[&str] = &["/usr/bin", "/usr/sbin"];

/// Why the fleet rows cannot run here (`None`: they can): the programs not found.
fn fleet_missing() -> Option<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<std::path::PathBuf> = std::env::split_paths(&path)
        .chain(FLEET_DIRS.iter().map(std::path::PathBuf::from))
        .collect();
    fleet_missing_in(&dirs)
}

/// Why the fleet rows cannot run with the programs of `dirs`: the programs not found.
fn fleet_missing_in(dirs: &[std::path::PathBuf]) -> Option<String> {
    let missing: Vec<&str> = FLEET_PROGRAMS
        .iter()
        .copied()
        .filter(|program| !dirs.iter().any(|dir| dir.join(program).is_file()))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "{} not found (on the PATH, in /usr/bin or /usr/sbin; Debian packages redis-server and nginx)",
            missing.join(" and ")
        )
    })
}

const fn implementation(name: &'static str, program: Program) -> Implementation {
    Implementation {
        name,
        program,
        limit: false,
    }
}

const fn limit(name: &'static str, program: Program) -> Implementation {
    Implementation {
        name,
        program,
        limit: true,
    }
}

const MODELCTX_STDIO: Implementation = implementation("modelctx", Program::Bin(&["mc_stdio"]));
const MODELCTX_STDIO_LEAN: Implementation =
    implementation("modelctx (lean)", Program::Bin(&["mc_stdio_lean"]));
const RMCP_STDIO: Implementation =
    implementation("rmcp 3.11 `stdio()`", Program::Bin(&["rmcp_stdio"]));
const RMCP_PIPES: Implementation = implementation(
    "rmcp 3.11 `stdio_pipes()`",
    Program::Bin(&["rmcp_stdio", "pipes"]),
);
const TS_STDIO: Implementation = implementation("TypeScript SDK 1.32", Program::Node(&["stdio"]));
const RAW_STDIO: Implementation = limit(
    "limit: raw serde_json line echo",
    Program::Bin(&["raw_stdio"]),
);
const MODELCTX_HTTP: Implementation = implementation("modelctx (JSON)", Program::Bin(&["mc_http"]));
/// The observability rows: the same server with one pass-through middleware layer
/// (`bench/src/echo.rs`), and the `otel` build (`bench/otel/`) with its OpenTelemetry pipeline
/// (no exporter: spans recorded and dropped, metrics aggregated and never read) and without one
/// (`off`: no subscriber, the global no-op meter provider).
const MODELCTX_STDIO_LAYERED: Implementation = implementation(
    "modelctx, one pass-through layer",
    Program::Bin(&["mc_stdio", "layered"]),
);
const MODELCTX_STDIO_OTEL: Implementation = implementation(
    "modelctx `otel`, pipeline without export",
    Program::Bin(&["mc_stdio_otel"]),
);
const MODELCTX_STDIO_OTEL_OFF: Implementation = implementation(
    "modelctx `otel`, nothing installed",
    Program::Bin(&["mc_stdio_otel", "off"]),
);
const MODELCTX_HTTP_LAYERED: Implementation = implementation(
    "modelctx (JSON), one pass-through layer",
    Program::Bin(&["mc_http", "layered"]),
);
const MODELCTX_HTTP_OTEL: Implementation = implementation(
    "modelctx (JSON) `otel`, pipeline without export",
    Program::Bin(&["mc_http_otel"]),
);
const MODELCTX_HTTP_OTEL_OFF: Implementation = implementation(
    "modelctx (JSON) `otel`, nothing installed",
    Program::Bin(&["mc_http_otel", "off"]),
);
const MODELCTX_HTTP_LEAN: Implementation =
    implementation("modelctx (lean, JSON)", Program::Bin(&["mc_http_lean"]));
const MODELCTX_SSE: Implementation = implementation(
    "modelctx (`sse_responses`)",
    Program::Bin(&["mc_http", "sse"]),
);
const RMCP_SESSION: Implementation = implementation(
    "rmcp 3.11 (sessions, SSE)",
    Program::Bin(&["rmcp_http", "session"]),
);
const RMCP_STATELESS: Implementation = implementation(
    "rmcp 3.11 (stateless, JSON)",
    Program::Bin(&["rmcp_http", "stateless"]),
);
const TS_HTTP: Implementation = implementation(
    "TypeScript SDK 1.32 (sessions, JSON)",
    Program::Node(&["http", "json"]),
);
const TS_SSE: Implementation = implementation(
    "TypeScript SDK 1.32 (sessions, SSE)",
    Program::Node(&["http", "sse"]),
);
/// The fleet rows (`mc_fleet`): the same server with the Redis stores of `modelctx-redis`, one
/// instance; and two instances behind nginx round-robin. Their CPU and memory figures count
/// Redis and nginx (the load generator sums the server's process tree). On 2 cores these measure
/// the stores' cost, not scaling.
const MODELCTX_REDIS: Implementation = implementation(
    "modelctx, Redis stores (1 instance + Redis)",
    Program::Bin(&["mc_fleet", "redis"]),
);
const MODELCTX_NGINX: Implementation = implementation(
    "modelctx, Redis stores (2 instances + nginx + Redis)",
    Program::Bin(&["mc_fleet", "nginx"]),
);
const RAW_HTTP: Implementation = limit("limit: bare hyper", Program::Bin(&["raw_http"]));
const RAW_SSE: Implementation = limit(
    "limit: bare hyper (SSE)",
    Program::Bin(&["raw_http", "sse"]),
);

// The first row of a table is modelctx as the README builds it (the ratios are against it); the
// lean build is the second.
const STDIO: &[Implementation] = &[
    MODELCTX_STDIO,
    MODELCTX_STDIO_LEAN,
    RMCP_STDIO,
    RMCP_PIPES,
    TS_STDIO,
    RAW_STDIO,
];
const HTTP_JSON: &[Implementation] = &[
    MODELCTX_HTTP,
    MODELCTX_HTTP_LEAN,
    RMCP_STATELESS,
    TS_HTTP,
    RAW_HTTP,
];
const HTTP_SSE: &[Implementation] = &[MODELCTX_SSE, RMCP_SESSION, TS_SSE, RAW_SSE];
const HTTP: &[Implementation] = &[
    MODELCTX_HTTP,
    MODELCTX_HTTP_LEAN,
    MODELCTX_REDIS,
    MODELCTX_NGINX,
    RMCP_SESSION,
    RMCP_STATELESS,
    TS_HTTP,
    RAW_HTTP,
];
const HTTP_MODERN: &[Implementation] = &[
    MODELCTX_HTTP,
    MODELCTX_HTTP_LEAN,
    MODELCTX_REDIS,
    MODELCTX_NGINX,
    RMCP_STATELESS,
    RAW_HTTP,
];
const SESSIONS: &[Implementation] = &[MODELCTX_HTTP, MODELCTX_HTTP_LEAN, RMCP_SESSION, TS_HTTP];
const COLD: &[Implementation] = &[
    MODELCTX_STDIO,
    MODELCTX_STDIO_LEAN,
    RMCP_STDIO,
    TS_STDIO,
    RAW_STDIO,
];

/// What a workload measures, and so how its table looks.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Throughput,
    IdleSessions,
    Churn,
    Cold,
}

/// A workload: name, what it is, the load generator's arguments.
struct Workload {
    name: &'static str,
    what: &'static str,
    kind: Kind,
    load: &'static [&'static str],
    implementations: &'static [Implementation],
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "S1",
        what: "stdio, sequential round trips (legacy handshake, then `tools/call`)",
        kind: Kind::Throughput,
        load: &["stdio-seq"],
        implementations: STDIO,
    },
    Workload {
        name: "S2",
        what: "stdio, pipelined, 64 requests in flight",
        kind: Kind::Throughput,
        load: &["stdio-pipe", "--inflight", "64"],
        implementations: STDIO,
    },
    Workload {
        name: "H1",
        what: "Streamable HTTP, one client, sequential, JSON responses (one legacy session; rmcp answers JSON only without sessions)",
        kind: Kind::Throughput,
        load: &["http", "--clients", "1"],
        implementations: HTTP_JSON,
    },
    Workload {
        name: "H2",
        what: "Streamable HTTP, one legacy session, sequential, SSE responses (each server configured to answer with an event stream)",
        kind: Kind::Throughput,
        load: &["http", "--clients", "1"],
        implementations: HTTP_SSE,
    },
    Workload {
        name: "H3-16",
        what: "Streamable HTTP, 16 concurrent legacy sessions, one connection each",
        kind: Kind::Throughput,
        load: &["http", "--clients", "16"],
        implementations: HTTP,
    },
    Workload {
        name: "H3",
        what: "Streamable HTTP, 64 concurrent legacy sessions, one connection each",
        kind: Kind::Throughput,
        load: &["http", "--clients", "64"],
        implementations: HTTP,
    },
    Workload {
        name: "H4-16",
        what: "Streamable HTTP, 16 concurrent modern (2026-07-28, stateless) clients (the TypeScript SDK 1.x does not speak 2026-07-28)",
        kind: Kind::Throughput,
        load: &["http", "--clients", "16", "--modern"],
        implementations: HTTP_MODERN,
    },
    Workload {
        name: "H4",
        what: "Streamable HTTP, 64 concurrent modern (2026-07-28, stateless) clients",
        kind: Kind::Throughput,
        load: &["http", "--clients", "64", "--modern"],
        implementations: HTTP_MODERN,
    },
    Workload {
        name: "M1",
        what: "memory per idle legacy session, 1000 open (initialized; no open connection, no stream)",
        kind: Kind::IdleSessions,
        load: &["sessions", "--count", IDLE_SESSIONS],
        implementations: SESSIONS,
    },
    Workload {
        name: "M2",
        what: "RSS after 10 000 legacy sessions opened and ended (DELETE), over 4 connections, against before",
        kind: Kind::Churn,
        load: &["churn", "--count", CHURNED_SESSIONS, "--clients", "4"],
        implementations: SESSIONS,
    },
    Workload {
        name: "C1",
        what: "cold start: from spawning the stdio server to the result of its first `tools/call` (after the handshake)",
        kind: Kind::Cold,
        load: &["cold", "--runs", COLD_RUNS],
        implementations: COLD,
    },
];

/// B1's programs: the name in the table, the folder under `bench/minimal/`, and what its build
/// enables. modelctx as the README shows it first (the one the targets are about), then the lean
/// build, rmcp, and the floor (no MCP at all).
const MINIMAL: &[(&str, &str, &str)] = &[
    (
        "modelctx",
        B1_MODELCTX,
        "`modelctx-server` with its default features (stdio, http, schemars, validation), the input schema derived by schemars, as the README shows",
    ),
    (
        "modelctx (lean)",
        "modelctx-stdio-min",
        "`modelctx-server` with default features off and `stdio` only (no HTTP, no schemars, no validation)",
    ),
    (
        "rmcp 3.11",
        B1_RMCP,
        "`rmcp` with default features off and `server`, `transport-io` (no macros, no schemars)",
    ),
    (
        "floor",
        B1_FLOOR,
        "no MCP: stdin to stdout through serde_json, with the tokio, serde and serde_json features of the lean modelctx server's tree",
    ),
];

/// The folders of the B1 programs the targets compare.
const B1_MODELCTX: &str = "modelctx-stdio-default";
const B1_RMCP: &str = "rmcp-stdio-min";
const B1_FLOOR: &str = "floor-stdio-min";

#[cfg(test)]
mod tests {
    use super::*;

    /// Every observability workload measures the plain server first (the ratios are against
    /// it), then the layered and `otel` rows of its own transport; the targeted ones are among
    /// them.
    #[test]
    fn the_observability_rows_are_against_the_plain_server_of_their_transport() {
        let plan = observability_plan();
        let names: Vec<&str> = plan.iter().map(|(w, _)| w.name).collect();
        assert_eq!(names, OBSERVABILITY_WORKLOADS);
        for target in OBSERVABILITY_TARGETED {
            assert!(names.contains(target), "{target}");
        }
        for (w, rows) in &plan {
            assert_eq!(rows.len(), 4, "{}", w.name);
            assert!(
                w.implementations.iter().any(|i| i.name == rows[0].name),
                "{}: the first row is the plain server of the workload's table",
                w.name
            );
            assert!(rows.iter().all(|i| !i.limit && !i.needs_fleet()));
        }
        assert_eq!(plan[0].1[0].name, MODELCTX_STDIO.name);
        assert_eq!(plan[3].1[0].name, MODELCTX_HTTP.name);
    }

    /// The fleet rows need both programs; the reason names each one missing.
    #[test]
    fn the_fleet_rows_need_redis_server_and_nginx() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-fleet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dirs = [dir.clone()];
        let none = fleet_missing_in(&dirs).expect("nothing there");
        assert!(
            none.starts_with("redis-server and nginx not found"),
            "{none}"
        );
        std::fs::write(dir.join("nginx"), "").unwrap();
        let one = fleet_missing_in(&dirs).expect("no redis-server");
        assert!(one.starts_with("redis-server not found"), "{one}");
        std::fs::write(dir.join("redis-server"), "").unwrap();
        assert_eq!(fleet_missing_in(&dirs), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(MODELCTX_REDIS.needs_fleet() && MODELCTX_NGINX.needs_fleet());
        assert!(!MODELCTX_HTTP.needs_fleet() && !TS_HTTP.needs_fleet());
    }
}
