//! Looking without changing: a key's head, the active keys, the next due time, one row's
//! story, the stuck heads, the dead letters.

use super::{Queue, QueueName};
use crate::error::Result;
use crate::params;
use crate::storage::sql::{Executor, Query, Row, Sql};
use crate::storage::tx::Tx;

/// Keys with pending or leased rows.
const ACTIVE_KEYS_SQL: Sql = Sql::same(
    "SELECT DISTINCT key FROM queue_rows WHERE queue = :queue AND state IN ('pending', 'leased')",
);

/// When the queue's earliest pending row is due.
const NEXT_DUE_SQL: Sql = Sql::same(
    "SELECT MIN(next_attempt_at) FROM queue_rows WHERE queue = :queue AND state = 'pending'",
);

/// A key's unfinished rows, oldest first: ids and payloads.
const ACTIVE_ROWS_SQL: Sql = Sql::same(
    "SELECT id, payload FROM queue_rows
     WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased') ORDER BY id",
);

/// One row's lifecycle fields.
const STATE_OF_SQL: Sql = Sql::same(
    "SELECT state, attempts, next_attempt_at, last_error, reason FROM queue_rows
                 WHERE id = :id AND queue = :queue",
);

/// Whether a key has any row, in any state.
const HAS_KEY_SQL: Sql = Sql::same(
    "SELECT COUNT(*) FROM (SELECT 1 FROM queue_rows WHERE queue = :queue AND key = :key LIMIT 1) k",
);

const HAS_UNFINISHED_SQL: Sql = Sql::same(
    "SELECT COUNT(*) FROM (SELECT 1 FROM queue_rows
                           WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased')
                           LIMIT 1) k",
);

impl Queue {
    /// Whether `key` has a row not yet delivered (pending or leased): an outbound chat's
    /// messages that must arrive before anything cosmetic is sent there.
    pub fn has_unfinished(&self, key: &str) -> Result<bool> {
        let conn = self.db.read()?;
        let params = params![":queue" => self.name, ":key" => key];
        let n: i64 = conn.query_value(&HAS_UNFINISHED_SQL, params)?;
        Ok(n > 0)
    }

    /// Whether `key` has any row, finished ones included (as long as they are kept): a key
    /// the operator names that has none is probably mistyped. Not on the delivery path (it may
    /// read the whole table).
    pub fn has_key(&self, key: &str) -> Result<bool> {
        let conn = self.db.read()?;
        let params = params![":queue" => self.name, ":key" => key];
        let n: i64 = conn.query_value(&HAS_KEY_SQL, params)?;
        Ok(n > 0)
    }

    #[cfg(any(test, feature = "test-helpers"))]
    /// The key's oldest unfinished row, as a worker needs it to decide when to look again.
    pub fn head(&self, key: &str) -> Result<super::Head> {
        let now = self.now();
        let conn = self.db.read()?;
        self.head_on(&conn, key, now)
    }

    /// [`head`](Self::head) inside a caller's transaction.
    pub fn head_in(&self, tx: &Tx<'_>, key: &str) -> Result<super::Head> {
        let now = tx.now();
        self.head_on(tx, key, now)
    }

    fn head_on(&self, conn: &dyn Executor, key: &str, now: i64) -> Result<super::Head> {
        Ok(match super::head_query(conn, self.name, key)? {
            None => super::Head::Empty,
            Some((_, state, next, expires)) => super::head_from(&state, next, expires, now),
        })
    }

    /// `key`'s unfinished rows (id, payload), oldest first, inside a caller's transaction.
    pub fn active_rows_in(&self, tx: &Tx<'_>, key: &str) -> Result<Vec<(i64, String)>> {
        let params = params![":queue" => self.name, ":key" => key];
        tx.query_all(&ACTIVE_ROWS_SQL, params, |r| Ok((r.get(0)?, r.get(1)?)))
    }

    /// Keys that have pending or leased rows: the sessions to resume after a restart.
    pub fn active_keys(&self) -> Result<Vec<String>> {
        let conn = self.db.read()?;
        conn.query_all(&ACTIVE_KEYS_SQL, params![":queue" => self.name], |r| {
            r.get(0)
        })
    }

    /// When the earliest pending row of this queue is due (unix ms), if there is one.
    pub fn next_due(&self) -> Result<Option<i64>> {
        let conn = self.db.read()?;
        conn.query_value(&NEXT_DUE_SQL, params![":queue" => self.name])
    }

