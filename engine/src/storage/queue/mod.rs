//! The `queue_rows` table: every statement that touches it lives here.
//!
//! A row is `pending` until leased; a lease (owner, token, expiry) makes it `leased`; the lease
//! holder completes it (`delivered`), schedules a retry (`pending` again with a later
//! `next_attempt_at`) or buries it (`dead`). Each of those is fenced by the lease token, which
//! every lease bumps, so the late answer of an owner whose lease was taken over changes nothing.
//! Within a key, a row is leased only when every older row of the key is terminal (strict FIFO).
//!
//! The statements are grouped by what they do, one file each: [`enqueue`] writes rows,
//! [`lease`] hands them out (and extends or gives back leases), [`answer`] records what became
//! of a leased row, [`upkeep`] expires, reclaims, prunes and revives, [`read`] looks.

mod answer;
mod enqueue;
mod lease;
mod read;
mod upkeep;

use crate::storage::tx::Tx;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::params;
use crate::storage::sql::{Executor, Query, Sql};

use crate::error::Result;
use crate::storage::clock::Clock;
use crate::storage::db::Database;
use crate::storage::policy::QueuePolicy;

/// Moves a leased row to a terminal state; fenced.
const FINISH_SQL: Sql = Sql::same("UPDATE queue_rows SET state = :state, finished_at = :now, reason = :reason,
                    last_error = COALESCE(:error, last_error), lease_owner = NULL, lease_expires_at = NULL
             WHERE id = :id AND state = 'leased' AND lease_token = :token");

pub(crate) use crate::storage::row::enqueue_ahead_in;
pub use answer::{DELIVERED_ALL_SQL, DELIVERED_HELD_SQL};
pub use lease::{
    GiveBack, DUE_HEADS_SQL, DUE_HEADS_WRITTEN_SQL, DUE_RUNS_SQL, KEY_RUN_SQL, LEASE_KEY_RANGE_SQL,
};
pub(crate) use read::lanes;
pub(crate) use read::{
    counts, dead_page, dead_rows, delivered_after, oldest_pending, row_detail, stuck_heads,
};
pub use read::{
    DeadQuery, Lane, OldestPending, RowDetail, RowState, StateCount, SUBMITTED, THROTTLED,
    UNREACHABLE,
};
pub use upkeep::PRUNE_SQL;
pub(crate) use upkeep::{
    purge_dead_in, reclaim_expired_in, reclaim_foreign_in, reclaim_in, revive_dead_in,
};

pub use crate::storage::row::{Enqueued, NewRow, QueueName};

/// A leased row: what the holder needs to do the work and to answer for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub id: i64,
    pub key: String,
    pub payload: String,
    /// Attempts including this one.
    pub attempts: u32,
    pub token: i64,
    pub expires_at: i64,
    pub created_at: i64,
    /// When an earlier send of this row started and got no answer (unix ms): it may have
    /// reached the far end (see [`Queue::mark_send_started_in`]).
    pub send_started: Option<i64>,
    /// Set on each row of a run held by its first row (see [`Queue::lease_held_run_in`]): the
    /// database leases only the row the run is at, and the rest are this lease's until the
    /// run is recorded or released.
    pub run: Option<HeldRun>,
}

/// A run of a key's rows held by the one of them that is leased (see
/// [`Queue::lease_held_run_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldRun {
    /// The run's last row.
    pub through: i64,
    /// When the run was leased: each row's send-started mark once it is leased itself.
    pub started: i64,
}

/// What the far end said when it took a row, kept with the delivered row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Receipt {
    /// The platform's id for the message it made (a Telegram `message_id`, a Slack `ts`).
    pub message_id: Option<String>,
    /// How long the send took.
    pub took: Option<Duration>,
}

/// What a retry request turned into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retried {
    /// Pending again, due at this time (unix ms).
    Scheduled { at: i64 },
    /// The attempt limit was reached: the row is dead.
    Dead,
    /// The lease token is no longer current: nothing changed.
    Stale,
}

/// The state of a key's oldest unfinished row: tells a session worker when to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// Nothing pending or leased for this key.
    Empty,
    /// The head can be leased now.
    Due,
    /// The head is pending until this time.
    NotBefore(i64),
    /// The head is leased until this time.
    LeasedUntil(i64),
}

