//! A session's end: the registry marks it ended, its open approvals are withdrawn, and what
//! waits for it is dropped with a word to each chat. Shared by the agent's own SessionEnd and
//! `/stop` from a chat; a module of its own (reading storage, not the registry's module) so
//! the flows it reaches do not reach back into the registry.

use crate::error::Result;
use crate::outbound::routes::NoticeRoutes;
use crate::queue::Queue;
use crate::tx::Tx;

/// Ends the session's open approvals: the agent no longer asks them (`why`).
pub fn withdraw_open_in(tx: &Tx<'_>, key: &str, why: &str) -> Result<()> {
    for open in crate::approvals::open_for_session(tx, key)? {
        crate::approvals::withdraw_in(tx, &open.id, why)?;
    }
    Ok(())
}

/// Ends session `key` (see the module's doc); its waiting messages are expired, each chat
/// told `why` (never silence). The ordering keys of the notices written.
pub fn end_in(
    inbound: &Queue,
    outbound: &Queue,
    tx: &Tx<'_>,
    routes: &NoticeRoutes,
    key: &str,
    why: &str,
) -> Result<Vec<String>> {
    crate::storage::sessions::end(tx, key)?;
    withdraw_open_in(tx, key, "the agent's session ended")?;
    let dropped = inbound.active_rows_in(tx, key)?;
    inbound.expire_key_in(tx, key, crate::inbound::SESSION_ENDED)?;
    let mut told = Vec::new();
    for (id, payload) in dropped {
        let Ok(message) = crate::InboundMessage::from_payload(&payload) else {
            continue;
        };
        let trouble = crate::inbound::trouble::Trouble::Dropped { why };
        told.extend(crate::inbound::trouble::tell_message_in(
            outbound, tx, routes, id, &message, trouble,
        )?);
    }
    Ok(told)
}
