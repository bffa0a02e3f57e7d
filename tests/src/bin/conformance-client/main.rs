//! The client of the official MCP conformance suite (`@modelcontextprotocol/conformance`).
//!
//! The suite runs it as `sh -c "<command> <serverUrl>"`: the URL of the scenario's mock server is
//! the last argument, and the environment names the scenario (`MCP_CONFORMANCE_SCENARIO`), the
//! protocol version to speak (`MCP_CONFORMANCE_PROTOCOL_VERSION`: 2025-11-25 and older pin a
//! legacy client to that version, 2026-07-28 a modern one) and, for some scenarios, a JSON
//! context (`MCP_CONFORMANCE_CONTEXT`). It does what the scenario asks with the public API of
//! `modelctx-client` only, closes the client and exits 0 as soon as the scenario is done (the
//! suite runs every scenario at once and collects the checks when the process ends). An unknown
//! scenario exits 1 at once with the reason on stderr; so does a scenario that fails (an
//! authorization refused on purpose by an `auth/*` scenario included, with the typed error).
//!
//! The `auth/*` scenarios ([`auth`]) connect with modelctx-auth's OAuth client as the
//! authorizer, list the tools and call `test-tool`.

mod auth;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use modelctx_client::auth::Authorizer;
use modelctx_client::model::{self, ToolInputSchema};
use modelctx_client::{
    Client, Elicitation, Elicited, Error, HttpConfig, InputError, JsonObject, ProtocolVersion,
};
use serde_json::{Value, json};

/// The scenarios this client knows, with what each does.
const SCENARIOS: &[&str] = &[
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "json-schema-2020-12-preservation",
    "request-metadata",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
    "sep-2640-client-no-prefetch",
    "sep-2640-client-verify-digest",
    "sep-2640-client-verify-size",
    "sep-2640-client-verify-frontmatter",
];

/// What one run is about.
struct Run {
    scenario: String,
    url: String,
    version: ProtocolVersion,
    context: Value,
}

type Outcome = Result<(), String>;

