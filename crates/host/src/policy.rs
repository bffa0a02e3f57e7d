//! Consent and policy: what the application approves.
//!
//! A [`Policy`] answers three questions of the host: may this tool call go to its server
//! ([`Policy::approve_tool_call`], with the tool's annotations), may the application's model
//! answer this server's sampling request, as it stands or edited ([`Policy::approve_sampling`]),
//! and may this elicitation reach the application's handler ([`Policy::approve_elicitation`]).
//! A decision that needs a person goes to [`Policy::ask`], which refuses by default: a host
//! with nobody to ask refuses what it cannot decide.
//!
//! Three policies come with the crate:
//! - [`DefaultPolicy`]: the defaults of the trait. A tool call is allowed when the server marks
//!   the tool read-only (`readOnlyHint: true`) or not destructive (`destructiveHint: false`);
//!   any other needs approval (the spec's defaults make an unannotated tool destructive), which
//!   nobody gives. Sampling and elicitation are allowed unchanged.
//! - [`Rules`]: the default rules plus, per server, tools allowed without asking, tools denied,
//!   or only some tools at all; what to do with the tools that need approval (ask, allow,
//!   deny); sampling allowed or denied, with a cap on `maxTokens` and a prefix written into the
//!   system prompt; elicitation allowed or denied; and a function that asks a person
//!   ([`Rules::on_ask`]).
//! - [`PolicyFile`]: [`Rules`] read from a JSON file, to answer consent with no user present
//!   (`mcx host --policy FILE`).
//!
//! # The policy file
//!
//! A JSON object; every member is optional:
//!
//! | member | value | default |
//! |---|---|---|
//! | `destructive` | `"allow"` or `"deny"`: a tool no list names that may be destructive (marked `destructiveHint: true`, or not annotated) | `"deny"` |
//! | `sampling` | `"allow"`, `"deny"`, or `{"maxTokens": N, "systemPromptPrefix": "..."}` (allowed, edited: `maxTokens` capped at `N`; the prefix written before the server's system prompt, or as the system prompt when it has none) | `"allow"` |
//! | `elicitation` | `"allow"` or `"deny"` | `"allow"` |
//! | `servers` | an object keyed by the server's config name, each with `allow` and `deny` (lists of tool names, the server's own, each exact or ending with one `*` that matches any rest), and its own `destructive`, `sampling`, `elicitation` replacing the file's for that server | `{}` |
//!
//! A tool named by both lists goes by the more specific pattern: an exact name beats any
//! wildcard, a longer prefix beats a shorter one, and `deny` wins a tie. So `"allow":
//! ["read_*"], "deny": ["*"]` allows the `read_` tools and nothing else of the server, and
//! `"allow": ["*"], "deny": ["delete_*"]` allows every tool but the `delete_` ones. A tool no
//! list names is allowed when it is read-only or marked not destructive, else `destructive`
//! decides. Unknown members, a `*` that is not last, a `maxTokens` below 1 are errors, each with
//! its line and column.
//!
//! ```
//! use modelctx_host::policy::PolicyFile;
//!
//! let policy = PolicyFile::from_json(
//!     r#"{
//!         "destructive": "deny",
//!         "sampling": {"maxTokens": 1024, "systemPromptPrefix": "Answer in one paragraph."},
//!         "elicitation": "deny",
//!         "servers": {
//!             "files": {"allow": ["read_*", "list_directory"], "deny": ["*"]},
//!             "github": {"allow": ["create_issue"], "deny": ["delete_*"], "sampling": "deny"}
//!         }
//!     }"#,
//! )?;
//! # let _ = policy;
//! assert!(PolicyFile::from_json(r#"{"destructive": "maybe"}"#).is_err());
//! # Ok::<(), modelctx_host::policy::PolicyFileError>(())
//! ```
//!
//! What it does not do: tool names are the server's own (not the host's namespaced ones), and
//! the rules read only the tool's annotations, which a server may state wrongly: a server you
//! do not trust should get an allow-list (its `"deny": ["*"]`), not annotations taken on trust.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use modelctx_client::{Elicitation, model};
use modelctx_types::JsonObject;
use serde::Deserialize;

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

impl Decision {
    /// A refusal for `reason`.
    pub fn deny(reason: impl Into<String>) -> Decision {
        Decision::Deny {
            reason: reason.into(),
        }
    }
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

impl<'a> ToolCall<'a> {
    /// A call of `tool` of `server`, shown as `exposed_name`, with `arguments`.
    pub fn new(
        server: &'a str,
        tool: &'a model::Tool,
        exposed_name: &'a str,
        arguments: &'a JsonObject,
    ) -> Self {
        ToolCall {
            server,
            tool,
            exposed_name,
            arguments,
        }
    }

    fn annotations(&self) -> Option<&model::ToolAnnotations> {
        self.tool.annotations.as_ref()
    }

    /// Whether the server says the tool does not modify its environment (`readOnlyHint`,
    /// default false).
    pub fn read_only(&self) -> bool {
        self.annotations().and_then(|a| a.read_only_hint) == Some(true)
    }

    /// Whether the tool may perform destructive updates: not [`read_only`](Self::read_only)
    /// and `destructiveHint` not false (its default is true).
    pub fn destructive(&self) -> bool {
        !self.read_only() && self.annotations().and_then(|a| a.destructive_hint) != Some(false)
    }

