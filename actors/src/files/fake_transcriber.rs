//! A transcription server on loopback, answering as OpenAI's
//! `POST /v1/audio/transcriptions` documents (and faster-whisper-server and whisper.cpp's
//! server do): a `multipart/form-data` request with `file`, `model`, and maybe `language` and
//! `response_format`, answered `{"text": "..."}`. It can refuse (a status) or hang.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::testing::loopback::{Answer, Asked, Loopback};

/// How the fake answers.
#[derive(Debug, Clone)]
pub enum Hears {
    /// `{"text": TEXT}`.
    Words(String),
    /// This status, with an OpenAI-style error.
    Refuses(u16),
    /// Holds the request this long, then answers nothing useful.
    Hangs(Duration),
}

/// One request, as the fake read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Heard {
    pub model: Option<String>,
    pub language: Option<String>,
    pub filename: Option<String>,
    pub bytes: usize,
    pub authorization: Option<String>,
}

#[derive(Clone)]
pub struct FakeTranscriber {
    /// The endpoint to give as `url`.
    pub url: String,
    hears: Arc<Mutex<Hears>>,
    asked: Arc<Mutex<Vec<Heard>>>,
}

impl FakeTranscriber {
    /// Serves on a free loopback port, hearing `words` in every recording.
    pub fn start(words: &str) -> FakeTranscriber {
        let mut fake = FakeTranscriber {
            url: String::new(),
            hears: Arc::new(Mutex::new(Hears::Words(words.into()))),
            asked: Arc::default(),
        };
        let serving = fake.clone();
        let server = Loopback::start(0, move |asked| serving.answer(asked));
        fake.url = format!("{}/v1/audio/transcriptions", server.url());
        // It serves for the rest of the process, as a server would.
        std::mem::forget(server);
        fake
    }

    /// From now on, answers so.
    pub fn set(&self, hears: Hears) {
        *self.hears.lock().unwrap() = hears;
    }

    /// The requests so far.
    pub fn asked(&self) -> Vec<Heard> {
        self.asked.lock().unwrap().clone()
    }

    fn answer(&self, asked: Asked) -> Answer {
        if asked.method != "POST" || !asked.url.ends_with("/v1/audio/transcriptions") {
            return Answer::json(404, &json!({"error": {"message": "not found"}}));
        }
        let form = form_fields(&asked);
        self.asked.lock().unwrap().push(form);
        let hears = self.hears.lock().unwrap().clone();
        match hears {
            Hears::Words(text) => Answer::json(200, &json!({ "text": text })),
            Hears::Refuses(status) => Answer::json(
                status,
                &json!({"error": {"message": "the model is loading", "type": "server_error"}}),
            ),
            Hears::Hangs(wait) => {
                std::thread::sleep(wait);
                Answer::json(504, &json!({"error": {"message": "timed out"}}))
            }
        }
    }
}

/// The form's fields and its file's name and size.
fn form_fields(asked: &Asked) -> Heard {
    let boundary = asked
        .header("content-type")
        .and_then(|t| t.split_once("boundary="))
        .map(|(_, b)| b.trim_matches('"').to_string())
        .unwrap_or_default();
    let mut heard = Heard {
        model: None,
        language: None,
        filename: None,
        bytes: 0,
        authorization: asked.header("authorization").map(str::to_string),
    };
    let delimiter = format!("--{boundary}").into_bytes();
    for part in split(&asked.body, &delimiter) {
        let Some(end) = find(part, b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&part[..end]);
        let value = &part[end + 4..];
        let value = value.strip_suffix(b"\r\n").unwrap_or(value);
        let name = head
            .split("name=\"")
            .nth(1)
            .and_then(|r| r.split('"').next());
        let text = || String::from_utf8_lossy(value).into_owned();
        match name {
            Some("model") => heard.model = Some(text()),
            Some("language") => heard.language = Some(text()),
            Some("file") => {
                heard.filename = head
                    .split("filename=\"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .map(str::to_string);
                heard.bytes = value.len();
            }
            _ => {}
        }
    }
    heard
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn split<'a>(mut body: &'a [u8], delimiter: &[u8]) -> Vec<&'a [u8]> {
    let mut parts = Vec::new();
    while let Some(at) = find(body, delimiter) {
        parts.push(&body[..at]);
        body = &body[at + delimiter.len()..];
    }
    parts.into_iter().skip(1).collect()
}
