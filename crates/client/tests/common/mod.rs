//! A scripted fake server for the client's tests: the test owns the server's ends of
//! [`ClientBuilder::connect_channels`], reads what the client sends and writes JSON-RPC it
//! composes itself, step by step.

#![allow(dead_code)] // each test binary uses part of it

use std::collections::VecDeque;
use std::future::Future;
use std::time::{Duration, Instant};

use modelctx_client::{Client, ClientBuilder};
use modelctx_types::{Incoming, Message, Notification, Request, RequestId, decode_str};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// How long the fake server waits for a message it expects before failing the test.
pub(crate) const WAIT: Duration = Duration::from_secs(5);

/// The modern version, as the client speaks it.
pub(crate) const MODERN: &str = "2026-07-28";
/// The `_meta` keys of the modern era.
pub(crate) const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const SUBSCRIPTION_ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";

/// Capabilities of a server with every feature.
pub(crate) fn full_capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "prompts": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": true},
        "logging": {},
        "completions": {},
    })
}

/// The server's side of a connection.
pub(crate) struct Fake {
    from_client: mpsc::Receiver<Incoming>,
    to_client: Option<mpsc::Sender<Incoming>>,
    /// Messages received but not yet taken by an `expect_*`.
    backlog: VecDeque<Message>,
    /// The client's channel closed.
    ended: bool,
}

/// A fake server and the ends to give `connect_channels`.
pub(crate) fn pair() -> (Fake, mpsc::Sender<Incoming>, mpsc::Receiver<Incoming>) {
    let (to_server, from_client) = mpsc::channel(256);
    let (to_client, from_server) = mpsc::channel(256);
    let fake = Fake {
        from_client,
        to_client: Some(to_client),
        backlog: VecDeque::new(),
        ended: false,
    };
    (fake, to_server, from_server)
}

/// The params of a request (`{}` when absent).
pub(crate) fn params(request: &Request) -> Value {
    request
        .params
        .as_deref()
        .map_or(json!({}), |p| serde_json::from_str(p.get()).unwrap())
}

/// The params of a notification (`null` when absent).
pub(crate) fn notification_params(notification: &Notification) -> Value {
    notification
        .params
        .as_deref()
        .map_or(Value::Null, |p| serde_json::from_str(p.get()).unwrap())
}

/// A request id as JSON.
pub(crate) fn id_json(id: &RequestId) -> Value {
    serde_json::to_value(id).unwrap()
}

/// `value` (an object) with `resultType: "complete"`: a modern result.
pub(crate) fn complete(mut value: Value) -> Value {
    value["resultType"] = json!("complete");
    value
}

/// `value` (an object) as a modern cacheable result: `resultType`, `ttlMs` and `cacheScope`.
pub(crate) fn cacheable(mut value: Value) -> Value {
    value["resultType"] = json!("complete");
    value["ttlMs"] = json!(0);
    value["cacheScope"] = json!("private");
    value
}

/// A `tools/call` result with one text block.
pub(crate) fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

impl Fake {
    fn absorb(&mut self, incoming: Incoming) {
        match incoming {
            Incoming::Single(message) => self.backlog.push_back(message),
            Incoming::Batch(messages) => self.backlog.extend(messages.into_iter().flatten()),
            other => panic!("unexpected input {other:?}"),
        }
    }

    /// Receives one input into the backlog before `deadline`; false on timeout or when the
    /// client's channel closed.
    async fn receive_until(&mut self, deadline: Instant) -> bool {
        if self.ended {
            return false;
        }
        match tokio::time::timeout_at(deadline.into(), self.from_client.recv()).await {
            Ok(Some(incoming)) => {
                self.absorb(incoming);
                true
            }
            Ok(None) => {
                self.ended = true;
                false
            }
            Err(_) => false,
        }
    }

    /// The first message (of the backlog, then of what comes) that `wanted` accepts, within
    /// `wait`; other messages stay in the backlog.
    pub(crate) async fn find(
        &mut self,
        wait: Duration,
        wanted: impl Fn(&Message) -> bool,
    ) -> Option<Message> {
        let deadline = Instant::now() + wait;
        let mut scanned = 0;
        loop {
            while scanned < self.backlog.len() {
                if wanted(&self.backlog[scanned]) {
                    return self.backlog.remove(scanned);
                }
                scanned += 1;
            }
            if !self.receive_until(deadline).await {
                return None;
            }
        }
    }

