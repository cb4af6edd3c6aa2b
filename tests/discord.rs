//! The whole bridge on Discord, as a user runs it: `relayq serve` holding the gateway of a
//! local Discord (`relayq_actors::sources::discord::fake`, REST and gateway on loopback, as
//! discord.com/developers documents them). What a restart resumes and what a lost session
//! reads from history; questions as buttons, clicked once, a stranger refused; sessions as
//! threads from the chat.

use std::time::Duration;

use relayq_actors::sources::discord::fake::FakeDiscord;
use serde_json::{json, Value};

use crate::agents::{agent_config, FakeAgent};
use crate::common::*;

const TOKEN: &str = "MTMwMDAwMDAwMDAwMDAwMDk5OQ.GfakeE.discord-bridge-token";
const ALICE: &str = "1300000000000000001";
const MALLORY: &str = "1300000000000000666";
const CHANNEL: &str = "1300000000000000100";

/// `[sources.bot]` reading `fake`'s gateway, Alice allowed, `CHANNEL` feeding `session`.
fn discord_source(config: Config, fake: &FakeDiscord, routing: &str) -> Config {
    config.table(
        "sources.bot",
        &[
            "kind = \"discord\"".to_string(),
            format!("token = {TOKEN:?}"),
            format!("api_url = {:?}", fake.api_url),
            format!("allowed_users = [\"{ALICE}\"]"),
            routing.to_string(),
        ],
    )
}

/// Message `n`'s id (a snowflake).
fn id(n: u64) -> String {
    (1_350_000_000_000_000_000 + n).to_string()
}

fn delivered(app: &App) -> Vec<String> {
    by_session(&app.lines("out.jsonl"))
        .remove("alice")
        .unwrap_or_default()
}

