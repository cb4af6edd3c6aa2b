//! The command line: arguments, and turning every error into one line for a person with the
//! right exit code (2: fix your input; 1: something failed at run time).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use relayq_engine::Agent;

use crate::commands;
use crate::config::Config;
use crate::invocation::{CliError, Invocation};

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
    /// Copy this SQLite database (rows with their states and attempts, sessions, origins,
    /// offsets, pauses, penalties, approvals) to a PostgreSQL database several daemons share.
    /// Refused while a daemon serves the file; safe to run again (what is there is kept)
    Migrate {
        /// The PostgreSQL database: postgresql://USER:PASSWORD@HOST/DATABASE
        #[arg(long, value_name = "URL")]
        to: String,
    },
    /// Write a message into a queue
    #[command(subcommand)]
    Enqueue(commands::enqueue::EnqueueCommand),
    /// Send files to the chat a session talks to (run in the agent's pane, or with --session):
    /// each checked, written down, and sent in order with the session's messages
    Send(commands::send::SendArgs),
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
    Session(commands::session::SessionCommand),
    /// Rows that gave up, in every queue: list, retry or purge them
    #[command(subcommand)]
    Dead(commands::dead::DeadCommand),
    /// Agents' permission questions: list them, or answer one (as the chat's buttons do)
    #[command(subcommand)]
    Approvals(commands::approvals::ApprovalsCommand),
    /// Who may write and approve beyond config.toml: people added by pairing (/pair in the chat)
    #[command(subcommand)]
    Users(commands::users::UsersCommand),
    /// Record an agent CLI hook event (configure this as the agent's hook command)
    Hook {
        #[arg(long)]
        agent: Agent,
        /// The payload, when passed as an argument (Codex `notify`); read from stdin otherwise
        payload: Option<String>,
    },
    /// Set relayq up for a chat platform (writes a config file)
    #[command(subcommand)]
    Init(commands::init::InitCommand),
    /// The effective configuration: check it (builds every channel and source as serve would)
    /// or show it (TOML, defaults written out, secrets masked)
    #[command(subcommand)]
    Config(commands::config::ConfigCommand),
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

/// Parses the arguments, runs the command, and maps the result to an exit code. Under `hook`
/// every failure exits 1: agent CLIs treat exit 2 as "block the agent".
pub fn main() -> ExitCode {
    let command = subcommand(std::env::args().skip(1));
    let is_hook = command.as_deref() == Some("hook");
    if !matches!(command.as_deref(), Some("serve" | "hook")) {
        quiet_on_a_closed_pipe();
    }
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

/// A command whose reader went away (`relayq status | grep -q ...`) ends quietly, as Unix
/// tools do, by the signal (Rust ignores SIGPIPE, so `println!` would panic instead). Not for
/// the daemon, whose sockets must not end it, nor for a hook, which must record its event.
fn quiet_on_a_closed_pipe() {
    // SAFETY: restores the default action of one signal before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
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
        Command::Init(commands::init::InitCommand::Telegram(args)) => {
            return commands::init::telegram(cli.config.as_deref(), args)
        }
        Command::Init(commands::init::InitCommand::Discord(args)) => {
            return commands::init::discord(cli.config.as_deref(), args)
        }
        Command::Completions { shell } => {
            return commands::generate::completions(Cli::command(), shell)
        }
        Command::Man => return commands::generate::man(Cli::command()),
        command => command,
    };
    let (config, config_file) = match Config::load(cli.config.as_deref()) {
        Ok(loaded) => loaded,
        // The agent's event is kept whatever the file says: a hook needs the database only.
        Err(e) if matches!(command, Command::Hook { .. }) => {
            let (config, file) = Config::database_only(cli.config.as_deref());
            let db = match config.database.is_shared() {
                true => "the PostgreSQL database it names".to_string(),
                false => config.db_path(cli.db.as_deref()).display().to_string(),
            };
            eprintln!(
                "relayq hook: the config is not valid, so only the database and the node name are taken from \
                 it{}: {e}; the event is recorded in {db}",
                if file.is_none() {
                    " (it names none: the default)"
                } else {
                    ""
                },
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
        Command::Enqueue(commands::enqueue::EnqueueCommand::Inbound(args)) => {
            commands::enqueue::inbound(&ctx, args)
        }
        Command::Enqueue(commands::enqueue::EnqueueCommand::Outbound(args)) => {
            commands::enqueue::outbound(&ctx, args)
        }
        Command::Send(args) => commands::send::run(&ctx, args),
        Command::Dead(command) => commands::dead::run(&ctx, command),
        Command::Approvals(command) => commands::approvals::run(&ctx, command),
        Command::Users(command) => commands::users::run(&ctx, command),
        Command::Config(commands::config::ConfigCommand::Check) => commands::config::check(&ctx),
        Command::Config(commands::config::ConfigCommand::Show) => commands::config::show(&ctx),
        Command::Session(commands::session::SessionCommand::List { json }) => {
            commands::session::list(&ctx, json)
        }
        Command::Session(commands::session::SessionCommand::New {
            project,
            agent,
            name,
            json,
        }) => commands::session::new(&ctx, &project, agent, name.as_deref(), json),
        Command::Session(commands::session::SessionCommand::Stop { session, json }) => {
            commands::session::stop(&ctx, &session, json)
        }
        Command::Status { json } => commands::status::run(&ctx, json),
        Command::Show { id, json } => commands::show::run(&ctx, id, json),
        Command::Session(commands::session::SessionCommand::Expire { session, json }) => {
            commands::session::expire(&ctx, &session, json)
        }
        Command::Prune {
            older_than,
            dead,
            json,
        } => commands::prune::run(&ctx, older_than, dead, json),
        Command::Hook { agent, payload } => commands::hook::run(&ctx, agent, payload),
        Command::Stop { timeout } => commands::stop::run(&ctx, timeout),
        Command::Migrate { to } => commands::migrate::run(&ctx, &to),
        Command::Init(_) | Command::Completions { .. } | Command::Man => {
            unreachable!("run before the config is read")
        }
    }
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
