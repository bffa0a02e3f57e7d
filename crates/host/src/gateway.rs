//! The aggregate served as one MCP server: a gateway.
//!
//! A [`Gateway`] turns a [`Host`] into a [`modelctx_server::Server`] whose tools, prompts,
//! resources and resource templates are the host's aggregate, served in every protocol era and
//! over every transport the server has (stdio, Streamable HTTP). `mcx host` is this gateway.
//!
//! ```no_run
//! use modelctx_host::gateway::Gateway;
//! use modelctx_host::{Host, HostConfig};
//!
//! # async fn run(config: HostConfig) -> std::io::Result<()> {
//! let gateway = Gateway::builder("my-gateway", "1.0.0").instructions("Tools of every server");
//! // Sampling and elicitation of the servers go to the client of the gateway (see below).
//! let host = gateway.route_input(Host::builder(config)).start().await;
//! let gateway = gateway.build(host.clone());
//! let served = gateway.server().clone().serve_stdio().await;
//! host.shutdown().await;
//! served
//! # }
//! ```
//!
//! # What it forwards
//!
//! * **Tools**: each tool of the aggregate under its shown (namespaced) name, with its input
//!   schema, description, title, annotations, output schema and icons. A call goes to
//!   [`Host::call_tool`] (the host's [`Policy`](crate::Policy) decides first) and the server's
//!   `CallToolResult` is sent back as it came: content, `structuredContent`, `isError`,
//!   `_meta`. A refusal of the policy, or a failure to reach the server, is a failed call
//!   (`isError`) whose text says why.
//! * **Prompts** (name, description, title, arguments), **resources** and **resource
//!   templates** (URI, name, description, MIME type): `prompts/get` goes to
//!   [`Host::get_prompt`], `resources/read` to [`Host::read_resource`].
//! * **Changes**: the gateway follows [`Host::changes`]; an item that appears, changes or goes
//!   away is added to or removed from the server, whose clients get `list_changed`. A
//!   resource update of a server is sent to the gateway's subscribers
//!   (`notifications/resources/updated`); a client's subscription to a URI subscribes the host
//!   to it on its server.
//! * **Progress** of a call (when the client asked for it), **cancellation** (the client's
//!   cancellation drops the host's call, which cancels it on the server), and the server's
//!   **log messages** during a call (sent about that call, at the level the client asked for;
//!   the gateway asks each server for every level).
//! * **Completions** of prompt arguments and template variables, asked of the server that owns
//!   the prompt or template.
//! * **Sampling, elicitation and roots** a server asks for while a gateway call is in progress on
//!   it are asked of the gateway's client through that call ([`GatewayBuilder::route_input`]
//!   installs the handlers on the host): in the modern era (2026-07-28) the call is answered
//!   `input_required`, each question under the key the server gave it in its `inputRequests`
//!   ([`modelctx_client::input_key`]; a legacy server's request has none, and the gateway's own
//!   key is used), and when the client retries with the answers the call is made again on the
//!   server, which gets them at once. A request the gateway's client cannot answer for
//!   lack of a capability fails the gateway's call as the server's own would for that client
//!   (`InputError::NotSupported`: -32021 in the modern era). The questions a modern server asks
//!   at once (one `input_required` round) reach the gateway's client in one round too
//!   ([`modelctx_client::input_round`], [`Context::hold_input`]).
//! * **Tasks**: a tool of a server that runs tools as tasks is a tool the gateway runs as a task
//!   too, with the server's task support: as it lists it (`execution.taskSupport`, a 2025-11-25
//!   server declaring `tasks.requests.tools.call`), or optional for every tool of a server that
//!   declares the `io.modelcontextprotocol/tasks` extension (2026-07-28 lists no task support: the
//!   server decides per call). The gateway's tool starts as a plain call
//!   ([`Tool::task_on_detach`]). When its client runs the call as a task (a 2026-07-28 request
//!   declaring the extension, or a 2025-11-25 task-augmented call), the server is called as a
//!   task ([`Host::call_tool_as_task`], the policy first): questions it asks before its task
//!   exists are round trips of the gateway's call, as above; when its task exists the gateway's
//!   call becomes a task ([`Context::detach`]) and follows it to its end: the server task's
//!   status message (its progress) becomes the gateway task's, its questions
//!   (`input_required`) are asked through the gateway's task under their keys and answered
//!   back, `tasks/cancel` of the gateway's task (or its expiry, or the client's cancellation, or
//!   the [`Gateway`] dropped) cancels the server's, and its outcome is the gateway task's: a
//!   completed result as it came (`isError` included), a failed task fails the gateway's with the
//!   server's error (a task the server cancelled fails it with an error saying so). A server's
//!   answer at once (no task) is the gateway's plain answer. A client that does not run the call
//!   as a task gets a plain call; a tool its server runs only as a task is then refused with
//!   -32021 (by the gateway itself when the server listed it `required`, else the server's
//!   -32021 naming the extension, passed on as it came).
//! * **Skills** (the `io.modelcontextprotocol/skills` extension): when a server declares it as
//!   the gateway is built, the gateway declares it too (with `directoryRead`) and answers
//!   `skills/list`, `skills/get` and `resources/directory/read` by asking the servers that
//!   declare it, each time a client asks ([`modelctx_server::SkillsSource`]): the list is
//!   every such server's, in config order, the first server keeping a skill URI two serve (at
//!   most [`MAX_SKILLS`] in all; a server whose listing fails is left out of it); a get or a
//!   directory read goes to each server in turn, the first that has the URI answering, and a
//!   URI no server has is refused -32602 (another failure of a server is passed on). Entries
//!   and directory pages are passed on as the server gave them (URIs, digests, cursors), and a
//!   skill's files are read as the server's resources (`resources/read` above), so that a
//!   client verifies them against the server's own digests.
//!
//! # The rule for sampling, elicitation and roots, and its limit
//!
//! A server's request to its client carries no link to the call that caused it. The gateway keeps
//! a table of the calls in progress per server (tool calls, prompt gets and resource reads,
//! each entry removed when its call ends, at most [`MAX_CALLS_PER_SERVER`] per server: beyond,
//! the oldest is forgotten) and asks through the **newest** call in progress on the asking
//! server. With several calls in progress on one server at once, a question raised by an older
//! one goes to the client of the newest (over HTTP, possibly another session). With none in
//! progress, the request is refused (the server gets an error), except `roots/list`, answered
//! with the host's roots for that server when it has some. Log messages follow the same rule.
//! A call followed as a task is in progress until its task ends: the questions of a server's
//! task follow the same rule.
//!
//! # What it does not do
//!
//! It is a server in its own right, not a relay: the protocol version, session, ids and task
//! ids its clients see are its own (a gateway task follows one server task; the gateway's tasks
//! are kept in its own store, with its own time to live and poll interval). It does not forward
//! its clients' `roots/list_changed` (a server lists roots again when it asks during a
//! call), its clients' capabilities to a legacy server (whose session has the host's, the same
//! for every client of the gateway; a modern server gets, on each call, prompt get and read,
//! those of the client that made it, narrowed to the host's), or members
//! of definitions its server builder cannot set (`_meta` and `size` of resources, icons of
//! prompts and resources; `execution` is the gateway's own, see Tasks); a server's protocol
//! error on a call becomes a failed call (`isError`), and on a prompt get or a read the
//! JSON-RPC error -32603, except -32021 (a client capability the request needs), which the
//! gateway answers with as the server sent it, `data` and message included, on a call (plain
//! or as a task), a prompt get and a read (a legacy client, whose era has no -32021, gets a
//! call's as a failed call and a prompt's or a read's as -32603, each with the server's
//! message, as from any modelctx server). Of tasks, it does not
//! pass on tasks for anything but tool calls (a server's task-augmented sampling or
//! elicitation requests to the host), a server's progress and log messages before its task
//! exists, nor the task support of a server that comes or changes after the tool was listed
//! (the gateway declares the tasks extension when it is built with a tool that may run as a
//! task, and only then). Completions are limited to
//! the candidates (`total` and `hasMore` are the gateway's count). It never unsubscribes a
//! server from a resource a client subscribed to. Of skills, it does not declare the extension
//! when no server declared it as the gateway was built (a server that comes later with skills
//! is asked only when one did), does not keep a table of which server owns a skill (each get
//! or directory read asks the servers in turn), does not read a skill's file that its server
//! does not list as a resource, and does not ask the [`Policy`](crate::Policy) about skills.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use modelctx_client::{
    CallOptions, CompletionRef, Elicitation, Elicited, InputError, TaskError, TaskHandle,
    TaskOptions, model,
};
use modelctx_server::tasks::{DetachError, EXTENSION_ID, TaskSupport};
use modelctx_server::{
    Content, Context, Era, ErrorCode, ErrorObject, IntoPromptResult, LogLevel, Prompt,
    PromptMessage, ReadRequest, Resource, ResourceContents, ResourceError, ResourceTemplate,
    Server, ServerBuilder, Tool, ToolOutput,
};
use modelctx_types::JsonObject;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;

