//! `cargo xtask conformance`: the official MCP conformance suite against our conformance server
//! and client, for both spec legs, with a summary table.
//!
//! The suite (`tests/conformance`, `@modelcontextprotocol/conformance` pinned exactly) runs on the
//! Node 22 of [`node`]. The conformance server (`tests/src/bin/conformance-server.rs`) listens on a
//! free loopback port; the server suite (`--suite all`) and the client suite (`--suite all`, the
//! conformance client binary as `--command`) run once with `--spec-version 2025-11-25` and once
//! with `2026-07-28`. Every scenario's `checks.json` is kept under `target/conformance/<leg>/<side>/`
//! and `target/conformance/summary.md` tallies them. `tests/conformance/expected-failures.yml` lists
//! what may fail, each entry with its reason; the suite itself fails the run on an unexpected
//! failure and on a stale entry (one that passes).
//!
//! A third side, `server via mcx proxy`, runs the server suite on both legs against the same
//! server run over stdio (`conformance-server --stdio`) behind `mcx proxy`, so that the suite
//! checks the stdio stack and the proxy too. Its results go under
//! `target/conformance/<leg>/server-proxy/`, its expected failures in
//! `tests/conformance/expected-failures-proxy.yml`. The extensions' server scenarios
//! ([`SKILLS_SCENARIOS`], [`TASKS_SCENARIOS`]) run by name through the proxy too.
//!
//! A fourth side, `server via mcx host`, runs the same scenarios against the gateway: `mcx host
//! --http` with a config file whose single server is `conformance-server --stdio`,
//! `--namespace on-collision` (the suite calls the fixture's tools by their names) and a policy
//! file that allows everything (both written under `target/conformance/`). Its results go under
//! `target/conformance/<leg>/server-host/`, its expected failures (what a gateway cannot pass
//! on, each with its reason) in `tests/conformance/expected-failures-host.yml`.
//!
//! `--suite all` leaves out the scenarios of extensions; those of the Skills extension
//! ([`SKILLS_SCENARIOS`]) run by name after each suite, on both legs, into the same folders, and
//! the server scenarios of the Tasks extension ([`TASKS_SCENARIOS`]) after the server suite of
//! the 2026-07-28 leg.
//! The summary counts skipped checks apart, so that a scenario that checked nothing shows.
//!
//! The client's 33 authorization scenarios run on both legs: those `--suite all` leaves out at
//! a leg (extensions, back-compatibility, and at 2025-11-25 those introduced by 2026-07-28) run
//! by name after it ([`auth`]); `target/conformance/auth.md` tabulates them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::node;

/// The client's authorization scenarios: those `--suite all` leaves out run by name.
#[path = "conformance_auth.rs"]
pub(crate) mod auth;

/// The npm project of the suite, relative to the project root.
const SUITE_DIR: &str = "tests/conformance";
/// The suite's entry point inside it.
const SUITE_BIN: &str = "node_modules/@modelcontextprotocol/conformance/dist/index.js";
/// The expected failures, relative to the project root.
const EXPECTED: &str = "tests/conformance/expected-failures.yml";
/// The expected failures of the server suite through `mcx proxy`.
const EXPECTED_PROXY: &str = "tests/conformance/expected-failures-proxy.yml";
/// The expected failures of the server suite through `mcx host` (the gateway).
const EXPECTED_HOST: &str = "tests/conformance/expected-failures-host.yml";
/// The sides of the summary: results folder and label.
const SIDES: &[(&str, &str)] = &[
    ("server", "server"),
    ("client", "client"),
    ("server-proxy", "server via mcx proxy"),
    ("server-host", "server via mcx host"),
];
/// Where the results go, relative to the project root.
const OUT: &str = "target/conformance";
/// The two legs.
const LEGS: &[&str] = &["2025-11-25", "2026-07-28"];
/// How long one client process may take (ms).
const CLIENT_TIMEOUT_MS: &str = "30000";
/// The scenarios of the Skills extension (SEP-2640), by side. `--suite all` leaves extension
/// scenarios out (they are not on the spec's timeline), so they run by name on both legs, with
/// `--force` (without it the suite skips an extension scenario at a given `--spec-version`),
/// their results going into the same folders as the suite's.
const SKILLS_SCENARIOS: &[(&str, &str)] = &[
    ("server", "sep-2640-skills-enumeration"),
    ("server", "sep-2640-skills-manifest"),
    ("server", "sep-2640-skills-directory"),
    ("client", "sep-2640-client-no-prefetch"),
    ("client", "sep-2640-client-verify-digest"),
    ("client", "sep-2640-client-verify-size"),
    ("client", "sep-2640-client-verify-frontmatter"),
];

