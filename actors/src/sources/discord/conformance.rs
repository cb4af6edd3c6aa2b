//! Discord's gateway, as the source conformance suite drives it (see `sources::conformance`):
//! a connection held open to the local Discord ([`super::fake`]), which replays on RESUME
//! what came after the stored sequence number, and keeps each channel's history for what
//! came while no session was open.

use serde_json::json;

use super::fake::FakeDiscord;
use crate::sources::conformance::{wait_until, Case, Refused, Settings, SourceUnderTest, ALL, WAIT};

const TOKEN: &str = "MTMwMDAwMDAwMDAwMDAwMDk5OQ.GfakeE.conformance-discord-token";
const ALICE: &str = "1300000000000000001";
const STRANGER: &str = "1300000000000000666";
const CHANNEL: &str = "1300000000000000100";

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "discord",
        make: || {
            Box::new(DiscordGateway {
                fake: FakeDiscord::start(TOKEN),
            })
        },
        promises: ALL,
    }]
}

/// `kind = "discord"`: the gateway, held open.
struct DiscordGateway {
    fake: FakeDiscord,
}

impl SourceUnderTest for DiscordGateway {
    fn settings(&self) -> Settings {
        Settings {
            source: vec![
                "kind = \"discord\"".into(),
                "token_env = \"DISCORD_BOT_TOKEN\"".into(),
                format!("api_url = {:?}", self.fake.api_url),
                format!("allowed_users = [\"{ALICE}\"]"),
                format!("chats = {{ \"{CHANNEL}\" = \"alice\" }}"),
            ],
            http_port: None,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("DISCORD_BOT_TOKEN", TOKEN.into())]
    }

    /// Discord hands a bot only what happens while it has a session: a message is written
    /// once the source has one (before its first, it would be in the channel's history only).
    fn send(&self, n: u64, text: &str, stranger: bool) {
        wait_until("a gateway session", WAIT, || self.fake.connected());
        let user = if stranger { STRANGER } else { ALICE };
        let id = (1_350_000_000_000_000_000 + n).to_string();
        self.fake.push_message(CHANNEL, user, &id, text);
    }

    fn handed_over(&self) {
        wait_until("every event sent on a session", WAIT, || self.fake.all_sent());
    }

    fn refuse(&self, status: u16) -> Option<Box<dyn Fn() -> Refused + '_>> {
        let body = match status {
            401 => json!({"message": "401: Unauthorized", "code": 0}),
            429 => json!({"message": "You are being rate limited.", "retry_after": 1.0, "global": false}),
            // Discord documents no 409 for GET /gateway/bot.
            _ => return None,
        };
        let before = self.fake.refused_gateway().len();
        self.fake.fail_gateway(status, body, 2);
        // The refusals come when the source starts its next session: Discord forgets this one.
        self.fake.invalidate_sessions();
        self.fake.end_connections(None);
        Some(Box::new(move || {
            wait_until("two refused GET /gateway/bot", WAIT, || {
                self.fake.refused_gateway().len() >= before + 2
            });
            let refused = self.fake.refused_gateway();
            Refused {
                offsets: None,
                waited: refused[before + 1] - refused[before],
            }
        }))
    }
}
