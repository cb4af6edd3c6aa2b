//! RecoveryActor: at start, takes back the leases a previous process left and resumes every
//! session with pending rows; then, on timers, reclaims expired leases, expires rows past their
//! max age, re-resumes sessions (a safety net for lost wake-ups) and, from a minute after
//! start, prunes by retention.

use std::time::Duration;

use actix::prelude::*;
use relayq_engine::writes::upkeep::TellWaitingOnGoneNodes;
use relayq_engine::writes::upkeep::{ExpireOverdue, Reclaim, ReclaimLeases};
use relayq_engine::QueueName;

use crate::inbound::supervisor::Resume;
use crate::lifecycle::Stop;
use crate::store::Store;
use crate::wake::Wakers;

/// The first prune waits this long after start (or one `prune_interval`, if shorter): a
/// restart's backlog is sent first. On PostgreSQL a prune reads the whole table (the index of
/// finished rows cost every delivery more than it saved the prune), and three nodes starting
/// together each pruned beside their drain.
const FIRST_PRUNE_AFTER: Duration = Duration::from_secs(60);

pub struct RecoveryActor {
    store: Store,
    wakers: Wakers,
    sweep_interval: Duration,
    prune_interval: Duration,
    /// What was last said of the database file (deleted, replaced), so it is said once.
    file_problem: Option<String>,
    /// No other daemon serves the database (see [`DaemonLock::sole`]): at start, every lease
    /// this daemon does not own is taken back, not only expired ones.
    ///
    /// [`DaemonLock::sole`]: crate::daemon_lock::DaemonLock::sole
    sole: bool,
}

impl RecoveryActor {
    pub fn new(
        store: Store,
        wakers: Wakers,
        sweep_interval: Duration,
        prune_interval: Duration,
        sole: bool,
    ) -> Self {
        RecoveryActor {
            store,
            wakers,
            sweep_interval,
            prune_interval,
            file_problem: None,
            sole,
        }
    }

    /// Says, once each time it changes, whether the database file was deleted or replaced
    /// under the daemon (its rows would then reach no other command). The file is looked at
    /// on the store's blocking threads, not the actor's.
    fn check_file(&mut self, ctx: &mut Context<Self>) {
        let store = self.store.clone();
        let look = async move {
            store
                .run(|s| Ok(s.engine.database().file_still_there().err()))
                .await
        };
        ctx.spawn(look.into_actor(self).map(|problem, act, _| {
            let Ok(problem) = problem else { return };
            if problem != act.file_problem {
                match &problem {
                    Some(why) => tracing::error!("{why}"),
                    None => tracing::info!("the database file is back as it was opened"),
                }
                act.file_problem = problem;
            }
        }));
    }