    /// Whether calling the tool again with the same arguments has no further effect
    /// (`idempotentHint`, default false; meaningless for a read-only tool).
    pub fn idempotent(&self) -> bool {
        self.annotations().and_then(|a| a.idempotent_hint) == Some(true)
    }

    /// Whether the tool may reach an open world of external entities, the web for one
    /// (`openWorldHint`, default true), rather than a closed domain such as a memory.
    pub fn open_world(&self) -> bool {
        self.annotations().and_then(|a| a.open_world_hint) != Some(false)
    }

    /// Why the call needs approval under the default rules, if it does: the tool may be
    /// destructive.
    pub fn needs_approval(&self) -> Option<String> {
        if !self.destructive() {
            return None;
        }
        let marked = self.annotations().and_then(|a| a.destructive_hint) == Some(true);
        Some(format!(
            "tool {:?} of server {:?} {}",
            self.tool.name,
            self.server,
            if marked {
                "is marked destructive"
            } else {
                "may be destructive (it is not annotated read-only or non-destructive)"
            }
        ))
    }
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

impl SamplingRequest {
    /// `server`'s request `params`.
    pub fn new(server: impl Into<String>, params: model::CreateMessageRequestParams) -> Self {
        SamplingRequest {
            server: server.into(),
            params,
        }
    }
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

impl ElicitationRequest {
    /// `server`'s `elicitation`.
    pub fn new(server: impl Into<String>, elicitation: Elicitation) -> Self {
        ElicitationRequest {
            server: server.into(),
            elicitation,
        }
    }
}

/// What the application approves. Every method has a default; see each.
pub trait Policy: Send + Sync + 'static {
    /// Whether the host may make `call`.
    ///
    /// Default: a tool the server marks read-only (`readOnlyHint: true`) or not destructive
    /// (`destructiveHint: false`) is allowed; any other goes to [`ask`](Self::ask), as the
    /// spec's defaults make an unannotated tool destructive
    /// ([`ToolCall::needs_approval`]).
    fn approve_tool_call<'a>(&'a self, call: &'a ToolCall<'a>) -> BoxFuture<'a, Decision> {
        match call.needs_approval() {
            None => Box::pin(std::future::ready(Decision::Allow)),
            Some(reason) => self.ask(call, reason),
        }
    }

    /// The decision of a person on `call`, which the rules leave to one for `reason` (a
    /// sentence naming the tool and the server).
    ///
    /// Default: refused, as there is nobody to ask.
    fn ask<'a>(&'a self, call: &'a ToolCall<'a>, reason: String) -> BoxFuture<'a, Decision> {
        let _ = call;
        Box::pin(std::future::ready(Decision::Deny {
            reason: format!("{reason}, and nobody is there to approve the call"),
        }))
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

/// A shared policy (the application keeps a handle to the one the host uses).
impl<P: Policy + ?Sized> Policy for Arc<P> {
    fn approve_tool_call<'a>(&'a self, call: &'a ToolCall<'a>) -> BoxFuture<'a, Decision> {
        (**self).approve_tool_call(call)
    }

    fn ask<'a>(&'a self, call: &'a ToolCall<'a>, reason: String) -> BoxFuture<'a, Decision> {
        (**self).ask(call, reason)
    }

    fn approve_sampling<'a>(&'a self, request: &'a mut SamplingRequest) -> BoxFuture<'a, Decision> {
        (**self).approve_sampling(request)
    }

    fn approve_elicitation<'a>(
        &'a self,
        request: &'a ElicitationRequest,
    ) -> BoxFuture<'a, Decision> {
        (**self).approve_elicitation(request)
    }
}

/// The policy of the defaults of [`Policy`]'s methods.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct DefaultPolicy;

impl Policy for DefaultPolicy {}

/// What [`Rules`] do with a tool call that needs approval and that no list names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fallback {
    /// Ask a person ([`Rules::on_ask`]; refused when there is none).
    #[default]
    Ask,
    /// Allow it.
    Allow,
    /// Refuse it.
    Deny,
}

/// What [`Rules`] do with a sampling request: allow it (possibly edited) or refuse it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SamplingRule {
    /// Whether the model may answer.
    pub allow: bool,
    /// A cap on the request's `maxTokens`; `None`: as asked.
    pub max_tokens: Option<u32>,
    /// Written before the server's system prompt (with a blank line between), or as the system
    /// prompt when it has none; `None`: as asked.
    pub system_prompt_prefix: Option<String>,
}

impl Default for SamplingRule {
    fn default() -> Self {
        SamplingRule::allow()
    }
}

impl SamplingRule {
    /// Allowed, unchanged.
    pub fn allow() -> Self {
        SamplingRule {
            allow: true,
            max_tokens: None,
            system_prompt_prefix: None,
        }
    }

    /// Refused.
    pub fn deny() -> Self {
        SamplingRule {
            allow: false,
            ..SamplingRule::allow()
        }
    }

    /// With `maxTokens` capped at `max`.
    pub fn max_tokens(mut self, max: u32) -> Self {
        self.max_tokens = Some(max);
        self
    }

    /// With `prefix` written before the system prompt.
    pub fn system_prompt_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.system_prompt_prefix = Some(prefix.into());
        self
    }

    /// Edits `params` as the rule says.
    fn edit(&self, params: &mut model::CreateMessageRequestParams) {
        if let Some(max) = self.max_tokens {
            params.max_tokens = params.max_tokens.min(i64::from(max));
        }
        if let Some(prefix) = &self.system_prompt_prefix {
            params.system_prompt = Some(match params.system_prompt.take() {
                Some(prompt) if !prompt.is_empty() => format!("{prefix}\n\n{prompt}"),
                _ => prefix.clone(),
            });
        }
    }
}

