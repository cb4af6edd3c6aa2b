//! Looking without changing: a key's head, the active keys, the next due time, one row's
//! story, the stuck heads, the dead letters.

use rusqlite::{params, OptionalExtension, Row};

use super::{head_of, Head, Queue, QueueName};
use crate::error::Result;

impl Queue {
    /// The key's oldest unfinished row, as a worker needs it to decide when to look again.
    pub fn head(&self, key: &str) -> Result<Head> {
        let now = self.now();
        let conn = self.db.read()?;
        head_of(&conn, self.name.as_str(), key, now)
    }

    /// Keys that have pending or leased rows: the sessions to resume after a restart.
    pub fn active_keys(&self) -> Result<Vec<String>> {
        let conn = self.db.read()?;
        let mut stmt = conn.prepare_cached(
            "SELECT DISTINCT key FROM queue_rows WHERE queue = ?1 AND state IN ('pending', 'leased')",
        )?;
        let keys = stmt
            .query_map(params![self.name.as_str()], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(keys)
    }

    /// When the earliest pending row of this queue is due (unix ms), if there is one.
    pub fn next_due(&self) -> Result<Option<i64>> {
        let conn = self.db.read()?;
        let at = conn
            .prepare_cached(
                "SELECT MIN(next_attempt_at) FROM queue_rows WHERE queue = ?1 AND state = 'pending'",
            )?
            .query_row(params![self.name.as_str()], |r| r.get(0))?;
        Ok(at)
    }

    /// Reads a row's current state (for tests and tools).
    pub fn state_of(&self, id: i64) -> Result<Option<RowState>> {
        let conn = self.db.read()?;
        let state = conn
            .prepare_cached(
                "SELECT state, attempts, next_attempt_at, last_error, reason FROM queue_rows
                 WHERE id = ?1 AND queue = ?2",
            )?
            .query_row(params![id, self.name.as_str()], |r| {
                Ok(RowState {
                    state: r.get(0)?,
                    attempts: r.get(1)?,
                    next_attempt_at: r.get(2)?,
                    last_error: r.get(3)?,
                    reason: r.get(4)?,
                })
            })
            .optional()?;
        Ok(state)
    }
}

/// A row's lifecycle fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowState {
    pub state: String,
    pub attempts: u32,
    pub next_attempt_at: i64,
    pub last_error: Option<String>,
    pub reason: Option<String>,
}

/// Every field of one row, as `relayq show` tells its story. Times are unix ms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowDetail {
    pub id: i64,
    pub queue: QueueName,
    pub key: String,
    pub state: String,
    pub attempts: u32,
    pub created_at: i64,
    pub next_attempt_at: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub last_error: Option<String>,
    pub finished_at: Option<i64>,
    pub reason: Option<String>,
    pub payload: String,
    /// The platform's message id, when a channel delivered it and the far end gave one.
    pub receipt: Option<String>,
    /// How long the delivering send took.
    pub took_ms: Option<i64>,
}

const DETAIL_COLUMNS: &str = "id, queue, key, state, attempts, created_at, next_attempt_at,
     lease_owner, lease_expires_at, last_error, finished_at, reason, payload, receipt, took_ms";

fn detail_from_row(r: &Row<'_>) -> rusqlite::Result<RowDetail> {
    Ok(RowDetail {
        id: r.get(0)?,
        queue: r.get(1)?,
        key: r.get(2)?,
        state: r.get(3)?,
        attempts: r.get(4)?,
        created_at: r.get(5)?,
        next_attempt_at: r.get(6)?,
        lease_owner: r.get(7)?,
        lease_expires_at: r.get(8)?,
        last_error: r.get(9)?,
        finished_at: r.get(10)?,
        reason: r.get(11)?,
        payload: r.get(12)?,
        receipt: r.get(13)?,
        took_ms: r.get(14)?,
    })
}

/// One row, whatever its queue and state.
pub(crate) fn row_detail(conn: &rusqlite::Connection, id: i64) -> Result<Option<RowDetail>> {
    let sql = format!("SELECT {DETAIL_COLUMNS} FROM queue_rows WHERE id = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(params![id], detail_from_row)
        .optional()?)
}

/// Pending rows that failed and hold up their key (the oldest unfinished row of it), oldest
/// first, at most `limit`: what an operator looks at first.
pub(crate) fn stuck_heads(conn: &rusqlite::Connection, limit: usize) -> Result<Vec<RowDetail>> {
    let sql = format!(
        "SELECT {DETAIL_COLUMNS} FROM queue_rows r
         WHERE r.state = 'pending' AND r.last_error IS NOT NULL
           AND NOT EXISTS (
             SELECT 1 FROM queue_rows o
             WHERE o.queue = r.queue AND o.key = r.key
               AND o.state IN ('pending', 'leased') AND o.id < r.id)
         ORDER BY r.id LIMIT ?1"
    );
    let rows = conn
        .prepare_cached(&sql)?
        .query_map(params![limit as i64], detail_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// A dead row, as `relayq dead list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadRow {
    pub id: i64,
    pub queue: QueueName,
    pub key: String,
    pub attempts: u32,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub reason: Option<String>,
    pub last_error: Option<String>,
    pub payload: String,
}

/// Dead rows of every queue (or of `queue`), oldest first.
pub(crate) fn dead_rows(
    conn: &rusqlite::Connection,
    queue: Option<QueueName>,
) -> Result<Vec<DeadRow>> {
    let rows = conn
        .prepare_cached(
            "SELECT id, queue, key, attempts, created_at, finished_at, reason, last_error, payload
             FROM queue_rows WHERE state = 'dead' AND (?1 IS NULL OR queue = ?1) ORDER BY id",
        )?
        .query_map(params![queue.map(QueueName::as_str)], |r| {
            Ok(DeadRow {
                id: r.get(0)?,
                queue: r.get(1)?,
                key: r.get(2)?,
                attempts: r.get(3)?,
                created_at: r.get(4)?,
                finished_at: r.get(5)?,
                reason: r.get(6)?,
                last_error: r.get(7)?,
                payload: r.get(8)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}
