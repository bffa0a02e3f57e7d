//! The authorization seam against in-process hyper servers, with a fake [`Authorizer`]: every
//! kind of request carries its credentials, refusals are cured or bounded, and without an
//! authorizer nothing changes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use modelctx_types::consts::{Initialize, NotificationsInitialized, ToolsList};
use modelctx_types::{
    Incoming, Message, Notification, ProtocolVersion, Request, RequestId, meta_keys,
};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::{
    AuthFailure, AuthFailureKind, Authorizer, BoxFuture, ClientConfig, Credentials, HttpTransport,
    Inbound, MAX_SENDS, Outgoing, Reply, Retry, SendOptions, TransportError, UrlError,
};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

impl Seen {
    fn authorization(&self) -> Option<&str> {
        self.headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn rpc_method(&self) -> Option<String> {
        self.json()["method"].as_str().map(str::to_owned)
    }
}

type Script = dyn Fn(&Seen) -> http::Response<Full<Bytes>> + Send + Sync;

/// A server that answers each request with `script` and records what it saw.
struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    async fn start(
        script: impl Fn(&Seen) -> http::Response<Full<Bytes>> + Send + Sync + 'static,
    ) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let script: Arc<Script> = Arc::new(script);
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (script, record) = (script.clone(), record.clone());
                tokio::spawn(async move {
                    let service =
                        service_fn(move |request: http::Request<hyper::body::Incoming>| {
                            let (script, record) = (script.clone(), record.clone());
                            async move {
                                let (parts, body) = request.into_parts();
                                let body = body
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                let seen = Seen {
                                    method: parts.method,
                                    uri: parts.uri,
                                    headers: parts.headers,
                                    body,
                                };
                                let response = script(&seen);
                                record.lock().unwrap().push(seen);
                                Ok::<_, std::convert::Infallible>(response)
                            }
                        });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Server { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn respond(
    status: u16,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(body.into()));
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    for (name, value) in headers {
        response.headers_mut().append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    response
}

fn json_response(body: &Value, extra: &[(&str, &str)]) -> http::Response<Full<Bytes>> {
    let mut headers = vec![("content-type", "application/json")];
    headers.extend_from_slice(extra);
    respond(200, &headers, body.to_string())
}

fn result_for(seen: &Seen) -> Value {
    json!({"jsonrpc": "2.0", "id": seen.json()["id"], "result": {"ok": true}})
}

fn unauthorized() -> http::Response<Full<Bytes>> {
    respond(
        401,
        &[(
            "www-authenticate",
            r#"Bearer error="invalid_token", resource_metadata="http://x/.well-known/oauth-protected-resource""#,
        )],
        "no entry",
    )
}

/// What the fake authorizer does on a refusal.
#[derive(Debug, Clone, Copy, PartialEq)]
enum OnRefusal {
    /// A new token, and send again.
    Refresh,
    /// Send again with the same token, forever.
    AlwaysSend,
    /// Not its business.
    GiveUp,
    /// Authorization failed.
    Fail,
}

#[derive(Debug, thiserror::Error)]
#[error("the token endpoint said invalid_grant")]
struct Cause;

/// An authorizer that gives `Bearer tok-<generation>` and logs every call.
#[derive(Debug)]
struct Fake {
    on_refusal: OnRefusal,
    /// Refuse to give credentials at all.
    no_credentials: bool,
    /// How long each `credentials` call takes.
    delay: Duration,
    generation: AtomicU64,
    tickets: AtomicU64,
    log: Mutex<Vec<String>>,
    refusals: AtomicUsize,
}

impl Fake {
    fn new(on_refusal: OnRefusal) -> Fake {
        Fake {
            on_refusal,
            no_credentials: false,
            delay: Duration::ZERO,
            generation: AtomicU64::new(1),
            tickets: AtomicU64::new(100),
            log: Mutex::default(),
            refusals: AtomicUsize::new(0),
        }
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn note(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }
}

fn describe(request: &Outgoing<'_>) -> String {
    format!(
        "{} {} interactive={} earlier={:?}",
        request.method,
        request.uri.path(),
        request.interactive,
        request.earlier
    )
}

impl Authorizer for Fake {
    fn credentials<'a>(
        &'a self,
        request: &'a Outgoing<'a>,
    ) -> BoxFuture<'a, Result<Credentials, AuthFailure>> {
        Box::pin(async move {
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            let ticket = self.tickets.fetch_add(1, Ordering::SeqCst);
            self.note(format!("credentials {} -> {ticket}", describe(request)));
            if self.no_credentials {
                return Err(AuthFailure::new(
                    AuthFailureKind::Misconfigured,
                    "no client identity for this server",
                ));
            }
            let token = format!("Bearer tok-{}", self.generation.load(Ordering::SeqCst));
            let mut headers = HeaderMap::new();
            headers.insert(AUTHORIZATION, HeaderValue::from_str(&token).unwrap());
            Ok(Credentials::new(headers, ticket))
        })
    }

    fn refused<'a>(
        &'a self,
        request: &'a Outgoing<'a>,
        reply: &'a Reply<'a>,
    ) -> BoxFuture<'a, Result<Retry, AuthFailure>> {
        Box::pin(async move {
            self.refusals.fetch_add(1, Ordering::SeqCst);
            self.note(format!(
                "refused {} {} ticket {}",
                describe(request),
                reply.status.as_u16(),
                reply.ticket
            ));
            match self.on_refusal {
                OnRefusal::Refresh => {
                    self.generation.fetch_add(1, Ordering::SeqCst);
                    Ok(Retry::Send)
                }
                OnRefusal::AlwaysSend => Ok(Retry::Send),
                OnRefusal::GiveUp => Ok(Retry::GiveUp),
                OnRefusal::Fail => Err(AuthFailure::from_error(AuthFailureKind::Issuer, Cause)),
            }
        })
    }

    fn observed(&self, request: &Outgoing<'_>, reply: &Reply<'_>) {
        self.note(format!(
            "observed {} {} ticket {}",
            request.method,
            reply.status.as_u16(),
            reply.ticket
        ));
    }
}

fn config(auth: &Arc<Fake>) -> ClientConfig {
    ClientConfig::default().auth(auth.clone())
}

fn request(id: i64, method: &str, params: Value) -> Message {
    Message::Request(Request::new(id, method, &params).unwrap())
}

fn modern_request(id: i64) -> Message {
    let params = json!({"_meta": {
        meta_keys::PROTOCOL_VERSION: ProtocolVersion::V2026_07_28.as_str(),
    }});
    request(id, ToolsList::VALUE, params)
}

/// The next item the transport hands up (5 s at most).
async fn next(transport: &mut HttpTransport) -> Inbound {
    tokio::time::timeout(Duration::from_secs(5), transport.recv())
        .await
        .expect("the transport hands something up in time")
        .expect("the transport is open")
}

/// The answer or the failure of request `id`, skipping anything else.
async fn outcome(transport: &mut HttpTransport, id: i64) -> Result<Value, TransportError> {
    let id = RequestId::from(id);
    loop {
        match next(transport).await {
            Inbound::Message(Incoming::Single(Message::Response(r))) if r.id == id => {
                return Ok(serde_json::from_str(r.result.get()).unwrap());
            }
            Inbound::RequestFailed { id: failed, error } if failed == id => return Err(error),
            _ => {}
        }
    }
}

#[tokio::test]
async fn every_kind_of_request_carries_the_authorizer_s_credentials() {
    // A legacy session: the initialize POST, the one-way POST of notifications/initialized, the
    // standalone GET, a request whose SSE stream breaks and is resumed with a GET, the DELETE.
    let server = Server::start(|seen| {
        let session = [("mcp-session-id", "s-1")];
        match (&seen.method, seen.rpc_method().as_deref()) {
            (&Method::POST, Some(m)) if m == Initialize::VALUE => {
                json_response(&result_for(seen), &session)
            }
            (&Method::POST, Some(m)) if m == NotificationsInitialized::VALUE => {
                respond(202, &[], "")
            }
            (&Method::POST, Some(_)) => {
                // A stream that breaks after a priming event with an id.
                respond(
                    200,
                    &[("content-type", "text/event-stream")],
                    "id: e-1\nretry: 10\ndata: \n\n",
                )
            }
            (&Method::GET, _) if seen.headers.contains_key("last-event-id") => {
                let answer = json!({"jsonrpc": "2.0", "id": 2, "result": {"resumed": true}});
                respond(
                    200,
                    &[("content-type", "text/event-stream")],
                    format!("id: e-2\ndata: {answer}\n\n"),
                )
            }
            (&Method::GET, _) => respond(405, &[], ""),
            (&Method::DELETE, _) => respond(200, &[], ""),
            _ => respond(400, &[], ""),
        }
    })
    .await;
    let auth = Arc::new(Fake::new(OnRefusal::Refresh));
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport
        .send_with(
            request(1, Initialize::VALUE, json!({})),
            SendOptions::default().starts_session(),
        )
        .unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    transport
        .send_with(
            Message::Notification(
                Notification::new(NotificationsInitialized::VALUE, &json!({})).unwrap(),
            ),
            SendOptions::default().opens_standalone(),
        )
        .unwrap();
    loop {
        if let Inbound::NoStandaloneStream = next(&mut transport).await {
            break;
        }
    }
    transport
        .send(request(2, ToolsList::VALUE, json!({})))
        .unwrap();
    assert_eq!(
        outcome(&mut transport, 2).await,
        Ok(json!({"resumed": true}))
    );
    transport.close().await;

    let seen = server.seen();
    let kinds: Vec<String> = seen
        .iter()
        .map(|s| {
            format!(
                "{} {} {}",
                s.method,
                s.uri,
                s.rpc_method()
                    .or_else(|| s.headers.get("last-event-id").map(|_| "resume".into()))
                    .unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "POST /mcp initialize",
            "POST /mcp notifications/initialized",
            "GET /mcp ",
            "POST /mcp tools/list",
            "GET /mcp resume",
            "DELETE /mcp ",
        ]
    );
    for s in &seen {
        assert_eq!(
            s.authorization(),
            Some("Bearer tok-1"),
            "{} {}",
            s.method,
            s.uri
        );
        // Credentials go in a header, never in the URL.
        assert_eq!(s.uri.query(), None);
    }
    // Only the DELETE may not involve the user.
    let log = auth.log();
    let interactive: Vec<&String> = log
        .iter()
        .filter(|l| l.starts_with("credentials"))
        .collect();
    assert_eq!(interactive.len(), 6, "{log:#?}");
    for line in &interactive {
        assert_eq!(
            line.contains("interactive=false"),
            line.starts_with("credentials DELETE"),
            "{line}"
        );
    }
    assert_eq!(log.iter().filter(|l| l.starts_with("observed")).count(), 6);
    assert_eq!(auth.refusals.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn modern_requests_and_the_2024_11_05_transport_carry_the_credentials() {
    let server = Server::start(|seen| match (&seen.method, seen.uri.path()) {
        (&Method::POST, "/mcp") if seen.rpc_method().as_deref() == Some(Initialize::VALUE) => {
            respond(404, &[], "")
        }
        (&Method::POST, "/mcp") => json_response(&result_for(seen), &[]),
        (&Method::GET, "/mcp") => respond(
            200,
            &[("content-type", "text/event-stream")],
            "event: endpoint\ndata: /messages?sessionId=abc\n\n",
        ),
        (&Method::POST, "/messages") => respond(202, &[], ""),
        _ => respond(400, &[], ""),
    })
    .await;
    let auth = Arc::new(Fake::new(OnRefusal::Refresh));
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport.send(modern_request(7)).unwrap();
    assert_eq!(outcome(&mut transport, 7).await, Ok(json!({"ok": true})));
    transport
        .send_with(
            request(1, Initialize::VALUE, json!({})),
            SendOptions::default().starts_session(),
        )
        .unwrap();
    loop {
        if let Inbound::FellBack { status } = next(&mut transport).await {
            assert_eq!(status, StatusCode::NOT_FOUND);
            break;
        }
    }
    // The 2024-11-05 transport's POSTs (the initialize, then the next message).
    transport
        .send(request(2, ToolsList::VALUE, json!({})))
        .unwrap();
    for _ in 0..50 {
        if server
            .seen()
            .iter()
            .filter(|s| s.uri.path() == "/messages")
            .count()
            == 2
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = server.seen();
    let kinds: Vec<String> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.uri))
        .collect();
    assert_eq!(
        kinds,
        [
            "POST /mcp",
            "POST /mcp",
            "GET /mcp",
            "POST /messages?sessionId=abc",
            "POST /messages?sessionId=abc",
        ]
    );
    for s in &seen {
        assert_eq!(
            s.authorization(),
            Some("Bearer tok-1"),
            "{} {}",
            s.method,
            s.uri
        );
    }
    // The proof of possession names the URI the request goes to.
    assert!(
        auth.log()
            .iter()
            .any(|l| l.starts_with("credentials POST /messages")),
        "{:#?}",
        auth.log()
    );
}

#[tokio::test]
async fn a_401_is_sent_again_with_refreshed_credentials_and_the_same_body() {
    let server = Server::start(|seen| match seen.authorization() {
        Some("Bearer tok-2") => json_response(&result_for(seen), &[]),
        _ => unauthorized(),
    })
    .await;
    let auth = Arc::new(Fake::new(OnRefusal::Refresh));
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport.send(modern_request(3)).unwrap();
    assert_eq!(outcome(&mut transport, 3).await, Ok(json!({"ok": true})));
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].authorization(), Some("Bearer tok-1"));
    assert_eq!(seen[1].authorization(), Some("Bearer tok-2"));
    assert_eq!(seen[0].body, seen[1].body, "the same request, id included");
    assert_eq!(seen[1].json()["id"], 3);
    assert_eq!(
        auth.log(),
        [
            "credentials POST /mcp interactive=true earlier=[] -> 100",
            "observed POST 401 ticket 100",
            "refused POST /mcp interactive=true earlier=[] 401 ticket 100",
            "credentials POST /mcp interactive=true earlier=[100] -> 101",
            "observed POST 200 ticket 101",
        ]
    );
}

#[tokio::test]
async fn an_authorizer_that_always_says_send_again_ends_in_a_typed_error_after_six_sends() {
    let server = Server::start(|_| unauthorized()).await;
    let auth = Arc::new(Fake::new(OnRefusal::AlwaysSend));
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport.send(modern_request(4)).unwrap();
    let error = outcome(&mut transport, 4).await.unwrap_err();
    let TransportError::Auth(failure) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(failure.kind(), AuthFailureKind::Rejected);
    assert!(failure.message().contains("6 sends"), "{failure}");
    assert_eq!(server.seen().len(), MAX_SENDS);
    assert_eq!(MAX_SENDS, 6);
    // Asked after each refusal but the last, which ends the exchange.
    assert_eq!(auth.refusals.load(Ordering::SeqCst), MAX_SENDS - 1);
    let last = auth
        .log()
        .into_iter()
        .rfind(|l| l.starts_with("credentials"))
        .unwrap();
    assert!(
        last.ends_with("earlier=[100, 101, 102, 103, 104] -> 105"),
        "{last}"
    );

    // A one-way POST is bounded the same way.
    transport
        .send(Message::Notification(
            Notification::new(NotificationsInitialized::VALUE, &json!({})).unwrap(),
        ))
        .unwrap();
    loop {
        if let Inbound::Undelivered { error, .. } = next(&mut transport).await {
            assert!(
                matches!(&error, TransportError::Auth(f) if f.kind() == AuthFailureKind::Rejected),
                "{error:?}"
            );
            break;
        }
    }
    assert_eq!(server.seen().len(), 2 * MAX_SENDS);
}

#[tokio::test]
async fn a_403_with_insufficient_scope_is_offered_and_one_without_is_not() {
    let server = Server::start(
        |seen| match (seen.json()["id"].as_i64(), seen.authorization()) {
            (Some(5), Some("Bearer tok-2")) => json_response(&result_for(seen), &[]),
            (Some(5), _) => respond(
                403,
                &[(
                    "www-authenticate",
                    r#"Bearer error="insufficient_scope", scope="files:write""#,
                )],
                "",
            ),
            _ => respond(
                403,
                &[("www-authenticate", r#"Bearer error="invalid_request""#)],
                "nope",
            ),
        },
    )
    .await;
    let auth = Arc::new(Fake::new(OnRefusal::Refresh));
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport.send(modern_request(5)).unwrap();
    assert_eq!(outcome(&mut transport, 5).await, Ok(json!({"ok": true})));
    assert_eq!(auth.refusals.load(Ordering::SeqCst), 1);
    assert!(
        auth.log()
            .iter()
            .any(|l| l.starts_with("refused") && l.contains(" 403 "))
    );

    transport.send(modern_request(6)).unwrap();
    let error = outcome(&mut transport, 6).await.unwrap_err();
    assert_eq!(
        error,
        TransportError::Status {
            status: StatusCode::FORBIDDEN,
            body: "nope".into()
        }
    );
    assert_eq!(auth.refusals.load(Ordering::SeqCst), 1, "not offered");
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn the_authorizer_s_failures_are_typed_and_keep_their_cause() {
    // Failing a refusal.
    let server = Server::start(|_| unauthorized()).await;
    let auth = Arc::new(Fake::new(OnRefusal::Fail));
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport.send(modern_request(8)).unwrap();
    let error = outcome(&mut transport, 8).await.unwrap_err();
    let TransportError::Auth(failure) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(failure.kind(), AuthFailureKind::Issuer);
    assert!(std::error::Error::source(failure).is_some_and(|c| c.is::<Cause>()));
    assert_eq!(
        error.to_string(),
        "authorization failed: the token endpoint said invalid_grant"
    );
    assert_eq!(server.seen().len(), 1);

    // No credentials at all: nothing is sent.
    let mut fake = Fake::new(OnRefusal::Refresh);
    fake.no_credentials = true;
    let auth = Arc::new(fake);
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport.send(modern_request(9)).unwrap();
    let error = outcome(&mut transport, 9).await.unwrap_err();
    assert!(
        matches!(&error, TransportError::Auth(f) if f.kind() == AuthFailureKind::Misconfigured),
        "{error:?}"
    );
    assert_eq!(server.seen().len(), 1, "the second transport sent nothing");

    // Giving up: the 401 goes up as it came.
    let auth = Arc::new(Fake::new(OnRefusal::GiveUp));
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport.send(modern_request(10)).unwrap();
    assert_eq!(
        outcome(&mut transport, 10).await,
        Err(TransportError::Status {
            status: StatusCode::UNAUTHORIZED,
            body: "no entry".into()
        })
    );
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn without_an_authorizer_a_401_is_the_same_error_as_before() {
    let server = Server::start(|_| unauthorized()).await;
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer fixed"));
    let mut transport =
        HttpTransport::new(&server.url(), ClientConfig::default().headers(headers)).unwrap();
    transport.send(modern_request(11)).unwrap();
    assert_eq!(
        outcome(&mut transport, 11).await,
        Err(TransportError::Status {
            status: StatusCode::UNAUTHORIZED,
            body: "no entry".into()
        })
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "sent once");
    assert_eq!(seen[0].authorization(), Some("Bearer fixed"));
}

#[tokio::test]
async fn two_sources_of_credentials_are_refused_and_other_configured_headers_stay() {
    let auth = Arc::new(Fake::new(OnRefusal::Refresh));
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer fixed"));
    let both = config(&auth).headers(headers);
    assert!(matches!(
        HttpTransport::new("http://127.0.0.1:1/mcp", both),
        Err(UrlError::TwoCredentials)
    ));

    let server = Server::start(|seen| json_response(&result_for(seen), &[])).await;
    let mut headers = HeaderMap::new();
    headers.insert("x-tenant", HeaderValue::from_static("acme"));
    let mut transport = HttpTransport::new(&server.url(), config(&auth).headers(headers)).unwrap();
    transport.send(modern_request(12)).unwrap();
    assert!(outcome(&mut transport, 12).await.is_ok());
    let seen = server.seen();
    assert_eq!(seen[0].authorization(), Some("Bearer tok-1"));
    assert_eq!(seen[0].headers["x-tenant"], "acme");
    assert_eq!(seen[0].headers[CONTENT_TYPE], "application/json");
}

#[tokio::test]
async fn a_redirect_is_not_followed_so_credentials_never_reach_another_origin() {
    let elsewhere = Server::start(|seen| json_response(&result_for(seen), &[])).await;
    let target = elsewhere.url();
    let server = Server::start(move |_| respond(307, &[("location", &target)], "")).await;
    let auth = Arc::new(Fake::new(OnRefusal::Refresh));
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport.send(modern_request(13)).unwrap();
    let error = outcome(&mut transport, 13).await.unwrap_err();
    assert!(
        matches!(&error, TransportError::Status { status, .. } if status.as_u16() == 307),
        "{error:?}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(elsewhere.seen().is_empty(), "the other origin got nothing");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn the_authorizer_s_wait_does_not_count_against_the_one_way_timeout() {
    let server = Server::start(|_| respond(202, &[], "")).await;
    let mut fake = Fake::new(OnRefusal::Refresh);
    fake.delay = Duration::from_millis(400);
    let auth = Arc::new(fake);
    let config = config(&auth).one_way_timeout(Duration::from_millis(200));
    let mut transport = HttpTransport::new(&server.url(), config).unwrap();
    let message = Notification::new(NotificationsInitialized::VALUE, &json!({})).unwrap();
    transport.send(Message::Notification(message)).unwrap();
    for _ in 0..100 {
        if !server.seen().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        server.seen().len(),
        1,
        "posted after the authorizer's 400 ms"
    );
    // Nothing was reported undelivered.
    let quiet = tokio::time::timeout(Duration::from_millis(100), transport.recv()).await;
    assert!(quiet.is_err(), "{quiet:?}");
}

#[tokio::test]
async fn an_authorization_failure_ends_the_standalone_stream_and_the_fallback_without_retrying() {
    // The standalone GET of a legacy session is refused and the authorizer fails: the stream is
    // given up at once (no reconnect loop), with the typed error.
    let server = Server::start(|seen| match (&seen.method, seen.rpc_method().as_deref()) {
        (&Method::POST, Some(m)) if m == Initialize::VALUE => {
            json_response(&result_for(seen), &[("mcp-session-id", "s-2")])
        }
        (&Method::POST, _) => respond(202, &[], ""),
        _ => unauthorized(),
    })
    .await;
    let auth = Arc::new(Fake::new(OnRefusal::Fail));
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport
        .send_with(
            request(1, Initialize::VALUE, json!({})),
            SendOptions::default().starts_session(),
        )
        .unwrap();
    assert!(outcome(&mut transport, 1).await.is_ok());
    let initialized = Notification::new(NotificationsInitialized::VALUE, &json!({})).unwrap();
    transport
        .send_with(
            Message::Notification(initialized),
            SendOptions::default().opens_standalone(),
        )
        .unwrap();
    let (stream_request, error) = loop {
        if let Inbound::GaveUp { request, error, .. } = next(&mut transport).await {
            break (request, error);
        }
    };
    assert_eq!(stream_request, None);
    assert!(
        matches!(&error, TransportError::Auth(f) if f.kind() == AuthFailureKind::Issuer),
        "{error:?}"
    );
    assert_eq!(
        transport.standalone_stream(),
        super::StandaloneStream::Unavailable
    );
    let gets = server
        .seen()
        .iter()
        .filter(|s| s.method == Method::GET)
        .count();
    assert_eq!(gets, 1, "no reconnect after an authorization failure");

    // The 2024-11-05 fallback's GET is refused the same way: the initialize fails with it.
    let server = Server::start(|seen| match &seen.method {
        &Method::POST => respond(404, &[], ""),
        _ => unauthorized(),
    })
    .await;
    let mut transport = HttpTransport::new(&server.url(), config(&auth)).unwrap();
    transport
        .send_with(
            request(1, Initialize::VALUE, json!({})),
            SendOptions::default().starts_session(),
        )
        .unwrap();
    let error = outcome(&mut transport, 1).await.unwrap_err();
    assert!(
        matches!(&error, TransportError::Auth(f) if f.kind() == AuthFailureKind::Issuer),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_closing_delete_is_sent_again_after_a_refresh_but_never_interactively() {
    let server = Server::start(|seen| match (&seen.method, seen.authorization()) {
        (&Method::POST, _) if seen.rpc_method().as_deref() == Some(Initialize::VALUE) => {
            json_response(&result_for(seen), &[("mcp-session-id", "s-3")])
        }
        (&Method::DELETE, Some("Bearer tok-2")) => respond(200, &[], ""),
        (&Method::DELETE, _) => unauthorized(),
        _ => respond(400, &[], ""),
    })
    .await;
    let auth = Arc::new(Fake::new(OnRefusal::Refresh));
    let config = config(&auth).standalone_stream(false);
    let mut transport = HttpTransport::new(&server.url(), config).unwrap();
    transport
        .send_with(
            request(1, Initialize::VALUE, json!({})),
            SendOptions::default().starts_session(),
        )
        .unwrap();
    assert!(outcome(&mut transport, 1).await.is_ok());
    transport.close().await;
    let deletes: Vec<Option<String>> = server
        .seen()
        .iter()
        .filter(|s| s.method == Method::DELETE)
        .map(|s| s.authorization().map(str::to_owned))
        .collect();
    assert_eq!(
        deletes,
        [
            Some("Bearer tok-1".to_owned()),
            Some("Bearer tok-2".to_owned())
        ]
    );
    assert!(
        auth.log()
            .iter()
            .any(|l| l == "refused DELETE /mcp interactive=false earlier=[] 401 ticket 101"),
        "{:#?}",
        auth.log()
    );
}