/// The server scenarios of the Tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`), run by
/// name like [`SKILLS_SCENARIOS`], with `--force`, on the 2026-07-28 leg only: the extension is
/// defined for 2026-07-28 (a 2025-11-25 session has the experimental tasks of that version
/// instead, whose rules differ: `tasks/result` and `tasks/list` exist there, `tasks/update` does
/// not).
const TASKS_SCENARIOS: &[&str] = &[
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-mrtr-composition",
    "tasks-dispatch-and-envelope",
    "tasks-request-headers",
    "tasks-required-task-error",
    "tasks-status-notifications",
];
/// The leg the [`TASKS_SCENARIOS`] run on.
const TASKS_LEG: &str = "2026-07-28";

/// Runs both suites on both legs and writes the summary; fails if any run failed.
pub(crate) fn run(root: &Path) -> Result<(), String> {
    node::ensure(root)?;
    node::ensure_packages(root, SUITE_DIR)?;
    let bins = build(root)?;
    let out = root.join(OUT);
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;

    let mut server = Server::start(&bins.join("conformance-server"))?;
    let url = format!("http://127.0.0.1:{}/mcp", server.port);
    eprintln!("conformance: the server listens at {url}");
    let mut failures = Vec::new();
    for leg in LEGS {
        for side in ["server", "client"] {
            let started = Instant::now();
            let dir = out.join(leg).join(side);
            let mut suite = Command::new(node::binary(root));
            suite
                .arg(root.join(SUITE_DIR).join(SUITE_BIN))
                .arg(side)
                .args(["--suite", "all", "--spec-version", leg])
                .arg("--expected-failures")
                .arg(root.join(EXPECTED))
                .arg("-o")
                .arg(&dir)
                .current_dir(root.join(SUITE_DIR));
            if side == "server" {
                suite.args(["--url", &url]);
            } else {
                suite
                    .arg("--command")
                    .arg(bins.join("conformance-client"))
                    .args(["--timeout", CLIENT_TIMEOUT_MS]);
            }
            eprintln!("\n==> conformance: {side} suite, spec {leg}");
            let log = out.join(format!("{leg}-{side}.log"));
            let status = run_logged(&mut suite, &log)?;
            eprintln!(
                "==> conformance: {side} suite, spec {leg}: {} in {:.1}s (log: {})",
                if status { "ok" } else { "FAILED" },
                started.elapsed().as_secs_f64(),
                log.display()
            );
            if !status {
                failures.push(format!("{side} suite, spec {leg}"));
            }
            let tasks = TASKS_SCENARIOS
                .iter()
                .filter(|_| side == "server" && *leg == TASKS_LEG);
            let by_name = SKILLS_SCENARIOS
                .iter()
                .filter(|(s, _)| *s == side)
                .map(|(_, scenario)| scenario)
                .chain(tasks);
            for &scenario in by_name {
                let started = Instant::now();
                let mut suite = Command::new(node::binary(root));
                suite
                    .arg(root.join(SUITE_DIR).join(SUITE_BIN))
                    .arg(side)
                    .args(["--scenario", scenario, "--spec-version", leg, "--force"])
                    .arg("--expected-failures")
                    .arg(root.join(EXPECTED))
                    .arg("-o")
                    .arg(&dir)
                    .current_dir(root.join(SUITE_DIR));
                if side == "server" {
                    suite.args(["--url", &url]);
                } else {
                    suite
                        .arg("--command")
                        .arg(bins.join("conformance-client"))
                        .args(["--timeout", CLIENT_TIMEOUT_MS]);
                }
                let log = out.join(format!("{leg}-{side}-{scenario}.log"));
                let status = run_logged(&mut suite, &log)?;
                eprintln!(
                    "==> conformance: {side} {scenario}, spec {leg}: {} in {:.1}s",
                    if status { "ok" } else { "FAILED" },
                    started.elapsed().as_secs_f64(),
                );
                if !status {
                    failures.push(format!("{side} {scenario}, spec {leg}"));
                }
            }
            if side == "client" {
                failures.extend(auth::run_extra(root, &bins, leg, &dir)?);
            }
        }
    }
    server.stop();

    // The server suite again, against the stdio server behind `mcx proxy`.
    let mut proxy = Proxy::start(&bins)?;
    eprintln!("\nconformance: mcx proxy listens at {}", proxy.url);
    let via = Via {
        folder: "server-proxy",
        label: "mcx proxy",
        expected: EXPECTED_PROXY,
    };
    failures.extend(run_via(root, &out, &proxy.url, &via)?);
    proxy.stop();

    // And against the same stdio server as the single backend of `mcx host`, the gateway.
    let mut gateway = Gateway::start(&bins, &out)?;
    eprintln!("\nconformance: mcx host listens at {}", gateway.url);
    let via = Via {
        folder: "server-host",
        label: "mcx host",
        expected: EXPECTED_HOST,
    };
    failures.extend(run_via(root, &out, &gateway.url, &via)?);
    gateway.stop();

    let summary = summarize(&out)? + "\n" + &auth::write_table(&out)?;
    let path = out.join("summary.md");
    std::fs::write(&path, &summary).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("\n{summary}");
    eprintln!("conformance: summary in {}", path.display());
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "conformance: unexpected results in: {} (see {OUT})",
            failures.join(", ")
        ))
    }
}

