//! Limits on the requests handlers answer: how many run at once and how many start per second,
//! for the whole server and for each principal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modelctx_types::{ErrorCode, ErrorObject};
use serde_json::json;

/// Limits on the requests handlers answer (none by default). A request over a limit is refused
/// at once with a JSON-RPC error `-32000` whose `data` is
/// `{"reason": "rate_limited", "limit": ..., "retryAfterMs": ...}` (`retryAfterMs` only for
/// per-second limits); it never waits.
///
/// The limits count the requests whose method is in [`Limits::methods`] (by default every
/// request a handler of the application answers: [`Limits::HANDLER_METHODS`]), all in one
/// count. Per-principal limits count the requests of each authenticated principal (the HTTP
/// authentication layer's `Principal`); requests without one share one count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Requests running at once, in all.
    pub concurrent: Option<usize>,
    /// Requests started per second, in all.
    pub per_second: Option<u32>,
    /// Requests running at once, per principal.
    pub concurrent_per_principal: Option<usize>,
    /// Requests started per second, per principal.
    pub per_second_per_principal: Option<u32>,
    /// The methods whose requests count (default [`Limits::HANDLER_METHODS`]). A request of
    /// another method is never refused by these limits; list methods and `ping` are answered by
    /// the server itself without a handler and are not counted.
    pub methods: &'static [&'static str],
}

impl Limits {
    /// Every request a handler of the application answers: `tools/call`, `resources/read`,
    /// `prompts/get` and `completion/complete`.
    pub const HANDLER_METHODS: &'static [&'static str] = &[
        "tools/call",
        "resources/read",
        "prompts/get",
        "completion/complete",
    ];

    /// Whether requests of `method` count.
    pub fn covers(&self, method: &str) -> bool {
        self.methods.contains(&method)
    }
}

impl Default for Limits {
    /// No limit, counting [`Limits::HANDLER_METHODS`].
    fn default() -> Self {
        Limits {
            concurrent: None,
            per_second: None,
            concurrent_per_principal: None,
            per_second_per_principal: None,
            methods: Limits::HANDLER_METHODS,
        }
    }
}

/// The most principals tracked at once; beyond, requests of new principals share the
/// anonymous count.
const MAX_PRINCIPALS: usize = 10_000;
const WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Count {
    running: usize,
    window_start: Option<Instant>,
    started: u32,
}

impl Count {
    fn check(
        &mut self,
        now: Instant,
        concurrent: Option<usize>,
        per_second: Option<u32>,
    ) -> Result<(), ErrorObject> {
        if let Some(max) = concurrent
            && self.running >= max
        {
            return Err(busy(format!("at most {max} requests at once"), None));
        }
        if let Some(max) = per_second {
            let start = *self.window_start.get_or_insert(now);
            if now.duration_since(start) >= WINDOW {
                self.window_start = Some(now);
                self.started = 0;
            }
            if self.started >= max {
                let wait =
                    WINDOW.saturating_sub(now.duration_since(self.window_start.unwrap_or(now)));
                return Err(busy(
                    format!("at most {max} requests per second"),
                    Some(wait),
                ));
            }
        }
        Ok(())
    }

    fn take(&mut self) {
        self.running += 1;
        self.started = self.started.saturating_add(1);
    }

    fn idle(&self, now: Instant) -> bool {
        self.running == 0
            && self
                .window_start
                .is_none_or(|s| now.duration_since(s) >= WINDOW)
    }
}

/// The code of a request the server refuses for its own reasons (a limit, a missing scope):
/// in the range JSON-RPC leaves to implementations (-32000 to -32099; MCP reserves -32020 and
/// above), the refusals told apart by `data.reason`.
pub(crate) const REFUSED: ErrorCode = ErrorCode(-32000);

