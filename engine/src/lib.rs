//! relayq's storage engine: durable queues on one SQLite file, or on a PostgreSQL database
//! several daemons share.
//!
//! Two layers:
//! - [`storage`]: the database (SQLite or PostgreSQL), the queue table and its statements, the commit thread, time and
//!   policies. It knows nothing of what the rows mean.
//! - the flows built on it: [`inbound`] messages, [`hooks`] events and their [`handlers`]
//!   (which keep the session registry, [`sessions`], and write notices), [`outbound`] messages,
//!   and [`sources`]' offsets.
//!
//! [`Engine`] is the door: it opens the database and hands out queue handles; one-shot
//! commands use it directly. The engine is synchronous and knows nothing of actors or async
//! runtimes: the daemon runs it on blocking threads. Time comes from a [`Clock`], so tests
//! control it.

pub mod agent_state;
pub mod approvals;
pub mod chunking;
pub mod engine;
pub mod error;
pub mod handlers;
pub mod hook_spool;
pub mod hooks;
pub mod inbound;
pub mod notice;
pub mod outbound;
pub mod outcome;
pub mod routes;
pub mod sessions;
pub mod settings;
pub mod sources;
pub mod storage;
pub mod transcript;
pub mod trouble;
pub mod words;
pub mod writes;

pub use storage::{
    budgets, clock, commit, db, migrate, nodes, pauses, penalties, policy, queue, source_leases, tx,
};

pub use agent_state::AgentState;
pub use chunking::{Markup, TextLimit};
pub use clock::{Clock, ManualClock, SystemClock};
pub use commit::{Atomicity, Committer};
pub use db::{Database, DbConfig, Reader, Synchronous};
pub use engine::{Engine, Queues};
pub use error::{EngineError, Result};
pub use handlers::{NoticeRoute, NoticeRoutes, Processed};
pub use hooks::{Agent, EventType, HookEvent};
pub use inbound::{InboundMessage, MessageType};
pub use notice::Notice;
pub use outbound::OutboundMessage;
pub use outcome::Outcome;
pub use policy::{ExpireAction, QueuePolicies, QueuePolicy};
pub use postgres;
pub use queue::{
    DeadQuery, Enqueued, Head, HeldRun, Lease, NewRow, OldestPending, Queue, QueueName, Receipt,
    Retried, RowDetail, RowState, StateCount,
};
pub use rusqlite;
pub use sessions::SessionRecord;
pub use tx::Tx;
pub use writes::WriteDoor;
