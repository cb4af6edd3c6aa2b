//! What channel kinds share, so that a platform is its settings, its requests and its
//! classification: the settings of a bot platform ([`bot`]), the HTTP client and the words for its failures ([`http`]), secret settings
//! ([`secret`]), notices rendered in each platform's markup ([`notice`]), and the conformance suite every HTTP channel passes (`conformance`, tests only).

pub mod bot;
#[cfg(test)]
pub mod conformance;
pub mod http;
pub mod notice;
pub mod secret;

use std::time::Duration;

/// The timeout of a channel kind that does not set its own.
pub fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

/// The last `max` bytes of `text` (a process's stderr, an error body), on a char boundary, for a
/// row's error.
pub fn tail(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

/// Whether `program` can be run: a path to a file, or a name found in a `$PATH` folder.
pub fn on_path(program: &str) -> bool {
    if program.contains('/') {
        return std::path::Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The first `max` bytes of `text`, on a char boundary.
pub fn head(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}
