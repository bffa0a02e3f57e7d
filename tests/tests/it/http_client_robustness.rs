//! Random server behaviour against the HTTP client: whatever status, content type and body come
//! back (for the call and for every resumption), the request ends with an answer or a typed
//! error, never a panic or a hang, and the transport's tables return to empty.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelctx_http::client::ClientConfig;
use modelctx_tests::http_client::*;
use proptest::prelude::*;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    content_type: Option<&'static str>,
    body: Body,
}

#[derive(Debug, Clone)]
enum Body {
    /// The right answer, as JSON or as one SSE event.
    Result,
    /// An answer to another id.
    WrongId,
    /// A JSON-RPC error without id.
    ErrorNoId,
    /// SSE: an event id and a retry, then the end (a resumable break).
    Primed,
    /// SSE: a notification, then the end.
    NotificationOnly,
    /// Random bytes.
    Bytes(Vec<u8>),
    /// The right answer cut at a byte.
    Truncated(usize),
}

fn answers() -> impl Strategy<Value = Answer> {
    let status = prop_oneof![
        6 => Just(200u16),
        1 => Just(202),
        1 => Just(400),
        1 => Just(404),
        1 => Just(405),
        1 => Just(500),
    ];
    let content_type = prop_oneof![
        3 => Just(Some("application/json")),
        3 => Just(Some("text/event-stream")),
        1 => Just(Some("text/plain")),
        1 => Just(None),
    ];
    let body = prop_oneof![
        4 => Just(Body::Result),
        1 => Just(Body::WrongId),
        1 => Just(Body::ErrorNoId),
        2 => Just(Body::Primed),
        1 => Just(Body::NotificationOnly),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Body::Bytes),
        1 => (0usize..80).prop_map(Body::Truncated),
    ];
    (status, content_type, body).prop_map(|(status, content_type, body)| Answer {
        status,
        content_type,
        body,
    })
}

fn body_bytes(answer: &Answer, id: &Value, event: usize) -> Vec<u8> {
    let sse = answer.content_type == Some("text/event-stream");
    let message = |m: &Value| {
        if sse {
            format!("id: e{event}\ndata: {m}\n\n").into_bytes()
        } else {
            m.to_string().into_bytes()
        }
    };
    match &answer.body {
        Body::Result => message(&text_result(id, "ok")),
        Body::WrongId => message(&text_result(&json!("other"), "no")),
        Body::ErrorNoId => message(&json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32000, "message": "no"}})),
        Body::Primed => format!("id: e{event}\nretry: 1\ndata:\n\n").into_bytes(),
        Body::NotificationOnly => message(&json!({"jsonrpc": "2.0",
            "method": "notifications/message", "params": {"level": "info", "data": "x"}})),
        Body::Bytes(bytes) => bytes.clone(),
        Body::Truncated(at) => {
            let mut whole = message(&text_result(id, "ok"));
            whole.truncate(*at);
            whole
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_server_behaviour_ends_the_request_and_empties_the_tables(
        call in answers(),
        resumes in proptest::collection::vec(answers(), 0..4),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let resumes = Arc::new(Mutex::new(resumes));
            let call_id = Arc::new(Mutex::new(Value::Null));
            let server = ScriptServer::start(move |seen, mut reply| {
                let call = call.clone();
                let resumes = resumes.clone();
                let call_id = call_id.clone();
                async move {
                    let answer = match (seen.method.as_str(), seen.rpc_method()) {
                        ("POST", Some("initialize")) => {
                            let init = initialize_result(&seen.body["id"]);
                            return reply.json(200, &[("mcp-session-id", "s")], &init).await;
                        }
                        ("POST", Some("tools/call")) => {
                            *call_id.lock().unwrap() = seen.body["id"].clone();
                            call
                        }
                        ("POST", _) => return reply.full(202, &[], "").await,
                        ("GET", _) if seen.header("last-event-id").is_some() => {
                            let next = resumes.lock().unwrap().pop();
                            match next {
                                Some(a) => a,
                                None => return reply.full(405, &[], "").await,
                            }
                        }
                        _ => return reply.full(405, &[], "").await,
                    };
                    let id = call_id.lock().unwrap().clone();
                    let body = body_bytes(&answer, &id, 1);
                    let mut head = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", answer.status);
                    if let Some(kind) = answer.content_type {
                        head.push_str(&format!("content-type: {kind}\r\n"));
                    }
                    if answer.content_type != Some("text/event-stream") {
                        head.push_str(&format!("content-length: {}\r\n", body.len()));
                    }
                    head.push_str("\r\n");
                    reply.raw(head.as_bytes()).await;
                    reply.raw(&body).await;
                }
            })
            .await;
            let mut config = ClientConfig::default();
            config.reconnect.initial_delay = Duration::from_millis(1);
            config.reconnect.max_delay = Duration::from_millis(5);
            config.standalone_stream = false;
            let mut client = Driver::new(&server.url(), legacy_config(), config);
            tokio::time::timeout(Duration::from_secs(10), client.connect())
                .await
                .expect("connects in time")
                .expect("connects");
            let id = client.start("tools/call", json!({"name": "x", "arguments": {}}));
            // Ends with an answer or a typed error; a session ended by a 404 fails it too.
            let answer = tokio::time::timeout(Duration::from_secs(10), client.answer(&id)).await;
            assert!(answer.is_ok(), "no outcome in 10 s; notes {:?}", client.notes);
            // The transport's tasks end on their own after the outcome: waited for (polled, at
            // most 10 s), not given a fixed time.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            let mut sizes = client.transport.table_sizes();
            while (sizes.tasks, sizes.requests) != (0, 0) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
                sizes = client.transport.table_sizes();
            }
            assert_eq!((sizes.tasks, sizes.requests), (0, 0), "notes {:?}", client.notes);
            assert_eq!(client.session.table_sizes().outgoing, 0);
        });
    }
}
