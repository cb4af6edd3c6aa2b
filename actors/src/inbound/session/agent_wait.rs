//! A session whose channel waits for its agent (an agent's tmux pane, see
//! `Channel::confirms_within`) goes one message at a time, each when the agent can take it:
//!
//! ```text
//!   agent ready? ──no (working, a dialog)──▶ wait for a Wake (its hook events) or look again later
//!      │ yes
//!   lease one row, marked sent ─▶ paste ─▶ Submitted: the row stays in flight
//!                                              │ the agent's prompt-submit names it (hook handler)
//!                                              ▼
//!                                          delivered ─▶ next row
//!   no word within the wait ─▶ the channel looks at the pane: Enter again once, or fail saying why
//! ```

use std::time::{Duration, Instant};

use actix::prelude::*;
use relayq_engine::writes::runs::{AgentWaits, LeaseNext};
use relayq_engine::Lease;

use super::{SessionActor, State};
use crate::channels::AgentHints;

/// A session's next message while its agent works: see `SessionChannels::busy` (the supervisor's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Busy {
    /// Wait until the agent is ready: every message gets its own turn and its own answer.
    #[default]
    Wait,
    /// Paste during the turn (Claude Code queues it for a turn of its own; Codex folds it into
    /// the running turn; Gemini CLI takes it when the turn ends).
    Steer,
}

/// How often a session waiting for its agent looks again when no Wake comes (its hook events
/// wake it as the agent's state changes).
pub const AGENT_LOOK_AGAIN: Duration = Duration::from_secs(15);

/// How long a dialog may stand with no event saying it was answered before relayq looks at
/// the agent's screen for its prompt, in waits for a confirmation (`confirm_within`): 30 s by
/// default (Claude Code's idle reminder comes after a minute; Codex and Gemini CLI say nothing
/// after a denial).
pub const STALE_ASK_WAITS: u32 = 3;

/// How long a turn may run with no event from the agent before relayq looks at its screen
/// for its prompt (its turn's end may have gone unreported: the agent crashed, was restarted,
/// or its hook failed), in waits for a confirmation: 2 min by default. The screen must show
/// the agent at its empty prompt with no turn running.
pub const STALE_WORK_WAITS: u32 = 12;

/// The next row of session `key` for its agent, who has `wait` to confirm a message.
pub fn lease_for_agent(key: String, wait: Duration, busy: Busy) -> LeaseNext {
    LeaseNext::ForAgent {
        key,
        waits: AgentWaits {
            steer: busy == Busy::Steer,
            ask: wait * STALE_ASK_WAITS,
            work: wait * STALE_WORK_WAITS,
            look_again: AGENT_LOOK_AGAIN,
        },
    }
}

/// A message handed to an agent, waiting for the agent to say it took it.
pub struct Awaiting {
    pub lease: Lease,
    /// When the channel is asked to look at it (see `AgentHints::look`).
    pub look_at: Instant,
    /// What that look is told: which look it is, and how the row was sent.
    pub next: AgentHints,
}

impl Awaiting {
    /// `lease` (its payload given back) was handed to the agent with `hints`, who has `wait` to
    /// confirm it: the next look is the one after this one.
    pub fn handed(lease: Lease, hints: &AgentHints, wait: Duration) -> Self {
        Awaiting {
            lease,
            look_at: Instant::now() + wait,
            next: AgentHints {
                look: Some(hints.look.map_or(1, |n| n + 1)),
                steering: hints.steering,
                paste_unseen: hints.paste_unseen,
                ..AgentHints::default()
            },
        }
    }
}

impl SessionActor {
    /// A message handed to the agent waits for its word: done when the row is no longer in
    /// flight (the agent confirmed it, or it ended otherwise); past its wait, the channel looks
    /// at it again; otherwise wait on (a Wake comes with the agent's events).
    pub(super) fn check_awaiting(&mut self, ctx: &mut Context<Self>) {
        let Some(awaiting) = &self.awaiting else {
            return self.step(ctx);
        };
        self.state = State::Checking;
        let id = awaiting.lease.id;
        let read = self.store.run(move |s| s.inbound.state_of(id));
        ctx.spawn(read.into_actor(self).map(|result, act, ctx| {
            act.state = State::Idle;
            match result {
                Ok(Some(row)) if row.state == "leased" => {
                    let Some(awaiting) = &act.awaiting else {
                        return act.step(ctx);
                    };
                    let left = awaiting.look_at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let awaiting = act.awaiting.take().expect("checked above");
                        act.deliver(awaiting.lease, awaiting.next, ctx);
                    } else {
                        let timer = ctx.run_later(left, |act, ctx| act.step(ctx));
                        act.state = State::Awaiting(timer);
                    }
                }
                Ok(_) => {
                    // Confirmed by the agent (delivered), or ended some other way.
                    act.awaiting = None;
                    act.write(ctx);
                }
                Err(e) => {
                    tracing::error!(session = act.session, error = %e, "cannot read the row waiting for its agent");
                    act.retry_later(ctx);
                }
            }
        }));
    }
}
