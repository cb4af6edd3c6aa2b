//! Recording what became of a leased row, each fenced by its lease token: delivered (with a
//! receipt), throttled, retried later, dead, expired.

use std::time::Duration;

use super::{finish_in, Lease, Queue, Receipt, Retried};
use crate::error::Result;
use crate::params;
use crate::storage::clock::ms;
use crate::storage::sql::{Query, Sql};
use crate::storage::tx::Tx;

/// Delivered, with the receipt; fenced by the lease token.
const DELIVERED_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'delivered', finished_at = :now, receipt = :receipt,
                        took_ms = :took_ms, lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = :id AND state = 'leased' AND lease_token = :token",
);

/// Where a statement that records many deliveries at once finds its rows and their answers
/// (`:rows`, see [`Answers`]): on SQLite joined with the list as `d`; on PostgreSQL the rows
/// found through the primary key by their ids (`id = ANY`; see [`DELIVERED_ALL_SQL`]), each
/// row's answer looked up by its id ([`answer!`]). No join on PostgreSQL: with the answers as
/// a relation, a plan cached without statistics compared every row with every answer (a
/// nested loop, 26 ms for a run of 250 instead of 2), and the outbound drain fell to a third.
macro_rules! answered_rows {
    (sqlite) => {
        "FROM (SELECT value ->> 0 AS id, value ->> 1 AS token, value ->> 2 AS receipt,
                    value ->> 3 AS took_ms
               FROM json_each(:rows)) AS d
      WHERE queue_rows.id = d.id"
    };
    (postgres) => {
        "WHERE queue_rows.id = ANY (ARRAY(
                SELECT CAST(jsonb_object_keys(CAST(:rows AS jsonb)) AS BIGINT)))"
    };
}

/// A row's answer in `:rows`: its lease `token`, its `receipt`, its `took_ms`.
macro_rules! answer {
    (sqlite, token) => {
        "d.token"
    };
    (sqlite, receipt) => {
        "d.receipt"
    };
    (sqlite, took_ms) => {
        "d.took_ms"
    };
    (postgres, token) => {
        "CAST(CAST(:rows AS jsonb) -> CAST(queue_rows.id AS TEXT) ->> 0 AS BIGINT)"
    };
    (postgres, receipt) => {
        "CAST(:rows AS jsonb) -> CAST(queue_rows.id AS TEXT) ->> 1"
    };
    (postgres, took_ms) => {
        "CAST(CAST(:rows AS jsonb) -> CAST(queue_rows.id AS TEXT) ->> 2 AS BIGINT)"
    };
}

/// The answers a statement records at once: on SQLite a JSON list of `[id, token, receipt,
/// took_ms]` (read with `json_each`); on PostgreSQL a `jsonb` object from each id to its
/// `[token, receipt, took_ms]`, parsed once when bound and read by key.
#[derive(Debug)]
pub(crate) struct Answers<'a>(&'a [(&'a Lease, &'a Receipt)]);

impl Answers<'_> {
    fn answer(lease: &Lease, receipt: &Receipt) -> [serde_json::Value; 3] {
        [
            lease.token.into(),
            receipt.message_id.clone().into(),
            receipt.took.map(ms).into(),
        ]
    }
}

impl rusqlite::ToSql for Answers<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        let rows: Vec<_> = self
            .0
            .iter()
            .map(|(l, r)| {
                let [token, receipt, took_ms] = Answers::answer(l, r);
                serde_json::json!([l.id, token, receipt, took_ms])
            })
            .collect();
        Ok(serde_json::Value::from(rows).to_string().into())
    }
}

impl postgres::types::ToSql for Answers<'_> {
    fn to_sql(
        &self,
        _: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        let by_id: serde_json::Map<String, serde_json::Value> = self
            .0
            .iter()
            .map(|(l, r)| (l.id.to_string(), Answers::answer(l, r).into()))
            .collect();
        // `jsonb` in binary: a version byte, then the text.
        bytes::BufMut::put_u8(out, 1);
        serde_json::to_writer(bytes::BufMut::writer(out), &by_id)?;
        Ok(postgres::types::IsNull::No)
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        *ty == postgres::types::Type::JSONB
    }

    postgres::types::to_sql_checked!();
}

