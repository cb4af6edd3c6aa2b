//! OutboundSender: leases the outbound queue's destination heads (one row per destination, so
//! each destination's messages go in order) up to a bound in flight, and sends each through its
//! channel; the lease is extended while the send runs (see [`delivery`](crate::delivery)).
//!
//! No polling: a claim runs when a row is written (a wake), when a send frees room, and at the
//! next row's due time.

use std::time::Duration;

use actix::prelude::*;
use relayq_engine::{Lease, OutboundMessage};
use tokio::sync::oneshot;

use crate::channels::{ChannelDirectory, Content};
use crate::claiming::{delay_until, with_next_due, ClaimLoop, ClaimOutbound};
use crate::delivery::{deliver, Recorded, Then};
use crate::lifecycle::Shutdown;
use crate::store::Store;

pub struct OutboundSender {
    store: Store,
    channels: ChannelDirectory,
    /// Most sends at once.
    in_flight: usize,
    sending: usize,
    claims: ClaimLoop,
    /// The backlog left from before this start, while some of it is unfinished.
    drain: Option<Drain>,
    stopping: bool,
    drained: Vec<oneshot::Sender<()>>,
    /// Mark each send started before the platform call (see [`mark_send_started`]).
    mark: bool,
}

/// The rows written before this sender started (an outage's backlog): sent beside the rows
/// written since, within their own budget, and summed up in the log once all are finished.
struct Drain {
    /// Rows written before this (unix ms) are the backlog.
    before: i64,
    /// Most backlog sends at once.
    budget: usize,
    sending: usize,
    began: std::time::Instant,
    attempted: u64,
    delivered: u64,
    failed: u64,
    deferred: u64,
}

/// What became of one send, for the drain's summary.
#[derive(Debug, Clone, Copy)]
enum Sent {
    Delivered,
    Failed,
    /// Given back uncounted (paced, paused) or throttled by the far end.
    Deferred,
}

impl OutboundSender {
    /// `drain_in_flight` bounds the sends of rows written before now (a restart's backlog).
    pub fn new(
        store: Store,
        channels: ChannelDirectory,
        in_flight: usize,
        drain_in_flight: usize,
    ) -> Self {
        let drain = Drain {
            before: store.engine.now(),
            budget: drain_in_flight.clamp(1, in_flight.max(1)),
            sending: 0,
            began: std::time::Instant::now(),
            attempted: 0,
            delivered: 0,
            failed: 0,
            deferred: 0,
        };
        OutboundSender {
            store,
            channels,
            in_flight,
            sending: 0,
            claims: ClaimLoop::default(),
            drain: Some(drain),
            stopping: false,
            drained: Vec::new(),
            mark: true,
        }
    }

    /// Whether sends are marked started (on unless only measuring what the mark costs).
    pub fn marking_send_started(mut self, mark: bool) -> Self {
        self.mark = mark;
        self
    }

