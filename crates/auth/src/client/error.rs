//! The client's errors: one enum, each variant saying who did what wrong.

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
}
