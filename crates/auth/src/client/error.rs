//! The client's errors: one enum, each variant saying who did what wrong.

use modelctx_http::client::{AuthFailure, AuthFailureKind};

use crate::fetch::FetchError;

/// Why the client could not get authorization. Each variant names the party at fault: the
/// resource server (its metadata or challenge), the authorization server (its metadata), the
/// network, or the application's own configuration. Texts that come from a server are cut to
/// 200 characters with control characters escaped before they are put in an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The application gave a server URL the client cannot use (not an absolute `http` or
    /// `https` URL, user information, a fragment).
    #[error("the server URL {url} {why}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The resource server's protected resource metadata names a `resource` that is not the
    /// server's URL nor a parent of it on the same origin: its tokens would be for another
    /// resource (RFC 9728 section 3.3). Nothing was asked of any authorization server.
    #[error(
        "the protected resource metadata names the resource {published}, not {url} or a parent of it"
    )]
    ResourceMismatch {
        /// The `resource` the metadata names.
        published: String,
        /// The server's URL.
        url: String,
    },
    /// A metadata document (protected resource or authorization server) could not be used: a
    /// status other than 200 or 404, a body that is not the JSON object it should be, a member
    /// missing or of the wrong type.
    #[error("metadata at {url}: {why}")]
    Metadata {
        /// The document's URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The authorization server publishes no metadata at any of its well-known URLs (each
    /// answered 404, or another 4xx).
    #[error("no authorization server metadata for {issuer} (tried {})", tried_list(.tried))]
    NoMetadata {
        /// The authorization server.
        issuer: String,
        /// Each URL tried, with its answer.
        tried: Vec<(String, String)>,
    },
    /// The authorization server's metadata names another issuer than the one it was fetched for
    /// (RFC 8414 section 3.3, compared byte for byte): nothing in it was used.
    #[error("the metadata at {url} names the issuer {found}, not {expected}")]
    IssuerMismatch {
        /// The issuer the metadata was fetched for.
        expected: String,
        /// The issuer it names.
        found: String,
        /// The document's URL.
        url: String,
    },
    /// The authorization server does not support PKCE with `S256` (its metadata has no
    /// `code_challenge_methods_supported` with `S256`), which OAuth 2.1 and MCP require.
    #[error("the authorization server {issuer} does not support PKCE with S256")]
    PkceUnsupported {
        /// The authorization server.
        issuer: String,
    },
    /// A server named an endpoint or issuer that is neither `https` nor `http` on a loopback
    /// host (or not a URL at all).
    #[error("insecure or invalid endpoint {url}: {why}")]
    InsecureEndpoint {
        /// The URL.
        url: String,
        /// Why it was refused.
        why: String,
    },
    /// The server asked for scopes that were already requested for the current token: asking
    /// again would not get them (the step-up gives up instead of looping).
    #[error(
        "the server requires the scopes {required:?}, which were already requested ({requested:?})"
    )]
    InsufficientScope {
        /// The scopes the server's challenge names.
        required: Vec<String>,
        /// The scopes requested for the current token.
        requested: Vec<String>,
    },
    /// A setting of the [`OAuthBuilder`](super::OAuthBuilder) cannot be used (a redirect URI
    /// that is neither `https` nor `http` on a loopback host, a client metadata URL that is not
    /// `https` with a path), or one the flow needs is missing (no redirect URI).
    #[error("the setting {setting} {why}: {value}")]
    InvalidSetting {
        /// The setting.
        setting: &'static str,
        /// The value given (empty when none was).
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The operating system's random number generator failed.
    #[error("no random numbers from the operating system: {why}")]
    Random {
        /// Its error.
        why: String,
    },
    /// A signing key the client cannot use: not PKCS#8, RSA (refused, see the crate docs), a
    /// curve other than P-256 and P-384, encrypted.
    #[error("unsupported signing key: {why}")]
    UnsupportedKey {
        /// Why.
        why: String,
    },
    /// The client has no identity at this authorization server: no pre-registered client for
    /// it, no client ID metadata document it accepts, no dynamic registration endpoint.
    #[error("no client identity for the authorization server {issuer}: {hint}")]
    NoClientIdentity {
        /// The authorization server.
        issuer: String,
        /// What the application could give.
        hint: String,
    },
    /// The client's credentials are for a token endpoint authentication method the
    /// authorization server does not list in `token_endpoint_auth_methods_supported`.
    #[error(
        "the authorization server {issuer} supports none of the methods the client {client_id} can authenticate with ({method}; it lists {supported:?})"
    )]
    NoAuthMethod {
        /// The authorization server.
        issuer: String,
        /// The client id.
        client_id: String,
        /// The method the client's credentials allow.
        method: &'static str,
        /// The methods the server lists.
        supported: Vec<String>,
    },
    /// The dynamic client registration endpoint refused to register the client (RFC 7591
    /// section 3.2.2), or answered with a status other than 200 or 201.
    #[error("the registration endpoint {url} refused the client: status {status}{}", described(.error, .description))]
    RegistrationRefused {
        /// The registration endpoint.
        url: String,
        /// The status.
        status: u16,
        /// Its `error`, if any.
        error: Option<String>,
        /// Its `error_description`, if any.
        description: Option<String>,
    },
    /// The registration endpoint answered 200 or 201 with a body the client cannot use (not
    /// JSON, no `client_id`, a method without the secret it needs or one the client does not
    /// implement).
    #[error("the registration endpoint {url} answered an unusable registration: {why}")]
    InvalidRegistration {
        /// The registration endpoint.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// The authorization response's `state` is missing or not the one sent (RFC 6749 section
    /// 10.12): nothing else of the response was read.
    #[error("the authorization response's state does not match the request's")]
    StateMismatch,
    /// The authorization server says it sends `iss` in authorization responses (RFC 9207) and
    /// this one has none: it may come from another server (a mix-up attack).
    #[error("the authorization response has no iss, which {issuer} says it sends (RFC 9207)")]
    IssMissing {
        /// The expected issuer.
        issuer: String,
    },
    /// The authorization response's `iss` is not the issuer the request was sent to, compared
    /// byte for byte (RFC 9207): it came from another server. Its `error`, if any, was not read.
    #[error("the authorization response comes from {got}, not {expected} (RFC 9207)")]
    IssMismatch {
        /// The issuer the request was sent to.
        expected: String,
        /// The response's `iss`.
        got: String,
    },
    /// The authorization server answered the authorization request with an error (RFC 6749
    /// section 4.1.2.1): `access_denied` when the user refused.
    #[error("the authorization server refused the authorization: {error}{}", described(&None, .description))]
    AuthorizationDenied {
        /// `error`.
        error: String,
        /// `error_description`, if any.
        description: Option<String>,
    },
    /// The authorization response cannot be used: no `code`, or a parameter repeated.
    #[error("the authorization response is unusable: {why}")]
    InvalidRedirect {
        /// What is wrong.
        why: &'static str,
    },
    /// The application's [`AuthorizationHandler`](super::AuthorizationHandler) declined (the
    /// user closed the window, no browser, ...).
    #[error("the authorization was declined: {reason}")]
    Declined {
        /// The handler's reason.
        reason: String,
    },
    /// The token endpoint refused the request (RFC 6749 section 5.2: `invalid_grant`,
    /// `invalid_client`, ...) or answered with a status other than 200.
    #[error("the token endpoint {endpoint} refused the request: status {status}{}", described(.error, .description))]
    TokenRefused {
        /// The token endpoint.
        endpoint: String,
        /// The status.
        status: u16,
        /// Its `error`, if any.
        error: Option<String>,
        /// Its `error_description`, if any.
        description: Option<String>,
    },
    /// The token endpoint answered 200 with a body that is not a usable token response (RFC
    /// 6749 section 5.1): not JSON, no `access_token`, a `token_type` other than `Bearer` and
    /// `DPoP`, a token over 16 KiB.
    #[error("the token endpoint {endpoint} answered an unusable token response: {why}")]
    InvalidTokenResponse {
        /// The token endpoint.
        endpoint: String,
        /// What is wrong.
        why: String,
    },
    /// The revocation endpoint (RFC 7009) answered a revocation with a status other than 200:
    /// `unsupported_token_type` (a server that cannot revoke structured access tokens, say),
    /// `invalid_client`, a `503`.
    #[error("the revocation endpoint {endpoint} refused the request: status {status}{}", described(.error, .description))]
    RevocationRefused {
        /// The revocation endpoint.
        endpoint: String,
        /// The status.
        status: u16,
        /// Its `error`, if any.
        error: Option<String>,
        /// Its `error_description`, if any.
        description: Option<String>,
    },
    /// [`OAuth::refresh`](super::OAuth::refresh) was given tokens it cannot refresh.
    #[error("cannot refresh: {why}")]
    CannotRefresh {
        /// Why.
        why: &'static str,
    },
    /// A phase of the flow took longer than the flow's bound
    /// ([`OAuthBuilder::flow_timeout`](super::OAuthBuilder::flow_timeout)).
    #[error("the authorization flow took too long ({phase})")]
    Timeout {
        /// The phase: `registration`, `authorization` (the handler) or `token`.
        phase: &'static str,
    },
    /// The client has a DPoP key ([`OAuthBuilder::dpop`](super::OAuthBuilder::dpop)) with the
    /// default [`DpopPolicy::Required`](super::DpopPolicy::Required), and the authorization
    /// server's `dpop_signing_alg_values_supported` does not list ES256, the only algorithm of
    /// its proofs: no token was asked for.
    #[error(
        "the authorization server {issuer} does not take ES256 DPoP proofs (it lists {algs:?})"
    )]
    DpopUnsupported {
        /// The authorization server.
        issuer: String,
        /// The algorithms it lists (cut and escaped).
        algs: Vec<String>,
    },
    /// The authorization server's `grant_types_supported` does not list the grant the client is
    /// configured for (or it has no token endpoint): no token was asked for.
    #[error("the authorization server {issuer} does not support the grant {grant}")]
    GrantUnsupported {
        /// The authorization server.
        issuer: String,
        /// The grant type (`client_credentials`, or a URN).
        grant: &'static str,
    },
    /// The application's source of an assertion or subject token (a JWT bearer
    /// [`AssertionSource`](super::AssertionSource), an ID-JAG
    /// [`SubjectToken`](super::SubjectToken)) failed: a file that cannot be read, say.
    #[error("no {what}: {source}")]
    Assertion {
        /// What was asked for: `assertion` or `subject token`.
        what: &'static str,
        /// The source's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The MCP server refused a token the authorization server had just issued (or refreshed)
    /// for it: a second 401 in one request after a fresh token, or a DPoP nonce asked for again
    /// and again. Asking for yet another token would not help (its audience or the clocks may
    /// disagree).
    #[error("the server refuses the tokens {issuer} issues for it: status {status}{}", described(.error, .description))]
    Rejected {
        /// The authorization server whose tokens are refused (empty when none was sent).
        issuer: String,
        /// The server's status.
        status: u16,
        /// The challenge's `error`, if any.
        error: Option<String>,
        /// The challenge's `error_description`, if any.
        description: Option<String>,
    },
    /// The client's [`TokenStore`](super::TokenStore) could not load or save a record.
    #[error("{source}")]
    Store {
        /// The store's error.
        #[source]
        source: super::StoreError,
    },
    /// A request that may not involve the user (the `DELETE` that closes a session) needs
    /// a new authorization: only a refresh could have been tried.
    #[error("authorizing {resource} needs the user, and this request may not involve them")]
    InteractionRequired {
        /// The server's URL or resource.
        resource: String,
    },
    /// A server could not be reached, took too long (5 s per exchange by default), answered
    /// with a body over the bound (256 KiB), or its URL was refused before any connection.
    #[error("{url} could not be fetched: {source}")]
    Unreachable {
        /// The URL.
        url: String,
        /// The cause.
        #[source]
        source: FetchError,
    },
}

