//! Line-framed transports: a server run as a child process, or any byte stream pair.

use std::time::Duration;

use modelctx_stdio::{LineReader, LineWriter, ServerCommand, ServerProcess, StoppedBy};
use modelctx_types::Incoming;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::process::ChildStdin;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::channels::{Channels, LinkEvent, OUT_QUEUE, QUEUE};
use crate::notify::Unreadable;

/// How the server process of a stdio connection stopped: see [`Client::server_exit`].
///
/// [`Client::server_exit`]: crate::Client::server_exit
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerExit {
    /// Its exit status.
    pub status: std::process::ExitStatus,
    /// What made it exit: on its own (before or after its stdin closed), SIGTERM or SIGKILL.
    pub by: StoppedBy,
}

/// A running server process and the task that writes its stdin.
pub(crate) struct Child {
    process: ServerProcess,
    writer: JoinHandle<Option<LineWriter<ChildStdin>>>,
}

impl Child {
    /// How the process ended, waiting a little for its exit status.
    pub(crate) async fn describe_exit(&mut self) -> String {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.process.wait()).await;
        self.process.describe_exit()
    }

    /// Closes stdin, waits, SIGTERM, waits, SIGKILL; always reaps. How it stopped, when its
    /// exit status could be read.
    pub(crate) async fn shut_down(mut self) -> Option<ServerExit> {
        // The channel to the writer is closed by now: it hands the writer back when done.
        let writer = match tokio::time::timeout(Duration::from_secs(2), &mut self.writer).await {
            Ok(Ok(writer)) => writer,
            _ => {
                self.writer.abort();
                None
            }
        };
        let result = match writer {
            Some(writer) => self.process.shutdown(writer).await.map(|s| {
                Some(ServerExit {
                    status: s.status,
                    by: s.by,
                })
            }),
            None => {
                // Its stdin is closed already (the writer failed): give it the same wait to exit;
                // a process dropped while running is killed and reaped.
                let _ = tokio::time::timeout(Duration::from_secs(2), self.process.wait()).await;
                self.process.try_wait().map(|status| {
                    status.map(|status| ServerExit {
                        status,
                        by: StoppedBy::Exit,
                    })
                })
            }
        };
        result.unwrap_or_else(|error| {
            tracing::warn!(%error, "stopping the server process failed");
            None
        })
    }
}

/// The server a command runs, as a [`ResultCache`](crate::ResultCache) knows it: its program,
/// arguments and working directory, and a hash of its environment (under a key random to this
/// process), so that no value given with `env` (a token, say) is held or shown in the key.
pub(crate) fn cache_key(command: &ServerCommand) -> String {
    use std::hash::BuildHasher;
    use std::sync::OnceLock;
    static KEY: OnceLock<std::hash::RandomState> = OnceLock::new();
    let env = KEY
        .get_or_init(std::hash::RandomState::new)
        .hash_one(command.get_envs());
    format!(
        "stdio:{:?} {:?} in {:?} env {:016x}",
        command.get_program(),
        command.get_args(),
        command.get_current_dir(),
        env
    )
}

/// Spawns `command` and runs its pipes.
pub(crate) fn spawn(
    command: &ServerCommand,
    write_timeout: Duration,
) -> std::io::Result<(Channels, Child)> {
    let child = command.spawn()?;
    let (reader, writer, process) = (child.reader, child.writer, child.process);
    let (channels, writer) = lines(reader, writer, write_timeout);
    Ok((channels, Child { process, writer }))
}

/// Runs a reader task and a writer task over a line-framed stream pair; the writer task hands the
/// writer back when the channel to it closes. A write that waits longer than `write_timeout` (a
/// server that stops reading its input) ends the connection.
pub(crate) fn lines<R, W>(
    mut reader: LineReader<R>,
    mut writer: LineWriter<W>,
    write_timeout: Duration,
) -> (Channels, JoinHandle<Option<LineWriter<W>>>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (events, inbox) = mpsc::channel(QUEUE);
    let (out, mut outgoing) = mpsc::channel::<Incoming>(OUT_QUEUE);
    let writer_events = events.clone();
    let read = tokio::spawn(async move {
        loop {
            let event = match reader.next_line().await {
                Ok(Some(Ok(line))) => match modelctx_types::decode(line.as_bytes()) {
                    Ok(incoming) => LinkEvent::Message(incoming),
                    // The line itself, for the application to show (a banner, a log line).
                    Err(e) => LinkEvent::Unreadable(Unreadable::new(line.as_str(), e.to_string())),
                },
                Ok(Some(Err(e))) => LinkEvent::Unreadable(Unreadable::unseen(e.to_string())),
                Ok(None) => LinkEvent::Closed("the server closed its output".into()),
                Err(e) => LinkEvent::Closed(format!("reading from the server failed: {e}")),
            };
            let last = matches!(event, LinkEvent::Closed(_));
            if events.send(event).await.is_err() || last {
                return;
            }
        }
    });
    let write = tokio::spawn(async move {
        while let Some(first) = outgoing.recv().await {
            let mut next = Some(first);
            let mut written = Ok(());
            // Everything queued, then one flush.
            while let Some(incoming) = next {
                written = written.and_then(|()| match &incoming {
                    Incoming::Single(m) => writer.feed(m),
                    Incoming::Batch(ms) => writer.feed(
                        &ms.iter()
                            .filter_map(|m| m.as_ref().ok())
                            .collect::<Vec<_>>(),
                    ),
                    _ => Ok(()),
                });
                next = outgoing.try_recv().ok();
            }
            if let Err(e) = written {
                let _ = writer_events
                    .send(LinkEvent::Closed(format!(
                        "writing to the server failed: {e}"
                    )))
                    .await;
                return None;
            }
            let why = match tokio::time::timeout(write_timeout, writer.flush()).await {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => format!("writing to the server failed: {e}"),
                Err(_) => format!(
                    "the server read nothing of its input for {write_timeout:?}: the connection is taken for dead"
                ),
            };
            let _ = writer_events.send(LinkEvent::Closed(why)).await;
            return None;
        }
        Some(writer)
    });
    let mut channels = Channels::new(out, inbox);
    channels.tasks.push(read);
    (channels, write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finding_22_the_cache_key_of_a_command_holds_no_environment_value() {
        let command = ServerCommand::new("server")
            .arg("--port")
            .env("API_TOKEN", "s3cret-value");
        let key = cache_key(&command);
        assert!(!key.contains("s3cret-value"), "{key}");
        assert!(key.contains("server") && key.contains("--port"), "{key}");
        // Stable for the same command, different for another environment value.
        assert_eq!(key, cache_key(&command.clone()));
        let other = ServerCommand::new("server")
            .arg("--port")
            .env("API_TOKEN", "another");
        assert_ne!(key, cache_key(&other));
    }
}
