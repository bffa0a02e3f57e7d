//! The authentication seam: a [`Guard`] decides who a request comes from before the transport
//! reads it, and whether that caller holds the scopes a request needs.
//!
//! The transport knows no token format and does no cryptography: it asks the guard, answers
//! with the guard's [`Challenge`] (an empty body, so no data reaches an unauthenticated
//! caller), and on success puts the [`Grant`] and its [`Principal`] in the request's extensions
//! and removes the credentials (`Authorization`, `DPoP`) from the headers handlers see, so that
//! no handler can pass the caller's token on. `modelctx-auth` implements it for OAuth 2.1
//! (JWT access tokens, introspection, DPoP); an application may implement it for its own scheme.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use modelctx_types::{Incoming, Message};

use super::app::{McpApp, Principal};
use super::config::ServerConfig;
use super::respond::{self, ResponseBody};
use crate::event_store::BoxFuture;

/// Decides who a request comes from, and whether that caller may make it.
///
/// Set it as [`ServerConfig::guard`](super::ServerConfig::guard). The transport calls
/// [`authenticate`](Guard::authenticate) for every request to the MCP endpoint (every POST, GET
/// and DELETE, and the paths of the deprecated HTTP+SSE transport: a session is never proof of
/// identity) after the path, `Host`/`Origin` and peer checks, counted against
/// `max_requests_in_flight` while it waits, before the body is read; and
/// [`authorize`](Guard::authorize) once per POSTed message whose JSON-RPC requests (each of a
/// batch) need scopes ([`McpApp::required_scopes`](super::McpApp::required_scopes)), with their
/// union, before any of the message reaches the application.
pub trait Guard: Send + Sync + fmt::Debug + 'static {
    /// The protected resource metadata document (RFC 9728) the transport serves without
    /// authentication at [`Metadata::paths`], which it matches before the endpoint's own path:
    /// `GET` and `HEAD` get the JSON with `Access-Control-Allow-Origin: *`, `OPTIONS` a CORS
    /// preflight answer (204), other methods 405. The `Host` and peer are checked as at the
    /// endpoint; the `Origin` is not. `None` (the default): nothing is served.
    fn metadata(&self) -> Option<&Metadata> {
        None
    }

    /// Authenticates a request from its head (method, URI, headers; the body is not read yet).
    /// The URI is the one the client sent: with feature `axum`, as axum's router received it,
    /// before a `nest_service` stripped its prefix. `Err`: the request is answered with the
    /// challenge and goes no further.
    fn authenticate<'a>(
        &'a self,
        request: &'a http::request::Parts,
    ) -> BoxFuture<'a, Result<Grant, Challenge>>;

    /// Whether `grant` covers every scope in `needed` (which is never empty). `Err`: the request
    /// is answered with the challenge (403 `insufficient_scope`, naming the scopes needed).
    fn authorize(&self, grant: &Grant, needed: &[String]) -> Result<(), Challenge>;

    /// Headers to add to every response to an authenticated request (a fresh `DPoP-Nonce`, say):
    /// JSON and SSE answers alike, and the transport's refusals after authentication (an unknown
    /// session, a missing scope). Default: none.
    fn on_success(&self, grant: &Grant, headers: &mut HeaderMap) {
        let _ = (grant, headers);
    }
}

/// Protected resource metadata: one JSON document served at the given paths.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Metadata {
    /// The paths it is served at (`/.well-known/oauth-protected-resource/mcp`, say).
    pub paths: Vec<String>,
    /// The JSON document.
    pub body: Bytes,
}

impl Metadata {
    /// A document served at `paths`.
    pub fn new(paths: Vec<String>, body: Bytes) -> Metadata {
        Metadata { paths, body }
    }
}

/// Who a request comes from and what they may do, as the [`Guard`] found it. Handlers read it
/// from the request's extensions (`Arc<Grant>`); it never holds the token itself.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Grant {
    /// The token's issuer (the authorization server), or a name for another scheme.
    pub issuer: String,
    /// The subject: the user, or the client itself for a client-credentials token.
    pub subject: String,
    /// The OAuth client the token was issued to, when known.
    pub client_id: Option<String>,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// All claims of the token (or of the introspection response), for the application.
    pub claims: serde_json::Map<String, serde_json::Value>,
    /// When the token expires, when known.
    pub expires_at: Option<SystemTime>,
    /// The SHA-256 thumbprint of the key a DPoP-bound token is bound to.
    pub jkt: Option<String>,
}

impl Grant {
    /// A grant to `subject` by `issuer`, with no scopes or claims.
    pub fn new(issuer: impl Into<String>, subject: impl Into<String>) -> Grant {
        Grant {
            issuer: issuer.into(),
            subject: subject.into(),
            client_id: None,
            scopes: Vec::new(),
            claims: serde_json::Map::new(),
            expires_at: None,
            jkt: None,
        }
    }

