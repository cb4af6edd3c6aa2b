//! SessionActor: one per session with pending inbound rows. Delivers the session's rows one at
//! a time, oldest first, leased in runs ([`run`]); sleeps until a scheduled retry is due; tells
//! the SupervisorActor when it has nothing left so it can be stopped. No polling: new rows
//! arrive as `Wake` messages. A session whose channel waits for its agent goes one message at a
//! time ([`agent_wait`]); which node delivers a session that several serve is [`placement`]'s
//! to say. The actor's states are flows.md's (see [`State`]).

use std::time::{Duration, Instant};

use actix::prelude::*;
use relayq_engine::writes::runs::{LeaseNext, RowRecorded, RunRecorded};
use relayq_engine::writes::upkeep::ReleaseOwnLeases;
use relayq_engine::{Head, InboundMessage, Lease, QueueName};

use crate::channels::{AgentHints, ChannelDirectory, Content, Outcome};
use crate::delivery::{try_delivery, AnswerToRecord, Tried};
use crate::files::prepare::prepare_leased;
use crate::files::Files;
use crate::lifecycle::{Stop, Stopping};
use crate::runs::NotRecorded;
use crate::store::Store;

pub mod agent_wait;
pub mod placement;
pub mod run;

use agent_wait::Awaiting;
pub use agent_wait::Busy;
use placement::{handed_on_look, Placement};
use run::{ForWrite, SessionRun, FAST_DELIVERY};

/// New rows may be due for this session.
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct Wake;

/// Where a session's messages go, and what they do while its agent is busy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub channel: String,
    pub busy: Busy,
}

/// Deliver this session's next rows by this route (the config was reloaded).
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "()")]
pub struct UseChannel(pub Route);

/// The session has nothing left to do (to the SupervisorActor, which stops it unless a wake is
/// still on its way to it).
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "()")]
pub struct SessionIdle {
    pub session: String,
    /// Wake messages handled; compared with the wakes sent.
    pub wakes_seen: u64,
}

/// What the actor is doing: the rows of flows.md's "The SessionActor's states". A Wake that
/// comes while it [runs](State::runs) only notes `woken`: the step after looks again.
enum State {
    /// Nothing runs and no timer is armed: between steps, or nothing is due (the supervisor
    /// was told, `SessionIdle`).
    Idle,
    /// Its first step, replacing an actor that died: frees the leases that one held.
    Releasing,
    /// Records the answers, gives rows back, leases the next run.
    Writing,
    /// One row at its channel.
    Delivering,
    /// A timer: the head falls due, a lease ends, a retry, or a moment left to other nodes.
    Waiting(SpawnHandle),
    /// A message handed to the agent waits for its word; the timer is the channel's next look.
    Awaiting(SpawnHandle),
    /// Awaiting, reading whether the agent took the message (on a Wake, or at the look).
    Checking,
    /// Stopping: records what it holds, then stops.
    Finishing,
}

impl State {
    /// A write, a delivery or a read is running.
    fn runs(&self) -> bool {
        !matches!(self, State::Idle | State::Waiting(_) | State::Awaiting(_))
    }
}

pub struct SessionActor {
    session: String,
    channel: String,
    busy_setting: Busy,
    /// What the row leased last must be sent with (see `AgentHints`).
    agent_hints: AgentHints,
    /// The message handed to the agent and not yet confirmed.
    awaiting: Option<Awaiting>,
    store: Store,
    channels: ChannelDirectory,
    /// Told when the session has nothing left to do.
    idle: Recipient<SessionIdle>,
    state: State,
    /// A Wake came while the actor ran: look again after this step.
    woken: bool,
    /// Wake messages handled, reported with `SessionIdle` so the SupervisorActor can tell whether a
    /// wake is still in flight.
    wakes_seen: u64,
    /// Which node delivers the session, when several serve it.
    placement: Placement,
    stopping: Stopping,
    /// The previous actor of this session died holding leases: free them before the first step.
    release_leases_first: bool,
    /// The rows leased and the answers not recorded yet.
    run: SessionRun,
    /// What a message's files are fetched with.
    files: Files,
}

