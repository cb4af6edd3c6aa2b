//! Sessions from the chat: a person starts, lists, switches, stops and resumes agent sessions
//! by typing commands ([`commands`]) or tapping buttons in a chat. Each request is recorded
//! with the batch that read it ([`writes::record_requests_in`]), before anything starts; the
//! node that hosts the project carries it out and records the outcome. Where a chat's
//! messages go follows the sessions it made ([`route`]): a topic's own session, else the
//! chat's current one, else the source's static routing. Tables and statements:
//! [`storage::chat_sessions`](crate::storage::chat_sessions).

pub mod commands;
pub mod names;
pub mod writes;

pub use crate::storage::chat_sessions::{
    by_topic, command, command_of_message, counts_in_chat, current, of_chat, project, projects,
    route, session, ChatSession, ChatSessionState, CommandRow, CommandState, ProjectEntry,
};
pub use commands::{command_of, ChatCommand, ChatWords, COMMANDS};
pub use writes::{
    CommandFailed, ConversationsListed, LeaseCommands, PublishProjects, ReclaimCommands,
    RecordRequests, RequestsRecorded, SessionReady, SessionStopped, SetTopic,
};

/// A person's request about sessions, as a source read it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRequest {
    /// The source's origin (`telegram:NAME`) and the chat and topic it came from.
    pub origin: String,
    pub chat: String,
    pub thread: Option<String>,
    /// The platform's id of the message (a command) — a second read of it is one request.
    pub message_id: Option<String>,
    pub user_id: Option<String>,
    pub user_name: String,
    /// The source's allowlist names this person: only they may start, stop or resume.
    pub may: bool,
    /// The person may write here at all (named, or in a chat the source allows as a whole);
    /// a stranger's command is refused (at most once an hour), naming nothing.
    pub known: bool,
    /// The chat can hold a topic per session (a Telegram forum).
    pub topics: bool,
    /// How many sessions the chat may hold at once (`max_sessions`).
    pub max_sessions: u32,
    pub asked: Asked,
}

/// One of an agent's own resumable conversations in a project, as `/resume` lists it (read
/// by the node that hosts the project).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Conversation {
    pub agent: crate::Agent,
    pub id: String,
    /// Its first prompt (cut), or "(no prompt)".
    pub title: String,
    /// When it last changed (unix ms).
    pub at: i64,
}

/// The origin and chat of the operator's requests (`relayq session new`, the HTTP API): no
/// chat hears them; the caller reads the outcome from the command's row.
pub const OPERATOR: &str = "operator";

impl SessionRequest {
    /// The operator's `command`, told apart by `token` (one request, however often written):
    /// allowed everything a chat's allowed user is, on any session, without a confirmation.
    pub fn operator(command: ChatCommand, token: &str, who: &str) -> SessionRequest {
        SessionRequest {
            origin: OPERATOR.into(),
            chat: OPERATOR.into(),
            thread: None,
            message_id: Some(token.to_string()),
            user_id: Some(who.to_string()),
            user_name: who.to_string(),
            may: true,
            known: true,
            topics: false,
            max_sessions: u32::MAX,
            asked: Asked::Typed(Ok(command)),
        }
    }

    /// Whether the operator asked (the CLI, the HTTP API), not a chat.
    pub fn is_operator(&self) -> bool {
        self.origin == OPERATOR
    }
}

/// What the person did.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    /// Typed a command (or one whose words are wrong: why).
    Typed(std::result::Result<ChatCommand, String>),
    /// Tapped one of relayq's session buttons; `callback` answers the tap.
    Tapped { tap: Tap, callback: Option<String> },
}

/// A session button: what its data says (`relayq-s:<verb>:<id>[:<n>]`, within Telegram's 64
/// bytes; ids are session commands').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tap {
    /// Talk to the session command `id` made (in `/sessions`).
    Use(i64),
    /// Confirm `/stop` command `id`.
    Stop(i64),
    /// Cancel `/stop` command `id`.
    Keep(i64),
    /// Resume conversation `n` of those `/resume` command `id` listed.
    Resume(i64, usize),
    /// Page `n` of `/sessions`.
    Page(u32),
}

const BUTTON_PREFIX: &str = "relayq-s:";

impl Tap {
    /// The button's data.
    pub fn data(self) -> String {
        let body = match self {
            Tap::Use(id) => format!("use:{id}"),
            Tap::Stop(id) => format!("stop:{id}"),
            Tap::Keep(id) => format!("keep:{id}"),
            Tap::Resume(id, n) => format!("resume:{id}:{n}"),
            Tap::Page(n) => format!("page:{n}"),
        };
        format!("{BUTTON_PREFIX}{body}")
    }

    /// The tap a button's data names, if it is one of relayq's session buttons.
    pub fn read(data: &str) -> Option<Tap> {
        let mut parts = data.strip_prefix(BUTTON_PREFIX)?.split(':');
        let verb = parts.next()?;
        let id: i64 = parts.next()?.parse().ok()?;
        let tap = match verb {
            "use" => Tap::Use(id),
            "stop" => Tap::Stop(id),
            "keep" => Tap::Keep(id),
            "resume" => Tap::Resume(id, parts.next()?.parse().ok()?),
            "page" => Tap::Page(u32::try_from(id).ok().filter(|p| *p >= 1)?),
            _ => return None,
        };
        parts.next().is_none().then_some(tap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buttons_data_reads_back_as_its_tap_and_nothing_else_does() {
        for tap in [
            Tap::Use(7),
            Tap::Stop(12),
            Tap::Keep(12),
            Tap::Resume(3, 9),
            Tap::Page(2),
        ] {
            assert!(tap.data().len() <= 64);
            assert_eq!(Tap::read(&tap.data()), Some(tap));
        }
        for other in [
            "relayq:7:allow",
            "relayq-s:use:x",
            "relayq-s:page:0",
            "relayq-s:use:1:2",
            "relayq-s:drop:1",
        ] {
            assert_eq!(Tap::read(other), None, "{other}");
        }
    }
}
