//! Wall-clock time for token checks (`exp`, `nbf`, `iat`), replaceable in tests.

use std::fmt;
use std::time::SystemTime;

/// The time tokens and proofs are checked against. Cache ages and rate limits do not use it:
/// they run on the runtime's monotonic clock (`tokio::time::Instant`).
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Now.
    fn now(&self) -> SystemTime;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}
