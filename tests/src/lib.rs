//! Shared helpers for the integration tests of the modelctx workspace.

/// The examples in the project's README.md, compiled and run as doctests so they stay true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
