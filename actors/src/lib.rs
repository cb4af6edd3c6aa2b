//! relayq's actor system, on actix. `docs/flows.md` follows a message through it hop by hop.
//!
//! - [`supervisor::SupervisorActor`] owns one [`session::SessionActor`] per session with
//!   pending inbound rows, routes enqueues (and [`sources`]' batches) and wake-ups, and
//!   replaces actors that die.
//! - [`session::SessionActor`] delivers its session's rows one at a time, oldest first.
//! - [`hook_claimer::HookClaimer`] leases hook rows in batches for each session's
//!   [`hook_worker::HookWorker`]; [`outbound_sender::OutboundSender`] leases each
//!   destination's head row and sends it, a bounded number at once.
//! - [`recovery::RecoveryActor`] resumes work after a restart and keeps the tables tidy.
//! - [`channels`]: the contract every channel implements, the one actor that runs any of them,
//!   the kit platforms share, and one folder per kind (file, exec, tmux, webhook).
//! - [`sources`]: inbound platforms, read from a stored offset.
//! - [`approvals::ApprovalsActor`] tells chats how agents' questions ended and ends the ones
//!   nobody waits on; answers from chats are recorded with their source's batch.
//!
//! Every SQLite call goes through [`store::Store`], which runs it off the executor's threads.

pub mod approvals;
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
pub mod metrics;
pub mod outbound_sender;
pub mod pacing;
pub mod pauses;
pub mod recovery;
pub mod runtime;
pub mod send_threads;
pub mod session;
pub mod settings;
pub mod sources;
pub mod store;
pub mod supervisor;
#[cfg(any(test, feature = "test-helpers"))]
pub mod testing;
pub mod wake;

pub use channels::{
    Answer, Channel, ChannelConfig, ChannelKind, ChannelSpec, Content, Deliver, Delivery, Outcome,
    Receipt, UnknownOutcome,
};
pub use claiming::ClaimSettings;
pub use error::{ActorError, Result};
pub use runtime::{Relayq, RelayqBuilder, RelayqConfig, RelayqHandle, Reload};
pub use supervisor::SessionChannels;
