//! The experimental tasks of protocol 2025-11-25 (SEP-1686), both directions, on the task store
//! and runner of this module's parent.
//!
//! Client to server: a `tools/call` whose params carry `task: {ttl?}`, of a tool whose
//! `execution.taskSupport` allows it, is answered at once with a `CreateTaskResult`
//! (`{task: {taskId, status, createdAt, lastUpdatedAt, ttl, pollInterval}}`) while the tool's
//! handler runs as a task; `tasks/get` answers the task, `tasks/result` waits until it is
//! finished and answers what the call would have (its result with
//! `_meta["io.modelcontextprotocol/related-task"]`, or its error), `tasks/list` pages through
//! the caller's tasks, `tasks/cancel` cancels one. A task that asks the client for input is
//! `input_required`; the questions go to the client as requests on the stream of a
//! `tasks/result` for the task, with the related-task `_meta`, and the answers come back as any
//! answer does. Each change of a task's status (or status message) is sent as
//! `notifications/tasks/status` (the task, without the related-task `_meta`) to the connection
//! that made it: the stdio line, or the legacy HTTP session's standalone stream; never to
//! another session, and nothing once that session ended (`runner::Tasks::publish`).
//!
//! Tasks are bound to the caller: its authenticated principal, or without one its legacy HTTP
//! session (`Mcp-Session-Id`); over stdio (no principal, no session id) the process has one
//! client. Another caller asking for a task gets -32602, as for an unknown id.
//!
//! Server to client: [`Context::create_message_as_task`] and [`Context::elicit_as_task`] ask a
//! client that declared `capabilities.tasks.requests.*` to run the request as a task, and
//! return a [`ClientTask`] that polls it.

use std::sync::Arc;
use std::time::Duration;

use modelctx_session::IncomingRequest;
use modelctx_session::ProtocolVersion;
use modelctx_types::consts::{
    ElicitationCreate, SamplingCreateMessage, TasksCancel, TasksGet, TasksList, TasksResult,
};
use modelctx_types::{ErrorCode, ErrorObject, JsonObject, model, v2025_11_25};
use serde_json::Value;
use serde_json::value::RawValue;

use super::TaskSupport;
use super::runner::{Sink, not_found, principal_of};
use super::store::{TaskRecord, TaskStatus, TaskStore, TaskStoreError, TaskStoreErrorKind};
use super::wire::iso8601;
use crate::context::Context;
use crate::handler::Runner;
use crate::input::{InputError, NoAnswer};
use crate::registry::Shared;
use crate::wire::invalid_params;

/// The `_meta` key that ties a message to the task it belongs to (2025-11-25).
pub(crate) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

// ---------------------------------------------------------------------------------------------
// Writing tasks for 2025-11-25.
// ---------------------------------------------------------------------------------------------

/// `record` as the 2025-11-25 `Task` (`ttl` written as `null` when unlimited).
pub(crate) fn task_json(record: &TaskRecord) -> JsonObject {
    let mut task = JsonObject::new();
    task.insert("taskId".into(), Value::from(record.task_id.as_str()));
    task.insert("status".into(), Value::from(record.status.as_str()));
    if let Some(message) = &record.status_message {
        task.insert("statusMessage".into(), Value::from(message.as_str()));
    }
    task.insert("createdAt".into(), Value::from(iso8601(record.created_ms)));
    task.insert(
        "lastUpdatedAt".into(),
        Value::from(iso8601(record.last_updated_ms)),
    );
    task.insert("ttl".into(), record.ttl_ms.map_or(Value::Null, Value::from));
    if let Some(interval) = record.poll_interval_ms {
        task.insert("pollInterval".into(), Value::from(interval));
    }
    task
}

/// `{"io.modelcontextprotocol/related-task": {"taskId": id}}`.
pub(crate) fn related_task_meta(task_id: &str) -> JsonObject {
    let mut related = JsonObject::new();
    related.insert("taskId".into(), Value::from(task_id));
    let mut meta = JsonObject::new();
    meta.insert(RELATED_TASK.into(), Value::Object(related));
    meta
}

/// The raw JSON text of `value`.
fn raw(value: &impl serde::Serialize) -> Result<Box<RawValue>, ErrorObject> {
    crate::wire::raw(value)
}

