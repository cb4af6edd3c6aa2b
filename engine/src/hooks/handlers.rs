//! What a hook event does, and how its row ends. Each handler updates the session registry and
//! may write outbound messages to the session's routes; those writes and the completion of the
//! hook row commit in one transaction, fenced by the row's lease token, so a crash or a lost
//! lease never leaves half an effect and a replayed row never applies twice.

use crate::approvals;
use crate::error::{EngineError, Result};
use crate::hooks::{EventType, HookEvent};
use crate::outbound::notice::Notice;
use crate::outbound::OutboundMessage;
use crate::progress::{self, ReactionState};
use crate::queue::{Lease, Retried};
use crate::sessions::{self, agent_state, ending};
use crate::tx::Tx;
use crate::writes::{Write, WriteDoor, Writer};

pub use crate::outbound::routes::{
    relayed_events, NoticeRoute, NoticeRoutes, SharedNoticeRoutes, NOTICES_CHANNEL, ORIGIN,
};

/// What applying an event changed, for the actors to act on after the commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// The session ended: its pending inbound rows were expired; stop its worker.
    pub session_ended: bool,
    /// Ordering keys of the outbound rows written (wake their sender).
    pub outbound_keys: Vec<String>,
    /// The event stood for a hook input that could not be kept as it came (counted).
    pub receiver_error: Option<crate::Agent>,
    /// The agent's state changed, or it confirmed a pasted message: wake the session's
    /// delivery, which waits on both.
    pub wake_session: bool,
    /// The pasted message the agent confirmed taking (its inbound row, now delivered).
    pub confirmed: Option<i64>,
    /// Why the event changed nothing (a Codex side thread, a `notify` its hooks repeat).
    pub ignored: Option<&'static str>,
    /// A new session known only by the agent's own id (no `RELAYQ_SESSION`, and not in a pane
    /// relayq types into): no chat hears its notices.
    pub unmatched: bool,
    /// A chat message's reaction changed (see [`progress`](crate::progress)): show it.
    pub reactions: bool,
    /// The step the event is, for its chat's progress message (when the chat shows steps).
    pub progress: Option<Box<crate::progress::ProgressNote>>,
}

/// How a hook row ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// Handled; the row is delivered.
    Applied(Effects),
    /// Done without effect, with the error kept: `undecodable` or `rejected`.
    DoneWithError { reason: &'static str, error: String },
    /// The handler failed; the row is retried later, or dead at the attempt limit.
    Failed { error: String, retried: Retried },
    /// The lease was no longer ours: nothing was applied.
    Stale,
}

/// The hook rows' processing, through the write door.
impl WriteDoor {
    /// Processes one leased hook row to its end: its event applied with the row's completion
    /// ([`ApplyHookRow`]), or, when that fails, the row ended with the error or retried later
    /// ([`EndHookRow`], [`RetryHookRow`]), each a typed write in a transaction of its own.
    pub fn process(&self, lease: &Lease) -> Result<Processed> {
        let event = match HookEvent::from_payload(&lease.payload) {
            Ok(e) => e,
            Err(e) => {
                let error = format!("stored hook event is not valid: {e}");
                return self.done_with_error(lease, "undecodable", error);
            }
        };
        let answer = answer_of(&event);
        let applied = self.apply_now(ApplyHookRow {
            lease: lease.clone(),
            event,
            answer,
        });
        match applied {
            Ok(Some(effects)) => Ok(Processed::Applied(effects)),
            Ok(None) => Ok(Processed::Stale),
            Err(EngineError::Rejected(error)) => self.done_with_error(lease, "rejected", error),
            Err(e) => {
                let error = e.to_string();
                let retried = self.apply_now(RetryHookRow {
                    lease: lease.clone(),
                    error: error.clone(),
                })?;
                Ok(match retried {
                    Retried::Stale => Processed::Stale,
                    retried => Processed::Failed { error, retried },
                })
            }
        }
    }

