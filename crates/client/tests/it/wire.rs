//! The wire tap ([`ClientBuilder::on_wire`](modelctx_client::ClientBuilder::on_wire)): every
//! message sent and received, in order, as one line of JSON each.

use crate::common;

use std::sync::{Arc, Mutex};

use common::{Era, builder, connect, full_capabilities, id_json, text_result};
use modelctx_client::{ClientBuilder, Direction, ProtocolVersion};
use serde_json::{Value, json};

type Seen = Arc<Mutex<Vec<(Direction, String)>>>;

/// A legacy client (pinned to 2025-11-25) whose tap records into the returned list.
fn tapped() -> (ClientBuilder, Seen) {
    let seen: Seen = Arc::default();
    let into = seen.clone();
    let builder = builder()
        .protocol_version(ProtocolVersion::V2025_11_25)
        .on_wire(move |direction, json| {
            into.lock().unwrap().push((direction, json.to_owned()));
        });
    (builder, seen)
}

/// What the tap saw: direction, and the method (or `response <id>`) of each message; every
/// line is checked to be one line of JSON-RPC.
fn summary(seen: &Seen) -> Vec<(Direction, String)> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|(direction, line)| {
            assert!(!line.contains('\n'), "one line: {line}");
            let value: Value = serde_json::from_str(line).expect("JSON");
            assert_eq!(value["jsonrpc"], "2.0", "{line}");
            let what = match value["method"].as_str() {
                Some(method) => method.to_owned(),
                None => "response".to_owned(),
            };
            (*direction, what)
        })
        .collect()
}

fn entry(direction: Direction, what: &str) -> (Direction, String) {
    (direction, what.to_owned())
}

#[tokio::test]
async fn the_tap_sees_the_handshake_and_each_call_in_order() {
    let (builder, seen) = tapped();
    let (client, mut fake) = connect(Era::Legacy, builder, full_capabilities()).await;
    let (called, _) = fake
        .answer(
            "tools/call",
            text_result("hi"),
            client.call_tool("echo", json!({"text": "hi"})),
        )
        .await;
    assert!(called.is_ok(), "{called:?}");
    use Direction::{Received, Sent};
    let summary = summary(&seen);
    assert_eq!(
        summary,
        [
            entry(Sent, "initialize"),
            entry(Received, "response"),
            entry(Sent, "notifications/initialized"),
            entry(Sent, "tools/call"),
            entry(Received, "response"),
        ],
        "{seen:?}"
    );
    // The lines are the messages themselves: the call's arguments as sent, the result as
    // received.
    let lines: Vec<Value> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, line)| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines[1]["id"], lines[0]["id"], "the handshake's answer");
    assert_eq!(lines[3]["params"]["arguments"], json!({"text": "hi"}));
    assert_eq!(lines[4]["id"], lines[3]["id"], "the call's answer");
    assert_eq!(lines[4]["result"], text_result("hi"));
    client.close().await;
}

#[tokio::test]
async fn a_dropped_call_shows_its_cancellation() {
    let (builder, seen) = tapped();
    let (client, mut fake) = connect(Era::Legacy, builder, full_capabilities()).await;
    let id = {
        let call = client.call_tool("slow", json!({}));
        tokio::pin!(call);
        let request = tokio::select! {
            _ = &mut call => panic!("the call ended before it was answered"),
            request = fake.expect_request("tools/call") => request,
        };
        request.id
    };
    // The call's future is dropped: the legacy server is told.
    fake.expect_cancelled(&id).await;
    let lines = seen.lock().unwrap().clone();
    let (direction, last) = lines.last().expect("messages");
    assert_eq!(*direction, Direction::Sent);
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["method"], "notifications/cancelled");
    assert_eq!(last["params"]["requestId"], id_json(&id));
    // Nothing else was shown for the call: its request, then its cancellation.
    let summary = summary(&seen);
    assert_eq!(
        summary[summary.len() - 2..],
        [
            entry(Direction::Sent, "tools/call"),
            entry(Direction::Sent, "notifications/cancelled")
        ]
    );
    client.close().await;
}
