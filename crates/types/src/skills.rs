//! The Skills extension (`io.modelcontextprotocol/skills`, SEP-2640): its names, its wire shapes
//! (written by hand: no official JSON schema of the extension is published), and, with the
//! feature `skills`, the two rules both sides apply to skill content: the `sha256:` digest of a
//! file and the YAML frontmatter of a `SKILL.md`.
//!
//! A server publishes Agent Skills (a directory with a `SKILL.md` and its files) as resources,
//! lists them with `skills/list`, describes one with `skills/get` and may list a directory's
//! children with `resources/directory/read` (when it declares `directoryRead`). Each [`Skill`]
//! entry carries the skill's frontmatter verbatim and a complete manifest of its files
//! ([`SkillResource`]: URI, digest, size), or [`SkillFiles::Dynamic`] when its content is
//! generated.

use serde::de::{self, Deserializer};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::JsonObject;

/// The extension's identifier, the key of its settings in `capabilities.extensions`.
pub const EXTENSION_ID: &str = "io.modelcontextprotocol/skills";
/// The extension's setting that says the server implements `resources/directory/read`.
pub const DIRECTORY_READ: &str = "directoryRead";
/// The request that lists the skills a server serves (paginated).
pub const SKILLS_LIST: &str = "skills/list";
/// The request that returns the entry of one skill, named by the URI of its `SKILL.md`.
pub const SKILLS_GET: &str = "skills/get";
/// The request that lists the direct children of a directory resource (paginated).
pub const RESOURCES_DIRECTORY_READ: &str = "resources/directory/read";
/// The MIME type of a directory resource.
pub const DIRECTORY_MIME_TYPE: &str = "inode/directory";
/// The MIME type a `SKILL.md` resource should have.
pub const SKILL_MIME_TYPE: &str = "text/markdown";
/// The file every skill has at its root.
pub const SKILL_FILE: &str = "SKILL.md";
/// The URI scheme skills are served under.
pub const SCHEME: &str = "skill://";
/// The number of files (`SKILL.md` included) every host must accept in one skill.
pub const MAX_FILES_PER_SKILL: usize = 512;
/// The total size in bytes of the files of one skill every host must accept (16 MiB).
pub const MAX_BYTES_PER_SKILL: u64 = 16 * 1024 * 1024;

/// Whether `method` is one of the extension's requests.
pub fn is_extension_method(method: &str) -> bool {
    [SKILLS_LIST, SKILLS_GET, RESOURCES_DIRECTORY_READ].contains(&method)
}

/// A file of a skill: its resource URI, and the digest and size of its raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SkillResource {
    /// The file's resource URI.
    pub uri: String,
    /// `sha256:` and the 64 lowercase hexadecimal digits of the SHA-256 of the file's bytes.
    pub digest: String,
    /// The length of the file's bytes.
    pub size: u64,
}

impl SkillResource {
    /// The file at `uri` with this digest and size.
    pub fn new(uri: impl Into<String>, digest: impl Into<String>, size: u64) -> Self {
        SkillResource {
            uri: uri.into(),
            digest: digest.into(),
            size,
        }
    }
}

/// A skill's files: the complete list, or `"dynamic"` when its content is generated and no
/// stable digests can be published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillFiles {
    /// Every file of the skill, each once, `SKILL.md` included.
    Listed(Vec<SkillResource>),
    /// The string `"dynamic"`.
    Dynamic,
}

impl SkillFiles {
    /// The listed files (none for a dynamic skill).
    pub fn listed(&self) -> &[SkillResource] {
        match self {
            SkillFiles::Listed(files) => files,
            SkillFiles::Dynamic => &[],
        }
    }
}

impl Serialize for SkillFiles {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            SkillFiles::Listed(files) => files.serialize(serializer),
            SkillFiles::Dynamic => serializer.serialize_str("dynamic"),
        }
    }
}

impl<'de> Deserialize<'de> for SkillFiles {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(s) if s == "dynamic" => Ok(SkillFiles::Dynamic),
            files @ Value::Array(_) => serde_json::from_value(files)
                .map(SkillFiles::Listed)
                .map_err(de::Error::custom),
            other => Err(de::Error::custom(format!(
                "`resources` must be an array or \"dynamic\", not {other}"
            ))),
        }
    }
}

/// The entry of one skill, as `skills/list` and `skills/get` return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Skill {
    /// The resource URI of the skill's `SKILL.md`.
    pub uri: String,
    /// The `SKILL.md` YAML frontmatter as a JSON object: `name` and `description`, and every
    /// other field the author wrote.
    pub frontmatter: JsonObject,
    /// The skill's files.
    pub resources: SkillFiles,
}

