//! Tasks: a tool call answered with a handle (a task) that the client polls, feeds input to
//! and cancels, while the tool's handler runs on its own.
//!
//! * A tool declares whether it runs as a task with [`Tool::task_support`]
//!   ([`TaskSupport::Forbidden`] by default). The same handler code runs either way.
//! * In 2026-07-28 (the `io.modelcontextprotocol/tasks` extension, SEP-2663) the server
//!   decides: a call of a tool of [`TaskSupport::Optional`] or [`TaskSupport::Required`] from a
//!   client that declares the extension in the request's `_meta` capabilities is answered at
//!   once with a `CreateTaskResult` (`resultType: "task"`), and the handler runs as that task.
//!   Without the extension, an optional tool is called as usual and a required one is refused
//!   with -32021 (`requiredCapabilities.extensions["io.modelcontextprotocol/tasks"]`).
//!   `tasks/get` answers the task's state with its result, error or questions inlined,
//!   `tasks/update` brings answers to its questions (`inputResponses`), and `tasks/cancel`
//!   cancels it; each of the three needs the extension in the request (-32021 without) and
//!   answers -32602 for an id the caller does not own (unknown, another principal's, expired).
//! * While it runs as a task, the handler's [`Context`] records on the task: progress and
//!   [`Context::set_status_message`] set its `statusMessage`; a question
//!   ([`Context::elicit`], [`Context::sample`], [`Context::list_roots`]) makes it
//!   `input_required` with the question under `inputRequests` until `tasks/update` answers it
//!   (then the handler goes on from where it waited, it does not run again); `tasks/cancel`
//!   fires [`Context::cancelled`] and settles the task `cancelled`. Its result settles it
//!   `completed` (a failed call included, `isError`), a JSON-RPC error (or a panic) `failed`.
//!   Log messages are not sent (the extension has no stream for them).
//! * The task is kept in the server's [`TaskStore`] ([`ServerBuilder::task_store`]; a bounded
//!   [`MemoryTaskStore`] by default), bound to the caller's principal, for its time to live
//!   from its creation ([`TaskSettings::ttl`]), then forgotten. At most
//!   [`TaskSettings::max_running`] handlers run as tasks at once; a call beyond, or beyond the
//!   store's bound, is refused with -32000 (`data.reason`: `"too_many_tasks"`).
//! * In a fleet (a store shared by many processes, [`TaskStore::instance`]) each task names the
//!   instance running its handler. When that instance dies, the shared store settles its tasks
//!   not yet finished (`working` or `input_required`) `failed` ("the instance running this task
//!   stopped", [`ORPHANED`]) as soon as any instance reads them (`tasks/get`, `tasks/result`,
//!   `tasks/list`, `tasks/update`, `tasks/cancel`), instead of leaving them `working` until
//!   their time to live.
//!
//! * Each change of a task is told without waiting for a poll: a 2025-11-25 task's connection or
//!   legacy HTTP session gets `notifications/tasks/status`; a `subscriptions/listen` stream that
//!   names the task in its `taskIds` (the extension declared on the listen request, -32021
//!   otherwise) gets `notifications/tasks` with the task as `tasks/get` gives it, for tasks of
//!   its own principal only. Queues are bounded (the oldest state is dropped, never the latest).
//!
//! What it does not do (yet): tasks for requests other than `tools/call`, answers reaching a
//! task that runs in another process of a fleet (a shared store carries the task's state, not
//! its handler), and status notifications for changes made in another process.
//!
//! [`Tool::task_support`]: crate::Tool::task_support
//! [`Context`]: crate::Context
//! [`Context::set_status_message`]: crate::Context::set_status_message
//! [`Context::elicit`]: crate::Context::elicit
//! [`Context::sample`]: crate::Context::sample
//! [`Context::list_roots`]: crate::Context::list_roots
//! [`Context::cancelled`]: crate::Context::cancelled
//! [`ServerBuilder::task_store`]: crate::ServerBuilder::task_store

use std::time::Duration;

pub(crate) mod legacy;
pub(crate) mod runner;
pub(crate) mod store;
pub(crate) mod wire;

pub use legacy::ClientTask;
/// The contract of [`TaskStore`] as checks any implementation runs in its tests (feature
/// `testing`).
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod conformance;

pub use store::{
    Clock, MemoryTaskStore, ORPHANED, TaskPage, TaskRecord, TaskStatus, TaskStore, TaskStoreError,
    TaskStoreErrorKind, TaskStoreFuture, TaskUpdate, Updated,
};

/// The key of the tasks extension in `capabilities.extensions`.
pub const EXTENSION_ID: &str = "io.modelcontextprotocol/tasks";

/// Why [`Context::detach`](crate::Context::detach) did not make a task.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DetachError {
    /// The request cannot become a task: its tool was not declared with
    /// [`Tool::task_on_detach`](crate::Tool::task_on_detach), or its client does not support
    /// tasks, or it was detached already. The handler goes on as a plain call.
    #[error("this request cannot become a task")]
    NotAllowed,
    /// The task could not be made (too many tasks, the store failed): the request is answered
    /// with this error, and the handler should end.
    #[error("the task could not be made: {}", .0.message)]
    Refused(modelctx_types::ErrorObject),
}

/// Declares the extension in `capabilities` (`extensions["io.modelcontextprotocol/tasks"]`,
/// an empty object: it has no settings).
pub(crate) fn declare(capabilities: &mut modelctx_types::JsonObject) {
    let extensions = capabilities
        .entry("extensions")
        .or_insert_with(|| serde_json::Value::Object(modelctx_types::JsonObject::new()));
    if let serde_json::Value::Object(extensions) = extensions {
        extensions.insert(EXTENSION_ID.into(), serde_json::json!({}));
    }
}

/// Whether a tool runs as a task ([`Tool::task_support`](crate::Tool::task_support)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TaskSupport {
    /// Never as a task (the default).
    #[default]
    Forbidden,
    /// As a task when the client supports tasks, else as a plain call.
    Optional,
    /// Only as a task: a client that does not support tasks gets an error.
    Required,
}

impl TaskSupport {
    /// The protocol's string (`execution.taskSupport` of 2025-11-25): `"forbidden"`,
    /// `"optional"` or `"required"`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }
}

/// How a server keeps and runs tasks ([`Settings::tasks`](crate::Settings::tasks)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskSettings {
    /// How long a task is kept from its creation (`ttlMs`; default one hour). `None` keeps
    /// tasks until the store's bound pushes new ones away (not recommended).
    pub ttl: Option<Duration>,
    /// How often clients are told to poll (`pollIntervalMs`; default one second).
    pub poll_interval: Duration,
    /// The most handlers running as tasks at once, in this process (default 256).
    pub max_running: usize,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            ttl: Some(Duration::from_secs(3600)),
            poll_interval: Duration::from_secs(1),
            max_running: 256,
        }
    }
}

impl TaskSettings {
    /// The time to live in milliseconds, as `ttlMs` gives it.
    pub(crate) fn ttl_ms(&self) -> Option<u64> {
        self.ttl
            .map(|ttl| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
    }

    /// The poll interval in milliseconds, as `pollIntervalMs` gives it.
    pub(crate) fn poll_interval_ms(&self) -> u64 {
        u64::try_from(self.poll_interval.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}
