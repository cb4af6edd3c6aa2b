//! One module per command. Each reads the context, does one thing, prints its answer.

pub mod approvals;
pub mod config;
pub mod dead;
pub mod enqueue;
pub mod generate;
pub mod hook;
pub mod init;
pub mod migrate;
pub mod prune;
pub mod send;
pub mod serve;
pub mod session;
pub mod show;
pub mod status;
pub mod stop;
pub mod users;

use relayq_engine::{Engine, Queues, WriteDoor};

use crate::invocation::{CliError, Invocation};

/// The engine and the queue handles under the configured policies, for commands that work on
/// the database directly (synchronously: one-shot commands run no actor system).
pub(crate) fn open(ctx: &Invocation) -> Result<Queues, CliError> {
    Ok(Engine::open(&ctx.db_config()?)?.queues(&ctx.config.queues))
}

/// `open` with the configured notice routes: the door of the commands that write (typed
/// writes, as the daemon applies them; see `relayq_engine::writes`).
pub(crate) fn open_for_writes(ctx: &Invocation) -> Result<WriteDoor, CliError> {
    Ok(WriteDoor::new(open(ctx)?, ctx.config.notice_routes()))
}

/// `open` for commands that only read: a missing database is an error, not created.
pub(crate) fn open_existing(ctx: &Invocation) -> Result<Queues, CliError> {
    Ok(Engine::open(&ctx.existing_db_config()?)?.queues(&ctx.config.queues))
}
