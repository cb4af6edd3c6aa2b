//! Time as a parameter: the engine never asks SQLite for `now`, so tests can move time by hand.
//! On PostgreSQL, shared by daemons on several hosts, the times written with rows are the
//! database's, unless the clock is a test's (see [`Clock::defers_to_database`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in unix milliseconds.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> i64;

    /// Whether a shared database's clock is to be used instead of this one for the times
    /// written with rows (lease expiry above all): a host's clock may be off, and daemons on
    /// hosts whose clocks differ must agree on when a lease ends. False for a clock a test
    /// moves by hand.
    fn defers_to_database(&self) -> bool {
        true
    }
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// The system clock off by a fixed amount: a host whose clock is wrong (`RELAYQ_CLOCK_OFFSET`,
/// to test that a skewed node steals no lease). Defers to a shared database's clock, as the
/// system clock does.
#[derive(Debug, Clone, Copy)]
pub struct OffsetClock(pub i64);

impl Clock for OffsetClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.0
    }
}

/// A clock that only moves when told to: for tests of backoff, leases and retention.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start_ms: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(start_ms)))
    }

    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }

    pub fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    fn defers_to_database(&self) -> bool {
        false
    }
}

/// Milliseconds in a duration, saturating: policies hold `Duration`s, rows hold milliseconds.
pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
