//! Why a request was refused.

/// Why a request's credentials were refused. The response says only the OAuth error code
/// (`invalid_token`, say); the detail is for the server's log, and never holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The request carries no credentials this server takes: no `Authorization`, another scheme
    /// (`Basic`, say), or `DPoP` with DPoP off (401, a challenge without an error code).
    #[error("no credentials")]
    Missing,
    /// The credentials are malformed: two `Authorization` headers, a scheme without a token, a
    /// token that is not a token68 (400 `invalid_request`).
    #[error("malformed credentials: {0}")]
    Malformed(String),
    /// The token is not valid here: a bad signature, expired, not yet valid, another issuer or
    /// audience, an algorithm not allowed, inactive (401 `invalid_token`).
    #[error("invalid token: {0}")]
    InvalidToken(String),
    /// The DPoP proof is missing, malformed, replayed or does not match the request or the token
    /// (401 `invalid_dpop_proof`).
    #[error("invalid DPoP proof: {0}")]
    InvalidDpopProof(String),
    /// The DPoP proof needs a fresh server nonce (401 `use_dpop_nonce` with `DPoP-Nonce`).
    #[error("a fresh DPoP nonce is required")]
    UseDpopNonce,
    /// The authorization server could not be asked (metadata, keys or introspection
    /// unreachable or malformed): 503, the token is not at fault.
    #[error("authorization server unavailable: {0}")]
    Unavailable(String),
}
