//! The writes about agents' questions: the waiting hook's (`relayq hook`: the question asked
//! with its event, its expiry, the agent reached), the ApprovalsActor's (see
//! `actors/src/approvals.rs`: its look each second, and the record of a dialog answered by its
//! keys) and the operator's answer.

use crate::tx::Tx;

use crate::approvals::{self, AnswerResult, Approval, ChatAnswer, Means};
use crate::error::Result;
use crate::sessions;
use crate::writes::{Write, Writer};
use crate::AgentState;

/// An answer from a chat once recorded: the line for the person who gave it, and whether it
/// took effect (the first answer to an open question) or changed nothing (a second click, a
/// stranger's), which a platform may show differently where the click was made.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub answer: ChatAnswer,
    pub reply: String,
    pub took_effect: bool,
}

/// What recording a batch's answers did, for the caller to act on after the commit.
#[derive(Debug, Default)]
pub struct ChatAnswersRecorded {
    /// Each answer with the line for the person who gave it.
    pub answered: Vec<Answered>,
    /// Outbound rows written (questions edited, replies): wake their sender.
    pub outbound_keys: Vec<String>,
    /// Answers that answer nothing, written as messages for their sessions: wake them.
    pub sessions: Vec<String>,
}

/// Records answers from chats in the write's transaction: each answer that names an open
/// question is recorded (the first wins), its question told (a hook answer at once; a keys
/// answer once pressed, by the daemon); a text answer gets a reply in its chat; a yes or no
/// that answers no question is written as the message it is.
pub fn record_chat_answers_in(
    w: &Writer<'_>,
    answers: &[ChatAnswer],
) -> Result<ChatAnswersRecorded> {
    let (tx, door) = (w.tx(), w.door);
    let mut recorded = ChatAnswersRecorded::default();
    for answer in answers {
        // The role pairing gave, over the one the source's settings give.
        let answer = &crate::access::answer_in(w, answer)?;
        if answer.role == crate::access::Role::Stranger && answer.callback.is_none() {
            recorded
                .outbound_keys
                .extend(crate::access::stranger_answer_in(w, answer)?);
            continue;
        }
        let Some(result) = approvals::answer_from_chat_in(tx, answer)? else {
            if let Some(message) = &answer.otherwise {
                let row = crate::inbound::enqueue_in(&door.inbound, tx, message)?;
                if !row.duplicate && row.expired.is_none() {
                    recorded.sessions.push(message.session.clone());
                }
            }
            continue;
        };
        let reply = result.reply();
        match &result {
            AnswerResult::Recorded(approval) => {
                tracing::info!(
                    approval = approval.id,
                    session = approval.session,
                    by = answer.who.name,
                    outcome = approval.outcome(),
                    "approval answered from the chat"
                );
                // A keys answer is told once its keys were pressed (the ApprovalsActor).
                if approval.means == Means::Hook {
                    recorded.outbound_keys.extend(approvals::tell_in(
                        &door.outbound,
                        tx,
                        approval,
                    )?);
                }
            }
            AnswerResult::NotAllowed => {
                tracing::warn!(by = answer.who.name, id = ?answer.who.id, "an answer from someone not in allowed_users: refused");
            }
            _ => {}
        }
        if answer.callback.is_none() {
            recorded
                .outbound_keys
                .extend(reply_in(door, tx, answer, &reply)?);
        }
        recorded.answered.push(Answered {
            answer: answer.clone(),
            reply,
            took_effect: matches!(result, AnswerResult::Recorded(_)),
        });
    }
    Ok(recorded)
}

