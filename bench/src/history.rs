//! Cost versus history: the latency of leasing and completing a row, engine level, with a
//! given number of delivered rows retained in the table.

use std::time::Instant;

use anyhow::{ensure, Result};
use relayq_engine::params;
use relayq_engine::storage::sql::{Query, Sql};
use relayq_engine::{DbConfig, Engine, InboundMessage, QueuePolicy};

/// Microseconds of each of `ops` lease + complete pairs with `retained` delivered rows kept.
pub fn lease_complete_micros(retained: usize, ops: usize) -> Result<Vec<f64>> {
    let dir = tempfile::tempdir()?;
    let engine = Engine::open(&DbConfig::new(dir.path().join("relayq.db")))?;
    let payload = InboundMessage::text("s0", "bench", "delivered long ago")
        .to_row()
        .payload;
    engine.database().write(|tx| {
        let sql = Sql::same(
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < :retained)
             INSERT INTO queue_rows (queue, key, payload, state, attempts, created_at,
                                     next_attempt_at, finished_at, reason)
             SELECT 'inbound', 's' || (x % 1000), :payload, 'delivered', 1, x, x, x, NULL FROM n",
        );
        tx.exec(
            &sql,
            params![":retained" => retained as i64, ":payload" => payload],
        )?;
        Ok(())
    })?;
    let inbound = engine.queue(relayq_engine::inbound::QUEUE, QueuePolicy::inbound());
    let mut micros = Vec::with_capacity(ops);
    for i in 0..ops {
        let session = format!("s{}", i % 100);
        inbound.enqueue(&InboundMessage::text(&session, "bench", "now").to_row())?;
        let started = Instant::now();
        let lease = inbound.lease_next(&session)?;
        let lease = match lease {
            Some(l) => l,
            None => anyhow::bail!("nothing to lease for {session}"),
        };
        ensure!(inbound.complete(lease.id, lease.token, None)?, "lease lost");
        micros.push(started.elapsed().as_secs_f64() * 1e6);
    }
    Ok(micros)
}
