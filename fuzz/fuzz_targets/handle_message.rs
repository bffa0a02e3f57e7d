//! Feeds arbitrary bytes to a [`ServerSession`] and a [`ClientSession`], lets the two talk to each
//! other, plays the layer above (answering, cancelling, notifying), and checks the invariants that
//! must hold whatever the peer sends.
//!
//! # Input
//!
//! Newline-separated chunks. The first line is a control script; every later line is one input,
//! given to both sessions with `handle_bytes`.
//!
//! * Script byte 0 configures the run: bits 0-1 the client's [`EraChoice`] (probe, legacy,
//!   modern), bits 2-3 the server's versions (all, legacy only, modern only, 2025-03-26 only),
//!   bit 4: close both sessions with their work in flight instead of finishing it first.
//! * Chunk `i` uses script bytes `1 + 2i` (`c0`) and `2 + 2i` (`c1`), cycling; a missing script
//!   reads as zeros.
//!   * `c0` bits 0-2: how far the virtual clock advances first (0 to 1 h); bit 3: call
//!     `handle_timeout` even if nothing is due; bits 4-5: how the layer above answers the requests
//!     it holds (keep, result, error, drop the stream); bit 6: deliver what the server wrote to the
//!     client; bit 7: deliver what the client wrote to the server.
//!   * `c1` bit 0: `notify_list_changed` (kind in bits 1-2); bit 3: `notify_resource_updated`;
//!     bit 4: `log` and `log_for`; bit 5: the server sends `ping`; bit 6: the client sends a
//!     request (method in bits 1-2); bit 7: progress on the server's open requests and the client
//!     cancels its oldest request.
//!
//! # Invariants
//!
//! * Nothing panics.
//! * Everything a session writes serializes, and decodes again as JSON-RPC.
//! * A closed session has empty tables and no timer, reported [`Event::Closed`] exactly once, and
//!   neither writes nor reports anything after that.
//! * Tables stay within their [`Limits`]; `poll_timeout` is set exactly when a table holds a timed
//!   entry; after `handle_timeout(now)` nothing is due at `now`.
//! * An [`Event::Request`] never names a request already in flight; [`Event::Cancelled`] only ever
//!   names one in flight; a request of ours ends (`Response` or `Failed`) at most once; a request
//!   in flight can be answered until an event says otherwise.
//! * When the layer above has answered everything and the timers have run, every table is empty.
//! * After `close()`, every table is empty.

#![no_main]

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use modelctx_session::{
    ClientConfig, ClientSession, EraChoice, Event, Limits, ListKind, LogLevel, ProtocolVersion,
    RequestOptions, ServerConfig, ServerSession, SessionError, TableSizes, Transmit,
};
use modelctx_types::{ErrorCode, ErrorObject, Incoming, JsonObject, Message, RequestId};
use serde_json::json;
use serde_json::value::RawValue;

/// How far the clock advances before a chunk (`c0` bits 0-2): across the 30 s handshake timeout,
/// the 60 s request timeout and the 60 s cancellation grace.
const STEPS: [Duration; 8] = [
    Duration::ZERO,
    Duration::from_millis(1),
    Duration::from_millis(100),
    Duration::from_secs(1),
    Duration::from_secs(10),
    Duration::from_secs(31),
    Duration::from_secs(61),
    Duration::from_secs(3600),
];

/// Rounds of delivery between the two sessions after each chunk. A conversation always settles
/// (answers are never answered) well before this.
const MAX_ROUNDS: usize = 16;

/// Small bounds, so that full tables are reachable.
fn limits() -> Limits {
    let mut limits = Limits::default();
    limits.max_outgoing = 8;
    limits.max_incoming = 8;
    limits.max_cancelled = 4;
    limits.max_subscriptions = 2;
    limits
}

fn object(value: serde_json::Value) -> JsonObject {
    match value {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("an object literal"),
    }
}

fn empty_result() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("valid JSON")
}

/// What the harness needs of either role.
trait Role {
    const NAME: &'static str;
    fn handle_timeout(&mut self, now: Instant);
    fn poll_transmit(&mut self) -> Option<Transmit>;
    fn poll_event(&mut self) -> Option<Event>;
    fn poll_timeout(&self) -> Option<Instant>;
    fn table_sizes(&self) -> TableSizes;
    fn is_closed(&self) -> bool;
    fn respond(&mut self, id: &RequestId, result: Box<RawValue>) -> Result<(), SessionError>;
    fn respond_error(&mut self, id: &RequestId, error: ErrorObject) -> Result<(), SessionError>;
}

