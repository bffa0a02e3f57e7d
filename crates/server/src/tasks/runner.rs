//! The task runner: a handler run as a task, in this process.
//!
//! [`Tasks`] is the server's: its [`TaskStore`], the tasks running here (their cancellation
//! tokens and the questions they wait on), and the bound on how many run at once.
//! [`Tasks::start`] creates a task in the store (durably: the `CreateTaskResult` is written
//! after it), then runs the handler on a task of its own with a [`Context`] in task mode
//! ([`TaskLink`]): its questions become the task's `inputRequests` and wait for
//! [`Tasks::answer`], its progress becomes the task's `statusMessage`, and its outcome settles
//! the task. [`Tasks::cancel`] settles a task `cancelled` and stops its handler. A task is
//! forgotten `ttl` after its creation (a timer removes it from the store, and stops its handler
//! if it still runs).
//!
//! What it keeps is emptied as tasks end: [`Tasks::running`] counts the handlers under way.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use modelctx_types::{ErrorObject, JsonObject};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::TaskSettings;
use super::store::{TaskRecord, TaskStore, TaskStoreError, TaskStoreErrorKind, TaskUpdate, millis};
use crate::bus::{Bus, BusMessage};
use crate::context::{Context, Inner};
use crate::handler::{BoxFuture, Runner};
use crate::input::{InputError, NoAnswer};

/// The tasks of a server: where they are kept, and those running in this process.
pub(crate) struct Tasks {
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) settings: TaskSettings,
    running: Mutex<HashMap<String, Arc<Running>>>,
    slots: Arc<tokio::sync::Semaphore>,
    /// The bus to the other instances of a fleet, when there is one: a cancel or answers for a
    /// task whose handler does not run here go to the others ([`BusMessage::Task`]).
    fleet: OnceLock<Arc<dyn Bus>>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("store", &self.store)
            .field("settings", &self.settings)
            .field("running", &self.running())
            .finish_non_exhaustive()
    }
}

/// A task whose handler runs in this process.
pub(crate) struct Running {
    pub(crate) task_id: String,
    pub(crate) principal: Option<String>,
    /// Fired by `tasks/cancel` and at expiry: the handler's [`Context::cancelled`].
    pub(crate) cancel: CancellationToken,
    /// Whether its questions go to the store as `inputRequests` (2026-07-28); a legacy task's
    /// are asked as requests, the legacy way.
    pub(crate) modern: bool,
    /// The questions waiting for an answer, by key.
    waiters: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// Questions asked so far, to name each.
    asked: AtomicUsize,
    /// Every key asked: a key names one question over the task's life.
    keys: Mutex<HashSet<String>>,
}

/// How a handler asks to become a task ([`Context::detach`]): it sends where to reply.
pub(crate) type Detach = oneshot::Sender<oneshot::Sender<Result<(), ErrorObject>>>;

