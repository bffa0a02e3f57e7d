//! One test per server-side MUST / MUST NOT / REQUIRED of the Streamable HTTP transport pages of
//! MCP 2025-03-26, 2025-06-18, 2025-11-25 (`basic/transports.mdx`) and 2026-07-28
//! (`basic/transports/streamable-http.mdx`): status codes, headers, SSE framing. Client-only
//! rules, authorization, stdio and custom transports are left out, and so are rules addressed to
//! intermediaries and the `x-mcp-header` constraints on tool definitions (the client enforces
//! those). Tests here are named after their rule; `http_server.rs` tests are marked so.
//!
//! Versions: A = 2025-03-26, B = 2025-06-18, C = 2025-11-25, D = 2026-07-28.
//!
//! | versions | rule, in short | test |
//! |---|---|---|
//! | A B C | messages are UTF-8 | [`messages_are_utf8`] |
//! | A B C | one endpoint path that takes POST and GET | [`one_endpoint_path_takes_post_and_get`] |
//! | D | one endpoint path that takes POST | [`one_endpoint_path_takes_modern_posts`] |
//! | A B C D | the `Origin` of every incoming connection is validated | [`an_invalid_origin_is_refused_on_every_method`] |
//! | C D | a present, invalid `Origin` gets 403 | `http_server.rs`: `dns_rebinding_probes_get_403`; [`an_invalid_origin_is_refused_on_every_method`] |
//! | A B C | accepted responses and notifications (A: also batches) get 202 with no body | [`accepted_notifications_and_responses_get_202_without_body`]; `http_server.rs`: `notifications_and_responses_get_202` |
//! | D | an accepted notification gets 202 with no body | [`an_accepted_modern_notification_gets_202_without_body`] |
//! | A B C | input the server cannot accept gets an HTTP error status | [`unacceptable_notifications_get_an_http_error`] |
//! | D | a notification the server cannot accept gets an HTTP error status | [`an_unacceptable_modern_notification_gets_an_http_error`] |
//! | A B C | a POST with requests gets `text/event-stream` or `application/json` | [`a_request_is_answered_with_json_or_an_event_stream`] |
//! | D | a request gets `application/json` or `text/event-stream` | [`a_modern_request_is_answered_with_json_or_an_event_stream`] |
//! | A B C | GET gets `text/event-stream` or 405 | [`get_opens_an_event_stream_or_gets_405`] |
//! | A B C | no response on the GET stream unless resuming | [`the_standalone_stream_never_carries_responses`] |
//! | A B C | each message on exactly one stream, never broadcast | [`each_message_goes_on_exactly_one_stream`] |
//! | A B C | event ids unique across all streams of a session | [`event_ids_are_unique_across_a_sessions_streams`] |
//! | A B C | resumption never replays another stream's messages | `http_server.rs`: `resumption_replays_exactly_that_streams_events` |
//! | A B C | session ids are visible ASCII (0x21 to 0x7E) | `http_server.rs`: `initialize_mints_a_session_id_and_requests_need_it` |
//! | A B C | a terminated session's id gets 404 | [`a_terminated_session_gets_404`]; `http_server.rs`: `initialize_mints_a_session_id_and_requests_need_it`, `service::idle_sessions_end` |
//! | B C | an invalid or unsupported `MCP-Protocol-Version` gets 400 | [`an_unsupported_protocol_version_header_gets_400`]; [`an_unsupported_protocol_version_header_on_delete_gets_400`]; `http_server.rs`: `initialize_mints_a_session_id_and_requests_need_it` |
//! | D | SSE notifications relate to the originating request | [`modern_stream_notifications_belong_to_their_request`] |
//! | D | no independent requests on a response stream | [`modern_streams_carry_no_server_requests`] |
//! | D | closing the response stream cancels the request | `http_server.rs`: `closing_a_modern_stream_cancels_its_request`; [`nothing_is_sent_for_a_cancelled_modern_request`] |
//! | D | nothing more is sent for a cancelled request | [`nothing_is_sent_for_a_cancelled_modern_request`] |
//! | D | `MCP-Protocol-Version` differing from `_meta` gets 400 HeaderMismatch | `http_server.rs`: `modern_requests_are_stateless_and_checked_before_they_run` |
//! | D | an unsupported version gets 400 and UnsupportedProtocolVersionError with the supported list | `http_server.rs`: `modern_requests_are_stateless_and_checked_before_they_run` |
//! | D | an unknown method gets 404 and -32601 | `http_server.rs`: `modern_requests_are_stateless_and_checked_before_they_run` |
//! | D | without pre-2025-06-18 support, a request without the version header is rejected per Server Validation | [`a_modern_only_server_rejects_a_request_without_the_version_header`]; [`a_modern_only_server_rejects_a_versionless_request_with_header_mismatch`] |
//! | D | `Mcp-Method` and `Mcp-Name` are required | [`missing_standard_headers_get_400_header_mismatch`] |
//! | D | encoded `Mcp-Name` / `Mcp-Param-*` values are decoded before comparing | [`encoded_header_values_are_decoded_before_comparison`]; `http_server.rs`: `param_headers_must_mirror_the_arguments` |
//! | D | a recognized `Mcp-Param-*` with invalid characters is rejected | [`param_headers_with_invalid_characters_are_refused`] |
//! | D | decoded `Mcp-Param-*` values must match the body, else 400 and -32020 | `http_server.rs`: `param_headers_must_mirror_the_arguments` |
//! | D | a `null` or absent parameter: no header expected | [`absent_or_null_parameters_need_no_header`] |
//! | D | header missing while the value is in the body: rejected | `http_server.rs`: `param_headers_must_mirror_the_arguments` |
//! | D | header names compared ignoring case | [`header_names_are_case_insensitive`] |
//! | D | headers that differ from the body are rejected | `http_server.rs`: `modern_requests_are_stateless_and_checked_before_they_run`; [`missing_standard_headers_get_400_header_mismatch`] |
//! | D | a header validation failure is 400 with JSON-RPC error -32020 | `http_server.rs`: `modern_requests_are_stateless_and_checked_before_they_run`, `param_headers_must_mirror_the_arguments`; [`missing_standard_headers_get_400_header_mismatch`] |
//!
//! Counts: A 13, B 14, C 15, D 23.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use modelctx_http::server::{
    LegacyHandler, LegacySession, McpApp, ModernRequest, RequestContext, ServerConfig, serve,
};
use modelctx_tests::http::{
    RawResponse, call, modern_call, modern_headers, modern_meta, open_session, post, post_headers,
    raw_request, start, within,
};
use modelctx_types::{Incoming, Message};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const LEGACY: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
const BAD_ORIGINS: [&str; 3] = [
    "http://evil.example.com",
    "null",
    "http://localhost.evil.example.com",
];

