//! Routing: which handler answers a request, and whether it is answered at once or by a
//! handler on its own task.

use std::borrow::Cow;
use std::sync::Arc;

use modelctx_session::IncomingRequest;
use modelctx_types::consts::{
    CompletionComplete, PromptsGet, PromptsList, RefPrompt, RefResource, ResourcesList,
    ResourcesRead, ResourcesTemplatesList, TasksCancel, TasksGet, TasksList, TasksResult,
    TasksUpdate, ToolsCall, ToolsList,
};
use modelctx_types::{ErrorCode, ErrorObject, JsonObject, skills};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

pub(crate) use crate::handler::Runner;
use crate::middleware::Chain;
use crate::registry::Shared;
use crate::tool::Arguments;
use crate::wire::invalid_params;

/// How one request is answered.
pub(crate) enum Route {
    /// Answered at once, with the result written as JSON text.
    Now(Result<Box<RawValue>, ErrorObject>),
    /// Answered by a handler, on its own task.
    Run(Runner),
}

impl From<Result<Runner, ErrorObject>> for Route {
    fn from(runner: Result<Runner, ErrorObject>) -> Self {
        match runner {
            Ok(runner) => Route::Run(runner),
            Err(error) => Route::Now(Err(error)),
        }
    }
}

/// Decides how to answer `request`; the chain of the tool a `tools/call` names, if it has one,
/// goes in `tool_layers`.
pub(crate) fn route(
    shared: &Arc<Shared>,
    request: &IncomingRequest,
    tool_layers: &mut Option<Chain>,
) -> Route {
    // `tools/call`, the hot path: its fields straight from the raw params, without building the
    // whole object first and converting it (and a modern call's `_meta` with it). Anything
    // unusual (not an object, no name, a field twice) takes the general path below, which words
    // the error as before.
    if request.method == ToolsCall::VALUE
        && let Some(raw) = request.params.as_deref()
        && raw.get().trim_start().starts_with('{')
        && let Ok(call) = serde_json::from_str::<Call<'_>>(raw.get())
    {
        let arguments = match call.arguments {
            Some(raw) if raw.get() != "null" => Arguments::Raw(raw.to_owned()),
            _ => Arguments::Parsed(Value::Object(JsonObject::new())),
        };
        let runner = call_tool(shared, &call.name, arguments, tool_layers);
        let runner = crate::tasks::legacy::call(shared, &call.name, request, runner);
        return crate::tasks::wire::call(shared, &call.name, request, runner).into();
    }
    let params: JsonObject = match request.params.as_deref() {
        Some(raw) => match serde_json::from_str(raw.get()) {
            Ok(p) => p,
            Err(e) => return Route::Now(Err(invalid_params(format!("invalid params: {e}")))),
        },
        None => JsonObject::new(),
    };
    let version = request.version;
    let page_size = shared.settings.page_size;
    match request.method.as_str() {
        ToolsList::VALUE => Route::Now(crate::tool::list(
            &shared.registry().tools,
            version,
            &params,
            page_size,
        )),
        ToolsCall::VALUE => match serde_json::from_value::<ParsedCall>(Value::Object(params)) {
            Ok(ParsedCall { name, arguments }) => {
                let arguments = arguments.unwrap_or_else(|| Value::Object(JsonObject::new()));
                let runner = call_tool(shared, &name, Arguments::Parsed(arguments), tool_layers);
                let runner = crate::tasks::legacy::call(shared, &name, request, runner);
                crate::tasks::wire::call(shared, &name, request, runner).into()
            }
            Err(e) => Route::Now(Err(invalid_params(format!("invalid params: {e}")))),
        },
        ResourcesList::VALUE => Route::Now(
            crate::resource::list(&shared.registry().resources, version, &params, page_size)
                .and_then(|v| crate::wire::raw(&v)),
        ),
        ResourcesTemplatesList::VALUE => Route::Now(
            crate::resource::list_templates(
                &shared.registry().templates,
                version,
                &params,
                page_size,
            )
            .and_then(|v| crate::wire::raw(&v)),
        ),
        ResourcesRead::VALUE => {
            let registry = shared.registry();
            crate::resource::read(
                &registry.resources,
                &registry.templates,
                &params,
                version,
                shared.settings.max_uri_len,
            )
            .into()
        }
        PromptsList::VALUE => Route::Now(
            crate::prompt::list(&shared.registry().prompts, version, &params, page_size)
                .and_then(|v| crate::wire::raw(&v)),
        ),
        PromptsGet::VALUE => crate::prompt::get(&shared.registry().prompts, params).into(),
        CompletionComplete::VALUE => complete(shared, params).into(),
        skills::SKILLS_LIST | skills::SKILLS_GET | skills::RESOURCES_DIRECTORY_READ => shared
            .registry()
            .skills
            .route(request.method.as_str(), params, page_size),
        TasksGet::VALUE
        | TasksUpdate::VALUE
        | TasksCancel::VALUE
        | TasksResult::VALUE
        | TasksList::VALUE => match crate::tasks::legacy::route(shared, request, &params) {
            Some(legacy) => legacy.into(),
            None => crate::tasks::wire::route(shared, request, params).into(),
        },
        other => Route::Now(Err(ErrorObject::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {other}"),
        ))),
    }
}