/// The text of [`DELIVERED_ALL_SQL`] in a dialect.
macro_rules! delivered_all_sql {
    ($dialect:tt, $leased:literal) => {
        concat!(
            "UPDATE queue_rows SET state = 'delivered', finished_at = :now, receipt = ",
            answer!($dialect, receipt),
            ", took_ms = ",
            answer!($dialect, took_ms),
            ", lease_owner = NULL, lease_expires_at = NULL
       ",
            answered_rows!($dialect),
            " AND queue_rows.state = ",
            $leased,
            " AND queue_rows.lease_token = ",
            answer!($dialect, token),
            "
     RETURNING queue_rows.id"
        )
    };
}

/// [`DELIVERED_SQL`] for many rows at once (`:rows`: [`Answers`]); answers the ids it marked
/// (a stale token's is not among them).
///
/// On PostgreSQL the rows are found through the primary key, by the ids (`id = ANY`), and
/// the state is compared with a value the planner cannot see (`(SELECT 'leased')`). Written
/// plainly, `state = 'leased'` matches the partial index of leased rows: when the statistics
/// were taken with few rows leased, the planner read every leased row of the queue through it
/// (and its dead entries) to hash-join them with the answers, 600 to 900 blocks for a run of
/// ten rows, the largest cost of the inbound flow at S = 100 (`relayq-bench tune-pg`). Public
/// so a test can pin its plan.
pub const DELIVERED_ALL_SQL: Sql = Sql::two(
    delivered_all_sql!(sqlite, "'leased'"),
    delivered_all_sql!(postgres, "(SELECT 'leased')"),
);

/// The row a held run is at (see `Queue::lease_held_run_in`), delivered: fenced by its token
/// and by the run it holds, for this owner.
const HELD_HEAD_DELIVERED_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'delivered', finished_at = :now, receipt = :receipt,
                        took_ms = :took_ms, lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = :id AND state = 'leased' AND lease_token = :token
                   AND lease_owner = :owner AND run_through = :through",
);

/// The text of [`DELIVERED_HELD_SQL`] in a dialect.
macro_rules! delivered_held_sql {
    ($dialect:tt, $pending:literal) => {
        concat!(
            "UPDATE queue_rows SET state = 'delivered', attempts = attempts + 1,
                        lease_token = lease_token + 1, finished_at = :now, receipt = ",
            answer!($dialect, receipt),
            ", took_ms = ",
            answer!($dialect, took_ms),
            "
       ",
            answered_rows!($dialect),
            " AND queue_rows.state = ",
            $pending,
            "
        AND queue_rows.lease_token = ",
            answer!($dialect, token),
            " - 1 AND queue_rows.id <= :through
     RETURNING queue_rows.id"
        )
    };
}

/// The rows of a held run after the one it was at, delivered: each still pending, with the
/// token before its lease's (`:rows` as for [`DELIVERED_ALL_SQL`]); counted and fenced as if
/// each had been leased. Run only once the row the run was at is recorded delivered in the
/// same transaction (`HELD_HEAD_DELIVERED_SQL`): that is the run's fence. Answers the ids it
/// marked. Public so a test can pin its plan.
pub const DELIVERED_HELD_SQL: Sql = Sql::two(
    delivered_held_sql!(sqlite, "'pending'"),
    delivered_held_sql!(postgres, "(SELECT 'pending')"),
);

/// The next row of a held run not recorded, leased for the rest of the run (what
/// `LEASE_HELD_HEAD_SQL` did for its first).
const HOLD_NEXT_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
            lease_owner = :owner, lease_token = lease_token + 1, lease_expires_at = :expires,
            send_started = :started, run_through = :through
     WHERE id = (SELECT MIN(id) FROM queue_rows
                  WHERE queue = :queue AND key = :key AND state = 'pending'
                    AND id > :last AND id <= :through)",
);

