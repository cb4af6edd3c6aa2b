//! The settings every bot platform's channel has (Telegram, Discord, Slack): the bot's token,
//! given inline, from the daemon's environment or from a file; the API's base URL (another
//! server: a local Bot API, a test); the timeout; what to do after a send with no answer.
//! Each platform is a marker type naming its official API and what its token looks like.

use std::marker::PhantomData;
use std::path::Path;
use std::time::Duration;

use ::http::header::HeaderMap;
use serde::{Deserialize, Serialize};

use crate::channels::{Channel, ChannelKind, SettingError, UnknownOutcome};
use crate::kit::default_timeout;
use crate::kit::http;
use crate::kit::secret::{Secret, TokenSetting};

/// A bot platform, as its channel's settings need it.
pub trait Platform: Sized {
    /// The official API's base URL.
    const API_URL: &'static str;
    /// What a token looks like and where to get one, for the error when it does not.
    const TOKEN_LOOKS_LIKE: &'static str;
    type Channel: Channel;
    /// The platform's limit on one message's text.
    fn text_limit() -> relayq_engine::TextLimit;
    /// The largest file a bot may send, and how a person is told the limit: `None` when the
    /// platform's files are not sent yet.
    fn file_limit() -> Option<(u64, &'static str)> {
        None
    }
    /// Makes the channel from its checked settings.
    fn build(config: &BotConfig<Self>) -> Result<Self::Channel, SettingError>;
    /// Why `to` can never be a destination on the platform, if it cannot (see
    /// [`ChannelKind::refuses_address`]).
    fn refuses_address(_to: &str) -> Option<String> {
        None
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, bound = "")]
pub struct BotConfig<P> {
    /// The bot's token; better `token_env` (an environment variable of the daemon) or
    /// `token_file`, so config.toml holds no secret.
    #[serde(flatten)]
    pub token: TokenSetting,
    /// The API's base URL; not set: the platform's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    /// A request not answered within this is abandoned (its outcome unknown).
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// After a send with no answer: `resend` as the platform allows, or `hold` it as a dead
    /// letter for an operator.
    #[serde(default)]
    pub unknown_outcome: UnknownOutcome,
    #[serde(skip)]
    pub platform: PhantomData<P>,
}

impl<P: Platform> BotConfig<P> {
    /// A bot with this token, at the official API.
    pub fn new(token: &str) -> Self {
        BotConfig {
            token: TokenSetting::inline(token),
            api_url: None,
            timeout: default_timeout(),
            unknown_outcome: UnknownOutcome::Resend,
            platform: PhantomData,
        }
    }

    /// The token, read from where the settings say, without surrounding blanks; refused when
    /// empty or holding a blank.
    pub fn token(&self) -> Result<Secret, SettingError> {
        let token = self.token.resolve()?;
        let token = token.expose().trim();
        if token.is_empty() || token.contains(char::is_whitespace) {
            return Err(SettingError::new(
                "token",
                format!("is not a bot token: it looks like {}", P::TOKEN_LOOKS_LIKE),
            ));
        }
        Ok(Secret::new(token))
    }

    /// The token as an `Authorization: <scheme> <token>` header (marked sensitive), and the
    /// token, for the HTTP client to scrub from its errors.
    pub fn authorization(&self, scheme: &str) -> Result<(HeaderMap, Secret), SettingError> {
        let token = self.token()?;
        Ok((http::authorization("token", scheme, &token)?, token))
    }

    /// The API's base URL, ending in `/` so a method joins under it.
    pub fn base_url(&self) -> Result<url::Url, SettingError> {
        http::base_url("api_url", self.api_url.as_deref().unwrap_or(P::API_URL))
    }

    /// What the file alone can tell: one way to give the token, an http(s) API URL.
    pub fn check(&self) -> Result<(), SettingError> {
        self.token.check()?;
        self.base_url().map(|_| ())
    }

    /// `token_file` relative to the config file's folder.
    pub fn resolve_paths(&mut self, base: &Path) {
        self.token.resolve_paths(base);
    }
}

impl<P: Platform> ChannelKind for BotConfig<P> {
    type Channel = P::Channel;

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn text_limit(&self) -> Option<relayq_engine::TextLimit> {
        Some(P::text_limit())
    }

    fn file_limit(&self) -> Option<(u64, &'static str)> {
        P::file_limit()
    }

    fn refuses_address(&self, to: &str) -> Option<String> {
        P::refuses_address(to)
    }

    fn check(&self) -> Result<(), SettingError> {
        BotConfig::check(self)
    }

    fn build(&self) -> Result<P::Channel, SettingError> {
        P::build(self)
    }

    fn resolve_paths(&mut self, base: &Path) {
        BotConfig::resolve_paths(self, base)
    }
}

/// The [`Channel`] methods a bot platform's channel answers from its settings and its platform
/// alike: its `timeout` and `unknown_outcome` fields, its platform's pace and text limit
/// (`text_limit()` in its module), its own markup for notices, and the API call that says its
/// token works. Used inside `impl Channel for ...`.
macro_rules! bot_channel_basics {
    (render: $render:path, pace: $pace:path, ready: $ready:ident) => {
        fn timeout(&self) -> std::time::Duration {
            self.timeout
        }

        fn render(&self, n: &relayq_engine::Notice) -> String {
            $render(n)
        }

        fn pace(&self) -> $crate::pacing::Pace {
            $pace()
        }

        fn unknown_outcome(&self) -> $crate::channels::UnknownOutcome {
            self.unknown_outcome
        }

        fn text_limit(&self) -> Option<relayq_engine::TextLimit> {
            Some(text_limit())
        }

        fn ready_check(&self) -> Option<$crate::kit::ReadyCheck> {
            let this = self.clone();
            Some(Box::pin(async move { this.$ready().await.map(|_| ()) }))
        }
    };
}
pub(crate) use bot_channel_basics;
