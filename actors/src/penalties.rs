//! Channels the far end paused altogether (a channel-wide 429), or whose breaker opened, and
//! until when, as senders ask on every send. Also written to the `channel_penalties` table
//! (see `relayq_engine::penalties`) so a pause holds across a restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What senders ask of the channels' pauses: [`LocalPenalties`] keeps them in this process's
/// memory, read from the table at start; when several daemons share the database,
/// [`SharedPenalties`] also reads the table as it goes, so a 429 one node got holds for all.
pub trait ChannelPenalties: Send + Sync + std::fmt::Debug + 'static {
    /// Channel `name` is paused for `wait` (a longer pause already set stays).
    fn penalize(&self, name: &str, wait: Duration);
    /// How long channel `name` is still paused, if it is.
    fn penalty(&self, name: &str) -> Option<Duration>;
}

/// Today's [`ChannelPenalties`]: until when each channel is paused, in this process's memory.
#[derive(Debug, Clone, Default)]
pub struct LocalPenalties(Arc<Mutex<HashMap<String, Instant>>>);

impl ChannelPenalties for LocalPenalties {
    fn penalize(&self, name: &str, wait: Duration) {
        let until = Instant::now() + wait;
        let mut paused = self.0.lock().unwrap();
        let entry = paused.entry(name.to_string()).or_insert(until);
        *entry = (*entry).max(until);
    }

    fn penalty(&self, name: &str) -> Option<Duration> {
        let paused = self.0.lock().unwrap();
        let left = paused.get(name)?.checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }
}

/// How long what [`SharedPenalties`] read from the table is trusted before it reads again.
const SHARED_PENALTIES_READ_EVERY: Duration = Duration::from_millis(500);

/// [`ChannelPenalties`] of daemons sharing one database: this node's own, and those every node
/// wrote to the `channel_penalties` table (with the answer that caused them), read at most
/// every [`SHARED_PENALTIES_READ_EVERY`].
#[derive(Debug)]
pub struct SharedPenalties {
    local: LocalPenalties,
    engine: relayq_engine::Engine,
    read_at: Mutex<Option<Instant>>,
}

impl SharedPenalties {
    pub fn new(engine: relayq_engine::Engine) -> Self {
        SharedPenalties {
            local: LocalPenalties::default(),
            engine,
            read_at: Mutex::new(None),
        }
    }

    /// Reads the table when what was read is old.
    fn refresh(&self) {
        let mut read_at = self.read_at.lock().unwrap();
        if read_at.is_some_and(|at| at.elapsed() < SHARED_PENALTIES_READ_EVERY) {
            return;
        }
        *read_at = Some(Instant::now());
        match self.engine.channel_penalties_left() {
            Ok(left) => {
                for (channel, ms) in left {
                    self.local
                        .penalize(&channel, Duration::from_millis(ms.max(0) as u64));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the channels' pauses other nodes wrote")
            }
        }
    }
}

impl ChannelPenalties for SharedPenalties {
    fn penalize(&self, name: &str, wait: Duration) {
        self.local.penalize(name, wait);
    }

    fn penalty(&self, name: &str) -> Option<Duration> {
        self.refresh();
        self.local.penalty(name)
    }
}
