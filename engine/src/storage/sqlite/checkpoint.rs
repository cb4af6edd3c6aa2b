//! Background checkpoints: copying the WAL back into the database file on a thread of its own,
//! so the commit thread does not stop for it. SQLite checkpoints inside the commit that crosses
//! its threshold (every 1000 pages by default), which stalls every writer waiting on that
//! commit; a PASSIVE checkpoint on another connection runs beside the writer instead.

use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::time::Duration;

use r2d2::Pool;
use r2d2_sqlite::SqliteConnectionManager;

/// The writer still checkpoints by itself once the WAL holds this many pages (16 MB of 4 KiB
/// pages). By then the background thread has copied nearly all of them, so it is quick; and
/// only a checkpoint by the writer lets the WAL start over while writes keep coming.
pub(crate) const WRITER_BACKSTOP_PAGES: u32 = 4_000;

/// Checkpoints at most this often, so a stream of small commits costs few checkpoints.
const MIN_INTERVAL: Duration = Duration::from_millis(50);

/// Checkpoints this often without being told, for commits made outside the group commit.
const MAX_INTERVAL: Duration = Duration::from_secs(1);

/// Tells the checkpoint thread that commits happened. The thread ends when this is dropped.
pub(crate) struct Checkpointer {
    nudge: SyncSender<()>,
}

impl Checkpointer {
    /// Starts the thread; it checkpoints through a connection of `readers`.
    pub(crate) fn start(readers: Pool<SqliteConnectionManager>) -> Checkpointer {
        let (nudge, nudged) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("relayq-checkpoint".into())
            .spawn(move || loop {
                match nudged.recv_timeout(MAX_INTERVAL) {
                    Ok(()) | Err(RecvTimeoutError::Timeout) => checkpoint(&readers),
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                std::thread::sleep(MIN_INTERVAL);
            })
            .expect("cannot start the checkpoint thread");
        Checkpointer { nudge }
    }

    /// Asks for a checkpoint soon. A full channel means one is already asked for; a closed one
    /// means the thread is gone (the writer's backstop still checkpoints).
    pub(crate) fn nudge(&self) {
        let _ = self.nudge.try_send(());
    }
}

fn checkpoint(readers: &Pool<SqliteConnectionManager>) {
    let done = readers.get().map_err(|e| e.to_string()).and_then(|conn| {
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .map_err(|e| e.to_string())
    });
    if let Err(e) = done {
        tracing::warn!(error = %e, "background checkpoint failed; the next one will try again");
    }
}
