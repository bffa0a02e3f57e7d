//! An MCP host: many MCP servers behind one object.
//!
//! The MCP architecture has three roles: a *host* (the AI application) creates and manages
//! several *clients*, one per *server*, enforces security and consent, coordinates sampling and
//! aggregates the context of every server. [`modelctx_client`] is one client; this crate is the
//! host around many of them:
//!
//! - [`HostConfig`] reads the `mcpServers` JSON config that Claude Desktop, Claude Code, Cursor,
//!   VS Code (`servers`) and LangChain's `MultiServerMCPClient` (`transport`) read, with
//!   `${VAR}` / `${VAR:-default}` expansion; a bad entry is reported by name and line.
//! - [`Host`] connects one client per server concurrently (a per-server timeout; a server that
//!   fails does not stop the others), keeps each one up (reconnect with backoff, per-server
//!   [`ServerStatus`]), and stops every child on [`Host::shutdown`]. A task per server (its
//!   supervisor) follows its connection: a closed connection, or a health probe the transport
//!   fails, takes its items out of the aggregate until it is back; what changes is published on
//!   [`Host::changes`].
//! - One view of every server's tools, resources, templates and prompts ([`Host::tools`], ...),
//!   namespaced (`server__tool` by default, see [`Namespace`]) and updated on `list_changed`;
//!   calls, reads and prompt gets are routed to the server that owns them.
//! - A [`Policy`] the application implements approves each tool call (with its annotations),
//!   sampling request (which it may edit) and elicitation; one sampling handler (the
//!   application's model) answers every server.
//!
//! What it does not do: it has no model and no user interface (the application gives the
//! sampling handler and answers the [`Policy`]); it does not follow servers' tasks for the
//! application ([`Host::call_tool_as_task`] routes a call as a task and returns the server's
//! [`TaskHandle`](modelctx_client::TaskHandle), which the application follows); the aggregate it serves as one MCP server
//! (feature `gateway`) is a server in its own right, not a byte-for-byte relay. It does not
//! replay a call lost when its server went away (it fails with [`HostError::Server`]), gives up
//! on no server (a failing one is tried again, with backoff, until shutdown), and passes a
//! stdio server only the variables of its entry's `env` over a small inherited set (`HOME`,
//! `PATH`, `USER`, ...: see [`HostBuilder::start`]), not the host's whole environment.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod catalog;
pub mod config;
mod handlers;
mod host;
pub mod policy;

#[cfg(feature = "gateway")]
#[cfg_attr(docsrs, doc(cfg(feature = "gateway")))]
pub mod gateway;

pub use catalog::{
    Collision, CollisionReason, EntryKind, HostPrompt, HostResource, HostTemplate, HostTool,
    MAX_NAME_CHARS, Namespace,
};
pub use config::{ConfigError, ConfigErrors, HostConfig, ServerConfig, TransportConfig};
#[doc(hidden)]
pub use host::TableSizes;
pub use host::{Host, HostBuilder, HostError, HostEvent, ServerState, ServerStatus};
pub use policy::{Decision, DefaultPolicy, Policy, PolicyFile, Rules};

pub use modelctx_client as client;
pub use modelctx_client::model;