    fn sweep(&mut self, ctx: &mut Context<Self>, at_start: bool) {
        self.check_file(ctx);
        let store = self.store.clone();
        let wakers = self.wakers.clone();
        let (take_all, shared) = (at_start && self.sole, !self.sole);
        let work = async move {
            let reclaim = match (take_all, shared) {
                (true, _) => Reclaim::Foreign,
                // Several nodes: the leases of daemons no live node holds (a node lost, or
                // restarted) are not left to run out.
                (false, true) => Reclaim::ExpiredAndLost,
                (false, false) => Reclaim::Expired,
            };
            let found = async {
                let reclaimed = store.apply_alone(ReclaimLeases(reclaim)).await?;
                let expired = store.apply_alone(ExpireOverdue).await?;
                // Hook events `relayq hook` could not write in time (the claim below takes
                // them).
                let sessions = store
                    .run(move |s| {
                        let spool = relayq_engine::hooks::spool::dir(s.engine.database().path());
                        let spooled = relayq_engine::hooks::spool::drain(&s.door, &spool)?;
                        tell_why_spooled(&spooled, &spool);
                        let mut sessions = s.inbound.active_keys()?;
                        if shared {
                            // Sessions whose agents run on other nodes are theirs to deliver.
                            let elsewhere = s.engine.sessions_elsewhere()?;
                            sessions.retain(|key| !elsewhere.contains(key));
                        }
                        Ok(sessions)
                    })
                    .await?;
                Ok::<_, crate::ActorError>((reclaimed, expired, sessions))
            }
            .await;
            if shared {
                // Unless that node is gone: its chats hear why their messages wait.
                match store.apply(TellWaitingOnGoneNodes).await {
                    Ok(told) => {
                        if !told.is_empty() {
                            tracing::warn!(messages = told.len(), "messages wait for the node their session's agent runs on, which is gone; their chats are told");
                        }
                        store.waking.outbound_written(told);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot tell the chats whose messages wait for a node that is gone; the next sweep tries again")
                    }
                }
            }
            match found {
                Ok((reclaimed, expired, mut sessions)) => {
                    store.metrics.leases_reclaimed(reclaimed);
                    // A paused session's actor would only find it paused.
                    sessions.retain(|s| !store.pauses.holds(QueueName::Inbound, s));
                    if at_start || reclaimed > 0 || expired > 0 {
                        tracing::info!(
                            reclaimed,
                            expired,
                            sessions = sessions.len(),
                            at_start,
                            "recovery sweep"
                        );
                    }
                    match reclaimed {
                        0 => wakers.resume.do_send(Resume(sessions)),
                        // A running session may be waiting for a lease that is now taken
                        // back (it looked before this sweep, and waits for the lease's end):
                        // every session looks again, not only those with no actor.
                        _ => sessions
                            .iter()
                            .for_each(|s| wakers.wake(QueueName::Inbound, s)),
                    }
                    // A lost wake-up for the other queues costs at most one sweep interval.
                    wakers.claim_all();
                }
                Err(e) => tracing::error!(error = %e, "recovery sweep failed"),
            }
        };
        ctx.spawn(work.into_actor(self));
    }

    fn prune(&mut self, ctx: &mut Context<Self>) {
        let store = self.store.clone();
        let work = async move {
            let pruned = store
                .run(|s| {
                    Ok(s.inbound.prune(None, false)?
                        + s.hooks.prune(None, false)?
                        + s.outbound.prune(None, false)?)
                })
                .await;
            match pruned {
                Ok(0) => {}
                Ok(n) => tracing::info!(pruned = n, "pruned finished rows past retention"),
                Err(e) => tracing::error!(error = %e, "prune failed"),
            }
            let forgotten = store
                .apply_alone(relayq_engine::progress::writes::PruneReactions)
                .await;
            match forgotten {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(forgotten = n, "forgot the reactions of messages a day old")
                }
                Err(e) => tracing::error!(error = %e, "prune of reactions failed"),
            }
            let forgotten = store
                .apply_alone(relayq_engine::inbound::writes::ForgetAlbumParts)
                .await;
            if let Err(e) = forgotten {
                tracing::error!(error = %e, "prune of album messages failed");
            }
        };
        ctx.spawn(work.into_actor(self));
    }
}

impl Actor for RecoveryActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.sweep(ctx, true);
        ctx.run_interval(self.sweep_interval, |act, ctx| act.sweep(ctx, false));
        let first = self.prune_interval.min(FIRST_PRUNE_AFTER);
        ctx.run_later(first, |act, ctx| {
            act.prune(ctx);
            ctx.run_interval(act.prune_interval, |act, ctx| act.prune(ctx));
        });
    }
}

impl Handler<Stop> for RecoveryActor {
    type Result = ();
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// Why `relayq hook` spooled the events just recorded, as the hooks said it (their stderr is
/// seldom seen): one line per reason.
fn tell_why_spooled(spooled: &[relayq_engine::hooks::spool::Drained], spool: &std::path::Path) {
    if spooled.is_empty() {
        return;
    }
    let whys: std::collections::BTreeSet<&str> = spooled
        .iter()
        .map(|d| d.why.as_deref().unwrap_or("the database was locked"))
        .collect();
    for why in whys {
        tracing::warn!(events = spooled.len(), spool = %spool.display(), why, "recorded hook events that `relayq hook` could not record itself; their answers were late: fix what the reason says in the agent's environment");
    }
}
