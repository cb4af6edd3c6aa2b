//! relayq's actor system, on actix. `docs/flows.md` follows a message through it hop by hop.
//!
//! Three flows, one folder each, and what they share at the root:
//! - [`inbound`]: the [`SupervisorActor`](inbound::supervisor::SupervisorActor) owns one
//!   [`SessionActor`](inbound::session::SessionActor) per session with pending inbound rows,
//!   routes enqueues (and [`sources`]' batches) and wake-ups, and replaces actors that die;
//!   a SessionActor delivers its session's rows one at a time, oldest first.
//! - [`hooks`]: the [`HookClaimer`](hooks::claimer::HookClaimer) leases hook rows in batches
//!   for each session's [`HookWorker`](hooks::worker::HookWorker).
//! - [`outbound`]: the [`OutboundSender`](outbound::sender::OutboundSender) leases each
//!   destination's head row and sends it, a bounded number at once.
//! - shared: [`delivery`] (one attempt at a channel), [`runs`] (a run delivered while fast and
//!   recorded in one write), [`claiming`], [`store`], [`wake`],
//!   [`pacing`], [`pauses`], [`penalties`], [`metrics`], [`lifecycle`], [`runtime`] (starting it all).
//! - [`recovery::RecoveryActor`] resumes work after a restart and keeps the tables tidy.
//! - [`channels`]: the contract every channel implements, the one actor that runs any of them,
//!   and one folder per kind (file, exec, tmux, webhook, telegram, slack, discord).
//! - [`sources`]: inbound platforms, read from a stored offset, pushed, or over a held
//!   connection; one folder per kind.
//! - [`kit`]: what channels and sources share: HTTP, secrets, chat routing, each platform's
//!   API vocabulary.
//! - [`progress::ProgressActor`] shows chats what their agents do (reactions, a progress
//!   message per turn): cosmetic calls, after the durable messages, on the same budgets.
//! - [`approvals::ApprovalsActor`] tells chats how agents' questions ended and ends the ones
//!   nobody waits on; answers from chats are recorded with their source's batch.
//!
//! Every database call goes through [`store::Store`], which runs it off the executor's threads
//! (typed writes through `Store::apply`, the rest through `Store::run`).

pub mod approvals;
pub mod channels;
pub mod claiming;
pub mod daemon_lock;
pub mod delivery;
pub mod error;
pub mod files;
pub mod hooks;
pub mod inbound;
pub mod kit;
pub mod launcher;
pub mod lifecycle;
pub mod metrics;
pub mod node;
pub mod outbound;
pub mod pacing;
pub mod pauses;
pub mod penalties;
pub mod progress;
pub mod readiness;
pub mod recovery;
pub mod runs;
pub mod runtime;
pub mod settings;
pub mod shared_reader;
pub mod sources;
pub mod store;
#[cfg(any(test, feature = "test-helpers"))]
pub mod testing;
pub mod wake;

pub use channels::{
    Answer, Channel, ChannelConfig, ChannelKind, ChannelSpec, Content, Deliver, Delivery, Outcome,
    Receipt, UnknownOutcome,
};
pub use claiming::ClaimSettings;
pub use error::{ActorError, Result};
pub use inbound::supervisor::SessionChannels;
pub use runtime::{Relayq, RelayqBuilder, RelayqConfig, RelayqHandle, Reload};
