//! JSON-RPC batches: answered as batches on 2025-03-26 sessions only.

use crate::common;

use std::time::Instant;

use common::*;
use modelctx_session::Event;
use serde_json::json;

#[test]
fn batches_on_2025_03_26_are_answered_as_batches() {
    let mut s = initialized_server("2025-03-26", json!({}));
    let now = Instant::now();
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "1.0", "id": 4, "method": "ping"},
        {"jsonrpc": "2.0", "id": 5, "method": "prompts/list"},
    ]);
    s.handle_bytes(now, batch.to_string().as_bytes());
    // Nothing goes out until the layer above answered both requests.
    assert!(drain(&mut s).is_empty());
    let requests: Vec<_> = server_events(&mut s)
        .into_iter()
        .filter_map(|e| match e {
            Event::Request(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), 2);
    s.respond(&requests[1].id, raw(json!({"prompts": []})))
        .unwrap();
    assert!(drain(&mut s).is_empty());
    s.respond(&requests[0].id, raw(json!({"tools": []})))
        .unwrap();
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    let replies = out[0].as_array().expect("a batch reply");
    let mut ids: Vec<i64> = replies.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 4, 5]);
    let code = |id: i64| replies.iter().find(|r| r["id"] == id).unwrap()["error"]["code"].clone();
    assert_eq!(code(4), -32600);
    assert!(s.table_sizes().is_empty());

    // A batch of notifications and responses gets no reply.
    s.handle_bytes(now, br#"[{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},{"jsonrpc":"2.0","id":77,"result":{}}]"#);
    assert!(drain(&mut s).is_empty());
    // An empty batch is -32600.
    s.handle_bytes(now, b"[]");
    assert_eq!(drain(&mut s)[0]["error"]["code"], -32600);
    // A member cancelled by the client leaves the batch without an answer.
    s.handle_bytes(now, br#"[{"jsonrpc":"2.0","id":10,"method":"tools/list"},{"jsonrpc":"2.0","id":11,"method":"ping"}]"#);
    server_events(&mut s);
    s.handle_bytes(
        now,
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":10}}"#,
    );
    let out = drain(&mut s);
    assert_eq!(
        out,
        vec![json!([{"jsonrpc": "2.0", "id": 11, "result": {}}])]
    );
    assert!(s.table_sizes().is_empty());
}

/// `initialize` is never a member of a batch: a batch with one is refused as a whole (one
/// -32600 naming no id, as an HTTP transport refuses its POST), and none of its members is read.
#[test]
fn a_batch_with_initialize_gets_one_error() {
    let mut s = initialized_server("2025-03-26", json!({}));
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {}},
    ]);
    s.handle_bytes(Instant::now(), batch.to_string().as_bytes());
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["error"]["code"], -32600);
    assert_eq!(out[0]["id"], serde_json::Value::Null);
    let message = out[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("initialize"), "{message}");
    assert!(server_events(&mut s).is_empty());
    assert!(s.table_sizes().is_empty());
}

#[test]
fn arrays_on_other_versions_get_one_error() {
    for version in ["2024-11-05", "2025-06-18", "2025-11-25"] {
        let mut s = initialized_server(version, json!({}));
        s.handle_bytes(Instant::now(), br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#);
        let out = drain(&mut s);
        assert_eq!(out.len(), 1, "{version}");
        assert_eq!(out[0]["error"]["code"], -32600);
        assert_eq!(out[0]["id"], serde_json::Value::Null);
        assert!(server_events(&mut s).is_empty());
    }
    // Before initialize too.
    let mut s = server();
    s.handle_bytes(
        Instant::now(),
        br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
    );
    assert_eq!(drain(&mut s)[0]["error"]["code"], -32600);
}
