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
use crate::delivery::deliver;
use crate::lifecycle::Shutdown;
use crate::store::Store;

pub struct OutboundSender {
    store: Store,
    channels: ChannelDirectory,
    /// Most sends at once.
    in_flight: usize,
    sending: usize,
    claims: ClaimLoop,
    stopping: bool,
    drained: Vec<oneshot::Sender<()>>,
}

impl OutboundSender {
    pub fn new(store: Store, channels: ChannelDirectory, in_flight: usize) -> Self {
        OutboundSender {
            store,
            channels,
            in_flight,
            sending: 0,
            claims: ClaimLoop::default(),
            stopping: false,
            drained: Vec::new(),
        }
    }

    fn claim(&mut self, ctx: &mut Context<Self>) {
        let room = self.in_flight.saturating_sub(self.sending);
        if self.stopping || room == 0 || !self.claims.begin(ctx) {
            return;
        }
        let work = self
            .store
            .run(move |s| with_next_due(&s.outbound, s.outbound.lease_due(room)?, room));
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            act.claims.running = false;
            match result {
                Ok((leases, next)) => {
                    let full = leases.len() >= room;
                    for lease in leases {
                        act.send(lease, ctx);
                    }
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

    fn send(&mut self, lease: Lease, ctx: &mut Context<Self>) {
        self.sending += 1;
        let (store, channels) = (self.store.clone(), self.channels.clone());
        let send = async move {
            let message = OutboundMessage::from_payload(&lease.payload);
            if let Ok(m) = &message {
                // Paused channel first (no budget is spent on a row that cannot go), then the
                // budget, then the breaker's probe slot (taken last: only a send gives it back).
                if let Some(wait) = channels.penalty(&m.channel) {
                    return give_back_paced(&store, lease, wait).await;
                }
                if let Err(wait) = channels.pacer(&m.channel).map_or(Ok(()), |p| p.take(&m.to)) {
                    return give_back_paced(&store, lease, wait).await;
                }
                if let Err(wait) = channels.admit(&m.channel) {
                    return give_back_paced(&store, lease, wait).await;
                }
            }
            let message = message.map(|m| (m.channel.clone(), Content::Outbound(m)));
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
            act.claim(ctx);
        }));
    }
}

/// The destination's (or channel's) budget is spent: the row goes back, its attempt not
/// counted, due when the budget allows.
async fn give_back_paced(store: &Store, lease: Lease, wait: Duration) {
    let (row, key) = (lease.id, lease.key.clone());
    let give_back = store.write(move |s, tx| {
        let q = &s.outbound;
        q.defer_in(tx, std::slice::from_ref(&lease), wait, q.now())
    });
    match give_back.await {
        Ok(_) => tracing::debug!(row, key, ?wait, "paced: the row waits for its budget"),
        Err(e) => {
            tracing::warn!(row, error = %e, "cannot give a paced row back; it returns when its lease expires")
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
