//! The daemon's pid file, `<database>.pid` beside the database it serves (one daemon per
//! database, held by its lock), so `relayq stop` in another terminal finds it. Written once
//! the daemon holds the database, removed when it exits; a file left by a killed daemon is
//! recognised as stale because nothing holds the database's lock.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where the pid file of the daemon serving `db` is.
pub fn path_for(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".pid");
    PathBuf::from(name)
}

/// The pid file of a running daemon; removed when dropped.
pub struct PidFile(PathBuf);

impl PidFile {
    /// Writes this process's id for `db` (mode 0600, written whole then renamed into place,
    /// so a reader never sees half of it).
    pub fn write(db: &Path) -> std::io::Result<PidFile> {
        let path = path_for(db);
        let mut part = path.as_os_str().to_owned();
        part.push(".part");
        let part = PathBuf::from(part);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&part)?;
        writeln!(file, "{}", std::process::id())?;
        file.sync_all()?;
        std::fs::rename(&part, &path)?;
        Ok(PidFile(path))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The pid in `db`'s pid file: `Ok(None)` when there is none, `Err` when it cannot be read
/// or holds no pid.
pub fn read(db: &Path) -> Result<Option<i32>, String> {
    let path = path_for(db);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    match text.trim().parse::<i32>() {
        Ok(pid) if pid > 0 => Ok(Some(pid)),
        _ => Err(format!(
            "{} does not hold a process id ({:?}): remove it, then stop the daemon with kill",
            path.display(),
            text.trim()
        )),
    }
}

/// The pid of a daemon still running for `db` whose file is gone (deleted under it): its pid
/// file is there and names a live process. A command must not create a new database there:
/// that daemon would never deliver its rows.
pub fn daemon_of_deleted(db: &Path) -> Option<i32> {
    if db.exists() {
        return None;
    }
    let pid = read(db).ok().flatten()?;
    // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    alive.then_some(pid)
}

/// What to tell a command that would create a database beside [`daemon_of_deleted`]'s daemon.
pub fn deleted_under(db: &Path, pid: i32) -> String {
    format!(
        "the database {} was deleted while relayq serve (pid {pid}) had it open: a new one made \
         here would never be read by that daemon. Restart it (relayq stop, then relayq serve) \
         and try again",
        db.display()
    )
}
