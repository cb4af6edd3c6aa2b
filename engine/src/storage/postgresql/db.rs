//! Opening a PostgreSQL database: a pool of connections (r2d2, as for SQLite), the schema
//! migrations (run once, whichever daemon opens the database first), and write transactions
//! timed by the database's clock, so that daemons on hosts whose clocks differ agree on when
//! a lease expires.

use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use r2d2::{Pool, PooledConnection};

use super::client::{InTransaction, Pg};
use crate::error::{EngineError, Result};
use crate::storage::clock::Clock;
use crate::storage::commit::{run_one, run_unguarded, Batches, Operation};
use crate::storage::postgresql::connection::{blocking, Manager};
use crate::storage::row::enqueue_ahead_in;
use crate::storage::sql::{Query, Sql};
use crate::storage::tx::Tx;

/// The PostgreSQL schema, oldest first; `relayq_schema` records those applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/postgresql/0001_schema.sql"),
    include_str!("../../../migrations/postgresql/0002_node_load.sql"),
    include_str!("../../../migrations/postgresql/0003_agent_state_wakes.sql"),
    include_str!("../../../migrations/postgresql/0004_node_unready.sql"),
    include_str!("../../../migrations/postgresql/0005_permission_mode.sql"),
    include_str!("../../../migrations/postgresql/0006_held_runs.sql"),
    include_str!("../../../migrations/postgresql/0007_no_finished_index.sql"),
    include_str!("../../../migrations/postgresql/0008_chat_sessions.sql"),
    include_str!("../../../migrations/postgresql/0009_progress.sql"),
    include_str!("../../../migrations/postgresql/0010_progress_lanes.sql"),
    include_str!("../../../migrations/postgresql/0011_album_parts.sql"),
    include_str!("../../../migrations/postgresql/0012_chat_access.sql"),
];

/// Any number that no other program uses for an advisory lock on the same database: the
/// daemons opening it at once take turns at the migrations.
const MIGRATION_LOCK: i64 = 0x7265_6c61_7971; // "relayq"

const SCHEMA_TABLE_SQL: Sql =
    Sql::same("CREATE TABLE IF NOT EXISTS relayq_schema (version BIGINT PRIMARY KEY)");
const LOCK_SQL: Sql = Sql::same("SELECT pg_advisory_xact_lock(:lock)");
const APPLIED_SQL: Sql = Sql::same("SELECT COALESCE(MAX(version), 0) FROM relayq_schema");
const RECORD_SQL: Sql = Sql::same("INSERT INTO relayq_schema (version) VALUES (:version)");
/// The database's time, in unix milliseconds (the clock of the write, not of its transaction's
/// start).
const NOW_SQL: Sql = Sql::same("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT");

/// An open PostgreSQL database.
#[derive(Clone)]
pub struct PgDatabase {
    pool: Pool<Manager>,
    statistics: Arc<Statistics>,
}

/// Keeps the server's statistics of `queue_rows` up with the rows this node writes. A
/// statement's plan is kept per connection once chosen, and re-chosen only when the table's
/// statistics change: plans chosen while the table was empty (a new database) read it whole
/// once it held thousands of rows (800 blocks to record a run of 23 rows), until autovacuum's
/// first `ANALYZE`, a minute or more later. So when the operations committed since the last
/// `ANALYZE` outnumber the rows then seen (at least [`ANALYZE_AFTER`]), the table is analyzed
/// again on a connection of its own, off the writers' path.
struct Statistics {
    committed: std::sync::atomic::AtomicU64,
    /// Operations committed when the next `ANALYZE` is due.
    due_at: std::sync::atomic::AtomicU64,
    running: std::sync::atomic::AtomicBool,
}

/// The fewest operations between two `ANALYZE`s of this node's.
const ANALYZE_AFTER: u64 = 1_000;

const ANALYZE_SQL: Sql = Sql::same("ANALYZE (SKIP_LOCKED) queue_rows");
/// The rows changed since `queue_rows` was last analyzed, by any process, and the rows it held
/// then.
const STALE_SQL: Sql = Sql::same(
    "SELECT s.n_mod_since_analyze, CAST(GREATEST(c.reltuples, 0) AS BIGINT)
       FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
      WHERE s.relid = CAST('queue_rows' AS regclass)",
);
const ROWS_SQL: Sql = Sql::same(
    "SELECT CAST(GREATEST(reltuples, 0) AS BIGINT) FROM pg_class WHERE relname = 'queue_rows'",
);

/// A pooled connection, as an [`Executor`].
pub type PgRead = Pg<PooledConnection<Manager>>;

