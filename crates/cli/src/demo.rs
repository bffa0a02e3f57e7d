//! The built-in demo server: a real server written with `modelctx-server`, showing every
//! feature: tools (with progress, logging, elicitation, sampling and roots; `countdown` also runs
//! as a task), resources, a resource
//! template, prompts with completions, and a tool list that changes while it runs.

use std::time::Duration;

use modelctx_server::model::{
    CreateMessageRequestParams, CreateMessageResultContent, ElicitResultAction,
};
use modelctx_server::tasks::TaskSupport;
use modelctx_server::{
    CacheHint, Context, InputError, Json, LogLevel, NoArgs, Prompt, PromptMessage, ReadRequest,
    Resource, ResourceContents, ResourceTemplate, Server, Tool, sampling_request,
};
use serde_json::{Value, json};

/// `echo` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    /// The text to say back.
    text: String,
}

async fn echo(args: Echo) -> String {
    args.text
}

/// `add` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    /// One number.
    a: f64,
    /// The other.
    b: f64,
}

/// `add` result.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Sum {
    /// a + b.
    sum: f64,
}

async fn add(args: Add) -> Json<Sum> {
    Json(Sum {
        sum: args.a + args.b,
    })
}

/// `countdown` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Countdown {
    /// How many steps (at most 20).
    steps: u32,
    /// Milliseconds between steps (default 100, at most 2000).
    #[serde(default)]
    delay_ms: Option<u64>,
}

async fn countdown(context: Context, args: Countdown) -> String {
    let steps = args.steps.min(20);
    let delay = Duration::from_millis(args.delay_ms.unwrap_or(100).min(2000));
    for i in 1..=steps {
        if context.is_cancelled() {
            return format!("cancelled after {} of {steps} steps", i - 1);
        }
        tokio::time::sleep(delay).await;
        let _ = context
            .progress(
                f64::from(i),
                Some(f64::from(steps)),
                Some(&format!("step {i} of {steps}")),
            )
            .await;
        let level = if i == steps {
            LogLevel::Notice
        } else {
            LogLevel::Debug
        };
        context
            .log(level, Some("countdown"), json!({"step": i, "of": steps}))
            .await;
    }
    format!("liftoff after {steps} steps")
}

/// `confirm` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Confirm {
    /// What to confirm.
    action: String,
}

/// Asks the user (elicitation) before it acts; it acts only after the question, since in the
/// modern era the handler runs again from the start with the answer.
async fn confirm(context: Context, args: Confirm) -> Result<String, InputError> {
    let schema = json!({
        "type": "object",
        "properties": {
            "confirm": {"type": "boolean", "description": "Go ahead?"},
            "note": {"type": "string", "description": "Anything to add"},
        },
        "required": ["confirm"],
    });
    let answer = context
        .elicit(&format!("Really {}?", args.action), schema)
        .await?;
    let content = answer.content.unwrap_or_default();
    let action = match answer.action {
        ElicitResultAction::Accept => "accept",
        ElicitResultAction::Decline => "decline",
        ElicitResultAction::Cancel => "cancel",
        _ => "unknown",
    };
    let accepted = action == "accept" && content["confirm"] == true;
    Ok(if accepted {
        let note = content["note"].as_str().unwrap_or("");
        if note.is_empty() {
            format!("{}: done", args.action)
        } else {
            format!("{}: done ({note})", args.action)
        }
    } else {
        format!("{}: not done ({})", args.action, Value::from(action))
    })
}

/// `haiku` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Haiku {
    /// What the haiku is about.
    topic: String,
}

/// Asks the client's model (sampling) for a haiku.
async fn haiku(context: Context, args: Haiku) -> Result<String, InputError> {
    let params = CreateMessageRequestParams {
        system_prompt: Some("You are a poet.".into()),
        ..sampling_request(format!("Write a haiku about {}", args.topic), 60)
    };
    let answer = context.sample(params).await?;
    let text = match &answer.content {
        CreateMessageResultContent::TextContent(text) => &text.text,
        _ => "?",
    };
    Ok(format!("{} wrote: {text}", answer.model))
}

/// Lists the client's roots (`roots/list` in the legacy era, an input request in the modern
/// one): one line each, its URI and its name if it has one. A client that declared no roots
/// gets the error "the client does not support roots" (legacy: a failed call; modern: the
/// protocol's missing-capability error).
async fn roots(context: Context, _: NoArgs) -> Result<String, InputError> {
    let listed = context.list_roots().await?;
    if listed.roots.is_empty() {
        return Ok("the client has no roots".to_owned());
    }
    let lines: Vec<String> = listed
        .roots
        .iter()
        .map(|root| match &root.name {
            Some(name) => format!("{} ({name})", root.uri),
            None => root.uri.clone(),
        })
        .collect();
    Ok(lines.join("\n"))
}

/// `secret`: only listed after `unlock`.
async fn secret(_: NoArgs) -> &'static str {
    "the secret is 42"
}

/// `greet` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Greet {
    /// Who to greet.
    name: String,
}

async fn greet(args: Greet) -> PromptMessage {
    PromptMessage::user(format!("Say a warm hello to {}.", args.name))
}

/// `review` arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Review {
    /// The code to review.
    code: String,
    /// Its language.
    #[serde(default)]
    language: Option<String>,
}

async fn review(args: Review) -> Vec<PromptMessage> {
    let language = args.language.unwrap_or_else(|| "code".to_owned());
    vec![
        PromptMessage::user(format!("Review this {language}:\n{}", args.code)),
        PromptMessage::assistant("I will look at correctness first, then style."),
    ]
}

async fn readme(_: Context, request: ReadRequest) -> ResourceContents {
    ResourceContents::text(
        request.uri,
        "# The mcx demo server\n\nTools, resources, prompts and completions, in both eras.\n",
    )
    .mime_type("text/markdown")
}

