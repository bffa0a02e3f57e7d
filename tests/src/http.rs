//! For the Streamable HTTP tests: an application behind `modelctx-http`'s server built on
//! `modelctx-session` (the facade brings the real one), and a raw HTTP/1.1 client that shows
//! exactly what the server wrote.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modelctx_http::server::{
    LegacyHandler, LegacySession, McpApp, ModernRequest, PeerAddr, RequestContext,
};
use modelctx_session::{Event, IncomingRequest, ServerConfig, ServerSession, Transmit};
use modelctx_types::{ErrorCode, ErrorObject, Incoming, JsonObject, Message, RequestId};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};

/// What a tool of the test application does, besides answering.
#[derive(Default)]
pub struct Gates {
    /// `tools/call` of `slow` waits until this is notified.
    pub slow: Notify,
    /// How many `tools/call` of `slow` have started (and wait on [`slow`](Self::slow)).
    pub slow_started: std::sync::atomic::AtomicUsize,
}

/// The test application: tools `echo {text}`, `slow` (waits for [`Gates::slow`]), `progress
/// {count}` (that many progress notifications, then the result), `ask` (legacy: an elicitation
/// request to the client on the call's stream, then its answer as text), `reconnect` (a progress
/// notification, then the server closes the stream's connection, then the result), `region
/// {region}` (its argument mirrored in the `Mcp-Param-Region` header), `announce` (a tools
/// list-changed notification, which belongs to no request). One more tool is callable but not
/// listed: `end_session` (legacy: answers, then the application ends the session, as a server may
/// at any time).
#[derive(Clone)]
pub struct TestApp {
    /// What the tools wait on.
    pub gates: Arc<Gates>,
    /// Sessions the application still holds (a closed one is removed).
    pub open: Arc<Mutex<usize>>,
    /// Modern requests cancelled by the client closing their stream.
    pub cancelled: Arc<std::sync::atomic::AtomicUsize>,
}

impl Default for TestApp {
    fn default() -> Self {
        TestApp {
            gates: Arc::new(Gates::default()),
            open: Arc::new(Mutex::new(0)),
            cancelled: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        }
    }
}

/// The input schema of tool `region`.
fn region_schema() -> Value {
    json!({"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}})
}

fn capabilities() -> JsonObject {
    json!({"tools": {"listChanged": true}, "logging": {}})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// What a tool's task sends back to the session's driver.
enum Done {
    Result(RequestId, Result<Value, ErrorObject>),
    Progress(RequestId, f64),
    Ask(RequestId, tokio::sync::oneshot::Sender<Value>),
    CloseStream(RequestId),
    Announce,
    EndSession,
}

/// Runs the tool of `request`; messages for the session go through `done`.
async fn run_tool(gates: Arc<Gates>, request: IncomingRequest, done: mpsc::UnboundedSender<Done>) {
    let params: Value = request
        .params
        .as_deref()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null);
    let id = request.id.clone();
    let result = match request.method.as_str() {
        "tools/list" => Ok(json!({"tools": [
            {"name": "echo", "inputSchema": {"type": "object"}},
            {"name": "slow", "inputSchema": {"type": "object"}},
            {"name": "progress", "inputSchema": {"type": "object"}},
            {"name": "ask", "inputSchema": {"type": "object"}},
            {"name": "reconnect", "inputSchema": {"type": "object"}},
            {"name": "region", "inputSchema": region_schema()},
            {"name": "announce", "inputSchema": {"type": "object"}},
        ]})),
        "tools/call" => {
            let args = &params["arguments"];
            match params["name"].as_str().unwrap_or_default() {
                "echo" => Ok(text(args["text"].as_str().unwrap_or_default())),
                "slow" => {
                    let notified = gates.slow.notified();
                    gates
                        .slow_started
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    notified.await;
                    Ok(text("slow done"))
                }
                "progress" => {
                    let count = args["count"].as_u64().unwrap_or(1);
                    for i in 1..=count {
                        let _ = done.send(Done::Progress(id.clone(), i as f64));
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    Ok(text(format!("{count} steps")))
                }
                "region" => Ok(text(args["region"].as_str().unwrap_or_default())),
                "end_session" => Ok(text("ending")),
                "announce" => {
                    let _ = done.send(Done::Announce);
                    Ok(text("announced"))
                }
                "announce_later" => {
                    // After the call's stream has ended: only a standalone stream can carry it.
                    let done = done.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let _ = done.send(Done::Announce);
                    });
                    Ok(text("later"))
                }
                "reconnect" => {
                    let _ = done.send(Done::Progress(id.clone(), 1.0));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let _ = done.send(Done::CloseStream(id.clone()));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok(text("reconnected"))
                }
                "ask" => {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let _ = done.send(Done::Ask(id.clone(), tx));
                    match rx.await {
                        Ok(answer) => Ok(text(answer.to_string())),
                        Err(_) => Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "no answer")),
                    }
                }
                other => Err(ErrorObject::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("unknown tool {other}"),
                )),
            }
        }
        other => Err(ErrorObject::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("no method {other}"),
        )),
    };
    let ends = request.method == "tools/call" && params["name"] == "end_session";
    let _ = done.send(Done::Result(id, result));
    if ends {
        // After the answer: the driver has routed it by the time it reads this.
        let _ = done.send(Done::EndSession);
    }
}

