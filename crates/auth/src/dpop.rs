//! DPoP proofs (RFC 9449): the proof's checks (section 4.3) and the `jti` replay cache
//! (section 11.1).
//!
//! jsonwebtoken verifies the proof's signature with the public key of its own `jwk` header and
//! computes the key's thumbprint (RFC 7638); everything else is checked here. Binding the proof
//! to the access token's `cnf.jkt` is the caller's: compare [`Proof::jkt`] with the grant's.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, ThumbprintHash};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Validation};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::AuthError;
use crate::claims::numeric_date;
use crate::jwks::{Kind, check_rsa_modulus};
use crate::jwt::{decode_segment, looks_like_jws};
use crate::nonce::Nonces;

/// How old a proof's `iat` may be.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(300);
/// How far in the future a proof's `iat` may be (the client's clock running ahead).
pub(crate) const MAX_AHEAD: Duration = Duration::from_secs(60);
/// JWK members that only a private or symmetric key has (RFC 7518 section 6).
const PRIVATE_MEMBERS: &[&str] = &["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// The request a proof must match.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProofRequest<'a> {
    /// The request's method (`POST`, `GET`, `DELETE`), compared case-sensitively with `htm`.
    pub(crate) method: &'a str,
    /// The request's URI as the canonical resource names it: `scheme://authority/path`, no
    /// query (the request's `Host` is not used: the server may sit behind a proxy).
    pub(crate) htu: &'a str,
    /// The access token sent with the proof (`ath` is its hash).
    pub(crate) access_token: &'a str,
    /// The time to check `iat` against.
    pub(crate) now: SystemTime,
    /// When set, the proof must carry a current nonce of these.
    pub(crate) nonce: Option<&'a Nonces>,
}

/// A verified proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proof {
    /// The RFC 7638 SHA-256 thumbprint of the proof's key, base64url (compared with the token's
    /// `cnf.jkt`).
    pub(crate) jkt: String,
    /// The proof's unique id.
    pub(crate) jti: String,
    /// When the proof was made.
    pub(crate) iat: SystemTime,
}

/// The proof algorithms accepted by default: ES256, ES384, RS256, PS256, EdDSA.
pub(crate) fn default_dpop_algorithms() -> Vec<Algorithm> {
    use Algorithm::*;
    vec![ES256, ES384, RS256, PS256, EdDSA]
}

