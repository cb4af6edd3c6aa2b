use std::collections::BTreeMap;
use std::time::Duration;

use wiremock::ResponseTemplate;

use super::*;
use crate::channels::conformance::{self, ChannelUnderTest};
use crate::kit::secret::Secret;
use crate::channels::{ChannelKind, ChannelConfig};

fn reply(status: u16, body: &str) -> Reply {
    Reply {
        status,
        retry_after: None,
        body: body.into(),
        ..Reply::default()
    }
}

#[test]
fn status_classes() {
    assert_eq!(classify(&reply(204, "")), Outcome::delivered());
    assert_eq!(
        classify(&reply(200, r#"{"id":"evt-1"}"#)),
        Outcome::delivered_as("evt-1")
    );
    assert_eq!(classify(&reply(201, r#"{"id":7}"#)), Outcome::delivered_as("7"));
    for s in [408, 429, 500, 502, 503] {
        assert!(matches!(classify(&reply(s, "")), Outcome::Retry { .. }), "{s}");
    }
    for s in [400, 401, 403, 404, 410, 422] {
        assert!(
            matches!(classify(&reply(s, "no")), Outcome::Permanent { .. }),
            "{s}"
        );
    }
    let seven = Some(Duration::from_secs(7));
    let after_7s = |status, body| Reply {
        retry_after: seven,
        ..reply(status, body)
    };
    let throttled = Outcome::Throttled {
        reason: "HTTP 429: slow down".into(),
        wait: Duration::from_secs(7),
        channel_wide: false,
    };
    assert_eq!(classify(&after_7s(429, "slow down")), throttled);
    let retry = Outcome::Retry {
        error: "HTTP 503".into(),
        after: seven,
    };
    assert_eq!(classify(&after_7s(503, "")), retry);
}

#[test]
fn config_check_names_the_key_and_never_the_url() {
    let c = |url: &str| Config {
        headers: BTreeMap::from([("X-Token".into(), Secret::new("t"))]),
        ..Config::new(url)
    };
    c("http://127.0.0.1:9/hook").check().unwrap();
    let e = c("hooks.example.com/services/T0/B0/s3cr3t").check().unwrap_err();
    assert!(e.key == "url" && !e.to_string().contains("s3cr3t"), "{e}");
    let none = Config {
        url: Default::default(),
        ..Config::new("")
    };
    assert!(none.check().unwrap_err().message.contains("url_env"));
}

#[test]
fn the_url_and_headers_may_come_from_the_environment_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("url"), "http://127.0.0.1:9/from-file\n").unwrap();
    std::env::set_var("RELAYQ_TEST_WEBHOOK_AUTH", "Bearer abc");
    let text = r#"{"kind": "webhook", "url_file": "url", "headers_env": {"Authorization": "RELAYQ_TEST_WEBHOOK_AUTH"}}"#;
    let mut config: ChannelConfig = serde_json::from_str(text).unwrap();
    config.resolve_paths(dir.path());
    config.spec().unwrap();

    let text = r#"{"kind": "webhook", "url": "http://x/", "headers_env": {"Authorization": "RELAYQ_TEST_UNSET_VAR"}}"#;
    let config: ChannelConfig = serde_json::from_str(text).unwrap();
    let e = config.spec().err().unwrap();
    assert_eq!(e.key, "headers_env.Authorization");
}

#[test]
fn settings_show_secrets_masked() {
    let config = ChannelConfig::Webhook(Config {
        headers: BTreeMap::from([("Authorization".into(), Secret::new("Bearer s3cr3t"))]),
        ..Config::new("https://hooks.example.com/services/s3cr3t")
    });
    let shown = serde_json::to_string(&config).unwrap() + &format!("{config:?}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
}

/// How Webhook answers, for the channel conformance suite (run by `kinds!`: this kind is
/// marked `conformance`).
pub(crate) async fn conformance() {
    let path_token = "s3cr3t-path-0123456789";
    let header_token = "t0ken-s3cr3t";
    conformance::run(ChannelUnderTest {
        build: Box::new(move |base, timeout| {
            let config = Config {
                headers: BTreeMap::from([(
                    "Authorization".into(),
                    Secret::new(format!("Bearer {header_token}")),
                )]),
                timeout,
                ..Config::new(&format!("{base}/hooks/{path_token}"))
            };
            config.build().unwrap()
        }),
        secrets: vec![path_token.into(), header_token.into()],
        success: (
            ResponseTemplate::new(200).set_body_json(serde_json::json!({"id": "evt-9"})),
            Some("evt-9".into()),
        ),
        throttled: ResponseTemplate::new(429)
            .insert_header("Retry-After", "7")
            .set_body_string(format!("slow down, {path_token}")),
        permanent: [400, 401, 403, 404, 410, 422]
            .map(|s| ResponseTemplate::new(s).set_body_string(format!("no: {header_token}")))
            .to_vec(),
    })
    .await;
}
