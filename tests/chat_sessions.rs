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
    project_config_with(app_dir, tmux, fake, hook, &[])
}

/// [`project_config`] with more lines in `[projects.demo]`.
fn project_config_with(
    app_dir: &std::path::Path,
    tmux: &Tmux,
    fake: &FakeTelegram,
    hook: &[String],
    more: &[&str],
) -> Config {
    tmux.agent_config(&["programs = [\"python3\"]", "missing_grace = \"5s\""])
        .telegram_source(
            &fake.url,
            &format!("token = {TOKEN:?}"),
            &[ALICE],
            &[],
            &["session_template = \"tg{chat}\""],
        )
        .table("projects.demo", &demo_project(app_dir, hook, more))
}

/// `[projects.demo]`: `dir` the app's directory, running the fake agent as `claude` (and
/// `gemini`), its hooks wired to `hook`, its log in `agent.jsonl`; `more` lines after.
pub(crate) fn demo_project(
    app_dir: &std::path::Path,
    hook: &[String],
    more: &[&str],
) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/agents/fake_agent.py");
    let hook = serde_json::to_string(hook).unwrap();
    let log = app_dir.join("agent.jsonl");
    [
        format!("dir = {:?}", app_dir.display().to_string()),
        "agents = [\"claude\", \"gemini\"]".to_string(),
        format!("commands.claude = [\"python3\", {script:?}]"),
        format!("commands.gemini = [\"python3\", {script:?}]"),
        "env.FAKE_AGENT = \"claude\"".to_string(),
        format!("env.FAKE_HOOK = {hook:?}"),
        format!("env.FAKE_LOG = {:?}", log.display().to_string()),
    ]
    .into_iter()
    .chain(more.iter().map(|l| l.to_string()))
    .collect()
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
    // Waiting for the daemon's first poll: the node's projects are published before any
    // source reads (a /new read at once found none, a flaky "there is no project").
    fake.push_text(ALICE, ALICE, "/new demo");
    let daemon = app.serve();
    wait_said(&fake, ALICE, "Starting claude in demo as demo-claude-1");
    wait_said(&fake, ALICE, "demo-claude-1 is ready: claude in demo");
    let registered: Vec<String> = fake
        .commands()
        .iter()
        .filter_map(|c| c["command"].as_str().map(String::from))
        .collect();
    for command in [
        "new", "sessions", "stop", "resume", "status", "allow", "deny",
    ] {
        assert!(
            registered.iter().any(|c| c == command),
            "setMyCommands: {registered:?}"
        );
    }
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
    tap(&fake, ALICE, &ask, "Stop");
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

/// Forum `chat`'s topics and the keyboard of the bot's message `list`, as the README draws
/// them.
fn draw_topics_and_keyboard(fake: &FakeTelegram, chat: i64, list: &Value) -> String {
    let mut lines = vec!["Topics".to_string(), "  # General".to_string()];
    let mut names: Vec<String> = fake
        .topics(chat)
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    // In the order the app lists them, by name (they were made at the same time).
    names.sort();
    for name in names {
        lines.push(format!("  # {name}"));
    }
    lines.push("/sessions".into());
    for (label, _) in FakeTelegram::buttons(list) {
        lines.push(format!("  [ {label} ]"));
    }
    lines.join("\n")
}

/// Alice taps the button of the bot's message `message` in `chat` whose label starts with
/// `label`.
fn tap(fake: &FakeTelegram, chat: i64, message: &Value, label: &str) {
    let (_, data) = FakeTelegram::buttons(message)
        .into_iter()
        .find(|(l, _)| l.starts_with(label))
        .unwrap_or_else(|| panic!("no button {label:?} under {message}"));
    let id = message["message_id"].as_i64().unwrap();
    fake.push_tap(chat, ALICE, "Alice", id, &data);
}

/// The id of forum `chat`'s topic named `name`, waiting for it.
fn topic_id(fake: &FakeTelegram, chat: i64, name: &str) -> i64 {
    wait_until(&format!("topic {name}"), Duration::from_secs(40), || {
        fake.topic_named(chat, name).is_some()
    });
    fake.topic_named(chat, name).unwrap()
}

