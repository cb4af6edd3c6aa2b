//! Group commit: the writes of many callers run in one transaction and share one commit (one
//! fsync under synchronous = FULL). A single committer thread takes every operation waiting
//! in its queue, runs each inside its own savepoint (so one failing operation rolls back
//! only itself), commits, and only then answers each caller. Operations run in the order
//! they were submitted, so a caller that submits A before B sees A committed no later than B
//! (on one [`CommitLine`]: PostgreSQL runs a committer per line).
//! An operation that writes with a single statement may skip its savepoint (see [`Atomicity`]).
//! An operation that begins by writing a queue row may hand the row over ([`RowAhead`]): on
//! PostgreSQL the rows of operations next to each other are then written by one statement.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};

use tokio::sync::oneshot;

use crate::error::{EngineError, Result};
use crate::storage::row::Enqueued;
pub use crate::storage::row::RowAhead;
use crate::storage::sql::{Query, Sql};
use crate::storage::tx::Tx;

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
    /// PostgreSQL tells neither apart: there a failed statement spoils the whole transaction,
    /// so a batch runs with no savepoints and, when an operation fails, again with one for
    /// every operation (see `PgBatches`).
    OneStatement,
}

/// Which commit thread a write goes through. SQLite has one writer, and every line is its
/// one thread. On PostgreSQL the writes about rows this node holds (a run's answers, its
/// leases' marks and give-backs) go through [`HELD_LINES`] threads and connections of their
/// own beside the rest (new rows, hook events, approvals, pauses), each key's always through
/// the same one: one thread kept every write in one serial chain of round trips, which used
/// one of the server's cores, and one thread for held rows left a drain to 5 destinations at
/// a third of SQLite's. Writes of one line commit in the order submitted, so a key's do;
/// writes of two lines are two writers' transactions, as two nodes' are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitLine {
    Main,
    /// The writes about rows of this key held by this node.
    HeldRows(KeyLine),
}

/// Threads (and connections) for the writes about held rows, on PostgreSQL.
pub const HELD_LINES: usize = 2;

/// How many of a node's [`HELD_LINES`] may run a transaction at once: all of them while no
/// other node is writing, fewer when others are (see `Engine::look_at_others`). Every node's
/// writers share the database server's cores, and past about as many writers as cores each
/// transaction slows more than another writer adds: on a 2-core server, a drain to 100
/// destinations by three nodes with 2 writers each ran at 0.85× one node's, with 1 each at
/// 1.1–1.6×. A key keeps its line (its writes stay in order); only how many lines write at
/// once changes.
#[derive(Debug)]
pub struct WriterGate {
    /// Transactions running, and how many may.
    running: Mutex<(usize, usize)>,
    freed: Condvar,
}

impl Default for WriterGate {
    fn default() -> Self {
        WriterGate {
            running: Mutex::new((0, HELD_LINES)),
            freed: Condvar::new(),
        }
    }
}

impl WriterGate {
    /// Lets `n` (1 to [`HELD_LINES`]) transactions run at once from now on.
    pub fn allow(&self, n: usize) {
        let mut running = self.running.lock().expect("writer gate lock");
        running.1 = n.clamp(1, HELD_LINES);
        self.freed.notify_all();
    }

    /// How many may run at once.
    pub fn allowed(&self) -> usize {
        self.running.lock().expect("writer gate lock").1
    }

    /// Waits for a turn; the turn ends when the pass is dropped.
    fn enter(&self) -> GatePass<'_> {
        let mut running = self.running.lock().expect("writer gate lock");
        while running.0 >= running.1 {
            running = self.freed.wait(running).expect("writer gate lock");
        }
        running.0 += 1;
        GatePass(self)
    }
}

/// A turn through a [`WriterGate`].
struct GatePass<'a>(&'a WriterGate);

impl Drop for GatePass<'_> {
    fn drop(&mut self) {
        self.0.running.lock().expect("writer gate lock").0 -= 1;
        self.0.freed.notify_one();
    }
}

/// Which of the [`HELD_LINES`] a key's writes go through: always the same for a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLine(usize);

impl KeyLine {
    pub fn of(key: &str) -> Self {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let hash = BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(key);
        KeyLine(hash as usize % HELD_LINES)
    }
}

impl CommitLine {
    /// The line of the writes about `key`'s held rows.
    pub fn held(key: &str) -> Self {
        CommitLine::HeldRows(KeyLine::of(key))
    }

    /// Its commit thread among `1 + HELD_LINES`.
    pub(crate) fn index(self) -> usize {
        match self {
            CommitLine::Main => 0,
            CommitLine::HeldRows(KeyLine(at)) => 1 + at,
        }
    }
}

