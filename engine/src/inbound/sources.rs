//! Inbound sources' batches: a source's messages and its new offset (the `source_offsets`
//! table, in [`storage`](crate::storage::source_offsets)) are written in one transaction
//! ([`enqueue_batch_in`]).

use crate::tx::Tx;

use crate::error::Result;
use crate::inbound::{self, InboundMessage};
use crate::queue::{Enqueued, Queue};

pub use crate::storage::source_offsets::{offset, set_offset_in};

/// Enqueues a source's batch (already validated) and moves its offset, in the caller's
/// transaction: both or neither are kept. Each message as written (routed by its chat, see
/// [`inbound::routed_in`]) with its row. On PostgreSQL a batch none of whose messages is
/// routed by its chat is written by one statement (see [`RowAhead`](crate::commit::RowAhead)).
pub fn enqueue_batch_in(
    queue: &Queue,
    tx: &Tx<'_>,
    name: &str,
    messages: &[InboundMessage],
    offset: &str,
) -> Result<Vec<(InboundMessage, Enqueued)>> {
    let ahead: Option<Vec<_>> = match tx.pays_per_statement() && messages.len() > 1 {
        true => messages
            .iter()
            .map(|m| inbound::row_ahead(queue, m))
            .collect(),
        false => None,
    };
    let enqueued = match ahead {
        Some(rows) => {
            let rows: Vec<_> = rows.iter().collect();
            let written = crate::queue::enqueue_ahead_in(tx, &rows)?;
            messages
                .iter()
                .zip(written)
                .map(|(m, row)| Ok((m.clone(), inbound::written_in(tx, m, row)?)))
                .collect::<Result<Vec<_>>>()?
        }
        None => messages
            .iter()
            .map(|m| inbound::enqueue_routed_in(queue, tx, m))
            .collect::<Result<Vec<_>>>()?,
    };
    set_offset_in(tx, name, offset)?;
    Ok(enqueued)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, QueueName, QueuePolicy, SystemClock};

    #[test]
    fn a_batch_and_its_offset_are_kept_together_or_not_at_all() {
        let (_dir, db) = crate::db::temp_database();
        let engine = Engine::with_clock(db.clone(), std::sync::Arc::new(SystemClock));
        let q = engine.queue(QueueName::Inbound, QueuePolicy::inbound());
        let batch = [
            InboundMessage::text("s", "test", "one"),
            InboundMessage::text("s", "test", "two"),
        ];
        db.write_at(0, |tx| enqueue_batch_in(&q, tx, "src", &batch, "2"))
            .unwrap();
        assert_eq!(
            offset(&db.read().unwrap(), "src").unwrap().as_deref(),
            Some("2")
        );

        // A failure after the batch is written rolls back the rows and the offset alike.
        let failed: Result<()> = db.write_at(0, |tx| {
            enqueue_batch_in(&q, tx, "src", &batch, "4")?;
            Err(crate::EngineError::Invalid("crash".into()))
        });
        assert!(failed.is_err());
        assert_eq!(
            offset(&db.read().unwrap(), "src").unwrap().as_deref(),
            Some("2")
        );
        let rows: i64 = engine.counts().unwrap().iter().map(|c| c.count).sum();
        assert_eq!(rows, 2);
        assert_eq!(offset(&db.read().unwrap(), "other").unwrap(), None);
    }

    /// A batch gives the same answers on both backends (on PostgreSQL its rows are written by
    /// one statement): each message's row in order, a message read twice its first row, and
    /// the session's origin recorded.
    #[test]
    fn a_batch_is_answered_alike_on_both_backends() {
        use crate::storage::test_db::TestDb;
        for db in TestDb::both() {
            let engine = Engine::with_clock(db.db.clone(), std::sync::Arc::new(SystemClock));
            let q = engine.queue(QueueName::Inbound, QueuePolicy::inbound());
            let mut from_chat = InboundMessage::text("s", "telegram", "one");
            from_chat.source_message_id = Some("7".into());
            from_chat.source_channel_id = Some("-100".into());
            let batch = [
                from_chat.clone(),
                InboundMessage::text("t", "test", "two"),
                from_chat,
                InboundMessage::text("s", "test", "three"),
            ];
            let got = db
                .write_at(0, |tx| enqueue_batch_in(&q, tx, "src", &batch, "4"))
                .unwrap();
            let got: Vec<Enqueued> = got.into_iter().map(|(_, e)| e).collect();
            let shape: Vec<bool> = got.iter().map(|e| e.duplicate).collect();
            assert_eq!(shape, [false, false, true, false], "{}", db.name());
            assert_eq!(got[2].id, got[0].id, "{}", db.name());
            assert!(
                got[0].id < got[1].id && got[1].id < got[3].id,
                "{}",
                db.name()
            );
            let origin = crate::storage::sessions::origin(&db.db.read().unwrap(), "s").unwrap();
            assert_eq!(
                origin.map(|o| o.chat).as_deref(),
                Some("-100"),
                "{}",
                db.name()
            );
        }
    }
}
