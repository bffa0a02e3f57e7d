//! Node for the tests that run the TypeScript side (`tests/ts`): which binary, and whether a test
//! that needs it runs or is skipped.
//!
//! `cargo xtask ci` (or `cargo xtask node`) installs Node 22 and the packages and sets
//! `MODELCTX_NODE` and `MODELCTX_REQUIRE_NODE=1`; without Node or the packages, such a test says
//! it is skipped, unless `MODELCTX_REQUIRE_NODE` is set: then it fails.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use crate::http::within;

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

/// A Node peer started by [`spawn_listening`].
#[derive(Debug)]
pub struct Listening {
    /// What its first stdout line said after `LISTENING ` (a port, an address, a URL).
    pub at: String,
    /// Its stdout after that line.
    pub lines: Lines<BufReader<ChildStdout>>,
    /// The process, killed when dropped; its stdin is piped, so it also sees the test end.
    pub child: Child,
}

/// Starts `node script args` (stdin and stdout piped, stderr the test's) and waits, at most
/// 20 s, for its first stdout line, `LISTENING <at>`. `None` when Node is not available or
/// cannot be started: [`skipped`].
///
/// # Panics
///
/// When the first line is something else, or does not come within 20 s.
pub async fn spawn_listening(script: &str, args: &[&str]) -> Option<Listening> {
    let node = node()?;
    let spawned = command(&node, script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return skipped(format!("{node} cannot be started: {e}")),
    };
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let line = within(&format!("{script} starts listening"), lines.next_line())
        .await
        .expect("its stdout")
        .unwrap_or_else(|| panic!("{script} ended before its LISTENING line"));
    let at = line
        .strip_prefix("LISTENING ")
        .unwrap_or_else(|| panic!("{script}: unexpected first line {line:?}"))
        .to_owned();
    Some(Listening { at, lines, child })
}
