//! A server built on the `modelctx-server` facade, for the transport tests: tools, a prompt, a
//! resource, input from the client.

use modelctx_server::{
    Context, InputError, Json, NoArgs, Prompt, PromptMessage, ReadRequest, Resource,
    ResourceContents, Server, Tool,
};
use serde_json::{Value, json};

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
    let content = answer.content.unwrap_or_default();
    Ok(format!(
        "answered {}",
        content["answer"].as_str().unwrap_or("nothing")
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

/// When set, each call of `wait` that sees its cancellation also writes `CANCELLED wait` to
/// stderr (the facade's test server sets it, so that a test of the process can count them).
/// Default: unset.
pub static SAY_CANCELLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs until its call is cancelled.
async fn wait(context: Context, _: NoArgs) -> &'static str {
    context.cancelled().cancelled().await;
    CANCELLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    if SAY_CANCELLED.load(std::sync::atomic::Ordering::SeqCst) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "CANCELLED wait");
    }
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

// ---------------------------------------------------------------------------------------------
// The richer server of the client tests
// ---------------------------------------------------------------------------------------------

/// `add` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Add {
    /// One.
    pub a: f64,
    /// The other.
    pub b: f64,
}

/// `add` result.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct Sum {
    /// a + b.
    pub sum: f64,
}

async fn add(args: Add) -> Json<Sum> {
    Json(Sum {
        sum: args.a + args.b,
    })
}

/// Asks the client's model; says what it answered.
async fn sample(context: Context, args: Echo) -> Result<String, InputError> {
    let answer = context
        .sample(modelctx_server::sampling_request(args.text, 10))
        .await?;
    let text = match &answer.content {
        modelctx_server::model::CreateMessageResultContent::TextContent(text) => &text.text,
        _ => "?",
    };
    Ok(format!("{} said {text}", answer.model))
}

/// Lists the client's roots.
async fn roots(context: Context, _: NoArgs) -> Result<String, InputError> {
    let answer = context.list_roots().await?;
    let uris: Vec<&str> = answer.roots.iter().map(|r| r.uri.as_str()).collect();
    Ok(uris.join(","))
}

/// A form whose fields have defaults; says what came back.
async fn form(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({"type": "object", "properties": {
        "answer": {"type": "string"},
        "name": {"type": "string", "default": "Ada"},
        "age": {"type": "integer", "default": 36},
    }});
    let answer = context.elicit("Who?", schema).await?;
    use modelctx_server::model::ElicitResultAction as Action;
    let action = match answer.action {
        Action::Accept => "accept",
        Action::Decline => "decline",
        Action::Cancel => "cancel",
        _ => "?",
    };
    let content = answer.content.unwrap_or(Value::Null);
    Ok(format!("{} {content}", Value::from(action)))
}

/// Ends the server process with status 3 (for the restart tests over stdio).
async fn crash(_: NoArgs) -> &'static str {
    std::process::exit(3)
}

/// The server of the client tests: [`server`]'s tools, prompt and resource, and `add`
/// (structured output), `sample`, `roots`, `form` (elicitation with defaults), `crash`, `touch`
/// (adds a tool and updates the readme), a resource template `file:///notes/{name}` and
/// completions; lists come two items a page and may be cached for a minute.
pub fn client_server() -> Server {
    let mut settings = modelctx_server::Settings::default();
    settings.page_size = 2;
    settings.list_cache = Some(modelctx_server::CacheHint::public(60_000));
    let server = Server::builder("facade", "1.0.0")
        .instructions("A server for tests")
        .settings(settings)
        .tool(Tool::new("echo", echo).description("Says the text back"))
        .tool(Tool::new("steps", steps))
        .tool(Tool::new("ask", ask))
        .tool(Tool::new("wait", wait))
        .tool(Tool::new("add", add))
        .tool(Tool::new("sample", sample))
        .tool(Tool::new("roots", roots))
        .tool(Tool::new("form", form))
        .tool(Tool::new("crash", crash))
        .prompt(
            Prompt::new("greet", greet).complete("name", |partial: String, _| async move {
                ["Ada", "Alan", "Grace"]
                    .iter()
                    .filter(|n| n.starts_with(&partial))
                    .map(|n| (*n).to_owned())
                    .collect()
            }),
        )
        .resource(Resource::new("file:///readme.md", "readme", readme))
        .resource(Resource::new("file:///license.md", "license", readme))
        .resource(Resource::new("file:///changes.md", "changes", readme))
        .resource_template(
            modelctx_server::ResourceTemplate::new("file:///notes/{name}", "notes", note)
                .expect("a valid template")
                .complete("name", |partial: String, _| async move {
                    ["alpha", "beta"]
                        .iter()
                        .filter(|n| n.starts_with(&partial))
                        .map(|n| (*n).to_owned())
                        .collect()
                }),
        )
        .build();
    let handle = server.clone();
    let touched = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let touch = move |_: NoArgs| {
        let server = handle.clone();
        let n = touched.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            let _ = server.add_tool(Tool::new(format!("extra-{n}"), echo));
            server.notify_resource_updated("file:///readme.md");
            "touched"
        }
    };
    server
        .add_tool(Tool::new("touch", touch))
        .expect("a new tool");
    server
}

async fn note(_: Context, request: ReadRequest) -> ResourceContents {
    let name = request.var("name").unwrap_or_default();
    ResourceContents::text(request.uri, format!("note {name}"))
}