fn text(s: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": s.into()}]})
}

fn raw(value: &Value) -> Box<RawValue> {
    RawValue::from_string(value.to_string())
        .unwrap_or_else(|_| RawValue::from_string("{}".into()).unwrap_or_else(|_| unreachable!()))
}

/// Applies what the tool tasks sent to `session`.
fn apply(
    session: &mut ServerSession,
    done: Done,
    asks: &mut HashMap<RequestId, tokio::sync::oneshot::Sender<Value>>,
) {
    let now = Instant::now();
    match done {
        Done::Result(id, Ok(value)) => {
            let _ = session.respond(&id, raw(&value));
        }
        Done::Result(id, Err(error)) => {
            let _ = session.respond_error(&id, error);
        }
        Done::Progress(id, progress) => {
            let _ = session.notify_progress(&id, progress, None, None);
        }
        Done::CloseStream(_) | Done::EndSession => {}
        Done::Announce => {
            let _ = session.notify_list_changed(modelctx_session::ListKind::Tools);
        }
        Done::Ask(_, answer) => {
            let params = json!({"message": "name?", "requestedSchema": {"type": "object", "properties": {}}});
            let sent = session.send_request(
                now,
                "elicitation/create",
                params.as_object().cloned(),
                modelctx_session::RequestOptions::default(),
            );
            if let Ok(ask_id) = sent {
                // The request goes on the stream of the call it belongs to.
                asks.insert(ask_id, answer);
            }
        }
    }
}

/// What one legacy session's driver task is handed.
enum SessionInput {
    Incoming(Incoming),
    /// The client of the POST that carried this request went away.
    Abandoned(RequestId),
}

/// The input of one legacy session: forwarded to its driver task.
struct Handler {
    input: mpsc::UnboundedSender<Option<SessionInput>>,
}

impl LegacyHandler for Handler {
    fn input(&self, input: Incoming, _context: RequestContext) {
        let _ = self.input.send(Some(SessionInput::Incoming(input)));
    }

    fn abandoned(&self, id: RequestId) {
        let _ = self.input.send(Some(SessionInput::Abandoned(id)));
    }

    fn closed(&self, _reason: modelctx_http::server::Closed) {
        let _ = self.input.send(None);
    }
}