impl Skill {
    /// The skill whose `SKILL.md` is at `uri`.
    pub fn new(uri: impl Into<String>, frontmatter: JsonObject, resources: SkillFiles) -> Self {
        Skill {
            uri: uri.into(),
            frontmatter,
            resources,
        }
    }

    /// The skill's name (`frontmatter.name`), if it is a string.
    pub fn name(&self) -> Option<&str> {
        self.frontmatter.get("name").and_then(Value::as_str)
    }

    /// The skill's description (`frontmatter.description`), if it is a string.
    pub fn description(&self) -> Option<&str> {
        self.frontmatter.get("description").and_then(Value::as_str)
    }

    /// The URI of the skill's root directory: [`uri`](Self::uri) without `/SKILL.md`; `None`
    /// when the URI does not end so.
    pub fn root(&self) -> Option<&str> {
        self.uri
            .strip_suffix(SKILL_FILE)
            .and_then(|root| root.strip_suffix('/'))
            .filter(|root| !root.is_empty())
    }

    /// The problems that make the entry one a host must not load: a URI that does not end in
    /// `/<name>/SKILL.md`, a missing or empty `name` or `description`, a listed file outside
    /// the skill's directory or listed twice, no entry for `SKILL.md` itself, a digest not of
    /// the form `sha256:<64 lowercase hex>`. Empty when the entry is valid.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let name = self.name().filter(|n| !n.is_empty());
        match name {
            None => problems.push("frontmatter has no name".to_owned()),
            Some(name) => {
                let last = self
                    .root()
                    .and_then(|root| root.rsplit(['/']).next())
                    .filter(|_| self.uri.contains("://"));
                if last != Some(name) {
                    problems.push(format!(
                        "the uri {} does not end in /{name}/{SKILL_FILE}",
                        self.uri
                    ));
                }
            }
        }
        if self.description().is_none_or(str::is_empty) {
            problems.push("frontmatter has no description".to_owned());
        }
        if let (SkillFiles::Listed(files), Some(root)) = (&self.resources, self.root()) {
            let prefix = format!("{root}/");
            let mut seen = std::collections::BTreeSet::new();
            for file in files {
                if !file.uri.starts_with(&prefix) || file.uri.len() == prefix.len() {
                    problems.push(format!("{} is not a file of the skill", file.uri));
                }
                if !seen.insert(file.uri.as_str()) {
                    problems.push(format!("{} is listed twice", file.uri));
                }
                if !is_digest(&file.digest) {
                    problems.push(format!("{}: invalid digest {:?}", file.uri, file.digest));
                }
            }
            if !seen.contains(self.uri.as_str()) {
                problems.push(format!("{} is not listed in its resources", self.uri));
            }
        }
        problems
    }
}

/// Whether `digest` is `sha256:` and 64 lowercase hexadecimal digits.
pub fn is_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Whether `name` follows the Agent Skills naming rules: 1 to 64 characters, lowercase ASCII
/// letters, digits and hyphens, no hyphen first, last or twice in a row.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// The result of `skills/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ListSkillsResult {
    /// The skills of this page.
    pub skills: Vec<Skill>,
    /// The cursor of the next page, if any.
    #[serde(
        rename = "nextCursor",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub next_cursor: Option<String>,
}

/// The result of `skills/get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GetSkillResult {
    /// The skill's entry.
    pub skill: Skill,
}

/// The result of `resources/directory/read`: the directory's direct children, as resource
/// metadata (`uri`, `name`, `mimeType`, ...; a subdirectory has [`DIRECTORY_MIME_TYPE`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReadResourceDirectoryResult {
    /// The children of this page.
    pub resources: Vec<JsonObject>,
    /// The cursor of the next page, if any.
    #[serde(
        rename = "nextCursor",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub next_cursor: Option<String>,
}

#[cfg(feature = "skills")]
pub use content::{
    FrontmatterError, digest, parse_frontmatter, split_frontmatter, write_frontmatter,
};

#[cfg(feature = "skills")]
mod content {
    use sha2::{Digest as _, Sha256};

    use crate::JsonObject;

    /// `sha256:` and the lowercase hexadecimal SHA-256 of `bytes`.
    pub fn digest(bytes: &[u8]) -> String {
        let hash = Sha256::digest(bytes);
        let mut text = String::with_capacity(7 + 64);
        text.push_str("sha256:");
        for byte in hash {
            text.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
            text.push(char::from(b"0123456789abcdef"[usize::from(byte & 15)]));
        }
        text
    }