/// A tool call that [`Rules`] leave to a person, as [`Rules::on_ask`]'s function gets it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Question {
    /// The server that owns the tool (its config name).
    pub server: String,
    /// The tool as the server listed it.
    pub tool: model::Tool,
    /// The name the host shows for it.
    pub exposed_name: String,
    /// The arguments.
    pub arguments: JsonObject,
    /// Why it needs approval (a sentence naming the tool and the server).
    pub reason: String,
}

type Asker = Arc<dyn Fn(Question) -> BoxFuture<'static, Decision> + Send + Sync>;

/// A tool name pattern: exact, or a prefix when it ends with `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern(String);

impl Pattern {
    /// How specifically it matches `name`, if it does: an exact name beats every prefix, a
    /// longer prefix beats a shorter one.
    fn specificity(&self, name: &str) -> Option<usize> {
        match self.0.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix).then_some(prefix.len()),
            None => (self.0 == name).then_some(usize::MAX),
        }
    }

    fn check(text: &str) -> Result<(), String> {
        if text.is_empty() {
            return Err("an empty tool name pattern".into());
        }
        if text.trim_end_matches('*').contains('*') || text.ends_with("**") {
            return Err(format!(
                "tool name pattern {text:?}: `*` may only be its last character"
            ));
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Pattern::check(&text).map_err(serde::de::Error::custom)?;
        Ok(Pattern(text))
    }
}

/// The rules of one server.
#[derive(Debug, Clone, Default)]
struct ServerRules {
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
    fallback: Option<Fallback>,
    sampling: Option<SamplingRule>,
    elicitation: Option<bool>,
}

/// What the lists of a server say of a tool: allowed or denied by the pattern that matched.
enum Listed<'a> {
    Allowed,
    Denied(&'a str),
}

impl ServerRules {
    fn listed(&self, tool: &str) -> Option<Listed<'_>> {
        fn best<'p>(patterns: &'p [Pattern], tool: &str) -> Option<(usize, &'p Pattern)> {
            patterns
                .iter()
                .filter_map(|p| p.specificity(tool).map(|s| (s, p)))
                .max_by_key(|(s, _)| *s)
        }
        match (best(&self.allow, tool), best(&self.deny, tool)) {
            (None, None) => None,
            (Some(_), None) => Some(Listed::Allowed),
            (Some((allowed, _)), Some((denied, _))) if allowed > denied => Some(Listed::Allowed),
            (_, Some((_, pattern))) => Some(Listed::Denied(&pattern.0)),
        }
    }
}

/// The default rules with allow-lists per server, a fallback for the tools that need approval,
/// sampling and elicitation rules, and who to ask.
///
/// A tool call of server `S` goes, in order:
/// 1. by `S`'s lists ([`allow`](Self::allow), [`deny`](Self::deny), [`only`](Self::only)): the
///    most specific pattern naming the tool decides (an exact name beats any `prefix*`, a longer
///    prefix a shorter one, a denial wins a tie);
/// 2. else by the default rules: allowed when the tool is read-only or not destructive;
/// 3. else by the fallback ([`destructive`](Self::destructive), per server
///    [`server_destructive`](Self::server_destructive); default [`Fallback::Ask`]): allowed,
///    refused, or asked ([`on_ask`](Self::on_ask); refused when nobody is asked).
///
/// Sampling is allowed unchanged and elicitation allowed unless set otherwise.
///
/// ```
/// use modelctx_host::policy::{Decision, Fallback, Rules, SamplingRule};
///
/// let rules = Rules::new()
///     // Read-only tools of `files` need no approval anyway; these two neither.
///     .allow("files", ["write_file", "create_directory"])
///     // Of `shell`, only `run_tests`.
///     .only("shell", ["run_tests"])
///     .sampling(SamplingRule::allow().max_tokens(2048))
///     .on_ask(|question| async move {
///         // Show `question.reason` and the arguments to the user; here: no.
///         let _ = question.arguments;
///         Decision::deny("the user said no")
///     });
/// # let _ = (rules, Fallback::Deny);
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct Rules {
    servers: BTreeMap<String, ServerRules>,
    fallback: Fallback,
    sampling: SamplingRule,
    elicitation: bool,
    asker: Option<Asker>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("servers", &self.servers)
            .field("fallback", &self.fallback)
            .field("sampling", &self.sampling)
            .field("elicitation", &self.elicitation)
            .field("asker", &self.asker.is_some())
            .finish()
    }
}

impl Rules {
    /// The default rules: no lists, [`Fallback::Ask`] with nobody to ask, sampling allowed
    /// unchanged, elicitation allowed.
    pub fn new() -> Self {
        Rules {
            elicitation: true,
            ..Rules::default()
        }
    }

    fn server(&mut self, server: impl Into<String>) -> &mut ServerRules {
        self.servers.entry(server.into()).or_default()
    }

    /// Tools of `server` (its own names; exact, or a prefix ending with `*`; a `*` elsewhere is
    /// an ordinary character) allowed without asking.
    pub fn allow<I, S>(mut self, server: impl Into<String>, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let rules = self.server(server);
        rules
            .allow
            .extend(tools.into_iter().map(|t| Pattern(t.into())));
        self
    }

