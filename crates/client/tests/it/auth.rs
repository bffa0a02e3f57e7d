//! `ClientBuilder::auth`: an authorizer's credentials on every request of a modelctx server
//! whose guard demands a header, in both eras; a refusal it cannot cure fails the connection
//! (probe or `initialize`, with no fallback) or the one call; connections other than HTTP
//! refuse an authorizer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use modelctx_client::auth::{
    AuthFailure, AuthFailureKind, Authorizer, BoxFuture, Credentials, Outgoing, Reply, Retry,
};
use modelctx_client::{Client, CloseReason, ConnectError, Error, HttpConfig, ProtocolVersion};
use modelctx_server::{Challenge, Grant, Guard, NoArgs, Server, Tool};

/// What the server's guard saw, shared with the test.
#[derive(Debug, Default)]
struct Seen {
    /// The token it accepts (`Authorization: Bearer <good>`).
    good: Mutex<String>,
    /// Every POST to the endpoint (the probe, `initialize`, each call).
    posts: AtomicUsize,
    /// Requests it refused (401).
    refused: AtomicUsize,
    /// Requests it admitted.
    admitted: AtomicUsize,
}

/// A guard that admits `Authorization: Bearer <good>` and nothing else.
#[derive(Debug, Clone)]
struct Doorman(Arc<Seen>);

impl Guard for Doorman {
    fn authenticate<'a>(
        &'a self,
        request: &'a http::request::Parts,
    ) -> modelctx_server::event_store::BoxFuture<'a, Result<Grant, Challenge>> {
        let seen = &self.0;
        if request.method == http::Method::POST {
            seen.posts.fetch_add(1, Ordering::SeqCst);
        }
        let expected = format!("Bearer {}", seen.good.lock().unwrap());
        let given = request.headers.get(http::header::AUTHORIZATION);
        let result = if given.is_some_and(|v| v.as_bytes() == expected.as_bytes()) {
            seen.admitted.fetch_add(1, Ordering::SeqCst);
            Ok(Grant::new("test", "alice"))
        } else {
            seen.refused.fetch_add(1, Ordering::SeqCst);
            let mut challenge = Challenge::new(StatusCode::UNAUTHORIZED);
            challenge.headers.insert(
                http::header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static(r#"Bearer error="invalid_token""#),
            );
            Err(challenge)
        };
        Box::pin(std::future::ready(result))
    }

    fn authorize(&self, _: &Grant, _: &[String]) -> Result<(), Challenge> {
        Ok(())
    }
}

/// A modelctx server (both eras) behind the doorman, accepting `Bearer good`; its URL.
async fn serve() -> (String, Arc<Seen>, modelctx_server::RunningServer) {
    let seen = Arc::new(Seen::default());
    *seen.good.lock().unwrap() = "good".into();
    let server = Server::builder("guarded", "1.0.0")
        .auth(Doorman(seen.clone()))
        .tool(Tool::with_input_schema(
            "hello",
            serde_json::json!({"type": "object"})
                .as_object()
                .unwrap()
                .clone(),
            |_: NoArgs| std::future::ready("hi"),
        ))
        .build();
    let running = server
        .serve_http("127.0.0.1:0", modelctx_server::HttpConfig::default())
        .await
        .unwrap();
    let url = format!("http://{}/mcp", running.local_addr());
    (url, seen, running)
}

/// An authorizer that sends `Bearer <token>` (nothing while it has none) and, when refused,
/// switches to its cure once, or gives up.
#[derive(Debug, Default)]
struct Fake {
    token: Mutex<Option<String>>,
    cure: Mutex<Option<String>>,
    credentials: AtomicUsize,
    refused: AtomicUsize,
}

impl Fake {
    fn new(token: Option<&str>, cure: Option<&str>) -> Arc<Fake> {
        let fake = Fake::default();
        *fake.token.lock().unwrap() = token.map(str::to_owned);
        *fake.cure.lock().unwrap() = cure.map(str::to_owned);
        Arc::new(fake)
    }

    fn set_token(&self, token: &str) {
        *self.token.lock().unwrap() = Some(token.into());
    }
}

impl Authorizer for Fake {
    fn credentials<'a>(
        &'a self,
        _: &'a Outgoing<'a>,
    ) -> BoxFuture<'a, Result<Credentials, AuthFailure>> {
        let ticket = self.credentials.fetch_add(1, Ordering::SeqCst) as u64;
        let mut credentials = Credentials::none(ticket);
        if let Some(token) = &*self.token.lock().unwrap() {
            credentials
                .headers
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        Box::pin(std::future::ready(Ok(credentials)))
    }

    fn refused<'a>(
        &'a self,
        _: &'a Outgoing<'a>,
        reply: &'a Reply<'a>,
    ) -> BoxFuture<'a, Result<Retry, AuthFailure>> {
        self.refused.fetch_add(1, Ordering::SeqCst);
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        let answer = match self.cure.lock().unwrap().take() {
            Some(token) => {
                self.set_token(&token);
                Ok(Retry::Send)
            }
            None => Err(AuthFailure::new(
                AuthFailureKind::Rejected,
                "the server refused the token",
            )),
        };
        Box::pin(std::future::ready(answer))
    }
}

