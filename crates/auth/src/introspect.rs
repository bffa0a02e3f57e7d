//! Opaque access tokens: RFC 7662 token introspection, with a cache keyed by the token's hash.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelctx_http::server::Grant;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::claims::{check_audience, check_issuer, grant_from_claims, numeric_date};
use crate::fetch::Fetch;
use crate::{AuthError, Clock};

/// How long an inactive (or unusable) answer is kept: 10 s.
pub(crate) const NEGATIVE_TTL: Duration = Duration::from_secs(10);
/// The most answers kept: 10 000.
pub(crate) const MAX_ENTRIES: usize = 10_000;

/// SHA-256 of a token: the only form in which a token is kept.
type TokenHash = [u8; 32];

/// What the authorization server said about a token.
#[derive(Debug, Clone)]
enum Answer {
    Active(Arc<Map<String, Value>>),
    Inactive,
}

type Flight = watch::Receiver<Option<Result<Answer, AuthError>>>;

#[derive(Default)]
struct State {
    answers: HashMap<TokenHash, (Answer, Instant)>,
    /// The same entries by expiry, soonest first.
    by_expiry: BTreeSet<(Instant, TokenHash)>,
    /// Requests under way.
    flights: HashMap<TokenHash, Flight>,
}

impl State {
    fn get(&self, hash: &TokenHash, now: Instant) -> Option<Answer> {
        self.answers
            .get(hash)
            .filter(|(_, expires)| *expires > now)
            .map(|(answer, _)| answer.clone())
    }

    fn insert(&mut self, hash: TokenHash, answer: Answer, expires: Instant, max: usize) {
        let now = Instant::now();
        if let Some((_, old)) = self.answers.remove(&hash) {
            self.by_expiry.remove(&(old, hash));
        }
        while let Some(&(at, soonest)) = self.by_expiry.first() {
            if at > now && self.answers.len() < max {
                break;
            }
            // Expired, or the soonest to expire when full.
            self.by_expiry.pop_first();
            self.answers.remove(&soonest);
        }
        if max > 0 {
            self.answers.insert(hash, (answer, expires));
            self.by_expiry.insert((expires, hash));
        }
    }
}

struct Inner {
    fetch: Arc<dyn Fetch>,
    endpoint: String,
    client_id: String,
    client_secret: String,
    clock: Arc<dyn Clock>,
    max_ttl: Duration,
    max_entries: usize,
    requests: AtomicU64,
    state: Mutex<State>,
}

/// An RFC 7662 client for one authorization server's introspection endpoint, authenticated
/// with `client_secret_basic`, with a cache (see [`Introspector::introspect`]).
pub(crate) struct Introspector {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Introspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspector")
            .field("endpoint", &self.inner.endpoint)
            .field("client_id", &self.inner.client_id)
            .field("max_ttl", &self.inner.max_ttl)
            .finish_non_exhaustive()
    }
}

impl Introspector {
    /// A client of `endpoint` (already checked by `check_url`), authenticating as `client_id`
    /// with `client_secret`; answers are kept at most `max_ttl` (60 s is the usual value).
    pub(crate) fn new(
        fetch: Arc<dyn Fetch>,
        endpoint: String,
        client_id: String,
        client_secret: String,
        clock: Arc<dyn Clock>,
        max_ttl: Duration,
    ) -> Introspector {
        Introspector {
            inner: Arc::new(Inner {
                fetch,
                endpoint,
                client_id,
                client_secret,
                clock,
                max_ttl,
                max_entries: MAX_ENTRIES,
                requests: AtomicU64::new(0),
                state: Mutex::default(),
            }),
        }
    }

    /// The same client keeping at most `max` answers (tests).
    #[cfg(test)]
    fn with_max_entries(self, max: usize) -> Introspector {
        let inner = Arc::into_inner(self.inner).expect("not shared yet");
        Introspector {
            inner: Arc::new(Inner {
                max_entries: max,
                ..inner
            }),
        }
    }