impl McpApp for TestApp {
    fn tool_param_headers(&self, tool: &str) -> Option<Arc<[modelctx_http::headers::ParamHeader]>> {
        let schema = region_schema();
        (tool == "region")
            .then(|| modelctx_http::headers::param_headers(schema.as_object()?).ok())
            .flatten()
            .map(Arc::from)
    }

    fn open_session(&self, transport: LegacySession) -> Arc<dyn LegacyHandler> {
        let (input, mut input_rx) = mpsc::unbounded_channel::<Option<SessionInput>>();
        let gates = self.gates.clone();
        let open = self.open.clone();
        *open.lock().unwrap() += 1;
        tokio::spawn(async move {
            let mut session = ServerSession::new(ServerConfig::new(
                "http-test-server",
                "1.0.0",
                capabilities(),
            ));
            let (done_tx, mut done_rx) = mpsc::unbounded_channel();
            let mut asks = HashMap::new();
            // The request each server-to-client request was made for.
            let mut current: Option<RequestId> = None;
            loop {
                tokio::select! {
                    input = input_rx.recv() => match input {
                        // As the server facade does: an abandoned POST's request is cancelled
                        // as if its stream closed.
                        Some(Some(SessionInput::Abandoned(id))) => {
                            session.stream_closed(&id);
                        }
                        Some(Some(SessionInput::Incoming(input))) => {
                            session.handle_incoming(Instant::now(), input);
                            // The transport's wire rules follow the version `initialize`
                            // settled on: told before the answer is written.
                            if let Some(version) = session.version() {
                                transport.set_version(version).await;
                            }
                        }
                        _ => break,
                    },
                    Some(done) = done_rx.recv() => {
                        if let Done::Ask(id, _) = &done {
                            current = Some(id.clone());
                        }
                        if let Done::CloseStream(id) = &done {
                            transport.close_stream(id).await;
                        }
                        if let Done::EndSession = &done {
                            transport.close().await;
                        }
                        apply(&mut session, done, &mut asks);
                    }
                }
                while let Some(event) = session.poll_event() {
                    match event {
                        Event::Request(request) => {
                            tokio::spawn(run_tool(gates.clone(), request, done_tx.clone()));
                        }
                        Event::Response { id, result, .. } => {
                            if let Some(answer) = asks.remove(&id) {
                                let value =
                                    serde_json::from_str(result.get()).unwrap_or(Value::Null);
                                let _ = answer.send(value);
                            }
                        }
                        // As the server facade does: the transport stops waiting for it.
                        Event::Cancelled { id, .. } => transport.release(&id).await,
                        _ => {}
                    }
                }
                while let Some(transmit) = session.poll_transmit() {
                    match transmit {
                        Transmit::Message { message, related } => {
                            // A request of ours made for a call goes on that call's stream.
                            let related = match (&message, &current) {
                                (Message::Request(_), Some(call)) => Some(call.clone()),
                                _ => related,
                            };
                            transport.send(message, related).await;
                        }
                        Transmit::Batch(messages) => transport.send_batch(messages).await,
                        Transmit::Cancel { notification, .. } => {
                            transport.send(notification.into(), None).await;
                        }
                        _ => {}
                    }
                }
                current = None;
            }
            *open.lock().unwrap() -= 1;
        });
        Arc::new(Handler { input })
    }

