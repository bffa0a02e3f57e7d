//! The server facade over HTTP, driven by the client facade: what needs both facades lives here
//! rather than in either crate's tests, so that neither crate dev-depends on the other.

use std::sync::Arc;
use std::time::Duration;

use modelctx_server::{NoArgs, Server, Settings, Tool};
use modelctx_tests::http::within;
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    /// The text to say back.
    text: String,
}

async fn echo(args: Echo) -> String {
    args.text
}

/// Finding 25: the HTTP app handles at most `Settings::max_modern_requests` 2026-07-28 requests
/// at once; one beyond is refused at once with -32000 (`rate_limited`), and places are given
/// back when requests end.
#[tokio::test]
async fn finding_25_modern_http_requests_are_capped() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = gate.clone();
    let hold = move |_: NoArgs| {
        let held = held.clone();
        async move {
            let _ = held.acquire().await.map(|p| p.forget());
            "done"
        }
    };
    let mut settings = Settings::default();
    settings.max_modern_requests = 1;
    let server = Server::builder("cap", "1")
        .settings(settings)
        .tool(Tool::new("hold", hold))
        .tool(Tool::new("echo", echo))
        .build();
    let running = server
        .serve_http(
            "127.0.0.1:0",
            modelctx_http::server::ServerConfig::default(),
        )
        .await
        .unwrap();
    let url = format!("http://{}/mcp", running.local_addr());
    let client = within(
        "connect",
        modelctx_client::Client::builder("t", "1")
            .era(modelctx_client::EraChoice::Modern)
            .connect_http(&url),
    )
    .await
    .unwrap();
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool("hold", json!({})).await }
    });
    within("the first call runs", async {
        while server.load().handlers == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let refused = client.call_tool("echo", json!({"text": "x"})).await;
    match &refused {
        Err(modelctx_client::Error::Remote(e)) => {
            assert_eq!(e.code.0, -32000, "{e:?}");
            let data: Value = e.data_as().unwrap().unwrap();
            assert_eq!(data["reason"], "rate_limited");
        }
        other => panic!("expected -32000, got {other:?}"),
    }
    gate.add_permits(1);
    let result = within("the first call", first).await.unwrap().unwrap();
    assert_eq!(result.text(), "done");
    // The place is given back when the request's task ends (just after its answer is sent).
    within("a place again", async {
        loop {
            match client.call_tool("echo", json!({"text": "again"})).await {
                Ok(result) => break assert_eq!(result.text(), "again"),
                Err(modelctx_client::Error::Remote(e)) if e.code.0 == -32000 => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
}

/// A modern request's handler that reports more progress than its runner's command channel
/// holds (16 places) waits for room: every notification reaches the client, in order and
/// before the result, and nothing of the request is left once it is answered.
#[tokio::test]
async fn a_modern_handler_sending_past_its_command_bound_loses_nothing() {
    const STEPS: u32 = 100;
    let steps = |context: modelctx_server::Context, _: NoArgs| async move {
        for i in 1..=STEPS {
            context
                .progress(f64::from(i), Some(f64::from(STEPS)), None)
                .await
                .unwrap();
        }
        "done"
    };
    let server = Server::builder("bound", "1")
        .tool(Tool::new("steps", steps))
        .build();
    let running = server
        .serve_http(
            "127.0.0.1:0",
            modelctx_http::server::ServerConfig::default(),
        )
        .await
        .unwrap();
    let url = format!("http://{}/mcp", running.local_addr());
    let client = within(
        "connect",
        modelctx_client::Client::builder("t", "1")
            .era(modelctx_client::EraChoice::Modern)
            .connect_http(&url),
    )
    .await
    .unwrap();
    for _ in 0..3 {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let options = modelctx_client::CallOptions::new().on_progress({
            let seen = seen.clone();
            move |p| seen.lock().unwrap().push(p.progress)
        });
        let result = within(
            "the call",
            client.call_tool_with("steps", json!({}), options),
        )
        .await
        .unwrap();
        assert_eq!(result.text(), "done");
        let expected: Vec<f64> = (1..=STEPS).map(f64::from).collect();
        assert_eq!(*seen.lock().unwrap(), expected);
        // The request's runner, its channel and its handler are gone with it.
        within("the request's runner ends", async {
            while !server.load().is_idle() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }
}
