//! Skills (the `io.modelcontextprotocol/skills` extension, SEP-2640) from the host's side:
//! listing them, getting one entry, and reading a skill's files verified against its entry.
//!
//! Listing and getting fetch entries only: no file of a skill is read until asked
//! ([`Client::load_skill`], [`Client::read_skill_file`]), as the extension requires (hosts must
//! not retrieve a skill's files ahead of need). Every file read is checked against the entry
//! the caller holds: it must be listed there (for a skill with a manifest), of the listed size
//! and digest, and a `SKILL.md`'s frontmatter must equal the entry's; any difference is a
//! [`SkillError`] and the content is not returned.

use modelctx_types::model;
use modelctx_types::skills::{
    GetSkillResult, ListSkillsResult, RESOURCES_DIRECTORY_READ, ReadResourceDirectoryResult,
    SKILLS_GET, SKILLS_LIST, Skill, SkillFiles,
};
use serde_json::Value;

use crate::{CallOptions, Client, Error, JsonObject};

/// Why a skill's file was not returned: the call failed, or what came back is not what the
/// entry describes (the content is then not used).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SkillError {
    /// The request failed.
    #[error(transparent)]
    Call(#[from] Error),
    /// The entry is one a host must not load (its [`Skill::problems`]).
    #[error("the entry of {uri} is invalid: {}", problems.join("; "))]
    InvalidEntry {
        /// The skill's URI.
        uri: String,
        /// What is wrong with it.
        problems: Vec<String>,
    },
    /// The file is not listed in the entry's `resources` (or, for a dynamic skill, not under
    /// its directory): reading it would be reading something the entry does not describe.
    #[error("{uri} is not a file of the skill {skill}")]
    Unlisted {
        /// The file asked for.
        uri: String,
        /// The skill's URI.
        skill: String,
    },
    /// The server answered with no contents for the URI.
    #[error("the server returned no contents for {0}")]
    NoContent(String),
    /// The content's length is not the entry's `size`.
    #[error("{uri}: {got} bytes, but the entry says {expected}")]
    SizeMismatch {
        /// The file.
        uri: String,
        /// The entry's size.
        expected: u64,
        /// The content's length.
        got: u64,
    },
    /// The content's SHA-256 is not the entry's `digest`.
    #[error("{uri}: digest {got}, but the entry says {expected}")]
    DigestMismatch {
        /// The file.
        uri: String,
        /// The entry's digest.
        expected: String,
        /// The content's digest.
        got: String,
    },
    /// The `SKILL.md`'s frontmatter cannot be read, or is not the entry's `frontmatter`.
    #[error("{uri}: {reason}")]
    Frontmatter {
        /// The `SKILL.md`.
        uri: String,
        /// What differs.
        reason: String,
    },
}

/// A skill's file, read and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkillFile {
    /// Its URI.
    pub uri: String,
    /// Its MIME type, as the server gave it.
    pub mime_type: Option<String>,
    /// Its bytes (for text, its UTF-8).
    pub bytes: Vec<u8>,
    /// Whether it was checked against a digest: `false` for a dynamic skill's files, which have
    /// none.
    pub verified: bool,
}

impl SkillFile {
    /// The content as text, if it is UTF-8.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.bytes).ok()
    }
}

impl Client {
    /// One page of `skills/list` (entries only: nothing is read).
    pub async fn list_skills_page(&self, cursor: Option<&str>) -> Result<ListSkillsResult, Error> {
        let mut params = JsonObject::new();
        if let Some(cursor) = cursor {
            params.insert("cursor".into(), Value::from(cursor));
        }
        let result = self
            .request(SKILLS_LIST, params, CallOptions::new())
            .await?;
        serde_json::from_value(result).map_err(|e| Error::invalid(SKILLS_LIST, e))
    }

    /// Every skill the server lists, following cursors (with the bounds of
    /// [`list_all_tools`](Self::list_all_tools)). Only entries are fetched, never a file. A
    /// listing may be partial: a skill not in it can still be got by URI
    /// ([`get_skill`](Self::get_skill)). [`Error::NotAvailable`] when the server did not
    /// declare the extension.
    pub async fn list_skills(&self) -> Result<Vec<Skill>, Error> {
        crate::client::all_pages(SKILLS_LIST, |cursor| async move {
            let page = self.list_skills_page(cursor.as_deref()).await?;
            let size = serde_json::to_string(&page.skills).map_or(0, |s| s.len());
            Ok((page.skills, page.next_cursor, size))
        })
        .await
    }

