//! A scripted stdio peer for the client's stdio tests: no session, no facade, raw lines in and
//! out, so it can do what no real server does.
//!
//! It answers `initialize` with the version asked for (a 2025-11-25 server with tools), `ping`
//! with `{}`, and `tools/call` by name: `echo {text}` says the text back, `big {bytes}` answers
//! with a text that long on one line (over any client's line limit). Notifications are read and
//! dropped; any other request gets -32601. It exits 0 when stdin ends.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

fn main() {
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let (Some(id), Some(method)) = (message.get("id"), message["method"].as_str()) else {
            continue; // a notification or a response
        };
        let params = &message["params"];
        let outcome = match method {
            "initialize" => Ok(json!({
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stdio-peer", "version": "1.0.0"},
            })),
            "ping" => Ok(json!({})),
            "tools/call" => {
                let args = &params["arguments"];
                match params["name"].as_str() {
                    Some("echo") => Ok(text(args["text"].as_str().unwrap_or_default())),
                    Some("big") => {
                        let bytes = args["bytes"].as_u64().unwrap_or(0);
                        Ok(text(&"b".repeat(usize::try_from(bytes).unwrap_or(0))))
                    }
                    _ => Err(json!({"code": -32602, "message": "unknown tool"})),
                }
            }
            _ => Err(json!({"code": -32601, "message": "Method not found"})),
        };
        let reply = match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        };
        if writeln!(stdout, "{reply}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
}

fn text(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}
