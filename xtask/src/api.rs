//! `cargo xtask api [--bless]`: the public API of every library crate, committed as sorted text
//! lines in `api/<crate>.txt`, so that every change to a public item shows in review.
//!
//! Each crate's API is read from rustdoc's JSON output (`cargo rustdoc --lib --all-features --
//! -Z unstable-options --output-format json`, one run per crate) and rendered by the `public-api`
//! library, one line per public item (`pub fn modelctx_http::serve(...)`, `impl Clone for ...`),
//! blanket impls left out (they follow from the others), sorted.
//!
//! The JSON comes from the nightly toolchain when rustup has one installed, else from the stable
//! toolchain with `RUSTC_BOOTSTRAP=1` (a fresh CI machine may have only the one toolchain). Both
//! produce the same format version today and the same snapshots; the renderer refuses a format
//! version it has not been checked against ([`SUPPORTED_FORMATS`]) rather than guess.
//!
//! The list of crates is the workspace's ([`crate::workspace::library_crates`]): a new library
//! crate needs only `cargo xtask api --bless` to get its snapshot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::workspace::{self, LibCrate};

/// The folder of the snapshots, relative to the project root.
pub(crate) const SNAPSHOT_DIR: &str = "api";

/// The command that rewrites the snapshots.
pub(crate) const BLESS: &str = "cargo xtask api --bless";

/// The rustdoc JSON format versions the renderer is known to read correctly. `public-api` 0.51
/// reads format 56 (through `rustdoc-types` 0.56); format 57, which the installed stable 1.95 and
/// nightly 1.97 both produce, only added `ExternalCrate::path`, a field the renderer does not read.
/// A later format may rename what it reads: it is refused with a message rather than rendered
/// wrong.
pub(crate) const SUPPORTED_FORMATS: &[u64] = &[56, 57];

/// Which toolchain produces the rustdoc JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Toolchain {
    /// `rustup run nightly cargo ...`.
    Nightly,
    /// The cargo that runs the xtask, with `RUSTC_BOOTSTRAP=1` (rustdoc's JSON output is unstable).
    Stable,
}

impl Toolchain {
    fn name(self) -> &'static str {
        match self {
            Toolchain::Nightly => "nightly",
            Toolchain::Stable => "stable",
        }
    }

    /// Nightly when `rustup toolchain list` has a nightly toolchain, else stable.
    pub(crate) fn detect() -> Toolchain {
        let listed = Command::new("rustup")
            .args(["toolchain", "list"])
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_default();
        if has_nightly(&listed) {
            Toolchain::Nightly
        } else {
            Toolchain::Stable
        }
    }
}

/// Whether a `rustup toolchain list` output names a nightly toolchain.
fn has_nightly(listed: &str) -> bool {
    listed.lines().any(|line| line.starts_with("nightly"))
}

/// What `cargo xtask api` was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Options {
    bless: bool,
    toolchain: Option<Toolchain>,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        bless: false,
        toolchain: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--bless" => options.bless = true,
            "--toolchain" => {
                options.toolchain = match it.next().map(String::as_str) {
                    Some("nightly") => Some(Toolchain::Nightly),
                    Some("stable") => Some(Toolchain::Stable),
                    _ => return Err("--toolchain needs `nightly` or `stable`".into()),
                }
            }
            other => return Err(format!("api: unknown argument {other}")),
        }
    }
    Ok(options)
}

/// `cargo xtask api [--bless] [--toolchain nightly|stable]`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let options = parse_args(args)?;
    let toolchain = options.toolchain.unwrap_or_else(Toolchain::detect);
    if options.bless {
        bless(root, toolchain)
    } else {
        check_with(root, toolchain)
    }
}

/// The check of CI and of the release checklist: every snapshot matches the tree.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    check_with(root, Toolchain::detect())
}

