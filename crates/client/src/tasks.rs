//! Tasks from the client's side, in both eras: calling a tool as a task and following it to its
//! end ([`Client::call_tool_as_task`], [`TaskHandle`]), and, for a 2025-11-25 server, running
//! the server's task-augmented sampling and elicitation requests as tasks of the client's
//! ([`TaskReceiving`], [`ClientBuilder::receive_tasks`](crate::ClientBuilder::receive_tasks)).
//!
//! * **2026-07-28** (the `io.modelcontextprotocol/tasks` extension): the extension is declared on
//!   the `tools/call` request itself (per-request capabilities); the server decides whether to
//!   answer with a task (`resultType: "task"`) or at once. The handle polls `tasks/get`, whose
//!   answer carries the result or error inline; input the task needs (`input_required` with
//!   `inputRequests`) is answered with the client's sampling, elicitation and roots handlers and
//!   sent with `tasks/update`; `tasks/cancel` asks the server to stop.
//! * **2025-11-25** (experimental tasks): the call carries `params.task` (with the `ttl` asked
//!   for) when the server declares `tasks.requests.tools.call` and the tool's
//!   `execution.taskSupport` allows it; the handle polls `tasks/get` and fetches the outcome with
//!   `tasks/result`, during which the server sends its input requests as ordinary requests
//!   (answered by the same handlers).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use modelctx_session::{Era, IncomingRequest, ProtocolVersion};
use modelctx_types::consts::{
    ElicitationCreate, NotificationsTasks, NotificationsTasksStatus, SamplingCreateMessage,
    TasksCancel, TasksGet, TasksList, TasksResult, TasksUpdate, ToolsCall,
};
use modelctx_types::{
    ErrorCode, ErrorObject, JsonObject, ext_tasks, meta_keys, model, v2025_11_25,
};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::watch;

use crate::driver::Answer;
use crate::input::{BoxFuture, Handlers};
use crate::{CallOptions, Client, Error};

/// The identifier of the tasks extension (2026-07-28), the key of
/// `capabilities.extensions` that declares it.
pub const EXTENSION_ID: &str = "io.modelcontextprotocol/tasks";
/// The `_meta` key that ties a message to a task (2025-11-25): `{"taskId": ...}`.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// At most this many input requests of one task are answered (keys remembered, so that one
/// seen again on the next poll is not asked of the user twice).
const MAX_ANSWERED_INPUTS: usize = 1024;

/// A task as the server last described it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TaskInfo {
    /// The task's id, given by the server.
    pub task_id: String,
    /// Where it stands.
    pub status: model::TaskStatus,
    /// What the server says about it (progress, why it waits, why it failed).
    pub status_message: Option<String>,
    /// When it was created (ISO 8601, as the server wrote it).
    pub created_at: String,
    /// When it last changed (ISO 8601, as the server wrote it).
    pub last_updated_at: String,
    /// How long after its creation the server keeps it (`None`: without limit).
    pub ttl: Option<Duration>,
    /// How often the server would like to be polled.
    pub poll_interval: Option<Duration>,
}

impl TaskInfo {
    /// Whether the task has ended (completed, failed or cancelled): its status will not change.
    pub fn is_terminal(&self) -> bool {
        is_terminal(self.status)
    }
}

/// Whether `status` is final.
pub fn is_terminal(status: model::TaskStatus) -> bool {
    matches!(
        status,
        model::TaskStatus::Completed | model::TaskStatus::Failed | model::TaskStatus::Cancelled
    )
}

/// The wire name of `status`.
pub fn status_str(status: model::TaskStatus) -> &'static str {
    match status {
        model::TaskStatus::Working => "working",
        model::TaskStatus::InputRequired => "input_required",
        model::TaskStatus::Completed => "completed",
        model::TaskStatus::Failed => "failed",
        model::TaskStatus::Cancelled => "cancelled",
        #[allow(unreachable_patterns)]
        _ => "unknown",
    }
}

/// Why a task gave no result.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// A request failed (the connection, a timeout, an invalid result, input that could not be
    /// given).
    #[error(transparent)]
    Call(#[from] Error),
    /// The server does not run tools as tasks: a 2026-07-28 server that does not declare the
    /// `io.modelcontextprotocol/tasks` extension, a 2025-11-25 server without
    /// `tasks.requests.tools.call`, or an older version. Nothing was sent.
    #[error("the server does not support tasks: {0}")]
    NotSupported(String),
    /// The server knows no task of this id (never created, or already forgotten).
    #[error("the server knows no task {task_id}: {message}")]
    UnknownTask {
        /// The task.
        task_id: String,
        /// What the server said.
        message: String,
    },
    /// The task's time to live has passed and the server forgot it (or says it expired).
    #[error("task {task_id} has expired: {message}")]
    Expired {
        /// The task.
        task_id: String,
        /// What the server said.
        message: String,
    },
    /// The task failed with this JSON-RPC error (the error the tool call would have returned).
    #[error("task {task_id} failed: {error}")]
    Failed {
        /// The task.
        task_id: String,
        /// The request's error.
        error: ErrorObject,
    },
    /// The task was cancelled.
    #[error("task {task_id} was cancelled{}", .message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Cancelled {
        /// The task.
        task_id: String,
        /// The server's status message.
        message: Option<String>,
    },
    /// The task had already ended when it was to be cancelled (2025-11-25 refuses to cancel a
    /// finished task).
    #[error("task {task_id} has already ended ({})", status_str(*.status))]
    Finished {
        /// The task.
        task_id: String,
        /// How it ended.
        status: model::TaskStatus,
    },
}

/// Options of [`Client::call_tool_as_task`].
#[derive(Clone)]
#[non_exhaustive]
pub struct TaskOptions {
    /// The options of the `tools/call` request itself (timeout, progress while it is answered).
    pub call: CallOptions,
    /// The time to live asked of a 2025-11-25 server (`params.task.ttl`; the server may choose
    /// another). `None` (the default) leaves it to the server; 2026-07-28 servers choose alone.
    pub ttl: Option<Duration>,
    /// The shortest wait between two polls, whatever the server suggests. Default 100 ms.
    pub min_poll: Duration,
    /// The longest wait between two polls, whatever the server suggests. Default 10 s.
    pub max_poll: Duration,
    /// The wait between polls when the server suggests none. Default 1 s.
    pub default_poll: Duration,
    on_status: Option<StatusFn>,
}

type StatusFn = Arc<dyn Fn(&TaskInfo) + Send + Sync>;

impl std::fmt::Debug for TaskOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskOptions")
            .field("call", &self.call)
            .field("ttl", &self.ttl)
            .field("min_poll", &self.min_poll)
            .field("max_poll", &self.max_poll)
            .field("default_poll", &self.default_poll)
            .field("on_status", &self.on_status.is_some())
            .finish()
    }
}

