//! A queue row as the layers under the queue handle it (the committer, the backends): the
//! queue it is in, what is written, what a write answers, and the rows written ahead of their
//! operations, by one statement for a group commit's batch on PostgreSQL ([`RowAhead`]).

use crate::error::{EngineError, Result};
use crate::params;
use crate::storage::sql::{Query, Sql};
use crate::storage::tx::Tx;

crate::words! {
    /// The queues relayq keeps, by the name each row stores in its `queue` column.
    #[derive(PartialOrd, Ord)]
    pub enum QueueName("queue") {
        /// Chat messages for agent sessions, keyed by session.
        Inbound = "inbound",
        /// Agent hook events, keyed by session.
        Hooks = "hooks",
        /// Messages for chat platforms and webhooks, keyed by channel and destination.
        Outbound = "outbound",
    }
}

impl PartialEq<&str> for QueueName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

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

/// The queue row an operation writes first, as data: a backend may write it, with the rows of
/// the operations beside it, in one statement before running the operation, and hand it the
/// row written (see `Operation::run`). On PostgreSQL an insert of its own costs a round trip
/// and an executor start (about 100 µs of the server's time a row, against 25 µs for a row of
/// a statement that writes a batch's).
#[derive(Debug, Clone)]
pub struct RowAhead {
    pub queue: QueueName,
    pub row: NewRow,
    /// A row for the agent session named by its key: written expired, for this reason, when
    /// the session registry shows the session ended (see `Queue::enqueue_for_session_in`).
    pub session_ended: &'static str,
}

/// The row an insert found by its dedup key.
pub(crate) const FIND_DUPLICATE_SQL: Sql =
    Sql::same("SELECT id FROM queue_rows WHERE queue = :queue AND dedup_key = :dedup_key");

/// Many rows ahead (see [`RowAhead`]) with one statement, in order: `:rows` is a JSON list of
/// `[queue, key, dedup_key, payload, session_ended]`; each row as `INSERT_FOR_SESSION_SQL`
/// writes it (expired when `session_ended` is set and its session ended), one unless its dedup
/// key was written before. Answers the rows written, in the order written. PostgreSQL's only:
/// SQLite pays nothing per statement.
pub(crate) const INSERT_AHEAD_SQL: Sql = Sql::two(
    "SELECT 1",
    "INSERT INTO queue_rows (queue, key, dedup_key, payload, created_at, next_attempt_at,
                            state, finished_at, reason)
     SELECT r.queue, r.key, r.dedup_key, r.payload, CAST(:now AS BIGINT), CAST(:now AS BIGINT),
            CASE WHEN r.ended THEN 'expired' ELSE 'pending' END,
            CASE WHEN r.ended THEN CAST(:now AS BIGINT) END,
            CASE WHEN r.ended THEN r.reason END
       FROM (SELECT e.value ->> 0 AS queue, e.value ->> 1 AS key, e.value ->> 2 AS dedup_key,
                    e.value ->> 3 AS payload, e.value ->> 4 AS reason, e.n,
                    e.value ->> 4 IS NOT NULL AND EXISTS (
                        SELECT 1 FROM sessions s
                         WHERE s.key = e.value ->> 1 AND s.state = 'ended') AS ended
               FROM jsonb_array_elements(CAST(CAST(:rows AS TEXT) AS jsonb))
                    WITH ORDINALITY AS e(value, n)) AS r
      ORDER BY r.n
     ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
     RETURNING id, key, dedup_key, state",
);

/// Writes `rows` ahead of their operations with one statement (PostgreSQL; see
/// [`RowAhead`]), in order: one answer a row, as `Queue::enqueue_for_session_in` gives it.
/// The ids are checked to follow the rows' order, on which each key's order rests.
pub(crate) fn enqueue_ahead_in(tx: &Tx<'_>, rows: &[&RowAhead]) -> Result<Vec<Enqueued>> {
    if !tx.pays_per_statement() {
        return Err(EngineError::Invalid(
            "rows are written ahead on PostgreSQL only".into(),
        ));
    }
    let json: Vec<_> = rows
        .iter()
        .map(|r| {
            let reason = (!r.session_ended.is_empty()).then_some(r.session_ended);
            let row = &r.row;
            serde_json::json!([
                r.queue.as_str(),
                row.key,
                row.dedup_key,
                row.payload,
                reason
            ])
        })
        .collect();
    let json = serde_json::Value::from(json).to_string();
    type Written = (i64, String, Option<String>, String);
    let written: Vec<Written> = tx.query_all(
        &INSERT_AHEAD_SQL,
        params![":rows" => json, ":now" => tx.now()],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    if !written.windows(2).all(|w| w[0].0 < w[1].0) {
        return Err(EngineError::Invalid(
            "rows written together came back out of order".into(),
        ));
    }
    let mut written = written.into_iter().peekable();
    let mut answers = Vec::with_capacity(rows.len());
    for r in rows {
        let row = &r.row;
        let this = |w: &Written| w.1 == row.key && w.2 == row.dedup_key;
        if let Some((id, _, _, state)) = written.next_if(this) {
            let expired = (state == "expired").then_some(r.session_ended);
            answers.push(Enqueued {
                id,
                duplicate: false,
                expired,
            });
            continue;
        }
        // Not written: its dedup key was (by an earlier row, perhaps of this statement).
        let params = params![":queue" => r.queue, ":dedup_key" => row.dedup_key];
        let id = match &row.dedup_key {
            Some(_) => tx.query_opt(&FIND_DUPLICATE_SQL, params, |r| r.get(0))?,
            None => None,
        };
        let id = id.ok_or_else(|| {
            EngineError::Invalid(format!("a row of key {} was not written", row.key))
        })?;
        answers.push(Enqueued {
            id,
            duplicate: true,
            expired: None,
        });
    }
    Ok(answers)
}
