use std::time::Duration;

use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::channels::conformance::{
    self, bot_channel, delivery_to as to, outcome_of, requests, Fixtures,
};
use crate::kit::api::discord::Discord;

const TOKEN: &str = "MTMwMDAwMDAwMDAwMDAwMDAwMQ.GabcDE.s3cr3t-discord-token";
const CHANNEL: &str = "1312345678901234567";

/// Discord's recorded answers: without headers recorded, the status Discord answers its
/// error code with.
const FIXTURES: Fixtures = Fixtures {
    platform: "discord",
    status_of: |body| match body["code"].as_i64() {
        None => 200,
        Some(10003 | 10015) => 404,
        Some(50001 | 50007 | 50013) => 403,
        Some(_) => 400,
    },
};

fn answer(name: &str) -> ResponseTemplate {
    FIXTURES.answer(name)
}

fn channel(base: &str, timeout: Duration) -> DiscordChannel {
    bot_channel::<Discord>(TOKEN, base, timeout)
}

/// How Discord answers, for the channel conformance suite (run by `kinds!`: this kind is
/// marked `conformance`).
pub(crate) async fn conformance() {
    let permanent = [
        "error_10003",
        "error_10015",
        "error_50001",
        "error_50007",
        "error_50013",
        "error_50035_content_too_long",
    ];
    let throttled = json!({"message": format!("You are being rate limited ({TOKEN})"),
        "retry_after": 7.0, "global": false});
    let success = ("ok_create_message", "1323456789012345678");
    FIXTURES
        .run_bot_suite::<Discord>(TOKEN, success, throttled, &permanent)
        .await;
}

/// Every Discord answer in the fixtures, and what it makes of the row.
#[test]
fn discord_errors_are_classified_as_its_api_documents_them() {
    let permanent = |name: &str, words: &[&str]| match classify(&FIXTURES.reply(name)) {
        Outcome::Permanent { reason } => {
            for w in words {
                assert!(reason.contains(w), "{name}: {reason}");
            }
        }
        other => panic!("{name}: {other:?}, not permanent"),
    };
    permanent("error_10003", &["Discord 404 (10003): Unknown Channel", "`to`"]);
    permanent("error_50001", &["403 (50001): Missing Access", "invite"]);
    permanent("error_50007", &["(50007): Cannot send messages to this user", "DMs"]);
    permanent("error_50013", &["(50013): Missing Permissions", "Send Messages"]);
    permanent("error_50035_content_too_long", &["400 (50035): Invalid Form Body"]);

    assert_eq!(
        classify(&FIXTURES.reply("ok_create_message")),
        Outcome::delivered_as("1323456789012345678")
    );
    // A route's 429: that channel id waits the body's retry_after (finer than the header's 2 s).
    assert_eq!(
        classify(&FIXTURES.reply("error_429")),
        Outcome::Throttled {
            reason: "Discord 429: You are being rate limited.".into(),
            wait: Duration::from_millis(1337),
            channel_wide: false,
        }
    );
    // The global limit: every destination of the channel waits.
    match classify(&FIXTURES.reply("error_429_global")) {
        Outcome::Throttled {
            wait, channel_wide, ..
        } => assert_eq!((wait, channel_wide), (Duration::from_millis(500), true)),
        other => panic!("global 429: {other:?}"),
    }
    let unauthorized = Reply {
        status: 401,
        body: r#"{"message": "401: Unauthorized", "code": 0}"#.into(),
        ..Reply::default()
    };
    assert!(
        matches!(classify(&unauthorized), Outcome::Unreachable { error } if error.contains("token")),
        "a bad token is not the row's fault"
    );
    let odd = Reply {
        status: 200,
        body: "<html>proxy</html>".into(),
        ..Reply::default()
    };
    assert!(matches!(classify(&odd), Outcome::Unknown { .. }), "never called delivered");
    let gateway = Reply {
        status: 502,
        ..Reply::default()
    };
    assert!(matches!(classify(&gateway), Outcome::Retry { .. }));
}

#[actix_rt::test]
async fn a_message_carries_its_nonce_and_pings_nobody_and_goes_to_its_thread_as_a_reply() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(answer("ok_create_message"))
        .mount(&server)
        .await;
    let mut discord = channel(&server.uri(), Duration::from_secs(5));
    let delivery = to(CHANNEL, |m| {
        m.text = "@everyone tests pass".into();
        m.thread = Some("1399999999999999999".into());
        m.reply_to = Some("1399999999999999999/1323456789012345000".into());
    });
    let (id, created_at) = (delivery.id, delivery.created_at);
    assert_eq!(
        outcome_of(&mut discord, delivery).await,
        Outcome::delivered_as("1399999999999999999/1323456789012345678"),
        "a message in a thread is addressed thread/message"
    );
    let sent = requests(&server).await;
    assert_eq!(sent[0].url.path(), "/channels/1399999999999999999/messages");
    assert_eq!(
        sent[0].headers.get("authorization").unwrap(),
        &format!("Bot {TOKEN}")
    );
    assert!(sent[0].headers.get("user-agent").unwrap().to_str().unwrap().starts_with("DiscordBot ("));
    let body: Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert_eq!(body["content"], "@everyone tests pass");
    assert_eq!(body["nonce"], format!("{id}.{created_at}"));
    assert_eq!(body["enforce_nonce"], true);
    assert_eq!(body["allowed_mentions"], json!({"parse": []}));
    assert_eq!(body["message_reference"]["message_id"], "1323456789012345000");
    assert!(body["nonce"].as_str().unwrap().len() <= MAX_NONCE);
    assert_eq!(nonce(123_456_789_012, 1_767_225_600_000), "123456789012");
}

