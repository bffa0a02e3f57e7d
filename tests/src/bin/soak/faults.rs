//! The fault injectors, raw HTTP/1.1 and TCP on 127.0.0.1: streams cut mid-call (legacy ones
//! resumed with `Last-Event-ID`, every event id and progress value checked for duplicates and
//! losses), slow readers, slowloris and idle sockets up to a cap, garbage bodies, and
//! `initialize` floods. Each loops until the deadline; every step is bounded in time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::figures::Seen;
use crate::raw::{self, LEGACY, within};
use crate::{Ctx, Rng};

pub(crate) const CUT_LEGACY: &str = "stream cut mid-call (legacy, then resumed)";
pub(crate) const CUT_MODERN: &str = "stream cut mid-call (modern)";
pub(crate) const SLOW_READER: &str = "slow reader";
pub(crate) const SLOWLORIS: &str = "slowloris socket (headers 1 byte at a time)";
pub(crate) const IDLE: &str = "idle socket (opened, silent)";
pub(crate) const GARBAGE: &str = "garbage request";
pub(crate) const FLOOD: &str = "initialize flood (sessions never used)";

/// The most slowloris and idle sockets open at once.
pub(crate) const SOCKET_CAP: usize = 200;
/// How long a slowloris or idle socket is held at most.
const SOCKET_HOLD: Duration = Duration::from_secs(6);
/// `initialize` requests per flood burst, and the pause between bursts.
const FLOOD_BURST: usize = 40;
const FLOOD_PAUSE: Duration = Duration::from_secs(2);
/// How long a slow reader reads before it gives up.
const SLOW_READ_FOR: Duration = Duration::from_secs(5);

/// What one SSE message is.
enum Message {
    Progress(f64),
    Response(Value),
    Other,
}

fn classify(data: &str) -> Message {
    let Ok(value) = serde_json::from_str::<Value>(data) else {
        return Message::Other;
    };
    if value["method"] == "notifications/progress" {
        return value["params"]["progress"]
            .as_f64()
            .map_or(Message::Other, Message::Progress);
    }
    if value.get("id").is_some() && (value.get("result").is_some() || value.get("error").is_some())
    {
        return Message::Response(value);
    }
    Message::Other
}

/// Streams cut mid-call in the legacy era, then resumed.
pub(crate) async fn cut_and_resume(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut id = 0;
    while Instant::now() < ctx.deadline {
        id += 1;
        if let Err(e) = within("cut and resume", Duration::from_secs(40), async {
            cut_and_resume_once(&ctx, &mut rng, id).await
        })
        .await
        {
            ctx.figures.anomaly(CUT_LEGACY, &e);
        }
        tokio::time::sleep(Duration::from_millis(rng.below(100))).await;
    }
}

