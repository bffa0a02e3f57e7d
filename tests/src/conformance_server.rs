//! The server of the official MCP conformance suite (`tests/conformance`): every tool, resource
//! and prompt its server scenarios call, for both the 2025-11-25 (stateful) and 2026-07-28
//! (stateless) wires, built only on the public API of `modelctx-server`.
//!
//! It also serves the skills of `tests/fixtures/skills` (the Skills extension's scenarios).
//!
//! `tests/src/bin/conformance-server.rs` serves it over Streamable HTTP.

use std::sync::OnceLock;
use std::time::Duration;

use modelctx_server::model::{CreateMessageResult, CreateMessageResultContent, ElicitResult};
use modelctx_server::{
    Content, Context, InputError, LogLevel, NoArgs, Prompt, PromptMessage, ReadRequest, Resource,
    ResourceContents, ResourceTemplate, Server, Tool, ToolOutput, sampling_request,
};
use modelctx_types::JsonObject;
use serde_json::{Value, json};

/// A 1×1 PNG.
pub const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A tiny WAV.
pub const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// The schema of `json_schema_2020_12_tool`, verbatim from the suite.
const JSON_SCHEMA_2020_12: &str = r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
 "$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},
 "properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},
   "contactMethod":{"type":"string","enum":["phone","email"]},"phone":{"type":"string"},"email":{"type":"string"}},
 "allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],
 "if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},
 "then":{"required":["phone"]},"else":{"required":["email"]},
 "additionalProperties":false}"##;

/// The skills the server serves: `tests/fixtures/skills`.
pub fn skills_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/skills")
}

/// The server itself, for the tools that change what it offers.
static SERVER: OnceLock<Server> = OnceLock::new();

/// The text of a sampling answer that is text.
fn sampled_text(answer: &CreateMessageResult) -> Option<&str> {
    match &answer.content {
        CreateMessageResultContent::TextContent(text) => Some(&text.text),
        _ => None,
    }
}

/// The action of an elicitation answer, as the wire spells it.
fn action(answer: &ElicitResult) -> String {
    modelctx_types::v2026_07_28::ElicitResultAction::try_from(answer.action)
        .ok()
        .and_then(|action| serde_json::to_value(action).ok())
        .and_then(|action| action.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The answer's form content (`null` when there is none).
fn content(answer: &ElicitResult) -> Value {
    answer.content.clone().unwrap_or(Value::Null)
}

/// A field of the answer's form content (`null` when it has none).
fn field(answer: &ElicitResult, name: &str) -> Value {
    content(answer)[name].clone()
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not a JSON object: {other}"),
    }
}

/// A form of one required field of a primitive `kind`.
fn one_field(name: &str, kind: &str) -> Value {
    json!({"type": "object", "properties": {name: {"type": kind}}, "required": [name]})
}

/// An object schema without properties.
fn no_args() -> JsonObject {
    object(json!({"type": "object", "properties": {}}))
}

fn decode_base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut buffer, mut bits) = (0u32, 0u32);
    for byte in text.bytes().filter(|b| *b != b'=') {
        let value = ALPHABET
            .iter()
            .position(|c| *c == byte)
            .expect("a base64 character") as u32;
        buffer = (buffer << 6) | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------------------------

async fn simple_text(_: NoArgs) -> &'static str {
    "This is a simple text response for testing."
}

async fn image(_: NoArgs) -> Content {
    Content::image(PNG, "image/png")
}

async fn audio(_: NoArgs) -> Content {
    Content::audio(WAV, "audio/wav")
}

async fn embedded_resource(_: NoArgs) -> Content {
    Content::from_json(json!({"type": "resource", "resource": {
        "uri": "test://embedded-resource",
        "mimeType": "text/plain",
        "text": "This is an embedded resource content.",
    }}))
    .expect("a content block")
}

async fn multiple_content(_: NoArgs) -> Vec<Content> {
    vec![
        Content::text("Multiple content types test:"),
        Content::image(PNG, "image/png"),
        Content::from_json(json!({"type": "resource", "resource": {
            "uri": "test://mixed-content-resource",
            "mimeType": "application/json",
            "text": "{\"test\":\"data\",\"value\":123}",
        }}))
        .expect("a content block"),
    ]
}

async fn with_logging(context: Context, _: NoArgs) -> &'static str {
    for (i, text) in [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        context.log(LogLevel::Info, None, Value::from(text)).await;
    }
    "Tool with logging executed successfully"
}

