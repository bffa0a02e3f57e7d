//! The check that modelctx-http reads no MCP method names outside its `headers/` module: which
//! message opens a session, which batch may come, which request was cancelled are the session's
//! rules (`docs/ARCHITECTURE.md`, "Who owns which rule"), asked through modelctx-types, never
//! matched by name in the transport. Test modules are not checked (they write messages): those
//! at the end of a file after `#[cfg(test)]`, and files declared as `#[cfg(test)] mod name;`.

use std::path::Path;

/// What betrays a method name matched in code: the generated method constants, a comparison of
/// a message's `method`, or a quoted name of the protocol.
const PATTERNS: &[&str] = &[
    "consts::",
    ".method ==",
    ".method()",
    "\"initialize\"",
    "\"ping\"",
    "\"notifications/",
    "\"tools/",
    "\"resources/",
    "\"prompts/",
    "\"completion/",
    "\"logging/",
    "\"sampling/",
    "\"elicitation/",
    "\"roots/",
    "\"tasks/",
    "\"server/",
    "\"subscriptions/",
];

/// Checks `crates/http/src` under `root`.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    let src = root.join("crates/http/src");
    let mut files = Vec::new();
    collect(&src, &mut files)?;
    if files.is_empty() {
        return Err(format!(
            "no Rust file under {}: nothing was checked",
            src.display()
        ));
    }
    let mut texts = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        texts.push((file, text));
    }
    let test_files: Vec<std::path::PathBuf> = texts
        .iter()
        .flat_map(|(file, text)| test_module_files(file, text))
        .collect();
    let mut found = Vec::new();
    for (file, text) in &texts {
        let relative = file.strip_prefix(&src).unwrap_or(file);
        if relative.starts_with("headers") || test_files.contains(file) {
            continue;
        }
        for (line, pattern) in matches(text) {
            found.push(format!(
                "crates/http/src/{}:{line}: `{pattern}`",
                relative.display()
            ));
        }
    }
    if found.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "modelctx-http must match no method name outside headers/ (ask the rule functions of \
             modelctx-types, or let the layer above say it with SendOptions):\n{}",
            found.join("\n")
        ))
    }
}

/// The files of the modules `file` declares as `#[cfg(test)] mod name;` (`name.rs` or
/// `name/mod.rs` beside `file` when it is a `mod.rs` or `lib.rs`, else in its own folder).
fn test_module_files(file: &Path, text: &str) -> Vec<std::path::PathBuf> {
    let Some(parent) = file.parent() else {
        return Vec::new();
    };
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let dir = if matches!(stem, "mod" | "lib" | "main") {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    };
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut files = Vec::new();
    for pair in lines.windows(2) {
        if pair[0] != "#[cfg(test)]" {
            continue;
        }
        let declared = pair[1]
            .strip_prefix("mod ")
            .or_else(|| pair[1].strip_prefix("pub(crate) mod "))
            .and_then(|rest| rest.strip_suffix(';'));
        if let Some(name) = declared {
            files.push(dir.join(format!("{name}.rs")));
            files.push(dir.join(name).join("mod.rs"));
        }
    }
    files
}

fn collect(dir: &Path, files: &mut Vec<std::path::PathBuf>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            collect(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// The (1-based) lines of `text` outside comments and test modules that hold a pattern, with
/// the first pattern each holds. A test module starts at `#[cfg(test)]` followed by a `mod`
/// line and runs to the end of the file (where this code base keeps them).
fn matches(text: &str) -> Vec<(usize, &'static str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed == "#[cfg(test)]"
            && lines
                .get(index + 1)
                .is_some_and(|next| next.split_whitespace().any(|w| w == "mod"))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        let code = trimmed.split(" //").next().unwrap_or(trimmed);
        if let Some(pattern) = PATTERNS.iter().find(|p| code.contains(*p)) {
            found.push((index + 1, *pattern));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::matches;

    #[test]
    fn method_names_in_code_are_found_and_comments_and_tests_are_not() {
        let text = "\
//! `initialize` opens a session (a comment)
fn route(m: &Message) -> bool {
    m.method == \"x\" // a comparison
}
const NAME: &str = \"tools/call\";
use modelctx_types::consts::Initialize;
/// \"ping\" in a doc comment
fn fine(parts: &Parts) -> bool { parts.headers.is_empty() }
#[cfg(test)]
mod tests {
    const T: &str = \"notifications/cancelled\";
}
";
        let found = matches(text);
        assert_eq!(
            found,
            vec![(3, ".method =="), (5, "\"tools/"), (6, "consts::")]
        );
    }

    #[test]
    fn files_declared_as_test_modules_are_found() {
        let text = "mod auth;\n#[cfg(test)]\nmod auth_tests;\nmod config;\n";
        let mod_rs = Path::new("/s/client/mod.rs");
        assert_eq!(
            super::test_module_files(mod_rs, text),
            vec![
                Path::new("/s/client/auth_tests.rs").to_path_buf(),
                Path::new("/s/client/auth_tests/mod.rs").to_path_buf()
            ]
        );
        let file_rs = Path::new("/s/event_store.rs");
        assert_eq!(
            super::test_module_files(file_rs, "#[cfg(test)]\nmod tests;\n")[0],
            Path::new("/s/event_store/tests.rs")
        );
        assert!(super::test_module_files(mod_rs, "mod auth_tests;\n").is_empty());
    }

    /// The workspace as it is passes (the check would fail CI otherwise, but this says so in
    /// the xtask's own tests too).
    #[test]
    fn modelctx_http_matches_no_method_name_today() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        super::check(&root).unwrap();
    }
}
