//! Refusals: the status and the `WWW-Authenticate` challenges (RFC 6750 section 3, RFC 9449
//! section 7.1, OAuth 2.1 section 5.3, MCP's scope rules).
//!
//! A challenge names only the OAuth error code: never which check failed (no
//! `error_description`), so a refusal teaches a caller nothing about the token's validation.

use http::StatusCode;
use http::header::{HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use modelctx_http::server::Challenge;

use crate::AuthError;
use crate::metadata::advertised;

/// The `Retry-After` of a 503 (the authorization server could not be asked), in seconds.
pub(crate) const RETRY_AFTER_SECS: u32 = 5;

/// What every challenge says, fixed when the configuration is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChallengeInfo {
    /// The metadata URL (`resource_metadata`); empty: not named (no authorization server is
    /// configured, so there is no metadata document).
    pub(crate) resource_metadata: String,
    /// The scopes a client should ask for (`scope` of a 401): the supported scopes, space
    /// separated, without `offline_access`; `None`: not named.
    pub(crate) scope: Option<String>,
    /// The DPoP proof algorithms, space separated (`"ES256 ES384"`), when DPoP is allowed.
    pub(crate) dpop_algs: Option<String>,
    /// Whether `Bearer` tokens are accepted (not with DPoP required).
    pub(crate) bearer_allowed: bool,
}

/// The `DPoP-Nonce` header's name (RFC 9449 8).
pub(crate) const DPOP_NONCE: &str = "dpop-nonce";

/// The refusal for `error`:
/// - `Missing`: 401, challenges without an error code;
/// - `InvalidToken`: 401 `invalid_token`;
/// - `InvalidDpopProof`: 401, the DPoP challenge with `invalid_dpop_proof` (with DPoP off, where
///   no proof is looked at, `invalid_token`);
/// - `UseDpopNonce`: 401, the DPoP challenge with `use_dpop_nonce`, and `DPoP-Nonce` (never with
///   DPoP off: `Auth::build` refuses nonces without DPoP);
/// - `Malformed`: 400 `invalid_request`;
/// - `Unavailable`: 503 with `Retry-After` and no challenge (the token is not at fault).
///
/// 401 and 400 carry a `Bearer` challenge unless DPoP is required and a `DPoP algs=".."`
/// challenge when DPoP is allowed, each with `resource_metadata` and `scope` (when known); an
/// error code goes on every challenge, except that a DPoP error goes on the DPoP one only.
/// `nonce` (a fresh DPoP nonce), when given, is sent as `DPoP-Nonce` with any 401 or 400.
pub(crate) fn refuse(error: &AuthError, info: &ChallengeInfo, nonce: Option<String>) -> Challenge {
    let (status, bearer_error, dpop_error) = match error {
        AuthError::Missing => (StatusCode::UNAUTHORIZED, None, None),
        AuthError::InvalidToken(_) => (
            StatusCode::UNAUTHORIZED,
            Some("invalid_token"),
            Some("invalid_token"),
        ),
        AuthError::InvalidDpopProof(_) if info.dpop_algs.is_none() => {
            (StatusCode::UNAUTHORIZED, Some("invalid_token"), None)
        }
        AuthError::InvalidDpopProof(_) => {
            (StatusCode::UNAUTHORIZED, None, Some("invalid_dpop_proof"))
        }
        AuthError::UseDpopNonce => (StatusCode::UNAUTHORIZED, None, Some("use_dpop_nonce")),
        AuthError::Malformed(_) => (
            StatusCode::BAD_REQUEST,
            Some("invalid_request"),
            Some("invalid_request"),
        ),
        AuthError::Unavailable(_) => {
            let mut challenge = Challenge::new(StatusCode::SERVICE_UNAVAILABLE);
            challenge
                .headers
                .insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            return challenge;
        }
    };
    let mut challenge = Challenge::new(status);
    let scope = info.scope.as_deref();
    if info.bearer_allowed {
        let params = [
            ("error", bearer_error),
            ("resource_metadata", non_empty(&info.resource_metadata)),
            ("scope", scope),
        ];
        push(&mut challenge, "Bearer", &params);
    }
    if let Some(algs) = &info.dpop_algs {
        let params = [
            ("error", dpop_error),
            ("algs", Some(algs.as_str())),
            ("resource_metadata", non_empty(&info.resource_metadata)),
            ("scope", scope),
        ];
        push(&mut challenge, "DPoP", &params);
    }
    if let Some(nonce) = nonce.and_then(|n| HeaderValue::from_str(&n).ok()) {
        challenge.headers.insert(DPOP_NONCE, nonce);
    }
    challenge
}

