//! Progress on the phone, sent: the ProgressActor makes the cosmetic calls that show a chat
//! what its agent does — a reaction on each person's message (taken, done, failed) and one
//! progress message per turn, edited as the agent's steps come (see
//! [`relayq_engine::progress`] for what is recorded and why).
//!
//! Cosmetic calls go on a lane per chat, after the chat's durable messages:
//!
//! ```text
//!   step (hook worker) ─┐                         ┌─ chat has unsent durable rows → wait, look again
//!   reaction changed  ──┼─▶ lane (channel, chat) ─┼─ chat's or bot's budget short → wait for it
//!   poll every 2 s  ────┘   one call at a time,   ├─ channel penalized → wait it out
//!                           ≥ `progress_every`    └─ call: React | Post | Edit
//!                           apart (groups: slower)       429 → wait, tried once more, then dropped
//! ```
//!
//! A board (a turn's progress message) whose steps come faster than its lane may send is
//! coalesced: the latest text wins. Nothing here is written down but a reaction's outcome, so
//! a restart never replays a stale edit; the reactions a message should show are in the
//! database, and the poll sets them after a restart.
//!
//! Where several daemons share a database, any of them may apply a turn's hook events. Each
//! announces its steps to all with the event (`progress::announce_in`, heard back as
//! [`HeardProgress`], in the order the events were applied), and a
//! chat's calls are made by the daemon holding its lane (`HoldProgressLane`, renewed while it
//! is used, taken over when it runs out or its holder is lost): one progress message per turn,
//! one call per reaction, whichever node applied the events.

pub mod board;
pub mod settings;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use relayq_engine::progress::writes::{HoldProgressLane, ReactionTried};
use relayq_engine::progress::{ProgressNote, Reaction, ReactionState, Step, REACTIONS_CHANGED};
use relayq_engine::OutboundMessage;

use crate::channels::{ChannelDirectory, CosmeticCall, CosmeticOutcome};
use crate::store::Store;
use board::Board;
use settings::ProgressSettings;

/// How often the reactions recorded elsewhere (a message dropped by the session actor, or
/// left from before a restart) are looked for; the hook worker's changes come at once.
const REACTION_LOOK: Duration = Duration::from_secs(2);
/// A lane whose chat has durable messages unsent looks again after this.
const DURABLE_LOOK: Duration = Duration::from_millis(250);
/// A running turn's message is edited at least this often (its clock), with no new step.
const REFRESH: Duration = Duration::from_secs(10);
/// A turn's message is posted at its first step, or once it has run this long without one:
/// a quick answer needs no message of its own (its reactions say it was taken and done).
const POST_AFTER: Duration = Duration::from_secs(3);
/// A turn with no event for this long is not shown any more (its agent went away).
const QUIET_MAX: Duration = Duration::from_secs(1800);
/// How long a chat's progress counts as shed after a call was dropped or refused.
const SHED_FOR: Duration = Duration::from_secs(60);
/// A reaction older than this is not set any more (the message scrolled away long ago).
const REACTION_MAX_AGE_MS: i64 = 3600 * 1000;
/// How long a daemon holds a chat's lane (where several share a database) without renewing
/// it; it renews it when less than half is left. A holder lost is replaced sooner (when the
/// nodes' heartbeats say it is gone).
const LANE_HOLD: Duration = Duration::from_secs(20);

/// Each chat source's progress settings, by origin.
pub type ProgressSettingsByOrigin = BTreeMap<String, ProgressSettings>;

/// A step of a turn, for its chat's progress message (from the hook worker).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ShowStep(pub ProgressNote);

/// Reactions changed: look for them now.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct ShowReactions;

/// A step, or [`REACTIONS_CHANGED`], announced by a daemon sharing the database (this one
/// too), as the database's listener heard it.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct HeardProgress(pub String);

/// This daemon shares its database with others, and hears what they announce: its steps are
/// announced, and a chat's calls wait for its lane.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct ShareProgress;

/// New settings (a config reload).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct SetProgressSettings(pub Arc<ProgressSettingsByOrigin>);

/// A chat: its channel and destination.
type ChatKey = (String, String);

