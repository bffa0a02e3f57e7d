//! Where tasks live: a [`TaskRecord`] per task behind a [`TaskStore`] ([`MemoryTaskStore`] by
//! default), as plain, serializable data, so that a store elsewhere (Redis) can keep the tasks of
//! a server of many processes.
//!
//! A record is what `tasks/get` answers from: the task's status and message, its timestamps, its
//! time to live, the questions it waits on (`inputRequests`), and once settled its result or
//! error. It is bound to the principal that created it: every call names the caller's principal,
//! and a record of another principal is answered as if there were none. What runs the task (the
//! handler, its cancellation token, the channels its answers come by) is not in the store: it
//! belongs to the process running it (the runner, `tasks::runner`).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use modelctx_types::{ErrorObject, JsonObject};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A future a [`TaskStore`] returns.
pub type TaskStoreFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, TaskStoreError>> + Send + 'a>>;

/// The status of a task (the protocol's `TaskStatus`, the same in both eras).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The request is being processed.
    Working,
    /// The task waits for answers to its questions (`inputRequests`).
    InputRequired,
    /// The request completed: the task has its `result` (a tool's failed call included, as
    /// `isError`).
    Completed,
    /// The request failed with a JSON-RPC error: the task has its `error`.
    Failed,
    /// The task was cancelled before it completed.
    Cancelled,
}

impl TaskStatus {
    /// The protocol's string (`"working"`, `"input_required"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the status is final (`completed`, `failed` or `cancelled`): a task in it never
    /// changes again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One task, as plain, serializable data (serde: a JSON object of camelCase members, times in
/// milliseconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TaskRecord {
    /// The task's id: random, unguessable (128 bits), minted by the server.
    pub task_id: String,
    /// The principal that created the task (`None`: an unauthenticated caller, stdio). Only
    /// callers of the same principal see the task.
    pub principal: Option<String>,
    /// The method of the request the task runs (`tools/call`).
    pub method: String,
    /// The protocol version of that request (its result is written for it).
    pub protocol_version: String,
    /// The status.
    pub status: TaskStatus,
    /// What the status is about, for people (`statusMessage`).
    pub status_message: Option<String>,
    /// When the task was created.
    pub created_ms: u64,
    /// When it last changed.
    pub last_updated_ms: u64,
    /// How long the task is kept from its creation (`None`: until the store is emptied).
    pub ttl_ms: Option<u64>,
    /// How often the client should poll (`pollIntervalMs`).
    pub poll_interval_ms: Option<u64>,
    /// The questions the task waits on (`inputRequests`): key to `{method, params}`.
    pub input_requests: JsonObject,
    /// The result of a completed task, written for `protocol_version`.
    pub result: Option<JsonObject>,
    /// The JSON-RPC error of a failed task (`{code, message, data?}`).
    pub error: Option<JsonObject>,
    /// The instance of a fleet whose process runs the task's handler, in the terms of the store
    /// it shares ([`TaskStore::instance`]; `RedisTaskStore`: `N:host:pid`, its instance number
    /// and lease holder). `None` (the default, not serialized) in a store of one process. A
    /// shared store settles the task `failed` once that instance is gone
    /// ([`TaskUpdate::orphaned`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

impl TaskRecord {
    /// A new task `task_id`, `working`, created at `now` by `principal` for a request of
    /// `method` in `protocol_version`.
    pub fn new(
        task_id: impl Into<String>,
        principal: Option<String>,
        method: impl Into<String>,
        protocol_version: impl Into<String>,
        now: SystemTime,
    ) -> TaskRecord {
        let now = millis(now);
        TaskRecord {
            task_id: task_id.into(),
            principal,
            method: method.into(),
            protocol_version: protocol_version.into(),
            status: TaskStatus::Working,
            status_message: None,
            created_ms: now,
            last_updated_ms: now,
            ttl_ms: None,
            poll_interval_ms: None,
            input_requests: JsonObject::new(),
            result: None,
            error: None,
            instance: None,
        }
    }

    /// Sets the instance running the task's handler (`TaskRecord::instance`; `None`: a store
    /// of one process).
    pub fn instance(mut self, instance: Option<String>) -> TaskRecord {
        self.instance = instance;
        self
    }

    /// Sets the time to live (`None`: unlimited).
    pub fn ttl_ms(mut self, ttl_ms: Option<u64>) -> TaskRecord {
        self.ttl_ms = ttl_ms;
        self
    }

    /// Sets the poll interval.
    pub fn poll_interval_ms(mut self, poll_interval_ms: Option<u64>) -> TaskRecord {
        self.poll_interval_ms = poll_interval_ms;
        self
    }

    /// When the task expires (milliseconds since the Unix epoch), if it does.
    pub fn expires_ms(&self) -> Option<u64> {
        self.ttl_ms.map(|ttl| self.created_ms.saturating_add(ttl))
    }

