//! Progress on the phone: what a chat sees while its agent works. Two kinds, both cosmetic
//! (the actors send them after the chat's durable messages, may coalesce or drop them, and
//! never replay them after a restart):
//!
//! - **Receipts** on a person's message (a reaction): recorded here in the transaction that
//!   records what became of the message — taken (the agent's prompt-submit event), done (its
//!   turn ended), failed (dropped, or the turn failed) — so a reaction is never guessed and,
//!   after a crash, the actors set the one the message should show now.
//! - **Steps**: each hook event of a turn, as a [`ProgressNote`] the actors fold into one
//!   progress message per turn (the tool the agent runs and on what, how long the turn has
//!   run). Not written anywhere: a stale step is worth less than none.
//!
//! What a chat sees is its `/progress` setting, else its source's `progress` (see
//! [`NoticeRoutes::progress`](crate::outbound::routes::NoticeRoutes::progress)), else nothing.
//! Tables and statements: [`storage::progress`](crate::storage::progress).

pub mod writes;

use crate::error::Result;
use crate::hooks::{EventType, HookEvent};
use crate::outbound::routes::NoticeRoutes;
use crate::storage::sql::Executor;
use crate::tx::Tx;
use crate::InboundMessage;

pub use crate::storage::progress::{
    chat_progress, reaction, untried, LaneHolder, ProgressMode, Reaction, ReactionPlace,
    ReactionState,
};

/// What `mode` shows, in a person's words.
pub fn shows(mode: ProgressMode) -> &'static str {
    match mode {
        ProgressMode::Off => "nothing but the answers",
        ProgressMode::Receipts => "a reaction on each message: taken, done or failed",
        ProgressMode::Steps => {
            "reactions, and one message per turn with the agent's steps, edited as it works"
        }
        ProgressMode::Stream => "reactions, the agent's steps, and its answer as it grows",
    }
}

/// What chat `chat` of source `origin` sees: its own setting, else its source's.
pub fn mode_of(
    db: &dyn Executor,
    routes: &NoticeRoutes,
    origin: &str,
    chat: &str,
) -> Result<ProgressMode> {
    // A source that shows nothing cannot be asked for more by a chat either: no statement.
    let Some(own) = routes.progress.get(origin) else {
        return Ok(ProgressMode::Off);
    };
    Ok(chat_progress(db, origin, chat)?.unwrap_or(*own))
}

/// Records that `message` (inbound row `row`) should show `state`, when it came from a chat
/// that shows receipts. Whether a reaction changed.
pub fn reaction_in(
    tx: &Tx<'_>,
    routes: &NoticeRoutes,
    row: i64,
    message: &InboundMessage,
    state: ReactionState,
) -> Result<bool> {
    let (Some(chat), Some(id)) = (&message.source_channel_id, &message.source_message_id) else {
        return Ok(false);
    };
    if mode_of(tx, routes, &message.origin, chat)? < ProgressMode::Receipts {
        return Ok(false);
    }
    let place = ReactionPlace {
        row_id: row,
        session: &message.session,
        origin: &message.origin,
        chat,
        message: id,
    };
    crate::storage::progress::want_in(tx, &place, state)
}

/// The messages of `session` the agent took: its turn ended, with `state`. Whether any
/// reaction changed.
pub fn turn_ended_in(tx: &Tx<'_>, session: &str, state: ReactionState) -> Result<bool> {
    Ok(crate::storage::progress::turn_ended_in(tx, session, state)? > 0)
}

/// One step of an agent's turn, as a progress message shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Step {
    /// The agent took a message: a turn began.
    TurnStarted,
    /// It runs a tool: its name, and on what (a command, a file, a pattern), cut short.
    Tool { name: String, on: Option<String> },
    /// The tool finished (`failed`: it said it failed).
    ToolDone { name: String, failed: bool },
    /// More of the answer, as the agent writes it (shown where the chat streams).
    Text { more: String },
    /// The turn ended (`answered`: with an answer, which goes as a durable message).
    TurnEnded { answered: bool },
}

/// A step for a chat's progress message: where, and what. Serialized, it is what a daemon
/// announces to the others where several share a database (see `Database::announce`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProgressNote {
    pub session: String,
    /// The source the chat is on (its settings say how fast to edit).
    pub origin: String,
    /// The channel that answers it, the chat and the thread (topic) the session talks in.
    pub channel: String,
    pub to: String,
    pub thread: Option<String>,
    /// When `relayq hook` received the event (unix ms).
    pub at: i64,
    pub step: Step,
    /// What the chat shows (steps, or stream: the answer as it grows too).
    pub mode: ProgressMode,
}

/// The longest "on what" a step shows.
const ON_MAX_CHARS: usize = 80;

/// The step `event` is, if it is one a progress message shows.
pub fn step_of(event: &HookEvent, answer: Option<&str>) -> Option<Step> {
    let tool = || {
        event
            .field(&["tool_name"])
            .map(|name| one_line(name, 40))
            .unwrap_or_else(|| "a tool".to_string())
    };
    Some(match event.event {
        EventType::UserPromptSubmit => Step::TurnStarted,
        EventType::ToolUse => Step::Tool {
            name: tool(),
            on: tool_target(&event.data["tool_input"]),
        },
        EventType::ToolDone => Step::ToolDone {
            name: tool(),
            failed: event.native_event.as_deref() == Some("PostToolUseFailure")
                || event.data["tool_response"]["success"] == false,
        },
        EventType::AgentStop => Step::TurnEnded {
            answered: answer
                .or(event.last_assistant_message())
                .is_some_and(|a| !a.trim().is_empty()),
        },
        EventType::Error => Step::TurnEnded { answered: false },
        EventType::AnswerText => Step::Text {
            more: written_so_far(event)?,
        },
        _ => return None,
    })
}