/// The `taskId` of a `tasks/get`, `tasks/result` or `tasks/cancel` request.
pub(crate) fn task_id_of(params: &JsonObject) -> Result<String, ErrorObject> {
    match params.get("taskId") {
        Some(Value::String(id)) => Ok(id.clone()),
        _ => Err(invalid_params("taskId must be a string")),
    }
}

/// What `tasks/result` answers for a finished task: its result with the related-task `_meta`,
/// or its error. A cancelled task has neither: the requestor cancelled the request, which then
/// has no result to return, and is answered -32602 (Invalid params: the spec's code for a
/// `taskId` that names no result to give, as for an unknown task or a cancel of a finished
/// one; -32603 is for the receiver's own failures), with `data`
/// `{"taskId": id, "status": "cancelled"}`.
pub(crate) fn outcome(record: &TaskRecord) -> Result<Box<RawValue>, ErrorObject> {
    if let Some(error) = &record.error {
        return Err(
            serde_json::from_value::<ErrorObject>(Value::Object(error.clone()))
                .unwrap_or_else(|_| ErrorObject::new(ErrorCode::INTERNAL_ERROR, "the task failed")),
        );
    }
    match (&record.result, record.status) {
        (Some(result), _) => {
            let mut result = result.clone();
            let meta = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(JsonObject::new()));
            if let Value::Object(meta) = meta {
                meta.extend(related_task_meta(&record.task_id));
            }
            raw(&result)
        }
        (None, TaskStatus::Cancelled) => Err(cancelled(&record.task_id)),
        (None, status) => Err(ErrorObject::new(
            ErrorCode::INTERNAL_ERROR,
            format!("task {:?} is {status} without a result", record.task_id),
        )),
    }
}

/// The error `tasks/result` answers for task `task_id`, cancelled (see [`outcome`]).
fn cancelled(task_id: &str) -> ErrorObject {
    let message = format!("Task {task_id} was cancelled: it has no result");
    let data = serde_json::json!({"taskId": task_id, "status": TaskStatus::Cancelled.as_str()});
    ErrorObject::new(ErrorCode::INVALID_PARAMS, message.clone())
        .with_data(&data)
        .unwrap_or_else(|_| ErrorObject::new(ErrorCode::INVALID_PARAMS, message))
}

// ---------------------------------------------------------------------------------------------
// Routing: which requests are 2025-11-25 tasks, and what answers them.
// ---------------------------------------------------------------------------------------------

/// Declares the tasks of 2025-11-25 in `capabilities`: `tasks.list`, `tasks.cancel` and
/// `tasks.requests.tools.call` (the session writes the member in 2025-11-25 results only).
pub(crate) fn declare(capabilities: &mut JsonObject) {
    capabilities.insert(
        "tasks".into(),
        serde_json::json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
    );
}

/// Whether `request` is one of a 2025-11-25 session, the one version with these tasks.
fn is_legacy_tasks(request: &IncomingRequest) -> bool {
    request.meta.is_none() && request.version == ProtocolVersion::V2025_11_25
}

/// Whether the server declared the tasks of 2025-11-25 for `tools/call`.
fn declared(shared: &Shared) -> bool {
    shared
        .config
        .capabilities
        .get("tasks")
        .and_then(|t| t.get("requests")?.get("tools")?.get("call"))
        .is_some()
}

/// The `task` member of a call's params, borrowed from their text.
#[derive(serde::Deserialize)]
struct TaskProbe<'a> {
    #[serde(borrow, default)]
    task: Option<&'a RawValue>,
}

/// The `task` of a task-augmented request: `{ttl?}`.
#[derive(serde::Deserialize)]
struct TaskParam {
    #[serde(default)]
    ttl: Option<f64>,
}

