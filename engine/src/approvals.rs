//! The `approvals` table: an agent's permission question, answered from the chat. One row per
//! question, from the moment the agent asks until its answer reached the agent, surviving
//! restarts (every statement on the table is here).
//!
//! ```text
//!   agent asks ──▶ ask_in: a row `asked`, with its expiry ──▶ the question, with buttons, to the
//!                  session's chat (the row keeps the question's outbound row: its message id)
//!   a tap, /allow ID, yes/no, `relayq approvals allow`, the API
//!            ──▶ answer_in: `asked` → `allowed` | `denied`, once (a second answer changes
//!                nothing and is told what the first was)
//!   expiry   ──▶ expire_in: `asked` → `expired`: the agent gets an explicit deny
//!   the agent stopped asking (answered in its terminal, ended) ──▶ withdraw_in: `withdrawn`
//!   the answer reaches the agent once: reached_in marks it (a hook prints it, or keys pressed)
//!   the chat is told the outcome once: untold → the question edited → told_in
//! ```

use crate::tx::Tx;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::Result;
use crate::hooks::{Agent, HookEvent};
use crate::sessions::Origin;

pub use crate::storage::approvals::{
    answer_in, anything_to_do, ask_in, asked_by_question, asked_since, due, expire_in, get, is_id,
    keys_due, list, open_for_session, open_in_chat, open_like, pressed_at_in, pressing_in,
    reached_in, set_question_in, told_in, unreached_in, untold, withdraw_in, AnswerResult,
    Answerer, Approval, Ask, Decision, Means, Scope, State,
};

/// `[approvals]`: whether the session's chat answers its agent's permission questions, and
/// how long a question waits for an answer before the agent is told no.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Off: questions are told to the chat as before, and answered in the agent's terminal.
    pub enabled: bool,
    #[serde(with = "humantime_serde")]
    pub expire_after: std::time::Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            expire_after: std::time::Duration::from_secs(5 * 60),
        }
    }
}

/// The timeout `relayq init` sets on the agents' `PermissionRequest` hook (Claude Code's and
/// Codex's default for command hooks too): the waiting hook answers well before it.
pub const HOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// What `expire_after` may be: long enough to read a question on a phone, and short of the
/// agents' own hook timeout (600 s for Claude Code and Codex; `relayq init` sets it on the
/// hook), so the hook always answers before the agent gives up on it.
pub const EXPIRE_AFTER_RANGE: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_secs(10),
    std::time::Duration::from_secs(9 * 60),
);