async fn error_handling(_: NoArgs) -> ToolOutput {
    ToolOutput::error("This tool intentionally returns an error for testing")
}

async fn with_progress(context: Context, _: NoArgs) -> String {
    for (i, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = context.progress(progress, Some(100.0), None).await;
    }
    "Progress reported: 0, 50, 100 of 100".to_owned()
}

#[derive(serde::Deserialize)]
struct SamplingArgs {
    prompt: String,
}

async fn sampling(context: Context, args: SamplingArgs) -> Result<String, InputError> {
    let answer = context.sample(sampling_request(args.prompt, 100)).await?;
    let text = sampled_text(&answer).unwrap_or_default();
    Ok(format!("LLM response: {text}"))
}

#[derive(serde::Deserialize)]
struct ElicitationArgs {
    message: String,
}

async fn elicitation(context: Context, args: ElicitationArgs) -> Result<String, InputError> {
    let schema = json!({
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    });
    let answer = context.elicit(&args.message, schema).await?;
    Ok(format!(
        "User response: action={}, content={}",
        action(&answer),
        content(&answer)
    ))
}

async fn elicitation_defaults(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": true},
        },
        "required": [],
    });
    let answer = context
        .elicit(
            "Please review and update the form fields with defaults",
            schema,
        )
        .await?;
    Ok(format!(
        "Elicitation completed: action={}, content={}",
        action(&answer),
        content(&answer)
    ))
}

async fn elicitation_enums(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"],
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"},
                ],
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {"anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]},
            },
        },
        "required": [],
    });
    let answer = context
        .elicit("Please select options from the enum fields", schema)
        .await?;
    Ok(format!(
        "Elicitation completed: action={}, content={}",
        action(&answer),
        content(&answer)
    ))
}

async fn json_schema_tool(_: Value) -> &'static str {
    "ok"
}

/// Closes the stream of its call before answering: the client resumes it to get the result
/// (SSE polling; over 2025-11-25 HTTP sessions).
async fn reconnection(context: Context, _: NoArgs) -> &'static str {
    if context.close_sse_stream().await {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    "Reconnection test completed successfully"
}

/// Needs sampling: a client that did not declare it gets the -32021 error.
async fn missing_capability(context: Context, _: NoArgs) -> Result<String, InputError> {
    let answer = context
        .sample(sampling_request("Say something", 10))
        .await?;
    Ok(sampled_text(&answer).unwrap_or_default().to_owned())
}

async fn streaming_elicitation(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = one_field("ok", "boolean");
    let answer = context.elicit("Please confirm", schema).await?;
    Ok(format!("confirmed: {}", field(&answer, "ok")))
}

async fn logging_tool(context: Context, _: NoArgs) -> &'static str {
    context
        .log(LogLevel::Info, None, Value::from("logging tool ran"))
        .await;
    "logged (if the request asked for it)"
}

/// The tool `test_trigger_tool_change` adds, or takes away when it is there: each call changes
/// the tool list for real (a front that announces only real changes, such as `mcx host`,
/// passes the change on).
const DYNAMIC_TOOL: &str = "test_dynamic_tool";
/// The same for `test_trigger_prompt_change`.
const DYNAMIC_PROMPT: &str = "test_dynamic_prompt";

async fn trigger_tool_change(_: NoArgs) -> &'static str {
    if let Some(server) = SERVER.get()
        && !server.remove_tool(DYNAMIC_TOOL)
    {
        let tool = Tool::with_input_schema(DYNAMIC_TOOL, no_args(), dynamic_tool)
            .description("Added and removed by test_trigger_tool_change");
        let _ = server.add_tool(tool);
    }
    "the tool list changed"
}

async fn dynamic_tool(_: NoArgs) -> &'static str {
    "a tool that comes and goes"
}

fn trigger_tool() -> Tool {
    Tool::with_input_schema("test_trigger_tool_change", no_args(), trigger_tool_change)
        .description("Changes the tool list (adds or removes test_dynamic_tool)")
}

async fn trigger_prompt_change(_: NoArgs) -> &'static str {
    if let Some(server) = SERVER.get()
        && !server.remove_prompt(DYNAMIC_PROMPT)
    {
        let prompt = Prompt::with_arguments(DYNAMIC_PROMPT, Vec::new(), simple)
            .description("Added and removed by test_trigger_prompt_change");
        let _ = server.add_prompt(prompt);
    }
    "the prompt list changed"
}

#[derive(serde::Deserialize)]
struct CustomHeaderArgs {
    region: String,
}

