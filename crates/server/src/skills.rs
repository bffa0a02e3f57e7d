//! Skills (the `io.modelcontextprotocol/skills` extension, SEP-2640): Agent Skills served as
//! resources, from a directory tree ([`ServerBuilder::skills_dir`](crate::ServerBuilder::skills_dir))
//! or built in code ([`DynamicSkill`]), with `skills/list`, `skills/get` and
//! `resources/directory/read`.
//!
//! A directory is read once, when the server is built: every file is read into memory (bounded
//! by [`SkillsLimits`]), its digest computed from those bytes, and reads are answered from them.
//! Nothing a client sends is ever turned into a path: a URI is looked up, exactly as written,
//! among the URIs the scan made, so `..`, percent-encoding or a NUL byte in a URI can only miss.
//! The scan itself refuses symbolic links (to files or directories) and anything that is not a
//! regular file or a directory, and after opening each file checks that it opened the entry it
//! listed (the same device and inode) at the canonical path it expects under the canonical
//! root, so a link swapped in between the listing and the opening is refused too. A change on
//! disk afterwards is not seen: the server serves what it published.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use modelctx_types::skills::{
    DIRECTORY_MIME_TYPE, SCHEME, SKILL_FILE, SKILL_MIME_TYPE, Skill, SkillFiles, SkillResource,
};
use modelctx_types::{ErrorObject, JsonObject};
use serde_json::{Value, json};

use crate::handler::BoxFuture;
use crate::resource::{ReadRequest, Resource, ResourceContents};
use crate::wire::invalid_params;
use crate::{Context, route::Route};

/// What a [`SkillsSource`] answers with, in time.
pub type SkillsFuture<T> =
    std::pin::Pin<Box<dyn Future<Output = Result<T, ErrorObject>> + Send + 'static>>;

/// Skills served from elsewhere (a gateway's servers), asked each time a client asks
/// ([`ServerBuilder::skills_source`](crate::ServerBuilder::skills_source)). The server's own
/// skills (a directory, skills built in code) answer first: the source is asked for what they
/// do not have. The source's files are read as resources: the server does not route a
/// `resources/read` of a skill file to the source (serve them as resources of their own).
pub trait SkillsSource: Send + Sync + 'static {
    /// Every skill of the source (the server pages them to its clients, by URI). Its length is
    /// the source's to bound.
    fn list(&self, context: Context) -> SkillsFuture<Vec<Skill>>;
    /// The entry of the skill whose `SKILL.md` is at `uri`; `None` when the source has none
    /// (the client gets -32602).
    fn get(&self, context: Context, uri: String) -> SkillsFuture<Option<Skill>>;
    /// One page of the children of the directory resource at `uri`, after `cursor` (the
    /// source's own cursors, passed on as they came).
    fn read_directory(
        &self,
        context: Context,
        uri: String,
        cursor: Option<String>,
    ) -> SkillsFuture<modelctx_types::skills::ReadResourceDirectoryResult>;
}

/// The [`SkillsSource`] of a server, if it has one.
#[derive(Clone, Default)]
pub(crate) struct Source(pub(crate) Option<Arc<dyn SkillsSource>>);

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Source(..)"
        } else {
            "Source(None)"
        })
    }
}

/// The bounds of a skills directory, checked when the server is built: a directory past one is
/// refused with [`SkillsError::Limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkillsLimits {
    /// The most files one skill may have, `SKILL.md` and its nested skills' files included
    /// (default 512, the number every host must accept).
    pub files_per_skill: usize,
    /// The most bytes the files of one skill may add up to (default 16 MiB, the size every
    /// host must accept).
    pub bytes_per_skill: u64,
    /// The most files the whole directory may have (default 4096).
    pub total_files: usize,
    /// The most bytes the whole directory may hold, all of it kept in memory (default 64 MiB).
    pub total_bytes: u64,
    /// The deepest a directory may be below the root (default 16).
    pub depth: usize,
}

impl Default for SkillsLimits {
    fn default() -> Self {
        SkillsLimits {
            files_per_skill: modelctx_types::skills::MAX_FILES_PER_SKILL,
            bytes_per_skill: modelctx_types::skills::MAX_BYTES_PER_SKILL,
            total_files: 4096,
            total_bytes: 64 * 1024 * 1024,
            depth: 16,
        }
    }
}

