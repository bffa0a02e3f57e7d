//! Prompts and completions in every protocol version, over the in-memory transport.

use crate::common;

use common::*;
use modelctx_server::{Prompt, PromptMessage, Server};
use modelctx_session::ProtocolVersion;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Greet {
    /// Who to greet.
    name: String,
    /// How: "formal" or "casual".
    style: Option<String>,
}

async fn greet(args: Greet) -> Vec<PromptMessage> {
    let text = match args.style.as_deref() {
        Some("formal") => format!("Good day, {}.", args.name),
        _ => format!("Hi {}!", args.name),
    };
    vec![
        PromptMessage::user(format!("Greet {}", args.name)),
        PromptMessage::assistant(text),
    ]
}

fn server() -> Server {
    let names: Vec<String> = (0..150).map(|i| format!("name{i:03}")).collect();
    Server::builder("prompts", "1")
        .prompt(
            Prompt::new("greet", greet)
                .description("A greeting")
                .title("Greeting")
                .complete("style", |partial: String, _| async move {
                    ["formal", "casual"]
                        .iter()
                        .filter(|s| s.starts_with(&partial))
                        .map(|s| (*s).to_owned())
                        .collect()
                })
                .complete("name", move |partial: String, _| {
                    let names = names.clone();
                    async move {
                        names
                            .into_iter()
                            .filter(|n| n.starts_with(&partial))
                            .collect()
                    }
                }),
        )
        .build()
}

#[tokio::test]
async fn prompts_are_listed_rendered_and_their_arguments_checked() {
    let server = server();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let listed = client.request("prompts/list", json!({})).await.unwrap();
        let prompt = &listed["prompts"][0];
        assert_eq!(prompt["name"], "greet");
        assert_eq!(prompt["description"], "A greeting");
        assert_eq!(
            prompt["title"].is_string(),
            client.version() >= ProtocolVersion::V2025_06_18
        );
        let arguments = prompt["arguments"].as_array().unwrap();
        assert_eq!(
            arguments[0],
            json!({"name": "name", "required": true, "description": "Who to greet."})
        );
        assert_eq!(arguments[1]["required"], false);

        let got = client
            .request(
                "prompts/get",
                json!({"name": "greet", "arguments": {"name": "Ada", "style": "formal"}}),
            )
            .await
            .unwrap();
        assert_eq!(got["messages"][0]["role"], "user");
        assert_eq!(
            got["messages"][1]["content"]["text"], "Good day, Ada.",
            "{name}"
        );

        let missing = client
            .request("prompts/get", json!({"name": "greet", "arguments": {}}))
            .await;
        assert_eq!(code(&missing), -32602);
        let unknown = client.request("prompts/get", json!({"name": "nope"})).await;
        assert_eq!(code(&unknown), -32602);
    }
}

#[tokio::test]
async fn completions_give_at_most_100_values_with_the_total() {
    let server = server();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        if client.version() < ProtocolVersion::V2025_03_26 {
            continue; // completion/complete arrived in 2025-03-26
        }
        let answer = client
            .request(
                "completion/complete",
                json!({
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "style", "value": "f"}}),
            )
            .await
            .unwrap();
        assert_eq!(answer["completion"]["values"], json!(["formal"]), "{name}");
        assert_eq!(answer["completion"]["hasMore"], false);
        let answer = client
            .request(
                "completion/complete",
                json!({
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "name", "value": "name"}}),
            )
            .await
            .unwrap();
        assert_eq!(
            answer["completion"]["values"].as_array().unwrap().len(),
            100
        );
        assert_eq!(answer["completion"]["total"], 150);
        assert_eq!(answer["completion"]["hasMore"], true);
        let unknown = client
            .request(
                "completion/complete",
                json!({
                "ref": {"type": "ref/prompt", "name": "nope"},
                "argument": {"name": "x", "value": ""}}),
            )
            .await;
        assert_eq!(code(&unknown), -32602);
    }
}

/// Prompts take state like tools: `async fn(State<S>, Args)` and
/// `async fn(Context, State<S>, Args)`, a clone of the server's value per call, in every
/// version. A prompt that takes state the server was not given is refused by `try_build` and
/// `add_prompt` (and `build` panics: the next test).
#[tokio::test]
async fn prompts_take_the_state_the_server_was_given() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use modelctx_server::{Context, RegisterError, State};

    #[derive(Clone, Default)]
    struct Renders(Arc<AtomicUsize>);
    #[derive(Clone)]
    struct Style(&'static str);
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Topic {
        topic: String,
    }

    async fn count(State(renders): State<Renders>, args: Topic) -> String {
        let n = renders.0.fetch_add(1, Ordering::SeqCst) + 1;
        format!("render {n} of {}", args.topic)
    }
    async fn styled(context: Context, style: State<Style>, args: Topic) -> String {
        format!("{} {} in {}", style.0.0, args.topic, context.method())
    }

    let renders = Renders::default();
    let server = Server::builder("state", "1")
        .state(renders.clone())
        .state(Style("haiku"))
        .prompt(Prompt::new("count", count))
        .prompt(Prompt::new("styled", styled))
        .try_build()
        .expect("every state the prompts take is there");
    for (n, (name, config)) in eras().into_iter().enumerate() {
        let mut client = Client::connect(&server, config).await;
        let counted = client
            .request(
                "prompts/get",
                json!({"name": "count", "arguments": {"topic": "rain"}}),
            )
            .await
            .unwrap();
        assert_eq!(
            counted["messages"][0]["content"]["text"],
            format!("render {} of rain", n + 1),
            "{name}: {counted}"
        );
        let styled = client
            .request(
                "prompts/get",
                json!({"name": "styled", "arguments": {"topic": "snow"}}),
            )
            .await
            .unwrap();
        assert_eq!(
            styled["messages"][0]["content"]["text"], "haiku snow in prompts/get",
            "{name}: {styled}"
        );
    }
    assert_eq!(renders.0.load(Ordering::SeqCst), eras().len());

    // Without the state.
    let refused = Server::builder("state", "1")
        .prompt(Prompt::new("count", count))
        .try_build();
    assert!(
        matches!(
            &refused,
            Err(RegisterError::PromptMissingState { prompt, type_name })
                if prompt == "count" && type_name.ends_with("Renders")
        ),
        "{:?}",
        refused.err()
    );
    let bare = Server::builder("state", "1").declare_prompts().build();
    assert!(matches!(
        bare.add_prompt(Prompt::new("count", count)),
        Err(RegisterError::PromptMissingState { .. })
    ));
}

/// `build` panics where `try_build` refuses: a prompt taking state the server was not given.
#[test]
#[should_panic(expected = "prompt count takes state of type")]
fn building_a_prompt_that_takes_state_the_server_lacks_panics() {
    #[derive(Clone)]
    struct Renders;
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Topic {
        topic: String,
    }
    async fn count(_: modelctx_server::State<Renders>, args: Topic) -> String {
        args.topic
    }
    let _ = Server::builder("state", "1")
        .prompt(Prompt::new("count", count))
        .build();
}
