//! Keeping the table tidy and recoverable: expiring rows past their age or of an ended
//! session, reclaiming leases of dead owners, pruning finished rows, reviving or purging dead
//! letters.

use std::time::Duration;

use super::lease::{settle_held_in, HeldHead};
use super::{id_filter, Queue, QueueName};
use crate::error::Result;
use crate::params;
use crate::storage::clock::ms;
use crate::storage::sql::{Params, Query, Sql};
use crate::storage::tx::Tx;

/// Expires a key's unfinished rows.
const EXPIRE_KEY_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'expired', finished_at = :now, reason = :reason,
                        lease_owner = NULL, lease_expires_at = NULL
                 WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased')",
);

/// Expires pending rows created before `:cutoff` (max age), but for the rows of a held run
/// (see `Queue::lease_held_run_in`): they are its holder's, screened when it leased them.
const EXPIRE_OVERDUE_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'expired', finished_at = :now, reason = 'max age'
                     WHERE queue = :queue AND state = 'pending' AND created_at < :cutoff
                       AND NOT EXISTS (
                         SELECT 1 FROM queue_rows h
                          WHERE h.queue = queue_rows.queue AND h.key = queue_rows.key
                            AND h.state = 'leased' AND h.id < queue_rows.id
                            AND h.run_through >= queue_rows.id)",
);

/// What a statement that takes leases back returns: the rows that held runs among them are
/// settled (see `HeldHead::read`).
macro_rules! returning_heads {
    () => {
        " RETURNING queue, key, id, run_through, send_started"
    };
}

/// Frees this owner's leases on a key, due at once.
const RELEASE_OWN_LEASES_SQL: Sql = Sql::same(concat!(
    "UPDATE queue_rows SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL
                     WHERE queue = :queue AND key = :key AND state = 'leased' AND lease_owner = :owner",
    returning_heads!()
));

/// Buries the pending rows of a key within an id range (the later parts of a split text whose
/// earlier part died).
const BURY_RANGE_SQL: Sql = Sql::same("UPDATE queue_rows SET state = 'dead', finished_at = :now, reason = :reason, last_error = :reason
                 WHERE queue = :queue AND key = :key AND id > :after AND id <= :upto
                   AND state = 'pending'");

/// Returns expired leases to pending, due at once.
const RECLAIM_EXPIRED_SQL: Sql = Sql::same(concat!(
    "UPDATE queue_rows SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,
                    next_attempt_at = :now
             WHERE state = 'leased' AND lease_expires_at <= :now",
    returning_heads!()
));

/// Returns every other owner's leases to pending.
macro_rules! reclaim_foreign_sql {
    ($min:literal) => {
        concat!(
            "UPDATE queue_rows SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,
                    next_attempt_at = ",
            $min,
            "(next_attempt_at, :now)
             WHERE state = 'leased' AND lease_owner IS DISTINCT FROM :owner",
            returning_heads!()
        )
    };
}
const RECLAIM_FOREIGN_SQL: Sql =
    Sql::two(reclaim_foreign_sql!("MIN"), reclaim_foreign_sql!("LEAST"));

/// The ids of the `:ids` JSON list (NULL: every row), in each dialect.
macro_rules! chosen_ids {
    (sqlite) => {
        "(:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))"
    };
    (postgres) => {
        "(CAST(:ids AS TEXT) IS NULL OR id IN (
            SELECT CAST(jsonb_array_elements_text(CAST(CAST(:ids AS TEXT) AS jsonb)) AS BIGINT)))"
    };
}

/// Makes dead rows pending with a fresh attempt count.
macro_rules! revive_dead_sql {
    ($dialect:tt) => {
        concat!(
            "UPDATE queue_rows SET state = 'pending', attempts = 0, next_attempt_at = :now,
                    finished_at = NULL, reason = NULL, send_started = NULL
             WHERE state = 'dead' AND ",
            chosen_ids!($dialect),
            " RETURNING id, queue, key"
        )
    };
}
const REVIVE_DEAD_SQL: Sql = Sql::two(revive_dead_sql!(sqlite), revive_dead_sql!(postgres));

/// Deletes dead rows.
macro_rules! purge_dead_sql {
    ($dialect:tt) => {
        concat!(
            "DELETE FROM queue_rows WHERE state = 'dead' AND ",
            chosen_ids!($dialect),
            " RETURNING id"
        )
    };
}
const PURGE_DEAD_SQL: Sql = Sql::two(purge_dead_sql!(sqlite), purge_dead_sql!(postgres));

