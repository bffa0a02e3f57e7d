//! MCP over stdio: newline-delimited JSON-RPC between a client and a server it runs as a child
//! process.
//!
//! # What it does
//!
//! * [`LineCodec`]: the framing, as a tokio-util [`Decoder`](tokio_util::codec::Decoder) and
//!   [`Encoder`](tokio_util::codec::Encoder) with no I/O: one message per line, `\r\n`
//!   tolerated, blank lines skipped, a last line without a newline still read, an over-long line
//!   ([`LineError::TooLong`]) or a line that is not UTF-8 ([`LineError::InvalidUtf8`]) reported
//!   as an item so that reading goes on with the next line. Messages are written as compact JSON
//!   with no line break in them.
//! * [`LineReader`] and [`LineWriter`]: the two halves of a line transport over any async byte
//!   stream. The writer encodes into a buffer ([`LineWriter::feed`]) and writes with one system
//!   call whatever has gathered ([`LineWriter::flush`]): batched under load, immediate when idle,
//!   never reordered.
//! * The server side, [`stdio()`]: this process's stdin and stdout. Pipes and sockets are driven
//!   by tokio's reactor directly, with no hop to the blocking thread pool per read.
//! * The client side, [`ServerCommand`] (feature `child`): runs a server as a child process with a safelisted
//!   environment ([`DEFAULT_INHERITED_ENV`] plus what the caller adds), its stderr read line by
//!   line into `tracing` or a callback (never an error), and stops it as the specification asks
//!   ([`ChildTransport::shutdown`]: close stdin, wait, SIGTERM, wait, SIGKILL). A child is never
//!   left a zombie: dropped without `shutdown`, it is killed and reaped.
//!
//! # What it does not do
//!
//! It knows no protocol rules: which message may be sent when, what answers a request, what
//! happens to pending requests when the child dies. Those belong to `modelctx-session`, and the
//! facades (`modelctx-server`, `modelctx-client`) join the two: they decode each [`Line`] and
//! feed it to the session, answer a [`LineError`] as the session's role requires (a server writes
//! [`LineError::to_error_response`]; a client drops it, and the client facade tells the
//! application), write what the session transmits, and when the child's stdout ends, fail
//! every pending request at once with
//! [`ServerProcess::describe_exit`] as the reason. It does not parse JSON either: a [`Line`] is
//! text, which the facades decode once (`modelctx_types::decode`; the server on its connection
//! driver's task) into envelopes whose params stay raw for the session.
//!
//! # Defaults
//!
//! | setting | default |
//! |---|---|
//! | maximum line length | 4 MiB ([`DEFAULT_MAX_LINE_LENGTH`]), both sides |
//! | child environment | [`DEFAULT_INHERITED_ENV`] of this process, then the caller's variables |
//! | child stderr | `tracing` at INFO, target `modelctx_stdio::stderr` ([`Stderr`]) |
//! | shutdown | close stdin, 2 s, SIGTERM to the child's process group, 2 s, SIGKILL; then what is left in its group: SIGTERM, 2 s, SIGKILL |
//!
//! # Logging from a stdio server
//!
//! Nothing but MCP messages may reach stdout. `tracing`'s usual `fmt` subscriber writes to
//! stdout, so send it to stderr: with the `stderr-log` feature, [`log_to_stderr()`] does it in
//! one line (filtered by `RUST_LOG`); without it, write
//! `tracing_subscriber::fmt().with_writer(std::io::stderr).init();`.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "child")]
pub mod child;
pub mod codec;
mod io;
pub mod server;

#[cfg(feature = "child")]
pub use child::{
    ChildTransport, DEFAULT_INHERITED_ENV, ServerCommand, ServerProcess, Shutdown, Stderr,
    StoppedBy,
};
pub use codec::{DEFAULT_MAX_LINE_LENGTH, Line, LineCodec, LineError};
pub use io::{LineReader, LineWriter, is_closed};
pub use server::{Stdin, Stdout, stdio, stdio_with_codec};

/// Installs a `tracing` subscriber that writes to stderr, never stdout, filtered by the
/// `RUST_LOG` environment variable (default: `info`). For stdio servers, whose stdout carries
/// only MCP messages. Fails if a global subscriber is already set.
#[cfg(feature = "stderr-log")]
pub fn log_to_stderr() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false)
        .try_init()
}

#[cfg(all(test, feature = "stderr-log"))]
mod tests {
    #[test]
    fn log_to_stderr_installs_one_subscriber() {
        assert!(super::log_to_stderr().is_ok());
        tracing::info!("to stderr");
        assert!(
            super::log_to_stderr().is_err(),
            "a second global subscriber"
        );
    }
}

/// The examples of this crate's `README.md`, compiled (and run) as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
