//! The application's part of the authorization code flow: show the authorization URL to the
//! user (a browser, a printed link) and hand back where the authorization server redirected.
//! The library never opens a browser by itself.

use std::fmt;

use crate::fetch::{BoxFuture, form_decode};

/// Shows the user the authorization URL and returns the redirect the authorization server
/// made to the client's redirect URI. Implemented by the application (a desktop app opens a
/// browser and listens on its loopback redirect URI; a test plays the user).
///
/// The call is bounded by the flow's timeout
/// ([`OAuthBuilder::flow_timeout`](super::OAuthBuilder::flow_timeout), default 10 minutes):
/// when it runs out the future is dropped.
pub trait AuthorizationHandler: Send + Sync + fmt::Debug + 'static {
    /// Asks the user to authorize at `request.url`; the redirect it leads to, or [`Declined`].
    fn authorize<'a>(
        &'a self,
        request: &'a AuthorizationRequest,
    ) -> BoxFuture<'a, Result<Redirect, Declined>>;
}

/// What the handler shows the user.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthorizationRequest {
    /// The authorization URL to open: the authorization endpoint with `response_type=code`,
    /// `client_id`, `redirect_uri`, `scope` (when any), `state`, `code_challenge`,
    /// `code_challenge_method=S256`, `resource`, and `prompt=consent` with `offline_access`.
    pub url: String,
    /// The redirect URI the authorization server will send the user back to.
    pub redirect_uri: String,
    /// The authorization server (its issuer).
    pub issuer: String,
    /// The resource (RFC 8707) the token is asked for.
    pub resource: String,
    /// The scopes asked for (empty: no `scope` parameter).
    pub scopes: Vec<String>,
}

/// The handler's refusal: the user declined, no browser could be opened, the window was
/// closed. Becomes [`Error::Declined`](super::Error::Declined).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Declined {
    /// Why, for the error message.
    pub reason: String,
}

impl Declined {
    /// A refusal saying `reason`.
    pub fn new(reason: impl Into<String>) -> Declined {
        Declined {
            reason: reason.into(),
        }
    }
}

/// Where the authorization server sent the user back: the full redirect URL, or only its
/// query. Its `Debug` names the parameters, never their values (the `code` is a credential).
#[derive(Clone, PartialEq, Eq)]
pub struct Redirect {
    params: Vec<(String, String)>,
}

impl Redirect {
    /// Reads the query of `redirect`: a URL (`http://127.0.0.1:8123/callback?code=..&state=..`,
    /// its fragment ignored) or a bare query (`code=..&state=..`, with or without `?`).
    pub fn new(redirect: &str) -> Redirect {
        let without_fragment = redirect.split('#').next().unwrap_or_default();
        // A URL has `://` before any `=`; a bare query does not (its values may hold URLs).
        let is_url = without_fragment
            .split(['=', '&'])
            .next()
            .is_some_and(|first| first.contains("://"));
        let query = if is_url {
            without_fragment
                .split_once('?')
                .map_or("", |(_, query)| query)
        } else {
            without_fragment
                .strip_prefix('?')
                .unwrap_or(without_fragment)
        };
        Redirect {
            params: form_decode(query),
        }
    }

    /// The value of the parameter `name`: `Ok(None)` when absent, `Err(())` when repeated
    /// (RFC 6749 section 3.1: a parameter must not appear more than once).
    pub(crate) fn param(&self, name: &str) -> Result<Option<&str>, ()> {
        let mut found = self.params.iter().filter(|(n, _)| n == name);
        match (found.next(), found.next()) {
            (None, _) => Ok(None),
            (Some((_, value)), None) => Ok(Some(value)),
            (Some(_), Some(_)) => Err(()),
        }
    }
}

impl fmt::Debug for Redirect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Redirect")
            .field(&self.params.iter().map(|(n, _)| n).collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_is_a_url_or_a_query() {
        for given in [
            "http://127.0.0.1:8123/callback?code=abc&state=s%201#frag",
            "?code=abc&state=s+1",
            "code=abc&state=s%201",
            "http://127.0.0.1/cb?code=abc&state=s%201&iss=https://as?x",
            "code=abc&state=s%201&iss=https://as",
        ] {
            let redirect = Redirect::new(given);
            assert_eq!(redirect.param("code"), Ok(Some("abc")), "{given}");
            assert_eq!(redirect.param("state"), Ok(Some("s 1")), "{given}");
            let iss = given.split_once("iss=").map(|(_, iss)| iss);
            assert_eq!(redirect.param("iss"), Ok(iss), "{given}");
        }
        assert_eq!(
            Redirect::new("http://127.0.0.1/callback").param("code"),
            Ok(None)
        );
        assert_eq!(Redirect::new("code=a&code=b").param("code"), Err(()));
    }

    #[test]
    fn debug_names_parameters_not_values() {
        let shown = format!("{:?}", Redirect::new("code=secret-code&state=xyz"));
        assert_eq!(shown, r#"Redirect(["code", "state"])"#);
    }
}
