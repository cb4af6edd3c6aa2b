//! What channels and sources share, so that a platform is its settings, its requests and its
//! classification: the HTTP client and the words
//! for its failures ([`http`]), secret settings ([`secret`]), who may write and which chat feeds which session
//! ([`routing`]), each platform's API vocabulary ([`api`]), and a WebSocket held open to a
//! platform ([`websocket`]).

pub mod api;
pub mod http;
pub mod routing;
pub mod secret;
pub mod websocket;

use std::time::Duration;

/// Asks a platform whether it takes the credentials (a channel's or a source's
/// `ready_check`): `Err` says why the far end is not ready.
pub type ReadyCheck = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>>>>;

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

/// At most `max` characters of `text`; when cut, the last one is `…`.
pub fn cut_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}
