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