/// `tools/call` of tool `name` in a 2025-11-25 session of a server that declared its tasks:
/// with `params.task`, a tool that allows it runs as a task and the call is answered with the
/// `CreateTaskResult` at once; a forbidden tool refuses `params.task`, and a required one a
/// call without it (both -32601, as the spec has it). Any other request, or a server that did
/// not declare the tasks (whose calls ignore `task`), is left to `call` as it is.
pub(crate) fn call(
    shared: &Arc<Shared>,
    name: &str,
    request: &IncomingRequest,
    call: Result<Runner, ErrorObject>,
) -> Result<Runner, ErrorObject> {
    if !is_legacy_tasks(request) || !declared(shared) {
        return call;
    }
    let runner = call?;
    let probe = request
        .params
        .as_deref()
        .and_then(|raw| serde_json::from_str::<TaskProbe<'_>>(raw.get()).ok());
    let task = match probe.and_then(|p| p.task) {
        None => None,
        Some(raw) if raw.get() == "null" => None,
        Some(raw) => Some(
            serde_json::from_str::<TaskParam>(raw.get())
                .map_err(|e| invalid_params(format!("invalid task: {e}")))?,
        ),
    };
    let support = shared
        .registry()
        .tools
        .get(name)
        .map_or(TaskSupport::Forbidden, |t| t.tool.task_support);
    let task = match (support, task) {
        (TaskSupport::Forbidden, Some(_)) => {
            return Err(ErrorObject::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("tool {name} does not support task-augmented calls"),
            ));
        }
        (TaskSupport::Required, None) => {
            return Err(ErrorObject::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("Task augmentation required for tools/call of tool {name}"),
            ));
        }
        (_, None) => return Ok(runner),
        (_, Some(task)) => task,
    };
    let tasks = shared.tasks.clone();
    let shared = shared.clone();
    let ttl = ttl_ms(task.ttl, tasks.settings.ttl_ms());
    Ok(Box::new(move |context| {
        Box::pin(async move {
            // The task's questions go to the store (`inputRequests`), `input_required`, and
            // reach the client through `tasks/result` (see `result`), not through the stream of
            // this call, which ends now. Its changes of status are told to the connection or
            // session that made it (`notifications/tasks/status`).
            let origin = Sink::of(&shared, &context);
            let record = tasks.start(&context, ttl, true, origin, runner).await?;
            let mut created = JsonObject::new();
            created.insert("task".into(), Value::Object(task_json(&record)));
            raw(&created)
        })
    }))
}

/// The time to live of a task: what the client asked for (`ttl` in milliseconds, at least 1),
/// at most the server's (`TaskSettings::ttl`); the server's when the client asked for none.
fn ttl_ms(requested: Option<f64>, server: Option<u64>) -> Option<u64> {
    let requested = requested
        .filter(|ttl| ttl.is_finite() && *ttl >= 0.0)
        // Saturating: a larger value is the largest u64.
        .map(|ttl| (ttl as u64).max(1));
    match (requested, server) {
        (Some(asked), Some(most)) => Some(asked.min(most)),
        (asked, None) => asked,
        (None, most) => most,
    }
}

/// `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel` of a 2025-11-25 session;
/// `None` for any other request (the tasks extension's, routed elsewhere).
pub(crate) fn route(
    shared: &Arc<Shared>,
    request: &IncomingRequest,
    params: &JsonObject,
) -> Option<Result<Runner, ErrorObject>> {
    if !is_legacy_tasks(request) {
        return None;
    }
    let tasks = shared.tasks.clone();
    let params = params.clone();
    let page_size = shared.settings.page_size;
    let runner: Runner = match request.method.as_str() {
        TasksGet::VALUE => Box::new(move |context| {
            Box::pin(async move {
                let caller = principal_of(&context);
                get(tasks.store.as_ref(), caller.as_deref(), &params).await
            })
        }),
        TasksList::VALUE => Box::new(move |context| {
            Box::pin(async move {
                let caller = principal_of(&context);
                list(tasks.store.as_ref(), caller.as_deref(), &params, page_size).await
            })
        }),
        TasksCancel::VALUE => {
            let task_id = match task_id_of(&params) {
                Ok(id) => id,
                Err(error) => return Some(Err(error)),
            };
            Box::new(move |context| {
                Box::pin(async move {
                    let caller = principal_of(&context);
                    let before = tasks.get(&task_id, caller.as_deref()).await?;
                    if before.status.is_terminal() {
                        return Err(already_terminal(before.status));
                    }
                    let after = tasks.cancel(&task_id, caller.as_deref()).await?;
                    if after.status != TaskStatus::Cancelled {
                        // It finished meanwhile.
                        return Err(already_terminal(after.status));
                    }
                    raw(&task_json(&after))
                })
            })
        }
        TasksResult::VALUE => Box::new(move |context| {
            Box::pin(async move {
                let caller = principal_of(&context);
                let deliver = |task_id: &str, key: &str, answer: Result<Value, InputError>| {
                    let tasks = tasks.clone();
                    let caller = caller.clone();
                    let (task_id, key) = (task_id.to_owned(), key.to_owned());
                    // Handed over on a task of its own: the store is async, this is not.
                    tokio::spawn(async move {
                        let answer = match answer {
                            Ok(answer) => answer,
                            Err(error) => {
                                tracing::debug!(%task_id, %key, %error, "a task's question got no answer");
                                return;
                            }
                        };
                        let mut responses = JsonObject::new();
                        responses.insert(key, answer);
                        if let Err(error) =
                            tasks.answer(&task_id, caller.as_deref(), &responses).await
                        {
                            tracing::debug!(%task_id, error = %error.message, "an answer was refused");
                        }
                    });
                    true
                };
                // Woken by the task's changes while its handler runs here.
                let changes = task_id_of(&params)
                    .ok()
                    .and_then(|task_id| tasks.changes(&task_id));
                result(
                    tasks.store.as_ref(),
                    caller.as_deref(),
                    &params,
                    &context,
                    &deliver,
                    changes,
                )
                .await
            })
        }),
        _ => return None,
    };
    Some(Ok(runner))
}