async fn cut_and_resume_once(ctx: &Ctx, rng: &mut Rng, id: u64) -> raw::Result<()> {
    let addr = ctx.addr;
    let session = raw::open_session(addr).await?;
    let steps = 4 + rng.below(6) as u32;
    let call = raw::countdown_call(id, steps, 30, false);
    let mut response = raw::request(
        addr,
        "POST",
        &raw::legacy_headers(Some(&session)),
        call.to_string().as_bytes(),
    )
    .await?;
    if response.status != 200
        || !response
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"))
    {
        return Err(format!(
            "the call was answered {} {:?}, not with a stream",
            response.status,
            response.header("content-type")
        ));
    }
    let cut_after = 1 + rng.below(u64::from(steps) - 1) as usize;
    let mut seen = Seen::default();
    let mut last_id = None;
    while seen.progress_count() < cut_after {
        let event = response
            .next_event()
            .await?
            .ok_or("the stream ended before the cut")?;
        if let Some(event_id) = &event.id {
            seen.event(event_id);
            last_id = Some(event_id.clone());
        }
        match classify(&event.data) {
            Message::Progress(p) => seen.progress(p),
            Message::Response(_) => return Err("the answer came before the cut".into()),
            Message::Other => {}
        }
    }
    // The fault: the connection is dropped in the middle of the call.
    drop(response);
    ctx.figures.fault(CUT_LEGACY);
    let last = last_id.ok_or("no event id before the cut (2025-11-25 streams have ids)")?;
    let headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", LEGACY),
        ("Last-Event-ID", last.as_str()),
    ];
    let mut resumed = raw::request(addr, "GET", &headers, b"").await?;
    if resumed.status != 200 {
        let status = resumed.status;
        let body = resumed.body().await.unwrap_or_default();
        return Err(format!(
            "resuming answered {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    let mut replayed = 0;
    let answer = loop {
        let event = resumed
            .next_event()
            .await?
            .ok_or("the resumed stream ended before the answer")?;
        replayed += 1;
        if let Some(event_id) = &event.id {
            seen.event(event_id);
        }
        match classify(&event.data) {
            Message::Progress(p) => seen.progress(p),
            Message::Response(value) if value["id"] == id => break value,
            _ => {}
        }
    };
    drop(resumed);
    ctx.figures.resumed(replayed);
    ctx.figures.seen(&seen);
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    if text != format!("liftoff after {steps} steps") {
        return Err(format!("a wrong answer after resuming: {answer}"));
    }
    if seen.progress_count() != steps as usize {
        return Err(format!(
            "events lost: {} of {steps} progress notifications across the cut",
            seen.progress_count()
        ));
    }
    ctx.figures.outcome(CUT_LEGACY, "resumed, every event once");
    raw::end_session(addr, &session).await
}

/// Streams of modern requests cut mid-call (the server cancels the request).
pub(crate) async fn cut_modern(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut id = 0;
    while Instant::now() < ctx.deadline {
        id += 1;
        let result = within("modern cut", Duration::from_secs(30), async {
            let call = raw::countdown_call(id, 8, 30, true);
            let mut response = raw::request(
                ctx.addr,
                "POST",
                &raw::modern_call_headers("countdown"),
                call.to_string().as_bytes(),
            )
            .await?;
            if response.status != 200 {
                return Err(format!("the call was answered {}", response.status));
            }
            let cut_after = 1 + rng.below(3);
            for _ in 0..cut_after {
                response
                    .next_event()
                    .await?
                    .ok_or("the stream ended before the cut")?;
            }
            drop(response);
            Ok(())
        })
        .await;
        match result {
            Ok(()) => {
                ctx.figures.fault(CUT_MODERN);
                ctx.figures.outcome(CUT_MODERN, "cut after 1 to 3 events");
            }
            Err(e) => ctx.figures.anomaly(CUT_MODERN, &e),
        }
        tokio::time::sleep(Duration::from_millis(50 + rng.below(200))).await;
    }
}

/// Slow readers: a call with progress whose stream is read 16 bytes at a time, or a large
/// answer read 1 KiB at a time, 20 to 80 ms apart; each reader gives up after
/// [`SLOW_READ_FOR`].
pub(crate) async fn slow_readers(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut id = 0;
    while Instant::now() < ctx.deadline {
        id += 1;
        let pause = Duration::from_millis(20 + rng.below(60));
        let result = match rng.below(3) {
            0 => slow_stream(&ctx, id, false, pause).await,
            1 => slow_stream(&ctx, id, true, pause).await,
            _ => slow_big_answer(&ctx, id, pause).await,
        };
        match result {
            Ok(outcome) => {
                ctx.figures.fault(SLOW_READER);
                ctx.figures.outcome(SLOW_READER, outcome);
            }
            Err(e) => ctx.figures.anomaly(SLOW_READER, &e),
        }
        tokio::time::sleep(Duration::from_millis(rng.below(200))).await;
    }
}

/// A countdown of 20 steps whose event stream is read slowly.
async fn slow_stream(
    ctx: &Ctx,
    id: u64,
    modern: bool,
    pause: Duration,
) -> raw::Result<&'static str> {
    let session = if modern {
        None
    } else {
        Some(raw::open_session(ctx.addr).await?)
    };
    let call = raw::countdown_call(id, 20, 10, modern);
    let headers = if modern {
        raw::modern_call_headers("countdown")
    } else {
        raw::legacy_headers(session.as_deref())
    };
    let mut response =
        raw::request(ctx.addr, "POST", &headers, call.to_string().as_bytes()).await?;
    if response.status != 200 {
        return Err(format!("the call was answered {}", response.status));
    }
    let started = Instant::now();
    let mut finished = false;
    let mut ended_by_server = false;
    while started.elapsed() < SLOW_READ_FOR {
        let left = SLOW_READ_FOR.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, response.next_event_reading(16, pause)).await {
            Ok(Ok(Some(event))) => {
                if let Message::Response(_) = classify(&event.data) {
                    finished = true;
                    break;
                }
            }
            // The server may disconnect a reader that falls too far behind (`stream_buffer`).
            Ok(Ok(None)) => {
                ended_by_server = true;
                break;
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => break,
        }
    }
    drop(response);
    if let Some(session) = session {
        raw::end_session(ctx.addr, &session).await?;
    }
    if ended_by_server {
        return Ok(if modern {
            "modern event stream: ended by the server before the answer"
        } else {
            "legacy event stream: ended by the server before the answer"
        });
    }
    Ok(match (modern, finished) {
        (false, true) => "legacy event stream: read to the end",
        (false, false) => "legacy event stream: gave up (the session is then ended)",
        (true, true) => "modern event stream: read to the end",
        (true, false) => "modern event stream: gave up (the request is cancelled)",
    })
}

/// An `echo` of 512 KiB whose answer is read slowly (modern: no session).
async fn slow_big_answer(ctx: &Ctx, id: u64, pause: Duration) -> raw::Result<&'static str> {
    let text = "x".repeat(512 * 1024);
    let mut call = raw::countdown_call(id, 0, 0, true);
    call["params"]["name"] = "echo".into();
    call["params"]["arguments"] = serde_json::json!({"text": text});
    let mut response = raw::request(
        ctx.addr,
        "POST",
        &raw::modern_call_headers("echo"),
        call.to_string().as_bytes(),
    )
    .await?;
    if response.status != 200 {
        return Err(format!("the call was answered {}", response.status));
    }
    Ok(if response.read_slowly(1024, pause, SLOW_READ_FOR).await? {
        "512 KiB answer: read to the end"
    } else {
        "512 KiB answer: gave up"
    })
}