/// 403 `insufficient_scope` (RFC 6750 3.1, MCP's scope challenge): `scope` names every scope
/// the request needs (each once, space separated, never `offline_access`), with
/// `resource_metadata`; one challenge per accepted scheme.
pub(crate) fn insufficient_scope(needed: &[String], info: &ChallengeInfo) -> Challenge {
    let scope = advertised(needed).collect::<Vec<_>>().join(" ");
    let scope = non_empty(&scope);
    let mut challenge = Challenge::new(StatusCode::FORBIDDEN);
    let resource_metadata = non_empty(&info.resource_metadata);
    if info.bearer_allowed {
        let params = [
            ("error", Some("insufficient_scope")),
            ("scope", scope),
            ("resource_metadata", resource_metadata),
        ];
        push(&mut challenge, "Bearer", &params);
    }
    if let Some(algs) = &info.dpop_algs {
        let params = [
            ("error", Some("insufficient_scope")),
            ("scope", scope),
            ("resource_metadata", resource_metadata),
            ("algs", Some(algs.as_str())),
        ];
        push(&mut challenge, "DPoP", &params);
    }
    challenge
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// Appends the challenge `scheme` with the given auth-params (those with a value).
fn push(challenge: &mut Challenge, scheme: &str, params: &[(&str, Option<&str>)]) {
    let mut text = scheme.to_owned();
    let mut first = true;
    for (name, value) in params {
        let Some(value) = value else { continue };
        text.push_str(if first { " " } else { ", " });
        first = false;
        text.push_str(name);
        text.push('=');
        quote_into(&mut text, value);
    }
    // `quote_into` leaves no byte a header value may not hold.
    if let Ok(value) = HeaderValue::from_bytes(text.as_bytes()) {
        challenge.headers.append(WWW_AUTHENTICATE, value);
    }
}

/// `value` as an RFC 9110 quoted-string: `"` and `\` escaped with `\`; control characters
/// (which no header may carry) dropped.
fn quote_into(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() && c != '\t' => {}
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: &str = "https://h/.well-known/oauth-protected-resource/mcp";

    fn info(dpop: Option<&str>, bearer_allowed: bool) -> ChallengeInfo {
        ChallengeInfo {
            resource_metadata: META.into(),
            scope: Some("mcp files:read".into()),
            dpop_algs: dpop.map(str::to_owned),
            bearer_allowed,
        }
    }

    fn bearer_only() -> ChallengeInfo {
        info(None, true)
    }

    fn www(challenge: &Challenge) -> Vec<&str> {
        challenge
            .headers
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }

    #[test]
    fn no_credentials_is_a_challenge_without_error() {
        let c = refuse(&AuthError::Missing, &bearer_only(), None);
        assert_eq!(c.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            www(&c),
            [format!(
                r#"Bearer resource_metadata="{META}", scope="mcp files:read""#
            )]
        );
        assert_eq!(c.headers.len(), 1);
        let mut no_scope = bearer_only();
        no_scope.scope = None;
        let c = refuse(&AuthError::Missing, &no_scope, None);
        assert_eq!(www(&c), [format!(r#"Bearer resource_metadata="{META}""#)]);
    }

    #[test]
    fn an_invalid_token_says_only_invalid_token() {
        let c = refuse(
            &AuthError::InvalidToken("expired at 12:00".into()),
            &bearer_only(),
            None,
        );
        assert_eq!(c.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            www(&c),
            [format!(
                r#"Bearer error="invalid_token", resource_metadata="{META}", scope="mcp files:read""#
            )]
        );
        assert!(!format!("{:?}", c.headers).contains("expired"));
    }

    #[test]
    fn malformed_is_400_invalid_request() {
        let c = refuse(
            &AuthError::Malformed("two headers".into()),
            &bearer_only(),
            None,
        );
        assert_eq!(c.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            www(&c),
            [format!(
                r#"Bearer error="invalid_request", resource_metadata="{META}", scope="mcp files:read""#
            )]
        );
    }

    #[test]
    fn unavailable_is_503_with_retry_after_and_no_challenge() {
        let c = refuse(
            &AuthError::Unavailable("jwks".into()),
            &info(Some("ES256"), true),
            None,
        );
        assert_eq!(c.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(c.headers[RETRY_AFTER], "5");
        assert!(www(&c).is_empty());
        assert_eq!(c.headers.len(), 1);
    }

    #[test]
    fn dpop_allowed_adds_a_dpop_challenge() {
        let info = info(Some("ES256 EdDSA"), true);
        let c = refuse(&AuthError::Missing, &info, None);
        assert_eq!(
            www(&c),
            [
                format!(r#"Bearer resource_metadata="{META}", scope="mcp files:read""#),
                format!(
                    r#"DPoP algs="ES256 EdDSA", resource_metadata="{META}", scope="mcp files:read""#
                ),
            ]
        );
        let c = refuse(&AuthError::InvalidToken("x".into()), &info, None);
        assert_eq!(
            www(&c),
            [
                format!(
                    r#"Bearer error="invalid_token", resource_metadata="{META}", scope="mcp files:read""#
                ),
                format!(
                    r#"DPoP error="invalid_token", algs="ES256 EdDSA", resource_metadata="{META}", scope="mcp files:read""#
                ),
            ]
        );
        let c = refuse(&AuthError::InvalidDpopProof("htu".into()), &info, None);
        assert_eq!(c.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            www(&c),
            [
                format!(r#"Bearer resource_metadata="{META}", scope="mcp files:read""#),
                format!(
                    r#"DPoP error="invalid_dpop_proof", algs="ES256 EdDSA", resource_metadata="{META}", scope="mcp files:read""#
                ),
            ]
        );
    }

    #[test]
    fn dpop_required_has_no_bearer_challenge() {
        let info = info(Some("ES256"), false);
        let c = refuse(&AuthError::Missing, &info, None);
        assert_eq!(
            www(&c),
            [format!(
                r#"DPoP algs="ES256", resource_metadata="{META}", scope="mcp files:read""#
            )]
        );
        let c = insufficient_scope(&["a".into()], &info);
        assert_eq!(
            www(&c),
            [format!(
                r#"DPoP error="insufficient_scope", scope="a", resource_metadata="{META}", algs="ES256""#
            )]
        );
    }

    #[test]
    fn use_dpop_nonce_carries_the_nonce() {
        let info = info(Some("ES256"), true);
        let c = refuse(&AuthError::UseDpopNonce, &info, Some("n0nce_-".into()));
        assert_eq!(c.status, StatusCode::UNAUTHORIZED);
        assert_eq!(c.headers[DPOP_NONCE], "n0nce_-");
        assert_eq!(
            www(&c)[1],
            format!(
                r#"DPoP error="use_dpop_nonce", algs="ES256", resource_metadata="{META}", scope="mcp files:read""#
            )
        );
        // Without a nonce to give, no header.
        let c = refuse(&AuthError::UseDpopNonce, &info, None);
        assert!(c.headers.get(DPOP_NONCE).is_none());
    }

    #[test]
    fn a_dpop_proof_error_with_dpop_off_is_invalid_token() {
        // Two DPoP headers are refused before the scheme is looked at, even with DPoP off.
        let c = refuse(
            &AuthError::InvalidDpopProof("x".into()),
            &bearer_only(),
            None,
        );
        assert_eq!(c.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            www(&c),
            [format!(
                r#"Bearer error="invalid_token", resource_metadata="{META}", scope="mcp files:read""#
            )]
        );
    }

    #[test]
    fn insufficient_scope_names_all_needed_scopes_but_offline_access() {
        let needed =
            ["files:read", "offline_access", "files:write", "files:read"].map(String::from);
        let c = insufficient_scope(&needed, &bearer_only());
        assert_eq!(c.status, StatusCode::FORBIDDEN);
        assert_eq!(
            www(&c),
            [format!(
                r#"Bearer error="insufficient_scope", scope="files:read files:write", resource_metadata="{META}""#
            )]
        );
        let both = insufficient_scope(&needed[..1], &info(Some("ES256"), true));
        assert_eq!(www(&both).len(), 2);
    }

    #[test]
    fn parameters_are_quoted() {
        let mut info = bearer_only();
        info.scope = Some(r#"a"b c\d"#.into());
        let c = refuse(&AuthError::Missing, &info, None);
        assert_eq!(
            www(&c),
            [format!(
                r#"Bearer resource_metadata="{META}", scope="a\"b c\\d""#
            )]
        );
        let c = insufficient_scope(&[r#"q"uote"#.into(), r"back\slash".into()], &info);
        assert_eq!(
            www(&c),
            [format!(
                r#"Bearer error="insufficient_scope", scope="q\"uote back\\slash", resource_metadata="{META}""#
            )]
        );
        // A control character cannot be sent; it is dropped rather than losing the challenge.
        let c = insufficient_scope(&["bad\r\nscope".into()], &info);
        assert_eq!(
            www(&c),
            [format!(
                r#"Bearer error="insufficient_scope", scope="badscope", resource_metadata="{META}""#
            )]
        );
    }

    #[test]
    fn without_metadata_no_resource_metadata_is_named() {
        let info = ChallengeInfo {
            resource_metadata: String::new(),
            scope: None,
            dpop_algs: None,
            bearer_allowed: true,
        };
        assert_eq!(www(&refuse(&AuthError::Missing, &info, None)), ["Bearer"]);
        assert_eq!(
            www(&refuse(&AuthError::InvalidToken("x".into()), &info, None)),
            [r#"Bearer error="invalid_token""#]
        );
    }
}