/// The -32602 error of `tasks/cancel` for a task in a terminal status.
fn already_terminal(status: TaskStatus) -> ErrorObject {
    invalid_params(format!(
        "Cannot cancel task: already in terminal status '{status}'"
    ))
}

// ---------------------------------------------------------------------------------------------
// The requests on tasks: tasks/get, tasks/list, tasks/cancel, tasks/result.
// ---------------------------------------------------------------------------------------------

/// A store's failure as the JSON-RPC error the request gets: -32603, saying why (the store's
/// own cause stays in the server's logs).
fn store_error(error: &TaskStoreError) -> ErrorObject {
    tracing::warn!(%error, "a task store call failed");
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, error.to_string())
}

/// The task `task_id` of `caller`, or -32602 when it has none (unknown, expired, another's).
async fn find(
    store: &dyn TaskStore,
    caller: Option<&str>,
    task_id: &str,
) -> Result<TaskRecord, ErrorObject> {
    match store.get(task_id, caller).await {
        Ok(Some(record)) => Ok(record),
        Ok(None) => Err(not_found(task_id)),
        Err(error) => Err(store_error(&error)),
    }
}

/// `tasks/get`: the caller's task.
pub(crate) async fn get(
    store: &dyn TaskStore,
    caller: Option<&str>,
    params: &JsonObject,
) -> Result<Box<RawValue>, ErrorObject> {
    let task_id = task_id_of(params)?;
    let record = find(store, caller, &task_id).await?;
    raw(&task_json(&record))
}

/// `tasks/list`: a page of at most `page_size` of the caller's tasks, oldest first, from the
/// params' `cursor` (one the store did not make is -32602).
pub(crate) async fn list(
    store: &dyn TaskStore,
    caller: Option<&str>,
    params: &JsonObject,
    page_size: usize,
) -> Result<Box<RawValue>, ErrorObject> {
    let cursor = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(cursor)) => Some(cursor.as_str()),
        Some(_) => return Err(invalid_params("cursor must be a string")),
    };
    let page = match store.list(caller, cursor, page_size).await {
        Ok(page) => page,
        Err(error) if cursor.is_some() && error.kind() == TaskStoreErrorKind::Failed => {
            return Err(invalid_params(format!("invalid cursor: {error}")));
        }
        Err(error) => return Err(store_error(&error)),
    };
    let tasks: Vec<Value> = page
        .tasks
        .iter()
        .map(|record| Value::Object(task_json(record)))
        .collect();
    let mut result = JsonObject::new();
    result.insert("tasks".into(), Value::Array(tasks));
    if let Some(next) = page.next_cursor {
        result.insert("nextCursor".into(), Value::from(next));
    }
    raw(&result)
}

/// How often a waiting `tasks/result` reads a task whose handler does not run in this process
/// (one of a shared store, settled elsewhere): from the first value, doubling up to the second.
const RESULT_POLL: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(100));

/// Where the client's answers to a task's questions go: the runner of the task, which hands
/// answer `answer` to the question under `key` of task `task_id`, telling whether one waited
/// for it.
pub(crate) type Deliver<'a> =
    &'a (dyn Fn(&str, &str, Result<Value, InputError>) -> bool + Send + Sync);

