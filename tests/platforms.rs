//! The chat platforms' channels end to end: `relayq serve` sending through the telegram,
//! discord and slack channels to a local server that answers as each platform documents
//! (`tests/fixtures/`), with the same three trials for each: a 429 storm, a long text whose
//! middle part fails, and a send cut by `kill -9` reconciled as the channel's policy says.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{outbound_args, webhook_config, App, Call, Config, Endpoint, Reply};

const TOKEN: &str = "123456:platform-test-token";

/// How one platform is configured and answers.
struct Platform {
    kind: &'static str,
    /// Where the test's messages go: a chat, a channel id.
    to: &'static str,
    /// The platform's limit on one message, in characters.
    limit: usize,
    /// Whether a call sends a message (not a readiness check or a lookup).
    is_send: fn(&Call) -> bool,
    /// The text a send carries.
    text: fn(&Call) -> String,
    /// The platform's answer to a call that succeeds (`calls` so far, the last one answered).
    ok: fn(&[Call]) -> Reply,
    /// A 429 asking to wait `secs`.
    throttled: fn(secs: u64) -> Reply,
    /// A failure a later try gets past.
    transient: fn() -> Reply,
}

fn json_reply(status: u16, body: Value) -> Reply {
    Reply {
        headers: vec![("Content-Type", "application/json".into())],
        body: body.to_string(),
        ..Reply::status(status)
    }
}

fn sends(calls: &[Call], platform: &Platform) -> Vec<Call> {
    calls
        .iter()
        .filter(|c| (platform.is_send)(c))
        .cloned()
        .collect()
}

const TELEGRAM: Platform = Platform {
    kind: "telegram",
    to: "123456789",
    limit: 4096,
    is_send: |c| c.url.ends_with("/sendMessage"),
    text: |c| c.body["text"].as_str().unwrap_or_default().to_string(),
    ok: |calls| {
        let call = calls.last().unwrap();
        match call.url.ends_with("/getMe") {
            true => json_reply(
                200,
                json!({"ok": true, "result": {"id": 7000000001_i64, "is_bot": true, "first_name": "Relay", "username": "relay_bot"}}),
            ),
            false => json_reply(
                200,
                json!({"ok": true, "result": {
                "message_id": 4000 + calls.len(), "date": 1767225780,
                "chat": {"id": call.body["chat_id"], "type": "private"}, "text": call.body["text"]}}),
            ),
        }
    },
    throttled: |secs| {
        json_reply(
            429,
            json!({"ok": false, "error_code": 429,
        "description": format!("Too Many Requests: retry after {secs}"), "parameters": {"retry_after": secs}}),
        )
    },
    transient: || {
        json_reply(
            502,
            json!({"ok": false, "error_code": 502, "description": "Bad Gateway"}),
        )
    },
};

const DISCORD: Platform = Platform {
    kind: "discord",
    to: "1312345678901234567",
    limit: 2000,
    is_send: |c| c.url.ends_with("/messages"),
    text: |c| c.body["content"].as_str().unwrap_or_default().to_string(),
    // A message's id follows from its nonce, as Discord with `enforce_nonce` answers a nonce
    // it has seen with the message it made for it.
    ok: |calls| {
        let call = calls.last().unwrap();
        if call.url.ends_with("/users/@me") {
            return json_reply(
                200,
                json!({"id": "1300000000000000001", "username": "agent-relay", "bot": true}),
            );
        }
        let mut nonces: Vec<&Value> = vec![];
        for c in calls.iter().filter(|c| c.url.ends_with("/messages")) {
            if !nonces.contains(&&c.body["nonce"]) {
                nonces.push(&c.body["nonce"]);
            }
        }
        let made = nonces
            .iter()
            .position(|n| **n == call.body["nonce"])
            .unwrap();
        json_reply(
            200,
            json!({"id": format!("13234567890123{made:05}"), "type": 0,
            "channel_id": DISCORD.to, "content": call.body["content"], "nonce": call.body["nonce"]}),
        )
    },
    throttled: |secs| {
        Reply {
        headers: vec![
            ("Content-Type", "application/json".into()),
            ("Retry-After", secs.to_string()),
            ("X-RateLimit-Limit", "5".into()),
            ("X-RateLimit-Remaining", "0".into()),
            ("X-RateLimit-Reset-After", secs.to_string()),
            ("X-RateLimit-Bucket", "80c17d2f203122d936070c88c8d10f33".into()),
            ("X-RateLimit-Scope", "user".into()),
        ],
        body: json!({"message": "You are being rate limited.", "retry_after": secs as f64, "global": false}).to_string(),
        ..Reply::status(429)
    }
    },
    transient: || json_reply(502, json!({"message": "502: Bad Gateway", "code": 0})),
};

