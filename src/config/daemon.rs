//! `[database]` and `[daemon]`: the database connection and the daemon's own timing and limits.

use std::path::PathBuf;
use std::time::Duration;

use relayq_actors::kit::secret::{Secret, SecretSetting};
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
    /// A PostgreSQL database several daemons share (`postgresql://user:password@host/db`),
    /// instead of the file; given as `url`, `url_env` or `url_file`, as secrets are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<Secret>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_env: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_file: Option<PathBuf>,
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
            url: None,
            url_env: None,
            url_file: None,
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

/// `[node]`: which node of the database this daemon is, and the hooks run on it are.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// Unset: the host name. Each daemon sharing a PostgreSQL database needs its own; a
    /// session's agent runs on the node its hooks name, which alone delivers to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The longest node name.
const MAX_NODE_NAME: usize = 64;

impl NodeConfig {
    /// The node's name: the one set, else the host's.
    pub fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(relayq_engine::nodes::host_name)
    }

    /// What the file alone can tell; keys within `[node]`.
    pub fn check(&self) -> Result<(), SettingError> {
        let Some(name) = &self.name else {
            return Ok(());
        };
        let fits = !name.trim().is_empty()
            && name.len() <= MAX_NODE_NAME
            && !name.contains('/')
            && !name.chars().any(char::is_control);
        match fits {
            true => Ok(()),
            false => Err(SettingError::new(
                "name",
                format!(
                    "{name:?} is not a node name: give 1 to {MAX_NODE_NAME} characters, no '/' \
                     and no control characters (or leave it out for the host name)"
                ),
            )),
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
        check_range("readers", self.readers, (1, MAX_READERS))?;
        match self.url_setting() {
            Some(url) => url.check(),
            None => Ok(()),
        }
    }

    /// The PostgreSQL URL, read from where the settings say; `None`: the SQLite file.
    pub fn url(&self) -> Result<Option<String>, SettingError> {
        let Some(setting) = self.url_setting() else {
            return Ok(None);
        };
        let url = setting.resolve()?.expose().trim().to_string();
        if !(url.starts_with("postgresql://") || url.starts_with("postgres://")) {
            return Err(SettingError::new(
                setting_key(&setting),
                "is not a PostgreSQL URL: give postgresql://USER:PASSWORD@HOST/DATABASE \
                 (HOST may be a Unix socket's directory: postgresql://USER@%2Frun%2Fpostgresql/DB), \
                 or leave it out for the SQLite file",
            ));
        }
        Ok(Some(url))
    }

    /// Whether the database is a PostgreSQL server (a URL is given), not the file.
    pub fn is_shared(&self) -> bool {
        self.url_setting().is_some()
    }

    /// The three `url` settings as one, when any is given.
    fn url_setting(&self) -> Option<SecretSetting<'_>> {
        let given = self.url.is_some() || self.url_env.is_some() || self.url_file.is_some();
        given.then(|| SecretSetting::new("url", &self.url, &self.url_env, &self.url_file))
    }
}

/// The key a secret setting was given as (`url`, `url_env`, `url_file`).
fn setting_key(setting: &SecretSetting<'_>) -> String {
    match (setting.env, setting.file) {
        (Some(_), _) => format!("{}_env", setting.key),
        (_, Some(_)) => format!("{}_file", setting.key),
        _ => setting.key.to_string(),
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