/// A write transaction, as an [`Executor`].
pub type PgWrite<'a, 'c> = Pg<InTransaction<'a, 'c>>;

impl PgDatabase {
    /// Connects to `url` (`postgresql://user@host/db`; a host that is a path is a Unix
    /// socket's directory) with up to `connections` connections, and brings its schema up to
    /// date. A server that does not answer within `wait` is a busy database
    /// ([`EngineError::is_busy`]): a hook keeps its event in the spool instead.
    pub fn open(url: &str, connections: u32, wait: Duration) -> Result<PgDatabase> {
        let manager = Manager::new(client_config(url, wait)?);
        // A first connection of its own: a wrong URL, role, password or database name is told
        // as the server or the network says it, at once, not as a pool that timed out.
        reach_with(&manager, url)?;
        let wait = wait.max(Duration::from_millis(100));
        // Connections are opened when first needed (a hook needs one), and not tested at each
        // checkout (a round trip per batch): one the server dropped fails its statement, and
        // the pool then drops it and opens another.
        let pool = Pool::builder()
            .max_size(connections)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(wait)
            .build_unchecked(manager);
        let statistics = Arc::new(Statistics {
            committed: Default::default(),
            due_at: ANALYZE_AFTER.into(),
            running: Default::default(),
        });
        let db = PgDatabase { pool, statistics };
        db.migrate()?;
        Ok(db)
    }

    /// At a daemon's start: when more rows changed since `queue_rows` was last analyzed than
    /// it then held (at least [`ANALYZE_AFTER`]), analyzes it in the background now, not after
    /// this node's own thousandth operation. A backlog written by other processes (a restart,
    /// `relayq enqueue`, other nodes) was otherwise sent on plans chosen for the table as it
    /// was: single rows updated through the partial index of leased rows and its dead entries
    /// (1 000 blocks a row), a drain at a third of its speed. Checked on the thread, just
    /// before: nodes starting together analyze once (the others find the table analyzed, or
    /// skip the lock of the `ANALYZE` under way).
    pub fn analyze_if_stale(&self) {
        if !self.statistics.running.swap(true, Relaxed) {
            self.analyze_on_a_thread(true);
        }
    }

    /// Counts `operations` committed; analyzes `queue_rows` in the background when due (see
    /// [`Statistics`]).
    fn committed(&self, operations: usize) {
        let stats = &self.statistics;
        let committed = stats.committed.fetch_add(operations as u64, Relaxed) + operations as u64;
        if committed < stats.due_at.load(Relaxed) || stats.running.swap(true, Relaxed) {
            return;
        }
        self.analyze_on_a_thread(false);
    }

    /// Analyzes `queue_rows` on a thread of its own (the caller set `running`), only if the
    /// server's counts say it is stale when `only_if_stale`; the next `ANALYZE` is due after
    /// as many operations as the table then holds.
    fn analyze_on_a_thread(&self, only_if_stale: bool) {
        let db = self.clone();
        std::thread::spawn(move || {
            let rows = db.write(|tx| {
                let stale = || -> Result<bool> {
                    let (changed, rows) = tx
                        .query_opt(&STALE_SQL, crate::params![], |r| {
                            Ok((r.get::<i64, _>(0)?, r.get::<i64, _>(1)?))
                        })?
                        .unwrap_or((0, 0));
                    Ok(changed.max(0) as u64 >= (rows.max(0) as u64).max(ANALYZE_AFTER))
                };
                if !only_if_stale || stale()? {
                    tx.exec(&ANALYZE_SQL, crate::params![])?;
                }
                tx.query_value::<i64>(&ROWS_SQL, crate::params![])
            });
            let stats = &db.statistics;
            match rows {
                Ok(rows) => {
                    let next =
                        stats.committed.load(Relaxed) + (rows.max(0) as u64).max(ANALYZE_AFTER);
                    stats.due_at.store(next, Relaxed);
                }
                Err(e) => tracing::debug!(error = %e, "queue_rows was not analyzed"),
            }
            stats.running.store(false, Relaxed);
        });
    }

    /// A connection for reads.
    pub fn read(&self) -> Result<PgRead> {
        Ok(Pg(RefCell::new(self.pool.get()?)))
    }

