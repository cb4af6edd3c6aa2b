//! `relayq dead list | retry | purge`: the rows that gave up (attempt limit, permanent
//! failure), in every queue. Retry makes them pending again with a fresh attempt count and
//! wakes a running daemon; purge deletes them. Ids that are not dead rows are refused before
//! anything changes.

use std::collections::BTreeSet;

use relayq_engine::{QueueName, RowDetail};
use serde_json::{json, Value};

use crate::cli::{CliError, DeadCommand, Invocation, Selection};
use crate::commands::open_existing;
use crate::output::{list_printed, with_times};

pub fn run(ctx: &Invocation, command: DeadCommand) -> Result<(), CliError> {
    let store = open_existing(ctx)?;
    let engine = &store.engine;
    match command {
        DeadCommand::List { json, queue } => list(&engine.dead_rows(queue)?, json),
        DeadCommand::Retry(selection) => {
            let ids = selected(engine, &selection)?;
            let revived = engine.retry_dead(ids.as_deref())?;
            let keys: BTreeSet<(QueueName, String)> =
                revived.iter().map(|(_, q, k)| (*q, k.clone())).collect();
            for (queue, key) in keys {
                relayq_actors::wake::notify(engine.database().path(), queue, &key);
            }
            println!("{} dead row(s) are pending again", revived.len());
            Ok(())
        }
        DeadCommand::Purge(selection) => {
            let ids = selected(engine, &selection)?;
            let purged = engine.purge_dead(ids.as_deref())?;
            println!("purged {} dead row(s)", purged.len());
            Ok(())
        }
    }
}

/// The ids asked for (`None`: all), after checking each is a dead row.
fn selected(
    engine: &relayq_engine::Engine,
    selection: &Selection,
) -> Result<Option<Vec<i64>>, CliError> {
    if selection.all {
        return Ok(None);
    }
    let dead: BTreeSet<i64> = engine.dead_rows(None)?.iter().map(|d| d.id).collect();
    if let Some(id) = selection.ids.iter().find(|id| !dead.contains(id)) {
        return Err(CliError::Usage(format!(
            "row {id} is not a dead row; `relayq dead list` shows them (nothing was changed)"
        )));
    }
    Ok(Some(selection.ids.clone()))
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
            d.key,
            d.attempts,
            relayq_engine::hooks::head_of(error, 100).replace('\n', " ")
        );
    }
    Ok(())
}
