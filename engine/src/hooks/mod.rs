//! The hook-event flow's message: an agent CLI's hook payload (Claude Code, Codex, Gemini CLI)
//! mapped to relayq's internal event types, keeping the agent's payload whole.

pub mod handlers;
pub mod spool;
pub mod transcript;
pub mod writes;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::policy::QueuePolicy;
use crate::queue::NewRow;

/// The name of the hook-event queue.
pub const QUEUE: crate::QueueName = crate::QueueName::Hooks;

/// How much of an undecodable input is kept in the `error` row.
pub const MAX_KEPT_INPUT: usize = 4096;

pub use crate::storage::sessions::Agent;

/// relayq's internal event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    SessionStart,
    UserPromptSubmit,
    ToolUse,
    ToolDone,
    /// The answer as it is written (Claude Code's `MessageDisplay`, Gemini CLI's
    /// `AfterModel`): shown in chats that stream it.
    AnswerText,
    AgentStop,
    Notification,
    Error,
    SessionEnd,
}

impl EventType {
    /// Critical events are never dropped or coalesced; the others are bursty.
    pub fn is_critical(self) -> bool {
        !matches!(
            self,
            EventType::ToolUse | EventType::ToolDone | EventType::AnswerText
        )
    }
}

/// The agent's own event name in a payload: `hook_event_name`, or Codex `notify`'s `type`.
pub fn native_event(payload: &Value) -> Option<&str> {
    payload
        .get("hook_event_name")
        .or_else(|| payload.get("type"))
        .and_then(Value::as_str)
}

/// Maps an agent's event to an internal type; `None` for the events relayq does not forward.
pub fn map_event(agent: Agent, native: &str) -> Option<EventType> {
    use EventType::*;
    let claude_like = |name: &str| match name {
        "SessionStart" => Some(SessionStart),
        "UserPromptSubmit" => Some(UserPromptSubmit),
        "PreToolUse" => Some(ToolUse),
        "PostToolUse" | "PostToolUseFailure" => Some(ToolDone),
        "MessageDisplay" => Some(AnswerText),
        "Stop" => Some(AgentStop),
        // PermissionDenied: Claude Code's auto mode blocked a call by itself, asking no one.
        "Notification" | "PermissionRequest" | "PermissionDenied" => Some(Notification),
        "StopFailure" => Some(Error),
        "SessionEnd" => Some(SessionEnd),
        _ => None,
    };
    match (agent, native) {
        (Agent::Claude, name) => claude_like(name),
        (Agent::Codex, "agent-turn-complete") => Some(AgentStop),
        (Agent::Codex, name) => claude_like(name),
        (Agent::Gemini, name) => match name {
            "SessionStart" => Some(SessionStart),
            "BeforeAgent" => Some(UserPromptSubmit),
            "BeforeTool" => Some(ToolUse),
            "AfterTool" => Some(ToolDone),
            "AfterModel" => Some(AnswerText),
            "AfterAgent" => Some(AgentStop),
            "Notification" => Some(Notification),
            "SessionEnd" => Some(SessionEnd),
            _ => None,
        },
    }
}

