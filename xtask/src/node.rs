//! Node.js 22 for the tests that run the TypeScript SDK's servers (`tests/ts/`).
//!
//! CI machines have only what `.ci/run` installs, and their Node.js is 20: Node 22 comes from the
//! npm registry (the `node` package, whose install script fetches the platform binary as another
//! npm package) into `target/tools/node22`, changing nothing system-wide. The test step then runs
//! with [`NODE_ENV`] pointing at it and [`REQUIRE_ENV`] set, so a test that needs Node fails
//! rather than skips when Node is missing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// The environment variable naming the Node binary the tests run the TypeScript servers with.
pub(crate) const NODE_ENV: &str = "MODELCTX_NODE";
/// The environment variable that, set to `1`, makes a test that needs Node fail when it is missing.
pub(crate) const REQUIRE_ENV: &str = "MODELCTX_REQUIRE_NODE";

/// Where Node 22 is installed, relative to the project root.
const PREFIX: &str = "target/tools/node22";
/// What is installed there.
const PACKAGE: &str = "node@22.23.3";
/// The start of `node --version` for the right major version.
const VERSION_PREFIX: &str = "v22.";
/// The npm project of the TypeScript servers, relative to the project root.
const TS_DIR: &str = "tests/ts";

/// The Node 22 binary: `<root>/target/tools/node22/node_modules/.bin/node`.
pub(crate) fn binary(root: &Path) -> PathBuf {
    root.join(PREFIX).join("node_modules/.bin/node")
}

/// Makes Node 22 and the TypeScript servers' packages ready: installs Node 22 into
/// `target/tools/node22` when it is missing, checks its version, and runs `npm ci` in `tests/ts`
/// with it first on `PATH` when `tests/ts/node_modules` is missing or older than the package
/// files.
pub(crate) fn ensure(root: &Path) -> Result<(), String> {
    let node = binary(root);
    if !node.exists() {
        let prefix = root.join(PREFIX);
        eprintln!("node: installing {PACKAGE} into {}", prefix.display());
        let mut npm = Command::new("npm");
        npm.args([
            "install",
            "--no-save",
            "--no-audit",
            "--no-fund",
            "--prefix",
        ])
        .arg(&prefix)
        .arg(PACKAGE)
        .current_dir(root);
        run(&mut npm)?;
        if !node.exists() {
            return Err(format!(
                "`npm install {PACKAGE}` left no {} (did its install script run?)",
                node.display()
            ));
        }
    }
    let version = version(&node)?;
    if !version.starts_with(VERSION_PREFIX) {
        return Err(format!(
            "{} is {version}, not Node 22: remove {PREFIX} to reinstall it",
            node.display()
        ));
    }
    eprintln!("node: {} is {version}", node.display());

    ensure_packages(root, TS_DIR)
}

/// Runs `npm ci` in the npm project `dir` (relative to the root) with Node 22 first on `PATH`,
/// when its `node_modules` is missing or older than its package files.
pub(crate) fn ensure_packages(root: &Path, dir: &str) -> Result<(), String> {
    let node = binary(root);
    let project = root.join(dir);
    if needs_npm_ci(&project) {
        eprintln!("node: npm ci in {}", project.display());
        let mut npm = Command::new("npm");
        npm.args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&project)
            .env(
                "PATH",
                path_with(node.parent().expect("the binary is in a folder"))?,
            );
        run(&mut npm)?;
    } else {
        eprintln!("node: {dir}/node_modules is up to date");
    }
    Ok(())
}

/// `node --version`, trimmed.
fn version(node: &Path) -> Result<String, String> {
    let output = Command::new(node)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", node.display()))?;
    if !output.status.success() {
        return Err(format!(
            "`{} --version` failed ({}): {}",
            node.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Whether `npm ci` must run in `ts`: no `node_modules` yet (npm's record of it,
/// `node_modules/.package-lock.json`, is missing), or `package.json` or `package-lock.json` is
/// newer than that record.
fn needs_npm_ci(ts: &Path) -> bool {
    let Some(installed) = modified(&ts.join("node_modules/.package-lock.json")) else {
        return true;
    };
    ["package-lock.json", "package.json"]
        .iter()
        .any(|file| modified(&ts.join(file)).is_none_or(|time| time > installed))
}

fn modified(path: &Path) -> Option<SystemTime> {
    path.metadata().and_then(|m| m.modified()).ok()
}

/// `PATH` with `dir` first.
fn path_with(dir: &Path) -> Result<OsString, String> {
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&rest)))
        .map_err(|e| format!("cannot put {} on PATH: {e}", dir.display()))
}

/// Runs `command` with inherited output; fails unless it exits 0.
fn run(command: &mut Command) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed ({status})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npm_ci_runs_without_node_modules_and_after_a_lock_change() {
        let dir = std::env::temp_dir().join(format!("xtask-node-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("node_modules")).unwrap();
        std::fs::write(dir.join("package.json"), "{}").unwrap();
        std::fs::write(dir.join("package-lock.json"), "{}").unwrap();
        assert!(needs_npm_ci(&dir), "no record of an install");

        let record = dir.join("node_modules/.package-lock.json");
        std::fs::write(&record, "{}").unwrap();
        let file = std::fs::File::options().write(true).open(&record).unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(60);
        file.set_modified(later).unwrap();
        assert!(!needs_npm_ci(&dir), "installed after the package files");

        let lock = std::fs::File::options()
            .write(true)
            .open(dir.join("package-lock.json"))
            .unwrap();
        lock.set_modified(later + std::time::Duration::from_secs(1))
            .unwrap();
        assert!(needs_npm_ci(&dir), "the lock changed after the install");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_binary_is_under_target_tools() {
        let root = Path::new("/r");
        assert_eq!(
            binary(root),
            Path::new("/r/target/tools/node22/node_modules/.bin/node")
        );
        let path = path_with(Path::new("/first")).unwrap();
        assert_eq!(
            std::env::split_paths(&path).next(),
            Some(PathBuf::from("/first"))
        );
    }
}