impl Settings {
    /// What the file alone can tell; keys within `[approvals]`.
    pub fn check(&self) -> Result<(), crate::settings::SettingError> {
        crate::settings::check_duration(
            "expire_after",
            self.expire_after,
            EXPIRE_AFTER_RANGE,
            "the waiting hook must answer before the agent's own hook timeout (600 s)",
        )
    }
}

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
fn session_rules_of(event: &HookEvent) -> Option<Value> {
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

impl Approval {
    /// The decision the agent gets: its answer, or a deny once expired or withdrawn.
    pub fn decision(&self) -> Option<Decision> {
        match self.state {
            State::Asked => None,
            State::Allowed => Some(Decision::Allow(self.scope.unwrap_or(Scope::Once))),
            State::Denied | State::Expired | State::Withdrawn => Some(Decision::Deny),
        }
    }

    /// What happened, for the chat and the operator: "allowed by Alice at 12:03 UTC",
    /// "expired at 12:08 UTC: denied".
    pub fn outcome(&self) -> String {
        let at = self.answered_at.map(clock_time).unwrap_or_default();
        let by = self.answered_by.as_deref().unwrap_or("someone");
        let said = match self.state {
            State::Asked => format!(
                "waiting for an answer until {}",
                clock_time(self.expires_at)
            ),
            State::Allowed if self.scope == Some(Scope::Session) => {
                format!("allowed for this session by {by} at {at}")
            }
            State::Allowed => format!("allowed by {by} at {at}"),
            State::Denied => format!("denied by {by} at {at}"),
            State::Expired => format!("expired at {at} with no answer: denied"),
            State::Withdrawn => match &self.note {
                Some(why) => format!("no longer asked ({why})"),
                None => "no longer asked".into(),
            },
        };
        match &self.unreached {
            Some(why) => format!("{said}; it did not reach the agent: {why}"),
            None => said,
        }
    }
}

pub use crate::notice::clock_time;

impl AnswerResult {
    /// A line for the person who answered.
    pub fn reply(&self) -> String {
        match self {
            AnswerResult::Recorded(a) => capitalise(&a.outcome()),
            AnswerResult::AlreadyEnded(a) => format!("Already {}", a.outcome()),
            AnswerResult::NotHere(a) => format!(
                "Approval {} was not asked in this chat; answer it where it was asked",
                a.id
            ),
            AnswerResult::NotFound => "No such approval".into(),
            AnswerResult::NotAllowed => {
                "You may not answer this agent's questions: ask the bot's owner to add your \
                 user id to allowed_users"
                    .into()
            }
        }
    }
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// What a chat button answering approval `id` with `decision` carries (Telegram's
/// `callback_data`, a Slack button's `value`): `relayq:<id>:<allow|deny|allow-session>`, well
/// within Telegram's 64 bytes.
pub fn button_data(id: &str, decision: Decision) -> String {
    format!("relayq:{id}:{}", decision.word())
}

/// The approval and decision a button's data names, if it is relayq's.
pub fn read_button_data(data: &str) -> Option<(String, Decision)> {
    let (id, word) = data.strip_prefix("relayq:")?.split_once(':')?;
    Some((id.to_string(), Decision::parse(word)?))
}

/// Which approval an answer from a chat is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Named by its id (a button's data, `/allow ID`).
    Id(String),
    /// The question this platform message is (a reply of yes or no to it).
    Question { message_id: String },
    /// The one question open in the chat (or its thread) the answer came from: a bare yes or
    /// no, replying to nothing, while a question is open.
    OpenInChat,
}

/// An answer that came from a chat: a button tapped, a text command, a reply to the question.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatAnswer {
    pub target: Target,
    pub decision: Decision,
    /// Who, from which chat (`who.chat` is set).
    pub who: Answerer,
    /// Whether the source's allowlist names this user (`allowed_users`): a chat allowed as a
    /// whole lets its members write to the agent, not answer its questions.
    pub may_answer: bool,
    /// The platform's handle to acknowledge the tap with (Telegram `callback_query.id`).
    pub callback: Option<String>,
    /// The platform's id of the message that carried a text answer (the reply goes to it).
    pub message_id: Option<String>,
    /// An answer that turns out to answer no question goes to the agent as this message: a
    /// yes or no replying to a message that is no question; a bare `allow WORD` (Slack) whose
    /// word names no approval.
    pub otherwise: Option<Box<crate::InboundMessage>>,
}

/// `/allow ID`, `/allow ID session`, `/deny ID` (also `/allow@bot ID`, as Telegram writes a
/// command in a group); or, replying to a question, `yes`/`no`/`allow`/`deny`. `None` for any
/// other text, which goes to the agent as it is.
pub fn command_of(text: &str, reply_to: Option<&str>) -> Option<(Target, Decision)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let command = |word: &str| {
        let word = word.strip_prefix('/')?;
        let word = word.split_once('@').map_or(word, |(w, _)| w);
        match word.to_ascii_lowercase().as_str() {
            "allow" => Some(Decision::Allow(Scope::Once)),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    };
    match words.as_slice() {
        [first, id] if is_id(id) => Some((Target::Id(id.to_string()), command(first)?)),
        [first, id, scope] if is_id(id) && scope.eq_ignore_ascii_case("session") => {
            match command(first)? {
                Decision::Allow(_) => {
                    Some((Target::Id(id.to_string()), Decision::Allow(Scope::Session)))
                }
                Decision::Deny => None,
            }
        }
        [word] => {
            let word = word.trim_end_matches(['.', '!']).to_ascii_lowercase();
            let decision = match word.as_str() {
                "yes" | "y" | "allow" | "/allow" => Decision::Allow(Scope::Once),
                "no" | "n" | "deny" | "/deny" => Decision::Deny,
                _ => return None,
            };
            let target = match reply_to {
                Some(message_id) => Target::Question {
                    message_id: message_id.to_string(),
                },
                None => Target::OpenInChat,
            };
            Some((target, decision))
        }
        _ => None,
    }
}

