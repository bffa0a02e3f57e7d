//! Shared helpers for the integration tests of the modelctx workspace: where the fixtures are,
//! and a by-name way to reach the generated types of every version.

pub mod client;
pub mod conformance_server;
pub mod conformance_tasks;
pub mod facade;
pub mod fleet;
pub mod http;
pub mod http_client;
pub mod node;
pub mod oidc;
pub mod python;
pub mod traces;

use std::path::PathBuf;

use serde_json::Value;

/// The protocol versions that have example payloads: the official 2026-07-28 examples and the
/// spec-page fixtures of the older versions.
pub const VERSIONS: &[&str] = &[
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

/// The folder of example payloads of `version`, one subfolder per type name.
pub fn fixture_dir(version: &str) -> PathBuf {
    if version == "2026-07-28" {
        xtask::schema::schema_dir(None).join("2026-07-28/examples")
    } else {
        xtask::schema::project_root()
            .join("tests/fixtures")
            .join(version)
    }
}

/// One example payload.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// The type its folder names.
    pub type_name: String,
    /// Its file name.
    pub file: String,
    /// Where it is, for tests that read the raw bytes.
    pub path: PathBuf,
    /// The payload.
    pub value: Value,
}

impl Fixture {
    /// `Type/file.json`, for messages.
    pub fn label(&self) -> String {
        format!("{}/{}", self.type_name, self.file)
    }
}

/// Every example payload of `version`, sorted by type name and file name.
///
/// # Panics
///
/// When the folder or a file cannot be read or is not JSON: the fixtures are part of the tests.
pub fn fixtures(version: &str) -> Vec<Fixture> {
    let dir = fixture_dir(version);
    let mut out = Vec::new();
    let folders = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for folder in folders {
        let folder = folder.unwrap().path();
        let type_name = folder.file_name().unwrap().to_string_lossy().into_owned();
        for file in std::fs::read_dir(&folder).unwrap() {
            let path = file.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            out.push(Fixture {
                type_name: type_name.clone(),
                file,
                path,
                value,
            });
        }
    }
    out.sort_by(|a, b| (&a.type_name, &a.file).cmp(&(&b.type_name, &b.file)));
    out
}

/// A version module's `__roundtrip`: decode a value as the named type and encode it again.
pub type RoundTrip = fn(&str, Value) -> Option<Result<Value, serde_json::Error>>;

/// The `__roundtrip` and the type names of `version` (a protocol version or `ext-tasks`).
///
/// # Panics
///
/// For any other version string.
pub fn registry(version: &str) -> (RoundTrip, &'static [&'static str]) {
    use modelctx_types::{
        ext_tasks, v2024_11_05, v2025_03_26, v2025_06_18, v2025_11_25, v2026_07_28,
    };
    match version {
        "2024-11-05" => (v2024_11_05::__roundtrip, v2024_11_05::__TYPE_NAMES),
        "2025-03-26" => (v2025_03_26::__roundtrip, v2025_03_26::__TYPE_NAMES),
        "2025-06-18" => (v2025_06_18::__roundtrip, v2025_06_18::__TYPE_NAMES),
        "2025-11-25" => (v2025_11_25::__roundtrip, v2025_11_25::__TYPE_NAMES),
        "2026-07-28" => (v2026_07_28::__roundtrip, v2026_07_28::__TYPE_NAMES),
        "ext-tasks" => (ext_tasks::__roundtrip, ext_tasks::__TYPE_NAMES),
        other => panic!("unknown version {other}"),
    }
}

/// Decodes `value` as the type `name` of `version` and encodes it again; `None` when the version
/// has no such type.
pub fn roundtrip(
    version: &str,
    name: &str,
    value: Value,
) -> Option<Result<Value, serde_json::Error>> {
    registry(version).0(name, value)
}

/// The examples in the project's README.md, compiled and run as doctests so they stay true (the
/// server, `no_run` here, is run by `tests/it/readme.rs` as `src/bin/readme-server.rs`). The
/// README and the guides are doctests of this crate, which has both facades, so that neither
/// facade dev-depends on the other.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The code of `docs/guide-server.md`, compiled and run as doctests here: it tests a server
/// with the client.
#[doc = include_str!("../../docs/guide-server.md")]
#[cfg(doctest)]
pub struct ServerGuideDoctests;

/// The code of `docs/guide-client.md`, compiled and run as doctests here, where both the client
/// and the servers it talks to are at hand.
#[doc = include_str!("../../docs/guide-client.md")]
#[cfg(doctest)]
pub struct ClientGuideDoctests;

/// The code of `docs/guide-host.md`, compiled and run as doctests here, where the host has its
/// `gateway` feature.
#[doc = include_str!("../../docs/guide-host.md")]
#[cfg(doctest)]
pub struct HostGuideDoctests;

/// The code of `docs/guide-auth.md`, compiled and run as doctests here, where the server has its
/// `auth` feature (`modelctx_server::auth`, the crate modelctx-auth).
#[doc = include_str!("../../docs/guide-auth.md")]
#[cfg(doctest)]
pub struct AuthGuideDoctests;

#[cfg(test)]
mod tests {
    /// The README's server and `src/bin/readme-server.rs` (which `tests/it/readme.rs` runs) are
    /// the same code: the file is the README's block under a `//!` header.
    #[test]
    fn readme_server_is_the_readmes_block() {
        let readme = include_str!("../../README.md");
        let section = readme
            .split_once("## A first server")
            .expect("the README has the section")
            .1;
        let block = section
            .split_once("```rust,no_run\n")
            .and_then(|(_, rest)| rest.split_once("```\n"))
            .expect("the section has a rust,no_run block")
            .0;
        let file = include_str!("bin/readme-server.rs");
        let header_end = file
            .lines()
            .take_while(|line| line.starts_with("//!"))
            .map(|line| line.len() + 1)
            .sum::<usize>();
        let code = file[header_end..]
            .strip_prefix('\n')
            .expect("a blank line after the header");
        assert!(
            !block
                .lines()
                .any(|line| line.trim_start().starts_with("# ")),
            "the README's block has no hidden lines:\n{block}"
        );
        assert_eq!(
            code, block,
            "src/bin/readme-server.rs (below its header) differs from the README's block"
        );
    }
}
