//! A database of either backend for storage tests: [`TestDb::both`] gives a fresh SQLite file
//! and a fresh PostgreSQL server, and a test runs the same steps and checks on each.

use crate::error::Result;
use crate::storage::db::Database;
use crate::storage::postgresql::db::PgDatabase;
use crate::storage::postgresql::test_server::TestServer;
use crate::storage::sql::Executor;
use crate::tx::Tx;

/// A fresh database of one backend.
pub enum TestDb {
    Sqlite(tempfile::TempDir, Database),
    Postgres(PgDatabase, TestServer),
}

impl TestDb {
    /// A SQLite database and a PostgreSQL one, each empty but for the schema.
    pub fn both() -> [TestDb; 2] {
        let (dir, db) = crate::db::temp_database();
        let server = TestServer::start();
        let pg = PgDatabase::open(&server.url(), 4).expect("the test server opens");
        [TestDb::Sqlite(dir, db), TestDb::Postgres(pg, server)]
    }

    /// Which backend, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            TestDb::Sqlite(..) => "sqlite",
            TestDb::Postgres(..) => "postgresql",
        }
    }

    /// Runs `f` in a write transaction made at `now`, and commits.
    pub fn write_at<T>(&self, now: i64, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        match self {
            TestDb::Sqlite(_, db) => db.write_at(now, f),
            TestDb::Postgres(db, _) => db.write_at(now, f),
        }
    }

    /// A read connection.
    pub fn conn(&self) -> Box<dyn Executor> {
        match self {
            TestDb::Sqlite(_, db) => Box::new(db.read().expect("a read connection")),
            TestDb::Postgres(db, _) => Box::new(db.read().expect("a read connection")),
        }
    }

    /// Prepares `sql` in this backend's dialect (PostgreSQL also types every parameter).
    pub fn prepare(&self, sql: &crate::storage::sql::Sql) -> Result<()> {
        match self {
            TestDb::Sqlite(_, db) => {
                db.read()?.prepare(sql.sqlite)?;
            }
            TestDb::Postgres(db, _) => {
                let text = crate::storage::sql::to_positional(sql.postgres).text;
                db.read()?.0.borrow_mut().prepare(&text)?;
            }
        }
        Ok(())
    }

    /// Runs `f` on a read connection.
    pub fn read<T>(&self, f: impl FnOnce(&dyn Executor) -> Result<T>) -> Result<T> {
        match self {
            TestDb::Sqlite(_, db) => f(&db.read()?),
            TestDb::Postgres(db, _) => f(&db.read()?),
        }
    }
}
