//! Files that come with a chat message: what the platform said of each (written with the row,
//! before anything is fetched), and the prompt the agent gets once they are fetched.
//!
//! ```text
//!   source reads a message ─▶ InboundMessage { content: caption, attachments: [what arrived] }
//!   delivering node: fetch each into the inbox, transcribe voice ─▶ Prepared (the row's prompt)
//!   the prompt pasted = caption + one line per file: its path, its transcript, or why not
//! ```
//! A file relayq does not fetch (over the platform's bot download limit, a kind it does not
//! handle) is still a line, saying what arrived and why it is not attached: never silence.

use serde::{Deserialize, Serialize};

crate::words! {
    /// What kind of file arrived.
    pub enum FileKind("file kind") {
        Photo = "photo",
        Document = "document",
        Audio = "audio",
        Voice = "voice",
        Video = "video",
        VideoNote = "video_note",
        Animation = "animation",
        /// A kind relayq does not fetch (a sticker, a location, a poll...).
        Other = "other",
    }
}

impl FileKind {
    /// The kind a file of type `mime` is, where the platform says no more (Slack's files,
    /// Discord's attachments): a photo, an audio, a video, else a document.
    pub fn of_mime(mime: &str) -> FileKind {
        match mime.split('/').next() {
            Some("image") => FileKind::Photo,
            Some("audio") => FileKind::Audio,
            Some("video") => FileKind::Video,
            _ => FileKind::Document,
        }
    }

    /// How the kind is named to a person and to the agent.
    pub fn noun(self) -> &'static str {
        match self {
            FileKind::Photo => "photo",
            FileKind::Document => "file",
            FileKind::Audio => "audio",
            FileKind::Voice => "voice note",
            FileKind::Video => "video",
            FileKind::VideoNote => "video note",
            FileKind::Animation => "animation",
            FileKind::Other => "attachment",
        }
    }
}

/// One file of a chat message, as the platform described it; filled in as it is fetched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    pub kind: FileKind,
    /// The platform's handle to fetch it with (a Telegram `file_id`, a Slack file's private
    /// download URL). Empty for what is not fetched.
    #[serde(default)]
    pub handle: String,
    /// The name the sender gave it, if any (never used as a path as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The type the platform says it has (the fetched file's own bytes are what count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// Seconds, for voice, audio and video.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<u64>,
    /// The platform message it came in (an album's messages are one row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it is not fetched, decided as it arrived: too large for the bot API, a kind relayq
    /// does not handle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// What became of it on the node that delivered the message (see [`Fetched`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched: Option<Fetched>,
}

impl Attachment {
    /// A file to fetch.
    pub fn new(kind: FileKind, handle: impl Into<String>) -> Self {
        Attachment {
            kind,
            handle: handle.into(),
            name: None,
            size: None,
            mime: None,
            duration: None,
            message: None,
            skipped: None,
            fetched: None,
        }
    }

    /// Something that arrived and is not fetched, and why (said in the prompt and the chat).
    pub fn not_fetched(kind: FileKind, why: impl Into<String>) -> Self {
        Attachment {
            skipped: Some(why.into()),
            ..Attachment::new(kind, "")
        }
    }

    /// How it is named in a line: `file build.log (12 KB)`, `voice note, 0:07`, `photo`.
    /// A kind relayq does not take is named by what it is (`sticker`).
    pub fn describe(&self) -> String {
        let name = self
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(printable);
        let mut words = match (self.kind, name) {
            (FileKind::Other, Some(what)) => what,
            (kind, Some(name)) => format!("{} {name}", kind.noun()),
            (kind, None) => kind.noun().to_string(),
        };
        if let Some(seconds) = self.duration {
            words.push_str(&format!(", {}:{:02}", seconds / 60, seconds % 60));
        }
        if let Some(size) = self.size.filter(|_| self.kind != FileKind::Voice) {
            words.push_str(&format!(" ({})", human_size(size)));
        }
        words
    }
}

/// What became of one attachment on the delivering node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Fetched {
    /// In the inbox at this path.
    Saved { path: String },
    /// A voice note heard: its words (and the audio's path).
    Heard { path: String, words: String },
    /// Saved, but not transcribed, and why (the agent gets the audio's path).
    NotHeard { path: String, why: String },
    /// Not attached, and why.
    Failed { why: String },
}

