//! One module per command. Each reads the context, does one thing, prints its answer.

pub mod dead;
pub mod enqueue;
pub mod hook;
pub mod prune;
pub mod serve;
pub mod session;
pub mod show;
pub mod status;

use relayq_actors::store::Store;
use relayq_engine::Engine;

use crate::cli::{CliError, Context};

/// The engine and the queue handles under the configured policies, for commands that work on
/// the database directly.
pub(crate) fn open(ctx: &Context) -> Result<Store, CliError> {
    store(ctx, Engine::open(&ctx.db_config()?)?)
}

/// `open` for commands that only read: a missing database is an error, not created.
pub(crate) fn open_existing(ctx: &Context) -> Result<Store, CliError> {
    store(ctx, Engine::open(&ctx.existing_db_config()?)?)
}

fn store(ctx: &Context, engine: Engine) -> Result<Store, CliError> {
    Ok(Store::new(
        engine,
        ctx.config.queues.clone(),
        ctx.config.notice_routes(),
    ))
}
