//! The one actor that runs any [`Source`]: fetch from the stored offset, hand the batch to the
//! SupervisorActor, which writes the rows and the new offset in one transaction, then fetch again.
//!
//! A source has one reader among the nodes sharing a database: the actor reads only while its
//! node holds the source's lease (`relayq_engine::source_leases`), renewed on a timer;
//! another node's actor waits, and takes over once the lease is let go or runs out.

use std::time::Duration;

use std::sync::Arc;

use actix::prelude::*;

use relayq_engine::inbound::writes::{ReleaseSourceLease, TakeSourceLease};
use relayq_engine::source_leases::SOURCE_RENEW;

use super::contract::{Batch, Source};
use crate::inbound::supervisor::EnqueueFrom;
use crate::lifecycle::Stop;
use crate::pacing::Budgets;
use crate::store::Store;

/// After an empty batch, at least this long before the next fetch (a source that does not
/// wait when idle must not spin).
const IDLE_PAUSE: Duration = Duration::from_millis(50);

/// While another node reads the source, ask for its lease this often.
const LEASE_RETRY: Duration = Duration::from_secs(1);

/// After a failure, wait this long, doubled each time in a row, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub struct SourceActor<S: Source> {
    name: String,
    source: S,
    store: Store,
    enqueue: Recipient<EnqueueFrom>,
    /// The reply channel's budgets, for the source's cosmetic calls.
    budget: Option<Arc<dyn Budgets>>,
    /// Where the next fetch starts: the stored offset, once read.
    offset: Option<String>,
    failures: u32,
    /// Whether this node holds the source's lease (it reads only then).
    held: bool,
    /// The node said to read it, so a wait is said once.
    read_elsewhere: bool,
}

impl<S: Source> SourceActor<S> {
    pub fn new(
        name: String,
        source: S,
        store: Store,
        enqueue: Recipient<EnqueueFrom>,
        budget: Option<Arc<dyn Budgets>>,
    ) -> Self {
        let mut source = source;
        source.named(&name);
        SourceActor {
            name,
            source,
            store,
            enqueue,
            budget,
            offset: None,
            failures: 0,
            held: false,
            read_elsewhere: false,
        }
    }

    /// Takes the source's lease, then reads from the stored offset (another node may have
    /// moved it); while another node holds it, asks again every [`LEASE_RETRY`].
    fn acquire(&mut self, ctx: &mut Context<Self>) {
        let name = self.name.clone();
        let take = self.store.apply(TakeSourceLease(name));
        ctx.spawn(take.into_actor(self).map(|taken, act, ctx| match taken {
            Ok(true) => {
                act.held = true;
                act.read_elsewhere = false;
                act.resume(ctx);
            }
            Ok(false) => {
                if !act.read_elsewhere {
                    tracing::info!(source = act.name, "another node reads this source; taking over if it stops");
                    act.read_elsewhere = true;
                }
                ctx.run_later(LEASE_RETRY, Self::acquire);
            }
            Err(e) => {
                tracing::warn!(source = act.name, error = %e, "cannot take the source's lease; trying again");
                ctx.run_later(LEASE_RETRY, Self::acquire);
            }
        }));
    }

