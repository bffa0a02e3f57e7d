//! A fleet in one process: two `Server`s sharing one session store, one event store and a
//! `MemoryHub` bus, each serving Streamable HTTP on its own port on 127.0.0.1. A legacy session
//! opened on one is served by the other: calls, the answer to a question, a cancellation, its
//! end, a store that cannot be reached, and the server's changes written once per session.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use modelctx_server::bus::MemoryHub;
use modelctx_server::event_store::{
    BoxFuture, EventId, EventStore, EventStoreError, Follow, MemoryEventStore, ReplayError,
    StoreSizes, StreamId,
};
use modelctx_server::{
    Context, HttpConfig, InMemoryStore, LogLevel, NoArgs, RunningServer, Server, SessionState,
    SessionStore, StoreError, StoreFuture, Tool,
};
use modelctx_tests::http::{
    RawResponse, call, open_session, post, post_headers, raw_request, within,
};
use modelctx_types::RequestId;
use modelctx_types::consts::{ElicitationCreate, NotificationsToolsListChanged};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const VERSION: &str = "2025-06-18";

/// The session store of the fleet: an `InMemoryStore` that can be made unreachable, and that
/// records the sessions it was asked to touch.
#[derive(Debug, Default)]
struct SharedStore {
    inner: InMemoryStore,
    down: AtomicBool,
    /// Saves fail (as unavailable) while loads work.
    refuse_saves: AtomicBool,
    touched: Mutex<Vec<String>>,
}

impl SharedStore {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("the store is down"));
        }
        Ok(())
    }
}

impl SessionStore for SharedStore {
    fn load<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionState>> {
        Box::pin(async move {
            self.check()?;
            self.inner.load(id).await
        })
    }

    fn save<'a>(&'a self, id: &'a str, state: &'a SessionState) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.check()?;
            if self.refuse_saves.load(Ordering::SeqCst) {
                return Err(StoreError::unavailable("saves time out"));
            }
            self.inner.save(id, state).await
        })
    }

    fn remove<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.check()?;
            self.inner.remove(id).await
        })
    }

    fn touch<'a>(&'a self, ids: &'a [&'a str]) -> StoreFuture<'a, ()> {
        let mut touched = self.touched.lock().unwrap();
        touched.extend(ids.iter().map(|id| (*id).to_owned()));
        Box::pin(std::future::ready(Ok(())))
    }
}

/// One instance's view of the fleet's event store: the shared `MemoryEventStore`, with the
/// instance's own stream base (`instance << 32`), as a store shared by processes gives.
struct Based {
    inner: Arc<MemoryEventStore>,
    base: u64,
}

impl EventStore for Based {
    fn stream_base(&self) -> u64 {
        self.base
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
        self.inner.remove_session(session)
    }

    fn sizes(&self) -> BoxFuture<'_, Result<StoreSizes, EventStoreError>> {
        self.inner.sizes()
    }
}

/// What the fleet's instances share.
struct Fleet {
    hub: MemoryHub,
    store: Arc<SharedStore>,
    events: Arc<MemoryEventStore>,
    /// The handlers of `hang` that saw their cancellation, by instance.
    cancelled: mpsc::UnboundedSender<u16>,
    /// Lets the handlers of `chatty` go on.
    go: Arc<tokio::sync::Notify>,
}

/// One instance of the fleet, serving on its own port.
struct Instance {
    server: Server,
    running: RunningServer,
    events: Arc<Based>,
}

impl Instance {
    fn addr(&self) -> std::net::SocketAddr {
        self.running.local_addr()
    }
}

impl Fleet {
    fn new() -> (Fleet, mpsc::UnboundedReceiver<u16>) {
        let (cancelled, rx) = mpsc::unbounded_channel();
        let fleet = Fleet {
            hub: MemoryHub::new(),
            store: Arc::new(SharedStore::default()),
            events: Arc::new(MemoryEventStore::new()),
            cancelled,
            go: Arc::new(tokio::sync::Notify::new()),
        };
        (fleet, rx)
    }

