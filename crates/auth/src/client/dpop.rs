//! DPoP (RFC 9449) on the client side: the client's key, its proofs and the servers' nonces.
//!
//! One key per [`OAuth`](super::OAuth) client (an ES256 key on P-256), every proof fresh: header
//! `{typ: "dpop+jwt", alg: "ES256", jwk}` (the public key only), claims `jti` (16 random bytes),
//! `htm`, `htu` (the request URI without query and fragment), `iat`, `ath` (requests to a
//! resource server, with a token) and `nonce` (the latest one of that origin, when it sent one).
//! The key is generated with p256 and signs through jsonwebtoken; it is written and read as
//! PKCS#8 PEM so that a token store can keep it with the tokens bound to it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http::HeaderMap;
use jsonwebtoken::jwk::{Jwk, ThumbprintHash};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::Error;
use super::jwt::pkcs8_pem_der;
use super::pkce::random_string;

/// The only algorithm of the client's proofs.
pub(crate) const DPOP_ALGORITHM: &str = "ES256";

/// The `typ` of a proof.
const PROOF_TYPE: &str = "dpop+jwt";

/// The client's DPoP key: an EC P-256 private key (ES256). `Debug` shows its thumbprint, never
/// the private key.
#[derive(Clone)]
pub struct DpopKey {
    key: EncodingKey,
    /// PKCS#8 DER, for [`DpopKey::to_pkcs8_pem`].
    der: Vec<u8>,
    /// The public key (no `d`).
    jwk: Jwk,
    thumbprint: String,
}

impl fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DpopKey")
            .field("algorithm", &DPOP_ALGORITHM)
            .field("thumbprint", &self.thumbprint)
            .finish_non_exhaustive()
    }
}

fn unsupported(why: impl Into<String>) -> Error {
    Error::UnsupportedKey { why: why.into() }
}

/// The claims of a proof (RFC 9449 section 4.2).
#[derive(Serialize)]
struct ProofClaims<'a> {
    jti: String,
    htm: &'a str,
    htu: &'a str,
    iat: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ath: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nonce: Option<&'a str>,
}

