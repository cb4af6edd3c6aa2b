//! `relayq init telegram` and `relayq init discord`: the five-minute bridge. Writes a config
//! file in which a bot reads the user's messages into a tmux session running an agent, and the
//! agent's answers go back to the chat; then prints the hook snippet and the commands left to
//! run.

use clap::Subcommand;
use std::path::Path;

use relayq_engine::Agent;

use crate::config::{named_config_file, Config};
use crate::invocation::CliError;

#[derive(Debug, Subcommand)]
pub enum InitCommand {
    /// A Telegram bot to an agent in tmux: writes the config file (--config, $RELAYQ_CONFIG,
    /// else ~/.config/relayq/config.toml) and prints the hook snippet and what to run next
    Telegram(InitTelegramArgs),
    /// A Discord bot to an agent in tmux: writes the config file (as `init telegram`) and
    /// prints the hook snippet and what to run next
    Discord(InitDiscordArgs),
}

#[derive(Debug, clap::Args)]
pub struct InitDiscordArgs {
    /// Your Discord user id, the only one whose messages reach the agent (Settings → Advanced
    /// → Developer Mode, then your profile's ⋯ menu → Copy User ID)
    #[arg(long)]
    pub user: String,
    /// The channel that talks to the agent: a server's channel or your DM with the bot (its
    /// menu → Copy Channel ID)
    #[arg(long)]
    pub channel: String,
    /// The relayq session, which is also the tmux session the agent runs in
    #[arg(long, default_value = "my-agent")]
    pub session: String,
    /// The environment variable that holds the bot token
    #[arg(long, default_value = "DISCORD_BOT_TOKEN")]
    pub token_env: String,
    /// The agent CLI whose hook snippet to print
    #[arg(long, default_value = "claude")]
    pub agent: Agent,
    /// Replace the config file if it exists
    #[arg(long)]
    pub force: bool,
}

/// What both bridges ask: the session, the token's variable, the agent, and whether to
/// replace the file.
struct Bridge<'a> {
    session: &'a str,
    token_env: &'a str,
    agent: Agent,
    force: bool,
    /// The platform, as its steps name it, and where its token comes from.
    platform: &'a str,
    token_example: &'a str,
    token_from: &'a str,
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
    #[arg(long, default_value = "claude")]
    pub agent: Agent,
    /// Replace the config file if it exists
    #[arg(long)]
    pub force: bool,
}

pub fn telegram(config: Option<&Path>, args: InitTelegramArgs) -> Result<(), CliError> {
    let chat = args.chat.unwrap_or(args.user);
    let bridge = Bridge {
        session: &args.session,
        token_env: &args.token_env,
        agent: args.agent,
        force: args.force,
        platform: "Telegram",
        token_example: "123456:ABC-your-token",
        token_from: "@BotFather",
    };
    bridge.check()?;
    let text = telegram_config(&args.token_env, args.user, chat, &args.session);
    bridge.write(config, &text)
}

pub fn discord(config: Option<&Path>, args: InitDiscordArgs) -> Result<(), CliError> {
    for (flag, id) in [("--user", &args.user), ("--channel", &args.channel)] {
        if id.is_empty() || id.len() > 20 || !id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CliError::Usage(format!(
                "{flag} {id:?} is not a Discord id: ids are numbers (turn on Developer Mode, then \
                 Copy User ID / Copy Channel ID)"
            )));
        }
    }
    let bridge = Bridge {
        session: &args.session,
        token_env: &args.token_env,
        agent: args.agent,
        force: args.force,
        platform: "Discord",
        token_example: "MTMw...your-token",
        token_from: "Developer Portal → your app → Bot → Reset Token; turn on Message Content Intent there too",
    };
    bridge.check()?;
    let text = discord_config(&args.token_env, &args.user, &args.channel, &args.session);
    bridge.write(config, &text)
}