    /// Instance `n`: tools `echo`, `ask` (asks the client for a name), `hang` (waits for its
    /// cancellation, then reports it) and `chatty` (waits for `go`, then logs at `info`).
    async fn instance(&self, n: u16, config: HttpConfig) -> Instance {
        let ask = |context: Context, _: NoArgs| async move {
            let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
            let answer = context.elicit_json("Your name?", schema).await;
            match answer {
                Ok(answer) => format!(
                    "hello {}",
                    answer["content"]["name"].as_str().unwrap_or("?")
                ),
                Err(e) => format!("no answer: {e}"),
            }
        };
        let cancelled = self.cancelled.clone();
        let hang = move |context: Context, _: NoArgs| {
            let cancelled = cancelled.clone();
            async move {
                context.cancelled().cancelled().await;
                let _ = cancelled.send(n);
                "cancelled"
            }
        };
        let go = self.go.clone();
        let chatty = move |context: Context, _: NoArgs| {
            let go = go.clone();
            async move {
                go.notified().await;
                context.log(LogLevel::Info, None, json!("told")).await;
                "said"
            }
        };
        let server = Server::builder("fleet", "1.0.0")
            .declare_tools()
            .tool(Tool::new("chatty", chatty))
            .tool(Tool::new("echo", |_: NoArgs| std::future::ready("echo")))
            .tool(Tool::new("ask", ask))
            .tool(Tool::new("hang", hang))
            .session_store(self.store.clone())
            .bus(Arc::new(self.hub.member(n).expect("a free number")))
            .build();
        let events = Arc::new(Based {
            inner: self.events.clone(),
            base: u64::from(n) << 32,
        });
        let running = server
            .serve_http("127.0.0.1:0", config.event_store(events.clone()))
            .await
            .expect("serving on 127.0.0.1");
        Instance {
            server,
            running,
            events,
        }
    }
}

async fn stop(instances: impl IntoIterator<Item = Instance>) {
    for instance in instances {
        instance.running.shutdown(Duration::from_secs(1)).await;
    }
}

/// A POST of session `sid` to `to`.
async fn post_to(to: &Instance, sid: &str, body: &Value) -> RawResponse {
    post(to.addr(), &post_headers(Some(sid), Some(VERSION)), body).await
}

/// The standalone GET stream of session `sid` on `on`.
async fn get_on(on: &Instance, sid: &str) -> RawResponse {
    let headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", sid),
        ("MCP-Protocol-Version", VERSION),
    ];
    let stream = within("get", raw_request(on.addr(), "GET", "/mcp", &headers, b"")).await;
    assert_eq!(stream.status, 200);
    stream
}

/// Records `on`'s GET of `sid` as the session's standalone stream in the event store, unless
/// the transport recorded one already (the store's record is what the fan-out reads).
async fn held_by(on: &Instance, sid: &str) {
    let store: &dyn EventStore = &*on.events;
    if store.standalone(sid).await.unwrap().is_none() {
        let stream = StreamId(store.stream_base());
        store.set_standalone(sid, Some(stream)).await.unwrap();
    }
    let held = store.standalone(sid).await.unwrap().expect("a holder");
    assert_eq!(
        held.0 >> 32,
        store.stream_base() >> 32,
        "held on the instance"
    );
}

