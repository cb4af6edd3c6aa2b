//! Channels the far end paused altogether (a channel-wide 429), or whose breaker opened, and
//! until when, as senders ask on every send. Also written to the `channel_penalties` table
//! (see `relayq_engine::penalties`) so a pause holds across a restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What senders ask of the channels' pauses. One of the pieces that assume one host (see
/// `docs/flows.md`): [`LocalPenalties`] keeps them in this process's memory, read from the
/// table at start; daemons sending for one bot would each need to see a 429 another one got.
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
