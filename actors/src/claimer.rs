//! ClaimerActor: leases the hook and outbound queues' due rows and hands them on.
//!
//! - Hook rows are leased in batches, several per session in order, and each session's rows go
//!   to that session's [`HookWorker`]. A worker whose buffer is full is paused: its session is
//!   left out of the claims until the buffer drains to a quarter (hysteresis), so one chatty
//!   session cannot starve the others. Buffered rows' leases are extended on a timer.
//! - Outbound rows are leased one per destination (the head), up to a bound in flight, and sent
//!   through their channel; the lease is extended while the send runs.
//!
//! No polling: claims run when a row is written (a wake), when a send or a buffer frees room,
//! and at the next row's due time.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use actix::prelude::*;
use relayq_engine::{Lease, OutboundMessage, Queue};
use tokio::sync::oneshot;

use crate::channels::{ChannelDirectory, Content};
use crate::delivery::deliver;
use crate::hook_buffer::Limits;
use crate::hook_worker::{HookWorker, Rows, StopWorker};
use crate::store::Store;
use crate::supervisor::Supervisor;

/// How the claimer batches and bounds its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimSettings {
    /// Hook rows leased per claim.
    pub hook_batch: usize,
    /// Each session's hook buffer.
    pub hook_buffer: Limits,
    /// Outbound sends running at once, across destinations.
    pub outbound_in_flight: usize,
}

impl Default for ClaimSettings {
    fn default() -> Self {
        ClaimSettings {
            hook_batch: 25,
            hook_buffer: Limits::default(),
            outbound_in_flight: 32,
        }
    }
}

/// Hook rows may be due: claim them.
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct ClaimHooks;

/// Outbound rows may be due: claim them.
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct ClaimOutbound;

/// A HookWorker's buffer changed.
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "()")]
pub struct WorkerLevel {
    pub session: String,
    pub len: usize,
    /// Nothing buffered and nothing running.
    pub idle: bool,
    pub batches_seen: u64,
}

/// Stop claiming; wait (up to `grace`) for sends in flight and for the workers to stop.
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "()")]
pub struct StopClaiming {
    pub grace: Duration,
}

struct Worker {
    addr: Addr<HookWorker>,
    batches_sent: u64,
    /// Rows buffered, as last reported plus rows sent since.
    level: usize,
}

/// One claim loop's state: at most one claim runs; a request meanwhile runs another after it.
#[derive(Default)]
struct Loop {
    running: bool,
    again: bool,
    timer: Option<SpawnHandle>,
}

pub struct ClaimerActor {
    store: Store,
    channels: ChannelDirectory,
    supervisor: Addr<Supervisor>,
    settings: ClaimSettings,
    workers: HashMap<String, Worker>,
    paused: HashSet<String>,
    hooks: Loop,
    outbound: Loop,
    sending: usize,
    stopping: bool,
    drained: Vec<oneshot::Sender<()>>,
}

impl ClaimerActor {
    pub fn new(
        store: Store,
        channels: ChannelDirectory,
        supervisor: Addr<Supervisor>,
        settings: ClaimSettings,
    ) -> Self {
        ClaimerActor {
            store,
            channels,
            supervisor,
            settings,
            workers: HashMap::new(),
            paused: HashSet::new(),
            hooks: Loop::default(),
            outbound: Loop::default(),
            sending: 0,
            stopping: false,
            drained: Vec::new(),
        }
    }

    /// Starting a claim: false if one is running (it will run again after).
    fn begin(l: &mut Loop, ctx: &mut Context<Self>) -> bool {
        if l.running {
            l.again = true;
            return false;
        }
        l.running = true;
        l.again = false;
        if let Some(t) = l.timer.take() {
            ctx.cancel_future(t);
        }
        true
    }

    /// When a claim got less than it asked for: look again when the next row is due. A row
    /// due already is one that cannot be claimed now (paused session, blocked destination):
    /// what frees it claims again; the one-second timer is the backstop.
    fn delay_until(&self, next_due: Option<i64>) -> Option<Duration> {
        let at = next_due?;
        let wait = at.saturating_sub(self.store.engine.now());
        Some(if wait > 0 {
            Duration::from_millis(wait as u64)
        } else {
            Duration::from_secs(1)
        })
    }

