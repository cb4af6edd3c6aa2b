//! `[http]`: whether the daemon serves its HTTP API, where, and the token it asks for.

use std::net::SocketAddr;

use relayq_actors::kit::secret::{Secret, TokenSetting};
use relayq_engine::settings::{check_range, SettingError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Off by default: nothing listens unless asked.
    pub enabled: bool,
    /// `IP:PORT`. Anything but a loopback address needs a token.
    pub listen: String,
    /// The bearer token every request but `/healthz` must carry; better `token_env` or
    /// `token_file`. Optional on loopback, required elsewhere.
    #[serde(flatten)]
    pub token: TokenSetting,
    /// Threads answering requests.
    pub workers: usize,
    /// The largest request body taken, in bytes; a larger one is refused with 413 unread.
    pub max_request_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            enabled: false,
            listen: "127.0.0.1:8765".into(),
            token: TokenSetting::default(),
            workers: 2,
            max_request_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Allowed `workers`.
pub const WORKERS: (usize, usize) = (1, 64);
/// Allowed `max_request_bytes`: room for a message at `daemon.max_body_bytes`'s largest.
pub const MAX_REQUEST_BYTES: (usize, usize) = (1024, 64 * 1024 * 1024);

impl HttpConfig {
    /// The listening address, or what is wrong with it.
    pub fn address(&self) -> Result<SocketAddr, String> {
        self.listen.parse().map_err(|_| {
            format!(
                "{:?} is not an IP address and port; use e.g. \"127.0.0.1:8765\"",
                self.listen
            )
        })
    }

    /// What the file alone can tell: the address, the ranges, and a token wherever the
    /// address is not loopback. Keys within `[http]`.
    pub fn check(&self) -> Result<(), SettingError> {
        let address = self.address().map_err(|m| SettingError::new("listen", m))?;
        check_range("workers", self.workers, WORKERS)?;
        check_range(
            "max_request_bytes",
            self.max_request_bytes,
            MAX_REQUEST_BYTES,
        )?;
        if self.token.is_given() {
            self.token.check()?;
        } else if self.enabled && !address.ip().is_loopback() {
            return Err(SettingError::new(
                "token",
                format!(
                    "is required when the API listens beyond this machine ({address}): set \
                     http.token_env (or token, or token_file) so every request must carry it, \
                     or listen on 127.0.0.1"
                ),
            ));
        }
        Ok(())
    }

    /// The token, read from the environment or the file when given that way; `None` when
    /// none is set (loopback only: [`HttpConfig::check`] refuses the rest).
    pub fn token(&self) -> Result<Option<Secret>, String> {
        if !self.token.is_given() {
            return Ok(None);
        }
        self.token
            .resolve()
            .map(Some)
            .map_err(|e| format!("http.{} {}", e.key, e.message))
    }
}
