//! The Slack source's settings: the app's signing secret (which proves an event is Slack's),
//! who may write to the agents, which conversation feeds which session, and the bot that
//! answers (the same token settings as the Slack channel).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::SlackEvents;
use crate::channels::slack::Config as BotConfig;
use crate::kit::api::slack::Slack;
use crate::kit::routing::{ChatPlatform, ChatRouting};
use crate::kit::secret::{SigningSecretSetting, TokenSetting};
use crate::channels::ChannelConfig;
use crate::settings::SettingError;
use crate::sources::{Replies, SourceKind, SourceSpec};

/// `{channel}` in `session_template`.
pub const CHANNEL_PLACEHOLDER: &str = "{channel}";

impl ChatPlatform for Slack {
    type User = String;
    const PLACEHOLDER: &'static str = CHANNEL_PLACEHOLDER;
    const TEMPLATE_EXAMPLE: &'static str = "slack-{channel}";
    const CHATS_EXAMPLE: &'static str = "{ \"C0123ABCD\" = \"my-agent\" }";
    const USERS_EXAMPLE: &'static str = "List Slack user ids (allowed_users = [\"U0123ABCD\"]; \
        a profile's ⋮ menu → Copy member ID)";
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The app's signing secret (Basic Information → App Credentials); better
    /// `signing_secret_env` or `signing_secret_file`.
    #[serde(flatten)]
    pub signing_secret: SigningSecretSetting,
    /// The bot token that answers (`xoxb-...`), as for the Slack channel; not set: answers go
    /// through `reply_channel`, or nowhere.
    #[serde(flatten)]
    pub token: TokenSetting,
    /// Slack's Web API, for the answering bot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    /// Slack user ids (`U...`) whose messages are taken; conversation id (`C...`, `D...`) →
    /// session (`chats`, formerly `channels`, or `session_template` with `{channel}`); the
    /// answering channel.
    #[serde(flatten)]
    pub routing: ChatRouting<Slack>,
}

impl Config {
    /// The same app as a channel, when a token is given.
    pub fn bot(&self) -> Option<BotConfig> {
        if !self.token.is_given() {
            return None;
        }
        Some(BotConfig {
            token: self.token.clone(),
            api_url: self.api_url.clone(),
            ..BotConfig::new("")
        })
    }
}

impl SourceKind for Config {
    fn check(&self) -> Result<(), SettingError> {
        self.signing_secret.check()?;
        if let Some(bot) = self.bot() {
            bot.check()?;
        }
        self.routing.check(false)
    }

    fn build(&self) -> Result<SourceSpec, SettingError> {
        let secret = self.signing_secret.resolve()?;
        Ok(SourceSpec::pushed(SlackEvents::new(self.clone(), secret)))
    }

    fn resolve_paths(&mut self, base: &Path) {
        self.signing_secret.resolve_paths(base);
        self.token.resolve_paths(base);
    }

    fn pushed(&self) -> bool {
        true
    }

    fn replies(&self, name: &str) -> Option<Replies> {
        let bot = self.bot();
        if self.routing.reply_channel.is_none() && bot.is_none() {
            return None;
        }
        Some(Replies {
            origin: super::origin(name),
            channel: self.routing.reply_channel_or(name),
            default_config: ChannelConfig::Slack(bot.unwrap_or_else(|| BotConfig::new(""))),
        })
    }
}
