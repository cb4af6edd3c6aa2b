//! `relayq prune`: deletes finished rows past retention now, instead of waiting for the daemon.

use std::time::Duration;

use crate::cli::{CliError, Context};
use crate::commands::open;

pub fn run(ctx: &Context, older_than: Option<Duration>) -> Result<(), CliError> {
    let s = open(ctx)?;
    let n =
        s.inbound.prune(older_than)? + s.hooks.prune(older_than)? + s.outbound.prune(older_than)?;
    println!("pruned {n} row(s)");
    Ok(())
}
