//! The resource server as a [`Guard`]: reads the credentials of a request, validates the token
//! (a custom verifier, a JWT against its issuer's keys, or introspection), checks a DPoP proof,
//! and answers refusals with the right challenge.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::BoxFuture;
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};
use modelctx_http::server::{Challenge, Grant, Guard, Metadata};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::challenge;
use crate::config::{AuthConfig, Credentials};
use crate::discovery::discover;
use crate::dpop::{self, ProofRequest, ReplayCache};
use crate::introspect::Introspector;
use crate::jwks::{Jwks, JwksPolicy};
use crate::jwt::{self, JwtPolicy};
use crate::nonce::Nonces;
use crate::{AuthError, Clock, Dpop, Fetch, HttpFetch};

/// The `DPoP` request header (RFC 9449 4.1).
const DPOP: &str = "dpop";

/// After a failed discovery, how long requests are refused (503) before it is tried again: an
/// unreachable authorization server is not asked once per request.
const DISCOVERY_RETRY: Duration = Duration::from_secs(30);

/// How long an introspection answer is kept at most.
const INTROSPECTION_TTL: Duration = Duration::from_secs(60);

/// The most DPoP proofs remembered for replay detection (about 130 bytes each: some 13 MB).
const REPLAY_ENTRIES: usize = 100_000;

/// The most DPoP proofs remembered from one key (`jkt`): a client may send about 28 proofs a
/// second for the whole window; one holder of a bound token cannot fill the cache for the others
/// (it takes ten keys).
const REPLAY_PER_KEY: usize = 10_000;

/// How long a proof is remembered: as long as its `iat` may be accepted (300 s back, 60 s
/// ahead).
const REPLAY_WINDOW: Duration = dpop::MAX_AGE.saturating_add(dpop::MAX_AHEAD);

/// The OAuth 2.1 resource server: a [`Guard`] for modelctx-http's server, built by
/// [`Auth::build`](crate::Auth::build). Set it with `ServerBuilder::auth` (modelctx-server) or
/// as [`ServerConfig::guard`](modelctx_http::server::ServerConfig::guard).
///
/// For each request it reads `Authorization: Bearer <token>` or `Authorization: DPoP <token>`
/// (with a `DPoP` proof), asks the [`TokenVerifier`](crate::TokenVerifier)s first, then
/// validates a JWT against its issuer's keys or introspects an opaque token, and checks the
/// proof of a DPoP-bound token. An issuer's metadata is fetched on first use.
pub struct AuthGuard {
    config: AuthConfig,
    issuers: Vec<Arc<TrustedIssuer>>,
    fetch: Arc<dyn Fetch>,
    replay: ReplayCache,
    nonces: Option<Nonces>,
}

impl fmt::Debug for AuthGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthGuard")
            .field("config", &self.config)
            .field("issuers", &self.issuers)
            .finish_non_exhaustive()
    }
}

/// An authorization server the guard trusts, with its endpoints (learnt on first use).
#[derive(Debug)]
struct TrustedIssuer {
    policy: JwtPolicy,
    introspection: Option<Credentials>,
    endpoints: OnceCell<Endpoints>,
    /// When discovery last failed.
    failed_at: Mutex<Option<Instant>>,
}

#[derive(Debug)]
struct Endpoints {
    jwks: Option<Jwks>,
    introspector: Option<Introspector>,
}

impl TrustedIssuer {
    /// Refuses while the last discovery failed less than [`DISCOVERY_RETRY`] ago.
    fn refuse_if_failed_recently(&self) -> Result<(), AuthError> {
        let recent_failure = self
            .failed_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < DISCOVERY_RETRY);
        if recent_failure {
            return Err(AuthError::Unavailable(format!(
                "discovery of {} failed recently",
                self.policy.issuer
            )));
        }
        Ok(())
    }
}

