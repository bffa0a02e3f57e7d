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
//! Each change of a task made here is told to whoever should hear of it ([`Tasks::publish`]):
//! the connection or legacy HTTP session that made a 2025-11-25 task (a [`Sink`]:
//! `notifications/tasks/status` when its status or status message changes), and the
//! `subscriptions/listen` streams of the task's principal that named it in their `taskIds`
//! (a [`TaskListener`]: `notifications/tasks` with the task as `tasks/get` gives it). Each
//! destination has a bounded queue ([`FEED_BOUND`]; when full the oldest state is dropped, never
//! the newest) drained in order by a writer task of its own, so that a slow client never holds
//! a handler.
//!
//! What it keeps is emptied as tasks end: [`Tasks::running`] counts the handlers under way.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use modelctx_types::{ErrorObject, JsonObject};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::TaskSettings;
use super::store::{
    TaskRecord, TaskStatus, TaskStore, TaskStoreError, TaskStoreErrorKind, TaskUpdate, millis,
};
use crate::bus::{Bus, BusMessage};
use crate::context::{Context, Inner};
use crate::handler::{BoxFuture, Runner};
use crate::input::{InputError, NoAnswer};
use crate::run::{Command, Commands};

/// The tasks of a server: where they are kept, and those running in this process.
pub(crate) struct Tasks {
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) settings: TaskSettings,
    running: Mutex<HashMap<String, Arc<Running>>>,
    slots: Arc<tokio::sync::Semaphore>,
    /// The bus to the other instances of a fleet, when there is one: a cancel or answers for a
    /// task whose handler does not run here go to the others ([`BusMessage::Task`]).
    fleet: OnceLock<Arc<dyn Bus>>,
    /// The listen streams that hear of tasks (`taskIds`), by connection.
    listeners: Mutex<Vec<Arc<Listener>>>,
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
    /// Woken at each change of the task recorded here, and when it expires: what a waiting
    /// `tasks/result` waits on ([`Tasks::changes`]).
    changed: Arc<tokio::sync::Notify>,
    /// Where the connection that made a 2025-11-25 task hears of its status; `None` for the
    /// tasks of the extension (their listen streams hear of them).
    origin: Option<Arc<Feed>>,
    /// The status and status message last told of (to the origin, or to a listener).
    told: Mutex<Option<(TaskStatus, Option<String>)>>,
}

/// The most task states queued for one destination (a connection, a legacy session, a listen
/// stream's connection); beyond, the oldest queued is dropped.
pub(crate) const FEED_BOUND: usize = 64;

/// A bounded queue of notifications for one destination, drained in order by its writer.
pub(crate) struct Feed {
    state: Mutex<FeedState>,
    ready: tokio::sync::Notify,
}

#[derive(Default)]
struct FeedState {
    queue: VecDeque<Command>,
    closed: bool,
}

impl Feed {
    fn new() -> Arc<Feed> {
        Arc::new(Feed {
            state: Mutex::new(FeedState::default()),
            ready: tokio::sync::Notify::new(),
        })
    }

    /// Queues `note`, dropping the oldest queued when full; nothing once closed.
    fn push(&self, note: Command) {
        let mut state = lock(&self.state);
        if state.closed {
            return;
        }
        if state.queue.len() >= FEED_BOUND {
            state.queue.pop_front();
            tracing::debug!("a task status notification was dropped: its client reads slowly");
        }
        state.queue.push_back(note);
        drop(state);
        self.ready.notify_one();
    }

    /// No more notifications: the writer ends once it has written those queued.
    fn close(&self) {
        lock(&self.state).closed = true;
        self.ready.notify_one();
    }

    /// The next notification; `None` once closed and drained.
    async fn next(&self) -> Option<Command> {
        loop {
            {
                let mut state = lock(&self.state);
                if let Some(note) = state.queue.pop_front() {
                    return Some(note);
                }
                if state.closed {
                    return None;
                }
            }
            // A push between the look above and this wait left a permit: no wake-up is missed.
            self.ready.notified().await;
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.state).queue.len()
    }
}

/// Where a 2025-11-25 task's status changes go: the connection or session that made it.
pub(crate) enum Sink {
    /// A connection (stdio, in-memory): its runner's command channel, alive with it.
    Conn(Commands),
    /// A legacy HTTP session: its standalone stream (nothing is written once it ended).
    #[cfg(feature = "http")]
    Http(modelctx_http::server::LegacySession),
}

