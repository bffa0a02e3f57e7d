//! The Streamable HTTP server: one MCP endpoint for both eras.
//!
//! [`McpService`] is a `tower::Service` over `http::Request`s, to mount in an axum or hyper
//! application; [`serve`] runs it on its own. The application behind it implements [`McpApp`]:
//! the transport hands it input with a handle to answer on, and keeps the HTTP rules (sessions,
//! streams, event ids, status codes, security) to itself.

mod app;
mod config;
pub(crate) mod counters;
mod endpoint;
mod guard;
mod legacy;
mod modern;
#[cfg(feature = "legacy-sse")]
mod old_sse;
mod respond;
mod serve;
mod service;

pub use app::{
    Adopted, Closed, LegacyHandler, LegacySession, McpApp, ModernReply, ModernRequest, PeerAddr,
    Principal, RequestContext, StreamClosed, Unavailable,
};
pub use config::{ConfigError, ServerConfig};
pub use counters::Counters;
pub use endpoint::TableSizes;
pub use guard::{Challenge, Grant, Guard, Metadata};
#[cfg(feature = "legacy-sse")]
pub use old_sse::OldSsePaths;
pub use respond::ResponseBody;
pub use serve::{RunningServer, Serving, ShutdownHandle, serve, serve_on, shutdown_signal};
pub use service::McpService;
