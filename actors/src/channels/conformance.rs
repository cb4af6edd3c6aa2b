//! The conformance suite every HTTP channel runs against a local mock server (wiremock): the
//! same production code path as against the platform, only the base URL differs.
//!
//! | the far end                                | the outcome                                |
//! |--------------------------------------------|--------------------------------------------|
//! | the platform's success answer              | delivered, with its message id and a time  |
//! | 429 with `Retry-After`                     | throttled for that long                    |
//! | each of the platform's permanent errors    | permanent                                  |
//! | 500, 502, 503; no answer in time; refused  | retry                                      |
//!
//! and in no case does an error text hold one of the channel's secrets, even when the far end
//! echoes them back.

use std::time::{Duration, Instant};

use relayq_engine::OutboundMessage;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::channels::bot::{BotConfig, Platform};
use crate::channels::{Answer, Channel, Content, Delivery, Outcome};
use crate::kit::http::Reply;

/// Makes the channel under test, talking to a base URL (the mock server's, no trailing slash)
/// with a timeout.
pub type Build<C> = Box<dyn Fn(&str, Duration) -> C>;

/// How a platform answers, for the suite to play back.
pub struct ChannelUnderTest<C> {
    pub build: Build<C>,
    /// The secrets the channel was built with: none may show in an error.
    pub secrets: Vec<String>,
    /// The platform's answer to a successful send, and the message id it carries.
    pub success: (ResponseTemplate, Option<String>),
    /// The platform's answer when it throttles, with `Retry-After: 7` (and the same in its body
    /// where the platform puts it there).
    pub throttled: ResponseTemplate,
    /// The platform's answers that no retry can fix (bad token, unknown chat, blocked...).
    pub permanent: Vec<ResponseTemplate>,
}

/// The row the suite delivers.
pub fn delivery() -> Delivery {
    Delivery {
        id: 42,
        queue: "outbound".into(),
        attempt: 1,
        created_at: 1_700_000_000_000,
        possible_repeat: false,
        agent: Default::default(),
        content: Content::Outbound(OutboundMessage {
            session: Some("s1".into()),
            ..OutboundMessage::text("under-test", "12345", "hello from relayq")
        }),
    }
}

/// Delivers [`delivery`] through `channel` and waits for the answer.
pub async fn deliver<C: Channel>(channel: &mut C) -> Outcome {
    outcome_of(channel, delivery()).await
}

/// Delivers `delivery` through `channel` and waits for the answer.
pub async fn outcome_of<C: Channel>(channel: &mut C, delivery: Delivery) -> Outcome {
    match channel.deliver(delivery) {
        Answer::Now(outcome) => outcome,
        Answer::Later(future) => future.await,
    }
}

