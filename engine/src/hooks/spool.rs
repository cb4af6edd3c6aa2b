//! Hook events the database could not take in time (locked past the hook's wait, or deleted
//! under a running daemon): kept as files in `<database>.hook-spool/`, one per event, and
//! recorded oldest first by the next hook, the daemon's start and its sweeps.
//!
//! ```text
//! relayq hook ──locked past its wait──▶ spool/<nanos>-<pid>.json  (written whole, renamed in)
//! next hook / daemon sweep ──drain──▶ hook rows, oldest first ──▶ file removed
//! ```

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::hooks::writes::RecordHook;
use crate::hooks::HookEvent;
use crate::WriteDoor;

/// Where events wait that the database at `db` could not take.
pub fn dir(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_os_string();
    name.push(".hook-spool");
    PathBuf::from(name)
}

/// A spooled event with why the hook could not record it (the daemon logs it when it records
/// the event: the hook's stderr is seldom seen, the agent does not show it).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Spooled {
    why: String,
    event: HookEvent,
}

/// A spool file: an event with its reason, or a bare event (as older versions wrote).
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
enum SpoolFile {
    Spooled(Spooled),
    Bare(HookEvent),
}

/// An event recorded from the spool.
#[derive(Debug, Clone, PartialEq)]
pub struct Drained {
    pub session: String,
    /// Why its hook spooled it, as the hook said it.
    pub why: Option<String>,
}

/// Writes `event` into `spool` (a private folder, one file per event, named so that names sort
/// as the events came), received now, with `why` it could not be recorded; its path.
pub fn keep(spool: &Path, mut event: HookEvent, why: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(spool)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    event.received_at = now.as_millis() as i64;
    let name = format!("{:020}-{:010}.json", now.as_nanos(), std::process::id());
    let (partial, path) = (spool.join(format!(".{name}")), spool.join(&name));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)?;
    let spooled = Spooled {
        why: why.to_string(),
        event,
    };
    std::io::Write::write_all(&mut file, &serde_json::to_vec(&spooled)?)?;
    file.sync_all()?;
    // Whole or absent: a reader never sees half an event.
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

/// Records the spooled events, oldest first, each file removed once its row is committed (a
/// crash between the two records it twice: at least once). One drainer at a time (a lock file
/// in the spool), or two would both record an event before either removed it. Returns the
/// events recorded, in order: their sessions and why they were spooled. Each is a typed write
/// ([`RecordHook`]) in a transaction of its own.
pub fn drain(door: &WriteDoor, spool: &Path) -> Result<Vec<Drained>> {
    let Ok(entries) = std::fs::read_dir(spool) else {
        return Ok(Vec::new());
    };
    let Ok(lock) = std::fs::File::create(spool.join(".lock")) else {
        return Ok(Vec::new());
    };
    if lock.lock().is_err() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    let mut recorded = Vec::new();
    for file in files {
        let read = std::fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<SpoolFile>(&bytes).ok());
        let (event, why) = match read {
            Some(SpoolFile::Spooled(Spooled { why, event })) => (event, Some(why)),
            Some(SpoolFile::Bare(event)) => (event, None),
            None => continue, // recorded by another drainer meanwhile, or not an event: left
        };
        door.apply_now(RecordHook(event.to_row()))?;
        let _ = std::fs::remove_file(&file);
        recorded.push(Drained {
            session: event.session,
            why,
        });
    }
    Ok(recorded)
}
