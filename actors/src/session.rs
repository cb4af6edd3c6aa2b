//! SessionActor: one per session with pending inbound rows. Delivers the session's rows one at
//! a time, oldest first; sleeps until a scheduled retry is due; tells the Supervisor when it
//! has nothing left so it can be stopped. No polling: new rows arrive as `Wake` messages.

use std::time::Duration;

use actix::prelude::*;
use relayq_engine::rusqlite::Transaction;
use relayq_engine::{Head, InboundMessage, Lease};
use tokio::sync::oneshot;

use crate::channels::{ChannelDirectory, Message};
use crate::delivery::deliver;
use crate::store::Store;
use crate::supervisor::{SessionIdle, Supervisor};

/// New rows may be due for this session.
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct Wake;

/// Finish the delivery in progress, then stop. Answers once stopped.
#[derive(Debug, actix::Message)]
#[rtype(result = "()")]
pub struct Stop;

/// What one step of the delivery loop found.
enum Step {
    /// A row was attempted and the next one leased in the same commit: deliver it at once.
    Next(Lease),
    /// Nothing to lease now; the head says when to look again.
    Waiting(Head),
    /// The store failed; try again shortly.
    Failed,
}

pub struct SessionActor {
    session: String,
    channel: String,
    store: Store,
    channels: ChannelDirectory,
    supervisor: Addr<Supervisor>,
    /// A step is running.
    busy: bool,
    /// A Wake came while busy: run another step after this one.
    woken: bool,
    /// Wake messages handled, reported with `SessionIdle` so the Supervisor can tell whether a
    /// wake is still in flight.
    wakes_seen: u64,
    timer: Option<SpawnHandle>,
    stopping: Vec<oneshot::Sender<()>>,
    /// The previous actor of this session died holding leases: free them before the first step.
    release_leases_first: bool,
    /// The row leased with the last answer, delivered by the next step.
    next: Option<Lease>,
}

impl SessionActor {
    pub fn new(
        session: String,
        channel: String,
        store: Store,
        channels: ChannelDirectory,
        supervisor: Addr<Supervisor>,
        release_leases_first: bool,
    ) -> Self {
        SessionActor {
            session,
            channel,
            store,
            channels,
            supervisor,
            busy: false,
            woken: false,
            wakes_seen: 0,
            timer: None,
            stopping: Vec::new(),
            release_leases_first,
            next: None,
        }
    }

    fn step(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            self.woken = true;
            return;
        }
        if !self.stopping.is_empty() {
            self.finish(ctx);
            return;
        }
        self.busy = true;
        self.woken = false;
        if let Some(t) = self.timer.take() {
            ctx.cancel_future(t);
        }
        let release = std::mem::take(&mut self.release_leases_first);
        let fut = deliver_next(
            self.session.clone(),
            self.channel.clone(),
            self.store.clone(),
            self.channels.clone(),
            release,
            self.next.take(),
        );
        ctx.spawn(fut.into_actor(self).map(|step, act, ctx| {
            act.busy = false;
            act.after(step, ctx);
        }));
    }

    fn after(&mut self, step: Step, ctx: &mut Context<Self>) {
        let step = match step {
            Step::Next(lease) => {
                self.next = Some(lease);
                Step::Waiting(Head::Due)
            }
            other => other,
        };
        if !self.stopping.is_empty() {
            self.finish(ctx);
            return;
        }
        let now = self.store.engine.now();
        let wait_until = |at: i64| Duration::from_millis(at.saturating_sub(now).max(0) as u64);
        match step {
            Step::Next(_) | Step::Waiting(Head::Due) => self.step(ctx),
            _ if self.woken => self.step(ctx),
            Step::Waiting(Head::Empty) => {
                self.supervisor.do_send(SessionIdle {
                    session: self.session.clone(),
                    wakes_seen: self.wakes_seen,
                });
            }
            Step::Waiting(Head::NotBefore(at)) | Step::Waiting(Head::LeasedUntil(at)) => {
                self.timer = Some(ctx.run_later(wait_until(at), |act, ctx| act.step(ctx)));
            }
            Step::Failed => {
                self.timer = Some(ctx.run_later(Duration::from_secs(1), |act, ctx| act.step(ctx)));
            }
        }
    }
}

impl SessionActor {
    /// Stops, first giving back the row leased with the last answer: it was never attempted,
    /// so its attempt is not counted and it is due at once for whoever runs next.
    fn finish(&mut self, ctx: &mut Context<Self>) {
        let Some(lease) = self.next.take() else {
            ctx.stop();
            return;
        };
        let give_back = self
            .store
            .run(move |s| s.inbound.defer(&lease, Duration::ZERO));
        ctx.wait(give_back.into_actor(self).map(|result, _, ctx| {
            if let Err(e) = result {
                tracing::warn!(error = %e, "cannot give back a leased row; it is retried when its lease expires");
            }
            ctx.stop();
        }));
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        for tx in self.stopping.drain(..) {
            let _ = tx.send(());
        }
    }
}

impl Handler<Wake> for SessionActor {
    type Result = ();
    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        self.wakes_seen += 1;
        self.step(ctx);
    }
}

impl Handler<Stop> for SessionActor {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.stopping.push(tx);
        if !self.busy {
            ctx.stop();
        }
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

/// Delivers `leased`, or leases the session's next due row and delivers it; the answer is
/// recorded in the same commit that leases the row after it.
async fn deliver_next(
    session: String,
    channel_name: String,
    store: Store,
    channels: ChannelDirectory,
    release: bool,
    leased: Option<Lease>,
) -> Step {
    if release {
        let key = session.clone();
        if let Err(e) = store.run(move |s| s.inbound.release_own_leases(&key)).await {
            tracing::error!(session, error = %e, "cannot release the leases of the previous actor");
            return Step::Failed;
        }
    }
    let lease = match leased {
        Some(lease) => lease,
        None => {
            let key = session.clone();
            match store.write(move |s, tx| lease_or_head(s, tx, &key)).await {
                Ok(Ok(lease)) => lease,
                Ok(Err(head)) => return Step::Waiting(head),
                Err(e) => {
                    tracing::error!(session, error = %e, "cannot lease the next row");
                    return Step::Failed;
                }
            }
        }
    };
    let message = InboundMessage::from_payload(&lease.payload)
        .map(|m| (channel_name.clone(), Message::Inbound(m)));
    let queue = store.inbound.clone();
    let key = session.clone();
    let then = move |s: &Store, tx: &Transaction<'_>| lease_or_head(s, tx, &key);
    match deliver(&store, &queue, &lease, &channels, message, then).await {
        Ok((_, Ok(next))) => Step::Next(next),
        Ok((_, Err(head))) => Step::Waiting(head),
        Err(e) => {
            tracing::error!(session, row = lease.id, error = %e, "cannot record the delivery outcome");
            Step::Failed
        }
    }
}

/// Leases the session's next due row, or says when to look again.
fn lease_or_head(
    s: &Store,
    tx: &Transaction<'_>,
    key: &str,
) -> relayq_engine::Result<Result<Lease, Head>> {
    let now = s.inbound.now();
    Ok(match s.inbound.lease_next_in(tx, key, now)? {
        Some(lease) => Ok(lease),
        None => Err(s.inbound.head_in(tx, key, now)?),
    })
}