/// No message comes on `stream` for `wait`.
async fn quiet(what: &str, stream: &mut RawResponse, wait: Duration) {
    if let Ok(message) = tokio::time::timeout(wait, stream.next_message()).await {
        panic!("{what}: {message:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_opened_on_one_instance_is_served_by_the_other() {
    let (fleet, _) = Fleet::new();
    let a = fleet.instance(1, HttpConfig::default()).await;
    let b = fleet.instance(2, HttpConfig::default()).await;
    let sid = open_session(a.addr(), VERSION).await;

    let reply = post_to(&b, &sid, &call(1, "echo", json!({}))).await;
    assert_eq!(reply.status, 200);
    let reply = reply.json().await;
    assert_eq!(reply["result"]["content"][0]["text"], "echo", "{reply}");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let reply = post_to(&b, &sid, &list).await.json().await;
    assert_eq!(
        reply["result"]["tools"].as_array().unwrap().len(),
        4,
        "{reply}"
    );

    // B shuts down: its copy is only forgotten; the state stays and A goes on serving.
    stop([b]).await;
    assert!(fleet.store.inner.load(&sid).await.unwrap().is_some());
    let reply = post_to(&a, &sid, &call(3, "echo", json!({})))
        .await
        .json()
        .await;
    assert_eq!(reply["result"]["content"][0]["text"], "echo", "{reply}");
    stop([a]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_asked_on_one_instance_is_answered_through_the_other() {
    let (fleet, _) = Fleet::new();
    let a = fleet.instance(1, HttpConfig::default()).await;
    let b = fleet.instance(2, HttpConfig::default()).await;
    let sid = open_session(a.addr(), VERSION).await;

    let mut call_on_a = post_to(&a, &sid, &call(7, "ask", json!({}))).await;
    assert_eq!(call_on_a.status, 200);
    let (_, question) = within("the question", call_on_a.next_message())
        .await
        .unwrap();
    assert_eq!(question["method"], ElicitationCreate::VALUE, "{question}");
    // Minted by instance 1: its number is in the id's bits 40 and up.
    let id = question["id"].as_i64().expect("a number id");
    assert_eq!(id >> 40, 1, "{id}");
    assert!(id < 1 << 52);

    let answer = json!({"jsonrpc": "2.0", "id": id,
        "result": {"action": "accept", "content": {"name": "Bea"}}});
    let reply = post_to(&b, &sid, &answer).await;
    assert_eq!(reply.status, 202);

    let (_, result) = within("the call's result", call_on_a.next_message())
        .await
        .unwrap();
    assert_eq!(result["id"], 7, "{result}");
    assert_eq!(
        result["result"]["content"][0]["text"], "hello Bea",
        "{result}"
    );
    assert_eq!(fleet.hub.dropped(), 0);
    stop([a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_sent_to_one_instance_cancels_the_handler_on_the_other() {
    let (fleet, mut cancelled) = Fleet::new();
    let a = fleet.instance(1, HttpConfig::default()).await;
    let b = fleet.instance(2, HttpConfig::default()).await;
    let sid = open_session(a.addr(), VERSION).await;

    let hanging = tokio::spawn({
        let (addr, sid) = (a.addr(), sid.clone());
        async move {
            post(
                addr,
                &post_headers(Some(&sid), Some(VERSION)),
                &call(5, "hang", json!({})),
            )
            .await
        }
    });
    // Running on A.
    while a.server.load().handlers == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 5, "reason": "enough"}});
    let reply = post_to(&b, &sid, &cancel).await;
    assert_eq!(reply.status, 202);
    let on = within("the cancellation", cancelled.recv()).await;
    assert_eq!(on, Some(1));
    // The cancelled request's POST ends with no response.
    let response = within("the POST ends", hanging).await.unwrap();
    let body = within("its body", response.body()).await;
    assert!(!String::from_utf8_lossy(&body).contains("\"result\""));
    stop([a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_on_one_instance_ends_the_session_on_the_other() {
    let (fleet, _) = Fleet::new();
    let a = fleet.instance(1, HttpConfig::default()).await;
    let b = fleet.instance(2, HttpConfig::default()).await;
    let sid = open_session(a.addr(), VERSION).await;
    let mut stream_on_a = get_on(&a, &sid).await;

    let headers = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", VERSION),
    ];
    let deleted = within(
        "delete",
        raw_request(b.addr(), "DELETE", "/mcp", &headers, b""),
    )
    .await;
    assert_eq!(deleted.status, 200);
    // A hears of it over the bus: its stream of the session ends.
    assert!(
        within("A's stream ends", stream_on_a.next_message())
            .await
            .is_none()
    );
    let reply = post_to(&a, &sid, &call(1, "echo", json!({}))).await;
    assert_eq!(reply.status, 404);
    let reply = post_to(&b, &sid, &call(2, "echo", json!({}))).await;
    assert_eq!(reply.status, 404);
    assert!(fleet.store.inner.is_empty());
    stop([a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_reached_gives_503_with_retry_after() {
    let (fleet, _) = Fleet::new();
    let a = fleet.instance(1, HttpConfig::default()).await;
    let b = fleet.instance(2, HttpConfig::default()).await;
    let sid = open_session(a.addr(), VERSION).await;

    fleet.store.down.store(true, Ordering::SeqCst);
    // Loading on the instance that holds it; adopting on the other.
    for (what, on) in [("held", &a), ("adopted", &b)] {
        let reply = post_to(on, &sid, &call(1, "echo", json!({}))).await;
        assert_eq!(reply.status, 503, "{what}");
        assert_eq!(reply.header("retry-after"), Some("1"), "{what}");
    }
    // An `initialize` whose state cannot be loaded, then one whose state cannot be saved:
    // 503, and no session.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    for what in ["load", "save"] {
        if what == "save" {
            fleet.store.down.store(false, Ordering::SeqCst);
            fleet.store.refuse_saves.store(true, Ordering::SeqCst);
        }
        let reply = post(a.addr(), &post_headers(None, None), &init).await;
        assert_eq!(reply.status, 503, "{what}");
        assert_eq!(reply.header("retry-after"), Some("1"), "{what}");
        let opened = reply.header("mcp-session-id").map(str::to_owned);
        assert!(within("the body", reply.body()).await.len() < 200);
        if let Some(id) = opened {
            let reply = post_to(&a, &id, &call(9, "echo", json!({}))).await;
            assert_eq!(reply.status, 404, "{what}: the session ended");
        }
    }
    assert_eq!(fleet.store.inner.len(), 1);

    // Back: both serve the session again.
    fleet.store.refuse_saves.store(false, Ordering::SeqCst);
    for on in [&a, &b] {
        let reply = post_to(on, &sid, &call(2, "echo", json!({}))).await;
        assert_eq!(reply.status, 200);
    }
    assert_eq!(fleet.store.inner.len(), 1);
    stop([a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_reaches_the_stream_held_on_another_instance_once() {
    let (fleet, _) = Fleet::new();
    let a = fleet.instance(1, HttpConfig::default()).await;
    let b = fleet.instance(2, HttpConfig::default()).await;
    let sid = open_session(a.addr(), VERSION).await;
    let mut stream_on_b = get_on(&b, &sid).await;
    held_by(&b, &sid).await;

    a.server
        .add_tool(Tool::new("late", |_: NoArgs| std::future::ready("late")))
        .unwrap();
    let (_, note) = within("the change on B", stream_on_b.next_message())
        .await
        .unwrap();
    assert_eq!(
        note["method"],
        NotificationsToolsListChanged::VALUE,
        "{note}"
    );
    quiet("B again", &mut stream_on_b, Duration::from_millis(500)).await;
    // A, the opener, wrote nothing for it: a GET on A finds nothing queued.
    drop(stream_on_b);
    let mut stream_on_a = get_on(&a, &sid).await;
    quiet("A", &mut stream_on_a, Duration::from_millis(500)).await;
    stop([a, b]).await;
}

/// Issue 22: the client's GET stream held by A breaks (A alive) and the client resumes it on
/// B with `Last-Event-ID`: B takes the standalone stream over (the store's record names B's
/// stream), so a change made on either instance from then on is written once, by B, on the
/// resumed GET; A writes nothing for the session any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_after_the_stream_is_resumed_elsewhere_is_written_there_once() {
    let (fleet, _) = Fleet::new();
    let a = fleet.instance(1, HttpConfig::default()).await;
    let b = fleet.instance(2, HttpConfig::default()).await;
    let sid = open_session(a.addr(), VERSION).await;
    let mut stream_on_a = get_on(&a, &sid).await;
    held_by(&a, &sid).await;
    a.server
        .add_tool(Tool::new("one", |_: NoArgs| std::future::ready("one")))
        .unwrap();
    let (last, note) = within("the change on A", stream_on_a.next_message())
        .await
        .unwrap();
    assert_eq!(
        note["method"],
        NotificationsToolsListChanged::VALUE,
        "{note}"
    );
    let last = last.expect("an event id");
    drop(stream_on_a);

    let headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", VERSION),
        ("Last-Event-ID", last.as_str()),
    ];
    let mut resumed = within(
        "resume",
        raw_request(b.addr(), "GET", "/mcp", &headers, b""),
    )
    .await;
    assert_eq!(resumed.status, 200);
    held_by(&b, &sid).await;
    for (on, name) in [(&a, "two"), (&b, "three")] {
        on.server
            .add_tool(Tool::new(name, |_: NoArgs| std::future::ready("x")))
            .unwrap();
        let (id, note) = within("the change on the resumed stream", resumed.next_message())
            .await
            .unwrap();
        assert_eq!(
            note["method"],
            NotificationsToolsListChanged::VALUE,
            "{note}"
        );
        let id: EventId = id.expect("an event id").parse().unwrap();
        assert_eq!(id.stream.0 >> 32, 2, "written by B: {id}");
        quiet("once", &mut resumed, Duration::from_millis(300)).await;
    }
    stop([a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_stream_held_only_the_opener_writes_a_change() {
    let (fleet, _) = Fleet::new();
    let a = fleet.instance(1, HttpConfig::default()).await;
    let b = fleet.instance(2, HttpConfig::default()).await;
    let sid = open_session(a.addr(), VERSION).await;
    // B adopts it.
    let reply = post_to(&b, &sid, &call(1, "echo", json!({}))).await;
    assert_eq!(reply.status, 200);

    b.server
        .add_tool(Tool::new("late", |_: NoArgs| std::future::ready("late")))
        .unwrap();
    // Queued on A's copy (the opener's), not on B's: each GET takes its instance's queue.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut stream_on_b = get_on(&b, &sid).await;
    quiet("B", &mut stream_on_b, Duration::from_millis(500)).await;
    drop(stream_on_b);
    let mut stream_on_a = get_on(&a, &sid).await;
    let (_, note) = within("the change on A", stream_on_a.next_message())
        .await
        .unwrap();
    assert_eq!(
        note["method"],
        NotificationsToolsListChanged::VALUE,
        "{note}"
    );
    stop([a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_holding_the_stream_touches_the_session() {
    let (fleet, _) = Fleet::new();
    let mut config = HttpConfig::default();
    config.session_idle_timeout = Duration::from_millis(600);
    let a = fleet.instance(1, config).await;
    let sid = open_session(a.addr(), VERSION).await;
    let stream = get_on(&a, &sid).await;
    held_by(&a, &sid).await;
    let touched = async {
        while !fleet.store.touched.lock().unwrap().contains(&sid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within("a touch", touched).await;
    drop(stream);
    stop([a]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_level_set_through_one_instance_reaches_a_request_running_on_the_other() {
    let (fleet, _) = Fleet::new();
    let a = fleet.instance(1, HttpConfig::default()).await;
    let b = fleet.instance(2, HttpConfig::default()).await;
    let sid = open_session(a.addr(), VERSION).await;

    let running = tokio::spawn({
        let (addr, sid) = (a.addr(), sid.clone());
        async move {
            post(
                addr,
                &post_headers(Some(&sid), Some(VERSION)),
                &call(4, "chatty", json!({})),
            )
            .await
        }
    });
    while a.server.load().handlers == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let set = json!({"jsonrpc": "2.0", "id": 8, "method": "logging/setLevel",
        "params": {"level": "info"}});
    let reply = post_to(&b, &sid, &set).await;
    assert_eq!(reply.status, 200);
    // The bus is in this process: its message is handled by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    fleet.go.notify_one();
    let mut response = within("the call", running).await.unwrap();
    let (_, log) = within("the log message", response.next_message())
        .await
        .unwrap();
    assert_eq!(log["method"], "notifications/message", "{log}");
    assert_eq!(log["params"]["level"], "info", "{log}");
    let (_, result) = within("the result", response.next_message()).await.unwrap();
    assert_eq!(result["id"], 4, "{result}");
    stop([a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialized_sent_to_one_instance_lets_the_questions_queued_on_the_other_go() {
    let (fleet, _) = Fleet::new();
    let a = fleet.instance(1, HttpConfig::default()).await;
    let b = fleet.instance(2, HttpConfig::default()).await;
    // `initialize` alone: the server asks nothing before `notifications/initialized`.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let reply = post(a.addr(), &post_headers(None, None), &init).await;
    assert_eq!(reply.status, 200);
    let sid = reply.header("mcp-session-id").unwrap().to_owned();
    drop(reply);

    let asking = tokio::spawn({
        let (addr, sid) = (a.addr(), sid.clone());
        async move {
            post(
                addr,
                &post_headers(Some(&sid), Some(VERSION)),
                &call(3, "ask", json!({})),
            )
            .await
        }
    });
    while a.server.load().handlers == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = post_to(&b, &sid, &initialized).await;
    assert_eq!(reply.status, 202);
    let mut call_on_a = within("the question's stream", asking).await.unwrap();
    let (_, question) = within("the question", call_on_a.next_message())
        .await
        .unwrap();
    assert_eq!(question["method"], ElicitationCreate::VALUE, "{question}");
    stop([a, b]).await;
}
