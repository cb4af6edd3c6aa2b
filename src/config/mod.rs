//! `config.toml`: every setting, its default, and checks whose errors name the file, the key
//! and what is expected. The repo-root `config.toml` lists every setting with its default and
//! is parsed by a test, so it cannot drift from this file.

mod daemon;
mod env;
mod paths;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use relayq_actors::channels::file;
use relayq_actors::kit::secret::Secret;
use relayq_actors::pacing::PaceSettings;
use relayq_actors::sources::SourceConfig;
use relayq_actors::{ChannelConfig, ClaimSettings, RelayqConfig, SessionChannels};
use relayq_engine::settings::SettingError;
use relayq_engine::{DbConfig, NoticeRoutes, QueuePolicies};
use serde::{Deserialize, Serialize};

pub use daemon::{DaemonConfig, DatabaseConfig, NodeConfig};
pub use env::{settings_from_env, EnvSetting, SETTING_ENV_PREFIX};
use paths::flag_or_env;
use paths::{database_key_in, database_path_in};
pub use paths::{named_config_file, state_dir, user_config_file, CONFIG_ENV, DB_ENV};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub database: DatabaseConfig,
    /// `[node]`: this daemon's name among the daemons sharing a PostgreSQL database.
    pub node: NodeConfig,
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
    /// `[projects.NAME]`: where chats may start agent sessions (`/new`), and how.
    pub projects: BTreeMap<String, relayq_actors::launcher::Project>,
    /// `[files]`: where a chat message's files go, and how they are fetched.
    pub files: relayq_actors::files::FileSettings,
    /// `[transcription]`: the server that turns voice notes into words; not set: the agent
    /// gets the recording's path.
    pub transcription: Option<relayq_actors::files::TranscriptionSettings>,
}

/// The built-in channels: every session's messages, and the notices, each appended to a
/// JSON-lines file.
pub use relayq_actors::channels::{DELIVERIES_CHANNEL as DEFAULT_CHANNEL, NOTICES_CHANNEL};

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
            node: NodeConfig::default(),
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
            projects: BTreeMap::new(),
            files: Default::default(),
            transcription: None,
        }
    }
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
    let hint = match message {
        m if m.contains("expected a duration") || m.contains("expected a humantime") => {
            "; write a duration as a quoted number with its unit, e.g. \"5s\", \"500ms\" or \"2m\""
        }
        m if m.starts_with("invalid type: string") && m.contains("expected i64")
            || m.contains("expected u64")
            || m.contains("expected u32")
            || m.contains("expected an integer") =>
        {
            "; write the number without quotes, e.g. 123456789"
        }
        m if m.starts_with("invalid type: string") && m.contains("expected a sequence") => {
            "; write a list in brackets, e.g. [\"claude\"]"
        }
        m if m.starts_with("invalid type: integer") && m.contains("expected a string") => {
            "; write it in quotes, e.g. \"123\""
        }
        _ => "",
    };
    format!("{message}{hint}")
}

/// A deserialising error at a channel's or a source's table (`channels.NAME`) says no key: the
/// table is read whole, as the kind its `kind` names. Reads it again as that kind alone, for
/// the key at fault and what is wrong with it; anything else is answered as it came.
fn within_kind(whole: &toml::Value, key: String, message: String) -> (String, String) {
    let parts: Vec<&str> = key.split('.').collect();
    let [registry @ ("channels" | "sources"), name] = parts[..] else {
        return (key, message);
    };
    let Some(mut table) = whole
        .get(registry)
        .and_then(|r| r.get(name))
        .and_then(toml::Value::as_table)
        .cloned()
    else {
        return (key, message);
    };
    let Some(toml::Value::String(kind)) = table.remove("kind") else {
        return (key, message);
    };
    /// Reads `table` as the kind's settings; answers the error's path and message.
    struct Again(toml::Table);
    impl relayq_actors::settings::WithKind for Again {
        type Out = Option<(String, String)>;
        fn with<T: serde::de::DeserializeOwned>(self) -> Self::Out {
            let failed = serde_path_to_error::deserialize::<_, T>(toml::Value::Table(self.0));
            let e = failed.err()?;
            Some((e.path().to_string(), e.into_inner().message().to_string()))
        }
    }
    let again = match registry {
        "channels" => ChannelConfig::with_kind(&kind, Again(table.clone())),
        _ => SourceConfig::with_kind(&kind, Again(table.clone())),
    };
    match again.flatten() {
        Some((path, why)) if !path.is_empty() && path != "." => (format!("{key}.{path}"), why),
        // Settings a kind shares with others (`#[serde(flatten)]`) are read whole again: the
        // key is the one whose value the message quotes, when only one has it.
        Some((_, why)) => match key_holding(&table, &why) {
            Some(at) => (format!("{key}.{at}"), why),
            None => (key, why),
        },
        None => (key, message),
    }
}