    fn done_with_error(
        &self,
        lease: &Lease,
        reason: &'static str,
        error: String,
    ) -> Result<Processed> {
        let ended = self.apply_now(EndHookRow {
            lease: lease.clone(),
            reason,
            error: error.clone(),
        })?;
        Ok(match ended {
            true => Processed::DoneWithError { reason, error },
            false => Processed::Stale,
        })
    }

    /// The handlers, inside the row's transaction. `answer` is the agent's final answer when
    /// read elsewhere than the event (see [`answer_of`]).
    fn apply(
        &self,
        tx: &Tx<'_>,
        row_id: i64,
        event: &HookEvent,
        answer: Option<&str>,
    ) -> Result<Effects> {
        if !event.data.is_object() {
            return Err(EngineError::Rejected(format!(
                "the {:?} event's data is not a JSON object",
                event.event
            )));
        }
        let key = event.session.as_str();
        let mut effects = Effects::default();
        let known = sessions::get(tx, key)?;
        if let Some(why) = ignored(event, known.as_ref()) {
            effects.ignored = Some(why);
            return Ok(effects);
        }
        effects.unmatched = known.is_none() && event.native_session_id.as_deref() == Some(key);
        sessions::touch(tx, event, event.event == EventType::SessionStart)?;
        if !agent_state::is_codex_notify(event) && event.native_event.is_some() {
            sessions::mark_agent_hooks(tx, key)?;
        }
        let state = agent_state::after(event);
        let changed = match state {
            Some(state) => sessions::set_agent_state(tx, key, state)?,
            None => false,
        };
        effects.wake_session |= changed;
        let routes = self.routes.read().expect("routes lock").clone();
        match event.event {
            EventType::SessionStart
            | EventType::ToolUse
            | EventType::ToolDone
            | EventType::AnswerText => {}
            EventType::UserPromptSubmit => {
                sessions::begin_turn(tx, key, event.field(&["prompt"]))?;
                if let Some((row, message)) = self.confirm_pasted(tx, event)? {
                    effects.confirmed = Some(row);
                    effects.reactions |=
                        progress::reaction_in(tx, &routes, row, &message, ReactionState::Taken)?;
                }
            }
            EventType::AgentStop => {
                ending::withdraw_open_in(tx, key, "the agent's turn ended")?;
                let answer = answer.or(event.last_assistant_message());
                sessions::complete_turn(tx, key, answer)?;
                if let Some(input) = agent_state::this_turns_input(event) {
                    sessions::set_last_user_input(tx, key, input)?;
                }
                // Without prompt-submit hooks (Codex `notify` alone), the turn's end is the
                // first word that the agent took the message.
                if let Some((row, message)) = self.confirm_pasted(tx, event)? {
                    effects.confirmed = Some(row);
                    effects.reactions |=
                        progress::reaction_in(tx, &routes, row, &message, ReactionState::Done)?;
                }
                effects.reactions |= progress::turn_ended_in(tx, key, ReactionState::Done)?;
            }
            EventType::Notification => {}
            EventType::Error => {
                effects.receiver_error = Some(event.agent);
                effects.reactions |= progress::turn_ended_in(tx, key, ReactionState::Failed)?;
            }
            // `/clear`: a new conversation in the same agent; nothing ends, nothing is dropped.
            EventType::SessionEnd if agent_state::conversation_cleared(event) => {}
            EventType::SessionEnd => {
                effects.reactions |= progress::turn_ended_in(tx, key, ReactionState::Failed)?;
                let why = "the agent ended the session (SessionEnd) before it took the \
                           message. Start the agent again, then send it again";
                let told = ending::end_in(&self.inbound, &self.outbound, tx, &routes, key, why)?;
                effects.session_ended = true;
                effects.outbound_keys.extend(told);
            }
        }
        effects.wake_session |= effects.confirmed.is_some();
        effects.progress = progress::note_in(tx, &routes, event, answer)?.map(Box::new);
        progress::announce_in(tx, effects.progress.as_deref(), effects.reactions)?;
        if agent_state::is_idle_reminder(event) && !routes.idle_reminders {
            return Ok(effects);
        }
        // Claude Code says a dialog waits twice (PermissionRequest, then a notification):
        // one "needs you" per dialog.
        let asked_again = event.event == EventType::Notification
            && state == Some(agent_state::AgentState::AwaitingApproval)
            && !changed;
        if asked_again {
            return Ok(effects);
        }
        if let Some(mut notice) = Notice::of(event, answer) {
            let approval = self.approval_asked(tx, event, &mut notice)?;
            if approval.as_ref().is_some_and(|a| a.question_row.is_some()) {
                // Asked again about the same call: the chat has the question already.
                return Ok(effects);
            }
            for (n, route) in routes.for_session(key).iter().enumerate() {
                if !route.events.contains(&event.event) {
                    continue;
                }
                let Some((channel, to, thread)) = routes.resolve(route, tx, key)? else {
                    continue;
                };
                // The question's answers are offered in the chat it was asked in.
                let asks_here = approval
                    .as_ref()
                    .filter(|a| a.origin.as_ref().is_some_and(|o| o.chat == to));
                let mut notice = notice.clone();
                notice.approval = asks_here.map(|a| crate::outbound::notice::ApprovalAsked {
                    id: a.id.clone(),
                    for_session: a.for_session,
                    expires_at: a.expires_at,
                });
                // A long answer goes whole, in parts that each fit the channel, in order.
                let parts = notice.parts(routes.limits.get(&channel).copied());
                let of = parts.len() as u32;
                let messages: Vec<OutboundMessage> = (1..)
                    .zip(parts)
                    .map(|(index, part)| OutboundMessage {
                        notice: Some(part),
                        idempotency_key: Some(crate::outbound::part_key(
                            &format!("relayq-hook-{row_id}-{n}"),
                            index,
                        )),
                        session: Some(key.to_string()),
                        event: Some(event_name(event.event)),
                        thread: thread.clone(),
                        part: (of > 1).then_some(crate::outbound::Part { index, of }),
                        ..OutboundMessage::text(&channel, &to, "")
                    })
                    .collect();
                let written = crate::outbound::enqueue_parts_in(&self.outbound, tx, &messages)?;
                if !written.first.duplicate {
                    effects.outbound_keys.push(messages[0].destination_key());
                }
                if let Some(asked) = asks_here.filter(|a| a.question_row.is_none()) {
                    approvals::set_question_in(tx, &asked.id, written.first.id)?;
                }
            }
        }
        Ok(effects)
    }

