//! The shapes handlers take beyond tools: resources and templates without a `Context`, with
//! state, as closures; prompts whose arguments are not all strings refused when registered.

use std::sync::Arc;

use crate::common;

use common::*;
use modelctx_server::{
    Context, Prompt, PromptMessage, ReadRequest, RegisterError, Resource, ResourceContents,
    ResourceError, ResourceTemplate, Server, State,
};
use modelctx_session::RequestError;
use modelctx_types::consts;
use serde_json::json;

/// A resource handler without a `Context`.
async fn readme(request: ReadRequest) -> ResourceContents {
    ResourceContents::text(request.uri, "# no context").mime_type("text/markdown")
}

/// A template handler without a `Context`, failing as a read may.
async fn user(request: ReadRequest) -> Result<ResourceContents, ResourceError> {
    match request.var("id").as_deref() {
        Some("1") => Ok(ResourceContents::text(request.uri, "Ada")),
        _ => Err(ResourceError::NotFound(request.uri)),
    }
}

#[derive(Clone)]
struct Greeting(&'static str);

/// State without a `Context`.
async fn greeting(State(greeting): State<Greeting>, request: ReadRequest) -> ResourceContents {
    ResourceContents::text(request.uri, greeting.0)
}

/// State and the `Context`.
async fn versioned(
    context: Context,
    State(greeting): State<Greeting>,
    request: ReadRequest,
) -> ResourceContents {
    let text = format!("{} in {}", greeting.0, context.protocol_version().as_str());
    ResourceContents::text(request.uri, text)
}

fn server() -> Server {
    let motd = Arc::new(String::from("captured"));
    Server::builder("shapes", "1")
        .state(Greeting("hello"))
        .resource(Resource::new("file:///readme", "readme", readme))
        .resource(Resource::new(
            "file:///motd",
            "motd",
            move |request: ReadRequest| {
                let motd = motd.clone();
                async move { ResourceContents::text(request.uri, motd.as_str()) }
            },
        ))
        .resource(Resource::new("file:///greeting", "greeting", greeting))
        .resource(Resource::new("file:///versioned", "versioned", versioned))
        .resource_template(ResourceTemplate::new("users://{id}", "user", user).unwrap())
        .try_build()
        .expect("the state the resources take is there")
}

async fn read(client: &mut Client, uri: &str) -> Result<serde_json::Value, RequestError> {
    client
        .request(consts::ResourcesRead::VALUE, json!({ "uri": uri }))
        .await
}

#[tokio::test]
async fn resources_without_a_context_are_served_and_read_in_every_era() {
    let server = server();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let version = client.version();
        let contents = read(&mut client, "file:///readme").await.unwrap();
        assert_eq!(contents["contents"][0]["text"], "# no context", "{name}");
        assert_eq!(
            contents["contents"][0]["mimeType"], "text/markdown",
            "{name}"
        );
        let contents = read(&mut client, "file:///motd").await.unwrap();
        assert_eq!(contents["contents"][0]["text"], "captured", "{name}");
        let contents = read(&mut client, "file:///greeting").await.unwrap();
        assert_eq!(contents["contents"][0]["text"], "hello", "{name}");
        let contents = read(&mut client, "file:///versioned").await.unwrap();
        let expected = format!("hello in {}", version.as_str());
        assert_eq!(contents["contents"][0]["text"], expected.as_str(), "{name}");
        let contents = read(&mut client, "users://1").await.unwrap();
        assert_eq!(contents["contents"][0]["text"], "Ada", "{name}");
        assert_eq!(contents["contents"][0]["uri"], "users://1", "{name}");
        assert!(read(&mut client, "users://2").await.is_err(), "{name}");
    }
}

/// `build` panics where `try_build` refuses: here, a resource taking state the server was not
/// given.
#[test]
#[should_panic(expected = "resource file:///greeting takes state of type")]
fn building_a_resource_that_takes_state_the_server_lacks_panics() {
    let _ = Server::builder("s", "1")
        .resource(Resource::new("file:///greeting", "greeting", greeting))
        .build();
}