/// Runs every case; panics naming the first that fails.
pub async fn run<C: Channel>(platform: ChannelUnderTest<C>) {
    let timeout = Duration::from_millis(500);
    let echo_secrets = format!("upstream failed for {}", platform.secrets.join(" and "));
    let no_secret = |case: &str, outcome: &Outcome| {
        let text = outcome.text().unwrap_or_default();
        for secret in &platform.secrets {
            assert!(
                !text.contains(secret.as_str()),
                "{case}: a secret in {text:?}"
            );
        }
    };
    let answer = |template| play(&platform, template, timeout);

    let (expected, id) = platform.success.clone();
    let (outcome, requests, _) = answer(expected).await;
    assert_eq!(requests, 1, "success: one request");
    match outcome {
        Outcome::Delivered(receipt) => assert_eq!(receipt.message_id, id, "success: message id"),
        other => panic!("success: {other:?}, not delivered"),
    }

    let (outcome, _, _) = answer(platform.throttled.clone()).await;
    assert!(
        matches!(&outcome, Outcome::Throttled { wait, .. } if *wait == Duration::from_secs(7)),
        "429 with Retry-After: 7: {outcome:?}, not throttled for 7 s"
    );
    no_secret("throttled", &outcome);

    for (n, template) in platform.permanent.iter().enumerate() {
        let (outcome, _, _) = answer(template.clone()).await;
        assert!(
            matches!(outcome, Outcome::Permanent { .. }),
            "permanent error #{n}: {outcome:?}"
        );
        no_secret("permanent", &outcome);
    }

    for status in [500, 502, 503] {
        let template = ResponseTemplate::new(status).set_body_string(echo_secrets.clone());
        let (outcome, _, _) = answer(template).await;
        assert!(
            matches!(outcome, Outcome::Retry { .. }),
            "HTTP {status}: {outcome:?}"
        );
        no_secret(&format!("HTTP {status}"), &outcome);
    }

    let slow = ResponseTemplate::new(200).set_delay(timeout * 4);
    let (outcome, _, took) = answer(slow).await;
    assert!(
        matches!(outcome, Outcome::Unknown { .. }),
        "no answer in time: the far end may have it: {outcome:?}"
    );
    assert!(
        took < timeout * 3,
        "the channel waited {took:?} past its timeout"
    );
    no_secret("timeout", &outcome);

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let outcome = deliver(&mut (platform.build)(&base, timeout)).await;
    assert!(
        matches!(&outcome, Outcome::Unreachable { error } if error.contains("connection refused")),
        "refused: {outcome:?}"
    );
    no_secret("refused", &outcome);
}

/// Starts a mock server answering `template`, delivers through a channel built for it, and
/// returns the outcome, how many requests the server saw and how long the delivery took.
async fn play<C: Channel>(
    platform: &ChannelUnderTest<C>,
    template: ResponseTemplate,
    timeout: Duration,
) -> (Outcome, usize, Duration) {
    let server = MockServer::start().await;
    Mock::given(any())
        .respond_with(template)
        .mount(&server)
        .await;
    let mut channel = (platform.build)(&server.uri(), timeout);
    let started = Instant::now();
    let outcome = deliver(&mut channel).await;
    let requests = server.received_requests().await.unwrap_or_default().len();
    (outcome, requests, started.elapsed())
}

/// One of a platform's answers recorded in `tests/fixtures/<platform>/`: `NAME.json` is the
/// body, and `NAME.headers.json` (`{"status": 429, "headers": {...}}`), where there is one, the
/// status and headers; else the status is the one the platform answers that body with.
pub struct RecordedReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RecordedReply {
    /// `status_of` says the status of a body without a `.headers.json`.
    pub fn load(platform: &str, name: &str, status_of: fn(&serde_json::Value) -> u16) -> Self {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(platform);
        let body = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap();
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        match std::fs::read_to_string(dir.join(format!("{name}.headers.json"))) {
            Ok(head) => {
                let head: serde_json::Value = serde_json::from_str(&head).unwrap();
                let headers = head["headers"].as_object().unwrap().iter();
                RecordedReply {
                    status: head["status"].as_u64().unwrap() as u16,
                    headers: headers
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                        .collect(),
                    body,
                }
            }
            Err(_) => RecordedReply {
                status: status_of(&json),
                headers: vec![],
                body,
            },
        }
    }

    /// The answer for a mock server to play.
    pub fn template(&self) -> ResponseTemplate {
        let template = self
            .headers
            .iter()
            .fold(ResponseTemplate::new(self.status), |t, (k, v)| {
                t.insert_header(k.as_str(), v.as_str())
            });
        template.set_body_raw(self.body.clone(), "application/json")
    }

    /// The answer as the HTTP kit reads it, for a kind's `classify`.
    pub fn reply(&self) -> Reply {
        let mut headers = ::http::header::HeaderMap::new();
        for (k, v) in &self.headers {
            let name = ::http::header::HeaderName::from_bytes(k.as_bytes()).unwrap();
            headers.insert(name, v.parse().unwrap());
        }
        Reply {
            status: self.status,
            retry_after: crate::kit::http::retry_after(&headers, std::time::SystemTime::now()),
            headers,
            body: self.body.clone(),
            cut: false,
        }
    }
}

