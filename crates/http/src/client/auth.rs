//! The client's authorization seam: an [`Authorizer`] gives the credentials of every request the
//! transport sends and decides what to do when the server refuses them.
//!
//! The mirror of the server's `Guard`. The transport knows no token format, no authorization
//! server and no flow: it asks the authorizer for the headers of each send, tells it what the
//! server answered, and when the server refuses the credentials (401, or 403 whose
//! `WWW-Authenticate` says `error="insufficient_scope"`) asks it whether to send again. It
//! bounds the sends of one exchange ([`MAX_SENDS`]) whatever the authorizer says.
//! `modelctx-auth` implements it for OAuth 2.1; an application may implement it for its own
//! scheme.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::{HeaderMap, Method, StatusCode, Uri};

/// A boxed future, as the [`Authorizer`]'s methods return (the trait stays object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// At most this many sends make one exchange (the first and every send again after a refusal),
/// whatever the [`Authorizer`] says; a sixth refusal fails the exchange with
/// [`TransportError::Auth`](super::TransportError::Auth) of kind [`AuthFailureKind::Rejected`].
pub const MAX_SENDS: usize = 6;

/// Gives the credentials of the requests an [`HttpTransport`](super::HttpTransport) sends, and
/// decides what to do when the server refuses them.
///
/// Set it with [`ClientConfig::auth`](super::ClientConfig::auth). Every request of the transport
/// goes through one loop (each POST of both eras, the one-way POSTs of notifications and
/// responses, the resumption and standalone GETs, the closing `DELETE`, the 2024-11-05
/// transport's GET and POSTs): [`credentials`](Authorizer::credentials) before each send,
/// [`observed`](Authorizer::observed) with the head of each response, and, when the server
/// answers 401 or 403 with `error="insufficient_scope"` in a `WWW-Authenticate` challenge,
/// [`refused`](Authorizer::refused), whose [`Retry::Send`] sends the same request again (the
/// same body, the same head but for the credentials). An exchange is at most [`MAX_SENDS`]
/// sends. The transport keeps no state of the authorizer's: each send's [`Credentials::ticket`]
/// names what was sent, and [`Outgoing::earlier`] shows an exchange's later calls the tickets of
/// its earlier sends, from which the authorizer knows what it already tried.
///
/// The transport does not time the authorizer's calls (an interactive authorization may take
/// minutes: the authorizer bounds its own waits); the response time limits apply to each send.
/// Credentials only ever go in headers: a URL never carries them. The transport follows no
/// redirect, so credentials never reach another origin that way.
pub trait Authorizer: Send + Sync + fmt::Debug + 'static {
    /// The headers for one send of `request` (`Authorization`, `DPoP`), and a ticket naming
    /// them. Called before every send. The values are marked sensitive and replace the
    /// [`ClientConfig::headers`](super::ClientConfig::headers) of the same names. `Err`: the
    /// request is not sent and fails with [`TransportError::Auth`](super::TransportError::Auth).
    fn credentials<'a>(
        &'a self,
        request: &'a Outgoing<'a>,
    ) -> BoxFuture<'a, Result<Credentials, AuthFailure>>;

    /// The server refused the send of `request` that `reply` answers: 401, or 403 whose
    /// challenge says `error="insufficient_scope"`. [`Retry::Send`]: send it again (with new
    /// [`credentials`](Authorizer::credentials)); [`Retry::GiveUp`]: the refusal is not an
    /// authorization matter the authorizer handles, and the response goes up as it is (a 401
    /// stays [`TransportError::Status`](super::TransportError::Status)); `Err`: authorization
    /// failed, and the request fails with [`TransportError::Auth`](super::TransportError::Auth).
    fn refused<'a>(
        &'a self,
        request: &'a Outgoing<'a>,
        reply: &'a Reply<'a>,
    ) -> BoxFuture<'a, Result<Retry, AuthFailure>>;

    /// The head of every response to a send (a server's fresh `DPoP-Nonce` may ride on any
    /// response), before [`refused`](Authorizer::refused) for a refusal. Default: nothing.
    fn observed(&self, request: &Outgoing<'_>, reply: &Reply<'_>) {
        let _ = (request, reply);
    }
}

/// The request being sent, as the [`Authorizer`] sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Outgoing<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI the request goes to (a proof of possession names it).
    pub uri: &'a Uri,
    /// Whether the authorizer may involve the user for it (false for the `DELETE` that closes
    /// a session: a refresh is fine there, asking the user to sign in is not).
    pub interactive: bool,
    /// The tickets of this exchange's earlier sends, oldest first (empty for the first send):
    /// in [`Authorizer::refused`] and [`Authorizer::observed`], those before the send the reply
    /// answers.
    pub earlier: &'a [u64],
}

impl<'a> Outgoing<'a> {
    /// A request to `uri` with `method` (for tests of authorizers; the transport makes its own).
    pub fn new(method: &'a Method, uri: &'a Uri, interactive: bool, earlier: &'a [u64]) -> Self {
        Outgoing {
            method,
            uri,
            interactive,
            earlier,
        }
    }
}

