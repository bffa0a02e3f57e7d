//! The client of one server: its builder with the host's handlers (sampling through the policy
//! to the application's model, elicitation, roots) and its OAuth.
//!
//! The host core calls [`client_builder`] for every connection it makes (first and again after
//! a reconnect). What the builder gets:
//! - sampling, when the application gave a model ([`HostBuilder::on_sampling`]): each request
//!   goes to [`Policy::approve_sampling`] (which may edit it), then to the model with the asking
//!   server's name and the edited request; a refusal is the client's [`InputError`] with the
//!   policy's reason (a legacy server gets it as a JSON-RPC error, code -32603, the reason as
//!   the message; in the modern era the call that needed the input fails in the client);
//! - elicitation, form and URL mode, when the application gave a handler
//!   ([`HostBuilder::on_elicitation`]): [`Policy::approve_elicitation`] first, likewise;
//! - roots, when the server has its own ([`HostBuilder::server_roots`]) or the host has shared
//!   ones ([`HostBuilder::roots`]) at connection time: answered from the host's table as it is
//!   when asked, so a change made since is seen (the host then calls the client's
//!   `roots_changed`);
//! - OAuth ([`HostBuilder::oauth`]) for an HTTP server whose entry sets no `Authorization`
//!   header: the host's one [`OAuth`](modelctx_client::auth::OAuth) client, whose token store
//!   keeps each server's tokens under its URL (per authorization server and resource);
//! - its connection timeout: the entry's `timeout`, else [`HostBuilder::connect_timeout`].
//!
//! [`HostBuilder::on_sampling`]: crate::HostBuilder::on_sampling
//! [`HostBuilder::on_elicitation`]: crate::HostBuilder::on_elicitation
//! [`HostBuilder::server_roots`]: crate::HostBuilder::server_roots
//! [`HostBuilder::roots`]: crate::HostBuilder::roots
//! [`HostBuilder::oauth`]: crate::HostBuilder::oauth
//! [`HostBuilder::connect_timeout`]: crate::HostBuilder::connect_timeout
//! [`Policy::approve_sampling`]: crate::Policy::approve_sampling
//! [`Policy::approve_elicitation`]: crate::Policy::approve_elicitation

use std::sync::{Arc, PoisonError};

use modelctx_client::{ClientBuilder, InputError, model};

use crate::config::{ServerConfig, TransportConfig};
use crate::host::Shared;
use crate::policy::{Decision, ElicitationRequest, SamplingRequest};

/// The builder of the client of `server`, with the host's handlers and settings in `shared`.
pub(crate) fn client_builder(server: &ServerConfig, shared: &Arc<Shared>) -> ClientBuilder {
    let mut builder = modelctx_client::Client::builder(&shared.client_name, &shared.client_version)
        .connect_timeout(Some(server.timeout.unwrap_or(shared.connect_timeout)));
    if let Some(sampler) = &shared.sampler {
        let (sampler, policy, name) = (sampler.clone(), shared.policy.clone(), server.name.clone());
        builder = builder.on_sampling(move |params| {
            let (sampler, policy, name) = (sampler.clone(), policy.clone(), name.clone());
            async move {
                let mut request = SamplingRequest::new(name, params);
                match policy.approve_sampling(&mut request).await {
                    Decision::Allow => sampler(request.server, request.params).await,
                    Decision::Deny { reason } => Err(InputError::new(reason)),
                }
            }
        });
    }
    if let Some(elicitor) = &shared.elicitor {
        let (elicitor, policy, name) =
            (elicitor.clone(), shared.policy.clone(), server.name.clone());
        builder = builder
            .on_elicitation(move |elicitation| {
                let (elicitor, policy, name) = (elicitor.clone(), policy.clone(), name.clone());
                async move {
                    let request = ElicitationRequest::new(name, elicitation);
                    match policy.approve_elicitation(&request).await {
                        Decision::Allow => elicitor(request.server, request.elicitation).await,
                        Decision::Deny { reason } => Err(InputError::new(reason)),
                    }
                }
            })
            .url_elicitation();
    }
    if roots_of(&server.name, shared).is_some() {
        let (shared, name) = (shared.clone(), server.name.clone());
        builder = builder.on_roots(move || {
            let roots = roots_of(&name, &shared).unwrap_or_default();
            std::future::ready(Ok(roots))
        });
    }
    if let (Some(oauth), TransportConfig::Http { headers, .. }) = (&shared.oauth, &server.transport)
        && !headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case("authorization"))
    {
        builder =
            builder.auth(Arc::new(oauth.clone()) as Arc<dyn modelctx_client::auth::Authorizer>);
    }
    builder
}

/// The roots `server` sees now: its own, else the shared ones; `None` when there are neither.
fn roots_of(server: &str, shared: &Shared) -> Option<Vec<model::Root>> {
    let own = shared
        .roots_per_server
        .read()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(roots) = own.get(server) {
        return Some(roots.clone());
    }
    drop(own);
    shared
        .roots
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}
