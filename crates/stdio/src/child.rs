//! The client side: an MCP server run as a child process, spoken to over its stdin and stdout.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::codec::LineCodec;
use crate::io::{LineReader, LineWriter};

/// The environment variables a child inherits by default (POSIX), as the reference SDKs do; the
/// rest of the parent's environment (tokens, keys) stays out unless the caller passes it.
#[cfg(unix)]
pub const DEFAULT_INHERITED_ENV: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR",
    "TZ",
];

/// The environment variables a child inherits by default (Windows), as the reference SDKs do,
/// plus `COMSPEC` and `WINDIR`; names are compared ignoring ASCII case, as Windows does (`Path`
/// is `PATH`).
#[cfg(windows)]
pub const DEFAULT_INHERITED_ENV: &[&str] = &[
    "APPDATA",
    "COMSPEC",
    "HOMEDRIVE",
    "HOMEPATH",
    "LOCALAPPDATA",
    "PATH",
    "PATHEXT",
    "PROCESSOR_ARCHITECTURE",
    "SYSTEMDRIVE",
    "SYSTEMROOT",
    "TEMP",
    "USERNAME",
    "USERPROFILE",
    "PROGRAMFILES",
    "WINDIR",
];

/// The environment variables a child inherits by default.
#[cfg(not(any(unix, windows)))]
pub const DEFAULT_INHERITED_ENV: &[&str] = &["PATH"];

/// The longest stderr line passed on in one piece; longer lines are passed on in pieces of this
/// size, so a child that writes without newlines cannot make us buffer without bound.
pub const MAX_STDERR_LINE: usize = 16 * 1024;

/// What becomes of the child's stderr. It is always read (a child blocked on a full stderr pipe
/// would stop answering) and never treated as an error.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Stderr {
    /// Each line becomes a `tracing` event at INFO level, target `modelctx_stdio::stderr`, with
    /// the program's name in the `server` field. The default.
    #[default]
    Tracing,
    /// Each line is given to the callback (without its newline; invalid UTF-8 replaced).
    Callback(Arc<dyn Fn(&str) + Send + Sync>),
    /// Passed through to this process's stderr.
    Inherit,
    /// Dropped.
    Discard,
}

impl fmt::Debug for Stderr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stderr::Tracing => "Tracing",
            Stderr::Callback(_) => "Callback(..)",
            Stderr::Inherit => "Inherit",
            Stderr::Discard => "Discard",
        })
    }
}

/// How to start an MCP server as a child process, and how to stop it.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use modelctx_stdio::ServerCommand;
///
/// let mut server = ServerCommand::new("npx")
///     .args(["-y", "@modelcontextprotocol/server-everything"])
///     .env("API_TOKEN", "secret")
///     .spawn()?;
/// server.writer.send(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).await?;
/// let reply = server.reader.next_line().await?;
/// let report = server.shutdown().await?;
/// # Ok(()) }
/// ```
///
/// Its `Debug` output shows the names of the variables set with [`env`](Self::env), never their
/// values (they are often tokens).
#[derive(Clone)]
pub struct ServerCommand {
    program: OsString,
    args: Vec<OsString>,
    current_dir: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    inherit: Vec<OsString>,
    inherit_all: bool,
    stderr: Stderr,
    codec: LineCodec,
    close_wait: Duration,
    term_wait: Duration,
}

impl fmt::Debug for ServerCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// The names of the variables set, with their values redacted.
        struct Redacted<'a>(&'a [(OsString, OsString)]);
        impl fmt::Debug for Redacted<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(self.0.iter().map(|(k, _)| (k, format_args!("<redacted>"))))
                    .finish()
            }
        }
        f.debug_struct("ServerCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("current_dir", &self.current_dir)
            .field("env", &Redacted(&self.env))
            .field("inherit", &self.inherit)
            .field("inherit_all", &self.inherit_all)
            .field("stderr", &self.stderr)
            .field("codec", &self.codec)
            .field("close_wait", &self.close_wait)
            .field("term_wait", &self.term_wait)
            .finish()
    }
}

/// Whether an environment variable's name `key` is `name`: exactly on POSIX, ignoring ASCII
/// case on Windows (where `Path` and `PATH` are one variable).
fn same_env_name(key: &OsStr, name: &OsStr, ignore_case: bool) -> bool {
    if ignore_case {
        key.as_encoded_bytes()
            .eq_ignore_ascii_case(name.as_encoded_bytes())
    } else {
        key == name
    }
}