    /// Why a `SKILL.md` has no usable frontmatter.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum FrontmatterError {
        /// The file does not begin with a `---` line, or has no closing `---` line.
        #[error("SKILL.md must begin with YAML frontmatter between two `---` lines")]
        Missing,
        /// The frontmatter is not YAML, or not a mapping whose keys are strings.
        #[error("the frontmatter is not a YAML mapping of string keys: {0}")]
        Yaml(String),
        /// `name` or `description` is missing, empty or not a string.
        #[error("the frontmatter has no {0} (a non-empty string)")]
        MissingField(&'static str),
    }

    /// The YAML of a `SKILL.md`'s frontmatter and the markdown after it. The file (after an
    /// optional byte order mark) begins with a `---` line; the frontmatter ends at the next line
    /// that is `---` (spaces or tabs may follow). Line ends may be `\n` or `\r\n`.
    pub fn split_frontmatter(markdown: &str) -> Result<(&str, &str), FrontmatterError> {
        let text = markdown.strip_prefix('\u{feff}').unwrap_or(markdown);
        let rest = text
            .strip_prefix("---\n")
            .or_else(|| text.strip_prefix("---\r\n"))
            .ok_or(FrontmatterError::Missing)?;
        let mut offset = 0;
        for line in rest.split_inclusive('\n') {
            let bare = line.trim_end_matches('\n').trim_end_matches('\r');
            if bare.trim_end_matches([' ', '\t']) == "---" {
                let yaml = rest[..offset]
                    .strip_suffix('\n')
                    .map(|y| y.strip_suffix('\r').unwrap_or(y))
                    .unwrap_or(&rest[..offset]);
                return Ok((yaml, &rest[offset + line.len()..]));
            }
            offset += line.len();
        }
        Err(FrontmatterError::Missing)
    }

    /// The frontmatter block of a `SKILL.md` holding `frontmatter`: `---`, its YAML, `---`, each
    /// line ended by `\n`. Refused unless it reads back ([`parse_frontmatter`]) as `frontmatter`
    /// (a value YAML cannot carry as JSON, no `name` or `description`).
    pub fn write_frontmatter(frontmatter: &JsonObject) -> Result<String, FrontmatterError> {
        let yaml = yaml_serde::to_string(frontmatter)
            .map_err(|e| FrontmatterError::Yaml(e.to_string()))?;
        let block = format!("---\n{yaml}---\n");
        match parse_frontmatter(&block) {
            Ok(read) if &read == frontmatter => Ok(block),
            Ok(_) => Err(FrontmatterError::Yaml(
                "does not read back as written".into(),
            )),
            Err(e) => Err(e),
        }
    }

