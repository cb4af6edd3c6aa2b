//! Handing rows out: the due head of a key, a run of a key's rows, the due heads or runs of
//! many keys; extending leases while work runs; giving leased rows back uncounted.

use std::time::Duration;

use super::{
    head_from, head_query, is_leasable, reclaim_expired_in, Head, HeldRun, Lease, Queue, QueueName,
};
use crate::error::{EngineError, Result};
use crate::params;
use crate::storage::clock::ms;
use crate::storage::sql::{Query, Row, Sql};
use crate::storage::tx::Tx;

/// Ends a row leased past its attempt limit as dead.
const BURY_EXHAUSTED_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'dead', attempts = :tried, finished_at = :now,
                            reason = :reason, lease_owner = NULL, lease_expires_at = NULL
                     WHERE id = :id AND lease_token = :token",
);

/// Ends a row leased past its max age as expired.
const EXPIRE_TOO_OLD_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'expired', attempts = :tried, finished_at = :now,
                            reason = 'max age', lease_owner = NULL, lease_expires_at = NULL
                     WHERE id = :id AND lease_token = :token",
);

/// Pushes one live lease out; fenced.
const EXTEND_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET lease_expires_at = :expires
                 WHERE id = :id AND state = 'leased' AND lease_token = :token",
);

/// A leased row's message, rewritten by its lease's holder (its files fetched: the prompt).
const REWRITE_LEASED_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET payload = :payload
                 WHERE id = :id AND state = 'leased' AND lease_token = :token",
);

/// Pushes out this owner's other leases on a key (rows waiting behind a delivery).
const EXTEND_KEY_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET lease_expires_at = :expires
                 WHERE queue = :queue AND key = :key AND state = 'leased' AND lease_owner = :owner",
);

/// Pushes out every lease this owner holds in the queue.
const EXTEND_OWN_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET lease_expires_at = :expires
                     WHERE queue = :queue AND state = 'leased' AND lease_owner = :owner",
);

/// Marks a leased row's send started; fenced.
const SEND_STARTED_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET send_started = :now
                 WHERE id = :id AND state = 'leased' AND lease_token = :token",
);

/// Puts a leased row's send-started mark back as the lease found it; fenced.
const RESTORE_SEND_STARTED_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET send_started = :was
                 WHERE id = :id AND state = 'leased' AND lease_token = :token",
);

/// Gives a leased row back uncounted, due at `:at`; fenced. (`$max` is the dialect's larger
/// of two values.)
macro_rules! defer_sql {
    ($max:literal) => {
        concat!(
            "UPDATE queue_rows SET state = 'pending', next_attempt_at = :at,
                    attempts = ",
            $max,
            "(attempts - 1, 0), lease_owner = NULL, lease_expires_at = NULL
             WHERE id = :id AND state = 'leased' AND lease_token = :token"
        )
    };
}
const DEFER_SQL: Sql = Sql::two(defer_sql!("MAX"), defer_sql!("GREATEST"));

/// The keys of the `:skip` JSON list, in each dialect.
macro_rules! skip_keys {
    (sqlite) => {
        "SELECT value FROM json_each(:skip)"
    };
    (postgres) => {
        "SELECT jsonb_array_elements_text(CAST(CAST(:skip AS TEXT) AS jsonb))"
    };
}

/// How many of the oldest pending rows SQLite's claim walks before it jumps from key to key.
macro_rules! heads_window {
    () => {
        "256"
    };
}