    /// Whether the task has expired at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_ms().is_some_and(|at| at <= now_ms)
    }

    /// Whether `principal` may see the task.
    pub fn belongs_to(&self, principal: Option<&str>) -> bool {
        self.principal.as_deref() == principal
    }

    /// Applies `update` at `now_ms` (the rules every store follows, see [`TaskUpdate`]): the
    /// keys of the questions it answered, or `None` when the task is terminal (nothing changes).
    pub fn apply(&mut self, update: &TaskUpdate, now_ms: u64) -> Option<Vec<String>> {
        if self.status.is_terminal() {
            return None;
        }
        let mut answered = Vec::new();
        for key in &update.answered {
            if self.input_requests.remove(key).is_some() {
                answered.push(key.clone());
            }
        }
        for (key, request) in &update.input_requests {
            self.input_requests.insert(key.clone(), request.clone());
        }
        if let Some(message) = &update.status_message {
            self.status_message = Some(message.clone());
        }
        let settled = if let Some(error) = &update.error {
            self.error = Some(error.clone());
            Some(TaskStatus::Failed)
        } else if let Some(result) = &update.result {
            self.result = Some(result.clone());
            Some(TaskStatus::Completed)
        } else {
            update.status.filter(|s| s.is_terminal())
        };
        self.status = match settled {
            Some(terminal) => {
                self.input_requests.clear();
                terminal
            }
            None if self.input_requests.is_empty() => TaskStatus::Working,
            None => TaskStatus::InputRequired,
        };
        self.last_updated_ms = now_ms.max(self.last_updated_ms);
        Some(answered)
    }
}

/// A change to a task, applied at once by [`TaskStore::update`].
///
/// The rules (every store applies them atomically, as [`TaskRecord::apply`] does):
/// * a terminal task (`completed`, `failed`, `cancelled`) never changes: the update is not
///   applied;
/// * the `answered` keys are removed from the task's `inputRequests` (keys it does not wait on
///   are ignored), then `input_requests` are added;
/// * an `error` settles the task `failed`, else a `result` settles it `completed`, else a
///   terminal `status` settles it so (`cancelled`); settling clears the `inputRequests`;
/// * otherwise the status follows the questions: `input_required` while any is open, else
///   `working` (a non-terminal `status` is not needed, and ignored);
/// * `status_message`, when given, replaces the message; `lastUpdatedAt` is the store's now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TaskUpdate {
    /// A terminal status to settle in (`cancelled`; `completed` and `failed` come with
    /// [`result`](TaskUpdate::result) and [`error`](TaskUpdate::error)).
    pub status: Option<TaskStatus>,
    /// The new status message.
    pub status_message: Option<String>,
    /// Questions the task now waits on, by key.
    pub input_requests: JsonObject,
    /// Keys of questions answered.
    pub answered: Vec<String>,
    /// The result: the task is `completed`.
    pub result: Option<JsonObject>,
    /// The JSON-RPC error (`{code, message, data?}`): the task is `failed`.
    pub error: Option<JsonObject>,
}

impl TaskUpdate {
    /// An update that changes nothing (but `lastUpdatedAt`).
    pub fn new() -> TaskUpdate {
        TaskUpdate::default()
    }

    /// Settles the task `cancelled`.
    pub fn cancel() -> TaskUpdate {
        TaskUpdate {
            status: Some(TaskStatus::Cancelled),
            ..TaskUpdate::default()
        }
    }

    /// Settles the task `completed` with `result`.
    pub fn complete(result: JsonObject) -> TaskUpdate {
        TaskUpdate {
            result: Some(result),
            ..TaskUpdate::default()
        }
    }

    /// Settles the task `failed` with `error`.
    pub fn fail(error: &ErrorObject) -> TaskUpdate {
        let error = match serde_json::to_value(error) {
            Ok(Value::Object(error)) => error,
            _ => {
                let mut object = JsonObject::new();
                object.insert("code".into(), Value::from(error.code.0));
                object.insert("message".into(), Value::from(error.message.clone()));
                object
            }
        };
        TaskUpdate {
            error: Some(error),
            ..TaskUpdate::default()
        }
    }

    /// Settles the task `failed` because the instance of a fleet running its handler stopped
    /// (killed, crashed, cut off from the store for longer than its lease): the JSON-RPC error
    /// -32603 and the status message both say [`ORPHANED`], the words the HTTP transport uses
    /// for a legacy request whose instance stopped. What a shared store applies, once, to a
    /// task it finds so ([`TaskStore`]); like any update it changes nothing of a terminal task.
    pub fn orphaned() -> TaskUpdate {
        let error = ErrorObject::new(modelctx_types::ErrorCode::INTERNAL_ERROR, ORPHANED);
        TaskUpdate::fail(&error).message(ORPHANED)
    }