/// Why skills cannot be served: the server is not built ([`RegisterError::Skills`](crate::RegisterError::Skills)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SkillsError {
    /// Reading the directory failed.
    #[error("{path}: {message}")]
    Io {
        /// Where.
        path: PathBuf,
        /// The kind of I/O error.
        kind: std::io::ErrorKind,
        /// The error's text.
        message: String,
    },
    /// A symbolic link: skills are served from real files and directories only.
    #[error("{0}: a symbolic link (skills are served from regular files and directories only)")]
    Symlink(PathBuf),
    /// Neither a regular file nor a directory (a FIFO, a socket, a device).
    #[error("{0}: not a regular file or directory")]
    NotAFile(PathBuf),
    /// The entry opened is not the one listed, or not where it was expected: it was replaced
    /// (by a link) while being read.
    #[error("{0}: changed while being read (replaced by a link?)")]
    Changed(PathBuf),
    /// A file or directory name that cannot be part of a skill URI (not UTF-8).
    #[error("{path}: {reason}")]
    Name {
        /// Where.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A `SKILL.md` without usable frontmatter, or whose `name` is not its directory's name.
    #[error("{path}: {reason}")]
    Skill {
        /// The `SKILL.md`, or the skill's path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A bound of [`SkillsLimits`] was passed.
    #[error("{path}: {what}")]
    Limit {
        /// The skill or file that passed it.
        path: PathBuf,
        /// Which bound, and by how much.
        what: String,
    },
    /// Two skills or files at the same URI (two directories, or a directory and a skill built
    /// in code).
    #[error("{0} is served twice")]
    Duplicate(String),
}

impl SkillsError {
    fn io(path: &Path, error: &std::io::Error) -> Self {
        SkillsError::Io {
            path: path.to_owned(),
            kind: error.kind(),
            message: error.to_string(),
        }
    }
}

/// Generates content.
type Generate = Arc<dyn Fn() -> BoxFuture<Vec<u8>> + Send + Sync>;

/// A skill built in code, whose content is generated when it is read: its entry's `resources`
/// is `"dynamic"` (no digests can be published). Its frontmatter is fixed; `SKILL.md` is that
/// frontmatter followed by the [`body`](Self::body) generated for each read, so what a host
/// reads always matches the entry.
///
/// ```
/// use modelctx_server::{DynamicSkill, Server};
///
/// let daily = DynamicSkill::new("reports/daily", "Assemble today's report from live data")
///     .field("license", "Apache-2.0")
///     .body(|| async { "# Daily report\n\nRead `data/today.csv`.\n".to_owned() })
///     .file("data/today.csv", || async { "region,total\neu,12\n".to_owned() });
/// let server = Server::builder("reports", "1.0.0").skill(daily).build();
/// # drop(server);
/// ```
#[derive(Clone)]
pub struct DynamicSkill {
    path: String,
    frontmatter: JsonObject,
    body: Generate,
    files: BTreeMap<String, Generate>,
}

impl std::fmt::Debug for DynamicSkill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicSkill")
            .field("path", &self.path)
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn generator<F, Fut, T>(generate: F) -> Generate
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + Send + 'static,
    T: Into<Vec<u8>>,
{
    Arc::new(move || {
        let future = generate();
        Box::pin(async move { future.await.into() })
    })
}

impl DynamicSkill {
    /// The skill at `path` (`/`-separated; its last segment is the skill's `name`, which must
    /// follow the Agent Skills naming rules), described by `description`. Its `SKILL.md` body
    /// is empty until [`body`](Self::body) gives one.
    pub fn new(path: impl Into<String>, description: impl Into<String>) -> Self {
        let path = path.into();
        let name = path.rsplit('/').next().unwrap_or_default().to_owned();
        let mut frontmatter = JsonObject::new();
        frontmatter.insert("name".into(), Value::String(name));
        frontmatter.insert("description".into(), Value::String(description.into()));
        DynamicSkill {
            path,
            frontmatter,
            body: generator(|| async { Vec::<u8>::new() }),
            files: BTreeMap::new(),
        }
    }

    /// Another frontmatter field (`license`, `metadata`, ...); `name` and `description` cannot
    /// be replaced this way.
    pub fn field(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        let key = key.into();
        if key != "name" && key != "description" {
            self.frontmatter.insert(key, value.into());
        }
        self
    }

    /// What follows the frontmatter in `SKILL.md`, generated for each read.
    pub fn body<F, Fut, T>(mut self, generate: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: Into<Vec<u8>>,
    {
        self.body = generator(generate);
        self
    }

    /// A file of the skill at `path` (relative to the skill's root, `/`-separated), its content
    /// generated for each read: text when it is UTF-8, else binary.
    pub fn file<F, Fut, T>(mut self, path: impl Into<String>, generate: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: Into<Vec<u8>>,
    {
        self.files.insert(path.into(), generator(generate));
        self
    }
}

/// What the builder collects: directories to scan, skills built in code, the bounds.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub(crate) dirs: Vec<PathBuf>,
    /// Trees given as files in memory: `/`-separated paths under the tree's root, and bytes.
    pub(crate) trees: Vec<Vec<(String, Vec<u8>)>>,
    pub(crate) dynamic: Vec<DynamicSkill>,
    pub(crate) limits: SkillsLimits,
    pub(crate) source: Source,
}

impl Pending {
    pub(crate) fn is_empty(&self) -> bool {
        self.dirs.is_empty()
            && self.trees.is_empty()
            && self.dynamic.is_empty()
            && self.source.0.is_none()
    }

    /// The catalog, and the resources serving its files.
    pub(crate) fn build(self) -> Result<(Catalog, Vec<Resource>), SkillsError> {
        let mut built = Built::default();
        built.catalog.source = self.source;
        for dir in &self.dirs {
            let tree = scan(dir, &self.limits)?;
            built.add_tree(dir, tree, &self.limits)?;
        }
        for (i, files) in self.trees.into_iter().enumerate() {
            let root = PathBuf::from(format!("<skill files {}>", i + 1));
            let tree = in_memory(&root, files, &self.limits)?;
            built.add_tree(&root, tree, &self.limits)?;
        }
        for skill in self.dynamic {
            built.add_dynamic(skill)?;
        }
        Ok((built.catalog, built.resources))
    }
}

/// The skills a server serves, and its directory resources.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    /// By the URI of their `SKILL.md`.
    skills: BTreeMap<String, Skill>,
    /// The children of every directory resource, by the directory's URI, then the child's.
    dirs: BTreeMap<String, BTreeMap<String, JsonObject>>,
    /// Every file URI served.
    files: BTreeSet<String>,
    /// Where the skills this catalog does not have are asked for.
    source: Source,
}

impl Catalog {
    /// How `method` (`skills/list`, `skills/get`, `resources/directory/read`) is answered: from
    /// the catalog, or, for what it does not have, by its [`SkillsSource`].
    pub(crate) fn route(&self, method: &str, params: JsonObject, page_size: usize) -> Route {
        let Some(source) = self.source.0.clone() else {
            let answer = match method {
                modelctx_types::skills::SKILLS_LIST => self.list(&params, page_size),
                modelctx_types::skills::SKILLS_GET => self.get(&params),
                _ => self.read_directory(&params, page_size),
            };
            return Route::Now(answer.and_then(|v| crate::wire::raw(&v)));
        };
        match method {
            modelctx_types::skills::SKILLS_LIST => {
                let mut all = self.skills.clone();
                Route::Run(Box::new(move |context| {
                    Box::pin(async move {
                        for skill in source.list(context).await? {
                            // The server's own skill first, then the source's first.
                            all.entry(skill.uri.clone()).or_insert(skill);
                        }
                        let (skills, next) = crate::wire::cursor::page(&all, &params, page_size)?;
                        let mut result = json!({ "skills": skills });
                        if let Some(next) = next {
                            result["nextCursor"] = Value::from(next);
                        }
                        crate::wire::raw(&result)
                    })
                }))
            }
            modelctx_types::skills::SKILLS_GET => {
                let uri = match uri_param(&params, "skills/get") {
                    Ok(uri) if !self.skills.contains_key(uri) => uri.to_owned(),
                    _ => return Route::Now(self.get(&params).and_then(|v| crate::wire::raw(&v))),
                };
                Route::Run(Box::new(move |context| {
                    Box::pin(async move {
                        match source.get(context, uri.clone()).await? {
                            Some(skill) => crate::wire::raw(&json!({ "skill": skill })),
                            None => Err(invalid_params(format!("No skill is served at {uri}"))),
                        }
                    })
                }))
            }
            _ => {
                let uri = match uri_param(&params, "resources/directory/read") {
                    Ok(uri) if !self.dirs.contains_key(uri) && !self.files.contains(uri) => {
                        uri.to_owned()
                    }
                    _ => {
                        return Route::Now(
                            self.read_directory(&params, page_size)
                                .and_then(|v| crate::wire::raw(&v)),
                        );
                    }
                };
                let cursor = match params.get("cursor") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(cursor)) => Some(cursor.clone()),
                    Some(_) => {
                        return Route::Now(Err(invalid_params("the cursor must be a string")));
                    }
                };
                Route::Run(Box::new(move |context| {
                    Box::pin(async move {
                        let page = source.read_directory(context, uri, cursor).await?;
                        crate::wire::raw(&page)
                    })
                }))
            }
        }
    }

    /// `skills/list`: a page of entries.
    pub(crate) fn list(&self, params: &JsonObject, page_size: usize) -> Result<Value, ErrorObject> {
        let (skills, next) = crate::wire::cursor::page(&self.skills, params, page_size)?;
        let mut result = json!({ "skills": skills });
        if let Some(next) = next {
            result["nextCursor"] = Value::from(next);
        }
        Ok(result)
    }

    /// `skills/get`: the entry of the skill whose `SKILL.md` is at `params.uri`.
    pub(crate) fn get(&self, params: &JsonObject) -> Result<Value, ErrorObject> {
        let uri = uri_param(params, "skills/get")?;
        match self.skills.get(uri) {
            Some(skill) => Ok(json!({ "skill": skill })),
            None => Err(invalid_params(format!("No skill is served at {uri}"))),
        }
    }

    /// `resources/directory/read`: a page of the children of the directory at `params.uri`.
    pub(crate) fn read_directory(
        &self,
        params: &JsonObject,
        page_size: usize,
    ) -> Result<Value, ErrorObject> {
        let uri = uri_param(params, "resources/directory/read")?;
        let Some(children) = self.dirs.get(uri) else {
            return Err(invalid_params(if self.files.contains(uri) {
                format!("{uri} is not a directory resource")
            } else {
                format!("no directory resource at {uri}")
            }));
        };
        let (resources, next) = crate::wire::cursor::page(children, params, page_size)?;
        let mut result = json!({ "resources": resources });
        if let Some(next) = next {
            result["nextCursor"] = Value::from(next);
        }
        Ok(result)
    }
}