async fn custom_header(args: CustomHeaderArgs) -> String {
    format!("region: {}", args.region)
}

// MRTR (input_required) tools: they ask with `Context`, the library turns questions into rounds.

async fn mrtr_elicitation(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = one_field("name", "string");
    let answer = context
        .keyed("user_name")
        .elicit("What is your name?", schema)
        .await?;
    Ok(format!(
        "Hello, {}!",
        field(&answer, "name").as_str().unwrap_or("stranger")
    ))
}

async fn mrtr_sampling(context: Context, _: NoArgs) -> Result<String, InputError> {
    let params = sampling_request("What is the capital of France?", 100);
    let answer = context.keyed("capital_question").sample(params).await?;
    Ok(format!(
        "The model said: {}",
        sampled_text(&answer).unwrap_or_default()
    ))
}

async fn mrtr_list_roots(context: Context, _: NoArgs) -> Result<String, InputError> {
    let answer = context.keyed("client_roots").list_roots().await?;
    let uris: Vec<&str> = answer.roots.iter().map(|r| r.uri.as_str()).collect();
    Ok(format!("Roots: {}", uris.join(", ")))
}

async fn mrtr_request_state(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = one_field("ok", "boolean");
    let answer = context
        .keyed("confirm")
        .elicit("Please confirm", schema)
        .await?;
    Ok(format!("state-ok: confirmed={}", field(&answer, "ok")))
}

async fn mrtr_multiple(context: Context, _: NoArgs) -> Result<String, InputError> {
    let name_schema = one_field("name", "string");
    let greeting = sampling_request("Generate a greeting", 50);
    let (name, greeting, roots) = tokio::join!(
        context
            .keyed("user_name")
            .elicit("What is your name?", name_schema),
        context.keyed("greeting").sample(greeting),
        context.keyed("client_roots").list_roots(),
    );
    let (name, greeting, roots) = (name?, greeting?, roots?);
    Ok(format!(
        "name={}, greeting={}, roots={}",
        field(&name, "name"),
        sampled_text(&greeting).map_or(Value::Null, Value::from),
        roots.roots.len()
    ))
}

async fn mrtr_multi_round(context: Context, _: NoArgs) -> Result<String, InputError> {
    let name = context
        .keyed("step1")
        .elicit("Step 1: What is your name?", one_field("name", "string"))
        .await?;
    let color = context
        .keyed("step2")
        .elicit(
            "Step 2: What is your favorite color?",
            one_field("color", "string"),
        )
        .await?;
    Ok(format!(
        "{} likes {}",
        field(&name, "name").as_str().unwrap_or_default(),
        field(&color, "color").as_str().unwrap_or_default()
    ))
}

/// Asks the user when the client can elicit, its model otherwise.
async fn mrtr_capabilities(context: Context, _: NoArgs) -> Result<String, InputError> {
    let schema = one_field("name", "string");
    match context.elicit("What is your name?", schema).await {
        Ok(answer) => Ok(format!("Hello, {}!", field(&answer, "name"))),
        Err(InputError::NotSupported(_)) => {
            let answer = context
                .sample(sampling_request("Suggest a name", 20))
                .await?;
            let text = sampled_text(&answer).map_or(Value::Null, Value::from);
            Ok(format!("The model suggests {text}"))
        }
        Err(e) => Err(e),
    }
}

