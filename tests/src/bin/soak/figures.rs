//! What the soak counts, how duplicates are found, and the report.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

/// The counters of one run, shared by every load client and fault injector.
#[derive(Default)]
pub(crate) struct Figures {
    inner: Mutex<Counts>,
}

/// A snapshot of [`Figures`].
#[derive(Default, Clone, Debug)]
pub(crate) struct Counts {
    /// Calls made by the load clients (and the restarted clients), per era.
    pub(crate) calls: BTreeMap<&'static str, u64>,
    /// Calls of load clients that failed, by reason. No fault is aimed at these clients, so
    /// every one is a defect.
    pub(crate) failed: BTreeMap<String, u64>,
    /// Faults injected, per kind.
    pub(crate) faults: BTreeMap<&'static str, u64>,
    /// What became of the faults, per kind and outcome (all expected outcomes).
    pub(crate) outcomes: BTreeMap<String, u64>,
    /// Fault outcomes that reveal a defect (a garbage body answered 5xx, a resumption that did
    /// not finish the call, ...), per kind and outcome.
    pub(crate) anomalies: BTreeMap<String, u64>,
    /// Streams resumed with `Last-Event-ID`.
    pub(crate) resumptions: u64,
    /// Streams the load clients resumed (`Last-Event-ID` requests through the cutting proxy).
    pub(crate) client_resumptions: u64,
    /// Events received on resumed streams: the stored ones replayed, then the live ones.
    pub(crate) replayed: u64,
    /// Progress notifications received (load clients and resumed streams).
    pub(crate) progress: u64,
    /// Event ids or progress values received twice for one request.
    pub(crate) duplicates: u64,
}

impl Figures {
    fn with<T>(&self, f: impl FnOnce(&mut Counts) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn call_ok(&self, era: &'static str) {
        self.with(|c| *c.calls.entry(era).or_default() += 1);
    }

    pub(crate) fn call_failed(&self, era: &'static str, reason: String) {
        self.with(|c| {
            *c.calls.entry(era).or_default() += 1;
            *c.failed.entry(format!("{era}: {reason}")).or_default() += 1;
        });
    }

    pub(crate) fn fault(&self, kind: &'static str) {
        self.with(|c| *c.faults.entry(kind).or_default() += 1);
    }

    pub(crate) fn outcome(&self, kind: &'static str, what: &str) {
        self.with(|c| *c.outcomes.entry(format!("{kind}: {what}")).or_default() += 1);
    }

    pub(crate) fn anomaly(&self, kind: &'static str, what: &str) {
        self.with(|c| *c.anomalies.entry(format!("{kind}: {what}")).or_default() += 1);
    }

    /// Records what one request's stream delivered ([`Seen`]).
    pub(crate) fn seen(&self, seen: &Seen) {
        self.with(|c| {
            c.progress += seen.progress.len() as u64;
            c.duplicates += seen.duplicates();
        });
    }

    pub(crate) fn resumed(&self, events: u64) {
        self.with(|c| {
            c.resumptions += 1;
            c.replayed += events;
        });
    }

    pub(crate) fn client_resumptions(&self, n: u64) {
        self.with(|c| c.client_resumptions = n);
    }

    pub(crate) fn snapshot(&self) -> Counts {
        self.with(|c| c.clone())
    }
}

impl Counts {
    pub(crate) fn calls_made(&self) -> u64 {
        self.calls.values().sum()
    }

    pub(crate) fn calls_failed(&self) -> u64 {
        self.failed.values().sum()
    }
}

/// What one request's stream (or streams, when resumed) delivered: event ids and progress
/// values, to find duplicates.
#[derive(Default, Debug)]
pub(crate) struct Seen {
    ids: HashSet<String>,
    repeated_ids: u64,
    progress: Vec<f64>,
}

impl Seen {
    /// Records an event id; false when it came before (a duplicate).
    pub(crate) fn event(&mut self, id: &str) -> bool {
        let fresh = self.ids.insert(id.to_owned());
        if !fresh {
            self.repeated_ids += 1;
        }
        fresh
    }

    /// Records a progress value (they must increase).
    pub(crate) fn progress(&mut self, value: f64) {
        self.progress.push(value);
    }

    /// How many progress notifications came.
    pub(crate) fn progress_count(&self) -> usize {
        self.progress.len()
    }