impl SessionActor {
    pub fn new(
        session: String,
        route: Route,
        store: Store,
        channels: ChannelDirectory,
        idle: Recipient<SessionIdle>,
        release_leases_first: bool,
        files: Files,
    ) -> Self {
        SessionActor {
            session,
            channel: route.channel,
            busy_setting: route.busy,
            agent_hints: AgentHints::default(),
            awaiting: None,
            placement: Placement::new(store.engine.clone()),
            store,
            channels,
            idle,
            state: State::Idle,
            woken: false,
            wakes_seen: 0,
            stopping: Stopping::default(),
            release_leases_first,
            run: SessionRun::default(),
            files,
        }
    }

    /// Runs the next step: release leases once, deliver the next leased row, or write (record
    /// the answers and lease the next run).
    fn step(&mut self, ctx: &mut Context<Self>) {
        if self.state.runs() {
            self.woken = true;
            return;
        }
        if self.stopping.requested() {
            self.finish(ctx);
            return;
        }
        self.woken = false;
        self.placement.stepped();
        self.cancel_timer(ctx);
        if std::mem::take(&mut self.release_leases_first) {
            self.state = State::Releasing;
            let key = self.session.clone();
            let release = self.store.apply(ReleaseOwnLeases {
                queue: QueueName::Inbound,
                key,
                give_back: Vec::new(),
            });
            ctx.spawn(release.into_actor(self).map(|result, act, ctx| {
                act.state = State::Idle;
                match result {
                    Ok(_) => act.step(ctx),
                    Err(e) => {
                        tracing::error!(session = act.session, error = %e, "cannot release the leases of the previous actor");
                        act.release_leases_first = true;
                        act.retry_later(ctx);
                    }
                }
            }));
            return;
        }
        if self.awaiting.is_some() && self.run.answers.is_empty() {
            self.check_awaiting(ctx);
            return;
        }
        let lease_timeout = self.store.inbound.policy().lease_timeout;
        match (!self.paused()).then(|| self.run.next(lease_timeout)) {
            Some(Some(lease)) => {
                // A row whose send started before (a crash, a stop) is looked at, not pasted.
                let look =
                    (lease.send_started.is_some() && self.agent_confirms().is_some()).then_some(0);
                let hints = AgentHints {
                    look,
                    paste_unseen: look.is_some(),
                    ..std::mem::take(&mut self.agent_hints)
                };
                self.deliver(lease, hints, ctx)
            }
            _ => self.write(ctx),
        }
    }

    /// Cancels the timer armed, if any: the actor is between steps.
    fn cancel_timer(&mut self, ctx: &mut Context<Self>) {
        if let State::Waiting(timer) | State::Awaiting(timer) = &self.state {
            ctx.cancel_future(*timer);
            self.state = State::Idle;
        }
    }

    /// The operator paused this session or the inbound queue: no row is delivered or leased
    /// until resumed (the rows leased are given back, uncounted).
    fn paused(&self) -> bool {
        self.store.pauses.holds(QueueName::Inbound, &self.session)
    }

    /// How long the session's agent has to confirm a message, when its channel waits for one
    /// (see `Channel::confirms_within`).
    fn agent_confirms(&self) -> Option<Duration> {
        self.channels.confirms_within(&self.channel)
    }