/// Checks a DPoP proof per RFC 9449 section 4.3: `typ` `dpop+jwt`; `alg` asymmetric and in
/// `algs`; `jwk` a public key (no private members) of the alg's type (RSA of at least 2048
/// bits); no `crit`; the signature by that `jwk`; `jti`, `htm`, `htu`, `iat` present;
/// `htm` == the request's method; `htu` == the request's URI after RFC 3986 section 6.2.2/6.2.3
/// normalisation (scheme and host lower-cased, default port dropped, empty path as `/`,
/// percent-encoding normalised, dot segments removed), the proof's query and fragment ignored;
/// `iat` within [now - 300 s, now + 60 s]; `ath` == base64url(SHA-256(access token)).
/// With nonces, a missing or stale `nonce` claim on an otherwise good proof is
/// [`AuthError::UseDpopNonce`]. Every other failure is [`AuthError::InvalidDpopProof`].
pub(crate) fn verify_proof(
    proof: &str,
    request: &ProofRequest<'_>,
    algs: &[Algorithm],
) -> Result<Proof, AuthError> {
    let invalid = |why: &str| AuthError::InvalidDpopProof(why.to_owned());
    if !looks_like_jws(proof) {
        return Err(invalid("not a JWS"));
    }
    let raw_header = proof
        .split('.')
        .next()
        .and_then(decode_segment)
        .ok_or_else(|| invalid("the header is not a JSON object"))?;
    let header = jsonwebtoken::decode_header(proof)
        .map_err(|e| AuthError::InvalidDpopProof(format!("header: {e}")))?;
    if !header
        .typ
        .as_deref()
        .is_some_and(|typ| typ.eq_ignore_ascii_case("dpop+jwt"))
    {
        return Err(invalid("typ is not dpop+jwt"));
    }
    let alg = header.alg;
    if alg.family() == AlgorithmFamily::Hmac || !algs.contains(&alg) {
        return Err(AuthError::InvalidDpopProof(format!(
            "algorithm {alg:?} not allowed"
        )));
    }
    if header.crit.is_some() {
        return Err(invalid("critical header extensions are not supported"));
    }
    let jwk = public_jwk(&raw_header, header.jwk.as_ref(), alg)?;

    let key =
        DecodingKey::from_jwk(jwk).map_err(|e| AuthError::InvalidDpopProof(format!("jwk: {e}")))?;
    let mut validation = Validation::new(alg);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.leeway = 0;
    let claims = jsonwebtoken::decode::<Map<String, Value>>(proof, &key, &validation)
        .map_err(|e| AuthError::InvalidDpopProof(format!("signature: {e}")))?
        .claims;

    let string = |name: &str| match claims.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.as_str()),
        _ => Err(AuthError::InvalidDpopProof(format!("no {name}"))),
    };
    let jti = string("jti")?;
    if string("htm")? != request.method {
        return Err(invalid("htm is not the request's method"));
    }
    let htu = normalize_htu(string("htu")?).ok_or_else(|| invalid("htu is not an http(s) URI"))?;
    let request_htu =
        normalize_htu(request.htu).ok_or_else(|| invalid("the request's URI is not http(s)"))?;
    if htu != request_htu {
        return Err(invalid("htu is not the request's URI"));
    }
    let iat = claims
        .get("iat")
        .and_then(numeric_date)
        .ok_or_else(|| invalid("no iat"))?;
    if iat + MAX_AGE < request.now || iat > request.now + MAX_AHEAD {
        return Err(invalid("iat outside the accepted window"));
    }
    if string("ath")? != access_token_hash(request.access_token) {
        return Err(invalid("ath is not the access token's hash"));
    }
    if let Some(nonces) = request.nonce {
        let fresh = claims
            .get("nonce")
            .and_then(Value::as_str)
            .is_some_and(|nonce| nonces.check(nonce, request.now));
        if !fresh {
            return Err(AuthError::UseDpopNonce);
        }
    }
    let jkt = jwk
        .thumbprint(ThumbprintHash::SHA256)
        .map_err(|e| AuthError::InvalidDpopProof(format!("thumbprint: {e}")))?;
    Ok(Proof {
        jkt,
        jti: jti.to_owned(),
        iat,
    })
}

/// The header's `jwk`: present, public (no private member in the raw JSON: jsonwebtoken's
/// `Jwk` drops unknown members), and of the key type `alg` needs.
fn public_jwk<'h>(
    raw_header: &Map<String, Value>,
    jwk: Option<&'h Jwk>,
    alg: Algorithm,
) -> Result<&'h Jwk, AuthError> {
    let invalid = |why: &str| AuthError::InvalidDpopProof(why.to_owned());
    let (Some(Value::Object(raw)), Some(jwk)) = (raw_header.get("jwk"), jwk) else {
        return Err(invalid("no jwk"));
    };
    if PRIVATE_MEMBERS
        .iter()
        .any(|member| raw.contains_key(*member))
    {
        return Err(invalid("the jwk is not a public key"));
    }
    let kind = match &jwk.algorithm {
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => Kind::P256,
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P384 => Kind::P384,
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            Kind::Ed25519
        }
        AlgorithmParameters::RSA(rsa) => {
            check_rsa_modulus(&rsa.n).map_err(|why| invalid(&format!("the jwk: {why}")))?;
            Kind::Rsa
        }
        _ => return Err(invalid("the jwk is not a key type taken here")),
    };
    let fits = kind.fits(alg);
    if fits {
        Ok(jwk)
    } else {
        Err(invalid("the jwk is not a key for the proof's alg"))
    }
}