/// Rows deleted per prune transaction, so writers are not held up for long.
const PRUNE_SLICE: usize = 5000;

/// One slice of terminal rows of one state, finished before `:before`. The `NOT IN` repeats
/// SQLite's finished index's condition word for word, or SQLite would not use it; PostgreSQL
/// has no such index (it cost every delivery more than it saved here) and reads the table.
/// Public so a test can pin its plan.
pub const PRUNE_SQL: Sql = Sql::same(
    "DELETE FROM queue_rows WHERE id IN (
       SELECT id FROM queue_rows
       WHERE queue = :queue AND state NOT IN ('pending', 'leased') AND state = :state
         AND finished_at < :before
       LIMIT 5000)",
);

impl Queue {
    /// At daemon start: the unfinished rows left from before `started` whose kind the
    /// policy's `replay_kinds` does not name end as expired, reason `superseded`. Returns how
    /// many. Only rows from before every live node's start: on a shared database the others'
    /// progress is theirs to send (a node joining beside them superseded it, silently).
    pub fn supersede_stale_in(&self, tx: &Tx<'_>, started: i64) -> Result<usize> {
        let Some(kinds) = self.policy().replay_kinds.clone() else {
            return Ok(0);
        };
        let kinds = serde_json::to_string(&kinds).expect("a list of strings serialises");
        let now = tx.now();
        let live = crate::storage::nodes::earliest_live_start(tx, now)?;
        let started = live.map_or(started, |live| live.min(started));
        let params = params![
            ":queue" => self.name, ":now" => now, ":started" => started, ":kinds" => kinds,
        ];
        tx.exec(&SUPERSEDE_SQL, params)
    }

    /// Expires every pending or leased row of `key` (the session ended). Returns how many.
    pub fn expire_key(&self, key: &str, reason: &str) -> Result<usize> {
        self.write(|tx| self.expire_key_in(tx, key, reason))
    }

    /// `expire_key` inside a caller's transaction.
    pub fn expire_key_in(&self, tx: &Tx<'_>, key: &str, reason: &str) -> Result<usize> {
        let now = tx.now();
        tx.exec(
            &EXPIRE_KEY_SQL,
            params![":queue" => self.name, ":key" => key, ":now" => now, ":reason" => reason],
        )
    }

    /// Buries the pending rows of `key` with ids in `after + 1 ..= upto`, for `reason`: rows
    /// written together with a row that died and meaningless without it (the later parts of a
    /// split text). Their dead letters go back together with `relayq dead retry`.
    pub fn bury_range_in(
        &self,
        tx: &Tx<'_>,
        key: &str,
        (after, upto): (i64, i64),
        reason: &str,
    ) -> Result<usize> {
        let now = tx.now();
        tx.exec(
            &BURY_RANGE_SQL,
            params![
                ":queue" => self.name, ":key" => key, ":after" => after, ":upto" => upto,
                ":reason" => reason, ":now" => now,
            ],
        )
    }

    #[cfg(any(test, feature = "test-helpers"))]
    /// Expires pending rows older than the policy's `max_age`, if it has one and its
    /// `expire_action` is `expire`.
    pub fn expire_overdue(&self) -> Result<usize> {
        self.write(|tx| self.expire_overdue_in(tx))
    }

    /// `expire_overdue` inside a caller's transaction.
    pub fn expire_overdue_in(&self, tx: &Tx<'_>) -> Result<usize> {
        match self.policy().expires_after() {
            Some(max_age) => self.expire_older_in(tx, max_age),
            None => Ok(0),
        }
    }

    /// Expires pending rows older than `max_age`.
    pub(crate) fn expire_older_in(&self, tx: &Tx<'_>, max_age: Duration) -> Result<usize> {
        let now = tx.now();
        let cutoff = now.saturating_sub(ms(max_age));
        let params = params![":queue" => self.name, ":now" => now, ":cutoff" => cutoff];
        tx.exec(&EXPIRE_OVERDUE_SQL, params)
    }

    /// Puts this process's leases on `key` back to pending: used when the worker holding them
    /// died inside this process, so its replacement need not wait for the leases to expire.
    pub fn release_own_leases(&self, key: &str) -> Result<usize> {
        self.write(|tx| self.release_own_leases_in(tx, key))
    }

