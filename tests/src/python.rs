//! The official Python SDK for the interop tests (`it/otel.rs`): PyPI `mcp` and
//! `opentelemetry-sdk` in a virtual environment under `target/tools/py` of the workspace, and the
//! scripts of `tests/py/`.
//!
//! `.ci/run` creates the environment (installing Debian's `python3-venv` when `python3 -m venv`
//! is missing) and sets `MODELCTX_REQUIRE_PYTHON=1`. Locally, [`python`] creates it on first use
//! when `python3` is there (pip reaches PyPI). Without Python, or when the environment cannot be
//! made, a test says why and is skipped ([`skipped`]), unless `MODELCTX_REQUIRE_PYTHON` is set:
//! then it fails.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// The variable that makes a Python test fail, rather than be skipped, without the SDK.
pub const REQUIRE_ENV: &str = "MODELCTX_REQUIRE_PYTHON";

/// The packages the environment holds, pinned: the SDK whose behaviour the tests check.
pub const PACKAGES: &[&str] = &["mcp==2.3.0", "opentelemetry-sdk"];

/// The workspace's root.
fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
}

/// The virtual environment's folder: `target/tools/py` of the workspace.
pub fn venv() -> PathBuf {
    workspace().join("target/tools/py")
}

/// A script of `tests/py/`.
pub fn script(name: &str) -> PathBuf {
    workspace().join("tests/py").join(name)
}

/// Says why a Python test cannot run, and that it is skipped: `None`.
///
/// # Panics
///
/// When `MODELCTX_REQUIRE_PYTHON` is set.
#[track_caller]
pub fn skipped<T>(why: impl Display) -> Option<T> {
    let required = std::env::var_os(REQUIRE_ENV).is_some();
    assert!(!required, "{REQUIRE_ENV} is set, but {why}");
    eprintln!(
        "skipped: {why} (install python3 with venv and pip, or run `.ci/run`, for the Python \
         SDK interop tests)"
    );
    None
}

/// Whether `python` imports the SDK and the OpenTelemetry SDK.
fn ready(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import mcp, opentelemetry.sdk.trace"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `command`, and says what failed.
fn run(what: &str, command: &mut Command) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what}: {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    ))
}

/// Makes the environment with `python3 -m venv` and installs [`PACKAGES`] from PyPI.
fn create(venv: &Path) -> Result<(), String> {
    run(
        "python3 -m venv",
        Command::new("python3").arg("-m").arg("venv").arg(venv),
    )?;
    run(
        "pip install",
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(PACKAGES),
    )
}

/// The environment's interpreter, with the SDK installed (made on first use); else
/// [`skipped`].
pub fn python() -> Option<PathBuf> {
    // One test makes the environment; the others wait for it.
    static MADE: Mutex<()> = Mutex::new(());
    let _made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = venv();
    let python = venv.join("bin/python");
    if ready(&python) {
        return Some(python);
    }
    let found = Command::new("python3")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        return skipped("python3 is not installed");
    }
    if let Err(why) = create(&venv) {
        return skipped(format!(
            "the Python SDK's environment could not be made: {why}"
        ));
    }
    if ready(&python) {
        Some(python)
    } else {
        skipped(format!(
            "{} does not import mcp and opentelemetry.sdk",
            python.display()
        ))
    }
}
