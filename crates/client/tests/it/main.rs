//! The client facade's integration tests, against scripted fake servers.
//!
//! One binary (one link step) for all of them: each file of this folder is a module.

mod answering;
#[cfg(feature = "auth")]
mod auth;
mod backpressure;
mod common;
mod connecting;
mod junk;
mod scripted;
mod tasks;
mod wire;
