//! What channel and source kinds share about their settings: the error that names the key to
//! fix (the engine's, shared by every settings type), and paths relative to the config file.

use std::path::{Path, PathBuf};

pub use relayq_engine::settings::{check_duration, check_range, SettingError};

/// Something done with one kind's settings type, chosen by its `kind` name (see `kinds!`'s
/// `with_kind`): the config loader reads a table that failed again as its kind, to name the
/// key at fault (serde's tagged enum reads the table whole and loses it).
pub trait WithKind {
    type Out;
    fn with<T: serde::de::DeserializeOwned>(self) -> Self::Out;
}

/// `path` made relative to `base` when it is relative.
pub fn resolve_path(path: &mut PathBuf, base: &Path) {
    if path.is_relative() {
        *path = base.join(&*path);
    }
}

/// Declares the kinds of a registry (channels, sources): `Variant(folder)` for each, the
/// folder's `Config` implementing the registry's kind trait. Makes `pub mod folder;` for each,
/// the `$config` enum that `config.toml` tables deserialise into by `kind = "<variant,
/// lower-cased>"`, and its `check`, `spec` and `resolve_paths`, which run the registry's
/// generic `$check` and `$spec` functions on whichever kind the table is; `forward` names more
/// of the kind trait's `&self` methods (`name(arg: Type) -> Ret`) to call on whichever kind the
/// table is. A kind marked `conformance` runs the registry's conformance suite: the registry's
/// `suite` macro is given `[conformance] folder` for each, and makes what the suite iterates
/// from what each such folder describes (a marked kind whose folder describes nothing does not
/// compile).
macro_rules! kinds {
    (
        $config:ident -> $spec:ty, trait $kind:ident, check $check:path, spec $build:path,
        suite $suite:ident,
        $list:tt
        $(forward { $($method:ident($($arg:ident: $arg_ty:ty),*) -> $ret:ty),* $(,)? })?
    ) => {
        $crate::settings::kinds!(@registry $config -> $spec, $kind, $check, $build, $list);
        $crate::settings::kinds!(@suite $suite, $list);
        $($($crate::settings::kinds!(@forward $config, $kind, $method($($arg: $arg_ty),*), ($($arg),*), $ret, $list);)*)?
    };
    (@suite $suite:ident,
        { $($variant:ident($module:ident) $($conformance:ident)?),* $(,)? }
    ) => {
        $suite! { $($([$conformance] $module)?)* }
    };
    (@registry $config:ident -> $spec:ty, $kind:ident, $check:path, $build:path,
        { $($variant:ident($module:ident) $($conformance:ident)?),* $(,)? }
    ) => {
        $(pub mod $module;)*

        /// One `config.toml` table of this registry: its `kind` and that kind's settings.
        #[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
        #[serde(tag = "kind", rename_all = "lowercase")]
        #[allow(clippy::large_enum_variant)] // a few per config file: size does not matter
        pub enum $config {
            $($variant($module::Config),)*
        }

        impl $config {
            /// Runs `with` on the settings type of kind `kind` (as `kind = "..."` names it);
            /// `None` for a kind there is not.
            pub fn with_kind<W: $crate::settings::WithKind>(kind: &str, with: W) -> Option<W::Out> {
                $(
                    if kind.eq_ignore_ascii_case(stringify!($variant)) {
                        return Some(with.with::<$module::Config>());
                    }
                )*
                None
            }

            /// Checks what the file alone can tell (every command reads the config).
            pub fn check(&self) -> Result<(), $crate::settings::SettingError> {
                match self {
                    $($config::$variant(c) => $check(c),)*
                }
            }

            /// Checks, then builds it, reading `*_env` and `*_file` settings: the daemon's step
            /// at start and at each reload.
            pub fn spec(&self) -> Result<$spec, $crate::settings::SettingError> {
                match self {
                    $($config::$variant(c) => $build(c),)*
                }
            }

            /// Makes relative paths relative to `base`, the config file's folder.
            pub fn resolve_paths(&mut self, base: &std::path::Path) {
                match self {
                    $($config::$variant(c) => $kind::resolve_paths(c, base),)*
                }
            }
        }
    };
    (@forward $config:ident, $kind:ident, $method:ident($($arg:ident: $arg_ty:ty),*), $args:tt, $ret:ty,
        { $($variant:ident($module:ident) $($conformance:ident)?),* $(,)? }
    ) => {
        impl $config {
            #[doc = concat!("See [`", stringify!($kind), "::", stringify!($method), "`].")]
            pub fn $method(&self, $($arg: $arg_ty),*) -> $ret {
                match self {
                    $($config::$variant(c) => $crate::settings::kinds!(@call $kind, $method, c, $args),)*
                }
            }
        }
    };
    (@call $kind:ident, $method:ident, $c:ident, ($($arg:ident),*)) => {
        $kind::$method($c, $($arg),*)
    };
}
pub(crate) use kinds;
