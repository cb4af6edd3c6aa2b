//! The Telegram channel's settings: the bot token, the API's base URL, budgets, timeout.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::TelegramChannel;
use crate::channels::kit::default_timeout;
use crate::channels::kit::http::{self, HttpClient};
use crate::channels::kit::secret::{Secret, SecretSetting};
use crate::channels::{resolve_path, ChannelKind, SettingError, UnknownOutcome};
use crate::pacing::{Pace, Rate};

/// Where the Bot API is, unless `api_url` says otherwise (a local Bot API server, a test).
pub const API_URL: &str = "https://api.telegram.org";

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The bot's token from @BotFather; better `token_env` (an environment variable) or
    /// `token_file`, so config.toml holds no secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// The Bot API's base URL.
    #[serde(default = "api_url")]
    pub api_url: String,
    /// A request not answered within this is abandoned (its outcome unknown).
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// After a send with no answer: send again (`resend`: Telegram cannot deduplicate, so the
    /// chat may see it twice) or `hold` it as a dead letter for an operator.
    #[serde(default)]
    pub unknown_outcome: UnknownOutcome,
}

fn api_url() -> String {
    API_URL.to_string()
}

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
    /// A bot with this token, at the official API.
    pub fn new(token: &str) -> Self {
        Config {
            token: Some(Secret::new(token)),
            token_env: None,
            token_file: None,
            api_url: api_url(),
            timeout: default_timeout(),
            unknown_outcome: UnknownOutcome::Resend,
        }
    }

    fn token(&self) -> SecretSetting<'_> {
        SecretSetting {
            key: "token",
            inline: self.token.as_ref(),
            env: self.token_env.as_deref(),
            file: self.token_file.as_deref(),
        }
    }

    /// The API's URL for this bot, `<api_url>/bot<token>/`, and the token.
    pub fn bot_url(&self) -> Result<(reqwest::Url, Secret), SettingError> {
        let token = self.token().resolve()?;
        let token = Secret::new(token.expose().trim());
        if token.expose().is_empty() || token.expose().contains(['/', '?', '#', ' ']) {
            return Err(SettingError::new(
                "token",
                "is not a bot token: it looks like 123456:ABC-DEF... (from @BotFather)",
            ));
        }
        let base = http::base_url("api_url", &self.api_url)?;
        // `./`: the token's `:` would otherwise read as a URL scheme.
        let url = base
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
        self.token().check()?;
        http::check_url("api_url", &self.api_url)?;
        Ok(())
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
        if let Some(file) = &mut self.token_file {
            resolve_path(file, base);
        }
    }
}
