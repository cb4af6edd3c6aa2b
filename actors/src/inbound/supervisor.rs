//! SupervisorActor: owns the SessionActors. NoticeRoutes enqueues and wake-ups to the session that owns
//! them (starting its actor on demand), replaces an actor that died, stops actors whose
//! session has nothing left, expires sessions, and drives a graceful shutdown.

use std::collections::BTreeMap;

use actix::prelude::*;
use relayq_engine::approvals::{Answered, ChatAnswer};
use relayq_engine::chat_sessions::SessionRequest;
use relayq_engine::writes::upkeep::ExpireKey;
use relayq_engine::{Enqueued, InboundMessage, QueueName};

use crate::channels::{ChannelDirectory, DialogOutcome, DialogRequest};
use crate::error::{ActorError, Result};
use crate::inbound::children::Children;
use crate::inbound::session::{self, Busy, SessionActor, SessionIdle};
use crate::lifecycle::{all_stopped, Shutdown, Stop};
use crate::store::Store;
pub use crate::wake::{Resume, WakeSession};

/// Which channel each session's messages go to (`[sessions]` in config.toml).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionChannels {
    /// The channel for sessions not listed in `channels`.
    pub default_channel: String,
    /// Per-session overrides: session id → channel name.
    pub channels: BTreeMap<String, String>,
    /// What a session's next message does while its agent is in a turn, per session (on a
    /// channel that waits for its agent, see `Channel::confirms_within`): `wait` (the default)
    /// for the agent to be ready, or `steer`: pasted during the turn.
    pub busy: BTreeMap<String, Busy>,
}

/// Every session to relayq's built-in `deliveries` channel.
impl Default for SessionChannels {
    fn default() -> Self {
        SessionChannels::all_to(crate::channels::DELIVERIES_CHANNEL)
    }
}

impl SessionChannels {
    /// Every session to `channel`.
    pub fn all_to(channel: &str) -> Self {
        SessionChannels {
            default_channel: channel.into(),
            channels: BTreeMap::new(),
            busy: BTreeMap::new(),
        }
    }

    pub fn channel_for(&self, session: &str) -> &str {
        self.channels.get(session).unwrap_or(&self.default_channel)
    }

    pub fn busy_for(&self, session: &str) -> Busy {
        self.busy.get(session).copied().unwrap_or_default()
    }
}

/// Enqueue an inbound message and wake its session. Answers once the row is committed.
#[derive(Debug, actix::Message)]
#[rtype(result = "Result<Enqueued>")]
pub struct Enqueue(pub InboundMessage);

/// A platform's message the queue cannot take whole (over `max_body_bytes`): kept expired and
/// cut, so it is counted and shown, never delivered (see
/// [`InboundMessage::refused_copy`](relayq_engine::InboundMessage::refused_copy)). Answers
/// its row, or `None` when the message is wrong in another way.
#[derive(Debug, actix::Message)]
#[rtype(result = "Result<Option<Enqueued>>")]
pub struct KeepRefused(pub InboundMessage);

/// A source's batch: enqueue the messages and store the source's new offset, in one
/// transaction, then wake their sessions. Answers, for each message in order, its row or why it
/// was refused (an invalid message is not written; the offset moves past it all the same).
#[derive(Debug, actix::Message)]
#[rtype(result = "Result<BatchRecorded>")]
pub struct EnqueueFrom {
    pub source: String,
    pub messages: Vec<InboundMessage>,
    /// Answers to agents' questions the batch carried, recorded in its transaction.
    pub answers: Vec<ChatAnswer>,
    /// Session requests (`/new`, a tap in `/sessions`), recorded in its transaction first.
    pub requests: Vec<SessionRequest>,
    pub offset: String,
}

/// What a source's batch wrote: each message's row (or why it was refused), and each answer
/// with the line for the person who gave it.
#[derive(Debug)]
pub struct BatchRecorded {
    /// Per message: its row, `None` when it was not taken (a stranger's), or why it failed.
    pub rows: Vec<std::result::Result<Option<Enqueued>, String>>,
    pub answered: Vec<Answered>,
    /// Session buttons tapped: each callback with the line to show where it was tapped.
    pub taps: Vec<(String, String)>,
}

/// Answers to agents' questions a platform pushed: recorded, then each with the line for the
/// person who answered.
#[derive(Debug, actix::Message)]
#[rtype(result = "Result<Vec<Answered>>")]
pub struct TakeChatAnswers(pub Vec<ChatAnswer>);

impl Handler<TakeChatAnswers> for SupervisorActor {
    type Result = ResponseActFuture<Self, Result<Vec<Answered>>>;

