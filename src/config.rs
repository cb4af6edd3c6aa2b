//! `config.toml`: every setting, its default, and checks whose errors name the file, the key
//! and what is expected. The repo-root `config.toml` lists every setting with its default and
//! is parsed by a test, so it cannot drift from this file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use relayq_actors::channels::file::FileConfig;
use relayq_actors::{ChannelConfig, Routing, RuntimeConfig};
use relayq_engine::{inbound, DbConfig, QueuePolicy, Synchronous};
use serde::Deserialize;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub database: DatabaseConfig,
    pub daemon: DaemonConfig,
    pub queues: QueuesConfig,
    pub sessions: SessionsConfig,
    /// `[channels.NAME]` tables, each with a `kind`.
    pub channels: BTreeMap<String, ChannelConfig>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    pub path: PathBuf,
    pub synchronous: SynchronousSetting,
    #[serde(with = "humantime_serde")]
    pub busy_timeout: Duration,
    pub readers: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SynchronousSetting {
    Normal,
    Full,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueuesConfig {
    pub inbound: QueueConfig,
}

/// A queue's policy as written in the file; each setting left out keeps its default.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    pub backoff: Vec<humantime_serde::Serde<Duration>>,
    #[serde(with = "humantime_serde")]
    pub lease_timeout: Duration,
    pub max_attempts: Option<u32>,
    #[serde(with = "humantime_serde")]
    pub max_age: Option<Duration>,
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    #[serde(with = "humantime_serde")]
    pub dead_retention: Option<Duration>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig::from_policy(&QueuePolicy::inbound())
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// The channel for sessions not listed in `channels`.
    pub default_channel: String,
    /// Per-session overrides: session id → channel name.
    pub channels: BTreeMap<String, String>,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            path: "relayq.db".into(),
            synchronous: SynchronousSetting::Normal,
            busy_timeout: Duration::from_secs(5),
            readers: 4,
        }
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            shutdown_grace: Duration::from_secs(10),
            sweep_interval: Duration::from_secs(10),
            prune_interval: Duration::from_secs(300),
            max_body_bytes: inbound::DEFAULT_MAX_BODY_BYTES,
        }
    }
}

impl Default for QueuesConfig {
    fn default() -> Self {
        QueuesConfig {
            inbound: QueueConfig::from_policy(&QueuePolicy::inbound()),
        }
    }
}

/// The built-in channel: every session's messages appended to a JSON-lines file.
pub const DEFAULT_CHANNEL: &str = "deliveries";

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            default_channel: DEFAULT_CHANNEL.into(),
            channels: BTreeMap::new(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        let deliveries = ChannelConfig::File(FileConfig {
            path: "relayq-deliveries.jsonl".into(),
            fsync: false,
            timeout: Duration::from_secs(30),
        });
        Config {
            database: DatabaseConfig::default(),
            daemon: DaemonConfig::default(),
            queues: QueuesConfig::default(),
            sessions: SessionsConfig::default(),
            channels: BTreeMap::from([(DEFAULT_CHANNEL.to_string(), deliveries)]),
        }
    }
}

impl QueueConfig {
    fn from_policy(p: &QueuePolicy) -> Self {
        QueueConfig {
            backoff: p.backoff.iter().map(|d| (*d).into()).collect(),
            lease_timeout: p.lease_timeout,
            max_attempts: p.max_attempts,
            max_age: p.max_age,
            retention: p.retention,
            dead_retention: p.dead_retention,
        }
    }

    pub fn policy(&self) -> QueuePolicy {
        QueuePolicy {
            backoff: self.backoff.iter().map(|d| **d).collect(),
            lease_timeout: self.lease_timeout,
            max_attempts: self.max_attempts,
            max_age: self.max_age,
            retention: self.retention,
            dead_retention: self.dead_retention,
        }
    }
}

/// A configuration problem, said in the words a person needs to fix it.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {key}: {message}")]
pub struct ConfigError {
    pub file: String,
    /// The dotted key (`channels.log.path`), or `line N` when the file is not valid TOML.
    pub key: String,
    pub message: String,
}