    /// Like [`find`](Self::find), failing the test after [`WAIT`].
    pub(crate) async fn take(&mut self, what: &str, wanted: impl Fn(&Message) -> bool) -> Message {
        match self.find(WAIT, wanted).await {
            Some(message) => message,
            None => panic!(
                "the fake server never got {what}; it has {:?}{}",
                self.backlog,
                if self.ended {
                    " (the client's channel closed)"
                } else {
                    ""
                }
            ),
        }
    }

    /// The next request of `method` the client sends.
    pub(crate) async fn expect_request(&mut self, method: &str) -> Request {
        let found = self
            .take(
                &format!("a `{method}` request"),
                |m| matches!(m, Message::Request(r) if r.method == method),
            )
            .await;
        match found {
            Message::Request(r) => r,
            _ => unreachable!(),
        }
    }

    /// The next notification of `method` the client sends.
    pub(crate) async fn expect_notification(&mut self, method: &str) -> Notification {
        let found = self
            .take(
                &format!("a `{method}` notification"),
                |m| matches!(m, Message::Notification(n) if n.method == method),
            )
            .await;
        match found {
            Message::Notification(n) => n,
            _ => unreachable!(),
        }
    }

    /// The `notifications/cancelled` the client sends for request `id`, with its params.
    pub(crate) async fn expect_cancelled(&mut self, id: &RequestId) -> Value {
        let wanted = id_json(id);
        let found = self
            .take(&format!("notifications/cancelled for {id}"), |m| {
                matches!(m, Message::Notification(n)
                    if n.method == "notifications/cancelled"
                        && notification_params(n)["requestId"] == wanted)
            })
            .await;
        match found {
            Message::Notification(n) => notification_params(&n),
            _ => unreachable!(),
        }
    }

    /// The client's answer to the server's request `id`: its result, or its error object.
    pub(crate) async fn expect_response(&mut self, id: &Value) -> Result<Value, Value> {
        let found = self
            .take(&format!("the answer to request {id}"), |m| match m {
                Message::Response(r) => id_json(&r.id) == *id,
                Message::Error(e) => e.id.as_ref().is_some_and(|i| id_json(i) == *id),
                _ => false,
            })
            .await;
        match found {
            Message::Response(r) => Ok(serde_json::from_str(r.result.get()).unwrap()),
            Message::Error(e) => Err(serde_json::to_value(&e.error).unwrap()),
            _ => unreachable!(),
        }
    }

    /// Fails the test if a message that `unwanted` accepts arrives within `wait`.
    pub(crate) async fn expect_none(
        &mut self,
        wait: Duration,
        what: &str,
        unwanted: impl Fn(&Message) -> bool,
    ) {
        if let Some(message) = self.find(wait, unwanted).await {
            panic!("the fake server got {what}: {message:?}");
        }
    }

    /// Waits for the client to close its side of the transport (what it sends meanwhile stays in
    /// the backlog).
    pub(crate) async fn expect_end(&mut self) {
        let deadline = Instant::now() + WAIT;
        while !self.ended {
            if !self.receive_until(deadline).await && !self.ended {
                panic!("the client's side of the transport stayed open");
            }
        }
    }

    /// Forgets what was received and not taken.
    pub(crate) fn clear(&mut self) {
        self.backlog.clear();
    }

    /// Sends a JSON text to the client as it is.
    pub(crate) async fn send_text(&mut self, text: &str) {
        let incoming = decode_str(text).unwrap_or_else(|e| panic!("not JSON-RPC: {e}: {text}"));
        if let Some(tx) = &self.to_client {
            // The client may be gone (tests of the end of a connection): nothing to do then.
            let _ = tx.send(incoming).await;
        }
    }

    /// Sends a JSON text to the client if it decodes as JSON-RPC; false if it does not.
    pub(crate) async fn try_send_text(&mut self, text: &str) -> bool {
        let Ok(incoming) = decode_str(text) else {
            return false;
        };
        if let Some(tx) = &self.to_client {
            let _ = tx.send(incoming).await;
        }
        true
    }

