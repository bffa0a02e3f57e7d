//! A stdio MCP server for the end-to-end tests of `modelctx-stdio`: a `ServerSession` over this
//! process's stdin and stdout, with tools that misbehave on request.
//!
//! Flags: `--ignore-stdin-close` (keep running after stdin ends), `--ignore-sigterm`,
//! `--stderr-flood MIB` (write that much to stderr while serving), `--max-line BYTES`.
//!
//! Tools (`tools/call` by name): `echo {text}`, `slow {ms}`, `big {bytes}` (a text that long),
//! `exit {code}` (exits at once, without answering), `stderr {lines}`.
//! When the loop ends it writes `ended: <how>` to stderr and exits 0.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use modelctx_session::{IncomingRequest, ServerConfig, ServerSession};
use modelctx_stdio::{LineCodec, stdio_with_codec};
use modelctx_tests::stdio::{Handler, Reply, serve};
use modelctx_types::{ErrorCode, ErrorObject};
use serde_json::{Value, json};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        if flag("--ignore-sigterm") {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("a SIGTERM handler");
            tokio::spawn(async move {
                while term.recv().await.is_some() {
                    let _ = writeln!(std::io::stderr(), "ignoring SIGTERM");
                }
            });
        }
        if let Some(mib) = value("--stderr-flood") {
            std::thread::spawn(move || flood_stderr(mib));
        }
        let codec =
            value("--max-line").map_or_else(LineCodec::new, LineCodec::with_max_line_length);
        let (reader, writer) = stdio_with_codec(codec).expect("stdin and stdout");
        let _ = writeln!(
            std::io::stderr(),
            "direct: stdin {}, stdout {}",
            reader.get_ref().is_direct(),
            writer.get_ref().is_direct()
        );
        let session = ServerSession::new(ServerConfig::new(
            "stdio-test-server",
            "1.0.0",
            json!({"tools": {}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        ));
        let handler: Handler = Arc::new(|request| Box::pin(handle(request)));
        let ended = serve(session, reader, writer, handler).await;
        let _ = writeln!(std::io::stderr(), "ended: {ended:?}");
        if flag("--ignore-stdin-close") {
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
    });
}

/// Writes `mib` MiB to stderr: lines of every length, some far over any line limit.
fn flood_stderr(mib: usize) {
    let mut stderr = std::io::stderr().lock();
    let long = "x".repeat(100_000);
    let mut written = 0;
    let mut i = 0usize;
    while written < mib << 20 {
        let line = if i.is_multiple_of(50) {
            long.clone()
        } else {
            format!("flood line {i}")
        };
        if writeln!(stderr, "{line}").is_err() {
            return;
        }
        written += line.len() + 1;
        i += 1;
    }
    let _ = writeln!(stderr, "flood done");
}

fn text(s: impl Into<String>) -> Reply {
    Ok(json!({"content": [{"type": "text", "text": s.into()}]}))
}

async fn handle(request: IncomingRequest) -> Reply {
    let params: Value = request
        .params
        .as_deref()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null);
    match request.method.as_str() {
        "tools/list" => Ok(json!({"tools": [
            {"name": "echo", "inputSchema": {"type": "object"}},
            {"name": "slow", "inputSchema": {"type": "object"}},
            {"name": "big", "inputSchema": {"type": "object"}},
            {"name": "exit", "inputSchema": {"type": "object"}},
            {"name": "stderr", "inputSchema": {"type": "object"}},
        ]})),
        "tools/call" => {
            let args = &params["arguments"];
            let number = |key: &str| args[key].as_u64().unwrap_or(0);
            match params["name"].as_str().unwrap_or_default() {
                "echo" => text(args["text"].as_str().unwrap_or_default()),
                "slow" => {
                    tokio::time::sleep(Duration::from_millis(number("ms"))).await;
                    text("slept")
                }
                "big" => text("b".repeat(number("bytes") as usize)),
                "exit" => std::process::exit(number("code") as i32),
                "stderr" => {
                    let mut stderr = std::io::stderr().lock();
                    for i in 0..number("lines") {
                        let _ = writeln!(stderr, "stderr line {i}");
                    }
                    text("written")
                }
                other => Err(ErrorObject::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("unknown tool: {other}"),
                )),
            }
        }
        other => Err(ErrorObject::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("not served here: {other}"),
        )),
    }
}