    /// Tools of `server` refused (patterns as in [`allow`](Self::allow)).
    pub fn deny<I, S>(mut self, server: impl Into<String>, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let rules = self.server(server);
        rules
            .deny
            .extend(tools.into_iter().map(|t| Pattern(t.into())));
        self
    }

    /// Only these tools of `server`, allowed without asking; every other one refused (the same
    /// as [`allow`](Self::allow) and a `deny` of `*`).
    pub fn only<I, S>(self, server: impl Into<String>, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let server = server.into();
        self.allow(server.clone(), tools).deny(server, ["*"])
    }

    /// What to do with a tool call that may be destructive and that no list names (default:
    /// [`Fallback::Ask`]).
    pub fn destructive(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// [`destructive`](Self::destructive) for the tools of `server`.
    pub fn server_destructive(mut self, server: impl Into<String>, fallback: Fallback) -> Self {
        self.server(server).fallback = Some(fallback);
        self
    }

    /// What to do with sampling requests (default: allowed unchanged).
    pub fn sampling(mut self, rule: SamplingRule) -> Self {
        self.sampling = rule;
        self
    }

    /// [`sampling`](Self::sampling) for the requests of `server`.
    pub fn server_sampling(mut self, server: impl Into<String>, rule: SamplingRule) -> Self {
        self.server(server).sampling = Some(rule);
        self
    }

    /// Whether elicitations reach the application's handler (default: true).
    pub fn elicitation(mut self, allow: bool) -> Self {
        self.elicitation = allow;
        self
    }

    /// [`elicitation`](Self::elicitation) for the requests of `server`.
    pub fn server_elicitation(mut self, server: impl Into<String>, allow: bool) -> Self {
        self.server(server).elicitation = Some(allow);
        self
    }

    /// Asks a person about the tool calls the rules leave to one (default: nobody; they are
    /// refused).
    pub fn on_ask<F, Fut>(mut self, ask: F) -> Self
    where
        F: Fn(Question) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Decision> + Send + 'static,
    {
        self.asker = Some(Arc::new(move |question| Box::pin(ask(question))));
        self
    }
}

impl Policy for Rules {
    fn approve_tool_call<'a>(&'a self, call: &'a ToolCall<'a>) -> BoxFuture<'a, Decision> {
        let rules = self.servers.get(call.server);
        let ready =
            |decision| -> BoxFuture<'a, Decision> { Box::pin(std::future::ready(decision)) };
        match rules.and_then(|r| r.listed(&call.tool.name)) {
            Some(Listed::Allowed) => return ready(Decision::Allow),
            Some(Listed::Denied(pattern)) => {
                return ready(Decision::Deny {
                    reason: format!(
                        "the policy denies tool {:?} of server {:?} (pattern {pattern:?})",
                        call.tool.name, call.server
                    ),
                });
            }
            None => {}
        }
        let Some(reason) = call.needs_approval() else {
            return ready(Decision::Allow);
        };
        match rules.and_then(|r| r.fallback).unwrap_or(self.fallback) {
            Fallback::Allow => ready(Decision::Allow),
            Fallback::Deny => ready(Decision::Deny {
                reason: format!(
                    "{reason}, and the policy denies such tools unless it lists them as allowed"
                ),
            }),
            Fallback::Ask => self.ask(call, reason),
        }
    }

    fn ask<'a>(&'a self, call: &'a ToolCall<'a>, reason: String) -> BoxFuture<'a, Decision> {
        let Some(asker) = &self.asker else {
            return DefaultPolicy.ask(call, reason);
        };
        asker(Question {
            server: call.server.to_owned(),
            tool: call.tool.clone(),
            exposed_name: call.exposed_name.to_owned(),
            arguments: call.arguments.clone(),
            reason,
        })
    }

    fn approve_sampling<'a>(&'a self, request: &'a mut SamplingRequest) -> BoxFuture<'a, Decision> {
        let rule = self
            .servers
            .get(&request.server)
            .and_then(|r| r.sampling.as_ref())
            .unwrap_or(&self.sampling);
        let decision = if rule.allow {
            rule.edit(&mut request.params);
            Decision::Allow
        } else {
            Decision::Deny {
                reason: format!(
                    "the policy denies sampling requests of server {:?}",
                    request.server
                ),
            }
        };
        Box::pin(std::future::ready(decision))
    }

    fn approve_elicitation<'a>(
        &'a self,
        request: &'a ElicitationRequest,
    ) -> BoxFuture<'a, Decision> {
        let allow = self
            .servers
            .get(&request.server)
            .and_then(|r| r.elicitation)
            .unwrap_or(self.elicitation);
        let decision = if allow {
            Decision::Allow
        } else {
            Decision::Deny {
                reason: format!(
                    "the policy denies elicitations of server {:?}",
                    request.server
                ),
            }
        };
        Box::pin(std::future::ready(decision))
    }
}

/// The [`Rules`] of a policy file (see the [module docs](self) for the format): the policy of a
/// host with no user present.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    rules: Rules,
}

/// Why a policy file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyFileError {
    /// The file could not be read.
    #[error("cannot read the policy file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not JSON, or not a policy (an unknown member, a bad value); the message
    /// names the line and column.
    #[error("{}{source}", path.as_ref().map(|p| format!("policy file {}: ", p.display())).unwrap_or_else(|| "policy: ".into()))]
    Invalid {
        /// The file, when read from one.
        path: Option<PathBuf>,
        /// What serde_json found.
        #[source]
        source: serde_json::Error,
    },
}

/// `"allow"` or `"deny"`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Permit {
    Allow,
    Deny,
}