/// A text answer's reply, in its chat, to its message.
fn reply_in(
    door: &crate::WriteDoor,
    tx: &Tx<'_>,
    answer: &ChatAnswer,
    reply: &str,
) -> Result<Option<String>> {
    let Some((origin, chat)) = &answer.who.chat else {
        return Ok(None);
    };
    let routes = door.routes.read().expect("routes lock").clone();
    let Some(channel) = routes.replies.get(origin) else {
        return Ok(None);
    };
    let message = crate::OutboundMessage {
        reply_to: answer.message_id.clone(),
        idempotency_key: answer
            .message_id
            .as_ref()
            .map(|m| format!("relayq-approval-reply-{origin}-{chat}-{m}")),
        event: Some("approval".into()),
        ..crate::OutboundMessage::text(channel, chat, reply)
    };
    let written = crate::outbound::enqueue_in(&door.outbound, tx, &message, None)?;
    Ok((!written.first.duplicate).then(|| message.destination_key()))
}

/// How long after its expiry an approval whose hook still waits is left to that hook (which
/// expires it itself, and prints the deny), before the daemon expires it.
pub const HOOK_GRACE_MS: i64 = 5_000;

/// How old an open keys approval must be before its dialog is looked for: the agent may tell
/// its hook before it draws the dialog.
pub const DIALOG_SETTLE_MS: i64 = 5_000;

/// The look: ends the open approvals nobody will end (past expiry, the hook that should have
/// expired it gone; its waiting hook dead), tells the chats of those that ended, and finds
/// the keys answers to press and the open keys questions whose dialog is to be looked at.
#[derive(Debug, Clone, Copy)]
pub struct SweepApprovals {
    /// Whether a waiting hook's process still runs (on this host).
    pub waiter_alive: fn(u32) -> bool,
}

/// What [`SweepApprovals`] found.
#[derive(Debug, Default)]
pub struct ApprovalsSwept {
    /// Outbound rows written (chats told): wake their sender.
    pub told: Vec<String>,
    /// Keys answers to press.
    pub to_press: Vec<Approval>,
    /// Open keys approvals whose dialog is to be looked at.
    pub to_check: Vec<Approval>,
}

impl Write for SweepApprovals {
    type Output = ApprovalsSwept;

    fn apply(&self, w: &Writer<'_>) -> Result<ApprovalsSwept> {
        let (tx, now) = (w.tx(), w.now());
        let mut found = ApprovalsSwept::default();
        for open in approvals::list(tx, true, 1000)? {
            match self.end_if_unwaited(w, &open)? {
                Some(ended) => tracing::info!(
                    approval = ended.id,
                    session = ended.session,
                    outcome = ended.outcome(),
                    "approval ended by the daemon"
                ),
                None if open.means == Means::Keys && now - open.asked_at >= DIALOG_SETTLE_MS => {
                    found.to_check.push(open)
                }
                None => {}
            }
        }
        for ended in approvals::untold(tx)? {
            found
                .told
                .extend(approvals::tell_in(&w.door.outbound, tx, &ended)?);
        }
        found.to_press = approvals::keys_due(tx)?;
        Ok(found)
    }
}

impl SweepApprovals {
    /// Ends `open` when no one will: past its expiry (a waiting hook gets a little longer, as
    /// it expires the approval itself and prints the deny), or its waiting hook is gone.
    fn end_if_unwaited(&self, w: &Writer<'_>, open: &Approval) -> Result<Option<Approval>> {
        let now = w.now();
        let waiter_alive =
            open.means == Means::Hook && open.waiter_pid.is_some_and(self.waiter_alive);
        if open.means == Means::Hook && !waiter_alive {
            let why = "the agent stopped waiting: answered in its terminal, or it quit";
            return approvals::withdraw_in(w.tx(), &open.id, why);
        }
        let grace = if waiter_alive { HOOK_GRACE_MS } else { 0 };
        if now >= open.expires_at + grace {
            return approvals::expire_in(w.tx(), &open.id);
        }
        Ok(None)
    }
}

/// Before a keys answer is pressed: its send-started mark, unless the session asked anything
/// since (a newer dialog stands where its dialog stood: then it is unreached, and nothing is
/// to be pressed). Answers `None` then, else the mark from before a restart, if any.
#[derive(Debug, Clone)]
pub struct StartPressing(pub Approval);