/// A handle on one queue: the engine's operations under this queue's policy.
#[derive(Debug, Clone)]
pub struct Queue {
    db: Database,
    clock: Arc<dyn Clock>,
    owner: Arc<str>,
    name: QueueName,
    /// Shared by every clone of this handle, so a reload reaches them all.
    policy: Arc<RwLock<Arc<QueuePolicy>>>,
}

/// The oldest unfinished row of a key. Public so a test can pin its plan.
pub const HEAD_SQL: Sql = Sql::same(
    "SELECT id, state, next_attempt_at, lease_expires_at FROM queue_rows
     WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased')
     ORDER BY id LIMIT 1",
);

impl Queue {
    pub(crate) fn new(
        db: Database,
        clock: Arc<dyn Clock>,
        owner: Arc<str>,
        name: QueueName,
        policy: QueuePolicy,
    ) -> Self {
        Queue {
            db,
            clock,
            owner,
            name,
            policy: Arc::new(RwLock::new(Arc::new(policy))),
        }
    }

    pub fn name(&self) -> QueueName {
        self.name
    }

    /// Whether its rows may be written ahead, several in one statement (see
    /// [`RowAhead`](crate::storage::commit::RowAhead)): not when a depth limit needs each counted first.
    pub fn writes_ahead(&self) -> bool {
        let policy = self.policy();
        policy.max_depth.is_none() && policy.max_key_depth.is_none()
    }

    /// The queue's current policy.
    pub fn policy(&self) -> Arc<QueuePolicy> {
        self.policy.read().expect("policy lock").clone()
    }

    /// Replaces the policy for every clone of this handle (a config reload): rows leased from
    /// now on follow it.
    pub fn set_policy(&self, policy: QueuePolicy) {
        *self.policy.write().expect("policy lock") = Arc::new(policy);
    }

    /// The instance id written as lease owner.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Runs `f` in a write transaction of its own, made now: the one-shot form of every
    /// `*_in` operation.
    pub fn write<T>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        self.db.write(f)
    }
}

type HeadRow = (i64, String, i64, Option<i64>);

fn head_query(db: &dyn Executor, queue: QueueName, key: &str) -> Result<Option<HeadRow>> {
    db.query_opt(&HEAD_SQL, params![":queue" => queue, ":key" => key], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })
}

/// What an unfinished head row's state means for its key's worker.
fn head_from(state: &str, next_attempt_at: i64, lease_expires_at: Option<i64>, now: i64) -> Head {
    if is_leasable(state, next_attempt_at, lease_expires_at, now) {
        Head::Due
    } else if state == "leased" {
        Head::LeasedUntil(lease_expires_at.unwrap_or(now))
    } else {
        Head::NotBefore(next_attempt_at)
    }
}

fn is_leasable(state: &str, next_attempt_at: i64, lease_expires_at: Option<i64>, now: i64) -> bool {
    match state {
        "pending" => next_attempt_at <= now,
        "leased" => lease_expires_at.is_some_and(|t| t <= now),
        _ => false,
    }
}

/// Moves a leased row to a terminal state if `token` is still its lease token.
fn finish_in(
    tx: &Tx<'_>,
    id: i64,
    token: i64,
    state: &str,
    reason: Option<&str>,
    error: Option<&str>,
) -> Result<bool> {
    let now = tx.now();
    let n = tx.exec(
        &FINISH_SQL,
        params![
            ":id" => id, ":token" => token, ":state" => state, ":now" => now,
            ":reason" => reason, ":error" => error,
        ],
    )?;
    Ok(n == 1)
}

/// `:ids` as a JSON list of row ids, or NULL for every dead row.
fn id_filter(ids: Option<&[i64]>) -> Option<String> {
    ids.map(|ids| serde_json::to_string(ids).expect("a list of ids serialises"))
}

/// Every statement of this file, for the test that prepares them all.
#[cfg(test)]
pub(super) const STATEMENTS: &[Sql] = &[FINISH_SQL, HEAD_SQL];