    /// The approval `event` asks, when the session's chat can answer it: the one `relayq hook`
    /// recorded (and waits on). The notice's question then says what is asked, and the
    /// channel offers the answers (not "answer it in the terminal").
    fn approval_asked(
        &self,
        tx: &Tx<'_>,
        event: &HookEvent,
        notice: &mut Notice,
    ) -> Result<Option<approvals::Approval>> {
        let Some(id) = &event.approval else {
            return Ok(None);
        };
        let Some(approval) = approvals::get(tx, id)? else {
            return Ok(None);
        };
        if approval.state != approvals::State::Asked {
            return Ok(None);
        }
        notice.question = crate::outbound::notice::permission_asked(event)
            .map(|ask| format!("{ask}\n(relayq approval {})", approval.id));
        Ok(Some(approval))
    }

    /// The message being delivered to the session, when it was pasted and `event` says the
    /// agent took it: delivered now. Its id.
    fn confirm_pasted(
        &self,
        tx: &Tx<'_>,
        event: &HookEvent,
    ) -> Result<Option<(i64, crate::InboundMessage)>> {
        let Some(prompt) = agent_state::this_turns_input(event) else {
            return Ok(None);
        };
        let native = event.native_event.as_deref().unwrap_or("hook");
        let turn = event.field(&["prompt_id", "turn_id", "turn-id"]);
        let receipt = match turn {
            Some(turn) => format!("{native} {turn}"),
            None => native.to_string(),
        };
        crate::inbound::confirm_pasted_in(&self.inbound, tx, &event.session, prompt, &receipt)
    }
}

