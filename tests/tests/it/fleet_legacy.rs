//! Legacy (`initialize`) sessions of a fleet: three `mcx serve demo --http --redis` processes
//! sharing one Redis, behind nginx round-robin (no sticky sessions). A session opened on one
//! instance is served, and ended, by the others; a lost Redis gives its requests 503 with
//! `Retry-After` while modern (2026-07-28) requests, which need no Redis, go on; when Redis comes
//! back with its data (AOF) the same sessions are served again, with no restart of the
//! instances, and when it comes back empty they are unknown (404) and clients initialize again.
//!
//! Requests are sent straight to chosen instances (round-robin alone does not say which
//! instance gets which request), and through nginx by the modelctx client.
//!
//! Without `redis-server`, `nginx` or a built `mcx`, each test says why and passes, unless
//! `MODELCTX_REQUIRE_FLEET` is set (`cargo xtask ci` sets it): then it fails.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use modelctx_client::{Client, Era, ProtocolVersion};
use modelctx_tests::fleet::{Fleet, REDIS_URL, Redis, RespValue};
use modelctx_tests::http::{open_session, post, post_headers, raw_request, within};
use modelctx_types::consts;
use serde_json::{Value, json};

/// The key ring every instance is given (`--redis` needs one): id `t1`, bytes 0 to 31.
const SHARED_KEY: &str = "t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

/// The arguments of every instance: the fleet's Redis, the shared key ring.
const FLEET_ARGS: &[&str] = &["--redis", REDIS_URL, "--state-key", SHARED_KEY];

/// The legacy version the raw requests speak.
fn version() -> &'static str {
    ProtocolVersion::LATEST_LEGACY.as_str()
}

/// What an instance answered to a legacy POST.
#[derive(Debug)]
struct Reply {
    status: u16,
    retry_after: Option<String>,
    /// The JSON-RPC response: the JSON body, or the response on the SSE stream.
    answer: Option<Value>,
}

/// POSTs `message` for session `session` to the instance at `addr` and reads the answer: a JSON
/// body, or the SSE stream up to the response to `message` (notifications before it skipped).
async fn legacy(addr: SocketAddr, session: &str, message: &Value) -> Reply {
    let mut response = post(addr, &post_headers(Some(session), Some(version())), message).await;
    let retry_after = response.header("retry-after").map(str::to_owned);
    let status = response.status;
    let sse = response
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let answer = if status == 200 && sse {
        within("the response on the SSE stream", async {
            loop {
                let Some((_, value)) = response.next_message().await else {
                    break None;
                };
                if value.get("id") == message.get("id") {
                    break Some(value);
                }
            }
        })
        .await
    } else {
        let body = within("the body", response.body()).await;
        serde_json::from_slice(&body).ok()
    };
    Reply {
        status,
        retry_after,
        answer,
    }
}

/// A request `method` with `params`.
fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// `ping` for `session` on `addr`, answered with an empty result.
async fn ping_ok(addr: SocketAddr, session: &str, id: i64) {
    let reply = legacy(addr, session, &request(id, consts::Ping::VALUE, json!({}))).await;
    assert_eq!(reply.status, 200, "ping on {addr}: {reply:?}");
    assert_eq!(
        reply.answer.as_ref().map(|a| &a["result"]),
        Some(&json!({})),
        "ping on {addr}: {reply:?}"
    );
}

/// The keys of `redis` other than the instances' numbers and leases (`mcx:instances`,
/// `mcx:inst:N`): what sessions left there.
async fn session_keys(redis: &Redis) -> Vec<String> {
    let RespValue::Array(keys) = redis.command(&["KEYS", "*"]).await else {
        panic!("KEYS is an array");
    };
    keys.iter()
        .filter_map(RespValue::text)
        .filter(|k| k != "mcx:instances" && !k.starts_with("mcx:inst:"))
        .collect()
}

/// A legacy client connected through nginx.
async fn legacy_client(url: &str) -> Client {
    let client = within(
        "connect through nginx",
        Client::builder("fleet-legacy", "1")
            .protocol_version(ProtocolVersion::LATEST_LEGACY)
            .connect_http(url),
    )
    .await
    .expect("connected");
    assert_eq!(client.era(), Some(Era::Legacy));
    client
}

