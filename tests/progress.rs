//! Progress on the phone, from the outside: a fake agent in a real tmux pane behind the
//! Telegram source, on a local Bot API that enforces Telegram's documented limits
//! (`FakeTelegram::enforce_limits`). The person's message gets 👀 when the agent takes it and
//! 👌 when its turn ends; a progress message names the tools it runs and ends pointing at the
//! answer, which arrives whole, once, before the progress message's last edit. A chat set to
//! `off` gets exactly the messages it got before progress existed.

use std::time::Duration;

use relayq_actors::sources::telegram::fake::{ChatCall, FakeTelegram};
use serde_json::{json, Value};

use crate::agents::{agent_config, FakeAgent};
use crate::common::*;

const TOKEN: &str = "123456:progress-token";
const ALICE: i64 = 778001;

/// The bridge: a fake Claude Code as session `agent`, fed by Alice's private chat through the
/// Telegram source `bot`; `more` lines for the source.
struct Bridge {
    daemon: Daemon,
    fake: FakeTelegram,
    /// Kept: its directory holds the database while the test runs.
    _app: App,
    agent: FakeAgent,
}

impl Bridge {
    fn start(name: &str, more: &[&str], env: &[(&str, &str)]) -> Bridge {
        let fake = FakeTelegram::start(TOKEN);
        fake.enforce_limits();
        let tmux = Tmux::new(name);
        let config = agent_config(&tmux, &[]).telegram_source(
            &fake.url,
            &format!("token = {TOKEN:?}"),
            &[ALICE],
            &[(ALICE, "agent")],
            more,
        );
        let app = App::new(config);
        let agent = FakeAgent::start(&app, tmux, "claude", "agent", env);
        Bridge {
            daemon: app.serve(),
            fake,
            _app: app,
            agent,
        }
    }

    /// `relayq serve` again, on the same database.
    fn app_serve(&self) -> Daemon {
        self._app.serve()
    }

    /// Alice sets her chat's progress to `mode` (`/progress MODE`), and is told it is set.
    fn set_progress(&self, mode: &str) {
        self.fake
            .push_text(ALICE, ALICE, &format!("/progress {mode}"));
        let told = format!("Progress in this chat is now {mode}");
        wait_until("the /progress reply", Duration::from_secs(20), || {
            !self.sent_with(&told).is_empty()
        });
    }

    /// The calls to Alice's chat of `method`.
    fn calls(&self, method: &str) -> Vec<ChatCall> {
        self.fake
            .chat_calls()
            .into_iter()
            .filter(|c| c.method == method && c.chat == ALICE)
            .collect()
    }