use crate::catalog::{HostPrompt, HostResource, HostTemplate, HostTool};
use crate::host::{Host, HostBuilder, HostError, HostEvent};

/// The most calls in progress the gateway remembers per server, to route that server's
/// sampling, elicitation and log messages (the oldest is forgotten beyond).
pub const MAX_CALLS_PER_SERVER: usize = 64;

/// The most skills the gateway lists, of all its servers together (those beyond are left out
/// of `skills/list`; `skills/get` still finds them).
pub const MAX_SKILLS: usize = 4096;

/// The most URIs the gateway subscribes the host to (a client's subscription beyond is still
/// acknowledged by the gateway; its server is not subscribed).
pub const MAX_SUBSCRIPTIONS: usize = 4096;

/// Builds a [`Gateway`].
#[must_use]
#[derive(Debug)]
pub struct GatewayBuilder {
    name: String,
    version: String,
    instructions: Option<String>,
    calls: Arc<Calls>,
}

impl GatewayBuilder {
    /// The instructions the gateway gives its clients (default: none).
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// `builder` with its sampling, elicitation and roots handlers answering through the
    /// gateway's client: a server's request goes to the newest gateway call in progress on that
    /// server (see the module docs). Replaces handlers given to `builder` before; the host's
    /// [`Policy`](crate::Policy) still decides first on sampling and elicitation; roots without
    /// a call in progress are the host's ([`HostBuilder::roots`], [`HostBuilder::server_roots`]).
    pub fn route_input(&self, builder: HostBuilder) -> HostBuilder {
        let calls = self.calls.clone();
        let builder = builder.on_sampling(move |server, params| {
            let call = calls.newest(&server);
            // The server's name for its question, asked under the same one.
            let key = modelctx_client::input_key();
            async move {
                let call = call.ok_or_else(|| no_call(&server))?;
                let answer = match key {
                    Some(key) => call.ask(call.context.keyed(key).sample(params)).await,
                    None => call.context.sample(params).await,
                };
                answer.map_err(|e| call.refused(e))
            }
        });
        let calls = self.calls.clone();
        let builder = builder.on_roots(move |server, roots| {
            let call = calls.newest(&server);
            let key = modelctx_client::input_key();
            async move {
                // Without a call in progress, the host's own roots for that server.
                let Some(call) = call else {
                    return roots.ok_or_else(|| no_call(&server));
                };
                let answer = match key {
                    Some(key) => call.ask(call.context.keyed(key).list_roots()).await,
                    None => call.context.list_roots().await,
                };
                answer
                    .map(|listed| listed.roots)
                    .map_err(|e| call.refused(e))
            }
        });
        let calls = self.calls.clone();
        builder.on_elicitation(move |server, elicitation| {
            let call = calls.newest(&server);
            let key = modelctx_client::input_key();
            async move {
                let call = call.ok_or_else(|| no_call(&server))?;
                let context = &call.context;
                let answer = match elicitation {
                    Elicitation::Form { message, schema } => match key {
                        Some(key) => {
                            let question =
                                context.keyed(key).elicit(&message, Value::Object(schema));
                            call.ask(question).await
                        }
                        None => context.elicit(&message, Value::Object(schema)).await,
                    },
                    Elicitation::Url {
                        message,
                        url,
                        elicitation_id,
                    } => {
                        let id = elicitation_id.unwrap_or_default();
                        match key {
                            Some(key) => {
                                call.ask(context.keyed(key).elicit_url(&message, &url, &id))
                                    .await
                            }
                            None => context.elicit_url(&message, &url, &id).await,
                        }
                    }
                    other => {
                        return Err(InputError::new(format!(
                            "the gateway cannot pass on this elicitation: {other:?}"
                        )));
                    }
                };
                let answer = answer.map_err(|e| call.refused(e))?;
                Ok(elicited(answer))
            }
        })
    }

    /// The gateway of `host`: a server of the host's aggregate as it is now, kept in step with
    /// it by a task that runs until the [`Gateway`] is dropped.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (the task is spawned on the current one).
    pub fn build(self, host: Host) -> Gateway {
        let inner = Arc::new(Inner {
            host: host.clone(),
            calls: self.calls,
            shown: Mutex::new(Shown::default()),
            subscribed: Mutex::new(HashSet::new()),
            server: std::sync::OnceLock::new(),
            stopped: tokio::sync::watch::Sender::new(false),
        });
        let mut builder = Server::builder(self.name, self.version)
            .declare_tools()
            .declare_prompts()
            .declare_resources();
        // Skills are passed on when a server serves some as the gateway is built.
        if !inner.skill_servers().is_empty() {
            builder = builder.skills_source(Skills(Arc::downgrade(&inner)));
        }
        if let Some(text) = self.instructions {
            builder = builder.instructions(text);
        }
        let subscriber = Arc::downgrade(&inner);
        builder = builder.on_subscribe(move |subscribe| {
            if let Some(inner) = subscriber.upgrade() {
                inner.subscribe(subscribe.uri);
            }
            true
        });
        // Listened to before the lists are read: nothing that changes in between is missed.
        let changes = host.changes();
        let builder = inner.initial(builder);
        let server = builder.build();
        let _ = inner.server.set(server.clone());
        let sync = tokio::spawn(follow(Arc::downgrade(&inner), changes));
        // Every level of every server (now and later): each client of the gateway gets those of
        // the level it asked for.
        let every = host.clone();
        tokio::spawn(async move {
            if let Err(e) = every.set_log_level(LogLevel::Debug).await {
                tracing::debug!(error = %e, "gateway: a server sends no log messages");
            }
        });
        Gateway {
            server,
            inner,
            sync,
        }
    }
}

/// `options` declaring, to a modern server, the capabilities of the gateway's client that
/// made the request `context` serves (narrowed to the host's own), so that the server asks that
/// request only for input the client can give. The gateway's client declares them per request
/// in the modern era, per session in the legacy one; a legacy server's session has the host's.
fn as_caller(context: &Context, options: CallOptions) -> CallOptions {
    match context.client_capabilities() {
        Some(caps) => options.client_capabilities(caps.clone()),
        None => options,
    }
}

/// The refusal of a server's request when no gateway call is in progress on it.
fn no_call(server: &str) -> InputError {
    InputError::new(format!(
        "no gateway call is in progress on server {server:?}: its request cannot be passed to the gateway's client"
    ))
}

/// A gateway call in progress: what a server's request is asked through.
#[derive(Clone)]
struct Call {
    /// The gateway's request.
    context: Context,
    /// The client capability a server's request needed and the gateway's client lacks: the
    /// call then fails as a request of the client's would (-32021 in the modern era).
    missing: Arc<Mutex<Option<String>>>,
    /// The server's round of questions being asked through this call (modern servers).
    round: Arc<Mutex<Option<Round>>>,
}

/// The questions of a modern server's round not yet asked of the gateway's client, and the
/// hold that keeps them together ([`Context::hold_input`]).
struct Round {
    id: u64,
    remaining: usize,
    _hold: modelctx_server::InputHold,
}

/// One question of a [`Round`] on its way: when dropped, it has been asked (or will not be).
struct InRound {
    round: Arc<Mutex<Option<Round>>>,
    id: u64,
}

impl Drop for InRound {
    fn drop(&mut self) {
        let mut round = self.round.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = round.as_mut().filter(|r| r.id == self.id) {
            current.remaining = current.remaining.saturating_sub(1);
            if current.remaining == 0 {
                // The last of the round is asked: the hold goes, and the round with it.
                *round = None;
            }
        }
    }
}

