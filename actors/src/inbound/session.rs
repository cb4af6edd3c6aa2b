//! SessionActor: one per session with pending inbound rows. Delivers the session's rows one at
//! a time, oldest first; sleeps until a scheduled retry is due; tells the SupervisorActor when it
//! has nothing left so it can be stopped. No polling: new rows arrive as `Wake` messages.
//!
//! It leases the session's due rows in runs (one statement for up to [`RUN_LIMIT`] rows) and,
//! while the channel answers fast, records several answers in one commit, the one that leases
//! the next run: a busy session costs one commit per run, not one per message. A slow channel's
//! answers are recorded one by one, before the next delivery starts.
//!
//! A session whose channel waits for its agent (an agent's tmux pane, see
//! `Channel::confirms_within`) goes one message at a time, each when the agent can take it:
//!
//! ```text
//!   agent ready? ──no (working, a dialog)──▶ wait for a Wake (its hook events) or look again later
//!      │ yes
//!   lease one row, marked sent ─▶ paste ─▶ Submitted: the row stays in flight
//!                                              │ the agent's prompt-submit names it (hook handler)
//!                                              ▼
//!                                          delivered ─▶ next row
//!   no word within the wait ─▶ the channel looks at the pane: Enter again once, or fail saying why
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use actix::prelude::*;
use relayq_engine::writes::runs::{AgentWaits, GiveBack, LeaseNext, RowRecorded, RunRecorded};
use relayq_engine::writes::upkeep::ReleaseOwnLeases;
use relayq_engine::{Head, InboundMessage, Lease, QueueName};

use crate::channels::{AgentHints, ChannelDirectory, Content, Outcome};
use crate::delivery::{try_delivery, AnswerToRecord};
use crate::lifecycle::{Stop, Stopping};
use crate::runs::{record_run, NotRecorded, RunAnswers};
use crate::store::Store;

/// A session's next message while its agent works: see `SessionChannels::busy` (the supervisor's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Busy {
    /// Wait until the agent is ready: every message gets its own turn and its own answer.
    #[default]
    Wait,
    /// Paste during the turn (Claude Code queues it for a turn of its own; Codex folds it into
    /// the running turn; Gemini CLI takes it when the turn ends).
    Steer,
}

/// Most rows leased at once for one session.
pub const RUN_LIMIT: usize = 64;

/// A delivery answered within this is fast: the next row may go before its answer is recorded.
const FAST_DELIVERY: Duration = Duration::from_millis(1);

/// Answers wait unrecorded at most this long after the first of them. A crash repeats at most
/// the deliveries of this window, in order (at-least-once, as for any unrecorded delivery).
pub(crate) const RECORD_WITHIN: Duration = Duration::from_millis(5);

/// New rows may be due for this session.
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct Wake;

/// How soon a session whose head another lease holds (another node delivers it) looks again
/// when woken: a wake there is a row written behind that lease, which changes nothing until the
/// lease ends, so the looks of N nodes are spaced, not one write per wake per node.
pub const HELD_ELSEWHERE_LOOK: Duration = Duration::from_millis(100);

/// [`HELD_ELSEWHERE_LOOK`] on an idle node (`Engine::is_idle`): the holder may be a busy node
/// that hands the session on between runs (see [`LEAVE_TO_OTHERS_LOOK`]), and an idle node's
/// looks cost little.
pub const HELD_ELSEWHERE_LOOK_IDLE: Duration = Duration::from_millis(10);

/// How long a busy node waits before it looks at a session that has just become due (or
/// leases its next run), when another node is idle (`Engine::busier_than_others`): that node
/// is woken by the same row and takes it, so the busy node's writer keeps to its own work (the
/// messages it takes in, say, as the node that reads a source); when none has, this node looks
/// itself. Longer than an idle node's look ([`HELD_ELSEWHERE_LOOK_IDLE`]) and a lease's commit
/// take.
pub const LEAVE_TO_OTHERS_LOOK: Duration = Duration::from_millis(50);

/// How often a session waiting for its agent looks again when no Wake comes (its hook events
/// wake it as the agent's state changes).
pub const AGENT_LOOK_AGAIN: Duration = Duration::from_secs(15);

/// How long a dialog may stand with no event saying it was answered before relayq looks at
/// the agent's screen for its prompt, in waits for a confirmation (`confirm_within`): 30 s by
/// default (Claude Code's idle reminder comes after a minute; Codex and Gemini CLI say nothing
/// after a denial).
pub const STALE_ASK_WAITS: u32 = 3;

