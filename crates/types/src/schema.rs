//! JSON Schema validation of values against untrusted schemas, such as a tool's `inputSchema`
//! and `outputSchema` (feature `validation`).
//!
//! MCP tools carry an `inputSchema` and optionally an `outputSchema`, both JSON Schemas (2020-12
//! when `$schema` is absent; draft-07 is common too). A server validates tool arguments and
//! `structuredContent` against them; a client validates the `structuredContent` a server sends
//! against the `outputSchema` that same server sent, so the schemas may come from an untrusted
//! peer. Hence:
//!
//! - schemas are compiled once, into a bounded least-recently-used [`SchemaCache`] keyed by their
//!   content;
//! - a schema's size and nesting depth are limited ([`SchemaLimits`]), checked without recursion
//!   before the schema reaches the compiler, and so is the nesting depth of a validated value
//!   ([`MAX_VALUE_DEPTH`]);
//! - only references inside the schema itself are followed: `#...` fragments, or a base that is an
//!   `$id` declared in the schema. Anything else is [`SchemaError::ExternalRef`], and the compiler
//!   is given a retriever that always fails, so nothing is ever read from the network or the file
//!   system even if a dependency turns on jsonschema's `resolve-http` / `resolve-file` features;
//! - an unknown `$schema` dialect is [`SchemaError::Dialect`], never a meta-schema download.
//!
//! `format` keeps jsonschema's defaults, which follow the specifications: an annotation only in
//! 2020-12 and 2019-09, an assertion in draft-07, draft-06 and draft-04 (unknown formats are
//! ignored). `pattern` and `patternProperties` are matched by a linear-time engine (the `regex`
//! crate) by default ([`PatternEngine::Linear`]): matching costs time proportional to the string,
//! whatever the pattern. A schema whose patterns need backtracking (backreferences such as `\1`,
//! look-around such as `(?=...)`) is refused with [`SchemaError::Pattern`]. An application that
//! validates with schemas of its own and needs those features can choose
//! [`PatternEngine::Backtracking`] in [`SchemaLimits::patterns`].
//!
//! # Example
//!
//! ```
//! use modelctx_types::schema::{SchemaCache, SchemaLimits};
//! use serde_json::json;
//!
//! // One cache for the life of the connection (or the process): clones share it.
//! let cache = SchemaCache::new(SchemaLimits::default());
//!
//! let schema = json!({
//!     "type": "object",
//!     "properties": {"count": {"type": "integer", "maximum": 3}},
//!     "required": ["count"]
//! });
//! let schema = schema.as_object().expect("a schema object");
//!
//! // Compiled on the first call, taken from the cache on the next ones.
//! let validator = cache.validator(schema)?;
//! assert!(validator.validate(&json!({"count": 2}), 8).is_empty());
//!
//! let violations = validator.validate(&json!({"count": 5}), 8);
//! assert_eq!(violations[0].path, "/count");
//! assert_eq!(violations[0].to_string(), "/count: 5 is greater than the maximum of 3");
//!
//! // A schema that points outside itself is refused, never fetched.
//! let remote = json!({"$ref": "https://example.com/schema.json"});
//! assert!(cache.validator(remote.as_object().unwrap()).is_err());
//! # Ok::<(), modelctx_types::schema::SchemaError>(())
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use jsonschema::Draft;
use jsonschema::error::ValidationErrorKind;
use serde_json::{Map, Value};

/// Limits on the schemas a [`SchemaCache`] compiles, and on its size.
///
/// Start from [`SchemaLimits::default`] and change the fields wanted (more may be added, so the
/// struct cannot be written as a literal outside this crate):
///
/// ```
/// let mut limits = modelctx_types::schema::SchemaLimits::default();
/// limits.cache_entries = 32;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaLimits {
    /// The largest schema accepted, in bytes of its compact JSON (default 256 KiB).
    pub max_bytes: usize,
    /// The deepest nesting of objects and arrays accepted, the schema object itself being level
    /// 1 (default 64).
    pub max_depth: usize,
    /// How many compiled schemas the cache keeps (default 256); 0 disables caching.
    pub cache_entries: usize,
    /// The engine that matches `pattern` and `patternProperties` (default
    /// [`PatternEngine::Linear`]).
    pub patterns: PatternEngine,
}

/// The regular expression engine of `pattern` and `patternProperties`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PatternEngine {
    /// The `regex` crate: time linear in the length of the string whatever the pattern (the
    /// default). Patterns with backreferences or look-around cannot be compiled by it: a schema
    /// holding one is refused with [`SchemaError::Pattern`]. The choice for schemas from a peer.
    #[default]
    Linear,
    /// fancy-regex: backreferences and look-around are supported, and a match gives up (a
    /// violation) after `backtrack_limit` backtracking steps per string. A string can still cost
    /// that many steps, so this is for schemas the application wrote itself.
    Backtracking {
        /// The backtracking steps allowed per string.
        backtrack_limit: usize,
    },
}

impl Default for SchemaLimits {
    fn default() -> Self {
        Self {
            max_bytes: 256 * 1024,
            max_depth: 64,
            cache_entries: 256,
            patterns: PatternEngine::Linear,
        }
    }
}

/// Why a schema cannot be used.
///
/// The `Display` texts are meant for people (and models) to read; they are not part of the API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The schema's compact JSON exceeds [`SchemaLimits::max_bytes`].
    #[error("the schema is larger than {limit} bytes")]
    TooLarge {
        /// The limit exceeded.
        limit: usize,
    },
    /// The schema nests objects and arrays deeper than [`SchemaLimits::max_depth`].
    #[error("the schema nests deeper than {limit} levels")]
    TooDeep {
        /// The limit exceeded.
        limit: usize,
    },
    /// `$schema` names a dialect other than the five supported (the value as written, or its
    /// JSON if it is not a string).
    #[error(
        "unsupported JSON Schema dialect {0:?}: use 2020-12, 2019-09, draft-07, draft-06 or draft-04"
    )]
    Dialect(String),
    /// A `$ref`, `$dynamicRef` or `$recursiveRef` points outside the schema.
    #[error(
        "the schema references {0:?}, which is not inside the schema; external references are never fetched"
    )]
    ExternalRef(String),
    /// jsonschema rejected the schema (not valid against its meta-schema, a bad regular
    /// expression, an unresolvable local reference...).
    #[error("invalid schema: {0}")]
    Invalid(String),
    /// A `pattern` or `patternProperties` needs backtracking (a backreference, look-around), which
    /// the linear engine of [`PatternEngine::Linear`] does not do; holds where (a JSON pointer
    /// into the schema) and the pattern.
    #[error(
        "the schema's pattern at {path:?} needs backreferences or look-around, which the linear-time pattern engine refuses: {pattern:?}"
    )]
    Pattern {
        /// Where in the schema.
        path: String,
        /// The pattern, shortened.
        pattern: String,
    },
}

