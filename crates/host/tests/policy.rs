//! Consent and the input servers ask for, through a host of two servers (`alpha`, `beta`: two
//! sessions of one in-process modelctx server over Streamable HTTP): the default rules on
//! annotated tools, allow-lists and a policy file; sampling and elicitation routed to the
//! application's handlers with the asking server's name and the policy's edits, refused where
//! the policy says; roots per server or shared.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelctx_host::client::{CallOptions, Elicitation, Elicited, Error};
use modelctx_host::model::{self, ContentBlock, ToolAnnotations};
use modelctx_host::policy::{PolicyFile, Rules, SamplingRule};
use modelctx_host::{Host, HostBuilder, HostConfig, HostError, Policy, ServerConfig};
use modelctx_server::{Context, HttpConfig, NoArgs, RunningServer, Server, Tool, sampling_request};
use modelctx_types::JsonObject;
use serde_json::json;

/// The longest any step may take.
const STEP: Duration = Duration::from_secs(15);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no result within {STEP:?}"))
}

fn hints(read_only: Option<bool>, destructive: Option<bool>) -> ToolAnnotations {
    ToolAnnotations {
        destructive_hint: destructive,
        idempotent_hint: None,
        open_world_hint: None,
        read_only_hint: read_only,
        title: None,
    }
}

/// What a server's input request came to, as its tool says it.
fn refused(error: modelctx_server::InputError) -> String {
    match error {
        modelctx_server::InputError::Refused(e) => format!("refused {}: {}", e.code.0, e.message),
        other => format!("failed: {other}"),
    }
}

async fn sample(context: Context, _: NoArgs) -> String {
    let params = model::CreateMessageRequestParams {
        system_prompt: Some("You are a poet.".into()),
        ..sampling_request("A haiku, please", 500)
    };
    match context.sample(params).await {
        Ok(answer) => match answer.content {
            model::CreateMessageResultContent::TextContent(text) => text.text,
            other => format!("{other:?}"),
        },
        Err(e) => refused(e),
    }
}

async fn elicit(context: Context, _: NoArgs) -> String {
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    match context.elicit("Your name?", schema).await {
        Ok(answer) => format!("{:?} {}", answer.action, json!(answer.content)),
        Err(e) => refused(e),
    }
}

async fn roots(context: Context, _: NoArgs) -> String {
    match context.list_roots().await {
        Ok(roots) => {
            let uris: Vec<_> = roots.roots.iter().map(|r| r.uri.as_str()).collect();
            uris.join(",")
        }
        Err(e) => refused(e),
    }
}

/// The server: tools that ask for input (read-only, so that the calls go through), and tools
/// of every kind of annotation.
async fn serve() -> (String, RunningServer) {
    let done = |_: NoArgs| async { "done" };
    let read_only = hints(Some(true), None);
    let server = Server::builder("asking", "1.0.0")
        .tool(Tool::new("sample", sample).annotations(read_only.clone()))
        .tool(Tool::new("elicit", elicit).annotations(read_only.clone()))
        .tool(Tool::new("roots", roots).annotations(read_only.clone()))
        .tool(Tool::new("read", done).annotations(read_only))
        .tool(Tool::new("log", done).annotations(hints(None, Some(false))))
        .tool(Tool::new("rm", done).annotations(hints(None, Some(true))))
        .tool(Tool::new("touch", done))
        .build();
    let running = server
        .serve_http("127.0.0.1:0", HttpConfig::default())
        .await
        .unwrap();
    (format!("http://{}/mcp", running.local_addr()), running)
}

/// A host of `alpha` and `beta`, both at `url`, as `configure` sets it up; started.
async fn start(url: &str, configure: impl FnOnce(HostBuilder) -> HostBuilder) -> Host {
    let mut config = HostConfig::default();
    config.servers = vec![
        ServerConfig::http("alpha", url),
        ServerConfig::http("beta", url),
    ];
    let host = within("start", configure(Host::builder(config)).start()).await;
    for status in host.servers() {
        assert_eq!(
            status.state,
            modelctx_host::ServerState::Ready,
            "{status:?}"
        );
    }
    host
}

/// The text of the tool `name`'s result, or the host's error.
async fn call(host: &Host, name: &str) -> Result<String, HostError> {
    let result = within(
        name,
        host.call_tool(name, JsonObject::new(), CallOptions::new()),
    )
    .await?;
    match result.content.first() {
        Some(ContentBlock::TextContent(text)) => Ok(text.text.clone()),
        other => panic!("{other:?}"),
    }
}

