//! Every write, as a typed request: each is a value the actors or the commands build (what to
//! enqueue, which answers to record, which rows to lease) and the engine applies, inside the
//! group commit ([`WriteDoor::submit`]) or at once in a transaction of its own
//! ([`WriteDoor::apply_now`]: the commands, and the daemon's claims and upkeep, which must
//! neither hold a batch up nor wait behind one). The callers never see a transaction, so a
//! second backend implements these writes, not the actors. By flow: the delivery runs
//! ([`runs`]), the claims ([`claims`]), the approvals ([`approvals`]), the upkeep ([`upkeep`]),
//! and here the messages, hook events, sources and pauses written in. A few flows are several
//! writes in turn, composed in the engine (a hook row: applied, or ended with its error;
//! `WriteDoor::process`); the prune alone deletes in slices of its own transactions
//! (`Queue::prune`), so writers are not held up by a long delete.
//!
//! What every write guarantees, whatever the backend:
//! - **Atomicity**: a write is applied whole or not at all; writes submitted together share
//!   one transaction, each in its own savepoint unless it is one statement
//!   ([`Write::atomicity`]), so one failing write takes no other with it.
//! - **Order**: writes submitted in order commit in that order, within a line
//!   ([`Write::line`]): on PostgreSQL the writes about the rows a node holds commit beside the
//!   rest, as another node's would.
//! - **Durability**: the answer comes after the commit: a caller told "done" never loses it.
//! - **Fencing** (leases): a write about a leased row changes it only while the lease it names
//!   is still that row's (the queue's statements check the lease token).
//! - **One time**: every statement of a write reads the same `now`, the one its transaction
//!   ([`Tx`]) was opened with; the backend that opens it chooses the clock.

pub mod approvals;
pub mod claims;
pub mod runs;
pub mod upkeep;

use crate::approvals::ChatAnswer;
use crate::commit::{CommitLine, RowAhead};
use crate::error::Result;
use crate::inbound::{self, InboundMessage};
use crate::outbound::{self, OutboundMessage};
use crate::queue::{Enqueued, NewRow, QueueName};
use crate::tx::Tx;
use crate::{trouble, Atomicity};
use approvals::ChatAnswersRecorded;

/// What a write may use: the group commit's transaction (for the storage functions, inside
/// the engine) and the queues and notice routes.
pub struct Writer<'a> {
    tx: &'a Tx<'a>,
    pub door: &'a WriteDoor,
    /// The write's row ahead ([`Write::row_ahead`]), when the group commit wrote it.
    ahead: Option<Enqueued>,
}

impl<'a> Writer<'a> {
    pub(crate) fn tx(&self) -> &Tx<'a> {
        self.tx
    }

    /// The row the group commit wrote for this write ([`Write::row_ahead`]); `None`: the write
    /// writes it itself.
    pub fn written_ahead(&self) -> Option<Enqueued> {
        self.ahead
    }

    /// The time the write is made at: one time for all its statements.
    pub fn now(&self) -> i64 {
        self.tx.now()
    }
}

/// One typed write (see the module's doc).
pub trait Write: Send + 'static {
    type Output: Send + 'static;

    /// A write of one statement needs no savepoint of its own.
    fn atomicity(&self) -> Atomicity {
        Atomicity::Savepoint
    }

    /// The queue row the write begins by writing, when that insert is its first statement: the
    /// group commit may write it ahead, with the rows of the writes beside it in one statement
    /// (PostgreSQL), and `apply` then finds it in [`Writer::written_ahead`].
    fn row_ahead(&self, _flows: &WriteDoor) -> Option<RowAhead> {
        None
    }

    /// The commit thread it goes through (see [`CommitLine`]).
    fn line(&self) -> CommitLine {
        CommitLine::Main
    }

    /// Applies the write. It may be applied again, from the start, when its batch is rolled
    /// back and run again (so it reads its request, and does not consume it).
    fn apply(&self, w: &Writer<'_>) -> Result<Self::Output>;
}

/// The door every write goes through: the queues under their policies and the notice routes,
/// which every write may use ([`Writer::door`]), and the two ways in ([`WriteDoor::submit`],
/// [`WriteDoor::apply_now`]).
#[derive(Debug, Clone)]
pub struct WriteDoor {
    /// The engine and its queues (`door.inbound`, ... through `Deref`).
    pub queues: crate::engine::Queues,
    /// Shared with the runtime, which replaces them on a config reload.
    pub routes: crate::routes::SharedNoticeRoutes,
}