impl Sink {
    /// Where the request of `context` came from, for a task it makes: its legacy HTTP session
    /// (`shared`'s, by the `Mcp-Session-Id` the transport checked), else its connection.
    pub(crate) fn of(shared: &crate::registry::Shared, context: &Context) -> Option<Sink> {
        #[cfg(feature = "http")]
        if let Some(http) = context.http() {
            let sid = http.headers().get("mcp-session-id")?.to_str().ok()?;
            return shared.legacy.output(sid).map(Sink::Http);
        }
        let _ = shared;
        Some(Sink::Conn(context.inner.commands.clone()))
    }

    /// Writes `note`; whether the destination is still there.
    async fn write(&self, note: Command) -> bool {
        match self {
            Sink::Conn(commands) => commands.send(note).await.is_ok(),
            #[cfg(feature = "http")]
            Sink::Http(session) => {
                let Command::TaskStatus { params, .. } = note else {
                    return true;
                };
                match modelctx_types::Notification::new(
                    modelctx_types::consts::NotificationsTasksStatus::VALUE,
                    &params,
                ) {
                    Ok(notification) => session.send(notification.into(), None).await,
                    Err(error) => tracing::warn!(%error, "a task status was not written"),
                }
                true
            }
        }
    }

    /// Writes what `feed` queues, in order, until it is closed or the destination is gone.
    fn drain(self, feed: Arc<Feed>) {
        tokio::spawn(async move {
            while let Some(note) = feed.next().await {
                if !self.write(note).await {
                    feed.close();
                    return;
                }
            }
        });
    }
}

/// The listen streams of one connection that hear of tasks: their principal, and the task ids
/// their filters name (`taskIds`).
pub(crate) struct Listener {
    principal: Option<String>,
    task_ids: Mutex<HashSet<String>>,
    feed: Arc<Feed>,
}

/// A connection's [`Listener`], registered with the server's tasks while it lives.
pub(crate) struct TaskListener {
    tasks: Arc<Tasks>,
    listener: Arc<Listener>,
}

impl TaskListener {
    /// The task ids the connection's listen streams name now (`ids`): kept when the same.
    pub(crate) fn set<'a>(&self, ids: impl Iterator<Item = &'a str> + Clone) {
        let mut known = lock(&self.listener.task_ids);
        let same = ids.clone().count() == known.len() && ids.clone().all(|id| known.contains(id));
        if !same {
            *known = ids.map(str::to_owned).collect();
        }
    }
}

