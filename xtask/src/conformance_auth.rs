//! The client's authorization scenarios of the conformance suite (the 33 `auth/*` client
//! scenarios), on both legs.
//!
//! `--suite all` selects those on the spec's timeline at the leg: the 14 core ones on both legs
//! and the 11 introduced by 2026-07-28 on that leg only; never the 2 of 2025-03-26
//! back-compatibility (removed in 2025-06-18) nor the 6 of extensions. Those it leaves out run by
//! name after each leg's client suite (`--scenario X --spec-version LEG --force`), 4 at a time,
//! into the same result folder, so that every leg runs all 33. `cargo xtask conformance
//! --client-auth` runs only the 33, by name, on both legs. Either way
//! `target/conformance/auth.md` gives the table: scenario × leg.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use super::{
    CLIENT_TIMEOUT_MS, EXPECTED, LEGS, OUT, SUITE_BIN, SUITE_DIR, build, collect, run_logged,
};
use crate::node;

/// Where a scenario sits on the spec's timeline, which decides whether `--suite all` runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    /// In the spec since before 2025-11-25: selected on both legs.
    Core,
    /// Introduced by 2026-07-28: selected on that leg only.
    Since2026,
    /// 2025-03-26 back-compatibility (removed in 2025-06-18): never selected.
    Backcompat,
    /// An extension's: never selected.
    Extension,
}

/// The 33 client authorization scenarios of `@modelcontextprotocol/conformance` 0.2.0-alpha.12.
const SCENARIOS: &[(&str, Group)] = &[
    ("auth/metadata-default", Group::Core),
    ("auth/metadata-var1", Group::Core),
    ("auth/metadata-var2", Group::Core),
    ("auth/metadata-var3", Group::Core),
    ("auth/basic-cimd", Group::Core),
    ("auth/scope-from-www-authenticate", Group::Core),
    ("auth/scope-from-scopes-supported", Group::Core),
    ("auth/scope-omitted-when-undefined", Group::Core),
    ("auth/scope-step-up", Group::Core),
    ("auth/scope-retry-limit", Group::Core),
    ("auth/token-endpoint-auth-basic", Group::Core),
    ("auth/token-endpoint-auth-post", Group::Core),
    ("auth/token-endpoint-auth-none", Group::Core),
    ("auth/pre-registration", Group::Core),
    ("auth/resource-mismatch", Group::Since2026),
    ("auth/offline-access-scope", Group::Since2026),
    ("auth/offline-access-not-supported", Group::Since2026),
    ("auth/authorization-server-migration", Group::Since2026),
    ("auth/iss-supported", Group::Since2026),
    ("auth/iss-not-advertised", Group::Since2026),
    ("auth/iss-supported-missing", Group::Since2026),
    ("auth/iss-wrong-issuer", Group::Since2026),
    ("auth/iss-unexpected", Group::Since2026),
    ("auth/iss-normalized", Group::Since2026),
    ("auth/metadata-issuer-mismatch", Group::Since2026),
    (
        "auth/2025-03-26-oauth-metadata-backcompat",
        Group::Backcompat,
    ),
    ("auth/2025-03-26-oauth-endpoint-fallback", Group::Backcompat),
    ("auth/client-credentials-jwt", Group::Extension),
    ("auth/client-credentials-basic", Group::Extension),
    ("auth/enterprise-managed-authorization", Group::Extension),
    ("auth/dpop", Group::Extension),
    ("auth/dpop-nonce", Group::Extension),
    ("auth/wif-jwt-bearer", Group::Extension),
];

/// How many scenarios run at once.
const PARALLEL: usize = 4;

/// Whether `--suite all` at `leg` runs `group`'s scenarios.
fn selected(group: Group, leg: &str) -> bool {
    match group {
        Group::Core => true,
        Group::Since2026 => leg >= "2026-07-28",
        Group::Backcompat | Group::Extension => false,
    }
}

/// The scenarios the `--suite all` run of `leg` leaves out.
fn extra(leg: &str) -> Vec<&'static str> {
    SCENARIOS
        .iter()
        .filter(|(_, group)| !selected(*group, leg))
        .map(|(name, _)| *name)
        .collect()
}

/// Runs the scenarios `--suite all` left out at `leg` into `dir` (the leg's client folder);
/// the runs that failed.
pub(crate) fn run_extra(
    root: &Path,
    bins: &Path,
    leg: &str,
    dir: &Path,
) -> Result<Vec<String>, String> {
    run_scenarios(root, bins, leg, dir, &extra(leg))
}

/// `cargo xtask conformance --client-auth`: the 33 scenarios by name on both legs, then the
/// table; fails if any run failed.
pub(crate) fn run_only(root: &Path) -> Result<(), String> {
    node::ensure(root)?;
    node::ensure_packages(root, SUITE_DIR)?;
    let bins = build(root)?;
    let out = root.join(OUT);
    let all: Vec<&str> = SCENARIOS.iter().map(|(name, _)| *name).collect();
    let mut failures = Vec::new();
    for leg in LEGS {
        let dir = out.join(leg).join("client");
        let _ = std::fs::remove_dir_all(dir.join("auth"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        failures.extend(run_scenarios(root, &bins, leg, &dir, &all)?);
    }
    write_table(&out)?;
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "conformance: unexpected results in: {} (see {OUT})",
            failures.join(", ")
        ))
    }
}