/// Slowloris and idle sockets: opened at a steady pace up to [`SOCKET_CAP`] at once, each held
/// for at most [`SOCKET_HOLD`] (and not past the deadline), then closed.
pub(crate) async fn sockets(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng::new(seed);
    let cap = Arc::new(Semaphore::new(SOCKET_CAP));
    let mut holders = JoinSet::new();
    while Instant::now() < ctx.deadline {
        let Ok(permit) = cap.clone().acquire_owned().await else {
            break;
        };
        let slowloris = rng.below(2) == 0;
        let ctx2 = ctx.clone();
        holders.spawn(async move {
            let kind = if slowloris { SLOWLORIS } else { IDLE };
            let until = (Instant::now() + SOCKET_HOLD).min(ctx2.deadline);
            match hold(ctx2.addr, slowloris, until).await {
                Ok(outcome) => {
                    ctx2.figures.fault(kind);
                    ctx2.figures.outcome(kind, outcome);
                }
                Err(e) => ctx2.figures.anomaly(kind, &e),
            }
            drop(permit);
        });
        tokio::time::sleep(Duration::from_millis(15)).await;
        while holders.try_join_next().is_some() {}
    }
    while holders.join_next().await.is_some() {}
}

/// Holds one socket until `until`; what became of it.
async fn hold(addr: SocketAddr, slowloris: bool, until: Instant) -> raw::Result<&'static str> {
    let mut stream = raw::connect(addr).await?;
    let header = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ");
    let mut sent = 0usize;
    let mut buf = [0u8; 1024];
    loop {
        let now = Instant::now();
        if now >= until {
            return Ok("held until the injector closed it");
        }
        let wait = if slowloris {
            Duration::from_millis(200).min(until - now)
        } else {
            until - now
        };
        match tokio::time::timeout(wait, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Ok("closed by the server"),
            Ok(Ok(_)) => return Ok("answered by the server (then closed by the injector)"),
            Err(_) => {}
        }
        if slowloris {
            // The request line and `Host` at once, then one more header byte each time.
            let next = if sent == 0 {
                header.as_bytes().to_vec()
            } else {
                b"a".to_vec()
            };
            if stream.write_all(&next).await.is_err() {
                return Ok("closed by the server");
            }
            sent += next.len();
        }
    }
}

/// The garbage requests, each with the status it must get.
const GARBAGE_KINDS: &[(&str, u16)] = &[
    ("invalid JSON", 400),
    ("JSON that is not JSON-RPC", 400),
    ("binary body", 400),
    ("wrong Content-Type", 415),
    ("Content-Length of 1 TB", 413),
    ("unknown session id", 404),
    // No answer: the injector drops the connection while the server waits for the rest.
    ("body shorter than its Content-Length", 0),
];

