//! The channel contract: what a channel is given ([`Delivery`]), what it answers ([`Outcome`]),
//! and the trait every channel implements ([`Channel`]), built in or written by embedding code.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use relayq_engine::{InboundMessage, Notice, OutboundMessage};
use serde::Serialize;

pub use relayq_engine::Receipt;

/// A row to deliver, as a channel sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delivery {
    /// The row id: stable across retries, usable as an idempotency key by the far end.
    pub id: i64,
    pub queue: String,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// When the row was written (unix ms).
    pub created_at: i64,
    /// An earlier send of this row went out and got no answer (the daemon stopped, or the far
    /// end did not reply): the far end may already have it. A channel that can tell repeats
    /// apart (an idempotency key, a nonce) sends as before; one that can look the message up
    /// may answer `Delivered` without sending. See [`UnknownOutcome`].
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub possible_repeat: bool,
    /// For a channel whose far end confirms by itself ([`Channel::confirms_within`]).
    #[serde(skip)]
    pub agent: AgentHints,
    #[serde(flatten)]
    pub content: Content,
}

/// What a delivery to an agent must know beyond the row (see [`Channel::confirms_within`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentHints {
    /// Look at the message sent before (the `n`th look) instead of sending it again; see
    /// [`Outcome::Submitted`].
    pub look: Option<u32>,
    /// The row's send-started mark was left by an attempt this daemon did not see through (a
    /// crash, a restart): whether its text was ever pasted is unknown, since the mark is
    /// written before the paste. Found nowhere after the agent's wait, it is pasted again
    /// rather than given up (see the tmux channel's `look`).
    pub paste_unseen: bool,
    /// relayq does not know the agent is at its prompt: it has not reported yet (an agent
    /// still starting drops input), or its last word was a dialog no event said was answered
    /// (a denial in the terminal ends the turn silently). Send only onto a far end that shows
    /// the agent at its prompt.
    pub unsure: bool,
    /// Sent while the agent works (`busy = "steer"`): an agent that folds it into the running
    /// turn (Codex) reports no prompt of its own for it, so a text that left the input box
    /// counts as taken.
    pub steering: bool,
}

/// What is being delivered.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Content {
    /// A chat message for an agent session.
    Inbound(InboundMessage),
    /// A message for a chat platform or webhook.
    Outbound(OutboundMessage),
}

/// The answer of a chat platform's channel (`kind`) to an inbound row routed to it: it sends
/// only outbound messages, and no retry can change that.
pub fn only_outbound(kind: &str) -> Answer {
    Outcome::Permanent {
        reason: format!(
            "the {kind} channel sends outbound messages; route a session's inbound rows to a \
             tmux, exec or file channel"
        ),
    }
    .into()
}

impl Delivery {
    /// Where it goes on the channel: the session for inbound, the destination for outbound.
    pub fn address(&self) -> &str {
        match &self.content {
            Content::Inbound(m) => &m.session,
            Content::Outbound(m) => &m.to,
        }
    }

    /// The agent session it is for or about, when there is one.
    pub fn session(&self) -> Option<&str> {
        match &self.content {
            Content::Inbound(m) => Some(&m.session),
            Content::Outbound(m) => m.session.as_deref(),
        }
    }

    /// The text to type or send.
    pub fn text(&self) -> &str {
        match &self.content {
            Content::Inbound(m) => m.for_agent(),
            Content::Outbound(m) => &m.text,
        }
    }
}

pub use relayq_engine::Outcome;

/// What happens to a row whose earlier send may have reached the far end (it went out and no
/// answer came; see [`Delivery::possible_repeat`]), per channel (`unknown_outcome` in
/// `config.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownOutcome {
    /// Send it again, flagged as a possible repeat (the webhook's JSON says
    /// `"possible_repeat": true` and keeps its `Idempotency-Key`, so a far end that honours the
    /// key keeps one copy).
    #[default]
    Resend,
    /// Do not send it: it becomes a dead letter with reason `outcome unknown`, for an operator
    /// to check the far end and `relayq dead retry` (send) or `purge` it.
    Hold,
}

