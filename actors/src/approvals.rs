//! The daemon's side of approvals (the table and its rules are in
//! `relayq_engine::approvals`, the writes in `relayq_engine::approvals::writes`): the
//! ApprovalsActor, which tells chats how their questions ended, ends the ones nobody waits on
//! any more, and answers dialogs by their keys.
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
use relayq_engine::approvals::writes::{
    ApprovalsSwept, GiveUpPressing, Pressed, RecordPressed, StartPressing, SweepApprovals, Withdraw,
};
use relayq_engine::approvals::Approval;

use crate::channels::{DialogOutcome, DialogRequest};
use crate::inbound::supervisor::{AnswerDialog, SupervisorActor, WakeSession};
use crate::store::Store;

/// How often the ApprovalsActor looks.
const LOOK_EVERY: Duration = Duration::from_secs(1);

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

/// Whether a keys answer's record is done: reached, or found unable to reach the agent (the
/// chat can be told); or, not yet, why.
enum Settled {
    Yes,
    No(String),
}

/// Tries before a keys answer that cannot finish is given up (said in the row and the chat).
const MAX_PRESS_TRIES: u32 = 5;

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
                    s.engine.approvals_to_look_at()
                })
                .await?;
            if !busy {
                return Ok(ApprovalsSwept::default());
            }
            store
                .apply(SweepApprovals {
                    waiter_alive: process_alive,
                })
                .await
        };
        ctx.spawn(work.into_actor(self).map(
            move |result: crate::Result<ApprovalsSwept>, act, ctx| match result {
                Ok(found) => {
                    act.store.waking.outbound_written(found.told);
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
            },
        ));
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
            let earlier = store.apply(StartPressing(approval.clone())).await?;
            let Some(earlier) = earlier else {
                return Ok(Settled::Yes);
            };
            let request = DialogRequest {
                session: approval.session.clone(),
                action: approval.action.clone(),
                press: approval.decision(),
            };
            let pressed = match supervisor.send(AnswerDialog(request)).await {
                Ok(Some(DialogOutcome::Answered { at_prompt })) => Pressed::Answered { at_prompt },
                Ok(Some(DialogOutcome::NotShown(why))) => Pressed::NotShown(why),
                Ok(None) => Pressed::CannotPress,
                Ok(Some(DialogOutcome::Retry(why))) => return Ok(Settled::No(why)),
                Ok(Some(DialogOutcome::Shows)) => {
                    return Ok(Settled::No("nothing was pressed".into()))
                }
                Err(e) => return Ok(Settled::No(format!("the supervisor did not answer: {e}"))),
            };
            let session = approval.session.clone();
            store
                .apply(RecordPressed {
                    approval,
                    earlier,
                    pressed,
                })
                .await?;
            // Its next message may go now: the dialog is gone.
            supervisor.do_send(WakeSession(session));
            Ok(Settled::Yes)
        };
        ctx.spawn(
            work.into_actor(self)
                .map(move |result: crate::Result<Settled>, act, ctx| {
                    act.at_dialog.remove(&id);
                    let why = match result {
                        Ok(Settled::Yes) => {
                            act.tries.remove(&id);
                            return act.look(ctx); // tell the chat now
                        }
                        Ok(Settled::No(why)) => why,
                        Err(e) => e.to_string(),
                    };
                    let tries = act.tries.entry(id.clone()).or_default();
                    *tries += 1;
                    tracing::warn!(approval = id, tries = *tries, "the dialog's keys: {why}");
                    if *tries >= MAX_PRESS_TRIES {
                        act.tries.remove(&id);
                        let why = format!("the keys could not be pressed ({why})");
                        let store = act.store.clone();
                        let give_up = async move { store.apply(GiveUpPressing { id, why }).await };
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
                    let withdraw = async move { store.apply(Withdraw { id, why }).await };
                    ctx.spawn(withdraw.into_actor(act).map(|_, act, ctx| act.look(ctx)));
                }
                _ => {
                    act.unseen.remove(&approval.id);
                }
            }
        }));
    }
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
