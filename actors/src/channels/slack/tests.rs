use std::time::Duration;

use serde_json::{json, Value};
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::channels::conformance::{
    self, bot_channel, delivery_to, outcome_of, requests, Fixtures,
};
use crate::kit::api::slack::Slack;

const TOKEN: &str = "xoxb-1234-5678-s3cr3tSlackToken";
const CHANNEL: &str = "C0123ABCDEF";

/// Slack's recorded answers: without headers recorded, HTTP 200, as Slack answers even its
/// errors.
const FIXTURES: Fixtures = Fixtures {
    platform: "slack",
    status_of: |_| 200,
};

fn answer(name: &str) -> ResponseTemplate {
    FIXTURES.answer(name)
}

fn channel(base: &str, timeout: Duration) -> SlackChannel {
    bot_channel::<Slack>(TOKEN, base, timeout)
}

/// The channel at `server`, which answers every `chat.postMessage` ok.
async fn posting(server: &MockServer) -> SlackChannel {
    Mock::given(path("/chat.postMessage"))
        .respond_with(answer("ok_post_message"))
        .mount(server)
        .await;
    channel(&server.uri(), Duration::from_secs(5))
}

fn to(id: &str, adjust: impl FnOnce(&mut Delivery)) -> Delivery {
    let mut d = delivery_to(id, |_| {});
    adjust(&mut d);
    d
}

/// How Slack answers, for the channel conformance suite (run by `kinds!`: this kind is
/// marked `conformance`).
pub(crate) async fn conformance() {
    let permanent = [
        "error_channel_not_found",
        "error_is_archived",
        "error_not_in_channel",
        "error_invalid_auth",
        "error_token_revoked",
        "error_account_inactive",
        "error_msg_too_long",
    ];
    let throttled = json!({"ok": false, "error": "ratelimited"});
    let success = ("ok_post_message", "1767225780.000200");
    FIXTURES
        .run_bot_suite::<Slack>(TOKEN, success, throttled, &permanent)
        .await;
}

/// Every Slack answer in the fixtures, and what it makes of the row.
#[test]
fn slack_errors_under_http_200_are_classified_as_its_api_documents_them() {
    let permanent = |name: &str, words: &str| match classify(&FIXTURES.reply(name)) {
        Outcome::Permanent { reason } => assert!(reason.contains(words), "{name}: {reason}"),
        other => panic!("{name}: {other:?}, not permanent"),
    };
    permanent("error_channel_not_found", "Slack: channel_not_found: no such channel");
    permanent("error_is_archived", "Slack: is_archived");
    permanent("error_not_in_channel", "/invite");
    permanent("error_invalid_auth", "fix the token");
    permanent("error_token_revoked", "Slack: token_revoked");
    permanent("error_account_inactive", "Slack: account_inactive");
    permanent("error_msg_too_long", "Slack: msg_too_long");

    assert_eq!(
        classify(&FIXTURES.reply("ok_post_message")),
        Outcome::delivered_as("1767225780.000200")
    );
    assert_eq!(
        classify(&FIXTURES.reply("error_ratelimited")),
        Outcome::Throttled {
            reason: "Slack: ratelimited".into(),
            wait: Duration::from_secs(30),
            channel_wide: false,
        }
    );
    let says = |error: &str| Reply {
        status: 200,
        body: json!({"ok": false, "error": error}).to_string(),
        ..Reply::default()
    };
    for transient in TRANSIENT {
        assert!(
            matches!(classify(&says(transient)), Outcome::Retry { .. }),
            "{transient}"
        );
    }
    let odd = Reply {
        status: 200,
        body: "<html>proxy</html>".into(),
        ..Reply::default()
    };
    assert!(matches!(classify(&odd), Outcome::Unknown { .. }), "never called delivered");
}