impl std::ops::Deref for WriteDoor {
    type Target = crate::engine::Queues;
    fn deref(&self) -> &crate::engine::Queues {
        &self.queues
    }
}

impl WriteDoor {
    /// The queues under their policies and the notice routes: what every write may use.
    pub fn new(queues: crate::engine::Queues, routes: crate::NoticeRoutes) -> Self {
        WriteDoor {
            queues,
            routes: routes.shared(),
        }
    }

    /// Applies `write` at once, in a transaction of its own: the door of the commands, which
    /// run no group commit. The same typed write the daemon submits, with the same
    /// guarantees; alone in its transaction, it needs no savepoint.
    pub fn apply_now<W: Write>(&self, write: W) -> Result<W::Output> {
        self.engine.write(|tx| {
            write.apply(&Writer {
                tx,
                door: self,
                ahead: None,
            })
        })
    }

    /// Queues `write` for the next group commit; answered after the commit. `keep` is held
    /// until the answer is sent (the caller's count of writes in flight).
    pub fn submit<W: Write, K: Send + 'static>(
        self: &std::sync::Arc<Self>,
        write: W,
        keep: K,
    ) -> tokio::sync::oneshot::Receiver<Result<W::Output>> {
        let door = std::sync::Arc::clone(self);
        let (atomicity, ahead) = (write.atomicity(), write.row_ahead(self));
        self.engine
            .database()
            .submit_ahead(write.line(), atomicity, ahead, move |tx, ahead| {
                let _held = &keep;
                write.apply(&Writer {
                    tx,
                    door: &door,
                    ahead,
                })
            })
    }
}

/// An inbound message (validated): its row, the session's origin, and a "your message was
/// dropped" notice to its chat when it is written expired. Answers the row and the notice's
/// ordering key (to wake its sender).
#[derive(Debug, Clone)]
pub struct EnqueueInbound(pub InboundMessage);

impl Write for EnqueueInbound {
    type Output = (Enqueued, Option<String>);

    fn atomicity(&self) -> Atomicity {
        match self.0.writes_one_statement() {
            true => Atomicity::OneStatement,
            false => Atomicity::Savepoint,
        }
    }

    fn row_ahead(&self, door: &WriteDoor) -> Option<RowAhead> {
        inbound::row_ahead(&door.inbound, &self.0)
    }

    fn apply(&self, w: &Writer<'_>) -> Result<Self::Output> {
        let enqueued = match w.written_ahead() {
            Some(row) => inbound::written_in(w.tx(), &self.0, row)?,
            None => inbound::enqueue_in(&w.door.inbound, w.tx(), &self.0)?,
        };
        let told = tell_on_arrival(w, &self.0, &enqueued)?;
        Ok((enqueued, told))
    }
}

/// A platform's message the queue cannot take whole, kept expired and cut (see
/// [`InboundMessage::refused_copy`]).
#[derive(Debug, Clone)]
pub struct RecordRefused(pub InboundMessage);

impl Write for RecordRefused {
    type Output = Enqueued;

    fn apply(&self, w: &Writer<'_>) -> Result<Enqueued> {
        let q = &w.door.inbound;
        q.enqueue_expired_in(w.tx(), &self.0.to_row(), inbound::REFUSED_TOO_LARGE)
    }
}

/// A source's batch: its messages (validated), the copies of those it refused, the answers to
/// agents' questions it read, and its new offset, all in one transaction.
#[derive(Debug, Clone)]
pub struct RecordBatch {
    pub source: String,
    pub messages: Vec<InboundMessage>,
    pub refused: Vec<InboundMessage>,
    pub answers: Vec<ChatAnswer>,
    pub offset: String,
}

/// What [`RecordBatch`] wrote: a row per message, the notices' ordering keys, the answers.
#[derive(Debug)]
pub struct BatchWritten {
    pub rows: Vec<Enqueued>,
    pub told: Vec<String>,
    pub answers: ChatAnswersRecorded,
}

impl Write for RecordBatch {
    type Output = BatchWritten;