/// Garbage requests: bad bodies, bad headers, lying lengths.
pub(crate) async fn garbage(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng::new(seed);
    while Instant::now() < ctx.deadline {
        let (what, expected) = GARBAGE_KINDS[rng.below(GARBAGE_KINDS.len() as u64) as usize];
        ctx.figures.fault(GARBAGE);
        match within(
            what,
            Duration::from_secs(20),
            garbage_once(ctx.addr, what, &mut rng),
        )
        .await
        {
            Ok(0) if expected == 0 => {
                ctx.figures
                    .outcome(GARBAGE, &format!("{what}: dropped by the injector"));
            }
            Ok(status) if status == expected => {
                ctx.figures
                    .outcome(GARBAGE, &format!("{what}: answered {status} as it must"));
            }
            Ok(status) => ctx.figures.anomaly(
                GARBAGE,
                &format!("{what}: answered {status}, not {expected}"),
            ),
            Err(e) => ctx.figures.anomaly(GARBAGE, &format!("{what}: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(20 + rng.below(60))).await;
    }
}

/// Sends one garbage request; its status (0: none was expected and the connection was dropped).
async fn garbage_once(addr: SocketAddr, what: &str, rng: &mut Rng) -> raw::Result<u16> {
    let json = raw::legacy_headers(None);
    let response = match what {
        "invalid JSON" => {
            raw::request(
                addr,
                "POST",
                &json,
                br#"{"jsonrpc": "2.0", "id": 1, "method": "#,
            )
            .await?
        }
        "JSON that is not JSON-RPC" => {
            raw::request(addr, "POST", &json, br#"{"hello": [1, 2, 3]}"#).await?
        }
        "binary body" => {
            let body: Vec<u8> = (0..256).map(|_| rng.below(256) as u8).collect();
            raw::request(addr, "POST", &json, &body).await?
        }
        "wrong Content-Type" => {
            let headers = [
                ("Content-Type", "text/plain"),
                ("Accept", "application/json, text/event-stream"),
            ];
            let body = raw::initialize(1).to_string();
            raw::request(addr, "POST", &headers, body.as_bytes()).await?
        }
        "Content-Length of 1 TB" => {
            let mut headers = json.clone();
            headers.push(("Content-Length", "1000000000000"));
            raw::request(addr, "POST", &headers, b"{\"jsonrpc\":").await?
        }
        "unknown session id" => {
            let mut headers = json.clone();
            headers.push(("Mcp-Session-Id", "00000000000000000000000000000000"));
            headers.push(("MCP-Protocol-Version", LEGACY));
            let body = r#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"#;
            raw::request(addr, "POST", &headers, body.as_bytes()).await?
        }
        _ => {
            // A body cut short: the connection is dropped while the server waits for the rest.
            let mut stream = raw::connect(addr).await?;
            let head = format!(
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
                 Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n\
                 {{\"jsonrpc\": \"2.0\""
            );
            stream
                .write_all(head.as_bytes())
                .await
                .map_err(|e| format!("writing: {e}"))?;
            tokio::time::sleep(Duration::from_millis(50)).await;
            return Ok(0);
        }
    };
    let status = response.status;
    // Read the answer (bounded) so that the server's side of the exchange completes.
    let _ = response.body().await;
    Ok(status)
}

/// `initialize` floods: bursts of sessions that are never used (the server ends them when they
/// have been idle for its `session_idle_timeout`).
pub(crate) async fn floods(ctx: Arc<Ctx>) {
    let mut next_id = 0u64;
    while Instant::now() < ctx.deadline {
        let mut burst = JoinSet::new();
        for _ in 0..FLOOD_BURST {
            next_id += 1;
            let (addr, id) = (ctx.addr, next_id);
            burst.spawn(async move {
                let body = raw::initialize(id).to_string();
                let response =
                    raw::request(addr, "POST", &raw::legacy_headers(None), body.as_bytes()).await?;
                let status = response.status;
                let _ = response.body().await;
                Ok::<u16, String>(status)
            });
        }
        while let Some(done) = burst.join_next().await {
            ctx.figures.fault(FLOOD);
            match done.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(200) => ctx.figures.outcome(FLOOD, "session opened, never used"),
                // Refused by a session limit: 503 (`max_sessions`), or 429 or 503 by a limit
                // per peer.
                Ok(status @ (429 | 503)) => {
                    ctx.figures
                        .outcome(FLOOD, &format!("refused {status} (a session limit)"));
                }
                Ok(other) => ctx.figures.anomaly(FLOOD, &format!("answered {other}")),
                Err(e) => ctx.figures.anomaly(FLOOD, &e),
            }
        }
        tokio::time::sleep(FLOOD_PAUSE).await;
    }
}
