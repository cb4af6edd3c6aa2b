//! The two ways an actor is asked to end, one message each, shared by every actor:
//!
//! - [`Stop`]: a child (SessionActor, HookWorker, SourceActor, RecoveryActor) finishes the step
//!   in progress, gives back what it holds, stops, then answers.
//! - [`Shutdown`]: a parent (SupervisorActor, HookClaimer, OutboundSender) stops taking work,
//!   stops its children and waits for them (and its own work in flight) up to `grace`.

use std::time::Duration;

/// Finish the step in progress, give back what is held, stop. Answers once stopped.
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct Stop;

/// Stop taking work; let the work in flight finish within `grace`, then answer.
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct Shutdown {
    pub grace: Duration,
}
