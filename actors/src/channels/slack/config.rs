//! The Slack channel's settings: a bot's (see `kit::bot`), at Slack's Web API.

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use super::SlackChannel;
use crate::channels::kit::bot::{BotConfig, Platform};
use crate::channels::kit::http::HttpClient;
use crate::channels::{ChannelKind, SettingError};
use crate::pacing::{Pace, Rate};

/// Slack's Web API.
pub const API_URL: &str = "https://slack.com/api";

#[derive(Debug, Clone, PartialEq)]
pub struct Slack;

impl Platform for Slack {
    const API_URL: &'static str = API_URL;
    const TOKEN_LOOKS_LIKE: &'static str =
        "xoxb-... (your app → OAuth & Permissions → Bot User OAuth Token; scopes chat:write and \
         channels:history)";
}

/// `[channels.NAME] kind = "slack"`. `unknown_outcome = "resend"` looks the row up in the
/// conversation (its id is in the message's metadata) and posts it only if it is not there.
pub type Config = BotConfig<Slack>;

/// Slack's published budget for `chat.postMessage`: about one message per second per channel.
pub fn pace() -> Pace {
    Pace {
        per_destination: Some(Rate {
            count: NonZeroU32::new(1).expect("not zero"),
            per: Duration::from_secs(1),
        }),
        ..Pace::default()
    }
}

impl ChannelKind for Config {
    type Channel = SlackChannel;

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn text_limit(&self) -> Option<relayq_engine::TextLimit> {
        Some(super::text_limit())
    }

    fn check(&self) -> Result<(), SettingError> {
        BotConfig::check(self)
    }

    fn build(&self) -> Result<SlackChannel, SettingError> {
        let (headers, token) = self.authorization("Bearer")?;
        Ok(SlackChannel {
            http: HttpClient::new(self.timeout, headers, vec![token]),
            api: self.base_url()?,
            timeout: self.timeout,
            unknown_outcome: self.unknown_outcome,
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        BotConfig::resolve_paths(self, base)
    }
}
