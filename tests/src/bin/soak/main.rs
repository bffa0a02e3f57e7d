//! The soak and fault suite (`cargo xtask soak [--minutes N]`): the demo server over HTTP under
//! mixed load from clients of both eras while faults are injected; prints the figures and
//! fails on a duplicate, on a failed call of a load client, on a fault outcome that reveals a
//! defect, or on a server table that does not return to its start.
//!
//! ```text
//! soak [--seconds N | --minutes N] [--clients N] [--seed N]
//! soak --fleet [--seconds N | --minutes N] [--clients N] [--seed N]
//! soak --server
//! ```
//!
//! The load: 16 `modelctx-client` clients by default, half legacy (2025-11-25 sessions), half
//! modern (2026-07-28, stateless), calling every kind of tool, prompt and resource of the demo;
//! half of the legacy ones go through a proxy that cuts their event streams, which they must
//! resume (`proxy.rs`). The faults (`faults.rs`, `load.rs`): streams cut mid-call and resumed by
//! a raw client that checks every event id and progress value, slow readers, slowloris and
//! idle sockets up to a cap, garbage requests, client restarts, `initialize` floods.
//!
//! Two processes: this one drives the load and the faults; a child (`soak --server`, the same
//! binary) runs the demo server on 127.0.0.1:0, so that its RSS is its own, and reports its
//! tables on request over stdin/stdout (see `server.rs`). The server's settings are in one
//! place: `server::soak_server_config`.
//!
//! `--fleet` runs the failover soak instead (`fleet.rs`, 60 s and 12 clients by default): Redis,
//! three `mcx serve demo --http --redis` processes and nginx in front of them, clients of both
//! eras through nginx, instances killed (`kill -9`) and restarted on a seeded schedule.

use std::net::SocketAddr;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::task::JoinSet;

/// The demo server of `mcx serve demo`, compiled from the cli crate's own source (the cli is a
/// binary crate: it has no library to depend on).
#[path = "../../../../crates/cli/src/demo.rs"]
mod demo;
mod faults;
mod figures;
mod fleet;
mod load;
mod proxy;
mod raw;
mod server;

use figures::{Figures, RunInfo, ServerStats};

const USAGE: &str = "usage: soak [--seconds N | --minutes N] [--clients N] [--seed N]
       soak --fleet [--seconds N | --minutes N] [--clients N] [--seed N]
       soak --server";

/// What every load client and injector shares.
pub(crate) struct Ctx {
    pub(crate) addr: SocketAddr,
    pub(crate) url: String,
    /// The URL of the server through the cutting proxy.
    pub(crate) proxy_url: String,
    pub(crate) figures: Figures,
    pub(crate) proxy: proxy::ProxyCounts,
    /// When the load and the faults stop.
    pub(crate) deadline: Instant,
}

/// A small deterministic generator (xorshift64*): a run is repeatable from its seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

struct Options {
    seconds: u64,
    clients: usize,
    seed: u64,
    /// The failover soak (`--fleet`).
    fleet: bool,
}

/// The defaults of the failover soak (`--fleet`): short, as CI runs it.
const FLEET_SECONDS: u64 = 60;
const FLEET_CLIENTS: u64 = 12;

