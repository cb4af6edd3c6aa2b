//! The Discord channel's settings: a bot's (see `kit::bot`), at Discord's REST API.

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use reqwest::header::{HeaderValue, USER_AGENT};

use super::DiscordChannel;
use crate::channels::kit::bot::{BotConfig, Platform};
use crate::channels::kit::http::HttpClient;
use crate::channels::{ChannelKind, SettingError};
use crate::pacing::{Pace, Rate};

/// Discord's REST API, version 10.
pub const API_URL: &str = "https://discord.com/api/v10";

#[derive(Debug, Clone, PartialEq)]
pub struct Discord;

impl Platform for Discord {
    const API_URL: &'static str = API_URL;
    const TOKEN_LOOKS_LIKE: &'static str =
        "MTMw...GabcDE... (Developer Portal → your app → Bot → Reset Token)";
}

/// `[channels.NAME] kind = "discord"`. `unknown_outcome = "resend"` sends again with the same
/// nonce: Discord keeps one message per nonce for a few minutes.
pub type Config = BotConfig<Discord>;

/// Discord's global limit: 50 requests per second per bot. The per-channel limits are learned
/// from its answers (see `buckets`), not declared.
pub fn pace() -> Pace {
    Pace {
        per_channel: Some(Rate {
            count: NonZeroU32::new(50).expect("not zero"),
            per: Duration::from_secs(1),
        }),
        ..Pace::default()
    }
}

impl ChannelKind for Config {
    type Channel = DiscordChannel;

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn text_limit(&self) -> Option<relayq_engine::TextLimit> {
        Some(super::text_limit())
    }

    fn check(&self) -> Result<(), SettingError> {
        BotConfig::check(self)
    }

    fn build(&self) -> Result<DiscordChannel, SettingError> {
        let (mut headers, token) = self.authorization("Bot")?;
        // Discord refuses requests without a User-Agent of this form.
        let agent = format!(
            "DiscordBot (https://github.com/relayq/relayq, {})",
            env!("CARGO_PKG_VERSION")
        );
        headers.insert(USER_AGENT, HeaderValue::from_str(&agent).expect("ascii"));
        Ok(DiscordChannel {
            http: HttpClient::new(self.timeout, headers, vec![token]),
            api: self.base_url()?,
            timeout: self.timeout,
            unknown_outcome: self.unknown_outcome,
            buckets: Default::default(),
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        BotConfig::resolve_paths(self, base)
    }
}
