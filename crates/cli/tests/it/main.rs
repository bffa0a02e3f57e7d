//! The `mcx` binary's integration tests.
//!
//! One binary (one link step) for all of them: each file of this folder is a module.

mod answers;
mod auth;
mod cli;
mod demo_walk;
mod errors;
mod host;
mod login;
mod otel;
mod proxy;
mod reach;
mod serve;
mod servers;
mod skills;
mod tasks;
