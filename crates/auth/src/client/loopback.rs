//! The redirect listener of desktop and command-line applications (RFC 8252 section 7.3): an
//! HTTP listener on a loopback address that receives the authorization server's redirect
//! through the user's browser.
//!
//! [`LoopbackRedirect::bind`] binds before the flow starts, so that the redirect URI the client
//! registers names the real port; [`LoopbackRedirect::handler`] makes it the
//! [`AuthorizationHandler`] of an [`OAuth`](super::OAuth) client: it shows the authorization URL
//! with the application's function, then waits for the one `GET /callback` whose `state` is
//! the flow's. It never opens a browser: `show` may.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::task::JoinSet;

use super::handler::{AuthorizationHandler, AuthorizationRequest, Declined, Redirect};
use crate::fetch::BoxFuture;

/// The path of the redirect URI: `/callback`.
pub const CALLBACK_PATH: &str = "/callback";

/// The largest request head the listener reads (request line and headers): 8 KiB. A larger one
/// is answered with `431` and its connection closed.
pub const MAX_HEAD: usize = 8 * 1024;

/// How long a connection may take to send its request head (a browser's idle speculative
/// connection is dropped then).
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections are read at once; more are closed unanswered.
const MAX_CONNECTIONS: usize = 16;

/// An HTTP listener on a loopback address for the redirect of the authorization code flow.
///
/// It answers only `GET /callback`: with the flow's `state`, a small HTML page saying the
/// window can be closed, and the flow goes on with that redirect; with another `state` (or
/// none), `400` and it keeps waiting; other paths `404`, other methods `405`, a request head
/// over [`MAX_HEAD`] `431`. Connections are read concurrently (at most 16 at once, 10 s each
/// for the head), so an idle browser connection delays nothing. One flow waits at a time; a
/// second waits for the first to end. The wait has no bound of its own: the flow's
/// ([`OAuthBuilder::flow_timeout`](super::OAuthBuilder::flow_timeout), default 10 minutes) drops
/// it, and the listener is then ready for the next flow.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use modelctx_auth::client::{LoopbackRedirect, OAuth};
///
/// let loopback = LoopbackRedirect::bind("127.0.0.1:0").await?;
/// let oauth = OAuth::builder()
///     .redirect_uri(loopback.redirect_uri())
///     .handler(Arc::new(loopback.handler(|request| {
///         eprintln!("Open this URL to sign in: {}", request.url);
///     })))
///     .build()?;
/// # let _ = oauth;
/// # Ok(())
/// # }
/// ```
pub struct LoopbackRedirect {
    addr: SocketAddr,
    /// Held by the flow that waits (one at a time).
    listener: tokio::sync::Mutex<TcpListener>,
}

impl fmt::Debug for LoopbackRedirect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopbackRedirect")
            .field("addr", &self.addr)
            .finish()
    }
}

impl LoopbackRedirect {
    /// Binds `addr`, such as `127.0.0.1:0` (any free port) or `127.0.0.1:8123` (the port of a
    /// redirect URI registered beforehand). The first address that resolves to a loopback IP
    /// and binds is used; an address off loopback is refused (`InvalidInput`): the redirect
    /// carries an authorization code, which must not be seen by other hosts.
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<LoopbackRedirect> {
        let mut last = None;
        for candidate in tokio::net::lookup_host(addr).await? {
            if !candidate.ip().is_loopback() {
                last = Some(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{candidate} is not a loopback address"),
                ));
                continue;
            }
            match TcpListener::bind(candidate).await {
                Ok(listener) => {
                    let addr = listener.local_addr()?;
                    return Ok(LoopbackRedirect {
                        addr,
                        listener: tokio::sync::Mutex::new(listener),
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the address resolves to nothing",
            )
        }))
    }

    /// The address it listens on (the port chosen, when bound with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The redirect URI: `http://127.0.0.1:<port>/callback` (`http://[::1]:<port>/callback` on
    /// IPv6), to give [`OAuthBuilder::redirect_uri`](super::OAuthBuilder::redirect_uri).
    pub fn redirect_uri(&self) -> String {
        let host = match self.addr.ip() {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        };
        format!("http://{host}:{}{CALLBACK_PATH}", self.addr.port())
    }

