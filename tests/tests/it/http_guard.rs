//! The transport's side of authentication: a [`Guard`] (here a fake one, no cryptography) set in
//! `ServerConfig::guard` decides every request to the endpoint before it is read; the protected
//! resource metadata is served at its well-known paths without credentials; scopes are checked
//! before a message is processed; handlers see the grant and its principal, never the
//! credentials.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use modelctx_http::event_store::BoxFuture;
use modelctx_http::headers::ParamHeader;
use modelctx_http::server::{
    Challenge, Grant, Guard, LegacyHandler, LegacySession, McpApp, McpService, Metadata,
    ModernRequest, Principal, RequestContext, RunningServer, ServerConfig, TableSizes,
};
use modelctx_tests::http::{
    LOOPBACK_PEER, RawResponse, TestApp, call, modern_call, modern_headers, post_headers,
    raw_request, within,
};
use modelctx_types::{Incoming, RequestId};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.test";
const METADATA_PATHS: [&str; 2] = [
    "/.well-known/oauth-protected-resource/mcp",
    "/.well-known/oauth-protected-resource",
];
const METADATA: &str =
    r#"{"resource":"http://127.0.0.1/mcp","authorization_servers":["https://as.test"]}"#;
const CHALLENGE: &str =
    r#"Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource/mcp""#;
const DPOP_CHALLENGE: &str = r#"DPoP algs="ES256""#;

/// A guard that knows three tokens: `alice` (no scopes), `alice-w` (alice with `files:write`)
/// and `bob`, sent as `Bearer <token>`. With `gate`, authentication waits for a permit.
#[derive(Debug)]
struct FakeGuard {
    metadata: Metadata,
    gate: Option<Arc<tokio::sync::Semaphore>>,
    asked: AtomicUsize,
}

impl FakeGuard {
    fn new() -> FakeGuard {
        FakeGuard {
            metadata: Metadata::new(
                METADATA_PATHS.iter().map(|p| p.to_string()).collect(),
                Bytes::from_static(METADATA.as_bytes()),
            ),
            gate: None,
            asked: AtomicUsize::new(0),
        }
    }
}

impl Guard for FakeGuard {
    fn metadata(&self) -> Option<&Metadata> {
        Some(&self.metadata)
    }

    fn authenticate<'a>(
        &'a self,
        request: &'a http::request::Parts,
    ) -> BoxFuture<'a, Result<Grant, Challenge>> {
        Box::pin(async move {
            self.asked.fetch_add(1, Ordering::SeqCst);
            if let Some(gate) = &self.gate {
                let _permit = gate.acquire().await;
            }
            let token = request
                .headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            let (subject, scopes): (&str, &[&str]) = match token {
                Some("alice") => ("alice", &[]),
                Some("alice-w") => ("alice", &["files:write"]),
                Some("bob") => ("bob", &[]),
                _ => {
                    let mut challenge = Challenge::new(StatusCode::UNAUTHORIZED);
                    challenge.headers.append(
                        header::WWW_AUTHENTICATE,
                        HeaderValue::from_static(CHALLENGE),
                    );
                    challenge.headers.append(
                        header::WWW_AUTHENTICATE,
                        HeaderValue::from_static(DPOP_CHALLENGE),
                    );
                    return Err(challenge);
                }
            };
            let mut grant = Grant::new(ISSUER, subject);
            grant.scopes = scopes.iter().map(|s| s.to_string()).collect();
            Ok(grant)
        })
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

    fn on_success(&self, grant: &Grant, headers: &mut HeaderMap) {
        headers.insert("dpop-nonce", grant.subject.parse().unwrap());
    }
}

/// What a handler saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    headers: HeaderMap,
    principal: Option<Principal>,
    grant: Option<Grant>,
}

impl Seen {
    fn of(context: &RequestContext) -> Seen {
        Seen {
            headers: context.headers().clone(),
            principal: context.principal().cloned(),
            grant: context.grant().cloned(),
        }
    }
}

