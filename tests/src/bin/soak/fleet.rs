//! `soak --fleet`: the failover soak. A real `redis-server`, three `mcx serve demo --http --redis`
//! processes and `nginx` round-robin in front of them (the harness of `modelctx_tests::fleet`),
//! under load from clients of both eras through nginx, while instances are killed (`SIGKILL`)
//! and started again on a seeded schedule.
//!
//! The load, all through nginx:
//! - `modelctx-client` clients, half legacy (2025-11-25 sessions: the session's standalone GET
//!   stream open, calls answered on SSE streams the client resumes with `Last-Event-ID`), half
//!   modern (2026-07-28: calls, and a `subscriptions/listen` stream), each calling every kind of
//!   tool, prompt and resource of the demo, and each counting the `tools/list_changed`
//!   notifications it hears;
//! - a raw legacy client that cuts its own call streams and resumes them on whichever instance
//!   nginx picks, checking every event id and progress value (the events replayed);
//! - a modern client calling `unlock` every two seconds (a list change on one instance, which
//!   every listener, on any instance, must hear).
//!
//! The rules (any broken one fails the run):
//! - only a call in flight when an instance was killed may fail, and it fails with an error: a
//!   call that fails while no kill happened is a failure, and so is one that takes longer than
//!   [`HUNG`] (a call left hanging) even when a kill happened;
//! - no duplicate: no event id or progress value arrives twice for one request;
//! - a call resumed on another instance gets every event it missed and its answer, or (when the
//!   instance running it died) the error for a stopped instance;
//! - every listener hears list changes, and every change made away from the kills: each
//!   `unlock` that began at least [`RESUME_GRACE`] after the last kill, with no kill before the
//!   next `unlock` began, must be heard by every listener (a legacy client on its session's GET
//!   stream, resumed on another instance when the instance holding it was killed; a modern one
//!   on its `subscriptions/listen` stream) before the next `unlock` begins;
//! - once every session has ended (closed with DELETE) and the leases of the killed instances
//!   have run out, Redis holds the keys it held at the start (the instance counter and the live
//!   instances' leases), within [`SETTLE_LIMIT`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use modelctx_client::ServerNotification;
use modelctx_tests::fleet::{Fleet, REDIS_URL, Redis, RespValue};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::figures::{Figures, Seen};
use crate::raw::{self, LEGACY};
use crate::{Ctx, Options, Rng, load};

/// The instances of the fleet.
const INSTANCES: usize = 3;
/// The `requestState` key ring every instance is given (`--redis` needs one): id `soak`, bytes
/// 0 to 31.
const SHARED_KEY: &str = "soak:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
/// A call that takes this long has hung: the client's own request timeout
/// (`load::CALL_TIMEOUT`) is reached. A call on a killed instance is failed well before: the
/// instance's lease runs out 15 s after its death, and the instance that a resumed stream lands
/// on then answers with the stopped instance's error.
const HUNG: Duration = Duration::from_secs(30);
/// The outer bound of one call (the client's timeout fires first).
const OUTER: Duration = Duration::from_secs(40);
/// How long the clients get to finish after the deadline.
const WIND_DOWN: Duration = Duration::from_secs(60);
/// How long Redis gets to return to its start after the load: the leases of killed instances run
/// out 15 s after their death.
const SETTLE_LIMIT: Duration = Duration::from_secs(40);
/// The first kill, and the spacing of kills (plus up to `KILL_JITTER`).
const FIRST_KILL: Duration = Duration::from_secs(8);
const KILL_EVERY: Duration = Duration::from_secs(12);
const KILL_JITTER_MS: u64 = 6000;
/// How long no kill happens before the deadline (the last ones must be seen through).
const QUIET_END: Duration = Duration::from_secs(8);
/// How many of a client's last messages are kept, to be shown when one of its calls hangs.
const WIRE_LINES: usize = 60;
/// How often `unlock` changes the tool list.
const CHANGE_EVERY: Duration = Duration::from_secs(2);
/// How long after a kill a listener's stream is taken to be resumed: the client waits the
/// server's `retry` (1 s), then its GET (or its listen request) lands on a live instance. A
/// change made from then on must be heard.
const RESUME_GRACE: Duration = Duration::from_secs(5);

/// What one load client heard of the list changes.
#[derive(Default)]
struct Listener {
    /// A modern client (else legacy).
    modern: bool,
    /// When it was connected (its session's GET stream, or its listen stream, opening).
    connected: Mutex<Option<Instant>>,
    /// When it heard each `tools/list_changed`.
    heard: Mutex<Vec<Instant>>,
}

impl Listener {
    fn new(modern: bool) -> Listener {
        Listener {
            modern,
            ..Listener::default()
        }
    }

