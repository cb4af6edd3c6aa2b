//! Handing rows out: the due head of a key, a run of a key's rows, the due heads or runs of
//! many keys; extending leases while work runs; giving leased rows back uncounted.

use crate::tx::Tx;
use std::time::Duration;

use rusqlite::{named_params, Row};

use super::{head_from, head_query, is_leasable, reclaim_expired_in, Head, Lease, Queue};
use crate::clock::ms;
use crate::db::query_all;
use crate::error::{EngineError, Result};

/// Ends a row leased past its attempt limit as dead.
const BURY_EXHAUSTED_SQL: &str =
    "UPDATE queue_rows SET state = 'dead', attempts = :tried, finished_at = :now,
                            reason = :reason, lease_owner = NULL, lease_expires_at = NULL
                     WHERE id = :id AND lease_token = :token";

/// Ends a row leased past its max age as expired.
const EXPIRE_TOO_OLD_SQL: &str =
    "UPDATE queue_rows SET state = 'expired', attempts = :tried, finished_at = :now,
                            reason = 'max age', lease_owner = NULL, lease_expires_at = NULL
                     WHERE id = :id AND lease_token = :token";

/// Pushes one live lease out; fenced.
const EXTEND_SQL: &str = "UPDATE queue_rows SET lease_expires_at = :expires
                 WHERE id = :id AND state = 'leased' AND lease_token = :token";

/// Pushes out this owner's other leases on a key (rows waiting behind a delivery).
const EXTEND_KEY_SQL: &str = "UPDATE queue_rows SET lease_expires_at = :expires
                 WHERE queue = :queue AND key = :key AND state = 'leased' AND lease_owner = :owner";

/// Pushes out every lease this owner holds in the queue.
const EXTEND_OWN_SQL: &str = "UPDATE queue_rows SET lease_expires_at = :expires
                     WHERE queue = :queue AND state = 'leased' AND lease_owner = :owner";

/// Marks a leased row's send started; fenced.
const SEND_STARTED_SQL: &str = "UPDATE queue_rows SET send_started = :now
                 WHERE id = :id AND state = 'leased' AND lease_token = :token";

/// Puts a leased row's send-started mark back as the lease found it; fenced.
const RESTORE_SEND_STARTED_SQL: &str = "UPDATE queue_rows SET send_started = :was
                 WHERE id = :id AND state = 'leased' AND lease_token = :token";

/// Gives a leased row back uncounted, due at `:at`; fenced.
const DEFER_SQL: &str = "UPDATE queue_rows SET state = 'pending', next_attempt_at = :at,
                    attempts = MAX(attempts - 1, 0), lease_owner = NULL, lease_expires_at = NULL
             WHERE id = :id AND state = 'leased' AND lease_token = :token";

/// The due pending rows that head their key, oldest first, but for the keys in `:skip` (a
/// JSON list: paused keys), and those `$written` also asks for. The `+` keeps SQLite off the
/// due index: through it, every due row is checked and sorted before the first is returned (a
/// claim's cost grew with the backlog); through the pending index, rows come in id order and
/// the walk stops at `:limit` heads.
macro_rules! due_heads_sql {
    ($written:literal) => {
        concat!(
            "SELECT r.id FROM queue_rows r
     WHERE r.queue = :queue AND r.state = 'pending' AND +r.next_attempt_at <= :now",
            $written,
            "
       AND r.key NOT IN (SELECT value FROM json_each(:skip))
       AND NOT EXISTS (
         SELECT 1 FROM queue_rows o
         WHERE o.queue = :queue AND o.key = r.key
           AND o.state IN ('pending', 'leased') AND o.id < r.id)
     ORDER BY r.id LIMIT :limit"
        )
    };
}

/// Due pending rows that head their key (see `due_heads_sql!`).
pub const DUE_HEADS_SQL: &str = due_heads_sql!("");

/// `DUE_HEADS_SQL` for rows written in `[:from, :before)`: a restart's backlog, or the rows
/// written since, each with its own budget. Public so a test can pin its plan.
pub const DUE_HEADS_WRITTEN_SQL: &str =
    due_heads_sql!("\n       AND r.created_at >= :from AND r.created_at < :before");