    /// The [`AuthorizationHandler`] that calls `show` with each authorization request (to print
    /// its URL, open a browser), then waits for its redirect here.
    pub fn handler<F>(self, show: F) -> LoopbackHandler
    where
        F: Fn(&AuthorizationRequest) + Send + Sync + 'static,
    {
        LoopbackHandler {
            loopback: self,
            show: Box::new(show),
        }
    }

    /// Waits for the `GET /callback` whose `state` is `state`, answers it and returns its
    /// redirect; everything else is answered and ignored (see [`LoopbackRedirect`]). Fails only
    /// when the listener itself fails.
    pub async fn wait(&self, state: &str) -> Result<Redirect, Declined> {
        let listener = self.listener.lock().await;
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) if connections.len() < MAX_CONNECTIONS => {
                        connections.spawn(answer(stream, self.addr, state.to_owned()));
                    }
                    Ok(_) => tracing::debug!("loopback redirect: too many connections, one closed"),
                    Err(e) if is_per_connection(&e) => {
                        tracing::debug!(error = %e, "loopback redirect: a connection failed");
                    }
                    Err(e) => {
                        return Err(Declined::new(format!(
                            "the redirect listener on {} failed: {e}",
                            self.addr
                        )));
                    }
                },
                Some(done) = connections.join_next() => {
                    if let Ok(Some(redirect)) = done {
                        return Ok(redirect);
                    }
                }
            }
        }
    }
}

/// Whether an `accept` error concerns one connection only (the listener goes on).
fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// A [`LoopbackRedirect`] with the function that shows the user the authorization URL: the
/// application's [`AuthorizationHandler`] (from [`LoopbackRedirect::handler`]).
pub struct LoopbackHandler {
    loopback: LoopbackRedirect,
    show: Box<dyn Fn(&AuthorizationRequest) + Send + Sync>,
}

impl LoopbackHandler {
    /// The redirect URI of its listener ([`LoopbackRedirect::redirect_uri`]).
    pub fn redirect_uri(&self) -> String {
        self.loopback.redirect_uri()
    }

    /// Its listener.
    pub fn loopback(&self) -> &LoopbackRedirect {
        &self.loopback
    }
}

impl fmt::Debug for LoopbackHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopbackHandler")
            .field("loopback", &self.loopback)
            .finish_non_exhaustive()
    }
}

impl AuthorizationHandler for LoopbackHandler {
    /// Calls `show`, then waits for the redirect with the authorization URL's `state`
    /// ([`Declined`] when the URL has none, or when the listener fails).
    fn authorize<'a>(
        &'a self,
        request: &'a AuthorizationRequest,
    ) -> BoxFuture<'a, Result<Redirect, Declined>> {
        Box::pin(async move {
            let state = Redirect::new(&request.url)
                .param("state")
                .ok()
                .flatten()
                .map(str::to_owned)
                .ok_or_else(|| Declined::new("the authorization URL has no single state"))?;
            (self.show)(request);
            self.loopback.wait(&state).await
        })
    }
}

/// Reads one request on `stream` and answers it; the redirect when it is the callback of
/// `state`.
async fn answer(mut stream: TcpStream, addr: SocketAddr, state: String) -> Option<Redirect> {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(head))) => head,
        Ok(Ok(None)) => {
            reply(&mut stream, "431 Request Header Fields Too Large", "").await;
            drain(&mut stream).await;
            return None;
        }
        Ok(Err(_)) | Err(_) => return None,
    };
    let line = head.lines().next().unwrap_or_default();
    let mut words = line.split(' ');
    let (method, target) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or("/"),
    );
    let path = target.split(['?', '#']).next().unwrap_or_default();
    if path != CALLBACK_PATH {
        reply(&mut stream, "404 Not Found", "").await;
        return None;
    }
    if method != "GET" {
        reply(&mut stream, "405 Method Not Allowed\r\nAllow: GET", "").await;
        return None;
    }
    let redirect = Redirect::new(&format!("http://{addr}{target}"));
    if redirect.param("state") != Ok(Some(state.as_str())) {
        reply(&mut stream, "400 Bad Request", NOT_THIS_FLOW).await;
        return None;
    }
    let page = match redirect.param("error") {
        Ok(None) => DONE,
        _ => REFUSED,
    };
    reply(&mut stream, "200 OK", page).await;
    Some(redirect)
}

