//! `config.toml`: every setting, its default, and checks whose errors name the file, the key
//! and what is expected. The repo-root `config.toml` lists every setting with its default and
//! is parsed by a test, so it cannot drift from this file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use relayq_actors::channels::file;
use relayq_actors::outbound::send_threads::MAX_SEND_THREADS;
use relayq_actors::pacing::PaceSettings;
use relayq_actors::sources::SourceConfig;
use relayq_actors::{ChannelConfig, ClaimSettings, RelayqConfig, SessionChannels};
use relayq_engine::handlers::{relayed_events, ORIGIN};
use relayq_engine::{DbConfig, NoticeRoutes, QueuePolicies, Synchronous};
use serde::{Deserialize, Serialize};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub database: DatabaseConfig,
    pub daemon: DaemonConfig,
    pub queues: QueuePolicies,
    pub claimer: ClaimSettings,
    pub sessions: SessionChannels,
    pub routes: NoticeRoutes,
    /// `[channels.NAME]` tables, each with a `kind`; they add to the built-in `deliveries` and
    /// `notices` file channels, or replace them by name.
    pub channels: BTreeMap<String, ChannelConfig>,
    /// `[sources.NAME]` tables, each with a `kind`: inbound platforms the daemon reads.
    pub sources: BTreeMap<String, SourceConfig>,
    /// `[pacing.NAME]`: a channel's budgets, over the ones its kind declares.
    pub pacing: BTreeMap<String, PaceSettings>,
    /// `[http]`: the daemon's HTTP API, off by default.
    pub http: crate::http::HttpConfig,
    /// `[approvals]`: agents' permission questions answered from the chat.
    pub approvals: relayq_engine::approvals::Settings,
}

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

/// The built-in channels: every session's messages, and the notices, each appended to a
/// JSON-lines file.
pub use relayq_actors::channels::{DELIVERIES_CHANNEL as DEFAULT_CHANNEL, NOTICES_CHANNEL};

/// The most `database.readers`: read connections beyond the cores gain nothing.
const MAX_READERS: u32 = 64;

/// Where the built-in file channels rotate (one old file kept, `.1`).
pub const BUILT_IN_FILE_BYTES: u64 = 16 * 1024 * 1024;

impl Default for Config {
    fn default() -> Self {
        // In the state directory whatever config file is read (never beside it), private, and
        // rotated: the notices hold every agent answer.
        let file = |name: &str| {
            ChannelConfig::File(file::Config {
                max_bytes: Some(BUILT_IN_FILE_BYTES),
                ..file::Config::new(state_dir().join(name))
            })
        };
        Config {
            database: DatabaseConfig::default(),
            daemon: DaemonConfig::default(),
            queues: QueuePolicies::default(),
            claimer: ClaimSettings::default(),
            sessions: SessionChannels::default(),
            routes: NoticeRoutes::default(),
            channels: BTreeMap::from([
                (DEFAULT_CHANNEL.to_string(), file("relayq-deliveries.jsonl")),
                (NOTICES_CHANNEL.to_string(), file("relayq-notices.jsonl")),
            ]),
            sources: BTreeMap::new(),
            pacing: BTreeMap::new(),
            http: crate::http::HttpConfig::default(),
            approvals: Default::default(),
        }
    }
}

/// The durations a setting may take: below the minimum the daemon misbehaves (see each
/// check's reason), above the maximum times overflow or a setting is surely a typo.
type Range = (Duration, Duration);
const SECOND: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(24 * 3600);
const LEASE_TIMEOUT: Range = (SECOND, DAY);
const SWEEP_INTERVAL: Range = (Duration::from_millis(100), DAY);
const PRUNE_INTERVAL: Range = (SECOND, Duration::from_secs(7 * 24 * 3600));
const MAX_GRACE: Duration = Duration::from_secs(3600);
const MAX_WAIT: Duration = Duration::from_secs(30 * 24 * 3600);
const MAX_KEEP: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Checks `value` against `(min, max)`; the message gives the range and why it holds.
fn within(value: Duration, (min, max): Range, why: &str) -> Result<(), String> {
    if value >= min && value <= max {
        return Ok(());
    }
    let show = |d: Duration| humantime::format_duration(d).to_string();
    let mut message = if min.is_zero() {
        format!("{} is too long: at most {}", show(value), show(max))
    } else {
        format!(
            "{} is out of range: between {} and {}",
            show(value),
            show(min),
            show(max)
        )
    };
    if !why.is_empty() && value < min {
        message.push_str(&format!(" ({why})"));
    }
    Err(message)
}