/// One queued operation, type-erased for the committer thread.
pub(crate) trait Operation: Send {
    fn atomicity(&self) -> Atomicity;
    /// The row it begins by writing, when a backend may write it ahead.
    fn row_ahead(&self) -> Option<&RowAhead> {
        None
    }
    /// Runs inside the shared transaction; false when it failed (its savepoint is rolled back).
    /// `written`: its row ahead, written already in this transaction (`None`: it writes it
    /// itself). It may run again, from the start, when the batch is rolled back and run again.
    fn run(&mut self, tx: &Tx<'_>, written: Option<Enqueued>) -> bool;
    /// Answers the caller once the transaction's fate is known (`Err` when it did not commit).
    fn answer(self: Box<Self>, committed: std::result::Result<(), &str>);
}

struct Typed<T, F> {
    atomicity: Atomicity,
    ahead: Option<RowAhead>,
    f: F,
    out: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Operation for Typed<T, F>
where
    T: Send + 'static,
    F: Fn(&Tx<'_>, Option<Enqueued>) -> Result<T> + Send + 'static,
{
    fn atomicity(&self) -> Atomicity {
        self.atomicity
    }

    fn row_ahead(&self) -> Option<&RowAhead> {
        self.ahead.as_ref()
    }

    fn run(&mut self, tx: &Tx<'_>, written: Option<Enqueued>) -> bool {
        self.out = None; // a panic leaves none
        let out = (self.f)(tx, written);
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
        // `f` (and what it holds for the caller) is dropped after the answer.
    }
}

/// The handle callers submit through. Cheap to clone; the thread ends when the last is dropped.
#[derive(Clone)]
pub struct Committer {
    queue: mpsc::Sender<Box<dyn Operation>>,
    /// Operations submitted and not answered yet: how busy this process's writer is.
    backlog: Arc<AtomicUsize>,
}

/// A backend's side of the group commit: how a batch becomes one transaction.
pub(crate) trait Batches: Send + 'static {
    /// Runs every operation of `batch` in one transaction, each through [`run_one`], and
    /// commits.
    fn commit(&mut self, batch: &mut [Box<dyn Operation>]) -> Result<()>;

    /// After each batch, committed or not (SQLite asks for a checkpoint).
    fn after_batch(&mut self) {}
}

impl Committer {
    /// Starts the commit thread on `batches`; each of its transactions waits for a turn
    /// through `gate`, if given.
    pub(crate) fn start(batches: impl Batches, gate: Option<Arc<WriterGate>>) -> Committer {
        let (queue, ops) = mpsc::channel::<Box<dyn Operation>>();
        let backlog = Arc::new(AtomicUsize::new(0));
        let answered = backlog.clone();
        std::thread::Builder::new()
            .name("relayq-commit".into())
            .spawn(move || run(batches, ops, &answered, gate.as_deref()))
            .expect("cannot start the commit thread");
        Committer { queue, backlog }
    }

    /// Operations submitted and not answered yet.
    pub fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Relaxed)
    }