    /// `next_due` inside a caller's transaction (a claim's answer).
    pub fn next_due_in(&self, tx: &Tx<'_>) -> Result<Option<i64>> {
        tx.query_value(&NEXT_DUE_SQL, params![":queue" => self.name])
    }

    /// Reads a row's current state (a session checks on a message waiting for its agent;
    /// tests and tools).
    pub fn state_of(&self, id: i64) -> Result<Option<RowState>> {
        let conn = self.db.read()?;
        conn.query_opt(&STATE_OF_SQL, params![":id" => id, ":queue" => self.name], |r| {
            Ok(from_columns! { r => RowState { state, attempts, next_attempt_at, last_error, reason } })
        })
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

/// Every field of one row, as `relayq show` tells its story. Times are unix ms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowDetail {
    pub id: i64,
    pub queue: QueueName,
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
    /// When a send started that has no answer recorded (unix ms): in flight, or, for a row not
    /// leased, an unknown outcome (the far end may have it).
    pub send_started: Option<i64>,
    /// The row whose lease holds this one's run (see `Queue::lease_held_run_in`): this row is
    /// shown leased, with that lease's holder and expiry, though the database keeps it pending.
    pub held_by: Option<i64>,
}

/// The columns a `RowDetail` is read from, by name.
macro_rules! detail_columns {
    () => {
        "id, queue, key, state, attempts, created_at, next_attempt_at, lease_owner,
         lease_expires_at, last_error, finished_at, reason, payload, receipt, took_ms,
         send_started"
    };
}

/// One row by id.
const ROW_DETAIL_SQL: Sql = Sql::same(concat!(
    "SELECT ",
    detail_columns!(),
    " FROM queue_rows WHERE id = :id"
));

/// The leased row whose run holds pending row `:id` of `:queue`/`:key`: its id and lease.
const HELD_BY_SQL: Sql = Sql::same(
    "SELECT id, lease_owner, lease_expires_at FROM queue_rows
     WHERE queue = :queue AND key = :key AND state = 'leased' AND id < :id
       AND run_through >= :id",
);

/// Rows of a key, written after `:id`, that were delivered.
const DELIVERED_AFTER_SQL: Sql = Sql::same(
    "SELECT COUNT(*) FROM queue_rows
     WHERE queue = :queue AND key = :key AND id > :id AND state = 'delivered'",
);

/// Row counts per queue, state and reason.
const COUNTS_SQL: Sql = Sql::same(
    "SELECT queue, state, reason, COUNT(*) AS count FROM queue_rows
     GROUP BY queue, state, reason ORDER BY queue, state, reason",
);

/// The oldest pending or leased row of each queue.
const OLDEST_PENDING_SQL: Sql = Sql::same(
    "SELECT queue, id, created_at FROM queue_rows WHERE id IN (
       SELECT MIN(id) FROM queue_rows WHERE state IN ('pending', 'leased') GROUP BY queue)
     ORDER BY queue",
);

/// Dead rows of every queue, or of `:queue`, oldest first.
const DEAD_ROWS_SQL: Sql = Sql::same(concat!(
    "SELECT ",
    detail_columns!(),
    " FROM queue_rows WHERE state = 'dead' AND (CAST(:queue AS TEXT) IS NULL OR queue = :queue)
     ORDER BY id"
));

