//! The source contract: what a source returns ([`Batch`]) and the trait every source implements.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use relayq_engine::approvals::{Answered, ChatAnswer};
use relayq_engine::chat_sessions::SessionRequest;
use relayq_engine::InboundMessage;

use crate::kit::ReadyCheck;
use crate::pacing::Budgets;

/// What one fetch read: the messages, and the offset to start the next fetch from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    pub messages: Vec<InboundMessage>,
    /// Answers to agents' questions (a button tapped, `/allow ID`), recorded with the rows.
    pub answers: Vec<ChatAnswer>,
    /// Session requests (`/new`, a session button tapped), recorded with the rows.
    pub requests: Vec<SessionRequest>,
    /// Where the next fetch starts (Telegram: the last `update_id` + 1; a file: a byte
    /// position). Stored with the messages, in one transaction.
    pub offset: String,
}

impl Batch {
    /// Whether it carries nothing to record (its offset may still have moved).
    pub fn carries_nothing(&self) -> bool {
        self.messages.is_empty() && self.answers.is_empty() && self.requests.is_empty()
    }
}

/// A fetch in progress.
pub type Fetch = Pin<Box<dyn Future<Output = Result<Batch, String>>>>;

/// An inbound source: reads its platform from an offset. relayq runs each one in a
/// [`SourceActor`](super::SourceActor), which stores the offset with the rows and starts again
/// from a clone of the source (and the stored offset) after a failure.
pub trait Source: Clone + Send + Sync + Unpin + 'static {
    /// Called once, before the first fetch, with the source's name (`[sources.NAME]`).
    fn named(&mut self, _name: &str) {}

    /// Reads what came after `offset` (`None`: the source has never read). When nothing has
    /// come, waits for it a while (a long poll) and returns an empty batch at the same offset.
    /// The future owns what it uses. An error is retried with backoff from the same offset.
    fn fetch(&mut self, offset: Option<String>) -> Fetch;

    /// Called once a batch's rows are committed, with the messages that were new (not
    /// duplicates), so a source may show its platform they were taken (Telegram: "typing…").
    /// `budget` paces the channel that answers the source: a call that is only cosmetic takes
    /// from it and is dropped when it says wait, so it never delays an answer.
    fn committed(&mut self, _new: Vec<InboundMessage>, _budget: Option<Arc<dyn Budgets>>) {}

    /// Called once a batch's answers are recorded, each with the line for the person who
    /// answered, so a source may show it where they tapped (Telegram: `answerCallbackQuery`).
    fn acknowledge(&mut self, _answered: Vec<Answered>) {}

    /// Called once a batch's session requests are recorded, with each tapped button's callback
    /// and the line to show where it was tapped.
    fn tapped(&mut self, _taps: Vec<(String, String)>) {}

    /// Called once a batch (new rows, duplicates, answers) is committed with its offset, before
    /// the next fetch: a held connection acknowledges it to its platform then.
    fn taken(&mut self) {}

    /// Called after a failure, before trying again from the stored offset: a held connection
    /// is closed here, and opened again from the stored resume token.
    fn reset(&mut self) {}

    /// Asks the platform whether it takes the source's credentials (Telegram: `getMe`), for
    /// `relayq config check`; `None` when there is nothing to ask.
    fn ready_check(&self) -> Option<ReadyCheck> {
        None
    }
}