pub use crate::kit::ReadyCheck;

/// A channel's answer to one delivery: known at once, or when the far end replies.
pub enum Answer {
    Now(Outcome),
    Later(Pin<Box<dyn Future<Output = Outcome>>>),
}

impl Answer {
    /// The answer comes when `future` ends. The future must own what it uses (clone the
    /// channel's client or settings into it): the channel takes the next delivery meanwhile.
    pub fn later(future: impl Future<Output = Outcome> + 'static) -> Self {
        Answer::Later(Box::pin(future))
    }
}

impl From<Outcome> for Answer {
    fn from(outcome: Outcome) -> Self {
        Answer::Now(outcome)
    }
}

/// A question to an agent's dialog (see [`Channel::dialog`]): whether the permission dialog
/// about `action` (what its approval row says the tool will do) shows in `session`'s terminal,
/// and, with `press`, the answer to give it by its keys.
#[derive(Debug, Clone, PartialEq)]
pub struct DialogRequest {
    pub session: String,
    pub action: String,
    /// `None`: only look.
    pub press: Option<relayq_engine::approvals::Decision>,
}

/// What an agent's dialog did with a [`DialogRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialogOutcome {
    /// Looked only: the dialog about the action shows.
    Shows,
    /// The key was pressed and the dialog left the screen (the agent took the answer);
    /// whether the agent is then back at its empty prompt.
    Answered { at_prompt: bool },
    /// No dialog about the action shows (closed in the terminal, or another question's):
    /// nothing was pressed. Why, for people.
    NotShown(String),
    /// Could not tell or could not finish (tmux failed, the dialog still shows after the key):
    /// asked again later.
    Retry(String),
}

/// A [`Channel::dialog`] answer, when it comes.
pub type DialogAnswer = Pin<Box<dyn Future<Output = DialogOutcome>>>;

/// A thread of a destination to open or close for a session (a Telegram forum topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadCall {
    /// Open a thread named `name` in destination `to`: answers its id.
    Open { to: String, name: String },
    /// Close thread `thread` of `to`: answers `None`.
    Close { to: String, thread: String },
}

/// A thread call in progress: the new thread's id, or why the platform refused.
pub type ThreadAnswer = Pin<Box<dyn Future<Output = Result<Option<String>, String>>>>;

/// A call that shows progress in a chat (see [`progress`](crate::progress)): cosmetic, never a
/// row; it may be coalesced or dropped, and is never replayed after a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CosmeticCall {
    /// Show `emoji` as the bot's reaction on message `message` of `to`, in place of
    /// `previous` (the one it showed, for platforms that add and remove reactions one by one).
    React {
        to: String,
        message: String,
        emoji: String,
        previous: Option<String>,
    },
    /// Post a progress message in `to` (and `thread`): answers its id.
    Post {
        to: String,
        thread: Option<String>,
        text: String,
    },
    /// Replace the text of progress message `message` of `to`.
    Edit {
        to: String,
        message: String,
        text: String,
    },
    /// Show `text` as draft `draft` of a message being written in `to` (Telegram's
    /// `sendMessageDraft`: a preview that the answer's own message replaces).
    Draft {
        to: String,
        thread: Option<String>,
        draft: i64,
        text: String,
    },
}

/// What became of a [`CosmeticCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CosmeticOutcome {
    /// Done; a posted message's id.
    Done(Option<String>),
    /// The platform asked to wait this long (a 429): nothing was done.
    Wait(Duration),
    /// It failed, for this reason (it may or may not have been done).
    Failed(String),
}

/// A cosmetic call in progress.
pub type CosmeticAnswer = Pin<Box<dyn Future<Output = CosmeticOutcome>>>;