    /// Event ids seen more than once plus progress values that did not increase.
    pub(crate) fn duplicates(&self) -> u64 {
        self.repeated_ids + repeats(&self.progress)
    }
}

/// How many values do not increase on the one before (a replayed or repeated notification).
pub(crate) fn repeats(values: &[f64]) -> u64 {
    values.windows(2).filter(|w| w[1] <= w[0]).count() as u64
}

/// What the server process reports about itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ServerStats {
    /// Resident set size, KiB (`VmRSS`; 0 where /proc is missing).
    pub(crate) rss_kib: u64,
    /// Peak resident set size, KiB (`VmHWM`).
    pub(crate) peak_rss_kib: u64,
    /// `TableSizes::sessions`: open legacy sessions.
    pub(crate) sessions: u64,
    /// `TableSizes::streams`.
    pub(crate) streams: u64,
    /// `TableSizes::requests`.
    pub(crate) requests: u64,
    /// `TableSizes::queued`.
    pub(crate) queued: u64,
    /// The event store's sessions.
    pub(crate) store_sessions: u64,
    /// The event store's streams.
    pub(crate) store_streams: u64,
    /// The event store's events.
    pub(crate) store_events: u64,
    /// The event store's bytes.
    pub(crate) store_bytes: u64,
    /// Open sockets of the server process (the listener and every connection).
    pub(crate) sockets: u64,
    /// Tasks alive on the server's runtime.
    pub(crate) tasks: u64,
    /// `RunningServer::open_connections`: connections open.
    pub(crate) connections: u64,
    /// `TableSizes::in_flight`: requests being processed across the endpoint.
    pub(crate) in_flight: u64,
}