    fn handle(
        &mut self,
        TakeChatAnswers(answers): TakeChatAnswers,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let write = self
            .store
            .apply(relayq_engine::approvals::writes::RecordAnswers(answers));
        Box::pin(write.into_actor(self).map(|result, act, ctx| {
            let recorded = result?;
            Ok(act.answers_recorded(recorded, ctx))
        }))
    }
}

/// Session requests a platform pushed (`/new`, a session button tapped): recorded and
/// answered in their chats; each tap's callback with its line, once committed.
#[derive(Debug, actix::Message)]
#[rtype(result = "Result<Vec<(String, String)>>")]
pub struct TakeSessionRequests(pub Vec<SessionRequest>);

impl Handler<TakeSessionRequests> for SupervisorActor {
    type Result = ResponseActFuture<Self, Result<Vec<(String, String)>>>;

    fn handle(
        &mut self,
        TakeSessionRequests(requests): TakeSessionRequests,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let write = self
            .store
            .apply(relayq_engine::chat_sessions::RecordRequests(requests));
        Box::pin(write.into_actor(self).map(|result, act, _| {
            let recorded = result?;
            act.store.waking.outbound_written(recorded.outbound_keys);
            if recorded.ready > 0 {
                act.commands_ready();
            }
            Ok(recorded.taps)
        }))
    }
}

/// Look at, or answer by its keys, an agent's dialog, through the channel its session's
/// messages go to (see [`Channel::dialog`](crate::channels::Channel::dialog)). `None`: that
/// channel cannot.
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "Option<DialogOutcome>")]
pub struct AnswerDialog(pub DialogRequest);

/// Expire the session's pending rows and stop its actor. Answers with how many rows expired.
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "Result<usize>")]
pub struct ExpireSession(pub String);

/// The agent session ended (its `session_end` hook event was applied, which expired its
/// pending rows): stop its actor. A row enqueued later starts a new one.
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "()")]
pub struct SessionEnded(pub String);

/// Deliver sessions through these channels from now on (the config was reloaded); running
/// sessions switch channel after the delivery in progress.
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "()")]
pub struct SetSessionChannels(pub SessionChannels);

/// How many SessionActors are running (for status and tests).
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "usize")]
pub struct RunningSessions;

pub struct SupervisorActor {
    store: Store,
    channels: ChannelDirectory,
    session_channels: SessionChannels,
    max_body_bytes: usize,
    /// Each session's actor, with the wakes sent to it.
    sessions: Children<SessionActor>,
    shutting_down: bool,
    /// This node's launcher, told when a batch made session commands ready.
    launcher: Option<Recipient<crate::launcher::LookForCommands>>,
    /// What the sessions fetch their messages' files with.
    files: crate::files::Files,
}

impl SupervisorActor {
    pub fn new(
        store: Store,
        channels: ChannelDirectory,
        session_channels: SessionChannels,
        max_body_bytes: usize,
    ) -> Self {
        SupervisorActor {
            store,
            channels,
            session_channels,
            max_body_bytes,
            sessions: Children::default(),
            shutting_down: false,
            launcher: None,
            files: Default::default(),
        }
    }

    /// Messages' files are fetched with `files`.
    pub fn with_files(mut self, files: crate::files::Files) -> Self {
        self.files = files;
        self
    }

    /// Tells `launcher` when a batch makes session commands ready.
    pub fn with_launcher(mut self, launcher: Recipient<crate::launcher::LookForCommands>) -> Self {
        self.launcher = Some(launcher);
        self
    }

    /// What is kept of a platform's `message` over `max_body_bytes` (see [`KeepRefused`]),
    /// said in the log; `None` when it is wrong in another way.
    fn refused_copy(&self, message: &InboundMessage) -> Option<InboundMessage> {
        let copy = message.refused_copy(self.max_body_bytes)?;
        tracing::warn!(session = %copy.session.escape_debug(), origin = %copy.origin.escape_debug(),
            bytes = message.content.len(), max_body_bytes = self.max_body_bytes,
            "a platform's message over daemon.max_body_bytes was refused: kept expired and cut, not delivered");
        Some(copy)
    }

    fn wake(&mut self, session: &str, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        let (store, channels, idle, files) = (
            self.store.clone(),
            self.channels.clone(),
            ctx.address().recipient(),
            self.files.clone(),
        );
        let route = session::Route {
            channel: self.session_channels.channel_for(session).to_string(),
            busy: self.session_channels.busy_for(session),
        };
        // A replaced actor died holding leases: the new one frees them first.
        let running = self.sessions.get_or_start(session, |died| {
            SessionActor::new(
                session.to_string(),
                route,
                store,
                channels,
                idle,
                died,
                files,
            )
            .start()
        });
        running.sent += 1;
        running.addr.do_send(session::Wake);
    }
}