/// Where and why a value does not match its schema, in words a model can act on.
///
/// Displayed as `path: message`, or the message alone for the value itself (path `""`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Violation {
    /// A JSON pointer into the value, `""` for the value itself. For a missing required
    /// property, the pointer to where the property should be.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// A compiled schema, from [`SchemaCache::validator`]; cheap to clone, and usable after the cache
/// evicted it.
#[derive(Clone)]
pub struct Validator {
    inner: Arc<jsonschema::Validator>,
}

impl Validator {
    /// Compiles `schema` within `limits`, without a cache: for a caller that keeps the validator
    /// itself, such as a server compiling each tool's schema once, at registration, and calling
    /// [`validate`](Self::validate) on every call (which neither re-reads nor hashes the schema).
    ///
    /// The checks and errors are those of [`SchemaCache::validator`]: size and depth
    /// ([`SchemaLimits::max_bytes`], [`SchemaLimits::max_depth`]), dialect, references, then
    /// compilation with [`SchemaLimits::patterns`]; [`SchemaLimits::cache_entries`] is not used.
    ///
    /// # Errors
    ///
    /// [`SchemaError`], as for [`SchemaCache::validator`].
    pub fn compile(schema: &Map<String, Value>, limits: SchemaLimits) -> Result<Self, SchemaError> {
        check_size_and_depth(schema, limits)?;
        build(schema, limits.patterns)
    }

    /// Up to `max` violations (empty: valid). At least one is reported for an invalid value,
    /// even when `max` is 0.
    ///
    /// The value is walked once, stopping at the first violation; only when `max` is more than 1
    /// and the value is invalid is it walked a second time for the other violations (jsonschema
    /// collects every error of a value before yielding the first, so `max` bounds the messages
    /// formatted and returned, not the work of that second walk). Ask for 1 to bound the work
    /// to one walk.
    ///
    /// A value nesting objects and arrays deeper than [`MAX_VALUE_DEPTH`] is refused with a
    /// single violation before jsonschema sees it: its validation recurses with the value (through
    /// recursive `$ref`s, or comparing items for `uniqueItems`), so a deep enough value would
    /// overflow the stack. Values parsed by serde_json nest at most 128 levels anyway.
    pub fn validate(&self, value: &Value, max: usize) -> Vec<Violation> {
        if nests_deeper_than(value, MAX_VALUE_DEPTH) {
            return vec![Violation {
                path: String::new(),
                message: format!(
                    "the value nests objects and arrays deeper than {MAX_VALUE_DEPTH} levels"
                ),
            }];
        }
        let first = match self.inner.validate(value) {
            Ok(()) => return Vec::new(),
            Err(error) => violation(&error),
        };
        if max <= 1 {
            return vec![first];
        }
        let more: Vec<Violation> = self
            .inner
            .iter_errors(value)
            .take(max)
            .map(|error| violation(&error))
            .collect();
        if more.is_empty() { vec![first] } else { more }
    }
}

/// How deep a value given to [`Validator::validate`] may nest objects and arrays, the value
/// itself being level 1.
///
/// Twice serde_json's parsing limit (128), and far from the stack: a debug build validating a
/// recursive schema overflows a 2 MiB thread stack somewhere past 1 600 levels.
pub const MAX_VALUE_DEPTH: usize = 256;

/// Whether `value` nests objects and arrays deeper than `max_depth`, itself being level 1.
fn nests_deeper_than(value: &Value, max_depth: usize) -> bool {
    any_deeper_than(vec![(value, 1)], max_depth)
}

/// Whether any of the `pending` values, each with its depth, nests objects and arrays deeper
/// than `max_depth`. Iterative, so any depth is measured without touching the call stack; stops
/// at the first value too deep.
fn any_deeper_than(mut pending: Vec<(&Value, usize)>, max_depth: usize) -> bool {
    while let Some((value, depth)) = pending.pop() {
        match value {
            Value::Object(_) | Value::Array(_) if depth > max_depth => return true,
            Value::Object(map) => pending.extend(map.values().map(|child| (child, depth + 1))),
            Value::Array(items) => pending.extend(items.iter().map(|child| (child, depth + 1))),
            _ => {}
        }
    }
    false
}

impl fmt::Debug for Validator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Validator")
            .field("draft", &self.inner.draft())
            .finish_non_exhaustive()
    }
}

/// Compiles schemas once: a bounded cache keyed by the schema's content (hash of its canonical
/// compact JSON, compared by full content to rule out collisions), least recently used evicted;
/// thread-safe (std Mutex), cheap to clone (Arc inside).
///
/// Canonical means object keys sorted, so the same schema written with its keys in another order
/// is the same entry. Compilation happens outside the lock: two threads missing on the same
/// schema at once may both compile it, and the first to finish is the one kept and shared.
/// Failed compilations are not cached. Memory is bounded by `cache_entries` times
/// (`max_bytes` of canonical JSON plus the compiled validator).
#[derive(Clone)]
pub struct SchemaCache {
    inner: Arc<CacheInner>,
}

