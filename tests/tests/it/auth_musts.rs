//! Every resource-server MUST, MUST NOT, SHOULD and SHOULD NOT of MCP's authorization pages
//! (B = 2025-06-18, C = 2025-11-25, D = 2026-07-28) and of the security best practices page,
//! each mapped to the test that checks it (the official conformance suite has no server-side
//! authorization scenarios, so this table is the check). Rules for clients and authorization
//! servers are left out, except row 21, a client rule the server relies on.
//!
//! Sources: `docs/specification/2025-06-18/basic/authorization.mdx` and
//! `docs/specification/2025-11-25/basic/authorization.mdx` (read in the stored repository; the
//! 2025-11-25 page adds the discovery alternatives, `scope` in the 401 challenge and the 403
//! `insufficient_scope` section), the 2026-07-28 pages as
//! summarised in `shared/anchors/REFRESH-2026-11.md` section 4 (scope hierarchies, all scopes in
//! one challenge, no `offline_access`), and `basic/security_best_practices.mdx`.
//!
//! `auth::` is `tests/tests/it/auth.rs` (against oidc-provider); `modelctx-auth` tests are unit
//! tests in `crates/auth/src`.
//!
//! | # | ver | level | rule | test |
//! |---|---|---|---|---|
//! | 1 | BCD | MUST | implement RFC 9728 protected resource metadata | `auth::the_401_challenge_names_the_metadata_and_scopes_served_at_both_well_known_paths` |
//! | 2 | BCD | MUST | the metadata has `authorization_servers` with at least one server | `auth::the_401_challenge_names_the_metadata_and_scopes_served_at_both_well_known_paths`, `auth::several_issuers_are_accepted_each_for_its_own_tokens` (configuration: `modelctx-auth` `config::tests::invalid_configurations_are_refused`) |
//! | 3 | B | MUST | a 401 carries `WWW-Authenticate` with the metadata URL (RFC 9728 5.1) | `the_401_challenge_names_the_resource_metadata` |
//! | 4 | CD | MUST | at least one discovery mechanism: `resource_metadata` in the 401, or the well-known URI path-inserted or at the root (all three here) | `auth::the_401_challenge_names_the_metadata_and_scopes_served_at_both_well_known_paths` |
//! | 5 | CD | SHOULD | `scope` in the 401 challenge (RFC 6750 3) | `the_401_challenge_names_the_resource_metadata` |
//! | 6 | BCD | MUST | validate access tokens per OAuth 2.1 5.2 (signature, issuer, expiry, audience) | `auth::an_expired_token_is_refused_once_past_the_leeway`, `auth::a_token_not_yet_valid_is_refused`, `auth::a_token_of_an_issuer_not_configured_is_refused`, `auth::unsigned_and_hmac_with_the_public_key_tokens_are_refused`, `auth::the_token_type_must_be_at_jwt_unless_jwt_is_accepted`, `auth::opaque_tokens_are_introspected_once_then_served_from_the_cache`, `auth::an_introspected_token_is_not_served_from_the_cache_past_its_expiry` |
//! | 7 | BCD | MUST | validate the audience (RFC 8707 2): reject tokens that do not name this server | `auth::a_token_for_another_resource_is_refused`, `auth::an_issuer_with_its_own_audience_accepts_that_audience_only` |
//! | 8 | BCD | MUST | on failure respond per OAuth 2.1 5.3; invalid or expired tokens get 401 | `auth::an_expired_token_is_refused_once_past_the_leeway`, `invalid_tokens_get_401_with_invalid_token` |
//! | 9 | BCD | MUST, MUST NOT | accept only tokens valid for its own resources; not accept or transit other tokens | `auth::a_token_for_another_resource_is_refused`, `auth::a_token_of_an_issuer_not_configured_is_refused` |
//! | 10 | BCD | MUST | statuses: 401 (no or invalid token), 403 (insufficient scope), 400 (malformed) | `invalid_tokens_get_401_with_invalid_token`, `auth::a_missing_scope_is_403_naming_it_per_tool_prompt_and_resource`, `a_malformed_authorization_is_400` |
//! | 11 | BCD | MUST | validate tokens before processing the request; no data to unauthorized parties | `a_refused_request_is_not_processed_and_gets_no_data` |
//! | 12 | BCD | MUST NOT | pass the client's token through to upstream APIs (handlers never see it) | `auth::handlers_never_see_the_authorization_header_or_the_token` |
//! | 13 | BCD | MUST | secure token storage (caches keyed by hash, nothing logged or shown) | `modelctx-auth` `introspect::tests::the_cache_keeps_hashes_never_tokens`, `verifier::tests::debug_does_not_show_the_secret`, `config::tests::debug_hides_secrets_before_build_too` |
//! | 14 | BCD | MUST | follow OAuth 2.1 7 (security considerations) and 1.5 (https to the authorization server) | `auth::unsigned_and_hmac_with_the_public_key_tokens_are_refused`, `auth::a_storm_of_unknown_kids_costs_the_authorization_server_at_most_one_key_fetch`, `an_issuer_over_plain_http_is_refused_unless_loopback`, `modelctx-auth` `discovery::tests::endpoints_that_are_not_https_are_refused` |
//! | 15 | BCD | SHOULD | accept uppercase scheme and host; use the form without a trailing slash | `uppercase_scheme_and_host_are_accepted_and_the_form_without_a_trailing_slash_is_used` |
//! | 16 | CD | SHOULD | 403 with `error="insufficient_scope"`, `scope` and `resource_metadata` | `auth::a_missing_scope_is_403_naming_it_per_tool_prompt_and_resource` |
//! | 17 | CD | SHOULD | name the scopes needed for the request, with one inclusion strategy (the scopes of the item: a tool, prompt or resource) | `auth::a_missing_scope_is_403_naming_it_per_tool_prompt_and_resource` |
//! | 18 | D | MUST | account for scope hierarchies when judging a token | `scope_hierarchies_are_accounted_for` |
//! | 19 | D | SHOULD | all required scopes in one challenge; no `offline_access` in a challenge or in `scopes_supported` | `auth::a_missing_scope_is_403_naming_it_per_tool_prompt_and_resource` (two scopes in one challenge), `offline_access_is_never_advertised` |
//! | 20 | BCD | SHOULD NOT | stdio follows this specification (credentials come from the environment) | `stdio_is_unaffected_when_auth_is_configured` |
//! | 21 | BCD | MUST (client) | `Authorization` on every request, even within one session: the server checks each request | `every_request_is_authenticated_even_inside_a_session` |
//! | 22 | BC | MUST | (best practices) verify all inbound requests | `every_request_is_authenticated_even_inside_a_session` |
//! | 23 | BC | MUST NOT | (best practices) use sessions for authentication | `every_request_is_authenticated_even_inside_a_session` |
//! | 24 | BC | SHOULD | (best practices) bind session ids to the user | `auth::a_legacy_session_is_404_to_another_subject` |
//! | 25 | BC | MUST NOT | (best practices, token passthrough) accept tokens not issued for this server | `auth::a_token_for_another_resource_is_refused` |
//!
//! Rows 22 to 25 are from the best practices page of B and C; D's was not checked.
//!
//! Counts (rows; row 19 holds two SHOULDs, counted as one row):
//!
//! | version | MUST / MUST NOT | SHOULD | SHOULD NOT | client MUST relied on | rows |
//! |---|---|---|---|---|---|
//! | B 2025-06-18 | 15 | 2 | 1 | 1 | 19 |
//! | C 2025-11-25 | 15 | 5 | 1 | 1 | 22 |
//! | D 2026-07-28 | 13 | 5 | 1 | 1 | 20 |
//! | all (distinct rows) | 17 | 6 | 1 | 1 | 25 |

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modelctx_http::server::RunningServer;
use modelctx_server::HttpConfig;
use modelctx_server::auth::{Auth, ConfigError};
use modelctx_stdio::{LineCodec, LineReader, LineWriter};
use modelctx_tests::http::{modern_meta, post_headers, within};
use modelctx_types::consts;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, duplex};