/// Records an answer from a chat: only from a user the source allows to answer, only in the
/// chat it was asked in, only while it is open. `Ok(None)` when the target names no approval
/// (a reply to a message that is no question: the text goes to the agent).
pub fn answer_from_chat_in(tx: &Tx<'_>, answer: &ChatAnswer) -> Result<Option<AnswerResult>> {
    let id = match &answer.target {
        // A bare `allow WORD` that names no approval is a message after all.
        Target::Id(id) if answer.otherwise.is_some() && get(tx, id)?.is_none() => return Ok(None),
        Target::Id(id) => id.clone(),
        Target::Question { message_id } => {
            let Some((origin, chat)) = &answer.who.chat else {
                return Ok(None);
            };
            match asked_by_question(tx, origin, chat, message_id)? {
                Some(id) => id,
                None => return Ok(None),
            }
        }
        // None open, or more than one (which one is meant?): the word is a message after all.
        Target::OpenInChat => {
            let Some((origin, chat)) = &answer.who.chat else {
                return Ok(None);
            };
            let thread = answer
                .otherwise
                .as_ref()
                .and_then(|m| m.source_thread_id.as_deref());
            match open_in_chat(tx, origin, chat, thread)?.as_slice() {
                [id] => id.clone(),
                _ => return Ok(None),
            }
        }
    };
    if !answer.may_answer {
        return Ok(Some(AnswerResult::NotAllowed));
    }
    answer_in(tx, &id, answer.decision, &answer.who).map(Some)
}

