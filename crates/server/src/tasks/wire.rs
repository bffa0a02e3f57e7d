//! The 2026-07-28 wire of tasks (the `io.modelcontextprotocol/tasks` extension): which calls
//! become tasks, `CreateTaskResult`, and `tasks/get`, `tasks/update` and `tasks/cancel`.

use std::sync::Arc;

use modelctx_session::IncomingRequest;
use modelctx_types::consts::{TasksCancel, TasksGet, TasksUpdate};
use modelctx_types::{ErrorCode, ErrorObject, JsonObject};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::runner::principal_of;
use super::store::{TaskRecord, TaskStatus};
use super::{EXTENSION_ID, TaskSupport};
use crate::handler::Runner;
use crate::registry::Shared;
use crate::wire::invalid_params;

/// Whether the modern request `request` declares the tasks extension in its `_meta` client
/// capabilities (`None`: a legacy request).
pub(crate) fn declares_extension(request: &IncomingRequest) -> Option<bool> {
    let meta = request.meta.as_ref()?;
    Some(
        meta.client_capabilities
            .get("extensions")
            .and_then(Value::as_object)
            .and_then(|e| e.get(EXTENSION_ID))
            .is_some_and(|v| !matches!(v, Value::Null | Value::Bool(false))),
    )
}

/// The -32021 error of a request that needs the tasks extension.
pub(crate) fn extension_needed() -> ErrorObject {
    let mut required = JsonObject::new();
    required.insert("extensions".into(), json!({ EXTENSION_ID: {} }));
    let mut error = modelctx_session::missing_capability_error(&required);
    error.message = format!("the client does not support the tasks extension ({EXTENSION_ID})");
    error
}

/// `tools/call` of tool `name` in the modern era: `call` as it is, or run as a task when the
/// tool supports tasks and the client declared the extension (a tool that requires them
/// refuses a client that did not, -32021). Legacy requests are left as they are.
pub(crate) fn call(
    shared: &Arc<Shared>,
    name: &str,
    request: &IncomingRequest,
    call: Result<Runner, ErrorObject>,
) -> Result<Runner, ErrorObject> {
    let runner = call?;
    let Some(declared) = declares_extension(request) else {
        return Ok(runner);
    };
    let (support, on_detach) = shared
        .registry()
        .tools
        .get(name)
        .map_or((TaskSupport::Forbidden, false), |t| {
            (t.tool.task_support, t.tool.task_on_detach)
        });
    match (support, declared) {
        (TaskSupport::Forbidden, _) | (TaskSupport::Optional, false) => Ok(runner),
        (TaskSupport::Required, false) => Err(extension_needed()),
        (_, true) if on_detach => {
            let tasks = shared.tasks.clone();
            Ok(Box::new(move |context| {
                Box::pin(async move {
                    let (slot, mut asked) = tokio::sync::oneshot::channel();
                    *context
                        .inner
                        .detach
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Some(slot);
                    let mut handler = runner(context.clone());
                    tokio::select! {
                        // Done without a task: a plain answer.
                        answer = &mut handler => answer,
                        Ok(reply) = &mut asked => {
                            let ttl = tasks.settings.ttl_ms();
                            match tasks.adopt(&context, ttl, handler).await {
                                Ok(record) => {
                                    let _ = reply.send(Ok(()));
                                    crate::wire::raw(&created(&record))
                                }
                                Err(error) => {
                                    let _ = reply.send(Err(error.clone()));
                                    Err(error)
                                }
                            }
                        }
                    }
                })
            }))
        }
        (_, true) => {
            let tasks = shared.tasks.clone();
            Ok(Box::new(move |context| {
                Box::pin(async move {
                    let ttl = tasks.settings.ttl_ms();
                    let record = tasks.start(&context, ttl, true, None, runner).await?;
                    crate::wire::raw(&created(&record))
                })
            }))
        }
    }
}

/// `tasks/get`, `tasks/update` and `tasks/cancel` of a modern request.
pub(crate) fn route(
    shared: &Arc<Shared>,
    request: &IncomingRequest,
    params: JsonObject,
) -> Result<Runner, ErrorObject> {
    match declares_extension(request) {
        Some(true) => {}
        Some(false) => return Err(extension_needed()),
        None => {
            return Err(ErrorObject::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "method not found: {} (the tasks of this protocol version are not served)",
                    request.method
                ),
            ));
        }
    }
    let Some(task_id) = params
        .get("taskId")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return Err(invalid_params("taskId must be a string"));
    };
    let tasks = shared.tasks.clone();
    match request.method.as_str() {
        TasksGet::VALUE => Ok(Box::new(move |context| {
            Box::pin(async move {
                let principal = principal_of(&context);
                let record = tasks.get(&task_id, principal.as_deref()).await?;
                crate::wire::raw(&detailed(&record))
            })
        })),
        TasksUpdate::VALUE => {
            let responses = match params.get("inputResponses") {
                Some(Value::Object(responses)) => responses.clone(),
                _ => return Err(invalid_params("inputResponses must be an object")),
            };
            Ok(Box::new(move |context| {
                Box::pin(async move {
                    let principal = principal_of(&context);
                    tasks
                        .answer(&task_id, principal.as_deref(), &responses)
                        .await?;
                    empty()
                })
            }))
        }
        TasksCancel::VALUE => Ok(Box::new(move |context| {
            Box::pin(async move {
                let principal = principal_of(&context);
                tasks.cancel(&task_id, principal.as_deref()).await?;
                empty()
            })
        })),
        other => Err(ErrorObject::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {other}"),
        )),
    }
}

