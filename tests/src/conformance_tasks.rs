//! The fixture tools of the conformance suite's tasks scenarios (`tasks-*`, the
//! `io.modelcontextprotocol/tasks` extension, SEP-2663), served by the conformance server.
//!
//! * `greet`: no task, `Hello, {name}!`.
//! * `slow_compute`: an optional task; sleeps `seconds` (stopping when cancelled), then says what
//!   it computed.
//! * `failing_job`: a required task; a tool execution error after about a second.
//! * `protocol_error_job`: an optional task whose handler panics (a protocol error: the task
//!   fails).
//! * `confirm_delete`: an optional task that asks the user (elicitation) before it answers.
//! * `multi_input`: an optional task that asks two questions at once.
//! * `test_tool_with_task`: a required task that asks `user_name` by a round trip first (before
//!   the task exists) and then runs as a task ([`Context::detach`]).

use std::time::Duration;

use modelctx_server::model::ElicitResultAction;
use modelctx_server::tasks::TaskSupport;
use modelctx_server::{Context, InputError, NoArgs, Tool, ToolOutput};
use modelctx_types::JsonObject;
use serde_json::{Value, json};

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

#[derive(serde::Deserialize)]
struct Greet {
    #[serde(default)]
    name: String,
}

async fn greet(args: Greet) -> String {
    format!("Hello, {}!", args.name)
}

#[derive(serde::Deserialize)]
struct Compute {
    #[serde(default)]
    seconds: f64,
    #[serde(default)]
    label: Option<String>,
}

async fn slow_compute(context: Context, args: Compute) -> String {
    let wait = Duration::from_secs_f64(args.seconds.clamp(0.0, 600.0));
    tokio::select! {
        () = tokio::time::sleep(wait) => {}
        () = context.cancelled().cancelled() => return "cancelled".into(),
    }
    let label = args.label.unwrap_or_default();
    format!("computed {label} in {}s", args.seconds)
}

async fn failing_job(_: NoArgs) -> ToolOutput {
    tokio::time::sleep(Duration::from_millis(1000)).await;
    ToolOutput::error("the job failed")
}

async fn protocol_error_job(_: NoArgs) -> String {
    tokio::time::sleep(Duration::from_millis(100)).await;
    panic!("protocol_error_job fails at the protocol level, as its scenario needs")
}

fn confirm_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"confirm": {"type": "boolean", "description": "Delete it?"}},
        "required": ["confirm"],
    })
}

fn accepted(answer: &modelctx_server::model::ElicitResult) -> bool {
    answer.action == ElicitResultAction::Accept
}

#[derive(serde::Deserialize)]
struct Delete {
    #[serde(default)]
    filename: String,
}

async fn confirm_delete(context: Context, args: Delete) -> Result<String, InputError> {
    let answer = context
        .keyed("confirm")
        .elicit(&format!("Delete {}?", args.filename), confirm_schema())
        .await?;
    let confirmed = accepted(&answer)
        && answer
            .content
            .as_ref()
            .and_then(|c| c.get("confirm"))
            .and_then(Value::as_bool)
            == Some(true);
    Ok(if confirmed {
        format!("deleted {}", args.filename)
    } else {
        format!("kept {}", args.filename)
    })
}

async fn multi_input(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}},
    });
    let (first, second) = tokio::join!(
        context
            .keyed("first")
            .elicit("First input?", schema.clone()),
        context
            .keyed("second")
            .elicit("Second input?", schema.clone()),
    );
    let (first, second) = (first?, second?);
    let name = |answer: &modelctx_server::model::ElicitResult| {
        answer
            .content
            .as_ref()
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok(format!("got {} and {}", name(&first), name(&second)))
}

async fn tool_with_task(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    });
    // A round trip of the call itself: the task does not exist yet.
    let answer = context
        .keyed("user_name")
        .elicit("What is your name?", schema)
        .await?;
    let name = answer
        .content
        .as_ref()
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("stranger")
        .to_owned();
    // The answer is in: the rest runs as a task.
    if let Err(e) = context.detach().await {
        return Ok(format!("no task: {e}"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(format!("Hello, {name}! (from a task)"))
}

/// The tools.
pub fn tools() -> Vec<Tool> {
    let schema = |value: Value| object(value);
    vec![
        Tool::with_input_schema(
            "greet",
            schema(json!({"type": "object", "properties": {"name": {"type": "string"}}})),
            greet,
        )
        .description("Says hello (never a task)"),
        Tool::with_input_schema(
            "slow_compute",
            schema(json!({"type": "object", "properties": {
                "seconds": {"type": "number", "minimum": 0},
                "label": {"type": "string"},
            }})),
            slow_compute,
        )
        .description("Computes for `seconds` seconds (a task when the client supports them)")
        .task_support(TaskSupport::Optional),
        Tool::with_input_schema(
            "failing_job",
            schema(json!({"type": "object", "properties": {}})),
            failing_job,
        )
        .description("Fails after a second (only as a task)")
        .task_support(TaskSupport::Required),
        Tool::with_input_schema(
            "protocol_error_job",
            schema(json!({"type": "object", "properties": {}})),
            protocol_error_job,
        )
        .description("Fails with a protocol error (a task when the client supports them)")
        .task_support(TaskSupport::Optional),
        Tool::with_input_schema(
            "confirm_delete",
            schema(json!({"type": "object", "properties": {"filename": {"type": "string"}}})),
            confirm_delete,
        )
        .description("Deletes a file once the user confirms (a task when the client supports them)")
        .task_support(TaskSupport::Optional),
        Tool::with_input_schema(
            "multi_input",
            schema(json!({"type": "object", "properties": {}})),
            multi_input,
        )
        .description("Asks two questions at once (a task when the client supports them)")
        .task_support(TaskSupport::Optional),
        Tool::with_input_schema(
            "test_tool_with_task",
            schema(json!({"type": "object", "properties": {}})),
            tool_with_task,
        )
        .description("Asks the user's name, then runs as a task")
        .task_support(TaskSupport::Required)
        .task_on_detach(),
    ]
}