impl Bridge<'_> {
    /// The session and the token's variable as relayq takes them.
    fn check(&self) -> Result<(), CliError> {
        let session = self.session;
        if session.is_empty()
            || !session
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(CliError::Usage(format!(
                "--session {session:?}: use letters, digits, - and _ only (it is also the tmux session's name)"
            )));
        }
        if !self
            .token_env
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(CliError::Usage(format!(
                "--token-env {:?} is not an environment variable name",
                self.token_env
            )));
        }
        Ok(())
    }

    /// Writes `text` where relayq reads its config, then prints what is left to do.
    fn write(&self, config: Option<&Path>, text: &str) -> Result<(), CliError> {
        let (session, agent) = (self.session, self.agent);
        // What is written must be what relayq reads: parsed and checked like any config file.
        Config::parse(text, "the generated config")
            .map_err(|e| CliError::Failed(format!("relayq wrote a config it cannot read: {e}")))?;

        let path = named_config_file(config);
        if path.exists() && !self.force {
            return Err(CliError::Usage(format!(
                "{} exists; relayq does not overwrite it. Add these lines to it yourself, or pass \
                 --force to replace it:\n\n{text}",
                path.display()
            )));
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", dir.display())))?;
        }
        std::fs::write(&path, text)
            .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))?;

        // The hook runs in the agent's folder: a config named by the command line is named whole.
        let config_flag = match config {
            Some(p) => format!(
                " --config {}",
                shell_word(
                    &std::path::absolute(p)
                        .unwrap_or(p.to_path_buf())
                        .display()
                        .to_string()
                )
            ),
            None => String::new(),
        };
        println!("wrote {}\n", path.display());
        println!(
            "1. Give relayq your bot's token (from {}), in the daemon's environment:\n",
            self.token_from
        );
        println!("     export {}={}\n", self.token_env, self.token_example);
        println!("2. Let the agent report to relayq: {}\n", hook_place(agent));
        println!("{}\n", indent(&hook_snippet(agent, &config_flag)));
        if agent == Agent::Codex {
            println!(
                "   and this line to ~/.codex/config.toml (turn ends, should the hooks not run):\n"
            );
            println!("{}\n", indent(&codex_notify(&config_flag)));
        }
        println!("3. Start relayq, then the agent in tmux session {session:?}:\n");
        println!("     relayq{config_flag} serve");
        println!(
            "     tmux new-session -s {session} -e RELAYQ_SESSION={session} {}\n",
            agent.as_str()
        );
        println!(
            "   The agent's hooks find the database as relayq does: a `url_env = \"VAR\"` in \
             [database] (PostgreSQL, README \"Several machines\") must be in the agent's \
             environment too (add `-e VAR=\"$VAR\"` above). A hook that cannot reach the database \
             keeps the event in a spool and the answer comes late; the daemon's log says why.\n"
        );
        if agent == Agent::Claude {
            println!(
                "   Claude Code asks once, in the terminal, \"Make auto mode your default permission \
                 mode?\" (with permissions.defaultMode = \"default\"): answer it there. In auto \
                 mode it runs what it judges safe and blocks the rest without asking the chat; \
                 README \"Permission modes\" says how to choose.\n"
            );
        }
        println!(
            "4. Message your bot from {}: the text is typed into the agent, and its answer comes back to the chat.",
            self.platform
        );
        Ok(())
    }
}

/// What both bridges' config files start with after their first line: every session typed
/// into the tmux session of its name.
const AGENT_PANE: &str = r#"# Every setting and its default: config.toml in relayq's repository.

# Chat messages are typed into the tmux session of the same name as their relayq session.
[sessions]
default_channel = "agent-pane"

[channels.agent-pane]
kind = "tmux"
target = "{session}"
programs = ["claude", "codex", "gemini", "node"]   # type only while the agent runs there
"#;