/// The test application, recording what each request's handler saw; tool `progress` needs
/// scope `files:write`.
#[derive(Clone, Default)]
struct Recording {
    inner: TestApp,
    seen: Arc<Mutex<Vec<Seen>>>,
    opened: Arc<AtomicUsize>,
}

impl Recording {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

struct RecordingHandler {
    inner: Arc<dyn LegacyHandler>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl LegacyHandler for RecordingHandler {
    fn input(&self, input: Incoming, context: RequestContext) {
        self.seen.lock().unwrap().push(Seen::of(&context));
        self.inner.input(input, context);
    }

    fn abandoned(&self, id: RequestId) {
        self.inner.abandoned(id);
    }

    fn closed(&self, reason: modelctx_http::server::Closed) {
        self.inner.closed(reason);
    }
}

impl McpApp for Recording {
    fn open_session(&self, session: LegacySession) -> Arc<dyn LegacyHandler> {
        self.opened.fetch_add(1, Ordering::SeqCst);
        Arc::new(RecordingHandler {
            inner: self.inner.open_session(session),
            seen: self.seen.clone(),
        })
    }

    fn modern(&self, request: ModernRequest) {
        self.seen.lock().unwrap().push(Seen::of(&request.context));
        self.inner.modern(request);
    }

    fn tool_param_headers(&self, tool: &str) -> Option<Arc<[ParamHeader]>> {
        self.inner.tool_param_headers(tool)
    }