macro_rules! role {
    ($ty:ty, $name:literal) => {
        impl Role for $ty {
            const NAME: &'static str = $name;
            fn handle_timeout(&mut self, now: Instant) {
                <$ty>::handle_timeout(self, now)
            }
            fn poll_transmit(&mut self) -> Option<Transmit> {
                <$ty>::poll_transmit(self)
            }
            fn poll_event(&mut self) -> Option<Event> {
                <$ty>::poll_event(self)
            }
            fn poll_timeout(&self) -> Option<Instant> {
                <$ty>::poll_timeout(self)
            }
            fn table_sizes(&self) -> TableSizes {
                <$ty>::table_sizes(self)
            }
            fn is_closed(&self) -> bool {
                <$ty>::is_closed(self)
            }
            fn respond(&mut self, id: &RequestId, result: Box<RawValue>) -> Result<(), SessionError> {
                <$ty>::respond(self, id, result)
            }
            fn respond_error(
                &mut self,
                id: &RequestId,
                error: ErrorObject,
            ) -> Result<(), SessionError> {
                <$ty>::respond_error(self, id, error)
            }
        }
    };
}

role!(ServerSession, "server");
role!(ClientSession, "client");

/// One session and what the layer above knows about it.
struct Side<S> {
    session: S,
    /// The peer's requests the layer above holds (from [`Event::Request`]).
    pending: BTreeSet<RequestId>,
    /// Open listen streams (servers: from their acknowledgement).
    listens: BTreeSet<RequestId>,
    /// Our own requests, oldest first, not yet ended.
    outgoing: VecDeque<RequestId>,
    /// Ids of our requests that have ended (`Response` or `Failed`).
    ended: BTreeSet<RequestId>,
    /// How many [`Event::Closed`] were reported.
    closed_events: usize,
    /// What the session wrote, serialized, not yet delivered.
    outbox: Vec<Vec<u8>>,
}

impl<S: Role> Side<S> {
    fn new(session: S) -> Self {
        Side {
            session,
            pending: BTreeSet::new(),
            listens: BTreeSet::new(),
            outgoing: VecDeque::new(),
            ended: BTreeSet::new(),
            closed_events: 0,
            outbox: Vec::new(),
        }
    }