fn main() -> ExitCode {
    let run = match setup() {
        Ok(run) => run,
        Err(why) => {
            eprintln!("conformance-client: {why}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("conformance-client: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(scenario(&run));
    // The streams the client leaves behind (a standalone GET the mock never ends) must not keep
    // the process alive.
    runtime.shutdown_background();
    match outcome {
        Ok(()) => {
            eprintln!("conformance-client: {} done", run.scenario);
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("conformance-client: {}: {why}", run.scenario);
            ExitCode::FAILURE
        }
    }
}

/// Reads the arguments and the environment; refuses what this client does not do.
fn setup() -> Result<Run, String> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO")
        .map_err(|_| "MCP_CONFORMANCE_SCENARIO is not set".to_owned())?;
    if !SCENARIOS.contains(&scenario.as_str()) && !auth::SCENARIOS.contains(&scenario.as_str()) {
        return Err(format!("unknown scenario {scenario:?}"));
    }
    let url = std::env::args()
        .skip(1)
        .last()
        .ok_or("usage: conformance-client <server-url>")?;
    let version_text = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION")
        .unwrap_or_else(|_| "2025-11-25".to_owned());
    let version = ProtocolVersion::parse(&version_text)
        .ok_or_else(|| format!("unknown protocol version {version_text:?}"))?;
    let context = match std::env::var("MCP_CONFORMANCE_CONTEXT") {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| format!("MCP_CONFORMANCE_CONTEXT is not JSON: {e}"))?,
        Err(_) => Value::Null,
    };
    Ok(Run {
        scenario,
        url,
        version,
        context,
    })
}

/// Connects as the scenario needs, runs it, and closes the client whatever happened.
async fn scenario(run: &Run) -> Outcome {
    let client = connect(run).await?;
    let outcome = act(run, &client).await;
    client.close().await;
    outcome
}

async fn connect(run: &Run) -> Result<Client, String> {
    let scenario = run.scenario.clone();
    let builder = Client::builder("modelctx-conformance-client", env!("CARGO_PKG_VERSION"))
        .protocol_version(run.version)
        .request_timeout(Some(Duration::from_secs(20)))
        .handshake_timeout(Duration::from_secs(20))
        .on_elicitation(move |elicitation| answer_elicitation(scenario.clone(), elicitation))
        .apply_elicitation_defaults()
        .on_sampling(|_| async {
            Err::<model::CreateMessageResult, _>(InputError::new(
                "this client has no model to sample",
            ))
        })
        .roots(Vec::new());
    let builder = if run.scenario.starts_with("auth/") {
        let oauth = auth::oauth_for(&run.scenario, &run.context)?;
        builder.auth(Arc::new(oauth) as Arc<dyn Authorizer>)
    } else {
        builder
    };
    builder
        .connect_http_with(&run.url, HttpConfig::default())
        .await
        .map_err(|e| format!("connecting to {}: {e}", run.url))
}

/// The user's answer to an elicitation: accept, with the values the scenario expects (the
/// schema's defaults fill the rest, see `apply_elicitation_defaults`).
async fn answer_elicitation(
    scenario: String,
    elicitation: Elicitation,
) -> Result<Elicited, InputError> {
    match elicitation {
        Elicitation::Form { schema, .. } => {
            let mut content = JsonObject::new();
            if scenario == "sep-2322-client-request-state"
                && let Some(Value::Object(properties)) = schema.get("properties")
            {
                // "Please confirm to continue": the user confirms.
                for (name, property) in properties {
                    if property.get("type") == Some(&Value::from("boolean")) {
                        content.insert(name.clone(), Value::Bool(true));
                    }
                }
            }
            Ok(Elicited::accept(content))
        }
        Elicitation::Url { .. } => Ok(Elicited::decline()),
        _ => Ok(Elicited::decline()),
    }
}

async fn act(run: &Run, client: &Client) -> Outcome {
    match run.scenario.as_str() {
        // Authorized: the tools listed and one called (a step-up needs the call).
        auth if auth.starts_with("auth/") => list_and_call(client, "test-tool", json!({})).await,
        "initialize" => {
            // The handshake is the scenario; list tools only when the server has some.
            if client
                .server_capabilities()
                .is_some_and(|c| c.tools.is_some())
            {
                client.list_all_tools().await.map_err(e("tools/list"))?;
            }
            Ok(())
        }
        "tools_call" => list_and_call(client, "add_numbers", json!({"a": 2, "b": 3})).await,
        // A host lists the skills to build its registry, and reads no file of one before it
        // is loaded.
        "sep-2640-client-no-prefetch" => {
            let skills = client.list_skills().await.map_err(e("skills/list"))?;
            if skills.is_empty() {
                return Err("skills/list listed no skill".into());
            }
            Ok(())
        }
        // A host loads the first skill listed and, once its SKILL.md is verified, reads the
        // other files; a SKILL.md that fails verification ends the load there.
        "sep-2640-client-verify-digest"
        | "sep-2640-client-verify-size"
        | "sep-2640-client-verify-frontmatter" => {
            let skills = client.list_skills().await.map_err(e("skills/list"))?;
            let skill = skills.first().ok_or("skills/list listed no skill")?;
            match client.load_skill(skill).await {
                Err(refused) => {
                    eprintln!("conformance-client: the skill was not loaded: {refused}");
                    Ok(())
                }
                Ok(_) => {
                    for file in skill
                        .resources
                        .listed()
                        .iter()
                        .filter(|f| f.uri != skill.uri)
                    {
                        client
                            .read_skill_file(skill, &file.uri)
                            .await
                            .map_err(|why| format!("{}: {why}", file.uri))?;
                    }
                    Ok(())
                }
            }
        }
        "elicitation-sep1034-client-defaults" => {
            // The mock sends its elicitation on the standalone GET stream, and only if that
            // stream is open: `listening()` returns once it is.
            client.listening().await.map_err(e("listening"))?;
            list_and_call(client, "test_client_elicitation_defaults", json!({})).await
        }
        "sse-retry" => {
            // The mock answers every GET as the resumption of the pending call: a standalone
            // GET that reached it after `tools/call` would take the result, and the client,
            // answered, would end before resuming the call's stream with `Last-Event-ID`
            // (what the scenario checks). The standalone GET goes out once
            // `notifications/initialized` is accepted, on its own connection, racing the
            // requests that follow the handshake: `listening()` returns once its response
            // head came, so the mock has handled it before the call is sent.
            client.listening().await.map_err(e("listening"))?;
            list_and_call(client, "test_reconnection", json!({})).await
        }
        "json-schema-2020-12-preservation" => {
            let tools = client.list_all_tools().await.map_err(e("tools/list"))?;
            let tool = tools
                .iter()
                .find(|t| t.name == "json_schema_2020_12_tool")
                .ok_or("tools/list has no json_schema_2020_12_tool")?;
            let schema = schema_json(&tool.input_schema);
            let result = client
                .call_tool("json_schema_echo", json!({ "schema": schema }))
                .await
                .map_err(e("tools/call json_schema_echo"))?;
            expect_success("json_schema_echo", &result)
        }
        "request-metadata" => {
            // The mock refuses the first request (the probe) with -32022 and a supported
            // version; the client retries with it. Then an ordinary request (the mock declares
            // no capabilities, so no list).
            client.discover().await.map_err(e("server/discover"))?;
            Ok(())
        }
        "sep-2322-client-request-state" => {
            let tools = client.list_all_tools().await.map_err(e("tools/list"))?;
            // All at once: the answers of one call must not leak into another.
            let mut calls = tokio::task::JoinSet::new();
            for tool in tools {
                let client = client.clone();
                calls.spawn(async move {
                    let result = client
                        .call_tool(&tool.name, json!({}))
                        .await
                        .map_err(|error| format!("tools/call {}: {error}", tool.name))?;
                    expect_success(&tool.name, &result)
                });
            }
            while let Some(outcome) = calls.join_next().await {
                outcome.map_err(|error| format!("a call panicked: {error}"))??;
            }
            Ok(())
        }
        "http-standard-headers" => {
            client.discover().await.map_err(e("server/discover"))?;
            call_every_tool(client).await?;
            let resources = client
                .list_all_resources()
                .await
                .map_err(e("resources/list"))?;
            for resource in resources {
                client
                    .read_resource(&resource.uri)
                    .await
                    .map_err(e(&format!("resources/read {}", resource.uri)))?;
            }
            for prompt in client.list_all_prompts().await.map_err(e("prompts/list"))? {
                client
                    .get_prompt(&prompt.name, &[])
                    .await
                    .map_err(e(&format!("prompts/get {}", prompt.name)))?;
            }
            Ok(())
        }
        "http-custom-headers" => {
            client.list_all_tools().await.map_err(e("tools/list"))?;
            let calls = run
                .context
                .get("toolCalls")
                .and_then(Value::as_array)
                .ok_or("MCP_CONFORMANCE_CONTEXT has no toolCalls")?;
            for call in calls {
                let name = call
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or("a tool call without a name")?;
                let args = call.get("arguments").cloned().unwrap_or_else(|| json!({}));
                client
                    .call_tool(name, args)
                    .await
                    .map_err(e(&format!("tools/call {name}")))?;
            }
            Ok(())
        }
        "http-invalid-tool-headers" => {
            // The client leaves out the tools whose x-mcp-header declarations break the
            // rules: every tool still listed is callable.
            call_every_tool(client).await
        }
        "json-schema-ref-no-deref" => {
            // The schemas are kept as they came: a network `$ref` is never fetched.
            client.list_all_tools().await.map_err(e("tools/list"))?;
            Ok(())
        }
        other => Err(format!("unknown scenario {other:?}")),
    }
}

/// Formats a call's error.
fn e(what: &str) -> impl Fn(Error) -> String + '_ {
    move |error| format!("{what}: {error}")
}