fn modern_only() -> ServerConfig {
    let mut config = ServerConfig::default();
    config
        .versions
        .retain(|v| v.era() == modelctx_types::Era::Modern);
    config
}

/// Polls `condition` (every 5 ms, for at most 20 s) until it holds.
async fn until<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    within(what, async {
        while !condition().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    within(method, raw_request(addr, method, path, headers, body)).await
}

/// GET on the endpoint for `session`, with `extra` headers.
async fn get(addr: SocketAddr, session: &str, extra: &[(&str, &str)]) -> RawResponse {
    let mut headers = vec![("Accept", "text/event-stream"), ("Mcp-Session-Id", session)];
    headers.extend_from_slice(extra);
    send(addr, "GET", "/mcp", &headers, b"").await
}

async fn delete(addr: SocketAddr, session: &str, extra: &[(&str, &str)]) -> RawResponse {
    let mut headers = vec![("Mcp-Session-Id", session)];
    headers.extend_from_slice(extra);
    send(addr, "DELETE", "/mcp", &headers, b"").await
}

fn progress_call(id: i64, count: u64, token: &str) -> Value {
    let mut body = call(id, "progress", json!({"count": count}));
    body["params"]["_meta"] = json!({"progressToken": token});
    body
}

fn notification(method: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": method})
}

/// The headers without the ones named (ignoring case).
fn without<'a>(headers: &[(&'a str, &'a str)], names: &[&str]) -> Vec<(&'a str, &'a str)> {
    headers
        .iter()
        .filter(|(n, _)| !names.iter().any(|x| x.eq_ignore_ascii_case(n)))
        .copied()
        .collect()
}

/// The media type of `Content-Type`, without parameters.
fn media_type(response: &RawResponse) -> Option<String> {
    response.header("content-type").map(|v| {
        v.split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
    })
}

/// Every message left on an SSE response, with its event id.
async fn drain(response: &mut RawResponse) -> Vec<(Option<String>, Value)> {
    let mut messages = Vec::new();
    while let Some(message) = within("message", response.next_message()).await {
        messages.push(message);
    }
    messages
}

/// The messages of a request's answer, whichever way it came: one JSON body or an SSE stream.
async fn messages_of(mut response: RawResponse) -> Vec<Value> {
    match media_type(&response).as_deref() {
        Some("application/json") => vec![within("json", response.json()).await],
        Some("text/event-stream") => drain(&mut response)
            .await
            .into_iter()
            .map(|(_, m)| m)
            .collect(),
        other => panic!("a request answered with Content-Type {other:?}"),
    }
}

/// Asserts a refusal: an error status, and a body that is empty or a JSON-RPC error without id.
async fn assert_refused(response: RawResponse, status: u16, what: &str) {
    assert_eq!(response.status, status, "{what}");
    let body = within("body", response.body()).await;
    if !body.is_empty() {
        let reply: Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!("{what}: not JSON ({e}): {}", String::from_utf8_lossy(&body))
        });
        assert!(reply["error"]["code"].is_i64(), "{what}: {reply}");
        assert!(
            reply["id"].is_null(),
            "{what}: an error with an id: {reply}"
        );
    }
}

/// Asserts a 400 carrying JSON-RPC error `-32020` (HeaderMismatch).
async fn assert_header_mismatch(response: RawResponse, what: &str) {
    assert_eq!(response.status, 400, "{what}");
    let reply = within("json", response.json()).await;
    assert_eq!(reply["error"]["code"], -32020, "{what}: {reply}");
}

// -------------------------------------------------------------------------------------------
// 2025-03-26, 2025-06-18, 2025-11-25
// -------------------------------------------------------------------------------------------