/// `line N` of `text` where `span` starts.
/// A deserialiser's message, with what to do when it names an unknown key but not the keys
/// the table takes (a kind whose settings take shared parts in whole, such as a token, is
/// read that way).
fn explained(message: &str) -> String {
    let message = message.trim();
    if message.starts_with("unknown field") && !message.contains("expected") {
        return format!(
            "{message}: check its spelling; `relayq config show` and the README's section for \
             this kind list the keys it takes"
        );
    }
    message.to_string()
}

fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> Option<String> {
    span.map(|s| {
        format!(
            "line {}",
            text[..s.start.min(text.len())].lines().count().max(1)
        )
    })
}

/// The prefix of environment variables that set a setting: `RELAYQ_<SECTION>__<KEY>`, with
/// `__` between the parts of the key (`RELAYQ_QUEUES__INBOUND__MAX_ATTEMPTS=3`).
pub const SETTING_ENV_PREFIX: &str = "RELAYQ_";

/// One setting given by an environment variable.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvSetting {
    pub var: String,
    /// The key, lower-cased: `["queues", "inbound", "max_attempts"]`.
    pub path: Vec<String>,
    /// A TOML value (`3`, `true`, `["1s", "2s"]`), else taken as a string (`1s`, a URL).
    pub value: String,
}

impl EnvSetting {
    fn apply(&self, table: &mut toml::Table) -> Result<(), String> {
        let value = format!("v = {}", self.value)
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(self.value.clone()));
        let (last, parents) = self.path.split_last().ok_or("names no key")?;
        let mut at = table;
        for part in parents {
            let entry = at
                .entry(part.clone())
                .or_insert_with(|| toml::Value::Table(Default::default()));
            at = entry
                .as_table_mut()
                .ok_or_else(|| format!("`{part}` is not a table, so it has no keys to set"))?;
        }
        at.insert(last.clone(), value);
        Ok(())
    }
}

/// The settings `RELAYQ_*__*` environment variables give, in name order. Variables without
/// `__` (`RELAYQ_DB`, `RELAYQ_CONFIG`) are not settings.
pub fn settings_from_env() -> Vec<EnvSetting> {
    let mut settings: Vec<EnvSetting> = std::env::vars()
        .filter_map(|(var, value)| {
            let key = var.strip_prefix(SETTING_ENV_PREFIX)?;
            key.contains("__").then(|| EnvSetting {
                path: key.split("__").map(str::to_lowercase).collect(),
                var: var.clone(),
                value,
            })
        })
        .collect();
    settings.sort_by(|a, b| a.var.cmp(&b.var));
    settings
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

/// The environment variable naming the config file (under `--config`).
pub const CONFIG_ENV: &str = "RELAYQ_CONFIG";
/// The environment variable naming the database (under `--db`, over `database.path`).
pub const DB_ENV: &str = "RELAYQ_DB";

/// `database.path` in a config file's text, even when the rest of the file is wrong: read as
/// TOML when it parses, else from the `path = "..."` line of its `[database]` table.
fn database_path_in(text: &str) -> Option<PathBuf> {
    if let Ok(table) = text.parse::<toml::Table>() {
        return table
            .get("database")?
            .get("path")?
            .as_str()
            .map(PathBuf::from);
    }
    let mut in_database = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_database = line
                .trim_end_matches(|c: char| c == ']' || c.is_whitespace())
                .trim_start_matches('[')
                .trim()
                == "database";
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if in_database && key.trim() == "path" {
            let value: toml::Value = format!("v = {}", value.trim())
                .parse::<toml::Table>()
                .ok()?
                .remove("v")?;
            return value.as_str().map(PathBuf::from);
        }
    }
    None
}