/// Whether any unfinished row was written before `:before`.
const ANY_WRITTEN_BEFORE_SQL: &str = "SELECT EXISTS (SELECT 1 FROM queue_rows
     WHERE queue = :queue AND state IN ('pending', 'leased') AND created_at < :before)";

/// Due pending rows in runs per key (`:skip` is a JSON list of keys to leave out): every row
/// of a key before the key's first row that blocks it (pending but not
/// due, or leased by another owner), oldest first.
pub const DUE_RUNS_SQL: &str = "WITH active AS (
       SELECT id, key, state, next_attempt_at, lease_owner FROM queue_rows
       WHERE queue = :queue AND state IN ('pending', 'leased')
         AND key NOT IN (SELECT value FROM json_each(:skip))
     ), blocked AS (
       SELECT key, MIN(id) AS first FROM active
       WHERE (state = 'pending' AND next_attempt_at > :now)
          OR (state = 'leased' AND lease_owner IS NOT :owner)
       GROUP BY key
     )
     SELECT a.id FROM active a LEFT JOIN blocked b ON b.key = a.key
     WHERE a.state = 'pending' AND (b.first IS NULL OR a.id < b.first)
     ORDER BY a.id LIMIT :limit";

/// The columns a `Lease` is read from, by name.
macro_rules! lease_columns {
    () => {
        "id, key, payload, attempts, lease_token AS token, COALESCE(lease_expires_at, 0) AS expires_at,
         created_at, send_started"
    };
}

/// Leases one row: bumps the attempt count and the fencing token.
/// (Without RETURNING, whose temporary b-tree costs more than reading the row back by id.)
const LEASE_ROW_SQL: &str = "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
            lease_owner = :owner, lease_token = lease_token + 1, lease_expires_at = :expires
     WHERE id = :id";

/// A key's unfinished rows, oldest first: the state that decides
/// whether each may be leased now, then the row as a `Lease` reads it.
const KEY_RUN_SQL: &str = concat!(
    "SELECT state, next_attempt_at, ",
    lease_columns!(),
    " FROM queue_rows WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased')
     ORDER BY id LIMIT :limit"
);

/// Leases the unfinished rows of a key with ids from `:first` to `:last`: `LEASE_ROW_SQL` for a
/// run of rows at once; marked send started at `:started` unless it is NULL. Public so a test
/// can pin its plan.
pub const LEASE_KEY_RANGE_SQL: &str =
    "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
            lease_owner = :owner, lease_token = lease_token + 1, lease_expires_at = :expires,
            send_started = COALESCE(:started, send_started)
     WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased')
       AND id BETWEEN :first AND :last";

/// Reads a row as a `Lease`.
const LEASE_OF_SQL: &str = concat!(
    "SELECT ",
    lease_columns!(),
    " FROM queue_rows WHERE id = :id"
);

/// The names of [`lease_columns!`], in order: [`lease_at`] reads them by position (every
/// lease is read through it, and a lookup by name costs a few percent of the one-session
/// throughput); a test holds the statements to this order.
#[cfg(test)]
const LEASE_COLUMNS: [&str; 8] = [
    "id",
    "key",
    "payload",
    "attempts",
    "token",
    "expires_at",
    "created_at",
    "send_started",
];

/// The lease whose columns (`lease_columns!`, in order) start at column `first`.
fn lease_at(r: &Row<'_>, first: usize) -> rusqlite::Result<Lease> {
    Ok(Lease {
        id: r.get(first)?,
        key: r.get(first + 1)?,
        payload: r.get(first + 2)?,
        attempts: r.get(first + 3)?,
        token: r.get(first + 4)?,
        expires_at: r.get(first + 5)?,
        created_at: r.get(first + 6)?,
        send_started: r.get(first + 7)?,
    })
}

fn lease_from_row(r: &Row<'_>) -> rusqlite::Result<Lease> {
    lease_at(r, 0)
}

/// How leased rows not tried go back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    /// Due at once, uncounted; a send-started mark stays (a message pasted and waiting for its
    /// agent is then looked at, not pasted twice).
    KeepMarks,
    /// As they were leased: a mark set with the lease (a run leased to send) is undone.
    UndoMarks,
}

