//! Telegram end to end: `relayq serve` polling a local Bot API that answers as Telegram does
//! (`relayq_actors::sources::telegram::fake`), the five-minute bridge into a real tmux pane, and
//! the source's offset across SIGKILL.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use relayq_actors::sources::telegram::fake::FakeTelegram;
use serde_json::json;

use crate::common::{bin, by_session, file_config, wait_until, App, Config, Tmux, ALICE};

const TOKEN: &str = "123456:bridge-test-token";
const WAIT: Duration = Duration::from_secs(30);

/// Every session to the `out` file; a Telegram source reading `fake`.
fn source_config(fake: &FakeTelegram) -> Config {
    file_config()
        .set("database", "busy_timeout = \"30s\"")
        .alice_bot(&fake.url)
}

/// The stored offset of source `bot`.
fn stored_offset(app: &App) -> Option<String> {
    app.query_value("SELECT \"offset\" FROM source_offsets WHERE source = 'bot'")
}

#[test]
fn a_kill_between_get_updates_and_the_commit_neither_loses_nor_repeats_an_update() {
    let fake = FakeTelegram::start(TOKEN);
    let app = App::new(source_config(&fake));
    let env = [("BOT_TOKEN", TOKEN)];
    let mut daemon = app.serve_with_env(&env);
    fake.push_text(ALICE, ALICE, "one");
    wait_until("one delivered", WAIT, || app.lines("out.jsonl").len() == 1);
    let before = stored_offset(&app).expect("the offset moved with the row");

    // Hold the write lock: the daemon reads two and three from Telegram but cannot commit.
    let blocker = app.hold_writes();
    let two = fake.push_text(ALICE, ALICE, "two");
    fake.push_message(json!({
        "message_id": fake.take_message_id(), "from": {"id": ALICE, "is_bot": false, "first_name": "A"},
        "chat": {"id": ALICE, "type": "private"}, "date": 1767225600, "text": "three",
    }));
    // The poll may answer with two alone (three arrived after it) and then wait on the lock
    // committing it: waiting for three here was this test's flake.
    wait_until("a poll that read two", WAIT, || fake.served() >= two);
    let polls = fake.polls().len();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        fake.polls().len(),
        polls,
        "no poll past the uncommitted batch"
    );
    daemon.signal("KILL");
    drop(blocker);
    assert_eq!(stored_offset(&app).as_deref(), Some(before.as_str()));

    let restarted_at = fake.polls().len();
    let daemon = app.serve_with_env(&env);
    let delivered = || app.lines("out.jsonl").len() >= 3;
    let start = Instant::now();
    while !delivered() && start.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        delivered(),
        "{:?}\n{}",
        app.lines("out.jsonl"),
        daemon.log()
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        by_session(&app.lines("out.jsonl"))["alice"],
        ["one", "two", "three"],
        "each update exactly once, in order"
    );
    assert_eq!(
        fake.polls()[restarted_at].to_string(),
        before,
        "after the restart the poll starts from the stored offset: Telegram sends them again"
    );
    daemon.stop();
}

#[test]
fn a_conflict_backs_off_with_a_clear_log_line_and_a_stranger_is_ignored_and_logged() {
    let fake = FakeTelegram::start(TOKEN);
    let conflict = json!({"ok": false, "error_code": 409, "description": "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"});
    fake.fail_polls(409, conflict, 4);
    let app = App::new(source_config(&fake));
    let daemon = app.serve_with_env(&[("BOT_TOKEN", TOKEN)]);
    let started = Instant::now();
    fake.push_text(ALICE, ALICE, "after the conflict");
    fake.push_text(666, 666, "let me in");
    wait_until("the message after the conflict", WAIT, || {
        !app.lines("out.jsonl").is_empty()
    });
    // Backoff 0.5 + 1 + 2 + 4 s: not a busy loop.
    assert!(
        started.elapsed() >= Duration::from_secs(7),
        "{:?}",
        started.elapsed()
    );
    assert!(fake.polls().len() <= 6, "{} polls", fake.polls().len());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        by_session(&app.lines("out.jsonl")).len(),
        1,
        "the stranger's chat feeds nothing"
    );
    let log = daemon.log();
    assert!(
        log.contains("another program is reading this bot's updates"),
        "{log}"
    );
    assert!(
        log.contains("ignored a message from someone who is not allowed")
            && log.contains("allowed_chats"),
        "{log}"
    );
    assert!(
        !log.contains("let me in"),
        "a stranger's text is not logged"
    );
    assert!(!log.contains(TOKEN), "the token is never logged");
    daemon.stop();
}