    fn modern(&self, request: ModernRequest) {
        let gates = self.gates.clone();
        let cancelled = self.cancelled.clone();
        tokio::spawn(async move {
            let ModernRequest { message, reply, .. } = request;
            let mut session = ServerSession::for_request(ServerConfig::new(
                "http-test-server",
                "1.0.0",
                capabilities(),
            ));
            let mut id = match &message {
                Message::Request(r) => Some(r.id.clone()),
                _ => None,
            };
            session.handle_message(Instant::now(), message);
            let (done_tx, mut done_rx) = mpsc::unbounded_channel();
            let mut asks = HashMap::new();
            loop {
                while let Some(event) = session.poll_event() {
                    if let Event::Request(request) = event {
                        id = Some(request.id.clone());
                        tokio::spawn(run_tool(gates.clone(), request, done_tx.clone()));
                    }
                }
                while let Some(transmit) = session.poll_transmit() {
                    let sent = match transmit {
                        Transmit::Message { message, .. } => reply.send(message).await,
                        Transmit::Refusal(error) => reply.refuse(error).await,
                        _ => Ok(()),
                    };
                    if sent.is_err() {
                        return;
                    }
                }
                if session.table_sizes().incoming == 0 {
                    return;
                }
                tokio::select! {
                    Some(done) = done_rx.recv() => apply(&mut session, done, &mut asks),
                    () = reply.cancelled().cancelled() => {
                        if let Some(id) = &id {
                            session.stream_closed(id);
                        }
                        cancelled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        return;
                    }
                }
            }
        });
    }
}

/// A raw HTTP/1.1 response: status, headers, and the connection to read its body from.
pub struct RawResponse {
    /// The status code.
    pub status: u16,
    /// The headers, in order.
    pub headers: Vec<(String, String)>,
    stream: TcpStream,
    buf: Vec<u8>,
    chunked: bool,
    remaining: Option<usize>,
    /// Decoded body bytes not yet consumed.
    body: Vec<u8>,
    ended: bool,
}

/// Every value of header `name` (compared case-insensitively) in `headers`, in order: e.g. all
/// the `WWW-Authenticate` challenges of a response.
pub fn header_values<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