    /// `release_own_leases` inside a caller's transaction.
    pub fn release_own_leases_in(&self, tx: &Tx<'_>, key: &str) -> Result<usize> {
        let owner: &str = &self.owner;
        let params = params![":queue" => self.name, ":key" => key, ":owner" => owner];
        reclaim_in(tx, &RELEASE_OWN_LEASES_SQL, params)
    }

    /// Deletes delivered and expired rows that finished more than `older_than` ago (the
    /// policy's retention when `None`), and dead rows past `dead_retention`. Dead letters wait
    /// for an operator: `older_than` applies to them too only with `include_dead`. Deletes in
    /// slices so writers are not starved.
    pub fn prune(&self, older_than: Option<Duration>, include_dead: bool) -> Result<usize> {
        self.prune_reporting(older_than, include_dead, |_| {})
    }

    /// [`Queue::prune`], telling `pruned` the running total after each slice (for progress).
    pub fn prune_reporting(
        &self,
        older_than: Option<Duration>,
        include_dead: bool,
        mut pruned: impl FnMut(usize),
    ) -> Result<usize> {
        let now = self.now();
        let policy = self.policy();
        let finished_cutoff = now.saturating_sub(ms(older_than.unwrap_or(policy.retention)));
        let mut total = 0;
        total += self.prune_state("delivered", finished_cutoff, total, &mut pruned)?;
        total += self.prune_state("expired", finished_cutoff, total, &mut pruned)?;
        let dead_keep = match include_dead {
            true => older_than.or(policy.dead_retention),
            false => policy.dead_retention,
        };
        if let Some(keep) = dead_keep {
            let cutoff = now.saturating_sub(ms(keep));
            total += self.prune_state("dead", cutoff, total, &mut pruned)?;
        }
        Ok(total)
    }

    fn prune_state(
        &self,
        state: &str,
        cutoff: i64,
        before: usize,
        pruned: &mut impl FnMut(usize),
    ) -> Result<usize> {
        let mut total = 0;
        loop {
            let n = self.write(|tx| {
                let params = params![":queue" => self.name, ":state" => state, ":before" => cutoff];
                tx.exec(&PRUNE_SQL, params)
            })?;
            total += n;
            pruned(before + total);
            if n < PRUNE_SLICE {
                return Ok(total);
            }
        }
    }
}

/// Returns rows whose lease expired to pending, due at once.
pub(crate) fn reclaim_expired_in(tx: &Tx<'_>) -> Result<usize> {
    let now = tx.now();
    reclaim_in(tx, &RECLAIM_EXPIRED_SQL, params![":now" => now])
}

/// Runs `sql`, a statement that takes leases back `returning_heads!()`, and settles the runs
/// those leases held. Returns how many leases it took back.
pub(crate) fn reclaim_in(tx: &Tx<'_>, sql: &Sql, params: Params<'_>) -> Result<usize> {
    let rows = tx.query_all(sql, params, HeldHead::read)?;
    let n = rows.len();
    let heads: Vec<HeldHead> = rows.into_iter().flatten().collect();
    settle_held_in(tx, &heads)?;
    Ok(n)
}

/// Returns every lease not held by `owner` to pending: at daemon start, any other owner is a
/// previous process (one daemon per database is enforced by a lock file).
pub(crate) fn reclaim_foreign_in(tx: &Tx<'_>, owner: &str) -> Result<usize> {
    let now = tx.now();
    reclaim_in(
        tx,
        &RECLAIM_FOREIGN_SQL,
        params![":owner" => owner, ":now" => now],
    )
}