fn wait_delivered(app: &App, expected: &[&str], daemon: &Daemon) {
    wait_until(
        &format!("{expected:?} delivered"),
        Duration::from_secs(30),
        || delivered(app).len() >= expected.len(),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(delivered(app), expected, "{}", daemon.log());
}

/// A restart within the session's window resumes it (RESUME, not IDENTIFY) and gets what was
/// written meanwhile; a session Discord forgot is replaced by exactly one IDENTIFY, and what
/// was written while none was open is read from the channel's history: nothing lost, nothing
/// twice.
#[test]
fn a_restart_resumes_the_session_and_a_lost_one_is_replaced_once_and_caught_up_from_history() {
    let fake = FakeDiscord::start(TOKEN);
    let config = discord_source(
        file_config(),
        &fake,
        &format!("chats = {{ \"{CHANNEL}\" = \"alice\" }}"),
    );
    let app = App::new(config);
    let daemon = app.serve();
    wait_until("a session", Duration::from_secs(30), || fake.connected());
    fake.push_message(CHANNEL, ALICE, &id(1), "one");
    wait_delivered(&app, &["one"], &daemon);
    assert_eq!((fake.identifies(), fake.resumes()), (1, 0));
    daemon.stop();

    // Written while relayq is stopped: on the session, which Discord keeps for its resume.
    fake.push_message(CHANNEL, ALICE, &id(2), "two");
    let daemon = app.serve();
    wait_delivered(&app, &["one", "two"], &daemon);
    assert_eq!(
        (fake.identifies(), fake.resumes()),
        (1, 1),
        "the restart resumed the session: no second IDENTIFY"
    );
    daemon.stop();

    // Discord forgot the session while relayq was away: what was written then is on no
    // session, only in the channel.
    fake.invalidate_sessions();
    fake.push_message(CHANNEL, ALICE, &id(3), "three");
    fake.push_message(CHANNEL, MALLORY, &id(4), "let me in");
    let daemon = app.serve();
    wait_delivered(&app, &["one", "two", "three"], &daemon);
    assert_eq!(
        (fake.identifies(), fake.resumes()),
        (2, 2),
        "one failed RESUME, then one IDENTIFY"
    );
    fake.push_message(CHANNEL, ALICE, &id(5), "four");
    wait_delivered(&app, &["one", "two", "three", "four"], &daemon);
    assert_eq!(app.inbound_rows(), 4, "no row twice, none for the stranger");
    assert_eq!(fake.identifies(), 2);
    daemon.stop();
}

/// A Discord bridge to a fake agent: the question comes with buttons; a stranger's click is
/// refused where they clicked (ephemeral) and changes nothing; Alice's click is acknowledged
/// with a deferred update within Discord's 3 s, the tool runs once, the question is edited to
/// its outcome with its buttons gone; a second click is told "already".
#[test]
fn discord_buttons_answer_once_and_a_strangers_click_is_refused() {
    let fake = FakeDiscord::start(TOKEN);
    let tmux = Tmux::new("approve-discord");
    let config = discord_source(
        agent_config(&tmux, &[]),
        &fake,
        &format!("chats = {{ \"{CHANNEL}\" = \"agent\" }}"),
    );
    let app = App::new(config);
    let agent = FakeAgent::start(&app, tmux, "claude", "agent", &[]);
    let daemon = app.serve();
    wait_until("a session", Duration::from_secs(30), || fake.connected());
    let decisions = || -> Vec<bool> {
        agent
            .log()
            .iter()
            .filter_map(|e| e["approved"].as_bool())
            .collect()
    };
    let callbacks = |n: usize| -> Vec<(Value, Duration)> {
        wait_until(
            &format!("{n} click answers"),
            Duration::from_secs(30),
            || fake.callbacks().len() >= n,
        );
        fake.callbacks()
            .into_iter()
            .map(|(_, b, t)| (b, t))
            .collect()
    };

    fake.push_message(CHANNEL, ALICE, &id(1), "please use the tool");
    let mut question = None;
    wait_until("the question with buttons", Duration::from_secs(30), || {
        question = fake
            .bot_messages()
            .into_iter()
            .find(|m| m["components"].is_array());
        question.is_some()
    });
    let question = question.unwrap();
    assert_eq!(question["channel_id"], CHANNEL);
    assert!(
        question["content"]
            .as_str()
            .unwrap()
            .contains("touch probe.txt"),
        "{question:#}"
    );
    let buttons: Vec<(String, String)> = question["components"][0]["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["label"].as_str().unwrap().to_string(),
                b["custom_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let labels: Vec<&str> = buttons.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["Allow", "Deny", "Allow for this session"]);
    let allow = &buttons[0].1;
    let message = question["id"].as_str().unwrap();

    fake.click(CHANNEL, message, MALLORY, allow);
    let (refusal, _) = callbacks(1).remove(0);
    assert_eq!(refusal["type"], 4, "an ephemeral message: {refusal}");
    assert_eq!(refusal["data"]["flags"], 64, "{refusal}");
    assert!(
        refusal["data"]["content"]
            .as_str()
            .unwrap()
            .starts_with("You may not answer"),
        "{refusal}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(decisions().is_empty(), "a stranger's click changes nothing");

    fake.click(CHANNEL, message, ALICE, allow);
    let (ack, took) = callbacks(2).remove(1);
    assert_eq!(ack, json!({"type": 6}), "a deferred update");
    assert!(
        took < Duration::from_secs(3),
        "within Discord's 3 s: {took:?}"
    );
    wait_until("the decision", Duration::from_secs(30), || {
        !decisions().is_empty()
    });
    fake.click(CHANNEL, message, ALICE, allow);
    let (again, _) = callbacks(3).remove(2);
    assert!(
        again["data"]["content"]
            .as_str()
            .unwrap()
            .starts_with("Already allowed"),
        "{again}"
    );
    wait_until("the question edited", Duration::from_secs(30), || {
        fake.edits().iter().any(|(_, m, _)| m == message)
    });
    let (_, _, edit) = fake
        .edits()
        .into_iter()
        .find(|(_, m, _)| m == message)
        .unwrap();
    assert_eq!(edit["components"], json!([]), "its buttons gone: {edit}");
    assert!(
        edit["content"].as_str().unwrap().contains("Allowed by"),
        "{edit}"
    );
    agent.wait_entry("the turn's end", "turn_end", "please use the tool");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(decisions(), [true], "the tool ran once");
    daemon.stop();
}

/// Threads are sessions on Discord: `/new demo claude one` typed in the channel opens a thread
/// named after the session, and the ready message goes in it; a message written in the thread
/// reaches the session and its answer comes back there; `/stop` in the thread asks with
/// buttons, the click stops the session, said in the thread, and the thread is archived.
#[test]
fn in_discord_each_session_gets_a_thread_and_its_answers_stay_there() {
    let fake = FakeDiscord::start(TOKEN);
    let tmux = Tmux::new("chat-discord");
    let app = App::new(Config::default());
    let config = tmux.agent_config(&["programs = [\"python3\"]", "missing_grace = \"5s\""]);
    let config = discord_source(config, &fake, "session_template = \"discord-{channel}\"").table(
        "projects.demo",
        &crate::chat_sessions::demo_project(app.dir.path(), &app.hook_argv("claude"), &[]),
    );
    app.write_config(config);
    let daemon = app.serve();
    wait_until("a session", Duration::from_secs(30), || fake.connected());
    // What the bot wrote: (channel, content, components).
    let wait_posted = |part: &str| -> Value {
        wait_until(
            &format!("Discord gets {part:?}"),
            Duration::from_secs(40),
            || {
                fake.bot_messages()
                    .iter()
                    .any(|m| m["content"].as_str().unwrap_or_default().contains(part))
            },
        );
        fake.bot_messages()
            .into_iter()
            .rev()
            .find(|m| m["content"].as_str().unwrap_or_default().contains(part))
            .unwrap()
    };

    fake.push_message(CHANNEL, ALICE, &id(1), "/new demo claude one");
    let ready = wait_posted("one is ready: claude in demo");
    let threads = fake.threads();
    assert_eq!(threads.len(), 1, "one thread: {threads:?}");
    let thread = threads[0]["id"].as_str().unwrap().to_string();
    assert_eq!(threads[0]["parent_id"], CHANNEL);
    assert!(
        threads[0]["name"].as_str().unwrap().contains("one"),
        "{threads:?}"
    );
    assert_eq!(ready["channel_id"], json!(thread), "ready in the thread");
    assert!(
        ready["content"]
            .as_str()
            .unwrap()
            .contains("Write in this thread"),
        "{ready}"
    );

    fake.push_message(&thread, ALICE, &id(2), "hello one");
    let answer = wait_posted("echo: hello one");
    assert_eq!(
        answer["channel_id"],
        json!(thread),
        "answered in the thread"
    );

    fake.push_message(&thread, ALICE, &id(3), "/stop");
    let ask = wait_posted("Stop one (claude in demo)?");
    assert_eq!(ask["channel_id"], json!(thread));
    let stop = ask["components"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row["components"].as_array().unwrap().iter())
        .find(|b| b["label"].as_str().unwrap().starts_with("Stop"))
        .map(|b| b["custom_id"].as_str().unwrap().to_string())
        .unwrap();
    fake.click(&thread, ask["id"].as_str().unwrap(), ALICE, &stop);
    let stopped = wait_posted("one stopped");
    assert_eq!(stopped["channel_id"], json!(thread), "said in the thread");
    wait_until("its tmux session gone", Duration::from_secs(20), || {
        !crate::chat_sessions::tmux_sessions(&tmux).contains(&"one".to_string())
    });
    wait_until("the thread archived", Duration::from_secs(20), || {
        fake.threads()[0]["thread_metadata"]["archived"] == json!(true)
    });
    daemon.stop();
}

/// The README's five minutes on Discord, as a new user runs them: `relayq init discord`
/// writes the config, `relayq serve` and the agent in tmux find it without flags, a Discord
/// message reaches the agent and its answer comes back to the channel.
#[test]
fn five_minute_bridge_from_discord_to_an_agent_in_tmux_and_back() {
    let fake = FakeDiscord::start(TOKEN);
    let tmux = Tmux::new("bridge-discord");
    let app = App::new("");
    let session = "agent-discord";
    let init = app
        .bare()
        .args(["init", "discord", "--user", ALICE, "--channel", CHANNEL])
        .args(["--session", session])
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let printed = String::from_utf8_lossy(&init.stdout).to_string();
    assert!(printed.contains("export DISCORD_BOT_TOKEN="), "{printed}");
    assert!(printed.contains("Message Content Intent"), "{printed}");
    let bad = app
        .bare()
        .args([
            "init",
            "discord",
            "--user",
            "alice",
            "--channel",
            CHANNEL,
            "--force",
        ])
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(2),
        "a user that is no id is refused"
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("Developer Mode"));

    // The test's own stand-ins: the local Discord, a private tmux server, a shell as the agent.
    let agent_log = app.path("agent.log");
    let extra = format!("api_url = {:?}\n", fake.api_url);
    let state = crate::telegram::stand_ins_for_init(&app, &tmux, session, &extra, &agent_log);
    let mut cmd = app.bare();
    cmd.arg("serve").env("DISCORD_BOT_TOKEN", TOKEN);
    let daemon = app.spawn_serve(cmd, &state.join("relayq/relayq.db"));
    wait_until("a session", Duration::from_secs(30), || fake.connected());
    for i in 1..=3u64 {
        fake.push_message(CHANNEL, ALICE, &id(i), &format!("message {i}"));
    }
    wait_until("three answers", Duration::from_secs(40), || {
        let said: Vec<String> = fake
            .bot_messages()
            .iter()
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect();
        (1..=3).all(|i| {
            said.iter()
                .any(|t| t.contains(&format!("answer to: message {i}")))
        })
    });
    for m in fake.bot_messages() {
        assert_eq!(m["channel_id"], CHANNEL, "answered where it was asked");
    }
    let typed = std::fs::read_to_string(&agent_log).unwrap();
    assert_eq!(
        typed.lines().collect::<Vec<_>>(),
        ["message 1", "message 2", "message 3"]
    );
    // Progress: each message shows it was taken, then done, as the bot's reactions.
    wait_until(
        "the first message marked done",
        Duration::from_secs(30),
        || {
            fake.reactions()
                .iter()
                .any(|(c, m, e, on)| c == CHANNEL && *m == id(1) && e == "✅" && *on)
        },
    );
    daemon.stop();
}

/// 50 restarts of relayq during traffic on the gateway, each a `kill -9` at a different point
/// of it: every message is one row (none lost, none twice), and every restart resumed the one
/// gateway session (a single IDENTIFY in all).
#[test]
fn fifty_restarts_during_traffic_lose_nothing_and_write_nothing_twice() {
    let fake = FakeDiscord::start(TOKEN);
    let config = discord_source(
        file_config(),
        &fake,
        &format!("chats = {{ \"{CHANNEL}\" = \"alice\" }}"),
    );
    let app = App::new(config);
    let mut n = 0u64;
    for round in 0..50u64 {
        let mut daemon = app.serve();
        wait_until("a session", Duration::from_secs(30), || fake.connected());
        for _ in 0..3 {
            n += 1;
            fake.push_message(CHANNEL, ALICE, &id(n), &format!("m{n}"));
        }
        if round == 0 {
            // The session is stored with the first rows: from then on, every start resumes.
            wait_until("the first rows", Duration::from_secs(30), || {
                app.inbound_rows() == 3
            });
        }
        std::thread::sleep(Duration::from_millis(15 * (round % 7)));
        daemon.signal("KILL");
    }
    let daemon = app.serve();
    wait_until("every message a row", Duration::from_secs(60), || {
        app.inbound_rows() >= n as i64
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(app.inbound_rows(), n as i64, "no message twice");
    let ids: Vec<String> = app.query(
        "SELECT dedup_key FROM queue_rows WHERE queue = 'inbound' ORDER BY id",
        |r| r.get(0),
    );
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "no row twice");
    wait_until("every message delivered", Duration::from_secs(60), || {
        let delivered: std::collections::BTreeSet<String> = delivered(&app).into_iter().collect();
        (1..=n).all(|i| delivered.contains(&format!("m{i}")))
    });
    assert_eq!(
        fake.identifies(),
        1,
        "every restart resumed: {} resumes",
        fake.resumes()
    );
    daemon.stop();
}

/// A photo written on Discord reaches the agent as a file in its project (fetched from
/// Discord's CDN, no token sent), with the text beside it; an attachment whose address is off
/// the CDN is not fetched, and the agent and the chat are told.
#[test]
fn a_photo_from_discord_reaches_the_agent_as_a_file_and_an_address_off_its_cdn_is_refused() {
    let fake = FakeDiscord::start(TOKEN);
    let tmux = Tmux::new("files-discord");
    let config = discord_source(
        agent_config(&tmux, &[]),
        &fake,
        &format!("chats = {{ \"{CHANNEL}\" = \"agent\" }}"),
    );
    let app = App::new(config);
    let agent = FakeAgent::start(&app, tmux, "claude", "agent", &[]);
    let daemon = app.serve();
    wait_until(
        "the agent's directory known",
        Duration::from_secs(20),
        || app.ok(&["session", "list", "--json"]).contains("\"cwd\""),
    );
    wait_until("a session", Duration::from_secs(30), || fake.connected());
    let png = [
        &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A][..],
        &[7u8; 3000],
    ]
    .concat();
    let url = fake.add_file("screen.png", &png);
    let photo = json!([{"id": "1350000000000000901", "filename": "screen.png", "size": png.len(),
                        "url": url, "proxy_url": url, "content_type": "image/png",
                        "width": 800, "height": 600}]);
    fake.push_message_with(CHANNEL, ALICE, &id(1), "what is wrong here?", photo, 0);
    agent.wait_log("the photo's prompt", |_| {
        !agent.entries("turn_start").is_empty()
    });
    let prompt = agent.entries("turn_start").remove(0);
    assert!(
        prompt.starts_with("what is wrong here?\n[photo"),
        "{prompt}"
    );
    let line = prompt.lines().find(|l| l.contains("photo")).unwrap();
    let path = line.rsplit_once(": ").unwrap().1.trim_end_matches(']');
    assert_eq!(std::fs::read(path).unwrap(), png, "the whole file");

    // An address off Discord's CDN is not fetched: a line says so, to the agent and the chat.
    let elsewhere = json!([{"id": "1350000000000000902", "filename": "x.txt", "size": 3,
                            "url": "https://example.org/x.txt", "content_type": "text/plain"}]);
    fake.push_message_with(CHANNEL, ALICE, &id(2), "", elsewhere, 0);
    agent.wait_log("the second prompt", |_| {
        agent.entries("turn_start").len() >= 2
    });
    let prompt = &agent.entries("turn_start")[1];
    assert!(prompt.contains("not on Discord's CDN"), "{prompt}");
    wait_until("the chat told", Duration::from_secs(30), || {
        fake.bot_messages().iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|t| t.contains("not on Discord's CDN"))
        })
    });
    daemon.stop();
}
