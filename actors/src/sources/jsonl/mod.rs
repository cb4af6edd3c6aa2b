//! `kind = "jsonl"`: inbound messages from a JSON-lines spool file that another program appends
//! to, one message per line in the shape `relayq enqueue inbound --json` prints
//! (`{"session": "...", "origin": "...", "content": "..."}`, plus any optional field). The
//! offset is the byte position after the last whole line read, so a line still being written
//! waits for its newline. A line that is not such a message is logged and skipped. A file
//! shorter than the offset was truncated or replaced: it is read again from the start (give
//! messages a `source_message_id` so a re-read line is taken for the duplicate it is).
//!
//! It is the frame's test source and a real spool for adapters that would rather append to a
//! file than link relayq or run a process per message.

#[cfg(feature = "test-helpers")]
pub mod conformance;

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use relayq_engine::InboundMessage;
use serde::{Deserialize, Serialize};

use crate::settings::{check_duration, resolve_path, SettingError};
use crate::sources::{Batch, Fetch, Source, SourceKind, SourceSpec};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The spool file; it need not exist yet.
    pub path: PathBuf,
    /// How often to look for new lines when there were none.
    #[serde(default = "default_poll_interval", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Most lines enqueued in one transaction.
    #[serde(default = "default_batch")]
    pub batch: usize,
}

fn default_poll_interval() -> Duration {
    Duration::from_millis(200)
}
fn default_batch() -> usize {
    100
}

impl Config {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Config {
            path: path.into(),
            poll_interval: default_poll_interval(),
            batch: default_batch(),
        }
    }
}

impl SourceKind for Config {
    fn check(&self) -> Result<(), SettingError> {
        let range = (Duration::from_millis(10), Duration::from_secs(3600));
        check_duration("poll_interval", self.poll_interval, range, "")?;
        if !(1..=10_000).contains(&self.batch) {
            return Err(SettingError::new(
                "batch",
                format!("{} is out of range: between 1 and 10000", self.batch),
            ));
        }
        Ok(())
    }

    fn build(&self) -> Result<SourceSpec, SettingError> {
        Ok(SourceSpec::of(JsonlSource {
            config: Arc::new(self.clone()),
        }))
    }

    fn resolve_paths(&mut self, base: &Path) {
        resolve_path(&mut self.path, base);
    }
}

#[derive(Clone)]
pub struct JsonlSource {
    config: Arc<Config>,
}

impl Source for JsonlSource {
    fn fetch(&mut self, offset: Option<String>) -> Fetch {
        let config = self.config.clone();
        Box::pin(async move {
            let start = match offset.as_deref().map(str::parse::<u64>) {
                None => 0,
                Some(Ok(at)) => at,
                Some(Err(_)) => return Err(format!("the stored offset {offset:?} is not a byte position")),
            };
            let batch = read(&config, start)?;
            if batch.messages.is_empty() && batch.offset == start.to_string() {
                tokio::time::sleep(config.poll_interval).await;
            }
            Ok(batch)
        })
    }
}

/// Up to `batch` whole lines from byte `start` of the file.
fn read(config: &Config, start: u64) -> Result<Batch, String> {
    let empty = |at: u64| Batch {
        offset: at.to_string(),
        ..Batch::default()
    };
    let path = &config.path;
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(empty(start)),
        Err(e) => return Err(format!("cannot open {}: {e}", path.display())),
    };
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut at = start;
    if len < start {
        tracing::warn!(path = %path.display(), offset = start, len, "the spool file is shorter than the offset: it was truncated or replaced; reading it from the start");
        at = 0;
    }
    let mut reader = BufReader::new(file);
    reader.seek(SeekFrom::Start(at)).map_err(|e| e.to_string())?;
    let mut messages = Vec::new();
    let mut line = Vec::new();
    while messages.len() < config.batch {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if n == 0 || line.last() != Some(&b'\n') {
            break; // the end, or a line still being written
        }
        let line_at = at;
        at += n as u64;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<InboundMessage>(&line) {
            Ok(message) => messages.push(message),
            Err(e) => {
                tracing::error!(path = %path.display(), byte = line_at, error = %e, "skipping a line that is not an inbound message")
            }
        }
    }
    Ok(Batch {
        messages,
        offset: at.to_string(),
        ..Batch::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_lines_are_read_from_the_offset_and_a_partial_line_waits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool.jsonl");
        let config = Config {
            batch: 2,
            ..Config::new(&path)
        };
        assert_eq!(read(&config, 0).unwrap().messages.len(), 0, "no file yet");
        let one = r#"{"session":"s","origin":"o","content":"one"}"#;
        let two = r#"{"session":"s","origin":"o","content":"two"}"#;
        let three = r#"{"session":"s","origin":"o","content":"three"}"#;
        std::fs::write(&path, format!("{one}\nnot json\n\n{two}\n{three}\n{{\"sess")).unwrap();

        let first = read(&config, 0).unwrap();
        let texts: Vec<_> = first.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts, ["one", "two"], "the bad line is skipped");
        let second = read(&config, first.offset.parse().unwrap()).unwrap();
        assert_eq!(second.messages[0].content, "three");
        let end: u64 = second.offset.parse().unwrap();
        assert_eq!(read(&config, end).unwrap().offset, end.to_string(), "the partial line waits");

        std::fs::write(&path, format!("{one}\n")).unwrap();
        let again = read(&config, end).unwrap();
        assert_eq!(again.messages[0].content, "one", "a truncated file is read from the start");
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        let bad = Config {
            poll_interval: Duration::ZERO,
            ..Config::new("x")
        };
        assert_eq!(bad.check().unwrap_err().key, "poll_interval");
        let bad = Config {
            batch: 0,
            ..Config::new("x")
        };
        assert_eq!(bad.check().unwrap_err().key, "batch");
    }
}
