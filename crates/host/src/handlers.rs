//! The client of one server: its builder with the host's handlers (sampling through the policy
//! to the application's model, elicitation, roots) and its OAuth.
//!
//! OWNER: the policy work package. The host core calls [`client_builder`] for every connection
//! it makes (first and again after a reconnect).

use std::sync::Arc;

use modelctx_client::ClientBuilder;

use crate::config::ServerConfig;
use crate::host::Shared;

/// The builder of the client of `server`, with the host's handlers and settings in `shared`.
pub(crate) fn client_builder(server: &ServerConfig, shared: &Arc<Shared>) -> ClientBuilder {
    let _ = server;
    modelctx_client::Client::builder(&shared.client_name, &shared.client_version)
}
