//! The claims: leasing due rows for this node's workers, and keeping the leases of rows they
//! hold buffered. Each runs in a transaction of its own, beside the group commit (a claim's
//! scan must not hold a batch up, nor wait behind one).

use std::ops::Range;

use super::{Write, Writer};
use crate::error::Result;
use crate::queue::{Lease, QueueName};

/// What a claim leased, and when the queue's next row not leased falls due (read only when the
/// claim found less than it wanted: a full claim claims again at once).
#[derive(Debug, Default)]
pub struct Claimed {
    pub leases: Vec<Lease>,
    pub next_due: Option<i64>,
}

/// Leases up to `limit` due rows of `queue`, several per key in order (see
/// `Queue::lease_runs`), leaving the keys in `skip` alone.
#[derive(Debug, Clone)]
pub struct LeaseRuns {
    pub queue: QueueName,
    pub limit: usize,
    pub skip: Vec<String>,
}

impl Write for LeaseRuns {
    type Output = Claimed;

    fn apply(&self, w: &Writer<'_>) -> Result<Claimed> {
        let queue = w.door.named(self.queue);
        let leases = queue.lease_runs_in(w.tx(), self.limit, &self.skip)?;
        claimed(w, self.queue, leases, self.limit)
    }
}

/// Leases up to `limit` due heads of keys of `queue`, oldest first, leaving the keys in `skip`
/// alone. With `backlog`, the rows written since `before` first, then up to `room` rows of the
/// backlog written before it (a restart's backlog and the live rows get separate budgets).
#[derive(Debug, Clone)]
pub struct LeaseDue {
    pub queue: QueueName,
    pub limit: usize,
    pub skip: Vec<String>,
    pub backlog: Option<BacklogShare>,
}

/// The backlog's share of a claim (see [`LeaseDue`]).
#[derive(Debug, Clone, Copy)]
pub struct BacklogShare {
    /// Rows written before this (unix ms) are the backlog.
    pub before: i64,
    pub room: usize,
}

/// What [`LeaseDue`] leased; `backlog_found`: some of it was the backlog's.
#[derive(Debug, Default)]
pub struct DueClaimed {
    pub claimed: Claimed,
    pub backlog_found: bool,
}

impl Write for LeaseDue {
    type Output = DueClaimed;

    fn apply(&self, w: &Writer<'_>) -> Result<DueClaimed> {
        let (queue, tx, skip) = (w.door.named(self.queue), w.tx(), &self.skip);
        let Some(backlog) = self.backlog else {
            let leases = queue.lease_due_in(tx, self.limit, skip)?;
            let claimed = claimed(w, self.queue, leases, self.limit)?;
            return Ok(DueClaimed {
                claimed,
                backlog_found: false,
            });
        };
        let live: Range<i64> = backlog.before..i64::MAX;
        let mut leases = queue.lease_due_written_in(tx, self.limit, live, skip)?;
        let room = backlog.room.min(self.limit - leases.len());
        let mut backlog_found = false;
        if room > 0 {
            let before = i64::MIN..backlog.before;
            let found = queue.lease_due_written_in(tx, room, before, skip)?;
            backlog_found = !found.is_empty();
            leases.extend(found);
        }
        Ok(DueClaimed {
            claimed: claimed(w, self.queue, leases, self.limit)?,
            backlog_found,
        })
    }
}

/// Pushes out the expiry of every lease this node holds in `queue` (rows waiting in its
/// workers' buffers); answers how many.
#[derive(Debug, Clone, Copy)]
pub struct ExtendOwnLeases(pub QueueName);

impl Write for ExtendOwnLeases {
    type Output = usize;

    fn apply(&self, w: &Writer<'_>) -> Result<usize> {
        w.door.named(self.0).extend_own_in(w.tx())
    }
}

fn claimed(w: &Writer<'_>, queue: QueueName, leases: Vec<Lease>, limit: usize) -> Result<Claimed> {
    let next_due = match leases.len() < limit {
        true => w.door.named(queue).next_due_in(w.tx())?,
        false => None,
    };
    Ok(Claimed { leases, next_due })
}
