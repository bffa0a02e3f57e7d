//! Drivers for the HTTP client tests: a client session over the HTTP transport, and scripted
//! raw HTTP/1.1 servers that misbehave on purpose.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modelctx_http::client::{ClientConfig, HttpTransport, Inbound, SendOptions};
use modelctx_http::headers::{ParamHeader, param_headers};
use modelctx_session::{
    ClientConfig as SessionConfig, ClientSession, Event, PeerInfo, RequestError, Transmit,
};
use modelctx_types::{JsonObject, Message, RequestId};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the client facade tells the transport of a message (`client/src/link.rs`): the
/// transport reads no method names.
pub fn roles(message: &Message, options: SendOptions) -> SendOptions {
    match message {
        Message::Request(r) if r.method == "initialize" => options.starts_session(),
        Message::Request(r) if r.method == "subscriptions/listen" => options.listen(),
        Message::Notification(n) if n.method == "notifications/initialized" => {
            options.opens_standalone()
        }
        _ => options,
    }
}

/// A client session carried by an [`HttpTransport`]: the smallest facade, for tests.
pub struct Driver {
    /// The protocol state.
    pub session: ClientSession,
    /// The transport.
    pub transport: HttpTransport,
    /// Everything the transport handed up that is not a message, in order, as text.
    pub notes: Vec<String>,
    /// Events of the session other than answers.
    pub events: Vec<Event>,
    answers: HashMap<RequestId, Result<Value, RequestError>>,
    /// What the client answers to the server's requests (elicitation and the like).
    pub answer_server: Value,
    /// The `x-mcp-header` parameters of the tools listed with [`request`](Self::request), which
    /// [`call_tool`](Self::call_tool) hands the transport (what the client facade does).
    pub param_headers: HashMap<String, Arc<[ParamHeader]>>,
    options: SendOptions,
}

impl Driver {
    /// A driver for `url`; call [`connect`](Self::connect).
    pub fn new(url: &str, session: SessionConfig, transport: ClientConfig) -> Driver {
        Driver {
            session: ClientSession::new(session),
            transport: HttpTransport::new(url, transport).expect("a valid URL"),
            notes: Vec::new(),
            events: Vec::new(),
            answers: HashMap::new(),
            answer_server: json!({"action": "accept", "content": {"answer": "yes"}}),
            param_headers: HashMap::new(),
            options: SendOptions::default(),
        }
    }

    /// A session config with elicitation declared.
    pub fn session_config() -> SessionConfig {
        let caps: JsonObject = json!({"elicitation": {}})
            .as_object()
            .cloned()
            .unwrap_or_default();
        SessionConfig::new("driver", "1.0.0", caps)
    }

    fn flush(&mut self) {
        // What the client facade does: the transport hears the version from the session.
        self.transport.set_version(self.session.version());
        while let Some(transmit) = self.session.poll_transmit() {
            let sent = match transmit {
                Transmit::Message { message, .. } => {
                    let options = roles(&message, self.options.clone());
                    self.transport.send_with(message, options)
                }
                Transmit::Batch(messages) => self.transport.send_batch(messages),
                // What the client facade does: the request's stream goes (the modern
                // cancellation), and a legacy server is told with the notification.
                Transmit::Cancel {
                    request_id,
                    notification,
                    era,
                } => {
                    self.transport.cancel(&request_id);
                    if era == modelctx_session::Era::Legacy {
                        let message = Message::from(notification);
                        let options = roles(&message, self.options.clone());
                        self.transport.send_with(message, options)
                    } else {
                        Ok(())
                    }
                }
                other => panic!("unexpected transmit {other:?}"),
            };
            if let Err(e) = sent {
                self.notes.push(format!("send failed: {e}"));
            }
        }
        while let Some(event) = self.session.poll_event() {
            match event {
                Event::Response { id, result, .. } => {
                    let value = serde_json::from_str(result.get()).unwrap_or(Value::Null);
                    self.answers.insert(id, Ok(value));
                }
                Event::Failed { id, error, .. } => {
                    self.answers.insert(id, Err(error));
                }
                Event::Request(request) => {
                    let result = serde_json::value::to_raw_value(&self.answer_server).unwrap();
                    let _ = self.session.respond(&request.id, result);
                    self.events.push(Event::Request(request));
                }
                other => self.events.push(other),
            }
        }
        // Answers to the server's requests were queued while draining events.
        while let Some(Transmit::Message { message, .. }) = self.session.poll_transmit() {
            if let Err(e) = self.transport.send(message) {
                self.notes.push(format!("send failed: {e}"));
            }
        }
    }

