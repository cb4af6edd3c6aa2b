//! The `channel_penalties` table: a channel the far end told to stop sending altogether (a
//! channel-wide 429) until a time. Written with the answer that said so; read at daemon start,
//! so a restart does not resume calling a platform that asked for quiet.

use rusqlite::{named_params, Connection, Transaction};

use crate::db::query_all;
use crate::error::Result;

/// Records that `channel` must not send before `until` (unix ms); a later penalty replaces an
/// earlier one, an earlier one never shortens a later.
const SET_SQL: &str = "INSERT INTO channel_penalties (channel, until) VALUES (:channel, :until)
     ON CONFLICT (channel) DO UPDATE SET until = MAX(until, excluded.until)";

/// The penalties still running at `:now`.
const RUNNING_SQL: &str =
    "SELECT channel, until FROM channel_penalties WHERE until > :now ORDER BY channel";

pub fn set_in(tx: &Transaction<'_>, channel: &str, until: i64) -> Result<()> {
    tx.prepare_cached(SET_SQL)?
        .execute(named_params! {":channel": channel, ":until": until})?;
    Ok(())
}

/// `(channel, until)` of every penalty still running at `now`.
pub fn running(conn: &Connection, now: i64) -> Result<Vec<(String, i64)>> {
    query_all(conn, RUNNING_SQL, named_params! {":now": now}, |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_penalty_is_kept_until_its_end_and_never_shortened() {
        let (_dir, db) = crate::db::temp_database();
        db.write(|tx| set_in(tx, "tg", 5_000)).unwrap();
        db.write(|tx| set_in(tx, "tg", 3_000)).unwrap();
        db.write(|tx| set_in(tx, "slack", 1_000)).unwrap();
        let conn = db.read().unwrap();
        assert_eq!(
            running(&conn, 2_000).unwrap(),
            vec![("tg".to_string(), 5_000)]
        );
        assert!(running(&conn, 5_000).unwrap().is_empty());
        for sql in [SET_SQL, RUNNING_SQL] {
            conn.prepare(sql).unwrap();
        }
    }
}