fn tools() -> Vec<Tool> {
    let schema = |value: Value| object(value);
    vec![
        Tool::with_input_schema("test_simple_text", no_args(), simple_text)
            .description("Returns a simple text response"),
        Tool::with_input_schema("test_image_content", no_args(), image)
            .description("Returns an image"),
        Tool::with_input_schema("test_audio_content", no_args(), audio)
            .description("Returns audio"),
        Tool::with_input_schema("test_embedded_resource", no_args(), embedded_resource)
            .description("Returns an embedded resource"),
        Tool::with_input_schema("test_multiple_content_types", no_args(), multiple_content)
            .description("Returns text, an image and a resource"),
        Tool::with_input_schema("test_tool_with_logging", no_args(), with_logging)
            .description("Logs three messages while it runs"),
        Tool::with_input_schema("test_error_handling", no_args(), error_handling)
            .description("Always fails (isError)"),
        Tool::with_input_schema("test_tool_with_progress", no_args(), with_progress)
            .description("Reports progress 0, 50 and 100 of 100"),
        Tool::with_input_schema(
            "test_sampling",
            schema(json!({
                "type": "object",
                "properties": {"prompt": {"type": "string", "description": "The prompt for the model"}},
                "required": ["prompt"],
            })),
            sampling,
        )
        .description("Asks the client's model"),
        Tool::with_input_schema(
            "test_elicitation",
            schema(json!({
                "type": "object",
                "properties": {"message": {"type": "string", "description": "What to ask the user"}},
                "required": ["message"],
            })),
            elicitation,
        )
        .description("Asks the user for a username and an email"),
        Tool::with_input_schema(
            "test_elicitation_sep1034_defaults",
            no_args(),
            elicitation_defaults,
        )
        .description("Asks the user with a form whose fields have defaults (SEP-1034)"),
        Tool::with_input_schema("test_elicitation_sep1330_enums", no_args(), elicitation_enums)
            .description("Asks the user with enum fields of every kind (SEP-1330)"),
        Tool::with_input_schema(
            "json_schema_2020_12_tool",
            schema(serde_json::from_str(JSON_SCHEMA_2020_12).expect("valid JSON")),
            json_schema_tool,
        )
        .description("Takes arguments described by a JSON Schema 2020-12 schema"),
        Tool::with_input_schema("test_reconnection", no_args(), reconnection)
            .description("Closes the stream of its call before answering (SSE polling)"),
        Tool::with_input_schema("test_missing_capability", no_args(), missing_capability)
            .description("Needs the client's sampling capability"),
        Tool::with_input_schema(
            "test_streaming_elicitation",
            no_args(),
            streaming_elicitation,
        )
        .description("Asks the user to confirm"),
        Tool::with_input_schema("test_logging_tool", no_args(), logging_tool)
            .description("Logs a message, when the request asks for log messages"),
        trigger_tool(),
        Tool::with_input_schema(
            "test_trigger_prompt_change",
            no_args(),
            trigger_prompt_change,
        )
        .description("Changes the prompt list (adds or removes test_dynamic_prompt)"),
        Tool::with_input_schema(
            "test_custom_header",
            schema(json!({
                "type": "object",
                "properties": {"region": {
                    "type": "string",
                    "description": "The region, also sent as the Mcp-Param-Region header",
                    "x-mcp-header": "Region",
                }},
                "required": ["region"],
            })),
            custom_header,
        )
        .description("Takes a parameter that is mirrored in an HTTP header"),
        Tool::with_input_schema(
            "test_input_required_result_elicitation",
            no_args(),
            mrtr_elicitation,
        )
        .description("Asks the user's name"),
        Tool::with_input_schema(
            "test_input_required_result_sampling",
            no_args(),
            mrtr_sampling,
        )
        .description("Asks the client's model a question"),
        Tool::with_input_schema(
            "test_input_required_result_list_roots",
            no_args(),
            mrtr_list_roots,
        )
        .description("Asks the client's roots"),
        Tool::with_input_schema(
            "test_input_required_result_request_state",
            no_args(),
            mrtr_request_state,
        )
        .description("Asks for a confirmation, keeping state between rounds"),
        Tool::with_input_schema(
            "test_input_required_result_multiple_inputs",
            no_args(),
            mrtr_multiple,
        )
        .description("Asks the user, the model and the roots at once"),
        Tool::with_input_schema(
            "test_input_required_result_multi_round",
            no_args(),
            mrtr_multi_round,
        )
        .description("Asks two questions, one round each"),
        Tool::with_input_schema(
            "test_input_required_result_tampered_state",
            no_args(),
            // The same question: what differs is the client tampering with its state.
            mrtr_request_state,
        )
        .description("Asks for a confirmation; its state is integrity-protected"),
        Tool::with_input_schema(
            "test_input_required_result_capabilities",
            no_args(),
            mrtr_capabilities,
        )
        .description("Asks only what the client's capabilities allow"),
    ]
}

// ---------------------------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------------------------

async fn static_text(_: Context, request: ReadRequest) -> ResourceContents {
    ResourceContents::text(
        request.uri,
        "This is the content of the static text resource.",
    )
    .mime_type("text/plain")
}

async fn static_binary(_: Context, request: ReadRequest) -> ResourceContents {
    ResourceContents::blob(request.uri, &decode_base64(PNG)).mime_type("image/png")
}

async fn template_data(_: Context, request: ReadRequest) -> ResourceContents {
    let id = request.var("id").unwrap_or_default();
    let text = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
    ResourceContents::text(request.uri, text.to_string()).mime_type("application/json")
}

async fn watched(_: Context, request: ReadRequest) -> ResourceContents {
    ResourceContents::text(request.uri, "A resource clients may subscribe to.")
        .mime_type("text/plain")
}