/// The due pending rows that head their key, oldest first, but for the keys in `:skip` (a
/// JSON list: paused keys), and those `$written` also asks for.
///
/// SQLite first walks the 256 oldest pending rows (through the pending index, in id order) and
/// keeps each that no unfinished row of its key comes before.
/// That answer is exact when the window held every pending row or gave `:limit` heads (a head
/// outside it is younger than every head in it); otherwise (a backlog behind a few busy keys)
/// it jumps from key to key as PostgreSQL does. The walk alone read every pending row whenever
/// fewer keys were free than asked for: 55 ms a claim behind 30 000 rows to 5 destinations, and
/// a drain that slowed as its backlog grew (29 000 rows/s at 5 000 rows, 10 000 at 60 000); the
/// jump alone probes every key, 30 ms a claim with 10 000 sessions free.
///
/// (The first ids apart, `CROSS JOIN` and `+` keep SQLite's planner to that order: it read the
/// keys' heads out of every due row, through the due index, once the statistics were taken.)
///
/// PostgreSQL jumps from key to key through the active-rows index (a recursive query: one
/// probe per key with unfinished rows) and keeps the keys whose first unfinished row is due.
/// The walk read every pending row of a backlog whenever fewer keys were free than it asked for
/// (a drain to 5 destinations, each running: 18 ms and 3 300 blocks a claim, a third of the
/// drain's time on the server). Its cost is a probe per key with unfinished rows, whatever
/// `:limit`: thousands of such sessions make each claim read thousands of index entries. No
/// anti-join either, so no plan that stale statistics could turn into a scan per row.
macro_rules! due_heads_sql {
    ($written:expr, sqlite) => {
        concat!(
            "WITH RECURSIVE
     win AS (SELECT id, key, next_attempt_at, created_at FROM queue_rows
              WHERE queue = :queue AND state = 'pending' ORDER BY id LIMIT ",
            heads_window!(),
            "),
     walked AS (SELECT r.id, r.key FROM win r
       WHERE r.next_attempt_at <= :now",
            $written,
            "
         AND r.key NOT IN (",
            skip_keys!(sqlite),
            ")
         AND NOT EXISTS (
           SELECT 1 FROM queue_rows o
           WHERE o.queue = :queue AND o.key = r.key
             AND o.state IN ('pending', 'leased') AND o.id < r.id)
       ORDER BY r.id LIMIT :limit),
     exact(yes) AS (SELECT (SELECT COUNT(*) FROM win) < ",
            heads_window!(),
            " OR (SELECT COUNT(*) FROM walked) >= :limit),
     keys(key) AS (
       SELECT (SELECT f.key FROM queue_rows f
                WHERE f.queue = :queue AND f.state IN ('pending', 'leased')
                ORDER BY f.key LIMIT 1)
        WHERE NOT (SELECT yes FROM exact)
       UNION ALL
       SELECT (SELECT f.key FROM queue_rows f
                WHERE f.queue = :queue AND f.state IN ('pending', 'leased') AND f.key > k.key
                ORDER BY f.key LIMIT 1)
         FROM keys k WHERE k.key IS NOT NULL),
     firsts(id) AS (SELECT (SELECT f.id FROM queue_rows f
          WHERE f.queue = :queue AND f.key = k.key AND f.state IN ('pending', 'leased')
          ORDER BY f.key, f.id LIMIT 1) FROM keys k WHERE k.key IS NOT NULL),
     jumped AS (SELECT r.id, r.key FROM firsts h CROSS JOIN queue_rows r ON r.id = h.id
       WHERE +r.state = 'pending' AND +r.next_attempt_at <= :now",
            $written,
            "
         AND r.key NOT IN (",
            skip_keys!(sqlite),
            "))
     SELECT id, key FROM walked WHERE (SELECT yes FROM exact)
     UNION ALL SELECT id, key FROM jumped
     ORDER BY id LIMIT :limit"
        )
    };
    ($written:expr, postgres) => {
        concat!(
            "WITH RECURSIVE firsts AS (
       (SELECT f.key, f.id, f.state, f.next_attempt_at, f.created_at FROM queue_rows f
         WHERE f.queue = :queue AND f.state IN ('pending', 'leased')
         ORDER BY f.key, f.id LIMIT 1)
       UNION ALL
       SELECT n.* FROM firsts p CROSS JOIN LATERAL (
         SELECT f.key, f.id, f.state, f.next_attempt_at, f.created_at FROM queue_rows f
          WHERE f.queue = :queue AND f.state IN ('pending', 'leased') AND f.key > p.key
          ORDER BY f.key, f.id LIMIT 1) n
     )
     SELECT r.id, r.key FROM firsts r
     WHERE r.state = 'pending' AND r.next_attempt_at <= :now",
            $written,
            "
       AND r.key NOT IN (",
            skip_keys!(postgres),
            ")
     ORDER BY r.id LIMIT :limit"
        )
    };
}

/// Due pending rows that head their key (see `due_heads_sql!`). Public so a test can pin its
/// plan.
pub const DUE_HEADS_SQL: Sql = Sql::two(due_heads_sql!("", sqlite), due_heads_sql!("", postgres));

/// The rows `DUE_HEADS_SQL` chooses among, written in `[:from, :before)`: a restart's backlog,
/// or the rows written since, each with its own budget.
macro_rules! written_between {
    () => {
        "\n       AND r.created_at >= :from AND r.created_at < :before"
    };
}

/// `DUE_HEADS_SQL` for rows written in `[:from, :before)`. Public so a test can pin its plan.
pub const DUE_HEADS_WRITTEN_SQL: Sql = Sql::two(
    due_heads_sql!(written_between!(), sqlite),
    due_heads_sql!(written_between!(), postgres),
);

/// Whether any unfinished row was written before `:before`.
const ANY_WRITTEN_BEFORE_SQL: Sql = Sql::same(
    "SELECT EXISTS (SELECT 1 FROM queue_rows
     WHERE queue = :queue AND state IN ('pending', 'leased') AND created_at < :before)",
);

/// Due pending rows in runs per key (`:skip` is a JSON list of keys to leave out): every row
/// of a key before the key's first row that blocks it (pending but not due, leased by another
/// owner, or holding a run: its rows are its lease's), oldest first.
macro_rules! due_runs_sql {
    ($dialect:tt) => {
        concat!(
            "WITH active AS (
       SELECT id, key, state, next_attempt_at, lease_owner, run_through FROM queue_rows
       WHERE queue = :queue AND state IN ('pending', 'leased')
         AND key NOT IN (",
            skip_keys!($dialect),
            ")
     ), blocked AS (
       SELECT key, MIN(id) AS first FROM active
       WHERE (state = 'pending' AND next_attempt_at > :now)
          OR (state = 'leased' AND lease_owner IS DISTINCT FROM :owner)
          OR (state = 'leased' AND run_through IS NOT NULL)
       GROUP BY key
     )
     SELECT a.id, a.key FROM active a LEFT JOIN blocked b ON b.key = a.key
     WHERE a.state = 'pending' AND (b.first IS NULL OR a.id < b.first)
     ORDER BY a.id LIMIT :limit"
        )
    };
}
pub const DUE_RUNS_SQL: Sql = Sql::two(due_runs_sql!(sqlite), due_runs_sql!(postgres));

/// Whether this transaction may lease rows of `:queue`/`:key` now: on PostgreSQL a lock of
/// the key for the rest of the transaction, taken only if no other transaction holds it. Two
/// daemons' writes each leasing several keys (a group commit leases the next run of every
/// session it records) took the keys' rows in opposite orders and deadlocked (each a 1 s stall,
/// 116 in 25 minutes, three in a row enough to lose a lease); now a key another transaction is
/// leasing is left to it at once, and nothing waits for a lease. (SQLite has one writer: the
/// statement is never run there.)
const CLAIM_KEY_SQL: Sql = Sql::two(
    "SELECT 1",
    "SELECT CASE WHEN pg_try_advisory_xact_lock(hashtextextended(
                CAST(:queue AS TEXT) || '/' || CAST(:key AS TEXT), 0)) THEN CAST(1 AS BIGINT) ELSE 0 END",
);

/// How soon a key another transaction was leasing is looked at again.
const KEY_BUSY_MS: i64 = 200;

/// The columns a `Lease` is read from, by name.
macro_rules! lease_columns {
    () => {
        "id, key, payload, attempts, lease_token AS token, COALESCE(lease_expires_at, 0) AS expires_at,
         created_at, send_started"
    };
}

/// Leases one row: bumps the attempt count and the fencing token, if the row may still be
/// leased. Another daemon may have leased it since it was found (PostgreSQL, several
/// daemons): the update then waits for that daemon's commit, reads the row again and changes
/// nothing. On SQLite, one writer, the condition always holds.
/// (Without RETURNING, whose temporary b-tree costs SQLite more than reading the row back.)
const LEASE_ROW_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
            lease_owner = :owner, lease_token = lease_token + 1, lease_expires_at = :expires,
            run_through = NULL
     WHERE id = :id
       AND (state = 'pending'
            OR (state = 'leased' AND lease_expires_at <= :now AND run_through IS NULL))",
);

/// A key's unfinished rows, oldest first: the state that decides
/// whether each may be leased now, then the row as a `Lease` reads it.
///
/// On PostgreSQL the key is asked for as a range of one value, in the order of the index of
/// active rows (`key >= :key AND key <= :key ORDER BY key, id`), which only that index
/// gives. Asked for plainly, a key that held most of the table's rows when the statistics
/// were taken (one busy session) was read through the primary key in id order, every
/// delivered row of the key before its first active one filtered out: 30 000 blocks to lease
/// a run of 64 behind 15 000 delivered rows. Public so a test can pin its plan.
pub const KEY_RUN_SQL: Sql = Sql::two(
    concat!(
        "SELECT state, next_attempt_at, run_through, ",
        lease_columns!(),
        " FROM queue_rows WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased')
     ORDER BY id LIMIT :limit"
    ),
    concat!(
        "SELECT state, next_attempt_at, run_through, ",
        lease_columns!(),
        " FROM queue_rows
     WHERE queue = :queue AND key >= :key AND key <= :key AND state IN ('pending', 'leased')
     ORDER BY key, id LIMIT :limit"
    ),
);

/// Leases the unfinished rows of a key with ids from `:first` to `:last`: `LEASE_ROW_SQL` for a
/// run of rows at once, with its condition; marked send started at `:started` unless it is
/// NULL. (`state IN` as the active-rows index says it, so SQLite uses the index.) Public so a
/// test can pin its plan.
pub const LEASE_KEY_RANGE_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
            lease_owner = :owner, lease_token = lease_token + 1, lease_expires_at = :expires,
            send_started = COALESCE(:started, send_started), run_through = NULL
     WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased')
       AND id BETWEEN :first AND :last
       AND (state = 'pending' OR (lease_expires_at <= :now AND run_through IS NULL))",
);

/// Leases the first row of a held run (see [`Queue::lease_held_run_in`]) for the whole run: the
/// key's unfinished rows from `:first` to `:through` must be the `:rows` the run was read as
/// (none written in between since), or nothing is leased.
const LEASE_HELD_HEAD_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
            lease_owner = :owner, lease_token = lease_token + 1, lease_expires_at = :expires,
            send_started = :started, run_through = :through
     WHERE id = :first AND state = 'pending'
       AND (SELECT COUNT(*) FROM queue_rows c
             WHERE c.queue = :queue AND c.key = :key AND c.state IN ('pending', 'leased')
               AND c.id BETWEEN :first AND :through) = :rows",
);

