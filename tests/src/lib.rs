//! Shared helpers for the integration tests of the modelctx workspace.