impl Error {
    /// The [`AuthFailureKind`] of this error for the HTTP client: whose fault it is.
    pub fn failure_kind(&self) -> AuthFailureKind {
        match self {
            Error::InvalidUrl { .. }
            | Error::InvalidSetting { .. }
            | Error::UnsupportedKey { .. }
            | Error::NoClientIdentity { .. }
            | Error::NoAuthMethod { .. }
            | Error::Store { .. }
            | Error::Assertion { .. } => AuthFailureKind::Misconfigured,
            Error::ResourceMismatch { .. }
            | Error::Metadata { .. }
            | Error::InsecureEndpoint { .. } => AuthFailureKind::Server,
            Error::NoMetadata { .. }
            | Error::IssuerMismatch { .. }
            | Error::PkceUnsupported { .. }
            | Error::RegistrationRefused { .. }
            | Error::InvalidRegistration { .. }
            | Error::StateMismatch
            | Error::IssMissing { .. }
            | Error::IssMismatch { .. }
            | Error::AuthorizationDenied { .. }
            | Error::InvalidRedirect { .. }
            | Error::TokenRefused { .. }
            | Error::RevocationRefused { .. }
            | Error::InvalidTokenResponse { .. }
            | Error::CannotRefresh { .. }
            | Error::DpopUnsupported { .. }
            | Error::GrantUnsupported { .. } => AuthFailureKind::Issuer,
            Error::Declined { .. } => AuthFailureKind::Declined,
            Error::InsufficientScope { .. } => AuthFailureKind::Forbidden,
            Error::Rejected { .. } | Error::InteractionRequired { .. } => AuthFailureKind::Rejected,
            Error::Timeout { .. } | Error::Unreachable { .. } => AuthFailureKind::Unreachable,
            Error::Random { .. } => AuthFailureKind::Other,
        }
    }
}

