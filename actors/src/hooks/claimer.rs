//! HookClaimer: leases the hook queue's due rows in batches, several per session in order, and
//! hands each session's rows to that session's [`HookWorker`]. A worker whose buffer is full is
//! paused: its session is left out of the claims until the buffer drains to a quarter
//! (hysteresis), so one chatty session cannot starve the others. Buffered rows' leases are
//! extended on a timer.
//!
//! No polling: claims run when a row is written (a wake), when a buffer frees room, and at the
//! next row's due time.

use std::collections::HashSet;
use std::time::Duration;

use actix::prelude::*;
use relayq_engine::writes::claims::{Claimed, ExtendOwnLeases, LeaseRuns};
use relayq_engine::writes::upkeep::{HookRowsLeave, ReleaseOwnLeases};
use relayq_engine::{Lease, QueueName};

use crate::claiming::{delay_until, ClaimHooks, ClaimLoop};
use crate::hooks::buffer::Limits;
use crate::hooks::worker::{HookWorker, Reports, Rows, WorkerLevel};
use crate::inbound::children::Children;
use crate::lifecycle::{all_stopped, Shutdown, Stop};
use crate::store::Store;

pub struct HookClaimer {
    store: Store,
    /// Hook rows leased per claim.
    batch: usize,
    limits: Limits,
    /// Where the workers report; `level` and `claim` are filled in with this actor's address.
    reports: Reports,
    /// Each worker, with its buffered rows as last reported plus rows sent since.
    workers: Children<HookWorker, usize>,
    paused: HashSet<String>,
    claims: ClaimLoop,
    stopping: bool,
}

impl HookClaimer {
    /// `outbound` and `supervisor` are where the workers' effects go (the OutboundSender;
    /// the SupervisorActor, for sessions ended and sessions to wake).
    pub fn start(
        store: Store,
        batch: usize,
        limits: Limits,
        outbound: Recipient<crate::claiming::ClaimOutbound>,
        supervisor: Addr<crate::inbound::supervisor::SupervisorActor>,
        progress: Addr<crate::progress::ProgressActor>,
    ) -> Addr<HookClaimer> {
        HookClaimer::create(|ctx| HookClaimer {
            store,
            batch,
            limits,
            reports: Reports {
                level: ctx.address().recipient(),
                claim: ctx.address().recipient(),
                outbound,
                session_ended: supervisor.clone().recipient(),
                wake_session: supervisor.recipient(),
                progress,
            },
            workers: Children::default(),
            paused: HashSet::new(),
            claims: ClaimLoop::default(),
            stopping: false,
        })
    }

