//! The `pauses` table: an operator's pause of a queue, or of one key of it (a session, an
//! outbound destination). A paused queue or key gets no new leases until it is resumed;
//! deliveries already under way finish. Written by the daemon's API, read at its start.

use crate::tx::Tx;
use rusqlite::{named_params, Connection};
use serde::Serialize;

use crate::db::query_all;
use crate::error::Result;
use crate::queue::QueueName;

const PAUSE_SQL: &str = "INSERT INTO pauses (queue, key, paused_at) VALUES (:queue, :key, :now)
     ON CONFLICT (queue, key) DO NOTHING";

const RESUME_SQL: &str = "DELETE FROM pauses WHERE queue = :queue AND key = :key";

const ALL_SQL: &str = "SELECT queue, key, paused_at FROM pauses ORDER BY queue, key";

/// One pause: of `queue`'s `key`, or of the whole queue when `key` is `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    pub queue: QueueName,
    pub key: Option<String>,
    pub paused_at: i64,
}

/// Pauses `queue`'s `key` (the whole queue when `None`); pausing again keeps the first time.
pub fn pause_in(tx: &Tx<'_>, queue: QueueName, key: Option<&str>) -> Result<()> {
    let now = tx.now();
    let params = named_params! {":queue": queue, ":key": key.unwrap_or(""), ":now": now};
    tx.sqlite()?.prepare_cached(PAUSE_SQL)?.execute(params)?;
    Ok(())
}

/// Resumes what [`pause_in`] paused; true when it was paused.
pub fn resume_in(tx: &Tx<'_>, queue: QueueName, key: Option<&str>) -> Result<bool> {
    let params = named_params! {":queue": queue, ":key": key.unwrap_or("")};
    Ok(tx.sqlite()?.prepare_cached(RESUME_SQL)?.execute(params)? > 0)
}

/// Every pause, by queue then key (a queue's own pause first).
pub fn all(conn: &Connection) -> Result<Vec<Pause>> {
    query_all(conn, ALL_SQL, [], |r| {
        let key: String = r.get("key")?;
        Ok(
            from_columns! { r => Pause { queue, paused_at; key: Some(key).filter(|k| !k.is_empty()) } },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_kept_until_resumed_and_a_queue_pause_is_apart_from_its_keys() {
        let (_dir, db) = crate::db::temp_database();
        db.write_at(1_000, |tx| {
            pause_in(tx, QueueName::Outbound, Some("[\"tg\",\"42\"]"))
        })
        .unwrap();
        db.write_at(2_000, |tx| pause_in(tx, QueueName::Outbound, None))
            .unwrap();
        db.write_at(3_000, |tx| pause_in(tx, QueueName::Outbound, None))
            .unwrap();
        let conn = db.read().unwrap();
        let paused = all(&conn).unwrap();
        assert_eq!(paused.len(), 2);
        assert_eq!(
            (paused[0].key.as_deref(), paused[0].paused_at),
            (None, 2_000)
        );
        assert_eq!(paused[1].key.as_deref(), Some("[\"tg\",\"42\"]"));
        drop(conn);
        assert!(db
            .write_at(0, |tx| resume_in(tx, QueueName::Outbound, None))
            .unwrap());
        assert!(!db
            .write_at(0, |tx| resume_in(tx, QueueName::Outbound, None))
            .unwrap());
        assert_eq!(
            all(&db.read().unwrap()).unwrap().len(),
            1,
            "the key stays paused"
        );
    }
}
