//! Who may do what, from outside: pairing on a chat source (a stranger's `/pair`, an
//! approver's `/approve`, the operator's `relayq users`), and the strangers matrix over
//! Telegram, Slack and Discord: every command, button, reaction and message from someone not
//! allowed has no effect, answers at most one refusal that names no session, agent or project, and is
//! logged without its text.

use std::time::Duration;

use relayq_actors::sources::discord::fake::FakeDiscord;
use relayq_actors::sources::slack::fake_socket::FakeSlackSocket;
use relayq_actors::sources::slack::fake_web::FakeSlackWeb;
use relayq_actors::sources::telegram::fake::FakeTelegram;
use relayq_engine::approvals::{button_data, Decision, Scope};
use serde_json::{json, Value};

use crate::common::*;

const TOKEN: &str = "123456:access-token";
const ALICE: i64 = 777001;
const BOB: i64 = 777002;
const MALLORY: i64 = 666;

/// A Telegram bridge: Alice approves (allowed_users, no `approvers`); each private chat feeds
/// its own session, delivered to `out.jsonl`.
fn telegram_bridge(fake: &FakeTelegram) -> App {
    let config = file_config().telegram_source(
        &fake.url,
        &format!("token = {TOKEN:?}"),
        &[ALICE],
        &[(ALICE, "alice")],
        &["session_template = \"tg{chat}\""],
    );
    App::new(config)
}

fn wait_said(fake: &FakeTelegram, chat: i64, part: &str) -> String {
    wait_until(
        &format!("{part:?} said in {chat}"),
        Duration::from_secs(30),
        || fake.texts_to(chat).iter().any(|t| t.contains(part)),
    );
    fake.texts_to(chat)
        .into_iter()
        .rev()
        .find(|t| t.contains(part))
        .unwrap()
}

/// Runs `relayq args`, expecting the usage error's exit 2; its stderr.
fn fails(app: &App, args: &[&str]) -> String {
    let out = app.run(args);
    assert_eq!(out.status.code(), Some(2), "relayq {args:?}: {out:?}");
    String::from_utf8(out.stderr).unwrap()
}

/// The pairing code in `text`.
fn code_in(text: &str) -> String {
    let at = text.find("code").expect("a code");
    text[at..]
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|w| w.len() == 6 && *w != "approve")
        .unwrap_or_else(|| panic!("no code in {text:?}"))
        .to_string()
}

