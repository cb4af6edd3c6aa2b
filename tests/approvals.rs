//! Approvals from the chat, against fake agents in real tmux panes (`agents::FakeAgent`, whose
//! Claude and Codex run their `PermissionRequest` hook and take its decision output as the
//! real CLIs do) behind relayq's Telegram source and channel, on the local Bot API. The agent
//! asks; the question reaches the chat with buttons; a tap, `/deny ID`, a yes replying to the
//! question or `relayq approvals` answers it, once; expiry is a deny; `kill -9` loses nothing.
//! The real CLIs run the same scenarios in `real_agents`.

use std::time::Duration;

use relayq_actors::sources::telegram::fake::FakeTelegram;
use serde_json::{json, Value};

use crate::agents::{agent_config, FakeAgent};
use crate::common::api::free_port;
use crate::common::*;

const TOKEN: &str = "123456:approvals-token";
const ALICE: i64 = 777001;
/// A group whose members may write to the agent (`allowed_chats`), Alice among them.
const GROUP: i64 = -1001234567;
const MALLORY: i64 = 666;

/// The bridge: a fake agent as relayq session `agent`, fed by chat `chat` through the
/// Telegram source `bot`, answered through it; `extra` config lines (table, line).
struct Bridge {
    fake: FakeTelegram,
    app: App,
    agent: FakeAgent,
    chat: i64,
}

impl Bridge {
    fn start(name: &str, agent: &str, chat: i64, extra: &[(&str, &str)]) -> Bridge {
        Bridge::start_with(name, agent, chat, extra, &[])
    }

    /// As [`Bridge::start`], the fake agent run with settings `env` (see its doc).
    fn start_with(
        name: &str,
        agent: &str,
        chat: i64,
        extra: &[(&str, &str)],
        env: &[(&str, &str)],
    ) -> Bridge {
        let fake = FakeTelegram::start(TOKEN);
        let tmux = Tmux::new(name);
        let config = agent_config(&tmux, &[]).telegram_source(
            &fake.url,
            &format!("token = {TOKEN:?}"),
            &[ALICE],
            &[(chat, "agent")],
            &[&format!("allowed_chats = [{GROUP}]")],
        );
        let config = extra
            .iter()
            .fold(config, |config, (table, line)| config.set(table, line));
        let app = App::new(config);
        let agent = FakeAgent::start(&app, tmux, agent, "agent", env);
        Bridge {
            fake,
            app,
            agent,
            chat,
        }
    }

    /// Alice asks the agent to use its tool; the question with its buttons: its message id
    /// and the buttons' data by label.
    fn ask(&self) -> (i64, Vec<(String, String)>) {
        self.fake.push_text(self.chat, ALICE, "please use the tool");
        self.question()
    }

    fn question(&self) -> (i64, Vec<(String, String)>) {
        let mut found = None;
        wait_until("the question with buttons", Duration::from_secs(30), || {
            found = self
                .fake
                .bot_messages()
                .into_iter()
                .find(|m| m["chat_id"] == json!(self.chat) && !m["reply_markup"].is_null());
            found.is_some()
        });
        let question = found.unwrap();
        let buttons = FakeTelegram::buttons(&question);
        (question["message_id"].as_i64().unwrap(), buttons)
    }

    /// The bot's message `id` as it is now.
    fn message(&self, id: i64) -> Value {
        self.fake.bot_message(id).unwrap()
    }

    /// Waits until the question `id` was edited to say `outcome`, its buttons gone.
    fn wait_edited(&self, id: i64, outcome: &str) {
        wait_until(
            &format!("the question edited to {outcome:?}"),
            Duration::from_secs(30),
            || {
                let m = self.message(id);
                m["text"].as_str().unwrap_or_default().contains(outcome)
                    && m["reply_markup"].is_null()
            },
        );
    }

    /// The agent's answers to its dialogs so far (true: the tool ran).
    fn decisions(&self) -> Vec<bool> {
        self.agent
            .log()
            .iter()
            .filter_map(|e| e["approved"].as_bool())
            .collect()
    }

    fn wait_decisions(&self, n: usize) -> Vec<bool> {
        wait_until(
            &format!("{n} decision(s) reaching the agent"),
            Duration::from_secs(30),
            || self.decisions().len() >= n,
        );
        self.decisions()
    }