impl DpopKey {
    /// A new P-256 key from 32 bytes of the operating system's generator ([`Error::Random`]
    /// when it fails).
    pub fn generate() -> Result<DpopKey, Error> {
        // A 32-byte string is a valid scalar unless it is zero or not below the group order
        // (a chance of about 2^-32): draw again then.
        for _ in 0..8 {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| Error::Random { why: e.to_string() })?;
            let Ok(secret) = p256::SecretKey::from_slice(&bytes) else {
                continue;
            };
            let der = secret
                .to_pkcs8_der()
                .map_err(|e| unsupported(format!("PKCS#8 encoding: {e}")))?;
            return DpopKey::from_pkcs8_der(der.as_bytes());
        }
        Err(Error::Random {
            why: "no valid P-256 scalar in 8 draws".into(),
        })
    }

    /// A key from a PEM `-----BEGIN PRIVATE KEY-----` block (PKCS#8, unencrypted), as
    /// [`to_pkcs8_pem`](DpopKey::to_pkcs8_pem) writes it. Only P-256 keys:
    /// [`Error::UnsupportedKey`] otherwise.
    pub fn from_pkcs8_pem(pem: &str) -> Result<DpopKey, Error> {
        DpopKey::from_pkcs8_der(&pkcs8_pem_der(pem)?)
    }

    /// A key from PKCS#8 DER. Only P-256 keys: [`Error::UnsupportedKey`] otherwise.
    pub fn from_pkcs8_der(der: &[u8]) -> Result<DpopKey, Error> {
        let secret = p256::SecretKey::from_pkcs8_der(der)
            .map_err(|e| unsupported(format!("not a PKCS#8 P-256 key: {e}")))?;
        // Re-encoded: the same key, in the one form this crate writes.
        let der = secret
            .to_pkcs8_der()
            .map_err(|e| unsupported(format!("PKCS#8 encoding: {e}")))?
            .as_bytes()
            .to_vec();
        let key = EncodingKey::from_ec_der(&der);
        let jwk = Jwk::from_encoding_key(&key, Algorithm::ES256)
            .map_err(|e| unsupported(format!("public key: {e}")))?;
        let thumbprint = jwk
            .thumbprint(ThumbprintHash::SHA256)
            .map_err(|e| unsupported(format!("thumbprint: {e}")))?;
        Ok(DpopKey {
            key,
            der,
            jwk,
            thumbprint,
        })
    }

    /// The private key as a PEM `-----BEGIN PRIVATE KEY-----` block (PKCS#8), for a token
    /// store: a public client's DPoP-bound refresh token is only usable with this key. Handle
    /// it as the secret it is.
    pub fn to_pkcs8_pem(&self) -> String {
        let body = STANDARD.encode(&self.der);
        let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
        for line in body.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
            pem.push('\n');
        }
        pem.push_str("-----END PRIVATE KEY-----\n");
        pem
    }

    /// The private key as PKCS#8 DER (what a [`TokenRecord`](super::TokenRecord) keeps).
    pub(crate) fn pkcs8_der(&self) -> &[u8] {
        &self.der
    }

    /// The public key as a JWK (RFC 7517): `kty` `EC`, `crv` `P-256`, `x`, `y` (and `alg`);
    /// never `d`.
    pub fn public_jwk(&self) -> Value {
        serde_json::to_value(&self.jwk).expect("a JWK serialises")
    }

    /// The key's RFC 7638 SHA-256 thumbprint, base64url: the `jkt` a server binds tokens to.
    pub fn thumbprint(&self) -> &str {
        &self.thumbprint
    }

    /// A fresh proof for one request: `htm` the method (`POST`, `GET`, `DELETE`), `htu` the
    /// request URI without its query and fragment, `iat` now, a new random `jti`; `ath` the
    /// base64url SHA-256 of `access_token` when one is given (requests to a resource server),
    /// `nonce` when given (the server's latest `DPoP-Nonce`, see [`DpopNonces`]).
    ///
    /// Fails only when the operating system's generator does ([`Error::Random`]).
    pub fn proof(
        &self,
        htm: &str,
        htu: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<String, Error> {
        self.proof_at(htm, htu, access_token, nonce, SystemTime::now())
    }

    fn proof_at(
        &self,
        htm: &str,
        htu: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
        now: SystemTime,
    ) -> Result<String, Error> {
        let mut header = Header::new(Algorithm::ES256);
        header.typ = Some(PROOF_TYPE.to_owned());
        header.jwk = Some(self.jwk.clone());
        let claims = ProofClaims {
            jti: random_string(16)?,
            htm,
            htu: without_query(htu),
            iat: now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            ath: access_token.map(|token| URL_SAFE_NO_PAD.encode(Sha256::digest(token))),
            nonce,
        };
        jsonwebtoken::encode(&header, &claims, &self.key)
            .map_err(|e| unsupported(format!("signing a DPoP proof failed: {e}")))
    }
}

/// `uri` without its query and fragment (RFC 9449 section 4.2: `htu` has neither).
fn without_query(uri: &str) -> &str {
    uri.split(['?', '#']).next().unwrap_or_default()
}

/// The origin of an absolute URL (`scheme://authority`, lower-cased; the default port
/// dropped), the key of a nonce slot. `None` for something that is not an http(s) URL.
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.to_ascii_lowercase();
    let authority = match (scheme.as_str(), authority.rsplit_once(':')) {
        ("https", Some((host, "443"))) | ("http", Some((host, "80"))) => host.to_owned(),
        _ => authority,
    };
    if !matches!(scheme.as_str(), "http" | "https") || authority.is_empty() {
        return None;
    }
    Some(format!("{scheme}://{authority}"))
}

/// Whether `nonce` is an RFC 9449 nonce (`1*NQCHAR`: printable ASCII without `"` and `\`) of
/// at most 1 KiB.
fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce.len() <= NONCE_LIMIT
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

/// The longest nonce kept: 1 KiB.
const NONCE_LIMIT: usize = 1024;
/// The most origins whose nonce is kept: 64 (then the slots are cleared; a server whose
/// nonce was dropped asks again with `use_dpop_nonce`).
const NONCE_SLOTS: usize = 64;