fn uri_param<'a>(params: &'a JsonObject, method: &str) -> Result<&'a str, ErrorObject> {
    params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params(format!("{method} needs a uri")))
}

/// What a scan found: every file (by its path segments under the root) and every directory.
#[derive(Debug, Default)]
struct Tree {
    files: BTreeMap<Vec<String>, Arc<[u8]>>,
    dirs: BTreeSet<Vec<String>>,
    bytes: u64,
}

/// The tree of files given in memory (named `root` in errors), within the same bounds as a
/// directory's.
fn in_memory(
    root: &Path,
    files: Vec<(String, Vec<u8>)>,
    limits: &SkillsLimits,
) -> Result<Tree, SkillsError> {
    let mut tree = Tree::default();
    for (path, bytes) in files {
        let at = root.join(&path);
        let segments = relative_segments(&path).ok_or_else(|| SkillsError::Name {
            path: at.clone(),
            reason: "a file path is one or more `/`-separated names, none `.` or `..`".into(),
        })?;
        if segments.len() > limits.depth + 1 {
            return Err(SkillsError::Limit {
                path: at,
                what: format!("deeper than {} directories", limits.depth),
            });
        }
        tree.bytes += bytes.len() as u64;
        if bytes.len() as u64 > limits.bytes_per_skill || tree.bytes > limits.total_bytes {
            return Err(SkillsError::Limit {
                path: at,
                what: format!(
                    "larger than {} bytes, or more than {} in all",
                    limits.bytes_per_skill, limits.total_bytes
                ),
            });
        }
        for depth in 1..segments.len() {
            tree.dirs.insert(segments[..depth].to_vec());
        }
        if tree.dirs.contains(&segments) || tree.files.insert(segments, bytes.into()).is_some() {
            return Err(SkillsError::Duplicate(at.display().to_string()));
        }
        if tree.files.len() > limits.total_files {
            return Err(SkillsError::Limit {
                path: at,
                what: format!("more than {} files in all", limits.total_files),
            });
        }
    }
    Ok(tree)
}