    /// Delivers `lease`, or with `hints.look`, has its channel look at it again (see
    /// `AgentHints`).
    fn deliver(&mut self, mut lease: Lease, hints: AgentHints, ctx: &mut Context<Self>) {
        self.state = State::Delivering;
        // Read once here; the answered row (kept, cloned for the log) needs no payload, but a
        // message that waits for its agent keeps it for the next look.
        let payload = std::mem::take(&mut lease.payload);
        let message = InboundMessage::from_payload(&payload);
        let origin = message.as_ref().ok().and_then(InboundMessage::reply_origin);
        let message = message.map(|m| (self.channel.clone(), Content::Inbound(m)));
        let (store, channels, files) = (
            self.store.clone(),
            self.channels.clone(),
            self.files.clone(),
        );
        let tried = async move {
            let started = Instant::now();
            let queue = store.inbound.clone();
            // A message with files: fetched and its prompt kept before it goes to its channel.
            let (message, prepared) = match message {
                Ok((channel, Content::Inbound(m))) if m.needs_fetching() => {
                    match prepare_leased(&store, &queue, &lease, &files, m).await {
                        Ok(m) => {
                            let payload = m.to_row().payload;
                            (Ok((channel, Content::Inbound(m))), Some(payload))
                        }
                        Err(outcome) => {
                            let tried = Tried { channel, outcome };
                            let answered = AnswerToRecord::inbound(lease, tried, origin);
                            return (answered, started.elapsed(), None);
                        }
                    }
                }
                other => (other, None),
            };
            let tried = try_delivery(&store, &queue, &lease, &channels, message, hints).await;
            let answered = AnswerToRecord::inbound(lease, tried, origin);
            (answered, started.elapsed(), prepared)
        };
        ctx.spawn(
            tried
                .into_actor(self)
                .map(move |(answered, took, prepared), act, ctx| {
                    act.state = State::Idle;
                    if let Outcome::Submitted { wait, .. } = &answered.tried.outcome {
                        let mut lease = answered.lease.clone();
                        lease.payload = prepared.unwrap_or(payload);
                        act.awaiting = Some(Awaiting::handed(lease, &hints, *wait));
                    }
                    let slow = took >= FAST_DELIVERY;
                    act.run.answers.push(answered);
                    if slow {
                        act.write(ctx);
                    } else {
                        act.step(ctx);
                    }
                }),
        );
    }

    /// Records the answers; gives back the rest of the run when one failed; leases the next run
    /// when this one is used up.
    fn write(&mut self, ctx: &mut Context<Self>) {
        let paused = self.paused();
        let lease_timeout = self.store.inbound.policy().lease_timeout;
        let ForWrite {
            answers,
            since,
            give_back,
            failed,
            lease_next,
        } = self.run.take_for_write(paused, lease_timeout);
        let lease_next = lease_next && !paused && self.awaiting.is_none();
        // A busy node hands the session on between runs while another is idle; when none
        // took it within the moment, it leases the next run itself.
        let hand_on = self
            .placement
            .hand_on(lease_next && !failed && self.agent_confirms().is_none());
        if hand_on.now && answers.is_empty() {
            let (at, then) = handed_on_look();
            return self.look_at(at, then, ctx);
        }
        self.state = State::Writing;
        let next = match lease_next && !hand_on.now {
            true => self.next_to_lease(),
            false => LeaseNext::Nothing,
        };
        let given_back = give_back.clone();
        let lease_ends = Instant::now() + lease_timeout;
        let write = self.record(answers, give_back, next);
        ctx.spawn(write.into_actor(self).map(move |result, act, ctx| {
            act.state = State::Idle;
            match result {
                Ok(synced) => {
                    act.store.waking.outbound_written(synced.told);
                    if synced.recorded.contains(&RowRecorded::Stale) {
                        let dropped = act.run.lost();
                        tracing::info!(session = act.session, dropped, "a lease of this session was lost; its run is left to whoever holds it");
                    }
                    act.placement
                        .after_take_back(hand_on.taken_back, &synced.next, lease_timeout);
                    act.agent_hints = AgentHints {
                        look: None,
                        paste_unseen: false,
                        unsure: synced.for_agent.unsure,
                        steering: synced.for_agent.steering,
                    };
                    match (paused, hand_on.now) {
                        // Resuming wakes the session again.
                        (true, _) => act.go_idle(),
                        (false, true) => {
                            let (at, then) = handed_on_look();
                            act.look_at(at, then, ctx)
                        }
                        (false, false) => act.after_write(synced.next, lease_ends, ctx),
                    }
                }
                Err(NotRecorded { error, answers }) => {
                    // Nothing of it committed: the answers are kept (the rows were delivered)
                    // and recorded by the next try; the rows given back are still ours.
                    tracing::error!(session = act.session, error = %error, "cannot record deliveries or lease the next rows");
                    act.run.not_written(answers, since, given_back);
                    act.retry_later(ctx);
                }
            }
        }));
    }

