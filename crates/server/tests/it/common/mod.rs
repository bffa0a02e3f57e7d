//! A client session over an in-memory connection, for the facade's tests.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use modelctx_server::{Frame, InMemory, Server};
use modelctx_session::{
    ClientConfig, ClientSession, EraChoice, Event, ProtocolVersion, RequestError, RequestOptions,
    Transmit,
};
use modelctx_types::{Incoming, RequestId};
use serde_json::{Value, json};

/// A client connected to a server in memory.
pub(crate) struct Client {
    pub(crate) session: ClientSession,
    pub(crate) conn: InMemory,
    pub(crate) events: Vec<Event>,
    answers: HashMap<RequestId, Result<Value, RequestError>>,
}

/// Fails the test instead of hanging it.
pub(crate) async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within 20 s"))
}

/// The eras the tests run in: modern (probe) and each legacy version.
pub(crate) fn eras() -> Vec<(&'static str, ClientConfig)> {
    let mut out = Vec::new();
    let caps = json!({"elicitation": {}, "sampling": {}, "roots": {}});
    let caps = caps.as_object().cloned().unwrap();
    out.push(("2026-07-28", ClientConfig::new("test", "1", caps.clone())));
    for version in [
        ProtocolVersion::V2024_11_05,
        ProtocolVersion::V2025_03_26,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_11_25,
    ] {
        let mut config = ClientConfig::new("test", "1", caps.clone());
        config.versions = vec![version];
        config.era = EraChoice::Legacy;
        out.push((version.as_str(), config));
    }
    out
}

impl Client {
    /// Connects to `server` with `config`.
    pub(crate) async fn connect(server: &Server, config: ClientConfig) -> Client {
        let mut client = Client {
            session: ClientSession::new(config),
            conn: server.in_memory(),
            events: Vec::new(),
            answers: HashMap::new(),
        };
        client.session.connect(Instant::now()).unwrap();
        within("connect", async {
            while client.session.peer().is_none() {
                assert!(!client.session.is_closed(), "closed: {:?}", client.events);
                client.step().await;
            }
        })
        .await;
        // `notifications/initialized` goes out before anything else happens.
        client.flush().await;
        client
    }

    pub(crate) fn version(&self) -> ProtocolVersion {
        self.session.version().unwrap()
    }

    async fn flush(&mut self) {
        while let Some(transmit) = self.session.poll_transmit() {
            let message = match transmit {
                Transmit::Message { message, .. } => message,
                Transmit::Cancel { notification, .. } => notification.into(),
                other => panic!("unexpected {other:?}"),
            };
            self.conn.send(message).await;
        }
        while let Some(event) = self.session.poll_event() {
            match event {
                Event::Response { id, result, .. } => {
                    self.answers
                        .insert(id, Ok(serde_json::from_str(result.get()).unwrap()));
                }
                Event::Failed { id, error, .. } => {
                    self.answers.insert(id, Err(error));
                }
                other => self.events.push(other),
            }
        }
    }

    /// Handles one frame from the server (or a timer).
    pub(crate) async fn step(&mut self) {
        self.flush().await;
        let frame = tokio::select! {
            frame = self.conn.recv() => frame,
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                self.session.handle_timeout(Instant::now());
                self.flush().await;
                return;
            }
        };
        let now = Instant::now();
        match frame {
            Some(Frame::Single(message)) => self.session.handle_message(now, message),
            Some(Frame::Batch(messages)) => self
                .session
                .handle_incoming(now, Incoming::Batch(messages.into_iter().map(Ok).collect())),
            Some(_) => {}
            None => self.session.transport_closed("the server went away"),
        }
        self.flush().await;
    }

    pub(crate) async fn start(&mut self, method: &str, params: Value) -> RequestId {
        self.start_with(method, params, RequestOptions::default())
            .await
    }

    pub(crate) async fn start_with(
        &mut self,
        method: &str,
        params: Value,
        options: RequestOptions,
    ) -> RequestId {
        let id = self
            .session
            .send_request_with(Instant::now(), method, params.as_object().cloned(), options)
            .unwrap();
        self.flush().await;
        id
    }

    pub(crate) async fn answer(&mut self, id: &RequestId) -> Result<Value, RequestError> {
        within("answer", async {
            loop {
                if let Some(answer) = self.answers.remove(id) {
                    return answer;
                }
                self.step().await;
            }
        })
        .await
    }

    pub(crate) async fn request(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<Value, RequestError> {
        let id = self.start(method, params).await;
        self.answer(&id).await
    }

    pub(crate) async fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
            .unwrap_or_else(|e| panic!("tools/call {name}: {e}"))
    }

    /// Steps until `done` holds of the events.
    pub(crate) async fn until(&mut self, what: &str, done: impl Fn(&[Event]) -> bool) {
        within(what, async {
            while !done(&self.events) {
                self.step().await;
            }
        })
        .await;
    }
}

/// The text of a tool result's first block.
pub(crate) fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// The JSON-RPC error code of a failed request.
pub(crate) fn code(answer: &Result<Value, RequestError>) -> i64 {
    match answer {
        Err(RequestError::Remote(e)) => e.code.0,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

impl Client {
    /// Answers every request of the server's with `answer` (legacy), until `id` is answered.
    pub(crate) async fn answer_asking(
        &mut self,
        id: &RequestId,
        answer: Value,
    ) -> Result<Value, RequestError> {
        within("answer", async {
            loop {
                if let Some(result) = self.answers.remove(id) {
                    return result;
                }
                let asked: Vec<RequestId> = self
                    .events
                    .iter()
                    .filter_map(|e| match e {
                        Event::Request(r) => Some(r.id.clone()),
                        _ => None,
                    })
                    .collect();
                self.events.retain(|e| !matches!(e, Event::Request(_)));
                for ask in asked {
                    let raw = serde_json::value::to_raw_value(&answer).unwrap();
                    self.session.respond(&ask, raw).unwrap();
                }
                self.step().await;
            }
        })
        .await
    }

    /// Runs a modern multi round-trip request to its end, answering each input request with
    /// `answer`; returns the final result and the number of rounds.
    pub(crate) async fn round_trips(
        &mut self,
        method: &str,
        params: Value,
        answer: Value,
    ) -> (Value, usize) {
        let mut params = params;
        for round in 1..=8 {
            let result = self.request(method, params.clone()).await.unwrap();
            if result["resultType"] != "input_required" {
                return (result, round);
            }
            let mut responses = serde_json::Map::new();
            for key in result["inputRequests"].as_object().unwrap().keys() {
                responses.insert(key.clone(), answer.clone());
            }
            params["inputResponses"] = Value::Object(responses);
            params["requestState"] = result["requestState"].clone();
        }
        panic!("more than 8 rounds");
    }
}

/// A backend's -32021 naming an extension (a name with dots), with a message and data of its
/// own: what a gateway passes on as it came.
pub(crate) fn missing_extension() -> modelctx_server::ErrorObject {
    modelctx_server::ErrorObject::new(
        modelctx_server::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        "the backend wants its extension",
    )
    .with_data(&json!({"requiredCapabilities": {"extensions": {"io.example/ext": {}}}}))
    .unwrap()
}
