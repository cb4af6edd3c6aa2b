//! `kind = "file"`: appends each delivery as one JSON line. The sink for benchmarks and for
//! anything that tails a file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::kit::default_timeout;
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
}

impl Config {
    /// Appends to `path`, without fsync.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Config {
            path: path.into(),
            fsync: false,
            timeout: default_timeout(),
        }
    }
}

impl ChannelKind for Config {
    type Channel = FileChannel;

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn build(&self) -> Result<FileChannel, SettingError> {
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
    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.file.is_none() {
            self.file = Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.config.path)?,
            );
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
