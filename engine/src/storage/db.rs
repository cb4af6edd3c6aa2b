//! The database, of either backend: SQLite (one file, one daemon: the default) or PostgreSQL
//! (several daemons on one server). Everything above storage holds a [`Database`] and never
//! asks which: reads through [`Database::read`], one-shot writes through [`Database::write`],
//! the daemon's writes through the group commit ([`Database::submit`]).
//!
//! ```text
//!   Database ─┬─ Sqlite(SqliteDatabase)   writer pool of 1 + readers, WAL, checkpoints
//!             └─ Postgres(PgDatabase)     one pool; times from the database's clock
//!   submit ──> Committer thread ──> Batches (per backend) ──> one transaction per batch
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::error::Result;
use crate::storage::clock::{Clock, SystemClock};
use crate::storage::commit::{Atomicity, CommitLine, Committer, WriterGate, HELD_LINES};
use crate::storage::postgresql::db::{redacted, PgDatabase, PgRead};
pub use crate::storage::postgresql::notify::{Heard, Listener};
use crate::storage::sql::{Executor, Target};
use crate::storage::tx::Tx;

pub use crate::storage::db_config::{DbConfig, Synchronous};
pub use crate::storage::sqlite::db::{SqliteConn, SqliteDatabase};

/// An open database. Cheap to clone; clones share the pools and the commit thread.
#[derive(Clone)]
pub struct Database {
    backend: Backend,
    path: PathBuf,
    /// The time writes are made at on SQLite (and on PostgreSQL when it is a test's).
    clock: Arc<dyn Clock>,
    /// Started on first `submit`, so one-shot commands never start a thread: one per
    /// [`CommitLine`] on PostgreSQL (the main one and each held-row line), one for all on SQLite.
    committers: Arc<[OnceLock<Committer>; 1 + HELD_LINES]>,
    /// How many held-row lines write at once (PostgreSQL).
    held_writers: Arc<WriterGate>,
}

#[derive(Clone)]
enum Backend {
    Sqlite(SqliteDatabase),
    /// The server, and its URL (with its password, for the listener's connection: shown only
    /// through `Database::describe`, which leaves it out).
    Postgres(PgDatabase, String),
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A read connection of either backend.
pub enum Reader {
    Sqlite(SqliteConn),
    Postgres(PgRead),
}

impl Executor for Reader {
    fn target(&self) -> Target<'_> {
        match self {
            Reader::Sqlite(conn) => conn.target(),
            Reader::Postgres(conn) => conn.target(),
        }
    }
}

impl Database {
    /// Opens the database `config` names (creating and migrating it if needed), on the
    /// system clock.
    pub fn open(config: &DbConfig) -> Result<Self> {
        let backend = match &config.url {
            Some(url) => Backend::Postgres(
                PgDatabase::open(url, config.readers + 3, config.busy_timeout)?,
                url.clone(),
            ),
            None => Backend::Sqlite(SqliteDatabase::open(config)?),
        };
        Ok(Database {
            backend,
            path: config.path.clone(),
            clock: Arc::new(SystemClock),
            committers: Arc::default(),
            held_writers: Arc::default(),
        })
    }

