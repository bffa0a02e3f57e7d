//! Finding 11: a server that stops reading its input cannot make the client queue without bound:
//! at most 2048 messages wait to be written (a call beyond fails at once), and a write that waits
//! longer than the write timeout ends the connection.

use crate::common;

use std::time::Duration;

use common::{Era, builder, connect, full_capabilities};
use modelctx_client::{CallOptions, Client, CloseReason, Error, TransportError};
#[cfg(feature = "stdio")]
use modelctx_stdio::{LineCodec, LineReader, LineWriter};
use serde_json::json;

/// Starts `count` calls at once; their results as they end.
fn start_calls(
    client: &Client,
    count: usize,
) -> tokio::sync::mpsc::UnboundedReceiver<Result<(), Error>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..count {
        let (client, tx) = (client.clone(), tx.clone());
        tokio::spawn(async move {
            let options = CallOptions::new().timeout(Some(Duration::from_secs(120)));
            let argument = json!({"n": i, "padding": "x".repeat(1024)});
            let result = client.call_tool_with("echo", argument, options).await;
            let _ = tx.send(result.map(drop));
        });
    }
    rx
}

async fn next(results: &mut tokio::sync::mpsc::UnboundedReceiver<Result<(), Error>>) -> Error {
    tokio::time::timeout(Duration::from_secs(20), results.recv())
        .await
        .expect("a call ended in time")
        .expect("a result")
        .expect_err("no call can succeed: the server reads nothing")
}

#[tokio::test(start_paused = true)]
async fn finding_11_a_call_beyond_the_bounded_queue_fails_at_once() {
    let (client, _fake) = connect(
        Era::Legacy,
        builder().write_timeout(Duration::from_secs(600)),
        full_capabilities(),
    )
    .await;
    // The fake server reads nothing from now on. Calls time out, each leaving a cancellation
    // to write and room for another call: without a bound the queue would grow with every
    // round. With one, calls soon fail at once.
    let mut refused = 0;
    for _round in 0..4 {
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..1000 {
            let client = client.clone();
            calls.spawn(async move {
                let options = CallOptions::new().timeout(Some(Duration::from_millis(100)));
                let argument = json!({"n": i});
                client.call_tool_with("echo", argument, options).await
            });
        }
        let ended = tokio::time::timeout(Duration::from_secs(20), calls.join_all())
            .await
            .expect("every call ended in time");
        for result in ended {
            match result.expect_err("the server reads nothing") {
                Error::Timeout(_) => {}
                Error::Transport(TransportError::NotReading { queued }) => {
                    assert_eq!(queued, 2048);
                    refused += 1;
                }
                other => panic!("{other}"),
            }
        }
        if refused > 0 {
            break;
        }
    }
    assert!(refused > 0, "the queue was never full");
    assert!(
        !client.is_closed(),
        "the connection lives until the write timeout"
    );
    client.close().await;
}

#[tokio::test(start_paused = true)]
async fn finding_11_a_peer_that_takes_nothing_for_the_write_timeout_is_dead() {
    let (client, _fake) = connect(
        Era::Legacy,
        builder().write_timeout(Duration::from_millis(300)),
        full_capabilities(),
    )
    .await;
    let mut results = start_calls(&client, 300);
    for _ in 0..300 {
        match next(&mut results).await {
            Error::Closed(CloseReason::Transport(why)) => {
                assert!(why.contains("took no message"), "{why}")
            }
            // Those that found the queue full, if any, before the connection ended.
            Error::Transport(TransportError::NotReading { .. }) => {}
            other => panic!("{other}"),
        }
    }
    assert!(client.is_closed());
}

/// Over a byte stream (as over a child's stdin): a server that answers the handshake, then
/// reads nothing, blocks the writer's flush; after the write timeout the connection ends.
#[cfg(feature = "stdio")]
#[tokio::test]
async fn finding_11_a_stdio_server_that_stops_reading_ends_the_connection() {
    let (client_out, server_in) = tokio::io::duplex(4096);
    let (server_out, client_in) = tokio::io::duplex(4096);
    let server = tokio::spawn(async move {
        let mut reader = LineReader::new(server_in, LineCodec::new());
        let mut writer = LineWriter::new(server_out);
        // Answer `initialize`, take `notifications/initialized`, then read nothing more.
        loop {
            let line = reader.next_line().await.unwrap().unwrap().unwrap();
            let message: serde_json::Value = serde_json::from_str(line.as_str()).unwrap();
            match message["method"].as_str() {
                Some("initialize") => {
                    let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                        "protocolVersion": message["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "silent", "version": "1"}}});
                    writer.send(&answer).await.unwrap();
                }
                Some("server/discover") => {
                    let answer = json!({"jsonrpc": "2.0", "id": message["id"],
                        "error": {"code": -32601, "message": "Method not found"}});
                    writer.send(&answer).await.unwrap();
                }
                Some("notifications/initialized") => break,
                _ => {}
            }
        }
        // Keeps both ends open, reading nothing.
        std::future::pending::<()>().await;
        drop((reader, writer));
    });
    let client = tokio::time::timeout(
        Duration::from_secs(20),
        builder()
            .write_timeout(Duration::from_millis(300))
            .connect_lines(
                LineReader::new(client_in, LineCodec::new()),
                LineWriter::new(client_out),
            ),
    )
    .await
    .expect("connected in time")
    .expect("connected");
    // About 1 KiB each: the 4 KiB pipe fills at once.
    let mut results = start_calls(&client, 50);
    for _ in 0..50 {
        match next(&mut results).await {
            Error::Closed(CloseReason::Transport(why)) => {
                assert!(why.contains("read nothing"), "{why}")
            }
            other => panic!("{other}"),
        }
    }
    assert!(client.is_closed());
    server.abort();
}
