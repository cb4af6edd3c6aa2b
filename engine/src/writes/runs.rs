//! The delivery loops' writes: one run recorder for inbound sessions and outbound
//! destinations (its window, how many answers wait for one write, is the caller's), the
//! send-started mark, rows given back unsent, and a live send's lease extended.
//!
//! ```text
//!   RecordRun { answers, give_back, next }  (one write)
//!     give back:  leased rows not tried, unsent, uncounted (outbound: marks undone)
//!     answers:    each row's outcome, fenced by its lease (record); a channel's penalty
//!                 the answer called for; a dead part's later parts; an inbound row's chat
//!                 told when it starts to wait or is dropped
//!     next:       the key's next run (marked started for runs sent without a write between
//!                 them), one row for an agent that can take it, or nothing
//! ```

use std::time::Duration;

use super::{Write, Writer};
use crate::clock::ms;
use crate::commit::CommitLine;
use crate::error::Result;
use crate::inbound::trouble::{self, Trouble};
use crate::outbound::Part;
pub use crate::queue::GiveBack;
use crate::queue::{
    Head, Lease, Queue, QueueName, Receipt, Retried, SUBMITTED, THROTTLED, UNREACHABLE,
};
use crate::sessions::agent_state::AgentState;
use crate::sessions::{self, Origin};
use crate::Outcome;

/// How long a submitted row's lease lasts past the wait for its confirmation.
const SUBMITTED_LEASE_MARGIN: Duration = Duration::from_secs(30);

/// What became of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum RowRecorded {
    Delivered,
    /// The far end said "not now": pending again, due at this time (unix ms), the attempt not
    /// counted.
    Throttled {
        at: i64,
    },
    Retried(Retried),
    Dead,
    Expired,
    /// Handed to a far end that confirms by itself: still in flight until it does.
    Submitted,
    /// The lease was lost (e.g. the session expired meanwhile): the answer changed nothing.
    Stale,
}

/// A penalty on a whole channel an answer called for (a global rate limit, or its breaker
/// opened): written with the answer, so it holds across a restart.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelPenalty {
    pub channel: String,
    pub wait: Duration,
    pub reason: String,
}

/// One attempt's answer, to record.
#[derive(Debug, Clone)]
pub struct Answered {
    pub lease: Lease,
    pub outcome: Outcome,
    /// Which part of a split text the row is (its later parts die with it).
    pub part: Option<Part>,
    pub penalty: Option<ChannelPenalty>,
    /// Inbound: the chat the message came from, told when it starts to wait or is dropped.
    pub origin: Option<Origin>,
}

/// What to lease after recording: the key's next rows.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseNext {
    Nothing,
    /// Up to `limit` due rows of `key`, each marked started if `mark`.
    Run {
        key: String,
        limit: usize,
        mark: bool,
    },
    /// Up to `limit` due rows of `key` held by the first, each marked started (see
    /// [`Queue::lease_held_run_in`]): for a sender that records their answers in order.
    HeldRun {
        key: String,
        limit: usize,
    },
    /// One row of `key` for its agent, when it can take it (see [`AgentWaits`]).
    ForAgent {
        key: String,
        waits: AgentWaits,
    },
}

/// How long an agent's word may fail to come before relayq looks past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentWaits {
    /// Whether a message may go while the agent works (`busy = "steer"`).
    pub steer: bool,
    /// A dialog no event said was answered.
    pub ask: Duration,
    /// A turn no event said ended.
    pub work: Duration,
    /// When nothing is leased for a busy agent, when to look again.
    pub look_again: Duration,
}

/// How a row leased for an agent is to be sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForAgent {
    /// Its agent's state is not known to be ready: send only onto its prompt.
    pub unsure: bool,
    /// Sent while the agent works (`busy = "steer"`).
    pub steering: bool,
}

/// One write of a delivery loop (see the module's drawing).
#[derive(Debug, Clone)]
pub struct RecordRun {
    pub queue: QueueName,
    pub answers: Vec<Answered>,
    pub give_back: Vec<Lease>,
    pub give_back_as: GiveBack,
    pub next: LeaseNext,
}

