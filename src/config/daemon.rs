//! `[database]` and `[daemon]`: the database connection and the daemon's own timing and limits.

use std::path::PathBuf;
use std::time::Duration;

use relayq_actors::RelayqConfig;
use relayq_engine::settings::{check_duration, check_range, SettingError};
use relayq_engine::{DbConfig, Synchronous};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// The database file; relative to the config file. Unset: `relayq.db` in the state
    /// directory (see [`state_dir`]).
    pub path: Option<PathBuf>,
    pub synchronous: Synchronous,
    #[serde(with = "humantime_serde")]
    pub busy_timeout: Duration,
    pub readers: u32,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// On SIGINT/SIGTERM, how long in-flight deliveries may take to finish.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub prune_interval: Duration,
    pub max_body_bytes: usize,
}

/// The engine's defaults (`DbConfig::new`); the path is found by [`Config::db_path`].
impl Default for DatabaseConfig {
    fn default() -> Self {
        let engine = DbConfig::new("");
        DatabaseConfig {
            path: None,
            synchronous: engine.synchronous,
            busy_timeout: engine.busy_timeout,
            readers: engine.readers,
        }
    }
}

/// The actor system's defaults (`RelayqConfig::new`), and the time `serve` gives in-flight
/// deliveries at shutdown.
impl Default for DaemonConfig {
    fn default() -> Self {
        let actors = RelayqConfig::new("", "");
        DaemonConfig {
            shutdown_grace: Duration::from_secs(10),
            sweep_interval: actors.sweep_interval,
            prune_interval: actors.prune_interval,
            max_body_bytes: actors.max_body_bytes,
        }
    }
}

/// The most `database.readers`: read connections beyond the cores gain nothing.
const MAX_READERS: u32 = 64;

const SECOND: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(24 * 3600);
/// The longest a wait for the database or for in-flight deliveries may be set to.
const MAX_WAIT: Duration = Duration::from_secs(3600);

impl DatabaseConfig {
    /// What the file alone can tell; keys within `[database]`.
    pub fn check(&self) -> Result<(), SettingError> {
        check_duration(
            "busy_timeout",
            self.busy_timeout,
            (Duration::ZERO, MAX_WAIT),
            "",
        )?;
        // 0 readers makes every read wait for a connection that never comes; a huge pool
        // makes `serve` run out of memory at start.
        check_range("readers", self.readers, (1, MAX_READERS))
    }
}

impl DaemonConfig {
    /// What the file alone can tell; keys within `[daemon]`.
    pub fn check(&self) -> Result<(), SettingError> {
        check_duration(
            "sweep_interval",
            self.sweep_interval,
            (Duration::from_millis(100), DAY),
            "each sweep scans the queues: a shorter interval keeps the CPU busy while idle",
        )?;
        check_duration(
            "prune_interval",
            self.prune_interval,
            (SECOND, 7 * DAY),
            "each prune scans for finished rows",
        )?;
        check_duration(
            "shutdown_grace",
            self.shutdown_grace,
            (Duration::ZERO, MAX_WAIT),
            "",
        )?;
        if self.max_body_bytes == 0 {
            return Err(SettingError::new("max_body_bytes", "must be at least 1"));
        }
        Ok(())
    }
}