/// Environment names are case-insensitive on Windows.
const ENV_IGNORES_CASE: bool = cfg!(windows);

impl ServerCommand {
    /// Runs `program` (looked up in `PATH` as the OS does), with no arguments, in this process's
    /// working directory, with the [`DEFAULT_INHERITED_ENV`] variables of this process only, its
    /// stderr to `tracing`, 4 MiB lines, and 2 s waits at shutdown.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        ServerCommand {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            current_dir: None,
            env: Vec::new(),
            inherit: Vec::new(),
            inherit_all: false,
            stderr: Stderr::default(),
            codec: LineCodec::new(),
            close_wait: Duration::from_secs(2),
            term_wait: Duration::from_secs(2),
        }
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// The child's working directory.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Sets a variable in the child's environment (over an inherited one of the same name).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Passes one more of this process's variables on to the child, when it is set.
    pub fn inherit_env(mut self, key: impl AsRef<OsStr>) -> Self {
        self.inherit.push(key.as_ref().to_owned());
        self
    }

    /// Passes this process's whole environment on to the child (secrets included: only for
    /// servers trusted with it).
    pub fn inherit_all_env(mut self) -> Self {
        self.inherit_all = true;
        self
    }

    /// What becomes of the child's stderr (default: [`Stderr::Tracing`]).
    pub fn stderr(mut self, stderr: Stderr) -> Self {
        self.stderr = stderr;
        self
    }

    /// The codec reading the child's stdout (for another maximum line length).
    pub fn codec(mut self, codec: LineCodec) -> Self {
        self.codec = codec;
        self
    }

    /// How long [`ChildTransport::shutdown`] waits for the child to exit after closing its stdin
    /// (default 2 s), then after SIGTERM (default 2 s), before SIGKILL. The second wait is also how
    /// long processes left in its group after it exited get between SIGTERM and SIGKILL.
    pub fn shutdown_waits(mut self, after_close: Duration, after_term: Duration) -> Self {
        self.close_wait = after_close;
        self.term_wait = after_term;
        self
    }

    /// The environment the child gets: the safelisted (or all) variables of this process, then
    /// the caller's. Values that start with `()` (shell functions exported by bash) are not
    /// inherited.
    fn environment(&self) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(key, value)| {
                let listed = self.inherit_all
                    || DEFAULT_INHERITED_ENV
                        .iter()
                        .any(|name| same_env_name(key, OsStr::new(name), ENV_IGNORES_CASE))
                    || self
                        .inherit
                        .iter()
                        .any(|name| same_env_name(key, name, ENV_IGNORES_CASE));
                listed && !value.as_encoded_bytes().starts_with(b"()")
            })
            .collect();
        for (key, value) in &self.env {
            env.retain(|(k, _)| !same_env_name(k, key, ENV_IGNORES_CASE));
            env.push((key.clone(), value.clone()));
        }
        env
    }

    /// Starts the child. Must be called from within a tokio runtime (its pipes, the stderr
    /// reader and the reaping of the process belong to it).
    pub fn spawn(&self) -> io::Result<ChildTransport> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .env_clear()
            .envs(self.environment())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(match self.stderr {
                Stderr::Inherit => Stdio::inherit(),
                Stderr::Discard => Stdio::null(),
                Stderr::Tracing | Stderr::Callback(_) => Stdio::piped(),
            })
            // A child left behind is killed (and reaped by tokio), never a zombie.
            .kill_on_drop(true);
        if let Some(dir) = &self.current_dir {
            command.current_dir(dir);
        }
        // Its own process group, so that SIGTERM reaches what it started (`npx` starts `node`),
        // and a Ctrl-C in our terminal is ours to handle, not the child's.
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot start {:?}: {e}", self.program.to_string_lossy()),
            )
        })?;
        let name = self.program.to_string_lossy().into_owned();
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(io::Error::other("the child's pipes are missing"));
        };
        let stderr_task = child.stderr.take().map(|stderr| {
            let sink = self.stderr.clone();
            let name = name.clone();
            tokio::spawn(forward_stderr(stderr, move |line| match &sink {
                Stderr::Callback(callback) => callback(line),
                _ => tracing::info!(target: "modelctx_stdio::stderr", server = %name, "{line}"),
            }))
        });
        Ok(ChildTransport {
            reader: LineReader::new(stdout, self.codec.clone()),
            writer: LineWriter::new(stdin),
            process: ServerProcess {
                #[cfg(unix)]
                group: child
                    .id()
                    .and_then(|id| i32::try_from(id).ok())
                    .and_then(rustix::process::Pid::from_raw),
                child,
                name,
                status: None,
                close_wait: self.close_wait,
                term_wait: self.term_wait,
                stderr_task,
            },
        })
    }
}

