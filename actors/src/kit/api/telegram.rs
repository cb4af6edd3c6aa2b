//! The Bot API's vocabulary, as the Telegram channel and source both speak it: its answer
//! envelope, its error text, its ids.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::kit::http::Reply;

/// The Bot API.
pub const API_URL: &str = "https://api.telegram.org";

/// Telegram, as the settings of its channel and its source name it.
#[derive(Debug, Clone, PartialEq)]
pub struct Telegram;

/// The Bot API's answer: `{"ok": true, "result": ...}` or
/// `{"ok": false, "error_code": N, "description": "...", "parameters": {...}}`.
#[derive(Debug, Deserialize)]
pub struct BotApiReply {
    pub ok: bool,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Parameters>,
}

/// `ResponseParameters`.
#[derive(Debug, Default, Deserialize)]
pub struct Parameters {
    pub retry_after: Option<u64>,
    pub migrate_to_chat_id: Option<i64>,
}

/// `Telegram 403: Forbidden: bot was blocked by the user`, or the HTTP status and body.
pub fn describe(reply: &Reply) -> String {
    match reply.json::<BotApiReply>().and_then(|a| a.description) {
        Some(d) => format!("Telegram {}: {d}", reply.status),
        None => reply.error(),
    }
}

/// A chat, thread or message id as Telegram takes it: a number when it is one (`-100123`), else
/// text (`@channelname`).
pub fn number_or_text(id: &str) -> Value {
    id.trim()
        .parse::<i64>()
        .map_or_else(|_| json!(id.trim()), |n| json!(n))
}

/// The emoji a bot may react with (`ReactionTypeEmoji`): the Bot API's fixed list; any other
/// is refused (`REACTION_INVALID`). There is no ✅ or ❌.
pub const REACTION_EMOJI: [&str; 73] = [
    "👍",
    "👎",
    "❤",
    "🔥",
    "🥰",
    "👏",
    "😁",
    "🤔",
    "🤯",
    "😱",
    "🤬",
    "😢",
    "🎉",
    "🤩",
    "🤮",
    "💩",
    "🙏",
    "👌",
    "🕊",
    "🤡",
    "🥱",
    "🥴",
    "😍",
    "🐳",
    "❤\u{200d}🔥",
    "🌚",
    "🌭",
    "💯",
    "🤣",
    "⚡",
    "🍌",
    "🏆",
    "💔",
    "🤨",
    "😐",
    "🍓",
    "🍾",
    "💋",
    "🖕",
    "😈",
    "😴",
    "😭",
    "🤓",
    "👻",
    "👨\u{200d}💻",
    "👀",
    "🎃",
    "🙈",
    "😇",
    "😨",
    "🤝",
    "✍",
    "🤗",
    "🫡",
    "🎅",
    "🎄",
    "☃",
    "💅",
    "🤪",
    "🗿",
    "🆒",
    "💘",
    "🙉",
    "🦄",
    "😘",
    "💊",
    "🙊",
    "😎",
    "👾",
    "🤷\u{200d}♂",
    "🤷",
    "🤷\u{200d}♀",
    "😡",
];
