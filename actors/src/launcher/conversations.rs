//! The agents' own resumable conversations in a project's directory, as each CLI keeps them
//! (what `/resume` lists), newest first:
//!
//! - Claude Code: `$HOME/.claude/projects/<dir, each character but A-Z a-z 0-9 made ->/<id>.jsonl`,
//!   one transcript per conversation; resumed with `claude --resume <id>`.
//! - Codex: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl` (`CODEX_HOME` defaults to
//!   `$HOME/.codex`), whose first line (`session_meta`) names the conversation's id and
//!   directory; resumed with `codex resume <id>`.
//! - Gemini CLI: `$HOME/.gemini/tmp/<the project's id>/chats/session-*.json[l]`, the project's
//!   id read from `$HOME/.gemini/projects.json`; resumed with `gemini --resume <id>`.
//!
//! Each conversation's title is its first prompt. Only ids of `A-Z a-z 0-9 - _` are listed:
//! an id goes on the agent's command line (as its own argument, never through a shell).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use relayq_engine::Agent;
use serde_json::Value;

pub use relayq_engine::chat_sessions::Conversation;

/// The most conversations listed per agent.
pub const PER_AGENT: usize = 10;

/// Where an agent's files are: its `HOME` and `CODEX_HOME`, from the project's environment
/// when it sets them, else the daemon's.
#[derive(Debug, Clone, Default)]
pub struct Homes {
    pub home: Option<PathBuf>,
    pub codex_home: Option<PathBuf>,
}

/// `agent`'s conversations in `dir`, newest first, at most [`PER_AGENT`].
pub fn list(agent: Agent, dir: &Path, homes: &Homes) -> Vec<Conversation> {
    let Some(home) = homes
        .home
        .clone()
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
    else {
        return Vec::new();
    };
    let mut found = match agent {
        Agent::Claude => claude(&home, dir),
        Agent::Codex => codex(
            &homes.codex_home.clone().unwrap_or(home.join(".codex")),
            dir,
        ),
        Agent::Gemini => gemini(&home, dir),
    };
    found.retain(|c| valid_id(&c.id));
    found.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| a.id.cmp(&b.id)));
    found.truncate(PER_AGENT);
    found
}

/// The agent's command line resuming conversation `id`.
pub fn resume_args(agent: Agent, id: &str) -> Vec<String> {
    match agent {
        Agent::Codex => vec!["resume".into(), id.into()],
        Agent::Claude | Agent::Gemini => vec!["--resume".into(), id.into()],
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn modified_ms(path: &Path) -> i64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}

/// A prompt as a title: one line, at most 60 characters.
fn title_of(prompt: Option<&str>) -> String {
    let Some(prompt) = prompt.map(str::trim).filter(|p| !p.is_empty()) else {
        return "(no prompt)".into();
    };
    let line: String = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::kit::cut_chars(&line, 60)
}

/// The lines of a JSON-lines file that parse (at most the first `max`).
fn json_lines(path: &Path, max: usize) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .take(max)
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Text of a message's content: a string, or the text parts of a list.
fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| p["text"].as_str().or_else(|| p.as_str()))
                .collect();
            (!texts.is_empty()).then(|| texts.join(" "))
        }
        _ => None,
    }
}

fn files_in(dir: &Path, ext: &[&str]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| ext.contains(&x))
        })
        .collect()
}

fn claude(home: &Path, dir: &Path) -> Vec<Conversation> {
    let munged: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let folder = home.join(".claude/projects").join(munged);
    files_in(&folder, &["jsonl"])
        .into_iter()
        .filter_map(|path| {
            let id = path.file_stem()?.to_str()?.to_string();
            let lines = json_lines(&path, 200);
            let prompt = lines
                .iter()
                .filter(|l| l["type"] == "user")
                .find_map(|l| text_of(&l["message"]["content"]));
            // A transcript without a prompt holds nothing to go back to.
            prompt.as_ref()?;
            Some(Conversation {
                agent: Agent::Claude,
                id,
                title: title_of(prompt.as_deref()),
                at: modified_ms(&path),
            })
        })
        .collect()
}

fn codex(codex_home: &Path, dir: &Path) -> Vec<Conversation> {
    let mut files = Vec::new();
    let mut stack = vec![codex_home.join("sessions")];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "jsonl") {
                files.push(path);
            }
        }
    }
    files
        .into_iter()
        .filter_map(|path| {
            let lines = json_lines(&path, 200);
            let meta = lines.iter().find(|l| l["type"] == "session_meta")?;
            let payload = &meta["payload"];
            if Path::new(payload["cwd"].as_str()?) != dir {
                return None;
            }
            let prompt = lines.iter().find_map(codex_prompt);
            prompt.as_ref()?;
            Some(Conversation {
                agent: Agent::Codex,
                id: payload["id"].as_str()?.to_string(),
                title: title_of(prompt.as_deref()),
                at: modified_ms(&path),
            })
        })
        .collect()
}

/// The person's prompt in a line of a Codex rollout: `event_msg` `user_message` (up to 0.1xx)
/// or `item_completed` of a `UserMessage` item (0.171). Its `response_item` messages of role
/// `user` are not used: they also carry the instructions Codex itself adds.
fn codex_prompt(line: &Value) -> Option<String> {
    let payload = &line["payload"];
    if line["type"] != "event_msg" {
        return None;
    }
    match payload["type"].as_str()? {
        "user_message" => payload["message"].as_str().map(str::to_string),
        "item_completed" if payload["item"]["type"] == "UserMessage" => {
            text_of(&payload["item"]["content"])
        }
        _ => None,
    }
}

