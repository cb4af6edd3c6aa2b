//! `relayq completions SHELL` and `relayq man`: generated from the command line's definition
//! (clap), so they never disagree with `relayq --help`.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::{Cli, CliError};

/// Prints the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<(), CliError> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "relayq", &mut script);
    print(&script)
}

/// Prints the manual page (roff) on stdout.
pub fn man() -> Result<(), CliError> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .map_err(|e| CliError::Failed(format!("cannot write the manual page: {e}")))?;
    print(&page)
}

/// Written whole; a reader that stops early (`| head`) is not an error.
fn print(text: &[u8]) -> Result<(), CliError> {
    match std::io::stdout().write_all(text) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::Failed(format!("cannot write to stdout: {e}")))
        }
        _ => Ok(()),
    }
}
