//! Opening a SQLite database: the file (mode 0600), the pragmas every connection needs, the
//! schema migrations, and two r2d2 pools — one writer (SQLite has one writer anyway; a pool of
//! one serialises this process's writers without busy-sleeping) and a few readers.

use std::fs::OpenOptions;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use r2d2::{Pool, PooledConnection};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use scheduled_thread_pool::ScheduledThreadPool;

use crate::error::{EngineError, Result};
use crate::storage::clock::Clock;
use crate::storage::commit::{run_one, Atomicity, Batches, Operation};
use crate::storage::db_config::DbConfig;
use crate::storage::sqlite::checkpoint::{self, Checkpointer};
use crate::storage::tx::Tx;

/// The schema, oldest first; `PRAGMA user_version` counts those applied. Never edit a released
/// migration: add a new one.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/0001_queue_rows.sql"),
    include_str!("../../../migrations/0002_sessions.sql"),
    include_str!("../../../migrations/0003_queue_rows_cheaper_checks.sql"),
    include_str!("../../../migrations/0004_inbound_dedup_per_chat.sql"),
    include_str!("../../../migrations/0005_delivery_receipts.sql"),
    include_str!("../../../migrations/0006_source_offsets.sql"),
    include_str!("../../../migrations/0007_channel_penalties.sql"),
    include_str!("../../../migrations/0008_send_started.sql"),
    include_str!("../../../migrations/0009_session_origins.sql"),
    include_str!("../../../migrations/0010_pauses.sql"),
    include_str!("../../../migrations/0011_dead_rows_index.sql"),
    include_str!("../../../migrations/0012_agent_state.sql"),
    include_str!("../../../migrations/0013_approvals.sql"),
    include_str!("../../../migrations/0014_approval_keys.sql"),
    include_str!("../../../migrations/0015_nodes.sql"),
    include_str!("../../../migrations/0016_node_load.sql"),
    include_str!("../../../migrations/0017_node_unready.sql"),
    include_str!("../../../migrations/0018_permission_mode.sql"),
    include_str!("../../../migrations/0019_held_runs.sql"),
    include_str!("../../../migrations/0020_chat_sessions.sql"),
    include_str!("../../../migrations/0021_progress.sql"),
    include_str!("../../../migrations/0022_progress_lanes.sql"),
    include_str!("../../../migrations/0023_album_parts.sql"),
    include_str!("../../../migrations/0024_chat_access.sql"),
];