/// A stand-in for Claude Code in the pane: at its `> ` prompt, each line typed in is a prompt;
/// it reports the turn through `relayq hook` as Claude Code's hooks would, answering
/// "answer to: <line>".
fn fake_agent(log: &std::path::Path) -> String {
    format!(
        r#"while printf '> '; IFS= read -r line; do
  printf '%s\n' "$line" >> {log}
  printf '{{"session_id":"native-1","hook_event_name":"UserPromptSubmit","prompt":"%s"}}' "$line" | {bin} hook --agent claude
  printf '{{"session_id":"native-1","hook_event_name":"Stop","last_assistant_message":"answer to: %s"}}' "$line" | {bin} hook --agent claude
done"#,
        log = log.display(),
        bin = bin(),
    )
}

/// After `relayq init`: the config it wrote adapted to the test's stand-ins (a shell as the
/// agent in a private tmux server; `extra` lines at the end: the local platform), and the
/// stand-in agent ([`fake_agent`], logging to `agent_log`) started in tmux session `session`
/// as a user starts theirs. The state folder, where the database is.
pub(crate) fn stand_ins_for_init(
    app: &App,
    tmux: &Tmux,
    session: &str,
    extra: &str,
    agent_log: &std::path::Path,
) -> std::path::PathBuf {
    let config = app.path("xdg-config/relayq/config.toml");
    let written = std::fs::read_to_string(&config).unwrap();
    let programs = "programs = [\"claude\", \"codex\", \"gemini\", \"node\"]";
    assert!(written.contains(programs), "{written}");
    let adapted = written.replace(
        programs,
        &format!(
            "programs = [\"sh\"]\nsocket_name = {:?}\nsubmit_delay = \"50ms\"",
            tmux.socket
        ),
    ) + extra;
    std::fs::write(&config, adapted).unwrap();
    let state = app.path("xdg-state");
    // On PostgreSQL the agent's hooks need the database's URL, as a user's would.
    let url = app.database_url().map_or(String::new(), |url| {
        format!(" RELAYQ_DATABASE__URL={}", crate::common::shell_word(&url))
    });
    tmux.start(
        session,
        &format!(
            "export XDG_STATE_HOME={} XDG_CONFIG_HOME={} RELAYQ_SESSION={session}{url}; {}",
            state.display(),
            app.path("xdg-config").display(),
            fake_agent(agent_log)
        ),
    );
    state
}

