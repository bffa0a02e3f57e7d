//! The connection level of `serve()`: the connection cap, header and idle timeouts (slowloris),
//! the body deadline, the endpoint-wide cap on requests in flight, the idle-session sweep on its
//! own task (audit findings 1 and 17), and the loopback peer check (finding 6) on a real socket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use modelctx_http::event_store::{
    BoxFuture, EventId, EventStore, EventStoreError, Follow, MemoryEventStore, ReplayError,
    StoreSizes, StreamId,
};
use modelctx_http::server::{RunningServer, ServerConfig};
use modelctx_tests::http::{
    call, modern_call, modern_headers, open_session, post, post_headers, raw_request, start, within,
};
use modelctx_types::RequestId;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// Waits (up to 20 s) until `done` holds, checking every 10 ms.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    within(what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// Reads until the peer closes the connection (EOF or reset); returns what was read.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return all,
            Ok(n) => all.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The status code and the JSON body of a whole HTTP/1.1 response with a `Content-Length`.
fn parse_response(raw: &[u8]) -> (u16, Vec<(String, String)>, Value) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (
        status,
        headers,
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

async fn echo_works(addr: SocketAddr) {
    let response = post(
        addr,
        &modern_headers("tools/call", Some("echo")),
        &modern_call(1, "echo", json!({"text": "hi"})),
    )
    .await;
    assert_eq!(response.status, 200);
    let body = response.json().await;
    assert_eq!(body["result"]["content"][0]["text"], "hi", "{body}");
}

async fn stop(server: RunningServer) {
    server.shutdown(Duration::from_secs(1)).await;
}

/// Finding 1: 8 connections (the cap), half idle, half sending a request head one byte at a time,
/// cannot lock a real client out: a ninth connection is closed at once while they are open, the
/// header timeout closes them, and then the client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_1_slowloris_and_idle_connections_are_capped_and_timed_out() {
    let header_timeout = Duration::from_secs(3);
    let mut config = ServerConfig::default();
    config.max_connections = 8;
    config.header_timeout = header_timeout;
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let server = Arc::new(server);

    let opened = Instant::now();
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        slow.push(tokio::spawn(async move {
            // A request head that never ends, one byte every 100 ms.
            let head = b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nX-Pad: ".iter();
            let mut bytes = head.chain(std::iter::repeat(&b'a'));
            loop {
                let byte = *bytes.next().unwrap();
                if stream.write_all(&[byte]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                // Closed by the server: reading sees EOF (or a reset) at once.
                let mut probe = [0u8; 64];
                if let Ok(Ok(0) | Err(_)) =
                    tokio::time::timeout(Duration::from_millis(1), stream.read(&mut probe)).await
                {
                    return;
                }
            }
        }));
    }
    {
        let server = server.clone();
        until("8 connections open", move || server.open_connections() == 8).await;
    }

    // Beyond the cap: accepted and closed at once (not at the header timeout), while the 8 are
    // still open.
    let ninth_opened = Instant::now();
    let mut ninth = TcpStream::connect(addr).await.unwrap();
    let read = within("the ninth connection closed", read_until_closed(&mut ninth)).await;
    assert!(read.is_empty(), "nothing is answered beyond the cap");
    assert!(
        ninth_opened.elapsed() < header_timeout / 2,
        "a connection beyond the cap is closed at once, not after {:?}",
        ninth_opened.elapsed()
    );
    assert_eq!(
        server.open_connections(),
        8,
        "closed by the cap, not a timeout"
    );

    // The idle ones are closed at the header timeout (not before), and the slow ones too.
    for mut stream in idle {
        within("an idle connection closed", read_until_closed(&mut stream)).await;
        assert!(opened.elapsed() >= header_timeout - Duration::from_millis(100));
    }
    for task in slow {
        within("a slowloris connection closed", task).await.unwrap();
    }
    {
        let server = server.clone();
        until("every connection closed", move || {
            server.open_connections() == 0
        })
        .await;
    }

    // A real client is served.
    echo_works(addr).await;
    let server = Arc::into_inner(server).expect("the only handle");
    {
        let server = &server;
        until("the client's connection closed", || {
            server.open_connections() == 0
        })
        .await;
    }
    assert_eq!(server.service().table_sizes().await.in_flight, 0);
    stop(server).await;
}

