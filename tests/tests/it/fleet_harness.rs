//! The fleet harness itself (`modelctx_tests::fleet`), on the real binaries: Redis keeps what it
//! acknowledged across a `kill -9` and forgets it when restarted empty; nginx spreads modern
//! calls round-robin over three `mcx serve demo --http` instances, moves a refused connect to the
//! next one when an instance is killed, and takes a restarted one back after a reload.
//!
//! Without `redis-server`, `nginx` or a built `mcx`, each test says why and passes, unless
//! `MODELCTX_REQUIRE_FLEET` is set (`cargo xtask ci` sets it): then it fails.

use std::collections::BTreeMap;

use modelctx_client::{Client, Era, ProtocolVersion};
use modelctx_tests::fleet::{Access, Fleet, Redis, RespValue};
use modelctx_tests::http::within;
use modelctx_types::consts;
use serde_json::json;

/// Redis with AOF and `appendfsync always`: a key set before a `kill -9` is there after the
/// restart on the same port; after `restart_empty`, nothing is.
#[tokio::test]
async fn redis_keeps_an_acknowledged_key_across_kill_9_and_forgets_it_when_emptied() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    assert_eq!(redis.dbsize().await, 0);
    assert_eq!(
        redis.command(&["SET", "fleet:key", "kept"]).await,
        RespValue::Simple("OK".into())
    );
    assert_eq!(redis.dbsize().await, 1);
    assert!(redis.used_memory().await > 0);
    let url = redis.url();

    redis.kill().await;
    assert!(
        tokio::net::TcpStream::connect(redis.addr()).await.is_err(),
        "nothing listens once it is killed"
    );
    redis.restart().await;
    assert_eq!(redis.url(), url, "the same port");
    assert_eq!(
        redis.command(&["GET", "fleet:key"]).await.text().as_deref(),
        Some("kept"),
        "the AOF kept the acknowledged write"
    );
    assert_eq!(redis.dbsize().await, 1);

    redis.restart_empty().await;
    assert_eq!(redis.url(), url, "the same port");
    assert_eq!(redis.dbsize().await, 0);
    assert_eq!(redis.command(&["GET", "fleet:key"]).await, RespValue::Nil);
    // An error reply is a value, not a failure of the harness.
    assert!(matches!(
        redis.command(&["NO-SUCH-COMMAND"]).await,
        RespValue::Error(e) if e.starts_with("ERR")
    ));
}

/// A modern client (2026-07-28) connected to nginx.
async fn modern_client(url: &str) -> Client {
    let client = within(
        "connect through nginx",
        Client::builder("fleet", "1")
            .protocol_version(ProtocolVersion::V2026_07_28)
            .connect_http(url),
    )
    .await
    .expect("connected");
    assert_eq!(client.era(), Some(Era::Modern));
    client
}

/// `count` `echo` calls, each answered with its own text.
async fn echo_calls(client: &Client, label: &str, count: usize) {
    for i in 0..count {
        let text = format!("{label} {i}");
        let result = within(&text, client.call_tool("echo", json!({ "text": text })))
            .await
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(result.text(), text);
    }
}

fn is_call(access: &Access) -> bool {
    access.mcp_method == consts::ToolsCall::VALUE
}

/// How many of `calls` each upstream answered.
fn by_upstream(calls: &[Access]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for call in calls {
        let upstream = call.upstream().unwrap_or("-").to_owned();
        *counts.entry(upstream).or_insert(0) += 1;
    }
    counts
}

/// The modern era is stateless, so three plain instances (no Redis) behind nginx round-robin
/// already serve one client: nine calls reach all three; with one killed (`SIGKILL`), the next
/// six still succeed, as nginx moves the refused connect to another instance
/// (`proxy_next_upstream error`); restarted on a new port and nginx reloaded, it serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_spreads_modern_calls_and_moves_on_from_a_killed_instance() {
    let Some(mut fleet) = Fleet::start(3, &[]).await else {
        return;
    };
    let addrs: Vec<String> = fleet.addrs().iter().map(ToString::to_string).collect();
    let client = modern_client(&fleet.url()).await;

    echo_calls(&client, "round-robin", 9).await;
    let calls = fleet.nginx.wait_access(9, is_call).await;
    assert!(calls.iter().all(|c| c.status == 200), "{calls:#?}");
    let counts = by_upstream(&calls);
    for addr in &addrs {
        assert!(
            counts.get(addr).is_some_and(|&n| n > 0),
            "instance {addr} never used: {counts:?}"
        );
    }
    assert_eq!(counts.len(), 3, "only the three instances: {counts:?}");

    let dead = addrs[1].clone();
    fleet.kill9(1).await;
    assert!(!fleet.instances[1].is_running());
    echo_calls(&client, "after kill -9", 6).await;
    let calls = fleet.nginx.wait_access(15, is_call).await;
    let after = &calls[9..];
    assert!(after.iter().all(|c| c.status == 200), "{after:#?}");
    assert!(
        after.iter().all(|c| c.upstream() != Some(dead.as_str())),
        "the killed instance answered: {after:#?}"
    );
    assert!(
        after
            .iter()
            .any(|c| c.upstreams.len() > 1 && c.upstreams[0] == dead),
        "no call was moved on from the killed instance {dead}: {after:#?}"
    );

    // A new client: the reload ends the old worker, which closes the connections it kept alive.
    drop(client);
    fleet.restart(1).await;
    let revived = fleet.instances[1].addr().to_string();
    assert_ne!(revived, dead, "a new port");
    let mark = fleet.nginx.access_log().len();
    let client = modern_client(&fleet.url()).await;
    echo_calls(&client, "after restart", 3).await;
    fleet.nginx.wait_access(18, is_call).await;
    // Every request since the reload (the client's own, such as `tools/list`, take turns too):
    // one round of three reaches each instance.
    let since = &fleet.nginx.access_log()[mark..];
    assert!(since.len() >= 3, "{since:#?}");
    assert!(since.iter().all(|c| c.status == 200), "{since:#?}");
    assert!(
        since.iter().all(|c| !c.upstreams.contains(&dead)),
        "the reloaded nginx still tried the killed instance's old port: {since:#?}"
    );
    assert!(
        since.iter().any(|c| c.upstream() == Some(revived.as_str())),
        "the restarted instance {revived} was not used: {since:#?}\nnginx's errors:\n{}",
        std::fs::read_to_string(fleet.nginx.dir().join("error.log")).unwrap_or_default()
    );
    assert!(
        fleet.instances[1]
            .output()
            .iter()
            .any(|line| line.starts_with("mcx demo server: ")),
        "its stderr is kept"
    );
}
