//! The client's signing keys and the JWTs it signs with them: client assertions (RFC 7523
//! section 2.2) for `private_key_jwt` token endpoint authentication.
//!
//! Keys are PKCS#8 (PEM `PRIVATE KEY` or DER), EC P-256 (ES256), EC P-384 (ES384) or Ed25519
//! (EdDSA); the algorithm follows from the key. RSA keys are refused: the pure-Rust `rsa` crate
//! behind jsonwebtoken has a timing side channel on private-key operations
//! (RUSTSEC-2023-0071), which a resource server never performs but a client would. The PEM is
//! decoded here (armor and base64), so jsonwebtoken's `use_pem` is not needed.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;

use super::Error;
use super::pkce::random_string;

/// How long a client assertion is valid: 60 s.
pub(crate) const ASSERTION_LIFETIME: u64 = 60;

/// A private key the client signs with (`private_key_jwt`). Built from PKCS#8; its `Debug`
/// shows the algorithm and key id, never the key.
#[derive(Clone)]
pub struct SigningKey {
    key: EncodingKey,
    algorithm: Algorithm,
    kid: Option<String>,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("algorithm", &self.algorithm)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

// Object identifiers, DER-encoded (the content of the OID, without tag and length).
/// id-ecPublicKey, 1.2.840.10045.2.1.
const OID_EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// prime256v1 (P-256), 1.2.840.10045.3.1.7.
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// secp384r1 (P-384), 1.3.132.0.34.
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
/// id-Ed25519, 1.3.101.112.
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
/// rsaEncryption, 1.2.840.113549.1.1.1.
const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

fn unsupported(why: impl Into<String>) -> Error {
    Error::UnsupportedKey { why: why.into() }
}

/// One DER element: its tag, its content and what follows it.
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The algorithm OID and its parameter OID (the curve), if any, of a PKCS#8 `PrivateKeyInfo`.
fn pkcs8_algorithm(der: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    const SEQUENCE: u8 = 0x30;
    const INTEGER: u8 = 0x02;
    const OID: u8 = 0x06;
    let (tag, info, _) = der_element(der)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, _version, rest) = der_element(info)?;
    if tag != INTEGER {
        return None;
    }
    let (tag, algorithm, _) = der_element(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, oid, params) = der_element(algorithm)?;
    if tag != OID {
        return None;
    }
    let curve = match der_element(params) {
        Some((OID, curve, _)) => Some(curve),
        _ => None,
    };
    Some((oid, curve))
}

/// The DER of a PEM `-----BEGIN PRIVATE KEY-----` block (PKCS#8, unencrypted); SEC1, encrypted
/// and RSA blocks are refused with [`Error::UnsupportedKey`].
pub(crate) fn pkcs8_pem_der(pem: &str) -> Result<Vec<u8>, Error> {
    let pem = pem.trim();
    let Some(label) = pem
        .strip_prefix("-----BEGIN ")
        .and_then(|rest| rest.split_once("-----"))
        .map(|(label, _)| label)
    else {
        return Err(unsupported("not a PEM block"));
    };
    match label {
        "PRIVATE KEY" => {}
        "RSA PRIVATE KEY" => return Err(unsupported("RSA keys are not supported")),
        "EC PRIVATE KEY" => {
            return Err(unsupported(
                "a SEC1 EC key: convert it to PKCS#8 (openssl pkcs8 -topk8 -nocrypt)",
            ));
        }
        "ENCRYPTED PRIVATE KEY" => return Err(unsupported("an encrypted key")),
        _ => return Err(unsupported("not a PRIVATE KEY block")),
    }
    let end = "-----END PRIVATE KEY-----";
    let body = pem
        .split_once("-----\n")
        .or_else(|| pem.split_once("-----\r\n"))
        .map(|(_, body)| body)
        .and_then(|body| body.trim_end().strip_suffix(end))
        .ok_or_else(|| unsupported("a PEM block without its END line"))?;
    let base64: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = STANDARD
        .decode(base64)
        .map_err(|e| unsupported(format!("PEM body: {e}")))?;
    Ok(der)
}

impl SigningKey {
    /// A key from a PEM `-----BEGIN PRIVATE KEY-----` block (PKCS#8, unencrypted). SEC1
    /// (`EC PRIVATE KEY`), encrypted and RSA keys are refused with [`Error::UnsupportedKey`]
    /// (`openssl pkcs8 -topk8 -nocrypt` converts a SEC1 key).
    pub fn from_pkcs8_pem(pem: &str) -> Result<SigningKey, Error> {
        SigningKey::from_pkcs8_der(&pkcs8_pem_der(pem)?)
    }

