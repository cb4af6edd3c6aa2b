//! `relayq completions SHELL` and `relayq man`: generated from the command line's definition
//! (clap), so they never disagree with `relayq --help`.

use std::io::Write;

use crate::invocation::CliError;

/// Prints the completion script for `shell` on stdout, for the command line `cli`.
pub fn completions(mut cli: clap::Command, shell: clap_complete::Shell) -> Result<(), CliError> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli, "relayq", &mut script);
    print(&script)
}

/// Prints the manual page (roff) on stdout: one page with every command in it. (clap_mangen's
/// subcommands section points at `relayq-serve(1)` and the like, pages no one installs.)
pub fn man(command: clap::Command) -> Result<(), CliError> {
    let failed = |e: std::io::Error| CliError::Failed(format!("cannot write the manual page: {e}"));
    let man = clap_mangen::Man::new(command.clone());
    let mut page = Vec::new();
    man.render_title(&mut page).map_err(failed)?;
    man.render_name_section(&mut page).map_err(failed)?;
    man.render_synopsis_section(&mut page).map_err(failed)?;
    man.render_description_section(&mut page).map_err(failed)?;
    man.render_options_section(&mut page).map_err(failed)?;
    page.extend_from_slice(b".SH COMMANDS\n");
    for sub in command.get_subcommands() {
        commands(&mut page, "relayq", sub);
    }
    man.render_version_section(&mut page).map_err(failed)?;
    print(&page)
}

/// `command` (named under `parent`) and its own subcommands, each with its options.
fn commands(page: &mut Vec<u8>, parent: &str, command: &clap::Command) {
    if command.is_hide_set() {
        return;
    }
    let name = format!("{parent} {}", command.get_name());
    let mut text = format!(".SS \"{}\"\n", roff(&name));
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        text.push_str(&format!("{}\n", roff(&about.to_string())));
    }
    for arg in command
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_global_set())
    {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        let mut flag = match (arg.get_short(), arg.get_long()) {
            (Some(s), Some(l)) => format!("\\fB\\-{s}\\fR, \\fB\\-\\-{}\\fR", roff(l)),
            (None, Some(l)) => format!("\\fB\\-\\-{}\\fR", roff(l)),
            (Some(s), None) => format!("\\fB\\-{s}\\fR"),
            (None, None) => format!("\\fI{}\\fR", roff(&id.to_uppercase())),
        };
        if arg.get_long().is_some() && arg.get_action().takes_values() {
            let value = arg
                .get_value_names()
                .and_then(|v| v.first())
                .map_or(id.to_uppercase(), |v| v.to_string());
            flag.push_str(&format!(" \\fI{}\\fR", roff(&value)));
        }
        let help = arg
            .get_help()
            .map(|h| roff(&h.to_string()))
            .unwrap_or_default();
        text.push_str(&format!(".TP\n{flag}\n{help}\n"));
    }
    page.extend_from_slice(text.as_bytes());
    for sub in command.get_subcommands() {
        commands(page, &name, sub);
    }
}

/// `text` safe in roff: backslashes and hyphens escaped, no line starting with a control dot.
fn roff(text: &str) -> String {
    text.replace('\\', "\\e")
        .replace('-', "\\-")
        .lines()
        .map(|l| match l.starts_with(['.', '\'']) {
            true => format!("\\&{l}"),
            false => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
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