    /// Renews the lease while it is held; a lease lost (not renewed in time) stops the reads
    /// after the fetch under way, until it is taken again.
    fn renew(&mut self, ctx: &mut Context<Self>) {
        if !self.held {
            return;
        }
        let name = self.name.clone();
        let renew = self.store.apply(TakeSourceLease(name));
        ctx.spawn(renew.into_actor(self).map(|renewed, act, _| match renewed {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(source = act.name, "the source's lease was taken by another node; reading stops");
                act.held = false;
            }
            Err(e) => tracing::warn!(source = act.name, error = %e, "cannot renew the source's lease; trying again"),
        }));
    }

    /// Reads the stored offset, then starts fetching.
    fn resume(&mut self, ctx: &mut Context<Self>) {
        let name = self.name.clone();
        let read = self.store.run(move |s| s.engine.source_offset(&name));
        ctx.spawn(read.into_actor(self).map(|result, act, ctx| match result {
            Ok(offset) => {
                tracing::info!(source = act.name, offset = ?offset, "source reading");
                act.offset = offset;
                act.fetch(ctx);
            }
            Err(e) => act.failed(
                format!("cannot read the stored offset: {e}"),
                ctx,
                Self::resume,
            ),
        }));
    }

    fn fetch(&mut self, ctx: &mut Context<Self>) {
        if !self.held {
            return self.acquire(ctx);
        }
        let fetch = self.source.fetch(self.offset.clone());
        ctx.spawn(fetch.into_actor(self).map(|result, act, ctx| match result {
            Ok(batch) if batch.carries_nothing() && act.offset.as_ref() == Some(&batch.offset) => {
                act.succeeded();
                ctx.run_later(IDLE_PAUSE, |act, ctx| act.fetch(ctx));
            }
            Ok(batch) => act.hand_over(batch, ctx),
            Err(e) => act.failed(e, ctx, Self::fetch),
        }));
    }

    /// Sends the batch to the SupervisorActor; the offset moves only once it is committed.
    fn hand_over(&mut self, batch: Batch, ctx: &mut Context<Self>) {
        let offset = batch.offset.clone();
        let messages = batch.messages.clone();
        let send = self.enqueue.send(EnqueueFrom {
            source: self.name.clone(),
            messages: batch.messages,
            answers: batch.answers,
            requests: batch.requests,
            offset: batch.offset,
        });
        ctx.spawn(send.into_actor(self).map(move |answer, act, ctx| {
            let results = match answer {
                Ok(Ok(recorded)) => {
                    if !recorded.answered.is_empty() {
                        act.source.acknowledge(recorded.answered);
                    }
                    if !recorded.taps.is_empty() {
                        act.source.tapped(recorded.taps);
                    }
                    recorded.rows
                }
                Ok(Err(e)) => return act.failed(e.to_string(), ctx, Self::fetch),
                Err(e) => return act.failed(e.to_string(), ctx, Self::fetch),
            };
            let mut new = Vec::new();
            for (n, (result, message)) in results.iter().zip(messages).enumerate() {
                match result {
                    Err(why) => {
                        tracing::error!(source = act.name, message = n, offset = %offset, "message not enqueued: {why}")
                    }
                    Ok(Some(row)) if !row.duplicate && row.expired.is_none() => new.push(message),
                    Ok(_) => {}
                }
            }
            act.source.taken();
            if !new.is_empty() {
                act.source.committed(new, act.budget.clone());
            }
            tracing::debug!(source = act.name, rows = results.len(), offset = %offset, "batch enqueued");
            act.offset = Some(offset);
            act.succeeded();
            act.fetch(ctx);
        }));
    }

    /// Logs the failure and runs `again` after the backoff, from the same offset.
    /// A fetch worked: the source is ready again.
    fn succeeded(&mut self) {
        if std::mem::take(&mut self.failures) >= 2 {
            self.store.readiness.ready(&format!("source {}", self.name));
        }
    }

    fn failed(
        &mut self,
        error: String,
        ctx: &mut Context<Self>,
        again: fn(&mut Self, &mut Context<Self>),
    ) {
        let wait = FIRST_BACKOFF
            .saturating_mul(1 << self.failures.min(10))
            .min(MAX_BACKOFF);
        self.failures += 1;
        // A source that fails again and again is said in `relayq status` (a refused token).
        if self.failures >= 2 {
            let what = format!("source {}", self.name);
            self.store.readiness.not_ready(&what, &error);
        }
        self.source.reset();
        tracing::warn!(source = self.name, error = %error, retry_in = ?wait, "source failed; trying again from the same offset");
        ctx.run_later(wait, again);
    }
}

impl<S: Source> Actor for SourceActor<S> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(SOURCE_RENEW, Self::renew);
        self.acquire(ctx);
    }
}

/// Stops reading and lets the lease go, so another node reads at once. A batch already handed
/// over is still written (with its offset) or not at all.
impl<S: Source> Handler<Stop> for SourceActor<S> {
    type Result = ();
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        if self.held {
            let name = self.name.clone();
            let release = self.store.apply(ReleaseSourceLease(name));
            actix::spawn(async move {
                if let Err(e) = release.await {
                    tracing::warn!(error = %e, "the source's lease was not let go; another node takes it once it runs out");
                }
            });
        }
        ctx.stop();
    }
}
