//! The server facade's richer test server (`--client-tests`) against the TypeScript SDK's clients
//! (`tests/ts/facade-clients.mjs`): `@modelcontextprotocol/sdk` 1.x over Streamable HTTP and
//! stdio; `@modelcontextprotocol/client` 2.x over Streamable HTTP in the legacy era, automatic and
//! pinned to 2026-07-28, and over stdio in the legacy era and pinned to 2026-07-28. Seven clients,
//! one line each.
//!
//! `cargo xtask ci` installs Node 22 and the packages and sets `MODELCTX_NODE` and
//! `MODELCTX_REQUIRE_NODE=1`; run by hand without them, the test says it is skipped.

use std::time::Duration;

use modelctx_tests::node;

const SERVER: &str = env!("CARGO_BIN_EXE_facade-stdio-server");

#[tokio::test]
async fn the_typescript_clients_use_every_feature_in_both_eras() {
    let Some(node) = node::node() else {
        return;
    };
    let run = node::command(&node, "facade-clients.mjs")
        .arg(SERVER)
        .output();
    let output = match tokio::time::timeout(Duration::from_secs(60), run).await {
        Ok(Ok(output)) => Some(output),
        Ok(Err(e)) => node::skipped(format!("{node} cannot run: {e}")),
        Err(_) => panic!("the TypeScript clients did not finish within 60 s"),
    };
    let Some(output) = output else {
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        lines.len(),
        7,
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in &lines {
        assert_eq!(
            line["ok"],
            true,
            "{}",
            line["detail"].as_str().unwrap_or_default()
        );
    }
    assert!(output.status.success());
}
