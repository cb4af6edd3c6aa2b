//! The writes that end or free a key's rows: a session's expiry, the leases a dead actor
//! (or a dead hook worker) left, the hook rows leaving a worker without running.

use super::{Write, Writer};
use crate::error::Result;
use crate::queue::{GiveBack, Lease, QueueName};

/// Expires `key`'s unfinished rows in `queue`, for `reason`; answers how many.
#[derive(Debug, Clone)]
pub struct ExpireKey {
    pub queue: QueueName,
    pub key: String,
    pub reason: String,
}

impl Write for ExpireKey {
    type Output = usize;

    fn atomicity(&self) -> crate::Atomicity {
        crate::Atomicity::OneStatement
    }

    fn apply(&self, w: &Writer<'_>) -> Result<usize> {
        let queue = w.flows.named(self.queue);
        queue.expire_key_in(w.tx(), &self.key, &self.reason)
    }
}

/// Frees this node's leases on `key` in `queue`, due at once, after giving `give_back` back
/// unsent with their marks kept (a dead worker's rows it had not finished), in one
/// transaction; answers how many leases were freed.
#[derive(Debug, Clone)]
pub struct ReleaseOwnLeases {
    pub queue: QueueName,
    pub key: String,
    pub give_back: Vec<Lease>,
}

impl Write for ReleaseOwnLeases {
    type Output = usize;

    fn apply(&self, w: &Writer<'_>) -> Result<usize> {
        let queue = w.flows.named(self.queue);
        if !self.give_back.is_empty() {
            let now = std::time::Duration::ZERO;
            queue.give_back_in(w.tx(), &self.give_back, now, GiveBack::KeepMarks)?;
        }
        queue.release_own_leases_in(w.tx(), &self.key)
    }
}

/// Hook rows leaving a worker without running, in one transaction: `done` recorded as
/// delivered without running, each with why (coalesced, evicted), then `back` given back
/// unsent with their marks kept, due at once.
#[derive(Debug, Clone)]
pub struct HookRowsLeave {
    pub back: Vec<Lease>,
    pub done: Vec<(Lease, &'static str)>,
}

impl Write for HookRowsLeave {
    type Output = ();

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        let hooks = &w.flows.hooks;
        hooks.drop_leased_in(w.tx(), &self.done)?;
        if !self.back.is_empty() {
            let now = std::time::Duration::ZERO;
            hooks.give_back_in(w.tx(), &self.back, now, GiveBack::KeepMarks)?;
        }
        Ok(())
    }
}