const SLACK: Platform = Platform {
    kind: "slack",
    to: "C0123ABCDEF",
    limit: 4000,
    is_send: |c| c.url.ends_with("/chat.postMessage"),
    text: |c| c.body["text"].as_str().unwrap_or_default().to_string(),
    // Every post made a message, answered or not: history shows them with their metadata.
    ok: |calls| {
        let call = calls.last().unwrap();
        let ts = |n: usize| format!("1767225780.{n:06}");
        if call.url.ends_with("/auth.test") {
            return json_reply(
                200,
                json!({"ok": true, "user": "agent-relay", "team": "Demo"}),
            );
        }
        if call.url.starts_with("/hook/conversations.history") {
            let messages: Vec<Value> = calls
                .iter()
                .enumerate()
                .filter(|(_, c)| c.url.ends_with("/chat.postMessage"))
                .map(|(n, c)| {
                    json!({"type": "message", "bot_id": "B0AGENTBOT1", "ts": ts(n),
                    "text": c.body["text"], "metadata": c.body["metadata"]})
                })
                .rev()
                .collect();
            return json_reply(
                200,
                json!({"ok": true, "messages": messages, "has_more": false}),
            );
        }
        json_reply(
            200,
            json!({"ok": true, "channel": SLACK.to, "ts": ts(calls.len() - 1),
            "message": {"type": "message", "text": call.body["text"], "ts": ts(calls.len() - 1)}}),
        )
    },
    throttled: |secs| Reply {
        headers: vec![
            ("Content-Type", "application/json; charset=utf-8".into()),
            ("Retry-After", secs.to_string()),
        ],
        body: json!({"ok": false, "error": "ratelimited"}).to_string(),
        ..Reply::status(429)
    },
    transient: || json_reply(200, json!({"ok": false, "error": "internal_error"})),
};

/// A local server answering as `platform`: the `n`th send as `script(n)` says (None: success),
/// every other call with success.
fn platform_server(
    platform: &'static Platform,
    script: impl Fn(usize) -> Option<Reply> + Send + Sync + 'static,
) -> Endpoint {
    Endpoint::start_with(0, move |calls| {
        let call = calls.last().unwrap();
        if (platform.is_send)(call) {
            let n = calls.iter().filter(|c| (platform.is_send)(c)).count() - 1;
            if let Some(reply) = script(n) {
                return reply;
            }
        }
        (platform.ok)(calls)
    })
}

/// Channel `chat` of `platform`'s kind at `server`, the token from the daemon's environment.
fn config(platform: &Platform, server: &Endpoint) -> Config {
    let base = server.url.as_str();
    webhook_config(&server.url)
        .set("daemon", "shutdown_grace = \"5s\"")
        .set("queues.outbound", "lease_timeout = \"1s\"")
        .channel(
            "chat",
            platform.kind,
            &[
                "token_env = \"CHAT_TOKEN\"",
                &format!("api_url = {base:?}"),
                "timeout = \"30s\"",
            ],
        )
}

