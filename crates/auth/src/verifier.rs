//! Tokens of other schemes than OAuth (API keys, a static secret): [`TokenVerifier`].

use std::fmt;
use std::io;
use std::path::Path;

use crate::BoxFuture;
use modelctx_http::server::Grant;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::AuthError;

/// Verifies bearer tokens of another scheme than OAuth access tokens: API keys, say.
///
/// Verifiers are asked in the order they were added, before the configured issuers; the first
/// that answers `Ok(Some(grant))` authenticates the request, `Ok(None)` means "not one of
/// mine" (the next verifier, then the issuers, are asked), and `Err` refuses the request.
pub trait TokenVerifier: Send + Sync + fmt::Debug + 'static {
    /// The grant `token` stands for; `Ok(None)`: not a token this verifier knows.
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<Grant>, AuthError>>;
}

/// One shared secret, as a bearer token: for a server run by and for one person (`mcx`).
///
/// The secret is kept only as its SHA-256 digest, and a token is compared by digest in constant
/// time (so neither the comparison's time nor the token's length tells how much of it matched).
/// A match grants issuer [`StaticToken::ISSUER`], subject `static` (see
/// [`subject`](StaticToken::subject)) and no scopes (see [`scopes`](StaticToken::scopes)).
#[derive(Clone)]
pub struct StaticToken {
    digest: [u8; 32],
    subject: String,
    scopes: Vec<String>,
}

impl StaticToken {
    /// The issuer of the grants a static token makes.
    pub const ISSUER: &'static str = "static-token";

    /// A verifier accepting exactly `secret`.
    pub fn new(secret: impl Into<String>) -> StaticToken {
        StaticToken {
            digest: Sha256::digest(secret.into().as_bytes()).into(),
            subject: "static".to_owned(),
            scopes: Vec::new(),
        }
    }

    /// A verifier accepting the secret stored in the file at `path`, without one trailing
    /// newline (`\n` or `\r\n`). An empty secret is refused (`InvalidData`): it would let anyone
    /// with an empty token in.
    pub fn from_file(path: impl AsRef<Path>) -> io::Result<StaticToken> {
        let text = std::fs::read_to_string(path)?;
        let secret = text
            .strip_suffix("\r\n")
            .or_else(|| text.strip_suffix('\n'))
            .unwrap_or(&text);
        if secret.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the token file holds an empty secret",
            ));
        }
        Ok(StaticToken::new(secret))
    }

    /// The subject of the grant (default `static`).
    pub fn subject(mut self, subject: impl Into<String>) -> StaticToken {
        self.subject = subject.into();
        self
    }

    /// The scopes the grant holds (default none).
    pub fn scopes(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> StaticToken {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Whether `token` is the secret, in constant time.
    fn matches(&self, token: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        digest.ct_eq(&self.digest).into()
    }
}

impl fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticToken")
            .field("subject", &self.subject)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl TokenVerifier for StaticToken {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<Grant>, AuthError>> {
        let grant = self.matches(token).then(|| {
            let mut grant = Grant::new(StaticToken::ISSUER, self.subject.clone());
            grant.scopes = self.scopes.clone();
            grant
        });
        Box::pin(async move { Ok(grant) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn verify(v: &StaticToken, token: &str) -> Option<Grant> {
        v.verify(token).await.unwrap()
    }

    #[tokio::test]
    async fn only_the_secret_matches() {
        let v = StaticToken::new("s3cret-token");
        let grant = verify(&v, "s3cret-token").await.unwrap();
        assert_eq!(grant.issuer, StaticToken::ISSUER);
        assert_eq!(grant.subject, "static");
        assert!(grant.scopes.is_empty());
        for other in ["s3cret-tokeN", "s3cret-toke", "s3cret-token ", "", "x"] {
            assert_eq!(verify(&v, other).await, None, "{other:?}");
        }
        let v = v.subject("me").scopes(["demo:admin"]);
        let grant = verify(&v, "s3cret-token").await.unwrap();
        assert_eq!(
            (grant.subject.as_str(), grant.scopes),
            ("me", vec!["demo:admin".to_owned()])
        );
    }

    #[test]
    fn debug_does_not_show_the_secret() {
        let shown = format!("{:?}", StaticToken::new("s3cret-token"));
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[tokio::test]
    async fn from_file_trims_one_newline_and_refuses_empty() {
        let dir = std::env::temp_dir().join(format!("modelctx-auth-static-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let v = StaticToken::from_file(file("lf", "abc\n")).unwrap();
        assert!(verify(&v, "abc").await.is_some());
        assert!(verify(&v, "abc\n").await.is_none());
        let v = StaticToken::from_file(file("crlf", "abc\r\n")).unwrap();
        assert!(verify(&v, "abc").await.is_some());
        let v = StaticToken::from_file(file("two", "abc\n\n")).unwrap();
        assert!(verify(&v, "abc\n").await.is_some());
        assert!(verify(&v, "abc").await.is_none());
        let v = StaticToken::from_file(file("bare", "abc")).unwrap();
        assert!(verify(&v, "abc").await.is_some());
        for empty in ["", "\n", "\r\n"] {
            let err = StaticToken::from_file(file("empty", empty)).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{empty:?}");
        }
        let missing = StaticToken::from_file(dir.join("missing")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
