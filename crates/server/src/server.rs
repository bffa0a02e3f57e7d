//! The server: what it offers (a registry that may change while it runs) and how each request
//! is answered.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use modelctx_session::{ListKind, ProtocolVersion, ServerConfig};
use modelctx_types::JsonObject;
use serde_json::json;
use tokio::sync::broadcast;

use crate::handler::States;
use crate::prompt::Prompt;
use crate::registry::{Change, LoadCounters, Registry, Shared};
use crate::resource::{Resource, ResourceTemplate};
use crate::settings::Settings;
use crate::tool::{Registered, Tool};

/// Builds a [`Server`].
#[derive(Debug)]
pub struct ServerBuilder {
    name: String,
    version: String,
    instructions: Option<String>,
    settings: Settings,
    tools: BTreeMap<String, Tool>,
    prompts: BTreeMap<String, Prompt>,
    resources: BTreeMap<String, Resource>,
    templates: BTreeMap<String, ResourceTemplate>,
    declare_tools: bool,
    declare_prompts: bool,
    declare_resources: bool,
    state_sealer: Option<modelctx_session::state::StateSealer>,
    states: States,
    subscribe_hook: Option<crate::resource::SubscribeHook>,
    versions: Option<Vec<ProtocolVersion>>,
    session_store: Option<Arc<dyn crate::run::SessionStore>>,
    bus: Option<Arc<dyn crate::bus::Bus>>,
    task_store: Option<Arc<dyn crate::tasks::TaskStore>>,
    #[cfg(feature = "http")]
    guard: Option<Arc<dyn modelctx_http::server::Guard>>,
    skills: crate::skills::Pending,
    /// [`ServerBuilder::layer`]'s layers.
    layers: crate::middleware::Stack,
}

impl ServerBuilder {
    /// The protocol versions the server serves, on every transport (default: every version,
    /// [`ProtocolVersion::ALL`]). A legacy `initialize` gets the client's version when it is
    /// served, else the newest legacy version served (none: -32022); a modern request naming a
    /// version not served gets -32022, whose `data.supported` names the modern ones served.
    /// Over Streamable HTTP the endpoint serves exactly these (they replace the versions of the
    /// `ServerConfig` given to `http_service` or `serve_http`), so a modern-only server is:
    ///
    /// ```
    /// use modelctx_server::{ProtocolVersion, Server};
    ///
    /// let server = Server::builder("modern", "1.0.0")
    ///     .versions([ProtocolVersion::V2026_07_28])
    ///     .build();
    /// # let _ = server;
    /// ```
    pub fn versions(mut self, versions: impl IntoIterator<Item = ProtocolVersion>) -> Self {
        self.versions = Some(versions.into_iter().collect());
        self
    }

