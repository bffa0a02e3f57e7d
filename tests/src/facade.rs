//! A server built on the `modelctx-server` facade, for the transport tests: tools, a prompt, a
//! resource, input from the client.

use modelctx_server::{
    Context, InputError, Json, NoArgs, Prompt, PromptMessage, ReadRequest, Resource,
    ResourceContents, Server, Tool,
};
use serde_json::json;

/// `echo` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Echo {
    /// The text to say back.
    pub text: String,
}

async fn echo(args: Echo) -> String {
    args.text
}

/// `steps` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Steps {
    /// How many progress steps.
    pub count: u32,
}

/// `steps` result.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct Done {
    /// Steps made.
    pub steps: u32,
}

async fn steps(context: Context, args: Steps) -> Json<Done> {
    for i in 1..=args.count {
        let _ = context
            .progress(f64::from(i), Some(f64::from(args.count)), None)
            .await;
        context
            .log(
                modelctx_server::LogLevel::Info,
                Some("steps"),
                json!({"step": i}),
            )
            .await;
    }
    Json(Done { steps: args.count })
}

async fn ask(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}});
    let answer = context.elicit("Well?", schema).await?;
    Ok(format!(
        "answered {}",
        answer["content"]["answer"].as_str().unwrap_or("nothing")
    ))
}

/// `greet` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Greet {
    /// Who.
    pub name: String,
}

async fn greet(args: Greet) -> PromptMessage {
    PromptMessage::user(format!("Say hello to {}", args.name))
}

async fn readme(_: Context, request: ReadRequest) -> ResourceContents {
    ResourceContents::text(request.uri, "# facade")
}

/// The `X-Test-User` header of the HTTP request the call came in, if any.
async fn whoami(context: Context, _: NoArgs) -> String {
    context
        .http()
        .and_then(|http| http.headers().get("x-test-user"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("nobody")
        .to_owned()
}

/// Calls of `wait` that saw their cancellation.
pub static CANCELLED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn wait(context: Context, _: NoArgs) -> &'static str {
    context.cancelled().cancelled().await;
    CANCELLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    "cancelled"
}

/// The server.
pub fn server() -> Server {
    Server::builder("facade", "1.0.0")
        .instructions("A server for tests")
        .tool(Tool::new("echo", echo).description("Says the text back"))
        .tool(Tool::new("steps", steps))
        .tool(Tool::new("ask", ask))
        .tool(Tool::new("wait", wait))
        .tool(Tool::new("whoami", whoami))
        .prompt(Prompt::new("greet", greet))
        .resource(Resource::new("file:///readme.md", "readme", readme))
        .build()
}