/// Pending again at `:at`, the attempt given back; fenced. This attempt was not sent, so the
/// send-started mark goes back to what the lease found (an earlier unknown outcome's stays).
const THROTTLE_SQL: Sql = Sql::two("UPDATE queue_rows SET state = 'pending', next_attempt_at = :at, last_error = :reason,
                        send_started = :was,
                        attempts = MAX(attempts - 1, 0), lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = :id AND state = 'leased' AND lease_token = :token", "UPDATE queue_rows SET state = 'pending', next_attempt_at = :at, last_error = :reason,
                        send_started = :was,
                        attempts = GREATEST(attempts - 1, 0), lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = :id AND state = 'leased' AND lease_token = :token");

/// Pending again at `:at` with the error; fenced. The send-started mark: set when this
/// attempt's outcome is unknown (`:unknown`; a row no one marked before its send, such as an
/// inbound one, is marked now); otherwise put back as the lease found it: a far end's answer
/// to this attempt says nothing of an earlier attempt that got none, which may still arrive.
const RETRY_LATER_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'pending', next_attempt_at = :at, last_error = :error,
                        lease_owner = NULL, lease_expires_at = NULL,
                        send_started = CASE WHEN :unknown THEN COALESCE(send_started, :now)
                                            ELSE :was END
                 WHERE id = :id AND state = 'leased' AND lease_token = :token",
);

/// The oldest active row of a key (the one its session delivers now), when its send started.
const OLDEST_STARTED_SQL: Sql = Sql::same(
    "SELECT id, payload, send_started FROM queue_rows
      WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased')
      ORDER BY id LIMIT 1",
);

/// Delivered on the far end's own word, whoever holds the lease (an agent's prompt-submit
/// event for a pasted message): the lease holder's later answer finds the row done.
const CONFIRMED_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'delivered', finished_at = :now, receipt = :receipt,
                        took_ms = :now - send_started, send_started = NULL, last_error = NULL,
                        lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = :id AND state IN ('pending', 'leased') AND send_started IS NOT NULL",
);

/// Submitted to a far end that confirms by itself (an agent's pane): still leased, the lease
/// pushed out to `:until`, the wait said in `last_error`; fenced.
const SUBMITTED_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET lease_expires_at = :until, last_error = :note,
                        send_started = COALESCE(send_started, :now)
                 WHERE id = :id AND state = 'leased' AND lease_token = :token",
);

impl Queue {
    /// The oldest active row of `key`, when a send of it started (a message pasted into its
    /// agent's pane, waiting for the agent to take it): its id, payload and when the send
    /// started.
    pub fn oldest_started_in(&self, tx: &Tx<'_>, key: &str) -> Result<Option<(i64, String, i64)>> {
        let params = params![":queue" => self.name, ":key" => key];
        let row = tx.query_opt(&OLDEST_STARTED_SQL, params, |r| {
            Ok((r.get(0)?, r.get(1)?, r.get::<Option<i64>, _>(2)?))
        })?;
        Ok(row.and_then(|(id, payload, started)| Some((id, payload, started?))))
    }

    /// Marks a row whose send started delivered on the far end's own confirmation, whoever
    /// holds its lease. False if it was no longer active or not started.
    pub fn confirm_in(&self, tx: &Tx<'_>, id: i64, receipt: &str) -> Result<bool> {
        let now = tx.now();
        let n = tx.exec(
            &CONFIRMED_SQL,
            params![":id" => id, ":receipt" => receipt, ":now" => now],
        )?;
        Ok(n == 1)
    }

