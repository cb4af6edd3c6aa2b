//! The webhook's settings: where to POST, extra headers, the timeout.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::WebhookChannel;
use crate::kit::http::{self, HttpClient};
use crate::kit::secret::{Secret, UrlSetting};
use crate::kit::default_timeout;
use crate::channels::{ChannelKind, SettingError, UnknownOutcome};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where to POST, e.g. `https://bridge.example.com/relayq`; or `url_env` / `url_file`.
    #[serde(flatten)]
    pub url: UrlSetting,
    /// Extra request headers, e.g. `{ Authorization = "Bearer ..." }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Secret>,
    /// Extra request headers whose values come from the daemon's environment:
    /// `{ Authorization = "BRIDGE_AUTH" }` sends `$BRIDGE_AUTH`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers_env: BTreeMap<String, String>,
    /// A request not answered within this is abandoned and retried.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Split an outbound text longer than this many characters (UTF-16 units) into parts, one
    /// request each: for a far end that posts into a chat with a limit (a Slack incoming
    /// webhook: 4000). None: any length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chars: Option<usize>,
    /// A row whose earlier request got no answer: send it again with the same
    /// `Idempotency-Key` and `"possible_repeat": true` (`resend`), or `hold` it as a dead
    /// letter for an operator.
    #[serde(default)]
    pub unknown_outcome: UnknownOutcome,
}

/// The `max_chars` a webhook may have.
pub const MAX_CHARS_RANGE: (usize, usize) = (relayq_engine::outbound::chunking::MIN_LIMIT, 1 << 20);

impl Config {
    /// A webhook to `url` with no extra headers.
    pub fn new(url: &str) -> Self {
        Config {
            url: UrlSetting::inline(url),
            headers: BTreeMap::new(),
            headers_env: BTreeMap::new(),
            timeout: default_timeout(),
            max_chars: None,
            unknown_outcome: UnknownOutcome::Resend,
        }
    }
}

impl ChannelKind for Config {
    type Channel = WebhookChannel;

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn text_limit(&self) -> Option<relayq_engine::TextLimit> {
        self.max_chars.map(|max| relayq_engine::TextLimit {
            max,
            markup: relayq_engine::Markup::Plain,
        })
    }

    fn check(&self) -> Result<(), SettingError> {
        self.url.check()?;
        let (min, max) = MAX_CHARS_RANGE;
        if let Some(n) = self.max_chars.filter(|n| !(min..=max).contains(n)) {
            return Err(SettingError::new(
                "max_chars",
                format!("{n} is out of range: between {min} and {max}"),
            ));
        }
        if let Some(url) = &self.url.url {
            http::check_url("url", url.expose())?;
        }
        http::headers(&self.headers)?;
        Ok(())
    }

    fn build(&self) -> Result<WebhookChannel, SettingError> {
        let url = self.url.resolve()?;
        let parsed = http::check_url("url", url.expose())?;
        // A far end may echo part of the URL back: those parts are secret too.
        let parts = http::url_secrets(&parsed);
        let mut headers = self.headers.clone();
        for (name, var) in &self.headers_env {
            let value = std::env::var(var).map_err(|_| {
                SettingError::new(
                    format!("headers_env.{name}"),
                    format!("names ${var}, which is not set in relayq's environment"),
                )
            })?;
            headers.insert(name.clone(), Secret::new(value));
        }
        let target = parsed.clone();
        let secrets = std::iter::once(url.clone())
            .chain(parts)
            .chain(headers.values().flat_map(credentials))
            .collect();
        Ok(WebhookChannel {
            http: HttpClient::new(self.timeout, http::headers(&headers)?, secrets),
            url: target,
            timeout: self.timeout,
            text_limit: self.text_limit(),
            unknown_outcome: self.unknown_outcome,
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        self.url.resolve_paths(base);
    }
}

/// A header value and, when it is `<scheme> <credential>` (`Bearer abc`), the credential alone:
/// a far end echoing the token back would show it without the scheme.
fn credentials(value: &Secret) -> Vec<Secret> {
    let words: Vec<&str> = value.expose().split_whitespace().collect();
    let credential = (words.len() > 1).then(|| Secret::new(words[1..].join(" ")));
    std::iter::once(value.clone()).chain(credential).collect()
}