/// The filters a page of dead rows shares with its count: a queue, a key, text the reason or
/// the last error holds, died before a time. (A filter left out is NULL; the casts tell
/// PostgreSQL its type, which `IS NULL` alone does not.)
macro_rules! dead_filters {
    ($find:literal) => {
        concat!(
            " FROM queue_rows WHERE state = 'dead'
           AND (CAST(:queue AS TEXT) IS NULL OR queue = :queue)
           AND (CAST(:key AS TEXT) IS NULL OR key = :key)
           AND (CAST(:reason AS TEXT) IS NULL OR ",
            $find,
            "(COALESCE(reason, ''), :reason) > 0
                OR ",
            $find,
            "(COALESCE(last_error, ''), :reason) > 0)
           AND (CAST(:before AS BIGINT) IS NULL OR finished_at < :before)"
        )
    };
}

/// One page of dead rows: after id `:after`, oldest first, at most `:limit`. Only the page's
/// rows are read with their payloads.
macro_rules! dead_page_sql {
    ($find:literal) => {
        concat!(
            "SELECT ",
            detail_columns!(),
            dead_filters!($find),
            " AND id > :after ORDER BY id LIMIT :limit"
        )
    };
}
/// (SQLite's `instr` is PostgreSQL's `strpos`.)
const DEAD_PAGE_SQL: Sql = Sql::two(dead_page_sql!("instr"), dead_page_sql!("strpos"));

/// How many dead rows the filters choose.
const DEAD_COUNT_SQL: Sql = Sql::two(
    concat!("SELECT COUNT(*)", dead_filters!("instr")),
    concat!("SELECT COUNT(*)", dead_filters!("strpos")),
);

/// Which dead rows a page shows (`GET /v1/dead`).
#[derive(Debug, Clone, Default)]
pub struct DeadQuery {
    pub queue: Option<QueueName>,
    pub key: Option<String>,
    /// Text the reason or the last error contains.
    pub reason: Option<String>,
    /// Died before this time (unix ms).
    pub died_before: Option<i64>,
    /// The last id of the previous page (0: from the first).
    pub after: i64,
    pub limit: usize,
}

/// Pending rows that failed and hold up their key, oldest first.
const STUCK_HEADS_SQL: Sql = Sql::same(concat!(
    "SELECT ",
    detail_columns!(),
    " FROM queue_rows r
     WHERE r.state = 'pending' AND r.last_error IS NOT NULL
       AND NOT EXISTS (
         SELECT 1 FROM queue_rows o
         WHERE o.queue = r.queue AND o.key = r.key
           AND o.state IN ('pending', 'leased') AND o.id < r.id)
     ORDER BY r.id LIMIT :limit"
));

fn detail_from_row(r: &Row<'_>) -> Result<RowDetail> {
    Ok(from_columns! { r => RowDetail {
        id, queue, key, state, attempts, created_at, next_attempt_at, lease_owner,
        lease_expires_at, last_error, finished_at, reason, payload, receipt, took_ms, send_started;
        held_by: None,
    } })
}

/// One row, whatever its queue and state.
/// A pending row of a held run is shown as its run's lease says: leased.
pub(crate) fn row_detail(conn: &dyn Executor, id: i64) -> Result<Option<RowDetail>> {
    let Some(mut row) = conn.query_opt(&ROW_DETAIL_SQL, params![":id" => id], detail_from_row)?
    else {
        return Ok(None);
    };
    if row.state == "pending" {
        let params = params![":queue" => row.queue, ":key" => row.key.as_str(), ":id" => row.id];
        let holder = conn.query_opt(&HELD_BY_SQL, params, |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        if let Some((head, owner, until)) = holder {
            row.state = "leased".into();
            row.held_by = Some(head);
            row.lease_owner = owner;
            row.lease_expires_at = until;
        }
    }
    Ok(Some(row))
}

/// Pending rows that failed and hold up their key (the oldest unfinished row of it), oldest
/// first, at most `limit`: what an operator looks at first.
pub(crate) fn stuck_heads(conn: &dyn Executor, limit: usize) -> Result<Vec<RowDetail>> {
    let limit = limit as i64;
    conn.query_all(
        &STUCK_HEADS_SQL,
        params![":limit" => limit],
        detail_from_row,
    )
}

/// Dead rows of every queue (or of `queue`), oldest first, as `relayq dead list` shows them.
pub(crate) fn dead_rows(conn: &dyn Executor, queue: Option<QueueName>) -> Result<Vec<RowDetail>> {
    conn.query_all(&DEAD_ROWS_SQL, params![":queue" => queue], detail_from_row)
}

/// A page of the dead rows `query` chooses, and how many it chooses in all.
pub(crate) fn dead_page(conn: &dyn Executor, query: &DeadQuery) -> Result<(Vec<RowDetail>, i64)> {
    let (queue, key, reason, before) = (query.queue, &query.key, &query.reason, query.died_before);
    let total = conn.query_value(
        &DEAD_COUNT_SQL,
        params![":queue" => queue, ":key" => key, ":reason" => reason, ":before" => before],
    )?;
    let limit = query.limit as i64;
    let rows = conn.query_all(
        &DEAD_PAGE_SQL,
        params![
            ":queue" => queue, ":key" => key, ":reason" => reason, ":before" => before,
            ":after" => query.after, ":limit" => limit,
        ],
        detail_from_row,
    )?;
    Ok((rows, total))
}

/// Row counts of one queue in one state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StateCount {
    pub queue: QueueName,
    pub state: String,
    /// Why terminal rows ended, when they say (e.g. `coalesced`, `session expired`).
    pub reason: Option<String>,
    pub count: i64,
}

/// The oldest unfinished row of a queue.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OldestPending {
    pub queue: QueueName,
    pub id: i64,
    pub created_at: i64,
}

