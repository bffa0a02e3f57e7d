//! The OAuth 2.1 client (modelctx-auth's client half, through `modelctx_client::auth`) against
//! hostile authorization and resource servers: each case ends in the typed error that names
//! what the server did wrong, within a bound asserted on the clock, and without a loop (the
//! requests each server saw are counted).
//!
//! The servers are in-process mocks on loopback (a small HTTP/1.1 responder on tokio, one
//! request per connection), so a case can also hang, trickle a byte a second or send 10 MiB.
//! Every client here bounds each exchange with an authorization server at 300 ms
//! (`OAuthBuilder::as_timeout`); each case must finish within 4 s (a hanging token endpoint
//! within 2 s), and the module takes about a second (the cases run in parallel).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modelctx_client::auth::{
    AuthorizationHandler, AuthorizationRequest, Authorizer, BoxFuture, Challenges, Declined,
    FetchError, MemoryStore, OAuth, OAuthBuilder, OAuthError, Redirect, StoreKey, Stored,
    TokenRecord, TokenStore,
};
use modelctx_client::{Client, ConnectError};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The bound of each exchange with an authorization server.
const AS_TIMEOUT: Duration = Duration::from_millis(300);
/// The bound of each case's failing call: below the 5 s an exchange may take by default, so a
/// case that waited for a default bound fails; loose enough for a loaded machine.
const BOUND: Duration = Duration::from_secs(4);
const PRM_PATH: &str = "/.well-known/oauth-protected-resource/mcp";
const AS_METADATA_PATH: &str = "/.well-known/oauth-authorization-server";
const OIDC_PATH: &str = "/.well-known/openid-configuration";

/// One request a mock server read.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How a mock server answers one request.
enum Answer {
    Send {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Accepts the request and never answers.
    Hang,
    /// A 200 head announcing 100 bytes, then one byte a second.
    Trickle,
    /// A 200 JSON head announcing `len` bytes, then as many as the client reads.
    Huge(usize),
}

fn json_answer(status: u16, value: &Value) -> Answer {
    Answer::Send {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: value.to_string().into_bytes(),
    }
}

fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Answer {
    Answer::Send {
        status,
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
        body: body.as_bytes().to_vec(),
    }
}

type Route = dyn Fn(&str, &Seen) -> Answer + Send + Sync;

/// A mock server on loopback: `route(base, request)` answers each request; every request is
/// kept in `seen`. Stops with the test's runtime.
struct Mock {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Mock {
    async fn start(route: impl Fn(&str, &Seen) -> Answer + Send + Sync + 'static) -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let route: Arc<Route> = Arc::new(route);
        let (named, log) = (base.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(exchange(stream, named.clone(), route.clone(), log.clone()));
            }
        });
        Mock { base, seen }
    }

    /// The MCP endpoint.
    fn mcp(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// How many requests had `path`.
    fn count(&self, path: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path() == path)
            .count()
    }