/// `tasks/result`: waits until the caller's task `task_id` is finished, then answers what its
/// request would have ([`outcome`]). Meanwhile the task's questions (`inputRequests`) are asked
/// of the client as requests of this `tasks/result` (with the related-task `_meta`), each once,
/// and the answers handed to the task's runner through `deliver`. Ends early when this request is cancelled (nothing is answered
/// then) or the task disappears (expired: -32602).
///
/// It reads the task again when `changes` wakes (the task's handler runs here: each change it
/// makes, its settlement and its expiry wake it), and only without it (a task of a shared store
/// whose handler runs elsewhere) every [`RESULT_POLL`].
pub(crate) async fn result(
    store: &dyn TaskStore,
    caller: Option<&str>,
    params: &JsonObject,
    context: &Context,
    deliver: Deliver<'_>,
    changes: Option<Arc<tokio::sync::Notify>>,
) -> Result<Box<RawValue>, ErrorObject> {
    let task_id = task_id_of(params)?;
    let mut asked: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut pause = RESULT_POLL.0;
    loop {
        // Listening before reading: a change made after the read wakes it.
        let mut changed = changes
            .as_deref()
            .map(|changes| Box::pin(changes.notified()));
        if let Some(changed) = changed.as_mut() {
            changed.as_mut().enable();
        }
        let record = find(store, caller, &task_id).await?;
        if record.status.is_terminal() {
            return outcome(&record);
        }
        let mut progressed = false;
        for (key, request) in &record.input_requests {
            if !asked.insert(key.clone()) {
                continue;
            }
            progressed = true;
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let mut question = request
                .get("params")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let meta = question
                .entry("_meta")
                .or_insert_with(|| Value::Object(JsonObject::new()));
            if let Value::Object(meta) = meta {
                meta.extend(related_task_meta(&task_id));
            }
            let answer = context.ask(method, question, None, None).await;
            if !deliver(&task_id, key, answer) {
                tracing::debug!(%task_id, %key, "an answer to a task's question found no one waiting");
            }
        }
        if progressed {
            pause = RESULT_POLL.0;
            continue;
        }
        let next = async {
            match changed {
                Some(changed) => changed.await,
                None => tokio::time::sleep(pause).await,
            }
        };
        tokio::select! {
            () = next => {}
            () = context.cancelled().cancelled() => {
                return Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "the request was cancelled"));
            }
        }
        pause = (pause * 2).min(RESULT_POLL.1);
    }
}

// ---------------------------------------------------------------------------------------------
// The other direction: the server asks a 2025-11-25 client to run a request as a task.
// ---------------------------------------------------------------------------------------------

/// The shortest and the longest wait between two polls of a client's task
/// ([`ClientTask::wait`]), whatever `pollInterval` the client suggests.
const CLIENT_POLL_BOUNDS: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(5));

/// A request the client runs as a task (2025-11-25, the client declared
/// `capabilities.tasks.requests.*` for it): made by [`Context::create_message_as_task`] or
/// [`Context::elicit_as_task`], polled with `tasks/get`, its result taken with `tasks/result`,
/// cancelled with `tasks/cancel`. These requests go on the stream of the handler's own request,
/// so a handle is used while that request runs.
#[derive(Debug)]
pub struct ClientTask<T> {
    context: Context,
    task: model::Task,
    read: fn(Value) -> Result<T, InputError>,
}

impl<T> ClientTask<T> {
    /// The task's id, as the client gave it.
    pub fn id(&self) -> &str {
        &self.task.task_id
    }

    /// The task as last heard of (its `CreateTaskResult`, or the last `tasks/get` or
    /// `tasks/cancel`).
    pub fn task(&self) -> &model::Task {
        &self.task
    }

    /// Asks the client for the task's state (`tasks/get`).
    ///
    /// # Errors
    ///
    /// The client's error (an unknown or expired task is -32602), or no answer.
    pub async fn status(&mut self) -> Result<&model::Task, InputError> {
        let answer = self
            .context
            .ask(TasksGet::VALUE, task_id_params(self.id()), None, None)
            .await?;
        self.task = read_as::<v2025_11_25::Task, _>(answer)?;
        Ok(&self.task)
    }

    /// Cancels the task (`tasks/cancel`; the client must have declared `tasks.cancel`): the
    /// task as the client answers, `cancelled`.
    ///
    /// # Errors
    ///
    /// [`InputError::NotSupported`] without `tasks.cancel`; the client's error (-32602 for a
    /// task already finished), or no answer.
    pub async fn cancel(&mut self) -> Result<&model::Task, InputError> {
        let answer = self
            .context
            .ask(TasksCancel::VALUE, task_id_params(self.id()), None, None)
            .await?;
        self.task = read_as::<v2025_11_25::Task, _>(answer)?;
        Ok(&self.task)
    }

