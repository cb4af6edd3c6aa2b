//! Who may do what in a chat. A source's settings name its writers (`allowed_users`) and its
//! approvers (`approvers`; when not set, the writers approve too); pairing adds people as
//! rows, shared by every node: a stranger types `/pair` and gets a code, an approver confirms
//! it (`/approve CODE writer|approver`, or the operator's `relayq users approve CODE`).
//!
//! ```text
//!   a source reads a person's message, click or command, with the role its settings give
//!     ─▶ the write raises it to the role pairing gave (the `chat_users` row), in the same
//!        transaction as the rows; then:
//!   stranger: no row, no answer, no command; one reply per chat an hour naming nothing
//!   writer:   messages to the agent; `/sessions`, `/status`
//!   approver: that, and answers to questions, `/new`, `/stop`, `/resume`, `/approve`
//! ```

pub mod pairing;
pub mod writes;

use serde::{Deserialize, Serialize};

use crate::approvals::ChatAnswer;
use crate::chat_sessions::SessionRequest;
use crate::error::Result;
use crate::storage::access as store;
use crate::storage::sql::Executor;
use crate::writes::Writer;
use crate::{InboundMessage, OutboundMessage};

pub use crate::storage::access::{users, ChatUser, PairCode};

/// What a person may do in a source's chats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Stranger,
    /// Writes to the agents.
    Writer,
    /// Writes, answers the agents' questions, starts, stops and resumes sessions.
    Approver,
}

impl Role {
    pub fn word(self) -> &'static str {
        match self {
            Role::Stranger => "stranger",
            Role::Writer => "writer",
            Role::Approver => "approver",
        }
    }

    /// `writer` or `approver`, as `/approve` and `relayq users approve` take them.
    pub fn parse(word: &str) -> Option<Role> {
        match word.to_ascii_lowercase().as_str() {
            "writer" => Some(Role::Writer),
            "approver" => Some(Role::Approver),
            _ => None,
        }
    }

    /// The role a source's two flags give: `may` (approves), `known` (writes).
    pub fn of(may: bool, known: bool) -> Role {
        match (may, known) {
            (true, _) => Role::Approver,
            (false, true) => Role::Writer,
            (false, false) => Role::Stranger,
        }
    }
}

/// The role `user` has in `origin`'s chats: `configured` (the source's settings), raised to
/// the one pairing gave, if higher.
pub fn role_of(
    db: &dyn Executor,
    origin: &str,
    user: Option<&str>,
    configured: Role,
) -> Result<Role> {
    let Some(user) = user.filter(|_| configured < Role::Approver) else {
        return Ok(configured);
    };
    let added = store::role(db, origin, user)?.and_then(|r| Role::parse(&r));
    Ok(added.map_or(configured, |r| r.max(configured)))
}

/// What a stranger's chat is told, at most once an hour per chat: nothing about what is here.
pub const STRANGER_REPLY: &str =
    "Not taken: this bot reads only the people it was set up for. Send /pair to ask for access.";

/// How often a chat is told at most that a stranger's message was not taken.
const STRANGER_TOLD_EVERY_MS: i64 = 3_600_000;

/// A request with the roles pairing gave its person (see [`role_of`]).
pub fn request_in(w: &Writer<'_>, r: &SessionRequest) -> Result<SessionRequest> {
    if r.is_operator() {
        return Ok(r.clone());
    }
    let role = role_of(
        w.tx(),
        &r.origin,
        r.user_id.as_deref(),
        Role::of(r.may, r.known),
    )?;
    Ok(SessionRequest {
        may: role >= Role::Approver,
        known: role >= Role::Writer,
        ..r.clone()
    })
}

/// An answer with the role pairing gave its person.
pub fn answer_in(w: &Writer<'_>, a: &ChatAnswer) -> Result<ChatAnswer> {
    Ok(ChatAnswer {
        role: role_of(w.tx(), &a.who.via, a.who.id.as_deref(), a.role)?,
        ..a.clone()
    })
}