/// "JSON-RPC messages MUST be UTF-8 encoded" (2025-03-26, 2025-06-18, 2025-11-25): what the
/// server writes, JSON bodies and SSE events alike, is UTF-8 and keeps non-ASCII text intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_utf8() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let text = "héllo wörld – 世界 🎉";
    let token = "jeton-é-世界";
    for version in LEGACY {
        let session = open_session(addr, version).await;
        let headers = post_headers(Some(&session), Some(version));
        // A JSON answer.
        let response = post(addr, &headers, &call(1, "echo", json!({"text": text}))).await;
        assert_eq!(media_type(&response).as_deref(), Some("application/json"));
        let body = within("body", response.body()).await;
        let body = String::from_utf8(body).expect("a UTF-8 JSON body");
        let reply: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(reply["result"]["content"][0]["text"], text, "{version}");
        // An error message with non-ASCII in it.
        let response = post(addr, &headers, &call(2, "wétter", json!({}))).await;
        let body = String::from_utf8(within("body", response.body()).await).expect("UTF-8");
        let reply: Value = serde_json::from_str(&body).unwrap();
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .contains("wétter"),
            "{reply}"
        );
        // An SSE stream.
        let response = post(addr, &headers, &progress_call(3, 2, token)).await;
        assert_eq!(media_type(&response).as_deref(), Some("text/event-stream"));
        let body =
            String::from_utf8(within("body", response.body()).await).expect("a UTF-8 event stream");
        let messages: Vec<Value> = body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .filter(|data| !data.is_empty())
            .map(|data| serde_json::from_str(data).unwrap())
            .collect();
        assert_eq!(messages.len(), 3, "{version}: {body}");
        for message in &messages[..2] {
            assert_eq!(message["params"]["progressToken"], token, "{version}");
        }
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// "a single HTTP endpoint path … that supports both POST and GET" (2025-03-26, 2025-06-18,
/// 2025-11-25): `/mcp` takes POST and GET for a session; other paths are not the endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_endpoint_path_takes_post_and_get() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    for version in LEGACY {
        let session = open_session(addr, version).await;
        let headers = post_headers(Some(&session), Some(version));
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        assert_eq!(post(addr, &headers, &list).await.status, 200, "{version}");
        let stream = get(addr, &session, &[]).await;
        assert_eq!(stream.status, 200, "{version}");
        assert_eq!(media_type(&stream).as_deref(), Some("text/event-stream"));
        drop(stream);
        let other = send(
            addr,
            "POST",
            "/other",
            &headers,
            list.to_string().as_bytes(),
        )
        .await;
        assert_eq!(other.status, 404, "{version}");
        let other = send(
            addr,
            "GET",
            "/other",
            &[
                ("Accept", "text/event-stream"),
                ("Mcp-Session-Id", &session),
            ],
            b"",
        )
        .await;
        assert_eq!(other.status, 404, "{version}");
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// "validate the `Origin` header on all incoming connections" (all four versions): a foreign,
/// `null` or look-alike Origin is refused (403, JSON-RPC error without id) on every method and
/// in both eras, and the refused request has no effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_origin_is_refused_on_every_method() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    for origin in BAD_ORIGINS {
        let with_origin = |mut headers: Vec<(&'static str, &'static str)>| {
            headers.push(("Origin", origin));
            headers
        };
        let sessions_before = server.service().table_sizes().await.sessions;
        let mut headers = post_headers(None, None);
        headers.push(("Origin", origin));
        assert_refused(post(addr, &headers, &init).await, 403, origin).await;
        assert_eq!(
            server.service().table_sizes().await.sessions,
            sessions_before,
            "no session opened"
        );
        let mut headers = post_headers(Some(&session), None);
        headers.push(("Origin", origin));
        assert_refused(post(addr, &headers, &list).await, 403, origin).await;
        let modern = with_origin(modern_headers("tools/call", Some("echo")));
        assert_refused(
            post(addr, &modern, &modern_call(2, "echo", json!({"text": "x"}))).await,
            403,
            origin,
        )
        .await;
        assert_refused(
            get(addr, &session, &[("Origin", origin)]).await,
            403,
            origin,
        )
        .await;
        assert_refused(
            delete(addr, &session, &[("Origin", origin)]).await,
            403,
            origin,
        )
        .await;
    }
    // The session is still there: the refused DELETEs did nothing.
    let response = post(addr, &post_headers(Some(&session), None), &list).await;
    assert_eq!(response.status, 200);
    server.shutdown(Duration::from_secs(1)).await;

    // A modern-only server checks the Origin before anything else, too.
    let (server, _) = start(modern_only()).await;
    let addr = server.local_addr();
    for method in ["GET", "DELETE", "POST"] {
        let response = send(
            addr,
            method,
            "/mcp",
            &[
                ("Origin", BAD_ORIGINS[0]),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ],
            b"{}",
        )
        .await;
        assert_refused(response, 403, method).await;
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// "the server MUST return HTTP status code 202 Accepted with no body" for accepted responses and
/// notifications (2025-03-26, 2025-06-18, 2025-11-25), including 2025-03-26 batches of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_notifications_and_responses_get_202_without_body() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    for version in LEGACY {
        let session = open_session(addr, version).await;
        let headers = post_headers(Some(&session), Some(version));
        let response = post(
            addr,
            &headers,
            &notification("notifications/roots/list_changed"),
        )
        .await;
        assert_eq!(response.status, 202, "{version}");
        assert!(within("body", response.body()).await.is_empty());
        if version == "2025-03-26" {
            let batch = json!([
                notification("notifications/roots/list_changed"),
                notification("notifications/roots/list_changed"),
            ]);
            let response = post(addr, &headers, &batch).await;
            assert_eq!(response.status, 202, "a batch of notifications");
            assert!(within("body", response.body()).await.is_empty());
            continue;
        }
        // A response to the server's request (elicitation exists from 2025-06-18 on).
        let mut ask = post(addr, &headers, &call(3, "ask", json!({}))).await;
        let (_, question) = within("question", ask.next_message()).await.unwrap();
        assert_eq!(question["method"], "elicitation/create", "{question}");
        let answer = json!({"jsonrpc": "2.0", "id": question["id"],
            "result": {"action": "accept", "content": {"name": "x"}}});
        let response = post(addr, &headers, &answer).await;
        assert_eq!(response.status, 202, "{version}");
        assert!(within("body", response.body()).await.is_empty());
        let (_, result) = within("result", ask.next_message()).await.unwrap();
        assert_eq!(result["id"], 3);
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// "If the server cannot accept the input, it MUST return an HTTP error status code"
/// (2025-03-26, 2025-06-18, 2025-11-25): notifications it refuses get 4xx, with at most a
/// JSON-RPC error that has no id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacceptable_notifications_get_an_http_error() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let note = notification("notifications/roots/list_changed");
    // No session, an unknown session.
    assert_refused(
        post(addr, &post_headers(None, None), &note).await,
        400,
        "no session",
    )
    .await;
    assert_refused(
        post(addr, &post_headers(Some("0123456789abcdef"), None), &note).await,
        404,
        "unknown session",
    )
    .await;
    for version in LEGACY {
        let session = open_session(addr, version).await;
        // An unsupported version header.
        assert_refused(
            post(
                addr,
                &post_headers(Some(&session), Some("1999-01-01")),
                &note,
            )
            .await,
            400,
            version,
        )
        .await;
        // Not a JSON-RPC message.
        let response = send(
            addr,
            "POST",
            "/mcp",
            &post_headers(Some(&session), Some(version)),
            br#"{"jsonrpc": "2.0", "method": 5}"#,
        )
        .await;
        assert_refused(response, 400, version).await;
        // A batch, after 2025-03-26.
        if version != "2025-03-26" {
            let batch = json!([note.clone(), note.clone()]);
            assert_refused(
                post(addr, &post_headers(Some(&session), Some(version)), &batch).await,
                400,
                version,
            )
            .await;
        }
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// "the server MUST either return `Content-Type: text/event-stream` … or
/// `Content-Type: application/json`" for input with requests (2025-03-26, 2025-06-18,
/// 2025-11-25): answers, errors, streams and 2025-03-26 batches all come as one of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_answered_with_json_or_an_event_stream() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    for version in LEGACY {
        let session = open_session(addr, version).await;
        let headers = post_headers(Some(&session), Some(version));
        let response = post(addr, &headers, &call(1, "echo", json!({"text": "a"}))).await;
        assert_eq!(response.status, 200);
        assert_eq!(media_type(&response).as_deref(), Some("application/json"));
        let unknown = json!({"jsonrpc": "2.0", "id": 2, "method": "no/such"});
        let response = post(addr, &headers, &unknown).await;
        assert_eq!(media_type(&response).as_deref(), Some("application/json"));
        assert_eq!(messages_of(response).await[0]["error"]["code"], -32601);
        let response = post(addr, &headers, &progress_call(3, 2, "p")).await;
        assert_eq!(response.status, 200);
        assert_eq!(media_type(&response).as_deref(), Some("text/event-stream"));
        assert_eq!(messages_of(response).await.last().unwrap()["id"], 3);
        if version == "2025-03-26" {
            let batch = json!([
                {"jsonrpc": "2.0", "id": 4, "method": "ping"},
                notification("notifications/roots/list_changed"),
                call(5, "echo", json!({"text": "b"})),
            ]);
            let response = post(addr, &headers, &batch).await;
            assert_eq!(response.status, 200);
            let kind = media_type(&response);
            assert!(
                matches!(
                    kind.as_deref(),
                    Some("application/json" | "text/event-stream")
                ),
                "{kind:?}"
            );
            // One reply per request, as one array or as separate events.
            let messages = messages_of(response).await;
            let replies: Vec<Value> = messages
                .iter()
                .flat_map(|m| match m {
                    Value::Array(all) => all.clone(),
                    one => vec![one.clone()],
                })
                .collect();
            assert_eq!(replies.len(), 2, "{messages:?}");
        }
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// "The server MUST either return `Content-Type: text/event-stream` in response to this HTTP
/// GET, or else return HTTP 405" (2025-03-26, 2025-06-18, 2025-11-25).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_opens_an_event_stream_or_gets_405() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    for version in LEGACY {
        let session = open_session(addr, version).await;
        let stream = get(addr, &session, &[("MCP-Protocol-Version", version)]).await;
        assert_eq!(stream.status, 200, "{version}");
        assert_eq!(
            media_type(&stream).as_deref(),
            Some("text/event-stream"),
            "{version}"
        );
    }
    server.shutdown(Duration::from_secs(1)).await;
    // A server that offers no stream at the endpoint says 405.
    let (server, _) = start(modern_only()).await;
    let response = send(
        server.local_addr(),
        "GET",
        "/mcp",
        &[("Accept", "text/event-stream")],
        b"",
    )
    .await;
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), Some("POST"));
    server.shutdown(Duration::from_secs(1)).await;
}

