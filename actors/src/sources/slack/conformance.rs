//! Slack's two modes, as the source conformance suite drives them (see
//! `sources::conformance`): the Events API, signed pushes; and Socket Mode, a connection held
//! open to the local Socket Mode server ([`super::fake_socket`]).

use serde_json::{json, Value};

use super::fake_socket::FakeSlackSocket;
use crate::sources::conformance::{
    wait_until, Case, Pusher, Refused, Settings, SourceUnderTest, ALL, WAIT,
};

const SLACK_SECRET: &str = "slack-signing-secret";
const APP_TOKEN: &str = "xapp-1-A0APP-conformance";

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "slack",
            make: || {
                Box::new(SlackEvents {
                    pusher: Pusher::default(),
                })
            },
            promises: ALL,
        },
        Case {
            name: "slack_socket",
            make: || {
                Box::new(SlackSocket {
                    fake: FakeSlackSocket::start(APP_TOKEN),
                })
            },
            promises: ALL,
        },
    ]
}

/// Alice's chat `C0DEV` feeds session `alice`.
fn people() -> [String; 2] {
    [
        "allowed_users = [\"U0ALICE\"]".into(),
        "chats = { C0DEV = \"alice\" }".into(),
    ]
}

/// `kind = "slack"`: Slack's Events API, signed.
struct SlackEvents {
    pusher: Pusher,
}

impl SlackEvents {
    fn event(n: u64, text: &str, stranger: bool) -> Value {
        let user = if stranger { "U0STRANGER" } else { "U0ALICE" };
        json!({
            "token": "x", "team_id": "T0TEAM", "api_app_id": "A0APP", "type": "event_callback",
            "event_id": format!("Ev{n}"), "event_time": 1767225600,
            "event": {"type": "message", "channel": "C0DEV", "user": user, "text": text,
                      "ts": format!("1767225600.{n:06}"), "channel_type": "channel"},
        })
    }

    fn signed(
        client: &reqwest::blocking::Client,
        url: &str,
        body: &str,
        secret: &str,
    ) -> reqwest::blocking::RequestBuilder {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        client
            .post(url)
            .header("Content-Type", "application/json")
            .header("X-Slack-Request-Timestamp", ts.to_string())
            .header("X-Slack-Signature", super::sign(secret, ts, body.as_bytes()))
            .body(body.to_string())
    }
}

impl SourceUnderTest for SlackEvents {
    fn settings(&self) -> Settings {
        let mut source = vec![
            "kind = \"slack\"".into(),
            "signing_secret_env = \"SLACK_SIGNING_SECRET\"".into(),
        ];
        source.extend(people());
        Settings {
            source,
            http_port: Some(self.pusher.port),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("SLACK_SIGNING_SECRET", SLACK_SECRET.into())]
    }

    fn send(&self, n: u64, text: &str, stranger: bool) {
        let (url, body) = (
            self.pusher.url(),
            SlackEvents::event(n, text, stranger).to_string(),
        );
        self.pusher
            .push_until_taken(move |client| SlackEvents::signed(client, &url, &body, SLACK_SECRET));
    }

    fn handed_over(&self) {
        self.pusher.wait_all();
    }

    fn refused_push(&self, n: u64, text: &str) -> Option<u16> {
        let body = SlackEvents::event(n, text, false).to_string();
        let client = reqwest::blocking::Client::new();
        let response = SlackEvents::signed(&client, &self.pusher.url(), &body, "not-the-secret")
            .send()
            .unwrap();
        Some(response.status().as_u16())
    }
}

/// `kind = "slack"`, `mode = "socket"`: a Socket Mode connection held open.
struct SlackSocket {
    fake: FakeSlackSocket,
}

impl SourceUnderTest for SlackSocket {
    fn settings(&self) -> Settings {
        let mut source = vec![
            "kind = \"slack\"".into(),
            "mode = \"socket\"".into(),
            "app_token_env = \"SLACK_APP_TOKEN\"".into(),
            format!("api_url = {:?}", self.fake.api_url),
        ];
        source.extend(people());
        Settings {
            source,
            http_port: None,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("SLACK_APP_TOKEN", APP_TOKEN.into())]
    }

    fn send(&self, n: u64, text: &str, stranger: bool) {
        self.fake.push_event(SlackEvents::event(n, text, stranger));
    }

    fn handed_over(&self) {
        wait_until("every envelope acknowledged", WAIT, || {
            self.fake.all_acknowledged()
        });
    }

    fn refuse(&self, status: u16) -> Option<Box<dyn Fn() -> Refused + '_>> {
        let (code, body) = match status {
            401 => (200, json!({"ok": false, "error": "invalid_auth"})),
            429 => (429, json!({"ok": false, "error": "ratelimited"})),
            // Slack documents no 409 for apps.connections.open.
            _ => return None,
        };
        let before = self.fake.refused_opens().len();
        self.fake.fail_opens(code, body, 2);
        // The refusals come when the source opens its next connection.
        self.fake.disconnect();
        Some(Box::new(move || {
            wait_until("two refused opens", WAIT, || {
                self.fake.refused_opens().len() >= before + 2
            });
            let refused = self.fake.refused_opens();
            Refused {
                offsets: None,
                waited: refused[before + 1] - refused[before],
            }
        }))
    }
}