/// A side of the server suite run through a front (`mcx proxy`, `mcx host`).
struct Via {
    /// Its results folder under each leg's.
    folder: &'static str,
    /// What the front is, for the log.
    label: &'static str,
    /// Its expected failures, relative to the project root.
    expected: &'static str,
}

/// The server suite on both legs against the front at `url`, and the extensions' server
/// scenarios by name, as for the server itself; the runs that failed.
fn run_via(root: &Path, out: &Path, url: &str, via: &Via) -> Result<Vec<String>, String> {
    let mut failures = Vec::new();
    let label = via.label;
    for leg in LEGS {
        let started = Instant::now();
        let dir = out.join(leg).join(via.folder);
        let mut suite = Command::new(node::binary(root));
        suite
            .arg(root.join(SUITE_DIR).join(SUITE_BIN))
            .arg("server")
            .args(["--suite", "all", "--spec-version", leg])
            .arg("--expected-failures")
            .arg(root.join(via.expected))
            .arg("-o")
            .arg(&dir)
            .args(["--url", url])
            .current_dir(root.join(SUITE_DIR));
        eprintln!("\n==> conformance: server suite via {label}, spec {leg}");
        let log = out.join(format!("{leg}-{}.log", via.folder));
        let status = run_logged(&mut suite, &log)?;
        eprintln!(
            "==> conformance: server suite via {label}, spec {leg}: {} in {:.1}s (log: {})",
            if status { "ok" } else { "FAILED" },
            started.elapsed().as_secs_f64(),
            log.display()
        );
        if !status {
            failures.push(format!("server suite via {label}, spec {leg}"));
        }
        let tasks = TASKS_SCENARIOS.iter().filter(|_| *leg == TASKS_LEG);
        let by_name = SKILLS_SCENARIOS
            .iter()
            .filter(|(side, _)| *side == "server")
            .map(|(_, scenario)| scenario)
            .chain(tasks);
        for &scenario in by_name {
            let started = Instant::now();
            let mut suite = Command::new(node::binary(root));
            suite
                .arg(root.join(SUITE_DIR).join(SUITE_BIN))
                .arg("server")
                .args(["--scenario", scenario, "--spec-version", leg, "--force"])
                .arg("--expected-failures")
                .arg(root.join(via.expected))
                .arg("-o")
                .arg(&dir)
                .args(["--url", url])
                .current_dir(root.join(SUITE_DIR));
            let log = out.join(format!("{leg}-{}-{scenario}.log", via.folder));
            let status = run_logged(&mut suite, &log)?;
            eprintln!(
                "==> conformance: server {scenario} via {label}, spec {leg}: {} in {:.1}s",
                if status { "ok" } else { "FAILED" },
                started.elapsed().as_secs_f64(),
            );
            if !status {
                failures.push(format!("server {scenario} via {label}, spec {leg}"));
            }
        }
    }
    Ok(failures)
}