fn gemini(home: &Path, dir: &Path) -> Vec<Conversation> {
    let registry: Value = std::fs::read_to_string(home.join(".gemini/projects.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let Some(short) = registry["projects"][dir.to_string_lossy().as_ref()].as_str() else {
        return Vec::new();
    };
    let folder = home.join(".gemini/tmp").join(short).join("chats");
    files_in(&folder, &["json", "jsonl"])
        .into_iter()
        .filter_map(|path| {
            let records: Vec<Value> = match path.extension().is_some_and(|x| x == "jsonl") {
                true => json_lines(&path, 400),
                false => std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                    .map(|whole| {
                        let mut records = vec![whole.clone()];
                        records.extend(whole["messages"].as_array().cloned().unwrap_or_default());
                        records
                    })
                    .unwrap_or_default(),
            };
            let id = records
                .iter()
                .find_map(|r| r["sessionId"].as_str())?
                .to_string();
            let prompt = records
                .iter()
                .filter(|r| r["type"] == "user")
                .find_map(|r| text_of(&r["content"]));
            prompt.as_ref()?;
            Some(Conversation {
                agent: Agent::Gemini,
                id,
                title: title_of(prompt.as_deref()),
                at: modified_ms(&path),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn each_agents_conversations_in_the_project_are_found_newest_first() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        let dir = Path::new("/work/demo.app");
        let claude_dir = h.join(".claude/projects/-work-demo-app");
        write(
            &claude_dir.join("11111111-aaaa.jsonl"),
            "{\"type\":\"summary\"}\n{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"fix the   build\\nplease\"}}\n",
        );
        write(
            &claude_dir.join("no-prompt.jsonl"),
            "{\"type\":\"summary\"}\n",
        );
        write(
            &claude_dir.join("bad;id.jsonl"),
            "{\"type\":\"user\",\"message\":{\"content\":\"x\"}}\n",
        );
        let codex = h.join(".codex/sessions/2026/11/30");
        write(
            &codex.join("rollout-1.jsonl"),
            "{\"type\":\"session_meta\",\"payload\":{\"id\":\"c0de-1\",\"cwd\":\"/work/demo.app\"}}\n{\"type\":\"event_msg\",\"payload\":{\"type\":\"user_message\",\"message\":\"add tests\"}}\n",
        );
        // As Codex 0.171 writes it (tests/real_agents.rs runs it): the prompt an item.
        write(
            &codex.join("rollout-3.jsonl"),
            "{\"type\":\"session_meta\",\"payload\":{\"id\":\"01a22dbd-ade6\",\"cwd\":\"/work/demo.app\"}}\n{\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"<environment_context>\"}]}}\n{\"type\":\"event_msg\",\"payload\":{\"type\":\"item_completed\",\"item\":{\"type\":\"UserMessage\",\"content\":[{\"type\":\"text\",\"text\":\"remember kiwi\"}]}}}\n",
        );
        write(
            &codex.join("rollout-2.jsonl"),
            "{\"type\":\"session_meta\",\"payload\":{\"id\":\"elsewhere\",\"cwd\":\"/other\"}}\n{\"type\":\"event_msg\",\"payload\":{\"type\":\"user_message\",\"message\":\"x\"}}\n",
        );
        write(
            &h.join(".gemini/projects.json"),
            "{\"projects\":{\"/work/demo.app\":\"demo-app\"}}",
        );
        write(
            &h.join(".gemini/tmp/demo-app/chats/session-2026-11-30T10-00-abc.json"),
            "{\"sessionId\":\"9e3a-77\",\"messages\":[{\"type\":\"user\",\"content\":[{\"text\":\"explain main.rs\"}]},{\"type\":\"gemini\",\"content\":\"...\"}]}",
        );
        let homes = Homes {
            home: Some(h.to_path_buf()),
            codex_home: None,
        };
        let claude = list(Agent::Claude, dir, &homes);
        assert_eq!(claude.len(), 1, "{claude:?}");
        assert_eq!(
            (claude[0].id.as_str(), claude[0].title.as_str()),
            ("11111111-aaaa", "fix the build please")
        );
        let mut codex: Vec<(String, String)> = list(Agent::Codex, dir, &homes)
            .into_iter()
            .map(|c| (c.id, c.title))
            .collect();
        codex.sort();
        assert_eq!(
            codex,
            [
                ("01a22dbd-ade6".to_string(), "remember kiwi".to_string()),
                ("c0de-1".to_string(), "add tests".to_string())
            ]
        );
        let gemini = list(Agent::Gemini, dir, &homes);
        assert_eq!(gemini.len(), 1);
        assert_eq!(
            (gemini[0].id.as_str(), gemini[0].title.as_str()),
            ("9e3a-77", "explain main.rs")
        );
        assert_eq!(resume_args(Agent::Codex, "c0de-1"), ["resume", "c0de-1"]);
        assert_eq!(resume_args(Agent::Claude, "x"), ["--resume", "x"]);
    }
}