/// One chat's cosmetic calls: one at a time, paced.
#[derive(Default)]
struct Lane {
    /// Its source (for its settings).
    origin: String,
    /// Not before this.
    next_at: Option<Instant>,
    /// A call (or its checks) is under way.
    busy: bool,
    /// A look is scheduled.
    timer: Option<SpawnHandle>,
    /// Reactions to set, by message row (the newest goes first): what each should show, and
    /// tries so far.
    reactions: BTreeMap<i64, (Reaction, u32)>,
    /// Who makes the chat's calls, where several daemons share the database.
    holder: Holder,
    /// A renewal of the lane is under way.
    renewing: bool,
}

/// Who holds a chat's lane (only asked where several daemons share the database).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Holder {
    #[default]
    Unknown,
    Asking,
    /// This daemon, until then (unless renewed).
    Mine(Instant),
    /// Another daemon, at least until then: this one leaves the chat alone.
    Theirs(Instant),
}

impl Holder {
    fn mine(self, now: Instant) -> bool {
        matches!(self, Holder::Mine(until) if until > now)
    }

    fn theirs(self, now: Instant) -> bool {
        matches!(self, Holder::Theirs(until) if until > now)
    }
}

/// A turn's progress message in a chat.
struct Shown {
    board: Board,
    thread: Option<String>,
    /// The message, once posted.
    message: Option<String>,
    /// Streamed as a draft instead (a private Telegram chat set to `stream`): its id.
    draft: Option<i64>,
    /// The board's version last sent, and when.
    sent_version: u64,
    sent_at: Option<Instant>,
    /// Failed calls in a row (one more try, then the board is dropped).
    tries: u32,
    /// Given up: nothing more is sent for this turn.
    dropped: bool,
    /// When this node began to show the turn, and saw its last step.
    seen_at: Instant,
    stepped_at: Instant,
    /// A call about it is under way.
    in_flight: bool,
}

impl Shown {
    fn wants_call(&self, now: Instant) -> bool {
        if self.dropped {
            return false;
        }
        if self.message.is_none() {
            let quiet = !self.board.has_content() && now.duration_since(self.seen_at) < POST_AFTER;
            let unsent = self.draft.is_none() || self.board.version > self.sent_version;
            let stale = self
                .sent_at
                .is_none_or(|at| now.duration_since(at) >= REFRESH);
            return self.board.ended.is_none() && !quiet && (unsent || stale);
        }
        let changed = self.board.version > self.sent_version;
        let stale_clock = self.board.ended.is_none()
            && now.duration_since(self.stepped_at) < QUIET_MAX
            && self
                .sent_at
                .is_some_and(|at| now.duration_since(at) >= REFRESH);
        changed || stale_clock
    }
}

/// What a lane does next.
#[derive(Debug, Clone)]
enum Job {
    /// A message's reaction (its row), as the state it shows.
    React(i64, ReactionState),
    Board(String),
}

/// Who holds a lane, as the database answered.
#[derive(Message)]
#[rtype(result = "()")]
struct LaneHeld {
    chat: ChatKey,
    /// When it was asked.
    asked: Instant,
    held: crate::error::Result<relayq_engine::progress::LaneHolder>,
}

/// How a lane's job went.
#[derive(Message)]
#[rtype(result = "()")]
struct JobDone {
    chat: ChatKey,
    job: Job,
    /// The version of the board sent (boards only).
    version: u64,
    went: Went,
}

#[derive(Debug)]
enum Went {
    /// The call was made: its outcome.
    Called(CosmeticOutcome),
    /// Not made: durable messages wait, the budget is short, the channel is held. Look again
    /// after this; `shed`: why, when it is pressure to tell the operator of.
    NotNow(Duration, Option<String>),
    /// Not made, never to be: the channel shows no progress.
    Cannot,
}

/// Sends the cosmetic calls of this node's chats.
pub struct ProgressActor {
    store: Store,
    channels: ChannelDirectory,
    settings: Arc<ProgressSettingsByOrigin>,
    lanes: HashMap<ChatKey, Lane>,
    boards: HashMap<(ChatKey, String), Shown>,
    /// Channels whose progress was shed lately: until when it counts as shed.
    shed: HashMap<String, Instant>,
    /// Reactions set lately, until their record is surely read back (a poll between the call
    /// and its record does not set them twice).
    set_lately: HashMap<i64, (ReactionState, Instant)>,
    /// A read of the reactions is under way; another was asked for meanwhile.
    looking: bool,
    look_again: bool,
    /// Several daemons share the database (see [`ShareProgress`]).
    shared: bool,
}