    /// Keeps a leased row leased until `until` while its far end confirms it (see
    /// [`confirm_in`](Self::confirm_in)), with `note` as what it waits for. False if the token
    /// is stale (it may be confirmed already).
    pub fn submitted_in(&self, tx: &Tx<'_>, lease: &Lease, note: &str, until: i64) -> Result<bool> {
        self.release_held_in(tx, std::slice::from_ref(lease))?;
        let now = tx.now();
        let n = tx.exec(
            &SUBMITTED_SQL,
            params![
                ":id" => lease.id, ":token" => lease.token, ":until" => until, ":note" => note,
                ":now" => now,
            ],
        )?;
        Ok(n == 1)
    }

    /// Marks a leased row delivered. False (and nothing changed) if the token is stale.
    pub fn complete(&self, id: i64, token: i64, reason: Option<&str>) -> Result<bool> {
        self.write(|tx| self.complete_in(tx, id, token, reason))
    }

    /// `complete` inside a caller's transaction.
    pub fn complete_in(
        &self,
        tx: &Tx<'_>,
        id: i64,
        token: i64,
        reason: Option<&str>,
    ) -> Result<bool> {
        finish_in(tx, id, token, "delivered", reason, None)
    }

    /// Marks a leased row delivered by a channel, with the far end's receipt. False (and
    /// nothing changed) if the token is stale.
    pub fn delivered_in(&self, tx: &Tx<'_>, lease: &Lease, receipt: &Receipt) -> Result<bool> {
        self.release_held_in(tx, std::slice::from_ref(lease))?;
        let now = tx.now();
        let took_ms = receipt.took.map(ms);
        let n = tx.exec(
            &DELIVERED_SQL,
            params![
                ":id" => lease.id, ":token" => lease.token, ":now" => now,
                ":receipt" => receipt.message_id, ":took_ms" => took_ms,
            ],
        )?;
        Ok(n == 1)
    }

    /// [`delivered_in`](Self::delivered_in) for many rows, in one statement where each is a
    /// round trip (PostgreSQL); for each, in order, whether it was marked (false: its token is
    /// stale).
    ///
    /// The rows of a held run (see [`lease_held_run_in`](Self::lease_held_run_in)), from the
    /// one it is at, in order, are each written once, and the run is held by its next row.
    pub fn delivered_all_in(&self, tx: &Tx<'_>, rows: &[(&Lease, &Receipt)]) -> Result<Vec<bool>> {
        if let Some(marked) = self.delivered_held_in(tx, rows)? {
            return Ok(marked);
        }
        if rows.iter().any(|(l, _)| l.run.is_some()) {
            let leases: Vec<Lease> = rows.iter().map(|(l, _)| (*l).clone()).collect();
            self.release_held_in(tx, &leases)?;
        }
        if rows.len() == 1 || !tx.pays_per_statement() {
            return rows
                .iter()
                .map(|(lease, receipt)| self.delivered_in(tx, lease, receipt))
                .collect();
        }
        let marked: std::collections::HashSet<i64> = tx
            .query_all(
                &DELIVERED_ALL_SQL,
                params![":rows" => Answers(rows), ":now" => tx.now()],
                |r| r.get(0),
            )?
            .into_iter()
            .collect();
        Ok(rows.iter().map(|(l, _)| marked.contains(&l.id)).collect())
    }