/// The text an answer-text event adds: Claude Code's `MessageDisplay` `delta` (the lines just
/// completed), Gemini CLI's `AfterModel` response parts (strings, or `{"text": ...}`).
fn written_so_far(event: &HookEvent) -> Option<String> {
    if let Some(delta) = event.data["delta"].as_str() {
        return Some(delta.to_string());
    }
    let parts = event.data["llm_response"]["candidates"][0]["content"]["parts"].as_array()?;
    let text: String = parts
        .iter()
        .filter_map(|p| p.as_str().or_else(|| p["text"].as_str()))
        .collect();
    (!text.is_empty()).then_some(text)
}

/// What a tool works on, from its input: the first of the fields agents name it by.
fn tool_target(input: &serde_json::Value) -> Option<String> {
    const FIELDS: [&str; 9] = [
        "command",
        "file_path",
        "path",
        "absolute_path",
        "pattern",
        "url",
        "query",
        "description",
        "prompt",
    ];
    let text = FIELDS
        .iter()
        .filter_map(|f| input.get(*f).and_then(serde_json::Value::as_str))
        .find(|s| !s.trim().is_empty())?;
    Some(one_line(text, ON_MAX_CHARS))
}

/// `text` on one line, control characters out, at most `max` characters (an ellipsis when cut).
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// What a daemon announces when reactions changed (a step is announced as its JSON object).
pub const REACTIONS_CHANGED: &str = "reactions";
/// The most of a step's text announced (its end: a progress message shows no more), so an
/// announcement holds in a notification (under 8 000 bytes).
const ANNOUNCED_TEXT: usize = 1500;

/// Where several daemons share the database, tells them all (on commit, in commit order) of
/// the step `note` and that reactions changed: each daemon's progress actor hears it, and the
/// chat's lane holder shows it, whichever daemon applied the event.
pub fn announce_in(tx: &Tx<'_>, note: Option<&ProgressNote>, reactions: bool) -> Result<()> {
    if !tx.is_shared() {
        return Ok(());
    }
    if let Some(note) = note {
        let mut note = note.clone();
        if let Step::Text { more } = &mut note.step {
            let chars = more.chars().count();
            if chars > ANNOUNCED_TEXT {
                *more = more.chars().skip(chars - ANNOUNCED_TEXT).collect();
            }
        }
        let payload = serde_json::to_string(&note)
            .map_err(|e| crate::EngineError::Invalid(format!("a step to announce: {e}")))?;
        crate::storage::progress::announce_in(tx, &payload)?;
    }
    if reactions {
        crate::storage::progress::announce_in(tx, REACTIONS_CHANGED)?;
    }
    Ok(())
}

/// The note `event` makes for its session's chat, when that chat shows steps.
pub fn note_in(
    db: &dyn Executor,
    routes: &NoticeRoutes,
    event: &HookEvent,
    answer: Option<&str>,
) -> Result<Option<ProgressNote>> {
    let Some(step) = step_of(event, answer) else {
        return Ok(None);
    };
    if routes.progress.is_empty() {
        return Ok(None);
    }
    let Some(origin) = crate::sessions::origin(db, &event.session)? else {
        return Ok(None);
    };
    let Some(channel) = routes.replies.get(&origin.origin) else {
        return Ok(None);
    };
    let mode = mode_of(db, routes, &origin.origin, &origin.chat)?;
    let least = match step {
        Step::Text { .. } => ProgressMode::Stream,
        _ => ProgressMode::Steps,
    };
    if mode < least {
        return Ok(None);
    }
    Ok(Some(ProgressNote {
        session: event.session.clone(),
        origin: origin.origin,
        channel: channel.clone(),
        to: origin.chat,
        thread: origin.thread,
        at: event.received_at,
        step,
        mode,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::Agent;
    use serde_json::json;

    #[test]
    fn a_step_names_the_tool_and_what_it_works_on_on_one_short_line() {
        let event = HookEvent::new(
            Agent::Claude,
            EventType::ToolUse,
            "s",
            json!({"tool_name": "Bash", "tool_input": {"command": "cargo test\n  --workspace"}}),
        );
        assert_eq!(
            step_of(&event, None),
            Some(Step::Tool {
                name: "Bash".into(),
                on: Some("cargo test --workspace".into())
            })
        );
        let long = "x".repeat(200);
        let event = HookEvent::new(
            Agent::Gemini,
            EventType::ToolUse,
            "s",
            json!({"tool_name": "read_file", "tool_input": {"absolute_path": long}}),
        );
        let Some(Step::Tool { on: Some(on), .. }) = step_of(&event, None) else {
            panic!("a step")
        };
        assert_eq!(
            on.chars().count(),
            ON_MAX_CHARS + 1,
            "cut, with an ellipsis"
        );
        assert_eq!(
            one_line("a\u{1b}[31mb\tc", 10),
            "a[31mb c",
            "no escape reaches a chat"
        );
    }
}
