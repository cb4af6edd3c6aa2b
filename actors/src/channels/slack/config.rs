//! The Slack channel's settings: a bot's (see `channels::bot`), at Slack's Web API.

use super::SlackChannel;
use crate::kit::api::slack::{Slack, API_URL};
use crate::channels::bot::{BotConfig, Platform};
use crate::kit::http::HttpClient;
use crate::channels::SettingError;
use crate::pacing::{Pace, Rate};

/// `[channels.NAME] kind = "slack"`. `unknown_outcome = "resend"` looks the row up in the
/// conversation (its id is in the message's metadata) and posts it only if it is not there.
pub type Config = BotConfig<Slack>;

/// Slack's published budget for `chat.postMessage`: about one message per second per channel.
pub fn pace() -> Pace {
    Pace {
        per_destination: Some(Rate::per_second(1)),
        ..Pace::default()
    }
}

impl Platform for Slack {
    const API_URL: &'static str = API_URL;
    const TOKEN_LOOKS_LIKE: &'static str =
        "xoxb-... (your app → OAuth & Permissions → Bot User OAuth Token; scopes chat:write and \
         channels:history)";
    type Channel = SlackChannel;

    fn text_limit() -> relayq_engine::TextLimit {
        super::text_limit()
    }

    /// Slack takes files up to 1 GB (`files.getUploadURLExternal`); relayq's `[files]
    /// max_bytes` is lower.
    fn file_limit() -> Option<(u64, &'static str)> {
        Some((1 << 30, "Slack's 1 GB limit for a file"))
    }

    fn build(config: &Config) -> Result<SlackChannel, SettingError> {
        let (headers, token) = config.authorization("Bearer")?;
        Ok(SlackChannel {
            http: HttpClient::new(config.timeout, headers, vec![token]),
            api: config.base_url()?,
            timeout: config.timeout,
            unknown_outcome: config.unknown_outcome,
        })
    }
}
