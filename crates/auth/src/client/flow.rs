//! The authorization code flow with PKCE (OAuth 2.1 section 4.1): the authorization URL, the
//! application's handler, the checks of the redirect in a fixed order (`state`, RFC 9207 `iss`,
//! `error`, `code`), then the code exchange.

use std::fmt;
use std::future::Future;

use tokio::time::Instant;

use super::asmeta::AuthServer;
use super::handler::{AuthorizationHandler, AuthorizationRequest, Redirect};
use super::pkce::{Pkce, random_string};
use super::token::{Grant, Tokens};
use super::{Discovery, Error, OAuth};
use crate::fetch::encode_component;

/// What one authorization request was sent with, kept to check its response ("the same
/// per-request record" of RFC 9207 section 2.4). `Debug` hides the verifier and `state`.
pub(crate) struct Pending {
    pub(crate) state: String,
    pub(crate) pkce: Pkce,
    /// The issuer the request was sent to.
    pub(crate) issuer: String,
    /// Whether the server says it sends `iss` (RFC 9207 section 3).
    pub(crate) iss_required: bool,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("state", &"<redacted>")
            .field("pkce", &self.pkce)
            .field("issuer", &self.issuer)
            .field("iss_required", &self.iss_required)
            .finish()
    }
}

/// The authorization URL: the endpoint (its own query kept, then `&`), `response_type=code`,
/// `client_id`, `redirect_uri`, `scope` (space-separated; absent when there is none), `state`,
/// `code_challenge`, `code_challenge_method=S256`, `resource`, and `prompt=consent` when the
/// scopes include `offline_access` — each form-encoded.
///
/// `prompt=consent` with `offline_access`: OpenID Connect Core 11 says an authorization server
/// ignores `offline_access` without it, and OIDC servers do (oidc-provider drops the scope and
/// issues no refresh token); SEP-2207's `offline_access` comes from there.
pub(crate) fn authorization_url(
    endpoint: &str,
    client_id: &str,
    redirect_uri: &str,
    scopes: &[String],
    pending: &Pending,
    resource: &str,
) -> String {
    let mut url = endpoint.to_owned();
    url.push(if endpoint.contains('?') { '&' } else { '?' });
    let scope = scopes.join(" ");
    let mut params = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
    ];
    if !scope.is_empty() {
        params.push(("scope", &scope));
    }
    params.extend([
        ("state", pending.state.as_str()),
        ("code_challenge", pending.pkce.challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("resource", resource),
    ]);
    if scopes.iter().any(|s| s == "offline_access") {
        params.push(("prompt", "consent"));
    }
    for (i, (name, value)) in params.into_iter().enumerate() {
        if i > 0 {
            url.push('&');
        }
        url.push_str(name);
        url.push('=');
        encode_component(value, &mut url);
    }
    url
}

/// The code of an authorization response, checked in this order, each check reading only
/// what it needs:
/// 1. `state` is the one sent ([`Error::StateMismatch`]; nothing else is read);
/// 2. RFC 9207: when the server says it sends `iss`, it must be there ([`Error::IssMissing`]);
///    when there, it must be the issuer the request went to, byte for byte after form-decoding,
///    with no normalisation ([`Error::IssMismatch`]; the response's `error` is not read: it
///    may come from an attacker's server);
/// 3. `error` ([`Error::AuthorizationDenied`]);
/// 4. `code` ([`Error::InvalidRedirect`] without one).
pub(crate) fn validate(pending: &Pending, redirect: &Redirect) -> Result<String, Error> {
    match redirect.param("state") {
        Ok(Some(state)) if state == pending.state => {}
        _ => return Err(Error::StateMismatch),
    }
    match redirect.param("iss") {
        Ok(Some(iss)) if iss == pending.issuer => {}
        Ok(Some(iss)) => {
            return Err(Error::IssMismatch {
                expected: pending.issuer.clone(),
                got: super::error::remote_text(iss),
            });
        }
        Ok(None) if pending.iss_required => {
            return Err(Error::IssMissing {
                issuer: pending.issuer.clone(),
            });
        }
        Ok(None) => {}
        Err(()) => {
            return Err(Error::InvalidRedirect {
                why: "iss is repeated",
            });
        }
    }
    let text = |name| {
        redirect
            .param(name)
            .ok()
            .flatten()
            .map(super::error::remote_text)
    };
    match redirect.param("error") {
        Ok(None) => {}
        Ok(Some(error)) => {
            return Err(Error::AuthorizationDenied {
                error: super::error::remote_text(error),
                description: text("error_description"),
            });
        }
        Err(()) => {
            return Err(Error::InvalidRedirect {
                why: "error is repeated",
            });
        }
    }
    match redirect.param("code") {
        Ok(Some(code)) if !code.is_empty() => Ok(code.to_owned()),
        Ok(_) => Err(Error::InvalidRedirect { why: "no code" }),
        Err(()) => Err(Error::InvalidRedirect {
            why: "code is repeated",
        }),
    }
}