    fn name(&self) -> &'static str {
        S::NAME
    }

    /// Drains both output queues, checking what comes out.
    fn drain(&mut self) {
        let was_closed = self.closed_events > 0;
        while let Some(transmit) = self.session.poll_transmit() {
            assert!(
                !was_closed,
                "{}: wrote {transmit:?} after Event::Closed",
                self.name()
            );
            if let Transmit::Message {
                message: Message::Notification(n),
                related: Some(id),
            } = &transmit
                && n.method == "notifications/subscriptions/acknowledged"
            {
                assert!(
                    self.listens.insert(id.clone()),
                    "{}: listen stream {id} acknowledged twice",
                    self.name()
                );
            }
            if let Some(bytes) = encode(S::NAME, &transmit) {
                self.outbox.push(bytes);
            }
        }
        while let Some(event) = self.session.poll_event() {
            assert!(
                !was_closed,
                "{}: reported {event:?} after Event::Closed",
                self.name()
            );
            match event {
                Event::Request(request) => {
                    assert!(
                        !self.listens.contains(&request.id),
                        "{}: request {} reuses the id of an open listen stream",
                        self.name(),
                        request.id
                    );
                    assert!(
                        self.pending.insert(request.id.clone()),
                        "{}: Event::Request for {}, which is already in flight",
                        self.name(),
                        request.id
                    );
                }
                Event::Cancelled { id, .. } => {
                    let known = self.pending.remove(&id) | self.listens.remove(&id);
                    assert!(
                        known,
                        "{}: Event::Cancelled for {id}, which is not in flight",
                        self.name()
                    );
                }
                Event::Response { id, .. } | Event::Failed { id, .. } => {
                    self.outgoing.retain(|o| *o != id);
                    assert!(
                        self.ended.insert(id.clone()),
                        "{}: our request {id} ended twice",
                        self.name()
                    );
                }
                Event::Closed(reason) => {
                    self.closed_events += 1;
                    assert_eq!(
                        self.closed_events,
                        1,
                        "{}: Event::Closed({reason:?}) reported twice",
                        self.name()
                    );
                    // Closing forgets the peer's requests: nothing is left to answer.
                    self.pending.clear();
                    self.listens.clear();
                }
                _ => {}
            }
        }
    }

    /// Calls `handle_timeout` when due (or when forced) and checks that nothing is due after.
    fn tick(&mut self, now: Instant, force: bool) {
        if force || self.session.poll_timeout().is_some_and(|at| at <= now) {
            self.session.handle_timeout(now);
            if let Some(at) = self.session.poll_timeout() {
                assert!(
                    at > now,
                    "{}: still due at {at:?} after handle_timeout({now:?})",
                    self.name()
                );
            }
            self.drain();
        }
    }

    /// Answers the peer's requests the layer above holds, as `how` says.
    fn answer(&mut self, how: u8) {
        let ids: Vec<RequestId> = self.pending.iter().cloned().collect();
        for id in ids {
            let result = match how {
                1 => self.session.respond(&id, empty_result()),
                2 => self.session.respond_error(&id, internal_error()),
                _ => continue,
            };
            self.settle(&id, result);
        }
        self.drain();
    }

    /// Records the outcome of answering `id`; on a refusal the layer above answers with an error.
    fn settle(&mut self, id: &RequestId, result: Result<(), SessionError>) {
        let result = match result {
            Err(SessionError::Invalid(_)) => self.session.respond_error(id, internal_error()),
            other => other,
        };
        match result {
            Ok(()) => {
                self.pending.remove(id);
            }
            Err(SessionError::NotInFlight(_)) => {
                panic!(
                    "{}: request {id} is no longer in flight, but no event said so",
                    self.name()
                )
            }
            Err(_) => {}
        }
    }

    /// Checks the invariants that hold between any two calls.
    fn check(&self, limits: &Limits) {
        let sizes = self.session.table_sizes();
        let name = self.name();
        if self.session.is_closed() {
            assert!(
                sizes.is_empty(),
                "{name}: closed with tables not empty: {sizes:?}"
            );
            assert_eq!(
                self.session.poll_timeout(),
                None,
                "{name}: closed with a timer set"
            );
            assert_eq!(
                self.closed_events, 1,
                "{name}: closed, but Event::Closed was reported {} times",
                self.closed_events
            );
        } else {
            assert_eq!(
                self.closed_events, 0,
                "{name}: Event::Closed reported, but the session is not closed"
            );
        }
        assert!(
            sizes.outgoing <= limits.max_outgoing,
            "{name}: outgoing over its limit: {sizes:?}"
        );
        assert!(
            sizes.incoming <= limits.max_incoming,
            "{name}: incoming over its limit: {sizes:?}"
        );
        assert!(
            sizes.cancelled <= limits.max_cancelled,
            "{name}: cancelled over its limit: {sizes:?}"
        );
        assert!(
            sizes.subscriptions <= limits.max_subscriptions,
            "{name}: subscriptions over their limit: {sizes:?}"
        );
        assert!(
            sizes.deadlines <= sizes.outgoing && sizes.progress_tokens <= sizes.outgoing,
            "{name}: deadlines or progress tokens without a request: {sizes:?}"
        );
        assert!(
            sizes.incoming_tokens <= sizes.incoming && sizes.subscriptions <= sizes.incoming,
            "{name}: incoming tokens or listen streams without a request: {sizes:?}"
        );
        assert!(
            sizes.queued <= sizes.outgoing,
            "{name}: queued requests that are not outgoing: {sizes:?}"
        );
        assert_eq!(
            self.session.poll_timeout().is_some(),
            sizes.deadlines + sizes.cancelled > 0,
            "{name}: poll_timeout disagrees with the timed tables: {sizes:?}"
        );
        if !self.session.is_closed() {
            assert!(
                sizes.incoming >= self.pending.len() + self.listens.len(),
                "{name}: the layer above holds {} requests, the session {}",
                self.pending.len() + self.listens.len(),
                sizes.incoming
            );
        }
    }
}

fn internal_error() -> ErrorObject {
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, "fuzz")
}

/// Serializes what a session wrote, as a transport would, and checks that it decodes again.
fn encode(name: &str, transmit: &Transmit) -> Option<Vec<u8>> {
    let bytes = match transmit {
        Transmit::Message { message, .. } => serde_json::to_vec(message),
        Transmit::Batch(messages) => {
            assert!(!messages.is_empty(), "{name}: wrote an empty batch");
            serde_json::to_vec(messages)
        }
        // Over stdio a modern cancellation is the notification.
        Transmit::Cancel { notification, .. } => serde_json::to_vec(notification),
        _ => return None,
    }
    .unwrap_or_else(|e| panic!("{name}: {transmit:?} does not serialize: {e}"));
    match modelctx_types::decode(&bytes) {
        Ok(Incoming::Batch(elements)) => {
            for element in elements {
                if let Err(e) = element {
                    panic!(
                        "{name}: wrote a batch member that does not decode ({e}): {}",
                        String::from_utf8_lossy(&bytes)
                    );
                }
            }
        }
        Ok(_) => {}
        Err(e) => panic!(
            "{name}: wrote something that does not decode ({e}): {}",
            String::from_utf8_lossy(&bytes)
        ),
    }
    Some(bytes)
}