struct CacheInner {
    limits: SchemaLimits,
    /// Randomly keyed per cache, so an untrusted peer cannot aim schemas at one bucket.
    hasher: RandomState,
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    /// Entries by the hash of their canonical JSON; a bucket holds more than one only on a
    /// hash collision.
    entries: HashMap<u64, Vec<Entry>>,
    /// Hash of each entry by the tick it was last used at: the first is the least recently used.
    recency: BTreeMap<u64, u64>,
    tick: u64,
}

struct Entry {
    canonical: Box<str>,
    validator: Validator,
    /// The tick this entry was last used at, its key in `recency`.
    used: u64,
}

impl CacheState {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The validator cached for `canonical`, marked as just used.
    fn get(&mut self, hash: u64, canonical: &str) -> Option<Validator> {
        let tick = self.next_tick();
        let entry = self
            .entries
            .get_mut(&hash)?
            .iter_mut()
            .find(|entry| &*entry.canonical == canonical)?;
        self.recency.remove(&entry.used);
        entry.used = tick;
        self.recency.insert(tick, hash);
        Some(entry.validator.clone())
    }

    /// Caches `validator` for `canonical` unless another thread did first, evicting the least
    /// recently used entries beyond `capacity`; returns the validator cached.
    fn insert(
        &mut self,
        capacity: usize,
        hash: u64,
        canonical: String,
        validator: Validator,
    ) -> Validator {
        if let Some(existing) = self.get(hash, &canonical) {
            return existing;
        }
        if capacity == 0 {
            return validator;
        }
        while self.recency.len() >= capacity {
            let Some((used, hash)) = self.recency.pop_first() else {
                break;
            };
            if let Some(bucket) = self.entries.get_mut(&hash) {
                bucket.retain(|entry| entry.used != used);
                if bucket.is_empty() {
                    self.entries.remove(&hash);
                }
            }
        }
        let used = self.next_tick();
        self.recency.insert(used, hash);
        self.entries.entry(hash).or_default().push(Entry {
            canonical: canonical.into_boxed_str(),
            validator: validator.clone(),
            used,
        });
        validator
    }
}

impl SchemaCache {
    /// An empty cache compiling schemas within `limits`.
    pub fn new(limits: SchemaLimits) -> Self {
        Self {
            inner: Arc::new(CacheInner {
                limits,
                hasher: RandomState::new(),
                state: Mutex::new(CacheState::default()),
            }),
        }
    }

    /// The validator for `schema`, compiled now or earlier.
    ///
    /// # Errors
    ///
    /// [`SchemaError`] if the schema is too large or too deep for the cache's [`SchemaLimits`],
    /// names an unsupported dialect, references anything outside itself, or is not a valid
    /// schema.
    ///
    /// Size and depth are checked on every call (the cache key is computed from the schema's
    /// canonical JSON); dialect, references and compilation only on a miss. A caller validating
    /// against the same schema many times keeps the returned [`Validator`] (or compiles it with
    /// [`Validator::compile`]) rather than asking again per value.
    pub fn validator(&self, schema: &Map<String, Value>) -> Result<Validator, SchemaError> {
        let limits = self.inner.limits;
        let canonical = check_size_and_depth(schema, limits)?;
        let hash = self.inner.hasher.hash_one(canonical.as_str());
        if let Some(validator) = self.state().get(hash, &canonical) {
            return Ok(validator);
        }
        let validator = build(schema, limits.patterns)?;
        Ok(self
            .state()
            .insert(limits.cache_entries, hash, canonical, validator))
    }

    /// How many compiled schemas are cached.
    pub fn len(&self) -> usize {
        self.state().recency.len()
    }

    /// Whether no compiled schema is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn state(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // The state is consistent between statements, so a panic elsewhere cannot corrupt it.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for SchemaCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaCache")
            .field("limits", &self.inner.limits)
            .field("len", &self.len())
            .finish()
    }
}

/// The canonical JSON of `schema` (see [`canonical_json`]) after checking its depth and size.
fn check_size_and_depth(
    schema: &Map<String, Value>,
    limits: SchemaLimits,
) -> Result<String, SchemaError> {
    check_depth(schema, limits.max_depth)?;
    canonical_json(schema, limits.max_bytes)
}

/// Fails if `schema` nests objects and arrays deeper than `max_depth`, the schema object being
/// level 1.
fn check_depth(schema: &Map<String, Value>, max_depth: usize) -> Result<(), SchemaError> {
    if max_depth == 0
        || any_deeper_than(schema.values().map(|value| (value, 2)).collect(), max_depth)
    {
        return Err(SchemaError::TooDeep { limit: max_depth });
    }
    Ok(())
}

/// The compact JSON of `schema` with object keys sorted, or `TooLarge` once it exceeds
/// `max_bytes` (writing stops there). serde_json's `Map` is a `BTreeMap` (its `preserve_order`
/// feature is off in this workspace; `canonical_json_sorts_keys_and_is_compact` fails if it gets
/// turned on), so its own compact writer sorts the keys. Recursive: call it after
/// [`check_depth`].
fn canonical_json(schema: &Map<String, Value>, max_bytes: usize) -> Result<String, SchemaError> {
    let mut out = Bounded::new(max_bytes);
    serde_json::to_writer(&mut out, schema)
        .map_err(|_| SchemaError::TooLarge { limit: max_bytes })?;
    // serde_json writes UTF-8 only.
    Ok(String::from_utf8(out.bytes).expect("serde_json writes UTF-8"))
}

/// An in-memory writer that fails rather than hold more than `limit` bytes, so serializing a huge
/// value stops at the limit instead of copying all of it.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl Bounded {
    fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
        }
    }
}

