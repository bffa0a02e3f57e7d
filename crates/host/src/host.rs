//! The host: one client per configured server, kept up, behind one object.
//!
//! OWNER: the host-core work package (connections, status, reconnect, shutdown, routing,
//! `changes`). [`Shared`] is what the handlers (`handlers.rs`) read; add fields as needed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use modelctx_client::{CallOptions, Client, Elicitation, Elicited, InputError, model};
use modelctx_types::JsonObject;

use crate::catalog::{HostPrompt, HostResource, HostTemplate, HostTool, Namespace};
use crate::config::HostConfig;
use crate::policy::{DefaultPolicy, Policy};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The application's model: answers every server's `sampling/createMessage` (after the
/// [`Policy`]); its first argument is the asking server's config name.
pub(crate) type Sampler = Arc<
    dyn Fn(
            String,
            model::CreateMessageRequestParams,
        ) -> BoxFuture<Result<model::CreateMessageResult, InputError>>
        + Send
        + Sync,
>;

/// The application's elicitation handler (after the [`Policy`]); its first argument is the
/// asking server's config name.
pub(crate) type Elicitor =
    Arc<dyn Fn(String, Elicitation) -> BoxFuture<Result<Elicited, InputError>> + Send + Sync>;

/// What every connection of the host shares: settings, handlers, the policy.
pub(crate) struct Shared {
    pub(crate) client_name: String,
    pub(crate) client_version: String,
    pub(crate) policy: Arc<dyn Policy>,
    pub(crate) sampler: Option<Sampler>,
    pub(crate) elicitor: Option<Elicitor>,
    /// Roots every server sees, unless it has its own in `roots_per_server`.
    pub(crate) roots: Option<Vec<model::Root>>,
    pub(crate) roots_per_server: std::collections::BTreeMap<String, Vec<model::Root>>,
    pub(crate) connect_timeout: Duration,
}

/// Builds a [`Host`].
#[must_use]
pub struct HostBuilder {
    config: HostConfig,
    namespace: Namespace,
    shared: Shared,
}

impl std::fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuilder")
            .field("config", &self.config)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl HostBuilder {
    /// The host's name and version, as its clients tell each server.
    pub fn client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.shared.client_name = name.into();
        self.shared.client_version = version.into();
        self
    }

    /// How tools and prompts are named (default: `server__name`).
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = namespace;
        self
    }

    /// What the application approves (default: [`DefaultPolicy`]).
    pub fn policy(mut self, policy: impl Policy) -> Self {
        self.shared.policy = Arc::new(policy);
        self
    }

    /// The application's model, for every server's sampling requests (declares `sampling`).
    pub fn on_sampling<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(String, model::CreateMessageRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<model::CreateMessageResult, InputError>> + Send + 'static,
    {
        self.shared.sampler = Some(Arc::new(move |server, params| {
            Box::pin(handler(server, params))
        }));
        self
    }

    /// The application's elicitation handler, for every server (declares `elicitation`).
    pub fn on_elicitation<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(String, Elicitation) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Elicited, InputError>> + Send + 'static,
    {
        self.shared.elicitor = Some(Arc::new(move |server, e| Box::pin(handler(server, e))));
        self
    }

    /// Roots every server sees (declares `roots`).
    pub fn roots(mut self, roots: Vec<model::Root>) -> Self {
        self.shared.roots = Some(roots);
        self
    }

    /// Roots the server `server` sees instead of the shared ones.
    pub fn server_roots(mut self, server: impl Into<String>, roots: Vec<model::Root>) -> Self {
        self.shared.roots_per_server.insert(server.into(), roots);
        self
    }

    /// How long a server's connection may take when its entry does not say (default: 30 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.shared.connect_timeout = timeout;
        self
    }

    /// Connects every enabled server concurrently and returns once each one is connected or has
    /// failed its first attempt (the failed ones go on being retried in the background).
    pub async fn start(self) -> Host {
        let _ = (self.config, self.namespace, self.shared);
        unimplemented!("host-core work package")
    }
}

/// Many MCP servers behind one object. Cheap to clone (every clone is the same host).
#[derive(Clone)]
pub struct Host {
    #[allow(dead_code)]
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

impl Host {
    /// A builder of a host of the servers of `config`.
    pub fn builder(config: HostConfig) -> HostBuilder {
        HostBuilder {
            config,
            namespace: Namespace::default(),
            shared: Shared {
                client_name: "modelctx-host".into(),
                client_version: env!("CARGO_PKG_VERSION").into(),
                policy: Arc::new(DefaultPolicy),
                sampler: None,
                elicitor: None,
                roots: None,
                roots_per_server: Default::default(),
                connect_timeout: Duration::from_secs(30),
            },
        }
    }