/// Brings the schema up to `target` migrations. The write lock is taken (`BEGIN IMMEDIATE`)
/// before `user_version` is read, so processes opening a new database at the same moment (a
/// daemon starting while hooks fire) apply each migration once: the others wait for the lock
/// (the busy timeout), then find the schema current. A database written by a newer relayq is
/// refused rather than misread.
pub(crate) fn migrate(conn: &mut Connection, target: usize) -> Result<()> {
    let version = |c: &Connection| -> rusqlite::Result<usize> {
        c.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
            .map(|v| v.max(0) as usize)
    };
    if version(conn)? == target {
        return Ok(()); // the common case: no lock taken
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let current = version(&tx)?;
    if current > MIGRATIONS.len() {
        return Err(EngineError::Migration(format!(
            "the database has schema version {current}, newer than this relayq knows ({}): \
             run a relayq at least as new as the one that wrote it",
            MIGRATIONS.len()
        )));
    }
    for (n, sql) in MIGRATIONS.iter().enumerate().take(target).skip(current) {
        tx.execute_batch(sql)
            .map_err(|e| EngineError::Migration(format!("migration {}: {e}", n + 1)))?;
    }
    tx.pragma_update(None, "user_version", target.max(current) as i64)?;
    tx.commit()?;
    Ok(())
}

/// A pooled SQLite connection.
pub type SqliteConn = PooledConnection<SqliteConnectionManager>;

/// An open SQLite database: a writer pool of one and a reader pool.
#[derive(Clone)]
pub struct SqliteDatabase {
    path: PathBuf,
    writer: Pool<SqliteConnectionManager>,
    readers: Pool<SqliteConnectionManager>,
    /// The file's (device, inode) when it was opened: see
    /// [`SqliteDatabase::file_still_there`].
    identity: Option<(u64, u64)>,
}

impl std::fmt::Debug for SqliteDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteDatabase")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteDatabase {
    /// Creates the file if needed (mode 0600), migrates it to the latest schema, opens the pools.
    pub fn open(config: &DbConfig) -> Result<Self> {
        let path = config.path.clone();
        create_private_file(&path)?;
        let open_error = |e: rusqlite::Error| EngineError::Open {
            path: path.clone(),
            reason: e.to_string(),
        };
        let mut conn = Connection::open(&path).map_err(open_error)?;
        configure(&conn, config).map_err(open_error)?;
        enable_wal(&conn, config.busy_timeout).map_err(|reason| EngineError::Open {
            path: path.clone(),
            reason,
        })?;
        migrate(&mut conn, MIGRATIONS.len())?;

        // One scheduler thread for both pools (r2d2 would start three per pool). The writer is
        // opened now (every command writes); readers on first use, so a one-shot command (the
        // hook receiver, `enqueue`) opens no connection it never reads with.
        let scheduler = Arc::new(
            ScheduledThreadPool::builder()
                .num_threads(1)
                .thread_name_pattern("relayq-db-pool")
                .build(),
        );
        let writer = pool(config, 1, 1, &scheduler)?;
        let readers = pool(config, config.readers.max(1), 0, &scheduler)?;
        // Closed only now: had it been the last connection, closing it would checkpoint and
        // delete the WAL, which the writer would create (and fsync) again at once.
        drop(conn);
        let identity = std::fs::metadata(&path).ok().map(|m| (m.dev(), m.ino()));
        Ok(SqliteDatabase {
            path,
            writer,
            readers,
            identity,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file at the path is still the one opened: deleted, or replaced by another
    /// file, its rows are no longer what every other command (the CLI, the hooks) reads and
    /// writes, and what this process writes is lost with it. The reason when it is not.
    pub fn file_still_there(&self) -> std::result::Result<(), String> {
        let now = std::fs::metadata(&self.path).map(|m| (m.dev(), m.ino()));
        match (now, self.identity) {
            (Ok(now), Some(opened)) if now != opened => Err(format!(
                "the database file {} was replaced by another file since it was opened: \
                 this daemon writes to the old one, which no command reads; restart it",
                self.path.display()
            )),
            (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
                "the database file {} was deleted while in use: nothing written since is \
                 kept, and other commands would start a new, empty one; restart the daemon",
                self.path.display()
            )),
            _ => Ok(()),
        }
    }

    /// Runs `f` in an IMMEDIATE transaction (the write lock is taken at BEGIN, so a busy
    /// database fails fast at the start instead of deadlocking mid-transaction) and commits.
    pub fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.writer.get()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// [`write`](Self::write) made at `now` (unix ms): the storage functions read the time
    /// from the transaction.
    pub fn write_at<T>(&self, now: i64, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        self.write(|tx| f(&Tx::new(tx, now)))
    }

    /// The group commit's side of this database (see [`crate::storage::commit`]): batches run in
    /// IMMEDIATE transactions on the writer, each operation made at `clock`'s time when it
    /// runs; checkpoints are left to a thread of their own on a reader connection.
    pub(crate) fn batches(&self, clock: Arc<dyn Clock>) -> SqliteBatches {
        let backstop = self
            .writer
            .get()
            .map_err(EngineError::from)
            .and_then(|conn| {
                Ok(conn.pragma_update(
                    None,
                    "wal_autocheckpoint",
                    checkpoint::WRITER_BACKSTOP_PAGES,
                )?)
            });
        if let Err(e) = backstop {
            tracing::warn!(error = %e, "cannot hand checkpoints to the checkpoint thread; the writer keeps doing them");
        }
        SqliteBatches {
            writer: self.writer.clone(),
            checkpointer: Checkpointer::start(self.readers.clone()),
            clock,
        }
    }

    /// A reader connection, for queries that change nothing.
    pub fn read(&self) -> Result<SqliteConn> {
        Ok(self.readers.get()?)
    }
}

/// The group commit on SQLite.
pub(crate) struct SqliteBatches {
    writer: Pool<SqliteConnectionManager>,
    checkpointer: Checkpointer,
    clock: Arc<dyn Clock>,
}

impl Batches for SqliteBatches {
    /// One IMMEDIATE transaction; a savepoint per operation unless it needs none.
    fn commit(&mut self, batch: &mut [Box<dyn Operation>]) -> Result<()> {
        let mut conn = self.writer.get()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for op in batch.iter_mut() {
            let guarded = op.atomicity() == Atomicity::Savepoint;
            run_one(&Tx::new(&tx, self.clock.now_ms()), op, guarded)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn after_batch(&mut self) {
        self.checkpointer.nudge();
    }
}

/// A new SQLite database in a temporary directory, kept while the directory lives: for tests
/// of what only SQLite has (its statements' status, raw transactions).
#[cfg(any(test, feature = "test-helpers"))]
pub fn temp_sqlite() -> (tempfile::TempDir, SqliteDatabase) {
    let dir = tempfile::tempdir().unwrap();
    let db = SqliteDatabase::open(&DbConfig::new(dir.path().join("q.db"))).unwrap();
    (dir, db)
}

/// Switches a new file to WAL (a property of the file, kept once set). On a new file another
/// process may hold the lock at that moment, in which case SQLite answers with the old mode
/// instead of waiting: ask again until `wait` has passed.
fn enable_wal(conn: &Connection, wait: Duration) -> std::result::Result<(), String> {
    let started = std::time::Instant::now();
    loop {
        let mode = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
            .map_err(|e| e.to_string());
        match mode {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) if started.elapsed() >= wait => {
                return Err(format!(
                    "the file system does not support WAL (journal_mode is {mode})"
                ))
            }
            Err(e) if started.elapsed() >= wait => return Err(e),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// The pragmas each connection needs. WAL is a property of the file, set once at open.
fn configure(conn: &Connection, config: &DbConfig) -> rusqlite::Result<()> {
    conn.busy_timeout(config.busy_timeout)?;
    // Every statement the engine runs stays prepared (rusqlite keeps 16 by default).
    conn.set_prepared_statement_cache_capacity(64);
    // Plans must not depend on bound values. Without this, SQLite (3.47+, and STAT4 in
    // the bundled build) marks a statement whose `LIMIT :limit` or indexed comparison reads a
    // parameter to be prepared again at every new binding: each lease of a run paid a full
    // parse and plan, a quarter of the writer's time under HTTP load.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    conn.pragma_update(None, "synchronous", config.synchronous.pragma())?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

fn pool(
    config: &DbConfig,
    size: u32,
    open_now: u32,
    scheduler: &Arc<ScheduledThreadPool>,
) -> Result<Pool<SqliteConnectionManager>> {
    let cfg = config.clone();
    // The file exists (`open` made it): a connection opened later never creates one. Deleted
    // under a running daemon, a new empty file at the path would be taken for the database
    // by every other command (`file_still_there` says what happened instead).
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let manager = SqliteConnectionManager::file(&config.path)
        .with_flags(flags)
        .with_init(move |c| configure(c, &cfg));
    Ok(Pool::builder()
        .max_size(size)
        .min_idle(Some(open_now))
        .thread_pool(scheduler.clone())
        .connection_timeout(config.busy_timeout.max(Duration::from_secs(1)))
        .build(manager)?)
}

/// Creates the database file readable by its owner only, before SQLite does (SQLite would use
/// the umask, usually 0644). SQLite gives the -wal and -shm files the same mode as this one.
fn create_private_file(path: &Path) -> Result<()> {
    let err = |reason: String| EngineError::Open {
        path: path.to_path_buf(),
        reason,
    };
    if path.as_os_str().is_empty() {
        return Err(err("the path is empty".into()));
    }
    if path.is_dir() {
        return Err(err("it is a directory; give a file path".into()));
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(err(format!(
            "directory {} does not exist; create it first",
            parent.display()
        )));
    }
    // In a directory others may write to, a link at the database's path may be theirs: it
    // would make relayq write its database (and the chat text in it) where they chose.
    let shared = std::fs::metadata(parent).is_ok_and(|m| m.mode() & 0o022 != 0);
    if shared && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(err(format!(
            "it is a symbolic link in {}, a directory other users may write to: relayq does \
             not follow it; use a private directory (or the default location)",
            parent.display()
        )));
    }
    // Only a new file is opened here: closing a descriptor of a database this process already
    // has open would drop the POSIX locks SQLite holds on it.
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(err(format!("{e} (is the path writable?)"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Regression (CI, `regression::a_database_deleted_under_the_daemon_…`): a reader the
    /// pool opened after the file was deleted created a new, empty one at the path, which the
    /// next command took for the database.
    #[test]
    fn a_connection_opened_after_the_file_was_deleted_creates_no_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let db = SqliteDatabase::open(&DbConfig::new(&path)).unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        assert!(db.read().is_err(), "no reader on a deleted file");
        assert!(!path.exists(), "no new file made at the path");
        assert!(db.file_still_there().is_err());
    }

    #[test]
    fn migrations_apply_in_order_and_set_the_version() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn, MIGRATIONS.len()).unwrap();
        let v: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v as usize, MIGRATIONS.len());
        migrate(&mut conn, MIGRATIONS.len()).unwrap(); // a second run changes nothing
    }

    #[test]
    fn a_database_from_a_newer_relayq_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        let err = SqliteDatabase::open(&DbConfig::new(&path)).unwrap_err();
        assert!(err.to_string().contains("schema version 99"), "{err}");
    }

    #[test]
    fn new_file_is_private_and_pragmas_hold_on_every_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let mut cfg = DbConfig::new(&path);
        cfg.synchronous = crate::storage::db_config::Synchronous::Full;
        cfg.busy_timeout = Duration::from_millis(1234);
        let db = SqliteDatabase::open(&cfg).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);

        let check = |c: &Connection| {
            let jm: String = c
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap();
            let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
            let busy: i64 = c
                .query_row("PRAGMA busy_timeout", [], |r| r.get(0))
                .unwrap();
            assert_eq!(jm, "wal");
            assert_eq!(sync, 2, "FULL is 2");
            assert_eq!(busy, 1234);
        };
        check(&db.read().unwrap());
        check(&db.writer.get().unwrap());
        db.write(|tx| Ok(tx.execute_batch("CREATE TABLE probe(x)")?))
            .unwrap();
        let wal = dir.path().join("q.db-wal");
        let wal_mode = std::fs::metadata(wal).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            wal_mode, 0o600,
            "the WAL file is as private as the database"
        );
    }

    #[test]
    fn normal_synchronous_is_the_default() {
        let (_dir, db) = temp_sqlite();
        let sync: i64 = db
            .read()
            .unwrap()
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 1, "NORMAL is 1");
    }

    #[test]
    fn reopening_keeps_data_and_does_not_remigrate() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = DbConfig::new(dir.path().join("q.db"));
        SqliteDatabase::open(&cfg).unwrap().write(|tx| {
            tx.execute("INSERT INTO queue_rows(queue,key,payload,created_at,next_attempt_at) VALUES('q','k','{}',0,0)", [])?;
            Ok(())
        }).unwrap();
        let db = SqliteDatabase::open(&cfg).unwrap();
        let n: i64 = db
            .read()
            .unwrap()
            .query_row("SELECT COUNT(*) FROM queue_rows", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
    }

    /// A database written by the first schema keeps its rows, and ids are never reused after
    /// the table rebuild of migration 3, even the id of a row pruned before the upgrade.
    #[test]
    fn upgrade_from_the_first_schema_keeps_rows_and_the_id_high_water_mark() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, 2).unwrap();
        let insert = "INSERT INTO queue_rows(queue,key,payload,created_at,next_attempt_at)
                      VALUES('q','k','{}',0,0)";
        for _ in 0..3 {
            conn.execute(insert, []).unwrap();
        }
        conn.execute("DELETE FROM queue_rows WHERE id = 3", [])
            .unwrap();
        drop(conn);

        let db = SqliteDatabase::open(&DbConfig::new(&path)).unwrap();
        let id: i64 = db
            .write(|tx| Ok(tx.query_row(&format!("{insert} RETURNING id"), [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(id, 4, "id 3 was used before the upgrade");
        let conn = db.read().unwrap();
        let ids: Vec<i64> = conn
            .prepare("SELECT id FROM queue_rows ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(ids, [1, 2, 4]);
        let bad = Connection::open(&path).unwrap().execute(
            "INSERT INTO queue_rows(queue,key,payload,created_at,next_attempt_at,state)
             VALUES('q','k','{}',0,0,'lost')",
            [],
        );
        assert!(bad.is_err(), "the state CHECK still holds");
    }

    #[test]
    fn missing_directory_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = SqliteDatabase::open(&DbConfig::new(dir.path().join("nope/q.db"))).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
    }
}
