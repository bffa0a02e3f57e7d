//! `mcx serve demo --http ADDR --redis URL`: the demo server as one instance of a fleet, any
//! number of them behind a plain (round-robin, not sticky) load balancer, sharing one Redis
//! (`modelctx-redis`).
//!
//! [`join`] connects to Redis and takes an instance number (leased; given back by [`leave`] when
//! the server stops gracefully, or free again 15 s after a process that died). [`share`] and
//! [`share_events`] give the server what the instances share: legacy sessions' states
//! ([`Fleet::session_store`]), the tasks ([`Fleet::task_store`]: a task created through one
//! instance is polled and cancelled through any), the bus between instances ([`Fleet::bus`])
//! and the legacy streams' events ([`Fleet::event_store`]).
//! The `requestState` key ring comes from `--state-key`, never from Redis (`state_keys.rs`).
//!
//! What it does not do: it does not check that the other instances serve the same server (a
//! fleet must make the same registrations on every instance), and it sets no
//! `max_sessions_per_peer`: behind a proxy every request comes from the proxy's address.

use std::sync::Arc;

use modelctx_redis::{Fleet, FleetConfig, FleetError};
use modelctx_server::{HttpConfig, ServerBuilder};

use crate::exit::{Failed, Kind};

/// Connects to the Redis at `url` with the default [`FleetConfig`] (every call bounded by 1 s)
/// and takes an instance number, said on stderr. The failure: a usage error (status 2) for a URL
/// or configuration that cannot be used, a connection error (status 3) when Redis cannot be
/// reached or used (too old, every number leased). The URL is not repeated in the message (it
/// may hold a password).
pub(crate) async fn join(url: &str) -> Result<Fleet, Failed> {
    match Fleet::connect(url, FleetConfig::new()).await {
        Ok(fleet) => {
            eprintln!(
                "mcx: joined the fleet on redis as instance {} ({})",
                fleet.instance(),
                fleet.holder()
            );
            Ok(fleet)
        }
        Err(error) => Err(refusal(&error)),
    }
}

/// How a failed [`join`] is told, and its exit status.
fn refusal(error: &FleetError) -> Failed {
    let kind = match error {
        FleetError::Url(_) | FleetError::Config(_) => Kind::Usage,
        _ => Kind::Connection,
    };
    Failed::new(kind, format!("--redis: {error}"))
}

/// `builder` with what the instances of `fleet` share through the server: the legacy sessions'
/// store, the task store (its default bounds: 10 000 tasks, 1000 per principal), and the bus
/// (changes, forwarded client messages, session ends).
pub(crate) fn share(builder: ServerBuilder, fleet: &Fleet) -> ServerBuilder {
    builder
        .session_store(Arc::new(fleet.session_store()))
        .task_store(fleet.task_store())
        .bus(Arc::new(fleet.bus()))
}

/// `config` with what the instances of `fleet` share through the HTTP transport: the legacy
/// streams' events (resumption on any instance).
pub(crate) fn share_events(config: HttpConfig, fleet: &Fleet) -> HttpConfig {
    config.event_store(Arc::new(fleet.event_store()))
}

/// Gives the instance number back (deletes the lease), when there is a fleet. A Redis that cannot
/// be reached is said on stderr: the number is then free once its lease runs out.
pub(crate) async fn leave(fleet: Option<Fleet>) {
    let Some(fleet) = fleet else {
        return;
    };
    let instance = fleet.instance();
    if let Err(error) = fleet.shutdown().await {
        eprintln!(
            "mcx: instance {instance} could not give its number back ({error}); it is free \
             again when its lease runs out"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_url_that_is_not_redis_is_a_usage_error() {
        let failed = join("http://example.com/").await.unwrap_err();
        assert_eq!(failed.kind, Kind::Usage, "{failed:?}");
        assert!(
            failed.message.starts_with("--redis: redis: invalid URL"),
            "{failed:?}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_redis_is_a_connection_error_without_the_password() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let failed = join(&format!("redis://user:hunter2@127.0.0.1:{port}/"))
            .await
            .unwrap_err();
        assert_eq!(failed.kind, Kind::Connection, "{failed:?}");
        assert_eq!(failed.kind.status(), 3);
        assert!(
            failed.message.starts_with("--redis: redis: cannot connect"),
            "{failed:?}"
        );
        assert!(!failed.message.contains("hunter2"), "{failed:?}");
    }
}