    /// The status of every configured server, in config order.
    pub fn servers(&self) -> Vec<ServerStatus> {
        unimplemented!("host-core work package")
    }

    /// The client of `server` while it is connected (for what the host does not aggregate).
    pub fn client(&self, server: &str) -> Option<Client> {
        let _ = server;
        unimplemented!("host-core work package")
    }

    /// Every tool of every connected server, namespaced.
    pub fn tools(&self) -> Vec<HostTool> {
        unimplemented!("host-core work package")
    }

    /// Every resource of every connected server.
    pub fn resources(&self) -> Vec<HostResource> {
        unimplemented!("host-core work package")
    }

    /// Every resource template of every connected server.
    pub fn resource_templates(&self) -> Vec<HostTemplate> {
        unimplemented!("host-core work package")
    }

    /// Every prompt of every connected server, namespaced.
    pub fn prompts(&self) -> Vec<HostPrompt> {
        unimplemented!("host-core work package")
    }

    /// Calls the tool shown as `name` on its server, once the [`Policy`] approves; progress and
    /// timeout as in `options`; dropping the future cancels the call on the server.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: JsonObject,
        options: CallOptions,
    ) -> Result<model::CallToolResult, HostError> {
        let _ = (name, arguments, options);
        unimplemented!("host-core work package")
    }

    /// Reads `uri` from the server that has it.
    pub async fn read_resource(&self, uri: &str) -> Result<model::ReadResourceResult, HostError> {
        let _ = uri;
        unimplemented!("host-core work package")
    }

    /// Gets the prompt shown as `name` from its server.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: std::collections::BTreeMap<String, String>,
    ) -> Result<model::GetPromptResult, HostError> {
        let _ = (name, arguments);
        unimplemented!("host-core work package")
    }

    /// What changes from now on: the aggregate's lists, a server's state.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<HostEvent> {
        unimplemented!("host-core work package")
    }

    /// Closes every connection and stops every child process (bounded: stdin closed, then
    /// SIGTERM, then SIGKILL); the host serves nothing afterwards.
    pub async fn shutdown(&self) {
        unimplemented!("host-core work package")
    }
}

/// The status of one server.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerStatus {
    /// Its config name.
    pub name: String,
    /// Where it is.
    pub state: ServerState,
    /// The protocol version agreed, while connected.
    pub protocol_version: Option<modelctx_client::ProtocolVersion>,
    /// What the server says it is, while connected.
    pub server_info: Option<model::Implementation>,
}

/// Where a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerState {
    /// Its first connection is being made.
    Connecting,
    /// Connected: its tools, resources and prompts are in the aggregate.
    Ready,
    /// Its connection failed or ended; the next attempt is made after a backoff.
    Reconnecting {
        /// Attempts made in a row so far.
        attempt: u32,
        /// Why the last one failed or ended.
        error: String,
    },
    /// `"disabled": true` in the config: never started.
    Disabled,
    /// Stopped by [`Host::shutdown`].
    Stopped,
}

/// Something that changed in the host.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HostEvent {
    /// The aggregate's tools changed: list them again.
    ToolsChanged,
    /// The aggregate's prompts changed.
    PromptsChanged,
    /// The aggregate's resources or templates changed.
    ResourcesChanged,
    /// A resource a server was subscribed for changed.
    ResourceUpdated {
        /// The server.
        server: String,
        /// The resource.
        uri: String,
    },
    /// A server's state changed.
    Server {
        /// Its config name.
        name: String,
        /// Its new state.
        state: ServerState,
    },
}

/// Why the host could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// No tool is shown under this name.
    #[error("no tool named {0:?}")]
    UnknownTool(String),
    /// No prompt is shown under this name.
    #[error("no prompt named {0:?}")]
    UnknownPrompt(String),
    /// No server has this resource (or a template that matches it).
    #[error("no server has the resource {0:?}")]
    UnknownResource(String),
    /// The server that owns it is not connected now.
    #[error("server {server:?} is not connected ({state:?})")]
    NotConnected {
        /// The server.
        server: String,
        /// Where it is.
        state: ServerState,
    },
    /// The [`Policy`] refused.
    #[error("refused: {reason}")]
    Denied {
        /// Why.
        reason: String,
    },
    /// The server's answer was an error, or the connection failed.
    #[error("server {server:?}: {source}")]
    Server {
        /// The server.
        server: String,
        /// What the client saw.
        #[source]
        source: modelctx_client::Error,
    },
    /// The host was shut down.
    #[error("the host is shut down")]
    ShutDown,
}
