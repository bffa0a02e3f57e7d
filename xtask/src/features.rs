//! The feature hygiene steps of `cargo xtask ci`: every library crate builds with
//! `--no-default-features` and with each of its features alone, and the library crates' normal
//! dependency graph has one version of each core dependency we control.
//!
//! Both lists come from `cargo metadata` ([`crate::workspace`]): a new crate or feature is checked
//! without touching this file.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::workspace::{self, LibCrate};

/// The feature checks deny warnings through RUSTFLAGS, in a target folder of their own so that
/// the flag does not invalidate the main build.
const FEATURE_ENV: &[(&str, &str)] = &[
    ("RUSTFLAGS", "-D warnings"),
    ("CARGO_TARGET_DIR", "target/features"),
];

/// Features that are not checked alone, as `(crate, feature, why)`. Every other feature of every
/// library crate must build on its own (with the crate's default features off).
///
/// Empty today: every feature builds alone.
const NOT_ALONE: &[(&str, &str, &str)] = &[];

/// The dependencies whose versions we choose (ours are added from the workspace): two versions
/// of one of them in the library crates' graph means two copies compiled into every consumer, and
/// types that do not match across our crates.
const CORE_DEPENDENCIES: &[&str] = &[
    "serde",
    "serde_json",
    "tokio",
    "hyper",
    "hyper-util",
    "http-body-util",
    "bytes",
    "tokio-util",
    "thiserror",
    "tracing",
];

/// Core dependencies allowed in two versions, as `(crate, why)`: a third-party crate that pulls
/// in an old major version we cannot remove.
///
/// Empty today: `cargo tree -d` of the library crates lists base64, getrandom, r-efi, syn and
/// windows-sys twice, none of them a core dependency.
const ALLOWED_DUPLICATES: &[(&str, &str)] = &[];

/// One `cargo check` of the feature step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FeatureCheck {
    /// The package.
    pub(crate) krate: String,
    /// The one feature enabled, or none.
    pub(crate) feature: Option<String>,
}

impl FeatureCheck {
    /// `check -p <crate> --no-default-features [--features <feature>]`.
    pub(crate) fn args(&self) -> Vec<String> {
        let mut args = vec![
            "check".to_owned(),
            "-p".to_owned(),
            self.krate.clone(),
            "--no-default-features".to_owned(),
        ];
        if let Some(feature) = &self.feature {
            args.push("--features".to_owned());
            args.push(feature.clone());
        }
        args
    }
}

/// The checks for `crates`: each with no feature, then each of its features alone, but those of
/// `not_alone`.
pub(crate) fn checks(crates: &[LibCrate], not_alone: &[(&str, &str, &str)]) -> Vec<FeatureCheck> {
    let mut checks = Vec::new();
    for krate in crates {
        checks.push(FeatureCheck {
            krate: krate.name.clone(),
            feature: None,
        });
        for feature in &krate.features {
            if not_alone
                .iter()
                .any(|(c, f, _)| *c == krate.name && *f == feature)
            {
                continue;
            }
            checks.push(FeatureCheck {
                krate: krate.name.clone(),
                feature: Some(feature.clone()),
            });
        }
    }
    checks
}

/// The "features" step: every check of [`checks`], warnings denied; stops at the first failure.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    let crates = workspace::library_crates(root)?;
    for (krate, feature, why) in NOT_ALONE {
        eprintln!("features: {krate}/{feature} is not checked alone: {why}");
    }
    let checks = checks(&crates, NOT_ALONE);
    eprintln!(
        "features: {} checks over {} library crates",
        checks.len(),
        crates.len()
    );
    for check in &checks {
        let args = check.args();
        let started = Instant::now();
        let status = Command::new(env!("CARGO"))
            .args(&args)
            .arg("--quiet")
            .envs(FEATURE_ENV.iter().copied())
            .current_dir(root)
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        eprintln!(
            "features: cargo {} {} in {:.1}s",
            args.join(" "),
            if status.success() { "ok" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        if !status.success() {
            return Err(format!("cargo {} failed", args.join(" ")));
        }
    }
    Ok(())
}

/// The "duplicates" step: `cargo tree -d` of the library crates' normal dependencies (all
/// features, all targets); fails, printing the chains, when a core dependency or one of our
/// crates is there in two versions.
pub(crate) fn check_duplicates(root: &Path) -> Result<(), String> {
    let members = workspace::members(root)?;
    let crates = workspace::library_crates(root)?;
    let mut args = vec![
        "tree",
        "-d",
        "-e",
        "normal",
        "--all-features",
        "--target",
        "all",
        "--locked",
    ];
    for krate in &crates {
        args.push("-p");
        args.push(&krate.name);
    }
    eprintln!("duplicates: cargo {}", args.join(" "));
    let output = Command::new(env!("CARGO"))
        .args(&args)
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo tree: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo tree failed: {}", output.status));
    }
    let tree = String::from_utf8_lossy(&output.stdout);
    let mut controlled: Vec<&str> = CORE_DEPENDENCIES.to_vec();
    controlled.extend(members.iter().map(|m| m.name.as_str()));
    let others: Vec<&str> = duplicated_names(&tree)
        .into_iter()
        .filter(|name| !controlled.contains(name))
        .collect();
    if !others.is_empty() {
        eprintln!(
            "duplicates: in two versions but not core dependencies (not judged): {}",
            others.join(", ")
        );
    }
    judge_duplicates(&tree, &controlled, ALLOWED_DUPLICATES)
}

