use std::time::Duration;

use serde_json::{json, Value};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::channels::conformance::{
    self, bot_channel, delivery_to as to, outcome_of, Fixtures,
};
use crate::kit::api::telegram::Telegram;
use crate::channels::ChannelKind;

const TOKEN: &str = "123456:s3cr3t-T0KEN-abcdef";

/// Telegram's recorded answers: without headers recorded, the status its `error_code` says
/// (200 for `ok: true`).
const FIXTURES: Fixtures = Fixtures {
    platform: "telegram",
    status_of: |body| body["error_code"].as_u64().unwrap_or(200) as u16,
};

fn answer(name: &str) -> ResponseTemplate {
    FIXTURES.answer(name)
}

fn channel(base: &str, timeout: Duration) -> TelegramChannel {
    bot_channel::<Telegram>(TOKEN, base, timeout)
}

async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

/// How Telegram answers, for the channel conformance suite (run by `kinds!`: this kind is
/// marked `conformance`).
pub(crate) async fn conformance() {
    let permanent = [
        "error_chat_not_found",
        "error_blocked",
        "error_user_deactivated",
        "error_kicked",
        "error_kicked_supergroup",
        "error_cant_initiate",
        "error_too_long",
        "error_caption_too_long",
    ];
    let throttled = json!({
        "ok": false, "error_code": 429,
        "description": format!("Too Many Requests: retry after 7 (bot{TOKEN})"),
        "parameters": {"retry_after": 7}
    });
    FIXTURES
        .run_bot_suite::<Telegram>(TOKEN, ("ok_send_message", "4213"), throttled, &permanent)
    .await;
}

/// Every Telegram answer in the fixtures, and what it makes of the row.
#[test]
fn telegram_errors_are_classified_as_the_bot_api_documents_them() {
    let reply = |name: &str| FIXTURES.reply(name);
    let permanent = |name: &str, words: &str| match classify(&reply(name)) {
        Verdict::Done(Outcome::Permanent { reason }) => {
            assert!(reason.contains(words), "{name}: {reason}")
        }
        other => panic!("{name}: {other:?}, not permanent"),
    };
    permanent("error_chat_not_found", "chat not found");
    permanent("error_blocked", "bot was blocked by the user");
    permanent("error_user_deactivated", "user is deactivated");
    permanent("error_kicked", "kicked from the group chat");
    permanent("error_kicked_supergroup", "kicked from the supergroup chat");
    permanent("error_cant_initiate", "can't initiate conversation");
    permanent("error_too_long", "message is too long");

    assert_eq!(
        classify(&reply("ok_send_message")),
        Verdict::Done(Outcome::delivered_as("4213"))
    );
    // The body's retry_after, without the header.
    match classify(&reply("error_429")) {
        Verdict::Done(Outcome::Throttled {
            wait, channel_wide, ..
        }) => assert_eq!((wait, channel_wide), (Duration::from_secs(17), false)),
        other => panic!("429: {other:?}"),
    }
    assert_eq!(
        classify(&reply("error_migrated")),
        Verdict::Migrated(json!(-1001234567890_i64))
    );
    assert!(matches!(
        classify(&reply("error_cant_parse_entities")),
        Verdict::BadMarkup(e) if e.contains("can't parse entities")
    ));
    match classify(&reply("error_unauthorized")) {
        Verdict::Done(Outcome::Unreachable { error }) => {
            assert!(error.contains("Unauthorized") && error.contains("token"), "{error}")
        }
        other => panic!("401: {other:?}, not an uncounted failure"),
    }
    // A 200 that does not say ok: the message may exist; never called delivered.
    let odd = Reply {
        status: 200,
        retry_after: None,
        body: "<html>proxy</html>".into(),
        ..Reply::default()
    };
    assert!(matches!(
        classify(&odd),
        Verdict::Done(Outcome::Unknown { .. })
    ));
}

#[actix_rt::test]
async fn a_group_upgraded_to_a_supergroup_is_followed_and_remembered() {
    let server = MockServer::start().await;
    Mock::given(body_partial_json(json!({"chat_id": 111})))
        .respond_with(answer("error_migrated"))
        .mount(&server)
        .await;
    Mock::given(body_partial_json(json!({"chat_id": -1001234567890_i64})))
        .respond_with(answer("ok_send_message"))
        .mount(&server)
        .await;
    let mut tg = channel(&server.uri(), Duration::from_secs(5));
    let outcome = outcome_of(&mut tg, to("111", |_| {})).await;
    assert_eq!(outcome, Outcome::delivered_as("4213"));
    let outcome = outcome_of(&mut tg.clone(), to("111", |_| {})).await;
    assert_eq!(outcome, Outcome::delivered_as("4213"));
    let chats: Vec<Value> = bodies(&server)
        .await
        .iter()
        .map(|b| b["chat_id"].clone())
        .collect();
    assert_eq!(
        chats,
        [json!(111), json!(-1001234567890_i64), json!(-1001234567890_i64)],
        "the old id once; then the new id, also for the next row"
    );
}

