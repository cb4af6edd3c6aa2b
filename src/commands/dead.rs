//! `relayq dead list | retry | purge`: the rows that gave up (attempt limit, permanent
//! failure), in every queue. Retry makes them pending again with a fresh attempt count and
//! wakes a running daemon; purge deletes them. Ids that are not dead rows are refused before
//! anything changes.

use std::time::Duration;

use clap::Subcommand;
use std::collections::BTreeSet;

use relayq_engine::{Engine, QueueName, RowDetail};

use crate::commands::open_existing;
use crate::dead_letters::{self, DeadError, DeadFilter};
use crate::invocation::{CliError, Invocation};
use crate::output::{excerpt, list_printed, shown, Progress};
use serde_json::json;

#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// Show dead rows, oldest first
    List {
        #[arg(long)]
        json: bool,
        /// Only this queue (inbound, hooks, outbound)
        #[arg(long)]
        queue: Option<relayq_engine::QueueName>,
        /// Only rows of this key (a session, or an outbound destination as the list shows it)
        #[arg(long, allow_hyphen_values = true)]
        key: Option<String>,
        /// Only rows whose reason or last error contains this text
        #[arg(long)]
        reason: Option<String>,
        /// Only rows that died longer ago than this (e.g. 1h, 2d)
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        older_than: Option<Duration>,
    },
    /// Make dead rows pending again, with a fresh attempt count; a destination's rows go in
    /// their original order, and a row whose later messages were already delivered is refused
    /// unless --force
    Retry {
        #[command(flatten)]
        selection: Selection,
        /// Replay rows whose later messages were already delivered (they arrive out of order)
        #[arg(long)]
        force: bool,
        /// Print {"count":N,"ids":[...]}
        #[arg(long)]
        json: bool,
    },
    /// Delete dead rows
    Purge {
        #[command(flatten)]
        selection: Selection,
        /// Say which rows would be deleted, and delete nothing
        #[arg(long)]
        dry_run: bool,
        /// Print {"dry_run":bool,"count":N,"ids":[...]}
        #[arg(long)]
        json: bool,
    },
}

/// Row ids, or --all, or filters (which combine: rows that match every one given).
#[derive(Debug, clap::Args)]
#[group(id = "which", required = true, multiple = true)]
pub struct Selection {
    /// Row ids (as `relayq dead list` shows them)
    #[arg(group = "which", conflicts_with_all = ["all", "queue", "key", "reason", "older_than"])]
    pub ids: Vec<i64>,
    /// Every dead row
    #[arg(long, group = "which")]
    pub all: bool,
    /// Only rows of this queue (inbound, hooks, outbound)
    #[arg(long, group = "which")]
    pub queue: Option<relayq_engine::QueueName>,
    /// Only rows of this key (a session, or an outbound destination as `dead list` shows it)
    #[arg(long, group = "which", allow_hyphen_values = true)]
    pub key: Option<String>,
    /// Only rows whose reason or last error contains this text
    #[arg(long, group = "which")]
    pub reason: Option<String>,
    /// Only rows that died longer ago than this (e.g. 1h, 2d)
    #[arg(long, group = "which", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub older_than: Option<Duration>,
}

pub fn run(ctx: &Invocation, command: DeadCommand) -> Result<(), CliError> {
    let store = open_existing(ctx)?;
    let engine = &store.engine;
    // Revived and purged through the door the daemon's writes go through.
    let door = relayq_engine::WriteDoor::new(store.clone(), ctx.config.notice_routes());
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
            let revived = dead_letters::retry(&door, &rows, |n| progress.update(n))?;
            drop(progress);
            let keys: BTreeSet<(QueueName, String)> =
                revived.iter().map(|(_, q, k)| (*q, k.clone())).collect();
            for (queue, key) in keys {
                relayq_actors::wake::rows_written_beside(engine.database().path(), queue, &key);
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
                    dead_letters::purge(&door, &rows, |n| progress.update(n))?
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
