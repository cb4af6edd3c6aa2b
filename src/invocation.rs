//! What every command runs with: the loaded configuration and the database it names, and the
//! error on its way to the user (each kind with its exit code).

use std::path::PathBuf;

use relayq_engine::EngineError;

use crate::config::{Config, ConfigError};

/// An error on its way to the user.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The input must change: bad arguments, config, path. Exit 2.
    #[error("{0}")]
    Usage(String),
    /// Something failed while running. Exit 1.
    #[error("{0}")]
    Failed(String),
    /// The queue is full (`max_depth`, `max_key_depth`): nothing was written; try later. Exit 3.
    #[error("{0}")]
    Full(String),
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> Self {
        CliError::Usage(format!("invalid configuration: {e}"))
    }
}

impl From<EngineError> for CliError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Invalid(_) | EngineError::Open { .. } => CliError::Usage(e.to_string()),
            EngineError::QueueFull { .. } => CliError::Full(e.to_string()),
            EngineError::Connect {
                waiting_helps: true,
                ..
            } => CliError::Failed(format!(
                "{e} (is PostgreSQL up and listening there? try again once it is)"
            )),
            EngineError::Connect { .. } => CliError::Failed(format!(
                "{e} (check the database URL: its host, port, role, password and database name)"
            )),
            EngineError::Postgres(_) if e.is_busy() => CliError::Failed(format!(
                "{e} (PostgreSQL is restarting, unreachable or held up; try again)"
            )),
            e if e.is_busy() => CliError::Failed(format!(
                "{e} (another process holds the database; try again)"
            )),
            e => CliError::Failed(e.to_string()),
        }
    }
}

impl From<relayq_actors::ActorError> for CliError {
    fn from(e: relayq_actors::ActorError) -> Self {
        use relayq_actors::ActorError as A;
        match e {
            A::Engine(e) => e.into(),
            A::Invalid(_) | A::AlreadyRunning(_) | A::NodeFilesInUse(_) => {
                CliError::Usage(e.to_string())
            }
            e => CliError::Failed(e.to_string()),
        }
    }
}

/// What every command gets: the loaded configuration, the file it came from, and the `--db`
/// override.
pub struct Invocation {
    pub config: Config,
    pub config_file: Option<PathBuf>,
    pub db: Option<PathBuf>,
    pub log_format: crate::logging::LogFormat,
}

impl Invocation {
    /// The database settings, for a command that writes: the default state directory is
    /// created (0700) if it does not exist yet.
    pub fn db_config(&self) -> Result<relayq_engine::DbConfig, CliError> {
        let db = self.database()?;
        let file = db.url.is_none();
        if let Some(pid) = crate::pid_file::daemon_of_deleted(&db.path).filter(|_| file) {
            return Err(CliError::Failed(crate::pid_file::deleted_under(
                &db.path, pid,
            )));
        }
        if db.path.parent() == Some(crate::config::state_dir().as_path()) {
            ensure_state_dir()?;
        }
        Ok(db)
    }

    /// The database settings, for a command that only reads: a database that does not exist
    /// is said to be missing, not created empty.
    pub fn existing_db_config(&self) -> Result<relayq_engine::DbConfig, CliError> {
        let db = self.database()?;
        if db.url.is_none() && !db.path.exists() {
            return Err(CliError::Usage(format!(
                "no database at {}: nothing was written there yet, or it is not the daemon's \
                 (set by --db, ${}, database.path in {}, else the default in {})",
                db.path.display(),
                crate::config::DB_ENV,
                self.config_file
                    .as_ref()
                    .map_or("the config file".into(), |f| f.display().to_string()),
                crate::config::state_dir().display()
            )));
        }
        Ok(db)
    }
}

impl Invocation {
    /// The database settings as the config says; a URL that cannot be read is the config's
    /// error.
    fn database(&self) -> Result<relayq_engine::DbConfig, CliError> {
        self.config.db_config(self.db.as_deref()).map_err(|e| {
            CliError::from(crate::config::ConfigError {
                file: self
                    .config_file
                    .as_ref()
                    .map_or("(built-in defaults)".into(), |f| f.display().to_string()),
                key: e.key,
                message: e.message,
            })
        })
    }
}

/// Creates the state directory (0700) if it does not exist: the default home of the database
/// and of the built-in channels' files.
pub fn ensure_state_dir() -> Result<(), CliError> {
    use std::os::unix::fs::DirBuilderExt;
    let state = crate::config::state_dir();
    if state.exists() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&state)
        .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", state.display())))
}
