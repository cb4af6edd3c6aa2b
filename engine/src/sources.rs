//! Inbound sources' batches: a source's messages and its new offset (the `source_offsets`
//! table, in [`storage`](crate::storage::source_offsets)) are written in one transaction
//! ([`enqueue_batch_in`]).

use crate::tx::Tx;

use crate::error::Result;
use crate::inbound::{self, InboundMessage};
use crate::queue::{Enqueued, Queue};

pub use crate::storage::source_offsets::{offset, set_offset_in};

/// Enqueues a source's batch (already validated) and moves its offset, in the caller's
/// transaction: both or neither are kept.
pub fn enqueue_batch_in(
    queue: &Queue,
    tx: &Tx<'_>,
    name: &str,
    messages: &[InboundMessage],
    offset: &str,
) -> Result<Vec<Enqueued>> {
    let enqueued = messages
        .iter()
        .map(|m| inbound::enqueue_in(queue, tx, m))
        .collect::<Result<Vec<_>>>()?;
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
}
