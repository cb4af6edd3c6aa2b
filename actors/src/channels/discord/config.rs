//! The Discord channel's settings: a bot's (see `channels::bot`), at Discord's REST API.

use ::http::header::{HeaderValue, USER_AGENT};

use super::DiscordChannel;
use crate::kit::api::discord::{Discord, API_URL};
use crate::channels::bot::{BotConfig, Platform};
use crate::kit::http::HttpClient;
use crate::channels::SettingError;
use crate::pacing::{Pace, Rate};

/// `[channels.NAME] kind = "discord"`. `unknown_outcome = "resend"` sends again with the same
/// nonce: Discord keeps one message per nonce for a few minutes.
pub type Config = BotConfig<Discord>;

/// Discord's global limit: 50 requests per second per bot. The per-channel limits are learned
/// from its answers (see `buckets`), not declared.
pub fn pace() -> Pace {
    Pace {
        per_channel: Some(Rate::per_second(50)),
        ..Pace::default()
    }
}

/// A client for Discord's REST API as the bot: `Authorization: Bot <token>` and the
/// User-Agent Discord asks for; the token scrubbed from its errors.
pub fn client(config: &Config) -> Result<HttpClient, SettingError> {
    let (mut headers, token) = config.authorization("Bot")?;
    // Discord refuses requests without a User-Agent of this form.
    let agent = format!(
        "DiscordBot (https://github.com/relayq/relayq, {})",
        env!("CARGO_PKG_VERSION")
    );
    headers.insert(USER_AGENT, HeaderValue::from_str(&agent).expect("ascii"));
    Ok(HttpClient::new(config.timeout, headers, vec![token]))
}

impl Platform for Discord {
    const API_URL: &'static str = API_URL;
    const TOKEN_LOOKS_LIKE: &'static str =
        "MTMw...GabcDE... (Developer Portal → your app → Bot → Reset Token)";
    type Channel = DiscordChannel;

    fn text_limit() -> relayq_engine::TextLimit {
        super::text_limit()
    }

    fn build(config: &Config) -> Result<DiscordChannel, SettingError> {
        Ok(DiscordChannel {
            http: client(config)?,
            api: config.base_url()?,
            timeout: config.timeout,
            unknown_outcome: config.unknown_outcome,
            buckets: Default::default(),
        })
    }
}
