//! Log setup: lines on stderr, human-readable (`--log-format text`, the default) or one JSON
//! object per line (`--log-format json`, for journald or a log collector). The level is
//! `info` unless `RELAYQ_LOG` (or, when that is unset, `RUST_LOG`) says otherwise, in
//! `EnvFilter` syntax: `debug`, `warn,relayq_actors=debug`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event, for people
    #[default]
    Text,
    /// One JSON object per event: `timestamp`, `level`, `target`, `message`, the event's
    /// fields, and the span it happened in (`row`, `channel`, `attempt` on the delivery path)
    Json,
}

/// The variables that set the level, first found wins.
pub const LEVEL_VARIABLES: [&str; 2] = ["RELAYQ_LOG", "RUST_LOG"];

pub fn init(default_level: &str, format: LogFormat) {
    let filter = LEVEL_VARIABLES
        .iter()
        .find_map(|var| Some((var, std::env::var(var).ok()?)))
        .and_then(|(var, spec)| match EnvFilter::try_new(&spec) {
            Ok(filter) => Some(filter),
            Err(e) => {
                eprintln!("relayq: ignoring {var}={spec:?} ({e}); logging at {default_level}");
                None
            }
        })
        .unwrap_or_else(|| EnvFilter::new(default_level));
    let lines = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => lines.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => lines
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
