//! An optional cache of the results the modern era marks cacheable (`tools/list`, `prompts/list`,
//! `resources/list`, `resources/templates/list`, `resources/read`), honouring `ttlMs` and
//! `cacheScope`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use modelctx_types::consts::{
    PromptsList, ResourcesList, ResourcesRead, ResourcesTemplatesList, ToolsList,
};
use serde_json::value::RawValue;

/// The methods whose results may be cached.
pub(crate) const CACHEABLE: &[&str] = &[
    ToolsList::VALUE,
    PromptsList::VALUE,
    ResourcesList::VALUE,
    ResourcesTemplatesList::VALUE,
    ResourcesRead::VALUE,
];

/// A cache of cacheable results, shareable between clients (clone it into several
/// [`ClientBuilder::cache`](crate::ClientBuilder::cache) calls).
///
/// * A result is kept for its `ttlMs` (absent, zero or negative: not kept), measured on the tokio
///   runtime's clock (so a paused test clock holds it, and advancing it expires it). Results of
///   servers that send no `ttlMs` (every legacy server) are never cached.
/// * `cacheScope: "public"` results are shared by every client of the same server using this
///   cache; `"private"` ones only within the same authorization context
///   ([`ClientBuilder::cache_context`](crate::ClientBuilder::cache_context); by default each client
///   is its own context).
/// * A list-changed notification drops the cached pages of that list; a resource update drops
///   that resource. `input_required` results are never cached.
/// * At most `capacity` entries, and at most [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES)
///   (64 MiB; [`max_bytes`](Self::max_bytes) changes it) of results and their params, measured on
///   their JSON: when full, expired entries go first, then the ones closest to expiry. A result
///   larger than the byte cap is not kept.
/// * Its `Debug` shows its size, never what it holds (results and params may be private).
#[derive(Clone)]
pub struct ResultCache {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for ResultCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("ResultCache")
            .field("capacity", &inner.capacity)
            .field("max_bytes", &inner.max_bytes)
            .field("len", &inner.entries.len())
            .field("bytes", &inner.bytes)
            .finish()
    }
}

struct Inner {
    capacity: usize,
    max_bytes: usize,
    /// The bytes of the entries: their results' and params' JSON.
    bytes: usize,
    entries: HashMap<Key, Entry>,
}

impl Inner {
    fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.entries.remove(key) {
            self.bytes -= entry.size;
        }
    }

    /// Drops expired entries, then those closest to expiry, until one of `size` bytes fits.
    fn make_room(&mut self, size: usize, now: Instant) {
        let full = |inner: &Inner| {
            inner.entries.len() >= inner.capacity || inner.bytes + size > inner.max_bytes
        };
        if !full(self) {
            return;
        }
        self.entries.retain(|_, e| e.expires > now);
        self.bytes = self.entries.values().map(|e| e.size).sum();
        while full(self) {
            let Some(soonest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.expires)
                .map(|(k, _)| k.clone())
            else {
                return;
            };
            self.remove(&soonest);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    server: Arc<str>,
    /// `None` for public entries.
    context: Option<Arc<str>>,
    method: &'static str,
    /// The params (without `_meta`) as JSON text.
    params: String,
}

struct Entry {
    result: Arc<RawValue>,
    expires: Instant,
    /// The bytes of its result's and params' JSON.
    size: usize,
}

/// Where a client's entries live in a shared cache.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    pub(crate) server: Arc<str>,
    pub(crate) context: Arc<str>,
}

impl ResultCache {
    /// The default cap on the bytes a cache holds: 64 MiB.
    pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

    /// A cache of at most `capacity` results and [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES).
    pub fn new(capacity: usize) -> Self {
        ResultCache {
            inner: Arc::new(Mutex::new(Inner {
                capacity,
                max_bytes: Self::DEFAULT_MAX_BYTES,
                bytes: 0,
                entries: HashMap::new(),
            })),
        }
    }

