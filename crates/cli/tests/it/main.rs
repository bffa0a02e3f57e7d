//! The `mcx` binary's integration tests.
//!
//! One binary (one link step) for all of them: each file of this folder is a module.

mod auth;
mod cli;
mod errors;
mod proxy;
