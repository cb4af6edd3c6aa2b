//! The hooks flow's writes: an event's row (the handlers' writes are in `handlers`).

use crate::error::Result;
use crate::queue::{Enqueued, NewRow};
use crate::writes::{Write, Writer};
use crate::Atomicity;

/// A hook event's row (see [`crate::hooks::receive`]).
#[derive(Debug, Clone)]
pub struct RecordHook(pub NewRow);

impl Write for RecordHook {
    type Output = Enqueued;

    fn atomicity(&self) -> Atomicity {
        Atomicity::OneStatement
    }

    fn apply(&self, w: &Writer<'_>) -> Result<Enqueued> {
        w.door.hooks.enqueue_in(w.tx(), &self.0)
    }
}