    /// Caps the bytes held (results and their params, as JSON; default
    /// [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES)), evicting what no longer fits.
    pub fn max_bytes(self, max_bytes: usize) -> Self {
        {
            let mut inner = self.lock();
            inner.max_bytes = max_bytes;
            inner.make_room(0, crate::driver::now());
        }
        self
    }

    /// The bytes held: the JSON of the results and of their params.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// How many results are cached (expired ones included until they are evicted).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops everything.
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.bytes = 0;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(scope: &Scope, private: bool, method: &'static str, params: &str) -> Key {
        Key {
            server: scope.server.clone(),
            context: private.then(|| scope.context.clone()),
            method,
            params: params.to_owned(),
        }
    }

    /// A fresh cached result for this call, private first.
    pub(crate) fn get(
        &self,
        scope: &Scope,
        method: &'static str,
        params: &str,
        now: Instant,
    ) -> Option<Arc<RawValue>> {
        let inner = self.lock();
        [true, false].into_iter().find_map(|private| {
            let entry = inner
                .entries
                .get(&Self::key(scope, private, method, params))?;
            (entry.expires > now).then(|| entry.result.clone())
        })
    }

    /// Keeps `result` if it says it may be kept.
    pub(crate) fn put(
        &self,
        scope: &Scope,
        method: &'static str,
        params: &str,
        result: &RawValue,
        now: Instant,
    ) {
        #[derive(serde::Deserialize)]
        struct Hints {
            #[serde(rename = "ttlMs")]
            ttl_ms: Option<i64>,
            #[serde(rename = "cacheScope")]
            cache_scope: Option<String>,
            #[serde(rename = "resultType")]
            result_type: Option<String>,
        }
        let Ok(hints) = serde_json::from_str::<Hints>(result.get()) else {
            return;
        };
        let ttl = hints.ttl_ms.unwrap_or(0);
        if ttl <= 0
            || hints
                .result_type
                .as_deref()
                .is_some_and(|t| t != "complete")
        {
            return;
        }
        let private = hints.cache_scope.as_deref() != Some("public");
        let key = Self::key(scope, private, method, params);
        let Ok(result) = RawValue::from_string(result.get().to_owned()) else {
            return;
        };
        let size = result.get().len() + key.params.len();
        let mut inner = self.lock();
        inner.remove(&key);
        if inner.capacity == 0 || size > inner.max_bytes {
            return;
        }
        inner.make_room(size, now);
        let expires = now + Duration::from_millis(u64::try_from(ttl).unwrap_or(0));
        inner.bytes += size;
        inner.entries.insert(
            key,
            Entry {
                result: Arc::from(result),
                expires,
                size,
            },
        );
    }

