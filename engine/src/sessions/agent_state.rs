//! What the agent in a session is doing, from its own hook events: the state relayq waits on
//! before it pastes the next message (one message per turn, nothing typed into a dialog).
//!
//! ```text
//!   starting ──▶ ready ──prompt──▶ working ──turn ends──▶ ready …
//!                          ▲          │ ▲
//!                          │  dialog  ▼ │ tool ran
//!                          │   awaiting_approval
//!                          └── idle reminder (the dialog was dismissed in the terminal)
//!   any ──session ends / pane gone / the pane runs a shell──▶ gone
//! ```
//!
//! Which event moves which state, per agent (the README has the same table):
//!
//! | state | Claude Code | Codex | Gemini CLI |
//! |---|---|---|---|
//! | ready | SessionStart, Stop, StopFailure, Notification `idle_prompt` | SessionStart, Stop; `notify` only without hooks | SessionStart, AfterAgent |
//! | working | UserPromptSubmit, PreToolUse, PostToolUse | UserPromptSubmit, PreToolUse, PostToolUse | BeforeAgent, BeforeTool, AfterTool |
//! | awaiting_approval | PermissionRequest, Notification `permission_prompt`, `elicitation_dialog` | PermissionRequest | Notification `ToolPermission` |
//! | gone | SessionEnd (but `reason` `clear`) | — | SessionEnd (but `reason` `clear`) |
//!
//! `/clear` in Claude Code or Gemini CLI ends the conversation, not the agent: a SessionEnd
//! with `reason` `clear`, then a SessionStart with `source` `clear` under a new agent session
//! id, in the same process and pane ([`conversation_cleared`]). The relayq session goes on.
//!
//! `starting` is what relayq says of an agent seen running in its pane that has not reported
//! yet (Codex says nothing before its first prompt).

use serde_json::Value;

use crate::hooks::{Agent, HookEvent};

pub use crate::storage::sessions::AgentState;

/// A SessionEnd that only ends the agent's conversation (`/clear`): the agent runs on.
pub fn conversation_cleared(event: &HookEvent) -> bool {
    event.native_event.as_deref() == Some("SessionEnd") && event.field(&["reason"]) == Some("clear")
}

/// The state `event` moves its session's agent to; `None`: the event says nothing of it.
pub fn after(event: &HookEvent) -> Option<AgentState> {
    use AgentState::*;
    let native = event.native_event.as_deref()?;
    let notification = || event.field(&["notification_type"]).unwrap_or_default();
    match (event.agent, native) {
        (_, "SessionStart") => Some(Ready),
        (_, "SessionEnd") if conversation_cleared(event) => None,
        (_, "SessionEnd") => Some(Gone),
        (Agent::Claude | Agent::Codex, name) => match name {
            "UserPromptSubmit" | "PreToolUse" | "PostToolUse" | "PostToolUseFailure" => {
                Some(Working)
            }
            "PermissionRequest" => Some(AwaitingApproval),
            "Stop" | "StopFailure" | "agent-turn-complete" => Some(Ready),
            "Notification" => match notification() {
                "permission_prompt" | "elicitation_dialog" => Some(AwaitingApproval),
                "idle_prompt" => Some(Ready),
                _ => None,
            },
            _ => None,
        },
        (Agent::Gemini, name) => match name {
            "BeforeAgent" | "BeforeTool" | "AfterTool" => Some(Working),
            "AfterAgent" => Some(Ready),
            "Notification" if notification() == "ToolPermission" => Some(AwaitingApproval),
            _ => None,
        },
    }
}

/// An idle reminder: the agent says it waits for input, after an answer the chat already has
/// (Claude Code's `idle_prompt`, about a minute after every answer). Not a "needs you" unless
/// `[routes] idle_reminders = true`.
pub fn is_idle_reminder(event: &HookEvent) -> bool {
    event.agent == Agent::Claude
        && event.native_event.as_deref() == Some("Notification")
        && event.field(&["notification_type"]) == Some("idle_prompt")
}

/// Codex's `notify` (`agent-turn-complete`): a fallback for setups without Codex's hooks.
pub fn is_codex_notify(event: &HookEvent) -> bool {
    event.agent == Agent::Codex && event.native_event.as_deref() == Some("agent-turn-complete")
}

/// The prompt Codex sends on a session's first turn to name the task, in a side thread of its
/// own whose `notify` would read "agent finished: <a title>".
const CODEX_TITLE_PROMPT: &str = "Generate a concise, single-line task title";

/// An event of one of Codex's side threads (the one that names the task), not of the session's
/// main thread: its thread differs from the session's known one, or, before the session's
/// thread is known, it is the title thread's `notify`.
pub fn is_side_thread(event: &HookEvent, main_thread: Option<&str>) -> bool {
    if event.agent != Agent::Codex {
        return false;
    }
    match (main_thread, event.native_session_id.as_deref()) {
        (Some(main), Some(thread)) => main != thread,
        _ => {
            is_codex_notify(event)
                && input_messages(event).next().is_some_and(|first| {
                    first.starts_with(CODEX_TITLE_PROMPT) && input_messages(event).count() == 1
                })
        }
    }
}