    /// A key from PKCS#8 DER. The algorithm follows from the key: P-256 → ES256, P-384 →
    /// ES384, Ed25519 → EdDSA; anything else (RSA included) is [`Error::UnsupportedKey`].
    pub fn from_pkcs8_der(der: &[u8]) -> Result<SigningKey, Error> {
        let (oid, curve) =
            pkcs8_algorithm(der).ok_or_else(|| unsupported("not a PKCS#8 private key"))?;
        let (key, algorithm) = match (oid, curve) {
            (OID_EC, Some(OID_P256)) => (EncodingKey::from_ec_der(der), Algorithm::ES256),
            (OID_EC, Some(OID_P384)) => (EncodingKey::from_ec_der(der), Algorithm::ES384),
            (OID_EC, _) => return Err(unsupported("an EC key on a curve other than P-256, P-384")),
            (OID_ED25519, _) => (EncodingKey::from_ed_der(der), Algorithm::EdDSA),
            (OID_RSA, _) => return Err(unsupported("RSA keys are not supported")),
            _ => return Err(unsupported("not an EC or Ed25519 key")),
        };
        let key = SigningKey {
            key,
            algorithm,
            kid: None,
        };
        // Signs once, so a key jsonwebtoken cannot use is refused now, not at the first
        // token request.
        key.sign(&serde_json::json!({}))?;
        Ok(key)
    }

    /// The key id put in the JWT header (`kid`), for an authorization server that holds
    /// several keys of the client. Default: none.
    pub fn with_kid(mut self, kid: impl Into<String>) -> SigningKey {
        self.kid = Some(kid.into());
        self
    }

    /// The algorithm of its signatures.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// A JWS of `claims` with this key (`typ: JWT`, `alg`, `kid` when set).
    pub(crate) fn sign(&self, claims: &impl Serialize) -> Result<String, Error> {
        let mut header = Header::new(self.algorithm);
        header.kid = self.kid.clone();
        jsonwebtoken::encode(&header, claims, &self.key)
            .map_err(|e| unsupported(format!("signing failed: {e}")))
    }
}

/// The claims of a client assertion (RFC 7523 section 3).
#[derive(Serialize)]
struct AssertionClaims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    jti: String,
    iat: u64,
    exp: u64,
}

