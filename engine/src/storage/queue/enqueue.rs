//! Writing rows: one, many, or already expired; a dedup key finds the row it repeats.

use super::{Enqueued, NewRow, Queue};
use crate::error::{EngineError, Result};
use crate::params;
use crate::storage::sql::{Query, Sql};
use crate::storage::tx::Tx;

/// Writes a row, unless one with the same dedup key exists.
macro_rules! insert_sql {
    ($tail:literal) => {
        concat!(
            "INSERT INTO queue_rows (queue, key, dedup_key, payload, created_at, next_attempt_at,
                                     state, finished_at, reason)
             VALUES (:queue, :key, :dedup_key, :payload, :now, :now, :state, :finished_at, :reason)
             ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING",
            $tail
        )
    };
}
const INSERT_SQL: Sql = Sql::two(insert_sql!(""), insert_sql!(" RETURNING id"));

/// An inbound row: pending, or written expired for `:reason` when the session registry shows
/// its key ended; answers its id and state. One statement where two would do (look, then
/// write), because on PostgreSQL each is a round trip. (SQLite reads `INSERT … SELECT … ON
/// CONFLICT` only with a `WHERE` on the `SELECT`; PostgreSQL types a parameter in a `SELECT`
/// list only by its cast.)
const INSERT_FOR_SESSION_SQL: Sql = Sql::same(
    "INSERT INTO queue_rows (queue, key, dedup_key, payload, created_at, next_attempt_at,
                            state, finished_at, reason)
     SELECT CAST(:queue AS TEXT), CAST(:key AS TEXT), CAST(:dedup_key AS TEXT),
            CAST(:payload AS TEXT), CAST(:now AS BIGINT), CAST(:now AS BIGINT),
            CASE WHEN ended THEN 'expired' ELSE 'pending' END,
            CASE WHEN ended THEN CAST(:now AS BIGINT) END,
            CASE WHEN ended THEN CAST(:reason AS TEXT) END
       FROM (SELECT EXISTS (SELECT 1 FROM sessions WHERE key = :key AND state = 'ended')
                    AS ended) AS session
      WHERE TRUE
     ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
     RETURNING id, state",
);

impl Queue {
    /// Writes one row, or finds the row with the same dedup key and writes nothing.
    pub fn enqueue(&self, row: &NewRow) -> Result<Enqueued> {
        self.write(|tx| self.enqueue_in(tx, row))
    }

    /// Writes many rows in one transaction (one commit, one fsync).
    pub fn enqueue_many(&self, rows: &[NewRow]) -> Result<Vec<Enqueued>> {
        self.write(|tx| rows.iter().map(|r| self.enqueue_in(tx, r)).collect())
    }

    /// Enqueue inside a caller's transaction, so a handler's effects and its rows commit together.
    /// Its only write is one statement (see `Atomicity::OneStatement`).
    pub fn enqueue_in(&self, tx: &Tx<'_>, row: &NewRow) -> Result<Enqueued> {
        self.insert_in(tx, row, None)
    }

    /// Writes the row already expired, for `reason`: it is kept (and deduplicates its retries)
    /// but never delivered. One write statement, like `enqueue_in`.
    pub fn enqueue_expired_in(
        &self,
        tx: &Tx<'_>,
        row: &NewRow,
        reason: &'static str,
    ) -> Result<Enqueued> {
        self.insert_in(tx, row, Some(reason))
    }

