//! The command line: arguments, and turning every error into one line for a person with the
//! right exit code (2: fix your input; 1: something failed at run time).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use relayq_engine::outbound::Kind;
use relayq_engine::{Agent, EngineError, MessageType};

use crate::commands;
use crate::config::{Config, ConfigError};

/// `relayq --version`: the release and the commit it was built from (see `build.rs`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("RELAYQ_BUILT_FROM"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "relayq",
    version = VERSION,
    about = "Durable, ordered, at-least-once delivery for chat-to-agent bridges"
)]
pub struct Cli {
    /// Configuration file [default: $RELAYQ_CONFIG, else ~/.config/relayq/config.toml if
    /// present, else built-in defaults]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Database file [default: $RELAYQ_DB, else database.path, else
    /// ~/.local/state/relayq/relayq.db]
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// How the daemon writes its log on stderr (the level: $RELAYQ_LOG, else $RUST_LOG, else
    /// info)
    #[arg(long, global = true, value_enum, default_value_t)]
    pub log_format: crate::logging::LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground until SIGINT or SIGTERM (or `relayq stop`)
    Serve,
    /// Stop the daemon serving this database: SIGTERM, then wait until it has finished its
    /// in-flight deliveries and exited
    Stop {
        /// How long to wait [default: daemon.shutdown_grace + 5s]
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        timeout: Option<Duration>,
    },
    /// Write a message into a queue
    #[command(subcommand)]
    Enqueue(EnqueueCommand),
    /// Row counts per queue and state, the oldest pending row, and stuck rows with their errors
    Status {
        #[arg(long)]
        json: bool,
    },
    /// One row's story: queue, state, attempts, last error, next attempt, lease holder
    Show {
        /// The row id (as enqueue, status or dead list print it)
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Session operations
    #[command(subcommand)]
    Session(SessionCommand),
    /// Rows that gave up, in every queue: list, retry or purge them
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Agents' permission questions: list them, or answer one (as the chat's buttons do)
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Record an agent CLI hook event (configure this as the agent's hook command)
    Hook {
        #[arg(long, value_parser = parse_agent)]
        agent: Agent,
        /// The payload, when passed as an argument (Codex `notify`); read from stdin otherwise
        payload: Option<String>,
    },
    /// Set relayq up for a chat platform (writes a config file)
    #[command(subcommand)]
    Init(InitCommand),
    /// The effective configuration: check it (builds every channel and source as serve would)
    /// or show it (TOML, defaults written out, secrets masked)
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print a shell completion script, e.g. `relayq completions bash >
    /// ~/.local/share/bash-completion/completions/relayq`
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `relayq man > ~/.local/share/man/man1/relayq.1`
    Man,
    /// Delete delivered and expired rows past retention (or older than --older-than), and dead
    /// rows past dead_retention
    Prune {
        /// e.g. 1h, 7d
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        older_than: Option<Duration>,
        /// Apply --older-than to dead rows too (they are kept for dead_retention otherwise)
        #[arg(long)]
        dead: bool,
        /// Print {"pruned":N}
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum InitCommand {
    /// A Telegram bot to an agent in tmux: writes the config file (--config, $RELAYQ_CONFIG,
    /// else ~/.config/relayq/config.toml) and prints the hook snippet and what to run next
    Telegram(InitTelegramArgs),
}

#[derive(Debug, clap::Args)]
pub struct InitTelegramArgs {
    /// Your Telegram user id, the only one whose messages reach the agent (ask @userinfobot)
    #[arg(long, allow_hyphen_values = true)]
    pub user: i64,
    /// The chat that talks to the agent [default: your private chat with the bot, whose id is
    /// your user id]; a group's id is negative (-100...)
    #[arg(long, allow_hyphen_values = true)]
    pub chat: Option<i64>,
    /// The relayq session, which is also the tmux session the agent runs in
    #[arg(long, default_value = "my-agent")]
    pub session: String,
    /// The environment variable that holds the bot token
    #[arg(long, default_value = "TELEGRAM_BOT_TOKEN")]
    pub token_env: String,
    /// The agent CLI whose hook snippet to print
    #[arg(long, default_value = "claude", value_parser = parse_agent)]
    pub agent: Agent,
    /// Replace the config file if it exists
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check that the configuration works here: parse it, build every channel and source
    Check,
    /// Print the effective configuration (file, then RELAYQ_* variables) as TOML
    Show,
}

#[derive(Debug, Subcommand)]
pub enum EnqueueCommand {
    /// A chat message for an agent session
    Inbound(InboundArgs),
    /// A message for a chat platform or webhook, sent through a configured channel
    Outbound(OutboundArgs),
}

#[derive(Debug, clap::Args)]
pub struct OutboundArgs {
    /// The configured channel that sends it ([channels.NAME])
    #[arg(long)]
    pub channel: String,
    /// Where on the channel: a chat id (a Telegram group's is negative: --to -100123), a
    /// user, a channel
    #[arg(long, allow_hyphen_values = true)]
    pub to: String,
    /// Post in this thread of the destination (a Telegram forum topic id, a Slack thread_ts)
    #[arg(long)]
    pub thread: Option<String>,
    /// Answer this message of the destination (its platform id, e.g. a Telegram message_id)
    #[arg(long)]
    pub reply_to: Option<String>,
    #[arg(long, default_value = "final", value_parser = parse_kind)]
    pub kind: Kind,
    /// Sent to the far end; a second enqueue with the same key on the channel is not written
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Print {"id":N,"duplicate":bool}
    #[arg(long)]
    pub json: bool,
    /// The message text, or - to read it from stdin
    pub text: String,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// The open questions (newest first); --all for the answered ones too
    List {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Allow the tool call approval ID asks for (--session: and the like, for the agent's session)
    Allow {
        id: String,
        #[arg(long)]
        session: bool,
        #[arg(long)]
        json: bool,
    },
    /// Deny the tool call approval ID asks for
    Deny {
        id: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// Show dead rows, oldest first
    List {
        #[arg(long)]
        json: bool,
        /// Only this queue (inbound, hooks, outbound)
        #[arg(long, value_parser = parse_queue)]
        queue: Option<relayq_engine::QueueName>,
        /// Only rows of this key (a session, or an outbound destination as the list shows it)
        #[arg(long, allow_hyphen_values = true)]
        key: Option<String>,
        /// Only rows whose reason or last error contains this text
        #[arg(long)]
        reason: Option<String>,
        /// Only rows that died longer ago than this (e.g. 1h, 2d)
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        older_than: Option<Duration>,
    },
    /// Make dead rows pending again, with a fresh attempt count; a destination's rows go in
    /// their original order, and a row whose later messages were already delivered is refused
    /// unless --force
    Retry {
        #[command(flatten)]
        selection: Selection,
        /// Replay rows whose later messages were already delivered (they arrive out of order)
        #[arg(long)]
        force: bool,
        /// Print {"count":N,"ids":[...]}
        #[arg(long)]
        json: bool,
    },
    /// Delete dead rows
    Purge {
        #[command(flatten)]
        selection: Selection,
        /// Say which rows would be deleted, and delete nothing
        #[arg(long)]
        dry_run: bool,
        /// Print {"dry_run":bool,"count":N,"ids":[...]}
        #[arg(long)]
        json: bool,
    },
}

/// Row ids, or --all, or filters (which combine: rows that match every one given).
#[derive(Debug, clap::Args)]
#[group(id = "which", required = true, multiple = true)]
pub struct Selection {
    /// Row ids (as `relayq dead list` shows them)
    #[arg(group = "which", conflicts_with_all = ["all", "queue", "key", "reason", "older_than"])]
    pub ids: Vec<i64>,
    /// Every dead row
    #[arg(long, group = "which")]
    pub all: bool,
    /// Only rows of this queue (inbound, hooks, outbound)
    #[arg(long, group = "which", value_parser = parse_queue)]
    pub queue: Option<relayq_engine::QueueName>,
    /// Only rows of this key (a session, or an outbound destination as `dead list` shows it)
    #[arg(long, group = "which", allow_hyphen_values = true)]
    pub key: Option<String>,
    /// Only rows whose reason or last error contains this text
    #[arg(long, group = "which")]
    pub reason: Option<String>,
    /// Only rows that died longer ago than this (e.g. 1h, 2d)
    #[arg(long, group = "which", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub older_than: Option<Duration>,
}

#[derive(Debug, clap::Args)]
pub struct InboundArgs {
    /// The agent session to deliver to
    #[arg(long, allow_hyphen_values = true)]
    pub session: String,
    /// Where the message came from (telegram, discord, terminal, ...)
    #[arg(long)]
    pub origin: String,
    /// The platform's message id: a second enqueue with the same origin, chat and id is not
    /// written (Telegram: message_id; Discord: the message id; Slack: the message ts)
    #[arg(long, allow_hyphen_values = true)]
    pub source_id: Option<String>,
    /// The chat the message came from, part of the dedup key: Telegram message ids and Slack
    /// ts are unique per chat only (Telegram: chat.id; Discord: channel_id; Slack: channel)
    #[arg(long, allow_hyphen_values = true)]
    pub source_channel_id: Option<String>,
    /// The thread in that chat (Telegram: message_thread_id; Slack: thread_ts); with the chat,
    /// it becomes the session's origin, where `to = "origin"` notices go
    #[arg(long, allow_hyphen_values = true)]
    pub source_thread_id: Option<String>,
    #[arg(long = "type", default_value = "text", value_parser = parse_type)]
    pub message_type: MessageType,
    #[arg(long)]
    pub actor_id: Option<String>,
    #[arg(long)]
    pub actor_name: Option<String>,
    /// Extra JSON handed to the channel with the message
    #[arg(long, value_name = "JSON")]
    pub payload: Option<String>,
    /// Print {"id":N,"duplicate":bool}
    #[arg(long)]
    pub json: bool,
    /// The message text, or - to read it from stdin
    pub text: String,
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Expire a session's pending messages (the session is gone)
    Expire {
        session: String,
        /// Print {"session":S,"expired":N}
        #[arg(long)]
        json: bool,
    },
    /// The session registry kept by hook events
    List {
        #[arg(long)]
        json: bool,
    },
}

fn parse_agent(s: &str) -> Result<Agent, String> {
    s.parse()
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    s.parse().map_err(|e: EngineError| e.to_string())
}

fn parse_type(s: &str) -> Result<MessageType, String> {
    s.parse().map_err(|e: EngineError| e.to_string())
}

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
            A::Invalid(_) | A::AlreadyRunning(_) => CliError::Usage(e.to_string()),
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
        let db = self.config.db_config(self.db.as_deref());
        if let Some(pid) = crate::pid_file::daemon_of_deleted(&db.path) {
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
        let db = self.config.db_config(self.db.as_deref());
        if !db.path.exists() {
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

/// Parses the arguments, runs the command, and maps the result to an exit code. Under `hook`
/// every failure exits 1: agent CLIs treat exit 2 as "block the agent".
pub fn main() -> ExitCode {
    let is_hook = subcommand(std::env::args().skip(1)).as_deref() == Some("hook");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if is_hook && e.use_stderr() => {
            let first = e.to_string().lines().next().unwrap_or_default().to_string();
            eprintln!("relayq hook: {}", first.trim_start_matches("error: "));
            return ExitCode::from(1);
        }
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relayq{}: error: {e}", if is_hook { " hook" } else { "" });
            ExitCode::from(match e {
                _ if is_hook => 1,
                CliError::Usage(_) => 2,
                CliError::Failed(_) => 1,
                CliError::Full(_) => 3,
            })
        }
    }
}

/// The first argument that is not a global option or its value.
fn subcommand(mut args: impl Iterator<Item = String>) -> Option<String> {
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--config" | "--db" | "--log-format" => {
                args.next();
            }
            a if ["--config=", "--db=", "--log-format="]
                .iter()
                .any(|o| a.starts_with(o)) => {}
            a => return Some(a.to_string()),
        }
    }
    None
}

fn run(cli: Cli) -> Result<(), CliError> {
    // These need no config: `init` writes one, the others print what the CLI is.
    let command = match cli.command {
        Command::Init(InitCommand::Telegram(args)) => {
            return commands::init::telegram(cli.config.as_deref(), args)
        }
        Command::Completions { shell } => return commands::generate::completions(shell),
        Command::Man => return commands::generate::man(),
        command => command,
    };
    let (config, config_file) =
        match Config::load(cli.config.as_deref()) {
            Ok(loaded) => loaded,
            // The agent's event is kept whatever the file says: a hook needs the database only.
            Err(e) if matches!(command, Command::Hook { .. }) => {
                let (config, file) = Config::database_only(cli.config.as_deref());
                let db = config.db_path(cli.db.as_deref());
                eprintln!(
                "relayq hook: the config is not valid, so only the database path is taken from \
                 it{}: {e}; the event is recorded in {}",
                if file.is_none() { " (it names none: the default)" } else { "" },
                db.display()
            );
                (config, file)
            }
            Err(e) => return Err(e.into()),
        };
    let ctx = Invocation {
        config,
        config_file,
        db: cli.db,
        log_format: cli.log_format,
    };
    match command {
        Command::Serve => commands::serve::run(&ctx),
        Command::Enqueue(EnqueueCommand::Inbound(args)) => commands::enqueue::inbound(&ctx, args),
        Command::Enqueue(EnqueueCommand::Outbound(args)) => commands::enqueue::outbound(&ctx, args),
        Command::Dead(command) => commands::dead::run(&ctx, command),
        Command::Approvals(command) => commands::approvals::run(&ctx, command),
        Command::Config(ConfigCommand::Check) => commands::config::check(&ctx),
        Command::Config(ConfigCommand::Show) => commands::config::show(&ctx),
        Command::Session(SessionCommand::List { json }) => commands::session::list(&ctx, json),
        Command::Status { json } => commands::status::run(&ctx, json),
        Command::Show { id, json } => commands::show::run(&ctx, id, json),
        Command::Session(SessionCommand::Expire { session, json }) => {
            commands::session::expire(&ctx, &session, json)
        }
        Command::Prune {
            older_than,
            dead,
            json,
        } => commands::prune::run(&ctx, older_than, dead, json),
        Command::Hook { agent, payload } => commands::hook::run(&ctx, agent, payload),
        Command::Stop { timeout } => commands::stop::run(&ctx, timeout),
        Command::Init(_) | Command::Completions { .. } | Command::Man => {
            unreachable!("run before the config is read")
        }
    }
}

/// A queue name, refused with the names there are.
fn parse_queue(name: &str) -> Result<relayq_engine::QueueName, String> {
    name.parse()
        .map_err(|e: relayq_engine::EngineError| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::subcommand;

    #[test]
    fn the_subcommand_is_found_past_global_options_only() {
        let sub = |args: &[&str]| subcommand(args.iter().map(|s| s.to_string()));
        assert_eq!(sub(&["--db", "hook", "status"]).as_deref(), Some("status"));
        assert_eq!(
            sub(&["--config=c.toml", "hook", "--agent", "x"]).as_deref(),
            Some("hook")
        );
        assert_eq!(
            sub(&["enqueue", "inbound", "hook"]).as_deref(),
            Some("enqueue")
        );
    }
}