/// "The server MUST NOT send a JSON-RPC response on the stream unless resuming" (2025-03-26,
/// 2025-06-18, 2025-11-25): answers whose POST is gone, or whose stream's connection the server
/// closed, never land on the standalone GET stream; resuming with `Last-Event-ID` gets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_stream_never_carries_responses() {
    let (server, app) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let headers = post_headers(Some(&session), Some("2025-11-25"));
    let mut standalone = get(addr, &session, &[]).await;
    assert_eq!(standalone.status, 200);
    let priming = within("priming", standalone.next_event()).await.unwrap();
    assert!(priming.data.is_empty());
    // Answers in JSON.
    for i in 1..3 {
        let reply = post(addr, &headers, &call(i, "echo", json!({"text": "x"}))).await;
        assert_eq!(reply.status, 200);
    }
    // A request whose POST connection goes away before its answer.
    let requests = || async { server.service().table_sizes().await.requests };
    let slow = {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        tokio::spawn(async move {
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            let body = call(3, "slow", json!({}));
            raw_request(addr, "POST", "/mcp", &headers, body.to_string().as_bytes()).await
        })
    };
    until("slow in flight", || async { requests().await == 1 }).await;
    slow.abort();
    assert!(slow.await.is_err_and(|e| e.is_cancelled()));
    app.gates.slow.notify_one();
    until("slow answered", || async { requests().await == 0 }).await;
    // A 2025-11-25 stream whose connection the server closes before the answer.
    let mut reconnect = call(4, "reconnect", json!({}));
    reconnect["params"]["_meta"] = json!({"progressToken": "r"});
    let mut response = post(addr, &headers, &reconnect).await;
    let (last_id, progress) = within("progress", response.next_message()).await.unwrap();
    assert_eq!(progress["method"], "notifications/progress");
    assert!(within("closed", response.next_message()).await.is_none());
    until("reconnect answered", || async { requests().await == 0 }).await;
    // The next thing on the standalone stream is the unrelated notification.
    let reply = post(addr, &headers, &call(5, "announce", json!({}))).await;
    assert_eq!(reply.status, 200);
    let (_, next) = within("standalone", standalone.next_message())
        .await
        .unwrap();
    assert_eq!(next["method"], "notifications/tools/list_changed", "{next}");
    // Resuming the closed stream is where its answer is.
    let mut resumed = get(
        addr,
        &session,
        &[("Last-Event-ID", last_id.as_deref().unwrap())],
    )
    .await;
    assert_eq!(resumed.status, 200);
    let (_, result) = within("resumed", resumed.next_message()).await.unwrap();
    assert_eq!(result["id"], 4, "{result}");
    server.shutdown(Duration::from_secs(1)).await;
}

/// "send each of its JSON-RPC messages on only one of the connected streams" / "MUST NOT
/// broadcast" (2025-03-26, 2025-06-18, 2025-11-25): with two request streams, a waiting one and
/// the standalone stream open, every message shows up once, on its own stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_goes_on_exactly_one_stream() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let headers = post_headers(Some(&session), Some("2025-11-25"));
    let mut standalone = get(addr, &session, &[]).await;
    assert_eq!(standalone.status, 200);
    // Two request streams at once.
    let mut a = post(addr, &headers, &progress_call(1, 4, "a")).await;
    let mut b = post(addr, &headers, &progress_call(2, 4, "b")).await;
    for (stream, token, id) in [(&mut a, "a", 1), (&mut b, "b", 2)] {
        let messages = drain(stream).await;
        assert_eq!(messages.len(), 5, "{messages:?}");
        for (_, message) in &messages[..4] {
            assert_eq!(message["params"]["progressToken"], token, "{message}");
        }
        assert_eq!(messages[4].1["id"], id);
    }
    // A stream still open (waiting for the client's answer) while an unrelated notification
    // goes out: it goes on the standalone stream only.
    let mut ask = post(addr, &headers, &call(3, "ask", json!({}))).await;
    let (_, question) = within("question", ask.next_message()).await.unwrap();
    assert_eq!(question["method"], "elicitation/create");
    let reply = post(addr, &headers, &call(4, "announce", json!({}))).await;
    let reply = within("json", reply.json()).await;
    assert_eq!(reply["id"], 4, "only its own answer: {reply}");
    let (_, note) = within("standalone", standalone.next_message())
        .await
        .unwrap();
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"name": "x"}}});
    assert_eq!(post(addr, &headers, &answer).await.status, 202);
    let rest = drain(&mut ask).await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0].1["id"], 3);
    // Nothing else reached the standalone stream: the next announcement is its next message.
    post(addr, &headers, &call(5, "announce", json!({}))).await;
    let (_, note) = within("standalone", standalone.next_message())
        .await
        .unwrap();
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
    server.shutdown(Duration::from_secs(1)).await;
}

