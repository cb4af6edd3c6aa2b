//! The daemon's side of approvals (the table and its rules are in
//! `relayq_engine::approvals`): answers from chats recorded with the rows they came with, and
//! the ApprovalsActor, which tells chats how their questions ended and ends the ones nobody
//! waits on any more.
//!
//! ```text
//!   source batch / push ──answers──▶ record_chat_answers_in (the batch's transaction):
//!       recorded → the question edited to its outcome; a text answer gets a reply;
//!       a yes/no that answers no question → an inbound row, as any message
//!   ──▶ Source::acknowledge (Telegram: answerCallbackQuery with the same line)
//!
//!   ApprovalsActor, every second:
//!       ended, chat not told (answered by the CLI, the API, the hook's expiry) → tell_in
//!       open past expiry, or its waiting hook gone → expired / withdrawn, then told
//!       keys (Gemini CLI): ended, not pressed → pressing_in (send-started mark)
//!           ──AnswerDialog──▶ Supervisor ──▶ the session's channel (tmux): the key, only into
//!           the dialog about that action ──▶ dialog gone: reached_in; else unreached_in; told
//!       keys, open: its dialog gone at two looks (answered in the terminal) → withdrawn
//! ```

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use actix::prelude::*;
use relayq_engine::approvals::{self, AnswerResult, Approval, ChatAnswer, Means};
use relayq_engine::rusqlite::Transaction;
use relayq_engine::{inbound, AgentState, OutboundMessage};

use crate::channels::{DialogOutcome, DialogRequest};
use crate::store::{Handles, Store};
use crate::supervisor::{AnswerDialog, SupervisorActor, WakeSession};

/// What recording a batch's answers did, for the caller to act on after the commit.
#[derive(Debug, Default)]
pub struct ChatAnswersRecorded {
    /// Each answer with the line for the person who gave it.
    pub answered: Vec<(ChatAnswer, String)>,
    /// Outbound rows written (questions edited, replies): wake their sender.
    pub outbound_keys: Vec<String>,
    /// Answers that answer nothing, written as messages for their sessions: wake them.
    pub sessions: Vec<String>,
}