/// Discovers `issuer`'s endpoints unless another task has done it. The back-off is checked
/// again under the cell's lock: requests that were waiting on a discovery that failed are
/// refused at once instead of each running one in turn.
async fn discover_endpoints(
    issuer: Arc<TrustedIssuer>,
    fetch: Arc<dyn Fetch>,
    clock: Arc<dyn Clock>,
) -> Result<(), AuthError> {
    issuer
        .endpoints
        .get_or_try_init(|| async {
            issuer.refuse_if_failed_recently()?;
            let found = find_endpoints(&issuer, &fetch, clock).await;
            if found.is_err() {
                *issuer.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            }
            found
        })
        .await?;
    Ok(())
}

/// The issuer's metadata, then its key set and introspection endpoint.
async fn find_endpoints(
    issuer: &TrustedIssuer,
    fetch: &Arc<dyn Fetch>,
    clock: Arc<dyn Clock>,
) -> Result<Endpoints, AuthError> {
    let metadata = discover(&**fetch, &issuer.policy.issuer).await?;
    tracing::debug!(issuer = %issuer.policy.issuer, "authorization server discovered");
    let jwks = metadata
        .jwks_uri
        .map(|uri| Jwks::new(fetch.clone(), uri, JwksPolicy::default()));
    let introspector = match (&issuer.introspection, metadata.introspection_endpoint) {
        (Some(credentials), Some(endpoint)) => Some(Introspector::new(
            fetch.clone(),
            endpoint,
            credentials.client_id.clone(),
            credentials.client_secret.clone(),
            clock,
            INTROSPECTION_TTL,
        )),
        (Some(_), None) => {
            // Its JWTs can still be checked: only its opaque tokens go unvouched for.
            tracing::warn!(
                issuer = %issuer.policy.issuer,
                "introspection configured but the issuer publishes no introspection_endpoint: \
                 its opaque tokens are refused"
            );
            None
        }
        (None, _) => None,
    };
    Ok(Endpoints { jwks, introspector })
}

impl AuthGuard {
    pub(crate) fn new(mut config: AuthConfig) -> AuthGuard {
        let issuers = std::mem::take(&mut config.issuers)
            .into_iter()
            .map(|issuer| {
                Arc::new(TrustedIssuer {
                    policy: issuer.policy,
                    introspection: issuer.introspection,
                    endpoints: OnceCell::new(),
                    failed_at: Mutex::new(None),
                })
            })
            .collect();
        let fetch = config
            .fetcher
            .clone()
            .unwrap_or_else(|| Arc::new(HttpFetch::new()));
        let nonces = config.nonce_key.map(Nonces::new);
        AuthGuard {
            config,
            issuers,
            fetch,
            replay: ReplayCache::new(REPLAY_ENTRIES, REPLAY_PER_KEY, REPLAY_WINDOW),
            nonces,
        }
    }

    /// The canonical resource URI (scheme and host lower-cased, no trailing slash).
    pub fn resource(&self) -> &str {
        self.config.resource.as_str()
    }

    /// The paths the protected resource metadata is served at (RFC 9728 3.1: the
    /// path-inserted one, `/.well-known/oauth-protected-resource/mcp` for `/mcp`, and the root
    /// one); empty when no issuer is configured. An application that routes requests itself
    /// (axum) mounts the service at these paths too.
    pub fn well_known_paths(&self) -> &[String] {
        self.config.metadata.as_ref().map_or(&[], |m| &m.paths[..])
    }