impl ProgressActor {
    pub fn new(
        store: Store,
        channels: ChannelDirectory,
        settings: ProgressSettingsByOrigin,
    ) -> Self {
        ProgressActor {
            store,
            channels,
            settings: Arc::new(settings),
            lanes: HashMap::new(),
            boards: HashMap::new(),
            shed: HashMap::new(),
            set_lately: HashMap::new(),
            looking: false,
            look_again: false,
            shared: false,
        }
    }

    /// Whether another daemon makes `chat`'s calls now.
    fn held_elsewhere(&self, chat: &ChatKey) -> bool {
        self.lanes
            .get(chat)
            .is_some_and(|l| l.holder.theirs(Instant::now()))
    }

    /// What a daemon announced.
    fn heard(&mut self, payload: &str, ctx: &mut Context<Self>) {
        if payload == REACTIONS_CHANGED {
            return self.look_for_reactions(ctx);
        }
        match serde_json::from_str::<ProgressNote>(payload) {
            Ok(note) => {
                tracing::debug!(session = note.session, step = ?note.step, "heard a step");
                self.step(note, ctx)
            }
            Err(e) => tracing::debug!(error = %e, "ignoring an announcement of progress"),
        }
    }

    /// Asks the database who holds `chat`'s lane, taking it when it is free.
    fn hold_lane(&mut self, chat: &ChatKey, ctx: &mut Context<Self>) {
        let hold = HoldProgressLane {
            channel: chat.0.clone(),
            chat: chat.1.clone(),
            for_ms: LANE_HOLD.as_millis() as i64,
        };
        let (chat, asked) = (chat.clone(), Instant::now());
        let me = ctx.address();
        let held = self.store.apply(hold);
        actix_rt::spawn(async move {
            let held = held.await;
            me.do_send(LaneHeld { chat, asked, held });
        });
    }

    fn lane_held(&mut self, held: LaneHeld, ctx: &mut Context<Self>) {
        let LaneHeld { chat, asked, held } = held;
        let now_ms = self.store.engine.now();
        let Some(lane) = self.lanes.get_mut(&chat) else {
            return;
        };
        lane.renewing = false;
        lane.holder = match held {
            Ok(h) if h.instance == self.store.engine.owner() => Holder::Mine(asked + LANE_HOLD),
            Ok(h) => {
                let left = Duration::from_millis((h.expires_at - now_ms).max(0) as u64);
                tracing::debug!(
                    channel = chat.0,
                    chat = chat.1,
                    holder = h.instance,
                    "another node shows this chat's progress"
                );
                Holder::Theirs(Instant::now() + left.min(LANE_HOLD))
            }
            Err(e) => {
                tracing::warn!(error = %e, channel = chat.0, chat = chat.1, "cannot tell which node shows this chat's progress; asking again");
                lane.next_at = Some(Instant::now() + DURABLE_LOOK);
                Holder::Unknown
            }
        };
        if lane.holder.theirs(Instant::now()) {
            lane.reactions.clear();
            self.boards.retain(|(c, _), _| *c != chat);
        }
        self.kick(chat, ctx);
    }