    /// Decides which resources a connection may hear of changes to (default: any resource,
    /// for every connection). `check` gets the URI and the connection's principal; when it
    /// says no, a legacy `resources/subscribe` is refused with -32602, and no
    /// `notifications/resources/updated` for that URI reaches the connection (a modern listen
    /// stream's `resourceSubscriptions` are acknowledged, but the refused URIs' updates are
    /// not sent on them). `check` runs on the connection's task: keep it quick.
    ///
    /// ```
    /// use modelctx_server::{Server, Subscribe};
    ///
    /// let server = Server::builder("files", "1.0.0")
    ///     .declare_resources()
    ///     .on_subscribe(|s: &Subscribe<'_>| {
    ///         s.uri.starts_with("file:///public/") || s.principal == Some("admin")
    ///     })
    ///     .build();
    /// # drop(server);
    /// ```
    pub fn on_subscribe<F>(mut self, check: F) -> Self
    where
        F: Fn(&crate::resource::Subscribe<'_>) -> bool + Send + Sync + 'static,
    {
        self.subscribe_hook = Some(crate::resource::SubscribeHook(Arc::new(check)));
        self
    }

    /// Where the states of legacy HTTP sessions live (default: an
    /// [`InMemoryStore`](crate::InMemoryStore) of this process). Used with feature `http`.
    pub fn session_store(mut self, store: Arc<dyn crate::run::SessionStore>) -> Self {
        self.session_store = Some(store);
        self
    }

    /// Where tasks are kept ([`tasks`](crate::tasks); default: a [`MemoryTaskStore`] of its
    /// default bounds, 10 000 tasks and 1 000 per principal). Each task is kept
    /// [`TaskSettings::ttl`] from its creation (one hour by default), and clients are told to
    /// poll it every [`TaskSettings::poll_interval`] (one second): see [`Settings::tasks`].
    /// Giving a store declares the tasks extension (`capabilities.extensions`) even when no
    /// tool of the builder supports tasks (tools added later may).
    ///
    /// [`MemoryTaskStore`]: crate::tasks::MemoryTaskStore
    /// [`TaskSettings::ttl`]: crate::tasks::TaskSettings::ttl
    /// [`TaskSettings::poll_interval`]: crate::tasks::TaskSettings::poll_interval
    /// [`Settings::tasks`]: crate::Settings::tasks
    pub fn task_store(mut self, store: impl crate::tasks::TaskStore) -> Self {
        self.task_store = Some(Arc::new(store));
        self
    }

    /// [`task_store`](Self::task_store) for a store shared with the caller (who keeps its own
    /// `Arc`, to look at it in tests, say).
    pub fn task_store_shared(mut self, store: Arc<dyn crate::tasks::TaskStore>) -> Self {
        self.task_store = Some(store);
        self
    }

    /// The bus to the other instances of a fleet (default: none, which is a
    /// [`LocalBus`](crate::bus::LocalBus): nothing crosses to another instance).
    ///
    /// With one, each change to what the server offers (`add_tool`, `remove_prompt`,
    /// `notify_resource_updated` and the like) is also published on the bus, and the changes
    /// other instances publish reach this server's legacy sessions and `subscriptions/listen`
    /// streams as if made here (they are not published again). A task of the server reads
    /// the bus and publishes its changes; it ends with the server. The registry stays this
    /// server's own: every instance of a fleet must be given the same tools, prompts and
    /// resources (a change tells the clients to list again, and each instance lists its own).
    ///
    /// # Panics
    ///
    /// [`build`](Self::build) and [`try_build`](Self::try_build) panic when called outside a
    /// Tokio runtime with a bus set (the bus task is spawned then).
    pub fn bus(mut self, bus: Arc<dyn crate::bus::Bus>) -> Self {
        self.bus = Some(bus);
        self
    }

    /// Who may call over Streamable HTTP (default: no guard; anyone the transport's other
    /// checks let through). `modelctx-auth` builds one for OAuth 2.1 access tokens; any
    /// [`Guard`](crate::Guard) does.
    ///
    /// [`Server::http_service`] and [`Server::serve_http`] set `ServerConfig::guard` to it, so
    /// every request to the endpoint is authenticated (401 without a valid token), and one
    /// that needs scopes ([`Tool::scopes`](crate::Tool::scopes) and the like) the token lacks
    /// gets 403. Before a handler runs, the server checks the scopes again with the guard that
    /// admitted the request ([`Guard::authorize`](crate::Guard::authorize)), refusing with a
    /// JSON-RPC error (-32000, `data.reason` `"insufficient_scope"`). Handlers read the caller
    /// with [`Context::auth`](crate::Context::auth).
    ///
    /// A `ServerConfig` that already carries a guard keeps it: that guard admits the requests
    /// (this one is then used only for grants a layer in front put in a request, which come
    /// with no guard of their own). A server built without this but served with a
    /// `ServerConfig::guard` checks scopes with that guard. Serving over stdio is unaffected:
    /// the MCP authorization rules are for HTTP, and a stdio server gets its credentials from
    /// its environment.
    ///
    /// ```
    /// use modelctx_server::{Guard, HttpConfig, NoArgs, Server, Tool};
    /// # use modelctx_server::{Challenge, Grant};
    /// # use axum::http::{StatusCode, request::Parts};
    /// #
    /// # /// Lets in one caller, who holds `files:read`.
    /// # #[derive(Debug)]
    /// # struct OneCaller;
    /// #
    /// # impl Guard for OneCaller {
    /// #     fn authenticate<'a>(
    /// #         &'a self,
    /// #         _: &'a Parts,
    /// #     ) -> std::pin::Pin<Box<dyn Future<Output = Result<Grant, Challenge>> + Send + 'a>> {
    /// #         let mut grant = Grant::new("local", "alice");
    /// #         grant.scopes = vec!["files:read".into()];
    /// #         Box::pin(std::future::ready(Ok(grant)))
    /// #     }
    /// #
    /// #     fn authorize(&self, grant: &Grant, needed: &[String]) -> Result<(), Challenge> {
    /// #         match needed.iter().all(|scope| grant.has_scope(scope)) {
    /// #             true => Ok(()),
    /// #             false => Err(Challenge::new(StatusCode::FORBIDDEN)),
    /// #         }
    /// #     }
    /// # }
    ///
    /// async fn rm(_: NoArgs) -> &'static str {
    ///     "removed"
    /// }
    ///
    /// # fn run(guard: impl Guard) -> Result<(), Box<dyn std::error::Error>> {
    /// let server = Server::builder("files", "1.0.0")
    ///     .auth(guard)
    ///     .tool(Tool::new("rm", rm).scopes(["files:write"]))
    ///     .build();
    /// let mcp = server.http_service(HttpConfig::default())?;
    /// # let _ = mcp;
    /// # Ok(()) }
    /// # run(OneCaller).unwrap();
    /// ```
    #[cfg(feature = "http")]
    pub fn auth(mut self, guard: impl modelctx_http::server::Guard) -> Self {
        self.guard = Some(Arc::new(guard));
        self
    }

    /// Serves the Agent Skills under `dir` (the Skills extension, `io.modelcontextprotocol/skills`):
    /// every directory below it holding a `SKILL.md` is a skill, at
    /// `skill://<its path under dir>/SKILL.md`, its files (nested skills' included) readable
    /// with `resources/read` and listed, with their `sha256:` digests and sizes, by
    /// `skills/list` and `skills/get`; every directory can be listed with
    /// `resources/directory/read`. The server declares the extension (with `directoryRead`) and
    /// the resources capability.
    ///
    /// The directory is read when the server is built, into memory, within
    /// [`skills_limits`](Self::skills_limits); reads are answered from what was read then.
    /// Hidden entries (names starting with `.`) are skipped, and files outside any skill are
    /// not served. [`try_build`](Self::try_build) returns [`RegisterError::Skills`] (and
    /// [`build`](Self::build) panics) for a symbolic link, a file that is not regular, a name
    /// that is not UTF-8, a `SKILL.md` without a `name` and `description` or whose `name` is
    /// not its directory's, a bound passed, or an I/O error. May be called more than once.
    pub fn skills_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.skills.dirs.push(dir.into());
        self
    }