#[actix_rt::test]
async fn a_to_that_is_not_a_channel_id_is_permanent_and_nothing_is_sent() {
    let server = MockServer::start().await;
    let mut discord = channel(&server.uri(), Duration::from_secs(5));
    for bad in ["../../users/@me", "general", "", "123/messages"] {
        let outcome = outcome_of(&mut discord, to(bad, |_| {})).await;
        assert!(matches!(outcome, Outcome::Permanent { .. }), "{bad:?}: {outcome:?}");
    }
    assert!(requests(&server).await.is_empty());
}

#[actix_rt::test]
async fn an_empty_bucket_holds_that_channel_without_a_request_until_it_resets() {
    let server = MockServer::start().await;
    Mock::given(path(format!("/channels/{CHANNEL}/messages")))
        .respond_with(
            answer("ok_create_message")
                .insert_header("X-RateLimit-Bucket", "80c17d2f203122d936070c88c8d10f33")
                .insert_header("X-RateLimit-Limit", "5")
                .insert_header("X-RateLimit-Remaining", "0")
                .insert_header("X-RateLimit-Reset-After", "30"),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(answer("ok_create_message"))
        .mount(&server)
        .await;
    let mut discord = channel(&server.uri(), Duration::from_secs(5));
    assert!(outcome_of(&mut discord, to(CHANNEL, |_| {})).await.is_delivered());
    match outcome_of(&mut discord.clone(), to(CHANNEL, |_| {})).await {
        Outcome::Throttled {
            wait, channel_wide, ..
        } => assert!(
            wait > Duration::from_secs(25) && wait <= Duration::from_secs(30) && !channel_wide,
            "{wait:?}"
        ),
        other => panic!("the empty bucket was not honoured: {other:?}"),
    }
    assert_eq!(requests(&server).await.len(), 1, "no request into an empty bucket");
    // Another channel is another window of the bucket.
    assert!(outcome_of(&mut discord, to("1312345678901234999", |_| {})).await.is_delivered());
}

#[actix_rt::test]
async fn ready_means_the_bot_user_answered() {
    let server = MockServer::start().await;
    Mock::given(path("/users/@me"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"id": "1300000000000000001", "username": "agent-relay", "bot": true})))
        .mount(&server)
        .await;
    let discord = channel(&server.uri(), Duration::from_secs(5));
    assert_eq!(discord.bot_user().await.unwrap(), "agent-relay");
    assert_eq!(discord.ready_check().unwrap().await, Ok(()));

    let refusal = ResponseTemplate::new(401)
        .set_body_json(json!({"message": "401: Unauthorized", "code": 0}));
    let at = |base: &str| channel(base, Duration::from_secs(5));
    let error = conformance::refused_ready_check(at, "GET", refusal).await;
    assert!(error.contains("Unauthorized") && !error.contains(TOKEN), "{error}");
}

#[test]
fn config_needs_one_token_and_never_shows_it() {
    let config = conformance::a_bot_needs_one_token_and_never_shows_it::<Discord>(TOKEN);
    let bad_url = Config {
        api_url: Some("ftp://discord".into()),
        ..config
    };
    assert_eq!(bad_url.check().unwrap_err().key, "api_url");
}

/// A row's ids reach the API's paths only as snowflakes: a reaction, a progress message or an
/// edit addressed to anything else (the HTTP API takes any chat id) makes no request.
#[actix_rt::test]
async fn ids_that_are_not_snowflakes_never_reach_the_api() {
    use crate::channels::CosmeticCall;
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .respond_with(ResponseTemplate::new(204))
        .mount(&server)
        .await;
    let discord = channel(&server.uri(), Duration::from_secs(5));
    let calls = [
        CosmeticCall::React {
            to: "../../users/@me".into(),
            message: "1323456789012345678".into(),
            emoji: "👀".into(),
            previous: None,
        },
        CosmeticCall::React {
            to: CHANNEL.into(),
            message: "../1/x".into(),
            emoji: "👀".into(),
            previous: None,
        },
        CosmeticCall::Post {
            to: "guilds/1".into(),
            thread: None,
            text: "hi".into(),
        },
        CosmeticCall::Edit {
            to: CHANNEL.into(),
            message: "..%2f".into(),
            text: "hi".into(),
        },
    ];
    for call in calls {
        let answer = discord.cosmetic(call.clone()).unwrap().await;
        assert!(
            matches!(answer, crate::channels::CosmeticOutcome::Failed(_)),
            "{call:?}: {answer:?}"
        );
    }
    assert!(requests(&server).await.is_empty(), "no request made");
    assert_eq!(located(CHANNEL, "1399999999999999999/1323456789012345678"),
               Some(("1399999999999999999", "1323456789012345678")));
}
