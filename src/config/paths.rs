//! Where relayq looks for its config file and keeps its state when nothing says otherwise.

use std::path::{Path, PathBuf};

/// The environment variable naming the config file (under `--config`).
pub const CONFIG_ENV: &str = "RELAYQ_CONFIG";
/// The environment variable naming the database (under `--db`, over `database.path`).
pub const DB_ENV: &str = "RELAYQ_DB";

/// A path a flag gives, else the environment variable `var` (when set and not empty).
pub fn flag_or_env(flag: Option<&Path>, var: &str) -> Option<PathBuf> {
    let from_env = || std::env::var_os(var).filter(|v| !v.is_empty());
    flag.map(Path::to_path_buf)
        .or_else(|| from_env().map(PathBuf::from))
}

/// The config file a command names: `--config`, else `$RELAYQ_CONFIG`, else the per-user file
/// (which every relayq command, the agent's hook included, reads without being told).
pub fn named_config_file(flag: Option<&Path>) -> PathBuf {
    flag_or_env(flag, CONFIG_ENV).unwrap_or_else(user_config_file)
}

/// `database.path` in a config file's text, even when the rest of the file is wrong: read as
/// TOML when it parses, else from the `path = "..."` line of its `[database]` table.
pub(super) fn database_path_in(text: &str) -> Option<PathBuf> {
    database_key_in(text, "path").map(PathBuf::from)
}

/// The string `database.KEY` in a config file's text, even when the rest of the file is wrong
/// (see [`database_path_in`]).
pub(super) fn database_key_in(text: &str, wanted: &str) -> Option<String> {
    key_in(text, "database", wanted)
}

/// The string `TABLE.KEY` in a config file's text, even when the rest of the file is wrong: a
/// hook must record its event in the right database, for the right node, whatever typo the
/// file has elsewhere.
pub(super) fn key_in(text: &str, table_name: &str, wanted: &str) -> Option<String> {
    if let Ok(table) = text.parse::<toml::Table>() {
        return table
            .get(table_name)?
            .get(wanted)?
            .as_str()
            .map(str::to_string);
    }
    let mut in_table = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_table = line
                .trim_end_matches(|c: char| c == ']' || c.is_whitespace())
                .trim_start_matches('[')
                .trim()
                == table_name;
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if in_table && key.trim() == wanted {
            let value: toml::Value = format!("v = {}", value.trim())
                .parse::<toml::Table>()
                .ok()?
                .remove("v")?;
            return value.as_str().map(str::to_string);
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
