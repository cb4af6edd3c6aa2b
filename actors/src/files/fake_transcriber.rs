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
    let mut heard = Heard {
        model: None,
        language: None,
        filename: None,
        bytes: 0,
        authorization: asked.header("authorization").map(str::to_string),
    };
    for field in asked.form() {
        match field.name.as_str() {
            "model" => heard.model = Some(field.text()),
            "language" => heard.language = Some(field.text()),
            "file" => {
                heard.filename = field.filename.clone();
                heard.bytes = field.bytes.len();
            }
            _ => {}
        }
    }
    heard
}
