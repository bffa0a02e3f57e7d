//! The issuer's signing keys (a JWK Set), cached with rotation.
//!
//! The set is fetched on first use and kept for the response's `Cache-Control: max-age`
//! (clamped to [5 min, 24 h]; 1 h without one). A stale set keeps serving while one background
//! fetch replaces it; when fetches fail, it keeps serving up to `max_stale` past its age, then
//! the keys are unavailable (503). A token naming an unknown `kid` triggers one fetch that the
//! request waits for, at most one per `min_refresh`, shared by every request that needs it:
//! a flood of tokens with random kids costs the authorization server at most one request per
//! `min_refresh`.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD_INDIFFERENT as B64URL;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::AuthError;
use crate::fetch::Fetch;

/// The shortest a fetched set is considered fresh, whatever its `max-age`: 5 min.
pub(crate) const MIN_MAX_AGE: Duration = Duration::from_secs(5 * 60);
/// The longest a fetched set is considered fresh, whatever its `max-age`: 24 h.
pub(crate) const MAX_MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);
/// The smallest RSA modulus accepted, in bits.
const MIN_RSA_BITS: usize = 2048;

/// A key a token's signature can be checked with.
pub(crate) struct VerifyKey {
    /// The key.
    pub(crate) key: DecodingKey,
    /// The JWK's `alg`, if any: a token signed with another algorithm is refused.
    pub(crate) alg: Option<Algorithm>,
}

impl std::fmt::Debug for VerifyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyKey")
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

/// How keys are kept.
#[derive(Debug, Clone)]
pub(crate) struct JwksPolicy {
    /// The least time between two fetches that a token with an unknown `kid` (or a stale set)
    /// may cause. Default 30 s.
    pub(crate) min_refresh: Duration,
    /// How long a set is fresh when the response has no `max-age`. Default 1 h.
    pub(crate) default_max_age: Duration,
    /// How long past its age a set keeps serving while fetches fail. Default 24 h.
    pub(crate) max_stale: Duration,
    /// The most keys kept from one set (the first usable ones). Default 100.
    pub(crate) max_keys: usize,
}

impl Default for JwksPolicy {
    fn default() -> JwksPolicy {
        JwksPolicy {
            min_refresh: Duration::from_secs(30),
            default_max_age: Duration::from_secs(60 * 60),
            max_stale: Duration::from_secs(24 * 60 * 60),
            max_keys: 100,
        }
    }
}

/// The key types kept, with the algorithms each can verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl Kind {
    fn fits(self, alg: Algorithm) -> bool {
        use Algorithm::*;
        match self {
            Kind::Rsa => matches!(alg, RS256 | RS384 | RS512 | PS256 | PS384 | PS512),
            Kind::P256 => alg == ES256,
            Kind::P384 => alg == ES384,
            Kind::Ed25519 => alg == EdDSA,
        }
    }
}

#[derive(Debug)]
struct Entry {
    kid: Option<String>,
    kind: Kind,
    key: Arc<VerifyKey>,
}

impl Entry {
    fn usable(&self, alg: Algorithm) -> bool {
        self.kind.fits(alg) && self.key.alg.is_none_or(|own| own == alg)
    }
}

#[derive(Debug)]
struct KeySet {
    keys: Vec<Entry>,
    fetched_at: Instant,
    max_age: Duration,
}

enum Found {
    Key(Arc<VerifyKey>),
    /// No key with this kid (or, without a kid, none usable with the algorithm).
    Missing,
    /// Keys exist but cannot be used: another algorithm, or several without a kid.
    Refused(&'static str),
}

impl KeySet {
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Found {
        match kid {
            Some(kid) => {
                let mut named = self.keys.iter().filter(|e| e.kid.as_deref() == Some(kid));
                let Some(first) = named.next() else {
                    return Found::Missing;
                };
                match std::iter::once(first).chain(named).find(|e| e.usable(alg)) {
                    Some(entry) => Found::Key(entry.key.clone()),
                    None => Found::Refused("the key does not match the token's algorithm"),
                }
            }
            None => {
                let mut usable = self.keys.iter().filter(|e| e.usable(alg));
                match (usable.next(), usable.next()) {
                    (Some(entry), None) => Found::Key(entry.key.clone()),
                    (None, _) => Found::Missing,
                    (Some(_), Some(_)) => {
                        Found::Refused("no kid and several keys fit the token's algorithm")
                    }
                }
            }
        }
    }
}

#[derive(Default)]
struct State {
    set: Option<Arc<KeySet>>,
    /// When the last fetch started.
    last_attempt: Option<Instant>,
    /// Why the last fetch failed, if it did.
    last_error: Option<AuthError>,
    /// The fetch under way: its receiver turns `true` when it has finished.
    inflight: Option<watch::Receiver<bool>>,
}

struct Inner {
    fetch: Arc<dyn Fetch>,
    uri: String,
    policy: JwksPolicy,
    state: Mutex<State>,
    fetches: AtomicU64,
}

/// One issuer's key set, cached (see the module's documentation).
pub(crate) struct Jwks {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks")
            .field("uri", &self.inner.uri)
            .field("policy", &self.inner.policy)
            .field("fetches", &self.fetches())
            .finish_non_exhaustive()
    }
}