/// A channel: the only code that talks to the outside world. relayq runs each one in a
/// [`ChannelActor`](super::ChannelActor), which restarts it from a clone of its settings if it
/// panics; a channel is therefore its settings plus cheap handles (an HTTP client), `Clone`.
/// Outbound runs may go out on several threads (`claimer.send_threads`), each with its own
/// actor started from a clone: what all of a channel's deliveries must share (a count, a
/// learned limit) belongs behind a shared handle (`Arc`), not in a plain field.
///
/// Implement this for a custom channel and register it with
/// [`ChannelSpec::of`](super::ChannelSpec::of) (see `examples/custom_channel.rs`); a channel
/// kind configured in `config.toml` also implements [`ChannelKind`](super::ChannelKind).
pub trait Channel: Clone + Send + Sync + Unpin + 'static {
    /// Delivers one row and says how it went. Sessions wait for the answer before their next
    /// row; different sessions' deliveries may overlap.
    fn deliver(&mut self, delivery: Delivery) -> Answer;

    /// How long one delivery may take before it is abandoned and retried.
    fn timeout(&self) -> Duration;

    /// A hook event's notice as this channel's far end reads it: plain text unless the
    /// platform has markup (see [`kit::notice`](super::notice)).
    fn render(&self, notice: &Notice) -> String {
        super::notice::plain(notice)
    }

    /// The platform's budgets: how fast it may send to one destination and in all (see
    /// [`pacing`](crate::pacing)); none by default. `[pacing.NAME]` in config.toml overrides.
    fn pace(&self) -> crate::pacing::Pace {
        crate::pacing::Pace::default()
    }

    /// What to do with a row whose earlier send may have arrived (see [`UnknownOutcome`]).
    fn unknown_outcome(&self) -> UnknownOutcome {
        UnknownOutcome::Resend
    }

    /// The longest text one message may have on the platform, and its markup: a longer
    /// outbound text is split into parts when it is written (see
    /// [`chunking`](relayq_engine::outbound::chunking)). None: any length.
    fn text_limit(&self) -> Option<relayq_engine::TextLimit> {
        None
    }

    /// Asks the far end whether it takes sends (Telegram: `getMe` answered), before any row
    /// goes to the channel after a start or a reload. relayq asks again, with growing pauses,
    /// until it answers `Ok`; meanwhile the channel's rows wait, no attempt charged. `None` (the
    /// default): ready at once.
    fn ready_check(&self) -> Option<ReadyCheck> {
        None
    }

    /// When the far end confirms a delivery by itself, within how long it should (see
    /// [`Outcome::Submitted`]): an agent's pane, whose agent says it took a message by its own
    /// hook event. Its session's messages then go one at a time, each when the agent is ready
    /// for it. `None` (the default): `deliver`'s answer is final.
    fn confirms_within(&self) -> Option<Duration> {
        None
    }

    /// A channel that types into an agent's terminal can answer the agent's permission dialog
    /// by its keys (Gemini CLI, whose hooks cannot decide): see
    /// [`approvals`](crate::approvals). `None` (the default): it cannot.
    fn dialog(&self, _request: DialogRequest) -> Option<DialogAnswer> {
        None
    }

    /// Opens or closes a thread of a destination for a session (a Telegram forum topic), so
    /// each session started from a chat talks in its own. `None` (the default): the channel
    /// has no threads to open.
    fn thread(&self, _call: ThreadCall) -> Option<ThreadAnswer> {
        None
    }

    /// Makes a cosmetic call (a reaction, a progress message) on the platform. `None` (the
    /// default): the channel shows no progress.
    fn cosmetic(&self, _call: CosmeticCall) -> Option<CosmeticAnswer> {
        None
    }

    /// Whether chat `to` can show a draft of a message being written
    /// ([`CosmeticCall::Draft`]); the default: it cannot, progress goes as an edited message.
    fn drafts_in(&self, _to: &str) -> bool {
        false
    }

    /// Whether the channel can deliver now, as far as it can tell without sending anything (a
    /// program is installed, a directory exists). Said at start-up; deliveries are tried anyway.
    fn readiness(&self) -> Result<(), String> {
        Ok(())
    }
}
