//! The actor layer's error type.

use relayq_engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum ActorError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The input cannot be accepted as given.
    #[error("{0}")]
    Invalid(String),
    /// The daemon is stopping and takes no new work.
    #[error("relayq is shutting down")]
    ShuttingDown,
    /// Another relayq daemon already serves this database.
    #[error("another relayq daemon is already serving {0} (maybe through another path to the same file); stop it first")]
    AlreadyRunning(String),
    /// Another node on this host already uses this node's files (PostgreSQL).
    #[error("another relayq node on this host already uses the node files at {0} (its lock, wake socket and hook spool): give each node on one host a `database.path` of its own, or stop that node first")]
    NodeFilesInUse(String),
    #[error("blocking task failed: {0}")]
    Blocking(String),
    #[error("actor mailbox failed: {0}")]
    Mailbox(#[from] actix::MailboxError),
}

pub type Result<T, E = ActorError> = std::result::Result<T, E>;