impl SupervisorActor {
    /// Starts the SupervisorActor with an unbounded mailbox, set before any message can arrive: a
    /// bounded mailbox makes `send` hold a message back when full and send it when its future
    /// is next polled, which would let a later enqueue overtake it.
    pub fn start_unbounded(self) -> Addr<SupervisorActor> {
        SupervisorActor::create(|ctx| {
            ctx.set_mailbox_capacity(0);
            self
        })
    }
}

impl Actor for SupervisorActor {
    type Context = Context<Self>;
}

impl Handler<Enqueue> for SupervisorActor {
    type Result = ResponseFuture<Result<Enqueued>>;

    fn handle(&mut self, Enqueue(message): Enqueue, ctx: &mut Context<Self>) -> Self::Result {
        if self.shutting_down {
            return Box::pin(std::future::ready(Err(ActorError::ShuttingDown)));
        }
        if let Err(e) = message.validate(self.max_body_bytes) {
            return Box::pin(std::future::ready(Err(e.into())));
        }
        // A session its channel can never reach (a tmux session id with ':') is refused here,
        // as `relayq enqueue` refuses it.
        // (A chat's message is routed in its write; the sessions a chat makes have names its
        // channel can reach.)
        let channel = self.session_channels.channel_for(&message.session);
        if let Some(why) = self
            .channels
            .refuses_address(channel, &message.session)
            .filter(|_| !message.route_by_chat)
        {
            let refused = crate::channels::session_refused(&message.session, channel, &why);
            return Box::pin(std::future::ready(Err(ActorError::Invalid(refused))));
        }
        // Submitted now, in mailbox order: enqueues commit in the order they were sent.
        let write = self
            .store
            .apply(relayq_engine::inbound::writes::EnqueueInbound(message));
        let waking = self.store.waking.clone();
        // Awaited in a task of its own, not in this actor's context, which polls every future
        // spawned into it at each wake: with many enqueues in flight, each answer cost as
        // many polls. The wake is queued before the caller hears of the commit.
        let me = ctx.address();
        Box::pin(async move {
            let taken = write.await?;
            waking.outbound_written(taken.told.into_iter().collect());
            if !taken.row.duplicate && taken.row.expired.is_none() {
                me.do_send(Committed(taken.session));
            }
            Ok(taken.row)
        })
    }
}

impl Handler<KeepRefused> for SupervisorActor {
    type Result = ResponseFuture<Result<Option<Enqueued>>>;

    fn handle(&mut self, KeepRefused(message): KeepRefused, _: &mut Context<Self>) -> Self::Result {
        let Some(copy) = self.refused_copy(&message) else {
            return Box::pin(std::future::ready(Ok(None)));
        };
        let write = self
            .store
            .apply(relayq_engine::inbound::writes::RecordRefused(copy));
        Box::pin(async move { Ok(Some(write.await?)) })
    }
}

/// A new row of this session was committed (see [`Enqueue`]): count it and wake the session.
#[derive(Debug, actix::Message)]
#[rtype(result = "()")]
struct Committed(String);

impl Handler<Committed> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, Committed(session): Committed, ctx: &mut Context<Self>) {
        let channel = self.session_channels.channel_for(&session);
        self.store.metrics.enqueued(QueueName::Inbound, channel);
        self.wake(&session, ctx);
    }
}

impl Handler<EnqueueFrom> for SupervisorActor {
    type Result = ResponseActFuture<Self, Result<BatchRecorded>>;

    fn handle(&mut self, mut batch: EnqueueFrom, _: &mut Context<Self>) -> Self::Result {
        if self.shutting_down {
            return Box::pin(fut::ready(Err(ActorError::ShuttingDown)));
        }
        // Over max_body_bytes: kept expired and cut, with the batch (see `KeepRefused`).
        let mut refused = Vec::new();
        let mut checked: Vec<std::result::Result<InboundMessage, String>> = Vec::new();
        for message in std::mem::take(&mut batch.messages) {
            checked.push(match message.validate(self.max_body_bytes) {
                Ok(()) => Ok(message),
                Err(e) => {
                    refused.extend(self.refused_copy(&message));
                    Err(e.to_string())
                }
            });
        }
        let valid: Vec<InboundMessage> = checked.iter().flatten().cloned().collect();
        let EnqueueFrom {
            source,
            offset,
            answers,
            requests,
            ..
        } = batch;
        let write = self
            .store
            .apply(relayq_engine::inbound::writes::RecordBatch {
                source,
                messages: valid,
                refused,
                answers,
                requests,
                offset,
            });
        Box::pin(write.into_actor(self).map(move |result, act, ctx| {
            let relayq_engine::inbound::writes::BatchWritten {
                rows,
                told,
                answers: recorded,
                requests,
            } = result?;
            if requests.ready > 0 {
                act.commands_ready();
            }
            act.store.waking.outbound_written(told);
            let answered = act.answers_recorded(recorded, ctx);
            let mut enqueued = rows.into_iter();
            let answers = checked
                .into_iter()
                .map(|message| {
                    message?;
                    let written = enqueued.next().expect("one answer per valid message");
                    let Some((session, row)) = written else {
                        return Ok(None); // a stranger's: not taken
                    };
                    if !row.duplicate && row.expired.is_none() {
                        let channel = act.session_channels.channel_for(&session);
                        act.store.metrics.enqueued(QueueName::Inbound, channel);
                        act.wake(&session, ctx);
                    }
                    Ok(Some(row))
                })
                .collect();
            Ok(BatchRecorded {
                rows: answers,
                answered,
                taps: requests.taps,
            })
        }))
    }
}