fn check_with(root: &Path, toolchain: Toolchain) -> Result<(), String> {
    let crates = workspace::library_crates(root)?;
    let mut stale = Vec::new();
    for krate in &crates {
        let rendered = snapshot_text(&render_crate(root, krate, toolchain)?);
        let path = snapshot_path(root, &krate.name);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        let changes = diff(&committed, &rendered);
        if changes.is_empty() {
            eprintln!("api: {}: {} up to date", krate.name, relative(&krate.name));
            continue;
        }
        let removed = changes.iter().filter(|l| l.starts_with('-')).count();
        let added = changes.len() - removed;
        eprintln!(
            "api: {}: {removed} line(s) removed, {added} added\n--- {} (committed)\n+++ {} (this tree)",
            krate.name,
            relative(&krate.name),
            krate.name,
        );
        for line in &changes {
            eprintln!("{line}");
        }
        stale.push(krate.name.clone());
    }
    for orphan in orphans(root, &crates)? {
        eprintln!("api: {orphan}: no library crate of that name in the workspace");
        stale.push(orphan);
    }
    if stale.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the public API differs from {SNAPSHOT_DIR}/ for {}: if the change is intended, run \
         `{BLESS}` and commit {SNAPSHOT_DIR}/",
        stale.join(", ")
    ))
}

fn bless(root: &Path, toolchain: Toolchain) -> Result<(), String> {
    let crates = workspace::library_crates(root)?;
    let dir = root.join(SNAPSHOT_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for krate in &crates {
        let rendered = snapshot_text(&render_crate(root, krate, toolchain)?);
        let path = snapshot_path(root, &krate.name);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(rendered.as_str()) {
            eprintln!("api: {} unchanged", relative(&krate.name));
            continue;
        }
        std::fs::write(&path, rendered)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("api: wrote {}", relative(&krate.name));
    }
    for orphan in orphans(root, &crates)? {
        let path = snapshot_path(root, &orphan);
        std::fs::remove_file(&path)
            .map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
        eprintln!("api: removed {} (no such library crate)", relative(&orphan));
    }
    Ok(())
}

/// `api/<crate>.txt`.
fn snapshot_path(root: &Path, name: &str) -> PathBuf {
    root.join(SNAPSHOT_DIR).join(format!("{name}.txt"))
}

fn relative(name: &str) -> String {
    format!("{SNAPSHOT_DIR}/{name}.txt")
}

/// The crates that have a snapshot but are no library crate of the workspace (any more).
fn orphans(root: &Path, crates: &[LibCrate]) -> Result<Vec<String>, String> {
    let dir = root.join(SNAPSHOT_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut orphans = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let file = entry.file_name();
        let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".txt")) else {
            continue;
        };
        if !crates.iter().any(|krate| krate.name == name) {
            orphans.push(name.to_owned());
        }
    }
    orphans.sort();
    Ok(orphans)
}

/// Where the rustdoc JSON of `toolchain` is built: `<target>/api/<toolchain>`, `<target>` being
/// `CARGO_TARGET_DIR` (relative to the project root) when set, else `target/`. A folder per
/// toolchain, so that neither invalidates the other's build nor the main one.
fn json_target_dir(root: &Path, toolchain: Toolchain) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), |dir| root.join(dir));
    target.join("api").join(toolchain.name())
}

/// Runs rustdoc on one crate (all features, its library only) and renders its JSON.
fn render_crate(
    root: &Path,
    krate: &LibCrate,
    toolchain: Toolchain,
) -> Result<Vec<String>, String> {
    let target_dir = json_target_dir(root, toolchain);
    let mut command = match toolchain {
        Toolchain::Nightly => {
            let mut command = Command::new("rustup");
            command.args(["run", "nightly", "cargo"]);
            command
        }
        Toolchain::Stable => {
            let mut command = Command::new(env!("CARGO"));
            command.env("RUSTC_BOOTSTRAP", "1");
            command
        }
    };
    command
        .args([
            "rustdoc",
            "--quiet",
            "--locked",
            "--lib",
            "--all-features",
            "-p",
        ])
        .arg(&krate.name)
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--", "-Z", "unstable-options", "--output-format", "json"])
        // Flags meant for the HTML docs (`-D warnings` of the rustdoc step) are not this run's.
        .env_remove("RUSTDOCFLAGS")
        .current_dir(root);
    eprintln!(
        "api: {}: rustdoc JSON ({} toolchain)",
        krate.name,
        toolchain.name()
    );
    let status = command
        .status()
        .map_err(|e| format!("cannot run cargo rustdoc ({}): {e}", toolchain.name()))?;
    if !status.success() {
        return Err(format!(
            "cargo rustdoc -p {} ({}) failed: {status}",
            krate.name,
            toolchain.name()
        ));
    }
    let json = target_dir
        .join("doc")
        .join(format!("{}.json", krate.lib_name));
    render(&json)
}