/// `ath`: base64url(SHA-256(access token)).
pub(crate) fn access_token_hash(access_token: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(access_token.as_bytes()))
}

/// An http(s) URI without its query and fragment, normalised per RFC 3986 sections 6.2.2 and
/// 6.2.3: scheme and host lower-cased, the port without leading zeros and dropped when it is the
/// scheme's default (or empty), an empty path as `/`, percent-encodings of unreserved
/// characters decoded and the others upper-cased, dot segments removed. `None` for another
/// scheme, userinfo, a bad port or a bad percent-encoding.
pub(crate) fn normalize_htu(uri: &str) -> Option<String> {
    let uri = uri.split(['?', '#']).next().unwrap_or_default();
    let (scheme, rest) = uri.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') {
        return None;
    }
    // An IPv6 literal's colons are not a port's.
    let port_at = match authority.rfind(']') {
        Some(end) => authority[end..].find(':').map(|i| end + i),
        None => authority.rfind(':'),
    };
    let (host, port) = match port_at {
        Some(i) => (&authority[..i], &authority[i + 1..]),
        None => (authority, ""),
    };
    if host.is_empty() {
        return None;
    }
    let mut out = format!("{scheme}://{}", host.to_ascii_lowercase());
    if !port.is_empty() {
        if !port.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let port: u16 = port.parse().ok()?;
        if port != default_port {
            out.push_str(&format!(":{port}"));
        }
    }
    let path = normalize_percent(path)?;
    out.push_str(&remove_dot_segments(&path));
    Some(out)
}

/// Percent-encodings of unreserved characters decoded, the others with upper-case hex digits.
fn normalize_percent(path: &str) -> Option<String> {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let hex = rest.get(i + 1..i + 3)?;
        let byte = u8::from_str_radix(hex, 16).ok()?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// RFC 3986 section 5.2.4 for an absolute path (or an empty one, which becomes `/`).
fn remove_dot_segments(path: &str) -> String {
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *segment {
            "." => {}
            ".." => {
                out.pop();
            }
            segment => {
                out.push(segment);
                continue;
            }
        }
        // A final `.` or `..` leaves the path ending with a slash.
        if last {
            out.push("");
        }
    }
    format!("/{}", out.join("/"))
}

/// The `jti`s of recent proofs, per key (RFC 9449 section 11.1), so that a proof is used once.
/// Each entry lives until the proof's `iat` plus the window; expired entries are pruned on every
/// insert (a min-heap by expiry: no scan). Bounded twice: each key (`jkt`) may hold at most
/// `max_per_key` live entries, so that one holder of a bound token cannot fill the cache and lock
/// every other DPoP client out; and the whole cache at most `max_entries`. Over either bound new
/// proofs are refused rather than live entries evicted (eviction would let a proof be replayed).
#[derive(Debug)]
pub(crate) struct ReplayCache {
    max_entries: usize,
    max_per_key: usize,
    window: Duration,
    inner: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// (jkt, jti) hash -> when it expires and the jkt's hash.
    live: HashMap<[u8; 32], (SystemTime, [u8; 32])>,
    by_expiry: BinaryHeap<Reverse<(SystemTime, [u8; 32])>>,
    /// jkt hash -> how many live entries it holds (only keys holding some: bounded by `live`).
    per_key: HashMap<[u8; 32], usize>,
}

impl ReplayCache {
    /// A cache of at most `max_entries` proofs, at most `max_per_key` of them from one key,
    /// each kept `window` after its `iat`.
    pub(crate) fn new(max_entries: usize, max_per_key: usize, window: Duration) -> ReplayCache {
        ReplayCache {
            max_entries,
            max_per_key,
            window,
            inner: Mutex::new(Seen::default()),
        }
    }

