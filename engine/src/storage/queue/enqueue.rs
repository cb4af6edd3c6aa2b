//! Writing rows: one, many, or already expired; a dedup key finds the row it repeats.

use rusqlite::{named_params, Transaction};

use super::{Enqueued, NewRow, Queue};
use crate::error::{EngineError, Result};

/// Writes a row, unless one with the same dedup key exists.
const INSERT_SQL: &str = "INSERT INTO queue_rows (queue, key, dedup_key, payload, created_at, next_attempt_at,
                                         state, finished_at, reason)
                 VALUES (:queue, :key, :dedup_key, :payload, :now, :now, :state, :finished_at, :reason)
                 ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING";

/// The row an insert found by its dedup key.
const FIND_DUPLICATE_SQL: &str =
    "SELECT id FROM queue_rows WHERE queue = :queue AND dedup_key = :dedup_key";

impl Queue {
    /// Writes one row, or finds the row with the same dedup key and writes nothing.
    pub fn enqueue(&self, row: &NewRow) -> Result<Enqueued> {
        self.write_now(|tx, now| self.enqueue_in(tx, row, now))
    }

    /// Writes many rows in one transaction (one commit, one fsync).
    pub fn enqueue_many(&self, rows: &[NewRow]) -> Result<Vec<Enqueued>> {
        self.write_now(|tx, now| rows.iter().map(|r| self.enqueue_in(tx, r, now)).collect())
    }

    /// Enqueue inside a caller's transaction, so a handler's effects and its rows commit together.
    /// Its only write is one statement (see `Atomicity::OneStatement`).
    pub fn enqueue_in(&self, tx: &Transaction<'_>, row: &NewRow, now: i64) -> Result<Enqueued> {
        self.insert_in(tx, row, now, None)
    }

    /// Writes the row already expired, for `reason`: it is kept (and deduplicates its retries)
    /// but never delivered. One write statement, like `enqueue_in`.
    pub fn enqueue_expired_in(
        &self,
        tx: &Transaction<'_>,
        row: &NewRow,
        reason: &'static str,
        now: i64,
    ) -> Result<Enqueued> {
        self.insert_in(tx, row, now, Some(reason))
    }

    fn insert_in(
        &self,
        tx: &Transaction<'_>,
        row: &NewRow,
        now: i64,
        expired: Option<&'static str>,
    ) -> Result<Enqueued> {
        if row.key.is_empty() {
            return Err(EngineError::Invalid("the ordering key is empty".into()));
        }
        // No RETURNING: SQLite collects RETURNING rows in a temporary b-tree, which costs more
        // than the insert; the changes count and the last rowid say the same.
        let inserted = tx.prepare_cached(INSERT_SQL)?.execute(named_params! {
            ":queue": self.name,
            ":key": row.key,
            ":dedup_key": row.dedup_key,
            ":payload": row.payload,
            ":now": now,
            ":state": if expired.is_some() { "expired" } else { "pending" },
            ":finished_at": expired.map(|_| now),
            ":reason": expired,
        })?;
        if inserted == 1 {
            return Ok(Enqueued {
                id: tx.last_insert_rowid(),
                duplicate: false,
                expired,
            });
        }
        let id = tx.prepare_cached(FIND_DUPLICATE_SQL)?.query_row(
            named_params! {":queue": self.name, ":dedup_key": row.dedup_key},
            |r| r.get(0),
        )?;
        Ok(Enqueued {
            id,
            duplicate: true,
            expired: None,
        })
    }
}

/// Every statement of this file, for the test that prepares them all.
#[cfg(test)]
pub(super) const STATEMENTS: &[&str] = &[INSERT_SQL, FIND_DUPLICATE_SQL];
