//! Settings given by environment variables (`RELAYQ_QUEUES__INBOUND__MAX_ATTEMPTS=3`), laid
//! over the file's.

/// The prefix of environment variables that set a setting: `RELAYQ_<SECTION>__<KEY>`, with
/// `__` between the parts of the key (`RELAYQ_QUEUES__INBOUND__MAX_ATTEMPTS=3`).
pub const SETTING_ENV_PREFIX: &str = "RELAYQ_";

/// One setting given by an environment variable.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvSetting {
    pub var: String,
    /// The key, lower-cased: `["queues", "inbound", "max_attempts"]`.
    pub path: Vec<String>,
    /// A TOML value (`3`, `true`, `["1s", "2s"]`), else taken as a string (`1s`, a URL).
    pub value: String,
}

impl EnvSetting {
    pub(super) fn apply(&self, table: &mut toml::Table) -> Result<(), String> {
        let value = format!("v = {}", self.value)
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(self.value.clone()));
        let (last, parents) = self.path.split_last().ok_or("names no key")?;
        let mut at = table;
        for part in parents {
            let entry = at
                .entry(part.clone())
                .or_insert_with(|| toml::Value::Table(Default::default()));
            at = entry
                .as_table_mut()
                .ok_or_else(|| format!("`{part}` is not a table, so it has no keys to set"))?;
        }
        at.insert(last.clone(), value);
        Ok(())
    }
}

/// The settings `RELAYQ_*__*` environment variables give, in name order. Variables without
/// `__` (`RELAYQ_DB`, `RELAYQ_CONFIG`) are not settings.
pub fn settings_from_env() -> Vec<EnvSetting> {
    let mut settings: Vec<EnvSetting> = std::env::vars()
        .filter_map(|(var, value)| {
            let key = var.strip_prefix(SETTING_ENV_PREFIX)?;
            key.contains("__").then(|| EnvSetting {
                path: key.split("__").map(str::to_lowercase).collect(),
                var: var.clone(),
                value,
            })
        })
        .collect();
    settings.sort_by(|a, b| a.var.cmp(&b.var));
    settings
}