impl Write for StartPressing {
    type Output = Option<Option<i64>>;

    fn apply(&self, w: &Writer<'_>) -> Result<Self::Output> {
        let tx = w.tx();
        if approvals::asked_since(tx, &self.0)? {
            let why = "the agent asked another question meanwhile: nothing was pressed";
            approvals::unreached_in(tx, &self.0.id, why)?;
            return Ok(None);
        }
        Ok(Some(approvals::pressing_in(tx, &self.0.id)?))
    }
}

/// What pressing a keys answer did, as the channel saw the dialog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pressed {
    /// The key went and the dialog left the screen; whether the agent is at its prompt.
    Answered { at_prompt: bool },
    /// No dialog about the action shows: nothing pressed, why.
    NotShown(String),
    /// The session's channel cannot press keys.
    CannotPress,
}

/// Records what pressing a keys answer did. `earlier`: the send-started mark from before a
/// restart (keys pressed, then a crash before their record).
#[derive(Debug, Clone)]
pub struct RecordPressed {
    pub approval: Approval,
    pub earlier: Option<i64>,
    pub pressed: Pressed,
}

impl Write for RecordPressed {
    type Output = ();

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        let (tx, now, approval) = (w.tx(), w.now(), &self.approval);
        let id = &approval.id;
        match &self.pressed {
            Pressed::Answered { at_prompt } => {
                if approvals::reached_in(tx, id)? {
                    let state = match at_prompt {
                        true => AgentState::Ready,
                        false => AgentState::Working,
                    };
                    // The screen was read when the keys were pressed: an event the agent
                    // sent since (its turn ended while this was recorded) says more.
                    let pressed = approvals::pressed_at_in(tx, id)?.unwrap_or(now);
                    sessions::set_agent_state_if_older(tx, &approval.session, state, pressed)?;
                }
                let session = &approval.session;
                tracing::info!(
                    approval = id,
                    session,
                    "the dialog was answered by its keys"
                );
            }
            Pressed::NotShown(why) => {
                let why = match self.earlier {
                    Some(_) => format!(
                        "{why}; its keys were pressed before a restart, so the agent most \
                         likely has the answer (not confirmed)"
                    ),
                    None => why.clone(),
                };
                approvals::unreached_in(tx, id, &why)?;
            }
            Pressed::CannotPress => {
                let why = "the session's messages go to a channel that cannot press keys in \
                           the agent's terminal: answer it there";
                approvals::unreached_in(tx, id, why)?;
            }
        }
        Ok(())
    }
}

/// A keys answer that could not be pressed: why, in the row (and so in the chat).
#[derive(Debug, Clone)]
pub struct GiveUpPressing {
    pub id: String,
    pub why: String,
}

impl Write for GiveUpPressing {
    type Output = ();

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        approvals::unreached_in(w.tx(), &self.id, &self.why)
    }
}

/// A hook event, and the question it asks when the session's chat can answer it (see
/// [`approvals::ask_of`]), in one transaction: an agent that asks again for the call it is
/// asking about (Claude Code does, for a command it checks in parts) waits on the same
/// question. The event is recorded as received now, naming its question; answers the question.
#[derive(Debug, Clone)]
pub struct AskWithEvent {
    pub event: crate::hooks::HookEvent,
    pub settings: approvals::Settings,
    /// The hook's process, which waits for the answer.
    pub waiter_pid: u32,
}

impl Write for AskWithEvent {
    type Output = Option<Approval>;

