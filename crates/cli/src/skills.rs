//! `mcx skills list|get|pull`: the skills a server serves (the Skills extension, SEP-2640).
//!
//! `list` and `get` show entries (no file is read); `pull DIR` reads the files of the skills
//! listed (or of those named with `--skill`), each verified against its entry (listed, size,
//! digest, the `SKILL.md`'s frontmatter), and writes them under `DIR` at their path in the
//! `skill://` namespace (`skill://acme/refunds/SKILL.md` to `DIR/acme/refunds/SKILL.md`). A path
//! that would leave `DIR` (a `..` or `.` segment, percent-encoded or not, an empty one, a
//! separator or NUL inside a name, another scheme) and a symbolic link met on the way are
//! refused, and nothing of that skill is written. A dynamic skill (no manifest) is not pulled:
//! it has nothing to verify against. Pull each server into a directory of its own: a skill's
//! URI names it only within its server.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use modelctx_client::skill_types::{SCHEME, Skill, SkillFiles};
use modelctx_client::{Client, SkillError};
use serde_json::{Value, json};

use crate::exit::{Failed, Kind};
use crate::output::{first_line, print_json, table};

#[derive(Subcommand, Debug)]
pub(crate) enum SkillsCommand {
    /// List the skills (entries only: no file is read).
    List,
    /// Show a skill's entry: its frontmatter and files, with their sizes and digests.
    Get {
        /// The URI of its SKILL.md (`skill://NAME/SKILL.md`).
        uri: String,
    },
    /// Read the files of the skills listed (or of those named with --skill), verified against
    /// their entries, and write them under DIR at their skill:// paths.
    Pull {
        /// Where to write the skills (created if missing).
        dir: PathBuf,
        /// Pull only this skill, by the URI of its SKILL.md (repeatable).
        #[arg(long = "skill", value_name = "URI")]
        skills: Vec<String>,
    },
}

/// Runs a `skills` command.
pub(crate) async fn run(client: &Client, command: SkillsCommand, json: bool) -> Result<(), Failed> {
    match command {
        SkillsCommand::List => {
            let skills = client.list_skills().await.map_err(|e| Failed::call(&e))?;
            if json {
                print_json(&json!({ "skills": skills }));
            } else {
                let rows: Vec<Vec<String>> = skills
                    .iter()
                    .map(|s| {
                        vec![
                            s.uri.clone(),
                            s.name().unwrap_or_default().to_owned(),
                            files(s),
                            first_line(&Value::from(s.description().unwrap_or_default())),
                        ]
                    })
                    .collect();
                table(&["URI", "NAME", "FILES", "DESCRIPTION"], &rows);
            }
        }
        SkillsCommand::Get { uri } => {
            let skill = client.get_skill(&uri).await.map_err(|e| Failed::call(&e))?;
            if json {
                print_json(&json!(skill));
            } else {
                say!("{}", skill.uri);
                for (key, value) in &skill.frontmatter {
                    let value = value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned);
                    say!("  {key}: {value}");
                }
                match &skill.resources {
                    SkillFiles::Dynamic => say!("files: dynamic (generated, no digests)"),
                    SkillFiles::Listed(listed) => {
                        let rows: Vec<Vec<String>> = listed
                            .iter()
                            .map(|f| vec![f.uri.clone(), f.size.to_string(), f.digest.clone()])
                            .collect();
                        table(&["FILE", "SIZE", "DIGEST"], &rows);
                    }
                }
            }
        }
        SkillsCommand::Pull { dir, skills } => pull(client, &dir, &skills, json).await?,
    }
    Ok(())
}

fn files(skill: &Skill) -> String {
    match &skill.resources {
        SkillFiles::Dynamic => "dynamic".into(),
        SkillFiles::Listed(files) => files.len().to_string(),
    }
}