    /// The frontmatter of a `SKILL.md` as a JSON object, checked to have a non-empty string
    /// `name` and `description`. An empty frontmatter is an empty object (and so lacks `name`).
    pub fn parse_frontmatter(markdown: &str) -> Result<JsonObject, FrontmatterError> {
        let (yaml, _) = split_frontmatter(markdown)?;
        let value: serde_json::Value = if yaml.trim().is_empty() {
            serde_json::Value::Object(JsonObject::new())
        } else {
            yaml_serde::from_str(yaml).map_err(|e| FrontmatterError::Yaml(e.to_string()))?
        };
        let serde_json::Value::Object(object) = value else {
            return Err(FrontmatterError::Yaml("not a mapping".into()));
        };
        for field in ["name", "description"] {
            if object
                .get(field)
                .and_then(serde_json::Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(FrontmatterError::MissingField(field));
            }
        }
        Ok(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(value: Value) -> Skill {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn resources_are_an_array_or_dynamic_and_nothing_else() {
        let dynamic = entry(json!({
            "uri": "skill://reports/daily/SKILL.md",
            "frontmatter": {"name": "daily", "description": "d"},
            "resources": "dynamic"
        }));
        assert_eq!(dynamic.resources, SkillFiles::Dynamic);
        assert_eq!(
            serde_json::to_value(&dynamic).unwrap()["resources"],
            "dynamic"
        );
        for bad in [json!("static"), json!({}), json!(null), json!(3)] {
            let value = json!({"uri": "skill://a/SKILL.md", "frontmatter": {}, "resources": bad});
            assert!(serde_json::from_value::<Skill>(value).is_err());
        }
        let missing = json!({"uri": "skill://a/SKILL.md", "frontmatter": {}});
        assert!(serde_json::from_value::<Skill>(missing).is_err());
    }

    #[test]
    fn problems_of_an_entry() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let good = entry(json!({
            "uri": "skill://acme/refunds/SKILL.md",
            "frontmatter": {"name": "refunds", "description": "Refunds"},
            "resources": [
                {"uri": "skill://acme/refunds/SKILL.md", "digest": digest, "size": 1},
                {"uri": "skill://acme/refunds/a/b.md", "digest": digest, "size": 1}
            ]
        }));
        assert!(good.problems().is_empty(), "{:?}", good.problems());
        assert_eq!(good.root(), Some("skill://acme/refunds"));
        let bad = entry(json!({
            "uri": "skill://acme/refunds/SKILL.md",
            "frontmatter": {"name": "other", "description": ""},
            "resources": [
                {"uri": "skill://acme/refundsX/SKILL.md", "digest": "sha256:AB", "size": 1},
                {"uri": "skill://acme/refundsX/SKILL.md", "digest": digest, "size": 1}
            ]
        }));
        let problems = bad.problems().join("\n");
        for expected in [
            "does not end in /other/SKILL.md",
            "no description",
            "is not a file of the skill",
            "listed twice",
            "invalid digest",
            "skill://acme/refunds/SKILL.md is not listed",
        ] {
            assert!(problems.contains(expected), "{expected} in {problems}");
        }
    }

    #[test]
    fn names_follow_the_agent_skills_rules() {
        for good in ["a", "pdf-processing", "x1", &"a".repeat(64)] {
            assert!(is_valid_name(good), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "A",
            "a_b",
            "a.b",
            "é",
            &"a".repeat(65),
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn digests_are_lowercase_sha256() {
        assert!(is_digest(&format!("sha256:{}", "0f".repeat(32))));
        assert!(!is_digest(&format!("sha256:{}", "0F".repeat(32))));
        assert!(!is_digest(&format!("sha1:{}", "0f".repeat(32))));
        assert!(!is_digest("sha256:0f"));
    }

    #[cfg(feature = "skills")]
    #[test]
    fn digest_of_bytes() {
        assert_eq!(
            digest(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_digest(&digest(b"")));
    }

    #[cfg(feature = "skills")]
    #[test]
    fn frontmatter_is_split_and_parsed_verbatim() {
        let text = "\u{feff}---\r\nname: pdf\r\ndescription: \"Fill: forms\"\r\nmetadata:\r\n  version: 2\r\n  tags: [a, b]\r\n---  \r\n# Body\n---\n";
        let (yaml, body) = split_frontmatter(text).unwrap();
        assert!(yaml.ends_with("tags: [a, b]"));
        assert_eq!(body, "# Body\n---\n");
        let parsed = parse_frontmatter(text).unwrap();
        assert_eq!(
            Value::Object(parsed),
            json!({"name": "pdf", "description": "Fill: forms",
                   "metadata": {"version": 2, "tags": ["a", "b"]}})
        );
        assert_eq!(
            split_frontmatter("---\n---\nbody").unwrap(),
            ("", "body"),
            "an empty frontmatter"
        );
    }

    #[cfg(feature = "skills")]
    #[test]
    fn frontmatter_is_written_to_read_back() {
        let value = json!({"name": "daily", "description": "Today: the report",
                           "metadata": {"n": 1, "list": ["x", "-y"]}, "license": "MIT"});
        let object = value.as_object().unwrap().clone();
        let block = write_frontmatter(&object).unwrap();
        assert!(block.starts_with("---\n") && block.ends_with("---\n"));
        assert_eq!(
            parse_frontmatter(&format!("{block}# body")).unwrap(),
            object
        );
        let nameless = json!({"description": "d"}).as_object().unwrap().clone();
        assert_eq!(
            write_frontmatter(&nameless),
            Err(FrontmatterError::MissingField("name"))
        );
    }

    #[cfg(feature = "skills")]
    #[test]
    fn bad_frontmatter_is_refused() {
        assert_eq!(
            parse_frontmatter("# no frontmatter"),
            Err(FrontmatterError::Missing)
        );
        assert_eq!(
            parse_frontmatter("---\nname: a\n"),
            Err(FrontmatterError::Missing)
        );
        assert_eq!(
            parse_frontmatter("---\nname: a\n---\n"),
            Err(FrontmatterError::MissingField("description"))
        );
        assert_eq!(
            parse_frontmatter("---\nname: ''\ndescription: d\n---\n"),
            Err(FrontmatterError::MissingField("name"))
        );
        assert!(matches!(
            parse_frontmatter("---\n- a\n- b\n---\n"),
            Err(FrontmatterError::Yaml(_))
        ));
        assert!(matches!(
            parse_frontmatter("---\nname: [unclosed\n---\n"),
            Err(FrontmatterError::Yaml(_))
        ));
        // A key that is not a string in YAML is the string JSON writes for it.
        let numbered = parse_frontmatter("---\n1: a\nname: a\ndescription: b\n---\n").unwrap();
        assert_eq!(numbered["1"], "a");
    }
}
