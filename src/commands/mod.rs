//! One module per command. Each reads the context, does one thing, prints its answer.

pub mod dead;
pub mod enqueue;
pub mod hook;
pub mod prune;
pub mod serve;
pub mod session;
pub mod status;

use relayq_actors::store::Store;
use relayq_engine::Engine;

use crate::cli::{CliError, Context};

/// The engine and the queue handles under the configured policies, for commands that work on
/// the database directly.
pub(crate) fn open(ctx: &Context) -> Result<Store, CliError> {
    let engine = Engine::open(&ctx.db_config())?;
    Ok(Store::new(
        engine,
        ctx.config.queues.clone(),
        ctx.config.routes(),
    ))
}
