//! JWT access tokens (RFC 9068): the checks jsonwebtoken does not make for us.
//!
//! jsonwebtoken verifies the signature with the issuer's key. Everything else is checked here,
//! against the caller's `now` (a [`Clock`](crate::Clock) reading, so tests can move it): the
//! algorithm allow-list (never `none`, never HMAC), `typ`, `iss`, `aud`, `exp`, `nbf`, `iat`,
//! `sub`.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, AlgorithmFamily, Header, Validation};
use modelctx_http::server::Grant;
use serde_json::{Map, Value};

use crate::AuthError;
use crate::claims::{check_audience, check_issuer, grant_from_claims, numeric_date};
use crate::jwks::VerifyKey;

/// Whether `token` has the shape of a compact JWS (RFC 7515 section 7.1): three base64url
/// segments, the header and payload non-empty, the signature possibly empty (an unsecured
/// `alg: none` token). The guard routes such a token as a JWT, to be refused as one (`peek`
/// refuses `alg: none`), rather than as an opaque token to introspect.
pub(crate) fn is_compact(token: &str) -> bool {
    let b64url = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let mut segments = token.split('.');
    match (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) {
        (Some(header), Some(payload), Some(signature), None) => {
            !header.is_empty()
                && !payload.is_empty()
                && b64url(header)
                && b64url(payload)
                && b64url(signature)
        }
        _ => false,
    }
}

/// Whether `token` is a compact JWS with a signature: [`is_compact`] and a non-empty third
/// segment (what a token or a DPoP proof must be).
pub(crate) fn looks_like_jws(token: &str) -> bool {
    is_compact(token) && !token.ends_with('.')
}

/// A token's header and its unverified `iss`, read before the signature is checked to pick the
/// issuer and the key. Nothing in it is trusted until [`verify`] succeeds.
#[derive(Debug, Clone)]
pub(crate) struct Peek {
    pub(crate) header: Header,
    pub(crate) iss: Option<String>,
}

/// Decodes a token's header and its unverified `iss` (to pick the issuer). A token that is not
/// a JWS, a header jsonwebtoken cannot read (`alg: none` among them) or a payload that is not
/// a JSON object: [`AuthError::InvalidToken`].
pub(crate) fn peek(token: &str) -> Result<Peek, AuthError> {
    if !looks_like_jws(token) {
        return Err(AuthError::InvalidToken("not a JWS".into()));
    }
    let header = jsonwebtoken::decode_header(token)
        .map_err(|e| AuthError::InvalidToken(format!("header: {e}")))?;
    let payload = token.split('.').nth(1).unwrap_or_default();
    let claims = decode_segment(payload)
        .ok_or_else(|| AuthError::InvalidToken("payload is not a JSON object".into()))?;
    let iss = claims.get("iss").and_then(Value::as_str).map(str::to_owned);
    Ok(Peek { header, iss })
}

