//! Secret settings (tokens, URLs with a token in them). A [`Secret`] never shows in `Debug`,
//! logs, errors or `relayq config show`, and a setting `key` may instead be given as `key_env`
//! (the name of an environment variable of the daemon) or `key_file` (a file holding it, as
//! container and systemd credentials are mounted), so the config file need not hold it.

use std::path::{Path, PathBuf};

/// What replaces a secret found in text about to be kept or logged.
pub const REDACTED: &str = "[redacted]";

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize, Serializer};

use crate::settings::SettingError;

/// What a secret is shown as, wherever relayq prints a setting.
pub const MASK: &str = "********";

/// A value that must not be seen. Only [`Secret::expose`] gives it, at the point of use.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(SecretString);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(SecretString::from(value.into()))
    }

    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(MASK)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(MASK)
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

/// Secret values shorter than this are not scrubbed from text: a value such as `1` or `yes`
/// would blank out ordinary words, and is no credential.
pub const MIN_SCRUBBED: usize = 4;

/// `text` with each of `secrets` (of at least [`MIN_SCRUBBED`] characters) replaced by
/// `[redacted]`, longest first, so a secret that holds another is taken out whole.
pub fn scrub<'a>(text: &str, secrets: impl IntoIterator<Item = &'a str>) -> String {
    let mut secrets: Vec<&str> = secrets
        .into_iter()
        .filter(|s| s.chars().count() >= MIN_SCRUBBED)
        .collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.into_iter().fold(text.to_string(), |text, secret| {
        text.replace(secret, REDACTED)
    })
}

/// The three ways to give secret setting `key`, as a kind's `Config` holds them.
#[derive(Clone, Copy)]
pub struct SecretSetting<'a> {
    pub key: &'a str,
    pub inline: Option<&'a Secret>,
    pub env: Option<&'a str>,
    pub file: Option<&'a Path>,
}

impl<'a> SecretSetting<'a> {
    /// Setting `key` from a kind's three fields: `key`, `key_env`, `key_file`.
    pub fn new(
        key: &'a str,
        inline: &'a Option<Secret>,
        env: &'a Option<String>,
        file: &'a Option<PathBuf>,
    ) -> Self {
        SecretSetting {
            key,
            inline: inline.as_ref(),
            env: env.as_deref(),
            file: file.as_deref(),
        }
    }

    /// Exactly one of `key`, `key_env`, `key_file` is given (what the file alone can tell).
    pub fn check(&self) -> Result<(), SettingError> {
        let key = self.key;
        match [self.inline.is_some(), self.env.is_some(), self.file.is_some()]
            .iter()
            .filter(|given| **given)
            .count()
        {
            1 => Ok(()),
            0 => Err(SettingError::new(
                key,
                format!("is required: set `{key}`, or `{key}_env` (an environment variable that holds it), or `{key}_file` (a file that holds it)"),
            )),
            _ => Err(SettingError::new(
                key,
                format!("is given more than once: set only one of `{key}`, `{key}_env`, `{key}_file`"),
            )),
        }
    }