#[test]
fn in_a_forum_each_session_gets_a_topic_its_answers_stay_there_and_stop_closes_it() {
    const FORUM: i64 = -100_777;
    let fake = FakeTelegram::start(TOKEN);
    fake.make_forum(FORUM);
    let tmux = Tmux::new("chat-topics");
    let app = App::new(Config::default());
    let config = project_config(app.dir.path(), &tmux, &fake, &app.hook_argv("claude"));
    app.write_config(config);
    let daemon = app.serve();

    fake.push_text(FORUM, ALICE, "/new demo claude one");
    fake.push_text(FORUM, ALICE, "/new demo gemini two");
    let made = || {
        ["one", "two"]
            .iter()
            .all(|n| fake.topics(FORUM).iter().any(|t| t["name"] == *n))
    };
    let began = std::time::Instant::now();
    while !made() && began.elapsed() < Duration::from_secs(40) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        made(),
        "topics {:?}\n{:#?}\n{}",
        fake.topics(FORUM),
        fake.bot_messages(),
        daemon.log()
    );
    let one = topic_id(&fake, FORUM, "one");
    let two = topic_id(&fake, FORUM, "two");
    wait_said(&fake, FORUM, "one is ready: claude in demo");
    wait_said(&fake, FORUM, "two is ready: gemini in demo");
    assert!(fake
        .texts_in_topic(FORUM, Some(one))
        .iter()
        .any(|t| t.starts_with("one is ready")));
    let here = wait_said(&fake, FORUM, "one is ready in its own topic.");
    assert!(
        here["message_thread_id"].is_null(),
        "said where /new was typed: {here}"
    );

    // The README's picture of the topic list and the /sessions keyboard is this record's.
    fake.push_text(FORUM, ALICE, "/sessions");
    let list = wait_said(&fake, FORUM, "Sessions of this chat");
    let picture = draw_topics_and_keyboard(&fake, FORUM, &list);
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        readme.contains(&picture),
        "README.md's picture is not what the fake recorded:\n{picture}"
    );

    // Each topic's message reaches its own session; each answer comes back to its topic.
    fake.push_text_in_topic(FORUM, ALICE, one, "hello one");
    fake.push_text_in_topic(FORUM, ALICE, two, "hello two");
    wait_said(&fake, FORUM, "echo: hello one");
    wait_said(&fake, FORUM, "echo: hello two");
    let (in_one, in_two) = (
        fake.texts_in_topic(FORUM, Some(one)),
        fake.texts_in_topic(FORUM, Some(two)),
    );
    assert!(
        in_one.iter().any(|t| t.contains("echo: hello one")),
        "{in_one:#?}"
    );
    assert!(
        !in_one.iter().any(|t| t.contains("hello two")),
        "{in_one:#?}"
    );
    assert!(
        in_two.iter().any(|t| t.contains("echo: hello two")),
        "{in_two:#?}"
    );
    assert!(
        !in_two.iter().any(|t| t.contains("hello one")),
        "{in_two:#?}"
    );

    // /stop in topic one stops its own session, after the tap, and closes the topic.
    fake.push_text_in_topic(FORUM, ALICE, one, "/stop");
    let ask = wait_said(&fake, FORUM, "Stop one (claude in demo)?");
    assert_eq!(ask["message_thread_id"], one, "asked in the topic");
    tap(&fake, FORUM, &ask, "Stop one");
    wait_said(&fake, FORUM, "one stopped");
    wait_until("topic one closed", Duration::from_secs(20), || {
        fake.topics(FORUM)
            .iter()
            .any(|t| t["name"] == "one" && t["closed"] == true)
    });
    fake.push_text_in_topic(FORUM, ALICE, one, "still there?");
    let dropped = wait_said(&fake, FORUM, "your message was dropped");
    assert_eq!(dropped["message_thread_id"], one);

    // Topic two deleted under relayq: its next answer goes to the chat itself, marked.
    fake.delete_topic(FORUM, two);
    fake.push_text_in_topic(FORUM, ALICE, two, "after the topic went");
    let marked = wait_said(&fake, FORUM, "[two, its topic is gone]");
    assert!(marked["message_thread_id"].is_null(), "{marked}");
    assert!(marked["text"]
        .as_str()
        .unwrap()
        .contains("echo: after the topic went"));
    daemon.stop();
}

/// How many times the fake agent started (its log's `started` lines).
fn agent_starts(app: &App) -> usize {
    app.lines("agent.jsonl")
        .iter()
        .filter(|l| l.get("started").is_some())
        .count()
}