impl Jwks {
    /// The keys at `jwks_uri` (already checked by `check_url`), fetched with `fetch` on first use.
    pub(crate) fn new(fetch: Arc<dyn Fetch>, jwks_uri: String, policy: JwksPolicy) -> Jwks {
        Jwks {
            inner: Arc::new(Inner {
                fetch,
                uri: jwks_uri,
                policy,
                state: Mutex::default(),
                fetches: AtomicU64::new(0),
            }),
        }
    }

    /// The key for a token's header: by kid; without kid, the single key usable with `alg`.
    /// Unknown kid: one refresh that waits, at most one per min_refresh (single-flight), else
    /// AuthError::InvalidToken at once. Unreachable with no usable cached set: Unavailable.
    pub(crate) async fn key(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<VerifyKey>, AuthError> {
        let inner = &self.inner;
        let now = Instant::now();
        let (set, pending) = {
            let mut state = inner.lock();
            match inner.usable_set(&state, now) {
                Some(set) => {
                    if now >= set.fetched_at + set.max_age && inner.may_fetch(&state, now) {
                        // Stale: refresh in the background, serve the keys we have.
                        drop(inner.start(&mut state));
                    }
                    (Some(set), None)
                }
                None => (None, inner.join_or_start(&mut state, now)),
            }
        };
        let pending = match set {
            Some(set) => match set.find(kid, alg) {
                Found::Key(key) => return Ok(key),
                Found::Refused(why) => return Err(AuthError::InvalidToken(why.into())),
                Found::Missing => {
                    let mut state = inner.lock();
                    match inner.join_or_start(&mut state, now) {
                        Some(pending) => pending,
                        None => {
                            return Err(AuthError::InvalidToken(
                                "no key for the token (keys refreshed recently)".into(),
                            ));
                        }
                    }
                }
            },
            None => match pending {
                Some(pending) => pending,
                None => return Err(inner.unavailable(&inner.lock())),
            },
        };
        wait(pending).await;
        let state = inner.lock();
        let Some(set) = inner.usable_set(&state, Instant::now()) else {
            return Err(inner.unavailable(&state));
        };
        match set.find(kid, alg) {
            Found::Key(key) => Ok(key),
            Found::Missing => Err(AuthError::InvalidToken("no key for the token".into())),
            Found::Refused(why) => Err(AuthError::InvalidToken(why.into())),
        }
    }

    /// How many times the set was fetched (tests).
    pub(crate) fn fetches(&self) -> u64 {
        self.inner.fetches.load(Ordering::Relaxed)
    }
}

async fn wait(mut pending: watch::Receiver<bool>) {
    // Err: the fetch task ended without saying so (it panicked); the state tells the rest.
    let _ = pending.wait_for(|done| *done).await;
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The cached set, unless it is past its age plus `max_stale`.
    fn usable_set(&self, state: &State, now: Instant) -> Option<Arc<KeySet>> {
        state
            .set
            .as_ref()
            .filter(|set| now < set.fetched_at + set.max_age + self.policy.max_stale)
            .cloned()
    }

    fn may_fetch(&self, state: &State, now: Instant) -> bool {
        state
            .last_attempt
            .is_none_or(|at| now >= at + self.policy.min_refresh)
    }

    fn in_flight(state: &State) -> Option<watch::Receiver<bool>> {
        state
            .inflight
            .as_ref()
            .filter(|pending| pending.has_changed().is_ok())
            .cloned()
    }

    /// The fetch under way, or a new one if the rate limit allows it.
    fn join_or_start(
        self: &Arc<Self>,
        state: &mut State,
        now: Instant,
    ) -> Option<watch::Receiver<bool>> {
        if let Some(pending) = Inner::in_flight(state) {
            return Some(pending);
        }
        self.may_fetch(state, now).then(|| self.start(state))
    }

    /// Starts a fetch unless one is under way; either way returns its receiver.
    fn start(self: &Arc<Self>, state: &mut State) -> watch::Receiver<bool> {
        if let Some(pending) = Inner::in_flight(state) {
            return pending;
        }
        let (done, pending) = watch::channel(false);
        state.inflight = Some(pending.clone());
        state.last_attempt = Some(Instant::now());
        let inner = self.clone();
        // A task of its own: a request that stops waiting does not cancel the fetch.
        tokio::spawn(async move {
            inner.fetches.fetch_add(1, Ordering::Relaxed);
            let result = inner.load().await;
            {
                let mut state = inner.lock();
                match result {
                    Ok(set) => {
                        state.set = Some(Arc::new(set));
                        state.last_error = None;
                    }
                    Err(error) => {
                        tracing::warn!(uri = %inner.uri, %error, "fetching the issuer's keys failed");
                        state.last_error = Some(error);
                    }
                }
                state.inflight = None;
            }
            let _ = done.send(true);
        });
        pending
    }

    fn unavailable(&self, state: &State) -> AuthError {
        state
            .last_error
            .clone()
            .unwrap_or_else(|| AuthError::Unavailable(format!("no usable keys from {}", self.uri)))
    }

    async fn load(&self) -> Result<KeySet, AuthError> {
        let unavailable = |why: String| AuthError::Unavailable(format!("{}: {why}", self.uri));
        let response = self
            .fetch
            .get(&self.uri)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        if response.status != http::StatusCode::OK {
            return Err(unavailable(format!("status {}", response.status)));
        }
        let max_age = max_age(&response.headers)
            .unwrap_or(self.policy.default_max_age)
            .clamp(MIN_MAX_AGE, MAX_MAX_AGE);
        let doc: Value = serde_json::from_slice(&response.body)
            .map_err(|e| unavailable(format!("not JSON: {e}")))?;
        let Some(Value::Array(items)) = doc.get("keys") else {
            return Err(unavailable("not a JWK Set (no keys array)".into()));
        };
        let mut keys = Vec::new();
        for item in items {
            if keys.len() == self.policy.max_keys {
                tracing::warn!(uri = %self.uri, max = self.policy.max_keys, "JWK Set truncated");
                break;
            }
            match parse_key(item) {
                Ok(entry) => keys.push(entry),
                Err(why) => tracing::debug!(uri = %self.uri, why, "JWK skipped"),
            }
        }
        Ok(KeySet {
            keys,
            fetched_at: Instant::now(),
            max_age,
        })
    }
}

/// The `max-age` of a `Cache-Control` header; `no-cache` and `no-store` count as 0.
fn max_age(headers: &http::HeaderMap) -> Option<Duration> {
    let mut found = None;
    for value in headers.get_all(http::header::CACHE_CONTROL) {
        let Ok(value) = value.to_str() else { continue };
        for directive in value.split(',') {
            let directive = directive.trim();
            let (name, arg) = directive.split_once('=').unwrap_or((directive, ""));
            let name = name.trim();
            if name.eq_ignore_ascii_case("no-store") || name.eq_ignore_ascii_case("no-cache") {
                return Some(Duration::ZERO);
            }
            if name.eq_ignore_ascii_case("max-age") {
                if let Ok(seconds) = arg.trim().trim_matches('"').parse::<u64>() {
                    found = Some(Duration::from_secs(seconds));
                }
            }
        }
    }
    found
}

/// A verification key from one JWK: kty `RSA` (modulus of at least 2048 bits), `EC` (P-256,
/// P-384) or `OKP` (Ed25519); `use` absent or `sig`; `key_ops`, when present, with `verify`;
/// `alg`, when present, a signature algorithm for that key type.
fn parse_key(jwk: &Value) -> Result<Entry, &'static str> {
    let jwk = jwk.as_object().ok_or("not an object")?;
    let text = |name: &str| -> Result<Option<&str>, &'static str> {
        match jwk.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err("a member is not a string"),
        }
    };
    let member = |name: &str| text(name)?.ok_or("a member is missing");
    match text("use")? {
        None | Some("sig") => {}
        Some(_) => return Err("not a signing key (use)"),
    }
    if let Some(ops) = jwk.get("key_ops") {
        let ops = ops.as_array().ok_or("key_ops is not an array")?;
        if !ops.iter().any(|op| op == "verify") {
            return Err("not a verification key (key_ops)");
        }
    }
    let (kind, key) = match member("kty")? {
        "RSA" => {
            let (n, e) = (member("n")?, member("e")?);
            let modulus = B64URL.decode(n).map_err(|_| "n is not base64url")?;
            if modulus_bits(&modulus) < MIN_RSA_BITS {
                return Err("RSA modulus under 2048 bits");
            }
            let key = DecodingKey::from_rsa_components(n, e).map_err(|_| "bad RSA key")?;
            (Kind::Rsa, key)
        }
        "EC" => {
            let kind = match member("crv")? {
                "P-256" => Kind::P256,
                "P-384" => Kind::P384,
                _ => return Err("unsupported curve"),
            };
            let key = DecodingKey::from_ec_components(member("x")?, member("y")?)
                .map_err(|_| "bad EC key")?;
            (kind, key)
        }
        "OKP" => {
            if member("crv")? != "Ed25519" {
                return Err("unsupported curve");
            }
            let key = DecodingKey::from_ed_components(member("x")?).map_err(|_| "bad OKP key")?;
            (Kind::Ed25519, key)
        }
        _ => return Err("unsupported key type"),
    };
    let alg = match text("alg")? {
        None => None,
        Some(name) => {
            let alg = Algorithm::from_str(name).map_err(|_| "unknown alg")?;
            if !kind.fits(alg) {
                return Err("alg does not fit the key type");
            }
            Some(alg)
        }
    };
    Ok(Entry {
        kid: text("kid")?.map(str::to_owned),
        kind,
        key: Arc::new(VerifyKey { key, alg }),
    })
}

fn modulus_bits(modulus: &[u8]) -> usize {
    let trimmed: &[u8] = match modulus.iter().position(|&b| b != 0) {
        Some(start) => &modulus[start..],
        None => &[],
    };
    match trimmed.first() {
        Some(first) => trimmed.len() * 8 - first.leading_zeros() as usize,
        None => 0,
    }
}
