//! The TypeScript SDK's OAuth client (`@modelcontextprotocol/client` 2.x, `tests/ts/auth-client.mjs`)
//! against a modelctx server protected by modelctx-auth, with oidc-provider as the authorization
//! server (`tests/ts/oidc-as.mjs`), in both eras and with three clients (registered dynamically,
//! the pre-registered public client, and that client with DPoP): from the first 401 through the
//! protected resource metadata, (registration,) authorization code + PKCE with the `resource`
//! parameter and the token to the tool call; then the 403 of a tool that needs a scope the token
//! lacks, as the SDK reports it and through its step-up flow. A fourth client, with DPoP, does
//! the same against a second server that requires DPoP and nonces of its own (RFC 9449 9).
//!
//! The step-up of the dynamically registered client ends at the AS with `invalid_scope`: the
//! SDK registers with the scope of the first challenge (`mcp`), and oidc-provider holds a client
//! to its registered `scope` (RFC 7591). A server that wants clients of that SDK to step up
//! with such an AS has to name every scope in its 401 challenge (its `scopes_supported`).
//!
//! `cargo xtask ci` installs Node 22 and the packages and sets `MODELCTX_NODE` and
//! `MODELCTX_REQUIRE_NODE=1`; run by hand without them, the test says it is skipped.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use modelctx_http::server::RunningServer;
use modelctx_server::auth::{Auth, Dpop};
use modelctx_server::{Context, HttpConfig, NoArgs, Server, Tool};
use modelctx_tests::node;
use modelctx_tests::oidc::{As, USER};

/// Who called, as the handler sees it: the subject and the granted scopes (sorted).
fn caller(context: &Context) -> String {
    match context.auth() {
        Some(grant) => {
            let mut scopes = grant.scopes.clone();
            scopes.sort();
            format!("{} {}", grant.subject, scopes.join(","))
        }
        None => "nobody".to_owned(),
    }
}

async fn whoami(context: Context, _: NoArgs) -> String {
    caller(&context)
}

async fn write(context: Context, _: NoArgs) -> String {
    format!("written by {}", caller(&context))
}

/// A listener on 127.0.0.1, bound first: the resource's URI (which the AS must know before it
/// starts, and the guard before the server is built) names its port.
async fn bind() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    (listener, addr)
}

/// The server with tools `whoami` and `write` (which needs `files:write`), guarded by `auth`
/// advertising only `mcp` (so clients ask for that first), on `listener`.
async fn serve(listener: tokio::net::TcpListener, auth: Auth) -> RunningServer {
    let guard = auth.scopes_supported(["mcp"]).build().expect("the guard");
    Server::builder("protected", "1")
        .tool(Tool::new("whoami", whoami))
        .tool(Tool::new("write", write).scopes(["files:write"]))
        .auth(guard)
        .build()
        .serve_http_on(listener, HttpConfig::default())
        .await
        .expect("the server listens")
}