/// "the ID MUST be globally unique across all streams within that session" (2025-03-26,
/// 2025-06-18, 2025-11-25): SSE event ids of the request streams and of the standalone stream,
/// priming events included, never repeat within a session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_ids_are_unique_across_a_sessions_streams() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    for version in LEGACY {
        let session = open_session(addr, version).await;
        let headers = post_headers(Some(&session), Some(version));
        let mut ids = Vec::new();
        let mut standalone = get(addr, &session, &[]).await;
        assert_eq!(standalone.status, 200);
        for (id, token) in [(1, "a"), (2, "b"), (3, "c")] {
            let mut stream = post(addr, &headers, &progress_call(id, 3, token)).await;
            assert_eq!(media_type(&stream).as_deref(), Some("text/event-stream"));
            while let Some(event) = within("event", stream.next_event()).await {
                ids.push(event.id.expect("every event has an id"));
            }
        }
        for i in 10..12 {
            post(addr, &headers, &call(i, "announce", json!({}))).await;
            loop {
                let event = within("event", standalone.next_event()).await.unwrap();
                ids.push(event.id.expect("every event has an id"));
                if !event.data.is_empty() {
                    break;
                }
            }
        }
        let expected = if version == "2025-11-25" {
            3 * 5 + 3
        } else {
            3 * 4 + 2
        };
        assert_eq!(ids.len(), expected, "{version}: {ids:?}");
        let unique: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(
            unique.len(),
            ids.len(),
            "{version}: repeated ids in {ids:?}"
        );
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// "after which it MUST respond to requests containing that session ID with HTTP 404"
/// (2025-03-26, 2025-06-18, 2025-11-25): once a session ends, by DELETE or by the server,
/// every method with its id gets 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_session_gets_404() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    for version in LEGACY {
        for by_server in [false, true] {
            let what = format!(
                "{version}, ended by the {}",
                if by_server { "server" } else { "client" }
            );
            let session = open_session(addr, version).await;
            let headers = post_headers(Some(&session), Some(version));
            let mut stream = post(addr, &headers, &progress_call(1, 1, "t")).await;
            let (last_id, _) = within("event", stream.next_message()).await.unwrap();
            drain(&mut stream).await;
            if by_server {
                let reply = post(addr, &headers, &call(2, "end_session", json!({}))).await;
                assert_eq!(reply.status, 200, "{what}");
                until("session ended", || async {
                    server.service().table_sizes().await.sessions == 0
                })
                .await;
            } else {
                assert_eq!(delete(addr, &session, &[]).await.status, 200, "{what}");
            }
            let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
            assert_eq!(post(addr, &headers, &list).await.status, 404, "{what}");
            let note = notification("notifications/roots/list_changed");
            assert_eq!(post(addr, &headers, &note).await.status, 404, "{what}");
            assert_eq!(get(addr, &session, &[]).await.status, 404, "{what}");
            let last = [("Last-Event-ID", last_id.as_deref().unwrap())];
            assert_eq!(get(addr, &session, &last).await.status, 404, "{what}");
            assert_eq!(delete(addr, &session, &[]).await.status, 404, "{what}");
        }
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// "invalid or unsupported `MCP-Protocol-Version`, it MUST respond with `400 Bad Request`"
/// (2025-06-18, 2025-11-25): on `initialize`, requests, notifications, responses and GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_protocol_version_header_gets_400() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    for version in ["2025-06-18", "2025-11-25"] {
        let session = open_session(addr, version).await;
        for bad in ["1999-01-01", "garbage", "2026-07-28"] {
            let what = format!("{version} session, header {bad}");
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}});
            let response = post(addr, &post_headers(None, Some(bad)), &init).await;
            assert_eq!(response.status, 400, "{what}: initialize");
            assert!(response.header("mcp-session-id").is_none());
            let headers = post_headers(Some(&session), Some(bad));
            let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
            assert_eq!(post(addr, &headers, &list).await.status, 400, "{what}");
            let note = notification("notifications/roots/list_changed");
            assert_eq!(post(addr, &headers, &note).await.status, 400, "{what}");
            let answer = json!({"jsonrpc": "2.0", "id": 99, "result": {}});
            assert_eq!(post(addr, &headers, &answer).await.status, 400, "{what}");
            let stream = get(addr, &session, &[("MCP-Protocol-Version", bad)]).await;
            assert_eq!(stream.status, 400, "{what}: GET");
        }
        // The session was not touched by any of it.
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let response = post(addr, &post_headers(Some(&session), Some(version)), &list).await;
        assert_eq!(response.status, 200);
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// The same rule (2025-06-18, 2025-11-25) for DELETE: a DELETE naming a version the server does
/// not serve is a request with an unsupported `MCP-Protocol-Version`, so it gets 400 and ends
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_protocol_version_header_on_delete_gets_400() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let session = open_session(addr, "2025-11-25").await;
    let response = delete(addr, &session, &[("MCP-Protocol-Version", "1999-01-01")]).await;
    assert_eq!(response.status, 400);
    assert_eq!(server.service().table_sizes().await.sessions, 1);
    server.shutdown(Duration::from_secs(1)).await;
}

// -------------------------------------------------------------------------------------------
// 2026-07-28
// -------------------------------------------------------------------------------------------

/// "a single HTTP endpoint path … that supports POST" (2026-07-28): modern requests are served
/// on `/mcp`, on a dual-era and on a modern-only server; other paths are not the endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_endpoint_path_takes_modern_posts() {
    for config in [ServerConfig::default(), modern_only()] {
        let (server, _) = start(config).await;
        let addr = server.local_addr();
        let headers = modern_headers("tools/call", Some("echo"));
        let body = modern_call(1, "echo", json!({"text": "hi"}));
        let response = post(addr, &headers, &body).await;
        assert_eq!(response.status, 200);
        assert_eq!(
            within("json", response.json()).await["result"]["content"][0]["text"],
            "hi"
        );
        let other = send(
            addr,
            "POST",
            "/other",
            &headers,
            body.to_string().as_bytes(),
        )
        .await;
        assert_eq!(other.status, 404);
        server.shutdown(Duration::from_secs(1)).await;
    }
}