/// What a handler running as a task holds in its [`Context`].
#[derive(Clone)]
pub(crate) struct TaskLink {
    pub(crate) tasks: Arc<Tasks>,
    pub(crate) running: Arc<Running>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tasks {
    pub(crate) fn new(store: Arc<dyn TaskStore>, settings: TaskSettings) -> Tasks {
        Tasks {
            store,
            slots: Arc::new(tokio::sync::Semaphore::new(settings.max_running.max(1))),
            settings,
            running: Mutex::new(HashMap::new()),
            fleet: OnceLock::new(),
        }
    }

    /// Sends what this instance hears for tasks running elsewhere over `bus` (set once, when
    /// the server is built with a bus).
    pub(crate) fn join_fleet(&self, bus: Arc<dyn Bus>) {
        let _ = self.fleet.set(bus);
    }

    /// Tells the other instances of the fleet (if any) the client's cancel of task `task_id`
    /// (`answers` `None`) or its answers: its handler does not run here.
    async fn tell_fleet(&self, task_id: &str, answers: Option<JsonObject>) {
        let Some(bus) = self.fleet.get() else {
            return;
        };
        let message = BusMessage::Task {
            from: bus.instance(),
            task: task_id.to_owned(),
            answers,
        };
        if let Err(error) = bus.broadcast(message).await {
            tracing::warn!(task = %task_id, %error, "a task's cancel or answers did not reach the fleet");
        }
    }

    /// What another instance heard for task `task_id` ([`BusMessage::Task`], recorded in the
    /// store already): its handler, when it runs here, is cancelled (`answers` `None`) or
    /// handed the answers it waits on.
    pub(crate) fn heard(&self, task_id: &str, answers: Option<JsonObject>) {
        let Some(running) = lock(&self.running).get(task_id).cloned() else {
            return;
        };
        match answers {
            None => running.cancel.cancel(),
            Some(answers) => {
                for (key, answer) in answers {
                    let waiter = lock(&running.waiters).remove(&key);
                    if let Some(waiter) = waiter {
                        let _ = waiter.send(answer);
                    }
                }
            }
        }
    }

    /// How many handlers run as tasks in this process.
    pub(crate) fn running(&self) -> usize {
        lock(&self.running).len()
    }

    /// Creates a task for the request of `context` (kept `ttl_ms` from now) and runs `runner`
    /// as it; the task as created. `modern`: its questions go to the store as `inputRequests`.
    pub(crate) async fn start(
        self: &Arc<Self>,
        context: &Context,
        ttl_ms: Option<u64>,
        modern: bool,
        runner: Runner,
    ) -> Result<TaskRecord, ErrorObject> {
        let (record, link, permit) = self
            .create(context, ttl_ms, modern, CancellationToken::new())
            .await?;
        let handler = runner(task_context(context, link.clone()));
        self.run(link, handler, permit);
        Ok(record)
    }

    /// Creates a task for the handler `handler` already running with `context`, which goes on
    /// as the task (`Context::detach`): its context's cancellation is the task's.
    pub(crate) async fn adopt(
        self: &Arc<Self>,
        context: &Context,
        ttl_ms: Option<u64>,
        handler: BoxFuture<Result<Box<serde_json::value::RawValue>, ErrorObject>>,
    ) -> Result<TaskRecord, ErrorObject> {
        let (record, link, permit) = self
            .create(context, ttl_ms, true, context.inner.cancelled.clone())
            .await?;
        let _ = context.inner.task.set(link.clone());
        self.run(link, handler, permit);
        Ok(record)
    }

    /// Creates a task (durably) for the request of `context`, cancelled by `cancel`.
    async fn create(
        self: &Arc<Self>,
        context: &Context,
        ttl_ms: Option<u64>,
        modern: bool,
        cancel: CancellationToken,
    ) -> Result<(TaskRecord, TaskLink, tokio::sync::OwnedSemaphorePermit), ErrorObject> {
        let permit = self.slots.clone().try_acquire_owned().map_err(|_| {
            too_many(format!(
                "{} tasks are running, the most at once",
                self.settings.max_running
            ))
        })?;
        let task_id = new_id();
        let principal = principal_of(context);
        let record = TaskRecord::new(
            &task_id,
            principal.clone(),
            context.method(),
            context.protocol_version().as_str(),
            SystemTime::now(),
        )
        .ttl_ms(ttl_ms)
        .poll_interval_ms(Some(self.settings.poll_interval_ms()))
        .instance(self.store.instance());
        self.store.create(&record).await.map_err(store_error)?;
        let running = Arc::new(Running {
            task_id: task_id.clone(),
            principal,
            cancel,
            modern,
            waiters: Mutex::new(HashMap::new()),
            asked: AtomicUsize::new(0),
            keys: Mutex::new(HashSet::new()),
        });
        lock(&self.running).insert(task_id.clone(), running.clone());
        if let Some(at) = record.expires_ms() {
            self.expire_at(task_id, at);
        }
        let link = TaskLink {
            tasks: self.clone(),
            running,
        };
        Ok((record, link, permit))
    }

    /// Runs `handler` as the task of `link`, on a task of its own.
    fn run(
        self: &Arc<Self>,
        link: TaskLink,
        handler: BoxFuture<Result<Box<serde_json::value::RawValue>, ErrorObject>>,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        tokio::spawn(self.clone().drive(link, handler, permit));
    }

    /// Runs a task's handler to its end (or its cancellation) and settles the task.
    async fn drive(
        self: Arc<Self>,
        link: TaskLink,
        mut handler: BoxFuture<Result<Box<serde_json::value::RawValue>, ErrorObject>>,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let cancel = link.running.cancel.clone();
        let outcome = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            outcome = std::future::poll_fn(|cx| {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    handler.as_mut().poll(cx)
                })) {
                    Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
                    Ok(std::task::Poll::Ready(answer)) => std::task::Poll::Ready(Some(answer)),
                    Err(_) => std::task::Poll::Ready(None),
                }
            }) => Some(outcome),
        };
        // The handler stops here (a cancelled one is dropped where it waited).
        drop(handler);
        let update = match outcome {
            None => TaskUpdate::cancel(),
            Some(Some(Ok(result))) => match serde_json::from_str::<JsonObject>(result.get()) {
                Ok(result) => TaskUpdate::complete(result),
                Err(e) => {
                    let error =
                        crate::wire::internal(format!("the task's result is no object: {e}"));
                    TaskUpdate::fail(&error).message(error.message)
                }
            },
            Some(Some(Err(error))) => TaskUpdate::fail(&error).message(error.message.clone()),
            Some(None) => {
                let error = crate::wire::internal("the handler failed unexpectedly (it panicked)");
                TaskUpdate::fail(&error).message(error.message)
            }
        };
        // A failure is logged where it happens; the task then expires as it was.
        let _ = self
            .apply(
                &link.running.task_id,
                link.running.principal.as_deref(),
                &update,
            )
            .await;
        lock(&self.running).remove(&link.running.task_id);
        drop(permit);
    }

    /// Removes task `task_id` from the store at `at_ms` (stopping its handler if it still runs).
    fn expire_at(self: &Arc<Self>, task_id: String, at_ms: u64) {
        let tasks = Arc::downgrade(self);
        tokio::spawn(async move {
            let wait = at_ms.saturating_sub(millis(SystemTime::now()));
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let Some(tasks) = tasks.upgrade() else {
                return;
            };
            if let Some(running) = lock(&tasks.running).remove(&task_id) {
                running.cancel.cancel();
            }
            if let Err(e) = tasks.store.remove(&task_id).await {
                tracing::warn!(task = %task_id, error = %e, "an expired task was not removed");
            }
        });
    }

    /// Applies `update` to a task; the outcome.
    async fn apply(
        &self,
        task_id: &str,
        principal: Option<&str>,
        update: &TaskUpdate,
    ) -> Result<Option<super::Updated>, ErrorObject> {
        match self.store.update(task_id, principal, update).await {
            Ok(updated) => Ok(updated),
            Err(e) => {
                tracing::warn!(task = %task_id, error = %e, "a task was not updated");
                Err(store_error(e))
            }
        }
    }

    /// Task `task_id` of `principal`, or -32602 when there is none.
    pub(crate) async fn get(
        &self,
        task_id: &str,
        principal: Option<&str>,
    ) -> Result<TaskRecord, ErrorObject> {
        match self.store.get(task_id, principal).await {
            Ok(Some(record)) => Ok(record),
            Ok(None) => Err(not_found(task_id)),
            Err(e) => Err(store_error(e)),
        }
    }

    /// Cancels task `task_id` of `principal`: settles it `cancelled` and stops its handler
    /// (nothing changes for a task settled already). -32602 when there is no such task.
    pub(crate) async fn cancel(
        &self,
        task_id: &str,
        principal: Option<&str>,
    ) -> Result<TaskRecord, ErrorObject> {
        let Some(updated) = self
            .apply(task_id, principal, &TaskUpdate::cancel())
            .await?
        else {
            return Err(not_found(task_id));
        };
        if updated.applied {
            let running = lock(&self.running).get(task_id).cloned();
            match running {
                Some(running) => running.cancel.cancel(),
                None => self.tell_fleet(task_id, None).await,
            }
        }
        Ok(updated.record)
    }

    /// Brings `responses` to the questions of task `task_id` of `principal`: each answers the
    /// question of its key, when the task waits on it (other keys are ignored); an answer that
    /// is not one to its question is refused (-32602) before any is taken. -32602 when there is
    /// no such task.
    pub(crate) async fn answer(
        &self,
        task_id: &str,
        principal: Option<&str>,
        responses: &JsonObject,
    ) -> Result<(), ErrorObject> {
        let record = self.get(task_id, principal).await?;
        let mut keys = Vec::new();
        for (key, answer) in responses {
            let Some(question) = record.input_requests.get(key) else {
                tracing::debug!(task = %task_id, "inputResponses[{key:?}] ignored: not asked");
                continue;
            };
            let method = question
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default();
            crate::input::check_answer(method, key, answer)?;
            keys.push(key.clone());
        }
        if keys.is_empty() {
            return Ok(());
        }
        let update = TaskUpdate::new().answer(keys);
        let Some(updated) = self.apply(task_id, principal, &update).await? else {
            return Err(not_found(task_id));
        };
        let running = lock(&self.running).get(task_id).cloned();
        if let Some(running) = running {
            for key in updated.answered {
                let waiter = lock(&running.waiters).remove(&key);
                if let (Some(waiter), Some(answer)) = (waiter, responses.get(&key)) {
                    let _ = waiter.send(answer.clone());
                }
            }
        } else if !updated.answered.is_empty() {
            let answers: JsonObject = updated
                .answered
                .iter()
                .filter_map(|key| Some((key.clone(), responses.get(key)?.clone())))
                .collect();
            self.tell_fleet(task_id, Some(answers)).await;
        }
        Ok(())
    }
}