impl Drop for TaskListener {
    fn drop(&mut self) {
        self.listener.feed.close();
        lock(&self.tasks.listeners).retain(|l| !Arc::ptr_eq(l, &self.listener));
    }
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
            listeners: Mutex::new(Vec::new()),
        }
    }

    /// Registers the listen streams of a connection whose principal is `principal`: the changes
    /// of that principal's tasks they name reach them through `commands` (the connection's
    /// runner), until the returned listener is dropped.
    pub(crate) fn listen(
        self: &Arc<Self>,
        principal: Option<&str>,
        commands: Commands,
    ) -> TaskListener {
        let listener = Arc::new(Listener {
            principal: principal.map(str::to_owned),
            task_ids: Mutex::new(HashSet::new()),
            feed: Feed::new(),
        });
        Sink::Conn(commands).drain(listener.feed.clone());
        lock(&self.listeners).push(listener.clone());
        TaskListener {
            tasks: self.clone(),
            listener,
        }
    }

    /// Tells of task `record` as it is now: to the connection that made it (2025-11-25, when
    /// its status or status message changed) and to the listen streams of its principal that
    /// name it.
    pub(crate) fn publish(&self, record: &TaskRecord) {
        let running = lock(&self.running).get(&record.task_id).cloned();
        let now = (record.status, record.status_message.clone());
        if let Some(running) = &running {
            let mut told = lock(&running.told);
            if told.as_ref() == Some(&now) && record.status.is_terminal() {
                return; // its end, told already
            }
            let changed = told.as_ref() != Some(&now);
            *told = Some(now);
            drop(told);
            if let Some(origin) = &running.origin
                && changed
            {
                origin.push(Command::TaskStatus {
                    legacy: true,
                    params: super::legacy::task_json(record),
                });
            }
        }
        let listeners: Vec<Arc<Listener>> = lock(&self.listeners)
            .iter()
            .filter(|l| {
                l.principal == record.principal && lock(&l.task_ids).contains(&record.task_id)
            })
            .cloned()
            .collect();
        if listeners.is_empty() {
            return;
        }
        let params = super::wire::detailed(record);
        for listener in listeners {
            listener.feed.push(Command::TaskStatus {
                legacy: false,
                params: params.clone(),
            });
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

    /// What wakes at each change of task `task_id` made in this process (its settlement
    /// included) and at its expiry, while its handler runs here; `None` for a task whose
    /// handler does not run here (settled already, or running in another instance of a fleet:
    /// its changes are heard only by reading the store again).
    pub(crate) fn changes(&self, task_id: &str) -> Option<Arc<tokio::sync::Notify>> {
        lock(&self.running)
            .get(task_id)
            .map(|running| running.changed.clone())
    }

    /// Creates a task for the request of `context` (kept `ttl_ms` from now) and runs `runner`
    /// as it; the task as created. `modern`: its questions go to the store as `inputRequests`.
    /// `origin`: where a 2025-11-25 task's status changes go (`None` for the extension's).
    pub(crate) async fn start(
        self: &Arc<Self>,
        context: &Context,
        ttl_ms: Option<u64>,
        modern: bool,
        origin: Option<Sink>,
        runner: Runner,
    ) -> Result<TaskRecord, ErrorObject> {
        let (record, link, permit) = self
            .create(context, ttl_ms, modern, CancellationToken::new(), origin)
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
            .create(context, ttl_ms, true, context.inner.cancelled.clone(), None)
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
        origin: Option<Sink>,
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
        let origin = origin.map(|sink| {
            let feed = Feed::new();
            sink.drain(feed.clone());
            feed
        });
        let running = Arc::new(Running {
            task_id: task_id.clone(),
            principal,
            cancel,
            modern,
            waiters: Mutex::new(HashMap::new()),
            asked: AtomicUsize::new(0),
            keys: Mutex::new(HashSet::new()),
            changed: Arc::new(tokio::sync::Notify::new()),
            origin,
            // The client learns the first state from the `CreateTaskResult`.
            told: Mutex::new(Some((record.status, record.status_message.clone()))),
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
        let settled = self
            .apply(
                &link.running.task_id,
                link.running.principal.as_deref(),
                &update,
            )
            .await;
        if let Ok(Some(updated)) = settled
            && !updated.applied
        {
            // Settled meanwhile by another instance (a cancel that came over the bus): its end
            // is told from here, where the task ran.
            self.publish(&updated.record);
        }
        lock(&self.running).remove(&link.running.task_id);
        if let Some(origin) = &link.running.origin {
            origin.close();
        }
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
            let running = lock(&tasks.running).remove(&task_id);
            if let Some(running) = &running {
                running.cancel.cancel();
                if let Some(origin) = &running.origin {
                    origin.close();
                }
            }
            if let Err(e) = tasks.store.remove(&task_id).await {
                tracing::warn!(task = %task_id, error = %e, "an expired task was not removed");
            }
            if let Some(running) = running {
                running.changed.notify_waiters();
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
            Ok(updated) => {
                if let Some(changed) = self.changes(task_id) {
                    changed.notify_waiters();
                }
                if let Some(updated) = &updated
                    && updated.applied
                {
                    self.publish(&updated.record);
                }
                Ok(updated)
            }
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

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::tasks::MemoryTaskStore;

    fn tasks() -> Arc<Tasks> {
        Arc::new(Tasks::new(
            Arc::new(MemoryTaskStore::new()),
            TaskSettings::default(),
        ))
    }

    fn note(n: usize) -> Command {
        let mut params = JsonObject::new();
        params.insert("n".into(), Value::from(n));
        Command::TaskStatus {
            legacy: true,
            params,
        }
    }

    fn numbers(feed: &Feed) -> Vec<Value> {
        let mut out = Vec::new();
        let mut state = lock(&feed.state);
        while let Some(Command::TaskStatus { params, .. }) = state.queue.pop_front() {
            out.push(params.get("n").or(params.get("status")).cloned().unwrap());
        }
        out
    }

    #[test]
    fn a_full_feed_drops_its_oldest_and_keeps_the_newest() {
        let feed = Feed::new();
        for n in 0..FEED_BOUND + 5 {
            feed.push(note(n));
        }
        assert_eq!(feed.len(), FEED_BOUND);
        let got = numbers(&feed);
        assert_eq!(got.first(), Some(&Value::from(5)));
        assert_eq!(got.last(), Some(&Value::from(FEED_BOUND + 4)));
        feed.close();
        feed.push(note(0));
        assert_eq!(feed.len(), 0, "nothing is queued once closed");
    }

    fn running(id: &str, principal: Option<&str>, origin: Option<Arc<Feed>>) -> Arc<Running> {
        Arc::new(Running {
            task_id: id.into(),
            principal: principal.map(str::to_owned),
            cancel: CancellationToken::new(),
            modern: true,
            waiters: Mutex::new(HashMap::new()),
            asked: AtomicUsize::new(0),
            keys: Mutex::new(HashSet::new()),
            changed: Arc::new(tokio::sync::Notify::new()),
            origin,
            told: Mutex::new(Some((TaskStatus::Working, None))),
        })
    }

    fn record(id: &str, principal: Option<&str>, update: &TaskUpdate) -> TaskRecord {
        let mut record = TaskRecord::new(
            id,
            principal.map(str::to_owned),
            "tools/call",
            "2025-11-25",
            UNIX_EPOCH,
        );
        record.apply(update, 1);
        record
    }

    /// The connection that made a task hears each change of its status or status message once,
    /// its end once; a listener only of the tasks of its principal that it names.
    #[test]
    fn changes_reach_the_tasks_origin_and_its_principals_listeners_only() {
        let tasks = tasks();
        let origin = Feed::new();
        lock(&tasks.running).insert(
            "t1".into(),
            running("t1", Some("alice"), Some(origin.clone())),
        );
        let listener = |principal: &str, ids: &[&str]| {
            let listener = Arc::new(Listener {
                principal: Some(principal.into()),
                task_ids: Mutex::new(ids.iter().map(|s| (*s).to_owned()).collect()),
                feed: Feed::new(),
            });
            lock(&tasks.listeners).push(listener.clone());
            listener
        };
        let alice = listener("alice", &["t1"]);
        let alice_other = listener("alice", &["t2"]);
        let bob = listener("bob", &["t1"]);

        let working = record("t1", Some("alice"), &TaskUpdate::new());
        tasks.publish(&working);
        assert!(
            numbers(&origin).is_empty(),
            "the created state is not told again"
        );
        let asked = record(
            "t1",
            Some("alice"),
            &TaskUpdate::new().ask("k", json!({"method": "elicitation/create"})),
        );
        tasks.publish(&asked);
        let answered = record("t1", Some("alice"), &TaskUpdate::new().message("go on"));
        tasks.publish(&answered);
        tasks.publish(&answered);
        let done = record(
            "t1",
            Some("alice"),
            &TaskUpdate::complete(JsonObject::new()),
        );
        tasks.publish(&done);
        tasks.publish(&done);
        assert_eq!(
            numbers(&origin),
            ["input_required", "working", "completed"],
            "each change once, in order"
        );
        // The listener hears every update of the task (its questions, its result), its end once.
        assert_eq!(
            numbers(&alice.feed),
            [
                "working",
                "input_required",
                "working",
                "working",
                "completed"
            ]
        );
        assert!(numbers(&alice_other.feed).is_empty());
        assert!(
            numbers(&bob.feed).is_empty(),
            "another principal hears nothing"
        );
        // The listener's notification is the task as tasks/get gives it.
        tasks.publish(&record("t1", Some("alice"), &TaskUpdate::new()));
        let note = lock(&alice.feed.state).queue.pop_front();
        let Some(Command::TaskStatus { legacy, params }) = note else {
            panic!("a task status");
        };
        assert!(!legacy);
        assert_eq!(params, super::super::wire::detailed(&working));
    }

    /// A connection that is gone stops its writer: nothing more is queued for it.
    #[tokio::test]
    async fn the_feed_of_a_connection_that_ended_closes() {
        let (commands, queue) = crate::run::command::commands(4);
        drop(queue);
        let feed = Feed::new();
        Sink::Conn(commands).drain(feed.clone());
        feed.push(note(1));
        tokio::time::timeout(Duration::from_secs(10), async {
            while !lock(&feed.state).closed {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("closed in time");
        feed.push(note(2));
        assert_eq!(feed.len(), 0);
    }

    /// A listener is forgotten, and its writer ends, with its connection's registration.
    #[tokio::test]
    async fn a_dropped_registration_is_forgotten() {
        let tasks = tasks();
        let (commands, mut queue) = crate::run::command::commands(4);
        let registration = tasks.listen(Some("alice"), commands);
        registration.set(["t1"].into_iter());
        tasks.publish(&record("t1", Some("alice"), &TaskUpdate::new()));
        let heard = tokio::time::timeout(Duration::from_secs(10), queue.recv())
            .await
            .expect("heard in time");
        assert!(matches!(
            heard,
            Some(Command::TaskStatus { legacy: false, .. })
        ));
        drop(registration);
        assert!(lock(&tasks.listeners).is_empty());
    }
}