/// One request a platform pushed to relayq (`POST /v1/ingress/NAME`): its headers, names in
/// lower case, and its body as it came (a signature covers the exact bytes).
#[derive(Debug, Clone, Default)]
pub struct Push {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Push {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What a push carried: messages to enqueue (then answer 200), or an answer the platform
/// expects at once (Slack's `url_verification` challenge).
#[derive(Debug, Clone, PartialEq)]
pub enum Pushed {
    Messages(Vec<InboundMessage>),
    /// Answers to agents' questions, recorded before the platform is answered 200.
    Answers(Vec<ChatAnswer>),
    /// Session requests, recorded (and answered in their chats) before the platform is
    /// answered 200.
    Requests(Vec<SessionRequest>),
    Answer(serde_json::Value),
}

/// Why a push was not taken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PushRefused {
    /// It does not prove it comes from the platform (secret, signature, timestamp): 401.
    #[error("{0}")]
    NotThePlatform(String),
    /// It cannot be read: 400 (the platform logs it; retrying cannot help).
    #[error("{0}")]
    Unreadable(String),
}

/// A reading in progress.
pub type Receive<'a> = Pin<Box<dyn Future<Output = Result<Pushed, PushRefused>> + 'a>>;

/// A source the platform pushes to (a webhook) instead of one relayq fetches from. The HTTP
/// API hands it each request; the messages it returns are committed before the platform is
/// answered 200, so an answered push is never lost, and a platform's retry of a push it saw
/// no answer to is a duplicate (the rows' dedup key is the platform's message id).
pub trait PushSource: Send + Sync + 'static {
    /// Checks the push comes from the platform, then reads it. `name` is the source's, from
    /// `[sources.NAME]`.
    fn receive<'a>(&'a self, name: &'a str, push: &'a Push) -> Receive<'a>;

    /// Called once when the daemon starts the source (Telegram: `setWebhook`).
    fn started(&self, _name: &str) {}

    /// As [`Source::acknowledge`], for pushed answers once recorded.
    fn acknowledge(&self, _answered: Vec<Answered>) {}

    /// As [`Source::tapped`], for pushed session requests once recorded.
    fn tapped(&self, _taps: Vec<(String, String)>) {}
}

/// What a held connection received: messages and answers to commit, the resume token that
/// covers them (stored in the same transaction as their rows), and what to acknowledge to the
/// platform once they are committed (Slack: the envelope ids).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Arrived {
    pub messages: Vec<InboundMessage>,
    pub answers: Vec<ChatAnswer>,
    pub requests: Vec<SessionRequest>,
    /// `None`: the platform keeps no position for relayq (it sends again what was not
    /// acknowledged); the stored one stays.
    pub resume: Option<String>,
    pub acks: Vec<String>,
}

/// A reading or an acknowledgement in progress on a held connection.
pub type OnConnection<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + 'a>>;

/// A connection a platform pushes over (a WebSocket), open.
pub trait HeldConnection: Send + 'static {
    /// Waits for what the platform sends next.
    fn next(&mut self) -> OnConnection<'_, Arrived>;

    /// Acknowledges what was committed.
    fn acknowledge(&mut self, acks: Vec<String>) -> OnConnection<'_, ()>;
}

/// A source whose platform pushes over a connection relayq holds open (Slack's Socket Mode,
/// Discord's gateway). It runs as a [`Source`] through [`Held`](super::Held), so it has the
/// same actor, offsets and backoff as a source that polls:
///
/// ```text
///   connect(stored resume token) ─▶ next() ─▶ Arrived { messages, resume, acks }
///     rows + resume token committed in ONE transaction ─▶ acknowledge(acks) ─▶ next() ...
///   any error: the connection is dropped; after the backoff, connect(stored token) again,
///   and the platform sends again what was not acknowledged (the rows' dedup keys make it a
///   duplicate where it was committed)
/// ```
pub trait HeldSource: Clone + Send + Sync + Unpin + 'static {
    type Connection: HeldConnection;

    /// As [`Source::named`].
    fn named(&mut self, _name: &str) {}

    /// Opens the connection, resuming from `resume` (the token stored with the rows last
    /// committed; `None`: never connected).
    fn connect(&self, resume: Option<String>) -> OnConnection<'static, Self::Connection>;

    /// As [`Source::acknowledge`].
    fn acknowledge(&mut self, _answered: Vec<Answered>) {}

    /// As [`Source::tapped`].
    fn tapped(&mut self, _taps: Vec<(String, String)>) {}

    /// As [`Source::ready_check`].
    fn ready_check(&self) -> Option<ReadyCheck> {
        None
    }
}
