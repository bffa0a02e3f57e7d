//! A `SessionStore` written outside the crate (as a Redis one would be), given through
//! `ServerBuilder::session_store`: a legacy HTTP session lives in it, a request that changes
//! nothing does not save, DELETE removes, and a failed load fails the POST's requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::{Request, StatusCode};
use modelctx_http::server::{McpService, PeerAddr};
use modelctx_server::{
    HttpConfig, InMemoryStore, NoArgs, ProtocolVersion, Server, SessionState, SessionStore,
    StoreError, StoreFuture, Tool,
};
use modelctx_types::consts;
use serde_json::{Value, json};

use crate::common::within;

/// An `InMemoryStore` that counts what is asked of it, and whose loads fail on demand.
#[derive(Debug, Default)]
struct CountingStore {
    inner: InMemoryStore,
    loads: AtomicUsize,
    saves: AtomicUsize,
    removes: AtomicUsize,
    fail_loads: AtomicBool,
}

impl CountingStore {
    fn counts(&self) -> (usize, usize, usize) {
        (
            self.loads.load(Ordering::SeqCst),
            self.saves.load(Ordering::SeqCst),
            self.removes.load(Ordering::SeqCst),
        )
    }
}

impl SessionStore for CountingStore {
    fn load<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionState>> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        if self.fail_loads.load(Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(StoreError::new(
                "the store is down",
            ))));
        }
        self.inner.load(id)
    }

    fn save<'a>(&'a self, id: &'a str, state: &'a SessionState) -> StoreFuture<'a, ()> {
        self.saves.fetch_add(1, Ordering::SeqCst);
        self.inner.save(id, state)
    }

    fn remove<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        self.removes.fetch_add(1, Ordering::SeqCst);
        self.inner.remove(id)
    }
}

const VERSION: ProtocolVersion = ProtocolVersion::V2025_06_18;

fn request(method: &str, sid: Option<&str>, body: Option<Value>) -> Request<String> {
    let mut request = Request::builder()
        .method(method)
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", VERSION.as_str());
    if let Some(sid) = sid {
        request = request.header("mcp-session-id", sid);
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut request = request.body(body).unwrap();
    request
        .extensions_mut()
        .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
    request
}

/// Sends `request` and returns the status, the session id header and the whole body.
async fn send(
    service: &McpService,
    request: Request<String>,
) -> (StatusCode, Option<String>, String) {
    within("the response", async {
        let response = service.handle(request).await;
        let status = response.status();
        let sid = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(axum::body::Body::new(response.into_body()), usize::MAX)
            .await
            .unwrap();
        (status, sid, String::from_utf8(body.to_vec()).unwrap())
    })
    .await
}

/// The JSON-RPC messages of a body (plain JSON, or the `data:` lines of an SSE stream).
fn messages(body: &str) -> Vec<Value> {
    if let Ok(one) = serde_json::from_str::<Value>(body) {
        return vec![one];
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter(|data| !data.trim().is_empty())
        .map(|data| serde_json::from_str(data.trim()).unwrap())
        .collect()
}

/// The reply to request `id` in `body`.
fn reply(body: &str, id: i64) -> Value {
    messages(body)
        .into_iter()
        .find(|m| m["id"] == json!(id))
        .unwrap_or_else(|| panic!("no reply to {id} in {body}"))
}

fn server(store: &Arc<CountingStore>) -> McpService {
    Server::builder("s", "1")
        .versions([VERSION])
        .session_store(store.clone())
        .tool(Tool::new("echo", |_: NoArgs| std::future::ready("echo")))
        .build()
        .http_service(HttpConfig::default())
        .unwrap()
}

/// Opens a legacy session (`initialize`, `notifications/initialized`) and returns its id.
async fn open(service: &McpService) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": consts::Initialize::VALUE,
        "params": {"protocolVersion": VERSION.as_str(), "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}});
    let (status, sid, body) = send(service, request("POST", None, Some(initialize))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        reply(&body, 1)["result"]["protocolVersion"],
        json!(VERSION.as_str()),
        "{body}"
    );
    let sid = sid.expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": consts::NotificationsInitialized::VALUE});
    let (status, _, body) = send(service, request("POST", Some(&sid), Some(initialized))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    sid
}

#[tokio::test]
async fn a_legacy_http_session_lives_in_a_store_of_the_application() {
    let store = Arc::new(CountingStore::default());
    let service = server(&store);
    let sid = open(&service).await;
    // Each POST loaded the state; both changed it (the version, then `initialized`).
    assert_eq!(store.counts(), (2, 2, 0));
    let state = store
        .inner
        .load(&sid)
        .await
        .unwrap()
        .expect("the session's state");
    assert_eq!(state.version, Some(VERSION));
    assert!(state.initialized);

    // A request that changes nothing loads, is answered, and does not save.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": consts::ToolsCall::VALUE,
        "params": {"name": "echo", "arguments": {}}});
    let (status, _, body) = send(&service, request("POST", Some(&sid), Some(call))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        reply(&body, 2)["result"]["content"][0]["text"],
        json!("echo"),
        "{body}"
    );
    assert_eq!(store.counts(), (3, 2, 0));

    // DELETE ends the session: its state is removed from the store.
    let (status, _, body) = send(&service, request("DELETE", Some(&sid), None)).await;
    assert!(status.is_success(), "{status}: {body}");
    within("the state's removal", async {
        while store.counts().2 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(store.counts().2, 1);
    assert!(store.inner.is_empty());
}

/// A store that cannot load the state: the POST is answered 503 (try again later), never an
/// internal error inside a 200.
#[tokio::test]
async fn a_failed_load_answers_the_post_503() {
    let store = Arc::new(CountingStore::default());
    let service = server(&store);
    let sid = open(&service).await;
    store.fail_loads.store(true, Ordering::SeqCst);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": consts::ToolsCall::VALUE,
        "params": {"name": "echo", "arguments": {}}});
    let (status, _, body) = send(&service, request("POST", Some(&sid), Some(call))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let reply = reply(&body, 7);
    assert!(reply.get("result").is_none(), "{reply}");
    assert_ne!(reply["error"]["code"], json!(-32603), "{reply}");
    // Nothing was run, so nothing was saved.
    assert_eq!(store.counts().1, 2);

    // The store back: the session goes on.
    store.fail_loads.store(false, Ordering::SeqCst);
    let call = json!({"jsonrpc": "2.0", "id": 8, "method": consts::ToolsCall::VALUE,
        "params": {"name": "echo", "arguments": {}}});
    let (_, _, body) = send(&service, request("POST", Some(&sid), Some(call))).await;
    assert_eq!(reply_text(&body, 8), "echo", "{body}");
}

fn reply_text(body: &str, id: i64) -> String {
    reply(body, id)["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