/// The headers of one send and the ticket that names them.
#[derive(Clone)]
#[non_exhaustive]
pub struct Credentials {
    /// Headers added to the send (none: the request goes without credentials).
    pub headers: HeaderMap,
    /// The authorizer's name for this send (which token, which proof), shown back to it in
    /// [`Outgoing::earlier`] and [`Reply::ticket`].
    pub ticket: u64,
}

impl Credentials {
    /// The credentials `headers`, named `ticket`.
    pub fn new(headers: HeaderMap, ticket: u64) -> Self {
        Credentials { headers, ticket }
    }

    /// No credentials (the server's refusal will say what it wants), named `ticket`.
    pub fn none(ticket: u64) -> Self {
        Credentials {
            headers: HeaderMap::new(),
            ticket,
        }
    }
}

/// Shows the names of the headers, never their values.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("ticket", &self.ticket)
            .finish()
    }
}

/// The head of the server's response to one send.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Reply<'a> {
    /// The ticket of the send it answers.
    pub ticket: u64,
    /// The status.
    pub status: StatusCode,
    /// The headers (`WWW-Authenticate`, `DPoP-Nonce`).
    pub headers: &'a HeaderMap,
}

impl<'a> Reply<'a> {
    /// A reply to the send `ticket` (for tests of authorizers; the transport makes its own).
    pub fn new(ticket: u64, status: StatusCode, headers: &'a HeaderMap) -> Self {
        Reply {
            ticket,
            status,
            headers,
        }
    }
}

/// What to do after a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Retry {
    /// Send the request again, with new credentials.
    Send,
    /// Not the authorizer's business (a challenge of a scheme it does not speak): the response
    /// goes up as it is.
    GiveUp,
}

/// What kind of failure an [`AuthFailure`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AuthFailureKind {
    /// The user or the application declined to authorize.
    Declined,
    /// The client's own authorization settings cannot work (no identity for this server, a
    /// key it cannot use).
    Misconfigured,
    /// The party that issues credentials refused or answered wrongly.
    Issuer,
    /// What the MCP server says of its authorization is wrong or inconsistent (its metadata,
    /// its challenge).
    Server,
    /// A party needed for authorization could not be reached in time.
    Unreachable,
    /// The server keeps refusing the credentials it was given (and the transport's bound of
    /// [`MAX_SENDS`] sends per exchange ends with this kind).
    Rejected,
    /// The credentials are accepted but do not allow the request, and no more can be had.
    Forbidden,
    /// Anything else.
    Other,
}

impl fmt::Display for AuthFailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthFailureKind::Declined => "declined",
            AuthFailureKind::Misconfigured => "misconfigured",
            AuthFailureKind::Issuer => "the credential issuer failed",
            AuthFailureKind::Server => "the server's authorization is wrong",
            AuthFailureKind::Unreachable => "unreachable",
            AuthFailureKind::Rejected => "rejected",
            AuthFailureKind::Forbidden => "forbidden",
            AuthFailureKind::Other => "failed",
        })
    }
}

/// Why authorization failed: a kind, a message for people, and the cause (the authorizer's
/// own typed error, which [`Error::source`] gives back for a downcast).
///
/// Equality compares the kind and the message (the cause need not be comparable).
#[derive(Clone)]
pub struct AuthFailure {
    kind: AuthFailureKind,
    message: String,
    source: Option<Arc<dyn Error + Send + Sync + 'static>>,
}

