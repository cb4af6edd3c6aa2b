//! What channel and source kinds share about their settings: the error that names the key to
//! fix, and paths relative to the config file.

use std::path::{Path, PathBuf};

/// A problem with one setting of a channel or source: its key (within `[channels.NAME]` or `[sources.NAME]`) and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct SettingError {
    pub key: String,
    pub message: String,
}

impl SettingError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        SettingError {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// `path` made relative to `base` when it is relative.
pub fn resolve_path(path: &mut PathBuf, base: &Path) {
    if path.is_relative() {
        *path = base.join(&*path);
    }
}

/// Declares the kinds of a registry (channels, sources): `Variant(folder)` for each, the
/// folder's `Config` implementing the registry's kind trait (through the object-safe `$any`).
/// Makes `pub mod folder;` for each, and the `$config` enum that `config.toml` tables
/// deserialise into, by `kind = "<variant, lower-cased>"`.
macro_rules! kinds {
    ($config:ident: dyn $any:ident { $($variant:ident($kind:ident)),* $(,)? }) => {
        $(pub mod $kind;)*

        /// One `config.toml` table of this registry: its `kind` and that kind's settings.
        #[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
        #[serde(tag = "kind", rename_all = "lowercase")]
        pub enum $config {
            $($variant($kind::Config),)*
        }

        impl $config {
            fn settings(&self) -> &dyn $any {
                match self {
                    $($config::$variant(c) => c,)*
                }
            }

            fn settings_mut(&mut self) -> &mut dyn $any {
                match self {
                    $($config::$variant(c) => c,)*
                }
            }
        }
    };
}
pub(crate) use kinds;
