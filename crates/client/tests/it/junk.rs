//! A property: a scripted server that answers every request with random junk (random JSON
//! values, errors, wrong ids, unknown notifications, requests of its own, input requests,
//! batches) never makes the client panic or hang, and never ends the connection: every call ends,
//! soon, with `Ok` or an `Error` other than `Closed`, and the connection's tables drain.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Era, Fake, SUBSCRIPTION_ID_KEY, connect, full_capabilities, id_json, sampled};
use modelctx_client::{
    CallOptions, Client, CompletionRef, Elicited, Error, LogLevel, ProtocolVersion, model,
};
use modelctx_types::Message;
use proptest::prelude::*;
use serde_json::{Value, json};

/// How long each call waits for its answer.
const CALL_TIMEOUT: Duration = Duration::from_millis(25);
/// A call that has not ended after this long hangs.
const HANG: Duration = Duration::from_secs(3);

/// Panics anywhere in the process (the client's tasks included, whose panics tokio would
/// otherwise swallow).
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

// -- what the server sends --------------------------------------------------------------------------

/// What the server does on receiving a request (several per request, in order).
#[derive(Debug, Clone)]
enum Action {
    /// Answers with this result (any JSON value).
    Result(Value),
    /// Answers with an error.
    Error {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    /// Answers another id.
    WrongId { id: Value, result: Value },
    /// Sends a notification.
    Notify { method: String, params: Value },
    /// Sends a request of its own.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// Answers with `input_required`.
    InputRequired {
        requests: Value,
        state: Option<String>,
    },
    /// Acknowledges the request as a listen stream, agreeing to `notifications`.
    Acknowledge(Value),
    /// Answers with a batch of results and errors for the request's id and others.
    Batch(Vec<Value>),
    /// Sends this text if it is JSON-RPC at all.
    Text(String),
    /// Says nothing.
    Silence,
}

const KEYS: &[&str] = &[
    "content",
    "tools",
    "name",
    "inputSchema",
    "outputSchema",
    "nextCursor",
    "resultType",
    "structuredContent",
    "isError",
    "inputRequests",
    "requestState",
    "type",
    "text",
    "uri",
    "contents",
    "messages",
    "prompts",
    "resources",
    "completion",
    "values",
    "_meta",
    "method",
    "params",
    "ttlMs",
    "cacheScope",
    "requestId",
    "progressToken",
    "progress",
    "notifications",
    "io.modelcontextprotocol/subscriptionId",
];

const STRINGS: &[&str] = &[
    "complete",
    "input_required",
    "text",
    "image",
    "object",
    "elicitation/create",
    "sampling/createMessage",
    "roots/list",
    "public",
    "private",
    "file:///a",
    "",
];

const NOTIFICATION_METHODS: &[&str] = &[
    "notifications/progress",
    "notifications/cancelled",
    "notifications/message",
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
    "notifications/resources/updated",
    "notifications/subscriptions/acknowledged",
    "notifications/elicitation/complete",
    "notifications/initialized",
    "x/unknown",
];

const REQUEST_METHODS: &[&str] = &[
    "sampling/createMessage",
    "roots/list",
    "elicitation/create",
    "ping",
    "tools/call",
    "x/unknown",
];

/// One of `names`.
fn one_of(names: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::select(names).prop_map(str::to_owned)
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => one_of(KEYS),
        1 => "[a-zA-Z_/]{1,6}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..30).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        proptest::sample::select(STRINGS).prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(key(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Mostly objects: results that look like results.
fn result_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => proptest::collection::btree_map(key(), json_value(), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => json_value(),
    ]
}

fn id_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (0i64..12).prop_map(Value::from),
        1 => "[a-z0-9]{1,3}".prop_map(Value::from),
        1 => Just(Value::Null),
        1 => any::<f64>().prop_map(Value::from),
    ]
}

/// Params that often name a request or a progress token of this connection.
fn params_value() -> impl Strategy<Value = Value> {
    (
        result_value(),
        id_value(),
        id_value(),
        proptest::option::of(id_value()),
    )
        .prop_map(|(mut params, request_id, token, subscription)| {
            if let Value::Object(map) = &mut params {
                map.entry("requestId").or_insert(request_id);
                map.entry("progressToken").or_insert(token);
                if let Some(subscription) = subscription {
                    map.insert("_meta".into(), json!({SUBSCRIPTION_ID_KEY: subscription}));
                }
            }
            params
        })
}

