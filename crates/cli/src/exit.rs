//! How a client command fails: the kind of each failure, its exit status, and how it is told (a
//! line on stderr, or a JSON object on stdout under `--json`).
//!
//! | status | kind | when |
//! |---|---|---|
//! | 0 | | the command did what was asked |
//! | 1 | | `demo`, `serve` or `proxy` failed |
//! | 2 | `usage` | invalid arguments (clap's own errors too) |
//! | 3 | `connection`, `timeout` | the server could not be started or reached, its connection ended, or it did not answer in time |
//! | 4 | `protocol` | the server answered with a JSON-RPC error, broke the protocol, or does not offer what was asked (no such tool; a tool that only runs as a task) |
//! | 5 | `tool` | the tool ran and reported an error (`isError: true`) |
//! | 130 | | interrupted (Ctrl-C) |

use std::process::ExitCode;

use modelctx_client::{CloseReason, ConnectError, Error, TransportError};
use serde_json::{Value, json};

/// The text of `mcx --help` about exit statuses and `--json` errors.
pub(crate) const HELP: &str = "\
Exit status:
  0    success
  1    `demo`, `serve` or `proxy` failed
  2    usage: invalid arguments
  3    connection: the server could not be started or reached, its connection ended, or it
       did not answer in time (--timeout)
  4    protocol: the server answered with a JSON-RPC error, or broke the protocol, or it does
       not offer what was asked (no tool of that name, a tool that only runs as a task)
  5    tool: the tool reported an error (isError: true)
  130  interrupted (Ctrl-C)

With --json, a failed client command prints only
{\"error\": {\"kind\": \"usage|connection|timeout|protocol|tool\", \"message\": \"...\", \"code\": N}}
on stdout (`code`: the JSON-RPC error code, when the server answered with one; a tool error
adds the tool's whole `result`).";

/// What kind of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Usage,
    Connection,
    Timeout,
    Protocol,
    Tool,
}

impl Kind {
    /// Its name in `--json` errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Usage => "usage",
            Kind::Connection => "connection",
            Kind::Timeout => "timeout",
            Kind::Protocol => "protocol",
            Kind::Tool => "tool",
        }
    }

    /// Its exit status.
    pub(crate) fn status(self) -> u8 {
        match self {
            Kind::Usage => 2,
            Kind::Connection | Kind::Timeout => 3,
            Kind::Protocol => 4,
            Kind::Tool => 5,
        }
    }
}

/// A failed client command.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failed {
    pub(crate) kind: Kind,
    pub(crate) message: String,
    /// The JSON-RPC error code of the server's answer, when it answered with one.
    pub(crate) code: Option<i64>,
    /// The tool's whole result, for [`Kind::Tool`] (in the `--json` error, as `result`).
    pub(crate) result: Option<Value>,
}

impl Failed {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Self {
        Failed {
            kind,
            message: message.into(),
            code: None,
            result: None,
        }
    }

    /// A mistake in what the user asked.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failed::new(Kind::Usage, message)
    }

    /// A call that failed.
    pub(crate) fn call(error: &Error) -> Self {
        let kind = match error {
            Error::Remote(_)
            | Error::CancelledByServer(_)
            | Error::NotAvailable(_)
            | Error::UpdatesNotOffered { .. }
            | Error::InvalidResult { .. }
            | Error::StructuredContent { .. }
            | Error::TooManyRounds(_)
            | Error::Input { .. } => Kind::Protocol,
            Error::Timeout(_) => Kind::Timeout,
            Error::Transport(lost) if broke_the_protocol(lost) => Kind::Protocol,
            Error::Closed(_) | Error::Transport(_) | Error::TooManyInFlight(_) => Kind::Connection,
            Error::InvalidArguments(_) => Kind::Usage,
            _ => Kind::Protocol,
        };
        let message = match error {
            // The client says the time it measured (`2.001468315s`): said as a connect timeout
            // is, `2 s`.
            Error::Timeout(waited) => {
                format!(
                    "no response within {}; the request was cancelled",
                    seconds(*waited)
                )
            }
            other => other.to_string(),
        };
        let mut failed = Failed::new(kind, message);
        if let Error::Remote(e) = error {
            failed.code = Some(e.code.0);
        }
        failed
    }

    /// A connection that could not be made to `server` (`--stdio`'s command line, quoted, or
    /// `--url`'s URL).
    pub(crate) fn connect(server: &str, error: &ConnectError) -> Self {
        let kind = match error {
            ConnectError::Url(_) => Kind::Usage,
            ConnectError::Timeout { .. }
            | ConnectError::Handshake(CloseReason::InitializeTimeout(_)) => Kind::Timeout,
            ConnectError::Handshake(_) => Kind::Protocol,
            _ => Kind::Connection,
        };
        let mut failed = Failed::new(kind, format!("cannot connect to {server}: {error}"));
        if let ConnectError::Handshake(CloseReason::InitializeFailed(e)) = error {
            failed.code = Some(e.code.0);
        }
        failed
    }

    /// A `--stdio` server whose `program` could not be started: one layer of wording, `cannot
    /// start `program`: No such file or directory`.
    pub(crate) fn spawn(program: &str, error: &std::io::Error) -> Self {
        // modelctx-stdio's message is `cannot start "program": <the system's error>`.
        let text = error.to_string();
        let quoted = format!("cannot start {program:?}: ");
        let cause = text.strip_prefix(&quoted).unwrap_or(&text);
        // `(os error 2)`: the number of the message just given.
        let cause = match cause.rsplit_once(" (os error ") {
            Some((cause, rest)) if rest.ends_with(')') => cause,
            _ => cause,
        };
        Failed::new(
            Kind::Connection,
            format!("cannot start `{program}`: {cause}"),
        )
    }

    /// Tells the user (stderr, or the JSON error on stdout) and gives the exit status. A
    /// question left on the terminal is given up first ([`crate::progress::release`]), so that
    /// this line and those held back meanwhile are printed.
    pub(crate) fn report(&self, json: bool) -> ExitCode {
        crate::progress::release();
        if json {
            crate::output::print_json(&self.to_json());
        } else {
            crate::progress::eprint_line(&format!("mcx: {}", self.message));
        }
        ExitCode::from(self.kind.status())
    }

    /// The `--json` form.
    pub(crate) fn to_json(&self) -> Value {
        let mut error = json!({"kind": self.kind.name(), "message": self.message});
        if let Some(code) = self.code {
            error["code"] = json!(code);
        }
        if let Some(result) = &self.result {
            error["result"] = result.clone();
        }
        json!({ "error": error })
    }
}