/// What [`RecordRun`] did.
#[derive(Debug, Clone)]
pub struct RunRecorded {
    /// What became of each answered row, in order.
    pub recorded: Vec<RowRecorded>,
    /// Notices written to chats: wake their sender.
    pub told: Vec<String>,
    /// The next rows, when asked: leased, or why none (`Head`).
    pub next: Option<std::result::Result<Vec<Lease>, Head>>,
    /// How the row leased for an agent is to be sent.
    pub for_agent: ForAgent,
}

impl Write for RecordRun {
    type Output = RunRecorded;

    fn line(&self) -> CommitLine {
        let next = match &self.next {
            LeaseNext::Run { key, .. }
            | LeaseNext::HeldRun { key, .. }
            | LeaseNext::ForAgent { key, .. } => Some(key),
            LeaseNext::Nothing => None,
        };
        let answered = self.answers.iter().map(|a| &a.lease);
        let leased = answered.chain(&self.give_back).map(|l| &l.key);
        CommitLine::held(leased.chain(next).next().map_or("", String::as_str))
    }

    fn apply(&self, w: &Writer<'_>) -> Result<RunRecorded> {
        let tx = w.tx();
        let q = queue(w, self.queue);
        // Given back first: the parts of a text after one that died are buried with it as it
        // is recorded, which only touches rows no one holds.
        q.give_back_in(tx, &self.give_back, Duration::ZERO, self.give_back_as)?;
        let mut recorded = Vec::with_capacity(self.answers.len());
        let mut told = Vec::new();
        if let Some(delivered) = all_delivered(&self.answers) {
            // The usual run: one statement for all its rows.
            let marked = q.delivered_all_in(tx, &delivered)?;
            recorded.extend(marked.into_iter().map(|marked| match marked {
                true => RowRecorded::Delivered,
                false => RowRecorded::Stale,
            }));
        } else {
            for a in &self.answers {
                let done = record(w, q, a)?;
                told.extend(tell_chat(w, a, &done)?);
                recorded.push(done);
            }
        }
        let (next, for_agent) = match &self.next {
            LeaseNext::Nothing => (None, ForAgent::default()),
            // A session whose agent runs on another node is that node's to deliver.
            LeaseNext::Run { key, .. }
            | LeaseNext::HeldRun { key, .. }
            | LeaseNext::ForAgent { key, .. }
                if self.queue == QueueName::Inbound
                    && !w.door.engine.serves_session(tx, key)? =>
            {
                (Some(Err(Head::Empty)), ForAgent::default())
            }
            LeaseNext::Run { key, limit, mark } => {
                let run = q.lease_run_in(tx, key, *limit, *mark)?;
                (Some(run), ForAgent::default())
            }
            LeaseNext::HeldRun { key, limit } => {
                let run = q.lease_held_run_in(tx, key, *limit)?;
                (Some(run), ForAgent::default())
            }
            LeaseNext::ForAgent { key, waits } => {
                let (run, how) = lease_for_agent(w, q, key, *waits)?;
                (Some(run), how)
            }
        };
        Ok(RunRecorded {
            recorded,
            told,
            next,
            for_agent,
        })
    }
}

/// A delivered row's next on its key, leased with its answer, for a sender that sends one row
/// at a time (outbound): what [`RecordAnswer`] leases after a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Nothing: the next row is found by the next claim.
    Stop,
    /// Lease it; the caller checks the channel's gates before sending it.
    Lease,
    /// Lease it cleared to be sent, marked started if `mark` (one write with the answer).
    LeaseToSend { mark: bool },
    /// Up to `limit` rows of the key at once, all marked started if `mark`.
    LeaseRun { limit: usize, mark: bool },
    /// Up to `limit` rows of the key held by the first, all marked started (see
    /// [`LeaseNext::HeldRun`]).
    LeaseHeldRun { limit: usize },
}

