//! HookWorker: one per session with claimed hook rows. Buffers the rows the HookClaimer hands
//! it (bounded, coalescing bursty events) and runs them through the handlers strictly one after
//! another. Sessions have their own workers, so they run in parallel.

use std::time::Duration;

use actix::prelude::*;
use relayq_engine::writes::upkeep::HookRowsLeave;
use relayq_engine::{EventType, Lease, Processed, Retried};
use serde::Deserialize;

use crate::claiming::{ClaimHooks, ClaimOutbound};
use crate::hooks::buffer::{Buffered, Dropped, HookBuffer, Limits};
use crate::inbound::supervisor::{SessionEnded, WakeSession};
use crate::lifecycle::{Stop, Stopping};
use crate::store::Store;

/// Rows claimed for this session, oldest first.
#[derive(Debug, actix::Message)]
#[rtype(result = "()")]
pub struct Rows(pub Vec<Lease>);

/// The worker's buffer changed (to the HookClaimer, which pauses and stops workers by it).
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "()")]
pub struct WorkerLevel {
    pub session: String,
    pub len: usize,
    /// Nothing buffered and nothing running.
    pub idle: bool,
    /// `Rows` messages handled; the claimer compares it with the batches it sent.
    pub batches_seen: u64,
}

/// Where a worker reports, upward: its level and "claim again" to the HookClaimer, "outbound
/// rows written" to the OutboundSender, "session ended" and "wake the session's delivery" (its
/// agent's state changed, or it confirmed a message) to the SupervisorActor.
#[derive(Clone)]
pub struct Reports {
    pub level: Recipient<WorkerLevel>,
    pub claim: Recipient<ClaimHooks>,
    pub outbound: Recipient<ClaimOutbound>,
    pub session_ended: Recipient<SessionEnded>,
    pub wake_session: Recipient<WakeSession>,
    /// The ProgressActor: the turn's steps and the reactions changed.
    pub progress: Addr<crate::progress::ProgressActor>,
}

pub struct HookWorker {
    session: String,
    store: Store,
    reports: Reports,
    buffer: HookBuffer,
    /// A row is being processed.
    busy: bool,
    /// The store failed while a row ran: it waits at the front of the buffer for a timer.
    resting: bool,
    /// Store failures in a row, for the backoff.
    failures: u32,
    /// Rows leaving without running, still leased to this node until their write commits.
    leaving: Leaving,
    /// `Rows` messages handled; the claimer compares it with the batches it sent.
    batches_seen: u64,
    stopping: Stopping,
}

impl HookWorker {
    pub fn new(session: String, store: Store, reports: Reports, limits: Limits) -> Self {
        HookWorker {
            session,
            store,
            reports,
            buffer: HookBuffer::new(limits),
            busy: false,
            resting: false,
            failures: 0,
            leaving: Leaving::default(),
            batches_seen: 0,
            stopping: Stopping::default(),
        }
    }

    fn report(&self) {
        self.reports.level.do_send(WorkerLevel {
            session: self.session.clone(),
            len: self.buffer.len(),
            idle: !self.busy && !self.resting && self.buffer.is_empty() && self.leaving.is_empty(),
            batches_seen: self.batches_seen,
        });
    }

