//! An album (Telegram's `media_group_id`: several photos or files sent at once, one message
//! each) becomes one row and one prompt. Each message is written as it arrives, durable at
//! once: the first as a row held for the album's quiet period; each next one, while that row
//! is not leased yet, joins it (its files added in order, its caption after the others) and
//! holds it a quiet period more. A message that comes after the row went out starts a row of
//! its own. A message read twice joins once (`album_parts`, by its dedup key).

use crate::error::Result;
use crate::inbound::InboundMessage;
use crate::queue::{Enqueued, Queue};
use crate::storage::albums;
use crate::tx::Tx;

/// Writes album message `m` (routed), joining the album's waiting row where there is one;
/// `None` when `m` is not an album's, or carries no id to know it again by.
pub fn enqueue_in(queue: &Queue, tx: &Tx<'_>, m: &InboundMessage) -> Result<Option<Enqueued>> {
    let (Some(album), Some(dedup)) = (&m.album, m.to_row().dedup_key) else {
        return Ok(None);
    };
    let album = serde_json::json!([m.origin, m.source_channel_id, album]).to_string();
    if let Some(row) = albums::joined(tx, &dedup)? {
        return Ok(Some(Enqueued {
            id: row,
            duplicate: true,
            expired: None,
        }));
    }
    let quiet_until = tx.now() + m.album_quiet.as_millis() as i64;
    if let Some((row, payload)) = albums::waiting_row(tx, &album)? {
        let mut kept = InboundMessage::from_payload(&payload)?;
        if kept.session == m.session {
            join(&mut kept, m);
            if albums::join_in(tx, row, &kept.to_row().payload, quiet_until)? {
                albums::add_in(tx, &dedup, &album, row)?;
                return Ok(Some(Enqueued {
                    id: row,
                    duplicate: false,
                    expired: None,
                }));
            }
        }
    }
    let enqueued = crate::inbound::enqueue_in(queue, tx, m)?;
    if !enqueued.duplicate {
        if enqueued.expired.is_none() {
            albums::hold_in(tx, enqueued.id, quiet_until)?;
        }
        albums::add_in(tx, &dedup, &album, enqueued.id)?;
    }
    Ok(Some(enqueued))
}

/// `next`'s files added to `kept`'s in the platform's order (its message ids), and its caption
/// after `kept`'s.
fn join(kept: &mut InboundMessage, next: &InboundMessage) {
    kept.attachments.extend(next.attachments.iter().cloned());
    let order = |a: &crate::inbound::Attachment| {
        a.message
            .as_deref()
            .and_then(|id| id.parse::<i64>().ok())
            .unwrap_or(i64::MAX)
    };
    kept.attachments.sort_by_key(order);
    let caption = next.content.trim();
    if !caption.is_empty() {
        kept.content = match kept.content.trim().is_empty() {
            true => caption.to_string(),
            false => format!("{}\n{caption}", kept.content),
        };
    }
}
