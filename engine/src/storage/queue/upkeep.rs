//! Keeping the table tidy and recoverable: expiring rows past their age or of an ended
//! session, reclaiming leases of dead owners, pruning finished rows, reviving or purging dead
//! letters.

use crate::tx::Tx;
use std::time::Duration;

use rusqlite::named_params;

use super::{id_filter, Queue, QueueName};
use crate::clock::ms;
use crate::db::query_all;
use crate::error::Result;

/// Expires a key's unfinished rows.
const EXPIRE_KEY_SQL: &str =
    "UPDATE queue_rows SET state = 'expired', finished_at = :now, reason = :reason,
                        lease_owner = NULL, lease_expires_at = NULL
                 WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased')";

/// Expires pending rows created before `:cutoff` (max age).
const EXPIRE_OVERDUE_SQL: &str =
    "UPDATE queue_rows SET state = 'expired', finished_at = :now, reason = 'max age'
                     WHERE queue = :queue AND state = 'pending' AND created_at < :cutoff";

/// Frees this owner's leases on a key, due at once.
const RELEASE_OWN_LEASES_SQL: &str = "UPDATE queue_rows SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL
                     WHERE queue = :queue AND key = :key AND state = 'leased' AND lease_owner = :owner";

/// Buries the pending rows of a key within an id range (the later parts of a split text whose
/// earlier part died).
const BURY_RANGE_SQL: &str =
    "UPDATE queue_rows SET state = 'dead', finished_at = :now, reason = :reason, last_error = :reason
                 WHERE queue = :queue AND key = :key AND id > :after AND id <= :upto
                   AND state = 'pending'";

/// Returns expired leases to pending, due at once.
const RECLAIM_EXPIRED_SQL: &str =
    "UPDATE queue_rows SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,
                    next_attempt_at = :now
             WHERE state = 'leased' AND lease_expires_at <= :now";

/// Returns every other owner's leases to pending.
const RECLAIM_FOREIGN_SQL: &str =
    "UPDATE queue_rows SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,
                    next_attempt_at = MIN(next_attempt_at, :now)
             WHERE state = 'leased' AND lease_owner IS NOT :owner";

/// Makes dead rows pending with a fresh attempt count.
const REVIVE_DEAD_SQL: &str =
    "UPDATE queue_rows SET state = 'pending', attempts = 0, next_attempt_at = :now,
                    finished_at = NULL, reason = NULL, send_started = NULL
             WHERE state = 'dead' AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
             RETURNING id, queue, key";

/// Deletes dead rows.
const PURGE_DEAD_SQL: &str = "DELETE FROM queue_rows
             WHERE state = 'dead' AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
             RETURNING id";

/// Rows deleted per prune transaction, so writers are not held up for long.
const PRUNE_SLICE: usize = 5000;

/// One slice of terminal rows of one state, finished before `:before`. The
/// `NOT IN` repeats the finished index's condition word for word, or SQLite would not use it.
/// Public so a test can pin its plan.
pub const PRUNE_SQL: &str = "DELETE FROM queue_rows WHERE id IN (
       SELECT id FROM queue_rows
       WHERE queue = :queue AND state NOT IN ('pending', 'leased') AND state = :state
         AND finished_at < :before
       LIMIT 5000)";

impl Queue {
    /// At daemon start: the unfinished rows left from before `started` whose kind the
    /// policy's `replay_kinds` does not name end as expired, reason `superseded`. Returns how
    /// many.
    pub fn supersede_stale(&self, started: i64) -> Result<usize> {
        let Some(kinds) = self.policy().replay_kinds.clone() else {
            return Ok(0);
        };
        let kinds = serde_json::to_string(&kinds).expect("a list of strings serialises");
        self.write(|tx| {
            let now = tx.now();
            let params = named_params! {
                ":queue": self.name, ":now": now, ":started": started, ":kinds": kinds,
            };
            Ok(tx
                .sqlite()?
                .prepare_cached(SUPERSEDE_SQL)?
                .execute(params)?)
        })
    }

    /// Expires every pending or leased row of `key` (the session ended). Returns how many.
    pub fn expire_key(&self, key: &str, reason: &str) -> Result<usize> {
        self.write(|tx| self.expire_key_in(tx, key, reason))
    }