    /// Writes a row for the agent session named by its key: pending, or already expired for
    /// `ended` when the session registry shows the session ended (its agent exited and no
    /// `session_start` came since). One statement where each is a round trip (PostgreSQL),
    /// unless a depth limit is set: only a row that will be pending is held to it.
    pub fn enqueue_for_session_in(
        &self,
        tx: &Tx<'_>,
        row: &NewRow,
        ended: &'static str,
    ) -> Result<Enqueued> {
        let policy = self.policy();
        let limited = policy.max_depth.is_some() || policy.max_key_depth.is_some();
        if limited || !tx.pays_per_statement() || row.key.is_empty() {
            return match crate::storage::sessions::is_ended(tx, &row.key)? {
                true => self.enqueue_expired_in(tx, row, ended),
                false => self.enqueue_in(tx, row),
            };
        }
        let inserted: Option<(i64, String)> = tx.query_opt(
            &INSERT_FOR_SESSION_SQL,
            params![
                ":queue" => self.name, ":key" => row.key, ":dedup_key" => row.dedup_key,
                ":payload" => row.payload, ":now" => tx.now(), ":reason" => ended,
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let written = inserted.map(|(id, state)| (id, (state == "expired").then_some(ended)));
        self.written_or_repeated(tx, row, written)
    }

    fn insert_in(
        &self,
        tx: &Tx<'_>,
        row: &NewRow,
        expired: Option<&'static str>,
    ) -> Result<Enqueued> {
        let now = tx.now();
        if row.key.is_empty() {
            return Err(EngineError::Invalid("the ordering key is empty".into()));
        }
        if expired.is_none() {
            if let Some(repeat) = self.refuse_past_depth(tx, row)? {
                return Ok(repeat);
            }
        }
        let state = if expired.is_some() {
            "expired"
        } else {
            "pending"
        };
        let finished_at = expired.map(|_| now);
        let inserted = tx.insert(
            &INSERT_SQL,
            params![
                ":queue" => self.name, ":key" => row.key, ":dedup_key" => row.dedup_key,
                ":payload" => row.payload, ":now" => now, ":state" => state,
                ":finished_at" => finished_at, ":reason" => expired,
            ],
        )?;
        self.written_or_repeated(tx, row, inserted.map(|id| (id, expired)))
    }

    /// The row an insert `written` (its id, and why it is expired), or else the row with the
    /// same dedup key, which made the insert do nothing.
    fn written_or_repeated(
        &self,
        tx: &Tx<'_>,
        row: &NewRow,
        written: Option<(i64, Option<&'static str>)>,
    ) -> Result<Enqueued> {
        if let Some((id, expired)) = written {
            return Ok(Enqueued {
                id,
                duplicate: false,
                expired,
            });
        }
        let id = self.find_duplicate(tx, row)?.ok_or_else(|| {
            EngineError::Invalid("the insert was ignored but found no row it repeats".into())
        })?;
        Ok(Enqueued {
            id,
            duplicate: true,
            expired: None,
        })
    }

    /// The row with `row`'s dedup key, if one was written.
    fn find_duplicate(&self, tx: &Tx<'_>, row: &NewRow) -> Result<Option<i64>> {
        let params = params![":queue" => self.name, ":dedup_key" => row.dedup_key];
        tx.query_opt(&crate::storage::row::FIND_DUPLICATE_SQL, params, |r| {
            r.get(0)
        })
    }
}

impl Queue {
    /// Refuses a new row past the policy's `max_key_depth` or `max_depth` (`QueueFull`), unless
    /// it repeats a row already written: then that row is the answer, as for any duplicate.
    fn refuse_past_depth(&self, tx: &Tx<'_>, row: &NewRow) -> Result<Option<Enqueued>> {
        let policy = self.policy();
        let count = |sql: &Sql, params: crate::storage::sql::Params<'_>| -> Result<u64> {
            let n: i64 = tx.query_value(sql, params)?;
            Ok(n.max(0) as u64)
        };
        let full = |what: String, depth: u64, key: &str, limit: u64| EngineError::QueueFull {
            what,
            depth,
            setting: format!("queues.{}.{key} = {limit}", self.name),
        };
        let mut refusal = None;
        if let Some(limit) = policy.max_key_depth {
            let depth = count(
                &KEY_DEPTH_SQL,
                params![":queue" => self.name, ":key" => row.key],
            )?;
            if depth >= limit {
                let what = format!("key {} of the {} queue", row.key, self.name);
                refusal = Some(full(what, depth, "max_key_depth", limit));
            }
        }
        if let (None, Some(limit)) = (&refusal, policy.max_depth) {
            let depth = count(&QUEUE_DEPTH_SQL, params![":queue" => self.name])?;
            if depth >= limit {
                refusal = Some(full(
                    format!("the {} queue", self.name),
                    depth,
                    "max_depth",
                    limit,
                ));
            }
        }
        let Some(refusal) = refusal else {
            return Ok(None);
        };
        match self.find_duplicate(tx, row)? {
            Some(id) => Ok(Some(Enqueued {
                id,
                duplicate: true,
                expired: None,
            })),
            None => Err(refusal),
        }
    }
}

impl Queue {
    /// How many of key `key`'s rows are unfinished (pending or leased): what waits for it.
    pub fn unfinished_of(&self, db: &dyn crate::storage::sql::Executor, key: &str) -> Result<u64> {
        let n: i64 = db.query_value(
            &KEY_DEPTH_SQL,
            params![":queue" => self.name, ":key" => key],
        )?;
        Ok(n.max(0) as u64)
    }
}

/// Unfinished rows of one key.
const KEY_DEPTH_SQL: Sql = Sql::same(
    "SELECT COUNT(*) FROM queue_rows
     WHERE queue = :queue AND key = :key AND state IN ('pending', 'leased')",
);

/// Unfinished rows of the queue (a walk of its active rows: only run when `max_depth` is set).
const QUEUE_DEPTH_SQL: Sql = Sql::same(
    "SELECT COUNT(*) FROM queue_rows WHERE queue = :queue AND state IN ('pending', 'leased')",
);

/// Every statement of this file, for the test that prepares them all.
#[cfg(test)]
pub(super) const STATEMENTS: &[Sql] = &[
    KEY_DEPTH_SQL,
    QUEUE_DEPTH_SQL,
    INSERT_SQL,
    INSERT_FOR_SESSION_SQL,
    crate::storage::row::INSERT_AHEAD_SQL,
    crate::storage::row::FIND_DUPLICATE_SQL,
];

#[cfg(test)]
mod tests {
    use crate::{Engine, EngineError, NewRow, QueueName, QueuePolicy, SystemClock};

    fn row(key: &str, dedup: Option<&str>) -> NewRow {
        NewRow {
            key: key.into(),
            payload: "{}".into(),
            dedup_key: dedup.map(str::to_string),
        }
    }

    #[test]
    fn an_enqueue_past_max_depth_is_refused_and_writes_nothing_but_a_repeat_is_answered() {
        let (_dir, db) = crate::storage::db::temp_database();
        let engine = Engine::with_clock(db, std::sync::Arc::new(SystemClock));
        let policy = QueuePolicy {
            max_depth: Some(3),
            max_key_depth: Some(2),
            ..QueuePolicy::outbound()
        };
        let q = engine.queue(QueueName::Outbound, policy);
        let first = q.enqueue(&row("a", Some("k1"))).unwrap();
        q.enqueue(&row("a", None)).unwrap();
        let refused = q.enqueue(&row("a", None)).unwrap_err();
        assert!(
            matches!(&refused, EngineError::QueueFull { depth: 2, setting, .. } if setting == "queues.outbound.max_key_depth = 2"),
            "{refused}"
        );
        assert!(
            refused
                .to_string()
                .starts_with("QUEUE_FULL: key a of the outbound queue"),
            "{refused}"
        );
        let again = q.enqueue(&row("a", Some("k1"))).unwrap();
        assert_eq!(
            (again.id, again.duplicate),
            (first.id, true),
            "a retry of a row already written is its duplicate"
        );

        q.enqueue(&row("b", None)).unwrap();
        let refused = q.enqueue(&row("c", None)).unwrap_err();
        assert!(
            refused.to_string().contains("the outbound queue holds 3"),
            "{refused}"
        );
        let rows: i64 = engine.counts().unwrap().iter().map(|c| c.count).sum();
        assert_eq!(rows, 3, "nothing written");

        let lease = q.lease_next("b").unwrap().unwrap();
        q.complete(lease.id, lease.token, None).unwrap();
        q.enqueue(&row("c", None)).unwrap();
    }

    /// The insert, its dedup and the depth limits, on both backends (a queue handle's
    /// statements run on whichever transaction they are given).
    #[test]
    fn enqueue_dedups_and_keeps_to_the_depth_limits_on_both_backends() {
        use crate::storage::test_db::TestDb;
        let (_dir, sqlite) = crate::storage::db::temp_database();
        let engine = Engine::with_clock(sqlite, std::sync::Arc::new(SystemClock));
        let policy = QueuePolicy {
            max_key_depth: Some(2),
            ..QueuePolicy::outbound()
        };
        let q = engine.queue(QueueName::Outbound, policy);
        for db in TestDb::both() {
            let put = |r: NewRow| db.write_at(7, |tx| q.enqueue_in(tx, &r));
            let first = put(row("a", Some("k1"))).unwrap();
            let again = put(row("a", Some("k1"))).unwrap();
            assert_eq!(
                (again.id, again.duplicate),
                (first.id, true),
                "{}",
                db.name()
            );
            let second = put(row("a", None)).unwrap();
            assert!(second.id > first.id && !second.duplicate);
            let refused = put(row("a", None)).unwrap_err();
            assert!(
                matches!(refused, EngineError::QueueFull { depth: 2, .. }),
                "{refused}"
            );
            assert_eq!(
                put(row("a", Some("k1"))).unwrap().id,
                first.id,
                "a repeat is answered"
            );
            let expired = db
                .write_at(8, |tx| {
                    q.enqueue_expired_in(tx, &row("b", None), "too large")
                })
                .unwrap();
            assert_eq!(expired.expired, Some("too large"));
        }
    }

    /// Rows written ahead together (PostgreSQL's group commit) are answered as each written
    /// alone would be: in order, ids rising; a dedup key written before, or earlier in the same
    /// statement, is the row it repeats; a row for an ended session is written expired.
    #[test]
    fn rows_written_ahead_together_are_answered_as_each_written_alone() {
        use crate::storage::sql::{Query, Sql};
        let db = crate::storage::test_db::TestDb::postgres();
        db.write_at(1_000, |tx| {
            tx.exec(
                &Sql::same(
                    "INSERT INTO sessions (key, agent, started_at, last_activity_at, state)
                     VALUES ('gone', 'claude', 0, 0, 'ended')",
                ),
                crate::params![],
            )
        })
        .unwrap();
        let ahead =
            |key: &str, dedup: Option<&str>, ended: &'static str| crate::storage::row::RowAhead {
                queue: QueueName::Inbound,
                row: NewRow {
                    dedup_key: dedup.map(str::to_string),
                    ..row(key, None)
                },
                session_ended: ended,
            };
        let earlier = db
            .write_at(1_000, |tx| {
                crate::storage::row::enqueue_ahead_in(tx, &[&ahead("a", Some("d1"), "ended")])
            })
            .unwrap();
        let rows = [
            ahead("a", None, "ended"),
            ahead("a", Some("d1"), "ended"),
            ahead("b", Some("d2"), "ended"),
            ahead("gone", None, "session ended"),
            ahead("b", Some("d2"), "ended"),
            ahead("gone", None, ""),
        ];
        let refs: Vec<&crate::storage::row::RowAhead> = rows.iter().collect();
        let answers = db
            .write_at(2_000, |tx| crate::storage::row::enqueue_ahead_in(tx, &refs))
            .unwrap();
        let shape: Vec<(bool, Option<&str>)> =
            answers.iter().map(|a| (a.duplicate, a.expired)).collect();
        assert_eq!(
            shape,
            [
                (false, None),
                (true, None),
                (false, None),
                (false, Some("session ended")),
                (true, None),
                (false, None),
            ],
            "a session's row is written expired only when it names the reason"
        );
        assert_eq!(answers[1].id, earlier[0].id, "a dedup key written before");
        assert_eq!(
            answers[4].id, answers[2].id,
            "a dedup key written just before"
        );
        let fresh: Vec<i64> = [0, 2, 3, 5].iter().map(|&i| answers[i].id).collect();
        assert!(fresh.windows(2).all(|w| w[0] < w[1]), "{fresh:?}");
        assert!(fresh[0] > earlier[0].id);
        let sqlite = crate::storage::test_db::TestDb::sqlite();
        let refused = sqlite.write_at(1_000, |tx| crate::storage::row::enqueue_ahead_in(tx, &refs));
        assert!(refused.is_err(), "SQLite writes each row itself");
    }

    /// A message stored before dedup keys carried the chat id is still found by its retry.
    #[test]
    fn upgrade_keeps_deduplicating_inbound_rows_stored_before_the_chat_id_was_in_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        crate::storage::sqlite::db::migrate(&mut conn, 3).unwrap();
        let mut m = crate::InboundMessage::text("s", "telegram", "hi");
        m.source_message_id = Some("42".into());
        m.source_channel_id = Some("-100".into());
        conn.execute(
            "INSERT INTO queue_rows(queue,key,dedup_key,payload,created_at,next_attempt_at)
             VALUES('inbound','s','[\"telegram\",\"42\"]',?1,0,0)",
            [serde_json::to_string(&m).unwrap()],
        )
        .unwrap();
        drop(conn);
        let engine = crate::Engine::open(&crate::DbConfig::new(&path)).unwrap();
        let q = engine.queue(crate::QueueName::Inbound, crate::QueuePolicy::inbound());
        let again = q.enqueue(&m.to_row()).unwrap();
        assert_eq!((again.id, again.duplicate), (1, true));
    }

