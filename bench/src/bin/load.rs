//! The one load generator: drives any echo server over stdio or Streamable HTTP and prints one
//! JSON line: calls/s, p50/p99 latency (from per-call timings), the server's CPU time per call
//! (utime+stime from /proc/<pid>/stat around the measured window), its peak RSS (VmHWM) and its
//! anonymous (private) RSS at the end of the window (RssAnon: the peak RSS also counts the pages
//! of the server's binary and libraries that it ran). A server that starts processes of its own
//! (`mc_fleet`: Redis, nginx, instances) is measured with all of them: CPU time, peak RSS and
//! anonymous RSS are summed over the server's process tree.
//!
//! ```text
//! load stdio-seq  [--secs S] [--warmup S] [--modern] -- <server command...>
//! load stdio-pipe [--secs S] [--warmup S] [--modern] [--inflight N] -- <server command...>
//! load http       [--secs S] [--warmup S] [--modern] [--clients N] -- <server command...>
//! load sessions   [--count N] -- <HTTP server command...>
//! load churn      [--count N] [--clients N] -- <HTTP server command...>
//! load cold       [--runs N] -- <stdio server command...>
//! ```
//!
//! `sessions` opens N legacy sessions (initialize, then `notifications/initialized`, then the
//! connection closes: each session idle, with no connection and no stream) and prints the
//! server's RSS before and after, and the difference per session. `churn` opens and ends (DELETE)
//! N sessions over `--clients` connections and prints the RSS before and after. `cold` spawns
//! the server N times and times each from the spawn to the result of its first `tools/call`
//! (after the handshake), printing the median and the slowest.
//!
//! Legacy (the default) does the initialize handshake first (per HTTP client: one session
//! each); `--modern` sends 2026-07-28 requests with `_meta` (and the standard headers over
//! HTTP), with no handshake. An HTTP server must print `LISTENING <port>` on stdout.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

const TEXT: &str = "hello benchmark!";
const LEGACY_VERSION: &str = "2025-11-25";
const MODERN_VERSION: &str = "2026-07-28";
/// Slots of the send-time ring of the pipelined workload (more than any in-flight count).
const RING: usize = 4096;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Options {
    workload: String,
    secs: f64,
    warmup: f64,
    modern: bool,
    inflight: usize,
    clients: usize,
    count: usize,
    runs: usize,
    command: Vec<String>,
}