/// Reads the tree under `root` into memory.
fn scan(root: &Path, limits: &SkillsLimits) -> Result<Tree, SkillsError> {
    let canonical = std::fs::canonicalize(root).map_err(|e| SkillsError::io(root, &e))?;
    let meta = std::fs::metadata(&canonical).map_err(|e| SkillsError::io(root, &e))?;
    if !meta.is_dir() {
        return Err(SkillsError::Io {
            path: root.to_owned(),
            kind: std::io::ErrorKind::NotADirectory,
            message: "not a directory".into(),
        });
    }
    let mut tree = Tree::default();
    walk(&canonical, &mut Vec::new(), limits, &mut tree)?;
    Ok(tree)
}

fn walk(
    dir: &Path,
    rel: &mut Vec<String>,
    limits: &SkillsLimits,
    tree: &mut Tree,
) -> Result<(), SkillsError> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| SkillsError::io(dir, &e))? {
        entries.push(entry.map_err(|e| SkillsError::io(dir, &e))?);
    }
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let Ok(name) = entry.file_name().into_string() else {
            return Err(SkillsError::Name {
                path,
                reason: "the name is not UTF-8".into(),
            });
        };
        // Hidden entries (`.git`, `.DS_Store`) are not part of a skill.
        if name.starts_with('.') {
            continue;
        }
        let listed = entry.metadata().map_err(|e| SkillsError::io(&path, &e))?;
        let kind = listed.file_type();
        if kind.is_symlink() {
            return Err(SkillsError::Symlink(path));
        }
        rel.push(name);
        if kind.is_dir() {
            if rel.len() > limits.depth {
                return Err(SkillsError::Limit {
                    path,
                    what: format!("deeper than {} directories", limits.depth),
                });
            }
            tree.dirs.insert(rel.clone());
            walk(&path, rel, limits, tree)?;
        } else if kind.is_file() {
            let bytes = read_file(&path, dir, &listed, limits, tree.bytes)?;
            tree.bytes += bytes.len() as u64;
            tree.files.insert(rel.clone(), bytes);
            if tree.files.len() > limits.total_files {
                return Err(SkillsError::Limit {
                    path,
                    what: format!("more than {} files in all", limits.total_files),
                });
            }
        } else {
            return Err(SkillsError::NotAFile(path));
        }
        rel.pop();
    }
    Ok(())
}

