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
    /// How long a set is fresh when the response has no `max-age` (clamped like `max-age`, to
    /// [5 min, 24 h]). Default 1 h.
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

/// The key types kept (here and for DPoP proofs), with the algorithms each can verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl Kind {
    /// Whether a key of this type verifies `alg`.
    pub(crate) fn fits(self, alg: Algorithm) -> bool {
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
            if name.eq_ignore_ascii_case("max-age")
                && let Ok(seconds) = arg.trim().trim_matches('"').parse::<u64>()
            {
                found = Some(Duration::from_secs(seconds));
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
            check_rsa_modulus(n)?;
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

/// Refuses an RSA modulus (`n`, base64url) of fewer than 2048 significant bits.
pub(crate) fn check_rsa_modulus(n: &str) -> Result<(), &'static str> {
    let modulus = B64URL.decode(n).map_err(|_| "n is not base64url")?;
    if modulus_bits(&modulus) < MIN_RSA_BITS {
        return Err("RSA modulus under 2048 bits");
    }
    Ok(())
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

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::AtomicU64;

    use crate::BoxFuture;
    use bytes::Bytes;
    use http::{HeaderValue, StatusCode};
    use serde_json::json;
    use tokio::task::JoinSet;
    use tokio::time::{advance, sleep};

    use super::*;
    use crate::fetch::{FetchError, FetchResponse};

    // Public keys generated once with openssl (genrsa 2048/1024, ecparam P-256/P-384/P-521,
    // genpkey ed25519); the private halves were not kept.
    const RSA_2048_N: &str = "pwO2GN03hkkZlI3EUbtkV5uNkHNwlp2Z_dpi4GTAghhXt1hVDLy-n_W0BcNaxiIK6TdKGGnDYCwcQBA_OoFTWnRcQUChdoHkrrUq8cq6eGeYmHemYZGQUVNF2-w5RAWk_IkQZQ-yyk-FmY6MwSiw42DXE1DAWL4cgBRhQ8z6f0J-jNVZgtfiyOa5wyOv3RbTmwN0uECskD9X22KffJVh6LZjsMQfaA5YoUEAinI95hhee6sLlWojyF7kvuNwB1kVQ9-EmKeO1i5NeINVejHWKmgsU76YSz4zcylabh6B-ajXR70MUqr9kzToo9lCb4bKfmipmxtFbPy6qNRpKOivUQ";
    const RSA_1024_N: &str = "rVUSh5nOIc-bjQGc-Qc3fmvkAV9VgCKSxE975ML-ulUWyA3AIh5BMwp-MBxmsxvmvDxPlhRDv0VUUFxqhdkq-tOtM6qUGxAS3IWlEATfzL5F-vBg6WudG3k3WIchALrZLYFHXACimkCykb0bIsnrFy39KQ1340vqXPCvTdUIRg0";

    pub(crate) fn rsa(kid: &str) -> Value {
        json!({"kty": "RSA", "kid": kid, "n": RSA_2048_N, "e": "AQAB"})
    }
    pub(crate) fn p256(kid: &str) -> Value {
        json!({"kty": "EC", "kid": kid, "crv": "P-256",
               "x": "1nuf8_Iz_gfjxUeHI_MwQlqCGt3WPbY5dXGPkHfRFVQ",
               "y": "Ko_QM4KnfWx2kaWIrQfFbXZHk28WjMEp645lHeR5JNE"})
    }
    fn p384(kid: &str) -> Value {
        json!({"kty": "EC", "kid": kid, "crv": "P-384",
               "x": "8ZPcoRTBKKRjNlTzfun6h5HpmuXB7-ldfZ4LhvELqZkqkXXphgfXeuqdGR58DFRu",
               "y": "ZD4j-kVuH7OxOooZEII34TL4TKXHE9JU5yEBQd-UZVumyARqfxZHWdrymPmKr3Ke"})
    }
    fn p521(kid: &str) -> Value {
        json!({"kty": "EC", "kid": kid, "crv": "P-521",
               "x": "AHJxcoKyVgAsXDPWUnq-ECSOwNMBqWFLRgl_gFOIy5sXcXGg9U_UZbd199RhOAD86v8l6acRlW7uXujC1k1ueyhk",
               "y": "AODg7KfKcDa_S8QkwPRZEy-RQ5mOzZ-f-QMKN9BMPOIR5JnT0-g17rx6R-_WOIs7Mf9-981_8yhyAI2aNd8nljLS"})
    }
    fn ed25519(kid: &str) -> Value {
        json!({"kty": "OKP", "kid": kid, "crv": "Ed25519",
               "x": "jSm6LJXcND9tJCVA3wWXLMrjG0G8Y34Uc9Mfh2hJwOE"})
    }
    fn with(mut jwk: Value, name: &str, value: Value) -> Value {
        jwk[name] = value;
        jwk
    }

    /// Serves a JWK Set (or fails) and counts the requests.
    #[derive(Debug, Default)]
    struct Fake {
        /// The keys and the Cache-Control header; None: the fetch fails.
        reply: Mutex<Option<(Vec<Value>, Option<&'static str>)>>,
        /// How long each fetch takes.
        delay: Duration,
        count: AtomicU64,
    }

    impl Fake {
        fn serving(keys: Vec<Value>) -> Arc<Fake> {
            Arc::new(Fake {
                reply: Mutex::new(Some((keys, None))),
                ..Fake::default()
            })
        }
        fn set(&self, keys: Vec<Value>, cache_control: Option<&'static str>) {
            *self.reply.lock().unwrap() = Some((keys, cache_control));
        }
        fn fail(&self) {
            *self.reply.lock().unwrap() = None;
        }
        fn count(&self) -> u64 {
            self.count.load(Ordering::SeqCst)
        }
    }

    impl Fetch for Fake {
        fn get<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
            Box::pin(async move {
                assert_eq!(url, "https://as.example/jwks");
                self.count.fetch_add(1, Ordering::SeqCst);
                sleep(self.delay).await;
                let reply = self.reply.lock().unwrap().clone();
                match reply {
                    Some((keys, cache_control)) => {
                        let mut response = FetchResponse::new(
                            StatusCode::OK,
                            Bytes::from(json!({ "keys": keys }).to_string()),
                        );
                        if let Some(cc) = cache_control {
                            response
                                .headers
                                .insert(http::header::CACHE_CONTROL, HeaderValue::from_static(cc));
                        }
                        Ok(response)
                    }
                    None => Err(FetchError::Io {
                        url: url.to_owned(),
                        source: "connection refused".into(),
                    }),
                }
            })
        }

        fn post_form<'a>(
            &'a self,
            _: &'a str,
            _: &'a [(&'a str, &'a str)],
            _: Option<(&'a str, &'a str)>,
        ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
            unreachable!("keys are only read")
        }
    }

    fn jwks(fake: &Arc<Fake>) -> Arc<Jwks> {
        Arc::new(Jwks::new(
            fake.clone(),
            "https://as.example/jwks".into(),
            JwksPolicy::default(),
        ))
    }

    fn invalid<T: std::fmt::Debug>(result: Result<T, AuthError>) -> bool {
        matches!(result, Err(AuthError::InvalidToken(_)))
    }

    /// Lets spawned fetches run to the end.
    async fn settle() {
        sleep(Duration::from_millis(1)).await;
    }

    const MIN_REFRESH: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn a_known_kid_is_found_and_the_set_is_fetched_once() {
        let fake = Fake::serving(vec![with(p256("k1"), "alg", json!("ES256")), rsa("r1")]);
        let keys = jwks(&fake);
        let key = keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
        assert_eq!(key.alg, Some(Algorithm::ES256));
        let rsa = keys.key(Some("r1"), Algorithm::PS256).await.unwrap();
        assert_eq!(rsa.alg, None);
        for _ in 0..10 {
            keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
        }
        assert_eq!((keys.fetches(), fake.count()), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_kid_refreshes_once_per_min_refresh() {
        let fake = Fake::serving(vec![p256("k1")]);
        let keys = jwks(&fake);
        keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
        // Right after a fetch: refused at once, nothing fetched.
        assert!(invalid(keys.key(Some("new"), Algorithm::ES256).await));
        assert_eq!(fake.count(), 1);
        advance(MIN_REFRESH).await;
        assert!(invalid(keys.key(Some("new"), Algorithm::ES256).await));
        assert_eq!(fake.count(), 2);
        assert!(invalid(keys.key(Some("other"), Algorithm::ES256).await));
        advance(MIN_REFRESH - Duration::from_secs(1)).await;
        assert!(invalid(keys.key(Some("other"), Algorithm::ES256).await));
        assert_eq!(fake.count(), 2);
        advance(Duration::from_secs(1)).await;
        fake.set(vec![p256("k1"), p384("other")], None);
        keys.key(Some("other"), Algorithm::ES384).await.unwrap();
        assert_eq!(keys.fetches(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_random_kids_costs_at_most_one_fetch() {
        let fake = Arc::new(Fake {
            reply: Mutex::new(Some((vec![p256("k1")], None))),
            delay: Duration::from_millis(50),
            ..Fake::default()
        });
        let keys = jwks(&fake);
        keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
        advance(MIN_REFRESH).await;
        let mut flood = JoinSet::new();
        for i in 0..1000u32 {
            let keys = keys.clone();
            flood.spawn(async move {
                let kid = format!("random-{}", i.wrapping_mul(2_654_435_761));
                keys.key(Some(&kid), Algorithm::ES256).await
            });
        }
        while let Some(result) = flood.join_next().await {
            assert!(invalid(result.unwrap()));
        }
        for i in 0..1000u32 {
            assert!(invalid(
                keys.key(Some(&format!("later-{i}")), Algorithm::ES256)
                    .await
            ));
        }
        assert_eq!(fake.count(), 2);
        assert_eq!(keys.fetches(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_misses_share_one_fetch() {
        let fake = Arc::new(Fake {
            reply: Mutex::new(Some((vec![p256("k1")], None))),
            delay: Duration::from_secs(1),
            ..Fake::default()
        });
        let keys = jwks(&fake);
        let mut waiting = JoinSet::new();
        for _ in 0..20 {
            let keys = keys.clone();
            waiting.spawn(async move { keys.key(Some("k1"), Algorithm::ES256).await.is_ok() });
        }
        while let Some(found) = waiting.join_next().await {
            assert!(found.unwrap());
        }
        assert_eq!(fake.count(), 1);
        // A request that stops waiting does not cancel the fetch the others wait for.
        advance(MIN_REFRESH).await;
        fake.set(vec![p256("k1"), p256("k2")], None);
        let abandoned = tokio::time::timeout(
            Duration::from_millis(10),
            keys.key(Some("k2"), Algorithm::ES256),
        )
        .await;
        assert!(abandoned.is_err());
        keys.key(Some("k2"), Algorithm::ES256).await.unwrap();
        assert_eq!(fake.count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn rotation_adds_new_keys_and_keeps_old_ones_while_listed() {
        let fake = Fake::serving(vec![p256("k1")]);
        let keys = jwks(&fake);
        keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
        advance(MIN_REFRESH).await;
        fake.set(vec![p384("k2"), p256("k1")], None);
        keys.key(Some("k2"), Algorithm::ES384).await.unwrap();
        keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
        assert_eq!(fake.count(), 2);
        advance(MIN_REFRESH).await;
        fake.set(vec![p384("k2"), ed25519("k3")], None);
        keys.key(Some("k3"), Algorithm::EdDSA).await.unwrap();
        // k1 is no longer listed: gone (and the refresh it asks for is rate-limited).
        assert!(invalid(keys.key(Some("k1"), Algorithm::ES256).await));
        keys.key(Some("k2"), Algorithm::ES384).await.unwrap();
        assert_eq!(fake.count(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn max_age_is_honoured_within_the_clamp_and_stale_keys_serve_during_refresh() {
        for (cache_control, fresh_for) in [
            (Some("public, max-age=600"), Duration::from_secs(600)),
            (Some("max-age=10"), MIN_MAX_AGE),
            (Some("no-store"), MIN_MAX_AGE),
            (Some("max-age=9999999"), MAX_MAX_AGE),
            (None, Duration::from_secs(3600)),
        ] {
            let fake = Arc::new(Fake {
                delay: Duration::from_secs(2),
                ..Fake::default()
            });
            fake.set(vec![p256("k1")], cache_control);
            let keys = jwks(&fake);
            keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
            advance(fresh_for - Duration::from_secs(1)).await;
            keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
            settle().await;
            assert_eq!(fake.count(), 1, "{cache_control:?}: fresh");
            advance(Duration::from_secs(1)).await;
            // Stale: served at once while one background fetch runs.
            let asked = Instant::now();
            keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
            keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
            assert_eq!(asked.elapsed(), Duration::ZERO);
            settle().await;
            assert_eq!(fake.count(), 2, "{cache_control:?}: stale");
            sleep(Duration::from_secs(3)).await;
            keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
            settle().await;
            assert_eq!(fake.count(), 2, "{cache_control:?}: refreshed");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stale_keys_serve_on_error_until_max_stale() {
        let fake = Fake::serving(vec![p256("k1")]);
        let keys = jwks(&fake);
        keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
        fake.fail();
        let max_age = Duration::from_secs(3600);
        let max_stale = JwksPolicy::default().max_stale;
        advance(max_age).await;
        keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
        settle().await;
        assert_eq!(fake.count(), 2);
        advance(max_stale - Duration::from_secs(1)).await;
        keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
        settle().await;
        assert_eq!(fake.count(), 3);
        advance(Duration::from_secs(1)).await;
        let result = keys.key(Some("k1"), Algorithm::ES256).await;
        assert!(
            matches!(result, Err(AuthError::Unavailable(_))),
            "{result:?}"
        );
        // Once the AS answers again (and the rate limit allows), keys are back.
        advance(MIN_REFRESH).await;
        fake.set(vec![p256("k1")], None);
        keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_issuer_without_keys_is_unavailable_and_rate_limited() {
        let fake = Arc::new(Fake::default());
        let keys = jwks(&fake);
        for _ in 0..5 {
            let result = keys.key(Some("k1"), Algorithm::ES256).await;
            assert!(
                matches!(result, Err(AuthError::Unavailable(_))),
                "{result:?}"
            );
        }
        assert_eq!(fake.count(), 1);
        advance(MIN_REFRESH).await;
        fake.set(vec![p256("k1")], None);
        keys.key(Some("k1"), Algorithm::ES256).await.unwrap();
        assert_eq!(fake.count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn unsupported_small_and_encryption_keys_are_skipped() {
        let fake = Fake::serving(vec![
            json!({"kty": "RSA", "kid": "small", "n": RSA_1024_N, "e": "AQAB"}),
            p521("p521"),
            with(p256("enc"), "use", json!("enc")),
            with(p256("wrap"), "key_ops", json!(["wrapKey"])),
            with(rsa("oaep"), "alg", json!("RSA-OAEP")),
            with(rsa("hs"), "alg", json!("HS256")),
            json!({"kty": "oct", "kid": "oct", "k": "c2VjcmV0"}),
            json!({"kty": "OKP", "kid": "x25519", "crv": "X25519", "x": "jSm6LJXcND9tJCVA3wWXLMrjG0G8Y34Uc9Mfh2hJwOE"}),
            json!("not a key"),
            with(p256("sig"), "use", json!("sig")),
            with(p256("verify"), "key_ops", json!(["verify"])),
            ed25519("ed"),
        ]);
        let keys = jwks(&fake);
        keys.key(Some("sig"), Algorithm::ES256).await.unwrap();
        keys.key(Some("verify"), Algorithm::ES256).await.unwrap();
        keys.key(Some("ed"), Algorithm::EdDSA).await.unwrap();
        for (kid, alg) in [
            ("small", Algorithm::RS256),
            ("p521", Algorithm::ES256),
            ("enc", Algorithm::ES256),
            ("wrap", Algorithm::ES256),
            ("oaep", Algorithm::RS256),
            ("hs", Algorithm::HS256),
            ("hs", Algorithm::RS256),
            ("oct", Algorithm::HS256),
            ("x25519", Algorithm::EdDSA),
        ] {
            assert!(invalid(keys.key(Some(kid), alg).await), "{kid}");
        }
        assert_eq!(fake.count(), 1);
        assert_eq!(modulus_bits(&[0, 0, 1]), 1);
        assert_eq!(modulus_bits(&B64URL.decode(RSA_2048_N).unwrap()), 2048);
        assert_eq!(modulus_bits(&B64URL.decode(RSA_1024_N).unwrap()), 1024);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_is_refused_for_another_algorithm() {
        let fake = Fake::serving(vec![
            with(p256("es"), "alg", json!("ES256")),
            with(rsa("rs"), "alg", json!("RS256")),
            rsa("any-rsa"),
            p384("p384"),
        ]);
        let keys = jwks(&fake);
        keys.key(Some("rs"), Algorithm::RS256).await.unwrap();
        for (kid, alg) in [
            ("es", Algorithm::ES384),
            ("es", Algorithm::HS256),
            ("rs", Algorithm::PS256),
            ("rs", Algorithm::RS512),
            ("any-rsa", Algorithm::ES256),
            ("any-rsa", Algorithm::HS256),
            ("p384", Algorithm::ES256),
        ] {
            assert!(invalid(keys.key(Some(kid), alg).await), "{kid} {alg:?}");
        }
        keys.key(Some("any-rsa"), Algorithm::PS512).await.unwrap();
        keys.key(Some("p384"), Algorithm::ES384).await.unwrap();
        assert_eq!(fake.count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn without_kid_the_single_key_for_the_algorithm_is_used() {
        let fake = Fake::serving(vec![
            json!({"kty": "EC", "crv": "P-256", "x": p256("")["x"], "y": p256("")["y"]}),
            rsa("r1"),
            with(rsa("r2"), "alg", json!("RS256")),
        ]);
        let keys = jwks(&fake);
        keys.key(None, Algorithm::ES256).await.unwrap();
        // RS256 fits r1 and r2: ambiguous. PS256 fits only r1 (r2 is RS256 only).
        assert!(invalid(keys.key(None, Algorithm::RS256).await));
        assert_eq!(keys.key(None, Algorithm::PS256).await.unwrap().alg, None);
        assert!(invalid(keys.key(None, Algorithm::EdDSA).await));
        assert_eq!(fake.count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_max_keys_are_kept() {
        let fake = Fake::serving(vec![p256("a"), p256("b"), p256("c")]);
        let keys = Jwks::new(
            fake.clone(),
            "https://as.example/jwks".into(),
            JwksPolicy {
                max_keys: 2,
                ..JwksPolicy::default()
            },
        );
        keys.key(Some("a"), Algorithm::ES256).await.unwrap();
        keys.key(Some("b"), Algorithm::ES256).await.unwrap();
        assert!(invalid(keys.key(Some("c"), Algorithm::ES256).await));
    }

    #[test]
    fn cache_control_max_age_is_read() {
        let headers = |values: &[&'static str]| {
            let mut map = http::HeaderMap::new();
            for v in values {
                map.append(http::header::CACHE_CONTROL, HeaderValue::from_static(v));
            }
            map
        };
        assert_eq!(max_age(&headers(&[])), None);
        assert_eq!(
            max_age(&headers(&["public", "Max-Age = 120 , must-revalidate"])),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            max_age(&headers(&["max-age=60, no-cache"])),
            Some(Duration::ZERO)
        );
        assert_eq!(max_age(&headers(&["max-age=soon"])), None);
    }
}