    fn claim(&mut self, ctx: &mut Context<Self>) {
        let room = self.in_flight.saturating_sub(self.sending);
        if self.stopping || room == 0 || !self.claims.begin(ctx) {
            return;
        }
        let backlog = self
            .drain
            .as_ref()
            .map(|d| (d.before, d.budget.saturating_sub(d.sending)));
        let work = self.store.run(move |s| {
            let q = &s.outbound;
            let Some((before, backlog_room)) = backlog else {
                let (leases, next) = with_next_due(q, q.lease_due(room)?, room)?;
                return Ok((leases, next, false));
            };
            // Rows written since the start first, then the backlog within its budget.
            let mut leases = q.lease_due_written(room, before..i64::MAX)?;
            let backlog_room = backlog_room.min(room - leases.len());
            if backlog_room > 0 {
                leases.extend(q.lease_due_written(backlog_room, i64::MIN..before)?);
            }
            let (leases, next) = with_next_due(q, leases, room)?;
            Ok((leases, next, q.any_written_before(before)?))
        });
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            act.claims.running = false;
            match result {
                Ok((leases, next, backlog_left)) => {
                    let full = leases.len() >= room;
                    for lease in leases {
                        act.send(lease, 0, false, ctx);
                    }
                    act.end_drain_if_done(backlog_left);
                    if act.claims.again && !full {
                        ctx.notify(ClaimOutbound);
                    } else if let Some(wait) = delay_until(next, act.store.engine.now()) {
                        act.claims.timer = Some(ctx.notify_later(ClaimOutbound, wait));
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot claim outbound rows; trying again in 1s");
                    act.claims.timer =
                        Some(ctx.notify_later(ClaimOutbound, Duration::from_secs(1)));
                }
            }
        }));
    }

    /// Logs the drain's summary once no backlog row is left unfinished or in flight.
    fn end_drain_if_done(&mut self, backlog_left: bool) {
        let Some(d) = &self.drain else {
            return;
        };
        if backlog_left || d.sending > 0 {
            return;
        }
        if d.attempted > 0 {
            tracing::info!(
                attempted = d.attempted,
                delivered = d.delivered,
                failed = d.failed,
                deferred = d.deferred,
                duration = ?d.began.elapsed(),
                "outbound backlog from before the start drained"
            );
        }
        self.drain = None;
    }

    /// Sends a leased row; `chain` is how many rows of its key were sent just before it, each
    /// leasing the next (see [`CHAIN`]); `cleared`: its gates were passed and it is marked
    /// started already (see [`Then::LeaseToSend`]).
    fn send(&mut self, lease: Lease, chain: u32, cleared: bool, ctx: &mut Context<Self>) {
        self.sending += 1;
        // The key's next row is leased with this one's answer, up to CHAIN in a row and not
        // while a backlog drains within its own budget.
        let chained = chain < CHAIN && self.drain.is_none() && !self.stopping;
        let backlog = self.drain.as_mut().filter(|d| lease.created_at < d.before);
        let backlog = match backlog {
            Some(d) => {
                d.sending += 1;
                d.attempted += 1;
                true
            }
            None => false,
        };
        let (store, channels, mark) = (self.store.clone(), self.channels.clone(), self.mark);
        let send = async move {
            let message = OutboundMessage::from_payload(&lease.payload);
            let then = match &message {
                _ if !chained => Then::Stop,
                Ok(m) if channels.pacer(&m.channel).is_none() => Then::LeaseToSend { mark },
                _ => Then::Lease,
            };
            if let (Ok(m), false) = (&message, cleared) {
                // A channel not ready yet or paused first (no budget is spent on a row that
                // cannot go), then the budget, then the breaker's probe slot (taken last: only a
                // send gives it back).
                let gate = channels
                    .unready(&m.channel)
                    .or_else(|| channels.penalty(&m.channel))
                    .map_or(Ok(()), Err)
                    .and_then(|()| channels.pacer(&m.channel).map_or(Ok(()), |p| p.take(&m.to)))
                    .and_then(|()| channels.admit(&m.channel));
                if let Err(wait) = gate {
                    give_back(&store, lease, wait).await;
                    return (Sent::Deferred, None);
                }
                if mark && !mark_send_started(&store, &lease).await {
                    return (Sent::Failed, None);
                }
            }
            let message = message.map(|m| (m.channel.clone(), Content::Outbound(m)));
            let queue = store.outbound.clone();
            match deliver(&store, &queue, &lease, &channels, message, then).await {
                Ok((Recorded::Delivered, next)) => (Sent::Delivered, next),
                Ok((Recorded::Throttled { .. }, _)) => (Sent::Deferred, None),
                Ok(_) => (Sent::Failed, None),
                Err(e) => {
                    tracing::error!(row = lease.id, error = %e, "cannot record the outbound outcome");
                    (Sent::Failed, None)
                }
            }
        };
        ctx.spawn(send.into_actor(self).map(move |(sent, next), act, ctx| {
            act.sending -= 1;
            if let (true, Some(d)) = (backlog, act.drain.as_mut()) {
                d.sending -= 1;
                match sent {
                    Sent::Delivered => d.delivered += 1,
                    Sent::Failed => d.failed += 1,
                    Sent::Deferred => d.deferred += 1,
                }
            }
            if let (Some(next), true) = (&next, act.stopping) {
                // Taken while stopping: given back unsent, due at once for the next start.
                let (store, next) = (act.store.clone(), next.lease.clone());
                act.sending += 1;
                ctx.spawn(
                    async move { give_back(&store, next, Duration::ZERO).await }
                        .into_actor(act)
                        .map(|(), act, _| {
                            act.sending -= 1;
                            act.notify_drained();
                        }),
                );
            }
            if act.stopping {
                act.notify_drained();
                return;
            }
            match next {
                Some(next) => act.send(next.lease, chain + 1, next.cleared, ctx),
                // Room for one more send; the row behind this one may be due now.
                None => act.claim(ctx),
            }
        }));
    }

    /// Answers the shutdown once no send runs.
    fn notify_drained(&mut self) {
        if self.sending == 0 {
            for tx in self.drained.drain(..) {
                let _ = tx.send(());
            }
        }
    }
}