/// How long a turn may run with no event from the agent before relayq looks at its screen
/// for its prompt (its turn's end may have gone unreported: the agent crashed, was restarted,
/// or its hook failed), in waits for a confirmation: 2 min by default. The screen must show
/// the agent at its empty prompt with no turn running.
pub const STALE_WORK_WAITS: u32 = 12;

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

/// A message handed to an agent, waiting for the agent to say it took it.
struct Awaiting {
    lease: Lease,
    /// When the channel is asked to look at it (see `AgentHints::look`).
    look_at: Instant,
    /// What that look is told: which look it is, and how the row was sent.
    next: AgentHints,
}

/// The session has nothing left to do (to the SupervisorActor, which stops it unless a wake is
/// still on its way to it).
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "()")]
pub struct SessionIdle {
    pub session: String,
    /// Wake messages handled; compared with the wakes sent.
    pub wakes_seen: u64,
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
    /// A delivery or a write is running.
    busy: bool,
    /// A Wake came while busy: look again after this step.
    woken: bool,
    /// Wake messages handled, reported with `SessionIdle` so the SupervisorActor can tell whether a
    /// wake is still in flight.
    wakes_seen: u64,
    timer: Option<SpawnHandle>,
    /// The head is leased by another owner, or left to others: when `timer` looks again (see
    /// [`HELD_ELSEWHERE_LOOK`], [`LEAVE_TO_OTHERS_LOOK`]).
    held_elsewhere: Option<Instant>,
    /// The session was left to the others for a moment and none took it: this node leases
    /// its next run itself (`Some(true)`: it had handed the session on between runs).
    left: Option<bool>,
    stopping: Stopping,
    /// The previous actor of this session died holding leases: free them before the first step.
    release_leases_first: bool,
    /// Leased rows not yet attempted, oldest first.
    run: VecDeque<Lease>,
    /// When the run's leases end at the earliest (see [`SessionActor::run_running_out`]).
    run_leased_until: Option<Instant>,
    /// Delivered rows whose answers are not recorded yet, in delivery order.
    answers: RunAnswers,
}

impl SessionActor {
    pub fn new(
        session: String,
        route: Route,
        store: Store,
        channels: ChannelDirectory,
        idle: Recipient<SessionIdle>,
        release_leases_first: bool,
    ) -> Self {
        SessionActor {
            session,
            channel: route.channel,
            busy_setting: route.busy,
            agent_hints: AgentHints::default(),
            awaiting: None,
            store,
            channels,
            idle,
            busy: false,
            woken: false,
            wakes_seen: 0,
            timer: None,
            held_elsewhere: None,
            left: None,
            stopping: Stopping::default(),
            release_leases_first,
            run: VecDeque::new(),
            run_leased_until: None,
            answers: RunAnswers::new(RECORD_WITHIN),
        }
    }

