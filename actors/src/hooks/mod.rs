//! Hook events: the [`claimer::HookClaimer`] leases hook rows in runs per session for each
//! session's [`worker::HookWorker`], which applies them in order (the engine's handlers) and
//! buffers bursts ([`buffer`]).

pub mod buffer;
pub mod claimer;
pub mod worker;