/// Records answers from chats in the caller's transaction (see the module's drawing).
pub fn record_chat_answers_in(
    s: &Handles,
    tx: &Transaction<'_>,
    answers: Vec<ChatAnswer>,
    now: i64,
) -> relayq_engine::Result<ChatAnswersRecorded> {
    let mut recorded = ChatAnswersRecorded::default();
    for answer in answers {
        let Some(result) = approvals::answer_from_chat_in(tx, &answer, now)? else {
            if let Some(message) = &answer.otherwise {
                let row = inbound::enqueue_in(&s.inbound, tx, message, now)?;
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
                        &s.outbound,
                        tx,
                        approval,
                        now,
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
                .extend(reply_in(s, tx, &answer, &reply, now)?);
        }
        recorded.answered.push((answer, reply));
    }
    Ok(recorded)
}

/// A text answer's reply, in its chat, to its message.
fn reply_in(
    s: &Handles,
    tx: &Transaction<'_>,
    answer: &ChatAnswer,
    reply: &str,
    now: i64,
) -> relayq_engine::Result<Option<String>> {
    let Some((origin, chat)) = &answer.who.chat else {
        return Ok(None);
    };
    let routes = s.processor.routes.read().expect("routes lock").clone();
    let Some(channel) = routes.replies.get(origin) else {
        return Ok(None);
    };
    let message = OutboundMessage {
        reply_to: answer.message_id.clone(),
        idempotency_key: answer
            .message_id
            .as_ref()
            .map(|m| format!("relayq-approval-reply-{origin}-{chat}-{m}")),
        event: Some("approval".into()),
        ..OutboundMessage::text(channel, chat, reply)
    };
    let written = relayq_engine::outbound::enqueue_in(&s.outbound, tx, &message, None, now)?;
    Ok((!written.first.duplicate).then(|| message.destination_key()))
}

/// How often the ApprovalsActor looks.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How long after its expiry an approval whose hook still waits is left to that hook (which
/// expires it itself, and prints the deny), before the daemon expires it.
const HOOK_GRACE_MS: i64 = 5_000;

/// Tells chats how their questions ended, ends the ones nobody waits on (past expiry, the
/// hook that should have expired it gone; its waiting hook died; its dialog closed in the
/// terminal), and answers dialogs by their keys (see the module's drawing).
pub struct ApprovalsActor {
    store: Store,
    supervisor: Addr<SupervisorActor>,
    /// Approvals whose dialog is being looked at or answered now.
    at_dialog: HashSet<String>,
    /// Keys answers that could not finish yet (tmux failed, the dialog stayed): tries so far.
    tries: HashMap<String, u32>,
    /// Open keys approvals whose dialog did not show at the last look.
    unseen: HashSet<String>,
}

/// What the ApprovalsActor's look found to do outside its transaction.
#[derive(Default)]
struct Found {
    /// Outbound rows written (chats told): wake their sender.
    outbound_keys: Vec<String>,
    /// Keys answers to press.
    to_press: Vec<Approval>,
    /// Open keys approvals whose dialog is to be looked at.
    to_check: Vec<Approval>,
}

/// How a keys answer went.
enum Pressed {
    /// Reached the agent, or found unable to: the chat can be told.
    Settled,
    /// To be tried again at the next look: why not now.
    Again(String),
}

/// Tries before a keys answer that cannot finish is given up (said in the row and the chat).
const MAX_PRESS_TRIES: u32 = 5;

/// How old an open keys approval must be before its dialog is looked for: the agent may
/// tell its hook before it draws the dialog.
const DIALOG_SETTLE_MS: i64 = 5_000;

impl ApprovalsActor {
    pub fn new(store: Store, supervisor: Addr<SupervisorActor>) -> Self {
        ApprovalsActor {
            store,
            supervisor,
            at_dialog: HashSet::new(),
            tries: HashMap::new(),
            unseen: HashSet::new(),
        }
    }

    /// Reads first (a reader connection, no lock); writes only when an approval is open or
    /// its chat untold, so an idle daemon takes no write lock each second.
    fn look(&mut self, ctx: &mut Context<Self>) {
        let store = self.store.clone();
        let work = async move {
            let busy = store
                .run(|s| {
                    // A database file deleted under the daemon is not looked at: a new
                    // connection would create an empty one in its place (the RecoveryActor
                    // says so).
                    if s.engine.database().file_still_there().is_err() {
                        return Ok(false);
                    }
                    approvals::anything_to_do(&*s.engine.database().read()?)
                })
                .await?;
            if !busy {
                return Ok(Found::default());
            }
            store
                .write(|s, tx| {
                    let now = s.outbound.now();
                    let mut found = Found::default();
                    for open in approvals::list(tx, true, 1000)? {
                        match end_if_unwaited_in(tx, &open, now)? {
                            Some(ended) => tracing::info!(
                                approval = ended.id,
                                session = ended.session,
                                outcome = ended.outcome(),
                                "approval ended by the daemon"
                            ),
                            None if open.means == Means::Keys
                                && now - open.asked_at >= DIALOG_SETTLE_MS =>
                            {
                                found.to_check.push(open)
                            }
                            None => {}
                        }
                    }
                    for ended in approvals::untold(tx)? {
                        found.outbound_keys.extend(approvals::tell_in(
                            &s.outbound,
                            tx,
                            &ended,
                            now,
                        )?);
                    }
                    found.to_press = approvals::keys_due(tx)?;
                    Ok(found)
                })
                .await
        };
        let db = self.store.engine.database().path().to_path_buf();
        ctx.spawn(
            work.into_actor(self)
                .map(move |result: crate::Result<Found>, act, ctx| match result {
                    Ok(found) => {
                        crate::wake::outbound_written(&db, found.outbound_keys);
                        for approval in found.to_press {
                            act.press(approval, ctx);
                        }
                        for approval in found.to_check {
                            act.check(approval, ctx);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "approvals: could not look at open questions")
                    }
                }),
        );
    }

    /// Gives a keys answer to its dialog, once: a send-started mark first, the keys only into
    /// the dialog about that action, recorded as reached when the dialog left the screen.
    fn press(&mut self, approval: Approval, ctx: &mut Context<Self>) {
        if !self.at_dialog.insert(approval.id.clone()) {
            return;
        }
        let (store, supervisor) = (self.store.clone(), self.supervisor.clone());
        let id = approval.id.clone();
        let work = async move {
            let earlier = store
                .write({
                    let approval = approval.clone();
                    move |s, tx| {
                        if approvals::asked_since(tx, &approval)? {
                            let why =
                                "the agent asked another question meanwhile: nothing was pressed";
                            approvals::unreached_in(tx, &approval.id, why)?;
                            return Ok(None);
                        }
                        Ok(Some(approvals::pressing_in(
                            tx,
                            &approval.id,
                            s.outbound.now(),
                        )?))
                    }
                })
                .await?;
            let Some(earlier) = earlier else {
                return Ok(Pressed::Settled);
            };
            let request = DialogRequest {
                session: approval.session.clone(),
                action: approval.action.clone(),
                press: approval.decision(),
            };
            let outcome = match supervisor.send(AnswerDialog(request)).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    return Ok(Pressed::Again(format!(
                        "the supervisor did not answer: {e}"
                    )))
                }
            };
            let session = approval.session.clone();
            let settled = store
                .write(move |s, tx| {
                    record_pressed_in(tx, &approval, earlier, outcome, s.outbound.now())
                })
                .await?;
            if matches!(settled, Pressed::Settled) {
                // Its next message may go now: the dialog is gone.
                supervisor.do_send(WakeSession(session));
            }
            Ok(settled)
        };
        ctx.spawn(
            work.into_actor(self)
                .map(move |result: crate::Result<Pressed>, act, ctx| {
                    act.at_dialog.remove(&id);
                    let why = match result {
                        Ok(Pressed::Settled) => {
                            act.tries.remove(&id);
                            return act.look(ctx); // tell the chat now
                        }
                        Ok(Pressed::Again(why)) => why,
                        Err(e) => e.to_string(),
                    };
                    let tries = act.tries.entry(id.clone()).or_default();
                    *tries += 1;
                    tracing::warn!(approval = id, tries = *tries, "the dialog's keys: {why}");
                    if *tries >= MAX_PRESS_TRIES {
                        act.tries.remove(&id);
                        let why = format!("the keys could not be pressed ({why})");
                        let store = act.store.clone();
                        let give_up = async move {
                            store
                                .write(move |_, tx| approvals::unreached_in(tx, &id, &why))
                                .await
                        };
                        ctx.spawn(give_up.into_actor(act).map(|_, act, ctx| act.look(ctx)));
                    }
                }),
        );
    }

    /// Looks whether an open keys approval's dialog still shows: gone at two looks in a row
    /// (answered in the terminal), the approval is withdrawn and its chat told.
    fn check(&mut self, approval: Approval, ctx: &mut Context<Self>) {
        if !self.at_dialog.insert(approval.id.clone()) {
            return;
        }
        let request = DialogRequest {
            session: approval.session.clone(),
            action: approval.action.clone(),
            press: None,
        };
        let looked = self.supervisor.send(AnswerDialog(request));
        ctx.spawn(looked.into_actor(self).map(move |outcome, act, ctx| {
            act.at_dialog.remove(&approval.id);
            match outcome {
                Ok(Some(DialogOutcome::NotShown(why))) => {
                    if act.unseen.insert(approval.id.clone()) {
                        return; // once more before it counts
                    }
                    act.unseen.remove(&approval.id);
                    let store = act.store.clone();
                    let why = format!("its dialog closed in the terminal: {why}");
                    let id = approval.id.clone();
                    let withdraw = async move {
                        store
                            .write(move |s, tx| {
                                approvals::withdraw_in(tx, &id, &why, s.outbound.now())
                            })
                            .await
                    };
                    ctx.spawn(withdraw.into_actor(act).map(|_, act, ctx| act.look(ctx)));
                }
                _ => {
                    act.unseen.remove(&approval.id);
                }
            }
        }));
    }
}

