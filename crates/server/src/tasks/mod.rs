//! Tasks: a tool call answered with a handle the client polls, cancels and feeds input to,
//! while the same handler runs on its own.
//!
//! * [`store`]: the [`TaskStore`] where tasks live, bound to the principal that created them,
//!   and its bounded in-memory default, [`MemoryTaskStore`].

pub(crate) mod store;

/// The contract of [`TaskStore`] as checks any implementation runs in its tests (feature
/// `testing`).
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod conformance;

pub use store::{
    Clock, MemoryTaskStore, TaskPage, TaskRecord, TaskStatus, TaskStore, TaskStoreError,
    TaskStoreErrorKind, TaskStoreFuture, TaskUpdate, Updated,
};
