//! `relayq dead list | retry | purge`: the rows that gave up (attempt limit, permanent
//! failure), in every queue. Retry makes them pending again with a fresh attempt count and
//! wakes a running daemon; purge deletes them. Ids that are not dead rows are refused before
//! anything changes.

use std::collections::BTreeSet;

use relayq_engine::{QueueName, RowDetail};
use serde_json::{json, Value};

use crate::cli::{CliError, DeadCommand, Invocation, Selection};
use crate::commands::open_existing;
use crate::output::{excerpt, list_printed, now_ms, shown, with_times};

pub fn run(ctx: &Invocation, command: DeadCommand) -> Result<(), CliError> {
    let store = open_existing(ctx)?;
    let engine = &store.engine;
    match command {
        DeadCommand::List { json, queue } => list(&engine.dead_rows(queue)?, json),
        DeadCommand::Retry { selection, force } => {
            let rows = selected(engine, &selection)?;
            out_of_order(engine, &rows, force)?;
            let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
            let revived = engine.retry_dead(Some(&ids))?;
            let keys: BTreeSet<(QueueName, String)> =
                revived.iter().map(|(_, q, k)| (*q, k.clone())).collect();
            for (queue, key) in keys {
                relayq_actors::wake::notify(engine.database().path(), queue, &key);
            }
            println!(
                "{} dead row(s) are pending again, each destination's in their original order",
                revived.len()
            );
            Ok(())
        }
        DeadCommand::Purge { selection, dry_run } => {
            let rows = selected(engine, &selection)?;
            if dry_run {
                list(&rows, false)?;
                println!(
                    "would purge {} dead row(s); nothing was changed",
                    rows.len()
                );
                return Ok(());
            }
            let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
            let purged = engine.purge_dead(Some(&ids))?;
            println!("purged {} dead row(s)", purged.len());
            Ok(())
        }
    }
}

/// The dead rows asked for: by id (each checked to be a dead row), or every one matching the
/// filters (possibly none).
fn selected(engine: &relayq_engine::Engine, s: &Selection) -> Result<Vec<RowDetail>, CliError> {
    let dead = engine.dead_rows(s.queue)?;
    if !s.ids.is_empty() {
        if let Some(id) = s.ids.iter().find(|id| !dead.iter().any(|d| d.id == **id)) {
            return Err(CliError::Usage(format!(
                "row {id} is not a dead row; `relayq dead list` shows them (nothing was changed)"
            )));
        }
        return Ok(dead.into_iter().filter(|d| s.ids.contains(&d.id)).collect());
    }
    let died_before = s.older_than.map(|age| now_ms() - age.as_millis() as i64);
    let mentions = |d: &RowDetail, text: &str| {
        [&d.reason, &d.last_error]
            .iter()
            .any(|t| t.as_deref().is_some_and(|t| t.contains(text)))
    };
    let rows: Vec<RowDetail> = dead
        .into_iter()
        .filter(|d| s.key.as_ref().is_none_or(|k| &d.key == k))
        .filter(|d| s.reason.as_deref().is_none_or(|r| mentions(d, r)))
        .filter(|d| died_before.is_none_or(|t| d.finished_at.is_some_and(|f| f < t)))
        .collect();
    Ok(rows)
}

/// Refuses, unless `force`, to replay a row whose later messages to the same place were already
/// delivered: it would arrive after them.
fn out_of_order(
    engine: &relayq_engine::Engine,
    rows: &[RowDetail],
    force: bool,
) -> Result<(), CliError> {
    for row in rows {
        let later = engine.delivered_after(row)?;
        if later == 0 {
            continue;
        }
        let what = format!(
            "row {} ({} {}) is older than {later} message(s) to the same place that were already delivered: replayed, it arrives after them",
            row.id,
            row.queue,
            shown(&row.key)
        );
        if !force {
            return Err(CliError::Usage(format!(
                "{what}; --force replays it anyway (nothing was changed)"
            )));
        }
        eprintln!("relayq: warning: {what} (--force)");
    }
    Ok(())
}

fn list(rows: &[RowDetail], as_json: bool) -> Result<(), CliError> {
    let json = |d: &RowDetail| {
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
    };
    if list_printed(rows, as_json, json, "no dead rows") {
        return Ok(());
    }
    println!(
        "{:>8} {:<9} {:<30} {:>8} ERROR",
        "ID", "QUEUE", "KEY", "ATTEMPTS"
    );
    for d in rows {
        let error = d
            .last_error
            .as_deref()
            .or(d.reason.as_deref())
            .unwrap_or("-");
        println!(
            "{:>8} {:<9} {:<30} {:>8} {}",
            d.id,
            d.queue,
            shown(&d.key),
            d.attempts,
            excerpt(error, 100)
        );
    }
    Ok(())
}