    /// Serves a tree of skills given as files in memory, as [`skills_dir`](Self::skills_dir)
    /// serves a directory's: each file's `/`-separated path under the tree's root, and its
    /// bytes (files embedded in the binary with `include_bytes!`, or generated). A path with
    /// an empty, `.` or `..` name is refused ([`RegisterError::Skills`]).
    ///
    /// ```
    /// use modelctx_server::Server;
    ///
    /// let skill = "---\nname: greet\ndescription: Greets the user\n---\nSay hello.\n";
    /// let server = Server::builder("greeter", "1.0.0")
    ///     .skill_files([("greet/SKILL.md", skill)])
    ///     .build();
    /// # drop(server);
    /// ```
    pub fn skill_files<I, P, B>(mut self, files: I) -> Self
    where
        I: IntoIterator<Item = (P, B)>,
        P: Into<String>,
        B: Into<Vec<u8>>,
    {
        let files = files
            .into_iter()
            .map(|(p, b)| (p.into(), b.into()))
            .collect();
        self.skills.trees.push(files);
        self
    }

    /// The bounds of [`skills_dir`](Self::skills_dir) (default: [`SkillsLimits::default`],
    /// 512 files and 16 MiB a skill, 4096 files and 64 MiB in all, 16 levels deep).
    ///
    /// [`SkillsLimits::default`]: crate::SkillsLimits
    pub fn skills_limits(mut self, limits: crate::skills::SkillsLimits) -> Self {
        self.skills.limits = limits;
        self
    }

    /// Serves a skill built in code, its content generated when read (`"resources":
    /// "dynamic"`); see [`DynamicSkill`](crate::DynamicSkill). Declares the extension as
    /// [`skills_dir`](Self::skills_dir) does.
    pub fn skill(mut self, skill: crate::skills::DynamicSkill) -> Self {
        self.skills.dynamic.push(skill);
        self
    }

    /// Serves the skills of `source` besides the server's own (a gateway serving those of its
    /// servers): `skills/list`, `skills/get` and `resources/directory/read` ask it for what the
    /// server's own skills do not have, each time a client asks. Declares the extension, with
    /// `directoryRead`. The source's skill files are not read through it: they are read as the
    /// server's resources, which the caller serves.
    pub fn skills_source(mut self, source: impl crate::skills::SkillsSource) -> Self {
        self.skills.source = crate::skills::Source(Some(Arc::new(source)));
        self
    }

    /// Instructions for the client's model (`instructions`).
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// Settings.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Adds a `tower` layer around every request the server's handlers answer (see
    /// [`middleware`](crate::middleware): where the chain sits, what a layer's error becomes on
    /// the wire). Each call wraps the layers added before it: the last one added sees a request
    /// first (a `tower::ServiceBuilder` given at once applies its layers top to bottom). The
    /// chain is built once, by [`build`](Self::build), and shared by every connection and
    /// request: with a layer that needs the Tokio runtime when it is made (`tower`'s
    /// `RateLimit` starts its timer then), `build` runs inside one. Default: no layer, and
    /// requests go straight to their handlers.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use modelctx_server::Server;
    ///
    /// let server = Server::builder("s", "1.0.0")
    ///     .layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(60)))
    ///     .layer(tower::load_shed::LoadShedLayer::new())
    ///     .build();
    /// # drop(server);
    /// ```
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: crate::middleware::Layer<crate::middleware::Handlers> + Send + Sync + 'static,
        L::Service: crate::middleware::Service<
                crate::middleware::McpRequest,
                Response = crate::middleware::McpResponse,
            > + Send
            + 'static,
        <L::Service as crate::middleware::Service<crate::middleware::McpRequest>>::Error:
            Into<crate::middleware::BoxError>,
        <L::Service as crate::middleware::Service<crate::middleware::McpRequest>>::Future:
            Send + 'static,
    {
        self.layers.push(layer);
        self
    }