/// Scenario 1: `initialize` on A; `tools/list`, `ping` and `resources/subscribe` on B and C;
/// DELETE on C, after which A and B answer 404; Redis is left with the instances' leases only.
/// Then a modelctx client through nginx: its requests are spread over the instances, all
/// answered, and its DELETE at close leaves Redis as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_opened_on_one_instance_is_served_and_ended_by_the_others() {
    let Some(fleet) = Fleet::start(3, FLEET_ARGS).await else {
        return;
    };
    let [a, b, c] = fleet.addrs()[..] else {
        panic!("three instances")
    };
    // `mcx:instances` and the three leases.
    let leases = fleet.redis.dbsize().await;
    assert_eq!(leases, 4, "{:?}", fleet.redis.command(&["KEYS", "*"]).await);

    let session = within("initialize on A", open_session(a, version())).await;
    let mut id = 10;
    for addr in [b, c] {
        id += 1;
        let list = legacy(
            addr,
            &session,
            &request(id, consts::ToolsList::VALUE, json!({})),
        )
        .await;
        assert_eq!(list.status, 200, "tools/list on {addr}: {list:?}");
        let tools = &list.answer.as_ref().expect("an answer")["result"]["tools"];
        assert!(
            tools
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["name"] == "echo")),
            "tools/list on {addr}: {list:?}"
        );
        id += 1;
        ping_ok(addr, &session, id).await;
        id += 1;
        let subscribe = request(
            id,
            consts::ResourcesSubscribe::VALUE,
            json!({"uri": "demo://readme"}),
        );
        let subscribed = legacy(addr, &session, &subscribe).await;
        assert_eq!(
            subscribed.status, 200,
            "subscribe on {addr}: {subscribed:?}"
        );
        assert_eq!(
            subscribed.answer.as_ref().map(|a| &a["result"]),
            Some(&json!({})),
            "subscribe on {addr}: {subscribed:?}"
        );
    }
    assert!(
        !session_keys(&fleet.redis).await.is_empty(),
        "the session's state is in Redis"
    );

    let mut headers = post_headers(Some(&session), Some(version()));
    headers.retain(|(name, _)| *name != "Content-Type");
    let deleted = within(
        "DELETE on C",
        raw_request(c, "DELETE", "/mcp", &headers, b""),
    )
    .await;
    assert!(
        (200..300).contains(&deleted.status),
        "DELETE on C: {}",
        deleted.status
    );
    for addr in [a, b] {
        id += 1;
        let ping = legacy(addr, &session, &request(id, consts::Ping::VALUE, json!({}))).await;
        assert_eq!(
            ping.status, 404,
            "ping on {addr} after DELETE on C: {ping:?}"
        );
    }
    assert_eq!(session_keys(&fleet.redis).await, Vec::<String>::new());
    assert_eq!(fleet.redis.dbsize().await, leases);

    // The modelctx client through nginx: its requests go round-robin over the instances.
    let mark = fleet.nginx.access_log().len();
    let client = legacy_client(&fleet.url()).await;
    for i in 0..6 {
        let text = format!("through nginx {i}");
        let result = within(&text, client.call_tool("echo", json!({ "text": text })))
            .await
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(result.text(), text);
    }
    within("tools/list", client.list_tools(None))
        .await
        .expect("tools/list");
    within("close", client.close()).await;
    let is_call = |a: &modelctx_tests::fleet::Access| a.mcp_method == consts::ToolsCall::VALUE;
    let calls = fleet.nginx.wait_access(6, is_call).await;
    let log = fleet.nginx.access_log();
    let since = &log[mark..];
    let mut served: Vec<&str> = since.iter().filter_map(|a| a.upstream()).collect();
    served.sort_unstable();
    served.dedup();
    assert!(
        served.len() >= 2,
        "one session's requests reached several instances: {since:#?}"
    );
    assert!(calls.iter().all(|c| c.status == 200), "{calls:#?}");
    let ended = within("the session's keys removed", async {
        loop {
            let keys = session_keys(&fleet.redis).await;
            if keys.is_empty() {
                break keys;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(ended.is_empty());
    assert_eq!(fleet.redis.dbsize().await, leases);
}

/// `ping` for `session` on each of `addrs` until each is answered as `expected` (200 with a
/// result, or a status), at most `within_time`; returns how long it took.
async fn until_answered(
    addrs: &[SocketAddr],
    session: &str,
    expected: u16,
    within_time: Duration,
) -> Duration {
    let started = Instant::now();
    let mut id = 1000;
    for &addr in addrs {
        loop {
            id += 1;
            let reply = legacy(addr, session, &request(id, consts::Ping::VALUE, json!({}))).await;
            let done = reply.status == expected
                && (expected != 200
                    || reply.answer.as_ref().map(|a| &a["result"]) == Some(&json!({})));
            if done {
                break;
            }
            assert!(
                started.elapsed() < within_time,
                "ping on {addr} not answered {expected} within {within_time:?}: {reply:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    started.elapsed()
}

/// The `run_id` of the `redis-server` process answering (`INFO server`): a new one for each
/// start.
async fn run_id(redis: &Redis) -> String {
    let info = redis
        .command(&["INFO", "server"])
        .await
        .text()
        .expect("INFO is a bulk string");
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .unwrap_or_else(|| panic!("no run_id in INFO server:\n{info}"))
}

/// Whether a connection to `addr` is refused (nothing listens there).
async fn connect_refused(addr: SocketAddr) -> bool {
    within("a connect", tokio::net::TcpStream::connect(addr))
        .await
        .is_err()
}

/// Scenario 6: Redis killed (`kill -9`) mid-run. Legacy requests, on every instance, get 503 with
/// `Retry-After` (a new `initialize` too); modern calls through nginx go on. Redis restarted with
/// its AOF: the session is served again on every instance within 5 s, with no restart of the
/// instances. Restarted empty: the session is unknown (404), and a new `initialize` works.
///
/// That Redis really went and came back is checked too: its port refuses connections all the
/// while the 503s are answered, and each start is a new process (a new `run_id`), with the
/// session's state (AOF) or without it (emptied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_redis_gives_legacy_requests_503_and_modern_ones_go_on() {
    let Some(mut fleet) = Fleet::start(3, FLEET_ARGS).await else {
        return;
    };
    let addrs = fleet.addrs();
    let session = within("initialize on A", open_session(addrs[0], version())).await;
    ping_ok(addrs[1], &session, 1).await;
    let modern = within(
        "a modern client through nginx",
        Client::builder("fleet-modern", "1")
            .protocol_version(ProtocolVersion::V2026_07_28)
            .connect_http(&fleet.url()),
    )
    .await
    .expect("connected");

    let first_run = run_id(&fleet.redis).await;
    fleet.redis.kill().await;
    assert!(
        connect_refused(fleet.redis.addr()).await,
        "Redis is down (its port refuses connections)"
    );
    for (i, &addr) in addrs.iter().enumerate() {
        let started = Instant::now();
        let reply = legacy(addr, &session, &request(2, consts::Ping::VALUE, json!({}))).await;
        assert_eq!(reply.status, 503, "instance {i} with Redis down: {reply:?}");
        let retry = reply
            .retry_after
            .as_deref()
            .and_then(|r| r.parse::<u64>().ok());
        assert!(
            retry.is_some_and(|s| s >= 1),
            "instance {i}: Retry-After in seconds: {reply:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "instance {i} answered after {:?}",
            started.elapsed()
        );
    }
    let init = request(
        3,
        consts::Initialize::VALUE,
        json!({"protocolVersion": version(), "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}),
    );
    let refused = post(addrs[1], &post_headers(None, None), &init).await;
    assert_eq!(refused.status, 503, "initialize with Redis down");
    assert!(refused.header("retry-after").is_some());
    for i in 0..6 {
        let text = format!("redis down {i}");
        let result = within(&text, modern.call_tool("echo", json!({ "text": text })))
            .await
            .unwrap_or_else(|e| panic!("a modern call with Redis down: {e}"));
        assert_eq!(result.text(), text);
    }
    assert!(
        connect_refused(fleet.redis.addr()).await,
        "Redis stayed down while the requests above were answered"
    );

    fleet.redis.restart().await;
    let second_run = run_id(&fleet.redis).await;
    assert_ne!(first_run, second_run, "a new redis-server process");
    let state = format!("mcx:{{s:{session}}}:state");
    assert_eq!(
        fleet.redis.command(&["EXISTS", &state]).await.integer(),
        1,
        "the session's state came back with the AOF"
    );
    let took = until_answered(&addrs, &session, 200, Duration::from_secs(5)).await;
    eprintln!("served again {took:?} after the Redis restart");

    fleet.redis.restart_empty().await;
    assert_ne!(
        run_id(&fleet.redis).await,
        second_run,
        "a new redis-server process"
    );
    assert_eq!(
        fleet.redis.command(&["EXISTS", &state]).await.integer(),
        0,
        "an empty Redis"
    );
    until_answered(&addrs, &session, 404, Duration::from_secs(5)).await;
    let again = within("initialize again", open_session(addrs[2], version())).await;
    ping_ok(addrs[0], &again, 4).await;
}

/// Opens a legacy session on `addr` whose client declares sampling (and elicitation); returns
/// its id.
async fn open_sampling_session(addr: SocketAddr) -> String {
    let init = request(
        0,
        consts::Initialize::VALUE,
        json!({"protocolVersion": version(), "capabilities": {"sampling": {}, "elicitation": {}},
            "clientInfo": {"name": "raw", "version": "1"}}),
    );
    let response = post(addr, &post_headers(None, None), &init).await;
    assert_eq!(response.status, 200);
    let session = response
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    let body = within("the initialize result", response.json()).await;
    assert_eq!(body["result"]["protocolVersion"], version(), "{body}");
    let initialized = json!({"jsonrpc": "2.0", "method": consts::NotificationsInitialized::VALUE});
    let response = post(
        addr,
        &post_headers(Some(&session), Some(version())),
        &initialized,
    )
    .await;
    assert_eq!(response.status, 202);
    session
}

/// The instance numbers the fleet's instances leased from Redis, by index in the fleet: each
/// says its number on stderr as it starts (`mcx: joined the fleet on redis as instance N`).
fn instance_numbers(fleet: &Fleet) -> Vec<u64> {
    fleet
        .instances
        .iter()
        .map(|instance| {
            let output = instance.output();
            output
                .iter()
                .find_map(|line| {
                    line.strip_prefix("mcx: joined the fleet on redis as instance ")?
                        .split(' ')
                        .next()?
                        .parse()
                        .ok()
                })
                .unwrap_or_else(|| panic!("no instance number in {output:#?}"))
        })
        .collect()
}

/// The index in the fleet of the instance whose number is `number`.
fn by_number(numbers: &[u64], number: u64) -> usize {
    numbers
        .iter()
        .position(|n| *n == number)
        .unwrap_or_else(|| panic!("no instance has number {number}: {numbers:?}"))
}

/// The stream and the sequence number of an SSE event id (`STREAM-SEQ`).
fn event_id(id: &str) -> (u64, u64) {
    let (stream, seq) = id
        .split_once('-')
        .unwrap_or_else(|| panic!("an event id is STREAM-SEQ: {id}"));
    (
        stream.parse().expect("a stream id"),
        seq.parse().expect("a sequence number"),
    )
}

/// The number of the instance that opened stream `stream`: stream ids are `N << 32 | n`.
fn opener_of(stream: u64) -> u64 {
    stream >> 32
}

/// The number of the instance that asked a question: the server's request ids are
/// `N << 40 | n`.
fn asker_of(id: &Value) -> u64 {
    id.as_u64().expect("a server request id is a number") >> 40
}

/// Scenario 2: `haiku` (which asks the client's model: `sampling/createMessage`) POSTed through
/// nginx, which sends it to A; the client's answer POSTed through nginx, which sends it to B
/// (round-robin: the next instance); the call completes on A's stream with that answer.
///
/// This once failed: nginx's 202 for `notifications/initialized` came before A had saved the
/// session as initialized, so the call, loaded from the older state, queued its question
/// until an `initialized` that had come already, and its POST never got a response head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampling_answer_posted_to_another_instance_completes_the_call() {
    let Some(fleet) = Fleet::start(3, FLEET_ARGS).await else {
        return;
    };
    let numbers = instance_numbers(&fleet);
    let lb = fleet.nginx.addr();
    let session = open_sampling_session(lb).await;
    let call = request(
        7,
        consts::ToolsCall::VALUE,
        json!({"name": "haiku", "arguments": {"topic": "fleets"}}),
    );
    let mut stream = post(lb, &post_headers(Some(&session), Some(version())), &call).await;
    assert_eq!(stream.status, 200);
    let question = within("the sampling request on A's stream", async {
        loop {
            let (_, message) = stream.next_message().await.expect("the stream goes on");
            if message["method"] == consts::SamplingCreateMessage::VALUE {
                break message;
            }
        }
    })
    .await;
    let a = by_number(&numbers, asker_of(&question["id"]));
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {
        "role": "assistant", "model": "fleet-model", "stopReason": "endTurn",
        "content": {"type": "text", "text": "nodes come and go"}}});
    let posted = post(lb, &post_headers(Some(&session), Some(version())), &answer).await;
    assert_eq!(posted.status, 202, "the answer through nginx");
    // The POSTs answered 202: `notifications/initialized`, then the answer.
    let accepted = fleet
        .nginx
        .wait_access(2, |a| a.method == "POST" && a.status == 202)
        .await;
    let b = fleet
        .index_of(accepted[1].upstream().expect("an upstream"))
        .expect("an instance");
    assert_ne!(
        a, b,
        "the answer went to another instance than the call: {accepted:#?}"
    );
    let done = within("the call's response on A's stream", async {
        loop {
            let (_, message) = stream.next_message().await.expect("the stream goes on");
            if message["id"] == 7 {
                break message;
            }
        }
    })
    .await;
    assert_eq!(
        done["result"]["content"][0]["text"], "fleet-model wrote: nodes come and go",
        "{done}"
    );
}

/// The headers of a GET of session `session`'s stream; with `last`, a resumption after that
/// event id.
fn get_headers<'a>(session: &'a str, last: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", version()),
    ];
    if let Some(last) = last {
        headers.push(("Last-Event-ID", last));
    }
    headers
}

/// `unlock` (which adds the `secret` tool to the instance that runs it: its tool list changes)
/// on session `session` through nginx, answered.
async fn unlock(lb: SocketAddr, session: &str, id: i64) {
    let call = request(
        id,
        consts::ToolsCall::VALUE,
        json!({"name": "unlock", "arguments": {}}),
    );
    let reply = legacy(lb, session, &call).await;
    assert_eq!(reply.status, 200, "unlock: {reply:?}");
    assert_eq!(
        reply
            .answer
            .as_ref()
            .map(|a| &a["result"]["content"][0]["text"]),
        Some(&json!("unlocked the `secret` tool")),
        "unlock: {reply:?}"
    );
}

/// Scenario 3: the session's standalone stream (GET) held by C; `unlock` called on A (another
/// instance: round-robin through nginx) changes A's tool list, and `tools/list_changed`
/// reaches C's stream, once. A second change (`unlock` on B) arrives once as well; the session
/// ended (DELETE), C's stream ends, and it held those two notifications and nothing else,
/// each with its own event id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_change_caused_on_one_instance_reaches_the_get_stream_another_holds() {
    let Some(fleet) = Fleet::start(3, FLEET_ARGS).await else {
        return;
    };
    let numbers = instance_numbers(&fleet);
    let lb = fleet.nginx.addr();
    let session = within("initialize through nginx", open_session(lb, version())).await;
    let mut get = within(
        "the GET through nginx",
        raw_request(lb, "GET", "/mcp", &get_headers(&session, None), b""),
    )
    .await;
    assert_eq!(get.status, 200, "the GET");
    // Its priming event names the stream, whose id names the instance holding it.
    let priming = within("the GET's priming event", get.next_event())
        .await
        .expect("a priming event");
    let (standalone, _) = event_id(priming.id.as_deref().expect("the priming event's id"));
    let c = by_number(&numbers, opener_of(standalone));

    let mut events = Vec::new();
    let mut next_list_changed = async |events: &mut Vec<(String, Value)>, what: &str| {
        within(what, async {
            loop {
                let event = get.next_event().await.expect("C's stream goes on");
                let message: Value = serde_json::from_str(&event.data).expect("JSON");
                let id = event.id.expect("a stored event has an id");
                let listed = message["method"] == consts::NotificationsToolsListChanged::VALUE;
                events.push((id, message));
                if listed {
                    break;
                }
            }
        })
        .await;
    };
    unlock(lb, &session, 2).await;
    // initialize, initialized, unlock.
    let posts = fleet.nginx.wait_access(3, |a| a.method == "POST").await;
    let a = fleet
        .index_of(posts[2].upstream().expect("an upstream"))
        .expect("an instance");
    assert_ne!(
        a, c,
        "unlock ran on another instance than the GET's: {posts:#?}"
    );
    next_list_changed(&mut events, "tools/list_changed on C's stream").await;

    unlock(lb, &session, 3).await;
    let posts = fleet.nginx.wait_access(4, |a| a.method == "POST").await;
    let b = fleet
        .index_of(posts[3].upstream().expect("an upstream"))
        .expect("an instance");
    assert!(b != a && b != c, "the second unlock ran on B: {posts:#?}");
    next_list_changed(&mut events, "the second tools/list_changed on C's stream").await;

    let mut headers = post_headers(Some(&session), Some(version()));
    headers.retain(|(name, _)| *name != "Content-Type");
    let deleted = within(
        "DELETE through nginx",
        raw_request(lb, "DELETE", "/mcp", &headers, b""),
    )
    .await;
    assert!(
        (200..300).contains(&deleted.status),
        "DELETE: {}",
        deleted.status
    );
    within("C's stream ends with the session", async {
        while let Some(event) = get.next_event().await {
            let message = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            events.push((event.id.unwrap_or_default(), message));
        }
    })
    .await;
    let methods: Vec<&str> = events
        .iter()
        .map(|(_, m)| m["method"].as_str().unwrap_or("(not a notification)"))
        .collect();
    assert_eq!(
        methods,
        [consts::NotificationsToolsListChanged::VALUE; 2],
        "one notification per change, nothing else: {events:#?}"
    );
    let seqs: Vec<(u64, u64)> = events.iter().map(|(id, _)| event_id(id)).collect();
    assert!(
        seqs.iter().all(|(stream, _)| *stream == standalone) && seqs[0].1 < seqs[1].1,
        "both on C's stream, in order: {events:#?}"
    );
}

/// The events stored for stream `stream` of session `session` (`XRANGE` of its Redis stream):
/// each one's sequence number and data.
async fn stored_events(redis: &Redis, session: &str, stream: u64) -> Vec<(u64, String)> {
    let key = format!("mcx:{{s:{session}}}:ev:{stream}");
    let RespValue::Array(entries) = redis.command(&["XRANGE", &key, "-", "+"]).await else {
        panic!("XRANGE is an array");
    };
    entries
        .iter()
        .map(|entry| {
            let RespValue::Array(parts) = entry else {
                panic!("an entry is [id, fields]: {entry:?}");
            };
            let id = parts[0].text().expect("an entry id");
            let seq = id
                .strip_suffix("-0")
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("an entry id is SEQ-0: {id}"));
            let RespValue::Array(fields) = &parts[1] else {
                panic!("an entry's fields: {entry:?}");
            };
            let data = fields
                .chunks(2)
                .find(|pair| pair[0].text().as_deref() == Some("d"))
                .and_then(|pair| pair[1].text())
                .unwrap_or_else(|| panic!("an entry's data `d`: {entry:?}"));
            (seq, data)
        })
        .collect()
}

