//! The fleet harness: a real `redis-server`, real `mcx serve demo --http` processes and a real
//! `nginx` in front of them, each started by the test on free loopback ports, under a temporary
//! folder of its own, and stopped when dropped.
//!
//! - [`Redis`]: `redis-server` with AOF on and `appendfsync always` (so a `kill -9` loses no
//!   acknowledged write), talked to through a minimal RESP client ([`Redis::command`]); the
//!   tests have no Redis crate.
//! - [`Instance`]: one `mcx serve demo --http 127.0.0.1:0` process with extra arguments; its URL
//!   is read from the line `mcx demo server: http://ADDR/mcp` it prints on stderr.
//! - [`Nginx`]: round-robin over a list of upstream addresses (no sticky directive), with
//!   `proxy_next_upstream error timeout`, so a connect refused by a dead instance moves to the
//!   next one; its access log names the upstream of every request ([`Nginx::access_log`]).
//! - [`Fleet`]: Redis, N instances and nginx in front of them.
//!
//! `.ci/run` installs `redis-server` and `nginx` (Debian packages); `cargo xtask ci` builds `mcx`
//! and sets `MODELCTX_MCX` and `MODELCTX_REQUIRE_FLEET=1`. Without a binary, a fleet test says
//! why and is skipped ([`skipped`]), unless `MODELCTX_REQUIRE_FLEET` is set: then it fails.
//!
//! The `mcx` binary is `MODELCTX_MCX`, else `mcx` in `$CARGO_TARGET_DIR/debug`, else beside the
//! test executable's `deps/` folder, else `target/debug/mcx` of the workspace. Cargo does not
//! build it for this package's tests: after a change to the CLI, `cargo build -p modelctx-cli`
//! first (`cargo xtask ci` does).
//!
//! Port races: a free port is found by binding `127.0.0.1:0` and dropping the listener, so another
//! process may take it before the child binds it. A child that exits saying "Address already in
//! use" (both `redis-server` and `nginx` print that text, from `strerror(EADDRINUSE)`) is started
//! again on another port, at most three times in all.

use std::fmt::{self, Display};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::http::within;

/// The variable that makes a fleet test fail, rather than be skipped, without its binaries.
pub const REQUIRE_ENV: &str = "MODELCTX_REQUIRE_FLEET";

/// The variable naming the `mcx` binary.
pub const MCX_ENV: &str = "MODELCTX_MCX";

/// In an extra argument of [`Fleet::start`], replaced by the fleet's [`Redis::url`].
pub const REDIS_URL: &str = "{redis}";

/// How often a start is tried when the child finds its port taken.
const START_TRIES: usize = 3;

/// How long a child has to become ready.
const READY_WITHIN: Duration = Duration::from_secs(15);

/// What `strerror(EADDRINUSE)` says, in the output of `redis-server` ("bind: Address already in
/// use") and `nginx` ("bind() to 127.0.0.1:P failed (98: Address already in use)").
const ADDRESS_IN_USE: &str = "Address already in use";

/// Says why a fleet test cannot run, and that it is skipped: `None`.
///
/// # Panics
///
/// When `MODELCTX_REQUIRE_FLEET` is set.
#[track_caller]
pub fn skipped<T>(why: impl Display) -> Option<T> {
    let required = std::env::var_os(REQUIRE_ENV).is_some();
    assert!(!required, "{REQUIRE_ENV} is set, but {why}");
    eprintln!(
        "skipped: {why} (run `cargo xtask ci`, or install redis-server and nginx and run \
         `cargo build -p modelctx-cli`)"
    );
    None
}