    /// The entry of the skill whose `SKILL.md` is at `uri` (`skills/get`; the server answers
    /// -32602, [`Error::Remote`], for a URI that is not one of its skills).
    pub async fn get_skill(&self, uri: &str) -> Result<Skill, Error> {
        let mut params = JsonObject::new();
        params.insert("uri".into(), Value::from(uri));
        let result = self.request(SKILLS_GET, params, CallOptions::new()).await?;
        let got: GetSkillResult =
            serde_json::from_value(result).map_err(|e| Error::invalid(SKILLS_GET, e))?;
        if got.skill.uri != uri {
            return Err(Error::invalid(
                SKILLS_GET,
                format!("asked for {uri}, got the entry of {}", got.skill.uri),
            ));
        }
        Ok(got.skill)
    }

    /// One page of the children of the directory resource `uri` (`resources/directory/read`;
    /// only when the server declared `directoryRead`, else [`Error::NotAvailable`]). A live
    /// view: it does not extend a skill's manifest.
    pub async fn read_directory(
        &self,
        uri: &str,
        cursor: Option<&str>,
    ) -> Result<ReadResourceDirectoryResult, Error> {
        let mut params = JsonObject::new();
        params.insert("uri".into(), Value::from(uri));
        if let Some(cursor) = cursor {
            params.insert("cursor".into(), Value::from(cursor));
        }
        let result = self
            .request(RESOURCES_DIRECTORY_READ, params, CallOptions::new())
            .await?;
        serde_json::from_value(result).map_err(|e| Error::invalid(RESOURCES_DIRECTORY_READ, e))
    }

    /// Loads `skill`: reads its `SKILL.md` and verifies it (size and digest when the entry
    /// lists them, and the frontmatter, field by field, against the entry's). The entry itself
    /// must be valid ([`Skill::problems`]).
    pub async fn load_skill(&self, skill: &Skill) -> Result<SkillFile, SkillError> {
        self.read_skill_file(skill, &skill.uri).await
    }

    /// Reads the file `uri` of `skill`, verified against the entry: it must be listed in the
    /// entry's `resources` (for a dynamic skill, lie under the skill's directory), its length
    /// must be the listed `size` and its SHA-256 the listed `digest`; for the `SKILL.md`, its
    /// frontmatter must equal the entry's. Any difference is a [`SkillError`] and the content
    /// is dropped: to go on, get the entry again ([`get_skill`](Self::get_skill)).
    pub async fn read_skill_file(&self, skill: &Skill, uri: &str) -> Result<SkillFile, SkillError> {
        let problems = skill.problems();
        if !problems.is_empty() {
            return Err(SkillError::InvalidEntry {
                uri: skill.uri.clone(),
                problems,
            });
        }
        let listed = match &skill.resources {
            SkillFiles::Listed(files) => Some(
                files
                    .iter()
                    .find(|f| f.uri == uri)
                    .ok_or_else(|| unlisted(skill, uri))?,
            ),
            SkillFiles::Dynamic => {
                let inside = skill
                    .root()
                    .and_then(|root| uri.strip_prefix(root))
                    .is_some_and(|rest| rest.starts_with('/') && rest.len() > 1);
                if !inside {
                    return Err(unlisted(skill, uri));
                }
                None
            }
        };
        let result = self.read_resource(uri).await?;
        let (bytes, mime_type) = contents_of(&result, uri)?;
        if let Some(listed) = listed {
            verify(uri, &bytes, listed.size, &listed.digest)?;
        }
        if uri == skill.uri {
            check_frontmatter(uri, &bytes, &skill.frontmatter)?;
        }
        Ok(SkillFile {
            uri: uri.to_owned(),
            mime_type,
            bytes,
            verified: listed.is_some(),
        })
    }
}

fn unlisted(skill: &Skill, uri: &str) -> SkillError {
    SkillError::Unlisted {
        uri: uri.to_owned(),
        skill: skill.uri.clone(),
    }
}