    /// After a write that leased `next` (its leases ending at `lease_ends` at the earliest):
    /// delivers it, or waits for the session's head, or goes idle.
    fn after_write(
        &mut self,
        next: Option<Result<Vec<Lease>, Head>>,
        lease_ends: Instant,
        ctx: &mut Context<Self>,
    ) {
        let head = match next {
            None => return self.step(ctx),
            Some(Ok(run)) => {
                self.run.leased(run, lease_ends);
                return self.step(ctx);
            }
            Some(Err(head)) => head,
        };
        if self.stopping.requested() || self.woken {
            return self.step(ctx);
        }
        let now = self.store.engine.now();
        let wait_until = |at: i64| Duration::from_millis(at.saturating_sub(now).max(0) as u64);
        match head {
            Head::Due => self.step(ctx),
            Head::Empty => self.go_idle(),
            Head::NotBefore(at) => {
                let timer = ctx.run_later(wait_until(at), |act, ctx| act.step(ctx));
                self.state = State::Waiting(timer);
            }
            Head::LeasedUntil(at) => {
                self.placement
                    .look_again_at(Instant::now() + wait_until(at));
                let timer = ctx.run_later(wait_until(at), |act, ctx| act.look(ctx));
                self.state = State::Waiting(timer);
            }
        }
    }

    /// Nothing to do: the SupervisorActor may stop this actor.
    fn go_idle(&mut self) {
        self.state = State::Idle;
        self.idle.do_send(SessionIdle {
            session: self.session.clone(),
            wakes_seen: self.wakes_seen,
        });
    }

    /// The store failed: try again shortly.
    fn retry_later(&mut self, ctx: &mut Context<Self>) {
        let timer = ctx.run_later(Duration::from_secs(1), |act, ctx| act.step(ctx));
        self.state = State::Waiting(timer);
    }

    /// Stops, first recording the answers not yet recorded and giving back the rows leased but
    /// never attempted: their attempt is not counted and they are due at once for whoever runs
    /// next.
    fn finish(&mut self, ctx: &mut Context<Self>) {
        self.cancel_timer(ctx);
        // A message waiting for its agent is given back, its send mark kept: whoever runs
        // next looks at it rather than pasting it again.
        let awaiting = self.awaiting.take().map(|a| a.lease);
        if self.run.is_empty() && awaiting.is_none() {
            ctx.stop();
            return;
        }
        self.state = State::Finishing;
        let (answers, mut give_back) = self.run.take_all();
        give_back.extend(awaiting);
        let write = self.record(answers, give_back, LeaseNext::Nothing);
        ctx.wait(write.into_actor(self).map(|result, act, ctx| {
            match result {
                Ok(RunRecorded { told, .. }) => {
                    act.store.waking.outbound_written(told)
                }
                Err(NotRecorded { error, .. }) => {
                    tracing::warn!(error = %error, "cannot record the last answers or give back leased rows; they are retried when their lease expires");
                }
            }
            ctx.stop();
        }));
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.stopping.done();
    }
}

impl Handler<UseChannel> for SessionActor {
    type Result = ();
    fn handle(&mut self, UseChannel(route): UseChannel, _: &mut Context<Self>) {
        self.channel = route.channel;
        self.busy_setting = route.busy;
    }
}

impl Handler<Stop> for SessionActor {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) -> Self::Result {
        let stopped = self.stopping.wait();
        if !self.state.runs() {
            self.finish(ctx);
        }
        stopped
    }
}