/// Finding 1: a kept-alive connection with no request under way is closed after
/// `idle_connection_timeout`; one whose response is still being written is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_1_idle_keep_alive_connections_are_closed() {
    let mut config = ServerConfig::default();
    config.idle_connection_timeout = Duration::from_millis(500);
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let body = modern_call(1, "echo", json!({"text": "kept"})).to_string();
    let mut head = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n");
    for (name, value) in modern_headers("tools/call", Some("echo")) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).await.unwrap();
    let answered = Instant::now();
    let read = within("the idle connection closed", read_until_closed(&mut stream)).await;
    let (status, _, body) = parse_response(&read);
    assert_eq!(status, 200);
    assert_eq!(body["result"]["content"][0]["text"], "kept", "{body}");
    assert!(answered.elapsed() >= Duration::from_millis(400));
    until("no connection open", || server.open_connections() == 0).await;
    stop(server).await;
}

/// Finding 1: on a kept-alive HTTP/1 connection, the next request head must arrive within
/// `header_timeout` too (hyper's timer), even when the idle timeout is much longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_1_the_next_request_head_on_a_kept_alive_connection_is_timed() {
    let mut config = ServerConfig::default();
    config.header_timeout = Duration::from_millis(500);
    config.idle_connection_timeout = Duration::from_secs(600);
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let body = modern_call(1, "echo", json!({"text": "kept"})).to_string();
    let mut head = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n");
    for (name, value) in modern_headers("tools/call", Some("echo")) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).await.unwrap();
    // The whole first response (it has a Content-Length), the connection kept alive.
    let mut read = Vec::new();
    within("the first response", async {
        loop {
            let text = String::from_utf8_lossy(&read).to_string();
            if let Some((head, rest)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .expect("a Content-Length");
                if rest.len() >= length {
                    break;
                }
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before the first response");
            read.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    assert_eq!(parse_response(&read).0, 200);
    // Half a request head, then nothing.
    stream.write_all(b"POST /mcp HTTP/1.1\r\nHo").await.unwrap();
    let rest = within(
        "the stalled head closed at the header timeout",
        read_until_closed(&mut stream),
    )
    .await;
    assert!(
        rest.is_empty() || String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
    stop(server).await;
}

/// Finding 1: a body that does not arrive within `body_timeout` gets 408 with a JSON-RPC
/// error, and the connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_1_a_slow_body_gets_408() {
    let mut config = ServerConfig::default();
    config.body_timeout = Duration::from_millis(300);
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n");
    for (name, value) in post_headers(None, None) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("Content-Length: 100\r\n\r\n{\"jsonrpc\":");
    stream.write_all(head.as_bytes()).await.unwrap();
    let read = within("the 408", read_until_closed(&mut stream)).await;
    let (status, _, body) = parse_response(&read);
    assert_eq!(status, 408);
    assert!(body["error"]["code"].is_i64(), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not arrive"),
        "{body}"
    );
    assert_eq!(server.service().table_sizes().await.in_flight, 0);
    stop(server).await;
}

/// Finding 1 (and 25): with `max_requests_in_flight = 2`, two calls that wait hold both places;
/// a third request gets 503 with `Retry-After` and a JSON-RPC error; once they are answered,
/// requests are served again and the count is back to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_1_requests_in_flight_are_capped() {
    let mut config = ServerConfig::default();
    config.max_requests_in_flight = 2;
    let (server, app) = start(config).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let mut slow = Vec::new();
    for id in 1..=2 {
        let session = session.clone();
        slow.push(tokio::spawn(async move {
            post(
                addr,
                &post_headers(Some(&session), None),
                &call(id, "slow", json!({})),
            )
            .await
            .json()
            .await
        }));
    }
    let service = server.service().clone();
    within("two requests in flight", async {
        while service.table_sizes().await.in_flight < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    let third = post(
        addr,
        &post_headers(Some(&session), None),
        &call(3, "echo", json!({"text": "third"})),
    )
    .await;
    assert_eq!(third.status, 503);
    assert_eq!(third.header("retry-after"), Some("1"));
    let body = third.json().await;
    assert!(body["error"]["code"].is_i64(), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many requests in flight"),
        "{body}"
    );

    // Release both calls (a permit is kept for a call not yet waiting).
    let released = Arc::new(AtomicBool::new(false));
    let releaser = {
        let gates = app.gates.clone();
        let released = released.clone();
        tokio::spawn(async move {
            while !released.load(Ordering::SeqCst) {
                gates.slow.notify_one();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    for task in slow {
        let body = within("a slow call", task).await.unwrap();
        assert_eq!(body["result"]["content"][0]["text"], "slow done", "{body}");
    }
    released.store(true, Ordering::SeqCst);
    releaser.await.unwrap();
    assert_eq!(server.service().table_sizes().await.in_flight, 0);
    echo_works(addr).await;
    assert_eq!(server.service().table_sizes().await.in_flight, 0);
    stop(server).await;
}

/// An event store whose `remove_session` waits until released: a slow store (Redis, say).
struct SlowStore {
    inner: MemoryEventStore,
    entered: Notify,
    release: Notify,
}

impl EventStore for SlowStore {
    fn stream_base(&self) -> u64 {
        self.inner.stream_base()
    }

    fn open_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
        pending: &'a [RequestId],
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        self.inner.open_stream(session, stream, pending)
    }

    fn append<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
        data: Bytes,
    ) -> BoxFuture<'a, Result<EventId, EventStoreError>> {
        self.inner.append(session, stream, data)
    }

    fn finish_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        self.inner.finish_stream(session, stream)
    }

    fn replay_after<'a>(
        &'a self,
        session: &'a str,
        after: &'a EventId,
    ) -> BoxFuture<'a, Result<Vec<(EventId, Bytes)>, ReplayError>> {
        self.inner.replay_after(session, after)
    }

    fn follow<'a>(
        &'a self,
        session: &'a str,
        after: &'a EventId,
    ) -> BoxFuture<'a, Result<Follow, ReplayError>> {
        self.inner.follow(session, after)
    }

    fn set_standalone<'a>(
        &'a self,
        session: &'a str,
        stream: Option<StreamId>,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        self.inner.set_standalone(session, stream)
    }

    fn standalone<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, Result<Option<StreamId>, EventStoreError>> {
        self.inner.standalone(session)
    }

    fn remove_stream<'a>(
        &'a self,
        session: &'a str,
        stream: StreamId,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        self.inner.remove_stream(session, stream)
    }

    fn remove_session<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, Result<(), EventStoreError>> {
        Box::pin(async move {
            self.entered.notify_one();
            self.release.notified().await;
            self.inner.remove_session(session).await
        })
    }

    fn sizes(&self) -> BoxFuture<'_, Result<StoreSizes, EventStoreError>> {
        self.inner.sizes()
    }
}

