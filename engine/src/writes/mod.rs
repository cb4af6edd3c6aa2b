//! Every write, as a typed request: each is a value the actors or the commands build (what to
//! enqueue, which answers to record, which rows to lease) and the engine applies, inside the
//! group commit ([`WriteDoor::submit`]) or at once in a transaction of its own
//! ([`WriteDoor::apply_now`]: the commands, and the daemon's claims, upkeep and membership,
//! which must neither hold a batch up nor wait behind one). The callers never see a
//! transaction, so a second backend implements these writes, not the actors. Here: the door,
//! and the writes every flow shares: the delivery runs ([`runs`]), the claims ([`claims`]),
//! the upkeep ([`upkeep`]: expiry, reclaims, pauses, dead letters) and what the nodes write
//! ([`nodes`]: membership, shared budgets); each flow's own writes are in its folder
//! (`inbound::writes`, `hooks::writes`, `outbound::writes`, `approvals::writes`). A few flows
//! are several writes in turn, composed in the engine (a hook row: applied, or ended with its
//! error; `WriteDoor::process`); the prune alone deletes in slices of its own transactions
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

pub mod claims;
pub mod nodes;
pub mod runs;
pub mod upkeep;

use crate::commit::{CommitLine, RowAhead};
use crate::error::Result;
use crate::queue::Enqueued;
use crate::tx::Tx;
use crate::Atomicity;

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
    pub routes: crate::outbound::routes::SharedNoticeRoutes,
}

impl std::ops::Deref for WriteDoor {
    type Target = crate::engine::Queues;
    fn deref(&self) -> &crate::engine::Queues {
        &self.queues
    }
}

impl WriteDoor {
    /// The queues under their policies and the notice routes: what every write may use.
    pub fn new(
        queues: crate::engine::Queues,
        routes: crate::outbound::routes::NoticeRoutes,
    ) -> Self {
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