    fn claim_hooks(&mut self, ctx: &mut Context<Self>) {
        if self.stopping || !Self::begin(&mut self.hooks, ctx) {
            return;
        }
        let limit = self.settings.hook_batch;
        let skip: Vec<String> = self.paused.iter().cloned().collect();
        let work = self
            .store
            .run(move |s| with_next_due(&s.hooks, s.hooks.lease_runs(limit, &skip)?, limit));
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            act.hooks.running = false;
            match result {
                Ok((leases, next)) => {
                    let full = leases.len() >= limit;
                    act.dispatch_hooks(leases, ctx);
                    if full || act.hooks.again {
                        ctx.notify(ClaimHooks);
                    } else if let Some(wait) = act.delay_until(next) {
                        act.hooks.timer = Some(ctx.notify_later(ClaimHooks, wait));
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot claim hook rows; trying again in 1s");
                    act.hooks.timer = Some(ctx.notify_later(ClaimHooks, Duration::from_secs(1)));
                }
            }
        }));
    }

    /// Hands each session's run of rows to its worker, in order.
    fn dispatch_hooks(&mut self, leases: Vec<Lease>, ctx: &mut Context<Self>) {
        let mut runs: Vec<(String, Vec<Lease>)> = Vec::new();
        for lease in leases {
            match runs.iter_mut().find(|(k, _)| *k == lease.key) {
                Some((_, run)) => run.push(lease),
                None => runs.push((lease.key.clone(), vec![lease])),
            }
        }
        let capacity = self.settings.hook_buffer.capacity;
        for (session, run) in runs {
            if self
                .workers
                .get(&session)
                .is_some_and(|w| !w.addr.connected())
            {
                self.replace_dead_worker(session, run, ctx);
                continue;
            }
            let worker = self.worker_for(&session, ctx);
            worker.batches_sent += 1;
            worker.level += run.len();
            let full = worker.level >= capacity;
            worker.addr.do_send(Rows(run));
            if full {
                self.paused.insert(session);
            }
        }
    }

    fn worker_for(&mut self, session: &str, ctx: &mut Context<Self>) -> &mut Worker {
        let (store, me, supervisor, limits) = (
            self.store.clone(),
            ctx.address(),
            self.supervisor.clone(),
            self.settings.hook_buffer,
        );
        self.workers
            .entry(session.to_string())
            .or_insert_with(|| Worker {
                addr: HookWorker::new(session.to_string(), store, me, supervisor, limits).start(),
                batches_sent: 0,
                level: 0,
            })
    }

    /// A worker died (a panic) with rows buffered. Its leases, and this new run behind them,
    /// go back to the store, so the next claim hands them to a new worker in order.
    fn replace_dead_worker(&mut self, session: String, run: Vec<Lease>, ctx: &mut Context<Self>) {
        tracing::warn!(session, "hook worker died; its rows go back to the store");
        self.workers.remove(&session);
        self.paused.remove(&session);
        let key = session.clone();
        let work = self.store.run(move |s| {
            s.hooks.defer_many(&run, Duration::ZERO)?;
            s.hooks.release_own_leases(&key)
        });
        ctx.spawn(work.into_actor(self).map(move |result, _, ctx| {
            if let Err(e) = result {
                tracing::error!(session, error = %e, "cannot release a dead worker's rows; they return when their lease expires");
            }
            ctx.notify(ClaimHooks);
        }));
    }

    fn claim_outbound(&mut self, ctx: &mut Context<Self>) {
        let room = self
            .settings
            .outbound_in_flight
            .saturating_sub(self.sending);
        if self.stopping || room == 0 || !Self::begin(&mut self.outbound, ctx) {
            return;
        }
        let work = self
            .store
            .run(move |s| with_next_due(&s.outbound, s.outbound.lease_due(room)?, room));
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            act.outbound.running = false;
            match result {
                Ok((leases, next)) => {
                    let full = leases.len() >= room;
                    for lease in leases {
                        act.send_outbound(lease, ctx);
                    }
                    if act.outbound.again && !full {
                        ctx.notify(ClaimOutbound);
                    } else if let Some(wait) = act.delay_until(next) {
                        act.outbound.timer = Some(ctx.notify_later(ClaimOutbound, wait));
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot claim outbound rows; trying again in 1s");
                    act.outbound.timer =
                        Some(ctx.notify_later(ClaimOutbound, Duration::from_secs(1)));
                }
            }
        }));
    }

    fn send_outbound(&mut self, lease: Lease, ctx: &mut Context<Self>) {
        self.sending += 1;
        let (store, channels) = (self.store.clone(), self.channels.clone());
        let send = async move {
            let message = OutboundMessage::from_payload(&lease.payload)
                .map(|m| (m.channel.clone(), Content::Outbound(m)));
            let queue = store.outbound.clone();
            if let Err(e) = deliver(&store, &queue, &lease, &channels, message).await {
                tracing::error!(row = lease.id, error = %e, "cannot record the outbound outcome");
            }
        };
        ctx.spawn(send.into_actor(self).map(|_, act, ctx| {
            act.sending -= 1;
            if act.stopping {
                if act.sending == 0 {
                    for tx in act.drained.drain(..) {
                        let _ = tx.send(());
                    }
                }
                return;
            }
            // Room for one more send; the row behind this one may be due now.
            act.claim_outbound(ctx);
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
        let work = self.store.run(|s| s.hooks.extend_own());
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

/// A claim's leases, and when it got fewer than `limit`, when the queue's next row is due.
fn with_next_due(
    queue: &Queue,
    leases: Vec<Lease>,
    limit: usize,
) -> relayq_engine::Result<(Vec<Lease>, Option<i64>)> {
    let next = if leases.len() < limit {
        queue.next_due()?
    } else {
        None
    };
    Ok((leases, next))
}

impl Actor for ClaimerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.extend_every_third_of_the_lease(ctx);
        self.claim_hooks(ctx);
        self.claim_outbound(ctx);
    }
}

impl Handler<ClaimHooks> for ClaimerActor {
    type Result = ();
    fn handle(&mut self, _: ClaimHooks, ctx: &mut Context<Self>) {
        self.claim_hooks(ctx);
    }
}

impl Handler<ClaimOutbound> for ClaimerActor {
    type Result = ();
    fn handle(&mut self, _: ClaimOutbound, ctx: &mut Context<Self>) {
        self.claim_outbound(ctx);
    }
}

impl Handler<WorkerLevel> for ClaimerActor {
    type Result = ();
    fn handle(&mut self, level: WorkerLevel, ctx: &mut Context<Self>) {
        let Some(worker) = self.workers.get_mut(&level.session) else {
            return;
        };
        let settled = worker.batches_sent == level.batches_seen;
        if settled {
            worker.level = level.len;
        }
        let capacity = self.settings.hook_buffer.capacity;
        if worker.level >= capacity {
            self.paused.insert(level.session.clone());
        } else if worker.level <= capacity / 4 && self.paused.remove(&level.session) {
            self.claim_hooks(ctx);
        }
        // Stop an idle worker unless a batch is still on its way to it.
        if level.idle && settled {
            if let Some(worker) = self.workers.remove(&level.session) {
                worker.addr.do_send(StopWorker);
            }
            self.paused.remove(&level.session);
        }
    }
}

impl Handler<StopClaiming> for ClaimerActor {
    type Result = ResponseFuture<()>;

    fn handle(
        &mut self,
        StopClaiming { grace }: StopClaiming,
        _: &mut Context<Self>,
    ) -> Self::Result {
        self.stopping = true;
        let stops: Vec<_> = self
            .workers
            .drain()
            .map(|(_, w)| w.addr.send(StopWorker))
            .collect();
        let sends = if self.sending > 0 {
            let (tx, rx) = oneshot::channel();
            self.drained.push(tx);
            Some(rx)
        } else {
            None
        };
        Box::pin(async move {
            let all = async {
                for stop in stops {
                    let _ = stop.await;
                }
                if let Some(rx) = sends {
                    let _ = rx.await;
                }
            };
            if tokio::time::timeout(grace, all).await.is_err() {
                tracing::warn!(?grace, "sends or hook handlers still running after the grace period; they will be retried at next start");
            }
        })
    }
}
