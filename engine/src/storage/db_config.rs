//! How to open the database: the settings both backends read.

use std::path::PathBuf;
use std::time::Duration;

use crate::storage::postgresql::db::redacted;

/// `PRAGMA synchronous`: NORMAL (the default) may lose the last commits on power loss but
/// never corrupts; FULL also survives power loss, at the cost of an fsync per commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    #[default]
    Normal,
    Full,
}

impl Synchronous {
    pub(crate) fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// How to open the database.
#[derive(Clone)]
pub struct DbConfig {
    /// The SQLite file. With a PostgreSQL `url`, the node's own files (the hook spool, the
    /// wake-up socket) still live beside it.
    pub path: PathBuf,
    /// A PostgreSQL URL (`postgresql://user:password@host/db`): the database is there, not
    /// in the file.
    pub url: Option<String>,
    pub synchronous: Synchronous,
    /// How long a statement waits for a lock held by another process before failing.
    pub busy_timeout: Duration,
    /// Reader connections in the pool.
    pub readers: u32,
}

impl std::fmt::Debug for DbConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbConfig")
            .field("path", &self.path)
            .field("url", &self.url.as_deref().map(redacted))
            .field("synchronous", &self.synchronous)
            .field("busy_timeout", &self.busy_timeout)
            .field("readers", &self.readers)
            .finish()
    }
}

impl DbConfig {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        DbConfig {
            path: path.into(),
            url: None,
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
            readers: 4,
        }
    }

    /// Where the data is, for people: the SQLite file, or the PostgreSQL URL with its
    /// password masked and the node's own files (lock, wake socket, hook spool) said as such.
    pub fn describe(&self) -> String {
        match &self.url {
            None => self.path.display().to_string(),
            Some(url) => format!(
                "{} (this node's lock, wake socket and hook spool beside {})",
                redacted(url),
                self.path.display()
            ),
        }
    }
}