    /// Sets the status message.
    pub fn message(mut self, message: impl Into<String>) -> TaskUpdate {
        self.status_message = Some(message.into());
        self
    }

    /// Adds a question (`{method, params}`) under `key`.
    pub fn ask(mut self, key: impl Into<String>, request: Value) -> TaskUpdate {
        self.input_requests.insert(key.into(), request);
        self
    }

    /// Marks the questions of `keys` answered.
    pub fn answer<I>(mut self, keys: I) -> TaskUpdate
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.answered.extend(keys.into_iter().map(Into::into));
        self
    }
}

/// The status message and error message of a task settled by [`TaskUpdate::orphaned`].
pub const ORPHANED: &str = "the instance running this task stopped";

/// What [`TaskStore::update`] did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Updated {
    /// The task after the update (as it was, when not applied).
    pub record: TaskRecord,
    /// Whether the update was applied: `false` when the task was terminal already.
    pub applied: bool,
    /// The keys of the update's `answered` that the task was waiting on (the others were
    /// ignored).
    pub answered: Vec<String>,
}

impl Updated {
    /// The outcome of applying `update` to `record` at `now_ms` (what [`MemoryTaskStore`]
    /// returns; a store of its own may use it).
    pub fn of(mut record: TaskRecord, update: &TaskUpdate, now_ms: u64) -> Updated {
        match record.apply(update, now_ms) {
            Some(answered) => Updated {
                record,
                applied: true,
                answered,
            },
            None => Updated {
                record,
                applied: false,
                answered: Vec::new(),
            },
        }
    }
}

/// One page of [`TaskStore::list`].
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct TaskPage {
    /// The tasks, oldest first.
    pub tasks: Vec<TaskRecord>,
    /// The cursor of the next page, if there is one.
    pub next_cursor: Option<String>,
}

impl TaskPage {
    /// A page of `tasks`, followed by the page at `next_cursor`.
    pub fn new(tasks: Vec<TaskRecord>, next_cursor: Option<String>) -> TaskPage {
        TaskPage { tasks, next_cursor }
    }
}

/// A task store failed: why ([`kind`](TaskStoreError::kind)), and its cause, kept.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", match kind {
    TaskStoreErrorKind::Full => "the task store is full",
    TaskStoreErrorKind::Unavailable => "the task store is unavailable",
    TaskStoreErrorKind::Failed => "the task store failed",
})]
#[non_exhaustive]
pub struct TaskStoreError {
    /// What the caller is told.
    pub kind: TaskStoreErrorKind,
    /// What went wrong in the store.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Why a [`TaskStore`] call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskStoreErrorKind {
    /// [`create`](TaskStore::create) was refused: the store holds as many tasks as it may (in
    /// all, or for the principal). The request is refused (-32000, `data.reason`
    /// `"too_many_tasks"`); it may work once tasks expire.
    Full,
    /// The store cannot be reached now (a lost connection, a timeout): the same call may work
    /// later.
    Unavailable,
    /// Anything else: trying again does not help.
    Failed,
}

impl TaskStoreError {
    /// The store is full, as `why` says.
    pub fn full(why: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> TaskStoreError {
        TaskStoreError {
            kind: TaskStoreErrorKind::Full,
            source: why.into(),
        }
    }

    /// The store cannot be reached now, because of `source`.
    pub fn unavailable(
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> TaskStoreError {
        TaskStoreError {
            kind: TaskStoreErrorKind::Unavailable,
            source: source.into(),
        }
    }

    /// The call failed for good, because of `source`.
    pub fn failed(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> TaskStoreError {
        TaskStoreError {
            kind: TaskStoreErrorKind::Failed,
            source: source.into(),
        }
    }

    /// What the caller is told.
    pub fn kind(&self) -> TaskStoreErrorKind {
        self.kind
    }
}

/// Where the tasks of a server live, by task id, each bound to the principal that created it.
///
/// Every call that names a task takes the caller's principal: a task of another principal, like
/// an expired one, is answered as if there were none (`None`), never told apart from an unknown
/// id. Implementations must be safe to call from many tasks at once; [`MemoryTaskStore`] is the
/// default. A store shared by the instances of a fleet (Redis) must also:
/// * make [`create`](TaskStore::create) durable before it returns (a `get` anywhere finds the
///   task), and bound the number of tasks atomically;
/// * apply [`update`](TaskStore::update) atomically, by the rules of [`TaskUpdate`] (terminal
///   states final);
/// * expire a task `ttl_ms` after its creation (a key expiry does);
/// * bound each call in time, and say why it failed ([`TaskStoreError::unavailable`] when the
///   backend cannot be reached);
/// * name the instance that creates a task ([`instance`](TaskStore::instance), written by the
///   runner into `TaskRecord::instance`) and settle a task whose instance is gone: when
///   [`get`](TaskStore::get), [`update`](TaskStore::update) or [`list`](TaskStore::list) finds
///   a task not terminal (`working`, `input_required`) of an instance that is no longer alive
///   (by the store's own liveness, a lease), it applies [`TaskUpdate::orphaned`] (`failed`)
///   exactly once however many instances find it at the same time (a compare-and-set), and
///   answers the task so (an update is then not applied). It checks only the tasks the call
///   reads: never a scan of every task. A store of one process ([`MemoryTaskStore`]) has no
///   other instance: it never settles a task so.
pub trait TaskStore: Send + Sync + std::fmt::Debug + 'static {
    /// Keeps the new task `record`. Refused with [`TaskStoreErrorKind::Full`] beyond the store's
    /// bound.
    fn create<'a>(&'a self, record: &'a TaskRecord) -> TaskStoreFuture<'a, ()>;

    /// Task `task_id`, when `principal` created it and it has not expired.
    fn get<'a>(
        &'a self,
        task_id: &'a str,
        principal: Option<&'a str>,
    ) -> TaskStoreFuture<'a, Option<TaskRecord>>;

    /// Applies `update` to task `task_id` of `principal` (see [`TaskUpdate`] for the rules);
    /// `None` when there is no such task.
    fn update<'a>(
        &'a self,
        task_id: &'a str,
        principal: Option<&'a str>,
        update: &'a TaskUpdate,
    ) -> TaskStoreFuture<'a, Option<Updated>>;

