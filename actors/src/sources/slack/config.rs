//! The Slack source's settings: the app's signing secret (which proves an event is Slack's),
//! who may write to the agents, which conversation feeds which session, and the bot that
//! answers (the same token settings as the Slack channel).

use std::path::Path;

use serde::{Deserialize, Serialize};


use super::socket::SlackSocket;
use super::{SlackEvents, SlackReader};
use crate::channels::slack::Config as BotConfig;
use crate::kit::api::slack::{Slack, API_URL};
use crate::kit::http::{self, HttpClient};
use crate::kit::routing::{ChatPlatform, ChatRouting};
use crate::kit::secret::{AppTokenSetting, Secret, SigningSecretSetting, TokenSetting};
use crate::channels::ChannelConfig;
use crate::settings::SettingError;
use crate::sources::{Held, Replies, SourceKind, SourceSpec};

/// How long `apps.connections.open` may take.
const OPEN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `{channel}` in `session_template`.
pub const CHANNEL_PLACEHOLDER: &str = "{channel}";

impl ChatPlatform for Slack {
    type User = String;
    const PLACEHOLDER: &'static str = CHANNEL_PLACEHOLDER;
    const TEMPLATE_EXAMPLE: &'static str = "slack-{channel}";
    const CHATS_EXAMPLE: &'static str = "{ \"C0123ABCD\" = \"my-agent\" }";
    const USERS_EXAMPLE: &'static str = "List Slack user ids (allowed_users = [\"U0123ABCD\"]; \
        a profile's ⋮ menu → Copy member ID)";

    /// Slack's reactions are emoji names.
    const REACTIONS: [&'static str; 3] = ["eyes", "white_check_mark", "x"];

    fn check_reaction(name: &str) -> Result<(), String> {
        let named = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-+'".contains(c));
        match named {
            true => Ok(()),
            false => Err(format!(
                "{name:?} is not an emoji name: write it as Slack names it, without colons \
                 (e.g. \"eyes\", \"white_check_mark\")"
            )),
        }
    }

    /// Channels (public `C…`, private `G…`) are groups; direct messages (`D…`) are not.
    fn is_group(id: &str) -> bool {
        !id.trim().starts_with('D')
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `events` (the default): Slack posts each event to relayq's HTTP API, signed with
    /// `signing_secret`. `socket`: relayq holds a Socket Mode connection open with
    /// `app_token`, and needs no public URL.
    #[serde(default)]
    pub mode: SlackMode,
    /// The app's signing secret (Basic Information → App Credentials); better
    /// `signing_secret_env` or `signing_secret_file`. Events mode only.
    #[serde(flatten)]
    pub signing_secret: SigningSecretSetting,
    /// The app-level token (`xapp-...`, Basic Information → App-Level Tokens, scope
    /// `connections:write`); better `app_token_env` or `app_token_file`. Socket mode only.
    #[serde(flatten)]
    pub app_token: AppTokenSetting,
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

/// How the Slack source hears of new events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SlackMode {
    #[default]
    Events,
    Socket,
}

impl Config {
    /// `apps.connections.open` and a client that sends the app-level token with it.
    fn socket(&self) -> Result<SlackSocket, SettingError> {
        let token = self.app_token.resolve()?;
        if !token.expose().trim().starts_with("xapp-") {
            return Err(SettingError::new(
                "app_token",
                "is not an app-level token: it looks like xapp-... (Basic Information → \
                 App-Level Tokens, with the connections:write scope)",
            ));
        }
        let api = http::base_url("api_url", self.api_url.as_deref().unwrap_or(API_URL))?;
        let open = api
            .join("apps.connections.open")
            .map_err(|e| SettingError::new("api_url", e.to_string()))?;
        let token = Secret::new(token.expose().trim());
        let headers = http::authorization("app_token", "Bearer", &token)?;
        let client = HttpClient::new(OPEN_TIMEOUT, headers, vec![token]);
        Ok(SlackSocket::new(SlackReader::new(self.clone()), open, client))
    }

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
        match self.mode {
            SlackMode::Events => self.signing_secret.check()?,
            SlackMode::Socket => self.app_token.check()?,
        }
        if let Some(bot) = self.bot() {
            bot.check()?;
        }
        self.routing.check(false)
    }

    fn build(&self) -> Result<SourceSpec, SettingError> {
        Ok(match self.mode {
            SlackMode::Events => {
                let secret = self.signing_secret.resolve()?;
                SourceSpec::pushed(SlackEvents::new(self.clone(), secret))
            }
            SlackMode::Socket => SourceSpec::of(Held::new(self.socket()?)),
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        self.signing_secret.resolve_paths(base);
        self.app_token.resolve_paths(base);
        self.token.resolve_paths(base);
    }

    fn pushed(&self) -> bool {
        self.mode == SlackMode::Events
    }

    fn files(&self, name: &str) -> Option<crate::files::FileSource> {
        let client = self.token.resolve().ok().and_then(|token| {
            let token = Secret::new(token.expose().trim());
            let headers = http::authorization("token", "Bearer", &token).ok()?;
            Some(HttpClient::new(OPEN_TIMEOUT, headers, vec![token]))
        });
        let api = self.api_url.as_deref().and_then(|u| http::base_url("api_url", u).ok());
        Some(crate::files::FileSource {
            origin: super::origin(name),
            fetcher: std::sync::Arc::new(super::files::SlackFiles::new(client, api)),
        })
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
            progress: Some(self.routing.progress_settings()),
        })
    }
}