fn builder(fake: &Arc<Fake>, legacy: bool) -> modelctx_client::ClientBuilder {
    let builder = Client::builder("host", "1.0.0")
        .auth(fake.clone() as Arc<dyn Authorizer>)
        .connect_timeout(Some(Duration::from_secs(20)));
    if legacy {
        builder.protocol_version(ProtocolVersion::V2025_11_25)
    } else {
        builder
    }
}

#[tokio::test]
async fn every_request_carries_the_authorizer_s_header_in_both_eras() {
    for legacy in [false, true] {
        let (url, seen, running) = serve().await;
        // No token at first: the server's 401 is cured by the authorizer, once.
        let fake = Fake::new(None, Some("good"));
        let client = builder(&fake, legacy).connect_http(&url).await.unwrap();
        let tools = client.list_all_tools().await.unwrap();
        assert_eq!(tools[0].name, "hello");
        let result = client
            .call_tool("hello", serde_json::json!({}))
            .await
            .unwrap();
        assert_eq!(result.text(), "hi");
        client.close().await;
        // Only the very first request went without the header.
        assert_eq!(seen.refused.load(Ordering::SeqCst), 1, "legacy: {legacy}");
        assert_eq!(fake.refused.load(Ordering::SeqCst), 1, "legacy: {legacy}");
        // The handshake (and in the legacy era its notification), the list and the call.
        assert!(
            seen.admitted.load(Ordering::SeqCst) >= 3,
            "legacy: {legacy}"
        );
        assert!(
            fake.credentials.load(Ordering::SeqCst)
                >= seen.admitted.load(Ordering::SeqCst) + seen.refused.load(Ordering::SeqCst)
        );
        running.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn a_probe_refused_for_good_fails_the_connection_without_falling_back_to_initialize() {
    let (url, seen, running) = serve().await;
    let fake = Fake::new(Some("stale"), None);
    let error = builder(&fake, false).connect_http(&url).await.unwrap_err();
    match &error {
        ConnectError::Auth(failure) => {
            assert_eq!(failure.kind(), AuthFailureKind::Rejected);
            assert_eq!(failure.message(), "the server refused the token");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        error.to_string(),
        "authorization failed: the server refused the token"
    );
    // One probe, and no initialize after it (that would run the authorization again).
    assert_eq!(seen.posts.load(Ordering::SeqCst), 1);
    assert_eq!(fake.refused.load(Ordering::SeqCst), 1);

    // A client pinned to a legacy version: its initialize, once.
    let fake = Fake::new(Some("stale"), None);
    let error = builder(&fake, true).connect_http(&url).await.unwrap_err();
    assert!(matches!(error, ConnectError::Auth(_)), "{error:?}");
    assert_eq!(seen.posts.load(Ordering::SeqCst), 2);
    assert_eq!(fake.refused.load(Ordering::SeqCst), 1);
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_call_refused_later_fails_alone_with_the_authorizer_s_failure() {
    for legacy in [false, true] {
        let (url, seen, running) = serve().await;
        let fake = Fake::new(Some("good"), None);
        let client = builder(&fake, legacy).connect_http(&url).await.unwrap();
        // The server now wants another token.
        *seen.good.lock().unwrap() = "rotated".into();
        let error = client.list_all_tools().await.unwrap_err();
        match &error {
            Error::Auth(failure) => assert_eq!(failure.kind(), AuthFailureKind::Rejected),
            other => panic!("legacy {legacy}: {other:?}"),
        }
        // The connection lives on: with the new token the next call goes through.
        fake.set_token("rotated");
        let tools = client.list_all_tools().await.unwrap();
        assert_eq!(tools.len(), 1);
        client.close().await;
        running.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn an_authorizer_is_refused_where_it_cannot_apply() {
    let fake = Fake::new(Some("good"), None);
    let misconfigured = |error: ConnectError| match error {
        ConnectError::Auth(failure) => {
            assert_eq!(failure.kind(), AuthFailureKind::Misconfigured);
            failure.message().to_owned()
        }
        other => panic!("{other:?}"),
    };
    // stdio: refused before any process is started (no such program either).
    #[cfg(feature = "stdio")]
    {
        let command = modelctx_client::ServerCommand::new("/nonexistent/modelctx-test-server");
        let error = builder(&fake, false)
            .connect_stdio(command)
            .await
            .unwrap_err();
        let message = misconfigured(error);
        assert!(message.contains("over stdio"), "{message}");
    }
    // In memory.
    let (to_server, _) = tokio::sync::mpsc::channel(1);
    let (_, from_server) = tokio::sync::mpsc::channel::<modelctx_types::Incoming>(1);
    let error = builder(&fake, false)
        .connect_channels(to_server, from_server)
        .await
        .unwrap_err();
    misconfigured(error);
    // Two authorizers for one HTTP connection: which one would speak?
    let config = HttpConfig::default().auth(fake.clone() as Arc<dyn Authorizer>);
    let error = builder(&fake, false)
        .connect_http_with("http://127.0.0.1:9/mcp", config)
        .await
        .unwrap_err();
    let message = misconfigured(error);
    assert!(message.contains("two authorizers"), "{message}");
    assert_eq!(fake.credentials.load(Ordering::SeqCst), 0);
}

#[test]
fn a_closed_reason_says_authorization_failed() {
    assert_eq!(
        CloseReason::Unauthorized("declined".into()).to_string(),
        "authorization failed: declined"
    );
}