    fn total(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one request (head of at most 64 KiB, a `Content-Length` or chunked body), answers it
/// and closes the connection.
async fn exchange(
    mut stream: TcpStream,
    base: String,
    route: Arc<Route>,
    seen: Arc<Mutex<Vec<Seen>>>,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = find(&buffer, b"\r\n\r\n") {
            break at + 4;
        }
        if buffer.len() > 64 * 1024 {
            return;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let target = request_line.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = buffer[head_end..].to_vec();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    if let Some(length) = header("content-length").and_then(|l| l.parse::<usize>().ok()) {
        while body.len() < length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
    } else if header("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        while find(&body, b"0\r\n\r\n").is_none() {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
        body = dechunk(&body);
    }
    let request = Seen {
        method,
        target,
        headers,
        body,
    };
    seen.lock().unwrap().push(request.clone());
    match route(&base, &request) {
        Answer::Send {
            status,
            headers,
            body,
        } => {
            let mut out = format!("HTTP/1.1 {status} Mock\r\n");
            for (name, value) in headers {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
            out.push_str(&format!(
                "content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            ));
            let mut bytes = out.into_bytes();
            bytes.extend_from_slice(&body);
            let _ = stream.write_all(&bytes).await;
            let _ = stream.shutdown().await;
        }
        Answer::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Answer::Trickle => {
            let head = "HTTP/1.1 200 Mock\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for _ in 0..100 {
                if stream.write_all(b" ").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        Answer::Huge(len) => {
            let head = format!(
                "HTTP/1.1 200 Mock\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n{{\"x\":\""
            );
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let filler = vec![b'a'; 64 * 1024];
            let mut sent = 7;
            while sent < len {
                let n = filler.len().min(len - sent);
                if stream.write_all(&filler[..n]).await.is_err() {
                    return;
                }
                sent += n;
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The data of a chunked body (extensions and trailers ignored).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = find(body, b"\r\n") {
        let size = std::str::from_utf8(&body[..line_end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 || body.len() < line_end + 2 + size {
            break;
        }
        out.extend_from_slice(&body[line_end + 2..line_end + 2 + size]);
        body = &body[(line_end + 4 + size).min(body.len())..];
    }
    out
}

/// The value of `name` in a query or form (percent-decoded, `+` as space).
fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=')?;
        (n == name).then(|| decode(v))
    })
}

fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The authorization server metadata of an honest server at `base`.
fn metadata(base: &str) -> Value {
    json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "authorization_response_iss_parameter_supported": true,
    })
}

/// The 401 challenge of the resource at `base`.
fn challenge(base: &str) -> String {
    format!(r#"Bearer resource_metadata="{base}{PRM_PATH}", scope="mcp""#)
}

/// An honest resource and authorization server in one: protected resource metadata naming
/// itself, its metadata, dynamic registration, a token endpoint issuing `tok-N`, and `/mcp`
/// refusing every request with a 401 challenge (the cases that get further replace it).
fn honest(base: &str, seen: &Seen) -> Answer {
    match (seen.method.as_str(), seen.path()) {
        ("GET", PRM_PATH) => json_answer(
            200,
            &json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]}),
        ),
        ("GET", AS_METADATA_PATH) => json_answer(200, &metadata(base)),
        ("POST", "/register") => json_answer(
            201,
            &json!({"client_id": "hostile-client", "token_endpoint_auth_method": "none"}),
        ),
        ("POST", "/token") => json_answer(
            200,
            &json!({"access_token": format!("tok-{}", seen.body.len()), "token_type": "Bearer", "expires_in": 3600}),
        ),
        (_, "/mcp") => answer(401, &[("www-authenticate", &challenge(base))], ""),
        _ => json_answer(404, &json!({"error": "not_found"})),
    }
}

/// What the user's browser brings back, given the authorization request and its `state`.
type Answering = dyn Fn(&AuthorizationRequest, &str) -> String + Send + Sync;

/// The user: answers every authorization request at once with `answer`; counts them.
struct User {
    answer: Box<Answering>,
    asked: AtomicUsize,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("asked", &self.asked)
            .finish_non_exhaustive()
    }
}

impl User {
    fn new(
        answer: impl Fn(&AuthorizationRequest, &str) -> String + Send + Sync + 'static,
    ) -> Arc<User> {
        Arc::new(User {
            answer: Box::new(answer),
            asked: AtomicUsize::new(0),
        })
    }

    /// A user who consents: the code, the request's `state` and the issuer's `iss`.
    fn consenting() -> Arc<User> {
        User::new(|request, state| {
            format!(
                "{}?code=the-code&state={state}&iss={}",
                request.redirect_uri,
                encode(&request.issuer)
            )
        })
    }

    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

impl AuthorizationHandler for User {
    fn authorize<'a>(
        &'a self,
        request: &'a AuthorizationRequest,
    ) -> BoxFuture<'a, Result<Redirect, Declined>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let query = request.url.split_once('?').map_or("", |(_, q)| q);
        let state = query_param(query, "state").unwrap_or_default();
        let redirect = Redirect::new(&(self.answer)(request, &state));
        Box::pin(std::future::ready(Ok(redirect)))
    }
}

/// Percent-encodes everything but unreserved characters.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The client of every case: the authorization code flow with `user`, a loopback redirect URI,
/// 300 ms per exchange with an authorization server.
fn oauth(user: &Arc<User>) -> OAuthBuilder {
    OAuth::authorization_code(user.clone())
        .redirect_uri("http://127.0.0.1:1/callback")
        .as_timeout(AS_TIMEOUT)
        .flow_timeout(Duration::from_secs(5))
}

/// Runs `future`, which must finish within [`BOUND`]; returns its output and how long it took.
async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    match tokio::time::timeout(BOUND, future).await {
        Ok(output) => (output, started.elapsed()),
        Err(_) => panic!("{what}: not over within {BOUND:?}"),
    }
}

/// Discovery for the mock's MCP endpoint, without a challenge; must fail within the bound.
async fn discovery_error(mock: &Mock, what: &str) -> OAuthError {
    let oauth = oauth(&User::consenting()).build().unwrap();
    let (result, _) = bounded(what, oauth.discover(&mock.mcp(), &Challenges::parse(""))).await;
    result.expect_err(what)
}

/// `authorize_now` for the mock's MCP endpoint (its 401, discovery, the flow); must fail within
/// the bound.
async fn login_error(mock: &Mock, user: &Arc<User>, what: &str) -> OAuthError {
    let oauth = oauth(user).build().unwrap();
    let (result, _) = bounded(what, oauth.authorize_now(&mock.mcp())).await;
    result.expect_err(what)
}

/// A facade client connecting to the mock's MCP endpoint with the OAuth client: the connection
/// fails with an authorization error within the bound; `check` is given its OAuth error.
async fn connect_error(mock: &Mock, oauth: OAuth, what: &str, check: impl FnOnce(&OAuthError)) {
    let client = Client::builder("hostile-test", "1.0.0")
        .auth(Arc::new(oauth) as Arc<dyn Authorizer>)
        .connect_timeout(Some(Duration::from_secs(10)));
    let (result, _) = bounded(what, client.connect_http(&mock.mcp())).await;
    let error = match result {
        Ok(_) => panic!("{what}: connected"),
        Err(error) => error,
    };
    assert!(matches!(error, ConnectError::Auth(_)), "{what}: {error:?}");
    match error.oauth_error() {
        Some(cause) => check(cause),
        None => panic!("{what}: no OAuth error in {error:?}"),
    }
}

#[tokio::test]
async fn metadata_naming_another_issuer_is_not_used() {
    let mock = Mock::start(|base, seen| match seen.path() {
        AS_METADATA_PATH | OIDC_PATH => {
            let mut document = metadata(base);
            document["issuer"] = json!("https://impostor.example");
            json_answer(200, &document)
        }
        _ => honest(base, seen),
    })
    .await;
    let error = discovery_error(&mock, "issuer mismatch").await;
    match &error {
        OAuthError::IssuerMismatch {
            expected, found, ..
        } => {
            assert_eq!(expected, &mock.base);
            assert_eq!(found, "https://impostor.example");
        }
        other => panic!("{other:?}"),
    }
    // Neither document's endpoints were used.
    assert_eq!(mock.count("/register") + mock.count("/token"), 0);
}

#[tokio::test]
async fn an_authorization_server_without_pkce_s256_is_refused_before_any_request_to_it() {
    for methods in [None, Some(json!(["plain"]))] {
        let given = methods.clone();
        let mock = Mock::start(move |base, seen| match seen.path() {
            AS_METADATA_PATH => {
                let mut document = metadata(base);
                match &given {
                    Some(methods) => document["code_challenge_methods_supported"] = methods.clone(),
                    None => {
                        document
                            .as_object_mut()
                            .unwrap()
                            .remove("code_challenge_methods_supported");
                    }
                }
                json_answer(200, &document)
            }
            _ => honest(base, seen),
        })
        .await;
        let user = User::consenting();
        let error = login_error(&mock, &user, "no PKCE").await;
        match &error {
            OAuthError::PkceUnsupported { issuer } => assert_eq!(issuer, &mock.base),
            other => panic!("{methods:?}: {other:?}"),
        }
        assert_eq!(user.asked(), 0, "{methods:?}");
        assert_eq!(mock.count("/register") + mock.count("/token"), 0);
    }
}

/// A server answering 302 to the same URL at `path`.
fn redirecting_at(path: &'static str) -> impl Fn(&str, &Seen) -> Answer + Send + Sync + 'static {
    move |base, seen| {
        if seen.path() == path {
            let location = format!("{base}{}", seen.target);
            answer(302, &[("location", &location)], "")
        } else {
            honest(base, seen)
        }
    }
}

#[tokio::test]
async fn redirects_forever_are_not_followed() {
    // The protected resource metadata.
    let mock = Mock::start(redirecting_at(PRM_PATH)).await;
    let error = discovery_error(&mock, "PRM redirects").await;
    match &error {
        OAuthError::Metadata { url, why } => {
            assert_eq!(url, &format!("{}{PRM_PATH}", mock.base));
            assert!(why.contains("302"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.count(PRM_PATH), 1);
    assert_eq!(mock.total(), 1, "{:?}", mock.requests());

    // The authorization server's metadata: each well-known URL asked once.
    let mock = Mock::start(move |base, seen| match seen.path() {
        AS_METADATA_PATH | OIDC_PATH => {
            let location = format!("{base}{}", seen.target);
            answer(302, &[("location", &location)], "")
        }
        _ => honest(base, seen),
    })
    .await;
    let error = discovery_error(&mock, "metadata redirects").await;
    match &error {
        OAuthError::Metadata { url, why } => {
            assert_eq!(url, &format!("{}{AS_METADATA_PATH}", mock.base));
            assert!(why.contains("302"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.count(AS_METADATA_PATH), 1);
    assert_eq!(mock.count(OIDC_PATH), 1);

    // The token endpoint.
    let mock = Mock::start(redirecting_at("/token")).await;
    let user = User::consenting();
    let error = login_error(&mock, &user, "token endpoint redirects").await;
    match &error {
        OAuthError::TokenRefused {
            endpoint, status, ..
        } => {
            assert_eq!(endpoint, &format!("{}/token", mock.base));
            assert_eq!(*status, 302);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.count("/token"), 1);
    assert_eq!(user.asked(), 1);
}

#[tokio::test]
async fn ten_mebibytes_of_metadata_are_cut_at_256_kib() {
    for path in [PRM_PATH, AS_METADATA_PATH] {
        let mock = Mock::start(move |base, seen| {
            if seen.path() == path {
                Answer::Huge(10 * 1024 * 1024)
            } else {
                honest(base, seen)
            }
        })
        .await;
        let error = discovery_error(&mock, "huge metadata").await;
        match &error {
            OAuthError::Unreachable {
                url,
                source: FetchError::TooLarge { limit, .. },
            } => {
                assert_eq!(url, &format!("{}{path}", mock.base));
                assert_eq!(*limit, 256 * 1024);
            }
            other => panic!("{path}: {other:?}"),
        }
        assert_eq!(mock.count(path), 1);
    }
}

#[tokio::test]
async fn a_token_endpoint_that_hangs_or_trickles_is_given_up_on() {
    for trickle in [false, true] {
        let mock = Mock::start(move |base, seen| match seen.path() {
            "/token" if trickle => Answer::Trickle,
            "/token" => Answer::Hang,
            _ => honest(base, seen),
        })
        .await;
        let user = User::consenting();
        let oauth = oauth(&user).build().unwrap();
        let (result, took) =
            bounded("token endpoint hangs", oauth.authorize_now(&mock.mcp())).await;
        match result {
            Err(OAuthError::Unreachable {
                url,
                source: FetchError::Io { .. },
            }) => assert_eq!(url, format!("{}/token", mock.base)),
            other => panic!("trickle {trickle}: {other:?}"),
        }
        // The 300 ms bound of the exchange, not the flow's 5 s.
        assert!(took < Duration::from_secs(2), "trickle {trickle}: {took:?}");
        assert_eq!(mock.count("/token"), 1);
    }
}

#[tokio::test]
async fn unusable_token_responses_are_typed_errors() {
    let cases: [(&str, Answer); 3] = [
        (
            "no access_token",
            json_answer(200, &json!({"token_type": "Bearer"})),
        ),
        (
            "token_type mac",
            json_answer(200, &json!({"access_token": "t", "token_type": "mac"})),
        ),
        (
            "HTML",
            answer(
                200,
                &[("content-type", "text/html")],
                "<html><body>Sign in</body></html>",
            ),
        ),
    ];
    for (what, token_answer) in cases {
        let token_answer = Arc::new(Mutex::new(Some(token_answer)));
        let mock = Mock::start(move |base, seen| match seen.path() {
            "/token" => token_answer
                .lock()
                .unwrap()
                .take()
                .unwrap_or_else(|| json_answer(500, &json!({}))),
            _ => honest(base, seen),
        })
        .await;
        let error = login_error(&mock, &User::consenting(), what).await;
        match &error {
            OAuthError::InvalidTokenResponse { endpoint, .. } => {
                assert_eq!(endpoint, &format!("{}/token", mock.base), "{what}");
            }
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(mock.count("/token"), 1, "{what}");
    }
}

#[tokio::test]
async fn redirects_with_a_wrong_or_missing_iss_or_a_wrong_state_are_refused_before_the_token_request()
 {
    type Check = fn(&OAuthError, &str) -> bool;
    let cases: [(&str, Arc<User>, Check); 4] = [
        (
            "wrong iss",
            User::new(|request, state| {
                format!(
                    "{}?code=c&state={state}&iss=https%3A%2F%2Fimpostor.example",
                    request.redirect_uri
                )
            }),
            |e, base| {
                matches!(e, OAuthError::IssMismatch { expected, got }
                    if expected == base && got == "https://impostor.example")
            },
        ),
        (
            "missing iss",
            User::new(|request, state| format!("{}?code=c&state={state}", request.redirect_uri)),
            |e, base| matches!(e, OAuthError::IssMissing { issuer } if issuer == base),
        ),
        (
            "iss differing by a trailing slash",
            User::new(|request, state| {
                format!(
                    "{}?code=c&state={state}&iss={}",
                    request.redirect_uri,
                    encode(&format!("{}/", request.issuer))
                )
            }),
            |e, _| matches!(e, OAuthError::IssMismatch { .. }),
        ),
        (
            "wrong state",
            User::new(|request, _| {
                format!(
                    "{}?code=c&state=forged&iss={}",
                    request.redirect_uri,
                    encode(&request.issuer)
                )
            }),
            |e, _| matches!(e, OAuthError::StateMismatch),
        ),
    ];
    for (what, user, check) in cases {
        let mock = Mock::start(honest).await;
        let error = login_error(&mock, &user, what).await;
        assert!(check(&error, &mock.base), "{what}: {error:?}");
        assert_eq!(user.asked(), 1, "{what}");
        assert_eq!(mock.count("/token"), 0, "{what}");
    }
}

#[tokio::test]
async fn an_error_redirect_from_another_issuer_is_not_surfaced() {
    let mock = Mock::start(honest).await;
    let user = User::new(|request, state| {
        format!(
            "{}?error=access_denied&error_description=Click+here+to+re-login&state={state}&iss=https%3A%2F%2Fimpostor.example",
            request.redirect_uri
        )
    });
    let error = login_error(&mock, &user, "error with a wrong iss").await;
    assert!(
        matches!(&error, OAuthError::IssMismatch { got, .. } if got == "https://impostor.example"),
        "{error:?}"
    );
    let shown = format!("{error} {error:?}");
    assert!(
        !shown.contains("access_denied") && !shown.contains("re-login"),
        "{shown}"
    );
    assert_eq!(mock.count("/token"), 0);
}

#[tokio::test]
async fn a_resource_server_refusing_every_fresh_token_gets_one_authorization_then_rejected() {
    let mock = Mock::start(honest).await;
    let user = User::consenting();
    let oauth = oauth(&user).build().unwrap();
    connect_error(&mock, oauth, "401 forever", |error| match error {
        OAuthError::Rejected { issuer, status, .. } => {
            assert_eq!(issuer, &mock.base);
            assert_eq!(*status, 401);
        }
        other => panic!("{other:?}"),
    })
    .await;
    // One authorization and one token; the token refused once, then no more sends.
    assert_eq!(user.asked(), 1);
    assert_eq!(mock.count("/token"), 1);
    assert_eq!(mock.count("/register"), 1);
    let posts = mock.count("/mcp");
    assert_eq!(posts, 2, "{:?}", mock.requests());
}

#[tokio::test]
async fn a_stored_token_refused_gets_one_refresh_and_one_authorization_then_rejected() {
    // The refresh token is refused too (`invalid_grant`): the client authorizes once more.
    let mock = Mock::start(|base, seen| match seen.path() {
        "/token" if String::from_utf8_lossy(&seen.body).contains("grant_type=refresh_token") => {
            json_answer(400, &json!({"error": "invalid_grant"}))
        }
        _ => honest(base, seen),
    })
    .await;
    let store = Arc::new(MemoryStore::new());
    let mut stored = TokenRecord::new("yesterday-s-token", "Bearer");
    stored.refresh_token = Some("yesterday-s-refresh-token".into());
    stored.scopes_requested = vec!["mcp".into()];
    store
        .save(
            &StoreKey::tokens(mock.base.clone(), mock.mcp()),
            &Stored::Tokens(stored),
        )
        .await
        .unwrap();
    let user = User::consenting();
    let oauth = oauth(&user).store(store).build().unwrap();
    connect_error(&mock, oauth, "401 to a stored token", |error| match error {
        OAuthError::Rejected { issuer, status, .. } => {
            assert_eq!(issuer, &mock.base);
            assert_eq!(*status, 401);
        }
        other => panic!("{other:?}"),
    })
    .await;
    // The stored token, then the new one: each refused once.
    let sent: Vec<Option<String>> = mock
        .requests()
        .iter()
        .filter(|s| s.path() == "/mcp")
        .map(|s| s.header("authorization").map(str::to_owned))
        .collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0].as_deref(), Some("Bearer yesterday-s-token"));
    assert_ne!(sent[1], sent[0]);
    // One refresh (refused), one authorization, one code exchange.
    assert_eq!(mock.count("/token"), 2);
    assert_eq!(user.asked(), 1);
}

#[tokio::test]
async fn a_resource_server_asking_for_more_scopes_forever_gets_two_step_ups() {
    let steps = Arc::new(AtomicUsize::new(0));
    let counted = steps.clone();
    let mock = Mock::start(move |base, seen| match seen.path() {
        "/mcp" if seen.header("authorization").is_some() => {
            // A new scope every time: an escalation without end.
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let challenge = format!(r#"Bearer error="insufficient_scope", scope="mcp extra-{n}""#);
            answer(403, &[("www-authenticate", &challenge)], "")
        }
        _ => honest(base, seen),
    })
    .await;
    let user = User::consenting();
    let oauth = oauth(&user).build().unwrap();
    connect_error(&mock, oauth, "403 forever", |error| match error {
        OAuthError::InsufficientScope {
            required,
            requested,
        } => {
            assert_eq!(required, &["mcp", "extra-2"]);
            assert_eq!(requested, &["mcp", "extra-0", "extra-1"]);
        }
        other => panic!("{other:?}"),
    })
    .await;
    // The first authorization and two step-ups (the default `max_step_ups`).
    assert_eq!(user.asked(), 3);
    assert_eq!(mock.count("/token"), 3);
    assert_eq!(steps.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_resource_server_asking_for_a_dpop_nonce_forever_gets_one_retry() {
    let nonces = Arc::new(AtomicUsize::new(0));
    let counted = nonces.clone();
    let mock = Mock::start(move |base, seen| match seen.path() {
        "/mcp" if seen.header("authorization").is_some() => {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let nonce = format!("nonce-{n}");
            answer(
                401,
                &[
                    (
                        "www-authenticate",
                        r#"DPoP error="use_dpop_nonce", error_description="Resource server requires nonce in DPoP proof""#,
                    ),
                    ("dpop-nonce", &nonce),
                ],
                "",
            )
        }
        _ => honest(base, seen),
    })
    .await;
    let user = User::consenting();
    let oauth = oauth(&user).build().unwrap();
    connect_error(
        &mock,
        oauth,
        "use_dpop_nonce forever",
        |error| match error {
            OAuthError::Rejected { status, error, .. } => {
                assert_eq!(*status, 401);
                assert_eq!(error.as_deref(), Some("use_dpop_nonce"));
            }
            other => panic!("{other:?}"),
        },
    )
    .await;
    // The token, then one retry with the new nonce.
    assert_eq!(nonces.load(Ordering::SeqCst), 2);
    assert_eq!(user.asked(), 1);
    assert_eq!(mock.count("/token"), 1);
}

#[tokio::test]
async fn metadata_naming_a_resource_on_another_origin_asks_no_authorization_server() {
    let authorization_server = Mock::start(honest).await;
    let issuer = authorization_server.base.clone();
    let mock = Mock::start(move |base, seen| match seen.path() {
        PRM_PATH => json_answer(
            200,
            &json!({"resource": "https://elsewhere.example/mcp", "authorization_servers": [issuer]}),
        ),
        _ => honest(base, seen),
    })
    .await;
    let user = User::consenting();
    let error = login_error(&mock, &user, "resource mismatch").await;
    match &error {
        OAuthError::ResourceMismatch { published, url } => {
            assert_eq!(published, "https://elsewhere.example/mcp");
            assert_eq!(url, &mock.mcp());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(authorization_server.total(), 0);
    assert_eq!(user.asked(), 0);
}

#[tokio::test]
async fn a_registration_without_client_id_is_refused() {
    let mock = Mock::start(|base, seen| match seen.path() {
        "/register" => json_answer(201, &json!({"token_endpoint_auth_method": "none"})),
        _ => honest(base, seen),
    })
    .await;
    let user = User::consenting();
    let error = login_error(&mock, &user, "DCR without client_id").await;
    match &error {
        OAuthError::InvalidRegistration { url, why } => {
            assert_eq!(url, &format!("{}/register", mock.base));
            assert!(why.contains("client_id"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.count("/register"), 1);
    assert_eq!(user.asked(), 0);
    assert_eq!(mock.count("/token"), 0);
}

#[tokio::test]
async fn endpoints_on_plain_http_to_another_host_are_refused() {
    for member in [
        "authorization_endpoint",
        "token_endpoint",
        "registration_endpoint",
    ] {
        let mock = Mock::start(move |base, seen| match seen.path() {
            AS_METADATA_PATH => {
                let mut document = metadata(base);
                document[member] = json!("http://as.example/endpoint");
                json_answer(200, &document)
            }
            _ => honest(base, seen),
        })
        .await;
        let error = discovery_error(&mock, member).await;
        match &error {
            OAuthError::InsecureEndpoint { url, .. } => {
                assert_eq!(url, "http://as.example/endpoint", "{member}");
            }
            other => panic!("{member}: {other:?}"),
        }
        assert_eq!(mock.count("/register") + mock.count("/token"), 0);
    }
    // An authorization server named on plain http to another host is not asked at all.
    let mock = Mock::start(|base, seen| match seen.path() {
        PRM_PATH => json_answer(
            200,
            &json!({"resource": format!("{base}/mcp"), "authorization_servers": ["http://as.example"]}),
        ),
        _ => honest(base, seen),
    })
    .await;
    let error = discovery_error(&mock, "insecure issuer").await;
    assert!(
        matches!(&error, OAuthError::InsecureEndpoint { url, .. } if url == "http://as.example"),
        "{error:?}"
    );
}