    /// A row for a session the registry shows ended is written expired, in the one statement
    /// as in the two the depth limits take; a repeat finds its row; on both backends.
    #[test]
    fn a_row_for_an_ended_session_is_written_expired_on_both_backends() {
        use crate::storage::queue::testing::{on_both, row};
        use crate::storage::sql::{Query, Sql};
        on_both(|db, q| {
            db.write_at(1_000, |tx| {
                tx.exec(
                    &Sql::same(
                        "INSERT INTO sessions (key, agent, started_at, last_activity_at, state)
                         VALUES ('gone', 'claude', 0, 0, 'ended'),
                                ('here', 'claude', 0, 0, 'active')",
                    ),
                    crate::params![],
                )
            })
            .unwrap();
            for limited in [false, true] {
                q.set_policy(QueuePolicy {
                    max_key_depth: limited.then_some(100),
                    ..QueuePolicy::inbound()
                });
                let write = |key: &str, dedup: &str| {
                    let row = NewRow {
                        dedup_key: Some(format!("{dedup}-{limited}")),
                        ..row(key, "hi")
                    };
                    db.write_at(2_000, |tx| {
                        q.enqueue_for_session_in(tx, &row, "session ended")
                    })
                    .unwrap()
                };
                let (gone, here) = (write("gone", "a"), write("here", "b"));
                let (who, name) = (limited, db.name());
                assert_eq!(gone.expired, Some("session ended"), "{name} {who}");
                assert_eq!(here.expired, None, "{name} {who}");
                let repeat = write("gone", "a");
                assert!(repeat.duplicate && repeat.id == gone.id, "{name} {who}");
                let stored = |id| {
                    db.write_at(2_000, |tx| {
                        tx.query_value::<String>(
                            &Sql::same(
                                "SELECT state || '/' || COALESCE(reason, '') || '/'
                                               || COALESCE(CAST(finished_at AS TEXT), '')
                                        FROM queue_rows WHERE id = :id",
                            ),
                            crate::params![":id" => id],
                        )
                    })
                    .unwrap()
                };
                assert_eq!(
                    stored(gone.id),
                    "expired/session ended/2000",
                    "{name} {who}"
                );
                assert_eq!(stored(here.id), "pending//", "{name} {who}");
            }
        });
    }
}