/// Codex `notify`'s `input-messages`: every user message of the thread so far.
fn input_messages(event: &HookEvent) -> impl Iterator<Item = &str> {
    event
        .data
        .get("input-messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The person's message of this turn: the hook's `prompt`, or the last of Codex `notify`'s
/// `input-messages` (which holds the whole thread).
pub fn this_turns_input(event: &HookEvent) -> Option<&str> {
    event
        .field(&["prompt"])
        .or_else(|| input_messages(event).last())
}

/// Whether the prompt an agent reports submitted is `pasted` (the text relayq pasted): the
/// same words, whatever the agent did to the white space (Claude Code turns a tab into
/// spaces; a paste may gain or lose a trailing newline).
pub fn prompt_matches(prompt: &str, pasted: &str) -> bool {
    // Control characters are taken out of a paste (see the tmux channel's `sanitize`).
    let words = |s: &str| {
        let kept: String = s
            .chars()
            .filter(|c| c.is_whitespace() || !c.is_control())
            .collect();
        kept.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let (prompt, pasted) = (words(prompt), words(pasted));
    !pasted.is_empty() && prompt.contains(&pasted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::{receive, Received};

    fn event(agent: Agent, json: &str) -> HookEvent {
        match receive(agent, json, None) {
            Received::Event(e) => e,
            other => panic!("not an event: {other:?}"),
        }
    }

    fn fixture(path: &str) -> String {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/");
        std::fs::read_to_string(format!("{dir}{path}")).expect("the captured fixture")
    }

    #[test]
    fn captured_events_move_the_agent_state_as_the_table_says() {
        use AgentState::*;
        let cases = [
            (
                Agent::Claude,
                "claude-code/captured/SessionStart.json",
                Some(Ready),
            ),
            (
                Agent::Claude,
                "claude-code/captured/UserPromptSubmit.json",
                Some(Working),
            ),
            (
                Agent::Claude,
                "claude-code/captured/PermissionRequest.json",
                Some(AwaitingApproval),
            ),
            (Agent::Claude, "claude-code/captured/Stop.json", Some(Ready)),
            (
                Agent::Claude,
                "claude-code/captured/Notification.json",
                Some(Ready),
            ),
            (
                Agent::Codex,
                "codex/captured/SessionStart.json",
                Some(Ready),
            ),
            (
                Agent::Codex,
                "codex/captured/UserPromptSubmit.json",
                Some(Working),
            ),
            (
                Agent::Codex,
                "codex/captured/PreToolUse.json",
                Some(Working),
            ),
            (
                Agent::Codex,
                "codex/captured/PermissionRequest.json",
                Some(AwaitingApproval),
            ),
            (
                Agent::Codex,
                "codex/captured/PostToolUse.json",
                Some(Working),
            ),
            (Agent::Codex, "codex/captured/Stop.json", Some(Ready)),
            (Agent::Codex, "codex/captured/notify.json", Some(Ready)),
            (
                Agent::Gemini,
                "gemini/captured/SessionStart.json",
                Some(Ready),
            ),
            (
                Agent::Gemini,
                "gemini/captured/BeforeAgent.json",
                Some(Working),
            ),
            (
                Agent::Gemini,
                "gemini/captured/Notification.json",
                Some(AwaitingApproval),
            ),
            (
                Agent::Gemini,
                "gemini/captured/AfterAgent.json",
                Some(Ready),
            ),
        ];
        for (agent, path, want) in cases {
            assert_eq!(after(&event(agent, &fixture(path))), want, "{path}");
        }
        let claude_permission = r#"{"hook_event_name":"Notification","session_id":"s",
            "message":"Claude needs your permission","notification_type":"permission_prompt"}"#;
        assert_eq!(
            after(&event(Agent::Claude, claude_permission)),
            Some(AwaitingApproval)
        );
    }

    #[test]
    fn codex_title_thread_is_a_side_thread_and_the_main_thread_is_not() {
        let title = event(
            Agent::Codex,
            &fixture("codex/captured/notify-title-thread.json"),
        );
        let main = event(Agent::Codex, &fixture("codex/captured/notify.json"));
        let main_id = "01a21b31-88aa-71a3-b1f2-7b495bfdf2dc";
        assert!(is_side_thread(&title, None) && is_side_thread(&title, Some(main_id)));
        assert!(!is_side_thread(&main, None) && !is_side_thread(&main, Some(main_id)));
        let hook = event(Agent::Codex, &fixture("codex/captured/Stop.json"));
        assert!(!is_side_thread(&hook, Some(main_id)));
    }

    #[test]
    fn this_turns_input_is_the_prompt_or_the_last_notify_message() {
        let later = event(
            Agent::Codex,
            &fixture("codex/captured/notify-later-turn.json"),
        );
        assert_eq!(this_turns_input(&later), Some("please reply t4c0118d"));
        let gemini = event(Agent::Gemini, &fixture("gemini/captured/BeforeAgent.json"));
        assert_eq!(this_turns_input(&gemini), Some("please reply t18ff2df"));
    }

    #[test]
    fn a_prompt_matches_the_pasted_text_whatever_the_white_space() {
        assert!(prompt_matches(
            "line one\nline two     tab",
            "line one\nline two\t tab\n"
        ));
        assert!(!prompt_matches("please reply x", "please reply y"));
        assert!(!prompt_matches("anything", "  "));
        assert!(prompt_matches("a[201~b", "a\x1b[201~b"));
    }
}
