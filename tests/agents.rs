//! The last hop against agents in real tmux panes: `tests/agents/fake_agent.py` reproduces, on
//! demand, each behaviour of Claude Code, Codex and Gemini CLI that relayq must handle (a
//! dialog whose default Enter approves, an Enter too close behind a paste taken as a newline,
//! input folded into a running turn, a side thread's notify, an idle reminder), running
//! relayq's own hook command as the real CLIs do. The real CLIs are in `real_agents`.

use std::rc::Rc;
use std::time::Duration;

use crate::common::*;
use relayq_actors::sources::telegram::fake::FakeTelegram;
use serde_json::Value;

/// A fake agent in its own tmux server, its hooks wired to `app`.
pub struct FakeAgent {
    /// Shared when several agents run on one server.
    pub tmux: Rc<Tmux>,
    pub session: String,
    log: std::path::PathBuf,
}

impl FakeAgent {
    /// Starts `agent` (claude, codex, gemini) as relayq session `session` with the fake's
    /// settings `env` (see the fake's doc), its hooks run as `relayq hook` with
    /// `RELAYQ_SESSION` set (unless `env` sets it empty).
    /// An agent `agent` alone in tmux server `name`, as session `agent` of a new app whose
    /// default channel is its pane.
    pub fn alone(name: &str, agent: &str, env: &[(&str, &str)]) -> (App, FakeAgent) {
        let tmux = Tmux::new(name);
        let app = App::new(agent_config(&tmux, &[]));
        let started = FakeAgent::start(&app, tmux, agent, "agent", env);
        (app, started)
    }

    pub fn start(
        app: &App,
        tmux: impl Into<Rc<Tmux>>,
        agent: &str,
        session: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let tmux = tmux.into();
        let log = app.path(&format!("{session}-agent.jsonl"));
        let hook = serde_json::to_string(&app.hook_argv(agent)).unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/agents/fake_agent.py");
        let mut vars = vec![
            ("FAKE_AGENT", agent.to_string()),
            ("FAKE_HOOK", hook.clone()),
            ("FAKE_LOG", log.display().to_string()),
            ("RELAYQ_SESSION", session.to_string()),
            (
                "XDG_STATE_HOME",
                app.path("xdg-state").display().to_string(),
            ),
        ];
        if agent == "codex" {
            // notify gets the JSON as its last argument: `relayq hook` reads it from there.
            vars.push(("FAKE_NOTIFY", hook));
        }
        for (k, v) in env {
            vars.retain(|(name, _)| name != k);
            vars.push((k, v.to_string()));
        }
        let exports: Vec<String> = vars
            .iter()
            .map(|(k, v)| match v.is_empty() {
                true => format!("unset {k};"),
                false => format!("export {k}={};", shell_word(v)),
            })
            .collect();
        let cwd = app.dir.path().display().to_string();
        tmux.start(
            session,
            &format!(
                "cd {}; {} exec python3 {script}",
                shell_word(&cwd),
                exports.join(" ")
            ),
        );
        let agent = FakeAgent {
            tmux,
            session: session.into(),
            log,
        };
        agent.wait_log("the fake agent is up", |l| {
            l.iter()
                .any(|e| e.get("hook").is_some() || e.get("pasted").is_some())
                || agent.screen().contains("fake agent ready")
        });
        agent
    }

    /// What the fake did so far, one JSON object per line.
    pub fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The log entries with `field`, as strings.
    pub fn entries(&self, field: &str) -> Vec<String> {
        self.log()
            .iter()
            .filter_map(|e| e.get(field))
            .map(|v| v.as_str().map_or(v.to_string(), str::to_string))
            .collect()
    }