impl ServerStats {
    /// Every table, by name: these must return to their start.
    pub(crate) fn tables(&self) -> [(&'static str, u64); 12] {
        [
            ("sessions", self.sessions),
            ("streams", self.streams),
            ("requests in flight", self.requests),
            ("queued messages", self.queued),
            ("event store sessions", self.store_sessions),
            ("event store streams", self.store_streams),
            ("event store events", self.store_events),
            ("event store bytes", self.store_bytes),
            ("open sockets", self.sockets),
            ("runtime tasks", self.tasks),
            ("open connections", self.connections),
            ("requests being processed", self.in_flight),
        ]
    }

    /// The tables that differ from `start`'s.
    pub(crate) fn differences(&self, start: &ServerStats) -> Vec<String> {
        self.tables()
            .iter()
            .zip(start.tables())
            .filter(|((_, now), (_, then))| now != then)
            .map(|((name, now), (_, then))| format!("{name}: {then} at the start, {now} now"))
            .collect()
    }
}

/// The run's settings, for the report.
pub(crate) struct RunInfo {
    pub(crate) seconds: u64,
    pub(crate) legacy_clients: usize,
    pub(crate) modern_clients: usize,
    pub(crate) seed: u64,
    pub(crate) settle_secs: f64,
    /// The server's RSS every 10 s of the load, KiB.
    pub(crate) rss_samples: Vec<u64>,
}

/// Why the run fails; empty when it passes.
pub(crate) fn verdict(counts: &Counts, start: &ServerStats, end: &ServerStats) -> Vec<String> {
    let mut why = Vec::new();
    if counts.duplicates > 0 {
        why.push(format!("{} duplicates", counts.duplicates));
    }
    if counts.calls_failed() > 0 {
        why.push(format!(
            "{} calls of load clients failed (no fault was aimed at them)",
            counts.calls_failed()
        ));
    }
    let anomalies: u64 = counts.anomalies.values().sum();
    if anomalies > 0 {
        why.push(format!(
            "{anomalies} faults had an outcome that reveals a defect"
        ));
    }
    if counts.calls_made() == 0 {
        why.push("no call was made".into());
    }
    for difference in end.differences(start) {
        why.push(format!("a table did not return to its start: {difference}"));
    }
    why
}

/// The figures as a Markdown table (what `docs/security.md` shows).
pub(crate) fn report(
    run: &RunInfo,
    counts: &Counts,
    start: &ServerStats,
    end: &ServerStats,
) -> String {
    let mut out = String::new();
    let mut row = |figure: &str, value: String| {
        let _ = writeln!(out, "| {figure} | {value} |");
    };
    row("figure", "value".into());
    row("---", "---".into());
    row(
        "run",
        format!(
            "{} s of load, {} legacy (2025-11-25) and {} modern (2026-07-28) clients, seed {}",
            run.seconds, run.legacy_clients, run.modern_clients, run.seed
        ),
    );
    let per_era = counts
        .calls
        .iter()
        .map(|(era, n)| format!("{era} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    row("calls made", format!("{} ({per_era})", counts.calls_made()));
    row("calls failed", counts.calls_failed().to_string());
    for (reason, n) in &counts.failed {
        row(&format!("calls failed: {}", escape(reason)), n.to_string());
    }
    for (kind, n) in &counts.faults {
        row(&format!("faults injected: {kind}"), n.to_string());
    }
    for (outcome, n) in &counts.outcomes {
        row(
            &format!("fault outcome: {}", escape(outcome)),
            n.to_string(),
        );
    }
    for (outcome, n) in &counts.anomalies {
        row(
            &format!("fault outcome (defect): {}", escape(outcome)),
            n.to_string(),
        );
    }
    row(
        "streams resumed by the raw injector (Last-Event-ID)",
        counts.resumptions.to_string(),
    );
    row(
        "streams resumed by load clients through the cutting proxy",
        counts.client_resumptions.to_string(),
    );
    row(
        "events on resumed streams (replayed, then live)",
        counts.replayed.to_string(),
    );
    row(
        "progress notifications received",
        counts.progress.to_string(),
    );
    row("duplicates (must be 0)", counts.duplicates.to_string());
    row(
        "server RSS",
        format!(
            "{} KiB before, {} KiB after, peak {} KiB",
            start.rss_kib, end.rss_kib, end.peak_rss_kib
        ),
    );
    let samples = run
        .rss_samples
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    row("server RSS every 10 s of load (KiB)", samples);
    for ((name, then), (_, now)) in start.tables().iter().zip(end.tables()) {
        row(
            &format!("table: {name}"),
            format!("{then} before, {now} after"),
        );
    }
    row(
        "settling after the load",
        format!("{:.1} s", run.settle_secs),
    );
    out
}

/// A table cell: no pipes or line breaks.
fn escape(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_event_ids_and_repeated_progress_are_counted() {
        let mut seen = Seen::default();
        assert!(seen.event("s1-1"));
        assert!(seen.event("s1-2"));
        // A replay that starts one event too early repeats an id and a progress value.
        assert!(!seen.event("s1-2"));
        for value in [1.0, 2.0, 2.0, 3.0] {
            seen.progress(value);
        }
        assert_eq!(seen.progress_count(), 4);
        assert_eq!(seen.duplicates(), 2);
        let clean = {
            let mut seen = Seen::default();
            seen.event("a");
            seen.event("b");
            seen.progress(1.0);
            seen.progress(2.0);
            seen
        };
        assert_eq!(clean.duplicates(), 0);
        assert_eq!(repeats(&[3.0, 1.0]), 1);
        assert_eq!(repeats(&[]), 0);
    }

    #[test]
    fn the_verdict_fails_on_duplicates_failed_calls_and_tables_that_grew() {
        let figures = Figures::default();
        figures.call_ok("legacy");
        figures.fault("idle socket");
        figures.outcome("idle socket", "closed by us");
        let start = ServerStats {
            sockets: 1,
            rss_kib: 9000,
            ..ServerStats::default()
        };
        // RSS may differ; the tables may not.
        let end = ServerStats {
            rss_kib: 12000,
            ..start
        };
        assert!(verdict(&figures.snapshot(), &start, &end).is_empty());

        let grown = ServerStats { sessions: 3, ..end };
        let why = verdict(&figures.snapshot(), &start, &grown);
        assert_eq!(
            why,
            ["a table did not return to its start: sessions: 0 at the start, 3 now"]
        );

        let mut seen = Seen::default();
        seen.event("1");
        seen.event("1");
        figures.seen(&seen);
        figures.call_failed("modern", "timeout".into());
        figures.anomaly("garbage body", "answered 500");
        let why = verdict(&figures.snapshot(), &start, &end);
        assert_eq!(why.len(), 3, "{why:?}");
        assert!(why[0].contains("1 duplicates"), "{why:?}");
        let counts = figures.snapshot();
        assert_eq!(counts.calls_made(), 2);
        let report = report(
            &RunInfo {
                seconds: 1,
                legacy_clients: 1,
                modern_clients: 1,
                seed: 7,
                settle_secs: 0.5,
                rss_samples: vec![9000, 12000],
            },
            &counts,
            &start,
            &end,
        );
        assert!(
            report.contains("| duplicates (must be 0) | 1 |"),
            "{report}"
        );
        assert!(
            report.contains("| calls failed: modern: timeout | 1 |"),
            "{report}"
        );
        assert!(
            report.contains("| table: open sockets | 1 before, 1 after |"),
            "{report}"
        );
        assert!(
            report.contains("| server RSS every 10 s of load (KiB) | 9000, 12000 |"),
            "{report}"
        );
    }
}