/// The config file: the bot as source (and, by the same name, the channel that answers), the
/// tmux channel, every session delivered through it.
pub fn telegram_config(token_env: &str, user: i64, chat: i64, session: &str) -> String {
    format!(
        r#"# Written by `relayq init telegram`: a Telegram bot to the agent in tmux session "{session}".
{AGENT_PANE}
# The bot: reads the chats below, and (as channel "telegram") sends the agent's answers back
# to the chat a session's last message came from ([routes] default: to = "origin").
[sources.telegram]
kind = "telegram"
token_env = "{token_env}"
allowed_users = [{user}]    # only these Telegram users reach the agent
chats = {{ "{chat}" = "{session}" }}
"#
    )
}

/// The config file for Discord: the bot's gateway as source (and, by the same name, the
/// channel that answers), the tmux channel, every session delivered through it.
pub fn discord_config(token_env: &str, user: &str, channel: &str, session: &str) -> String {
    format!(
        r#"# Written by `relayq init discord`: a Discord bot to the agent in tmux session "{session}".
{AGENT_PANE}
# The bot: holds Discord's gateway, reads the channel below, and (as channel "discord") sends
# the agent's answers back to the channel a session's last message came from, questions with
# buttons.
[sources.discord]
kind = "discord"
token_env = "{token_env}"
allowed_users = ["{user}"]    # only these Discord users reach the agent (and approve)
chats = {{ "{channel}" = "{session}" }}
"#
    )
}

/// Where the agent's hook configuration goes.
fn hook_place(agent: Agent) -> &'static str {
    match agent {
        Agent::Claude => "merge this into ~/.claude/settings.json",
        Agent::Codex => {
            "put this in ~/.codex/hooks.json, then trust it once: start codex and choose \
             \"Trust all and continue\" (a new or changed hooks file asks again)"
        }
        Agent::Gemini => "merge this into ~/.gemini/settings.json",
    }
}

/// The hook configuration for `agent`: the events that make notices and keep the registry.
pub fn hook_snippet(agent: Agent, config_flag: &str) -> String {
    let command = format!("relayq{config_flag} hook --agent {}", agent.as_str());
    // Claude Code: PermissionRequest names the tool and command asked for ("permission to
    // use Bash: rm -rf build"); Notification only for waiting-for-input, so a permission prompt
    // is not announced twice.
    let events: &[(&str, Option<&str>)] = match agent {
        // Codex: its hooks say when a prompt is taken and a dialog waits; `notify` (below)
        // only when a turn ends.
        Agent::Codex => &[
            ("SessionStart", None),
            ("UserPromptSubmit", None),
            ("PermissionRequest", None),
            // The tools it runs: the chat's progress message names them.
            ("PreToolUse", None),
            ("PostToolUse", None),
            ("Stop", None),
        ],
        Agent::Claude => &[
            ("SessionStart", None),
            ("UserPromptSubmit", None),
            ("Stop", None),
            ("PermissionRequest", None),
            // Auto mode blocked a call by itself: the chat is told (no question is asked).
            ("PermissionDenied", None),
            ("Notification", Some("idle_prompt")),
            ("PreToolUse", None),
            ("PostToolUse", None),
            ("PostToolUseFailure", None),
            ("SessionEnd", None),
        ],
        Agent::Gemini => &[
            ("SessionStart", None),
            ("BeforeAgent", None),
            ("AfterAgent", None),
            ("Notification", None),
            ("BeforeTool", None),
            ("AfterTool", None),
            ("SessionEnd", None),
        ],
    };
    let command = serde_json::to_string(&command).expect("a string serialises");
    let width = events.iter().map(|(e, _)| e.len()).max().unwrap_or(0) + 3;
    let lines: Vec<String> = events
        .iter()
        .map(|(event, matcher)| {
            let key = format!("{event:?}:");
            let matcher = matcher.map_or(String::new(), |m| format!("\"matcher\": {m:?}, "));
            // A permission request's hook waits for the chat's answer: up to its expiry,
            // within this timeout (seconds).
            let timeout = match *event {
                "PermissionRequest" => format!(
                    ", \"timeout\": {}",
                    relayq_engine::approvals::HOOK_TIMEOUT.as_secs()
                ),
                _ => String::new(),
            };
            format!("    {key:width$} [{{ {matcher}\"hooks\": [{{ \"type\": \"command\", \"command\": {command}{timeout} }}] }}]")
        })
        .collect();
    // Gemini CLI's stable releases run hooks only when they are switched on.
    let switch = match agent {
        Agent::Gemini => "  \"hooksConfig\": { \"enabled\": true },\n",
        _ => "",
    };
    format!(
        "{{\n{switch}  \"hooks\": {{\n{}\n  }}\n}}",
        lines.join(",\n")
    )
}