    fn seen(&self) -> Heard {
        Heard {
            modern: self.modern,
            connected: *self
                .connected
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            heard: self
                .heard
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

/// What a listener heard, once the run is over.
#[derive(Debug, Clone, Default)]
struct Heard {
    modern: bool,
    connected: Option<Instant>,
    heard: Vec<Instant>,
}

/// The changes checked away from the kills: each `unlock` (its start) that began at least
/// [`RESUME_GRACE`] after the last kill signal, and before which the next `unlock` began with no
/// kill meanwhile; the last `unlock` is not checked (nothing bounds when it may be heard). A
/// listener misses a checked change when it heard no `tools/list_changed` from its start to the
/// next `unlock`'s start; a listener connected less than [`RESUME_GRACE`] before it is not
/// asked. Returns how many changes were checked, and what each listener missed.
fn missed(
    unlocks: &[(Instant, Instant)],
    kills: &[Instant],
    listeners: &[Heard],
) -> (usize, Vec<u64>) {
    let mut starts: Vec<Instant> = unlocks.iter().map(|(start, _)| *start).collect();
    starts.sort_unstable();
    let mut checked = 0;
    let mut missed = vec![0; listeners.len()];
    for pair in starts.windows(2) {
        let (start, next) = (pair[0], pair[1]);
        let near_kill = kills
            .iter()
            .any(|&kill| kill <= next && start.saturating_duration_since(kill) < RESUME_GRACE);
        if near_kill {
            continue;
        }
        checked += 1;
        for (listener, missed) in listeners.iter().zip(&mut missed) {
            let asked = listener.connected.is_some_and(|connected| {
                start.saturating_duration_since(connected) >= RESUME_GRACE
            });
            if asked && !listener.heard.iter().any(|t| start <= *t && *t < next) {
                *missed += 1;
            }
        }
    }
    (checked, missed)
}

/// What the run counts.
struct Tally {
    inner: Mutex<Counts>,
    /// When each kill began (just before the signal) and ended (the process reaped; `None`
    /// while it has not).
    kills: Mutex<Vec<(Instant, Option<Instant>)>>,
    /// When each `unlock` that changed the list began and ended.
    unlocks: Mutex<Vec<(Instant, Instant)>>,
    /// When the run began (for the lines on stderr).
    began: Instant,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            inner: Mutex::default(),
            kills: Mutex::default(),
            unlocks: Mutex::default(),
            began: Instant::now(),
        }
    }
}

#[derive(Default, Clone, Debug)]
struct Counts {
    /// Calls made, per era (connects included).
    calls: BTreeMap<&'static str, u64>,
    /// Calls under way when an instance was killed (whatever their outcome).
    in_flight_at_kill: u64,
    /// Calls that failed with an error while an instance was killed, by reason.
    lost: BTreeMap<String, u64>,
    /// Calls that failed while no instance was killed, by reason: each is a failure of the run.
    failed: BTreeMap<String, u64>,
    /// Calls that took [`HUNG`] or longer, by reason: each is a failure of the run.
    hung: BTreeMap<String, u64>,
    /// Outcomes of the raw resumer that break a rule (events lost, a wrong answer).
    broken: BTreeMap<String, u64>,
    /// Resumptions (`GET` with `Last-Event-ID`) by the raw client, and the events they got.
    resumptions: u64,
    replayed: u64,
    /// Resumed calls answered with the stopped instance's error.
    orphaned: u64,
    /// Event ids or progress values seen twice for one request (the raw client).
    duplicates: u64,
    /// `unlock` calls that changed the list.
    changes: u64,
    /// Kills and restarts; restarts on a new port (nginx reloaded).
    kills: u64,
    restarts: u64,
    reloads: u64,
}

impl Tally {
    fn with<T>(&self, f: impl FnOnce(&mut Counts) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Records a kill about to begin (before its signal is sent: a call that fails as it lands
    /// is recorded at once, maybe before the process is reaped).
    fn killing(&self) {
        self.kills
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((Instant::now(), None));
        self.with(|c| c.kills += 1);
    }

    /// Records that the kill begun last has ended (the process reaped).
    fn killed(&self) {
        if let Some((_, reaped)) = self
            .kills
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last_mut()
        {
            *reaped = Some(Instant::now());
        }
    }

    /// Whether a call under way from `start` to `end` was under way while an instance was being
    /// killed.
    fn kill_between(&self, start: Instant, end: Instant) -> bool {
        self.kills
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|&(signal, reaped)| reaped.is_none_or(|reaped| start <= reaped) && signal <= end)
    }

    /// Records one call of `era` that began at `start` and just ended with `outcome`.
    fn call(&self, era: &'static str, start: Instant, outcome: Result<(), String>) {
        let end = Instant::now();
        let during_kill = self.kill_between(start, end);
        self.with(|c| {
            *c.calls.entry(era).or_default() += 1;
            if during_kill {
                c.in_flight_at_kill += 1;
            }
            let reason = match outcome {
                Ok(()) if end - start < HUNG => return,
                Ok(()) => format!("{era}: answered only after {:.0?}", end - start),
                Err(reason) => format!("{era}: {reason}"),
            };
            let verdict = if end - start >= HUNG {
                &mut c.hung
            } else if during_kill {
                &mut c.lost
            } else {
                &mut c.failed
            };
            eprintln!(
                "soak --fleet: {:>6.2} s: a call begun at {:.2} s failed ({}): {reason}",
                (end - self.began).as_secs_f64(),
                (start - self.began).as_secs_f64(),
                if end - start >= HUNG {
                    "hung"
                } else if during_kill {
                    "in flight at a kill"
                } else {
                    "no kill in flight"
                }
            );
            *verdict.entry(reason).or_default() += 1;
        });
    }

    fn broken(&self, what: String) {
        self.with(|c| *c.broken.entry(what).or_default() += 1);
    }

    fn snapshot(&self) -> Counts {
        self.with(|c| c.clone())
    }
}

impl Counts {
    fn calls_made(&self) -> u64 {
        self.calls.values().sum()
    }
}

/// Redis as the run sees it: its keys (and the bytes each takes, `MEMORY USAGE`) and
/// `used_memory` of `INFO memory`.
#[derive(Debug, Clone, Default)]
struct RedisState {
    keys: BTreeMap<String, i64>,
    used_memory: u64,
}

impl RedisState {
    async fn read(redis: &Redis) -> RedisState {
        let RespValue::Array(names) = redis.command(&["KEYS", "*"]).await else {
            panic!("KEYS is an array");
        };
        let mut keys = BTreeMap::new();
        for name in names.iter().filter_map(RespValue::text) {
            let bytes = match redis.command(&["MEMORY", "USAGE", &name]).await {
                RespValue::Integer(n) => n,
                // Gone since KEYS (a lease that ran out).
                _ => continue,
            };
            keys.insert(name, bytes);
        }
        RedisState {
            keys,
            used_memory: redis.used_memory().await,
        }
    }

