//! The load: `modelctx-client` clients of both eras calling the demo's tools, prompts and
//! resources over HTTP, checking every answer; and client restarts (a client dropped mid-call,
//! then a new one).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use modelctx_client::{Client, Elicited, ProtocolVersion};
use serde_json::json;

use crate::figures::Seen;
use crate::{Ctx, Rng};

/// A call of a load client that takes longer than this fails.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn era(modern: bool) -> &'static str {
    if modern { "modern" } else { "legacy" }
}

/// A client of the demo server, pinned to one era, that accepts every elicitation.
pub(crate) async fn connect(url: &str, modern: bool) -> Result<Client, String> {
    connect_tapped(url, modern, None).await
}

/// What [`connect_tapped`] calls with every message the client sends or receives.
pub(crate) type Tap = Arc<dyn Fn(modelctx_client::Direction, &str) + Send + Sync>;

/// [`connect`], with every message sent and received given to `tap` as well.
pub(crate) async fn connect_tapped(
    url: &str,
    modern: bool,
    tap: Option<Tap>,
) -> Result<Client, String> {
    let version = if modern {
        ProtocolVersion::V2026_07_28
    } else {
        ProtocolVersion::V2025_11_25
    };
    // Pooled connections are not reused once idle for half the server's header timeout (which
    // closes idle kept-alive connections): no request goes out on a connection being closed.
    let mut transport = modelctx_client::HttpConfig::default();
    transport.pool_idle_timeout = crate::server::HEADER_TIMEOUT / 2;
    let connect = Client::builder("soak", "1")
        .protocol_version(version)
        .request_timeout(Some(CALL_TIMEOUT))
        .handshake_timeout(CALL_TIMEOUT)
        .on_elicitation(|_| async {
            let mut content = modelctx_client::JsonObject::new();
            content.insert("confirm".into(), json!(true));
            Ok(Elicited::accept(content))
        });
    let connect = match tap {
        Some(tap) => connect.on_wire(move |direction, text| tap(direction, text)),
        None => connect,
    }
    .connect_http_with(url, transport);
    tokio::time::timeout(CALL_TIMEOUT + Duration::from_secs(5), connect)
        .await
        .map_err(|_| "connect: no outcome in time".to_owned())?
        .map_err(|e| format!("connect: {e}"))
}

/// How a load client reaches the server.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Via {
    /// Legacy (2025-11-25), directly.
    Legacy,
    /// Legacy, through the cutting proxy: its event streams are cut and it must resume them.
    LegacyThroughProxy,
    /// Modern (2026-07-28), directly.
    Modern,
}

/// One load client: calls until the deadline, then closes.
pub(crate) async fn client(ctx: Arc<Ctx>, via: Via, seed: u64) {
    let (era, modern, url) = match via {
        Via::Legacy => ("legacy", false, &ctx.url),
        Via::LegacyThroughProxy => ("legacy through the cutting proxy", false, &ctx.proxy_url),
        Via::Modern => ("modern", true, &ctx.url),
    };
    let client = match connect(url, modern).await {
        Ok(client) => client,
        Err(e) => return ctx.figures.call_failed(era, e),
    };
    let mut rng = Rng::new(seed);
    let mut n = 0u64;
    while Instant::now() < ctx.deadline {
        n += 1;
        match one_call(&ctx, &client, &mut rng, n).await {
            Ok(()) => ctx.figures.call_ok(era),
            Err(reason) => ctx.figures.call_failed(era, reason),
        }
    }
    client.close().await;
}