use crate::auth::{
    Answer, DPOP_ALGS, LEGACY, SCOPES, assert_invalid_token, protected, protected_with,
    protected_with_clock, send, server,
};

/// An issuer nobody listens at: the tests that use it decide before any token is validated.
const NOWHERE: &str = "http://127.0.0.1:9";

/// A protected server whose issuer is [`NOWHERE`] (no Node needed).
struct Offline {
    server: RunningServer,
    addr: SocketAddr,
    ran: Arc<AtomicUsize>,
}

impl Offline {
    /// `resource(addr)` is the resource URI; `configure` finishes the configuration.
    async fn start(
        resource: impl Fn(SocketAddr) -> String,
        configure: impl Fn(Auth) -> Auth,
    ) -> Offline {
        // As `auth::protected_with`: the listener is bound first, its port named in the resource.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().unwrap();
        let guard = configure(Auth::resource(resource(addr)).issuer(NOWHERE))
            .build()
            .expect("a valid configuration");
        let ran = Arc::new(AtomicUsize::new(0));
        let server = server(&ran)
            .auth(guard)
            .build()
            .serve_http_on(listener, HttpConfig::default())
            .await
            .expect("serving");
        Offline { server, addr, ran }
    }

    async fn call(&self, headers: &[(&str, &str)]) -> Answer {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": consts::ToolsCall::VALUE,
            "params": {"name": "rm", "arguments": {}, "_meta": modern_meta()}});
        let mut all = post_headers(None, Some("2026-07-28"));
        all.extend_from_slice(&[("Mcp-Method", consts::ToolsCall::VALUE), ("Mcp-Name", "rm")]);
        all.extend_from_slice(headers);
        send(
            self.addr,
            "POST",
            "/mcp",
            None,
            &all,
            body.to_string().as_bytes(),
        )
        .await
    }
}