    /// Adds a tool (a later tool of the same name replaces an earlier one).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.declare_tools = true;
        self.tools.insert(tool.name.clone(), tool);
        self
    }

    /// Adds a prompt (a later prompt of the same name replaces an earlier one).
    pub fn prompt(mut self, prompt: Prompt) -> Self {
        self.declare_prompts = true;
        self.prompts.insert(prompt.name.clone(), prompt);
        self
    }

    /// Adds a resource (a later one at the same URI replaces an earlier one).
    pub fn resource(mut self, resource: Resource) -> Self {
        self.declare_resources = true;
        self.resources.insert(resource.uri.clone(), resource);
        self
    }

    /// Adds a resource template (a later one with the same template replaces an earlier one).
    pub fn resource_template(mut self, template: ResourceTemplate) -> Self {
        self.declare_resources = true;
        self.templates
            .insert(template.template.as_str().to_owned(), template);
        self
    }

    /// Declares the resources capability even without resources yet.
    pub fn declare_resources(mut self) -> Self {
        self.declare_resources = true;
        self
    }

    /// Declares the prompts capability even without prompts yet.
    pub fn declare_prompts(mut self) -> Self {
        self.declare_prompts = true;
        self
    }

    /// The key that seals the `requestState` of modern round trips (default: a random key of
    /// this process, id `local`). Servers behind a load balancer share one, so that any of them
    /// accepts the retry of a round trip another began. The shorthand for
    /// [`state_sealer`](Self::state_sealer)`(StateSealer::new(key))`; to rotate keys, use that.
    pub fn state_key(self, key: modelctx_session::state::StateKey) -> Self {
        self.state_sealer(modelctx_session::state::StateSealer::new(key))
    }

    /// The key ring that seals and opens the `requestState` of modern (2026-07-28) round trips
    /// (default: a random key of this process, id `local`, with the sealer's default time to
    /// live, 10 minutes): states are sealed with its current key and opened with the current
    /// key or any previous one ([`StateSealer::with_previous`]); a state sealed under a key id
    /// the ring does not hold is refused with -32602. Replaces an earlier
    /// [`state_key`](Self::state_key).
    ///
    /// Every instance of a fleet (servers behind one load balancer) must be given the same
    /// ring, so that the retry of a round trip lands on any of them. To rotate: give every
    /// instance the new key as current and the old one as previous, and drop the old one only
    /// once the states sealed with it have expired (one time to live after the last instance
    /// switched). Expiry is checked against each instance's own clock: the instances' clocks
    /// must be synchronized (NTP), or a state expires early or late by their difference.
    ///
    /// ```
    /// use modelctx_server::Server;
    /// use modelctx_server::{StateKey, StateSealer};
    ///
    /// # fn main() -> Result<(), modelctx_server::KeyError> {
    /// // In production the secrets come from configuration, the same on every instance.
    /// let current = StateKey::new("k2", vec![2u8; 32])?;
    /// let previous = StateKey::new("k1", vec![1u8; 32])?;
    /// let server = Server::builder("fleet", "1.0.0")
    ///     .state_sealer(StateSealer::new(current).with_previous(previous)?)
    ///     .build();
    /// # drop(server);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`StateSealer::with_previous`]: modelctx_session::state::StateSealer::with_previous
    pub fn state_sealer(mut self, sealer: modelctx_session::state::StateSealer) -> Self {
        self.state_sealer = Some(sealer);
        self
    }

    /// Declares the tools capability even without tools yet (they may be added while the server
    /// runs).
    pub fn declare_tools(mut self) -> Self {
        self.declare_tools = true;
        self
    }

    /// Gives handlers `state`: a handler that takes [`State<S>`](crate::State) gets a clone of
    /// it on each call (a later state of the same type replaces an earlier one). See
    /// [`State`](crate::State).
    pub fn state<S: Clone + Send + Sync + 'static>(mut self, state: S) -> Self {
        self.states.insert(state);
        self
    }

    /// The server.
    ///
    /// # Panics
    ///
    /// Where [`ServerBuilder::try_build`] returns an error, with that [`RegisterError`]'s text:
    /// a tool whose schema cannot be used (an unsupported dialect, an external `$ref`, too
    /// large or too deep for [`Settings::schema_limits`], a pattern the linear engine cannot
    /// match), a prompt with an argument that is never a string ([`Prompt::new`]), a tool,
    /// prompt, resource or template taking state of a type the builder was not given. Each is
    /// a mistake in the server's code, fixed there, and a server that kept such an item would
    /// fail every call to it. A server built from data read at run time (schemas from a file
    /// or another server) uses `try_build` to handle the error instead.
    ///
    /// ```should_panic
    /// use modelctx_server::{Prompt, Server};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Repeat { text: String, times: u32 }
    ///
    /// async fn repeat(args: Repeat) -> String {
    ///     args.text.repeat(args.times as usize)
    /// }
    ///
    /// // Panics: "prompt repeat: argument times is of type integer, but prompt arguments are
    /// // strings (`ServerBuilder::try_build` returns it instead)".
    /// let server = Server::builder("s", "1.0.0")
    ///     .prompt(Prompt::new("repeat", repeat))
    ///     .build();
    /// # drop(server);
    /// ```
    pub fn build(self) -> Server {
        match self.try_build() {
            Ok(server) => server,
            Err(error) => panic!("{error} (`ServerBuilder::try_build` returns it instead)"),
        }
    }

    /// The server, or the first reason (by tool name) [`Server::add_tool`] would refuse one of
    /// the builder's tools: [`RegisterError::Schema`] for a tool whose input or output schema
    /// cannot be used, [`RegisterError::MissingState`] for one that takes state of a type the
    /// builder was not given; then, by prompt name, [`RegisterError::PromptArgument`] for a
    /// prompt with an argument that is never a string and [`RegisterError::PromptMissingState`]
    /// for one that takes state the builder was not given; then
    /// [`RegisterError::ResourceMissingState`] for a resource (by URI), then a template (by
    /// its text), that does.
    ///
    /// ```
    /// use modelctx_server::{NoArgs, RegisterError, Server, Tool};
    ///
    /// async fn noop(_: NoArgs) -> &'static str {
    ///     ""
    /// }
    ///
    /// let mut schema = serde_json::Map::new();
    /// schema.insert("$ref".into(), "https://example.com/elsewhere.json".into());
    /// let result = Server::builder("s", "1.0.0")
    ///     .tool(Tool::with_input_schema("remote", schema, noop))
    ///     .try_build();
    /// assert!(matches!(result, Err(RegisterError::Schema { tool, .. }) if tool == "remote"));
    /// ```
    pub fn try_build(self) -> Result<Server, RegisterError> {
        let (server, refused) = self.assemble();
        match refused.into_iter().next() {
            Some(error) => Err(error),
            None => Ok(server),
        }
    }

    /// The server, and what `add_*` would have refused of its tools, prompts, resources and
    /// templates (by kind, then by name).
    fn assemble(mut self) -> (Server, Vec<RegisterError>) {
        // The skills first: their files are resources.
        let mut refused = Vec::new();
        let skills = std::mem::take(&mut self.skills);
        let declare_skills = !skills.is_empty();
        let mut catalog = crate::skills::Catalog::default();
        if declare_skills {
            self.declare_resources = true;
            match skills.build() {
                Ok((built, resources)) => {
                    catalog = built;
                    for resource in resources {
                        self.resources.insert(resource.uri.clone(), resource);
                    }
                }
                Err(error) => refused.push(RegisterError::Skills(error)),
            }
        }
        let mut capabilities = JsonObject::new();
        capabilities.insert("logging".into(), json!({}));
        if self.declare_tools {
            capabilities.insert("tools".into(), json!({"listChanged": true}));
        }
        if self.declare_prompts {
            capabilities.insert("prompts".into(), json!({"listChanged": true}));
        }
        if self.declare_resources {
            capabilities.insert(
                "resources".into(),
                json!({"subscribe": true, "listChanged": true}),
            );
        }
        if self.prompts.values().any(|p| !p.completers.is_empty())
            || self.templates.values().any(|t| !t.completers.is_empty())
        {
            capabilities.insert("completions".into(), json!({}));
        }
        if declare_skills {
            crate::skills::declare(&mut capabilities);
        }
        let declare_tasks = self.task_store.is_some()
            || self
                .tools
                .values()
                .any(|t| t.task_support != crate::tasks::TaskSupport::Forbidden);
        if declare_tasks {
            crate::tasks::declare(&mut capabilities);
            crate::tasks::legacy::declare(&mut capabilities);
        }
        let task_store = self
            .task_store
            .take()
            .unwrap_or_else(|| Arc::new(crate::tasks::MemoryTaskStore::new()));
        let task_settings = self.settings.tasks;
        let mut config = ServerConfig::new(&self.name, &self.version, capabilities);
        if let Some(versions) = self.versions {
            config.versions = versions;
        }
        config.instructions = self.instructions;
        config.limits.max_uri_len = self.settings.max_uri_len;
        config.list_cache = self.settings.list_cache;
        let (changes, _) = broadcast::channel(64);
        let sealer = self
            .state_sealer
            .unwrap_or_else(|| modelctx_session::state::StateSealer::new(random_key()));
        #[cfg(feature = "validation")]
        let schemas = modelctx_types::schema::SchemaCache::new(self.settings.schema_limits);
        // Every tool registered once: its schemas compiled, its header rules derived. What
        // `add_tool` would refuse is collected: `try_build` returns the first, `build` panics.
        let tools: BTreeMap<String, Arc<Registered>> = self
            .tools
            .into_iter()
            .map(|(name, tool)| {
                let registered = Registered::new(
                    tool,
                    #[cfg(feature = "validation")]
                    &schemas,
                );
                if let Some(error) = refusal(&registered, &self.states) {
                    refused.push(error);
                }
                (name, Arc::new(registered))
            })
            .collect();
        // So is a prompt taking state the server lacks or whose arguments are never strings,
        // and a resource or template taking state it lacks.
        refused.extend(
            self.prompts
                .values()
                .filter_map(|prompt| prompt_refusal(prompt, &self.states)),
        );
        refused.extend(
            self.resources
                .values()
                .filter_map(|r| resource_refusal(r.state, &r.uri, &self.states)),
        );
        refused.extend(
            self.templates
                .values()
                .filter_map(|t| resource_refusal(t.state, t.template.as_str(), &self.states)),
        );
        let (bus, outgoing) = match self.bus {
            Some(bus) => {
                let (link, outgoing) = crate::bus::BusLink::new(bus.clone());
                (Some(link), Some((bus, outgoing)))
            }
            None => (None, None),
        };
        let server = Server {
            shared: Arc::new(Shared {
                bus,
                sealer: Arc::new(sealer),
                limiter: Arc::new(crate::limits::Limiter::new(self.settings.limits)),
                modern_requests: Arc::new(tokio::sync::Semaphore::new(
                    self.settings.max_modern_requests,
                )),
                subscribe_hook: self.subscribe_hook,
                #[cfg(feature = "http")]
                legacy: crate::http::Legacy::new(self.session_store),
                load: LoadCounters::default(),
                #[cfg(feature = "validation")]
                schemas,
                config: Arc::new(config),
                settings: self.settings,
                registry: RwLock::new(Registry {
                    tools,
                    prompts: self.prompts,
                    resources: self.resources,
                    templates: self.templates,
                    skills: catalog,
                }),
                changes,
                state: Arc::new(self.states),
                tasks: Arc::new({
                    let tasks = crate::tasks::runner::Tasks::new(task_store, task_settings);
                    if let Some((bus, _)) = &outgoing {
                        tasks.join_fleet(bus.clone());
                    }
                    tasks
                }),
                #[cfg(feature = "http")]
                guard: self.guard,
                layers: self.layers.build(),
                #[cfg(feature = "otel")]
                metrics: crate::observe::Metrics::new(),
            }),
        };
        #[cfg(feature = "otel")]
        crate::observe::gauges(&server.shared);
        #[cfg(all(feature = "otel", feature = "http"))]
        crate::observe::transport_gauges(&server.shared);
        if let Some((bus, outgoing)) = outgoing {
            let shared = Arc::downgrade(&server.shared);
            tokio::spawn(crate::bus::run(shared, bus, outgoing));
        }
        (server, refused)
    }
}

