//! The `queue_rows` table: every statement that touches it lives here.
//!
//! A row is `pending` until leased; a lease (owner, token, expiry) makes it `leased`; the lease
//! holder completes it (`delivered`), schedules a retry (`pending` again with a later
//! `next_attempt_at`) or buries it (`dead`). Each of those is fenced by the lease token, which
//! every lease bumps, so the late answer of an owner whose lease was taken over changes nothing.
//! Within a key, a row is leased only when every older row of the key is terminal (strict FIFO).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use rusqlite::{params, OptionalExtension, Row, Transaction};

use crate::clock::{ms, Clock};
use crate::db::Database;
use crate::error::{EngineError, Result};
use crate::policy::QueuePolicy;

/// What a caller hands in to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRow {
    pub key: String,
    pub payload: String,
    pub dedup_key: Option<String>,
}

/// The answer to an enqueue: the row's id, and whether it already existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Enqueued {
    pub id: i64,
    pub duplicate: bool,
    /// The row was written already expired, for this reason (e.g. `session ended`): it will
    /// not be delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expired: Option<&'static str>,
}

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
    name: Arc<str>,
    /// Shared by every clone of this handle, so a reload reaches them all.
    policy: Arc<RwLock<Arc<QueuePolicy>>>,
}

/// The oldest unfinished row of a key (?1 queue, ?2 key). Public so a test can pin its plan.
pub const HEAD_SQL: &str = "SELECT id, state, next_attempt_at, lease_expires_at FROM queue_rows
     WHERE queue = ?1 AND key = ?2 AND state IN ('pending', 'leased')
     ORDER BY id LIMIT 1";

/// Due pending rows that head their key (?1 queue, ?2 now, ?3 limit), oldest first.
pub const DUE_HEADS_SQL: &str = "SELECT r.id FROM queue_rows r
     WHERE r.queue = ?1 AND r.state = 'pending' AND r.next_attempt_at <= ?2
       AND NOT EXISTS (
         SELECT 1 FROM queue_rows o
         WHERE o.queue = ?1 AND o.key = r.key
           AND o.state IN ('pending', 'leased') AND o.id < r.id)
     ORDER BY r.id LIMIT ?3";

/// Due pending rows in runs per key (?1 queue, ?2 now, ?3 owner, ?4 JSON list of keys to skip,
/// ?5 limit): every row of a key before the key's first row that blocks it (pending but not
/// due, or leased by another owner), oldest first.
pub const DUE_RUNS_SQL: &str = "WITH active AS (
       SELECT id, key, state, next_attempt_at, lease_owner FROM queue_rows
       WHERE queue = ?1 AND state IN ('pending', 'leased')
         AND key NOT IN (SELECT value FROM json_each(?4))
     ), blocked AS (
       SELECT key, MIN(id) AS first FROM active
       WHERE (state = 'pending' AND next_attempt_at > ?2)
          OR (state = 'leased' AND lease_owner IS NOT ?3)
       GROUP BY key
     )
     SELECT a.id FROM active a LEFT JOIN blocked b ON b.key = a.key
     WHERE a.state = 'pending' AND (b.first IS NULL OR a.id < b.first)
     ORDER BY a.id LIMIT ?5";

/// Rows deleted per prune transaction, so writers are not held up for long.
const PRUNE_SLICE: usize = 5000;

/// One slice of terminal rows of one state (?1 queue, ?2 state, ?3 finished before). The
/// `NOT IN` repeats the finished index's condition word for word, or SQLite would not use it.
/// Public so a test can pin its plan.
pub const PRUNE_SQL: &str = "DELETE FROM queue_rows WHERE id IN (
       SELECT id FROM queue_rows
       WHERE queue = ?1 AND state NOT IN ('pending', 'leased') AND state = ?2 AND finished_at < ?3
       LIMIT 5000)";

/// The columns a `Lease` is read from, in `lease_from_row`'s order.
macro_rules! lease_columns {
    () => {
        "id, key, payload, attempts, lease_token, lease_expires_at, created_at"
    };
}

/// Leases row ?1 for owner ?2 until ?3: bumps the attempt count and the fencing token.
/// (Without RETURNING, whose temporary b-tree costs more than reading the row back by id.)
const LEASE_ROW_SQL: &str = "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
            lease_owner = ?2, lease_token = lease_token + 1, lease_expires_at = ?3
     WHERE id = ?1";