    /// Fetches every issuer's metadata and keys now instead of on the first request; fails
    /// with the first issuer that cannot be reached.
    pub async fn prefetch(&self) -> Result<(), AuthError> {
        for issuer in &self.issuers {
            let endpoints = self.endpoints(issuer).await?;
            if let Some(jwks) = &endpoints.jwks {
                // Any key: only the fetch matters here.
                match jwks.key(None, jsonwebtoken::Algorithm::ES256).await {
                    Ok(_) | Err(AuthError::InvalidToken(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// The issuer's endpoints, discovered once; after a failure, not tried again for
    /// [`DISCOVERY_RETRY`].
    ///
    /// Discovery runs on its own task: a request that goes away (a client disconnecting) does
    /// not cancel it, and the requests waiting on it take its result instead of starting again.
    async fn endpoints<'a>(
        &self,
        issuer: &'a Arc<TrustedIssuer>,
    ) -> Result<&'a Endpoints, AuthError> {
        if let Some(endpoints) = issuer.endpoints.get() {
            return Ok(endpoints);
        }
        issuer.refuse_if_failed_recently()?;
        let task = tokio::spawn(discover_endpoints(
            issuer.clone(),
            self.fetch.clone(),
            self.config.clock.clone(),
        ));
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => {
                return Err(AuthError::Unavailable(format!(
                    "discovery of {} stopped: {e}",
                    issuer.policy.issuer
                )));
            }
        }
        issuer.endpoints.get().ok_or_else(|| {
            AuthError::Unavailable(format!("discovery of {} failed", issuer.policy.issuer))
        })
    }

    /// Who the request comes from.
    async fn check(&self, parts: &http::request::Parts) -> Result<Grant, AuthError> {
        let (scheme, token) = credentials(&parts.headers)?;
        if parts.headers.get_all(DPOP).iter().nth(1).is_some() {
            return Err(AuthError::InvalidDpopProof(
                "more than one DPoP header".into(),
            ));
        }
        match (scheme, self.config.dpop) {
            // A scheme this server does not take: as if no credentials came.
            (Scheme::Dpop, Dpop::Off) => return Err(AuthError::Missing),
            (Scheme::Bearer, Dpop::Required) => {
                return Err(AuthError::InvalidToken("DPoP is required".into()));
            }
            _ => {}
        }
        let grant = self.validate(token).await?;
        match (scheme, grant.jkt.as_deref()) {
            (Scheme::Bearer, None) => Ok(grant),
            // RFC 9449 7.2: a bound token is not a bearer token.
            (Scheme::Bearer, Some(_)) => Err(AuthError::InvalidToken(
                "a DPoP-bound token sent as a bearer token".into(),
            )),
            (Scheme::Dpop, None) => Err(AuthError::InvalidToken(
                "a token that is not DPoP-bound sent with the DPoP scheme".into(),
            )),
            (Scheme::Dpop, Some(jkt)) => {
                let proof = parts
                    .headers
                    .get(DPOP)
                    .ok_or_else(|| AuthError::InvalidDpopProof("no DPoP proof".into()))?
                    .to_str()
                    .map_err(|_| AuthError::InvalidDpopProof("not visible ASCII".into()))?;
                let now = self.config.clock.now();
                let htu = self.config.resource.htu(parts.uri.path());
                let request = ProofRequest {
                    method: parts.method.as_str(),
                    htu: &htu,
                    access_token: token,
                    now,
                    nonce: self.nonces.as_ref(),
                };
                let proof = dpop::verify_proof(proof, &request, &self.config.dpop_algorithms)?;
                if proof.jkt != jkt {
                    return Err(AuthError::InvalidDpopProof(
                        "the proof's key is not the one the token is bound to".into(),
                    ));
                }
                self.replay.check_and_insert(&proof, now)?;
                Ok(grant)
            }
        }
    }

    /// The grant a token carries: the verifiers first, then a JWT against its issuer's keys,
    /// else (an opaque token) introspection at the issuers configured for it, in order.
    async fn validate(&self, token: &str) -> Result<Grant, AuthError> {
        for verifier in &self.config.verifiers {
            if let Some(grant) = verifier.verify(token).await? {
                return Ok(grant);
            }
        }
        if jwt::is_compact(token) {
            let peek = jwt::peek(token)?;
            let iss = peek
                .iss
                .as_deref()
                .ok_or_else(|| AuthError::InvalidToken("no issuer (iss)".into()))?;
            let issuer = self
                .issuers
                .iter()
                .find(|i| i.policy.issuer == iss)
                .ok_or_else(|| AuthError::InvalidToken("an issuer not trusted here".into()))?;
            let endpoints = self.endpoints(issuer).await?;
            return match (&endpoints.jwks, &endpoints.introspector) {
                (Some(jwks), _) => {
                    let key = jwks
                        .key(peek.header.kid.as_deref(), peek.header.alg)
                        .await?;
                    jwt::verify(token, &peek, &key, &issuer.policy, self.config.clock.now())
                }
                (None, Some(introspector)) => {
                    introspector
                        .introspect(token, &issuer.policy.issuer, &issuer.policy.audiences)
                        .await
                }
                (None, None) => Err(AuthError::Unavailable(format!(
                    "{} publishes no jwks_uri",
                    issuer.policy.issuer
                ))),
            };
        }
        let mut unavailable = None;
        for issuer in self.issuers.iter().filter(|i| i.introspection.is_some()) {
            let introspector = match self.endpoints(issuer).await {
                Ok(Endpoints {
                    introspector: Some(introspector),
                    ..
                }) => introspector,
                Ok(_) => continue,
                Err(e) => {
                    unavailable = Some(e);
                    continue;
                }
            };
            match introspector
                .introspect(token, &issuer.policy.issuer, &issuer.policy.audiences)
                .await
            {
                Ok(grant) => return Ok(grant),
                Err(e @ AuthError::Unavailable(_)) => unavailable = Some(e),
                Err(_) => {}
            }
        }
        Err(unavailable.unwrap_or_else(|| {
            AuthError::InvalidToken("an opaque token no issuer vouches for".into())
        }))
    }

    fn nonce(&self) -> Option<String> {
        self.nonces
            .as_ref()
            .map(|nonces| nonces.current(self.config.clock.now()))
    }
}

impl Guard for AuthGuard {
    fn metadata(&self) -> Option<&Metadata> {
        self.config.metadata.as_ref()
    }

    fn authenticate<'a>(
        &'a self,
        request: &'a http::request::Parts,
    ) -> BoxFuture<'a, Result<Grant, Challenge>> {
        Box::pin(async move {
            self.check(request).await.map_err(|error| {
                // The detail is for the log only; it never holds the token.
                tracing::debug!(%error, "request refused");
                let nonce = match error {
                    AuthError::UseDpopNonce | AuthError::InvalidDpopProof(_) => self.nonce(),
                    _ => None,
                };
                challenge::refuse(&error, &self.config.challenge, nonce)
            })
        })
    }

    fn authorize(&self, grant: &Grant, needed: &[String]) -> Result<(), Challenge> {
        let implies = self.config.scope_implies;
        let covered = |scope: &String| {
            grant.has_scope(scope)
                || implies.is_some_and(|implies| grant.scopes.iter().any(|g| implies(g, scope)))
        };
        if needed.iter().all(covered) {
            Ok(())
        } else {
            Err(challenge::insufficient_scope(
                needed,
                &self.config.challenge,
            ))
        }
    }

    fn on_success(&self, grant: &Grant, headers: &mut HeaderMap) {
        if grant.jkt.is_some()
            && let Some(nonce) = self.nonce()
            && let Ok(value) = HeaderValue::from_str(&nonce)
        {
            headers.insert(challenge::DPOP_NONCE, value);
        }
    }
}

/// How the request presented its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Bearer,
    Dpop,
}

