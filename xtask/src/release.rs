//! `cargo xtask release-check [--baseline REV]`: the checklist before tagging a release.
//!
//! 1. cargo-semver-checks of every library crate against the latest `v*` tag (or `REV`): what
//!    changed in the public API since then, and whether the version bump covers it. With no `v*`
//!    tag yet (before the first release) this step says so and is skipped.
//! 2. The API snapshots (`api/`) are fresh ([`crate::api::check`]).
//! 3. `cargo package` of every library crate, verified (the ci step's).
//! 4. `CHANGELOG.md` has an `## [Unreleased]` section.
//! 5. Every published crate's version is the workspace's version.
//!
//! Every step runs, whatever the others' outcome; the command fails when one failed. It never
//! creates a tag.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::workspace::{self, Member, NOT_PUBLISHED};

/// Where cargo-semver-checks is installed, relative to the project root (`bin/` below it).
const TOOLS: &str = "target/tools";

/// The cargo-semver-checks installed. 0.51 reads rustdoc JSON format 57 (what stable 1.95
/// produces), 60 and 61; it needs Rust 1.93 to build.
const SEMVER_CHECKS_VERSION: &str = "0.51.0";

/// The changelog's section for what is not released yet (Keep a Changelog).
const UNRELEASED: &str = "## [Unreleased]";

/// `cargo xtask release-check [--baseline REV]`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let explicit = parse_args(args)?;
    let head = git(root, &["rev-parse", "--short", "HEAD"])?;
    let baseline = match explicit {
        Some(rev) => Some(rev),
        None => latest_tag(&git(root, &["tag", "--list", "v*", "--sort=-v:refname"])?)
            .map(str::to_owned),
    };
    let mut failed: Vec<&str> = Vec::new();
    let mut step = |name: &'static str, result: Result<(), String>| match result {
        Ok(()) => eprintln!("==> release-check: {name}: ok"),
        Err(why) => {
            eprintln!("==> release-check: {name}: FAILED: {why}");
            failed.push(name);
        }
    };
    match &baseline {
        Some(rev) => {
            let sha = git(
                root,
                &["rev-parse", "--short", &format!("{rev}^{{commit}}")],
            )?;
            println!("compared {head} against {rev} ({sha})");
            let started = Instant::now();
            let result = semver_checks(root, rev);
            eprintln!(
                "release-check: cargo-semver-checks took {:.1}s",
                started.elapsed().as_secs_f64()
            );
            step("semver-checks", result);
        }
        None => println!(
            "no v* tag yet: this is the first release; nothing to compare against; tag it with \
             `git tag -a vX.Y.Z`"
        ),
    }
    eprintln!("\n==> release-check: API snapshots");
    step("api snapshots", crate::api::check(root));
    eprintln!("\n==> release-check: cargo package");
    step("cargo package", crate::ci::package(root));
    step(
        "CHANGELOG.md",
        read(root, "CHANGELOG.md").and_then(|text| check_changelog(&text)),
    );
    let versions = read(root, "Cargo.toml")
        .and_then(|manifest| workspace_version(&manifest))
        .and_then(|version| check_versions(&version, &workspace::members(root)?));
    step("crate versions", versions);
    if failed.is_empty() {
        eprintln!("==> release-check: every step passed");
        Ok(())
    } else {
        Err(format!("release-check failed: {}", failed.join(", ")))
    }
}

fn parse_args(args: &[String]) -> Result<Option<String>, String> {
    match args {
        [] => Ok(None),
        [flag, rev] if flag == "--baseline" => Ok(Some(rev.clone())),
        _ => Err(format!(
            "release-check: unexpected arguments {args:?} (usage: release-check [--baseline REV])"
        )),
    }
}