/// Why a registered tool cannot be served: a schema that cannot be used, or state of a type the
/// server does not have.
fn refusal(registered: &Registered, states: &States) -> Option<RegisterError> {
    #[cfg(feature = "validation")]
    if let Some(source) = registered.unusable() {
        return Some(RegisterError::Schema {
            tool: registered.tool.name.clone(),
            source: source.clone(),
        });
    }
    match registered.tool.state {
        Some((id, type_name)) if !states.has(id) => Some(RegisterError::MissingState {
            tool: registered.tool.name.clone(),
            type_name,
        }),
        _ => None,
    }
}

/// Why a prompt cannot be served: an argument of its type is never a string, or its handler
/// takes state of a type the server does not have.
fn prompt_refusal(prompt: &Prompt, states: &States) -> Option<RegisterError> {
    if let Some(non_string) = &prompt.non_string {
        return Some(RegisterError::PromptArgument {
            prompt: prompt.name.clone(),
            argument: non_string.argument.clone(),
            found: non_string.found.clone(),
        });
    }
    match prompt.state {
        Some((id, type_name)) if !states.has(id) => Some(RegisterError::PromptMissingState {
            prompt: prompt.name.clone(),
            type_name,
        }),
        _ => None,
    }
}

/// Why a resource or template cannot be served: its handler takes state (`state`) of a type the
/// server does not have; `resource` (its URI, the template's text) names it in the error.
fn resource_refusal(
    state: Option<(std::any::TypeId, &'static str)>,
    resource: &str,
    states: &States,
) -> Option<RegisterError> {
    match state {
        Some((id, type_name)) if !states.has(id) => Some(RegisterError::ResourceMissingState {
            resource: resource.to_owned(),
            type_name,
        }),
        _ => None,
    }
}

/// A random key for this process's round trips.
fn random_key() -> modelctx_session::state::StateKey {
    let mut secret = [0u8; 32];
    // A guessable key would let clients forge round-trip state: no fallback.
    getrandom::fill(&mut secret).expect("the operating system's random number generator works");
    modelctx_session::state::StateKey::new("local", secret.to_vec())
        .expect("a valid id and a 32-byte secret")
}

/// What a server has under way: every count returns to zero when the work ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Load {
    /// Connections served (stdio, in-memory), and requests being served on their own
    /// (a legacy HTTP session's POST, a modern HTTP request): an idle legacy session counts none.
    pub connections: usize,
    /// Handlers running (those running as tasks aside).
    pub handlers: usize,
    /// Handlers running as tasks, in this process ([`tasks`](crate::tasks)).
    pub tasks: usize,
    /// Legacy HTTP sessions held by the server's Streamable HTTP endpoints (those of the
    /// deprecated HTTP+SSE transport included), from `initialize` (or adoption) until they end
    /// or are forgotten. The 2026-07-28 era has none: its requests count in
    /// [`connections`](Self::connections) while served. 0 without feature `http`.
    pub sessions: usize,
    /// SSE streams open on the server's endpoints: POST response streams of both eras (a
    /// 2026-07-28 `subscriptions/listen` stream among them), standalone GET streams and those
    /// GET resumes, until they end or their client goes away. 0 without feature `http`.
    pub streams: usize,
    /// Events the event store holds for resumption, across sessions and streams: the store of
    /// the endpoint configured last, when it can tell at once
    /// ([`EventStore::events_held`](crate::event_store::EventStore::events_held); the in-memory store
    /// does). `None` when it cannot, before the server is served over HTTP, and without
    /// feature `http`.
    pub events: Option<usize>,
}

