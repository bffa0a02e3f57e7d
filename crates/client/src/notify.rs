//! Notifications from the server, as a stream or a callback, the same in both eras.

use std::sync::Arc;

use modelctx_session::LogLevel;
use modelctx_types::model;
use serde_json::Value;
use tokio::sync::broadcast;

/// A notification from the server. In the modern era the list changes and resource updates come
/// on the client's `subscriptions/listen` stream, which the client opens (and re-opens) itself.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerNotification {
    /// The tool list changed: list it again.
    ToolsListChanged,
    /// The prompt list changed.
    PromptsListChanged,
    /// The resource list changed.
    ResourcesListChanged,
    /// A resource the client subscribed to changed.
    ResourceUpdated {
        /// Its URI.
        uri: String,
    },
    /// A task's status changed (2025-11-25 `notifications/tasks/status`, on the connection
    /// that made the task; 2026-07-28 `notifications/tasks`, on the listen stream while a
    /// [`TaskHandle::wait`](crate::TaskHandle::wait) follows the task): the task as the server
    /// describes it now. Optional for servers: poll ([`TaskHandle::status`](crate::TaskHandle::status))
    /// rather than rely on it.
    TaskStatus(crate::tasks::TaskInfo),
    /// A log message.
    Log(LogMessage),
    /// Notifications may have been lost while the connection was re-established (a restarted
    /// server process, a new HTTP session, a listen stream opened again): list what matters again.
    Resynced,
    /// The server sent something that is not a JSON-RPC message: it was dropped, and the
    /// connection goes on. A stdio server that prints anything else on its stdout (a banner, a
    /// log line meant for stderr) shows here, line by line.
    Unreadable(Unreadable),
    /// Any other notification, as it came.
    Other {
        /// Its method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
}

/// What the server sent that is not a JSON-RPC message (see
/// [`ServerNotification::Unreadable`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unreadable {
    /// The start of what came, as text: the first [`Unreadable::EXCERPT_CHARS`] characters of
    /// the line a stdio server wrote. Empty when it cannot be shown: a line that is not UTF-8 or
    /// too long to be read, or input the transport did not keep (an HTTP body, a member of a
    /// batch).
    pub excerpt: String,
    /// Whether more came than [`excerpt`](Self::excerpt) shows.
    pub truncated: bool,
    /// Why it is not a message (not JSON, not a JSON-RPC envelope, ...).
    pub reason: String,
}

impl Unreadable {
    /// The most characters [`excerpt`](Self::excerpt) holds.
    pub const EXCERPT_CHARS: usize = 200;

    /// What came as `text` (its first [`EXCERPT_CHARS`](Self::EXCERPT_CHARS) characters are
    /// kept), unreadable for `reason`.
    pub(crate) fn new(text: &str, reason: impl Into<String>) -> Self {
        let (excerpt, truncated) = match text.char_indices().nth(Self::EXCERPT_CHARS) {
            Some((end, _)) => (text[..end].to_owned(), true),
            None => (text.to_owned(), false),
        };
        Unreadable {
            excerpt,
            truncated,
            reason: reason.into(),
        }
    }

    /// Unreadable for `reason`, with nothing to show.
    pub(crate) fn unseen(reason: impl Into<String>) -> Self {
        Unreadable::new("", reason)
    }
}

/// A log message from the server.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LogMessage {
    /// Its severity.
    pub level: LogLevel,
    /// The logger's name, when given.
    pub logger: Option<String>,
    /// The payload.
    pub data: Value,
}

/// Progress the server reported on a call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Progress {
    /// The progress so far (increases with every notification).
    pub progress: f64,
    /// The total, when known.
    pub total: Option<f64>,
    /// A message, when given.
    pub message: Option<String>,
}

pub(crate) type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;
pub(crate) type NotificationFn = Arc<dyn Fn(&ServerNotification) + Send + Sync>;

impl ServerNotification {
    pub(crate) fn from_model(notification: model::ServerNotification) -> Option<Self> {
        Some(match notification {
            model::ServerNotification::ToolListChanged(_) => ServerNotification::ToolsListChanged,
            model::ServerNotification::PromptListChanged(_) => {
                ServerNotification::PromptsListChanged
            }
            model::ServerNotification::ResourceListChanged(_) => {
                ServerNotification::ResourcesListChanged
            }
            model::ServerNotification::ResourceUpdated(p) => {
                ServerNotification::ResourceUpdated { uri: p.uri }
            }
            model::ServerNotification::LoggingMessage(p) => {
                use model::LoggingLevel as L;
                let level = match p.level {
                    L::Debug => LogLevel::Debug,
                    L::Info => LogLevel::Info,
                    L::Notice => LogLevel::Notice,
                    L::Warning => LogLevel::Warning,
                    L::Error => LogLevel::Error,
                    L::Critical => LogLevel::Critical,
                    L::Alert => LogLevel::Alert,
                    _ => LogLevel::Emergency,
                };
                ServerNotification::Log(LogMessage {
                    level,
                    logger: p.logger,
                    data: p.data,
                })
            }
            // Progress, cancellation and acknowledgements are consumed below the facade.
            model::ServerNotification::Progress(_)
            | model::ServerNotification::Cancelled(_)
            | model::ServerNotification::SubscriptionsAcknowledged(_) => return None,
            _ => return None,
        })
    }
}

/// Why [`Notifications::recv`] gave no notification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// The receiver fell behind and this many notifications were dropped for it; the next ones
    /// follow. List again what matters.
    #[error("{0} notifications were missed")]
    Missed(u64),
    /// The connection is closed.
    #[error("the connection is closed")]
    Closed,
}

/// The notifications of one connection, from the moment this receiver was made (see
/// [`Client::notifications`](crate::Client::notifications)). Bounded: a receiver that falls
/// behind is told how many it missed.
#[derive(Debug)]
pub struct Notifications {
    pub(crate) rx: broadcast::Receiver<ServerNotification>,
}

impl Notifications {
    /// The next notification.
    pub async fn recv(&mut self) -> Result<ServerNotification, RecvError> {
        match self.rx.recv().await {
            Ok(n) => Ok(n),
            Err(broadcast::error::RecvError::Lagged(n)) => Err(RecvError::Missed(n)),
            Err(broadcast::error::RecvError::Closed) => Err(RecvError::Closed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Unreadable;

    #[test]
    fn an_unreadable_line_keeps_its_first_200_characters() {
        let short = Unreadable::new("hello", "not JSON");
        assert_eq!(short.excerpt, "hello");
        assert!(!short.truncated);
        // Characters, not bytes: a multi-byte character is never cut.
        let long = "\u{e9}".repeat(300);
        let cut = Unreadable::new(&long, "not JSON");
        assert_eq!(cut.excerpt.chars().count(), Unreadable::EXCERPT_CHARS);
        assert!(cut.truncated);
        let exact = "x".repeat(Unreadable::EXCERPT_CHARS);
        assert!(!Unreadable::new(&exact, "r").truncated);
        assert_eq!(Unreadable::unseen("too long").excerpt, "");
    }
}
