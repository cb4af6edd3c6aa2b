//! Log setup: human-readable lines on stderr; `RUST_LOG` overrides the level.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub fn init(default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