    /// The keys other than the instance counter and the leases (`mcx:instances`, `mcx:inst:N`):
    /// what sessions and streams left.
    fn session_keys(&self) -> Vec<&str> {
        self.keys
            .keys()
            .map(String::as_str)
            .filter(|k| *k != "mcx:instances" && !k.starts_with("mcx:inst:"))
            .collect()
    }

    fn leases(&self) -> usize {
        self.keys
            .keys()
            .filter(|k| k.starts_with("mcx:inst:"))
            .count()
    }

    fn key_bytes(&self) -> i64 {
        self.keys.values().sum()
    }
}

/// Runs the failover soak; `Ok(true)` when it passes (or is skipped without its binaries).
pub(crate) async fn run(options: Options) -> Result<bool, String> {
    let args = ["--redis", REDIS_URL, "--state-key", SHARED_KEY];
    let Some(mut fleet) = Fleet::start(INSTANCES, &args).await else {
        println!("soak --fleet: skipped (redis-server, nginx or mcx is missing; see above)");
        return Ok(true);
    };
    let before = RedisState::read(&fleet.redis).await;
    let modern_clients = options.clients / 2;
    let legacy_clients = options.clients - modern_clients;
    eprintln!(
        "soak --fleet: redis on {}, nginx on {}, instances on {:?}; {} s of load from \
         {legacy_clients} legacy and {modern_clients} modern clients with instances killed and \
         restarted (seed {})",
        fleet.redis.addr(),
        fleet.nginx.addr(),
        fleet.addrs(),
        options.seconds,
        options.seed
    );
    let ctx = Arc::new(Ctx {
        addr: fleet.nginx.addr(),
        url: fleet.url(),
        proxy_url: fleet.url(),
        figures: Figures::default(),
        proxy: crate::proxy::ProxyCounts::default(),
        deadline: Instant::now() + Duration::from_secs(options.seconds),
    });
    let tally = Arc::new(Tally::default());
    let mut seeds = Rng::new(options.seed);
    let mut tasks = JoinSet::new();
    let mut listeners = Vec::new();
    for i in 0..options.clients {
        let listener = Arc::new(Listener::new(i % 2 == 1));
        listeners.push(listener.clone());
        tasks.spawn(load_client(
            ctx.clone(),
            tally.clone(),
            listener,
            seeds.next(),
        ));
    }
    tasks.spawn(resumer(ctx.clone(), tally.clone(), seeds.next()));
    tasks.spawn(changer(ctx.clone(), tally.clone()));

    // The kills, on this task: instance `victim` killed, dead for 1 to 3 s (nginx moves its
    // requests on), started again on a new port (nginx reloaded with it).
    let began = Instant::now();
    let mut schedule = Rng::new(seeds.next());
    let mut last_line = began;
    let mut next_kill = began + FIRST_KILL + Duration::from_millis(schedule.below(KILL_JITTER_MS));
    while Instant::now() < ctx.deadline {
        let now = Instant::now();
        if now >= next_kill && now + QUIET_END < ctx.deadline {
            let victim = schedule.below(INSTANCES as u64) as usize;
            tally.killing();
            fleet.kill9(victim).await;
            tally.killed();
            let down = Duration::from_millis(1000 + schedule.below(2000));
            eprintln!(
                "soak --fleet: {:>4.0} s: instance {victim} killed (-9), down for {down:.1?}",
                began.elapsed().as_secs_f64()
            );
            tokio::time::sleep(down).await;
            let in_place = fleet.restart_in_place(victim).await;
            tally.with(|c| {
                c.restarts += 1;
                c.reloads += u64::from(!in_place);
            });
            eprintln!(
                "soak --fleet: {:>4.0} s: instance {victim} restarted on {}{}",
                began.elapsed().as_secs_f64(),
                fleet.instances[victim].addr(),
                if in_place {
                    ""
                } else {
                    " (its port was taken: a new one, nginx reloaded)"
                }
            );
            next_kill =
                Instant::now() + KILL_EVERY + Duration::from_millis(schedule.below(KILL_JITTER_MS));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        if last_line.elapsed() >= Duration::from_secs(10) {
            last_line = Instant::now();
            let counts = tally.snapshot();
            eprintln!(
                "soak --fleet: {:>4.0} s: {} calls, {} lost, {} failed, {} hung",
                began.elapsed().as_secs_f64(),
                counts.calls_made(),
                counts.lost.values().sum::<u64>(),
                counts.failed.values().sum::<u64>(),
                counts.hung.values().sum::<u64>(),
            );
        }
    }
    let mut panicked = Vec::new();
    let wound_down = tokio::time::timeout(WIND_DOWN, async {
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done {
                panicked.push(e.to_string());
            }
        }
    })
    .await;
    if wound_down.is_err() {
        panicked.push(format!(
            "clients still running {} s after the deadline (a hang)",
            WIND_DOWN.as_secs()
        ));
        tasks.abort_all();
    }

    // Every session has been closed (DELETE); the killed instances' leases run out.
    let settling = Instant::now();
    let after = loop {
        let state = RedisState::read(&fleet.redis).await;
        let settled = state.session_keys().is_empty() && state.leases() == before.leases();
        if settled || settling.elapsed() >= SETTLE_LIMIT {
            break state;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let settle_secs = settling.elapsed().as_secs_f64();
    // What nginx said about its upstreams (refused connects, cut responses), for the record.
    let errors = std::fs::read_to_string(fleet.nginx.dir().join("error.log")).unwrap_or_default();
    for line in errors.lines().filter(|l| l.contains("[error]")).take(40) {
        eprintln!("soak --fleet: nginx: {line}");
    }
    let running = (0..INSTANCES)
        .filter(|&i| fleet.instances[i].is_running())
        .count();

    let counts = tally.snapshot();
    let progress_dups = ctx.figures.snapshot().duplicates;
    let heard: Vec<Heard> = listeners.iter().map(|l| l.seen()).collect();
    let kills: Vec<Instant> = tally
        .kills
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(signal, _)| *signal)
        .collect();
    let unlocks = tally
        .unlocks
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let (checked, missed) = missed(&unlocks, &kills, &heard);
    let run = Run {
        seconds: options.seconds,
        legacy_clients,
        modern_clients,
        seed: options.seed,
        settle_secs,
        progress_dups,
        listeners: heard
            .iter()
            .zip(&missed)
            .map(|(h, missed)| (h.modern, h.heard.len() as u64, *missed))
            .collect(),
        checked,
        panicked,
        running,
    };
    println!("{}", report(&run, &counts, &before, &after));
    let why = verdict(&run, &counts, &before, &after);
    if why.is_empty() {
        println!("soak --fleet: passed");
        Ok(true)
    } else {
        for reason in &why {
            println!("soak --fleet: FAILED: {reason}");
        }
        Ok(false)
    }
}

/// The run's settings and what is not in [`Counts`].
struct Run {
    seconds: u64,
    legacy_clients: usize,
    modern_clients: usize,
    seed: u64,
    settle_secs: f64,
    /// Progress values repeated within one call of the `modelctx-client` clients.
    progress_dups: u64,
    /// Per load client: modern or not, the `tools/list_changed` it heard, and the changes
    /// checked away from the kills that it missed ([`missed`]).
    listeners: Vec<(bool, u64, u64)>,
    /// The changes checked away from the kills ([`missed`]).
    checked: usize,
    /// Tasks that panicked or hung.
    panicked: Vec<String>,
    /// Instances running at the end.
    running: usize,
}

/// Why the run fails; empty when it passes.
fn verdict(run: &Run, counts: &Counts, before: &RedisState, after: &RedisState) -> Vec<String> {
    let mut why = Vec::new();
    let sum = |map: &BTreeMap<String, u64>| map.values().sum::<u64>();
    if counts.calls_made() == 0 {
        why.push("no call was made".into());
    }
    if counts.kills == 0 {
        why.push("no instance was killed (the run is too short)".into());
    }
    if sum(&counts.failed) > 0 {
        why.push(format!(
            "{} calls failed while no instance was killed",
            sum(&counts.failed)
        ));
    }
    if sum(&counts.hung) > 0 {
        why.push(format!(
            "{} calls hung ({} s or more)",
            sum(&counts.hung),
            HUNG.as_secs()
        ));
    }
    if sum(&counts.broken) > 0 {
        why.push(format!(
            "{} resumed calls broke a rule (events lost or a wrong answer)",
            sum(&counts.broken)
        ));
    }
    let duplicates = counts.duplicates + run.progress_dups;
    if duplicates > 0 {
        why.push(format!("{duplicates} duplicates"));
    }
    if counts.changes > 0 {
        let deaf = run
            .listeners
            .iter()
            .filter(|(_, heard, _)| *heard == 0)
            .count();
        if deaf > 0 {
            why.push(format!(
                "{deaf} of {} listeners heard none of {} list changes",
                run.listeners.len(),
                counts.changes
            ));
        }
        if run.checked == 0 {
            why.push("no list change was made away from the kills (none to check)".into());
        }
        for modern in [false, true] {
            let missed: u64 = run
                .listeners
                .iter()
                .filter(|(m, _, _)| *m == modern)
                .map(|(_, _, missed)| missed)
                .sum();
            if missed > 0 {
                why.push(format!(
                    "{missed} changes made away from the kills were missed by {} listeners",
                    if modern { "modern" } else { "legacy" }
                ));
            }
        }
    } else {
        why.push("no list change was made".into());
    }
    for task in &run.panicked {
        why.push(format!("a soak task: {task}"));
    }
    if run.running != INSTANCES {
        why.push(format!(
            "{} of {INSTANCES} instances run at the end",
            run.running
        ));
    }
    let left = after.session_keys();
    if !left.is_empty() {
        why.push(format!(
            "Redis still holds {} keys of sessions after they all ended: {}",
            left.len(),
            left.iter().take(5).copied().collect::<Vec<_>>().join(", ")
        ));
    }
    if after.keys.len() != before.keys.len() {
        why.push(format!(
            "Redis holds {} keys, {} at the start",
            after.keys.len(),
            before.keys.len()
        ));
    }
    why
}

/// The figures as a Markdown table.
fn report(run: &Run, counts: &Counts, before: &RedisState, after: &RedisState) -> String {
    let mut out = String::new();
    let mut row = |figure: &str, value: String| {
        let _ = writeln!(out, "| {figure} | {value} |");
    };
    let sum = |map: &BTreeMap<String, u64>| map.values().sum::<u64>();
    row("figure", "value".into());
    row("---", "---".into());
    row(
        "run",
        format!(
            "{} s of load through nginx on {INSTANCES} instances sharing one Redis, {} legacy \
             (2025-11-25) and {} modern (2026-07-28) clients, a raw resuming client and a list \
             changer, seed {}",
            run.seconds, run.legacy_clients, run.modern_clients, run.seed
        ),
    );
    row(
        "instances killed (-9) and restarted",
        format!(
            "{} killed, {} restarted ({} on the port it had, {} on a new one with nginx reloaded)",
            counts.kills,
            counts.restarts,
            counts.restarts - counts.reloads,
            counts.reloads
        ),
    );
    let per_era = counts
        .calls
        .iter()
        .map(|(era, n)| format!("{era} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    row("calls made", format!("{} ({per_era})", counts.calls_made()));
    row(
        "calls in flight when an instance was killed",
        counts.in_flight_at_kill.to_string(),
    );
    row(
        "calls lost (failed with an error, in flight at a kill)",
        sum(&counts.lost).to_string(),
    );
    for (reason, n) in &counts.lost {
        row(&format!("calls lost: {}", escape(reason)), n.to_string());
    }
    row(
        "calls failed with no kill in flight (must be 0)",
        sum(&counts.failed).to_string(),
    );
    for (reason, n) in &counts.failed {
        row(&format!("calls failed: {}", escape(reason)), n.to_string());
    }
    row(
        &format!("calls hung, {} s or more (must be 0)", HUNG.as_secs()),
        sum(&counts.hung).to_string(),
    );
    for (reason, n) in &counts.hung {
        row(&format!("calls hung: {}", escape(reason)), n.to_string());
    }
    row(
        "streams resumed with Last-Event-ID on any instance (raw client)",
        counts.resumptions.to_string(),
    );
    row(
        "events replayed to them (then live)",
        counts.replayed.to_string(),
    );
    row(
        "resumed calls answered with the stopped instance's error",
        counts.orphaned.to_string(),
    );
    for (what, n) in &counts.broken {
        row(
            &format!("resumed calls that broke a rule: {}", escape(what)),
            n.to_string(),
        );
    }
    row(
        "duplicates (must be 0)",
        (counts.duplicates + run.progress_dups).to_string(),
    );
    let heard = |modern: bool| {
        run.listeners
            .iter()
            .filter(|(m, _, _)| *m == modern)
            .map(|(_, n, _)| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let missed = |modern: bool| {
        let per: Vec<u64> = run
            .listeners
            .iter()
            .filter(|(m, _, _)| *m == modern)
            .map(|(_, _, missed)| *missed)
            .collect();
        format!(
            "{} ({})",
            per.iter().sum::<u64>(),
            per.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    row(
        "list changes made (`unlock` through nginx)",
        counts.changes.to_string(),
    );
    row(
        "tools/list_changed heard per legacy client (GET stream)",
        heard(false),
    );
    row(
        "tools/list_changed heard per modern client (listen)",
        heard(true),
    );
    row(
        &format!(
            "list changes checked away from the kills (an `unlock` begun {} s or more after a \
             kill, with none before the next `unlock`)",
            RESUME_GRACE.as_secs()
        ),
        run.checked.to_string(),
    );
    row(
        "changes missed by a legacy listener after its resume (must be 0; per client)",
        missed(false),
    );
    row(
        "changes missed by a modern listener after its resume (must be 0; per client)",
        missed(true),
    );
    row(
        "Redis keys",
        format!(
            "{} before ({} B), {} after ({} B)",
            before.keys.len(),
            before.key_bytes(),
            after.keys.len(),
            after.key_bytes()
        ),
    );
    row(
        "Redis used_memory",
        format!(
            "{} B before, {} B after",
            before.used_memory, after.used_memory
        ),
    );
    row(
        "Redis settling after the load",
        format!("{:.1} s", run.settle_secs),
    );
    out
}

/// A table cell: no pipes or line breaks.
fn escape(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// One load client through nginx: connects (again after a failure), listens, calls until the
/// deadline, then closes (DELETE of a legacy session).
async fn load_client(ctx: Arc<Ctx>, tally: Arc<Tally>, listener: Arc<Listener>, seed: u64) {
    let modern = listener.modern;
    let era = load::era(modern);
    let mut rng = Rng::new(seed);
    // The client's last messages, shown when a call hangs.
    let wire = Arc::new(Mutex::new(std::collections::VecDeque::<String>::new()));
    let record = wire.clone();
    let began = tally.began;
    let tap: load::Tap = Arc::new(move |direction, text| {
        let mut wire = record.lock().unwrap_or_else(PoisonError::into_inner);
        if wire.len() >= WIRE_LINES {
            wire.pop_front();
        }
        let arrow = if direction == modelctx_client::Direction::Sent {
            ">"
        } else {
            "<"
        };
        let text: String = text.chars().take(300).collect();
        wire.push_back(format!(
            "{:>7.2} s {arrow} {text}",
            began.elapsed().as_secs_f64()
        ));
    });
    let client = loop {
        if Instant::now() >= ctx.deadline {
            return;
        }
        let start = Instant::now();
        match load::connect_tapped(&ctx.url, modern, Some(tap.clone())).await {
            Ok(client) => {
                tally.call(era, start, Ok(()));
                break client;
            }
            Err(e) => {
                tally.call(era, start, Err(e));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let mut notifications = client.notifications();
    *listener
        .connected
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    let listener = tokio::spawn(async move {
        loop {
            match notifications.recv().await {
                Ok(ServerNotification::ToolsListChanged) => {
                    listener
                        .heard
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Instant::now());
                }
                Ok(_) | Err(modelctx_client::RecvError::Missed(_)) => {}
                Err(_) => break,
            }
        }
    });
    let mut n = 0u64;
    while Instant::now() < ctx.deadline {
        n += 1;
        let start = Instant::now();
        let outcome = tokio::time::timeout(OUTER, load::one_call(&ctx, &client, &mut rng, n))
            .await
            .unwrap_or_else(|_| Err(format!("no outcome within {OUTER:?}")));
        if start.elapsed() >= HUNG {
            let wire = wire.lock().unwrap_or_else(PoisonError::into_inner);
            eprintln!(
                "soak --fleet: a {era} call hung; the client's last messages:\n{}",
                wire.iter().cloned().collect::<Vec<_>>().join("\n")
            );
        }
        tally.call(era, start, outcome);
    }
    client.close().await;
    listener.abort();
}

/// `unlock` every [`CHANGE_EVERY`] through nginx, from a modern client: a list change on the
/// instance that runs it, which the bus carries to the others.
async fn changer(ctx: Arc<Ctx>, tally: Arc<Tally>) {
    let mut client = None;
    while Instant::now() < ctx.deadline {
        let start = Instant::now();
        let outcome = tokio::time::timeout(OUTER, async {
            if client.is_none() {
                client = Some(load::connect(&ctx.url, true).await?);
            }
            let Some(client) = &client else {
                unreachable!("connected above")
            };
            let result = client
                .call_tool("unlock", json!({}))
                .await
                .map_err(|e| format!("unlock: {e}"))?;
            if result.text().contains("unlocked") {
                Ok(())
            } else {
                Err(format!("unlock: a wrong answer: {}", result.text()))
            }
        })
        .await
        .unwrap_or_else(|_| Err(format!("no outcome within {OUTER:?}")));
        if outcome.is_ok() {
            tally.with(|c| c.changes += 1);
            tally
                .unlocks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((start, Instant::now()));
        }
        tally.call("modern", start, outcome);
        tokio::time::sleep(CHANGE_EVERY).await;
    }
    if let Some(client) = client {
        client.close().await;
    }
}

/// What an SSE message is.
enum Message {
    Progress(f64),
    Response(Value),
    Other,
}

fn classify(data: &str) -> Message {
    let Ok(value) = serde_json::from_str::<Value>(data) else {
        return Message::Other;
    };
    if value["method"] == "notifications/progress" {
        return value["params"]["progress"]
            .as_f64()
            .map_or(Message::Other, Message::Progress);
    }
    if value.get("id").is_some() && (value.get("result").is_some() || value.get("error").is_some())
    {
        return Message::Response(value);
    }
    Message::Other
}

/// The raw legacy client: a `countdown` call whose stream it cuts (or that a kill cuts), resumed
/// with `Last-Event-ID` on whichever instance nginx picks, every event id and progress value
/// checked; then the session is ended (DELETE).
async fn resumer(ctx: Arc<Ctx>, tally: Arc<Tally>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut id = 0;
    while Instant::now() < ctx.deadline {
        id += 1;
        let start = Instant::now();
        let mut session = None;
        let mut seen = Seen::default();
        let outcome = tokio::time::timeout(
            OUTER,
            resume_once(&ctx, &tally, &mut rng, id, &mut session, &mut seen),
        )
        .await
        .unwrap_or_else(|_| Err(format!("no outcome within {OUTER:?}")));
        tally.with(|c| c.duplicates += seen.duplicates());
        tally.call("legacy (raw, resumed)", start, outcome);
        if let Some(session) = session {
            // Ended on any instance; one that is being killed is retried on another.
            for _ in 0..5 {
                let start = Instant::now();
                match raw::end_session(ctx.addr, &session).await {
                    Ok(()) => {
                        tally.call("legacy (raw, resumed)", start, Ok(()));
                        break;
                    }
                    Err(e) => {
                        tally.call("legacy (raw, resumed)", start, Err(format!("DELETE: {e}")));
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.below(200))).await;
    }
}

async fn resume_once(
    ctx: &Ctx,
    tally: &Tally,
    rng: &mut Rng,
    id: u64,
    session_out: &mut Option<String>,
    seen: &mut Seen,
) -> raw::Result<()> {
    let addr = ctx.addr;
    // `raw::open_session`, step by step: the session is ended even when its
    // `notifications/initialized` fails (its instance killed).
    let response = raw::request(
        addr,
        "POST",
        &raw::legacy_headers(None),
        raw::initialize(0).to_string().as_bytes(),
    )
    .await?;
    if response.status != 200 {
        return Err(format!("initialize answered {}", response.status));
    }
    let session = response
        .header("mcp-session-id")
        .ok_or("initialize answered without a session id")?
        .to_owned();
    *session_out = Some(session.clone());
    response.body().await?;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = raw::request(
        addr,
        "POST",
        &raw::legacy_headers(Some(&session)),
        initialized.to_string().as_bytes(),
    )
    .await?;
    if response.status != 202 {
        return Err(format!(
            "notifications/initialized answered {}",
            response.status
        ));
    }
    let steps = 4 + rng.below(6) as u32;
    let call = raw::countdown_call(id, steps, 80, false);
    let mut stream = raw::request(
        addr,
        "POST",
        &raw::legacy_headers(Some(&session)),
        call.to_string().as_bytes(),
    )
    .await?;
    if stream.status != 200
        || !stream
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"))
    {
        return Err(format!(
            "the call was answered {} {:?}, not with a stream",
            stream.status,
            stream.header("content-type")
        ));
    }
    // Cut after this many progress notifications (or never, one time in three).
    let cut_after = match rng.below(3) {
        0 => usize::MAX,
        _ => 1 + rng.below(u64::from(steps) - 1) as usize,
    };
    let mut last_id: Option<String> = None;
    let mut answer = None;
    // Read until the answer, the cut, or the end of the stream (a killed instance).
    loop {
        if seen.progress_count() >= cut_after {
            break;
        }
        let Ok(Some(event)) = stream.next_event().await else {
            break;
        };
        if let Some(event_id) = &event.id {
            seen.event(event_id);
            last_id = Some(event_id.clone());
        }
        match classify(&event.data) {
            Message::Progress(p) => seen.progress(p),
            Message::Response(value) if value["id"] == id => {
                answer = Some(value);
                break;
            }
            _ => {}
        }
    }
    drop(stream);
    let mut resumptions = 0;
    while answer.is_none() {
        resumptions += 1;
        if resumptions > 6 {
            return Err("no answer after 6 resumptions".into());
        }
        let last = last_id
            .clone()
            .ok_or("the stream ended before its first event id")?;
        let headers = [
            ("Accept", "text/event-stream"),
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", LEGACY),
            ("Last-Event-ID", last.as_str()),
        ];
        let mut resumed = match raw::request(addr, "GET", &headers, b"").await {
            Ok(resumed) => resumed,
            // The connection to nginx itself is not cut by a kill: nothing to retry.
            Err(e) => return Err(format!("resuming: {e}")),
        };
        if resumed.status != 200 {
            let status = resumed.status;
            let body = resumed.body().await.unwrap_or_default();
            return Err(format!(
                "resuming answered {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        let mut replayed = 0;
        loop {
            // The end of the resumed stream (its instance killed): resumed again.
            let Ok(Some(event)) = resumed.next_event().await else {
                break;
            };
            replayed += 1;
            if let Some(event_id) = &event.id {
                seen.event(event_id);
                last_id = Some(event_id.clone());
            }
            match classify(&event.data) {
                Message::Progress(p) => seen.progress(p),
                Message::Response(value) if value["id"] == id => {
                    answer = Some(value);
                    break;
                }
                _ => {}
            }
        }
        tally.with(|c| {
            c.resumptions += 1;
            c.replayed += replayed;
        });
    }
    let answer = answer.unwrap_or_default();
    if let Some(error) = answer.get("error") {
        // The instance running the call died: its stream ends with this error, never silence.
        let message = error["message"].as_str().unwrap_or_default();
        if message.contains("stopped") {
            tally.with(|c| c.orphaned += 1);
            return Err(format!("countdown: {message}"));
        }
        tally.broken(format!("countdown: an unexpected error: {error}"));
        return Err(format!("countdown: {error}"));
    }
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    if text != format!("liftoff after {steps} steps") {
        tally.broken("countdown: a wrong answer after resuming".into());
        return Err(format!("a wrong answer after resuming: {answer}"));
    }
    if seen.progress_count() != steps as usize {
        tally.broken("countdown: progress notifications lost across the resumption".into());
        return Err(format!(
            "events lost: {} of {steps} progress notifications across the cut",
            seen.progress_count()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change is checked only away from the kills, and a listener misses it when it heard
    /// nothing between its start and the next change's; the last change, one near a kill, and a
    /// listener that connected just before are not checked.
    #[test]
    fn changes_away_from_the_kills_must_be_heard_by_every_listener() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_millis(s * 100);
        // Unlocks every 2 s from t = 10 s; a kill at 20 s.
        let unlocks: Vec<(Instant, Instant)> = (0..10)
            .map(|i| (at(100 + 20 * i), at(101 + 20 * i)))
            .collect();
        let kills = [at(200)];
        let all: Vec<Instant> = (0..10).map(|i| at(102 + 20 * i)).collect();
        let listeners = [
            // Heard each one.
            Heard {
                modern: false,
                connected: Some(t0),
                heard: all.clone(),
            },
            // Deaf from the kill on.
            Heard {
                modern: false,
                connected: Some(t0),
                heard: all[..5].to_vec(),
            },
            // Connected late: asked from 9.5 s after its connection only.
            Heard {
                modern: true,
                connected: Some(at(150)),
                heard: Vec::new(),
            },
        ];
        let (checked, missed) = missed(&unlocks, &kills, &listeners);
        // Checked: 10, 12, 14, 16 s, and 26 s (18 s: a kill before the next; 20 to 24 s:
        // less than 5 s after it; 28 s: the last, with no next).
        assert_eq!(checked, 5, "{missed:?}");
        // The deaf one missed 26 s; the late one was asked about 26 s only.
        assert_eq!(missed, [0, 1, 1]);
    }

    #[test]
    fn only_calls_in_flight_at_a_kill_may_fail_and_none_may_hang() {
        let tally = Tally::default();
        let before = Instant::now();
        tally.call("modern", before, Ok(()));
        tally.call("modern", before, Err("no kill".into()));
        tally.killing();
        tally.killed();
        tally.call("legacy", before, Err("cut".into()));
        let long_ago = Instant::now() - HUNG;
        tally.call("legacy", long_ago, Err("timed out".into()));
        // A call that began after the kill and failed is not excused by it.
        let after = Instant::now();
        tally.call("modern", after, Err("later".into()));
        let counts = tally.snapshot();
        assert_eq!(counts.calls_made(), 5);
        assert_eq!(counts.in_flight_at_kill, 2);
        assert_eq!(
            counts.lost.keys().collect::<Vec<_>>(),
            ["legacy: cut"],
            "{counts:?}"
        );
        assert_eq!(
            counts.failed.keys().collect::<Vec<_>>(),
            ["modern: later", "modern: no kill"]
        );
        assert_eq!(
            counts.hung.keys().collect::<Vec<_>>(),
            ["legacy: timed out"]
        );
        let run = Run {
            seconds: 1,
            legacy_clients: 1,
            modern_clients: 1,
            seed: 1,
            settle_secs: 0.0,
            progress_dups: 0,
            listeners: vec![(false, 2, 0), (true, 0, 0)],
            checked: 1,
            panicked: Vec::new(),
            running: INSTANCES,
        };
        let redis = RedisState {
            keys: [("mcx:instances".to_owned(), 50)].into(),
            used_memory: 1,
        };
        let mut left = redis.clone();
        left.keys.insert("mcx:{s:x}:state".into(), 100);
        let why = verdict(&run, &counts, &redis, &left);
        for expected in [
            "2 calls failed while no instance was killed",
            "1 calls hung",
            "no list change was made",
            "Redis still holds 1 keys of sessions",
            "Redis holds 2 keys, 1 at the start",
        ] {
            assert!(
                why.iter().any(|w| w.starts_with(expected)),
                "{expected:?} in {why:?}"
            );
        }
        // With list changes made, a listener that heard none fails the run.
        let changed = Counts {
            changes: 3,
            ..counts.clone()
        };
        let why = verdict(&run, &changed, &redis, &redis);
        assert!(
            why.iter()
                .any(|w| w == "1 of 2 listeners heard none of 3 list changes"),
            "{why:?}"
        );
        assert!(!why.iter().any(|w| w.starts_with("Redis")), "{why:?}");
        // A change made away from the kills that a listener missed fails the run.
        let deafened = Run {
            listeners: vec![(false, 2, 1), (true, 3, 0)],
            ..run
        };
        let why = verdict(&deafened, &changed, &redis, &redis);
        assert!(
            why.iter()
                .any(|w| w == "1 changes made away from the kills were missed by legacy listeners"),
            "{why:?}"
        );
        let run = Run {
            listeners: vec![(false, 2, 0), (true, 0, 0)],
            ..deafened
        };
        let text = report(&run, &counts, &redis, &left);
        assert!(text.contains("| calls lost: legacy: cut | 1 |"), "{text}");
        assert!(
            text.contains("| calls in flight when an instance was killed | 2 |"),
            "{text}"
        );
    }
}