    /// A page of at most `limit` (at least one) tasks of `principal`, oldest first, from
    /// `cursor` (a page's `next_cursor`; `None`: the first page). A cursor the store did not
    /// make is refused ([`TaskStoreErrorKind::Failed`]).
    fn list<'a>(
        &'a self,
        principal: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> TaskStoreFuture<'a, TaskPage>;

    /// Forgets task `task_id` (nothing happens when there is none).
    fn remove<'a>(&'a self, task_id: &'a str) -> TaskStoreFuture<'a, ()>;

    /// Forgets the tasks expired by now; how many. The default does nothing (a store whose
    /// backend expires keys by itself).
    fn purge_expired(&self) -> TaskStoreFuture<'_, usize> {
        Box::pin(std::future::ready(Ok(0)))
    }

    /// How many tasks the store holds, of every principal, expired ones it has not forgotten
    /// yet included.
    fn count(&self) -> TaskStoreFuture<'_, usize>;

    /// This process's name among the instances that share the store, which the runner writes
    /// into each task it creates (`TaskRecord::instance`); `None` (the default) for a store
    /// of one process.
    fn instance(&self) -> Option<String> {
        None
    }
}

/// The time a [`MemoryTaskStore`] reads.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The default [`TaskStore`]: a bounded map in this process's memory. Its futures never wait.
///
/// It holds at most [`MemoryTaskStore::DEFAULT_MAX_TASKS`] tasks in all and
/// [`MemoryTaskStore::DEFAULT_MAX_PER_PRINCIPAL`] per principal (set with
/// [`bounded`](MemoryTaskStore::bounded)), expired ones forgotten first. Expiry reads its clock
/// (the system's by default, [`with_clock`](MemoryTaskStore::with_clock) for tests): a task is
/// gone from `created + ttl`, and forgotten by the next call that finds it so.
pub struct MemoryTaskStore {
    tasks: Mutex<Tasks>,
    max_tasks: usize,
    max_per_principal: usize,
    clock: Clock,
}

#[derive(Default)]
struct Tasks {
    by_id: HashMap<String, TaskRecord>,
    /// The ids in creation order: `(created_ms, task_id)`, the order of `list`.
    order: BTreeMap<(u64, String), ()>,
    /// How many tasks each principal holds.
    per_principal: HashMap<Option<String>, usize>,
}

impl Tasks {
    fn remove(&mut self, task_id: &str) -> Option<TaskRecord> {
        let record = self.by_id.remove(task_id)?;
        self.order
            .remove(&(record.created_ms, record.task_id.clone()));
        if let Some(count) = self.per_principal.get_mut(&record.principal) {
            *count -= 1;
            if *count == 0 {
                self.per_principal.remove(&record.principal);
            }
        }
        Some(record)
    }

    fn purge(&mut self, now_ms: u64) -> usize {
        let expired: Vec<String> = self
            .by_id
            .values()
            .filter(|r| r.is_expired(now_ms))
            .map(|r| r.task_id.clone())
            .collect();
        for id in &expired {
            self.remove(id);
        }
        expired.len()
    }