/// Calls every listed tool with arguments that fit its input schema.
async fn call_every_tool(client: &Client) -> Outcome {
    for tool in client.list_all_tools().await.map_err(e("tools/list"))? {
        let args = arguments_for(&tool.input_schema);
        client
            .call_tool(&tool.name, args)
            .await
            .map_err(e(&format!("tools/call {}", tool.name)))?;
    }
    Ok(())
}

/// Lists the tools (as a host does before calling one), then calls `tool`, which must succeed.
async fn list_and_call(client: &Client, tool: &str, arguments: Value) -> Outcome {
    client.list_all_tools().await.map_err(e("tools/list"))?;
    let result = client
        .call_tool(tool, arguments)
        .await
        .map_err(|error| format!("tools/call {tool}: {error}"))?;
    expect_success(tool, &result)
}

fn expect_success(tool: &str, result: &model::CallToolResult) -> Outcome {
    if result.is_error == Some(true) {
        return Err(format!("tool {tool} failed: {:?}", result.content));
    }
    Ok(())
}

/// A tool's input schema as the JSON the server sent.
fn schema_json(schema: &ToolInputSchema) -> Value {
    let mut out = schema.extra.clone();
    if let Some(s) = &schema.schema {
        out.insert("$schema".into(), Value::from(s.as_str()));
    }
    out.insert("type".into(), Value::from("object"));
    if let Some(properties) = &schema.properties {
        let properties: JsonObject = properties
            .iter()
            .map(|(k, v)| (k.clone(), Value::Object(v.clone())))
            .collect();
        out.insert("properties".into(), Value::Object(properties));
    }
    if let Some(required) = &schema.required {
        out.insert("required".into(), json!(required));
    }
    Value::Object(out)
}

/// Plausible arguments for a tool: a value for every required property, by its type.
fn arguments_for(schema: &ToolInputSchema) -> Value {
    let mut args = JsonObject::new();
    let (Some(properties), Some(required)) = (&schema.properties, &schema.required) else {
        return Value::Object(args);
    };
    for name in required {
        let value = match properties
            .get(name)
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
        {
            Some("integer" | "number") => json!(1),
            Some("boolean") => json!(true),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => json!("test"),
        };
        args.insert(name.clone(), value);
    }
    Value::Object(args)
}