    /// RFC 7662: POST token + token_type_hint=access_token with client_secret_basic. Requires
    /// active: true; `iss` (when present) == issuer; `aud` (string or array) contains one of
    /// `audiences`; `exp` (when present) in the future per Clock. Returns grant_from_claims(issuer, response).
    /// Cache keyed by SHA-256 of the token (never the token), TTL min(exp - now, max_ttl); negative
    /// results 10 s; at most 10 000 entries; concurrent lookups of one token make one request.
    ///
    /// The answer is cached, not the verdict: `issuer`, `audiences` and `exp` are checked on
    /// every call. A failed request ([`AuthError::Unavailable`]) is not cached.
    pub(crate) async fn introspect(
        &self,
        token: &str,
        issuer: &str,
        audiences: &[String],
    ) -> Result<Grant, AuthError> {
        let hash: TokenHash = Sha256::digest(token.as_bytes()).into();
        let flight = {
            let mut state = self.inner.lock();
            if let Some(answer) = state.get(&hash, Instant::now()) {
                drop(state);
                return self.check(answer, issuer, audiences);
            }
            match state.flights.get(&hash) {
                Some(flight) if flight.has_changed().is_ok() => flight.clone(),
                _ => {
                    let (done, flight) = watch::channel(None);
                    state.flights.insert(hash, flight.clone());
                    let inner = self.inner.clone();
                    let token = token.to_owned();
                    // A task of its own: a caller that stops waiting does not cancel the others.
                    tokio::spawn(async move {
                        let result = inner.request(&token).await;
                        drop(token);
                        {
                            let mut state = inner.lock();
                            if let Ok(answer) = &result {
                                let expires = Instant::now() + inner.ttl(answer);
                                state.insert(hash, answer.clone(), expires, inner.max_entries);
                            }
                            state.flights.remove(&hash);
                        }
                        let _ = done.send(Some(result));
                    });
                    flight
                }
            }
        };
        let answer = wait(flight).await?;
        self.check(answer, issuer, audiences)
    }

    /// How many introspection requests were sent (tests).
    #[cfg(test)]
    pub(crate) fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    fn check(
        &self,
        answer: Answer,
        issuer: &str,
        audiences: &[String],
    ) -> Result<Grant, AuthError> {
        let invalid = |why: &str| Err(AuthError::InvalidToken(why.into()));
        let Answer::Active(claims) = answer else {
            return invalid("inactive (introspection)");
        };
        check_issuer(claims.get("iss"), issuer, false)?;
        check_audience(claims.get("aud"), audiences)?;
        if let Some(exp) = claims.get("exp") {
            match numeric_date(exp) {
                Some(exp) if exp > self.inner.clock.now() => {}
                Some(_) => return invalid("expired (introspection)"),
                None => return invalid("exp is not a NumericDate"),
            }
        }
        let mut claims = (*claims).clone();
        // RFC 7662 makes `sub` optional, and authorization servers leave it out for a token
        // issued to a client on its own behalf (client credentials): the client is the subject.
        if !claims.contains_key("sub")
            && let Some(client) = claims.get("client_id").cloned()
        {
            claims.insert("sub".into(), client);
        }
        grant_from_claims(issuer, claims)
    }
}