    /// [`delivered_all_in`](Self::delivered_all_in) for the rows of one held run, in order
    /// from the row it is at: `None` when they are not that (other rows, or the run's lease is
    /// no longer this owner's: row by row then).
    fn delivered_held_in(
        &self,
        tx: &Tx<'_>,
        rows: &[(&Lease, &Receipt)],
    ) -> Result<Option<Vec<bool>>> {
        let Some(((head, receipt), rest)) = rows.split_first() else {
            return Ok(None);
        };
        let Some(run) = head.run else {
            return Ok(None);
        };
        let in_order = rows.windows(2).all(|w| w[0].0.id < w[1].0.id);
        if !in_order
            || rest
                .iter()
                .any(|(l, _)| l.run != Some(run) || l.key != head.key)
        {
            return Ok(None);
        }
        let (now, owner): (i64, &str) = (tx.now(), &self.owner);
        let n = tx.exec(
            &HELD_HEAD_DELIVERED_SQL,
            params![
                ":id" => head.id, ":token" => head.token, ":now" => now,
                ":receipt" => receipt.message_id, ":took_ms" => receipt.took.map(ms),
                ":owner" => owner, ":through" => run.through,
            ],
        )?;
        if n == 0 {
            return Ok(None);
        }
        let mut marked = vec![true];
        if !rest.is_empty() {
            let params =
                params![":rows" => Answers(rest), ":now" => now, ":through" => run.through];
            let done: std::collections::HashSet<i64> = tx
                .query_all(&DELIVERED_HELD_SQL, params, |r| r.get(0))?
                .into_iter()
                .collect();
            marked.extend(rest.iter().map(|(l, _)| done.contains(&l.id)));
        }
        let last = rows[rows.len() - 1].0.id;
        if last < run.through {
            let expires = now.saturating_add(ms(self.policy().lease_timeout));
            tx.exec(
                &HOLD_NEXT_SQL,
                params![
                    ":queue" => self.name, ":key" => head.key, ":owner" => owner,
                    ":expires" => expires, ":started" => run.started, ":through" => run.through,
                    ":last" => last,
                ],
            )?;
        }
        Ok(Some(marked))
    }

    /// The far end said "not now, until `wait` from now": the row is pending again, due then,
    /// and the attempt is not counted (being throttled is not a failure of the row). The reason
    /// is kept as its last error. Returns when it is due, or `None` if the token is stale.
    pub fn throttle_in(
        &self,
        tx: &Tx<'_>,
        lease: &Lease,
        reason: &str,
        wait: Duration,
    ) -> Result<Option<i64>> {
        self.release_held_in(tx, std::slice::from_ref(lease))?;
        let now = tx.now();
        let at = now.saturating_add(ms(wait));
        let n = tx.exec(
            &THROTTLE_SQL,
            params![
                ":id" => lease.id, ":token" => lease.token, ":at" => at, ":reason" => reason,
                ":was" => lease.send_started,
            ],
        )?;
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
        self.write(|tx| self.complete_with_error_in(tx, id, token, reason, error))
    }

    /// `complete_with_error` inside a caller's transaction.
    pub fn complete_with_error_in(
        &self,
        tx: &Tx<'_>,
        id: i64,
        token: i64,
        reason: &str,
        error: Option<&str>,
    ) -> Result<bool> {
        finish_in(tx, id, token, "delivered", Some(reason), error)
    }

    /// Ends many leased rows at once without running them (one transaction), each with its
    /// reason: rows a worker dropped (`coalesced`, `evicted`). Returns how many were still ours.
    pub fn drop_leased(&self, rows: &[(Lease, &str)]) -> Result<usize> {
        if rows.is_empty() {
            return Ok(0);
        }
        self.write(|tx| self.drop_leased_in(tx, rows))
    }

    /// `drop_leased` inside a caller's transaction.
    pub fn drop_leased_in(&self, tx: &Tx<'_>, rows: &[(Lease, &str)]) -> Result<usize> {
        let mut n = 0;
        for (lease, reason) in rows {
            self.release_held_in(tx, std::slice::from_ref(lease))?;
            n += finish_in(tx, lease.id, lease.token, "delivered", Some(reason), None)? as usize;
        }
        Ok(n)
    }

    /// Schedules another attempt after the policy's backoff (or `retry_after` when the far end
    /// said when); buries the row instead when the attempt limit is reached.
    pub fn retry_later(
        &self,
        lease: &Lease,
        error: &str,
        retry_after: Option<Duration>,
    ) -> Result<Retried> {
        self.write(|tx| self.retry_later_in(tx, lease, error, retry_after))
    }

