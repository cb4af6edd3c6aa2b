//! `[files]`: where a message's files go and how they are fetched.

use std::path::{Component, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::settings::SettingError;

/// `[files]` in config.toml.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileSettings {
    /// Where a message's files go, inside its session's directory (the agent's own, as its
    /// hooks report it): `<dir>/<inbox>/<row id>/`. Relative, without `..`.
    pub inbox: PathBuf,
    /// The largest file fetched, in bytes (a platform's own bot limit applies first:
    /// Telegram's is 20 MB).
    pub max_bytes: u64,
    /// Tries to fetch one file before the message goes without it (saying why).
    pub fetch_tries: u32,
    /// How long one try may take.
    #[serde(with = "humantime_serde")]
    pub fetch_timeout: Duration,
    /// Folders besides the session's directory whose files `relayq send` and the outbox may
    /// send (absolute).
    pub send_from: Vec<PathBuf>,
    /// Files never sent, as globs: one without `/` is matched against each part of the path
    /// (`*.pem`), one with `/` against the path inside the directory (`.git/**`).
    pub deny: Vec<String>,
}

impl Default for FileSettings {
    fn default() -> Self {
        FileSettings {
            inbox: PathBuf::from(".relayq/inbox"),
            max_bytes: 100 * 1024 * 1024,
            fetch_tries: 3,
            fetch_timeout: Duration::from_secs(120),
            send_from: Vec::new(),
            deny: [".env", ".env.*", "*.pem", "*.key", "id_*", ".git/**"]
                .map(String::from)
                .to_vec(),
        }
    }
}

/// `fetch_tries`' range.
const TRIES: std::ops::RangeInclusive<u32> = 1..=10;
/// `max_bytes`' ceiling: 2 GB, the most any platform lets a bot move.
const MAX_BYTES: u64 = 2_000_000_000;

impl FileSettings {
    /// Checks each value; the error names the key and the range.
    pub fn check(&self) -> Result<(), SettingError> {
        if self.inbox.as_os_str().is_empty()
            || !self
                .inbox
                .components()
                .all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(SettingError::new(
                "inbox",
                format!(
                    "{} is not a relative path without ..: it is a folder inside each session's \
                     directory, e.g. \".relayq/inbox\"",
                    self.inbox.display()
                ),
            ));
        }
        if !(1..=MAX_BYTES).contains(&self.max_bytes) {
            return Err(SettingError::new(
                "max_bytes",
                format!("is {}: give 1 to {MAX_BYTES}", self.max_bytes),
            ));
        }
        if !TRIES.contains(&self.fetch_tries) {
            return Err(SettingError::new(
                "fetch_tries",
                format!(
                    "is {}: give {} to {}",
                    self.fetch_tries,
                    TRIES.start(),
                    TRIES.end()
                ),
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.fetch_timeout) {
            return Err(SettingError::new(
                "fetch_timeout",
                "must be from 1s to 1h".to_string(),
            ));
        }
        if let Some(dir) = self.send_from.iter().find(|d| !d.is_absolute()) {
            return Err(SettingError::new(
                "send_from",
                format!("{} is not an absolute path", dir.display()),
            ));
        }
        if let Some((pattern, e)) = self
            .deny
            .iter()
            .find_map(|p| glob::Pattern::new(p).err().map(|e| (p, e)))
        {
            return Err(SettingError::new(
                "deny",
                format!("{pattern:?} is not a glob: {}", e.msg),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setting_out_of_range_is_refused_naming_its_key() {
        FileSettings::default().check().unwrap();
        let refused = |s: FileSettings| s.check().unwrap_err().to_string();
        let inbox = |p: &str| FileSettings {
            inbox: p.into(),
            ..FileSettings::default()
        };
        assert!(refused(inbox("../out")).contains("inbox"));
        assert!(refused(inbox("/tmp/in")).contains("relative"));
        assert!(refused(FileSettings {
            fetch_tries: 0,
            ..FileSettings::default()
        })
        .contains("fetch_tries"));
        assert!(refused(FileSettings {
            max_bytes: 0,
            ..FileSettings::default()
        })
        .contains("give 1 to"));
    }
}
