//! A scripted fake server for the client's tests: the test owns the server's ends of
//! [`ClientBuilder::connect_channels`], reads what the client sends and writes JSON-RPC it
//! composes itself, step by step.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use modelctx_client::{Client, ClientBuilder, Error, model};
use modelctx_types::{Incoming, Message, Notification, Request, RequestId, decode_str};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

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

/// A modern `input_required` result: `requests` (an object of input requests; none when `None`)
/// and the `state` to send back.
pub(crate) fn input_required(requests: Option<Value>, state: &str) -> Value {
    let mut result = json!({"resultType": "input_required", "requestState": state});
    if let Some(requests) = requests {
        result["inputRequests"] = requests;
    }
    result
}

/// The text of the first content block of a `tools/call` result.
pub(crate) fn text(result: &model::CallToolResult) -> String {
    match result.content.first() {
        Some(model::ContentBlock::TextContent(t)) => t.text.clone(),
        other => panic!("not a text block: {other:?}"),
    }
}

/// A sampling handler's answer, from its 2025-11-25 JSON.
pub(crate) fn sampled(answer: Value) -> model::CreateMessageResult {
    serde_json::from_value::<modelctx_types::v2025_11_25::CreateMessageResult>(answer)
        .unwrap()
        .into()
}

/// The request a message is, if it is one.
fn request_in(message: &Message) -> Option<&Request> {
    match message {
        Message::Request(r) => Some(r),
        _ => None,
    }
}