    /// `retry_later` inside a caller's transaction. The send is known not to have reached the
    /// far end: the send-started mark is cleared.
    pub fn retry_later_in(
        &self,
        tx: &Tx<'_>,
        lease: &Lease,
        error: &str,
        retry_after: Option<Duration>,
    ) -> Result<Retried> {
        self.retry_in(tx, lease, error, retry_after, false)
    }

    /// `retry_later_in` for a send whose outcome is unknown (no answer after the request went
    /// out): the send-started mark stays, so the next attempt knows it may repeat the message.
    pub fn retry_unknown_in(&self, tx: &Tx<'_>, lease: &Lease, error: &str) -> Result<Retried> {
        self.retry_in(tx, lease, error, None, true)
    }

    fn retry_in(
        &self,
        tx: &Tx<'_>,
        lease: &Lease,
        error: &str,
        retry_after: Option<Duration>,
        unknown: bool,
    ) -> Result<Retried> {
        self.release_held_in(tx, std::slice::from_ref(lease))?;
        let now = tx.now();
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
            )?;
            return Ok(if done { Retried::Dead } else { Retried::Stale });
        }
        let delay = retry_after.unwrap_or_else(|| policy.delay_after(lease.attempts));
        let at = now.saturating_add(ms(delay));
        let n = tx.exec(
            &RETRY_LATER_SQL,
            params![
                ":id" => lease.id, ":token" => lease.token, ":at" => at, ":error" => error,
                ":unknown" => unknown, ":now" => now, ":was" => lease.send_started,
            ],
        )?;
        Ok(if n == 1 {
            Retried::Scheduled { at }
        } else {
            Retried::Stale
        })
    }

    #[cfg(any(test, feature = "test-helpers"))]
    /// Marks a leased row dead (a permanent failure). False if the token is stale.
    pub fn bury(&self, id: i64, token: i64, reason: &str) -> Result<bool> {
        self.write(|tx| finish_in(tx, id, token, "dead", Some(reason), Some(reason)))
    }

    /// Marks a leased row dead (a permanent failure) inside a caller's transaction. False if
    /// the token is stale.
    pub fn bury_in(&self, tx: &Tx<'_>, lease: &Lease, reason: &str) -> Result<bool> {
        self.release_held_in(tx, std::slice::from_ref(lease))?;
        let (id, token) = (lease.id, lease.token);
        finish_in(tx, id, token, "dead", Some(reason), Some(reason))
    }

    /// Expires a leased row (it cannot be delivered where it is addressed). False if the token
    /// is stale.
    pub fn expire_in(&self, tx: &Tx<'_>, lease: &Lease, reason: &str) -> Result<bool> {
        self.release_held_in(tx, std::slice::from_ref(lease))?;
        finish_in(tx, lease.id, lease.token, "expired", Some(reason), None)
    }
}