/// The first of `candidates` that runs with `version_arg`; else [`skipped`].
fn find_binary(what: &str, candidates: &[&str], version_arg: &str) -> Option<PathBuf> {
    for candidate in candidates {
        let ran = std::process::Command::new(candidate)
            .arg(version_arg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if matches!(ran, Ok(status) if status.success()) {
            return Some(PathBuf::from(candidate));
        }
    }
    skipped(format!(
        "{what} is not installed (tried {})",
        candidates.join(", ")
    ))
}

/// `redis-server`, when it runs; else [`skipped`].
pub fn redis_server() -> Option<PathBuf> {
    find_binary(
        "redis-server",
        &[
            "redis-server",
            "/usr/bin/redis-server",
            "/usr/sbin/redis-server",
        ],
        "--version",
    )
}

/// `nginx` (on the PATH, else `/usr/sbin/nginx`, which is not on every user's PATH), when it runs;
/// else [`skipped`].
pub fn nginx() -> Option<PathBuf> {
    find_binary("nginx", &["nginx", "/usr/sbin/nginx"], "-v")
}

/// The `mcx` binary (see the module docs for where it is looked for); else [`skipped`].
pub fn mcx() -> Option<PathBuf> {
    let file = format!("mcx{}", std::env::consts::EXE_SUFFIX);
    if let Some(path) = std::env::var_os(MCX_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Some(path)
        } else {
            skipped(format!("{MCX_ENV}={} is not a file", path.display()))
        };
    }
    let root = xtask::schema::project_root();
    let mut candidates = Vec::new();
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(root.join(target).join("debug").join(&file));
    }
    // The test executable is `<target>/debug/deps/<name>-<hash>`.
    if let Some(debug) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
    {
        candidates.push(debug.join(&file));
    }
    candidates.push(root.join("target/debug").join(&file));
    match candidates.iter().find(|path| path.is_file()) {
        Some(path) => Some(path.clone()),
        None => skipped(format!(
            "mcx is not built (looked for {})",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// A folder under the system's temporary folder, removed (with everything in it) when dropped.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "modelctx-{label}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // nginx started as root runs its worker as `nobody`, which must reach its temporary
        // files here, whatever the umask.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port that was free a moment ago (see the module docs on port races).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A file's text, or an empty string when it cannot be read (a log not written yet).
fn read_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Polls `check` every 20 ms until it gives a value, the child exits (`Err` with its status) or
/// [`READY_WITHIN`] has passed (`Err`).
async fn wait_ready<T, F, Fut>(child: &mut Child, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("it exited ({status})"));
        }
        if let Some(ready) = check().await {
            return Ok(ready);
        }
        if Instant::now() > deadline {
            return Err(format!("not ready within {READY_WITHIN:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// RESP

/// A Redis reply (RESP2, the protocol of a connection that did not send `HELLO 3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespValue {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nabc`
    Bulk(Vec<u8>),
    /// `*2\r\n...`
    Array(Vec<RespValue>),
    /// `$-1` or `*-1`
    Nil,
}

impl RespValue {
    /// The integer of an [`Integer`](Self::Integer) reply.
    ///
    /// # Panics
    ///
    /// For any other reply.
    #[track_caller]
    pub fn integer(&self) -> i64 {
        match self {
            RespValue::Integer(n) => *n,
            other => panic!("expected an integer reply, got {other:?}"),
        }
    }

    /// The text of a [`Bulk`](Self::Bulk) or [`Simple`](Self::Simple) reply; `None` for
    /// [`Nil`](Self::Nil).
    ///
    /// # Panics
    ///
    /// For any other reply.
    #[track_caller]
    pub fn text(&self) -> Option<String> {
        match self {
            RespValue::Bulk(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            RespValue::Simple(text) => Some(text.clone()),
            RespValue::Nil => None,
            other => panic!("expected a string reply, got {other:?}"),
        }
    }
}

/// A command as RESP: an array of bulk strings.
fn encode_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One reply at the start of `buf`, and how many bytes it took; `Ok(None)` while it is
/// incomplete.
fn parse_reply(buf: &[u8]) -> Result<Option<(RespValue, usize)>, String> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    if !b"+-:$*".contains(&kind) {
        return Err(format!("unexpected RESP type byte {kind:#04x}"));
    }
    let Some(end) = buf[1..].windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = std::str::from_utf8(&buf[1..=end]).map_err(|e| e.to_string())?;
    let after = end + 3;
    let number = || {
        line.parse::<i64>()
            .map_err(|e| format!("bad RESP number {line:?}: {e}"))
    };
    match kind {
        b'+' => Ok(Some((RespValue::Simple(line.to_owned()), after))),
        b'-' => Ok(Some((RespValue::Error(line.to_owned()), after))),
        b':' => Ok(Some((RespValue::Integer(number()?), after))),
        b'$' => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Some((RespValue::Nil, after)));
            };
            if buf.len() < after + len + 2 {
                return Ok(None);
            }
            let bytes = buf[after..after + len].to_vec();
            Ok(Some((RespValue::Bulk(bytes), after + len + 2)))
        }
        b'*' => {
            let Ok(count) = usize::try_from(number()?) else {
                return Ok(Some((RespValue::Nil, after)));
            };
            let mut at = after;
            let mut items = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                match parse_reply(&buf[at..])? {
                    Some((item, used)) => {
                        items.push(item);
                        at += used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((RespValue::Array(items), at)))
        }
        _ => unreachable!("checked above"),
    }
}

/// Sends one command to the Redis at `addr` on a new connection and reads its reply.
async fn resp_command(addr: SocketAddr, args: &[&str]) -> std::io::Result<RespValue> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(&encode_command(args)).await?;
    let mut buf = Vec::new();
    loop {
        match parse_reply(&buf) {
            Ok(Some((reply, _))) => return Ok(reply),
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::other(e)),
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

// ---------------------------------------------------------------------------------------------
// Redis

/// A `redis-server` on a loopback port, with its data (the AOF) in a temporary folder; killed
/// (`SIGKILL`) when dropped.
#[derive(Debug)]
pub struct Redis {
    child: Option<Child>,
    binary: PathBuf,
    port: u16,
    dir: TempDir,
}

impl Redis {
    /// Starts `redis-server` on a free loopback port (see the module docs on port races) and
    /// waits until it answers `PING`; `None` when it is not installed ([`skipped`]).
    ///
    /// # Panics
    ///
    /// When it does not start.
    pub async fn start() -> Option<Redis> {
        let binary = redis_server()?;
        let dir = TempDir::new("redis");
        for _ in 0..START_TRIES {
            let port = free_port();
            match spawn_redis(&binary, port, &dir.0).await {
                Ok(child) => {
                    return Some(Redis {
                        child: Some(child),
                        binary,
                        port,
                        dir,
                    });
                }
                Err(Start::AddressInUse) => continue,
                Err(Start::Failed(why)) => panic!("redis-server: {why}"),
            }
        }
        panic!("redis-server: every port tried was taken ({START_TRIES} tries)")
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The folder of its data and its log.
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    /// Kills it with `SIGKILL` (as `kill -9` does: no shutdown, no final save) and waits until
    /// it is gone. Nothing happens when it is not running.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = within("redis-server exits", child.wait()).await;
        }
    }

    /// Starts it again on the same port, killing it first when it runs: it reloads its AOF, so
    /// every acknowledged write is still there (`appendfsync always`).
    ///
    /// # Panics
    ///
    /// When it does not start (the port stays taken, or anything else).
    pub async fn restart(&mut self) {
        self.kill().await;
        // The same port: the clients know the URL. A port held by a process that is just
        // exiting is freed within moments.
        for _ in 0..START_TRIES {
            match spawn_redis(&self.binary, self.port, &self.dir.0).await {
                Ok(child) => {
                    self.child = Some(child);
                    return;
                }
                Err(Start::AddressInUse) => tokio::time::sleep(Duration::from_millis(200)).await,
                Err(Start::Failed(why)) => panic!("redis-server restart: {why}"),
            }
        }
        panic!("redis-server restart: port {} stays taken", self.port)
    }

    /// Starts it again on the same port with no data: killed, its AOF removed, started.
    pub async fn restart_empty(&mut self) {
        self.kill().await;
        for entry in std::fs::read_dir(&self.dir.0).expect("the redis folder") {
            let path = entry.expect("a redis folder entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if name.starts_with("appendonly") || name == "dump.rdb" {
                if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                }
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        }
        self.restart().await;
    }

    /// Sends one command (a new connection each time) and returns its reply, which may be an
    /// [`Error`](RespValue::Error) reply.
    ///
    /// # Panics
    ///
    /// When Redis cannot be reached, or within 20 s.
    pub async fn command(&self, args: &[&str]) -> RespValue {
        within(
            &format!("redis {}", args.join(" ")),
            resp_command(self.addr(), args),
        )
        .await
        .unwrap_or_else(|e| panic!("redis {}: {e}", args.join(" ")))
    }

    /// `DBSIZE`: how many keys it holds.
    pub async fn dbsize(&self) -> i64 {
        self.command(&["DBSIZE"]).await.integer()
    }

    /// `used_memory` of `INFO memory`, in bytes.
    pub async fn used_memory(&self) -> u64 {
        let info = self
            .command(&["INFO", "memory"])
            .await
            .text()
            .expect("INFO is a bulk string");
        info.lines()
            .find_map(|line| line.strip_prefix("used_memory:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no used_memory in INFO memory:\n{info}"))
    }
}

/// Why a child did not start.
enum Start {
    /// Its port was taken: try another.
    AddressInUse,
    /// Anything else.
    Failed(String),
}

/// Starts `redis-server` on `port` with its data in `dir` and waits until it answers `PING`.
async fn spawn_redis(binary: &Path, port: u16, dir: &Path) -> Result<Child, Start> {
    let log = dir.join("redis.log");
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| Start::Failed(format!("{}: {e}", log.display())))?;
    let err = out.try_clone().map_err(|e| Start::Failed(e.to_string()))?;
    let started_at = read_text(&log).len();
    let mut child = Command::new(binary)
        .args(["--bind", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .args([
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ])
        .arg("--dir")
        .arg(dir)
        .args([
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
            "--maxmemory",
            "256mb",
            "--maxmemory-policy",
            "noeviction",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Start::Failed(format!("cannot start {}: {e}", binary.display())))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // While it loads its AOF, PING answers `-LOADING`: ready means `+PONG`. The timeout: a
    // process that took the port may accept and never answer.
    let ready = wait_ready(&mut child, || async move {
        let ping = tokio::time::timeout(Duration::from_secs(1), resp_command(addr, &["PING"]));
        matches!(ping.await, Ok(Ok(RespValue::Simple(s))) if s == "PONG").then_some(())
    })
    .await;
    match ready {
        Ok(()) => Ok(child),
        Err(why) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            let text = read_text(&log);
            let text = text.get(started_at..).unwrap_or(&text);
            if text.contains(ADDRESS_IN_USE) {
                Err(Start::AddressInUse)
            } else {
                Err(Start::Failed(format!("{why}; its log:\n{text}")))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// mcx instances

/// One `mcx serve demo --http 127.0.0.1:0` process; killed (`SIGKILL`) when dropped.
#[derive(Debug)]
pub struct Instance {
    child: Option<Child>,
    binary: PathBuf,
    args: Vec<String>,
    addr: SocketAddr,
    output: Arc<Mutex<Vec<String>>>,
    drain: Option<JoinHandle<()>>,
}

impl Instance {
    /// Starts `mcx serve demo --http 127.0.0.1:0 <extra_args>` and waits for the line that says
    /// its URL; `None` when `mcx` is not built ([`skipped`]).
    ///
    /// # Panics
    ///
    /// When it exits or says nothing of the kind within 20 s.
    pub async fn start(extra_args: &[&str]) -> Option<Instance> {
        let binary = mcx()?;
        let args = extra_args.iter().map(|a| (*a).to_owned()).collect();
        let mut instance = Instance {
            child: None,
            binary,
            args,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            output: Arc::default(),
            drain: None,
        };
        instance.spawn().await;
        Some(instance)
    }

    async fn spawn(&mut self) {
        if let Err(why) = self.spawn_on(0).await {
            panic!("{why}")
        }
    }

    /// Starts the process on `port` (0: one the system picks); `Err` when it ends before saying
    /// its URL (its port taken, or anything else).
    async fn spawn_on(&mut self, port: u16) -> Result<(), String> {
        let mut child = Command::new(&self.binary)
            .args(["serve", "demo", "--http", &format!("127.0.0.1:{port}")])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()));
        let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        let output = Arc::new(Mutex::new(Vec::new()));
        let addr = within("mcx says its URL", async {
            while let Some(line) = lines.next_line().await.expect("mcx's stderr") {
                let found = parse_url_line(&line);
                output.lock().unwrap().push(line);
                if let Some(addr) = found {
                    return Ok(addr);
                }
            }
            Err(format!(
                "mcx {} ended before saying its URL; its stderr:\n{}",
                self.args.join(" "),
                output.lock().unwrap().join("\n")
            ))
        })
        .await?;
        // Its stderr is read to the end, so that it never blocks on a full pipe.
        let sink = Arc::clone(&output);
        let drain = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        self.child = Some(child);
        self.addr = addr;
        self.output = output;
        if let Some(old) = self.drain.replace(drain) {
            old.abort();
        }
        Ok(())
    }

    /// `http://ADDR/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Its address (the last one, when it was killed).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether it runs (it was not killed, and has not exited).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// The lines its current process wrote on stderr so far.
    pub fn output(&self) -> Vec<String> {
        self.output.lock().unwrap().clone()
    }

    /// Kills it with `SIGKILL` (no shutdown: its connections are cut, its state is lost) and
    /// waits until it is gone. Nothing happens when it is not running.
    pub async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = within("mcx exits", child.wait()).await;
        }
    }

    /// Starts it again, with the same arguments, on a new port (see [`url`](Self::url));
    /// killed first when it runs.
    pub async fn restart(&mut self) {
        self.kill9().await;
        self.spawn().await;
    }

    /// Starts it again, with the same arguments, on the port it had (killed first when it
    /// runs), so that a load balancer in front of it needs no new configuration; `false`, with
    /// nothing started, when that port cannot be had now (another socket took it meanwhile).
    pub async fn restart_in_place(&mut self) -> bool {
        self.kill9().await;
        let port = self.addr.port();
        self.spawn_on(port).await.is_ok()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(drain) = self.drain.take() {
            drain.abort();
        }
    }
}

/// The address in `mcx demo server: http://ADDR/mcp (Ctrl-C to stop)`.
fn parse_url_line(line: &str) -> Option<SocketAddr> {
    let rest = line.strip_prefix("mcx demo server: http://")?;
    let (addr, _) = rest.split_once("/mcp")?;
    addr.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// nginx

/// The `log_format` of the access log: one [`Access`] a line.
const LOG_FORMAT: &str = "$status|$upstream_addr|$upstream_status|$http_mcp_method|$request_method";

/// `nginx` on a loopback port, round-robin over upstream addresses, with its configuration,
/// logs and temporary files in a temporary folder; stopped when dropped.
#[derive(Debug)]
pub struct Nginx {
    child: Option<Child>,
    binary: PathBuf,
    port: u16,
    generation: u64,
    dir: TempDir,
}

/// One line of [`Nginx::access_log`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The status nginx answered with.
    pub status: u16,
    /// Every upstream tried, in order (more than one when `proxy_next_upstream` moved the
    /// request on); empty when none was.
    pub upstreams: Vec<String>,
    /// The request's `Mcp-Method` header, `-` without one.
    pub mcp_method: String,
    /// `GET`, `POST`, `DELETE`.
    pub method: String,
}

impl Access {
    /// The upstream that answered: the last one tried.
    pub fn upstream(&self) -> Option<&str> {
        self.upstreams.last().map(String::as_str)
    }
}

impl Nginx {
    /// Starts `nginx` on a free loopback port (see the module docs on port races) in front of
    /// `upstreams`; `None` when it is not installed ([`skipped`]).
    ///
    /// # Panics
    ///
    /// When it does not start.
    pub async fn start(upstreams: &[SocketAddr]) -> Option<Nginx> {
        let binary = nginx()?;
        let dir = TempDir::new("nginx");
        for _ in 0..START_TRIES {
            let port = free_port();
            match spawn_nginx(&binary, &dir.0, port, upstreams).await {
                Ok(child) => {
                    return Some(Nginx {
                        child: Some(child),
                        binary,
                        port,
                        generation: 0,
                        dir,
                    });
                }
                Err(Start::AddressInUse) => continue,
                Err(Start::Failed(why)) => panic!("nginx: {why}"),
            }
        }
        panic!("nginx: every port tried was taken ({START_TRIES} tries)")
    }

    /// `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr())
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The folder of its configuration and logs.
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    /// Rewrites the configuration for `upstreams`, runs `nginx -s reload` (same `-p`/`-c`) and
    /// waits until the new configuration serves and the old worker accepts no more connections.
    ///
    /// The old worker, shutting down gracefully, still serves the requests of the connections
    /// it had (a stream through it goes on until it ends); the idle ones it closes.
    ///
    /// # Panics
    ///
    /// When the reload fails or does not take effect within 15 s.
    pub async fn reload(&mut self, upstreams: &[SocketAddr]) {
        let master = self.child.as_ref().and_then(Child::id);
        let old_workers = master.map(children).unwrap_or_default();
        self.generation += 1;
        write_config(&self.dir.0, self.port, upstreams, self.generation);
        let mut command = Command::from(nginx_command(&self.binary, &self.dir.0));
        let out = within("nginx -s reload", command.args(["-s", "reload"]).output())
            .await
            .expect("nginx -s reload runs");
        assert!(
            out.status.success(),
            "nginx -s reload: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let (addr, generation) = (self.addr(), self.generation);
        let deadline = Instant::now() + READY_WITHIN;
        while served_generation(addr).await != Some(generation) {
            assert!(
                Instant::now() < deadline,
                "nginx did not take the new configuration; its errors:\n{}",
                read_text(&self.dir.0.join("error.log"))
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The master starts the new worker, then tells the old one to quit; until the old one
        // has heard it, it may still accept a connection, and serve it with the old list.
        while let Some(pid) = old_workers.iter().copied().find(|&pid| accepts(pid)) {
            assert!(
                Instant::now() < deadline,
                "nginx's old worker {pid} still accepts connections after the reload"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every request of the access log so far (the requests nginx has finished), in order;
    /// the check requests of start and reload are left out.
    pub fn access_log(&self) -> Vec<Access> {
        read_text(&self.dir.0.join("access.log"))
            .lines()
            .filter_map(parse_access)
            .collect()
    }

    /// Waits until the access log has at least `count` lines that `matches`, and returns those
    /// lines (nginx writes a line once the response has gone out, which may be a moment after
    /// the client has read it).
    ///
    /// # Panics
    ///
    /// After 20 s.
    pub async fn wait_access(
        &self,
        count: usize,
        matches: impl Fn(&Access) -> bool,
    ) -> Vec<Access> {
        within(
            &format!("{count} matching lines in nginx's access log"),
            async {
                loop {
                    let found: Vec<Access> =
                        self.access_log().into_iter().filter(&matches).collect();
                    if found.len() >= count {
                        return found;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        )
        .await
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // A SIGKILL of the master (kill_on_drop) would leave its worker behind: stop it as
        // nginx is stopped (`-s stop`, a TERM to the master, which ends its worker), then wait
        // for it a little.
        if let Some(mut child) = self.child.take() {
            let stopped = nginx_command(&self.binary, &self.dir.0)
                .args(["-s", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if matches!(stopped, Ok(status) if status.success()) {
                let deadline = Instant::now() + Duration::from_secs(3);
                while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

/// The state (`R`, `S`, `Z`...) and parent of a process, from `/proc/PID/stat` (Linux).
fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`, where comm may hold spaces and parentheses.
    let mut fields = text.get(text.rfind(')')? + 2..)?.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// The live (not zombie) child processes of `parent`: an nginx master's workers. Empty where
/// there is no `/proc`.
fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(
            |&pid| matches!(proc_stat(pid), Some((state, ppid)) if ppid == parent && state != 'Z'),
        )
        .collect()
}

/// Whether the nginx worker `pid` may still accept connections: it lives and has not yet
/// renamed itself `nginx: worker process is shutting down`, which it does as it closes its
/// listening sockets on the master's order to quit.
fn accepts(pid: u32) -> bool {
    if !matches!(proc_stat(pid), Some((state, _)) if state != 'Z') {
        return false;
    }
    let title = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    !String::from_utf8_lossy(&title).contains("shutting down")
}

/// `nginx -p DIR -c DIR/nginx.conf -e DIR/error.log`: the prefix, configuration and startup
/// error log of one nginx, for starting it and for its signals (`-s`).
fn nginx_command(binary: &Path, dir: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(binary);
    command
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-e")
        .arg(dir.join("error.log"));
    command
}

/// Writes `dir/nginx.conf` (see [`config`]).
fn write_config(dir: &Path, port: u16, upstreams: &[SocketAddr], generation: u64) {
    let path = dir.join("nginx.conf");
    std::fs::write(&path, config(dir, port, upstreams, generation))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Starts nginx on `port` in front of `upstreams`, with everything in `dir`, and waits until it
/// serves its configuration (generation 0).
async fn spawn_nginx(
    binary: &Path,
    dir: &Path,
    port: u16,
    upstreams: &[SocketAddr],
) -> Result<Child, Start> {
    write_config(dir, port, upstreams, 0);
    let log = dir.join("stderr.log");
    let err = std::fs::File::create(&log).map_err(|e| Start::Failed(e.to_string()))?;
    let _ = std::fs::remove_file(dir.join("error.log"));
    let mut command = Command::from(nginx_command(binary, dir));
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(err))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Start::Failed(format!("cannot start {}: {e}", binary.display())))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let ready = wait_ready(&mut child, || async move {
        (served_generation(addr).await == Some(0)).then_some(())
    })
    .await;
    match ready {
        Ok(()) => Ok(child),
        Err(why) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            let text = read_text(&log) + &read_text(&dir.join("error.log"));
            if text.contains(ADDRESS_IN_USE) {
                Err(Start::AddressInUse)
            } else {
                Err(Start::Failed(format!("{why}; its errors:\n{text}")))
            }
        }
    }
}

/// The generation of the configuration nginx at `addr` serves (`GET /fleet-generation`).
async fn served_generation(addr: SocketAddr) -> Option<u64> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(
            b"GET /fleet-generation HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        )
        .await
        .ok()?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(1), stream.read_to_string(&mut response))
        .await
        .ok()?
        .ok()?;
    if !response.starts_with("HTTP/1.1 200") {
        return None;
    }
    response.split("\r\n\r\n").nth(1)?.trim().parse().ok()
}

/// The configuration: round-robin (no sticky directive) over `upstreams`, a refused connect
/// or a connect timeout moved to the next upstream (`proxy_next_upstream error timeout`; a POST
/// that reached an upstream is never sent to another, as `non_idempotent` is left out), no
/// buffering (SSE), and `/fleet-generation`, which says `generation`, for start and reload to
/// know when it serves.
fn config(dir: &Path, port: u16, upstreams: &[SocketAddr], generation: u64) -> String {
    let t = dir.display();
    let servers: String = upstreams
        .iter()
        .map(|addr| format!("    server {addr} max_fails=1 fail_timeout=2s;\n"))
        .collect();
    format!(
        r#"daemon off;
worker_processes 1;
pid {t}/nginx.pid;
error_log {t}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  log_format fleet '{LOG_FORMAT}';
  access_log {t}/access.log fleet;
  client_body_temp_path {t}/body;
  proxy_temp_path {t}/proxy;
  fastcgi_temp_path {t}/f;
  uwsgi_temp_path {t}/u;
  scgi_temp_path {t}/s;
  upstream mcx {{
{servers}  }}
  server {{
    listen 127.0.0.1:{port};
    location = /fleet-generation {{
      access_log off;
      default_type text/plain;
      return 200 "{generation}";
    }}
    location /mcp {{
      proxy_pass http://mcx;
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_cache off;
      proxy_request_buffering off;
      gzip off;
      proxy_read_timeout 1h;
      proxy_send_timeout 1h;
      proxy_connect_timeout 2s;
      proxy_next_upstream error timeout;
      proxy_next_upstream_tries 3;
    }}
  }}
}}
"#
    )
}

/// One line of the access log, in [`LOG_FORMAT`].
fn parse_access(line: &str) -> Option<Access> {
    let mut fields = line.split('|');
    let status = fields.next()?.parse().ok()?;
    let upstreams = fields.next()?;
    let _upstream_status = fields.next()?;
    let mcp_method = fields.next()?.to_owned();
    let method = fields.next()?.to_owned();
    // `A, B` when nginx moved on from A to B; ` : ` between the groups of an internal redirect.
    let upstreams = if upstreams == "-" {
        Vec::new()
    } else {
        upstreams
            .split(',')
            .flat_map(|part| part.split(" : "))
            .map(|addr| addr.trim().to_owned())
            .collect()
    };
    Some(Access {
        status,
        upstreams,
        mcp_method,
        method,
    })
}

// ---------------------------------------------------------------------------------------------
// The fleet

/// Redis, N [`Instance`]s and [`Nginx`] round-robin in front of them.
#[derive(Debug)]
pub struct Fleet {
    /// The load balancer.
    pub nginx: Nginx,
    /// The instances, in the order of nginx's upstream list.
    pub instances: Vec<Instance>,
    /// The Redis they may share (given to them through [`REDIS_URL`] in their arguments).
    pub redis: Redis,
}

impl Fleet {
    /// Starts Redis, `n` instances of `mcx serve demo --http 127.0.0.1:0 <extra_args>` (where
    /// [`REDIS_URL`] in an argument stands for [`Redis::url`]) and nginx in front of them;
    /// `None` when a binary is missing ([`skipped`]): all are looked for before anything starts.
    ///
    /// # Panics
    ///
    /// When one of them does not start.
    pub async fn start(n: usize, extra_args: &[&str]) -> Option<Fleet> {
        redis_server()?;
        nginx()?;
        mcx()?;
        let redis = Redis::start().await?;
        let args: Vec<String> = extra_args
            .iter()
            .map(|a| a.replace(REDIS_URL, &redis.url()))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut instances = Vec::with_capacity(n);
        for _ in 0..n {
            instances.push(Instance::start(&args).await?);
        }
        let upstreams: Vec<SocketAddr> = instances.iter().map(Instance::addr).collect();
        let nginx = Nginx::start(&upstreams).await?;
        Some(Fleet {
            nginx,
            instances,
            redis,
        })
    }

    /// The fleet's URL: nginx's.
    pub fn url(&self) -> String {
        self.nginx.url()
    }

    /// The instances' addresses, in order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.instances.iter().map(Instance::addr).collect()
    }

    /// Which instance has the address `upstream` (as nginx's access log writes it).
    pub fn index_of(&self, upstream: &str) -> Option<usize> {
        self.instances
            .iter()
            .position(|i| i.addr().to_string() == upstream)
    }

    /// Kills instance `i` with `SIGKILL`. nginx keeps it in its list: a connect to it is refused,
    /// and nginx moves the request to the next one.
    pub async fn kill9(&mut self, i: usize) {
        self.instances[i].kill9().await;
    }

    /// Starts instance `i` again on the port it had, so that nginx needs no reload (a reload
    /// closes the idle keep-alive connections of its old worker, which races with clients
    /// reusing them); on a new port, with nginx reloaded, when that port cannot be had now.
    /// Returns whether it got its port back.
    pub async fn restart_in_place(&mut self, i: usize) -> bool {
        if self.instances[i].restart_in_place().await {
            return true;
        }
        self.restart(i).await;
        false
    }

    /// Starts instance `i` again (on a new port) and reloads nginx with the new list.
    pub async fn restart(&mut self, i: usize) {
        self.instances[i].restart().await;
        let upstreams = self.addrs();
        self.nginx.reload(&upstreams).await;
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} via {}",
            self.method,
            self.mcp_method,
            self.status,
            self.upstreams.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both children say "Address already in use" when their port is taken, and the harness
    /// recognises it (to start them again on another port).
    #[tokio::test]
    async fn a_taken_port_is_recognised_in_what_redis_and_nginx_say() {
        let (Some(redis), Some(nginx)) = (redis_server(), nginx()) else {
            return;
        };
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let dir = TempDir::new("taken");
        assert!(matches!(
            spawn_redis(&redis, port, &dir.0).await,
            Err(Start::AddressInUse)
        ));
        let upstreams = ["127.0.0.1:1".parse().unwrap()];
        assert!(matches!(
            spawn_nginx(&nginx, &dir.0, port, &upstreams).await,
            Err(Start::AddressInUse)
        ));
        // A free port starts both.
        drop(taken);
        let mut child = spawn_redis(&redis, port, &dir.0)
            .await
            .ok()
            .expect("started");
        assert_eq!(
            resp_command(SocketAddr::from(([127, 0, 0, 1], port)), &["PING"])
                .await
                .unwrap(),
            RespValue::Simple("PONG".into())
        );
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }

    #[test]
    fn proc_stat_reads_this_process() {
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        let (state, ppid) = proc_stat(std::process::id()).expect("our own stat");
        assert_ne!(state, 'Z', "we are alive");
        assert!(ppid > 0);
        assert!(children(ppid).contains(&std::process::id()));
        assert!(accepts(std::process::id()), "not an nginx shutting down");
    }

    #[test]
    fn resp_replies_are_parsed_whole_or_not_at_all() {
        let reply = b"*4\r\n+OK\r\n:-7\r\n$5\r\nhe\r\no\r\n*2\r\n$-1\r\n-ERR no\r\n";
        let expected = RespValue::Array(vec![
            RespValue::Simple("OK".into()),
            RespValue::Integer(-7),
            RespValue::Bulk(b"he\r\no".to_vec()),
            RespValue::Array(vec![RespValue::Nil, RespValue::Error("ERR no".into())]),
        ]);
        assert_eq!(parse_reply(reply), Ok(Some((expected, reply.len()))));
        // Every prefix is incomplete, never wrong.
        for end in 0..reply.len() {
            assert_eq!(parse_reply(&reply[..end]), Ok(None), "{end}");
        }
        assert_eq!(parse_reply(b"*-1\r\n"), Ok(Some((RespValue::Nil, 5))));
        assert!(parse_reply(b"?x\r\n").is_err());
        assert_eq!(
            encode_command(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn the_url_line_of_mcx_is_parsed() {
        assert_eq!(
            parse_url_line("mcx demo server: http://127.0.0.1:4123/mcp (Ctrl-C to stop)"),
            Some("127.0.0.1:4123".parse().unwrap())
        );
        assert_eq!(parse_url_line("mcx: something else"), None);
    }

    #[test]
    fn the_access_log_names_every_upstream_tried() {
        let access = parse_access("200|127.0.0.1:1, 127.0.0.1:2|502, 200|tools/call|POST").unwrap();
        assert_eq!(access.upstreams, ["127.0.0.1:1", "127.0.0.1:2"]);
        assert_eq!(access.upstream(), Some("127.0.0.1:2"));
        assert_eq!((access.status, access.method.as_str()), (200, "POST"));
        assert_eq!(access.mcp_method, "tools/call");
        let none = parse_access("502|-|-|-|GET").unwrap();
        assert!(none.upstreams.is_empty());
    }

    #[test]
    fn the_config_lists_every_upstream_without_stickiness() {
        let addrs: Vec<SocketAddr> = vec![
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        ];
        let text = config(Path::new("/t"), 9, &addrs, 3);
        assert!(text.contains("server 127.0.0.1:1 max_fails=1"), "{text}");
        assert!(text.contains("server 127.0.0.1:2 max_fails=1"), "{text}");
        assert!(text.contains("listen 127.0.0.1:9;"), "{text}");
        assert!(text.contains("return 200 \"3\";"), "{text}");
        assert!(
            text.contains("proxy_next_upstream error timeout;"),
            "{text}"
        );
        for sticky in ["ip_hash", "hash ", "sticky", "non_idempotent"] {
            assert!(!text.contains(sticky), "{sticky} in {text}");
        }
    }
}