    /// The principal legacy sessions are bound to: issuer and subject (a subject is unique only
    /// within its issuer).
    pub fn principal(&self) -> Principal {
        Principal(format!("{} {}", self.issuer, self.subject))
    }

    /// Whether `scope` was granted (exactly; a [`Guard`] applies scope hierarchies).
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

/// A refusal: the status (401, 403, 400 or 503) and the headers that say why
/// (`WWW-Authenticate`, `DPoP-Nonce`, `Retry-After`). The body is always empty.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Challenge {
    /// The response's status.
    pub status: StatusCode,
    /// The response's headers.
    pub headers: HeaderMap,
}

impl Challenge {
    /// A refusal with `status` and no headers yet.
    pub fn new(status: StatusCode) -> Challenge {
        Challenge {
            status,
            headers: HeaderMap::new(),
        }
    }
}

/// The answer refusing a request: the challenge's status and headers, an empty body.
pub(crate) fn refusal(challenge: Challenge) -> Response<ResponseBody> {
    let mut response = respond::empty(challenge.status);
    response.headers_mut().extend(challenge.headers);
    response
}

/// Admits an authenticated request: its [`Principal`] is the grant's (replacing any a layer in
/// front put there), the grant (`Arc<Grant>`) and the guard that gave it (`Arc<dyn Guard>`, for
/// the application's own scope checks) go in its extensions, and its credentials
/// (`Authorization`, `DPoP`, every value of each) leave the headers the application sees.
pub(crate) fn admit(parts: &mut http::request::Parts, grant: &Arc<Grant>, guard: &Arc<dyn Guard>) {
    parts.extensions.insert(grant.principal());
    parts.extensions.insert(grant.clone());
    parts.extensions.insert(guard.clone());
    parts.headers.remove(header::AUTHORIZATION);
    parts.headers.remove(DPOP);
}

/// The header of a DPoP proof (RFC 9449).
const DPOP: &str = "dpop";

/// The scopes the JSON-RPC requests of `incoming` need (a single request, or each request of a
/// batch), as the application says them: their union, each once, in the order first named.
/// The application reads each request's params itself (`McpApp::required_scopes`).
/// Notifications and responses need none.
pub(crate) fn needed_scopes(app: &dyn McpApp, incoming: &Incoming) -> Vec<String> {
    let mut needed: Vec<String> = Vec::new();
    let mut add = |message: &Message| {
        let Message::Request(request) = message else {
            return;
        };
        if let Some(scopes) = app.required_scopes(&request.method, request.params.as_deref()) {
            for scope in scopes.iter() {
                if !needed.contains(scope) {
                    needed.push(scope.clone());
                }
            }
        }
    };
    match incoming {
        Incoming::Single(message) => add(message),
        Incoming::Batch(elements) => elements.iter().flatten().for_each(&mut add),
        _ => {}
    }
    needed
}

/// The 403 refusing `incoming` when the grant of the request `parts` lacks a scope one of its
/// requests needs (the challenge of the configuration's guard); `None`: it may go on, as does
/// every request when no guard is configured (a grant a layer in front put in the extensions
/// is the application's to check).
pub(crate) fn check_scopes(
    config: &ServerConfig,
    parts: &http::request::Parts,
    app: &dyn McpApp,
    incoming: &Incoming,
) -> Option<Response<ResponseBody>> {
    let guard = config.guard.as_deref()?;
    let grant = parts.extensions.get::<Arc<Grant>>()?;
    let needed = needed_scopes(app, incoming);
    if needed.is_empty() {
        return None;
    }
    guard.authorize(grant, &needed).err().map(refusal)
}

