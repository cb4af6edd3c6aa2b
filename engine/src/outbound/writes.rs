//! The outbound flow's writes: a message's parts, written ahead.

use crate::error::Result;
use crate::outbound::{self, OutboundMessage};
use crate::writes::{Write, Writer};
use crate::Atomicity;

/// An outbound message's parts (one row each, split for its channel), written ahead.
#[derive(Debug, Clone)]
pub struct EnqueueOutbound(pub Vec<OutboundMessage>);

impl Write for EnqueueOutbound {
    type Output = outbound::Written;

    fn atomicity(&self) -> Atomicity {
        match self.0.len() {
            1 => Atomicity::OneStatement,
            _ => Atomicity::Savepoint,
        }
    }

    fn apply(&self, w: &Writer<'_>) -> Result<outbound::Written> {
        outbound::enqueue_parts_in(&w.door.outbound, w.tx(), &self.0)
    }
}