/// The rows behind a delivered one, leased with its answer.
#[derive(Debug, Clone)]
pub enum Taken {
    /// The next row; `cleared`: its gates were passed and it is marked started (as asked), so
    /// it is sent as it is.
    Row { lease: Lease, cleared: bool },
    /// The next rows, cleared and marked started together (see [`Then::LeaseRun`]).
    Run(Vec<Lease>),
}

/// One answer of a sender that sends one row at a time, and its key's next row as `then`
/// says, after a delivery.
#[derive(Debug, Clone)]
pub struct RecordAnswer {
    pub queue: QueueName,
    pub answer: Answered,
    pub then: Then,
}

impl Write for RecordAnswer {
    type Output = (RowRecorded, Option<Taken>);

    fn line(&self) -> CommitLine {
        CommitLine::held(&self.answer.lease.key)
    }

    fn apply(&self, w: &Writer<'_>) -> Result<Self::Output> {
        let tx = w.tx();
        let q = queue(w, self.queue);
        let recorded = record(w, q, &self.answer)?;
        if self.then == Then::Stop || recorded != RowRecorded::Delivered {
            return Ok((recorded, None));
        }
        let key = &self.answer.lease.key;
        let taken = match self.then {
            Then::LeaseRun { .. } | Then::LeaseHeldRun { .. } => {
                let run = match self.then {
                    Then::LeaseHeldRun { limit } => q.lease_held_run_in(tx, key, limit)?,
                    Then::LeaseRun { limit, mark } => q.lease_run_in(tx, key, limit, mark)?,
                    _ => unreachable!("matched above"),
                };
                Some(run.unwrap_or_default())
                    .filter(|run| !run.is_empty())
                    .map(Taken::Run)
            }
            // Leased and marked by one statement, as a run of one.
            Then::LeaseToSend { mark: true } => loop {
                match q.lease_run_in(tx, key, 1, true)? {
                    // It ended at its lease (expired, superseded): the next row is the head.
                    Ok(run) if run.is_empty() => continue,
                    Ok(run) => {
                        break run.into_iter().next().map(|lease| Taken::Row {
                            lease,
                            cleared: true,
                        })
                    }
                    Err(_) => break None,
                }
            },
            then => q.lease_next_in(tx, key)?.map(|lease| Taken::Row {
                lease,
                cleared: then == Then::LeaseToSend { mark: false },
            }),
        };
        Ok((recorded, taken))
    }
}

/// Writes down that a leased row's send starts now, before the platform call: after a crash
/// the row is known to be a possible repeat. False when the lease was lost.
#[derive(Debug, Clone)]
pub struct MarkSendStarted {
    pub queue: QueueName,
    pub lease: Lease,
}

impl Write for MarkSendStarted {
    type Output = bool;

    fn line(&self) -> CommitLine {
        CommitLine::held(&self.lease.key)
    }

    fn atomicity(&self) -> crate::Atomicity {
        crate::Atomicity::OneStatement
    }

    fn apply(&self, w: &Writer<'_>) -> Result<bool> {
        queue(w, self.queue).mark_send_started_in(w.tx(), &self.lease)
    }
}

/// Leased rows given back unsent, uncounted, due after `wait`, their send-started marks as the
/// leases found them. Answers how many were still ours.
#[derive(Debug, Clone)]
pub struct GiveBackUnsent {
    pub queue: QueueName,
    pub leases: Vec<Lease>,
    pub wait: Duration,
}

impl Write for GiveBackUnsent {
    type Output = usize;

    /// Rows of several keys given back together go through the first one's line: no write
    /// about them is in flight beside it, as the sender holds them unsent.
    fn line(&self) -> CommitLine {
        CommitLine::held(self.leases.first().map_or("", |l| l.key.as_str()))
    }

    fn apply(&self, w: &Writer<'_>) -> Result<usize> {
        let undo = GiveBack::UndoMarks;
        queue(w, self.queue).give_back_in(w.tx(), &self.leases, self.wait, undo)
    }
}

/// A live send's lease extended, and the leases of the rows behind it on its key. False when
/// the row's lease was lost.
#[derive(Debug, Clone)]
pub struct ExtendLease {
    pub queue: QueueName,
    pub id: i64,
    pub token: i64,
    pub key: String,
}