    /// Reads the reactions to set and queues each on its chat's lane.
    fn look_for_reactions(&mut self, ctx: &mut Context<Self>) {
        if self.settings.is_empty() {
            return;
        }
        if self.looking {
            self.look_again = true;
            return;
        }
        self.looking = true;
        let before = self.store.engine.now();
        let read = self
            .store
            .run(move |s| s.engine.untried_reactions(before, 256));
        ctx.spawn(read.into_actor(self).map(|read, me, ctx| {
            me.looking = false;
            match read {
                Ok(reactions) => {
                    for r in reactions {
                        me.queue_reaction(r, ctx);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the reactions to set"),
            }
            if std::mem::take(&mut me.look_again) {
                me.look_for_reactions(ctx);
            }
        }));
    }

    fn queue_reaction(&mut self, r: Reaction, ctx: &mut Context<Self>) {
        if self
            .set_lately
            .get(&r.row_id)
            .is_some_and(|(state, _)| *state == r.wanted)
        {
            return;
        }
        let now = self.store.engine.now();
        let routes = self.store.door.routes.read().expect("routes lock").clone();
        let channel = routes.replies.get(&r.origin).cloned();
        let channel = channel.filter(|_| self.settings.contains_key(&r.origin));
        let Some(channel) = channel.filter(|_| now - r.updated_at <= REACTION_MAX_AGE_MS) else {
            // Too old to matter, or its source is gone from the config: given up, so it is
            // not read again.
            self.record_reaction(&r, false, ctx);
            return;
        };
        let chat = (channel, r.chat.clone());
        if self.held_elsewhere(&chat) {
            return;
        }
        let lane = self.lanes.entry(chat.clone()).or_default();
        lane.origin = r.origin.clone();
        let tries = match lane.reactions.get(&r.row_id) {
            Some((queued, tries)) if queued.wanted == r.wanted => *tries,
            _ => 0,
        };
        lane.reactions.insert(r.row_id, (r, tries));
        self.kick(chat, ctx);
    }

    fn step(&mut self, note: ProgressNote, ctx: &mut Context<Self>) {
        let chat = (note.channel.clone(), note.to.clone());
        if self.held_elsewhere(&chat) {
            return;
        }
        let key = (chat.clone(), note.session.clone());
        let lane = self.lanes.entry(chat.clone()).or_default();
        lane.origin = note.origin.clone();
        let drafts = note.mode == relayq_engine::progress::ProgressMode::Stream
            && self.channels.drafts_in(&note.channel, &note.to);
        let fresh = |note: &ProgressNote| Shown {
            board: Board::new(&note.session, note.at),
            thread: note.thread.clone(),
            message: None,
            // Non-zero, one per turn.
            draft: drafts.then_some(note.at.rem_euclid(2_000_000_000).max(1)),
            sent_version: 0,
            sent_at: None,
            tries: 0,
            dropped: false,
            seen_at: Instant::now(),
            stepped_at: Instant::now(),
            in_flight: false,
        };
        match (&note.step, self.boards.get(&key)) {
            // A new turn: a new message. The last turn's, when its end is not shown yet, is
            // kept apart until it is (its last edit waits for its answer).
            (Step::TurnStarted, Some(s)) if s.board.ended.is_some() => {
                let last = self.boards.remove(&key).expect("the board is there");
                if last.wants_call(Instant::now()) || last.in_flight {
                    let apart =
                        format!("{} (ended turn of {})", note.session, last.board.started_at);
                    self.boards.insert((chat.clone(), apart), last);
                }
                self.boards.insert(key.clone(), fresh(&note));
            }
            (Step::TurnStarted, None) => {
                self.boards.insert(key.clone(), fresh(&note));
            }
            // A turn's end with no message shown: nothing to end.
            (Step::TurnEnded { .. }, None) => return,
            (_, None) => {
                self.boards.insert(key.clone(), fresh(&note));
            }
            _ => {}
        }
        let shown = self.boards.get_mut(&key).expect("the board was made");
        let unsent = shown.board.version > shown.sent_version && shown.sent_version > 0;
        shown.stepped_at = Instant::now();
        if shown.board.fold(&note.step) && unsent {
            self.store.metrics.progress(&note.channel, "coalesced");
        }
        // A turn that ended before its message was posted needs none.
        if shown.board.ended.is_some() && shown.message.is_none() && !shown.in_flight {
            self.boards.remove(&key);
        }
        self.kick(chat, ctx);
    }

    /// Runs the lane's next job when it may.
    fn kick(&mut self, chat: ChatKey, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let Some(lane) = self.lanes.get_mut(&chat) else {
            return;
        };
        if lane.busy || lane.timer.is_some() {
            return;
        }
        if self.shared {
            match lane.holder {
                Holder::Asking => return,
                h if h.theirs(now) => return,
                h if !h.mine(now) => {
                    lane.holder = Holder::Asking;
                    return self.hold_lane(&chat, ctx);
                }
                Holder::Mine(until) if until - now < LANE_HOLD / 2 && !lane.renewing => {
                    lane.renewing = true;
                    self.hold_lane(&chat, ctx);
                }
                _ => {}
            }
        }
        let Some(lane) = self.lanes.get_mut(&chat) else {
            return;
        };
        if let Some(at) = lane.next_at.filter(|at| *at > now) {
            let again = chat.clone();
            lane.timer = Some(ctx.run_later(at - now, move |me, ctx| {
                if let Some(lane) = me.lanes.get_mut(&again) {
                    lane.timer = None;
                }
                me.kick(again, ctx);
            }));
            return;
        }
        // The newest message's reaction first: it is the one the person looks at now.
        let job = match lane.reactions.iter().next_back() {
            Some((row, (r, _))) => Job::React(*row, r.wanted),
            None => {
                let board = self
                    .boards
                    .iter()
                    .filter(|((c, _), s)| *c == chat && s.wants_call(now))
                    .map(|((_, session), s)| (s.sent_at, session.clone()))
                    .min();
                match board {
                    Some((_, session)) => Job::Board(session),
                    None => {
                        self.forget_if_idle(&chat, ctx);
                        return;
                    }
                }
            }
        };
        let Some(call) = self.call_for(&chat, &job) else {
            return;
        };
        let version = match &job {
            Job::Board(session) => {
                let shown = self.boards.get_mut(&(chat.clone(), session.clone()));
                let shown = shown.expect("the board is there");
                shown.in_flight = true;
                shown.board.version
            }
            Job::React(..) => 0,
        };
        tracing::debug!(channel = chat.0, chat = chat.1, ?job, "cosmetic call");
        let lane = self.lanes.get_mut(&chat).expect("the lane is there");
        lane.busy = true;
        let (store, channels, me) = (self.store.clone(), self.channels.clone(), ctx.address());
        actix_rt::spawn(async move {
            let went = cosmetic_call(&store, &channels, &chat, call).await;
            me.do_send(JobDone {
                chat,
                job,
                version,
                went,
            });
        });
    }

    /// The call `job` makes now.
    fn call_for(&self, chat: &ChatKey, job: &Job) -> Option<CosmeticCall> {
        let lane = &self.lanes[chat];
        let to = chat.1.clone();
        Some(match job {
            Job::React(row, _) => {
                let (r, _) = &lane.reactions[row];
                let reactions = &self.settings.get(&r.origin)?.reactions;
                CosmeticCall::React {
                    to,
                    message: r.message.clone(),
                    emoji: reactions.of_state(r.wanted).to_string(),
                    previous: r.shown.map(|s| reactions.of_state(s).to_string()),
                }
            }
            Job::Board(session) => {
                let shown = &self.boards[&(chat.clone(), session.clone())];
                let text = shown.board.text(self.store.engine.now());
                match &shown.message {
                    None if shown.draft.is_some() => CosmeticCall::Draft {
                        to,
                        thread: shown.thread.clone(),
                        draft: shown.draft.unwrap_or(1),
                        text,
                    },
                    None => CosmeticCall::Post {
                        to,
                        thread: shown.thread.clone(),
                        text,
                    },
                    Some(message) => CosmeticCall::Edit {
                        to,
                        message: message.clone(),
                        text,
                    },
                }
            }
        })
    }

    fn done(&mut self, done: JobDone, ctx: &mut Context<Self>) {
        let JobDone {
            chat,
            job,
            version,
            went,
        } = done;
        let channel = chat.0.clone();
        let pace = self.pace_for(&chat);
        if let Job::Board(session) = &job {
            if let Some(shown) = self.boards.get_mut(&(chat.clone(), session.clone())) {
                shown.in_flight = false;
            }
        }
        let Some(lane) = self.lanes.get_mut(&chat) else {
            return;
        };
        lane.busy = false;
        let now = Instant::now();
        tracing::debug!(channel = chat.0, chat = chat.1, ?job, went = ?went, "cosmetic call ended");
        let metrics = self.store.metrics.clone();
        match went {
            Went::NotNow(wait, shed) => {
                lane.next_at = Some(now + wait);
                if let Some(why) = shed {
                    self.shed(&channel, &why);
                }
            }
            Went::Cannot => {
                // The channel shows no progress: what waits for it is given up (recorded, so
                // the reactions are not read again).
                let given_up: Vec<Reaction> = std::mem::take(&mut lane.reactions)
                    .into_values()
                    .map(|(r, _)| r)
                    .collect();
                self.boards.retain(|(c, _), _| *c != chat);
                for r in given_up {
                    self.record_reaction(&r, false, ctx);
                }
            }
            Went::Called(outcome) => {
                if let CosmeticOutcome::Wait(wait) = &outcome {
                    self.shed(&channel, &format!("the platform asked to wait {wait:?}"));
                }
                let lane = self.lanes.get_mut(&chat).expect("the lane is there");
                lane.next_at = Some(now + pace);
                let retry_after = match &outcome {
                    CosmeticOutcome::Done(_) => None,
                    CosmeticOutcome::Wait(wait) => Some(*wait),
                    CosmeticOutcome::Failed(_) => Some(Duration::ZERO),
                };
                if let Some(wait) = retry_after {
                    lane.next_at = Some(now + pace.max(wait));
                }
                match job {
                    Job::React(row, state) => {
                        // It wants another state since: that one is sent next.
                        let moved_on = lane
                            .reactions
                            .get(&row)
                            .is_some_and(|(r, _)| r.wanted != state);
                        let Some((r, tries)) = lane.reactions.remove(&row) else {
                            return self.kick(chat, ctx);
                        };
                        match (&outcome, tries) {
                            _ if moved_on => {
                                lane.reactions.insert(row, (r, 0));
                            }
                            (CosmeticOutcome::Done(_), _) => {
                                metrics.progress(&channel, "sent");
                                self.set_lately.insert(row, (state, now + SHED_FOR));
                                self.record_reaction(&r, true, ctx);
                            }
                            // Tried once more, then given up.
                            (_, 0) => {
                                lane.reactions.insert(row, (r, 1));
                            }
                            (outcome, _) => {
                                metrics.progress(&channel, "dropped");
                                tracing::info!(
                                    chat = chat.1,
                                    row,
                                    ?outcome,
                                    "a reaction was not set; given up"
                                );
                                self.record_reaction(&r, false, ctx);
                            }
                        }
                    }
                    Job::Board(session) => {
                        let key = (chat.clone(), session);
                        let Some(shown) = self.boards.get_mut(&key) else {
                            return self.kick(chat, ctx);
                        };
                        match outcome {
                            CosmeticOutcome::Done(id) => {
                                metrics.progress(&channel, "sent");
                                shown.message = shown.message.take().or(id);
                                shown.sent_version = version;
                                shown.sent_at = Some(now);
                                shown.tries = 0;
                            }
                            _ if shown.tries == 0 => shown.tries = 1,
                            ref outcome => {
                                metrics.progress(&channel, "dropped");
                                tracing::info!(chat = chat.1, ?outcome, "a progress message was not sent; this turn's progress is given up");
                                shown.dropped = true;
                            }
                        }
                        let gone = shown.board.ended.is_some() && !shown.wants_call(now);
                        if gone || shown.dropped {
                            self.boards.remove(&key);
                        }
                    }
                }
            }
        }
        self.kick(chat, ctx);
    }

    fn record_reaction(&self, r: &Reaction, shown: bool, ctx: &mut Context<Self>) {
        let tried = ReactionTried {
            row_id: r.row_id,
            state: r.wanted,
            shown,
        };
        ctx.spawn(self.store.apply(tried).into_actor(self).map(|done, _, _| {
            if let Err(e) = done {
                tracing::warn!(error = %e, "cannot record a reaction sent");
            }
        }));
    }

    /// How far apart the calls to `chat` go.
    fn pace_for(&self, chat: &ChatKey) -> Duration {
        let origin = self
            .lanes
            .get(chat)
            .map(|l| l.origin.as_str())
            .unwrap_or_default();
        match self.settings.get(origin) {
            Some(s) => s.pace_for(&chat.1),
            None => settings::EVERY,
        }
    }

    /// A lane with nothing to do, no pace to keep and no holder to remember is forgotten.
    fn forget_if_idle(&mut self, chat: &ChatKey, _ctx: &mut Context<Self>) {
        let now = Instant::now();
        let idle = self.lanes.get(chat).is_some_and(|l| {
            !l.busy
                && l.timer.is_none()
                && l.reactions.is_empty()
                && l.next_at.is_none_or(|at| at <= now)
                && !l.renewing
                && match l.holder {
                    Holder::Unknown => true,
                    Holder::Asking => false,
                    Holder::Mine(until) | Holder::Theirs(until) => until <= now,
                }
        });
        let boards = self.boards.keys().any(|(c, _)| c == chat);
        if idle && !boards {
            self.lanes.remove(chat);
        }
    }

    /// Progress on `channel` was shed: the operator sees it in `status` for a while.
    fn shed(&mut self, channel: &str, why: &str) {
        self.store.metrics.progress(channel, "shed");
        let what = format!("progress on channel {channel}");
        self.store.readiness.says(
            &what,
            &format!("{what} is being shed: {why}; the answers go first, reactions and progress messages wait or are dropped"),
        );
        self.shed
            .insert(channel.to_string(), Instant::now() + SHED_FOR);
    }

    /// Ends the shed notices whose time is over; refreshes running turns' clocks.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let over: Vec<String> = self
            .shed
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(c, _)| c.clone())
            .collect();
        for channel in over {
            self.shed.remove(&channel);
            self.store
                .readiness
                .ready(&format!("progress on channel {channel}"));
        }
        self.set_lately.retain(|_, (_, until)| *until > now);
        self.boards
            .retain(|_, s| now.duration_since(s.stepped_at) < QUIET_MAX * 2);
        let stale: Vec<ChatKey> = self
            .boards
            .iter()
            .filter(|(_, s)| s.wants_call(now))
            .map(|((c, _), _)| c.clone())
            .collect();
        for chat in stale {
            self.kick(chat, ctx);
        }
        let lanes: Vec<ChatKey> = self.lanes.keys().cloned().collect();
        for chat in lanes {
            self.forget_if_idle(&chat, ctx);
        }
    }
}

