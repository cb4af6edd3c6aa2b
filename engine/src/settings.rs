//! What every settings type shares: the error that names the key to fix and what to do, and
//! the range check for durations. Each settings type checks itself where it is defined; the
//! binary's `config.rs` composes them, adding the table each one sits in to the key.

use std::time::Duration;

/// A problem with one setting: its key (within the settings type's own table) and what to do.
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

    /// The same problem, its key inside `table` (`lease_timeout` → `queues.inbound.lease_timeout`).
    pub fn within(self, table: &str) -> Self {
        SettingError {
            key: format!("{table}.{}", self.key),
            ..self
        }
    }
}

/// Refuses a number outside `min..=max`, naming `key` and the range.
pub fn check_range<T: PartialOrd + std::fmt::Display>(
    key: &str,
    value: T,
    (min, max): (T, T),
) -> Result<(), SettingError> {
    if value >= min && value <= max {
        return Ok(());
    }
    Err(SettingError::new(
        key,
        format!("{value} is out of range: between {min} and {max}"),
    ))
}

/// Refuses a duration outside `min..=max`, naming `key` and the range; `why` (may be empty)
/// says what the minimum protects, and is said when the value is below it.
pub fn check_duration(
    key: &str,
    value: Duration,
    (min, max): (Duration, Duration),
    why: &str,
) -> Result<(), SettingError> {
    if value >= min && value <= max {
        return Ok(());
    }
    let show = |d: Duration| humantime::format_duration(d).to_string();
    let mut message = if min.is_zero() {
        format!("{} is too long: at most {}", show(value), show(max))
    } else {
        format!(
            "{} is out of range: between {} and {}",
            show(value),
            show(min),
            show(max)
        )
    };
    if !why.is_empty() && value < min {
        message.push_str(&format!(" ({why})"));
    }
    Err(SettingError::new(key, message))
}