    /// Runs the next step: release leases once, deliver the next leased row, or write (record
    /// the answers and lease the next run).
    fn step(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            self.woken = true;
            return;
        }
        if self.stopping.requested() {
            self.finish(ctx);
            return;
        }
        self.busy = true;
        self.woken = false;
        self.held_elsewhere = None;
        if let Some(t) = self.timer.take() {
            ctx.cancel_future(t);
        }
        if std::mem::take(&mut self.release_leases_first) {
            let key = self.session.clone();
            let release = self.store.apply(ReleaseOwnLeases {
                queue: QueueName::Inbound,
                key,
                give_back: Vec::new(),
            });
            ctx.spawn(release.into_actor(self).map(|result, act, ctx| {
                act.busy = false;
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
        if self.awaiting.is_some() && self.answers.is_empty() {
            self.check_awaiting(ctx);
            return;
        }
        match self.run.pop_front() {
            Some(lease) if !self.must_record() && !self.paused() && !self.run_running_out() => {
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
            other => {
                if let Some(lease) = other {
                    self.run.push_front(lease);
                }
                self.write(ctx);
            }
        }
    }

    /// The operator paused this session or the inbound queue: no row is delivered or leased
    /// until resumed (the rows leased are given back, uncounted).
    fn paused(&self) -> bool {
        self.store.pauses.holds(QueueName::Inbound, &self.session)
    }

    /// The answers must be recorded before another row goes: the last one failed (the rows
    /// after it must wait), the channel is slow, or the window is full.
    fn must_record(&self) -> bool {
        self.answers.due()
    }

    /// Whether the run's leases have less than half their timeout left: its rows are not
    /// delivered but leased again first. A lease that ran out while this node waited (a record
    /// held up, the database down) may be another node's by now, and fencing guards the row,
    /// not the delivery: the far end would get the row from both nodes. Timed by this host's
    /// monotonic clock from before the write that leased the run, which is never later than
    /// the database's expiry (a host's wall clock may be wrong).
    fn run_running_out(&self) -> bool {
        let half = self.store.inbound.policy().lease_timeout / 2;
        self.run_leased_until
            .is_none_or(|until| until.saturating_duration_since(Instant::now()) < half)
    }

    /// How rows leased and not delivered go back: a message pasted for an agent keeps its
    /// mark (it is looked at, not pasted twice); other runs are leased marked (see
    /// [`LeaseNext::Run`]) and their unsent rows lose the mark again.
    fn give_back_as(&self) -> GiveBack {
        match self.agent_confirms() {
            Some(_) => GiveBack::KeepMarks,
            None => GiveBack::UndoMarks,
        }
    }

    /// How long the session's agent has to confirm a message, when its channel waits for one
    /// (see `Channel::confirms_within`).
    fn agent_confirms(&self) -> Option<Duration> {
        self.channels.confirms_within(&self.channel)
    }

    /// Delivers `lease`, or with `hints.look`, has its channel look at it again (see
    /// `AgentHints`).
    fn deliver(&mut self, mut lease: Lease, hints: AgentHints, ctx: &mut Context<Self>) {
        // Read once here; the answered row (kept, cloned for the log) needs no payload, but a
        // message that waits for its agent keeps it for the next look.
        let payload = std::mem::take(&mut lease.payload);
        let message = InboundMessage::from_payload(&payload);
        let origin = message.as_ref().ok().and_then(InboundMessage::reply_origin);
        let message = message.map(|m| (self.channel.clone(), Content::Inbound(m)));
        let (store, channels) = (self.store.clone(), self.channels.clone());
        let tried = async move {
            let started = Instant::now();
            let queue = store.inbound.clone();
            let tried = try_delivery(&store, &queue, &lease, &channels, message, hints).await;
            let answered = AnswerToRecord::inbound(lease, tried, origin);
            (answered, started.elapsed())
        };
        ctx.spawn(
            tried
                .into_actor(self)
                .map(move |(answered, took), act, ctx| {
                    act.busy = false;
                    if let Outcome::Submitted { wait, .. } = &answered.tried.outcome {
                        let mut lease = answered.lease.clone();
                        lease.payload = payload;
                        act.awaiting = Some(Awaiting {
                            lease,
                            look_at: Instant::now() + *wait,
                            next: AgentHints {
                                look: Some(hints.look.map_or(1, |n| n + 1)),
                                steering: hints.steering,
                                paste_unseen: hints.paste_unseen,
                                ..AgentHints::default()
                            },
                        });
                    }
                    let slow = took >= FAST_DELIVERY;
                    act.answers.push(answered);
                    if slow {
                        act.write(ctx);
                    } else {
                        act.step(ctx);
                    }
                }),
        );
    }

    /// The session's write: `answers` recorded, `give_back` given back (marks kept), `next`
    /// leased.
    fn record(
        &self,
        answers: Vec<AnswerToRecord>,
        give_back: Vec<Lease>,
        next: LeaseNext,
    ) -> impl std::future::Future<Output = Result<RunRecorded, NotRecorded>> + 'static {
        record_run(
            &self.store,
            QueueName::Inbound,
            answers,
            give_back,
            self.give_back_as(),
            next,
        )
    }

    /// Records the answers; gives back the rest of the run when one failed; leases the next run
    /// when this one is used up.
    fn write(&mut self, ctx: &mut Context<Self>) {
        self.busy = true;
        let failed = self.answers.failed();
        let paused = self.paused();
        // The run's leases are running out: given back and leased again before the next row.
        let renew = !self.run.is_empty() && self.run_running_out();
        let (answers, since) = self.answers.take();
        let give_back: Vec<Lease> = match failed || paused || renew {
            true => self.run.drain(..).collect(),
            false => Vec::new(),
        };
        let lease_next =
            (failed || renew || self.run.is_empty()) && !paused && self.awaiting.is_none();
        // A busy node hands the session on between runs while another is idle; when none
        // took it within the moment, it leases the next run itself.
        let left = self.left.take();
        let hand_on = lease_next
            && !failed
            && left.is_none()
            && self.agent_confirms().is_none()
            && self.store.engine.busier_than_others();
        if hand_on && answers.is_empty() {
            self.busy = false;
            let at = Instant::now() + LEAVE_TO_OTHERS_LOOK;
            return self.look_at(at, Then::TakeBack { handed_on: true }, ctx);
        }
        let key = self.session.clone();
        let next = match (lease_next && !hand_on, self.agent_confirms()) {
            (false, _) => LeaseNext::Nothing,
            // Marked started as leased, so a row whose answer is not recorded (a kill, a lost
            // lease) is a possible repeat for whoever delivers it next; a channel that holds
            // possible repeats for an operator goes one row at a time, so only the row sent is.
            (true, None) => LeaseNext::Run {
                key,
                limit: match self.channels.sends_in_runs(&self.channel) {
                    true => RUN_LIMIT,
                    false => 1,
                },
                mark: true,
            },
            (true, Some(wait)) => LeaseNext::ForAgent {
                key,
                waits: AgentWaits {
                    steer: self.busy_setting == Busy::Steer,
                    ask: wait * STALE_ASK_WAITS,
                    work: wait * STALE_WORK_WAITS,
                    look_again: AGENT_LOOK_AGAIN,
                },
            },
        };
        let given_back = give_back.clone();
        let lease_ends = Instant::now() + self.store.inbound.policy().lease_timeout;
        let write = self.record(answers, give_back, next);
        ctx.spawn(write.into_actor(self).map(move |result, act, ctx| {
            act.busy = false;
            match result {
                Ok(synced) => {
                    act.store.waking.outbound_written(synced.told);
                    if synced.recorded.contains(&RowRecorded::Stale) {
                        // A lease was lost (another node took the session, or it ended): the
                        // rest of the run is not this node's to deliver.
                        tracing::info!(session = act.session, dropped = act.run.len(), "a lease of this session was lost; its run is left to whoever holds it");
                        act.run.clear();
                    }
                    if let Some(Ok(run)) = &synced.next {
                        if !run.is_empty() {
                            act.run_leased_until = Some(lease_ends);
                        }
                    }
                    if left == Some(true) {
                        let lease_timeout = act.store.inbound.policy().lease_timeout;
                        let taken = match &synced.next {
                            Some(Ok(run)) => run
                                .first()
                                .is_none_or(|head| !waited_all_along(head, lease_timeout)),
                            _ => true,
                        };
                        act.store.engine.handed_on(taken);
                    }
                    act.agent_hints = AgentHints {
                        look: None,
                        paste_unseen: false,
                        unsure: synced.for_agent.unsure,
                        steering: synced.for_agent.steering,
                    };
                    match (paused, hand_on) {
                        // Resuming wakes the session again.
                        (true, _) => act.go_idle(),
                        (false, true) => {
                            let at = Instant::now() + LEAVE_TO_OTHERS_LOOK;
                            act.look_at(at, Then::TakeBack { handed_on: true }, ctx)
                        }
                        (false, false) => act.after_write(synced.next, ctx),
                    }
                }
                Err(NotRecorded { error, answers }) => {
                    // Nothing of it committed: the answers are kept (the rows were delivered)
                    // and recorded by the next try; the rows given back are still ours.
                    tracing::error!(session = act.session, error = %error, "cannot record deliveries or lease the next rows");
                    act.answers.restore(answers, since);
                    act.run.extend(given_back);
                    act.retry_later(ctx);
                }
            }
        }));
    }

    fn after_write(&mut self, next: Option<Result<Vec<Lease>, Head>>, ctx: &mut Context<Self>) {
        let head = match next {
            None => return self.step(ctx),
            Some(Ok(run)) => {
                self.run.extend(run);
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
                self.timer = Some(ctx.run_later(wait_until(at), |act, ctx| act.step(ctx)));
            }
            Head::LeasedUntil(at) => {
                self.held_elsewhere = Some(Instant::now() + wait_until(at));
                self.timer = Some(ctx.run_later(wait_until(at), |act, ctx| act.look(ctx)));
            }
        }
    }

    /// A message handed to the agent waits for its word: done when the row is no longer in
    /// flight (the agent confirmed it, or it ended otherwise); past its wait, the channel looks
    /// at it again; otherwise wait on (a Wake comes with the agent's events).
    fn check_awaiting(&mut self, ctx: &mut Context<Self>) {
        let Some(awaiting) = &self.awaiting else {
            return self.step(ctx);
        };
        self.busy = true;
        let id = awaiting.lease.id;
        let read = self.store.run(move |s| s.inbound.state_of(id));
        ctx.spawn(read.into_actor(self).map(|result, act, ctx| {
            act.busy = false;
            match result {
                Ok(Some(row)) if row.state == "leased" => {
                    let Some(awaiting) = &act.awaiting else {
                        return act.step(ctx);
                    };
                    let left = awaiting.look_at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let awaiting = act.awaiting.take().expect("checked above");
                        act.busy = true;
                        act.deliver(awaiting.lease, awaiting.next, ctx);
                    } else {
                        act.timer = Some(ctx.run_later(left, |act, ctx| act.step(ctx)));
                    }
                }
                Ok(_) => {
                    // Confirmed by the agent (delivered), or ended some other way.
                    act.awaiting = None;
                    act.write(ctx);
                }
                Err(e) => {
                    tracing::error!(session = act.session, error = %e, "cannot read the row waiting for its agent");
                    act.retry_later(ctx);
                }
            }
        }));
    }

    /// Whether to leave the session to an idle node for a moment before looking: this node is
    /// busy, others are alive, and the session has nothing in hand here.
    fn leave_to_others(&self) -> bool {
        !self.busy
            && self.run.is_empty()
            && self.answers.is_empty()
            && self.awaiting.is_none()
            && self.store.engine.busier_than_others()
    }

    /// Looks at the session (a step), unless it is left to the others for a moment first.
    fn look(&mut self, ctx: &mut Context<Self>) {
        match self.leave_to_others() {
            true => {
                let at = Instant::now() + LEAVE_TO_OTHERS_LOOK;
                self.look_at(at, Then::TakeBack { handed_on: false }, ctx)
            }
            false => self.step(ctx),
        }
    }

    /// Looks at `at` as `then` says; wakes before then change nothing.
    fn look_at(&mut self, at: Instant, then: Then, ctx: &mut Context<Self>) {
        if let Some(t) = self.timer.take() {
            ctx.cancel_future(t);
        }
        self.held_elsewhere = Some(at);
        let wait = at.saturating_duration_since(Instant::now());
        self.timer = Some(ctx.run_later(wait, move |act, ctx| match then {
            Then::Look => act.look(ctx),
            Then::TakeBack { handed_on } => {
                act.left = Some(handed_on);
                act.step(ctx)
            }
        }));
    }

    /// Nothing to do: the SupervisorActor may stop this actor.
    fn go_idle(&self) {
        self.idle.do_send(SessionIdle {
            session: self.session.clone(),
            wakes_seen: self.wakes_seen,
        });
    }

    /// The store failed: try again shortly.
    fn retry_later(&mut self, ctx: &mut Context<Self>) {
        self.timer = Some(ctx.run_later(Duration::from_secs(1), |act, ctx| act.step(ctx)));
    }

    /// Stops, first recording the answers not yet recorded and giving back the rows leased but
    /// never attempted: their attempt is not counted and they are due at once for whoever runs
    /// next.
    fn finish(&mut self, ctx: &mut Context<Self>) {
        // A message waiting for its agent is given back, its send mark kept: whoever runs
        // next looks at it rather than pasting it again.
        let awaiting = self.awaiting.take().map(|a| a.lease);
        if self.answers.is_empty() && self.run.is_empty() && awaiting.is_none() {
            ctx.stop();
            return;
        }
        let (answers, _) = self.answers.take();
        let give_back: Vec<Lease> = self.run.drain(..).chain(awaiting).collect();
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

/// Whether the row leased first when a session handed on is taken back had waited since
/// before it was handed on: then no other node took the session. A newer row means one did,
/// delivered what was waiting and caught up, and this node came between two of its runs.
fn waited_all_along(head: &Lease, lease_timeout: Duration) -> bool {
    let leased_at = head.expires_at - lease_timeout.as_millis() as i64;
    let waited = Duration::from_millis(leased_at.saturating_sub(head.created_at).max(0) as u64);
    waited >= LEAVE_TO_OTHERS_LOOK
}

/// What a look armed for later does (see `SessionActor::look_at`).
#[derive(Debug, Clone, Copy)]
enum Then {
    /// Looks, or leaves the session to the others a moment longer (`SessionActor::look`).
    Look,
    /// Looks and leases: the others had their moment (`handed_on`: this node had handed the
    /// session on between runs, so if none took it they are busier than they said).
    TakeBack { handed_on: bool },
}

/// What a Wake does to a session.
#[derive(Debug, PartialEq, Eq)]
enum OnWake {
    /// Look now (or, on a busy node, in a moment: see [`SessionActor::look`]).
    Look,
    /// Look then, not at once (its head is another's lease).
    LookAt(Instant),
    /// The next look is soon enough.
    Nothing,
}

/// A wake makes a session look at once, unless another lease holds its head (`held_elsewhere`:
/// when it looks again): then within `within` ([`HELD_ELSEWHERE_LOOK`], or sooner on an idle
/// node), or with `None` not before it was to.
fn on_wake(held_elsewhere: Option<Instant>, within: Option<Duration>, now: Instant) -> OnWake {
    match (held_elsewhere, within) {
        (None, _) => OnWake::Look,
        (Some(_), None) => OnWake::Nothing,
        (Some(looks_at), Some(within)) if looks_at <= now + within => OnWake::Nothing,
        (Some(_), Some(within)) => OnWake::LookAt(now + within),
    }
}

impl Handler<Wake> for SessionActor {
    type Result = ();
    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        self.wakes_seen += 1;
        let engine = &self.store.engine;
        // A busy node leaves a session another node holds to it: its looks would only wait on
        // that node's row locks, in the busy node's writer (the lease's end still wakes it).
        let within = match (engine.is_idle(), engine.busier_than_others()) {
            (true, _) => Some(HELD_ELSEWHERE_LOOK_IDLE),
            (false, false) => Some(HELD_ELSEWHERE_LOOK),
            (false, true) => None,
        };
        match on_wake(self.held_elsewhere, within, Instant::now()) {
            OnWake::Look => self.look(ctx),
            OnWake::LookAt(at) => self.look_at(at, Then::Look, ctx),
            OnWake::Nothing => {}
        }
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
        if !self.busy {
            self.finish(ctx);
        }
        stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session handed on and taken back: its first row had waited the whole moment (no node
    /// took it), or is newer (another node took it, delivered what waited and caught up).
    #[test]
    fn a_session_taken_back_was_not_taken_only_if_its_head_waited_the_whole_moment() {
        let timeout = Duration::from_secs(300);
        let head = |created_at: i64, leased_at: i64| Lease {
            id: 1,
            key: "s".into(),
            payload: String::new(),
            attempts: 1,
            token: 1,
            expires_at: leased_at + timeout.as_millis() as i64,
            created_at,
            send_started: None,
            run: None,
        };
        let moment = LEAVE_TO_OTHERS_LOOK.as_millis() as i64;
        assert!(waited_all_along(&head(1_000, 1_000 + moment), timeout));
        assert!(!waited_all_along(&head(1_000, 1_003), timeout));
    }

    /// A row written behind another node's lease wakes every node serving the session; only
    /// the holder can deliver it, so the others look within `HELD_ELSEWHERE_LOOK`, once, not
    /// with a write per wake; a session with no such lease looks at once.
    #[test]
    fn a_wake_behind_another_nodes_lease_is_a_look_soon_not_a_write_per_wake() {
        let now = Instant::now();
        let within = Some(HELD_ELSEWHERE_LOOK);
        assert_eq!(on_wake(None, within, now), OnWake::Look);
        let lease_ends = now + Duration::from_secs(30);
        let soon = now + HELD_ELSEWHERE_LOOK;
        assert_eq!(on_wake(Some(lease_ends), within, now), OnWake::LookAt(soon));
        // The next wakes, with that look armed, add nothing.
        let later = now + Duration::from_millis(10);
        assert_eq!(on_wake(Some(soon), within, later), OnWake::Nothing);
        // A lease that ends sooner than the look is waited for as it was.
        let ends_soon = now + Duration::from_millis(20);
        assert_eq!(on_wake(Some(ends_soon), within, now), OnWake::Nothing);
        // A busy node (another is idle) waits for the lease's end; a free head it looks at.
        assert_eq!(on_wake(Some(lease_ends), None, now), OnWake::Nothing);
        assert_eq!(on_wake(None, None, now), OnWake::Look);
    }
}