// ---------------------------------------------------------------------------------------------
// Prompts
// ---------------------------------------------------------------------------------------------

async fn simple(_: JsonObject) -> PromptMessage {
    PromptMessage::user("This is a simple prompt for testing.")
}

fn simple_prompt() -> Prompt {
    Prompt::with_arguments("test_simple_prompt", Vec::new(), simple)
        .description("A simple prompt without arguments")
}

#[derive(serde::Deserialize)]
struct TwoArgs {
    arg1: String,
    arg2: String,
}

async fn with_arguments(args: TwoArgs) -> PromptMessage {
    PromptMessage::user(format!(
        "Prompt with arguments: arg1='{}', arg2='{}'",
        args.arg1, args.arg2
    ))
}

#[derive(serde::Deserialize)]
struct ResourceArg {
    #[serde(rename = "resourceUri")]
    resource_uri: String,
}

async fn with_embedded_resource(args: ResourceArg) -> Vec<PromptMessage> {
    vec![
        PromptMessage::user(
            Content::from_json(json!({"type": "resource", "resource": {
                "uri": args.resource_uri,
                "mimeType": "text/plain",
                "text": "Embedded resource content for testing.",
            }}))
            .expect("a content block"),
        ),
        PromptMessage::user("Please process the embedded resource above."),
    ]
}

async fn with_image(_: JsonObject) -> Vec<PromptMessage> {
    vec![
        PromptMessage::user(Content::image(PNG, "image/png")),
        PromptMessage::user("Please analyze the image above."),
    ]
}

async fn mrtr_prompt(context: Context, _: JsonObject) -> Result<PromptMessage, InputError> {
    let schema = one_field("context", "string");
    let answer = context
        .keyed("user_context")
        .elicit("What context should the prompt use?", schema)
        .await?;
    Ok(PromptMessage::user(format!(
        "Use this context: {}",
        field(&answer, "context").as_str().unwrap_or_default()
    )))
}

fn argument(name: &str, description: &str) -> (String, Option<String>, bool) {
    (name.to_owned(), Some(description.to_owned()), true)
}

/// The conformance server (one per process: the tools that change its lists reach it through a
/// process-wide handle).
pub fn server() -> Server {
    let mut builder = Server::builder("modelctx-conformance-server", "1.0.0");
    // The tools of the tasks scenarios (`tasks-*`) with them.
    for tool in tools().into_iter().chain(crate::conformance_tasks::tools()) {
        builder = builder.tool(tool);
    }
    let server = builder
        .resource(
            Resource::new("test://static-text", "static-text", static_text)
                .mime_type("text/plain")
                .description("A static text resource"),
        )
        .resource(
            Resource::new("test://static-binary", "static-binary", static_binary)
                .mime_type("image/png")
                .description("A static binary resource (a PNG image)"),
        )
        .resource(
            Resource::new("test://watched-resource", "watched-resource", watched)
                .mime_type("text/plain")
                .description("A resource clients may subscribe to"),
        )
        .resource_template(
            ResourceTemplate::new("test://template/{id}/data", "template", template_data)
                .expect("a valid template")
                .mime_type("application/json")
                .description("Data by id"),
        )
        .prompt(simple_prompt())
        .prompt(
            Prompt::with_arguments(
                "test_prompt_with_arguments",
                vec![
                    argument("arg1", "The first argument"),
                    argument("arg2", "The second argument"),
                ],
                with_arguments,
            )
            .description("A prompt with two arguments")
            .complete("arg1", |partial: String, _| async move {
                ["test", "testing", "tested", "other"]
                    .into_iter()
                    .filter(|v| v.starts_with(&partial))
                    .map(str::to_owned)
                    .collect()
            }),
        )
        .prompt(
            Prompt::with_arguments(
                "test_prompt_with_embedded_resource",
                vec![argument("resourceUri", "The URI of the resource to embed")],
                with_embedded_resource,
            )
            .description("A prompt that embeds a resource"),
        )
        .prompt(
            Prompt::with_arguments("test_prompt_with_image", Vec::new(), with_image)
                .description("A prompt with an image"),
        )
        .prompt(
            Prompt::with_arguments("test_input_required_result_prompt", Vec::new(), mrtr_prompt)
                .description("A prompt that asks the user for its context"),
        )
        // The skills of the SEP-2640 scenarios (`sep-2640-skills-*`).
        .skills_dir(skills_dir())
        .build();
    let _ = SERVER.set(server.clone());
    server
}