fn default_resource(addr: SocketAddr) -> String {
    format!("http://{addr}/mcp")
}

#[tokio::test]
async fn the_401_challenge_names_the_resource_metadata() {
    let offline = Offline::start(default_resource, |auth| auth.scopes_supported(SCOPES)).await;
    let answer = offline.call(&[]).await;
    assert_eq!(answer.status, 401);
    let metadata = format!(
        "http://{}/.well-known/oauth-protected-resource/mcp",
        offline.addr
    );
    let scope = SCOPES.join(" ");
    assert_eq!(
        answer.all("www-authenticate"),
        [
            format!(r#"Bearer resource_metadata="{metadata}", scope="{scope}""#),
            format!(r#"DPoP algs="{DPOP_ALGS}", resource_metadata="{metadata}", scope="{scope}""#),
        ]
    );
    offline.server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_malformed_authorization_is_400() {
    let offline = Offline::start(default_resource, |auth| auth).await;
    for malformed in [
        &[("Authorization", "Bearer a b")][..],
        &[("Authorization", "Bearer")],
        &[("Authorization", "Bearer a,b")],
        &[("Authorization", "Bearer a"), ("Authorization", "Bearer b")],
    ] {
        let answer = offline.call(malformed).await;
        assert_eq!(answer.status, 400, "{malformed:?}: {answer:?}");
        let challenges = answer.all("www-authenticate");
        assert!(
            !challenges.is_empty()
                && challenges
                    .iter()
                    .all(|c| c.contains(r#"error="invalid_request""#)),
            "{malformed:?}: {challenges:?}"
        );
        assert!(answer.body.is_empty());
    }
    // Another scheme is no credentials at all: 401 without an error.
    let basic = offline
        .call(&[("Authorization", "Basic dXNlcjpwYXNz")])
        .await;
    assert_eq!(basic.status, 401);
    assert!(
        basic
            .all("www-authenticate")
            .iter()
            .all(|c| !c.contains("error="))
    );
    assert_eq!(offline.ran.load(Ordering::SeqCst), 0);
    offline.server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn invalid_tokens_get_401_with_invalid_token() {
    let Some(p) = protected().await else { return };
    for bad in ["garbage", "a.b.c", "eyJhbGciOiJFUzI1NiJ9.e30.c2ln"] {
        assert_invalid_token(&p.call(Some(bad), "whoami").await, bad);
    }
    p.stop().await;
}

#[tokio::test]
async fn a_refused_request_is_not_processed_and_gets_no_data() {
    let Some(p) = protected().await else { return };
    let plain = p.token("mcp").await;
    for (token, status) in [
        (None, 401),
        (Some("garbage"), 401),
        (Some(plain.as_str()), 403),
    ] {
        let answer = p.call(token, "rm").await;
        assert_eq!(answer.status, status, "{token:?}");
        assert!(answer.body.is_empty(), "{token:?}: {answer:?}");
        assert!(answer.header("mcp-session-id").is_none());
    }
    // Not even a session is opened for an initialize without a token.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": consts::Initialize::VALUE,
        "params": {"protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let answer = p
        .send(
            "POST",
            "/mcp",
            None,
            &post_headers(None, None),
            init.to_string().as_bytes(),
        )
        .await;
    assert_eq!(answer.status, 401);
    assert!(answer.header("mcp-session-id").is_none());
    assert!(answer.body.is_empty());
    assert_eq!(p.ran.load(Ordering::SeqCst), 0, "no handler ran");
    assert_eq!(p.server.service().table_sizes().await.requests, 0);
    p.stop().await;
}

#[tokio::test]
async fn every_request_is_authenticated_even_inside_a_session() {
    let Some((p, clock)) = protected_with_clock().await else {
        return;
    };
    let token = p.token("mcp files:write").await;
    let session = p.open(&token).await;
    assert_eq!(
        p.legacy_call(Some(&token), &session, "rm").await.text(),
        "removed"
    );
    // The session id alone is no credential, for a POST, the GET stream or a DELETE.
    let none = p.legacy_call(None, &session, "rm").await;
    assert_eq!(none.status, 401);
    assert!(none.body.is_empty());
    let stream = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", LEGACY),
    ];
    assert_eq!(p.send("GET", "/mcp", None, &stream, b"").await.status, 401);
    let delete = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", LEGACY),
    ];
    assert_eq!(
        p.send("DELETE", "/mcp", None, &delete, b"").await.status,
        401
    );
    assert_invalid_token(
        &p.legacy_call(Some("garbage"), &session, "rm").await,
        "a bad token in the session",
    );
    // The token that opened the session expires: the session does not keep it valid.
    clock.advance(Duration::from_secs(3600 + 60));
    assert_invalid_token(
        &p.legacy_call(Some(&token), &session, "rm").await,
        "the opening token, expired",
    );
    assert_eq!(p.ran.load(Ordering::SeqCst), 1);
    p.stop().await;
}

#[tokio::test]
async fn scope_hierarchies_are_accounted_for() {
    fn implies(granted: &str, needed: &str) -> bool {
        granted
            .strip_suffix('*')
            .is_some_and(|prefix| needed.starts_with(prefix))
    }
    let Some(p) = protected_with(&[], |auth, _| auth.scope_implies(implies)).await else {
        return;
    };
    let broad = p
        .auth
        .sign(
            json!({}),
            json!({"aud": p.resource, "scope": "mcp files:*"}),
        )
        .await;
    assert_eq!(p.call(Some(&broad), "rm").await.text(), "removed");
    let narrow = p
        .auth
        .sign(
            json!({}),
            json!({"aud": p.resource, "scope": "mcp files:read"}),
        )
        .await;
    assert_eq!(p.call(Some(&narrow), "rm").await.status, 403);
    // The resource needs `demo:admin` and `files:write`: the broad scope covers one of them.
    let notes = json!({"uri": crate::auth::NOTES});
    let read = consts::ResourcesRead::VALUE;
    let answer = p
        .modern(Some(&broad), read, Some(crate::auth::NOTES), notes.clone())
        .await;
    assert_eq!(answer.status, 403);
    let both = p
        .auth
        .sign(
            json!({}),
            json!({"aud": p.resource, "scope": "demo:* files:*"}),
        )
        .await;
    let answer = p
        .modern(Some(&both), read, Some(crate::auth::NOTES), notes)
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    p.stop().await;
}

#[tokio::test]
async fn offline_access_is_never_advertised() {
    let offline = Offline::start(default_resource, |auth| {
        auth.scopes_supported(["mcp", "offline_access", "files:write"])
    })
    .await;
    let answer = offline.call(&[]).await;
    assert_eq!(answer.status, 401, "{answer:?}");
    let challenges = answer.all("www-authenticate");
    assert!(!challenges.is_empty(), "{answer:?}");
    for challenge in challenges {
        assert!(
            challenge.contains(r#"scope="mcp files:write""#),
            "{challenge}"
        );
    }
    let metadata = send(
        offline.addr,
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        None,
        &[],
        b"",
    )
    .await;
    let document: Value = serde_json::from_slice(&metadata.body).unwrap();
    assert_eq!(document["scopes_supported"], json!(["mcp", "files:write"]));
    offline.server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn uppercase_scheme_and_host_are_accepted_and_the_form_without_a_trailing_slash_is_used() {
    // Configured in upper case with a trailing slash: served in the canonical form.
    let offline = Offline::start(|addr| format!("HTTP://{addr}/mcp/"), |auth| auth).await;
    let metadata = send(
        offline.addr,
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        None,
        &[],
        b"",
    )
    .await;
    assert_eq!(metadata.status, 200);
    let document: Value = serde_json::from_slice(&metadata.body).unwrap();
    assert_eq!(
        document["resource"],
        json!(format!("http://{}/mcp", offline.addr))
    );
    offline.server.shutdown(Duration::from_secs(1)).await;

    // A token whose audience has an upper-case scheme and host names this server.
    let Some(p) = protected().await else { return };
    let upper = p.resource.replace("http://127.0.0.1", "HTTP://127.0.0.1");
    let token = p.auth.sign(json!({}), json!({"aud": upper})).await;
    assert_eq!(p.call(Some(&token), "whoami").await.status, 200);
    p.stop().await;
}

#[test]
fn an_issuer_over_plain_http_is_refused_unless_loopback() {
    let refused = Auth::resource("https://mcp.example.com/mcp")
        .issuer("http://id.example.com")
        .build()
        .expect_err("plain http to a remote issuer");
    assert!(matches!(refused, ConfigError::Issuer { .. }), "{refused:?}");
    Auth::resource("https://mcp.example.com/mcp")
        .issuer("https://id.example.com")
        .build()
        .expect("https");
}

#[tokio::test]
async fn stdio_is_unaffected_when_auth_is_configured() {
    let ran = Arc::new(AtomicUsize::new(0));
    let guard = Auth::resource("http://127.0.0.1:9/mcp")
        .issuer(NOWHERE)
        .build()
        .unwrap();
    let server = server(&ran).auth(guard).build();
    let (client_side, server_side) = duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_side);
    let serving = tokio::spawn(async move {
        server
            .serve_lines(
                LineReader::new(server_read, LineCodec::new()),
                LineWriter::new(server_write),
            )
            .await
    });
    let (client_read, mut client_write) = tokio::io::split(client_side);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": consts::Initialize::VALUE,
        "params": {"protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": consts::NotificationsInitialized::VALUE});
    let call = |id: i64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": consts::ToolsCall::VALUE,
            "params": {"name": name, "arguments": {}}})
    };
    // `rm` needs a scope over HTTP; over stdio nobody is asked for a token, and it runs.
    let lines = format!(
        "{initialize}\n{initialized}\n{}\n{}\n",
        call(2, "rm"),
        call(3, "whoami")
    );
    client_write.write_all(lines.as_bytes()).await.unwrap();
    let mut reader = LineReader::new(client_read, LineCodec::new());
    let mut replies = Vec::new();
    within("the stdio replies", async {
        while replies.len() < 2 {
            let line = reader.next_line().await.unwrap().unwrap().unwrap();
            let message: Value = serde_json::from_slice(line.as_bytes()).unwrap();
            if message["id"] == json!(2) || message["id"] == json!(3) {
                replies.push(message);
            }
        }
    })
    .await;
    replies.sort_by_key(|r| r["id"].as_i64());
    assert_eq!(replies[0]["result"]["content"][0]["text"], "removed");
    assert_eq!(
        replies[1]["result"]["content"][0]["text"], "null",
        "no caller"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    drop(client_write);
    drop(reader);
    within("the server ends", serving).await.unwrap().unwrap();
}
