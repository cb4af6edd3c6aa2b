//! The Discord source's settings: the bot (the same token settings as the Discord channel),
//! who may write to the agents, and which channel feeds which session.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::gateway::DiscordGateway;
use super::DiscordReader;
use crate::channels::discord::Config as BotConfig;
use crate::channels::ChannelConfig;
use crate::kit::api::discord::Discord;
use crate::kit::routing::{ChatPlatform, ChatRouting};
use crate::kit::secret::TokenSetting;
use crate::settings::SettingError;
use crate::sources::{Held, Replies, SourceKind, SourceSpec};

/// `{channel}` in `session_template`.
pub const CHANNEL_PLACEHOLDER: &str = "{channel}";

impl ChatPlatform for Discord {
    type User = String;
    const PLACEHOLDER: &'static str = CHANNEL_PLACEHOLDER;
    const TEMPLATE_EXAMPLE: &'static str = "discord-{channel}";
    const CHATS_EXAMPLE: &'static str = "{ \"1312345678901234567\" = \"my-agent\" }";
    const USERS_EXAMPLE: &'static str = "List Discord user ids (allowed_users = \
        [\"1300000000000000001\"]; Settings → Advanced → Developer Mode, then a profile's \
        ⋯ menu → Copy User ID)";

    /// Unicode emoji, as Discord's reaction endpoint takes them.
    const REACTIONS: [&'static str; 3] = ["👀", "✅", "❌"];

    fn check_chat(id: &str) -> Result<(), String> {
        match crate::channels::discord::is_snowflake(id) {
            true => Ok(()),
            false => Err("is not a Discord channel id: channel ids are numbers \
                          (Developer Mode → a channel's menu → Copy Channel ID)"
                .into()),
        }
    }

    fn check_reaction(emoji: &str) -> Result<(), String> {
        let custom = emoji.contains(':');
        match !emoji.is_empty() && !custom && !emoji.chars().any(|c| c.is_ascii_alphanumeric()) {
            true => Ok(()),
            false => Err(format!(
                "{emoji:?} is not a Unicode emoji: write the emoji itself (e.g. \"👀\"); a \
                 server's own emoji cannot be used"
            )),
        }
    }

    /// Every channel but a DM is shared: relayq cannot tell a DM from its id alone, so it
    /// paces progress edits as in a group everywhere.
    fn is_group(_id: &str) -> bool {
        true
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The bot's token (Developer Portal → your app → Bot → Reset Token); better
    /// `token_env` or `token_file`. The same bot answers.
    #[serde(flatten)]
    pub token: TokenSetting,
    /// Discord's REST API, where relayq asks for the gateway's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    /// Discord user ids whose messages are taken; channel id (a server's channel, a DM's) →
    /// session (`chats`, or `session_template` with `{channel}`); the answering channel.
    #[serde(flatten)]
    pub routing: ChatRouting<Discord>,
}

impl Config {
    /// The same bot as a channel: how the source reaches the REST API, and the reply channel
    /// made when config.toml has none.
    pub fn bot(&self) -> BotConfig {
        BotConfig {
            token: self.token.clone(),
            api_url: self.api_url.clone(),
            ..BotConfig::new("")
        }
    }

    fn gateway(&self) -> Result<DiscordGateway, SettingError> {
        let bot = self.bot();
        let token = bot.token()?;
        let api = bot.base_url()?;
        let http = crate::channels::discord::client(&bot)?;
        let reader = DiscordReader::new(self.clone(), api.clone(), http.clone());
        Ok(DiscordGateway::new(reader, api, http, token))
    }
}

impl SourceKind for Config {
    fn check(&self) -> Result<(), SettingError> {
        self.bot().check()?;
        self.routing.check(false)
    }

    fn build(&self) -> Result<SourceSpec, SettingError> {
        Ok(SourceSpec::of(Held::new(self.gateway()?)))
    }

    fn resolve_paths(&mut self, base: &Path) {
        self.token.resolve_paths(base);
    }

    fn files(&self, name: &str) -> Option<crate::files::FileSource> {
        let api = self.bot().base_url().ok();
        Some(crate::files::FileSource {
            origin: super::origin(name),
            fetcher: std::sync::Arc::new(super::DiscordFiles::new(api)),
        })
    }

    fn replies(&self, name: &str) -> Option<Replies> {
        Some(Replies {
            origin: super::origin(name),
            channel: self.routing.reply_channel_or(name),
            default_config: ChannelConfig::Discord(self.bot()),
            progress: Some(self.routing.progress_settings()),
        })
    }
}
