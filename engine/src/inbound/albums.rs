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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbound::attachments::{Attachment, FileKind};
    use crate::storage::test_db::TestDb;
    use crate::{Engine, QueueName, QueuePolicy, SystemClock};

    fn piece(id: &str, caption: &str) -> InboundMessage {
        let mut m = InboundMessage::text("s", "telegram:bot", caption);
        m.source_message_id = Some(id.into());
        m.source_channel_id = Some("42".into());
        m.album = Some("A".into());
        m.album_quiet = std::time::Duration::from_secs(1);
        m.attachments = vec![Attachment {
            message: Some(id.into()),
            ..Attachment::new(FileKind::Photo, format!("file-{id}"))
        }];
        m
    }

    /// An album's messages join one row while it waits, in the platform's order, a message read
    /// twice joining once; one that comes after the row was leased starts a row of its own.
    #[test]
    fn an_albums_messages_join_its_waiting_row_once_each_on_both_backends() {
        for db in TestDb::both() {
            let engine = Engine::with_clock(db.db.clone(), std::sync::Arc::new(SystemClock));
            let q = engine.queue(QueueName::Inbound, QueuePolicy::inbound());
            let write = |m: &InboundMessage, at: i64| {
                db.write_at(at, |tx| enqueue_in(&q, tx, m))
                    .unwrap()
                    .unwrap()
            };
            let first = write(&piece("11", "look"), 1_000);
            let third = write(&piece("13", ""), 1_200);
            let second = write(&piece("12", "closer"), 1_300);
            let again = write(&piece("12", "closer"), 1_400);
            assert_eq!((third.id, second.id), (first.id, first.id), "{}", db.name());
            assert!(!second.duplicate && again.duplicate, "{}", db.name());
            let leased = db.write_at(2_299, |tx| q.lease_next_in(tx, "s")).unwrap();
            assert!(
                leased.is_none(),
                "held a quiet second after the last: {}",
                db.name()
            );
            let leased = db
                .write_at(2_300, |tx| q.lease_next_in(tx, "s"))
                .unwrap()
                .unwrap();
            let m = InboundMessage::from_payload(&leased.payload).unwrap();
            let files: Vec<&str> = m.attachments.iter().map(|a| a.handle.as_str()).collect();
            assert_eq!(files, ["file-11", "file-12", "file-13"], "{}", db.name());
            assert_eq!(m.content, "look\ncloser", "{}", db.name());

            let late = write(&piece("14", ""), 2_400);
            assert_ne!(late.id, first.id, "{}", db.name());
        }
    }
}
