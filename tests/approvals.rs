//! Approvals from the chat, against fake agents in real tmux panes (`agents::FakeAgent`, whose
//! Claude and Codex run their `PermissionRequest` hook and take its decision output as the
//! real CLIs do) behind relayq's Telegram source and channel, on the local Bot API. The agent
//! asks; the question reaches the chat with buttons; a tap, `/deny ID`, a yes replying to the
//! question or `relayq approvals` answers it, once; expiry is a deny; `kill -9` loses nothing.
//! The real CLIs run the same scenarios in `real_agents`.

use std::time::Duration;

use relayq_actors::testing::fake_telegram::FakeTelegram;
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
        let fake = FakeTelegram::start(TOKEN);
        let tmux = Tmux::new(name);
        let config = agent_config(&tmux, &[]).table(
            "sources.bot",
            &[
                "kind = \"telegram\"",
                &format!("token = {TOKEN:?}"),
                &format!("api_url = {:?}", fake.url),
                &format!("allowed_users = [{ALICE}]"),
                &format!("allowed_chats = [{GROUP}]"),
                &format!("chats = {{ \"{chat}\" = \"agent\" }}"),
                "poll_timeout = \"1s\"",
            ],
        );
        let config = extra
            .iter()
            .fold(config, |config, (table, line)| config.set(table, line));
        let app = App::new(config);
        let agent = FakeAgent::start(&app, tmux, agent, "agent", &[]);
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

/// `kill -9` of the daemon while a question is open: after the restart the question is still
/// open, its buttons work, and the agent gets its answer once. A yes replying to the question
/// answers it too, and `relayq approvals` then says it is no longer open.
#[test]
fn a_question_survives_kill_9_and_its_buttons_still_answer_it_once() {
    let b = Bridge::start("approve4", "codex", ALICE, &[]);
    let mut daemon = b.app.serve();
    let (question, buttons) = b.ask();
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