/// The agent's own session id: `session_id`, or Codex `notify`'s `thread-id`.
pub fn native_session_id(payload: &Value) -> Option<&str> {
    payload
        .get("session_id")
        .or_else(|| payload.get("thread-id"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A stored hook event: the mapped type plus the agent's payload as it came.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookEvent {
    pub agent: Agent,
    pub event: EventType,
    /// The agent's name for it (`Stop`, `AfterAgent`, `agent-turn-complete`); none for an
    /// undecodable input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_event: Option<String>,
    /// The relayq session key the row is ordered by.
    pub session: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_session_id: Option<String>,
    pub received_at: i64,
    /// The tmux pane the hook ran in (`$TMUX_PANE`), when it ran in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pane: Option<String>,
    /// The node the hook ran on (its `[node] name`): the session's agent runs there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The approval `relayq hook` recorded for this permission request, and waits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// The agent's payload, every field kept; for an `error` from bad input, the decode error
    /// and the start of the input.
    pub data: Value,
}

impl HookEvent {
    /// Event `event` of `agent` for `session`, with `data` as its payload and nothing else
    /// known yet (no native name or id, no pane, no approval, received at 0).
    pub fn new(agent: Agent, event: EventType, session: impl Into<String>, data: Value) -> Self {
        HookEvent {
            agent,
            event,
            native_event: None,
            session: session.into(),
            native_session_id: None,
            received_at: 0,
            pane: None,
            node: None,
            approval: None,
            data,
        }
    }

    /// The first of `fields` of the event's data that is a non-empty string.
    pub fn field(&self, fields: &[&str]) -> Option<&str> {
        fields
            .iter()
            .filter_map(|f| self.data.get(*f).and_then(serde_json::Value::as_str))
            .find(|s| !s.trim().is_empty())
    }

    /// The agent's final answer: Claude and Codex hooks, Codex `notify`, Gemini `AfterAgent`.
    pub fn last_assistant_message(&self) -> Option<&str> {
        self.field(&[
            "last_assistant_message",
            "last-assistant-message",
            "prompt_response",
        ])
    }

    /// Reads a stored row back. The receiver decodes every row it writes with this too, so a
    /// payload the daemon could not read (nested past serde_json's depth limit, say) is caught
    /// while the agent still waits for the answer, not lost later as `undecodable`.
    pub fn from_payload(payload: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(payload)
    }

    /// The queue row: ordered by session, never deduplicated.
    pub fn to_row(&self) -> NewRow {
        NewRow {
            key: self.session.clone(),
            payload: serde_json::to_string(self).expect("a hook event always serialises"),
            dedup_key: None,
        }
    }
}

/// What a hook receiver (`relayq hook`, `POST /v1/hooks/{agent}`) makes of an agent's input.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    /// Not an event relayq forwards: nothing is stored.
    Ignored,
    /// The event to store.
    Event(HookEvent),
    /// The input cannot be kept as it came: an `error` event stands for it (the error and the
    /// start of the input), stored so the operator sees it, and `error` says what was wrong.
    Invalid { event: HookEvent, error: String },
}

/// Maps an agent's hook input to the event to store. `session` overrides the agent's own
/// session id (`RELAYQ_SESSION`, or the HTTP route's `session`). `received_at` is left 0 for
/// the writer to stamp.
pub fn receive(agent: Agent, input: &str, session: Option<String>) -> Received {
    let payload = match serde_json::from_str::<Value>(input) {
        Ok(payload) => payload,
        Err(e) => {
            let stored = format!("invalid JSON from the {agent:?} hook: {e}");
            let session = session.unwrap_or_else(|| "unknown".into());
            let event = error_event(agent, session, &stored, input);
            let error = format!("the hook payload is not valid JSON ({e})");
            return Received::Invalid { event, error };
        }
    };
    let Some(event) = native_event(&payload).and_then(|name| map_event(agent, name)) else {
        return Received::Ignored;
    };
    let native = native_event(&payload).map(str::to_string);
    let native_id = native_session_id(&payload).map(str::to_string);
    let session = session.or_else(|| native_id.clone());
    let event = HookEvent {
        native_event: native,
        native_session_id: native_id,
        ..HookEvent::new(
            agent,
            event,
            session.unwrap_or_else(|| "unknown".into()),
            payload,
        )
    };
    // The daemon must be able to read what is stored: check with its own decoder.
    if let Err(e) = HookEvent::from_payload(&event.to_row().payload) {
        let error = format!("the {agent:?} hook payload cannot be stored as it is: {e}");
        let event = error_event(agent, event.session, &error, input);
        return Received::Invalid { event, error };
    }
    Received::Event(event)
}

/// An `error` event standing for an input that cannot be kept as it came: the error and the
/// start of the input.
fn error_event(agent: Agent, session: String, error: &str, input: &str) -> HookEvent {
    let data = serde_json::json!({"error": error, "input": head_of(input, MAX_KEPT_INPUT)});
    HookEvent::new(agent, EventType::Error, session, data)
}

/// The first `max` bytes of `input`, cut on a character boundary.
pub fn head_of(input: &str, max: usize) -> &str {
    if input.len() <= max {
        return input;
    }
    let mut end = max;
    while !input.is_char_boundary(end) {
        end -= 1;
    }
    &input[..end]
}

impl QueuePolicy {
    /// The hook queue's defaults (hook-outbox design): 1..60 s backoff, 30 s lease, dead after
    /// 20 attempts so a deterministic failure cannot retry forever.
    pub fn hooks() -> Self {
        QueuePolicy {
            backoff: crate::policy::secs(&[1, 2, 4, 8, 16, 32, 60]),
            lease_timeout: std::time::Duration::from_secs(30),
            max_attempts: Some(20),
            ..QueuePolicy::inbound()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn critical_and_bursty_classes() {
        assert!(!EventType::ToolUse.is_critical() && !EventType::ToolDone.is_critical());
        for e in [
            EventType::SessionStart,
            EventType::UserPromptSubmit,
            EventType::AgentStop,
            EventType::SessionEnd,
            EventType::Notification,
            EventType::Error,
        ] {
            assert!(e.is_critical(), "{e:?}");
        }
    }

    #[test]
    fn hook_backoff_is_1_to_60_seconds_with_20_attempts() {
        let p = QueuePolicy::hooks();
        let got: Vec<u64> = (1..=9).map(|n| p.delay_after(n).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert!(!p.exhausted(19) && p.exhausted(20));
    }

    #[test]
    fn head_of_cuts_on_a_char_boundary() {
        assert_eq!(head_of("héllo", 2), "h");
        assert_eq!(head_of("abc", 10), "abc");
    }
}