    fn apply(&self, w: &Writer<'_>) -> Result<BatchWritten> {
        let q = &w.door.inbound;
        let rows = crate::sources::enqueue_batch_in(
            q,
            w.tx(),
            &self.source,
            &self.messages,
            &self.offset,
        )?;
        let mut told = Vec::new();
        for (message, row) in self.messages.iter().zip(&rows) {
            told.extend(tell_on_arrival(w, message, row)?);
        }
        for copy in &self.refused {
            q.enqueue_expired_in(w.tx(), &copy.to_row(), inbound::REFUSED_TOO_LARGE)?;
        }
        let answers = approvals::record_chat_answers_in(w, &self.answers)?;
        Ok(BatchWritten {
            rows,
            told,
            answers,
        })
    }
}

/// Takes source `name`'s lease for this node, or renews it: true while this node holds it
/// (see [`crate::storage::source_leases`]).
#[derive(Debug, Clone)]
pub struct TakeSourceLease(pub String);

impl Write for TakeSourceLease {
    type Output = bool;

    fn apply(&self, w: &Writer<'_>) -> Result<bool> {
        let engine = &w.door.engine;
        crate::storage::source_leases::take_in(w.tx(), &self.0, engine.node(), engine.owner())
    }
}

/// Lets source `name`'s lease go, so another node reads it at once.
#[derive(Debug, Clone)]
pub struct ReleaseSourceLease(pub String);

impl Write for ReleaseSourceLease {
    type Output = ();

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        let owner = w.door.engine.owner();
        crate::storage::source_leases::release_in(w.tx(), &self.0, owner)
    }
}

/// Answers to agents' questions a platform pushed (see
/// [`approvals::record_chat_answers_in`]).
#[derive(Debug, Clone)]
pub struct RecordAnswers(pub Vec<ChatAnswer>);

impl Write for RecordAnswers {
    type Output = ChatAnswersRecorded;

    fn apply(&self, w: &Writer<'_>) -> Result<Self::Output> {
        approvals::record_chat_answers_in(w, &self.0)
    }
}

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

/// An operator's pause of `queue`'s `key` (the whole queue when `None`), or its end.
#[derive(Debug, Clone)]
pub struct SetPause {
    pub queue: QueueName,
    pub key: Option<String>,
    pub paused: bool,
}

impl Write for SetPause {
    /// Whether it changed: paused now, or was paused.
    type Output = bool;

    fn atomicity(&self) -> Atomicity {
        Atomicity::OneStatement
    }

    fn apply(&self, w: &Writer<'_>) -> Result<bool> {
        let key = self.key.as_deref();
        match self.paused {
            true => crate::pauses::pause_in(w.tx(), self.queue, key).map(|()| true),
            false => crate::pauses::resume_in(w.tx(), self.queue, key),
        }
    }
}

/// Tells each chat whose message waits for a node that is gone why, once (see
/// [`trouble::tell_waiting_on_gone_nodes_in`]); answers the notices' ordering keys.
#[derive(Debug, Clone, Copy)]
pub struct TellWaitingOnGoneNodes;

impl Write for TellWaitingOnGoneNodes {
    type Output = Vec<String>;

    fn apply(&self, w: &Writer<'_>) -> Result<Vec<String>> {
        let routes = w.door.routes.read().expect("routes lock").clone();
        trouble::tell_waiting_on_gone_nodes_in(&w.door.outbound, w.tx(), &routes)
    }
}

/// Writes nothing: answered once a group commit went through (the health check's probe of
/// the commit thread).
#[derive(Debug, Clone, Copy)]
pub struct Probe;

impl Write for Probe {
    type Output = ();

    fn atomicity(&self) -> Atomicity {
        Atomicity::OneStatement
    }

    fn apply(&self, _: &Writer<'_>) -> Result<()> {
        Ok(())
    }
}

/// What a message's chat hears as it is written (dropped, or waiting behind a question), in the
/// same transaction.
fn tell_on_arrival(
    w: &Writer<'_>,
    message: &InboundMessage,
    enqueued: &Enqueued,
) -> Result<Option<String>> {
    let routes = w.door.routes.read().expect("routes lock").clone();
    trouble::tell_on_arrival_in(&w.door.outbound, w.tx(), &routes, message, enqueued)
}
