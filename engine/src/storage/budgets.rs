//! The `budgets` table: pacing shared by every node sending through one channel (a bot's
//! budget, a chat's), so that N daemons together keep to the platform's limits. Each budget is
//! a generic cell rate algorithm without burst, as the daemon's in-memory pacer is: a send is
//! allowed when the budget's theoretical arrival time (`tat`, in microseconds) has come, and
//! moves it one interval on. Timed by the database's clock on PostgreSQL.

use crate::error::Result;
use crate::params;
use crate::storage::sql::{Query, Sql};
use crate::storage::tx::Tx;

/// Takes one send from budget `:key` if its time has come: moves its `tat` one `:every` on.
const TAKE_SQL: Sql = Sql::two(
    "INSERT INTO budgets (key, tat) VALUES (:key, :now + :every)
     ON CONFLICT (key) DO UPDATE SET tat = MAX(budgets.tat, :now) + :every
     WHERE budgets.tat <= :now",
    "INSERT INTO budgets (key, tat) VALUES (:key, CAST(:now AS BIGINT) + CAST(:every AS BIGINT))
     ON CONFLICT (key) DO UPDATE SET tat = GREATEST(budgets.tat, :now) + :every
     WHERE budgets.tat <= :now",
);
const TAT_SQL: Sql = Sql::same("SELECT tat FROM budgets WHERE key = :key");

/// Takes one send from each budget (a key, and microseconds between sends), or none: the
/// microseconds to wait for the first that is spent. The caller rolls back on a wait, so the
/// budgets taken before it are not spent.
pub fn take_in(tx: &Tx<'_>, budgets: &[(&str, i64)]) -> Result<Option<i64>> {
    let now = tx.now() * 1_000;
    for (key, every) in budgets {
        let taken = tx.exec(
            &TAKE_SQL,
            params![":key" => key, ":now" => now, ":every" => every],
        )?;
        if taken == 0 {
            let tat: i64 = tx.query_value(&TAT_SQL, params![":key" => key])?;
            return Ok(Some((tat - now).max(1)));
        }
    }
    Ok(None)
}

/// Every statement, for the test that prepares them all on both backends.
#[cfg(test)]
pub(crate) const STATEMENTS: &[Sql] = &[TAKE_SQL, TAT_SQL];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::test_db::TestDb;

    /// Two budgets: a chat's of one send a second, the bot's of thirty.
    #[test]
    fn a_send_takes_from_every_budget_or_from_none() {
        for backend in TestDb::both() {
            let take = |ms: i64, chat: &str| {
                let budgets = [(chat, 1_000_000), ("bot", 33_333)];
                backend.write_at(ms, |tx| take_in(tx, &budgets)).unwrap()
            };
            assert_eq!(take(1_000, "chat-1"), None);
            assert_eq!(take(1_500, "chat-1"), Some(500_000), "{}", backend.name());
            assert_eq!(take(1_500, "chat-2"), None, "another chat");
            assert_eq!(
                take(1_510, "chat-3"),
                Some(23_333),
                "the bot's is spent for 23 ms"
            );
            assert_eq!(take(2_000, "chat-1"), None, "a second later");
        }
    }
}