/// Every statement of this file, for the test that prepares them all.
#[cfg(test)]
pub(super) const STATEMENTS: &[Sql] = &[
    DELIVERED_SQL,
    DELIVERED_ALL_SQL,
    HELD_HEAD_DELIVERED_SQL,
    DELIVERED_HELD_SQL,
    HOLD_NEXT_SQL,
    THROTTLE_SQL,
    RETRY_LATER_SQL,
    OLDEST_STARTED_SQL,
    CONFIRMED_SQL,
    SUBMITTED_SQL,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::queue::testing::{lease, on_both, put};

    /// Every answer to a lease, fenced by its token, on both backends.
    #[test]
    fn answers_are_recorded_once_and_only_by_the_lease_holder_on_both_backends() {
        on_both(|db, q| {
            let at = |now, f: &dyn Fn(&Tx<'_>) -> Result<bool>| db.write_at(now, f).unwrap();
            let (a, b) = (put(db, q, "k", "a"), put(db, q, "k", "b"));

            // Retried after its backoff; the attempt counts. An unknown outcome keeps a mark.
            let first = lease(db, q, "k", 2_000);
            let retried = db.write_at(2_000, |tx| q.retry_unknown_in(tx, &first, "no answer"));
            let Retried::Scheduled { at: due } = retried.unwrap() else {
                panic!("{}: not scheduled", db.name())
            };
            let second = lease(db, q, "k", due);
            assert_eq!((second.id, second.attempts), (a.id, 2), "{}", db.name());
            assert_eq!(
                second.send_started,
                Some(2_000),
                "{}: the mark is kept",
                db.name()
            );
            // Throttled: due again, uncounted.
            let wait = Duration::from_secs(1);
            let when = db.write_at(due, |tx| q.throttle_in(tx, &second, "429", wait));
            assert_eq!(when.unwrap(), Some(due + 1_000));
            let third = lease(db, q, "k", due + 1_000);
            assert_eq!(
                third.attempts,
                2,
                "{}: a throttle gives the attempt back",
                db.name()
            );
            // Submitted, then confirmed by the far end's own word; the old lease is fenced.
            assert!(at(due + 1_000, &|tx| q.submitted_in(
                tx,
                &third,
                "waiting",
                due + 60_000
            )));
            let started = db
                .write_at(due + 1_000, |tx| q.oldest_started_in(tx, "k"))
                .unwrap();
            assert_eq!(started.map(|s| s.0), Some(a.id));
            assert!(at(due + 2_000, &|tx| q.confirm_in(tx, a.id, "m1")));
            let receipt = Receipt {
                message_id: Some("m1".into()),
                took: None,
            };
            assert!(
                !at(due + 2_000, &|tx| q.delivered_in(tx, &third, &receipt)),
                "fenced"
            );
            // The next row: delivered with its receipt, once.
            let next = lease(db, q, "k", due + 3_000);
            assert_eq!(next.id, b.id, "{}: in order", db.name());
            assert!(at(due + 3_000, &|tx| q.delivered_in(tx, &next, &receipt)));
            assert!(
                !at(due + 3_000, &|tx| q.bury_in(tx, &next, "late")),
                "already done"
            );
        });
    }

    /// Many deliveries in one statement: each fenced by its own token, each with its own
    /// receipt, on both backends.
    #[test]
    fn deliveries_recorded_together_are_each_fenced_and_keep_their_receipts_on_both_backends() {
        on_both(|db, q| {
            for key in ["k1", "k2", "k3"] {
                put(db, q, key, "m");
            }
            let leases: Vec<Lease> = ["k1", "k2", "k3"]
                .iter()
                .map(|k| lease(db, q, k, 2_000))
                .collect();
            let stale = Lease {
                token: leases[1].token + 1,
                ..leases[1].clone()
            };
            let receipts: Vec<Receipt> = (0..3)
                .map(|i| Receipt {
                    message_id: (i != 2).then(|| format!("r{i}")),
                    took: Some(Duration::from_millis(10 * i)),
                })
                .collect();
            let rows = [
                (&leases[0], &receipts[0]),
                (&stale, &receipts[1]),
                (&leases[2], &receipts[2]),
            ];
            let marked = db.write_at(3_000, |tx| q.delivered_all_in(tx, &rows));
            assert_eq!(marked.unwrap(), [true, false, true], "{}", db.name());
            type Stored = (String, Option<String>, Option<i64>, Option<i64>);
            let stored: Vec<Stored> = db
                .write_at(3_000, |tx| {
                    tx.query_all(
                        &Sql::same(
                            "SELECT state, receipt, took_ms, finished_at FROM queue_rows
                             ORDER BY id",
                        ),
                        params![],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                    )
                })
                .unwrap();
            assert_eq!(
                stored,
                [
                    ("delivered".into(), Some("r0".into()), Some(0), Some(3_000)),
                    ("leased".into(), None, None, None),
                    ("delivered".into(), None, Some(20), Some(3_000)),
                ],
                "{}",
                db.name()
            );
        });
    }
}
