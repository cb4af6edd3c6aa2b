//! Dead letters, for `relayq dead` and `/v1/dead` alike: choosing dead rows (by id, or by
//! queue, key, reason and age), replaying them in their original order, purging them. One
//! place, so the CLI and the API choose the same rows and refuse the same replays.

use std::time::Duration;

use relayq_engine::writes::upkeep::{PurgeDead, ReviveDead};
use relayq_engine::{Engine, EngineError, QueueName, RowDetail, WriteDoor};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::output::{now_ms, shown, with_times};

/// Rows per transaction in a bulk retry or purge: each commit is short, so the daemon's
/// writes are not held up, and progress can be shown between them.
const SLICE: usize = 500;

/// Which dead rows: the ids given (each must be a dead row), or every one that matches all
/// the filters given.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadFilter {
    #[serde(default)]
    pub ids: Vec<i64>,
    pub queue: Option<QueueName>,
    /// A session, or an outbound destination as the list shows it.
    pub key: Option<String>,
    /// Text the reason or the last error contains.
    pub reason: Option<String>,
    /// Died longer ago than this.
    #[serde(default, with = "humantime_serde")]
    pub older_than: Option<Duration>,
}

impl DeadFilter {
    /// Whether it names rows at all: no ids and no filter would mean every dead row, which a
    /// bulk operation must ask for explicitly.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
            && self.queue.is_none()
            && self.key.is_none()
            && self.reason.is_none()
            && self.older_than.is_none()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DeadError {
    #[error("row {0} is not a dead row")]
    NotDead(i64),
    #[error("row {id} ({queue} {shown_key}) is older than {later} message(s) to the same place that were already delivered: replayed, it arrives after them", shown_key = shown(.key))]
    OutOfOrder {
        id: i64,
        queue: QueueName,
        key: String,
        later: i64,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// The dead rows `filter` chooses, oldest first: by id (each checked to be a dead row), or
/// every one matching the filters (possibly none).
pub fn select(engine: &Engine, filter: &DeadFilter) -> Result<Vec<RowDetail>, DeadError> {
    let dead = engine.dead_rows(filter.queue)?;
    if !filter.ids.is_empty() {
        if let Some(id) = filter
            .ids
            .iter()
            .find(|id| !dead.iter().any(|d| d.id == **id))
        {
            return Err(DeadError::NotDead(*id));
        }
        return Ok(dead
            .into_iter()
            .filter(|d| filter.ids.contains(&d.id))
            .collect());
    }
    let died_before = filter.older_than.map(died_before);
    let mentions = |d: &RowDetail, text: &str| {
        [&d.reason, &d.last_error]
            .iter()
            .any(|t| t.as_deref().is_some_and(|t| t.contains(text)))
    };
    Ok(dead
        .into_iter()
        .filter(|d| filter.key.as_ref().is_none_or(|k| &d.key == k))
        .filter(|d| filter.reason.as_deref().is_none_or(|r| mentions(d, r)))
        .filter(|d| died_before.is_none_or(|t| d.finished_at.is_some_and(|f| f < t)))
        .collect())
}

/// When a row must have died to be older than `age` (unix ms).
pub fn died_before(age: Duration) -> i64 {
    now_ms() - age.as_millis() as i64
}

/// The rows whose later messages to the same place were already delivered: replayed, each
/// would arrive after them. A retry refuses these unless forced.
pub fn out_of_order(engine: &Engine, rows: &[RowDetail]) -> Result<Vec<DeadError>, EngineError> {
    let mut found = Vec::new();
    for row in rows {
        let later = engine.delivered_after(row)?;
        if later > 0 {
            found.push(DeadError::OutOfOrder {
                id: row.id,
                queue: row.queue,
                key: row.key.clone(),
                later,
            });
        }
    }
    Ok(found)
}

/// Makes `rows` pending again with fresh attempt counts, oldest first, in slices; `done` hears
/// how many are done after each. Returns (id, queue, key) of each row revived, so the caller
/// can wake its worker. Each destination's rows come back in their original order: a slice
/// holds only rows older than the next slice's.
pub fn retry(
    door: &WriteDoor,
    rows: &[RowDetail],
    mut done: impl FnMut(usize),
) -> Result<Vec<(i64, QueueName, String)>, EngineError> {
    let mut revived = Vec::new();
    for slice in oldest_first(rows).chunks(SLICE) {
        revived.extend(door.apply_now(ReviveDead(Some(slice.to_vec())))?);
        done(revived.len());
    }
    Ok(revived)
}

/// Deletes `rows`, in slices; `done` hears how many are done after each. Returns the ids
/// deleted.
pub fn purge(
    door: &WriteDoor,
    rows: &[RowDetail],
    mut done: impl FnMut(usize),
) -> Result<Vec<i64>, EngineError> {
    let mut purged = Vec::new();
    for slice in oldest_first(rows).chunks(SLICE) {
        purged.extend(door.apply_now(PurgeDead(Some(slice.to_vec())))?);
        done(purged.len());
    }
    Ok(purged)
}

fn oldest_first(rows: &[RowDetail]) -> Vec<i64> {
    let mut ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids
}

/// A dead row as JSON: `relayq dead list --json` and `GET /v1/dead`.
pub fn row_json(d: &RowDetail) -> Value {
    let payload = serde_json::from_str::<Value>(&d.payload)
        .unwrap_or_else(|_| Value::String(d.payload.clone()));
    with_times(
        json!({
            "id": d.id, "queue": d.queue, "key": d.key, "attempts": d.attempts,
            "created_at": d.created_at, "finished_at": d.finished_at,
            "reason": d.reason, "last_error": d.last_error, "payload": payload,
        }),
        &["created_at", "finished_at"],
    )
}
