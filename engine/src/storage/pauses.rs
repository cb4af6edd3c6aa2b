//! The `pauses` table: an operator's pause of a queue, or of one key of it (a session, an
//! outbound destination). A paused queue or key gets no new leases until it is resumed;
//! deliveries already under way finish. Written by the daemon's API, read at its start.

use serde::Serialize;

use crate::error::Result;
use crate::params;
use crate::storage::queue::QueueName;
use crate::storage::sql::{Executor, Query, Sql};
use crate::storage::tx::Tx;

const PAUSE_SQL: Sql = Sql::same(
    "INSERT INTO pauses (queue, key, paused_at) VALUES (:queue, :key, :now)
     ON CONFLICT (queue, key) DO NOTHING",
);

const RESUME_SQL: Sql = Sql::same("DELETE FROM pauses WHERE queue = :queue AND key = :key");

const ALL_SQL: Sql = Sql::same("SELECT queue, key, paused_at FROM pauses ORDER BY queue, key");

/// One pause: of `queue`'s `key`, or of the whole queue when `key` is `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    pub queue: QueueName,
    pub key: Option<String>,
    pub paused_at: i64,
}

/// Pauses `queue`'s `key` (the whole queue when `None`); pausing again keeps the first time.
pub fn pause_in(tx: &Tx<'_>, queue: QueueName, key: Option<&str>) -> Result<()> {
    let (key, now) = (key.unwrap_or(""), tx.now());
    tx.exec(
        &PAUSE_SQL,
        params![":queue" => queue, ":key" => key, ":now" => now],
    )?;
    Ok(())
}

/// Resumes what [`pause_in`] paused; true when it was paused.
pub fn resume_in(tx: &Tx<'_>, queue: QueueName, key: Option<&str>) -> Result<bool> {
    let key = key.unwrap_or("");
    Ok(tx.exec(&RESUME_SQL, params![":queue" => queue, ":key" => key])? > 0)
}

/// Every pause, by queue then key (a queue's own pause first).
pub fn all(db: &dyn Executor) -> Result<Vec<Pause>> {
    db.query_all(&ALL_SQL, params![], |r| {
        let key: String = r.get("key")?;
        Ok(
            from_columns! { r => Pause { queue, paused_at; key: Some(key).filter(|k| !k.is_empty()) } },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::storage::test_db::TestDb;

    #[test]
    fn a_pause_is_kept_until_resumed_and_a_queue_pause_is_apart_from_its_keys() {
        const KEY: &str = "[\"tg\",\"42\"]";
        for db in TestDb::both() {
            let pause = |at, key| db.write_at(at, |tx| pause_in(tx, QueueName::Outbound, key));
            pause(1_000, Some(KEY)).unwrap();
            pause(2_000, None).unwrap();
            pause(3_000, None).unwrap();
            let paused = db.read(all).unwrap();
            assert_eq!(paused.len(), 2, "{}", db.name());
            assert_eq!(
                (paused[0].key.as_deref(), paused[0].paused_at),
                (None, 2_000)
            );
            assert_eq!(paused[1].key.as_deref(), Some(KEY));
            let resume = || db.write_at(0, |tx| resume_in(tx, QueueName::Outbound, None));
            assert!(resume().unwrap());
            assert!(!resume().unwrap());
            assert_eq!(db.read(all).unwrap().len(), 1, "the key stays paused");
        }
    }
}
