//! HookWorker: one per session with claimed hook rows. Buffers the rows the HookClaimer hands
//! it (bounded, coalescing bursty events) and runs them through the handlers strictly one after
//! another. Sessions have their own workers, so they run in parallel.

use std::time::Duration;

use actix::prelude::*;
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
}

pub struct HookWorker {
    session: String,
    store: Store,
    reports: Reports,
    buffer: HookBuffer,
    /// A row is being processed.
    busy: bool,
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
            batches_seen: 0,
            stopping: Stopping::default(),
        }
    }

    fn report(&self) {
        self.reports.level.do_send(WorkerLevel {
            session: self.session.clone(),
            len: self.buffer.len(),
            idle: !self.busy && self.buffer.is_empty(),
            batches_seen: self.batches_seen,
        });
    }

    fn step(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
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
        let lease = next.lease;
        let for_process = lease.clone();
        let work = self.store.run(move |s| s.processor.process(&for_process));
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            act.busy = false;
            act.after(&lease, result, ctx);
            act.step(ctx);
        }));
    }

    fn after(&mut self, lease: &Lease, result: crate::Result<Processed>, ctx: &mut Context<Self>) {
        let session = self.session.as_str();
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
                    self.give_back(behind, Duration::ZERO, ctx);
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
                tracing::error!(session, row = lease.id, error = %e, "cannot process the hook row; giving it back");
                let mut rows = vec![lease.clone()];
                rows.extend(self.buffer.take_all());
                self.give_back(rows, Duration::from_secs(1), ctx);
            }
        }
    }

    /// Returns rows to the store (attempt not counted), due after `delay`.
    fn give_back(&self, rows: Vec<Lease>, delay: Duration, ctx: &mut Context<Self>) {
        if rows.is_empty() {
            return;
        }
        let session = self.session.clone();
        let work = self.store.run(move |s| s.hooks.defer_many(&rows, delay));
        ctx.spawn(
            async move {
                if let Err(e) = work.await {
                    tracing::error!(session, error = %e, "cannot give hook rows back; they return when their lease expires");
                }
            }
            .into_actor(self),
        );
    }

    fn give_back_and_stop(&mut self, ctx: &mut Context<Self>) {
        let rows = self.buffer.take_all();
        let work = self
            .store
            .run(move |s| s.hooks.defer_many(&rows, Duration::ZERO));
        ctx.wait(work.into_actor(self).map(|_, _, ctx| ctx.stop()));
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
        let batch = leases
            .into_iter()
            .map(|lease| Buffered {
                event: event_type(&lease.payload),
                lease,
            })
            .collect();
        let mut done = Vec::new();
        let mut deferred = Vec::new();
        for (lease, why) in self.buffer.push_batch(batch) {
            match why {
                Dropped::Coalesced => done.push((lease, "coalesced")),
                Dropped::Evicted => done.push((lease, "evicted")),
                Dropped::Deferred => deferred.push(lease),
            }
        }
        if !done.is_empty() {
            let session = self.session.clone();
            let work = self.store.run(move |s| s.hooks.drop_leased(&done));
            ctx.spawn(
                async move {
                    if let Err(e) = work.await {
                        tracing::error!(session, error = %e, "cannot record dropped hook rows; they return when their lease expires");
                    }
                }
                .into_actor(self),
            );
        }
        if !deferred.is_empty() {
            // Given back due at once, and claimed again as soon as the buffer has room. The
            // worker waits for the commit: until then the claimer could lease the rows behind
            // them, which are not held back by rows still leased to this process.
            let session = self.session.clone();
            let work = self
                .store
                .run(move |s| s.hooks.defer_many(&deferred, Duration::ZERO));
            ctx.wait(work.into_actor(self).map(move |result, act, _| {
                if let Err(e) = result {
                    tracing::error!(session, error = %e, "cannot give hook rows back; they return when their lease expires");
                }
                act.reports.claim.do_send(ClaimHooks);
            }));
        }
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