/// The public API in the rustdoc JSON file `json`, one line per item, sorted. Fails on a format
/// version outside [`SUPPORTED_FORMATS`] and on a deprecated item that breaks the policy of
/// [`check_deprecations`].
pub(crate) fn render(json: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(json)
        .map_err(|e| format!("cannot read {}: {e}", json.display()))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", json.display()))?;
    check_format(&value).map_err(|e| format!("{}: {e}", json.display()))?;
    check_deprecations(&value).map_err(|e| format!("{}: {e}", json.display()))?;
    let api = public_api::Builder::from_rustdoc_json(json)
        .omit_blanket_impls(true)
        .build()
        .map_err(|e| format!("cannot render {}: {e}", json.display()))?;
    let mut lines: Vec<String> = api.items().map(ToString::to_string).collect();
    lines.sort();
    Ok(lines)
}

/// Fails unless the JSON's `format_version` is one of [`SUPPORTED_FORMATS`].
fn check_format(value: &Value) -> Result<(), String> {
    let version = value
        .get("format_version")
        .and_then(Value::as_u64)
        .ok_or("no format_version: not rustdoc JSON")?;
    if SUPPORTED_FORMATS.contains(&version) {
        Ok(())
    } else {
        Err(format!(
            "rustdoc JSON format version {version}, but the renderer (public-api 0.51) is checked \
             against {SUPPORTED_FORMATS:?} only: update public-api in xtask/Cargo.toml to the \
             version that reads {version} and add it to api::SUPPORTED_FORMATS"
        ))
    }
}