    /// The value, read from the daemon's environment or the file when given that way. A
    /// trailing newline of a file is not part of it.
    pub fn resolve(&self) -> Result<Secret, SettingError> {
        self.check()?;
        let key = self.key;
        let value = if let Some(secret) = self.inline {
            secret.clone()
        } else if let Some(var) = self.env {
            let value = std::env::var(var).map_err(|_| {
                SettingError::new(
                    format!("{key}_env"),
                    format!("names ${var}, which is not set in relayq's environment"),
                )
            })?;
            Secret::new(value)
        } else {
            let path = self.file.expect("check: one of the three is given");
            let text = std::fs::read_to_string(path).map_err(|e| {
                SettingError::new(
                    format!("{key}_file"),
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            Secret::new(text.trim_end_matches(['\n', '\r']))
        };
        if value.expose().trim().is_empty() {
            return Err(SettingError::new(key, "is empty"));
        }
        Ok(value)
    }
}

/// Declares a secret setting as one type that a kind's settings take in whole
/// (`#[serde(flatten)]`): its three fields `key`, `key_env`, `key_file`, and how it is checked,
/// read and resolved against the config file's folder.
macro_rules! secret_setting {
    ($(#[$doc:meta])* $name:ident, $key:literal, $inline:ident, $env:ident, $file:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
        pub struct $name {
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub $inline: Option<Secret>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub $env: Option<String>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub $file: Option<PathBuf>,
        }

        impl $name {
            /// Given inline, in the settings.
            pub fn inline(value: &str) -> Self {
                $name { $inline: Some(Secret::new(value)), ..Default::default() }
            }

            /// The three fields as one setting.
            pub fn setting(&self) -> SecretSetting<'_> {
                SecretSetting::new($key, &self.$inline, &self.$env, &self.$file)
            }

            /// Whether any of the three is given.
            pub fn is_given(&self) -> bool {
                self.$inline.is_some() || self.$env.is_some() || self.$file.is_some()
            }

            /// Exactly one of the three is given.
            pub fn check(&self) -> Result<(), SettingError> {
                self.setting().check()
            }

            /// The value, from where the settings say.
            pub fn resolve(&self) -> Result<Secret, SettingError> {
                self.setting().resolve()
            }

            /// The file relative to the config file's folder.
            pub fn resolve_paths(&mut self, base: &Path) {
                if let Some(file) = &mut self.$file {
                    crate::settings::resolve_path(file, base);
                }
            }
        }
    };
}

secret_setting!(
    /// A bot's or an API's token: `token`, `token_env`, `token_file`.
    TokenSetting, "token", token, token_env, token_file
);
secret_setting!(
    /// A Slack app's signing secret: `signing_secret`, `signing_secret_env`, `signing_secret_file`.
    SigningSecretSetting, "signing_secret", signing_secret, signing_secret_env, signing_secret_file
);
secret_setting!(
    /// The secret a platform sends with each webhook call: `webhook_secret`, `webhook_secret_env`,
    /// `webhook_secret_file`.
    WebhookSecretSetting, "webhook_secret", webhook_secret, webhook_secret_env, webhook_secret_file
);
secret_setting!(
    /// A Slack app-level token (`xapp-...`): `app_token`, `app_token_env`, `app_token_file`.
    AppTokenSetting, "app_token", app_token, app_token_env, app_token_file
);
secret_setting!(
    /// A URL with a credential in it: `url`, `url_env`, `url_file`.
    UrlSetting, "url", url, url_env, url_file
);

#[cfg(test)]
mod tests {
    use super::*;

    fn setting<'a>(
        inline: Option<&'a Secret>,
        env: Option<&'a str>,
        file: Option<&'a Path>,
    ) -> SecretSetting<'a> {
        SecretSetting {
            key: "token",
            inline,
            env,
            file,
        }
    }

    #[test]
    fn a_secret_never_shows_in_debug_or_serialised_settings() {
        let s = Secret::new("s3cr3t");
        assert_eq!(format!("{s:?}"), MASK);
        assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{MASK}\""));
        assert_eq!(s.expose(), "s3cr3t");
    }

    #[test]
    fn a_secret_comes_inline_from_the_environment_or_from_a_file() {
        let inline = Secret::new("a");
        assert_eq!(
            setting(Some(&inline), None, None).resolve().unwrap(),
            inline
        );

        std::env::set_var("RELAYQ_TEST_SECRET_TOKEN", "from-env");
        let from_env = setting(None, Some("RELAYQ_TEST_SECRET_TOKEN"), None);
        assert_eq!(from_env.resolve().unwrap().expose(), "from-env");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "from-file\n").unwrap();
        let from_file = setting(None, None, Some(&path));
        assert_eq!(from_file.resolve().unwrap().expose(), "from-file");
    }

    #[test]
    fn a_missing_doubled_or_unreadable_secret_names_the_key_to_fix() {
        let e = setting(None, None, None).resolve().unwrap_err();
        assert_eq!(e.key, "token");
        assert!(e.message.contains("token_env"), "{e}");

        let inline = Secret::new("a");
        let e = setting(Some(&inline), Some("X"), None).check().unwrap_err();
        assert!(e.message.contains("more than once"), "{e}");

        let e = setting(None, Some("RELAYQ_TEST_SECRET_UNSET"), None)
            .resolve()
            .unwrap_err();
        assert_eq!(e.key, "token_env");
        assert!(e.message.contains("$RELAYQ_TEST_SECRET_UNSET"), "{e}");

        let e = setting(None, None, Some(Path::new("/nonexistent/token")))
            .resolve()
            .unwrap_err();
        assert_eq!(e.key, "token_file");
        assert!(e.message.contains("/nonexistent/token"), "{e}");
    }
}