/// A key's unfinished rows, oldest first (?1 queue, ?2 key, ?3 limit): the state that decides
/// whether each may be leased now, then the row as a `Lease` reads it.
const KEY_RUN_SQL: &str = concat!(
    "SELECT state, next_attempt_at, ",
    lease_columns!(),
    " FROM queue_rows WHERE queue = ?1 AND key = ?2 AND state IN ('pending', 'leased')
     ORDER BY id LIMIT ?3"
);

/// Leases the unfinished rows of key ?2 in queue ?1 with ids from ?5 to ?6, for owner ?3 until
/// ?4: `LEASE_ROW_SQL` for a run of rows at once. Public so a test can pin its plan.
pub const LEASE_KEY_RANGE_SQL: &str =
    "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
            lease_owner = ?3, lease_token = lease_token + 1, lease_expires_at = ?4
     WHERE queue = ?1 AND key = ?2 AND state IN ('pending', 'leased') AND id BETWEEN ?5 AND ?6";

/// Reads a row as a `Lease` (?1 id).
const LEASE_OF_SQL: &str = concat!(
    "SELECT ",
    lease_columns!(),
    " FROM queue_rows WHERE id = ?1"
);

fn lease_from_row(r: &Row<'_>) -> rusqlite::Result<Lease> {
    Ok(Lease {
        id: r.get(0)?,
        key: r.get(1)?,
        payload: r.get(2)?,
        attempts: r.get(3)?,
        token: r.get(4)?,
        expires_at: r.get(5)?,
        created_at: r.get(6)?,
    })
}

impl Queue {
    pub(crate) fn new(
        db: Database,
        clock: Arc<dyn Clock>,
        owner: Arc<str>,
        name: &str,
        policy: QueuePolicy,
    ) -> Self {
        Queue {
            db,
            clock,
            owner,
            name: name.into(),
            policy: Arc::new(RwLock::new(Arc::new(policy))),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
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

    /// Writes one row, or finds the row with the same dedup key and writes nothing.
    pub fn enqueue(&self, row: &NewRow) -> Result<Enqueued> {
        let now = self.now();
        self.db.write(|tx| self.enqueue_in(tx, row, now))
    }

    /// Writes many rows in one transaction (one commit, one fsync).
    pub fn enqueue_many(&self, rows: &[NewRow]) -> Result<Vec<Enqueued>> {
        let now = self.now();
        self.db
            .write(|tx| rows.iter().map(|r| self.enqueue_in(tx, r, now)).collect())
    }

    /// Enqueue inside a caller's transaction, so a handler's effects and its rows commit together.
    /// Its only write is one statement (see `Atomicity::OneStatement`).
    pub fn enqueue_in(&self, tx: &Transaction<'_>, row: &NewRow, now: i64) -> Result<Enqueued> {
        self.insert_in(tx, row, now, None)
    }

    /// Writes the row already expired, for `reason`: it is kept (and deduplicates its retries)
    /// but never delivered. One write statement, like `enqueue_in`.
    pub fn enqueue_expired_in(
        &self,
        tx: &Transaction<'_>,
        row: &NewRow,
        reason: &'static str,
        now: i64,
    ) -> Result<Enqueued> {
        self.insert_in(tx, row, now, Some(reason))
    }

    fn insert_in(
        &self,
        tx: &Transaction<'_>,
        row: &NewRow,
        now: i64,
        expired: Option<&'static str>,
    ) -> Result<Enqueued> {
        if row.key.is_empty() {
            return Err(EngineError::Invalid("the ordering key is empty".into()));
        }
        // No RETURNING: SQLite collects RETURNING rows in a temporary b-tree, which costs more
        // than the insert; the changes count and the last rowid say the same.
        let inserted = tx
            .prepare_cached(
                "INSERT INTO queue_rows (queue, key, dedup_key, payload, created_at, next_attempt_at,
                                         state, finished_at, reason)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8)
                 ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING",
            )?
            .execute(params![
                &*self.name,
                row.key,
                row.dedup_key,
                row.payload,
                now,
                if expired.is_some() { "expired" } else { "pending" },
                expired.map(|_| now),
                expired
            ])?;
        if inserted == 1 {
            return Ok(Enqueued {
                id: tx.last_insert_rowid(),
                duplicate: false,
                expired,
            });
        }
        let id = tx
            .prepare_cached("SELECT id FROM queue_rows WHERE queue = ?1 AND dedup_key = ?2")?
            .query_row(params![&*self.name, row.dedup_key], |r| r.get(0))?;
        Ok(Enqueued {
            id,
            duplicate: true,
            expired: None,
        })
    }

