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
//! ```

use std::time::Duration;

use actix::prelude::*;
use relayq_engine::approvals::{self, AnswerResult, Approval, ChatAnswer, Means};
use relayq_engine::rusqlite::Transaction;
use relayq_engine::{inbound, OutboundMessage};

use crate::store::{Handles, Store};

/// What recording a batch's answers did, for the caller to act on after the commit.
#[derive(Debug, Default)]
pub struct Recorded {
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
) -> relayq_engine::Result<Recorded> {
    let mut recorded = Recorded::default();
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
                recorded
                    .outbound_keys
                    .extend(approvals::tell_in(&s.outbound, tx, approval, now)?);
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

/// Tells chats how their questions ended, and ends the ones nobody waits on: past expiry
/// (the hook that should have expired it is gone) or whose waiting hook died (the agent
/// stopped asking: answered in its terminal, or quit).
pub struct ApprovalsActor {
    store: Store,
}

impl ApprovalsActor {
    pub fn new(store: Store) -> Self {
        ApprovalsActor { store }
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
                return Ok(Vec::new());
            }
            store
                .write(|s, tx| {
                    let now = s.outbound.now();
                    for open in approvals::list(tx, true, 1000)? {
                        if let Some(ended) = end_if_unwaited_in(tx, &open, now)? {
                            tracing::info!(
                                approval = ended.id,
                                session = ended.session,
                                outcome = ended.outcome(),
                                "approval ended by the daemon"
                            );
                        }
                    }
                    let mut keys = Vec::new();
                    for ended in approvals::untold(tx)? {
                        keys.extend(approvals::tell_in(&s.outbound, tx, &ended, now)?);
                    }
                    Ok(keys)
                })
                .await
        };
        let db = self.store.engine.database().path().to_path_buf();
        ctx.spawn(
            work.into_actor(self).map(
                move |result: crate::Result<Vec<String>>, _, _| match result {
                    Ok(keys) => crate::wake::outbound_written(&db, keys),
                    Err(e) => {
                        tracing::warn!(error = %e, "approvals: could not look at open questions")
                    }
                },
            ),
        );
    }
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
