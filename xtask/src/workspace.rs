//! The workspace as `cargo metadata` describes it: which members are library crates, their
//! features and versions. Every list of crates in the xtask comes from here, never from a
//! hand-written list, so that a new crate is covered by the API snapshots, the feature checks and
//! the release checklist as soon as it is a workspace member.

use std::path::Path;
use std::process::{Command, Stdio};

use serde::Deserialize;

/// Workspace members that have a library target but are not published: the integration tests'
/// harness and this xtask. Every other member with a library target is a library crate.
pub(crate) const NOT_PUBLISHED: &[&str] = &["modelctx-tests", "xtask"];

/// One library crate of the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LibCrate {
    /// The package name (`modelctx-http`).
    pub(crate) name: String,
    /// The library target's name (`modelctx_http`): the name of its rustdoc JSON file.
    pub(crate) lib_name: String,
    /// Its features, sorted by name, `default` left out.
    pub(crate) features: Vec<String>,
}

/// One workspace member, library or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// The package name.
    pub(crate) name: String,
    /// The package version.
    pub(crate) version: String,
}

/// What the xtask reads of `cargo metadata --format-version 1 --no-deps`.
#[derive(Debug, Deserialize)]
struct Metadata {
    packages: Vec<Package>,
    workspace_members: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Package {
    name: String,
    version: String,
    id: String,
    targets: Vec<Target>,
    features: std::collections::BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct Target {
    name: String,
    kind: Vec<String>,
}

/// `cargo metadata --format-version 1 --no-deps` of the workspace at `root`.
pub(crate) fn metadata(root: &Path) -> Result<String, String> {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo metadata failed: {}", output.status));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("cargo metadata printed non-UTF-8: {e}"))
}

/// The library crates of the workspace at `root`, sorted by name.
pub(crate) fn library_crates(root: &Path) -> Result<Vec<LibCrate>, String> {
    parse_library_crates(&metadata(root)?)
}

/// The workspace members of the workspace at `root` (binaries, tests and xtask included), sorted
/// by name.
pub(crate) fn members(root: &Path) -> Result<Vec<Member>, String> {
    parse_members(&metadata(root)?)
}

/// The library crates in a `cargo metadata` output: workspace members with a library target
/// (`lib`, `rlib` or `proc-macro`), minus [`NOT_PUBLISHED`], sorted by name.
pub(crate) fn parse_library_crates(json: &str) -> Result<Vec<LibCrate>, String> {
    let mut crates = Vec::new();
    for package in workspace_packages(json)? {
        if NOT_PUBLISHED.contains(&package.name.as_str()) {
            continue;
        }
        let Some(lib) = package.targets.iter().find(|target| {
            target
                .kind
                .iter()
                .any(|kind| matches!(kind.as_str(), "lib" | "rlib" | "proc-macro"))
        }) else {
            continue;
        };
        crates.push(LibCrate {
            name: package.name.clone(),
            lib_name: lib.name.replace('-', "_"),
            features: package
                .features
                .keys()
                .filter(|feature| *feature != "default")
                .cloned()
                .collect(),
        });
    }
    crates.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(crates)
}

/// Every workspace member in a `cargo metadata` output, sorted by name.
pub(crate) fn parse_members(json: &str) -> Result<Vec<Member>, String> {
    let mut members: Vec<Member> = workspace_packages(json)?
        .into_iter()
        .map(|package| Member {
            name: package.name,
            version: package.version,
        })
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(members)
}

/// The packages of a `cargo metadata` output that are workspace members.
fn workspace_packages(json: &str) -> Result<Vec<Package>, String> {
    let metadata: Metadata = serde_json::from_str(json)
        .map_err(|e| format!("cannot read cargo metadata's output: {e}"))?;
    let members = metadata.workspace_members;
    Ok(metadata
        .packages
        .into_iter()
        .filter(|package| members.contains(&package.id))
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A trimmed `cargo metadata --no-deps` output: two library crates (one with features, one
    /// with a dashed library name), a binary-only crate, the two unpublished members, and a
    /// package that is not a workspace member.
    pub(crate) const METADATA: &str = r#"{
      "packages": [
        {"name": "modelctx-http", "version": "0.1.0", "id": "path+file:///w/crates/http#modelctx-http@0.1.0",
         "targets": [{"name": "modelctx_http", "kind": ["lib"]}, {"name": "it", "kind": ["test"]}],
         "features": {"default": ["server"], "server": ["dep:hyper"], "client": [], "axum": ["server"]}},
        {"name": "modelctx-cli", "version": "0.1.0", "id": "path+file:///w/crates/cli#modelctx-cli@0.1.0",
         "targets": [{"name": "mcx", "kind": ["bin"]}], "features": {}},
        {"name": "modelctx-redis", "version": "0.1.0", "id": "path+file:///w/crates/redis#modelctx-redis@0.1.0",
         "targets": [{"name": "modelctx-redis", "kind": ["rlib"]}], "features": {}},
        {"name": "modelctx-tests", "version": "0.0.0", "id": "path+file:///w/tests#modelctx-tests@0.0.0",
         "targets": [{"name": "modelctx_tests", "kind": ["lib"]}], "features": {}},
        {"name": "xtask", "version": "0.0.0", "id": "path+file:///w/xtask#xtask@0.0.0",
         "targets": [{"name": "xtask", "kind": ["lib"]}, {"name": "xtask", "kind": ["bin"]}], "features": {}},
        {"name": "serde", "version": "1.0.0", "id": "registry+https://github.com/rust-lang/crates.io-index#serde@1.0.0",
         "targets": [{"name": "serde", "kind": ["lib"]}], "features": {"std": []}}
      ],
      "workspace_members": [
        "path+file:///w/crates/http#modelctx-http@0.1.0",
        "path+file:///w/crates/cli#modelctx-cli@0.1.0",
        "path+file:///w/crates/redis#modelctx-redis@0.1.0",
        "path+file:///w/tests#modelctx-tests@0.0.0",
        "path+file:///w/xtask#xtask@0.0.0"
      ]
    }"#;

    #[test]
    fn library_crates_are_the_members_with_a_library_target_but_tests_and_xtask() {
        let crates = parse_library_crates(METADATA).unwrap();
        assert_eq!(
            crates,
            [
                LibCrate {
                    name: "modelctx-http".into(),
                    lib_name: "modelctx_http".into(),
                    features: vec!["axum".into(), "client".into(), "server".into()],
                },
                LibCrate {
                    name: "modelctx-redis".into(),
                    lib_name: "modelctx_redis".into(),
                    features: vec![],
                },
            ]
        );
    }

    #[test]
    fn members_are_every_workspace_package() {
        let names: Vec<String> = parse_members(METADATA)
            .unwrap()
            .into_iter()
            .map(|m| format!("{} {}", m.name, m.version))
            .collect();
        assert_eq!(
            names,
            [
                "modelctx-cli 0.1.0",
                "modelctx-http 0.1.0",
                "modelctx-redis 0.1.0",
                "modelctx-tests 0.0.0",
                "xtask 0.0.0"
            ]
        );
    }
}
