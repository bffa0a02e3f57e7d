//! Scopes: what a tool, prompt or resource needs of an authenticated caller, for the transport
//! (`McpApp::required_scopes`, answered 403 before the message is read) and for the server's
//! own check before a handler runs (defense in depth, with the same guard).
//!
//! Only requests that came over HTTP with a `Grant` are checked: stdio, in-memory connections
//! and HTTP without a guard have no caller to check, and cost nothing here.

use std::borrow::Cow;

use modelctx_session::IncomingRequest;
use modelctx_types::consts::{PromptsGet, ResourcesRead, ResourcesSubscribe, ToolsCall};
use modelctx_types::{ErrorCode, ErrorObject, JsonObject};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::handler::Scopes;
use crate::registry::Shared;
use crate::run::Origin;

/// The code of a request refused for want of a scope: in the range JSON-RPC leaves to
/// implementations (-32000 to -32099; MCP reserves -32020 and above), as the limits' refusals
/// use it, told apart by `data.reason`.
pub(crate) const INSUFFICIENT_SCOPE: ErrorCode = ErrorCode(-32000);

/// The scopes `method` on `name` (a tool or prompt name, a resource URI) needs: those of
/// the tool for `tools/call`, of the prompt for `prompts/get`, and for `resources/read` and
/// `resources/subscribe` those of the resource at that URI or else of the first template
/// matching it (the one a read would use). `None` for anything else, an unknown name, or a
/// URI longer than `Settings::max_uri_len` (refused before any handler runs).
pub(crate) fn required(shared: &Shared, method: &str, name: Option<&str>) -> Scopes {
    let name = name?;
    let registry = shared.registry();
    match method {
        ToolsCall::VALUE => registry.tools.get(name)?.tool.scopes.clone(),
        PromptsGet::VALUE => registry.prompts.get(name)?.scopes.clone(),
        ResourcesRead::VALUE | ResourcesSubscribe::VALUE => {
            if let Some(resource) = registry.resources.get(name) {
                return resource.scopes.clone();
            }
            if name.len() > shared.settings.max_uri_len {
                return None;
            }
            registry
                .templates
                .values()
                .find(|t| t.template.matches(name).is_some())?
                .scopes
                .clone()
        }
        _ => None,
    }
}

/// The member of the params that names what `method` acts on, if it names anything.
fn member(method: &str) -> Option<&'static str> {
    match method {
        ToolsCall::VALUE | PromptsGet::VALUE => Some("name"),
        ResourcesRead::VALUE | ResourcesSubscribe::VALUE => Some("uri"),
        _ => None,
    }
}

/// The params members routing reads, borrowed.
#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uri: Option<Cow<'a, str>>,
}

/// The name or URI `request` acts on, read as routing reads it: when the params do not
/// parse as plain members (a member twice, say), as a JSON object whose last member of a
/// name wins, which is what routing falls back to.
fn named(request: &IncomingRequest, member: &str) -> Option<String> {
    let raw = request.params.as_deref()?.get();
    if let Ok(named) = serde_json::from_str::<Named<'_>>(raw) {
        let value = if member == "name" {
            named.name
        } else {
            named.uri
        };
        return value.map(Cow::into_owned);
    }
    let params: JsonObject = serde_json::from_str(raw).ok()?;
    params
        .get(member)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The server's own scope check, before `request`'s handler runs: when the request came
/// with a `Grant` and what it names needs scopes, the server's guard decides
/// (`Guard::authorize`, so its scope hierarchy applies), or, when the server knows no
/// guard (a grant put there by a layer in front), every scope must be granted exactly.
/// A refusal is [`INSUFFICIENT_SCOPE`] with `data: {"reason": "insufficient_scope",
/// "scope": "<the scopes needed, space separated>"}`.
pub(crate) fn check(
    shared: &Shared,
    request: &IncomingRequest,
    origin: &Origin,
) -> Result<(), ErrorObject> {
    let Some(grant) = origin.http.as_ref().and_then(|http| http.grant()) else {
        return Ok(());
    };
    let Some(member) = member(&request.method) else {
        return Ok(());
    };
    let name = named(request, member);
    let Some(needed) = required(shared, &request.method, name.as_deref()) else {
        return Ok(());
    };
    let allowed = match shared.guard.get() {
        Some(guard) => guard.authorize(grant, &needed).is_ok(),
        None => needed.iter().all(|scope| grant.has_scope(scope)),
    };
    if allowed {
        Ok(())
    } else {
        Err(insufficient_scope(&needed))
    }
}

/// The refusal of a request whose caller lacks some of `needed`.
fn insufficient_scope(needed: &[String]) -> ErrorObject {
    let message = "insufficient scope: the access token does not grant what this needs";
    let data = json!({"reason": "insufficient_scope", "scope": needed.join(" ")});
    ErrorObject::new(INSUFFICIENT_SCOPE, message)
        .with_data(&data)
        .unwrap_or_else(|_| ErrorObject::new(INSUFFICIENT_SCOPE, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_every_scope_needed() {
        let error = insufficient_scope(&["files:read".into(), "files:write".into()]);
        assert_eq!(error.code, INSUFFICIENT_SCOPE);
        let data: Value = serde_json::from_str(error.data.as_deref().unwrap().get()).unwrap();
        assert_eq!(
            data,
            json!({"reason": "insufficient_scope", "scope": "files:read files:write"})
        );
    }
}
