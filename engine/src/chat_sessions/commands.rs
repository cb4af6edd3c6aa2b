//! The session commands a person types in a chat, read by one parser for every chat source:
//! `/new [project] [agent] [name]`, `/sessions [page]`, `/stop [session]`, `/resume [project]`,
//! `/status`. Telegram writes `/new@bot` in groups; Slack's client keeps a leading `/` for its
//! own commands, so there the same words are typed after a space (` /new demo`), which the
//! parser takes alike. Any other text is not a command and goes to the agent as it is.

use crate::Agent;

use super::names::{check_project_name, check_session_name, shown};

/// A session command, its words read and checked (names are never passed on unchecked).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum ChatCommand {
    /// Start an agent in a project, in a new tmux session (and topic).
    New {
        project: Option<String>,
        agent: Option<Agent>,
        name: Option<String>,
    },
    /// The chat's sessions, 10 a page, newest first.
    Sessions { page: u32 },
    /// End a session (after a confirmation); `None`: the chat's or topic's own.
    Stop { session: Option<String> },
    /// List the agent's own conversations in a project, to resume one.
    Resume { project: Option<String> },
    /// The chat's sessions, their states, what waits.
    Status,
    /// What the chat sees while its agent works; `None`: say what it is now.
    Progress {
        mode: Option<crate::progress::ProgressMode>,
    },
    /// Ask for access: a pairing code for an approver to confirm (a stranger may give it).
    Pair,
    /// Confirm a pairing code, adding its person with `role` (approvers only).
    Approve {
        code: String,
        role: crate::access::Role,
    },
}

impl ChatCommand {
    /// The command's word, as typed.
    pub fn word(&self) -> &'static str {
        match self {
            ChatCommand::New { .. } => "new",
            ChatCommand::Sessions { .. } => "sessions",
            ChatCommand::Stop { .. } => "stop",
            ChatCommand::Resume { .. } => "resume",
            ChatCommand::Status => "status",
            ChatCommand::Progress { .. } => "progress",
            ChatCommand::Pair => "pair",
            ChatCommand::Approve { .. } => "approve",
        }
    }

    /// Whether the command starts or ends agents, or adds people: only approvers may give it.
    pub fn changes_sessions(&self) -> bool {
        matches!(
            self,
            ChatCommand::New { .. }
                | ChatCommand::Stop { .. }
                | ChatCommand::Resume { .. }
                | ChatCommand::Approve { .. }
        )
    }
}

/// The commands, with what each does: Telegram's `setMyCommands` list, and the help line.
pub const COMMANDS: [(&str, &str); 8] = [
    ("new", "Start an agent: /new [project] [agent] [name]"),
    ("sessions", "This chat's sessions; tap one to switch"),
    ("stop", "End a session: /stop [session]"),
    (
        "resume",
        "Resume an agent's conversation: /resume [project]",
    ),
    ("status", "This chat's sessions and what waits"),
    (
        "progress",
        "What you see while the agent works: /progress off|receipts|steps|stream",
    ),
    (
        "pair",
        "Ask for access: a code for someone who approves here",
    ),
    ("approve", "Let someone in: /approve CODE writer|approver"),
];

/// `text` as a session command: `None` when it is not one (it goes to the agent),
/// `Some(Err(why))` when it is one whose words are wrong (the chat is told why).
pub fn command_of(text: &str) -> Option<Result<ChatCommand, String>> {
    let mut words = text.split_whitespace();
    let first = words.next()?.strip_prefix('/')?;
    let word = first.split_once('@').map_or(first, |(w, _)| w);
    let args: Vec<&str> = words.collect();
    let too_many = |max: usize, usage: &str| {
        (args.len() > max).then(|| format!("too many words: the command is {usage}"))
    };
    let parsed = match word.to_ascii_lowercase().as_str() {
        "new" => {
            if let Some(e) = too_many(3, "/new [project] [agent] [name]") {
                return Some(Err(e));
            }
            new(&args)
        }
        "sessions" => {
            if let Some(e) = too_many(1, "/sessions [page]") {
                return Some(Err(e));
            }
            match args.first() {
                None => Ok(ChatCommand::Sessions { page: 1 }),
                Some(p) => match p.parse::<u32>() {
                    Ok(page) if page >= 1 => Ok(ChatCommand::Sessions { page }),
                    _ => Err(format!("{:?} is not a page number (1, 2, ...)", shown(p))),
                },
            }
        }
        "stop" => {
            if let Some(e) = too_many(1, "/stop [session]") {
                return Some(Err(e));
            }
            args.first()
                .map(|s| check_session_name(s))
                .transpose()
                .map(|session| ChatCommand::Stop { session })
        }
        "resume" => {
            if let Some(e) = too_many(1, "/resume [project]") {
                return Some(Err(e));
            }
            args.first()
                .map(|p| check_project_name(p))
                .transpose()
                .map(|project| ChatCommand::Resume { project })
        }
        "status" => match too_many(0, "/status") {
            Some(e) => Err(e),
            None => Ok(ChatCommand::Status),
        },
        "progress" => {
            if let Some(e) = too_many(1, "/progress [off|receipts|steps|stream]") {
                return Some(Err(e));
            }
            match args.first() {
                None => Ok(ChatCommand::Progress { mode: None }),
                Some(word) => {
                    match crate::progress::ProgressMode::parse(&word.to_ascii_lowercase()) {
                        Some(mode) => Ok(ChatCommand::Progress { mode: Some(mode) }),
                        None => Err(format!(
                            "{:?} is not a progress setting: write off, receipts, steps or stream",
                            shown(word)
                        )),
                    }
                }
            }
        }
        "pair" => match too_many(0, "/pair") {
            Some(e) => Err(e),
            None => Ok(ChatCommand::Pair),
        },
        "approve" => {
            if let Some(e) = too_many(2, "/approve CODE [writer|approver]") {
                return Some(Err(e));
            }
            approve(&args)
        }
        _ => return None,
    };
    Some(parsed)
}

