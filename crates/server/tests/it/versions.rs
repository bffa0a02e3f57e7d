//! `ServerBuilder::versions` narrows the versions a server serves on a connection of its own
//! (in memory here, as on stdio), not only over HTTP: `initialize` settles on a served version,
//! and a legacy `initialize` to a modern-only server is refused with -32022 (the protocol
//! session's rule, `session/src/meta.rs`).

use modelctx_server::{Frame, InMemory, NoArgs, ProtocolVersion, Server, Tool};
use modelctx_types::{Message, consts};
use serde_json::{Value, json};

use crate::common::within;

fn server(versions: impl IntoIterator<Item = ProtocolVersion>) -> Server {
    Server::builder("s", "1")
        .versions(versions)
        .tool(Tool::new("echo", |_: NoArgs| std::future::ready("echo")))
        .build()
}

/// Sends `initialize` asking for `version` and returns the server's reply, as JSON.
async fn initialize(conn: &mut InMemory, version: ProtocolVersion) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": consts::Initialize::VALUE, "params": {
        "protocolVersion": version.as_str(), "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}});
    let message: Message = serde_json::from_str(&request.to_string()).unwrap();
    assert!(conn.send(message).await, "the server took the message");
    let frame = within("the reply to initialize", conn.recv()).await;
    match frame {
        Some(Frame::Single(reply)) => serde_json::to_value(&reply).unwrap(),
        other => panic!("expected one reply, got {other:?}"),
    }
}

#[tokio::test]
async fn a_narrowed_server_answers_initialize_with_the_version_it_serves() {
    let server = server([ProtocolVersion::V2025_06_18]);
    let mut conn = server.in_memory();
    let reply = initialize(&mut conn, ProtocolVersion::V2025_11_25).await;
    assert_eq!(reply["id"], json!(1), "{reply}");
    assert_eq!(
        reply["result"]["protocolVersion"],
        json!(ProtocolVersion::V2025_06_18.as_str()),
        "{reply}"
    );
}

#[tokio::test]
async fn an_unnarrowed_server_answers_initialize_with_the_version_asked() {
    // The contrast of the test above: by default 2025-11-25 is served, so it is the answer.
    let server = Server::builder("s", "1").build();
    let mut conn = server.in_memory();
    let reply = initialize(&mut conn, ProtocolVersion::V2025_11_25).await;
    assert_eq!(
        reply["result"]["protocolVersion"],
        json!(ProtocolVersion::V2025_11_25.as_str()),
        "{reply}"
    );
}

#[tokio::test]
async fn a_modern_only_server_refuses_a_legacy_initialize() {
    let server = server([ProtocolVersion::V2026_07_28]);
    let mut conn = server.in_memory();
    let reply = initialize(&mut conn, ProtocolVersion::V2025_06_18).await;
    assert_eq!(reply["id"], json!(1), "{reply}");
    assert!(reply.get("result").is_none(), "{reply}");
    assert_eq!(reply["error"]["code"], json!(-32022), "{reply}");
    assert_eq!(
        reply["error"]["data"]["supported"],
        json!([ProtocolVersion::V2026_07_28.as_str()]),
        "{reply}"
    );
}