    /// `relayq approvals list --all --json`.
    /// Waits until the newest question's delivery is recorded as message `message_id` (its
    /// receipt), which is how a reply to it is known to answer it: the fake has the message as
    /// soon as it is sent, a moment before relayq writes down that it was.
    fn wait_question_recorded(&self, message_id: i64) {
        wait_until("the question's receipt", Duration::from_secs(30), || {
            let row = self.approvals()[0]["question_row"].as_i64().unwrap();
            let shown = self.app.ok(&["show", &row.to_string(), "--json"]);
            let shown: Value = serde_json::from_str(&shown).unwrap();
            shown["receipt"] == json!(message_id.to_string())
        });
    }

    fn approvals(&self) -> Vec<Value> {
        serde_json::from_str(&self.app.ok(&["approvals", "list", "--all", "--json"])).unwrap()
    }

    /// The tap answers Telegram got, their texts in order, once there are `n`.
    fn tap_answers(&self, n: usize) -> Vec<String> {
        wait_until(
            &format!("{n} answered tap(s)"),
            Duration::from_secs(30),
            || self.fake.tap_answers().len() >= n,
        );
        self.fake.tap_answers()
    }
}

fn data<'a>(buttons: &'a [(String, String)], label: &str) -> &'a str {
    &buttons
        .iter()
        .find(|(l, _)| l == label)
        .unwrap_or_else(|| panic!("no {label:?} button in {buttons:?}"))
        .1
}

/// The README's picture of the question, drawn from what the fake Bot API recorded: the bot's
/// message as Telegram got it (its HTML text, its inline keyboard) and as the tap left it.
/// `RELAYQ_SCREENSHOT=docs/approval-question.png cargo test --test integration approvals::a_tap`
/// rewrites the PNG (Chromium, headless); otherwise only the page is checked.
fn screenshot_of_the_chat(asked: &Value, answered: &Value) {
    let bubble = |m: &Value| {
        let keyboard: String = FakeTelegram::buttons(m)
            .iter()
            .map(|(label, _)| format!("<span class=button>{label}</span>"))
            .collect();
        // The text is the bot's own Telegram HTML (<b>, <code>, <pre>, entities escaped).
        format!(
            "<div class=bubble><div class=text>{}</div><div class=keyboard>{keyboard}</div></div>",
            m["text"].as_str().unwrap_or_default()
        )
    };
    let page = format!(
        "<!doctype html><meta charset=utf-8><style>\
         body{{font:15px/1.35 sans-serif;background:#7ea06b;margin:0;padding:16px;width:760px}}\
         .col{{display:inline-block;vertical-align:top;width:360px;margin-right:16px}}\
         h3{{color:#fff;font-weight:normal;margin:0 0 8px}}\
         .me{{background:#e1fec6;border-radius:10px;padding:8px 10px;margin:0 0 8px 80px}}\
         .bubble{{background:#fff;border-radius:10px;padding:8px 10px}}\
         .text{{white-space:pre-wrap}} pre,code{{font:13px monospace}}\
         .keyboard{{display:flex;flex-wrap:wrap;gap:4px;margin-top:6px}}\
         .button{{flex:1 0 40%;text-align:center;background:#5b8dbd;color:#fff;border-radius:6px;padding:6px}}\
         </style><div class=col><h3>the agent asks</h3><div class=me>please use the tool</div>{}</div>\
         <div class=col><h3>after Alice taps Allow</h3><div class=me>please use the tool</div>{}</div>",
        bubble(asked),
        bubble(answered)
    );
    assert!(page.contains("<span class=button>Allow</span>"), "{page}");
    assert_eq!(
        bubble(answered).matches("class=button").count(),
        0,
        "the buttons go once answered"
    );
    crate::common::screenshot(&page, 800, 330);
}