/// What the queue's tests on both backends share.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Enqueued, Lease, NewRow, Queue};
    use crate::storage::test_db::TestDb;
    use crate::{Engine, QueueName, QueuePolicy, SystemClock};

    /// An outbound queue handle whose statements run on whatever transaction they are given
    /// (its own database, SQLite, is left alone).
    pub fn handle() -> (tempfile::TempDir, Queue) {
        let (dir, sqlite) = crate::storage::db::temp_database();
        let engine = Engine::with_clock(sqlite, std::sync::Arc::new(SystemClock));
        (
            dir,
            engine.queue(QueueName::Outbound, QueuePolicy::outbound()),
        )
    }

    /// Runs `test` on a fresh SQLite database, then on a fresh PostgreSQL one.
    pub fn on_both(test: impl Fn(&TestDb, &Queue)) {
        let (_dir, q) = handle();
        for db in TestDb::both() {
            test(&db, &q);
        }
    }

    pub fn row(key: &str, payload: &str) -> NewRow {
        NewRow {
            key: key.into(),
            payload: payload.into(),
            dedup_key: None,
        }
    }

    /// Writes a row for `key` at 1 000.
    pub fn put(db: &TestDb, q: &Queue, key: &str, payload: &str) -> Enqueued {
        db.write_at(1_000, |tx| q.enqueue_in(tx, &row(key, payload)))
            .unwrap()
    }

    /// Two rows on key `k` (payloads `a`, `b`), then one on `other` (`c`), written at 1 000.
    pub fn two_on_k_and_one_on(db: &TestDb, q: &Queue, other: &str) -> [Enqueued; 3] {
        [
            put(db, q, "k", "a"),
            put(db, q, "k", "b"),
            put(db, q, other, "c"),
        ]
    }

    /// Leases `key`'s head at `now`; there must be one to lease.
    pub fn lease(db: &TestDb, q: &Queue, key: &str, now: i64) -> Lease {
        let lease = db.write_at(now, |tx| q.lease_next_in(tx, key)).unwrap();
        lease.unwrap_or_else(|| panic!("{}: nothing to lease on {key}", db.name()))
    }
}

#[cfg(test)]
mod tests {
    /// Every statement on `queue_rows`, prepared against a database migrated to the latest
    /// schema: a column renamed by a migration, or a typo in a rarely run statement, fails here
    /// and not in production.
    fn all_statements() -> Vec<crate::storage::sql::Sql> {
        [
            super::STATEMENTS,
            super::enqueue::STATEMENTS,
            super::lease::STATEMENTS,
            super::answer::STATEMENTS,
            super::upkeep::STATEMENTS,
            super::read::STATEMENTS,
            crate::storage::nodes::STATEMENTS,
            crate::storage::source_leases::STATEMENTS,
            crate::storage::budgets::STATEMENTS,
            crate::storage::progress::STATEMENTS,
            crate::storage::albums::STATEMENTS,
            crate::storage::access::STATEMENTS,
        ]
        .concat()
    }

    /// On PostgreSQL, preparing also decides each parameter's type: a parameter it cannot
    /// type (a bare `:x IS NULL`), or a function SQLite has and it has not, fails here too.
    #[test]
    fn every_statement_prepares_against_a_migrated_database() {
        let all = all_statements();
        assert!(all.len() >= 30, "only {} statements listed", all.len());
        for db in crate::storage::test_db::TestDb::both() {
            for sql in &all {
                if let Err(e) = db.prepare(sql) {
                    panic!("{}: {e}\nin: {sql:?}", db.name());
                }
            }
        }
    }

    /// A statement kept prepared is not parsed and planned again when it runs with new values.
    /// SQLite does that to a statement whose plan read a bound value (`LIMIT :limit`, STAT4)
    /// unless the connection asks for stable plans: it cost a quarter of the writer's time.
    #[test]
    fn no_statement_is_prepared_again_when_run_with_new_values() {
        let (_dir, db) = crate::storage::sqlite::db::temp_sqlite();
        db.write(|tx| {
            for sql in all_statements() {
                let sql = sql.sqlite;
                let mut stmt = tx.prepare(sql)?;
                for value in [1i64, 2] {
                    for i in 1..=stmt.parameter_count() {
                        stmt.raw_bind_parameter(i, value)?;
                    }
                    // Errors (a constraint the dummy values break) come after the re-plan.
                    let mut rows = stmt.raw_query();
                    while let Ok(Some(_)) = rows.next() {}
                }
                let again = stmt.get_status(rusqlite::StatementStatus::RePrepare);
                assert_eq!(again, 0, "prepared again at each run: {sql}");
            }
            Ok(())
        })
        .unwrap();
    }
}