/// Makes dead rows pending again with a fresh attempt count (the last error is kept), due now.
/// `None` revives every dead row. Returns the (id, queue, key) of each row revived.
pub(crate) fn revive_dead_in(
    tx: &Tx<'_>,
    ids: Option<&[i64]>,
) -> Result<Vec<(i64, QueueName, String)>> {
    let (now, ids) = (tx.now(), id_filter(ids));
    tx.query_all(
        &REVIVE_DEAD_SQL,
        params![":ids" => ids, ":now" => now],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

/// Deletes dead rows (`None`: every one). Returns the ids deleted.
pub(crate) fn purge_dead_in(tx: &Tx<'_>, ids: Option<&[i64]>) -> Result<Vec<i64>> {
    let ids = id_filter(ids);
    tx.query_all(&PURGE_DEAD_SQL, params![":ids" => ids], |r| r.get(0))
}

/// Ends the unfinished rows created before `:started` whose kind is not in `:kinds` (a JSON
/// list): stale progress a new daemon must not send.
const SUPERSEDE_SQL: Sql = Sql::two(
    "UPDATE queue_rows SET state = 'expired', finished_at = :now,
            reason = 'superseded', lease_owner = NULL, lease_expires_at = NULL
     WHERE queue = :queue AND state IN ('pending', 'leased') AND created_at < :started
       AND COALESCE(json_extract(payload, '$.kind'), 'final')
           NOT IN (SELECT value FROM json_each(:kinds))",
    "UPDATE queue_rows SET state = 'expired', finished_at = :now,
            reason = 'superseded', lease_owner = NULL, lease_expires_at = NULL
     WHERE queue = :queue AND state IN ('pending', 'leased') AND created_at < :started
       AND COALESCE(CAST(payload AS jsonb) ->> 'kind', 'final')
           NOT IN (SELECT jsonb_array_elements_text(CAST(CAST(:kinds AS TEXT) AS jsonb)))",
);

/// Every statement of this file, for the test that prepares them all.
#[cfg(test)]
pub(super) const STATEMENTS: &[Sql] = &[
    SUPERSEDE_SQL,
    EXPIRE_KEY_SQL,
    EXPIRE_OVERDUE_SQL,
    BURY_RANGE_SQL,
    RELEASE_OWN_LEASES_SQL,
    RECLAIM_EXPIRED_SQL,
    RECLAIM_FOREIGN_SQL,
    REVIVE_DEAD_SQL,
    PURGE_DEAD_SQL,
    PRUNE_SQL,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::queue::lease::DUE_HEADS_SQL;
    use crate::storage::queue::testing::{lease, on_both, two_on_k_and_one_on};

    /// Reclaiming, expiring, burying, reviving and purging, and the due heads a claim reads
    /// (with its skip list), on both backends.
    #[test]
    fn upkeep_and_the_claim_query_read_alike_on_both_backends() {
        on_both(|db, q| {
            let name = db.name();
            let [a, _, c] = two_on_k_and_one_on(db, q, "skipped");
            let heads = |skip: &str| {
                db.write_at(2_000, |tx| {
                    let params = params![
                        ":queue" => q.name, ":now" => tx.now(), ":skip" => skip, ":limit" => 10i64,
                    ];
                    tx.query_all(&DUE_HEADS_SQL, params, |r| r.get::<i64, _>(0))
                })
                .unwrap()
            };
            assert_eq!(
                heads("[\"skipped\"]"),
                [a.id],
                "{name}: only heads, not skipped keys"
            );
            assert_eq!(heads("[]"), [a.id, c.id], "{name}");

            // A lease past its expiry goes back; another owner's lease is taken back at start.
            let late = lease(db, q, "k", 2_000).expires_at;
            assert_eq!(db.write_at(late, reclaim_expired_in).unwrap(), 1, "{name}");
            lease(db, q, "k", late);
            let foreign = db.write_at(late, |tx| reclaim_foreign_in(tx, "another daemon"));
            assert_eq!(foreign.unwrap(), 1, "{name}");

            // Dead letters: buried by range, revived by id, purged.
            let buried = db.write_at(3_000, |tx| q.bury_range_in(tx, "k", (0, a.id), "cut"));
            assert_eq!(buried.unwrap(), 1, "{name}");
            let revived = db
                .write_at(4_000, |tx| revive_dead_in(tx, Some(&[a.id])))
                .unwrap();
            assert_eq!(
                revived,
                [(a.id, QueueName::Outbound, "k".to_string())],
                "{name}"
            );
            db.write_at(5_000, |tx| q.bury_range_in(tx, "k", (0, a.id), "cut"))
                .unwrap();
            assert_eq!(
                db.write_at(6_000, |tx| purge_dead_in(tx, None)).unwrap(),
                [a.id]
            );
            // The session ended: its rows expire.
            assert_eq!(
                db.write_at(7_000, |tx| q.expire_key_in(tx, "k", "ended"))
                    .unwrap(),
                1
            );
        });
    }
}