/// The empty acknowledgement of `tasks/update` and `tasks/cancel` (the session adds
/// `resultType: "complete"`).
fn empty() -> Result<Box<RawValue>, ErrorObject> {
    crate::wire::raw(&JsonObject::new())
}

/// The members of the extension's `Task` for `record`.
fn task(record: &TaskRecord) -> JsonObject {
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
    task.insert(
        "ttlMs".into(),
        record.ttl_ms.map_or(Value::Null, Value::from),
    );
    if let Some(poll) = record.poll_interval_ms {
        task.insert("pollIntervalMs".into(), Value::from(poll));
    }
    task
}

/// The `CreateTaskResult` of a new task: its `Task`, flat, with `resultType: "task"`.
pub(crate) fn created(record: &TaskRecord) -> JsonObject {
    let mut result = task(record);
    result.insert("resultType".into(), Value::from("task"));
    result
}

/// The `DetailedTask` of `tasks/get`: the `Task` with its questions, result or error inlined.
pub(crate) fn detailed(record: &TaskRecord) -> JsonObject {
    let mut result = task(record);
    match record.status {
        TaskStatus::InputRequired => {
            result.insert(
                "inputRequests".into(),
                Value::Object(record.input_requests.clone()),
            );
        }
        TaskStatus::Completed => {
            let mut inner = record.result.clone().unwrap_or_default();
            // A result inlined in a task is no result of its own.
            inner.remove("resultType");
            result.insert("result".into(), Value::Object(inner));
        }
        TaskStatus::Failed => {
            result.insert(
                "error".into(),
                Value::Object(record.error.clone().unwrap_or_default()),
            );
        }
        TaskStatus::Working | TaskStatus::Cancelled => {}
    }
    result
}

/// `ms` milliseconds since the Unix epoch as an ISO 8601 UTC time
/// (`2026-07-28T10:30:00.000Z`).
pub(crate) fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let millis = ms % 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Days to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn times_are_iso8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_785_234_600_123), "2026-07-28T10:30:00.123Z");
        assert_eq!(iso8601(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    fn record() -> TaskRecord {
        TaskRecord::new(
            "t1",
            None,
            "tools/call",
            "2026-07-28",
            UNIX_EPOCH + Duration::from_millis(1_785_234_600_000),
        )
        .ttl_ms(Some(60_000))
        .poll_interval_ms(Some(1000))
    }

    #[test]
    fn a_created_task_is_flat_with_the_renamed_fields() {
        let created = Value::Object(created(&record()));
        assert_eq!(
            created,
            json!({
                "resultType": "task",
                "taskId": "t1",
                "status": "working",
                "createdAt": "2026-07-28T10:30:00.000Z",
                "lastUpdatedAt": "2026-07-28T10:30:00.000Z",
                "ttlMs": 60_000,
                "pollIntervalMs": 1000,
            })
        );
        // It reads as the extension's CreateTaskResult.
        let typed: modelctx_types::ext_tasks::CreateTaskResult =
            serde_json::from_value(created).unwrap();
        assert_eq!(typed.task_id, "t1");
        let unlimited = Value::Object(created_unlimited());
        assert_eq!(unlimited["ttlMs"], Value::Null);
    }

    fn created_unlimited() -> JsonObject {
        created(&record().ttl_ms(None))
    }

    #[test]
    fn tasks_get_inlines_what_the_status_has() {
        use crate::tasks::TaskUpdate;
        let mut r = record();
        r.apply(
            &TaskUpdate::new().ask("k", json!({"method": "elicitation/create", "params": {}})),
            1,
        );
        let got = Value::Object(detailed(&r));
        assert_eq!(got["status"], "input_required");
        assert_eq!(got["inputRequests"]["k"]["method"], "elicitation/create");
        assert!(got.get("result").is_none() && got.get("error").is_none());
        let mut done = record();
        let mut result = JsonObject::new();
        result.insert("content".into(), json!([{"type": "text", "text": "hi"}]));
        result.insert("resultType".into(), json!("complete"));
        done.apply(&TaskUpdate::complete(result), 2);
        let got = Value::Object(detailed(&done));
        assert_eq!(
            got["result"],
            json!({"content": [{"type": "text", "text": "hi"}]})
        );
        assert!(got.get("inputRequests").is_none() && got.get("error").is_none());
        let typed: modelctx_types::ext_tasks::GetTaskResult = serde_json::from_value(got).unwrap();
        assert!(matches!(
            typed,
            modelctx_types::ext_tasks::GetTaskResult::Completed(_)
        ));
        let mut failed = record();
        failed.apply(
            &TaskUpdate::fail(&ErrorObject::new(ErrorCode::INTERNAL_ERROR, "boom")),
            3,
        );
        let got = Value::Object(detailed(&failed));
        assert_eq!(got["error"], json!({"code": -32603, "message": "boom"}));
        assert!(got.get("result").is_none());
    }
}