fn serve(app: &App) -> crate::common::Daemon {
    app.serve_with_env(&[("CHAT_TOKEN", TOKEN)])
}

/// `relayq enqueue outbound --channel chat --to <platform's> --json TEXT`: the first row and
/// how many parts.
fn send(app: &App, platform: &Platform, text: &str) -> (i64, i64) {
    let args = outbound_args("chat", platform.to, &["--json", text]);
    let written: Value = serde_json::from_str(&app.ok(&args)).unwrap();
    (
        written["id"].as_i64().unwrap(),
        written["parts"].as_i64().unwrap_or(1),
    )
}

fn wait_state(app: &App, id: i64, state: &str) -> relayq_engine::RowState {
    app.wait_state(relayq_engine::QueueName::Outbound, id, state)
}

fn receipt(app: &App, id: i64) -> String {
    let shown: Value = serde_json::from_str(&app.ok(&["show", &id.to_string(), "--json"])).unwrap();
    shown["receipt"].as_str().unwrap_or_default().to_string()
}

/// Three 429s in a row, each asking for 2 s, and the daemon killed with SIGKILL and restarted
/// after the first: every message goes out in order once the platform allows, no send comes
/// before the wait is over (the wait is kept with the row, not in memory), and none of it is
/// charged as an attempt (`max_attempts = 1`).
fn a_429_storm_is_waited_out_in_order_without_spending_attempts(platform: &'static Platform) {
    let server = platform_server(platform, |n| (n < 3).then(|| (platform.throttled)(2)));
    let app = App::new(config(platform, &server).set("queues.outbound", "max_attempts = 1"));
    let mut daemon = serve(&app);
    let texts = ["one", "two", "three", "four"];
    let ids: Vec<i64> = texts.iter().map(|t| send(&app, platform, t).0).collect();
    crate::common::wait_until("the first 429 recorded", Duration::from_secs(20), || {
        app.row(relayq_engine::QueueName::Outbound, ids[0])
            .last_error
            .is_some()
    });
    daemon.signal("KILL");
    let daemon = serve(&app);
    for id in &ids {
        let row = wait_state(&app, *id, "delivered");
        assert!(
            row.attempts <= 1,
            "{}: a 429 was charged: {row:?}",
            platform.kind
        );
    }
    daemon.stop();
    let sent = sends(&server.calls(), platform);
    let got: Vec<String> = sent.iter().map(platform.text).collect();
    assert_eq!(got[3..], texts, "{}: in order once allowed", platform.kind);
    assert!(
        got[..3].iter().all(|t| t == "one"),
        "{}: only the head was tried: {got:?}",
        platform.kind
    );
    for pair in sent[..4].windows(2) {
        let waited = pair[1].at - pair[0].at;
        assert!(
            waited >= Duration::from_millis(1900),
            "{}: sent again {waited:?} after a 429 asking for 2 s",
            platform.kind
        );
    }
}

/// A text three times the platform's limit goes out as three parts; the second fails once;
/// the third waits for its retry. Joined, the delivered parts are the text; each part keeps
/// the platform's id for it.
fn a_long_text_goes_out_in_parts_in_order_and_a_failed_middle_part_holds_back_the_last(
    platform: &'static Platform,
) {
    let server = platform_server(platform, |n| (n == 1).then(platform.transient));
    let app = App::new(config(platform, &server));
    let daemon = serve(&app);
    let text: String = (0..platform.limit / 20)
        .map(|i| format!("line {i:05} {}\n", "x".repeat(38)))
        .collect();
    let (first, parts) = send(&app, platform, &text);
    assert_eq!(parts, 3, "{}", platform.kind);
    for id in first..first + 3 {
        wait_state(&app, id, "delivered");
    }
    daemon.stop();
    let got: Vec<String> = sends(&server.calls(), platform)
        .iter()
        .map(platform.text)
        .collect();
    assert_eq!(got.len(), 4, "{}", platform.kind);
    assert_eq!(
        got[1], got[2],
        "{}: part 2 tried again before part 3",
        platform.kind
    );
    assert!(got.iter().all(|p| p.chars().count() <= platform.limit));
    assert_eq!(
        [&got[0], &got[2], &got[3]].map(String::as_str).concat(),
        text,
        "{}",
        platform.kind
    );
    let receipts: std::collections::HashSet<String> =
        (first..first + 3).map(|id| receipt(&app, id)).collect();
    assert_eq!(
        receipts.len(),
        3,
        "{}: one receipt per part: {receipts:?}",
        platform.kind
    );
    assert!(!receipts.contains(""), "{}", platform.kind);
}

