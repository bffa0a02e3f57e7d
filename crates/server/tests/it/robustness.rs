//! Random lines (requests of every method with random params, notifications, garbage) against a
//! server on a line-framed stream: every request is answered, nothing panics or hangs, and once
//! the client goes away the server's load returns to zero.

use std::collections::HashSet;
use std::time::Duration;

use modelctx_server::{
    Context, NoArgs, Prompt, ReadRequest, Resource, ResourceContents, Server, Tool,
};
use modelctx_stdio::{LineCodec, LineReader, LineWriter};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, duplex};

async fn echo(args: Value) -> String {
    args.to_string()
}

async fn boom(_: NoArgs) -> String {
    panic!("boom")
}

async fn nap(context: Context, _: NoArgs) -> String {
    let _ = context.progress(1.0, None, None).await;
    tokio::time::sleep(Duration::from_millis(3)).await;
    "rested".into()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Name {
    name: String,
}

async fn hello(args: Name) -> String {
    format!("hello {}", args.name)
}

async fn readme(_: Context, request: ReadRequest) -> ResourceContents {
    ResourceContents::text(request.uri, "x")
}

fn server() -> Server {
    Server::builder("robust", "1")
        .tool(Tool::with_input_schema(
            "echo",
            serde_json::Map::new(),
            echo,
        ))
        .tool(Tool::new("boom", boom))
        .tool(Tool::new("nap", nap))
        .prompt(Prompt::new("hello", hello).complete("name", |p: String, _| async move { vec![p] }))
        .resource(Resource::new("file:///a", "a", readme))
        .build()
}

fn params() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({})),
        Just(json!(null)),
        Just(json!([1, 2])),
        Just(json!({"name": "echo", "arguments": {"a": 1}})),
        Just(json!({"name": "boom", "arguments": {}})),
        Just(json!({"name": "nap"})),
        Just(json!({"name": "nope"})),
        Just(json!({"name": "echo", "arguments": 5})),
        Just(json!({"name": "hello", "arguments": {"name": "x"}})),
        Just(json!({"name": "hello"})),
        Just(json!({"uri": "file:///a"})),
        Just(json!({"uri": "file:///missing"})),
        Just(json!({"cursor": "bogus"})),
        Just(json!({"level": "debug"})),
        Just(
            json!({"ref": {"type": "ref/prompt", "name": "hello"}, "argument": {"name": "name", "value": "a"}})
        ),
        Just(
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}, "name": "echo", "arguments": {}})
        ),
        Just(json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "1999-01-01"}})),
        Just(json!({"_meta": {"progressToken": 7}, "name": "nap", "arguments": {}})),
    ]
}

fn methods() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("tools/list"),
        Just("tools/call"),
        Just("prompts/list"),
        Just("prompts/get"),
        Just("resources/list"),
        Just("resources/read"),
        Just("resources/templates/list"),
        Just("resources/subscribe"),
        Just("resources/unsubscribe"),
        Just("completion/complete"),
        Just("logging/setLevel"),
        Just("ping"),
        Just("server/discover"),
        Just("nope/nope"),
    ]
}

/// A line, and the id of the request it is (when it must be answered).
fn lines() -> impl Strategy<Value = (String, Option<i64>)> {
    prop_oneof![
        6 => (methods(), params(), 0i64..1_000_000).prop_map(|(m, p, id)| {
            let mut message = json!({"jsonrpc": "2.0", "id": id, "method": m});
            if !p.is_null() {
                message["params"] = p;
            }
            (message.to_string(), Some(id))
        }),
        1 => (0i64..1_000_000).prop_map(|id| {
            (json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}).to_string(), None)
        }),
        1 => Just((json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(), None)),
        1 => "[ -~]{0,40}".prop_map(|garbage| (garbage, None)),
        1 => Just(("[]".to_owned(), None)),
        1 => Just((json!({"jsonrpc": "2.0", "id": 1, "result": {}}).to_string(), None)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_request_is_answered_and_the_load_returns_to_zero(
        version in prop_oneof![Just("2024-11-05"), Just("2025-03-26"), Just("2025-11-25")],
        sequence in proptest::collection::vec(lines(), 0..40),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async move {
            let server = server();
            let (client_side, server_side) = duplex(1 << 16);
            let (server_read, server_write) = tokio::io::split(server_side);
            let serving = {
                let server = server.clone();
                tokio::spawn(async move {
                    server
                        .serve_lines(LineReader::new(server_read, LineCodec::new()), LineWriter::new(server_write))
                        .await
                })
            };
            let (client_read, mut client_write) = tokio::io::split(client_side);
            let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "p", "version": "1"}}});
            let mut text = format!("{init}\n");
            let mut expected: HashSet<Value> = HashSet::new();
            expected.insert(json!("init"));
            for (line, id) in &sequence {
                text.push_str(line);
                text.push('\n');
                if let Some(id) = id {
                    expected.insert(json!(id));
                }
            }
            client_write.write_all(text.as_bytes()).await.unwrap();
            // Read until every request id was answered.
            let mut reader = LineReader::new(client_read, LineCodec::new());
            let mut answered: HashSet<Value> = HashSet::new();
            let read_all = async {
                while !expected.is_subset(&answered) {
                    let Ok(Some(Ok(line))) = reader.next_line().await else { break };
                    let message: Value = serde_json::from_slice(line.as_bytes()).unwrap();
                    let replies = match message {
                        Value::Array(items) => items,
                        one => vec![one],
                    };
                    for reply in replies {
                        if reply.get("result").is_some() || reply.get("error").is_some() {
                            answered.insert(reply["id"].clone());
                        }
                    }
                }
            };
            tokio::time::timeout(Duration::from_secs(10), read_all).await.expect("every request is answered within 10 s");
            let missing: Vec<_> = expected.difference(&answered).collect();
            assert!(missing.is_empty(), "unanswered: {missing:?}");
            // The client goes away: the server ends the connection and everything it held.
            drop(client_write);
            drop(reader);
            tokio::time::timeout(Duration::from_secs(10), serving).await.expect("the server ends").unwrap().unwrap();
            tokio::time::timeout(Duration::from_secs(10), async {
                while server.load() != modelctx_server::Load::default() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }).await.expect("the load returns to zero");
        });
    }
}
