//! `kind = "file"`: appends each delivery as one JSON line. The sink for benchmarks and for
//! anything that tails a file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use actix::prelude::*;
use serde::{Deserialize, Serialize};

use super::{default_timeout, Deliver, Outcome};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The file to append to (created if missing).
    pub path: PathBuf,
    /// fsync after every line: survives power loss, costs a disk flush per message.
    #[serde(default)]
    pub fsync: bool,
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

pub struct FileChannel {
    config: FileConfig,
    file: Option<File>,
}

impl FileChannel {
    pub fn new(config: FileConfig) -> Self {
        FileChannel { config, file: None }
    }

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

impl Actor for FileChannel {
    type Context = Context<Self>;
}

impl Handler<Deliver> for FileChannel {
    type Result = MessageResult<Deliver>;

    fn handle(&mut self, Deliver(delivery): Deliver, _: &mut Context<Self>) -> Self::Result {
        let mut line = serde_json::to_vec(&delivery).expect("a delivery always serialises");
        line.push(b'\n');
        MessageResult(match self.append(&line) {
            Ok(()) => Outcome::Delivered,
            Err(e) => {
                self.file = None; // reopen next time: the file may have been moved or fixed
                Outcome::retry(format!(
                    "cannot append to {}: {e}",
                    self.config.path.display()
                ))
            }
        })
    }
}