/// The tmux sessions running on `tmux`'s server.
pub(crate) fn tmux_sessions(tmux: &Tmux) -> Vec<String> {
    let out = tmux.run(&["list-sessions", "-F", "#{session_name}"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_kill_9_during_new_or_stop_starts_or_stops_exactly_one_agent_and_the_chat_is_told_once() {
    let fake = FakeTelegram::start(TOKEN);
    let tmux = Tmux::new("chat-kill");
    let app = App::new(Config::default());
    let slow = [
        "env.FAKE_START_DELAY_MS = \"2500\"",
        "env.FAKE_EXIT_DELAY_MS = \"2500\"",
    ];
    let config = project_config_with(
        app.dir.path(),
        &tmux,
        &fake,
        &app.hook_argv("claude"),
        &slow,
    );
    app.write_config(config);

    let mut daemon = app.serve();
    fake.push_text(ALICE, ALICE, "/new demo");
    wait_said(&fake, ALICE, "Starting claude in demo");
    wait_until("the agent started", Duration::from_secs(20), || {
        agent_starts(&app) == 1
    });
    daemon.signal("KILL");
    let mut daemon = app.serve();
    wait_said(&fake, ALICE, "demo-claude-1 is ready:");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(agent_starts(&app), 1, "one agent started");
    assert_eq!(tmux_sessions(&tmux), ["demo-claude-1"]);

    fake.push_text(ALICE, ALICE, "/stop");
    let ask = wait_said(&fake, ALICE, "Stop demo-claude-1");
    tap(&fake, ALICE, &ask, "Stop");
    wait_until("the agent told to exit", Duration::from_secs(20), || {
        app.lines("agent.jsonl")
            .iter()
            .any(|l| l.get("exit_command").is_some())
    });
    daemon.signal("KILL");
    let daemon = app.serve();
    wait_said(&fake, ALICE, "demo-claude-1 stopped");
    std::thread::sleep(Duration::from_secs(1));
    let all = said(&fake, ALICE);
    for once in ["is ready:", "Starting claude", "stopped:"] {
        assert_eq!(
            all.iter().filter(|t| t.contains(once)).count(),
            1,
            "{once}: {all:#?}"
        );
    }
    assert!(
        tmux_sessions(&tmux).is_empty(),
        "{:?}",
        tmux_sessions(&tmux)
    );
    daemon.stop();
}

#[test]
fn bad_session_commands_are_answered_in_the_chat_and_start_nothing() {
    const FORUM: i64 = -100_888;
    const STRANGER: i64 = 555;
    let fake = FakeTelegram::start(TOKEN);
    fake.make_forum(FORUM);
    fake.refuse_topics(FORUM);
    let tmux = Tmux::new("chat-bad");
    let app = App::new(Config::default());
    let config = project_config(app.dir.path(), &tmux, &fake, &app.hook_argv("claude"))
        .set("sources.bot", "max_sessions = 1")
        .table(
            "projects.broken",
            &[
                &format!("dir = {:?}", app.dir.path().display().to_string()),
                "agents = [\"claude\"]",
                "commands.claude = [\"sh\", \"-c\", \"exit 3\"]",
            ],
        );
    app.write_config(config);
    // A session started by hand holds its name.
    let env = [("RELAYQ_SESSION", "taken")];
    let start = include_str!("fixtures/claude-code/SessionStart.json");
    assert!(app.hook("claude", start, false, &env).status.success());
    let daemon = app.serve();

    let cases = [
        (
            "/new nope",
            "there is no project \"nope\": the projects are broken, demo",
        ),
        (
            "/new demo codex",
            "codex may not run in demo: its agents are claude, gemini",
        ),
        ("/new demo claude taken", "a session is named taken already"),
        (
            "/new demo claude ../x",
            "the session name \"../x\" has the character '.'",
        ),
        (
            "/new demo claude a:b",
            "the session name \"a:b\" has the character ':'",
        ),
        ("/new demo claude a\u{1b}[2Jb", "has the character U+001B"),
        (
            &format!("/new demo claude {}", "n".repeat(200)),
            "has 200 characters",
        ),
    ];
    for (text, why) in &cases {
        fake.push_text(ALICE, ALICE, text);
        let said = wait_said(&fake, ALICE, why);
        let said = said["text"].as_str().unwrap();
        assert!(said.starts_with("Not done: "), "{said}");
        assert!(
            !said.contains('\u{1b}'),
            "no escape reaches the chat: {said:?}"
        );
    }
    // A stranger is refused once, in words that name nothing here.
    fake.push_text(STRANGER, STRANGER, "/new demo");
    fake.push_text(STRANGER, STRANGER, "/sessions");
    wait_said(
        &fake,
        STRANGER,
        "this bot reads only the people it was set up for",
    );
    // An agent that exits as it starts: said at once, not after the hooks' wait.
    fake.push_text(ALICE, ALICE, "/new broken");
    wait_said(&fake, ALICE, "claude ended as it started in broken");
    // max_sessions = 1: the second is refused.
    fake.push_text(ALICE, ALICE, "/new demo claude first");
    wait_said(&fake, ALICE, "first is ready:");
    fake.push_text(ALICE, ALICE, "/new demo claude second");
    wait_said(&fake, ALICE, "(max_sessions = 1)");
    // A topic the platform refuses: said, and nothing starts.
    fake.push_text(FORUM, ALICE, "/new demo claude third");
    wait_said(&fake, FORUM, "not enough rights to create a topic");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        fake.texts_to(STRANGER).len(),
        1,
        "{:?}",
        fake.texts_to(STRANGER)
    );
    assert_eq!(agent_starts(&app), 1, "only the first started");
    assert_eq!(tmux_sessions(&tmux), ["first"]);
    daemon.stop();
}

/// The operator's side: `relayq session new | stop` and the HTTP API start and end sessions
/// through the same write as the chat, and the agents' hooks reach relayq through what the
/// launcher puts in their environment (`RELAYQ_CONFIG`, the database's settings).
#[test]
fn the_operator_starts_and_stops_sessions_from_the_cli_and_the_api() {
    use crate::common::api::{answer, Api};
    let fake = FakeTelegram::start(TOKEN);
    let tmux = Tmux::new("chat-operator");
    let project = tempfile::tempdir().unwrap();
    // The hook command as an agent's settings name it: the daemon's config and database come
    // from the agent's environment.
    let hook = vec![bin(), "hook".into(), "--agent".into(), "claude".into()];
    let api = Api::start(project_config(project.path(), &tmux, &fake, &hook));
    let app = &api.app;

    let out = app.run(&[
        "session", "new", "demo", "--agent", "claude", "--name", "op1",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("op1 is ready: claude in demo"),
        "{stdout}"
    );
    let list = app.ok(&["session", "list", "--json"]);
    let list: Value = serde_json::from_str(&list).unwrap();
    let op1 = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "op1")
        .unwrap();
    assert_eq!(
        (op1["project"].as_str(), op1["agent"].as_str()),
        (Some("demo"), Some("claude"))
    );
    assert!(app
        .ok(&["session", "list"])
        .lines()
        .any(|l| l.starts_with("op1") && l.contains("demo")));

    // The API: 202 with the command, followed until done.
    let (status, row) = answer(api.post(
        "/v1/sessions",
        &serde_json::json!({"project": "demo", "name": "op2"}),
    ));
    assert_eq!(status, 202, "{row}");
    let follow = |id: i64, state: &str| {
        wait_until(
            &format!("command {id} {state}"),
            Duration::from_secs(40),
            || answer(api.get(&format!("/v1/sessions/commands/{id}"))).1["state"] == state,
        );
    };
    follow(row["id"].as_i64().unwrap(), "done");
    let (status, row) = answer(api.post("/v1/sessions/op2/stop", &serde_json::json!({})));
    assert_eq!(status, 202, "{row}");
    follow(row["id"].as_i64().unwrap(), "done");
    // Refused, and said why: nothing starts.
    let (status, error) = answer(api.post("/v1/sessions", &serde_json::json!({"project": "nope"})));
    assert_eq!(status, 400, "{error}");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("there is no project \"nope\""));
    let (status, _) = answer(api.post("/v1/sessions/by-hand/stop", &serde_json::json!({})));
    assert_eq!(status, 400);
    let out = app.run(&["session", "new", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("there is no project"));
    let out = app.run(&["session", "new", "demo", "--name", "../x"]);
    assert_eq!(out.status.code(), Some(2), "a bad name is a usage error");

    let out = app.ok(&["session", "stop", "op1"]);
    assert!(out.starts_with("op1 stopped"), "{out}");
    assert!(
        tmux_sessions(&tmux).is_empty(),
        "{:?}",
        tmux_sessions(&tmux)
    );
    assert_eq!(
        fake.sent().len(),
        0,
        "no chat hears the operator's sessions: {:?}",
        fake.sent()
    );
    drop(api);
}

#[test]
fn resume_lists_the_agents_conversations_in_the_project_and_a_tap_resumes_one() {
    let fake = FakeTelegram::start(TOKEN);
    let tmux = Tmux::new("chat-resume");
    let app = App::new(Config::default());
    let home = app.path("agent-home");
    std::fs::create_dir_all(&home).unwrap();
    let home_line = format!("env.HOME = {:?}", home.display().to_string());
    let more = ["env.FAKE_CONVERSATIONS = \"1\"", home_line.as_str()];
    let config = project_config_with(
        app.dir.path(),
        &tmux,
        &fake,
        &app.hook_argv("claude"),
        &more,
    );
    app.write_config(config);
    let daemon = app.serve();

    fake.push_text(ALICE, ALICE, "/resume demo");
    wait_said(
        &fake,
        ALICE,
        "No conversation of claude or gemini in demo to resume",
    );

    fake.push_text(ALICE, ALICE, "/new demo claude first");
    wait_said(&fake, ALICE, "first is ready:");
    fake.push_text(ALICE, ALICE, "remember the word kiwi");
    wait_said(&fake, ALICE, "echo: remember the word kiwi");
    fake.push_text(ALICE, ALICE, "/stop first");
    let ask = wait_said(&fake, ALICE, "Stop first");
    tap(&fake, ALICE, &ask, "Stop");
    wait_said(&fake, ALICE, "first stopped");

    fake.push_text(ALICE, ALICE, "/resume");
    let list = wait_said(&fake, ALICE, "Conversations in demo, newest first:");
    let text = list["text"].as_str().unwrap();
    assert!(
        text.contains("1. claude · ") && text.contains("remember the word kiwi"),
        "{text}"
    );
    let buttons = FakeTelegram::buttons(&list);
    assert_eq!(buttons.len(), 1, "{buttons:?}");
    tap(&fake, ALICE, &list, "1. claude");
    wait_said(&fake, ALICE, "Resuming claude in demo as demo-claude-1");
    wait_said(&fake, ALICE, "demo-claude-1 is ready:");
    // The agent was started with its own resume flag and goes on with the conversation.
    let started: Vec<Value> = app
        .lines("agent.jsonl")
        .into_iter()
        .filter(|l| l.get("started").is_some())
        .collect();
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(started[1]["argv"][0], "--resume", "{started:?}");
    assert_eq!(
        started[1]["resumed"], started[0]["started"],
        "the same conversation"
    );
    fake.push_text(ALICE, ALICE, "what was the word?");
    wait_said(
        &fake,
        ALICE,
        "echo: what was the word? (earlier: remember the word kiwi)",
    );
    // A second tap on the list is answered, and starts nothing.
    tap(&fake, ALICE, &list, "1. claude");
    wait_until("the second tap answered", Duration::from_secs(20), || {
        fake.tap_answers().iter().any(|a| a == "Already answered")
    });
    assert_eq!(tmux_sessions(&tmux), ["demo-claude-1"]);
    daemon.stop();
}

/// ccgram#111: after `/clear` in the agent's terminal (a new conversation, a new agent session
/// id: SessionEnd with reason `clear`, then SessionStart with source `clear`), messages went
/// to the old id. The topic's session is relayq's, so they follow the agent.
#[test]
fn clear_typed_in_the_agents_terminal_keeps_the_topic_talking_to_the_same_pane() {
    const FORUM: i64 = -100_999;
    let fake = FakeTelegram::start(TOKEN);
    fake.make_forum(FORUM);
    let tmux = Tmux::new("chat-clear");
    let app = App::new(Config::default());
    let config = project_config(app.dir.path(), &tmux, &fake, &app.hook_argv("claude"));
    app.write_config(config);
    let daemon = app.serve();
    fake.push_text(FORUM, ALICE, "/new demo claude cleared");
    let topic = topic_id(&fake, FORUM, "cleared");
    wait_said(&fake, FORUM, "cleared is ready:");
    let id = || {
        let list: Value = serde_json::from_str(&app.ok(&["session", "list", "--json"])).unwrap();
        list[0]["native_session_id"].as_str().unwrap().to_string()
    };
    // A slow turn runs; a second message waits for it; /clear is typed meanwhile.
    fake.push_text_in_topic(FORUM, ALICE, topic, "slow one");
    wait_until("the slow turn", Duration::from_secs(20), || {
        app.lines("agent.jsonl")
            .iter()
            .any(|l| l["turn_start"] == "slow one")
    });
    fake.push_text_in_topic(FORUM, ALICE, topic, "waiting through the clear");
    std::thread::sleep(Duration::from_millis(500));
    let before = id();
    tmux.run(&["send-keys", "-t", "cleared", "-l", "/clear"]);
    tmux.run(&["send-keys", "-t", "cleared", "Enter"]);
    wait_until(
        "the agent's new conversation",
        Duration::from_secs(20),
        || id() != before,
    );

    let answer = wait_said(&fake, FORUM, "echo: waiting through the clear");
    assert_eq!(
        answer["message_thread_id"], topic,
        "answered in the same topic"
    );
    fake.push_text_in_topic(FORUM, ALICE, topic, "after the clear");
    let answer = wait_said(&fake, FORUM, "echo: after the clear");
    assert_eq!(
        answer["message_thread_id"], topic,
        "answered in the same topic"
    );
    let list: Value = serde_json::from_str(&app.ok(&["session", "list", "--json"])).unwrap();
    assert_eq!(list[0]["key"], "cleared");
    assert_eq!(list[0]["state"], "active", "{list}");
    assert!(
        !said(&fake, FORUM).iter().any(|t| t.contains("dropped")),
        "{:#?}",
        said(&fake, FORUM)
    );
    assert_eq!(tmux_sessions(&tmux), ["cleared"]);
    daemon.stop();
}

/// On PostgreSQL, `/new` read by the node that polls Telegram starts the agent on the
/// project's node (`[projects.NAME] node`), which its hooks report from.
#[test]
fn new_read_by_the_polling_node_starts_the_agent_on_the_projects_node() {
    use relayq_engine::storage::postgresql::test_server::TestDatabase;
    let database = TestDatabase::create();
    let url = database.url();
    let fake = FakeTelegram::start(TOKEN);
    let tmux = Tmux::new("chat-nodes");
    let project = tempfile::tempdir().unwrap();
    let hook = vec![bin(), "hook".into(), "--agent".into(), "claude".into()];
    let node = |name: &str| {
        project_config_with(project.path(), &tmux, &fake, &hook, &["node = \"b\""])
            .set("node", &format!("name = {name:?}"))
    };
    let a = App::joining(node("a"), &url);
    let on_a = a.serve();
    wait_until("node a polls Telegram", Duration::from_secs(20), || {
        !fake.polls().is_empty()
    });
    let b = App::joining(node("b"), &url);
    let on_b = b.serve();
    std::thread::sleep(Duration::from_secs(1));

    fake.push_text(ALICE, ALICE, "/new demo");
    wait_said(
        &fake,
        ALICE,
        "Starting claude in demo as demo-claude-1 (on b)",
    );
    wait_said(&fake, ALICE, "demo-claude-1 is ready: claude in demo, on b");
    assert!(
        on_b.log().contains("an agent started from the chat"),
        "{}",
        on_b.log()
    );
    assert!(
        !on_a.log().contains("an agent started from the chat"),
        "{}",
        on_a.log()
    );
    let list: Value = serde_json::from_str(&a.ok(&["session", "list", "--json"])).unwrap();
    assert_eq!(list[0]["node"], "b", "its hooks ran on node b: {list}");
    fake.push_text(ALICE, ALICE, "hello from node a's poll");
    wait_said(&fake, ALICE, "echo: hello from node a's poll");

    // Node b stops: a /new for its project waits, the chat and the operator told why, and
    // is carried out once b is back.
    on_b.stop();
    fake.push_text(ALICE, ALICE, "/new demo claude later");
    wait_said(&fake, ALICE, "later");
    let status = a.ok(&["status"]);
    assert!(
        status.contains("(/new later)")
            && status.contains("waiting on node b, which is not running"),
        "{status}"
    );
    let json: Value = serde_json::from_str(&a.ok(&["status", "--json"])).unwrap();
    assert_eq!(
        json["session_commands"][0]["command"]["command"], "new",
        "{json}"
    );
    assert_eq!(json["session_commands"][0]["node"], "b", "{json}");
    let on_b = b.serve();
    wait_said(&fake, ALICE, "later is ready: claude in demo, on b");
    assert!(!a.ok(&["status"]).contains("(/new later)"));
    on_a.stop();
    on_b.stop();
}

/// Slack, as Telegram's forums: ` /new` typed in a channel (after a space: Slack keeps a
/// leading `/`) opens a thread for the session (a message naming it, whose `ts` is the
/// thread); the ready message goes in it; a message written in the thread reaches the
/// session and its answer comes back there; ` /stop` in the thread asks with Block Kit
/// buttons, and the click stops the session, said in the thread.
#[test]
fn in_slack_each_session_gets_a_thread_and_its_answers_stay_there() {
    const SECRET: &str = "slack-sessions-secret";
    // Slack's Web API: each message gets a ts of its own.
    let slack = Endpoint::start_with(0, |calls| {
        let call = calls.last().unwrap();
        let n = calls.len();
        let body = match call.url.rsplit('/').next().unwrap_or_default() {
            "auth.test" => serde_json::json!({"ok": true, "user": "relayq", "team": "Demo"}),
            "chat.postMessage" | "chat.update" => {
                let ts = call.body["ts"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or(format!("1767226000.{n:06}"));
                serde_json::json!({"ok": true, "channel": call.body["channel"], "ts": ts})
            }
            _ => serde_json::json!({"ok": true}),
        };
        Reply {
            headers: vec![("Content-Type", "application/json; charset=utf-8".into())],
            body: body.to_string(),
            ..Reply::status(200)
        }
    });
    let port = crate::common::api::free_port();
    let tmux = Tmux::new("chat-slack");
    let app = App::new(Config::default());
    let config = tmux
        .agent_config(&["programs = [\"python3\"]", "missing_grace = \"5s\""])
        .http_on(port)
        .table(
            "sources.team",
            &[
                "kind = \"slack\"",
                "signing_secret_env = \"SLACK_SIGNING_SECRET\"",
                "token = \"xoxb-test-token\"",
                &format!("api_url = \"{}/\"", slack.url),
                "allowed_users = [\"U0ALICE\"]",
                "session_template = \"slack-{channel}\"",
            ],
        )
        .table(
            "projects.demo",
            &demo_project(app.dir.path(), &app.hook_argv("claude"), &[]),
        );
    app.write_config(config);
    let daemon = app.serve_with_env(&[("SLACK_SIGNING_SECRET", SECRET)]);
    let url = format!("http://127.0.0.1:{port}/v1/ingress/team");
    let post = |body: String, content_type: &str| {
        assert_eq!(slack_post(&url, SECRET, body, content_type).status(), 200);
    };
    let say = |text: &str, ts: &str, thread: Option<&str>| {
        let mut event = serde_json::json!({"type": "message", "channel": "C0DEV",
            "user": "U0ALICE", "text": text, "ts": ts, "channel_type": "channel"});
        if let Some(thread) = thread {
            event["thread_ts"] = thread.into();
        }
        let callback = serde_json::json!({"type": "event_callback", "team_id": "T0TEAM",
            "event_id": format!("Ev{ts}"), "event": event});
        post(callback.to_string(), "application/json");
    };
    // The messages relayq posted: (thread_ts, text, blocks).
    let posted = || -> Vec<(Option<String>, String, Value)> {
        slack
            .calls()
            .into_iter()
            .filter(|c| c.url.ends_with("chat.postMessage"))
            .map(|c| {
                (
                    c.body["thread_ts"].as_str().map(str::to_string),
                    c.body["text"].as_str().unwrap_or_default().to_string(),
                    c.body["blocks"].clone(),
                )
            })
            .collect()
    };
    let wait_posted = |part: &str| -> (Option<String>, String, Value) {
        wait_until(
            &format!("Slack gets {part:?}"),
            Duration::from_secs(40),
            || posted().iter().any(|(_, t, _)| t.contains(part)),
        );
        posted()
            .into_iter()
            .rev()
            .find(|(_, t, _)| t.contains(part))
            .unwrap()
    };

    say(" /new demo claude one", "1767226100.000100", None);
    let opened = wait_posted("Session *one*");
    assert_eq!(opened.0, None, "the thread starts in the channel");
    let thread = slack
        .calls()
        .iter()
        .position(|c| c.body["text"] == opened.1.as_str())
        .map(|n| format!("1767226000.{:06}", n + 1))
        .unwrap();
    let ready = wait_posted("one is ready: claude in demo");
    assert_eq!(
        ready.0.as_deref(),
        Some(thread.as_str()),
        "ready in the thread"
    );
    // In Slack's words: its thread, and the command typed after a space.
    assert!(
        ready.1.contains("Write in this thread") && ready.1.contains("` /stop one` ends it"),
        "{}",
        ready.1
    );

    say("hello one", "1767226100.000200", Some(&thread));
    let answer = wait_posted("echo: hello one");
    assert_eq!(
        answer.0.as_deref(),
        Some(thread.as_str()),
        "answered in the thread"
    );

    say(" /stop", "1767226100.000300", Some(&thread));
    let ask = wait_posted("Stop one (claude in demo)?");
    assert_eq!(ask.0.as_deref(), Some(thread.as_str()));
    let value = ask.2.as_array().unwrap().iter().find_map(|block| {
        block["elements"].as_array()?.iter().find_map(|b| {
            b["text"]["text"]
                .as_str()?
                .starts_with("Stop")
                .then(|| b["value"].as_str().unwrap().to_string())
        })
    });
    let click = serde_json::json!({
        "type": "block_actions",
        "user": {"id": "U0ALICE", "username": "alice", "name": "alice", "team_id": "T0TEAM"},
        "api_app_id": "A0APP", "token": "x", "trigger_id": "1.2.3",
        "container": {"type": "message", "message_ts": "1767226000.000009", "channel_id": "C0DEV",
                      "thread_ts": thread, "is_ephemeral": false},
        "team": {"id": "T0TEAM", "domain": "demo"},
        "channel": {"id": "C0DEV", "name": "dev"},
        "response_url": format!("{}/actions/T0TEAM/1", slack.url),
        "actions": [{"action_id": "relayq-button-0-0", "block_id": "b", "value": value.unwrap(),
                     "type": "button", "action_ts": "1767226101.000001",
                     "text": {"type": "plain_text", "text": "Stop one"}}],
    });
    post(slack_form(&click), "application/x-www-form-urlencoded");
    let stopped = wait_posted("one stopped");
    assert_eq!(
        stopped.0.as_deref(),
        Some(thread.as_str()),
        "said in the thread"
    );
    wait_until("its tmux session gone", Duration::from_secs(20), || {
        !tmux_sessions(&tmux).contains(&"one".to_string())
    });
    daemon.stop();
}

/// Bot API 9.3: a bot whose `getMe` says `has_topics_enabled` has topics in private chats, and
/// a session started there gets one, as in a forum: the ready message and the answers go in
/// it. A private chat without them talks to its current session (the other tests).
#[test]
fn in_a_private_chat_with_topics_a_session_gets_a_topic() {
    let fake = FakeTelegram::start(TOKEN);
    fake.enable_private_topics();
    let tmux = Tmux::new("chat-private-topics");
    let app = App::new(Config::default());
    let config = project_config(app.dir.path(), &tmux, &fake, &app.hook_argv("claude"));
    app.write_config(config);
    let daemon = app.serve();
    // The source asks getMe before it first reads: it knows the bot has topics.
    fake.push_text(ALICE, ALICE, "/new demo claude mine");
    let topic = topic_id(&fake, ALICE, "mine");
    wait_said(&fake, ALICE, "mine is ready: claude in demo");
    assert!(
        fake.texts_in_topic(ALICE, Some(topic))
            .iter()
            .any(|t| t.starts_with("mine is ready")),
        "{:#?}",
        fake.bot_messages()
    );
    fake.push_text_in_topic(ALICE, ALICE, topic, "hello mine");
    wait_said(&fake, ALICE, "echo: hello mine");
    assert!(
        fake.texts_in_topic(ALICE, Some(topic))
            .iter()
            .any(|t| t.contains("echo: hello mine")),
        "{:#?}",
        fake.bot_messages()
    );
    daemon.stop();
}

/// SIGHUP reloads the projects: one added to config.toml is published for this node and can
/// be started from the chat, without a restart.
#[test]
fn a_project_added_to_the_config_can_be_started_after_sighup() {
    let fake = FakeTelegram::start(TOKEN);
    let tmux = Tmux::new("chat-sighup");
    let app = App::new(Config::default());
    let hook = app.hook_argv("claude");
    app.write_config(project_config(app.dir.path(), &tmux, &fake, &hook));
    let daemon = app.serve();
    fake.push_text(ALICE, ALICE, "/new extra");
    wait_said(&fake, ALICE, "there is no project \"extra\"");

    let extra = app.path("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let lines = demo_project(&extra, &hook, &[]);
    app.write_config(
        project_config(app.dir.path(), &tmux, &fake, &hook).table("projects.extra", &lines),
    );
    daemon.send("HUP");
    wait_until("the projects published", Duration::from_secs(20), || {
        daemon
            .log()
            .contains("SIGHUP: this node's projects published")
    });
    fake.push_text(ALICE, ALICE, "/new extra");
    wait_said(&fake, ALICE, "extra-claude-1 is ready: claude in extra");
    daemon.stop();
}