fn parse(args: &[String]) -> Result<Options, String> {
    let mut seconds = None;
    let mut clients = None;
    let mut options = Options {
        seconds: 120,
        clients: 16,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        fleet: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--fleet" {
            options.fleet = true;
            continue;
        }
        let mut value = |what: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{arg} needs a number ({what})"))
        };
        match arg.as_str() {
            "--seconds" => seconds = Some(value("seconds of load")?),
            "--minutes" => seconds = Some(value("minutes of load")?.saturating_mul(60)),
            "--clients" => clients = Some(value("load clients")?),
            "--seed" => options.seed = value("a seed")?,
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    let (default_seconds, default_clients) = if options.fleet {
        (FLEET_SECONDS, FLEET_CLIENTS)
    } else {
        (120, 16)
    };
    options.seconds = seconds.unwrap_or(default_seconds);
    options.clients = clients.unwrap_or(default_clients) as usize;
    if options.seconds == 0 || options.clients == 0 {
        return Err(format!(
            "--seconds and --clients must be at least 1\n{USAGE}"
        ));
    }
    if options.clients > 256 {
        return Err("--clients: at most 256".into());
    }
    Ok(options)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--server") {
        return server::main();
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match parse(&args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("soak: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = if options.fleet {
        runtime.block_on(fleet::run(options))
    } else {
        runtime.block_on(run(options))
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The server process and its command channel.
struct ServerProcess {
    child: tokio::process::Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl ServerProcess {
    async fn start() -> Result<(ServerProcess, SocketAddr), String> {
        let exe = std::env::current_exe().map_err(|e| format!("where am I: {e}"))?;
        let mut child = tokio::process::Command::new(exe)
            .arg("--server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting the server process: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut process = ServerProcess {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
        };
        let line = process.line().await?;
        let addr = line
            .strip_prefix("listening ")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("the server process said {line:?}, not `listening <addr>`"))?;
        Ok((process, addr))
    }

    async fn line(&mut self) -> Result<String, String> {
        tokio::time::timeout(Duration::from_secs(30), self.stdout.next_line())
            .await
            .map_err(|_| "the server process did not answer within 30 s".to_owned())?
            .map_err(|e| format!("reading the server process: {e}"))?
            .ok_or_else(|| "the server process ended".to_owned())
    }

    async fn stats(&mut self) -> Result<ServerStats, String> {
        self.stdin
            .write_all(b"stats\n")
            .await
            .map_err(|e| format!("asking the server process: {e}"))?;
        let line = self.line().await?;
        serde_json::from_str(&line).map_err(|e| format!("the server's stats {line:?}: {e}"))
    }

    async fn stop(mut self) -> Result<(), String> {
        let _ = self.stdin.write_all(b"quit\n").await;
        drop(self.stdin);
        match tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(format!("the server process exited with {status}")),
            Ok(Err(e)) => Err(format!("waiting for the server process: {e}")),
            Err(_) => {
                let _ = self.child.kill().await;
                Err("the server process did not stop within 15 s of `quit`".into())
            }
        }
    }
}

/// How long the tables get to return to their start after the load: the session idle timeout
/// and the server's sweep interval (both [`server::SESSION_IDLE`]) with room to spare.
const SETTLE_LIMIT: Duration = Duration::from_secs(45);
/// How long the clients and injectors get to finish after the deadline.
const WIND_DOWN: Duration = Duration::from_secs(60);

async fn run(options: Options) -> Result<bool, String> {
    let (mut server, addr) = ServerProcess::start().await?;
    let start = server.stats().await?;
    let modern_clients = options.clients / 2;
    let legacy_clients = options.clients - modern_clients;
    eprintln!(
        "soak: the demo server on {addr}; {} s of load from {legacy_clients} legacy and \
         {modern_clients} modern clients, with faults (seed {})",
        options.seconds, options.seed
    );
    let proxy_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("the proxy's listener: {e}"))?;
    let proxy_addr = proxy_listener
        .local_addr()
        .map_err(|e| format!("the proxy's address: {e}"))?;
    let ctx = Arc::new(Ctx {
        addr,
        url: format!("http://{addr}/mcp"),
        proxy_url: format!("http://{proxy_addr}/mcp"),
        figures: Figures::default(),
        proxy: proxy::ProxyCounts::default(),
        deadline: Instant::now() + Duration::from_secs(options.seconds),
    });
    let mut seeds = Rng::new(options.seed);
    let proxy = tokio::spawn(proxy::run(proxy_listener, ctx.clone(), seeds.next()));
    let mut tasks = JoinSet::new();
    for i in 0..options.clients {
        // Odd clients are modern; every other legacy one goes through the cutting proxy.
        let via = if i % 2 == 1 {
            load::Via::Modern
        } else if i % 4 == 0 {
            load::Via::LegacyThroughProxy
        } else {
            load::Via::Legacy
        };
        tasks.spawn(load::client(ctx.clone(), via, seeds.next()));
    }
    tasks.spawn(load::restarts(ctx.clone(), seeds.next()));
    tasks.spawn(faults::cut_and_resume(ctx.clone(), seeds.next()));
    tasks.spawn(faults::cut_and_resume(ctx.clone(), seeds.next()));
    tasks.spawn(faults::cut_modern(ctx.clone(), seeds.next()));
    for _ in 0..3 {
        tasks.spawn(faults::slow_readers(ctx.clone(), seeds.next()));
    }
    tasks.spawn(faults::sockets(ctx.clone(), seeds.next()));
    tasks.spawn(faults::garbage(ctx.clone(), seeds.next()));
    tasks.spawn(faults::floods(ctx.clone()));

    // A line every 10 s while the load runs.
    let began = Instant::now();
    let mut rss_samples = Vec::new();
    while Instant::now() < ctx.deadline {
        let left = ctx.deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(left.min(Duration::from_secs(10))).await;
        let counts = ctx.figures.snapshot();
        let stats = server.stats().await?;
        rss_samples.push(stats.rss_kib);
        eprintln!(
            "soak: {:>4.0} s: {} calls ({} failed), {} faults; server: {} sessions, {} streams, \
             {} requests, {} sockets, {} tasks, RSS {} KiB",
            began.elapsed().as_secs_f64(),
            counts.calls_made(),
            counts.calls_failed(),
            counts.faults.values().sum::<u64>(),
            stats.sessions,
            stats.streams,
            stats.requests,
            stats.sockets,
            stats.tasks,
            stats.rss_kib,
        );
    }
    let wound_down = tokio::time::timeout(WIND_DOWN, async {
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done {
                ctx.figures.anomaly("soak task", &format!("panicked: {e}"));
            }
        }
    })
    .await;
    if wound_down.is_err() {
        ctx.figures.anomaly(
            "soak task",
            &format!(
                "still running {} s after the deadline (a hang)",
                WIND_DOWN.as_secs()
            ),
        );
        tasks.abort_all();
    }
    proxy.abort();
    let _ = proxy.await;
    ctx.figures.client_resumptions(
        ctx.proxy
            .resumptions
            .load(std::sync::atomic::Ordering::Relaxed),
    );

    // The server's sweep and timeouts reclaim what the faults left; then the tables must be
    // back where they started.
    let settling = Instant::now();
    let end = loop {
        let stats = server.stats().await?;
        if stats.differences(&start).is_empty() || settling.elapsed() >= SETTLE_LIMIT {
            break stats;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let settle_secs = settling.elapsed().as_secs_f64();
    server.stop().await?;

    let counts = ctx.figures.snapshot();
    let run = RunInfo {
        seconds: options.seconds,
        legacy_clients,
        modern_clients,
        seed: options.seed,
        settle_secs,
        rss_samples,
    };
    println!("{}", figures::report(&run, &counts, &start, &end));
    let why = figures::verdict(&counts, &start, &end);
    if why.is_empty() {
        println!("soak: passed");
        Ok(true)
    } else {
        for reason in &why {
            println!("soak: FAILED: {reason}");
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_parsed_and_bad_ones_refused() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let options = parse(&args("--minutes 2 --clients 4 --seed 9")).unwrap();
        assert_eq!(
            (options.seconds, options.clients, options.seed),
            (120, 4, 9)
        );
        assert_eq!(parse(&args("--seconds 90")).unwrap().seconds, 90);
        assert!(!options.fleet);
        let fleet = parse(&args("--fleet")).unwrap();
        assert!(fleet.fleet);
        assert_eq!((fleet.seconds, fleet.clients), (60, 12));
        let fleet = parse(&args("--seconds 30 --fleet --clients 4")).unwrap();
        assert_eq!((fleet.fleet, fleet.seconds, fleet.clients), (true, 30, 4));
        assert_eq!(parse(&args("")).unwrap().seconds, 120);
        assert!(parse(&args("--seconds")).is_err());
        assert!(parse(&args("--seconds 0")).is_err());
        assert!(parse(&args("--bogus")).is_err());
        let mut rng = Rng::new(0);
        assert!((0..100).all(|_| rng.below(7) < 7));
        assert_eq!(rng.below(0), 0);
    }
}