    /// Sends a JSON-RPC message (the `jsonrpc` member is added).
    pub(crate) async fn send(&mut self, mut message: Value) {
        message["jsonrpc"] = json!("2.0");
        self.send_text(&message.to_string()).await;
    }

    /// Answers request `id` with `result`.
    pub(crate) async fn reply(&mut self, id: &RequestId, result: Value) {
        self.send(json!({"id": id, "result": result})).await;
    }

    /// Answers request `id` with a JSON-RPC error.
    pub(crate) async fn reply_error(&mut self, id: &RequestId, code: i64, message: &str) {
        self.send(json!({"id": id, "error": {"code": code, "message": message}}))
            .await;
    }

    /// Sends a notification.
    pub(crate) async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"method": method, "params": params})).await;
    }

    /// Sends a request of the server's.
    pub(crate) async fn request(&mut self, id: Value, method: &str, params: Value) {
        self.send(json!({"id": id, "method": method, "params": params}))
            .await;
    }

    /// Closes the server's side of the transport: the client sees the connection end.
    pub(crate) fn close(&mut self) {
        self.to_client = None;
    }

    // -- the handshakes -------------------------------------------------------------------------

    /// Plays a legacy server: refuses the probe, if the client sends one, with -32601, then
    /// answers `initialize` with the version the client asked for.
    pub(crate) async fn legacy_handshake(&mut self, capabilities: Value) {
        let first = self
            .take("server/discover or initialize", |m| {
                matches!(m, Message::Request(r)
                    if r.method == "server/discover" || r.method == "initialize")
            })
            .await;
        let Message::Request(mut request) = first else {
            unreachable!()
        };
        if request.method == "server/discover" {
            self.reply_error(&request.id, -32601, "Method not found: server/discover")
                .await;
            request = self.expect_request("initialize").await;
        }
        let asked = params(&request)["protocolVersion"].clone();
        self.reply(
            &request.id,
            json!({
                "protocolVersion": asked,
                "capabilities": capabilities,
                "serverInfo": {"name": "scripted", "version": "0.0.1"},
            }),
        )
        .await;
        self.expect_notification("notifications/initialized").await;
    }

    /// Plays a modern server: answers `server/discover` with a complete 2026-07-28 result.
    pub(crate) async fn modern_handshake(&mut self, capabilities: Value) {
        let request = self.expect_request("server/discover").await;
        assert_eq!(
            params(&request)["_meta"][PROTOCOL_VERSION_KEY],
            json!(MODERN),
            "the probe names the version"
        );
        self.reply(
            &request.id,
            json!({
                "resultType": "complete",
                "supportedVersions": [MODERN],
                "capabilities": capabilities,
                "ttlMs": 60000,
                "cacheScope": "public",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "scripted", "version": "0.0.1"}},
            }),
        )
        .await;
    }

    /// Runs `call` while the server answers the next `method` request with `result`; returns
    /// the call's outcome and the request the server got.
    pub(crate) async fn answer<T>(
        &mut self,
        method: &str,
        result: Value,
        call: impl Future<Output = T>,
    ) -> (T, Request) {
        let serve = async {
            let request = self.expect_request(method).await;
            self.reply(&request.id, result).await;
            request
        };
        tokio::join!(call, serve)
    }
}

/// Which era the fake server plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    Legacy,
    Modern,
}

/// Connects `builder` to a fake server of `era` that declares `capabilities`.
pub(crate) async fn connect(
    era: Era,
    builder: ClientBuilder,
    capabilities: Value,
) -> (Client, Fake) {
    let (mut fake, to_server, from_server) = pair();
    let connecting = builder.connect_channels(to_server, from_server);
    let handshake = async {
        match era {
            Era::Legacy => fake.legacy_handshake(capabilities).await,
            Era::Modern => fake.modern_handshake(capabilities).await,
        }
    };
    let (client, ()) = tokio::time::timeout(WAIT, async { tokio::join!(connecting, handshake) })
        .await
        .expect("the handshake ended in time");
    (client.expect("connected"), fake)
}

/// A client with no handlers.
pub(crate) fn builder() -> ClientBuilder {
    Client::builder("scripted-tests", "1.0.0")
}
