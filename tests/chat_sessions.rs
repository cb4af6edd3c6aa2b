//! Sessions from the chat, from outside: `/new`, `/sessions`, `/stop` typed in the fake
//! Telegram start and end agents (the fake agent, `tests/agents/fake_agent.py`) in tmux in a
//! project's directory, and a chat's messages follow the session it chose.

use std::time::Duration;

use relayq_actors::sources::telegram::fake::FakeTelegram;
use serde_json::Value;

use crate::common::*;

const TOKEN: &str = "123456:chat-sessions-token";

/// A daemon config: the fake Telegram as source `bot` (Alice allowed), tmux channel `pane`
/// on `tmux`'s server for every session, and project `demo` in `dir` running the fake agent
/// as `claude` (and `gemini`), with its hooks wired to `app`'s relayq.
fn project_config(
    app_dir: &std::path::Path,
    tmux: &Tmux,
    fake: &FakeTelegram,
    hook: &[String],
) -> Config {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/agents/fake_agent.py");
    let hook = serde_json::to_string(hook).unwrap();
    let log = app_dir.join("agent.jsonl");
    tmux.agent_config(&["programs = [\"python3\"]", "missing_grace = \"5s\""])
        .telegram_source(
            &fake.url,
            &format!("token = {TOKEN:?}"),
            &[ALICE],
            &[],
            &["session_template = \"tg{chat}\""],
        )
        .table(
            "projects.demo",
            &[
                &format!("dir = {:?}", app_dir.display().to_string()),
                "agents = [\"claude\", \"gemini\"]",
                &format!("commands.claude = [\"python3\", {script:?}]"),
                &format!("commands.gemini = [\"python3\", {script:?}]"),
                "env.FAKE_AGENT = \"claude\"",
                &format!("env.FAKE_HOOK = {hook:?}"),
                &format!("env.FAKE_LOG = {:?}", log.display().to_string()),
            ],
        )
}

/// The texts the bot sent to chat `chat`, oldest first.
fn said(fake: &FakeTelegram, chat: i64) -> Vec<String> {
    fake.texts_to(chat)
}

/// Waits until the bot said something to `chat` that contains `part`; that message.
fn wait_said(fake: &FakeTelegram, chat: i64, part: &str) -> Value {
    wait_until(
        &format!("the bot says {part:?}"),
        Duration::from_secs(40),
        || {
            fake.bot_messages().iter().any(|m| {
                m["chat_id"] == chat && m["text"].as_str().is_some_and(|t| t.contains(part))
            })
        },
    );
    fake.bot_messages()
        .into_iter()
        .rev()
        .find(|m| m["chat_id"] == chat && m["text"].as_str().is_some_and(|t| t.contains(part)))
        .unwrap()
}

#[test]
fn new_starts_the_agent_in_the_project_the_chat_talks_to_it_and_stop_ends_it() {
    let fake = FakeTelegram::start(TOKEN);
    let tmux = Tmux::new("chat-new");
    let app = App::new(Config::default());
    let config = project_config(app.dir.path(), &tmux, &fake, &app.hook_argv("claude"));
    app.write_config(config);
    let daemon = app.serve();

    fake.push_text(ALICE, ALICE, "/new demo");
    wait_said(&fake, ALICE, "Starting claude in demo as demo-claude-1");
    wait_said(&fake, ALICE, "demo-claude-1 is ready: claude in demo");
    let panes = tmux.run(&[
        "list-panes",
        "-a",
        "-F",
        "#{session_name} #{pane_current_path}",
    ]);
    let panes = String::from_utf8_lossy(&panes.stdout).to_string();
    assert!(
        panes.contains(&format!("demo-claude-1 {}", app.dir.path().display())),
        "the agent runs in the project's directory: {panes}"
    );

    // The chat's next message goes to the new session, and its answer comes back.
    fake.push_text(ALICE, ALICE, "hello there");
    wait_said(&fake, ALICE, "echo: hello there");

    fake.push_text(ALICE, ALICE, "/sessions");
    let list = wait_said(&fake, ALICE, "Sessions of this chat");
    let text = list["text"].as_str().unwrap();
    assert!(
        text.contains("demo-claude-1 · claude · demo · ready"),
        "{text}"
    );

    fake.push_text(ALICE, ALICE, "/stop");
    let ask = wait_said(&fake, ALICE, "Stop demo-claude-1");
    let buttons = FakeTelegram::buttons(&ask);
    let (_, stop) = buttons
        .iter()
        .find(|(label, _)| label.starts_with("Stop"))
        .unwrap();
    fake.push_tap(
        ALICE,
        ALICE,
        "Alice",
        ask["message_id"].as_i64().unwrap(),
        stop,
    );
    wait_said(&fake, ALICE, "demo-claude-1 stopped");
    let sessions = tmux.run(&["list-sessions", "-F", "#{session_name}"]);
    assert!(
        !String::from_utf8_lossy(&sessions.stdout).contains("demo-claude-1"),
        "the tmux session is gone"
    );
    assert!(
        !said(&fake, ALICE).iter().any(|t| t.contains("/exit")),
        "the agent left by its own exit command, which is no prompt"
    );
    // A message sent to it now is dropped, and the chat is told how to go on.
    fake.push_text(ALICE, ALICE, "are you there?");
    let dropped = wait_said(&fake, ALICE, "your message was dropped");
    assert!(
        dropped["text"]
            .as_str()
            .unwrap()
            .contains("Start another with /new"),
        "{dropped}"
    );
    let all = said(&fake, ALICE);
    assert_eq!(
        all.iter().filter(|t| t.contains("is ready:")).count(),
        1,
        "{all:#?}"
    );
    daemon.stop();
}