fn denied(result: Result<String, HostError>) -> String {
    match result {
        Err(HostError::Denied { reason }) => reason,
        other => panic!("not refused: {other:?}"),
    }
}

/// That a request of `asker` that the policy refuses (`method`) failed with `expected` as the
/// reason: the server got a JSON-RPC error (legacy), or the call failed in the client (modern).
fn refused_input(result: Result<String, HostError>, asker: &str, method: &str, expected: &str) {
    match result {
        Ok(text) => assert_eq!(text, format!("refused -32603: {expected}")),
        Err(HostError::Server {
            server,
            source: Error::Input { method: m, reason },
        }) => {
            assert_eq!((server.as_str(), m.as_str()), (asker, method));
            assert_eq!(reason, expected);
        }
        Err(other) => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_default_rules_refuse_destructive_and_unannotated_tools_unless_allow_listed() {
    let (url, running) = serve().await;
    let host = start(&url, |b| b.policy(Rules::new().allow("alpha", ["touch"]))).await;
    assert_eq!(call(&host, "alpha__read").await.unwrap(), "done");
    assert_eq!(call(&host, "beta__log").await.unwrap(), "done");
    let reason = denied(call(&host, "alpha__rm").await);
    assert!(
        reason.contains("\"rm\" of server \"alpha\" is marked destructive"),
        "{reason}"
    );
    let reason = denied(call(&host, "beta__touch").await);
    assert!(
        reason.contains("\"touch\" of server \"beta\" may be destructive"),
        "{reason}"
    );
    assert!(reason.contains("nobody is there to approve"), "{reason}");
    // Allow-listed for alpha only.
    assert_eq!(call(&host, "alpha__touch").await.unwrap(), "done");
    host.shutdown().await;

    // A person asked says yes to `rm` only.
    let asking = Rules::new().on_ask(|question| async move {
        if question.tool.name == "rm" {
            modelctx_host::Decision::Allow
        } else {
            modelctx_host::Decision::deny(format!("no to {}", question.exposed_name))
        }
    });
    let host = start(&url, |b| b.policy(asking)).await;
    assert_eq!(call(&host, "beta__rm").await.unwrap(), "done");
    assert_eq!(
        denied(call(&host, "beta__touch").await),
        "no to beta__touch"
    );
    host.shutdown().await;
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_policy_file_answers_consent() {
    let (url, running) = serve().await;
    let file = PolicyFile::from_json(
        r#"{
            "servers": {
                "alpha": {"allow": ["r*"], "deny": ["*"]},
                "beta": {"allow": ["touch"], "destructive": "allow"}
            }
        }"#,
    )
    .unwrap();
    let host = start(&url, |b| b.policy(file)).await;
    assert_eq!(call(&host, "alpha__rm").await.unwrap(), "done");
    let reason = denied(call(&host, "alpha__log").await);
    assert!(reason.contains("pattern \"*\""), "{reason}");
    assert_eq!(call(&host, "beta__touch").await.unwrap(), "done");
    assert_eq!(call(&host, "beta__rm").await.unwrap(), "done");
    host.shutdown().await;
    // Without servers' entries: destructive tools refused, with no one asked.
    let host = start(&url, |b| b.policy(PolicyFile::from_json("{}").unwrap())).await;
    let reason = denied(call(&host, "alpha__rm").await);
    assert!(reason.contains("denies such tools"), "{reason}");
    assert_eq!(call(&host, "alpha__read").await.unwrap(), "done");
    host.shutdown().await;
    running.shutdown(Duration::from_secs(1)).await;
}

fn answer(text: String) -> model::CreateMessageResult {
    model::CreateMessageResult {
        meta: None,
        content: model::CreateMessageResultContent::TextContent(model::TextContent {
            meta: None,
            annotations: None,
            text,
        }),
        model: "test-model".into(),
        role: model::Role::Assistant,
        stop_reason: Some("endTurn".into()),
        extra: JsonObject::new(),
    }
}

type Seen<T> = Arc<Mutex<Vec<(String, T)>>>;

/// The host of the sampling tests: the model records each request and answers with the name of
/// the server that asked.
async fn sampling_host(
    url: &str,
    policy: impl Policy,
) -> (Host, Seen<model::CreateMessageRequestParams>) {
    let seen: Seen<model::CreateMessageRequestParams> = Arc::default();
    let model = seen.clone();
    let host = start(url, move |b| {
        b.policy(policy).on_sampling(move |server, params| {
            model.lock().unwrap().push((server.clone(), params));
            std::future::ready(Ok(answer(format!("the model answered {server}"))))
        })
    })
    .await;
    (host, seen)
}

#[tokio::test]
async fn sampling_reaches_the_model_with_the_server_name_and_the_policys_edits() {
    let (url, running) = serve().await;
    let rules = Rules::new()
        .sampling(
            SamplingRule::allow()
                .max_tokens(64)
                .system_prompt_prefix("Be brief."),
        )
        .server_sampling("beta", SamplingRule::deny());
    let (host, seen) = sampling_host(&url, rules).await;
    assert_eq!(
        call(&host, "alpha__sample").await.unwrap(),
        "the model answered alpha"
    );
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, "alpha");
        assert_eq!(seen[0].1.max_tokens, 64);
        assert_eq!(
            seen[0].1.system_prompt.as_deref(),
            Some("Be brief.\n\nYou are a poet.")
        );
    }
    refused_input(
        call(&host, "beta__sample").await,
        "beta",
        "sampling/createMessage",
        "the policy denies sampling requests of server \"beta\"",
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the model never saw beta's request"
    );
    host.shutdown().await;

    // A policy file does the same.
    let file = PolicyFile::from_json(
        r#"{"sampling": {"maxTokens": 10}, "servers": {"alpha": {"sampling": "deny"}}}"#,
    )
    .unwrap();
    let (host, seen) = sampling_host(&url, file).await;
    assert_eq!(
        call(&host, "beta__sample").await.unwrap(),
        "the model answered beta"
    );
    assert_eq!(seen.lock().unwrap()[0].1.max_tokens, 10);
    assert_eq!(
        seen.lock().unwrap()[0].1.system_prompt.as_deref(),
        Some("You are a poet.")
    );
    refused_input(
        call(&host, "alpha__sample").await,
        "alpha",
        "sampling/createMessage",
        "the policy denies sampling requests of server \"alpha\"",
    );
    host.shutdown().await;
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn elicitation_reaches_the_handler_with_the_server_name_unless_refused() {
    let (url, running) = serve().await;
    let seen: Seen<Elicitation> = Arc::default();
    let handler = seen.clone();
    let host = start(&url, move |b| {
        b.policy(Rules::new().server_elicitation("beta", false))
            .on_elicitation(move |server, elicitation| {
                handler.lock().unwrap().push((server.clone(), elicitation));
                let mut content = JsonObject::new();
                content.insert("name".into(), format!("{server}'s user").into());
                std::future::ready(Ok(Elicited::accept(content)))
            })
    })
    .await;
    let text = call(&host, "alpha__elicit").await.unwrap();
    assert_eq!(text, r#"Accept {"name":"alpha's user"}"#);
    assert!(matches!(
        &seen.lock().unwrap()[..],
        [(server, Elicitation::Form { message, .. })] if server == "alpha" && message == "Your name?"
    ));
    refused_input(
        call(&host, "beta__elicit").await,
        "beta",
        "elicitation/create",
        "the policy denies elicitations of server \"beta\"",
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the handler never saw beta's"
    );
    host.shutdown().await;
    running.shutdown(Duration::from_secs(1)).await;
}

fn root(uri: &str) -> model::Root {
    model::Root {
        meta: None,
        name: None,
        uri: uri.into(),
    }
}

#[tokio::test]
async fn each_server_sees_its_own_roots_else_the_shared_ones() {
    let (url, running) = serve().await;
    let host = start(&url, |b| {
        b.roots(vec![root("file:///shared")])
            .server_roots("alpha", vec![root("file:///alpha")])
    })
    .await;
    assert_eq!(call(&host, "alpha__roots").await.unwrap(), "file:///alpha");
    assert_eq!(call(&host, "beta__roots").await.unwrap(), "file:///shared");
    // A change is seen by the servers it concerns.
    within("set_roots", host.set_roots(vec![root("file:///new")])).await;
    assert_eq!(call(&host, "beta__roots").await.unwrap(), "file:///new");
    assert_eq!(call(&host, "alpha__roots").await.unwrap(), "file:///alpha");
    within(
        "set_server_roots",
        host.set_server_roots("alpha", vec![root("file:///a2")]),
    )
    .await;
    assert_eq!(call(&host, "alpha__roots").await.unwrap(), "file:///a2");
    host.shutdown().await;
    // Without roots, a server that asks is told the client has none to give.
    let host = start(&url, |b| b).await;
    let text = call(&host, "alpha__roots").await.unwrap();
    assert!(text.contains("does not support roots"), "{text}");
    host.shutdown().await;
    running.shutdown(Duration::from_secs(1)).await;
}
