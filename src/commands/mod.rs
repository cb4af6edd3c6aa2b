//! One module per command. Each reads the context, does one thing, prints its answer.

pub mod enqueue;
pub mod hook;
pub mod prune;
pub mod serve;
pub mod session;
pub mod status;

use relayq_engine::{inbound, Engine, Queue};

use crate::cli::{CliError, Context};

/// The engine and the inbound queue handle, for commands that work on the database directly.
pub(crate) fn open_inbound(ctx: &Context) -> Result<(Engine, Queue), CliError> {
    let engine = Engine::open(&ctx.db_config())?;
    let queue = engine.queue(inbound::QUEUE, ctx.config.queues.inbound.clone());
    Ok((engine, queue))
}