impl Default for TaskOptions {
    fn default() -> Self {
        TaskOptions {
            call: CallOptions::new(),
            ttl: None,
            min_poll: Duration::from_millis(100),
            max_poll: Duration::from_secs(10),
            default_poll: Duration::from_secs(1),
            on_status: None,
        }
    }
}

impl TaskOptions {
    /// The defaults.
    pub fn new() -> Self {
        TaskOptions::default()
    }

    /// The options of the `tools/call` request.
    pub fn call(mut self, call: CallOptions) -> Self {
        self.call = call;
        self
    }

    /// Asks a 2025-11-25 server to keep the task this long after its creation.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Polls no more often than every `min` and no less often than every `max`, whatever the
    /// server suggests (`max` is raised to `min` if lower).
    pub fn poll_bounds(mut self, min: Duration, max: Duration) -> Self {
        self.min_poll = min;
        self.max_poll = max.max(min);
        self
    }

    /// Calls `callback` with each state of the task that [`TaskHandle::wait`] sees change (status
    /// or status message), from its polls and, at once, from the server's status notifications
    /// (2025-11-25 `notifications/tasks/status`; 2026-07-28 `notifications/tasks` on the listen
    /// stream): to show progress. Called on the waiting task or the connection's: keep it short.
    pub fn on_status(mut self, callback: impl Fn(&TaskInfo) + Send + Sync + 'static) -> Self {
        self.on_status = Some(Arc::new(callback));
        self
    }

    /// The wait before the next poll: the server's interval within the bounds.
    fn poll_wait(&self, suggested: Option<Duration>) -> Duration {
        suggested
            .unwrap_or(self.default_poll)
            .clamp(self.min_poll, self.max_poll.max(self.min_poll))
    }
}

/// A tool call running as a task on the server: poll it ([`status`](Self::status)), wait for
/// its result ([`wait`](Self::wait), [`result`](Self::result)) or cancel it
/// ([`cancel`](Self::cancel)). Cheap to clone; clones follow the same task.
///
/// A 2026-07-28 server may answer a call at once instead of creating a task: the handle is then
/// already complete ([`id`](Self::id) is `None`) and gives that result.
#[derive(Clone)]
pub struct TaskHandle {
    client: Client,
    tool: String,
    version: ProtocolVersion,
    id: Option<String>,
    options: TaskOptions,
    follow: Arc<Follow>,
}

/// What the clones of a handle share, and what the server's status notifications reach
/// ([`Watchers`]): the task's state, who waits on it, and the status callback.
struct Follow {
    state: Mutex<State>,
    /// Woken when a status notification about the task comes.
    heard: tokio::sync::Notify,
    on_status: Option<StatusFn>,
}