    fn apply(&self, w: &Writer<'_>) -> Result<Option<Approval>> {
        let (tx, now) = (w.tx(), w.now());
        let mut event = self.event.clone();
        event.received_at = now;
        let origin = sessions::origin(tx, &event.session)?;
        let ask = approvals::ask_of(&event, origin, &self.settings, Some(self.waiter_pid), now);
        let asked = match ask {
            Some(ask) => match approvals::open_like(tx, &ask)? {
                Some(open) => Some(open),
                None => Some(approvals::ask_in(tx, &ask)?),
            },
            None => None,
        };
        event.approval = asked.as_ref().map(|a| a.id.clone());
        w.door.hooks.enqueue_in(tx, &event.to_row())?;
        Ok(asked)
    }
}

/// The waiting hook's question, past its expiry with no answer: expired (the hook prints the
/// deny). Answers it when this write expired it.
#[derive(Debug, Clone)]
pub struct ExpireApproval(pub String);

impl Write for ExpireApproval {
    type Output = Option<Approval>;

    fn apply(&self, w: &Writer<'_>) -> Result<Option<Approval>> {
        approvals::expire_in(w.tx(), &self.0)
    }
}

/// The agent has the answer to its question (its waiting hook printed it): the first to say
/// so sets its session working again. Answers whether this was the first.
#[derive(Debug, Clone)]
pub struct AgentReached {
    pub id: String,
    pub session: String,
}

impl Write for AgentReached {
    type Output = bool;

    fn apply(&self, w: &Writer<'_>) -> Result<bool> {
        let first = approvals::reached_in(w.tx(), &self.id)?;
        if first {
            // The agent works on: the tool runs, or the model hears the deny.
            sessions::set_agent_state(w.tx(), &self.session, AgentState::Working)?;
        }
        Ok(first)
    }
}

/// The operator's answer to approval `id` (the HTTP API, the dashboard): recorded once, as a
/// chat's button would.
#[derive(Debug, Clone)]
pub struct AnswerApproval {
    pub id: String,
    pub decision: approvals::Decision,
    pub who: approvals::Answerer,
}

impl Write for AnswerApproval {
    type Output = AnswerResult;

    fn apply(&self, w: &Writer<'_>) -> Result<AnswerResult> {
        approvals::answer_in(w.tx(), &self.id, self.decision, &self.who)
    }
}

/// An open approval the agent no longer asks (its dialog closed in the terminal).
#[derive(Debug, Clone)]
pub struct Withdraw {
    pub id: String,
    pub why: String,
}

impl Write for Withdraw {
    type Output = Option<Approval>;

