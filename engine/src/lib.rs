//! relayq's storage engine: durable queues on one SQLite file.
//!
//! One engine serves every flow (inbound messages, hook events, outbound messages); each queue
//! differs only by its [`QueuePolicy`]. The engine is synchronous and knows nothing of actors or
//! async runtimes: callers run it on blocking threads. Time comes from a [`Clock`], so tests
//! control it.

pub mod clock;
pub mod db;
pub mod engine;
pub mod error;
pub mod hooks;
pub mod inbound;
pub mod policy;
pub mod queue;

pub use clock::{Clock, ManualClock, SystemClock};
pub use db::{Database, DbConfig, Synchronous};
pub use engine::{Engine, OldestPending, StateCount};
pub use error::{EngineError, Result};
pub use hooks::{Agent, EventType, HookEvent};
pub use inbound::{InboundMessage, MessageType};
pub use policy::QueuePolicy;
pub use queue::{Enqueued, Head, Lease, NewRow, Queue, Retried, RowState};
