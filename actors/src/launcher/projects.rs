//! `[projects.NAME]`: the allowlist of what a chat may start. Nothing outside these projects
//! can be started from a chat, and what starts is the project's own command line (an argv,
//! never a shell string) in its own directory.
//!
//! ```toml
//! [projects.demo]
//! dir = "/home/alice/src/demo"        # absolute; must exist
//! agents = ["claude", "codex"]        # may run there; the first is the default
//! node = "box-1"                      # PostgreSQL: the node that hosts it (default: this one)
//! commands.claude = ["claude", "--model", "sonnet"]   # default: the agent's own name
//! env.ANTHROPIC_BASE_URL = "http://127.0.0.1:8080"    # a value,
//! env.ANTHROPIC_API_KEY = { env = "MY_KEY" }           # or the daemon's variable,
//! env.OTHER = { file = "/run/secrets/other" }          # or a file's contents
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use relayq_engine::chat_sessions::names::check_project_name;
use relayq_engine::Agent;
use serde::{Deserialize, Serialize};

use crate::settings::SettingError;

/// One project, as config.toml writes it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Project {
    /// Where its agents start (absolute, must exist).
    pub dir: PathBuf,
    /// The agents that may run there; the first is the one `/new` starts unless told.
    pub agents: Vec<Agent>,
    /// The node that hosts it, on a database several nodes share; default: the node whose
    /// config defines it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The command line per agent (an argv); default: the agent's own name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub commands: BTreeMap<Agent, Vec<String>>,
    /// Variables the agents get, beside what their hooks need.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, EnvValue>,
}

/// A project variable's value: as written, or read from the daemon's environment or a file
/// when the agent starts (as secrets are).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum EnvValue {
    Text(String),
    From {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<PathBuf>,
    },
}

impl EnvValue {
    /// The value now; why not, naming where it was to come from.
    pub fn resolve(&self) -> Result<String, String> {
        match self {
            EnvValue::Text(text) => Ok(text.clone()),
            EnvValue::From {
                env: Some(var),
                file: None,
            } => std::env::var(var).map_err(|_| format!("the daemon has no variable {var}")),
            EnvValue::From {
                env: None,
                file: Some(file),
            } => std::fs::read_to_string(file)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
                .map_err(|e| format!("cannot read {}: {e}", file.display())),
            EnvValue::From { .. } => Err("give one of env or file".into()),
        }
    }
}

impl Project {
    /// The argv that starts `agent` here.
    pub fn command(&self, agent: Agent) -> Vec<String> {
        self.commands
            .get(&agent)
            .cloned()
            .unwrap_or_else(|| vec![agent.as_str().to_string()])
    }

    /// The node that hosts it: `node`, else `this_node`.
    pub fn node_or<'a>(&'a self, this_node: &'a str) -> &'a str {
        self.node.as_deref().unwrap_or(this_node)
    }

    /// What the file alone can tell (keys within `projects.NAME`).
    pub fn check(&self, name: &str) -> Result<(), SettingError> {
        check_project_name(name).map_err(|why| SettingError::new("", why))?;
        if !self.dir.is_absolute() {
            return Err(SettingError::new(
                "dir",
                format!(
                    "{} is not absolute: write the whole path",
                    self.dir.display()
                ),
            ));
        }
        if !self.dir.is_dir() {
            return Err(SettingError::new(
                "dir",
                format!("{} is not a directory here", self.dir.display()),
            ));
        }
        if self.agents.is_empty() {
            return Err(SettingError::new(
                "agents",
                "is empty: name the agents that may run here (claude, codex, gemini)",
            ));
        }
        for (agent, argv) in &self.commands {
            let key = format!("commands.{agent}");
            if !self.agents.contains(agent) {
                return Err(SettingError::new(
                    key,
                    format!("{agent} is not in agents, so it never runs here"),
                ));
            }
            match argv.first() {
                None => return Err(SettingError::new(key, "is empty: give the program first")),
                Some(program) if program.trim().is_empty() => {
                    return Err(SettingError::new(key, "names no program"))
                }
                Some(_) => {}
            }
            if argv.iter().any(|a| a.contains('\0')) {
                return Err(SettingError::new(key, "has a NUL character"));
            }
        }
        for (var, value) in &self.env {
            let key = format!("env.{var}");
            let good_name = !var.is_empty()
                && !var.starts_with(|c: char| c.is_ascii_digit())
                && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !good_name {
                return Err(SettingError::new(
                    key,
                    "is not a variable name: use A-Z, a-z, 0-9 and _, not starting with a digit",
                ));
            }
            if var.starts_with("RELAYQ_") {
                return Err(SettingError::new(
                    key,
                    "RELAYQ_ variables are relayq's own: the session's are set by relayq",
                ));
            }
            if let EnvValue::From { env, file } = value {
                if env.is_some() == file.is_some() {
                    return Err(SettingError::new(
                        key,
                        "give one of { env = \"VAR\" } or { file = \"PATH\" }",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Files relative to the config file's folder.
    pub fn resolve_paths(&mut self, base: &Path) {
        for value in self.env.values_mut() {
            if let EnvValue::From { file: Some(f), .. } = value {
                crate::settings::resolve_path(f, base);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(toml_text: &str) -> Project {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn a_project_is_checked_naming_the_key_to_fix() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().display();
        let good = project(&format!(
            "dir = \"{at}\"\nagents = [\"claude\", \"codex\"]\n\
             commands.codex = [\"codex\", \"--full-auto\"]\nenv.KEY = {{ env = \"HOME\" }}"
        ));
        assert_eq!(good.check("demo"), Ok(()));
        assert_eq!(good.command(Agent::Claude), ["claude"]);
        assert_eq!(good.command(Agent::Codex), ["codex", "--full-auto"]);
        assert!(!good.env["KEY"].resolve().unwrap().is_empty());

        let key = |p: &Project, name: &str| p.check(name).unwrap_err().key;
        assert_eq!(key(&good, "../x"), "");
        let relative = Project {
            dir: "src/demo".into(),
            ..good.clone()
        };
        assert_eq!(key(&relative, "demo"), "dir");
        let missing = Project {
            dir: dir.path().join("gone"),
            ..good.clone()
        };
        assert_eq!(key(&missing, "demo"), "dir");
        let none = Project {
            agents: vec![],
            ..good.clone()
        };
        assert_eq!(key(&none, "demo"), "agents");
        let stray = Project {
            agents: vec![Agent::Claude],
            ..good.clone()
        };
        assert_eq!(key(&stray, "demo"), "commands.codex");
        let mut own = good.clone();
        own.env
            .insert("RELAYQ_SESSION".into(), EnvValue::Text("x".into()));
        assert_eq!(key(&own, "demo"), "env.RELAYQ_SESSION");
        let mut both = good.clone();
        both.env.insert(
            "B".into(),
            EnvValue::From {
                env: Some("X".into()),
                file: Some("/f".into()),
            },
        );
        assert_eq!(key(&both, "demo"), "env.B");
    }
}