impl Queue {
    /// Leases the oldest unfinished row of `key` if it is due (or its lease expired);
    /// `None` when the key's head is not due, is leased by someone alive, or there is none.
    pub fn lease_next(&self, key: &str) -> Result<Option<Lease>> {
        self.write(|tx| self.lease_next_in(tx, key))
    }

    /// `lease_next` inside a caller's transaction.
    pub fn lease_next_in(&self, tx: &Tx<'_>, key: &str) -> Result<Option<Lease>> {
        let now = tx.now();
        loop {
            match head_query(tx.sqlite()?, self.name.as_str(), key)? {
                Some((id, state, next, expires)) if is_leasable(&state, next, expires, now) => {
                    let lease = self.lease_row(tx, id)?;
                    if let Some(lease) = self.screen_in(tx, vec![lease])?.pop() {
                        return Ok(Some(lease));
                    } // it ended at the lease: the next row is the head now
                }
                _ => return Ok(None),
            }
        }
    }

    /// Leases `key`'s rows in order, up to `limit`, stopping at the first one that is not due
    /// (or is leased by someone alive): a session worker delivers them one by one and records
    /// their answers together. When the head itself cannot be leased, says when to look again.
    ///
    /// `mark_started`: the rows are about to be sent one after the other without a write
    /// between them, so each is marked send started as it is leased (see
    /// [`mark_send_started_in`](Self::mark_send_started_in)), by the same statement. After a
    /// crash every row of the run not yet recorded counts as a possible repeat, the ones never
    /// sent included: only for channels whose far end tells repeats apart.
    pub fn lease_run_in(
        &self,
        tx: &Tx<'_>,
        key: &str,
        limit: usize,
        mark_started: bool,
    ) -> Result<std::result::Result<Vec<Lease>, Head>> {
        let now = tx.now();
        let started = mark_started.then_some(now);
        let rows: Vec<(String, i64, Lease)> = tx
            .sqlite()?
            .prepare_cached(KEY_RUN_SQL)?
            .query_map(
                named_params! {":queue": self.name, ":key": key, ":limit": limit as i64},
                |r| Ok((r.get(0)?, r.get(1)?, lease_at(r, 2)?)),
            )?
            .collect::<rusqlite::Result<_>>()?;
        let Some((state, next, first)) = rows.first() else {
            return Ok(Err(Head::Empty));
        };
        if !is_leasable(state, *next, Some(first.expires_at), now) {
            return Ok(Err(head_from(state, *next, Some(first.expires_at), now)));
        }
        let expires = now.saturating_add(ms(self.policy().lease_timeout));
        let mut leases: Vec<Lease> = rows
            .into_iter()
            .take_while(|(state, next, l)| is_leasable(state, *next, Some(l.expires_at), now))
            .map(|(_, _, lease)| lease)
            .collect();
        // The run is every unfinished row of the key from its first id to its last: one
        // statement leases them all.
        let (first, last) = (leases[0].id, leases[leases.len() - 1].id);
        let leased = tx
            .sqlite()?
            .prepare_cached(LEASE_KEY_RANGE_SQL)?
            .execute(named_params! {
                ":queue": self.name,
                ":key": key,
                ":owner": &*self.owner,
                ":expires": expires,
                ":first": first,
                ":last": last,
                ":started": started,
            })?;
        if leased != leases.len() {
            return Err(EngineError::Invalid(format!(
                "leasing rows {first}..={last} of key {key} changed {leased} rows, not {}",
                leases.len()
            )));
        }
        for lease in &mut leases {
            lease.attempts += 1;
            lease.token += 1;
            lease.expires_at = expires;
        }
        // Possibly empty, when every row of the run ended at its lease: the caller leases again.
        Ok(Ok(self.screen_in(tx, leases)?))
    }

    /// Leases up to `limit` due rows across keys, only heads of keys, oldest first.
    pub fn lease_due(&self, limit: usize, skip: &[String]) -> Result<Vec<Lease>> {
        self.lease_found(limit, skip, |tx, skip, want| {
            let params = named_params! {
                ":queue": self.name, ":now": tx.now(), ":skip": skip, ":limit": want,
            };
            query_all(tx.sqlite()?, DUE_HEADS_SQL, params, |r| r.get(0))
        })
    }