    /// Waits for one thing from the transport or the session's timer, and acts on it. False
    /// once the transport is done.
    pub async fn step(&mut self) -> bool {
        self.flush();
        let deadline = self.session.poll_timeout();
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let inbound = tokio::select! {
            inbound = self.transport.recv() => inbound,
            () = sleep => {
                self.session.handle_timeout(Instant::now());
                self.flush();
                return true;
            }
        };
        let now = Instant::now();
        let Some(inbound) = inbound else {
            return false;
        };
        match inbound {
            Inbound::Message(incoming) => self.session.handle_incoming(now, incoming),
            Inbound::RequestFailed { id, error } => {
                self.notes.push(format!("request {id} failed: {error}"));
                self.session.request_failed(now, &id, error.to_string());
            }
            Inbound::SessionEnded => {
                self.notes.push("session ended".into());
                self.session
                    .transport_closed("the server ended the HTTP session");
            }
            Inbound::Closed(error) => {
                self.notes.push(format!("closed: {error}"));
                self.session.transport_closed(error.to_string());
            }
            other => self.notes.push(format!("{other:?}")),
        }
        self.flush();
        true
    }

    /// Connects; the server's info, or the reason the session closed.
    pub async fn connect(&mut self) -> Result<PeerInfo, String> {
        self.session.connect(Instant::now()).expect("connect once");
        loop {
            if let Some(peer) = self.session.peer() {
                return Ok(peer.clone());
            }
            if self.session.is_closed() {
                return Err(format!("closed: {:?}; notes {:?}", self.events, self.notes));
            }
            if !self.step().await {
                return Err("the transport ended".into());
            }
        }
    }

    /// Starts a request; its id.
    pub fn start(&mut self, method: &str, params: Value) -> RequestId {
        let options = modelctx_session::RequestOptions::default();
        self.start_with(method, params, options)
    }

    /// Starts a request with options (say, asking for progress); its id.
    pub fn start_with(
        &mut self,
        method: &str,
        params: Value,
        options: modelctx_session::RequestOptions,
    ) -> RequestId {
        let params = params.as_object().cloned();
        let id = self
            .session
            .send_request_with(Instant::now(), method, params, options)
            .expect("the session takes the request");
        self.flush();
        id
    }

    /// Starts a request that is re-issued on a broken stream even if it is a `tools/call`.
    pub fn start_reissued(&mut self, method: &str, params: Value) -> RequestId {
        self.options = SendOptions::default().reissue(true);
        let id = self.start(method, params);
        self.options = SendOptions::default();
        id
    }

    /// Waits for the answer to `id`.
    pub async fn answer(&mut self, id: &RequestId) -> Result<Value, RequestError> {
        loop {
            if let Some(answer) = self.answers.remove(id) {
                return answer;
            }
            if !self.step().await {
                panic!("the transport ended before answer {id}: {:?}", self.notes);
            }
        }
    }

    /// A request and its answer. The `x-mcp-header` parameters of the tools a `tools/list`
    /// answer names are remembered.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, RequestError> {
        let id = self.start(method, params);
        let answer = self.answer(&id).await;
        if method == "tools/list"
            && let Ok(result) = &answer
        {
            for tool in result["tools"].as_array().into_iter().flatten() {
                let (Some(name), Some(schema)) =
                    (tool["name"].as_str(), tool["inputSchema"].as_object())
                else {
                    continue;
                };
                if let Ok(params) = param_headers(schema) {
                    self.param_headers.insert(name.to_owned(), params.into());
                }
            }
        }
        answer
    }

    /// Calls tool `name` with the `Mcp-Param-*` headers of its listed `x-mcp-header`
    /// parameters, and waits for its answer (at most 20 s).
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> Result<Value, RequestError> {
        let params = json!({"name": name, "arguments": arguments});
        if let Some(headers) = self.param_headers.get(name) {
            self.options = SendOptions::default().param_headers(headers.clone());
        }
        let id = self.start("tools/call", params);
        self.options = SendOptions::default();
        crate::http::within(name, self.answer(&id)).await
    }

    /// Steps until `done` holds of the notes.
    pub async fn until(&mut self, done: impl Fn(&[String]) -> bool) {
        while !done(&self.notes) {
            if !self.step().await {
                panic!("the transport ended: {:?}", self.notes);
            }
        }
    }

    /// Sends what the session queued and handles what comes within 200 ms.
    pub async fn step_until_idle(&mut self) {
        self.flush();
        while let Ok(true) = tokio::time::timeout(Duration::from_millis(200), self.step()).await {}
    }

    /// A new session on the same transport (after [`Inbound::SessionEnded`]), connected.
    pub async fn reconnect(&mut self, config: SessionConfig) -> Result<PeerInfo, String> {
        self.session = ClientSession::new(config);
        self.connect().await
    }
}

/// The text of the first content block of a tool result.
pub fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Scripted servers
// ---------------------------------------------------------------------------------------------

/// A request as a scripted server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `POST`, `GET`, `DELETE`.
    pub method: String,
    /// The request target.
    pub path: String,
    /// Header names in lowercase.
    pub headers: Vec<(String, String)>,
    /// The body, parsed when JSON.
    pub body: Value,
    /// When the request head was read.
    pub at: Instant,
}

impl Seen {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC method of the body.
    pub fn rpc_method(&self) -> Option<&str> {
        self.body["method"].as_str()
    }
}

/// The connection a script writes its response on; dropping it closes the connection.
pub struct Reply {
    stream: TcpStream,
}

