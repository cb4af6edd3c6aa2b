//! The `channel_penalties` table: a channel that must not send until a time, for every
//! destination: the far end said so (a channel-wide 429), or the circuit breaker opened. Written
//! with the answer that caused it; read at daemon start, so a restart does not resume calling a
//! platform that asked for quiet, and by `relayq status`.

use crate::tx::Tx;
use rusqlite::{named_params, Connection};

use crate::db::query_all;
use crate::error::Result;

/// Records that `channel` must not send before `until` (unix ms); a later penalty replaces an
/// earlier one, an earlier one never shortens a later.
const SET_SQL: &str = "INSERT INTO channel_penalties (channel, until, reason)
     VALUES (:channel, :until, :reason)
     ON CONFLICT (channel) DO UPDATE SET
       reason = CASE WHEN excluded.until > until THEN excluded.reason ELSE reason END,
       until = MAX(until, excluded.until)";

/// The penalties still running at `:now`.
const RUNNING_SQL: &str =
    "SELECT channel, until, reason FROM channel_penalties WHERE until > :now ORDER BY channel";

/// A channel's pause: until when (unix ms), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Penalty {
    pub channel: String,
    pub until: i64,
    pub reason: String,
}

pub fn set_in(tx: &Tx<'_>, channel: &str, until: i64, reason: &str) -> Result<()> {
    tx.sqlite()?
        .prepare_cached(SET_SQL)?
        .execute(named_params! {":channel": channel, ":until": until, ":reason": reason})?;
    Ok(())
}

/// Every penalty still running at `now`.
pub fn running(conn: &Connection, now: i64) -> Result<Vec<Penalty>> {
    query_all(conn, RUNNING_SQL, named_params! {":now": now}, |r| {
        Ok(from_columns! { r => Penalty { channel, until, reason } })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_penalty_is_kept_until_its_end_and_never_shortened() {
        let (_dir, db) = crate::db::temp_database();
        db.write_at(0, |tx| set_in(tx, "tg", 5_000, "rate limit"))
            .unwrap();
        db.write_at(0, |tx| set_in(tx, "tg", 3_000, "breaker"))
            .unwrap();
        db.write_at(0, |tx| set_in(tx, "slack", 1_000, "rate limit"))
            .unwrap();
        let conn = db.read().unwrap();
        let expected = Penalty {
            channel: "tg".into(),
            until: 5_000,
            reason: "rate limit".into(),
        };
        assert_eq!(running(&conn, 2_000).unwrap(), vec![expected]);
        assert!(running(&conn, 5_000).unwrap().is_empty());
        for sql in [SET_SQL, RUNNING_SQL] {
            conn.prepare(sql).unwrap();
        }
    }
}
