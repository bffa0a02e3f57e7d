//! Progress of a call on stderr: a bar on a terminal, one line per notification otherwise (for
//! logs and scripts).
//!
//! The bar appears with the first progress notification and is cleared when the call ends, so a
//! call that reports none prints nothing. Lines that go to stderr while it shows (log messages)
//! go through [`eprint_line`], which lifts the bar, prints, and draws it again.

use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use modelctx_client::CallOptions;

/// The bar of the call in flight, when stderr is a terminal and the call reported progress.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Lines for stderr held back while a question is asked on the terminal: `Some` meanwhile.
static HELD: Mutex<Option<Vec<String>>> = Mutex::new(None);

/// Steps of a bar whose total is known: progress values are numbers, not always whole ones.
const STEPS: u64 = 1000;

/// Clears the bar when the call ends (or is cancelled).
pub(crate) struct Shown(());

impl Drop for Shown {
    fn drop(&mut self) {
        if let Some(bar) = BAR.lock().unwrap_or_else(|e| e.into_inner()).take() {
            bar.finish_and_clear();
        }
    }
}

/// Options that ask for progress and show it; keep the guard alive for the call.
pub(crate) fn options() -> (CallOptions, Shown) {
    let terminal = std::io::stderr().is_terminal();
    let options = CallOptions::new().on_progress(move |p| {
        if terminal {
            let mut shown = BAR.lock().unwrap_or_else(|e| e.into_inner());
            match shown.as_ref() {
                Some(bar) => update(bar, p.progress, p.total, p.message.as_deref()),
                None => {
                    // Styled and set before it first draws, then kept moving between updates.
                    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
                    update(&bar, p.progress, p.total, p.message.as_deref());
                    // Drawn when the question on the terminal, if any, has been answered.
                    if !held() {
                        bar.set_draw_target(ProgressDrawTarget::stderr());
                    }
                    bar.enable_steady_tick(std::time::Duration::from_millis(120));
                    *shown = Some(bar);
                }
            }
        } else {
            let line = describe(p.progress, p.total, p.message.as_deref());
            eprintln!("progress {}", crate::output::for_stderr(&line));
        }
    });
    (options, Shown(()))
}

/// Prints `line` on stderr above the bar, if one shows; escaped on a terminal (log data comes
/// from the server: see [`crate::output::escape`]).
pub(crate) fn eprint_line(line: &str) {
    let line = crate::output::for_stderr(line);
    if let Some(held) = HELD.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        held.push(line.into_owned());
        return;
    }
    match BAR.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(bar) => bar.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    }
}

/// Keeps the bar and the lines of [`eprint_line`] off the terminal while a question is asked
/// on it (see `answer.rs`); they come back when this is dropped.
pub(crate) struct Hold(());

/// Clears the bar from the screen and holds back the lines printed through [`eprint_line`]
/// until the [`Hold`] is dropped.
pub(crate) fn hold() -> Hold {
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    if let Some(bar) = BAR.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        // Still updated, no longer drawn; its line (the cursor's) emptied for the question.
        bar.set_draw_target(ProgressDrawTarget::hidden());
        eprint!("\r\x1b[2K");
    }
    Hold(())
}

/// Gives up a question left on the terminal before mcx says its last word and exits (the call
/// ended while it waited for the user): ends the question's line, prints the lines held back,
/// and lets the next ones through. Nothing happens without a [`Hold`]; one dropped later finds
/// nothing to print.
pub(crate) fn release() {
    let held = HELD.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(lines) = held {
        // The cursor is after the question's prompt (`[y/n] > `).
        eprintln!();
        for line in lines {
            eprintln!("{line}");
        }
    }
}

/// Whether a question is being asked (see [`hold`]).
fn held() -> bool {
    HELD.lock().unwrap_or_else(|e| e.into_inner()).is_some()
}

impl Drop for Hold {
    fn drop(&mut self) {
        let lines = HELD
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        let bar = BAR.lock().unwrap_or_else(|e| e.into_inner());
        for line in lines {
            eprintln!("{line}");
        }
        if let Some(bar) = bar.as_ref() {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}

/// `3/10 step 3`: the progress, its total when known, its message when given.
fn describe(progress: f64, total: Option<f64>, message: Option<&str>) -> String {
    let total = total.map(|t| format!("/{t}")).unwrap_or_default();
    let message = message.map(|m| format!(" {m}")).unwrap_or_default();
    format!("{progress}{total}{message}")
}

/// Sets `bar` to show `p`: a bar filled to `progress / total` when the total is known, a spinner
/// otherwise; the numbers and the message beside it.
fn update(bar: &ProgressBar, progress: f64, total: Option<f64>, message: Option<&str>) {
    match total.filter(|t| *t > 0.0) {
        Some(total) => {
            if bar.length() != Some(STEPS) {
                bar.set_style(
                    ProgressStyle::with_template("{spinner} [{bar:30}] {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                );
                bar.set_length(STEPS);
            }
            let done = (progress / total).clamp(0.0, 1.0);
            // In 0..=STEPS by the clamp above: the cast cannot truncate or wrap.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            bar.set_position((done * STEPS as f64).round() as u64);
        }
        None => {
            if bar.length().is_some() || bar.message().is_empty() {
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.unset_length();
            }
        }
    }
    // The bar is drawn on a terminal only: the server's message is always escaped.
    bar.set_message(crate::output::escape(&describe(progress, total, message)).into_owned());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests that hold and release: one at a time (the state is the process's).
    static HOLDING: Mutex<()> = Mutex::new(());

    #[test]
    fn lines_wait_while_a_question_is_asked() {
        let _one = HOLDING.lock().unwrap_or_else(|e| e.into_inner());
        let hold = hold();
        assert!(held());
        eprint_line("one");
        eprint_line("two");
        // Other tests may print meanwhile: only these two lines are this test's.
        let lines: Vec<String> = HELD.lock().unwrap().clone().unwrap_or_default();
        let mine: Vec<&str> = lines
            .iter()
            .map(String::as_str)
            .filter(|l| ["one", "two"].contains(l))
            .collect();
        assert_eq!(mine, ["one", "two"]);
        drop(hold);
        assert!(!held());
        assert!(HELD.lock().unwrap().is_none());
    }

    #[test]
    fn a_release_ends_the_hold_for_good() {
        let _one = HOLDING.lock().unwrap_or_else(|e| e.into_inner());
        let hold = hold();
        eprint_line("held");
        release();
        assert!(!held());
        // The hold's own end, later, has nothing left to print and holds nothing.
        drop(hold);
        assert!(!held());
        release();
        assert!(!held());
    }

    #[test]
    fn a_known_total_fills_the_bar_in_proportion() {
        let bar = ProgressBar::hidden();
        update(&bar, 3.0, Some(10.0), Some("step 3"));
        assert_eq!(bar.length(), Some(STEPS));
        assert_eq!(bar.position(), 300);
        assert_eq!(bar.message(), "3/10 step 3");
        update(&bar, 0.5, Some(1.0), None);
        assert_eq!(bar.position(), 500);
        // Past the total (servers do send it): a full bar, the true numbers beside it.
        update(&bar, 12.0, Some(10.0), None);
        assert_eq!(bar.position(), STEPS);
        assert_eq!(bar.message(), "12/10");
    }

    #[test]
    fn without_a_total_the_bar_is_a_spinner_with_the_count() {
        let bar = ProgressBar::hidden();
        update(&bar, 1.0, Some(4.0), None);
        update(&bar, 7.0, None, Some("rows"));
        assert_eq!(bar.length(), None);
        assert_eq!(bar.message(), "7 rows");
    }
}