fn parse_args() -> Result<Options, Error> {
    let mut args = std::env::args().skip(1);
    let workload = args
        .next()
        .ok_or("usage: load <stdio-seq|stdio-pipe|http> [options] -- <server...>")?;
    let mut options = Options {
        workload,
        secs: 3.0,
        warmup: 0.5,
        modern: false,
        inflight: 64,
        clients: 1,
        count: 1000,
        runs: 5,
        command: Vec::new(),
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--secs" => options.secs = value()?.parse()?,
            "--warmup" => options.warmup = value()?.parse()?,
            "--inflight" => options.inflight = value()?.parse()?,
            "--clients" => options.clients = value()?.parse()?,
            "--count" => options.count = value()?.parse()?,
            "--runs" => options.runs = value()?.parse()?,
            "--modern" => options.modern = true,
            "--" => {
                options.command = args.by_ref().collect();
                break;
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if options.command.is_empty() {
        return Err("no server command after --".into());
    }
    Ok(options)
}

/// What one measured window gave.
#[derive(Default)]
struct Window {
    latencies_ns: Vec<u64>,
    errors: u64,
    secs: f64,
}

fn server(options: &Options) -> Command {
    let mut command = Command::new(&options.command[0]);
    command
        .args(&options.command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command
}

fn main() -> Result<(), Error> {
    let options = parse_args()?;
    if options.workload == "cold" {
        return cold(&options);
    }
    let mut child = server(&options).spawn()?;
    let pid = child.id();
    if matches!(options.workload.as_str(), "sessions" | "churn") {
        let result = run_memory(&options, &mut child, pid);
        stop(&mut child);
        println!("{}", result?);
        return Ok(());
    }
    let result = match options.workload.as_str() {
        "stdio-seq" | "stdio-pipe" => run_stdio(&options, &mut child, pid),
        "http" => run_http(&options, &mut child, pid),
        other => Err(format!("unknown workload {other}").into()),
    };
    let family = tree(pid);
    let peak_rss_kib = family.iter().filter_map(|&p| peak_rss_kib(p)).sum::<u64>();
    let anon_rss_kib = family
        .iter()
        .filter_map(|&p| status_kib(p, "RssAnon:"))
        .sum::<u64>();
    stop(&mut child);
    let (window, cpu_ticks) = result?;
    let calls = window.latencies_ns.len() as u64;
    let mut latencies = window.latencies_ns;
    latencies.sort_unstable();
    let quantile = |q: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let index = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[index] as f64 / 1000.0
    };
    let cpu_us = cpu_ticks as f64 * 1e6 / ticks_per_second();
    let line = serde_json::json!({
        "calls": calls,
        "errors": window.errors,
        "secs": window.secs,
        "calls_per_s": calls as f64 / window.secs,
        "p50_us": quantile(0.50),
        "p99_us": quantile(0.99),
        "cpu_us_per_call": if calls == 0 { 0.0 } else { cpu_us / calls as f64 },
        "peak_rss_kib": peak_rss_kib,
        "anon_rss_kib": anon_rss_kib,
    });
    println!("{line}");
    if window.errors > 0 {
        return Err(format!("{} calls failed", window.errors).into());
    }
    Ok(())
}

/// Closes the child's stdin, gives it a moment, then kills it; always reaps it.
fn stop(child: &mut Child) {
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// utime + stime of a process and of every process under it, in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64, Error> {
    let mut ticks = process_cpu_ticks(pid)?;
    for child in tree(pid).into_iter().skip(1) {
        // One that has just exited counts no more.
        ticks += process_cpu_ticks(child).unwrap_or(0);
    }
    Ok(ticks)
}

/// `pid` and every live process under it (its children, theirs, ...), `pid` first.
fn tree(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| Some((p, parent(p)?)))
        .collect();
    let mut family = vec![pid];
    let mut at = 0;
    while at < family.len() {
        let of = family[at];
        family.extend(parents.iter().filter(|(_, pp)| *pp == of).map(|(p, _)| *p));
        at += 1;
    }
    family
}

/// The parent of a process (field 4 of /proc/<pid>/stat).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// utime + stime of one process, in clock ticks.
fn process_cpu_ticks(pid: u32) -> Result<u64, Error> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_name = stat.rsplit_once(')').ok_or("malformed /proc/<pid>/stat")?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `fields[0]` is field 3 (state).
    let utime: u64 = fields.get(11).ok_or("no utime")?.parse()?;
    let stime: u64 = fields.get(12).ok_or("no stime")?.parse()?;
    Ok(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`); 100 on every Linux this runs on.
fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// VmHWM of a process, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

/// VmRSS of a process, in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn modern_meta() -> &'static str {
    r#","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"load","version":"0"}}"#
}

/// A `tools/call` of `echo`, as one line of compact JSON (no newline).
fn call(id: u64, modern: bool) -> String {
    let meta = if modern { modern_meta() } else { "" };
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{TEXT}"}}{meta}}}}}"#
    )
}

fn initialize(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"{LEGACY_VERSION}","capabilities":{{}},"clientInfo":{{"name":"load","version":"0"}}}}}}"#
    )
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// The id of a response and whether it is a successful one.
fn response_id(line: &[u8]) -> Result<(u64, bool), Error> {
    #[derive(serde::Deserialize)]
    struct Response {
        id: u64,
        #[serde(default)]
        result: Option<serde::de::IgnoredAny>,
    }
    let response: Response = serde_json::from_slice(line)
        .map_err(|e| format!("not a response ({e}): {}", String::from_utf8_lossy(line)))?;
    Ok((response.id, response.result.is_some()))
}

// ---- stdio ----

fn run_stdio(options: &Options, child: &mut Child, pid: u32) -> Result<(Window, u64), Error> {
    let mut input = BufWriter::with_capacity(64 * 1024, child.stdin.take().ok_or("no stdin")?);
    let mut output = BufReader::with_capacity(64 * 1024, child.stdout.take().ok_or("no stdout")?);
    let mut line = Vec::new();
    if !options.modern {
        writeln!(input, "{}", initialize(0))?;
        input.flush()?;
        read_line(&mut output, &mut line)?;
        writeln!(input, "{INITIALIZED}")?;
        input.flush()?;
    }
    let pipelined = options.workload == "stdio-pipe";
    let mut next_id = 1;
    let mut phase = |secs: f64, input: BufWriter<ChildStdin>, output: BufReader<ChildStdout>| {
        if pipelined {
            stdio_pipelined(options, secs, &mut next_id, input, output)
        } else {
            stdio_sequential(options, secs, &mut next_id, input, output)
        }
    };
    let (_, input, output) = phase(options.warmup, input, output)?;
    let before = cpu_ticks(pid)?;
    let (window, input, _output) = phase(options.secs, input, output)?;
    let after = cpu_ticks(pid)?;
    drop(input);
    Ok((window, after - before))
}

fn read_line(output: &mut impl BufRead, line: &mut Vec<u8>) -> Result<(), Error> {
    line.clear();
    if output.read_until(b'\n', line)? == 0 {
        return Err("the server closed its stdout".into());
    }
    Ok(())
}

type Pipes = (Window, BufWriter<ChildStdin>, BufReader<ChildStdout>);

fn stdio_sequential(
    options: &Options,
    secs: f64,
    next_id: &mut u64,
    mut input: BufWriter<ChildStdin>,
    mut output: BufReader<ChildStdout>,
) -> Result<Pipes, Error> {
    let mut window = Window::default();
    let mut line = Vec::new();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(secs);
    loop {
        let request = call(*next_id, options.modern);
        let sent = Instant::now();
        if sent >= deadline {
            break;
        }
        input.write_all(request.as_bytes())?;
        input.write_all(b"\n")?;
        input.flush()?;
        loop {
            read_line(&mut output, &mut line)?;
            let (id, ok) = response_id(&line)?;
            if id == *next_id {
                window.errors += u64::from(!ok);
                break;
            }
        }
        window.latencies_ns.push(sent.elapsed().as_nanos() as u64);
        *next_id += 1;
    }
    window.secs = started.elapsed().as_secs_f64();
    Ok((window, input, output))
}

fn stdio_pipelined(
    options: &Options,
    secs: f64,
    next_id: &mut u64,
    input: BufWriter<ChildStdin>,
    mut output: BufReader<ChildStdout>,
) -> Result<Pipes, Error> {
    let base = Instant::now();
    let deadline = base + Duration::from_secs_f64(secs);
    let sent_at: Arc<Vec<AtomicU64>> = Arc::new((0..RING).map(|_| AtomicU64::new(0)).collect());
    // The number of requests the writer sends in all, known once it has passed the deadline.
    let total = Arc::new(AtomicU64::new(u64::MAX));
    // A slot per request in flight: the writer takes one before each request, the reader gives
    // one back per response.
    let (slots, freed) = std::sync::mpsc::sync_channel::<()>(options.inflight);
    let first = *next_id;
    let writer = {
        let sent_at = sent_at.clone();
        let total = total.clone();
        let modern = options.modern;
        std::thread::spawn(move || -> Result<BufWriter<ChildStdin>, Error> {
            let mut input = input;
            let mut id = first;
            loop {
                let last = Instant::now() >= deadline;
                if last {
                    // Stored before the last request is sent: the reader sees it by the time
                    // that request's response arrives.
                    total.store(id - first + 1, Ordering::SeqCst);
                }
                if let Err(std::sync::mpsc::TrySendError::Full(())) = slots.try_send(()) {
                    input.flush()?;
                    slots.send(()).map_err(|_| "the reader stopped")?;
                }
                let request = call(id, modern);
                sent_at[id as usize % RING]
                    .store(base.elapsed().as_nanos() as u64, Ordering::SeqCst);
                input.write_all(request.as_bytes())?;
                input.write_all(b"\n")?;
                id += 1;
                if last {
                    input.flush()?;
                    return Ok(input);
                }
            }
        })
    };
    let mut window = Window::default();
    let mut line = Vec::new();
    let mut received = 0u64;
    let result = loop {
        if received == total.load(Ordering::SeqCst) {
            break Ok(());
        }
        if let Err(e) = read_line(&mut output, &mut line) {
            break Err(e);
        }
        let (id, ok) = match response_id(&line) {
            Ok(r) => r,
            Err(e) => break Err(e),
        };
        if id < first {
            continue; // a late answer to the warm-up
        }
        let now = base.elapsed().as_nanos() as u64;
        let sent = sent_at[id as usize % RING].load(Ordering::SeqCst);
        window.latencies_ns.push(now.saturating_sub(sent));
        window.errors += u64::from(!ok);
        received += 1;
        let _ = freed.recv();
    };
    drop(freed);
    let input = writer.join().map_err(|_| "the writer panicked")??;
    result?;
    window.secs = base.elapsed().as_secs_f64();
    *next_id = first + received;
    Ok((window, input, output))
}

// ---- HTTP ----

/// The port an HTTP server announces (`LISTENING <port>` on its stdout).
fn listening_port(child: &mut Child) -> Result<u16, Error> {
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    // Lines before it are skipped (a wrapper such as heaptrack prints its own).
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line)? == 0 {
            return Err("the server closed its stdout before `LISTENING <port>`".into());
        }
        if let Some(port) = line.strip_prefix("LISTENING ") {
            return Ok(port.trim().parse()?);
        }
    }
}

/// M1 (`sessions`) and M2 (`churn`): the server's RSS around opening (and ending) sessions.
fn run_memory(options: &Options, child: &mut Child, pid: u32) -> Result<serde_json::Value, Error> {
    let port = listening_port(child)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let settle = || std::thread::sleep(Duration::from_millis(300));
    runtime.block_on(async {
        // Warm-up: a few sessions opened, called and ended, so that what the first session
        // costs once (lazy statics, pools, the allocator's arenas) is in `before`.
        let mut warm = HttpClient::connect(port, false).await?;
        for _ in 0..16 {
            warm.call().await?;
            warm.delete().await?;
            warm.open_session().await?;
        }
        warm.delete().await?;
        drop(warm);
        settle();
        let before = rss_kib(pid).ok_or("no VmRSS")?;
        if options.workload == "sessions" {
            for _ in 0..options.count {
                // A connection per session, closed once the session is initialized.
                HttpClient::connect(port, false).await?;
            }
            settle();
            let after = rss_kib(pid).ok_or("no VmRSS")?;
            let per_session = (after as f64 - before as f64) * 1024.0 / options.count as f64;
            return Ok(serde_json::json!({
                "sessions": options.count,
                "server_fds": std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count),
                "rss_before_kib": before,
                "rss_after_kib": after,
                "bytes_per_session": per_session,
            }));
        }
        let clients = options.clients.max(1);
        let mut tasks = Vec::new();
        for c in 0..clients {
            let count = options.count / clients + usize::from(c < options.count % clients);
            tasks.push(tokio::spawn(async move {
                let mut client = HttpClient::bare(port, false).await?;
                for _ in 0..count {
                    client.open_session().await?;
                    client.delete().await?;
                }
                Ok::<_, Error>(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        settle();
        let after = rss_kib(pid).ok_or("no VmRSS")?;
        Ok(serde_json::json!({
            "sessions": options.count,
            "rss_before_kib": before,
            "rss_after_kib": after,
            "peak_rss_kib": peak_rss_kib(pid).unwrap_or(0),
        }))
    })
}

/// C1: from spawning the server to the result of its first `tools/call` (after the legacy
/// handshake), `--runs` times.
fn cold(options: &Options) -> Result<(), Error> {
    let mut times_us = Vec::new();
    for _ in 0..options.runs {
        let started = Instant::now();
        let mut child = server(options).spawn()?;
        let result = (|| -> Result<(), Error> {
            let mut input = child.stdin.take().ok_or("no stdin")?;
            let mut output = BufReader::new(child.stdout.take().ok_or("no stdout")?);
            let mut line = Vec::new();
            writeln!(input, "{}", initialize(0))?;
            input.flush()?;
            read_line(&mut output, &mut line)?;
            writeln!(input, "{INITIALIZED}")?;
            writeln!(input, "{}", call(1, false))?;
            input.flush()?;
            loop {
                read_line(&mut output, &mut line)?;
                let (id, ok) = response_id(&line)?;
                if id == 1 {
                    return if ok {
                        Ok(())
                    } else {
                        Err("the call failed".into())
                    };
                }
            }
        })();
        let elapsed = started.elapsed();
        let _ = child.kill();
        let _ = child.wait();
        result?;
        times_us.push(elapsed.as_secs_f64() * 1e6);
    }
    times_us.sort_by(f64::total_cmp);
    println!(
        "{}",
        serde_json::json!({
            "runs": times_us.len(),
            "median_us": times_us.get(times_us.len() / 2).copied().unwrap_or(0.0),
            "max_us": times_us.last().copied().unwrap_or(0.0),
            "times_us": times_us,
        })
    );
    Ok(())
}

fn run_http(options: &Options, child: &mut Child, pid: u32) -> Result<(Window, u64), Error> {
    let port = listening_port(child)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..options.clients {
            clients.push(HttpClient::connect(port, options.modern).await?);
        }
        let warmup = Duration::from_secs_f64(options.warmup);
        let (clients, _) = http_phase(clients, warmup).await?;
        let before = cpu_ticks(pid)?;
        let (_, window) = http_phase(clients, Duration::from_secs_f64(options.secs)).await?;
        let after = cpu_ticks(pid)?;
        Ok((window, after - before))
    })
}

async fn http_phase(
    clients: Vec<HttpClient>,
    length: Duration,
) -> Result<(Vec<HttpClient>, Window), Error> {
    let started = Instant::now();
    let deadline = started + length;
    let mut tasks = Vec::new();
    for mut client in clients {
        tasks.push(tokio::spawn(async move {
            let mut window = Window::default();
            while Instant::now() < deadline {
                let sent = Instant::now();
                let ok = client.call().await?;
                window.latencies_ns.push(sent.elapsed().as_nanos() as u64);
                window.errors += u64::from(!ok);
            }
            Ok::<_, Error>((client, window))
        }));
    }
    let mut clients = Vec::new();
    let mut all = Window::default();
    for task in tasks {
        let (client, window) = task.await??;
        clients.push(client);
        all.latencies_ns.extend(window.latencies_ns);
        all.errors += window.errors;
    }
    all.secs = started.elapsed().as_secs_f64();
    Ok((clients, all))
}

/// One HTTP/1.1 connection (TCP_NODELAY) and, for legacy, one session.
struct HttpClient {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    port: u16,
    modern: bool,
    session: Option<String>,
    next_id: u64,
}

impl HttpClient {
    /// A connection, and for legacy a session on it.
    async fn connect(port: u16, modern: bool) -> Result<Self, Error> {
        let mut client = Self::bare(port, modern).await?;
        if !modern {
            client.open_session().await?;
        }
        Ok(client)
    }

    /// A connection with no session.
    async fn bare(port: u16, modern: bool) -> Result<Self, Error> {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(HttpClient {
            sender,
            port,
            modern,
            session: None,
            next_id: 1,
        })
    }

    /// The legacy handshake: a new session.
    async fn open_session(&mut self) -> Result<(), Error> {
        self.session = None;
        let (status, session, _) = self.post(initialize(0), None).await?;
        if status != 200 {
            return Err(format!("initialize: HTTP {status}").into());
        }
        // The bare hyper limit has no sessions (and sends no id).
        self.session = session;
        let (status, _, _) = self.post(INITIALIZED.to_owned(), None).await?;
        if status != 202 && status != 200 {
            return Err(format!("notifications/initialized: HTTP {status}").into());
        }
        Ok(())
    }

    /// Ends the session (DELETE).
    async fn delete(&mut self) -> Result<(), Error> {
        let session = self.session.take().ok_or("no session to end")?;
        let request = hyper::Request::delete("/mcp")
            .header("host", format!("127.0.0.1:{}", self.port))
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", LEGACY_VERSION)
            .body(Full::new(Bytes::new()))?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status().as_u16();
        response.into_body().collect().await?;
        if !(200..300).contains(&status) {
            return Err(format!("DELETE: HTTP {status}").into());
        }
        Ok(())
    }

    /// One `tools/call`; true if it got a result.
    async fn call(&mut self) -> Result<bool, Error> {
        let id = self.next_id;
        self.next_id += 1;
        let (status, _, body) = self.post(call(id, self.modern), Some("echo")).await?;
        Ok(status == 200 && memchr_result(&body))
    }

    async fn post(
        &mut self,
        body: String,
        tool: Option<&str>,
    ) -> Result<(u16, Option<String>, Bytes), Error> {
        let mut request = hyper::Request::post("/mcp")
            .header("host", format!("127.0.0.1:{}", self.port))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if self.modern {
            request = request
                .header("mcp-protocol-version", MODERN_VERSION)
                .header("mcp-method", "tools/call");
            if let Some(tool) = tool {
                request = request.header("mcp-name", tool);
            }
        } else if let Some(session) = &self.session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", LEGACY_VERSION);
        }
        let request = request.body(Full::new(Bytes::from(body)))?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status().as_u16();
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, session, body))
    }
}

/// Whether a JSON or SSE body carries a result (not an error).
fn memchr_result(body: &[u8]) -> bool {
    body.windows(9).any(|w| w == b"\"result\":")
}
