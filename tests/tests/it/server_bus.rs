//! Two servers of one process on a `MemoryHub` bus, each serving Streamable HTTP on 127.0.0.1:
//! a change made on one reaches the legacy sessions (their standalone GET streams) and the
//! modern `subscriptions/listen` streams of the other, through the real serving path, once.

use std::sync::Arc;
use std::time::Duration;

use modelctx_server::bus::MemoryHub;
use modelctx_server::{HttpConfig, NoArgs, RunningServer, Server, Tool};
use modelctx_tests::http::{
    RawResponse, modern_headers, modern_meta, open_session, post, post_headers, raw_request, within,
};
use modelctx_types::consts::{
    NotificationsResourcesUpdated, NotificationsSubscriptionsAcknowledged,
    NotificationsToolsListChanged, SubscriptionsListen,
};
use serde_json::{Value, json};

const URI: &str = "file:///watched";

async fn noop(_: NoArgs) -> &'static str {
    ""
}

/// An instance of the fleet: tools and subscribable resources declared, on `hub` as `instance`.
async fn instance(hub: &MemoryHub, instance: u16) -> (Server, RunningServer) {
    let server = Server::builder("fleet", "1.0.0")
        .declare_tools()
        .declare_resources()
        .bus(Arc::new(hub.member(instance).expect("a free number")))
        .build();
    let running = server
        .serve_http("127.0.0.1:0", HttpConfig::default())
        .await
        .expect("serving on 127.0.0.1");
    (server, running)
}

/// A legacy session on `running`, subscribed to [`URI`], with its standalone GET stream open
/// (past its priming event).
async fn legacy_listener(running: &RunningServer) -> RawResponse {
    let addr = running.local_addr();
    let sid = open_session(addr, "2025-11-25").await;
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
        "params": {"uri": URI}});
    let reply = post(
        addr,
        &post_headers(Some(&sid), Some("2025-11-25")),
        &subscribe,
    )
    .await;
    assert_eq!(reply.status, 200);
    let headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let mut stream = within("get", raw_request(addr, "GET", "/mcp", &headers, b"")).await;
    assert_eq!(stream.status, 200);
    let priming = within("priming", stream.next_event()).await.unwrap();
    assert!(priming.data.is_empty());
    stream
}

/// A modern listen stream on `running` for tool list changes and [`URI`], past its
/// acknowledgement.
async fn modern_listener(running: &RunningServer) -> RawResponse {
    let listen = json!({"jsonrpc": "2.0", "id": 9, "method": SubscriptionsListen::VALUE,
        "params": {"notifications": {"toolsListChanged": true, "resourceSubscriptions": [URI]},
        "_meta": modern_meta()}});
    let headers = modern_headers(SubscriptionsListen::VALUE, None);
    let mut stream = post(running.local_addr(), &headers, &listen).await;
    assert_eq!(stream.status, 200);
    let (_, ack) = within("ack", stream.next_message()).await.unwrap();
    assert_eq!(ack["method"], NotificationsSubscriptionsAcknowledged::VALUE);
    stream
}

async fn next_method(what: &str, stream: &mut RawResponse) -> Value {
    let (_, message) = within(what, stream.next_message())
        .await
        .unwrap_or_else(|| panic!("{what}: the stream ended"));
    message["method"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_changed_on_one_server_reaches_the_sessions_and_listen_streams_of_another() {
    let hub = MemoryHub::new();
    let (a, running_a) = instance(&hub, 1).await;
    let (b, running_b) = instance(&hub, 2).await;
    let mut legacy_a = legacy_listener(&running_a).await;
    let mut legacy_b = legacy_listener(&running_b).await;
    let mut listen_b = modern_listener(&running_b).await;
    // What the sessions' opening sent (their `notifications/initialized`, for requests that
    // may wait on other instances).
    let opening = hub.delivered();

    // Made on A: heard on A's session, and on B's session and listen stream.
    a.add_tool(Tool::new("new", noop)).unwrap();
    for (what, stream) in [
        ("A's session", &mut legacy_a),
        ("B's session", &mut legacy_b),
        ("B's listen stream", &mut listen_b),
    ] {
        assert_eq!(
            next_method(what, stream).await,
            NotificationsToolsListChanged::VALUE,
            "{what}"
        );
    }
    // Made on B: the next message everywhere is its resource update, so no list change came
    // twice (neither back from B to A nor again from A to B).
    b.notify_resource_updated(URI);
    for (what, stream) in [
        ("A's session", &mut legacy_a),
        ("B's session", &mut legacy_b),
        ("B's listen stream", &mut listen_b),
    ] {
        assert_eq!(
            next_method(what, stream).await,
            NotificationsResourcesUpdated::VALUE,
            "{what}"
        );
    }
    // Two changes, each to the one other instance.
    assert_eq!(hub.delivered() - opening, 2);
    assert_eq!(hub.dropped(), 0);

    drop((legacy_a, legacy_b, listen_b));
    running_a.shutdown(Duration::from_secs(1)).await;
    running_b.shutdown(Duration::from_secs(1)).await;
}