/// Reads the file at `path`, listed in `dir` with metadata `listed`: refused unless the file
/// opened is the entry listed, at its canonical path under `dir`, and within the bounds.
fn read_file(
    path: &Path,
    dir: &Path,
    listed: &std::fs::Metadata,
    limits: &SkillsLimits,
    so_far: u64,
) -> Result<Arc<[u8]>, SkillsError> {
    let file = std::fs::File::open(path).map_err(|e| SkillsError::io(path, &e))?;
    let opened = file.metadata().map_err(|e| SkillsError::io(path, &e))?;
    if !opened.is_file() {
        return Err(SkillsError::Changed(path.to_owned()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        if (opened.dev(), opened.ino()) != (listed.dev(), listed.ino()) {
            return Err(SkillsError::Changed(path.to_owned()));
        }
    }
    #[cfg(not(unix))]
    let _ = listed;
    // Re-checked after opening: the file is where the walk expects it, under the canonical
    // root (`dir` is canonical: the walk descends only into real directories).
    let canonical = std::fs::canonicalize(path).map_err(|e| SkillsError::io(path, &e))?;
    if canonical.parent() != Some(dir) || canonical.file_name() != path.file_name() {
        return Err(SkillsError::Changed(path.to_owned()));
    }
    let budget = limits
        .bytes_per_skill
        .min(limits.total_bytes.saturating_sub(so_far));
    let mut bytes = Vec::new();
    file.take(budget.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| SkillsError::io(path, &e))?;
    if bytes.len() as u64 > budget {
        let what = if bytes.len() as u64 > limits.bytes_per_skill {
            format!(
                "larger than {} bytes (a skill's bound)",
                limits.bytes_per_skill
            )
        } else {
            format!("more than {} bytes in all", limits.total_bytes)
        };
        return Err(SkillsError::Limit {
            path: path.to_owned(),
            what,
        });
    }
    Ok(bytes.into())
}

/// A URI path segment: the name, every byte but the unreserved ones percent-encoded (so that
/// two names never give one segment).
fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn uri_of(segments: &[String]) -> String {
    let mut uri = String::from(SCHEME);
    for (i, s) in segments.iter().enumerate() {
        if i > 0 {
            uri.push('/');
        }
        uri.push_str(&segment(s));
    }
    uri
}

/// The MIME type of a file, by its extension; `text/plain` or `application/octet-stream` for
/// the others, as its content is text or not.
fn mime_type(name: &str, bytes: Option<&[u8]>) -> &'static str {
    let extension = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match extension.as_deref() {
        Some("md" | "markdown") => "text/markdown",
        Some("txt") => "text/plain",
        Some("py") => "text/x-python",
        Some("sh") => "text/x-shellscript",
        Some("js" | "mjs") => "text/javascript",
        Some("ts") => "text/x-typescript",
        Some("rs") => "text/x-rust",
        Some("json") => "application/json",
        Some("yaml" | "yml") => "application/yaml",
        Some("toml") => "application/toml",
        Some("csv") => "text/csv",
        Some("html" | "htm") => "text/html",
        Some("xml") => "application/xml",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("pdf") => "application/pdf",
        _ => match bytes {
            Some(b) if std::str::from_utf8(b).is_err() => "application/octet-stream",
            _ => "text/plain",
        },
    }
}

/// Contents of `uri`: text when `bytes` are UTF-8, else binary.
fn contents(uri: String, bytes: &[u8], mime: &str) -> ResourceContents {
    match std::str::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(uri, text),
        Err(_) => ResourceContents::blob(uri, bytes),
    }
    .mime_type(mime)
}

