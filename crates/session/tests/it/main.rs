//! The session's integration tests: a client and a server session joined in memory.
//!
//! One binary (one link step) for all of them: each file of this folder is a module.

mod batches;
mod common;
mod interleavings;
mod modern;
mod negotiation;
mod pair;
mod resume;