/// Runs `scenarios` at `leg`, [`PARALLEL`] at a time, results into `dir`, one log each under
/// `<out>/<leg>-client-auth/`; the runs that failed.
fn run_scenarios(
    root: &Path,
    bins: &Path,
    leg: &str,
    dir: &Path,
    scenarios: &[&str],
) -> Result<Vec<String>, String> {
    let logs = root.join(OUT).join(format!("{leg}-client-auth"));
    std::fs::create_dir_all(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
    let queue = Mutex::new(scenarios.to_vec());
    let failures = Mutex::new(Vec::new());
    let errors = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL {
            scope.spawn(|| {
                while let Some(scenario) = queue.lock().expect("not poisoned").pop() {
                    let started = Instant::now();
                    let log = logs.join(format!("{}.log", scenario.replace('/', "-")));
                    let mut suite = command(root, bins, leg, dir, scenario);
                    match run_logged(&mut suite, &log) {
                        Ok(ok) => {
                            eprintln!(
                                "==> conformance: client {scenario}, spec {leg}: {} in {:.1}s",
                                if ok { "ok" } else { "FAILED" },
                                started.elapsed().as_secs_f64()
                            );
                            if !ok {
                                failures
                                    .lock()
                                    .expect("not poisoned")
                                    .push(format!("client {scenario}, spec {leg}"));
                            }
                        }
                        Err(e) => errors.lock().expect("not poisoned").push(e),
                    }
                }
            });
        }
    });
    if let Some(error) = errors.into_inner().expect("not poisoned").pop() {
        return Err(error);
    }
    let mut failures = failures.into_inner().expect("not poisoned");
    failures.sort();
    Ok(failures)
}

/// The suite's run of one client `scenario` at `leg` by name.
fn command(root: &Path, bins: &Path, leg: &str, dir: &Path, scenario: &str) -> Command {
    let mut suite = Command::new(node::binary(root));
    suite
        .arg(root.join(SUITE_DIR).join(SUITE_BIN))
        .arg("client")
        .args(["--scenario", scenario, "--spec-version", leg, "--force"])
        .arg("--expected-failures")
        .arg(root.join(EXPECTED))
        .arg("-o")
        .arg(dir)
        .arg("--command")
        .arg(bins.join("conformance-client"))
        .args(["--timeout", CLIENT_TIMEOUT_MS])
        .current_dir(root.join(SUITE_DIR));
    suite
}

/// Writes `<out>/auth.md`; returns its text.
pub(crate) fn write_table(out: &Path) -> Result<String, String> {
    let text = table(out)?;
    let path: PathBuf = out.join("auth.md");
    std::fs::write(&path, &text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("\n{text}");
    Ok(text)
}

/// The table of the 33 scenarios × the legs, from the `checks.json` of the legs' client
/// folders: `pass`, `FAIL (f failed, w warned)`, or `not run`.
fn table(out: &Path) -> Result<String, String> {
    let mut results = Vec::new();
    for leg in LEGS {
        results.push(collect(&out.join(leg).join("client"), false)?);
    }
    let mut text = String::from("# Client authorization scenarios\n\n| scenario |");
    for leg in LEGS {
        let _ = write!(text, " {leg} |");
    }
    text.push_str("\n|---|");
    text.push_str(&"---|".repeat(LEGS.len()));
    text.push('\n');
    let mut passed = vec![0; LEGS.len()];
    for (name, _) in SCENARIOS {
        let _ = write!(text, "| `{name}` |");
        for (i, scenarios) in results.iter().enumerate() {
            match scenarios.get(*name) {
                Some(tally) if tally.ok() => {
                    passed[i] += 1;
                    text.push_str(" pass |");
                }
                Some(tally) => {
                    let _ = write!(
                        text,
                        " FAIL ({} failed, {} warned) |",
                        tally.failed, tally.warned
                    );
                }
                None => text.push_str(" not run |"),
            }
        }
        text.push('\n');
    }
    text.push_str("| passed |");
    for count in passed {
        let _ = write!(text, " {count}/{} |", SCENARIOS.len());
    }
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_leg_runs_all_33_between_the_suite_and_the_extra_runs() {
        assert_eq!(SCENARIOS.len(), 33);
        let count = |group| SCENARIOS.iter().filter(|(_, g)| *g == group).count();
        assert_eq!(
            [
                count(Group::Core),
                count(Group::Since2026),
                count(Group::Backcompat),
                count(Group::Extension)
            ],
            [14, 11, 2, 6]
        );
        for (leg, by_suite, by_name) in [("2025-11-25", 14, 19), ("2026-07-28", 25, 8)] {
            let suite = SCENARIOS
                .iter()
                .filter(|(_, group)| selected(*group, leg))
                .count();
            assert_eq!((suite, extra(leg).len()), (by_suite, by_name), "{leg}");
        }
        assert!(extra("2026-07-28").contains(&"auth/dpop"));
        assert!(!extra("2026-07-28").contains(&"auth/iss-supported"));
        assert!(extra("2025-11-25").contains(&"auth/iss-supported"));
        assert_eq!(LEGS, ["2025-11-25", "2026-07-28"]);
    }
}