/// The crate names `cargo tree -d` lists, each once, sorted.
fn duplicated_names(tree: &str) -> Vec<&str> {
    blocks(tree).keys().copied().collect()
}

/// `cargo tree -d`'s output by crate name: each duplicated version starts a block (a line without
/// indentation, then the inverted tree of who depends on it), blocks separated by empty lines.
fn blocks(tree: &str) -> BTreeMap<&str, Vec<String>> {
    let mut blocks: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for block in tree.split("\n\n") {
        let block = block.trim_matches('\n');
        let Some(name) = block
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().next())
        else {
            continue;
        };
        blocks.entry(name).or_default().push(block.to_owned());
    }
    blocks
}

/// Fails when a crate of `controlled` appears in `cargo tree -d`'s output, unless `allowed` names
/// it; the error holds each offender's chains.
fn judge_duplicates(
    tree: &str,
    controlled: &[&str],
    allowed: &[(&str, &str)],
) -> Result<(), String> {
    let mut offenders = Vec::new();
    for (name, versions) in blocks(tree) {
        if !controlled.contains(&name) {
            continue;
        }
        if let Some((_, why)) = allowed.iter().find(|(allowed, _)| *allowed == name) {
            eprintln!("duplicates: {name} is allowed in two versions: {why}");
            continue;
        }
        offenders.push((name, versions));
    }
    if offenders.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = offenders.iter().map(|(name, _)| *name).collect();
    let chains: Vec<String> = offenders
        .into_iter()
        .flat_map(|(_, versions)| versions)
        .collect();
    Err(format!(
        "more than one version of {} in the library crates' dependencies (align the versions, \
         or, when a third-party crate forces it, name it in features::ALLOWED_DUPLICATES with \
         the reason); who pulls in each version:\n\n{}",
        names.join(", "),
        chains.join("\n\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::{parse_library_crates, tests::METADATA};

    fn lines(checks: &[FeatureCheck]) -> Vec<String> {
        checks.iter().map(|check| check.args().join(" ")).collect()
    }

    #[test]
    fn every_crate_is_checked_without_features_then_with_each_alone() {
        let crates = parse_library_crates(METADATA).unwrap();
        assert_eq!(
            lines(&checks(&crates, &[])),
            [
                "check -p modelctx-http --no-default-features",
                "check -p modelctx-http --no-default-features --features axum",
                "check -p modelctx-http --no-default-features --features client",
                "check -p modelctx-http --no-default-features --features server",
                "check -p modelctx-redis --no-default-features",
            ]
        );
    }

    #[test]
    fn a_feature_documented_as_not_buildable_alone_is_skipped() {
        let crates = parse_library_crates(METADATA).unwrap();
        let all = checks(&crates, &[]);
        let skipped = checks(&crates, &[("modelctx-http", "axum", "needs a router")]);
        assert_eq!(skipped.len(), all.len() - 1);
        assert!(!lines(&skipped).iter().any(|l| l.ends_with("axum")));
        // The same feature name in another crate is still checked.
        let other = checks(&crates, &[("modelctx-redis", "axum", "-")]);
        assert_eq!(other, all);
    }

    const TREE: &str = "\
base64 v0.22.1
└── jsonwebtoken v11.1.0
    └── modelctx-auth v0.1.0 (/w/crates/auth)

base64 v0.23.1
└── modelctx-http v0.1.0 (/w/crates/http)

tokio v1.40.0
└── some-crate v0.3.0
    └── modelctx-http v0.1.0 (/w/crates/http)

tokio v1.48.0
└── modelctx-http v0.1.0 (/w/crates/http)
";

    #[test]
    fn a_duplicated_core_dependency_fails_with_its_chains() {
        let error = judge_duplicates(TREE, &["tokio", "serde"], &[]).unwrap_err();
        assert!(error.contains("version of tokio in"), "{error}");
        assert!(
            error.contains("tokio v1.40.0\n└── some-crate v0.3.0\n    └── modelctx-http"),
            "{error}"
        );
        assert!(
            error.contains("tokio v1.48.0\n└── modelctx-http"),
            "{error}"
        );
        // base64 is not ours to choose.
        assert!(!error.contains("base64"), "{error}");
    }

    #[test]
    fn uncontrolled_or_allowed_duplicates_pass() {
        assert_eq!(judge_duplicates(TREE, &["serde", "bytes"], &[]), Ok(()));
        assert_eq!(
            judge_duplicates(TREE, &["tokio"], &[("tokio", "some-crate pins 1.40")]),
            Ok(())
        );
        assert_eq!(judge_duplicates("", &["tokio"], &[]), Ok(()));
        assert_eq!(duplicated_names(TREE), ["base64", "tokio"]);
    }
}
