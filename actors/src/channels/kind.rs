//! What a channel kind configured in `config.toml` provides: its settings type, checked when the
//! file is read and built into a [`Channel`] when the daemon starts. Vector's `SinkConfig::build`
//! is the model: the binary never names a kind; each kind checks its own settings.

use std::path::Path;
use std::time::Duration;

use super::contract::Channel;
use super::directory::ChannelSpec;
use crate::settings::SettingError;

/// The timeouts a channel may have: below, a delivery cannot finish; above, a stuck far end
/// holds its session for longer than anyone waits.
pub const TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(3600));

/// A kind of channel as `config.toml` names it (`kind = "webhook"`), implemented by the
/// kind's `Config` in `channels/<kind>/`.
pub trait ChannelKind {
    type Channel: Channel;

    /// How long one delivery may take before it is abandoned and retried.
    fn timeout(&self) -> Duration;

    /// The longest text one message may have (see [`Channel::text_limit`]): known from the
    /// settings alone, so `relayq enqueue` splits a text as the daemon would.
    fn text_limit(&self) -> Option<relayq_engine::TextLimit> {
        None
    }

    /// The largest file this channel sends, with the words that name the limit to a person;
    /// `None`: it sends no files (`relayq send` refuses them).
    fn file_limit(&self) -> Option<(u64, &'static str)> {
        None
    }

    /// Why `address` (a session id, or an outbound destination) can never be delivered to by
    /// this channel, if it cannot: refused at enqueue rather than found at delivery.
    fn refuses_address(&self, _address: &str) -> Option<String> {
        None
    }

    /// The session whose messages this channel types into a tmux pane at `place`, when its
    /// target names that pane (how `relayq hook`, run in an agent's pane without
    /// `RELAYQ_SESSION`, finds its session). Only a channel into panes knows.
    fn session_in_pane(&self, _place: &super::tmux::PanePlace) -> Option<String> {
        None
    }

    /// Checks what the file alone can tell (every command reads the config, not only the
    /// daemon); the error names the key.
    fn check(&self) -> Result<(), SettingError> {
        Ok(())
    }

    /// Makes the channel, reading what comes from the daemon's environment (`*_env`
    /// variables, `*_file` secrets). Run by the daemon at start and at each reload.
    fn build(&self) -> Result<Self::Channel, SettingError>;

    /// Makes relative paths relative to `base`, the config file's folder.
    fn resolve_paths(&mut self, _base: &Path) {}
}

/// Checks a kind's settings: the timeout's range, then the kind's own checks.
pub(super) fn check<K: ChannelKind>(kind: &K) -> Result<(), SettingError> {
    crate::settings::check_duration("timeout", kind.timeout(), TIMEOUT_RANGE, "")?;
    kind.check()
}

/// Checks, then builds the channel a kind's settings describe.
pub(super) fn spec<K: ChannelKind + Clone + Send + Sync + 'static>(
    kind: &K,
) -> Result<ChannelSpec, SettingError> {
    check(kind)?;
    let settings = kind.clone();
    kind.build()
        .map(ChannelSpec::of)
        .map(|spec| spec.refusing(move |address| settings.refuses_address(address)))
}