#[tokio::test]
async fn the_typescript_oauth_client_authorizes_and_steps_up_in_both_eras() {
    let Some(node) = node::node() else {
        return;
    };
    let (listener, addr) = bind().await;
    let resource = format!("http://{addr}/mcp");
    let (nonce_listener, nonce_addr) = bind().await;
    let nonce_resource = format!("http://{nonce_addr}/mcp");
    let Some(authorization_server) = As::start(&[&resource, &nonce_resource]).await else {
        return;
    };
    let issuer = authorization_server.issuer();
    let running = serve(listener, Auth::resource(&resource).issuer(issuer)).await;
    let nonce_running = serve(
        nonce_listener,
        Auth::resource(&nonce_resource)
            .issuer(issuer)
            .dpop(Dpop::Required)
            .dpop_nonces([7; 32]),
    )
    .await;

    let run = node::command(&node, "auth-client.mjs")
        .args([&resource, issuer, &nonce_resource])
        .output();
    let output = match tokio::time::timeout(Duration::from_secs(60), run).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => {
            node::skipped::<()>(format!("{node} cannot run: {e}"));
            return;
        }
        Err(_) => panic!("the TypeScript OAuth client did not finish within 60 s"),
    };
    running.shutdown(Duration::from_secs(1)).await;
    nonce_running.shutdown(Duration::from_secs(1)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let context = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!stdout.lines().any(|l| l.starts_with("FAIL ")), "{context}");
    for era in ["legacy", "modern"] {
        for client in ["dcr", "app", "dpop", "nonce"] {
            let (resource, addr) = match client {
                "nonce" => (&nonce_resource, nonce_addr),
                _ => (&resource, addr),
            };
            let line = |kind: &str| {
                let prefix = format!("{kind} {era} {client} ");
                stdout
                    .lines()
                    .find_map(|l| l.strip_prefix(&prefix))
                    .unwrap_or_else(|| panic!("no {prefix:?} line\n{context}"))
                    .to_owned()
            };
            let flow: Vec<String> =
                serde_json::from_str(&line("FLOW")).expect("the flow is a JSON list");
            let run = format!("{era}, {client}: {flow:#?}");
            // The flow: the MCP request refused, the metadata document its challenge named, the
            // AS (named by that document) and its metadata, registration (dynamic only), the
            // authorization request, the token, and only then an MCP request admitted.
            let expected_start = [
                format!("POST {resource} 401"),
                format!("GET http://{addr}/.well-known/oauth-protected-resource/mcp 200"),
            ];
            assert_eq!(flow[..2], expected_start, "{run}");
            let position = |wanted: &str| flow.iter().position(|step| step.starts_with(wanted));
            let found =
                |wanted: &str| position(wanted).unwrap_or_else(|| panic!("no {wanted:?} in {run}"));
            let metadata = found(&format!("GET {issuer}/.well-known/"));
            let registered = position(&format!("POST {issuer}/reg 201"));
            let authorized = found(&format!("GET {issuer}/auth 303"));
            let token = found(&format!("POST {issuer}/token 200"));
            let scheme = match client {
                "dpop" | "nonce" => "DPoP proof",
                _ => "Bearer",
            };
            let admitted = found(&format!("POST {resource} 200 {scheme}"));
            // Every request to the server after the first carries the token, as its scheme says.
            assert!(
                flow.iter()
                    .skip(1)
                    .filter(|step| step.contains(&format!(" {resource} ")))
                    .all(|step| step.ends_with(scheme)),
                "{run}"
            );
            // The server that wants its own nonces refuses the first proof (which has none),
            // and the SDK retries with the nonce given.
            let nonce_refused = position(&format!("POST {resource} 401 DPoP proof"));
            match client {
                "nonce" => assert!(
                    nonce_refused.is_some_and(|r| token < r && r < admitted),
                    "{run}"
                ),
                _ => assert_eq!(nonce_refused, None, "{run}"),
            }
            match client {
                "dcr" => assert!(
                    registered.is_some_and(|r| metadata < r && r < authorized),
                    "{run}"
                ),
                _ => assert_eq!(registered, None, "{run}"),
            }
            assert!(
                2 <= metadata && metadata < authorized && authorized < token && token < admitted,
                "{run}"
            );
            assert!(
                !flow[..admitted]
                    .iter()
                    .any(|s| s.starts_with(&format!("POST {resource} 2"))),
                "an MCP request admitted before the token: {run}"
            );

            assert_eq!(line("OK"), format!("{USER} mcp"), "{run}\n{context}");
            assert_eq!(line("REFUSED"), "files:write", "{run}\n{context}");
            let stepped_up = match client {
                // Registered with the first challenge's scope (`mcp`), which the AS holds it to.
                "dcr" => "refused invalid_scope".to_owned(),
                _ => format!("written by {USER} files:write,mcp"),
            };
            assert_eq!(line("STEPUP"), stepped_up, "{run}\n{context}");
        }
    }
    assert!(output.status.success(), "{context}");
}
