//! The `channel_penalties` table: a channel that must not send until a time, for every
//! destination: the far end said so (a channel-wide 429), or the circuit breaker opened. Written
//! with the answer that caused it; read at daemon start, so a restart does not resume calling a
//! platform that asked for quiet, and by `relayq status`.

use crate::error::Result;
use crate::params;
use crate::storage::sql::{Executor, Query, Sql};
use crate::storage::tx::Tx;

/// Records that `channel` must not send before `until` (unix ms); a later penalty replaces an
/// earlier one, an earlier one never shortens a later. (PostgreSQL names the row's own
/// columns by the table and has `GREATEST` for SQLite's two-argument `MAX`.)
const SET_SQL: Sql = Sql::two(
    "INSERT INTO channel_penalties (channel, until, reason)
     VALUES (:channel, :until, :reason)
     ON CONFLICT (channel) DO UPDATE SET
       reason = CASE WHEN excluded.until > until THEN excluded.reason ELSE reason END,
       until = MAX(until, excluded.until)",
    "INSERT INTO channel_penalties AS p (channel, until, reason)
     VALUES (:channel, :until, :reason)
     ON CONFLICT (channel) DO UPDATE SET
       reason = CASE WHEN excluded.until > p.until THEN excluded.reason ELSE p.reason END,
       until = GREATEST(p.until, excluded.until)",
);

/// The penalties still running at `:now`.
const RUNNING_SQL: Sql = Sql::same(
    "SELECT channel, until, reason FROM channel_penalties WHERE until > :now ORDER BY channel",
);

/// A channel's penalty: until when (unix ms), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Penalty {
    pub channel: String,
    pub until: i64,
    pub reason: String,
}

pub fn set_in(tx: &Tx<'_>, channel: &str, until: i64, reason: &str) -> Result<()> {
    tx.exec(
        &SET_SQL,
        params![":channel" => channel, ":until" => until, ":reason" => reason],
    )?;
    Ok(())
}

/// Every penalty still running at `now`.
pub fn running(db: &dyn Executor, now: i64) -> Result<Vec<Penalty>> {
    db.query_all(&RUNNING_SQL, params![":now" => now], |r| {
        Ok(from_columns! { r => Penalty { channel, until, reason } })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::storage::test_db::TestDb;

    #[test]
    fn a_penalty_is_kept_until_its_end_and_never_shortened() {
        for db in TestDb::both() {
            for (channel, until, reason) in [
                ("tg", 5_000, "rate limit"),
                ("tg", 3_000, "breaker"),
                ("slack", 1_000, "rate limit"),
            ] {
                db.write_at(0, |tx| set_in(tx, channel, until, reason))
                    .unwrap();
            }
            let expected = Penalty {
                channel: "tg".into(),
                until: 5_000,
                reason: "rate limit".into(),
            };
            let at = |now| db.read(|conn| running(conn, now)).unwrap();
            assert_eq!(at(2_000), vec![expected], "{}", db.name());
            assert!(at(5_000).is_empty(), "{}", db.name());
        }
    }
}