    /// `lease_due` for rows written in `written` (unix ms, `from..before`): a restart's backlog
    /// and the live rows get separate budgets.
    pub fn lease_due_written(
        &self,
        limit: usize,
        written: std::ops::Range<i64>,
        skip: &[String],
    ) -> Result<Vec<Lease>> {
        self.lease_found(limit, skip, |tx, skip, want| {
            let params = named_params! {
                ":queue": self.name, ":now": tx.now(), ":from": written.start,
                ":before": written.end, ":skip": skip, ":limit": want,
            };
            query_all(tx.sqlite()?, DUE_HEADS_WRITTEN_SQL, params, |r| r.get(0))
        })
    }

    /// Whether any unfinished row was written before `before` (unix ms): a backlog is left.
    pub fn any_written_before(&self, before: i64) -> Result<bool> {
        let conn = self.db.read()?;
        let params = named_params! {":queue": self.name, ":before": before};
        let any = conn
            .prepare_cached(ANY_WRITTEN_BEFORE_SQL)?
            .query_row(params, |r| r.get(0))?;
        Ok(any)
    }

    /// Leases up to `limit` due rows, oldest first, several per key: a key's rows are taken in
    /// order up to the first one that is not due or is leased by another owner, so a worker that
    /// holds a key's leases may buffer and process them in order. Keys in `skip` are left alone
    /// (their worker is full).
    pub fn lease_runs(&self, limit: usize, skip: &[String]) -> Result<Vec<Lease>> {
        self.lease_found(limit, skip, |tx, skip, want| {
            let params = named_params! {
                ":queue": self.name, ":now": tx.now(), ":owner": &*self.owner, ":skip": skip,
                ":limit": want,
            };
            query_all(tx.sqlite()?, DUE_RUNS_SQL, params, |r| r.get(0))
        })
    }