    /// The live task `task_id` of `principal`; an expired one is forgotten.
    fn live(
        &mut self,
        task_id: &str,
        principal: Option<&str>,
        now_ms: u64,
    ) -> Option<&mut TaskRecord> {
        let expired = self.by_id.get(task_id)?.is_expired(now_ms);
        if expired {
            self.remove(task_id);
            return None;
        }
        self.by_id
            .get_mut(task_id)
            .filter(|r| r.belongs_to(principal))
    }
}

impl std::fmt::Debug for MemoryTaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTaskStore")
            .field("tasks", &self.lock().by_id.len())
            .field("max_tasks", &self.max_tasks)
            .field("max_per_principal", &self.max_per_principal)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryTaskStore {
    fn default() -> Self {
        MemoryTaskStore::new()
    }
}

impl MemoryTaskStore {
    /// The most tasks held by default, of every principal.
    pub const DEFAULT_MAX_TASKS: usize = 10_000;
    /// The most tasks one principal holds by default.
    pub const DEFAULT_MAX_PER_PRINCIPAL: usize = 1_000;

    /// An empty store of the default bounds, reading the system's clock.
    pub fn new() -> MemoryTaskStore {
        MemoryTaskStore::bounded(Self::DEFAULT_MAX_TASKS, Self::DEFAULT_MAX_PER_PRINCIPAL)
    }

    /// An empty store holding at most `max_tasks` tasks, `max_per_principal` of one principal
    /// (each at least one).
    pub fn bounded(max_tasks: usize, max_per_principal: usize) -> MemoryTaskStore {
        MemoryTaskStore {
            tasks: Mutex::new(Tasks::default()),
            max_tasks: max_tasks.max(1),
            max_per_principal: max_per_principal.max(1),
            clock: Arc::new(SystemTime::now),
        }
    }

    /// The same store reading `clock` for expiry and `lastUpdatedAt`.
    pub fn with_clock(mut self, clock: Clock) -> MemoryTaskStore {
        self.clock = clock;
        self
    }

    /// How many tasks it holds (expired ones not forgotten yet included).
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// Whether it holds no task.
    pub fn is_empty(&self) -> bool {
        self.lock().by_id.is_empty()
    }

    /// Forgets the tasks expired by now; how many.
    pub fn purge(&self) -> usize {
        let now = self.now_ms();
        self.lock().purge(now)
    }

    fn now_ms(&self) -> u64 {
        millis((self.clock)())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tasks> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn create_now(&self, record: &TaskRecord) -> Result<(), TaskStoreError> {
        let now = self.now_ms();
        let mut tasks = self.lock();
        if tasks.by_id.contains_key(&record.task_id) {
            return Err(TaskStoreError::failed(format!(
                "a task {} exists already",
                record.task_id
            )));
        }
        let full = |tasks: &Tasks| {
            let mine = tasks
                .per_principal
                .get(&record.principal)
                .copied()
                .unwrap_or(0);
            if tasks.by_id.len() >= self.max_tasks {
                Some(format!("it holds {} tasks, its bound", self.max_tasks))
            } else if mine >= self.max_per_principal {
                Some(format!(
                    "the caller holds {} tasks, the bound per principal",
                    self.max_per_principal
                ))
            } else {
                None
            }
        };
        if full(&tasks).is_some() {
            tasks.purge(now);
        }
        if let Some(why) = full(&tasks) {
            return Err(TaskStoreError::full(why));
        }
        tasks
            .order
            .insert((record.created_ms, record.task_id.clone()), ());
        *tasks
            .per_principal
            .entry(record.principal.clone())
            .or_insert(0) += 1;
        tasks.by_id.insert(record.task_id.clone(), record.clone());
        Ok(())
    }

    fn list_now(
        &self,
        principal: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, TaskStoreError> {
        let now = self.now_ms();
        let after = match cursor {
            None => None,
            Some(cursor) => Some(parse_cursor(cursor).ok_or_else(|| {
                TaskStoreError::failed(format!("{cursor:?} is not a cursor of this store"))
            })?),
        };
        let limit = limit.max(1);
        let mut tasks = self.lock();
        tasks.purge(now);
        let start = match &after {
            Some(key) => std::ops::Bound::Excluded(key.clone()),
            None => std::ops::Bound::Unbounded,
        };
        let mut page = Vec::new();
        let mut next = None;
        for (key, ()) in tasks.order.range((start, std::ops::Bound::Unbounded)) {
            let Some(record) = tasks.by_id.get(&key.1) else {
                continue;
            };
            if !record.belongs_to(principal) {
                continue;
            }
            if page.len() == limit {
                next = page
                    .last()
                    .map(|r: &TaskRecord| format!("{}:{}", r.created_ms, r.task_id));
                break;
            }
            page.push(record.clone());
        }
        Ok(TaskPage::new(page, next))
    }
}

fn parse_cursor(cursor: &str) -> Option<(u64, String)> {
    let (created, id) = cursor.split_once(':')?;
    Some((created.parse().ok()?, id.to_owned()))
}

impl TaskStore for MemoryTaskStore {
    fn create<'a>(&'a self, record: &'a TaskRecord) -> TaskStoreFuture<'a, ()> {
        Box::pin(std::future::ready(self.create_now(record)))
    }

    fn get<'a>(
        &'a self,
        task_id: &'a str,
        principal: Option<&'a str>,
    ) -> TaskStoreFuture<'a, Option<TaskRecord>> {
        let now = self.now_ms();
        let record = self.lock().live(task_id, principal, now).map(|r| r.clone());
        Box::pin(std::future::ready(Ok(record)))
    }

