use super::*;
use relayq_engine::approvals;

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

fn events() -> SlackEvents {
    let config: Config = serde_json::from_value(json!({
        "signing_secret": SECRET, "allowed_users": ["U1"], "channels": {"C1": "agent"},
    }))
    .unwrap();
    SlackEvents::new(config, Secret::new(SECRET))
}

fn push(ts: i64, signature: &str, body: &str) -> Push {
    Push {
        headers: vec![
            ("x-slack-request-timestamp".into(), ts.to_string()),
            ("x-slack-signature".into(), signature.into()),
        ],
        body: body.as_bytes().to_vec(),
    }
}

#[test]
fn slacks_documented_signature_example_verifies() {
    // api.slack.com/authentication/verifying-requests-from-slack, "Validating a request".
    let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    let ts = 1531420618;
    let expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    assert_eq!(sign(SECRET, ts, body.as_bytes()), expected);
    assert!(events().verify(&push(ts, expected, body), ts + 10).is_ok());
}

#[test]
fn a_wrong_signature_a_changed_body_or_an_old_timestamp_is_refused() {
    let e = events();
    let body = r#"{"type":"event_callback"}"#;
    let ts = 1_700_000_000;
    let good = sign(SECRET, ts, body.as_bytes());
    assert!(e.verify(&push(ts, &good, body), ts).is_ok());
    let other = sign("another-secret", ts, body.as_bytes());
    assert!(e.verify(&push(ts, &other, body), ts).is_err());
    assert!(e.verify(&push(ts, &good, r#"{"type":"event_callback" }"#), ts).is_err());
    assert!(e.verify(&push(ts, &good, body), ts + 301).is_err(), "a replay");
    assert!(e.verify(&push(ts, "v1=00", body), ts).is_err());
}

#[test]
fn only_an_allowed_users_own_message_in_a_mapped_conversation_is_taken() {
    let e = events();
    let message = json!({"type": "message", "user": "U1", "channel": "C1", "ts": "1.1", "text": "hi"});
    let taken = e.reader.accept(&message, "slack:s").unwrap();
    assert_eq!((taken.session.as_str(), taken.content.as_str()), ("agent", "hi"));
    assert_eq!(taken.source_message_id.as_deref(), Some("1.1"));
    assert!(!taken.unlisted);
    let mut stranger = message.clone();
    stranger["user"] = json!("U2");
    let unlisted = e.reader.accept(&stranger, "slack:s").unwrap();
    assert!(unlisted.unlisted, "taken by the write only if pairing added them");
    let mut bot = message.clone();
    bot["bot_id"] = json!("B1");
    assert!(e.reader.accept(&bot, "slack:s").is_none(), "relayq's own answers");
    let mut edit = message.clone();
    edit["subtype"] = json!("message_changed");
    assert!(e.reader.accept(&edit, "slack:s").is_none());
    // A conversation config.toml maps to no session: its own sessions (/new) decide in the
    // write, and with none the message is kept expired and the conversation told.
    let mut elsewhere = message;
    elsewhere["channel"] = json!("C9");
    let taken = e.reader.accept(&elsewhere, "slack:s").unwrap();
    assert!(taken.session.is_empty() && taken.route_by_chat, "{taken:?}");
}

#[test]
fn a_session_command_typed_after_a_space_is_a_session_request() {
    let e = events();
    let event = |text: &str| {
        json!({"type": "event_callback", "event": {"type": "message", "user": "U1",
               "channel": "C1", "ts": "1.5", "thread_ts": "1.0", "text": text}})
    };
    let Pushed::Requests(requests) = e.reader.event_callback(&event(" /new demo codex"), "slack:s")
    else {
        panic!("not a request");
    };
    let r = &requests[0];
    assert_eq!((r.chat.as_str(), r.thread.as_deref()), ("C1", Some("1.0")));
    assert_eq!(r.message_id.as_deref(), Some("1.5"));
    let expected = relayq_engine::chat_sessions::ChatCommand::New {
        project: Some("demo".into()),
        agent: Some(relayq_engine::Agent::Codex),
        name: None,
    };
    assert_eq!(r.asked, Asked::Typed(Ok(expected)));
    // Other text is a message for the agent, as before.
    assert!(matches!(
        e.reader.event_callback(&event("new demo"), "slack:s"),
        Pushed::Messages(m) if m.len() == 1
    ));
}

/// A `block_actions` click as Slack posts it (docs.slack.dev, block_actions payload).
fn click(user: &str, value: &str) -> Value {
    json!({
        "type": "block_actions",
        "user": {"id": user, "username": "amy", "name": "amy", "team_id": "T1"},
        "container": {"type": "message", "message_ts": "1.2", "channel_id": "C1"},
        "channel": {"id": "C1", "name": "dev"},
        "response_url": "https://hooks.slack.com/actions/T1/1/x",
        "actions": [{"action_id": "relayq-allow", "block_id": "b", "type": "button", "value": value}],
    })
}

#[test]
fn a_click_on_an_approvals_button_is_its_answer_and_only_allowed_users_may_give_it() {
    let e = events();
    let answers = e.reader.clicked(&click("U1", "relayq:abc234:allow-session"), "slack:s");
    assert_eq!(answers.len(), 1);
    let a = &answers[0];
    assert_eq!(a.target, approvals::Target::Id("abc234".into()));
    assert_eq!(
        a.decision,
        approvals::Decision::Allow(approvals::Scope::Session)
    );
    assert_eq!(a.role, crate::kit::routing::Role::Approver);
    assert_eq!(a.who.chat, Some(("slack:s".into(), "C1".into())));
    assert_eq!(a.who.name, "amy");
    assert_eq!(
        a.callback.as_deref(),
        Some("https://hooks.slack.com/actions/T1/1/x")
    );
    assert!(e.reader.clicked(&click("U2", "relayq:abc234:allow"), "slack:s")[0].role < crate::kit::routing::Role::Approver);
    assert!(e.reader.clicked(&click("U1", "someone-elses-button"), "slack:s").is_empty());
    // The documented payload, as recorded in the fixtures.
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/slack/block_actions.json");
    let recorded: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let answers = e.reader.clicked(&recorded, "slack:s");
    assert_eq!(answers[0].target, approvals::Target::Id("k3x9pq".into()));
    assert_eq!(
        answers[0].who.chat,
        Some(("slack:s".into(), "C0123ABCDEF".into()))
    );
    assert!(answers[0].role < crate::kit::routing::Role::Approver, "U0ALICE0001 is not in this source's allowed_users");
    let body = format!(
        "payload={}",
        "%7B%22type%22%3A%22block_actions%22%7D"
    );
    assert_eq!(interaction_of(body.as_bytes()).as_deref(), Some(r#"{"type":"block_actions"}"#));
    assert_eq!(interaction_of(br#"{"type":"event_callback"}"#), None);
}

#[test]
fn allow_and_deny_typed_in_slack_answer_and_a_word_naming_no_question_stays_a_message() {
    let e = events();
    let said = |text: &str, thread: Option<&str>| {
        let mut m = json!({"type": "message", "user": "U1", "channel": "C1", "ts": "9.9", "text": text});
        if let Some(t) = thread {
            m["thread_ts"] = json!(t);
        }
        crate::sources::chat_words::answer_in(&e.reader.accept(&m, "slack:s").unwrap(), crate::kit::routing::Role::Approver, true)
    };
    let deny = said("deny abc234", None).unwrap();
    assert_eq!(
        (deny.target, deny.decision),
        (approvals::Target::Id("abc234".into()), approvals::Decision::Deny)
    );
    assert!(deny.otherwise.is_some(), "if abc234 is no approval, a message");
    let yes = said("yes", Some("1.2")).unwrap();
    assert_eq!(
        yes.target,
        approvals::Target::Question {
            message_id: "1.2".into()
        }
    );
    // Outside a question's thread: the one question open in the channel, if there is one
    // alone (issue 41, item 14); a message otherwise.
    let bare = said("yes", None).unwrap();
    assert_eq!(bare.target, approvals::Target::OpenInChat);
    assert!(bare.otherwise.is_some(), "a message when no one question is open");
    assert!(said("please deny it", None).is_none());
}

#[test]
fn a_click_on_a_session_button_is_a_session_request_and_a_strangers_is_known_as_such() {
    let e = events();
    let data = relayq_engine::chat_sessions::Tap::Page(2).data();
    let Pushed::Requests(requests) = e.reader.interaction(&click("U1", &data), "slack:s") else {
        panic!("not a request");
    };
    let r = &requests[0];
    assert_eq!(r.chat, "C1");
    assert!(r.may && r.known);
    assert_eq!(
        r.asked,
        Asked::Tapped {
            tap: relayq_engine::chat_sessions::Tap::Page(2),
            callback: Some("https://hooks.slack.com/actions/T1/1/x".into())
        }
    );
    let Pushed::Requests(strangers) = e.reader.interaction(&click("U9", &data), "slack:s") else {
        panic!("not a request");
    };
    assert!(!strangers[0].known, "refused in the write, naming nothing");
}
