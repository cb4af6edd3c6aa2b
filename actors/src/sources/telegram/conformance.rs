//! Telegram's two modes, as the source conformance suite drives them (see
//! `sources::conformance`): polling the local Bot API ([`super::fake`]), and its webhook.

use serde_json::{json, Value};

use super::fake::FakeTelegram;
use crate::sources::conformance::{
    wait_until, Case, Pusher, Refused, Settings, SourceUnderTest, ALICE, ALL, STRANGER, WAIT,
};

const TOKEN: &str = "123456:conformance-token";
const HOOK_SECRET: &str = "s3cret_hook-1";

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "telegram_poll",
            make: || Box::new(TelegramPoll::new()),
            promises: ALL,
        },
        Case {
            name: "telegram_webhook",
            make: || {
                Box::new(TelegramWebhook {
                    fake: FakeTelegram::start(TOKEN),
                    pusher: Pusher::default(),
                })
            },
            promises: ALL,
        },
    ]
}

/// `kind = "telegram"`, polling a local Bot API.
struct TelegramPoll {
    fake: FakeTelegram,
}

impl TelegramPoll {
    fn new() -> TelegramPoll {
        TelegramPoll {
            fake: FakeTelegram::start(TOKEN),
        }
    }
}

/// The Telegram message `n` is, from Alice or the stranger, in Alice's chat.
fn telegram_message(n: u64, text: &str, stranger: bool) -> Value {
    let from = if stranger { STRANGER } else { ALICE };
    json!({
        "message_id": 1000 + n, "date": 1767225600, "text": text,
        "from": {"id": from, "is_bot": false, "first_name": "A"},
        "chat": {"id": ALICE, "type": "private"},
    })
}

/// The Telegram source of both modes: Alice's chat feeds session `alice`.
fn telegram_source(fake: &FakeTelegram) -> Vec<String> {
    vec![
        "kind = \"telegram\"".into(),
        "token_env = \"BOT_TOKEN\"".into(),
        format!("api_url = {:?}", fake.url),
        format!("allowed_users = [{ALICE}]"),
        format!("chats = {{ \"{ALICE}\" = \"alice\" }}"),
        "poll_timeout = \"1s\"".into(),
        "typing = false".into(),
    ]
}

impl SourceUnderTest for TelegramPoll {
    fn settings(&self) -> Settings {
        Settings {
            source: telegram_source(&self.fake),
            http_port: None,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("BOT_TOKEN", TOKEN.into())]
    }

    fn send(&self, n: u64, text: &str, stranger: bool) {
        self.fake.push_message(telegram_message(n, text, stranger));
    }

    fn handed_over(&self) {
        // An empty update marks the end: once a poll served it, everything before it was read.
        let last = self.fake.push_update(json!({}));
        wait_until("a poll that read everything", WAIT, || {
            self.fake.served() >= last
        });
    }

    fn replay(&self, n: u64, text: &str) {
        self.fake.push_message(telegram_message(n, text, false));
    }

    fn refuse(&self, status: u16) -> Option<Box<dyn Fn() -> Refused + '_>> {
        let body = match status {
            401 => json!({"ok": false, "error_code": 401, "description": "Unauthorized"}),
            409 => {
                json!({"ok": false, "error_code": 409, "description": "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"})
            }
            _ => {
                json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}})
            }
        };
        let before = self.fake.refused_polls().len();
        self.fake.fail_polls(status, body, 2);
        Some(Box::new(move || {
            wait_until("two refused polls and one after", WAIT, || {
                let refused = self.fake.refused_polls();
                refused.len() >= before + 2 && self.fake.polls().len() > refused[before + 1].0 + 1
            });
            let (refused, polls) = (self.fake.refused_polls(), self.fake.polls());
            let ((first, at), (second, then)) = (refused[before], refused[before + 1]);
            Refused {
                offsets: Some(
                    [polls[first], polls[second], polls[second + 1]]
                        .iter()
                        .map(i64::to_string)
                        .collect(),
                ),
                waited: then - at,
            }
        }))
    }
}

/// `kind = "telegram"`, `mode = "webhook"`: Telegram posts each update.
struct TelegramWebhook {
    fake: FakeTelegram,
    pusher: Pusher,
}

impl TelegramWebhook {
    fn update(n: u64, text: &str, stranger: bool) -> Value {
        json!({"update_id": 800_000_000 + n, "message": telegram_message(n, text, stranger)})
    }

    fn push(&self, update: Value, secret: &'static str) {
        let url = self.pusher.url();
        self.pusher.push_until_taken(move |client| {
            client
                .post(&url)
                .header("X-Telegram-Bot-Api-Secret-Token", secret)
                .json(&update)
        });
    }
}

impl SourceUnderTest for TelegramWebhook {
    fn settings(&self) -> Settings {
        let mut source = telegram_source(&self.fake);
        source.push("mode = \"webhook\"".into());
        source.push("webhook_secret_env = \"HOOK_SECRET\"".into());
        Settings {
            source,
            http_port: Some(self.pusher.port),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("BOT_TOKEN", TOKEN.into()),
            ("HOOK_SECRET", HOOK_SECRET.into()),
        ]
    }

    fn send(&self, n: u64, text: &str, stranger: bool) {
        self.push(TelegramWebhook::update(n, text, stranger), HOOK_SECRET);
    }

    fn handed_over(&self) {
        self.pusher.wait_all();
    }

    fn refused_push(&self, n: u64, text: &str) -> Option<u16> {
        let response = reqwest::blocking::Client::new()
            .post(self.pusher.url())
            .header("X-Telegram-Bot-Api-Secret-Token", "guess")
            .json(&TelegramWebhook::update(n, text, false))
            .send()
            .unwrap();
        Some(response.status().as_u16())
    }
}