/// The first send is held open by the platform; the daemon is killed with SIGKILL before the
/// answer. After the restart, `check` judges what the platform was sent; the row is delivered
/// with `receipt`.
fn a_send_cut_by_a_crash_is_reconciled(
    platform: &'static Platform,
    check: fn(sends: &[Call], all: &[Call], receipt: &str),
) {
    let server = platform_server(platform, |n| {
        (n == 0).then(|| Reply {
            delay: Duration::from_secs(60),
            ..Reply::status(200)
        })
    });
    let app = App::new(config(platform, &server));
    let mut daemon = serve(&app);
    let (id, _) = send(&app, platform, "are you there?");
    crate::common::wait_until("the send to arrive", Duration::from_secs(20), || {
        !sends(&server.calls(), platform).is_empty()
    });
    daemon.signal("KILL");
    let daemon = serve(&app);
    wait_state(&app, id, "delivered");
    daemon.stop();
    let all = server.calls();
    check(&sends(&all, platform), &all, &receipt(&app, id));
}

#[test]
fn telegram_waits_out_a_429_storm() {
    a_429_storm_is_waited_out_in_order_without_spending_attempts(&TELEGRAM);
}

#[test]
fn discord_waits_out_a_429_storm() {
    a_429_storm_is_waited_out_in_order_without_spending_attempts(&DISCORD);
}

#[test]
fn slack_waits_out_a_429_storm() {
    a_429_storm_is_waited_out_in_order_without_spending_attempts(&SLACK);
}

#[test]
fn telegram_sends_parts_in_order_past_a_failed_middle_part() {
    a_long_text_goes_out_in_parts_in_order_and_a_failed_middle_part_holds_back_the_last(&TELEGRAM);
}

#[test]
fn discord_sends_parts_in_order_past_a_failed_middle_part() {
    a_long_text_goes_out_in_parts_in_order_and_a_failed_middle_part_holds_back_the_last(&DISCORD);
}

#[test]
fn slack_sends_parts_in_order_past_a_failed_middle_part() {
    a_long_text_goes_out_in_parts_in_order_and_a_failed_middle_part_holds_back_the_last(&SLACK);
}

#[test]
fn telegram_resends_a_send_cut_by_a_crash_as_its_policy_says() {
    // Telegram cannot deduplicate: `resend` (the default) sends it again.
    a_send_cut_by_a_crash_is_reconciled(&TELEGRAM, |sends, all, receipt| {
        assert_eq!(sends.len(), 2);
        assert_eq!(sends[0].body, sends[1].body, "the same message again");
        let second = all
            .iter()
            .rposition(|c| c.url.ends_with("/sendMessage"))
            .unwrap();
        assert_eq!(
            receipt,
            (4000 + second + 1).to_string(),
            "the answered send's id"
        );
    });
}

#[test]
fn discord_resends_a_send_cut_by_a_crash_with_its_nonce_and_gets_the_same_message() {
    a_send_cut_by_a_crash_is_reconciled(&DISCORD, |sends, _, receipt| {
        assert_eq!(sends.len(), 2);
        assert_eq!(sends[0].body["nonce"], sends[1].body["nonce"]);
        assert_eq!(sends[1].body["enforce_nonce"], true);
        assert_eq!(
            receipt, "1323456789012300000",
            "the message the first send made"
        );
    });
}

