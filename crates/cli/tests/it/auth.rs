//! `mcx serve demo --http ADDR --auth-issuer URL` and `mcx proxy ... --auth-issuer URL` against
//! a real authorization server (oidc-provider, `modelctx_tests::oidc`): the `mcx` binary, run as
//! a user would, takes the AS's access tokens for its URL, `whoami` says who called, and
//! `unlock` needs `demo:admin`.
//!
//! The binary is this package's `mcx` (`CARGO_BIN_EXE_mcx`, built by cargo before the tests);
//! the AS is `modelctx_tests::oidc`. Skipped without Node, like the other AS tests.

use std::process::Stdio;

use modelctx_tests::http::{RawResponse, modern_call, modern_headers, post};
use modelctx_tests::oidc::As;
use modelctx_types::consts::ToolsCall;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::cli::{MCX, serve_demo_with};

/// A 2026-07-28 `tools/call` of `tool` to `addr`, with `Authorization: <authorization>`.
async fn call(addr: std::net::SocketAddr, tool: &str, authorization: Option<&str>) -> RawResponse {
    let mut headers = modern_headers(ToolsCall::VALUE, Some(tool));
    if let Some(authorization) = authorization {
        headers.push(("Authorization", authorization));
    }
    post(addr, &headers, &modern_call(1, tool, json!({}))).await
}

async fn text(response: RawResponse) -> String {
    String::from_utf8_lossy(&response.body().await).into_owned()
}

#[tokio::test]
async fn serve_demo_with_an_issuer_takes_its_tokens_and_unlock_needs_demo_admin() {
    // mcx picks its port (0), so the AS learns the resource once mcx prints its URL.
    let Some(auth) = As::start(&["http://127.0.0.1:9/unused"]).await else {
        return;
    };
    let (server, before) =
        serve_demo_with(&["--http", "127.0.0.1:0", "--auth-issuer", auth.issuer()]);
    let url = server.url.clone();
    // The resource is the served URL, its port the one chosen.
    let resource = url.clone();
    let addr: std::net::SocketAddr = resource
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("not http://ADDR/mcp: {resource}"));
    assert_ne!(addr.port(), 0);
    auth.add_resource(&resource).await;
    assert!(
        before
            .iter()
            .any(|l| l.contains(auth.issuer()) && l.contains(&resource)),
        "{before:?}"
    );
    let port = addr.port();

    // No token, or one the AS did not sign: 401, pointing at the metadata.
    let response = call(addr, "whoami", None).await;
    assert_eq!(response.status, 401);
    let challenge = response.all("www-authenticate").join(", ");
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp\""
        )),
        "{challenge}"
    );
    let response = call(addr, "whoami", Some("Bearer not-a-token")).await;
    assert_eq!(response.status, 401);
    let metadata = metadata(addr).await;
    assert_eq!(metadata["resource"], resource.as_str());
    assert_eq!(metadata["authorization_servers"], json!([auth.issuer()]));
    assert_eq!(metadata["scopes_supported"], json!(["demo:admin"]));

    // A client-credentials token without demo:admin: whoami answers, unlock is refused.
    let token = auth.client_credentials("mcp", &resource).await;
    let bearer = format!("Bearer {}", token.access_token);
    let response = call(addr, "whoami", Some(&bearer)).await;
    assert_eq!(response.status, 200);
    let answer = text(response).await;
    assert!(
        answer.contains(&format!("svc (issuer {}), scopes mcp", auth.issuer())),
        "{answer}"
    );
    let response = call(addr, "unlock", Some(&bearer)).await;
    assert_eq!(response.status, 403);
    let challenge = response.all("www-authenticate").join(", ");
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"demo:admin\""),
        "{challenge}"
    );

    // mcx's own client with that token (MCX_BEARER) sees the same.
    let out = Command::new(MCX)
        .args(["--url", &url, "--timeout", "10", "tools", "call", "whoami"])
        .env("MCX_BEARER", &token.access_token)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("mcx runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("svc (issuer {}), scopes mcp\n", auth.issuer()),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // With demo:admin: unlock runs.
    let admin = auth.client_credentials("mcp demo:admin", &resource).await;
    let response = call(
        addr,
        "unlock",
        Some(&format!("Bearer {}", admin.access_token)),
    )
    .await;
    assert_eq!(response.status, 200);
    let answer = text(response).await;
    assert!(answer.contains("unlocked the `secret` tool"), "{answer}");
}