/// Scenario 4: `countdown` POSTed through nginx, running on A; after three of its progress
/// notifications A is killed (`kill -9`); the client resumes the stream through nginx with
/// `Last-Event-ID`, and another instance replays every event stored after it exactly once (the
/// ids, sequence numbers and data compared with what Redis holds for the stream: none missing,
/// none twice), then completes the call with an error once A's lease has run out (the call
/// itself died with A): an error, never silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_on_another_instance_after_kill_9_and_gets_every_stored_event_once() {
    let Some(mut fleet) = Fleet::start(3, FLEET_ARGS).await else {
        return;
    };
    let numbers = instance_numbers(&fleet);
    let lb = fleet.nginx.addr();
    let session = within("initialize through nginx", open_session(lb, version())).await;
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": consts::ToolsCall::VALUE, "params": {
        "name": "countdown", "arguments": {"steps": 20, "delay_ms": 300},
        "_meta": {"progressToken": "p9"}}});
    let mut stream = post(lb, &post_headers(Some(&session), Some(version())), &call).await;
    assert_eq!(stream.status, 200);
    // The events read before the kill: id and data (empty for the priming event).
    let mut before: Vec<(String, String)> = Vec::new();
    within("three progress notifications on A's stream", async {
        let mut progress = 0;
        while progress < 3 {
            let event = stream.next_event().await.expect("the stream goes on");
            let id = event.id.expect("every event of the stream is stored");
            if event.data.contains(consts::NotificationsProgress::VALUE) {
                progress += 1;
            }
            before.push((id, event.data));
        }
    })
    .await;
    let last = before.last().expect("events").0.clone();
    let (call_stream, last_seq) = event_id(&last);
    let a = by_number(&numbers, opener_of(call_stream));
    // A goes on: killed once it has stored an event more than the client read (which the
    // client then misses, and gets in the replay).
    let key = format!("mcx:{{s:{session}}}:ev:{call_stream}");
    within("A stores the next event", async {
        while fleet.redis.command(&["XLEN", &key]).await.integer() <= before.len() as i64 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let a_addr = fleet.instances[a].addr();
    fleet.kill9(a).await;
    drop(stream);

    let mut resumed = within(
        "the GET with Last-Event-ID through nginx",
        raw_request(lb, "GET", "/mcp", &get_headers(&session, Some(&last)), b""),
    )
    .await;
    assert_eq!(resumed.status, 200, "the resumption");
    // A's lease runs out (15 s after its last refresh), then the follower's next poll (1 s)
    // completes the call with an error.
    let mut after: Vec<(String, String)> = Vec::new();
    let orphaned = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = resumed.next_event().await {
            let id = event.id.expect("a replayed event has its id");
            after.push((id, event.data));
        }
    })
    .await;
    assert!(
        orphaned.is_ok(),
        "the resumed stream did not end within 30 s of the kill; it gave {after:#?}"
    );
    let via = fleet
        .nginx
        .wait_access(1, |a| a.method == "GET")
        .await
        .remove(0);
    assert_eq!(via.status, 200, "{via}");
    assert_ne!(
        via.upstream(),
        Some(a_addr.to_string().as_str()),
        "the resumption was served by another instance: {via}"
    );

    let (final_id, final_data) = after.last().expect("the stream gave events");
    let error: Value = serde_json::from_str(final_data).expect("JSON");
    assert_eq!(error["id"], 9, "the call is answered last: {error}");
    assert_eq!(error["error"]["code"], -32603, "{error}");
    assert_eq!(
        error["error"]["message"], "the instance running this request stopped",
        "{error}"
    );
    let stored = stored_events(&fleet.redis, &session, call_stream).await;
    let stored_after: Vec<(String, String)> = stored
        .iter()
        .filter(|(seq, _)| *seq > last_seq)
        .map(|(seq, data)| (format!("{call_stream}-{seq}"), data.clone()))
        .collect();
    assert_eq!(
        after, stored_after,
        "every stored event after {last}, once, in order, and nothing else"
    );
    assert_eq!(&stored_after.last().unwrap().0, final_id);
    let mut all: Vec<u64> = before
        .iter()
        .chain(&after)
        .map(|(id, _)| event_id(id).1)
        .collect();
    let read = all.len();
    all.dedup();
    assert_eq!(all.len(), read, "no event twice: {before:#?} {after:#?}");
    assert_eq!(
        all,
        stored.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        "the client has read the whole stream, as stored, in order"
    );
    assert!(
        after.len() >= 2,
        "an event A stored after the last one read is replayed, then the error: {after:#?}"
    );
}

