//! The `requestState` key ring (`ServerBuilder::state_sealer`): a modern round trip begun on one
//! server is retried on another built with the same ring, through a key rotation; a state sealed
//! under a key the ring does not hold is refused.

use crate::common;

use common::*;
use modelctx_server::{Context, InputError, NoArgs, Server, StateKey, StateSealer, Tool};
use modelctx_session::RequestError;
use modelctx_types::consts;
use serde_json::{Value, json};

/// Asks one question, then answers with the name given.
async fn ask_name(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    let answer = context.elicit("Your name?", schema).await?;
    let content = answer.content.unwrap_or_default();
    Ok(format!("hello {}", content["name"].as_str().unwrap_or("?")))
}

/// A key with id `id` whose secret is 32 bytes of `byte`: built anew each time, as each
/// process of a fleet builds it from the same configuration.
fn key(id: &str, byte: u8) -> StateKey {
    StateKey::new(id, vec![byte; 32]).unwrap()
}

fn server(sealer: StateSealer) -> Server {
    Server::builder("ring", "1")
        .tool(Tool::new("ask", ask_name))
        .state_sealer(sealer)
        .build()
}

/// A modern client of `server`.
async fn modern(server: &Server) -> Client {
    Client::connect(server, eras().remove(0).1).await
}

fn params() -> Value {
    json!({"name": "ask", "arguments": {}})
}

/// The first round of `ask` on `client`'s server: the params of its retry, answered "Ada", with
/// the `requestState` it was given.
async fn first_round(client: &mut Client) -> Value {
    let first = client
        .request(consts::ToolsCall::VALUE, params())
        .await
        .unwrap();
    assert_eq!(first["resultType"], "input_required", "{first}");
    let key = first["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let mut retry = params();
    retry["inputResponses"] = json!({ key: {"action": "accept", "content": {"name": "Ada"}} });
    retry["requestState"] = first["requestState"].clone();
    retry
}

/// The key id a sealed state names (`v1.<key id>.<body>.<mac>`).
fn key_id(retry: &Value) -> &str {
    retry["requestState"]
        .as_str()
        .unwrap()
        .split('.')
        .nth(1)
        .unwrap()
}

/// The retry `retry` on `client`'s server.
async fn retried(client: &mut Client, retry: Value) -> Result<Value, RequestError> {
    client.request(consts::ToolsCall::VALUE, retry).await
}

#[tokio::test]
async fn a_round_trip_begun_on_one_server_ends_on_another_with_the_same_ring() {
    // `state_key` is the one-key shorthand of `state_sealer`: the two interoperate.
    let a = Server::builder("ring", "1")
        .tool(Tool::new("ask", ask_name))
        .state_key(key("k1", 1))
        .build();
    let b = server(StateSealer::new(key("k1", 1)));
    let (mut on_a, mut on_b) = (modern(&a).await, modern(&b).await);

    let retry = first_round(&mut on_a).await;
    assert_eq!(key_id(&retry), "k1");
    let result = retried(&mut on_b, retry.clone()).await.unwrap();
    assert_eq!(text(&result), "hello Ada", "{result}");
    // And the other way round.
    let retry = first_round(&mut on_b).await;
    let result = retried(&mut on_a, retry).await.unwrap();
    assert_eq!(text(&result), "hello Ada", "{result}");

    // A server with its own random key (the default) refuses it: the ring is what is shared.
    let alone = Server::builder("ring", "1")
        .tool(Tool::new("ask", ask_name))
        .build();
    let retry = first_round(&mut on_a).await;
    let refused = retried(&mut modern(&alone).await, retry).await;
    assert_eq!(code(&refused), -32602);
    assert_message(&refused, "requestState was sealed with unknown key `k1`");
}

#[tokio::test]
async fn after_a_rotation_states_sealed_with_the_previous_key_still_open() {
    // A still runs the old ring; B has rotated: k2 current, k1 previous.
    let a = server(StateSealer::new(key("k1", 1)));
    let b = server(
        StateSealer::new(key("k2", 2))
            .with_previous(key("k1", 1))
            .unwrap(),
    );
    let (mut on_a, mut on_b) = (modern(&a).await, modern(&b).await);

    let retry = first_round(&mut on_a).await;
    assert_eq!(key_id(&retry), "k1");
    let result = retried(&mut on_b, retry).await.unwrap();
    assert_eq!(text(&result), "hello Ada", "{result}");

    // B seals with its current key, which A (not rotated yet) does not hold.
    let retry = first_round(&mut on_b).await;
    assert_eq!(key_id(&retry), "k2");
    let result = retried(&mut on_b, retry.clone()).await.unwrap();
    assert_eq!(text(&result), "hello Ada", "{result}");
    let refused = retried(&mut on_a, retry).await;
    assert_eq!(code(&refused), -32602);
    assert_message(&refused, "requestState was sealed with unknown key `k2`");
}

#[tokio::test]
async fn a_state_sealed_with_a_key_the_ring_does_not_hold_is_refused() {
    // The same id with another secret is not the same key: the MAC does not verify.
    let a = server(StateSealer::new(key("k1", 1)));
    let impostor = server(StateSealer::new(key("k1", 9)));
    // A ring that has dropped k1 after the rotation.
    let dropped = server(StateSealer::new(key("k2", 2)));
    let mut on_a = modern(&a).await;

    let retry = first_round(&mut on_a).await;
    let refused = retried(&mut modern(&dropped).await, retry.clone()).await;
    assert_eq!(code(&refused), -32602);
    assert_message(&refused, "requestState was sealed with unknown key `k1`");
    let refused = retried(&mut modern(&impostor).await, retry).await;
    assert_eq!(code(&refused), -32602);
    assert_message(&refused, "requestState failed its integrity check");
}

#[track_caller]
fn assert_message(answer: &Result<Value, RequestError>, expected: &str) {
    match answer {
        Err(RequestError::Remote(e)) => assert_eq!(e.message, expected, "{e:?}"),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}