impl TaskLink {
    /// The task's id.
    pub(crate) fn task_id(&self) -> &str {
        &self.running.task_id
    }

    /// Asks `method` with `params` (named `key`, or by its method and place) as a question of
    /// the task, and waits for `tasks/update` to answer it.
    pub(crate) async fn ask(
        &self,
        method: &str,
        params: JsonObject,
        key: Option<String>,
    ) -> Result<Value, InputError> {
        let running = &self.running;
        let n = running.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let key = key.unwrap_or_else(|| format!("{}-{n}", crate::input::short(method)));
        if !lock(&running.keys).insert(key.clone()) {
            return Err(InputError::DuplicateKey(key));
        }
        let (reply, answer) = oneshot::channel();
        lock(&running.waiters).insert(key.clone(), reply);
        let update =
            TaskUpdate::new().ask(key.clone(), json!({"method": method, "params": params}));
        let asked = self
            .tasks
            .apply(&running.task_id, running.principal.as_deref(), &update)
            .await;
        if !matches!(&asked, Ok(Some(updated)) if updated.applied) {
            // Settled, expired or unreachable: nobody will answer.
            lock(&running.waiters).remove(&key);
            return Err(InputError::NoAnswer(NoAnswer::RequestEnded));
        }
        tokio::select! {
            answer = answer => answer.map_err(|_| InputError::NoAnswer(NoAnswer::RequestEnded)),
            () = running.cancel.cancelled() => Err(InputError::NoAnswer(NoAnswer::RequestEnded)),
        }
    }