    /// One claim: expired leases are reclaimed, then up to `limit` of the rows `find` names
    /// (given the `:skip` list and how many are wanted) are leased, in one transaction.
    fn lease_found(
        &self,
        limit: usize,
        skip: &[String],
        find: impl Fn(&Tx<'_>, &str, i64) -> Result<Vec<i64>>,
    ) -> Result<Vec<Lease>> {
        let skip = skip_list(skip);
        self.write(|tx| {
            reclaim_expired_in(tx)?;
            self.lease_ids_in(tx, limit, |want| find(tx, &skip, want as i64))
        })
    }

    /// Leases the rows `find(n)` names (up to n due rows), screens them, and asks again while
    /// rows ended at their lease made room: the rows behind them may be due now.
    fn lease_ids_in(
        &self,
        tx: &Tx<'_>,
        limit: usize,
        find: impl Fn(usize) -> Result<Vec<i64>>,
    ) -> Result<Vec<Lease>> {
        let mut leases = Vec::new();
        loop {
            let want = limit - leases.len();
            let ids = find(want)?;
            let found = ids.len();
            let leased = ids
                .into_iter()
                .map(|id| self.lease_row(tx, id))
                .collect::<Result<Vec<_>>>()?;
            let kept = self.screen_in(tx, leased)?;
            let ended = found - kept.len();
            leases.extend(kept);
            if ended == 0 || found < want || leases.len() >= limit {
                return Ok(leases);
            }
        }
    }

    /// Ends, inside the leasing transaction, the leased rows that must not be tried again: a
    /// row past its attempt limit (killed during its last attempt, or the limit was lowered)
    /// goes dead, a row past `max_age` is expired. The limits are checked here, at every lease,
    /// not only when a failure is recorded or at a sweep. Returns the rows that may be tried.
    fn screen_in(&self, tx: &Tx<'_>, leases: Vec<Lease>) -> Result<Vec<Lease>> {
        let now = tx.now();
        let policy = self.policy();
        let too_old = |l: &Lease| {
            policy
                .expires_after()
                .is_some_and(|age| l.created_at < now.saturating_sub(ms(age)))
        };
        let mut kept = Vec::with_capacity(leases.len());
        for lease in leases {
            // `attempts` counts this lease: the row was tried `attempts - 1` times before.
            let tried = lease.attempts.saturating_sub(1);
            // Logged here, as the sweep's expiries are: `status` counts them, the log says why.
            if policy.exhausted(tried) {
                let max = policy.max_attempts.unwrap_or_default();
                tracing::warn!(queue = %self.name, row = lease.id, key = %lease.key.escape_debug(), tried, max_attempts = max,
                    "dead when leased: it was already tried max_attempts times");
                tx.sqlite()?
                    .prepare_cached(BURY_EXHAUSTED_SQL)?
                    .execute(named_params! {
                        ":id": lease.id,
                        ":token": lease.token,
                        ":tried": tried,
                        ":now": now,
                        ":reason": format!("gave up after {tried} attempts (max_attempts = {max})"),
                    })?;
            } else if too_old(&lease) {
                let age = std::time::Duration::from_millis(
                    now.saturating_sub(lease.created_at).max(0) as u64,
                );
                tracing::warn!(queue = %self.name, row = lease.id, key = %lease.key.escape_debug(), age = ?age,
                    max_age = ?policy.expires_after().unwrap_or_default(), "expired when leased: older than max_age");
                tx.sqlite()?.prepare_cached(EXPIRE_TOO_OLD_SQL)?
                .execute(named_params! {":id": lease.id, ":token": lease.token, ":tried": tried, ":now": now})?;
            } else {
                kept.push(lease);
            }
        }
        Ok(kept)
    }

    fn lease_row(&self, tx: &Tx<'_>, id: i64) -> Result<Lease> {
        let now = tx.now();
        let expires = now.saturating_add(ms(self.policy().lease_timeout));
        tx.sqlite()?
            .prepare_cached(LEASE_ROW_SQL)?
            .execute(named_params! {":id": id, ":owner": &*self.owner, ":expires": expires})?;
        Ok(tx
            .sqlite()?
            .prepare_cached(LEASE_OF_SQL)?
            .query_row(named_params! {":id": id}, lease_from_row)?)
    }

    #[cfg(any(test, feature = "test-helpers"))]
    /// Pushes a live lease's expiry out by the lease timeout. False if the token is stale.
    pub fn extend(&self, id: i64, token: i64) -> Result<bool> {
        self.write(|tx| self.extend_in(tx, id, token))
    }

    /// `extend` inside a caller's transaction.
    pub fn extend_in(&self, tx: &Tx<'_>, id: i64, token: i64) -> Result<bool> {
        let now = tx.now();
        let expires = now.saturating_add(ms(self.policy().lease_timeout));
        let n = tx
            .sqlite()?
            .prepare_cached(EXTEND_SQL)?
            .execute(named_params! {":id": id, ":token": token, ":expires": expires})?;
        Ok(n == 1)
    }

    /// Pushes out the expiry of every lease this process holds on `key` (a session worker's
    /// leased rows that wait behind the one being delivered).
    pub fn extend_key_in(&self, tx: &Tx<'_>, key: &str) -> Result<usize> {
        let now = tx.now();
        let expires = now.saturating_add(ms(self.policy().lease_timeout));
        Ok(tx.sqlite()?
            .prepare_cached(EXTEND_KEY_SQL)?
            .execute(named_params! {":queue": self.name, ":key": key, ":owner": &*self.owner, ":expires": expires})?)
    }

    /// Pushes out the expiry of every lease this process holds in this queue (rows waiting in
    /// a worker's buffer). Returns how many.
    pub fn extend_own(&self) -> Result<usize> {
        let expires = self.now().saturating_add(ms(self.policy().lease_timeout));
        self.db.write(|tx| {
            Ok(tx.prepare_cached(EXTEND_OWN_SQL)?.execute(
                named_params! {":queue": self.name, ":owner": &*self.owner, ":expires": expires},
            )?)
        })
    }

    #[cfg(any(test, feature = "test-helpers"))]
    /// Gives a leased row back, due after `delay`, without counting the attempt: the worker had
    /// no room for it or must not run it yet. False if the token is stale.
    pub fn defer(&self, lease: &Lease, delay: Duration) -> Result<bool> {
        Ok(self.defer_many(std::slice::from_ref(lease), delay)? == 1)
    }

    /// `defer` for many rows in one transaction. Returns how many were still ours.
    pub fn defer_many(&self, leases: &[Lease], delay: Duration) -> Result<usize> {
        if leases.is_empty() {
            return Ok(0);
        }
        self.write(|tx| self.give_back_in(tx, leases, delay, GiveBack::KeepMarks))
    }

    /// Marks a leased row's send started, just before a platform call that is not safe to
    /// repeat blindly: if no answer is recorded (a crash, no reply), the row's next lease
    /// carries the mark (`Lease::send_started`) and its channel reconciles it. Any recorded
    /// answer except an unknown outcome clears it. False if the token is stale.
    pub fn mark_send_started_in(&self, tx: &Tx<'_>, lease: &Lease) -> Result<bool> {
        let now = tx.now();
        let n = tx
            .sqlite()?
            .prepare_cached(SEND_STARTED_SQL)?
            .execute(named_params! {":id": lease.id, ":token": lease.token, ":now": now})?;
        Ok(n == 1)
    }

    /// Undoes [`mark_send_started_in`](Self::mark_send_started_in) for a row marked but not
    /// sent after all: the mark is what the lease found (an earlier unknown outcome's, or
    /// none). False if the token is stale.
    pub fn restore_send_started_in(&self, tx: &Tx<'_>, lease: &Lease) -> Result<bool> {
        let n = tx
            .sqlite()?
            .prepare_cached(RESTORE_SEND_STARTED_SQL)?
            .execute(
                named_params! {":id": lease.id, ":token": lease.token, ":was": lease.send_started},
            )?;
        Ok(n == 1)
    }

    /// Gives leased rows back unsent, inside a caller's transaction: each row deferred by
    /// `delay`, uncounted, its send-started mark kept or undone as `marks` says. Returns how
    /// many were still ours.
    pub fn give_back_in(
        &self,
        tx: &Tx<'_>,
        leases: &[Lease],
        delay: Duration,
        marks: GiveBack,
    ) -> Result<usize> {
        let now = tx.now();
        if marks == GiveBack::UndoMarks {
            for lease in leases {
                self.restore_send_started_in(tx, lease)?;
            }
        }
        let at = now.saturating_add(ms(delay));
        let mut stmt = tx.sqlite()?.prepare_cached(DEFER_SQL)?;
        let mut n = 0;
        for lease in leases {
            n += stmt.execute(named_params! {":id": lease.id, ":token": lease.token, ":at": at})?;
        }
        Ok(n)
    }
}

/// Keys to leave out of a claim, as the `:skip` JSON list the statements read.
fn skip_list(keys: &[String]) -> String {
    serde_json::to_string(keys).expect("a list of strings serialises")
}

/// Every statement of this file, for the test that prepares them all.
#[cfg(test)]
pub(super) const STATEMENTS: &[&str] = &[
    DUE_HEADS_WRITTEN_SQL,
    ANY_WRITTEN_BEFORE_SQL,
    BURY_EXHAUSTED_SQL,
    EXPIRE_TOO_OLD_SQL,
    EXTEND_SQL,
    EXTEND_KEY_SQL,
    EXTEND_OWN_SQL,
    DEFER_SQL,
    SEND_STARTED_SQL,
    RESTORE_SEND_STARTED_SQL,
    DUE_HEADS_SQL,
    DUE_RUNS_SQL,
    LEASE_ROW_SQL,
    KEY_RUN_SQL,
    LEASE_KEY_RANGE_SQL,
    LEASE_OF_SQL,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// `lease_at` reads by position: each statement it reads must list the lease's columns
    /// in `LEASE_COLUMNS`' order, from the column it is told.
    #[test]
    fn the_lease_statements_list_the_lease_columns_in_order() {
        let (_dir, db) = crate::db::temp_database();
        let conn = db.read().unwrap();
        for (sql, first) in [(LEASE_OF_SQL, 0), (KEY_RUN_SQL, 2)] {
            let stmt = conn.prepare(sql).unwrap();
            let names = stmt.column_names();
            assert_eq!(
                names[first..first + LEASE_COLUMNS.len()],
                LEASE_COLUMNS,
                "{sql}"
            );
        }
        let stmt = conn.prepare(KEY_RUN_SQL).unwrap();
        assert_eq!(stmt.column_names()[..2], ["state", "next_attempt_at"]);
    }
}
