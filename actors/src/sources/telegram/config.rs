//! The Telegram source's settings: the bot (the same token settings as the channel), who may
//! write to the agents, which chat feeds which session, and how to poll.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::TelegramSource;
use crate::channels::telegram::Config as BotConfig;
use crate::kit::api::telegram::{Telegram, API_URL};
use crate::kit::routing::{ChatPlatform, ChatRouting};
use crate::kit::secret::{Secret, TokenSetting, WebhookSecretSetting};
use crate::channels::ChannelConfig;
use crate::settings::{check_duration, SettingError};
use crate::sources::{Replies, SourceKind, SourceSpec};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The bot's token, as for the channel: better `token_env` or `token_file`.
    #[serde(flatten)]
    pub token: TokenSetting,
    /// The Bot API's base URL.
    #[serde(default = "api_url")]
    pub api_url: String,
    /// Telegram user ids whose messages are accepted, in any chat the bot is in; chat id →
    /// session (`chats`, or `session_template` with `{chat}`); the answering channel.
    #[serde(flatten)]
    pub routing: ChatRouting<Telegram>,
    /// Chat ids whose every member's messages are accepted (a group you trust).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_chats: Vec<i64>,
    /// How long one `getUpdates` waits for news (a long poll).
    #[serde(default = "default_poll_timeout", with = "humantime_serde")]
    pub poll_timeout: Duration,
    /// No longer taken: a message's files go into its session's directory (`[files]
    /// inbox`). Kept only to refuse it with what to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_dir: Option<PathBuf>,
    /// Larger files are not fetched, and the chat is told (the Bot API serves at most 20 MB).
    #[serde(default = "default_max_download_bytes")]
    pub max_download_bytes: u64,
    /// An album's messages (several photos sent at once) that come within this of each other
    /// become one prompt; its row waits this long after the last one.
    #[serde(default = "default_album_quiet", with = "humantime_serde")]
    pub album_quiet: Duration,
    /// Show "typing…" in the chat once its message is queued, where the source shows no
    /// progress (`progress = "off"`); otherwise 👀 says the agent took it, and the typing
    /// call would take the chat's budget from that reaction.
    #[serde(default = "default_typing")]
    pub typing: bool,
    /// `poll` (the default): relayq asks with `getUpdates`. `webhook`: Telegram posts each
    /// update to relayq's HTTP API (`POST /v1/ingress/NAME`, reachable from Telegram over
    /// HTTPS, e.g. through a reverse proxy), proving it with `webhook_secret`.
    #[serde(default)]
    pub mode: Mode,
    /// The secret Telegram sends with every webhook call (`X-Telegram-Bot-Api-Secret-Token`):
    /// 1 to 256 of `A-Z a-z 0-9 _ -`. Required in webhook mode; better `webhook_secret_env`
    /// or `webhook_secret_file`.
    #[serde(flatten)]
    pub webhook_secret: WebhookSecretSetting,
    /// The public HTTPS address Telegram posts to; when set, relayq registers it (and the
    /// secret) with `setWebhook` at start. Not set: register it yourself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
}

/// How the Telegram source hears of new messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Poll,
    Webhook,
}

fn api_url() -> String {
    API_URL.to_string()
}
fn default_poll_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_album_quiet() -> Duration {
    Duration::from_secs(1)
}
fn default_max_download_bytes() -> u64 {
    BOT_DOWNLOAD_LIMIT
}

/// The most a bot may download from the Bot API: 20 MB (`getFile`).
pub const BOT_DOWNLOAD_LIMIT: u64 = 20 * 1024 * 1024;
fn default_typing() -> bool {
    true
}

/// `{chat}` in `session_template`.
pub const CHAT_PLACEHOLDER: &str = "{chat}";

impl ChatPlatform for Telegram {
    type User = i64;
    const PLACEHOLDER: &'static str = CHAT_PLACEHOLDER;
    const TEMPLATE_EXAMPLE: &'static str = "tg{chat}";
    const CHATS_EXAMPLE: &'static str = "{ \"123456789\" = \"my-agent\" }";
    const USERS_EXAMPLE: &'static str = "List your Telegram user id (allowed_users = [123456789]; \
        message @userinfobot to learn it) or trusted chat ids (allowed_chats)";

    fn check_chat(id: &str) -> Result<(), String> {
        id.parse::<i64>()
            .map(|_| ())
            .map_err(|_| "is not a chat id: chat ids are numbers (-100... for groups)".to_string())
    }