impl Call {
    fn new(context: Context) -> Call {
        Call {
            context,
            missing: Arc::default(),
            round: Arc::default(),
        }
    }

    /// Asks `question` (one of the call's context) for the server's question being answered.
    /// A modern server asks a round of questions at once, which the host's client answers each
    /// in a task of its own ([`modelctx_client::input_round`]): they are held together, so that
    /// the gateway's client gets them in one round too, not the first alone.
    async fn ask<T>(&self, question: impl std::future::Future<Output = T>) -> T {
        let Some(round) = modelctx_client::input_round() else {
            return question.await;
        };
        let ticket = self.join(&round);
        let mut question = std::pin::pin!(question);
        // Its first poll records the question (or answers it): this one of the round is in.
        let first =
            std::future::poll_fn(|cx| std::task::Poll::Ready(question.as_mut().poll(cx))).await;
        drop(ticket);
        match first {
            std::task::Poll::Ready(answer) => answer,
            std::task::Poll::Pending => question.await,
        }
    }

    /// Counts a question of `round` in, holding the call's questions from the first of it on.
    fn join(&self, round: &modelctx_client::InputRound) -> InRound {
        let mut current = self.round.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_none_or(|r| r.id != round.id()) {
            *current = Some(Round {
                id: round.id(),
                remaining: round.len(),
                _hold: self.context.hold_input(),
            });
        }
        InRound {
            round: self.round.clone(),
            id: round.id(),
        }
    }

    /// The refusal the server gets when the gateway's client cannot answer: `error`'s text;
    /// a missing capability is remembered for the call's own answer.
    fn refused(&self, error: modelctx_server::InputError) -> InputError {
        if let modelctx_server::InputError::NotSupported(capability) = &error {
            *self.missing.lock().unwrap_or_else(PoisonError::into_inner) = Some(capability.clone());
        }
        InputError::new(error.to_string())
    }

    fn missing(&self) -> Option<String> {
        self.missing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The client's elicitation answer as the host's handler gives it.
fn elicited(answer: model::ElicitResult) -> Elicited {
    match answer.action {
        model::ElicitResultAction::Accept => match answer.content {
            Some(Value::Object(content)) => Elicited::accept(content),
            _ => Elicited::accepted(),
        },
        model::ElicitResultAction::Decline => Elicited::decline(),
        // Cancel, and an action of a later version: the user did not answer.
        _ => Elicited::cancel(),
    }
}

/// The host's aggregate served as one MCP server (see the module docs). Dropping it stops
/// following the host (the server keeps what it has).
#[derive(Debug)]
pub struct Gateway {
    server: Server,
    inner: Arc<Inner>,
    sync: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// A builder of a gateway that tells its clients it is `name` `version`.
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> GatewayBuilder {
        GatewayBuilder {
            name: name.into(),
            version: version.into(),
            instructions: None,
            calls: Arc::new(Calls::default()),
        }
    }

    /// The server: serve it (`serve_stdio`, `serve_http`, ...).
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The host behind it.
    pub fn host(&self) -> &Host {
        &self.inner.host
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.sync.abort();
        // The calls that follow a server's task end, and cancel it.
        self.inner.stopped.send_replace(true);
    }
}

/// What the gateway's handlers and its following task share.
struct Inner {
    host: Host,
    calls: Arc<Calls>,
    /// What the server shows now, as the host listed it.
    shown: Mutex<Shown>,
    /// The URIs the host was subscribed to for the gateway's clients.
    subscribed: Mutex<HashSet<String>>,
    server: std::sync::OnceLock<Server>,
    /// Set when the [`Gateway`] is dropped: the calls that follow a server's task stop.
    stopped: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").finish_non_exhaustive()
    }
}

/// The items the server shows, by the key it shows them under.
#[derive(Debug, Default)]
struct Shown {
    tools: BTreeMap<String, HostTool>,
    prompts: BTreeMap<String, HostPrompt>,
    resources: BTreeMap<String, HostResource>,
    templates: BTreeMap<String, HostTemplate>,
}

/// What changes to make so that `shown` becomes `now`: the items to add (new or changed) and
/// the keys to remove.
fn diff<T: PartialEq + Clone>(
    shown: &BTreeMap<String, T>,
    now: &BTreeMap<String, T>,
) -> (Vec<T>, Vec<String>) {
    let added = now
        .iter()
        .filter(|(key, item)| shown.get(*key) != Some(item))
        .map(|(_, item)| item.clone())
        .collect();
    let removed = shown
        .keys()
        .filter(|key| !now.contains_key(*key))
        .cloned()
        .collect();
    (added, removed)
}

fn by_key<T>(items: Vec<T>, key: impl Fn(&T) -> String) -> BTreeMap<String, T> {
    items.into_iter().map(|item| (key(&item), item)).collect()
}

/// The skills of the gateway's servers, asked of them each time a client asks (see the module
/// docs).
struct Skills(std::sync::Weak<Inner>);

/// The answer when the [`Gateway`] is gone.
fn stopped() -> ErrorObject {
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, "the gateway has stopped")
}

/// A server's failure to answer a skills request, as the gateway's error: the server's own
/// JSON-RPC error as it came, else an internal error saying why.
fn skills_error(server: &str, error: modelctx_client::Error) -> ErrorObject {
    match error {
        modelctx_client::Error::Remote(error) => error,
        other => ErrorObject::new(
            ErrorCode::INTERNAL_ERROR,
            format!("server {server:?}: {other}"),
        ),
    }
}

/// Whether `error` is a server's "not one of mine" (-32602, or -32002 for a resource).
fn not_mine(error: &modelctx_client::Error) -> bool {
    matches!(error, modelctx_client::Error::Remote(e)
        if e.code == ErrorCode::INVALID_PARAMS || e.code == RESOURCE_NOT_FOUND)
}

impl modelctx_server::SkillsSource for Skills {
    fn list(
        &self,
        _context: Context,
    ) -> modelctx_server::SkillsFuture<Vec<modelctx_types::skills::Skill>> {
        let inner = self.0.upgrade();
        Box::pin(async move {
            let inner = inner.ok_or_else(stopped)?;
            let mut all = Vec::new();
            let mut seen = HashSet::new();
            for (server, client) in inner.skill_servers() {
                match client.list_skills().await {
                    Ok(skills) => {
                        // The first server in config order keeps a URI.
                        for skill in skills {
                            if all.len() >= MAX_SKILLS {
                                tracing::warn!(
                                    max = MAX_SKILLS,
                                    "gateway: skills left out of the list"
                                );
                                return Ok(all);
                            }
                            if seen.insert(skill.uri.clone()) {
                                all.push(skill);
                            }
                        }
                    }
                    // A listing may be partial: the other servers' skills are still listed.
                    Err(e) => tracing::warn!(server, error = %e, "gateway: skills not listed"),
                }
            }
            Ok(all)
        })
    }

    fn get(
        &self,
        _context: Context,
        uri: String,
    ) -> modelctx_server::SkillsFuture<Option<modelctx_types::skills::Skill>> {
        let inner = self.0.upgrade();
        Box::pin(async move {
            let inner = inner.ok_or_else(stopped)?;
            let mut failed = None;
            for (server, client) in inner.skill_servers() {
                match client.get_skill(&uri).await {
                    Ok(skill) => return Ok(Some(skill)),
                    Err(e) if not_mine(&e) => {}
                    Err(e) => {
                        failed.get_or_insert_with(|| skills_error(&server, e));
                    }
                }
            }
            // No server has it: a server that could not answer may have.
            failed.map_or(Ok(None), Err)
        })
    }

    fn read_directory(
        &self,
        _context: Context,
        uri: String,
        cursor: Option<String>,
    ) -> modelctx_server::SkillsFuture<modelctx_types::skills::ReadResourceDirectoryResult> {
        let inner = self.0.upgrade();
        Box::pin(async move {
            let inner = inner.ok_or_else(stopped)?;
            let mut failed = None;
            for (server, client) in inner.skill_servers() {
                match client.read_directory(&uri, cursor.as_deref()).await {
                    Ok(page) => return Ok(page),
                    Err(e) if not_mine(&e) => {
                        failed.get_or_insert_with(|| skills_error(&server, e));
                    }
                    Err(e) => failed = Some(skills_error(&server, e)),
                }
            }
            Err(failed.unwrap_or_else(|| {
                ErrorObject::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("no directory resource at {uri}"),
                )
            }))
        })
    }
}

