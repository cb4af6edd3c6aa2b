//! The approvals as the agent sees them: which of its events ask a question, what the question
//! is about, and what its hook prints once it is answered (the decision, and a deny's words).

use serde_json::{json, Value};

use super::*;
use crate::hooks::{Agent, HookEvent};
use crate::sessions::Origin;

/// The approval a permission request opens, when the session's chat can answer it: Claude
/// Code's and Codex's `PermissionRequest` (answered by the waiting hook), Gemini CLI's
/// `ToolPermission` notification (answered by the dialog's keys). `None` for any other event,
/// when approvals are off, or when the session has no chat to ask.
pub fn ask_of(
    event: &HookEvent,
    origin: Option<Origin>,
    settings: &Settings,
    waiter_pid: Option<u32>,
    now: i64,
) -> Option<Ask> {
    if !settings.enabled {
        return None;
    }
    let native = event.native_event.as_deref()?;
    let (means, session_rules) = match event.agent {
        Agent::Claude | Agent::Codex if native == "PermissionRequest" => {
            (Means::Hook, session_rules_of(event))
        }
        Agent::Gemini
            if native == "Notification"
                && event.field(&["notification_type"]) == Some("ToolPermission") =>
        {
            (Means::Keys, Some(Value::Null))
        }
        _ => return None,
    };
    let origin = origin?;
    Some(Ask {
        session: event.session.clone(),
        agent: event.agent,
        tool: event
            .field(&["tool_name"])
            .or_else(|| event.data.get("details")?.get("title")?.as_str())
            .map(str::to_string),
        action: action_of(event),
        means,
        waiter_pid: waiter_pid.filter(|_| means == Means::Hook),
        session_rules,
        origin: Some(origin),
        expires_at: now + settings.expire_after.as_millis() as i64,
    })
}

/// What "allow for this session" hands back to Claude Code (`updatedPermissions`), `None` when
/// it is not offered: Claude Code's own suggestions for the call (its dialog's "don't ask
/// again" choice), each kept to this session (never written to a settings file from a chat),
/// and, for a shell command, a rule allowing that exact command: Claude Code's suggestions for
/// a command in the project's directory are that directory, which does not spare the next
/// identical call its question (seen with Claude Code 2.1.197).
pub(super) fn session_rules_of(event: &HookEvent) -> Option<Value> {
    let mut rules: Vec<Value> = event
        .data
        .get("permission_suggestions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for rule in &mut rules {
        if rule.get("destination").is_some() {
            rule["destination"] = json!("session");
        }
    }
    let command = event
        .data
        .get("tool_input")
        .and_then(|i| i.get("command"))
        .and_then(Value::as_str);
    if let (Agent::Claude, Some("Bash"), Some(command)) =
        (event.agent, event.field(&["tool_name"]), command)
    {
        rules.push(json!({
            "type": "addRules",
            "rules": [{"toolName": "Bash", "ruleContent": command}],
            "behavior": "allow",
            "destination": "session",
        }));
    }
    (!rules.is_empty()).then_some(Value::Array(rules))
}

/// What the agent's hook prints for an ended approval: Claude Code's and Codex's
/// `PermissionRequest` decision output. An allow for the session hands Claude Code back its
/// own suggestions (what its dialog's "don't ask again" option applies).
pub fn hook_output(approval: &Approval) -> Option<String> {
    let decision = approval.decision()?;
    let mut answer = match decision {
        Decision::Allow(_) => json!({"behavior": "allow"}),
        Decision::Deny => json!({"behavior": "deny", "message": deny_message(approval)}),
    };
    if let (Decision::Allow(Scope::Session), Some(rules)) = (decision, &approval.session_rules) {
        if rules.is_array() {
            answer["updatedPermissions"] = rules.clone();
        }
    }
    Some(hook_decision(answer))
}

/// The deny a hook prints for approval `id` when it expired but could not be recorded so.
pub fn expired_hook_output(id: &str) -> String {
    hook_decision(json!({"behavior": "deny", "message": expired_message(id)}))
}

fn hook_decision(answer: Value) -> String {
    json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": answer}})
        .to_string()
}

fn expired_message(id: &str) -> String {
    format!("no answer came from the chat in time (relayq approval {id}): denied")
}

/// What a deny tells the agent (and so the model): who said no, or why no one did.
pub fn deny_message(approval: &Approval) -> String {
    match approval.state {
        State::Denied => format!(
            "{} denied this from the chat (relayq approval {})",
            approval.answered_by.as_deref().unwrap_or("the user"),
            approval.id
        ),
        State::Expired => expired_message(&approval.id),
        _ => format!("denied (relayq approval {})", approval.id),
    }
}

/// What a permission request asks to do, in one short text: the command; the file and a diff
/// summary (`+3 −1 lines`) for an edit; the tool's input otherwise, cut.
pub fn action_of(event: &HookEvent) -> String {
    const MAX: usize = 600;
    let input = event.data.get("tool_input").or(event.data.get("details"));
    let field = |name: &str| input.and_then(|i| i.get(name)).and_then(Value::as_str);
    let file = field("file_path").or(field("fileName")).or(field("path"));
    let text = if let Some(command) = field("command") {
        command.to_string()
    } else if let Some(file) = file {
        let old = field("old_string").map(line_count);
        let new = field("new_string").or(field("content")).map(line_count);
        match (old, new, field("fileDiff")) {
            (_, _, Some(diff)) => format!("{file} ({})", diff_summary(diff)),
            (Some(old), Some(new), _) => format!("{file} (+{new} −{old} lines)"),
            (None, Some(new), _) => format!("{file} (write {new} lines)"),
            _ => file.to_string(),
        }
    } else if let Some(input) = input {
        input.to_string()
    } else {
        event
            .field(&["message", "tool_name"])
            .unwrap_or("a tool call")
            .to_string()
    };
    crate::outbound::notice::cut_to(text, MAX)
}

fn line_count(text: &str) -> usize {
    text.lines().count().max(1)
}

/// `+3 −1 lines` for a unified diff.
fn diff_summary(diff: &str) -> String {
    let added = diff
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .count();
    let removed = diff
        .lines()
        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
        .count();
    format!("+{added} −{removed} lines")
}
