//! The engine's one error type. Callers at the edge (CLI, HTTP) turn it into words for people.

use std::path::PathBuf;

/// Everything that can go wrong in the storage engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The database file could not be created or opened at `path`.
    #[error("cannot open database {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    /// Applying the schema migrations failed.
    #[error("database migration failed: {0}")]
    Migration(String),
    /// No connection could be had from the pool in time (the database is locked or unreachable).
    #[error("database busy: {0}")]
    Pool(#[from] r2d2::Error),
    /// SQLite reported an error.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL (or the connection to it) reported an error.
    #[error("database error: {}", postgres_message(.0))]
    Postgres(#[from] postgres::Error),
    /// No connection to PostgreSQL at all: `reason` is the server's message with its SQLSTATE
    /// (a database, role or password it does not know) or the network's (no such host, a
    /// closed port). `waiting_helps` when the server may be starting or restarting.
    #[error("cannot connect to PostgreSQL at {url}: {reason}")]
    Connect {
        url: String,
        reason: String,
        waiting_helps: bool,
    },
    /// A value handed to the engine is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// The transaction the operation ran in did not commit (the operation itself succeeded).
    #[error("the write was not committed: {0}")]
    NotCommitted(String),
    /// The queue (or the key) holds as many unfinished rows as its policy allows: nothing was
    /// written. The caller may try again later.
    #[error("QUEUE_FULL: {what} holds {depth} unfinished rows, its limit ({setting}); nothing was written: try again once it drains, or raise the limit")]
    QueueFull {
        what: String,
        depth: u64,
        setting: String,
    },
    /// A shared pacing budget is spent for this long (microseconds): nothing was taken.
    #[error("over budget for {wait_us} µs")]
    OverBudget { wait_us: i64 },
    /// A hook handler refused its event: retrying cannot help, so the row is done with this.
    #[error("{0}")]
    Rejected(String),
}

impl EngineError {
    /// True when trying again later may succeed: SQLite gave up waiting for a lock held by
    /// another connection or process; PostgreSQL is unreachable, restarting, or chose this
    /// transaction to break a deadlock.
    pub fn is_busy(&self) -> bool {
        match self {
            EngineError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ),
            EngineError::Pool(_) => true,
            EngineError::Postgres(e) => postgres_transient(e),
            EngineError::Connect { waiting_helps, .. } => *waiting_helps,
            _ => false,
        }
    }
}

/// Whether a connection that failed with `e` may succeed later: the server refused it while
/// starting, stopping or full, or nothing answered (down, restarting: a closed port, a missing
/// socket, a timeout). Not an unknown host, role, password or database.
pub(crate) fn connecting_again_helps(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    use std::io::ErrorKind;
    if let Some(code) = e.code() {
        return [
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
        ]
        .contains(code);
    }
    let io = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>());
    io.is_some_and(|io| {
        matches!(
            io.kind(),
            ErrorKind::ConnectionRefused
                | ErrorKind::NotFound
                | ErrorKind::TimedOut
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
        )
    }) || e.to_string().contains("timed out")
}

/// What the server said (the driver's own text is only "db error"), or what went wrong on
/// the way to it.
pub(crate) fn postgres_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match std::error::Error::source(e) {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    }
}

/// Whether a PostgreSQL error passes: the connection is lost (the server restarts, the
/// network fails), the server is starting or stopping, has no connection left, a lock was
/// held past the wait (`lock_timeout`), or it broke a deadlock or a serialization conflict by
/// failing this transaction.
fn postgres_transient(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    let lost =
        e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    let passing = [
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::TOO_MANY_CONNECTIONS,
        SqlState::LOCK_NOT_AVAILABLE,
    ];
    lost || e.code().is_some_and(|code| {
        passing.contains(code) || code.code().starts_with("08") // connection exceptions
    })
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