/// "the server MUST return HTTP status code `202 Accepted` with no body" for an accepted
/// notification (2026-07-28).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_modern_notification_gets_202_without_body() {
    for config in [ServerConfig::default(), modern_only()] {
        let (server, _) = start(config).await;
        let addr = server.local_addr();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed",
            "params": {"_meta": modern_meta()}});
        let mut headers = post_headers(None, Some("2026-07-28"));
        headers.push(("Mcp-Method", "notifications/roots/list_changed"));
        let response = post(addr, &headers, &note).await;
        assert_eq!(response.status, 202);
        assert!(response.header("mcp-session-id").is_none());
        assert!(within("body", response.body()).await.is_empty());
        server.shutdown(Duration::from_secs(1)).await;
    }
}

/// "If the server cannot accept it, it MUST return an HTTP error status code" (2026-07-28): a
/// modern notification with a version the server does not serve, a version header that
/// disagrees with `_meta` or no version header at all gets a 4xx (with at most an id-less
/// JSON-RPC error); so does a response, which a modern client never sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacceptable_modern_notification_gets_an_http_error() {
    let (server, _) = start(modern_only()).await;
    let addr = server.local_addr();
    let note = |version: &str| {
        let mut meta = modern_meta();
        meta["io.modelcontextprotocol/protocolVersion"] = json!(version);
        json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed",
            "params": {"_meta": meta}})
    };
    let headers = |version: Option<&'static str>| {
        let mut headers = post_headers(None, version);
        headers.push(("Mcp-Method", "notifications/roots/list_changed"));
        headers
    };
    let cases = [
        (
            headers(Some("2099-01-01")),
            note("2099-01-01"),
            "unsupported version",
        ),
        (
            headers(Some("2025-11-25")),
            note("2026-07-28"),
            "header disagrees",
        ),
        (headers(None), note("2026-07-28"), "no version header"),
    ];
    for (headers, body, what) in cases {
        assert_refused(post(addr, &headers, &body).await, 400, what).await;
    }
    let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {"_meta": modern_meta()}});
    let response = post(addr, &post_headers(None, Some("2026-07-28")), &answer).await;
    assert!(
        (400..500).contains(&response.status),
        "a response: {}",
        response.status
    );
    server.shutdown(Duration::from_secs(1)).await;
}

/// "the server MUST return either `Content-Type: application/json` … or
/// `Content-Type: text/event-stream`" for a request (2026-07-28): results, streams and the
/// JSON-RPC errors of refused requests alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_request_is_answered_with_json_or_an_event_stream() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let response = post(
        addr,
        &modern_headers("tools/call", Some("echo")),
        &modern_call(1, "echo", json!({"text": "a"})),
    )
    .await;
    assert_eq!(response.status, 200);
    assert_eq!(media_type(&response).as_deref(), Some("application/json"));
    let mut body = modern_call(2, "progress", json!({"count": 2}));
    body["params"]["_meta"]["progressToken"] = json!("p");
    let response = post(addr, &modern_headers("tools/call", Some("progress")), &body).await;
    assert_eq!(response.status, 200);
    assert_eq!(media_type(&response).as_deref(), Some("text/event-stream"));
    assert_eq!(messages_of(response).await.last().unwrap()["id"], 2);
    // Refused requests: an unknown method (404), a header mismatch (400).
    let unknown =
        json!({"jsonrpc": "2.0", "id": 3, "method": "no/such", "params": {"_meta": modern_meta()}});
    let response = post(addr, &modern_headers("no/such", None), &unknown).await;
    assert_eq!(response.status, 404);
    assert_eq!(media_type(&response).as_deref(), Some("application/json"));
    let response = post(
        addr,
        &modern_headers("tools/call", Some("other")),
        &modern_call(4, "echo", json!({})),
    )
    .await;
    assert_eq!(response.status, 400);
    assert_eq!(media_type(&response).as_deref(), Some("application/json"));
    server.shutdown(Duration::from_secs(1)).await;
}

/// "These notifications MUST relate to the originating client request" (2026-07-28): two
/// streams at once each carry their own request's progress only, and a list change the tool
/// causes is not put on the call's stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_stream_notifications_belong_to_their_request() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let progress = |id: i64, token: &str| {
        let mut body = modern_call(id, "progress", json!({"count": 4}));
        body["params"]["_meta"]["progressToken"] = json!(token);
        body
    };
    let headers = modern_headers("tools/call", Some("progress"));
    let mut x = post(addr, &headers, &progress(1, "x")).await;
    let mut y = post(addr, &headers, &progress(2, "y")).await;
    for (stream, token, id) in [(&mut x, "x", 1), (&mut y, "y", 2)] {
        let messages = drain(stream).await;
        assert_eq!(messages.len(), 5, "{messages:?}");
        for (event_id, message) in &messages[..4] {
            assert!(event_id.is_none());
            assert_eq!(message["method"], "notifications/progress", "{message}");
            assert_eq!(message["params"]["progressToken"], token, "{message}");
        }
        assert_eq!(messages[4].1["id"], id);
    }
    let response = post(
        addr,
        &modern_headers("tools/call", Some("announce")),
        &modern_call(3, "announce", json!({})),
    )
    .await;
    let messages = messages_of(response).await;
    assert_eq!(messages.len(), 1, "only the answer: {messages:?}");
    assert_eq!(messages[0]["id"], 3);
    server.shutdown(Duration::from_secs(1)).await;
}

/// "The server MUST NOT send independent JSON-RPC requests on this stream" (2026-07-28). The rule
/// is the server facade's: a tool that asks the client (elicitation), called by a client that
/// declares elicitation, answers with an `input_required` result naming its question, and nothing
/// on the stream is a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_streams_carry_no_server_requests() {
    let server = modelctx_tests::facade::server()
        .serve_http("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let addr = server.local_addr();
    let mut body = modern_call(1, "ask", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"elicitation": {}});
    let response = post(addr, &modern_headers("tools/call", Some("ask")), &body).await;
    assert_eq!(response.status, 200);
    let messages = messages_of(response).await;
    for message in &messages {
        assert!(
            !(message.get("method").is_some() && message.get("id").is_some()),
            "a request on a modern stream: {message}"
        );
    }
    let answer = messages.last().unwrap();
    assert_eq!(answer["id"], 1, "{messages:?}");
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    let asked = answer["result"]["inputRequests"]
        .as_object()
        .expect("inputRequests");
    assert!(
        asked.values().any(|r| r["method"] == "elicitation/create"),
        "{answer}"
    );
    server.shutdown(Duration::from_secs(1)).await;
}

