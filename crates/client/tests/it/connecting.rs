//! Connecting: the connect timeout bounds the handshake as a whole and names the step that got
//! no answer; input that is not JSON-RPC (a stdio server's stray line) reaches the application
//! and the connection goes on.

use crate::common;

use std::time::Duration;

use modelctx_client::{Client, ConnectError};
use modelctx_types::consts::{Initialize, ServerDiscover};

/// Connects to a server that reads everything and answers nothing; how connecting ended, and
/// after how long (on the paused clock).
async fn against_a_silent_server(
    builder: modelctx_client::ClientBuilder,
) -> (Result<Client, ConnectError>, Duration) {
    let (fake, to_server, from_server) = common::pair();
    let silent = tokio::spawn(async move {
        // Holds the server's ends open, reading and answering nothing.
        let _fake = fake;
        std::future::pending::<()>().await
    });
    let start = tokio::time::Instant::now();
    let connected = builder.connect_channels(to_server, from_server).await;
    let waited = start.elapsed();
    silent.abort();
    (connected, waited)
}

#[tokio::test(start_paused = true)]
async fn the_connect_timeout_ends_a_silent_handshake_and_names_the_step() {
    let builder = Client::builder("t", "1").connect_timeout(Some(Duration::from_secs(2)));
    let (connected, waited) = against_a_silent_server(builder).await;
    match connected {
        Err(ConnectError::Timeout { waited, step, .. }) => {
            assert_eq!(waited, Duration::from_secs(2));
            // The probe is still waiting (its own timeout is 30 s).
            assert_eq!(step, ServerDiscover::VALUE);
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(waited <= Duration::from_millis(2100), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn by_default_connecting_takes_at_most_twice_the_handshake_timeout() {
    // 30 s for the probe, then 30 s for `initialize`: 60 s in all.
    let (connected, waited) = against_a_silent_server(Client::builder("t", "1")).await;
    match connected {
        Err(ConnectError::Timeout { waited, step, .. }) => {
            assert_eq!(waited, Duration::from_secs(60));
            assert_eq!(step, Initialize::VALUE);
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(waited <= Duration::from_millis(60_100), "{waited:?}");
    // A longer handshake timeout (a server that builds itself first) lengthens it.
    let builder = Client::builder("t", "1").handshake_timeout(Duration::from_secs(300));
    let (connected, _) = against_a_silent_server(builder).await;
    assert!(
        matches!(connected, Err(ConnectError::Timeout { waited, .. }) if waited == Duration::from_secs(600))
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_connect_timeout_each_step_keeps_its_own() {
    let builder = Client::builder("t", "1")
        .handshake_timeout(Duration::from_secs(3))
        .connect_timeout(None);
    let (connected, waited) = against_a_silent_server(builder).await;
    // The probe gave up after 3 s, `initialize` after 3 more.
    assert!(
        matches!(connected, Err(ConnectError::Timeout { waited, step, .. }) if waited == Duration::from_secs(3) && step == Initialize::VALUE)
    );
    assert!(
        waited >= Duration::from_secs(6) && waited <= Duration::from_millis(6100),
        "{waited:?}"
    );
}

#[cfg(feature = "stdio")]
mod lines {
    use std::sync::{Arc, Mutex};

    use modelctx_client::{Client, ServerNotification, Unreadable};
    use modelctx_stdio::{LineCodec, LineReader, LineWriter};
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// A legacy line server on a byte stream that first prints `banner` lines, then answers the
    /// handshake and `ping`, with `junk` written before the answer to `ping`.
    async fn line_server(
        stream: tokio::io::DuplexStream,
        banner: Vec<String>,
        junk: Vec<u8>,
    ) -> std::io::Result<()> {
        let (read, mut write) = tokio::io::split(stream);
        for line in banner {
            write.write_all(format!("{line}\n").as_bytes()).await?;
        }
        let mut lines = BufReader::new(read).lines();
        while let Some(line) = lines.next_line().await? {
            let message: Value = serde_json::from_str(&line).expect("JSON from the client");
            let Some(id) = message.get("id").cloned() else {
                continue;
            };
            let answer = match message["method"].as_str() {
                Some("initialize") => json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "serverInfo": {"name": "lines", "version": "1"},
                }}),
                Some("ping") => {
                    write.write_all(&junk).await?;
                    json!({"jsonrpc": "2.0", "id": id, "result": {}})
                }
                _ => {
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}})
                }
            };
            write.write_all(format!("{answer}\n").as_bytes()).await?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn lines_that_are_not_json_rpc_are_reported_and_the_connection_goes_on() {
        let (client_end, server_end) = tokio::io::duplex(1 << 16);
        let long = format!("\u{e9}{}", "x".repeat(400));
        let banner = vec!["Server v1 starting...".to_owned(), long.clone()];
        let mut junk = b"{\"not\": \"json-rpc\"}\n".to_vec();
        junk.extend_from_slice(b"\xff\xfe not UTF-8\n");
        let server = tokio::spawn(line_server(server_end, banner, junk));
        let seen: Arc<Mutex<Vec<Unreadable>>> = Arc::default();
        let seen_by_callback = seen.clone();
        let (read, write) = tokio::io::split(client_end);
        let client = Client::builder("t", "1")
            .on_notification(move |n| {
                if let ServerNotification::Unreadable(u) = n {
                    seen_by_callback.lock().unwrap().push(u.clone());
                }
            })
            .connect_lines(
                LineReader::new(read, LineCodec::new()),
                LineWriter::new(write),
            )
            .await
            .expect("connects despite the banner");
        client.ping().await.expect("ping answered after the junk");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert_eq!(seen[0].excerpt, "Server v1 starting...");
        assert!(!seen[0].truncated);
        assert!(!seen[0].reason.is_empty());
        // The first 200 characters of a long line (characters, not bytes).
        assert_eq!(
            seen[1].excerpt,
            long.chars()
                .take(Unreadable::EXCERPT_CHARS)
                .collect::<String>()
        );
        assert!(seen[1].truncated);
        // JSON that is no JSON-RPC message is shown as well; a line that is not text is not.
        assert_eq!(seen[2].excerpt, "{\"not\": \"json-rpc\"}");
        assert_eq!(seen[3].excerpt, "");
        assert!(seen[3].reason.contains("UTF-8"), "{:?}", seen[3]);
        client.close().await;
        server.await.unwrap().unwrap();
    }
}