#[test]
fn resources_taking_state_the_server_lacks_are_refused_when_registered() {
    let refused = Server::builder("s", "1")
        .resource(Resource::new("file:///greeting", "greeting", greeting))
        .try_build()
        .unwrap_err();
    assert_eq!(
        refused,
        RegisterError::ResourceMissingState {
            resource: "file:///greeting".into(),
            type_name: std::any::type_name::<Greeting>(),
        }
    );
    let template = || ResourceTemplate::new("greetings://{name}", "greetings", versioned).unwrap();
    let refused = Server::builder("s", "1")
        .resource_template(template())
        .try_build()
        .unwrap_err();
    assert!(
        matches!(&refused, RegisterError::ResourceMissingState { resource, .. } if resource == "greetings://{name}"),
        "{refused:?}"
    );

    let server = Server::builder("s", "1").declare_resources().build();
    let refused = server
        .add_resource(Resource::new("file:///greeting", "greeting", greeting))
        .unwrap_err();
    assert!(matches!(
        refused,
        RegisterError::ResourceMissingState { .. }
    ));
    let refused = server.add_resource_template(template()).unwrap_err();
    assert!(matches!(
        refused,
        RegisterError::ResourceMissingState { .. }
    ));
    // What takes no state is registered.
    server
        .add_resource(Resource::new("file:///readme", "readme", readme))
        .unwrap();
    // `build` panics instead: `building_a_resource_that_takes_state_the_server_lacks_panics`.
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Repeat {
    /// The text to repeat.
    text: String,
    /// How many times: a number, which prompt arguments never are.
    times: u32,
}

async fn repeat(args: Repeat) -> String {
    args.text.repeat(args.times as usize)
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
enum Tone {
    Formal,
    Casual,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Inner {
    text: String,
}

/// Every kind of field a string deserializes into.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Strings {
    text: String,
    maybe: Option<String>,
    tone: Tone,
    maybe_tone: Option<Tone>,
    anything: serde_json::Value,
}

async fn strings(args: Strings) -> PromptMessage {
    PromptMessage::user(args.text)
}

#[test]
fn a_prompt_whose_arguments_are_not_all_strings_is_refused_when_registered() {
    let refused = Server::builder("s", "1")
        .prompt(Prompt::new("repeat", repeat))
        .try_build()
        .unwrap_err();
    assert_eq!(
        refused,
        RegisterError::PromptArgument {
            prompt: "repeat".into(),
            argument: "times".into(),
            found: "of type integer".into(),
        }
    );
    assert_eq!(
        refused.to_string(),
        "prompt repeat: argument times is of type integer, but prompt arguments are strings"
    );

    let server = Server::builder("s", "1").declare_prompts().build();
    assert_eq!(
        server.add_prompt(Prompt::new("repeat", repeat)),
        Err(refused)
    );

    // Types that are never strings, through `Option`, `Vec`, a struct (`$ref`), a bool.
    macro_rules! refused {
        ($field:ty, $found:literal) => {{
            #[derive(serde::Deserialize, schemars::JsonSchema)]
            #[allow(dead_code)]
            struct Args {
                fine: String,
                wrong: $field,
            }
            let refused = Server::builder("s", "1")
                .prompt(Prompt::new("p", |_: Args| async { String::new() }))
                .try_build()
                .unwrap_err();
            let expected = RegisterError::PromptArgument {
                prompt: "p".into(),
                argument: "wrong".into(),
                found: $found.into(),
            };
            assert_eq!(refused, expected, stringify!($field));
        }};
    }
    refused!(Option<u32>, "of type integer or null");
    refused!(bool, "of type boolean");
    refused!(f64, "of type number");
    refused!(Vec<String>, "of type array");
    refused!(Inner, "of type object");
    refused!(Option<Inner>, "of type object or null");

    // Strings, optional strings, enums of names, any value: the prompt is served.
    Server::builder("s", "1")
        .prompt(Prompt::new("strings", strings))
        .try_build()
        .expect("every argument may be a string");
    // A map of strings has string arguments; a map of numbers does not.
    Server::builder("s", "1")
        .prompt(Prompt::new(
            "map",
            |_: std::collections::HashMap<String, String>| async { String::new() },
        ))
        .try_build()
        .expect("string values");
    let refused = Server::builder("s", "1")
        .prompt(Prompt::new(
            "map",
            |_: std::collections::HashMap<String, u8>| async { String::new() },
        ))
        .try_build()
        .unwrap_err();
    assert!(
        matches!(&refused, RegisterError::PromptArgument { argument, .. } if argument == "(any other argument)"),
        "{refused:?}"
    );
}

/// `build` refuses it too, as a panic with the same text (`try_build` is for servers made from
/// data read at run time).
#[test]
#[should_panic(
    expected = "prompt repeat: argument times is of type integer, but prompt arguments are strings (`ServerBuilder::try_build` returns it instead)"
)]
fn building_a_prompt_whose_arguments_are_not_all_strings_panics() {
    let _ = Server::builder("s", "1")
        .prompt(Prompt::new("repeat", repeat))
        .build();
}