impl Config {
    /// Reads `path`; when `path` is `None`, reads `./config.toml` if it exists, else uses the
    /// built-in defaults.
    pub fn load(path: Option<&Path>) -> Result<(Config, Option<PathBuf>), ConfigError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None if Path::new("config.toml").exists() => PathBuf::from("config.toml"),
            None => return Ok((Config::default(), None)),
        };
        let file = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError {
            file: file.clone(),
            key: "(file)".into(),
            message: format!("cannot read it: {e}"),
        })?;
        let config = Config::parse(&text, &file)?;
        Ok((config, Some(path)))
    }

    /// Parses and checks a configuration text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let line_of = |span: Option<std::ops::Range<usize>>| {
            span.map(|s| {
                format!(
                    "line {}",
                    text[..s.start.min(text.len())].lines().count().max(1)
                )
            })
        };
        let de = toml::de::Deserializer::parse(text).map_err(|e| ConfigError {
            file: file.into(),
            key: line_of(e.span()).unwrap_or_else(|| "(file)".into()),
            message: e.message().trim().to_string(),
        })?;
        let config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let key = match (path.as_str(), line_of(inner.span())) {
                (".", Some(line)) | ("", Some(line)) => line,
                (".", None) | ("", None) => "(top level)".into(),
                (p, _) => p.to_string(),
            };
            ConfigError {
                file: file.into(),
                key,
                message: inner.message().trim().to_string(),
            }
        })?;
        config.check(file)?;
        Ok(config)
    }

    /// Checks that parsing alone cannot: references between sections, empty lists.
    fn check(&self, file: &str) -> Result<(), ConfigError> {
        let err = |key: &str, message: String| ConfigError {
            file: file.into(),
            key: key.into(),
            message,
        };
        let q = &self.queues.inbound;
        if q.backoff.is_empty() {
            return Err(err(
                "queues.inbound.backoff",
                "must list at least one delay, e.g. [\"5s\", \"10s\"]".into(),
            ));
        }
        if q.lease_timeout.is_zero() {
            return Err(err(
                "queues.inbound.lease_timeout",
                "must be longer than zero, e.g. \"5m\"".into(),
            ));
        }
        if self.daemon.max_body_bytes == 0 {
            return Err(err("daemon.max_body_bytes", "must be at least 1".into()));
        }
        let known = || self.channels.keys().cloned().collect::<Vec<_>>().join(", ");
        if !self.channels.contains_key(&self.sessions.default_channel) {
            return Err(err(
                "sessions.default_channel",
                format!(
                    "names channel '{}', which has no [channels.{}] table (configured: {})",
                    self.sessions.default_channel,
                    self.sessions.default_channel,
                    known()
                ),
            ));
        }
        for (session, channel) in &self.sessions.channels {
            if !self.channels.contains_key(channel) {
                return Err(err(
                    &format!("sessions.channels.{session}"),
                    format!("names channel '{channel}', which has no [channels.{channel}] table (configured: {})", known()),
                ));
            }
        }
        for (name, channel) in &self.channels {
            if let ChannelConfig::Exec(exec) = channel {
                if exec.command.first().is_none_or(|p| p.is_empty()) {
                    return Err(err(
                        &format!("channels.{name}.command"),
                        "must name a program, e.g. [\"sh\", \"-c\", \"...\"]".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The database settings, with `--db` taking precedence over the file.
    pub fn db_config(&self, db_override: Option<&Path>) -> DbConfig {
        DbConfig {
            path: db_override
                .map(Path::to_path_buf)
                .unwrap_or_else(|| self.database.path.clone()),
            synchronous: match self.database.synchronous {
                SynchronousSetting::Normal => Synchronous::Normal,
                SynchronousSetting::Full => Synchronous::Full,
            },
            busy_timeout: self.database.busy_timeout,
            readers: self.database.readers,
        }
    }

    /// What the actor system needs.
    pub fn runtime_config(&self, db_override: Option<&Path>) -> RuntimeConfig {
        RuntimeConfig {
            db: self.db_config(db_override),
            inbound: self.queues.inbound.policy(),
            routing: Routing {
                default_channel: self.sessions.default_channel.clone(),
                sessions: self.sessions.channels.clone().into_iter().collect(),
            },
            max_body_bytes: self.daemon.max_body_bytes,
            sweep_interval: self.daemon.sweep_interval,
            prune_interval: self.daemon.prune_interval,
            listen_for_wakes: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repo_config_toml_parses_and_equals_the_built_in_defaults() {
        let text = include_str!("../config.toml");
        let parsed = Config::parse(text, "config.toml").unwrap();
        let mut expected = Config::default();
        // the example also shows one channel of each other kind, unused by default
        expected.channels.extend(
            parsed
                .channels
                .clone()
                .into_iter()
                .filter(|(k, _)| k != DEFAULT_CHANNEL),
        );
        assert_eq!(parsed, expected);
        assert!(parsed
            .channels
            .values()
            .any(|c| matches!(c, ChannelConfig::Exec(_))));
        assert!(parsed
            .channels
            .values()
            .any(|c| matches!(c, ChannelConfig::Tmux(_))));
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(Config::parse("", "c.toml").unwrap(), Config::default());
    }

    fn error(text: &str) -> String {
        Config::parse(text, "c.toml").unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_file_the_key_and_what_is_expected() {
        let e = error("[database]\nsynchronous = \"fast\"\n");
        assert!(
            e.starts_with(
                "c.toml: database.synchronous: unknown variant `fast`, expected `normal` or `full`"
            ),
            "{e}"
        );
        let e = error("[channels.log]\nkind = \"file\"\npth = \"x\"\n");
        assert!(
            e.contains("c.toml: channels.log") && e.contains("unknown field `pth`"),
            "{e}"
        );
        let e = error("[channels.log]\nkind = \"carrier-pigeon\"\n");
        assert!(
            e.contains("channels.log") && e.contains("unknown variant `carrier-pigeon`"),
            "{e}"
        );
        let e = error("[daemon]\nshutdown_grace = \"soon\"\n");
        assert!(e.starts_with("c.toml: daemon.shutdown_grace:"), "{e}");
        let e =
            error("[queues.inbound]\nbackoff = []\nlease_timeout = \"5m\"\nretention = \"7d\"\n");
        assert!(
            e.starts_with("c.toml: queues.inbound.backoff: must list at least one delay"),
            "{e}"
        );
        let e = error("[sessions]\ndefault_channel = \"nope\"\n");
        assert!(
            e.starts_with("c.toml: sessions.default_channel: names channel 'nope'"),
            "{e}"
        );
        let e = error("[sessions.channels]\nalpha = \"nope\"\n");
        assert!(
            e.starts_with("c.toml: sessions.channels.alpha: names channel 'nope'"),
            "{e}"
        );
        let e = error(
            "[sessions]\ndefault_channel = \"x\"\n[channels.x]\nkind = \"exec\"\ncommand = []\n",
        );
        assert!(
            e.starts_with("c.toml: channels.x.command: must name a program"),
            "{e}"
        );
        let e = error("[database\npath = 1");
        assert!(e.starts_with("c.toml: line 1:"), "{e}");
        let e = error("surprise = 1\n");
        assert!(e.contains("unknown field `surprise`"), "{e}");
    }

    #[test]
    fn a_queue_setting_left_out_keeps_its_default() {
        let c = Config::parse("[queues.inbound]\nbackoff = [\"100ms\"]\n", "c.toml").unwrap();
        let p = c.queues.inbound.policy();
        assert_eq!(p.backoff, vec![Duration::from_millis(100)]);
        assert_eq!(
            p,
            QueuePolicy {
                backoff: p.backoff.clone(),
                ..QueuePolicy::inbound()
            }
        );
    }

    #[test]
    fn session_overrides_route_to_their_channel() {
        let c = Config::parse(
            "[sessions.channels]\nalpha = \"tmux\"\n[channels.tmux]\nkind = \"tmux\"\n[channels.deliveries]\nkind = \"file\"\npath = \"d.jsonl\"\n",
            "c.toml",
        )
        .unwrap();
        let r = c.runtime_config(None).routing;
        assert_eq!(
            (r.channel_for("alpha"), r.channel_for("beta")),
            ("tmux", "deliveries")
        );
    }
}
