//! A database of either backend for storage tests: [`TestDb::both`] gives a fresh SQLite file
//! and a fresh PostgreSQL database (on the server the test process shares), and a test runs
//! the same steps and checks on each.

use crate::error::Result;
use crate::storage::db::Database;
use crate::storage::db::{DbConfig, Reader};
use crate::storage::postgresql::test_server::{TestDatabase, TestServer};
use crate::storage::sql::Executor;
use crate::storage::tx::Tx;

/// A fresh database of one backend, with what keeps it alive (its directory, its server).
pub struct TestDb {
    pub db: Database,
    /// How to open it again (another daemon, another process).
    pub config: DbConfig,
    _dir: tempfile::TempDir,
    _server: Option<TestServer>,
    _database: Option<TestDatabase>,
}

/// The environment variable that chooses the backend of the suites that run on either:
/// `sqlite` (unset) or `postgresql`.
pub const BACKEND_ENV: &str = "RELAYQ_TEST_DATABASE";

/// Whether the suites run on PostgreSQL this time (see [`BACKEND_ENV`]).
pub fn postgres_chosen() -> bool {
    match std::env::var(BACKEND_ENV).as_deref() {
        Err(_) | Ok("") | Ok("sqlite") => false,
        Ok("postgresql") => true,
        Ok(other) => panic!("{BACKEND_ENV}={other}: use sqlite or postgresql"),
    }
}

impl TestDb {
    /// A fresh database of the backend [`BACKEND_ENV`] chooses.
    pub fn from_env() -> TestDb {
        match postgres_chosen() {
            false => TestDb::sqlite(),
            true => TestDb::postgres(),
        }
    }

    /// A SQLite database and a PostgreSQL one, each empty but for the schema.
    pub fn both() -> [TestDb; 2] {
        [TestDb::sqlite(), TestDb::postgres()]
    }

    /// A fresh SQLite file.
    pub fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = DbConfig::new(dir.path().join("q.db"));
        let db = Database::open(&config).expect("opens");
        TestDb {
            db,
            config,
            _dir: dir,
            _server: None,
            _database: None,
        }
    }

    /// A fresh PostgreSQL database, on the server the test process shares.
    pub fn postgres() -> TestDb {
        let database = TestDatabase::create();
        TestDb::on_postgres(database.url(), None, Some(database))
    }

    /// A fresh PostgreSQL server of its own and its database: for a test that stops or
    /// restarts the server.
    pub fn postgres_own_server() -> TestDb {
        let server = TestServer::start();
        TestDb::on_postgres(server.url(), Some(server), None)
    }

    /// A fresh durable PostgreSQL server of its own (fsync on, as in production) and its
    /// database: for a benchmark.
    pub fn postgres_durable() -> TestDb {
        let server = TestServer::start_durable();
        TestDb::on_postgres(server.url(), Some(server), None)
    }

    fn on_postgres(
        url: String,
        server: Option<TestServer>,
        database: Option<TestDatabase>,
    ) -> TestDb {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut config = DbConfig::new(dir.path().join("q.db"));
        config.url = Some(url);
        let db = Database::open(&config).expect("the test server opens");
        TestDb {
            db,
            config,
            _dir: dir,
            _server: server,
            _database: database,
        }
    }

    /// A directory of the test's own, beside the database (the SQLite file is in it).
    pub fn path(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// The PostgreSQL server, when the database is on one of its own
    /// ([`postgres_own_server`](Self::postgres_own_server)).
    pub fn server(&self) -> Option<&TestServer> {
        self._server.as_ref()
    }

    /// Which backend, for messages.
    pub fn name(&self) -> &'static str {
        match self.db.is_shared() {
            false => "sqlite",
            true => "postgresql",
        }
    }

    /// Runs `f` in a write transaction made at `now`, and commits.
    pub fn write_at<T>(&self, now: i64, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        self.db.write_at(now, f)
    }

    /// A read connection.
    pub fn conn(&self) -> Box<dyn Executor> {
        Box::new(self.db.read().expect("a read connection"))
    }

    /// Prepares `sql` in this backend's dialect (PostgreSQL also types every parameter).
    pub fn prepare(&self, sql: &crate::storage::sql::Sql) -> Result<()> {
        match self.db.read()? {
            Reader::Sqlite(conn) => {
                conn.prepare(sql.sqlite)?;
            }
            Reader::Postgres(conn) => {
                let text = crate::storage::sql::to_positional(sql.postgres).text;
                conn.0.borrow_mut().prepare(&text)?;
            }
        }
        Ok(())
    }

    /// Runs `f` on a read connection.
    pub fn read<T>(&self, f: impl FnOnce(&dyn Executor) -> Result<T>) -> Result<T> {
        f(&self.db.read()?)
    }
}
