//! Outbound: messages to chat platforms and webhooks. The [`sender::OutboundSender`] leases
//! each destination's head row and sends it, a bounded number at once, and runs of a
//! destination on the [`send_threads`].

pub mod send_threads;
pub mod sender;