fn input_requests() -> impl Strategy<Value = Value> {
    let one = prop_oneof![
        Just(json!({
            "method": "elicitation/create",
            "params": {"message": "m", "requestedSchema": {"type": "object", "properties": {}}},
        })),
        Just(json!({"method": "roots/list", "params": {}})),
        Just(json!({
            "method": "sampling/createMessage",
            "params": {"messages": [], "maxTokens": 5},
        })),
        result_value(),
    ];
    prop_oneof![
        4 => proptest::collection::btree_map("[a-z]{1,3}", one, 0..3)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => json_value(),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => result_value().prop_map(Action::Result),
        2 => (any::<i64>(), "\\PC{0,10}", proptest::option::of(json_value()))
            .prop_map(|(code, message, data)| Action::Error { code, message, data }),
        2 => (id_value(), result_value()).prop_map(|(id, result)| Action::WrongId { id, result }),
        3 => (one_of(NOTIFICATION_METHODS), params_value())
            .prop_map(|(method, params)| Action::Notify { method, params }),
        2 => (id_value(), one_of(REQUEST_METHODS), params_value())
            .prop_map(|(id, method, params)| Action::Request { id, method, params }),
        2 => (input_requests(), proptest::option::of("\\PC{0,8}"))
            .prop_map(|(requests, state)| Action::InputRequired { requests, state }),
        1 => json_value().prop_map(Action::Acknowledge),
        1 => proptest::collection::vec(result_value(), 1..3).prop_map(Action::Batch),
        1 => "\\PC{0,30}".prop_map(Action::Text),
        1 => Just(Action::Silence),
    ]
}

/// Plays `action` in answer to `request`.
async fn play(fake: &mut Fake, request: &modelctx_types::Request, action: &Action) {
    let id = id_json(&request.id);
    let mut message = match action {
        Action::Result(result) => json!({"id": id, "result": result}),
        Action::Error {
            code,
            message,
            data,
        } => {
            let mut error = json!({"code": code, "message": message});
            if let Some(data) = data {
                error["data"] = data.clone();
            }
            json!({"id": id, "error": error})
        }
        Action::WrongId { id, result } => json!({"id": id, "result": result}),
        Action::Notify { method, params } => json!({"method": method, "params": params}),
        Action::Request { id, method, params } => {
            json!({"id": id, "method": method, "params": params})
        }
        Action::InputRequired { requests, state } => {
            let mut result = json!({"resultType": "input_required", "inputRequests": requests});
            if let Some(state) = state {
                result["requestState"] = json!(state);
            }
            json!({"id": id, "result": result})
        }
        Action::Acknowledge(notifications) => json!({
            "method": "notifications/subscriptions/acknowledged",
            "params": {
                "_meta": {SUBSCRIPTION_ID_KEY: id},
                "notifications": notifications,
            },
        }),
        Action::Batch(results) => {
            let batch: Vec<Value> = results
                .iter()
                .enumerate()
                .map(|(i, result)| {
                    let id = if i == 0 { id.clone() } else { json!(i) };
                    json!({"jsonrpc": "2.0", "id": id, "result": result})
                })
                .collect();
            fake.try_send_text(&Value::Array(batch).to_string()).await;
            return;
        }
        Action::Text(text) => {
            fake.try_send_text(text).await;
            return;
        }
        Action::Silence => return,
    };
    message["jsonrpc"] = json!("2.0");
    // Junk that is not JSON-RPC at all (params that are a number) cannot cross a channel.
    fake.try_send_text(&message.to_string()).await;
}

/// Answers every request with the next burst of the script, until the client goes away.
async fn serve(mut fake: Fake, script: Vec<Vec<Action>>) {
    let mut bursts = script.iter().cycle();
    while let Some(message) = fake
        .find(Duration::from_secs(30), |m| {
            matches!(m, Message::Request(_))
        })
        .await
    {
        let Message::Request(request) = message else {
            unreachable!()
        };
        fake.clear(); // notifications and answers of the client's: not looked at
        for action in bursts.next().into_iter().flatten() {
            play(&mut fake, &request, action).await;
        }
    }
}

// -- what the client does -------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Op {
    CallTool,
    CallToolWithProgress,
    ListTools,
    ListAllTools,
    ReadResource,
    GetPrompt,
    Complete,
    Ping,
    Discover,
    Subscribe,
    Unsubscribe,
    Listening,
    SetLogLevel,
    Request,
}