/// The answer at a protected resource metadata path: the document for `GET` and `HEAD` (any
/// origin may read it: `Access-Control-Allow-Origin: *`), a CORS preflight answer for
/// `OPTIONS`, 405 otherwise. The caller has checked the `Host`.
pub(crate) fn metadata_response(method: &Method, metadata: &Metadata) -> Response<ResponseBody> {
    const ALLOW: &str = "GET, HEAD, OPTIONS";
    let mut response = match *method {
        Method::GET => respond::json(StatusCode::OK, metadata.body.clone()),
        Method::HEAD => {
            let mut response = respond::json(StatusCode::OK, Bytes::new());
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, metadata.body.len().into());
            response
        }
        Method::OPTIONS => {
            let mut response = respond::empty(StatusCode::NO_CONTENT);
            let headers = response.headers_mut();
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(ALLOW),
            );
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("mcp-protocol-version"),
            );
            headers.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("86400"),
            );
            response
        }
        _ => return respond::not_allowed(ALLOW),
    };
    response.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[test]
    fn a_principal_names_issuer_and_subject() {
        let grant = Grant::new("https://id.example.com", "alice");
        assert_eq!(
            grant.principal(),
            Principal("https://id.example.com alice".into())
        );
        let other = Grant::new("https://other.example.com", "alice");
        assert_ne!(grant.principal(), other.principal());
    }

    /// An application that needs scopes for a few names (and is never called otherwise).
    struct Scoped;

    impl McpApp for Scoped {
        fn open_session(
            &self,
            _session: super::super::LegacySession,
        ) -> Arc<dyn super::super::LegacyHandler> {
            unreachable!("only asked for scopes")
        }
        fn modern(&self, _request: super::super::ModernRequest) {
            unreachable!("only asked for scopes")
        }
        fn required_scopes(
            &self,
            method: &str,
            params: Option<&serde_json::value::RawValue>,
        ) -> Option<Arc<[String]>> {
            // What the request names, read the application's way (here: the member its
            // method names, the last of a name when it appears twice).
            let params: serde_json::Value = params
                .and_then(|p| serde_json::from_str(p.get()).ok())
                .unwrap_or_default();
            let member = if method == "resources/read" {
                "uri"
            } else {
                "name"
            };
            let name = params.get(member).and_then(serde_json::Value::as_str);
            let scopes: &[&str] = match (method, name) {
                ("tools/call", Some("rm")) => &["files:write", "files:read"],
                ("tools/call", Some("cat")) => &["files:read"],
                ("resources/read", Some("file:///etc")) => &["admin"],
                ("prompts/get", Some("p")) => &["prompts"],
                ("tools/list", None) => &["list"],
                _ => return None,
            };
            Some(scopes.iter().map(|s| s.to_string()).collect())
        }
    }

    fn needed(body: &str) -> Vec<String> {
        needed_scopes(&Scoped, &modelctx_types::decode(body.as_bytes()).unwrap())
    }

    #[test]
    fn needed_scopes_name_the_tool_prompt_or_resource() {
        assert_eq!(
            needed(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm"}}"#),
            ["files:write", "files:read"]
        );
        assert_eq!(
            needed(r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p"}}"#),
            ["prompts"]
        );
        // No name: `params.uri`.
        assert_eq!(
            needed(
                r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///etc"}}"#
            ),
            ["admin"]
        );
        // Neither: no name.
        assert_eq!(
            needed(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            ["list"]
        );
        // The application reads the params, not the transport: a `name` beside the `uri` of a
        // read is not what it is asked about, and a member given twice is read the way the
        // application reads it (the last one, here).
        assert_eq!(
            needed(
                r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///etc","name":"x"}}"#
            ),
            ["admin"]
        );
        assert_eq!(
            needed(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"cat","name":"rm"}}"#
            ),
            ["files:write", "files:read"]
        );
        // Members that are not strings are absent.
        assert!(
            needed(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#)
                .is_empty()
        );
        assert!(
            needed(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#)
                .is_empty()
        );
    }

    #[test]
    fn notifications_and_responses_need_no_scopes() {
        assert!(
            needed(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"rm"}}"#).is_empty()
        );
        assert!(needed(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_empty());
    }

    #[test]
    fn a_batch_needs_the_union_of_its_requests_scopes_each_once_in_order() {
        let batch = r#"[
            {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"cat"}},
            {"jsonrpc":"2.0","method":"prompts/get","params":{"name":"p"}},
            {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm"}},
            {"jsonrpc":"2.0","id":3},
            {"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"p"}}
        ]"#;
        assert_eq!(needed(batch), ["files:read", "files:write", "prompts"]);
    }

    #[derive(Debug)]
    struct Refuses;

    impl Guard for Refuses {
        fn authenticate<'a>(
            &'a self,
            _request: &'a http::request::Parts,
        ) -> BoxFuture<'a, Result<Grant, Challenge>> {
            unreachable!("only asked to authorize")
        }
        fn authorize(&self, grant: &Grant, needed: &[String]) -> Result<(), Challenge> {
            if needed.iter().all(|scope| grant.has_scope(scope)) {
                return Ok(());
            }
            let mut challenge = Challenge::new(StatusCode::FORBIDDEN);
            let value = format!(
                r#"Bearer error="insufficient_scope", scope="{}""#,
                needed.join(" ")
            );
            challenge
                .headers
                .insert(header::WWW_AUTHENTICATE, value.parse().unwrap());
            Err(challenge)
        }
    }

    /// A configuration with guard `Refuses`, and a request head with `grant`.
    fn guarded(grant: Option<Grant>) -> (ServerConfig, http::request::Parts) {
        let config = ServerConfig {
            guard: Some(Arc::new(Refuses)),
            ..ServerConfig::default()
        };
        let (mut parts, ()) = http::Request::post("/mcp").body(()).unwrap().into_parts();
        if let Some(grant) = grant {
            parts.extensions.insert(Arc::new(grant));
        }
        (config, parts)
    }

    #[tokio::test]
    async fn check_scopes_answers_with_the_guards_challenge_and_an_empty_body() {
        let incoming = modelctx_types::decode(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm"}}"#,
        )
        .unwrap();
        let mut grant = Grant::new("i", "alice");
        grant.scopes = vec!["files:read".into()];
        let (config, parts) = guarded(Some(grant.clone()));
        let refused = check_scopes(&config, &parts, &Scoped, &incoming).expect("a refusal");
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            refused.headers()[header::WWW_AUTHENTICATE],
            r#"Bearer error="insufficient_scope", scope="files:write files:read""#
        );
        let body = refused.into_body().collect().await.unwrap().to_bytes();
        assert!(body.is_empty());
        grant.scopes.push("files:write".into());
        let (config, parts) = guarded(Some(grant));
        assert!(check_scopes(&config, &parts, &Scoped, &incoming).is_none());
        // Nothing needed: the guard is not asked.
        let list = modelctx_types::decode(br#"{"jsonrpc":"2.0","method":"x"}"#).unwrap();
        let (config, parts) = guarded(Some(Grant::new("i", "s")));
        assert!(check_scopes(&config, &parts, &Scoped, &list).is_none());
        // No guard configured: a grant a layer in front put there is not checked here.
        let (_, parts) = guarded(Some(Grant::new("i", "s")));
        assert!(check_scopes(&ServerConfig::default(), &parts, &Scoped, &incoming).is_none());
    }

    #[test]
    fn admitting_replaces_the_principal_and_drops_the_credentials() {
        let (mut parts, ()) = http::Request::post("/mcp")
            .header("authorization", "Bearer secret")
            .header("authorization", "Bearer other")
            .header("DPoP", "proof")
            .header("x-other", "kept")
            .extension(Principal("spoofed".into()))
            .body(())
            .unwrap()
            .into_parts();
        let grant = Arc::new(Grant::new("https://id.example.com", "alice"));
        let guard: Arc<dyn Guard> = Arc::new(Refuses);
        admit(&mut parts, &grant, &guard);
        assert_eq!(
            parts.extensions.get::<Principal>(),
            Some(&Principal("https://id.example.com alice".into()))
        );
        assert_eq!(parts.extensions.get::<Arc<Grant>>(), Some(&grant));
        let admitting = parts.extensions.get::<Arc<dyn Guard>>().expect("the guard");
        assert!(Arc::ptr_eq(admitting, &guard));
        assert!(parts.headers.get(header::AUTHORIZATION).is_none());
        assert!(parts.headers.get("dpop").is_none());
        assert_eq!(parts.headers["x-other"], "kept");
    }

    #[tokio::test]
    async fn the_metadata_answers_get_head_and_preflight_to_any_origin() {
        let metadata = Metadata::new(
            vec!["/.well-known/oauth-protected-resource".into()],
            Bytes::from_static(br#"{"resource":"https://mcp.example.com"}"#),
        );
        let get = metadata_response(&Method::GET, &metadata);
        assert_eq!(get.status(), StatusCode::OK);
        assert_eq!(get.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(get.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        let body = get.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, metadata.body);

        let head = metadata_response(&Method::HEAD, &metadata);
        assert_eq!(head.status(), StatusCode::OK);
        assert_eq!(head.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert_eq!(
            head.headers()[header::CONTENT_LENGTH],
            metadata.body.len().to_string().as_str()
        );
        assert!(
            head.into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .is_empty()
        );

        let options = metadata_response(&Method::OPTIONS, &metadata);
        assert_eq!(options.status(), StatusCode::NO_CONTENT);
        let headers = options.headers();
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert!(
            headers[header::ACCESS_CONTROL_ALLOW_METHODS]
                .to_str()
                .unwrap()
                .contains("GET")
        );
        assert!(
            headers[header::ACCESS_CONTROL_ALLOW_HEADERS]
                .to_str()
                .unwrap()
                .contains("mcp-protocol-version")
        );

        for method in [Method::POST, Method::PUT, Method::DELETE] {
            let refused = metadata_response(&method, &metadata);
            assert_eq!(refused.status(), StatusCode::METHOD_NOT_ALLOWED, "{method}");
            assert_eq!(refused.headers()[header::ALLOW], "GET, HEAD, OPTIONS");
        }
    }

    #[test]
    fn scopes_are_compared_exactly() {
        let mut grant = Grant::new("i", "s");
        grant.scopes = vec!["files:read".into()];
        assert!(grant.has_scope("files:read"));
        assert!(!grant.has_scope("files"));
        assert!(!grant.has_scope("files:read:all"));
    }
}
