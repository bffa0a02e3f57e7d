//! A thread's own `tracing` subscriber in a test binary whose tests run side by side.

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Event, Metadata, Subscriber};

/// `subscriber` as this thread's default, over a global subscriber that wants nothing.
///
/// tracing caches each callsite's interest (and the max level) for every thread, computed from
/// the dispatchers registered at that moment: a callsite first reached on a thread with no
/// subscriber while another test thread sets its own can stay cached `never`, and that test
/// sees none of its spans. With a global subscriber that answers `sometimes` for every
/// callsite, no interest is ever cached `never`; the rebuild after `set_default` recomputes any
/// cached before.
pub fn scoped<S>(subscriber: S) -> DefaultGuard
where
    S: Subscriber + Send + Sync + 'static,
{
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(Undecided);
    });
    let guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    guard
}

/// Wants nothing, yet leaves every callsite's interest open ([`scoped`]).
struct Undecided;

impl Subscriber for Undecided {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