/// Records what pressing a keys answer did. `earlier`: a send-started mark from before (keys
/// pressed, then a crash before their record).
fn record_pressed_in(
    tx: &Transaction<'_>,
    approval: &Approval,
    earlier: Option<i64>,
    outcome: Option<DialogOutcome>,
    now: i64,
) -> relayq_engine::Result<Pressed> {
    let id = &approval.id;
    match outcome {
        Some(DialogOutcome::Answered { at_prompt }) => {
            if approvals::reached_in(tx, id, now)? {
                let state = match at_prompt {
                    true => AgentState::Ready,
                    false => AgentState::Working,
                };
                relayq_engine::sessions::set_agent_state(tx, &approval.session, state, now)?;
            }
            tracing::info!(
                approval = id,
                session = approval.session,
                "the dialog was answered by its keys"
            );
        }
        Some(DialogOutcome::NotShown(why)) => {
            let why = match earlier {
                Some(_) => format!(
                    "{why}; its keys were pressed before a restart, so the agent most likely                      has the answer (not confirmed)"
                ),
                None => why,
            };
            approvals::unreached_in(tx, id, &why)?;
        }
        Some(DialogOutcome::Retry(why)) => return Ok(Pressed::Again(why)),
        Some(DialogOutcome::Shows) => return Ok(Pressed::Again("nothing was pressed".into())),
        None => {
            let why = "the session's messages go to a channel that cannot press keys in the \
                       agent's terminal: answer it there";
            approvals::unreached_in(tx, id, why)?;
        }
    }
    Ok(Pressed::Settled)
}