/// The request head (up to its blank line), or `None` when it exceeds [`MAX_HEAD`].
async fn read_head(stream: &mut TcpStream) -> io::Result<Option<String>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&chunk[..read]);
        if let Some(end) = find_blank_line(&head) {
            if end > MAX_HEAD {
                return Ok(None);
            }
            head.truncate(end);
            return Ok(Some(String::from_utf8_lossy(&head).into_owned()));
        }
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

/// Reads and drops what the peer still sends (at most 64 KiB, for 1 s), so that closing the
/// connection does not reset it before the peer has read the answer.
async fn drain(stream: &mut TcpStream) {
    let mut chunk = [0u8; 4096];
    let mut left: usize = 64 * 1024;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while left > 0 {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(read) => left = left.saturating_sub(read),
            }
        }
    })
    .await;
}

/// Where the head ends (the index after its blank line).
fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The page of the flow's redirect.
const DONE: &str = "<!doctype html><meta charset=utf-8><title>Signed in</title>\
<p>Authorization received. You can close this window and return to the application.</p>";

/// The page of the flow's redirect with an `error`.
const REFUSED: &str = "<!doctype html><meta charset=utf-8><title>Not signed in</title>\
<p>The authorization server did not grant access. You can close this window; the application \
says why.</p>";

/// The page of a callback with another `state`.
const NOT_THIS_FLOW: &str = "<!doctype html><meta charset=utf-8><title>Unexpected</title>\
<p>This is not the sign-in the application is waiting for.</p>";

