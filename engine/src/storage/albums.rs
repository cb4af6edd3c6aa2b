//! The albums' table (`engine/migrations/0023_album_parts.sql`) and the rows an album's messages
//! join: every statement on them lives here; writes take the caller's transaction.

use crate::error::Result;
use crate::params;
use crate::storage::sql::{Query, Sql};
use crate::storage::tx::Tx;

const PART_SQL: Sql = Sql::same("SELECT row_id FROM album_parts WHERE dedup_key = :dedup");
const LATEST_SQL: Sql =
    Sql::same("SELECT row_id FROM album_parts WHERE album = :album ORDER BY row_id DESC LIMIT 1");
const ADD_SQL: Sql = Sql::same(
    "INSERT INTO album_parts (dedup_key, album, row_id, created_at)
     VALUES (:dedup, :album, :row, :now) ON CONFLICT (dedup_key) DO NOTHING",
);
const PRUNE_SQL: Sql = Sql::same("DELETE FROM album_parts WHERE created_at < :before");
/// A row no one has leased yet: the album's next message may still join it.
const WAITING_SQL: Sql = Sql::same(
    "SELECT payload FROM queue_rows WHERE id = :id AND state = 'pending' AND attempts = 0",
);
/// The row with the message joined, due once the album is quiet.
const JOIN_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET payload = :payload, next_attempt_at = :at
     WHERE id = :id AND state = 'pending' AND attempts = 0",
);
/// An album's first row waits for the rest.
const HOLD_SQL: Sql =
    Sql::same("UPDATE queue_rows SET next_attempt_at = :at WHERE id = :id AND state = 'pending'");

/// The row the message with dedup key `dedup` joined, if it joined one.
pub fn joined(tx: &Tx<'_>, dedup: &str) -> Result<Option<i64>> {
    tx.query_opt(&PART_SQL, params![":dedup" => dedup], |r| r.get(0))
}

/// `album`'s latest row and its message, while no one has leased it.
pub fn waiting_row(tx: &Tx<'_>, album: &str) -> Result<Option<(i64, String)>> {
    let Some(row) = tx.query_opt(&LATEST_SQL, params![":album" => album], |r| r.get(0))? else {
        return Ok(None);
    };
    let payload: Option<String> =
        tx.query_opt(&WAITING_SQL, params![":id" => row], |r| r.get(0))?;
    Ok(payload.map(|p| (row, p)))
}

/// Row `row`, not yet leased, takes `payload` and is due at `at`: false when it was leased
/// meanwhile.
pub fn join_in(tx: &Tx<'_>, row: i64, payload: &str, at: i64) -> Result<bool> {
    let params = params![":id" => row, ":payload" => payload, ":at" => at];
    Ok(tx.exec(&JOIN_SQL, params)? == 1)
}

/// Row `row` is not due before `at`.
pub fn hold_in(tx: &Tx<'_>, row: i64, at: i64) -> Result<()> {
    tx.exec(&HOLD_SQL, params![":id" => row, ":at" => at])?;
    Ok(())
}

/// The message with dedup key `dedup` of `album` is in row `row`.
pub fn add_in(tx: &Tx<'_>, dedup: &str, album: &str, row: i64) -> Result<()> {
    let now = tx.now();
    let params = params![":dedup" => dedup, ":album" => album, ":row" => row, ":now" => now];
    tx.exec(&ADD_SQL, params)?;
    Ok(())
}

/// Forgets the album messages written before `before`. How many.
pub fn prune_in(tx: &Tx<'_>, before: i64) -> Result<usize> {
    tx.exec(&PRUNE_SQL, params![":before" => before])
}

/// Every statement of this file, for the test that prepares them all.
#[cfg(test)]
pub(crate) const STATEMENTS: &[Sql] = &[
    PART_SQL,
    LATEST_SQL,
    ADD_SQL,
    PRUNE_SQL,
    WAITING_SQL,
    JOIN_SQL,
    HOLD_SQL,
];