/// The protected resource metadata of the server at `addr`, fetched without credentials.
async fn metadata(addr: std::net::SocketAddr) -> serde_json::Value {
    let response = modelctx_tests::http::within(
        "the metadata",
        modelctx_tests::http::raw_request(
            addr,
            "GET",
            "/.well-known/oauth-protected-resource/mcp",
            &[],
            &[],
        ),
    )
    .await;
    assert_eq!(response.status, 200);
    response.json().await
}

#[tokio::test]
async fn the_proxy_with_an_issuer_takes_its_tokens_for_its_own_url_only() {
    let other = "http://127.0.0.1:9/mcp";
    let Some(auth) = As::start(&[other]).await else {
        return;
    };
    let listen = "127.0.0.1:0";
    let server = format!("{MCX} serve demo --stdio");
    let mut proxy = Command::new(MCX)
        .args(["proxy", "--stdio", &server, "--listen", listen])
        .args(["--auth-issuer", auth.issuer()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("mcx proxy starts");
    let mut lines = BufReader::new(proxy.stderr.take().expect("stderr")).lines();
    // Its URL, with the port it chose: the AS learns the resource from it.
    let resource = loop {
        let line = modelctx_tests::http::within("the proxy prints its URL", lines.next_line())
            .await
            .expect("stderr")
            .expect("the proxy runs");
        if let Some(rest) = line.strip_prefix("mcx proxy: http://127.0.0.1:")
            && rest.contains(" -> ")
        {
            break format!(
                "http://127.0.0.1:{}",
                rest.split_whitespace().next().unwrap()
            );
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let addr: std::net::SocketAddr = resource
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("not http://ADDR/mcp: {resource}"));
    auth.add_resource(&resource).await;

    assert_eq!(call(addr, "echo", None).await.status, 401);
    // A token of the same AS for another resource is not for this proxy.
    let elsewhere = auth.client_credentials("mcp", other).await;
    let response = call(
        addr,
        "echo",
        Some(&format!("Bearer {}", elsewhere.access_token)),
    )
    .await;
    assert_eq!(response.status, 401);
    let token = auth.client_credentials("mcp", &resource).await;
    let response = call(
        addr,
        "whoami",
        Some(&format!("Bearer {}", token.access_token)),
    )
    .await;
    assert_eq!(response.status, 200);
    // The child, over stdio, is not told who called (nor given the token).
    let answer = text(response).await;
    assert!(answer.contains("no one is authenticated"), "{answer}");
    assert_eq!(metadata(addr).await["resource"], resource.as_str());
}

#[tokio::test]
async fn serve_demo_with_an_audience_takes_the_tokens_for_it_not_for_its_own_url() {
    // The URL clients use (a reverse proxy's, say), not the one mcx listens at.
    let audience = "http://127.0.0.1:9/mcp";
    let Some(auth) = As::start(&[audience]).await else {
        return;
    };
    let (server, _) = serve_demo_with(&[
        "--http",
        "127.0.0.1:0",
        "--auth-issuer",
        auth.issuer(),
        "--auth-audience",
        audience,
    ]);
    let own = server.url.clone();
    let addr: std::net::SocketAddr = own
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("not http://ADDR/mcp: {own}"));
    // The AS issues tokens for mcx's own URL too: the guard, not the AS, refuses them.
    auth.add_resource(&own).await;

    assert_eq!(metadata(addr).await["resource"], audience);
    let token = auth.client_credentials("mcp", audience).await;
    let response = call(
        addr,
        "whoami",
        Some(&format!("Bearer {}", token.access_token)),
    )
    .await;
    assert_eq!(response.status, 200);
    let answer = text(response).await;
    assert!(
        answer.contains(&format!("svc (issuer {}), scopes mcp", auth.issuer())),
        "{answer}"
    );
    let other = auth.client_credentials("mcp", &own).await;
    let response = call(
        addr,
        "whoami",
        Some(&format!("Bearer {}", other.access_token)),
    )
    .await;
    assert_eq!(response.status, 401);
    let challenge = response.all("www-authenticate").join(", ");
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
}
