//! The agent's answer read from its transcript, where a hook's text is not to be trusted:
//! Gemini CLI's `AfterAgent` `prompt_response` can repeat tails of the stream (`echo: please
//! reply X reply X`), while its transcript holds the answer as the screen shows it.
//!
//! Bounded: only the last [`MAX_READ`] bytes of the file are read, once, when the turn ends.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;

/// How much of a transcript's end is read.
pub const MAX_READ: u64 = 4 * 1024 * 1024;

/// Gemini CLI's answer to the last prompt of its transcript (JSON lines: `{"type": "user",
/// ...}`, `{"type": "gemini", "content": ...}`): the model's messages after the last user
/// message, joined; `None` when there are none yet, or the file cannot be read.
pub fn gemini_answer(path: &Path) -> Option<String> {
    let tail = read_tail(path)?;
    let mut answer: Vec<String> = Vec::new();
    for line in tail.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match entry.get("type").and_then(Value::as_str) {
            Some("user") => answer.clear(),
            Some("gemini") => answer.extend(text_of(entry.get("content"))),
            _ => {}
        }
    }
    let answer = answer.join("\n\n");
    (!answer.trim().is_empty()).then_some(answer)
}

/// A message's text: a string, or the `text` of each of its parts.
fn text_of(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let text: String = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!text.is_empty()).then_some(text)
        }
        _ => None,
    }
    .filter(|t| !t.trim().is_empty())
}

/// The file's last [`MAX_READ`] bytes, from its first whole line.
fn read_tail(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(MAX_READ);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_READ).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Some(match start {
        0 => text,
        _ => text.split_once('\n').map(|(_, rest)| rest.to_string())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_the_model_text_after_the_last_user_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let lines = [
            r#"{"sessionId":"s","kind":"main"}"#,
            r#"{"id":"1","type":"user","content":[{"text":"please reply a"}]}"#,
            r#"{"id":"2","type":"gemini","content":"echo: please reply a"}"#,
            r#"{"$set":{"lastUpdated":"x"}}"#,
            r#"{"id":"3","type":"user","content":[{"text":"please reply b"}]}"#,
            r#"{"id":"4","type":"gemini","content":[{"text":"echo: "},{"text":"please reply b"}]}"#,
            r#"not json"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        assert_eq!(
            gemini_answer(&path).as_deref(),
            Some("echo: please reply b")
        );
        std::fs::write(&path, lines[..4].join("\n") + "\n" + lines[4]).unwrap();
        assert_eq!(
            gemini_answer(&path),
            None,
            "no answer after the last prompt yet"
        );
        assert_eq!(gemini_answer(&dir.path().join("missing")), None);
    }
}