    /// Telegram has no ✅ or ❌ among a bot's reactions.
    const REACTIONS: [&'static str; 3] = ["👀", "👌", "👎"];

    fn check_reaction(emoji: &str) -> Result<(), String> {
        use crate::kit::api::telegram::REACTION_EMOJI;
        match REACTION_EMOJI.contains(&emoji) {
            true => Ok(()),
            false => Err(format!(
                "{emoji:?} is not one Telegram lets a bot react with; it takes {}",
                REACTION_EMOJI.join(" ")
            )),
        }
    }

    /// Groups' ids are negative.
    fn is_group(id: &str) -> bool {
        id.trim().starts_with('-')
    }
}

impl Config {
    /// A bot with this token, accepting `user`'s messages, chat `chat` feeding `session`.
    pub fn new(token: &str, user: i64, chat: i64, session: &str) -> Self {
        Config {
            token: TokenSetting::inline(token),
            api_url: api_url(),
            routing: ChatRouting::new(user, &chat.to_string(), session),
            allowed_chats: Vec::new(),
            poll_timeout: default_poll_timeout(),
            download_dir: None,
            max_download_bytes: default_max_download_bytes(),
            album_quiet: default_album_quiet(),
            typing: true,
            mode: Mode::Poll,
            webhook_secret: WebhookSecretSetting::default(),
            webhook_url: None,
        }
    }

    /// The webhook secret, read from where the settings say, checked as Telegram takes it.
    pub fn webhook_secret(&self) -> Result<Secret, SettingError> {
        let secret = self.webhook_secret.resolve()?;
        let value = secret.expose();
        let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if value.len() > 256 || !value.chars().all(allowed) {
            return Err(SettingError::new(
                "webhook_secret",
                "is not a secret Telegram takes: 1 to 256 of A-Z a-z 0-9 _ - (e.g. from `openssl rand -hex 32`)",
            ));
        }
        Ok(secret)
    }

    /// The same bot as a channel: how the source reaches the API, and the reply channel made
    /// when config.toml has none.
    pub fn bot(&self) -> BotConfig {
        BotConfig {
            token: self.token.clone(),
            api_url: Some(self.api_url.clone()),
            ..BotConfig::new("")
        }
    }
}

impl SourceKind for Config {

    fn check(&self) -> Result<(), SettingError> {
        self.bot().check()?;
        self.routing.check(!self.allowed_chats.is_empty())?;
        let range = (Duration::from_secs(1), Duration::from_secs(50));
        let why = "a long poll; shorter polls only cost more requests";
        check_duration("poll_timeout", self.poll_timeout, range, why)?;
        match self.mode {
            Mode::Webhook => self.webhook_secret.check()?,
            Mode::Poll if self.webhook_url.is_some() => {
                return Err(SettingError::new(
                    "webhook_url",
                    "is set but mode is \"poll\": set mode = \"webhook\" to have Telegram post updates",
                ))
            }
            Mode::Poll => {}
        }
        if let Some(url) = &self.webhook_url {
            if !url.starts_with("https://") {
                return Err(SettingError::new(
                    "webhook_url",
                    format!("{url:?} is not an https:// address: Telegram posts only over HTTPS"),
                ));
            }
        }
        if !(1..=BOT_DOWNLOAD_LIMIT).contains(&self.max_download_bytes) {
            return Err(SettingError::new(
                "max_download_bytes",
                format!(
                    "is {}: give 1 to {BOT_DOWNLOAD_LIMIT} (the most the Bot API lets a bot download)",
                    self.max_download_bytes
                ),
            ));
        }
        if self.album_quiet > Duration::from_secs(10) {
            return Err(SettingError::new(
                "album_quiet",
                "must be from 0s to 10s: an album's messages come within a second of each other",
            ));
        }
        if self.download_dir.is_some() {
            return Err(SettingError::new(
                "download_dir",
                "is no longer taken: a message's files now go into its session's directory, under \
                 [files] inbox (default .relayq/inbox); remove this key",
            ));
        }
        Ok(())
    }

    fn build(&self) -> Result<SourceSpec, SettingError> {
        let source = TelegramSource::new(self.clone())?;
        Ok(match self.mode {
            Mode::Poll => SourceSpec::of(source),
            Mode::Webhook => SourceSpec::pushed(super::webhook::TelegramWebhook::new(
                source,
                self.webhook_secret()?,
                self.webhook_url.clone(),
            )),
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        self.token.resolve_paths(base);
        self.webhook_secret.resolve_paths(base);
    }

    fn pushed(&self) -> bool {
        self.mode == Mode::Webhook
    }

    fn files(&self, name: &str) -> Option<crate::files::FileSource> {
        let source = TelegramSource::new(self.clone()).ok()?;
        Some(crate::files::FileSource {
            origin: super::origin(name),
            fetcher: std::sync::Arc::new(super::TelegramFiles::of(&source)),
        })
    }

    fn replies(&self, name: &str) -> Option<Replies> {
        Some(Replies {
            origin: super::origin(name),
            channel: self.routing.reply_channel_or(name),
            default_config: ChannelConfig::Telegram(self.bot()),
            progress: Some(self.routing.progress_settings()),
        })
    }
}

/// The poll's HTTP timeout: the long poll plus time for the answer.
pub(super) fn request_timeout(config: &Config) -> Duration {
    config.poll_timeout + Duration::from_secs(10)
}