/// An application for the cancellation rule: its one tool sends a progress notification
/// (`chatty`) or nothing (`quiet`), waits until the client closes the stream, then keeps trying to
/// send on it; it reports when the transport refuses.
struct Lingering {
    report: mpsc::UnboundedSender<&'static str>,
}

struct NoLegacy;

impl LegacyHandler for NoLegacy {
    fn input(&self, _input: Incoming, _context: RequestContext) {}
    fn abandoned(&self, _id: modelctx_types::RequestId) {}
    fn closed(&self, _reason: modelctx_http::server::Closed) {}
}

fn message(value: Value) -> Message {
    match modelctx_types::decode(value.to_string().as_bytes()) {
        Ok(Incoming::Single(message)) => message,
        other => panic!("not one message: {other:?}"),
    }
}

impl McpApp for Lingering {
    fn open_session(&self, _session: LegacySession) -> Arc<dyn LegacyHandler> {
        Arc::new(NoLegacy)
    }

    fn modern(&self, request: ModernRequest) {
        let report = self.report.clone();
        tokio::spawn(async move {
            let ModernRequest {
                message: m, reply, ..
            } = request;
            let Message::Request(r) = &m else { return };
            let params: Value = serde_json::from_str(r.params.as_deref().unwrap().get()).unwrap();
            let chatty = params["name"] == "chatty";
            let progress = message(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": "t", "progress": 1}}));
            if chatty {
                reply.send(progress.clone()).await.unwrap();
            }
            let _ = report.send("started");
            reply.cancelled().cancelled().await;
            let _ = report.send("cancelled");
            while reply.send(progress.clone()).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let _ = report.send("refused");
        });
    }
}

/// "Closing the SSE response stream MUST be treated … as cancellation" and "MUST NOT send any
/// further messages for it" (2026-07-28): once the client closes the stream, the request is
/// cancelled and its stream takes no more messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_sent_for_a_cancelled_modern_request() {
    let (report, mut reports) = mpsc::unbounded_channel();
    let mut config = modern_only();
    config.keep_alive = Some(Duration::from_millis(20));
    let server = serve("127.0.0.1:0", config, Arc::new(Lingering { report }))
        .await
        .unwrap();
    let addr = server.local_addr();
    let mut response = post(
        addr,
        &modern_headers("tools/call", Some("chatty")),
        &modern_call(1, "chatty", json!({})),
    )
    .await;
    assert_eq!(media_type(&response).as_deref(), Some("text/event-stream"));
    let (_, first) = within("progress", response.next_message()).await.unwrap();
    assert_eq!(first["method"], "notifications/progress");
    assert_eq!(within("report", reports.recv()).await, Some("started"));
    drop(response);
    assert_eq!(within("report", reports.recv()).await, Some("cancelled"));
    assert_eq!(within("report", reports.recv()).await, Some("refused"));
    server.shutdown(Duration::from_secs(1)).await;
}

/// "A server that does not support such clients MUST reject a request without the header"
/// (2026-07-28): a modern-only server answers a modern request without `MCP-Protocol-Version`
/// with 400 and HeaderMismatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_only_server_rejects_a_request_without_the_version_header() {
    let (server, _) = start(modern_only()).await;
    let addr = server.local_addr();
    let headers = without(
        &modern_headers("tools/call", Some("echo")),
        &["MCP-Protocol-Version"],
    );
    let response = post(addr, &headers, &modern_call(1, "echo", json!({}))).await;
    assert_header_mismatch(response, "no version header").await;
    server.shutdown(Duration::from_secs(1)).await;
}

/// The same rule (2026-07-28) for a request that carries no version anywhere: "reject … per
/// Server Validation" means 400 with HeaderMismatch (-32020), the missing header being a
/// validation failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_only_server_rejects_a_versionless_request_with_header_mismatch() {
    let (server, _) = start(modern_only()).await;
    let addr = server.local_addr();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let mut headers = post_headers(None, None);
    headers.push(("Mcp-Method", "tools/list"));
    let response = post(addr, &headers, &list).await;
    assert_header_mismatch(response, "no version anywhere").await;
    server.shutdown(Duration::from_secs(1)).await;
}

/// "These headers are REQUIRED" (`Mcp-Method`, `Mcp-Name`; 2026-07-28): a request missing one,
/// or with one that differs from the body, gets 400 and HeaderMismatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_standard_headers_get_400_header_mismatch() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let call = modern_call(1, "echo", json!({"text": "x"}));
    let full = modern_headers("tools/call", Some("echo"));
    assert_header_mismatch(
        post(addr, &without(&full, &["Mcp-Method"]), &call).await,
        "tools/call without Mcp-Method",
    )
    .await;
    assert_header_mismatch(
        post(addr, &without(&full, &["Mcp-Name"]), &call).await,
        "tools/call without Mcp-Name",
    )
    .await;
    assert_header_mismatch(
        post(addr, &modern_headers("tools/list", Some("echo")), &call).await,
        "Mcp-Method differs",
    )
    .await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
        "params": {"_meta": modern_meta()}});
    assert_header_mismatch(
        post(addr, &post_headers(None, Some("2026-07-28")), &list).await,
        "tools/list without Mcp-Method",
    )
    .await;
    let read = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
        "params": {"uri": "file:///a.txt", "_meta": modern_meta()}});
    assert_header_mismatch(
        post(addr, &modern_headers("resources/read", None), &read).await,
        "resources/read without Mcp-Name",
    )
    .await;
    let prompt = json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get",
        "params": {"name": "p", "_meta": modern_meta()}});
    assert_header_mismatch(
        post(addr, &modern_headers("prompts/get", None), &prompt).await,
        "prompts/get without Mcp-Name",
    )
    .await;
    server.shutdown(Duration::from_secs(1)).await;
}

