//! The session registry as the hook-event handlers keep it: an event's activity recorded,
//! turns begun and completed, the agent's state. Its tables, and every statement on them, are
//! in [`storage::sessions`](crate::storage::sessions).

pub mod agent_state;
pub mod ending;

use crate::tx::Tx;

use crate::error::Result;
use crate::hooks::HookEvent;

pub use crate::storage::sessions::{
    agent_state, begin_turn, complete_turn, end, get, is_ended, list, mark_agent_hooks, origin,
    set_agent_state, set_agent_state_if_older, set_last_user_input, set_origin_in, unmatched,
    Origin, SessionRecord,
};

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
