//! The workspace's integration tests: cross-crate, end-to-end and interop.
//!
//! One binary (one link step) for all of them: each file of this folder is a module.

mod auth;
mod auth_dpop;
mod auth_musts;
mod auth_ts;
mod client;
mod client_everything;
mod client_http;
mod examples;
mod fleet_harness;
mod fleet_legacy;
mod fleet_memory;
mod fleet_modern;
mod fleet_ts;
mod http_client;
mod http_client_robustness;
mod http_client_ts;
mod http_connections;
mod http_guard;
mod http_musts;
mod http_robustness;
mod http_server;
mod model;
mod oauth_client;
mod oauth_hostile;
mod oidc_as;
mod readme;
mod redis_bus;
mod redis_events;
mod redis_store;
mod redis_tasks;
mod robustness;
mod schema_validation;
mod server_bus;
mod server_http;
mod server_transports;
mod server_ts_clients;
mod skills;
mod sse_retry;
mod stdio;
mod tasks_client;
mod tasks_e2e;
mod tasks_legacy;
mod tasks_server;
mod traps;
