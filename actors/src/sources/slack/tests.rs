use super::*;

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
    let taken = e.accept(&message, "slack:s").unwrap();
    assert_eq!((taken.session.as_str(), taken.content.as_str()), ("agent", "hi"));
    assert_eq!(taken.source_message_id.as_deref(), Some("1.1"));
    let mut stranger = message.clone();
    stranger["user"] = json!("U2");
    assert!(e.accept(&stranger, "slack:s").is_none());
    let mut bot = message.clone();
    bot["bot_id"] = json!("B1");
    assert!(e.accept(&bot, "slack:s").is_none(), "relayq's own answers");
    let mut edit = message.clone();
    edit["subtype"] = json!("message_changed");
    assert!(e.accept(&edit, "slack:s").is_none());
    let mut elsewhere = message;
    elsewhere["channel"] = json!("C9");
    assert!(e.accept(&elsewhere, "slack:s").is_none(), "no session for it");
}
