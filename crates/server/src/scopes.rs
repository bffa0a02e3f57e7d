//! Scopes: what a tool, prompt or resource needs of an authenticated caller, for the transport
//! (`McpApp::required_scopes`, answered 403 before the message is read) and for the server's
//! own check before a handler runs (defense in depth, with the same guard).
//!
//! Only requests that came over HTTP with a `Grant` are checked: stdio, in-memory connections
//! and HTTP without a guard have no caller to check, and cost nothing here.

use std::borrow::Cow;

use modelctx_http::server::Grant;
use modelctx_session::IncomingRequest;
use modelctx_types::consts::{
    CompletionComplete, PromptsGet, RefPrompt, RefResource, ResourcesRead, ResourcesSubscribe,
    ToolsCall,
};
use modelctx_types::{ErrorCode, ErrorObject, JsonObject};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::handler::Scopes;
use crate::registry::Shared;
use crate::run::Origin;

/// The code of a request refused for want of a scope: the server's refusals' code
/// ([`limits::REFUSED`](crate::limits::REFUSED)), told apart by `data.reason`.
const INSUFFICIENT_SCOPE: ErrorCode = crate::limits::REFUSED;

/// The scopes the request `method` with `params` needs, read from the params as routing
/// reads them: for `tools/call` those of the tool `params.name`, for `prompts/get` of the
/// prompt `params.name`, for `resources/read` and `resources/subscribe` those of what the URI
/// `params.uri` names (the resource at it or else the first template matching it, the one a
/// read uses: [`resource::find`](crate::resource::find)), and for `completion/complete` those
/// of what `params.ref` names (the prompt `ref.name` of a `ref/prompt`; the template whose
/// text is `ref.uri` of a `ref/resource`, else the resource at that URI), since completing runs
/// that prompt's or template's completers. `None` for anything else, an unknown name, or a URI
/// longer than `Settings::max_uri_len` (refused before any handler runs).
///
/// The one reader of what a request names, for the transport (`McpApp::required_scopes`) and
/// for the server's own [`check`].
pub(crate) fn required(shared: &Shared, method: &str, params: Option<&RawValue>) -> Scopes {
    let registry = shared.registry();
    match method {
        ToolsCall::VALUE => registry
            .tools
            .get(&*named(params, "name")?)?
            .tool
            .scopes
            .clone(),
        PromptsGet::VALUE => registry
            .prompts
            .get(&*named(params, "name")?)?
            .scopes
            .clone(),
        ResourcesRead::VALUE | ResourcesSubscribe::VALUE => {
            let uri = named(params, "uri")?;
            let max_uri_len = shared.settings.max_uri_len;
            crate::resource::find(&registry.resources, &registry.templates, &uri, max_uri_len)
                .ok()??
                .scopes()
                .clone()
        }
        CompletionComplete::VALUE => {
            let params: JsonObject = serde_json::from_str(params?.get()).ok()?;
            let reference = params.get("ref")?;
            let text = |member: &str| reference.get(member).and_then(Value::as_str);
            match text("type")? {
                RefPrompt::VALUE => registry.prompts.get(text("name")?)?.scopes.clone(),
                RefResource::VALUE => {
                    let uri = text("uri")?;
                    if uri.len() > shared.settings.max_uri_len {
                        return None;
                    }
                    match registry.templates.get(uri) {
                        Some(template) => template.scopes.clone(),
                        None => registry.resources.get(uri)?.scopes.clone(),
                    }
                }
                _ => None,
            }
        }
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

/// The string member `member` (`name` or `uri`) of `params`, read as routing reads it: when
/// the params do not parse as plain members (a member twice, say), as a JSON object whose last
/// member of a name wins, which is what routing falls back to.
fn named<'a>(params: Option<&'a RawValue>, member: &str) -> Option<Cow<'a, str>> {
    let raw = params?.get();
    if let Ok(named) = serde_json::from_str::<Named<'a>>(raw) {
        return if member == "name" {
            named.name
        } else {
            named.uri
        };
    }
    let params: JsonObject = serde_json::from_str(raw).ok()?;
    params
        .get(member)
        .and_then(Value::as_str)
        .map(|text| Cow::Owned(text.to_owned()))
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
    let Some(needed) = required(shared, &request.method, request.params.as_deref()) else {
        return Ok(());
    };
    if permits(shared, origin, grant, &needed) {
        Ok(())
    } else {
        Err(insufficient_scope(&needed))
    }
}

/// Whether `grant` (of `origin`'s request) covers `needed`: the guard that admitted the request
/// decides (`Guard::authorize`, so its scope hierarchy applies), else (a grant a layer in front
/// put there) the server's own ([`ServerBuilder::auth`](crate::ServerBuilder::auth)), else
/// every scope must be granted exactly.
fn permits(shared: &Shared, origin: &Origin, grant: &Grant, needed: &[String]) -> bool {
    let admitting = origin.http.as_ref().and_then(|http| http.guard());
    match admitting.or(shared.guard.as_deref()) {
        Some(guard) => guard.authorize(grant, needed).is_ok(),
        None => needed.iter().all(|scope| grant.has_scope(scope)),
    }
}

/// Whether the caller of `origin` may hear of changes to the resource at `uri` (a legacy
/// subscription, a listen stream's filter): when it came over HTTP with a `Grant`, it must hold
/// the scopes reading it needs (the same as [`check`] asks of a `resources/subscribe`).
pub(crate) fn may_read(shared: &Shared, uri: &str, origin: &Origin) -> bool {
    let Some(grant) = origin.http.as_ref().and_then(|http| http.grant()) else {
        return true;
    };
    let registry = shared.registry();
    let found = crate::resource::find(
        &registry.resources,
        &registry.templates,
        uri,
        shared.settings.max_uri_len,
    );
    let needed = match found {
        Ok(Some(found)) => found.scopes().clone(),
        Ok(None) => None,
        // Longer than any URI the server reads: nothing of it is told.
        Err(_) => return false,
    };
    drop(registry);
    needed.is_none_or(|needed| permits(shared, origin, grant, &needed))
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
