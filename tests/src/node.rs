//! Node for the tests that run the TypeScript side (`tests/ts`): which binary, and whether a test
//! that needs it runs or is skipped.
//!
//! `cargo xtask ci` (or `cargo xtask node`) installs Node 22 and the packages and sets
//! `MODELCTX_NODE` and `MODELCTX_REQUIRE_NODE=1`; without Node or the packages, such a test says
//! it is skipped, unless `MODELCTX_REQUIRE_NODE` is set: then it fails.

use std::fmt::Display;
use std::path::{Path, PathBuf};

/// The folder of the TypeScript side, `tests/ts`.
pub fn ts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ts")
}

/// Says why a test that needs Node cannot run, and that it is skipped: `None`.
///
/// # Panics
///
/// When `MODELCTX_REQUIRE_NODE` is set.
#[track_caller]
pub fn skipped<T>(why: impl Display) -> Option<T> {
    let required = std::env::var_os("MODELCTX_REQUIRE_NODE").is_some();
    assert!(!required, "MODELCTX_REQUIRE_NODE is set, but {why}");
    eprintln!("skipped: {why} (run `cargo xtask ci`, or `npm ci` in tests/ts)");
    None
}

/// The Node binary (`MODELCTX_NODE`, else `node`), once the packages of `tests/ts` are installed
/// and it runs; else [`skipped`].
#[track_caller]
pub fn node() -> Option<String> {
    let node = std::env::var("MODELCTX_NODE").unwrap_or_else(|_| "node".into());
    if !ts_dir().join("node_modules").is_dir() {
        return skipped("tests/ts/node_modules is missing");
    }
    match std::process::Command::new(&node).arg("--version").output() {
        Ok(out) if out.status.success() => Some(node),
        Ok(out) => skipped(format!("`{node} --version` failed: {}", out.status)),
        Err(e) => skipped(format!("{node} cannot be started: {e}")),
    }
}

/// `node script` (a path in `tests/ts`), run in `tests/ts` and killed when dropped.
pub fn command(node: &str, script: impl AsRef<Path>) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(node);
    command
        .arg(ts_dir().join(script))
        .current_dir(ts_dir())
        .kill_on_drop(true);
    command
}