/// A running server: the two halves of its line transport and the process itself. The fields
/// are separate so that a driver can read, write and wait for the exit at the same time.
#[derive(Debug)]
#[non_exhaustive]
pub struct ChildTransport {
    /// Reads the child's stdout.
    pub reader: LineReader<ChildStdout>,
    /// Writes the child's stdin.
    pub writer: LineWriter<ChildStdin>,
    /// The process.
    pub process: ServerProcess,
}

impl ChildTransport {
    /// Stops the server as the MCP specification asks: flushes and closes its stdin, waits for
    /// it to exit, then sends SIGTERM (to its process group), waits, then SIGKILL. The process is
    /// always reaped. Returns how it ended.
    pub async fn shutdown(self) -> io::Result<Shutdown> {
        let ChildTransport {
            reader,
            writer,
            process,
        } = self;
        // Nobody reads its stdout any more: let writes to it fail rather than block.
        drop(reader);
        process.shutdown(writer).await
    }
}

/// How a server process ended at [`ChildTransport::shutdown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shutdown {
    /// Its exit status.
    pub status: ExitStatus,
    /// What made it exit.
    pub by: StoppedBy,
}

/// What made a server process exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoppedBy {
    /// It exited on its own, before or after its stdin closed.
    Exit,
    /// SIGTERM (on Windows, where there is none, this stage is skipped).
    Terminate,
    /// SIGKILL.
    Kill,
}

/// The server process: its id, its exit, and how it is stopped.
pub struct ServerProcess {
    child: Child,
    /// The child's process group (it leads one), kept after it is reaped: grandchildren may
    /// still be in it.
    #[cfg(unix)]
    group: Option<rustix::process::Pid>,
    name: String,
    status: Option<ExitStatus>,
    close_wait: Duration,
    term_wait: Duration,
    stderr_task: Option<JoinHandle<()>>,
}

