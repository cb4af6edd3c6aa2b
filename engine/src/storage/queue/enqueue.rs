//! Writing rows: one, many, or already expired; a dedup key finds the row it repeats.

use rusqlite::{params, Transaction};

use super::{Enqueued, NewRow, Queue};
use crate::error::{EngineError, Result};

impl Queue {
    /// Writes one row, or finds the row with the same dedup key and writes nothing.
    pub fn enqueue(&self, row: &NewRow) -> Result<Enqueued> {
        let now = self.now();
        self.db.write(|tx| self.enqueue_in(tx, row, now))
    }

    /// Writes many rows in one transaction (one commit, one fsync).
    pub fn enqueue_many(&self, rows: &[NewRow]) -> Result<Vec<Enqueued>> {
        let now = self.now();
        self.db
            .write(|tx| rows.iter().map(|r| self.enqueue_in(tx, r, now)).collect())
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
        let inserted = tx
            .prepare_cached(
                "INSERT INTO queue_rows (queue, key, dedup_key, payload, created_at, next_attempt_at,
                                         state, finished_at, reason)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8)
                 ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING",
            )?
            .execute(params![
                self.name.as_str(),
                row.key,
                row.dedup_key,
                row.payload,
                now,
                if expired.is_some() { "expired" } else { "pending" },
                expired.map(|_| now),
                expired
            ])?;
        if inserted == 1 {
            return Ok(Enqueued {
                id: tx.last_insert_rowid(),
                duplicate: false,
                expired,
            });
        }
        let id = tx
            .prepare_cached("SELECT id FROM queue_rows WHERE queue = ?1 AND dedup_key = ?2")?
            .query_row(params![self.name.as_str(), row.dedup_key], |r| r.get(0))?;
        Ok(Enqueued {
            id,
            duplicate: true,
            expired: None,
        })
    }
}