/// The README's five-minute bridge as a new user runs it: `relayq init telegram` writes the
/// config, `relayq serve` and the agent in tmux find it without flags, a Telegram message
/// reaches the agent and its answer comes back to the chat. The daemon is killed with SIGKILL
/// mid-conversation: nothing is lost, and the order holds.
#[test]
fn five_minute_bridge_from_telegram_to_an_agent_in_tmux_and_back_across_kill_9() {
    let fake = FakeTelegram::start(TOKEN);
    let tmux = Tmux::new("bridge");
    let app = App::new("");
    let session = "agent-e2e";
    let init = app
        .bare()
        .args([
            "init",
            "telegram",
            "--user",
            &ALICE.to_string(),
            "--session",
            session,
        ])
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let printed = String::from_utf8_lossy(&init.stdout).to_string();
    assert!(
        printed.contains("\"Stop\":") && printed.contains("relayq hook --agent claude"),
        "{printed}"
    );
    assert!(
        printed.contains(&format!(
            "tmux new-session -s {session} -e RELAYQ_SESSION={session} claude"
        )),
        "{printed}"
    );

    // The test's own stand-ins: the local Bot API, a private tmux server, a shell as the agent.
    let extra = format!(
        "api_url = {:?}\npoll_timeout = \"1s\"\n\n[queues.inbound]\nbackoff = [\"200ms\"]\n",
        fake.url
    );
    let agent_log = app.path("agent.log");
    let state = stand_ins_for_init(&app, &tmux, session, &extra, &agent_log);
    let db = state.join("relayq/relayq.db");
    let serve = || {
        let mut cmd = app.bare();
        cmd.arg("serve").env("TELEGRAM_BOT_TOKEN", TOKEN);
        app.spawn_serve(cmd, &db)
    };
    let answers = |n: usize| {
        move |sent: &[serde_json::Value]| {
            (1..=n).all(|i| {
                sent.iter().any(|m| {
                    m["text"]
                        .as_str()
                        .is_some_and(|t| t.contains(&format!("answer to: message {i}")))
                })
            })
        }
    };

    let mut daemon = serve();
    for i in 1..=3 {
        fake.push_text(ALICE, ALICE, &format!("message {i}"));
    }
    fake.wait_sent(WAIT, answers(3));

    for i in 4..=6 {
        fake.push_text(ALICE, ALICE, &format!("message {i}"));
    }
    std::thread::sleep(Duration::from_millis(400));
    daemon.signal("KILL");
    let daemon = serve();
    for i in 7..=8 {
        fake.push_text(ALICE, ALICE, &format!("message {i}"));
    }
    let waited = std::panic::catch_unwind(AssertUnwindSafe(|| fake.wait_sent(WAIT, answers(8))));
    let sent = match waited {
        Ok(sent) => sent,
        Err(e) => panic!(
            "{}\ntyped into the pane:\n{}\nthe pane shows:\n{}",
            e.downcast_ref::<String>().map_or("", String::as_str),
            std::fs::read_to_string(&agent_log).unwrap_or_default(),
            tmux.screen(session)
        ),
    };

    // The agent got every message, in order (a paste cut by the kill may come twice).
    let typed = std::fs::read_to_string(&agent_log).unwrap();
    let mut firsts: Vec<&str> = Vec::new();
    for line in typed.lines() {
        if !firsts.contains(&line) {
            firsts.push(line);
        }
    }
    let expected: Vec<String> = (1..=8).map(|i| format!("message {i}")).collect();
    assert_eq!(firsts, expected, "typed into the pane:\n{typed}");
    // Every answer went to Alice's chat, as the agent's notice, in order.
    let order: Vec<usize> = sent
        .iter()
        .filter_map(|m| {
            assert_eq!(m["chat_id"], json!(ALICE));
            let text = m["text"].as_str()?;
            (1..=8).find(|i| text.ends_with(&format!("answer to: message {i}")))
        })
        .collect();
    let mut seen = Vec::new();
    for n in order {
        if !seen.contains(&n) {
            seen.push(n);
        }
    }
    assert_eq!(
        seen,
        (1..=8).collect::<Vec<_>>(),
        "answers in order: {sent:#?}"
    );
    assert!(
        sent[0]["text"].as_str().unwrap().contains(session),
        "the notice names the session"
    );
    // With progress on (the default), reactions say what became of the messages (👀 taken, or
    // at once 👌 for a turn this quick), in place of typing.
    let reacted = fake
        .chat_calls()
        .iter()
        .any(|c| c.method == "setMessageReaction");
    assert!(reacted, "the chat saw its messages' receipts");
    assert!(fake.actions().is_empty(), "no typing where progress shows");
    daemon.stop();

    // `relayq session list` shows where the session's answers go.
    let mut list = app.bare();
    list.args(["session", "list", "--json"]);
    let listed = list.output().unwrap();
    let sessions: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let ours = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == session)
        .unwrap_or_else(|| panic!("{sessions}"));
    assert_eq!(
        ours["origin"],
        json!({"origin": "telegram:telegram", "chat": ALICE.to_string(), "thread": null})
    );
}

/// [`source_config`] in webhook mode (its secret from `$HOOK_SECRET`), the API on `port`.
fn webhook_mode(fake: &FakeTelegram, port: u16) -> Config {
    source_config(fake)
        .set("sources.bot", "mode = \"webhook\"")
        .set("sources.bot", "webhook_secret_env = \"HOOK_SECRET\"")
        .http_on(port)
}