/// The one key of `table` whose value (or an item of it) is the value `message` quotes
/// (`invalid type: string "123"`, `integer `5``).
fn key_holding(table: &toml::Table, message: &str) -> Option<String> {
    let quoted = |start: &str, end: char| {
        let at = message.find(start)? + start.len();
        let rest = &message[at..];
        Some(rest[..rest.find(end)?].to_string())
    };
    let wanted: toml::Value = match (quoted("string \"", '"'), quoted("integer `", '`')) {
        (Some(text), _) => toml::Value::String(text),
        (None, Some(number)) => toml::Value::Integer(number.parse().ok()?),
        _ => return None,
    };
    let holds = |v: &toml::Value| match v {
        toml::Value::Array(items) => items.contains(&wanted),
        v => *v == wanted,
    };
    let mut keys = table
        .iter()
        .filter(|(_, v)| holds(v))
        .map(|(k, _)| k.clone());
    let key = keys.next()?;
    keys.next().is_none().then_some(key)
}

fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> Option<String> {
    span.map(|s| {
        format!(
            "line {}",
            text[..s.start.min(text.len())].lines().count().max(1)
        )
    })
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
    /// Finds and reads the configuration: `path` (`--config`), else `$RELAYQ_CONFIG`, else the
    /// per-user file when it exists, else the built-in defaults. Relative paths in it are
    /// resolved against the file's directory (the state directory for the defaults). Returns
    /// the file read, if any.
    pub fn load(path: Option<&Path>) -> Result<(Config, Option<PathBuf>), ConfigError> {
        let user_file = user_config_file();
        let path =
            flag_or_env(path, CONFIG_ENV).or_else(|| user_file.exists().then_some(user_file));
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
        let file = named_config_file(path);
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let named = database_path_in(&text);
        let base = file.parent().unwrap_or(Path::new("/"));
        config.database.path = named.as_ref().map(|p| base.join(p));
        // A PostgreSQL database, as the environment or the file says it.
        let database = &mut config.database;
        match std::env::var("RELAYQ_DATABASE__URL")
            .ok()
            .filter(|u| !u.is_empty())
        {
            Some(url) => database.url = Some(Secret::new(url)),
            None => {
                database.url = database_key_in(&text, "url").map(Secret::new);
                database.url_env = database_key_in(&text, "url_env");
                database.url_file = database_key_in(&text, "url_file").map(|f| base.join(f));
            }
        }
        config.node.name = std::env::var("RELAYQ_NODE__NAME")
            .ok()
            .or_else(|| paths::key_in(&text, "node", "name"));
        let told = named.is_some() || config.database.is_shared();
        (config, told.then_some(file))
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
        if let Some(file) = &mut self.database.url_file {
            resolve(file);
        }
        for channel in self.channels.values_mut() {
            channel.resolve_paths(base);
        }
        for source in self.sources.values_mut() {
            source.resolve_paths(base);
        }
        for project in self.projects.values_mut() {
            project.resolve_paths(base);
        }
        if let Some(transcription) = &mut self.transcription {
            transcription.token.resolve_paths(base);
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
        let whole = toml::Value::Table(table);
        let config: Config = serde_path_to_error::deserialize(whole.clone())
            .map_err(|e| {
                let path = e.path().to_string();
                let message = e.into_inner().message().to_string();
                let (key, message) = within_kind(&whole, path, message);
                ConfigError {
                    file: file.into(),
                    key: if key.is_empty() || key == "." {
                        "(top level)".into()
                    } else {
                        key
                    },
                    message: explained(&message),
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
            let whole = text.parse::<toml::Table>().map(toml::Value::Table);
            let (key, message) = match whole {
                Ok(whole) => within_kind(&whole, key, inner.message().to_string()),
                Err(_) => (key, inner.message().to_string()),
            };
            ConfigError {
                file: file.into(),
                key,
                message: explained(&message),
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

    /// Checks that parsing alone cannot: each settings type checks itself (its errors' keys
    /// put inside its table here), then what spans tables: references to channels, the HTTP
    /// API that pushed sources need, a body limit the API can take.
    fn check(&self, file: &str) -> Result<(), ConfigError> {
        self.checked().map_err(|e| ConfigError {
            file: file.into(),
            key: e.key,
            message: e.message,
        })
    }

    fn checked(&self) -> Result<(), SettingError> {
        let table = |name: &str| {
            let name = name.to_string();
            move |e: SettingError| e.within(&name)
        };
        for (name, source) in &self.sources {
            if source.pushed() && !self.http.enabled {
                return Err(SettingError::new(
                    format!("sources.{name}.mode"),
                    "takes pushes from its platform at the HTTP API (POST /v1/ingress/NAME), which is off: set [http] enabled = true",
                ));
            }
        }
        self.queues.check().map_err(table("queues"))?;
        self.http.check().map_err(table("http"))?;
        if self.http.max_request_bytes < self.daemon.max_body_bytes {
            return Err(SettingError::new(
                "http.max_request_bytes",
                format!(
                    "{} is less than daemon.max_body_bytes ({}): a message the CLI takes would \
                     be refused over HTTP; raise it to at least that",
                    self.http.max_request_bytes, self.daemon.max_body_bytes
                ),
            ));
        }
        self.daemon.check().map_err(table("daemon"))?;
        self.database.check().map_err(table("database"))?;
        self.node.check().map_err(table("node"))?;
        self.approvals.check().map_err(table("approvals"))?;
        self.files.check().map_err(table("files"))?;
        if let Some(transcription) = &self.transcription {
            transcription.check().map_err(table("transcription"))?;
        }
        self.claimer.check().map_err(table("claimer"))?;
        // Every reference to a channel, checked the one way: it names a [channels.NAME] table.
        let named = |key: &str, channel: &str| match self.channel(channel) {
            Ok(_) => Ok(()),
            Err(_) => {
                let known: Vec<&str> = self.channels.keys().map(String::as_str).collect();
                Err(SettingError::new(key, format!("names channel '{channel}', which has no [channels.{channel}] table (configured: {})", known.join(", "))))
            }
        };
        named("sessions.default_channel", &self.sessions.default_channel)?;
        for (session, channel) in &self.sessions.channels {
            named(&format!("sessions.channels.{session}"), channel)?;
        }
        self.routes.check(named).map_err(table("routes"))?;
        for (name, channel) in &self.channels {
            channel
                .check()
                .map_err(table(&format!("channels.{name}")))?;
        }
        for name in self.pacing.keys() {
            named(&format!("pacing.{name}"), name)?;
        }
        for (name, source) in &self.sources {
            source.check().map_err(table(&format!("sources.{name}")))?;
        }
        for (name, project) in &self.projects {
            project.check(name).map_err(|e| match e.key.is_empty() {
                true => SettingError::new(format!("projects.{name}"), e.message),
                false => e.within(&format!("projects.{name}")),
            })?;
        }
        if !self.projects.is_empty() && self.tmux_socket().is_none() {
            return Err(SettingError::new(
                "sessions.default_channel",
                format!(
                    "names channel '{}', which is not a tmux channel: the sessions [projects] \
                     start are typed into tmux; set it to a [channels.NAME] of kind = \"tmux\"",
                    self.sessions.default_channel
                ),
            ));
        }
        Ok(())
    }

    /// The tmux server of the sessions' default channel, when it is a tmux channel: where
    /// sessions started from a chat run (`Some(None)`: tmux's default server).
    pub fn tmux_socket(&self) -> Option<Option<String>> {
        match self.channel(&self.sessions.default_channel).ok()? {
            ChannelConfig::Tmux(tmux) => Some(tmux.socket_name.clone()),
            _ => None,
        }
    }

    /// What the launcher needs: the projects, the tmux server, and what an agent's hooks need
    /// to reach this database from the agent's environment (`config_file`, the daemon's
    /// `RELAYQ_*` settings, the database's URL variable, `PATH`).
    pub fn launch_settings(
        &self,
        config_file: Option<&Path>,
        db: &DbConfig,
    ) -> relayq_actors::launcher::LaunchSettings {
        let mut hook_env: Vec<(String, String)> = std::env::vars()
            .filter(|(var, _)| var.starts_with(SETTING_ENV_PREFIX) && var.contains("__"))
            .collect();
        if let Some(file) = config_file {
            hook_env.push((CONFIG_ENV.into(), file.display().to_string()));
        }
        if db.url.is_none() {
            hook_env.push((DB_ENV.into(), db.path.display().to_string()));
        }
        let passed = [self.database.url_env.clone(), Some("PATH".to_string())];
        for var in passed.into_iter().flatten() {
            if let Ok(value) = std::env::var(&var) {
                hook_env.push((var, value));
            }
        }
        relayq_actors::launcher::LaunchSettings {
            projects: self.projects.clone(),
            socket: self.tmux_socket().flatten(),
            hook_env,
            ..Default::default()
        }
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
        flag_or_env(db_override, DB_ENV)
            .or_else(|| self.database.path.clone())
            .unwrap_or_else(|| state_dir().join("relayq.db"))
    }

    /// The database settings, with the path as [`Config::db_path`] finds it and the
    /// PostgreSQL URL read from where the settings say (an error names its key).
    pub fn db_config(&self, db_override: Option<&Path>) -> Result<DbConfig, SettingError> {
        Ok(DbConfig {
            path: self.db_path(db_override),
            url: self.database.url().map_err(|e| e.within("database"))?,
            synchronous: self.database.synchronous,
            busy_timeout: self.database.busy_timeout,
            readers: self.database.readers,
        })
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
        routes.progress = self
            .progress_settings()
            .into_iter()
            .map(|(origin, settings)| (origin, settings.mode))
            .collect();
        routes.limits = self
            .channels
            .iter()
            .filter_map(|(name, channel)| Some((name.clone(), channel.text_limit()?)))
            .collect();
        routes
    }

    /// What the actor system needs, on database `db` (see [`Config::db_config`]).
    pub fn runtime_config(&self, db: DbConfig) -> RelayqConfig {
        RelayqConfig {
            db,
            node: self.node.name(),
            clock_offset_ms: 0,
            queues: self.queues.clone(),
            session_channels: self.sessions.clone(),
            notice_routes: self.notice_routes(),
            claims: self.claimer,
            max_body_bytes: self.daemon.max_body_bytes,
            sweep_interval: self.daemon.sweep_interval,
            prune_interval: self.daemon.prune_interval,
            listen_for_wakes: true,
            mark_send_started: true,
            launch: Default::default(),
            progress: self.progress_settings(),
            files: relayq_actors::files::FilesConfig {
                settings: self.files.clone(),
                sources: self
                    .sources
                    .iter()
                    .filter_map(|(name, source)| source.files(name))
                    .collect(),
                transcription: self.transcription.clone(),
                limits: self
                    .channels
                    .iter()
                    .filter_map(|(name, channel)| Some((name.clone(), channel.file_limit()?)))
                    .collect(),
            },
        }
    }

    /// What each chat source shows while its agents work, by origin.
    pub fn progress_settings(&self) -> relayq_actors::progress::ProgressSettingsByOrigin {
        self.sources
            .iter()
            .filter_map(|(name, source)| source.replies(name))
            .filter_map(|r| Some((r.origin, r.progress?)))
            .collect()
    }
}

#[cfg(test)]
mod tests;