/// Rows of one key sent in a row, each leased with the previous one's answer, before the key's
/// next row waits for a claim like any other (so a long backlog to one destination does not
/// keep its send slot while other destinations wait).
const CHAIN: u32 = 8;

/// Writes down that the row's send starts now, before the platform call (see
/// [`Queue::mark_send_started_in`](relayq_engine::Queue::mark_send_started_in)): after a crash
/// the row is known to be a possible repeat. False when the send must not start (the lease was
/// lost, or the mark could not be written: the lease runs out and the row is tried again).
async fn mark_send_started(store: &Store, lease: &Lease) -> bool {
    let l = lease.clone();
    let mark = store.write(move |s, tx| s.outbound.mark_send_started_in(tx, &l, s.outbound.now()));
    match mark.await {
        Ok(true) => true,
        Ok(false) => {
            tracing::info!(row = lease.id, "lease lost before the send; not sent");
            false
        }
        Err(e) => {
            tracing::warn!(row = lease.id, error = %e, "cannot mark the send started; not sent");
            false
        }
    }
}

/// A leased row goes back unsent, its attempt not counted, due after `wait`: its budget is
/// spent, its channel paused or not ready, or the sender is stopping. A send-started mark set
/// with its lease (see [`Then::LeaseToSend`]) is undone: the mark is what the lease found.
async fn give_back(store: &Store, lease: Lease, wait: Duration) {
    let (row, key) = (lease.id, lease.key.clone());
    let give_back = store.write(move |s, tx| {
        let q = &s.outbound;
        q.restore_send_started_in(tx, &lease)?;
        q.defer_in(tx, std::slice::from_ref(&lease), wait, q.now())
    });
    match give_back.await {
        Ok(_) => tracing::debug!(row, key, ?wait, "given back unsent"),
        Err(e) => {
            tracing::warn!(row, error = %e, "cannot give a row back; it returns when its lease expires")
        }
    }
}

impl Actor for OutboundSender {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.claim(ctx);
    }
}

impl Handler<ClaimOutbound> for OutboundSender {
    type Result = ();
    fn handle(&mut self, _: ClaimOutbound, ctx: &mut Context<Self>) {
        self.claim(ctx);
    }
}

impl Handler<Shutdown> for OutboundSender {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, Shutdown { grace }: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        let sends = (self.sending > 0).then(|| {
            let (tx, rx) = oneshot::channel();
            self.drained.push(tx);
            rx
        });
        Box::pin(async move {
            if let Some(rx) = sends {
                if tokio::time::timeout(grace, rx).await.is_err() {
                    tracing::warn!(?grace, "sends still running after the grace period; they will be retried at next start");
                }
            }
        })
    }
}
