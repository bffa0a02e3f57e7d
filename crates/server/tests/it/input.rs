//! Input from the client (elicitation, sampling, roots) with one handler in both eras.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use modelctx_server::model::{self, CreateMessageResultContent, ElicitResultAction};
use modelctx_server::{
    Context, InputError, NoAnswer, NoArgs, Prompt, PromptMessage, Server, Tool, sampling_request,
};
use modelctx_session::Era;
use serde_json::json;

async fn ask_twice(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    let first = context.elicit("Your name?", schema.clone()).await?;
    let second = context.elicit("Your name again?", schema).await?;
    Ok(format!(
        "{} then {}",
        name_of(&first).as_deref().unwrap_or("?"),
        name_of(&second).as_deref().unwrap_or("?")
    ))
}

/// The `name` field of an elicitation answer's content.
fn name_of(answer: &model::ElicitResult) -> Option<String> {
    let content = answer.content.as_ref()?;
    content["name"].as_str().map(str::to_owned)
}

/// The text of a sampling answer that is text.
fn text_of(answer: &model::CreateMessageResult) -> Option<&str> {
    match &answer.content {
        CreateMessageResultContent::TextContent(text) => Some(&text.text),
        _ => None,
    }
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
                Ok(roots) => format!("{} roots", roots.roots.len()),
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

    // A retry without the answers it asked for is asked them again (the spec's SHOULD), with
    // a fresh state, and the question keeps its key.
    let mut unanswered = params;
    unanswered["requestState"] = json!(state);
    let again = client.request("tools/call", unanswered).await.unwrap();
    assert_eq!(again["resultType"], "input_required", "{again}");
    assert!(again["inputRequests"].get(&key).is_some(), "{again}");
    assert!(again["requestState"].is_string(), "{again}");

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
        match context.sample(sampling_request("", 10)).await {
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
        let params = model::CreateMessageRequestParams {
            tools: Some(Vec::new()),
            ..sampling_request("", 10)
        };
        match context.sample(params).await {
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

/// Asks three questions at once, under keys of its own.
async fn ask_at_once(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    let (name, greeting, roots) = tokio::join!(
        context.keyed("user_name").elicit("Your name?", schema),
        context
            .keyed("greeting")
            .sample(sampling_request("Hello", 10)),
        context.list_roots(),
    );
    let (name, greeting, roots) = (name?, greeting?, roots?);
    Ok(format!(
        "{} {} {}",
        name_of(&name).as_deref().unwrap_or("?"),
        text_of(&greeting).unwrap_or("?"),
        roots.roots.len()
    ))
}

/// Asks three questions from three tasks of its own, one after the other with pauses between
/// them (as a gateway's questions arrive), under a hold; `hold: false` asks without one.
async fn ask_from_tasks(context: Context, hold: bool) -> Result<String, InputError> {
    let held = hold.then(|| context.hold_input());
    let mut asked = Vec::new();
    for key in ["q1", "q2", "q3"] {
        let context = context.clone();
        asked.push(tokio::spawn(async move {
            let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
            context.keyed(key).elicit("Your name?", schema).await
        }));
        // The first question is recorded before the next is asked.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(held);
    let mut names = Vec::new();
    for task in asked {
        let answer = task.await.expect("the question's task")?;
        names.push(name_of(&answer).unwrap_or_default());
    }
    Ok(names.join(" "))
}

#[tokio::test]
async fn questions_asked_from_several_tasks_under_a_hold_share_a_round() {
    let server = Server::builder("input", "1")
        .tool(Tool::new("held", |context: Context, _: NoArgs| {
            ask_from_tasks(context, true)
        }))
        .tool(Tool::new("unheld", |context: Context, _: NoArgs| {
            ask_from_tasks(context, false)
        }))
        .build();
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    let params = json!({"name": "held", "arguments": {}});
    let first = modern.request("tools/call", params.clone()).await.unwrap();
    assert_eq!(first["resultType"], "input_required");
    let mut keys: Vec<&str> = first["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["q1", "q2", "q3"], "{first}");
    let mut retry = params;
    retry["inputResponses"] = json!({
        "q1": {"action": "accept", "content": {"name": "A"}},
        "q2": {"action": "accept", "content": {"name": "B"}},
        "q3": {"action": "accept", "content": {"name": "C"}},
    });
    retry["requestState"] = first["requestState"].clone();
    let done = modern.request("tools/call", retry).await.unwrap();
    assert_eq!(text(&done), "A B C", "{done}");
    // Without the hold, the first question ends the run on its own.
    let unheld = json!({"name": "unheld", "arguments": {}});
    let first = modern.request("tools/call", unheld).await.unwrap();
    let keys: Vec<&String> = first["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["q1"], "{first}");
    // A legacy client gets each question as a request: the hold changes nothing there.
    let mut legacy = Client::connect(&server, eras().pop().unwrap().1).await;
    let id = legacy
        .start("tools/call", json!({"name": "held", "arguments": {}}))
        .await;
    let answer = json!({"action": "accept", "content": {"name": "D"}});
    let result = legacy.answer_asking(&id, answer).await.unwrap();
    assert_eq!(text(&result), "D D D", "{result}");
}

#[tokio::test]
async fn questions_have_the_keys_handlers_give_them_and_questions_asked_at_once_share_a_round() {
    let server = Server::builder("input", "1")
        .tool(Tool::new("at_once", ask_at_once))
        .build();
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    let params = json!({"name": "at_once", "arguments": {}});
    let first = modern.request("tools/call", params.clone()).await.unwrap();
    assert_eq!(first["resultType"], "input_required");
    let requests = first["inputRequests"].as_object().unwrap();
    let mut keys: Vec<&str> = requests.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["greeting", "roots-3", "user_name"], "{first}");
    assert_eq!(requests["user_name"]["method"], "elicitation/create");
    assert_eq!(requests["greeting"]["method"], "sampling/createMessage");
    // Answered under those keys, the call completes.
    let mut retry = params.clone();
    retry["inputResponses"] = json!({
        "user_name": {"action": "accept", "content": {"name": "Ada"}},
        "greeting": {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"},
        "roots-3": {"roots": [{"uri": "file:///a"}]},
    });
    retry["requestState"] = first["requestState"].clone();
    let done = modern.request("tools/call", retry.clone()).await.unwrap();
    assert_eq!(text(&done), "Ada hi 1", "{done}");
    // An answer to a question that was not asked is ignored (finding 14; the spec: servers
    // ignore what they do not recognise).
    retry["inputResponses"]["unasked"] = json!({"action": "cancel"});
    let done = modern.request("tools/call", retry).await.unwrap();
    assert_eq!(text(&done), "Ada hi 1", "{done}");
    // Answers given before any question was asked, without a `requestState` (which the spec
    // makes optional), are taken by their keys.
    let mut early = params.clone();
    early["inputResponses"] = json!({
        "user_name": {"action": "accept", "content": {"name": "Bo"}},
        "greeting": {"role": "assistant", "content": {"type": "text", "text": "yo"}, "model": "m"},
        "roots-3": {"roots": []},
    });
    let done = modern.request("tools/call", early).await.unwrap();
    assert_eq!(text(&done), "Bo yo 0", "{done}");
    // Legacy clients get the same questions as requests: keys never reach them. One answer
    // for all three that reads as each (an `ElicitResult` whose content is also a text block).
    let mut legacy = Client::connect(&server, eras().pop().unwrap().1).await;
    let id = legacy.start("tools/call", params).await;
    let answer = json!({"action": "accept", "content": {"name": "Cy", "type": "text",
        "text": "hey"}, "role": "assistant", "model": "m", "roots": []});
    let result = legacy.answer_asking(&id, answer).await.unwrap();
    assert_eq!(text(&result), "Cy hey 0", "{result}");
}

#[tokio::test]
async fn two_questions_of_one_request_cannot_share_a_key() {
    async fn twice(context: Context, _: NoArgs) -> Result<String, InputError> {
        let schema = json!({"type": "object", "properties": {}});
        context.keyed("k").elicit("One?", schema.clone()).await?;
        context.keyed("k").elicit("Two?", schema).await?;
        Ok("done".into())
    }
    let server = Server::builder("input", "1")
        .tool(Tool::new("twice", twice))
        .build();
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    let mut params = json!({"name": "twice", "arguments": {}});
    let first = modern.request("tools/call", params.clone()).await.unwrap();
    assert_eq!(first["resultType"], "input_required", "{first}");
    params["inputResponses"] = json!({"k": {"action": "accept", "content": {}}});
    params["requestState"] = first["requestState"].clone();
    let result = modern.request("tools/call", params).await.unwrap();
    assert_eq!(result["isError"], true);
    assert_eq!(
        text(&result),
        "two questions of one request have the key \"k\""
    );
}

#[tokio::test]
async fn an_answer_that_does_not_answer_its_question_fails_the_request() {
    async fn name(context: Context, _: NoArgs) -> Result<String, InputError> {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let answer = context.keyed("user_name").elicit("Name?", schema).await?;
        let name = answer.content.unwrap_or_default()["name"].clone();
        Ok(format!("Hello, {name}"))
    }
    let server = Server::builder("input", "1")
        .tool(Tool::new("name", name))
        .build();
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    let first = modern
        .request("tools/call", json!({"name": "name", "arguments": {}}))
        .await
        .unwrap();
    assert_eq!(first["resultType"], "input_required", "{first}");
    let state = first["requestState"].clone();
    for wrong in [
        json!(12345),
        json!({"content": {"name": "Ada"}}),
        json!({"action": "maybe"}),
        json!({"roots": []}),
    ] {
        let mut params = json!({"name": "name", "arguments": {}});
        params["inputResponses"] = json!({ "user_name": wrong });
        params["requestState"] = state.clone();
        let answer = modern.request("tools/call", params).await;
        assert_eq!(code(&answer), -32602, "{wrong}: {answer:?}");
    }
    // `inputResponses` is an object when present.
    let params = json!({"name": "name", "arguments": {}, "inputResponses": null});
    assert_eq!(code(&modern.request("tools/call", params).await), -32602);
    // A key no question has is ignored: the question is asked again.
    let mut params = json!({"name": "name", "arguments": {}});
    params["inputResponses"] = json!({"other": 1});
    params["requestState"] = state;
    let result = modern.request("tools/call", params).await.unwrap();
    assert_eq!(result["resultType"], "input_required", "{result}");
}

/// Finding 14: with a `requestState`, only the questions its last round asked can be answered.
#[tokio::test]
async fn finding_14_with_state_only_the_questions_asked_can_be_answered() {
    let server = Server::builder("input", "1")
        .tool(Tool::new("ask", ask_twice))
        .build();
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    let eve = json!({"action": "accept", "content": {"name": "Eve"}});
    let mut params = json!({"name": "ask", "arguments": {}});
    let first = modern.request("tools/call", params.clone()).await.unwrap();
    assert_eq!(first["resultType"], "input_required", "{first}");
    // The first round asked elicit-1 only: an answer to elicit-2 given now is not taken, so
    // the second round still asks it.
    params["inputResponses"] = json!({"elicit-1": eve, "elicit-2": {"action": "decline"}});
    params["requestState"] = first["requestState"].clone();
    let second = modern.request("tools/call", params.clone()).await.unwrap();
    assert_eq!(second["resultType"], "input_required", "{second}");
    assert!(
        second["inputRequests"].get("elicit-2").is_some(),
        "{second}"
    );
}

#[tokio::test]
async fn finding_14_input_responses_cannot_replace_a_sealed_answer() {
    let server = Server::builder("input", "1")
        .tool(Tool::new("ask", ask_twice))
        .build();
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    let ada = json!({"action": "accept", "content": {"name": "Ada"}});
    let eve = json!({"action": "accept", "content": {"name": "Eve"}});
    let mut params = json!({"name": "ask", "arguments": {}});
    let first = modern.request("tools/call", params.clone()).await.unwrap();
    params["inputResponses"] = json!({"elicit-1": ada});
    params["requestState"] = first["requestState"].clone();
    let second = modern.request("tools/call", params.clone()).await.unwrap();
    assert_eq!(second["resultType"], "input_required", "{second}");
    // The second round's state holds Ada's answer: the retry cannot change it (its answer to
    // elicit-1 is ignored).
    params["inputResponses"] = json!({"elicit-1": eve, "elicit-2": eve});
    params["requestState"] = second["requestState"].clone();
    let done = modern.request("tools/call", params).await.unwrap();
    assert_eq!(text(&done), "Ada then Eve", "{done}");
}

#[tokio::test]
async fn a_handler_failing_for_lack_of_a_capability_gets_the_modern_error() {
    async fn needs_sampling(context: Context, _: NoArgs) -> Result<String, InputError> {
        context.sample(sampling_request("", 10)).await?;
        Ok("sampled".into())
    }
    async fn needs_url(context: Context, _: NoArgs) -> Result<PromptMessage, InputError> {
        context
            .elicit_url("Sign in", "https://example.com/login", "e1")
            .await?;
        Ok(PromptMessage::user("signed in"))
    }
    let server = Server::builder("caps", "1")
        .tool(Tool::new("needs_sampling", needs_sampling))
        .prompt(Prompt::new("needs_url", needs_url))
        .build();
    let caps = json!({"elicitation": {}}).as_object().cloned().unwrap();
    let mut modern = Client::connect(
        &server,
        modelctx_session::ClientConfig::new("test", "1", caps.clone()),
    )
    .await;
    let call = json!({"name": "needs_sampling", "arguments": {}});
    match modern.request("tools/call", call.clone()).await {
        Err(modelctx_session::RequestError::Remote(error)) => {
            assert_eq!(error.code.0, -32021);
            let data = error.data.map(|d| serde_json::to_value(d).unwrap());
            assert_eq!(
                data.unwrap(),
                json!({"requiredCapabilities": {"sampling": {}}})
            );
        }
        other => panic!("expected -32021, got {other:?}"),
    }
    match modern
        .request("prompts/get", json!({"name": "needs_url"}))
        .await
    {
        Err(modelctx_session::RequestError::Remote(error)) => {
            assert_eq!(error.code.0, -32021);
            let data = error.data.map(|d| serde_json::to_value(d).unwrap());
            assert_eq!(
                data.unwrap(),
                json!({"requiredCapabilities": {"elicitation": {"url": {}}}})
            );
        }
        other => panic!("expected -32021, got {other:?}"),
    }
    // Legacy clients, which have no such error, get a failed call and a -32603.
    let mut config = modelctx_session::ClientConfig::new("test", "1", caps);
    config.versions = vec![modelctx_session::ProtocolVersion::V2025_11_25];
    config.era = modelctx_session::EraChoice::Legacy;
    let mut legacy = Client::connect(&server, config).await;
    let result = legacy.call("needs_sampling", json!({})).await;
    assert_eq!(result["isError"], true);
    assert_eq!(text(&result), "the client does not support sampling");
    let answer = legacy
        .request("prompts/get", json!({"name": "needs_url"}))
        .await;
    assert_eq!(code(&answer), -32603);
}

/// A legacy client that answers a question with an error: the handler gets that error whole
/// (`InputError::Refused` keeps the client's `ErrorObject`, code and data included).
#[tokio::test]
async fn a_refusal_keeps_the_clients_error() {
    async fn ask(context: Context, _: NoArgs) -> String {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        match context.elicit("Your name?", schema).await {
            Err(InputError::Refused(e)) => {
                let data = e.data.map(|d| d.get().to_owned()).unwrap_or_default();
                format!("refused {} {} {data}", e.code.0, e.message)
            }
            other => format!("unexpected {other:?}"),
        }
    }
    let server = Server::builder("refuse", "1")
        .tool(Tool::new("ask", ask))
        .build();
    let config = eras()
        .into_iter()
        .find(|(name, _)| *name == "2025-06-18")
        .unwrap()
        .1;
    let mut client = Client::connect(&server, config).await;
    let id = client
        .start("tools/call", json!({"name": "ask", "arguments": {}}))
        .await;
    let asked = within("the question", async {
        loop {
            if let Some(asked) = client.events.iter().find_map(|e| match e {
                modelctx_session::Event::Request(r) => Some(r.id.clone()),
                _ => None,
            }) {
                return asked;
            }
            client.step().await;
        }
    })
    .await;
    let error = modelctx_types::ErrorObject::new(modelctx_types::ErrorCode(-32042), "not now")
        .with_data(&json!({"retry": false}))
        .unwrap();
    client.session.respond_error(&asked, error).unwrap();
    let result = client.answer(&id).await.unwrap();
    assert_eq!(text(&result), r#"refused -32042 not now {"retry":false}"#);
}

/// A legacy client's answer that is not the result its question asks for is a typed error the
/// handler sees (`NoAnswer::Unreadable`), for sampling and elicitation alike; the `_json`
/// variants hand the same answer over as it came.
#[tokio::test]
async fn a_legacy_answer_that_is_not_the_result_asked_for_is_an_input_error() {
    async fn sample(context: Context, _: NoArgs) -> String {
        match context.sample(sampling_request("Hi", 10)).await {
            Err(InputError::NoAnswer(NoAnswer::Unreadable(_))) => "unreadable".into(),
            other => format!("unexpected {other:?}"),
        }
    }
    async fn elicit(context: Context, _: NoArgs) -> String {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        match context.elicit("Name?", schema).await {
            Err(InputError::NoAnswer(NoAnswer::Unreadable(_))) => "unreadable".into(),
            other => format!("unexpected {other:?}"),
        }
    }
    async fn raw(context: Context, _: NoArgs) -> Result<String, InputError> {
        let sampled = context.sample_json(serde_json::Map::new()).await?;
        let schema = json!({"type": "object"});
        let elicited = context.elicit_json("Name?", schema).await?;
        Ok(format!("{sampled} {elicited}"))
    }
    let server = Server::builder("input", "1")
        .tool(Tool::new("sample", sample))
        .tool(Tool::new("elicit", elicit))
        .tool(Tool::new("raw", raw))
        .build();
    let config = eras()
        .into_iter()
        .find(|(name, _)| *name == "2025-06-18")
        .unwrap()
        .1;
    let mut client = Client::connect(&server, config).await;
    let malformed = json!({"action": "maybe", "model": 7});
    for tool in ["sample", "elicit"] {
        let id = client
            .start("tools/call", json!({"name": tool, "arguments": {}}))
            .await;
        let result = client.answer_asking(&id, malformed.clone()).await.unwrap();
        assert_eq!(text(&result), "unreadable", "{tool}: {result}");
    }
    let id = client
        .start("tools/call", json!({"name": "raw", "arguments": {}}))
        .await;
    let result = client.answer_asking(&id, malformed.clone()).await.unwrap();
    assert_eq!(text(&result), format!("{malformed} {malformed}"));
}

/// Typed answers: the model's `CreateMessageResult` and `ElicitResult`, read from a legacy
/// client's answers, with what no version defines kept in `extra`.
#[tokio::test]
async fn legacy_answers_are_read_into_the_model() {
    async fn sample(context: Context, _: NoArgs) -> Result<String, InputError> {
        let answer = context.sample(sampling_request("Hi", 10)).await?;
        Ok(format!(
            "{} {:?} {} {}",
            answer.model,
            answer.role,
            text_of(&answer).unwrap_or("?"),
            answer.extra["vendor"]
        ))
    }
    async fn elicit(context: Context, _: NoArgs) -> Result<String, InputError> {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let answer = context.elicit("Name?", schema).await?;
        assert_eq!(answer.action, ElicitResultAction::Accept);
        Ok(name_of(&answer).unwrap_or_default())
    }
    let server = Server::builder("input", "1")
        .tool(Tool::new("sample", sample))
        .tool(Tool::new("elicit", elicit))
        .build();
    let config = eras()
        .into_iter()
        .find(|(name, _)| *name == "2025-06-18")
        .unwrap()
        .1;
    let mut client = Client::connect(&server, config).await;
    let id = client
        .start("tools/call", json!({"name": "sample", "arguments": {}}))
        .await;
    let answer = json!({"role": "assistant", "model": "m", "vendor": "x",
        "content": {"type": "text", "text": "hello"}});
    let result = client.answer_asking(&id, answer).await.unwrap();
    assert_eq!(text(&result), r#"m Assistant hello "x""#, "{result}");
    let id = client
        .start("tools/call", json!({"name": "elicit", "arguments": {}}))
        .await;
    let answer = json!({"action": "accept", "content": {"name": "Ada"}});
    let result = client.answer_asking(&id, answer).await.unwrap();
    assert_eq!(text(&result), "Ada", "{result}");
}

/// A sampling request is written in the client's version: one it cannot carry (audio before
/// 2025-03-26) is `InputError::Unwritable` and nothing is sent.
#[tokio::test]
async fn a_sampling_request_the_version_cannot_carry_is_not_sent() {
    async fn hear(context: Context, _: NoArgs) -> String {
        let mut params = sampling_request("", 10);
        params.messages[0].content =
            CreateMessageResultContent::AudioContent(model::AudioContent {
                meta: None,
                annotations: None,
                data: "AAAA".into(),
                mime_type: "audio/wav".into(),
            });
        match context.sample(params).await {
            Err(InputError::Unwritable(e)) => format!("unwritable: {e}"),
            other => format!("unexpected {other:?}"),
        }
    }
    let server = Server::builder("input", "1")
        .tool(Tool::new("hear", hear))
        .build();
    let config = eras()
        .into_iter()
        .find(|(name, _)| *name == "2024-11-05")
        .unwrap()
        .1;
    let mut client = Client::connect(&server, config).await;
    let result = client.call("hear", json!({})).await;
    assert!(text(&result).starts_with("unwritable: "), "{result}");
    assert!(
        !client
            .events
            .iter()
            .any(|e| matches!(e, modelctx_session::Event::Request(_))),
        "nothing was asked"
    );
}