/// Bob is a stranger: his message is not taken and his chat is told once; `/pair` gives him a
/// code (the same one while it is good); a wrong code changes nothing; Alice's `/approve`
/// adds him as a writer, and he and she are told; his messages then reach his session, but
/// a writer starts no session; the code works once; `relayq users list` shows him and
/// `relayq users remove` takes him out again.
#[test]
fn pairing_lets_a_stranger_in_once_approved_and_the_operator_can_list_and_remove_them() {
    let fake = FakeTelegram::start(TOKEN);
    let app = telegram_bridge(&fake);
    let daemon = app.serve();
    fake.push_text(BOB, BOB, "hello, is this thing on");
    wait_said(&fake, BOB, "Send /pair to ask for access");
    fake.push_text(BOB, BOB, "hello?");
    fake.push_text(BOB, BOB, "/pair");
    let told = wait_said(&fake, BOB, "Your pairing code");
    let code = code_in(&told);
    fake.push_text(BOB, BOB, "/pair");
    wait_said(&fake, BOB, &format!("Your code {code} is good until"));
    assert_eq!(
        fake.texts_to(BOB)
            .iter()
            .filter(|t| t.contains("Send /pair"))
            .count(),
        1,
        "told once: {:?}",
        fake.texts_to(BOB)
    );

    fake.push_text(ALICE, ALICE, "/approve ZZZZZZ");
    wait_said(&fake, ALICE, "no such code");
    fake.push_text(ALICE, ALICE, &format!("/approve {code}"));
    wait_said(&fake, ALICE, "may now write here.");
    wait_said(&fake, BOB, "You may now write here.");

    fake.push_text(BOB, BOB, "now I may write");
    wait_until("Bob's message delivered", Duration::from_secs(30), || {
        by_session(&app.lines("out.jsonl")).contains_key(&format!("tg{BOB}"))
    });
    let bob = by_session(&app.lines("out.jsonl")).remove(&format!("tg{BOB}"));
    assert_eq!(bob.unwrap(), ["now I may write"], "nothing from before");
    fake.push_text(BOB, BOB, "/new demo");
    wait_said(&fake, BOB, "names as approvers may start");
    fake.push_text(ALICE, ALICE, &format!("/approve {code}"));
    wait_said(&fake, ALICE, "used already");

    let listed: Value = serde_json::from_str(&app.ok(&["users", "list", "--json"])).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["origin"], "telegram:bot");
    assert_eq!(listed[0]["user_id"], BOB.to_string());
    assert_eq!(listed[0]["role"], "writer");
    app.ok(&["users", "remove", "bot", &BOB.to_string()]);
    assert_eq!(app.ok(&["users", "list", "--json"]).trim(), "[]", "removed");
    let refused = fails(&app, &["users", "remove", "bot", &BOB.to_string()]);
    assert!(refused.contains("relayq users list"), "{refused}");
    fake.push_text(BOB, BOB, "and now?");
    fake.push_text(ALICE, ALICE, "a control message");
    wait_until("Alice's message delivered", Duration::from_secs(30), || {
        by_session(&app.lines("out.jsonl")).contains_key("alice")
    });
    std::thread::sleep(Duration::from_millis(500));
    let bob = by_session(&app.lines("out.jsonl")).remove(&format!("tg{BOB}"));
    assert_eq!(bob.unwrap(), ["now I may write"], "removed: not taken");
    let log = daemon.log();
    assert!(
        !log.contains("is this thing on"),
        "a stranger's text is not logged"
    );
    assert!(!log.contains(&code), "a code is not logged");
    daemon.stop();
}

/// The operator approves a code from the terminal, as an approver; a wrong one is a usage
/// error (exit 2) that says what to do.
#[test]
fn relayq_users_approve_adds_the_person_with_the_role_given() {
    let fake = FakeTelegram::start(TOKEN);
    let app = telegram_bridge(&fake);
    let daemon = app.serve();
    fake.push_text(BOB, BOB, "/pair");
    let code = code_in(&wait_said(&fake, BOB, "Your pairing code"));
    let wrong = fails(&app, &["users", "approve", "ZZZZZZ"]);
    assert!(wrong.contains("no such code"), "{wrong}");
    let added = app.ok(&["users", "approve", &code, "--role", "approver"]);
    assert!(
        added.contains("added to telegram:bot as approver"),
        "{added}"
    );
    wait_said(&fake, BOB, "You may now write here and approve.");
    // An approver starts sessions: `/sessions` answers (no project is needed to list).
    fake.push_text(BOB, BOB, "/sessions");
    wait_said(&fake, BOB, "No sessions");
    daemon.stop();
}

/// What a stranger tries, on any platform.
const STRANGER_TEXTS: [&str; 9] = [
    "/new demo claude mine",
    "/sessions",
    "/stop alice",
    "/resume demo",
    "/status",
    "/progress off",
    "/approve ABCDEF writer",
    "/allow a1b2c3",
    "the secret plan: rm -rf ~",
];

/// What the platform was told in the stranger's chat, and the daemon: nothing taken, nothing
/// started, at most one refusal naming nothing, the text not logged.
fn assert_nothing_leaked(app: &App, told: &[String], log: &str) {
    assert_eq!(app.inbound_rows(), 1, "only Alice's message is a row");
    let started: Option<i64> = app.query_value("SELECT COUNT(*) FROM chat_sessions");
    assert_eq!(started, Some(0), "no session started");
    let done: Option<i64> =
        app.query_value("SELECT COUNT(*) FROM session_commands WHERE state <> 'failed'");
    assert_eq!(done, Some(0), "every command refused");
    let users: Option<i64> = app.query_value("SELECT COUNT(*) FROM chat_users");
    assert_eq!(users, Some(0));
    assert!(told.len() <= 1, "at most one refusal: {told:?}");
    for text in told {
        for named in ["alice", "claude", "demo", "agent"] {
            assert!(
                !text.to_lowercase().contains(named),
                "the refusal names {named}: {text}"
            );
        }
    }
    assert!(
        !log.contains("secret plan"),
        "a stranger's text is not logged"
    );
}

