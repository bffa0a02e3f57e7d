//! The fleet scenarios driven by the TypeScript SDK clients (`tests/ts/fleet-clients.mjs`)
//! through nginx: three `mcx serve demo --http --redis` processes sharing one Redis and one
//! `requestState` key ring, behind nginx round-robin (no sticky sessions).
//!
//! - Legacy, `@modelcontextprotocol/sdk` 1.x (`StreamableHTTPClientTransport`): `initialize`
//!   lands on one instance and the calls (36, all answered) on the others too; `haiku`'s
//!   `sampling/createMessage` is answered by the client's handler with a POST that lands on
//!   another instance than the call; `unlock` called on each instance in turn (straight to it,
//!   not through nginx) reaches the client's GET stream once each, so twice from instances that
//!   do not hold that stream; the SDK's DELETE ends the session everywhere: a later call gets 404
//!   from every instance, and Redis keeps nothing of it. Then, with another session, the
//!   instance running a `countdown` call is killed (`kill -9`) after the client missed two of
//!   its progress notifications (dropped unread by the script): the SDK resumes the call's
//!   stream with `Last-Event-ID` through nginx, gets those it missed and none twice, and the
//!   call ends with the error for a lost call, not silence.
//! - Both, Redis killed (`kill -9`) and restarted with its data: the legacy client's calls get
//!   503 on every instance while it is down, the modern client's are answered; then the legacy
//!   session is served again, without a new `initialize`.
//! - Modern, `@modelcontextprotocol/client` 2.x pinned to 2026-07-28: its calls are spread over
//!   the three instances; a `subscriptions/listen` stream gets the list changes caused on every
//!   instance, so on two that do not hold it; `confirm`'s first round and its retry (after the
//!   client's elicitation handler answered the `input_required` result) are served by two
//!   different instances.
//!
//! The script and the test take turns, step by step (see the script's header): after each step
//! the test reads nginx's access log, which names the instance that served each request (the
//! legacy SDK sends no `Mcp-Method` header, so its requests are told apart by HTTP method,
//! status and step; the modern client sends it).
//!
//! Without Node and the packages of `tests/ts`, or without `redis-server`, `nginx` or a built
//! `mcx`, each test says why and passes, unless `MODELCTX_REQUIRE_NODE` or
//! `MODELCTX_REQUIRE_FLEET` is set (`cargo xtask ci` sets both): then it fails.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::Duration;

use modelctx_client::{Client, ProtocolVersion};
use modelctx_tests::fleet::{Access, Fleet, REDIS_URL, RespValue};
use modelctx_tests::http::{call, post, post_headers, within};
use modelctx_tests::node;
use modelctx_types::consts;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// The key ring every instance is given (`--redis` needs one): id `t1`, bytes 0 to 31.
const SHARED_KEY: &str = "t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

/// The arguments of every instance: the fleet's Redis, the shared key ring.
const FLEET_ARGS: &[&str] = &["--redis", REDIS_URL, "--state-key", SHARED_KEY];

/// How long one step of the script may take (36 calls through nginx on a busy machine).
const STEP_WITHIN: Duration = Duration::from_secs(60);