#[actix_rt::test]
async fn a_message_carries_its_row_in_metadata_and_goes_to_its_thread() {
    let server = MockServer::start().await;
    let mut slack = posting(&server).await;
    let delivery = to(CHANNEL, |d| {
        if let Content::Outbound(m) = &mut d.content {
            m.text = "*done*: <!channel> tests pass".into();
            m.thread = Some("1767225700.000100".into());
        }
    });
    let (id, written) = (delivery.id, delivery.created_at);
    assert_eq!(
        outcome_of(&mut slack, delivery).await,
        Outcome::delivered_as("1767225780.000200")
    );
    let sent = requests(&server).await;
    assert_eq!(
        sent[0].headers.get("authorization").unwrap(),
        &format!("Bearer {TOKEN}")
    );
    let body: Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert_eq!(body["channel"], CHANNEL);
    assert_eq!(body["thread_ts"], "1767225700.000100");
    assert_eq!(body["mrkdwn"], true);
    assert_eq!(
        body["metadata"],
        json!({"event_type": "relayq_row", "event_payload": {"row": id, "written": written}})
    );
}

/// History holding `marks` (rows relayq sent) and a message of someone else.
fn history(marks: &[(i64, i64)]) -> ResponseTemplate {
    let mut messages = vec![json!({"type": "message", "user": "U1", "text": "hi", "ts": "1700000001.000001"})];
    for (n, (row, written)) in marks.iter().enumerate() {
        messages.push(json!({
            "type": "message", "bot_id": "B0AGENTBOT1", "text": "hello from relayq",
            "ts": format!("1700000002.00000{n}"),
            "metadata": {"event_type": "relayq_row", "event_payload": {"row": row, "written": written}},
        }));
    }
    ResponseTemplate::new(200).set_body_json(json!({"ok": true, "messages": messages, "has_more": false}))
}

#[actix_rt::test]
async fn a_send_cut_by_a_crash_that_reached_slack_is_found_by_its_metadata_and_not_sent_again() {
    let server = MockServer::start().await;
    let row = conformance::delivery();
    Mock::given(path("/conversations.history"))
        .and(query_param("channel", CHANNEL))
        .and(query_param("include_all_metadata", "true"))
        .respond_with(history(&[(row.id + 1, row.created_at), (row.id, row.created_at)]))
        .mount(&server)
        .await;
    let mut slack = posting(&server).await;
    let repeat = to(CHANNEL, |d| d.possible_repeat = true);
    assert_eq!(
        outcome_of(&mut slack, repeat).await,
        Outcome::delivered_as("1700000002.000001"),
        "the message the row made, by its metadata"
    );
    let paths: Vec<String> = requests(&server).await.iter().map(|r| r.url.path().to_string()).collect();
    assert_eq!(paths, ["/conversations.history"], "looked up, not sent");

    // Another database's row with the same id (written at another time) is not it.
    let other = to(CHANNEL, |d| {
        d.possible_repeat = true;
        d.created_at += 1;
    });
    assert_eq!(
        outcome_of(&mut slack, other).await,
        Outcome::delivered_as("1767225780.000200")
    );
    // A first send does not look anything up.
    server.reset().await;
    Mock::given(path("/chat.postMessage"))
        .respond_with(answer("ok_post_message"))
        .mount(&server)
        .await;
    assert!(outcome_of(&mut slack, to(CHANNEL, |_| {})).await.is_delivered());
    let paths: Vec<String> = requests(&server).await.iter().map(|r| r.url.path().to_string()).collect();
    assert_eq!(paths, ["/chat.postMessage"]);
}

#[actix_rt::test]
async fn a_lookup_slack_cannot_answer_now_is_retried_and_one_it_never_can_sends() {
    let server = MockServer::start().await;
    Mock::given(path("/conversations.replies"))
        .and(query_param("ts", "1767225700.000100"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    Mock::given(path("/conversations.history"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"ok": false, "error": "missing_scope", "needed": "channels:history"})))
        .mount(&server)
        .await;
    let mut slack = posting(&server).await;
    let in_thread = to(CHANNEL, |d| {
        d.possible_repeat = true;
        if let Content::Outbound(m) = &mut d.content {
            m.thread = Some("1767225700.000100".into());
        }
    });
    let outcome = outcome_of(&mut slack, in_thread).await;
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
    assert_eq!(requests(&server).await.len(), 1, "nothing sent while unsure");

    let outcome = outcome_of(&mut slack, to(CHANNEL, |d| d.possible_repeat = true)).await;
    assert!(outcome.is_delivered(), "{outcome:?}");
    assert_eq!(requests(&server).await.last().unwrap().url.path(), "/chat.postMessage");
}