impl SupervisorActor {
    /// A batch made session commands ready for a node to carry out: wake this node's
    /// launcher (other nodes find theirs when they look).
    fn commands_ready(&self) {
        if let Some(launcher) = &self.launcher {
            launcher.do_send(crate::launcher::LookForCommands);
        }
    }

    /// After recording answers: wake what they wrote; the lines for the people who answered.
    fn answers_recorded(
        &mut self,
        recorded: relayq_engine::approvals::writes::ChatAnswersRecorded,
        ctx: &mut Context<Self>,
    ) -> Vec<Answered> {
        self.store.waking.outbound_written(recorded.outbound_keys);
        for session in &recorded.sessions {
            self.wake(session, ctx);
        }
        recorded.answered
    }
}

impl Handler<WakeSession> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, WakeSession(session): WakeSession, ctx: &mut Context<Self>) {
        self.wake(&session, ctx);
    }
}

impl Handler<AnswerDialog> for SupervisorActor {
    type Result = actix::Response<Option<DialogOutcome>>;
    fn handle(
        &mut self,
        AnswerDialog(request): AnswerDialog,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let channel = self.session_channels.channel_for(&request.session);
        match self.channels.dialog(channel, request) {
            Some(answer) => actix::Response::fut(async move { Some(answer.await) }),
            None => actix::Response::reply(None),
        }
    }
}

impl Handler<Resume> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, Resume(sessions): Resume, ctx: &mut Context<Self>) {
        for session in sessions {
            if !self.sessions.is_running(&session) {
                self.wake(&session, ctx);
            }
        }
    }
}

impl Handler<SessionIdle> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, idle: SessionIdle, _: &mut Context<Self>) {
        // A wake sent after the actor's last look is still in its mailbox: keep it running.
        if let Some(running) = self
            .sessions
            .remove_if_settled(&idle.session, idle.wakes_seen)
        {
            running.addr.do_send(Stop);
        }
    }
}

impl Handler<SessionEnded> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, SessionEnded(session): SessionEnded, _: &mut Context<Self>) {
        if let Some(running) = self.sessions.remove(&session) {
            running.addr.do_send(Stop);
        }
    }
}

impl Handler<ExpireSession> for SupervisorActor {
    type Result = ResponseActFuture<Self, Result<usize>>;

    fn handle(
        &mut self,
        ExpireSession(session): ExpireSession,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let store = self.store.clone();
        let key = session.clone();
        let expire = store.apply(ExpireKey {
            queue: QueueName::Inbound,
            key,
            reason: "session expired".into(),
        });
        Box::pin(expire.into_actor(self).map(move |result, act, _| {
            // Its in-flight delivery, if any, finishes and its answer is fenced off.
            if let Some(running) = act.sessions.remove(&session) {
                running.addr.do_send(Stop);
            }
            result
        }))
    }
}

impl Handler<SetSessionChannels> for SupervisorActor {
    type Result = ();
    fn handle(
        &mut self,
        SetSessionChannels(session_channels): SetSessionChannels,
        _: &mut Context<Self>,
    ) {
        for (session, running) in self.sessions.iter() {
            running.addr.do_send(session::UseChannel(session::Route {
                channel: session_channels.channel_for(session).to_string(),
                busy: session_channels.busy_for(session),
            }));
        }
        self.session_channels = session_channels;
    }
}

impl Handler<RunningSessions> for SupervisorActor {
    type Result = usize;
    fn handle(&mut self, _: RunningSessions, _: &mut Context<Self>) -> usize {
        self.sessions.alive()
    }
}

impl Handler<Shutdown> for SupervisorActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, Shutdown { grace }: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.shutting_down = true;
        let stops: Vec<_> = self.sessions.drain().map(|r| r.addr.send(Stop)).collect();
        let in_flight = stops.len();
        Box::pin(async move {
            if all_stopped(stops, grace).await {
                tracing::info!(sessions = in_flight, "all session actors stopped");
            } else {
                tracing::warn!(?grace, "deliveries still running after the grace period; they will be retried at next start");
            }
        })
    }
}