impl Write for ExtendLease {
    type Output = bool;

    fn line(&self) -> CommitLine {
        CommitLine::held(&self.key)
    }

    fn apply(&self, w: &Writer<'_>) -> Result<bool> {
        let q = queue(w, self.queue);
        let ours = q.extend_in(w.tx(), self.id, self.token)?;
        q.extend_key_in(w.tx(), &self.key)?;
        Ok(ours)
    }
}

fn queue<'a>(w: &'a Writer<'_>, name: QueueName) -> &'a Queue {
    w.door.named(name)
}

/// Records one answer, fenced by its lease: the channel's penalty, the row's outcome, and for a
/// part of a text that died, the parts after it.
/// Each answer's lease and receipt when every answer is a delivery with nothing else to
/// record (no penalty), which tells no chat.
fn all_delivered(answers: &[Answered]) -> Option<Vec<(&Lease, &Receipt)>> {
    answers
        .iter()
        .map(|a| match (&a.outcome, &a.penalty) {
            (Outcome::Delivered(receipt), None) => Some((&a.lease, receipt)),
            _ => None,
        })
        .collect()
}

fn record(w: &Writer<'_>, q: &Queue, a: &Answered) -> Result<RowRecorded> {
    let now = w.now();
    let tx = w.tx();
    if let Some(p) = &a.penalty {
        let until = now.saturating_add(p.wait.as_millis() as i64);
        crate::penalties::set_in(tx, &p.channel, until, &p.reason)?;
    }
    let l = &a.lease;
    let recorded = record_outcome(q, w, l, a.outcome.clone())?;
    // The parts of a text after one that died would arrive without it: they wait as dead
    // letters with it, and `dead retry` sends them again in order.
    if let (RowRecorded::Dead, Some(part)) = (&recorded, a.part) {
        let later = i64::from(part.of.saturating_sub(part.index));
        let reason = format!("part {} of {} (row {}) failed", part.index, part.of, l.id);
        q.bury_range_in(tx, &l.key, (l.id, l.id + later), &reason)?;
    }
    Ok(recorded)
}

/// The row's outcome, fenced by its lease token.
fn record_outcome(q: &Queue, w: &Writer<'_>, l: &Lease, outcome: Outcome) -> Result<RowRecorded> {
    let now = w.now();
    let tx = w.tx();
    Ok(match outcome {
        Outcome::Delivered(receipt) => match q.delivered_in(tx, l, &receipt)? {
            true => RowRecorded::Delivered,
            false => RowRecorded::Stale,
        },
        Outcome::Throttled { reason, wait, .. } => {
            let reason = format!("{THROTTLED}{reason}");
            throttled(q.throttle_in(tx, l, &reason, wait)?)
        }
        Outcome::Retry { error, after } => retried(q.retry_later_in(tx, l, &error, after)?),
        Outcome::Unreachable { error } => {
            // Nothing went out: pending again after the backoff step it is at, uncounted.
            let wait = q.policy().delay_after(l.attempts.saturating_sub(1).max(1));
            let error = format!("{UNREACHABLE}{error}");
            throttled(q.throttle_in(tx, l, &error, wait)?)
        }
        Outcome::Unknown { error } => {
            let error = format!("outcome unknown: {error}");
            retried(q.retry_unknown_in(tx, l, &error)?)
        }
        Outcome::Permanent { reason } => match q.bury_in(tx, l, &reason)? {
            true => RowRecorded::Dead,
            false => RowRecorded::Stale,
        },
        Outcome::Expired { reason } => match q.expire_in(tx, l, &reason)? {
            true => RowRecorded::Expired,
            false => RowRecorded::Stale,
        },
        Outcome::Submitted { note, wait } => {
            // The lease outlives the wait, so only a crash hands the row to someone else.
            let until = now.saturating_add(ms(wait + SUBMITTED_LEASE_MARGIN));
            let note = format!("{SUBMITTED}{note}");
            match q.submitted_in(tx, l, &note, until)? {
                true => RowRecorded::Submitted,
                false => RowRecorded::Stale,
            }
        }
    })
}