impl Follow {
    fn new(state: State, options: &TaskOptions) -> Arc<Follow> {
        Arc::new(Follow {
            state: Mutex::new(state),
            heard: tokio::sync::Notify::new(),
            on_status: options.on_status.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A status notification about the task: its state is kept (a finished task's is never
    /// replaced by an earlier one), the status callback hears of a change, and a waiting
    /// [`TaskHandle::wait`] polls at once.
    fn heard(&self, info: &TaskInfo) {
        let changed = {
            let mut state = self.lock();
            if state.info.as_ref().is_some_and(TaskInfo::is_terminal) {
                return;
            }
            let changed = state.info.as_ref().is_none_or(|old| {
                old.status != info.status || old.status_message != info.status_message
            });
            state.info = Some(info.clone());
            changed
        };
        if changed && let Some(callback) = &self.on_status {
            callback(info);
        }
        self.heard.notify_one();
    }
}

/// The handles of a connection, by task id, that the server's status notifications
/// (`notifications/tasks/status`, `notifications/tasks`) reach. Weak: a dropped handle is
/// forgotten (pruned as others are added).
#[derive(Default)]
pub(crate) struct Watchers {
    by_id: Mutex<HashMap<String, Vec<Weak<Follow>>>>,
}

impl Watchers {
    fn add(&self, task_id: &str, follow: &Arc<Follow>) {
        let mut by_id = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        by_id.retain(|_, handles| {
            handles.retain(|h| h.strong_count() > 0);
            !handles.is_empty()
        });
        by_id
            .entry(task_id.to_owned())
            .or_default()
            .push(Arc::downgrade(follow));
    }

    /// Hands `info` to the handles of its task; whether one follows it.
    pub(crate) fn heard(&self, info: &TaskInfo) -> bool {
        let handles: Vec<Arc<Follow>> = {
            let by_id = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
            by_id
                .get(&info.task_id)
                .map(|h| h.iter().filter_map(Weak::upgrade).collect())
                .unwrap_or_default()
        };
        for handle in &handles {
            handle.heard(info);
        }
        !handles.is_empty()
    }

    /// How many tasks are followed (handles alive).
    #[cfg(test)]
    fn len(&self) -> usize {
        let by_id = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        by_id
            .values()
            .filter(|h| h.iter().any(|h| h.strong_count() > 0))
            .count()
    }
}

/// The task a status notification is about: `notifications/tasks/status` (2025-11-25, the
/// `Task`) or `notifications/tasks` (2026-07-28, the `DetailedTask`); `None` for any other
/// notification, or one that does not read as a task.
pub(crate) fn status_notification(method: &str, params: Option<&RawValue>) -> Option<TaskInfo> {
    let params = params?.get();
    match method {
        NotificationsTasksStatus::VALUE => {
            let task: v2025_11_25::Task = serde_json::from_str(params).ok()?;
            Some(legacy_info(task))
        }
        NotificationsTasks::VALUE => {
            modern_polled(&serde_json::from_str::<Box<RawValue>>(params).ok()?)
                .ok()
                .map(|polled| polled.info)
        }
        _ => None,
    }
}

impl std::fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("id", &self.id)
            .field("tool", &self.tool)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// The last state the server described.
    info: Option<TaskInfo>,
    /// The outcome, once known.
    outcome: Option<Outcome>,
    /// The keys of the input requests answered (2026-07-28).
    answered: HashSet<String>,
    /// When the task's time to live ends, by the client's clock (from when the handle was made).
    expires: Option<tokio::time::Instant>,
}

#[derive(Clone)]
enum Outcome {
    Result(Box<model::CallToolResult>),
    Error(ErrorObject),
}

/// What one `tasks/get` said, beyond the task's state (2026-07-28 inlines it).
struct Polled {
    info: TaskInfo,
    result: Option<Box<RawValue>>,
    error: Option<ErrorObject>,
    inputs: Option<BTreeMap<String, model::InputRequest>>,
}

impl Client {
    /// Calls tool `name` with `arguments` as a task: returns once the server has created the task
    /// (or, in the 2026-07-28 era, answered at once), with a handle to follow it.
    ///
    /// * 2026-07-28: the server must declare the `io.modelcontextprotocol/tasks` extension; the
    ///   call declares it for this request only, and the server decides whether to make a task.
    /// * 2025-11-25: the server must declare `tasks.requests.tools.call`. A tool it listed with
    ///   `execution.taskSupport` absent or `forbidden` is called normally (the handle is then
    ///   complete); the tools are listed once to learn it when they have not been.
    ///
    /// Otherwise [`TaskError::NotSupported`], and nothing is sent.
    ///
    /// ```no_run
    /// use modelctx_client::TaskOptions;
    ///
    /// # async fn f(client: modelctx_client::Client) -> Result<(), modelctx_client::TaskError> {
    /// let options = TaskOptions::new().on_status(|task| {
    ///     eprintln!("{:?} {}", task.status, task.status_message.as_deref().unwrap_or(""));
    /// });
    /// let task = client.call_tool_as_task("build", serde_json::json!({}), options).await?;
    /// let result = task.wait().await?;
    /// # let _ = result; Ok(()) }
    /// ```
    pub async fn call_tool_as_task(
        &self,
        name: &str,
        arguments: impl Serialize,
        options: TaskOptions,
    ) -> Result<TaskHandle, TaskError> {
        let version = self
            .protocol_version()
            .ok_or_else(|| Error::Closed(self.inner.shared.closed_reason()))?;
        let mut params = crate::client::tool_params(name, arguments)?;
        let as_task = match version.era() {
            Era::Modern => {
                if !self.declares(&["extensions", EXTENSION_ID]) {
                    return Err(TaskError::NotSupported(format!(
                        "it does not declare the {EXTENSION_ID} extension"
                    )));
                }
                declare_extension(&mut params);
                true
            }
            _ if version < ProtocolVersion::V2025_11_25 => {
                return Err(TaskError::NotSupported(format!(
                    "protocol {version} has no tasks"
                )));
            }
            _ => {
                if !self.declares(&["tasks", "requests", "tools", "call"]) {
                    return Err(TaskError::NotSupported(
                        "it does not declare tasks.requests.tools.call".into(),
                    ));
                }
                let as_task = self.tool_takes_tasks(name).await?;
                if as_task {
                    let mut task = JsonObject::new();
                    if let Some(ttl) = options.ttl {
                        task.insert("ttl".into(), Value::from(millis(ttl)));
                    }
                    params.insert("task".into(), Value::Object(task));
                }
                as_task
            }
        };
        let answer = self.send_tool_call(params, &options.call).await?;
        let handle = |id: Option<String>, state: State| {
            let follow = Follow::new(state, &options);
            if let Some(id) = &id {
                self.inner.shared.task_watchers.add(id, &follow);
            }
            TaskHandle {
                client: self.clone(),
                tool: name.to_owned(),
                version: answer.version,
                id,
                options: options.clone(),
                follow,
            }
        };
        let created = match answer.version.era() {
            Era::Modern if crate::wire::result_type(&answer.result) == "task" => {
                let created: ext_tasks::CreateTaskResult =
                    serde_json::from_str(answer.result.get())
                        .map_err(|e| Error::invalid(ToolsCall::VALUE, e))?;
                Some(TaskInfo {
                    task_id: created.task_id,
                    status: created.status.into(),
                    status_message: created.status_message,
                    created_at: created.created_at,
                    last_updated_at: created.last_updated_at,
                    ttl: created.ttl_ms.map(ms),
                    poll_interval: created.poll_interval_ms.map(ms),
                })
            }
            Era::Legacy if as_task => {
                let created: v2025_11_25::CreateTaskResult =
                    serde_json::from_str(answer.result.get())
                        .map_err(|e| Error::invalid(ToolsCall::VALUE, e))?;
                Some(legacy_info(created.task))
            }
            _ => None,
        };
        let Some(info) = created else {
            let result = self.tool_result(name, &answer).await?;
            let state = State {
                outcome: Some(Outcome::Result(Box::new(result))),
                ..State::default()
            };
            return Ok(handle(None, state));
        };
        let expires = info.ttl.map(|ttl| tokio::time::Instant::now() + ttl);
        let id = info.task_id.clone();
        if let Some(callback) = &options.on_status {
            callback(&info);
        }
        let state = State {
            info: Some(info),
            expires,
            ..State::default()
        };
        Ok(handle(Some(id), state))
    }

    /// A handle on the task `task_id` of tool calls made earlier (by this client or another
    /// connection of the same principal): to poll, wait for or cancel it. Its calls fail with
    /// [`TaskError::NotSupported`] when the server does not support tasks.
    pub fn task(&self, task_id: &str) -> TaskHandle {
        let options = TaskOptions::default();
        let follow = Follow::new(State::default(), &options);
        self.inner.shared.task_watchers.add(task_id, &follow);
        TaskHandle {
            client: self.clone(),
            tool: String::new(),
            version: self
                .protocol_version()
                .unwrap_or(ProtocolVersion::V2025_11_25),
            id: Some(task_id.to_owned()),
            options,
            follow,
        }
    }

    /// Whether the server declared the capability at `path`.
    fn declares(&self, path: &[&str]) -> bool {
        let Some(caps) = self.server_capabilities_json() else {
            return false;
        };
        let mut at = caps.get(path[0]);
        for key in &path[1..] {
            at = at.and_then(|v| v.get(key));
        }
        at.is_some_and(|v| !v.is_null() && v.as_bool() != Some(false))
    }

    /// 2025-11-25: whether tool `name` may be called as a task, from its listed
    /// `execution.taskSupport` (the tools are listed when nothing is known of it).
    async fn tool_takes_tasks(&self, name: &str) -> Result<bool, Error> {
        if let Some(support) = self.listed_task_support(name) {
            return Ok(support);
        }
        let tools = self.list_all_tools().await?;
        Ok(tools.iter().find(|t| t.name == name).is_none_or(|tool| {
            // A tool not listed is called as a task: the server says what it thinks of it.
            tool.execution
                .as_ref()
                .and_then(|e| e.task_support)
                .is_some_and(|s| !matches!(s, model::ToolExecutionTaskSupport::Forbidden))
        }))
    }

    fn listed_task_support(&self, name: &str) -> Option<bool> {
        self.inner
            .shared
            .tool_schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .and_then(|t| t.task_support)
    }
}

impl TaskHandle {
    /// The task's id; `None` when the server answered the call at once, without a task.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The state of the task the server last described (no request is sent); `None` for a
    /// call answered at once, or a handle from [`Client::task`] not polled yet.
    pub fn last_status(&self) -> Option<TaskInfo> {
        self.lock().info.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.follow.lock()
    }

    fn task_id(&self) -> &str {
        self.id.as_deref().unwrap_or_default()
    }

    /// Asks the server where the task stands (`tasks/get`). Input the task waits for is not
    /// answered here ([`wait`](Self::wait) does).
    pub async fn status(&self) -> Result<TaskInfo, TaskError> {
        Ok(self.poll().await?.info)
    }

    /// One `tasks/get`, remembered.
    async fn poll(&self) -> Result<Polled, TaskError> {
        let Some(id) = self.id.clone() else {
            return Err(TaskError::Finished {
                task_id: String::new(),
                status: model::TaskStatus::Completed,
            });
        };
        let answer = self.request(TasksGet::VALUE, &id, None).await?;
        let polled = match answer.version.era() {
            Era::Modern => modern_polled(&answer.result)?,
            Era::Legacy => {
                let task: v2025_11_25::GetTaskResult = serde_json::from_str(answer.result.get())
                    .map_err(|e| Error::invalid(TasksGet::VALUE, e))?;
                Polled {
                    info: TaskInfo {
                        task_id: task.task_id,
                        status: task.status.into(),
                        status_message: task.status_message,
                        created_at: task.created_at,
                        last_updated_at: task.last_updated_at,
                        ttl: task.ttl.map(ms),
                        poll_interval: task.poll_interval.map(ms),
                    },
                    result: None,
                    error: None,
                    inputs: None,
                }
            }
        };
        if polled.info.task_id != id {
            return Err(Error::invalid(
                TasksGet::VALUE,
                format!("the answer is about task {}, not {id}", polled.info.task_id),
            )
            .into());
        }
        let outcome = match (&polled.result, &polled.error) {
            (Some(raw), _) => {
                let answer = Answer {
                    version: answer.version,
                    result: raw.clone(),
                };
                Some(Outcome::Result(Box::new(
                    self.client.tool_result(&self.tool, &answer).await?,
                )))
            }
            (None, Some(error)) => Some(Outcome::Error(error.clone())),
            _ => None,
        };
        let changed = {
            let mut state = self.lock();
            let changed = state.info.as_ref().is_none_or(|old| {
                old.status != polled.info.status || old.status_message != polled.info.status_message
            });
            state.info = Some(polled.info.clone());
            if let Some(ttl) = polled.info.ttl
                && state.expires.is_none()
            {
                state.expires = Some(tokio::time::Instant::now() + ttl);
            }
            if outcome.is_some() {
                state.outcome = outcome;
            }
            changed
        };
        if changed && let Some(callback) = &self.follow.on_status {
            callback(&polled.info);
        }
        Ok(polled)
    }

    /// Follows the task to its end and returns its result: polls `tasks/get` at the server's
    /// interval (within [`TaskOptions`]' bounds), answers the input it asks for with the client's
    /// handlers (2026-07-28: `tasks/update`; 2025-11-25: through `tasks/result`, during which
    /// the server asks), then returns the result. A failed task is [`TaskError::Failed`], a
    /// cancelled one [`TaskError::Cancelled`].
    ///
    /// It waits as long as the task runs: wrap it in a timeout to bound it (dropping the future
    /// stops polling; it does not cancel the task).
    pub async fn wait(&self) -> Result<model::CallToolResult, TaskError> {
        if let Some(outcome) = self.known_outcome() {
            return self.finish(outcome);
        }
        // A 2026-07-28 server tells of the task on the listen stream while this waits.
        let _listening = self.listen();
        loop {
            let polled = self.poll().await?;
            match polled.info.status {
                model::TaskStatus::Cancelled => return Err(self.cancelled(&polled.info)),
                status if is_terminal(status) || status == model::TaskStatus::InputRequired => {
                    if self.version.era() == Era::Legacy {
                        return self.legacy_result().await;
                    }
                    if let Some(outcome) = self.known_outcome() {
                        return self.finish(outcome);
                    }
                    if let Some(inputs) = polled.inputs {
                        self.answer(inputs).await?;
                        continue;
                    }
                    if is_terminal(status) {
                        return Err(Error::invalid(
                            TasksGet::VALUE,
                            "a finished task without its result or error",
                        )
                        .into());
                    }
                }
                _ => {}
            }
            let wait = self.options.poll_wait(polled.info.poll_interval);
            // The next poll comes at the server's interval, or at once when the server tells
            // of a change (`notifications/tasks/status`, `notifications/tasks`).
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.follow.heard.notified() => {}
            }
        }
    }

    /// Asks the client's listen stream (2026-07-28) to carry this task's status until the
    /// returned guard is dropped; nothing for a 2025-11-25 server (its notifications need no
    /// asking).
    fn listen(&self) -> Option<ListenGuard> {
        let id = self.id.clone()?;
        if self.version.era() != Era::Modern {
            return None;
        }
        let commands = self.client.inner.commands.clone();
        commands
            .try_send(crate::driver::Command::WatchTask {
                task_id: id.clone(),
                on: true,
            })
            .ok()?;
        Some(ListenGuard { commands, id })
    }

    /// The task's result: at once when it is known; otherwise, from a 2025-11-25 server,
    /// `tasks/result` (which the server holds until the task ends, sending its input requests
    /// meanwhile), and from a 2026-07-28 one as [`wait`](Self::wait) does.
    pub async fn result(&self) -> Result<model::CallToolResult, TaskError> {
        if let Some(outcome) = self.known_outcome() {
            return self.finish(outcome);
        }
        if self.version.era() == Era::Modern {
            return self.wait().await;
        }
        self.legacy_result().await
    }

    /// `tasks/result` (2025-11-25).
    async fn legacy_result(&self) -> Result<model::CallToolResult, TaskError> {
        if let Some(info) = self.last_status()
            && info.status == model::TaskStatus::Cancelled
        {
            return Err(self.cancelled(&info));
        }
        let id = self.task_id().to_owned();
        let options = CallOptions::new().timeout(None);
        let outcome = match self.request(TasksResult::VALUE, &id, Some(options)).await {
            Ok(answer) => Outcome::Result(Box::new(
                self.client.tool_result(&self.tool, &answer).await?,
            )),
            Err(TaskError::Call(Error::Remote(error))) => {
                // The task's own error, or the task is gone or cancelled: `tasks/get` tells.
                let info = self.status().await?;
                if info.status == model::TaskStatus::Cancelled {
                    return Err(self.cancelled(&info));
                }
                Outcome::Error(error)
            }
            Err(other) => return Err(other),
        };
        self.lock().outcome = Some(outcome.clone());
        self.finish(outcome)
    }

    /// Asks the server to cancel the task (`tasks/cancel`). Cancelling is cooperative: the task
    /// may still end otherwise, as [`status`](Self::status) shows. Cancelling a task already
    /// cancelled, or, in the 2026-07-28 era, ended, is no error; a 2025-11-25 server refuses to
    /// cancel a task that ended otherwise ([`TaskError::Finished`]).
    pub async fn cancel(&self) -> Result<(), TaskError> {
        let Some(id) = self.id.clone() else {
            return Err(TaskError::Finished {
                task_id: String::new(),
                status: model::TaskStatus::Completed,
            });
        };
        match self.request(TasksCancel::VALUE, &id, None).await {
            Ok(answer) => {
                if answer.version.era() == Era::Legacy
                    && let Ok(task) =
                        serde_json::from_str::<v2025_11_25::CancelTaskResult>(answer.result.get())
                {
                    self.lock().info = Some(TaskInfo {
                        task_id: task.task_id,
                        status: task.status.into(),
                        status_message: task.status_message,
                        created_at: task.created_at,
                        last_updated_at: task.last_updated_at,
                        ttl: task.ttl.map(ms),
                        poll_interval: task.poll_interval.map(ms),
                    });
                }
                Ok(())
            }
            Err(TaskError::UnknownTask { task_id, message }) => {
                // 2025-11-25 refuses to cancel a finished task with the same code as an
                // unknown one: `tasks/get` tells which.
                let info = self.status().await?;
                match info.status {
                    model::TaskStatus::Cancelled => Ok(()),
                    status if is_terminal(status) => Err(TaskError::Finished { task_id, status }),
                    _ => Err(TaskError::UnknownTask { task_id, message }),
                }
            }
            Err(other) => Err(other),
        }
    }

    /// Sends `method` about task `id`; a -32602 answer is an unknown or expired task.
    async fn request(
        &self,
        method: &str,
        id: &str,
        options: Option<CallOptions>,
    ) -> Result<Answer, TaskError> {
        if !self.server_supports_tasks() {
            return Err(TaskError::NotSupported(
                "it declares no tasks (2025-11-25 `tasks`, or the 2026-07-28 extension)".into(),
            ));
        }
        let mut params = JsonObject::new();
        params.insert("taskId".into(), Value::from(id));
        self.send(method, params, options).await
    }

    async fn send(
        &self,
        method: &str,
        mut params: JsonObject,
        options: Option<CallOptions>,
    ) -> Result<Answer, TaskError> {
        if self.version.era() == Era::Modern {
            // Every request of the extension declares it (-32021 otherwise).
            declare_extension(&mut params);
        }
        let id = params
            .get("taskId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match self
            .client
            .call(method, params, &options.unwrap_or_default())
            .await
        {
            Err(Error::Remote(error)) if error.code == ErrorCode::INVALID_PARAMS => {
                let expired = self
                    .lock()
                    .expires
                    .is_some_and(|at| tokio::time::Instant::now() >= at)
                    || error.message.to_ascii_lowercase().contains("expired");
                let not_found = error.message.to_ascii_lowercase().contains("not found")
                    || error.message.to_ascii_lowercase().contains("unknown");
                if expired {
                    Err(TaskError::Expired {
                        task_id: id,
                        message: error.message,
                    })
                } else if not_found || method != TasksResult::VALUE {
                    Err(TaskError::UnknownTask {
                        task_id: id,
                        message: error.message,
                    })
                } else {
                    Err(TaskError::Call(Error::Remote(error)))
                }
            }
            other => Ok(other?),
        }
    }

    fn server_supports_tasks(&self) -> bool {
        match self.client.era() {
            Some(Era::Modern) => self.client.declares(&["extensions", EXTENSION_ID]),
            Some(_) => self.client.declares(&["tasks"]),
            None => true, // closed: the call says so
        }
    }

    /// Answers the input requests not answered yet, then sends the answers with
    /// `tasks/update` (2026-07-28).
    async fn answer(&self, inputs: BTreeMap<String, model::InputRequest>) -> Result<(), TaskError> {
        let fresh: BTreeMap<String, model::InputRequest> = {
            let state = self.lock();
            inputs
                .into_iter()
                .filter(|(key, _)| !state.answered.contains(key))
                .collect()
        };
        if fresh.is_empty() {
            // Answered already: wait for the server to take them in.
            let wait = self
                .options
                .poll_wait(self.last_status().and_then(|i| i.poll_interval));
            tokio::time::sleep(wait).await;
            return Ok(());
        }
        {
            let state = self.lock();
            if state.answered.len() + fresh.len() > MAX_ANSWERED_INPUTS {
                return Err(Error::TooManyRounds(MAX_ANSWERED_INPUTS as u32).into());
            }
        }
        let keys: Vec<String> = fresh.keys().cloned().collect();
        let responses = self.client.answer_inputs(self.version, fresh).await?;
        let mut params = JsonObject::new();
        params.insert("taskId".into(), Value::from(self.task_id()));
        params.insert("inputResponses".into(), Value::Object(responses));
        self.send(TasksUpdate::VALUE, params, None).await?;
        self.lock().answered.extend(keys);
        Ok(())
    }

    fn known_outcome(&self) -> Option<Outcome> {
        self.lock().outcome.clone()
    }

    fn finish(&self, outcome: Outcome) -> Result<model::CallToolResult, TaskError> {
        match outcome {
            Outcome::Result(result) => Ok(*result),
            Outcome::Error(error) => Err(TaskError::Failed {
                task_id: self.task_id().to_owned(),
                error,
            }),
        }
    }

    fn cancelled(&self, info: &TaskInfo) -> TaskError {
        TaskError::Cancelled {
            task_id: info.task_id.clone(),
            message: info.status_message.clone(),
        }
    }
}

/// Takes a task off the listen stream's `taskIds` when dropped.
struct ListenGuard {
    commands: tokio::sync::mpsc::Sender<crate::driver::Command>,
    id: String,
}

impl Drop for ListenGuard {
    fn drop(&mut self) {
        let _ = self.commands.try_send(crate::driver::Command::WatchTask {
            task_id: std::mem::take(&mut self.id),
            on: false,
        });
    }
}

/// A 2026-07-28 `tasks/get` result, decoded with the extension's schema.
fn modern_polled(raw: &RawValue) -> Result<Polled, Error> {
    let method = TasksGet::VALUE;
    let task: ext_tasks::GetTaskResult =
        serde_json::from_str(raw.get()).map_err(|e| Error::invalid(method, e))?;
    macro_rules! info {
        ($t:expr, $status:expr) => {
            TaskInfo {
                task_id: $t.task_id,
                status: $status,
                status_message: $t.status_message,
                created_at: $t.created_at,
                last_updated_at: $t.last_updated_at,
                ttl: $t.ttl_ms.map(ms),
                poll_interval: $t.poll_interval_ms.map(ms),
            }
        };
    }
    let mut polled = Polled {
        info: TaskInfo {
            task_id: String::new(),
            status: model::TaskStatus::Working,
            status_message: None,
            created_at: String::new(),
            last_updated_at: String::new(),
            ttl: None,
            poll_interval: None,
        },
        result: None,
        error: None,
        inputs: None,
    };
    match task {
        ext_tasks::GetTaskResult::Working(t) => polled.info = info!(t, model::TaskStatus::Working),
        ext_tasks::GetTaskResult::Cancelled(t) => {
            polled.info = info!(t, model::TaskStatus::Cancelled)
        }
        ext_tasks::GetTaskResult::Completed(t) => {
            let result = serde_json::value::to_raw_value(&t.result)
                .map_err(|e| Error::invalid(method, e))?;
            polled.result = Some(result);
            polled.info = info!(t, model::TaskStatus::Completed);
        }
        ext_tasks::GetTaskResult::Failed(t) => {
            let error = serde_json::to_value(&t.error)
                .and_then(serde_json::from_value::<ErrorObject>)
                .map_err(|e| Error::invalid(method, e))?;
            polled.error = Some(error);
            polled.info = info!(t, model::TaskStatus::Failed);
        }
        ext_tasks::GetTaskResult::InputRequired(t) => {
            let requests = serde_json::json!({
                "resultType": "input_required",
                "inputRequests": t.input_requests,
            });
            let raw = serde_json::value::to_raw_value(&requests)
                .map_err(|e| Error::invalid(method, e))?;
            let input = crate::wire::input_required(&raw).map_err(|e| Error::invalid(method, e))?;
            polled.inputs = Some(input.input_requests.unwrap_or_default());
            polled.info = info!(t, model::TaskStatus::InputRequired);
        }
    }
    Ok(polled)
}

/// Declares the tasks extension in the client capabilities of this (2026-07-28) request only
/// (added to those the request's `_meta` declares already).
pub(crate) fn declare_extension(params: &mut JsonObject) {
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(JsonObject::new()));
    let Value::Object(meta) = meta else {
        return;
    };
    let caps = meta
        .entry(meta_keys::CLIENT_CAPABILITIES)
        .or_insert_with(|| Value::Object(JsonObject::new()));
    if !caps.is_object() {
        *caps = Value::Object(JsonObject::new());
    }
    if let Value::Object(caps) = caps {
        let extensions = caps
            .entry("extensions")
            .or_insert_with(|| Value::Object(JsonObject::new()));
        if !extensions.is_object() {
            *extensions = Value::Object(JsonObject::new());
        }
        if let Value::Object(extensions) = extensions {
            extensions.insert(EXTENSION_ID.into(), serde_json::json!({}));
        }
    }
}

fn legacy_info(task: v2025_11_25::Task) -> TaskInfo {
    TaskInfo {
        task_id: task.task_id,
        status: task.status.into(),
        status_message: task.status_message,
        created_at: task.created_at,
        last_updated_at: task.last_updated_at,
        ttl: task.ttl.map(ms),
        poll_interval: task.poll_interval.map(ms),
    }
}

/// Milliseconds as a duration (negative: zero).
fn ms(millis: i64) -> Duration {
    Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

// -- the client as the receiver of a 2025-11-25 server's task-augmented requests ------------------

/// How the client runs a 2025-11-25 server's task-augmented `sampling/createMessage` and
/// `elicitation/create` requests as tasks
/// ([`ClientBuilder::receive_tasks`](crate::ClientBuilder::receive_tasks)).
///
/// The client declares `capabilities.tasks` (`list`, `cancel`, and `requests.sampling.createMessage`
/// and `requests.elicitation.create` for the handlers it has); a request carrying `params.task`
/// is answered at once with the task, the handler runs meanwhile, and the server's `tasks/get`,
/// `tasks/result`, `tasks/list` and `tasks/cancel` are answered from a bounded table. A task is
/// forgotten once its time to live has passed since its creation (its handler stopped if it
/// still runs).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TaskReceiving {
    /// The most tasks kept at once (running or finished and not expired); beyond, a
    /// task-augmented request is refused with an error. Default 64.
    pub max_tasks: usize,
    /// The time to live of a task when the server asks for none. Default 60 s.
    pub default_ttl: Duration,
    /// The longest time to live given, whatever the server asks. Default 1 hour.
    pub max_ttl: Duration,
    /// The poll interval suggested to the server. Default 500 ms.
    pub poll_interval: Duration,
    /// Tasks per page of `tasks/list`. Default 50.
    pub page_size: usize,
}

impl Default for TaskReceiving {
    fn default() -> Self {
        TaskReceiving {
            max_tasks: 64,
            default_ttl: Duration::from_secs(60),
            max_ttl: Duration::from_secs(3600),
            poll_interval: Duration::from_millis(500),
            page_size: 50,
        }
    }
}

impl TaskReceiving {
    /// The defaults.
    pub fn new() -> Self {
        TaskReceiving::default()
    }

    /// Keeps at most `max` tasks at once.
    pub fn max_tasks(mut self, max: usize) -> Self {
        self.max_tasks = max;
        self
    }

    /// The time to live when the server asks for none, and the longest one given.
    pub fn ttl(mut self, default: Duration, max: Duration) -> Self {
        self.default_ttl = default.min(max);
        self.max_ttl = max;
        self
    }

    /// The capabilities declared for `handlers`.
    pub(crate) fn capabilities(&self, handlers: &Handlers) -> Value {
        let mut requests = JsonObject::new();
        if handlers.sampling.is_some() {
            requests.insert("sampling".into(), serde_json::json!({"createMessage": {}}));
        }
        if handlers.elicitation.is_some() {
            requests.insert("elicitation".into(), serde_json::json!({"create": {}}));
        }
        serde_json::json!({"list": {}, "cancel": {}, "requests": requests})
    }
}

/// The tasks the client runs for the server.
pub(crate) struct Receiver {
    config: TaskReceiving,
    table: Mutex<Table>,
    me: Weak<Receiver>,
}

#[derive(Default)]
struct Table {
    tasks: HashMap<String, Entry>,
    /// Numbers the tasks, in order of creation (ids and list order).
    next: u64,
}

struct Entry {
    seq: u64,
    status: model::TaskStatus,
    status_message: Option<String>,
    created_at: String,
    last_updated_at: String,
    ttl: Duration,
    outcome: Option<Result<Value, ErrorObject>>,
    /// Tells `tasks/result` waiters that the task ended.
    done: watch::Sender<bool>,
    work: Option<tokio::task::AbortHandle>,
    expiry: Option<tokio::task::AbortHandle>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            work.abort();
        }
        if let Some(expiry) = self.expiry.take() {
            expiry.abort();
        }
    }
}

