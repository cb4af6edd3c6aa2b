//! The Telegram channel's settings: a bot's (see `channels::bot`), at the Bot API.

use super::TelegramChannel;
use crate::kit::api::telegram::{Telegram, API_URL};
use crate::channels::bot::{BotConfig, Platform};
use crate::kit::http::HttpClient;
use crate::kit::secret::Secret;
use crate::channels::SettingError;
use crate::pacing::{Pace, Rate};

const LOOKS_LIKE: &str = "123456:ABC-DEF... (from @BotFather)";

impl Platform for Telegram {
    const API_URL: &'static str = API_URL;
    const TOKEN_LOOKS_LIKE: &'static str = LOOKS_LIKE;
    type Channel = TelegramChannel;

    fn text_limit() -> relayq_engine::TextLimit {
        super::text_limit()
    }

    fn file_limit() -> Option<(u64, &'static str)> {
        Some((super::MAX_DOCUMENT_BYTES, super::FILE_LIMIT_WORDS))
    }

    /// A chat is its numeric id (a group's is negative) or a public channel's `@username`.
    fn refuses_address(to: &str) -> Option<String> {
        let username = to.strip_prefix('@').is_some_and(|name| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        match to.parse::<i64>().is_ok() || username {
            true => None,
            false => Some(format!(
                "{to:?} is not a Telegram chat: give its numeric id (a group's is negative, e.g. \
                 -1001234567890) or a public channel's @username"
            )),
        }
    }

    fn build(config: &Config) -> Result<TelegramChannel, SettingError> {
        let (api, token) = config.bot_url()?;
        Ok(TelegramChannel {
            http: config.client(&token),
            api,
            timeout: config.timeout,
            unknown_outcome: config.unknown_outcome,
            migrated: Default::default(),
        })
    }
}

/// `[channels.NAME] kind = "telegram"`. Telegram cannot deduplicate: with
/// `unknown_outcome = "resend"` the chat may see a message twice.
pub type Config = BotConfig<Telegram>;

/// Telegram's published budgets: about one message per second to a chat, 20 a minute to a
/// group (a chat whose id is negative), about 30 per second in all for a bot.
/// (`[pacing.NAME]` overrides.)
pub fn pace() -> Pace {
    Pace {
        per_destination: Some(Rate::per_second(1)),
        per_channel: Some(Rate::per_second(30)),
        per_group: Some(Rate {
            count: std::num::NonZeroU32::new(20).expect("not zero"),
            per: std::time::Duration::from_secs(60),
        }),
        group_prefix: Some("-"),
        ..Pace::default()
    }
}

impl Config {
    /// The API's URL for this bot, `<api_url>/bot<token>/`, and the token.
    pub fn bot_url(&self) -> Result<(url::Url, Secret), SettingError> {
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
            ::http::header::HeaderMap::new(),
            vec![token.clone()],
        )
    }
}