/// A throttle's answer as recorded: pending again, due `at`, or stale.
fn throttled(at: Option<i64>) -> RowRecorded {
    at.map_or(RowRecorded::Stale, |at| RowRecorded::Throttled { at })
}

/// A retry's answer as recorded.
fn retried(retried: Retried) -> RowRecorded {
    match retried {
        Retried::Stale => RowRecorded::Stale,
        Retried::Dead => RowRecorded::Dead,
        r => RowRecorded::Retried(r),
    }
}

/// Tells the chat an inbound message came from, in the transaction that records its answer,
/// when the message starts to wait (its first failed attempt) or is dropped (see
/// [`trouble`]). The ordering key of the notice written, if one was.
fn tell_chat(w: &Writer<'_>, a: &Answered, recorded: &RowRecorded) -> Result<Option<String>> {
    let Some(origin) = &a.origin else {
        return Ok(None);
    };
    let why = a.outcome.text().unwrap_or_default();
    let trouble = match recorded {
        RowRecorded::Retried(Retried::Scheduled { .. }) if a.lease.attempts == 1 => {
            Trouble::Waits { why }
        }
        RowRecorded::Dead | RowRecorded::Expired => Trouble::Dropped { why },
        _ => return Ok(None),
    };
    let routes = w.door.routes.read().expect("routes lock").clone();
    if let Trouble::Dropped { .. } = trouble {
        if let Ok(message) = crate::InboundMessage::from_payload(&a.lease.payload) {
            let failed = crate::progress::ReactionState::Failed;
            crate::progress::reaction_in(w.tx(), &routes, a.lease.id, &message, failed)?;
        }
    }
    let from = trouble::FromChat {
        row: a.lease.id,
        session: &a.lease.key,
        origin,
    };
    trouble::tell_chat_in(&w.door.outbound, w.tx(), &routes, from, trouble)
}

/// Leases the session's next row for its agent: one row, marked sent as it is leased (a crash
/// then leaves a mark, and the row is looked at, not pasted twice), and only when the agent can
/// take it. While it works (unless `steer`) or a dialog is up, nothing is leased and the
/// session looks again after `waits.look_again` unless its agent's events wake it first. A
/// dialog no event said was answered for `waits.ask` (a denial in the terminal says so to no
/// hook), or a turn no event said ended for `waits.work`, is looked past, and an agent that
/// has not reported is not waited for: the row is leased unsure, and the channel pastes only
/// onto a screen that shows the agent at its prompt, no turn running.
fn lease_for_agent(
    w: &Writer<'_>,
    q: &Queue,
    key: &str,
    waits: AgentWaits,
) -> Result<(std::result::Result<Vec<Lease>, Head>, ForAgent)> {
    let now = w.now();
    let tx = w.tx();
    let look_again = now + ms(waits.look_again);
    let how = |unsure, steering| ForAgent { unsure, steering };
    // Waits until `since + after`, then is leased unsure (only onto the agent's prompt).
    let until_stale = |since: i64, after: Duration| {
        let stale_at = since + ms(after);
        let wait = (stale_at > now).then_some(stale_at.min(look_again));
        (wait, how(true, false))
    };
    let (wait_until, how) = match sessions::agent_state(tx, key)? {
        Some((AgentState::AwaitingApproval, since)) => until_stale(since, waits.ask),
        Some((AgentState::Working, since)) if !waits.steer => until_stale(since, waits.work),
        Some((AgentState::Working, _)) => (None, how(false, true)),
        Some((AgentState::Ready, _)) => (None, how(false, false)),
        // Not reported yet, or gone (it may run again): only onto its prompt.
        Some((AgentState::Starting | AgentState::Gone, _)) | None => (None, how(true, false)),
    };
    if let Some(at) = wait_until {
        let head = match q.head_in(tx, key)? {
            Head::Due => Head::NotBefore(at),
            head => head,
        };
        return Ok((Err(head), ForAgent::default()));
    }
    Ok((q.lease_run_in(tx, key, 1, true)?, how))
}