impl io::Write for Bounded {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.bytes.len() + bytes.len() > self.limit {
            return Err(io::Error::other("over the limit"));
        }
        self.bytes.extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The draft a `$schema` URI names: the usual URIs, http or https, with or without the empty
/// fragment.
fn draft_of(uri: &str) -> Option<Draft> {
    let rest = uri
        .strip_prefix("https://")
        .or_else(|| uri.strip_prefix("http://"))?;
    match rest.strip_suffix('#').unwrap_or(rest) {
        "json-schema.org/draft/2020-12/schema" => Some(Draft::Draft202012),
        "json-schema.org/draft/2019-09/schema" => Some(Draft::Draft201909),
        "json-schema.org/draft-07/schema" => Some(Draft::Draft7),
        "json-schema.org/draft-06/schema" => Some(Draft::Draft6),
        "json-schema.org/draft-04/schema" => Some(Draft::Draft4),
        _ => None,
    }
}

/// The draft of `schema` (2020-12 without `$schema`), after checking that every `$schema` in it
/// names a supported dialect and that every reference stays inside it.
///
/// The walk is deliberately blind to where keywords sit: a `$ref` string inside `default`,
/// `const` or `examples` data is checked too. That errs on the side of refusing.
fn check_dialect_and_refs(schema: &Map<String, Value>) -> Result<Draft, SchemaError> {
    let draft = match schema.get("$schema") {
        None => Draft::Draft202012,
        Some(Value::String(uri)) => {
            draft_of(uri).ok_or_else(|| SchemaError::Dialect(uri.clone()))?
        }
        Some(other) => return Err(SchemaError::Dialect(other.to_string())),
    };
    let id_keyword = if draft == Draft::Draft4 { "id" } else { "$id" };

    let mut ids: HashSet<&str> = HashSet::new();
    let mut refs: Vec<&str> = Vec::new();
    let mut objects: Vec<&Map<String, Value>> = vec![schema];
    let mut values: Vec<&Value> = Vec::new();
    loop {
        while let Some(map) = objects.pop() {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$schema", Value::String(uri)) if draft_of(uri).is_none() => {
                        return Err(SchemaError::Dialect(uri.clone()));
                    }
                    ("$ref" | "$dynamicRef" | "$recursiveRef", Value::String(reference)) => {
                        refs.push(reference);
                    }
                    (key, Value::String(id)) if key == id_keyword || key == "$id" => {
                        // The base of the resource: without its fragment (draft-07 allows `...#`).
                        ids.insert(id.split('#').next().unwrap_or_default());
                    }
                    _ => {}
                }
                values.push(value);
            }
        }
        let Some(value) = values.pop() else {
            break;
        };
        match value {
            Value::Object(map) => objects.push(map),
            Value::Array(items) => values.extend(items),
            _ => {}
        }
    }

    for reference in refs {
        // A fragment, or the empty reference, stays in the current resource.
        if reference.is_empty() || reference.starts_with('#') {
            continue;
        }
        let base = reference.split('#').next().unwrap_or_default();
        if !ids.contains(base) {
            return Err(SchemaError::ExternalRef(reference.to_owned()));
        }
    }
    Ok(draft)
}

/// A retriever that refuses everything: references are resolved inside the schema or not at all.
struct NoRetrieval;

impl jsonschema::Retrieve for NoRetrieval {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("{uri} is not inside the schema; external references are never fetched").into())
    }
}

/// Compiles `schema`, whose size and depth were checked, matching patterns with `engine`.
fn build(schema: &Map<String, Value>, engine: PatternEngine) -> Result<Validator, SchemaError> {
    let draft = check_dialect_and_refs(schema)?;
    let schema = Value::Object(schema.clone());
    let options = || {
        jsonschema::options()
            .with_draft(draft)
            .with_retriever(NoRetrieval)
    };
    let built = match engine {
        PatternEngine::Linear => options()
            .with_pattern_options(jsonschema::PatternOptions::regex())
            .build(&schema),
        PatternEngine::Backtracking { backtrack_limit } => options()
            .with_pattern_options(
                jsonschema::PatternOptions::fancy_regex().backtrack_limit(backtrack_limit),
            )
            .build(&schema),
    };
    let error = match built {
        Ok(validator) => {
            return Ok(Validator {
                inner: Arc::new(validator),
            });
        }
        Err(error) => error,
    };
    // A pattern the linear engine refused: if the backtracking engine compiles the schema (only
    // compiles it, nothing is matched), the pattern needs backtracking rather than being wrong.
    if engine == PatternEngine::Linear
        && matches!(error.kind(), ValidationErrorKind::Format { format } if format == "regex")
        && options().build(&schema).is_ok()
    {
        return Err(SchemaError::Pattern {
            path: error.schema_path().as_str().to_owned(),
            pattern: shorten(error.instance()),
        });
    }
    // Against the meta-schema, the "instance" is the schema: say where, quote it short.
    let path = error.instance_path().as_str();
    let message = error.masked_with(shorten(error.instance()));
    Err(SchemaError::Invalid(if path.is_empty() {
        message.to_string()
    } else {
        format!("{path}: {message}")
    }))
}

/// A violation from a jsonschema error; the offending value is shortened in the message.
fn violation(error: &jsonschema::ValidationError<'_>) -> Violation {
    let path = error.instance_path().as_str();
    if let ValidationErrorKind::Required {
        property: Value::String(name),
    } = error.kind()
    {
        let mut path = path.to_owned();
        path.push('/');
        path.push_str(&name.replace('~', "~0").replace('/', "~1"));
        return Violation {
            path,
            message: "required property missing".to_owned(),
        };
    }
    Violation {
        path: path.to_owned(),
        message: error.masked_with(shorten(error.instance())).to_string(),
    }
}

/// How long a value quoted in a message may be, in bytes of compact JSON.
const QUOTED_BYTES: usize = 60;