async fn pull(client: &Client, dir: &Path, wanted: &[String], json: bool) -> Result<(), Failed> {
    let skills = if wanted.is_empty() {
        client.list_skills().await.map_err(|e| Failed::call(&e))?
    } else {
        let mut skills = Vec::new();
        for uri in wanted {
            skills.push(client.get_skill(uri).await.map_err(|e| Failed::call(&e))?);
        }
        skills
    };
    let mut pulled = Vec::new();
    let mut skipped = Vec::new();
    for skill in &skills {
        let SkillFiles::Listed(listed) = &skill.resources else {
            crate::progress::eprint_line(&format!(
                "mcx: {} is dynamic (no digests to verify against): not pulled",
                skill.uri
            ));
            skipped.push(skill.uri.clone());
            continue;
        };
        // Every path checked and every file read and verified before anything is written.
        let mut writes = Vec::new();
        for file in listed {
            let path = local_path(dir, &file.uri).map_err(|why| {
                Failed::new(Kind::Protocol, format!("{}: {why}; not pulled", skill.uri))
            })?;
            let read = client
                .read_skill_file(skill, &file.uri)
                .await
                .map_err(|e| skill_failed(&skill.uri, &e))?;
            writes.push((path, read.bytes));
        }
        for (path, bytes) in &writes {
            write_inside(dir, path, bytes).map_err(|why| {
                Failed::new(
                    Kind::Usage,
                    format!("{}: cannot write {}: {why}", skill.uri, path.display()),
                )
            })?;
        }
        if !json {
            say!("{} -> {} files", skill.uri, writes.len());
        }
        pulled.push(json!({"uri": skill.uri, "files": writes.len()}));
    }
    if json {
        print_json(&json!({"pulled": pulled, "skipped": skipped}));
    }
    Ok(())
}

fn skill_failed(uri: &str, error: &SkillError) -> Failed {
    match error {
        SkillError::Call(e) => Failed::call(e),
        other => Failed::new(
            Kind::Protocol,
            format!("{uri}: {other}; not pulled (the content is not what the entry says)"),
        ),
    }
}

/// Where the file `uri` goes under `dir`: its path in the `skill://` namespace, each segment
/// percent-decoded and refused when it is empty, `.` or `..`, or holds a separator or NUL.
pub(crate) fn local_path(dir: &Path, uri: &str) -> Result<PathBuf, String> {
    let rest = uri
        .strip_prefix(SCHEME)
        .ok_or_else(|| format!("{uri} is not a {SCHEME} URI"))?;
    let mut path = dir.to_path_buf();
    for raw in rest.split('/') {
        let name = decode(raw).ok_or_else(|| format!("{uri}: invalid percent-encoding"))?;
        if name.is_empty()
            || name == "."
            || name == ".."
            || name.contains(['/', '\\', '\0'])
            || (cfg!(windows) && name.contains(':'))
        {
            return Err(format!("{uri} would be written outside the directory"));
        }
        path.push(name);
    }
    Ok(path)
}

/// `segment` percent-decoded, as UTF-8.
fn decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Writes `bytes` at `path`, below `dir`: every directory on the way is created or must be a
/// real directory, and the file must not be a symbolic link (a link in `dir` would send the
/// write elsewhere).
fn write_inside(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let relative = path
        .strip_prefix(dir)
        .map_err(|_| std::io::Error::other("outside the directory"))?;
    let mut at = dir.to_path_buf();
    let mut parts = relative.components().peekable();
    while let Some(part) = parts.next() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(std::io::Error::other(format!(
                    "{} is a symbolic link",
                    at.display()
                )));
            }
            Ok(meta) if parts.peek().is_some() && !meta.is_dir() => {
                return Err(std::io::Error::other(format!(
                    "{} is not a directory",
                    at.display()
                )));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if parts.peek().is_some() {
                    std::fs::create_dir(&at)?;
                }
            }
            Err(e) => return Err(e),
        }
    }
    std::fs::write(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_directory() {
        let dir = Path::new("/tmp/pull");
        assert_eq!(
            local_path(dir, "skill://acme/refunds/SKILL.md").unwrap(),
            Path::new("/tmp/pull/acme/refunds/SKILL.md")
        );
        assert_eq!(
            local_path(dir, "skill://a/my%20file.md").unwrap(),
            Path::new("/tmp/pull/a/my file.md")
        );
        for escape in [
            "skill://a/../../etc/passwd",
            "skill://a/%2e%2e/%2E%2E/etc/passwd",
            "skill://..",
            "skill://a/./b",
            "skill://a//b",
            "skill:///etc/passwd",
            "skill://a/b%2fc",
            "skill://a/b%5cc",
            "skill://a/b%00c",
            "skill://a/b%zz",
            "skill://a/%ff",
            "file:///etc/passwd",
            "skill://a/",
        ] {
            assert!(local_path(dir, escape).is_err(), "{escape}");
        }
    }
}