/// Writes a response with `status` (and any extra header lines after it) and `page`, then
/// closes the connection (best effort).
async fn reply(stream: &mut TcpStream, status: &str, page: &str) {
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n{page}",
        page.len()
    );
    if stream.write_all(response.as_bytes()).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::mpsc;

    use super::*;

    fn request(url: &str, redirect_uri: &str) -> AuthorizationRequest {
        AuthorizationRequest {
            url: url.to_owned(),
            redirect_uri: redirect_uri.to_owned(),
            issuer: "http://127.0.0.1:1".to_owned(),
            resource: "http://127.0.0.1:2/mcp".to_owned(),
            scopes: vec![],
        }
    }

    /// Sends `raw` to `addr` and reads the whole answer (the listener closes it).
    async fn send(addr: SocketAddr, raw: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).await.expect("connects");
        stream.write_all(raw).await.expect("writes");
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
            .await
            .expect("answered in time")
            .expect("reads");
        String::from_utf8_lossy(&answer).into_owned()
    }

    async fn get(addr: SocketAddr, target: &str) -> String {
        send(
            addr,
            format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
        )
        .await
    }

    fn status(answer: &str) -> &str {
        answer.lines().next().unwrap_or_default()
    }

    #[tokio::test]
    async fn binds_loopback_only_and_names_its_port() {
        let loopback = LoopbackRedirect::bind("127.0.0.1:0").await.expect("binds");
        let port = loopback.local_addr().port();
        assert_ne!(port, 0);
        assert_eq!(
            loopback.redirect_uri(),
            format!("http://127.0.0.1:{port}/callback")
        );
        let refused = LoopbackRedirect::bind("0.0.0.0:0").await.unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidInput, "{refused}");
        if let Ok(v6) = LoopbackRedirect::bind("[::1]:0").await {
            let port = v6.local_addr().port();
            assert_eq!(v6.redirect_uri(), format!("http://[::1]:{port}/callback"));
        }
    }

    #[tokio::test]
    async fn waits_for_the_callback_of_its_state_and_ignores_the_rest() {
        let loopback = LoopbackRedirect::bind("127.0.0.1:0").await.expect("binds");
        let addr = loopback.local_addr();
        let redirect_uri = loopback.redirect_uri();
        let (shown, mut seen) = mpsc::unbounded_channel();
        let handler = Arc::new(loopback.handler(move |request| {
            shown.send(request.url.clone()).expect("the test listens");
        }));
        let url = "http://127.0.0.1:1/authorize?client_id=c&state=s%2B1&code_challenge=x";
        let flow = tokio::spawn({
            let handler = handler.clone();
            let request = request(url, &redirect_uri);
            async move { handler.authorize(&request).await }
        });
        assert_eq!(seen.recv().await.as_deref(), Some(url), "shown first");
        // An idle connection (a browser's speculative one) holds nothing up.
        let _idle = TcpStream::connect(addr).await.expect("connects");
        assert!(status(&get(addr, "/favicon.ico").await).starts_with("HTTP/1.1 404"));
        assert!(status(&get(addr, "/").await).starts_with("HTTP/1.1 404"));
        let post = send(addr, b"POST /callback?state=s%2B1&code=c HTTP/1.1\r\n\r\n").await;
        assert!(status(&post).starts_with("HTTP/1.1 405"), "{post}");
        assert!(post.contains("Allow: GET"), "{post}");
        let other = get(addr, "/callback?code=stolen&state=other").await;
        assert!(status(&other).starts_with("HTTP/1.1 400"), "{other}");
        let none = get(addr, "/callback?code=stolen").await;
        assert!(status(&none).starts_with("HTTP/1.1 400"), "{none}");
        let mut huge = b"GET /callback?state=s%2B1&code=c HTTP/1.1\r\nX-Big: ".to_vec();
        huge.extend(std::iter::repeat_n(b'a', MAX_HEAD));
        huge.extend_from_slice(b"\r\n\r\n");
        let too_large = send(addr, &huge).await;
        assert!(
            status(&too_large).starts_with("HTTP/1.1 431"),
            "{too_large}"
        );
        assert!(!flow.is_finished(), "still waiting after the others");

        let done = get(
            addr,
            "/callback?code=the-code&state=s%2B1&iss=http%3A%2F%2Fas",
        )
        .await;
        assert!(status(&done).starts_with("HTTP/1.1 200"), "{done}");
        assert!(done.contains("text/html"), "{done}");
        assert!(done.contains("You can close this window"), "{done}");
        let redirect = flow.await.expect("joins").expect("the redirect");
        assert_eq!(redirect.param("code"), Ok(Some("the-code")));
        assert_eq!(redirect.param("state"), Ok(Some("s+1")));
        assert_eq!(redirect.param("iss"), Ok(Some("http://as")));
    }

    #[tokio::test]
    async fn an_error_redirect_is_returned_with_its_page() {
        let loopback = LoopbackRedirect::bind("127.0.0.1:0").await.expect("binds");
        let addr = loopback.local_addr();
        let flow = tokio::spawn(async move { loopback.wait("st").await });
        let answer = get(addr, "/callback?error=access_denied&state=st").await;
        assert!(status(&answer).starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("did not grant access"), "{answer}");
        let redirect = flow.await.expect("joins").expect("the redirect");
        assert_eq!(redirect.param("error"), Ok(Some("access_denied")));
    }

    #[tokio::test]
    async fn a_url_without_state_is_declined_before_showing() {
        let loopback = LoopbackRedirect::bind("127.0.0.1:0").await.expect("binds");
        let redirect_uri = loopback.redirect_uri();
        let handler = loopback.handler(|_| panic!("not shown"));
        let declined = handler
            .authorize(&request("http://as/authorize?client_id=c", &redirect_uri))
            .await
            .unwrap_err();
        assert!(declined.reason.contains("state"), "{declined}");
    }

    #[tokio::test]
    async fn one_flow_at_a_time_and_a_dropped_one_frees_the_listener() {
        let loopback = Arc::new(LoopbackRedirect::bind("127.0.0.1:0").await.expect("binds"));
        let addr = loopback.local_addr();
        // A flow dropped by its timeout leaves the listener to the next.
        let timed_out =
            tokio::time::timeout(Duration::from_millis(50), loopback.wait("gone")).await;
        assert!(timed_out.is_err());

        let first = tokio::spawn({
            let loopback = loopback.clone();
            async move { loopback.wait("a").await }
        });
        tokio::task::yield_now().await;
        let second = tokio::spawn({
            let loopback = loopback.clone();
            async move { loopback.wait("b").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The first flow listens: the second one's callback is not its.
        let early = get(addr, "/callback?code=2&state=b").await;
        assert!(status(&early).starts_with("HTTP/1.1 400"), "{early}");
        assert!(!second.is_finished());
        assert!(status(&get(addr, "/callback?code=1&state=a").await).starts_with("HTTP/1.1 200"));
        let first = first.await.expect("joins").expect("first redirect");
        assert_eq!(first.param("code"), Ok(Some("1")));
        assert!(status(&get(addr, "/callback?code=2&state=b").await).starts_with("HTTP/1.1 200"));
        let second = second.await.expect("joins").expect("second redirect");
        assert_eq!(second.param("code"), Ok(Some("2")));
    }
}