/// The catalog and resources being assembled.
#[derive(Default)]
struct Built {
    catalog: Catalog,
    resources: Vec<Resource>,
}

impl Built {
    fn add_dir(&mut self, segments: &[String]) {
        self.catalog.dirs.entry(uri_of(segments)).or_default();
        if segments.len() > 1 {
            let parent = uri_of(&segments[..segments.len() - 1]);
            let mut child = JsonObject::new();
            child.insert("uri".into(), Value::from(uri_of(segments)));
            child.insert(
                "name".into(),
                Value::from(segments[segments.len() - 1].clone()),
            );
            child.insert("mimeType".into(), Value::from(DIRECTORY_MIME_TYPE));
            self.catalog
                .dirs
                .entry(parent)
                .or_default()
                .insert(uri_of(segments), child);
        }
    }

    /// Records a file's URI and its entry in its directory; refused when served already.
    fn add_file(&mut self, segments: &[String], mime: &str) -> Result<String, SkillsError> {
        let uri = uri_of(segments);
        if self.catalog.dirs.contains_key(&uri) || !self.catalog.files.insert(uri.clone()) {
            return Err(SkillsError::Duplicate(uri));
        }
        for depth in 1..segments.len() {
            self.add_dir(&segments[..depth]);
        }
        let mut child = JsonObject::new();
        child.insert("uri".into(), Value::from(uri.clone()));
        child.insert(
            "name".into(),
            Value::from(segments[segments.len() - 1].clone()),
        );
        child.insert("mimeType".into(), Value::from(mime));
        self.catalog
            .dirs
            .entry(uri_of(&segments[..segments.len() - 1]))
            .or_default()
            .insert(uri.clone(), child);
        Ok(uri)
    }

    fn add_skill(&mut self, skill: Skill) -> Result<(), SkillsError> {
        if self.catalog.skills.contains_key(&skill.uri) {
            return Err(SkillsError::Duplicate(skill.uri));
        }
        self.catalog.skills.insert(skill.uri.clone(), skill);
        Ok(())
    }

