//! The session registry as the hook-event handlers keep it: an event's activity recorded,
//! turns begun and completed, the agent's state. Its tables, and every statement on them, are
//! in [`storage::sessions`](crate::storage::sessions).

pub mod agent_state;

use crate::tx::Tx;

use crate::error::Result;
use crate::hooks::HookEvent;

pub use crate::storage::sessions::{
    agent_state, begin_turn, complete_turn, end, get, is_ended, list, mark_agent_hooks, origin,
    set_agent_state, set_agent_state_if_older, set_last_user_input, set_origin_in, unmatched,
    Origin, SessionRecord,
};

/// Ends session `key`: the registry marks it ended, its open approvals are withdrawn (the
/// agent no longer asks them), and its waiting messages are expired, each chat told `why`
/// (never silence). The ordering keys of the notices written.
pub fn end_in(
    queues: &crate::engine::Queues,
    tx: &Tx<'_>,
    routes: &crate::NoticeRoutes,
    key: &str,
    why: &str,
) -> Result<Vec<String>> {
    end(tx, key)?;
    withdraw_open_in(tx, key, "the agent's session ended")?;
    let dropped = queues.inbound.active_rows_in(tx, key)?;
    queues
        .inbound
        .expire_key_in(tx, key, crate::inbound::SESSION_ENDED)?;
    let mut told = Vec::new();
    for (id, payload) in dropped {
        let Ok(message) = crate::InboundMessage::from_payload(&payload) else {
            continue;
        };
        let trouble = crate::inbound::trouble::Trouble::Dropped { why };
        told.extend(crate::inbound::trouble::tell_message_in(
            &queues.outbound,
            tx,
            routes,
            id,
            &message,
            trouble,
        )?);
    }
    Ok(told)
}

/// Ends the session's open approvals: the agent no longer asks them (`why`).
pub fn withdraw_open_in(tx: &Tx<'_>, key: &str, why: &str) -> Result<()> {
    for open in crate::approvals::open_for_session(tx, key)? {
        crate::approvals::withdraw_in(tx, &open.id, why)?;
    }
    Ok(())
}

/// Creates the session on its first event, or records the activity; fills in identity fields
/// (native id, cwd, transcript) the event carries. A session that was ended stays ended unless
/// `reopen` (a new `session_start` under the same key).
pub fn touch(tx: &Tx<'_>, event: &HookEvent, reopen: bool) -> Result<()> {
    let text = |field: &str| event.data.get(field).and_then(|v| v.as_str());
    let activity = crate::storage::sessions::Activity {
        key: &event.session,
        agent: event.agent,
        native_session_id: event.native_session_id.as_deref(),
        cwd: text("cwd"),
        transcript_path: text("transcript_path"),
        pane: event.pane.as_deref(),
        node: event.node.as_deref(),
        permission_mode: text("permission_mode"),
    };
    crate::storage::sessions::record_activity(tx, &activity, reopen)
}
