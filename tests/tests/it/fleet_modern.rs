//! Modern (2026-07-28) clients of a fleet: three `mcx serve demo --http` processes behind nginx
//! round-robin. A multi-round-trip call (`confirm`: an elicitation answered through
//! `input_required` by the client's handler) has its first round served by one instance and its
//! retry by another: it succeeds when the instances share the `requestState` key ring
//! (`--state-key`), and the retry is refused with -32602 when each has a random key of its own.
//!
//! Without `redis-server`, `nginx` or a built `mcx`, each test says why and passes, unless
//! `MODELCTX_REQUIRE_FLEET` is set (`cargo xtask ci` sets it): then it fails.

use modelctx_client::{Client, Elicitation, Elicited, Era, Error, ProtocolVersion};
use modelctx_tests::fleet::{Access, Fleet};
use modelctx_tests::http::within;
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
