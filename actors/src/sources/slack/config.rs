//! The Slack source's settings: the app's signing secret (which proves an event is Slack's),
//! who may write to the agents, which conversation feeds which session, and the bot that
//! answers (the same token settings as the Slack channel).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::SlackEvents;
use crate::channels::kit::secret::{Secret, SecretSetting};
use crate::channels::slack::Config as BotConfig;
use crate::channels::ChannelConfig;
use crate::settings::{resolve_path, SettingError};
use crate::sources::{Replies, SourceKind, SourceSpec};

/// `{channel}` in `session_template`.
pub const CHANNEL_PLACEHOLDER: &str = "{channel}";

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The app's signing secret (Basic Information → App Credentials); better
    /// `signing_secret_env` or `signing_secret_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret_file: Option<PathBuf>,
    /// The bot token that answers (`xoxb-...`), as for the Slack channel; not set: answers go
    /// through `reply_channel`, or nowhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// Slack's Web API, for the answering bot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    /// Slack user ids (`U...`) whose messages are taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_users: Vec<String>,
    /// Conversation id (`C...`, `D...`) → the session its messages go to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub channels: BTreeMap<String, String>,
    /// For conversations not in `channels`: one session each, named from this (`{channel}`
    /// is the conversation id), e.g. `"slack-{channel}"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_template: Option<String>,
    /// The channel that answers these conversations; the default is the channel named like
    /// this source, made from `token` if config.toml has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_channel: Option<String>,
}

impl Config {
    fn signing_secret_setting(&self) -> SecretSetting<'_> {
        SecretSetting::new("signing_secret", &self.signing_secret, &self.signing_secret_env, &self.signing_secret_file)
    }

    /// The same app as a channel, when a token is given.
    pub fn bot(&self) -> Option<BotConfig> {
        if self.token.is_none() && self.token_env.is_none() && self.token_file.is_none() {
            return None;
        }
        Some(BotConfig {
            token: self.token.clone(),
            token_env: self.token_env.clone(),
            token_file: self.token_file.clone(),
            api_url: self.api_url.clone(),
            ..BotConfig::new("")
        })
    }
}

impl SourceKind for Config {
    fn check(&self) -> Result<(), SettingError> {
        self.signing_secret_setting().check()?;
        if let Some(bot) = self.bot() {
            bot.check()?;
        }
        if self.allowed_users.is_empty() {
            return Err(SettingError::new(
                "allowed_users",
                "is required: the agent behind a session can run commands, so relayq reads only \
                 the people you name. List Slack user ids (allowed_users = [\"U0123ABCD\"]; a \
                 profile's ⋮ menu → Copy member ID)",
            ));
        }
        for (channel, session) in &self.channels {
            if session.trim().is_empty() {
                return Err(SettingError::new(format!("channels.{channel}"), "names no session"));
            }
        }
        match &self.session_template {
            Some(t) if !t.contains(CHANNEL_PLACEHOLDER) => Err(SettingError::new(
                "session_template",
                format!("{t:?} has no {CHANNEL_PLACEHOLDER}: write e.g. \"slack-{CHANNEL_PLACEHOLDER}\""),
            )),
            None if self.channels.is_empty() => Err(SettingError::new(
                "channels",
                "is required: say which session each conversation feeds (channels = { \"C0123ABCD\" = \"my-agent\" }), or set session_template = \"slack-{channel}\"",
            )),
            _ => Ok(()),
        }
    }

    fn build(&self) -> Result<SourceSpec, SettingError> {
        let secret = self.signing_secret_setting().resolve()?;
        Ok(SourceSpec::pushed(SlackEvents::new(self.clone(), secret)))
    }

    fn resolve_paths(&mut self, base: &Path) {
        for file in [&mut self.signing_secret_file, &mut self.token_file]
            .into_iter()
            .flatten()
        {
            resolve_path(file, base);
        }
    }

    fn pushed(&self) -> bool {
        true
    }

    fn replies(&self, name: &str) -> Option<Replies> {
        let channel = self.reply_channel.clone();
        let bot = self.bot();
        if channel.is_none() && bot.is_none() {
            return None;
        }
        Some(Replies {
            origin: super::origin(name),
            channel: channel.unwrap_or_else(|| name.to_string()),
            default_config: ChannelConfig::Slack(bot.unwrap_or_else(|| BotConfig::new(""))),
        })
    }
}