/// `value` as compact JSON if short, else a short description of it.
fn shorten(value: &Value) -> String {
    // A huge (or deeply nested) value is not serialized beyond `QUOTED_BYTES`.
    let mut out = Bounded::new(QUOTED_BYTES);
    if serde_json::to_writer(&mut out, value).is_ok() {
        return String::from_utf8_lossy(&out.bytes).into_owned();
    }
    match value {
        Value::String(text) => {
            let head: String = text.chars().take(40).collect();
            let quoted = serde_json::to_string(&head).unwrap_or_default();
            let open = quoted.strip_suffix('"').unwrap_or(&quoted);
            format!("{open}…\" ({} characters)", text.chars().count())
        }
        Value::Array(items) => format!(
            "the array of {} item{}",
            items.len(),
            if items.len() == 1 { "" } else { "s" }
        ),
        Value::Object(map) => format!(
            "the object with {} propert{}",
            map.len(),
            if map.len() == 1 { "y" } else { "ies" }
        ),
        // Scalars other than strings are short; just in case.
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn cache() -> SchemaCache {
        SchemaCache::new(SchemaLimits::default())
    }

    fn compile_ok(schema: Value) -> Validator {
        cache().validator(&object(schema)).expect("compiles")
    }

    fn compile_err(schema: Value) -> SchemaError {
        cache()
            .validator(&object(schema))
            .expect_err("does not compile")
    }

    fn violation(path: &str, message: &str) -> Violation {
        Violation {
            path: path.to_owned(),
            message: message.to_owned(),
        }
    }

    /// A value nested `levels` deep (`{"items": {"items": ...}}`), built without recursion.
    fn nested(levels: usize) -> Value {
        let mut value = json!({});
        for _ in 1..levels {
            let mut map = Map::new();
            map.insert("items".to_owned(), value);
            value = Value::Object(map);
        }
        value
    }

    /// Drops a deeply nested value without recursion (serde_json's drop recurses).
    fn dismantle(value: Value) {
        let mut pending = vec![value];
        while let Some(value) = pending.pop() {
            match value {
                Value::Object(map) => pending.extend(map.into_iter().map(|(_, child)| child)),
                Value::Array(items) => pending.extend(items),
                _ => {}
            }
        }
    }

    fn arguments_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "count": {"type": "integer", "maximum": 3},
                "tags": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["name"]
        })
    }

    #[test]
    fn a_valid_value_has_no_violations() {
        let validator = compile_ok(arguments_schema());
        let value = json!({"name": "x", "count": 2, "tags": ["a"]});
        assert_eq!(validator.validate(&value, 10), vec![]);
    }

    #[test]
    fn an_invalid_value_is_described_with_json_pointers_and_clear_messages() {
        let validator = compile_ok(arguments_schema());
        let value = json!({"count": 5, "tags": ["a", 7]});
        let mut violations = validator.validate(&value, 10);
        violations.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(
            violations,
            vec![
                violation("/count", "5 is greater than the maximum of 3"),
                violation("/name", "required property missing"),
                violation("/tags/1", r#"7 is not of type "string""#),
            ]
        );
    }

    #[test]
    fn a_wrong_type_at_the_root_has_the_empty_path() {
        let validator = compile_ok(arguments_schema());
        assert_eq!(
            validator.validate(&json!([1, 2]), 10),
            vec![violation("", r#"[1,2] is not of type "object""#)]
        );
    }

    #[test]
    fn a_missing_property_with_special_characters_is_an_escaped_pointer() {
        let validator = compile_ok(json!({"required": ["a/b~c"]}));
        assert_eq!(
            validator.validate(&json!({}), 10),
            vec![violation("/a~1b~0c", "required property missing")]
        );
    }

    #[test]
    fn validation_stops_at_the_maximum_number_of_violations() {
        let validator = compile_ok(json!({"type": "array", "items": {"type": "string"}}));
        let value = Value::Array((0..1000).map(Value::from).collect());
        assert_eq!(validator.validate(&value, 3).len(), 3);
        assert_eq!(validator.validate(&value, 0).len(), 1);
        assert_eq!(validator.validate(&value, 5000).len(), 1000);
    }

    #[test]
    fn a_long_offending_value_is_shortened_in_the_message() {
        let validator = compile_ok(json!({"properties": {
            "s": {"type": "integer"},
            "a": {"type": "object"},
            "o": {"type": "array"}
        }}));
        let value = json!({
            "s": "x".repeat(10_000),
            "a": (0..1000).collect::<Vec<_>>(),
            "o": {"k1": "v".repeat(100), "k2": 1}
        });
        let mut violations = validator.validate(&value, 10);
        violations.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(
            violations,
            vec![
                violation("/a", r#"the array of 1000 items is not of type "object""#),
                violation(
                    "/o",
                    r#"the object with 2 properties is not of type "array""#
                ),
                violation(
                    "/s",
                    &format!(
                        r#""{}…" (10000 characters) is not of type "integer""#,
                        "x".repeat(40)
                    )
                ),
            ]
        );
    }

    #[test]
    fn formats_are_annotations_in_2020_12_and_assertions_in_draft_07() {
        let modern = compile_ok(json!({"format": "email"}));
        assert_eq!(modern.validate(&json!("not an email"), 10), vec![]);
        let draft7 = compile_ok(json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "format": "email"
        }));
        assert_eq!(
            draft7.validate(&json!("not an email"), 10),
            vec![violation("", r#""not an email" is not a "email""#)]
        );
    }

    #[test]
    fn the_cache_compiles_a_schema_once_whatever_its_key_order() {
        let cache = cache();
        let one =
            object(json!({"type": "object", "required": ["a"], "properties": {"a": {}, "b": {}}}));
        // The same schema, its keys inserted in reverse order.
        let mut other = Map::new();
        let mut properties = Map::new();
        properties.insert("b".to_owned(), json!({}));
        properties.insert("a".to_owned(), json!({}));
        other.insert("properties".to_owned(), Value::Object(properties));
        other.insert("required".to_owned(), json!(["a"]));
        other.insert("type".to_owned(), json!("object"));

        let first = cache.validator(&one).unwrap();
        let second = cache.validator(&other).unwrap();
        assert_eq!(cache.len(), 1);
        assert!(Arc::ptr_eq(&first.inner, &second.inner));
        assert!(Arc::ptr_eq(
            &first.inner,
            &cache.validator(&one).unwrap().inner
        ));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn canonical_json_sorts_keys_and_is_compact() {
        let schema = object(json!({"b": [1, {"d": null, "c": "x\"y"}], "a": true}));
        assert_eq!(
            canonical_json(&schema, 1000).unwrap(),
            r#"{"a":true,"b":[1,{"c":"x\"y","d":null}]}"#
        );
    }

    #[test]
    fn canonical_json_stops_at_the_limit() {
        let schema = object(json!({"a": "x".repeat(100)}));
        let exact = canonical_json(&schema, 1000).unwrap().len();
        assert_eq!(canonical_json(&schema, exact).unwrap().len(), exact);
        assert_eq!(
            canonical_json(&schema, exact - 1).unwrap_err(),
            SchemaError::TooLarge { limit: exact - 1 }
        );
    }

    #[test]
    fn a_validator_compiled_without_a_cache_checks_like_the_cache() {
        let limits = SchemaLimits {
            max_bytes: 100,
            max_depth: 4,
            ..SchemaLimits::default()
        };
        let validator =
            Validator::compile(&object(arguments_schema()), SchemaLimits::default()).unwrap();
        // Compiled once, validated many times.
        for n in 0..3 {
            assert_eq!(
                validator.validate(&json!({"name": "Paris", "count": n}), 1),
                vec![]
            );
        }
        assert_eq!(validator.validate(&json!({"count": 1}), 1).len(), 1);
        assert_eq!(
            Validator::compile(&object(json!({"description": "x".repeat(200)})), limits)
                .unwrap_err(),
            SchemaError::TooLarge { limit: 100 }
        );
        assert_eq!(
            Validator::compile(&object(nested(10)), limits).unwrap_err(),
            SchemaError::TooDeep { limit: 4 }
        );
        assert!(matches!(
            Validator::compile(
                &object(json!({"$ref": "https://example.com/s.json"})),
                limits
            ),
            Err(SchemaError::ExternalRef(_))
        ));
        assert!(matches!(
            Validator::compile(&object(json!({"pattern": "(a)\\1"})), limits),
            Err(SchemaError::Pattern { .. })
        ));
    }

    #[test]
    fn the_cache_evicts_the_least_recently_used_beyond_its_bound() {
        let cache = SchemaCache::new(SchemaLimits {
            cache_entries: 3,
            ..SchemaLimits::default()
        });
        let schema = |n: u64| object(json!({"maximum": n}));
        let zero = cache.validator(&schema(0)).unwrap();
        cache.validator(&schema(1)).unwrap();
        cache.validator(&schema(2)).unwrap();
        // 0 is used again, so 1 is now the least recently used.
        assert!(Arc::ptr_eq(
            &zero.inner,
            &cache.validator(&schema(0)).unwrap().inner
        ));
        cache.validator(&schema(3)).unwrap();
        assert_eq!(cache.len(), 3);
        assert!(Arc::ptr_eq(
            &zero.inner,
            &cache.validator(&schema(0)).unwrap().inner
        ));
        // 1 was evicted: it compiles again, and still works.
        let one = cache.validator(&schema(1)).unwrap();
        assert_eq!(cache.len(), 3);
        assert_eq!(one.validate(&json!(1), 10), vec![]);
        assert_eq!(
            one.validate(&json!(2), 10),
            vec![violation("", "2 is greater than the maximum of 1")]
        );
        for n in 0..100 {
            let validator = cache.validator(&schema(n)).unwrap();
            assert_eq!(validator.validate(&json!(n), 1), vec![]);
        }
        assert_eq!(cache.len(), 3);
        // A validator handed out before its eviction keeps working.
        assert_eq!(zero.validate(&json!(0), 1), vec![]);
        assert_eq!(zero.validate(&json!(1), 1).len(), 1);
    }

    #[test]
    fn a_cache_without_entries_compiles_every_time() {
        let cache = SchemaCache::new(SchemaLimits {
            cache_entries: 0,
            ..SchemaLimits::default()
        });
        let schema = object(json!({"type": "string"}));
        let first = cache.validator(&schema).unwrap();
        let second = cache.validator(&schema).unwrap();
        assert_eq!(cache.len(), 0);
        assert!(!Arc::ptr_eq(&first.inner, &second.inner));
    }

    #[test]
    fn clones_of_the_cache_share_its_entries_across_threads() {
        let cache = cache();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    for n in 0..10 {
                        let validator = cache.validator(&object(json!({"minimum": n}))).unwrap();
                        assert_eq!(validator.validate(&json!(n), 1), vec![]);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(cache.len(), 10);
    }

    #[test]
    fn a_schema_larger_than_the_limit_is_too_large() {
        let cache = SchemaCache::new(SchemaLimits {
            max_bytes: 100,
            ..SchemaLimits::default()
        });
        let fits = object(json!({"description": "x".repeat(70)}));
        assert!(cache.validator(&fits).is_ok());
        let long_string = object(json!({"description": "x".repeat(1000)}));
        assert_eq!(
            cache.validator(&long_string).unwrap_err(),
            SchemaError::TooLarge { limit: 100 }
        );
        let many_keys = object(json!({"enum": (0..100).collect::<Vec<_>>()}));
        assert_eq!(
            cache.validator(&many_keys).unwrap_err(),
            SchemaError::TooLarge { limit: 100 }
        );
        let default_limit = object(json!({"description": "x".repeat(300 * 1024)}));
        assert_eq!(
            compile_err(Value::Object(default_limit)),
            SchemaError::TooLarge { limit: 256 * 1024 }
        );
    }

    #[test]
    fn a_schema_nested_ten_thousand_levels_is_too_deep_without_overflowing_the_stack() {
        let cache = cache();
        let schema = nested(10_000);
        let result = cache.validator(schema.as_object().unwrap());
        dismantle(schema);
        assert_eq!(result.unwrap_err(), SchemaError::TooDeep { limit: 64 });
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_depth_limit_counts_the_schema_object_as_level_one() {
        let cache = SchemaCache::new(SchemaLimits {
            max_depth: 3,
            ..SchemaLimits::default()
        });
        assert!(cache.validator(nested(3).as_object().unwrap()).is_ok());
        assert_eq!(
            cache.validator(nested(4).as_object().unwrap()).unwrap_err(),
            SchemaError::TooDeep { limit: 3 }
        );
        // Arrays count too: schema > enum > [ ] > [ ] > [ ].
        assert_eq!(
            cache
                .validator(&object(json!({"enum": [[[1]]]})))
                .unwrap_err(),
            SchemaError::TooDeep { limit: 3 }
        );
    }

    #[test]
    fn an_unknown_dialect_is_refused() {
        let error = compile_err(json!({"$schema": "https://json-schema.org/draft/2099-01/schema"}));
        assert_eq!(
            error,
            SchemaError::Dialect("https://json-schema.org/draft/2099-01/schema".to_owned())
        );
        assert_eq!(
            error.to_string(),
            "unsupported JSON Schema dialect \"https://json-schema.org/draft/2099-01/schema\": \
             use 2020-12, 2019-09, draft-07, draft-06 or draft-04"
        );
        assert_eq!(
            compile_err(json!({"$schema": 7})),
            SchemaError::Dialect("7".to_owned())
        );
        // Nor can an embedded resource declare one.
        assert_eq!(
            compile_err(json!({"$defs": {"x": {
                "$id": "https://example.com/x",
                "$schema": "https://example.com/meta"
            }}})),
            SchemaError::Dialect("https://example.com/meta".to_owned())
        );
    }

    #[test]
    fn the_supported_dialects_are_accepted_in_their_usual_spellings() {
        for (uri, draft) in [
            (
                "https://json-schema.org/draft/2020-12/schema",
                Draft::Draft202012,
            ),
            (
                "http://json-schema.org/draft/2020-12/schema#",
                Draft::Draft202012,
            ),
            (
                "https://json-schema.org/draft/2019-09/schema",
                Draft::Draft201909,
            ),
            ("http://json-schema.org/draft-07/schema#", Draft::Draft7),
            ("http://json-schema.org/draft-07/schema", Draft::Draft7),
            ("https://json-schema.org/draft-07/schema#", Draft::Draft7),
            ("http://json-schema.org/draft-06/schema#", Draft::Draft6),
            ("http://json-schema.org/draft-04/schema#", Draft::Draft4),
        ] {
            let validator = compile_ok(json!({"$schema": uri, "type": "string"}));
            assert_eq!(validator.inner.draft(), draft, "{uri}");
            assert_eq!(validator.validate(&json!("x"), 1), vec![], "{uri}");
            assert_eq!(validator.validate(&json!(1), 1).len(), 1, "{uri}");
        }
        assert_eq!(compile_ok(json!({})).inner.draft(), Draft::Draft202012);
    }

    #[test]
    fn external_references_are_refused() {
        for reference in [
            "https://example.com/s.json",
            "file:///etc/passwd",
            "other.json#/x",
            "/etc/passwd",
        ] {
            assert_eq!(
                compile_err(json!({"properties": {"a": {"$ref": reference}}})),
                SchemaError::ExternalRef(reference.to_owned()),
            );
        }
        // The empty reference is the current resource: local.
        assert!(
            cache()
                .validator(&object(json!({"$defs": {"a": {"$ref": ""}}})))
                .is_ok()
        );
        assert_eq!(
            compile_err(json!({"$dynamicRef": "https://example.com/s.json#meta"})),
            SchemaError::ExternalRef("https://example.com/s.json#meta".to_owned()),
        );
        assert_eq!(
            compile_err(json!({"$ref": "file:///etc/passwd"})).to_string(),
            "the schema references \"file:///etc/passwd\", which is not inside the schema; \
             external references are never fetched"
        );
    }

    #[test]
    fn a_reference_to_an_id_declared_in_the_schema_is_local() {
        let validator = compile_ok(json!({
            "$id": "https://example.com/root.json",
            "properties": {"a": {"$ref": "https://example.com/item.json"}},
            "$defs": {"item": {"$id": "https://example.com/item.json", "type": "integer"}}
        }));
        assert_eq!(validator.validate(&json!({"a": 1}), 1), vec![]);
        assert_eq!(
            validator.validate(&json!({"a": "x"}), 1),
            vec![violation("/a", r#""x" is not of type "integer""#)]
        );
    }

    #[test]
    fn the_retriever_refuses_what_slips_past_the_reference_check() {
        // `item.json` is a declared `$id` (of `https://b.example/item.json`), but the reference
        // resolves against another base, to `https://a.example/item.json`, which the compiler
        // would have to fetch.
        let error = compile_err(json!({
            "$id": "https://a.example/root.json",
            "properties": {"a": {"$ref": "item.json"}},
            "$defs": {"b": {
                "$id": "https://b.example/",
                "$defs": {"item": {"$id": "item.json"}}
            }}
        }));
        let SchemaError::Invalid(message) = error else {
            panic!("not Invalid: {error:?}");
        };
        assert!(message.contains("never fetched"), "{message}");
    }

    #[test]
    fn a_local_recursive_reference_validates_a_tree() {
        let validator = compile_ok(json!({
            "$ref": "#/$defs/node",
            "$defs": {"node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}
                },
                "required": ["value"],
                "additionalProperties": false
            }}
        }));
        let tree = json!({"value": 1, "children": [
            {"value": 2, "children": []},
            {"value": 3, "children": [{"value": 4}]}
        ]});
        assert_eq!(validator.validate(&tree, 10), vec![]);
        let bad = json!({"value": 1, "children": [
            {"value": 2},
            {"value": 3, "children": [{"value": "four"}, {}]}
        ]});
        let mut violations = validator.validate(&bad, 10);
        violations.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(
            violations,
            vec![
                violation(
                    "/children/1/children/0/value",
                    r#""four" is not of type "integer""#
                ),
                violation("/children/1/children/1/value", "required property missing"),
            ]
        );
    }

    #[test]
    fn a_draft_07_recursive_reference_with_definitions_works() {
        let validator = compile_ok(json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"list": {
                "type": ["object", "null"],
                "properties": {"next": {"$ref": "#/definitions/list"}}
            }},
            "$ref": "#/definitions/list"
        }));
        assert_eq!(
            validator.validate(&json!({"next": {"next": null}}), 10),
            vec![]
        );
        assert_eq!(
            validator.validate(&json!({"next": {"next": 1}}), 10),
            vec![violation(
                "/next/next",
                r#"1 is not of types "null", "object""#
            )]
        );
    }

    #[test]
    fn a_schema_jsonschema_rejects_is_invalid() {
        assert_eq!(
            compile_err(json!({"properties": {"a": {"type": "wrong"}}})),
            SchemaError::Invalid(
                "/properties/a/type: \"wrong\" is not valid under any of the schemas listed in \
                 the 'anyOf' keyword"
                    .to_owned()
            )
        );
        let huge = json!({"minimum": "x".repeat(10_000)});
        let SchemaError::Invalid(message) = compile_err(huge) else {
            panic!("not Invalid");
        };
        assert!(message.starts_with("/minimum: "), "{message}");
        assert!(message.len() < 200, "{message}");
        assert!(matches!(
            compile_err(json!({"$ref": "#/$defs/missing"})),
            SchemaError::Invalid(_)
        ));
        assert!(matches!(
            compile_err(json!({"pattern": "("})),
            SchemaError::Invalid(_)
        ));
    }

    #[test]
    fn a_value_nested_too_deep_is_a_violation_not_a_stack_overflow() {
        let validator = compile_ok(json!({
            "$ref": "#/$defs/node",
            "$defs": {"node": {
                "type": "object",
                "properties": {"items": {"$ref": "#/$defs/node"}}
            }}
        }));
        let fits = nested(MAX_VALUE_DEPTH);
        assert_eq!(validator.validate(&fits, 1), vec![]);
        let deep = nested(10_000);
        let violations = validator.validate(&deep, 1);
        dismantle(deep);
        assert_eq!(
            violations,
            vec![violation(
                "",
                "the value nests objects and arrays deeper than 256 levels"
            )]
        );
        // Arrays count too, and `uniqueItems` (which compares items recursively) is guarded.
        let unique = compile_ok(json!({"uniqueItems": true}));
        let deep = || {
            let mut value = json!([]);
            for _ in 0..10_000 {
                value = Value::Array(vec![value]);
            }
            value
        };
        // Cloning or dropping such a value recurses: build it twice, dismantle it.
        let twice = Value::Array(vec![deep(), deep()]);
        assert_eq!(unique.validate(&twice, 1).len(), 1);
        dismantle(twice);
    }

    #[test]
    fn a_violation_displays_its_path_then_its_message() {
        assert_eq!(
            violation("/count", "5 is greater than the maximum of 3").to_string(),
            "/count: 5 is greater than the maximum of 3"
        );
        assert_eq!(
            violation("", r#"[] is not of type "object""#).to_string(),
            r#"[] is not of type "object""#
        );
    }

    #[test]
    fn the_cache_is_empty_until_a_schema_compiles() {
        let cache = cache();
        assert!(cache.is_empty());
        assert!(cache.validator(&object(json!({"$ref": "x.json"}))).is_err());
        assert!(cache.is_empty());
        cache.validator(&object(json!({}))).unwrap();
        assert!(!cache.is_empty());
    }

    #[test]
    fn finding_8_patterns_needing_backtracking_are_refused_by_the_default_linear_engine() {
        // A backreference inside a repetition: fancy-regex would backtrack on it.
        let backreference = json!({
            "type": "object",
            "properties": {"v": {"type": "array", "items": {
                "type": "string", "pattern": "^(a|aa)+\\1$"
            }}}
        });
        assert_eq!(SchemaLimits::default().patterns, PatternEngine::Linear);
        match compile_err(backreference.clone()) {
            SchemaError::Pattern { path, pattern } => {
                assert_eq!(path, "/properties/v/items/pattern");
                assert_eq!(pattern, r#""^(a|aa)+\\1$""#);
            }
            other => panic!("not a pattern error: {other:?}"),
        }
        // Look-around, in patternProperties too.
        assert!(matches!(
            compile_err(json!({"pattern": "^(?=a)a+$"})),
            SchemaError::Pattern { .. }
        ));
        assert!(matches!(
            compile_err(json!({"patternProperties": {"^(?!x)": {"type": "string"}}})),
            SchemaError::Pattern { .. }
        ));
        // A pattern that is wrong for every engine stays an invalid schema.
        assert!(matches!(
            compile_err(json!({"pattern": "("})),
            SchemaError::Invalid(_)
        ));
        // The engine that backtracks is there for an application's own schemas.
        let limits = SchemaLimits {
            patterns: PatternEngine::Backtracking {
                backtrack_limit: 10_000,
            },
            ..SchemaLimits::default()
        };
        let validator = SchemaCache::new(limits)
            .validator(&object(json!({"pattern": "^(a)\\1$"})))
            .expect("compiles with backtracking");
        assert!(validator.validate(&json!("aa"), 1).is_empty());
        assert_eq!(validator.validate(&json!("ab"), 1).len(), 1);
    }

    #[test]
    fn finding_8_the_validator_matches_with_the_linear_engine() {
        // Catastrophic for a backtracking engine that does not delegate (nested quantifiers, a
        // string that almost matches); the linear engine answers the same as any engine.
        let validator = compile_ok(json!({
            "type": "array",
            "items": {"type": "string", "pattern": "^(a+)+$"}
        }));
        let almost = format!("{}!", "a".repeat(100_000));
        let value = json!(["aaaa", almost]);
        let violations = validator.validate(&value, 8);
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].path, "/1");
        // Look-ahead is refused by this validator's engine: it is the linear one.
        assert!(matches!(
            cache().validator(&object(json!({"pattern": "(?=a)"}))),
            Err(SchemaError::Pattern { .. })
        ));
    }

    #[test]
    fn finding_8_one_violation_is_asked_for_with_one_walk() {
        let validator = compile_ok(arguments_schema());
        let value = json!({"name": 1, "count": 9, "tags": [1, 2]});
        assert_eq!(validator.validate(&value, 1).len(), 1);
        assert_eq!(validator.validate(&value, 0).len(), 1);
        assert_eq!(validator.validate(&value, 8).len(), 4);
        assert!(validator.validate(&json!({"name": "x"}), 1).is_empty());
    }
}