/// One call, its answer checked; the reason when it failed or was wrong.
pub(crate) async fn one_call(
    ctx: &Ctx,
    client: &Client,
    rng: &mut Rng,
    n: u64,
) -> Result<(), String> {
    let failed = |what: &'static str, e: modelctx_client::Error| format!("{what}: {e}");
    match rng.below(7) {
        0 => {
            let text = format!("soak {n}");
            let result = client
                .call_tool("echo", json!({"text": text}))
                .await
                .map_err(|e| failed("echo", e))?;
            expect("echo", result.text() == text, &result.text())
        }
        1 => {
            let a = n as f64;
            let result = client
                .call_tool("add", json!({"a": a, "b": 0.5}))
                .await
                .map_err(|e| failed("add", e))?;
            let sum = result
                .structured_content
                .as_ref()
                .and_then(|s| s["sum"].as_f64());
            expect("add", sum == Some(a + 0.5), &format!("{sum:?}"))
        }
        2 => {
            let steps = 1 + rng.below(4);
            let seen = Arc::new(Mutex::new(Seen::default()));
            let record = seen.clone();
            let options = modelctx_client::CallOptions::new().on_progress(move |p| {
                record
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .progress(p.progress);
            });
            let delay = 5 + rng.below(20);
            let result = client
                .call_tool_with(
                    "countdown",
                    json!({"steps": steps, "delay_ms": delay}),
                    options,
                )
                .await
                .map_err(|e| failed("countdown", e))?;
            let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(PoisonError::into_inner));
            ctx.figures.seen(&seen);
            expect(
                "countdown",
                result.text() == format!("liftoff after {steps} steps"),
                &result.text(),
            )?;
            // Every progress notification arrives before the result.
            expect(
                "countdown progress",
                seen.progress_count() == steps as usize,
                &format!("{} of {steps} notifications", seen.progress_count()),
            )
        }
        3 => {
            let result = client
                .read_resource("demo://readme")
                .await
                .map_err(|e| failed("resources/read", e))?;
            expect(
                "resources/read",
                result.contents.len() == 1,
                &format!("{} contents", result.contents.len()),
            )
        }
        4 => {
            let result = client
                .get_prompt("greet", &[("name", "Ada")])
                .await
                .map_err(|e| failed("prompts/get", e))?;
            expect(
                "prompts/get",
                result.messages.len() == 1,
                &format!("{} messages", result.messages.len()),
            )
        }
        5 => {
            let tools = client
                .list_all_tools()
                .await
                .map_err(|e| failed("tools/list", e))?;
            expect(
                "tools/list",
                tools.iter().any(|t| t.name == "countdown"),
                &format!("{} tools", tools.len()),
            )
        }
        _ => {
            // Elicitation: a request to the client (legacy) or an input_required round trip
            // (modern).
            let result = client
                .call_tool("confirm", json!({"action": "ship"}))
                .await
                .map_err(|e| failed("confirm", e))?;
            expect("confirm", result.text() == "ship: done", &result.text())
        }
    }
}

/// `Ok` when the answer is right; else the reason (the answer itself goes to stderr, so that
/// the reasons in the report stay few).
fn expect(what: &str, ok: bool, got: &str) -> Result<(), String> {
    if ok {
        return Ok(());
    }
    eprintln!("soak: {what}: a wrong answer: {got}");
    Err(format!("{what}: a wrong answer"))
}

/// The fault kind of [`restarts`].
pub(crate) const RESTART: &str = "client restart (dropped mid-call)";

/// Client restarts: a client starts a long call and is dropped (without closing) while it
/// runs; a new client then makes a call, which must succeed.
pub(crate) async fn restarts(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng::new(seed);
    while Instant::now() < ctx.deadline {
        let modern = rng.below(2) == 1;
        match connect(&ctx.url, modern).await {
            Ok(client) => {
                let call = tokio::spawn(async move {
                    client
                        .call_tool("countdown", json!({"steps": 10, "delay_ms": 50}))
                        .await
                });
                tokio::time::sleep(Duration::from_millis(50 + rng.below(300))).await;
                ctx.figures.fault(RESTART);
                let outcome = if call.is_finished() {
                    "the call ended before the drop"
                } else {
                    "dropped mid-call"
                };
                call.abort();
                let _ = call.await;
                ctx.figures
                    .outcome(RESTART, &format!("{} ({outcome})", era(modern)));
            }
            Err(e) => ctx
                .figures
                .call_failed(era(modern), format!("restart: {e}")),
        }
        // The new client.
        let modern = rng.below(2) == 1;
        let era = era(modern);
        match connect(&ctx.url, modern).await {
            Ok(client) => {
                match client.call_tool("echo", json!({"text": "again"})).await {
                    Ok(result) if result.text() == "again" => ctx.figures.call_ok(era),
                    Ok(_) => ctx
                        .figures
                        .call_failed(era, "restarted client: echo: a wrong answer".into()),
                    Err(e) => ctx
                        .figures
                        .call_failed(era, format!("restarted client: echo: {e}")),
                }
                client.close().await;
            }
            Err(e) => ctx
                .figures
                .call_failed(era, format!("restarted client: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(200 + rng.below(300))).await;
    }
}
