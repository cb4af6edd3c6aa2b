//! A write transaction and the time it is made at. Every statement of a write reads one `now`
//! from it, so a write cannot mix times, and the time is the storage's to give: the backend
//! that opens the transaction decides what clock it comes from (the engine's clock on SQLite,
//! the database's on PostgreSQL).
//!
//! Storage code runs its statements on it as an [`Executor`], the same on either backend.

use rusqlite::Transaction;

use crate::storage::sql::{Executor, Target};

/// An open write transaction with its time (unix ms).
pub struct Tx<'a> {
    conn: Conn<'a>,
    now: i64,
}

enum Conn<'a> {
    Sqlite(&'a Transaction<'a>),
    Postgres(&'a dyn Executor),
}

impl<'a> Tx<'a> {
    /// SQLite transaction `tx`, made at `now`.
    pub fn new(tx: &'a Transaction<'a>, now: i64) -> Self {
        Tx {
            conn: Conn::Sqlite(tx),
            now,
        }
    }

    /// A PostgreSQL transaction (`exec`), made at `now`, the database's time.
    pub fn postgres(exec: &'a dyn Executor, now: i64) -> Self {
        Tx {
            conn: Conn::Postgres(exec),
            now,
        }
    }

    /// The time the write is made at.
    pub fn now(&self) -> i64 {
        self.now
    }

    /// Whether each statement is a round trip to a server (PostgreSQL), so that one statement
    /// doing the work of several pays. On SQLite, a statement is a call, and small plain ones
    /// are the quickest.
    pub fn pays_per_statement(&self) -> bool {
        matches!(self.conn, Conn::Postgres(_))
    }

    /// Whether several daemons may share the database (PostgreSQL): what one does, the
    /// others may need to hear.
    pub fn is_shared(&self) -> bool {
        matches!(self.conn, Conn::Postgres(_))
    }
}

impl Executor for Tx<'_> {
    fn target(&self) -> Target<'_> {
        match self.conn {
            Conn::Sqlite(tx) => Target::Sqlite(tx),
            Conn::Postgres(exec) => exec.target(),
        }
    }
}