#[actix_rt::test]
async fn a_notice_telegram_cannot_parse_is_sent_again_as_plain_text() {
    let server = MockServer::start().await;
    Mock::given(body_partial_json(json!({"parse_mode": "HTML"})))
        .respond_with(answer("error_cant_parse_entities"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(answer("ok_send_message"))
        .mount(&server)
        .await;
    let notice = relayq_engine::Notice {
        session: "s1".into(),
        event: relayq_engine::EventType::AgentStop,
        headline: "agent finished".into(),
        body: Some("All <tests> pass".into()),
        question: None,
        approval: None,
    };
    let mut tg = channel(&server.uri(), Duration::from_secs(5));
    let text = tg.render(&notice);
    let delivery = to("123456789", |m| {
        m.text = text;
        m.notice = Some(notice.clone());
    });
    assert_eq!(
        outcome_of(&mut tg, delivery).await,
        Outcome::delivered_as("4213")
    );
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["parse_mode"], "HTML");
    assert!(sent[0]["text"].as_str().unwrap().contains("<b>s1</b>"));
    assert!(sent[1].get("parse_mode").is_none(), "{}", sent[1]);
    assert_eq!(sent[1]["text"], "s1: agent finished\n\nAll <tests> pass");
}

#[actix_rt::test]
async fn thread_and_reply_go_with_the_message_and_plain_text_has_no_parse_mode() {
    let server = MockServer::start().await;
    Mock::given(path(format!("/bot{TOKEN}/sendMessage")))
        .respond_with(answer("ok_send_message"))
        .mount(&server)
        .await;
    let mut tg = channel(&server.uri(), Duration::from_secs(5));
    // A writer's own text beside a notice is its text, not the notice's HTML.
    let delivery = to("-1001987654321", |m| {
        m.text = "<b>not markup</b>".into();
        m.notice = Some(relayq_engine::Notice {
            session: "s1".into(),
            event: relayq_engine::EventType::AgentStop,
            headline: "agent finished".into(),
            body: None,
            question: None,
            approval: None,
        });
        m.thread = Some("42".into());
        m.reply_to = Some("977".into());
    });
    assert_eq!(
        outcome_of(&mut tg, delivery).await,
        Outcome::delivered_as("4213")
    );
    let sent = bodies(&server).await;
    assert_eq!(sent[0]["chat_id"], json!(-1001987654321_i64));
    assert_eq!(sent[0]["message_thread_id"], json!(42));
    assert_eq!(sent[0]["reply_parameters"]["message_id"], json!(977));
    assert_eq!(sent[0]["text"], "<b>not markup</b>");
    assert!(sent[0].get("parse_mode").is_none());

    // Issue 27, item 9: a later part of a split text stays in the thread and quotes nothing.
    let second = to("-1001987654321", |m| {
        m.thread = Some("42".into());
        m.reply_to = Some("977".into());
        m.part = Some(relayq_engine::outbound::Part { index: 2, of: 2 });
    });
    outcome_of(&mut tg, second).await;
    let sent = bodies(&server).await;
    assert_eq!(sent[1]["message_thread_id"], json!(42));
    assert!(sent[1].get("reply_parameters").is_none(), "{}", sent[1]);
}

#[actix_rt::test]
async fn ready_means_get_me_answered_with_the_bot() {
    let server = MockServer::start().await;
    Mock::given(path(format!("/bot{TOKEN}/getMe")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "ok": true,
            "result": {"id": 7000000001_i64, "is_bot": true, "first_name": "Agent Relay", "username": "agent_relay_bot"}
        })))
        .mount(&server)
        .await;
    let tg = channel(&server.uri(), Duration::from_secs(5));
    assert_eq!(tg.get_me().await.unwrap(), "agent_relay_bot");
    assert_eq!(tg.ready_check().unwrap().await, Ok(()));

    let at = |base: &str| channel(base, Duration::from_secs(5));
    let error =
        conformance::refused_ready_check(at, "GET", answer("error_unauthorized")).await;
    assert!(error.contains("Unauthorized") && !error.contains(TOKEN), "{error}");
}