/// `node fleet-clients.mjs MODE URL`, taking turns with the test.
struct Script {
    mode: &'static str,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Script {
    /// Starts the script in `mode` (`legacy` or `modern`) against `url`; `None` when Node cannot
    /// start it ([`node::skipped`]).
    fn start(node: &str, mode: &'static str, url: &str) -> Option<Script> {
        let spawned = node::command(node, "fleet-clients.mjs")
            .args([mode, url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => return node::skipped(format!("{node} cannot be started: {e}")),
        };
        let stdin = child.stdin.take().expect("piped");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        Some(Script {
            mode,
            child,
            stdin,
            lines,
        })
    }

    /// Reads the script's next line, which must be the step `name`, and returns it.
    async fn step(&mut self, name: &str) -> Value {
        let mode = self.mode;
        let line = tokio::time::timeout(STEP_WITHIN, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("{mode}: no `{name}` step within {STEP_WITHIN:?}"))
            .expect("the script's stdout")
            .unwrap_or_else(|| panic!("{mode}: the script ended before its `{name}` step"));
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{mode}: not a JSON line: {line:?}: {e}"));
        assert_eq!(
            value["step"],
            name,
            "{mode}: {}",
            value["detail"].as_str().unwrap_or(&line)
        );
        value
    }

    /// Writes `line` on the script's stdin: `next`, or `expect N`.
    async fn tell(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("the script's stdin");
        self.stdin.flush().await.expect("the script's stdin");
    }

    /// Waits for the script to exit, which it must do with success.
    async fn finish(mut self) {
        let status = tokio::time::timeout(STEP_WITHIN, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{}: the script did not exit", self.mode))
            .expect("the script's status");
        assert!(
            status.success(),
            "{}: the script exited {status}",
            self.mode
        );
    }
}

/// Node, then the fleet (three instances with [`FLEET_ARGS`]), then the script in `mode`
/// against nginx; `None` when one of them is missing (said, and skipped).
async fn start(mode: &'static str) -> Option<(Fleet, Script)> {
    let node = node::node()?;
    let fleet = Fleet::start(3, FLEET_ARGS).await?;
    let script = Script::start(&node, mode, &fleet.url())?;
    Some((fleet, script))
}

/// The instance (its index in the fleet) that served `access`, which nginx did not move on
/// from one instance to another.
fn served_by(fleet: &Fleet, access: &Access) -> usize {
    assert_eq!(access.upstreams.len(), 1, "moved on: {access}");
    let upstream = access.upstream().expect("an upstream");
    fleet
        .index_of(upstream)
        .unwrap_or_else(|| panic!("{access} is not an instance of {:?}", fleet.addrs()))
}

/// Waits until nginx has logged exactly `count` requests that match (more is a failure: the
/// script said how many it sent), and returns them.
async fn logged(fleet: &Fleet, count: usize, matches: impl Fn(&Access) -> bool) -> Vec<Access> {
    let found = fleet.nginx.wait_access(count, &matches).await;
    assert_eq!(
        found.len(),
        count,
        "more requests than the script sent: {:#?}",
        fleet.nginx.access_log()
    );
    found
}

fn is_post(access: &Access) -> bool {
    access.method == "POST"
}

fn is_call(access: &Access) -> bool {
    access.mcp_method == consts::ToolsCall::VALUE
}

/// A number of a script's line.
#[track_caller]
fn count(value: &Value, field: &str) -> usize {
    value[field]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or_else(|| panic!("no {field} in {value}"))
}

/// Calls `unlock` on each instance in turn, straight to it (a modern request: no session), and
/// after each has the script wait for one more `tools/list_changed`, which must have come on
/// the stream `on` (`GET`, or `subscriptions/listen`), one for each unlock.
async fn unlock_each_and_expect(fleet: &Fleet, script: &mut Script, on: &str) {
    for (i, instance) in fleet.instances.iter().enumerate() {
        let client = within(
            "a modern client straight to an instance",
            Client::builder("fleet-ts-unlock", "1")
                .protocol_version(ProtocolVersion::V2026_07_28)
                .connect_http(&instance.url()),
        )
        .await
        .expect("connected");
        let unlocked = within("unlock", client.call_tool("unlock", json!({})))
            .await
            .expect("unlock");
        assert_eq!(unlocked.text(), "unlocked the `secret` tool");
        within("close", client.close()).await;

        script.tell(&format!("expect {}", i + 1)).await;
        let notified = script.step("notified").await;
        assert_eq!(
            count(&notified, "count"),
            i + 1,
            "one tools/list_changed for each unlock, after the unlock on instance {i}: \
             {notified}"
        );
        assert_eq!(
            notified["on"],
            json!({ on: i + 1 }),
            "every tools/list_changed came on the {on} stream: {notified}"
        );
    }
}

/// Legacy: initialize on one instance and calls on the others; a sampling answer POSTed to
/// another instance than its call; list changes caused on every instance reaching the GET
/// stream; DELETE ending the session everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_typescript_client_uses_a_fleet_through_nginx() {
    let Some((fleet, mut script)) = start("legacy").await else {
        return;
    };

    // initialize (200) and initialized (202), and the GET stream, open (logged when it ends).
    let connected = script.step("connected").await;
    let session = connected["session"]
        .as_str()
        .unwrap_or_else(|| panic!("a session id: {connected}"))
        .to_owned();
    let version = connected["protocolVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("a protocol version: {connected}"))
        .to_owned();
    assert_ne!(version, ProtocolVersion::V2026_07_28.as_str());
    let opening = logged(&fleet, 2, is_post).await;
    let initialize = opening
        .iter()
        .find(|a| a.status == 200)
        .unwrap_or_else(|| panic!("initialize answered 200: {opening:#?}"));
    assert!(
        opening.iter().any(|a| a.status == 202),
        "initialized accepted: {opening:#?}"
    );
    let opened_on = served_by(&fleet, initialize);

    // tools/list and 36 echo calls, all answered (the script checked each), by every instance.
    script.tell("next").await;
    let calls = script.step("calls").await;
    let sent = count(&calls, "posts");
    assert_eq!(count(&calls, "answered"), sent, "{calls}");
    let log = logged(&fleet, 2 + sent, is_post).await;
    let served: BTreeSet<usize> = log[2..]
        .iter()
        .map(|access| {
            assert_eq!(access.status, 200, "{access}");
            served_by(&fleet, access)
        })
        .collect();
    for other in (0..3).filter(|&i| i != opened_on) {
        assert!(
            served.contains(&other),
            "initialize on instance {opened_on}; instance {other} served none of the calls: \
             {log:#?}"
        );
    }

    // haiku: the call (200, its SSE stream) on one instance, the client's sampling answer (202)
    // on another.
    script.tell("next").await;
    let sampling = script.step("sampling").await;
    assert_eq!(
        count(&sampling, "posts"),
        2,
        "the call and the answer: {sampling}"
    );
    let log = logged(&fleet, 2 + sent + 2, is_post).await;
    let pair = &log[2 + sent..];
    let call_at = pair
        .iter()
        .find(|a| a.status == 200)
        .unwrap_or_else(|| panic!("the haiku call answered 200: {pair:#?}"));
    let answer_at = pair
        .iter()
        .find(|a| a.status == 202)
        .unwrap_or_else(|| panic!("the sampling answer accepted: {pair:#?}"));
    let (call_on, answer_on) = (served_by(&fleet, call_at), served_by(&fleet, answer_at));
    assert_ne!(
        call_on, answer_on,
        "round-robin sends the answer to another instance than the call: {pair:#?}"
    );

    // unlock on each instance: one tools/list_changed each, on the GET stream.
    script.tell("next").await;
    script.step("listening").await;
    unlock_each_and_expect(&fleet, &mut script, "GET").await;

    // DELETE through nginx, then the client closed.
    script.tell("next").await;
    let deleted = script.step("deleted").await;
    assert_eq!(deleted["session"], session.as_str(), "{deleted}");
    script.finish().await;
    let streams = logged(&fleet, 1, |a| a.method == "GET" && a.status == 200).await;
    let held_on = served_by(&fleet, &streams[0]);
    eprintln!(
        "initialize on instance {opened_on}, haiku on {call_on} answered on {answer_on}, \
         the GET stream on {held_on}: it got the list changes caused on all three"
    );
    let delete = logged(&fleet, 1, |a| a.method == "DELETE").await;
    assert!(
        (200..300).contains(&delete[0].status),
        "DELETE: {}",
        delete[0]
    );
    for (i, addr) in fleet.addrs().into_iter().enumerate() {
        let later = call(99, "echo", json!({"text": "too late"}));
        let response = post(addr, &post_headers(Some(&session), Some(&version)), &later).await;
        assert_eq!(
            response.status, 404,
            "a call after the DELETE on instance {i}"
        );
    }
    let pattern = format!("*{session}*");
    let left = within("the session's keys removed from Redis", async {
        loop {
            let RespValue::Array(keys) = fleet.redis.command(&["KEYS", &pattern]).await else {
                panic!("KEYS is an array");
            };
            if keys.is_empty() {
                break keys;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(left.is_empty());
}

/// The instance (its index in the fleet) running the one call of `session` that is under way:
/// the owner, in Redis, of the session's only stream that has pending requests and is not
/// finished, matched with the number each instance said it took when it joined.
async fn instance_running_the_call(fleet: &Fleet, session: &str) -> usize {
    let meta = format!("mcx:{{s:{session}}}:meta");
    let RespValue::Array(items) = fleet.redis.command(&["HGETALL", &meta]).await else {
        panic!("HGETALL is an array");
    };
    let texts: Vec<String> = items.iter().filter_map(RespValue::text).collect();
    let fields: BTreeMap<&str, &str> = texts
        .chunks(2)
        .map(|pair| (pair[0].as_str(), pair[1].as_str()))
        .collect();
    let running: Vec<&str> = fields
        .iter()
        .filter_map(|(field, pending)| Some((field.strip_prefix("p:")?, *pending)))
        .filter(|(stream, pending)| {
            *pending != "[]" && !fields.contains_key(format!("f:{stream}").as_str())
        })
        .map(|(stream, _)| stream)
        .collect();
    let [stream] = running[..] else {
        panic!("one stream under way in {meta}: {fields:#?}")
    };
    let owner = fields[format!("o:{stream}").as_str()];
    let joined = format!("mcx: joined the fleet on redis as instance {owner} (");
    fleet
        .instances
        .iter()
        .position(|instance| instance.output().iter().any(|l| l.starts_with(&joined)))
        .unwrap_or_else(|| panic!("no instance took the number {owner}"))
}

/// Legacy, `kill -9` of the instance running a call: the SDK resumes the call's stream with
/// `Last-Event-ID` through nginx (which sends the GET to a live instance), gets every stored
/// progress notification it missed, none twice, and then the error for the lost call (once the
/// dead instance's lease has run out), not silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_typescript_client_resumes_a_call_whose_instance_was_killed() {
    let Some((mut fleet, mut script)) = start("resume").await else {
        return;
    };
    let connected = script.step("connected").await;
    let session = connected["session"]
        .as_str()
        .unwrap_or_else(|| panic!("a session id: {connected}"))
        .to_owned();
    script.tell("next").await;
    let running = script.step("running").await;
    let victim = instance_running_the_call(&fleet, &session).await;
    fleet.kill9(victim).await;
    script.tell("next").await;
    let resumed = script.step("resumed").await;
    script.finish().await;

    let progress: Vec<u64> = resumed["progress"]
        .as_array()
        .unwrap_or_else(|| panic!("progress: {resumed}"))
        .iter()
        .map(|p| {
            p.as_u64()
                .unwrap_or_else(|| panic!("a whole number: {resumed}"))
        })
        .collect();
    let before_kill = running["progress"].as_array().map_or(0, Vec::len);
    let missed = count(&running, "missed");
    assert!(
        progress.len() >= before_kill + missed,
        "the progress notifications missed before the kill came with the resumption: \
         {running} {resumed}"
    );
    let expected: Vec<u64> = (1..=progress.len() as u64).collect();
    assert_eq!(
        progress, expected,
        "every stored progress notification once, in order: {resumed}"
    );
    assert_eq!(
        resumed["error"]["code"],
        json!(-32603),
        "the lost call ends with an error: {resumed}"
    );
    assert!(
        resumed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the instance running this request stopped")),
        "{resumed}"
    );
    assert!(
        resumed["resumes"]
            .as_array()
            .is_some_and(|r| r.contains(&json!(200))),
        "a GET with Last-Event-ID, through nginx, resumed the stream: {resumed}"
    );
    eprintln!(
        "the call ran on instance {victim}, killed after {before_kill} progress notifications \
         and {missed} missed; {} in all after the resumption, then the error",
        progress.len()
    );
}

/// Redis killed (`kill -9`) under both TypeScript clients: the legacy one's calls get 503 on
/// every instance, the modern one's are answered; Redis restarted with its data (AOF): the legacy
/// session is served again within 10 s, without a new `initialize`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_clients_see_redis_lost_and_back() {
    let Some((mut fleet, mut script)) = start("redis").await else {
        return;
    };
    script.step("connected").await;
    fleet.redis.kill().await;
    script.tell("next").await;
    let refused = script.step("refused").await;
    assert_eq!(
        refused["refused"],
        json!([503, 503, 503]),
        "legacy calls on each instance with Redis down: {refused}"
    );
    assert_eq!(count(&refused, "modern"), 6, "{refused}");
    fleet.redis.restart().await;
    script.tell("next").await;
    let served = script.step("served").await;
    script.finish().await;
    assert_eq!(
        served["requests"]["POST initialize"], 1,
        "the same session, not a new one: {served}"
    );
    eprintln!(
        "the legacy session served again {} ms after the Redis restart ({} tries)",
        served["after"], served["tries"]
    );
}

/// Modern: calls spread over the instances; a multi-round-trip retry served by another
/// instance than its first round; a listen stream getting the list changes caused on every
/// instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_modern_typescript_client_uses_a_fleet_through_nginx() {
    let Some((fleet, mut script)) = start("modern").await else {
        return;
    };
    script.step("connected").await;

    // 36 echo calls, all answered (the script checked each), by all three instances.
    script.tell("next").await;
    let calls = script.step("calls").await;
    let sent = count(&calls, "answered");
    let log = logged(&fleet, sent, is_call).await;
    let served: BTreeSet<usize> = log
        .iter()
        .map(|access| {
            assert_eq!(access.status, 200, "{access}");
            served_by(&fleet, access)
        })
        .collect();
    assert_eq!(
        served,
        BTreeSet::from([0, 1, 2]),
        "the calls were spread over the three instances: {log:#?}"
    );

    // confirm: the first round (input_required) and the retry, on two instances.
    script.tell("next").await;
    let confirm = script.step("confirm").await;
    assert_eq!(confirm["text"], "deploy: done", "{confirm}");
    let log = logged(&fleet, sent + 2, is_call).await;
    let rounds = &log[sent..];
    for round in rounds {
        assert_eq!(round.status, 200, "{round}");
    }
    let (first, retry) = (served_by(&fleet, &rounds[0]), served_by(&fleet, &rounds[1]));
    assert_ne!(
        first, retry,
        "round-robin sends the retry to another instance than the first round: {rounds:#?}"
    );

    // unlock on each instance: one tools/list_changed each, on the listen stream.
    script.tell("next").await;
    script.step("listening").await;
    unlock_each_and_expect(&fleet, &mut script, consts::SubscriptionsListen::VALUE).await;
    script.tell("next").await;
    script.step("done").await;
    script.finish().await;
    let listen = logged(&fleet, 1, |a| {
        a.mcp_method == consts::SubscriptionsListen::VALUE
    })
    .await;
    let held_on = served_by(&fleet, &listen[0]);
    eprintln!(
        "confirm on instance {first}, retried on {retry}; the listen stream on {held_on}: it \
         got the list changes caused on all three"
    );
}