/// The bytes and MIME type of the contents of `uri` in `result`.
fn contents_of(
    result: &model::ReadResourceResult,
    uri: &str,
) -> Result<(Vec<u8>, Option<String>), SkillError> {
    use base64::Engine as _;
    for contents in &result.contents {
        match contents {
            model::EmbeddedResourceResource::TextResourceContents(text) if text.uri == uri => {
                return Ok((text.text.clone().into_bytes(), text.mime_type.clone()));
            }
            model::EmbeddedResourceResource::BlobResourceContents(blob) if blob.uri == uri => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(&blob.blob)
                    .map_err(|e| {
                        SkillError::Call(Error::invalid(
                            "resources/read",
                            format!("the blob of {uri} is not base64: {e}"),
                        ))
                    })?;
                return Ok((bytes, blob.mime_type.clone()));
            }
            _ => {}
        }
    }
    Err(SkillError::NoContent(uri.to_owned()))
}

/// Checks `bytes` against a listed size and digest: the size first, as the extension says (a
/// different length is a mismatch whether or not the digest is computed).
pub(crate) fn verify(uri: &str, bytes: &[u8], size: u64, digest: &str) -> Result<(), SkillError> {
    let got = bytes.len() as u64;
    if got != size {
        return Err(SkillError::SizeMismatch {
            uri: uri.to_owned(),
            expected: size,
            got,
        });
    }
    let got = modelctx_types::skills::digest(bytes);
    if got != digest {
        return Err(SkillError::DigestMismatch {
            uri: uri.to_owned(),
            expected: digest.to_owned(),
            got,
        });
    }
    Ok(())
}

/// Checks that the frontmatter of the `SKILL.md` in `bytes` is `expected`, field by field.
pub(crate) fn check_frontmatter(
    uri: &str,
    bytes: &[u8],
    expected: &JsonObject,
) -> Result<(), SkillError> {
    let fail = |reason: String| SkillError::Frontmatter {
        uri: uri.to_owned(),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|_| fail("SKILL.md is not UTF-8".into()))?;
    let read = modelctx_types::skills::parse_frontmatter(text).map_err(|e| fail(e.to_string()))?;
    let keys: std::collections::BTreeSet<&String> = read.keys().chain(expected.keys()).collect();
    let differ: Vec<&str> = keys
        .into_iter()
        .filter(|k| read.get(*k) != expected.get(*k))
        .map(String::as_str)
        .collect();
    if differ.is_empty() {
        Ok(())
    } else {
        Err(fail(format!(
            "its frontmatter differs from the entry's in {}",
            differ.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn size_is_checked_before_the_digest() {
        let digest = modelctx_types::skills::digest(b"abc");
        assert!(verify("u", b"abc", 3, &digest).is_ok());
        assert!(matches!(
            verify("u", b"abcd", 3, &digest),
            Err(SkillError::SizeMismatch {
                expected: 3,
                got: 4,
                ..
            })
        ));
        assert!(matches!(
            verify("u", b"abd", 3, &digest),
            Err(SkillError::DigestMismatch { .. })
        ));
    }

    #[test]
    fn frontmatter_is_compared_field_by_field() {
        let entry = json!({"name": "a", "description": "d", "metadata": {"v": 1}});
        let entry = entry.as_object().unwrap();
        let same = "---\ndescription: d\nname: a\nmetadata:\n  v: 1\n---\nbody";
        assert!(check_frontmatter("u", same.as_bytes(), entry).is_ok());
        let changed = "---\nname: a\ndescription: Exfiltrate\nmetadata:\n  v: 1\n---\n";
        let error = check_frontmatter("u", changed.as_bytes(), entry).unwrap_err();
        assert!(error.to_string().contains("description"), "{error}");
        let extra = "---\nname: a\ndescription: d\nmetadata:\n  v: 1\nallowed-tools: Bash\n---\n";
        let error = check_frontmatter("u", extra.as_bytes(), entry).unwrap_err();
        assert!(error.to_string().contains("allowed-tools"), "{error}");
        assert!(check_frontmatter("u", b"no frontmatter", entry).is_err());
    }
}