    /// Runs `f` in a transaction made at the database's time; commits if `f` succeeds.
    pub fn write<T>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        self.write_with(None, f)
    }

    /// [`write`](Self::write) made at `now`, or at the database's time when `None`.
    pub(crate) fn write_with<T>(
        &self,
        now: Option<i64>,
        f: impl FnOnce(&Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.pool.get()?;
        let statements = conn.statements();
        let mut tx = blocking(|| conn.transaction())?;
        let out = (|| {
            let exec: PgWrite<'_, '_> = Pg(RefCell::new(InTransaction {
                tx: &mut tx,
                statements,
            }));
            let now = match now {
                Some(now) => now,
                None => exec.query_value(&NOW_SQL, crate::params![])?,
            };
            f(&Tx::postgres(&exec, now))
        })();
        match out {
            Ok(out) => {
                blocking(move || tx.commit())?;
                Ok(out)
            }
            Err(e) => {
                blocking(move || drop(tx)); // rolls back
                Err(e)
            }
        }
    }

    /// The group commit's side of this database (see [`crate::storage::commit`]): a batch is one
    /// transaction made at the database's time (`clock` when it is a test's, which the
    /// database's clock does not follow).
    pub(crate) fn batches(&self, clock: Arc<dyn Clock>) -> PgBatches {
        PgBatches {
            db: self.clone(),
            clock: (!clock.defers_to_database()).then_some(clock),
        }
    }

    /// Applies the migrations not applied yet, one transaction, under an advisory lock.
    fn migrate(&self) -> Result<()> {
        self.write(|tx| {
            tx.exec(&LOCK_SQL, crate::params![":lock" => MIGRATION_LOCK])?;
            tx.exec(&SCHEMA_TABLE_SQL, crate::params![])?;
            let applied: i64 = tx.query_value(&APPLIED_SQL, crate::params![])?;
            for (n, migration) in MIGRATIONS.iter().enumerate().skip(applied as usize) {
                tx.batch(migration)
                    .map_err(|e| EngineError::Migration(format!("migration {}: {e}", n + 1)))?;
                let version = n as i64 + 1;
                tx.exec(&RECORD_SQL, crate::params![":version" => version])?;
            }
            Ok(())
        })
    }
}

/// The driver's settings for `url`: connections wait at most `wait` to connect, and a
/// statement waits for a row or table lock at most `wait`, as SQLite's busy timeout does: then
/// it fails as busy, and the write is tried again (or a hook spools).
fn client_config(url: &str, wait: Duration) -> Result<postgres::Config> {
    let mut config: postgres::Config = url.parse().map_err(|e| EngineError::Open {
        path: redacted(url).into(),
        reason: format!("not a PostgreSQL URL: {e}"),
    })?;
    let wait = wait.max(Duration::from_millis(100));
    config.connect_timeout(wait);
    // Notices (`relation "relayq_schema" already exists, skipping` at every start) are not
    // for the log.
    config.options(&format!(
        "-c lock_timeout={} -c client_min_messages=warning",
        wait.as_millis()
    ));
    Ok(config)
}

/// Connects once through `manager`, or says why not in the server's or the network's words.
fn reach_with(manager: &Manager, url: &str) -> Result<()> {
    match r2d2::ManageConnection::connect(manager) {
        Ok(_) => Ok(()),
        Err(e) => Err(EngineError::Connect {
            url: redacted(url),
            waiting_helps: crate::error::connecting_again_helps(&e),
            reason: crate::error::postgres_message(&e),
        }),
    }
}

/// Whether PostgreSQL at `url` takes a connection within `wait` (`relayq config check`):
/// nothing is written.
pub fn reach(url: &str, wait: Duration) -> Result<()> {
    reach_with(&Manager::new(client_config(url, wait)?), url)
}

/// The group commit on PostgreSQL.
pub(crate) struct PgBatches {
    db: PgDatabase,
    /// A test's clock; `None`: the database's.
    clock: Option<Arc<dyn Clock>>,
}

impl Batches for PgBatches {
    /// One transaction. On PostgreSQL a failed statement spoils its transaction until rolled
    /// back, so one operation's failure would take the others with it; but a savepoint around
    /// each costs two round trips, more than most operations' own, and operations rarely fail.
    /// So the batch runs without them first; when one fails, it is rolled back and run again
    /// with a savepoint for every operation, which keeps the failure to itself.
    fn commit(&mut self, batch: &mut [Box<dyn Operation>]) -> Result<()> {
        let now = self.clock.as_ref().map(|c| c.now_ms());
        let mut one_failed = false;
        let optimistic =
            self.db
                .write_with(now, |tx| match run_unguarded(tx, batch, enqueue_ahead_in) {
                    true => Ok(()),
                    false => {
                        one_failed = true;
                        Err(EngineError::NotCommitted("an operation failed".into()))
                    }
                });
        if !one_failed {
            if optimistic.is_ok() {
                self.db.committed(batch.len());
            }
            return optimistic;
        }
        let guarded = self.db.write_with(now, |tx| {
            batch.iter_mut().try_for_each(|op| run_one(tx, op, true))
        });
        if guarded.is_ok() {
            self.db.committed(batch.len());
        }
        guarded
    }
}

