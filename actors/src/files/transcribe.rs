//! Voice notes become words: `[transcription]`, an OpenAI-compatible
//! `POST /v1/audio/transcriptions` (a local whisper server — faster-whisper-server,
//! whisper.cpp's server — or a hosted one), asked with the recording once it is fetched.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use url::Url;

use crate::kit::http::{self, HttpClient, Multipart};
use crate::kit::secret::TokenSetting;
use crate::settings::SettingError;

/// `[transcription]` in config.toml.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptionSettings {
    /// The endpoint, e.g. `http://127.0.0.1:8000/v1/audio/transcriptions`.
    pub url: String,
    /// The model the server is asked for (`whisper-1`, or the server's own name for one).
    #[serde(default = "default_model")]
    pub model: String,
    /// The language spoken (ISO-639-1, e.g. `en`); not set: the server guesses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// How long one transcription may take.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The server's token, if it wants one (`Authorization: Bearer`): `token`, better
    /// `token_env` or `token_file`.
    #[serde(flatten)]
    pub token: TokenSetting,
}

fn default_model() -> String {
    "whisper-1".into()
}
fn default_timeout() -> Duration {
    Duration::from_secs(60)
}

impl TranscriptionSettings {
    /// Checks each value; the error names the key (the token is read when the daemon starts).
    pub fn check(&self) -> Result<(), SettingError> {
        http::check_url("url", &self.url)?;
        if self.model.trim().is_empty() {
            return Err(SettingError::new(
                "model",
                "is empty: name the model, e.g. \"whisper-1\"",
            ));
        }
        if let Some(language) = &self.language {
            let code = language.len() == 2 && language.chars().all(|c| c.is_ascii_lowercase());
            if !code {
                return Err(SettingError::new(
                    "language",
                    format!("{language:?} is not a two-letter language code, e.g. \"en\""),
                ));
            }
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&self.timeout) {
            return Err(SettingError::new("timeout", "must be from 1s to 10m"));
        }
        if self.token.is_given() {
            self.token.check()?;
        }
        Ok(())
    }

    /// Checks, reads the token, and makes the client.
    pub fn transcriber(&self) -> Result<Transcriber, SettingError> {
        self.check()?;
        let url = http::check_url("url", &self.url)?;
        let (headers, secrets) = match self.token.is_given() {
            true => {
                let token = self.token.resolve()?;
                (http::authorization("token", "Bearer", &token)?, vec![token])
            }
            false => (Default::default(), Vec::new()),
        };
        Ok(Transcriber {
            client: HttpClient::new(self.timeout, headers, secrets),
            url,
            model: self.model.clone(),
            language: self.language.clone(),
        })
    }
}

/// Asks the transcription server for a recording's words.
#[derive(Clone)]
pub struct Transcriber {
    client: HttpClient,
    url: Url,
    model: String,
    language: Option<String>,
}

impl Transcriber {
    /// The words spoken in the recording at `path`, or why there are none.
    pub async fn hear(&self, path: &Path, mime: Option<&str>) -> Result<String, String> {
        // A voice note is a few hundred KB: read whole, as the form's one file.
        let audio = tokio::fs::read(path)
            .await
            .map_err(|e| format!("cannot read the recording: {e}"))?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let mut form = Multipart::new()
            .text("model", &self.model)
            .text("response_format", "json");
        if let Some(language) = &self.language {
            form = form.text("language", language);
        }
        let form = form.file("file", &name, mime.unwrap_or("audio/ogg"), audio);
        let request = form.send_with(self.client.post(self.url.clone()));
        let reply = self.client.send(request).await.map_err(|no_answer| {
            format!(
                "the transcription server did not answer: {}",
                no_answer.text().unwrap_or("no answer")
            )
        })?;
        if !reply.is_success() {
            return Err(format!(
                "the transcription server refused: {}",
                reply.error()
            ));
        }
        let words = reply
            .json::<serde_json::Value>()
            .and_then(|answer| answer["text"].as_str().map(|t| t.trim().to_string()))
            .ok_or("the transcription server's answer has no text")?;
        match words.is_empty() {
            true => Err("the transcription server heard no words".into()),
            false => Ok(words),
        }
    }
}