impl RawResponse {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`, in order (see [`header_values`]).
    pub fn all(&self, name: &str) -> Vec<&str> {
        header_values(&self.headers, name)
    }

    /// Reads more body bytes; false at the end.
    async fn fill(&mut self) -> bool {
        if self.ended {
            return false;
        }
        loop {
            if self.chunked {
                // Decode as many chunks as are buffered.
                if let Some(pos) = find(&self.buf, b"\r\n") {
                    let size_line = String::from_utf8_lossy(&self.buf[..pos]).to_string();
                    let size = usize::from_str_radix(
                        size_line.trim().split(';').next().unwrap_or("0"),
                        16,
                    )
                    .unwrap_or(0);
                    if size == 0 {
                        self.ended = true;
                        return false;
                    }
                    if self.buf.len() >= pos + 2 + size + 2 {
                        self.body
                            .extend_from_slice(&self.buf[pos + 2..pos + 2 + size]);
                        self.buf.drain(..pos + 2 + size + 2);
                        return true;
                    }
                }
            } else if let Some(remaining) = self.remaining {
                if remaining == 0 {
                    self.ended = true;
                    return false;
                }
                if !self.buf.is_empty() {
                    let take = remaining.min(self.buf.len());
                    self.body.extend(self.buf.drain(..take));
                    self.remaining = Some(remaining - take);
                    return true;
                }
            } else if !self.buf.is_empty() {
                self.body.append(&mut self.buf);
                return true;
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => {
                    self.ended = true;
                    return false;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The whole body.
    pub async fn body(mut self) -> Vec<u8> {
        while self.fill().await {}
        self.body
    }

    /// The whole body as JSON.
    pub async fn json(self) -> Value {
        let body = self.body().await;
        serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&body)))
    }

    /// The next SSE event (comments skipped), or `None` at the end of the stream.
    pub async fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(pos) = find(&self.body, b"\n\n") {
                let block: Vec<u8> = self.body.drain(..pos + 2).collect();
                let text = String::from_utf8_lossy(&block).to_string();
                let mut event = SseEvent::default();
                let mut any = false;
                for line in text.lines() {
                    if line.starts_with(':') || line.is_empty() {
                        continue;
                    }
                    any = true;
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match field {
                        "id" => event.id = Some(value.to_owned()),
                        "retry" => event.retry = value.parse().ok(),
                        "event" => event.event = Some(value.to_owned()),
                        "data" => {
                            if !event.data.is_empty() {
                                event.data.push('\n');
                            }
                            event.data.push_str(value);
                        }
                        _ => {}
                    }
                }
                if any {
                    return Some(event);
                }
                continue;
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// The next event's data as JSON (events with empty data, priming events, are skipped).
    pub async fn next_message(&mut self) -> Option<(Option<String>, Value)> {
        loop {
            let event = self.next_event().await?;
            if event.data.is_empty() {
                continue;
            }
            let value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            return Some((event.id, value));
        }
    }
}

/// One server-sent event.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SseEvent {
    /// `id:`
    pub id: Option<String>,
    /// `retry:`
    pub retry: Option<u64>,
    /// `event:`
    pub event: Option<String>,
    /// The `data:` lines, joined.
    pub data: String,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Sends one raw HTTP/1.1 request (`Host` added unless given; `Content-Length` for the body)
/// and reads the response head.
pub async fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream.write_all(body).await.expect("write body");
    let mut buf = Vec::new();
    let end = loop {
        if let Some(pos) = find(&buf, b"\r\n\r\n") {
            break pos;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.expect("read head");
        assert!(n > 0, "connection closed before a response head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let rest = buf[end + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let find_header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let chunked = find_header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let remaining = find_header("content-length").and_then(|v| v.parse().ok());
    RawResponse {
        status,
        headers,
        stream,
        buf: rest,
        chunked,
        remaining,
        body: Vec::new(),
        ended: false,
    }
}

/// The headers of a legacy POST.
pub fn post_headers<'a>(
    session: Option<&'a str>,
    version: Option<&'a str>,
) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
    }
    if let Some(version) = version {
        headers.push(("MCP-Protocol-Version", version));
    }
    headers
}

/// Opens a legacy session at `version` (initialize and initialized); returns its id.
pub async fn open_session(addr: SocketAddr, version: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {"elicitation": {}},
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
    let id = response
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    let body = response.json().await;
    assert_eq!(body["result"]["protocolVersion"], version, "{body}");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = raw_request(
        addr,
        "POST",
        "/mcp",
        &post_headers(Some(&id), Some(version)),
        initialized.to_string().as_bytes(),
    )
    .await;
    assert_eq!(response.status, 202);
    id
}

/// A modern request's `_meta`.
pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    })
}

/// The peer of a request from this machine, for tests that drive the service without a socket
/// (with the loopback allow-lists, the service refuses a request whose peer it does not know).
pub const LOOPBACK_PEER: PeerAddr = PeerAddr(SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
    50_000,
));

/// Starts a server on 127.0.0.1, port 0, with `config` and a fresh [`TestApp`].
pub async fn start(
    config: modelctx_http::server::ServerConfig,
) -> (modelctx_http::server::RunningServer, TestApp) {
    let app = TestApp::default();
    let server = modelctx_http::server::serve("127.0.0.1:0", config, Arc::new(app.clone()))
        .await
        .expect("a server on 127.0.0.1");
    (server, app)
}

/// Fails the test instead of hanging it: `future` must finish within 20 s.
pub async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within 20 s"))
}

/// POSTs `body` to `/mcp` with `headers`.
pub async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &Value) -> RawResponse {
    within(
        "post",
        raw_request(addr, "POST", "/mcp", headers, body.to_string().as_bytes()),
    )
    .await
}

/// A `tools/call` request.
pub fn call(id: i64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
}

/// A 2026-07-28 `tools/call` request (with its `_meta`).
pub fn modern_call(id: i64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": modern_meta()}})
}

/// The headers of a 2026-07-28 POST: the version, `Mcp-Method` and, when given, `Mcp-Name`.
pub fn modern_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut headers = post_headers(None, Some("2026-07-28"));
    headers.push(("Mcp-Method", method));
    if let Some(name) = name {
        headers.push(("Mcp-Name", name));
    }
    headers
}