/// `url` without its password, for messages.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::postgresql::test_server::TestServer;

    #[test]
    fn a_password_is_never_shown() {
        assert_eq!(
            redacted("postgresql://relayq:s3cret@db.example/relayq"),
            "postgresql://relayq:***@db.example/relayq"
        );
        assert_eq!(
            redacted("postgresql://relayq@db/x"),
            "postgresql://relayq@db/x"
        );
        let refused = PgDatabase::open("postgresql://u:s3cret@[bad", 1, Duration::from_secs(1))
            .err()
            .unwrap();
        assert!(!refused.to_string().contains("s3cret"), "{refused}");
    }

    #[test]
    fn daemons_opening_one_database_at_once_migrate_it_once() {
        let server = TestServer::start();
        let url = server.url();
        let opened: Vec<_> = (0..3)
            .map(|_| {
                let url = url.clone();
                std::thread::spawn(move || {
                    PgDatabase::open(&url, 2, Duration::from_secs(5)).map(|_| ())
                })
            })
            .collect();
        for daemon in opened {
            daemon.join().unwrap().unwrap();
        }
        let db = PgDatabase::open(&url, 1, Duration::from_secs(5)).unwrap();
        let versions: Vec<i64> = db
            .read()
            .unwrap()
            .query_all(
                &Sql::same("SELECT version FROM relayq_schema"),
                crate::params![],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(versions, (1..=MIGRATIONS.len() as i64).collect::<Vec<_>>());
    }

    /// The driver's own text for a server's error is only "db error": the server's message and
    /// code are what a person needs.
    #[test]
    fn an_error_says_what_the_server_said() {
        let server = TestServer::start();
        let db = PgDatabase::open(&server.url(), 1, Duration::from_secs(5)).unwrap();
        let failed = db
            .write(|tx| tx.exec(&Sql::same("SELECT * FROM no_such_table"), crate::params![]))
            .unwrap_err()
            .to_string();
        assert!(
            failed.contains("relation \"no_such_table\" does not exist")
                && failed.contains("42P01"),
            "{failed}"
        );
    }

    #[test]
    fn a_write_is_timed_by_the_database_clock() {
        let server = TestServer::start();
        let db = PgDatabase::open(&server.url(), 1, Duration::from_secs(5)).unwrap();
        let system = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let now = db.write(|tx| Ok(tx.now())).unwrap();
        assert!((now - system).abs() < 5_000, "{now} vs {system}");
    }

    /// Both schemas have the same tables with the same columns (PostgreSQL adds the nodes
    /// of several daemons): a statement written once reads alike on both.
    #[test]
    fn the_postgresql_schema_has_the_sqlite_tables_and_columns() {
        let server = TestServer::start();
        let pg = PgDatabase::open(&server.url(), 1, Duration::from_secs(5)).unwrap();
        let (_dir, sqlite) = crate::storage::sqlite::db::temp_sqlite();
        let conn = sqlite.read().unwrap();
        let tables: Vec<String> = conn
            .query_all(
                &Sql::same(
                    "SELECT name FROM sqlite_master WHERE type = 'table'
                       AND name NOT LIKE 'sqlite_%' ORDER BY name",
                ),
                crate::params![],
                |r| r.get(0),
            )
            .unwrap();
        let pg_tables: Vec<String> = pg
            .read()
            .unwrap()
            .query_all(
                &Sql::same(
                    "SELECT table_name::TEXT FROM information_schema.tables
                     WHERE table_schema = 'public' AND table_name <> 'relayq_schema'
                     ORDER BY table_name",
                ),
                crate::params![],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(pg_tables, tables);
        for table in &tables {
            let mut columns: Vec<String> = conn
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let mut pg_columns: Vec<String> = pg
                .read()
                .unwrap()
                .query_all(
                    &Sql::same(
                        "SELECT column_name::TEXT FROM information_schema.columns
                         WHERE table_schema = 'public' AND table_name = :table",
                    ),
                    crate::params![":table" => table],
                    |r| r.get(0),
                )
                .unwrap();
            columns.sort();
            pg_columns.sort();
            assert_eq!(pg_columns, columns, "table {table}");
        }
    }
}