    /// Records (jkt, jti) until iat + window. A pair seen before: InvalidDpopProof("replayed").
    /// Its key over its quota, or the cache full: refuses (InvalidDpopProof), never evicts a
    /// live entry. Keyed by SHA-256 of the jkt's length (8 bytes, big-endian), the jkt and the
    /// jti; the quota by SHA-256 of the jkt.
    pub(crate) fn check_and_insert(&self, proof: &Proof, now: SystemTime) -> Result<(), AuthError> {
        let key: [u8; 32] = Sha256::new()
            .chain_update((proof.jkt.len() as u64).to_be_bytes())
            .chain_update(proof.jkt.as_bytes())
            .chain_update(proof.jti.as_bytes())
            .finalize()
            .into();
        let jkt: [u8; 32] = Sha256::digest(proof.jkt.as_bytes()).into();
        let Some(expires) = proof.iat.checked_add(self.window) else {
            return Err(AuthError::InvalidDpopProof("iat out of range".into()));
        };
        let mut seen = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(Reverse((at, old))) = seen.by_expiry.peek().copied() {
            if at > now {
                break;
            }
            seen.by_expiry.pop();
            if let Some(&(expires, old_jkt)) = seen.live.get(&old)
                && expires == at
            {
                seen.live.remove(&old);
                if let Some(count) = seen.per_key.get_mut(&old_jkt) {
                    *count -= 1;
                    if *count == 0 {
                        seen.per_key.remove(&old_jkt);
                    }
                }
            }
        }
        if seen.live.contains_key(&key) {
            return Err(AuthError::InvalidDpopProof("replayed".into()));
        }
        if expires <= now {
            return Err(AuthError::InvalidDpopProof(
                "too old for the replay window".into(),
            ));
        }
        if seen.per_key.get(&jkt).copied().unwrap_or(0) >= self.max_per_key {
            // Only this key's holder is refused: a debug line, not a warning per proof.
            tracing::debug!(
                max_per_key = self.max_per_key,
                "DPoP replay quota of a key used up: refusing its proofs until entries expire"
            );
            return Err(AuthError::InvalidDpopProof(
                "too many recent proofs from this key".into(),
            ));
        }
        if seen.live.len() >= self.max_entries {
            tracing::warn!(
                max_entries = self.max_entries,
                "DPoP replay cache full: refusing proofs until entries expire"
            );
            return Err(AuthError::InvalidDpopProof("replay cache full".into()));
        }
        seen.live.insert(key, (expires, jkt));
        seen.by_expiry.push(Reverse((expires, key)));
        *seen.per_key.entry(jkt).or_insert(0) += 1;
        Ok(())
    }

    /// How many proofs are remembered (expired ones included until the next insert prunes them).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live
            .len()
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::crypto::sign;
    use serde_json::json;

    use super::*;
    use crate::jwt::test_keys::{ED25519, ES256, ES256_OTHER, RS256, TestKey};

    const HTU: &str = "https://mcp.example.com/mcp";
    const TOKEN: &str = "the-access-token";

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn epoch(t: SystemTime) -> u64 {
        t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
    }

