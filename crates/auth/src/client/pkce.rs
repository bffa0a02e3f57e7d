//! PKCE (RFC 7636) with `S256`, and the random values of a flow: the code verifier, the `state`
//! and the `jti` of client assertions, all from the operating system's generator.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use super::Error;

/// `n` random bytes from the operating system, base64url without padding.
pub(crate) fn random_string(n: usize) -> Result<String, Error> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| Error::Random { why: e.to_string() })?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// A PKCE pair: the verifier kept by the client until the code exchange, and its `S256`
/// challenge sent in the authorization request. `Debug` hides the verifier.
#[derive(Clone)]
pub(crate) struct Pkce {
    /// 32 random bytes, base64url: 43 characters of the unreserved set (RFC 7636 section 4.1).
    pub(crate) verifier: String,
    /// `BASE64URL(SHA256(verifier))` (RFC 7636 section 4.2).
    pub(crate) challenge: String,
}

impl Pkce {
    /// A fresh verifier and its challenge.
    pub(crate) fn generate() -> Result<Pkce, Error> {
        Ok(Pkce::from_verifier(random_string(32)?))
    }

    /// The pair for a given verifier.
    pub(crate) fn from_verifier(verifier: String) -> Pkce {
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        Pkce {
            verifier,
            challenge,
        }
    }
}

impl fmt::Debug for Pkce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pkce")
            .field("verifier", &"<redacted>")
            .field("challenge", &self.challenge)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_7636_appendix_b_vector() {
        let pkce = Pkce::from_verifier("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".to_owned());
        assert_eq!(
            pkce.challenge,
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn verifiers_are_43_unreserved_characters_and_never_repeat() {
        let a = Pkce::generate().unwrap();
        let b = Pkce::generate().unwrap();
        for pkce in [&a, &b] {
            assert_eq!(pkce.verifier.len(), 43);
            assert!(
                pkce.verifier
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"-._~".contains(&c))
            );
            assert_eq!(
                Pkce::from_verifier(pkce.verifier.clone()).challenge,
                pkce.challenge
            );
        }
        assert_ne!(a.verifier, b.verifier);
        assert!(!format!("{a:?}").contains(&a.verifier));
        assert_eq!(random_string(16).unwrap().len(), 22);
    }
}