/// Allow → the tool ran once; the second tap of a double tap is told it was already answered
/// and changes nothing; the question is edited to the outcome, its buttons gone.
#[test]
fn a_tap_on_allow_runs_the_tool_once_and_a_double_tap_changes_nothing() {
    let b = Bridge::start("approve1", "claude", ALICE, &[]);
    let daemon = b.app.serve();
    let (question, buttons) = b.ask();
    let labels: Vec<&str> = buttons.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["Allow", "Deny", "Allow for this session"]);
    let text = b.message(question)["text"].as_str().unwrap().to_string();
    assert!(
        text.contains("permission to use Bash: touch probe.txt"),
        "{text}"
    );
    assert!(
        text.contains("/allow "),
        "the text commands are offered too: {text}"
    );

    let allow = data(&buttons, "Allow");
    let asked = b.message(question);
    b.fake.push_tap(ALICE, ALICE, "Alice", question, allow);
    b.fake.push_tap(ALICE, ALICE, "Alice", question, allow);
    assert_eq!(b.wait_decisions(1), [true]);
    let answers = b.tap_answers(2);
    assert!(
        answers[0].starts_with("Allowed by Alice at "),
        "{answers:?}"
    );
    assert!(
        answers[1].starts_with("Already allowed by Alice at "),
        "{answers:?}"
    );
    b.wait_edited(question, "Allowed by Alice at ");
    screenshot_of_the_chat(&asked, &b.message(question));
    b.agent
        .wait_entry("the turn's end", "turn_end", "please use the tool");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(b.decisions(), [true], "the tool ran once");
    let approvals = b.approvals();
    assert_eq!(approvals.len(), 1, "{approvals:#?}");
    assert_eq!(approvals[0]["state"], "allowed");
    assert_eq!(approvals[0]["answered_by"], "Alice");
    assert!(approvals[0]["reached_at"].is_string(), "{approvals:#?}");
    daemon.stop();
}

/// In a group allowed as a whole, a member not in `allowed_users` may write to the agent but
/// not answer it: their tap is answered and changes nothing. Alice's `/deny ID` then denies:
/// the tool never runs, and her command gets a reply.
#[test]
fn a_strangers_tap_changes_nothing_and_a_deny_by_text_keeps_the_tool_from_running() {
    let b = Bridge::start("approve2", "codex", GROUP, &[]);
    let daemon = b.app.serve();
    let (question, buttons) = b.ask();
    let labels: Vec<&str> = buttons.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        labels,
        ["Allow", "Deny"],
        "Codex has no allow-for-the-session answer"
    );

    b.fake
        .push_tap(GROUP, MALLORY, "Mallory", question, data(&buttons, "Allow"));
    let answers = b.tap_answers(1);
    assert!(answers[0].starts_with("You may not answer"), "{answers:?}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(b.approvals()[0]["state"], "asked");
    assert!(b.decisions().is_empty());

    let id = b.approvals()[0]["id"].as_str().unwrap().to_string();
    b.fake.push_text(GROUP, ALICE, &format!("/deny {id}"));
    assert_eq!(b.wait_decisions(1), [false]);
    b.wait_edited(question, "Denied by Alice at ");
    wait_until("the reply to /deny", Duration::from_secs(30), || {
        b.fake
            .texts_to(GROUP)
            .iter()
            .any(|t| t.starts_with("Denied by Alice at "))
    });
    let pasted = b.agent.entries("pasted");
    assert!(
        !pasted.iter().any(|p| p.contains("/deny")),
        "the command never reached the agent: {pasted:?}"
    );
    daemon.stop();
}

/// Unanswered until `expire_after`: the agent gets an explicit deny, the chat is told.
#[test]
fn an_unanswered_question_expires_as_a_deny_and_the_chat_is_told() {
    let b = Bridge::start(
        "approve3",
        "claude",
        ALICE,
        &[("approvals", "expire_after = \"10s\"")],
    );
    let daemon = b.app.serve();
    let (question, _) = b.ask();
    let asked = std::time::Instant::now();
    assert_eq!(b.wait_decisions(1), [false]);
    assert!(
        asked.elapsed() >= Duration::from_secs(8),
        "{:?}",
        asked.elapsed()
    );
    b.wait_edited(question, "Expired at ");
    let approvals = b.approvals();
    assert_eq!(approvals[0]["state"], "expired");
    let output = b.agent.entries("hook_output").join("\n");
    assert!(
        output.contains("no answer came from the chat in time"),
        "{output}"
    );
    daemon.stop();
}

