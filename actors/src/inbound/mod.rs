//! Inbound: chat messages to agent sessions. The [`supervisor::SupervisorActor`] routes
//! enqueues (and sources' batches) and keeps one [`session::SessionActor`] per session with
//! due rows, which delivers them in order.

pub mod children;
pub mod session;
pub mod supervisor;
