//! A session's run: the rows leased for it and not yet attempted, when their leases end, and
//! the answers not yet recorded (see `crate::runs`). Leased in one statement for up to
//! [`RUN_LIMIT`] rows; while the channel answers fast, several answers are recorded in one
//! commit, the one that leases the next run: a busy session costs one commit per run, not one
//! per message. A slow channel's answers are recorded one by one.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use relayq_engine::writes::runs::{GiveBack, LeaseNext, RunRecorded};
use relayq_engine::{Lease, QueueName};

use super::agent_wait::lease_for_agent;
use super::SessionActor;
use crate::delivery::AnswerToRecord;
use crate::runs::{record_run, NotRecorded, RunAnswers};

/// Most rows leased at once for one session.
pub const RUN_LIMIT: usize = 64;

/// A delivery answered within this is fast: the next row may go before its answer is recorded.
pub const FAST_DELIVERY: Duration = Duration::from_millis(1);

/// Answers wait unrecorded at most this long after the first of them. A crash repeats at most
/// the deliveries of this window, in order (at-least-once, as for any unrecorded delivery).
pub(crate) const RECORD_WITHIN: Duration = Duration::from_millis(5);

/// See the module's doc.
pub struct SessionRun {
    /// Leased rows not yet attempted, oldest first.
    rows: VecDeque<Lease>,
    /// When their leases end at the earliest (see [`SessionRun::running_out`]).
    leased_until: Option<Instant>,
    /// Delivered rows whose answers are not recorded yet, in delivery order.
    pub answers: RunAnswers,
}

/// What a write takes from the run (see [`SessionRun::take_for_write`]).
pub struct ForWrite {
    pub answers: Vec<AnswerToRecord>,
    /// When the first answer came (for [`SessionRun::not_written`]).
    pub since: Option<Instant>,
    /// The rows given back unsent: after a failure, a pause, or leases running out.
    pub give_back: Vec<Lease>,
    /// An answer is not a delivery: the rows after it wait.
    pub failed: bool,
    /// The next run is due: this one is used up, or given back to be leased again.
    pub lease_next: bool,
}

impl Default for SessionRun {
    fn default() -> Self {
        SessionRun {
            rows: VecDeque::new(),
            leased_until: None,
            answers: RunAnswers::new(RECORD_WITHIN),
        }
    }
}

impl SessionRun {
    /// The next leased row to deliver now: none while the answers must be recorded first (the
    /// last one failed, the channel is slow, or the window is full) or while the run's leases
    /// run out (see [`SessionRun::running_out`]).
    pub fn next(&mut self, lease_timeout: Duration) -> Option<Lease> {
        match self.answers.due() || self.running_out(lease_timeout) {
            true => None,
            false => self.rows.pop_front(),
        }
    }

    /// Whether the run's leases have less than half their timeout left: its rows are not
    /// delivered but leased again first. A lease that ran out while this node waited (a record
    /// held up, the database down) may be another node's by now, and fencing guards the row,
    /// not the delivery: the far end would get the row from both nodes. Timed by this host's
    /// monotonic clock from before the write that leased the run, which is never later than
    /// the database's expiry (a host's wall clock may be wrong).
    fn running_out(&self, lease_timeout: Duration) -> bool {
        let half = lease_timeout / 2;
        self.leased_until
            .is_none_or(|until| until.saturating_duration_since(Instant::now()) < half)
    }

    /// Whether nothing is leased or answered here.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.answers.is_empty()
    }

    /// Takes what the next write records and gives back; `paused`: the session's rows are
    /// given back (the operator paused it).
    pub fn take_for_write(&mut self, paused: bool, lease_timeout: Duration) -> ForWrite {
        let failed = self.answers.failed();
        let renew = !self.rows.is_empty() && self.running_out(lease_timeout);
        let (answers, since) = self.answers.take();
        let give_back = match failed || paused || renew {
            true => self.rows.drain(..).collect(),
            false => Vec::new(),
        };
        ForWrite {
            answers,
            since,
            give_back,
            failed,
            lease_next: failed || renew || self.rows.is_empty(),
        }
    }

    /// Everything, to record and give back before the actor stops.
    pub fn take_all(&mut self) -> (Vec<AnswerToRecord>, Vec<Lease>) {
        let (answers, _) = self.answers.take();
        (answers, self.rows.drain(..).collect())
    }

    /// A write that did not commit: its answers and the rows it gave back are still ours.
    pub fn not_written(
        &mut self,
        answers: Vec<AnswerToRecord>,
        since: Option<Instant>,
        given_back: Vec<Lease>,
    ) {
        self.answers.restore(answers, since);
        self.rows.extend(given_back);
    }

    /// A lease was lost (another node took the session, or it ended): the rest of the run is
    /// not this node's to deliver. Answers how many rows were dropped.
    pub fn lost(&mut self) -> usize {
        let dropped = self.rows.len();
        self.rows.clear();
        dropped
    }

    /// A run leased, whose leases end at `until` at the earliest (by this host's clock).
    pub fn leased(&mut self, run: Vec<Lease>, until: Instant) {
        if !run.is_empty() {
            self.leased_until = Some(until);
        }
        self.rows.extend(run);
    }
}

impl SessionActor {
    /// The session's write: `answers` recorded, `give_back` given back (marks kept), `next`
    /// leased.
    pub(super) fn record(
        &self,
        answers: Vec<AnswerToRecord>,
        give_back: Vec<Lease>,
        next: LeaseNext,
    ) -> impl std::future::Future<Output = Result<RunRecorded, NotRecorded>> + 'static {
        record_run(
            &self.store,
            QueueName::Inbound,
            answers,
            give_back,
            self.give_back_as(),
            next,
        )
    }

    /// What the write leases next for the session, when it leases (see `LeaseNext`).
    pub(super) fn next_to_lease(&self) -> LeaseNext {
        let key = self.session.clone();
        match self.agent_confirms() {
            // Marked started as leased, so a row whose answer is not recorded (a kill, a lost
            // lease) is a possible repeat for whoever delivers it next; a channel that holds
            // possible repeats for an operator goes one row at a time, so only the row sent is.
            None => LeaseNext::Run {
                key,
                limit: match self.channels.sends_in_runs(&self.channel) {
                    true => RUN_LIMIT,
                    false => 1,
                },
                mark: true,
            },
            Some(wait) => lease_for_agent(key, wait, self.busy_setting),
        }
    }

    /// How rows leased and not delivered go back: a message pasted for an agent keeps its
    /// mark (it is looked at, not pasted twice); other runs are leased marked (see
    /// [`LeaseNext::Run`]) and their unsent rows lose the mark again.
    pub(super) fn give_back_as(&self) -> GiveBack {
        match self.agent_confirms() {
            Some(_) => GiveBack::KeepMarks,
            None => GiveBack::UndoMarks,
        }
    }
}