/// A client assertion for `private_key_jwt`: `iss` and `sub` the client id, `aud` the
/// authorization server's issuer, a random `jti`, `iat` now and `exp` 60 s later.
pub(crate) fn client_assertion(
    key: &SigningKey,
    client_id: &str,
    audience: &str,
    now: SystemTime,
) -> Result<String, Error> {
    let iat = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    key.sign(&AssertionClaims {
        iss: client_id,
        sub: client_id,
        aud: audience,
        jti: random_string(16)?,
        iat,
        exp: iat + ASSERTION_LIFETIME,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use jsonwebtoken::jwk::Jwk;
    use jsonwebtoken::{DecodingKey, Validation};
    use serde_json::Value;

    use super::*;

    /// A P-256 PKCS#8 key (openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256).
    pub(crate) const P256_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg+O/gCz6X1cawhxYD
jpRUUHS0r6NnkM7c45HJAsSfGPKhRANCAATNbi9y2yIevXtBYcVZNYDbqDF5fb1k
AuTpJQhavXAGYZjIoIPgI6VeS8dSn4SWeJcf80OH3kYyIQqN3SMfnopL
-----END PRIVATE KEY-----";

    /// A P-384 PKCS#8 key.
    const P384_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIG2AgEAMBAGByqGSM49AgEGBSuBBAAiBIGeMIGbAgEBBDAVAOjBH/GBPQA1F/MO
vQDdZvpfedR9XFXeRPPmlbmQGYlfGUbmijVVF4KePOnLGQGhZANiAAS9TOyewSY7
/oHQekAP76rtKjqH3joTYeI2H5hI0bg35VBx2pCl58YfAlaw8FBwVdIlJiyZ3053
/SWNtZqlBRsO3u1d024VNWNdPsbQxQCdeBg53jJYb1G/L51G8Yf1XDo=
-----END PRIVATE KEY-----";

    /// An Ed25519 PKCS#8 key.
    const ED25519_PEM: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJs2uJxCC3J0RKpymC21jPfq5sBsExVaeacdJQbyeqFw
-----END PRIVATE KEY-----";

    /// Decodes `jwt` with the public half of `key`, checking the signature, `aud` and `exp`.
    pub(crate) fn verify(jwt: &str, key: &SigningKey, audience: &str) -> (Value, Value) {
        let jwk = Jwk::from_encoding_key(&key.key, key.algorithm).unwrap();
        let mut validation = Validation::new(key.algorithm);
        validation.set_audience(&[audience]);
        let data =
            jsonwebtoken::decode::<Value>(jwt, &DecodingKey::from_jwk(&jwk).unwrap(), &validation)
                .unwrap();
        (serde_json::to_value(&data.header).unwrap(), data.claims)
    }

    #[test]
    fn each_supported_key_signs_with_its_algorithm() {
        for (pem, alg) in [
            (P256_PEM, Algorithm::ES256),
            (P384_PEM, Algorithm::ES384),
            (ED25519_PEM, Algorithm::EdDSA),
        ] {
            let key = SigningKey::from_pkcs8_pem(pem).unwrap().with_kid("k1");
            assert_eq!(key.algorithm(), alg);
            let now = SystemTime::now();
            let jwt = client_assertion(&key, "my-client", "https://as.example", now).unwrap();
            let (header, claims) = verify(&jwt, &key, "https://as.example");
            assert_eq!(header["alg"], format!("{alg:?}"));
            assert_eq!(header["kid"], "k1");
            assert_eq!(claims["iss"], "my-client");
            assert_eq!(claims["sub"], "my-client");
            assert_eq!(claims["aud"], "https://as.example");
            let iat = claims["iat"].as_u64().unwrap();
            assert_eq!(claims["exp"].as_u64().unwrap(), iat + ASSERTION_LIFETIME);
            assert!(claims["jti"].as_str().unwrap().len() >= 22);
            let other = client_assertion(&key, "my-client", "https://as.example", now).unwrap();
            assert_ne!(
                verify(&other, &key, "https://as.example").1["jti"],
                claims["jti"]
            );
        }
    }

    #[test]
    fn rsa_sec1_encrypted_and_garbage_keys_are_refused() {
        let rsa_pkcs8 = "-----BEGIN PRIVATE KEY-----
MIIBVAIBADANBgkqhkiG9w0BAQEFAASCAT4wggE6AgEAAkEAtjpPCwhF3QPKMrtU
vpBdlO+mjnGdAY+DfMzrZlhPsBcrw7Nc4gHvs9JqL4jHmaTQ2eBBvS53C7h82LlQ
Dho3CQIDAQABAkBlsq7wSkKrMPVEUNXfsDP57bE3Z+Kmv1Azcy2gpYJ7k9GoP2wo
OubBpXuf4v2DbaA0F1Mte66QxNy9OjznGU19AiEA35pQM4ud1JTIge+/7QyG5zPc
fQui445wzqE+vwC1BOMCIQDQoVkbjR5H5idRAyjBa7cTBf/o6pVo6pejHXvFA00E
IwIgHQxtEuU2ceGKUucUpfUUqYChSlVyqeFdYlqsTiAHZEUCICgmJMPMkHs9q2tH
tFwkooKisPDd1ArwumXFksADNpsJAiEAku1X/KTh5IFA9OIgIDp3Hrmuqp5+vvQI
HZxJexFfHak=
-----END PRIVATE KEY-----";
        for (pem, says) in [
            (rsa_pkcs8, "RSA"),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----",
                "RSA",
            ),
            (
                "-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----",
                "SEC1",
            ),
            (
                "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----",
                "encrypted",
            ),
            ("not a key", "PEM"),
            (
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
                "PKCS#8",
            ),
        ] {
            match SigningKey::from_pkcs8_pem(pem) {
                Err(Error::UnsupportedKey { why }) => assert!(why.contains(says), "{why}"),
                other => panic!("{pem}: {other:?}"),
            }
        }
    }

    #[test]
    fn debug_shows_no_key_material() {
        let key = SigningKey::from_pkcs8_pem(P256_PEM).unwrap();
        let shown = format!("{key:?}");
        assert!(shown.contains("ES256"), "{shown}");
        assert!(
            !shown.contains("content") && !shown.contains("MIG"),
            "{shown}"
        );
    }
}