    /// The skills of a scanned tree: every directory with a `SKILL.md` is one, and its files
    /// are every file below it (its nested skills' too).
    fn add_tree(
        &mut self,
        root: &Path,
        tree: Tree,
        limits: &SkillsLimits,
    ) -> Result<(), SkillsError> {
        if tree.files.contains_key(&vec![SKILL_FILE.to_owned()]) {
            return Err(SkillsError::Skill {
                path: root.join(SKILL_FILE),
                reason: "a SKILL.md at the root has no skill path: put each skill in a \
                         directory of its own"
                    .into(),
            });
        }
        let skill_dirs: Vec<&Vec<String>> = tree
            .dirs
            .iter()
            .filter(|d| {
                let mut file = (*d).clone();
                file.push(SKILL_FILE.to_owned());
                tree.files.contains_key(&file)
            })
            .collect();
        let mut served: BTreeSet<&Vec<String>> = BTreeSet::new();
        let mut entries = Vec::new();
        for dir in &skill_dirs {
            let path = dir.iter().fold(root.to_owned(), |p, s| p.join(s));
            let mut skill_md = (*dir).clone();
            skill_md.push(SKILL_FILE.to_owned());
            let text =
                std::str::from_utf8(&tree.files[&skill_md]).map_err(|_| SkillsError::Skill {
                    path: path.join(SKILL_FILE),
                    reason: "SKILL.md is not UTF-8".into(),
                })?;
            let frontmatter = modelctx_types::skills::parse_frontmatter(text).map_err(|e| {
                SkillsError::Skill {
                    path: path.join(SKILL_FILE),
                    reason: e.to_string(),
                }
            })?;
            let name = frontmatter["name"].as_str().unwrap_or_default();
            let last = dir.last().map(String::as_str).unwrap_or_default();
            if name != last {
                return Err(SkillsError::Skill {
                    path: path.join(SKILL_FILE),
                    reason: format!("its name {name:?} is not its directory's name {last:?}"),
                });
            }
            if !modelctx_types::skills::is_valid_name(name) {
                return Err(SkillsError::Skill {
                    path: path.join(SKILL_FILE),
                    reason: format!(
                        "its name {name:?} breaks the Agent Skills naming rules (1-64 \
                         lowercase letters, digits and hyphens, no hyphen first, last or twice)"
                    ),
                });
            }
            let files: Vec<(&Vec<String>, &Arc<[u8]>)> = tree
                .files
                .range((*dir).clone()..)
                .take_while(|(f, _)| f.starts_with(dir))
                .collect();
            let bytes: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
            if files.len() > limits.files_per_skill {
                return Err(SkillsError::Limit {
                    path,
                    what: format!("more than {} files in one skill", limits.files_per_skill),
                });
            }
            if bytes > limits.bytes_per_skill {
                return Err(SkillsError::Limit {
                    path,
                    what: format!("more than {} bytes in one skill", limits.bytes_per_skill),
                });
            }
            let uri = uri_of(&skill_md);
            let mut listed: Vec<SkillResource> = files
                .iter()
                .map(|(f, b)| {
                    SkillResource::new(uri_of(f), modelctx_types::skills::digest(b), b.len() as u64)
                })
                .collect();
            // `SKILL.md` first, then the others by URI.
            listed.sort_by(|a, b| (a.uri != uri, &a.uri).cmp(&(b.uri != uri, &b.uri)));
            served.extend(files.iter().map(|(f, _)| *f));
            entries.push(Skill::new(uri, frontmatter, SkillFiles::Listed(listed)));
        }
        // The files of skills (and the directories on their way) are served; other files of
        // the tree (a README beside the skills) are not.
        for dir in &skill_dirs {
            for depth in 1..=dir.len() {
                self.add_dir(&dir[..depth]);
            }
        }
        for dir in tree.dirs.iter() {
            if skill_dirs.iter().any(|s| dir.starts_with(s)) {
                self.add_dir(dir);
            }
        }
        let skill_md: BTreeMap<String, &Skill> =
            entries.iter().map(|s| (s.uri.clone(), s)).collect();
        for file in served {
            let bytes = tree.files[file].clone();
            let name = file.last().map(String::as_str).unwrap_or_default();
            let mime = mime_type(name, Some(&bytes));
            let uri = self.add_file(file, mime)?;
            let (title, description) = match skill_md.get(&uri) {
                Some(skill) => (
                    skill.name().unwrap_or(name).to_owned(),
                    skill.description().map(str::to_owned),
                ),
                None => (name.to_owned(), None),
            };
            let mut resource = Resource::new(uri, title, move |request: ReadRequest| {
                let bytes = bytes.clone();
                async move { contents(request.uri, &bytes, mime) }
            })
            .mime_type(mime);
            if let Some(description) = description {
                resource = resource.description(description);
            }
            self.resources.push(resource);
        }
        for entry in entries {
            self.add_skill(entry)?;
        }
        Ok(())
    }

