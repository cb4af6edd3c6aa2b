//! The Discord channel's settings: the bot token, the API's base URL, timeout.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::header::{HeaderValue, USER_AGENT};
use serde::{Deserialize, Serialize};

use super::DiscordChannel;
use crate::channels::kit::default_timeout;
use crate::channels::kit::http::{self, HttpClient};
use crate::channels::kit::secret::{Secret, SecretSetting};
use crate::channels::{resolve_path, ChannelKind, SettingError, UnknownOutcome};
use crate::pacing::{Pace, Rate};

/// Discord's REST API, version 10, unless `api_url` says otherwise (a test).
pub const API_URL: &str = "https://discord.com/api/v10";

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The bot's token (Developer Portal → Bot → Token); better `token_env` or `token_file`,
    /// so config.toml holds no secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// The REST API's base URL.
    #[serde(default = "api_url")]
    pub api_url: String,
    /// A request not answered within this is abandoned (its outcome unknown).
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// After a send with no answer: send again with the same nonce (`resend`: Discord keeps one
    /// message per nonce for a few minutes) or `hold` it as a dead letter for an operator.
    #[serde(default)]
    pub unknown_outcome: UnknownOutcome,
}

fn api_url() -> String {
    API_URL.to_string()
}

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
        self.token().check()?;
        http::base_url("api_url", &self.api_url).map(|_| ())
    }

    fn build(&self) -> Result<DiscordChannel, SettingError> {
        let token = self.token().resolve()?;
        let token = Secret::new(token.expose().trim());
        let mut headers = http::authorization("Bot", &token, "MTMw...GabcDE... (Developer Portal → Bot → Reset Token)")?;
        // Discord refuses requests without a User-Agent of this form.
        let agent = format!(
            "DiscordBot (https://github.com/relayq/relayq, {})",
            env!("CARGO_PKG_VERSION")
        );
        headers.insert(USER_AGENT, HeaderValue::from_str(&agent).expect("ascii"));
        Ok(DiscordChannel {
            http: HttpClient::new(self.timeout, headers, vec![token]),
            api: http::base_url("api_url", &self.api_url)?,
            timeout: self.timeout,
            unknown_outcome: self.unknown_outcome,
            buckets: Default::default(),
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        if let Some(file) = &mut self.token_file {
            resolve_path(file, base);
        }
    }
}