/// The prompt the agent gets: the caption, then a line per attachment, in order.
pub fn prompt(caption: &str, attachments: &[Attachment]) -> String {
    let mut lines: Vec<String> = Vec::new();
    if !caption.trim().is_empty() {
        lines.push(caption.to_string());
    }
    for a in attachments {
        let what = a.describe();
        let line = match (&a.skipped, &a.fetched) {
            (Some(why), _) => format!("[{what}, not attached: {why}]"),
            (None, Some(Fetched::Saved { path })) => format!("[{what}: {path}]"),
            (None, Some(Fetched::Heard { words, .. })) => format!("[{what}] {words}"),
            (None, Some(Fetched::NotHeard { path, why })) => {
                format!("[{what}, not transcribed ({why}): {path}]")
            }
            (None, Some(Fetched::Failed { why })) => format!("[{what}, not attached: {why}]"),
            (None, None) => format!("[{what}, not fetched]"),
        };
        lines.push(line);
    }
    lines.join("\n")
}

/// `n` bytes as a person reads them: `512 B`, `12 KB`, `25.0 MB`, counted in 1024s as the
/// platforms count their limits (Telegram's "20 MB" is 20 × 1024 × 1024 bytes).
pub fn human_size(n: u64) -> String {
    const KB: u64 = 1024;
    const MB: u64 = 1024 * KB;
    match n {
        n if n < KB => format!("{n} B"),
        n if n < MB => format!("{} KB", n.div_ceil(KB)),
        n => format!("{:.1} MB", n as f64 / MB as f64),
    }
}

/// A sender's file name kept to what prints: control characters, which a terminal would act
/// on, become `?`.
fn printable(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn photo(message: &str) -> Attachment {
        Attachment {
            message: Some(message.into()),
            ..Attachment::new(FileKind::Photo, "AgAD")
        }
    }

    #[test]
    fn the_prompt_is_the_caption_and_a_line_per_file_in_order() {
        let mut log = Attachment::new(FileKind::Document, "BQAD");
        log.name = Some("build.log".into());
        log.size = Some(12_345);
        let mut big = Attachment::not_fetched(
            FileKind::Document,
            "it is 25.0 MB, over Telegram's 20 MB bot download limit",
        );
        big.name = Some("dump.bin".into());
        let mut sticker = Attachment::not_fetched(FileKind::Other, "relayq does not take stickers");
        sticker.name = Some("sticker".into());
        let mut shot = photo("7");
        shot.fetched = Some(Fetched::Saved {
            path: "/p/.relayq/inbox/9/1-photo.jpg".into(),
        });
        log.fetched = Some(Fetched::Failed {
            why: "the download failed 3 times: HTTP 502".into(),
        });
        let files = [shot, log, big, sticker, photo("8")];
        assert_eq!(
            prompt("what is wrong here?", &files),
            "what is wrong here?\n\
             [photo: /p/.relayq/inbox/9/1-photo.jpg]\n\
             [file build.log (13 KB), not attached: the download failed 3 times: HTTP 502]\n\
             [file dump.bin, not attached: it is 25.0 MB, over Telegram's 20 MB bot download limit]\n\
             [sticker, not attached: relayq does not take stickers]\n\
             [photo, not fetched]"
        );
    }

    #[test]
    fn a_voice_note_heard_is_its_words_marked_with_its_length() {
        let mut voice = Attachment::new(FileKind::Voice, "AwAC");
        voice.duration = Some(67);
        voice.size = Some(9000);
        voice.fetched = Some(Fetched::Heard {
            path: "/p/v.oga".into(),
            words: "run the tests please".into(),
        });
        assert_eq!(
            prompt("", std::slice::from_ref(&voice)),
            "[voice note, 1:07] run the tests please"
        );
        voice.fetched = Some(Fetched::NotHeard {
            path: "/p/v.oga".into(),
            why: "no [transcription] is configured".into(),
        });
        assert_eq!(
            prompt("", &[voice]),
            "[voice note, 1:07, not transcribed (no [transcription] is configured): /p/v.oga]"
        );
    }

    #[test]
    fn a_senders_file_name_cannot_put_control_characters_in_the_prompt() {
        let mut doc = Attachment::new(FileKind::Document, "x");
        doc.name = Some("a\u{1b}[2Jb\nc".into());
        assert_eq!(doc.describe(), "file a?[2Jb?c");
    }
}