/// How many rows of `row`'s key, written after it, were delivered (while they are kept):
/// replaying `row` now would put it out of order.
pub(crate) fn delivered_after(conn: &dyn Executor, row: &RowDetail) -> Result<i64> {
    let params = params![":queue" => row.queue, ":key" => row.key, ":id" => row.id];
    conn.query_value(&DELIVERED_AFTER_SQL, params)
}

/// Row counts per queue, state and (for finished rows) reason.
pub(crate) fn counts(conn: &dyn Executor) -> Result<Vec<StateCount>> {
    conn.query_all(&COUNTS_SQL, params![], |r| {
        Ok(from_columns! { r => StateCount { queue, state, reason, count } })
    })
}

/// The oldest unfinished row of each queue.
pub(crate) fn oldest_pending(conn: &dyn Executor) -> Result<Vec<OldestPending>> {
    conn.query_all(&OLDEST_PENDING_SQL, params![], |r| {
        Ok(from_columns! { r => OldestPending { queue, id, created_at } })
    })
}

/// Every key with unfinished rows (a lane: a session, a destination), oldest head first: how
/// many rows, how many leased, and its head row's state. Grouped through the active-rows index.
const LANES_SQL: Sql = Sql::same(
    "WITH active AS (
       SELECT queue, key, COUNT(*) AS rows,
              SUM(CASE WHEN state = 'leased' THEN 1 ELSE 0 END) AS leased, MIN(id) AS head
       FROM queue_rows WHERE state IN ('pending', 'leased') GROUP BY queue, key
     )
     SELECT a.queue, a.key, a.rows, a.leased, h.id AS head_id, h.attempts AS head_attempts,
            h.next_attempt_at AS head_next_attempt_at, h.last_error AS head_last_error,
            h.created_at AS head_created_at
     FROM active a JOIN queue_rows h ON h.id = a.head
     ORDER BY a.head LIMIT :limit",
);

/// The text a throttled row's last error starts with (the far end said "not now").
pub const THROTTLED: &str = "throttled: ";
/// The text an unreachable far end's row's last error starts with (nothing was sent).
pub const UNREACHABLE: &str = "unreachable: ";
/// The text a row handed to a far end that confirms by itself says while it waits (an agent's
/// prompt-submit event): it is still leased, not failed.
pub const SUBMITTED: &str = "submitted: ";

/// One key's unfinished rows: what the dashboard shows as a lane.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Lane {
    pub queue: QueueName,
    pub key: String,
    pub rows: i64,
    pub leased: i64,
    pub head_id: i64,
    pub head_attempts: u32,
    pub head_next_attempt_at: i64,
    pub head_last_error: Option<String>,
    pub head_created_at: i64,
}

impl Lane {
    /// What the lane is doing at `now`: `delivering`, `waiting for the agent` (to confirm the
    /// message handed to it), `due` (waiting for a worker), or
    /// waiting until `head_next_attempt_at` because the far end was `throttled` or
    /// `unreachable`, or the head failed (`backing off`; `blocked by a failing head` when rows
    /// wait behind it).
    pub fn state(&self, now: i64) -> &'static str {
        let error = self.head_last_error.as_deref().unwrap_or_default();
        match () {
            _ if self.leased > 0 && error.starts_with(SUBMITTED) => "waiting for the agent",
            _ if self.leased > 0 => "delivering",
            _ if self.head_next_attempt_at <= now => "due",
            _ if error.starts_with(THROTTLED) => "throttled",
            _ if error.starts_with(UNREACHABLE) => "unreachable",
            _ if self.rows > 1 => "blocked by a failing head",
            _ => "backing off",
        }
    }
}

/// The lanes, oldest head first, at most `limit`.
pub(crate) fn lanes(conn: &dyn Executor, limit: usize) -> Result<Vec<Lane>> {
    let limit = limit as i64;
    conn.query_all(&LANES_SQL, params![":limit" => limit], |r| {
        Ok(from_columns! { r => Lane {
            queue, key, rows, leased, head_id, head_attempts, head_next_attempt_at,
            head_last_error, head_created_at,
        } })
    })
}