/// Gemini CLI (the fake draws its framed, numbered dialog): no hook can decide, so the daemon
/// answers the dialog by its keys. Allow for this session presses the dialog's own `2` once,
/// a double tap changes nothing, and the row says the answer reached the agent; unanswered, the
/// next question expires and Escape denies it.
#[test]
fn gemini_questions_are_answered_by_the_dialogs_keys_once() {
    let b = Bridge::start(
        "approve-gemini",
        "gemini",
        ALICE,
        &[("approvals", "expire_after = \"10s\"")],
    );
    let daemon = b.app.serve();
    let (question, buttons) = b.ask();
    let session = data(&buttons, "Allow for this session").to_string();
    b.fake.push_tap(ALICE, ALICE, "Alice", question, &session);
    b.fake.push_tap(ALICE, ALICE, "Alice", question, &session);
    assert_eq!(b.wait_decisions(1), [true]);
    b.wait_edited(question, "Allowed for this session by Alice");
    let answers = b.tap_answers(2);
    assert!(answers[1].starts_with("Already allowed"), "{answers:?}");
    let approvals = b.approvals();
    assert_eq!(approvals[0]["means"], "keys");
    assert!(approvals[0]["reached_at"].is_string(), "{approvals:#?}");
    assert!(approvals[0]["pressed_at"].is_number(), "{approvals:#?}");
    let keys: Vec<String> = b.agent.entries("ignored_by_dialog");
    assert!(
        keys.is_empty(),
        "nothing else was typed into the dialog: {keys:?}"
    );

    b.agent
        .wait_entry("the turn's end", "turn_end", "please use the tool");
    b.fake.push_text(ALICE, ALICE, "please use the tool again");
    wait_until("a second question", Duration::from_secs(30), || {
        b.approvals().len() == 2
    });
    assert_eq!(b.wait_decisions(2), [true, false], "expired: Escape");
    wait_until("the expiry told", Duration::from_secs(30), || {
        b.fake.bot_messages().iter().any(|m| {
            m["text"]
                .as_str()
                .unwrap_or_default()
                .contains("Expired at")
        })
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(b.decisions(), [true, false], "one key per answer");
    daemon.stop();
}

/// Gemini CLI runs its Notification hook before it draws the dialog (seen with the real CLI
/// on a loaded machine): a tap that comes first waits for the dialog and presses its key once.
/// It was recorded as "no dialog was open in the agent's terminal", and the agent waited on.
#[test]
fn a_tap_before_geminis_dialog_is_drawn_waits_for_the_dialog_and_presses_once() {
    let b = Bridge::start_with(
        "approve-late",
        "gemini",
        ALICE,
        &[],
        &[("FAKE_DIALOG_LATE_MS", "2500")],
    );
    let daemon = b.app.serve();
    let (question, buttons) = b.ask();
    let shown = b.agent.entries("dialog_shown");
    assert!(
        shown.is_empty(),
        "the tap comes before the dialog: {shown:?}"
    );
    b.fake
        .push_tap(ALICE, ALICE, "Alice", question, data(&buttons, "Allow"));
    assert_eq!(b.wait_decisions(1), [true]);
    b.wait_edited(question, "Allowed by Alice");
    let approvals = b.approvals();
    assert!(approvals[0]["reached_at"].is_string(), "{approvals:#?}");
    assert!(b.agent.entries("ignored_by_dialog").is_empty());
    daemon.stop();
}

/// `kill -9` of the daemon while a question is open: after the restart the question is still
/// open, its buttons work, and the agent gets its answer once. A yes replying to the question
/// answers it too, and `relayq approvals` then says it is no longer open.
#[test]
fn a_question_survives_kill_9_and_its_buttons_still_answer_it_once() {
    let b = Bridge::start("approve4", "codex", ALICE, &[]);
    let mut daemon = b.app.serve();
    let (question, buttons) = b.ask();
    // Killed once the question is known delivered: a kill between its send and that record
    // sends it again after the restart (a possible repeat), and the outcome is then written
    // on the copy, not on the message tapped here.
    b.wait_question_recorded(question);
    daemon.signal("KILL");
    let daemon = b.app.serve();
    assert_eq!(b.approvals()[0]["state"], "asked");
    b.fake
        .push_tap(ALICE, ALICE, "Alice", question, data(&buttons, "Allow"));
    assert_eq!(b.wait_decisions(1), [true]);
    b.wait_edited(question, "Allowed by Alice at ");
    let id = b.approvals()[0]["id"].as_str().unwrap().to_string();
    let refused = b.app.run(&["approvals", "deny", &id]);
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("no longer open: allowed by Alice"), "{said}");

    // The next question, answered by a yes replying to it.
    b.agent
        .wait_entry("the turn's end", "turn_end", "please use the tool");
    b.fake.push_text(ALICE, ALICE, "please use the tool again");
    wait_until("the second question", Duration::from_secs(30), || {
        b.approvals().len() == 2 && b.approvals()[0]["question_row"].is_i64()
    });
    let (second, _) = b.question();
    assert_ne!(second, question);
    b.wait_question_recorded(second);
    let reply_id = b.fake.take_message_id();
    b.fake.push_message(json!({
        "message_id": reply_id,
        "from": {"id": ALICE, "is_bot": false, "first_name": "Alice"},
        "chat": {"id": ALICE, "type": "private"},
        "date": 1767225600,
        "text": "yes",
        "reply_to_message": {"message_id": second, "chat": {"id": ALICE, "type": "private"},
                             "date": 1767225600, "text": "the question"},
    }));
    assert_eq!(b.wait_decisions(2), [true, true]);
    b.wait_edited(second, "Allowed by Alice at ");
    daemon.stop();
}

/// `relayq approvals allow ID` answers as the buttons do; a bad id is refused with exit 2.
#[test]
fn relayq_approvals_allow_answers_from_the_terminal() {
    let b = Bridge::start("approve5", "claude", ALICE, &[]);
    let daemon = b.app.serve();
    let (question, _) = b.ask();
    let listed = b.app.ok(&["approvals", "list"]);
    assert!(listed.contains("touch probe.txt"), "{listed}");
    let id = b.approvals()[0]["id"].as_str().unwrap().to_string();
    let said = b.app.ok(&["approvals", "allow", &id]);
    assert!(said.contains("allowed by relayq approvals"), "{said}");
    assert_eq!(b.wait_decisions(1), [true]);
    b.wait_edited(question, "Allowed by relayq approvals at ");
    let unknown = b.app.run(&["approvals", "allow", "zzzzzz"]);
    assert_eq!(unknown.status.code(), Some(2));
    daemon.stop();
}

/// `GET /v1/approvals` lists the open questions; `POST /v1/approvals/{id}/deny` answers one
/// (the agent is told no, the chat's question edited); a second answer is 409 and changes
/// nothing; an unknown id is 404.
#[test]
fn approvals_over_http_are_listed_and_answered_once() {
    let port = free_port();
    let listen = format!("listen = \"127.0.0.1:{port}\"");
    let b = Bridge::start(
        "approve6",
        "codex",
        ALICE,
        &[("http", "enabled = true"), ("http", &listen)],
    );
    let daemon = b.app.serve();
    let (question, _) = b.ask();
    let client = reqwest::blocking::Client::new();
    let url = |path: &str| format!("http://127.0.0.1:{port}/v1/approvals{path}");
    let open: Value = client.get(url("")).send().unwrap().json().unwrap();
    assert_eq!(open.as_array().unwrap().len(), 1, "{open:#}");
    assert_eq!(open[0]["state"], "asked");
    assert_eq!(open[0]["action"], "touch probe.txt");
    let id = open[0]["id"].as_str().unwrap().to_string();

    let denied = client.post(url(&format!("/{id}/deny"))).send().unwrap();
    assert_eq!(denied.status(), 200);
    let denied: Value = denied.json().unwrap();
    assert_eq!(denied["state"], "denied");
    assert_eq!(b.wait_decisions(1), [false]);
    b.wait_edited(question, "Denied by the relayq API at ");

    let again = client.post(url(&format!("/{id}/allow"))).send().unwrap();
    assert_eq!(again.status(), 409);
    let body: Value = again.json().unwrap();
    assert!(
        body.to_string().contains("no longer open: denied"),
        "{body}"
    );
    let unknown = client.post(url("/zzzzzz/allow")).send().unwrap();
    assert_eq!(unknown.status(), 404);
    let open: Value = client.get(url("")).send().unwrap().json().unwrap();
    assert_eq!(open, serde_json::json!([]));
    let all: Value = client.get(url("?all=true")).send().unwrap().json().unwrap();
    assert_eq!(all[0]["answered_by"], "the relayq API");
    assert!(b.decisions() == [false], "the tool never ran");
    daemon.stop();
}

/// Slack: the question goes out with Block Kit buttons; a click comes back as a signed
/// `block_actions` interaction on the source's URL. A stranger's click is answered (ephemeral,
/// through its `response_url`) and changes nothing; Alice's Allow reaches the agent once, the
/// question is updated to its outcome (`chat.update`, buttons gone); her second click is
/// told it was already answered. A bare `deny WORD` naming no approval is a message.
#[test]
fn slack_buttons_answer_once_and_a_strangers_click_changes_nothing() {
    const SECRET: &str = "slack-approvals-secret";
    const QUESTION_TS: &str = "1767225780.000100";
    // Slack's Web API (chat.postMessage, chat.update, auth.test) and the clicks' response_url.
    let slack = Endpoint::start_with(0, |calls| {
        let call = calls.last().unwrap();
        let body = match call.url.rsplit('/').next().unwrap_or_default() {
            "auth.test" => json!({"ok": true, "user": "relayq", "team": "Demo"}),
            "chat.update" => json!({"ok": true, "channel": call.body["channel"],
                "ts": call.body["ts"], "text": call.body["text"]}),
            "chat.postMessage" => {
                // The question gets a known ts; other messages their own.
                let asks = !call.body["blocks"].is_null();
                let n = calls.len();
                let ts = if asks {
                    QUESTION_TS.to_string()
                } else {
                    format!("1767225781.{n:06}")
                };
                json!({"ok": true, "channel": call.body["channel"], "ts": ts,
                       "message": {"type": "message", "text": call.body["text"], "ts": ts}})
            }
            _ => json!({"ok": true}),
        };
        Reply {
            headers: vec![("Content-Type", "application/json; charset=utf-8".into())],
            body: body.to_string(),
            ..Reply::status(200)
        }
    });
    let port = free_port();
    let tmux = Tmux::new("approve-slack");
    let config = agent_config(&tmux, &[]).http_on(port).table(
        "sources.team",
        &[
            "kind = \"slack\"",
            "signing_secret_env = \"SLACK_SIGNING_SECRET\"",
            "token = \"xoxb-test-token\"",
            &format!("api_url = \"{}/\"", slack.url),
            "allowed_users = [\"U0ALICE\"]",
            "channels = { C0DEV = \"agent\" }",
        ],
    );
    let app = App::new(config);
    let agent = FakeAgent::start(&app, tmux, "claude", "agent", &[]);
    let daemon = app.serve_with_env(&[("SLACK_SIGNING_SECRET", SECRET)]);
    let url = format!("http://127.0.0.1:{port}/v1/ingress/team");
    let post = |body: String, content_type: &str| slack_post(&url, SECRET, body, content_type);
    let say = |text: &str, ts: &str| {
        let event = json!({"type": "event_callback", "team_id": "T0TEAM", "event_id": format!("Ev{ts}"),
            "event": {"type": "message", "channel": "C0DEV", "user": "U0ALICE", "text": text,
                      "ts": ts, "channel_type": "channel"}});
        assert_eq!(post(event.to_string(), "application/json").status(), 200);
    };
    // The interaction as Slack posts it (docs.slack.dev, block_actions payload), form-encoded.
    let click = |user: &str, name: &str, value: &str| {
        let payload = json!({
            "type": "block_actions",
            "user": {"id": user, "username": name, "name": name, "team_id": "T0TEAM"},
            "api_app_id": "A0APP", "token": "x", "trigger_id": "1.2.3",
            "container": {"type": "message", "message_ts": QUESTION_TS, "channel_id": "C0DEV", "is_ephemeral": false},
            "team": {"id": "T0TEAM", "domain": "demo"},
            "channel": {"id": "C0DEV", "name": "dev"},
            "message": {"type": "message", "ts": QUESTION_TS, "text": "…"},
            "response_url": format!("{}/actions/T0TEAM/1/{user}", slack.url),
            "actions": [{"action_id": "relayq-allow", "block_id": "b", "value": value,
                         "type": "button", "action_ts": "1767225790.000001",
                         "text": {"type": "plain_text", "text": "Allow"}}],
        });
        let body = slack_form(&payload);
        assert_eq!(
            post(body, "application/x-www-form-urlencoded").status(),
            200
        );
    };
    let calls_to = |method: &str| -> Vec<Value> {
        slack
            .calls()
            .into_iter()
            .filter(|c| c.url.ends_with(method) || c.url.contains(method))
            .map(|c| c.body)
            .collect()
    };
    let ephemeral = |n: usize| -> Vec<String> {
        wait_until(
            &format!("{n} click answers"),
            Duration::from_secs(30),
            || calls_to("/actions/").len() >= n,
        );
        calls_to("/actions/")
            .iter()
            .map(|b| {
                assert_eq!(b["response_type"], "ephemeral");
                b["text"].as_str().unwrap().to_string()
            })
            .collect()
    };
    let decisions = || -> Vec<bool> {
        agent
            .log()
            .iter()
            .filter_map(|e| e["approved"].as_bool())
            .collect()
    };

    say("please use the tool", "1767225700.000100");
    let mut question = None;
    wait_until("the question with buttons", Duration::from_secs(30), || {
        question = calls_to("/chat.postMessage")
            .into_iter()
            .find(|b| !b["blocks"].is_null());
        question.is_some()
    });
    let question = question.unwrap();
    assert_eq!(question["channel"], "C0DEV");
    let buttons: Vec<(String, String)> = question["blocks"][1]["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["text"]["text"].as_str().unwrap().to_string(),
                b["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let labels: Vec<&str> = buttons.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["Allow", "Deny", "Allow for this session"]);
    assert!(
        question["blocks"][0]["text"]["text"]
            .as_str()
            .unwrap()
            .contains("touch probe.txt"),
        "{question:#}"
    );
    let allow = data(&buttons, "Allow");

    click("U0MALLORY", "mallory", allow);
    assert!(
        ephemeral(1)[0].starts_with("You may not answer"),
        "{:?}",
        ephemeral(1)
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(decisions().is_empty(), "a stranger's click changes nothing");

    click("U0ALICE", "alice", allow);
    wait_until("the decision", Duration::from_secs(30), || {
        !decisions().is_empty()
    });
    click("U0ALICE", "alice", allow);
    let answers = ephemeral(3);
    assert!(answers[1].starts_with("Allowed by alice"), "{answers:?}");
    assert!(
        answers[2].starts_with("Already allowed by alice"),
        "{answers:?}"
    );
    wait_until("the question updated", Duration::from_secs(30), || {
        !calls_to("/chat.update").is_empty()
    });
    let update = &calls_to("/chat.update")[0];
    assert_eq!(
        (&update["channel"], &update["ts"]),
        (&json!("C0DEV"), &json!(QUESTION_TS))
    );
    assert_eq!(update["blocks"], json!([]), "its buttons gone");
    assert!(
        update["text"]
            .as_str()
            .unwrap()
            .contains("Allowed by alice"),
        "{update:#}"
    );
    agent.wait_entry("the turn's end", "turn_end", "please use the tool");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(decisions(), [true], "the tool ran once");

    // `deny access` names no approval: the agent gets it as a message.
    say("deny access", "1767225800.000100");
    agent.wait_entry("the message", "turn_start", "deny access");
    daemon.stop();
}

/// Issue 41, item 14: the question says "reply yes or no to this message", but on a phone
/// people type "no" without replying: it waited, silently, and reached the agent as a new
/// instruction once the question closed. With one question open in the chat, a bare yes or no
/// answers it; with none open, it is a message to the agent as before.
#[test]
fn a_bare_no_while_one_question_is_open_answers_it() {
    let b = Bridge::start("approve-bare", "claude", ALICE, &[]);
    let daemon = b.app.serve();
    let (question, _) = b.ask();
    // Another message while it is open waits for it: the chat is told so, and how to answer.
    b.fake.push_text(ALICE, ALICE, "also fix the typo");
    let id = b.approvals()[0]["id"].as_str().unwrap().to_string();
    wait_until(
        "the chat told the message waits",
        Duration::from_secs(30),
        || {
            b.fake.bot_messages().iter().any(|m| {
                let text = m["text"].as_str().unwrap_or_default();
                text.contains("waits") && text.contains(&format!("/deny {id}"))
            })
        },
    );
    b.fake.push_text(ALICE, ALICE, "no");
    assert_eq!(b.wait_decisions(1), [false]);
    b.wait_edited(question, "Denied by Alice at ");
    // Denied, the agent is back at its prompt and takes the message that waited.
    b.agent
        .wait_entry("the waiting message", "turn_start", "also fix the typo");
    b.fake.push_text(ALICE, ALICE, "yes");
    b.agent.wait_entry(
        "a bare yes with no question open, as a prompt",
        "turn_start",
        "yes",
    );
    assert_eq!(b.decisions(), [false], "the second word answered nothing");
    daemon.stop();
}
