//! An optional cache of the results the modern era marks cacheable (`tools/list`, `prompts/list`,
//! `resources/list`, `resources/templates/list`, `resources/read`), honouring `ttlMs` and
//! `cacheScope`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;

/// The methods whose results may be cached.
pub(crate) const CACHEABLE: &[&str] = &[
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// A cache of cacheable results, shareable between clients (clone it into several
/// [`ClientBuilder::cache`](crate::ClientBuilder::cache) calls).
///
/// * A result is kept for its `ttlMs` (absent, zero or negative: not kept). Results of servers that
///   send no `ttlMs` (every legacy server) are never cached.
/// * `cacheScope: "public"` results are shared by every client of the same server using this
///   cache; `"private"` ones only within the same authorization context
///   ([`ClientBuilder::cache_context`](crate::ClientBuilder::cache_context); by default each client
///   is its own context).
/// * A list-changed notification drops the cached pages of that list; a resource update drops
///   that resource. `input_required` results are never cached.
/// * At most `capacity` entries: when full, expired entries go first, then the one closest to
///   expiry.
#[derive(Debug, Clone)]
pub struct ResultCache {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    capacity: usize,
    entries: HashMap<Key, Entry>,
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

#[derive(Debug)]
struct Entry {
    result: Arc<RawValue>,
    expires: Instant,
}

/// Where a client's entries live in a shared cache.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    pub(crate) server: Arc<str>,
    pub(crate) context: Arc<str>,
}

impl ResultCache {
    /// A cache of at most `capacity` results.
    pub fn new(capacity: usize) -> Self {
        ResultCache {
            inner: Arc::new(Mutex::new(Inner {
                capacity,
                entries: HashMap::new(),
            })),
        }
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
        self.lock().entries.clear();
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
        let mut inner = self.lock();
        if inner.capacity == 0 {
            return;
        }
        if inner.entries.len() >= inner.capacity && !inner.entries.contains_key(&key) {
            inner.entries.retain(|_, e| e.expires > now);
            if inner.entries.len() >= inner.capacity
                && let Some(soonest) = inner
                    .entries
                    .iter()
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(k, _)| k.clone())
            {
                inner.entries.remove(&soonest);
            }
        }
        let expires = now + Duration::from_millis(u64::try_from(ttl).unwrap_or(0));
        inner.entries.insert(
            key,
            Entry {
                result: Arc::from(result),
                expires,
            },
        );
    }

    /// Drops the cached results of `method` from `server` (all params), or only those whose
    /// params contain `needle`.
    pub(crate) fn invalidate(&self, server: &str, method: &str, needle: Option<&str>) {
        self.lock().entries.retain(|k, _| {
            !(&*k.server == server
                && k.method == method
                && needle.is_none_or(|n| k.params.contains(n)))
        });
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
}