/// `/approve`'s words: the code, then the role (a writer when not said).
fn approve(args: &[&str]) -> Result<ChatCommand, String> {
    let Some(code) = args.first() else {
        return Err("say which code: /approve CODE [writer|approver]".into());
    };
    let role = match args.get(1) {
        None => crate::access::Role::Writer,
        Some(word) => crate::access::Role::parse(word)
            .ok_or_else(|| format!("{:?} is not a role: write writer or approver", shown(word)))?,
    };
    // A code's shape is checked where it is looked up: a wrong one counts as a wrong guess.
    Ok(ChatCommand::Approve {
        code: code.chars().take(16).collect(),
        role,
    })
}

/// `/new`'s words: the project, then the agent (when the word is one), then the name.
fn new(args: &[&str]) -> Result<ChatCommand, String> {
    let project = args.first().map(|p| check_project_name(p)).transpose()?;
    let (agent, name) = match args.get(1) {
        None => (None, None),
        Some(word) => match Agent::parse(&word.to_ascii_lowercase()) {
            Some(agent) => (Some(agent), args.get(2)),
            None if args.len() == 3 => {
                return Err(format!(
                    "{:?} is not an agent: write claude, codex or gemini (/new [project] \
                     [agent] [name])",
                    shown(word)
                ))
            }
            None => (None, Some(word)),
        },
    };
    let name = name.map(|n| check_session_name(n)).transpose()?;
    Ok(ChatCommand::New {
        project,
        agent,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> ChatCommand {
        command_of(text).unwrap().unwrap()
    }

    fn refused(text: &str) -> String {
        command_of(text).unwrap().unwrap_err()
    }

    #[test]
    fn the_commands_read_their_words_in_order() {
        assert_eq!(
            ok("/new"),
            ChatCommand::New {
                project: None,
                agent: None,
                name: None
            }
        );
        assert_eq!(
            ok("/new@relayq_bot demo Codex fix-1"),
            ChatCommand::New {
                project: Some("demo".into()),
                agent: Some(Agent::Codex),
                name: Some("fix-1".into())
            }
        );
        // A second word that is no agent is the name.
        assert_eq!(
            ok("  /new demo fix_2 "),
            ChatCommand::New {
                project: Some("demo".into()),
                agent: None,
                name: Some("fix_2".into())
            }
        );
        assert_eq!(ok("/sessions"), ChatCommand::Sessions { page: 1 });
        assert_eq!(ok("/SESSIONS 3"), ChatCommand::Sessions { page: 3 });
        assert_eq!(ok("/stop"), ChatCommand::Stop { session: None });
        assert_eq!(
            ok("/stop fix-1"),
            ChatCommand::Stop {
                session: Some("fix-1".into())
            }
        );
        assert_eq!(
            ok("/resume demo"),
            ChatCommand::Resume {
                project: Some("demo".into())
            }
        );
        assert_eq!(ok("/status"), ChatCommand::Status);
        assert_eq!(ok("/progress"), ChatCommand::Progress { mode: None });
        assert_eq!(
            ok("/progress Receipts"),
            ChatCommand::Progress {
                mode: Some(crate::progress::ProgressMode::Receipts)
            }
        );
    }

    #[test]
    fn other_text_is_no_command_and_goes_to_the_agent() {
        for text in [
            "",
            "new demo",
            "stop",
            "/allow 3",
            "/start",
            "please /new",
            "/",
        ] {
            assert_eq!(command_of(text), None, "{text:?}");
        }
    }

    #[test]
    fn wrong_words_are_refused_saying_what_to_write() {
        assert!(refused("/new demo gpt x").contains("\"gpt\" is not an agent"));
        assert!(refused("/new demo claude a b").contains("too many words"));
        assert!(refused("/sessions 0").contains("not a page number"));
        assert!(refused("/status now").contains("too many words"));
        for bad in ["../x", "a:b", "a\u{1b}[2J", &"x".repeat(200), "a.b", "ü"] {
            let why = refused(&format!("/new demo claude {bad}"));
            assert!(why.contains("session name"), "{bad:?}: {why}");
            assert!(!why.contains('\u{1b}'), "an ESC is never echoed: {why}");
        }
        for bad in ["..", "a/b", "a..b", "-"] {
            let why = refused(&format!("/resume {bad}"));
            assert!(why.contains("project name"), "{bad:?}: {why}");
        }
    }
}

/// How a platform's chat speaks of what relayq's answers name: a session's own thread (a
/// Telegram topic, a Slack or Discord thread) and a command as it is typed there (Slack keeps a leading
/// `/` for its own commands: relayq's are typed after a space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatWords {
    /// "topic" or "thread".
    pub thread: &'static str,
    slack: bool,
}

impl ChatWords {
    /// The words of the chats of `origin` (`slack:NAME`, `telegram:NAME`, `discord:NAME`, …).
    pub fn of(origin: &str) -> ChatWords {
        let platform = origin.split(':').next();
        let slack = platform == Some("slack");
        let threads = slack || platform == Some("discord");
        ChatWords {
            thread: if threads { "thread" } else { "topic" },
            slack,
        }
    }

    /// `words` (a command without its `/`) as a person types it there.
    pub fn command(&self, words: &str) -> String {
        match self.slack {
            true => format!("` /{words}`"),
            false => format!("/{words}"),
        }
    }
}