    /// This database with writes timed by `clock` (see [`Clock::defers_to_database`]).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Database {
            clock,
            committers: Arc::default(),
            held_writers: Arc::default(),
            ..self
        }
    }

    /// The SQLite file; on PostgreSQL, the path the node's own files live beside.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Which database, for people: the file's path, or the URL without its password.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Sqlite(_) => self.path.display().to_string(),
            Backend::Postgres(_, url) => redacted(url),
        }
    }

    /// Listens for the rows other processes and nodes write pending, and the steps of
    /// progress every daemon announces, and calls `on_heard` for each: on PostgreSQL, the
    /// announcements of the rows' trigger and of `AnnounceProgress` (`LISTEN`, see
    /// [`Listener`]); on SQLite, `None`: its daemon's rows come only from this host, whose
    /// writers wake it through the socket beside the file, and it hears its own steps. Stops
    /// when dropped.
    pub fn listen(
        &self,
        on_heard: impl Fn(Heard<'_>) + Send + 'static,
    ) -> std::io::Result<Option<Listener>> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(_, url) => Listener::start(url.clone(), on_heard).map(Some),
        }
    }

    /// Whether the server at `url` answers within `wait`, as `relayq config check` asks; why
    /// not when it does not.
    pub fn reach(url: &str, wait: std::time::Duration) -> Result<()> {
        crate::storage::postgresql::db::reach(url, wait)
    }

    /// Whether several daemons may share this database (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Postgres(..))
    }

    /// The SQLite database, for what only SQLite has (its file, raw transactions in tests).
    pub fn sqlite(&self) -> Option<&SqliteDatabase> {
        match &self.backend {
            Backend::Sqlite(db) => Some(db),
            Backend::Postgres(..) => None,
        }
    }

    /// Whether the database is still the one opened; the reason when not (see
    /// [`SqliteDatabase::file_still_there`]). A server has no file to lose.
    pub fn file_still_there(&self) -> std::result::Result<(), String> {
        match &self.backend {
            Backend::Sqlite(db) => db.file_still_there(),
            Backend::Postgres(..) => Ok(()),
        }
    }

    /// At a daemon's start: brings the server's statistics of the queue up to date when they
    /// are stale (see [`PgDatabase::analyze_if_stale`]). SQLite plans without them.
    pub fn analyze_if_stale(&self) {
        if let Backend::Postgres(db, _) = &self.backend {
            db.analyze_if_stale();
        }
    }

    /// A connection for queries that change nothing.
    pub fn read(&self) -> Result<Reader> {
        Ok(match &self.backend {
            Backend::Sqlite(db) => Reader::Sqlite(db.read()?),
            Backend::Postgres(db, _) => Reader::Postgres(db.read()?),
        })
    }

    /// Runs `f` in a write transaction of its own, made now, and commits (one-shot commands;
    /// the daemon's writes go through [`submit`](Self::submit)).
    pub fn write<T>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        match &self.backend {
            Backend::Sqlite(db) => db.write_at(self.clock.now_ms(), f),
            Backend::Postgres(db, _) => db.write_with(self.fixed_time(), f),
        }
    }

    /// [`write`](Self::write) made at `now` (unix ms), whatever the clocks say.
    pub fn write_at<T>(&self, now: i64, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        match &self.backend {
            Backend::Sqlite(db) => db.write_at(now, f),
            Backend::Postgres(db, _) => db.write_with(Some(now), f),
        }
    }

    /// The time to make a PostgreSQL write at, when it is not the database's.
    fn fixed_time(&self) -> Option<i64> {
        (!self.clock.defers_to_database()).then(|| self.clock.now_ms())
    }

    /// Queues `f` for the next group commit (see [`Committer`]): it shares its transaction with
    /// the operations submitted around it, in its own savepoint unless `atomicity` says it
    /// needs none, and is answered after the commit. The way for a long-running process with
    /// many concurrent writers to write. `f` may run more than once: a batch rolled back is
    /// run again.
    pub fn submit<T, F>(
        &self,
        atomicity: Atomicity,
        f: F,
    ) -> tokio::sync::oneshot::Receiver<Result<T>>
    where
        T: Send + 'static,
        F: Fn(&Tx<'_>) -> Result<T> + Send + 'static,
    {
        self.committer(CommitLine::Main).submit(atomicity, f)
    }

    /// [`submit`](Self::submit) on `line`, for an operation that begins by writing `ahead`
    /// (see [`Committer::submit_ahead`]).
    pub fn submit_ahead<T, F>(
        &self,
        line: CommitLine,
        atomicity: Atomicity,
        ahead: Option<crate::storage::commit::RowAhead>,
        f: F,
    ) -> tokio::sync::oneshot::Receiver<Result<T>>
    where
        T: Send + 'static,
        F: Fn(&Tx<'_>, Option<crate::storage::row::Enqueued>) -> Result<T> + Send + 'static,
    {
        self.committer(line).submit_ahead(atomicity, ahead, f)
    }

    /// Group-commit operations submitted and not answered yet: how busy this process's writers
    /// are.
    pub fn write_backlog(&self) -> usize {
        self.committers
            .iter()
            .filter_map(OnceLock::get)
            .map(Committer::backlog)
            .sum()
    }

    fn committer(&self, line: CommitLine) -> &Committer {
        let at = match &self.backend {
            Backend::Sqlite(_) => 0,
            Backend::Postgres(..) => line.index(),
        };
        self.committers[at].get_or_init(|| match &self.backend {
            Backend::Sqlite(db) => Committer::start(db.batches(self.clock.clone()), None),
            Backend::Postgres(db, _) => {
                let gate = (line != CommitLine::Main).then(|| self.held_writers.clone());
                Committer::start(db.batches(self.clock.clone()), gate)
            }
        })
    }

    /// The gate of this node's held-row writers (see [`WriterGate`]).
    pub fn held_writers(&self) -> &WriterGate {
        &self.held_writers
    }
}

/// A new SQLite database in a temporary directory, kept while the directory lives.
#[cfg(any(test, feature = "test-helpers"))]
pub fn temp_database() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(&DbConfig::new(dir.path().join("q.db"))).unwrap();
    (dir, db)
}