/// The rows of this owner's held run on a key that are not recorded yet, leased each as the
/// run's lease said (its holder's tokens and attempts count them so); the run is then held no
/// more (`RELEASE_HELD_HEAD_SQL`).
const LEASE_HELD_REST_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
            lease_owner = :owner, lease_token = lease_token + 1, lease_expires_at = :expires,
            send_started = :started, run_through = NULL
     WHERE queue = :queue AND key = :key AND state = 'pending' AND id <= :through
       AND id > (SELECT h.id FROM queue_rows h
                  WHERE h.queue = :queue AND h.key = :key AND h.state = 'leased'
                    AND h.lease_owner = :owner AND h.run_through = :through)",
);

/// The row that held a run holds it no more (its rows were leased each, or settled).
const RELEASE_HELD_HEAD_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET run_through = NULL
     WHERE queue = :queue AND key = :key AND state = 'leased' AND lease_owner = :owner
       AND run_through = :through",
);

/// A held run's rows after its row `:head`, when its lease was lost (expired, its node lost or
/// restarted): counted as tried and marked send started, as if each had been leased (they may
/// have been sent), their tokens moved on so that the old holder's answers are stale.
const SETTLE_HELD_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET attempts = attempts + 1, lease_token = lease_token + 1,
            send_started = COALESCE(send_started, :started)
     WHERE queue = :queue AND key = :key AND state = 'pending'
       AND id > :head AND id <= :through",
);

/// The row `:head` holds no run any more.
const UNHOLD_SQL: Sql = Sql::same("UPDATE queue_rows SET run_through = NULL WHERE id = :head");

/// Pushes out the lease of the row that holds the run row `:id` belongs to, when `:id` is one
/// of this owner's held rows still pending with the token before `:token`.
const EXTEND_HELD_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET lease_expires_at = :expires
     WHERE queue = :queue AND state = 'leased' AND lease_owner = :owner
       AND id < :id AND run_through >= :id
       AND key = (SELECT f.key FROM queue_rows f
                   WHERE f.id = :id AND f.queue = :queue AND f.state = 'pending'
                     AND f.lease_token = CAST(:token AS BIGINT) - 1)",
);

/// Reads a row as a `Lease`.
const LEASE_OF_SQL: Sql = Sql::same(concat!(
    "SELECT ",
    lease_columns!(),
    " FROM queue_rows WHERE id = :id"
));

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
fn lease_at(r: &Row<'_>, first: usize) -> Result<Lease> {
    Ok(Lease {
        id: r.get(first)?,
        key: r.get(first + 1)?,
        payload: r.get(first + 2)?,
        attempts: r.get(first + 3)?,
        token: r.get(first + 4)?,
        expires_at: r.get(first + 5)?,
        created_at: r.get(first + 6)?,
        send_started: r.get(first + 7)?,
        run: None,
    })
}

fn lease_from_row(r: &Row<'_>) -> Result<Lease> {
    lease_at(r, 0)
}

/// How a key's run is leased (see [`Queue::lease_run_in`], [`Queue::lease_held_run_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunShape {
    /// Each row leased.
    Plain,
    /// Each row leased and marked send started.
    Marked,
    /// Held by its first row, each marked send started once it is leased itself.
    Held,
}

/// A row that held a run when its lease was lost, as [`settle_held_in`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldHead {
    pub queue: String,
    pub key: String,
    pub id: i64,
    pub through: i64,
    /// Its send-started mark: the run's.
    pub started: Option<i64>,
}

impl HeldHead {
    fn of(queue: QueueName, head: &Lease, through: i64) -> HeldHead {
        HeldHead {
            queue: queue.to_string(),
            key: head.key.clone(),
            id: head.id,
            through,
            started: head.send_started,
        }
    }

    /// A row read as `queue, key, id, run_through, send_started` (a reclaim's `RETURNING`):
    /// `Some` when it held a run.
    pub(crate) fn read(r: &Row<'_>) -> Result<Option<Self>> {
        let through: Option<i64> = r.get(3)?;
        let Some(through) = through else {
            return Ok(None);
        };
        Ok(Some(HeldHead {
            queue: r.get(0)?,
            key: r.get(1)?,
            id: r.get(2)?,
            through,
            started: r.get(4)?,
        }))
    }
}

/// Settles runs whose holder's lease was lost: the rows after each head, up to its run's last,
/// count as tried and are marked send started, as row leases would have been (see
/// [`Queue::lease_held_run_in`]); each head holds its run no more. Called by whatever takes
/// such a lease over, before or as it does.
pub(crate) fn settle_held_in(tx: &Tx<'_>, heads: &[HeldHead]) -> Result<()> {
    let now = tx.now();
    for head in heads {
        let started = head.started.unwrap_or(now);
        tracing::info!(queue = %head.queue, key = %head.key.escape_debug(), head = head.id, through = head.through,
            "a held run's lease was lost: its rows count as tried and may have been sent");
        tx.exec(
            &SETTLE_HELD_SQL,
            params![
                ":queue" => head.queue.as_str(), ":key" => head.key.as_str(), ":head" => head.id,
                ":through" => head.through, ":started" => started,
            ],
        )?;
        tx.exec(&UNHOLD_SQL, params![":head" => head.id])?;
    }
    Ok(())
}