impl Inner {
    /// The connected servers that declare the skills extension, in config order, with their
    /// clients.
    fn skill_servers(&self) -> Vec<(String, modelctx_client::Client)> {
        self.host
            .servers()
            .into_iter()
            .filter_map(|status| {
                let client = self.host.client(&status.name)?;
                let declared = client.server_capabilities_json().is_some_and(|caps| {
                    caps.get("extensions")
                        .and_then(|e| e.get(modelctx_types::skills::EXTENSION_ID))
                        .is_some_and(|v| !v.is_null() && v.as_bool() != Some(false))
                });
                declared.then_some((status.name, client))
            })
            .collect()
    }

    /// `builder` with the host's aggregate as it is now.
    fn initial(self: &Arc<Self>, mut builder: ServerBuilder) -> ServerBuilder {
        let mut shown = self.shown.lock().unwrap_or_else(PoisonError::into_inner);
        for tool in self.host.tools() {
            if let Some(made) = self.tool(&tool) {
                builder = builder.tool(made);
                shown.tools.insert(tool.name.clone(), tool);
            }
        }
        for prompt in self.host.prompts() {
            builder = builder.prompt(self.prompt(&prompt));
            shown.prompts.insert(prompt.name.clone(), prompt);
        }
        for resource in self.host.resources() {
            builder = builder.resource(self.resource(&resource));
            shown
                .resources
                .insert(resource.resource.uri.clone(), resource);
        }
        for template in self.host.resource_templates() {
            if let Some(made) = self.template(&template) {
                builder = builder.resource_template(made);
                shown
                    .templates
                    .insert(template.template.uri_template.clone(), template);
            }
        }
        builder
    }

    /// Brings the server's tools in step with the host's.
    fn sync_tools(self: &Arc<Self>, server: &Server) {
        let now = by_key(self.host.tools(), |t| t.name.clone());
        let mut shown = self.shown.lock().unwrap_or_else(PoisonError::into_inner);
        let (added, removed) = diff(&shown.tools, &now);
        for name in removed {
            server.remove_tool(&name);
            shown.tools.remove(&name);
        }
        for tool in added {
            let registered = self.tool(&tool).map(|made| server.add_tool(made));
            match registered {
                Some(Ok(())) => {
                    shown.tools.insert(tool.name.clone(), tool);
                }
                Some(Err(e)) => {
                    tracing::warn!(tool = %tool.name, error = %e, "gateway: tool not served");
                    server.remove_tool(&tool.name);
                    shown.tools.remove(&tool.name);
                }
                None => {
                    server.remove_tool(&tool.name);
                    shown.tools.remove(&tool.name);
                }
            }
        }
    }

    fn sync_prompts(self: &Arc<Self>, server: &Server) {
        let now = by_key(self.host.prompts(), |p| p.name.clone());
        let mut shown = self.shown.lock().unwrap_or_else(PoisonError::into_inner);
        let (added, removed) = diff(&shown.prompts, &now);
        for name in removed {
            server.remove_prompt(&name);
            shown.prompts.remove(&name);
        }
        for prompt in added {
            match server.add_prompt(self.prompt(&prompt)) {
                Ok(()) => {
                    shown.prompts.insert(prompt.name.clone(), prompt);
                }
                Err(e) => {
                    tracing::warn!(prompt = %prompt.name, error = %e, "gateway: prompt not served");
                }
            }
        }
    }

    fn sync_resources(self: &Arc<Self>, server: &Server) {
        let now = by_key(self.host.resources(), |r| r.resource.uri.clone());
        let mut shown = self.shown.lock().unwrap_or_else(PoisonError::into_inner);
        let (added, removed) = diff(&shown.resources, &now);
        for uri in removed {
            server.remove_resource(&uri);
            shown.resources.remove(&uri);
        }
        for resource in added {
            match server.add_resource(self.resource(&resource)) {
                Ok(()) => {
                    shown
                        .resources
                        .insert(resource.resource.uri.clone(), resource);
                }
                Err(e) => {
                    tracing::warn!(uri = %resource.resource.uri, error = %e, "gateway: resource not served");
                }
            }
        }
        let now = by_key(self.host.resource_templates(), |t| {
            t.template.uri_template.clone()
        });
        let (added, removed) = diff(&shown.templates, &now);
        for text in removed {
            server.remove_resource_template(&text);
            shown.templates.remove(&text);
        }
        for template in added {
            let text = template.template.uri_template.clone();
            match self
                .template(&template)
                .map(|t| server.add_resource_template(t))
            {
                Some(Ok(())) => {
                    shown.templates.insert(text, template);
                }
                Some(Err(e)) => {
                    tracing::warn!(template = %text, error = %e, "gateway: template not served");
                }
                None => {}
            }
        }
    }

    /// The gateway's tool of `tool`; `None` (logged) when its schemas cannot be served.
    fn tool(self: &Arc<Self>, tool: &HostTool) -> Option<Tool> {
        let inner = Arc::downgrade(self);
        let shown = tool.name.clone();
        let server = tool.server.clone();
        let capabilities = self
            .host
            .client(&tool.server)
            .and_then(|client| client.server_capabilities_json());
        let support = task_support(&tool.tool, capabilities.as_ref());
        let handler = move |context: Context, arguments: JsonObject| {
            let inner = inner.upgrade();
            let shown = shown.clone();
            let server = server.clone();
            async move {
                match inner {
                    Some(inner) if support != TaskSupport::Forbidden && as_task(&context) => {
                        inner
                            .call_tool_as_task(context, &server, &shown, arguments)
                            .await
                    }
                    Some(inner) => inner.call_tool(context, &server, &shown, arguments).await,
                    None => Ok(ToolOutput::error("the gateway has stopped")),
                }
            }
        };
        let definition = &tool.tool;
        let mut made = Tool::with_input_schema(
            tool.name.clone(),
            schema_object(&definition.input_schema),
            handler,
        );
        if let Some(text) = &definition.description {
            made = made.description(text.clone());
        }
        if let Some(text) = &definition.title {
            made = made.title(text.clone());
        }
        if let Some(annotations) = &definition.annotations {
            made = made.annotations(annotations.clone());
        }
        if let Some(icons) = &definition.icons {
            made = made.icons(icons.clone());
        }
        if let Some(schema) = &definition.output_schema {
            made = made.output_schema(schema_object(schema));
        }
        if support != TaskSupport::Forbidden {
            // Started as a plain call, made a task when the server's task exists.
            made = made.task_support(support).task_on_detach();
        }
        Some(made)
    }

    /// A tool call: through the host, with progress, cancellation and log messages passed on.
    async fn call_tool(
        self: Arc<Self>,
        context: Context,
        server: &str,
        shown: &str,
        arguments: JsonObject,
    ) -> Result<ToolOutput, modelctx_server::InputError> {
        let call = Call::new(context.clone());
        let entry = self.calls.enter(server, call.clone());
        let (progress_tx, mut progress_rx) = tokio::sync::mpsc::channel(PROGRESS_BUFFER);
        let mut options = as_caller(&context, CallOptions::new().timeout(None));
        if context.wants_progress() {
            options = options.on_progress(move |p| {
                // Progress is a hint: one that finds the buffer full is dropped.
                let _ = progress_tx.try_send(p);
            });
        }
        let routed = self.host.call_tool(shown, arguments, options);
        let outcome = self
            .pass_on(&context, server, entry.id, &mut progress_rx, routed)
            .await;
        // A server's request the gateway's client could not answer for lack of a capability:
        // the call fails as the server's own would have for that client.
        if let Some(capability) = call.missing() {
            return Err(modelctx_server::InputError::NotSupported(capability));
        }
        Ok(match outcome {
            Some(Ok(result)) => ToolOutput::from(result),
            Some(Err(e)) => failed_call(&e),
            None => ToolOutput::error("cancelled by the client"),
        })
    }

