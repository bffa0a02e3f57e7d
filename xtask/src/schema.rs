//! The project's own records about the upstream schema files: `schema/manifest.toml` (which files,
//! pinned by sha256), `schema/corrections.toml` (fixes of the lossy upstream typing) and
//! `schema/overrides.toml` (how the generator maps the shapes it cannot read off the schema).
//!
//! The generator and the schema-validation tests both load schema files through [`load_corrected`],
//! so one table of corrections drives both.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A failure with a message for the person running the command.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// One pinned upstream schema file.
#[derive(Debug, Clone, Deserialize)]
pub struct SchemaFile {
    /// The protocol version (or `ext-tasks`).
    pub version: String,
    /// Path relative to the schema directory.
    pub file: String,
    /// The Rust module generated from it.
    pub module: String,
    /// The cargo feature that enables the module.
    pub feature: String,
    /// The upstream repository.
    pub repository: String,
    /// The file's path upstream.
    pub upstream_path: String,
    /// The upstream commit the file was copied from.
    pub commit: String,
    /// The file's sha256, hex.
    pub sha256: String,
    /// Another version whose identical definitions this one re-exports.
    #[serde(default)]
    pub base: Option<String>,
}

/// `schema/manifest.toml`.
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    /// The pinned files, oldest version first.
    pub schema: Vec<SchemaFile>,
}

/// One correction of the upstream typing.
#[derive(Debug, Clone, Deserialize)]
pub struct Correction {
    /// The version whose file it applies to.
    pub version: String,
    /// JSON pointer to the value it changes.
    pub pointer: String,
    /// Keys merged over the object at `pointer`.
    #[serde(default)]
    pub replace: toml::Table,
    /// Keys removed from the object at `pointer`.
    #[serde(default)]
    pub remove: Vec<String>,
    /// The `schema.ts` line that justifies it.
    pub ts: String,
    /// Why.
    pub why: String,
}

#[derive(Debug, Clone, Deserialize)]
struct Corrections {
    #[serde(default)]
    correction: Vec<Correction>,
}

/// A rule that picks a union member.
#[derive(Debug, Clone, Deserialize)]
pub struct UnionRule {
    /// The member (definition name) the rule picks.
    pub member: String,
    /// Paths whose string value must equal the given one.
    #[serde(default)]
    pub is: BTreeMap<String, String>,
    /// Paths that must be present.
    #[serde(default)]
    pub has: Vec<String>,
}

/// Explicit dispatch rules for unions the generator cannot separate itself.
#[derive(Debug, Clone, Deserialize)]
pub struct UnionOverride {
    /// The union definitions these rules apply to.
    pub names: Vec<String>,
    /// The rules, tried in order.
    pub rules: Vec<UnionRule>,
}

/// A method-dispatched union the schema does not declare.
#[derive(Debug, Clone, Deserialize)]
pub struct MethodUnion {
    /// The version it is added to.
    pub version: String,
    /// The enum's name.
    pub name: String,
    /// The request or notification definitions it dispatches to.
    pub members: Vec<String>,
}

/// `schema/overrides.toml`.
#[derive(Debug, Clone, Deserialize)]
pub struct Overrides {
    /// Definitions not generated.
    pub skip: Vec<String>,
    /// Explicit union rules.
    #[serde(default, rename = "union")]
    pub unions: Vec<UnionOverride>,
    /// Extra method unions.
    #[serde(default, rename = "method_union")]
    pub method_unions: Vec<MethodUnion>,
}

/// The repository root (the parent of `xtask/`).
pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}

/// The schema directory: `explicit`, else `MCP_SCHEMA_DIR`, else `../shared/mcp-schema`.
pub fn schema_dir(explicit: Option<PathBuf>) -> PathBuf {
    explicit
        .or_else(|| std::env::var_os("MCP_SCHEMA_DIR").map(PathBuf::from))
        .unwrap_or_else(|| project_root().join("../shared/mcp-schema"))
}

fn read_toml<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// Loads `schema/manifest.toml`.
pub fn manifest(root: &Path) -> Result<Manifest, Error> {
    read_toml(&root.join("schema/manifest.toml"))
}

/// Loads `schema/overrides.toml`.
pub fn overrides(root: &Path) -> Result<Overrides, Error> {
    read_toml(&root.join("schema/overrides.toml"))
}

/// Loads `schema/corrections.toml`.
pub fn corrections(root: &Path) -> Result<Vec<Correction>, Error> {
    Ok(read_toml::<Corrections>(&root.join("schema/corrections.toml"))?.correction)
}

/// Hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for byte in digest {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// Reads one pinned schema file, refusing it when its hash differs from the manifest.
pub fn load_verified(schema_dir: &Path, file: &SchemaFile) -> Result<Value, Error> {
    let path = schema_dir.join(&file.file);
    let bytes = std::fs::read(&path).map_err(|e| {
        format!(
            "cannot read the {} schema at {}: {e}\n(the schema files are read from ../shared/mcp-schema; \
             point --schema-dir or MCP_SCHEMA_DIR elsewhere if they live somewhere else)",
            file.version,
            path.display()
        )
    })?;
    let found = sha256_hex(&bytes);
    if found != file.sha256 {
        return Err(format!(
            "refusing {}: its sha256 is {found}, but schema/manifest.toml pins {} for {} (upstream \
             {} at {}).\nThe file is not the one the generated code and schema/corrections.toml were \
             reviewed against. If upstream changed, review the change, update the manifest's commit \
             and sha256, check the corrections, and run `cargo xtask codegen`.",
            path.display(),
            file.sha256,
            file.version,
            file.repository,
            file.commit
        )
        .into());
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// Applies the corrections for `version` to `schema`.
pub fn apply_corrections(
    schema: &mut Value,
    version: &str,
    corrections: &[Correction],
) -> Result<usize, Error> {
    let mut applied = 0;
    for c in corrections.iter().filter(|c| c.version == version) {
        let target = schema.pointer_mut(&c.pointer).ok_or_else(|| {
            format!(
                "schema/corrections.toml: {} has no value at {} (cited {}); the upstream file \
                 changed shape, so review this correction",
                c.version, c.pointer, c.ts
            )
        })?;
        let object = target.as_object_mut().ok_or_else(|| {
            format!(
                "schema/corrections.toml: {} {} is not an object",
                c.version, c.pointer
            )
        })?;
        for key in &c.remove {
            object.remove(key);
        }
        for (key, value) in &c.replace {
            let json = serde_json::to_value(value)?;
            object.insert(key.clone(), json);
        }
        applied += 1;
    }
    Ok(applied)
}

/// Reads, verifies and corrects the schema file of `version`.
pub fn load_corrected(root: &Path, schema_dir: &Path, version: &str) -> Result<Value, Error> {
    let manifest = manifest(root)?;
    let file = manifest
        .schema
        .iter()
        .find(|f| f.version == version)
        .ok_or_else(|| format!("schema/manifest.toml has no version {version}"))?;
    let mut schema = load_verified(schema_dir, file)?;
    apply_corrections(&mut schema, version, &corrections(root)?)?;
    Ok(schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrections_merge_over_the_target_and_keep_other_keys() {
        let mut schema = serde_json::json!({"$defs": {"A": {"properties": {"p": {
            "type": "integer", "description": "kept"}}}}});
        let c = Correction {
            version: "v".into(),
            pointer: "/$defs/A/properties/p".into(),
            replace: toml::from_str("type = \"number\"").unwrap(),
            remove: vec![],
            ts: "schema.ts:1".into(),
            why: "test".into(),
        };
        assert_eq!(
            apply_corrections(&mut schema, "v", std::slice::from_ref(&c)).unwrap(),
            1
        );
        assert_eq!(
            schema.pointer("/$defs/A/properties/p").unwrap(),
            &serde_json::json!({"type": "number", "description": "kept"})
        );
        let mut bad = c;
        bad.pointer = "/$defs/B".into();
        let err = apply_corrections(&mut schema, "v", &[bad]).unwrap_err();
        assert!(err.to_string().contains("no value at /$defs/B"), "{err}");
    }

    #[test]
    fn a_file_with_another_hash_is_refused_with_the_reason() {
        let dir = std::env::temp_dir().join(format!("xtask-hash-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("s.json"), b"{}").unwrap();
        let file = SchemaFile {
            version: "9999-01-01".into(),
            file: "s.json".into(),
            module: "m".into(),
            feature: "f".into(),
            repository: "r".into(),
            upstream_path: "p".into(),
            commit: "c".into(),
            sha256: "00".into(),
            base: None,
        };
        let err = load_verified(&dir, &file).unwrap_err().to_string();
        assert!(
            err.contains("refusing") && err.contains("9999-01-01"),
            "{err}"
        );
        assert!(err.contains(&sha256_hex(b"{}")), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
