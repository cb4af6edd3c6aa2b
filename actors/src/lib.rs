//! relayq's actor system, on actix.
//!
//! - [`supervisor::SupervisorActor`] owns one [`session::SessionActor`] per session with pending
//!   inbound rows, routes enqueues and wake-ups, and replaces actors that die.
//! - [`session::SessionActor`] delivers its session's rows one at a time, oldest first.
//! - [`claimer::ClaimerActor`] leases hook rows in batches for each session's
//!   [`hook_worker::HookWorker`], and outbound rows for their channels.
//! - [`recovery::RecoveryActor`] resumes work after a restart and keeps the tables tidy.
//! - [`channels`] are the actors that talk to the outside world (file, exec, tmux, yours).
//!
//! Every SQLite call goes through [`store::Store`], which runs it off the executor's threads.

pub mod channels;
pub mod children;
pub mod claiming;
pub mod daemon_lock;
pub mod delivery;
pub mod error;
pub mod hook_buffer;
pub mod hook_claimer;
pub mod hook_worker;
pub mod lifecycle;
pub mod outbound_sender;
pub mod recovery;
pub mod runtime;
pub mod session;
pub mod settings;
pub mod sources;
pub mod store;
pub mod supervisor;
pub mod wake;

pub use channels::{
    Answer, Channel, ChannelConfig, ChannelKind, ChannelSpec, Content, Deliver, Delivery, Outcome,
    Receipt,
};
pub use claiming::ClaimSettings;
pub use error::{ActorError, Result};
pub use runtime::{Reload, Runtime, RuntimeBuilder, RuntimeConfig};
pub use supervisor::SessionChannels;