    /// The request's result (`tasks/result`, which the client answers once the task is
    /// finished): what the request itself would have returned.
    ///
    /// # Errors
    ///
    /// The request's own error ([`InputError::Refused`]), or an answer that is not its result.
    pub async fn result(&mut self) -> Result<T, InputError> {
        let answer = self
            .context
            .ask(TasksResult::VALUE, task_id_params(self.id()), None, None)
            .await?;
        (self.read)(answer)
    }

    /// Polls the task (`tasks/get`) at the client's `pollInterval` (kept between 10 ms and 5 s;
    /// 100 ms when it suggests none) until it is finished or needs input, then takes its result
    /// ([`result`](Self::result)). Stops when the handler's request is cancelled.
    ///
    /// # Errors
    ///
    /// As [`status`](Self::status) and [`result`](Self::result);
    /// [`InputError::NoAnswer`] ([`NoAnswer::RequestEnded`]) when the request is cancelled.
    pub async fn wait(&mut self) -> Result<T, InputError> {
        loop {
            if matches!(
                self.task.status,
                model::TaskStatus::Completed
                    | model::TaskStatus::Failed
                    | model::TaskStatus::Cancelled
                    | model::TaskStatus::InputRequired
            ) {
                return self.result().await;
            }
            let interval = self
                .task
                .poll_interval
                .and_then(|ms| u64::try_from(ms).ok())
                .map_or(Duration::from_millis(100), Duration::from_millis)
                .clamp(CLIENT_POLL_BOUNDS.0, CLIENT_POLL_BOUNDS.1);
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = self.context.cancelled().cancelled() => {
                    return Err(InputError::NoAnswer(NoAnswer::RequestEnded));
                }
            }
            self.status().await?;
        }
    }
}

impl Context {
    /// Asks the client to run a `sampling/createMessage` request as a task (2025-11-25, a
    /// client that declared `capabilities.tasks.requests.sampling.createMessage`): the request
    /// carries `task: {ttl}` (`ttl`: `None` leaves it to the client) and the client answers at
    /// once with the task, which the returned [`ClientTask`] polls and whose result it takes.
    ///
    /// ```
    /// # async fn f(context: modelctx_server::Context) -> Result<(), modelctx_server::InputError> {
    /// use std::time::Duration;
    /// use modelctx_server::sampling_request;
    ///
    /// let mut task = context
    ///     .create_message_as_task(sampling_request("Summarise the report", 500), Some(Duration::from_secs(600)))
    ///     .await?;
    /// let answer = task.wait().await?;
    /// println!("{} answered", answer.model);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`InputError::NotSupported`] when the session is not 2025-11-25 or the client did not
    /// declare task-augmented sampling (or sampling itself); otherwise as [`Context::sample`].
    pub async fn create_message_as_task(
        &self,
        params: model::CreateMessageRequestParams,
        ttl: Option<Duration>,
    ) -> Result<ClientTask<model::CreateMessageResult>, InputError> {
        self.can_run_as_task(&["sampling", "createMessage"])?;
        let params = model::CreateMessageRequestParams {
            task: Some(model::TaskMetadata {
                ttl: ttl.map(millis),
            }),
            ..params
        };
        let sent = crate::wire::write::sampling_request(params, self.inner.version)
            .map_err(InputError::Unwritable)?;
        let answer = self
            .ask(SamplingCreateMessage::VALUE, sent, None, None)
            .await?;
        self.client_task(answer, read_as::<v2025_11_25::CreateMessageResult, _>)
    }

    /// Asks the user through the client, as a task (2025-11-25, a client that declared
    /// `capabilities.tasks.requests.elicitation.create`): [`Context::elicit`]'s form-mode
    /// request with `task: {ttl}`; the client answers at once with the task.
    ///
    /// # Errors
    ///
    /// [`InputError::NotSupported`] when the session is not 2025-11-25 or the client did not
    /// declare task-augmented elicitation (or form elicitation); otherwise as
    /// [`Context::elicit`].
    pub async fn elicit_as_task(
        &self,
        message: &str,
        requested_schema: Value,
        ttl: Option<Duration>,
    ) -> Result<ClientTask<model::ElicitResult>, InputError> {
        self.can_run_as_task(&["elicitation", "create"])?;
        let mut params = JsonObject::new();
        params.insert("mode".into(), Value::from("form"));
        params.insert("message".into(), Value::from(message));
        params.insert("requestedSchema".into(), requested_schema);
        let mut task = JsonObject::new();
        if let Some(ttl) = ttl {
            task.insert("ttl".into(), Value::from(millis(ttl)));
        }
        params.insert("task".into(), Value::Object(task));
        let answer = self
            .ask(ElicitationCreate::VALUE, params, None, None)
            .await?;
        self.client_task(answer, read_as::<v2025_11_25::ElicitResult, _>)
    }