/// Reads `Authorization: Bearer|DPoP <token>` (RFC 6750 2.1, RFC 9449 7.1): exactly one header,
/// the scheme case-insensitive, one space, a token68.
fn credentials(headers: &HeaderMap) -> Result<(Scheme, &str), AuthError> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(AuthError::Missing);
    };
    if values.next().is_some() {
        return Err(AuthError::Malformed(
            "more than one Authorization header".into(),
        ));
    }
    let value = value
        .to_str()
        .map_err(|_| AuthError::Malformed("Authorization is not visible ASCII".into()))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| AuthError::Malformed("Authorization has no token".into()))?;
    let scheme = if scheme.eq_ignore_ascii_case("bearer") {
        Scheme::Bearer
    } else if scheme.eq_ignore_ascii_case("dpop") {
        Scheme::Dpop
    } else {
        // Another scheme (Basic, say): no credentials this server knows.
        return Err(AuthError::Missing);
    };
    let token68 = |c: u8| c.is_ascii_alphanumeric() || b"-._~+/".contains(&c);
    let body = token.trim_end_matches('=');
    if body.is_empty() || !body.bytes().all(token68) {
        return Err(AuthError::Malformed("the token is not a token68".into()));
    }
    Ok((scheme, token))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::SystemTime;

    use http::{Request, StatusCode};
    use jsonwebtoken::{Header, encode};
    use serde_json::{Value, json};

    use super::*;
    use crate::discovery::tests::{Table, table};
    use crate::jwt::test_keys::{ES256, ES256_OTHER};
    use crate::{Auth, Clock, FetchError, FetchResponse, Issuer, StaticToken};

    const ISSUER: &str = "https://as.example.com";
    const RESOURCE: &str = "https://mcp.example.com/mcp";

    /// The authorization server: metadata and keys.
    fn fake_as() -> Table {
        let mut jwk = ES256.jwk_value();
        jwk["kid"] = json!("k1");
        table(&[
            (
                &format!("{ISSUER}/.well-known/oauth-authorization-server"),
                json!({"issuer": ISSUER, "jwks_uri": format!("{ISSUER}/jwks")}),
            ),
            (&format!("{ISSUER}/jwks"), json!({"keys": [jwk]})),
        ])
    }

    #[derive(Debug)]
    struct FixedClock(SystemTime);

    impl Clock for FixedClock {
        fn now(&self) -> SystemTime {
            self.0
        }
    }

    const NOW: u64 = 1_800_000_000;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn guard(fake: Arc<Table>) -> AuthGuard {
        Auth::resource(RESOURCE)
            .issuer_with(Issuer::new(ISSUER))
            .scopes_supported(["mcp", "files:write"])
            .fetcher(fake)
            .clock(FixedClock(at(NOW)))
            .build()
            .unwrap()
    }

    fn token(key: &crate::jwt::test_keys::TestKey, claims: Value) -> String {
        let mut header = Header::new(key.alg);
        header.kid = Some("k1".into());
        header.typ = Some("at+jwt".into());
        encode(&header, &claims, &key.encoding()).unwrap()
    }

    fn claims() -> Value {
        json!({"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "client_id": "app",
            "scope": "mcp files:write", "iat": NOW - 10, "exp": NOW + 300, "jti": "j1"})
    }

    fn request(authorization: &[&str]) -> http::request::Parts {
        let mut builder = Request::post("/mcp");
        for value in authorization {
            builder = builder.header(AUTHORIZATION, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn www_authenticate(challenge: &Challenge) -> Vec<String> {
        challenge
            .headers
            .get_all(http::header::WWW_AUTHENTICATE)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn a_valid_jwt_is_a_grant_and_the_issuer_is_asked_once() {
        let fake = Arc::new(fake_as());
        let guard = guard(fake.clone());
        let bearer = format!("Bearer {}", token(&ES256, claims()));
        let grant = guard.authenticate(&request(&[&bearer])).await.unwrap();
        assert_eq!(grant.issuer, ISSUER);
        assert_eq!(grant.subject, "alice");
        assert_eq!(grant.client_id.as_deref(), Some("app"));
        assert_eq!(grant.scopes, ["mcp", "files:write"]);
        assert_eq!(fake.gets(), 2, "metadata and keys");
        // The scheme is case-insensitive; everything is cached.
        let lower = format!("bearer {}", token(&ES256, claims()));
        guard.authenticate(&request(&[&lower])).await.unwrap();
        assert_eq!(fake.gets(), 2);
    }

    #[tokio::test]
    async fn bad_tokens_get_invalid_token_and_no_credentials_get_a_bare_challenge() {
        let guard = guard(Arc::new(fake_as()));
        let missing = guard.authenticate(&request(&[])).await.unwrap_err();
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        let challenges = www_authenticate(&missing);
        assert!(
            challenges.iter().all(|c| !c.contains("error=")),
            "{challenges:?}"
        );
        assert!(
            challenges[0].contains(
                "resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\""
            ),
            "{challenges:?}"
        );
        let mut wrong_aud = claims();
        wrong_aud["aud"] = json!("https://other.example.com/mcp");
        let mut expired = claims();
        expired["exp"] = json!(NOW - 3600);
        let mut foreign = claims();
        foreign["iss"] = json!("https://evil.example.com");
        for bad in [
            token(&ES256, wrong_aud),
            token(&ES256, expired),
            token(&ES256, foreign),
            token(&ES256_OTHER, claims()),
            "opaque-token".to_owned(),
        ] {
            let refused = guard
                .authenticate(&request(&[&format!("Bearer {bad}")]))
                .await
                .unwrap_err();
            assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
            let challenges = www_authenticate(&refused);
            assert!(
                challenges[0].contains("error=\"invalid_token\""),
                "{challenges:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_unsecured_jwt_is_refused_as_a_jwt_not_introspected() {
        let mut fake = fake_as();
        fake.docs.insert(
            format!("{ISSUER}/.well-known/oauth-authorization-server"),
            json!({"issuer": ISSUER, "jwks_uri": format!("{ISSUER}/jwks"),
                "introspection_endpoint": format!("{ISSUER}/introspect")}),
        );
        let guard = Auth::resource(RESOURCE)
            .issuer_with(Issuer::new(ISSUER).introspection("rs", "secret"))
            .fetcher(fake)
            .clock(FixedClock(at(NOW)))
            .build()
            .unwrap();
        let b64 = |v: Value| {
            base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                v.to_string(),
            )
        };
        let unsecured = format!(
            "{}.{}.",
            b64(json!({"alg": "none", "typ": "at+jwt"})),
            b64(claims())
        );
        // Introspection (whose endpoint fails here: 503) is not asked: 401.
        let refused = guard
            .authenticate(&request(&[&format!("Bearer {unsecured}")]))
            .await
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert!(
            www_authenticate(&refused)[0].contains("error=\"invalid_token\""),
            "{:?}",
            www_authenticate(&refused)
        );
    }

    #[tokio::test]
    async fn an_issuer_without_introspection_endpoint_still_has_its_jwts_checked() {
        let fake = Arc::new(fake_as());
        let guard = Auth::resource(RESOURCE)
            .issuer_with(Issuer::new(ISSUER).introspection("rs", "secret"))
            .fetcher(fake.clone())
            .clock(FixedClock(at(NOW)))
            .build()
            .unwrap();
        let bearer = format!("Bearer {}", token(&ES256, claims()));
        let grant = guard.authenticate(&request(&[&bearer])).await.unwrap();
        assert_eq!(grant.subject, "alice");
        // An opaque token: no issuer vouches for it (401), the service is not unavailable.
        let refused = guard
            .authenticate(&request(&["Bearer opaque-token"]))
            .await
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert!(
            www_authenticate(&refused)[0].contains("error=\"invalid_token\""),
            "{:?}",
            www_authenticate(&refused)
        );
        assert_eq!(fake.gets(), 2, "metadata and keys, once");
    }

    #[tokio::test]
    async fn malformed_credentials_get_400_and_other_schemes_count_as_none() {
        let guard = guard(Arc::new(fake_as()));
        for malformed in [
            &["Bearer a", "Bearer b"][..],
            &["Bearer"],
            &["Bearer a b"],
            &["Bearer ä"],
        ] {
            let refused = guard.authenticate(&request(malformed)).await.unwrap_err();
            assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{malformed:?}");
        }
        let basic = guard
            .authenticate(&request(&["Basic dXNlcjpwYXNz"]))
            .await
            .unwrap_err();
        assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
        assert!(
            www_authenticate(&basic)
                .iter()
                .all(|c| !c.contains("error="))
        );
    }

    #[tokio::test]
    async fn an_unreachable_issuer_is_503_and_not_asked_again_at_once() {
        let fake = Arc::new(Table::default());
        let guard = guard(fake.clone());
        let bearer = format!("Bearer {}", token(&ES256, claims()));
        let refused = guard.authenticate(&request(&[&bearer])).await.unwrap_err();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        let asked = fake.gets();
        assert!(asked > 0);
        let again = guard.authenticate(&request(&[&bearer])).await.unwrap_err();
        assert_eq!(again.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(fake.gets(), asked, "within the retry time");
    }

    /// An authorization server that answers nothing for a while, then 404.
    #[derive(Debug, Default)]
    struct BlackHole {
        gets: AtomicUsize,
    }

    impl Fetch for BlackHole {
        fn get<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok(FetchResponse::new(StatusCode::NOT_FOUND, ""))
            })
        }

        fn post_form<'a>(
            &'a self,
            _: &'a str,
            _: &'a [(&'a str, &'a str)],
            _: Option<(&'a str, &'a str)>,
        ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
            Box::pin(async { Ok(FetchResponse::new(StatusCode::NOT_FOUND, "")) })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_first_requests_and_a_cancelled_one_make_one_discovery() {
        let black_hole = Arc::new(BlackHole::default());
        let guard = Arc::new(
            Auth::resource(RESOURCE)
                .issuer_with(Issuer::new(ISSUER))
                .fetcher(black_hole.clone())
                .clock(FixedClock(at(NOW)))
                .build()
                .unwrap(),
        );
        let bearer = format!("Bearer {}", token(&ES256, claims()));
        // The first request goes away while discovery runs (a client disconnecting).
        let cancelled = tokio::time::timeout(
            Duration::from_secs(1),
            guard.authenticate(&request(&[&bearer])),
        )
        .await;
        assert!(cancelled.is_err(), "still discovering");
        let mut waiting = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let guard = guard.clone();
            let bearer = bearer.clone();
            waiting.spawn(async move {
                guard
                    .authenticate(&request(&[&bearer]))
                    .await
                    .unwrap_err()
                    .status
            });
        }
        while let Some(status) = waiting.join_next().await {
            assert_eq!(status.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
        }
        let round = crate::as_metadata::metadata_urls(ISSUER).unwrap().len();
        assert_eq!(black_hole.gets.load(Ordering::SeqCst), round, "one round");
    }

    #[tokio::test]
    async fn a_bound_token_is_not_a_bearer_token_and_dpop_needs_a_bound_token() {
        let guard = guard(Arc::new(fake_as()));
        let mut bound = claims();
        bound["cnf"] = json!({"jkt": "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"});
        let as_bearer = format!("Bearer {}", token(&ES256, bound.clone()));
        let refused = guard
            .authenticate(&request(&[&as_bearer]))
            .await
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        // A bound token without its proof.
        let without_proof = format!("DPoP {}", token(&ES256, bound));
        let refused = guard
            .authenticate(&request(&[&without_proof]))
            .await
            .unwrap_err();
        assert!(
            www_authenticate(&refused)
                .iter()
                .any(|c| c.starts_with("DPoP") && c.contains("invalid_dpop_proof")),
            "{:?}",
            www_authenticate(&refused)
        );
        let unbound = format!("DPoP {}", token(&ES256, claims()));
        let refused = guard.authenticate(&request(&[&unbound])).await.unwrap_err();
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    }

    #[tokio::test]
    async fn verifiers_come_first_and_scopes_follow_the_hierarchy() {
        let guard = Auth::resource(RESOURCE)
            .verifier(StaticToken::new("s3cret").scopes(["files:write"]))
            .scope_implies(|granted, needed| {
                needed
                    .strip_prefix(granted)
                    .is_some_and(|rest| rest.starts_with(':'))
            })
            .build()
            .unwrap();
        assert!(guard.metadata().is_none());
        let grant = guard
            .authenticate(&request(&["Bearer s3cret"]))
            .await
            .unwrap();
        assert_eq!(grant.subject, "static");
        assert!(guard.authorize(&grant, &["files:write".into()]).is_ok());
        let mut broad = grant.clone();
        broad.scopes = vec!["files".into()];
        assert!(
            guard.authorize(&broad, &["files:write".into()]).is_ok(),
            "implied"
        );
        let refused = guard
            .authorize(&grant, &["files:write".into(), "admin".into()])
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        let challenge = &www_authenticate(&refused)[0];
        assert!(challenge.contains("insufficient_scope"), "{challenge}");
        assert!(
            challenge.contains("scope=\"files:write admin\""),
            "{challenge}"
        );
        let wrong = guard
            .authenticate(&request(&["Bearer nope"]))
            .await
            .unwrap_err();
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    }
}
