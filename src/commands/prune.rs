//! `relayq prune`: deletes finished rows past retention now, instead of waiting for the daemon.
//! Dead letters are kept for `dead_retention` unless `--dead` says to prune them too.

use std::time::Duration;

use crate::cli::{CliError, Invocation};
use crate::commands::open_existing;

pub fn run(ctx: &Invocation, older_than: Option<Duration>, dead: bool) -> Result<(), CliError> {
    let s = open_existing(ctx)?;
    let n = s.inbound.prune(older_than, dead)?
        + s.hooks.prune(older_than, dead)?
        + s.outbound.prune(older_than, dead)?;
    println!("pruned {n} row(s)");
    Ok(())
}