    fn step(&mut self, ctx: &mut Context<Self>) {
        if self.busy || self.resting {
            return;
        }
        if self.stopping.requested() {
            self.give_back_and_stop(ctx);
            return;
        }
        let Some(next) = self.buffer.pop() else {
            self.report();
            return;
        };
        self.busy = true;
        self.report();
        let lease = next.lease.clone();
        let work = self.store.run(move |s| s.door.process(&lease));
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            act.busy = false;
            act.after(next, result, ctx);
            act.step(ctx);
        }));
    }

    fn after(&mut self, row: Buffered, result: crate::Result<Processed>, ctx: &mut Context<Self>) {
        let session = self.session.as_str();
        let lease = &row.lease;
        if result.is_ok() {
            self.failures = 0;
        }
        match result {
            Ok(Processed::Applied(effects)) => {
                tracing::debug!(session, row = lease.id, "hook event applied");
                if let Some(agent) = effects.receiver_error {
                    self.store.metrics.hook_error(agent.as_str());
                }
                if effects.session_ended {
                    self.reports
                        .session_ended
                        .do_send(SessionEnded(self.session.clone()));
                }
                if !effects.outbound_keys.is_empty() {
                    self.reports.outbound.do_send(ClaimOutbound);
                }
                if effects.unmatched {
                    tracing::warn!(session, "hook events of an agent session that matches no relayq session: its hooks ran without RELAYQ_SESSION and outside a tmux pane relayq types into, so no chat hears its notices; start the agent with RELAYQ_SESSION=<session>, or in the tmux session relayq delivers that session to");
                }
                if let Some(why) = effects.ignored {
                    tracing::debug!(session, row = lease.id, why, "hook event ignored");
                }
                if let Some(note) = effects.progress {
                    self.reports
                        .progress
                        .do_send(crate::progress::ShowStep(*note));
                }
                if effects.reactions {
                    self.reports
                        .progress
                        .do_send(crate::progress::ShowReactions);
                }
                if effects.wake_session && !effects.session_ended {
                    self.reports
                        .wake_session
                        .do_send(WakeSession(self.session.clone()));
                }
            }
            Ok(Processed::DoneWithError { reason, error }) => {
                tracing::warn!(
                    session,
                    row = lease.id,
                    reason,
                    error,
                    "hook event done with an error"
                )
            }
            Ok(Processed::Failed { error, retried }) => {
                tracing::warn!(session, row = lease.id, attempt = lease.attempts, error, outcome = ?retried, "hook handler failed");
                if matches!(retried, Retried::Scheduled { .. }) {
                    // The rows behind it must wait for its retry: give them back.
                    let behind = self.buffer.take_all();
                    self.leaving.back.extend(behind);
                    self.write_leaving(ctx);
                }
            }
            Ok(Processed::Stale) => {
                tracing::info!(
                    session,
                    row = lease.id,
                    "hook row answer ignored: the lease was lost"
                )
            }
            Err(e) => {
                // The row and those behind it stay leased to this node, in this buffer, in
                // order: a write giving them back could fail as well (the database is away),
                // and rows leased to this node do not hold the next claim back.
                let wait = STORE_RETRY
                    .saturating_mul(1 << self.failures.min(5))
                    .min(STORE_RETRY_MAX);
                self.failures += 1;
                tracing::error!(session, row = lease.id, error = %e, ?wait, "cannot process the hook row; trying it again");
                self.buffer.push_front(row);
                self.resting = true;
                ctx.run_later(wait, |act, ctx| {
                    act.resting = false;
                    act.step(ctx);
                });
            }
        }
    }

    /// Writes what `leaving` holds: its rows given back (due at once, the attempt not
    /// counted) and its dropped rows recorded done, in one try; tried again each second until
    /// it commits. Until then the rows are still leased to this node, so a claim does not wait
    /// for them: every row claimed meanwhile joins them (see `Handler<Rows>`), and nothing
    /// after them runs first.
    fn write_leaving(&mut self, ctx: &mut Context<Self>) {
        if self.leaving.writing || self.leaving.is_empty() {
            return;
        }
        self.leaving.writing = true;
        let (back, done) = (self.leaving.back.clone(), self.leaving.done.clone());
        let work = self.store.apply(HookRowsLeave { back, done });
        let (sent_back, sent_done) = (self.leaving.back.len(), self.leaving.done.len());
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            act.leaving.writing = false;
            match result {
                Ok(_) => {
                    // A stop may have taken them meanwhile (`give_back_and_stop`).
                    let (back, done) = (&mut act.leaving.back, &mut act.leaving.done);
                    back.drain(..sent_back.min(back.len()));
                    done.drain(..sent_done.min(done.len()));
                    if sent_back > 0 {
                        act.reports.claim.do_send(ClaimHooks);
                    }
                    act.write_leaving(ctx);
                    act.report();
                }
                Err(e) => {
                    tracing::error!(session = act.session, error = %e, "cannot give hook rows back or record them dropped; trying again in 1s");
                    ctx.run_later(STORE_RETRY, |act, ctx| act.write_leaving(ctx));
                }
            }
        }));
    }

    /// Gives back every row this worker holds, then stops (a failed write leaves them to
    /// their leases' expiry: this node is shutting down).
    fn give_back_and_stop(&mut self, ctx: &mut Context<Self>) {
        let mut rows = self.buffer.take_all();
        rows.append(&mut self.leaving.back);
        let done = std::mem::take(&mut self.leaving.done);
        let work = self.store.apply(HookRowsLeave { back: rows, done });
        ctx.wait(work.into_actor(self).map(|_, _, ctx| ctx.stop()));
    }
}

/// How soon a store that failed is tried again, doubling up to `STORE_RETRY_MAX`.
const STORE_RETRY: Duration = Duration::from_secs(1);
const STORE_RETRY_MAX: Duration = Duration::from_secs(30);

/// Rows leaving a worker without running: `back` to the store (claimed again later, in
/// order: every one after every buffered row), `done` without running (coalesced, evicted).
#[derive(Default)]
struct Leaving {
    back: Vec<Lease>,
    done: Vec<(Lease, &'static str)>,
    /// Their write is under way.
    writing: bool,
}

impl Leaving {
    fn is_empty(&self) -> bool {
        self.back.is_empty() && self.done.is_empty()
    }
}

impl Actor for HookWorker {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.stopping.done();
    }
}

impl Handler<Rows> for HookWorker {
    type Result = ();

    fn handle(&mut self, Rows(leases): Rows, ctx: &mut Context<Self>) {
        self.batches_seen += 1;
        let batch: Vec<Buffered> = leases
            .into_iter()
            .map(|lease| Buffered {
                event: event_type(&lease.payload),
                lease,
            })
            .collect();
        if !self.leaving.back.is_empty() {
            // Rows before these are on their way back to the store: these follow them.
            self.leaving
                .back
                .extend(batch.into_iter().map(|b: Buffered| b.lease));
        } else {
            for (lease, why) in self.buffer.push_batch(batch) {
                match why {
                    Dropped::Coalesced => self.leaving.done.push((lease, "coalesced")),
                    Dropped::Evicted => self.leaving.done.push((lease, "evicted")),
                    // Given back due at once, and claimed again as soon as the buffer has room.
                    Dropped::Deferred => self.leaving.back.push(lease),
                }
            }
        }
        self.write_leaving(ctx);
        self.step(ctx);
        self.report();
    }
}

impl Handler<Stop> for HookWorker {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) -> Self::Result {
        let stopped = self.stopping.wait();
        if !self.busy {
            self.give_back_and_stop(ctx);
        }
        stopped
    }
}

/// The event type of a stored hook row, without decoding the whole payload.
fn event_type(payload: &str) -> Option<EventType> {
    #[derive(Deserialize)]
    struct EventOnly {
        event: EventType,
    }
    serde_json::from_str::<EventOnly>(payload)
        .ok()
        .map(|h| h.event)
}
