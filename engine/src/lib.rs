//! relayq's storage engine: durable queues on one SQLite file.
//!
//! One engine serves every flow (inbound messages, hook events, outbound messages); each queue
//! differs only by its [`QueuePolicy`]. Hook events also keep the session registry
//! ([`sessions`]) through their [`handlers`]. The engine is synchronous and knows nothing of actors or
//! async runtimes: callers run it on blocking threads. Time comes from a [`Clock`], so tests
//! control it.

mod checkpoint;
pub mod clock;
pub mod commit;
pub mod db;
pub mod engine;
pub mod error;
pub mod handlers;
pub mod hooks;
pub mod inbound;
pub mod outbound;
pub mod policy;
pub mod queue;
pub mod sessions;
pub mod sources;

pub use clock::{Clock, ManualClock, SystemClock};
pub use commit::{Atomicity, Committer};
pub use db::{Database, DbConfig, Synchronous};
pub use engine::{Engine, OldestPending, StateCount};
pub use error::{EngineError, Result};
pub use handlers::{HookProcessor, NoticeRoute, NoticeRoutes, Processed};
pub use hooks::{Agent, EventType, HookEvent};
pub use inbound::{InboundMessage, MessageType};
pub use outbound::OutboundMessage;
pub use policy::{QueuePolicies, QueuePolicy};
pub use queue::{
    DeadRow, Enqueued, Head, Lease, NewRow, Queue, Receipt, Retried, RowDetail, RowState,
};
pub use rusqlite;
pub use sessions::SessionRecord;