/// The HTTP client's view of an error: its [`failure_kind`](Error::failure_kind), its message,
/// and the error itself as the source (`AuthFailure::source` downcasts back to it).
impl From<Error> for AuthFailure {
    fn from(error: Error) -> AuthFailure {
        AuthFailure::from_error(error.failure_kind(), error)
    }
}

/// `: error (description)` of a server's error answer, as far as it gave them.
fn described(error: &Option<String>, description: &Option<String>) -> String {
    match (error, description) {
        (Some(error), Some(description)) => format!(": {error} ({description})"),
        (Some(error), None) => format!(": {error}"),
        (None, Some(description)) => format!(" ({description})"),
        (None, None) => String::new(),
    }
}

fn tried_list(tried: &[(String, String)]) -> String {
    tried
        .iter()
        .map(|(url, why)| format!("{url}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The most of a server's text put in an error, in characters.
const REMOTE_TEXT_LIMIT: usize = 200;

/// A server's text made safe to show: at most 200 characters (then `…`), control characters
/// escaped (`\n`, `\u{1b}`), so a hostile server cannot forge log lines or terminal output.
pub(crate) fn remote_text(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == REMOTE_TEXT_LIMIT {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_text_is_bounded_and_escaped() {
        assert_eq!(remote_text("plain"), "plain");
        assert_eq!(remote_text("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
        let long = "é".repeat(500);
        let shown = remote_text(&long);
        assert_eq!(shown.chars().count(), REMOTE_TEXT_LIMIT + 1);
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn messages_say_who_did_what() {
        let e = Error::NoMetadata {
            issuer: "https://as".into(),
            tried: vec![
                ("https://as/a".into(), "status 404 Not Found".into()),
                ("https://as/b".into(), "status 410 Gone".into()),
            ],
        };
        assert_eq!(
            e.to_string(),
            "no authorization server metadata for https://as (tried https://as/a: status 404 Not Found; https://as/b: status 410 Gone)"
        );
        let e = Error::ResourceMismatch {
            published: "https://evil.example.com/mcp".into(),
            url: "https://mcp.example.com/mcp".into(),
        };
        assert!(e.to_string().contains("https://evil.example.com/mcp"));
    }

    #[test]
    fn the_extension_errors_are_the_issuers_or_the_applications() {
        let dpop = Error::DpopUnsupported {
            issuer: "https://as".into(),
            algs: vec!["RS256".into()],
        };
        assert_eq!(dpop.failure_kind(), AuthFailureKind::Issuer);
        let grant = Error::GrantUnsupported {
            issuer: "https://as".into(),
            grant: "client_credentials",
        };
        assert_eq!(grant.failure_kind(), AuthFailureKind::Issuer);
        let assertion = Error::Assertion {
            what: "assertion",
            source: "no such file".into(),
        };
        assert_eq!(assertion.failure_kind(), AuthFailureKind::Misconfigured);
        assert_eq!(
            AuthFailure::from(assertion).kind(),
            AuthFailureKind::Misconfigured
        );
    }
}