/// Every statement of this file, for the test that prepares them all.
#[cfg(test)]
pub(super) const STATEMENTS: &[Sql] = &[
    ACTIVE_ROWS_SQL,
    LANES_SQL,
    DELIVERED_AFTER_SQL,
    COUNTS_SQL,
    OLDEST_PENDING_SQL,
    ACTIVE_KEYS_SQL,
    NEXT_DUE_SQL,
    STATE_OF_SQL,
    DEAD_ROWS_SQL,
    DEAD_PAGE_SQL,
    DEAD_COUNT_SQL,
    ROW_DETAIL_SQL,
    HELD_BY_SQL,
    STUCK_HEADS_SQL,
    HAS_KEY_SQL,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(rows: i64, leased: i64, due: i64, error: Option<&str>) -> Lane {
        Lane {
            queue: QueueName::Outbound,
            key: "k".into(),
            rows,
            leased,
            head_id: 1,
            head_attempts: 1,
            head_next_attempt_at: due,
            head_last_error: error.map(str::to_string),
            head_created_at: 0,
        }
    }

    #[test]
    fn a_lane_says_why_it_waits() {
        let now = 1_000;
        assert_eq!(lane(3, 1, 0, None).state(now), "delivering");
        assert_eq!(lane(3, 0, now, Some("HTTP 500")).state(now), "due");
        let throttled = format!("{THROTTLED}HTTP 429");
        assert_eq!(lane(1, 0, 2_000, Some(&throttled)).state(now), "throttled");
        let refused = format!("{UNREACHABLE}connection refused");
        assert_eq!(lane(1, 0, 2_000, Some(&refused)).state(now), "unreachable");
        assert_eq!(
            lane(2, 0, 2_000, Some("HTTP 500")).state(now),
            "blocked by a failing head"
        );
        assert_eq!(
            lane(1, 0, 2_000, Some("HTTP 500")).state(now),
            "backing off"
        );
    }

    /// What `status`, `relayq show`, the dead letters and the lanes read, on both backends.
    #[test]
    fn the_operators_reads_read_alike_on_both_backends() {
        use crate::storage::queue::testing::{lease, on_both, two_on_k_and_one_on};
        on_both(|db, q| {
            let name = db.name();
            let [a, b, c] = two_on_k_and_one_on(db, q, "j");
            let dying = lease(db, q, "k", 2_000);
            db.write_at(2_000, |tx| q.bury_in(tx, &dying, "HTTP 404: no such chat"))
                .unwrap();
            let failed = lease(db, q, "j", 2_000);
            db.write_at(2_000, |tx| q.retry_later_in(tx, &failed, "HTTP 500", None))
                .unwrap();

            let counts = db.read(counts).unwrap();
            let count = |state: &str| {
                counts
                    .iter()
                    .filter(|c| c.state == state)
                    .map(|c| c.count)
                    .sum::<i64>()
            };
            assert_eq!(
                (count("dead"), count("pending")),
                (1, 2),
                "{name}: {counts:?}"
            );
            let detail = db.read(|c| row_detail(c, a.id)).unwrap().unwrap();
            assert_eq!(
                (detail.state.as_str(), detail.attempts),
                ("dead", 1),
                "{name}"
            );
            assert_eq!(db.read(|c| delivered_after(c, &detail)).unwrap(), 0);
            let dead = db
                .read(|c| dead_rows(c, Some(QueueName::Outbound)))
                .unwrap();
            assert_eq!(dead.len(), 1, "{name}");
            let query = DeadQuery {
                reason: Some("no such chat".into()),
                limit: 10,
                ..DeadQuery::default()
            };
            let (page, total) = db.read(|c| dead_page(c, &query)).unwrap();
            assert_eq!(
                (page.len(), total),
                (1, 1),
                "{name}: found by its error's text"
            );
            let stuck = db.read(|c| stuck_heads(c, 10)).unwrap();
            assert_eq!(
                stuck.iter().map(|r| r.id).collect::<Vec<_>>(),
                [c.id],
                "{name}"
            );
            let lanes = db.read(|c| lanes(c, 10)).unwrap();
            let heads: Vec<i64> = lanes.iter().map(|l| l.head_id).collect();
            assert_eq!(heads, [b.id, c.id], "{name}: oldest head first");
            let oldest = db.read(oldest_pending).unwrap();
            assert_eq!(oldest[0].id, b.id, "{name}");
        });
    }
}