impl Entry {
    fn task_json(&self, id: &str, config: &TaskReceiving) -> Value {
        let mut task = serde_json::json!({
            "taskId": id,
            "status": status_str(self.status),
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttl": millis(self.ttl),
            "pollInterval": millis(config.poll_interval),
        });
        if let Some(message) = &self.status_message {
            task["statusMessage"] = Value::from(message.as_str());
        }
        task
    }
}

type Reply = Result<Value, ErrorObject>;

fn not_found(id: &str) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INVALID_PARAMS,
        format!("Failed to retrieve task: Task not found ({id})"),
    )
}

impl Receiver {
    pub(crate) fn new(config: TaskReceiving) -> Arc<Receiver> {
        Arc::new_cyclic(|me| Receiver {
            config,
            table: Mutex::new(Table::default()),
            me: me.clone(),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many tasks are kept.
    pub(crate) fn len(&self) -> usize {
        self.table().tasks.len()
    }

    /// The answer to the server's `request` when it is about tasks (a `tasks/*` request, or a
    /// task-augmented sampling or elicitation); `None` for any other request.
    pub(crate) fn intercept(
        &self,
        handlers: &Handlers,
        request: &IncomingRequest,
    ) -> Option<BoxFuture<Reply>> {
        if request.version != ProtocolVersion::V2025_11_25 {
            return None;
        }
        let params: JsonObject = request
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let task_id = params
            .get("taskId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let reply: Reply = match request.method.as_str() {
            TasksGet::VALUE => self.get(task_id.as_deref()),
            TasksCancel::VALUE => self.cancel(task_id.as_deref()),
            TasksList::VALUE => self.list(params.get("cursor")),
            TasksResult::VALUE => return Some(self.result(task_id)),
            SamplingCreateMessage::VALUE | ElicitationCreate::VALUE => {
                let task = params.get("task")?.as_object()?.clone();
                self.create(handlers, request, &task)
            }
            _ => return None,
        };
        Some(Box::pin(std::future::ready(reply)))
    }

    fn create(&self, handlers: &Handlers, request: &IncomingRequest, task: &JsonObject) -> Reply {
        let kind = if request.method == SamplingCreateMessage::VALUE {
            handlers.sampling.is_some()
        } else {
            handlers.elicitation.is_some()
        };
        if !kind {
            return Err(ErrorObject::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("`{}` is not handled by this client", request.method),
            ));
        }
        let ttl = task
            .get("ttl")
            .and_then(Value::as_u64)
            .map_or(self.config.default_ttl, Duration::from_millis)
            .min(self.config.max_ttl);
        let now = iso8601(SystemTime::now());
        let mut table = self.table();
        if table.tasks.len() >= self.config.max_tasks {
            return Err(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "this client runs at most {} tasks at once; try again later",
                    self.config.max_tasks
                ),
            ));
        }
        table.next += 1;
        let seq = table.next;
        let id = format!("client-task-{seq}-{:x}", random_suffix(seq));
        let (done, _) = watch::channel(false);
        let entry = Entry {
            seq,
            status: model::TaskStatus::Working,
            status_message: None,
            created_at: now.clone(),
            last_updated_at: now,
            ttl,
            outcome: None,
            done,
            work: None,
            expiry: None,
        };
        let task_json = entry.task_json(&id, &self.config);
        table.tasks.insert(id.clone(), entry);
        drop(table);
        // The handler runs meanwhile; its answer settles the task.
        let handlers = handlers.clone();
        let (version, method, params) = (
            request.version,
            request.method.clone(),
            request.params.clone(),
        );
        let me = self.me.clone();
        let task_id = id.clone();
        let work = tokio::spawn(async move {
            let answer = handlers
                .answer_request(version, &method, params.as_deref())
                .await;
            if let Some(me) = me.upgrade() {
                me.settle(&task_id, answer);
            }
        });
        let me = self.me.clone();
        let task_id = id.clone();
        let expiry = tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            if let Some(me) = me.upgrade() {
                me.table().tasks.remove(&task_id);
            }
        });
        if let Some(entry) = self.table().tasks.get_mut(&id) {
            entry.work = Some(work.abort_handle());
            entry.expiry = Some(expiry.abort_handle());
        }
        Ok(serde_json::json!({ "task": task_json }))
    }

    /// The handler answered task `id`.
    fn settle(&self, id: &str, answer: Reply) {
        let mut table = self.table();
        let Some(entry) = table.tasks.get_mut(id) else {
            return; // expired meanwhile
        };
        if is_terminal(entry.status) {
            return; // cancelled meanwhile
        }
        entry.status = match &answer {
            Ok(_) => model::TaskStatus::Completed,
            Err(error) => {
                entry.status_message = Some(error.message.clone());
                model::TaskStatus::Failed
            }
        };
        entry.last_updated_at = iso8601(SystemTime::now());
        entry.outcome = Some(answer);
        entry.work = None;
        entry.done.send_replace(true);
    }

    fn get(&self, id: Option<&str>) -> Reply {
        let id = id.unwrap_or_default();
        let table = self.table();
        let entry = table.tasks.get(id).ok_or_else(|| not_found(id))?;
        Ok(entry.task_json(id, &self.config))
    }

    fn cancel(&self, id: Option<&str>) -> Reply {
        let id = id.unwrap_or_default();
        let mut table = self.table();
        let entry = table.tasks.get_mut(id).ok_or_else(|| not_found(id))?;
        if is_terminal(entry.status) {
            return Err(ErrorObject::new(
                ErrorCode::INVALID_PARAMS,
                format!(
                    "Cannot cancel task {id}: it is already {}",
                    status_str(entry.status)
                ),
            ));
        }
        if let Some(work) = entry.work.take() {
            work.abort();
        }
        entry.status = model::TaskStatus::Cancelled;
        entry.status_message = Some("The task was cancelled by request.".into());
        entry.last_updated_at = iso8601(SystemTime::now());
        entry.outcome = Some(Err(ErrorObject::new(
            ErrorCode::INTERNAL_ERROR,
            format!("task {id} was cancelled"),
        )));
        entry.done.send_replace(true);
        Ok(entry.task_json(id, &self.config))
    }

    fn list(&self, cursor: Option<&Value>) -> Reply {
        let after = match cursor {
            None | Some(Value::Null) => 0,
            Some(Value::String(c)) => c.parse::<u64>().map_err(|_| {
                ErrorObject::new(ErrorCode::INVALID_PARAMS, format!("invalid cursor {c:?}"))
            })?,
            Some(other) => {
                return Err(ErrorObject::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("invalid cursor {other}"),
                ));
            }
        };
        let table = self.table();
        let mut tasks: Vec<(&String, &Entry)> = table
            .tasks
            .iter()
            .filter(|(_, entry)| entry.seq > after)
            .collect();
        tasks.sort_by_key(|(_, entry)| entry.seq);
        let page = self.config.page_size.max(1);
        let more = tasks.len() > page;
        tasks.truncate(page);
        let mut result = serde_json::json!({
            "tasks": tasks
                .iter()
                .map(|(id, entry)| entry.task_json(id, &self.config))
                .collect::<Vec<_>>(),
        });
        if more && let Some((_, last)) = tasks.last() {
            result["nextCursor"] = Value::from(last.seq.to_string());
        }
        Ok(result)
    }

    /// `tasks/result`: the outcome once the task ends (waiting for it), the result with the
    /// related-task `_meta`.
    fn result(&self, id: Option<String>) -> BoxFuture<Reply> {
        let id = id.unwrap_or_default();
        let waiter = self
            .table()
            .tasks
            .get(&id)
            .map(|entry| entry.done.subscribe());
        let me = self.me.clone();
        Box::pin(async move {
            let Some(mut waiter) = waiter else {
                return Err(not_found(&id));
            };
            if waiter.wait_for(|done| *done).await.is_err() {
                return Err(ErrorObject::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("Failed to retrieve task: Task has expired ({id})"),
                ));
            }
            let me = me.upgrade().ok_or_else(|| not_found(&id))?;
            let table = me.table();
            let entry = table.tasks.get(&id).ok_or_else(|| not_found(&id))?;
            match entry.outcome.clone() {
                Some(Ok(mut value)) => {
                    if let Value::Object(result) = &mut value {
                        let meta = result
                            .entry("_meta")
                            .or_insert_with(|| Value::Object(JsonObject::new()));
                        if let Value::Object(meta) = meta {
                            meta.insert(RELATED_TASK.into(), serde_json::json!({ "taskId": id }));
                        }
                    }
                    Ok(value)
                }
                Some(Err(error)) => Err(error),
                None => Err(ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("task {id} ended without an outcome"),
                )),
            }
        })
    }
}