    /// Leases the oldest unfinished row of `key` if it is due (or its lease expired);
    /// `None` when the key's head is not due, is leased by someone alive, or there is none.
    pub fn lease_next(&self, key: &str) -> Result<Option<Lease>> {
        let now = self.now();
        self.db.write(|tx| self.lease_next_in(tx, key, now))
    }

    /// `lease_next` inside a caller's transaction.
    pub fn lease_next_in(
        &self,
        tx: &Transaction<'_>,
        key: &str,
        now: i64,
    ) -> Result<Option<Lease>> {
        loop {
            match head_query(tx, &self.name, key)? {
                Some((id, state, next, expires)) if is_leasable(&state, next, expires, now) => {
                    let lease = self.lease_row(tx, id, now)?;
                    if let Some(lease) = self.screen_in(tx, vec![lease], now)?.pop() {
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
    pub fn lease_run_in(
        &self,
        tx: &Transaction<'_>,
        key: &str,
        now: i64,
        limit: usize,
    ) -> Result<std::result::Result<Vec<Lease>, Head>> {
        let rows: Vec<(String, i64, Lease)> = tx
            .prepare_cached(KEY_RUN_SQL)?
            .query_map(params![&*self.name, key, limit as i64], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    Lease {
                        id: r.get(2)?,
                        key: r.get(3)?,
                        payload: r.get(4)?,
                        attempts: r.get(5)?,
                        token: r.get(6)?,
                        expires_at: r.get::<_, Option<i64>>(7)?.unwrap_or(0),
                        created_at: r.get(8)?,
                    },
                ))
            })?
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
        let leased = tx.prepare_cached(LEASE_KEY_RANGE_SQL)?.execute(params![
            &*self.name,
            key,
            &*self.owner,
            expires,
            first,
            last
        ])?;
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
        Ok(Ok(self.screen_in(tx, leases, now)?))
    }

    /// Leases up to `limit` due rows across keys, only heads of keys, oldest first.
    pub fn lease_due(&self, limit: usize) -> Result<Vec<Lease>> {
        let now = self.now();
        self.db.write(|tx| {
            reclaim_expired_in(tx, now)?;
            self.lease_ids_in(tx, now, limit, |want| {
                tx.prepare_cached(DUE_HEADS_SQL)?
                    .query_map(params![&*self.name, now, want as i64], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()
            })
        })
    }

    /// Leases up to `limit` due rows, oldest first, several per key: a key's rows are taken in
    /// order up to the first one that is not due or is leased by another owner, so a worker that
    /// holds a key's leases may buffer and process them in order. Keys in `skip` are left alone
    /// (their worker is full).
    pub fn lease_runs(&self, limit: usize, skip: &[String]) -> Result<Vec<Lease>> {
        let now = self.now();
        let skip = serde_json::to_string(skip).expect("a list of strings serialises");
        self.db.write(|tx| {
            reclaim_expired_in(tx, now)?;
            self.lease_ids_in(tx, now, limit, |want| {
                tx.prepare_cached(DUE_RUNS_SQL)?
                    .query_map(
                        params![&*self.name, now, &*self.owner, skip, want as i64],
                        |r| r.get(0),
                    )?
                    .collect::<rusqlite::Result<_>>()
            })
        })
    }

    /// Leases the rows `find(n)` names (up to n due rows), screens them, and asks again while
    /// rows ended at their lease made room: the rows behind them may be due now.
    fn lease_ids_in(
        &self,
        tx: &Transaction<'_>,
        now: i64,
        limit: usize,
        find: impl Fn(usize) -> rusqlite::Result<Vec<i64>>,
    ) -> Result<Vec<Lease>> {
        let mut leases = Vec::new();
        loop {
            let want = limit - leases.len();
            let ids = find(want)?;
            let found = ids.len();
            let leased = ids
                .into_iter()
                .map(|id| self.lease_row(tx, id, now))
                .collect::<Result<Vec<_>>>()?;
            let kept = self.screen_in(tx, leased, now)?;
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
    fn screen_in(&self, tx: &Transaction<'_>, leases: Vec<Lease>, now: i64) -> Result<Vec<Lease>> {
        let policy = self.policy();
        let too_old = |l: &Lease| {
            policy
                .max_age
                .is_some_and(|age| l.created_at < now.saturating_sub(ms(age)))
        };
        let mut kept = Vec::with_capacity(leases.len());
        for lease in leases {
            // `attempts` counts this lease: the row was tried `attempts - 1` times before.
            let tried = lease.attempts.saturating_sub(1);
            if policy.exhausted(tried) {
                let max = policy.max_attempts.unwrap_or_default();
                tx.prepare_cached(
                    "UPDATE queue_rows SET state = 'dead', attempts = ?3, finished_at = ?4,
                            reason = ?5, lease_owner = NULL, lease_expires_at = NULL
                     WHERE id = ?1 AND lease_token = ?2",
                )?
                .execute(params![
                    lease.id,
                    lease.token,
                    tried,
                    now,
                    format!("gave up after {tried} attempts (max_attempts = {max})")
                ])?;
            } else if too_old(&lease) {
                tx.prepare_cached(
                    "UPDATE queue_rows SET state = 'expired', attempts = ?3, finished_at = ?4,
                            reason = 'max age', lease_owner = NULL, lease_expires_at = NULL
                     WHERE id = ?1 AND lease_token = ?2",
                )?
                .execute(params![lease.id, lease.token, tried, now])?;
            } else {
                kept.push(lease);
            }
        }
        Ok(kept)
    }

    fn lease_row(&self, tx: &Transaction<'_>, id: i64, now: i64) -> Result<Lease> {
        let expires = now.saturating_add(ms(self.policy().lease_timeout));
        tx.prepare_cached(LEASE_ROW_SQL)?
            .execute(params![id, &*self.owner, expires])?;
        Ok(tx
            .prepare_cached(LEASE_OF_SQL)?
            .query_row(params![id], lease_from_row)?)
    }

    /// Pushes a live lease's expiry out by the lease timeout. False if the token is stale.
    pub fn extend(&self, id: i64, token: i64) -> Result<bool> {
        let now = self.now();
        self.db.write(|tx| self.extend_in(tx, id, token, now))
    }

    /// `extend` inside a caller's transaction.
    pub fn extend_in(&self, tx: &Transaction<'_>, id: i64, token: i64, now: i64) -> Result<bool> {
        let expires = now.saturating_add(ms(self.policy().lease_timeout));
        let n = tx
            .prepare_cached(
                "UPDATE queue_rows SET lease_expires_at = ?3
                 WHERE id = ?1 AND state = 'leased' AND lease_token = ?2",
            )?
            .execute(params![id, token, expires])?;
        Ok(n == 1)
    }

    /// Pushes out the expiry of every lease this process holds on `key` (a session worker's
    /// leased rows that wait behind the one being delivered).
    pub fn extend_key_in(&self, tx: &Transaction<'_>, key: &str, now: i64) -> Result<usize> {
        let expires = now.saturating_add(ms(self.policy().lease_timeout));
        Ok(tx
            .prepare_cached(
                "UPDATE queue_rows SET lease_expires_at = ?4
                 WHERE queue = ?1 AND key = ?2 AND state = 'leased' AND lease_owner = ?3",
            )?
            .execute(params![&*self.name, key, &*self.owner, expires])?)
    }

    /// Pushes out the expiry of every lease this process holds in this queue (rows waiting in
    /// a worker's buffer). Returns how many.
    pub fn extend_own(&self) -> Result<usize> {
        let expires = self.now().saturating_add(ms(self.policy().lease_timeout));
        self.db.write(|tx| {
            Ok(tx
                .prepare_cached(
                    "UPDATE queue_rows SET lease_expires_at = ?3
                     WHERE queue = ?1 AND state = 'leased' AND lease_owner = ?2",
                )?
                .execute(params![&*self.name, &*self.owner, expires])?)
        })
    }

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
        let now = self.now();
        self.db.write(|tx| self.defer_in(tx, leases, delay, now))
    }

    /// `defer_many` inside a caller's transaction.
    pub fn defer_in(
        &self,
        tx: &Transaction<'_>,
        leases: &[Lease],
        delay: Duration,
        now: i64,
    ) -> Result<usize> {
        let at = now.saturating_add(ms(delay));
        let mut stmt = tx.prepare_cached(
            "UPDATE queue_rows SET state = 'pending', next_attempt_at = ?3,
                    attempts = MAX(attempts - 1, 0), lease_owner = NULL, lease_expires_at = NULL
             WHERE id = ?1 AND state = 'leased' AND lease_token = ?2",
        )?;
        let mut n = 0;
        for lease in leases {
            n += stmt.execute(params![lease.id, lease.token, at])?;
        }
        Ok(n)
    }

    /// Marks a leased row delivered. False (and nothing changed) if the token is stale.
    pub fn complete(&self, id: i64, token: i64, reason: Option<&str>) -> Result<bool> {
        let now = self.now();
        self.db
            .write(|tx| self.complete_in(tx, id, token, reason, now))
    }

    /// `complete` inside a caller's transaction.
    pub fn complete_in(
        &self,
        tx: &Transaction<'_>,
        id: i64,
        token: i64,
        reason: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        finish_in(tx, id, token, "delivered", reason, None, now)
    }

    /// Marks a leased row delivered by a channel, with the far end's receipt. False (and
    /// nothing changed) if the token is stale.
    pub fn delivered_in(
        &self,
        tx: &Transaction<'_>,
        lease: &Lease,
        receipt: &Receipt,
        now: i64,
    ) -> Result<bool> {
        let took_ms = receipt.took.map(ms);
        let n = tx
            .prepare_cached(
                "UPDATE queue_rows SET state = 'delivered', finished_at = ?3, receipt = ?4,
                        took_ms = ?5, lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = ?1 AND state = 'leased' AND lease_token = ?2",
            )?
            .execute(params![
                lease.id,
                lease.token,
                now,
                receipt.message_id,
                took_ms
            ])?;
        Ok(n == 1)
    }

    /// The far end said "not now, until `wait` from now": the row is pending again, due then,
    /// and the attempt is not counted (being throttled is not a failure of the row). The reason
    /// is kept as its last error. Returns when it is due, or `None` if the token is stale.
    pub fn throttle_in(
        &self,
        tx: &Transaction<'_>,
        lease: &Lease,
        reason: &str,
        wait: Duration,
        now: i64,
    ) -> Result<Option<i64>> {
        let at = now.saturating_add(ms(wait));
        let n = tx
            .prepare_cached(
                "UPDATE queue_rows SET state = 'pending', next_attempt_at = ?3, last_error = ?4,
                        attempts = MAX(attempts - 1, 0), lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = ?1 AND state = 'leased' AND lease_token = ?2",
            )?
            .execute(params![lease.id, lease.token, at, reason])?;
        Ok((n == 1).then_some(at))
    }

    /// Marks a leased row done although it failed, keeping the error: retrying cannot help and
    /// is not wanted (an undecodable hook event, a handler's refusal, a coalesced row).
    pub fn complete_with_error(
        &self,
        id: i64,
        token: i64,
        reason: &str,
        error: Option<&str>,
    ) -> Result<bool> {
        let now = self.now();
        self.db
            .write(|tx| finish_in(tx, id, token, "delivered", Some(reason), error, now))
    }

    /// Ends many leased rows at once without running them (one transaction), each with its
    /// reason: rows a worker dropped (`coalesced`, `evicted`). Returns how many were still ours.
    pub fn drop_leased(&self, rows: &[(Lease, &str)]) -> Result<usize> {
        if rows.is_empty() {
            return Ok(0);
        }
        let now = self.now();
        self.db.write(|tx| {
            let mut n = 0;
            for (lease, reason) in rows {
                n += finish_in(
                    tx,
                    lease.id,
                    lease.token,
                    "delivered",
                    Some(reason),
                    None,
                    now,
                )? as usize;
            }
            Ok(n)
        })
    }

    /// Schedules another attempt after the policy's backoff (or `retry_after` when the far end
    /// said when); buries the row instead when the attempt limit is reached.
    pub fn retry_later(
        &self,
        lease: &Lease,
        error: &str,
        retry_after: Option<Duration>,
    ) -> Result<Retried> {
        let now = self.now();
        self.db
            .write(|tx| self.retry_later_in(tx, lease, error, retry_after, now))
    }

    /// `retry_later` inside a caller's transaction.
    pub fn retry_later_in(
        &self,
        tx: &Transaction<'_>,
        lease: &Lease,
        error: &str,
        retry_after: Option<Duration>,
        now: i64,
    ) -> Result<Retried> {
        let policy = self.policy();
        if policy.exhausted(lease.attempts) {
            let reason = format!("gave up after {} attempts", lease.attempts);
            let done = finish_in(
                tx,
                lease.id,
                lease.token,
                "dead",
                Some(&reason),
                Some(error),
                now,
            )?;
            return Ok(if done { Retried::Dead } else { Retried::Stale });
        }
        let delay = retry_after.unwrap_or_else(|| policy.delay_after(lease.attempts));
        let at = now.saturating_add(ms(delay));
        let n = tx
            .prepare_cached(
                "UPDATE queue_rows SET state = 'pending', next_attempt_at = ?3, last_error = ?4,
                        lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = ?1 AND state = 'leased' AND lease_token = ?2",
            )?
            .execute(params![lease.id, lease.token, at, error])?;
        Ok(if n == 1 {
            Retried::Scheduled { at }
        } else {
            Retried::Stale
        })
    }

    /// Marks a leased row dead (a permanent failure). False if the token is stale.
    pub fn bury(&self, id: i64, token: i64, reason: &str) -> Result<bool> {
        let now = self.now();
        self.db.write(|tx| self.bury_in(tx, id, token, reason, now))
    }

    /// `bury` inside a caller's transaction.
    pub fn bury_in(
        &self,
        tx: &Transaction<'_>,
        id: i64,
        token: i64,
        reason: &str,
        now: i64,
    ) -> Result<bool> {
        finish_in(tx, id, token, "dead", Some(reason), Some(reason), now)
    }

    /// Expires a leased row (it cannot be delivered where it is addressed). False if the token
    /// is stale.
    pub fn expire_in(
        &self,
        tx: &Transaction<'_>,
        id: i64,
        token: i64,
        reason: &str,
        now: i64,
    ) -> Result<bool> {
        finish_in(tx, id, token, "expired", Some(reason), None, now)
    }

    /// Expires every pending or leased row of `key` (the session ended). Returns how many.
    pub fn expire_key(&self, key: &str, reason: &str) -> Result<usize> {
        let now = self.now();
        self.db.write(|tx| self.expire_key_in(tx, key, reason, now))
    }

    /// `expire_key` inside a caller's transaction.
    pub fn expire_key_in(
        &self,
        tx: &Transaction<'_>,
        key: &str,
        reason: &str,
        now: i64,
    ) -> Result<usize> {
        Ok(tx
            .prepare_cached(
                "UPDATE queue_rows SET state = 'expired', finished_at = ?3, reason = ?4,
                        lease_owner = NULL, lease_expires_at = NULL
                 WHERE queue = ?1 AND key = ?2 AND state IN ('pending', 'leased')",
            )?
            .execute(params![&*self.name, key, now, reason])?)
    }

    /// Expires pending rows older than the policy's `max_age`, if it has one.
    pub fn expire_overdue(&self) -> Result<usize> {
        let Some(max_age) = self.policy().max_age else {
            return Ok(0);
        };
        let now = self.now();
        let cutoff = now.saturating_sub(ms(max_age));
        self.db.write(|tx| {
            Ok(tx
                .prepare_cached(
                    "UPDATE queue_rows SET state = 'expired', finished_at = ?2, reason = 'max age'
                     WHERE queue = ?1 AND state = 'pending' AND created_at < ?3",
                )?
                .execute(params![&*self.name, now, cutoff])?)
        })
    }

    /// Puts this process's leases on `key` back to pending: used when the worker holding them
    /// died inside this process, so its replacement need not wait for the leases to expire.
    pub fn release_own_leases(&self, key: &str) -> Result<usize> {
        self.db.write(|tx| {
            Ok(tx
                .prepare_cached(
                    "UPDATE queue_rows SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL
                     WHERE queue = ?1 AND key = ?2 AND state = 'leased' AND lease_owner = ?3",
                )?
                .execute(params![&*self.name, key, &*self.owner])?)
        })
    }

    /// The key's oldest unfinished row, as a worker needs it to decide when to look again.
    pub fn head(&self, key: &str) -> Result<Head> {
        let now = self.now();
        let conn = self.db.read()?;
        head_of(&conn, &self.name, key, now)
    }

    /// Keys that have pending or leased rows: the sessions to resume after a restart.
    pub fn active_keys(&self) -> Result<Vec<String>> {
        let conn = self.db.read()?;
        let mut stmt = conn.prepare_cached(
            "SELECT DISTINCT key FROM queue_rows WHERE queue = ?1 AND state IN ('pending', 'leased')",
        )?;
        let keys = stmt
            .query_map(params![&*self.name], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(keys)
    }

    /// When the earliest pending row of this queue is due (unix ms), if there is one.
    pub fn next_due(&self) -> Result<Option<i64>> {
        let conn = self.db.read()?;
        let at = conn
            .prepare_cached(
                "SELECT MIN(next_attempt_at) FROM queue_rows WHERE queue = ?1 AND state = 'pending'",
            )?
            .query_row(params![&*self.name], |r| r.get(0))?;
        Ok(at)
    }

    /// Deletes delivered and expired rows that finished more than `older_than` ago (the
    /// policy's retention when `None`), and dead rows past `dead_retention`. Dead letters wait
    /// for an operator: `older_than` applies to them too only with `include_dead`. Deletes in
    /// slices so writers are not starved.
    pub fn prune(&self, older_than: Option<Duration>, include_dead: bool) -> Result<usize> {
        let now = self.now();
        let policy = self.policy();
        let finished_cutoff = now.saturating_sub(ms(older_than.unwrap_or(policy.retention)));
        let mut total = self.prune_state("delivered", finished_cutoff)?
            + self.prune_state("expired", finished_cutoff)?;
        let dead_keep = match include_dead {
            true => older_than.or(policy.dead_retention),
            false => policy.dead_retention,
        };
        if let Some(keep) = dead_keep {
            total += self.prune_state("dead", now.saturating_sub(ms(keep)))?;
        }
        Ok(total)
    }

    fn prune_state(&self, state: &str, cutoff: i64) -> Result<usize> {
        let mut total = 0;
        loop {
            let n = self.db.write(|tx| {
                Ok(tx
                    .prepare_cached(PRUNE_SQL)?
                    .execute(params![&*self.name, state, cutoff])?)
            })?;
            total += n;
            if n < PRUNE_SLICE {
                return Ok(total);
            }
        }
    }

    /// Reads a row's current state (for tests and tools).
    pub fn state_of(&self, id: i64) -> Result<Option<RowState>> {
        let conn = self.db.read()?;
        let state = conn
            .prepare_cached(
                "SELECT state, attempts, next_attempt_at, last_error, reason FROM queue_rows
                 WHERE id = ?1 AND queue = ?2",
            )?
            .query_row(params![id, &*self.name], |r| {
                Ok(RowState {
                    state: r.get(0)?,
                    attempts: r.get(1)?,
                    next_attempt_at: r.get(2)?,
                    last_error: r.get(3)?,
                    reason: r.get(4)?,
                })
            })
            .optional()?;
        Ok(state)
    }
}

/// A row's lifecycle fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowState {
    pub state: String,
    pub attempts: u32,
    pub next_attempt_at: i64,
    pub last_error: Option<String>,
    pub reason: Option<String>,
}

type HeadRow = (i64, String, i64, Option<i64>);

fn head_query(
    conn: &rusqlite::Connection,
    queue: &str,
    key: &str,
) -> rusqlite::Result<Option<HeadRow>> {
    conn.prepare_cached(HEAD_SQL)?
        .query_row(params![queue, key], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()
}

fn head_of(conn: &rusqlite::Connection, queue: &str, key: &str, now: i64) -> Result<Head> {
    Ok(match head_query(conn, queue, key)? {
        None => Head::Empty,
        Some((_, state, next, expires)) => head_from(&state, next, expires, now),
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
    tx: &Transaction<'_>,
    id: i64,
    token: i64,
    state: &str,
    reason: Option<&str>,
    error: Option<&str>,
    now: i64,
) -> Result<bool> {
    let n = tx
        .prepare_cached(
            "UPDATE queue_rows SET state = ?3, finished_at = ?4, reason = ?5,
                    last_error = COALESCE(?6, last_error), lease_owner = NULL, lease_expires_at = NULL
             WHERE id = ?1 AND state = 'leased' AND lease_token = ?2",
        )?
        .execute(params![id, token, state, now, reason, error])?;
    Ok(n == 1)
}

/// Returns rows whose lease expired to pending, due at once.
pub(crate) fn reclaim_expired_in(tx: &Transaction<'_>, now: i64) -> Result<usize> {
    Ok(tx
        .prepare_cached(
            "UPDATE queue_rows SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,
                    next_attempt_at = ?1
             WHERE state = 'leased' AND lease_expires_at <= ?1",
        )?
        .execute(params![now])?)
}

/// Returns every lease not held by `owner` to pending: at daemon start, any other owner is a
/// previous process (one daemon per database is enforced by a lock file).
pub(crate) fn reclaim_foreign_in(tx: &Transaction<'_>, owner: &str, now: i64) -> Result<usize> {
    Ok(tx
        .prepare_cached(
            "UPDATE queue_rows SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,
                    next_attempt_at = MIN(next_attempt_at, ?2)
             WHERE state = 'leased' AND lease_owner IS NOT ?1",
        )?
        .execute(params![owner, now])?)
}

/// Every field of one row, as `relayq show` tells its story. Times are unix ms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowDetail {
    pub id: i64,
    pub queue: String,
    pub key: String,
    pub state: String,
    pub attempts: u32,
    pub created_at: i64,
    pub next_attempt_at: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub last_error: Option<String>,
    pub finished_at: Option<i64>,
    pub reason: Option<String>,
    pub payload: String,
    /// The platform's message id, when a channel delivered it and the far end gave one.
    pub receipt: Option<String>,
    /// How long the delivering send took.
    pub took_ms: Option<i64>,
}

const DETAIL_COLUMNS: &str = "id, queue, key, state, attempts, created_at, next_attempt_at,
     lease_owner, lease_expires_at, last_error, finished_at, reason, payload, receipt, took_ms";

fn detail_from_row(r: &Row<'_>) -> rusqlite::Result<RowDetail> {
    Ok(RowDetail {
        id: r.get(0)?,
        queue: r.get(1)?,
        key: r.get(2)?,
        state: r.get(3)?,
        attempts: r.get(4)?,
        created_at: r.get(5)?,
        next_attempt_at: r.get(6)?,
        lease_owner: r.get(7)?,
        lease_expires_at: r.get(8)?,
        last_error: r.get(9)?,
        finished_at: r.get(10)?,
        reason: r.get(11)?,
        payload: r.get(12)?,
        receipt: r.get(13)?,
        took_ms: r.get(14)?,
    })
}

/// One row, whatever its queue and state.
pub(crate) fn row_detail(conn: &rusqlite::Connection, id: i64) -> Result<Option<RowDetail>> {
    let sql = format!("SELECT {DETAIL_COLUMNS} FROM queue_rows WHERE id = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(params![id], detail_from_row)
        .optional()?)
}

/// Pending rows that failed and hold up their key (the oldest unfinished row of it), oldest
/// first, at most `limit`: what an operator looks at first.
pub(crate) fn stuck_heads(conn: &rusqlite::Connection, limit: usize) -> Result<Vec<RowDetail>> {
    let sql = format!(
        "SELECT {DETAIL_COLUMNS} FROM queue_rows r
         WHERE r.state = 'pending' AND r.last_error IS NOT NULL
           AND NOT EXISTS (
             SELECT 1 FROM queue_rows o
             WHERE o.queue = r.queue AND o.key = r.key
               AND o.state IN ('pending', 'leased') AND o.id < r.id)
         ORDER BY r.id LIMIT ?1"
    );
    let rows = conn
        .prepare_cached(&sql)?
        .query_map(params![limit as i64], detail_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// A dead row, as `relayq dead list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadRow {
    pub id: i64,
    pub queue: String,
    pub key: String,
    pub attempts: u32,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub reason: Option<String>,
    pub last_error: Option<String>,
    pub payload: String,
}

/// `?1` as a JSON list of row ids, or NULL for every dead row.
fn id_filter(ids: Option<&[i64]>) -> Option<String> {
    ids.map(|ids| serde_json::to_string(ids).expect("a list of ids serialises"))
}

/// Dead rows of every queue (or of `queue`), oldest first.
pub(crate) fn dead_rows(conn: &rusqlite::Connection, queue: Option<&str>) -> Result<Vec<DeadRow>> {
    let rows = conn
        .prepare_cached(
            "SELECT id, queue, key, attempts, created_at, finished_at, reason, last_error, payload
             FROM queue_rows WHERE state = 'dead' AND (?1 IS NULL OR queue = ?1) ORDER BY id",
        )?
        .query_map(params![queue], |r| {
            Ok(DeadRow {
                id: r.get(0)?,
                queue: r.get(1)?,
                key: r.get(2)?,
                attempts: r.get(3)?,
                created_at: r.get(4)?,
                finished_at: r.get(5)?,
                reason: r.get(6)?,
                last_error: r.get(7)?,
                payload: r.get(8)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Makes dead rows pending again with a fresh attempt count (the last error is kept), due now.
/// `None` revives every dead row. Returns the (id, queue, key) of each row revived.
pub(crate) fn revive_dead_in(
    tx: &Transaction<'_>,
    ids: Option<&[i64]>,
    now: i64,
) -> Result<Vec<(i64, String, String)>> {
    let rows = tx
        .prepare_cached(
            "UPDATE queue_rows SET state = 'pending', attempts = 0, next_attempt_at = ?2,
                    finished_at = NULL, reason = NULL
             WHERE state = 'dead' AND (?1 IS NULL OR id IN (SELECT value FROM json_each(?1)))
             RETURNING id, queue, key",
        )?
        .query_map(params![id_filter(ids), now], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Deletes dead rows (`None`: every one). Returns the ids deleted.
pub(crate) fn purge_dead_in(tx: &Transaction<'_>, ids: Option<&[i64]>) -> Result<Vec<i64>> {
    let rows = tx
        .prepare_cached(
            "DELETE FROM queue_rows
             WHERE state = 'dead' AND (?1 IS NULL OR id IN (SELECT value FROM json_each(?1)))
             RETURNING id",
        )?
        .query_map(params![id_filter(ids)], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}
