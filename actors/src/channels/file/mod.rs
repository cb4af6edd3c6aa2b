//! `kind = "file"`: appends each delivery as one JSON line. The sink for benchmarks and for
//! anything that tails a file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::kit::default_timeout;
use super::{resolve_path, Answer, Channel, ChannelKind, Delivery, Outcome, SettingError};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The file to append to (created if missing).
    pub path: PathBuf,
    /// fsync after every line: survives power loss, costs a disk flush per message.
    #[serde(default)]
    pub fsync: bool,
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Past this size the file is renamed to `<path>.1` (replacing the one before) and a new
    /// one started; unset, it grows without bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

impl Config {
    /// Appends to `path`, without fsync or rotation.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Config {
            path: path.into(),
            fsync: false,
            timeout: default_timeout(),
            max_bytes: None,
        }
    }
}

/// The smallest `max_bytes`: a line must fit.
pub const MIN_MAX_BYTES: u64 = 64 * 1024;

impl ChannelKind for Config {
    type Channel = FileChannel;

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn build(&self) -> Result<FileChannel, SettingError> {
        if let Some(max) = self.max_bytes.filter(|m| *m < MIN_MAX_BYTES) {
            return Err(SettingError::new(
                "max_bytes",
                format!("{max} is out of range: allowed {MIN_MAX_BYTES} or more"),
            ));
        }
        Ok(FileChannel {
            config: self.clone(),
            file: None,
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        resolve_path(&mut self.path, base);
    }
}

pub struct FileChannel {
    config: Config,
    file: Option<File>,
}

/// A copy opens the file anew.
impl Clone for FileChannel {
    fn clone(&self) -> Self {
        FileChannel {
            config: self.config.clone(),
            file: None,
        }
    }
}

impl FileChannel {
    fn open(&self) -> std::io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        // Private: deliveries and notices hold what users and agents wrote.
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.config.path)
    }

    /// Starts a new file when this line would take the file past `max_bytes`; reopens when
    /// another writer (a copy of this channel on another thread) rotated it.
    fn rotate(&mut self, line: usize, max: u64) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let at_path = std::fs::metadata(&self.config.path).ok();
        if let Some(file) = &self.file {
            let ours = file.metadata()?;
            if at_path.as_ref().is_none_or(|p| (p.dev(), p.ino()) != (ours.dev(), ours.ino())) {
                self.file = None;
            }
        }
        let size = at_path.map_or(0, |m| m.len());
        if size > 0 && size + line as u64 > max {
            let mut old = self.config.path.clone().into_os_string();
            old.push(".1");
            std::fs::rename(&self.config.path, old)?;
            self.file = None;
        }
        Ok(())
    }

    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if let Some(max) = self.config.max_bytes {
            self.rotate(line.len(), max)?;
        }
        if self.file.is_none() {
            self.file = Some(self.open()?);
        }
        let file = self.file.as_mut().expect("opened above");
        // One write call per line: O_APPEND keeps concurrent writers' lines whole.
        file.write_all(line)?;
        if self.config.fsync {
            file.sync_data()?;
        }
        Ok(())
    }
}

impl Channel for FileChannel {
    fn deliver(&mut self, delivery: Delivery) -> Answer {
        let mut line = serde_json::to_vec(&delivery).expect("a delivery always serialises");
        line.push(b'\n');
        match self.append(&line) {
            Ok(()) => Outcome::delivered(),
            Err(e) => {
                self.file = None; // reopen next time: the file may have been moved or fixed
                Outcome::retry(format!(
                    "cannot append to {}: {e}",
                    self.config.path.display()
                ))
            }
        }
        .into()
    }

    fn timeout(&self) -> Duration {
        self.config.timeout
    }

    fn readiness(&self) -> Result<(), String> {
        match self.config.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
                Err(format!("{} is not a directory", dir.display()))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::conformance::{delivery, outcome_of};

    /// Issue 27, item 14: a file with `max_bytes` is rotated (one old file kept), never grows
    /// past it.
    #[actix_rt::test]
    async fn a_file_past_max_bytes_is_rotated_keeping_one_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notices.jsonl");
        let config = Config {
            max_bytes: Some(MIN_MAX_BYTES),
            ..Config::new(&path)
        };
        let mut channel = config.build().unwrap();
        for _ in 0..1000 {
            assert_eq!(outcome_of(&mut channel, delivery()).await, Outcome::delivered());
        }
        let size = |p: &Path| std::fs::metadata(p).unwrap().len();
        let old = dir.path().join("notices.jsonl.1");
        assert!(size(&path) <= MIN_MAX_BYTES && size(&old) <= MIN_MAX_BYTES);
        assert!(size(&old) > MIN_MAX_BYTES / 2, "the old file was filled first");
        let lines = std::fs::read_to_string(&path).unwrap();
        assert!(lines.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
        assert!(Config { max_bytes: Some(10), ..Config::new(&path) }.build().is_err());
    }
}