#[test]
fn slack_finds_a_send_cut_by_a_crash_by_its_metadata_instead_of_sending_it_again() {
    a_send_cut_by_a_crash_is_reconciled(&SLACK, |sends, all, receipt| {
        assert_eq!(sends.len(), 1, "not posted twice");
        assert!(
            all.iter()
                .any(|c| c.url.starts_with("/hook/conversations.history")),
            "looked up"
        );
        let posted = all
            .iter()
            .position(|c| c.url.ends_with("/chat.postMessage"))
            .unwrap();
        assert_eq!(
            receipt,
            format!("1767225780.{posted:06}"),
            "the ts of the message it made"
        );
    });
}

/// Regression: a batch that held only answers (a button click over Socket Mode, which keeps no
/// offset) was taken for an idle fetch: the click was never recorded, nor its envelope
/// acknowledged, and Slack would send it again for ever.
#[test]
fn a_click_over_slack_socket_mode_is_recorded_answered_and_acknowledged() {
    use relayq_actors::sources::slack::fake_socket::FakeSlackSocket;
    const APP_TOKEN: &str = "xapp-1-A0AGENTAPP1-click";
    let slack = FakeSlackSocket::start(APP_TOKEN);
    let responses = Endpoint::start(|_| Reply::status(200));
    let config = crate::common::file_config().table(
        "sources.team",
        &[
            "kind = \"slack\"",
            "mode = \"socket\"",
            "app_token_env = \"SLACK_APP_TOKEN\"",
            &format!("api_url = {:?}", slack.api_url),
            "allowed_users = [\"U0ALICE0001\"]",
            "chats = { C0123ABCDEF = \"agent\" }",
        ],
    );
    let app = App::new(config);
    let daemon = app.serve_with_env(&[("SLACK_APP_TOKEN", APP_TOKEN)]);
    // A message first: its commit stores the source's offset, which a click leaves as it is.
    slack.push_event(json!({
        "type": "event_callback", "event_id": "Ev1", "event_time": 1767225600,
        "event": {"type": "message", "channel": "C0123ABCDEF", "user": "U0ALICE0001",
                  "text": "hello", "ts": "1767225600.000100"},
    }));
    crate::common::wait_until("the message delivered", Duration::from_secs(15), || {
        app.lines("out.jsonl").len() == 1
    });
    let mut click: Value = serde_json::from_str(
        &std::fs::read_to_string("tests/fixtures/slack/block_actions.json").unwrap(),
    )
    .unwrap();
    click["response_url"] = json!(format!("{}/actions/T0DEMOTEAM1/1", responses.url));
    slack.push_interaction(click);
    crate::common::wait_until("the click acknowledged", Duration::from_secs(15), || {
        slack.all_acknowledged()
    });
    crate::common::wait_until("the click answered", Duration::from_secs(15), || {
        !responses.calls().is_empty()
    });
    let answer = &responses.calls()[0].body;
    assert_eq!(answer["response_type"], "ephemeral", "{answer}");
    assert!(
        answer["text"].as_str().is_some_and(|t| !t.is_empty()),
        "{answer}"
    );
    daemon.stop();
}