/// Finding 17: the idle-session sweep runs on its own task: while it waits on a slow event
/// store, new connections are still accepted and served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_17_a_slow_sweep_does_not_stop_accept() {
    let store = Arc::new(SlowStore {
        inner: MemoryEventStore::default(),
        entered: Notify::new(),
        release: Notify::new(),
    });
    let mut config = ServerConfig::default();
    config.session_idle_timeout = Duration::from_millis(1);
    config.event_store = store.clone();
    let (server, _) = start(config).await;
    let addr = server.local_addr();
    // Only `initialize`: the session is idle from its first response on, so no second request
    // of the test races the sweep (a 1 ms timeout would end the session between them).
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let response = raw_request(
        addr,
        "POST",
        "/mcp",
        &post_headers(None, None),
        init.to_string().as_bytes(),
    )
    .await;
    assert_eq!(response.status, 200);
    assert!(response.header("mcp-session-id").is_some());
    // The sweep (every second) finds the idle session and waits in `remove_session`.
    within("the sweep in the store", store.entered.notified()).await;
    for _ in 0..3 {
        let response = within(
            "a request while the sweep waits",
            raw_request(addr, "GET", "/elsewhere", &[], b""),
        )
        .await;
        assert_eq!(response.status, 404);
    }
    store.release.notify_one();
    within("the session ended", async {
        while server.service().table_sizes().await.sessions > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    stop(server).await;
}

/// Finding 6 on a socket: `serve()` gives the service the peer's address, so a loopback client
/// is served with the default (loopback) lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_6_serve_gives_the_peer_address() {
    let (server, _) = start(ServerConfig::default()).await;
    echo_works(server.local_addr()).await;
    stop(server).await;
}

/// `serve_on` serves a listener the application bound first (its address known before the
/// server is built), and checks the configuration against that address as `serve` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_takes_a_bound_listener_and_checks_its_address() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bound = listener.local_addr().unwrap();
    let app = Arc::new(modelctx_tests::http::TestApp::default());
    let server = modelctx_http::server::serve_on(listener, ServerConfig::default(), app.clone())
        .await
        .unwrap();
    assert_eq!(server.local_addr(), bound);
    echo_works(bound).await;
    stop(server).await;

    // A public address with the default (loopback) allow-lists is refused, as by `serve`.
    let public = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let Err(refused) = modelctx_http::server::serve_on(public, ServerConfig::default(), app).await
    else {
        panic!("a public address served with the loopback allow-lists");
    };
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
}