#[test]
fn a_stranger_on_telegram_changes_nothing_and_hears_one_refusal() {
    let fake = FakeTelegram::start(TOKEN);
    let app = telegram_bridge(&fake);
    let daemon = app.serve();
    for text in STRANGER_TEXTS {
        fake.push_text(MALLORY, MALLORY, text);
    }
    // A click on an approval's button and on a session button.
    let allow = button_data("a1b2c3", Decision::Allow(Scope::Once));
    fake.push_tap(MALLORY, MALLORY, "mallory", 1, &allow);
    fake.push_tap(MALLORY, MALLORY, "mallory", 1, "relayq-s:stop:1");
    // A reaction on the bot's message.
    fake.push_update(json!({"message_reaction": {
        "chat": {"id": MALLORY, "type": "private"}, "message_id": 1, "date": 1767225600,
        "user": {"id": MALLORY, "is_bot": false, "first_name": "Mallory"},
        "old_reaction": [], "new_reaction": [{"type": "emoji", "emoji": "👍"}]}}));
    fake.push_text(ALICE, ALICE, "a control message");
    wait_until("the control message", Duration::from_secs(30), || {
        by_session(&app.lines("out.jsonl")).contains_key("alice")
    });
    wait_until("both taps answered", Duration::from_secs(30), || {
        fake.tap_answers().len() >= 2
    });
    std::thread::sleep(Duration::from_secs(1));
    for answer in fake.tap_answers() {
        assert!(answer.contains("may not"), "{answer}");
    }
    assert_nothing_leaked(&app, &fake.texts_to(MALLORY), &daemon.log());
    daemon.stop();
}

#[test]
fn a_stranger_on_discord_changes_nothing_and_hears_one_refusal() {
    const DISCORD_TOKEN: &str = "MTMwMDAwMDAwMDAwMDAwMDk5OQ.GfakeE.access-discord-token";
    const CHANNEL: &str = "1300000000000000100";
    const STRANGERS_CHANNEL: &str = "1300000000000000200";
    const ALICE_ID: &str = "1300000000000000001";
    const MALLORY_ID: &str = "1300000000000000666";
    let fake = FakeDiscord::start(DISCORD_TOKEN);
    let config = file_config().table(
        "sources.bot",
        &[
            "kind = \"discord\"".to_string(),
            format!("token = {DISCORD_TOKEN:?}"),
            format!("api_url = {:?}", fake.api_url),
            format!("allowed_users = [\"{ALICE_ID}\"]"),
            format!("chats = {{ \"{CHANNEL}\" = \"alice\" }}"),
            "session_template = \"discord-{channel}\"".to_string(),
        ],
    );
    let app = App::new(config);
    let daemon = app.serve();
    wait_until("a session", Duration::from_secs(30), || fake.connected());
    for (n, text) in STRANGER_TEXTS.iter().enumerate() {
        let id = (1_350_000_000_000_000_000u64 + n as u64).to_string();
        fake.push_message(STRANGERS_CHANNEL, MALLORY_ID, &id, text);
    }
    let allow = button_data("a1b2c3", Decision::Allow(Scope::Once));
    fake.click(STRANGERS_CHANNEL, "1350000000000000999", MALLORY_ID, &allow);
    fake.click(
        STRANGERS_CHANNEL,
        "1350000000000000999",
        MALLORY_ID,
        "relayq-s:stop:1",
    );
    fake.dispatch(
        "MESSAGE_REACTION_ADD",
        json!({"user_id": MALLORY_ID, "channel_id": STRANGERS_CHANNEL,
               "guild_id": "1300000000000000900", "message_id": "1350000000000000999",
               "emoji": {"id": null, "name": "👍"}, "burst": false, "type": 0}),
    );
    fake.push_message(
        CHANNEL,
        ALICE_ID,
        "1350000000000000500",
        "a control message",
    );
    wait_until("the control message", Duration::from_secs(30), || {
        by_session(&app.lines("out.jsonl")).contains_key("alice")
    });
    wait_until("both clicks answered", Duration::from_secs(30), || {
        fake.callbacks().len() >= 2
    });
    std::thread::sleep(Duration::from_secs(1));
    for (_, body, _) in fake.callbacks() {
        assert_eq!(
            body["data"]["flags"], 64,
            "seen only by who clicked: {body}"
        );
        assert!(
            body["data"]["content"]
                .as_str()
                .unwrap()
                .contains("may not"),
            "{body}"
        );
    }
    let told: Vec<String> = fake
        .bot_messages()
        .iter()
        .filter(|m| m["channel_id"] == STRANGERS_CHANNEL)
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_nothing_leaked(&app, &told, &daemon.log());
    daemon.stop();
}