/// Regression: a batch that held only session requests (`/sessions` over Socket Mode, which
/// keeps no offset) was taken for an idle fetch once the offset was stored: the command was
/// never recorded nor its envelope acknowledged, and the person who typed it heard nothing.
#[test]
fn a_session_command_over_slack_socket_mode_is_recorded_and_acknowledged() {
    use relayq_actors::sources::slack::fake_socket::FakeSlackSocket;
    const APP_TOKEN: &str = "xapp-1-A0AGENTAPP1-command";
    let slack = FakeSlackSocket::start(APP_TOKEN);
    let config = crate::common::file_config().table(
        "sources.team",
        &[
            "kind = \"slack\"",
            "mode = \"socket\"",
            "app_token_env = \"SLACK_APP_TOKEN\"",
            &format!("api_url = {:?}", slack.api_url),
            "allowed_users = [\"U0ALICE0001\"]",
            "chats = { C0123ABCDEF = \"agent\" }",
        ],
    );
    let app = App::new(config);
    let daemon = app.serve_with_env(&[("SLACK_APP_TOKEN", APP_TOKEN)]);
    let message = |n: u32, text: &str| {
        json!({
            "type": "event_callback", "event_id": format!("Ev{n}"), "event_time": 1767225600,
            "event": {"type": "message", "channel": "C0123ABCDEF", "user": "U0ALICE0001",
                      "text": text, "ts": format!("1767225600.00010{n}")},
        })
    };
    // A message first: its commit stores the source's offset, which a command leaves as it is.
    slack.push_event(message(1, "hello"));
    crate::common::wait_until("the message delivered", Duration::from_secs(15), || {
        app.lines("out.jsonl").len() == 1
    });
    slack.push_event(message(2, "/sessions"));
    crate::common::wait_until("the command acknowledged", Duration::from_secs(15), || {
        slack.all_acknowledged()
    });
    let commands: Option<i64> =
        app.query_value("SELECT COUNT(*) FROM session_commands WHERE command LIKE '%sessions%'");
    assert_eq!(
        commands,
        Some(1),
        "the command is recorded\n{}",
        daemon.log()
    );
    daemon.stop();
}

/// Slack's Events API: url_verification answered, a signed message committed before the 200
/// and delivered, Slack's retry of it (`X-Slack-Retry-Num`) a duplicate, a bad signature 401.
#[test]
fn slack_events_are_verified_committed_before_the_200_and_their_retries_are_duplicates() {
    use relayq_actors::sources::slack::sign;
    const SECRET: &str = "slack-signing-secret";
    let port = crate::common::api::free_port();
    let config = crate::common::file_config().http_on(port).table(
        "sources.team",
        &[
            "kind = \"slack\"",
            "signing_secret_env = \"SLACK_SIGNING_SECRET\"",
            "allowed_users = [\"U0ALICE\"]",
            "channels = { C0DEV = \"alice\" }",
        ],
    );
    let app = App::new(config);
    let daemon = app.serve_with_env(&[("SLACK_SIGNING_SECRET", SECRET)]);
    let url = format!("http://127.0.0.1:{port}/v1/ingress/team");
    let client = reqwest::blocking::Client::new();
    let post = |body: &serde_json::Value, secret: &str, retry: Option<&str>| {
        let body = body.to_string();
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let mut request = client
            .post(&url)
            .header("Content-Type", "application/json")
            .header("X-Slack-Request-Timestamp", ts.to_string())
            .header("X-Slack-Signature", sign(secret, ts, body.as_bytes()));
        if let Some(n) = retry {
            request = request
                .header("X-Slack-Retry-Num", n)
                .header("X-Slack-Retry-Reason", "http_timeout");
        }
        request.body(body).send().unwrap()
    };
    let rows = || app.inbound_rows();

    let challenge = json!({"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"});
    let answer = post(&challenge, SECRET, None);
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.json::<serde_json::Value>().unwrap()["challenge"],
        challenge["challenge"]
    );

    let event = json!({
        "token": "x", "team_id": "T0TEAM", "api_app_id": "A0APP", "type": "event_callback",
        "event_id": "Ev0MESSAGE", "event_time": 1767225600,
        "event": {"type": "message", "channel": "C0DEV", "user": "U0ALICE", "text": "run the tests",
                  "ts": "1767225600.000100", "channel_type": "channel"},
    });
    assert_eq!(post(&event, "not-the-secret", None).status(), 401);
    assert_eq!(rows(), 0, "an unsigned event writes nothing");

    assert_eq!(post(&event, SECRET, None).status(), 200);
    assert_eq!(rows(), 1, "committed before the 200");
    assert_eq!(post(&event, SECRET, Some("1")).status(), 200);
    assert_eq!(post(&event, SECRET, Some("2")).status(), 200);
    assert_eq!(rows(), 1, "Slack's retries are duplicates");

    crate::common::wait_until("delivered", Duration::from_secs(10), || {
        app.lines("out.jsonl").len() == 1
    });
    let line = &app.lines("out.jsonl")[0];
    assert_eq!(
        (
            line["session"].as_str(),
            line["content"].as_str(),
            line["origin"].as_str()
        ),
        (Some("alice"), Some("run the tests"), Some("slack:team"))
    );
    daemon.stop();
}