    /// A skill built in code.
    fn add_dynamic(&mut self, skill: DynamicSkill) -> Result<(), SkillsError> {
        let at = PathBuf::from(&skill.path);
        let segments = relative_segments(&skill.path).ok_or_else(|| SkillsError::Name {
            path: at.clone(),
            reason: "a skill path is one or more `/`-separated names, none `.` or `..`".into(),
        })?;
        let name = skill.frontmatter["name"].as_str().unwrap_or_default();
        if !modelctx_types::skills::is_valid_name(name) {
            return Err(SkillsError::Skill {
                path: at,
                reason: format!("its name {name:?} breaks the Agent Skills naming rules"),
            });
        }
        if skill
            .frontmatter
            .get("description")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(SkillsError::Skill {
                path: at,
                reason: "its description is empty".into(),
            });
        }
        // The frontmatter is written once; it must read back as itself.
        let head = modelctx_types::skills::write_frontmatter(&skill.frontmatter).map_err(|e| {
            SkillsError::Skill {
                path: at.clone(),
                reason: format!("its frontmatter cannot be written: {e}"),
            }
        })?;
        let mut skill_md = segments.clone();
        skill_md.push(SKILL_FILE.to_owned());
        let uri = self.add_file(&skill_md, SKILL_MIME_TYPE)?;
        self.add_dir(&segments);
        let body = skill.body.clone();
        let description = skill.frontmatter["description"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.resources.push(
            Resource::new(uri.clone(), name, move |request: ReadRequest| {
                let (body, head) = (body.clone(), head.clone());
                async move {
                    let mut bytes = head.into_bytes();
                    bytes.extend(body().await);
                    contents(request.uri, &bytes, SKILL_MIME_TYPE)
                }
            })
            .description(description)
            .mime_type(SKILL_MIME_TYPE),
        );
        for (path, generate) in &skill.files {
            let Some(rest) = relative_segments(path).filter(|r| r != &[SKILL_FILE]) else {
                return Err(SkillsError::Name {
                    path: at.join(path),
                    reason: "a file path is one or more `/`-separated names, none `.` or `..`, \
                             and not SKILL.md"
                        .into(),
                });
            };
            let mut file = segments.clone();
            file.extend(rest);
            let file_name = file.last().cloned().unwrap_or_default();
            let mime = mime_type(&file_name, None);
            let file_uri = self.add_file(&file, mime)?;
            let generate = generate.clone();
            self.resources.push(
                Resource::new(file_uri, file_name, move |request: ReadRequest| {
                    let generate = generate.clone();
                    async move { contents(request.uri, &generate().await, mime) }
                })
                .mime_type(mime),
            );
        }
        self.add_skill(Skill::new(uri, skill.frontmatter, SkillFiles::Dynamic))
    }
}

/// The names of a `/`-separated relative path; `None` when one is empty, `.` or `..`.
fn relative_segments(path: &str) -> Option<Vec<String>> {
    let segments: Vec<String> = path.split('/').map(str::to_owned).collect();
    segments
        .iter()
        .all(|s| !s.is_empty() && s != "." && s != ".." && !s.contains('\0'))
        .then_some(segments)
}

/// The capability the server declares: the extension, with `directoryRead` (every directory of
/// the skills served can be read).
pub(crate) fn declare(capabilities: &mut JsonObject) {
    let extensions = capabilities
        .entry("extensions")
        .or_insert_with(|| Value::Object(JsonObject::new()));
    if let Value::Object(extensions) = extensions {
        extensions.insert(
            modelctx_types::skills::EXTENSION_ID.into(),
            json!({ modelctx_types::skills::DIRECTORY_READ: true }),
        );
    }
}

#[cfg(test)]
#[path = "skills_tests.rs"]
mod tests;
