//! The `auth/*` scenarios: the OAuth client of modelctx-auth set up from the scenario's name and
//! context, with a headless user.
//!
//! Everything the suite checks (discovery, registration, PKCE, `resource`, `iss`, scopes,
//! step-up, DPoP, the grants) is decided by [`OAuth`] itself; this file only maps the context
//! (`MCP_CONFORMANCE_CONTEXT`) to its settings and plays the user: the suite's authorization
//! server redirects at once, without a login page, so "the user" GETs the authorization URL and
//! hands the `Location` it is sent to back to the flow.

use std::sync::Arc;

use modelctx_client::auth::{
    AssertionSource, AuthorizationHandler, AuthorizationRequest, BoxFuture, Declined, DpopKey,
    Fetch, HttpFetch, IdJag, OAuth, OAuthBuilder, Redirect, Registered, SigningKey, SubjectToken,
};
use serde_json::Value;

/// The 33 client scenarios of the suite about authorization: 14 core, 11 of 2026-07-28, 2 of
/// 2025-03-26 back-compatibility, 6 of extensions.
pub(crate) const SCENARIOS: &[&str] = &[
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/enterprise-managed-authorization",
    "auth/dpop",
    "auth/dpop-nonce",
    "auth/wif-jwt-bearer",
];

/// The redirect URI of the authorization code flow (nothing listens there: the headless user
/// reads the redirect from the authorization server's answer).
const REDIRECT_URI: &str = "http://localhost:3000/callback";
/// The client ID metadata document URL the suite expects (`cimd-client-id-used`).
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// The OAuth client for `scenario`, from its `context`.
pub(crate) fn oauth_for(scenario: &str, context: &Value) -> Result<OAuth, String> {
    let text = |name: &str| -> Result<String, String> {
        context
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("MCP_CONFORMANCE_CONTEXT has no {name}"))
    };
    let builder = match scenario {
        "auth/pre-registration" => user().client(
            Registered::new(text("issuer")?, text("client_id")?).secret(text("client_secret")?),
        ),
        "auth/client-credentials-basic" => OAuth::client_credentials(
            Registered::unbound(text("client_id")?).secret(text("client_secret")?),
        ),
        "auth/client-credentials-jwt" => {
            let key = SigningKey::from_pkcs8_pem(&text("private_key_pem")?)
                .map_err(|e| format!("the context's private_key_pem: {e}"))?;
            OAuth::client_credentials(Registered::unbound(text("client_id")?).private_key(key))
        }
        "auth/enterprise-managed-authorization" => OAuth::enterprise(IdJag::new(
            text("idp_token_endpoint")?,
            Registered::unbound(text("idp_client_id")?),
            <dyn SubjectToken>::id_token(text("idp_id_token")?),
        ))
        .client(Registered::unbound(text("client_id")?).secret(text("client_secret")?)),
        "auth/wif-jwt-bearer" => OAuth::jwt_bearer(
            text("client_id")?,
            <dyn AssertionSource>::fixed(text("valid_jwt")?),
        ),
        "auth/dpop" | "auth/dpop-nonce" => {
            user().dpop(DpopKey::generate().map_err(|e| format!("a DPoP key: {e}"))?)
        }
        _ => user(),
    };
    builder
        .build()
        .map_err(|e| format!("the OAuth settings: {e}"))
}

/// The settings of a client whose user signs in: the authorization code flow with the headless
/// user, a client ID metadata document (used where the authorization server supports it, else
/// dynamic registration).
fn user() -> OAuthBuilder {
    OAuth::authorization_code(Arc::new(Headless {
        fetch: HttpFetch::new(),
    }))
    .redirect_uri(REDIRECT_URI)
    .client_metadata_url(CLIENT_METADATA_URL)
    .client_name("modelctx conformance client")
}

/// The user of the suite's authorization server, which approves at once: a GET of the
/// authorization URL, whose redirect (not followed) is the answer.
#[derive(Debug)]
struct Headless {
    fetch: HttpFetch,
}

impl AuthorizationHandler for Headless {
    fn authorize<'a>(
        &'a self,
        request: &'a AuthorizationRequest,
    ) -> BoxFuture<'a, Result<Redirect, Declined>> {
        Box::pin(async move {
            let response = self
                .fetch
                .get(&request.url)
                .await
                .map_err(|e| Declined::new(format!("the authorization page: {e}")))?;
            if !response.status.is_redirection() {
                return Err(Declined::new(format!(
                    "the authorization server answered {} instead of redirecting",
                    response.status
                )));
            }
            let location = response
                .headers
                .get("location")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| Declined::new("a redirect without a Location"))?;
            eprintln!("conformance-client: redirected to {location}");
            Ok(Redirect::new(location))
        })
    }
}
