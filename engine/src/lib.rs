//! relayq's storage engine: durable queues on one SQLite file, or on a PostgreSQL database
//! several daemons share.
//!
//! Two layers:
//! - [`storage`]: the database (SQLite or PostgreSQL), the queue table and its statements, the
//!   commit thread, time and policies. It knows nothing of what the rows mean.
//! - the flows built on it, a folder each with its data, rules and writes: [`inbound`]
//!   messages (and the [`sources`](inbound::sources)' offsets, the chats told of trouble),
//!   [`hooks`] events (their [`handlers`](hooks::handlers), the spool, transcripts),
//!   [`sessions`] (the registry the handlers keep, the agent's state), [`outbound`] messages
//!   (chunking, notices and their routes) and [`approvals`] (the agent's questions answered
//!   from the chat).
//!
//! Every write is a typed request through [`WriteDoor`] ([`writes`]: the door, and the writes
//! every flow shares: delivery runs, claims, upkeep). [`Engine`] opens the database and hands
//! out queue handles; one-shot commands use it directly. The engine is synchronous and knows
//! nothing of actors or async runtimes: the daemon runs it on blocking threads. Time comes
//! from a [`Clock`], so tests control it.

pub mod access;
pub mod approvals;
pub mod chat_sessions;
pub mod engine;
pub mod error;
pub mod hooks;
pub mod inbound;
pub mod outbound;
pub mod outcome;
pub mod progress;
pub mod sessions;
pub mod settings;
pub mod storage;
pub mod words;
pub mod writes;

pub use storage::{
    budgets, clock, commit, db, migrate, nodes, pauses, penalties, policy, queue, source_leases, tx,
};

pub use clock::{Clock, ManualClock, SystemClock};
pub use commit::{Atomicity, Committer};
pub use db::{Database, DbConfig, Reader, Synchronous};
pub use engine::{Engine, Queues};
pub use error::{EngineError, Result};
pub use hooks::handlers::{NoticeRoute, NoticeRoutes, Processed};
pub use hooks::{Agent, EventType, HookEvent};
pub use inbound::{InboundMessage, MessageType};
pub use outbound::chunking::{Markup, TextLimit};
pub use outbound::notice::Notice;
pub use outbound::OutboundMessage;
pub use outcome::Outcome;
pub use policy::{ExpireAction, QueuePolicies, QueuePolicy};
pub use postgres;
pub use queue::{
    DeadQuery, Enqueued, Head, HeldRun, Lease, NewRow, OldestPending, Queue, QueueName, Receipt,
    Retried, RowDetail, RowState, StateCount,
};
pub use rusqlite;
pub use sessions::agent_state::AgentState;
pub use sessions::SessionRecord;
pub use tx::Tx;
pub use writes::WriteDoor;