/// Ends `open` when no one will: past its expiry (a waiting hook gets a little longer, as it
/// expires the approval itself and prints the deny), or its waiting hook is gone.
fn end_if_unwaited_in(
    tx: &Transaction<'_>,
    open: &Approval,
    now: i64,
) -> relayq_engine::Result<Option<Approval>> {
    let waiter_alive = open.means == Means::Hook && open.waiter_pid.is_some_and(process_alive);
    if open.means == Means::Hook && !waiter_alive {
        let why = "the agent stopped waiting: answered in its terminal, or it quit";
        return approvals::withdraw_in(tx, &open.id, why, now);
    }
    let grace = if waiter_alive { HOOK_GRACE_MS } else { 0 };
    if now >= open.expires_at + grace {
        return approvals::expire_in(tx, &open.id, now);
    }
    Ok(None)
}

/// Whether process `pid` runs (on this host: hooks run beside the daemon).
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // Signal 0 checks without sending; EPERM means it exists under another user.
    let answer = unsafe { libc::kill(pid, 0) };
    answer == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl Actor for ApprovalsActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(LOOK_EVERY, |act, ctx| act.look(ctx));
    }
}

impl Handler<crate::lifecycle::Stop> for ApprovalsActor {
    type Result = ();
    fn handle(&mut self, _: crate::lifecycle::Stop, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// Look now (answers were recorded elsewhere: the CLI, the API).
#[derive(Debug, actix::Message)]
#[rtype(result = "()")]
pub struct LookNow;

impl Handler<LookNow> for ApprovalsActor {
    type Result = ();
    fn handle(&mut self, _: LookNow, ctx: &mut Context<Self>) {
        self.look(ctx);
    }
}
