//! The storage layer: the database and nothing about what the rows mean. It imports nothing
//! of the flows (inbound, outbound, hooks, sessions, sources), which are built on it.
//!
//! - [`db`]: the database of either backend; [`sqlite`] (the default: one file, WAL,
//!   migrations in `engine/migrations/`, checkpoints) and [`postgresql`] (several daemons).
//! - [`sql`]: one statement for both dialects, run on either backend's connection.
//! - [`commit`]: the commit thread that groups concurrent writers into one transaction.
//! - [`queue`]: the `queue_rows` table, every statement on it.
//! - [`pauses`], [`penalties`]: the operator's pauses of queues and keys, the channels'
//!   penalties (a far end that asked for quiet, an open breaker);
//!   [`budgets`]: pacing shared by the nodes.
//! - [`source_offsets`]: how far each inbound source has read; [`source_leases`]: which node
//!   reads a source that must have one reader.
//! - [`sessions`]: the agent sessions' registry and the chat each talks to.
//! - [`approvals`]: agents' permission questions and their answers.
//! - [`migrate`]: a SQLite deployment copied to PostgreSQL.
//! - [`nodes`]: the daemons serving one database, and which node a session's agent runs on.
//! - [`tx`]: a write transaction with its time; every write statement takes one.
//! - [`clock`], [`policy`]: time, and each queue's retry and retention settings.

/// Reads a struct from a row by column name: `from_columns! { row => Lease { id, key, .. } }`
/// reads each field from the column of its name (alias a column in the `SELECT` to match).
/// By name, so a reordered column list cannot shift values into the wrong fields; fields
/// that are not plain columns follow as `field: value`.
macro_rules! from_columns {
    ($row:ident => $ty:ident { $($field:ident),* $(,)? $(; $($other:ident $(: $value:expr)?),* $(,)?)? }) => {
        $ty { $($field: $row.get(stringify!($field))?,)* $($($other $(: $value)?,)*)? }
    };
}

pub mod access;
pub mod albums;
pub mod approvals;
pub mod budgets;
pub mod chat_sessions;
pub mod clock;
pub mod commit;
pub mod db;
pub mod db_config;
pub mod migrate;
pub mod nodes;
pub mod pauses;
pub mod penalties;
pub mod policy;
pub mod postgresql;
pub mod progress;
pub mod queue;
pub mod row;
pub mod sessions;
pub mod source_leases;
pub mod source_offsets;
pub mod sql;
pub mod sqlite;
#[cfg(any(test, feature = "test-helpers"))]
pub mod test_db;
pub mod tx;