    fn claim(&mut self, ctx: &mut Context<Self>) {
        let paused = self.store.pauses.queue(QueueName::Hooks);
        if self.stopping || paused || !self.claims.begin(ctx) {
            return;
        }
        let limit = self.batch;
        // Sessions whose workers are full, and those the operator paused.
        let mut skip: Vec<String> = self.paused.iter().cloned().collect();
        skip.extend(self.store.pauses.keys(QueueName::Hooks));
        let work = self.store.apply_alone(LeaseRuns {
            queue: QueueName::Hooks,
            limit,
            skip,
        });
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            if act.stopping {
                // The stop came while the claim was read: its rows go back, and the stop
                // waits for that (see `ClaimLoop::settled`).
                let back = result.map(|c| c.leases).unwrap_or_default();
                let done = Vec::new();
                let work = act.store.apply_alone(HookRowsLeave { back, done });
                ctx.spawn(work.into_actor(act).map(|result, act, _| {
                    if let Err(e) = result {
                        tracing::warn!(error = %e, "cannot give hook rows back; they return when their lease expires");
                    }
                    act.claims.finish();
                }));
                return;
            }
            act.claims.finish();
            match result {
                Ok(Claimed {
                    leases,
                    next_due: next,
                }) => {
                    let full = leases.len() >= limit;
                    act.dispatch(leases, ctx);
                    if full || act.claims.again {
                        ctx.notify(ClaimHooks);
                    } else if let Some(wait) = delay_until(next, act.store.engine.now()) {
                        act.claims.timer = Some(ctx.notify_later(ClaimHooks, wait));
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot claim hook rows; trying again in 1s");
                    act.claims.timer = Some(ctx.notify_later(ClaimHooks, Duration::from_secs(1)));
                }
            }
        }));
    }

    /// Hands each session's run of rows to its worker, in order.
    fn dispatch(&mut self, leases: Vec<Lease>, ctx: &mut Context<Self>) {
        let mut runs: Vec<(String, Vec<Lease>)> = Vec::new();
        for lease in leases {
            match runs.iter_mut().find(|(k, _)| *k == lease.key) {
                Some((_, run)) => run.push(lease),
                None => runs.push((lease.key.clone(), vec![lease])),
            }
        }
        let capacity = self.limits.capacity;
        for (session, run) in runs {
            if self.workers.is_dead(&session) {
                self.replace_dead_worker(session, run, ctx);
                continue;
            }
            let (store, reports, limits) = (self.store.clone(), self.reports.clone(), self.limits);
            let worker = self.workers.get_or_start(&session, |_| {
                HookWorker::new(session.clone(), store, reports, limits).start()
            });
            worker.sent += 1;
            worker.state += run.len();
            let full = worker.state >= capacity;
            worker.addr.do_send(Rows(run));
            if full {
                self.paused.insert(session);
            }
        }
    }

    /// A worker died (a panic) with rows buffered. Its leases, and this new run behind them,
    /// go back to the store, so the next claim hands them to a new worker in order. The session
    /// is left out of claims until that write commits (tried again each second): rows leased
    /// to this node do not hold a claim back.
    fn replace_dead_worker(&mut self, session: String, run: Vec<Lease>, ctx: &mut Context<Self>) {
        tracing::warn!(session, "hook worker died; its rows go back to the store");
        self.workers.remove(&session);
        self.paused.insert(session.clone());
        self.release_dead_workers_rows(session, run, ctx);
    }

    fn release_dead_workers_rows(
        &mut self,
        session: String,
        run: Vec<Lease>,
        ctx: &mut Context<Self>,
    ) {
        let (key, rows) = (session.clone(), run.clone());
        // The rows the worker held, then every lease left on its key, in one transaction.
        let work = self.store.apply(ReleaseOwnLeases {
            queue: QueueName::Hooks,
            key,
            give_back: rows,
        });
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| match result {
            Ok(_) => {
                act.paused.remove(&session);
                ctx.notify(ClaimHooks);
            }
            Err(e) => {
                tracing::error!(session, error = %e, "cannot release a dead worker's rows; trying again in 1s");
                ctx.run_later(Duration::from_secs(1), move |act, ctx| {
                    act.release_dead_workers_rows(session, run, ctx)
                });
            }
        }));
    }

    /// Extends buffered hook rows' leases every third of the hook lease timeout, read afresh
    /// each time (a reload may change it).
    fn extend_every_third_of_the_lease(&mut self, ctx: &mut Context<Self>) {
        let every = (self.store.hooks.policy().lease_timeout / 3).max(Duration::from_millis(10));
        ctx.run_later(every, |act, ctx| {
            act.extend_buffered_leases(ctx);
            act.extend_every_third_of_the_lease(ctx);
        });
    }

    fn extend_buffered_leases(&mut self, ctx: &mut Context<Self>) {
        if self.workers.is_empty() {
            return;
        }
        let work = self.store.apply_alone(ExtendOwnLeases(QueueName::Hooks));
        ctx.spawn(
            async move {
                if let Err(e) = work.await {
                    tracing::warn!(error = %e, "cannot extend buffered hook leases");
                }
            }
            .into_actor(self),
        );
    }
}

impl Actor for HookClaimer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.extend_every_third_of_the_lease(ctx);
        self.claim(ctx);
    }
}

impl Handler<ClaimHooks> for HookClaimer {
    type Result = ();
    fn handle(&mut self, _: ClaimHooks, ctx: &mut Context<Self>) {
        self.claim(ctx);
    }
}

impl Handler<WorkerLevel> for HookClaimer {
    type Result = ();
    fn handle(&mut self, level: WorkerLevel, ctx: &mut Context<Self>) {
        let Some(worker) = self.workers.get_mut(&level.session) else {
            return;
        };
        let settled = worker.sent == level.batches_seen;
        if settled {
            worker.state = level.len;
        }
        let capacity = self.limits.capacity;
        if worker.state >= capacity {
            self.paused.insert(level.session.clone());
        } else if worker.state <= capacity / 4 && self.paused.remove(&level.session) {
            self.claim(ctx);
        }
        // Stop an idle worker unless a batch is still on its way to it.
        if level.idle {
            if let Some(worker) = self
                .workers
                .remove_if_settled(&level.session, level.batches_seen)
            {
                worker.addr.do_send(Stop);
                self.paused.remove(&level.session);
            }
        }
    }
}

impl Handler<Shutdown> for HookClaimer {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, Shutdown { grace }: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        let claim = self.claims.settled();
        let stops: Vec<_> = self.workers.drain().map(|w| w.addr.send(Stop)).collect();
        Box::pin(async move {
            if let Some(claim) = claim {
                if tokio::time::timeout(grace, claim).await.is_err() {
                    tracing::warn!(?grace, "a claim of hook rows still running after the grace period; its rows return when their leases expire");
                }
            }
            if !all_stopped(stops, grace).await {
                tracing::warn!(?grace, "hook handlers still running after the grace period; they will be retried at next start");
            }
        })
    }
}