    fn request() -> ProofRequest<'static> {
        ProofRequest {
            method: "POST",
            htu: HTU,
            access_token: TOKEN,
            now: now(),
            nonce: None,
        }
    }

    fn header(key: &TestKey) -> Value {
        json!({"typ": "dpop+jwt", "alg": key.alg, "jwk": key.jwk_value()})
    }

    fn claims() -> Value {
        json!({"jti": "p1", "htm": "POST", "htu": HTU, "iat": epoch(now()),
            "ath": access_token_hash(TOKEN)})
    }

    /// A proof with this header and these claims, signed by `signer`.
    fn proof_by(signer: &TestKey, header: &Value, claims: &Value) -> String {
        let b64 = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let message = format!("{}.{}", b64(header), b64(claims));
        let signature = sign(message.as_bytes(), &signer.encoding(), signer.alg).unwrap();
        format!("{message}.{signature}")
    }

    fn proof(claims: &Value) -> String {
        proof_by(&ES256, &header(&ES256), claims)
    }

    fn with(mut value: Value, name: &str, member: Value) -> Value {
        value[name] = member;
        value
    }

    fn without(mut value: Value, name: &str) -> Value {
        value.as_object_mut().unwrap().remove(name);
        value
    }

    fn check(proof: &str) -> Result<Proof, AuthError> {
        verify_proof(proof, &request(), &default_dpop_algorithms())
    }

    fn assert_invalid(result: Result<Proof, AuthError>, what: &str) {
        match result {
            Err(AuthError::InvalidDpopProof(_)) => {}
            other => panic!("{what}: expected InvalidDpopProof, got {other:?}"),
        }
    }

    #[test]
    fn a_good_proof_of_each_key_type_gives_its_thumbprint() {
        for key in [&ES256, &RS256, &ED25519] {
            let proof = verify_proof(
                &proof_by(key, &header(key), &claims()),
                &request(),
                &default_dpop_algorithms(),
            )
            .unwrap();
            assert_eq!(
                proof.jkt,
                key.jwk().thumbprint(ThumbprintHash::SHA256).unwrap()
            );
            assert_eq!(proof.jti, "p1");
            assert_eq!(proof.iat, now());
        }
        // RFC 7638's thumbprint of the EC key, computed independently of jsonwebtoken.
        let jwk = ES256.jwk_value();
        let canonical = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            jwk["x"].as_str().unwrap(),
            jwk["y"].as_str().unwrap()
        );
        let expected = URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()));
        assert_eq!(check(&proof(&claims())).unwrap().jkt, expected);
    }

    #[test]
    fn htm_and_htu_must_match_the_request() {
        assert_invalid(
            check(&proof(&with(claims(), "htm", json!("GET")))),
            "htm GET",
        );
        assert_invalid(
            check(&proof(&with(claims(), "htm", json!("post")))),
            "htm post",
        );
        for htu in [
            "https://mcp.example.com/other",
            "https://mcp.example.com/MCP",
            "http://mcp.example.com/mcp",
            "https://mcp.example.com:8443/mcp",
            "https://evil.example.com/mcp",
            "https://mcp.example.com/mcp/",
            "https://user@mcp.example.com/mcp",
            "mcp.example.com/mcp",
            "ftp://mcp.example.com/mcp",
            "https://mcp.example.com/m%2",
        ] {
            assert_invalid(check(&proof(&with(claims(), "htu", json!(htu)))), htu);
        }
        for equivalent in [
            "HTTPS://MCP.Example.COM/mcp",
            "https://mcp.example.com:443/mcp",
            "https://mcp.example.com:0443/mcp",
            "https://mcp.example.com:/mcp",
            "https://mcp.example.com/%6Dcp",
            "https://mcp.example.com/a/../mcp",
            "https://mcp.example.com/./mcp",
            "https://mcp.example.com/mcp?query=1",
            "https://mcp.example.com/mcp#fragment",
        ] {
            check(&proof(&with(claims(), "htu", json!(equivalent))))
                .unwrap_or_else(|e| panic!("{equivalent}: {e}"));
        }
        // An empty path is "/".
        let root = ProofRequest {
            htu: "http://127.0.0.1:8080/",
            ..request()
        };
        let algs = default_dpop_algorithms();
        let at_root = proof(&with(claims(), "htu", json!("http://127.0.0.1:8080")));
        verify_proof(&at_root, &root, &algs).unwrap();
    }

    #[test]
    fn htu_normalisation_follows_rfc_3986() {
        let n = |uri| normalize_htu(uri);
        assert_eq!(n("HTTP://Host:80").as_deref(), Some("http://host/"));
        assert_eq!(
            n("http://host:8080/a%2fb%7e").as_deref(),
            Some("http://host:8080/a%2Fb~")
        );
        assert_eq!(n("https://[::1]:443/x").as_deref(), Some("https://[::1]/x"));
        assert_eq!(
            n("https://[::1]:8443/x").as_deref(),
            Some("https://[::1]:8443/x")
        );
        assert_eq!(
            n("https://h/a/b/../../c/./d/..").as_deref(),
            Some("https://h/c/")
        );
        assert_eq!(n("https://h/a//b").as_deref(), Some("https://h/a//b"));
        assert_eq!(n("https://h/%zz"), None);
        assert_eq!(n("https://h/%+1"), None);
        assert_eq!(n("https://h:99999/"), None);
        assert_eq!(n("https://h:8a/"), None);
        assert_eq!(n("https:///x"), None);
    }

    #[test]
    fn iat_must_be_within_the_window() {
        let now = epoch(now());
        for iat in [now - 301, now + 61] {
            assert_invalid(check(&proof(&with(claims(), "iat", json!(iat)))), "iat");
        }
        for iat in [now - 300, now + 60] {
            check(&proof(&with(claims(), "iat", json!(iat)))).unwrap();
        }
    }

    #[test]
    fn ath_must_be_the_tokens_hash() {
        assert_invalid(
            check(&proof(&with(
                claims(),
                "ath",
                json!(access_token_hash("another")),
            ))),
            "bad ath",
        );
        for member in ["ath", "jti", "htm", "htu", "iat"] {
            assert_invalid(check(&proof(&without(claims(), member))), member);
        }
        assert_invalid(
            check(&proof(&with(claims(), "jti", json!("")))),
            "empty jti",
        );
    }

    #[test]
    fn the_jwk_must_be_a_public_key_of_the_algs_type() {
        // A private JWK in the header (the signature is still good).
        let mut private = header(&ES256);
        private["jwk"]["d"] = json!("c2VjcmV0");
        assert_invalid(check(&proof_by(&ES256, &private, &claims())), "private jwk");
        assert_invalid(
            check(&proof_by(
                &ES256,
                &without(header(&ES256), "jwk"),
                &claims(),
            )),
            "no jwk",
        );
        // A symmetric key is refused.
        let mut oct = header(&ES256);
        oct["jwk"] = json!({"kty": "oct", "k": "c2VjcmV0"});
        assert_invalid(check(&proof_by(&ES256, &oct, &claims())), "oct jwk");
        // An RSA key for an EC alg.
        let mut mixed = header(&ES256);
        mixed["jwk"] = RS256.jwk_value();
        assert_invalid(
            check(&proof_by(&ES256, &mixed, &claims())),
            "RSA jwk for ES256",
        );
        // A P-256 key for ES384, an EC key for EdDSA.
        for alg in ["ES384", "EdDSA"] {
            let other_alg = with(header(&ES256), "alg", json!(alg));
            assert_invalid(check(&proof_by(&ES256, &other_alg, &claims())), alg);
        }
        // A short RSA modulus.
        let mut short = header(&RS256);
        short["jwk"]["n"] = json!(URL_SAFE_NO_PAD.encode([0xff; 128]));
        assert_invalid(check(&proof_by(&RS256, &short, &claims())), "1024-bit RSA");
        // 256 bytes whose top bit is clear: 2047 bits, refused for its size (the rule of the
        // issuer's keys), not only because the signature does not match.
        let mut modulus = [0xff; 256];
        modulus[0] = 0x7f;
        short["jwk"]["n"] = json!(URL_SAFE_NO_PAD.encode(modulus));
        assert_eq!(
            check(&proof_by(&RS256, &short, &claims())).unwrap_err(),
            AuthError::InvalidDpopProof("the jwk: RSA modulus under 2048 bits".into()),
            "2047-bit RSA"
        );
    }

    #[test]
    fn typ_and_alg_are_checked() {
        for typ in [json!("JWT"), json!("at+jwt"), Value::Null] {
            let bad = with(header(&ES256), "typ", typ.clone());
            assert_invalid(check(&proof_by(&ES256, &bad, &claims())), &typ.to_string());
        }
        let untyped = without(header(&ES256), "typ");
        assert_invalid(check(&proof_by(&ES256, &untyped, &claims())), "no typ");
        // Not in the accepted algorithms.
        let only_rs = [Algorithm::RS256];
        assert_invalid(
            verify_proof(&proof(&claims()), &request(), &only_rs),
            "ES256 not listed",
        );
        // alg none, and HS256 keyed with the public key.
        let none = with(header(&ES256), "alg", json!("none"));
        let b64 = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
        assert_invalid(
            check(&format!("{}.{}.AAAA", b64(&none), b64(&claims()))),
            "alg none",
        );
        let hs = with(header(&ES256), "alg", json!("HS256"));
        let message = format!("{}.{}", b64(&hs), b64(&claims()));
        let secret = jsonwebtoken::EncodingKey::from_secret(ES256.public_pem.as_bytes());
        let signature = sign(message.as_bytes(), &secret, Algorithm::HS256).unwrap();
        let mut with_hs = default_dpop_algorithms();
        with_hs.push(Algorithm::HS256);
        assert_invalid(
            verify_proof(&format!("{message}.{signature}"), &request(), &with_hs),
            "HS256",
        );
    }

    #[test]
    fn a_signature_by_another_key_than_the_jwk_is_refused() {
        assert_invalid(
            check(&proof_by(&ES256_OTHER, &header(&ES256), &claims())),
            "other key",
        );
    }

    #[test]
    fn nonces_required_stale_current_and_previous() {
        let nonces = Nonces::new([9; 32]);
        let with_nonces = ProofRequest {
            nonce: Some(&nonces),
            ..request()
        };
        let algs = default_dpop_algorithms();
        let verify = |claims: &Value| verify_proof(&proof(claims), &with_nonces, &algs);
        assert_eq!(verify(&claims()), Err(AuthError::UseDpopNonce), "missing");
        let stale = nonces.current(now() - Duration::from_secs(120));
        let previous = nonces.current(now() - Duration::from_secs(60));
        let current = nonces.current(now());
        assert_eq!(
            verify(&with(claims(), "nonce", json!(stale))),
            Err(AuthError::UseDpopNonce),
            "stale"
        );
        assert_eq!(
            verify(&with(
                claims(),
                "nonce",
                json!(Nonces::new([1; 32]).current(now()))
            )),
            Err(AuthError::UseDpopNonce),
            "another key's"
        );
        verify(&with(claims(), "nonce", json!(current))).unwrap();
        verify(&with(claims(), "nonce", json!(previous))).unwrap();
        // A bad proof is InvalidDpopProof even without a nonce.
        assert_invalid(
            verify(&with(claims(), "htm", json!("GET"))),
            "bad and no nonce",
        );
        // Without nonces configured, a nonce claim is ignored.
        check(&proof(&with(claims(), "nonce", json!("whatever")))).unwrap();
    }

    fn a_proof(jkt: &str, jti: &str, iat: SystemTime) -> Proof {
        Proof {
            jkt: jkt.into(),
            jti: jti.into(),
            iat,
        }
    }

    #[test]
    fn a_replayed_proof_is_detected() {
        let cache = ReplayCache::new(100, 100, Duration::from_secs(360));
        let first = check(&proof(&claims())).unwrap();
        cache.check_and_insert(&first, now()).unwrap();
        let again = check(&proof(&claims())).unwrap();
        assert_eq!(
            cache.check_and_insert(&again, now() + Duration::from_secs(10)),
            Err(AuthError::InvalidDpopProof("replayed".into()))
        );
        // The same jti from another key, or another jti from the same key, is new.
        cache
            .check_and_insert(&a_proof("other-jkt", "p1", now()), now())
            .unwrap();
        cache
            .check_and_insert(&a_proof(&first.jkt, "p2", now()), now())
            .unwrap();
        // jkt and jti are not merely concatenated.
        cache
            .check_and_insert(&a_proof("ab", "c", now()), now())
            .unwrap();
        cache
            .check_and_insert(&a_proof("a", "bc", now()), now())
            .unwrap();
        assert_eq!(cache.len(), 5);
        // Still refused just before it expires.
        let last_moment = now() + Duration::from_secs(359);
        assert_eq!(
            cache.check_and_insert(&first, last_moment),
            Err(AuthError::InvalidDpopProof("replayed".into()))
        );
        // At expiry all five are pruned by the next insert (a proof that old is refused
        // as out of the window, not as a replay).
        let expiry = now() + Duration::from_secs(360);
        cache
            .check_and_insert(&a_proof(&first.jkt, "p3", expiry), expiry)
            .unwrap();
        assert_eq!(cache.len(), 1);
        assert_eq!(
            cache.check_and_insert(&first, expiry),
            Err(AuthError::InvalidDpopProof(
                "too old for the replay window".into()
            ))
        );
    }

    #[test]
    fn a_full_replay_cache_refuses_and_recovers_after_expiry() {
        let window = Duration::from_secs(360);
        let cache = ReplayCache::new(2, 2, window);
        let t0 = now();
        let t1 = t0 + Duration::from_secs(100);
        cache.check_and_insert(&a_proof("k", "1", t0), t0).unwrap();
        cache.check_and_insert(&a_proof("j", "2", t1), t1).unwrap();
        let third = a_proof("k", "3", t1);
        assert_eq!(
            cache.check_and_insert(&third, t1),
            Err(AuthError::InvalidDpopProof("replay cache full".into()))
        );
        // The live entries were not evicted: both are still replays.
        assert_eq!(
            cache.check_and_insert(&a_proof("k", "1", t0), t1),
            Err(AuthError::InvalidDpopProof("replayed".into()))
        );
        assert_eq!(cache.len(), 2);
        // Once the first expires, there is room again (and only the first was pruned).
        let later = t0 + window;
        cache.check_and_insert(&third, later).unwrap();
        assert_eq!(cache.len(), 2);
        assert_eq!(
            cache.check_and_insert(&a_proof("j", "2", t1), later),
            Err(AuthError::InvalidDpopProof("replayed".into()))
        );
        // A proof older than the window cannot be tracked, so it is refused.
        let ancient = a_proof("k", "4", later - window);
        assert_eq!(
            cache.check_and_insert(&ancient, later),
            Err(AuthError::InvalidDpopProof(
                "too old for the replay window".into()
            ))
        );
    }

    #[test]
    fn one_key_cannot_use_more_than_its_share_of_the_replay_cache() {
        let window = Duration::from_secs(360);
        let cache = ReplayCache::new(10, 3, window);
        let t0 = now();
        for jti in ["1", "2", "3"] {
            cache
                .check_and_insert(&a_proof("greedy", jti, t0), t0)
                .unwrap();
        }
        let over = a_proof("greedy", "4", t0);
        assert_eq!(
            cache.check_and_insert(&over, t0),
            Err(AuthError::InvalidDpopProof(
                "too many recent proofs from this key".into()
            ))
        );
        // Other keys are not locked out, and each has its own share.
        for jti in ["1", "2", "3"] {
            cache
                .check_and_insert(&a_proof("honest", jti, t0), t0)
                .unwrap();
        }
        assert_eq!(cache.len(), 6);
        // The greedy key's share comes back as its entries expire.
        let (t1, later) = (t0 + Duration::from_secs(10), t0 + window);
        for jti in ["5", "6", "7"] {
            cache
                .check_and_insert(&a_proof("greedy", jti, t1), later)
                .unwrap();
        }
        assert_eq!(cache.len(), 3, "the six expired entries were pruned");
        assert_eq!(
            cache.check_and_insert(&a_proof("greedy", "8", t1), later),
            Err(AuthError::InvalidDpopProof(
                "too many recent proofs from this key".into()
            ))
        );
    }
}