/// The deprecation policy (README, "Versioning"), as far as a machine can check it: every
/// deprecated item of the crate says `since` (the release that deprecated it, from which its
/// removal is counted) and has a `note` (naming its replacement).
fn check_deprecations(value: &Value) -> Result<(), String> {
    let Some(index) = value.get("index").and_then(Value::as_object) else {
        return Ok(());
    };
    let mut bad: Vec<String> = Vec::new();
    for item in index.values() {
        if item.get("crate_id").and_then(Value::as_u64) != Some(0) {
            continue;
        }
        let Some(deprecation) = item.get("deprecation").filter(|d| !d.is_null()) else {
            continue;
        };
        let present = |key: &str| {
            deprecation
                .get(key)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.trim().is_empty())
        };
        if !present("since") || !present("note") {
            let name = item.get("name").and_then(Value::as_str).unwrap_or("?");
            let span = item
                .get("span")
                .and_then(|span| span.get("filename"))
                .and_then(Value::as_str)
                .unwrap_or("?");
            bad.push(format!("`{name}` ({span})"));
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    bad.sort();
    Err(format!(
        "deprecated without `since` and `note`: {}; write #[deprecated(since = \"<the release>\", \
         note = \"use <its replacement>\")]",
        bad.join(", ")
    ))
}

/// The snapshot file's text: the lines, sorted, one per line.
pub(crate) fn snapshot_text(lines: &[String]) -> String {
    let mut lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    lines.sort_unstable();
    let mut text = lines.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

/// The lines only in `old` (`-line`) and only in `new` (`+line`), as multisets, ordered by the
/// line's text (a removed line before an added one of the same text never happens): a changed
/// signature shows as its `-` line next to its `+` line, as both start with the item's path.
pub(crate) fn diff(old: &str, new: &str) -> Vec<String> {
    let mut count: BTreeMap<&str, i64> = BTreeMap::new();
    for line in old.lines() {
        *count.entry(line).or_default() -= 1;
    }
    for line in new.lines() {
        *count.entry(line).or_default() += 1;
    }
    let mut out = Vec::new();
    for (line, n) in count {
        let sign = if n < 0 { '-' } else { '+' };
        for _ in 0..n.unsigned_abs() {
            out.push(format!("{sign}{line}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/api/fixtures")
            .join(name)
    }

    #[test]
    fn the_renderer_lists_each_public_item_sorted() {
        let lines = render(&fixture("before.json")).unwrap();
        let mut sorted = lines.clone();
        sorted.sort();
        assert_eq!(lines, sorted);
        for expected in [
            "pub fn fixture::greet(name: &str) -> alloc::string::String",
            "pub struct fixture::Config",
            "pub fixture::Config::retries: u32",
            "pub mod fixture",
            "impl core::marker::Send for fixture::Config",
        ] {
            assert!(
                lines.iter().any(|line| line == expected),
                "{expected:?} not in {lines:#?}"
            );
        }
        // Private items are not part of the API; blanket impls are left out.
        assert!(!lines.iter().any(|line| line.contains("hidden_helper")));
        assert!(
            !lines
                .iter()
                .any(|line| line.contains("impl<T> core::convert::From<T>"))
        );
    }

    #[test]
    fn a_changed_signature_shows_as_a_removed_and_an_added_line() {
        let before = snapshot_text(&render(&fixture("before.json")).unwrap());
        let after = snapshot_text(&render(&fixture("after.json")).unwrap());
        assert_eq!(
            diff(&before, &after),
            [
                "-pub fn fixture::greet(name: &str) -> alloc::string::String",
                "+pub fn fixture::greet(name: &str, loud: bool) -> alloc::string::String",
            ]
        );
        assert!(diff(&before, &before).is_empty());
    }

    #[test]
    fn snapshots_are_sorted_whatever_the_order_given() {
        let a = snapshot_text(&["pub mod b".into(), "pub mod a".into(), "impl X".into()]);
        let b = snapshot_text(&["impl X".into(), "pub mod a".into(), "pub mod b".into()]);
        assert_eq!(a, "impl X\npub mod a\npub mod b\n");
        assert_eq!(a, b);
        assert_eq!(snapshot_text(&[]), "");
    }

    #[test]
    fn the_diff_counts_repeated_lines_and_orders_by_text() {
        assert_eq!(diff("a\nb\nb\nd\n", "a\nb\nc\nd\nd\n"), ["-b", "+c", "+d"]);
        assert_eq!(diff("", "x\n"), ["+x"]);
        assert_eq!(diff("x\n", ""), ["-x"]);
    }

    #[test]
    fn an_unknown_format_version_is_refused() {
        let format = |v: u64| serde_json::json!({ "format_version": v });
        assert!(check_format(&format(57)).is_ok());
        let error = check_format(&format(99)).unwrap_err();
        assert!(error.contains("99"), "{error}");
        assert!(check_format(&serde_json::json!({})).is_err());
    }

    #[test]
    fn a_deprecated_item_needs_since_and_a_note() {
        let crate_with = |deprecation: Value, crate_id: u64| {
            serde_json::json!({ "index": { "1": {
                "name": "old_name", "crate_id": crate_id, "deprecation": deprecation,
                "span": { "filename": "src/lib.rs" }
            }}})
        };
        let good = serde_json::json!({ "since": "0.2.0", "note": "use `new_name`" });
        assert!(check_deprecations(&crate_with(good, 0)).is_ok());
        assert!(check_deprecations(&crate_with(Value::Null, 0)).is_ok());
        let no_note = serde_json::json!({ "since": "0.2.0", "note": null });
        let error = check_deprecations(&crate_with(no_note.clone(), 0)).unwrap_err();
        assert!(error.contains("`old_name` (src/lib.rs)"), "{error}");
        let no_since = serde_json::json!({ "since": null, "note": "use `new_name`" });
        assert!(check_deprecations(&crate_with(no_since, 0)).is_err());
        // Another crate's items (re-exported or not) are that crate's business.
        assert!(check_deprecations(&crate_with(no_note, 3)).is_ok());
    }

    #[test]
    fn nightly_is_used_when_rustup_lists_it() {
        assert!(has_nightly(
            "stable-x86_64-unknown-linux-gnu (active, default)\nnightly-x86_64-unknown-linux-gnu\n"
        ));
        assert!(!has_nightly(
            "stable-x86_64-unknown-linux-gnu (default)\n1.95.0-x86_64\n"
        ));
        assert!(!has_nightly(""));
    }

    #[test]
    fn arguments() {
        let args = |a: &[&str]| parse_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            args(&[]),
            Ok(Options {
                bless: false,
                toolchain: None
            })
        );
        assert_eq!(
            args(&["--bless", "--toolchain", "stable"]),
            Ok(Options {
                bless: true,
                toolchain: Some(Toolchain::Stable)
            })
        );
        assert!(args(&["--toolchain"]).is_err());
        assert!(args(&["--frobnicate"]).is_err());
    }
}