/// Delivers what each side wrote to the other, as `c0` allows, until both are quiet.
fn pump(
    server: &mut Side<ServerSession>,
    client: &mut Side<ClientSession>,
    now: Instant,
    to_client: bool,
    to_server: bool,
) {
    for _ in 0..MAX_ROUNDS {
        let down = std::mem::take(&mut server.outbox);
        let up = std::mem::take(&mut client.outbox);
        if down.is_empty() && up.is_empty() {
            return;
        }
        if to_client {
            for bytes in &down {
                client.session.handle_bytes(now, bytes);
                client.drain();
            }
        }
        if to_server {
            for bytes in &up {
                server.session.handle_bytes(now, bytes);
                server.drain();
            }
        }
    }
    server.outbox.clear();
    client.outbox.clear();
}

/// The server's commands from `c1`.
fn server_commands(server: &mut Side<ServerSession>, now: Instant, c1: u8, counter: f64) {
    let s = &mut server.session;
    if c1 & 0x01 != 0 {
        let kind = match (c1 >> 1) & 3 {
            0 => ListKind::Tools,
            1 => ListKind::Prompts,
            _ => ListKind::Resources,
        };
        let _ = s.notify_list_changed(kind);
    }
    if c1 & 0x08 != 0 {
        let _ = s.notify_resource_updated("file:///a", true);
    }
    if c1 & 0x10 != 0 {
        let _ = s.log(LogLevel::Warning, Some("fuzz"), json!("log"));
        for id in server.pending.iter().chain(&server.listens) {
            let _ = s.log_for(id, LogLevel::Error, None, json!({"x": 1}));
        }
    }
    if c1 & 0x20 != 0
        && let Ok(id) = s.send_request(now, "ping", None, RequestOptions::default())
    {
        server.outgoing.push_back(id);
    }
    if c1 & 0x80 != 0 {
        for id in &server.pending {
            let _ = s.notify_progress(id, counter, Some(100.0), Some("working"));
        }
    }
    server.drain();
}

/// The client's commands from `c1`.
fn client_commands(client: &mut Side<ClientSession>, now: Instant, c1: u8) {
    if c1 & 0x40 != 0 {
        let (method, params) = match (c1 >> 1) & 3 {
            0 => ("ping", None),
            1 => ("tools/list", None),
            2 => (
                "resources/read",
                Some(object(json!({"uri": "file:///a"}))),
            ),
            _ => (
                "tools/call",
                Some(object(json!({"name": "t", "arguments": {}}))),
            ),
        };
        let options = RequestOptions::default().with_progress();
        if let Ok(id) = client
            .session
            .send_request_with(now, method, params, options)
        {
            client.outgoing.push_back(id);
        }
    }
    if c1 & 0x80 != 0
        && let Some(id) = client.outgoing.front().cloned()
        && client.session.cancel(now, &id, Some("fuzz")).is_ok()
    {
        client.outgoing.pop_front();
        client.ended.insert(id);
    }
    client.drain();
}

