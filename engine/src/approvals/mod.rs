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

pub mod agent;
pub mod chat;
pub mod writes;

pub use agent::*;
pub use chat::*;
pub use writes::Answered;

use serde::{Deserialize, Serialize};

use crate::error::Result;

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

pub use crate::outbound::notice::clock_time;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::{Agent, HookEvent};
    use crate::sessions::Origin;
    use crate::storage::test_db::TestDb;
    use serde_json::{json, Value};

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
