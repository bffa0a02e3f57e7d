//! What the README's code needs to run as a doctest: its server, which serves until a signal,
//! is called and then sent SIGTERM, as a user would stop it.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A client run next to the README's server, on a thread of its own: it connects to `url`
/// (waiting for the server to listen), calls the tool `add` with `a = 1` and `b = 2`, and then
/// sends SIGTERM to this process. Dropped (when the server's `main` ends), it checks that the
/// call answered `3` and the signal was sent; it panics otherwise, failing the doctest.
#[must_use = "checks the call when dropped"]
#[derive(Debug)]
pub struct CallThenTerminate {
    thread: Option<JoinHandle<Result<String, String>>>,
}

/// Starts a [`CallThenTerminate`] against the server at `url`.
pub fn call_add_then_terminate(url: &str) -> CallThenTerminate {
    let url = url.to_owned();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let text = runtime.block_on(call_add(&url))?;
        // Some time for the server to be waiting for the signal (its handler is installed as
        // soon as it serves), then the signal a user's Ctrl-C or `kill` would send.
        std::thread::sleep(Duration::from_millis(200));
        terminate()?;
        // A server that does not stop at the signal fails the doctest rather than hang it.
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(60));
            eprintln!("the README server still runs a minute after SIGTERM");
            std::process::exit(101);
        });
        Ok(text)
    });
    CallThenTerminate {
        thread: Some(thread),
    }
}

async fn call_add(url: &str) -> Result<String, String> {
    let started = Instant::now();
    let client = loop {
        match modelctx_client::Client::builder("readme", "1.0.0")
            .connect_http(url)
            .await
        {
            Ok(client) => break client,
            Err(e) if started.elapsed() > Duration::from_secs(30) => {
                return Err(format!("no server at {url}: {e}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let result = client
        .call_tool("add", serde_json::json!({"a": 1, "b": 2}))
        .await
        .map_err(|e| e.to_string())?;
    client.close().await;
    Ok(result.text())
}

/// SIGTERM to this process.
fn terminate() -> Result<(), String> {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .map_err(|e| format!("kill: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill: {status}"))
    }
}

impl Drop for CallThenTerminate {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        match thread.join() {
            Ok(Ok(text)) => assert_eq!(text, "3", "the README server's answer"),
            Ok(Err(e)) => panic!("the README server: {e}"),
            Err(_) => panic!("the README check panicked"),
        }
    }
}