    /// Drops the cached results of `method` from `server` (all params), or only those whose
    /// params contain `needle`.
    pub(crate) fn invalidate(&self, server: &str, method: &str, needle: Option<&str>) {
        let mut inner = self.lock();
        inner.entries.retain(|k, _| {
            !(&*k.server == server
                && k.method == method
                && needle.is_none_or(|n| k.params.contains(n)))
        });
        inner.bytes = inner.entries.values().map(|e| e.size).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    fn scope(context: &str) -> Scope {
        Scope {
            server: "srv".into(),
            context: context.into(),
        }
    }

    #[test]
    fn ttl_and_scope_are_honoured() {
        let cache = ResultCache::new(10);
        let now = Instant::now();
        let (a, b) = (scope("a"), scope("b"));
        let public = raw(r#"{"tools":[],"ttlMs":1000,"cacheScope":"public"}"#);
        cache.put(&a, "tools/list", "{}", &public, now);
        assert!(
            cache.get(&b, "tools/list", "{}", now).is_some(),
            "public is shared"
        );
        assert!(
            cache
                .get(&a, "tools/list", "{}", now + Duration::from_secs(2))
                .is_none(),
            "expired"
        );
        let private = raw(r#"{"prompts":[],"ttlMs":1000,"cacheScope":"private"}"#);
        cache.put(&a, "prompts/list", "{}", &private, now);
        assert!(cache.get(&a, "prompts/list", "{}", now).is_some());
        assert!(
            cache.get(&b, "prompts/list", "{}", now).is_none(),
            "private stays"
        );
        for never in [
            r#"{"tools":[]}"#,
            r#"{"tools":[],"ttlMs":0}"#,
            r#"{"tools":[],"ttlMs":-5}"#,
            r#"{"resultType":"input_required","ttlMs":100}"#,
        ] {
            cache.put(&a, "resources/read", never, &raw(never), now);
            assert!(
                cache.get(&a, "resources/read", never, now).is_none(),
                "{never}"
            );
        }
        cache.invalidate("srv", "tools/list", None);
        assert!(cache.get(&b, "tools/list", "{}", now).is_none());
    }

    #[test]
    fn the_capacity_holds() {
        let cache = ResultCache::new(3);
        let now = Instant::now();
        for i in 0..10 {
            let result = raw(&format!(r#"{{"contents":[],"ttlMs":{}}}"#, 1000 + i));
            cache.put(&scope("a"), "resources/read", &i.to_string(), &result, now);
            assert!(cache.len() <= 3);
        }
        // The longest-lived ones stay.
        assert!(cache.get(&scope("a"), "resources/read", "9", now).is_some());
        assert!(cache.get(&scope("a"), "resources/read", "0", now).is_none());
    }

    #[test]
    fn finding_9_the_byte_cap_holds_and_evicts_those_closest_to_expiry() {
        let cache = ResultCache::new(100).max_bytes(1000);
        let now = Instant::now();
        let result = |i: usize| {
            let padding = "x".repeat(200);
            raw(&format!(
                r#"{{"contents":[],"p":"{padding}","ttlMs":{}}}"#,
                1000 + i
            ))
        };
        for i in 0..10 {
            cache.put(
                &scope("a"),
                "resources/read",
                &i.to_string(),
                &result(i),
                now,
            );
            assert!(cache.bytes() <= 1000, "{}", cache.bytes());
        }
        assert_eq!(cache.len(), 4, "four of about 240 bytes fit in 1000");
        assert!(cache.get(&scope("a"), "resources/read", "9", now).is_some());
        assert!(cache.get(&scope("a"), "resources/read", "0", now).is_none());
        // One larger than the cap is not kept, and evicts nothing.
        let huge = raw(&format!(
            r#"{{"contents":[],"p":"{}","ttlMs":5000}}"#,
            "y".repeat(2000)
        ));
        cache.put(&scope("a"), "resources/read", "huge", &huge, now);
        assert!(
            cache
                .get(&scope("a"), "resources/read", "huge", now)
                .is_none()
        );
        assert_eq!(cache.len(), 4);
        // Replacing an entry does not count it twice; invalidation and clear give bytes back.
        cache.put(&scope("a"), "resources/read", "9", &result(9), now);
        assert_eq!(cache.len(), 4);
        let held = cache.bytes();
        cache.invalidate("srv", "resources/read", Some("9"));
        assert!(cache.bytes() < held);
        cache.clear();
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
    }

    #[test]
    fn finding_22_the_debug_of_a_cache_shows_no_key_or_result() {
        let cache = ResultCache::new(10);
        let secret_scope = Scope {
            server: "stdio:server API_TOKEN=s3cret".into(),
            context: "s3cret-context".into(),
        };
        let result = raw(r#"{"contents":[{"text":"s3cret-text"}],"ttlMs":1000}"#);
        cache.put(
            &secret_scope,
            "resources/read",
            "{\"uri\":\"s3cret-uri\"}",
            &result,
            Instant::now(),
        );
        assert_eq!(cache.len(), 1);
        let debug = format!("{cache:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("len: 1"), "{debug}");
    }
}