/// A few bits that make task ids hard to guess across connections (not a secret: the table is
/// per connection, and ids are checked only against it).
fn random_suffix(seq: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(seq);
    hasher.finish() & 0xffff_ffff
}

/// `time` as an ISO 8601 (RFC 3339) UTC timestamp with milliseconds.
fn iso8601(time: SystemTime) -> String {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil-from-days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc_3339() {
        assert_eq!(iso8601(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_288_000_123);
        assert_eq!(iso8601(t), "2025-11-28T00:00:00.123Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400 + 3661);
        assert_eq!(iso8601(leap), "2000-02-29T01:01:01.000Z");
    }

    #[test]
    fn polls_follow_the_server_within_bounds() {
        let options =
            TaskOptions::new().poll_bounds(Duration::from_millis(200), Duration::from_secs(2));
        assert_eq!(
            options.poll_wait(Some(Duration::from_millis(1))),
            Duration::from_millis(200)
        );
        assert_eq!(
            options.poll_wait(Some(Duration::from_secs(60))),
            Duration::from_secs(2)
        );
        assert_eq!(
            options.poll_wait(Some(Duration::from_millis(700))),
            Duration::from_millis(700)
        );
        assert_eq!(options.poll_wait(None), Duration::from_secs(1));
    }

    fn raw(value: serde_json::Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&value).unwrap()
    }

    #[test]
    fn status_notifications_of_both_eras_read_as_tasks() {
        let legacy = raw(serde_json::json!({
            "taskId": "t1", "status": "input_required", "statusMessage": "asks",
            "createdAt": "2025-11-25T10:30:00Z", "lastUpdatedAt": "2025-11-25T10:31:00Z",
            "ttl": 60000, "pollInterval": 500,
        }));
        let task = status_notification(NotificationsTasksStatus::VALUE, Some(&legacy)).unwrap();
        assert_eq!(task.task_id, "t1");
        assert_eq!(task.status, model::TaskStatus::InputRequired);
        assert_eq!(task.status_message.as_deref(), Some("asks"));
        assert_eq!(task.ttl, Some(Duration::from_secs(60)));
        let modern = raw(serde_json::json!({
            "taskId": "t2", "status": "completed",
            "createdAt": "2026-07-28T10:30:00Z", "lastUpdatedAt": "2026-07-28T10:31:00Z",
            "ttlMs": null, "result": {"content": []},
            "_meta": {"io.modelcontextprotocol/subscriptionId": 3},
        }));
        let task = status_notification(NotificationsTasks::VALUE, Some(&modern)).unwrap();
        assert_eq!(task.task_id, "t2");
        assert_eq!(task.status, model::TaskStatus::Completed);
        assert_eq!(task.ttl, None);
        // Another method, or params that are no task, are not status notifications.
        assert!(status_notification("notifications/message", Some(&legacy)).is_none());
        let bad = raw(serde_json::json!({"taskId": 1}));
        assert!(status_notification(NotificationsTasksStatus::VALUE, Some(&bad)).is_none());
    }

    /// A notification updates the handles that follow the task (a finished one stays finished),
    /// calls their status callback on a change, and wakes their waiter; dropped handles are
    /// forgotten.
    #[test]
    fn notifications_reach_the_handles_that_follow_the_task() {
        let watchers = Watchers::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let options = TaskOptions::new().on_status(move |t| {
            log.lock().unwrap().push(status_str(t.status));
        });
        let follow = Follow::new(State::default(), &options);
        watchers.add("t1", &follow);
        let info = |status| TaskInfo {
            task_id: "t1".into(),
            status,
            status_message: None,
            created_at: String::new(),
            last_updated_at: String::new(),
            ttl: None,
            poll_interval: None,
        };
        assert!(watchers.heard(&info(model::TaskStatus::Working)));
        assert!(watchers.heard(&info(model::TaskStatus::Working)));
        assert!(watchers.heard(&info(model::TaskStatus::Completed)));
        assert!(watchers.heard(&info(model::TaskStatus::Working)));
        assert_eq!(*seen.lock().unwrap(), ["working", "completed"]);
        assert_eq!(
            follow.lock().info.as_ref().map(|i| i.status),
            Some(model::TaskStatus::Completed)
        );
        // The waiter was woken (a permit is stored for the next wait).
        {
            let mut woken = Box::pin(follow.heard.notified());
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(woken.as_mut().poll(&mut cx).is_ready());
        }
        assert!(!watchers.heard(&TaskInfo {
            task_id: "t2".into(),
            ..info(model::TaskStatus::Working)
        }));
        assert_eq!(watchers.len(), 1);
        drop(follow);
        assert_eq!(watchers.len(), 0);
        let other = Follow::new(State::default(), &TaskOptions::new());
        watchers.add("t3", &other);
        assert_eq!(
            watchers
                .by_id
                .lock()
                .unwrap()
                .keys()
                .cloned()
                .collect::<Vec<_>>(),
            ["t3"],
            "the dropped handle's entry is pruned"
        );
    }
}