    /// The reactions set on message `id`, in order.
    fn reactions_on(&self, id: i64) -> Vec<String> {
        self.calls("setMessageReaction")
            .iter()
            .filter(|c| !c.refused && c.body["message_id"] == json!(id))
            .map(|c| {
                c.body["reaction"][0]["emoji"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    /// The texts sent to Alice's chat that contain `part`.
    fn sent_with(&self, part: &str) -> Vec<Value> {
        self.fake
            .sent()
            .into_iter()
            .filter(|m| m["chat_id"] == json!(ALICE))
            .filter(|m| m["text"].as_str().is_some_and(|t| t.contains(part)))
            .collect()
    }

    fn wait_answer(&self, prompt: &str) {
        let answer = format!("echo: {prompt}");
        wait_until(
            &format!("the answer {answer:?}"),
            Duration::from_secs(40),
            || !self.sent_with(&answer).is_empty(),
        );
    }

    /// When the agent's hook `name` ran (unix ms), the `n`th time.
    fn hook_at(&self, name: &str, n: usize) -> i64 {
        let at = self
            .agent
            .log()
            .into_iter()
            .filter(|e| e["hook"] == json!(name))
            .nth(n)
            .and_then(|e| e["at"].as_f64())
            .unwrap_or_else(|| panic!("the agent ran {name} {} time(s)", n + 1));
        (at * 1000.0) as i64
    }

    /// No call to the chat was refused: relayq kept within Telegram's limits.
    fn assert_within_limits(&self) {
        let refused: Vec<ChatCall> = self
            .fake
            .chat_calls()
            .into_iter()
            .filter(|c| c.refused)
            .collect();
        assert!(
            refused.is_empty(),
            "calls past Telegram's limits: {refused:#?}"
        );
    }
}

/// A Slack source reading Alice's events (Events API, signed), one session per channel
/// (`slack-{channel}`), answering through `slack`.
fn slack_source(slack: &relayq_actors::sources::slack::fake_web::FakeSlackWeb) -> Vec<String> {
    vec![
        "kind = \"slack\"".into(),
        "signing_secret_env = \"SLACK_SIGNING_SECRET\"".into(),
        "token = \"xoxb-test-token\"".into(),
        format!("api_url = {:?}", slack.url),
        "allowed_users = [\"U0ALICE\"]".into(),
        "session_template = \"slack-{channel}\"".into(),
    ]
}

/// The progress message as posted: the one `sendMessage` sent silently (without a
/// notification).
fn progress_message(b: &Bridge) -> Option<Value> {
    b.calls("sendMessage")
        .into_iter()
        .find(|c| !c.refused && c.body["disable_notification"] == json!(true))
        .map(|c| c.body)
}

/// The progress message's id: the bot's message in Alice's chat that reads as one.
fn progress_id(b: &Bridge) -> Option<Value> {
    b.fake
        .bot_messages()
        .into_iter()
        .filter(|m| m["chat_id"] == json!(ALICE))
        .find(|m| {
            m["text"].as_str().is_some_and(|t| {
                ["⏳ agent", "✔ agent", "✖ agent"]
                    .iter()
                    .any(|p| t.starts_with(p))
            })
        })
        .map(|m| m["message_id"].clone())
}

#[test]
fn a_turn_with_tool_steps_shows_eyes_then_its_steps_then_done_and_the_answer_once() {
    let b = Bridge::start("progress-steps", &[], &[("FAKE_STEP_MS", "900")]);
    let prompt = "please run steps 4";
    let message = b.fake.user_says(ALICE, ALICE, prompt);
    b.wait_answer(prompt);
    wait_until("the done reaction", Duration::from_secs(20), || {
        b.fake.reaction_on(ALICE, message).as_deref() == Some("👌")
    });
    assert_eq!(
        b.reactions_on(message),
        ["👀", "👌"],
        "taken, then done, once each"
    );

    // 👀 within 1.5 s of the agent's own prompt-submit event.
    let taken_at = b.calls("setMessageReaction")[0].unix_ms;
    let submitted_at = b.hook_at("UserPromptSubmit", 0);
    assert!(
        taken_at - submitted_at <= 1500,
        "👀 {} ms after the agent took the message",
        taken_at - submitted_at
    );

    // One progress message, edited with the steps, ending where the answer is.
    let posted = progress_message(&b).expect("a progress message");
    let id = progress_id(&b).expect("the progress message is the bot's");
    wait_until(
        "the progress message's last edit",
        Duration::from_secs(20),
        || {
            b.fake.bot_message(id.as_i64().unwrap()).is_some_and(|m| {
                m["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("✔ agent answered after"))
            })
        },
    );
    let edits: Vec<String> = b
        .calls("editMessageText")
        .iter()
        .filter(|c| !c.refused && c.body["message_id"] == id)
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
        .collect();
    let mut shown = vec![posted["text"].as_str().unwrap().to_string()];
    shown.extend(edits);
    assert!(
        shown.iter().any(|t| t.contains("Bash echo step 2 of 4")),
        "a step names the tool and its command: {shown:#?}"
    );
    let last = b.fake.bot_message(id.as_i64().unwrap()).unwrap();
    let last = last["text"].as_str().unwrap();
    assert!(
        last.contains("• Bash echo step 4 of 4") && !last.contains('▸'),
        "{last}"
    );

    // The answer once, before the progress message's last edit.
    let answers = b.sent_with(&format!("echo: {prompt}"));
    assert_eq!(answers.len(), 1, "the answer, once: {answers:#?}");
    let calls = b.fake.chat_calls();
    let answer_at = calls
        .iter()
        .position(|c| {
            c.body["text"]
                .as_str()
                .is_some_and(|t| t.contains("echo: please"))
        })
        .unwrap();
    let last_edit_at = calls
        .iter()
        .rposition(|c| c.method == "editMessageText" && c.body["message_id"] == id)
        .unwrap();
    assert!(
        answer_at < last_edit_at,
        "the answer went before the progress message's end"
    );

    let working = shown
        .iter()
        .rev()
        .find(|t| t.contains('▸'))
        .expect("an edit while a tool ran");
    screenshot_of_progress(prompt, working, last, &answers[0]["text"]);

    // Paced: at most one call a second to the chat, and none refused.
    b.assert_within_limits();
    let ats: Vec<_> = b
        .fake
        .chat_calls()
        .iter()
        .filter(|c| c.chat == ALICE)
        .map(|c| c.at)
        .collect();
    for pair in ats.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_millis(900),
            "two calls within 0.9 s"
        );
    }
}

/// Two daemons on one PostgreSQL database, either of which applies a turn's hook events: each
/// hears the other's steps, and the chat's lane holder alone calls Telegram, so every turn has
/// one progress message and every reaction is set once, whichever node applied what.
#[test]
fn two_nodes_sharing_a_database_show_one_progress_message_per_turn_and_each_reaction_once() {
    if !own_database_runs_here("two_nodes_sharing_a_database") {
        return;
    }
    use relayq_engine::storage::postgresql::test_server::TestDatabase;
    let database = TestDatabase::create();
    let fake = FakeTelegram::start(TOKEN);
    fake.enforce_limits();
    let tmux = std::rc::Rc::new(Tmux::new("progress-nodes"));
    let config = |node: &str| {
        agent_config(&tmux, &[])
            .telegram_source(
                &fake.url,
                &format!("token = {TOKEN:?}"),
                &[ALICE],
                &[(ALICE, "agent")],
                &[],
            )
            .set("node", &format!("name = {node:?}"))
    };
    let apps = [
        App::joining(config("one"), &database.url()),
        App::joining(config("two"), &database.url()),
    ];
    let _agent = FakeAgent::start(
        &apps[0],
        tmux.clone(),
        "claude",
        "agent",
        &[("FAKE_STEP_MS", "1500")],
    );
    // Each node says which hook events it applied (debug).
    let env = [(
        "RELAYQ_LOG",
        "info,relayq_actors::hooks=debug,relayq_actors::progress=debug",
    )];
    let daemons = [apps[0].serve_with_env(&env), apps[1].serve_with_env(&env)];

    let mut messages = Vec::new();
    // Turns long enough for their calls at one per 1.5 s: 👀, the message, edits, 👌.
    for turn in 1..=3 {
        let prompt = format!("turn {turn}: please run steps 3");
        messages.push(fake.user_says(ALICE, ALICE, &prompt));
        let answer = format!("echo: {prompt}");
        wait_until(&answer, Duration::from_secs(60), || {
            fake.sent()
                .iter()
                .any(|m| m["text"].as_str().is_some_and(|t| t.contains(&answer)))
        });
    }
    let last = *messages.last().unwrap();
    wait_until("the last done reaction", Duration::from_secs(30), || {
        fake.reaction_on(ALICE, last).as_deref() == Some("👌")
    });
    std::thread::sleep(Duration::from_secs(3)); // any late call of the other node
    let applied = |d: &Daemon| d.log().matches("hook event applied").count();
    let (one, two) = (applied(&daemons[0]), applied(&daemons[1]));
    assert!(
        one > 0 && two > 0,
        "both nodes applied hook events (one {one}, two {two}): run again if not"
    );

    let calls = fake.chat_calls();
    let posted: Vec<&ChatCall> = calls
        .iter()
        .filter(|c| c.method == "sendMessage" && c.body["disable_notification"] == json!(true))
        .collect();
    assert_eq!(
        posted.len(),
        3,
        "one progress message per turn: {:#?}\nnode one:\n{}\nnode two:\n{}",
        posted.iter().map(|c| &c.body["text"]).collect::<Vec<_>>(),
        daemons[0].log(),
        daemons[1].log()
    );
    for message in messages {
        let set: Vec<&str> = calls
            .iter()
            .filter(|c| c.method == "setMessageReaction" && !c.refused)
            .filter(|c| c.body["message_id"] == json!(message))
            .map(|c| c.body["reaction"][0]["emoji"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(set, ["👀", "👌"], "message {message}: each reaction once");
    }
    let refused: Vec<&ChatCall> = calls.iter().filter(|c| c.refused).collect();
    assert!(
        refused.is_empty(),
        "calls past Telegram's limits: {refused:#?}"
    );
}

/// A turn that starts while the last one's final edit still waits behind its long answer (three
/// parts, sent first) gets a progress message of its own, and the last one's message still
/// ends pointing at its answer: the ended board is kept apart until its edit goes.
#[test]
fn a_turn_starting_while_the_last_ones_end_waits_gets_its_own_message_and_both_end() {
    let b = Bridge::start("progress-apart", &[], &[("FAKE_STEP_MS", "2000")]);
    let first = "please run steps 1 and give a lengthy answer";
    let second = "then please run steps 4";
    b.fake.user_says(ALICE, ALICE, first);
    b.fake.user_says(ALICE, ALICE, second);
    b.wait_answer(second);
    let ended = || {
        b.fake
            .bot_messages()
            .into_iter()
            .filter(|m| m["chat_id"] == json!(ALICE))
            .filter(|m| {
                m["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("✔ agent answered after"))
            })
            .count()
    };
    wait_until(
        "both progress messages ended",
        Duration::from_secs(30),
        || ended() == 2,
    );
    let posted = b
        .calls("sendMessage")
        .into_iter()
        .filter(|c| !c.refused && c.body["disable_notification"] == json!(true))
        .count();
    assert_eq!(posted, 2, "one progress message per turn");
    assert_eq!(b.sent_with(&format!("echo: {second}")).len(), 1);
    b.assert_within_limits();
}

#[test]
fn a_chat_set_to_off_gets_exactly_the_messages_it_got_before_progress() {
    let b = Bridge::start("progress-off", &[], &[("FAKE_STEP_MS", "300")]);
    b.set_progress("off");
    let prompt = "quietly run steps 3";
    let message = b.fake.user_says(ALICE, ALICE, prompt);
    b.wait_answer(prompt);
    std::thread::sleep(Duration::from_secs(4));
    let methods: Vec<String> = b
        .fake
        .chat_calls()
        .iter()
        .filter(|c| c.chat == ALICE)
        .map(|c| c.method.clone())
        .collect();
    assert_eq!(
        methods,
        ["sendMessage", "sendMessage"],
        "the reply and the answer, nothing else"
    );
    assert_eq!(b.fake.reaction_on(ALICE, message), None);
    let texts = b.fake.texts_to(ALICE);
    assert_eq!(texts.len(), 2, "{texts:#?}");
}

#[test]
fn a_quick_answer_ends_done_and_gets_no_progress_message() {
    let b = Bridge::start("progress-quick", &[], &[]);
    let message = b.fake.user_says(ALICE, ALICE, "hello");
    b.wait_answer("hello");
    wait_until("the done reaction", Duration::from_secs(20), || {
        b.fake.reaction_on(ALICE, message).as_deref() == Some("👌")
    });
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        progress_message(&b).is_none(),
        "a quick turn needs no progress message"
    );
    // Taken and done within a moment: the latest wins, 👀 may not have had its turn.
    let reactions = b.reactions_on(message);
    assert!(
        reactions == ["👀", "👌"] || reactions == ["👌"],
        "{reactions:?}"
    );
    b.assert_within_limits();
}

/// `kill -9` while a turn's progress is shown: the new daemon sends no edit of the old
/// progress message (a stale edit is worse than none), the answer arrives once, and the
/// message's reaction ends as done.
#[test]
fn after_kill_9_mid_turn_no_old_edit_is_sent_the_answer_arrives_once_and_the_reaction_ends_done() {
    let mut b = Bridge::start("progress-kill", &[], &[("FAKE_STEP_MS", "1200")]);
    let prompt = "please run steps 6";
    let message = b.fake.user_says(ALICE, ALICE, prompt);
    let mut old = None;
    wait_until("the progress message", Duration::from_secs(30), || {
        old = progress_id(&b);
        old.is_some()
    });
    let old = old.unwrap();
    b.daemon.signal("KILL");
    let killed_at = std::time::Instant::now();
    b.daemon = b.app_serve();
    b.wait_answer(prompt);
    wait_until("the done reaction", Duration::from_secs(30), || {
        b.fake.reaction_on(ALICE, message).as_deref() == Some("👌")
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        b.sent_with(&format!("echo: {prompt}")).len(),
        1,
        "the answer, once"
    );
    let late: Vec<ChatCall> = b
        .calls("editMessageText")
        .into_iter()
        .filter(|c| c.body["message_id"] == old && c.at > killed_at)
        .collect();
    assert!(
        late.is_empty(),
        "the old progress message was edited after the kill: {late:#?}"
    );
}

/// On Slack (Events API in, the Web API out, a local Web API that enforces Slack's limits):
/// the person's message gets :eyes:, then :white_check_mark: in its place; the turn's
/// progress message is posted in the thread and updated with the steps; nothing is refused.
#[test]
fn on_slack_the_message_gets_eyes_then_a_check_and_the_steps_are_one_updated_message() {
    use relayq_actors::sources::slack::fake_web::FakeSlackWeb;
    const SECRET: &str = "slack-progress-secret";
    const DM: &str = "D0ALICE";
    let slack = FakeSlackWeb::start();
    slack.enforce_limits();
    let port = crate::common::api::free_port();
    let tmux = Tmux::new("progress-slack");
    let config = agent_config(&tmux, &[])
        .http_on(port)
        .table("sources.team", &slack_source(&slack));
    let app = App::new(config);
    let session = format!("slack-{DM}");
    let _agent = FakeAgent::start(&app, tmux, "claude", &session, &[("FAKE_STEP_MS", "800")]);
    let _daemon = app.serve_with_env(&[("SLACK_SIGNING_SECRET", SECRET)]);
    let url = format!("http://127.0.0.1:{port}/v1/ingress/team");
    let ts = "1767225000.000100";
    let event = json!({"type": "message", "channel": DM, "user": "U0ALICE",
        "text": "please run steps 5", "ts": ts, "channel_type": "im"});
    let callback = json!({"type": "event_callback", "team_id": "T0TEAM",
        "event_id": "Ev0001", "event": event});
    let posted = slack_post(&url, SECRET, callback.to_string(), "application/json");
    assert_eq!(posted.status(), 200);

    wait_until("the answer in Slack", Duration::from_secs(40), || {
        slack
            .messages_in(DM)
            .iter()
            .any(|(_, _, text)| text.contains("echo: please run steps 5"))
    });
    wait_until(
        "the check in place of the eyes",
        Duration::from_secs(20),
        || slack.reactions_on(DM, ts) == ["white_check_mark"],
    );
    let reacted: Vec<(String, String)> = slack
        .calls()
        .into_iter()
        .filter(|c| c.method.starts_with("reactions.") && !c.refused)
        .map(|c| {
            (
                c.method,
                c.body["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        reacted,
        [
            ("reactions.add".to_string(), "eyes".to_string()),
            ("reactions.remove".into(), "eyes".into()),
            ("reactions.add".into(), "white_check_mark".into()),
        ]
    );
    wait_until(
        "the progress message's end",
        Duration::from_secs(20),
        || {
            slack
                .messages_in(DM)
                .iter()
                .any(|(_, _, t)| t.starts_with(&format!("✔ {session} answered after")))
        },
    );
    let progress = slack
        .messages_in(DM)
        .into_iter()
        .find(|(_, _, t)| t.starts_with("✔ "))
        .unwrap();
    assert!(
        progress.2.contains("• Bash echo step 5 of 5"),
        "{}",
        progress.2
    );
    let updates = slack
        .calls()
        .iter()
        .filter(|c| c.method == "chat.update" && c.body["ts"] == json!(progress.0))
        .count();
    assert!(
        updates >= 2,
        "the steps came as updates of one message: {updates}"
    );
    let refused: Vec<_> = slack.calls().into_iter().filter(|c| c.refused).collect();
    assert!(
        refused.is_empty(),
        "calls past Slack's limits: {refused:#?}"
    );
}

/// A private chat set to `stream`: the answer shows as it is written, as a draft
/// (`sendMessageDraft`, Bot API 9.5) that grows line by line, and then arrives as its own
/// message, whole and once; no progress message is posted.
#[test]
fn a_private_chat_set_to_stream_sees_the_answer_grow_as_a_draft_then_gets_it_once() {
    let b = Bridge::start("progress-stream", &[], &[("FAKE_STEP_MS", "1000")]);
    b.set_progress("stream");
    let prompt = "please stream it";
    let message = b.fake.user_says(ALICE, ALICE, prompt);
    wait_until("the answer", Duration::from_secs(40), || {
        !b.sent_with("line 4 of the answer").is_empty()
    });
    wait_until("the done reaction", Duration::from_secs(20), || {
        b.fake.reaction_on(ALICE, message).as_deref() == Some("👌")
    });
    let drafts = b.fake.drafts(ALICE);
    let grew: Vec<usize> = (1..=3)
        .map(|k| {
            drafts
                .iter()
                .position(|(_, t)| t.contains(&format!("line {k} of the answer")))
                .unwrap_or_else(|| panic!("no draft showed line {k}: {drafts:#?}"))
        })
        .collect();
    assert!(
        grew.windows(2).all(|w| w[0] <= w[1]),
        "the draft grew in order: {grew:?}"
    );
    let ids: std::collections::BTreeSet<i64> = drafts.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 1, "one draft for the turn: {ids:?}");
    let answers = b.sent_with("line 4 of the answer");
    assert_eq!(answers.len(), 1, "the answer once: {answers:#?}");
    assert!(answers[0]["text"]
        .as_str()
        .unwrap()
        .contains("line 1 of the answer"));
    assert!(
        progress_message(&b).is_none(),
        "drafts instead of a progress message"
    );
    b.assert_within_limits();
}

/// The README's picture of progress, drawn from what the fake Bot API recorded: the person's
/// message with the bot's reaction, the progress message while a tool ran and at the end, and
/// the answer. `RELAYQ_SCREENSHOT=docs/progress.png cargo test --test integration
/// progress::a_turn_with` rewrites the PNG (Chromium, headless); otherwise only the page is
/// checked.
fn screenshot_of_progress(prompt: &str, working: &str, last: &str, answer: &Value) {
    let escape = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let column = |title: &str, reaction: &str, progress: &str, answer: Option<&str>| {
        // The answer is the bot's own Telegram HTML (<b>, entities escaped).
        let answer = answer.map_or(String::new(), |a| format!("<div class=bubble>{a}</div>"));
        format!(
            "<div class=col><h3>{title}</h3><div class=me>{}<span class=reaction>{reaction}</span></div>\
             <div class=bubble>{}</div>{answer}</div>",
            escape(prompt),
            escape(progress)
        )
    };
    let page = format!(
        "<!doctype html><meta charset=utf-8><style>\
         body{{font:15px/1.35 sans-serif;background:#7ea06b;margin:0;padding:16px;width:760px}}\
         .col{{display:inline-block;vertical-align:top;width:360px;margin-right:16px}}\
         h3{{color:#fff;font-weight:normal;margin:0 0 8px}}\
         .me{{background:#e1fec6;border-radius:10px;padding:8px 10px;margin:0 0 8px 80px;position:relative}}\
         .reaction{{position:absolute;right:6px;bottom:-12px;background:#fff;border-radius:10px;padding:0 4px}}\
         .bubble{{background:#fff;border-radius:10px;padding:8px 10px;margin-bottom:8px;white-space:pre-wrap}}\
         </style>{}{}",
        column("while the agent works", "👀", working, None),
        column("when its turn ends", "👌", last, answer.as_str()),
    );
    assert!(
        page.contains("▸ Bash") && page.contains("✔ agent answered"),
        "{page}"
    );
    crate::common::screenshot(&page, 800, 360);
}

/// Telegram asks to wait (429) for the reactions and edits: progress is shed, the operator
/// hears it (`relayq status`, the metrics), and the answer still arrives, whole and once.
#[test]
fn when_telegram_throttles_progress_it_is_shed_and_status_says_so_and_the_answer_arrives() {
    let b = Bridge::start("progress-shed", &[], &[("FAKE_STEP_MS", "700")]);
    b.fake.refuse_cosmetic_calls(1000);
    let prompt = "please run steps 4";
    b.fake.user_says(ALICE, ALICE, prompt);
    wait_until(
        "status to say progress is shed",
        Duration::from_secs(30),
        || {
            b._app
                .ok(&["status"])
                .contains("progress on channel bot is being shed: the platform asked to wait")
        },
    );
    b.wait_answer(prompt);
    assert_eq!(b.sent_with(&format!("echo: {prompt}")).len(), 1);
}

/// One chat of the soak: where it is, how a message is said there, and its agent.
struct SoakChat {
    name: &'static str,
    session: String,
    /// Telegram's chat id, or Slack's channel.
    chat: String,
    slack: bool,
    group: bool,
}

/// A turn the soak drove: its prompt, and the person's message id (Telegram's, Slack's ts).
struct SoakTurn {
    chat: usize,
    prompt: String,
    message: String,
}

/// When each of an agent's hooks `name` ran for each prompt (unix ms), from its log.
fn hook_times(agent: &FakeAgent, name: &str) -> std::collections::HashMap<String, i64> {
    let mut current = None;
    let mut times = std::collections::HashMap::new();
    for e in agent.log() {
        if let Some(prompt) = e["turn_start"].as_str() {
            current = Some(prompt.to_string());
        }
        if let (Some(prompt), true) = (&current, e["hook"] == json!(name)) {
            let at = (e["at"].as_f64().unwrap_or_default() * 1000.0) as i64;
            times.entry(prompt.clone()).or_insert(at);
        }
    }
    times
}

/// p50, p99 and max of `values`.
fn spread(mut values: Vec<i64>) -> (i64, i64, i64) {
    values.sort();
    let at = |q: f64| values[((values.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99), *values.last().unwrap())
}

/// Five sessions, three on Telegram (two private chats and a group) and two on Slack (a direct
/// message and a channel), each a person taking turns with a fake agent that runs tool steps and
/// writes 9 000-character answers, for `RELAYQ_PROGRESS_SOAK_SECS` (60 by default, on each
/// backend: the test harness runs two tests at once on this machine, and ten minutes twice
/// would take `.ci/run` past 30; at 180 s it took 1 804 s; the 10- and 30-minute runs are
/// `RELAYQ_PROGRESS_SOAK_SECS=600` and `relayq-bench progress`), against fakes that refuse what Telegram's and Slack's documented
/// limits refuse. Then: no call was refused (0 429s of relayq's making), every answer arrived
/// whole and once, no cosmetic call went to a chat while its answer was waiting to be sent,
/// cosmetic calls were at least `progress_every` apart (3 s in groups), and the first visible
/// progress (👀) came within 1.5 s of the agent's prompt-submit event in a private chat (within
/// one group slot, 3 s more, in a group, whose 20 a minute is paced as one every 3 s).
#[test]
fn five_sessions_taking_turns_keep_answers_first_and_within_the_platforms_limits() {
    use relayq_actors::sources::slack::fake_web::FakeSlackWeb;
    const SECRET: &str = "slack-soak-secret";
    const BOB: i64 = 778002;
    const GROUP: i64 = -1001778003;
    let secs: u64 = std::env::var("RELAYQ_PROGRESS_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let fake = FakeTelegram::start(TOKEN);
    fake.enforce_limits();
    let slack = FakeSlackWeb::start();
    slack.enforce_limits();
    let port = crate::common::api::free_port();
    let tmux = std::rc::Rc::new(Tmux::new("progress-soak"));
    let config = agent_config(&tmux, &[])
        .http_on(port)
        .telegram_source(
            &fake.url,
            &format!("token = {TOKEN:?}"),
            &[ALICE, BOB],
            &[(ALICE, "tg-a"), (BOB, "tg-b"), (GROUP, "tg-g")],
            &[&format!("allowed_chats = [{GROUP}]")],
        )
        .table("sources.team", &slack_source(&slack));
    let app = App::new(config);
    let chats = [
        ("tg-a", ALICE.to_string(), false, false),
        ("tg-b", BOB.to_string(), false, false),
        ("tg-g", GROUP.to_string(), false, true),
        ("slack-D0SOAK", "D0SOAK".to_string(), true, false),
        ("slack-C0SOAK", "C0SOAK".to_string(), true, true),
    ]
    .map(|(session, chat, slack, group)| SoakChat {
        name: session,
        session: session.to_string(),
        chat,
        slack,
        group,
    });
    let agents: Vec<FakeAgent> = chats
        .iter()
        .map(|c| {
            FakeAgent::start(
                &app,
                tmux.clone(),
                "claude",
                &c.session,
                &[("FAKE_STEP_MS", "500")],
            )
        })
        .collect();
    let _daemon = app.serve_with_env(&[
        ("SLACK_SIGNING_SECRET", SECRET),
        ("RUST_LOG", "info,relayq_actors::progress=debug"),
    ]);
    let url = format!("http://127.0.0.1:{port}/v1/ingress/team");

    // Each chat's person: a message, its answer whole, a pause to read it, the next.
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    let turns: Vec<SoakTurn> = std::thread::scope(|scope| {
        let drivers: Vec<_> = chats
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (fake, slack, url) = (&fake, &slack, &url);
                scope.spawn(move || {
                    let mut turns = Vec::new();
                    let mut n = 0;
                    while std::time::Instant::now() < deadline {
                        n += 1;
                        let prompt = format!(
                            "turn {n} of {}: please run steps {} lengthy",
                            c.name,
                            1 + n % 5
                        );
                        let message = match c.slack {
                            false => {
                                let chat: i64 = c.chat.parse().unwrap();
                                let user = if chat > 0 { chat } else { ALICE };
                                fake.user_says(chat, user, &prompt).to_string()
                            }
                            true => {
                                let ts = format!("1767225{n:03}.{i:06}");
                                let event = json!({"type": "message", "channel": c.chat,
                                    "user": "U0ALICE", "text": prompt, "ts": ts,
                                    "channel_type": if c.group { "channel" } else { "im" }});
                                let callback = json!({"type": "event_callback", "team_id": "T0TEAM",
                                    "event_id": format!("Ev{i}x{n}"), "event": event});
                                let posted = slack_post(
                                    url,
                                    SECRET,
                                    callback.to_string(),
                                    "application/json",
                                );
                                assert_eq!(posted.status(), 200);
                                ts
                            }
                        };
                        // The whole answer: its first part names the prompt, its last is n of n.
                        let texts = || -> Vec<String> {
                            match c.slack {
                                false => fake.texts_to(c.chat.parse().unwrap()),
                                true => slack
                                    .messages_in(&c.chat)
                                    .into_iter()
                                    .map(|m| m.2)
                                    .collect(),
                            }
                        };
                        wait_until(
                            &format!("the answer to {prompt:?}"),
                            Duration::from_secs(120),
                            || {
                                let texts = texts();
                                let Some(first) = texts.iter().find(|t| t.contains(&prompt)) else {
                                    return false;
                                };
                                let parts = first
                                    .split_once("(1/")
                                    .and_then(|(_, r)| r.split_once(')'))
                                    .map(|(n, _)| n.to_string());
                                match parts {
                                    None => true,
                                    Some(of) => {
                                        texts
                                            .iter()
                                            .filter(|t| t.contains(&format!("({of}/{of})")))
                                            .count()
                                            >= n
                                    }
                                }
                            },
                        );
                        turns.push(SoakTurn {
                            chat: i,
                            prompt,
                            message,
                        });
                        std::thread::sleep(Duration::from_secs(if c.group { 8 } else { 4 }));
                    }
                    turns
                })
            })
            .collect();
        drivers
            .into_iter()
            .flat_map(|d| d.join().unwrap())
            .collect()
    });
    std::thread::sleep(Duration::from_secs(10));

    // Nothing refused: relayq kept within the limits the fakes enforce.
    let refused_tg: Vec<ChatCall> = fake
        .chat_calls()
        .into_iter()
        .filter(|c| c.refused)
        .collect();
    assert!(refused_tg.is_empty(), "Telegram refused: {refused_tg:#?}");
    let refused_slack: Vec<_> = slack.calls().into_iter().filter(|c| c.refused).collect();
    assert!(
        refused_slack.is_empty(),
        "Slack refused: {refused_slack:#?}"
    );

    // Every answer whole and once.
    for t in &turns {
        let c = &chats[t.chat];
        let firsts = match c.slack {
            false => fake.texts_to(c.chat.parse().unwrap()),
            true => slack
                .messages_in(&c.chat)
                .into_iter()
                .map(|m| m.2)
                .collect(),
        }
        .into_iter()
        .filter(|x| x.contains(&t.prompt))
        .count();
        assert_eq!(firsts, 1, "the answer to {:?}, once", t.prompt);
    }

    // Each chat's calls: (unix ms, cosmetic?, what), in order.
    let calls_of = |c: &SoakChat| -> Vec<(i64, bool, String)> {
        match c.slack {
            false => fake
                .chat_calls()
                .into_iter()
                .filter(|x| x.chat.to_string() == c.chat && !x.refused)
                .map(|x| {
                    let cosmetic =
                        x.method != "sendMessage" || x.body["disable_notification"] == json!(true);
                    (
                        x.unix_ms,
                        cosmetic,
                        format!(
                            "{} {}",
                            x.method,
                            x.body["text"].as_str().unwrap_or_default()
                        ),
                    )
                })
                .collect(),
            true => slack
                .calls()
                .into_iter()
                .filter(|x| x.channel == c.chat && !x.refused)
                .map(|x| {
                    let text = x.body["text"].as_str().unwrap_or_default().to_string();
                    let cosmetic = x.method != "chat.postMessage"
                        || ["⏳", "✔", "✖"].iter().any(|p| text.starts_with(p));
                    (unix_ms_of(x.at), cosmetic, format!("{} {text}", x.method))
                })
                .collect(),
        }
    };
    let mut first_progress_private = Vec::new();
    let mut first_progress_group = Vec::new();
    for (i, c) in chats.iter().enumerate() {
        let calls = calls_of(c);
        // Cosmetic calls paced.
        let gap = if c.group { 2900 } else { 1400 };
        // A Slack reaction's swap is one call of relayq's: the remove goes with its add.
        let cosmetic: Vec<&(i64, bool, String)> = calls
            .iter()
            .filter(|x| x.1 && !x.2.starts_with("reactions.remove"))
            .collect();
        for pair in cosmetic.windows(2) {
            assert!(
                pair[1].0 - pair[0].0 >= gap,
                "{}: cosmetic calls {} ms apart: {pair:?}",
                c.name,
                pair[1].0 - pair[0].0
            );
        }
        let submitted = hook_times(&agents[i], "UserPromptSubmit");
        let stopped = hook_times(&agents[i], "Stop");
        for t in turns.iter().filter(|t| t.chat == i) {
            // No cosmetic call while the answer waited to be sent.
            let stop = stopped[&t.prompt];
            let (answered, first) = calls
                .iter()
                .find(|x| !x.1 && x.2.contains(&t.prompt))
                .map(|x| (x.0, x.2.clone()))
                .unwrap();
            // Its last part: "(N/N)" after the first, "(1/N)".
            let of = first
                .split_once("(1/")
                .and_then(|(_, r)| r.split_once(')'))
                .map(|(n, _)| n.to_string());
            let done = match of {
                None => answered,
                Some(of) => calls
                    .iter()
                    .find(|x| !x.1 && x.0 >= answered && x.2.contains(&format!("({of}/{of})")))
                    .map_or(answered, |x| x.0),
            };
            let behind: Vec<_> = calls
                .iter()
                .filter(|x| x.1 && x.0 > stop + 200 && x.0 < done)
                .collect();
            assert!(
                behind.is_empty(),
                "{}: cosmetic calls while the answer to {:?} waited: {behind:#?}",
                c.name,
                t.prompt
            );
            // The first visible progress: the message's first reaction, or the answer itself
            // when it came first (a quick turn's answer goes before its 👀: durable first).
            let reacted = match c.slack {
                false => fake
                    .chat_calls()
                    .into_iter()
                    .find(|x| {
                        x.method == "setMessageReaction"
                            && x.body["message_id"].as_i64().map(|id| id.to_string())
                                == Some(t.message.clone())
                    })
                    .map(|x| x.unix_ms),
                true => slack
                    .calls()
                    .into_iter()
                    .find(|x| {
                        x.method == "reactions.add" && x.body["timestamp"] == json!(t.message)
                    })
                    .map(|x| unix_ms_of(x.at)),
            };
            let reacted = reacted.expect("the message got a reaction");
            let after = reacted.min(answered) - submitted[&t.prompt];
            if after > 1500 {
                let from = submitted[&t.prompt] - 5000;
                let around: Vec<_> = calls
                    .iter()
                    .filter(|x| x.0 >= from && x.0 <= from + 15_000)
                    .map(|x| {
                        (
                            x.0 - submitted[&t.prompt],
                            x.1,
                            x.2.chars().take(60).collect::<String>(),
                        )
                    })
                    .collect();
                eprintln!(
                    "{}: 👀 for {:?} after {after} ms; calls around: {around:#?}",
                    c.name, t.prompt
                );
                let log = std::fs::read_to_string(app.path("serve.log")).unwrap_or_default();
                let lines: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains(&c.chat) || l.contains(&c.session))
                    .take(40)
                    .collect();
                eprintln!("{}", lines.join("\n"));
            }
            match c.group {
                false => first_progress_private.push(after),
                true => first_progress_group.push(after),
            }
        }
    }
    let (p50, p99, max) = spread(first_progress_private.clone());
    let (g50, g99, gmax) = spread(first_progress_group.clone());
    eprintln!(
        "soak {secs} s, {} turns: first visible progress after the agent took the message: \
         private chats p50 {p50} ms p99 {p99} ms max {max} ms; groups p50 {g50} ms p99 {g99} ms \
         max {gmax} ms; Telegram calls {}, Slack calls {}",
        turns.len(),
        fake.chat_calls().len(),
        slack.calls().len()
    );
    assert!(max <= 1500, "private chats: {first_progress_private:?}");
    assert!(gmax <= 4500, "groups: {first_progress_group:?}");
}

/// An `Instant` as unix ms (the fakes keep `Instant`s; the agents' logs, wall clocks).
fn unix_ms_of(at: std::time::Instant) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    now - at.elapsed().as_millis() as i64
}
