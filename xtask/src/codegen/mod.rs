//! `cargo xtask codegen`: generates `crates/types/src/generated/` from the pinned schema files.
//!
//! One module per schema file. What each schema shape becomes:
//!
//! * an object: a struct, fields in the schema's (alphabetical) order; optional fields are
//!   `Option` and left out when absent; required-nullable fields serialize an explicit `null`;
//!   any-JSON fields keep a present `null`; open objects (results, capabilities, `_meta`, tool
//!   schemas, anything the schema marks `additionalProperties`) keep unknown members in `extra`;
//! * a `const`: a zero-sized marker type from `crate::consts` (or `IntConst<N>`), so a struct is a
//!   complete, standalone wire value and cannot carry the wrong tag;
//! * a string `enum`: a Rust enum;
//! * a union of requests or notifications: an enum dispatched on `method`, decoded from
//!   `(method, params)` with the params left unparsed until the method is known;
//! * any other union: an enum dispatched on a shared `const` tag, on key presence, or on the rules
//!   in `schema/overrides.toml`, never by trying members in turn;
//! * results: an enum per direction decoded by correlating with the request's method and then the
//!   value of `resultType` (the schema's own result unions cannot be told apart structurally).
//!
//! The modules, imports running one way (this file > `wire`, `model`, `methods` > `ir`, `names`):
//!
//! * `wire`: the wire types of one schema file (`wire/methods.rs`: unions dispatched on `method`
//!   and their result enums; `wire/unions.rs`: every other union);
//! * `model`: the version-neutral model and its conversions, from the `ir` of every version;
//! * `methods`: the table of the methods each side may send in each version, from the `ir`;
//! * `ir`: what `wire` tells `model` about each generated type;
//! * `names`: Rust names, string literals and doc comments.

mod ir;
mod methods;
mod model;
mod names;
mod wire;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::schema::{self, Error};

use names::PREAMBLE;
use wire::Consts;

/// Where the generated files go, relative to the root.
const OUT_DIR: &str = "crates/types/src/generated";

/// The result of one generation.
#[derive(Debug)]
pub struct Generated {
    /// File path (relative to the root) and content.
    pub files: Vec<(PathBuf, String)>,
    /// Generated types per version.
    pub counts: Vec<(String, usize)>,
}

/// Runs the generator: writes the files, or with `check` only compares them.
pub fn run(root: &Path, schema_dir: &Path, check: bool) -> Result<(), Error> {
    let generated = generate(root, schema_dir)?;
    let out_dir = root.join(OUT_DIR);
    let mut stale = Vec::new();
    for (path, content) in &generated.files {
        let full = root.join(path);
        let current = std::fs::read_to_string(&full).unwrap_or_default();
        if current != *content {
            stale.push(path.display().to_string());
            if !check {
                std::fs::create_dir_all(full.parent().expect("generated files have a parent"))?;
                std::fs::write(&full, content)?;
            }
        }
    }
    let expected: BTreeSet<PathBuf> = generated.files.iter().map(|(p, _)| root.join(p)).collect();
    if let Ok(entries) = std::fs::read_dir(&out_dir) {
        for entry in entries {
            let path = entry?.path();
            if !expected.contains(&path) {
                stale.push(format!("{} (not generated any more)", path.display()));
                if !check {
                    std::fs::remove_file(&path)?;
                }
            }
        }
    }
    for (version, count) in &generated.counts {
        eprintln!("codegen: {version}: {count} types");
    }
    if check && !stale.is_empty() {
        return Err(format!(
            "generated code is stale: {}\nrun `cargo xtask codegen` and commit the result",
            stale.join(", ")
        )
        .into());
    }
    if !check {
        eprintln!("codegen: {} file(s) updated in {OUT_DIR}", stale.len());
    }
    Ok(())
}

/// Generates every file in memory.
pub fn generate(root: &Path, schema_dir: &Path) -> Result<Generated, Error> {
    let manifest = schema::manifest(root)?;
    let overrides = schema::overrides(root)?;
    let corrections = schema::corrections(root)?;
    let mut consts = Consts::default();
    let mut files = Vec::new();
    let mut counts = Vec::new();
    let mut loaded: BTreeMap<String, Value> = BTreeMap::new();
    let mut mod_rs = String::new();
    let mut irs = Vec::new();
    for file in &manifest.schema {
        let mut schema = schema::load_verified(schema_dir, file)?;
        schema::apply_corrections(&mut schema, &file.version, &corrections)?;
        let base = match &file.base {
            Some(base) => {
                let base_schema = loaded
                    .get(base)
                    .ok_or_else(|| format!("{}: base {base} must come first", file.version))?;
                let base_file = manifest
                    .schema
                    .iter()
                    .find(|f| &f.version == base)
                    .ok_or_else(|| format!("{}: unknown base {base}", file.version))?;
                Some((base_file, base_schema))
            }
            None => None,
        };
        let (code, count, ir) = wire::generate_module(file, &schema, base, &overrides, &mut consts)
            .map_err(|e| format!("{}: {e}", file.version))?;
        files.push((
            PathBuf::from(OUT_DIR).join(format!("{}.rs", file.module)),
            format_rust(&code)?,
        ));
        counts.push((file.version.clone(), count));
        writeln!(
            mod_rs,
            "#[cfg(feature = \"{}\")]\n#[cfg_attr(docsrs, doc(cfg(feature = \"{}\")))]\npub mod {};",
            file.feature, file.feature, file.module
        )?;
        loaded.insert(file.version.clone(), schema);
        irs.push(ir);
    }
    let (model_files, model_mods) = model::generate(&irs)?;
    for (path, code) in model_files {
        files.push((PathBuf::from(OUT_DIR).join(path), format_rust(&code)?));
    }
    mod_rs.push_str(&model_mods);
    files.push((
        PathBuf::from(OUT_DIR).join("methods.rs"),
        format_rust(&methods::generate(&irs)?)?,
    ));
    files.push((
        PathBuf::from(OUT_DIR).join("consts.rs"),
        format_rust(&consts.render())?,
    ));
    let mod_rs = format!(
        "{PREAMBLE}\n//! The generated wire types, one module per protocol version.\n\n\
         #[allow(missing_docs)]\npub mod consts;\npub mod methods;\n{mod_rs}"
    );
    files.push((PathBuf::from(OUT_DIR).join("mod.rs"), format_rust(&mod_rs)?));
    files.sort();
    Ok(Generated { files, counts })
}

/// Formats with rustfmt, the same tool `cargo fmt --check` uses on the committed files.
fn format_rust(code: &str) -> Result<String, Error> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run rustfmt: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let input = code.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output()?;
    writer.join().expect("writer thread")?;
    if !output.status.success() {
        let dump = std::env::temp_dir().join("xtask-codegen-unformatted.rs");
        std::fs::write(&dump, code)?;
        return Err(format!(
            "rustfmt rejected the generated code (saved to {}): {}",
            dump.display(),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(String::from_utf8(output.stdout)?.replace("\r\n", "\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_code_is_fresh() {
        let root = schema::project_root();
        run(&root, &schema::schema_dir(None), true).unwrap();
    }
}