#[test]
fn a_stranger_on_slack_changes_nothing_and_hears_one_refusal() {
    const APP_TOKEN: &str = "xapp-1-A0ACCESS-strangers";
    let socket = FakeSlackSocket::start(APP_TOKEN);
    let web = FakeSlackWeb::start();
    let config = file_config()
        .table(
            "sources.team",
            &[
                "kind = \"slack\"".to_string(),
                "mode = \"socket\"".to_string(),
                "app_token_env = \"SLACK_APP_TOKEN\"".to_string(),
                format!("api_url = {:?}", socket.api_url),
                "allowed_users = [\"U0ALICE0001\"]".to_string(),
                "chats = { C0DEV = \"alice\" }".to_string(),
                "session_template = \"slack-{channel}\"".to_string(),
                "reply_channel = \"slackbot\"".to_string(),
            ],
        )
        .channel(
            "slackbot",
            "slack",
            &[
                "token = \"xoxb-access-token\"",
                &format!("api_url = {:?}", web.url),
            ],
        );
    let app = App::new(config);
    let daemon = app.serve_with_env(&[("SLACK_APP_TOKEN", APP_TOKEN)]);
    let event = |n: usize, channel: &str, user: &str, text: &str| {
        json!({"type": "event_callback", "team_id": "T0TEAM", "event_id": format!("Ev{n}"),
               "event": {"type": "message", "channel": channel, "user": user, "text": text,
                         "ts": format!("1767225600.{n:06}"), "channel_type": "channel"}})
    };
    for (n, text) in STRANGER_TEXTS.iter().enumerate() {
        socket.push_event(event(n + 1, "C0STRANGE", "U0MALLORY01", text));
    }
    let click = |value: &str| {
        json!({"type": "block_actions",
               "user": {"id": "U0MALLORY01", "username": "mallory", "name": "mallory"},
               "channel": {"id": "C0STRANGE"},
               "container": {"type": "message", "channel_id": "C0STRANGE", "message_ts": "1767225600.000001"},
               "response_url": format!("{}/actions/T0TEAM/1", web.url),
               "actions": [{"action_id": "a", "value": value, "type": "button"}]})
    };
    socket.push_interaction(click(&button_data("a1b2c3", Decision::Allow(Scope::Once))));
    socket.push_interaction(click("relayq-s:stop:1"));
    socket.push_event(
        json!({"type": "event_callback", "team_id": "T0TEAM", "event_id": "EvReaction",
        "event": {"type": "reaction_added", "user": "U0MALLORY01", "reaction": "thumbsup",
                  "item": {"type": "message", "channel": "C0STRANGE", "ts": "1767225600.000001"},
                  "event_ts": "1767225601.000100"}}),
    );
    socket.push_event(event(50, "C0DEV", "U0ALICE0001", "a control message"));
    wait_until("the control message", Duration::from_secs(30), || {
        by_session(&app.lines("out.jsonl")).contains_key("alice")
    });
    wait_until(
        "every envelope acknowledged",
        Duration::from_secs(30),
        || socket.all_acknowledged(),
    );
    std::thread::sleep(Duration::from_secs(1));
    let told: Vec<String> = web
        .messages_in("C0STRANGE")
        .into_iter()
        .map(|(_, _, text)| text)
        .collect();
    assert_nothing_leaked(&app, &told, &daemon.log());
    daemon.stop();
}