/// The layer above answers everything it holds, ends its listen streams, cancels its own requests,
/// and the timers run out: every table must be empty.
fn quiesce(
    server: &mut Side<ServerSession>,
    client: &mut Side<ClientSession>,
    now: &mut Instant,
    limits: &Limits,
) {
    server.outbox.clear();
    client.outbox.clear();
    for _ in 0..4 {
        server.answer(1);
        let listens: Vec<RequestId> = server.listens.iter().cloned().collect();
        for id in listens {
            if server.session.end_subscription(&id).is_ok() {
                server.listens.remove(&id);
            }
        }
        server.drain();
        client.answer(1);
        for id in std::mem::take(&mut client.outgoing) {
            if client.session.cancel(*now, &id, None).is_ok() {
                client.ended.insert(id);
            }
        }
        client.drain();
        *now += Duration::from_secs(24 * 3600);
        server.tick(*now, true);
        client.tick(*now, true);
        server.outbox.clear();
        client.outbox.clear();
        server.check(limits);
        client.check(limits);
    }
    for (name, sizes) in [
        ("server", server.session.table_sizes()),
        ("client", client.session.table_sizes()),
    ] {
        assert!(
            sizes.is_empty(),
            "{name}: tables not empty after all work ended: {sizes:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let script = lines.next().unwrap_or_default();
    let header = script.first().copied().unwrap_or(0);
    let controls = script.get(1..).unwrap_or_default();
    let control = |i: usize| -> u8 {
        if controls.is_empty() {
            0
        } else {
            controls[i % controls.len()]
        }
    };

    let limits = limits();
    let server_caps = object(json!({
        "tools": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": true},
        "prompts": {"listChanged": true},
        "logging": {},
        "completions": {},
    }));
    let mut server_config = ServerConfig::new("fuzz-server", "0.0.0", server_caps);
    server_config.limits = limits.clone();
    server_config.versions = match (header >> 2) & 3 {
        0 => ProtocolVersion::ALL.to_vec(),
        1 => ProtocolVersion::ALL[..4].to_vec(),
        2 => vec![ProtocolVersion::V2026_07_28],
        _ => vec![ProtocolVersion::V2025_03_26],
    };
    let client_caps = object(json!({
        "roots": {"listChanged": true},
        "sampling": {},
        "elicitation": {},
    }));
    let mut client_config = ClientConfig::new("fuzz-client", "0.0.0", client_caps);
    client_config.limits = limits.clone();
    client_config.era = match header & 3 {
        1 => EraChoice::Legacy,
        2 => EraChoice::Modern,
        _ => EraChoice::Probe,
    };

    let start = Instant::now();
    let mut now = start;
    let mut server = Side::new(ServerSession::new(server_config));
    let mut client = Side::new(ClientSession::new(client_config));
    client
        .session
        .connect(now)
        .expect("connect on a new session succeeds");
    client.drain();
    server.check(&limits);
    client.check(&limits);

    let mut chunks = Vec::new();
    for (i, chunk) in lines.enumerate() {
        chunks.push(chunk);
        let c0 = control(2 * i);
        let c1 = control(2 * i + 1);
        now += STEPS[usize::from(c0 & 7)];
        let force = c0 & 0x08 != 0;

        server.session.handle_bytes(now, chunk);
        server.drain();
        client.session.handle_bytes(now, chunk);
        client.drain();
        server.tick(now, force);
        client.tick(now, force);

        match (c0 >> 4) & 3 {
            3 => {
                // The transport drops the server's streams; the client's layer above gives up.
                let ids: Vec<RequestId> =
                    server.pending.iter().chain(&server.listens).cloned().collect();
                for id in ids {
                    let was = server.session.stream_closed(&id);
                    assert!(
                        was || server.session.is_closed(),
                        "server: stream_closed({id}): not in flight, but no event said so"
                    );
                    // The session reports the cancellation as an event.
                    server.drain();
                    assert!(
                        !server.pending.contains(&id) && !server.listens.contains(&id),
                        "server: stream_closed({id}) reported no Event::Cancelled"
                    );
                }
                client.answer(2);
            }
            how => {
                server.answer(how);
                client.answer(how);
            }
        }
        server_commands(&mut server, now, c1, i as f64);
        client_commands(&mut client, now, c1);

        pump(&mut server, &mut client, now, c0 & 0x40 != 0, c0 & 0x80 != 0);
        server.check(&limits);
        client.check(&limits);
    }

    if header & 0x10 == 0 {
        // The layer above finishes everything and the timers run out: every table empties.
        quiesce(&mut server, &mut client, &mut now, &limits);
    }
    // close() (with work in flight when header bit 4 is set) empties everything, reports
    // Event::Closed once, and the session stays silent after it.
    server.session.close();
    client.session.close();
    server.drain();
    client.drain();
    assert!(server.session.is_closed(), "server: not closed after close()");
    assert!(client.session.is_closed(), "client: not closed after close()");
    let sizes = server.session.table_sizes();
    assert!(sizes.is_empty(), "server: tables after close(): {sizes:?}");
    let sizes = client.session.table_sizes();
    assert!(sizes.is_empty(), "client: tables after close(): {sizes:?}");
    server.check(&limits);
    client.check(&limits);
    for chunk in chunks.iter().take(4) {
        now += Duration::from_secs(1);
        server.session.handle_bytes(now, chunk);
        client.session.handle_bytes(now, chunk);
        server.session.handle_timeout(now);
        client.session.handle_timeout(now);
        server.drain();
        client.drain();
    }
    server.check(&limits);
    client.check(&limits);
});