    /// A tool call the client runs as a task (see the module docs), of a tool its server may run
    /// as one: the server is called as a task, the gateway's call becomes a task when the
    /// server's exists, and follows it to its end (status message, questions, cancellation,
    /// outcome).
    async fn call_tool_as_task(
        self: Arc<Self>,
        context: Context,
        server: &str,
        shown: &str,
        arguments: JsonObject,
    ) -> Result<ToolOutput, modelctx_server::InputError> {
        let call = Call::new(context.clone());
        let _entry = self.calls.enter(server, call.clone());
        let mut stopped = self.stopped.subscribe();
        // The server's status message, last told.
        let (status, mut statuses) = tokio::sync::watch::channel(None::<String>);
        let options = TaskOptions::new()
            .call(as_caller(&context, CallOptions::new().timeout(None)))
            .on_status(move |task| {
                status.send_replace(task.status_message.clone());
            });
        // Until the server's task exists its questions are the gateway call's own round trips;
        // a cancelled call drops the server's.
        let created = tokio::select! {
            biased;
            () = context.cancelled().cancelled() => {
                return Ok(ToolOutput::error("cancelled by the client"));
            }
            () = stopping(&mut stopped) => {
                return Ok(ToolOutput::error("the gateway has stopped"));
            }
            created = self.host.call_tool_as_task(shown, arguments, options) => created,
        };
        if let Some(capability) = call.missing() {
            return Err(modelctx_server::InputError::NotSupported(capability));
        }
        let handle = match created {
            Ok(handle) => handle,
            Err(e) => return Ok(failed_call(&e)),
        };
        // From here, whatever ends this call before the server's task ends cancels that task:
        // `tasks/cancel` on the gateway's task (which drops this handler), its expiry, the
        // client's cancellation, the gateway dropped.
        let mut task = ServerTask::new(handle.clone());
        if handle.id().is_some() {
            match context.detach().await {
                Ok(()) | Err(DetachError::NotAllowed) => {}
                // Refused (too many tasks): the call fails so, and the server's task is cancelled.
                Err(DetachError::Refused(error)) => return Ok(ToolOutput::protocol_error(error)),
                Err(other) => {
                    return Ok(ToolOutput::protocol_error(ErrorObject::new(
                        ErrorCode::INTERNAL_ERROR,
                        other.to_string(),
                    )));
                }
            }
        }
        let waited = handle.wait();
        let mut waited = std::pin::pin!(waited);
        let mut told: Option<String> = None;
        let outcome = loop {
            tokio::select! {
                biased;
                () = context.cancelled().cancelled() => {
                    return Ok(ToolOutput::error("cancelled by the client"));
                }
                () = stopping(&mut stopped) => {
                    return Ok(ToolOutput::error("the gateway has stopped"));
                }
                outcome = &mut waited => break outcome,
                Ok(()) = statuses.changed() => {
                    let message = statuses.borrow_and_update().clone();
                    if let Some(message) = message
                        && told.as_ref() != Some(&message)
                    {
                        context.set_status_message(&message).await;
                        told = Some(message);
                    }
                }
            }
        };
        task.ended();
        if let Some(capability) = call.missing() {
            return Err(modelctx_server::InputError::NotSupported(capability));
        }
        Ok(task_outcome(server, outcome))
    }

    /// Runs `call` until it ends or the client cancels (`None`), passing on its progress and
    /// the log messages of `server` meanwhile.
    async fn pass_on<T>(
        &self,
        context: &Context,
        server: &str,
        me: u64,
        progress: &mut tokio::sync::mpsc::Receiver<modelctx_client::Progress>,
        call: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let mut notifications = self.host.client(server).map(|c| c.notifications());
        let mut call = std::pin::pin!(call);
        let mut progress_open = true;
        loop {
            tokio::select! {
                biased;
                () = context.cancelled().cancelled() => return None,
                done = &mut call => {
                    // The server's progress came before its answer: what is still queued is
                    // sent before the answer goes.
                    while let Ok(p) = progress.try_recv() {
                        let _ = context.progress(p.progress, p.total, p.message.as_deref()).await;
                    }
                    // So are its log messages.
                    loop {
                        tokio::select! {
                            biased;
                            note = next_log(&mut notifications) => {
                                if let Some(message) = note
                                    && self.calls.is_newest(server, me)
                                {
                                    let logger = message.logger.as_deref();
                                    context.log(message.level, logger, message.data).await;
                                }
                            }
                            () = std::future::ready(()) => break,
                        }
                    }
                    return Some(done);
                }
                p = progress.recv(), if progress_open => match p {
                    Some(p) => {
                        let _ = context.progress(p.progress, p.total, p.message.as_deref()).await;
                    }
                    None => progress_open = false,
                },
                note = next_log(&mut notifications) => {
                    if let Some(message) = note
                        && self.calls.is_newest(server, me)
                    {
                        context.log(message.level, message.logger.as_deref(), message.data).await;
                    }
                }
            }
        }
    }

    /// The gateway's prompt of `prompt`.
    fn prompt(self: &Arc<Self>, prompt: &HostPrompt) -> Prompt {
        let inner = Arc::downgrade(self);
        let shown = prompt.name.clone();
        let server = prompt.server.clone();
        let handler = move |context: Context, arguments: Value| {
            let inner = inner.upgrade();
            let shown = shown.clone();
            let server = server.clone();
            async move {
                let Some(inner) = inner else {
                    return PromptAnswer(Err(internal("the gateway has stopped")));
                };
                PromptAnswer(inner.get_prompt(context, &server, &shown, arguments).await)
            }
        };
        let definition = &prompt.prompt;
        let arguments = definition
            .arguments
            .iter()
            .flatten()
            .map(|a| {
                (
                    a.name.clone(),
                    a.description.clone(),
                    a.required.unwrap_or(false),
                )
            })
            .collect();
        let mut made = Prompt::with_arguments(prompt.name.clone(), arguments, handler);
        if let Some(text) = &definition.description {
            made = made.description(text.clone());
        }
        if let Some(text) = &definition.title {
            made = made.title(text.clone());
        }
        for argument in definition.arguments.iter().flatten() {
            let reference = CompletionRef::Prompt(prompt.name.clone());
            made = made.complete(
                argument.name.clone(),
                self.completer(reference, &argument.name),
            );
        }
        made
    }

    async fn get_prompt(
        self: Arc<Self>,
        context: Context,
        server: &str,
        shown: &str,
        arguments: Value,
    ) -> Result<Vec<PromptMessage>, ErrorObject> {
        let entry = self.calls.enter(server, Call::new(context.clone()));
        let arguments = string_arguments(arguments);
        let (_, mut none) = tokio::sync::mpsc::channel(1);
        let got = self
            .pass_on(
                &context,
                server,
                entry.id,
                &mut none,
                self.host.get_prompt_with(
                    shown,
                    arguments,
                    as_caller(&context, CallOptions::new()),
                ),
            )
            .await
            .ok_or_else(|| internal("cancelled by the client"))?
            .map_err(|e| match passed_on(&e) {
                Some(error) => error.clone(),
                None => internal(&failed(&e)),
            })?;
        Ok(got
            .messages
            .into_iter()
            .map(|message| match message.role {
                model::Role::Assistant => PromptMessage::assistant(Content::from(message.content)),
                _ => PromptMessage::user(Content::from(message.content)),
            })
            .collect())
    }

    /// The gateway's resource of `resource`.
    fn resource(self: &Arc<Self>, resource: &HostResource) -> Resource {
        let definition = &resource.resource;
        let mut made = Resource::new(
            definition.uri.clone(),
            definition.name.clone(),
            self.reader(&resource.server),
        );
        if let Some(text) = &definition.description {
            made = made.description(text.clone());
        }
        if let Some(mime) = &definition.mime_type {
            made = made.mime_type(mime.clone());
        }
        made
    }

    /// The gateway's template of `template`; `None` (logged) when the gateway cannot parse it.
    fn template(self: &Arc<Self>, template: &HostTemplate) -> Option<ResourceTemplate> {
        let definition = &template.template;
        let made = ResourceTemplate::new(
            &definition.uri_template,
            definition.name.clone(),
            self.reader(&template.server),
        );
        let mut made = match made {
            Ok(made) => made,
            Err(e) => {
                tracing::warn!(template = %definition.uri_template, error = %e, "gateway: template not served");
                return None;
            }
        };
        if let Some(text) = &definition.description {
            made = made.description(text.clone());
        }
        if let Some(mime) = &definition.mime_type {
            made = made.mime_type(mime.clone());
        }
        for variable in template_variables(&definition.uri_template) {
            let reference = CompletionRef::Resource(definition.uri_template.clone());
            let complete = self.completer(reference, &variable);
            made = made.complete(variable, complete);
        }
        Some(made)
    }