/// The first tag of `git tag --list 'v*' --sort=-v:refname` (newest version first) that is a
/// version (`v` then a digit).
fn latest_tag(tags: &str) -> Option<&str> {
    tags.lines().map(str::trim).find(|tag| {
        tag.strip_prefix('v')
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// `git <args>` in `root`: its trimmed standard output.
fn git(root: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !output.status.success() {
        return Err(format!("git {} failed: {}", args.join(" "), output.status));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn read(root: &Path, file: &str) -> Result<String, String> {
    std::fs::read_to_string(root.join(file)).map_err(|e| format!("cannot read {file}: {e}"))
}

/// Installs cargo-semver-checks into [`TOOLS`] when it is missing or another version, then runs it
/// on the workspace's library crates against `rev`.
fn semver_checks(root: &Path, rev: &str) -> Result<(), String> {
    let binary = root.join(TOOLS).join("bin").join(format!(
        "cargo-semver-checks{}",
        std::env::consts::EXE_SUFFIX
    ));
    let installed = Command::new(&binary)
        .args(["semver-checks", "--version"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned());
    if !installed.is_some_and(|v| v.split_whitespace().any(|w| w == SEMVER_CHECKS_VERSION)) {
        eprintln!(
            "release-check: installing cargo-semver-checks {SEMVER_CHECKS_VERSION} into {TOOLS}"
        );
        let status = Command::new(env!("CARGO"))
            .args([
                "install",
                "--locked",
                "--version",
                SEMVER_CHECKS_VERSION,
                "--root",
            ])
            .arg(root.join(TOOLS))
            .arg("cargo-semver-checks")
            .current_dir(root)
            .status()
            .map_err(|e| format!("cannot run cargo install: {e}"))?;
        if !status.success() {
            return Err(format!(
                "cargo install cargo-semver-checks failed: {status}"
            ));
        }
    }
    let mut command = Command::new(&binary);
    command.args(["semver-checks", "--workspace"]);
    for excluded in NOT_PUBLISHED {
        command.args(["--exclude", excluded]);
    }
    command.args(["--baseline-rev", rev]).current_dir(root);
    let status = command
        .status()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "cargo semver-checks against {rev} failed (see its report above)"
        ))
    }
}

/// The changelog has the section where unreleased changes go.
fn check_changelog(text: &str) -> Result<(), String> {
    if text.lines().any(|line| line.trim_end() == UNRELEASED) {
        Ok(())
    } else {
        Err(format!("CHANGELOG.md has no `{UNRELEASED}` section"))
    }
}

/// `[workspace.package] version` of the root manifest.
fn workspace_version(manifest: &str) -> Result<String, String> {
    let table: toml::Table =
        toml::from_str(manifest).map_err(|e| format!("cannot read Cargo.toml: {e}"))?;
    table
        .get("workspace")
        .and_then(|w| w.get("package"))
        .and_then(|p| p.get("version"))
        .and_then(toml::Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| "Cargo.toml has no [workspace.package] version".to_owned())
}

/// Every published member (all but [`NOT_PUBLISHED`]) has the workspace's version.
fn check_versions(workspace: &str, members: &[Member]) -> Result<(), String> {
    let off: Vec<String> = members
        .iter()
        .filter(|m| !NOT_PUBLISHED.contains(&m.name.as_str()) && m.version != workspace)
        .map(|m| format!("{} {}", m.name, m.version))
        .collect();
    if off.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "not at the workspace version {workspace}: {} (use `version.workspace = true`)",
            off.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::{parse_members, tests::METADATA};

    #[test]
    fn the_latest_tag_is_the_first_of_the_version_sorted_list() {
        assert_eq!(latest_tag("v0.10.0\nv0.9.1\nv0.2.0\n"), Some("v0.10.0"));
        // A `v*` tag that is not a version is not a release.
        assert_eq!(latest_tag("very-old\nv0.1.0\n"), Some("v0.1.0"));
        assert_eq!(latest_tag(""), None);
        assert_eq!(latest_tag("vendor-drop\n"), None);
    }

    #[test]
    fn arguments() {
        assert_eq!(parse_args(&[]), Ok(None));
        assert_eq!(
            parse_args(&["--baseline".into(), "abc123".into()]),
            Ok(Some("abc123".into()))
        );
        assert!(parse_args(&["--baseline".into()]).is_err());
        assert!(parse_args(&["--tag".into(), "v1".into()]).is_err());
    }

    #[test]
    fn the_changelog_needs_an_unreleased_section() {
        assert!(check_changelog("# Changelog\n\n## [Unreleased]\n\n### Added\n").is_ok());
        assert!(check_changelog("# Changelog\n\n## [0.1.0] - 2026-12-01\n").is_err());
        assert!(check_changelog("Mentions ## [Unreleased] inline\n").is_err());
    }

    #[test]
    fn every_published_crate_has_the_workspace_version() {
        let manifest = "[workspace]\nmembers = []\n[workspace.package]\nversion = \"0.1.0\"\n";
        assert_eq!(workspace_version(manifest).unwrap(), "0.1.0");
        assert!(workspace_version("[workspace]\n").is_err());
        let members = parse_members(METADATA).unwrap();
        // modelctx-tests and xtask are 0.0.0, and unpublished: not counted.
        assert_eq!(check_versions("0.1.0", &members), Ok(()));
        let error = check_versions("0.2.0", &members).unwrap_err();
        assert!(error.contains("modelctx-http 0.1.0"), "{error}");
        assert!(!error.contains("xtask"), "{error}");
    }
}