/// Scenario 7, kill -9 of the standalone holder: list changes made after the kill reach the
/// client on its resumed GET. The session's standalone stream (GET through nginx) is held by A;
/// a change reaches it; A is killed (`kill -9`); the client resumes the GET through nginx with
/// the `Last-Event-ID` it last got, and another instance, B, takes the stream over at once (the
/// store's record names B's stream: no wait for A's lease to run out). Each `unlock` made after
/// that (through nginx, on the live instances) reaches the resumed GET, long before A's lease
/// (15 s) could have told anyone that A is dead; what the resumed GET got is exactly what Redis
/// holds for B's stream (none missed, none twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_standalone_holder_list_changes_after_it_reach_the_resumed_get() {
    let Some(mut fleet) = Fleet::start(3, FLEET_ARGS).await else {
        return;
    };
    let numbers = instance_numbers(&fleet);
    let lb = fleet.nginx.addr();
    let session = within("initialize through nginx", open_session(lb, version())).await;
    let mut get = within(
        "the GET through nginx",
        raw_request(lb, "GET", "/mcp", &get_headers(&session, None), b""),
    )
    .await;
    assert_eq!(get.status, 200, "the GET");
    let priming = within("the GET's priming event", get.next_event())
        .await
        .expect("a priming event");
    let (held, _) = event_id(priming.id.as_deref().expect("the priming event's id"));
    let a = by_number(&numbers, opener_of(held));
    unlock(lb, &session, 2).await;
    let last = within("tools/list_changed on A's stream", async {
        loop {
            let event = get.next_event().await.expect("A's stream goes on");
            if event
                .data
                .contains(consts::NotificationsToolsListChanged::VALUE)
            {
                break event.id.expect("a stored event has an id");
            }
        }
    })
    .await;
    assert_eq!(event_id(&last).0, held);

    fleet.kill9(a).await;
    let killed = Instant::now();
    within("A's stream ends with A", async {
        while get.next_event().await.is_some() {}
    })
    .await;
    let mut resumed = within(
        "the GET with Last-Event-ID through nginx",
        raw_request(lb, "GET", "/mcp", &get_headers(&session, Some(&last)), b""),
    )
    .await;
    assert_eq!(resumed.status, 200, "the resumption");
    // Nothing was stored on A's stream after `last`: the first event is the priming event of
    // the stream of the instance that took it over.
    let priming = within("the priming event of the new stream", resumed.next_event())
        .await
        .expect("a priming event");
    assert!(priming.data.is_empty(), "{priming:?}");
    let taken = priming.id.expect("the priming event's id");
    let (stream, _) = event_id(&taken);
    assert_ne!(opener_of(stream), numbers[a], "taken over from A: {taken}");
    let meta = format!("mcx:{{s:{session}}}:meta");
    assert_eq!(
        fleet.redis.command(&["HGET", &meta, "sa"]).await.text(),
        Some(stream.to_string()),
        "the record names the new stream"
    );
    assert_eq!(
        fleet
            .redis
            .command(&["HEXISTS", &meta, &format!("f:{held}")])
            .await
            .integer(),
        1,
        "A's stream is finished"
    );

    let mut got: Vec<(String, String)> = vec![(taken.clone(), String::new())];
    for id in 3..5 {
        unlock(lb, &session, id).await;
        within("tools/list_changed on the resumed GET", async {
            loop {
                let event = resumed.next_event().await.expect("the resumed GET goes on");
                let listed = event
                    .data
                    .contains(consts::NotificationsToolsListChanged::VALUE);
                got.push((event.id.expect("a stored event has an id"), event.data));
                if listed {
                    break;
                }
            }
        })
        .await;
    }
    assert!(
        killed.elapsed() < Duration::from_secs(14),
        "the changes reached the client before A's lease (15 s) could run out: {:?}",
        killed.elapsed()
    );
    // Every change of both unlocks (one or two each: `secret` removed, then added): read until
    // the resumed GET has all that Redis holds for its stream.
    let stored = || async {
        stored_events(&fleet.redis, &session, stream)
            .await
            .into_iter()
            .map(|(seq, data)| (format!("{stream}-{seq}"), data))
            .collect::<Vec<_>>()
    };
    let mut want = stored().await;
    within("every stored event on the resumed GET", async {
        while got.len() < want.len() {
            let event = resumed.next_event().await.expect("the resumed GET goes on");
            got.push((event.id.expect("a stored event has an id"), event.data));
            want = stored().await;
        }
    })
    .await;
    assert_eq!(
        got, want,
        "the resumed GET got B's stream as stored, once, in order"
    );
    assert!(
        got.iter()
            .skip(1)
            .all(|(_, data)| data.contains(consts::NotificationsToolsListChanged::VALUE)),
        "{got:#?}"
    );
}