    pub fn wait_log(&self, what: &str, done: impl Fn(&[Value]) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !done(&self.log()) {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}; the agent did: {:#?}\nscreen:\n{}",
                self.log(),
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the fake logged `field` with `value` (`what` names it in a timeout).
    pub fn wait_entry(&self, what: &str, field: &str, value: impl Into<Value>) {
        let value = value.into();
        self.wait_log(what, |l| l.iter().any(|e| e[field] == value));
    }

    pub fn screen(&self) -> String {
        self.tmux.screen(&self.session)
    }

    /// Keys pressed in the pane, as the person at the terminal would.
    pub fn keys(&self, keys: &[&str]) {
        let target = format!("={}:", self.session);
        let mut args = vec!["send-keys", "-t", &target];
        args.extend_from_slice(keys);
        self.tmux.run(&args);
    }
}

/// A config for agents in `tmux`'s panes (the fake runs as `python3`), answers confirmed by the
/// agent within `confirm_within`, plus `lines` for the channel.
pub fn agent_config(tmux: &Tmux, lines: &[&str]) -> Config {
    tmux.agent_config(
        &[
            &[
                "programs = [\"python3\"]",
                "confirm_within = \"1s\"",
                "submit_delay = \"50ms\"",
            ],
            lines,
        ]
        .concat(),
    )
}

/// The row `id`'s state and receipt, as `relayq show --json` tells them.
fn row(app: &App, id: i64) -> (String, Option<String>) {
    let shown: Value = serde_json::from_str(&app.ok(&["show", &id.to_string(), "--json"])).unwrap();
    (
        shown["state"].as_str().unwrap().to_string(),
        shown["receipt"].as_str().map(str::to_string),
    )
}

fn wait_for(what: &str, done: impl FnMut() -> bool) {
    wait_until(what, Duration::from_secs(30), done);
}

/// Fault 1 (issue 28): a permission dialog was open; the chat's "no" was pasted (the dialog
/// ignored it) and Enter confirmed the highlighted "Yes": the tool ran, the row was delivered.
#[test]
fn a_reply_sent_while_a_dialog_is_open_never_approves_the_tool() {
    let (app, agent) = FakeAgent::alone("dialog", "claude", &[]);
    let daemon = app.serve();
    let asks = app.enqueue("agent", "use the tool please");
    agent.wait_entry("the dialog", "hook", "PermissionRequest");
    wait_for("the ask delivered", || row(&app, asks).0 == "delivered");
    let no = app.enqueue("agent", "no");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        agent.entries("approved").is_empty() && !app.path("approved-1").exists(),
        "the tool was approved: {:?}",
        agent.log()
    );
    assert!(
        agent.entries("ignored_by_dialog").is_empty(),
        "nothing typed into the dialog"
    );
    assert_ne!(
        row(&app, no).0,
        "delivered",
        "the reply waits for the dialog"
    );
    assert_eq!(
        agent.entries("pasted").len(),
        1,
        "nothing pasted while the dialog is up"
    );
    let sessions = app.ok(&["session", "list", "--json"]);
    assert!(
        sessions.contains("\"agent_state\":\"awaiting_approval\""),
        "{sessions}"
    );
    // Denied in the terminal, the agent says nothing (no hook): after three confirmation waits
    // relayq looks at the screen, sees the agent back at its prompt, and the reply goes in a
    // turn of its own.
    agent.keys(&["Escape"]);
    agent.wait_entry("the dialog answered", "approved", false);
    wait_for("the reply delivered", || row(&app, no).0 == "delivered");
    agent.wait_entry("the reply's turn", "turn_start", "no");
    assert!(agent.entries("approved").iter().all(|a| a == "false"));
    daemon.stop();
}

/// Fault 2: Gemini CLI takes an Enter that comes too soon after a paste as a newline; the
/// text sat in the input box, marked delivered.
#[test]
fn an_enter_taken_as_a_newline_is_pressed_again_and_the_row_waits_for_the_agent() {
    let (app, agent) = FakeAgent::alone("window", "gemini", &[("FAKE_PASTE_WINDOW_MS", "700")]);
    let daemon = app.serve();
    let id = app.enqueue("agent", "please reply g1");
    agent.wait_entry("the Enter taken as a newline", "enter_as_newline", true);
    assert_ne!(
        row(&app, id).0,
        "delivered",
        "not delivered while it sits in the box"
    );
    let shown = app.ok(&["show", &id.to_string()]);
    assert!(
        shown.contains("in flight     submitted: ")
            && shown.contains(", waiting for the agent to take it"),
        "{shown}"
    );
    agent.wait_entry("the turn", "turn_start", "please reply g1");
    wait_for("confirmed", || row(&app, id).0 == "delivered");
    assert_eq!(row(&app, id).1.as_deref(), Some("BeforeAgent"));
    assert_eq!(agent.entries("pasted").len(), 1, "pasted once, never twice");
    daemon.stop();
}

/// Fault 3: Codex folds input entered during a turn into that turn: two messages, one answer.
#[test]
fn each_message_gets_its_own_turn_when_the_agent_folds_input_into_a_running_turn() {
    let (app, agent) = FakeAgent::alone(
        "fold",
        "codex",
        &[("FAKE_BUSY", "fold"), ("FAKE_TURN_MS", "1500")],
    );
    let daemon = app.serve();
    let ids: Vec<i64> = ["first", "second", "third"]
        .iter()
        .map(|m| app.enqueue("agent", m))
        .collect();
    wait_for("all three delivered", || {
        ids.iter().all(|id| row(&app, *id).0 == "delivered")
    });
    agent.wait_log("three turns", |l| {
        l.iter().filter(|e| e.get("turn_end").is_some()).count() == 3
    });
    assert_eq!(agent.entries("turn_start"), ["first", "second", "third"]);
    assert!(
        agent.entries("mid_turn").is_empty(),
        "nothing pasted during a turn"
    );
    let finished = wait_notices(&app, 3);
    let bodies: Vec<&str> = finished
        .iter()
        .map(|n| n["notice"]["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["echo: first", "echo: second", "echo: third"]);
    daemon.stop();
}

/// The "agent finished" notices written so far to the built-in notices file, once `n` are.
fn wait_notices(app: &App, n: usize) -> Vec<Value> {
    let finished = || -> Vec<Value> {
        app.lines(NOTICES)
            .into_iter()
            .filter(|n| n["event"] == "agent_stop")
            .collect()
    };
    wait_for(&format!("{n} agent-finished notices"), || {
        finished().len() >= n
    });
    finished()
}

/// Fault 9: a 10 000-character answer reached the chat as one message cut to 4 096 characters
/// with "…" (59 % lost), and when cut, Telegram got raw `<b>…</b>` markup as text.
#[test]
fn a_long_answer_reaches_telegram_whole_in_parts_that_each_fit_and_parse() {
    const TOKEN: &str = "123456:parts-test-token";
    let fake = FakeTelegram::start(TOKEN);
    let tmux = Tmux::new("long");
    let config = agent_config(&tmux, &[])
        .table(
            "channels.tg",
            &[
                "kind = \"telegram\"",
                &format!("token = {TOKEN:?}"),
                &format!("api_url = {:?}", fake.url),
            ],
        )
        .set(
            "routes",
            "default = [{ channel = \"tg\", to = \"42\", events = [\"agent_stop\"] }]",
        );
    let app = App::new(config);
    let agent = FakeAgent::start(&app, tmux, "claude", "agent", &[]);
    let daemon = app.serve();
    app.enqueue("agent", "a long answer please");
    agent.wait_entry("the answer", "answer_chars", 10000);
    fake.wait_sent(Duration::from_secs(30), |sent| sent.len() >= 3);
    std::thread::sleep(Duration::from_millis(500));
    let sent = fake.sent();
    assert_eq!(sent.len(), 3, "{sent:#?}");
    let mut whole = String::new();
    for (i, message) in sent.iter().enumerate() {
        let text = message["text"].as_str().unwrap();
        assert_eq!(message["parse_mode"], "HTML", "every part is valid HTML");
        assert!(
            text.encode_utf16().count() <= 4096,
            "part {i}: {} units",
            text.len()
        );
        assert!(!text.contains('…'), "nothing cut");
        let (head, body) = text.split_once("\n\n").unwrap();
        assert_eq!(head, format!("<b>agent</b>: agent finished ({}/3)", i + 1));
        whole += &body
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&");
    }
    let para = format!("{}end.\n\n", "word ".repeat(99));
    let answer: String = para.repeat(21).chars().take(10000).collect();
    assert_eq!(whole, answer, "the parts joined are the answer");
    daemon.stop();
}

/// Fault 10: an agent started in tmux without `RELAYQ_SESSION` got the chat's messages, but
/// its events went under its own session id: the chat never heard back, and nothing said so.
#[test]
fn an_agent_started_without_relayq_session_is_found_by_its_pane_and_a_stray_one_is_named() {
    let (app, agent) = FakeAgent::alone("pane", "claude", &[("RELAYQ_SESSION", "")]);
    let daemon = app.serve();
    let id = app.enqueue("agent", "hello from the chat");
    wait_for("confirmed by the agent", || row(&app, id).0 == "delivered");
    let finished = wait_notices(&app, 1);
    assert_eq!(
        finished[0]["session"], "agent",
        "the answer is the session's"
    );
    let sessions: Value = serde_json::from_str(&app.ok(&["session", "list", "--json"])).unwrap();
    let ours = &sessions.as_array().unwrap()[0];
    assert_eq!(ours["key"], "agent");
    assert!(
        ours["native_session_id"].as_str().unwrap().len() == 36,
        "{ours}"
    );
    assert!(ours["pane"].as_str().unwrap().starts_with('%'), "{ours}");
    assert!(!app.ok(&["status"]).contains("matches no relayq session"));

    // Outside any pane relayq types into, without RELAYQ_SESSION: kept, and named.
    let stray =
        r#"{"session_id":"native-stray","hook_event_name":"Stop","last_assistant_message":"hi"}"#;
    assert!(app.hook("claude", stray, false, &[]).status.success());
    wait_until("the stray event processed", Duration::from_secs(20), || {
        app.ok(&["status"])
            .contains("agent session native-stray (claude) matches no relayq session")
    });
    let status: Value = serde_json::from_str(&app.ok(&["status", "--json"])).unwrap();
    assert_eq!(status["unmatched_sessions"][0]["key"], "native-stray");
    wait_until("the log names it", Duration::from_secs(10), || {
        daemon.log().contains("matches no relayq session")
    });
    drop(agent);
    daemon.stop();
}

/// A Telegram bot (a fake Bot API) whose user `user` writes to session `session`, for agents
/// in tmux server `name`; `pane` adds to the pane channel's settings.
fn telegram_to(name: &str, user: i64, session: &str, pane: &[&str]) -> (FakeTelegram, Tmux, App) {
    let token = format!("123456:{name}-test-token");
    let fake = FakeTelegram::start(&token);
    let tmux = Tmux::new(name);
    let config = agent_config(&tmux, pane).telegram_source(
        &fake.url,
        &format!("token = {token:?}"),
        &[user],
        &[(user, session)],
        &[],
    );
    (fake, tmux, App::new(config))
}

/// Fault 11: a message for an agent that was not running vanished (expired after minutes, or
/// waited forever) while the chat saw "typing…" and nothing else.
#[test]
fn the_chat_is_told_when_its_message_waits_for_an_agent_and_when_it_is_dropped() {
    const ALICE: i64 = 4242;
    let (fake, _tmux, app) = telegram_to("trouble", ALICE, "absent", &["missing_grace = \"3s\""]);
    let daemon = app.serve();
    fake.push_text(ALICE, ALICE, "are you there?");
    let told = fake.wait_sent(Duration::from_secs(30), |sent| sent.len() >= 2);
    let texts: Vec<&str> = told.iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert!(
        texts[0].starts_with("<b>absent</b>: your message waits"),
        "{texts:?}"
    );
    assert!(
        texts[0].contains("tmux has no pane absent:")
            && texts[0].contains("waiting up to 3s")
            && texts[0].contains("RELAYQ_SESSION=absent"),
        "which session, why, how long, how to start the agent: {texts:?}"
    );
    assert!(
        texts[1].starts_with("<b>absent</b>: your message was dropped"),
        "{texts:?}"
    );
    assert!(texts[1].contains("session not found"), "{texts:?}");
    assert!(told.iter().all(|m| m["chat_id"] == ALICE));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(fake.sent().len(), 2, "told once each: {:?}", fake.sent());
    daemon.stop();
}

/// Faults 4 and 7 end to end: Codex's side thread (naming the task) and Claude Code's idle
/// reminder each made a second notice for one answer.
#[test]
fn a_side_thread_and_an_idle_reminder_make_no_second_notice() {
    let tmux = Rc::new(Tmux::new("quiet"));
    let app = App::new(agent_config(&tmux, &[]));
    let codex = FakeAgent::start(
        &app,
        tmux.clone(),
        "codex",
        "codex",
        &[("FAKE_SIDE_THREAD", "1")],
    );
    let claude = FakeAgent::start(&app, tmux, "claude", "claude", &[("FAKE_IDLE_MS", "300")]);
    let daemon = app.serve();
    app.enqueue("codex", "please reply c1");
    app.enqueue("claude", "please reply k1");
    codex.wait_entry("the side thread's notify", "notify", "side");
    claude.wait_log("the idle reminder", |l| {
        l.iter().filter(|e| e["hook"] == "Notification").count() == 1
    });
    let finished = wait_notices(&app, 2);
    std::thread::sleep(Duration::from_secs(2));
    let notices = app.lines(NOTICES);
    assert_eq!(notices.len(), 2, "one notice per answer: {notices:#?}");
    let mut bodies: Vec<&str> = finished
        .iter()
        .map(|n| n["notice"]["body"].as_str().unwrap())
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["echo: please reply c1", "echo: please reply k1"]);
    daemon.stop();
}

/// Fault 11, the other way in: a message for a session whose agent ended it is not typed into
/// whatever runs in the pane now; it is dropped, and its chat hears so.
#[test]
fn a_message_for_a_session_its_agent_ended_is_dropped_and_the_chat_told() {
    const BOB: i64 = 4343;
    let (fake, _tmux, app) = telegram_to("ended", BOB, "gone", &[]);
    let env = [("RELAYQ_SESSION", "gone")];
    for event in ["SessionStart", "SessionEnd"] {
        let payload = format!(r#"{{"session_id":"n1","hook_event_name":"{event}"}}"#);
        assert!(app.hook("claude", &payload, false, &env).status.success());
    }
    let daemon = app.serve();
    wait_until("the session ended", Duration::from_secs(20), || {
        app.ok(&["session", "list", "--json"])
            .contains("\"state\":\"ended\"")
    });
    fake.push_text(BOB, BOB, "still there?");
    let told = fake.wait_sent(Duration::from_secs(30), |sent| !sent.is_empty());
    let text = told[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("<b>gone</b>: your message was dropped"),
        "{text}"
    );
    assert!(text.contains("the agent ended this session"), "{text}");
    // The same from `relayq enqueue`, naming the chat.
    let out = app.run(&inbound_args(
        "gone",
        "telegram:bot",
        &[
            "--source-channel-id",
            &BOB.to_string(),
            "--source-id",
            "9",
            "and now?",
        ],
    ));
    assert!(out.status.success(), "{out:?}");
    let told = fake.wait_sent(Duration::from_secs(30), |sent| sent.len() >= 2);
    let text = told[1]["text"].as_str().unwrap();
    assert!(
        text.starts_with("<b>gone</b>: your message was dropped"),
        "{text}"
    );
    daemon.stop();
}

/// `[sessions.busy] S = "steer"`: the next message is pasted during the running turn (Codex
/// then folds it into that turn), as asked.
#[test]
fn busy_steer_pastes_during_a_turn() {
    let tmux = Tmux::new("steer");
    let app = App::new(agent_config(&tmux, &[]).set("sessions.busy", "agent = \"steer\""));
    let agent = FakeAgent::start(
        &app,
        tmux,
        "codex",
        "agent",
        &[("FAKE_BUSY", "fold"), ("FAKE_TURN_MS", "3000")],
    );
    let daemon = app.serve();
    app.enqueue("agent", "first");
    agent.wait_entry("the first turn", "turn_start", "first");
    let second = app.enqueue("agent", "second");
    agent.wait_entry("the second pasted mid-turn", "mid_turn", "second");
    wait_for("one turn with both", || {
        agent
            .entries("turn_end")
            .iter()
            .any(|t| t == "first\nsecond")
    });
    // Folded into the first turn, it never gets a prompt-submit of its own: it is looked at
    // and, gone from the input box, counted as taken, the receipt saying how.
    wait_for("the second delivered", || {
        row(&app, second).0 == "delivered"
    });
    let receipt = row(&app, second).1.unwrap();
    assert!(
        receipt.starts_with("taken into the agent's running turn"),
        "{receipt}"
    );
    daemon.stop();
}

/// A turn whose end was never reported (the agent crashed and was restarted, its Stop hook
/// failed) left the session `working` for good: its messages waited forever. After twelve
/// confirmation waits relayq looks at the screen, and pastes once the agent shows its prompt
/// with no turn running.
#[test]
fn a_turn_whose_end_was_never_reported_does_not_hold_the_session_forever() {
    let (app, agent) = FakeAgent::alone("lost", "claude", &[]);
    let daemon = app.serve();
    app.enqueue("agent", "please lose it");
    agent.wait_entry(
        "the unreported end",
        "turn_end_unreported",
        "please lose it",
    );
    let next = app.enqueue("agent", "are you back?");
    std::thread::sleep(Duration::from_secs(3));
    assert_ne!(
        row(&app, next).0,
        "delivered",
        "not while the turn may still run"
    );
    wait_until("delivered after the look", Duration::from_secs(40), || {
        row(&app, next).0 == "delivered"
    });
    assert_eq!(
        agent.entries("turn_start"),
        ["please lose it", "are you back?"]
    );
    daemon.stop();
}

/// Review: a look at an unconfirmed message that found a dialog open answered "throttled",
/// which cleared the message's send mark: once the dialog was gone, the text already pasted
/// was pasted a second time.
#[test]
fn a_dialog_found_while_looking_at_an_unconfirmed_message_never_makes_a_second_paste() {
    let (app, agent) = FakeAgent::alone("nomark", "claude", &[("FAKE_PROMPT_HOOK", "0")]);
    let daemon = app.serve();
    let id = app.enqueue("agent", "use the tool please");
    agent.wait_entry("the dialog", "hook", "PermissionRequest");
    // Looks come every second (confirm_within); the dialog stays up past several of them.
    std::thread::sleep(Duration::from_secs(5));
    agent.keys(&["Escape"]);
    agent.wait_entry("the dialog answered", "approved", false);
    wait_until("the row ends", Duration::from_secs(30), || {
        row(&app, id).0 != "leased" && row(&app, id).0 != "pending"
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        agent.entries("pasted").len(),
        1,
        "pasted once: {:?}",
        agent.log()
    );
    daemon.stop();
}

/// CI fault (PostgreSQL, 2 runs in 6 of the five-minute bridge): `kill -9` came between a
/// message's send-started mark and its paste. After the restart the row was looked at as
/// pasted, found nowhere, and dropped dead ("its agent never said it took it"): a message
/// lost. An agent that took it would have said so (its hooks keep their events while relayq
/// is down), so it is pasted now, once.
#[test]
fn a_message_marked_sent_but_cut_before_its_paste_by_a_crash_is_pasted_after_the_restart() {
    let (app, agent) = FakeAgent::alone("unpasted", "claude", &[]);
    let id = app.enqueue("agent", "sent just before the crash");
    app.cut_before_its_paste("agent", id);
    let daemon = app.serve();
    wait_for("the row ends", || {
        !matches!(row(&app, id).0.as_str(), "leased" | "pending")
    });
    let shown = app.ok(&["show", &id.to_string()]);
    assert_eq!(row(&app, id).0, "delivered", "{shown}");
    assert_eq!(
        agent.entries("pasted"),
        ["sent just before the crash"],
        "pasted once, after the restart"
    );
    daemon.stop();
}