/// A platform's recorded answers (`tests/fixtures/<platform>/`), and the status it answers a
/// body without recorded headers with.
pub struct Fixtures {
    pub platform: &'static str,
    pub status_of: fn(&serde_json::Value) -> u16,
}

impl Fixtures {
    pub fn load(&self, name: &str) -> RecordedReply {
        RecordedReply::load(self.platform, name, self.status_of)
    }

    /// The answer `name` for a mock server to play.
    pub fn answer(&self, name: &str) -> ResponseTemplate {
        self.load(name).template()
    }

    /// The answer `name` as the HTTP kit reads it.
    pub fn reply(&self, name: &str) -> Reply {
        self.load(name).reply()
    }

    /// The suite for bot platform `P`'s channel with `token`: `success` is the fixture of a
    /// sent message and the id it carries, `throttled` the body of its 429 (sent with
    /// `Retry-After: 7`), `permanent` the fixtures of answers no retry can fix.
    pub async fn run_bot_suite<P: Platform>(
        &self,
        token: &str,
        success: (&str, &str),
        throttled: serde_json::Value,
        permanent: &[&str],
    ) where
        P::Channel: Channel,
    {
        let owned = token.to_string();
        run(ChannelUnderTest {
            build: Box::new(move |base, timeout| bot_channel::<P>(&owned, base, timeout)),
            secrets: vec![token.into()],
            success: (self.answer(success.0), Some(success.1.into())),
            throttled: ResponseTemplate::new(429)
                .insert_header("Retry-After", "7")
                .set_body_json(throttled),
            permanent: permanent.iter().map(|name| self.answer(name)).collect(),
        })
        .await;
    }
}

/// Bot platform `P`'s channel with `token`, at `base`, within `timeout`.
pub fn bot_channel<P: Platform>(token: &str, base: &str, timeout: Duration) -> P::Channel {
    use crate::channels::ChannelKind;
    BotConfig::<P> {
        api_url: Some(base.into()),
        timeout,
        ..BotConfig::new(token)
    }
    .build()
    .unwrap()
}

/// The conformance delivery, to `to`, changed by `adjust`.
pub fn delivery_to(to: &str, adjust: impl FnOnce(&mut OutboundMessage)) -> Delivery {
    let mut d = delivery();
    if let Content::Outbound(m) = &mut d.content {
        m.to = to.into();
        adjust(m);
    }
    d
}

/// What `server` was asked, in order.
pub async fn requests(server: &MockServer) -> Vec<wiremock::Request> {
    server.received_requests().await.unwrap()
}

/// Every bot platform's settings: a token is required, and never shown by `Debug` or
/// `config show`; a blank one is refused when the channel is built.
pub fn a_bot_needs_one_token_and_never_shows_it<P: Platform + std::fmt::Debug>(
    token: &str,
) -> BotConfig<P> {
    use crate::channels::ChannelKind;
    let none = BotConfig::<P> {
        token: Default::default(),
        ..BotConfig::new("")
    };
    assert_eq!(none.check().unwrap_err().key, "token");
    let config = BotConfig::<P>::new(token);
    let shown = serde_json::to_string(&config).unwrap() + &format!("{config:?}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
    assert_eq!(
        BotConfig::<P>::new("  ").build().err().unwrap().key,
        "token"
    );
    config
}

/// The ready check of a channel whose platform answers every `http_method` call with
/// `refusal`: its error.
pub async fn refused_ready_check<C: Channel>(
    channel: impl Fn(&str) -> C,
    http_method: &str,
    refusal: ResponseTemplate,
) -> String {
    let refused = MockServer::start().await;
    Mock::given(wiremock::matchers::method(http_method))
        .respond_with(refusal)
        .mount(&refused)
        .await;
    channel(&refused.uri())
        .ready_check()
        .unwrap()
        .await
        .unwrap_err()
}