    /// `expire_key` inside a caller's transaction.
    pub fn expire_key_in(&self, tx: &Tx<'_>, key: &str, reason: &str) -> Result<usize> {
        let now = tx.now();
        Ok(tx.sqlite()?.prepare_cached(EXPIRE_KEY_SQL)?.execute(
            named_params! {":queue": self.name, ":key": key, ":now": now, ":reason": reason},
        )?)
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
        Ok(tx
            .sqlite()?
            .prepare_cached(BURY_RANGE_SQL)?
            .execute(named_params! {
                ":queue": self.name, ":key": key, ":after": after, ":upto": upto,
                ":reason": reason, ":now": now,
            })?)
    }

    /// Expires pending rows older than the policy's `max_age`, if it has one and its
    /// `expire_action` is `expire`.
    pub fn expire_overdue(&self) -> Result<usize> {
        let Some(max_age) = self.policy().expires_after() else {
            return Ok(0);
        };
        let now = self.now();
        let cutoff = now.saturating_sub(ms(max_age));
        self.db.write(|tx| {
            Ok(tx
                .prepare_cached(EXPIRE_OVERDUE_SQL)?
                .execute(named_params! {":queue": self.name, ":now": now, ":cutoff": cutoff})?)
        })
    }

    /// Puts this process's leases on `key` back to pending: used when the worker holding them
    /// died inside this process, so its replacement need not wait for the leases to expire.
    pub fn release_own_leases(&self, key: &str) -> Result<usize> {
        self.db.write(|tx| {
            Ok(tx.prepare_cached(RELEASE_OWN_LEASES_SQL)?.execute(
                named_params! {":queue": self.name, ":key": key, ":owner": &*self.owner},
            )?)
        })
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
            let n = self.db.write(|tx| {
                Ok(tx.prepare_cached(PRUNE_SQL)?.execute(
                    named_params! {":queue": self.name, ":state": state, ":before": cutoff},
                )?)
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
    Ok(tx
        .sqlite()?
        .prepare_cached(RECLAIM_EXPIRED_SQL)?
        .execute(named_params! {":now": now})?)
}

/// Returns every lease not held by `owner` to pending: at daemon start, any other owner is a
/// previous process (one daemon per database is enforced by a lock file).
pub(crate) fn reclaim_foreign_in(tx: &Tx<'_>, owner: &str) -> Result<usize> {
    let now = tx.now();
    Ok(tx
        .sqlite()?
        .prepare_cached(RECLAIM_FOREIGN_SQL)?
        .execute(named_params! {":owner": owner, ":now": now})?)
}

/// Makes dead rows pending again with a fresh attempt count (the last error is kept), due now.
/// `None` revives every dead row. Returns the (id, queue, key) of each row revived.
pub(crate) fn revive_dead_in(
    tx: &Tx<'_>,
    ids: Option<&[i64]>,
) -> Result<Vec<(i64, QueueName, String)>> {
    let now = tx.now();
    let params = named_params! {":ids": id_filter(ids), ":now": now};
    query_all(tx.sqlite()?, REVIVE_DEAD_SQL, params, |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })
}

/// Deletes dead rows (`None`: every one). Returns the ids deleted.
pub(crate) fn purge_dead_in(tx: &Tx<'_>, ids: Option<&[i64]>) -> Result<Vec<i64>> {
    query_all(
        tx.sqlite()?,
        PURGE_DEAD_SQL,
        named_params! {":ids": id_filter(ids)},
        |r| r.get(0),
    )
}

/// Ends the unfinished rows created before `:started` whose kind is not in `:kinds` (a JSON
/// list): stale progress a new daemon must not send.
const SUPERSEDE_SQL: &str = "UPDATE queue_rows SET state = 'expired', finished_at = :now,
            reason = 'superseded', lease_owner = NULL, lease_expires_at = NULL
     WHERE queue = :queue AND state IN ('pending', 'leased') AND created_at < :started
       AND COALESCE(json_extract(payload, '$.kind'), 'final')
           NOT IN (SELECT value FROM json_each(:kinds))";

/// Every statement of this file, for the test that prepares them all.
#[cfg(test)]
pub(super) const STATEMENTS: &[&str] = &[
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