/// A base64url segment holding a JSON object.
pub(crate) fn decode_segment(segment: &str) -> Option<Map<String, Value>> {
    let bytes = URL_SAFE_NO_PAD.decode(segment).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// What a JWT access token must satisfy for one issuer.
#[derive(Debug, Clone)]
pub(crate) struct JwtPolicy {
    /// The issuer: the token's `iss` must equal it exactly.
    pub(crate) issuer: String,
    /// The accepted audiences (the canonical resource by default): the token's `aud` must
    /// contain one of them.
    pub(crate) audiences: Vec<String>,
    /// The accepted signature algorithms; default [`default_algorithms`]. HMAC algorithms are
    /// refused even when listed.
    pub(crate) algorithms: Vec<Algorithm>,
    /// Clock skew allowed on `exp`, `nbf` and `iat`; default 30 s, at most 120 s (refused
    /// above by `Auth::build`).
    pub(crate) leeway: Duration,
    /// Accept `typ: JWT` besides `at+jwt` (Keycloak, Entra ID); default false.
    pub(crate) accept_typ_jwt: bool,
}

impl JwtPolicy {
    /// The policy for `issuer` and `audiences` with the defaults: [`default_algorithms`], 30 s
    /// leeway, `typ` must be `at+jwt`.
    #[cfg(test)]
    pub(crate) fn new(issuer: impl Into<String>, audiences: Vec<String>) -> JwtPolicy {
        JwtPolicy {
            issuer: issuer.into(),
            audiences,
            algorithms: default_algorithms(),
            leeway: Duration::from_secs(30),
            accept_typ_jwt: false,
        }
    }
}

/// The asymmetric algorithms accepted by default: RS256/384/512, PS256/384/512, ES256/384,
/// EdDSA.
pub(crate) fn default_algorithms() -> Vec<Algorithm> {
    use Algorithm::*;
    vec![
        RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA,
    ]
}

/// Verifies the signature with `key` and checks RFC 9068: alg in the allow-list (never HS* or
/// none) and equal to `key.alg` when set; `typ` `at+jwt` / `application/at+jwt` (or `JWT` when
/// `accept_typ_jwt`); no `crit` header; `iss` == `policy.issuer` exactly; `aud` (string or
/// array) contains one of `policy.audiences`; `exp` required and after `now - leeway`;
/// `nbf`/`iat` (when present) not after `now + leeway`; `sub` required. Every failure is
/// [`AuthError::InvalidToken`].
pub(crate) fn verify(
    token: &str,
    peek: &Peek,
    key: &VerifyKey,
    policy: &JwtPolicy,
    now: SystemTime,
) -> Result<Grant, AuthError> {
    let invalid = |why: &str| AuthError::InvalidToken(why.to_owned());
    let alg = peek.header.alg;
    if alg.family() == AlgorithmFamily::Hmac || !policy.algorithms.contains(&alg) {
        return Err(AuthError::InvalidToken(format!(
            "algorithm {alg:?} not allowed"
        )));
    }
    if key.alg.is_some_and(|key_alg| key_alg != alg) {
        return Err(invalid("the key's alg is not the token's alg"));
    }
    check_typ(peek.header.typ.as_deref(), policy.accept_typ_jwt)?;
    if peek.header.crit.is_some() {
        return Err(invalid("critical header extensions are not supported"));
    }

    // The signature, by jsonwebtoken. Only the header's alg is allowed (it is in our
    // allow-list, checked above); its own claim checks are off: we make them below with `now`.
    let mut validation = Validation::new(alg);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.leeway = 0;
    let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
        .map_err(|e| AuthError::InvalidToken(format!("signature: {e}")))?;
    // The header jsonwebtoken verified is the one we checked (it decodes the same segment).
    if data.header != peek.header {
        return Err(invalid("the header is not the peeked one"));
    }
    let claims = data.claims;

    check_issuer(claims.get("iss"), &policy.issuer, true)?;
    check_audience(claims.get("aud"), &policy.audiences)?;

    let leeway = policy.leeway;
    let time = |name: &str| -> Result<Option<SystemTime>, AuthError> {
        match claims.get(name) {
            None => Ok(None),
            Some(value) => numeric_date(value)
                .map(Some)
                .ok_or_else(|| AuthError::InvalidToken(format!("{name} is not a NumericDate"))),
        }
    };
    let exp = time("exp")?.ok_or_else(|| invalid("no expiry (exp)"))?;
    if exp + leeway <= now {
        return Err(invalid("expired"));
    }
    for name in ["nbf", "iat"] {
        if time(name)?.is_some_and(|t| t > now + leeway) {
            return Err(AuthError::InvalidToken(format!("{name} is in the future")));
        }
    }
    grant_from_claims(&policy.issuer, claims)
}

/// RFC 9068 section 4: `typ` is `at+jwt` or `application/at+jwt` (media types compare
/// case-insensitively); `JWT` too when `accept_typ_jwt`. A missing `typ` is refused.
fn check_typ(typ: Option<&str>, accept_typ_jwt: bool) -> Result<(), AuthError> {
    let ok = typ.is_some_and(|typ| {
        typ.eq_ignore_ascii_case("at+jwt")
            || typ.eq_ignore_ascii_case("application/at+jwt")
            || (accept_typ_jwt && typ.eq_ignore_ascii_case("JWT"))
    });
    if ok {
        Ok(())
    } else {
        Err(AuthError::InvalidToken(format!(
            "typ {typ:?} is not at+jwt"
        )))
    }
}

/// The fixed test keys of `tests/fixtures/` (shared by the JOSE unit tests).
#[cfg(test)]
pub(crate) mod test_keys {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use jsonwebtoken::jwk::Jwk;
    use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
    use serde_json::Value;

    /// A test key pair.
    pub(crate) struct TestKey {
        pub(crate) alg: Algorithm,
        pub(crate) private_pem: &'static str,
        pub(crate) public_pem: &'static str,
        pub(crate) jwk: &'static str,
    }

    pub(crate) const ES256: TestKey = TestKey {
        alg: Algorithm::ES256,
        private_pem: include_str!("../tests/fixtures/es256.pem"),
        public_pem: include_str!("../tests/fixtures/es256.pub.pem"),
        jwk: include_str!("../tests/fixtures/es256.jwk.json"),
    };
    pub(crate) const ES256_OTHER: TestKey = TestKey {
        alg: Algorithm::ES256,
        private_pem: include_str!("../tests/fixtures/es256-other.pem"),
        public_pem: include_str!("../tests/fixtures/es256-other.pub.pem"),
        jwk: include_str!("../tests/fixtures/es256-other.jwk.json"),
    };
    pub(crate) const RS256: TestKey = TestKey {
        alg: Algorithm::RS256,
        private_pem: include_str!("../tests/fixtures/rs256.pem"),
        public_pem: include_str!("../tests/fixtures/rs256.pub.pem"),
        jwk: include_str!("../tests/fixtures/rs256.jwk.json"),
    };
    pub(crate) const ED25519: TestKey = TestKey {
        alg: Algorithm::EdDSA,
        private_pem: include_str!("../tests/fixtures/ed25519.pem"),
        public_pem: include_str!("../tests/fixtures/ed25519.pub.pem"),
        jwk: include_str!("../tests/fixtures/ed25519.jwk.json"),
    };

    /// The DER inside a PEM document (jsonwebtoken's PEM support is a feature we do not build).
    fn der(pem: &str) -> Vec<u8> {
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        STANDARD.decode(body).expect("PEM base64")
    }

    impl TestKey {
        pub(crate) fn encoding(&self) -> EncodingKey {
            let der = der(self.private_pem);
            match self.alg {
                Algorithm::ES256 => EncodingKey::from_ec_der(&der),
                Algorithm::RS256 => EncodingKey::from_rsa_der(&der),
                Algorithm::EdDSA => EncodingKey::from_ed_der(&der),
                other => unreachable!("no test key for {other:?}"),
            }
        }
        pub(crate) fn jwk_value(&self) -> Value {
            serde_json::from_str(self.jwk).expect("JWK JSON")
        }
        pub(crate) fn jwk(&self) -> Jwk {
            serde_json::from_str(self.jwk).expect("JWK")
        }
        pub(crate) fn decoding(&self) -> DecodingKey {
            DecodingKey::from_jwk(&self.jwk()).expect("decoding key")
        }
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, encode};
    use serde_json::json;

    use super::test_keys::{ED25519, ES256, ES256_OTHER, RS256, TestKey};
    use super::*;

    const ISSUER: &str = "https://as.example.com";
    const RESOURCE: &str = "https://mcp.example.com/mcp";

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn epoch(t: SystemTime) -> u64 {
        t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
    }

    fn claims() -> Value {
        let now = epoch(now());
        json!({"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "client_id": "app",
            "scope": "mcp files:write", "iat": now - 10, "exp": now + 300, "jti": "j1"})
    }

    fn policy() -> JwtPolicy {
        JwtPolicy::new(ISSUER, vec![RESOURCE.to_owned()])
    }

    fn sign_with(key: &TestKey, typ: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(key.alg);
        header.typ = typ.map(str::to_owned);
        header.kid = Some("k1".into());
        encode(&header, claims, &key.encoding()).unwrap()
    }

    fn sign(claims: &Value) -> String {
        sign_with(&ES256, Some("at+jwt"), claims)
    }

    fn verify_key(key: &TestKey) -> VerifyKey {
        VerifyKey {
            key: key.decoding(),
            alg: Some(key.alg),
        }
    }

    fn check_with(token: &str, key: &VerifyKey, policy: &JwtPolicy) -> Result<Grant, AuthError> {
        let peek = peek(token)?;
        verify(token, &peek, key, policy, now())
    }

    fn check(token: &str) -> Result<Grant, AuthError> {
        check_with(token, &verify_key(&ES256), &policy())
    }

    fn assert_invalid(result: Result<Grant, AuthError>, what: &str) {
        match result {
            Err(AuthError::InvalidToken(_)) => {}
            other => panic!("{what}: expected InvalidToken, got {other:?}"),
        }
    }

    fn with(mut claims: Value, name: &str, value: Value) -> Value {
        claims[name] = value;
        claims
    }

    fn without(mut claims: Value, name: &str) -> Value {
        claims.as_object_mut().unwrap().remove(name);
        claims
    }

    fn b64(value: &Value) -> String {
        URL_SAFE_NO_PAD.encode(value.to_string())
    }

    #[test]
    fn a_valid_token_of_each_key_type_gives_its_grant() {
        for key in [&ES256, &RS256, &ED25519] {
            let token = sign_with(key, Some("at+jwt"), &claims());
            assert!(looks_like_jws(&token));
            let peeked = peek(&token).unwrap();
            assert_eq!(peeked.iss.as_deref(), Some(ISSUER));
            assert_eq!(peeked.header.kid.as_deref(), Some("k1"));
            let grant = check_with(&token, &verify_key(key), &policy()).unwrap();
            assert_eq!(grant.issuer, ISSUER);
            assert_eq!(grant.subject, "alice");
            assert_eq!(grant.client_id.as_deref(), Some("app"));
            assert_eq!(grant.scopes, ["mcp", "files:write"]);
            assert_eq!(grant.expires_at, Some(now() + secs(300)));
        }
        // A key without alg accepts any allowed alg of its type.
        let token = sign(&claims());
        let key = VerifyKey {
            key: ES256.decoding(),
            alg: None,
        };
        check_with(&token, &key, &policy()).unwrap();
        // application/at+jwt, any case.
        check(&sign_with(&ES256, Some("application/AT+JWT"), &claims())).unwrap();
    }

    #[test]
    fn expiry_is_checked_with_now_and_the_leeway() {
        let now = epoch(now());
        assert_invalid(
            check(&sign(&with(claims(), "exp", json!(now - 31)))),
            "expired",
        );
        assert_invalid(
            check(&sign(&with(claims(), "exp", json!(now - 30)))),
            "at leeway",
        );
        check(&sign(&with(claims(), "exp", json!(now - 29)))).unwrap();
        check(&sign(&with(claims(), "exp", json!(now - 1)))).unwrap();
        assert_invalid(
            check(&sign(&with(claims(), "exp", json!("soon")))),
            "exp string",
        );
    }

    #[test]
    fn nbf_or_iat_in_the_future_is_refused() {
        let now = epoch(now());
        for name in ["nbf", "iat"] {
            assert_invalid(check(&sign(&with(claims(), name, json!(now + 31)))), name);
            check(&sign(&with(claims(), name, json!(now + 29)))).unwrap();
        }
    }

    #[test]
    fn issuer_must_match_exactly() {
        for iss in [
            json!("https://evil.example.com"),
            json!("https://as.example.com/"),
            json!("https://AS.example.com"),
            json!(5),
        ] {
            assert_invalid(
                check(&sign(&with(claims(), "iss", iss.clone()))),
                &iss.to_string(),
            );
        }
        assert_invalid(check(&sign(&without(claims(), "iss"))), "no iss");
    }

    #[test]
    fn audience_must_name_this_resource() {
        for aud in [
            json!("https://other.example.com/mcp"),
            json!("https://mcp.example.com/mcp/x"),
            json!("app"),
            json!(["app", "https://other.example.com"]),
            json!([]),
            json!(7),
        ] {
            assert_invalid(
                check(&sign(&with(claims(), "aud", aud.clone()))),
                &aud.to_string(),
            );
        }
        assert_invalid(check(&sign(&without(claims(), "aud"))), "no aud");
        check(&sign(&with(claims(), "aud", json!(["app", RESOURCE])))).unwrap();
        // Upper-case scheme and host, and one trailing slash, name the same resource.
        check(&sign(&with(
            claims(),
            "aud",
            json!("HTTPS://MCP.Example.COM/mcp"),
        )))
        .unwrap();
        check(&sign(&with(
            claims(),
            "aud",
            json!("https://mcp.example.com/mcp/"),
        )))
        .unwrap();
        // The path stays case-sensitive.
        assert_invalid(
            check(&sign(&with(
                claims(),
                "aud",
                json!("https://mcp.example.com/MCP"),
            ))),
            "path case",
        );
        // Any configured audience will do.
        let mut two = policy();
        two.audiences.push("api://mcp".into());
        let token = sign(&with(claims(), "aud", json!("api://mcp")));
        check_with(&token, &verify_key(&ES256), &two).unwrap();
    }

    #[test]
    fn subject_and_expiry_are_required() {
        assert_invalid(check(&sign(&without(claims(), "sub"))), "no sub");
        assert_invalid(check(&sign(&without(claims(), "exp"))), "no exp");
    }

    #[test]
    fn typ_must_be_at_jwt_unless_jwt_is_accepted() {
        for typ in [None, Some("JWT"), Some("dpop+jwt"), Some("jwt+at")] {
            assert_invalid(
                check(&sign_with(&ES256, typ, &claims())),
                &format!("typ {typ:?}"),
            );
        }
        let mut jwt_ok = policy();
        jwt_ok.accept_typ_jwt = true;
        let key = verify_key(&ES256);
        check_with(&sign_with(&ES256, Some("JWT"), &claims()), &key, &jwt_ok).unwrap();
        check_with(&sign_with(&ES256, Some("at+jwt"), &claims()), &key, &jwt_ok).unwrap();
        assert_invalid(
            check_with(&sign_with(&ES256, None, &claims()), &key, &jwt_ok),
            "no typ",
        );
    }

    #[test]
    fn alg_none_is_refused() {
        let header = json!({"alg": "none", "typ": "at+jwt"});
        for token in [
            format!("{}.{}.", b64(&header), b64(&claims())),
            format!("{}.{}.AAAA", b64(&header), b64(&claims())),
        ] {
            assert_invalid(peek(&token).map(|_| unreachable!()), "peek none");
        }
    }

    #[test]
    fn hmac_with_the_public_key_as_secret_is_refused() {
        let secret = ES256.public_pem.as_bytes();
        let token = encode(
            &{
                let mut h = Header::new(Algorithm::HS256);
                h.typ = Some("at+jwt".into());
                h
            },
            &claims(),
            &EncodingKey::from_secret(secret),
        )
        .unwrap();
        let peeked = peek(&token).unwrap();
        for key in [
            verify_key(&ES256),
            VerifyKey {
                key: ES256.decoding(),
                alg: None,
            },
            // Even a policy that lists HS256 and an HMAC key built from the public key.
            VerifyKey {
                key: jsonwebtoken::DecodingKey::from_secret(secret),
                alg: None,
            },
        ] {
            let mut hs = policy();
            hs.algorithms.push(Algorithm::HS256);
            for policy in [policy(), hs] {
                assert_invalid(verify(&token, &peeked, &key, &policy, now()), "HS256");
            }
        }
    }

    #[test]
    fn an_algorithm_outside_the_allow_list_is_refused() {
        let mut only_rs = policy();
        only_rs.algorithms = vec![Algorithm::RS256];
        assert_invalid(
            check_with(&sign(&claims()), &verify_key(&ES256), &only_rs),
            "ES256 not listed",
        );
        check_with(
            &sign_with(&RS256, Some("at+jwt"), &claims()),
            &verify_key(&RS256),
            &only_rs,
        )
        .unwrap();
    }

    #[test]
    fn the_keys_alg_must_be_the_tokens_alg() {
        let token = sign(&claims());
        let key = VerifyKey {
            key: ES256.decoding(),
            alg: Some(Algorithm::ES384),
        };
        assert_invalid(check_with(&token, &key, &policy()), "key alg ES384");
        // And the key must be the signer's: another EC key, or a key of another type.
        assert_invalid(
            check_with(&token, &verify_key(&ES256_OTHER), &policy()),
            "other key",
        );
        let rsa = VerifyKey {
            key: RS256.decoding(),
            alg: None,
        };
        assert_invalid(check_with(&token, &rsa, &policy()), "RSA key");
    }

    #[test]
    fn a_tampered_payload_or_header_fails_the_signature() {
        let token = sign(&claims());
        let parts: Vec<&str> = token.split('.').collect();
        let forged = format!(
            "{}.{}.{}",
            parts[0],
            b64(&with(claims(), "sub", json!("mallory"))),
            parts[2]
        );
        assert_invalid(check(&forged), "payload");
        // A crit header is refused (we understand no extension).
        let mut header = Header::new(Algorithm::ES256);
        header.typ = Some("at+jwt".into());
        header.crit = Some(vec!["exp".into()]);
        let crit = encode(&header, &claims(), &ES256.encoding()).unwrap();
        assert_invalid(check(&crit), "crit");
        // The peeked header must be the verified token's.
        let plain_jwt = sign_with(&ES256, Some("JWT"), &claims());
        let peeked = peek(&token).unwrap();
        assert_invalid(
            verify(&plain_jwt, &peeked, &verify_key(&ES256), &policy(), now()),
            "another token's peek",
        );
    }

    #[test]
    fn only_three_base64url_segments_look_like_a_jws() {
        assert!(looks_like_jws("a.b.c"));
        for not in [
            "",
            "a.b",
            "a.b.c.d",
            "a..c",
            "a.b.",
            "a.b+.c",
            "a b.c.d",
            "opaque-token",
        ] {
            assert!(!looks_like_jws(not), "{not}");
            assert_invalid(peek(not).map(|_| unreachable!()), not);
        }
        // Only the signature may be empty, and only for routing.
        assert!(is_compact("a.b.c") && is_compact("a.b."));
        for not in ["a.b", "a..", ".b.", "a.b.c.", "a.b.c+", "opaque"] {
            assert!(!is_compact(not), "{not}");
        }
        let bad_payload = format!("{}.{}.c", b64(&json!({"alg": "ES256"})), b64(&json!([1])));
        assert_invalid(peek(&bad_payload).map(|_| unreachable!()), "array payload");
    }
}