/// Why an event changes nothing: an event of one of Codex's side threads, or Codex `notify`
/// when Codex's own hooks report the session (its `Stop` said it already).
fn ignored(event: &HookEvent, known: Option<&sessions::SessionRecord>) -> Option<&'static str> {
    let main_thread = known.and_then(|s| s.native_session_id.as_deref());
    if event.event != EventType::SessionStart && agent_state::is_side_thread(event, main_thread) {
        return Some("an event of a Codex side thread (the one that names the task)");
    }
    if agent_state::is_codex_notify(event) && known.is_some_and(|s| s.agent_hooks) {
        return Some("Codex notify: the session's Codex hooks report its turns");
    }
    None
}

/// The agent's final answer where the event's own text is not to be trusted: Gemini CLI's
/// `AfterAgent` is read from its transcript (see [`transcript`](crate::hooks::transcript)); the
/// hook's `prompt_response` is used, and the log says so, when the transcript has none.
pub fn answer_of(event: &HookEvent) -> Option<String> {
    if event.agent != crate::Agent::Gemini || event.native_event.as_deref() != Some("AfterAgent") {
        return None;
    }
    let path = event.field(&["transcript_path"])?;
    let answer = crate::hooks::transcript::gemini_answer(std::path::Path::new(path));
    if answer.is_none() {
        tracing::info!(
            session = %event.session.escape_debug(),
            transcript = %path.escape_debug(),
            "no answer in Gemini's transcript yet; using the hook's prompt_response"
        );
    }
    answer
}

fn event_name(event: EventType) -> String {
    serde_json::to_value(event)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A hook row's event applied by its handlers, with the row's completion, fenced by its lease:
/// `None` when the lease was no longer ours (nothing applied).
#[derive(Debug, Clone)]
struct ApplyHookRow {
    lease: Lease,
    event: HookEvent,
    /// The agent's final answer when read elsewhere than the event (see [`answer_of`]).
    answer: Option<String>,
}

impl Write for ApplyHookRow {
    type Output = Option<Effects>;

    fn apply(&self, w: &Writer<'_>) -> Result<Option<Effects>> {
        let lease = &self.lease;
        if !w
            .door
            .hooks
            .complete_in(w.tx(), lease.id, lease.token, None)?
        {
            return Ok(None);
        }
        let answer = self.answer.as_deref();
        w.door
            .apply(w.tx(), lease.id, &self.event, answer)
            .map(Some)
    }
}

/// A hook row ended with its error kept, its event not applied: retrying cannot help
/// (undecodable, rejected). False when the lease was no longer ours.
#[derive(Debug, Clone)]
struct EndHookRow {
    lease: Lease,
    reason: &'static str,
    error: String,
}

impl Write for EndHookRow {
    type Output = bool;

    fn apply(&self, w: &Writer<'_>) -> Result<bool> {
        let (lease, error) = (&self.lease, Some(self.error.as_str()));
        let hooks = &w.door.hooks;
        hooks.complete_with_error_in(w.tx(), lease.id, lease.token, self.reason, error)
    }
}

/// A hook row whose handlers failed, tried again later (dead at the attempt limit).
#[derive(Debug, Clone)]
struct RetryHookRow {
    lease: Lease,
    error: String,
}

impl Write for RetryHookRow {
    type Output = Retried;

    fn apply(&self, w: &Writer<'_>) -> Result<Retried> {
        w.door
            .hooks
            .retry_later_in(w.tx(), &self.lease, &self.error, None)
    }
}