/// A Slack whose first post is held open (the daemon is killed before the answer), whose
/// `conversations.history` answers by `history` (the call's number among lookups) or, when
/// that says nothing, as Slack does, with `filler` long messages of other people before the
/// ones relayq posted. Returns every call once the row is delivered after the restart.
fn slack_cut_send_looked_up(
    history: impl Fn(usize) -> Option<Reply> + Send + Sync + 'static,
    filler: usize,
) -> Vec<Call> {
    let server = Endpoint::start_with(0, move |calls| {
        let call = calls.last().unwrap();
        if call.url.ends_with("/chat.postMessage")
            && calls
                .iter()
                .filter(|c| c.url.ends_with("/chat.postMessage"))
                .count()
                == 1
        {
            return Reply {
                delay: Duration::from_secs(60),
                ..Reply::status(200)
            };
        }
        if call.url.starts_with("/hook/conversations.history") {
            let n = calls
                .iter()
                .filter(|c| c.url.starts_with("/hook/conversations.history"))
                .count();
            if let Some(reply) = history(n - 1) {
                return reply;
            }
            let mut answer: Value = serde_json::from_str(&(SLACK.ok)(calls).body).unwrap();
            let messages = answer["messages"].as_array_mut().unwrap();
            for n in 0..filler {
                messages.push(
                    json!({"type": "message", "user": "U0ALICE", "ts": format!("1767225000.{n:06}"),
                    "text": format!("{n} {}", "長い".repeat(2000))}),
                );
            }
            return json_reply(200, answer);
        }
        (SLACK.ok)(calls)
    });
    let app = App::new(config(&SLACK, &server));
    let mut daemon = serve(&app);
    let (id, _) = send(&app, &SLACK, "are you there?");
    crate::common::wait_until("the send to arrive", Duration::from_secs(20), || {
        !sends(&server.calls(), &SLACK).is_empty()
    });
    daemon.signal("KILL");
    let daemon = serve(&app);
    wait_state(&app, id, "delivered");
    daemon.stop();
    server.calls()
}

/// Issue 27, item 2: a history page over the kit's 64 KiB could not be read, so the lookup
/// never said, the row waited and went dead unposted.
#[test]
fn slack_reads_a_history_page_over_64_kib_to_find_a_cut_send() {
    let calls = slack_cut_send_looked_up(|_| None, 30);
    assert_eq!(sends(&calls, &SLACK).len(), 1, "found, not posted twice");
}

/// Issue 27, item 10: when the lookup answered 503, the row was posted again a second later
/// without a lookup; it must wait until Slack can say whether it has the message.
#[test]
fn slack_never_resends_a_cut_send_while_its_lookup_fails() {
    let calls = slack_cut_send_looked_up(
        |n| (n < 2).then(|| json_reply(503, json!({"ok": false, "error": "service_unavailable"}))),
        0,
    );
    assert_eq!(
        sends(&calls, &SLACK).len(),
        1,
        "not posted again: {calls:#?}"
    );
    let lookups = calls
        .iter()
        .filter(|c| c.url.starts_with("/hook/conversations.history"))
        .count();
    assert_eq!(lookups, 3, "looked up until Slack answered");
}