/// The expired head of a key that held a run, if any.
const EXPIRED_HELD_HEAD_SQL: Sql = Sql::same(
    "SELECT queue, key, id, run_through, send_started FROM queue_rows
     WHERE queue = :queue AND key = :key AND state = 'leased' AND run_through IS NOT NULL
       AND lease_expires_at <= :now",
);

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
            match head_query(tx, self.name, key)? {
                Some((id, state, next, expires)) if is_leasable(&state, next, expires, now) => {
                    if state == "leased" && self.settle_key_in(tx, key)? {
                        continue;
                    }
                    if !self.claim_key_in(tx, key)? {
                        return Ok(None);
                    }
                    // None: another daemon leased it first (its lease stands).
                    let Some(lease) = self.lease_row(tx, id)? else {
                        return Ok(None);
                    };
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
        let shape = match mark_started {
            true => RunShape::Marked,
            false => RunShape::Plain,
        };
        self.lease_key_run_in(tx, key, limit, shape)
    }

    /// [`lease_run_in`](Self::lease_run_in) with every row marked started, for a sender that
    /// sends the run's rows in order and records their answers in order, as they come: only
    /// the run's first row is leased in the database, and it holds the rest for this owner
    /// (`run_through`); each answer recorded moves the lease to the next row not recorded (see
    /// [`delivered_all_in`](Self::delivered_all_in)). Each row is written once, when its
    /// answer is, not twice: on PostgreSQL a lease and a record are each a new version of the
    /// row with an entry in each of its indexes.
    ///
    /// Anything but deliveries recorded in order (a failure, rows given back, a mark) first
    /// leases the run's other rows each, as `lease_run_in` would have (their `Lease`s already
    /// say so), and goes on as for any lease. A held run whose lease is lost (a crash, a lost
    /// node) is settled by whoever takes the key next: each of its rows counted as tried and
    /// marked send started, so a possible repeat carries its mark as with row leases.
    /// The leases come back as row leases when the run cannot be held (its first row's lease
    /// had expired, a row would end at its lease, or a single row).
    pub fn lease_held_run_in(
        &self,
        tx: &Tx<'_>,
        key: &str,
        limit: usize,
    ) -> Result<std::result::Result<Vec<Lease>, Head>> {
        self.lease_key_run_in(tx, key, limit, RunShape::Held)
    }

    fn lease_key_run_in(
        &self,
        tx: &Tx<'_>,
        key: &str,
        limit: usize,
        shape: RunShape,
    ) -> Result<std::result::Result<Vec<Lease>, Head>> {
        let now = tx.now();
        // Before the key's rows are read: no other daemon's lease of them can commit between
        // the read and the lease.
        if !self.claim_key_in(tx, key)? {
            return Ok(Err(Head::LeasedUntil(now.saturating_add(KEY_BUSY_MS))));
        }
        let started = (shape != RunShape::Plain).then_some(now);
        let limit = limit as i64;
        loop {
            let rows: Vec<(String, i64, Option<i64>, Lease)> = tx.query_all(
                &KEY_RUN_SQL,
                params![":queue" => self.name, ":key" => key, ":limit" => limit],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, lease_at(r, 3)?)),
            )?;
            let Some((state, next, through, first)) = rows.first() else {
                return Ok(Err(Head::Empty));
            };
            if !is_leasable(state, *next, Some(first.expires_at), now) {
                return Ok(Err(head_from(state, *next, Some(first.expires_at), now)));
            }
            if let Some(through) = *through {
                // A held run whose lease ran out: its rows count as tried first.
                let head = HeldHead::of(self.name, first, through);
                settle_held_in(tx, std::slice::from_ref(&head))?;
                continue;
            }
            let expires = now.saturating_add(ms(self.policy().lease_timeout));
            let mut leases: Vec<(String, Lease)> = rows
                .into_iter()
                .take_while(|(state, next, _, l)| {
                    is_leasable(state, *next, Some(l.expires_at), now)
                })
                .map(|(state, _, _, lease)| (state, lease))
                .collect();
            if shape == RunShape::Held && self.may_hold(&leases, now) {
                match self.lease_held_head(tx, key, &mut leases, expires, now)? {
                    true => return Ok(Ok(leases.into_iter().map(|(_, l)| l).collect())),
                    // A row written in between (PostgreSQL): read the run again.
                    false => continue,
                }
            }
            let mut leases: Vec<Lease> = leases.into_iter().map(|(_, l)| l).collect();
            // The run is every unfinished row of the key from its first id to its last: one
            // statement leases them all.
            let (first, last) = (leases[0].id, leases[leases.len() - 1].id);
            let owner: &str = &self.owner;
            let leased = tx.exec(
                &LEASE_KEY_RANGE_SQL,
                params![
                    ":queue" => self.name, ":key" => key, ":owner" => owner, ":expires" => expires,
                    ":first" => first, ":last" => last, ":started" => started, ":now" => now,
                ],
            )?;
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
            // Possibly empty, when every row of the run ended at its lease: the caller leases
            // again.
            return Ok(Ok(self.screen_in(tx, leases)?));
        }
    }

    /// Whether a run read as `leases` (each with its state) may be held by its first row: more
    /// than one row, all pending, none that would end at its lease (see `screen_in`).
    fn may_hold(&self, leases: &[(String, Lease)], now: i64) -> bool {
        let policy = self.policy();
        leases.len() > 1
            && leases.iter().all(|(state, l)| {
                state == "pending"
                    && !policy.exhausted(l.attempts)
                    && !policy.too_old(l.created_at, now)
            })
    }

    /// Leases the run's first row for the whole run (`LEASE_HELD_HEAD_SQL`) and makes
    /// `leases` say what each row's own lease would: false when the key's rows changed since
    /// they were read.
    fn lease_held_head(
        &self,
        tx: &Tx<'_>,
        key: &str,
        leases: &mut [(String, Lease)],
        expires: i64,
        now: i64,
    ) -> Result<bool> {
        let (first, through) = (leases[0].1.id, leases[leases.len() - 1].1.id);
        let owner: &str = &self.owner;
        let leased = tx.exec(
            &LEASE_HELD_HEAD_SQL,
            params![
                ":queue" => self.name, ":key" => key, ":owner" => owner, ":expires" => expires,
                ":first" => first, ":through" => through, ":started" => now,
                ":rows" => leases.len() as i64,
            ],
        )?;
        if leased == 0 {
            return Ok(false);
        }
        let run = HeldRun {
            through,
            started: now,
        };
        for (_, lease) in leases.iter_mut() {
            lease.attempts += 1;
            lease.token += 1;
            lease.expires_at = expires;
            lease.run = Some(run);
        }
        Ok(true)
    }

    /// Leases each row of the held runs among `leases` that is not recorded yet, as the run's
    /// lease said (see [`lease_held_run_in`](Self::lease_held_run_in)), and ends the runs: what
    /// is recorded next of them is recorded row by row, fenced by those leases. Rows of runs
    /// already ended, or whose lease was lost, are left as they are.
    pub fn release_held_in(&self, tx: &Tx<'_>, leases: &[Lease]) -> Result<()> {
        let mut runs: Vec<(&str, HeldRun)> = leases
            .iter()
            .filter_map(|l| Some((l.key.as_str(), l.run?)))
            .collect();
        runs.dedup();
        let owner: &str = &self.owner;
        let expires = tx.now().saturating_add(ms(self.policy().lease_timeout));
        for (key, run) in runs {
            let params = params![
                ":queue" => self.name, ":key" => key, ":owner" => owner, ":through" => run.through,
                ":expires" => expires, ":started" => run.started,
            ];
            tx.exec(&LEASE_HELD_REST_SQL, params)?;
            let params = params![
                ":queue" => self.name, ":key" => key, ":owner" => owner, ":through" => run.through,
            ];
            tx.exec(&RELEASE_HELD_HEAD_SQL, params)?;
        }
        Ok(())
    }

    /// Leases up to `limit` due rows across keys, only heads of keys, oldest first.
    pub fn lease_due(&self, limit: usize, skip: &[String]) -> Result<Vec<Lease>> {
        self.write(|tx| self.lease_due_in(tx, limit, skip))
    }

    /// `lease_due` inside a caller's transaction.
    pub fn lease_due_in(&self, tx: &Tx<'_>, limit: usize, skip: &[String]) -> Result<Vec<Lease>> {
        self.lease_found_in(tx, limit, skip, |tx, skip, want| {
            let now = tx.now();
            let params =
                params![":queue" => self.name, ":now" => now, ":skip" => skip, ":limit" => want];
            tx.query_all(&DUE_HEADS_SQL, params, |r| Ok((r.get(0)?, r.get(1)?)))
        })
    }

    /// `lease_due_in` for rows written in `written` (unix ms, `from..before`): a restart's backlog
    /// and the live rows get separate budgets.
    pub fn lease_due_written_in(
        &self,
        tx: &Tx<'_>,
        limit: usize,
        written: std::ops::Range<i64>,
        skip: &[String],
    ) -> Result<Vec<Lease>> {
        self.lease_found_in(tx, limit, skip, |tx, skip, want| {
            let now = tx.now();
            let params = params![
                ":queue" => self.name, ":now" => now, ":from" => written.start,
                ":before" => written.end, ":skip" => skip, ":limit" => want,
            ];
            tx.query_all(&DUE_HEADS_WRITTEN_SQL, params, |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
        })
    }

    /// Whether any unfinished row was written before `before` (unix ms): a backlog is left.
    pub fn any_written_before(&self, before: i64) -> Result<bool> {
        let conn = self.db.read()?;
        let params = params![":queue" => self.name, ":before" => before];
        conn.query_value(&ANY_WRITTEN_BEFORE_SQL, params)
    }

    /// Leases up to `limit` due rows, oldest first, several per key: a key's rows are taken in
    /// order up to the first one that is not due or is leased by another owner, so a worker that
    /// holds a key's leases may buffer and process them in order. Keys in `skip` are left alone
    /// (their worker is full).
    pub fn lease_runs(&self, limit: usize, skip: &[String]) -> Result<Vec<Lease>> {
        self.write(|tx| self.lease_runs_in(tx, limit, skip))
    }

    /// `lease_runs` inside a caller's transaction.
    pub fn lease_runs_in(&self, tx: &Tx<'_>, limit: usize, skip: &[String]) -> Result<Vec<Lease>> {
        self.lease_found_in(tx, limit, skip, |tx, skip, want| {
            let (now, owner): (i64, &str) = (tx.now(), &self.owner);
            let params = params![
                ":queue" => self.name, ":now" => now, ":owner" => owner, ":skip" => skip,
                ":limit" => want,
            ];
            tx.query_all(&DUE_RUNS_SQL, params, |r| Ok((r.get(0)?, r.get(1)?)))
        })
    }

    /// One claim: expired leases are reclaimed, then up to `limit` of the rows `find` names
    /// (given the `:skip` list and how many are wanted) are leased, in the caller's
    /// transaction.
    fn lease_found_in(
        &self,
        tx: &Tx<'_>,
        limit: usize,
        skip: &[String],
        find: impl Fn(&Tx<'_>, &str, i64) -> Result<Vec<(i64, String)>>,
    ) -> Result<Vec<Lease>> {
        let skip = skip_list(skip);
        reclaim_expired_in(tx)?;
        self.lease_ids_in(tx, limit, |want| find(tx, &skip, want as i64))
    }

    /// Leases the rows `find(n)` names (up to n due rows, with their keys), screens them, and
    /// asks again while rows ended at their lease made room: the rows behind them may be due
    /// now.
    fn lease_ids_in(
        &self,
        tx: &Tx<'_>,
        limit: usize,
        find: impl Fn(usize) -> Result<Vec<(i64, String)>>,
    ) -> Result<Vec<Lease>> {
        let mut leases = Vec::new();
        // Keys one of whose rows another daemon leased first (PostgreSQL, several daemons):
        // their later rows are left too, or this daemon would run them beside (before) it.
        let mut taken_elsewhere = std::collections::HashSet::new();
        // Keys this transaction holds already (a run's rows share theirs): asked once each.
        let mut held = std::collections::HashSet::new();
        loop {
            let want = limit - leases.len();
            let ids = find(want)?;
            let found = ids.len();
            // A row another daemon leased first is not ours (`None`): it is left out.
            let mut leased = Vec::with_capacity(found);
            for (id, key) in ids {
                if taken_elsewhere.contains(&key) {
                    continue;
                }
                if !held.contains(&key) {
                    if !self.claim_key_in(tx, &key)? {
                        taken_elsewhere.insert(key);
                        continue;
                    }
                    held.insert(key.clone());
                }
                match self.lease_row(tx, id)? {
                    Some(lease) => leased.push(lease),
                    None => {
                        taken_elsewhere.insert(key);
                    }
                }
            }
            let tried = leased.len();
            let kept = self.screen_in(tx, leased)?;
            let ended = tried - kept.len();
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
        let mut kept = Vec::with_capacity(leases.len());
        for lease in leases {
            // `attempts` counts this lease: the row was tried `attempts - 1` times before.
            let tried = lease.attempts.saturating_sub(1);
            // Logged here, as the sweep's expiries are: `status` counts them, the log says why.
            if policy.exhausted(tried) {
                let max = policy.max_attempts.unwrap_or_default();
                tracing::warn!(queue = %self.name, row = lease.id, key = %lease.key.escape_debug(), tried, max_attempts = max,
                    "dead when leased: it was already tried max_attempts times");
                let reason = format!("gave up after {tried} attempts (max_attempts = {max})");
                tx.exec(
                    &BURY_EXHAUSTED_SQL,
                    params![
                        ":id" => lease.id, ":token" => lease.token, ":tried" => i64::from(tried),
                        ":now" => now, ":reason" => reason,
                    ],
                )?;
            } else if policy.too_old(lease.created_at, now) {
                let age = std::time::Duration::from_millis(
                    now.saturating_sub(lease.created_at).max(0) as u64,
                );
                tracing::warn!(queue = %self.name, row = lease.id, key = %lease.key.escape_debug(), age = ?age,
                    max_age = ?policy.expires_after().unwrap_or_default(), "expired when leased: older than max_age");
                tx.exec(
                    &EXPIRE_TOO_OLD_SQL,
                    params![
                        ":id" => lease.id, ":token" => lease.token, ":tried" => i64::from(tried),
                        ":now" => now,
                    ],
                )?;
            } else {
                kept.push(lease);
            }
        }
        Ok(kept)
    }

    /// Whether `key` may be leased by this transaction (see [`CLAIM_KEY_SQL`]); always on
    /// SQLite.
    fn claim_key_in(&self, tx: &Tx<'_>, key: &str) -> Result<bool> {
        if !tx.pays_per_statement() {
            return Ok(true);
        }
        let params = params![":queue" => self.name, ":key" => key];
        Ok(tx.query_value::<i64>(&CLAIM_KEY_SQL, params)? == 1)
    }

    /// Settles `key`'s held run whose lease ran out (see [`settle_held_in`]): true if there
    /// was one.
    fn settle_key_in(&self, tx: &Tx<'_>, key: &str) -> Result<bool> {
        let params = params![":queue" => self.name, ":key" => key, ":now" => tx.now()];
        let heads: Vec<HeldHead> = tx
            .query_all(&EXPIRED_HELD_HEAD_SQL, params, HeldHead::read)?
            .into_iter()
            .flatten()
            .collect();
        settle_held_in(tx, &heads)?;
        Ok(!heads.is_empty())
    }

    /// Leases row `id`; `None` when it may no longer be leased (another daemon's lease).
    fn lease_row(&self, tx: &Tx<'_>, id: i64) -> Result<Option<Lease>> {
        let now = tx.now();
        let expires = now.saturating_add(ms(self.policy().lease_timeout));
        let owner: &str = &self.owner;
        let params = params![":id" => id, ":owner" => owner, ":expires" => expires, ":now" => now];
        if tx.exec(&LEASE_ROW_SQL, params)? == 0 {
            return Ok(None);
        }
        tx.query_opt(&LEASE_OF_SQL, params![":id" => id], lease_from_row)
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
        let n = tx.exec(
            &EXTEND_SQL,
            params![":id" => id, ":token" => token, ":expires" => expires],
        )?;
        if n == 1 {
            return Ok(true);
        }
        // One of a held run's rows: its run's lease is its own.
        let owner: &str = &self.owner;
        let params = params![
            ":queue" => self.name, ":owner" => owner, ":id" => id, ":token" => token,
            ":expires" => expires,
        ];
        Ok(tx.exec(&EXTEND_HELD_SQL, params)? == 1)
    }

    /// Rewrites leased row `id`'s payload, fenced by its lease `token`: `false` when the lease
    /// is no longer this one (another node took the row), and nothing is written.
    pub fn rewrite_leased_in(
        &self,
        tx: &Tx<'_>,
        id: i64,
        token: i64,
        payload: &str,
    ) -> Result<bool> {
        let params = params![":id" => id, ":token" => token, ":payload" => payload];
        Ok(tx.exec(&REWRITE_LEASED_SQL, params)? == 1)
    }

    /// Pushes out the expiry of every lease this process holds on `key` (a session worker's
    /// leased rows that wait behind the one being delivered).
    pub fn extend_key_in(&self, tx: &Tx<'_>, key: &str) -> Result<usize> {
        let now = tx.now();
        let expires = now.saturating_add(ms(self.policy().lease_timeout));
        let owner: &str = &self.owner;
        tx.exec(
            &EXTEND_KEY_SQL,
            params![":queue" => self.name, ":key" => key, ":owner" => owner, ":expires" => expires],
        )
    }

    /// Pushes out the expiry of every lease this process holds in this queue (rows waiting in
    /// a worker's buffer). Returns how many.
    pub fn extend_own_in(&self, tx: &Tx<'_>) -> Result<usize> {
        let timeout = ms(self.policy().lease_timeout);
        let owner: &str = &self.owner;
        let expires = tx.now().saturating_add(timeout);
        let params = params![":queue" => self.name, ":owner" => owner, ":expires" => expires];
        tx.exec(&EXTEND_OWN_SQL, params)
    }

    #[cfg(any(test, feature = "test-helpers"))]
    /// Gives a leased row back, due after `delay`, without counting the attempt: the worker had
    /// no room for it or must not run it yet. False if the token is stale.
    pub fn defer(&self, lease: &Lease, delay: Duration) -> Result<bool> {
        Ok(self.defer_many(std::slice::from_ref(lease), delay)? == 1)
    }

    #[cfg(any(test, feature = "test-helpers"))]
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
        self.release_held_in(tx, std::slice::from_ref(lease))?;
        let now = tx.now();
        let params = params![":id" => lease.id, ":token" => lease.token, ":now" => now];
        Ok(tx.exec(&SEND_STARTED_SQL, params)? == 1)
    }

    /// Undoes [`mark_send_started_in`](Self::mark_send_started_in) for a row marked but not
    /// sent after all: the mark is what the lease found (an earlier unknown outcome's, or
    /// none). False if the token is stale.
    pub fn restore_send_started_in(&self, tx: &Tx<'_>, lease: &Lease) -> Result<bool> {
        self.release_held_in(tx, std::slice::from_ref(lease))?;
        let params =
            params![":id" => lease.id, ":token" => lease.token, ":was" => lease.send_started];
        Ok(tx.exec(&RESTORE_SEND_STARTED_SQL, params)? == 1)
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
        self.release_held_in(tx, leases)?;
        let now = tx.now();
        if marks == GiveBack::UndoMarks {
            for lease in leases {
                self.restore_send_started_in(tx, lease)?;
            }
        }
        let at = now.saturating_add(ms(delay));
        let mut n = 0;
        for lease in leases {
            n += tx.exec(
                &DEFER_SQL,
                params![":id" => lease.id, ":token" => lease.token, ":at" => at],
            )?;
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
pub(super) const STATEMENTS: &[Sql] = &[
    DUE_HEADS_WRITTEN_SQL,
    ANY_WRITTEN_BEFORE_SQL,
    BURY_EXHAUSTED_SQL,
    EXPIRE_TOO_OLD_SQL,
    EXTEND_SQL,
    REWRITE_LEASED_SQL,
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
    LEASE_HELD_HEAD_SQL,
    LEASE_HELD_REST_SQL,
    RELEASE_HELD_HEAD_SQL,
    SETTLE_HELD_SQL,
    UNHOLD_SQL,
    EXTEND_HELD_SQL,
    EXPIRED_HELD_HEAD_SQL,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// `lease_at` reads by position: each statement it reads must list the lease's columns
    /// in `LEASE_COLUMNS`' order, from the column it is told.
    #[test]
    fn the_lease_statements_list_the_lease_columns_in_order() {
        let (_dir, db) = crate::storage::sqlite::db::temp_sqlite();
        let conn = db.read().unwrap();
        for (sql, first) in [(LEASE_OF_SQL.sqlite, 0), (KEY_RUN_SQL.sqlite, 3)] {
            let stmt = conn.prepare(sql).unwrap();
            let names = stmt.column_names();
            assert_eq!(
                names[first..first + LEASE_COLUMNS.len()],
                LEASE_COLUMNS,
                "{sql}"
            );
        }
        let stmt = conn.prepare(KEY_RUN_SQL.sqlite).unwrap();
        assert_eq!(
            stmt.column_names()[..3],
            ["state", "next_attempt_at", "run_through"]
        );
    }

    use crate::storage::queue::testing::{handle, lease, on_both, row, two_on_k_and_one_on};

    /// A key's rows are leased oldest first, one holder at a time, and a run stops at the first
    /// row that is not due: on both backends.
    #[test]
    fn leases_keep_each_key_in_order_on_both_backends() {
        on_both(|db, q| {
            let name = db.name();
            let [a, _, _] = two_on_k_and_one_on(db, q, "other");
            let first = lease(db, q, "k", 2_000);
            assert_eq!(
                (first.id, first.attempts, first.token),
                (a.id, 1, 1),
                "{name}"
            );
            let none = db.write_at(2_000, |tx| q.lease_next_in(tx, "k")).unwrap();
            assert!(none.is_none(), "{name}: the head is held");
            let run = db
                .write_at(2_000, |tx| q.lease_run_in(tx, "other", 10, true))
                .unwrap();
            let run = run.unwrap();
            assert_eq!((run.len(), run[0].payload.as_str()), (1, "c"), "{name}");
            // Past the lease, the head may be leased again: a new token fences the old one.
            let timeout = ms(q.policy().lease_timeout);
            let again = lease(db, q, "k", 2_000 + timeout);
            assert_eq!((again.id, again.token), (a.id, 2), "{name}");
            let marked = db.write_at(2_000 + timeout, |tx| q.mark_send_started_in(tx, &first));
            assert!(!marked.unwrap(), "{name}: the old holder is fenced");
            let back = std::slice::from_ref(&again);
            let given = db.write_at(2_000 + timeout, |tx| {
                q.give_back_in(tx, back, Duration::ZERO, GiveBack::KeepMarks)
            });
            assert_eq!(given.unwrap(), 1);
        });
    }

    /// Two daemons leasing the same key's head at once on PostgreSQL: one gets it, the other
    /// waits for the first's commit, finds the row taken and leases nothing.
    #[test]
    fn two_daemons_racing_for_one_head_lease_it_once_on_postgresql() {
        let pg = crate::storage::test_db::TestDb::postgres();
        let db = pg.db.clone();
        let (_dir, q) = handle();
        db.write_at(1_000, |tx| q.enqueue_in(tx, &row("k", "a")))
            .unwrap();
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (db, q) = (db.clone(), q.clone());
                std::thread::spawn(move || {
                    db.write_at(2_000, |tx| {
                        let lease = q.lease_next_in(tx, "k")?;
                        // Hold the row while the other daemon tries.
                        std::thread::sleep(Duration::from_millis(300));
                        Ok(lease)
                    })
                    .unwrap()
                })
            })
            .collect();
        let won: Vec<Lease> = racers
            .into_iter()
            .filter_map(|r| r.join().unwrap())
            .collect();
        assert_eq!(won.len(), 1, "{won:?}");
        assert_eq!(won[0].token, 1);
    }

    /// Issue 41, item 12a: two daemons' writes each leasing the runs of two keys, in opposite
    /// orders, deadlocked (PostgreSQL broke it after a 1 s stall by failing one write, which
    /// was then run again). A key another transaction is leasing is left to it: both writes
    /// commit at once, each with its own first key, neither run twice.
    #[test]
    fn two_daemons_leasing_two_keys_in_opposite_orders_do_not_deadlock_on_postgresql() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::{Arc, Barrier};
        let pg = crate::storage::test_db::TestDb::postgres();
        let db = pg.db.clone();
        let (_dir, q) = handle();
        for key in ["a", "b"] {
            db.write_at(1_000, |tx| q.enqueue_in(tx, &row(key, key)))
                .unwrap();
        }
        let both_hold_one = Arc::new(Barrier::new(2));
        let racers: Vec<_> = [("a", "b"), ("b", "a")]
            .into_iter()
            .map(|(mine, theirs)| {
                let (db, q, barrier) = (db.clone(), q.clone(), both_hold_one.clone());
                let tries = Arc::new(AtomicUsize::new(0));
                let counted = tries.clone();
                let racer = std::thread::spawn(move || {
                    db.write_at(2_000, |tx| {
                        let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
                        let own = q.lease_run_in(tx, mine, 10, false)?;
                        if first {
                            barrier.wait();
                        }
                        let other = q.lease_run_in(tx, theirs, 10, false)?;
                        Ok((own, other))
                    })
                });
                (racer, tries)
            })
            .collect();
        let ended: Vec<_> = racers
            .into_iter()
            .map(|(racer, tries)| (racer.join().unwrap(), tries))
            .collect();
        for (result, _) in &ended {
            assert!(result.is_ok(), "the write failed: {result:?}");
        }
        for (result, tries) in ended {
            let (own, other) = result.unwrap();
            assert_eq!(tries.load(Ordering::SeqCst), 1, "the write ran again");
            assert_eq!(own.map(|run| run.len()), Ok(1), "its own key's run");
            assert!(
                matches!(other, Err(Head::LeasedUntil(_))),
                "the other's key is left to it: {other:?}"
            );
        }
    }

    /// Issue 41, item 12: hook events of one session were processed out of order across nodes
    /// (25 notices out of hook order in a three-node run; 3 of 1 800 with no fault at all). A
    /// claim found a key's run while another daemon's lease of its head was not committed yet;
    /// the head was then refused to it, but the rows behind it were leased, and ran beside the
    /// head on the other daemon. A key whose row another daemon took first is left whole.
    #[test]
    fn a_run_whose_head_another_daemon_leased_first_is_left_whole_on_postgresql() {
        use crate::storage::queue::QueueName;
        use crate::{Database, Engine, QueuePolicy, SystemClock};
        let pg = crate::storage::test_db::TestDb::postgres();
        let first = Engine::with_clock(pg.db.clone(), std::sync::Arc::new(SystemClock));
        let second_db = Database::open(&pg.config).unwrap();
        let second = Engine::with_clock(second_db, std::sync::Arc::new(SystemClock));
        let (qa, qb) = (
            first.queue(QueueName::Hooks, QueuePolicy::hooks()),
            second.queue(QueueName::Hooks, QueuePolicy::hooks()),
        );
        for payload in ["h1", "h2", "h3"] {
            qa.enqueue(&row("x", payload)).unwrap();
        }
        let (leasing, leased) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            first
                .write(|tx| {
                    let head = qa.lease_next_in(tx, "x")?;
                    leasing.send(()).unwrap();
                    // Uncommitted while the other daemon claims.
                    std::thread::sleep(Duration::from_millis(500));
                    Ok(head)
                })
                .unwrap()
        });
        leased.recv().unwrap();
        let claimed = qb.lease_runs(10, &[]).unwrap();
        let head = holder.join().unwrap().unwrap();
        assert_eq!(head.payload, "h1");
        let payloads: Vec<&str> = claimed.iter().map(|l| l.payload.as_str()).collect();
        assert!(
            payloads.is_empty(),
            "rows behind a head another daemon holds were leased: {payloads:?}"
        );
    }

    /// A row as a held run sees it: state, attempts, token, send-started mark, `run_through`.
    type Seen = (String, u32, i64, Option<i64>, Option<i64>);

    fn seen(db: &crate::storage::test_db::TestDb, id: i64) -> Seen {
        const SEEN_SQL: Sql = Sql::same(
            "SELECT state, attempts, lease_token, send_started, run_through FROM queue_rows
             WHERE id = :id",
        );
        let conn = db.conn();
        let row = conn.query_opt(&SEEN_SQL, params![":id" => id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        });
        row.unwrap().expect("the row")
    }

    fn states(db: &crate::storage::test_db::TestDb, ids: &[i64]) -> Vec<String> {
        ids.iter().map(|&id| seen(db, id).0).collect()
    }

    /// `n` rows on key `k`, written at 1 000.
    fn rows_on_k(db: &crate::storage::test_db::TestDb, q: &Queue, n: usize) -> Vec<i64> {
        use crate::storage::queue::testing::put;
        (0..n)
            .map(|i| put(db, q, "k", &format!("m{i}")).id)
            .collect()
    }

    fn held_run(db: &crate::storage::test_db::TestDb, q: &Queue, now: i64) -> Vec<Lease> {
        let run = db.write_at(now, |tx| q.lease_held_run_in(tx, "k", 10));
        run.unwrap().expect("a run")
    }

    fn delivered(
        db: &crate::storage::test_db::TestDb,
        q: &Queue,
        now: i64,
        leases: &[Lease],
    ) -> Vec<bool> {
        let receipt = crate::storage::queue::Receipt::default();
        let rows: Vec<(&Lease, &crate::storage::queue::Receipt)> =
            leases.iter().map(|l| (l, &receipt)).collect();
        db.write_at(now, |tx| q.delivered_all_in(tx, &rows))
            .unwrap()
    }

    /// Issue 42: a run held by its first row. Only that row is leased; no one takes the others
    /// (another owner's lease of the key, this owner's claim of runs); delivered in order, each
    /// row is written once, counted and fenced as its own lease would have been, the run held
    /// by its next row between answers.
    #[test]
    fn a_held_run_leases_its_first_row_only_and_writes_each_row_once_on_both_backends() {
        on_both(|db, q| {
            let name = db.name();
            let ids = rows_on_k(db, q, 4);
            let run = held_run(db, q, 2_000);
            let held = HeldRun {
                through: ids[3],
                started: 2_000,
            };
            assert_eq!(run.len(), 4, "{name}");
            for lease in &run {
                assert_eq!((lease.attempts, lease.token, lease.run), (1, 1, Some(held)));
            }
            assert_eq!(
                states(db, &ids),
                ["leased", "pending", "pending", "pending"],
                "{name}"
            );
            assert_eq!(seen(db, ids[0]).4, Some(ids[3]), "{name}: the run it holds");
            // `show` tells the truth: the pending rows are the run's, leased by its holder.
            let shown = crate::storage::queue::row_detail(&*db.conn(), ids[2]).unwrap();
            let shown = shown.expect("the row");
            assert_eq!(
                (
                    shown.state.as_str(),
                    shown.held_by,
                    shown.lease_owner.as_deref()
                ),
                ("leased", Some(ids[0]), Some(q.owner())),
                "{name}"
            );

            let (_dir, other) = handle();
            let theirs = db.write_at(2_000, |tx| other.lease_run_in(tx, "k", 10, false));
            assert!(
                theirs.unwrap().is_err(),
                "{name}: another owner ran the key"
            );
            let theirs = db.write_at(2_000, |tx| other.lease_next_in(tx, "k"));
            assert!(theirs.unwrap().is_none(), "{name}");
            for owner in [q, &other] {
                let found: Vec<i64> = db
                    .write_at(2_000, |tx| {
                        let owner: &str = owner.owner();
                        let params = params![
                            ":queue" => q.name(), ":now" => 2_000i64, ":owner" => owner,
                            ":skip" => "[]", ":limit" => 10i64,
                        ];
                        tx.query_all(&DUE_RUNS_SQL, params, |r| r.get(0))
                    })
                    .unwrap();
                assert!(found.is_empty(), "{name}: a claim of runs found {found:?}");
            }

            assert_eq!(delivered(db, q, 3_000, &run[..2]), [true, true], "{name}");
            assert_eq!(
                states(db, &ids),
                ["delivered", "delivered", "leased", "pending"],
                "{name}"
            );
            assert_eq!(
                seen(db, ids[2]),
                ("leased".into(), 1, 1, Some(2_000), Some(ids[3])),
                "{name}: the run is held by its next row"
            );
            assert_eq!(delivered(db, q, 3_100, &run[2..]), [true, true], "{name}");
            for &id in &ids {
                let (state, attempts, token, _, _) = seen(db, id);
                assert_eq!(
                    (state.as_str(), attempts, token),
                    ("delivered", 1, 1),
                    "{name}"
                );
            }
            assert_eq!(
                delivered(db, q, 3_200, &run[2..]),
                [false, false],
                "{name}: once"
            );
        });
    }

    /// Issue 42: a held run whose holder died (its lease ran out) is settled by whoever takes
    /// the key next: every row not recorded comes back counted as tried and marked send
    /// started (a possible repeat), and the old holder's answers are stale. Taken over through
    /// a run's lease, and through a claim's reclaim of expired leases.
    #[test]
    fn a_held_run_whose_holder_died_comes_back_marked_as_possible_repeats_on_both_backends() {
        on_both(|db, q| {
            let name = db.name();
            let ids = rows_on_k(db, q, 4);
            let run = held_run(db, q, 2_000);
            assert_eq!(delivered(db, q, 3_000, &run[..1]), [true], "{name}");
            let after = 3_000 + ms(q.policy().lease_timeout) + 1;

            let (_dir, other) = handle();
            let again = db.write_at(after, |tx| other.lease_run_in(tx, "k", 10, true));
            let again = again.unwrap().expect("the rest of the run");
            let got: Vec<(i64, u32, Option<i64>)> = again
                .iter()
                .map(|l| (l.id, l.attempts, l.send_started))
                .collect();
            let want: Vec<(i64, u32, Option<i64>)> =
                ids[1..].iter().map(|&id| (id, 2, Some(2_000))).collect();
            assert_eq!(got, want, "{name}");
            assert_eq!(
                delivered(db, q, after, &run[1..]),
                [false, false, false],
                "{name}: the old holder is fenced"
            );
        });
        on_both(|db, q| {
            let name = db.name();
            let ids = rows_on_k(db, q, 3);
            let _run = held_run(db, q, 2_000);
            let after = 2_000 + ms(q.policy().lease_timeout) + 1;
            db.write_at(after, reclaim_expired_in).unwrap();
            for &id in &ids[1..] {
                assert_eq!(
                    seen(db, id),
                    ("pending".into(), 1, 1, Some(2_000), None),
                    "{name}: settled"
                );
            }
            let head = crate::storage::queue::testing::lease(db, q, "k", after);
            assert_eq!((head.id, head.attempts), (ids[0], 2), "{name}");
            assert_eq!(head.send_started, Some(2_000), "{name}");
        });
    }

    /// Issue 42: anything but deliveries in order leases a held run's rows each first, as the
    /// run's `Lease`s said, and is then recorded as for any lease: a retry of its first row,
    /// the rest given back unsent, marks undone.
    #[test]
    fn a_failure_in_a_held_run_leases_its_rows_each_then_records_as_before_on_both_backends() {
        on_both(|db, q| {
            let name = db.name();
            let ids = rows_on_k(db, q, 3);
            let run = held_run(db, q, 2_000);
            let retried = db.write_at(3_000, |tx| q.retry_later_in(tx, &run[0], "500", None));
            assert!(
                matches!(
                    retried.unwrap(),
                    crate::storage::queue::Retried::Scheduled { .. }
                ),
                "{name}"
            );
            for &id in &ids[1..] {
                assert_eq!(
                    seen(db, id),
                    ("leased".into(), 1, 1, Some(2_000), None),
                    "{name}: leased each"
                );
            }
            let back = db.write_at(3_000, |tx| {
                q.give_back_in(tx, &run[1..], Duration::ZERO, GiveBack::UndoMarks)
            });
            assert_eq!(back.unwrap(), 2, "{name}: still ours");
            for &id in &ids {
                let (state, attempts, _, started, _) = seen(db, id);
                assert_eq!(state, "pending", "{name}");
                assert_eq!(started, None, "{name}: the marks are undone");
                assert_eq!(
                    attempts,
                    u32::from(id == ids[0]),
                    "{name}: only the try counts"
                );
            }
        });
    }

    /// Issue 42: a live send of a held run's later row keeps the run's lease; the sweep of
    /// rows past their age leaves a held run's rows to its holder (checked when leased).
    #[test]
    fn a_held_runs_rows_keep_its_lease_and_are_not_swept_on_both_backends() {
        on_both(|db, q| {
            let name = db.name();
            let ids = rows_on_k(db, q, 3);
            let run = held_run(db, q, 2_000);
            let later = 2_000 + ms(q.policy().lease_timeout) - 1;
            let extended = db.write_at(later, |tx| q.extend_in(tx, run[2].id, run[2].token));
            assert!(extended.unwrap(), "{name}: the run's lease is the row's");
            let (_dir, other) = handle();
            let theirs = db.write_at(later + 2, |tx| other.lease_next_in(tx, "k"));
            assert!(
                theirs.unwrap().is_none(),
                "{name}: the run's lease was pushed out"
            );
            let stale = db.write_at(later, |tx| q.extend_in(tx, run[2].id, run[2].token + 1));
            assert!(!stale.unwrap(), "{name}: a stale token extends nothing");

            let swept = db.write_at(later, |tx| q.expire_older_in(tx, Duration::ZERO));
            assert_eq!(swept.unwrap(), 0, "{name}");
            assert_eq!(states(db, &ids), ["leased", "pending", "pending"], "{name}");
        });
    }
}