    /// The read handler of a resource or template of `server`.
    fn reader(
        self: &Arc<Self>,
        server: &str,
    ) -> impl Fn(Context, ReadRequest) -> Reading + Clone + Send + Sync + 'static {
        let inner = Arc::downgrade(self);
        let server = server.to_owned();
        move |context: Context, request: ReadRequest| {
            let inner = inner.upgrade();
            let server = server.clone();
            Box::pin(async move {
                let Some(inner) = inner else {
                    return Err(ResourceError::Failed("the gateway has stopped".into()));
                };
                inner.read(context, &server, request.uri).await
            })
        }
    }

    async fn read(
        self: Arc<Self>,
        context: Context,
        server: &str,
        uri: String,
    ) -> Result<Vec<ResourceContents>, ResourceError> {
        let entry = self.calls.enter(server, Call::new(context.clone()));
        let (_, mut none) = tokio::sync::mpsc::channel(1);
        let read = self
            .pass_on(
                &context,
                server,
                entry.id,
                &mut none,
                self.host
                    .read_resource_with(&uri, as_caller(&context, CallOptions::new())),
            )
            .await
            .ok_or_else(|| ResourceError::Failed("cancelled by the client".into()))?;
        match read {
            Ok(result) => Ok(result
                .contents
                .into_iter()
                .map(ResourceContents::from)
                .collect()),
            Err(HostError::UnknownResource(_)) => Err(ResourceError::NotFound(uri)),
            Err(HostError::Server {
                source: modelctx_client::Error::Remote(error),
                ..
            }) if error.code == RESOURCE_NOT_FOUND
                || error.code == modelctx_types::ErrorCode::INVALID_PARAMS =>
            {
                Err(ResourceError::NotFound(uri))
            }
            Err(e) => Err(match passed_on(&e) {
                Some(error) => ResourceError::Protocol(error.clone()),
                None => ResourceError::Failed(failed(&e)),
            }),
        }
    }

    /// A completion provider asking the host about `argument` of `reference`.
    fn completer(
        self: &Arc<Self>,
        reference: CompletionRef,
        argument: &str,
    ) -> impl Fn(String, JsonObject) -> Completing + Send + Sync + 'static {
        let inner = Arc::downgrade(self);
        let argument = argument.to_owned();
        move |partial: String, others: JsonObject| {
            let inner = inner.upgrade();
            let reference = reference.clone();
            let argument = argument.clone();
            Box::pin(async move {
                let Some(inner) = inner else {
                    return Vec::new();
                };
                let context: HashMap<String, String> =
                    others.into_iter().map(|(k, v)| (k, string_of(v))).collect();
                match inner
                    .host
                    .complete(&reference, &argument, &partial, &context)
                    .await
                {
                    Ok(completion) => completion.values,
                    Err(e) => {
                        tracing::debug!(error = %e, "gateway: completion failed");
                        Vec::new()
                    }
                }
            })
        }
    }

    /// A client subscribed to `uri`: the host is subscribed to it on its server (once).
    fn subscribe(self: &Arc<Self>, uri: &str) {
        {
            let mut subscribed = self
                .subscribed
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if subscribed.contains(uri) || subscribed.len() >= MAX_SUBSCRIPTIONS {
                return;
            }
            subscribed.insert(uri.to_owned());
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.clone();
        let uri = uri.to_owned();
        runtime.spawn(async move {
            if let Err(e) = inner.host.subscribe_resource(&uri).await {
                tracing::debug!(uri = %uri, error = %e, "gateway: subscribing the host failed");
                // Tried again at the next subscription.
                inner
                    .subscribed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&uri);
            }
        });
    }
}

/// How the gateway's tool of `tool` runs as a task: as its server lists it
/// (`execution.taskSupport`, 2025-11-25) when that server runs tools as tasks
/// (`tasks.requests.tools.call`); optional for every tool of a server that declares the tasks
/// extension (2026-07-28 lists no task support: its server decides per call); else forbidden.
fn task_support(tool: &model::Tool, capabilities: Option<&JsonObject>) -> TaskSupport {
    let declared = |path: &[&str]| {
        let mut at = capabilities.and_then(|c| c.get(path[0]));
        for key in &path[1..] {
            at = at.and_then(|v| v.get(key));
        }
        at.is_some_and(|v| !v.is_null() && v.as_bool() != Some(false))
    };
    let listed = tool.execution.as_ref().and_then(|e| e.task_support);
    match listed {
        Some(listed) if declared(&["tasks", "requests", "tools", "call"]) => match listed {
            model::ToolExecutionTaskSupport::Required => TaskSupport::Required,
            model::ToolExecutionTaskSupport::Optional => TaskSupport::Optional,
            _ => TaskSupport::Forbidden,
        },
        _ if declared(&["extensions", EXTENSION_ID]) => TaskSupport::Optional,
        _ => TaskSupport::Forbidden,
    }
}

/// Whether the client runs this call as a task: a 2025-11-25 task-augmented call (the handler
/// runs as its task already), or a 2026-07-28 request that declares the tasks extension.
fn as_task(context: &Context) -> bool {
    if context.task_id().is_some() {
        return true;
    }
    context.protocol_version().era() == Era::Modern
        && context
            .client_capabilities()
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(EXTENSION_ID))
            .is_some_and(|v| !v.is_null() && v.as_bool() != Some(false))
}

/// The gateway call's answer for the outcome of its server's task: its result as it came
/// (`isError` included); a failed task fails the gateway's (its task `failed`) with the
/// server's error, a task the server cancelled with an error saying so; a failure to follow
/// the task (the connection, an expired task) is a failed call, as for a plain call.
fn task_outcome(server: &str, outcome: Result<model::CallToolResult, TaskError>) -> ToolOutput {
    match outcome {
        Ok(result) => ToolOutput::from(result),
        Err(TaskError::Failed { error, .. }) => ToolOutput::protocol_error(error),
        Err(TaskError::Cancelled { task_id, message }) => {
            let why = message.map(|m| format!(": {m}")).unwrap_or_default();
            ToolOutput::protocol_error(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                format!("server {server:?} cancelled its task {task_id}{why}"),
            ))
        }
        Err(other) => ToolOutput::error(format!("server {server:?}: {other}")),
    }
}

/// Resolves once the gateway is dropped (`stopped` set).
async fn stopping(stopped: &mut tokio::sync::watch::Receiver<bool>) {
    if stopped.wait_for(|stopped| *stopped).await.is_err() {
        // The gateway's state is gone without being stopped: nothing will set it.
        std::future::pending::<()>().await;
    }
}

/// How long the cancel of a server's task left behind may take.
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A server's task a gateway call follows: cancelled on the server (`tasks/cancel`, on a task
/// of its own) when dropped before [`ServerTask::ended`].
struct ServerTask {
    handle: Option<TaskHandle>,
}

impl ServerTask {
    fn new(handle: TaskHandle) -> ServerTask {
        ServerTask {
            handle: handle.id().is_some().then_some(handle),
        }
    }

    /// The task ended: nothing to cancel.
    fn ended(&mut self) {
        self.handle = None;
    }
}

impl Drop for ServerTask {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        if handle.last_status().is_some_and(|task| task.is_terminal()) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            match tokio::time::timeout(CANCEL_WAIT, handle.cancel()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "gateway: a server's task was not cancelled")
                }
                Err(_) => tracing::debug!("gateway: a server's task was not cancelled in time"),
            }
        });
    }
}