/// Makes one cosmetic call to `chat`, after its durable messages, within its budgets.
async fn cosmetic_call(
    store: &Store,
    channels: &ChannelDirectory,
    chat: &ChatKey,
    call: CosmeticCall,
) -> Went {
    let (channel, to) = chat;
    let key = OutboundMessage::text(channel, to, "").destination_key();
    match store.run(move |s| s.outbound.has_unfinished(&key)).await {
        Ok(false) => {}
        Ok(true) => return Went::NotNow(DURABLE_LOOK, None),
        Err(e) => {
            tracing::warn!(error = %e, "cannot tell whether the chat has messages to send first");
            return Went::NotNow(DURABLE_LOOK, None);
        }
    }
    // Not ready yet (its ready check has not answered): waited for, not shed.
    if let Some(wait) = channels.unready(channel) {
        return Went::NotNow(wait, None);
    }
    if let Some(wait) = channels.penalty(channel) {
        return Went::NotNow(wait, Some("the channel is held".into()));
    }
    if let Some(budgets) = channels.budgets(channel) {
        let to = to.clone();
        let taken = actix_rt::task::spawn_blocking(move || budgets.take(&to)).await;
        match taken {
            Ok(Ok(())) => {}
            // The chat's pace: waited out, not shed.
            Ok(Err(wait)) => return Went::NotNow(wait, None),
            Err(e) => return Went::NotNow(DURABLE_LOOK, Some(e.to_string())),
        }
    }
    match channels.cosmetic(channel, call) {
        Some(answer) => Went::Called(answer.await),
        None => Went::Cannot,
    }
}