/// Tells the chat how the approval ended, once: its question, edited to say the outcome
/// (buttons gone), or a new message where the question's id is not known (never delivered,
/// or a channel that cannot edit). The ordering key of the row written, to wake its sender.
pub fn tell_in(
    outbound: &crate::Queue,
    tx: &Tx<'_>,
    approval: &Approval,
) -> Result<Option<String>> {
    told_in(tx, &approval.id)?;
    let Some(row) = approval.question_row else {
        return Ok(None);
    };
    let Some(question) = crate::storage::queue::row_detail(tx, row)? else {
        return Ok(None);
    };
    let Ok(asked) = crate::OutboundMessage::from_payload(&question.payload) else {
        return Ok(None);
    };
    let what = asked
        .notice
        .as_ref()
        .and_then(|n| n.question.as_deref())
        .unwrap_or(&approval.action);
    let mark = match approval.decision() {
        Some(Decision::Allow(_)) => "✅",
        _ => "⛔",
    };
    let text = format!(
        "{} asked: {what}\n\n{mark} {}",
        approval.session,
        capitalise(&approval.outcome())
    );
    let message = crate::OutboundMessage {
        edit: question.receipt.filter(|_| question.state == "delivered"),
        idempotency_key: Some(format!("relayq-approval-{}-outcome", approval.id)),
        session: Some(approval.session.clone()),
        event: Some("approval".into()),
        thread: asked.thread.clone(),
        ..crate::OutboundMessage::text(&asked.channel, &asked.to, &text)
    };
    let written = crate::outbound::enqueue_in(outbound, tx, &message, None)?;
    Ok((!written.first.duplicate).then(|| message.destination_key()))
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
    crate::notice::cut_to(text, MAX)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::test_db::TestDb;

    fn ask(expires_at: i64) -> Ask {
        Ask {
            session: "s1".into(),
            agent: Agent::Claude,
            tool: Some("Bash".into()),
            action: "touch x".into(),
            means: Means::Hook,
            waiter_pid: Some(42),
            session_rules: Some(json!([{"type": "setMode", "mode": "acceptEdits"}])),
            origin: Some(Origin {
                origin: "telegram:bot".into(),
                chat: "7".into(),
                thread: None,
            }),
            expires_at,
        }
    }

    /// `who`'s answer to approval `id` at `at` (unix ms).
    fn answer(db: &TestDb, at: i64, id: &str, decision: Decision, who: &Answerer) -> AnswerResult {
        db.write_at(at, |tx| answer_in(tx, id, decision, who))
            .unwrap()
    }

    fn alice() -> Answerer {
        Answerer {
            name: "Alice".into(),
            id: Some("7".into()),
            via: "telegram:bot".into(),
            chat: Some(("telegram:bot".into(), "7".into())),
        }
    }

    #[test]
    fn the_first_answer_wins_and_a_second_changes_nothing() {
        for db in TestDb::both() {
            let db = &db;
            let asked = db.write_at(0, |tx| ask_in(tx, &ask(1_000))).unwrap();
            assert!(is_id(&asked.id), "{}", asked.id);
            assert_eq!(asked.state, State::Asked);
            let first = answer(
                db,
                60_000,
                &asked.id,
                Decision::Allow(Scope::Once),
                &alice(),
            );
            let AnswerResult::Recorded(now) = first else {
                panic!("{first:?}")
            };
            assert_eq!(now.state, State::Allowed);
            assert_eq!(now.outcome(), "allowed by Alice at 00:01 UTC");
            let second = answer(db, 61_000, &asked.id, Decision::Deny, &alice());
            assert!(matches!(&second, AnswerResult::AlreadyEnded(a) if a.state == State::Allowed));
            assert_eq!(second.reply(), "Already allowed by Alice at 00:01 UTC");
            // Expiry after an answer does nothing either.
            assert_eq!(
                db.write_at(2_000, |tx| expire_in(tx, &asked.id)).unwrap(),
                None
            );
        }
    }

    #[test]
    fn an_answer_from_another_chat_changes_nothing() {
        for db in TestDb::both() {
            let db = &db;
            let asked = db.write_at(0, |tx| ask_in(tx, &ask(1_000))).unwrap();
            let mut elsewhere = alice();
            elsewhere.chat = Some(("telegram:bot".into(), "8".into()));
            let result = answer(db, 1, &asked.id, Decision::Allow(Scope::Once), &elsewhere);
            assert!(matches!(result, AnswerResult::NotHere(_)));
            assert_eq!(
                get(&db.conn(), &asked.id).unwrap().unwrap().state,
                State::Asked
            );
        }
    }

    #[test]
    fn expiry_is_a_deny_the_agent_gets_once() {
        for db in TestDb::both() {
            let db = &db;
            assert!(!anything_to_do(&db.conn()).unwrap());
            let asked = db.write_at(0, |tx| ask_in(tx, &ask(1_000))).unwrap();
            assert!(anything_to_do(&db.conn()).unwrap(), "open");
            assert!(due(&db.conn(), 999).unwrap().is_empty());
            assert_eq!(due(&db.conn(), 1_000).unwrap().len(), 1);
            let expired = db
                .write_at(1_000, |tx| expire_in(tx, &asked.id))
                .unwrap()
                .unwrap();
            assert_eq!(expired.decision(), Some(Decision::Deny));
            let output: Value = serde_json::from_str(&hook_output(&expired).unwrap()).unwrap();
            assert_eq!(output["hookSpecificOutput"]["decision"]["behavior"], "deny");
            assert!(db.write_at(1_001, |tx| reached_in(tx, &asked.id)).unwrap());
            assert!(!db.write_at(1_002, |tx| reached_in(tx, &asked.id)).unwrap());
            // Told once.
            assert_eq!(untold(&db.conn()).unwrap().len(), 1);
            assert!(anything_to_do(&db.conn()).unwrap(), "untold");
            db.write_at(1_003, |tx| told_in(tx, &asked.id)).unwrap();
            assert!(untold(&db.conn()).unwrap().is_empty());
            assert!(!anything_to_do(&db.conn()).unwrap(), "nothing left");
        }
    }

    /// A keys answer: due to press once ended, marked before pressing (the mark from before
    /// a crash comes back), told only once it reached the agent or could not; never pressed
    /// when the session asked something since.
    #[test]
    fn a_keys_answer_is_pressed_once_and_told_when_settled() {
        for db in TestDb::both() {
            let db = &db;
            let keys = |expires_at| Ask {
                agent: Agent::Gemini,
                means: Means::Keys,
                waiter_pid: None,
                session_rules: Some(Value::Null),
                ..ask(expires_at)
            };
            let asked = db.write_at(0, |tx| ask_in(tx, &keys(10_000))).unwrap();
            assert!(asked.for_session);
            let read = || db.conn();
            assert!(keys_due(&read()).unwrap().is_empty(), "not answered yet");
            answer(db, 1, &asked.id, Decision::Allow(Scope::Once), &alice());
            assert_eq!(keys_due(&read()).unwrap().len(), 1);
            assert!(untold(&read()).unwrap().is_empty(), "told once pressed");
            assert_eq!(
                db.write_at(2, |tx| pressing_in(tx, &asked.id)).unwrap(),
                None
            );
            assert_eq!(
                db.write_at(3, |tx| pressing_in(tx, &asked.id)).unwrap(),
                Some(2),
                "pressed before: the first mark"
            );
            assert!(db.write_at(4, |tx| reached_in(tx, &asked.id)).unwrap());
            assert!(keys_due(&read()).unwrap().is_empty());
            assert_eq!(untold(&read()).unwrap().len(), 1);

            let second = db.write_at(5, |tx| ask_in(tx, &keys(10_000))).unwrap();
            let third = db.write_at(6, |tx| ask_in(tx, &keys(10_000))).unwrap();
            assert!(asked_since(&read(), &second).unwrap());
            assert!(!asked_since(&read(), &third).unwrap());
            db.write_at(10_000, |tx| expire_in(tx, &second.id)).unwrap();
            db.write_at(0, |tx| {
                unreached_in(tx, &second.id, "the dialog had closed")
            })
            .unwrap();
            let second = get(&read(), &second.id).unwrap().unwrap();
            assert_eq!(
                second.outcome(),
                "expired at 00:00 UTC with no answer: denied; it did not reach the agent: \
                 the dialog had closed"
            );
            assert!(keys_due(&read()).unwrap().is_empty());
            assert_eq!(untold(&read()).unwrap().len(), 2, "both settled");
        }
    }

    #[test]
    fn allow_for_the_session_hands_claude_its_own_suggestions_back() {
        for db in TestDb::both() {
            let db = &db;
            let asked = db.write_at(0, |tx| ask_in(tx, &ask(1_000))).unwrap();
            let AnswerResult::Recorded(allowed) =
                answer(db, 1, &asked.id, Decision::Allow(Scope::Session), &alice())
            else {
                panic!()
            };
            let output: Value = serde_json::from_str(&hook_output(&allowed).unwrap()).unwrap();
            let decision = &output["hookSpecificOutput"]["decision"];
            assert_eq!(decision["behavior"], "allow");
            assert_eq!(decision["updatedPermissions"][0]["mode"], "acceptEdits");

            // Without suggestions, "for the session" is an allow once.
            let mut once = ask(1_000);
            once.session_rules = None;
            let asked = db.write_at(0, |tx| ask_in(tx, &once)).unwrap();
            let AnswerResult::Recorded(allowed) =
                answer(db, 1, &asked.id, Decision::Allow(Scope::Session), &alice())
            else {
                panic!()
            };
            assert_eq!(allowed.scope, Some(Scope::Once));

            // From Claude Code's own payload: its suggestions kept to the session (never a
            // settings file), and the exact command allowed for the session.
            let event = permission_request(json!({"tool_name": "Bash",
                "tool_input": {"command": "npm test"},
                "permission_suggestions": [{"type": "addRules", "behavior": "allow",
                    "rules": [{"toolName": "Bash", "ruleContent": "npm test:*"}],
                    "destination": "localSettings"}]}));
            let rules = session_rules_of(&event).unwrap();
            assert_eq!(rules[0]["destination"], "session", "{rules:#}");
            assert_eq!(rules[1]["rules"][0]["ruleContent"], "npm test", "{rules:#}");
            assert_eq!(rules[1]["destination"], "session");
            let codex = HookEvent {
                agent: Agent::Codex,
                data: json!({"tool_name": "Bash", "tool_input": {"command": "npm test"}}),
                ..event
            };
            assert_eq!(session_rules_of(&codex), None, "Codex has no such answer");
        }
    }

    /// Claude Code's `PermissionRequest` event with `data` as its payload.
    fn permission_request(data: Value) -> HookEvent {
        HookEvent {
            native_event: Some("PermissionRequest".into()),
            ..HookEvent::new(Agent::Claude, crate::EventType::Notification, "s", data)
        }
    }

    #[test]
    fn the_action_names_the_command_or_the_file_and_its_diff() {
        let event = permission_request;
        assert_eq!(
            action_of(&event(json!({"tool_input": {"command": "touch x"}}))),
            "touch x"
        );
        assert_eq!(
            action_of(&event(json!({"tool_input": {"file_path": "/p/a.rs",
                "old_string": "a\nb", "new_string": "c\nd\ne"}}))),
            "/p/a.rs (+3 −2 lines)"
        );
        assert_eq!(
            action_of(&event(
                json!({"details": {"type": "edit", "fileName": "a.txt",
                "fileDiff": "--- a\n+++ b\n@@\n-x\n+y\n+z\n"}})
            )),
            "a.txt (+2 −1 lines)"
        );
    }
}
