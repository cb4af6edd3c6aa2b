//! The raw SQLite ceiling: a plain rusqlite loop on relayq's own table (same schema and
//! indexes, created by the engine's migrations) doing the same work per message — insert it,
//! claim the oldest unfinished row of its session, mark it done — with nothing else: no
//! actors, no channels, no fencing checks beyond the token in the WHERE clause, and no
//! RETURNING (SQLite builds a temporary b-tree for it, which costs more than the statement).

use std::time::Instant;

use anyhow::Result;
use relayq_engine::{Clock, DbConfig, Engine, InboundMessage, Synchronous, SystemClock};
use rusqlite::{params, Connection};

/// Messages per second for `n` messages over `sessions` sessions, committing every `batch`
/// operations of a kind: each chunk of `batch` messages is inserted in one transaction, claimed
/// in a second and marked done in a third (so `batch` 1 is one commit per operation).
pub fn ceiling(n: usize, sessions: usize, sync: Synchronous, batch: usize) -> Result<f64> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("raw.db");
    let mut config = DbConfig::new(&path);
    config.synchronous = sync;
    drop(Engine::open(&config)?); // the schema, exactly as relayq creates it
    let mut conn = Connection::open(&path)?;
    conn.pragma_update(
        None,
        "synchronous",
        match sync {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        },
    )?;
    let payloads: Vec<(String, String)> = (0..n)
        .map(|i| {
            let session = format!("s{}", i % sessions);
            let row = InboundMessage::text(&session, "bench", &(i / sessions).to_string()).to_row();
            (session, row.payload)
        })
        .collect();

    let started = Instant::now();
    for chunk in payloads.chunks(batch) {
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO queue_rows (queue, key, payload, created_at, next_attempt_at)
                 VALUES ('inbound', ?1, ?2, ?3, ?3)",
            )?;
            for (session, payload) in chunk {
                insert.execute(params![session, payload, now_ms()])?;
            }
        }
        tx.commit()?;
        let mut claimed = Vec::with_capacity(chunk.len());
        let tx = conn.transaction()?;
        {
            let mut head = tx.prepare_cached(
                "SELECT id, lease_token FROM queue_rows WHERE queue = 'inbound' AND key = ?1
                   AND state IN ('pending', 'leased') ORDER BY id LIMIT 1",
            )?;
            let mut lease = tx.prepare_cached(
                "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
                        lease_owner = 'raw', lease_token = lease_token + 1, lease_expires_at = ?2
                 WHERE id = ?1",
            )?;
            for (session, _) in chunk {
                let (id, token): (i64, i64) =
                    head.query_row([session], |r| Ok((r.get(0)?, r.get(1)?)))?;
                lease.execute(params![id, now_ms() + 30_000])?;
                claimed.push((id, token + 1));
            }
        }
        tx.commit()?;
        let tx = conn.transaction()?;
        {
            let mut done = tx.prepare_cached(
                "UPDATE queue_rows SET state = 'delivered', finished_at = ?3,
                        lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = ?1 AND state = 'leased' AND lease_token = ?2",
            )?;
            for (id, token) in claimed {
                anyhow::ensure!(done.execute(params![id, token, now_ms()])? == 1);
            }
        }
        tx.commit()?;
    }
    let secs = started.elapsed().as_secs_f64();
    let left: i64 = conn.query_row(
        "SELECT COUNT(*) FROM queue_rows WHERE state != 'delivered'",
        [],
        |r| r.get(0),
    )?;
    anyhow::ensure!(left == 0, "raw loop left {left} rows undelivered");
    Ok(n as f64 / secs)
}

fn now_ms() -> i64 {
    SystemClock.now_ms()
}