impl Load {
    /// Whether nothing is under way or open: no connection, handler, task, session or stream.
    /// The events an event store keeps for resumption ([`events`](Self::events)) are left
    /// aside: they outlive the streams that wrote them, until their age passes.
    pub fn is_idle(&self) -> bool {
        let Load {
            connections,
            handlers,
            tasks,
            sessions,
            streams,
            events: _,
        } = *self;
        connections + handlers + tasks + sessions + streams == 0
    }
}

/// Why a change to what the server offers was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The server did not declare the capability (declare it when building).
    #[error("the server did not declare the {0} capability")]
    NotDeclared(&'static str),
    /// A tool's input or output schema cannot be used (an unsupported dialect, an external
    /// `$ref`, too large or too deep, a pattern the engine cannot match).
    #[cfg(feature = "validation")]
    #[error("tool {tool}: unusable schema: {source}")]
    Schema {
        /// The tool's name.
        tool: String,
        /// Why its schema cannot be used.
        source: modelctx_types::schema::SchemaError,
    },
    /// A tool's handler takes [`State`](crate::State) of a type the server was not given
    /// ([`ServerBuilder::state`]).
    #[error("tool {tool} takes state of type {type_name}, which the server was not given")]
    MissingState {
        /// The tool's name.
        tool: String,
        /// The type of the state.
        type_name: &'static str,
    },
    /// A prompt's handler takes [`State`](crate::State) of a type the server was not given
    /// ([`ServerBuilder::state`]).
    #[error("prompt {prompt} takes state of type {type_name}, which the server was not given")]
    PromptMissingState {
        /// The prompt's name.
        prompt: String,
        /// The type of the state.
        type_name: &'static str,
    },
    /// A prompt built with [`Prompt::new`] from a type with an argument that is never a string
    /// (a number, a `bool`, a `Vec`, a struct): prompt arguments are strings on the wire, so no
    /// `prompts/get` could be decoded.
    #[error("prompt {prompt}: argument {argument} is {found}, but prompt arguments are strings")]
    PromptArgument {
        /// The prompt's name.
        prompt: String,
        /// The argument's name.
        argument: String,
        /// What its type is instead (`of type integer`, `of type boolean or null`, ...).
        found: String,
    },
    /// A resource's or template's handler takes [`State`](crate::State) of a type the server
    /// was not given ([`ServerBuilder::state`]).
    #[error("resource {resource} takes state of type {type_name}, which the server was not given")]
    ResourceMissingState {
        /// The resource's URI, or the template's text.
        resource: String,
        /// The type of the state.
        type_name: &'static str,
    },
    /// The skills of [`ServerBuilder::skills_dir`] or [`ServerBuilder::skill`] cannot be
    /// served.
    #[error("skills: {0}")]
    Skills(#[from] crate::skills::SkillsError),
}

/// An MCP server: what it offers, served on any number of connections at once.
///
/// Cheap to clone (an `Arc`): every clone is the same server, so a handler that captures one
/// can change what the server offers while it runs.
///
/// ```no_run
/// use modelctx_server::{Server, Tool};
///
/// # #[derive(serde::Deserialize, schemars::JsonSchema)]
/// # struct Echo { text: String }
/// # async fn echo(args: Echo) -> String { args.text }
/// # async fn run() -> std::io::Result<()> {
/// let server = Server::builder("echo-server", "1.0.0")
///     .tool(Tool::new("echo", echo))
///     .build();
/// // One connection on stdin/stdout:
/// server.serve_stdio().await?;
/// // Or Streamable HTTP, both eras on one endpoint (feature `http`), until Ctrl-C or SIGTERM:
/// let config = modelctx_server::HttpConfig::default();
/// let signal = modelctx_server::shutdown_signal();
/// server.serve_http_until("127.0.0.1:8080", config, signal).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Server {
    pub(crate) shared: Arc<Shared>,
}

