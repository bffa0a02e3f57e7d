//! Consent and policy: what the application approves.
//!
//! OWNER: the policy work package. The trait's three methods and [`Decision`] are the contract
//! the host core and the handlers call; the default rules, allow-lists, the policy file and
//! anything that asks a user are yours to fill in.

use std::future::Future;
use std::pin::Pin;

use modelctx_client::{Elicitation, model};
use modelctx_types::JsonObject;

/// A boxed future, as the [`Policy`] methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The answer of a [`Policy`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Go on.
    Allow,
    /// Refuse, with the reason the caller (and the server, for its requests) is told.
    Deny {
        /// Why.
        reason: String,
    },
}

/// A tool call the host is about to make.
#[derive(Debug)]
#[non_exhaustive]
pub struct ToolCall<'a> {
    /// The server that owns the tool (its config name).
    pub server: &'a str,
    /// The tool as the server listed it (its own name, `annotations` with `destructiveHint`,
    /// `openWorldHint`, `readOnlyHint`).
    pub tool: &'a model::Tool,
    /// The name the host shows for it (namespaced).
    pub exposed_name: &'a str,
    /// The arguments.
    pub arguments: &'a JsonObject,
}

/// A server's `sampling/createMessage`, before the application's model answers it.
#[derive(Debug)]
#[non_exhaustive]
pub struct SamplingRequest {
    /// The server that asks (its config name).
    pub server: String,
    /// What it asks; the policy may edit it (the prompt the model gets is this one).
    pub params: model::CreateMessageRequestParams,
}

/// A server's elicitation, before the application's handler shows it.
#[derive(Debug)]
#[non_exhaustive]
pub struct ElicitationRequest {
    /// The server that asks (its config name).
    pub server: String,
    /// What it asks.
    pub elicitation: Elicitation,
}

/// What the application approves. Every method has a default; see each.
pub trait Policy: Send + Sync + 'static {
    /// Whether the host may make `call`.
    ///
    /// Default: a tool the server marks read-only (`readOnlyHint: true`) or not destructive
    /// (`destructiveHint: false`) is allowed; any other is refused, as the spec's defaults make
    /// an unannotated tool destructive.
    fn approve_tool_call<'a>(&'a self, call: &'a ToolCall<'a>) -> BoxFuture<'a, Decision> {
        let annotations = call.tool.annotations.as_ref();
        let read_only = annotations.and_then(|a| a.read_only_hint) == Some(true);
        let harmless = annotations.and_then(|a| a.destructive_hint) == Some(false);
        let decision = if read_only || harmless {
            Decision::Allow
        } else {
            Decision::Deny {
                reason: format!(
                    "tool {:?} of server {:?} may be destructive and nobody approved the call",
                    call.tool.name, call.server
                ),
            }
        };
        Box::pin(std::future::ready(decision))
    }

    /// Whether the application's model may answer `request` (which the policy may edit).
    ///
    /// Default: allowed, unchanged.
    fn approve_sampling<'a>(&'a self, request: &'a mut SamplingRequest) -> BoxFuture<'a, Decision> {
        let _ = request;
        Box::pin(std::future::ready(Decision::Allow))
    }

    /// Whether the elicitation goes to the application's handler.
    ///
    /// Default: allowed (the handler shows it to the user, who answers).
    fn approve_elicitation<'a>(
        &'a self,
        request: &'a ElicitationRequest,
    ) -> BoxFuture<'a, Decision> {
        let _ = request;
        Box::pin(std::future::ready(Decision::Allow))
    }
}

/// The policy of the defaults of [`Policy`]'s methods.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct DefaultPolicy;

impl Policy for DefaultPolicy {}