#[test]
fn config_needs_one_token_and_never_shows_it() {
    let config = conformance::a_bot_needs_one_token_and_never_shows_it::<Telegram>(TOKEN);
    let (url, _) = Config {
        api_url: Some("http://127.0.0.1:9/tg".into()),
        ..config
    }
    .bot_url()
    .unwrap();
    assert_eq!(url.as_str(), format!("http://127.0.0.1:9/tg/bot{TOKEN}/"));
    let bad = Config::new("not a token").build().err().unwrap();
    assert_eq!(bad.key, "token");
}

/// An approval's outcome edits its question (`editMessageText`, buttons gone). A question
/// Telegram can no longer edit gets the outcome as a new message; any other refusal of the
/// edit is the row's answer, not a second message.
#[actix_rt::test]
async fn an_edit_replaces_the_question_and_only_an_uneditable_one_is_sent_anew() {
    let server = MockServer::start().await;
    let base = format!("/bot{TOKEN}/");
    let refusal = |description: &str| {
        ResponseTemplate::new(400).set_body_json(
            json!({"ok": false, "error_code": 400, "description": description}),
        )
    };
    // Each edit of message `id` is answered `reply`.
    for (id, reply) in [
        (10, answer("ok_edit_message_text")),
        (11, answer("error_message_to_edit_not_found")),
        (13, answer("error_message_not_modified")),
        (12, refusal("Bad Request: message text is empty")),
    ] {
        Mock::given(method("POST"))
            .and(path(format!("{base}editMessageText")))
            .and(body_partial_json(json!({"message_id": id})))
            .respond_with(reply)
            .mount(&server)
            .await;
    }
    Mock::given(method("POST"))
        .and(path(format!("{base}sendMessage")))
        .respond_with(answer("ok_send_message"))
        .mount(&server)
        .await;
    let mut tg = channel(&server.uri(), Duration::from_secs(5));
    let edit = |id: &str| to("111", |m| m.edit = Some(id.into()));

    let edited = outcome_of(&mut tg, edit("10")).await;
    assert_eq!(edited, Outcome::delivered_as("10"));
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["message_id"], 10);
    assert!(sent[0].get("reply_markup").is_none(), "the buttons go");

    let anew = outcome_of(&mut tg, edit("11")).await;
    assert!(matches!(anew, Outcome::Delivered(_)), "{anew:?}");
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 3, "the edit, then the message sent anew");
    assert!(sent[2].get("message_id").is_none(), "{}", sent[2]);

    let refused = outcome_of(&mut tg, edit("12")).await;
    assert!(matches!(refused, Outcome::Permanent { .. }), "{refused:?}");
    assert_eq!(bodies(&server).await.len(), 4, "no message sent anew");

    let unchanged = outcome_of(&mut tg, edit("13")).await;
    assert_eq!(unchanged, Outcome::delivered_as("13"), "already says it");
    assert_eq!(bodies(&server).await.len(), 5, "no message sent anew");
}

/// A topic call is not paced with the chat's messages: a 429 on `createForumTopic` is waited
/// out as Telegram asks (a session start would otherwise fail on a busy chat), and a wait
/// longer than relayq takes is a refusal that says so.
#[actix_rt::test]
async fn a_topic_call_told_to_wait_waits_then_opens_the_topic() {
    let server = MockServer::start().await;
    let throttled = |secs: u64| {
        ResponseTemplate::new(429).set_body_json(json!({
            "ok": false, "error_code": 429,
            "description": format!("Too Many Requests: retry after {secs}"),
            "parameters": {"retry_after": secs}
        }))
    };
    Mock::given(path(format!("/bot{TOKEN}/createForumTopic")))
        .and(body_partial_json(json!({"name": "busy"})))
        .respond_with(throttled(1))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(path(format!("/bot{TOKEN}/createForumTopic")))
        .and(body_partial_json(json!({"name": "busy"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "ok": true,
            "result": {"message_thread_id": 77, "name": "busy", "icon_color": 7322096}
        })))
        .mount(&server)
        .await;
    Mock::given(path(format!("/bot{TOKEN}/createForumTopic")))
        .and(body_partial_json(json!({"name": "flooded"})))
        .respond_with(throttled(600))
        .mount(&server)
        .await;
    let tg = channel(&server.uri(), Duration::from_secs(5));
    let open = |name: &str| crate::channels::ThreadCall::Open {
        to: "-100777".into(),
        name: name.into(),
    };
    let began = std::time::Instant::now();
    let opened = tg.thread(open("busy")).unwrap().await;
    assert_eq!(opened, Ok(Some("77".to_string())));
    assert!(began.elapsed() >= Duration::from_secs(1), "waited as asked");
    let refused = tg.thread(open("flooded")).unwrap().await;
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("retry after 600")),
        "{refused:?}"
    );
}