impl Server {
    /// A builder for a server named `name`, of version `version` (its `serverInfo`).
    ///
    /// ```
    /// use modelctx_server::{NoArgs, Server, Settings, Tool};
    ///
    /// async fn now(_: NoArgs) -> &'static str {
    ///     "noon"
    /// }
    ///
    /// let mut settings = Settings::default();
    /// settings.page_size = 50;
    /// let server = Server::builder("clock", "1.0.0")
    ///     .instructions("Tells the time.")
    ///     .settings(settings)
    ///     .tool(Tool::new("now", now).description("The time of day"))
    ///     .build();
    /// assert_eq!(server.load().connections, 0);
    /// ```
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> ServerBuilder {
        ServerBuilder {
            name: name.into(),
            version: version.into(),
            instructions: None,
            settings: Settings::default(),
            tools: BTreeMap::new(),
            prompts: BTreeMap::new(),
            resources: BTreeMap::new(),
            templates: BTreeMap::new(),
            declare_tools: false,
            declare_prompts: false,
            declare_resources: false,
            #[cfg(feature = "http")]
            guard: None,
            state_sealer: None,
            states: States::default(),
            subscribe_hook: None,
            versions: None,
            session_store: None,
            bus: None,
            task_store: None,
            skills: crate::skills::Pending::default(),
            layers: crate::middleware::Stack::default(),
        }
    }

    /// What the server has under way.
    pub fn load(&self) -> Load {
        use std::sync::atomic::Ordering::SeqCst;
        #[cfg(feature = "http")]
        let (sessions, streams, events) = self.shared.legacy.transport_load();
        #[cfg(not(feature = "http"))]
        let (sessions, streams, events) = (0, 0, None);
        Load {
            connections: self.shared.load.connections.load(SeqCst),
            handlers: self.shared.load.handlers.load(SeqCst),
            tasks: self.shared.tasks.running(),
            sessions,
            streams,
            events,
        }
    }