/// Builds the two binaries; their folder.
fn build(root: &Path) -> Result<PathBuf, String> {
    eprintln!("conformance: building the conformance server and client");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "-p",
            "modelctx-tests",
            "--bin",
            "conformance-server",
            "--bin",
            "conformance-client",
            "-p",
            "modelctx-cli",
            "--bin",
            "mcx",
        ])
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("building the conformance binaries failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        root.join(target)
    };
    Ok(target.join("debug"))
}

/// Runs `command` with its output into `log` (and a line per scenario to our stderr); whether it
/// exited 0.
fn run_logged(command: &mut Command, log: &Path) -> Result<bool, String> {
    let file =
        std::fs::File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("cannot reopen {}: {e}", log.display()))?;
    let status = command
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(err))
        .status()
        .map_err(|e| format!("cannot run the suite: {e}"))?;
    // The suite's own verdict lines, for the CI log.
    if let Ok(text) = std::fs::read_to_string(log) {
        for line in text.lines().filter(|l| {
            l.contains("Unexpected")
                || l.contains("Stale")
                || l.contains("Total:")
                || l.contains("Baseline")
                || l.trim_start().starts_with('✗')
        }) {
            eprintln!("    {line}");
        }
    }
    Ok(status.success())
}

/// The conformance server process.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts it and reads the `LISTENING <port>` line it prints.
    fn start(binary: &Path) -> Result<Server, String> {
        let mut child = Command::new(binary)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| format!("reading the server's port: {e}"))?;
        let port = line
            .trim()
            .strip_prefix("LISTENING ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("the conformance server said {line:?}, not LISTENING <port>"))?;
        Ok(Server { child, port })
    }

    /// Closes its stdin (it exits), then makes sure.
    fn stop(&mut self) {
        drop(self.child.stdin.take());
        wait_or_kill(&mut self.child, Duration::from_secs(5));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        wait_or_kill(&mut self.child, Duration::ZERO);
    }
}