/// `waited` in seconds to the tenth, as people write them and as a connect timeout says it:
/// `2 s`, `0.5 s`.
fn seconds(waited: std::time::Duration) -> String {
    format!("{} s", (waited.as_secs_f64() * 10.0).round() / 10.0)
}

/// Whether the transport lost a call because of what the server sent (a body that is not
/// JSON-RPC, a wrong content type, more than the limits allow), not because the connection
/// failed.
fn broke_the_protocol(lost: &TransportError) -> bool {
    use modelctx_client::HttpTransportError as Http;
    matches!(
        lost,
        TransportError::Http(Http::Malformed(_) | Http::ContentType(_) | Http::TooLarge { .. })
    )
}

#[cfg(test)]
mod tests {
    use modelctx_client::{ErrorCode, ErrorObject};

    use super::*;

    #[test]
    fn each_kind_has_its_status_and_name() {
        let statuses: Vec<(&str, u8)> = [
            Kind::Usage,
            Kind::Connection,
            Kind::Timeout,
            Kind::Protocol,
            Kind::Tool,
        ]
        .iter()
        .map(|k| (k.name(), k.status()))
        .collect();
        assert_eq!(
            statuses,
            [
                ("usage", 2),
                ("connection", 3),
                ("timeout", 3),
                ("protocol", 4),
                ("tool", 5)
            ]
        );
    }

    #[test]
    fn call_errors_are_classified() {
        let remote = Failed::call(&Error::Remote(ErrorObject::new(
            ErrorCode::METHOD_NOT_FOUND,
            "no such method",
        )));
        assert_eq!(remote.kind, Kind::Protocol);
        assert_eq!(remote.code, Some(-32601));
        assert_eq!(
            remote.to_json(),
            json!({"error": {"kind": "protocol", "message": remote.message, "code": -32601}})
        );
        let timeout = Failed::call(&Error::Timeout(std::time::Duration::from_nanos(
            2_001_468_315,
        )));
        assert_eq!((timeout.kind, timeout.code), (Kind::Timeout, None));
        assert_eq!(
            timeout.message,
            "no response within 2 s; the request was cancelled"
        );
        assert_eq!(
            seconds(std::time::Duration::from_millis(500)),
            "0.5 s",
            "tenths kept"
        );
        assert_eq!(
            timeout.to_json()["error"].as_object().unwrap().len(),
            2,
            "no code without one"
        );
        let closed = Failed::call(&Error::Closed(CloseReason::Transport(
            "exit status: 1".into(),
        )));
        assert_eq!(closed.kind, Kind::Connection);
        let malformed = Failed::call(&Error::Transport(TransportError::Http(
            modelctx_client::HttpTransportError::Malformed("not JSON".into()),
        )));
        assert_eq!(malformed.kind, Kind::Protocol);
    }

    #[test]
    fn connect_errors_are_classified_and_say_what_failed() {
        // As modelctx-stdio words it: one layer of wording is kept.
        let io = std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "cannot start \"nope\": {}",
                std::io::Error::from_raw_os_error(2)
            ),
        );
        let spawn = Failed::spawn("nope", &io);
        assert_eq!(spawn.kind, Kind::Connection);
        assert!(
            spawn.message.starts_with("cannot start `nope`: "),
            "{spawn:?}"
        );
        assert!(!spawn.message.contains("os error"), "{spawn:?}");
        assert!(!spawn.message.contains("\"nope\""), "{spawn:?}");
        let other = Failed::spawn("x", &std::io::Error::other("the child's pipes are missing"));
        assert_eq!(
            other.message,
            "cannot start `x`: the child's pipes are missing"
        );
        let refused = Failed::connect(
            "http://127.0.0.1:9/mcp",
            &ConnectError::Unreachable(TransportError::Http(
                modelctx_client::HttpTransportError::Connection("connection refused".into()),
            )),
        );
        assert_eq!(
            refused.message,
            "cannot connect to http://127.0.0.1:9/mcp: connection refused"
        );
        let refused_initialize = Failed::connect(
            "x",
            &ConnectError::Handshake(CloseReason::InitializeFailed(ErrorObject::new(
                ErrorCode::INVALID_PARAMS,
                "bad",
            ))),
        );
        assert_eq!(refused_initialize.kind, Kind::Protocol);
        assert_eq!(refused_initialize.code, Some(-32602));
    }
}
