//! The server facade's integration tests.
//!
//! One binary (one link step) for all of them: each file of this folder is a module.

#[cfg(feature = "http")]
mod auth;
mod common;
mod compile_fail;
mod handler_shapes;
mod input;
#[cfg(feature = "axum")]
mod mounted;
mod prompts;
mod resources;
mod robustness;
mod skills_source;
mod state_ring;
#[cfg(feature = "http")]
mod store;
mod tools;
mod versions;