async fn config(_: Context, request: ReadRequest) -> ResourceContents {
    let config = json!({"theme": "dark", "retries": 3});
    ResourceContents::text(request.uri, config.to_string()).mime_type("application/json")
}

const NOTES: &[(&str, &str)] = &[
    ("groceries", "milk, bread, tea"),
    ("ideas", "a command-line tool for MCP"),
    ("todo", "write the docs"),
];

async fn note(_: Context, request: ReadRequest) -> ResourceContents {
    let name = request.var("name").unwrap_or_default();
    let text = NOTES.iter().find(|(n, _)| *n == name).map_or_else(
        || format!("(no note named {name})"),
        |(_, t)| (*t).to_owned(),
    );
    ResourceContents::text(request.uri, text).mime_type("text/plain")
}

fn starting_with(names: &[&str], partial: &str) -> Vec<String> {
    names
        .iter()
        .filter(|n| n.starts_with(partial))
        .map(|n| (*n).to_owned())
        .collect()
}

/// `whoami`: the caller the guard authenticated (`mcx serve demo --http` with `--auth-issuer` or
/// `--auth-token-file`).
async fn whoami(context: Context, _: NoArgs) -> String {
    let Some(grant) = context.auth() else {
        return "no one is authenticated (this server takes no credentials)".to_owned();
    };
    let scopes = if grant.scopes.is_empty() {
        "no scopes".to_owned()
    } else {
        format!("scopes {}", grant.scopes.join(" "))
    };
    format!("{} (issuer {}), {scopes}", grant.subject, grant.issuer)
}

/// The scope `unlock` needs when the server takes credentials.
pub(crate) const ADMIN: &str = "demo:admin";

/// The demo server.
pub(crate) fn server() -> Server {
    let server = builder().build();
    add_unlock(&server);
    server
}

/// The demo's skills (`crates/cli/skills`), embedded in the binary.
const SKILLS: &[(&str, &str)] = &[
    (
        "mcx-demo/SKILL.md",
        include_str!("../skills/mcx-demo/SKILL.md"),
    ),
    (
        "mcx-demo/references/tools.md",
        include_str!("../skills/mcx-demo/references/tools.md"),
    ),
    (
        "mcx-demo/examples/session.md",
        include_str!("../skills/mcx-demo/examples/session.md"),
    ),
];

/// The demo server's builder, without `unlock` (see [`add_unlock`]), for a guard to be added.
pub(crate) fn builder() -> modelctx_server::ServerBuilder {
    Server::builder("mcx-demo", env!("CARGO_PKG_VERSION"))
        .skill_files(SKILLS.iter().copied())
        .instructions(
            "The mcx demo server: try `countdown` (progress and logs; as a task too), `confirm` (elicitation), \
             `haiku` (sampling), `roots` (the client's roots) and `unlock` (the tool list \
             changes).",
        )
        .tool(Tool::new("echo", echo).description("Says the text back"))
        .tool(Tool::new("add", add).description("Adds two numbers (structured output)"))
        .tool(
            Tool::new("countdown", countdown)
                .description(
                    "Counts down, reporting progress and logging each step; runs as a task when \
                     the client asks (mcx tools call countdown --task), its progress the task's \
                     status, cancellable",
                )
                .task_support(TaskSupport::Optional),
        )
        .tool(Tool::new("confirm", confirm).description("Asks the user to confirm (elicitation)"))
        .tool(
            Tool::new("haiku", haiku).description("Asks the client's model for a haiku (sampling)"),
        )
        .tool(Tool::new("roots", roots).description("Lists the client's roots (roots/list)"))
        .tool(
            Tool::new("whoami", whoami)
                .description("Says who is calling: the token's subject and scopes"),
        )
        .prompt(
            Prompt::new("greet", greet)
                .description("A greeting for someone")
                .complete("name", |partial: String, _| async move {
                    starting_with(&["Ada", "Alan", "Grace", "Linus"], &partial)
                }),
        )
        .prompt(
            Prompt::new("review", review)
                .description("A code review")
                .complete("language", |partial: String, _| async move {
                    starting_with(&["python", "rust", "typescript"], &partial)
                }),
        )
        .resource(
            Resource::new("demo://readme", "readme", readme)
                .description("What this server is")
                .mime_type("text/markdown"),
        )
        .resource(
            Resource::new("demo://config", "config", config)
                .description("Settings, as JSON")
                .mime_type("application/json")
                .cache(CacheHint::public(60_000)),
        )
        .resource_template(
            ResourceTemplate::new("demo://notes/{name}", "notes", note)
                .expect("a valid template")
                .description("A note by name")
                .mime_type("text/plain")
                .complete("name", |partial: String, _| async move {
                    let names: Vec<&str> = NOTES.iter().map(|(n, _)| *n).collect();
                    starting_with(&names, &partial)
                }),
        )
}

/// Adds `unlock`, which adds the `secret` tool; it needs the scope [`ADMIN`] (checked when the
/// server has a guard).
pub(crate) fn add_unlock(server: &Server) {
    let handle = server.clone();
    let unlock = move |_: NoArgs| {
        let server = handle.clone();
        async move {
            // Removed first so every call changes the list (and clients are told).
            server.remove_tool("secret");
            let _ =
                server.add_tool(Tool::new("secret", secret).description("Unlocked by `unlock`"));
            "unlocked the `secret` tool"
        }
    };
    server
        .add_tool(
            Tool::new("unlock", unlock)
                .description("Adds the `secret` tool (list_changed); needs the scope demo:admin")
                .scopes([ADMIN]),
        )
        .expect("a new tool");
}
