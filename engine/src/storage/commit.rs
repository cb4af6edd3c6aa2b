//! Group commit: the writes of many callers run in one transaction and share one commit (one
//! fsync under synchronous = FULL). A single committer thread takes every operation waiting
//! in its queue, runs each inside its own savepoint (so one failing operation rolls back
//! only itself), commits, and only then answers each caller. Operations run in the order
//! they were submitted, so a caller that submits A before B sees A committed no later than B.
//! An operation that writes with a single statement may skip its savepoint (see [`Atomicity`]).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;

use r2d2::Pool;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use crate::error::{EngineError, Result};
use crate::storage::checkpoint::{self, Checkpointer};

/// At most this many operations share a transaction, so a flood cannot hold the write lock
/// (and every caller's answer) for long.
const MAX_BATCH: usize = 512;

/// How an operation is kept from leaving half its writes behind when it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Atomicity {
    /// It runs in its own savepoint, rolled back if it fails.
    Savepoint,
    /// It writes with one statement, which SQLite undoes by itself when it fails, so it needs
    /// no savepoint (a savepoint copies every page it touches that the batch changed before:
    /// the largest cost of a small insert). If it panics, the whole batch is rolled back.
    OneStatement,
}

/// One queued operation, type-erased for the committer thread.
trait Operation: Send {
    fn atomicity(&self) -> Atomicity;
    /// Runs inside the shared transaction; false when it failed (its savepoint is rolled back).
    fn run(&mut self, tx: &Transaction<'_>) -> bool;
    /// Answers the caller once the transaction's fate is known (`Err` when it did not commit).
    fn answer(self: Box<Self>, committed: std::result::Result<(), &str>);
}

struct Typed<T, F> {
    atomicity: Atomicity,
    f: Option<F>,
    out: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Operation for Typed<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
{
    fn atomicity(&self) -> Atomicity {
        self.atomicity
    }

    fn run(&mut self, tx: &Transaction<'_>) -> bool {
        let f = self.f.take().expect("an operation runs once");
        let out = f(tx);
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn answer(self: Box<Self>, committed: std::result::Result<(), &str>) {
        let out = match (self.out, committed) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(v)), Ok(())) => Ok(v),
            (Some(Ok(_)), Err(reason)) | (None, Err(reason)) => {
                Err(EngineError::NotCommitted(reason.to_string()))
            }
            (None, Ok(())) => Err(EngineError::NotCommitted("the operation panicked".into())),
        };
        let _ = self.reply.send(out);
    }
}

/// The handle callers submit through. Cheap to clone; the thread ends when the last is dropped.
#[derive(Clone)]
pub struct Committer {
    queue: mpsc::Sender<Box<dyn Operation>>,
}

impl Committer {
    /// Starts the committer thread on the writer pool, and the checkpoint thread beside it on
    /// a reader connection (the writer then leaves checkpoints to it).
    pub(crate) fn start(
        writer: Pool<SqliteConnectionManager>,
        readers: Pool<SqliteConnectionManager>,
    ) -> Committer {
        let (queue, ops) = mpsc::channel::<Box<dyn Operation>>();
        let checkpointer = Checkpointer::start(readers);
        std::thread::Builder::new()
            .name("relayq-commit".into())
            .spawn(move || run(writer, ops, checkpointer))
            .expect("cannot start the commit thread");
        Committer { queue }
    }

    /// Queues `f` to run in the next shared transaction; the answer comes after the commit.
    pub fn submit<T, F>(&self, atomicity: Atomicity, f: F) -> oneshot::Receiver<Result<T>>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let op = Box::new(Typed {
            atomicity,
            f: Some(f),
            out: None,
            reply,
        });
        if let Err(mpsc::SendError(op)) = self.queue.send(op) {
            op.answer(Err("the commit thread has stopped"));
        }
        answer
    }
}

fn run(
    writer: Pool<SqliteConnectionManager>,
    ops: mpsc::Receiver<Box<dyn Operation>>,
    checkpointer: Checkpointer,
) {
    let backstop = writer.get().map_err(EngineError::from).and_then(|conn| {
        Ok(conn.pragma_update(
            None,
            "wal_autocheckpoint",
            checkpoint::WRITER_BACKSTOP_PAGES,
        )?)
    });
    if let Err(e) = backstop {
        tracing::warn!(error = %e, "cannot hand checkpoints to the checkpoint thread; the writer keeps doing them");
    }
    let mut batch: Vec<Box<dyn Operation>> = Vec::with_capacity(MAX_BATCH);
    let (mut batches, mut operations) = (0u64, 0u64);
    let mut busy = std::time::Duration::ZERO;
    let started = std::time::Instant::now();
    while let Ok(first) = ops.recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match ops.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        batches += 1;
        operations += batch.len() as u64;
        let began = std::time::Instant::now();
        let outcome = commit(&writer, &mut batch);
        busy += began.elapsed();
        if let Err(e) = &outcome {
            tracing::warn!(operations = batch.len(), error = %e, "group commit failed; every operation in it is answered with the error");
        }
        checkpointer.nudge();
        let reason = outcome.as_ref().err().map(|e| e.to_string());
        for op in batch.drain(..) {
            op.answer(reason.as_deref().map_or(Ok(()), Err));
        }
    }
    // How well the batching worked and how busy the writer was: what to look at first when
    // write throughput is in question.
    tracing::debug!(
        batches,
        operations,
        busy_ms = busy.as_millis() as u64,
        lifetime_ms = started.elapsed().as_millis() as u64,
        "commit thread stopped"
    );
}

/// Runs every operation of `batch` in one IMMEDIATE transaction, each in a savepoint unless
/// it needs none.
fn commit(writer: &Pool<SqliteConnectionManager>, batch: &mut [Box<dyn Operation>]) -> Result<()> {
    let mut conn = writer.get()?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for op in batch.iter_mut() {
        let guarded = op.atomicity() == Atomicity::Savepoint;
        if guarded {
            tx.prepare_cached("SAVEPOINT op")?.execute([])?;
        }
        let ran = catch_unwind(AssertUnwindSafe(|| op.run(&tx)));
        let panicked = ran.is_err();
        if panicked {
            tracing::error!("a database operation panicked; it is rolled back");
        }
        if guarded {
            if !ran.unwrap_or(false) {
                tx.prepare_cached("ROLLBACK TO op")?.execute([])?;
            }
            tx.prepare_cached("RELEASE op")?.execute([])?;
        } else if panicked {
            // A failed single statement undid itself; a panic may have come after its write.
            return Err(EngineError::NotCommitted("an operation panicked".into()));
        }
    }
    tx.commit()?;
    Ok(())
}