/// "servers MUST decode an encoded `Mcp-Name` or `Mcp-Param-{Name}` value before comparing"
/// (2026-07-28): base64 sentinel values are compared decoded, and a decoded mismatch is still one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_header_values_are_decoded_before_comparison() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    // "echo"
    let response = post(
        addr,
        &modern_headers("tools/call", Some("=?base64?ZWNobw==?=")),
        &modern_call(1, "echo", json!({"text": "hi"})),
    )
    .await;
    assert_eq!(response.status, 200);
    assert_eq!(
        within("json", response.json()).await["result"]["content"][0]["text"],
        "hi"
    );
    // "wétter": the header check passes, the tool is unknown to the application.
    let response = post(
        addr,
        &modern_headers("tools/call", Some("=?base64?d8OpdHRlcg==?=")),
        &modern_call(2, "wétter", json!({})),
    )
    .await;
    let reply = within("json", response.json()).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    // "eu-wést" as a parameter.
    let mut headers = modern_headers("tools/call", Some("region"));
    headers.push(("Mcp-Param-Region", "=?base64?ZXUtd8Opc3Q=?="));
    let response = post(
        addr,
        &headers,
        &modern_call(3, "region", json!({"region": "eu-wést"})),
    )
    .await;
    assert_eq!(response.status, 200);
    assert_eq!(
        within("json", response.json()).await["result"]["content"][0]["text"],
        "eu-wést"
    );
    // "other" encoded does not match "echo".
    assert_header_mismatch(
        post(
            addr,
            &modern_headers("tools/call", Some("=?base64?b3RoZXI=?=")),
            &modern_call(4, "echo", json!({})),
        )
        .await,
        "encoded mismatch",
    )
    .await;
    server.shutdown(Duration::from_secs(1)).await;
}

/// "Servers MUST reject requests with a recognized `Mcp-Param-{Name}` header that contains
/// invalid characters" (2026-07-28): raw non-ASCII bytes and broken base64 get 400 and
/// HeaderMismatch, even when the intended text equals the body's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn param_headers_with_invalid_characters_are_refused() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let body = modern_call(1, "region", json!({"region": "eu-wést"}));
    for value in [
        "eu-wést",
        "=?base64?ZXUtd8Opc3Q?=",
        "=?base64?@@@@?=",
        "=?base64?/w==?=",
    ] {
        let mut headers = modern_headers("tools/call", Some("region"));
        headers.push(("Mcp-Param-Region", value));
        assert_header_mismatch(post(addr, &headers, &body).await, value).await;
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// "Server MUST NOT expect the header" when the parameter is `null` or not in the arguments
/// (2026-07-28).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_or_null_parameters_need_no_header() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    for arguments in [json!({}), json!({"region": null})] {
        let response = post(
            addr,
            &modern_headers("tools/call", Some("region")),
            &modern_call(1, "region", arguments.clone()),
        )
        .await;
        assert_eq!(response.status, 200, "{arguments}");
        let reply = within("json", response.json()).await;
        assert!(reply["result"].is_object(), "{arguments}: {reply}");
    }
    server.shutdown(Duration::from_secs(1)).await;
}

/// "Clients and servers MUST use case-insensitive comparisons for header names" (2026-07-28):
/// the standard and parameter headers are found whatever their case (their values, in
/// contrast, are compared exactly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_names_are_case_insensitive() {
    let (server, _) = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let body = modern_call(1, "region", json!({"region": "eu-west"}));
    for (version, method, name, param) in [
        (
            "mcp-protocol-version",
            "mcp-method",
            "mcp-name",
            "mcp-param-region",
        ),
        (
            "MCP-PROTOCOL-VERSION",
            "MCP-METHOD",
            "MCP-NAME",
            "MCP-PARAM-REGION",
        ),
        (
            "Mcp-Protocol-Version",
            "mCp-MeThOd",
            "McP-nAmE",
            "mcp-PARAM-rEgIoN",
        ),
    ] {
        let headers = [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            (version, "2026-07-28"),
            (method, "tools/call"),
            (name, "region"),
            (param, "eu-west"),
        ];
        let response = post(addr, &headers, &body).await;
        assert_eq!(response.status, 200, "{headers:?}");
        assert_eq!(
            within("json", response.json()).await["result"]["content"][0]["text"],
            "eu-west"
        );
    }
    assert_header_mismatch(
        post(
            addr,
            &modern_headers("TOOLS/CALL", Some("echo")),
            &modern_call(2, "echo", json!({})),
        )
        .await,
        "values are case-sensitive",
    )
    .await;
    server.shutdown(Duration::from_secs(1)).await;
}

/// An application that breaks the 2026-07-28 stream rule: it sends a request of its own before
/// the response.
struct RequestingApp;

impl modelctx_http::server::McpApp for RequestingApp {
    fn open_session(
        &self,
        _session: modelctx_http::server::LegacySession,
    ) -> Arc<dyn modelctx_http::server::LegacyHandler> {
        unreachable!("modern requests only")
    }

    fn modern(&self, request: modelctx_http::server::ModernRequest) {
        tokio::spawn(async move {
            let Message::Request(call) = &request.message else {
                return;
            };
            let ask: Message = serde_json::from_value(json!({
                "jsonrpc": "2.0", "id": "server-1", "method": "elicitation/create",
                "params": {"message": "?", "requestedSchema": {"type": "object"}}}))
            .unwrap();
            let done: Message = serde_json::from_value(json!({
                "jsonrpc": "2.0", "id": call.id, "result": {"content": [], "resultType": "complete"}}))
            .unwrap();
            let _ = request.reply.send(ask).await;
            let _ = request.reply.send(done).await;
        });
    }
}

/// 2026-07-28: the server never sends independent requests on a request's stream. An application
/// that tries anyway has a bug the transport does not hide: the request is not written, and the
/// client's request fails with an internal error (-32603) in its place; the application's later
/// answer is not written either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_requests_on_a_modern_stream() {
    let server = modelctx_http::server::serve(
        "127.0.0.1:0",
        ServerConfig::default(),
        Arc::new(RequestingApp),
    )
    .await
    .unwrap();
    let addr = server.local_addr();
    let response = post(
        addr,
        &modern_headers("tools/call", Some("echo")),
        &modern_call(1, "echo", json!({})),
    )
    .await;
    assert_eq!(response.status, 200);
    assert_eq!(media_type(&response).as_deref(), Some("application/json"));
    let body = response.json().await;
    assert_eq!(body["id"], 1, "only the error: {body}");
    assert_eq!(body["error"]["code"], -32603, "{body}");
    assert!(body.get("result").is_none(), "{body}");
    server.shutdown(Duration::from_secs(1)).await;
}
