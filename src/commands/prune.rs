//! `relayq prune`: deletes finished rows past retention now, instead of waiting for the daemon.
//! Dead letters are kept for `dead_retention` unless `--dead` says to prune them too.

use std::time::Duration;

use crate::commands::open_existing;
use crate::invocation::{CliError, Invocation};
use crate::output::Progress;

pub fn run(
    ctx: &Invocation,
    older_than: Option<Duration>,
    dead: bool,
    as_json: bool,
) -> Result<(), CliError> {
    let s = open_existing(ctx)?;
    let mut progress = Progress::new("pruned", None);
    let mut n = 0;
    for queue in [&s.inbound, &s.hooks, &s.outbound] {
        n += queue.prune_reporting(older_than, dead, |done| progress.update(n + done))?;
    }
    drop(progress);
    match as_json {
        true => println!("{}", serde_json::json!({ "pruned": n })),
        false => println!("pruned {n} row(s)"),
    }
    Ok(())
}
