//! Channels: where delivered rows go, and the only code that talks to the outside world.
//!
//! ```text
//!   session / outbound sender ──Deliver(Delivery)──▶ ChannelActor<C> ──C::deliver──▶ far end
//!                             ◀──────Outcome───────┘  Delivered(receipt) | Throttled | Retry
//!                                                      | Permanent | Expired
//! ```
//!
//! - [`contract`]: the [`Channel`] trait, [`Delivery`], [`Outcome`].
//! - [`ChannelActor`]: runs any channel; [`ChannelDirectory`] restarts one that panicked.
//! - [`ChannelKind`]: a kind's settings, checked and built into a channel.
//! - [`kit`]: what platforms share: the HTTP client and its error words, secrets, the
//!   conformance suite.
//! - one folder per kind: `file/`, `exec/`, `tmux/`, `webhook/`.
//!
//! **Adding a kind** (a platform): create `channels/<kind>/mod.rs` with a `Config` that
//! implements [`ChannelKind`] (settings, `check`, `build`) and the channel that implements
//! [`Channel`] (deliver, classify), with its tests beside it; then add one line to
//! `channel_kinds!` below. `kind = "<kind>"` in `[channels.NAME]` then selects it.

mod actor;
pub mod contract;
mod directory;
mod kind;
pub mod kit;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use actor::{ChannelActor, Deliver};
pub use contract::{Answer, Channel, Content, Delivery, Outcome, Receipt};
pub use directory::{ChannelDirectory, ChannelHandle, ChannelSpec};
pub use kind::{resolve_path, ChannelKind, SettingError, TIMEOUT_RANGE};

use kind::AnyKind;

/// Declares the channel kinds: `Variant(folder)` for each, the folder's `Config` implementing
/// [`ChannelKind`]. The kind's name in `config.toml` is the variant's, lower-cased.
macro_rules! channel_kinds {
    ($($variant:ident($kind:ident)),* $(,)?) => {
        $(pub mod $kind;)*

        /// One `[channels.NAME]` table: its `kind` and that kind's settings.
        #[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
        #[serde(tag = "kind", rename_all = "lowercase")]
        pub enum ChannelConfig {
            $($variant($kind::Config),)*
        }

        impl ChannelConfig {
            fn settings(&self) -> &dyn AnyKind {
                match self {
                    $(ChannelConfig::$variant(c) => c,)*
                }
            }

            fn settings_mut(&mut self) -> &mut dyn AnyKind {
                match self {
                    $(ChannelConfig::$variant(c) => c,)*
                }
            }
        }
    };
}

channel_kinds! {
    File(file),
    Exec(exec),
    Tmux(tmux),
    Webhook(webhook),
}

impl ChannelConfig {
    /// Checks what the file alone can tell: the timeout's range and the kind's own checks.
    pub fn check(&self) -> Result<(), SettingError> {
        self.settings().check()
    }

    /// Checks, then builds the channel (reading `*_env` and `*_file` settings): the daemon's
    /// step at start and reload.
    pub fn spec(&self) -> Result<ChannelSpec, SettingError> {
        self.settings().spec()
    }

    /// Makes relative paths relative to `base`, the config file's folder.
    pub fn resolve_paths(&mut self, base: &Path) {
        self.settings_mut().resolve_paths(base)
    }
}