    /// Whether the client of this 2025-11-25 session declared task-augmented `request`
    /// (`["sampling", "createMessage"]`, ...) under `capabilities.tasks.requests`.
    fn can_run_as_task(&self, request: &[&str]) -> Result<(), InputError> {
        let path = || format!("tasks.requests.{}", request.join("."));
        if self.inner.modern || self.inner.version != ProtocolVersion::V2025_11_25 {
            return Err(InputError::NotSupported(path()));
        }
        let declared = self
            .inner
            .client_capabilities
            .as_ref()
            .and_then(|caps| caps.get("tasks")?.get("requests"))
            .and_then(|requests| request.iter().try_fold(requests, |at, step| at.get(*step)))
            .is_some_and(|flag| !matches!(flag, Value::Null | Value::Bool(false)));
        if declared {
            Ok(())
        } else {
            Err(InputError::NotSupported(path()))
        }
    }

    /// The handle of the task the client's `answer` (a `CreateTaskResult`) names.
    fn client_task<T>(
        &self,
        answer: Value,
        read: fn(Value) -> Result<T, InputError>,
    ) -> Result<ClientTask<T>, InputError> {
        let created = serde_json::from_value::<v2025_11_25::CreateTaskResult>(answer)
            .map_err(|e| InputError::NoAnswer(NoAnswer::Unreadable(Arc::new(e))))?;
        Ok(ClientTask {
            context: self.clone(),
            task: created.task.into(),
            read,
        })
    }
}

/// `{"taskId": id}`.
fn task_id_params(id: &str) -> JsonObject {
    let mut params = JsonObject::new();
    params.insert("taskId".into(), Value::from(id));
    params
}

/// `answer` as the model's `M`, read with the 2025-11-25 wire type `W`.
fn read_as<W, M>(answer: Value) -> Result<M, InputError>
where
    W: serde::de::DeserializeOwned + Into<M>,
{
    serde_json::from_value::<W>(answer)
        .map(Into::into)
        .map_err(|e| InputError::NoAnswer(NoAnswer::Unreadable(Arc::new(e))))
}

