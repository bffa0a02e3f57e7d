//! Tasks from the command line: `tools call NAME --task` (the call run as a task, followed to
//! its end with its status on stderr, Ctrl-C cancelling it), `tasks get ID` and
//! `tasks cancel ID`.

use std::time::Duration;

use clap::Subcommand;
use modelctx_client::{Client, Era, TaskError, TaskInfo, TaskOptions, model, task};
use serde_json::{Value, json};

use crate::exit::{Failed, Kind};
use crate::output::{print_json, table};

/// How long mcx waits for the answer to `tasks/cancel` after Ctrl-C.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

#[derive(Subcommand, Debug)]
pub(crate) enum TasksCommand {
    /// Show where a task stands: its status, status message, times, time to live and poll
    /// interval (the task as JSON with --json).
    Get {
        /// The task's id (as `tools call --task` printed it).
        id: String,
    },
    /// Ask the server to cancel a task (tasks/cancel). Cancelling is cooperative: the task may
    /// still end otherwise, as `tasks get` shows.
    Cancel {
        /// The task's id.
        id: String,
    },
}

/// Why a task command failed.
pub(crate) enum TaskFailure {
    Failed(Failed),
    /// Ctrl-C (the task was asked to cancel).
    Interrupted,
}

impl From<TaskError> for TaskFailure {
    fn from(error: TaskError) -> Self {
        TaskFailure::Failed(failed(&error))
    }
}

/// How a task error is told.
pub(crate) fn failed(error: &TaskError) -> Failed {
    match error {
        TaskError::Call(e) => Failed::call(e),
        TaskError::Failed { error: e, .. } => {
            let mut failed = Failed::new(Kind::Protocol, error.to_string());
            failed.code = Some(e.code.0);
            failed
        }
        other => Failed::new(Kind::Protocol, other.to_string()),
    }
}

/// The line that shows a task's state on stderr.
fn status_line(task: &TaskInfo) -> String {
    let message = task
        .status_message
        .as_deref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    format!(
        "task {} {}{message}",
        task.task_id,
        task::status_str(task.status)
    )
}

/// `tools call NAME --task`: calls the tool as a task and follows it to its end, its status on
/// stderr; Ctrl-C cancels the task. Returns the tool's result as JSON.
pub(crate) async fn call(
    client: &Client,
    name: &str,
    arguments: Value,
    ttl: Option<u64>,
) -> Result<Value, TaskFailure> {
    let mut options =
        TaskOptions::new().on_status(|task| crate::progress::eprint_line(&status_line(task)));
    if let Some(seconds) = ttl {
        options = options.ttl(Duration::from_secs(seconds));
    }
    // One listener for the whole command: a Ctrl-C between the task's creation and the wait
    // is not missed.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let created = tokio::select! {
        created = client.call_tool_as_task(name, arguments, options) => created,
        // The call's future is dropped, which cancels the request on the wire.
        _ = &mut interrupted => {
            crate::progress::eprint_line("mcx: interrupted; the call was cancelled");
            return Err(TaskFailure::Interrupted);
        }
    };
    let handle = created?;
    let outcome = match handle.id() {
        None => handle.wait().await,
        Some(id) => {
            let id = id.to_owned();
            tokio::select! {
                outcome = handle.wait() => outcome,
                _ = &mut interrupted => {
                    crate::progress::eprint_line(&format!("mcx: interrupted; cancelling task {id}"));
                    let said = match tokio::time::timeout(CANCEL_WAIT, handle.cancel()).await {
                        Ok(Ok(())) => format!("mcx: task {id} cancelled (tasks/cancel)"),
                        Ok(Err(e)) => format!("mcx: cancelling task {id} failed: {e}"),
                        Err(_) => format!("mcx: no answer to tasks/cancel for task {id}"),
                    };
                    crate::progress::eprint_line(&said);
                    return Err(TaskFailure::Interrupted);
                }
            }
        }
    };
    Ok(result_json(client, outcome?))
}

/// A tool result as JSON, written as the version spoken writes it.
fn result_json(client: &Client, result: model::CallToolResult) -> Value {
    let written = match client.era() {
        Some(Era::Modern) => modelctx_types::v2026_07_28::CallToolResult::try_from(result)
            .map_err(|e| e.to_string())
            .and_then(|r| serde_json::to_value(r).map_err(|e| e.to_string())),
        _ => modelctx_types::v2025_11_25::CallToolResult::try_from(result)
            .map_err(|e| e.to_string())
            .and_then(|r| serde_json::to_value(r).map_err(|e| e.to_string())),
    };
    written.unwrap_or_else(|e| json!({"content": [], "error": e}))
}

/// `tasks get|cancel`.
pub(crate) async fn run(client: &Client, command: TasksCommand, json: bool) -> Result<(), Failed> {
    match command {
        TasksCommand::Get { id } => {
            let task = client.task(&id).status().await.map_err(|e| failed(&e))?;
            if json {
                print_json(&task_json(&task));
            } else {
                let ms = |d: Option<Duration>| {
                    d.map_or_else(|| "none".to_owned(), |d| format!("{} ms", d.as_millis()))
                };
                let rows = [
                    vec!["task".into(), task.task_id.clone()],
                    vec!["status".into(), task::status_str(task.status).into()],
                    vec![
                        "message".into(),
                        task.status_message.clone().unwrap_or_default(),
                    ],
                    vec!["created".into(), task.created_at.clone()],
                    vec!["updated".into(), task.last_updated_at.clone()],
                    vec!["ttl".into(), ms(task.ttl)],
                    vec!["poll interval".into(), ms(task.poll_interval)],
                ];
                table(&["", ""], &rows);
            }
        }
        TasksCommand::Cancel { id } => {
            client.task(&id).cancel().await.map_err(|e| failed(&e))?;
            if json {
                print_json(&json!({"taskId": id, "cancelRequested": true}));
            } else {
                say!("cancel requested for task {id}");
            }
        }
    }
    Ok(())
}

/// A task as JSON (times as the server wrote them, durations in milliseconds).
fn task_json(task: &TaskInfo) -> Value {
    let ms = |d: Option<Duration>| d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    json!({
        "taskId": task.task_id,
        "status": task::status_str(task.status),
        "statusMessage": task.status_message,
        "createdAt": task.created_at,
        "lastUpdatedAt": task.last_updated_at,
        "ttlMs": ms(task.ttl),
        "pollIntervalMs": ms(task.poll_interval),
    })
}