/// The [`REFUSED`] error of a request refused by a limit named `limit`.
pub(crate) fn busy(limit: String, retry_after: Option<Duration>) -> ErrorObject {
    let mut data = json!({"reason": "rate_limited", "limit": limit});
    if let Some(wait) = retry_after {
        data["retryAfterMs"] = json!(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1));
    }
    let message = format!("the server is busy: {limit}");
    ErrorObject::new(REFUSED, message.clone())
        .with_data(&data)
        .unwrap_or_else(|_| ErrorObject::new(REFUSED, message))
}

#[derive(Debug, Default)]
struct Counts {
    all: Count,
    principals: HashMap<String, Count>,
}

/// The counts behind [`Limits`].
#[derive(Debug)]
pub(crate) struct Limiter {
    limits: Limits,
    counts: Mutex<Counts>,
}

/// A request's place under the limits, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    limiter: Arc<Limiter>,
    principal: String,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut counts = self.limiter.lock();
        counts.all.running = counts.all.running.saturating_sub(1);
        let now = Instant::now();
        if let Some(count) = counts.principals.get_mut(&self.principal) {
            count.running = count.running.saturating_sub(1);
            if count.idle(now) {
                counts.principals.remove(&self.principal);
            }
        }
    }
}

impl Limiter {
    pub(crate) fn new(limits: Limits) -> Self {
        Limiter {
            limits,
            counts: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a request of `principal`, or the error that refuses it.
    pub(crate) fn admit(self: &Arc<Self>, principal: Option<&str>) -> Result<Permit, ErrorObject> {
        let limits = self.limits;
        let now = Instant::now();
        let mut counts = self.lock();
        counts
            .all
            .check(now, limits.concurrent, limits.per_second)?;
        let per_principal =
            limits.concurrent_per_principal.is_some() || limits.per_second_per_principal.is_some();
        let mut key = principal.unwrap_or_default().to_owned();
        if per_principal {
            if !counts.principals.contains_key(&key) && counts.principals.len() >= MAX_PRINCIPALS {
                counts.principals.retain(|_, c| !c.idle(now));
                if counts.principals.len() >= MAX_PRINCIPALS {
                    key = String::new();
                }
            }
            let count = counts.principals.entry(key.clone()).or_default();
            count.check(
                now,
                limits.concurrent_per_principal,
                limits.per_second_per_principal,
            )?;
            count.take();
        }
        counts.all.take();
        Ok(Permit {
            limiter: self.clone(),
            principal: key,
        })
    }

    /// How many principals are tracked (for tests: the table empties when calls end).
    #[cfg(test)]
    pub(crate) fn principals(&self) -> usize {
        self.lock().principals.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_calls_are_limited_globally_and_per_principal() {
        let limiter = Arc::new(Limiter::new(Limits {
            concurrent: Some(3),
            concurrent_per_principal: Some(2),
            ..Limits::default()
        }));
        let a1 = limiter.admit(Some("a")).unwrap();
        let _a2 = limiter.admit(Some("a")).unwrap();
        let refused = limiter.admit(Some("a")).unwrap_err();
        assert_eq!(refused.code, REFUSED);
        let b1 = limiter.admit(Some("b")).unwrap();
        assert!(limiter.admit(Some("c")).is_err(), "3 in all");
        drop(a1);
        let _a3 = limiter.admit(Some("a")).unwrap();
        drop(b1);
        assert_eq!(limiter.principals(), 1, "b's entry went with its last call");
    }

    #[test]
    fn calls_per_second_are_limited_with_a_retry_hint() {
        let limiter = Arc::new(Limiter::new(Limits {
            per_second_per_principal: Some(2),
            ..Limits::default()
        }));
        drop(limiter.admit(None).unwrap());
        drop(limiter.admit(None).unwrap());
        let refused = limiter.admit(None).unwrap_err();
        let data: serde_json::Value = refused.data_as().unwrap().unwrap();
        assert_eq!(data["reason"], "rate_limited");
        assert!(data["retryAfterMs"].as_u64().unwrap() <= 1000);
        assert!(
            limiter.admit(Some("other")).is_ok(),
            "another principal has its own count"
        );
    }
}
