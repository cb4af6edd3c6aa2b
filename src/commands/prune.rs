//! `relayq prune`: deletes finished rows past retention now, instead of waiting for the daemon.

use std::time::Duration;

use crate::cli::{CliError, Context};
use crate::commands::open_inbound;

pub fn run(ctx: &Context, older_than: Option<Duration>) -> Result<(), CliError> {
    let (_, queue) = open_inbound(ctx)?;
    let n = queue.prune(older_than)?;
    println!("pruned {n} row(s)");
    Ok(())
}