/// The notification a message is, if it is one.
fn notification_in(message: &Message) -> Option<&Notification> {
    match message {
        Message::Notification(n) => Some(n),
        _ => None,
    }
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
        match tokio::time::timeout_at(deadline, self.from_client.recv()).await {
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

    /// Like [`take`](Self::take), for a message of `kind` that `wanted` accepts.
    async fn take_kind<T: Clone>(
        &mut self,
        what: &str,
        kind: fn(&Message) -> Option<&T>,
        wanted: impl Fn(&T) -> bool,
    ) -> T {
        let found = self.take(what, |m| kind(m).is_some_and(&wanted)).await;
        kind(&found).cloned().expect("the kind that was taken")
    }

    /// The next request of `method` the client sends.
    pub(crate) async fn expect_request(&mut self, method: &str) -> Request {
        let what = format!("a `{method}` request");
        self.take_kind(&what, request_in, |r| r.method == method)
            .await
    }

    /// The next notification of `method` the client sends.
    pub(crate) async fn expect_notification(&mut self, method: &str) -> Notification {
        let what = format!("a `{method}` notification");
        self.take_kind(&what, notification_in, |n| n.method == method)
            .await
    }

    /// The `notifications/cancelled` the client sends for request `id`, with its params.
    pub(crate) async fn expect_cancelled(&mut self, id: &RequestId) -> Value {
        let what = format!("notifications/cancelled for {id}");
        let wanted = id_json(id);
        let found = self
            .take_kind(&what, notification_in, |n| {
                n.method == "notifications/cancelled"
                    && notification_params(n)["requestId"] == wanted
            })
            .await;
        notification_params(&found)
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

    /// Fails the test if a request of `method` arrives within `wait`.
    ///
    /// Proves something only on a paused clock (`#[tokio::test(start_paused = true)]`): there
    /// the wait ends when every task of the runtime is idle and the virtual clock has moved on by
    /// `wait`, so whatever the client would send within `wait`, timers included, has been sent.
    /// On the wall clock it would pass whenever the machine is slow.
    ///
    /// # Panics
    ///
    /// Also when the wait took `wait` of real time: the clock was not paused.
    pub(crate) async fn expect_no_request(&mut self, wait: Duration, what: &str, method: &str) {
        let real = std::time::Instant::now();
        self.expect_none(wait, what, |m| {
            request_in(m).is_some_and(|r| r.method == method)
        })
        .await;
        assert!(
            real.elapsed() < wait,
            "expect_no_request proves nothing on the wall clock: pause it"
        );
    }

    /// Fails the test if a message that `unwanted` accepts arrives within `wait`.
    ///
    /// Like [`expect_no_request`](Self::expect_no_request), this proves something only on a
    /// paused clock, or where the test has made sure by other means that what it waits for
    /// would have come by then.
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
        let mut request = self
            .take_kind("server/discover or initialize", request_in, |r| {
                r.method == "server/discover" || r.method == "initialize"
            })
            .await;
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
                "serverInfo": server_info(),
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
                "_meta": {"io.modelcontextprotocol/serverInfo": server_info()},
            }),
        )
        .await;
    }

    // -- the scripts of a call ------------------------------------------------------------------

    /// Runs `call` while the server takes the next `method` request and plays `then` with it;
    /// returns the call's outcome and what `then` returned.
    pub(crate) async fn serve<T, U>(
        &mut self,
        method: &str,
        call: impl Future<Output = T>,
        then: impl AsyncFnOnce(&mut Fake, Request) -> U,
    ) -> (T, U) {
        let serve = async {
            let request = self.expect_request(method).await;
            then(self, request).await
        };
        tokio::join!(returns(method, call), serve)
    }

    /// Runs `call` while the server answers the next `method` request with `result`; returns
    /// the call's outcome and the request the server got.
    pub(crate) async fn answer<T>(
        &mut self,
        method: &str,
        result: Value,
        call: impl Future<Output = T>,
    ) -> (T, Request) {
        self.serve(method, call, async |fake, request| {
            fake.reply(&request.id, result).await;
            request
        })
        .await
    }

    /// Runs `call` while the server answers the next `method` request with a JSON-RPC error;
    /// returns the call's outcome.
    pub(crate) async fn answer_error<T>(
        &mut self,
        method: &str,
        code: i64,
        message: &str,
        call: impl Future<Output = T>,
    ) -> T {
        let then = async |fake: &mut Fake, request: Request| {
            fake.reply_error(&request.id, code, message).await;
        };
        self.serve(method, call, then).await.0
    }

    /// Runs `call` while the server answers the next `method` requests with `results`, one
    /// each (a call that asks again: pages, rounds); returns the call's outcome and the requests.
    pub(crate) async fn answer_each<T>(
        &mut self,
        method: &str,
        results: impl IntoIterator<Item = Value>,
        call: impl Future<Output = T>,
    ) -> (T, Vec<Request>) {
        let serve = async {
            let mut requests = Vec::new();
            for result in results {
                let request = self.expect_request(method).await;
                self.reply(&request.id, result).await;
                requests.push(request);
            }
            requests
        };
        tokio::join!(returns(method, call), serve)
    }

    /// `client.call_tool(name, ())` while the server answers it with `result`.
    pub(crate) async fn call(
        &mut self,
        client: &Client,
        name: &str,
        result: Value,
    ) -> Result<model::CallToolResult, Error> {
        self.answer("tools/call", result, client.call_tool(name, ()))
            .await
            .0
    }

    /// Checks that calls still work: tool `t`, answered with one text block `expected` (as
    /// `era` answers), returns that text.
    pub(crate) async fn check_call(&mut self, client: &Client, era: Era, expected: &str) {
        let result = self
            .call(client, "t", era.complete(text_result(expected)))
            .await;
        assert_eq!(text(&result.unwrap()), expected, "{era:?}");
    }

    /// `client.list_tools(None)` while the server answers it with `listing`, which the client
    /// accepts.
    pub(crate) async fn list_tools(
        &mut self,
        client: &Client,
        listing: Value,
    ) -> model::ListToolsResult {
        let (listed, _) = self
            .answer("tools/list", listing, client.list_tools(None))
            .await;
        listed.expect("the listing is accepted")
    }

    /// Sends the server's request and waits for the client's answer: its result, or its error
    /// object.
    pub(crate) async fn ask(
        &mut self,
        id: Value,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.request(id.clone(), method, params).await;
        self.expect_response(&id).await
    }

    // -- the modern listen stream ---------------------------------------------------------------

    /// Acknowledges the listen stream `id`, agreeing to `notifications`.
    pub(crate) async fn acknowledge(&mut self, id: &RequestId, notifications: Value) {
        self.notify(
            "notifications/subscriptions/acknowledged",
            json!({"_meta": {SUBSCRIPTION_ID_KEY: id}, "notifications": notifications}),
        )
        .await;
    }

    /// Acknowledges the listen stream `listen`, agreeing to all it asks for.
    pub(crate) async fn acknowledge_asked(&mut self, listen: &Request) {
        let asked = params(listen)["notifications"].clone();
        self.acknowledge(&listen.id, asked).await;
    }

    /// Takes the next `subscriptions/listen` request and acknowledges all it asks for.
    pub(crate) async fn acknowledge_listen(&mut self) -> Request {
        let listen = self.expect_request("subscriptions/listen").await;
        self.acknowledge_asked(&listen).await;
        listen
    }

    /// Sends notification `method` on the listen stream `stream` (its id in `_meta`).
    pub(crate) async fn notify_stream(
        &mut self,
        stream: &RequestId,
        method: &str,
        mut params: Value,
    ) {
        params["_meta"] = json!({SUBSCRIPTION_ID_KEY: stream});
        self.notify(method, params).await;
    }
}

/// The `serverInfo` of the fake server.
pub(crate) fn server_info() -> Value {
    json!({"name": "scripted", "version": "0.0.1"})
}

/// `call`'s output; fails the test if it takes longer than [`WAIT`] (on a paused clock, a call
/// that would never return fails at once instead of hanging the test).
pub(crate) async fn returns<T>(what: &str, call: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, call)
        .await
        .unwrap_or_else(|_| panic!("the call ({what}) never returned"))
}

/// Which era the fake server plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    Legacy,
    Modern,
}

impl Era {
    /// Both eras, for the tests that run in each.
    pub(crate) const BOTH: [Era; 2] = [Era::Legacy, Era::Modern];

    /// `result` (an object) as a server of this era sends it: a modern result is complete.
    pub(crate) fn complete(self, result: Value) -> Value {
        match self {
            Era::Legacy => result,
            Era::Modern => complete(result),
        }
    }

    /// `result` (an object) as a server of this era sends a list: a modern list is cacheable.
    pub(crate) fn cacheable(self, result: Value) -> Value {
        match self {
            Era::Legacy => result,
            Era::Modern => cacheable(result),
        }
    }
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
