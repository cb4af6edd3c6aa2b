//! The source contract: what a source returns ([`Batch`]) and the trait every source implements.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use relayq_engine::InboundMessage;

use crate::pacing::Pacer;

/// What one fetch read: the messages, and the offset to start the next fetch from.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub messages: Vec<InboundMessage>,
    /// Where the next fetch starts (Telegram: the last `update_id` + 1; a file: a byte
    /// position). Stored with the messages, in one transaction.
    pub offset: String,
}

/// A fetch in progress.
pub type Fetch = Pin<Box<dyn Future<Output = Result<Batch, String>>>>;

/// An inbound source: reads its platform from an offset. relayq runs each one in a
/// [`SourceActor`](super::SourceActor), which stores the offset with the rows and starts again
/// from a clone of the source (and the stored offset) after a failure.
pub trait Source: Clone + Send + Sync + Unpin + 'static {
    /// Called once, before the first fetch, with the source's name (`[sources.NAME]`).
    fn named(&mut self, _name: &str) {}

    /// Reads what came after `offset` (`None`: the source has never read). When nothing has
    /// come, waits for it a while (a long poll) and returns an empty batch at the same offset.
    /// The future owns what it uses. An error is retried with backoff from the same offset.
    fn fetch(&mut self, offset: Option<String>) -> Fetch;

    /// Called once a batch's rows are committed, with the messages that were new (not
    /// duplicates), so a source may show its platform they were taken (Telegram: "typing…").
    /// `budget` paces the channel that answers the source: a call that is only cosmetic takes
    /// from it and is dropped when it says wait, so it never delays an answer.
    fn committed(&mut self, _new: Vec<InboundMessage>, _budget: Option<Arc<Pacer>>) {}
}