impl fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerProcess")
            .field("name", &self.name)
            .field("pid", &self.child.id())
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl ServerProcess {
    /// The process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// The program's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits for the process to exit and reaps it. Cancel-safe; once it has exited, returns its
    /// status at once.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.child.wait().await?;
        self.status = Some(status);
        Ok(status)
    }

    /// The exit status, if the process has exited (reaping it), without waiting.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    /// A sentence saying how the process ended, for the error its pending requests fail with:
    /// `the server process "x" exited (exit status: 1)`, or, when it has not exited (yet),
    /// `the server process "x" closed its stdout`.
    pub fn describe_exit(&self) -> String {
        match self.status {
            Some(status) => format!("the server process {:?} exited ({status})", self.name),
            None => format!("the server process {:?} closed its stdout", self.name),
        }
    }

    /// Stops the server like [`ChildTransport::shutdown`], for a driver that took the transport
    /// apart: flushes and closes `stdin`, then waits, SIGTERM, waits, SIGKILL.
    pub async fn shutdown(mut self, mut stdin: LineWriter<ChildStdin>) -> io::Result<Shutdown> {
        // A server that exited already or does not read: its stdin is closed all the same.
        let _ = tokio::time::timeout(self.close_wait, stdin.flush()).await;
        drop(stdin);
        self.stop().await
    }

    /// The stages after stdin is closed: wait, SIGTERM, wait, SIGKILL.
    async fn stop(&mut self) -> io::Result<Shutdown> {
        let close_wait = self.close_wait;
        if let Ok(status) = tokio::time::timeout(close_wait, self.wait()).await {
            return self.stopped(status?, StoppedBy::Exit).await;
        }
        #[cfg(unix)]
        {
            self.terminate();
            let term_wait = self.term_wait;
            if let Ok(status) = tokio::time::timeout(term_wait, self.wait()).await {
                return self.stopped(status?, StoppedBy::Terminate).await;
            }
        }
        self.kill();
        let status = self.wait().await?;
        self.stopped(status, StoppedBy::Kill).await
    }

    /// Reports the end, once what the child wrote to stderr has been passed on. Processes left
    /// in the child's group (a wrapper's `node` that ignores the closed stdin) are stopped
    /// first: SIGTERM, `term_wait`, SIGKILL.
    async fn stopped(&mut self, status: ExitStatus, by: StoppedBy) -> io::Result<Shutdown> {
        #[cfg(unix)]
        self.stop_group().await;
        if let Some(task) = self.stderr_task.take() {
            // Grandchildren may hold the stderr pipe open: do not wait for them for long.
            let _ = tokio::time::timeout(Duration::from_millis(500), task).await;
        }
        Ok(Shutdown { status, by })
    }

    /// SIGTERM to the child's process group (it leads one: see `spawn`).
    #[cfg(unix)]
    fn terminate(&self) {
        if let Some(pid) = self.group {
            // Fails only when the group is gone already.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::TERM);
        }
    }

    /// After the child exited: while its process group still has members, SIGTERM to the
    /// group, up to `term_wait` for it to empty, then SIGKILL. The group id cannot be reused
    /// while it has members, so this never signals anyone else.
    #[cfg(unix)]
    async fn stop_group(&mut self) {
        use rustix::process::{Signal, kill_process_group, test_kill_process_group};
        let Some(group) = self.group else {
            return;
        };
        if test_kill_process_group(group).is_err() {
            return;
        }
        let _ = kill_process_group(group, Signal::TERM);
        let deadline = tokio::time::Instant::now() + self.term_wait;
        while test_kill_process_group(group).is_ok() {
            if tokio::time::Instant::now() >= deadline {
                let _ = kill_process_group(group, Signal::KILL);
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// SIGKILL to the child's process group, and to the child.
    fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.group {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.start_kill();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.status.is_none() && self.child.id().is_some() {
            // Dropped without `shutdown`: kill its group too (the child itself is killed and
            // reaped by tokio through `kill_on_drop`).
            self.kill();
        }
        // Exited, but what it started may still run in its group.
        #[cfg(unix)]
        if let Some(group) = self.group
            && rustix::process::test_kill_process_group(group).is_ok()
        {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        if let Some(task) = self.stderr_task.take() {
            task.abort();
        }
    }
}

/// Reads `stderr` to its end, passing each line on; lines longer than [`MAX_STDERR_LINE`] are
/// passed on in pieces. Memory stays bounded whatever the child writes.
async fn forward_stderr<R: AsyncRead + Unpin>(mut stderr: R, emit: impl Fn(&str)) {
    let mut buf = vec![0u8; 8 * 1024];
    let mut line: Vec<u8> = Vec::with_capacity(1024);
    let flush = |line: &mut Vec<u8>| {
        let end = if line.last() == Some(&b'\r') {
            line.len() - 1
        } else {
            line.len()
        };
        emit(&String::from_utf8_lossy(&line[..end]));
        line.clear();
    };
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for chunk in buf[..n].split_inclusive(|&b| b == b'\n') {
            let (text, ends) = match chunk.split_last() {
                Some((b'\n', text)) => (text, true),
                _ => (chunk, false),
            };
            let mut text = text;
            while line.len() + text.len() > MAX_STDERR_LINE {
                let take = MAX_STDERR_LINE - line.len();
                line.extend_from_slice(&text[..take]);
                flush(&mut line);
                text = &text[take..];
            }
            line.extend_from_slice(text);
            if ends {
                flush(&mut line);
            }
        }
        if line.capacity() > 4 * MAX_STDERR_LINE {
            line.shrink_to(MAX_STDERR_LINE);
        }
    }
    if !line.is_empty() {
        flush(&mut line);
    }
}

/// What a command runs, for telling commands apart (the client's result cache keys on it).
impl ServerCommand {
    /// The program run.
    pub fn get_program(&self) -> &OsStr {
        &self.program
    }

    /// The arguments.
    pub fn get_args(&self) -> &[OsString] {
        &self.args
    }

    /// The working directory set with [`current_dir`](Self::current_dir).
    pub fn get_current_dir(&self) -> Option<&std::path::Path> {
        self.current_dir.as_deref()
    }

    /// The variables set with [`env`](Self::env), names and values (values may be secrets),
    /// then the names inherited with [`inherit_env`](Self::inherit_env), and whether the whole
    /// environment is inherited.
    pub fn get_envs(&self) -> (&[(OsString, OsString)], &[OsString], bool) {
        (&self.env, &self.inherit, self.inherit_all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    async fn lines_of(input: &[u8]) -> Vec<String> {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        forward_stderr(input, move |line| {
            sink.lock().unwrap().push(line.to_owned())
        })
        .await;
        out.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn stderr_is_passed_on_line_by_line() {
        assert_eq!(
            lines_of(b"one\r\ntwo\n\nthree").await,
            ["one", "two", "", "three"]
        );
        assert_eq!(lines_of(b"bad \xff byte\n").await, ["bad \u{fffd} byte"]);
        assert!(lines_of(b"").await.is_empty());
    }

    #[tokio::test]
    async fn long_stderr_lines_come_in_bounded_pieces() {
        let mut input = vec![b'a'; MAX_STDERR_LINE * 2 + 10];
        input.extend_from_slice(b"\nshort\n");
        let lines = lines_of(&input).await;
        let lengths: Vec<usize> = lines.iter().map(String::len).collect();
        assert_eq!(lengths, [MAX_STDERR_LINE, MAX_STDERR_LINE, 10, 5]);
    }

    #[test]
    fn the_environment_is_a_safelist_plus_the_callers() {
        // The test process has PATH; it has no variable of this name.
        let command = ServerCommand::new("x")
            .env("MODELCTX_TEST_ADDED", "1")
            .env("PATH", "/only/this");
        let env = command.environment();
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("MODELCTX_TEST_ADDED").as_deref(), Some("1"));
        assert_eq!(get("PATH").as_deref(), Some("/only/this"));
        assert_eq!(env.iter().filter(|(k, _)| k == "PATH").count(), 1);
        for (key, _) in &env {
            let key = key.to_string_lossy();
            assert!(
                DEFAULT_INHERITED_ENV.contains(&key.as_ref()) || key == "MODELCTX_TEST_ADDED",
                "{key} was inherited"
            );
        }
    }

    #[test]
    fn finding_20_env_names_compare_ignoring_case_on_windows() {
        let same = |a: &str, b: &str, ignore| same_env_name(OsStr::new(a), OsStr::new(b), ignore);
        // Windows: `Path`, `SystemRoot` and `ComSpec` are the safelisted names.
        assert!(same("Path", "PATH", true));
        assert!(same("SystemRoot", "SYSTEMROOT", true));
        assert!(same("ComSpec", "COMSPEC", true));
        assert!(!same("PATHEXT", "PATH", true));
        assert!(!same("API_TOKEN", "PATH", true));
        // POSIX: names are exact.
        assert!(same("PATH", "PATH", false));
        assert!(!same("Path", "PATH", false));
        assert_eq!(ENV_IGNORES_CASE, cfg!(windows));
        #[cfg(windows)]
        for name in ["COMSPEC", "WINDIR", "PATH", "SYSTEMROOT"] {
            assert!(DEFAULT_INHERITED_ENV.contains(&name), "{name}");
        }
    }

    #[test]
    fn finding_22_debug_shows_env_names_but_not_values() {
        let command = ServerCommand::new("server")
            .arg("--flag")
            .env("API_TOKEN", "s3cret-value");
        let shown = format!("{command:?}");
        assert!(!shown.contains("s3cret-value"), "{shown}");
        assert!(shown.contains("API_TOKEN"), "{shown}");
        assert!(shown.contains("--flag"), "{shown}");
        assert!(!format!("{command:#?}").contains("s3cret-value"));
    }

    #[cfg(unix)]
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.split_whitespace().nth(2) != Some("Z"))
    }

    /// A wrapper that exits at once, leaving a grandchild that ignores its closed stdin: the
    /// grandchild is stopped at shutdown all the same.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn finding_21_a_grandchild_left_in_the_group_is_stopped_at_shutdown() {
        let dir = std::env::temp_dir().join(format!("modelctx-f21-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pid");
        let script = format!("sleep 1000 & echo $! > {}; exit 0", file.display());
        let mut child = ServerCommand::new("sh")
            .args(["-c", &script])
            .stderr(Stderr::Discard)
            .shutdown_waits(Duration::from_secs(5), Duration::from_secs(5))
            .spawn()
            .unwrap();
        // The wrapper exits once it wrote the grandchild's pid.
        child.process.wait().await.unwrap();
        let pid: u32 = std::fs::read_to_string(&file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(alive(pid), "the grandchild runs before shutdown");
        let end = child.shutdown().await.unwrap();
        assert_eq!(end.by, StoppedBy::Exit);
        // Signalled and gone: allow its reaping by init a moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!alive(pid), "grandchild {pid} still runs after shutdown");
    }
}
