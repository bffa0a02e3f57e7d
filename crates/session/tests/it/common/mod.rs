//! A client and a server session joined in memory, on a virtual clock.

use std::time::{Duration, Instant};

use modelctx_session::{
    ClientConfig, ClientSession, EraChoice, Event, ProtocolVersion, ServerConfig, ServerSession,
    Transmit,
};
use modelctx_types::{JsonObject, Message};
use serde_json::{Value, json};

pub(crate) fn obj(v: Value) -> JsonObject {
    v.as_object().cloned().expect("an object")
}

pub(crate) fn raw(v: Value) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(&v).unwrap()
}

/// Every server capability, list changes and subscriptions included.
pub(crate) fn full_server_caps() -> JsonObject {
    obj(json!({
        "tools": {"listChanged": true},
        "prompts": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": true},
        "logging": {},
        "completions": {},
    }))
}

/// Every client capability.
pub(crate) fn full_client_caps() -> JsonObject {
    obj(json!({
        "sampling": {},
        "roots": {"listChanged": true},
        "elicitation": {"form": {}, "url": {}},
    }))
}

/// A message as the wire carries it.
pub(crate) fn wire(message: &Message) -> Value {
    serde_json::to_value(message).unwrap()
}

fn transmit_json(t: Transmit) -> Value {
    match t {
        Transmit::Message { message, .. } => wire(&message),
        Transmit::Batch(b) => Value::Array(b.iter().map(wire).collect()),
        Transmit::Cancel { notification, .. } => serde_json::to_value(&notification).unwrap(),
        _ => unreachable!(),
    }
}

/// The pair and everything that crossed the wire.
pub(crate) struct Pair {
    pub(crate) client: ClientSession,
    pub(crate) server: ServerSession,
    pub(crate) now: Instant,
    pub(crate) client_events: Vec<Event>,
    pub(crate) server_events: Vec<Event>,
    /// Client to server, as JSON.
    pub(crate) to_server: Vec<Value>,
    /// Server to client, as JSON.
    pub(crate) to_client: Vec<Value>,
    /// How many `Transmit::Cancel` the client emitted (modern cancellations).
    pub(crate) client_cancels: usize,
}

impl Pair {
    pub(crate) fn new(client: ClientConfig, server: ServerConfig) -> Pair {
        Pair {
            client: ClientSession::new(client),
            server: ServerSession::new(server),
            now: Instant::now(),
            client_events: Vec::new(),
            server_events: Vec::new(),
            to_server: Vec::new(),
            to_client: Vec::new(),
            client_cancels: 0,
        }
    }

    /// A client speaking only `versions` (legacy ones by `initialize`, without a probe when it has
    /// no modern version) and a server with every capability, connected and settled.
    pub(crate) fn connected(versions: &[ProtocolVersion]) -> Pair {
        let mut client = ClientConfig::new("test-client", "1.0.0", full_client_caps());
        client.versions = versions.to_vec();
        let server = ServerConfig::new("test-server", "1.0.0", full_server_caps());
        let mut pair = Pair::new(client, server);
        pair.client.connect(pair.now).unwrap();
        pair.pump();
        assert!(
            matches!(pair.client_events.first(), Some(Event::Ready(_))),
            "client not ready: {:?}",
            pair.client_events
        );
        pair.client_events.clear();
        pair.server_events.clear();
        pair.to_server.clear();
        pair.to_client.clear();
        pair
    }

    pub(crate) fn legacy_client(version: ProtocolVersion) -> ClientConfig {
        let mut c = ClientConfig::new("test-client", "1.0.0", full_client_caps());
        c.versions = vec![version];
        c.era = EraChoice::Legacy;
        c
    }

    /// Moves every message across until both sides are quiet; collects events.
    pub(crate) fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some(t) = self.client.poll_transmit() {
                moved = true;
                if matches!(t, Transmit::Cancel { .. }) {
                    self.client_cancels += 1;
                }
                let value = transmit_json(t);
                self.server
                    .handle_bytes(self.now, value.to_string().as_bytes());
                self.to_server.push(value);
            }
            while let Some(t) = self.server.poll_transmit() {
                moved = true;
                let value = transmit_json(t);
                self.client
                    .handle_bytes(self.now, value.to_string().as_bytes());
                self.to_client.push(value);
            }
            while let Some(e) = self.client.poll_event() {
                self.client_events.push(e);
            }
            while let Some(e) = self.server.poll_event() {
                self.server_events.push(e);
            }
            if !moved {
                break;
            }
        }
    }

    /// Advances the clock and fires both timers.
    pub(crate) fn advance(&mut self, by: Duration) {
        self.now += by;
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        self.pump();
    }

    /// Sends raw JSON to the server and returns what it wrote back (not delivered).
    pub(crate) fn raw_to_server(&mut self, value: Value) -> Vec<Value> {
        self.server
            .handle_bytes(self.now, value.to_string().as_bytes());
        drain(&mut self.server)
    }

    /// The requests the server's layer above was handed, drained.
    pub(crate) fn server_requests(&mut self) -> Vec<modelctx_session::IncomingRequest> {
        let events = std::mem::take(&mut self.server_events);
        let mut out = Vec::new();
        for e in events {
            match e {
                Event::Request(r) => out.push(r),
                other => self.server_events.push(other),
            }
        }
        out
    }

    /// The requests the client's layer above was handed, drained.
    pub(crate) fn client_requests(&mut self) -> Vec<modelctx_session::IncomingRequest> {
        let events = std::mem::take(&mut self.client_events);
        let mut out = Vec::new();
        for e in events {
            match e {
                Event::Request(r) => out.push(r),
                other => self.client_events.push(other),
            }
        }
        out
    }
}

/// What a server wrote, as JSON (batches as arrays), without delivering it.
pub(crate) fn drain(server: &mut ServerSession) -> Vec<Value> {
    std::iter::from_fn(|| server.poll_transmit())
        .map(transmit_json)
        .collect()
}

/// The server's events, drained.
pub(crate) fn server_events(server: &mut ServerSession) -> Vec<Event> {
    std::iter::from_fn(|| server.poll_event()).collect()
}

/// A modern request's `_meta`.
pub(crate) fn modern_meta(caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// A server with every capability, expecting initialize or modern requests.
pub(crate) fn server() -> ServerSession {
    ServerSession::new(ServerConfig::new(
        "test-server",
        "1.0.0",
        full_server_caps(),
    ))
}

/// A server initialized at `version` by raw messages.
pub(crate) fn initialized_server(version: &str, client_caps: Value) -> ServerSession {
    let mut s = server();
    let now = Instant::now();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": client_caps,
        "clientInfo": {"name": "c", "version": "1"}}});
    s.handle_bytes(now, init.to_string().as_bytes());
    s.handle_bytes(
        now,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    drain(&mut s);
    server_events(&mut s);
    s
}