    fn declared(&self, capability: &'static str) -> Result<(), RegisterError> {
        if self.shared.config.capabilities.contains_key(capability) {
            Ok(())
        } else {
            Err(RegisterError::NotDeclared(capability))
        }
    }

    /// Adds (or replaces) a tool while the server runs; connected clients are told the list
    /// changed.
    ///
    /// ```
    /// use modelctx_server::{NoArgs, Server, Tool};
    ///
    /// async fn secret(_: NoArgs) -> &'static str {
    ///     "42"
    /// }
    ///
    /// // Declared when built, so that clients expect tools (and their list to change).
    /// let server = Server::builder("vault", "1.0.0").declare_tools().build();
    /// server.add_tool(Tool::new("secret", secret)).expect("tools are declared");
    /// assert!(server.remove_tool("secret"));
    /// ```
    pub fn add_tool(&self, tool: Tool) -> Result<(), RegisterError> {
        self.declared("tools")?;
        let registered = Registered::new(
            tool,
            #[cfg(feature = "validation")]
            &self.shared.schemas,
        );
        if let Some(error) = refusal(&registered, &self.shared.state) {
            return Err(error);
        }
        self.registry_mut()
            .tools
            .insert(registered.tool.name.clone(), Arc::new(registered));
        self.changed(Change::List(ListKind::Tools));
        Ok(())
    }

    /// Removes a tool; connected clients are told the list changed. Returns whether it existed.
    pub fn remove_tool(&self, name: &str) -> bool {
        let removed = self.registry_mut().tools.remove(name).is_some();
        if removed {
            self.changed(Change::List(ListKind::Tools));
        }
        removed
    }

    /// Adds (or replaces) a prompt while the server runs; connected clients are told. Refused
    /// ([`RegisterError::PromptMissingState`]) when its handler takes state of a type the
    /// server was not given, and ([`RegisterError::PromptArgument`]) when an argument of its
    /// type is never a string.
    pub fn add_prompt(&self, prompt: Prompt) -> Result<(), RegisterError> {
        self.declared("prompts")?;
        if let Some(refused) = prompt_refusal(&prompt, &self.shared.state) {
            return Err(refused);
        }
        self.registry_mut()
            .prompts
            .insert(prompt.name.clone(), prompt);
        self.changed(Change::List(ListKind::Prompts));
        Ok(())
    }

    /// Removes a prompt; connected clients are told. Returns whether it existed.
    pub fn remove_prompt(&self, name: &str) -> bool {
        let removed = self.registry_mut().prompts.remove(name).is_some();
        if removed {
            self.changed(Change::List(ListKind::Prompts));
        }
        removed
    }

    /// Adds (or replaces) a resource while the server runs; connected clients are told. Refused
    /// ([`RegisterError::ResourceMissingState`]) when its handler takes state of a type the
    /// server was not given.
    pub fn add_resource(&self, resource: Resource) -> Result<(), RegisterError> {
        self.declared("resources")?;
        if let Some(refused) = resource_refusal(resource.state, &resource.uri, &self.shared.state) {
            return Err(refused);
        }
        self.registry_mut()
            .resources
            .insert(resource.uri.clone(), resource);
        self.changed(Change::List(ListKind::Resources));
        Ok(())
    }

    /// Adds (or replaces) a resource template while the server runs; connected clients are told.
    /// Refused ([`RegisterError::ResourceMissingState`]) when its handler takes state of a type
    /// the server was not given.
    pub fn add_resource_template(&self, template: ResourceTemplate) -> Result<(), RegisterError> {
        self.declared("resources")?;
        let text = template.template.as_str();
        if let Some(refused) = resource_refusal(template.state, text, &self.shared.state) {
            return Err(refused);
        }
        self.registry_mut()
            .templates
            .insert(template.template.as_str().to_owned(), template);
        self.changed(Change::List(ListKind::Resources));
        Ok(())
    }

    /// Removes the resource template `uri_template`; connected clients are told. Returns
    /// whether it existed.
    pub fn remove_resource_template(&self, uri_template: &str) -> bool {
        let removed = self.registry_mut().templates.remove(uri_template).is_some();
        if removed {
            self.changed(Change::List(ListKind::Resources));
        }
        removed
    }

    /// Removes the resource at `uri`; connected clients are told. Returns whether it existed.
    pub fn remove_resource(&self, uri: &str) -> bool {
        let removed = self.registry_mut().resources.remove(uri).is_some();
        if removed {
            self.changed(Change::List(ListKind::Resources));
        }
        removed
    }

    /// Tells the clients subscribed to `uri` that it changed: legacy clients that subscribed
    /// with `resources/subscribe`, modern listen streams whose filter names it.
    pub fn notify_resource_updated(&self, uri: &str) {
        self.changed(Change::Updated(Arc::from(uri)));
    }

    /// Tells this server's connections of `change`, and (with a bus) the other instances.
    fn changed(&self, change: Change) {
        if let Some(link) = &self.shared.bus {
            link.publish(change.clone());
        }
        let _ = self.shared.changes.send(change);
    }

    fn registry_mut(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.shared
            .registry
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }
}
