//! Modern (2026-07-28) clients of a fleet: three `mcx serve demo --http` processes behind nginx
//! round-robin. A `subscriptions/listen` stream held by one instance hears the changes made on
//! another (through the fleet's Redis bus). A multi-round-trip call (`confirm`: an elicitation answered through
//! `input_required` by the client's handler) has its first round served by one instance and its
//! retry by another: it succeeds when the instances share the `requestState` key ring
//! (`--state-key`), and the retry is refused with -32602 when each has a random key of its own.
//!
//! Without `redis-server`, `nginx` or a built `mcx`, each test says why and passes, unless
//! `MODELCTX_REQUIRE_FLEET` is set (`cargo xtask ci` sets it): then it fails.

use modelctx_client::{Client, Elicitation, Elicited, Era, Error, ProtocolVersion};
use modelctx_tests::fleet::{Access, Fleet, REDIS_URL};
use modelctx_tests::http::{modern_call, modern_headers, modern_meta, post, within};
use modelctx_types::{ErrorCode, consts};
use serde_json::json;

/// The key ring every instance of the sharing fleet is given: one key, id `t1`, a 32-byte secret
/// (bytes 0 to 31) in base64url.
const SHARED_KEY: &str = "t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

/// A modern client connected to nginx, whose elicitation handler accepts every form with
/// `confirm: true`.
async fn modern_client(url: &str) -> Client {
    let client = within(
        "connect through nginx",
        Client::builder("fleet-modern", "1")
            .protocol_version(ProtocolVersion::V2026_07_28)
            .on_elicitation(|elicitation| async move {
                match elicitation {
                    Elicitation::Form { .. } => Ok(Elicited::accept(
                        json!({"confirm": true}).as_object().cloned().unwrap(),
                    )),
                    _ => Ok(Elicited::decline()),
                }
            })
            .connect_http(url),
    )
    .await
    .expect("connected");
    assert_eq!(client.era(), Some(Era::Modern));
    client
}

/// `confirm` through nginx, and the instances (indexes in the fleet) that served its rounds, in
/// order, read from nginx's access log: they must be two, the first round and its retry, on two
/// different instances.
async fn confirm_across_instances(
    fleet: &Fleet,
) -> (
    Result<modelctx_client::model::CallToolResult, Error>,
    Vec<usize>,
) {
    let client = modern_client(&fleet.url()).await;
    let outcome = within(
        "confirm",
        client.call_tool("confirm", json!({"action": "deploy"})),
    )
    .await;
    let is_call = |a: &Access| a.mcp_method == consts::ToolsCall::VALUE;
    let rounds = fleet.nginx.wait_access(2, is_call).await;
    let log = fleet.nginx.access_log();
    assert_eq!(rounds.len(), 2, "one round and one retry: {log:#?}");
    let served: Vec<usize> = rounds
        .iter()
        .map(|round| {
            assert_eq!(round.status, 200, "{log:#?}");
            assert_eq!(round.upstreams.len(), 1, "nothing was moved on: {log:#?}");
            fleet
                .index_of(round.upstream().unwrap())
                .unwrap_or_else(|| panic!("{round} is not an instance: {log:#?}"))
        })
        .collect();
    assert_ne!(
        served[0], served[1],
        "round-robin sends the retry to another instance than the first round: {log:#?}"
    );
    (outcome, served)
}

/// With one `--state-key` on all three, the retry is opened by an instance that did not seal
/// its state; without (a random key per process), that instance refuses it. Both fleets run at
/// once, to stay quick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_trip_retried_on_another_instance_needs_the_shared_key_ring() {
    let (sharing, alone) = tokio::join!(
        Fleet::start(3, &["--state-key", SHARED_KEY]),
        Fleet::start(3, &[]),
    );
    let (Some(sharing), Some(alone)) = (sharing, alone) else {
        return;
    };

    let ((shared, _), (refused, _)) = tokio::join!(
        confirm_across_instances(&sharing),
        confirm_across_instances(&alone),
    );
    let result = shared.expect("the retry is accepted by the other instance");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(result.text(), "deploy: done", "{result:?}");

    match refused {
        Err(Error::Remote(error)) => {
            assert_eq!(error.code, ErrorCode::INVALID_PARAMS, "{error:?}");
            // Every process's random key has the id `local`, each with its own secret.
            assert_eq!(
                error.message, "requestState failed its integrity check",
                "{error:?}"
            );
        }
        other => panic!("expected -32602 for the retry on another instance, got {other:?}"),
    }
}

/// A `subscriptions/listen` stream POSTed through nginx, held by A; `unlock` (which changes the
/// tool list of the instance that runs it) POSTed through nginx, run by B (round-robin: the
/// next instance): A's stream hears `notifications/tools/list_changed`, which B's change
/// reached A by (the fleet's Redis bus); and so does it for a change on C.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_on_one_instance_hears_changes_made_on_another() {
    let Some(fleet) = Fleet::start(3, &["--redis", REDIS_URL, "--state-key", SHARED_KEY]).await
    else {
        return;
    };
    let lb = fleet.nginx.addr();
    let listen = json!({"jsonrpc": "2.0", "id": 1, "method": consts::SubscriptionsListen::VALUE,
        "params": {"notifications": {"toolsListChanged": true}, "_meta": modern_meta()}});
    let mut stream = post(
        lb,
        &modern_headers(consts::SubscriptionsListen::VALUE, None),
        &listen,
    )
    .await;
    assert_eq!(stream.status, 200, "listen through nginx");
    let (_, ack) = within("the listen acknowledged", stream.next_message())
        .await
        .expect("an acknowledgement");
    assert_eq!(
        ack["method"],
        consts::NotificationsSubscriptionsAcknowledged::VALUE,
        "{ack}"
    );

    let mut unlocked_on = Vec::new();
    for id in [2, 3] {
        let headers = modern_headers(consts::ToolsCall::VALUE, Some("unlock"));
        let reply = post(lb, &headers, &modern_call(id, "unlock", json!({}))).await;
        assert_eq!(reply.status, 200, "unlock through nginx");
        let reply = within("unlock's answer", reply.json()).await;
        assert_eq!(
            reply["result"]["content"][0]["text"], "unlocked the `secret` tool",
            "{reply}"
        );
        let is_call = |a: &Access| a.mcp_method == consts::ToolsCall::VALUE;
        let calls = fleet
            .nginx
            .wait_access(unlocked_on.len() + 1, is_call)
            .await;
        let upstream = calls
            .last()
            .and_then(Access::upstream)
            .expect("an upstream");
        unlocked_on.push(fleet.index_of(upstream).expect("an instance"));
        let (_, heard) = within(
            "tools/list_changed on the listen stream",
            stream.next_message(),
        )
        .await
        .expect("the listen stream goes on");
        assert_eq!(
            heard["method"],
            consts::NotificationsToolsListChanged::VALUE,
            "{heard}"
        );
    }
    // nginx logs the listen once its stream has ended.
    drop(stream);
    let is_listen = |a: &Access| a.mcp_method == consts::SubscriptionsListen::VALUE;
    let listens = fleet.nginx.wait_access(1, is_listen).await;
    let held_by = fleet
        .index_of(listens[0].upstream().expect("an upstream"))
        .expect("an instance");
    assert!(
        unlocked_on.iter().all(|i| *i != held_by),
        "the changes were made on other instances ({unlocked_on:?}) than the listen's ({held_by})"
    );
    assert_ne!(unlocked_on[0], unlocked_on[1], "{unlocked_on:?}");
}
