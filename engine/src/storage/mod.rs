//! The storage layer: SQLite and nothing about what the rows mean. It imports nothing of the
//! flows (inbound, outbound, hooks, sessions, sources), which are built on it.
//!
//! - [`db`]: opening, WAL, migrations (`engine/migrations/`), the writer and reader pools.
//! - [`commit`]: the commit thread that groups concurrent writers into one transaction;
//!   [`checkpoint`]: WAL checkpoints on their own thread.
//! - [`queue`]: the `queue_rows` table, every statement on it.
//! - [`pauses`], [`penalties`]: operators' pauses of queues and keys, channels' pauses.
//! - [`source_offsets`]: how far each inbound source has read.
//! - [`sessions`]: the agent sessions' registry and the chat each talks to.
//! - [`approvals`]: agents' permission questions and their answers.
//! - [`clock`], [`policy`]: time, and each queue's retry and retention settings.

pub mod approvals;
pub(crate) mod checkpoint;
pub mod clock;
pub mod commit;
pub mod db;
pub mod pauses;
pub mod penalties;
pub mod policy;
pub mod queue;
pub mod sessions;
pub mod source_offsets;