impl Actor for ProgressActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.look_for_reactions(ctx);
        ctx.run_interval(REACTION_LOOK, |me, ctx| {
            me.look_for_reactions(ctx);
            me.tick(ctx);
        });
    }
}

impl Handler<ShowStep> for ProgressActor {
    type Result = ();

    fn handle(&mut self, ShowStep(note): ShowStep, ctx: &mut Context<Self>) {
        // Where the database is shared, the step was announced with its event and is heard.
        if !self.shared {
            self.step(note, ctx);
        }
    }
}

impl Handler<ShowReactions> for ProgressActor {
    type Result = ();

    fn handle(&mut self, _: ShowReactions, ctx: &mut Context<Self>) {
        if !self.shared {
            self.look_for_reactions(ctx);
        }
    }
}

impl Handler<HeardProgress> for ProgressActor {
    type Result = ();

    fn handle(&mut self, HeardProgress(payload): HeardProgress, ctx: &mut Context<Self>) {
        self.heard(&payload, ctx);
    }
}

impl Handler<ShareProgress> for ProgressActor {
    type Result = ();

    fn handle(&mut self, _: ShareProgress, _: &mut Context<Self>) {
        self.shared = true;
    }
}

impl Handler<LaneHeld> for ProgressActor {
    type Result = ();

    fn handle(&mut self, held: LaneHeld, ctx: &mut Context<Self>) {
        self.lane_held(held, ctx);
    }
}

impl Handler<JobDone> for ProgressActor {
    type Result = ();

    fn handle(&mut self, done: JobDone, ctx: &mut Context<Self>) {
        self.done(done, ctx);
    }
}

impl Handler<SetProgressSettings> for ProgressActor {
    type Result = ();

    fn handle(
        &mut self,
        SetProgressSettings(settings): SetProgressSettings,
        _: &mut Context<Self>,
    ) {
        self.settings = settings;
    }
}