    fn apply(&self, w: &Writer<'_>) -> Result<Option<Approval>> {
        approvals::withdraw_in(w.tx(), &self.id, &self.why)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::approvals::{Ask, State};
    use crate::sessions::Origin;
    use crate::{Agent, Engine, NoticeRoutes};

    fn door() -> (tempfile::TempDir, Arc<crate::WriteDoor>) {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(&crate::DbConfig::new(dir.path().join("q.db"))).unwrap();
        let door = crate::WriteDoor {
            queues: engine.queues(&Default::default()),
            routes: NoticeRoutes::none().shared(),
        };
        (dir, Arc::new(door))
    }

    fn apply<W: Write>(door: &Arc<crate::WriteDoor>, write: W) -> W::Output {
        door.submit(write, ()).blocking_recv().unwrap().unwrap()
    }

    /// Gemini CLI in session `key` asks to run `touch x`, answered by its dialog's keys.
    fn keys_ask(key: &str) -> Ask {
        Ask {
            session: key.into(),
            agent: Agent::Gemini,
            tool: None,
            action: "touch x".into(),
            means: Means::Keys,
            waiter_pid: None,
            session_rules: None,
            origin: None,
            expires_at: i64::MAX,
        }
    }

    /// Approval `id` answered `decision` by Alice over the API: the approval as recorded.
    fn answered(door: &Arc<crate::WriteDoor>, id: &str, decision: approvals::Decision) -> Approval {
        let who = approvals::Answerer {
            name: "Alice".into(),
            id: None,
            via: "api".into(),
            chat: None,
        };
        let id = id.to_string();
        let answered = apply(door, AnswerApproval { id, decision, who });
        let AnswerResult::Recorded(approval) = answered else {
            panic!("{answered:?}")
        };
        approval
    }

    /// Regression: the note for keys pressed before a restart held a run of spaces where its
    /// source line was continued.
    #[test]
    fn keys_pressed_before_a_restart_are_said_most_likely_reached_in_one_line() {
        let (_dir, door) = door();
        let ask = Ask {
            origin: Some(Origin {
                origin: "telegram:bot".into(),
                chat: "7".into(),
                thread: None,
            }),
            ..keys_ask("s")
        };
        let asked = door
            .engine
            .database()
            .write_at(0, |tx| approvals::ask_in(tx, &ask))
            .unwrap();
        let id = asked.id.clone();
        let denied = answered(&door, &id, approvals::Decision::Deny);
        assert_eq!(denied.state, State::Denied);
        let pressed = Pressed::NotShown("no dialog was open".into());
        apply(
            &door,
            RecordPressed {
                approval: denied,
                earlier: Some(1),
                pressed,
            },
        );
        let row = approvals::get(&door.engine.database().read().unwrap(), &id)
            .unwrap()
            .unwrap();
        let why = row.unreached.unwrap();
        assert!(
            why.ends_with("so the agent most likely has the answer (not confirmed)"),
            "{why:?}"
        );
        assert!(!why.contains("  "), "{why:?}");
    }

    /// Regression (a Gemini CLI run under load): the keys' result was recorded after the turn
    /// they allowed had ended, and set the agent back to working over the ready its own
    /// `AfterAgent` had reported; the next message then waited for a turn that never came.
    #[test]
    fn keys_recorded_after_the_agent_reported_do_not_undo_its_newer_state() {
        use crate::storage::sessions::Activity;
        let (_dir, door) = door();
        let db = door.engine.database();
        // Session `key` asks; its agent says `state` at `since`; the keys are pressed at 1 000
        // and their result (working, not at the prompt) recorded after.
        let press = |key: &str, state: AgentState, since: i64| {
            let ask = keys_ask(key);
            let activity = Activity {
                key,
                agent: Agent::Gemini,
                native_session_id: None,
                cwd: None,
                transcript_path: None,
                pane: None,
                node: None,
                permission_mode: None,
            };
            let asked = db
                .write_at(100, |tx| {
                    crate::storage::sessions::record_activity(tx, &activity, false)?;
                    approvals::ask_in(tx, &ask)
                })
                .unwrap();
            let allow = approvals::Decision::Allow(approvals::Scope::Once);
            let approval = answered(&door, &asked.id, allow);
            db.write_at(1_000, |tx| approvals::pressing_in(tx, &approval.id))
                .unwrap();
            db.write_at(since, |tx| sessions::set_agent_state(tx, key, state))
                .unwrap();
            let pressed = Pressed::Answered { at_prompt: false };
            apply(
                &door,
                RecordPressed {
                    approval,
                    earlier: None,
                    pressed,
                },
            );
            let conn = db.read().unwrap();
            sessions::agent_state(&conn, key).unwrap().unwrap().0
        };
        // The agent said it was ready after the keys were pressed: that stays.
        assert_eq!(press("s1", AgentState::Ready, 2_000), AgentState::Ready);
        // Nothing said since the press: the screen's word (working) is taken.
        let asked_before = press("s2", AgentState::AwaitingApproval, 500);
        assert_eq!(asked_before, AgentState::Working);
    }
}

/// Answers to agents' questions a platform pushed (see
/// [`approvals::record_chat_answers_in`]).
#[derive(Debug, Clone)]
pub struct RecordAnswers(pub Vec<ChatAnswer>);

impl Write for RecordAnswers {
    type Output = ChatAnswersRecorded;

    fn apply(&self, w: &Writer<'_>) -> Result<Self::Output> {
        record_chat_answers_in(w, &self.0)
    }
}