/// A stranger's typed answer: not answered (a reply would tell them a question is open);
/// their chat told [`STRANGER_REPLY`] at most once an hour. The reply's ordering key.
pub fn stranger_answer_in(w: &Writer<'_>, a: &ChatAnswer) -> Result<Option<String>> {
    let Some((origin, chat)) = &a.who.chat else {
        return Ok(None);
    };
    tracing::warn!(
        origin,
        user = a.who.id.as_deref().unwrap_or("?"),
        chat,
        "ignored an answer typed by someone who is not allowed (add their id to allowed_users, \
         or approve the code /pair gives them, to accept them)"
    );
    tell_stranger_in(w, origin, chat, None)
}

/// What [`admit_in`] did: each message, in order, if it was let through; the replies it
/// wrote (their ordering keys).
#[derive(Debug, Default)]
pub struct Admitted {
    pub messages: Vec<Option<InboundMessage>>,
    pub told: Vec<String>,
}

/// Takes the messages whose senders may write: those the source's settings name, and the
/// unlisted ones pairing added. A stranger's message writes no row; it is logged without its
/// text, and its chat told [`STRANGER_REPLY`] at most once an hour.
pub fn admit_in(w: &Writer<'_>, messages: &[InboundMessage]) -> Result<Admitted> {
    let mut admitted = Admitted::default();
    for m in messages {
        if !m.unlisted {
            admitted.messages.push(Some(m.clone()));
            continue;
        }
        let role = role_of(w.tx(), &m.origin, m.actor_id.as_deref(), Role::Stranger)?;
        if role >= Role::Writer {
            admitted.messages.push(Some(InboundMessage {
                unlisted: false,
                ..m.clone()
            }));
            continue;
        }
        tracing::warn!(
            origin = m.origin,
            user = m.actor_id.as_deref().unwrap_or("?"),
            chat = m.source_channel_id.as_deref().unwrap_or("?"),
            "ignored a message from someone who is not allowed (add their id to allowed_users, \
             on Telegram their chat to allowed_chats, or approve the code /pair gives them, to \
             accept them)"
        );
        admitted.messages.push(None);
        if let Some(chat) = m.source_channel_id.as_deref() {
            let thread = m.source_thread_id.as_deref();
            admitted
                .told
                .extend(tell_stranger_in(w, &m.origin, chat, thread)?);
        }
    }
    Ok(admitted)
}

/// Whether a stranger in `chat` is to be told [`STRANGER_REPLY`] now: not when the chat was
/// told within the hour, whatever the stranger did (a message, a command, a typed answer);
/// true is noted.
pub fn tell_stranger_now_in(w: &Writer<'_>, origin: &str, chat: &str) -> Result<bool> {
    let since = w.now() - STRANGER_TOLD_EVERY_MS;
    if store::events_since(w.tx(), origin, chat, "stranger_told", since)? > 0 {
        return Ok(false);
    }
    store::add_event_in(w.tx(), origin, chat, "stranger_told")?;
    Ok(true)
}

/// [`STRANGER_REPLY`] in `chat`, unless the chat was told within the hour.
fn tell_stranger_in(
    w: &Writer<'_>,
    origin: &str,
    chat: &str,
    thread: Option<&str>,
) -> Result<Option<String>> {
    match tell_stranger_now_in(w, origin, chat)? {
        true => reply_in(w, origin, chat, thread, STRANGER_REPLY, "stranger"),
        false => Ok(None),
    }
}

/// A line in a source's chat, through the channel that answers it (none: not sent).
pub(crate) fn reply_in(
    w: &Writer<'_>,
    origin: &str,
    chat: &str,
    thread: Option<&str>,
    text: &str,
    event: &str,
) -> Result<Option<String>> {
    let routes = w.door.routes.read().expect("routes lock").clone();
    let Some(channel) = routes.replies.get(origin) else {
        tracing::warn!(
            origin,
            "no channel answers this source: a line about access is not sent"
        );
        return Ok(None);
    };
    let message = OutboundMessage {
        thread: thread.map(str::to_string),
        event: Some(event.into()),
        ..OutboundMessage::text(channel, chat, text)
    };
    let written = crate::outbound::enqueue_in(&w.door.outbound, w.tx(), &message, None)?;
    Ok((!written.first.duplicate).then(|| message.destination_key()))
}