async fn wait(mut flight: Flight) -> Result<Answer, AuthError> {
    match flight.wait_for(Option::is_some).await {
        Ok(result) => result.clone().expect("waited for Some"),
        Err(_) => Err(AuthError::Unavailable(
            "the introspection request ended without an answer".into(),
        )),
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn request(&self, token: &str) -> Result<Answer, AuthError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let unavailable = |why: String| {
            AuthError::Unavailable(format!("introspection at {}: {why}", self.endpoint))
        };
        let response = self
            .fetch
            .post_form(
                &self.endpoint,
                &[("token", token), ("token_type_hint", "access_token")],
                Some((&self.client_id, &self.client_secret)),
            )
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        if response.status != http::StatusCode::OK {
            return Err(unavailable(format!("status {}", response.status)));
        }
        let claims: Map<String, Value> = serde_json::from_slice(&response.body)
            .map_err(|e| unavailable(format!("not a JSON object: {e}")))?;
        Ok(match claims.get("active") {
            Some(Value::Bool(true)) => Answer::Active(Arc::new(claims)),
            _ => Answer::Inactive,
        })
    }

    /// How long an answer is kept: an active token until its `exp` (per the clock) but at most
    /// `max_ttl`; anything else [`NEGATIVE_TTL`].
    fn ttl(&self, answer: &Answer) -> Duration {
        let Answer::Active(claims) = answer else {
            return NEGATIVE_TTL;
        };
        match claims.get("exp") {
            None => self.max_ttl,
            Some(exp) => {
                match numeric_date(exp).and_then(|exp| exp.duration_since(self.clock.now()).ok()) {
                    Some(left) => left.min(self.max_ttl),
                    // Expired or malformed: refused by every check, kept like a negative answer
                    // (but never past a valid exp, which is behind us).
                    None => NEGATIVE_TTL.min(self.max_ttl),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use crate::BoxFuture;
    use bytes::Bytes;
    use http::StatusCode;
    use serde_json::json;
    use tokio::task::JoinSet;
    use tokio::time::{advance, sleep};

    use super::*;
    use crate::fetch::{FetchError, FetchResponse};

    const ISSUER: &str = "https://as.example";
    const RESOURCE: &str = "https://mcp.example/mcp";
    const ENDPOINT: &str = "https://as.example/introspect";

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn at(offset: u64) -> u64 {
        t0().duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + offset
    }

    #[derive(Debug)]
    struct FixedClock(Mutex<SystemTime>);

    impl Clock for FixedClock {
        fn now(&self) -> SystemTime {
            *self.0.lock().unwrap()
        }
    }

    /// Answers introspection requests from a table of token -> response (inactive otherwise),
    /// checking the request's form and credentials; `None`: fails.
    #[derive(Debug, Default)]
    struct Fake {
        answers: Mutex<HashMap<String, Option<Value>>>,
        delay: Duration,
        count: AtomicU64,
    }

    impl Fake {
        fn answer(&self, token: &str, answer: Option<Value>) {
            self.answers.lock().unwrap().insert(token.into(), answer);
        }
        fn count(&self) -> u64 {
            self.count.load(Ordering::SeqCst)
        }
    }

    impl Fetch for Fake {
        fn get<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
            unreachable!("introspection only posts")
        }

        fn post_form<'a>(
            &'a self,
            url: &'a str,
            form: &'a [(&'a str, &'a str)],
            basic: Option<(&'a str, &'a str)>,
        ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
            Box::pin(async move {
                assert_eq!(url, ENDPOINT);
                assert_eq!(basic, Some(("rs", "rs-secret")));
                let [("token", token), ("token_type_hint", "access_token")] = form else {
                    panic!("unexpected form {form:?}");
                };
                self.count.fetch_add(1, Ordering::SeqCst);
                sleep(self.delay).await;
                let answer = self.answers.lock().unwrap().get(*token).cloned();
                match answer {
                    None => Ok(FetchResponse::new(
                        StatusCode::OK,
                        Bytes::from_static(br#"{"active":false}"#),
                    )),
                    Some(Some(answer)) => {
                        Ok(FetchResponse::new(StatusCode::OK, answer.to_string()))
                    }
                    Some(None) => Err(FetchError::Io {
                        url: url.into(),
                        source: "connection refused".into(),
                    }),
                }
            })
        }
    }

    fn setup(fake: &Arc<Fake>) -> Introspector {
        Introspector::new(
            fake.clone(),
            ENDPOINT.into(),
            "rs".into(),
            "rs-secret".into(),
            Arc::new(FixedClock(Mutex::new(t0()))),
            Duration::from_secs(60),
        )
    }

    fn active(extra: Value) -> Value {
        let mut answer = json!({"active": true, "sub": "alice", "client_id": "app",
            "iss": ISSUER, "aud": RESOURCE, "scope": "mcp files:write", "exp": at(600)});
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                answer.as_object_mut().unwrap().remove(k);
            } else {
                answer[k] = v.clone();
            }
        }
        answer
    }

    fn audiences() -> Vec<String> {
        vec![RESOURCE.to_owned()]
    }

    fn invalid<T: std::fmt::Debug>(result: Result<T, AuthError>) -> bool {
        matches!(result, Err(AuthError::InvalidToken(_)))
    }

    #[tokio::test(start_paused = true)]
    async fn an_active_token_gives_its_grant() {
        let fake = Arc::new(Fake::default());
        fake.answer("tok", Some(active(json!({"cnf": {"jkt": "thumb"}}))));
        let introspector = setup(&fake);
        let grant = introspector
            .introspect("tok", ISSUER, &audiences())
            .await
            .unwrap();
        assert_eq!(grant.issuer, ISSUER);
        assert_eq!(grant.subject, "alice");
        assert_eq!(grant.client_id.as_deref(), Some("app"));
        assert_eq!(grant.scopes, ["mcp", "files:write"]);
        assert_eq!(grant.jkt.as_deref(), Some("thumb"));
        assert_eq!(grant.expires_at, Some(t0() + Duration::from_secs(600)));
        assert_eq!(introspector.requests(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_token_without_sub_has_the_client_as_subject() {
        let fake = Arc::new(Fake::default());
        fake.answer("client", Some(active(json!({"sub": null}))));
        fake.answer(
            "nobody",
            Some(active(json!({"sub": null, "client_id": null}))),
        );
        let introspector = setup(&fake);
        let grant = introspector
            .introspect("client", ISSUER, &audiences())
            .await
            .unwrap();
        assert_eq!(grant.subject, "app");
        assert!(invalid(
            introspector
                .introspect("nobody", ISSUER, &audiences())
                .await
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn inactive_and_malformed_answers_are_refused() {
        let fake = Arc::new(Fake::default());
        fake.answer(
            "missing-active",
            Some(json!({"sub": "alice", "aud": RESOURCE})),
        );
        fake.answer("string-active", Some(active(json!({"active": "true"}))));
        let introspector = setup(&fake);
        for token in ["unknown", "missing-active", "string-active"] {
            assert!(
                invalid(introspector.introspect(token, ISSUER, &audiences()).await),
                "{token}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn issuer_audience_and_expiry_are_checked() {
        let fake = Arc::new(Fake::default());
        let cases = [
            ("other-iss", json!({"iss": "https://as.example/"}), false),
            ("no-iss", json!({"iss": null}), true),
            (
                "aud-array",
                json!({"aud": ["https://other", RESOURCE]}),
                true,
            ),
            ("aud-case", json!({"aud": "HTTPS://MCP.example/mcp/"}), true),
            (
                "aud-path-case",
                json!({"aud": "https://mcp.example/MCP"}),
                false,
            ),
            ("aud-other", json!({"aud": ["https://other"]}), false),
            ("aud-missing", json!({"aud": null}), false),
            ("aud-number", json!({"aud": 5}), false),
            ("expired", json!({"exp": at(0)}), false),
            ("no-exp", json!({"exp": null}), true),
            ("bad-exp", json!({"exp": "tomorrow"}), false),
            (
                "no-sub-or-client",
                json!({"sub": null, "client_id": null}),
                false,
            ),
        ];
        for (token, extra, _) in &cases {
            fake.answer(token, Some(active(extra.clone())));
        }
        let introspector = setup(&fake);
        for (token, _, ok) in cases {
            let result = introspector.introspect(token, ISSUER, &audiences()).await;
            if ok {
                assert!(result.is_ok(), "{token}: {result:?}");
            } else {
                assert!(invalid(result), "{token}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_cached_positive_until_max_ttl_and_negative_10_s() {
        let fake = Arc::new(Fake::default());
        fake.answer("tok", Some(active(json!({}))));
        let introspector = setup(&fake);
        for _ in 0..3 {
            introspector
                .introspect("tok", ISSUER, &audiences())
                .await
                .unwrap();
            assert!(invalid(
                introspector.introspect("bad", ISSUER, &audiences()).await
            ));
        }
        assert_eq!((fake.count(), introspector.requests()), (2, 2));
        // The cached answer is checked again per call: another audience is refused.
        assert!(invalid(
            introspector
                .introspect("tok", ISSUER, &["https://other".to_owned()])
                .await
        ));
        assert_eq!(fake.count(), 2);
        advance(NEGATIVE_TTL).await;
        assert!(invalid(
            introspector.introspect("bad", ISSUER, &audiences()).await
        ));
        introspector
            .introspect("tok", ISSUER, &audiences())
            .await
            .unwrap();
        assert_eq!(fake.count(), 3);
        advance(Duration::from_secs(50)).await;
        introspector
            .introspect("tok", ISSUER, &audiences())
            .await
            .unwrap();
        assert_eq!(fake.count(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_never_kept_past_the_token_exp() {
        let fake = Arc::new(Fake::default());
        fake.answer("short", Some(active(json!({"exp": at(20)}))));
        let introspector = setup(&fake);
        introspector
            .introspect("short", ISSUER, &audiences())
            .await
            .unwrap();
        advance(Duration::from_secs(19)).await;
        introspector
            .introspect("short", ISSUER, &audiences())
            .await
            .unwrap();
        assert_eq!(fake.count(), 1);
        advance(Duration::from_secs(1)).await;
        introspector
            .introspect("short", ISSUER, &audiences())
            .await
            .unwrap();
        assert_eq!(fake.count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_unavailable_and_not_cached() {
        let fake = Arc::new(Fake::default());
        fake.answer("tok", None);
        let introspector = setup(&fake);
        for _ in 0..2 {
            let result = introspector.introspect("tok", ISSUER, &audiences()).await;
            assert!(
                matches!(result, Err(AuthError::Unavailable(_))),
                "{result:?}"
            );
        }
        assert_eq!(fake.count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_lookups_of_one_token_make_one_request() {
        let fake = Arc::new(Fake {
            delay: Duration::from_secs(1),
            ..Fake::default()
        });
        fake.answer("tok", Some(active(json!({}))));
        let introspector = Arc::new(setup(&fake));
        let mut lookups = JoinSet::new();
        for _ in 0..20 {
            let introspector = introspector.clone();
            lookups.spawn(async move {
                introspector
                    .introspect("tok", ISSUER, &audiences())
                    .await
                    .is_ok()
            });
        }
        while let Some(ok) = lookups.join_next().await {
            assert!(ok.unwrap());
        }
        assert_eq!(fake.count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_is_bounded_and_evicts_the_soonest_to_expire() {
        let fake = Arc::new(Fake::default());
        for (i, ttl) in [(0, 50), (1, 10), (2, 40), (3, 30)] {
            fake.answer(&format!("t{i}"), Some(active(json!({"exp": at(ttl)}))));
        }
        let introspector = setup(&fake).with_max_entries(3);
        for i in 0..4 {
            introspector
                .introspect(&format!("t{i}"), ISSUER, &audiences())
                .await
                .unwrap();
        }
        assert_eq!(introspector.inner.lock().answers.len(), 3);
        assert_eq!(fake.count(), 4);
        // t1 (10 s left) was evicted; t0, t2, t3 are still answered from the cache.
        for i in [0, 2, 3] {
            introspector
                .introspect(&format!("t{i}"), ISSUER, &audiences())
                .await
                .unwrap();
        }
        assert_eq!(fake.count(), 4);
        introspector
            .introspect("t1", ISSUER, &audiences())
            .await
            .unwrap();
        assert_eq!(fake.count(), 5);
        assert_eq!(MAX_ENTRIES, 10_000);
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_keeps_hashes_never_tokens() {
        let fake = Arc::new(Fake::default());
        let token = "opaque-token-value-1234567890abcdef";
        fake.answer(token, Some(active(json!({}))));
        let introspector = setup(&fake);
        introspector
            .introspect(token, ISSUER, &audiences())
            .await
            .unwrap();
        assert!(invalid(
            introspector
                .introspect("other-token", ISSUER, &audiences())
                .await
        ));
        let state = introspector.inner.lock();
        let expected: TokenHash = Sha256::digest(token.as_bytes()).into();
        assert!(state.answers.contains_key(&expected));
        assert_eq!(state.answers.len(), 2);
        for (key, (answer, _)) in &state.answers {
            assert_ne!(&key[..], &token.as_bytes()[..32]);
            assert!(!format!("{answer:?}").contains(token));
        }
        assert!(state.flights.is_empty());
        drop(state);
        let debug = format!("{introspector:?}");
        assert!(
            !debug.contains(token) && !debug.contains("rs-secret"),
            "{debug}"
        );
    }
}