/// Where relayq keeps its database and files when nothing says otherwise:
/// `$XDG_STATE_HOME/relayq`, else `~/.local/state/relayq`. The same for every command, wherever
/// it runs: a hook run by an agent in its project directory finds the daemon's database.
pub fn state_dir() -> PathBuf {
    xdg_dir("XDG_STATE_HOME", ".local/state")
}

/// The per-user config file, read when it exists: `$XDG_CONFIG_HOME/relayq/config.toml`, else
/// `~/.config/relayq/config.toml`.
pub fn user_config_file() -> PathBuf {
    xdg_dir("XDG_CONFIG_HOME", ".config").join("config.toml")
}

fn xdg_dir(var: &str, under_home: &str) -> PathBuf {
    let base = std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(under_home)))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("relayq")
}

impl Config {
    /// Finds and reads the configuration: `path` (`--config`), else `$RELAYQ_CONFIG`, else the
    /// per-user file when it exists, else the built-in defaults. Relative paths in it are
    /// resolved against the file's directory (the state directory for the defaults). Returns
    /// the file read, if any.
    pub fn load(path: Option<&Path>) -> Result<(Config, Option<PathBuf>), ConfigError> {
        let user_file = user_config_file();
        let path = match path {
            Some(p) => Some(p.to_path_buf()),
            None => match std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()) {
                Some(p) => Some(PathBuf::from(p)),
                None => user_file.exists().then_some(user_file),
            },
        };
        let env = settings_from_env();
        let Some(path) = path else {
            let mut config = Config::parse_with(&env, "", "(built-in defaults)")?;
            config.resolve_paths(&state_dir());
            return Ok((config, None));
        };
        let path = std::path::absolute(&path).unwrap_or(path);
        let file = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError {
            file: file.clone(),
            key: "(file)".into(),
            message: format!("cannot read it: {e}"),
        })?;
        let mut config = Config::parse_with(&env, &text, &file)?;
        config.resolve_paths(path.parent().unwrap_or(Path::new("/")));
        Ok((config, Some(path)))
    }

    /// For `relayq hook` when [`Config::load`] fails: the built-in defaults with the database
    /// path the file still tells (read as bare TOML, else from its `[database]` lines), so the
    /// agent's event is kept whatever else the file says. `None` as the path: the file names
    /// none that can be read, and the default location is used.
    pub fn database_only(path: Option<&Path>) -> (Config, Option<PathBuf>) {
        let mut config = Config::default();
        let file = path
            .map(Path::to_path_buf)
            .or_else(|| {
                std::env::var_os(CONFIG_ENV)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(user_config_file);
        let named = std::fs::read_to_string(&file)
            .ok()
            .and_then(|text| database_path_in(&text));
        let base = file.parent().unwrap_or(Path::new("/"));
        config.database.path = named.as_ref().map(|p| base.join(p));
        (config, named.map(|_| file))
    }

    /// Makes relative paths (the database, file channels) relative to `base`.
    fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if let Some(db) = &mut self.database.path {
            resolve(db);
        }
        for channel in self.channels.values_mut() {
            channel.resolve_paths(base);
        }
        for source in self.sources.values_mut() {
            source.resolve_paths(base);
        }
    }

    /// Parses and checks a configuration text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        Config::parse_with(&[], text, file)
    }

    /// [`Config::parse`], with `env` settings (see [`settings_from_env`]) over the file's.
    pub fn parse_with(env: &[EnvSetting], text: &str, file: &str) -> Result<Config, ConfigError> {
        if env.is_empty() {
            return Config::parse_text(text, file);
        }
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError {
            file: file.into(),
            key: line_of(text, e.span()).unwrap_or_else(|| "(file)".into()),
            message: e.message().trim().to_string(),
        })?;
        for setting in env {
            setting.apply(&mut table).map_err(|message| ConfigError {
                file: format!("${}", setting.var),
                key: setting.path.join("."),
                message,
            })?;
        }
        // A problem with a key an environment variable set is that variable's.
        let blame = |e: ConfigError| match env.iter().find(|s| e.key.starts_with(&s.path.join(".")))
        {
            Some(s) => ConfigError {
                file: format!("${}", s.var),
                ..e
            },
            None => e,
        };
        let config: Config = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let path = e.path().to_string();
                ConfigError {
                    file: file.into(),
                    key: if path.is_empty() || path == "." {
                        "(top level)".into()
                    } else {
                        path
                    },
                    message: explained(e.into_inner().message()),
                }
            })
            .map_err(blame)?;
        config.finish(file).map_err(blame)
    }

    fn parse_text(text: &str, file: &str) -> Result<Config, ConfigError> {
        let line_of = |span| line_of(text, span);
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
                message: explained(inner.message()),
            }
        })?;
        config.finish(file)
    }

    /// Adds the built-in channels (unless a table of the same name replaces them) and checks.
    fn finish(mut self, file: &str) -> Result<Config, ConfigError> {
        for (name, channel) in Config::default().channels {
            self.channels.entry(name).or_insert(channel);
        }
        self.check(file)?;
        // A source that answers its chats through a channel the file does not configure gets
        // one made from its own settings (a bot reads and writes with one token).
        for (name, source) in &self.sources {
            if let Some(replies) = source.replies(name) {
                self.channels
                    .entry(replies.channel)
                    .or_insert(replies.default_config);
            }
        }
        Ok(self)
    }

    /// The channel `name`, or why there is none (see
    /// [`not_configured`](relayq_actors::channels::not_configured)).
    pub fn channel(&self, name: &str) -> Result<&ChannelConfig, String> {
        self.channels.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.channels.keys().map(String::as_str).collect();
            relayq_actors::channels::not_configured(name, &known)
        })
    }

    /// Checks that parsing alone cannot: references between sections, empty lists.
    fn check(&self, file: &str) -> Result<(), ConfigError> {
        let err = |key: &str, message: String| ConfigError {
            file: file.into(),
            key: key.into(),
            message,
        };
        for (name, source) in &self.sources {
            if source.pushed() && !self.http.enabled {
                return Err(err(
                    &format!("sources.{name}.mode"),
                    "takes pushes from its platform at the HTTP API (POST /v1/ingress/NAME), which is off: set [http] enabled = true".into(),
                ));
            }
        }
        let q = &self.queues;
        for (name, policy) in [
            ("inbound", &q.inbound),
            ("hooks", &q.hooks),
            ("outbound", &q.outbound),
        ] {
            match (name, &policy.replay_kinds) {
                ("outbound", Some(kinds)) => {
                    if let Some(bad) = kinds
                        .iter()
                        .find(|k| !["final", "block", "tool"].contains(&k.as_str()))
                    {
                        return Err(err(
                            "queues.outbound.replay_kinds",
                            format!("{bad:?} is not a kind of message: use \"final\", \"block\" and \"tool\""),
                        ));
                    }
                }
                ("outbound", None) | (_, None) => {}
                (_, Some(_)) => {
                    return Err(err(
                        &format!("queues.{name}.replay_kinds"),
                        "only outbound messages have kinds: set replay_kinds in [queues.outbound]"
                            .into(),
                    ))
                }
            }
            if name == "hooks" && (policy.max_depth.is_some() || policy.max_key_depth.is_some()) {
                return Err(err(
                    "queues.hooks.max_depth",
                    "hook events are never refused (the agent cannot send them again): leave max_depth and max_key_depth out of [queues.hooks]".into(),
                ));
            }
            if policy.backoff.is_empty() {
                return Err(err(
                    &format!("queues.{name}.backoff"),
                    "must list at least one delay, e.g. [\"5s\", \"10s\"]".into(),
                ));
            }
            let key = |k: &str| format!("queues.{name}.{k}");
            within(
                policy.lease_timeout,
                LEASE_TIMEOUT,
                "a lease is renewed every third of it while a delivery runs; shorter ones \
                 expire under a busy disk and the row is delivered twice",
            )
            .map_err(|m| err(&key("lease_timeout"), m))?;
            for delay in &policy.backoff {
                within(*delay, (Duration::ZERO, MAX_WAIT), "")
                    .map_err(|m| err(&key("backoff"), m))?;
            }
            for (k, value) in [
                ("max_age", policy.max_age),
                ("retention", Some(policy.retention)),
                ("dead_retention", policy.dead_retention),
            ] {
                if let Some(value) = value {
                    within(value, (Duration::ZERO, MAX_KEEP), "").map_err(|m| err(&key(k), m))?;
                }
            }
        }
        self.http.check().map_err(|(key, m)| err(key, m))?;
        if self.http.max_request_bytes < self.daemon.max_body_bytes {
            return Err(err(
                "http.max_request_bytes",
                format!(
                    "{} is less than daemon.max_body_bytes ({}): a message the CLI takes would \
                     be refused over HTTP; raise it to at least that",
                    self.http.max_request_bytes, self.daemon.max_body_bytes
                ),
            ));
        }
        let d = &self.daemon;
        for (key, value, range, why) in [
            (
                "daemon.sweep_interval",
                d.sweep_interval,
                SWEEP_INTERVAL,
                "each sweep scans the queues: a shorter interval keeps the CPU busy while idle",
            ),
            (
                "daemon.prune_interval",
                d.prune_interval,
                PRUNE_INTERVAL,
                "each prune scans for finished rows",
            ),
            (
                "daemon.shutdown_grace",
                d.shutdown_grace,
                (Duration::ZERO, MAX_GRACE),
                "",
            ),
            (
                "database.busy_timeout",
                self.database.busy_timeout,
                (Duration::ZERO, MAX_GRACE),
                "",
            ),
            (
                "approvals.expire_after",
                self.approvals.expire_after,
                relayq_engine::approvals::EXPIRE_AFTER_RANGE,
                "the waiting hook must answer before the agent's own hook timeout (600 s)",
            ),
        ] {
            within(value, range, why).map_err(|m| err(key, m))?;
        }
        let c = &self.claimer;
        if c.hook_batch == 0 || c.outbound_in_flight == 0 {
            let key = if c.hook_batch == 0 {
                "claimer.hook_batch"
            } else {
                "claimer.outbound_in_flight"
            };
            return Err(err(key, "must be at least 1".into()));
        }
        if c.drain_in_flight == 0 || c.drain_in_flight > c.outbound_in_flight {
            return Err(err(
                "claimer.drain_in_flight",
                format!(
                    "{} is out of range: between 1 and claimer.outbound_in_flight ({})",
                    c.drain_in_flight, c.outbound_in_flight
                ),
            ));
        }
        if !(1..=MAX_SEND_THREADS).contains(&c.send_threads) {
            return Err(err(
                "claimer.send_threads",
                format!(
                    "{} is out of range: between 1 and {MAX_SEND_THREADS}",
                    c.send_threads
                ),
            ));
        }
        if c.hook_buffer <= c.hook_reserved_critical {
            return Err(err(
                "claimer.hook_buffer",
                format!(
                    "must be larger than claimer.hook_reserved_critical ({}), so bursty events have room",
                    c.hook_reserved_critical
                ),
            ));
        }
        if self.daemon.max_body_bytes == 0 {
            return Err(err("daemon.max_body_bytes", "must be at least 1".into()));
        }
        // 0 readers makes every read wait for a connection that never comes; a huge pool
        // makes `serve` run out of memory at start.
        if !(1..=MAX_READERS).contains(&self.database.readers) {
            return Err(err(
                "database.readers",
                format!(
                    "{} is out of range: between 1 and {MAX_READERS}",
                    self.database.readers
                ),
            ));
        }
        // Every reference to a channel, checked the one way: it names a [channels.NAME] table.
        let named = |key: &str, channel: &str| match self.channels.contains_key(channel) {
            true => Ok(()),
            false => {
                let known: Vec<&str> = self.channels.keys().map(String::as_str).collect();
                Err(err(key, format!("names channel '{channel}', which has no [channels.{channel}] table (configured: {})", known.join(", "))))
            }
        };
        named("sessions.default_channel", &self.sessions.default_channel)?;
        for (session, channel) in &self.sessions.channels {
            named(&format!("sessions.channels.{session}"), channel)?;
        }
        let routes = self
            .routes
            .default
            .iter()
            .map(|r| ("routes.default".to_string(), r));
        let session_routes = self.routes.sessions.iter().flat_map(|(session, list)| {
            list.iter()
                .map(move |r| (format!("routes.sessions.{session}"), r))
        });
        for (key, route) in routes.chain(session_routes) {
            if let Some(e) = route.events.iter().find(|e| !relayed_events().contains(e)) {
                return Err(err(&key, format!("event {e:?} is not relayed; routes take agent_stop, notification and error")));
            }
            let channel = match &route.channel {
                Some(channel) => channel,
                None if route.to == ORIGIN => continue,
                None => return Err(err(&key, format!("the route to '{}' names no channel: add channel = \"NAME\", or write to = \"origin\" for the chat the session's messages come from", route.to))),
            };
            named(&key, channel)?;
            if route.to.trim().is_empty() {
                return Err(err(&key, format!("the route to channel '{channel}' has an empty `to`: say where on the channel to send")));
            }
        }
        for (name, channel) in &self.channels {
            channel
                .check()
                .map_err(|e| err(&format!("channels.{name}.{}", e.key), e.message))?;
        }
        for name in self.pacing.keys() {
            named(&format!("pacing.{name}"), name)?;
        }
        for (name, source) in &self.sources {
            source
                .check()
                .map_err(|e| err(&format!("sources.{name}.{}", e.key), e.message))?;
        }
        Ok(())
    }

    /// Settings that work but are probably not what was meant, said for the log.
    pub fn warnings(&self) -> Vec<String> {
        let q = &self.queues;
        [
            ("inbound", &q.inbound),
            ("hooks", &q.hooks),
            ("outbound", &q.outbound),
        ]
        .into_iter()
        .filter(|(_, p)| p.dead_retention.is_some_and(|dead| dead < p.retention))
        .map(|(name, p)| {
            format!(
                "queues.{name}.dead_retention ({}) is shorter than its retention ({}): dead \
                     letters, which wait for an operator, are deleted before delivered rows",
                humantime::format_duration(p.dead_retention.unwrap_or_default()),
                humantime::format_duration(p.retention)
            )
        })
        .collect()
    }

    /// The database file: `--db`, else `$RELAYQ_DB`, else `database.path`, else `relayq.db` in
    /// the state directory.
    pub fn db_path(&self, db_override: Option<&Path>) -> PathBuf {
        db_override
            .map(Path::to_path_buf)
            .or_else(|| {
                std::env::var_os(DB_ENV)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .or_else(|| self.database.path.clone())
            .unwrap_or_else(|| state_dir().join("relayq.db"))
    }

    /// The database settings, with the path as [`Config::db_path`] finds it.
    pub fn db_config(&self, db_override: Option<&Path>) -> DbConfig {
        DbConfig {
            path: self.db_path(db_override),
            synchronous: self.database.synchronous,
            busy_timeout: self.database.busy_timeout,
            readers: self.database.readers,
        }
    }

    /// Where hook events' notices go.
    pub fn notice_routes(&self) -> NoticeRoutes {
        let mut routes = self.routes.clone();
        routes.replies = self
            .sources
            .iter()
            .filter_map(|(name, source)| source.replies(name))
            .map(|r| (r.origin, r.channel))
            .collect();
        routes.limits = self
            .channels
            .iter()
            .filter_map(|(name, channel)| Some((name.clone(), channel.text_limit()?)))
            .collect();
        routes
    }

    /// What the actor system needs.
    pub fn runtime_config(&self, db_override: Option<&Path>) -> RelayqConfig {
        RelayqConfig {
            db: self.db_config(db_override),
            queues: self.queues.clone(),
            session_channels: self.sessions.clone(),
            notice_routes: self.notice_routes(),
            claims: self.claimer,
            max_body_bytes: self.daemon.max_body_bytes,
            sweep_interval: self.daemon.sweep_interval,
            prune_interval: self.daemon.prune_interval,
            listen_for_wakes: true,
            mark_send_started: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relayq_engine::QueuePolicy;

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
        // The example tmux channel shows the tmux defaults.
        let tmux_defaults = Config::parse("[channels.p]\nkind = \"tmux\"\n", "t").unwrap();
        assert_eq!(parsed.channels["agent-pane"], tmux_defaults.channels["p"]);
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
    fn settings_that_would_break_the_daemon_are_refused_with_their_range() {
        let e = error("[queues.hooks]\nlease_timeout = \"5ms\"\n");
        assert!(
            e.starts_with(
                "c.toml: queues.hooks.lease_timeout: 5ms is out of range: between 1s and 1day"
            ),
            "{e}"
        );
        let e = error("[daemon]\nsweep_interval = \"0s\"\n");
        assert!(
            e.starts_with("c.toml: daemon.sweep_interval: 0s is out of range"),
            "{e}"
        );
        let e = error("[daemon]\nprune_interval = \"2ms\"\n");
        assert!(e.starts_with("c.toml: daemon.prune_interval:"), "{e}");
        let e = error("[channels.x]\nkind = \"exec\"\ncommand = [\"true\"]\ntimeout = \"0s\"\n");
        assert!(
            e.starts_with("c.toml: channels.x.timeout: 0s is out of range"),
            "{e}"
        );
        let e = error(
            "[channels.x]\nkind = \"file\"\npath = \"f\"\ntimeout = \"18446744073709551615s\"\n",
        );
        assert!(e.starts_with("c.toml: channels.x.timeout:"), "{e}");
        let e = error("[queues.inbound]\nmax_age = \"18446744073709551615s\"\n");
        assert!(e.starts_with("c.toml: queues.inbound.max_age:"), "{e}");
    }

    #[test]
    fn a_dead_retention_shorter_than_retention_is_warned_about() {
        assert!(Config::default().warnings().is_empty());
        let c = Config::parse("[queues.outbound]\ndead_retention = \"1d\"\n", "c.toml").unwrap();
        let w = c.warnings();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("queues.outbound.dead_retention (1day) is shorter"),
            "{w:?}"
        );
    }

    #[test]
    fn a_queue_setting_left_out_keeps_its_default() {
        let c = Config::parse("[queues.inbound]\nbackoff = [\"100ms\"]\n", "c.toml").unwrap();
        let p = c.queues.inbound.clone();
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
    fn each_queue_keeps_its_own_defaults_for_settings_left_out() {
        let c = Config::parse(
            "[queues.hooks]\nmax_attempts = 3\n[queues.outbound]\nmax_attempts = 0\n",
            "c.toml",
        )
        .unwrap();
        assert_eq!(
            c.queues.hooks,
            QueuePolicy {
                max_attempts: Some(3),
                ..QueuePolicy::hooks()
            }
        );
        assert_eq!(
            c.queues.outbound.max_attempts, None,
            "0 means never give up"
        );
        assert_eq!(c.queues.outbound.backoff, QueuePolicy::outbound().backoff);
    }

    #[test]
    fn routes_and_claimer_settings_are_checked() {
        let e = error("[routes]\ndefault = [{ channel = \"nope\", to = \"x\" }]\n");
        assert!(
            e.starts_with("c.toml: routes.default: names channel 'nope'"),
            "{e}"
        );
        let e = error("[routes.sessions]\ns1 = [{ channel = \"notices\", to = \"x\", events = [\"tool_use\"] }]\n");
        assert!(
            e.starts_with("c.toml: routes.sessions.s1: event ToolUse is not relayed"),
            "{e}"
        );
        let e = error("[routes]\ndefault = [{ channel = \"notices\", to = \"\" }]\n");
        assert!(e.contains("empty `to`"), "{e}");
        let e = error("[claimer]\nhook_buffer = 8\n");
        assert!(
            e.starts_with("c.toml: claimer.hook_buffer: must be larger than"),
            "{e}"
        );
        for threads in ["0", "17"] {
            let e = error(&format!("[claimer]\nsend_threads = {threads}\n"));
            assert_eq!(
                e,
                format!(
                    "c.toml: claimer.send_threads: {threads} is out of range: between 1 and 16"
                )
            );
        }
        let e = error("[channels.w]\nkind = \"webhook\"\nurl = \"localhost\"\n");
        assert!(e.starts_with("c.toml: channels.w.url: is not a URL"), "{e}");
        let c = Config::parse("[routes.sessions]\nquiet = []\n", "c.toml").unwrap();
        let routes = c.runtime_config(None).notice_routes;
        assert!(routes.for_session("quiet").is_empty());
        let default: Vec<_> = routes
            .for_session("other")
            .iter()
            .map(|r| (r.channel.as_deref(), r.to.as_str()))
            .collect();
        assert_eq!(default, [(None, "origin"), (Some(NOTICES_CHANNEL), "log")]);
        let e = error("[routes]\ndefault = [{ to = \"ops\" }]\n");
        assert!(
            e.starts_with("c.toml: routes.default: the route to 'ops' names no channel"),
            "{e}"
        );
    }

    #[test]
    fn a_telegram_source_answers_through_a_channel_made_from_its_own_settings() {
        let source = "[sources.mybot]\nkind = \"telegram\"\ntoken_env = \"T\"\nallowed_users = [1]\nchats = { \"1\" = \"agent\" }\n";
        let c = Config::parse(source, "c.toml").unwrap();
        match &c.channels["mybot"] {
            ChannelConfig::Telegram(bot) => assert_eq!(bot.token.token_env.as_deref(), Some("T")),
            other => panic!("{other:?}"),
        }
        let routes = c.notice_routes();
        assert_eq!(routes.replies["telegram:mybot"], "mybot");

        // A channel of that name in the file is kept; reply_channel names another.
        let own = format!("{source}[channels.mybot]\nkind = \"file\"\npath = \"x\"\n");
        let c = Config::parse(&own, "c.toml").unwrap();
        assert!(matches!(c.channels["mybot"], ChannelConfig::File(_)));
        let e = error("[sources.mybot]\nkind = \"telegram\"\ntoken_env = \"T\"\nchats = { \"1\" = \"agent\" }\n");
        assert!(
            e.starts_with("c.toml: sources.mybot.allowed_users: is required"),
            "{e}"
        );
    }

    #[test]
    fn session_overrides_route_to_their_channel() {
        let c = Config::parse(
            "[sessions.channels]\nalpha = \"tmux\"\n[channels.tmux]\nkind = \"tmux\"\n[channels.deliveries]\nkind = \"file\"\npath = \"d.jsonl\"\n",
            "c.toml",
        )
        .unwrap();
        let r = c.runtime_config(None).session_channels;
        assert_eq!(
            (r.channel_for("alpha"), r.channel_for("beta")),
            ("tmux", "deliveries")
        );
    }
}