/// Follows the host's changes until the gateway is dropped or the host shuts down.
async fn follow(
    inner: std::sync::Weak<Inner>,
    mut changes: tokio::sync::broadcast::Receiver<HostEvent>,
) {
    loop {
        let event = changes.recv().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let Some(server) = inner.server.get() else {
            return;
        };
        match event {
            Ok(HostEvent::ToolsChanged) => inner.sync_tools(server),
            Ok(HostEvent::PromptsChanged) => inner.sync_prompts(server),
            Ok(HostEvent::ResourcesChanged) => inner.sync_resources(server),
            Ok(HostEvent::ResourceUpdated { uri, .. }) => server.notify_resource_updated(&uri),
            // Events the host may add later.
            #[allow(unreachable_patterns)]
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => {
                inner.sync_tools(server);
                inner.sync_prompts(server);
                inner.sync_resources(server);
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// The next log message of `notifications` (pending forever without a client, or once its
/// connection is gone).
async fn next_log(
    notifications: &mut Option<modelctx_client::Notifications>,
) -> Option<modelctx_client::LogMessage> {
    loop {
        let Some(receiver) = notifications else {
            return std::future::pending().await;
        };
        match receiver.recv().await {
            Ok(modelctx_client::ServerNotification::Log(message)) => return Some(message),
            Ok(_) | Err(modelctx_client::RecvError::Missed(_)) => {}
            Err(_) => *notifications = None,
        }
    }
}

/// A read of the gateway's resources and templates under way.
type Reading = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send>,
>;

/// A completion of the gateway's prompts and templates under way.
type Completing = std::pin::Pin<Box<dyn std::future::Future<Output = Vec<String>> + Send>>;

/// How many progress notifications of one call wait to be passed on.
const PROGRESS_BUFFER: usize = 64;

/// The legacy "resource not found" code.
const RESOURCE_NOT_FOUND: modelctx_types::ErrorCode = modelctx_types::ErrorCode(-32002);

/// What the client of the gateway is told of a host failure.
fn failed(error: &HostError) -> String {
    match error {
        HostError::Denied { reason } => format!("refused by the gateway's policy: {reason}"),
        other => other.to_string(),
    }
}

/// The error of a server's answer that the gateway answers with as it came, on a tool call
/// (plain or as a task), a prompt get and a resource read: -32021, a client capability the
/// request needs (the server saw the capabilities of the gateway's client calling, or the
/// request lacked the tasks extension a tool needs). Its `data` and message are the server's:
/// the gateway does not read which capability it names (an extension's name has dots).
fn passed_on(error: &HostError) -> Option<&ErrorObject> {
    match error {
        HostError::Server {
            source: modelctx_client::Error::Remote(error),
            ..
        } if error.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY => Some(error),
        _ => None,
    }
}

/// A gateway prompt's answer: its messages, or the JSON-RPC error it is answered with.
struct PromptAnswer(Result<Vec<PromptMessage>, ErrorObject>);

impl IntoPromptResult for PromptAnswer {
    fn into_messages(self) -> Result<Vec<PromptMessage>, ErrorObject> {
        self.0
    }
}

/// A prompt's failure that is the gateway's to tell: -32603 saying why.
fn internal(why: &str) -> ErrorObject {
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, why)
}

/// The gateway call's answer for a host failure: the server's error when it is
/// [`passed_on`], else a failed call whose text says why.
fn failed_call(error: &HostError) -> ToolOutput {
    match passed_on(error) {
        Some(error) => ToolOutput::protocol_error(error.clone()),
        None => ToolOutput::error(failed(error)),
    }
}

/// Prompt arguments: the strings of an object (other values as their JSON text).
fn string_arguments(arguments: Value) -> BTreeMap<String, String> {
    match arguments {
        Value::Object(map) => map.into_iter().map(|(k, v)| (k, string_of(v))).collect(),
        _ => BTreeMap::new(),
    }
}

fn string_of(value: Value) -> String {
    match value {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// A tool's schema as the JSON object its server sent.
fn schema_object(schema: &model::ToolInputSchema) -> JsonObject {
    let mut object = JsonObject::new();
    if let Some(dialect) = &schema.schema {
        object.insert("$schema".into(), Value::from(dialect.clone()));
    }
    if schema.r#type.is_some() {
        object.insert("type".into(), Value::from("object"));
    }
    if let Some(properties) = &schema.properties {
        let properties = properties
            .iter()
            .map(|(k, v)| (k.clone(), Value::Object(v.clone())))
            .collect();
        object.insert("properties".into(), Value::Object(properties));
    }
    if let Some(required) = &schema.required {
        object.insert(
            "required".into(),
            Value::Array(required.iter().cloned().map(Value::from).collect()),
        );
    }
    for (key, value) in &schema.extra {
        object.insert(key.clone(), value.clone());
    }
    object
}

/// The variable names of an RFC 6570 URI template (`{var}`, `{+var}`, `{?a,b*}`, `{x:3}`), in
/// order, each once.
fn template_variables(template: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let expression = &rest[open + 1..open + close];
        let expression = expression.trim_start_matches(['+', '#', '.', '/', ';', '?', '&']);
        for spec in expression.split(',') {
            let name = spec
                .split(':')
                .next()
                .unwrap_or_default()
                .trim_end_matches('*');
            if !name.is_empty() && !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        rest = &rest[open + close + 1..];
    }
    names
}

/// The calls in progress through the gateway, per server: what each one needs to be asked
/// through (`C`: its request's [`Context`]).
struct Calls<C = Call> {
    inner: Mutex<CallsInner<C>>,
}

impl<C> Default for Calls<C> {
    fn default() -> Self {
        Calls {
            inner: Mutex::new(CallsInner {
                next: 0,
                by_server: HashMap::new(),
            }),
        }
    }
}

impl<C> std::fmt::Debug for Calls<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calls").finish_non_exhaustive()
    }
}

struct CallsInner<C> {
    next: u64,
    /// Per server, its calls in progress, oldest first.
    by_server: HashMap<String, VecDeque<(u64, C)>>,
}

impl<C: Clone> Calls<C> {
    /// Records a call in progress on `server` until the returned entry is dropped.
    fn enter(self: &Arc<Self>, server: &str, call: C) -> Entry<C> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.next += 1;
        let id = inner.next;
        let calls = inner.by_server.entry(server.to_owned()).or_default();
        calls.push_back((id, call));
        while calls.len() > MAX_CALLS_PER_SERVER {
            calls.pop_front();
        }
        Entry {
            calls: self.clone(),
            server: server.to_owned(),
            id,
        }
    }

    /// The newest call in progress on `server`.
    fn newest(&self, server: &str) -> Option<C> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner
            .by_server
            .get(server)
            .and_then(|calls| calls.back())
            .map(|(_, call)| call.clone())
    }

    /// Whether call `id` is the newest in progress on `server`.
    fn is_newest(&self, server: &str, id: u64) -> bool {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner
            .by_server
            .get(server)
            .and_then(|calls| calls.back())
            .is_some_and(|(newest, _)| *newest == id)
    }

    fn leave(&self, server: &str, id: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(calls) = inner.by_server.get_mut(server) {
            calls.retain(|(at, _)| *at != id);
            if calls.is_empty() {
                inner.by_server.remove(server);
            }
        }
    }

    /// How many calls are remembered, over every server.
    #[cfg(test)]
    fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.by_server.values().map(VecDeque::len).sum()
    }
}

/// A call's place in [`Calls`], removed when dropped.
struct Entry<C: Clone = Call> {
    calls: Arc<Calls<C>>,
    server: String,
    id: u64,
}

impl<C: Clone> Drop for Entry<C> {
    fn drop(&mut self) {
        self.calls.leave(&self.server, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_adds_new_and_changed_items_and_removes_gone_ones() {
        let shown: BTreeMap<String, i32> = [("a".into(), 1), ("b".into(), 2), ("c".into(), 3)]
            .into_iter()
            .collect();
        let now: BTreeMap<String, i32> = [("a".into(), 1), ("b".into(), 20), ("d".into(), 4)]
            .into_iter()
            .collect();
        let (added, removed) = diff(&shown, &now);
        assert_eq!(added, vec![20, 4]);
        assert_eq!(removed, vec!["c".to_owned()]);
        let (added, removed) = diff(&now, &now);
        assert!(added.is_empty() && removed.is_empty());
    }

    #[test]
    fn template_variables_are_named_once_in_order() {
        assert_eq!(
            template_variables("file:///{+path}{?q,lang*}{#frag}"),
            ["path", "q", "lang", "frag"]
        );
        assert_eq!(
            template_variables("db://{table}/{id}/{id}{/seg:3}"),
            ["table", "id", "seg"]
        );
        assert!(template_variables("static://no-vars").is_empty());
        assert_eq!(template_variables("broken://{open"), Vec::<String>::new());
    }

    #[test]
    fn a_schema_is_written_back_as_its_server_sent_it() {
        let mut properties = BTreeMap::new();
        properties.insert(
            "text".to_owned(),
            json!({"type": "string"}).as_object().cloned().unwrap(),
        );
        let mut extra = JsonObject::new();
        extra.insert("additionalProperties".into(), json!(false));
        let schema = model::ToolInputSchema {
            schema: None,
            r#type: Some(Default::default()),
            properties: Some(properties),
            required: Some(vec!["text".into()]),
            extra,
        };
        assert_eq!(
            Value::Object(schema_object(&schema)),
            json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": false,
            })
        );
    }