/// Waits up to `grace` for `child` to exit, then kills it; reaps it either way.
fn wait_or_kill(child: &mut Child, grace: Duration) {
    let deadline = Instant::now() + grace;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `mcx proxy` in front of `conformance-server --stdio`.
struct Proxy {
    child: Child,
    url: String,
}

impl Proxy {
    /// Starts it on a free port and reads its URL from the line it prints on stderr; the rest
    /// of its stderr (and its children's) is passed on to ours.
    fn start(bins: &Path) -> Result<Proxy, String> {
        let server = bins.join("conformance-server");
        let server = server.to_string_lossy();
        let line = if server.contains([' ', '"', '\'', '\\']) {
            format!("'{}' --stdio", server.replace('\'', "'\"'\"'"))
        } else {
            format!("{server} --stdio")
        };
        let mcx = bins.join("mcx");
        let mut child = Command::new(&mcx)
            // The suite opens a session (a server process) per scenario, back to back: the
            // proxy's limits on starting processes (2 a second after 8, 16 alive) would refuse
            // most of them. They are the proxy's own tests' to check (crates/cli/tests/it/proxy.rs),
            // not the suite's, so they are lifted here to the session cap.
            .args(["proxy", "--stdio", &line, "--listen", "127.0.0.1:0"])
            .args(["--spawn-rate", "1000", "--max-children", "64"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", mcx.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let mut stderr = BufReader::new(stderr);
        let mut line = String::new();
        stderr
            .read_line(&mut line)
            .map_err(|e| format!("reading the proxy's address: {e}"))?;
        let url = line
            .strip_prefix("mcx proxy: ")
            .and_then(|rest| rest.split_whitespace().next())
            .filter(|url| url.starts_with("http://"))
            .map(str::to_owned);
        let Some(url) = url else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("mcx proxy said {line:?}, not its URL"));
        };
        std::thread::spawn(move || {
            let mut rest = String::new();
            while matches!(stderr.read_line(&mut rest), Ok(n) if n > 0) {
                eprint!("{rest}");
                rest.clear();
            }
        });
        Ok(Proxy { child, url })
    }

    /// Stops it (SIGTERM: it ends its sessions and children), then makes sure.
    fn stop(&mut self) {
        #[cfg(unix)]
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        wait_or_kill(&mut self.child, Duration::from_secs(5));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        wait_or_kill(&mut self.child, Duration::ZERO);
    }
}

/// `mcx host --http` (the gateway) with `conformance-server --stdio` as its single server.
struct Gateway {
    child: Child,
    url: String,
}

/// The policy file of the gateway leg: every tool of every server allowed (the suite calls
/// them all), sampling and elicitation passed on.
const ALLOW_ALL_POLICY: &str =
    r#"{"destructive": "allow", "sampling": "allow", "elicitation": "allow"}"#;

impl Gateway {
    /// Writes its config and policy files under `out`, starts it on a free port and reads its
    /// URL from the line it prints on stderr; the rest of its stderr (and its server's) is
    /// passed on to ours.
    fn start(bins: &Path, out: &Path) -> Result<Gateway, String> {
        let server = bins.join("conformance-server");
        let config = serde_json::json!({
            "mcpServers": {
                "conformance": {"command": server, "args": ["--stdio"]},
            }
        });
        let config_path = out.join("host-config.json");
        let policy_path = out.join("host-policy.json");
        std::fs::write(&config_path, config.to_string())
            .and_then(|()| std::fs::write(&policy_path, ALLOW_ALL_POLICY))
            .map_err(|e| format!("cannot write the gateway's files in {}: {e}", out.display()))?;
        let mcx = bins.join("mcx");
        let mut child = Command::new(&mcx)
            .arg("host")
            .arg("--config")
            .arg(&config_path)
            .arg("--policy")
            .arg(&policy_path)
            .args(["--namespace", "on-collision", "--http", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", mcx.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let mut stderr = BufReader::new(stderr);
        // Lines before the URL (a server that failed to start) are passed on.
        let mut line = String::new();
        let url = loop {
            line.clear();
            let read = stderr
                .read_line(&mut line)
                .map_err(|e| format!("reading the gateway's address: {e}"))?;
            if read == 0 {
                let _ = child.kill();
                let _ = child.wait();
                return Err("mcx host exited before saying its URL".into());
            }
            let url = line
                .strip_prefix("mcx host: ")
                .and_then(|rest| rest.split_whitespace().next())
                .filter(|url| url.starts_with("http://"));
            match url {
                Some(url) => break url.to_owned(),
                None => eprint!("{line}"),
            }
        };
        std::thread::spawn(move || {
            let mut rest = String::new();
            while matches!(stderr.read_line(&mut rest), Ok(n) if n > 0) {
                eprint!("{rest}");
                rest.clear();
            }
        });
        Ok(Gateway { child, url })
    }

    /// Stops it (SIGTERM: it stops its server), then makes sure.
    fn stop(&mut self) {
        #[cfg(unix)]
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        wait_or_kill(&mut self.child, Duration::from_secs(5));
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        wait_or_kill(&mut self.child, Duration::ZERO);
    }
}

/// Check counts of one scenario.
#[derive(Default, Clone, Copy)]
struct Tally {
    passed: usize,
    failed: usize,
    warned: usize,
    skipped: usize,
}

impl Tally {
    fn ok(&self) -> bool {
        self.failed == 0 && self.warned == 0
    }
}

/// The summary table of every `checks.json` under `out`, and the scenarios that did not pass.
fn summarize(out: &Path) -> Result<String, String> {
    let expected = std::fs::read_to_string(out.join("../../").join(EXPECTED)).unwrap_or_default();
    let expected_proxy =
        std::fs::read_to_string(out.join("../../").join(EXPECTED_PROXY)).unwrap_or_default();
    let expected_host =
        std::fs::read_to_string(out.join("../../").join(EXPECTED_HOST)).unwrap_or_default();
    let mut text = String::from(
        "# Conformance summary\n\n`@modelcontextprotocol/conformance` 0.2.0-alpha.12, `--suite all`.\n\n\
         | spec | side | scenarios passed | scenarios failed | checks passed | checks failed | checks warned | checks skipped |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let mut failing = Vec::new();
    for leg in LEGS {
        for &(folder, side) in SIDES {
            let expected = match folder {
                "server-proxy" => &expected_proxy,
                "server-host" => &expected_host,
                _ => &expected,
            };
            let scenarios = collect(&out.join(leg).join(folder), folder != "client")?;
            let total = scenarios.values().fold(Tally::default(), |a, t| Tally {
                passed: a.passed + t.passed,
                failed: a.failed + t.failed,
                warned: a.warned + t.warned,
                skipped: a.skipped + t.skipped,
            });
            let passed = scenarios.values().filter(|t| t.ok()).count();
            let _ = writeln!(
                text,
                "| {leg} | {side} | {passed} | {} | {} | {} | {} | {} |",
                scenarios.len() - passed,
                total.passed,
                total.failed,
                total.warned,
                total.skipped
            );
            for (name, tally) in scenarios.iter().filter(|(_, t)| !t.ok()) {
                let listed = expected.lines().any(|l| {
                    l.trim_start()
                        .strip_prefix("- ")
                        .is_some_and(|e| e.split('#').next().unwrap_or("").trim() == name)
                });
                failing.push(format!(
                    "| {leg} | {side} | `{name}` | {} | {} | {} |",
                    tally.failed,
                    tally.warned,
                    if listed { "expected" } else { "**unexpected**" }
                ));
            }
        }
    }
    if failing.is_empty() {
        text.push_str("\nEvery scenario passed.\n");
    } else {
        text.push_str(
            "\nScenarios that did not pass (reasons in `tests/conformance/expected-failures.yml`, and \
             `expected-failures-proxy.yml` for the proxy, `expected-failures-host.yml` for the gateway):\n\n\
             | spec | side | scenario | checks failed | checks warned | |\n|---|---|---|---|---|---|\n",
        );
        for line in failing {
            text.push_str(&line);
            text.push('\n');
        }
    }
    Ok(text)
}

/// The tally of every scenario whose `checks.json` lies under `dir`, by scenario name.
fn collect(dir: &Path, server: bool) -> Result<BTreeMap<String, Tally>, String> {
    let mut scenarios = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|n| n == "checks.json") {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let checks: Vec<serde_json::Value> = serde_json::from_str(&text)
                    .map_err(|e| format!("{} is not a list of checks: {e}", path.display()))?;
                let mut tally = Tally::default();
                for check in &checks {
                    match check["status"].as_str() {
                        Some("SUCCESS") => tally.passed += 1,
                        Some("FAILURE") => tally.failed += 1,
                        Some("WARNING") => tally.warned += 1,
                        Some("SKIPPED") => tally.skipped += 1,
                        _ => {}
                    }
                }
                let relative = path
                    .parent()
                    .and_then(|p| p.strip_prefix(dir).ok())
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                scenarios.insert(scenario_name(&relative, server), tally);
            }
        }
    }
    Ok(scenarios)
}

/// A result folder's scenario: without the `-<timestamp>` the suite appends and the `server-`
/// prefix of a server scenario's folder (`server-tools-list-2026-11-25T20-31-02-123Z`).
fn scenario_name(folder: &str, server: bool) -> String {
    let bytes = folder.as_bytes();
    let mut end = folder.len();
    // The timestamp starts at the last `-YYYY-MM-DDT`.
    for i in (0..folder.len()).rev() {
        let rest = &bytes[i..];
        if rest.len() >= 12
            && rest[0] == b'-'
            && rest[1..5].iter().all(u8::is_ascii_digit)
            && rest[5] == b'-'
            && rest[6..8].iter().all(u8::is_ascii_digit)
            && rest[8] == b'-'
            && rest[9..11].iter().all(u8::is_ascii_digit)
            && rest[11] == b'T'
        {
            end = i;
            break;
        }
    }
    let name = &folder[..end];
    if server {
        name.strip_prefix("server-").unwrap_or(name).to_owned()
    } else {
        name.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_names_give_scenario_names() {
        let ts = "-2026-11-25T20-31-02-123Z";
        assert_eq!(
            scenario_name(&format!("server-tools-list{ts}"), true),
            "tools-list"
        );
        assert_eq!(
            scenario_name(&format!("server-server-initialize{ts}"), true),
            "server-initialize"
        );
        assert_eq!(
            scenario_name(&format!("tools_call{ts}"), false),
            "tools_call"
        );
        assert_eq!(
            scenario_name(&format!("auth/metadata-default{ts}"), false),
            "auth/metadata-default"
        );
    }
}
