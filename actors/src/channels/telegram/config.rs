//! The Telegram channel's settings: a bot's (see `kit::bot`), at the Bot API.

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use super::TelegramChannel;
use crate::channels::kit::bot::{BotConfig, Platform};
use crate::channels::kit::http::HttpClient;
use crate::channels::kit::secret::Secret;
use crate::channels::{ChannelKind, SettingError};
use crate::pacing::{Pace, Rate};

/// The Bot API.
pub const API_URL: &str = "https://api.telegram.org";

const LOOKS_LIKE: &str = "123456:ABC-DEF... (from @BotFather)";

#[derive(Debug, Clone, PartialEq)]
pub struct Telegram;

impl Platform for Telegram {
    const API_URL: &'static str = API_URL;
    const TOKEN_LOOKS_LIKE: &'static str = LOOKS_LIKE;
}

/// `[channels.NAME] kind = "telegram"`. Telegram cannot deduplicate: with
/// `unknown_outcome = "resend"` the chat may see a message twice.
pub type Config = BotConfig<Telegram>;

/// Telegram's published budgets: about one message per second to a chat, about 30 per second
/// in all for a bot. (`[pacing.NAME]` overrides; a group's 20 per minute is one to set there.)
pub fn pace() -> Pace {
    let rate = |count: u32, per: Duration| Rate {
        count: NonZeroU32::new(count).expect("a budget is not zero"),
        per,
    };
    Pace {
        per_destination: Some(rate(1, Duration::from_secs(1))),
        per_channel: Some(rate(30, Duration::from_secs(1))),
        ..Pace::default()
    }
}

impl Config {
    /// The API's URL for this bot, `<api_url>/bot<token>/`, and the token.
    pub fn bot_url(&self) -> Result<(reqwest::Url, Secret), SettingError> {
        let token = self.token()?;
        if token.expose().contains(['/', '?', '#']) {
            return Err(SettingError::new(
                "token",
                format!("is not a bot token: it looks like {LOOKS_LIKE}"),
            ));
        }
        // `./`: the token's `:` would otherwise read as a URL scheme.
        let url = self
            .base_url()?
            .join(&format!("./bot{}/", token.expose()))
            .map_err(|e| SettingError::new("api_url", format!("cannot hold a bot path: {e}")))?;
        Ok((url, token))
    }

    /// An HTTP client whose errors never show the token.
    pub fn client(&self, token: &Secret) -> HttpClient {
        HttpClient::new(
            self.timeout,
            reqwest::header::HeaderMap::new(),
            vec![token.clone()],
        )
    }
}

impl ChannelKind for Config {
    type Channel = TelegramChannel;

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn text_limit(&self) -> Option<relayq_engine::TextLimit> {
        Some(super::text_limit())
    }

    fn check(&self) -> Result<(), SettingError> {
        BotConfig::check(self)
    }

    fn build(&self) -> Result<TelegramChannel, SettingError> {
        let (api, token) = self.bot_url()?;
        Ok(TelegramChannel {
            http: self.client(&token),
            api,
            timeout: self.timeout,
            pace: pace(),
            unknown_outcome: self.unknown_outcome,
            migrated: Default::default(),
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        BotConfig::resolve_paths(self, base)
    }
}