/// Scenario 5: a slow `countdown` (20 steps of 500 ms) POSTed to A; `notifications/cancelled` for
/// it POSTed to B: A's handler stops, and its stream ends long before the 10 s the call would
/// take, without the `liftoff` result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_posted_to_another_instance_stops_the_call() {
    let Some(fleet) = Fleet::start(3, FLEET_ARGS).await else {
        return;
    };
    let [a, b, _] = fleet.addrs()[..] else {
        panic!("three instances")
    };
    let session = within("initialize on A", open_session(a, version())).await;
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": consts::ToolsCall::VALUE, "params": {
        "name": "countdown", "arguments": {"steps": 20, "delay_ms": 500},
        "_meta": {"progressToken": "p9"}}});
    let started = Instant::now();
    let mut stream = post(a, &post_headers(Some(&session), Some(version())), &call).await;
    assert_eq!(stream.status, 200);
    within("the first progress on A's stream", async {
        loop {
            let (_, message) = stream.next_message().await.expect("the stream goes on");
            if message["method"] == consts::NotificationsProgress::VALUE {
                break;
            }
        }
    })
    .await;
    let cancel = json!({"jsonrpc": "2.0", "method": consts::NotificationsCancelled::VALUE,
        "params": {"requestId": 9, "reason": "changed my mind"}});
    let posted = post(b, &post_headers(Some(&session), Some(version())), &cancel).await;
    assert_eq!(posted.status, 202, "the cancel on B");
    let rest = within("A's stream ends", async {
        let mut rest = Vec::new();
        while let Some((_, message)) = stream.next_message().await {
            rest.push(message);
        }
        rest
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the call ran to its end: {:?}, {rest:#?}",
        started.elapsed()
    );
    assert!(
        !rest.iter().any(|m| m["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("liftoff"))),
        "{rest:#?}"
    );
}