    #[test]
    fn prompt_arguments_become_strings() {
        let arguments = string_arguments(json!({"a": "x", "n": 3, "b": true}));
        assert_eq!(arguments["a"], "x");
        assert_eq!(arguments["n"], "3");
        assert_eq!(arguments["b"], "true");
        assert!(string_arguments(Value::Null).is_empty());
    }

    #[test]
    fn the_newest_call_of_a_server_is_asked_and_entries_leave_with_their_calls() {
        let calls: Arc<Calls<&'static str>> = Arc::default();
        assert_eq!(calls.newest("s"), None);
        let first = calls.enter("s", "first");
        let other = calls.enter("t", "other");
        assert_eq!(calls.newest("s"), Some("first"));
        let second = calls.enter("s", "second");
        assert_eq!(calls.newest("s"), Some("second"));
        assert!(calls.is_newest("s", second.id));
        assert!(!calls.is_newest("s", first.id));
        assert_eq!(calls.newest("t"), Some("other"));
        drop(second);
        assert_eq!(calls.newest("s"), Some("first"));
        assert!(calls.is_newest("s", first.id));
        drop(first);
        assert_eq!(calls.newest("s"), None);
        drop(other);
        assert_eq!(calls.len(), 0);
        assert!(calls.inner.lock().unwrap().by_server.is_empty());
    }

    #[test]
    fn the_table_keeps_at_most_its_bound_per_server() {
        let calls: Arc<Calls<usize>> = Arc::default();
        let entries: Vec<_> = (0..MAX_CALLS_PER_SERVER + 10)
            .map(|n| calls.enter("s", n))
            .collect();
        assert_eq!(calls.len(), MAX_CALLS_PER_SERVER);
        assert_eq!(calls.newest("s"), Some(MAX_CALLS_PER_SERVER + 9));
        drop(entries);
        assert_eq!(calls.len(), 0);
    }

    #[test]
    fn elicitation_answers_are_passed_back() {
        let answer = |action, content| model::ElicitResult {
            action,
            content,
            meta: None,
            extra: JsonObject::new(),
        };
        let accepted = elicited(answer(
            model::ElicitResultAction::Accept,
            Some(json!({"name": "Ada"})),
        ));
        assert_eq!(
            accepted,
            Elicited::accept(json!({"name": "Ada"}).as_object().cloned().unwrap())
        );
        assert_eq!(
            elicited(answer(model::ElicitResultAction::Accept, None)),
            Elicited::accepted()
        );
        assert_eq!(
            elicited(answer(model::ElicitResultAction::Decline, None)),
            Elicited::decline()
        );
        assert_eq!(
            elicited(answer(model::ElicitResultAction::Cancel, None)),
            Elicited::cancel()
        );
    }

    fn listed(support: Option<model::ToolExecutionTaskSupport>) -> model::Tool {
        let mut tool: model::Tool = serde_json::from_value::<modelctx_types::v2025_11_25::Tool>(
            json!({"name": "t", "inputSchema": {"type": "object"}}),
        )
        .unwrap()
        .into();
        tool.execution = support.map(|task_support| model::ToolExecution {
            task_support: Some(task_support),
        });
        tool
    }

    #[test]
    fn a_tool_runs_as_a_task_as_its_server_allows() {
        use model::ToolExecutionTaskSupport as Listed;
        let legacy = json!({"tasks": {"requests": {"tools": {"call": {}}}}});
        let modern = json!({"extensions": {EXTENSION_ID: {}}});
        let none = json!({"tools": {}});
        let caps = |v: &Value| v.as_object().cloned();
        // 2025-11-25: as listed, when the server runs tools as tasks.
        for (support, expected) in [
            (Some(Listed::Required), TaskSupport::Required),
            (Some(Listed::Optional), TaskSupport::Optional),
            (Some(Listed::Forbidden), TaskSupport::Forbidden),
            (None, TaskSupport::Forbidden),
        ] {
            let got = task_support(&listed(support), caps(&legacy).as_ref());
            assert_eq!(got, expected, "{support:?}");
        }
        // Listed, but the server does not declare tasks of tool calls.
        let required = listed(Some(Listed::Required));
        assert_eq!(
            task_support(&required, caps(&none).as_ref()),
            TaskSupport::Forbidden
        );
        assert_eq!(task_support(&required, None), TaskSupport::Forbidden);
        // 2026-07-28: the server decides per call.
        assert_eq!(
            task_support(&listed(None), caps(&modern).as_ref()),
            TaskSupport::Optional
        );
        let off = json!({"extensions": {EXTENSION_ID: false}});
        assert_eq!(
            task_support(&listed(None), caps(&off).as_ref()),
            TaskSupport::Forbidden
        );
    }

    #[test]
    fn a_servers_task_ends_as_the_gateways_answer() {
        let result = model::CallToolResult {
            meta: None,
            content: Vec::new(),
            structured_content: None,
            is_error: Some(true),
            result_type: None,
            extra: JsonObject::new(),
        };
        assert_eq!(
            task_outcome("s", Ok(result.clone())),
            ToolOutput::from(result),
            "a completed task's result, isError included"
        );
        let error = || ErrorObject::new(ErrorCode(-32050), "broke");
        let failed = Err(TaskError::Failed {
            task_id: "t".into(),
            error: error(),
        });
        assert_eq!(
            task_outcome("s", failed),
            ToolOutput::protocol_error(error())
        );
        let cancelled = Err(TaskError::Cancelled {
            task_id: "t".into(),
            message: Some("stop".into()),
        });
        assert_eq!(
            task_outcome("s", cancelled),
            ToolOutput::protocol_error(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                "server \"s\" cancelled its task t: stop"
            ))
        );
        let expired = Err(TaskError::Expired {
            task_id: "t".into(),
            message: "gone".into(),
        });
        assert_eq!(
            task_outcome("s", expired),
            ToolOutput::error("server \"s\": task t has expired: gone")
        );
    }

    #[test]
    fn every_minus_32021_of_a_server_passes_on_as_it_came_and_nothing_else() {
        let refusal = |data: Value| {
            ErrorObject::new(ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY, "needs")
                .with_data(&data)
                .unwrap()
        };
        let failure = |error: ErrorObject| HostError::Server {
            server: "s".into(),
            source: modelctx_client::Error::Remote(error),
        };
        for data in [
            json!({"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}}),
            json!({"requiredCapabilities": {"sampling": {}}}),
            json!({"requiredCapabilities": {"extensions": {"io.x/y.z": {}}}}),
            json!({"other": 1}),
        ] {
            let error = failure(refusal(data.clone()));
            assert_eq!(
                failed_call(&error),
                ToolOutput::protocol_error(refusal(data.clone())),
                "{data}"
            );
            let passed = passed_on(&error).expect("passed on");
            assert_eq!(passed.message, "needs");
            assert_eq!(passed.data_as::<Value>().unwrap(), Some(data));
        }
        let other = failure(ErrorObject::new(ErrorCode(-32050), "broke"));
        assert!(passed_on(&other).is_none());
        assert_eq!(failed_call(&other), ToolOutput::error(failed(&other)));
        let denied = HostError::Denied {
            reason: "no".into(),
        };
        assert!(passed_on(&denied).is_none());
        assert_eq!(failed_call(&denied), ToolOutput::error(failed(&denied)));
    }

    #[test]
    fn a_refusal_says_it_is_the_policy() {
        let text = failed(&HostError::Denied {
            reason: "tool \"drop\" may be destructive".into(),
        });
        assert!(
            text.starts_with("refused by the gateway's policy"),
            "{text}"
        );
    }
}