fn op() -> impl Strategy<Value = Op> {
    proptest::sample::select(
        &[
            Op::CallTool,
            Op::CallToolWithProgress,
            Op::ListTools,
            Op::ListAllTools,
            Op::ReadResource,
            Op::GetPrompt,
            Op::Complete,
            Op::Ping,
            Op::Discover,
            Op::Subscribe,
            Op::Unsubscribe,
            Op::Listening,
            Op::SetLogLevel,
            Op::Request,
        ][..],
    )
}

async fn run(client: &Client, op: Op) -> Result<(), Error> {
    match op {
        Op::CallTool => client.call_tool("t", json!({"a": 1})).await.map(drop),
        Op::CallToolWithProgress => {
            let options = CallOptions::new()
                .on_progress(|_| {})
                .reset_timeout_on_progress(CALL_TIMEOUT * 3);
            client.call_tool_with("t", (), options).await.map(drop)
        }
        Op::ListTools => client.list_tools(None).await.map(drop),
        Op::ListAllTools => client.list_all_tools().await.map(drop),
        Op::ReadResource => client.read_resource("file:///a").await.map(drop),
        Op::GetPrompt => client.get_prompt("p", &[("k", "v")]).await.map(drop),
        Op::Complete => client
            .complete(
                &CompletionRef::Prompt("p".into()),
                "k",
                "v",
                &HashMap::new(),
            )
            .await
            .map(drop),
        Op::Ping => client.ping().await,
        Op::Discover => client.discover().await.map(drop),
        Op::Subscribe => client.subscribe_resource("file:///a").await,
        Op::Unsubscribe => client.unsubscribe_resource("file:///a").await,
        Op::Listening => {
            drop(client.notifications());
            client.listening().await
        }
        Op::SetLogLevel => client.set_log_level(LogLevel::Debug).await,
        Op::Request => client
            .request("tools/call", Default::default(), CallOptions::new())
            .await
            .map(drop),
    }
}

fn junk_client(version: Option<ProtocolVersion>) -> modelctx_client::ClientBuilder {
    let builder = common::builder()
        .request_timeout(Some(CALL_TIMEOUT))
        .on_elicitation(|_| async { Ok(Elicited::accept(Default::default())) })
        .on_sampling(|_| async {
            Ok(sampled(json!({
                "role": "assistant",
                "content": {"type": "text", "text": "ok"},
                "model": "m",
            })))
        })
        .roots(vec![model::Root {
            meta: None,
            name: None,
            uri: "file:///".into(),
        }]);
    match version {
        Some(version) => builder.protocol_version(version),
        None => builder,
    }
}

fn version() -> impl Strategy<Value = Option<ProtocolVersion>> {
    proptest::sample::select(
        &[
            None,
            Some(ProtocolVersion::V2024_11_05),
            Some(ProtocolVersion::V2025_03_26),
            Some(ProtocolVersion::V2025_06_18),
            Some(ProtocolVersion::V2025_11_25),
        ][..],
    )
}

async fn junk_case(version: Option<ProtocolVersion>, script: Vec<Vec<Action>>, ops: Vec<Op>) {
    let era = if version.is_some() {
        Era::Legacy
    } else {
        Era::Modern
    };
    let (client, fake) = connect(era, junk_client(version), full_capabilities()).await;
    let server = tokio::spawn(serve(fake, script));
    for op in ops {
        let outcome = tokio::time::timeout(HANG, run(&client, op))
            .await
            .unwrap_or_else(|_| panic!("{op:?} hung"));
        if let Err(Error::Closed(why)) = &outcome {
            panic!("{op:?}: the connection ended: {why}");
        }
    }
    let sizes = tokio::time::timeout(HANG, client.table_sizes())
        .await
        .expect("the connection's task answers")
        .expect("the connection's task lives");
    assert_eq!(sizes.calls, 0, "{sizes:?}");
    assert_eq!(sizes.waiting, 0, "{sizes:?}");
    tokio::time::timeout(HANG, client.close())
        .await
        .expect("close returned");
    assert!(client.is_closed());
    server.abort();
    let _ = server.await;
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn junk_from_the_server_never_panics_or_hangs_the_client(
        version in version(),
        script in proptest::collection::vec(proptest::collection::vec(action(), 1..4), 1..8),
        ops in proptest::collection::vec(op(), 1..7),
    ) {
        count_panics();
        let before = PANICS.load(Ordering::SeqCst);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(junk_case(version, script, ops));
        drop(runtime);
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), before, "a task panicked");
    }
}