impl Permit {
    fn allows(self) -> bool {
        matches!(self, Permit::Allow)
    }

    fn fallback(self) -> Fallback {
        match self {
            Permit::Allow => Fallback::Allow,
            Permit::Deny => Fallback::Deny,
        }
    }
}

/// The members of a policy file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRules {
    destructive: Option<Permit>,
    sampling: Option<FileSampling>,
    elicitation: Option<Permit>,
    #[serde(default)]
    servers: BTreeMap<String, Object<FileServer>>,
}

/// A server's entry of a policy file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileServer {
    #[serde(default)]
    allow: Vec<Pattern>,
    #[serde(default)]
    deny: Vec<Pattern>,
    destructive: Option<Permit>,
    sampling: Option<FileSampling>,
    elicitation: Option<Permit>,
}

/// A `T` that must be a JSON object (serde would take an array for a struct too).
#[derive(Debug)]
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Object<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(Visitor(std::marker::PhantomData))
    }
}

/// `"allow"`, `"deny"` or the edits of an allowed request.
#[derive(Debug)]
struct FileSampling(SamplingRule);

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SamplingEdits {
    max_tokens: Option<u32>,
    system_prompt_prefix: Option<String>,
}

impl<'de> Deserialize<'de> for FileSampling {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = FileSampling;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(r#""allow", "deny" or {"maxTokens": N, "systemPromptPrefix": "..."}"#)
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<FileSampling, E> {
                match text {
                    "allow" => Ok(FileSampling(SamplingRule::allow())),
                    "deny" => Ok(FileSampling(SamplingRule::deny())),
                    other => Err(E::unknown_variant(other, &["allow", "deny"])),
                }
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<FileSampling, A::Error> {
                let edits =
                    SamplingEdits::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                if edits.max_tokens == Some(0) {
                    return Err(serde::de::Error::custom("maxTokens must be at least 1"));
                }
                Ok(FileSampling(SamplingRule {
                    allow: true,
                    max_tokens: edits.max_tokens,
                    system_prompt_prefix: edits.system_prompt_prefix,
                }))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl PolicyFile {
    /// The policy of the JSON `text`.
    pub fn from_json(text: &str) -> Result<PolicyFile, PolicyFileError> {
        let Object(file): Object<FileRules> = serde_json::from_str(text)
            .map_err(|source| PolicyFileError::Invalid { path: None, source })?;
        Ok(PolicyFile {
            rules: file.into_rules(),
        })
    }

    /// The policy of the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<PolicyFile, PolicyFileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| PolicyFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        PolicyFile::from_json(&text).map_err(|e| match e {
            PolicyFileError::Invalid { source, .. } => PolicyFileError::Invalid {
                path: Some(path.to_owned()),
                source,
            },
            other => other,
        })
    }

    /// Its rules (to add an [`on_ask`](Rules::on_ask), say).
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Its rules, owned.
    pub fn into_rules(self) -> Rules {
        self.rules
    }
}

impl FileRules {
    fn into_rules(self) -> Rules {
        let mut rules =
            Rules::new().destructive(self.destructive.unwrap_or(Permit::Deny).fallback());
        if let Some(sampling) = self.sampling {
            rules = rules.sampling(sampling.0);
        }
        if let Some(elicitation) = self.elicitation {
            rules = rules.elicitation(elicitation.allows());
        }
        for (name, Object(entry)) in self.servers {
            rules.servers.insert(
                name,
                ServerRules {
                    allow: entry.allow,
                    deny: entry.deny,
                    fallback: entry.destructive.map(Permit::fallback),
                    sampling: entry.sampling.map(|s| s.0),
                    elicitation: entry.elicitation.map(Permit::allows),
                },
            );
        }
        rules
    }
}

impl Policy for PolicyFile {
    fn approve_tool_call<'a>(&'a self, call: &'a ToolCall<'a>) -> BoxFuture<'a, Decision> {
        self.rules.approve_tool_call(call)
    }

    fn ask<'a>(&'a self, call: &'a ToolCall<'a>, reason: String) -> BoxFuture<'a, Decision> {
        self.rules.ask(call, reason)
    }

    fn approve_sampling<'a>(&'a self, request: &'a mut SamplingRequest) -> BoxFuture<'a, Decision> {
        self.rules.approve_sampling(request)
    }

    fn approve_elicitation<'a>(
        &'a self,
        request: &'a ElicitationRequest,
    ) -> BoxFuture<'a, Decision> {
        self.rules.approve_elicitation(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool named `name` with these hints (`None`: no annotations at all).
    fn tool(name: &str, hints: Option<(Option<bool>, Option<bool>)>) -> model::Tool {
        model::Tool {
            meta: None,
            annotations: hints.map(|(read_only, destructive)| model::ToolAnnotations {
                destructive_hint: destructive,
                idempotent_hint: None,
                open_world_hint: None,
                read_only_hint: read_only,
                title: None,
            }),
            description: None,
            icons: None,
            input_schema: model::ToolInputSchema {
                schema: None,
                r#type: None,
                properties: None,
                required: None,
                extra: JsonObject::new(),
            },
            name: name.into(),
            output_schema: None,
            title: None,
            execution: None,
        }
    }

    const READ_ONLY: Option<(Option<bool>, Option<bool>)> = Some((Some(true), None));
    const HARMLESS: Option<(Option<bool>, Option<bool>)> = Some((None, Some(false)));
    const DESTRUCTIVE: Option<(Option<bool>, Option<bool>)> = Some((None, Some(true)));
    const UNANNOTATED: Option<(Option<bool>, Option<bool>)> = None;

    fn block_on<T>(future: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    /// `policy`'s decision on a call of `tool` of `server`.
    fn decide(policy: &dyn Policy, server: &str, tool: &model::Tool) -> Decision {
        let arguments = JsonObject::new();
        let exposed = format!("{server}__{}", tool.name);
        let call = ToolCall::new(server, tool, &exposed, &arguments);
        block_on(policy.approve_tool_call(&call))
    }

    fn allowed(decision: &Decision) -> bool {
        *decision == Decision::Allow
    }

    fn reason(decision: Decision) -> String {
        match decision {
            Decision::Deny { reason } => reason,
            other => panic!("allowed: {other:?}"),
        }
    }

    #[test]
    fn the_default_rules_allow_read_only_and_harmless_tools_only() {
        let policy = DefaultPolicy;
        assert!(allowed(&decide(&policy, "s", &tool("read", READ_ONLY))));
        assert!(allowed(&decide(&policy, "s", &tool("log", HARMLESS))));
        // readOnlyHint wins over a destructiveHint (which is meaningless then).
        let read_only_marked = tool("peek", Some((Some(true), Some(true))));
        assert!(allowed(&decide(&policy, "s", &read_only_marked)));
        let refused = reason(decide(&policy, "files", &tool("rm", DESTRUCTIVE)));
        assert!(
            refused.contains("\"rm\"") && refused.contains("\"files\""),
            "{refused}"
        );
        assert!(refused.contains("is marked destructive"), "{refused}");
        assert!(refused.contains("nobody is there to approve"), "{refused}");
        let refused = reason(decide(&policy, "files", &tool("touch", UNANNOTATED)));
        assert!(refused.contains("not annotated"), "{refused}");
        // Annotations that say neither read-only nor non-destructive: destructive by default.
        let silent = tool("write", Some((Some(false), None)));
        assert!(!allowed(&decide(&policy, "s", &silent)));
    }

    #[test]
    fn the_hints_have_the_spec_defaults() {
        let arguments = JsonObject::new();
        let bare = tool("t", UNANNOTATED);
        let call = ToolCall::new("s", &bare, "s__t", &arguments);
        assert!(!call.read_only() && call.destructive() && !call.idempotent());
        assert!(call.open_world(), "openWorldHint defaults to true");
        let mut closed = tool("t", READ_ONLY);
        if let Some(a) = closed.annotations.as_mut() {
            a.open_world_hint = Some(false);
            a.idempotent_hint = Some(true);
        }
        let call = ToolCall::new("s", &closed, "s__t", &arguments);
        assert!(call.read_only() && !call.destructive() && call.idempotent());
        assert!(!call.open_world());
        assert_eq!(call.needs_approval(), None);
    }

    /// A policy that only overrides `ask`: the default rules call it.
    struct Approver;

    impl Policy for Approver {
        fn ask<'a>(&'a self, call: &'a ToolCall<'a>, _: String) -> BoxFuture<'a, Decision> {
            let decision = if call.arguments.contains_key("confirmed") {
                Decision::Allow
            } else {
                Decision::deny("not confirmed")
            };
            Box::pin(std::future::ready(decision))
        }
    }

    #[test]
    fn the_default_rules_ask_about_destructive_tools_only() {
        let rm = tool("rm", DESTRUCTIVE);
        let mut arguments = JsonObject::new();
        let call = ToolCall::new("s", &rm, "s__rm", &arguments);
        assert_eq!(
            block_on(Approver.approve_tool_call(&call)),
            Decision::deny("not confirmed")
        );
        arguments.insert("confirmed".into(), true.into());
        let call = ToolCall::new("s", &rm, "s__rm", &arguments);
        assert_eq!(block_on(Approver.approve_tool_call(&call)), Decision::Allow);
        // A read-only tool is never asked about.
        let read = tool("read", READ_ONLY);
        let empty = JsonObject::new();
        let call = ToolCall::new("s", &read, "s__read", &empty);
        assert_eq!(block_on(Approver.approve_tool_call(&call)), Decision::Allow);
    }

    #[test]
    fn allow_lists_allow_without_asking_and_only_lists_refuse_the_rest() {
        let rules = Rules::new()
            .allow("files", ["write_file", "create_*"])
            .only("shell", ["run_tests"]);
        // Allow-listed destructive and unannotated tools go through.
        assert!(allowed(&decide(
            &rules,
            "files",
            &tool("write_file", DESTRUCTIVE)
        )));
        assert!(allowed(&decide(
            &rules,
            "files",
            &tool("create_dir", UNANNOTATED)
        )));
        // Not listed: the default rules, then nobody to ask.
        assert!(!allowed(&decide(
            &rules,
            "files",
            &tool("delete", DESTRUCTIVE)
        )));
        assert!(allowed(&decide(&rules, "files", &tool("read", READ_ONLY))));
        // The lists are per server.
        assert!(!allowed(&decide(
            &rules,
            "other",
            &tool("write_file", DESTRUCTIVE)
        )));
        // Only: the listed tool, and nothing else, read-only or not.
        assert!(allowed(&decide(
            &rules,
            "shell",
            &tool("run_tests", UNANNOTATED)
        )));
        let refused = reason(decide(&rules, "shell", &tool("ls", READ_ONLY)));
        assert!(refused.contains("pattern \"*\""), "{refused}");
    }

    #[test]
    fn the_most_specific_pattern_decides_and_a_denial_wins_a_tie() {
        let rules = Rules::new()
            .allow("s", ["*", "delete_tmp"])
            .deny("s", ["delete_*", "same"])
            .allow("s", ["same"]);
        assert!(allowed(&decide(
            &rules,
            "s",
            &tool("anything", DESTRUCTIVE)
        )));
        assert!(!allowed(&decide(
            &rules,
            "s",
            &tool("delete_all", READ_ONLY)
        )));
        assert!(allowed(&decide(
            &rules,
            "s",
            &tool("delete_tmp", DESTRUCTIVE)
        )));
        assert!(!allowed(&decide(&rules, "s", &tool("same", READ_ONLY))));
        // A `*` inside a pattern given in code is an ordinary character.
        let rules = Rules::new().allow("s", ["a*b"]);
        assert!(!allowed(&decide(&rules, "s", &tool("axb", DESTRUCTIVE))));
        assert!(allowed(&decide(&rules, "s", &tool("a*b", DESTRUCTIVE))));
    }

    #[test]
    fn the_fallback_decides_unlisted_destructive_tools_per_server() {
        let rules = Rules::new()
            .destructive(Fallback::Allow)
            .server_destructive("strict", Fallback::Deny);
        assert!(allowed(&decide(&rules, "lax", &tool("rm", DESTRUCTIVE))));
        let refused = reason(decide(&rules, "strict", &tool("rm", UNANNOTATED)));
        assert!(refused.contains("policy denies such tools"), "{refused}");
    }

    #[test]
    fn a_shared_policy_decides_as_the_policy_it_shares() {
        let shared: Arc<dyn Policy> = Arc::new(Rules::new().allow("s", ["rm"]).elicitation(false));
        assert!(allowed(&decide(&shared, "s", &tool("rm", DESTRUCTIVE))));
        assert!(!allowed(&decide(&shared, "t", &tool("rm", DESTRUCTIVE))));
        assert!(!allowed(&elicit(&shared, "s")));
        let file = Arc::new(PolicyFile::from_json(r#"{"sampling": {"maxTokens": 3}}"#).unwrap());
        assert_eq!(sample(&file, "s", params(9, None)).1.max_tokens, 3);
    }

    #[test]
    fn rules_ask_a_person_with_the_call_and_the_reason() {
        let rules = Rules::new().on_ask(|question: Question| async move {
            assert_eq!(question.server, "s");
            assert_eq!(question.exposed_name, "s__rm");
            assert!(question.reason.contains("\"rm\""), "{}", question.reason);
            if question.tool.name == "rm" {
                Decision::Allow
            } else {
                Decision::deny("the user said no")
            }
        });
        assert!(allowed(&decide(&rules, "s", &tool("rm", DESTRUCTIVE))));
        assert!(allowed(&decide(&rules, "s", &tool("read", READ_ONLY))));
    }

    fn params(max_tokens: i64, system_prompt: Option<&str>) -> model::CreateMessageRequestParams {
        model::CreateMessageRequestParams {
            include_context: None,
            max_tokens,
            messages: Vec::new(),
            metadata: None,
            model_preferences: None,
            stop_sequences: None,
            system_prompt: system_prompt.map(str::to_owned),
            temperature: None,
            tool_choice: None,
            tools: None,
            meta: None,
            task: None,
        }
    }

    fn sample(
        policy: &dyn Policy,
        server: &str,
        params: model::CreateMessageRequestParams,
    ) -> (Decision, model::CreateMessageRequestParams) {
        let mut request = SamplingRequest::new(server, params);
        let decision = block_on(policy.approve_sampling(&mut request));
        (decision, request.params)
    }

    #[test]
    fn sampling_rules_cap_max_tokens_and_prefix_the_system_prompt() {
        let rules = Rules::new()
            .sampling(
                SamplingRule::allow()
                    .max_tokens(100)
                    .system_prompt_prefix("Be brief."),
            )
            .server_sampling("quiet", SamplingRule::deny());
        let (decision, edited) = sample(&rules, "s", params(500, Some("You are a poet.")));
        assert_eq!(decision, Decision::Allow);
        assert_eq!(edited.max_tokens, 100);
        assert_eq!(
            edited.system_prompt.as_deref(),
            Some("Be brief.\n\nYou are a poet.")
        );
        let (_, edited) = sample(&rules, "s", params(50, None));
        assert_eq!(edited.max_tokens, 50, "a smaller request is left alone");
        assert_eq!(edited.system_prompt.as_deref(), Some("Be brief."));
        let (decision, _) = sample(&rules, "quiet", params(50, None));
        assert!(reason(decision).contains("sampling requests of server \"quiet\""));
        // The defaults: allowed, unchanged.
        let (decision, edited) = sample(&DefaultPolicy, "s", params(500, Some("p")));
        assert_eq!(
            (decision, edited),
            (Decision::Allow, params(500, Some("p")))
        );
    }

    fn elicit(policy: &dyn Policy, server: &str) -> Decision {
        let request = ElicitationRequest::new(
            server,
            Elicitation::Form {
                message: "Name?".into(),
                schema: JsonObject::new(),
            },
        );
        block_on(policy.approve_elicitation(&request))
    }

    #[test]
    fn elicitation_rules_per_server() {
        let rules = Rules::new()
            .elicitation(false)
            .server_elicitation("form", true);
        assert!(reason(elicit(&rules, "s")).contains("elicitations of server \"s\""));
        assert_eq!(elicit(&rules, "form"), Decision::Allow);
        assert_eq!(elicit(&Rules::new(), "s"), Decision::Allow);
    }

    #[test]
    fn a_policy_file_sets_every_rule() {
        let file = PolicyFile::from_json(
            r#"{
                "destructive": "deny",
                "sampling": {"maxTokens": 10, "systemPromptPrefix": "P"},
                "elicitation": "deny",
                "servers": {
                    "files": {"allow": ["read_*", "list"], "deny": ["*"]},
                    "github": {"deny": ["delete_*"], "destructive": "allow",
                               "sampling": "deny", "elicitation": "allow"}
                }
            }"#,
        )
        .unwrap();
        assert!(allowed(&decide(
            &file,
            "files",
            &tool("read_file", DESTRUCTIVE)
        )));
        assert!(allowed(&decide(&file, "files", &tool("list", UNANNOTATED))));
        assert!(!allowed(&decide(&file, "files", &tool("stat", READ_ONLY))));
        assert!(allowed(&decide(
            &file,
            "github",
            &tool("create_issue", DESTRUCTIVE)
        )));
        assert!(!allowed(&decide(
            &file,
            "github",
            &tool("delete_repo", READ_ONLY)
        )));
        let refused = reason(decide(&file, "other", &tool("rm", DESTRUCTIVE)));
        assert!(refused.contains("policy denies such tools"), "{refused}");
        assert!(allowed(&decide(&file, "other", &tool("get", READ_ONLY))));
        let (decision, edited) = sample(&file, "other", params(500, None));
        assert_eq!(decision, Decision::Allow);
        assert_eq!(
            (edited.max_tokens, edited.system_prompt.as_deref()),
            (10, Some("P"))
        );
        assert!(!allowed(&sample(&file, "github", params(5, None)).0));
        assert!(!allowed(&elicit(&file, "other")));
        assert!(allowed(&elicit(&file, "github")));
    }

    #[test]
    fn an_empty_policy_file_denies_destructive_tools_and_allows_input() {
        let file = PolicyFile::from_json("{}").unwrap();
        assert!(!allowed(&decide(&file, "s", &tool("rm", DESTRUCTIVE))));
        assert!(allowed(&decide(&file, "s", &tool("read", READ_ONLY))));
        assert!(allowed(&sample(&file, "s", params(5, None)).0));
        assert!(allowed(&elicit(&file, "s")));
        let file =
            PolicyFile::from_json(r#"{"destructive": "allow", "sampling": "deny"}"#).unwrap();
        assert!(allowed(&decide(&file, "s", &tool("rm", UNANNOTATED))));
        assert!(!allowed(&sample(&file, "s", params(5, None)).0));
    }

    #[test]
    fn a_bad_policy_file_is_an_error_with_its_line() {
        let cases = [
            (
                "{\n\"destructive\": \"maybe\"}",
                "unknown variant `maybe`",
                2,
            ),
            (
                "{\n\"servers\": {\"s\": {\n\"alow\": []}}}",
                "unknown field `alow`",
                3,
            ),
            (
                "{\"servers\": {\"s\": {\"allow\": [\n\"a*b\"]}}}",
                "`*` may only be its last",
                2,
            ),
            (
                "{\"servers\": {\"s\": {\"allow\": [\"\"]}}}",
                "empty tool name pattern",
                1,
            ),
            ("{\n\n\"sampling\": {\"maxTokens\": 0}}", "at least 1", 3),
            (
                "{\"sampling\": {\"maxTokens\": 5, \"prefix\": \"x\"}}",
                "unknown field `prefix`",
                1,
            ),
            (
                "{\"sampling\": \"sometimes\"}",
                "unknown variant `sometimes`",
                1,
            ),
            ("{\"sampling\": 3}", "\"allow\", \"deny\" or", 1),
            ("[]", "invalid type: sequence, expected a JSON object", 1),
            (
                "{\"servers\": {\"s\": [\"rm\"]}}",
                "expected a JSON object",
                1,
            ),
            ("{\"elicitation\": \"deny\",}", "trailing comma", 1),
        ];
        for (text, expected, line) in cases {
            let error = PolicyFile::from_json(text).unwrap_err();
            let message = error.to_string();
            assert!(message.contains(expected), "{text}: {message}");
            assert!(
                message.contains(&format!("line {line}")),
                "{text}: {message}"
            );
            assert!(message.starts_with("policy: "), "{message}");
            let PolicyFileError::Invalid { source, .. } = &error else {
                panic!("{error:?}");
            };
            assert_eq!(source.line(), line, "{text}");
        }
    }

    #[test]
    fn loading_a_policy_file_names_it_in_its_errors() {
        let dir = std::env::temp_dir().join(format!("modelctx-host-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.json");
        std::fs::write(&good, r#"{"servers": {"s": {"allow": ["rm"]}}}"#).unwrap();
        let file = PolicyFile::load(&good).unwrap();
        assert!(allowed(&decide(&file, "s", &tool("rm", DESTRUCTIVE))));
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"destructive\": 1}").unwrap();
        let message = PolicyFile::load(&bad).unwrap_err().to_string();
        assert!(
            message.starts_with(&format!("policy file {}: ", bad.display())),
            "{message}"
        );
        let missing = dir.join("missing.json");
        let error = PolicyFile::load(&missing).unwrap_err();
        assert!(matches!(&error, PolicyFileError::Read { path, .. } if *path == missing));
        assert!(
            error.to_string().contains("cannot read the policy file"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