/// The params of `tools/call` that routing reads, borrowed from the message: the name, and the
/// text of the arguments, which the tool decodes once into what it needs.
#[derive(Deserialize)]
struct Call<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// The params of `tools/call` when they had to be parsed whole first.
#[derive(Deserialize)]
struct ParsedCall {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

/// `tools/call`: the tool, and the work of calling it (the tool's chain in `layers`).
fn call_tool(
    shared: &Shared,
    name: &str,
    arguments: Arguments,
    layers: &mut Option<Chain>,
) -> Result<Runner, ErrorObject> {
    let Some(tool) = shared.registry().tools.get(name).cloned() else {
        return Err(invalid_params(format!("unknown tool: {name}")));
    };
    layers.clone_from(&tool.layers);
    Ok(Box::new(move |context| {
        Box::pin(crate::tool::call(tool, arguments, context))
    }))
}

/// `completion/complete`: the provider of a prompt's argument or a template's variable.
fn complete(shared: &Shared, params: JsonObject) -> Result<Runner, ErrorObject> {
    let reference = params.get("ref").cloned().unwrap_or(Value::Null);
    let argument = params.get("argument").cloned().unwrap_or(Value::Null);
    let (Some(arg_name), Some(partial)) = (
        argument.get("name").and_then(Value::as_str),
        argument.get("value").and_then(Value::as_str),
    ) else {
        return Err(invalid_params(
            "completion/complete needs argument.name and argument.value",
        ));
    };
    let others = params
        .get("context")
        .and_then(|c| c.get("arguments"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let registry = shared.registry();
    let completer = match reference.get("type").and_then(Value::as_str) {
        Some(RefPrompt::VALUE) => {
            let name = reference
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let Some(prompt) = registry.prompts.get(name) else {
                return Err(invalid_params(format!("unknown prompt: {name}")));
            };
            prompt.completers.get(arg_name).cloned()
        }
        Some(RefResource::VALUE) => {
            let uri = reference
                .get("uri")
                .and_then(Value::as_str)
                .unwrap_or_default();
            crate::registry::check_uri_len(shared, "ref.uri", uri)?;
            registry.template_completer(uri, arg_name)?
        }
        _ => return Err(invalid_params("ref must be ref/prompt or ref/resource")),
    };
    drop(registry);
    Ok(crate::complete::run(completer, partial.to_owned(), others))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NoArgs, Server, Tool};

    #[test]
    fn a_call_shares_the_registered_tool_instead_of_cloning_it() {
        async fn noop(_: NoArgs) -> &'static str {
            ""
        }
        let server = Server::builder("s", "1")
            .tool(Tool::with_input_schema("t", JsonObject::new(), noop))
            .build();
        let shared = &server.shared;
        let registered = shared.registry().tools["t"].clone();
        assert_eq!(Arc::strong_count(&registered), 2);
        let runner = call_tool(
            shared,
            "t",
            Arguments::Parsed(Value::Object(JsonObject::new())),
            &mut None,
        );
        // The runner holds the one registered tool (its schemas compiled once), not a copy.
        assert!(runner.is_ok());
        assert_eq!(Arc::strong_count(&registered), 3);
        drop(runner);
        assert_eq!(Arc::strong_count(&registered), 2);
        let unknown = call_tool(shared, "u", Arguments::Parsed(Value::Null), &mut None);
        assert_eq!(
            unknown.err().map(|e| (e.code, e.message)),
            Some((ErrorCode::INVALID_PARAMS, "unknown tool: u".to_owned()))
        );
    }
}
