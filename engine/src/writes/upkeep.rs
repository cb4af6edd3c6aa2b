//! The upkeep writes: a session's expiry, the leases a dead actor (or a dead hook worker) left,
//! the hook rows leaving a worker without running; the recovery sweep's (leases taken back,
//! rows past their age) and the start's (progress left from before it).

use super::{Write, Writer};
use crate::error::Result;
use crate::inbound::trouble;
use crate::queue::{GiveBack, Lease, QueueName};
use crate::Atomicity;

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
        let queue = w.door.named(self.queue);
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
        let queue = w.door.named(self.queue);
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
        let hooks = &w.door.hooks;
        hooks.drop_leased_in(w.tx(), &self.done)?;
        if !self.back.is_empty() {
            let now = std::time::Duration::ZERO;
            hooks.give_back_in(w.tx(), &self.back, now, GiveBack::KeepMarks)?;
        }
        Ok(())
    }
}

/// Whose leases the recovery sweep takes back (to pending, due at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    /// Every lease another owner holds: at the start of the only daemon on its database, where
    /// any other owner is a previous process.
    Foreign,
    /// The leases that expired.
    Expired,
    /// The leases that expired, and those of daemons no live node holds (a node lost, or
    /// restarted), which are not left to run out: several nodes on one database.
    ExpiredAndLost,
}

/// Takes leases back (see [`Reclaim`]); answers how many.
#[derive(Debug, Clone, Copy)]
pub struct ReclaimLeases(pub Reclaim);

impl Write for ReclaimLeases {
    type Output = usize;

    fn apply(&self, w: &Writer<'_>) -> Result<usize> {
        let tx = w.tx();
        Ok(match self.0 {
            Reclaim::Foreign => crate::queue::reclaim_foreign_in(tx, w.door.engine.owner())?,
            Reclaim::Expired => crate::queue::reclaim_expired_in(tx)?,
            Reclaim::ExpiredAndLost => {
                crate::queue::reclaim_expired_in(tx)? + crate::storage::nodes::reclaim_lost_in(tx)?
            }
        })
    }
}

/// Expires the pending rows of every queue older than its policy's `max_age` (where it has
/// one and expires them); answers how many.
#[derive(Debug, Clone, Copy)]
pub struct ExpireOverdue;

impl Write for ExpireOverdue {
    type Output = usize;

    fn apply(&self, w: &Writer<'_>) -> Result<usize> {
        let q = w.door;
        Ok(q.inbound.expire_overdue_in(w.tx())?
            + q.hooks.expire_overdue_in(w.tx())?
            + q.outbound.expire_overdue_in(w.tx())?)
    }
}

/// At a daemon's start, before any actor leases: the unfinished rows of every queue left from
/// before `started` whose kind its policy does not replay end as superseded (see
/// `Queue::supersede_stale_in`); answers how many.
#[derive(Debug, Clone, Copy)]
pub struct SupersedeStale {
    pub started: i64,
}

impl Write for SupersedeStale {
    type Output = usize;

    fn apply(&self, w: &Writer<'_>) -> Result<usize> {
        let (q, at) = (w.door, self.started);
        Ok(q.inbound.supersede_stale_in(w.tx(), at)?
            + q.hooks.supersede_stale_in(w.tx(), at)?
            + q.outbound.supersede_stale_in(w.tx(), at)?)
    }
}

/// An operator's pause of `queue`'s `key` (the whole queue when `None`), or its end.
#[derive(Debug, Clone)]
pub struct SetPause {
    pub queue: QueueName,
    pub key: Option<String>,
    pub paused: bool,
}

impl Write for SetPause {
    /// Whether it changed: paused now, or was paused.
    type Output = bool;

    fn atomicity(&self) -> Atomicity {
        Atomicity::OneStatement
    }

    fn apply(&self, w: &Writer<'_>) -> Result<bool> {
        let key = self.key.as_deref();
        match self.paused {
            true => crate::pauses::pause_in(w.tx(), self.queue, key).map(|()| true),
            false => crate::pauses::resume_in(w.tx(), self.queue, key),
        }
    }
}

/// Tells each chat whose message waits for a node that is gone why, once (see
/// [`trouble::tell_waiting_on_gone_nodes_in`]); answers the notices' ordering keys.
#[derive(Debug, Clone, Copy)]
pub struct TellWaitingOnGoneNodes;

impl Write for TellWaitingOnGoneNodes {
    type Output = Vec<String>;

    fn apply(&self, w: &Writer<'_>) -> Result<Vec<String>> {
        let routes = w.door.routes.read().expect("routes lock").clone();
        trouble::tell_waiting_on_gone_nodes_in(&w.door.outbound, w.tx(), &routes)
    }
}

/// Revives dead rows (`None`: all of them): pending again, attempts reset, due now. Answers
/// (id, queue, key) of each row revived, so the caller can wake its worker.
#[derive(Debug, Clone)]
pub struct ReviveDead(pub Option<Vec<i64>>);

impl Write for ReviveDead {
    type Output = Vec<(i64, crate::queue::QueueName, String)>;

    fn apply(&self, w: &Writer<'_>) -> Result<Self::Output> {
        crate::queue::revive_dead_in(w.tx(), self.0.as_deref())
    }
}

/// Deletes dead rows (`None`: all of them); answers the ids deleted.
#[derive(Debug, Clone)]
pub struct PurgeDead(pub Option<Vec<i64>>);

impl Write for PurgeDead {
    type Output = Vec<i64>;

    fn apply(&self, w: &Writer<'_>) -> Result<Vec<i64>> {
        crate::queue::purge_dead_in(w.tx(), self.0.as_deref())
    }
}
