//! `relayq dead list | retry | purge`: the rows that gave up (attempt limit, permanent
//! failure), in every queue. Retry makes them pending again with a fresh attempt count and
//! wakes a running daemon; purge deletes them. Ids that are not dead rows are refused before
//! anything changes.

use std::collections::BTreeSet;

use relayq_engine::{Engine, QueueName, RowDetail};

use crate::cli::{CliError, DeadCommand, Invocation, Selection};
use crate::commands::open_existing;
use crate::dead_letters::{self, DeadError, DeadFilter};
use crate::output::{excerpt, list_printed, shown, Progress};
use serde_json::json;

pub fn run(ctx: &Invocation, command: DeadCommand) -> Result<(), CliError> {
    let store = open_existing(ctx)?;
    let engine = &store.engine;
    match command {
        DeadCommand::List {
            json,
            queue,
            key,
            reason,
            older_than,
        } => {
            let filter = DeadFilter {
                ids: Vec::new(),
                queue,
                key,
                reason,
                older_than,
            };
            list(&chosen(engine, &filter)?, json)
        }
        DeadCommand::Retry {
            selection,
            force,
            json,
        } => {
            let rows = selected(engine, selection)?;
            for e in dead_letters::out_of_order(engine, &rows)? {
                if !force {
                    return Err(CliError::Usage(format!(
                        "{e}; --force replays it anyway (nothing was changed)"
                    )));
                }
                eprintln!("relayq: warning: {e} (--force)");
            }
            let mut progress = Progress::new("retried", Some(rows.len()));
            let revived = dead_letters::retry(engine, &rows, |n| progress.update(n))?;
            drop(progress);
            let keys: BTreeSet<(QueueName, String)> =
                revived.iter().map(|(_, q, k)| (*q, k.clone())).collect();
            for (queue, key) in keys {
                relayq_actors::wake::notify(engine.database().path(), queue, &key);
            }
            let ids: Vec<i64> = revived.iter().map(|(id, _, _)| *id).collect();
            match json {
                true => println!("{}", json!({"count": ids.len(), "ids": ids})),
                false => println!(
                    "{} dead row(s) are pending again, each destination's in their original order",
                    ids.len()
                ),
            }
            Ok(())
        }
        DeadCommand::Purge {
            selection,
            dry_run,
            json,
        } => {
            let rows = selected(engine, selection)?;
            let ids: Vec<i64> = match dry_run {
                true => rows.iter().map(|r| r.id).collect(),
                false => {
                    let mut progress = Progress::new("purged", Some(rows.len()));
                    dead_letters::purge(engine, &rows, |n| progress.update(n))?
                }
            };
            if json {
                println!(
                    "{}",
                    json!({"dry_run": dry_run, "count": ids.len(), "ids": ids})
                );
            } else if dry_run {
                list(&rows, false)?;
                println!("would purge {} dead row(s); nothing was changed", ids.len());
            } else {
                println!("purged {} dead row(s)", ids.len());
            }
            Ok(())
        }
    }
}

/// The dead rows the command line chooses (`--all`: every one).
fn selected(engine: &Engine, s: Selection) -> Result<Vec<RowDetail>, CliError> {
    let filter = DeadFilter {
        ids: s.ids,
        queue: s.queue,
        key: s.key,
        reason: s.reason,
        older_than: s.older_than,
    };
    chosen(engine, &filter)
}

fn chosen(engine: &Engine, filter: &DeadFilter) -> Result<Vec<RowDetail>, CliError> {
    dead_letters::select(engine, filter).map_err(|e| match e {
        DeadError::NotDead(_) => CliError::Usage(format!(
            "{e}; `relayq dead list` shows them (nothing was changed)"
        )),
        DeadError::OutOfOrder { .. } => CliError::Usage(e.to_string()),
        DeadError::Engine(e) => e.into(),
    })
}

fn list(rows: &[RowDetail], as_json: bool) -> Result<(), CliError> {
    if list_printed(rows, as_json, dead_letters::row_json, "no dead rows") {
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