/// Codex's `notify` line: turn ends, a fallback relayq ignores while Codex's hooks report.
pub fn codex_notify(config_flag: &str) -> String {
    let command = format!("relayq{config_flag} hook --agent codex");
    let words: Vec<String> = command.split(' ').map(|w| format!("{w:?}")).collect();
    format!("notify = [{}]", words.join(", "))
}

/// `word` as one shell word: as it is when plain, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,".contains(c);
    match !word.is_empty() && word.chars().all(plain) {
        true => word.to_string(),
        false => format!("'{}'", word.replace('\'', r"'\''")),
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("     {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 27, item 24: the README's hook snippets had drifted from what `init` prints.
    #[test]
    fn the_readmes_hook_snippets_are_the_ones_init_prints() {
        let readme = include_str!("../../README.md");
        for agent in [Agent::Claude, Agent::Codex, Agent::Gemini] {
            let snippet = hook_snippet(agent, "");
            assert!(
                readme.contains(&snippet),
                "the README lacks, for {agent:?}:\n{snippet}"
            );
        }
        assert!(readme.contains(&codex_notify("")));
    }

    #[test]
    fn the_written_config_parses_and_paths_are_one_shell_word() {
        let text = telegram_config("BOT", 5, -100, "s1");
        let config = Config::parse(&text, "t").unwrap();
        assert_eq!(config.sessions.default_channel, "agent-pane");
        assert_eq!(shell_word("/home/a/relayq.toml"), "/home/a/relayq.toml");
        assert_eq!(
            shell_word("/home/a b/it's.toml"),
            r"'/home/a b/it'\''s.toml'"
        );
        assert!(codex_notify("").starts_with("notify = [\"relayq\", \"hook\""));
        // Issue 28, fault 5: Codex never said "needs you": no hooks were printed for it.
        let codex: serde_json::Value =
            serde_json::from_str(&hook_snippet(Agent::Codex, "")).unwrap();
        for event in [
            "SessionStart",
            "UserPromptSubmit",
            "PermissionRequest",
            "Stop",
        ] {
            assert_eq!(
                codex["hooks"][event][0]["hooks"][0]["command"], "relayq hook --agent codex",
                "{event}"
            );
        }
        let claude: serde_json::Value =
            serde_json::from_str(&hook_snippet(Agent::Claude, " --config '/a b'")).unwrap();
        assert_eq!(
            claude["hooks"]["Stop"][0]["hooks"][0]["command"],
            "relayq --config '/a b' hook --agent claude"
        );
        assert_eq!(claude["hooks"]["Notification"][0]["matcher"], "idle_prompt");
        assert!(claude["hooks"]["PermissionRequest"].is_array());
        assert!(claude.get("hooksConfig").is_none());
        let gemini: serde_json::Value =
            serde_json::from_str(&hook_snippet(Agent::Gemini, "")).unwrap();
        assert_eq!(gemini["hooksConfig"]["enabled"], true, "{gemini}");
        assert!(gemini["hooks"]["AfterAgent"].is_array());
    }
}