/// The update of `tests/fixtures/telegram/update_text.json`, as Telegram posts it.
fn fixture_update() -> serde_json::Value {
    let text = std::fs::read_to_string("tests/fixtures/telegram/update_text.json").unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn in_webhook_mode_an_update_is_committed_before_the_200_and_survives_a_kill_9_right_after() {
    let fake = FakeTelegram::start(TOKEN);
    let port = crate::common::api::free_port();
    let config = webhook_mode(&fake, port).set(
        "sources.bot",
        "webhook_url = \"https://relayq.example/v1/ingress/bot\"",
    );
    let app = App::new(config);
    let env = [("BOT_TOKEN", TOKEN), ("HOOK_SECRET", "s3cret_hook-1")];
    let mut daemon = app.serve_with_env(&env);
    let url = format!("http://127.0.0.1:{port}/v1/ingress/bot");
    let client = reqwest::blocking::Client::new();
    wait_until("the webhook registered", WAIT, || {
        !fake.webhooks().is_empty()
    });
    let registered = &fake.webhooks()[0];
    assert_eq!(
        (&registered["url"], &registered["secret_token"]),
        (
            &json!("https://relayq.example/v1/ingress/bot"),
            &json!("s3cret_hook-1")
        )
    );
    let try_push = |secret: &str, update: &serde_json::Value| {
        client
            .post(&url)
            .header("X-Telegram-Bot-Api-Secret-Token", secret)
            .json(update)
            .send()
    };
    let push = |secret: &str, update: &serde_json::Value| try_push(secret, update).unwrap();
    let rows = |app: &App| app.inbound_rows();

    // Without the secret (or with another), nothing is written.
    let update = fixture_update();
    assert_eq!(push("guess", &update).status(), 401);
    assert_eq!(rows(&app), 0);

    // 200 means committed: the row is on disk before the answer, and a kill -9 right after
    // the answer loses nothing.
    let answer = push("s3cret_hook-1", &update);
    assert_eq!(answer.status(), 200);
    assert_eq!(rows(&app), 1, "committed before the 200");
    daemon.signal("KILL");
    let daemon = app.serve_with_env(&env);
    wait_until("delivered after the restart", WAIT, || {
        app.lines("out.jsonl").len() == 1
    });
    let line = &app.lines("out.jsonl")[0];
    assert_eq!(
        (line["session"].as_str(), line["content"].as_str()),
        (Some("alice"), Some("please run the tests again"))
    );

    // Telegram's retry of an update it saw no answer to is a duplicate, not a second row.
    wait_until("the API back", WAIT, || {
        try_push("s3cret_hook-1", &update).is_ok_and(|r| r.status() == 200)
    });
    assert_eq!(rows(&app), 1, "the retry wrote nothing");
    assert!(fake.polls().is_empty(), "no getUpdates in webhook mode");
    daemon.stop();
}

/// Issue 27, item 6: a webhook push over `daemon.max_body_bytes` was answered 400, so Telegram
/// retried it for ever and the updates behind it waited. Answered 200, kept expired and cut,
/// and `status` says so.
#[test]
fn a_webhook_push_over_max_body_bytes_is_answered_200_and_kept_as_refused() {
    let fake = FakeTelegram::start(TOKEN);
    let port = crate::common::api::free_port();
    let config = webhook_mode(&fake, port).set("daemon", "max_body_bytes = 1000");
    let app = App::new(config);
    let daemon = app.serve_with_env(&[("BOT_TOKEN", TOKEN), ("HOOK_SECRET", "s3cret_hook-1")]);
    let url = format!("http://127.0.0.1:{port}/v1/ingress/bot");
    let mut update = fixture_update();
    update["message"]["text"] = json!("long ".repeat(400));
    let client = reqwest::blocking::Client::new();
    let push = || {
        client
            .post(&url)
            .header("X-Telegram-Bot-Api-Secret-Token", "s3cret_hook-1")
            .json(&update)
            .send()
            .unwrap()
    };
    let answer = push();
    assert_eq!(answer.status(), 200, "Telegram moves on");
    let body: serde_json::Value = answer.json().unwrap();
    assert_eq!(body["refused"], 1);
    assert_eq!(push().status(), 200, "its retry too");
    let status = app.ok(&["status"]);
    assert!(
        status.contains("refused: over daemon.max_body_bytes"),
        "{status}"
    );
    let rows = app.engine().counts().unwrap();
    let expired: i64 = rows
        .iter()
        .filter(|c| c.state == "expired")
        .map(|c| c.count)
        .sum();
    assert_eq!(expired, 1, "kept once: {rows:?}");
    daemon.stop();
    assert!(app.lines("out.jsonl").is_empty(), "never delivered");
}
