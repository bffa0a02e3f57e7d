//! The README's server (`src/bin/readme-server.rs`, the README's block to the character) run as
//! a user runs it: over HTTP on the address of its first argument, called with the modelctx
//! client, stopped with SIGTERM (it exits 0 within the shutdown grace); and with `--stdio`.

use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use modelctx_client::{Client, ServerCommand};
use serde_json::json;

const SERVER: &str = env!("CARGO_BIN_EXE_readme-server");

/// A port nothing listens on (bound, then released, for the server to take).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Calls `add` with 1 and 2 and returns its text.
async fn one_plus_two(client: &Client) -> String {
    let result = client
        .call_tool("add", json!({"a": 1, "b": 2}))
        .await
        .expect("add answers");
    result.text()
}

/// SIGTERM to `pid`, as `kill` (or a service manager) sends it.
fn terminate(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -TERM {pid}: {status}");
}

#[tokio::test]
async fn the_readme_server_serves_http_on_its_argument_until_sigterm() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = tokio::process::Command::new(SERVER)
        .arg(&addr)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the README server starts");
    let url = format!("http://{addr}/mcp");
    let started = Instant::now();
    let client = loop {
        match Client::builder("readme", "1.0.0").connect_http(&url).await {
            Ok(client) => break client,
            Err(e) => {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("the README server exited before serving ({status}): {e}");
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "nothing served {url} within 30 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(one_plus_two(&client).await, "3");
    client.close().await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "it serves until a signal"
    );

    terminate(child.id().expect("it still runs"));
    // Nothing is under way: the graceful shutdown (10 s of grace) ends at once.
    let status: ExitStatus = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("the README server exits within 5 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "it exits 0 after SIGTERM: {status}");
}

#[tokio::test]
async fn the_readme_server_serves_stdio_with_its_flag() {
    let client = Client::builder("readme", "1.0.0")
        .connect_stdio(ServerCommand::new(SERVER).arg("--stdio"))
        .await
        .expect("the README server answers on stdio");
    assert_eq!(one_plus_two(&client).await, "3");
    client.close().await;
}