/// Runs `future` until `deadline`, else [`Error::Timeout`] naming `phase`.
async fn bounded<T>(
    deadline: Instant,
    phase: &'static str,
    future: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout_at(deadline, future)
        .await
        .map_err(|_| Error::Timeout { phase })?
}

impl OAuth {
    /// Gets tokens for `discovery`'s resource with the authorization code flow, the scopes
    /// chosen by [`Discovery::scopes`]: see [`authorize_scopes`](OAuth::authorize_scopes).
    pub async fn authorize(
        &self,
        discovery: &Discovery,
        handler: &dyn AuthorizationHandler,
    ) -> Result<Tokens, Error> {
        self.authorize_scopes(discovery, &discovery.scopes(), handler)
            .await
    }

    /// Gets tokens for `discovery`'s resource with the authorization code flow and `scopes`
    /// (a step-up passes [`Discovery::step_up`]'s union), all within the flow timeout
    /// ([`OAuthBuilder::flow_timeout`](super::OAuthBuilder::flow_timeout), default 10 minutes;
    /// [`Error::Timeout`]):
    /// 1. the client's identity at the authorization server (pre-registered, client ID
    ///    metadata document, dynamic registration);
    /// 2. a PKCE `S256` verifier and a `state` (fresh random values), then the authorization
    ///    URL with `resource` given to `handler`, which returns the redirect (or declines:
    ///    [`Error::Declined`]);
    /// 3. the redirect's checks: `state`, `iss` (RFC 9207), `error`, `code`, in that order;
    /// 4. the code exchange at the token endpoint (`code`, `redirect_uri`, `code_verifier`,
    ///    `resource`, the client's authentication), and the answer's checks.
    ///
    /// The first redirect URI of [`OAuthBuilder::redirect_uri`](super::OAuthBuilder::redirect_uri)
    /// is used; without one, [`Error::InvalidSetting`].
    pub async fn authorize_scopes(
        &self,
        discovery: &Discovery,
        scopes: &[String],
        handler: &dyn AuthorizationHandler,
    ) -> Result<Tokens, Error> {
        let deadline = Instant::now() + self.inner.flow_timeout;
        let server: &AuthServer = &discovery.auth_server;
        server.check_authorization_code()?;
        let Some(redirect_uri) = self.inner.redirect_uris.first() else {
            return Err(Error::InvalidSetting {
                setting: "redirect_uri",
                value: String::new(),
                why: "is needed for the authorization code flow",
            });
        };
        let client = bounded(deadline, "registration", self.identify(server)).await?;
        let pending = Pending {
            state: random_string(16)?,
            pkce: Pkce::generate()?,
            issuer: server.issuer.clone(),
            iss_required: server.iss_parameter_supported,
        };
        let endpoint = server
            .authorization_endpoint
            .as_deref()
            .expect("checked by check_authorization_code");
        let request = AuthorizationRequest {
            url: authorization_url(
                endpoint,
                &client.client_id,
                redirect_uri,
                scopes,
                &pending,
                &discovery.resource,
            ),
            redirect_uri: redirect_uri.clone(),
            issuer: server.issuer.clone(),
            resource: discovery.resource.clone(),
            scopes: scopes.to_vec(),
        };
        let redirect = bounded(deadline, "authorization", async {
            handler
                .authorize(&request)
                .await
                .map_err(|declined| Error::Declined {
                    reason: declined.reason,
                })
        })
        .await?;
        let code = validate(&pending, &redirect)?;
        let grant = Grant {
            params: vec![
                ("grant_type", "authorization_code".to_owned()),
                ("code", code),
                ("redirect_uri", redirect_uri.clone()),
                ("code_verifier", pending.pkce.verifier.clone()),
            ],
            scopes,
            resource: &discovery.resource,
        };
        bounded(
            deadline,
            "token",
            self.token_request(server, &client, grant),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(iss_required: bool) -> Pending {
        Pending {
            state: "st".into(),
            pkce: Pkce::from_verifier("v".into()),
            issuer: "https://as.example.com".into(),
            iss_required,
        }
    }

    fn check(required: bool, query: &str) -> Result<String, Error> {
        validate(&pending(required), &Redirect::new(query))
    }

    #[test]
    fn the_rfc_9207_table() {
        // Advertised and correct; percent-encoded is the same string once decoded.
        assert_eq!(
            check(true, "code=c&state=st&iss=https://as.example.com").unwrap(),
            "c"
        );
        assert_eq!(
            check(true, "code=c&state=st&iss=https%3A%2F%2Fas.example.com").unwrap(),
            "c"
        );
        // Not advertised and absent: accepted.
        assert_eq!(check(false, "code=c&state=st").unwrap(), "c");
        // Advertised and absent.
        assert!(matches!(
            check(true, "code=c&state=st"),
            Err(Error::IssMissing { issuer }) if issuer == "https://as.example.com"
        ));
        // Present and wrong, advertised or not; no normalisation (a trailing `/`, case, an
        // encoded `/`).
        for (required, iss) in [
            (true, "https://evil.example.com"),
            (false, "https://evil.example.com"),
            (true, "https://as.example.com/"),
            (true, "https%3A%2F%2Fas.example.com%2F"),
            (true, "HTTPS://as.example.com"),
            (true, "https://AS.example.com"),
            (true, "https://as.example.com:443"),
            (true, ""),
        ] {
            match check(required, &format!("code=c&state=st&iss={iss}")) {
                Err(Error::IssMismatch { expected, .. }) => {
                    assert_eq!(expected, "https://as.example.com")
                }
                other => panic!("{iss}: {other:?}"),
            }
        }
        // Repeated.
        assert!(matches!(
            check(
                true,
                "code=c&state=st&iss=https://as.example.com&iss=https://evil.example.com"
            ),
            Err(Error::InvalidRedirect { .. })
        ));
    }

    #[test]
    fn an_error_from_the_wrong_issuer_is_not_shown() {
        let result = check(
            true,
            "state=st&iss=https://evil.example.com&error=access_denied&error_description=call+0800",
        );
        let Err(e @ Error::IssMismatch { .. }) = result else {
            panic!("{result:?}");
        };
        assert!(!e.to_string().contains("0800") && !e.to_string().contains("access_denied"));
        // From the right one it is.
        let e = check(
            true,
            "state=st&iss=https://as.example.com&error=access_denied&error_description=no%0Athanks",
        )
        .unwrap_err();
        assert!(
            matches!(&e, Error::AuthorizationDenied { error, description }
            if error == "access_denied" && description.as_deref() == Some("no\\nthanks"))
        );
    }

    #[test]
    fn state_is_checked_first() {
        for query in [
            "code=c&state=other&iss=https://as.example.com",
            "code=c&iss=https://as.example.com",
            "code=c&state=st&state=st&iss=https://as.example.com",
            // Neither a wrong `iss` nor an `error` is looked at before `state`.
            "state=x&iss=https://evil.example.com&error=access_denied",
        ] {
            assert!(
                matches!(check(true, query), Err(Error::StateMismatch)),
                "{query}"
            );
        }
    }

    #[test]
    fn a_code_is_needed() {
        for query in ["state=st", "state=st&code=", "state=st&code=a&code=b"] {
            assert!(
                matches!(check(false, query), Err(Error::InvalidRedirect { .. })),
                "{query}"
            );
        }
    }

    #[test]
    fn the_authorization_url() {
        let p = pending(true);
        let url = authorization_url(
            "https://as.example.com/authorize?tenant=a",
            "my client",
            "http://127.0.0.1:8123/cb",
            &["mcp:basic".into(), "mcp:write".into()],
            &p,
            "https://mcp.example.com/mcp",
        );
        assert_eq!(
            url,
            format!(
                "https://as.example.com/authorize?tenant=a&response_type=code&client_id=my+client\
                 &redirect_uri=http%3A%2F%2F127.0.0.1%3A8123%2Fcb&scope=mcp%3Abasic+mcp%3Awrite\
                 &state=st&code_challenge={}&code_challenge_method=S256\
                 &resource=https%3A%2F%2Fmcp.example.com%2Fmcp",
                p.pkce.challenge
            )
        );
        let url = authorization_url("https://as/authorize", "c", "https://app/cb", &[], &p, "r");
        assert!(url.starts_with("https://as/authorize?response_type=code&"));
        assert!(!url.contains("scope="));
        assert!(!url.contains("prompt="));
    }

    #[test]
    fn offline_access_asks_for_consent() {
        let p = pending(true);
        let scopes = ["mcp".into(), "offline_access".into()];
        let url = authorization_url(
            "https://as/authorize",
            "c",
            "https://app/cb",
            &scopes,
            &p,
            "r",
        );
        assert!(url.contains("&scope=mcp+offline_access&"), "{url}");
        assert!(url.ends_with("&resource=r&prompt=consent"), "{url}");
    }
}
