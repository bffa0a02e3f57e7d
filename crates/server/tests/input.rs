//! Input from the client (elicitation, sampling, roots) with one handler in both eras.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use modelctx_server::{Context, InputError, NoArgs, Prompt, Server, Tool};
use modelctx_session::Era;
use serde_json::json;

async fn ask_twice(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    let first = context.elicit("Your name?", schema.clone()).await?;
    let second = context.elicit("Your name again?", schema).await?;
    Ok(format!(
        "{} then {}",
        first["content"]["name"].as_str().unwrap_or("?"),
        second["content"]["name"].as_str().unwrap_or("?")
    ))
}

#[tokio::test]
async fn the_same_handler_asks_for_input_in_both_eras() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let roots = move |context: Context, _: NoArgs| {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            match context.list_roots().await {
                Ok(roots) => format!("{} roots", roots["roots"].as_array().map_or(0, Vec::len)),
                Err(e) => format!("no roots: {e}"),
            }
        }
    };
    let server = Server::builder("input", "1")
        .tool(Tool::new("ask", ask_twice))
        .tool(Tool::new("roots", roots))
        .build();
    let answer =
        json!({"action": "accept", "content": {"name": "Ada"}, "roots": [{"uri": "file:///a"}]});
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let params = json!({"name": "ask", "arguments": {}});
        if client.version().era() == Era::Modern {
            let (result, rounds) = client
                .round_trips("tools/call", params, answer.clone())
                .await;
            assert_eq!(text(&result), "Ada then Ada");
            assert_eq!(rounds, 3, "one round per question, then the result");
        } else if client.version() >= modelctx_session::ProtocolVersion::V2025_06_18 {
            let id = client.start("tools/call", params).await;
            let result = client.answer_asking(&id, answer.clone()).await.unwrap();
            assert_eq!(text(&result), "Ada then Ada", "{name}");
        } else {
            // Elicitation arrived in 2025-06-18: older clients cannot be asked.
            let result = client.call("ask", json!({})).await;
            assert_eq!(result["isError"], true);
            assert!(
                text(&result).contains("does not support elicitation"),
                "{result}"
            );
        }
    }
    // Roots, modern: the handler runs once per round.
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    runs.store(0, Ordering::SeqCst);
    let (result, rounds) = modern
        .round_trips(
            "tools/call",
            json!({"name": "roots", "arguments": {}}),
            answer,
        )
        .await;
    assert_eq!(text(&result), "1 roots");
    assert_eq!((rounds, runs.load(Ordering::SeqCst)), (2, 2));
}

#[tokio::test]
async fn a_tampered_or_foreign_request_state_is_refused() {
    let server = Server::builder("input", "1")
        .tool(Tool::new("ask", ask_twice))
        .build();
    let mut client = Client::connect(&server, eras().remove(0).1).await;
    let params = json!({"name": "ask", "arguments": {}});
    let first = client.request("tools/call", params.clone()).await.unwrap();
    assert_eq!(first["resultType"], "input_required");
    let state = first["requestState"].as_str().unwrap().to_owned();
    let key = first["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let answer = json!({"action": "accept", "content": {"name": "Eve"}});

    let mut tampered = params.clone();
    tampered["inputResponses"] = json!({ key.clone(): answer });
    tampered["requestState"] = json!(format!("{state}x"));
    assert_eq!(code(&client.request("tools/call", tampered).await), -32602);

    // The state of one call does not open for other arguments.
    let mut other = json!({"name": "ask", "arguments": {"extra": 1}});
    other["inputResponses"] = json!({ key.clone(): answer });
    other["requestState"] = json!(state);
    assert_eq!(code(&client.request("tools/call", other).await), -32602);

    // Nor without the answers it asked for.
    let mut unanswered = params;
    unanswered["requestState"] = json!(state);
    assert_eq!(
        code(&client.request("tools/call", unanswered).await),
        -32602
    );

    // Another server (another key) does not accept it either.
    let other_server = Server::builder("input", "1")
        .tool(Tool::new("ask", ask_twice))
        .build();
    let mut other_client = Client::connect(&other_server, eras().remove(0).1).await;
    let mut foreign = json!({"name": "ask", "arguments": {}});
    foreign["inputResponses"] = json!({ key: answer });
    foreign["requestState"] = json!(state);
    assert_eq!(
        code(&other_client.request("tools/call", foreign).await),
        -32602
    );
}

#[tokio::test]
async fn a_prompt_asks_for_input_in_the_modern_era_too() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Topic {
        topic: String,
    }
    async fn prompt(context: Context, args: Topic) -> String {
        match context.sample(serde_json::Map::new()).await {
            Ok(_) => format!("sampled {}", args.topic),
            Err(e) => format!("{e}"),
        }
    }
    let server = Server::builder("input", "1")
        .prompt(Prompt::new("p", prompt))
        .build();
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    let (result, rounds) = modern
        .round_trips(
            "prompts/get",
            json!({"name": "p", "arguments": {"topic": "x"}}),
            json!({"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}),
        )
        .await;
    assert_eq!(rounds, 2, "prompts may ask: {result}");
    assert_eq!(result["messages"][0]["content"]["text"], "sampled x");
}

#[tokio::test]
async fn sampling_with_tools_and_url_elicitation_need_their_capabilities() {
    async fn sample_tools(context: Context, _: NoArgs) -> String {
        let params = json!({"messages": [], "maxTokens": 10, "tools": []});
        match context.sample(params.as_object().cloned().unwrap()).await {
            Ok(_) => "sampled".into(),
            Err(e) => e.to_string(),
        }
    }
    async fn visit(context: Context, _: NoArgs) -> String {
        match context
            .elicit_url("Sign in", "https://example.com/login", "e1")
            .await
        {
            Ok(_) => "visited".into(),
            Err(e) => e.to_string(),
        }
    }
    let server = Server::builder("caps", "1")
        .tool(Tool::new("sample_tools", sample_tools))
        .tool(Tool::new("visit", visit))
        .build();
    // The test clients declare `sampling: {}` and `elicitation: {}` (form mode only).
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let result = client.call("sample_tools", json!({})).await;
        assert_eq!(
            text(&result),
            "the client does not support sampling.tools",
            "{name}"
        );
        let result = client.call("visit", json!({})).await;
        assert_eq!(
            text(&result),
            "the client does not support elicitation.url",
            "{name}"
        );
    }
}