    fn required_scopes(
        &self,
        method: &str,
        params: Option<&serde_json::value::RawValue>,
    ) -> Option<Arc<[String]>> {
        let params: Value = serde_json::from_str(params?.get()).ok()?;
        (method == "tools/call" && params["name"] == "progress")
            .then(|| Arc::from(vec!["files:write".to_owned()]))
    }
}

fn guarded(guard: FakeGuard) -> (ServerConfig, Arc<FakeGuard>) {
    let guard = Arc::new(guard);
    let mut config = ServerConfig::default();
    config.guard = Some(guard.clone());
    (config, guard)
}

async fn start(config: ServerConfig) -> (RunningServer, Recording) {
    let app = Recording::default();
    let server = modelctx_http::server::serve("127.0.0.1:0", config, Arc::new(app.clone()))
        .await
        .expect("a server on 127.0.0.1");
    (server, app)
}

/// A request with `token` (`Bearer <token>`) and the legacy POST headers.
fn with_token<'a>(
    token: &'a str,
    session: Option<&'a str>,
    version: Option<&'a str>,
) -> Vec<(&'a str, &'a str)> {
    let mut headers = post_headers(session, version);
    headers.push(("Authorization", token));
    headers
}

async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> RawResponse {
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    within(method, raw_request(addr, method, path, headers, &body)).await
}

fn initialize(version: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
}

/// Opens a legacy session at `version` with `token`; returns its id.
async fn open_as(addr: std::net::SocketAddr, token: &str, version: &str) -> String {
    let response = send(
        addr,
        "POST",
        "/mcp",
        &with_token(token, None, None),
        &initialize(version),
    )
    .await;
    assert_eq!(response.status, 200);
    let id = response
        .header("mcp-session-id")
        .expect("a session")
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = send(
        addr,
        "POST",
        "/mcp",
        &with_token(token, Some(&id), Some(version)),
        &initialized,
    )
    .await;
    assert_eq!(response.status, 202);
    id
}

/// Asserts `response` is the guard's 401: both challenges, an empty body, no nonce.
async fn assert_challenged(response: RawResponse, what: &str) {
    assert_eq!(response.status, 401, "{what}");
    let challenges: Vec<&str> = response
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("www-authenticate"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(challenges, [CHALLENGE, DPOP_CHALLENGE], "{what}");
    assert_eq!(response.header("dpop-nonce"), None, "{what}");
    assert_eq!(response.header("content-type"), None, "{what}");
    assert!(response.body().await.is_empty(), "{what}");
}

fn sizes_without_in_flight(sizes: TableSizes) -> (usize, usize, usize, usize) {
    (sizes.sessions, sizes.streams, sizes.requests, sizes.queued)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_valid_credentials_get_the_challenge_and_change_nothing() {
    let (mut config, guard) = guarded(FakeGuard::new());
    config.old_sse = Some(Default::default());
    let (server, app) = start(config).await;
    let addr = server.local_addr();
    let session = open_as(addr, "Bearer alice", "2025-11-25").await;
    let before = server.service().table_sizes().await;
    let seen = app.seen().len();
    let asked = guard.asked.load(Ordering::SeqCst);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let sse = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
    ];
    let messages = format!("/messages?sessionId={session}");
    let mut modern = modern_headers("tools/call", Some("echo"));
    modern.push(("Authorization", "Bearer mallory"));
    for (what, method, path, headers, body) in [
        (
            "initialize",
            "POST",
            "/mcp",
            post_headers(None, None),
            initialize("2025-11-25"),
        ),
        (
            "a request on the session",
            "POST",
            "/mcp",
            post_headers(Some(&session), Some("2025-11-25")),
            list.clone(),
        ),
        (
            "an unknown token",
            "POST",
            "/mcp",
            with_token("Bearer mallory", Some(&session), None),
            list.clone(),
        ),
        (
            "another scheme",
            "POST",
            "/mcp",
            with_token("Basic YWxpY2U6", Some(&session), None),
            list.clone(),
        ),
        (
            "the standalone stream",
            "GET",
            "/mcp",
            sse.to_vec(),
            Value::Null,
        ),
        (
            "the session's end",
            "DELETE",
            "/mcp",
            vec![("Mcp-Session-Id", session.as_str())],
            Value::Null,
        ),
        (
            "a 2026-07-28 request",
            "POST",
            "/mcp",
            modern.clone(),
            modern_call(1, "echo", json!({"text": "hi"})),
        ),
        (
            "the deprecated transport's stream",
            "GET",
            "/sse",
            vec![("Accept", "text/event-stream")],
            Value::Null,
        ),
        (
            "the deprecated transport's messages",
            "POST",
            messages.as_str(),
            post_headers(None, None),
            list.clone(),
        ),
        (
            "a method the endpoint refuses",
            "PUT",
            "/mcp",
            Vec::new(),
            Value::Null,
        ),
    ] {
        let response = send(addr, method, path, &headers, &body).await;
        assert_challenged(response, what).await;
    }
    assert_eq!(guard.asked.load(Ordering::SeqCst), asked + 10);
    assert_eq!(
        sizes_without_in_flight(server.service().table_sizes().await),
        sizes_without_in_flight(before),
        "no session opened, ended or streamed"
    );
    assert_eq!(app.seen().len(), seen, "the application was not called");
    assert_eq!(app.opened.load(Ordering::SeqCst), 1);
    // The session is still there for its owner.
    let response = send(
        addr,
        "POST",
        "/mcp",
        &with_token("Bearer alice", Some(&session), Some("2025-11-25")),
        &list,
    )
    .await;
    assert_eq!(response.status, 200);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_is_served_at_both_paths_without_credentials() {
    let (config, guard) = guarded(FakeGuard::new());
    let (server, app) = start(config).await;
    let addr = server.local_addr();
    for path in METADATA_PATHS {
        // A browser on another origin may read it.
        let response = send(
            addr,
            "GET",
            path,
            &[("Origin", "https://app.example.com")],
            &Value::Null,
        )
        .await;
        assert_eq!(response.status, 200, "{path}");
        assert_eq!(response.header("content-type"), Some("application/json"));
        assert_eq!(response.header("access-control-allow-origin"), Some("*"));
        assert_eq!(response.body().await, METADATA.as_bytes(), "{path}");

        let head = send(addr, "HEAD", path, &[], &Value::Null).await;
        assert_eq!(head.status, 200, "{path}");
        assert_eq!(
            head.header("content-length"),
            Some(METADATA.len().to_string().as_str())
        );
        assert_eq!(head.header("access-control-allow-origin"), Some("*"));

        let preflight = send(
            addr,
            "OPTIONS",
            path,
            &[
                ("Origin", "https://app.example.com"),
                ("Access-Control-Request-Method", "GET"),
                ("Access-Control-Request-Headers", "mcp-protocol-version"),
            ],
            &Value::Null,
        )
        .await;
        assert_eq!(preflight.status, 204, "{path}");
        assert_eq!(preflight.header("access-control-allow-origin"), Some("*"));
        assert!(
            preflight
                .header("access-control-allow-methods")
                .is_some_and(|m| m.contains("GET"))
        );
        assert!(
            preflight
                .header("access-control-allow-headers")
                .is_some_and(|h| h.to_ascii_lowercase().contains("mcp-protocol-version"))
        );

        let post = send(addr, "POST", path, &post_headers(None, None), &json!({})).await;
        assert_eq!(post.status, 405, "{path}");
        assert_eq!(post.header("allow"), Some("GET, HEAD, OPTIONS"));

        // The Host is checked as at the endpoint (DNS rebinding): a foreign name gets 403.
        let foreign = send(addr, "GET", path, &[("Host", "evil.example")], &Value::Null).await;
        assert_eq!(foreign.status, 403, "{path}");
        let endpoint = send(
            addr,
            "POST",
            "/mcp",
            &[("Host", "evil.example")],
            &json!({}),
        )
        .await;
        assert_eq!(endpoint.status, 403);
    }
    // A path below them is not theirs.
    let other = send(
        addr,
        "GET",
        "/.well-known/oauth-protected-resource/other",
        &[],
        &Value::Null,
    )
    .await;
    assert_eq!(other.status, 404);
    assert_eq!(guard.asked.load(Ordering::SeqCst), 0, "no authentication");
    assert!(app.seen().is_empty());
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_see_the_grant_and_its_principal_but_not_the_credentials() {
    let (config, _) = guarded(FakeGuard::new());
    let (server, app) = start(config).await;
    let addr = server.local_addr();
    let session = open_as(addr, "Bearer alice", "2025-11-25").await;
    let mut headers = with_token("Bearer alice", Some(&session), Some("2025-11-25"));
    headers.extend([
        ("DPoP", "a.proof.jwt"),
        ("DPoP", "another"),
        ("X-Custom", "kept"),
    ]);
    let response = send(
        addr,
        "POST",
        "/mcp",
        &headers,
        &call(1, "echo", json!({"text": "hi"})),
    )
    .await;
    assert_eq!(response.status, 200);
    let mut modern = modern_headers("tools/call", Some("echo"));
    modern.extend([
        ("Authorization", "Bearer alice"),
        ("DPoP", "a.proof.jwt"),
        ("X-Custom", "kept"),
    ]);
    let response = send(
        addr,
        "POST",
        "/mcp",
        &modern,
        &modern_call(2, "echo", json!({"text": "hi"})),
    )
    .await;
    assert_eq!(response.status, 200);
    let seen = app.seen();
    assert_eq!(seen.len(), 4, "initialize, initialized, two calls");
    for seen in &seen {
        assert!(
            seen.headers.get(header::AUTHORIZATION).is_none(),
            "{seen:?}"
        );
        assert!(seen.headers.get("dpop").is_none(), "{seen:?}");
        assert_eq!(
            seen.principal,
            Some(Principal(format!("{ISSUER} alice"))),
            "{seen:?}"
        );
        let grant = seen.grant.as_ref().expect("the grant");
        assert_eq!(
            (grant.issuer.as_str(), grant.subject.as_str()),
            (ISSUER, "alice")
        );
    }
    assert_eq!(seen[2].headers["x-custom"], "kept");
    assert_eq!(seen[3].headers["x-custom"], "kept");
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grants_principal_binds_legacy_sessions() {
    let (mut config, _) = guarded(FakeGuard::new());
    config.old_sse = Some(Default::default());
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let session = open_as(addr, "Bearer alice", "2025-11-25").await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let as_bob = with_token("Bearer bob", Some(&session), Some("2025-11-25"));
    assert_eq!(send(addr, "POST", "/mcp", &as_bob, &list).await.status, 404);
    let stream = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
        ("Authorization", "Bearer bob"),
    ];
    assert_eq!(
        send(addr, "GET", "/mcp", &stream, &Value::Null)
            .await
            .status,
        404
    );
    let end = [
        ("Mcp-Session-Id", session.as_str()),
        ("Authorization", "Bearer bob"),
    ];
    assert_eq!(
        send(addr, "DELETE", "/mcp", &end, &Value::Null)
            .await
            .status,
        404
    );
    // Alice's scopes differ from one token to the next; she is the same principal.
    let as_alice = with_token("Bearer alice-w", Some(&session), Some("2025-11-25"));
    assert_eq!(
        send(addr, "POST", "/mcp", &as_alice, &list).await.status,
        200
    );
    let end = [
        ("Mcp-Session-Id", session.as_str()),
        ("Authorization", "Bearer alice"),
    ];
    assert_eq!(
        send(addr, "DELETE", "/mcp", &end, &Value::Null)
            .await
            .status,
        200
    );

    // The deprecated transport's sessions too.
    let mut stream = send(
        addr,
        "GET",
        "/sse",
        &[
            ("Accept", "text/event-stream"),
            ("Authorization", "Bearer alice"),
        ],
        &Value::Null,
    )
    .await;
    assert_eq!(stream.status, 200);
    let endpoint = within("endpoint", stream.next_event()).await.unwrap();
    let headers = |token| {
        vec![
            ("Content-Type", "application/json"),
            ("Authorization", token),
        ]
    };
    let init = initialize("2024-11-05");
    let bob = send(addr, "POST", &endpoint.data, &headers("Bearer bob"), &init).await;
    assert_eq!(bob.status, 404);
    let alice = send(
        addr,
        "POST",
        &endpoint.data,
        &headers("Bearer alice"),
        &init,
    )
    .await;
    assert_eq!(alice.status, 202);
    let (_, result) = within("init result", stream.next_message()).await.unwrap();
    assert_eq!(result["result"]["protocolVersion"], "2024-11-05");
    drop(stream);
    server.shutdown(Duration::from_secs(1)).await;
}

/// Drives the service itself, with a principal put in the request by a layer in front.
async fn through_a_layer(
    service: &McpService,
    token: &str,
    spoofed: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> http::Response<modelctx_http::server::ResponseBody> {
    let mut request = http::Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", token)
        .extension(LOOPBACK_PEER)
        .body(body.to_string())
        .unwrap();
    if let Some(spoofed) = spoofed {
        request
            .extensions_mut()
            .insert(Principal(spoofed.to_owned()));
    }
    if let Some(session) = session {
        request
            .headers_mut()
            .insert("mcp-session-id", session.parse().unwrap());
    }
    within("the service", service.handle(request)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_put_in_front_is_replaced_by_the_grants() {
    let (config, _) = guarded(FakeGuard::new());
    let app = Recording::default();
    let service = McpService::new(config, Arc::new(app.clone())).unwrap();
    let bob = format!("{ISSUER} bob");
    // Alice's token, with bob's principal from a layer in front: the session is alice's.
    let opened = through_a_layer(
        &service,
        "Bearer alice",
        Some(&bob),
        None,
        &initialize("2025-11-25"),
    )
    .await;
    assert_eq!(opened.status(), StatusCode::OK);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let accepted =
        through_a_layer(&service, "Bearer alice", None, Some(&session), &initialized).await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let as_bob = through_a_layer(&service, "Bearer bob", None, Some(&session), &list).await;
    assert_eq!(as_bob.status(), StatusCode::NOT_FOUND);
    // Bob's token with alice's principal in front is still bob.
    let alice = format!("{ISSUER} alice");
    let spoofed =
        through_a_layer(&service, "Bearer bob", Some(&alice), Some(&session), &list).await;
    assert_eq!(spoofed.status(), StatusCode::NOT_FOUND);
    let as_alice = through_a_layer(&service, "Bearer alice", None, Some(&session), &list).await;
    assert_eq!(as_alice.status(), StatusCode::OK);
    let body = as_alice.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert!(body["result"]["tools"].is_array(), "{body}");
    let seen = app.seen();
    assert_eq!(seen[0].principal, Some(Principal(alice)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_needs_a_scope_the_grant_lacks_gets_403_and_nothing_runs() {
    let (mut config, _) = guarded(FakeGuard::new());
    config.old_sse = Some(Default::default());
    let (server, app) = start(config).await;
    let addr = server.local_addr();
    // 2025-03-26: batches.
    let session = open_as(addr, "Bearer alice", "2025-03-26").await;
    let progress = call(1, "progress", json!({"count": 1}));
    let batch = json!([
        call(2, "echo", json!({"text": "a"})),
        call(3, "progress", json!({}))
    ]);
    let as_alice = with_token("Bearer alice", Some(&session), Some("2025-03-26"));
    let mut modern = modern_headers("tools/call", Some("progress"));
    modern.push(("Authorization", "Bearer alice"));
    let modern_progress = modern_call(4, "progress", json!({"count": 1}));
    let seen = app.seen().len();
    for (what, headers, body) in [
        ("a call", &as_alice, &progress),
        ("a batch", &as_alice, &batch),
        ("a 2026-07-28 call", &modern, &modern_progress),
    ] {
        let response = send(addr, "POST", "/mcp", headers, body).await;
        assert_eq!(response.status, 403, "{what}");
        assert_eq!(
            response.header("www-authenticate"),
            Some(r#"Bearer error="insufficient_scope", scope="files:write""#),
            "{what}"
        );
        assert!(response.body().await.is_empty(), "{what}");
    }
    assert_eq!(
        app.seen().len(),
        seen,
        "no part of any message was processed"
    );
    assert_eq!(server.service().table_sizes().await.requests, 0);

    // With the scope: answered.
    let as_writer = with_token("Bearer alice-w", Some(&session), Some("2025-03-26"));
    let response = send(addr, "POST", "/mcp", &as_writer, &batch).await;
    assert_eq!(response.status, 200);
    let mut modern = modern_headers("tools/call", Some("progress"));
    modern.push(("Authorization", "Bearer alice-w"));
    assert_eq!(
        send(addr, "POST", "/mcp", &modern, &modern_progress)
            .await
            .status,
        200
    );

    // The deprecated transport's messages too.
    let mut stream = send(
        addr,
        "GET",
        "/sse",
        &[
            ("Accept", "text/event-stream"),
            ("Authorization", "Bearer alice"),
        ],
        &Value::Null,
    )
    .await;
    let endpoint = within("endpoint", stream.next_event()).await.unwrap();
    let headers = [
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer alice"),
    ];
    let seen = app.seen().len();
    let refused = send(addr, "POST", &endpoint.data, &headers, &progress).await;
    assert_eq!(refused.status, 403);
    assert!(refused.body().await.is_empty());
    assert_eq!(app.seen().len(), seen);
    drop(stream);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guards_headers_go_on_json_and_sse_answers() {
    let (config, _) = guarded(FakeGuard::new());
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let opened = send(
        addr,
        "POST",
        "/mcp",
        &with_token("Bearer alice", None, None),
        &initialize("2025-11-25"),
    )
    .await;
    assert_eq!(opened.status, 200);
    assert_eq!(opened.header("dpop-nonce"), Some("alice"));
    let session = opened.header("mcp-session-id").unwrap().to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let as_alice = with_token("Bearer alice-w", Some(&session), Some("2025-11-25"));
    let accepted = send(addr, "POST", "/mcp", &as_alice, &initialized).await;
    assert_eq!(accepted.status, 202);
    assert_eq!(accepted.header("dpop-nonce"), Some("alice"));
    let json = send(addr, "POST", "/mcp", &as_alice, &call(1, "echo", json!({}))).await;
    assert_eq!(json.header("content-type"), Some("application/json"));
    assert_eq!(json.header("dpop-nonce"), Some("alice"));
    let mut progress = call(2, "progress", json!({"count": 2}));
    progress["params"]["_meta"] = json!({"progressToken": "p"});
    let mut sse = send(addr, "POST", "/mcp", &as_alice, &progress).await;
    assert_eq!(sse.header("content-type"), Some("text/event-stream"));
    assert_eq!(sse.header("dpop-nonce"), Some("alice"));
    while within("progress", sse.next_message()).await.is_some() {}
    // The standalone stream, and refusals after authentication (no session: 404).
    let stream = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
        ("Authorization", "Bearer bob"),
    ];
    let refused = send(addr, "GET", "/mcp", &stream, &Value::Null).await;
    assert_eq!(refused.status, 404);
    assert_eq!(refused.header("dpop-nonce"), Some("bob"));
    // 2026-07-28, SSE.
    let mut modern = modern_headers("tools/call", Some("progress"));
    modern.push(("Authorization", "Bearer alice-w"));
    let mut progress = modern_call(3, "progress", json!({"count": 2}));
    progress["params"]["_meta"]["progressToken"] = json!("t");
    let mut sse = send(addr, "POST", "/mcp", &modern, &progress).await;
    assert_eq!(sse.status, 200);
    assert_eq!(sse.header("content-type"), Some("text/event-stream"));
    assert_eq!(sse.header("dpop-nonce"), Some("alice"));
    while within("progress", sse.next_message()).await.is_some() {}
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_that_waits_counts_against_the_requests_in_flight() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut guard = FakeGuard::new();
    guard.gate = Some(gate.clone());
    let (mut config, guard) = guarded(guard);
    config.max_requests_in_flight = 2;
    let (server, app) = start(config).await;
    let addr = server.local_addr();
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(async move {
                raw_request(
                    addr,
                    "POST",
                    "/mcp",
                    &with_token("Bearer alice", None, None),
                    initialize("2025-11-25").to_string().as_bytes(),
                )
                .await
                .status
            })
        })
        .collect();
    within("both wait in the guard", async {
        while guard.asked.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(server.service().table_sizes().await.in_flight, 2);
    let full = send(
        addr,
        "POST",
        "/mcp",
        &with_token("Bearer alice", None, None),
        &initialize("2025-11-25"),
    )
    .await;
    assert_eq!(full.status, 503);
    assert_eq!(full.header("retry-after"), Some("1"));
    assert_eq!(
        guard.asked.load(Ordering::SeqCst),
        2,
        "refused before the guard"
    );
    assert_eq!(app.opened.load(Ordering::SeqCst), 0);
    gate.add_permits(2);
    for waiting in waiting {
        assert_eq!(within("admitted", waiting).await.unwrap(), 200);
    }
    assert_eq!(app.opened.load(Ordering::SeqCst), 2);
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_guard_requests_reach_the_application_as_they_came() {
    let (server, app) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let opened = send(
        addr,
        "POST",
        "/mcp",
        &with_token("Bearer anything", None, None),
        &initialize("2025-11-25"),
    )
    .await;
    assert_eq!(opened.status, 200);
    assert_eq!(opened.header("dpop-nonce"), None);
    let seen = app.seen();
    assert_eq!(seen[0].headers["authorization"], "Bearer anything");
    assert_eq!(seen[0].principal, None);
    assert!(seen[0].grant.is_none());
    for path in METADATA_PATHS {
        assert_eq!(send(addr, "GET", path, &[], &Value::Null).await.status, 404);
    }
    server.shutdown(Duration::from_secs(1)).await;
}