/// The latest `DPoP-Nonce` of each origin (RFC 9449 sections 8 and 9): a token endpoint's and a
/// resource server's live in separate slots as long as they are on separate origins. Updated
/// from every response that carries one; at most 64 origins, nonces of at most 1 KiB of
/// RFC 9449's characters (others are ignored).
#[derive(Debug, Default)]
pub struct DpopNonces {
    slots: Mutex<HashMap<String, String>>,
}

impl DpopNonces {
    /// No nonces yet.
    pub fn new() -> DpopNonces {
        DpopNonces::default()
    }

    /// The latest nonce of `url`'s origin.
    pub fn get(&self, url: &str) -> Option<String> {
        let origin = origin(url)?;
        self.slots
            .lock()
            .expect("not poisoned")
            .get(&origin)
            .cloned()
    }

    /// Keeps `nonce` as the latest of `url`'s origin. Returns whether it was kept (an invalid
    /// nonce or URL is not).
    pub fn set(&self, url: &str, nonce: &str) -> bool {
        let Some(origin) = origin(url) else {
            return false;
        };
        if !valid_nonce(nonce) {
            tracing::debug!(%origin, "an invalid DPoP-Nonce ignored");
            return false;
        }
        let mut slots = self.slots.lock().expect("not poisoned");
        if slots.len() >= NONCE_SLOTS && !slots.contains_key(&origin) {
            slots.clear();
        }
        slots.insert(origin, nonce.to_owned());
        true
    }

    /// Keeps the `DPoP-Nonce` of a response of `url`, if it has one. Returns whether it had a
    /// nonce that was kept.
    pub fn update(&self, url: &str, headers: &HeaderMap) -> bool {
        match headers.get("dpop-nonce").map(|v| v.to_str()) {
            Some(Ok(nonce)) => self.set(url, nonce),
            _ => false,
        }
    }
}