impl AuthFailure {
    /// A failure of `kind`, said by `message`.
    pub fn new(kind: AuthFailureKind, message: impl Into<String>) -> Self {
        AuthFailure {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A failure of `kind` caused by `source`, said by its `Display`.
    pub fn from_error(kind: AuthFailureKind, source: impl Error + Send + Sync + 'static) -> Self {
        AuthFailure {
            kind,
            message: source.to_string(),
            source: Some(Arc::new(source)),
        }
    }

    /// The same failure, with `source` as its cause.
    #[must_use]
    pub fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> AuthFailureKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Debug for AuthFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthFailure")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for AuthFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error for AuthFailure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

impl PartialEq for AuthFailure {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for AuthFailure {}

/// Whether the server's answer is a refusal the authorizer is asked about: 401, or 403 with an
/// `error="insufficient_scope"` auth-param in one of its `WWW-Authenticate` challenges (a 403
/// for any other reason is not about credentials).
pub(crate) fn is_refusal(status: StatusCode, headers: &HeaderMap) -> bool {
    match status {
        StatusCode::UNAUTHORIZED => true,
        StatusCode::FORBIDDEN => headers
            .get_all(http::header::WWW_AUTHENTICATE)
            .iter()
            .any(|value| says_insufficient_scope(value.as_bytes())),
        _ => false,
    }
}

/// Whether a `WWW-Authenticate` value holds the auth-param `error` (any case) whose value is
/// `insufficient_scope`, as a token or a quoted string (RFC 9110 11.6.1). Quoted strings are
/// read as wholes, so the words inside an `error_description` never count.
fn says_insufficient_scope(value: &[u8]) -> bool {
    let mut at = 0;
    while at < value.len() {
        let c = value[at];
        if c == b'"' {
            // A quoted string outside an auth-param (garbage): skipped whole.
            at = quoted(value, at).1;
            continue;
        }
        if !is_tchar(c) {
            at += 1;
            continue;
        }
        let start = at;
        while at < value.len() && is_tchar(value[at]) {
            at += 1;
        }
        let name = &value[start..at];
        let mut next = at;
        while next < value.len() && matches!(value[next], b' ' | b'\t') {
            next += 1;
        }
        if next >= value.len() || value[next] != b'=' {
            continue; // a scheme name, or a token68's start
        }
        next += 1;
        while next < value.len() && matches!(value[next], b' ' | b'\t') {
            next += 1;
        }
        let (param, end) = if next < value.len() && value[next] == b'"' {
            quoted(value, next)
        } else {
            let begin = next;
            while next < value.len() && is_tchar(value[next]) {
                next += 1;
            }
            (value[begin..next].to_vec(), next)
        };
        if name.eq_ignore_ascii_case(b"error") && param == b"insufficient_scope" {
            return true;
        }
        at = end.max(start + 1);
    }
    false
}

/// The content of the quoted string that starts at `start` (a `"`), unescaped, and where it
/// ends.
fn quoted(value: &[u8], start: usize) -> (Vec<u8>, usize) {
    let mut content = Vec::new();
    let mut at = start + 1;
    while at < value.len() {
        match value[at] {
            b'"' => return (content, at + 1),
            b'\\' if at + 1 < value.len() => {
                content.push(value[at + 1]);
                at += 2;
            }
            c => {
                content.push(c);
                at += 1;
            }
        }
    }
    (content, at)
}

/// An RFC 9110 `tchar`.
fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn challenge(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(
                http::header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static(value),
            );
        }
        headers
    }

    #[test]
    fn a_401_is_always_a_refusal_and_a_403_only_with_insufficient_scope() {
        let none = HeaderMap::new();
        assert!(is_refusal(StatusCode::UNAUTHORIZED, &none));
        assert!(!is_refusal(StatusCode::FORBIDDEN, &none));
        assert!(!is_refusal(StatusCode::NOT_FOUND, &none));
        let scope = challenge(&[r#"Bearer error="insufficient_scope", scope="files:write""#]);
        assert!(is_refusal(StatusCode::FORBIDDEN, &scope));
        assert!(!is_refusal(StatusCode::OK, &scope));
        // A token value, any case of the name, the second challenge of two headers.
        let token = challenge(&["Basic realm=\"x\"", "DPoP ERROR=insufficient_scope"]);
        assert!(is_refusal(StatusCode::FORBIDDEN, &token));
        // Other errors, and the words inside a description, do not count.
        for value in [
            r#"Bearer error="invalid_token""#,
            r#"Bearer error_description="error=\"insufficient_scope\"""#,
            r#"Bearer error="insufficient_scope_not""#,
            r#"Bearer realm="error=insufficient_scope""#,
            "Bearer abc==, error",
            "\"unterminated error=insufficient_scope",
        ] {
            let headers = challenge(&[value]);
            assert!(!says_insufficient_scope(value.as_bytes()), "{value}");
            assert!(!is_refusal(StatusCode::FORBIDDEN, &headers), "{value}");
        }
        assert!(says_insufficient_scope(
            br#"Bearer realm="a,b", error = "insufficient_scope""#
        ));
    }

    #[test]
    fn debug_shows_no_credential_and_failures_compare_by_kind_and_message() {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer s3cret"),
        );
        let debug = format!("{:?}", Credentials::new(headers, 7));
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(
            debug.contains("authorization") && debug.contains('7'),
            "{debug}"
        );

        #[derive(Debug, thiserror::Error)]
        #[error("the token endpoint said invalid_grant")]
        struct Cause;
        let failure = AuthFailure::from_error(AuthFailureKind::Issuer, Cause);
        assert_eq!(failure.to_string(), "the token endpoint said invalid_grant");
        assert!(failure.source().is_some_and(|s| s.is::<Cause>()));
        assert_eq!(
            failure,
            AuthFailure::new(
                AuthFailureKind::Issuer,
                "the token endpoint said invalid_grant"
            )
        );
        assert_ne!(
            failure,
            AuthFailure::new(
                AuthFailureKind::Rejected,
                "the token endpoint said invalid_grant"
            )
        );
        let caused = AuthFailure::new(AuthFailureKind::Declined, "no").with_source(Cause);
        assert!(caused.source().is_some());
        assert_eq!(caused.kind(), AuthFailureKind::Declined);
        assert_eq!(caused.message(), "no");
    }
}
