//! One daemon per database. Recovery takes back every lease this process does not own, which
//! is only safe when no other daemon serves the same database, so a daemon holds an exclusive
//! `flock` on the database file itself: the lock follows the file's identity (device and inode)
//! whatever path names it, a symlink or a hard link included, and the kernel drops it when the
//! process dies.
//!
//! The locked descriptor is never closed while the process lives: closing any descriptor of the
//! database would drop the POSIX locks SQLite holds on it in this process. A runtime that stops
//! only marks its lock free, for the next runtime of the same process.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use crate::error::{ActorError, Result};

/// Locks this process holds, by (device, inode): the open file, and whether a runtime uses it.
type Held = Mutex<HashMap<(u64, u64), (File, bool)>>;

fn held() -> &'static Held {
    static HELD: OnceLock<Held> = OnceLock::new();
    HELD.get_or_init(Mutex::default)
}

/// What a daemon holds while it serves a database, and what that allows it. One of the pieces
/// that assume one host (see `docs/flows.md`): today's [`FileLock`] keeps every other daemon
/// off the database, so at start this daemon may take back every lease it does not own. Nodes
/// sharing one database would hold a node registration instead, and take back only the leases
/// of nodes whose heartbeat stopped, or that expired.
pub trait DaemonLock: Send + Sync + std::fmt::Debug + 'static {
    /// Whether this daemon is the only one serving the database: at start it may take back
    /// every lease it does not own (otherwise only expired ones).
    fn sole(&self) -> bool;
}

/// The [`DaemonLock`] of a host: an exclusive `flock` on the database file, released (for this
/// process) when dropped. On a database several daemons share (PostgreSQL) the file holds no
/// rows: it is the node's lock (one daemon per node on a host, found by `relayq stop`), and
/// the daemon is not the only one: at start it takes back only expired leases.
#[derive(Debug)]
pub struct FileLock {
    identity: (u64, u64),
    sole: bool,
}

impl DaemonLock for FileLock {
    fn sole(&self) -> bool {
        self.sole
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        if let Some(entry) = held().lock().unwrap().get_mut(&self.identity) {
            entry.1 = false;
        }
    }
}

/// The lock on `db` is another daemon's: on a `shared` database, another node's on this host.
fn held_elsewhere(db: &Path, shared: bool) -> ActorError {
    match shared {
        false => ActorError::AlreadyRunning(db.display().to_string()),
        true => ActorError::NodeFilesInUse(db.display().to_string()),
    }
}

/// Takes the daemon lock of `database`: its file on SQLite, where one daemon serves it
/// ([`DaemonLock::sole`]); on a database several daemons share, the node's files' on this host.
pub fn take_for(database: &relayq_engine::Database) -> Result<FileLock> {
    take(database.path(), database.is_shared())
}

/// Takes the daemon lock on database `db` (which must exist; on a `shared` database it is
/// made, empty, if it does not), or says another daemon has it.
pub fn take(db: &Path, shared: bool) -> Result<FileLock> {
    let open_error = |reason: String| open_error(db, reason);
    let file = match shared {
        false => File::open(db),
        true => std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(db),
    };
    let file = file.map_err(|e| open_error(format!("cannot open it to lock it: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| open_error(format!("cannot read its metadata: {e}")))?;
    let identity = (meta.dev(), meta.ino());
    let mut held = held().lock().unwrap();
    if let Some((_, in_use)) = held.get_mut(&identity) {
        if *in_use {
            return Err(held_elsewhere(db, shared));
        }
        *in_use = true;
        return Ok(FileLock {
            identity,
            sole: !shared,
        });
    }
    match try_lock_awhile(&file) {
        Ok(()) => {
            if meta.nlink() > 1 {
                tracing::warn!(db = %db.display(), links = meta.nlink(), "the database has several hard links: SQLite names its -wal and -shm files after the path, so every process must use the same path");
            }
            held.insert(identity, (file, true));
            Ok(FileLock {
                identity,
                sole: !shared,
            })
        }
        Err(std::fs::TryLockError::WouldBlock) => Err(held_elsewhere(db, shared)),
        Err(std::fs::TryLockError::Error(e)) => Err(open_error(format!("cannot lock it: {e}"))),
    }
}

/// How long a start waits for a lock held by another process: a daemon killed a moment ago
/// (`kill -9`, then a restart at once) may still be exiting, its lock not yet dropped by the
/// kernel. A live daemon holds it for good, and is refused after this.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// `try_lock`, tried again every 50 ms for [`LOCK_WAIT`] while another process holds it.
fn try_lock_awhile(file: &File) -> std::result::Result<(), std::fs::TryLockError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            done => return done,
        }
    }
}

/// Whether another process holds the daemon lock on database `db`: tried without waiting, and
/// let go at once. Only for a process that has not opened the database with SQLite (closing
/// the descriptor would drop SQLite's locks): `relayq stop` asks it to know a daemon is there.
pub fn is_held(db: &Path) -> Result<bool> {
    let file = File::open(db).map_err(|e| {
        open_error(
            db,
            format!("cannot open it to see whether a daemon serves it: {e}"),
        )
    })?;
    match file.try_lock() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(open_error(db, format!("cannot try its lock: {e}")))
        }
    }
}

/// The database `db` cannot be opened or locked, and why.
fn open_error(db: &Path, reason: String) -> ActorError {
    relayq_engine::EngineError::Open {
        path: db.to_path_buf(),
        reason,
    }
    .into()
}

/// Refuses a database directory other users may write to: they could replace the wake socket
/// beside the database, or the database itself.
pub fn check_private_directory(db: &Path) -> Result<()> {
    let dir = match db.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => dir.to_path_buf(),
        None => std::path::PathBuf::from("."),
    };
    let mode = std::fs::metadata(&dir)
        .map_err(|e| match e.kind() {
            // Not made on the fly: a mistyped path would otherwise become a stray database
            // that the hooks and the CLI never write to.
            std::io::ErrorKind::NotFound => ActorError::Invalid(format!(
                "the database directory {} does not exist: create it (mkdir -m 700 {}), or \
                 leave --db out for the default location",
                dir.display(),
                dir.display()
            )),
            _ => ActorError::Invalid(format!("cannot read directory {}: {e}", dir.display())),
        })?
        .mode();
    if mode & 0o022 != 0 {
        return Err(ActorError::Invalid(format!(
            "the database directory {} is writable by other users (mode {:o}): they could \
             replace relayq's wake socket or its database; use a private directory \
             (chmod go-w {}, or the default location)",
            dir.display(),
            mode & 0o7777,
            dir.display()
        )));
    }
    Ok(())
}