impl Reply {
    /// Writes raw bytes and flushes.
    pub async fn raw(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
        let _ = self.stream.flush().await;
    }

    /// Writes an SSE comment: false once the client has closed the connection (a write fails;
    /// the first write after the close may still succeed).
    pub async fn alive(&mut self) -> bool {
        self.stream.write_all(b": alive\n\n").await.is_ok() && self.stream.flush().await.is_ok()
    }

    /// A complete response with a body and `Connection: close`.
    pub async fn full(&mut self, status: u16, headers: &[(&str, &str)], body: &str) {
        let mut head = format!(
            "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        self.raw(head.as_bytes()).await;
        self.raw(body.as_bytes()).await;
    }

    /// A JSON response.
    pub async fn json(&mut self, status: u16, extra: &[(&str, &str)], body: &Value) {
        let mut headers = vec![("content-type", "application/json")];
        headers.extend_from_slice(extra);
        self.full(status, &headers, &body.to_string()).await;
    }

    /// The head of an event stream whose body runs until the connection closes.
    pub async fn sse_head(&mut self, extra: &[(&str, &str)]) {
        let mut head = String::from(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n",
        );
        for (name, value) in extra {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        self.raw(head.as_bytes()).await;
    }
}

type Script = Arc<dyn Fn(Seen, Reply) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A raw HTTP/1.1 server whose every request is answered by a script; it records what came.
pub struct ScriptServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Every request so far.
    pub seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptServer {
    /// Starts it on 127.0.0.1 with `script` answering every request (one per connection).
    pub async fn start<F, Fut>(script: F) -> ScriptServer
    where
        F: Fn(Seen, Reply) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let script: Script = Arc::new(move |seen, reply| Box::pin(script(seen, reply)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let script = script.clone();
                let record = record.clone();
                tokio::spawn(async move {
                    let _ = stream.set_nodelay(true);
                    if let Some((request, stream)) = read_request(stream).await {
                        record.lock().unwrap().push(request.clone());
                        script(request, Reply { stream }).await;
                    }
                });
            }
        });
        ScriptServer { addr, seen, task }
    }

    /// The endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one request head and its `content-length` body.
async fn read_request(mut stream: TcpStream) -> Option<(Seen, TcpStream)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let at = Instant::now();
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Some((
        Seen {
            method,
            path,
            headers,
            body,
            at,
        },
        stream,
    ))
}

/// The `initialize` result of a scripted legacy server.
pub fn initialize_result(id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "script", "version": "1"},
    }})
}

/// A tool result with one text block.
pub fn text_result(id: &Value, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}})
}

/// One SSE event carrying a JSON message.
pub fn sse_message(id: Option<&str>, message: &Value) -> String {
    match id {
        Some(id) => format!("id: {id}\ndata: {message}\n\n"),
        None => format!("data: {message}\n\n"),
    }
}

/// What every scripted legacy server does alike: `initialize` answered (with `session` as the
/// session id, when given), a POST without an id (a notification or a response) accepted with
/// 202, a GET without `Last-Event-ID` (the standalone stream) refused with 405. True when it
/// answered.
pub async fn legacy_basics(seen: &Seen, reply: &mut Reply, session: Option<&str>) -> bool {
    let session: Vec<(&str, &str)> = session.map(|s| ("mcp-session-id", s)).into_iter().collect();
    match (seen.method.as_str(), seen.rpc_method()) {
        ("POST", Some("initialize")) => {
            reply
                .json(200, &session, &initialize_result(&seen.body["id"]))
                .await;
        }
        ("POST", _) if seen.body.get("id").is_none() => reply.full(202, &[], "").await,
        ("GET", _) if seen.header("last-event-id").is_none() => reply.full(405, &[], "").await,
        _ => return false,
    }
    true
}

/// A session config pinned to the legacy era.
pub fn legacy_config() -> SessionConfig {
    let mut config = Driver::session_config();
    config.era = modelctx_session::EraChoice::Legacy;
    config
}

/// Waits (up to 20 s) until `done` holds, looking every 5 ms: for what ends on its own, such as
/// a transport's tasks once their request has failed.
///
/// # Panics
///
/// When `done` still does not hold after 20 s, naming `what`.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    crate::http::within(what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A front for `backend` on 127.0.0.1 (TLS when given an acceptor) that counts the
/// connections made through it.
pub async fn front(
    backend: std::net::SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counter = count.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let tls = tls.clone();
            tokio::spawn(async move {
                let Ok(mut back) = tokio::net::TcpStream::connect(backend).await else {
                    return;
                };
                match tls {
                    Some(acceptor) => {
                        if let Ok(mut tls) = acceptor.accept(tcp).await {
                            let _ = tokio::io::copy_bidirectional(&mut tls, &mut back).await;
                        }
                    }
                    None => {
                        let mut tcp = tcp;
                        let _ = tokio::io::copy_bidirectional(&mut tcp, &mut back).await;
                    }
                }
            });
        }
    });
    (addr, count)
}