/// `duration` in whole milliseconds, as the wire has it.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::super::store::TaskUpdate;
    use super::*;
    use crate::tasks::MemoryTaskStore;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    fn params(task_id: &str) -> JsonObject {
        task_id_params(task_id)
    }

    fn created(store: &MemoryTaskStore, id: &str, principal: Option<&str>) {
        let record = TaskRecord::new(
            id,
            principal.map(str::to_owned),
            "tools/call",
            "2025-11-25",
            SystemTime::now(),
        )
        .ttl_ms(Some(60_000));
        block_on(store.create(&record)).unwrap();
    }

    #[test]
    fn get_answers_the_callers_task_and_no_other() {
        let store = MemoryTaskStore::new();
        created(&store, "a", Some("alice"));
        let task: Value = serde_json::from_str(
            block_on(get(&store, Some("alice"), &params("a")))
                .unwrap()
                .get(),
        )
        .unwrap();
        assert_eq!(task["taskId"], "a");
        assert_eq!(task["status"], "working");
        assert_eq!(task["ttl"], 60_000);
        for (caller, id) in [(Some("bob"), "a"), (None, "a"), (Some("alice"), "zz")] {
            let error = block_on(get(&store, caller, &params(id))).unwrap_err();
            assert_eq!(error.code, ErrorCode::INVALID_PARAMS, "{caller:?} {id}");
        }
        let error = block_on(get(&store, None, &JsonObject::new())).unwrap_err();
        assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
    }

    #[test]
    fn list_pages_through_the_callers_tasks_with_a_cursor() {
        let store = MemoryTaskStore::new();
        for id in ["a", "b", "c"] {
            created(&store, id, Some("alice"));
        }
        created(&store, "x", Some("bob"));
        let page = |cursor: Option<&str>| {
            let mut params = JsonObject::new();
            if let Some(cursor) = cursor {
                params.insert("cursor".into(), Value::from(cursor));
            }
            block_on(list(&store, Some("alice"), &params, 2))
                .map(|raw| serde_json::from_str::<Value>(raw.get()).unwrap())
        };
        let first = page(None).unwrap();
        assert_eq!(first["tasks"].as_array().unwrap().len(), 2);
        let cursor = first["nextCursor"].as_str().unwrap().to_owned();
        let second = page(Some(&cursor)).unwrap();
        let ids: Vec<&str> = first["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .chain(second["tasks"].as_array().unwrap())
            .map(|t| t["taskId"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 3);
        assert!(
            !ids.contains(&"x"),
            "another principal's task is never listed"
        );
        assert!(second.get("nextCursor").is_none());
        let error = page(Some("not a cursor")).unwrap_err();
        assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
    }

    #[test]
    fn a_cancelled_task_has_no_result_and_cannot_be_cancelled_again() {
        let mut record = TaskRecord::new("a", None, "tools/call", "2025-11-25", UNIX_EPOCH);
        record.apply(&TaskUpdate::cancel(), 1);
        // What the request answers is an error of the requestor's (it cancelled the request),
        // not an internal one.
        let answer = outcome(&record).unwrap_err();
        assert_eq!(answer.code, ErrorCode::INVALID_PARAMS, "{}", answer.message);
        assert!(answer.message.contains("cancelled"), "{}", answer.message);
        assert!(!answer.message.contains("not found"), "{}", answer.message);
        let data = answer.data.as_ref().map(|d| d.get()).unwrap_or_default();
        let data: Value = serde_json::from_str(data).unwrap();
        assert_eq!(
            data,
            serde_json::json!({"taskId": "a", "status": "cancelled"})
        );
        let error = already_terminal(record.status);
        assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
        assert!(error.message.contains("'cancelled'"), "{}", error.message);
    }

    #[test]
    fn the_ttl_is_the_clients_up_to_the_servers() {
        assert_eq!(ttl_ms(Some(5_000.0), Some(60_000)), Some(5_000));
        assert_eq!(ttl_ms(Some(600_000.0), Some(60_000)), Some(60_000));
        assert_eq!(ttl_ms(None, Some(60_000)), Some(60_000));
        assert_eq!(ttl_ms(Some(0.0), None), Some(1));
        assert_eq!(ttl_ms(Some(-1.0), None), None);
    }

    #[test]
    fn the_outcome_of_a_finished_task_is_its_result_with_the_related_task_meta_or_its_error() {
        let mut record = TaskRecord::new("t", None, "tools/call", "2025-11-25", UNIX_EPOCH);
        let result = serde_json::json!({"content": [{"type": "text", "text": "hi"}]});
        record.apply(
            &TaskUpdate::complete(result.as_object().cloned().unwrap()),
            1,
        );
        let answer: Value = serde_json::from_str(outcome(&record).unwrap().get()).unwrap();
        assert_eq!(answer["content"][0]["text"], "hi");
        assert_eq!(answer["_meta"][RELATED_TASK]["taskId"], "t");
        let mut failed = TaskRecord::new("f", None, "tools/call", "2025-11-25", UNIX_EPOCH);
        failed.apply(
            &TaskUpdate::fail(&ErrorObject::new(ErrorCode::INVALID_PARAMS, "bad")),
            1,
        );
        let error = outcome(&failed).unwrap_err();
        assert_eq!(
            (error.code, error.message.as_str()),
            (ErrorCode::INVALID_PARAMS, "bad")
        );
    }

    #[test]
    fn a_task_is_written_as_2025_11_25_has_it() {
        let record = TaskRecord::new("t1", None, "tools/call", "2025-11-25", UNIX_EPOCH)
            .ttl_ms(Some(60_000))
            .poll_interval_ms(Some(500));
        let task = Value::Object(task_json(&record));
        let wire: v2025_11_25::Task = serde_json::from_value(task.clone()).unwrap();
        assert_eq!(wire.task_id, "t1");
        assert_eq!(wire.ttl, Some(60_000));
        assert_eq!(wire.poll_interval, Some(500));
        assert_eq!(task["status"], "working");
        assert_eq!(task["createdAt"], "1970-01-01T00:00:00.000Z");
        // Unlimited: an explicit null (the field is required and nullable).
        let unlimited = task_json(&record.ttl_ms(None));
        assert_eq!(unlimited.get("ttl"), Some(&Value::Null));
    }
}