/// What the client does when the authorization server's `dpop_signing_alg_values_supported`
/// does not list ES256 (a server that does not publish the list is sent proofs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DpopPolicy {
    /// Refuse: [`Error::DpopUnsupported`], no token is asked for. The default.
    #[default]
    Required,
    /// Ask for a token without a proof (a Bearer token).
    Prefer,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn generated_keys_round_trip_through_pem_and_differ() {
        let key = DpopKey::generate().unwrap();
        let pem = key.to_pkcs8_pem();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        assert!(pem.ends_with("-----END PRIVATE KEY-----\n"));
        assert!(pem.lines().all(|line| line.len() <= 64));
        let again = DpopKey::from_pkcs8_pem(&pem).unwrap();
        assert_eq!(again.thumbprint(), key.thumbprint());
        assert_eq!(again.public_jwk(), key.public_jwk());
        assert_ne!(DpopKey::generate().unwrap().thumbprint(), key.thumbprint());
    }

    #[test]
    fn the_public_jwk_has_no_private_member_and_its_thumbprint_is_rfc_7638() {
        let key = DpopKey::generate().unwrap();
        let jwk = key.public_jwk();
        assert_eq!(jwk["kty"], "EC");
        assert_eq!(jwk["crv"], "P-256");
        assert!(jwk.get("d").is_none(), "{jwk}");
        let canonical = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            jwk["x"].as_str().unwrap(),
            jwk["y"].as_str().unwrap()
        );
        assert_eq!(
            key.thumbprint(),
            URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
        );
    }

    #[test]
    fn other_keys_are_refused() {
        // P-384 and Ed25519 PKCS#8 keys: signing keys, not DPoP keys here.
        let p384 = "-----BEGIN PRIVATE KEY-----
MIG2AgEAMBAGByqGSM49AgEGBSuBBAAiBIGeMIGbAgEBBDAVAOjBH/GBPQA1F/MO
vQDdZvpfedR9XFXeRPPmlbmQGYlfGUbmijVVF4KePOnLGQGhZANiAAS9TOyewSY7
/oHQekAP76rtKjqH3joTYeI2H5hI0bg35VBx2pCl58YfAlaw8FBwVdIlJiyZ3053
/SWNtZqlBRsO3u1d024VNWNdPsbQxQCdeBg53jJYb1G/L51G8Yf1XDo=
-----END PRIVATE KEY-----";
        let ed25519 = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJs2uJxCC3J0RKpymC21jPfq5sBsExVaeacdJQbyeqFw
-----END PRIVATE KEY-----";
        for pem in [p384, ed25519, "garbage"] {
            assert!(
                matches!(
                    DpopKey::from_pkcs8_pem(pem),
                    Err(Error::UnsupportedKey { .. })
                ),
                "{pem}"
            );
        }
        // A P-256 signing key is a DPoP key.
        DpopKey::from_pkcs8_pem(super::super::jwt::tests::P256_PEM).unwrap();
    }

    #[test]
    fn debug_shows_no_private_key() {
        let key = DpopKey::generate().unwrap();
        let shown = format!("{key:?}");
        assert!(shown.contains(key.thumbprint()), "{shown}");
        let body: String = key
            .to_pkcs8_pem()
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        assert!(
            !shown.contains(&body[..20]) && !shown.contains("der"),
            "{shown}"
        );
        let jwk = key.public_jwk();
        assert!(!shown.contains(jwk["x"].as_str().unwrap()), "{shown}");
    }

    #[test]
    fn htu_loses_query_and_fragment() {
        assert_eq!(
            without_query("https://h/messages?sessionId=1#f"),
            "https://h/messages"
        );
        assert_eq!(without_query("https://h/mcp#f"), "https://h/mcp");
        assert_eq!(without_query("https://h/mcp"), "https://h/mcp");
    }

    #[test]
    fn nonce_slots_are_per_origin() {
        let nonces = DpopNonces::new();
        assert!(nonces.set("https://as.example.com/token", "as-nonce"));
        assert!(nonces.set("https://mcp.example.com:8443/mcp?x=1", "rs-nonce"));
        assert_eq!(
            nonces.get("HTTPS://AS.example.com:443/other").as_deref(),
            Some("as-nonce")
        );
        assert_eq!(
            nonces.get("https://mcp.example.com:8443/").as_deref(),
            Some("rs-nonce")
        );
        assert_eq!(nonces.get("https://mcp.example.com/mcp"), None);
        assert_eq!(nonces.get("http://as.example.com/token"), None);
        // The latest wins; invalid nonces and URLs are not kept.
        assert!(nonces.set("https://as.example.com/token", "second"));
        for bad in ["", "a b", "quote\"", "back\\slash", &"n".repeat(1025)] {
            assert!(!nonces.set("https://as.example.com/token", bad), "{bad}");
        }
        assert!(!nonces.set("ftp://as.example.com/", "x"));
        assert_eq!(
            nonces.get("https://as.example.com/").as_deref(),
            Some("second")
        );
        // From a response's headers.
        let mut headers = HeaderMap::new();
        assert!(!nonces.update("https://as.example.com/token", &headers));
        headers.insert("DPoP-Nonce", "third".parse().unwrap());
        assert!(nonces.update("https://as.example.com/token", &headers));
        assert_eq!(
            nonces.get("https://as.example.com/").as_deref(),
            Some("third")
        );
        // Bounded.
        for i in 0..200 {
            nonces.set(&format!("https://h{i}.example.com/"), "n");
        }
        assert!(nonces.slots.lock().unwrap().len() <= NONCE_SLOTS);
    }

    /// The proofs checked by the resource server half's own verifier (RFC 9449 section 4.3).
    #[cfg(feature = "server")]
    mod verified_by_the_server_half {
        use std::time::Duration;

        use super::*;
        use crate::dpop::{ProofRequest, default_dpop_algorithms, verify_proof};
        use crate::nonce::Nonces;

        #[test]
        fn a_resource_proof_passes_the_verifier_with_its_thumbprint() {
            let key = DpopKey::generate().unwrap();
            let now = SystemTime::now();
            let proof = key
                .proof(
                    "POST",
                    "https://mcp.example.com/mcp?ignored=1#frag",
                    Some("the-token"),
                    None,
                )
                .unwrap();
            let request = ProofRequest {
                method: "POST",
                htu: "https://mcp.example.com/mcp",
                access_token: "the-token",
                now,
                nonce: None,
            };
            let verified = verify_proof(&proof, &request, &default_dpop_algorithms()).unwrap();
            assert_eq!(verified.jkt, key.thumbprint());
            assert!(verified.iat + Duration::from_secs(2) >= now && verified.iat <= now);
            // Another method, URI or token is refused: the claims are really checked.
            for wrong in [
                ProofRequest {
                    method: "GET",
                    ..request
                },
                ProofRequest {
                    htu: "https://mcp.example.com/other",
                    ..request
                },
                ProofRequest {
                    access_token: "another-token",
                    ..request
                },
            ] {
                assert!(verify_proof(&proof, &wrong, &default_dpop_algorithms()).is_err());
            }
            // The header: typ, alg, and a public jwk.
            let header = jsonwebtoken::decode_header(&proof).unwrap();
            assert_eq!(header.typ.as_deref(), Some("dpop+jwt"));
            assert_eq!(header.alg, Algorithm::ES256);
            let raw = decode_part(&proof, 0);
            assert!(raw["jwk"].get("d").is_none(), "{raw}");
            assert_eq!(raw["jwk"], key.public_jwk());
        }

        #[test]
        fn every_proof_has_a_new_jti() {
            let key = DpopKey::generate().unwrap();
            let request = ProofRequest {
                method: "GET",
                htu: "https://mcp.example.com/mcp",
                access_token: "t",
                now: SystemTime::now(),
                nonce: None,
            };
            let algs = default_dpop_algorithms();
            let one = verify_proof(
                &key.proof("GET", request.htu, Some("t"), None).unwrap(),
                &request,
                &algs,
            )
            .unwrap();
            let two = verify_proof(
                &key.proof("GET", request.htu, Some("t"), None).unwrap(),
                &request,
                &algs,
            )
            .unwrap();
            assert_ne!(one.jti, two.jti);
            assert!(one.jti.len() >= 22);
            // The server's replay cache takes both and refuses a repeat.
            let cache = crate::dpop::ReplayCache::new(10, 10, Duration::from_secs(360));
            cache.check_and_insert(&one, request.now).unwrap();
            cache.check_and_insert(&two, request.now).unwrap();
            assert!(cache.check_and_insert(&one, request.now).is_err());
        }

        #[test]
        fn the_nonce_given_is_the_one_the_server_checks() {
            let key = DpopKey::generate().unwrap();
            let server_nonces = Nonces::new([7; 32]);
            let now = SystemTime::now();
            let request = ProofRequest {
                method: "POST",
                htu: "https://mcp.example.com/mcp",
                access_token: "t",
                now,
                nonce: Some(&server_nonces),
            };
            let algs = default_dpop_algorithms();
            let without = key.proof("POST", request.htu, Some("t"), None).unwrap();
            assert_eq!(
                verify_proof(&without, &request, &algs),
                Err(crate::AuthError::UseDpopNonce)
            );
            let current = server_nonces.current(now);
            let with = key
                .proof("POST", request.htu, Some("t"), Some(&current))
                .unwrap();
            verify_proof(&with, &request, &algs).unwrap();
            assert_eq!(decode_part(&with, 1)["nonce"], current.as_str());
        }

        #[test]
        fn a_token_request_proof_has_no_ath_and_iat_is_now() {
            let key = DpopKey::generate().unwrap();
            let now = SystemTime::now();
            let proof = key
                .proof_at("POST", "https://as.example.com/token", None, None, now)
                .unwrap();
            let claims = decode_part(&proof, 1);
            assert!(claims.get("ath").is_none(), "{claims}");
            assert!(claims.get("nonce").is_none(), "{claims}");
            assert_eq!(claims["htm"], "POST");
            assert_eq!(claims["htu"], "https://as.example.com/token");
            assert_eq!(
                claims["iat"].as_u64().unwrap(),
                now.duration_since(UNIX_EPOCH).unwrap().as_secs()
            );
            // The verifier wants `ath` for resource requests only: the rest of the proof
            // passes it once its missing `ath` is the only complaint.
            let request = ProofRequest {
                method: "POST",
                htu: "https://as.example.com/token",
                access_token: "t",
                now,
                nonce: None,
            };
            assert_eq!(
                verify_proof(&proof, &request, &default_dpop_algorithms()),
                Err(crate::AuthError::InvalidDpopProof("no ath".into()))
            );
        }
    }

    /// A JWS part, decoded as JSON.
    pub(crate) fn decode_part(jws: &str, index: usize) -> Value {
        let part = jws.split('.').nth(index).unwrap();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    }
}