#[actix_rt::test]
async fn ready_means_auth_test_said_ok() {
    let server = MockServer::start().await;
    Mock::given(path("/auth.test"))
        .and(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"ok": true, "user": "agent-relay", "team": "Demo"})))
        .mount(&server)
        .await;
    let slack = channel(&server.uri(), Duration::from_secs(5));
    assert_eq!(slack.auth_test().await.unwrap(), "agent-relay");
    assert_eq!(slack.ready_check().unwrap().await, Ok(()));

    let at = |base: &str| channel(base, Duration::from_secs(5));
    let error =
        conformance::refused_ready_check(at, "POST", answer("error_invalid_auth")).await;
    assert_eq!(error, "Slack: invalid_auth");
}

#[test]
fn config_needs_one_token_and_never_shows_it() {
    conformance::a_bot_needs_one_token_and_never_shows_it::<Slack>(TOKEN);
}

/// An approval's question goes with its buttons (their values name the approval and the
/// answer); its outcome is a `chat.update` of the question with the blocks emptied; a question
/// Slack cannot update any more (deleted, too old) gets a new message instead.
#[actix_rt::test]
async fn a_question_has_buttons_and_its_outcome_updates_it_or_is_sent_anew() {
    use relayq_engine::outbound::notice::ApprovalAsked;
    let server = MockServer::start().await;
    let update = |ts: &str, name: &str| {
        Mock::given(method("POST"))
            .and(path("/chat.update"))
            .and(wiremock::matchers::body_partial_json(json!({"ts": ts})))
            .respond_with(answer(name))
    };
    update("1.1", "ok_chat_update").mount(&server).await;
    update("2.2", "error_message_not_found").mount(&server).await;
    update("3.3", "error_cant_update_message").mount(&server).await;
    update("4.4", "error_invalid_auth").mount(&server).await;
    Mock::given(method("POST"))
        .and(path("/chat.postMessage"))
        .respond_with(answer("ok_post_message"))
        .mount(&server)
        .await;
    let mut slack = channel(&format!("{}/", server.uri()), Duration::from_secs(5));

    let question = to(CHANNEL, |d| {
        if let Content::Outbound(m) = &mut d.content {
            m.notice = Some(relayq_engine::Notice {
                session: "agent".into(),
                event: relayq_engine::EventType::Notification,
                headline: "needs you".into(),
                body: None,
                question: Some("permission to use Bash: touch probe.txt".into()),
                approval: Some(ApprovalAsked {
                    id: "k3x9pq".into(),
                    for_session: true,
                    expires_at: 0,
                }),
            });
        }
    });
    let asked = outcome_of(&mut slack, question).await;
    assert!(matches!(asked, Outcome::Delivered(_)), "{asked:?}");
    let sent: Value = serde_json::from_slice(&requests(&server).await[0].body).unwrap();
    let buttons: Vec<(&str, &str)> = sent["blocks"][1]["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["text"]["text"].as_str().unwrap(), b["value"].as_str().unwrap()))
        .collect();
    assert_eq!(
        buttons,
        [
            ("Allow", "relayq:k3x9pq:allow"),
            ("Deny", "relayq:k3x9pq:deny"),
            ("Allow for this session", "relayq:k3x9pq:allow-session")
        ]
    );

    let edit = |ts: &str| to(CHANNEL, |d| {
        if let Content::Outbound(m) = &mut d.content {
            m.edit = Some(ts.into());
        }
    });
    assert_eq!(
        outcome_of(&mut slack, edit("1.1")).await,
        Outcome::delivered_as("1767225780.000200")
    );
    let calls = requests(&server).await;
    let updated: Value = serde_json::from_slice(&calls[1].body).unwrap();
    assert_eq!(
        (&updated["channel"], &updated["ts"], &updated["blocks"]),
        (&json!(CHANNEL), &json!("1.1"), &json!([])),
        "the buttons go"
    );
    for gone in ["2.2", "3.3"] {
        let anew = outcome_of(&mut slack, edit(gone)).await;
        assert!(matches!(anew, Outcome::Delivered(_)), "{anew:?}");
        let last = requests(&server).await.last().unwrap().url.path().to_string();
        assert_eq!(last, "/chat.postMessage", "sent anew");
    }
    let refused = outcome_of(&mut slack, edit("4.4")).await;
    assert!(matches!(refused, Outcome::Permanent { .. }), "{refused:?}");
    assert_eq!(requests(&server).await.len(), 7, "no message sent anew");
}