    fn update<'a>(
        &'a self,
        task_id: &'a str,
        principal: Option<&'a str>,
        update: &'a TaskUpdate,
    ) -> TaskStoreFuture<'a, Option<Updated>> {
        let now = self.now_ms();
        let mut tasks = self.lock();
        let updated = tasks.live(task_id, principal, now).map(|record| {
            let outcome = Updated::of(record.clone(), update, now);
            if outcome.applied {
                *record = outcome.record.clone();
            }
            outcome
        });
        drop(tasks);
        Box::pin(std::future::ready(Ok(updated)))
    }

    fn list<'a>(
        &'a self,
        principal: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> TaskStoreFuture<'a, TaskPage> {
        Box::pin(std::future::ready(self.list_now(principal, cursor, limit)))
    }

    fn remove<'a>(&'a self, task_id: &'a str) -> TaskStoreFuture<'a, ()> {
        self.lock().remove(task_id);
        Box::pin(std::future::ready(Ok(())))
    }

    fn purge_expired(&self) -> TaskStoreFuture<'_, usize> {
        Box::pin(std::future::ready(Ok(self.purge())))
    }

    fn count(&self) -> TaskStoreFuture<'_, usize> {
        Box::pin(std::future::ready(Ok(self.len())))
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn millis(at: SystemTime) -> u64 {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    /// A clock the test moves.
    fn manual() -> (Arc<AtomicU64>, Clock) {
        let now = Arc::new(AtomicU64::new(1_000_000));
        let read = now.clone();
        let clock: Clock =
            Arc::new(move || UNIX_EPOCH + Duration::from_millis(read.load(Ordering::SeqCst)));
        (now, clock)
    }

    fn record(id: &str, principal: Option<&str>, at_ms: u64) -> TaskRecord {
        TaskRecord::new(
            id,
            principal.map(str::to_owned),
            "tools/call",
            "2026-07-28",
            UNIX_EPOCH + Duration::from_millis(at_ms),
        )
    }

    fn block<T>(future: TaskStoreFuture<'_, T>) -> T {
        // The memory store's futures are ready at once.
        let mut future = future;
        match future
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
        {
            std::task::Poll::Ready(result) => result.expect("the memory store does not fail"),
            std::task::Poll::Pending => panic!("the memory store waited"),
        }
    }

    #[test]
    fn tasks_are_seen_only_by_their_principal() {
        let store = MemoryTaskStore::new();
        block(store.create(&record("a", Some("alice"), 1)));
        block(store.create(&record("n", None, 1)));
        assert!(block(store.get("a", Some("alice"))).is_some());
        assert_eq!(block(store.get("a", Some("bob"))), None);
        assert_eq!(block(store.get("a", None)), None);
        assert!(block(store.get("n", None)).is_some());
        assert_eq!(block(store.get("n", Some("alice"))), None);
        assert_eq!(block(store.get("unknown", Some("alice"))), None);
        // Another principal cannot change it either.
        assert_eq!(
            block(store.update("a", Some("bob"), &TaskUpdate::cancel())),
            None
        );
        assert_eq!(
            block(store.get("a", Some("alice"))).map(|r| r.status),
            Some(TaskStatus::Working)
        );
        let page = block(store.list(Some("bob"), None, 10));
        assert!(page.tasks.is_empty());
    }

    #[test]
    fn terminal_states_are_final() {
        let store = MemoryTaskStore::new();
        block(store.create(&record("t", None, 1)));
        let mut result = JsonObject::new();
        result.insert("content".into(), json!([]));
        let done = block(store.update("t", None, &TaskUpdate::complete(result.clone()))).unwrap();
        assert!(done.applied);
        assert_eq!(done.record.status, TaskStatus::Completed);
        for update in [
            TaskUpdate::cancel(),
            TaskUpdate::fail(&ErrorObject::new(
                modelctx_types::ErrorCode::INTERNAL_ERROR,
                "x",
            )),
            TaskUpdate::new().ask("k", json!({"method": "elicitation/create"})),
            TaskUpdate::new().message("again"),
        ] {
            let after = block(store.update("t", None, &update)).unwrap();
            assert!(!after.applied);
            assert_eq!(after.record.status, TaskStatus::Completed);
            assert_eq!(after.record.result.as_ref(), Some(&result));
            assert_eq!(after.record.status_message, None);
            assert!(after.record.input_requests.is_empty());
        }
        // Cancelled is final too, and an error wins over a result given with it.
        block(store.create(&record("c", None, 2)));
        assert!(
            block(store.update("c", None, &TaskUpdate::cancel()))
                .unwrap()
                .applied
        );
        let after = block(store.update("c", None, &TaskUpdate::complete(result))).unwrap();
        assert!(!after.applied);
        assert_eq!(after.record.status, TaskStatus::Cancelled);
    }

    #[test]
    fn questions_make_a_task_input_required_until_every_one_is_answered() {
        let store = MemoryTaskStore::new();
        block(store.create(&record("t", None, 1)));
        let asked = TaskUpdate::new()
            .ask("a", json!({"method": "elicitation/create", "params": {}}))
            .ask("b", json!({"method": "elicitation/create", "params": {}}));
        let r = block(store.update("t", None, &asked)).unwrap().record;
        assert_eq!(r.status, TaskStatus::InputRequired);
        assert_eq!(r.input_requests.len(), 2);
        // A key it does not wait on is ignored.
        let u = block(store.update("t", None, &TaskUpdate::new().answer(["a", "zzz"]))).unwrap();
        assert_eq!(u.answered, ["a"]);
        assert_eq!(u.record.status, TaskStatus::InputRequired);
        assert_eq!(u.record.input_requests.keys().collect::<Vec<_>>(), ["b"]);
        let u = block(store.update("t", None, &TaskUpdate::new().answer(["b", "a"]))).unwrap();
        assert_eq!(u.answered, ["b"]);
        assert_eq!(u.record.status, TaskStatus::Working);
        // Settling clears what is still asked.
        block(store.update("t", None, &TaskUpdate::new().ask("c", json!({}))));
        let r = block(store.update("t", None, &TaskUpdate::cancel()))
            .unwrap()
            .record;
        assert_eq!(r.status, TaskStatus::Cancelled);
        assert!(r.input_requests.is_empty());
    }

    #[test]
    fn tasks_expire_ttl_after_their_creation() {
        let (now, clock) = manual();
        let store = MemoryTaskStore::new().with_clock(clock);
        let start = now.load(Ordering::SeqCst);
        block(store.create(&record("t", None, start).ttl_ms(Some(1_000))));
        block(store.create(&record("forever", None, start)));
        now.store(start + 999, Ordering::SeqCst);
        assert!(block(store.get("t", None)).is_some());
        // Updates do not push the expiry back: it runs from creation.
        block(store.update("t", None, &TaskUpdate::new().message("still")));
        now.store(start + 1_000, Ordering::SeqCst);
        assert_eq!(block(store.get("t", None)), None);
        assert_eq!(store.len(), 1, "an expired task found is forgotten");
        assert!(block(store.get("forever", None)).is_some());
        // Expired tasks not looked at are forgotten by a purge.
        block(store.create(&record("u", None, start).ttl_ms(Some(10))));
        assert_eq!(store.len(), 2);
        assert_eq!(block(store.purge_expired()), 1);
        block(store.remove("forever"));
        assert!(store.is_empty());
        assert_eq!(block(store.count()), 0);
    }

    #[test]
    fn the_bound_refuses_a_flood_with_a_clear_error_and_expired_tasks_make_room() {
        let (now, clock) = manual();
        let store = MemoryTaskStore::bounded(3, 2).with_clock(clock);
        let start = now.load(Ordering::SeqCst);
        block(store.create(&record("a1", Some("a"), start).ttl_ms(Some(100))));
        block(store.create(&record("a2", Some("a"), start)));
        let refused = store
            .create_now(&record("a3", Some("a"), start))
            .unwrap_err();
        assert_eq!(refused.kind(), TaskStoreErrorKind::Full);
        assert!(refused.to_string().contains("per principal"), "{refused}");
        block(store.create(&record("b1", Some("b"), start)));
        let refused = store
            .create_now(&record("c1", Some("c"), start))
            .unwrap_err();
        assert_eq!(refused.kind(), TaskStoreErrorKind::Full);
        assert!(refused.to_string().contains("holds 3 tasks"), "{refused}");
        // Once a1 expires there is room again.
        now.store(start + 100, Ordering::SeqCst);
        block(store.create(&record("c1", Some("c"), start + 100)));
        assert_eq!(store.len(), 3);
        // An id is never taken twice.
        assert_eq!(
            store
                .create_now(&record("c1", Some("c"), start))
                .unwrap_err()
                .kind(),
            TaskStoreErrorKind::Failed
        );
    }

    #[test]
    fn list_pages_a_principals_tasks_oldest_first() {
        let store = MemoryTaskStore::new();
        for i in 0..5u64 {
            block(store.create(&record(&format!("m{i}"), Some("me"), 10 + i)));
            block(store.create(&record(&format!("o{i}"), Some("other"), 10 + i)));
        }
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = block(store.list(Some("me"), cursor.as_deref(), 2));
            assert!(page.tasks.len() <= 2);
            seen.extend(page.tasks.into_iter().map(|t| t.task_id));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, ["m0", "m1", "m2", "m3", "m4"]);
        let bad = store.list_now(Some("me"), Some("nope"), 2).unwrap_err();
        assert_eq!(bad.kind(), TaskStoreErrorKind::Failed);
    }

    /// A store of one process has no other instance: whatever instance a task names, `get`,
    /// `list` and `update` never settle it as orphaned.
    #[test]
    fn a_local_store_never_settles_a_task_for_a_dead_instance() {
        let store = MemoryTaskStore::new();
        assert_eq!(store.instance(), None, "a local store names no instance");
        let mut waiting = record("w", None, 1).instance(Some("7:gone:1".into()));
        waiting.status = TaskStatus::InputRequired;
        waiting
            .input_requests
            .insert("q".into(), json!({"method": "elicitation/create"}));
        let working = record("r", None, 2).instance(Some("8:gone:2".into()));
        block(store.create(&waiting));
        block(store.create(&working));
        assert_eq!(block(store.get("w", None)).as_ref(), Some(&waiting));
        assert_eq!(block(store.get("r", None)).as_ref(), Some(&working));
        let page = block(store.list(None, None, 10));
        assert_eq!(page.tasks, [waiting.clone(), working.clone()]);
        let u = block(store.update("r", None, &TaskUpdate::new().message("on"))).unwrap();
        assert!(u.applied);
        assert_eq!(u.record.status, TaskStatus::Working);
        let u = block(store.update("w", None, &TaskUpdate::new().message("on"))).unwrap();
        assert_eq!(u.record.status, TaskStatus::InputRequired);
    }

    /// The orphaned update settles a working or input-required task `failed` with the words of
    /// the legacy requests, as the error and the status message; a terminal task stays as it is.
    #[test]
    fn the_orphaned_update_fails_an_unfinished_task_with_a_clear_message() {
        assert_eq!(ORPHANED, "the instance running this task stopped");
        let mut working = record("a", None, 1);
        assert!(working.apply(&TaskUpdate::orphaned(), 5).is_some());
        assert_eq!(working.status, TaskStatus::Failed);
        assert_eq!(working.status_message.as_deref(), Some(ORPHANED));
        assert_eq!(
            working.error.as_ref().map(|e| Value::Object(e.clone())),
            Some(json!({"code": -32603, "message": ORPHANED}))
        );
        let mut waiting = record("b", None, 1);
        waiting.apply(&TaskUpdate::new().ask("q", json!({})), 2);
        assert_eq!(waiting.status, TaskStatus::InputRequired);
        waiting.apply(&TaskUpdate::orphaned(), 3);
        assert_eq!(waiting.status, TaskStatus::Failed);
        assert!(waiting.input_requests.is_empty());
        let mut done = record("c", None, 1);
        done.apply(&TaskUpdate::complete(JsonObject::new()), 2);
        assert_eq!(done.apply(&TaskUpdate::orphaned(), 3), None);
        assert_eq!(done.status, TaskStatus::Completed);
        assert_eq!(done.status_message, None);
    }

    #[test]
    fn records_serialize_as_camel_case_json() {
        let r = record("t", Some("p"), 5)
            .ttl_ms(Some(60_000))
            .poll_interval_ms(Some(500));
        let value = serde_json::to_value(&r).unwrap();
        assert_eq!(value["taskId"], "t");
        assert_eq!(value["status"], "working");
        assert_eq!(value["ttlMs"], 60_000);
        assert_eq!(value["createdMs"], 5);
        assert!(value.get("instance").is_none(), "no instance: not written");
        let back: TaskRecord = serde_json::from_value(value).unwrap();
        assert_eq!(back, r);
        // A record naming its instance keeps it; one written before the member existed reads
        // as naming none.
        let named = r.clone().instance(Some("3:host:42".into()));
        let value = serde_json::to_value(&named).unwrap();
        assert_eq!(value["instance"], "3:host:42");
        assert_eq!(serde_json::from_value::<TaskRecord>(value).unwrap(), named);
        assert_eq!(
            serde_json::to_value(TaskStatus::InputRequired).unwrap(),
            "input_required"
        );
    }
}