    /// Records `message` as the task's status message; whether it was.
    pub(crate) async fn set_status_message(&self, message: String) -> bool {
        let running = &self.running;
        let update = TaskUpdate::new().message(message);
        matches!(
            self.tasks
                .apply(&running.task_id, running.principal.as_deref(), &update)
                .await,
            Ok(Some(updated)) if updated.applied
        )
    }
}

/// The context a handler runs with as task `link`: the request's, but cancelled by the task,
/// with no progress token (progress goes to the task) and no round trips.
fn task_context(context: &Context, link: TaskLink) -> Context {
    let c = &context.inner;
    Context {
        inner: Arc::new(Inner {
            id: c.id.clone(),
            generation: c.generation,
            method: c.method.clone(),
            version: c.version,
            client_info: c.client_info.clone(),
            client_capabilities: c.client_capabilities.clone(),
            progress_token: None,
            last_progress: Mutex::new(None),
            cancelled: link.running.cancel.clone(),
            commands: c.commands.clone(),
            mrtr: None,
            modern: c.modern,
            #[cfg(feature = "http")]
            http: c.http.clone(),
            state: c.state.clone(),
            task: OnceLock::from(link),
            detach: Mutex::new(None),
        }),
    }
}

/// Who the tasks of the request of `context` belong to: its authenticated principal, if any;
/// else, for a legacy HTTP session (2025-11-25 tasks), that session (`mcp-session:` and its
/// id, which the transport checked): another session sees none of its tasks.
pub(crate) fn principal_of(context: &Context) -> Option<String> {
    #[cfg(feature = "http")]
    {
        let http = context.http()?;
        if let Some(principal) = http.principal() {
            return Some(principal.0.clone());
        }
        if context.inner.modern {
            return None;
        }
        http.headers()
            .get("mcp-session-id")
            .and_then(|sid| sid.to_str().ok())
            .map(|sid| format!("mcp-session:{sid}"))
    }
    #[cfg(not(feature = "http"))]
    {
        let _ = context;
        None
    }
}

/// A new task id: 128 random bits, as 32 hexadecimal digits.
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    // A guessable id would let another caller find a task: no fallback.
    getrandom::fill(&mut bytes).expect("the operating system's random number generator works");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The -32602 error of a task the caller has no access to (unknown, another principal's,
/// expired: never told apart).
pub(crate) fn not_found(task_id: &str) -> ErrorObject {
    crate::wire::invalid_params(format!(
        "Failed to retrieve task: Task not found ({task_id})"
    ))
}

/// The error of a task refused because too many are kept or running.
fn too_many(why: String) -> ErrorObject {
    let message = format!("too many tasks: {why}");
    ErrorObject::new(crate::limits::REFUSED, message.clone())
        .with_data(&json!({"reason": "too_many_tasks"}))
        .unwrap_or_else(|_| ErrorObject::new(crate::limits::REFUSED, message))
}

/// What the client is told of a store's failure.
fn store_error(error: TaskStoreError) -> ErrorObject {
    match error.kind() {
        TaskStoreErrorKind::Full => too_many(error.source.to_string()),
        _ => crate::wire::internal(error.to_string()),
    }
}