    /// Queues `f` to run in the next shared transaction; the answer comes after the commit.
    /// `f` may run more than once (a batch rolled back is run again): all it does is write
    /// through `tx`.
    pub fn submit<T, F>(&self, atomicity: Atomicity, f: F) -> oneshot::Receiver<Result<T>>
    where
        T: Send + 'static,
        F: Fn(&Tx<'_>) -> Result<T> + Send + 'static,
    {
        self.submit_ahead(atomicity, None, move |tx, _| f(tx))
    }

    /// [`submit`](Self::submit) for an operation that begins by writing `ahead`: `f` is given
    /// the row when the backend wrote it ahead, and writes it itself when given `None`.
    pub fn submit_ahead<T, F>(
        &self,
        atomicity: Atomicity,
        ahead: Option<RowAhead>,
        f: F,
    ) -> oneshot::Receiver<Result<T>>
    where
        T: Send + 'static,
        F: Fn(&Tx<'_>, Option<Enqueued>) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.backlog.fetch_add(1, Ordering::Relaxed);
        let op = Box::new(Typed {
            atomicity,
            ahead,
            f,
            out: None,
            reply,
        });
        if let Err(mpsc::SendError(op)) = self.queue.send(op) {
            self.backlog.fetch_sub(1, Ordering::Relaxed);
            op.answer(Err("the commit thread has stopped"));
        }
        answer
    }
}

fn run(
    mut backend: impl Batches,
    ops: mpsc::Receiver<Box<dyn Operation>>,
    backlog: &AtomicUsize,
    gate: Option<&WriterGate>,
) {
    let mut batch: Vec<Box<dyn Operation>> = Vec::with_capacity(MAX_BATCH);
    let (mut batches, mut operations) = (0u64, 0u64);
    let mut busy = std::time::Duration::ZERO;
    let started = std::time::Instant::now();
    while let Ok(first) = ops.recv() {
        // Operations that come while the turn is awaited join this batch.
        let pass = gate.map(WriterGate::enter);
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
        let outcome = backend.commit(&mut batch);
        drop(pass);
        busy += began.elapsed();
        if let Err(e) = &outcome {
            tracing::warn!(operations = batch.len(), error = %e, "group commit failed; every operation in it is answered with the error");
        }
        backend.after_batch();
        let reason = outcome.as_ref().err().map(|e| e.to_string());
        backlog.fetch_sub(batch.len(), Ordering::Relaxed);
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

const SAVEPOINT_SQL: Sql = Sql::same("SAVEPOINT op");
const ROLLBACK_TO_SQL: Sql = Sql::same("ROLLBACK TO SAVEPOINT op");
const RELEASE_SQL: Sql = Sql::same("RELEASE SAVEPOINT op");

/// Runs `op` in `tx`, a panic caught: `Some(true)` when it succeeded, `Some(false)` when it
/// failed, `None` when it panicked (logged).
fn run_caught(tx: &Tx<'_>, op: &mut Box<dyn Operation>, written: Option<Enqueued>) -> Option<bool> {
    let ran = catch_unwind(AssertUnwindSafe(|| op.run(tx, written))).ok();
    if ran.is_none() {
        tracing::error!("a database operation panicked; it is rolled back");
    }
    ran
}

/// Runs every operation of `batch` in `tx` with no savepoint, stopping at the first that fails
/// or panics: false then, and the caller rolls the transaction back (and may run the batch
/// again, each operation guarded). The rows ahead of each run of operations that have one are
/// written first by `write_ahead`, in order, one answer a row.
pub(crate) fn run_unguarded(
    tx: &Tx<'_>,
    batch: &mut [Box<dyn Operation>],
    write_ahead: impl Fn(&Tx<'_>, &[&RowAhead]) -> Result<Vec<Enqueued>>,
) -> bool {
    let mut at = 0;
    while at < batch.len() {
        let ahead: Vec<&RowAhead> = batch[at..].iter().map_while(|op| op.row_ahead()).collect();
        if ahead.len() < 2 {
            if !run_caught(tx, &mut batch[at], None).unwrap_or(false) {
                return false;
            }
            at += 1;
            continue;
        }
        let written = match write_ahead(tx, &ahead) {
            Ok(written) if written.len() == ahead.len() => written,
            Ok(_) => return false,
            Err(e) => {
                tracing::debug!(error = %e, "the rows ahead were not written together");
                return false;
            }
        };
        for (op, row) in batch[at..].iter_mut().zip(written) {
            if !run_caught(tx, op, Some(row)).unwrap_or(false) {
                return false;
            }
            at += 1;
        }
    }
    true
}

/// Runs `op` inside the batch's transaction `tx`: in a savepoint of its own when `guarded`,
/// rolled back if it fails. An error here is the transaction's, and fails the whole batch.
pub(crate) fn run_one(tx: &Tx<'_>, op: &mut Box<dyn Operation>, guarded: bool) -> Result<()> {
    if guarded {
        tx.exec(&SAVEPOINT_SQL, crate::params![])?;
    }
    let ran = run_caught(tx, op, None);
    let panicked = ran.is_none();
    if guarded {
        if !ran.unwrap_or(false) {
            tx.exec(&ROLLBACK_TO_SQL, crate::params![])?;
        }
        tx.exec(&RELEASE_SQL, crate::params![])?;
    } else if panicked {
        // A failed single statement undid itself; a panic may have come after its write.
        return Err(EngineError::NotCommitted("an operation panicked".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::time::Duration;

    /// Whether `n` threads can all be inside `gate` at once: each waits inside for the others,
    /// up to a second.
    fn all_inside_at_once(gate: &Arc<WriterGate>, n: usize) -> bool {
        let together = Arc::new(Barrier::new(n + 1));
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let (gate, together, inside) = (gate.clone(), together.clone(), inside.clone());
                std::thread::spawn(move || {
                    let _pass = gate.enter();
                    inside.fetch_add(1, Ordering::SeqCst);
                    let deadline = std::time::Instant::now() + Duration::from_secs(1);
                    while inside.load(Ordering::SeqCst) < n && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    let met = inside.load(Ordering::SeqCst) >= n;
                    drop(_pass);
                    together.wait();
                    met
                })
            })
            .collect();
        together.wait();
        threads.into_iter().all(|t| t.join().unwrap())
    }

    /// Held-row writers take turns as allowed: one at a time while another node writes, every
    /// line at once while none does; out-of-range allowances are brought into 1..=HELD_LINES.
    #[test]
    fn a_writer_gate_lets_in_as_many_writers_at_once_as_it_allows() {
        let gate = Arc::new(WriterGate::default());
        assert_eq!(gate.allowed(), HELD_LINES);
        assert!(all_inside_at_once(&gate, HELD_LINES));
        gate.allow(1);
        assert!(!all_inside_at_once(&gate, 2), "two writers at once");
        gate.allow(0);
        assert_eq!(gate.allowed(), 1);
        gate.allow(HELD_LINES + 5);
        assert_eq!(gate.allowed(), HELD_LINES);
        assert!(all_inside_at_once(&gate, HELD_LINES));
    }
}
